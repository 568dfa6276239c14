//! The lake as a Delta Lake table, on both backend pairs (a table on the S3 emulator with the
//! ledger on DynamoDB Local, and on the local folder store with SQLite), read back by an
//! independent reader: the Python `deltalake` package (`tests/readers/read_delta.py`, in the
//! virtualenv `.local/venv-readers` that `infra/test.sh` installs).
//!
//! - overwrites and deletes end with exactly the source's rows, and a replaced object's old
//!   file stays on disk for readers of older versions (time travel reads them);
//! - a crash of the committer at each step, then a publish again: exact, nothing twice;
//! - committers racing on one table: exact, each object's file once;
//! - a reader polling the table while objects are replaced never sees an object's rows
//!   twice or missing.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use publish::{Faults, PublishError, Publisher, Step, TableStore};
use serde_json::{Value, json};
use tidemark::config::{Config, Source};
use tidemark::process::Pipeline;
use tidemark_tests::table_reader::{self, reader_python};
use tidemark_tests::{Backends, form_encode, orders_csv, orders_doc};

const ORDERS: &str = "orders";
const ARCHIVE: &str = "archive";

fn config(b: &Backends) -> Arc<Config> {
    let mut doc = orders_doc(&b.landing, &b.lake, 3, None);
    doc["sources"][0]["output"] = json!({"bucket": b.lake, "prefix": "orders/",
        "partitioning": "key_date", "table": {"format": "delta"}});
    doc["sources"][2]["output"] =
        json!({"bucket": b.lake, "prefix": "archive/", "table": {"format": "delta"}});
    Arc::new(Config::from_json(&doc.to_string()).unwrap())
}

fn tables(b: &Backends) -> TableStore {
    table_reader::tables(b)
}

fn publisher(b: &Backends, config: &Arc<Config>) -> Publisher {
    let mut p = Publisher::new(
        config.clone(),
        b.ledger.clone(),
        b.store.clone(),
        tables(b),
        Arc::new(b.clock.clone()),
    );
    p.settings.backoff_base = std::time::Duration::from_millis(5);
    p.settings.backoff_max = std::time::Duration::from_millis(200);
    p
}

fn source<'a>(config: &'a Config, id: &str) -> &'a Source {
    config.sources.iter().find(|s| s.id() == id).unwrap()
}

/// The table's URI for the reader: a folder, or `s3://…`.
fn table_uri(b: &Backends, config: &Config, id: &str) -> String {
    table_reader::table_uri(b, source(config, id))
}

/// The table read by the Python `deltalake` package (latest version, or `version`).
fn read(uri: &str, version: Option<i64>) -> Value {
    table_reader::read_table(uri, version)
}

