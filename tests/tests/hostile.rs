//! Hostile input, through the real ingest path on both backend pairs (S3 emulator + DynamoDB
//! Local, and local folders + SQLite): each malformed object fails with an error naming the
//! object (`s3://bucket/key`) and, where there is one, the line and column; the error is
//! recorded on its ledger record, which is quarantined after `max_attempts`; and it costs
//! nothing else: the good objects delivered in the same SQS batch are processed, their rows
//! and sums land exactly, and nothing else is written.
//!
//! Under the default policy (`on_bad_row: fail`) every bad row fails its object: a file is
//! converted whole or not at all, so the lake never holds part of an object. Under
//! `on_bad_row: reject` the rows whose error is their own go to the object's rejects file,
//! counted in the ledger and by reconcile (the last tests here).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use serde_json::{Value, json};
use tidemark::config::Config;
use tidemark::ingest::{self, Response};
use tidemark::model::Status;
use tidemark::ports::{Clock, GetOutcome, WriteCondition};
use tidemark::process::Pipeline;
use tidemark::reconcile;
use tidemark_tests::{
    Backends, LEASE_MARGIN_MS, Totals, direct, form_encode, orders_csv, orders_jsonl,
    orders_source, parquet_totals, sqs,
};

/// Attempts before quarantine in these suites.
const MAX_ATTEMPTS: u32 = 2;

const HEADER: &str = "order_id,customer,quantity,amount,ordered_at\n";
const ROW: &str = "1,a,1,1.00,2024-03-01T00:00:00Z\n";

/// The suites' orders schema as CSV under `in/` and JSON Lines under `json/`, each source
/// with `limits` merged in (e.g. `{"max_object_bytes": 1000}`).
fn config(b: &Backends, limits: Value) -> Arc<Config> {
    let source = |id: &str, prefix: &str, format: &str| {
        let mut s = orders_source((&b.landing, &b.lake), id, prefix, format, MAX_ATTEMPTS);
        for (k, v) in limits.as_object().into_iter().flatten() {
            s[k] = v.clone();
        }
        s
    };
    let mut trail = source("trail", "trail/", "jsonl");
    trail["schema"] = json!([
        {"name": "eventName", "type": "string"},
        {"name": "userIdentity", "type": "struct<type:string,arn:string,sessionContext:struct<attributes:struct<mfaAuthenticated:bool>>>"},
        {"name": "resources", "type": "array<struct<ARN:string,type:string>>"},
        {"name": "detail", "type": "json"},
        {"name": "user_arn", "path": "userIdentity.arn", "type": "string"}
    ]);
    trail["sum_columns"] = json!([]);
    let doc = json!({"sources": [
        source("orders", "in/", "csv"),
        source("orders_json", "json/", "jsonl"),
        trail,
    ]});
    Arc::new(Config::from_json(&doc.to_string()).expect("valid config"))
}

fn pipeline(b: &Backends, config: Arc<Config>) -> Pipeline {
    b.pipeline_with(config)
}

static SEQUENCER: AtomicU64 = AtomicU64::new(0x0200_0000_0000_0000);

/// An S3 notification record for the object now at `key`, as AWS sends it (key
/// form-encoded, real ETag and size).
async fn notification(b: &Backends, key: &str) -> Value {
    let meta = b
        .store
        .head(&b.landing, key)
        .await
        .expect("head")
        .unwrap_or_else(|| panic!("{key} was not landed"));
    let seq = format!("{:018X}", SEQUENCER.fetch_add(1, Ordering::SeqCst));
    json!({
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
        "eventTime": "2026-11-29T12:00:00.000Z", "eventName": "ObjectCreated:Put",
        "s3": {
            "s3SchemaVersion": "1.0", "configurationId": "tidemark",
            "bucket": {"name": b.landing, "arn": format!("arn:aws:s3:::{}", b.landing)},
            "object": {"key": form_encode(key), "size": meta.size, "eTag": meta.etag, "sequencer": seq}
        }
    })
}

/// The same object as an EventBridge `Object Created` event (the key verbatim).
async fn eventbridge(b: &Backends, key: &str) -> Value {
    let meta = b.store.head(&b.landing, key).await.expect("head").unwrap();
    json!({
        "version": "0", "id": "17793124-05d4-b198-2fde-7ededc63b103",
        "detail-type": "Object Created", "source": "aws.s3", "account": "123456789012",
        "time": "2026-11-29T12:00:00Z", "region": "us-east-1",
        "resources": [format!("arn:aws:s3:::{}", b.landing)],
        "detail": {"version": "0", "bucket": {"name": b.landing},
                   "object": {"key": key, "size": meta.size, "etag": meta.etag,
                              "sequencer": format!("{:018X}", SEQUENCER.fetch_add(1, Ordering::SeqCst))},
                   "request-id": "N4N7GDK58NMKJ12R", "requester": "123456789012",
                   "reason": "PutObject"}
    })
}

async fn invoke(b: &Backends, p: &Pipeline, payload: &Value) -> Response {
    ingest::handle(p, payload, &b.ctx("hostile"), 4)
        .await
        .expect("payload decodes")
}

async fn record(b: &Backends, source: &str, key: &str) -> tidemark::model::Record {
    b.ledger
        .get(source, key)
        .await
        .expect("ledger read")
        .unwrap_or_else(|| panic!("no ledger record for {source}/{key}"))
}

/// Every lake object: key → rows and sums.
async fn lake(b: &Backends) -> BTreeMap<String, Totals> {
    let mut out = BTreeMap::new();
    for prefix in ["orders/", "orders_json/"] {
        for (key, body) in b.lake_objects(prefix).await {
            out.insert(key, parquet_totals(body));
        }
    }
    out
}

static GOOD: AtomicU64 = AtomicU64::new(0);

/// Lands a new good CSV and a new good JSON Lines object; returns their notifications and
/// the lake objects they must give.
async fn good_objects(b: &Backends) -> (Value, Value, BTreeMap<String, Totals>) {
    let n = GOOD.fetch_add(1, Ordering::SeqCst);
    let (csv, csv_totals) = orders_csv(1, 25);
    let (jsonl, json_totals) = orders_jsonl(1000, 17);
    let (csv_key, json_key) = (format!("in/good-{n}.csv"), format!("json/good-{n}.jsonl"));
    b.upload(&csv_key, &csv).await;
    b.upload(&json_key, &jsonl).await;
    let expected = BTreeMap::from([
        (format!("orders/good-{n}.csv.parquet"), csv_totals),
        (format!("orders_json/good-{n}.jsonl.parquet"), json_totals),
    ]);
    (
        notification(b, &csv_key).await,
        notification(b, &json_key).await,
        expected,
    )
}

