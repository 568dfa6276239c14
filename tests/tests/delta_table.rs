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

use serde_json::{Value, json};
use tidemark::config::{Config, Source};
use tidemark_delta::{Faults, PublishError, Publisher, Step, TableStore};
use tidemark_tests::table_reader::{self, reader_python};
use tidemark_tests::{Backends, Events, orders_csv, orders_doc};

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
    table_reader::publisher(b, config)
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
    let ready = stop.with_extension("ready");
    let poller = Command::new(reader_python())
        .arg("-c")
        .arg(POLL)
        .arg(&uri)
        .arg(&stop)
        .arg(&ready)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the polling reader");
    // The rounds begin once the reader has read the table once: on a busy machine its start
    // (the interpreter, the package) can take longer than all the rounds.
    let started = std::time::Instant::now();
    while !ready.exists() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "{}: the polling reader did not read the table within 120 s",
            b.name
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let _ = std::fs::remove_file(&ready);
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
uri, stop, ready = sys.argv[1], sys.argv[2], sys.argv[3]
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
    if last is None:
        open(ready, "w").close()
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

/// Maintenance after replaces and deletes: a checkpoint, old log files removed, VACUUM
/// deleting exactly the files no current snapshot references (the replaced and deleted
/// objects' files, and an attempt's leftover), the table exact before and after, and the
/// committer going on from the checkpoint.
async fn maintenance_keeps_the_table_exact(b: Backends) {
    use tidemark_delta::maintain::MaintainOptions;
    let config = config(&b);
    let uri = table_uri(&b, &config, ORDERS);
    let publisher = publisher(&b, &config);
    let mut ev = Events::new(&b, &config);
    for n in 0..4 {
        ev.put(
            &format!("in/2026-07-0{}/{n}.csv", n + 1),
            &csv(1 + 10 * n, 10),
        )
        .await;
    }
    publisher.publish_all(ORDERS).await.unwrap();
    let old = |key: &str| {
        let ledger = b.ledger.clone();
        let key = key.to_string();
        async move {
            let r = ledger.get(ORDERS, &key).await.unwrap().unwrap();
            r.committed.unwrap().outputs[0].key.clone()
        }
    };
    let replaced = old("in/2026-07-01/0.csv").await;
    let deleted = old("in/2026-07-02/1.csv").await;
    ev.put("in/2026-07-01/0.csv", &csv(100, 3)).await;
    ev.delete("in/2026-07-02/1.csv").await;
    // A leftover of an attempt that never committed: a table file name nobody references.
    let leftover =
        "orders/dt=2026-07-03/2.csv-00000000000000000000000000000000-0000000000000000.parquet";
    let bytes = b.lake_objects("orders/").await[&old("in/2026-07-03/2.csv").await].clone();
    b.store
        .put(
            &b.lake,
            leftover,
            bytes,
            &Default::default(),
            &tidemark::ports::WriteCondition::Absent,
        )
        .await
        .unwrap();
    publisher.publish_all(ORDERS).await.unwrap();
    let mut want = range(21, 40);
    want.extend(range(100, 102));
    want.sort();
    assert_eq!(ids(&read(&uri, None)), want, "{}", b.name);

    // Too soon: nothing is old enough to vacuum.
    let m = publisher
        .maintain(ORDERS, &MaintainOptions::default())
        .await
        .unwrap();
    assert_eq!(m.checkpoint, Some(m.version), "{m:?}");
    assert!(m.files_vacuumed.is_empty(), "{}: {m:?}", b.name);
    // A retention shorter than a day is refused.
    let short = MaintainOptions {
        file_retention: Some(std::time::Duration::from_secs(3600)),
        ..MaintainOptions::default()
    };
    assert!(publisher.maintain(ORDERS, &short).await.is_err());

    // 31 days later: the log before the checkpoint goes, VACUUM deletes the three files.
    b.clock.advance(31 * 24 * 3_600_000);
    let m = publisher
        .maintain(ORDERS, &MaintainOptions::default())
        .await
        .unwrap();
    let mut vacuumed: Vec<String> = m
        .files_vacuumed
        .iter()
        .map(|p| p.rsplit('/').next().unwrap().to_string())
        .collect();
    vacuumed.sort();
    let mut expected: Vec<String> = [&replaced, &deleted, &leftover.to_string()]
        .iter()
        .map(|p| p.rsplit('/').next().unwrap().to_string())
        .collect();
    expected.sort();
    assert_eq!(vacuumed, expected, "{}: {m:?}", b.name);
    assert!(m.log_files_removed > 0, "{}: {m:?}", b.name);
    for gone in [&replaced, &deleted] {
        assert!(
            b.store.head(&b.lake, gone).await.unwrap().is_none(),
            "{gone}"
        );
    }
    assert_eq!(
        ids(&read(&uri, None)),
        want,
        "{}: after maintenance",
        b.name
    );

    // The committer goes on from the checkpoint.
    ev.put("in/2026-07-04/3.csv", &csv(200, 2)).await;
    let p = publisher
        .publish_keys(ORDERS, &["in/2026-07-04/3.csv".to_string()])
        .await
        .unwrap();
    assert_eq!((p.added, p.removed), (1, 1), "{p:?}");
    let mut want: Vec<i64> = want
        .into_iter()
        .filter(|id| !(31..=40).contains(id))
        .collect();
    want.extend(range(200, 201));
    want.sort();
    assert_eq!(ids(&read(&uri, None)), want, "{}", b.name);
}

