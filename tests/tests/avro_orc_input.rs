//! Avro and ORC as input formats, through the real ingest path on both backend pairs (S3
//! emulator + DynamoDB Local, and local folders + SQLite).
//!
//! The files are written by peer libraries (fastavro and pyarrow, by
//! `tests/fixtures/avro_orc/generate.py`, checked in): the orders of `orders_csv(1, 1000)`
//! as Avro with every codec of the format and as ORC with every codec pyarrow writes, with
//! the columns in another order, an extra column and narrower types than the schema's
//! (`int`/`int16` quantity, `decimal(10,2)` amount, millisecond or nanosecond
//! timestamps). Each lands with output rows identical to the CSV's and the same exact
//! rows and sums in the ledger and the lake, and reconcile's deep tier recounts each
//! source object to the same numbers. Files that break the contract (a type that cannot
//! be widened, a required column missing) fail naming the column, are quarantined after
//! `max_attempts`, and the good objects of the same batch land exactly.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::RecordBatch;
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{Value, json};
use tidemark::config::Config;
use tidemark::ingest::{self, Response};
use tidemark::model::Status;
use tidemark::ports::Clock;
use tidemark::process::Pipeline;
use tidemark::reconcile::{self, Options, Window};
use tidemark_tests::{
    Backends, Totals, direct, form_encode, orders_csv, orders_source, parquet_totals, sqs,
};

/// Attempts before quarantine in this suite.
const MAX_ATTEMPTS: u32 = 2;

/// Rows of the fixtures: `orders_csv(1, ROWS)`.
const ROWS: usize = 1000;

const AVRO_CODECS: [&str; 6] = ["null", "deflate", "snappy", "zstandard", "bzip2", "xz"];
const ORC_CODECS: [&str; 5] = ["uncompressed", "zlib", "snappy", "lz4", "zstd"];

/// The orders schema as CSV under `in/`, as Avro under `avro/` and as ORC under `orc/`.
fn config(b: &Backends) -> Arc<Config> {
    let source = |id: &str, prefix: &str, format: &str| {
        orders_source((&b.landing, &b.lake), id, prefix, format, MAX_ATTEMPTS)
    };
    let doc = json!({"sources": [
        source("orders", "in/", "csv"),
        source("orders_avro", "avro/", "avro"),
        source("orders_orc", "orc/", "orc"),
    ]});
    Arc::new(Config::from_json(&doc.to_string()).expect("valid config"))
}

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/fixtures/avro_orc/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

static SEQUENCER: AtomicU64 = AtomicU64::new(0x0400_0000_0000_0000);

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

/// Uploads `(key, body)` and returns one SQS message per object.
async fn land(b: &Backends, objects: &[(String, Vec<u8>)]) -> Value {
    let mut messages = Vec::new();
    for (key, body) in objects {
        b.upload(key, body.clone()).await;
        messages.push((key.as_str(), direct(vec![notification(b, key).await])));
    }
    sqs(messages)
}

async fn invoke(b: &Backends, p: &Pipeline, payload: &Value) -> Response {
    ingest::handle(p, payload, &b.ctx("avro-orc"), 4)
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

/// The ledger's rows and sums of a committed object.
async fn ledger_totals(b: &Backends, source: &str, key: &str) -> (u64, String, String) {
    let rec = record(b, source, key).await;
    assert_eq!(rec.status, Status::Done, "{source}/{key}: {rec:?}");
    let c = rec.committed.expect("committed");
    (c.rows, c.sums["quantity"].clone(), c.sums["amount"].clone())
}

fn cents(t: &Totals) -> String {
    format!("{}.{:02}", t.amount_cents / 100, t.amount_cents % 100)
}

/// The Avro and ORC objects of the orders: every codec, and one Avro and one ORC file
/// wrapped whole in gzip.
fn orders_objects() -> Vec<(String, Vec<u8>)> {
    let mut objects = Vec::new();
    for codec in AVRO_CODECS {
        let name = format!("orders-{codec}.avro");
        objects.push((format!("avro/{name}"), fixture(&name)));
    }
    for codec in ORC_CODECS {
        let name = format!("orders-{codec}.orc");
        objects.push((format!("orc/{name}"), fixture(&name)));
    }
    objects.push((
        "avro/wrapped.avro.gz".into(),
        gzip(&fixture("orders-deflate.avro")),
    ));
    objects.push((
        "orc/wrapped.orc.gz".into(),
        gzip(&fixture("orders-zstd.orc")),
    ));
    objects
}

fn source_of(key: &str) -> &'static str {
    match key.split_once('/').map(|(p, _)| p) {
        Some("avro") => "orders_avro",
        Some("orc") => "orders_orc",
        _ => "orders",
    }
}

