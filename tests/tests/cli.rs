//! The operator CLI (`tidemark_cli`) on the embedded backends (a temp folder per test: folders
//! as buckets, a SQLite ledger), with one test of `run` + `status` + `rewind` on the AWS pair
//! (the local stack). Every test reads the lake back from the Parquet outputs and compares
//! rows and sums with what it wrote, so a duplicated or missing row fails it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};
use tidemark::config::{Config, Mode};
use tidemark::convert::SumValue;
use tidemark::model::{DeleteRef, IgnoredFields, Record, Status, Target};
use tidemark::ports::{Clock, GetOutcome, PutOutcome, SystemClock, TestClock, WriteCondition};
use tidemark::process::Outcome;
use tidemark_cli::commands::run::{Plan, RunReport, run};
use tidemark_cli::commands::watermark::{MarkArgs, ResetArgs, RewindArgs};
use tidemark_cli::commands::{explain, mode, status, watermark};
use tidemark_cli::{Backend, render};
use tidemark_tests::{Stack, Totals, orders_csv, orders_jsonl, parquet_totals};
use tokio::io::AsyncReadExt;

const LANDING: &str = "landing";
const LAKE: &str = "lake";

/// The sources document of these tests: orders as CSV under `in/`, as JSON Lines under
/// `json/` (the suites' orders schema), outputs in `lake`.
fn document(landing: &str, lake: &str, max_attempts: u32) -> Value {
    let schema = json!([
        {"name": "order_id", "type": "int64", "nullable": false},
        {"name": "customer", "type": "string"},
        {"name": "quantity", "type": "int32"},
        {"name": "amount", "type": "decimal(12,2)"},
        {"name": "ordered_at", "type": "timestamp"}
    ]);
    let source = |id: &str, prefix: &str, format: &str| {
        json!({
            "source_id": id, "bucket": landing, "prefix": prefix, "format": format,
            "schema": schema, "sum_columns": ["quantity", "amount"],
            "output": {"bucket": lake, "prefix": format!("{id}/")},
            "max_attempts": max_attempts
        })
    };
    json!({"sources": [source("orders", "in/", "csv"), source("orders_json", "json/", "jsonl")]})
}

/// One test's embedded backends in a temp dir, on a test clock.
struct Env {
    dir: tempfile::TempDir,
    backend: Backend,
    clock: TestClock,
}

impl Env {
    async fn new(max_attempts: u32) -> Self {
        Self::with(max_attempts, json!({})).await
    }

    /// [`Env::new`], with the fields of `extra` set on every source.
    async fn with(max_attempts: u32, extra: Value) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut doc = document(LANDING, LAKE, max_attempts);
        for source in doc["sources"].as_array_mut().unwrap() {
            for (k, v) in extra.as_object().unwrap() {
                source[k] = v.clone();
            }
        }
        std::fs::write(dir.path().join("sources.json"), doc.to_string()).unwrap();
        let config = Arc::new(Config::from_json(&doc.to_string()).expect("valid config"));
        let clock = TestClock::at(SystemClock.now_ms());
        let backend = Backend::local(dir.path(), config, Arc::new(clock.clone()))
            .await
            .expect("open embedded backends");
        Self {
            dir,
            backend,
            clock,
        }
    }

    /// Upload (or overwrite) a landing object.
    async fn upload(&self, key: &str, body: &str) {
        let store = &self.backend.pipeline.store;
        let condition = match store.head(LANDING, key).await.unwrap() {
            Some(m) => WriteCondition::Matches(m.etag),
            None => WriteCondition::Absent,
        };
        let put = store
            .put(
                LANDING,
                key,
                Bytes::from(body.to_string()),
                &BTreeMap::new(),
                &condition,
            )
            .await
            .unwrap();
        assert!(matches!(put, PutOutcome::Written { .. }), "upload {key}");
    }

    /// Upload `n` orders CSVs of 10 + 3i rows under `in/`; their combined totals.
    async fn upload_orders(&self, first: usize, n: usize) -> Totals {
        let mut t = Totals::default();
        for i in first..first + n {
            let (csv, totals) = orders_csv(1 + 1000 * i as i64, 10 + 3 * i);
            self.upload(&format!("in/2024/03/{i:02}/orders-{i}.csv"), &csv)
                .await;
            t.add(&totals);
        }
        t
    }

    async fn run(&self, plan: Plan) -> RunReport {
        run(&self.backend, &plan).await.expect("run")
    }

    async fn run_orders(&self) -> RunReport {
        self.run(Plan {
            source: Some("orders".into()),
            concurrency: 4,
            ..Plan::default()
        })
        .await
    }

    async fn records(&self, source: &str) -> Vec<Record> {
        self.backend.pipeline.ledger.list(source).await.unwrap()
    }

    /// Every Parquet output of a source, read back independently of the CLI: (files, totals).
    async fn lake(&self, source: &str) -> (usize, Totals) {
        let store = &self.backend.pipeline.store;
        let page = store.list(LAKE, &format!("{source}/"), None).await.unwrap();
        assert!(page.next.is_none());
        let mut t = Totals::default();
        for o in &page.objects {
            let GetOutcome::Found { mut body, .. } = store.get(LAKE, &o.key, None).await.unwrap()
            else {
                panic!("{} vanished", o.key)
            };
            let mut bytes = Vec::new();
            body.read_to_end(&mut bytes).await.unwrap();
            t.add(&parquet_totals(Bytes::from(bytes)));
        }
        (page.objects.len(), t)
    }

    /// The command line, on this env's folder and sources document: (exit code, stdout).
    async fn cli(&self, args: &[&str]) -> (ExitCode, String) {
        let root = self.dir.path().display().to_string();
        let config = self.dir.path().join("sources.json").display().to_string();
        let mut argv = vec![
            "tidemark",
            "--backend",
            "local",
            "--root",
            &root,
            "--config",
            &config,
        ];
        argv.extend(args);
        let cli = tidemark_cli::parse_args(&argv).expect("valid command line");
        let mut out = Vec::new();
        // The env's backends (and so its test clock), as `execute` would open them.
        let code = tidemark_cli::dispatch(cli.command, &self.backend, cli.json, &mut out)
            .await
            .expect("command runs");
        (code, String::from_utf8(out).unwrap())
    }

    /// The whole command line, opening the backends itself (system clock).
    async fn execute(&self, args: &[&str]) -> (ExitCode, String) {
        let root = self.dir.path().display().to_string();
        let config = self.dir.path().join("sources.json").display().to_string();
        let mut argv = vec![
            "tidemark",
            "--backend",
            "local",
            "--root",
            &root,
            "--config",
            &config,
        ];
        argv.extend(args);
        let cli = tidemark_cli::parse_args(&argv).expect("valid command line");
        let mut out = Vec::new();
        let code = tidemark_cli::execute(cli, &mut out)
            .await
            .expect("command runs");
        (code, String::from_utf8(out).unwrap())
    }
}

