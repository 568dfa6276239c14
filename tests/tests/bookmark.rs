//! Row-level bookmark keys, each case on both backend pairs (S3 emulator + DynamoDB Local,
//! and local folders + SQLite): overlapping snapshots emit each key exactly once in any order
//! and with 8 concurrent workers; a key below the mark that was never emitted is LATE —
//! counted, written to `_late/` or dropped, shown by `status` and reported by reconcile;
//! descending and composite keys; an overwrite keeps what its earlier version emitted; a
//! crash at every step loses and duplicates nothing.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::json;
use tidemark::bookmark::{LOCK_KEY, lock_source_id};
use tidemark::config::Config;
use tidemark::model::{BookmarkCounts, Status, Target, VersionRef};
use tidemark::ports::Clock;
use tidemark::process::{Faults, Outcome, Pipeline, Step};
use tidemark::protocol::Skip;
use tidemark::reconcile::{self, Options, Report, Window};
use tidemark::{ProcessError, Result};
use tidemark_cli::Backend;
use tidemark_cli::commands::status;
use tidemark_tests::{Backends, LEASE_MARGIN_MS};

fn config(b: &Backends) -> Arc<Config> {
    let schema = json!([
        {"name": "id", "type": "int64", "nullable": false},
        {"name": "region", "type": "string", "nullable": false},
        {"name": "at", "type": "timestamp", "nullable": false},
        {"name": "amount", "type": "decimal(12,2)"}
    ]);
    let source = |id: &str, bookmark: serde_json::Value| {
        json!({
            "source_id": id, "bucket": b.landing, "prefix": format!("{id}/"), "format": "csv",
            "schema": schema, "sum_columns": ["amount"],
            "output": {"bucket": b.lake, "prefix": format!("{id}/")},
            "reconcile": {"grace_minutes": 0}, "max_attempts": 5,
            "bookmark": bookmark
        })
    };
    let doc = json!({
        "sources": [
            source("snap", json!({"keys": ["id"]})),
            source("drop", json!({"keys": ["id"], "late_rows": "drop"})),
            source("desc", json!({"keys": ["id"], "order": "descending"})),
            source("comp", json!({"keys": ["region", "at"]})),
        ],
        "reports": {"bucket": b.lake, "prefix": "reports/"}
    });
    Arc::new(Config::from_json(&doc.to_string()).expect("valid"))
}

fn pipeline(b: &Backends, faults: Option<Arc<dyn Faults>>) -> Pipeline {
    let mut p = b.pipeline_with(config(b));
    if let Some(f) = faults {
        p.faults = f;
    }
    p
}

const T0: i64 = 1_700_000_000;