fn ids(v: &Value) -> Vec<i64> {
    v["first_column"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

fn range(a: i64, b: i64) -> Vec<i64> {
    (a..=b).collect()
}

/// A CSV of `rows` orders with ids from `first`.
fn csv(first: i64, rows: usize) -> String {
    orders_csv(first, rows).0
}

struct Events<'a> {
    b: &'a Backends,
    pipeline: Pipeline,
    seq: u64,
}

impl<'a> Events<'a> {
    fn new(b: &'a Backends, config: &Arc<Config>) -> Self {
        Self {
            b,
            pipeline: b.pipeline_with(config.clone()),
            seq: 0x10_0000,
        }
    }

    async fn put(&mut self, key: &str, body: &str) {
        self.b.upload(key, body).await;
        let meta = self
            .b
            .store
            .head(&self.b.landing, key)
            .await
            .unwrap()
            .expect("uploaded");
        self.seq += 1;
        let record = json!({"eventVersion": "2.1", "eventSource": "aws:s3",
            "eventName": "ObjectCreated:Put", "eventTime": "2026-12-01T12:00:00.000Z",
            "s3": {"bucket": {"name": self.b.landing},
                   "object": {"key": form_encode(key), "size": meta.size, "eTag": meta.etag,
                              "sequencer": format!("{:018X}", self.seq)}}});
        self.send(record).await;
    }

    async fn delete(&mut self, key: &str) {
        self.b
            .store
            .delete(&self.b.landing, key, None)
            .await
            .unwrap();
        self.seq += 1;
        let record = json!({"eventVersion": "2.1", "eventSource": "aws:s3",
            "eventName": "ObjectRemoved:Delete", "eventTime": "2026-12-01T12:00:00.000Z",
            "s3": {"bucket": {"name": self.b.landing},
                   "object": {"key": form_encode(key),
                              "sequencer": format!("{:018X}", self.seq)}}});
        self.send(record).await;
    }

    async fn send(&self, record: Value) {
        let r = tidemark::ingest::handle(
            &self.pipeline,
            &json!({"Records": [record]}),
            &self.b.ctx("event"),
            4,
        )
        .await
        .unwrap();
        assert!(r.errors.is_empty(), "{}: {:?}", self.b.name, r.errors);
    }
}

async fn overwrites_and_deletes_end_exact(b: Backends) {
    let config = config(&b);
    let publisher = publisher(&b, &config);
    let uri = table_uri(&b, &config, ORDERS);
    let mut ev = Events::new(&b, &config);
    ev.put("in/2026-11-30/a.csv", &csv(1, 10)).await;
    ev.put("in/2026-11-30/b.csv", &csv(11, 10)).await;
    ev.put("in/2026-12-01/c.csv", &csv(21, 10)).await;

    let p = publisher.publish_all(ORDERS).await.unwrap();
    assert_eq!(
        (p.committed, p.added, p.removed, p.txn_version),
        (Some(1), 3, 0, Some(0)),
        "{}: {p:?}",
        b.name
    );
    let t = read(&uri, None);
    assert_eq!(ids(&t), range(1, 30), "{}: {t}", b.name);
    let (_, totals) = orders_csv(1, 30);
    assert_eq!(t["rows"], json!(totals.rows), "{t}");
    assert_eq!(
        t["sums"]["order_id"],
        json!(totals.order_ids.to_string()),
        "{t}"
    );
    assert_eq!(
        t["sums"]["quantity"],
        json!(totals.quantity.to_string()),
        "{t}"
    );
    let cents: i128 = t["sums"]["amount"]
        .as_str()
        .unwrap()
        .replace('.', "")
        .parse()
        .unwrap();
    assert_eq!(cents, totals.amount_cents, "{t}");
    assert!(
        t["columns"].as_array().unwrap().contains(&json!("dt")),
        "partition column: {t}"
    );
    let again = publisher.publish_all(ORDERS).await.unwrap();
    assert_eq!(
        (again.committed, again.table_version),
        (None, 1),
        "{again:?}"
    );

    // Overwrite a, delete b: the table loses a's old rows and all of b's, in one version.
    let before = b
        .ledger
        .get(ORDERS, "in/2026-11-30/a.csv")
        .await
        .unwrap()
        .unwrap();
    let old_file = before.committed.unwrap().outputs[0].key.clone();
    ev.put("in/2026-11-30/a.csv", &csv(101, 5)).await;
    ev.delete("in/2026-11-30/b.csv").await;
    assert!(
        b.store.head(&b.lake, &old_file).await.unwrap().is_some(),
        "{}: the replaced file is kept for older snapshots",
        b.name
    );
    let keys = [
        "in/2026-11-30/a.csv".to_string(),
        "in/2026-11-30/b.csv".to_string(),
    ];
    let p = publisher.publish_keys(ORDERS, &keys).await.unwrap();
    assert_eq!(
        (p.committed, p.added, p.removed, p.txn_version),
        (Some(2), 1, 2, Some(1)),
        "{}: {p:?}",
        b.name
    );
    let t = read(&uri, None);
    let mut want = range(21, 30);
    want.extend(range(101, 105));
    assert_eq!(ids(&t), want, "{}: {t}", b.name);
    assert_eq!(t["files"], json!(2), "{t}");
    // Time travel: version 1 still reads whole (its files were not deleted).
    assert_eq!(ids(&read(&uri, Some(1))), range(1, 30), "{}", b.name);

    // A duplicate of a's old event, a publish of keys that did not change: nothing.
    let p = publisher.publish_keys(ORDERS, &keys).await.unwrap();
    assert_eq!(p.committed, None, "{p:?}");
    let p = publisher.publish_all(ORDERS).await.unwrap();
    assert_eq!((p.committed, p.keys), (None, 3), "{p:?}");

    // on_delete "keep": the archive keeps a deleted object's rows in its table.
    ev.put("keep/x.csv", &csv(500, 4)).await;
    ev.delete("keep/x.csv").await;
    let p = publisher.publish_all(ARCHIVE).await.unwrap();
    assert_eq!((p.added, p.removed), (1, 0), "{p:?}");
    assert_eq!(
        ids(&read(&table_uri(&b, &config, ARCHIVE), None)),
        range(500, 503)
    );

    // `forget` (the record leaves the ledger): the sweep takes its file out of the table.
    let c = b
        .ledger
        .get(ORDERS, "in/2026-12-01/c.csv")
        .await
        .unwrap()
        .unwrap();
    b.ledger.delete(ORDERS, &c.key, c.rev).await.unwrap();
    let p = publisher.publish_all(ORDERS).await.unwrap();
    assert_eq!((p.added, p.removed), (0, 1), "{p:?}");
    assert_eq!(ids(&read(&uri, None)), range(101, 105), "{}", b.name);
}

#[tokio::test]
async fn overwrites_and_deletes_end_exact_aws() {
    overwrites_and_deletes_end_exact(Backends::aws().await).await;
}

#[tokio::test]
async fn overwrites_and_deletes_end_exact_embedded() {
    overwrites_and_deletes_end_exact(Backends::embedded().await).await;
}

/// Fails once at `step`.
struct CrashOnce {
    step: Step,
    armed: Mutex<bool>,
}

impl Faults for CrashOnce {
    fn check(&self, step: Step, _: &str) -> Result<(), PublishError> {
        let mut armed = self.armed.lock().unwrap();
        if step == self.step && *armed {
            *armed = false;
            return Err(PublishError::Crashed(step));
        }
        Ok(())
    }
}

async fn a_crash_at_every_step_publishes_once(b: Backends) {
    let config = config(&b);
    let uri = table_uri(&b, &config, ORDERS);
    let mut ev = Events::new(&b, &config);
    let mut expected = Vec::new();
    let mut landed = 0;
    for (n, step) in [Step::Loaded, Step::Planned, Step::Committed]
        .into_iter()
        .enumerate()
    {
        let first = 1 + 100 * n as i64;
        let key = format!("in/2026-11-{:02}/{n}.csv", 10 + n);
        ev.put(&key, &csv(first, 7)).await;
        expected.extend(range(first, first + 6));
        let mut crashing = publisher(&b, &config);
        crashing.faults = Arc::new(CrashOnce {
            step,
            armed: Mutex::new(true),
        });
        let err = crashing
            .publish_keys(ORDERS, std::slice::from_ref(&key))
            .await
            .unwrap_err();
        assert!(
            matches!(err, PublishError::Crashed(s) if s == step),
            "{err}"
        );
        if step == Step::Committed {
            landed += 1; // the commit landed before the crash
        }
        // The change feed delivers the key again; the sweep comes too.
        let p = publisher(&b, &config)
            .publish_keys(ORDERS, std::slice::from_ref(&key))
            .await
            .unwrap();
        if step == Step::Committed {
            assert_eq!(p.committed, None, "{}: published twice: {p:?}", b.name);
        } else {
            assert_eq!(p.added, 1, "{p:?}");
            landed += 1;
        }
        let p = publisher(&b, &config).publish_all(ORDERS).await.unwrap();
        assert_eq!(p.committed, None, "{p:?}");
        assert_eq!(p.txn_version, Some(landed - 1), "{}: {p:?}", b.name);
        let t = read(&uri, None);
        assert_eq!(
            ids(&t),
            expected,
            "{} after a crash at {step:?}: {t}",
            b.name
        );
        assert_eq!(t["files"], json!(n + 1), "{t}");
    }
}

#[tokio::test]
async fn a_crash_at_every_step_publishes_once_aws() {
    a_crash_at_every_step_publishes_once(Backends::aws().await).await;
}

#[tokio::test]
async fn a_crash_at_every_step_publishes_once_embedded() {
    a_crash_at_every_step_publishes_once(Backends::embedded().await).await;
}

async fn racing_committers_publish_each_object_once(b: Backends) {
    let config = config(&b);
    let uri = table_uri(&b, &config, ORDERS);
    let mut ev = Events::new(&b, &config);
    let mut keys = Vec::new();
    for n in 0..12 {
        let key = format!("in/2026-10-{:02}/{n}.csv", 1 + n % 5);
        ev.put(&key, &csv(1 + 10 * n as i64, 10)).await;
        keys.push(key);
    }
    // Create the table first: creation races are a different path (tested below).
    publisher(&b, &config)
        .publish_keys(ORDERS, &[])
        .await
        .unwrap();
    // Four committers, overlapping key sets, at once.
    let results = futures::future::join_all((0..4).map(|w| {
        let mine: Vec<String> = keys.iter().skip(w * 2).take(6).cloned().collect();
        let p = publisher(&b, &config);
        async move { p.publish_keys(ORDERS, &mine).await }
    }))
    .await;
    let mut attempts = 0;
    for r in results {
        attempts += r.unwrap_or_else(|e| panic!("{}: {e}", b.name)).attempts;
    }
    // A last sweep publishes the keys no committer was given.
    publisher(&b, &config).publish_all(ORDERS).await.unwrap();
    let t = read(&uri, None);
    assert_eq!(ids(&t), range(1, 120), "{}: {t}", b.name);
    assert_eq!(t["files"], json!(12), "{t}");
    assert!(attempts >= 4, "{attempts}");
    assert_no_path_added_twice(&b, &config);
}

/// No data file was added by two commits (the log is read back from its JSON files).
fn assert_no_path_added_twice(b: &Backends, config: &Config) {
    let Some(root) = b.folder_root() else {
        return; // on S3 the reader's file count above covers it
    };
    let log = root.join(&b.lake).join("orders/_delta_log");
    let mut adds: BTreeMap<String, usize> = BTreeMap::new();
    for entry in std::fs::read_dir(&log).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                let action: Value = serde_json::from_str(line).unwrap();
                if let Some(p) = action["add"]["path"].as_str() {
                    *adds.entry(p.to_string()).or_default() += 1;
                }
            }
        }
    }
    let twice: Vec<_> = adds.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "added twice: {twice:?}");
    let _ = config;
}

