//! Parquet as an input format, through the real ingest path on both backend pairs (S3
//! emulator + DynamoDB Local, and local folders + SQLite).
//!
//! The same orders written as CSV and as Parquet — the Parquet with its columns in another
//! order, an extra column, narrower types than the schema's (`int16` quantity, `decimal(10,2)`
//! amount, millisecond timestamps in another zone, dictionary-encoded customers), several row
//! groups, and once wrapped whole in gzip — give identical output rows and the same exact
//! rows and sums in the ledger and in the lake. A file whose columns break the contract (a
//! type that cannot be widened, a required column missing, a timestamp below the
//! microsecond) fails naming the column, is quarantined after `max_attempts`, and the good
//! objects of the same batch land exactly.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::builder::StringDictionaryBuilder;
use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, Decimal128Array, Int16Array, Int64Array, RecordBatch, StringArray,
    TimestampMillisecondArray, TimestampNanosecondArray,
};
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::properties::WriterProperties;
use serde_json::{Value, json};
use tidemark::config::Config;
use tidemark::ingest::{self, Response};
use tidemark::model::Status;
use tidemark::process::Pipeline;
use tidemark_tests::{
    Backends, Totals, direct, form_encode, orders_csv, orders_source, parquet_totals, sqs,
};

/// Attempts before quarantine in this suite.
const MAX_ATTEMPTS: u32 = 2;

/// The orders schema as CSV under `in/` and as Parquet under `pq/`.
fn config(b: &Backends) -> Arc<Config> {
    let source = |id: &str, prefix: &str, format: &str| {
        orders_source((&b.landing, &b.lake), id, prefix, format, MAX_ATTEMPTS)
    };
    let doc = json!({"sources": [
        source("orders", "in/", "csv"),
        source("orders_pq", "pq/", "parquet"),
    ]});
    Arc::new(Config::from_json(&doc.to_string()).expect("valid config"))
}

fn pipeline(b: &Backends) -> Pipeline {
    b.pipeline_with(config(b))
}

/// One order of [`orders_csv`], as values.
struct Order {
    id: i64,
    customer: String,
    quantity: i16,
    cents: i128,
    /// Milliseconds since the epoch.
    at_ms: i64,
}

/// The rows of [`orders_csv`]`(first_id, rows)`, as values.
fn orders(first_id: i64, rows: usize) -> Vec<Order> {
    let (csv, _) = orders_csv(first_id, rows);
    csv.lines()
        .skip(1)
        .map(|line| {
            let (id, rest) = line.split_once(",\"").unwrap();
            let (customer, rest) = rest.split_once("\",").unwrap();
            let fields: Vec<&str> = rest.split(',').collect();
            let [quantity, amount, at] = fields[..] else {
                panic!("{line}")
            };
            let (units, cents) = amount.split_once('.').unwrap();
            let at = chrono::DateTime::parse_from_rfc3339(at).unwrap();
            Order {
                id: id.parse().unwrap(),
                customer: customer.into(),
                quantity: quantity.parse().unwrap(),
                cents: units.parse::<i128>().unwrap() * 100 + cents.parse::<i128>().unwrap(),
                at_ms: at.timestamp_millis(),
            }
        })
        .collect()
}

/// `orders` as Parquet: the columns in another order than the schema's, narrower types
/// (widened when read), an extra column, `row_group_rows` rows per row group.
fn orders_parquet(orders: &[Order], row_group_rows: usize) -> Vec<u8> {
    let mut customers = StringDictionaryBuilder::<Int32Type>::new();
    for o in orders {
        customers.append_value(&o.customer);
    }
    let columns: Vec<(&str, ArrayRef)> = vec![
        (
            "ordered_at",
            Arc::new(
                TimestampMillisecondArray::from_iter_values(orders.iter().map(|o| o.at_ms))
                    .with_timezone("+05:30"),
            ),
        ),
        (
            "amount",
            Arc::new(
                Decimal128Array::from_iter_values(orders.iter().map(|o| o.cents))
                    .with_precision_and_scale(10, 2)
                    .unwrap(),
            ),
        ),
        (
            "note",
            Arc::new(StringArray::from_iter_values(
                orders.iter().map(|o| format!("not in the schema {}", o.id)),
            )),
        ),
        ("customer", Arc::new(customers.finish())),
        (
            "quantity",
            Arc::new(Int16Array::from_iter_values(
                orders.iter().map(|o| o.quantity),
            )),
        ),
        (
            "order_id",
            Arc::new(Int64Array::from_iter_values(orders.iter().map(|o| o.id))),
        ),
    ];
    write_parquet(columns, row_group_rows)
}