/// The ledger's sums as the exact values the test data implies.
fn sums_of(t: &Totals) -> BTreeMap<String, SumValue> {
    BTreeMap::from([
        ("quantity".to_string(), SumValue::Int(t.quantity)),
        (
            "amount".to_string(),
            SumValue::Decimal {
                unscaled: t.amount_cents,
                scale: 2,
            },
        ),
    ])
}

#[tokio::test]
async fn rewind_to_a_time_then_run_gives_the_same_rows_and_sums() {
    let env = Env::new(3).await;
    let early = env.upload_orders(0, 3).await;
    let r = env.run_orders().await;
    assert_eq!(r.total.processed, 3);

    env.clock.advance(3_600_000);
    let rewind_to = render::when_ms(env.clock.now_ms());
    let late = env.upload_orders(3, 2).await;
    let r = env.run_orders().await;
    assert_eq!((r.total.processed, r.total.duplicates), (2, 3));
    let mut all = early;
    all.add(&late);
    assert_eq!(env.lake("orders").await, (5, all));

    // Rewind to the second run: its two objects are forgotten, the first run's stay.
    env.clock.advance(60_000);
    let args = RewindArgs {
        to: rewind_to.clone(),
        source: Some("orders".into()),
        dry_run: false,
    };
    let report = watermark::rewind(&env.backend, &args).await.unwrap();
    assert_eq!(report.affected(), 2);
    assert_eq!(
        report.sources[0].keys,
        ["in/2024/03/03/orders-3.csv", "in/2024/03/04/orders-4.csv"]
    );
    assert_eq!(env.records("orders").await.len(), 3);

    // The next run processes exactly those again and replaces their outputs: no duplicates.
    let r = env.run_orders().await;
    assert_eq!((r.total.processed, r.total.duplicates), (2, 3));
    assert_eq!(env.lake("orders").await, (5, all));
    let st = status::status(&env.backend, Some("orders")).await.unwrap();
    assert_eq!(st[0].count(Status::Done), 5);
    assert_eq!(st[0].totals.rows, all.rows);
    assert_eq!(st[0].totals.sums, sums_of(&all));

    // Rewinding everything (via the command line, relative time) gives the same again.
    env.clock.advance(60_000);
    let (code, out) = env.cli(&["rewind", "--to", "-1d", "--json"]).await;
    assert_eq!(code, ExitCode::SUCCESS);
    let json: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["sources"][0]["affected"], 5, "{out}");
    let r = env.run_orders().await;
    assert_eq!(r.total.processed, 5);
    assert_eq!(env.lake("orders").await, (5, all));

    // The audit log names the rewound keys; explain shows the entry.
    let e = explain::explain(&env.backend, "orders", "in/2024/03/03/orders-3.csv")
        .await
        .unwrap();
    let commands: Vec<&str> = e.audit.iter().map(|a| a.command.as_str()).collect();
    assert!(commands.contains(&"rewind"), "{commands:?}");
}