#[tokio::test]
async fn racing_committers_publish_each_object_once_aws() {
    racing_committers_publish_each_object_once(Backends::aws().await).await;
}

#[tokio::test]
async fn racing_committers_publish_each_object_once_embedded() {
    racing_committers_publish_each_object_once(Backends::embedded().await).await;
}

/// A publish before any output of the source exists (on the folder store, before its table
/// folder does) creates the empty table instead of failing until an output comes.
async fn a_publish_before_any_output_creates_the_table(b: Backends) {
    let config = config(&b);
    let p = publisher(&b, &config)
        .publish_keys(ORDERS, &["in/2026-09-01/never.csv".to_string()])
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", b.name));
    assert_eq!((p.committed, p.table_version), (None, 0), "{p:?}");
    let t = read(&table_uri(&b, &config, ORDERS), None);
    assert_eq!((&t["version"], &t["rows"]), (&json!(0), &json!(0)), "{t}");
}

#[tokio::test]
async fn a_publish_before_any_output_creates_the_table_aws() {
    a_publish_before_any_output_creates_the_table(Backends::aws().await).await;
}

#[tokio::test]
async fn a_publish_before_any_output_creates_the_table_embedded() {
    a_publish_before_any_output_creates_the_table(Backends::embedded().await).await;
}