#[tokio::test]
async fn maintenance_keeps_the_table_exact_aws() {
    maintenance_keeps_the_table_exact(Backends::aws().await).await;
}

#[tokio::test]
async fn maintenance_keeps_the_table_exact_embedded() {
    maintenance_keeps_the_table_exact(Backends::embedded().await).await;
}

/// The CLI on a table source: `run` publishes the table, `status` compares it with the
/// ledger, `publish` finds nothing left, `maintain --dry-run` changes nothing.
async fn the_cli_publishes_and_shows_the_table(b: Backends) {
    let config = config(&b);
    let uri = table_uri(&b, &config, ORDERS);
    let backend = tidemark_cli::Backend::from_pipeline(b.pipeline_with(config.clone()), b.name)
        .with_tables(tables(&b));
    b.upload("in/2026-06-01/a.csv", csv(1, 6)).await;
    b.upload("in/2026-06-02/b.csv", csv(7, 4)).await;
    let cli = |args: &[&str]| {
        let mut argv = vec!["tidemark"];
        argv.extend_from_slice(args);
        tidemark_cli::parse_args(argv).unwrap()
    };
    let dispatch = |args: &'static [&'static str]| {
        let backend = &backend;
        async move {
            let c = cli(args);
            let mut out = Vec::new();
            let code = tidemark_cli::dispatch(c.command, backend, c.json, &mut out)
                .await
                .unwrap();
            (code, String::from_utf8(out).unwrap())
        }
    };
    let (code, text) = dispatch(&["run", "--source", "orders", "--json"]).await;
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{text}");
    let run: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(run["tables"][0]["published"]["added"], json!(2), "{text}");
    assert_eq!(ids(&read(&uri, None)), range(1, 10), "{}", b.name);

    let (_, text) = dispatch(&["status", "--source", "orders", "--json"]).await;
    let status: Value = serde_json::from_str(&text).unwrap();
    let t = &status["tables"][0];
    assert_eq!(
        (
            t["version"].clone(),
            t["files"].clone(),
            t["table_rows"].clone(),
            t["ledger_rows"].clone()
        ),
        (json!(1), json!(2), json!(10), json!(10)),
        "{text}"
    );
    assert_eq!(
        (t["unpublished"].clone(), t["stale"].clone()),
        (json!(0), json!(0))
    );
    let (_, text) = dispatch(&["status", "--source", "orders"]).await;
    assert!(
        text.contains("TABLE orders: delta version 1 (txn 0), 2 file(s), 10 rows (ledger 10): matches the ledger"),
        "{text}"
    );

    // A source without a table named to status: its lines, no TABLE line, no error.
    let (code, text) = dispatch(&["status", "--source", "orders_json"]).await;
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{text}");
    assert!(!text.contains("TABLE"), "{text}");
    let (code, text) = dispatch(&["publish"]).await;
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{text}");
    assert!(
        text.contains("table orders: version 1, up to date with the ledger (2 records)"),
        "{text}"
    );
    let (code, text) = dispatch(&["maintain", "--dry-run", "--source", "orders"]).await;
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{text}");
    assert!(
        text.contains(
            "checkpoint not written, 0 log file(s) removed, 0 data file(s) to vacuum (dry run) (0 kept"
        ),
        "{text}"
    );
    let c = cli(&["maintain", "--source", "orders", "--file-retention", "1h"]);
    let mut out = Vec::new();
    let err = tidemark_cli::dispatch(c.command, &backend, c.json, &mut out)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("is shorter than"), "{err}");
    let c = cli(&["publish", "--source", "orders_json"]);
    let mut out = Vec::new();
    let err = tidemark_cli::dispatch(c.command, &backend, c.json, &mut out)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("publishes no table"), "{err}");
}

#[tokio::test]
async fn the_cli_publishes_and_shows_the_table_aws() {
    the_cli_publishes_and_shows_the_table(Backends::aws().await).await;
}

#[tokio::test]
async fn the_cli_publishes_and_shows_the_table_embedded() {
    the_cli_publishes_and_shows_the_table(Backends::embedded().await).await;
}