#[tokio::test]
async fn reset_with_purge_then_run_gives_the_same_again() {
    let env = Env::new(3).await;
    let all = env.upload_orders(0, 4).await;
    env.run_orders().await;
    assert_eq!(env.lake("orders").await, (4, all));

    // Reset a prefix without purging: outputs stay, the records go.
    let report = watermark::reset(
        &env.backend,
        &ResetArgs {
            source: Some("orders".into()),
            prefix: Some("in/2024/03/00/".into()),
            ..ResetArgs::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(report.affected(), 1);
    assert_eq!(report.sources[0].outputs_deleted, 0);
    assert_eq!(env.lake("orders").await, (4, all));
    let r = env.run_orders().await;
    assert_eq!((r.total.processed, r.total.duplicates), (1, 3));
    assert_eq!(env.lake("orders").await, (4, all));

    // Reset the source with --purge-outputs: ledger and lake are empty.
    let (code, out) = env
        .cli(&["reset", "--source", "orders", "--purge-outputs"])
        .await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(out.contains("forgotten"), "{out}");
    assert!(env.records("orders").await.is_empty());
    assert_eq!(env.lake("orders").await, (0, Totals::default()));

    let r = env.run_orders().await;
    assert_eq!(r.total.processed, 4);
    assert_eq!(env.lake("orders").await, (4, all));
    let audit = env
        .backend
        .pipeline
        .ledger
        .audit_log(Some("orders"))
        .await
        .unwrap();
    let resets: Vec<&Value> = audit
        .iter()
        .filter(|e| e.command == "reset")
        .map(|e| &e.args)
        .collect();
    assert_eq!(resets.len(), 2);
    assert_eq!(resets[1]["purge_outputs"], true);
    assert_eq!(resets[1]["outputs_deleted"], 4);
}

#[tokio::test]
async fn reset_with_purge_also_removes_outputs_written_without_a_record() {
    let env = Env::new(3).await;
    let all = env.upload_orders(0, 2).await;
    mode::set_mode(&env.backend, "orders", Mode::Pause)
        .await
        .unwrap();
    env.run_orders().await;
    assert_eq!(env.lake("orders").await, (2, all));
    assert!(env.records("orders").await.is_empty());
    let report = watermark::reset(
        &env.backend,
        &ResetArgs {
            source: Some("orders".into()),
            purge_outputs: true,
            ..ResetArgs::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(report.sources[0].outputs_deleted, 2);
    assert_eq!(env.lake("orders").await, (0, Totals::default()));
}

#[tokio::test]
async fn mark_processed_then_run_processes_nothing() {
    let env = Env::new(3).await;
    env.upload_orders(0, 3).await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let until = render::when_ms(SystemClock.now_ms());
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let after = env.upload_orders(3, 1).await;

    // Mark what landed before `until`: three objects, committed with rows 0.
    let args = MarkArgs {
        source: Some("orders".into()),
        until: Some(until),
        concurrency: 2,
        ..MarkArgs::default()
    };
    let report = watermark::mark_processed(&env.backend, &args)
        .await
        .unwrap();
    assert_eq!(report.affected(), 3);
    let records = env.records("orders").await;
    assert_eq!(records.len(), 3);
    for r in &records {
        assert_eq!(r.status, Status::Done);
        let c = r.committed.as_ref().unwrap();
        assert_eq!((c.rows, c.outputs.len()), (0, 0));
        assert!(c.run_id.starts_with("mark-processed-"), "{}", c.run_id);
    }
    // Marking again changes nothing.
    let again = watermark::mark_processed(&env.backend, &args)
        .await
        .unwrap();
    assert_eq!((again.affected(), again.sources[0].already_done), (0, 3));

    // The run takes only the object that landed after `until`.
    let r = env.run_orders().await;
    assert_eq!((r.total.processed, r.total.duplicates), (1, 3));
    assert_eq!(env.lake("orders").await, (1, after));
    let r = env.run_orders().await;
    assert_eq!((r.total.processed, r.total.duplicates), (0, 4));

    // A newer version of a marked object is processed as usual.
    let (csv, v2) = orders_csv(90_000, 7);
    env.upload("in/2024/03/00/orders-0.csv", &csv).await;
    let r = env.run_orders().await;
    assert_eq!(r.total.processed, 1);
    let mut expected = after;
    expected.add(&v2);
    assert_eq!(env.lake("orders").await, (2, expected));
}

#[tokio::test]
async fn pause_processes_without_advancing_the_ledger() {
    let env = Env::new(3).await;
    let first = env.upload_orders(0, 2).await;
    env.run_orders().await;
    let records_before = env.records("orders").await;
    let new = env.upload_orders(2, 2).await;

    let (code, out) = env.cli(&["mode", "orders", "pause"]).await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(out.contains("mode pause (was enable)"), "{out}");
    let st = status::status(&env.backend, Some("orders")).await.unwrap();
    assert_eq!(st[0].mode, Mode::Pause);

    // Paused: the new objects' outputs appear, the ledger does not move.
    let mut all = first;
    all.add(&new);
    for _ in 0..2 {
        let r = env.run_orders().await;
        assert_eq!(r.sources[0].mode, Mode::Pause);
        assert_eq!(
            (r.total.untracked, r.total.processed, r.total.duplicates),
            (2, 0, 2)
        );
        assert_eq!(env.lake("orders").await, (4, all));
        assert_eq!(env.records("orders").await, records_before);
    }

    // Enabled again: the same objects are new, processed once, outputs replaced.
    mode::set_mode(&env.backend, "orders", Mode::Enable)
        .await
        .unwrap();
    let r = env.run_orders().await;
    assert_eq!((r.total.processed, r.total.duplicates), (2, 2));
    assert_eq!(env.lake("orders").await, (4, all));
    assert_eq!(env.records("orders").await.len(), 4);
    let modes: Vec<Value> = env
        .backend
        .pipeline
        .ledger
        .audit_log(Some("orders"))
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.command == "mode")
        .map(|e| e.args["mode"].clone())
        .collect();
    assert_eq!(modes, ["pause", "enable"]);
}

#[tokio::test]
async fn disable_and_replay_process_every_object_without_the_ledger() {
    let env = Env::new(3).await;
    let all = env.upload_orders(0, 3).await;
    env.run_orders().await;
    let records = env.records("orders").await;

    let replay = env
        .run(Plan {
            source: Some("orders".into()),
            since: Some("-1h".into()),
            concurrency: 2,
            replay: true,
            ..Plan::default()
        })
        .await;
    assert_eq!((replay.total.untracked, replay.total.duplicates), (3, 0));
    assert_eq!(env.lake("orders").await, (3, all));
    assert_eq!(env.records("orders").await, records);

    mode::set_mode(&env.backend, "orders", Mode::Disable)
        .await
        .unwrap();
    let r = env.run_orders().await;
    assert_eq!((r.total.untracked, r.total.processed), (3, 0));
    assert_eq!(env.lake("orders").await, (3, all));
    assert_eq!(env.records("orders").await, records);

    // A replay range that matches nothing.
    let none = env
        .run(Plan {
            source: Some("orders".into()),
            until: Some("2000-01-01".into()),
            replay: true,
            concurrency: 1,
            ..Plan::default()
        })
        .await;
    assert_eq!(none.total.listed, 0);
}

#[tokio::test]
async fn explain_shows_attempts_and_errors_of_a_quarantined_object() {
    let env = Env::new(2).await;
    let good = env.upload_orders(0, 1).await;
    let bad = "order_id,customer,quantity,amount,ordered_at\n1,a,1,1.00,2024-03-01T00:00:00Z\n\
               two,b,1,1.00,2024-03-01T00:00:00Z\n";
    env.upload("in/bad.csv", bad).await;

    let (code, out) = env.cli(&["run", "--source", "orders"]).await;
    assert_eq!(
        code,
        ExitCode::from(1),
        "a failed object fails the run: {out}"
    );
    assert!(out.contains("failed: orders / in/bad.csv"), "{out}");
    let r = env.run_orders().await;
    assert_eq!(
        (
            r.total.newly_quarantined,
            r.total.quarantined,
            r.total.duplicates
        ),
        (1, 1, 1)
    );
    assert!(r.failed());
    // Already quarantined: skipped without a claim, and the run succeeds.
    let r = env.run_orders().await;
    assert_eq!((r.total.quarantined, r.total.taken), (1, 0));
    assert!(!r.failed());
    assert_eq!(env.lake("orders").await, (1, good));

    let (code, out) = env.cli(&["explain", "orders", "in/bad.csv"]).await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(out.contains("status:     quarantined"), "{out}");
    assert!(out.contains("attempts:   2 of 2"), "{out}");
    assert!(out.contains("pending:    version"), "{out}");
    assert!(
        out.contains("last error: s3://landing/in/bad.csv") && out.contains("line"),
        "the error names the object and the line: {out}"
    );
    let (_, out) = env
        .cli(&["explain", "orders", "in/bad.csv", "--json"])
        .await;
    let json: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["record"]["attempts"], 2);
    assert_eq!(json["record"]["status"], "quarantined");

    let (code, _) = env.cli(&["explain", "orders", "in/never.csv"]).await;
    assert_eq!(code, ExitCode::from(1));

    // Marking it processed is how an operator moves past a poisoned version.
    let report = watermark::mark_processed(
        &env.backend,
        &MarkArgs {
            source: Some("orders".into()),
            prefix: Some("in/bad".into()),
            concurrency: 1,
            ..MarkArgs::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(report.affected(), 1);
    let st = status::status(&env.backend, Some("orders")).await.unwrap();
    assert_eq!(
        (st[0].count(Status::Quarantined), st[0].count(Status::Done)),
        (0, 2)
    );
}

#[tokio::test]
async fn rejected_rows_show_in_status_and_explain_and_purge_removes_their_file() {
    let env = Env::with(3, json!({"on_bad_row": "reject"})).await;
    let csv = "order_id,customer,quantity,amount,ordered_at\n1,a,1,1.00,2024-03-01T00:00:00Z\n\
               two,b,1,1.00,2024-03-01T00:00:00Z\n3,c,3,3.00,2024-03-01T00:00:00Z\n4,d\n";
    env.upload("in/mixed.csv", csv).await;
    env.upload_orders(0, 1).await;
    let (code, out) = env.cli(&["run", "--source", "orders"]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(
        out.contains(
            "2 processed, 0 duplicates, 0 failed, 0 quarantined, 12 rows (2 bad rows rejected) in"
        ),
        "{out}"
    );

    let (_, out) = env.cli(&["status", "--source", "orders"]).await;
    assert!(
        out.contains("orders: 2 rows rejected in 1 objects (bad rows, not in ROWS); rejects files under s3://lake/orders/_rejects/"),
        "{out}"
    );
    let (_, out) = env.cli(&["status", "--source", "orders", "--json"]).await;
    let json: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["sources"][0]["rejected_rows"], 2, "{json}");
    assert_eq!(json["sources"][0]["totals"]["rows"], 12, "{json}");
    let (_, out) = env.cli(&["explain", "orders", "in/mixed.csv"]).await;
    assert!(out.contains("  rows:     2\n"), "{out}");
    assert!(out.contains("  rejected: 2 rows\n"), "{out}");
    assert!(
        out.contains("  rejects:  s3://lake/orders/_rejects/mixed.csv.jsonl (etag "),
        "{out}"
    );
    assert!(
        out.contains(
            "rejected rows (2 of 2):\n  line 3: column \"order_id\": cannot parse \"two\" as int64  \"two,b,1,1.00,2024-03-01T00:00:00Z\"\n  line 5: expected 5 fields, got 2  \"4,d\"\n"
        ),
        "{out}"
    );
    let (_, out) = env
        .cli(&["explain", "orders", "in/mixed.csv", "--json"])
        .await;
    let json: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["rejected_rows"][1]["line"], 5, "{json}");
    assert_eq!(json["rejected_rows"][1]["key"], "in/mixed.csv", "{json}");

    let store = &env.backend.pipeline.store;
    let listed = |prefix: &'static str| async move {
        let page = store.list(LAKE, prefix, None).await.unwrap();
        page.objects.into_iter().map(|o| o.key).collect::<Vec<_>>()
    };
    assert_eq!(
        listed("orders/_rejects/").await,
        ["orders/_rejects/mixed.csv.jsonl"]
    );
    let (code, out) = env
        .cli(&["reset", "--source", "orders", "--purge-outputs"])
        .await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(
        listed("orders/").await.is_empty(),
        "outputs and rejects files purged"
    );
}

#[tokio::test]
async fn status_counts_and_sums_are_exact() {
    let env = Env::new(3).await;
    env.upload_orders(0, 3).await;
    let mut json_totals = Totals::default();
    for i in 0..2 {
        let (body, t) = orders_jsonl(50_000 + 100 * i, 9);
        env.upload(&format!("json/{i}.jsonl"), &body).await;
        json_totals.add(&t);
    }
    env.upload(
        "in/broken.csv",
        "order_id,customer,quantity,amount,ordered_at\nx,,,,\n",
    )
    .await;
    let r = env
        .run(Plan {
            concurrency: 3,
            ..Plan::default()
        })
        .await;
    assert_eq!((r.total.processed, r.total.failed), (5, 1));

    // Overwrite one object and delete another (its delete event through the pipeline).
    env.clock.advance(5_000);
    let (v2, v2_totals) = orders_csv(70_000, 4);
    env.upload("in/2024/03/01/orders-1.csv", &v2).await;
    let store = &env.backend.pipeline.store;
    store
        .delete(LANDING, "in/2024/03/02/orders-2.csv", None)
        .await
        .unwrap();
    let source = env.backend.source("orders").unwrap();
    let deleted = env
        .backend
        .pipeline
        .process(
            source,
            "in/2024/03/02/orders-2.csv",
            Target::Delete(DeleteRef {
                sequencer: None,
                version_id: None,
                delete_marker: false,
            }),
            &env.backend.ctx("test-delete"),
        )
        .await
        .unwrap();
    assert!(matches!(deleted, Outcome::Deleted { outputs_removed: 1 }));
    env.run_orders().await;

    let (_, first) = orders_csv(1, 10);
    let mut expected = first;
    expected.add(&v2_totals);
    env.clock.advance(1_000);
    let (code, out) = env.cli(&["status", "--json"]).await;
    assert_eq!(code, ExitCode::SUCCESS);
    let json: Value = serde_json::from_str(&out).unwrap();
    let orders = &json["sources"][0];
    assert_eq!(orders["source_id"], "orders");
    assert_eq!(orders["objects"]["done"], 2);
    assert_eq!(orders["objects"]["deleted"], 1);
    assert_eq!(orders["objects"]["failed"], 1);
    assert_eq!(orders["objects"]["quarantined"], 0);
    assert_eq!(orders["stuck"], 0);
    assert_eq!(orders["totals"]["rows"], expected.rows);
    assert_eq!(
        orders["totals"]["sums"]["quantity"],
        expected.quantity.to_string()
    );
    assert_eq!(
        orders["totals"]["sums"]["amount"],
        format!(
            "{}.{:02}",
            expected.amount_cents / 100,
            expected.amount_cents % 100
        )
    );
    assert_eq!(orders["oldest_waiting"]["key"], "in/broken.csv");
    assert_eq!(orders["oldest_waiting"]["status"], "failed");
    // The second run retried it (5 s after the first); the status is 1 s later.
    assert_eq!(orders["oldest_waiting"]["lag_ms"], 1_000);
    assert_eq!(orders["mode"], "enable");
    let jl = &json["sources"][1];
    assert_eq!(jl["objects"]["done"], 2);
    assert_eq!(jl["totals"]["rows"], json_totals.rows);
    // The ledger agrees with the lake read back.
    let (_, lake) = env.lake("orders").await;
    assert_eq!(lake, expected);

    // The human table names every column.
    let (_, text) = env.cli(&["status"]).await;
    for column in [
        "DONE",
        "DELETED",
        "PENDING",
        "FAILED",
        "QUARANTINED",
        "STUCK",
        "LAG",
    ] {
        assert!(text.contains(column), "{text}");
    }
    assert!(text.contains("oldest waiting: in/broken.csv"), "{text}");
}

#[tokio::test]
async fn a_stuck_claim_is_counted_as_stuck() {
    let env = Env::new(3).await;
    env.upload_orders(0, 1).await;
    // A worker claims the object and dies before committing.
    let mut pipeline = env.backend.pipeline.clone();
    pipeline.faults = Arc::new(CrashAfterClaim);
    let source = env.backend.source("orders").unwrap().clone();
    let meta = pipeline
        .store
        .head(LANDING, "in/2024/03/00/orders-0.csv")
        .await
        .unwrap()
        .unwrap();
    let target = Target::Version(tidemark_cli::commands::run::listed_version(&meta));
    let crashed = pipeline
        .process(&source, &meta.key, target, &env.backend.ctx("dead"))
        .await;
    assert!(crashed.is_err());
    let st = status::status(&env.backend, None).await.unwrap();
    assert_eq!((st[0].count(Status::Claimed), st[0].stuck), (1, 0));
    // Forgetting a key a live worker holds is refused.
    let (code, out) = env.cli(&["forget", "orders", &meta.key]).await;
    assert_eq!(code, ExitCode::from(1));
    assert!(out.contains("held by a worker"), "{out}");
    env.clock
        .advance(tidemark_cli::backend::CLAIM_DEADLINE_MS + 60_000);
    let st = status::status(&env.backend, None).await.unwrap();
    assert_eq!((st[0].count(Status::Claimed), st[0].stuck), (1, 1));
    // The next run takes the expired claim over.
    let r = env.run_orders().await;
    assert_eq!(r.total.processed, 1);
}

struct CrashAfterClaim;

impl tidemark::process::Faults for CrashAfterClaim {
    fn check(&self, step: tidemark::process::Step, _: &str) -> tidemark::Result<()> {
        match step {
            tidemark::process::Step::AfterClaim => {
                Err(tidemark::ProcessError::Crashed(step.as_str()))
            }
            _ => Ok(()),
        }
    }
}

#[tokio::test]
async fn a_bounded_run_takes_exactly_n_and_the_rest_next_time() {
    let env = Env::new(3).await;
    let all = env.upload_orders(0, 5).await;
    let (code, out) = env
        .cli(&["run", "--source", "orders", "--max-objects", "2", "--json"])
        .await;
    assert_eq!(code, ExitCode::SUCCESS);
    let json: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["total"]["processed"], 2, "{out}");
    assert_eq!(json["total"]["left"], 3);
    // Done objects are skipped without counting against the bound.
    let bounded = Plan {
        source: Some("orders".into()),
        max_objects: Some(2),
        concurrency: 2,
        ..Plan::default()
    };
    let r = env.run(bounded.clone()).await;
    assert_eq!(
        (r.total.processed, r.total.duplicates, r.total.left),
        (2, 2, 1)
    );
    let r = env.run(bounded.clone()).await;
    assert_eq!(
        (r.total.processed, r.total.duplicates, r.total.left),
        (1, 4, 0)
    );
    assert_eq!(env.lake("orders").await, (5, all));

    // A byte bound: the object that reaches it is taken, then nothing more.
    let env = Env::new(3).await;
    env.upload_orders(0, 3).await;
    let r = env
        .run(Plan {
            source: Some("orders".into()),
            max_bytes: Some(1),
            concurrency: 1,
            ..Plan::default()
        })
        .await;
    assert_eq!((r.total.processed, r.total.left), (1, 2));
}

#[tokio::test]
async fn forget_makes_one_object_new_again_and_is_audited() {
    let env = Env::new(3).await;
    let all = env.upload_orders(0, 2).await;
    env.run_orders().await;
    let (code, out) = env
        .cli(&["forget", "orders", "in/2024/03/01/orders-1.csv"])
        .await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let (code, _) = env
        .cli(&["forget", "orders", "in/2024/03/01/orders-1.csv"])
        .await;
    assert_eq!(code, ExitCode::from(1), "nothing left to forget");
    let r = env.run_orders().await;
    assert_eq!((r.total.processed, r.total.duplicates), (1, 1));
    assert_eq!(env.lake("orders").await, (2, all));

    let (_, out) = env.cli(&["audit", "--source", "orders", "--json"]).await;
    let entries: Vec<Value> = serde_json::from_str(&out).unwrap();
    let commands: Vec<&str> = entries
        .iter()
        .map(|e| e["command"].as_str().unwrap())
        .collect();
    assert_eq!(commands, ["run", "forget", "run"]);
    assert_eq!(entries[1]["args"]["key"], "in/2024/03/01/orders-1.csv");
    assert_eq!(entries[1]["affected"], 1);
    assert!(!entries[1]["operator"].as_str().unwrap().is_empty());
    // The whole command line, backends opened from --backend local --root --config.
    let (code, text) = env.execute(&["audit"]).await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(text.contains("forget"), "{text}");
    let (_, text) = env.execute(&["status", "--source", "orders"]).await;
    assert!(text.starts_with("SOURCE"), "{text}");
}

#[tokio::test]
async fn outputs_lists_files_with_rows_and_sums() {
    let env = Env::new(3).await;
    let all = env.upload_orders(0, 2).await;
    env.run_orders().await;
    let (code, out) = env.cli(&["outputs", "orders", "--json"]).await;
    assert_eq!(code, ExitCode::SUCCESS);
    let json: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["files"].as_array().unwrap().len(), 2);
    assert_eq!(json["total"]["rows"], all.rows);
    assert_eq!(json["total"]["sums"]["quantity"], all.quantity.to_string());
}