async fn avro_and_orc_equal_to_csv_give_identical_rows_and_sums(b: Backends) {
    let p = b.pipeline_with(config(&b));
    let (csv, totals) = orders_csv(1, ROWS);
    let mut objects = vec![("in/orders.csv".to_string(), csv.into_bytes())];
    objects.extend(orders_objects());
    let batch = land(&b, &objects).await;
    let r = invoke(&b, &p, &batch).await;
    assert!(r.retry_messages.is_empty() && r.errors.is_empty(), "{r:?}");
    assert_eq!(
        (r.summary.processed, r.summary.rows),
        (objects.len(), objects.len() as u64 * ROWS as u64),
        "{r:?}"
    );

    let outputs = b.lake_objects("").await;
    let from_csv = batch_of(outputs["orders/orders.csv.parquet"].clone());
    assert_eq!(from_csv.num_rows(), ROWS);
    let want = (totals.rows, totals.quantity.to_string(), cents(&totals));
    for (key, _) in &objects {
        let source = source_of(key);
        let output = format!("{source}/{}.parquet", key.split_once('/').unwrap().1);
        let body = outputs
            .get(&output)
            .unwrap_or_else(|| panic!("no output {output}"))
            .clone();
        let from_file = batch_of(body.clone());
        assert_eq!(from_file.schema(), from_csv.schema(), "{key}");
        assert_eq!(from_file, from_csv, "{key}: rows identical to the CSV's");
        assert_eq!(parquet_totals(body), totals, "{key}");
        assert_eq!(ledger_totals(&b, source, key).await, want, "{key}");
    }

    // Reconcile's deep tier recounts every source object to the ledger's numbers.
    let window = Window {
        from_ms: 0,
        to_ms: b.clock.now_ms() + 86_400_000,
    };
    let opts = Options {
        deep_sample: Some(1.0),
        ..Options::default()
    };
    for (source, n) in [("orders_avro", 7_u64), ("orders_orc", 6)] {
        let config = config(&b);
        let source = config.source(source).unwrap();
        let report =
            reconcile::reconcile_source(&p, source, window, opts.clone(), &b.ctx("reconcile"))
                .await
                .expect("reconcile");
        assert!(report.clean(), "{report:#?}");
        assert_eq!(report.objects, n, "{report:#?}");
        assert_eq!(report.deep_checked.len(), n as usize, "{report:#?}");
        assert_eq!(report.totals.deep.source.rows, n * ROWS as u64);
        assert_eq!(report.totals.deep.ledger.rows, n * ROWS as u64);
    }
    println!("{}: {} objects, each {totals:?}", b.name, objects.len());
}

async fn incompatible_files_are_quarantined_and_the_good_ones_land(b: Backends) {
    let p = b.pipeline_with(config(&b));
    let good = ["avro/orders-snappy.avro", "orc/orders-zlib.orc"];
    let bad = [
        (
            "avro/bad-quantity-text.avro",
            r#"column "quantity": type Utf8 in the file cannot be read as int32"#,
        ),
        (
            "avro/bad-no-order-id.avro",
            r#"column "order_id": missing from the file, and the source's schema requires it"#,
        ),
        (
            "orc/bad-quantity-double.orc",
            r#"column "quantity": type Float64 in the file cannot be read as int32"#,
        ),
        (
            "orc/bad-no-order-id.orc",
            r#"column "order_id": missing from the file, and the source's schema requires it"#,
        ),
    ];
    let objects: Vec<(String, Vec<u8>)> = good
        .iter()
        .chain(bad.iter().map(|(key, _)| key))
        .map(|key| (key.to_string(), fixture(key.split_once('/').unwrap().1)))
        .collect();
    let batch = land(&b, &objects).await;

    let r = invoke(&b, &p, &batch).await;
    let mut retried = r.retry_messages.clone();
    retried.sort();
    let mut bad_keys: Vec<&str> = bad.iter().map(|(k, _)| *k).collect();
    bad_keys.sort();
    assert_eq!(retried, bad_keys, "{r:?}");
    assert_eq!(
        (r.summary.processed, r.summary.failed, r.summary.rows),
        (2, 4, 2 * ROWS as u64),
        "{r:?}"
    );
    for (key, error) in &bad {
        let rec = record(&b, source_of(key), key).await;
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
        (4, 2),
        "{r:?}"
    );
    for (key, error) in &bad {
        let rec = record(&b, source_of(key), key).await;
        assert_eq!(
            (rec.status, rec.attempts),
            (Status::Quarantined, MAX_ATTEMPTS)
        );
        assert!(rec.last_error.as_deref().unwrap().ends_with(error));
        assert!(rec.committed.is_none());
    }
    let (_, totals) = orders_csv(1, ROWS);
    let lake: BTreeMap<String, Totals> = b
        .lake_objects("")
        .await
        .into_iter()
        .map(|(key, body)| (key, parquet_totals(body)))
        .collect();
    assert_eq!(
        lake,
        BTreeMap::from([
            ("orders_avro/orders-snappy.avro.parquet".to_string(), totals),
            ("orders_orc/orders-zlib.orc.parquet".to_string(), totals),
        ]),
        "the good objects only, exactly"
    );
    println!("{}: {bad_keys:?} quarantined", b.name);
}

tidemark_tests::on_both!(
    avro_and_orc_equal_to_csv_give_identical_rows_and_sums,
    incompatible_files_are_quarantined_and_the_good_ones_land,
);
