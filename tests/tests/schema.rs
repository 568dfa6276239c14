//! The schema contract for CSV (columns by header name) and JSON Lines, on both backend
//! pairs: additive evolution (a new nullable column; old-shaped files still land, with
//! NULLs), the output schema version recorded per object in the ledger, outputs that read
//! as one table, a missing required column or a value of the wrong type quarantined naming
//! the column, and `backfill --stale-config` bringing the objects of the old schema forward.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::json;
use tidemark::backfill::Request;
use tidemark::config::{Config, schema_version};
use tidemark::model::Status;
use tidemark::process::Pipeline;
use tidemark_tests::Backends;

/// Orders as CSV (columns by name) under `in/` and JSON Lines under `json/`; with `channel`
/// (a nullable string) when `v2`.
fn config(b: &Backends, v2: bool) -> Arc<Config> {
    let mut schema = vec![
        json!({"name": "order_id", "type": "int64", "nullable": false}),
        json!({"name": "customer", "type": "string"}),
        json!({"name": "quantity", "type": "int32"}),
    ];
    if v2 {
        schema.push(json!({"name": "channel", "type": "string"}));
    }
    let source = |id: &str, prefix: &str, format: &str| {
        let mut s = json!({
            "source_id": id, "bucket": b.landing, "prefix": prefix, "format": format,
            "schema": schema, "sum_columns": ["quantity"],
            "output": {"bucket": b.lake, "prefix": format!("{id}/")},
            "max_attempts": 1
        });
        if format == "csv" {
            s["csv"] = json!({"columns": "name"});
        }
        s
    };
    let doc = json!({"sources": [source("orders", "in/", "csv"), source("orders_json", "json/", "jsonl")]});
    Arc::new(Config::from_json(&doc.to_string()).expect("valid config"))
}

fn pipeline(b: &Backends, config: &Arc<Config>) -> Pipeline {
    b.pipeline_with(config.clone())
}

/// Backfill both sources under `config` on the fleet; (processed, quarantined, last errors
/// of the quarantined objects).
async fn backfill_all(b: &Backends, config: &Arc<Config>, stale: bool) -> (u64, u64, Vec<String>) {
    let p = pipeline(b, config);
    let (mut processed, mut quarantined, mut errors) = (0, 0, Vec::new());
    for source in ["orders", "orders_json"] {
        let req = Request {
            source: source.into(),
            stale_config: stale,
            ..Request::default()
        };
        let (_, status) = b.backfill(&p, req, 2).await;
        processed += status.counts.processed;
        quarantined += status.counts.quarantined;
        for r in b.ledger.list(source).await.unwrap() {
            if r.status == tidemark::model::Status::Quarantined {
                errors.extend(r.last_error);
            }
        }
    }
    (processed, quarantined, errors)
}

/// Each output as one batch.
async fn outputs(b: &Backends) -> BTreeMap<String, RecordBatch> {
    let mut out = BTreeMap::new();
    for prefix in ["orders/", "orders_json/"] {
        for (key, body) in b.lake_objects(prefix).await {
            let reader = ParquetRecordBatchReaderBuilder::try_new(body)
                .unwrap()
                .build()
                .unwrap();
            let mut batches: Vec<_> = reader.map(|b| b.unwrap()).collect();
            assert_eq!(batches.len(), 1, "{key}: small outputs are one batch");
            out.insert(key, batches.remove(0));
        }
    }
    out
}

fn column_names(batch: &RecordBatch) -> Vec<String> {
    batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect()
}

fn strings(batch: &RecordBatch, column: &str) -> Vec<Option<String>> {
    let c = batch.column_by_name(column).unwrap().as_string::<i32>();
    (0..c.len())
        .map(|i| c.is_valid(i).then(|| c.value(i).to_string()))
        .collect()
}