#[tokio::test]
async fn invoke_runs_the_ingest_handler_on_the_embedded_backends() {
    let env = Env::new(3).await;
    let (csv, totals) = orders_csv(1, 12);
    env.upload("in/a b.csv", &csv).await;
    let meta = env
        .backend
        .pipeline
        .store
        .head(LANDING, "in/a b.csv")
        .await
        .unwrap()
        .unwrap();
    let event = json!({"Records": [{
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
        "eventTime": "2026-11-29T12:00:00.000Z", "eventName": "ObjectCreated:Put",
        "s3": {"s3SchemaVersion": "1.0", "bucket": {"name": LANDING},
               "object": {"key": "in/a+b.csv", "size": meta.size, "eTag": meta.etag,
                          "sequencer": "0055AED6DCD90281E5"}}
    }]});
    let path: PathBuf = env.dir.path().join("event.json");
    std::fs::write(&path, event.to_string()).unwrap();
    let (code, out) = env
        .cli(&["invoke", "ingest", "--event", path.to_str().unwrap()])
        .await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let answer: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(answer["processed"], 1, "{out}");
    assert_eq!(env.lake("orders").await, (1, totals));
}

#[tokio::test]
async fn the_demo_runs_and_passes_its_own_check() {
    let dir = tempfile::tempdir().unwrap();
    let mut out = Vec::new();
    let code = tidemark_cli::demo::demo(Some(dir.path().to_path_buf()), &mut out)
        .await
        .expect("demo runs");
    let text = String::from_utf8(out).unwrap();
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    assert!(
        text.contains("OK: source, lake and ledger agree exactly"),
        "{text}"
    );
    assert!(text.contains("replaced: lake/orders/"), "{text}");
    assert!(text.contains("removed:  lake/orders/"), "{text}");
    assert!(text.contains("sqlite3 "), "{text}");
    assert!(dir.path().join("ledger.db").is_file());
    // A second demo in the same (now full) directory is refused.
    let mut out = Vec::new();
    let e = tidemark_cli::demo::demo(Some(dir.path().to_path_buf()), &mut out)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not empty"), "{e}");
}

