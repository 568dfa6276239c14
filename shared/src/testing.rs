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
    pipeline_in(dir, config)
        .await
        .expect("the embedded backends")
}

/// A pipeline of `config` on folders (buckets `landing` and `lake`, made here) and a SQLite
/// ledger under `dir`.
async fn pipeline_in(dir: &Path, config: Config) -> Result<Pipeline, String> {
    let store = FolderStore::new(dir.join("buckets"));
    for b in ["landing", "lake"] {
        store.create_bucket(b).await.map_err(|e| e.to_string())?;
    }
    let ledger = SqliteLedger::open(dir.join("ledger.db")).map_err(|e| e.to_string())?;
    Ok(Pipeline::new(
        Arc::new(store),
        Arc::new(ledger),
        Arc::new(SystemClock),
        Arc::new(config),
    ))
}

/// The S3 notification record of an upload to `landing` (key form-encoded for spaces, as S3
/// sends it).
fn notification(key: &str, size: u64, etag: &str, sequencer: &str) -> Value {
    json!({"eventVersion": "2.1", "eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
           "eventTime": "2026-11-29T12:00:00.000Z",
           "s3": {"bucket": {"name": "landing"},
                  "object": {"key": key.replace(' ', "+"), "size": size, "eTag": etag,
                             "sequencer": sequencer}}})
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
    notification(key, body.len() as u64, &etag, sequencer)
}

/// Runs the ingest handler as the function runs it, on local files: each of `files` is placed
/// (hard-linked, else copied) in bucket `landing` of a folder store under `dir`, at key
/// `in/<n>-<file name>`, and one invocation holding their S3 notification records processes
/// them `concurrency` at a time through `source` (a source block; its `bucket`, `prefix` and
/// output bucket are set to `landing`, `in/` and `lake`) on a SQLite ledger, on a
/// multi-threaded Tokio runtime as the function's `main` builds it. The per-object path is the
/// function's (claim, pinned GET, conversion, 8 MiB upload parts, commit) on the embedded
/// backends instead of S3 and DynamoDB. For measuring what an object costs (memory, time).
///
/// # Errors
///
/// The configuration refused, a file that cannot be placed, or any object not processed.
pub fn ingest_local_files(
    dir: &Path,
    source: &Value,
    files: &[std::path::PathBuf],
    concurrency: usize,
) -> Result<crate::ingest::Summary, String> {
    let mut source = source.clone();
    source["bucket"] = json!("landing");
    source["prefix"] = json!("in/");
    source["output"]["bucket"] = json!("lake");
    let config = Config::from_json(&json!({"sources": [source]}).to_string())
        .map_err(|e| format!("the source: {e}"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let pipeline = pipeline_in(dir, config).await?;
        let mut records = Vec::new();
        for (n, file) in files.iter().enumerate() {
            let name = file
                .file_name()
                .ok_or_else(|| format!("{}: no file name", file.display()))?
                .to_string_lossy();
            let key = format!("in/{n}-{name}");
            let at = dir.join("buckets/landing").join(&key);
            std::fs::create_dir_all(at.parent().expect("a key's folder"))
                .map_err(|e| e.to_string())?;
            if std::fs::hard_link(file, &at).is_err() {
                std::fs::copy(file, &at).map_err(|e| format!("{}: {e}", file.display()))?;
            }
            let meta = pipeline
                .store
                .head("landing", &key)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("{key}: not found once placed"))?;
            records.push(notification(
                &key,
                meta.size,
                &meta.etag,
                &format!("{:016X}", n + 1),
            ));
        }
        let ctx = crate::process::RunContext::new("local", i64::MAX / 2);
        let response =
            crate::ingest::handle(&pipeline, &json!({"Records": records}), &ctx, concurrency)
                .await
                .map_err(|e| e.to_string())?;
        if response.summary.processed != files.len() || !response.errors.is_empty() {
            return Err(format!(
                "{} of {} objects processed: {:?}",
                response.summary.processed,
                files.len(),
                response.errors
            ));
        }
        Ok(response.summary)
    })
}