/// Compaction of a closed partition, then a replace and a delete of compacted objects, then
/// a forget: the table exact after each step (read by the Python package), the committer
/// recognising compacted objects as published, VACUUM keeping the files the ledger names,
/// and reconcile clean.
async fn compaction_then_replace_then_delete_stays_exact(b: Backends) {
    use tidemark_delta::maintain::{CompactOptions, MaintainOptions};
    let config = config(&b);
    let uri = table_uri(&b, &config, ORDERS);
    let publisher = publisher(&b, &config);
    let mut ev = Events::new(&b, &config);
    let key = |n: i64| format!("in/2026-05-01/{n}.csv");
    for n in 0..5 {
        ev.put(&key(n), &csv(1 + 10 * n, 10)).await;
    }
    ev.put("in/2026-05-02/open.csv", &csv(900, 3)).await;
    publisher.publish_all(ORDERS).await.unwrap();
    let now_closed = CompactOptions {
        compact_after: std::time::Duration::ZERO,
        ..CompactOptions::default()
    };
    // Not old enough yet under the default rule.
    let c = publisher
        .compact(ORDERS, &CompactOptions::default())
        .await
        .unwrap();
    assert_eq!(c.partitions, 0, "{c:?}");
    b.clock.advance(2 * 24 * 3_600_000);
    let c = publisher.compact(ORDERS, &now_closed).await.unwrap();
    assert_eq!(
        (c.partitions, c.files_in, c.files_out, c.objects),
        (1, 5, 1, 5),
        "{}: {c:?}",
        b.name
    );
    let mut all = range(1, 50);
    all.extend(range(900, 902));
    let t = read(&uri, None);
    assert_eq!(ids(&t), all, "{}: {t}", b.name);
    assert_eq!(t["files"], json!(2), "{t}");
    // The committer sees the compacted objects as published.
    let p = publisher.publish_all(ORDERS).await.unwrap();
    assert_eq!(p.committed, None, "{}: {p:?}", b.name);
    let check = publisher.check(ORDERS).await.unwrap();
    assert!(check.is_clean(), "{check:?}");

    // Replace object 1, delete object 3: the compacted file is rewritten without them.
    ev.put(&key(1), &csv(500, 2)).await;
    ev.delete(&key(3)).await;
    let p = publisher
        .publish_keys(ORDERS, &[key(1), key(3)])
        .await
        .unwrap();
    assert_eq!((p.added, p.removed), (2, 1), "{}: {p:?}", b.name);
    let mut want: Vec<i64> = all
        .iter()
        .copied()
        .filter(|id| !(11..=20).contains(id) && !(31..=40).contains(id))
        .collect();
    want.extend(range(500, 501));
    want.sort();
    let t = read(&uri, None);
    assert_eq!(ids(&t), want, "{}: {t}", b.name);
    assert_eq!(publisher.publish_all(ORDERS).await.unwrap().committed, None);

    // Compact again (the rewritten file and object 1's new file), then forget object 0.
    b.clock.advance(2 * 24 * 3_600_000);
    let c = publisher.compact(ORDERS, &now_closed).await.unwrap();
    assert_eq!(c.partitions, 1, "{c:?}");
    assert_eq!(ids(&read(&uri, None)), want, "{}", b.name);
    let r = b.ledger.get(ORDERS, &key(0)).await.unwrap().unwrap();
    b.ledger.delete(ORDERS, &key(0), r.rev).await.unwrap();
    let p = publisher.publish_all(ORDERS).await.unwrap();
    assert!(p.committed.is_some(), "{p:?}");
    let want: Vec<i64> = want
        .into_iter()
        .filter(|id| !(1..=10).contains(id))
        .collect();
    assert_eq!(ids(&read(&uri, None)), want, "{}: after forget", b.name);
    assert!(publisher.check(ORDERS).await.unwrap().is_clean());

    // VACUUM, much later: the compacted-away files the ledger names stay, the rest go.
    b.clock.advance(31 * 24 * 3_600_000);
    let m = publisher
        .maintain(ORDERS, &MaintainOptions::default())
        .await
        .unwrap();
    assert!(m.files_kept >= 2, "{}: {m:?}", b.name);
    assert!(!m.files_vacuumed.is_empty(), "{m:?}");
    for k in [key(2), key(4)] {
        let r = b.ledger.get(ORDERS, &k).await.unwrap().unwrap();
        let out = &r.committed.unwrap().outputs[0];
        assert!(
            b.store.head(&b.lake, &out.key).await.unwrap().is_some(),
            "{}",
            out.key
        );
    }
    assert_eq!(ids(&read(&uri, None)), want, "{}: after VACUUM", b.name);
}

#[tokio::test]
async fn compaction_then_replace_then_delete_stays_exact_aws() {
    compaction_then_replace_then_delete_stays_exact(Backends::aws().await).await;
}

#[tokio::test]
async fn compaction_then_replace_then_delete_stays_exact_embedded() {
    compaction_then_replace_then_delete_stays_exact(Backends::embedded().await).await;
}

