//! The drift loop, end to end on both backend pairs (S3 emulator + DynamoDB Local, and local
//! folders + SQLite): new fields appear in the data → they are rescued and counted →
//! `infer --rescued` proposes the columns that hold them (a new column, a new struct field, a
//! path column beside a path column) and checks the proposal → `plan` under the changed
//! document lists exactly the objects committed under the old one → `backfill --stale-config`
//! rewrites those → every field is in its column, the rescued column is empty everywhere, the
//! ledger counts no rescued row and reconcile (both tiers, every object) is clean. A bad value
//! is then listed and not proposed: a type change is not additive.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;

use arrow_array::{Array, RecordBatch, StringArray};
use serde_json::{Value, json};
use tidemark::config::Config;
use tidemark::model::Target;
use tidemark_cli::Backend;
use tidemark_tests::{Backends, Events};

const TRAIL: &str = "trail";

fn doc(b: &Backends) -> Value {
    json!({"sources": [{
        "source_id": TRAIL, "bucket": b.landing, "prefix": "trail/", "format": "jsonl",
        "schema": [
            {"name": "event_id", "path": "eventID", "type": "string", "nullable": false},
            {"name": "eventName", "type": "string"},
            {"name": "userIdentity", "type": "struct<type:string,arn:string>"},
            {"name": "bytes_in", "path": "additionalEventData.bytesTransferredIn", "type": "int64"}
        ],
        "sum_columns": ["bytes_in"],
        "on_unknown_field": "rescue",
        "on_bad_value": "rescue",
        "output": {"bucket": b.lake, "prefix": "trail/"},
        "reconcile": {"deep_sample": 1.0}
    }]})
}

fn config(doc: &Value) -> Arc<Config> {
    Arc::new(Config::from_json(&doc.to_string()).expect("valid document"))
}

/// One event; `drift` adds the fields the schema does not know yet.
fn event(id: &str, bytes: i64, drift: bool) -> String {
    let mut e = json!({
        "eventID": id,
        "eventName": "PutObject",
        "userIdentity": {"type": "IAMUser", "arn": format!("arn:aws:iam::1:user/{id}")},
        "additionalEventData": {"bytesTransferredIn": bytes}
    });
    if drift {
        e["sharedEventID"] = json!(format!("shared-{id}"));
        e["userIdentity"]["invokedBy"] = json!("s3.amazonaws.com");
        e["additionalEventData"]["bytesTransferredOut"] = json!(bytes * 2);
    }
    e.to_string()
}

async fn cli(b: &Backends, doc: &Value, argv: &[&str]) -> (ExitCode, Value) {
    let backend = Backend::from_pipeline(b.pipeline_with(config(doc)), b.name);
    let mut args = vec!["tidemark", "--json"];
    args.extend(argv);
    let cli = tidemark_cli::parse_args(&args).expect("valid command line");
    let mut out = Vec::new();
    let code = tidemark_cli::dispatch(cli.command, &backend, cli.json, &mut out)
        .await
        .unwrap_or_else(|e| panic!("{}: {argv:?}: {e}", b.name));
    let report = serde_json::from_slice(&out)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)));
    (code, report)
}

/// Every output's rows as JSON objects (via arrow's JSON writer), by column.
async fn lake_rows(b: &Backends) -> Vec<Value> {
    let mut rows = Vec::new();
    for (key, body) in b.lake_objects("trail/").await {
        if !key.ends_with(".parquet") {
            continue;
        }
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(body)
            .unwrap()
            .build()
            .unwrap();
        for batch in reader {
            let batch: RecordBatch = batch.unwrap();
            for i in 0..batch.num_rows() {
                let mut row = serde_json::Map::new();
                for (f, column) in batch.schema().fields().iter().zip(batch.columns()) {
                    row.insert(f.name().clone(), cell(column.as_ref(), i));
                }
                rows.push(Value::Object(row));
            }
        }
    }
    rows.sort_by_key(|r| r["event_id"].to_string());
    rows
}

/// One cell as JSON: strings and integers as such, structs as objects, NULL as null.
fn cell(column: &dyn Array, i: usize) -> Value {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_schema::DataType;
    if column.is_null(i) {
        return Value::Null;
    }
    match column.data_type() {
        DataType::Utf8 => json!(
            column
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap()
                .value(i)
        ),
        DataType::Int64 => json!(column.as_primitive::<Int64Type>().value(i)),
        DataType::Int32 => json!(
            column
                .as_primitive::<arrow_array::types::Int32Type>()
                .value(i)
        ),
        DataType::Struct(fields) => {
            let s = column.as_struct();
            let mut o = serde_json::Map::new();
            for (f, c) in fields.iter().zip(s.columns()) {
                o.insert(f.name().clone(), cell(c.as_ref(), i));
            }
            Value::Object(o)
        }
        other => json!(format!("<{other}>")),
    }
}

