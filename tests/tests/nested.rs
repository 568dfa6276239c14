//! A CloudTrail-shaped source end to end, on both backend pairs (S3 emulator + DynamoDB
//! Local, and local folders + SQLite): nested struct, array and `json` columns, columns read
//! from paths (one of them summed, one the upsert's key), rescued fields and values, lineage
//! columns, objects overwritten and deleted, a Delta table merged by a path column and read
//! back by an independent reader (the Python `deltalake` package), and both reconcile tiers
//! on every object: clean, with the source's rows and sums equal to the ledger's and the
//! lake's.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use tidemark::config::Config;
use tidemark::ports::Clock;
use tidemark::reconcile::{self, Options, Window};
use tidemark_tests::table_reader::{publisher, read_table, table_uri};
use tidemark_tests::{Backends, Events};

const TRAIL: &str = "trail";

fn config(b: &Backends) -> Arc<Config> {
    Arc::new(Config::from_json(&doc(b).to_string()).expect("valid config"))
}

/// The source: a Delta table merged by user ARN, newest event time winning.
fn doc(b: &Backends) -> Value {
    json!({"sources": [{
        "source_id": TRAIL, "bucket": b.landing, "prefix": "trail/", "format": "jsonl",
        "schema": [
            {"name": "event_time", "path": "eventTime", "type": "timestamp", "nullable": false},
            {"name": "event_id", "path": "eventID", "type": "string", "nullable": false},
            {"name": "eventVersion", "type": "string"},
            {"name": "eventName", "type": "string"},
            {"name": "userIdentity", "type": "struct<type:string,arn:string,accountId:string,sessionContext:struct<attributes:struct<mfaAuthenticated:string,creationDate:timestamp>>>"},
            {"name": "resources", "type": "array<struct<ARN:string,accountId:string,type:string>>"},
            {"name": "requestParameters", "type": "json"},
            {"name": "user_arn", "path": "userIdentity.arn", "type": "string"},
            {"name": "bytes_in", "path": "additionalEventData.bytesTransferredIn", "type": "int64"}
        ],
        "sum_columns": ["bytes_in"],
        "on_unknown_field": "rescue",
        "on_bad_value": "rescue",
        "metadata_columns": {"_source_key": "key", "_source_modified": "last_modified", "_row": "row_number"},
        "output": {"bucket": b.lake, "prefix": "trail/",
            "table": {"format": "delta", "merge_keys": ["user_arn"], "merge_order": "event_time"}},
        "reconcile": {"deep_sample": 1.0},
        "max_attempts": 2
    }]})
}

/// One CloudTrail-shaped record (`extra` spliced into its object).
fn event(id: &str, user: &str, at: &str, bytes: i64, extra: &str) -> String {
    let record = json!({
        "eventVersion": "1.08",
        "eventTime": at,
        "eventID": id,
        "eventName": "PutObject",
        "userIdentity": {
            "type": "IAMUser",
            "arn": format!("arn:aws:iam::111122223333:user/{user}"),
            "accountId": "111122223333",
            "sessionContext": {"attributes": {"mfaAuthenticated": "false",
                "creationDate": "2026-12-01T08:00:00Z"}}
        },
        "resources": [
            {"ARN": format!("arn:aws:s3:::landing/{id}"), "accountId": "111122223333", "type": "AWS::S3::Object"},
            {"ARN": "arn:aws:s3:::landing", "type": "AWS::S3::Bucket"}
        ],
        "requestParameters": {"bucketName": "landing", "key": id, "x-amz-acl": ["private"]},
        "additionalEventData": {"bytesTransferredIn": bytes}
    })
    .to_string();
    if extra.is_empty() {
        record
    } else {
        format!("{},{extra}}}", &record[..record.len() - 1])
    }
}

fn lines(events: &[String]) -> String {
    events.iter().map(|e| format!("{e}\n")).collect()
}