/// Compaction racing the committer on the same partition, round after round: whichever
/// commits second rebuilds on the other's version, and the table stays exact.
async fn compaction_racing_replaces_stays_exact(b: Backends) {
    use tidemark_delta::maintain::CompactOptions;
    let config = config(&b);
    let uri = table_uri(&b, &config, ORDERS);
    let compactor = publisher(&b, &config);
    let publisher = publisher(&b, &config);
    let mut ev = Events::new(&b, &config);
    let key = |n: i64| format!("in/2026-04-01/{n}.csv");
    let mut current: BTreeMap<i64, (i64, usize)> = BTreeMap::new();
    for n in 0..6 {
        ev.put(&key(n), &csv(1 + 100 * n, 3)).await;
        current.insert(n, (1 + 100 * n, 3));
    }
    publisher.publish_all(ORDERS).await.unwrap();
    let opts = CompactOptions {
        compact_after: std::time::Duration::ZERO,
        ..CompactOptions::default()
    };
    let mut lost = 0;
    for round in 1..=6i64 {
        let n = round % 6;
        let first = 1 + 100 * n + 10 * round;
        ev.put(&key(n), &csv(first, 2)).await;
        current.insert(n, (first, 2));
        let keys = [key(n)];
        let (p, c) = tokio::join!(
            publisher.publish_keys(ORDERS, &keys),
            compactor.compact(ORDERS, &opts)
        );
        p.unwrap_or_else(|e| panic!("{}: {e}", b.name));
        lost += c.unwrap_or_else(|e| panic!("{}: {e}", b.name)).lost;
        let mut want: Vec<i64> = current
            .values()
            .flat_map(|(f, rows)| range(*f, *f + *rows as i64 - 1))
            .collect();
        want.sort();
        assert_eq!(ids(&read(&uri, None)), want, "{} round {round}", b.name);
    }
    assert_eq!(publisher.publish_all(ORDERS).await.unwrap().committed, None);
    eprintln!(
        "{}: compaction commits lost to the committer: {lost}",
        b.name
    );
}

#[tokio::test]
async fn compaction_racing_replaces_stays_exact_aws() {
    compaction_racing_replaces_stays_exact(Backends::aws().await).await;
}

#[tokio::test]
async fn compaction_racing_replaces_stays_exact_embedded() {
    compaction_racing_replaces_stays_exact(Backends::embedded().await).await;
}

/// The Lambda's stream path: a batch of DynamoDB stream records (as the event source mapping
/// delivers them, `KEYS_ONLY`) naming the keys ingest wrote, audit items and a source without
/// a table among them, publishes exactly; a source whose publish fails is reported with the
/// sequence number of its first record, and the batch delivered again publishes it.
async fn a_stream_batch_publishes_its_keys(b: Backends) {
    let config = config(&b);
    let uri = table_uri(&b, &config, ORDERS);
    let publisher = publisher(&b, &config);
    let mut ev = Events::new(&b, &config);
    ev.put("in/2026-03-01/a.csv", &csv(1, 4)).await;
    ev.put("in/2026-03-01/b.csv", &csv(5, 4)).await;
    ev.put("json/x.jsonl", &tidemark_tests::orders_jsonl(50, 2).0)
        .await;
    ev.put("keep/k.csv", &csv(70, 3)).await;
    let record = |seq: u64, pk: &str| {
        json!({"eventID": format!("e{seq}"), "eventName": "MODIFY", "eventVersion": "1.1",
               "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
               "dynamodb": {"ApproximateCreationDateTime": 1_700_000_000 + seq,
                            "Keys": {"pk": {"S": pk}}, "SequenceNumber": seq.to_string(),
                            "SizeBytes": 40, "StreamViewType": "KEYS_ONLY"},
               "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/s"})
    };
    let batch = |records: Vec<Value>| -> aws_lambda_events::event::dynamodb::Event {
        serde_json::from_value(json!({ "Records": records })).unwrap()
    };
    // The archive's object has lost its output: its publish fails, the orders' goes through.
    let r = b.ledger.get(ARCHIVE, "keep/k.csv").await.unwrap().unwrap();
    let lost = r.committed.unwrap().outputs[0].key.clone();
    b.store.delete(&b.lake, &lost, None).await.unwrap();
    let event = batch(vec![
        record(100, "orders/in/2026-03-01/a.csv"),
        record(101, "~audit/orders/000000000000001/x"),
        record(102, "orders/in/2026-03-01/a.csv"),
        record(103, "archive/keep/k.csv"),
        record(104, "orders_json/json/x.jsonl"),
        record(105, "orders/in/2026-03-01/b.csv"),
    ]);
    let (published, response) = tidemark_delta::stream::handle(&publisher, &event).await;
    assert_eq!(published.len(), 1, "{published:?}");
    assert_eq!(
        (published[0].added, published[0].keys),
        (2, 2),
        "{published:?}"
    );
    assert_eq!(ids(&read(&uri, None)), range(1, 8), "{}", b.name);
    let failures: Vec<Option<String>> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    assert_eq!(failures, [Some("103".to_string())], "{}", b.name);
    // Repaired (the object processed again), the batch comes back from 103: published once.
    let r = b.ledger.get(ARCHIVE, "keep/k.csv").await.unwrap().unwrap();
    b.ledger.delete(ARCHIVE, "keep/k.csv", r.rev).await.unwrap();
    ev.put("keep/k.csv", &csv(70, 3)).await;
    let again = batch(vec![
        record(103, "archive/keep/k.csv"),
        record(104, "orders_json/json/x.jsonl"),
        record(105, "orders/in/2026-03-01/b.csv"),
    ]);
    let (published, response) = tidemark_delta::stream::handle(&publisher, &again).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    let by_source: BTreeMap<&str, (usize, Option<i64>)> = published
        .iter()
        .map(|p| (p.source_id.as_str(), (p.added, p.committed)))
        .collect();
    assert_eq!(by_source[ARCHIVE].0, 1, "{published:?}");
    assert_eq!(by_source[ORDERS], (0, None), "{published:?}");
    assert_eq!(
        ids(&read(&table_uri(&b, &config, ARCHIVE), None)),
        range(70, 72)
    );
}

