//! Test support for other crates (feature `testing`): a pipeline on the embedded backends in a
//! directory, with one small CSV source, and S3 notification records of objects landed in it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::config::Config;
use crate::local::{FolderStore, SqliteLedger};
use crate::ports::{PutOutcome, SystemClock, WriteCondition};
use crate::process::Pipeline;

/// A pipeline on folders + SQLite under `dir`: source `orders` (CSV `id,amount` under
/// `in/` of bucket `landing`), outputs under `out/` of bucket `lake`, reports under
/// `reports/` of `lake`.
pub async fn embedded_pipeline(dir: &Path) -> Pipeline {
    let store = FolderStore::new(dir.join("buckets"));
    for b in ["landing", "lake"] {
        store.create_bucket(b).await.expect("create bucket");
    }
    let config = Config::from_json(
        &json!({"sources": [{
            "source_id": "orders", "bucket": "landing", "prefix": "in/", "format": "csv",
            "schema": [{"name": "id", "type": "int64", "nullable": false},
                       {"name": "amount", "type": "decimal(10,2)"}],
            "sum_columns": ["amount"],
            "output": {"bucket": "lake", "prefix": "out/"},
            "reconcile": {"grace_minutes": 0}
        }], "reports": {"bucket": "lake", "prefix": "reports/"}})
        .to_string(),
    )
    .expect("test config is valid");
    Pipeline::new(
        Arc::new(store),
        Arc::new(SqliteLedger::open(dir.join("ledger.db")).expect("open ledger")),
        Arc::new(SystemClock),
        Arc::new(config),
    )
}

/// Land `body` under `key` in `landing` and return the S3 notification record of the upload
/// (key form-encoded for spaces, as S3 sends it).
pub async fn land(p: &Pipeline, key: &str, body: &str, sequencer: &str) -> Value {
    let written = p
        .store
        .put(
            "landing",
            key,
            body.to_string().into(),
            &BTreeMap::new(),
            &WriteCondition::Absent,
        )
        .await
        .expect("put");
    let PutOutcome::Written { etag } = written else {
        panic!("{key} already exists")
    };
    json!({"eventVersion": "2.1", "eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
           "eventTime": "2026-11-29T12:00:00.000Z",
           "s3": {"bucket": {"name": "landing"},
                  "object": {"key": key.replace(' ', "+"), "size": body.len(), "eTag": etag,
                             "sequencer": sequencer}}})
}