async fn committers_racing_to_create_the_table_share_it(b: Backends) {
    let config = config(&b);
    let uri = table_uri(&b, &config, ORDERS);
    let mut ev = Events::new(&b, &config);
    ev.put("in/2026-09-01/a.csv", &csv(1, 5)).await;
    let results = futures::future::join_all((0..3).map(|_| {
        let p = publisher(&b, &config);
        async move { p.publish_all(ORDERS).await }
    }))
    .await;
    for r in results {
        r.unwrap_or_else(|e| panic!("{}: {e}", b.name));
    }
    assert_eq!(ids(&read(&uri, None)), range(1, 5), "{}", b.name);
}

#[tokio::test]
async fn committers_racing_to_create_the_table_share_it_aws() {
    committers_racing_to_create_the_table_share_it(Backends::aws().await).await;
}

#[tokio::test]
async fn committers_racing_to_create_the_table_share_it_embedded() {
    committers_racing_to_create_the_table_share_it(Backends::embedded().await).await;
}

/// Objects replaced round after round while a reader (the Python package, another process)
/// reads the latest version over and over: every read holds each object's rows exactly once,
/// from one round.
async fn a_polling_reader_never_sees_rows_twice_or_missing(b: Backends) {
    let config = config(&b);
    let uri = table_uri(&b, &config, ORDERS);
    let publisher = publisher(&b, &config);
    let mut ev = Events::new(&b, &config);
    const OBJECTS: i64 = 3;
    const ROWS: usize = 4;
    let key = |o: i64| format!("in/2026-08-0{}/{o}.csv", 1 + o);
    let first_id = |round: i64, o: i64| round * 1000 + o * 10 + 1;
    for o in 0..OBJECTS {
        ev.put(&key(o), &csv(first_id(0, o), ROWS)).await;
    }
    publisher.publish_all(ORDERS).await.unwrap();

    let stop = std::env::temp_dir().join(format!("tidemark-poll-{}", uuid::Uuid::new_v4()));
    let poller = Command::new(reader_python())
        .arg("-c")
        .arg(POLL)
        .arg(&uri)
        .arg(&stop)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the polling reader");
    for round in 1..=6 {
        let mut keys = Vec::new();
        for o in 0..OBJECTS {
            ev.put(&key(o), &csv(first_id(round, o), ROWS)).await;
            keys.push(key(o));
            // Publish after each object, so versions hold a mix of rounds.
            publisher
                .publish_keys(ORDERS, &keys[keys.len() - 1..])
                .await
                .unwrap();
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    std::fs::write(&stop, b"stop").unwrap();
    let out = poller.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&stop);
    assert!(
        out.status.success(),
        "poller: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reads: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let versions: BTreeSet<i64> = reads
        .iter()
        .map(|r| r["version"].as_i64().unwrap())
        .collect();
    assert!(
        versions.len() >= 3,
        "{}: the reader saw too few versions to mean anything: {versions:?}",
        b.name
    );
    for r in &reads {
        let ids: Vec<i64> = r["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect();
        assert_eq!(ids.len(), OBJECTS as usize * ROWS, "{}: {r}", b.name);
        for o in 0..OBJECTS {
            let rows: Vec<i64> = ids
                .iter()
                .copied()
                .filter(|id| (id % 1000 - 1) / 10 == o)
                .collect();
            assert_eq!(rows.len(), ROWS, "{}: object {o} in {r}", b.name);
            let round = rows[0] / 1000;
            let start = first_id(round, o);
            assert_eq!(rows, range(start, start + ROWS as i64 - 1), "{r}");
        }
    }
}

/// Read the latest version of the table (argv[1]) until the file argv[2] exists: one JSON
/// line per read, `{version, ids}`.
const POLL: &str = r#"
import json, os, sys
sys.path.insert(0, "")
from deltalake import DeltaTable
uri, stop = sys.argv[1], sys.argv[2]
options = {}
if uri.startswith("s3://"):
    endpoint = os.environ["AWS_ENDPOINT_URL_S3"]
    options = {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true",
               "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
               "AWS_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
               "AWS_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"],
               "AWS_REGION": os.environ.get("AWS_REGION", "us-east-1")}
last = None
while not os.path.exists(stop) or last is None:
    t = DeltaTable(uri, storage_options=options)
    ids = sorted(t.to_pyarrow_table(columns=["order_id"]).column("order_id").to_pylist())
    print(json.dumps({"version": t.version(), "ids": ids}), flush=True)
    last = t.version()
# The package's runtime threads can abort the interpreter's own shutdown: leave at once.
os._exit(0)
"#;

#[tokio::test]
async fn a_polling_reader_never_sees_rows_twice_or_missing_aws() {
    a_polling_reader_never_sees_rows_twice_or_missing(Backends::aws().await).await;
}

#[tokio::test]
async fn a_polling_reader_never_sees_rows_twice_or_missing_embedded() {
    a_polling_reader_never_sees_rows_twice_or_missing(Backends::embedded().await).await;
}