/// `run`, `status` and `rewind` on the AWS pair: the DynamoDB `list` (the sharded index),
/// `delete` and the audit items, against DynamoDB Local and the S3 emulator.
#[tokio::test]
async fn run_status_and_rewind_on_the_aws_pair() {
    let stack = Stack::new().await;
    let doc = document(&stack.landing, &stack.lake, 3);
    let config = Arc::new(Config::from_json(&doc.to_string()).unwrap());
    let mut pipeline = stack.pipeline(3);
    pipeline.config = config;
    let backend = Backend::from_pipeline(pipeline, "aws: local stack");
    let mut all = Totals::default();
    for i in 0..20 {
        let (csv, t) = orders_csv(1 + 100 * i, 5 + i as usize);
        stack.upload(&format!("in/{i:02}.csv"), csv).await;
        all.add(&t);
    }
    let plan = Plan {
        source: Some("orders".into()),
        concurrency: 4,
        ..Plan::default()
    };
    let r = run(&backend, &plan).await.unwrap();
    assert_eq!((r.total.processed, r.total.failed), (20, 0), "{r:?}");
    let r = run(&backend, &plan).await.unwrap();
    assert_eq!((r.total.processed, r.total.duplicates), (0, 20));

    let st = status::status(&backend, Some("orders")).await.unwrap();
    assert_eq!(st[0].count(Status::Done), 20);
    assert_eq!(st[0].totals.rows, all.rows);
    assert_eq!(st[0].totals.sums, sums_of(&all));
    assert_eq!(stack.lake_totals().await, all);

    stack.clock.advance(1_000);
    let report = watermark::rewind(
        &backend,
        &RewindArgs {
            to: "-1h".into(),
            source: Some("orders".into()),
            dry_run: false,
        },
    )
    .await
    .unwrap();
    assert_eq!(report.affected(), 20);
    stack.clock.advance(1_000);
    let r = run(&backend, &plan).await.unwrap();
    assert_eq!(r.total.processed, 20);
    assert_eq!(stack.lake_totals().await, all);
    assert_eq!(stack.lake_objects().await.len(), 20);
    let audit = backend
        .pipeline
        .ledger
        .audit_log(Some("orders"))
        .await
        .unwrap();
    let commands: Vec<&str> = audit.iter().map(|e| e.command.as_str()).collect();
    assert_eq!(commands, ["run", "rewind", "run"]);
}