#[tokio::test]
async fn a_stream_batch_publishes_its_keys_aws() {
    a_stream_batch_publishes_its_keys(Backends::aws().await).await;
}

#[tokio::test]
async fn a_stream_batch_publishes_its_keys_embedded() {
    a_stream_batch_publishes_its_keys(Backends::embedded().await).await;
}

/// A source merged by key (`merge_keys: ["order_id"]`, `merge_order: "ordered_at"`).
fn merged_config(b: &Backends) -> Arc<Config> {
    let mut doc = orders_doc(&b.landing, &b.lake, 3, None);
    doc["sources"][0]["output"] = json!({"bucket": b.lake, "prefix": "merged/",
        "partitioning": "key_date",
        "table": {"format": "delta", "merge_keys": ["order_id"], "merge_order": "ordered_at"}});
    Arc::new(Config::from_json(&doc.to_string()).unwrap())
}

/// Orders `(id, customer, ordered_at)`, quantity 1 and amount 1.00 each.
fn export(rows: &[(i64, &str, &str)]) -> String {
    let mut s = String::from("order_id,customer,quantity,amount,ordered_at\n");
    for (id, customer, at) in rows {
        s.push_str(&format!("{id},{customer},1,1.00,{at}\n"));
    }
    s
}

/// The table's rows as order id → customer; fails if an id is there twice.
fn customers(b: &Backends, t: &Value) -> BTreeMap<i64, String> {
    let columns = t["columns"].as_array().unwrap();
    let at = |name: &str| columns.iter().position(|c| c == name).unwrap();
    let (id, customer) = (at("order_id"), at("customer"));
    let mut out = BTreeMap::new();
    for row in t["table"].as_array().unwrap() {
        let key = row[id].as_i64().unwrap();
        let value = row[customer].as_str().unwrap().to_string();
        if let Some(before) = out.insert(key, value) {
            panic!("{}: order {key} twice ({before}): {t}", b.name);
        }
    }
    assert_eq!(t["rows"], json!(out.len()), "{t}");
    out
}