async fn schema_evolution_is_additive_and_recorded_per_object(b: Backends) {
    let (v1, v2) = (config(&b, false), config(&b, true));
    let version = |c: &Config| schema_version(&c.sources[0].fingerprint).to_string();
    assert_ne!(version(&v1), version(&v2));

    // Under v1: CSV columns in any order, an unknown column ignored.
    b.upload(
        "in/a.csv",
        "quantity,customer,order_id,note\n2,ann,1,x\n3,bob,2,y\n",
    )
    .await;
    b.upload("json/a.jsonl", "{\"order_id\":1,\"quantity\":5}\n")
        .await;
    assert_eq!(backfill_all(&b, &v1, false).await, (2, 0, vec![]));

    // v2 adds `channel`: old-shaped files still land (NULL), new ones carry it.
    b.upload("in/b.csv", "order_id,channel,quantity\n3,web,4\n4,shop,1\n")
        .await;
    b.upload("in/c.csv", "order_id,quantity,customer\n5,6,cy\n")
        .await;
    b.upload(
        "json/b.jsonl",
        "{\"order_id\":2,\"quantity\":7,\"channel\":\"app\"}\n",
    )
    .await;
    assert_eq!(backfill_all(&b, &v2, false).await, (3, 0, vec![]));

    let out = outputs(&b).await;
    let v1_columns = ["order_id", "customer", "quantity"];
    let v2_columns = ["order_id", "customer", "quantity", "channel"];
    assert_eq!(column_names(&out["orders/a.csv.parquet"]), v1_columns);
    assert_eq!(column_names(&out["orders/b.csv.parquet"]), v2_columns);
    assert_eq!(column_names(&out["orders/c.csv.parquet"]), v2_columns);
    assert_eq!(
        strings(&out["orders/b.csv.parquet"], "channel"),
        [Some("web".into()), Some("shop".into())]
    );
    assert_eq!(
        strings(&out["orders/b.csv.parquet"], "customer"),
        [None, None]
    );
    assert_eq!(strings(&out["orders/c.csv.parquet"], "channel"), [None]);
    assert_eq!(
        strings(&out["orders/a.csv.parquet"], "customer"),
        [Some("ann".into()), Some("bob".into())]
    );
    assert_eq!(
        strings(&out["orders_json/b.jsonl.parquet"], "channel"),
        [Some("app".into())]
    );
    // One table: the outputs' schemas merge (same types wherever a column appears).
    let merged = arrow_schema::Schema::try_merge(out.values().map(|b| b.schema().as_ref().clone()))
        .expect("the outputs read as one table");
    assert_eq!(merged.fields().len(), 4);

    // The ledger records each object's output schema version.
    for (source, key, v) in [
        ("orders", "in/a.csv", version(&v1)),
        ("orders", "in/b.csv", version(&v2)),
        ("orders", "in/c.csv", version(&v2)),
        ("orders_json", "json/a.jsonl", version(&v1)),
        ("orders_json", "json/b.jsonl", version(&v2)),
    ] {
        let r = b.ledger.get(source, key).await.unwrap().unwrap();
        let c = r.committed.unwrap();
        assert_eq!(schema_version(&c.config_fp), v, "{key}");
    }

    // The objects of the old schema, brought forward: exactly two.
    assert_eq!(backfill_all(&b, &v2, true).await, (2, 0, vec![]));
    let out = outputs(&b).await;
    for (key, batch) in &out {
        assert_eq!(column_names(batch), v2_columns, "{key}");
    }
    let ids: i64 = out
        .values()
        .map(|b| {
            b.column_by_name("order_id")
                .unwrap()
                .as_primitive::<arrow_array::types::Int64Type>()
                .iter()
                .flatten()
                .sum::<i64>()
        })
        .sum();
    assert_eq!(ids, 1 + 2 + 3 + 4 + 5 + 1 + 2, "every row once");
    assert_eq!(backfill_all(&b, &v2, true).await, (0, 0, vec![]));
}

async fn an_incompatible_file_is_quarantined_naming_the_column(b: Backends) {
    let v2 = config(&b, true);
    b.upload("in/good.csv", "order_id,quantity\n1,2\n").await;
    b.upload("in/no-id.csv", "customer,quantity\nann,2\n").await;
    b.upload("in/bad-type.csv", "order_id,quantity\n1,two\n")
        .await;
    b.upload("in/twice.csv", "order_id,quantity,quantity\n1,2,3\n")
        .await;
    b.upload(
        "json/bad-type.jsonl",
        "{\"order_id\":1,\"quantity\":\"two\"}\n",
    )
    .await;
    let (processed, failed, errors) = backfill_all(&b, &v2, false).await;
    assert_eq!((processed, failed), (1, 4), "{errors:#?}");
    let landing = &b.landing;
    for (source, key, error) in [
        (
            "orders",
            "in/no-id.csv",
            format!(
                r#"s3://{landing}/in/no-id.csv: line 1: column "order_id": missing from the header, and the source's schema requires it"#
            ),
        ),
        (
            "orders",
            "in/bad-type.csv",
            format!(
                r#"s3://{landing}/in/bad-type.csv: line 2: column "quantity": cannot parse "two" as int32"#
            ),
        ),
        (
            "orders",
            "in/twice.csv",
            format!(
                r#"s3://{landing}/in/twice.csv: line 1: column "quantity": named twice in the header"#
            ),
        ),
    ] {
        let r = b.ledger.get(source, key).await.unwrap().unwrap();
        assert_eq!(r.status, Status::Quarantined, "{key}");
        assert_eq!(r.last_error.as_deref(), Some(error.as_str()), "{key}");
    }
    let r = b
        .ledger
        .get("orders_json", "json/bad-type.jsonl")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.status, Status::Quarantined);
    let e = r.last_error.unwrap();
    assert!(e.contains("line 1") && e.contains("\"quantity\""), "{e}");
    // The good object landed, alone.
    let out = outputs(&b).await;
    assert_eq!(out.keys().collect::<Vec<_>>(), ["orders/good.csv.parquet"]);
}

tidemark_tests::on_both!(
    schema_evolution_is_additive_and_recorded_per_object,
    an_incompatible_file_is_quarantined_naming_the_column,
);