#[tokio::test]
async fn backfill_is_one_command_on_the_embedded_backends_and_its_job_can_be_watched() {
    let env = Env::new(3).await;
    let expected = env.upload_orders(0, 7).await;
    env.upload(
        "in/2024/03/bad/orders-x.csv",
        "order_id,customer,quantity,amount,ordered_at\nx,a,1,1.00,2024-03-01T00:00:00Z\n",
    )
    .await;
    // Bounded calls, all of them (--all), worked off by local workers, with a summary.
    let (code, out) = env
        .cli(&[
            "backfill",
            "--source",
            "orders",
            "--max-objects",
            "3",
            "--all",
            "--workers",
            "2",
            "--visibility",
            "1",
        ])
        .await;
    assert_eq!(
        code,
        ExitCode::from(1),
        "a quarantined object: exit 1\n{out}"
    );
    assert!(out.contains("finished"), "{out}");
    assert_eq!(env.lake("orders").await, (7, expected));
    let bad = env
        .backend
        .pipeline
        .ledger
        .get("orders", "in/2024/03/bad/orders-x.csv")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        bad.status,
        Status::Quarantined,
        "max_attempts deliveries of its message"
    );

    let (code, json_out) = env.cli(&["--json", "backfill", "status"]).await;
    assert_eq!(code, ExitCode::SUCCESS);
    let jobs: Value = serde_json::from_str(&json_out).unwrap();
    let job = &jobs[0];
    assert_eq!(job["state"], "finished", "{job:#}");
    assert_eq!(job["plan"]["enqueued"], 8);
    assert_eq!(job["plan"]["slices"], 3, "calls of 3, 3 and 2");
    assert_eq!(
        (
            job["counts"]["processed"].as_u64(),
            job["counts"]["quarantined"].as_u64()
        ),
        (Some(7), Some(1))
    );
    assert_eq!(job["counts"]["rows"].as_u64(), Some(expected.rows));
    let id = job["id"].as_str().unwrap().to_string();
    let (_, one) = env.cli(&["backfill", "status", &id]).await;
    assert!(one.contains(&id) && one.contains("3 call(s)"), "{one}");

    // Everything done: the next backfill enqueues only the quarantined object again.
    env.clock.advance(1_000); // jobs are listed newest first
    let (code, out) = env
        .cli(&["backfill", "--source", "orders", "--visibility", "1"])
        .await;
    assert_eq!(
        code,
        ExitCode::from(1),
        "the quarantined object is listed\n{out}"
    );
    let (_, json_out) = env
        .cli(&["--json", "backfill", "status", "--limit", "1"])
        .await;
    let last: Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(last[0]["plan"]["already_done"], 7, "{last:#}");

    // A dry run names what it would enqueue and creates no job.
    env.upload_orders(7, 2).await;
    let (code, out) = env
        .cli(&["backfill", "--source", "orders", "--dry-run"])
        .await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(
        out.contains("would enqueue: in/2024/03/07/orders-7.csv"),
        "{out}"
    );
    let (_, json_out) = env.cli(&["--json", "backfill", "status"]).await;
    let all: Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(all.as_array().unwrap().len(), 2);

    // Planned only (--no-wait), then resumed: the messages wait in the local queue.
    env.clock.advance(1_000);
    let (code, out) = env
        .cli(&["backfill", "--source", "orders", "--no-wait"])
        .await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(out.contains("running"), "{out}");
    assert_eq!(env.lake("orders").await.0, 7);
    let (_, json_out) = env
        .cli(&["--json", "backfill", "status", "--limit", "1"])
        .await;
    let id = serde_json::from_str::<Value>(&json_out).unwrap()[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, out) = env
        .cli(&["backfill", "--resume", &id, "--visibility", "1"])
        .await;
    assert_eq!(code, ExitCode::from(1), "{out}");
    assert_eq!(env.lake("orders").await.0, 9);
    let audit = env
        .backend
        .pipeline
        .ledger
        .audit_log(Some("orders"))
        .await
        .unwrap();
    assert!(
        audit
            .iter()
            .any(|e| e.command == "backfill" && e.args["job"] == json!(id))
    );
}