fn want(rows: &[(i64, &str)]) -> BTreeMap<i64, String> {
    rows.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

/// Upsert by business key: exports that repeat and update orders end with one row per order,
/// the newest (`ordered_at`, then the object whose key sorts last, then the later row); a
/// delete or overwrite of the winning export brings back the rows it had beaten; every table
/// version a reader can open has one row per order; a sweep by a fresh process finds nothing
/// to do and the check agrees with the ledger.
async fn upserts_keep_the_newest_row_per_key(b: Backends) {
    let config = merged_config(&b);
    let publisher = publisher(&b, &config);
    let uri = table_uri(&b, &config, ORDERS);
    let mut ev = Events::new(&b, &config);
    let (t0, t1, t2, t3) = (
        "2026-11-29T10:00:00Z",
        "2026-11-30T10:00:00Z",
        "2026-12-01T10:00:00Z",
        "2026-12-02T10:00:00Z",
    );
    let a = "in/2026-11-30/a.csv";
    let bk = "in/2026-12-01/b.csv";
    let c = "in/2026-12-01/c.csv";
    let b_rows = export(&[
        (4, "b", t2),
        (5, "b", t2),
        (6, "b", t2),
        (7, "b", t2),
        (2, "b-old", t0),
        (8, "b", t2),
        (9, "b", t2),
        (9, "b-last", t2),
    ]);
    let publish = |key: &str| {
        let keys = vec![key.to_string()];
        let publisher = &publisher;
        async move { publisher.publish_keys(ORDERS, &keys).await.unwrap() }
    };

    ev.put(
        a,
        &export(&(1..=6).map(|i| (i, "a", t1)).collect::<Vec<_>>()),
    )
    .await;
    publish(a).await;
    ev.put(bk, &b_rows).await;
    let p = publish(bk).await;
    // b's file comes in whole except order 2 (a's is newer); a's file is replaced by a
    // selection without orders 4–6.
    assert_eq!((p.added, p.removed), (2, 1), "{}: {p:?}", b.name);
    ev.put(c, &export(&[(5, "c", t2)])).await;
    publish(c).await;
    let all_b = want(&[
        (1, "a"),
        (2, "a"),
        (3, "a"),
        (4, "b"),
        (5, "c"),
        (6, "b"),
        (7, "b"),
        (8, "b"),
        (9, "b-last"),
    ]);
    assert_eq!(customers(&b, &read(&uri, None)), all_b, "{}", b.name);

    // The winning export deleted: a's orders 4 and 6 come back, 7–9 leave, 5 stays c's.
    ev.delete(bk).await;
    publish(bk).await;
    assert_eq!(
        customers(&b, &read(&uri, None)),
        want(&[(1, "a"), (2, "a"), (3, "a"), (4, "a"), (5, "c"), (6, "a")]),
        "{}",
        b.name
    );
    // a overwritten with newer rows for 1–3 only: 4 and 6 leave with its old version.
    ev.put(a, &export(&[(1, "a2", t3), (2, "a2", t3), (3, "a2", t3)]))
        .await;
    publish(a).await;
    assert_eq!(
        customers(&b, &read(&uri, None)),
        want(&[(1, "a2"), (2, "a2"), (3, "a2"), (5, "c")]),
        "{}",
        b.name
    );
    // b again, its event delivered twice: b's rows win where they are newest.
    ev.put(bk, &b_rows).await;
    publish(bk).await;
    let p = publish(bk).await;
    assert_eq!(p.committed, None, "{p:?}");
    let end = want(&[
        (1, "a2"),
        (2, "a2"),
        (3, "a2"),
        (4, "b"),
        (5, "c"),
        (6, "b"),
        (7, "b"),
        (8, "b"),
        (9, "b-last"),
    ]);
    let t = read(&uri, None);
    assert_eq!(customers(&b, &t), end, "{}", b.name);
    // Every version a reader could have opened held one row per order.
    let latest = t["version"].as_i64().unwrap();
    for v in 1..=latest {
        customers(&b, &read(&uri, Some(v)));
    }

    // A fresh process (cold: no cached keys, no snapshot) sweeps: nothing to do, and its check
    // agrees with the ledger (rows = orders).
    let fresh = self::publisher(&b, &config);
    let p = fresh.publish_all(ORDERS).await.unwrap();
    assert_eq!((p.committed, p.keys), (None, 3), "{}: {p:?}", b.name);
    let check = fresh.check(ORDERS).await.unwrap();
    assert!(check.is_clean(), "{}: {check:?}", b.name);
    assert_eq!((check.table_rows, check.ledger_rows), (9, 9), "{check:?}");
    assert_eq!(check.files, 3, "{check:?}");

    // Racing committers after a burst of changes: still one row per order, the same ones.
    ev.put(c, &export(&[(5, "c2", t3), (10, "c2", t0)])).await;
    ev.delete(a).await;
    let keys: Vec<String> = [a, bk, c].iter().map(|k| k.to_string()).collect();
    let racers: Vec<Publisher> = (0..3).map(|_| self::publisher(&b, &config)).collect();
    let results =
        futures::future::join_all(racers.iter().map(|p| p.publish_keys(ORDERS, &keys))).await;
    for r in results {
        r.unwrap();
    }
    assert_eq!(
        customers(&b, &read(&uri, None)),
        want(&[
            (2, "b-old"),
            (4, "b"),
            (5, "c2"),
            (6, "b"),
            (7, "b"),
            (8, "b"),
            (9, "b-last"),
            (10, "c2"),
        ]),
        "{}",
        b.name
    );
    let check = fresh.check(ORDERS).await.unwrap();
    assert!(check.is_clean(), "{}: {check:?}", b.name);

    // d beats c's order 10, and is deleted again: c's own output comes back in place of
    // its selection (b keeps a selection: its first row of order 9 never wins).
    let d = "in/2026-12-01/d.csv";
    ev.put(d, &export(&[(10, "d", t1)])).await;
    publish(d).await;
    assert_eq!(customers(&b, &read(&uri, None))[&10], "d", "{}", b.name);
    ev.delete(d).await;
    publish(d).await;
    let t = read(&uri, None);
    assert_eq!(customers(&b, &t)[&10], "c2", "{}", b.name);
    assert_eq!(t["rows"], json!(8), "{t}");
    let r = b.ledger.get(ORDERS, c).await.unwrap().unwrap();
    let own = r.committed.unwrap().outputs[0].key.clone();
    let table = tidemark_delta::delta::load_existing(&tables(&b), source(&config, ORDERS))
        .await
        .unwrap()
        .unwrap();
    let active: Vec<String> = table
        .snapshot()
        .unwrap()
        .log_data()
        .iter()
        .map(|f| format!("merged/{}", f.path()))
        .collect();
    assert_eq!(active.len(), 2, "{}: {active:?}", b.name);
    assert!(active.contains(&own), "{}: {own} not in {active:?}", b.name);
    let check = fresh.check(ORDERS).await.unwrap();
    assert!(check.is_clean(), "{}: {check:?}", b.name);
}

#[tokio::test]
async fn upserts_keep_the_newest_row_per_key_aws() {
    upserts_keep_the_newest_row_per_key(Backends::aws().await).await;
}

#[tokio::test]
async fn upserts_keep_the_newest_row_per_key_embedded() {
    upserts_keep_the_newest_row_per_key(Backends::embedded().await).await;
}

/// A small deterministic generator (xorshift64*).
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Upsert under chaos: random exports (overlapping order ids, few distinct `ordered_at`
/// values so ties are common, keys repeated inside a file), overwrites and deletes over two
/// partitions; after each change one to three committers publish the changed keys at once,
/// two of them crashing at a random share of their steps (a crashed publish's keys are
/// published again later, as a stream batch is redelivered). At the end: one row per order,
/// exactly the winners an independent oracle computes from what is live, a sweep finds
/// nothing left to do, and every sampled table version had one row per order.
async fn upsert_under_crashes_and_racing_committers_ends_exact(b: Backends) {
    use tidemark_tests::chaos::committer::PublishCrashes;
    let seed = tidemark_tests::chaos::seed_from_env();
    let mut draw = Draw(seed | 1);
    let config = merged_config(&b);
    let uri = table_uri(&b, &config, ORDERS);
    let mut ev = Events::new(&b, &config);
    let times = [
        "2026-11-28T10:00:00Z",
        "2026-11-29T10:00:00Z",
        "2026-11-30T10:00:00Z",
    ];
    let crashes = Arc::new(PublishCrashes::new(seed, 0.25));
    let committers: Vec<Publisher> = (0..3)
        .map(|i| {
            let mut p = publisher(&b, &config);
            if i > 0 {
                p.faults = crashes.clone();
            }
            p
        })
        .collect();
    let keys: Vec<String> = (0..8)
        .map(|i| format!("in/2026-12-0{}/k{i}.csv", 1 + i % 2))
        .collect();
    // What is live: key → rows (order id, customer, index into `times`).
    let mut live: BTreeMap<String, Vec<(i64, String, usize)>> = BTreeMap::new();
    let mut unpublished: BTreeSet<String> = BTreeSet::new();
    let (mut commits, mut crashed) = (0, 0);
    for op in 0..40 {
        let key = keys[draw.below(keys.len() as u64) as usize].clone();
        if live.contains_key(&key) && draw.below(4) == 0 {
            ev.delete(&key).await;
            live.remove(&key);
        } else {
            let n = 1 + draw.below(6) as usize;
            let rows: Vec<(i64, String, usize)> = (0..n)
                .map(|r| {
                    (
                        1 + draw.below(12) as i64,
                        format!("op{op}r{r}"),
                        draw.below(times.len() as u64) as usize,
                    )
                })
                .collect();
            let body: Vec<(i64, &str, &str)> = rows
                .iter()
                .map(|(id, c, t)| (*id, c.as_str(), times[*t]))
                .collect();
            ev.put(&key, &export(&body)).await;
            live.insert(key.clone(), rows);
        }
        unpublished.insert(key);
        let batch: Vec<String> = unpublished.iter().cloned().collect();
        let racing = 1 + draw.below(3) as usize;
        let first = draw.below(3) as usize;
        let runs = (0..racing).map(|i| committers[(first + i) % 3].publish_keys(ORDERS, &batch));
        let mut landed = false;
        for r in futures::future::join_all(runs).await {
            match r {
                Ok(p) => {
                    landed = true;
                    commits += usize::from(p.committed.is_some());
                }
                Err(PublishError::Crashed(_)) => crashed += 1,
                Err(e @ PublishError::Contended { .. }) => eprintln!("{e}"),
                Err(e) => panic!("{}: seed {seed}: {e}", b.name),
            }
        }
        if landed {
            unpublished.clear();
        }
    }
    if !unpublished.is_empty() {
        let batch: Vec<String> = unpublished.iter().cloned().collect();
        committers[0].publish_keys(ORDERS, &batch).await.unwrap();
    }
    // The oracle: per order, the greatest (time, object name, row).
    let mut best: BTreeMap<i64, ((usize, String, usize), String)> = BTreeMap::new();
    for (key, rows) in &live {
        let name = key.strip_prefix("in/").unwrap().replace('/', "_");
        for (r, (id, customer, t)) in rows.iter().enumerate() {
            let rank = (*t, name.clone(), r);
            if best.get(id).is_none_or(|(b, _)| rank > *b) {
                best.insert(*id, (rank, customer.clone()));
            }
        }
    }
    let expected: BTreeMap<i64, String> = best.into_iter().map(|(k, (_, c))| (k, c)).collect();
    let t = read(&uri, None);
    assert_eq!(
        customers(&b, &t),
        expected,
        "{}: seed {seed}, live {live:?}",
        b.name
    );
    let sweep = committers[0].publish_all(ORDERS).await.unwrap();
    assert_eq!(sweep.committed, None, "{}: seed {seed}: {sweep:?}", b.name);
    let check = committers[0].check(ORDERS).await.unwrap();
    assert!(check.is_clean(), "{}: {check:?}", b.name);
    let latest = t["version"].as_i64().unwrap();
    for v in (1..=latest).step_by(4) {
        customers(&b, &read(&uri, Some(v)));
    }
    let by_step = crashes.by_step();
    assert!(
        crashed > 0 && by_step.iter().all(|(_, _, c)| *c > 0),
        "{}: seed {seed}: crashes {by_step:?}",
        b.name
    );
    assert!(commits >= 20, "{}: {commits} commits", b.name);
}

#[tokio::test]
async fn upsert_under_crashes_and_racing_committers_ends_exact_aws() {
    upsert_under_crashes_and_racing_committers_ends_exact(Backends::aws().await).await;
}

#[tokio::test]
async fn upsert_under_crashes_and_racing_committers_ends_exact_embedded() {
    upsert_under_crashes_and_racing_committers_ends_exact(Backends::embedded().await).await;
}

/// The ledger's change feed as DynamoDB Local produces it: the ledger table's own stream
/// (`KEYS_ONLY`, as the template declares it), read from its start by boto3
/// (`tests/readers/read_stream.py`) and handed to the stream handler in batches of 5 as the
/// event source mapping would, publishes exactly what ingest committed — puts, an overwrite,
/// a delete, a duplicate event — and the whole stream delivered again changes nothing.
#[tokio::test]
async fn dynamodb_locals_own_stream_publishes_exactly() {
    let b = Backends::aws().await;
    let table = b.ledger_table.clone().expect("a DynamoDB ledger");
    let config = config(&b);
    let uri = table_uri(&b, &config, ORDERS);
    let publisher = publisher(&b, &config);
    let mut ev = Events::new(&b, &config);
    ev.put("in/2026-11-30/a.csv", &csv(1, 5)).await;
    ev.put("in/2026-11-30/b.csv", &csv(6, 5)).await;
    ev.put("in/2026-12-01/c.csv", &csv(11, 5)).await;
    ev.put("in/2026-12-01/c.csv", &csv(11, 5)).await;
    ev.put("in/2026-11-30/a.csv", &csv(101, 3)).await;
    ev.delete("in/2026-11-30/b.csv").await;
    ev.put("keep/k.csv", &csv(70, 2)).await;

    let python =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.local/venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: start the local stack with infra/localstack.sh",
        python.display()
    );
    let script =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("readers/read_stream.py");
    let out = Command::new(python)
        .arg(script)
        .arg(&table)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "read_stream.py failed");
    let stream: Value = serde_json::from_slice(&out.stdout).unwrap();
    let records = stream["Records"].as_array().unwrap().clone();
    let pks: BTreeSet<&str> = records
        .iter()
        .map(|r| r["dynamodb"]["Keys"]["pk"]["S"].as_str().unwrap())
        .collect();
    for key in [
        "orders/in/2026-11-30/a.csv",
        "orders/in/2026-11-30/b.csv",
        "orders/in/2026-12-01/c.csv",
        "archive/keep/k.csv",
    ] {
        assert!(pks.contains(key), "{key} not in the stream: {pks:?}");
    }
    assert!(
        records
            .iter()
            .all(|r| r["dynamodb"]["StreamViewType"] == "KEYS_ONLY"
                && r["dynamodb"].get("NewImage").is_none()),
        "{records:?}"
    );
    let batch = |records: &[Value]| -> aws_lambda_events::event::dynamodb::Event {
        serde_json::from_value(json!({ "Records": records })).unwrap()
    };
    let mut commits = 0;
    for chunk in records.chunks(5) {
        let (published, response) = tidemark_delta::stream::handle(&publisher, &batch(chunk)).await;
        assert!(response.batch_item_failures.is_empty(), "{response:?}");
        commits += published.iter().filter(|p| p.committed.is_some()).count();
    }
    assert!(
        commits >= 2,
        "{commits} commits from {} records",
        records.len()
    );
    let mut want = range(11, 15);
    want.extend(range(101, 103));
    assert_eq!(ids(&read(&uri, None)), want);
    assert_eq!(
        ids(&read(&table_uri(&b, &config, ARCHIVE), None)),
        range(70, 71)
    );
    // Delivered again, all at once (a retried or replayed shard): nothing changes.
    let (published, response) = tidemark_delta::stream::handle(&publisher, &batch(&records)).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    assert!(
        published.iter().all(|p| p.committed.is_none()),
        "{published:?}"
    );
    let check = publisher.check(ORDERS).await.unwrap();
    assert!(check.is_clean(), "{check:?}");
}