/// The source that claims `key` in [`config`].
fn source_of(key: &str) -> &'static str {
    if key.starts_with("json/") {
        "orders_json"
    } else if key.starts_with("trail/") {
        "trail"
    } else {
        "orders"
    }
}

/// Delivers the object at `key` in one SQS batch between a good CSV and a good JSON Lines
/// object, again until it is quarantined, and checks that it fails with an error that names
/// it and contains `expected`, that the error is on its ledger record, and that the good
/// objects land exactly and nothing else does. Returns the error.
async fn fails_alone(b: &Backends, p: &Pipeline, key: &str, expected: &str) -> String {
    let mut expected_lake = lake(b).await;
    let (good_csv, good_json, good_lake) = good_objects(b).await;
    expected_lake.extend(good_lake);
    let batch = sqs(vec![
        ("good-csv", direct(vec![good_csv])),
        ("hostile", direct(vec![notification(b, key).await])),
        ("good-json", direct(vec![good_json])),
    ]);
    let named = format!("s3://{}/{key}: ", b.landing);

    let r = invoke(b, p, &batch).await;
    assert_eq!(r.retry_messages, ["hostile"], "{r:?}");
    assert_eq!(
        (r.summary.processed, r.summary.failed, r.summary.rows),
        (2, 1, 42),
        "{r:?}"
    );
    let [error] = &r.errors[..] else {
        panic!("one error: {:?}", r.errors)
    };
    assert!(
        error.starts_with(&named) && error.contains(expected),
        "expected {named}…{expected}…, got {error}"
    );
    let rec = record(b, source_of(key), key).await;
    assert_eq!((rec.status, rec.attempts), (Status::Failed, 1), "{rec:?}");
    assert_eq!(rec.last_error.as_deref(), Some(error.as_str()));

    // SQS delivers the failed message again; the last attempt quarantines the object and
    // the batch is acknowledged.
    let r = invoke(b, p, &batch).await;
    assert!(r.retry_messages.is_empty(), "{r:?}");
    assert_eq!(
        (r.summary.quarantined, r.summary.duplicates),
        (1, 2),
        "{r:?}"
    );
    let rec = record(b, source_of(key), key).await;
    assert_eq!(
        (rec.status, rec.attempts),
        (Status::Quarantined, MAX_ATTEMPTS)
    );
    assert_eq!(rec.last_error.as_deref(), Some(error.as_str()));
    assert!(rec.committed.is_none());

    // Later deliveries cost nothing and change nothing.
    let r = invoke(b, p, &batch).await;
    assert!(r.retry_messages.is_empty() && r.errors.is_empty(), "{r:?}");
    assert_eq!(
        lake(b).await,
        expected_lake,
        "the good objects only, exactly"
    );
    println!("{}: {error}", b.name);
    error.clone()
}

/// Lands `body` at `key` and checks that it fails alone (see [`fails_alone`]).
async fn land_and_fail(b: &Backends, key: &str, body: impl AsRef<[u8]>, expected: &str) -> String {
    b.upload(key, body).await;
    fails_alone(b, &pipeline(b, config(b, json!({}))), key, expected).await
}