#[tokio::test]
async fn rescued_rows_and_ignored_fields_show_in_status_explain_and_reconcile() {
    let env = Env::with(3, json!({"reconcile": {"grace_minutes": 0}})).await;
    env.upload_orders(0, 2).await;
    let (code, out) = env.cli(&["run", "--source", "orders"]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    // The counts a decoder that rescues and ignores gives, recorded as a commit records them.
    let ledger = &env.backend.pipeline.ledger;
    let counts = [
        (
            3,
            IgnoredFields {
                values: 8,
                fields: BTreeMap::from([("extra".into(), 5), ("meta[\"a.b\"]".into(), 2)]),
            },
        ),
        (
            1,
            IgnoredFields {
                values: 2,
                fields: BTreeMap::from([("extra".into(), 2)]),
            },
        ),
    ];
    let records = env.records("orders").await;
    for (r, (rescued, ignored)) in records.iter().zip(counts) {
        let mut next = r.clone();
        next.rev += 1;
        let c = next.committed.as_mut().unwrap();
        (c.rescued, c.ignored) = (rescued, ignored);
        ledger.replace(&next, r.rev).await.unwrap();
    }
    let first = &records[0].key;

    let (_, out) = env.cli(&["status", "--source", "orders"]).await;
    assert!(
        out.contains("orders: 4 rows with rescued values in 2 objects (counted in ROWS)\n"),
        "{out}"
    );
    assert!(
        out.contains(
            "orders: 10 values ignored in 2 objects (fields not in the schema, in no column): \
             extra (7), meta[\"a.b\"] (2), 1 in other fields\n"
        ),
        "{out}"
    );
    let (_, out) = env.cli(&["status", "--source", "orders", "--json"]).await;
    let json: Value = serde_json::from_str(&out).unwrap();
    let s = &json["sources"][0];
    assert_eq!(
        (&s["rescued_rows"], &s["objects_with_rescued"]),
        (&json!(4), &json!(2))
    );
    assert_eq!(
        s["ignored"],
        json!({"values": 10, "fields": {"extra": 7, "meta[\"a.b\"]": 2}}),
        "{s}"
    );

    let (_, out) = env.cli(&["explain", "orders", first]).await;
    assert!(
        out.contains(
            "  rescued:  3 rows (with values in the rescued column)\n  \
             ignored:  8 values of fields not in the schema (in no column):\n    \
             extra: 5\n    meta[\"a.b\"]: 2\n    (other fields): 1\n"
        ),
        "{out}"
    );
    let (_, out) = env.cli(&["explain", "orders", first, "--json"]).await;
    let json: Value = serde_json::from_str(&out).unwrap();
    let c = &json["record"]["committed"];
    assert_eq!(
        (&c["rescued"], &c["ignored"]["values"]),
        (&json!(3), &json!(8))
    );

    // Reconcile counts them per window; its deep tier recounts the sources, which hold no
    // rescued rows: each object's count disagrees with the ledger's.
    let window = [
        "reconcile",
        "--from",
        "2000-01-01",
        "--to",
        "2100-01-01",
        "--no-repair",
    ];
    let deep: Vec<&str> = window.iter().copied().chain(["--deep"]).collect();
    let (code, out) = env.cli(&deep).await;
    assert_eq!(code, ExitCode::from(1), "{out}");
    assert!(
        out.contains(
            "orders: 4 rows with rescued values; 10 values of fields not in the schema ignored: \
             extra (7), meta[\"a.b\"] (2), 1 in other fields\n"
        ),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "LedgerVsSource [deep] {first} rescued rows: expected 0, found 3\n"
        )),
        "{out}"
    );
    let mut json_args = vec!["--json"];
    json_args.extend(&window);
    let (_, out) = env.cli(&json_args).await;
    let json: Value = serde_json::from_str(&out).unwrap();
    let entry = &json["report"]["sources"][0];
    assert_eq!(
        (&entry["rescued_rows"], &entry["ignored"]["values"]),
        (&json!(4), &json!(10))
    );
    assert_eq!(entry["ignored"]["fields"]["extra"], 7, "{entry:#}");
}