fn write_parquet(columns: Vec<(&str, ArrayRef)>, row_group_rows: usize) -> Vec<u8> {
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    let properties = WriterProperties::builder()
        .set_max_row_group_row_count(Some(row_group_rows))
        .build();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(properties)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    out
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

static SEQUENCER: AtomicU64 = AtomicU64::new(0x0300_0000_0000_0000);

/// An S3 notification record for the object now at `key`, as AWS sends it.
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

async fn invoke(b: &Backends, p: &Pipeline, payload: &Value) -> Response {
    ingest::handle(p, payload, &b.ctx("parquet"), 4)
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

/// Every row of a Parquet file, with its schema, as one batch.
fn batch_of(body: Bytes) -> RecordBatch {
    let builder = ParquetRecordBatchReaderBuilder::try_new(body).unwrap();
    let rows = builder.metadata().file_metadata().num_rows();
    let mut reader = builder
        .with_batch_size(usize::try_from(rows).unwrap().max(1))
        .build()
        .unwrap();
    let batch = reader.next().expect("rows").unwrap();
    assert!(reader.next().is_none(), "one batch");
    batch
}

/// Every lake object: key → rows and sums.
async fn lake(b: &Backends) -> BTreeMap<String, Totals> {
    let mut out = BTreeMap::new();
    for prefix in ["orders/", "orders_pq/"] {
        for (key, body) in b.lake_objects(prefix).await {
            out.insert(key, parquet_totals(body));
        }
    }
    out
}

/// The ledger's rows and sums of a committed object, as [`Totals`] (without order ids).
async fn ledger_totals(b: &Backends, source: &str, key: &str) -> (u64, String, String) {
    let rec = record(b, source, key).await;
    assert_eq!(rec.status, Status::Done, "{rec:?}");
    let c = rec.committed.expect("committed");
    (c.rows, c.sums["quantity"].clone(), c.sums["amount"].clone())
}

fn cents(t: &Totals) -> String {
    format!("{}.{:02}", t.amount_cents / 100, t.amount_cents % 100)
}

async fn parquet_equal_to_csv_gives_identical_rows_and_sums(b: Backends) {
    let p = pipeline(&b);
    let (csv, totals) = orders_csv(1, 2500);
    let rows = orders(1, 2500);
    let (wrapped_csv, wrapped_totals) = orders_csv(5001, 700);
    b.upload("in/a.csv", &csv).await;
    b.upload("pq/a.parquet", orders_parquet(&rows, 1000)).await;
    b.upload("in/b.csv", &wrapped_csv).await;
    b.upload(
        "pq/b.parquet.gz",
        gzip(&orders_parquet(&orders(5001, 700), 256)),
    )
    .await;
    let mut messages = Vec::new();
    for key in ["in/a.csv", "pq/a.parquet", "in/b.csv", "pq/b.parquet.gz"] {
        messages.push((key, direct(vec![notification(&b, key).await])));
    }
    let r = invoke(&b, &p, &sqs(messages)).await;
    assert!(r.retry_messages.is_empty() && r.errors.is_empty(), "{r:?}");
    assert_eq!(
        (r.summary.processed, r.summary.rows),
        (4, 2 * (2500 + 700)),
        "{r:?}"
    );

    let outputs = b.lake_objects("").await;
    for (csv_key, parquet_key, expected) in [
        (
            "orders/a.csv.parquet",
            "orders_pq/a.parquet.parquet",
            totals,
        ),
        (
            "orders/b.csv.parquet",
            "orders_pq/b.parquet.gz.parquet",
            wrapped_totals,
        ),
    ] {
        let from_csv = batch_of(outputs[csv_key].clone());
        let from_parquet = batch_of(outputs[parquet_key].clone());
        assert_eq!(from_parquet.schema(), from_csv.schema(), "{parquet_key}");
        assert_eq!(from_parquet, from_csv, "{parquet_key}: identical rows");
        assert_eq!(parquet_totals(outputs[csv_key].clone()), expected);
        assert_eq!(parquet_totals(outputs[parquet_key].clone()), expected);
    }
    let want = (totals.rows, totals.quantity.to_string(), cents(&totals));
    assert_eq!(ledger_totals(&b, "orders", "in/a.csv").await, want);
    assert_eq!(ledger_totals(&b, "orders_pq", "pq/a.parquet").await, want);
    let want = (
        wrapped_totals.rows,
        wrapped_totals.quantity.to_string(),
        cents(&wrapped_totals),
    );
    assert_eq!(
        ledger_totals(&b, "orders_pq", "pq/b.parquet.gz").await,
        want
    );
    println!("{}: {totals:?} {wrapped_totals:?}", b.name);
}

async fn incompatible_files_are_quarantined_and_the_good_ones_land(b: Backends) {
    let p = pipeline(&b);
    let good = orders(1, 40);
    let (good_csv, good_totals) = orders_csv(1, 40);
    b.upload("in/good.csv", &good_csv).await;
    b.upload("pq/good.parquet", orders_parquet(&good, 16)).await;

    let ids = || -> ArrayRef { Arc::new(Int64Array::from(vec![1, 2, 3])) };
    let bad: [(&str, Vec<u8>, String); 3] = [
        (
            "pq/text-quantity.parquet",
            write_parquet(
                vec![
                    ("order_id", ids()),
                    ("quantity", Arc::new(StringArray::from(vec!["1", "two", "3"]))),
                ],
                10,
            ),
            r#"column "quantity": type Utf8 in the file cannot be read as int32"#.into(),
        ),
        (
            "pq/no-order-id.parquet",
            write_parquet(
                vec![("quantity", Arc::new(Int16Array::from(vec![1, 2, 3])) as ArrayRef)],
                10,
            ),
            r#"column "order_id": missing from the file, and the source's schema requires it"#
                .into(),
        ),
        (
            "pq/nanos.parquet",
            write_parquet(
                vec![
                    ("order_id", ids()),
                    (
                        "ordered_at",
                        Arc::new(
                            TimestampNanosecondArray::from(vec![0, 1_000, 1_704_164_645_000_000_001])
                                .with_timezone("UTC"),
                        ),
                    ),
                ],
                10,
            ),
            r#"row 3: column "ordered_at": 2024-01-02T03:04:05.000000001Z has digits below the microsecond and would be truncated"#
                .into(),
        ),
    ];
    let mut messages = vec![
        (
            "good-csv",
            direct(vec![notification(&b, "in/good.csv").await]),
        ),
        (
            "good-parquet",
            direct(vec![notification(&b, "pq/good.parquet").await]),
        ),
    ];
    for (key, body, _) in &bad {
        b.upload(key, body).await;
        messages.push((*key, direct(vec![notification(&b, key).await])));
    }
    let batch = sqs(messages);

    let r = invoke(&b, &p, &batch).await;
    let mut retried = r.retry_messages.clone();
    retried.sort();
    let mut bad_keys: Vec<&str> = bad.iter().map(|(k, _, _)| *k).collect();
    bad_keys.sort();
    assert_eq!(retried, bad_keys, "{r:?}");
    assert_eq!(
        (r.summary.processed, r.summary.failed, r.summary.rows),
        (2, 3, 80),
        "{r:?}"
    );
    for (key, _, error) in &bad {
        let rec = record(&b, "orders_pq", key).await;
        assert_eq!((rec.status, rec.attempts), (Status::Failed, 1), "{rec:?}");
        assert_eq!(
            rec.last_error.as_deref(),
            Some(format!("s3://{}/{key}: {error}", b.landing).as_str())
        );
    }

    // Delivered again: the bad objects are quarantined, the batch acknowledged.
    let r = invoke(&b, &p, &batch).await;
    assert!(r.retry_messages.is_empty(), "{r:?}");
    assert_eq!(
        (r.summary.quarantined, r.summary.duplicates),
        (3, 2),
        "{r:?}"
    );
    for (key, _, error) in &bad {
        let rec = record(&b, "orders_pq", key).await;
        assert_eq!(
            (rec.status, rec.attempts),
            (Status::Quarantined, MAX_ATTEMPTS)
        );
        assert!(rec.last_error.as_deref().unwrap().ends_with(error.as_str()));
        assert!(rec.committed.is_none());
    }
    assert_eq!(
        lake(&b).await,
        BTreeMap::from([
            ("orders/good.csv.parquet".to_string(), good_totals),
            ("orders_pq/good.parquet.parquet".to_string(), good_totals),
        ]),
        "the good objects only, exactly"
    );
    println!("{}: {bad_keys:?} quarantined", b.name);
}

tidemark_tests::on_both!(
    parquet_equal_to_csv_gives_identical_rows_and_sums,
    incompatible_files_are_quarantined_and_the_good_ones_land,
);