async fn drift_becomes_columns(b: Backends) {
    let name = b.name;
    let old = doc(&b);
    let mut ev = Events::new(&b, &config(&old));
    // Two objects of the known shape, two with new fields.
    ev.put(
        "trail/2026/12/01/a.json",
        &format!("{}\n{}\n", event("a1", 10, false), event("a2", 20, false)),
    )
    .await;
    ev.put(
        "trail/2026/12/01/b.json",
        &format!("{}\n{}\n", event("b1", 30, true), event("b2", 40, false)),
    )
    .await;
    ev.put(
        "trail/2026/12/02/c.json",
        &format!("{}\n{}\n", event("c1", 50, true), event("c2", 60, true)),
    )
    .await;
    ev.put(
        "trail/2026/12/02/d.json",
        &format!("{}\n", event("d1", 70, false)),
    )
    .await;

    // Rescued and counted.
    let rescued: BTreeMap<String, u64> = b
        .ledger
        .list(TRAIL)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.key.clone(), r.committed.expect("committed").rescued))
        .collect();
    assert_eq!(
        rescued,
        BTreeMap::from([
            ("trail/2026/12/01/a.json".to_string(), 0),
            ("trail/2026/12/01/b.json".to_string(), 1),
            ("trail/2026/12/02/c.json".to_string(), 2),
            ("trail/2026/12/02/d.json".to_string(), 0),
        ]),
        "{name}"
    );

    // `infer --rescued` proposes the columns, and checks them on the objects.
    let (code, r) = cli(&b, &old, &["infer", "--rescued", TRAIL]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{name}: {r:#}");
    assert_eq!(
        (
            &r["objects_with_rescued"],
            &r["rescued_rows"],
            &r["rows_read"]
        ),
        (&json!(2), &json!(3), &json!(3)),
        "{name}: {r:#}"
    );
    let fields: Vec<(String, String, u64)> = r["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["kind"].as_str().unwrap().to_string(),
                f["rows"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        fields,
        [
            (
                "additionalEventData.bytesTransferredOut".into(),
                "unknown".into(),
                3
            ),
            ("sharedEventID".into(), "unknown".into(), 3),
            ("userIdentity.invokedBy".into(), "unknown".into(), 3),
        ],
        "{name}: {r:#}"
    );
    assert_eq!(
        r["added"],
        json!([
            {"name": "additionalEventData_bytesTransferredOut",
             "path": "additionalEventData.bytesTransferredOut", "type": "int32", "nullable": true},
            {"name": "sharedEventID", "type": "string", "nullable": true}
        ]),
        "{name}: {r:#}"
    );
    assert_eq!(
        r["extended"],
        json!([[
            "userIdentity",
            "struct<type:string,arn:string>",
            "struct<type:string,arn:string,invokedBy:string>"
        ]]),
        "{name}: {r:#}"
    );
    assert_eq!(r["checked"], true, "{name}: {r:#}");
    let after: Vec<&Value> = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["rescued_after"])
        .collect();
    assert_eq!(after, [&json!(0), &json!(0)], "{name}: {r:#}");

    // The change deployed: an object landing now is written under it.
    let mut new = old.clone();
    new["sources"][0] = r["proposed"].clone();
    let mut ev = Events::new(&b, &config(&new));
    ev.put(
        "trail/2026/12/03/e.json",
        &format!("{}\n", event("e1", 80, true)),
    )
    .await;

    // `plan`: exactly the four objects committed under the old document are stale.
    let (code, p) = cli(&b, &new, &["plan"]).await;
    assert_eq!(code, ExitCode::FAILURE, "{name}: {p:#}");
    let trail = &p["sources"][0];
    assert_eq!(trail["up_to_date"], 1, "{name}: {p:#}");
    assert_eq!(trail["stale_config"]["count"], 4, "{name}: {p:#}");
    // The change itself, from a stale object's output against the document.
    assert_eq!(
        trail["columns"],
        json!([
            "~ userIdentity: struct<type:string,arn:string> -> struct<type:string,arn:string,invokedBy:string>",
            "+ additionalEventData_bytesTransferredOut int32",
            "+ sharedEventID string"
        ]),
        "{name}: {p:#}"
    );
    assert_eq!(
        trail["stale_config"]["examples"],
        json!([
            "trail/2026/12/01/a.json",
            "trail/2026/12/01/b.json",
            "trail/2026/12/02/c.json",
            "trail/2026/12/02/d.json"
        ]),
        "{name}: {p:#}"
    );

    // `backfill --stale-config` rewrites exactly those.
    let pipeline = b.pipeline_with(config(&new));
    let (_, status) = b
        .backfill(
            &pipeline,
            tidemark::backfill::Request {
                source: TRAIL.into(),
                stale_config: true,
                ..Default::default()
            },
            2,
        )
        .await;
    assert_eq!(
        (
            status.counts.items,
            status.counts.processed,
            status.counts.failures
        ),
        (4, 4, 0),
        "{name}: {status:?}"
    );
    let (code, p) = cli(&b, &new, &["plan"]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{name}: {p:#}");

    // The fields are in their columns; nothing is rescued any more.
    let rows = lake_rows(&b).await;
    assert_eq!(rows.len(), 8, "{name}: {rows:#?}");
    for row in &rows {
        let id = row["event_id"].as_str().unwrap();
        let drifted = ["b1", "c1", "c2", "e1"].contains(&id);
        assert_eq!(row["_rescued_data"], Value::Null, "{name}: {row}");
        assert_eq!(
            row["sharedEventID"],
            if drifted {
                json!(format!("shared-{id}"))
            } else {
                Value::Null
            },
            "{name}: {row}"
        );
        assert_eq!(
            row["userIdentity"]["invokedBy"],
            if drifted {
                json!("s3.amazonaws.com")
            } else {
                Value::Null
            },
            "{name}: {row}"
        );
        assert_eq!(
            row["additionalEventData_bytesTransferredOut"],
            if drifted {
                json!(row["bytes_in"].as_i64().unwrap() * 2)
            } else {
                Value::Null
            },
            "{name}: {row}"
        );
    }
    for record in b.ledger.list(TRAIL).await.unwrap() {
        let c = record.committed.expect("committed");
        assert!(matches!(c.target, Target::Version(_)));
        assert_eq!(c.rescued, 0, "{name}: {}", record.key);
    }

    // Reconcile, both tiers on every object: clean, and the totals agree.
    let new_config = config(&new);
    let report = b.reconcile_all(&new_config, TRAIL).await;
    assert!(report.clean(), "{name}: {report:#?}");
    assert_eq!(report.deep_checked.len(), 5, "{name}");
    for t in [
        &report.totals.ledger,
        &report.totals.deep.lake,
        &report.totals.deep.source,
    ] {
        assert_eq!((t.objects, t.rows), (5, 8), "{name}: {report:#?}");
        assert_eq!(t.sums["bytes_in"], "360", "{name}");
    }

    // A bad value is listed with its reason, and no column is proposed for it.
    ev.put(
        "trail/2026/12/03/f.json",
        &format!(
            "{}\n",
            json!({"eventID": "f1", "eventName": "PutObject",
                   "additionalEventData": {"bytesTransferredIn": "lots"}})
        ),
    )
    .await;
    let (code, r) = cli(&b, &new, &["infer", "--rescued", TRAIL]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{name}: {r:#}");
    assert_eq!(
        r["fields"][0]["path"], "additionalEventData.bytesTransferredIn",
        "{name}: {r:#}"
    );
    assert_eq!(r["fields"][0]["kind"], "bad value", "{name}: {r:#}");
    assert!(
        r["fields"][0]["reason"].as_str().unwrap().contains("int64"),
        "{name}: {r:#}"
    );
    assert_eq!(r["proposed"], Value::Null, "{name}: {r:#}");
}

#[tokio::test]
async fn embedded_drift_becomes_columns() {
    drift_becomes_columns(Backends::embedded().await).await;
}

#[tokio::test]
async fn aws_drift_becomes_columns() {
    drift_becomes_columns(Backends::aws().await).await;
}

/// A CSV source matched by header name: a new header column is rescued as text, and
/// `infer --rescued` types it from its text as `infer` types CSV columns.
async fn csv_columns_are_typed_from_their_text(b: Backends) {
    let name = b.name;
    let doc = json!({"sources": [{
        "source_id": "orders", "bucket": b.landing, "prefix": "orders/", "format": "csv",
        "csv": {"columns": "name"},
        "schema": [
            {"name": "order_id", "type": "int64", "nullable": false},
            {"name": "amount", "type": "decimal(12,2)"}
        ],
        "on_unknown_field": "rescue",
        "output": {"bucket": b.lake, "prefix": "orders/"}
    }]});
    let mut ev = Events::new(&b, &config(&doc));
    ev.put("orders/1.csv", "order_id,amount\n1,2.50\n").await;
    ev.put(
        "orders/2.csv",
        "order_id,amount,shipped_on,weight\n2,3.00,2026-12-01,12\n3,4.00,,7\n",
    )
    .await;
    let (code, r) = cli(&b, &doc, &["infer", "--rescued", "orders"]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{name}: {r:#}");
    assert_eq!(
        r["added"],
        json!([
            {"name": "shipped_on", "type": "date", "nullable": true},
            {"name": "weight", "type": "int32", "nullable": true}
        ]),
        "{name}: {r:#}"
    );
    assert_eq!(r["checks"][0]["rescued_after"], 0, "{name}: {r:#}");
}

#[tokio::test]
async fn embedded_csv_columns_are_typed_from_their_text() {
    csv_columns_are_typed_from_their_text(Backends::embedded().await).await;
}

#[tokio::test]
async fn aws_csv_columns_are_typed_from_their_text() {
    csv_columns_are_typed_from_their_text(Backends::aws().await).await;
}