fn at(secs: i64) -> String {
    chrono::DateTime::from_timestamp(T0 + secs, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A CSV of `(id, region, at offset in s)` rows; amount = id / 100.
fn csv(rows: &[(i64, &str, i64)]) -> String {
    let mut s = String::from("id,region,at,amount\n");
    for (id, region, secs) in rows {
        s.push_str(&format!(
            "{id},{region},{},{}.{:02}\n",
            at(*secs),
            id / 100,
            id % 100
        ));
    }
    s
}

fn snapshot(ids: impl IntoIterator<Item = i64>) -> String {
    let rows: Vec<(i64, &str, i64)> = ids.into_iter().map(|i| (i, "eu", i)).collect();
    csv(&rows)
}

/// The version the store holds now at `key`, as an event without a sequencer names it.
async fn current(b: &Backends, key: &str) -> Target {
    let meta = b
        .store
        .head(&b.landing, key)
        .await
        .unwrap()
        .expect("landed");
    Target::Version(VersionRef {
        version: meta.etag.clone(),
        version_id: None,
        etag: Some(meta.etag),
        sequencer: None,
        size: Some(meta.size),
    })
}

/// Process the landed object `key` as an event would (the version the store holds now).
async fn process(b: &Backends, p: &Pipeline, key: &str) -> Result<Outcome> {
    let target = current(b, key).await;
    let source_id = key.split('/').next().unwrap();
    let source = p.config.source(source_id).expect("routed").clone();
    p.process(&source, key, target, &b.ctx("test")).await
}

/// Process `key` until it is done: a retryable failure (the source's lock busy) is what a
/// redelivery would retry.
async fn process_until_done(b: &Backends, p: &Pipeline, key: &str) -> Outcome {
    for _ in 0..50 {
        match process(b, p, key).await {
            Ok(Outcome::Skipped(Skip::InFlight)) => {}
            Ok(o) => return o,
            Err(e) if e.is_retryable() => {}
            Err(e) => panic!("{key}: {e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("{key}: never done")
}

fn ids_in(body: &Bytes) -> Vec<i64> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(body.clone())
        .expect("parquet")
        .build()
        .expect("reader");
    let mut ids = Vec::new();
    for batch in reader {
        let batch = batch.expect("batch");
        let col = batch
            .column_by_name("id")
            .expect("id")
            .as_primitive::<Int64Type>();
        ids.extend(col.values().iter().copied());
    }
    ids
}

/// The ids in the source's outputs (not `_late/`), sorted, and those under `_late/`.
async fn lake_ids(b: &Backends, source: &str) -> (Vec<i64>, Vec<i64>) {
    let mut emitted = Vec::new();
    let mut late = Vec::new();
    for (key, body) in b.lake_objects(&format!("{source}/")).await {
        if key.starts_with(&format!("{source}/_late/")) {
            late.extend(ids_in(&body));
        } else if key.ends_with(".parquet") {
            emitted.extend(ids_in(&body));
        }
    }
    emitted.sort_unstable();
    late.sort_unstable();
    (emitted, late)
}

async fn counts(b: &Backends, source: &str) -> (Option<Vec<String>>, BookmarkCounts) {
    let lock = b
        .ledger
        .get(&lock_source_id(source), LOCK_KEY)
        .await
        .unwrap()
        .expect("lock record");
    assert!(lock.claim.is_none(), "the lock is released");
    let state = lock.bookmark.expect("state");
    assert!(state.advance.is_none(), "no advance left");
    (state.mark, state.counts)
}

async fn reconcile_report(b: &Backends, p: &Pipeline, source: &str) -> Report {
    let s = p.config.source(source).unwrap();
    let window = Window {
        from_ms: 0,
        to_ms: b.clock.now_ms() + 86_400_000,
    };
    let opts = Options {
        repair: false,
        deep_sample: Some(1.0),
        ..Options::default()
    };
    let r = reconcile::reconcile_source(p, s, window, opts, &b.ctx("reconcile"))
        .await
        .expect("reconcile");
    Report {
        run_id: "reconcile".into(),
        generated_at: b.clock.now_ms(),
        sources: vec![r],
        jobs: Vec::new(),
        freshness: Vec::new(),
    }
}

async fn full_snapshots_in_any_order_with_8_workers_emit_each_key_once(b: Backends) {
    let p = pipeline(&b, None);
    // Snapshot i holds ids 0..10(i+1): each file re-exports every earlier row.
    let mut keys = Vec::new();
    for i in 0..12i64 {
        let key = format!("snap/s{i:02}.csv");
        b.upload(&key, snapshot(0..10 * (i + 1))).await;
        keys.push(key);
    }
    // A scrambled order, taken by 8 concurrent workers.
    let order: VecDeque<String> = (0..12).map(|i| keys[(i * 7) % 12].clone()).collect();
    let queue = Arc::new(Mutex::new(order));
    let b = Arc::new(b);
    let mut workers = Vec::new();
    for _ in 0..8 {
        let (queue, b, p) = (queue.clone(), b.clone(), p.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let Some(key) = queue.lock().unwrap().pop_front() else {
                    return;
                };
                let outcome = process_until_done(&b, &p, &key).await;
                assert!(matches!(outcome, Outcome::Processed { .. }), "{outcome:?}");
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let (emitted, late) = lake_ids(&b, "snap").await;
    assert_eq!(emitted, (0..120).collect::<Vec<_>>(), "each key once");
    assert!(late.is_empty());
    let (mark, c) = counts(&b, "snap").await;
    assert_eq!(mark, Some(vec!["119".to_string()]));
    let all_rows: u64 = (1..=12).map(|i| 10 * i).sum();
    assert_eq!(
        (c.objects, c.emitted, c.late, c.skipped),
        (12, 120, 0, all_rows - 120)
    );
    // The ledger's rows are the lake's; reconcile agrees (every row of every file accounted
    // for: emitted or re-exported).
    let listed = b.ledger.list("snap").await.unwrap();
    assert_eq!(
        listed.len(),
        12,
        "the lock record is not one of the source's"
    );
    let ledger_rows: u64 = listed
        .iter()
        .map(|r| r.committed.as_ref().unwrap().rows)
        .sum();
    assert_eq!(ledger_rows, 120);
    let report = reconcile_report(&b, &p, "snap").await;
    let r = &report.sources[0];
    assert!(r.clean(), "{r:#?}");
    assert_eq!(r.late_rows, 0);
    assert_eq!(r.totals.lake.rows, 120);
}

async fn late_keys_are_counted_written_or_dropped_and_reported(b: Backends) {
    let p = pipeline(&b, None);
    for source in ["snap", "drop"] {
        // 7 and 13 are missing from the first file, then turn up below the mark.
        let first = snapshot((0..50).filter(|i| *i != 7 && *i != 13));
        b.upload(&format!("{source}/a.csv"), first).await;
        b.upload(&format!("{source}/b.csv"), snapshot(0..60)).await;
        b.upload(&format!("{source}/c.csv"), snapshot(0..60)).await;
        for f in ["a", "b", "c"] {
            let o = process_until_done(&b, &p, &format!("{source}/{f}.csv")).await;
            assert!(matches!(o, Outcome::Processed { .. }), "{o:?}");
        }
        let (emitted, late) = lake_ids(&b, source).await;
        let want: Vec<i64> = (0..60).filter(|i| *i != 7 && *i != 13).collect();
        assert_eq!(emitted, want, "{source}");
        let (mark, c) = counts(&b, source).await;
        assert_eq!(mark, Some(vec!["59".to_string()]));
        // b: 10 emitted, 2 late, 48 re-exported; c: all 60 re-exported (the late keys too).
        assert_eq!(
            (c.objects, c.emitted, c.late, c.skipped),
            (3, 58, 2, 48 + 60),
            "{source}"
        );
        let record = b
            .ledger
            .get(source, &format!("{source}/b.csv"))
            .await
            .unwrap()
            .unwrap();
        let object = record.bookmark.expect("object counts");
        assert_eq!((object.counts.emitted, object.counts.late), (10, 2));
        if source == "snap" {
            assert_eq!(late, vec![7, 13], "written to the late output");
            let late_output = object.late_output.expect("late output recorded");
            assert!(
                late_output.key.starts_with("snap/_late/b.csv."),
                "{late_output:?}"
            );
        } else {
            assert!(late.is_empty(), "dropped by policy");
            assert!(object.late_output.is_none());
        }

        // `tidemark status` shows the mark and the late count.
        let backend = Backend::from_pipeline(p.clone(), "test");
        let st = status::status(&backend, Some(source)).await.unwrap();
        let bm = st[0].bookmark.as_ref().expect("bookmark status");
        assert_eq!(bm.counts.late, 2);
        assert_eq!(bm.mark, Some(vec!["59".to_string()]));
        assert_eq!(st[0].count(Status::Done), 3);
        assert_eq!(st[0].totals.rows, 58);
        let mut text = Vec::new();
        status::print_status(&st, &backend, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("LATE 2"), "{text}");
        assert!(text.contains("mark id=59"), "{text}");

        // Reconcile: no mismatch, the late rows reported, as a metric too.
        let report = reconcile_report(&b, &p, source).await;
        let r = &report.sources[0];
        assert!(r.mismatches.is_empty(), "{:#?}", r.mismatches);
        assert_eq!(r.late_rows, 2);
        assert_eq!(r.bookmark.map(|c| c.late), Some(2));
        let metrics = report.metric_lines().join("\n");
        assert!(metrics.contains("\"LateRows\":2"), "{metrics}");
        assert!(report.to_html().contains("2 LATE rows"));
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["sources"][0]["late_rows"], 2);
    }
}

async fn descending_keys_emit_downwards(b: Backends) {
    let p = pipeline(&b, None);
    b.upload("desc/a.csv", snapshot((90..=100).rev())).await;
    // 95..90 again, 89..80 new, and 150: above the mark, never emitted: late.
    b.upload("desc/b.csv", snapshot((80..=95).rev().chain([150])))
        .await;
    for f in ["desc/a.csv", "desc/b.csv"] {
        process_until_done(&b, &p, f).await;
    }
    let (emitted, late) = lake_ids(&b, "desc").await;
    assert_eq!(emitted, (80..=100).collect::<Vec<_>>());
    assert_eq!(late, vec![150]);
    let (mark, c) = counts(&b, "desc").await;
    assert_eq!(mark, Some(vec!["80".to_string()]));
    assert_eq!((c.emitted, c.late, c.skipped), (21, 1, 6));
}

async fn a_composite_string_and_timestamp_key(b: Backends) {
    let p = pipeline(&b, None);
    let first = [(1, "eu", 1), (2, "eu", 2), (3, "us", 1)];
    b.upload("comp/a.csv", csv(&first)).await;
    // (us, 2) is beyond the mark (us, 1); (eu, 3) sorts below it: late.
    let second = [
        (1, "eu", 1),
        (2, "eu", 2),
        (3, "us", 1),
        (4, "us", 2),
        (5, "eu", 3),
    ];
    b.upload("comp/b.csv", csv(&second)).await;
    for f in ["comp/a.csv", "comp/b.csv"] {
        process_until_done(&b, &p, f).await;
    }
    let (emitted, late) = lake_ids(&b, "comp").await;
    assert_eq!(emitted, vec![1, 2, 3, 4]);
    assert_eq!(late, vec![5]);
    let (mark, c) = counts(&b, "comp").await;
    assert_eq!(mark, Some(vec!["us".into(), format!("{}", at_micros(2))]));
    assert_eq!((c.emitted, c.late, c.skipped), (4, 1, 3));
}

fn at_micros(secs: i64) -> String {
    chrono::DateTime::from_timestamp(T0 + secs, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

async fn an_overwrite_keeps_the_rows_its_earlier_version_emitted(b: Backends) {
    let p = pipeline(&b, None);
    b.upload("snap/w.csv", snapshot(0..10)).await;
    process_until_done(&b, &p, "snap/w.csv").await;
    b.upload("snap/w.csv", snapshot(0..15)).await;
    let o = process_until_done(&b, &p, "snap/w.csv").await;
    assert!(matches!(o, Outcome::Processed { rows: 5, .. }), "{o:?}");
    let (emitted, _) = lake_ids(&b, "snap").await;
    assert_eq!(emitted, (0..15).collect::<Vec<_>>());
    let r = b.ledger.get("snap", "snap/w.csv").await.unwrap().unwrap();
    let c = r.committed.unwrap();
    assert_eq!((c.rows, c.outputs.len()), (15, 2));
    // 0..15 → amount sums to 1.05.
    assert_eq!(c.sums["amount"], "1.05");
    let report = reconcile_report(&b, &p, "snap").await;
    assert!(report.sources[0].clean(), "{:#?}", report.sources[0]);
}

/// Stops the worker at `step` the first time it reaches it for `key`.
struct DieOnce {
    step: Step,
    key: String,
    fired: AtomicBool,
}

impl Faults for DieOnce {
    fn check(&self, step: Step, key: &str) -> Result<()> {
        if step == self.step && key == self.key && !self.fired.swap(true, Ordering::SeqCst) {
            return Err(ProcessError::Crashed(step.as_str()));
        }
        Ok(())
    }
}

async fn a_crash_at_every_step_loses_and_duplicates_nothing(b: Backends) {
    let healthy = pipeline(&b, None);
    let steps = [
        Step::AfterClaim,
        Step::AfterGet,
        Step::AfterOutputPut,
        Step::BeforeCommit,
        Step::AfterCommit,
    ];
    let mut want = Vec::new();
    for (i, step) in steps.into_iter().enumerate() {
        let base = i as i64 * 1000;
        let dir = format!("snap/crash{i}");
        b.upload(&format!("{dir}/a.csv"), snapshot(base..base + 20))
            .await;
        b.upload(&format!("{dir}/b.csv"), snapshot(base..base + 40))
            .await;
        b.upload(&format!("{dir}/c.csv"), snapshot(base..base + 60))
            .await;
        want.extend(base..base + 60);
        process_until_done(&b, &healthy, &format!("{dir}/a.csv")).await;
        let dying = pipeline(
            &b,
            Some(Arc::new(DieOnce {
                step,
                key: format!("{dir}/b.csv"),
                fired: AtomicBool::new(false),
            })),
        );
        let crashed = process(&b, &dying, &format!("{dir}/b.csv")).await;
        assert!(
            matches!(crashed, Err(ProcessError::Crashed(_))),
            "{step:?}: {crashed:?}"
        );
        // The dead worker's leases run out; another object of the source settles its lock.
        b.clock.advance(LEASE_MARGIN_MS + 1);
        let o = process_until_done(&b, &healthy, &format!("{dir}/c.csv")).await;
        assert!(matches!(o, Outcome::Processed { .. }), "{step:?}: {o:?}");
        // Already exactly once: the dead worker's uncommitted outputs were removed by the
        // worker that took the lock after it.
        let (emitted, _) = lake_ids(&b, "snap").await;
        assert_eq!(
            emitted, want,
            "{step:?}: before the crashed object is retried"
        );
        // The redelivered event of the crashed object.
        let o = process_until_done(&b, &healthy, &format!("{dir}/b.csv")).await;
        match step {
            Step::AfterCommit => assert_eq!(o, Outcome::Skipped(Skip::Duplicate), "{step:?}"),
            _ => assert!(matches!(o, Outcome::Processed { .. }), "{step:?}: {o:?}"),
        }
        let (emitted, late) = lake_ids(&b, "snap").await;
        assert_eq!(emitted, want, "{step:?}: each key once");
        assert!(late.is_empty(), "{step:?}");
        let (mark, c) = counts(&b, "snap").await;
        assert_eq!(mark, Some(vec![(base + 59).to_string()]), "{step:?}");
        assert_eq!((c.emitted, c.late), (want.len() as u64, 0), "{step:?}");
    }
    // One index object: the superseded and discarded ones were removed.
    let indexes: Vec<String> = b
        .lake_objects("snap/_bookmark/")
        .await
        .into_keys()
        .collect();
    assert_eq!(indexes.len(), 1, "{indexes:?}");
    let report = reconcile_report(&b, &healthy, "snap").await;
    assert!(
        report.sources[0].mismatches.is_empty(),
        "{:#?}",
        report.sources[0]
    );
    let statuses: BTreeMap<Status, usize> =
        b.ledger
            .list("snap")
            .await
            .unwrap()
            .iter()
            .fold(BTreeMap::new(), |mut m, r| {
                *m.entry(r.status).or_default() += 1;
                m
            });
    assert_eq!(statuses, BTreeMap::from([(Status::Done, 15)]));
}

/// Stops the worker at `step` for `key` until told to go on.
struct PauseAt {
    step: Step,
    key: String,
    reached: Mutex<Option<std::sync::mpsc::Sender<()>>>,
    resume: Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Faults for PauseAt {
    fn check(&self, step: Step, key: &str) -> Result<()> {
        if step == self.step
            && key == self.key
            && let Some(tx) = self.reached.lock().unwrap().take()
        {
            tx.send(()).unwrap();
            // Hand this worker thread's other tasks to the runtime while waiting.
            tokio::task::block_in_place(|| self.resume.lock().unwrap().recv().unwrap());
        }
        Ok(())
    }
}

/// A worker that outlives its leases with its advance prepared (impossible for a Lambda,
/// whose lease is its deadline plus a margin) is fenced by the next holder: it can no longer
/// commit, its outputs are removed, and every key is in the lake once.
async fn a_holder_that_outlives_its_lease_is_fenced_and_cannot_commit(b: Backends) {
    let healthy = pipeline(&b, None);
    b.upload("snap/z/a.csv", snapshot(0..20)).await;
    b.upload("snap/z/b.csv", snapshot(0..40)).await;
    b.upload("snap/z/c.csv", snapshot(0..60)).await;
    process_until_done(&b, &healthy, "snap/z/a.csv").await;
    let (reached_tx, reached_rx) = std::sync::mpsc::channel();
    let (resume_tx, resume_rx) = std::sync::mpsc::channel();
    let slow = pipeline(
        &b,
        Some(Arc::new(PauseAt {
            step: Step::BeforeCommit,
            key: "snap/z/b.csv".into(),
            reached: Mutex::new(Some(reached_tx)),
            resume: Mutex::new(resume_rx),
        })),
    );
    let b = Arc::new(b);
    let zombie = {
        let b = b.clone();
        tokio::spawn(async move { process(&b, &slow, "snap/z/b.csv").await })
    };
    tokio::task::spawn_blocking(move || reached_rx.recv().unwrap())
        .await
        .unwrap();
    // Its advance is prepared, its object not committed; its leases run out.
    b.clock.advance(LEASE_MARGIN_MS + 1);
    let o = process_until_done(&b, &healthy, "snap/z/c.csv").await;
    assert!(matches!(o, Outcome::Processed { .. }), "{o:?}");
    let fenced = b.ledger.get("snap", "snap/z/b.csv").await.unwrap().unwrap();
    assert!(fenced.claim.is_none(), "{fenced:?}");
    assert_eq!(fenced.status, Status::Pending);
    let (emitted, _) = lake_ids(&b, "snap").await;
    assert_eq!(emitted, (0..60).collect::<Vec<_>>());
    // The zombie wakes up and tries to commit.
    resume_tx.send(()).unwrap();
    let late = zombie.await.unwrap();
    assert!(
        matches!(late, Err(ProcessError::ClaimLost { .. })),
        "{late:?}"
    );
    let o = process_until_done(&b, &healthy, "snap/z/b.csv").await;
    assert!(matches!(o, Outcome::Processed { rows: 0, .. }), "{o:?}");
    let (emitted, _) = lake_ids(&b, "snap").await;
    assert_eq!(emitted, (0..60).collect::<Vec<_>>());
    let (mark, c) = counts(&b, "snap").await;
    assert_eq!(mark, Some(vec!["59".to_string()]));
    assert_eq!((c.objects, c.emitted, c.late), (3, 60, 0));
}

async fn replays_and_pauses_are_refused_for_a_keyed_source(b: Backends) {
    let mut p = pipeline(&b, None);
    b.upload("snap/r.csv", snapshot(0..3)).await;
    process_until_done(&b, &p, "snap/r.csv").await;
    let source = p.config.source("snap").unwrap().clone();
    let target = current(&b, "snap/r.csv").await;
    let e = p
        .refresh(&source, "snap/r.csv", target.clone(), &b.ctx("t"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("bookmark keys"), "{e}");
    let mut paused = (*p.config).clone();
    for s in &mut paused.sources {
        s.doc.mode = tidemark::config::Mode::Disable;
    }
    p.config = Arc::new(paused);
    let source = p.config.source("snap").unwrap().clone();
    let e = p
        .process(&source, "snap/r.csv", target, &b.ctx("t"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("bookmark keys"), "{e}");
}

tidemark_tests::on_both!(
    full_snapshots_in_any_order_with_8_workers_emit_each_key_once,
    late_keys_are_counted_written_or_dropped_and_reported,
    descending_keys_emit_downwards,
    a_composite_string_and_timestamp_key,
    an_overwrite_keeps_the_rows_its_earlier_version_emitted,
    a_crash_at_every_step_loses_and_duplicates_nothing,
    a_holder_that_outlives_its_lease_is_fenced_and_cannot_commit,
    replays_and_pauses_are_refused_for_a_keyed_source,
);