fn csv_with(row: &str) -> String {
    format!("{HEADER}{ROW}{row}\n3,c,3,3.00,2024-03-03T00:00:00Z\n")
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

// ---- malformed CSV ----------------------------------------------------------------------

async fn csv_wrong_field_count(b: Backends) {
    let e = land_and_fail(&b, "in/fields.csv", csv_with("2,b,2"), "line 3: ").await;
    assert!(e.ends_with("line 3: expected 5 fields, got 3"), "{e}");
    let e = land_and_fail(
        &b,
        "in/more.csv",
        csv_with("2,b,2,2.00,2024-03-02T00:00:00Z,extra"),
        "line 3: expected 5 fields, got more than 5",
    )
    .await;
    assert!(e.contains("got more than 5"));
}

async fn csv_text_after_a_closing_quote(b: Backends) {
    land_and_fail(
        &b,
        "in/quote.csv",
        csv_with("2,\"abc\"x,2,2.00,2024-03-02T00:00:00Z"),
        r#"line 3: column "customer": text after the closing quote of a quoted field"#,
    )
    .await;
}

async fn csv_quote_never_closed(b: Backends) {
    land_and_fail(
        &b,
        "in/open.csv",
        csv_with("2,\"abc,2,2.00,2024-03-02T00:00:00Z"),
        r#"line 3: column "customer": a quoted field is still open at the end of the input"#,
    )
    .await;
}

async fn csv_unparsable_number(b: Backends) {
    land_and_fail(
        &b,
        "in/number.csv",
        csv_with("2,b,two,2.00,2024-03-02T00:00:00Z"),
        r#"line 3: column "quantity": cannot parse "two" as int32"#,
    )
    .await;
}

async fn csv_decimal_that_would_be_rounded(b: Backends) {
    land_and_fail(
        &b,
        "in/rounded.csv",
        csv_with("2,b,2,1.005,2024-03-02T00:00:00Z"),
        r#"line 3: column "amount": cannot parse "1.005" as decimal(12,2): it has more than 2 digits after the point and would be rounded"#,
    )
    .await;
}

async fn csv_unparsable_timestamp(b: Backends) {
    land_and_fail(
        &b,
        "in/time.csv",
        csv_with("2,b,2,2.00,2024-02-30T00:00:00Z"),
        r#"line 3: column "ordered_at": cannot parse "2024-02-30T00:00:00Z" as timestamp"#,
    )
    .await;
    land_and_fail(
        &b,
        "in/nanos.csv",
        csv_with("2,b,2,2.00,2024-03-02T00:00:00.1234567Z"),
        r#"line 3: column "ordered_at": cannot parse "2024-03-02T00:00:00.1234567Z" as timestamp: it has digits below the microsecond and would be truncated"#,
    )
    .await;
}

async fn csv_invalid_utf8(b: Backends) {
    let mut body = csv_with("2,b\u{e9}r\u{e9},2,2.00,2024-03-02T00:00:00Z").into_bytes();
    // Latin-1: "béré" as it was before someone converted it
    let at = body.iter().position(|&c| c == 0xc3).unwrap();
    body.splice(at..at + 2, [0xe9]);
    land_and_fail(
        &b,
        "in/latin1.csv",
        &body,
        r#"line 3: column "customer": invalid UTF-8"#,
    )
    .await;
    // A character split by a delimiter: arrow-csv checks the fields of a batch joined,
    // so alone it would accept both halves as strings.
    let mut body = csv_with("@").into_bytes();
    let at = body.iter().position(|&c| c == b'@').unwrap();
    body.splice(at..at + 1, *b"2,x\xda,\x92,2.00,2024-03-02T00:00:00Z");
    land_and_fail(
        &b,
        "in/split.csv",
        &body,
        r#"line 3: column "customer": invalid UTF-8"#,
    )
    .await;
    // UTF-16 (with its byte order mark), as some spreadsheet exports write it
    let utf16: Vec<u8> = [0xff, 0xfe]
        .into_iter()
        .chain(
            csv_with("2,b,2,2.00,2024-03-02T00:00:00Z")
                .encode_utf16()
                .flat_map(u16::to_le_bytes),
        )
        .collect();
    land_and_fail(&b, "in/utf16.csv", &utf16, "line 2: ").await;
}

/// Lands 100 MiB at `key`: `start`, then `filler` repeated, uploaded in parts of 10 MiB made
/// as they go up, never in memory at once.
async fn land_100_mib(b: &Backends, key: &str, start: &[u8], filler: &[u8]) {
    const PART: usize = 10 << 20;
    let id = b
        .store
        .create_multipart(&b.landing, key, &BTreeMap::new())
        .await
        .expect("create upload");
    let mut parts = Vec::new();
    for n in 1..=10 {
        let mut part = Vec::with_capacity(PART);
        if n == 1 {
            part.extend_from_slice(start);
        }
        while part.len() < PART {
            part.extend_from_slice(filler);
        }
        part.truncate(PART);
        let etag = b
            .store
            .upload_part(&b.landing, key, &id, n, Bytes::from(part))
            .await
            .expect("upload part");
        parts.push((n, etag));
    }
    let written = b
        .store
        .complete_multipart(&b.landing, key, &id, &parts, &WriteCondition::Absent)
        .await
        .expect("complete upload");
    assert!(matches!(
        written,
        tidemark::ports::PutOutcome::Written { .. }
    ));
}

async fn csv_record_of_100_mb(b: Backends) {
    // 100 MiB in one line.
    let key = "in/one-line.csv";
    land_100_mib(&b, key, format!("{HEADER}{ROW}2,").as_bytes(), b"x").await;
    let p = pipeline(&b, config(&b, json!({})));
    fails_alone(
        &b,
        &p,
        key,
        r#"line 3: column "customer": the record is longer than the limit of 8388608 bytes (max_record_bytes)"#,
    )
    .await;
    let_go(&b, key).await;
}

/// Deletes the 100 MiB object at `key` once its test is done: the S3 emulator keeps an
/// object's bytes in a temporary file until the object goes, and the suites run beside it.
async fn let_go(b: &Backends, key: &str) {
    b.store
        .delete(&b.landing, key, None)
        .await
        .expect("delete the 100 MiB object");
}

// ---- malformed JSON Lines -----------------------------------------------------------------

fn jsonl_with(line: &str) -> String {
    let ok = r#"{"order_id":1,"customer":"a","quantity":1,"amount":"1.00","ordered_at":"2024-03-01T00:00:00Z"}"#;
    format!("{ok}\n{line}\n{ok}\n")
}

async fn json_line_that_is_not_an_object(b: Backends) {
    for (i, (line, shown)) in [
        ("[1,2]", "[1,2]"),
        ("42", "42"),
        ("null", "null"),
        ("\"x\"", "\"x\""),
    ]
    .into_iter()
    .enumerate()
    {
        land_and_fail(
            &b,
            &format!("json/not-object-{i}.jsonl"),
            jsonl_with(line),
            &format!("line 2: not a JSON object: expected {{ got {shown}"),
        )
        .await;
    }
}

async fn json_line_that_is_not_one_value(b: Backends) {
    land_and_fail(
        &b,
        "json/truncated.jsonl",
        jsonl_with(r#"{"order_id":2,"customer":"b""#),
        "line 2: expected exactly one JSON value on the line",
    )
    .await;
    land_and_fail(
        &b,
        "json/two.jsonl",
        jsonl_with(r#"{"order_id":2} {"order_id":3}"#),
        "line 2: expected exactly one JSON value on the line",
    )
    .await;
}

async fn json_wrong_types(b: Backends) {
    land_and_fail(
        &b,
        "json/customer.jsonl",
        jsonl_with(r#"{"order_id":2,"customer":5}"#),
        r#"line 2: column "customer": expected string got 5"#,
    )
    .await;
    land_and_fail(
        &b,
        "json/quantity.jsonl",
        jsonl_with(r#"{"order_id":2,"quantity":"two"}"#),
        r#"line 2: column "quantity": cannot parse "two" as int32"#,
    )
    .await;
    land_and_fail(
        &b,
        "json/time.jsonl",
        jsonl_with(r#"{"order_id":2,"ordered_at":1700000000}"#),
        r#"line 2: column "ordered_at": cannot parse 1700000000 as timestamp: write times as RFC 3339 strings"#,
    )
    .await;
    land_and_fail(
        &b,
        "json/missing.jsonl",
        jsonl_with(r#"{"customer":"no id"}"#),
        r#"line 2: column "order_id": missing value in a non-nullable column"#,
    )
    .await;
}

async fn json_fraction_in_an_integer_column(b: Backends) {
    land_and_fail(
        &b,
        "json/fraction.jsonl",
        jsonl_with(r#"{"order_id":2,"quantity":1.5}"#),
        r#"line 2: column "quantity": cannot parse 1.5 as int32: it is not a whole number"#,
    )
    .await;
}

async fn json_decimal_that_would_be_rounded(b: Backends) {
    land_and_fail(
        &b,
        "json/rounded.jsonl",
        jsonl_with(r#"{"order_id":2,"amount":"1.005"}"#),
        r#"line 2: column "amount": cannot parse "1.005" as decimal(12,2): it has more than 2 digits after the point and would be rounded"#,
    )
    .await;
    land_and_fail(
        &b,
        "json/rounded-number.jsonl",
        jsonl_with(r#"{"order_id":2,"amount":0.125}"#),
        r#"line 2: column "amount": cannot parse 0.125 as decimal(12,2): it has more than 2 digits"#,
    )
    .await;
}

async fn json_key_given_twice(b: Backends) {
    land_and_fail(
        &b,
        "json/twice.jsonl",
        jsonl_with(r#"{"order_id":2,"amount":"2.00","amount":"3.00"}"#),
        r#"line 2: column "amount": the key appears twice in the object"#,
    )
    .await;
}

async fn json_invalid_utf8(b: Backends) {
    let mut body = jsonl_with(r#"{"order_id":2,"customer":"b\u00e9"}"#)
        .replace("\\u00e9", "\u{e9}")
        .into_bytes();
    let at = body.iter().position(|&c| c == 0xc3).unwrap();
    body.splice(at..at + 2, [0xe9]);
    land_and_fail(&b, "json/latin1.jsonl", &body, "line 2: invalid UTF-8").await;
    // A character split between a value and the next key (arrow-json's own check sees
    // the strings of a batch joined).
    let mut body = jsonl_with("@").into_bytes();
    let at = body.iter().position(|&c| c == b'@').unwrap();
    body.splice(
        at..at + 1,
        *b"{\"order_id\":2,\"customer\":\"x\xda\",\"\x92\":1}",
    );
    land_and_fail(&b, "json/split.jsonl", &body, "line 2: invalid UTF-8").await;
}

// ---- nested JSON Lines --------------------------------------------------------------------

/// A CloudTrail-shaped line between two good ones, `record` spliced in.
fn trail_with(record: &str) -> String {
    let ok = r#"{"eventName":"GetObject","userIdentity":{"type":"IAMUser","arn":"arn:aws:iam::1:user/a","sessionContext":{"attributes":{"mfaAuthenticated":true}}},"resources":[{"ARN":"arn:aws:s3:::b/k","type":"AWS::S3::Object"}],"detail":{"bytes":1}}"#;
    format!("{ok}\n{record}\n{ok}\n")
}

async fn json_nested_wrong_type_deep_inside(b: Backends) {
    land_and_fail(
        &b,
        "trail/maybe.json",
        trail_with(r#"{"userIdentity":{"sessionContext":{"attributes":{"mfaAuthenticated":"maybe"}}}}"#),
        r#"line 2: column "userIdentity.sessionContext.attributes.mfaAuthenticated": expected bool got "maybe""#,
    )
    .await;
    land_and_fail(
        &b,
        "trail/arn.json",
        trail_with(r#"{"resources":[{"ARN":"a"},{"ARN":{"nested":[1,2,3]}}]}"#),
        r#"line 2: column "resources[1].ARN": expected string got {"nested":[1,2,3]}"#,
    )
    .await;
}

async fn json_nested_key_repeated_at_depth(b: Backends) {
    land_and_fail(
        &b,
        "trail/twice.json",
        trail_with(r#"{"userIdentity":{"type":"a","arn":"x","type":"b"}}"#),
        r#"line 2: column "userIdentity.type": the key appears twice in the object"#,
    )
    .await;
}

async fn json_nested_100_000_deep(b: Backends) {
    // In a json column: refused, naming it, with no stack spent on the depth.
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    land_and_fail(
        &b,
        "trail/deep.json",
        trail_with(&format!(r#"{{"detail":{deep}}}"#)),
        r#"line 2: column "detail": the value is nested deeper than 1000 levels"#,
    )
    .await;
    // In a struct column: a value of the wrong type, shown cut short.
    let shown = "[".repeat(80);
    land_and_fail(
        &b,
        "trail/deep-struct.json",
        trail_with(&format!(r#"{{"userIdentity":{deep}}}"#)),
        &format!(r#"line 2: column "userIdentity": expected struct<type:string,arn:string,sessionContext:struct<attributes:struct<mfaAuthenticated:bool>>> got {shown}…"#),
    )
    .await;
}

async fn json_nested_array_of_100_mb(b: Backends) {
    // One line holding an array of 100 MiB, after a good line.
    let key = "trail/huge-array.json";
    let mut start = trail_with("").lines().next().unwrap().as_bytes().to_vec();
    start.extend_from_slice(b"\n{\"detail\":[0");
    land_100_mib(&b, key, &start, b",7").await;
    let p = pipeline(&b, config(&b, json!({})));
    fails_alone(
        &b,
        &p,
        key,
        "line 2: the line is longer than the limit of 8388608 bytes (max_record_bytes)",
    )
    .await;
    let_go(&b, key).await;
}

// ---- compression and limits ---------------------------------------------------------------

async fn truncated_gzip(b: Backends) {
    let (csv, _) = orders_csv(1, 200);
    let gz = gzip(csv.as_bytes());
    land_and_fail(
        &b,
        "in/cut.csv.gz",
        &gz[..gz.len() * 2 / 3],
        "cannot decompress input: gzip: ",
    )
    .await;
    // Not gzip at all, under a .gz name.
    land_and_fail(
        &b,
        "in/plain.csv.gz",
        csv,
        "cannot decompress input: gzip: ",
    )
    .await;
}

async fn gzip_bomb(b: Backends) {
    // 1 GiB of valid rows in about a megabyte: one member of 1 MiB of rows, concatenated
    // 1024 times (a multi-member gzip file, as `cat a.gz b.gz` makes).
    let rows: String = ROW.repeat((1 << 20) / ROW.len());
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(rows.as_bytes()).unwrap();
    let member = e.finish().unwrap();
    let mut bomb = gzip(HEADER.as_bytes());
    for _ in 0..1024 {
        bomb.extend_from_slice(&member);
    }
    assert!(bomb.len() < 4 << 20, "{} bytes expand to 1 GiB", bomb.len());
    let key = "in/bomb.csv.gz";
    b.upload(key, &bomb).await;
    let p = pipeline(&b, config(&b, json!({"max_decoded_bytes": 10 << 20})));
    fails_alone(
        &b,
        &p,
        key,
        "decompressed input exceeds the limit of 10485760 bytes",
    )
    .await;
}

async fn object_larger_than_the_limit(b: Backends) {
    let (csv, _) = orders_csv(1, 100);
    let key = "in/big.csv";
    b.upload(key, &csv).await;
    // The good objects stay under the limit: 25 and 17 rows.
    let p = pipeline(&b, config(&b, json!({"max_object_bytes": 2000})));
    let e = fails_alone(&b, &p, key, "more than the source's max_object_bytes 2000").await;
    assert!(
        e.ends_with(&format!(
            "object is {} bytes, more than the source's max_object_bytes 2000",
            csv.len()
        )),
        "{e}"
    );
}

// ---- accepted as they are -----------------------------------------------------------------

/// Lands each `(key, body, totals)` and checks that it is processed into an output with
/// those rows and sums, in one batch with the good objects.
async fn accepted(b: &Backends, objects: &[(&str, Vec<u8>, Totals)]) {
    let p = pipeline(b, config(b, json!({})));
    let (good_csv, good_json, mut expected) = good_objects(b).await;
    let mut messages = vec![
        ("good-csv".to_string(), direct(vec![good_csv])),
        ("good-json".to_string(), direct(vec![good_json])),
    ];
    for (key, body, _) in objects {
        b.upload(key, body).await;
        messages.push((key.to_string(), direct(vec![notification(b, key).await])));
    }
    let r = invoke(
        b,
        &p,
        &sqs(messages
            .iter()
            .map(|(id, m)| (id.as_str(), m.clone()))
            .collect()),
    )
    .await;
    assert!(r.errors.is_empty(), "{r:?}");
    assert_eq!(r.summary.processed, objects.len() + 2, "{r:?}");
    let lake = lake(b).await;
    for (key, _, totals) in objects {
        let rec = record(b, source_of(key), key).await;
        assert_eq!(rec.status, Status::Done);
        assert_eq!(rec.committed.as_ref().unwrap().rows, totals.rows, "{key}");
        let (prefix, rel) = key.split_once('/').unwrap();
        let out = format!("{}/{rel}.parquet", source_of(&format!("{prefix}/")));
        let found = lake.get(&out).unwrap_or_else(|| panic!("no output {out}"));
        assert_eq!(
            found, totals,
            "{out} holds a valid Parquet file of the rows"
        );
        expected.insert(out, *found);
    }
    assert_eq!(lake, expected);
}

async fn empty_header_only_and_bom_objects_are_processed(b: Backends) {
    let (csv, t) = orders_csv(1, 3);
    let (jsonl, _) = orders_jsonl(1, 3);
    let none = Totals::default();
    accepted(
        &b,
        &[
            // A 0-byte object: 0 rows (a valid Parquet file with the schema), not an error.
            ("in/empty.csv", Vec::new(), none),
            ("json/empty.jsonl", Vec::new(), none),
            ("json/blank.jsonl", b"\n\r\n  \n".to_vec(), none),
            ("in/header-only.csv", HEADER.as_bytes().to_vec(), none),
            (
                "in/header-only-crlf.csv",
                HEADER.replace('\n', "\r\n").into_bytes(),
                none,
            ),
            // A UTF-8 byte order mark is dropped, plain or compressed.
            ("in/bom.csv", format!("\u{feff}{csv}").into_bytes(), t),
            ("json/bom.jsonl", format!("\u{feff}{jsonl}").into_bytes(), t),
            (
                "in/bom.csv.gz",
                gzip(format!("\u{feff}{csv}").as_bytes()),
                t,
            ),
        ],
    )
    .await;
}

// ---- keys, routing and payloads -----------------------------------------------------------

/// Keys with every awkward character: reserved and unsafe URL characters, `+` and `%`,
/// spaces at either end, control characters, dot segments and empty segments, the folder
/// store's reserved names, non-ASCII in every script, combining and invisible characters,
/// and a long segment.
fn awkward_keys() -> Vec<String> {
    let mut keys: Vec<String> = [
        "in/sp ace.csv",
        "in/plus+sign.csv",
        "in/percent%25literal.csv",
        "in/100%.csv",
        "in/q?uery#frag.csv",
        "in/amp&eq=semi;colon:at@dollar$comma,.csv",
        "in/quotes\"and'apos`.csv",
        "in/back\\slash.csv",
        "in/brackets[]{}()<>.csv",
        "in/caret^pipe|tilde~star*bang!.csv",
        "in/ leading and trailing space .csv ",
        "in/tab\there.csv",
        "in/new\nline.csv",
        "in/cr\rx.csv",
        "in/ctrl\u{1}\u{1f}.csv",
        "in/del\u{7f}.csv",
        "in/dots/../x.csv",
        "in/./y.csv",
        "in//double-slash.csv",
        "in/trailing-dot.csv.",
        "in/.hidden.csv",
        "in/.tidemark-meta/x.csv",
        "in/naïve-ñ-ü.csv",
        "in/中文/日本語/한국어.csv",
        "in/emoji/😀🎉.csv",
        "in/rtl/עברית-العربية.csv",
        "in/zero\u{200b}width\u{feff}.csv",
        "in/e\u{301}-decomposed.csv",
        "in/\u{e9}-composed.csv",
    ]
    .map(String::from)
    .into();
    keys.push(format!("in/{}.csv", "long-segment-".repeat(15)));
    keys
}

/// One output read back by key (not by listing: see below).
async fn output(b: &Backends, key: &str) -> Totals {
    let GetOutcome::Found { mut body, .. } = b.store.get(&b.lake, key, None).await.expect("get")
    else {
        panic!("no output {key:?}")
    };
    let mut bytes = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut body, &mut bytes)
        .await
        .expect("read");
    parquet_totals(Bytes::from(bytes))
}

async fn keys_with_every_awkward_character_are_processed(b: Backends) {
    let p = pipeline(&b, config(&b, json!({})));
    let mut keys = awkward_keys();
    if b.name == "aws" {
        // moto answers 404 to a PutObject whose key holds a newline (its URL routes do not
        // match one); S3 itself accepts any UTF-8 key.
        keys.retain(|k| !k.contains('\n'));
    }
    let mut expected = BTreeMap::new();
    let mut records = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        // The event decoder reads back what S3's form encoding wrote.
        assert_eq!(
            tidemark::events::decode_form_key(&form_encode(key)).unwrap(),
            *key
        );
        let (csv, totals) = orders_csv(i as i64 * 100, 3 + i);
        b.upload(key, &csv).await;
        records.push(notification(&b, key).await);
        let rel = key.strip_prefix("in/").unwrap();
        expected.insert(format!("orders/{rel}.parquet"), totals);
    }
    let r = invoke(&b, &p, &direct(records)).await;
    assert!(r.errors.is_empty(), "{:#?}", r.errors);
    assert_eq!(r.summary.processed, keys.len(), "{r:?}");
    for (out, totals) in &expected {
        assert_eq!(output(&b, out).await, *totals, "{out:?}");
    }
    for key in &keys {
        let rec = record(&b, "orders", key).await;
        assert_eq!(rec.status, Status::Done, "{key:?}");
    }
    // EventBridge delivers the key verbatim: the same objects, so every event is a duplicate.
    for key in &keys {
        let r = invoke(&b, &p, &eventbridge(&b, key).await).await;
        let counts = (r.summary.duplicates, r.errors.len());
        assert_eq!(counts, (1, 0), "{key:?}: {r:?}");
    }
    // Exactly these outputs, listed back (url-encoded listings carry every key).
    assert_eq!(lake(&b).await, expected);
}

/// XML text cannot hold most control characters (and turns a carriage return into a
/// newline): `S3Store::list` asks for `encoding-type=url` and decodes the keys, so one such
/// key does not make every listing of its prefix fail (and reconcile and backfill with it).
#[tokio::test]
async fn s3_listings_of_keys_with_control_characters() {
    let b = Backends::aws().await;
    let (csv, _) = orders_csv(1, 2);
    for key in ["in/ctrl\u{1}.csv", "in/cr\rx.csv", "in/plain.csv"] {
        b.upload(key, &csv).await;
    }
    let page = b.store.list(&b.landing, "in/", None).await.expect("list");
    let keys: Vec<_> = page.objects.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, ["in/cr\rx.csv", "in/ctrl\u{1}.csv", "in/plain.csv"]);
}

async fn events_no_source_claims_are_acknowledged_as_unrouted(b: Backends) {
    let p = pipeline(&b, config(&b, json!({})));
    let (csv, _) = orders_csv(1, 2);
    for key in ["other/a.csv", "in/", "in/dir/", "input/a.csv", "IN/a.csv"] {
        b.upload(key, &csv).await;
    }
    let mut elsewhere = notification(&b, "other/a.csv").await;
    elsewhere["s3"]["bucket"]["name"] = "some-other-bucket".into();
    let mut records = vec![elsewhere];
    for key in ["other/a.csv", "in/", "in/dir/", "input/a.csv", "IN/a.csv"] {
        records.push(notification(&b, key).await);
    }
    let batch = sqs(records
        .into_iter()
        .enumerate()
        .map(|(i, r)| (["m0", "m1", "m2", "m3", "m4", "m5"][i], direct(vec![r])))
        .collect());
    let r = invoke(&b, &p, &batch).await;
    assert!(r.retry_messages.is_empty() && r.errors.is_empty(), "{r:?}");
    assert_eq!((r.summary.events, r.summary.unrouted), (6, 6), "{r:?}");
    for source in ["orders", "orders_json"] {
        assert!(
            b.ledger.list(source).await.unwrap().is_empty(),
            "nothing recorded"
        );
    }
    assert!(lake(&b).await.is_empty());
}

async fn manual_payloads_with_unknown_fields_are_refused(b: Backends) {
    let p = pipeline(&b, config(&b, json!({})));
    let config = config(&b, json!({}));
    // backfill: the function's payload type refuses unknown (misspelled) fields by name
    for (payload, named) in [
        (json!({"source": "orders", "max_object": 3}), "max_object"),
        (json!({"source": "orders", "dryrun": true}), "dryrun"),
        (
            json!({"source": "orders", "prefix": "in/", "extra": {"nested": 1}}),
            "extra",
        ),
    ] {
        let e = serde_json::from_value::<tidemark::backfill::Request>(payload).unwrap_err();
        assert!(
            e.to_string().contains(&format!("unknown field `{named}`")),
            "{e}"
        );
    }
    assert!(serde_json::from_value::<tidemark::backfill::Request>(json!({"source": 5})).is_err());
    // reconcile: a manual request with an unknown field is refused, nothing is done
    let now = chrono::DateTime::from_timestamp_millis(b.clock.now_ms()).unwrap();
    let unknown = json!({
        "source": "orders", "from": (now - chrono::Duration::days(1)).to_rfc3339(),
        "to": now.to_rfc3339(), "repair": false, "dry_run": true
    });
    let e = tidemark::reconcile::handle(&p, &config, &unknown, &b.ctx("manual"), i64::MAX)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("dry_run"), "{e}");
    // ingest: a payload of no known shape is refused whole
    let e = ingest::handle(
        &p,
        &json!({"source": "orders", "key": "in/a.csv"}),
        &b.ctx("x"),
        4,
    )
    .await
    .unwrap_err();
    assert!(e.to_string().starts_with("unrecognized payload"), "{e}");
    // …while unknown fields inside AWS's own event shapes are ignored: AWS adds fields.
    let (csv, _) = orders_csv(1, 2);
    b.upload("in/a.csv", &csv).await;
    let mut n = notification(&b, "in/a.csv").await;
    n["s3"]["object"]["newField"] = json!({"added": "by AWS later"});
    n["glacierEventData"] = json!({});
    let r = invoke(&b, &p, &direct(vec![n])).await;
    assert_eq!(r.summary.processed, 1, "{r:?}");
    // And a configuration with an impossible limit fails naming the field.
    let e = Config::from_json(
        &json!({"sources": [{"source_id": "x", "bucket": "b", "format": "csv",
            "schema": [{"name": "a", "type": "int32"}], "output": {"bucket": "l"},
            "max_record_bytes": 0}]})
        .to_string(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("sources[0].max_record_bytes"), "{e}");
}

// ---- policy reject --------------------------------------------------------------------

const Q3: &str = "3,c,3,3.00,2024-03-03T00:00:00Z";
const Q5: &str = "5,e,5,5.00,2024-03-05T00:00:00Z";

/// A rejects file read back: one JSON object per line.
async fn rejects_file(b: &Backends, key: &str) -> Vec<Value> {
    let GetOutcome::Found { mut body, .. } = b.store.get(&b.lake, key, None).await.unwrap() else {
        panic!("no rejects file {key}")
    };
    let mut bytes = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut body, &mut bytes)
        .await
        .unwrap();
    String::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// Delivers the event of the object now at `key`.
async fn deliver(b: &Backends, p: &Pipeline, key: &str) -> Response {
    invoke(b, p, &direct(vec![notification(b, key).await])).await
}

async fn lake_has(b: &Backends, key: &str) -> bool {
    b.store.head(&b.lake, key).await.unwrap().is_some()
}

/// Under `on_bad_row: reject`: bad rows of CSV and JSON Lines objects go to their rejects
/// files (naming object, version, line, column, error and the record), the other rows land
/// exactly, the ledger counts them, reconcile reports and checks them; an object with more
/// bad rows than `max_rejected_rows` is quarantined; a clean overwrite and a delete remove
/// the rejects file.
async fn bad_rows_go_to_the_rejects_file_under_policy_reject(b: Backends) {
    let config = config(&b, json!({"on_bad_row": "reject", "max_rejected_rows": 3}));
    let p = pipeline(&b, config.clone());
    let csv = format!("{HEADER}{ROW}2,b,x,2.00,2024-03-02T00:00:00Z\n{Q3}\n4,d\n{Q5}\n");
    let jsonl = concat!(
        r#"{"order_id":1,"customer":"a","quantity":1,"amount":"1.00","ordered_at":"2024-03-01T00:00:00Z"}"#,
        "\n[\"not\",\"an object\"]\n",
        r#"{"order_id":2,"quantity":2.5}"#,
        "\n",
        r#"{"order_id":3,"customer":"c","quantity":3,"amount":"3.00"}"#,
        "\n",
    );
    let too_bad = format!("{HEADER}x\ny\n{ROW}z\nw\n");
    b.upload("in/mixed.csv", &csv).await;
    b.upload("json/mixed.jsonl", jsonl).await;
    b.upload("in/too-bad.csv", &too_bad).await;
    let batch = sqs(vec![
        ("csv", direct(vec![notification(&b, "in/mixed.csv").await])),
        (
            "too-bad",
            direct(vec![notification(&b, "in/too-bad.csv").await]),
        ),
        (
            "json",
            direct(vec![notification(&b, "json/mixed.jsonl").await]),
        ),
    ]);
    let r = invoke(&b, &p, &batch).await;
    assert_eq!(r.retry_messages, ["too-bad"], "{r:?}");
    assert_eq!(
        (r.summary.processed, r.summary.rows, r.summary.rejected),
        (2, 5, 4),
        "{r:?}"
    );
    let too_bad_error = format!(
        "s3://{}/in/too-bad.csv: more than 3 bad rows (max_rejected_rows); the last: line 6: expected 5 fields, got 1",
        b.landing
    );
    assert_eq!(r.errors, std::slice::from_ref(&too_bad_error));
    let r = invoke(&b, &p, &batch).await;
    assert_eq!(r.summary.quarantined, 1, "{r:?}");
    let rec = record(&b, "orders", "in/too-bad.csv").await;
    assert_eq!(rec.status, Status::Quarantined);
    assert_eq!(rec.last_error.as_deref(), Some(too_bad_error.as_str()));
    assert!(!lake_has(&b, "orders/_rejects/too-bad.csv.jsonl").await);
    assert!(!lake_has(&b, "orders/too-bad.csv.parquet").await);

    // The ledger: good rows and their sums, the rejected count, the rejects file.
    let rec = record(&b, "orders", "in/mixed.csv").await;
    let c = rec.committed.as_ref().expect("committed");
    assert_eq!((rec.status, c.rows, c.rejected), (Status::Done, 3, 2));
    assert_eq!(c.sums["quantity"], "9");
    assert_eq!(c.sums["amount"], "9.00");
    let rejects = c.rejects.as_ref().expect("a rejects file");
    assert_eq!(rejects.key, "orders/_rejects/mixed.csv.jsonl");
    let version = match &c.target {
        tidemark::model::Target::Version(v) => v.version.clone(),
        t => panic!("{t:?}"),
    };
    // The lake: exactly the good rows.
    let out = b.lake_objects("orders/mixed.csv.parquet").await;
    let totals = parquet_totals(out["orders/mixed.csv.parquet"].clone());
    assert_eq!(
        (
            totals.rows,
            totals.order_ids,
            totals.quantity,
            totals.amount_cents
        ),
        (3, 9, 9, 900)
    );
    // The rejects file: object, version, line, column, error, record.
    let lines = rejects_file(&b, &rejects.key).await;
    assert_eq!(
        lines,
        [
            json!({"bucket": b.landing, "key": "in/mixed.csv", "version": version, "line": 3,
                   "column": "quantity", "error": "line 3: column \"quantity\": cannot parse \"x\" as int32",
                   "record": "2,b,x,2.00,2024-03-02T00:00:00Z"}),
            json!({"bucket": b.landing, "key": "in/mixed.csv", "version": version, "line": 5,
                   "column": null, "error": "line 5: expected 5 fields, got 2", "record": "4,d"}),
        ]
    );
    let rec = record(&b, "orders_json", "json/mixed.jsonl").await;
    let c = rec.committed.as_ref().expect("committed");
    assert_eq!(
        (c.rows, c.rejected, c.sums["quantity"].as_str()),
        (2, 2, "4")
    );
    let lines = rejects_file(&b, "orders_json/_rejects/mixed.jsonl.jsonl").await;
    let errors: Vec<&str> = lines.iter().map(|l| l["error"].as_str().unwrap()).collect();
    assert_eq!(
        errors,
        [
            "line 2: not a JSON object: expected { got [\"not\",\"an object\"]",
            "line 3: column \"quantity\": cannot parse 2.5 as int32: it is not a whole number",
        ]
    );

    // Reconcile counts the rejected rows (and checks each object's count against a recount).
    let window = reconcile::Window {
        from_ms: 0,
        to_ms: b.clock.now_ms() + 86_400_000,
    };
    let opts = reconcile::Options {
        repair: false,
        deep_sample: Some(1.0),
        ..reconcile::Options::default()
    };
    let orders = config.source("orders").unwrap();
    let report = reconcile::reconcile_source(&p, orders, window, opts.clone(), &b.ctx("rec"))
        .await
        .unwrap();
    assert_eq!(report.rejected_rows, 2);
    assert!(report.mismatches.is_empty(), "{:?}", report.mismatches);
    let kinds: Vec<_> = report
        .findings
        .iter()
        .map(|f| (f.kind, f.key.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [(reconcile::FindingKind::Quarantined, "in/too-bad.csv")]
    );
    let all = reconcile::Report {
        run_id: "rec".into(),
        generated_at: 0,
        sources: vec![report],
        jobs: Vec::new(),
        freshness: Vec::new(),
    };
    let metrics = all.metric_lines().join("\n");
    assert!(metrics.contains("\"RejectedRows\":2"), "{metrics}");
    assert!(all.to_html().contains("2 rows rejected"));

    // A rejects file that went missing is a mismatch naming it.
    b.store.delete(&b.lake, &rejects.key, None).await.unwrap();
    let report = reconcile::reconcile_source(&p, orders, window, opts.clone(), &b.ctx("rec"))
        .await
        .unwrap();
    let found: Vec<_> = report
        .mismatches
        .iter()
        .map(|m| (m.kind, m.key.as_str(), m.measure.clone(), m.found.as_str()))
        .collect();
    assert_eq!(
        found,
        [(
            reconcile::MismatchKind::OutputMissing,
            "in/mixed.csv",
            format!("s3://{}/orders/_rejects/mixed.csv.jsonl", b.lake),
            "no such object"
        )]
    );

    // A clean overwrite: all rows land, no rejects file is left.
    b.upload("in/mixed.csv", format!("{HEADER}{ROW}{Q3}\n"))
        .await;
    let r = deliver(&b, &p, "in/mixed.csv").await;
    assert_eq!((r.summary.processed, r.summary.rows), (1, 2), "{r:?}");
    let rec = record(&b, "orders", "in/mixed.csv").await;
    let c = rec.committed.as_ref().unwrap();
    assert_eq!((c.rows, c.rejected, c.rejects.is_none()), (2, 0, true));
    // (The rejects file was deleted by hand above; write one again to see it go.)
    b.upload("in/mixed.csv", &csv).await;
    deliver(&b, &p, "in/mixed.csv").await;
    assert!(lake_has(&b, "orders/_rejects/mixed.csv.jsonl").await);
    b.upload("in/mixed.csv", format!("{HEADER}{ROW}{Q3}\n"))
        .await;
    deliver(&b, &p, "in/mixed.csv").await;
    assert!(!lake_has(&b, "orders/_rejects/mixed.csv.jsonl").await);

    // A delete removes the output and the rejects file.
    b.upload("in/mixed.csv", &csv).await;
    deliver(&b, &p, "in/mixed.csv").await;
    assert!(lake_has(&b, "orders/_rejects/mixed.csv.jsonl").await);
    b.store
        .delete(&b.landing, "in/mixed.csv", None)
        .await
        .unwrap();
    let seq = format!("{:018X}", SEQUENCER.fetch_add(1, Ordering::SeqCst));
    let removed = json!({
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
        "eventTime": "2026-11-29T12:00:00.000Z", "eventName": "ObjectRemoved:Delete",
        "s3": {"s3SchemaVersion": "1.0", "configurationId": "tidemark",
               "bucket": {"name": b.landing, "arn": format!("arn:aws:s3:::{}", b.landing)},
               "object": {"key": "in/mixed.csv", "sequencer": seq}}
    });
    let r = invoke(&b, &p, &direct(vec![removed])).await;
    assert!(r.errors.is_empty(), "{r:?}");
    assert_eq!(
        record(&b, "orders", "in/mixed.csv").await.status,
        Status::Deleted
    );
    assert!(!lake_has(&b, "orders/_rejects/mixed.csv.jsonl").await);
    assert!(!lake_has(&b, "orders/mixed.csv.parquet").await);
}

/// Stops the worker once at `step` for every key: as if its process died there.
struct DieAt(tidemark::process::Step, std::sync::Mutex<bool>);

impl tidemark::process::Faults for DieAt {
    fn check(&self, step: tidemark::process::Step, _: &str) -> tidemark::error::Result<()> {
        let mut fired = self.1.lock().unwrap();
        if step == self.0 && !*fired {
            *fired = true;
            return Err(tidemark::error::ProcessError::Crashed(step.as_str()));
        }
        Ok(())
    }
}

/// Under `on_bad_row: reject`, a worker dying after the output and rejects file are
/// written, or just before the commit, leaves (after a retry) the rejects file of the
/// version committed and nothing else: on an overwrite with other bad rows, and on one with
/// none.
async fn a_crash_leaves_the_rejects_file_of_the_committed_version_only(b: Backends) {
    use tidemark::process::Step;
    let config = config(&b, json!({"on_bad_row": "reject"}));
    let p = pipeline(&b, config.clone());
    let v1 = format!("{HEADER}{ROW}2,b,x,2.00,2024-03-02T00:00:00Z\n");
    let v2 = format!("{HEADER}{ROW}y\n{Q3}\nz,z\n");
    let clean = format!("{HEADER}{ROW}{Q5}\n");
    for (n, step) in [Step::AfterOutputPut, Step::BeforeCommit]
        .into_iter()
        .enumerate()
    {
        let key = format!("in/crash-{n}.csv");
        let rejects_key = format!("orders/_rejects/crash-{n}.csv.jsonl");
        b.upload(&key, &v1).await;
        deliver(&b, &p, &key).await;
        assert_eq!(rejects_file(&b, &rejects_key).await.len(), 1);
        for (body, rows, rejected) in [(&v2, 2, 2), (&clean, 2, 0)] {
            b.upload(&key, body).await;
            let event = direct(vec![notification(&b, &key).await]);
            let mut dying = pipeline(&b, config.clone());
            dying.faults = Arc::new(DieAt(step, std::sync::Mutex::new(false)));
            let r = invoke(&b, &dying, &event).await;
            assert_eq!(r.summary.failed, 1, "{step:?}: {r:?}");
            b.clock.advance(LEASE_MARGIN_MS + 1);
            let r = invoke(&b, &p, &event).await;
            assert_eq!(
                (r.summary.processed, r.summary.rows),
                (1, rows),
                "{step:?}: {r:?}"
            );
            let rec = record(&b, "orders", &key).await;
            let c = rec.committed.as_ref().unwrap();
            assert_eq!((c.rows, c.rejected), (rows, rejected), "{step:?}");
            match &c.rejects {
                Some(o) => {
                    let lines = rejects_file(&b, &o.key).await;
                    let at: Vec<_> = lines.iter().map(|l| l["line"].as_u64().unwrap()).collect();
                    assert_eq!(at, [3, 5], "{step:?}: the new version's rows");
                    let head = b.store.head(&b.lake, &o.key).await.unwrap().unwrap();
                    assert_eq!(head.etag, o.etag, "the ledger names the file as it is");
                }
                None => assert!(
                    !lake_has(&b, &rejects_key).await,
                    "{step:?}: no rejects left"
                ),
            }
        }
    }
}

tidemark_tests::on_both!(
    csv_wrong_field_count,
    csv_text_after_a_closing_quote,
    csv_quote_never_closed,
    csv_unparsable_number,
    csv_decimal_that_would_be_rounded,
    csv_unparsable_timestamp,
    csv_invalid_utf8,
    csv_record_of_100_mb,
    json_line_that_is_not_an_object,
    json_line_that_is_not_one_value,
    json_wrong_types,
    json_fraction_in_an_integer_column,
    json_decimal_that_would_be_rounded,
    json_key_given_twice,
    json_invalid_utf8,
    json_nested_wrong_type_deep_inside,
    json_nested_key_repeated_at_depth,
    json_nested_100_000_deep,
    json_nested_array_of_100_mb,
    truncated_gzip,
    gzip_bomb,
    object_larger_than_the_limit,
    empty_header_only_and_bom_objects_are_processed,
    keys_with_every_awkward_character_are_processed,
    events_no_source_claims_are_acknowledged_as_unrouted,
    manual_payloads_with_unknown_fields_are_refused,
    bad_rows_go_to_the_rejects_file_under_policy_reject,
    a_crash_leaves_the_rejects_file_of_the_committed_version_only,
);