#[tokio::test]
async fn reconcile_splits_a_large_window_and_prints_the_merged_report() {
    let env = Env::with(
        3,
        json!({"reconcile": {"grace_minutes": 0, "part_objects": 100}}),
    )
    .await;
    // The reports location the split needs.
    let path = env.dir.path().join("sources.json");
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    doc["reports"] = json!({"bucket": LAKE, "prefix": "reports/"});
    std::fs::write(&path, doc.to_string()).unwrap();
    for i in 0..230 {
        let (csv, _) = orders_csv(i * 10, 2);
        env.upload(&format!("in/2024/03/01/o-{i:04}.csv"), &csv)
            .await;
    }
    // Opening the backends from the command line reads the document with its reports.
    let (code, out) = env
        .execute(&[
            "--json",
            "reconcile",
            "--from",
            "2000-01-01",
            "--to",
            "2100-01-01",
            "--no-repair",
            "--workers",
            "3",
        ])
        .await;
    assert_eq!(
        code,
        ExitCode::from(1),
        "230 objects missing from the ledger\n{out}"
    );
    let answer: Value = serde_json::from_str(&out).unwrap();
    let entry = &answer["report"]["sources"][0];
    assert_eq!(entry["objects"], 230, "{entry:#}");
    assert!(
        entry.get("fan_out").is_none(),
        "the merged entry replaced the note: {entry:#}"
    );
    assert_eq!(entry["findings"].as_array().unwrap().len(), 230);
    assert_eq!(entry["complete"], true);
    let written = answer["written"].as_array().unwrap();
    assert!(
        written.iter().any(|k| k.as_str().unwrap().contains("/rc-")),
        "the merged report is written under the job's id: {written:?}"
    );
}