/// The table's rows by user ARN: (event id, rescued data, source key, row number); fails if a
/// user is there twice.
fn by_user(b: &Backends, t: &Value) -> BTreeMap<String, (String, Value, String, i64)> {
    let columns = t["columns"].as_array().unwrap();
    let at = |name: &str| {
        columns
            .iter()
            .position(|c| c == name)
            .unwrap_or_else(|| panic!("no column {name} in {columns:?}"))
    };
    let mut out = BTreeMap::new();
    for row in t["table"].as_array().unwrap() {
        let user = row[at("user_arn")]
            .as_str()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap();
        let value = (
            row[at("event_id")].as_str().unwrap().to_string(),
            row[at("_rescued_data")].clone(),
            row[at("_source_key")].as_str().unwrap().to_string(),
            row[at("_row")].as_i64().unwrap(),
        );
        if let Some(before) = out.insert(user.to_string(), value) {
            panic!("{}: user {user} twice ({before:?}): {t}", b.name);
        }
    }
    out
}

async fn a_cloudtrail_source_end_to_end(b: Backends) {
    let config = config(&b);
    let publisher = publisher(&b, &config);
    let source = config.source(TRAIL).unwrap();
    let uri = table_uri(&b, source);
    let mut ev = Events::new(&b, &config);
    let (t0, t1, t2, t3) = (
        "2026-12-01T09:00:00Z",
        "2026-12-01T10:00:00Z",
        "2026-12-01T11:00:00Z",
        "2026-12-01T12:00:00Z",
    );
    let (a, bk) = ("trail/2026/12/01/a.json", "trail/2026/12/01/b.json");
    let publish = |key: &str| {
        let keys = vec![key.to_string()];
        let publisher = &publisher;
        async move { publisher.publish_keys(TRAIL, &keys).await.unwrap() }
    };

    // a: u1 twice (the later one with a field the schema lacks), u2 once.
    ev.put(
        a,
        &lines(&[
            event("e1", "u1", t1, 100, ""),
            event("e2", "u2", t1, 200, ""),
            event("e3", "u1", t2, 300, r#""vpcEndpointId":"vpce-1""#),
        ]),
    )
    .await;
    // b: u2 newer; u3 with an account id of the wrong type (rescued).
    let bad_account = event("e5", "u3", t1, 500, "").replace(
        r#""accountId":"111122223333","arn""#,
        r#""accountId":111122223333,"arn""#,
    );
    assert!(bad_account.contains(":111122223333,"), "{bad_account}");
    ev.put(bk, &lines(&[event("e4", "u2", t3, 400, ""), bad_account]))
        .await;
    for (key, rows, bytes) in [(a, 3, "600"), (bk, 2, "900")] {
        let record = b.ledger.get(TRAIL, key).await.unwrap().expect("a record");
        let committed = record.committed.expect("committed");
        assert_eq!(committed.rows, rows, "{}: {key}", b.name);
        assert_eq!(committed.sums["bytes_in"], bytes, "{}: {key}", b.name);
        assert_eq!(
            committed.rescued, 1,
            "{}: {key}: one row rescued each",
            b.name
        );
    }
    publish(a).await;
    publish(bk).await;
    let t = read_table(&uri, None);
    let rows = by_user(&b, &t);
    assert_eq!(
        rows.iter()
            .map(|(u, (id, _, key, row))| (u.as_str(), id.as_str(), key.as_str(), *row))
            .collect::<Vec<_>>(),
        [("u1", "e3", a, 3), ("u2", "e4", bk, 1), ("u3", "e5", bk, 2)],
        "{}: the newest event per user, with its lineage",
        b.name
    );
    let rescued = |user: &str| -> Value {
        let text = rows[user]
            .1
            .as_str()
            .unwrap_or_else(|| panic!("{user}: {t}"));
        serde_json::from_str(text).unwrap()
    };
    assert_eq!(
        rescued("u1"),
        json!({"fields": {"vpcEndpointId": "vpce-1"}, "reasons": {"vpcEndpointId": "not in the schema"}})
    );
    assert_eq!(
        rescued("u3"),
        json!({"fields": {"userIdentity.accountId": 111122223333_i64},
               "reasons": {"userIdentity.accountId": "expected string got 111122223333"}})
    );
    assert_eq!(rows["u2"].1, Value::Null, "nothing rescued");
    // The nested columns arrive whole in the table.
    let columns = t["columns"].as_array().unwrap();
    let at = |name: &str| columns.iter().position(|c| c == name).unwrap();
    let u1 = t["table"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r[at("event_id")] == "e3")
        .unwrap();
    assert_eq!(u1[at("resources")][0]["ARN"], "arn:aws:s3:::landing/e3");
    assert_eq!(
        u1[at("userIdentity")]["sessionContext"]["attributes"]["mfaAuthenticated"],
        "false"
    );
    let params: Value =
        serde_json::from_str(u1[at("requestParameters")].as_str().unwrap()).unwrap();
    assert_eq!(
        params,
        json!({"bucketName": "landing", "key": "e3", "x-amz-acl": ["private"]})
    );

    // b replaced by one older event of u2: u2's newest is a's again, u3 is gone.
    ev.put(bk, &lines(&[event("e6", "u2", t0, 600, "")])).await;
    publish(bk).await;
    let rows = by_user(&b, &read_table(&uri, None));
    assert_eq!(
        rows.iter()
            .map(|(u, v)| (u.as_str(), v.0.as_str()))
            .collect::<Vec<_>>(),
        [("u1", "e3"), ("u2", "e2")],
        "{}",
        b.name
    );
    // a deleted: only b's event is left.
    ev.delete(a).await;
    publish(a).await;
    let rows = by_user(&b, &read_table(&uri, None));
    assert_eq!(
        rows.iter()
            .map(|(u, v)| (u.as_str(), v.0.as_str()))
            .collect::<Vec<_>>(),
        [("u2", "e6")],
        "{}",
        b.name
    );

    // Both tiers on every object: the source recounted, the outputs read back.
    ev.put(
        a,
        &lines(&[event("e7", "u4", t2, 700, r#""sharedEventID":"s""#)]),
    )
    .await;
    let window = Window {
        from_ms: 0,
        to_ms: b.clock.now_ms() + 86_400_000,
    };
    let options = Options {
        repair: false,
        deep_sample: Some(1.0),
        ..Options::default()
    };
    let p = b.pipeline_with(config.clone());
    let report = reconcile::reconcile_source(&p, source, window, options, &b.ctx("reconcile"))
        .await
        .expect("reconcile");
    assert!(report.clean(), "{}: {report:#?}", b.name);
    assert_eq!(report.deep_checked.len(), 2);
    for t in [
        &report.totals.ledger,
        &report.totals.deep.source,
        &report.totals.deep.ledger,
        &report.totals.deep.lake,
    ] {
        assert_eq!((t.objects, t.rows), (2, 2), "{}: {report:#?}", b.name);
        assert_eq!(t.sums["bytes_in"], "1300", "{}", b.name);
    }
}

/// A nested table that is not merged is compacted like any other: its files rewritten into
/// one, the table reading the same rows, nested values whole.
async fn nested_files_compact_exactly(b: Backends) {
    let mut doc = doc(&b);
    doc["sources"][0]["output"]["table"] = json!({"format": "delta"});
    let config = Arc::new(Config::from_json(&doc.to_string()).unwrap());
    let publisher = publisher(&b, &config);
    let uri = table_uri(&b, config.source(TRAIL).unwrap());
    let mut ev = Events::new(&b, &config);
    for (n, user) in ["u1", "u2", "u3"].iter().enumerate() {
        let at = format!("2026-12-01T1{n}:00:00Z");
        ev.put(
            &format!("trail/2026/12/01/{n}.json"),
            &lines(&[event(&format!("e{n}"), user, &at, 10, "")]),
        )
        .await;
    }
    publisher.publish_all(TRAIL).await.unwrap();
    let before = read_table(&uri, None);
    assert_eq!(before["files"], json!(3), "{before}");
    let compact = tidemark_delta::maintain::CompactOptions {
        compact_after: std::time::Duration::ZERO,
        ..Default::default()
    };
    let c = publisher.compact(TRAIL, &compact).await.unwrap();
    assert_eq!((c.files_in, c.files_out), (3, 1), "{}: {c:?}", b.name);
    let after = read_table(&uri, None);
    assert_eq!(after["files"], json!(1), "{after}");
    assert_eq!(after["table"], before["table"], "{}", b.name);
    assert!(publisher.check(TRAIL).await.unwrap().is_clean());
}

tidemark_tests::on_both!(a_cloudtrail_source_end_to_end, nested_files_compact_exactly);
