//! `tidemark demo`: the zero-setup tour, on the embedded backends, in seconds.
//!
//! In a fresh directory it writes a sources document and a small, deterministic orders
//! dataset (CSV files, one of them gzipped, and a JSON Lines source of clicks) into the
//! landing folder, then:
//! 1. `run`: everything is new and is processed;
//! 2. `run` again: nothing is new, every object is a duplicate;
//! 3. overwrites one file and deletes another (the delete goes through the per-object path
//!    with a delete target, as the ingest Lambda would on its event);
//! 4. `run`: only the overwritten object is processed; its output is replaced, the deleted
//!    one's removed;
//! 5. compares rows and sums of the SOURCE files (recounted by the demo from the data it
//!    generated, not by the pipeline), the LAKE (the Parquet outputs read back) and the
//!    LEDGER (`status`), and requires exact equality: exit 1 with a loud message otherwise;
//! 6. reconciles, every object by the deep tier (the source recounted by the pipeline, the
//!    ledger and the lake's sum columns; nothing missing, stale or orphaned) and writes the
//!    HTML report into the directory;
//! 7. shows the `sqlite3` one-liner for the ledger and the `status` table.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::json;
use tidemark::config::Config;
use tidemark::convert::SumValue;
use tidemark::model::{DeleteRef, Target};
use tidemark::ports::{PutOutcome, SystemClock, WriteCondition};
use tidemark::process::Outcome;

use crate::backend::Backend;
use crate::commands::run::{Plan, print_report, run};
use crate::commands::status::{print_status, status};
use crate::render::Table;
use crate::totals::{Totals, lake, lake_totals};
use crate::{Error, Out};

/// The landing bucket of the demo.
pub const LANDING: &str = "landing";
/// The lake bucket of the demo.
pub const LAKE: &str = "lake";
/// The object the demo overwrites.
pub const OVERWRITTEN: &str = "orders/2026/11/27/orders-0002.csv";
/// The object the demo deletes.
pub const DELETED: &str = "orders/2026/11/28/orders-0004.csv";

/// The demo's sources document.
pub fn sources_document() -> serde_json::Value {
    json!({"sources": [
        {
            "source_id": "orders",
            "bucket": LANDING, "prefix": "orders/",
            "include": ["*.csv", "*.csv.gz"],
            "format": "csv",
            "schema": [
                {"name": "order_id", "type": "int64", "nullable": false},
                {"name": "customer", "type": "string"},
                {"name": "quantity", "type": "int32"},
                {"name": "amount", "type": "decimal(12,2)"},
                {"name": "ordered_at", "type": "timestamp"}
            ],
            "sum_columns": ["quantity", "amount"],
            "output": {"bucket": LAKE, "prefix": "orders/", "partitioning": "key_date"},
            "on_delete": "delete"
        },
        {
            "source_id": "clicks",
            "bucket": LANDING, "prefix": "clicks/",
            "include": ["*.jsonl"],
            "format": "jsonl",
            "schema": [
                {"name": "user_id", "type": "int64", "nullable": false},
                {"name": "page", "type": "string"},
                {"name": "ms_on_page", "type": "int64"},
                {"name": "at", "type": "timestamp"}
            ],
            "sum_columns": ["ms_on_page"],
            "output": {"bucket": LAKE, "prefix": "clicks/", "partitioning": "key_date"}
        }
    ]})
}

/// A deterministic pseudo-random sequence (PCG-style LCG), so every demo shows the same data.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

const CUSTOMERS: [&str; 6] = [
    "Ada Lovelace",
    "Grace Hopper",
    "O'Brien, Pat",
    "Zoë \"Z\" Smith",
    "李雷",
    "Edsger Dijkstra",
];
const PAGES: [&str; 5] = ["/", "/pricing", "/docs/ingest", "/docs/ledger", "/signup"];

/// One generated object: its bytes and the totals the demo counted while writing them.
pub struct Generated {
    /// The key.
    pub key: String,
    /// The bytes as landed.
    pub body: Vec<u8>,
    /// Rows and sums, counted by the generator.
    pub rows: u64,
    /// Exact sums by column.
    pub sums: BTreeMap<String, SumValue>,
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// An orders CSV of `rows` rows from `seed`, ids from `first_id`, on `day` (`YYYY-MM-DD`).
pub fn orders(key: &str, seed: u64, first_id: i64, rows: usize, day: &str) -> Generated {
    let mut rng = Lcg(seed);
    let mut text = String::from("order_id,customer,quantity,amount,ordered_at\n");
    let (mut quantity, mut cents) = (0i128, 0i128);
    for i in 0..rows {
        let q = 1 + rng.next(9) as i32;
        let c = 99 + rng.next(250_000) as i64;
        let customer = CUSTOMERS[rng.next(CUSTOMERS.len() as u64) as usize];
        let (h, m, s) = (rng.next(24), rng.next(60), rng.next(60));
        text.push_str(&format!(
            "{},{},{q},{}.{:02},{day}T{h:02}:{m:02}:{s:02}Z\n",
            first_id + i as i64,
            csv_field(customer),
            c / 100,
            c % 100
        ));
        quantity += i128::from(q);
        cents += i128::from(c);
    }
    let body = if key.ends_with(".gz") {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(text.as_bytes()).expect("gzip into memory");
        gz.finish().expect("gzip into memory")
    } else {
        text.into_bytes()
    };
    Generated {
        key: key.to_string(),
        body,
        rows: rows as u64,
        sums: BTreeMap::from([
            ("quantity".to_string(), SumValue::Int(quantity)),
            (
                "amount".to_string(),
                SumValue::Decimal {
                    unscaled: cents,
                    scale: 2,
                },
            ),
        ]),
    }
}

/// A clicks JSON Lines file of `rows` rows from `seed` on `day`.
pub fn clicks(key: &str, seed: u64, rows: usize, day: &str) -> Generated {
    let mut rng = Lcg(seed);
    let mut text = String::new();
    let mut ms = 0i128;
    for _ in 0..rows {
        let on_page = rng.next(120_000) as i64;
        let line = json!({
            "user_id": 1000 + rng.next(50),
            "page": PAGES[rng.next(PAGES.len() as u64) as usize],
            "ms_on_page": on_page,
            "at": format!("{day}T{:02}:{:02}:{:02}Z", rng.next(24), rng.next(60), rng.next(60)),
        });
        text.push_str(&line.to_string());
        text.push('\n');
        ms += i128::from(on_page);
    }
    Generated {
        key: key.to_string(),
        body: text.into_bytes(),
        rows: rows as u64,
        sums: BTreeMap::from([("ms_on_page".to_string(), SumValue::Int(ms))]),
    }
}

/// The demo's initial dataset: 7 orders files (one gzipped) and 3 clicks files.
pub fn dataset() -> Vec<Generated> {
    let mut files = Vec::new();
    let mut id = 1;
    for (n, (day, rows)) in [
        ("2026-11-27", 40),
        ("2026-11-27", 35),
        ("2026-11-28", 52),
        ("2026-11-28", 33),
        ("2026-11-28", 47),
        ("2026-11-29", 28),
        ("2026-11-29", 61),
    ]
    .into_iter()
    .enumerate()
    {
        let ext = if n == 4 { "csv.gz" } else { "csv" };
        let key = format!("orders/{}/orders-{:04}.{ext}", day.replace('-', "/"), n + 1);
        files.push(orders(&key, 7 + n as u64, id, rows, day));
        id += rows as i64;
    }
    for (n, (day, rows)) in [("2026-11-27", 120), ("2026-11-28", 95), ("2026-11-29", 143)]
        .into_iter()
        .enumerate()
    {
        let key = format!("clicks/{}/clicks-{:04}.jsonl", day.replace('-', "/"), n + 1);
        files.push(clicks(&key, 101 + n as u64, rows, day));
    }
    files
}

/// The replacement content of [`OVERWRITTEN`].
pub fn overwrite() -> Generated {
    orders(OVERWRITTEN, 999, 10_001, 25, "2026-11-27")
}

/// The source's totals over the generated objects now in landing.
fn source_totals(
    backend: &Backend,
    source_id: &str,
    landing: &BTreeMap<String, Generated>,
) -> Result<Totals, Error> {
    let source = backend.source(source_id)?;
    let mut t = Totals::zero(source);
    for g in landing.values().filter(|g| source.matches(LANDING, &g.key)) {
        t.add(g.rows, &g.sums)?;
    }
    Ok(t)
}

fn fresh_dir(dir: Option<PathBuf>) -> Result<PathBuf, Error> {
    let dir = dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "tidemark-demo-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ))
    });
    if dir.exists() && std::fs::read_dir(&dir)?.next().is_some() {
        return Err(format!(
            "{} is not empty: the demo needs an empty or new directory",
            dir.display()
        )
        .into());
    }
    std::fs::create_dir_all(&dir)?;
    Ok(std::fs::canonicalize(&dir)?)
}

fn step(out: Out<'_>, title: &str) -> Result<(), Error> {
    writeln!(out, "\n== {title}")?;
    Ok(())
}

/// A failed check: loud on stdout and stderr.
fn fail(out: Out<'_>, message: &str) -> Result<ExitCode, Error> {
    let banner = format!("DEMO CHECK FAILED: {message}");
    writeln!(out, "\n{}\n{banner}\n{}", "!".repeat(72), "!".repeat(72))?;
    eprintln!("{banner}");
    Ok(ExitCode::from(1))
}

/// Lake snapshot: output key → (etag, rows).
async fn lake_snapshot(backend: &Backend) -> Result<BTreeMap<String, (String, u64)>, Error> {
    let mut all = BTreeMap::new();
    for source in &backend.config().sources {
        for f in lake(&backend.pipeline, source).await? {
            all.insert(f.key, (f.etag, f.totals.rows));
        }
    }
    Ok(all)
}

/// Run the demo in `dir` (a fresh temp directory when `None`).
pub async fn demo(dir: Option<PathBuf>, out: Out<'_>) -> Result<ExitCode, Error> {
    let dir = fresh_dir(dir)?;
    let config_path = dir.join("sources.json");
    std::fs::write(
        &config_path,
        serde_json::to_string_pretty(&sources_document())?,
    )?;
    let config = Arc::new(Config::from_file(&config_path)?);
    let backend = Backend::local(&dir, config, Arc::new(SystemClock)).await?;
    let pipeline = &backend.pipeline;
    let d = dir.display();
    writeln!(
        out,
        "tidemark demo: exactly-once processing of new files, on the embedded backends\n\
         (folders as buckets, a SQLite ledger; no AWS, no emulator)\n\n\
         workspace  {d}\n\
         sources    {d}/sources.json  (orders: CSV and gzip CSV; clicks: JSON Lines)\n\
         landing    {d}/buckets/{LANDING}/\n\
         lake       {d}/buckets/{LAKE}/\n\
         ledger     {d}/ledger.db"
    )?;

    // 1. The dataset.
    let mut landing: BTreeMap<String, Generated> = BTreeMap::new();
    let files = dataset();
    step(
        out,
        &format!("1. land {} objects in the landing bucket", files.len()),
    )?;
    for g in files {
        put(&backend, &g, WriteCondition::Absent).await?;
        writeln!(
            out,
            "  {:<40} {:>6} bytes  {:>4} rows",
            g.key,
            g.body.len(),
            g.rows
        )?;
        landing.insert(g.key.clone(), g);
    }

    // 2. First run: everything is new.
    step(out, "2. tidemark run: every object is new")?;
    let first = run(&backend, &Plan::default()).await?;
    print_report(&first, &backend.description, out)?;
    if first.total.processed != landing.len() as u64 || first.failed() {
        return fail(
            out,
            &format!(
                "the first run processed {} of {} objects",
                first.total.processed,
                landing.len()
            ),
        );
    }

    // 3. Second run: nothing is new.
    step(out, "3. tidemark run again: nothing is new")?;
    let second = run(&backend, &Plan::default()).await?;
    print_report(&second, &backend.description, out)?;
    if second.total.written() != 0 || second.total.duplicates != landing.len() as u64 {
        return fail(out, "the second run processed objects again");
    }

    // 4. Overwrite one object, delete another.
    let before = lake_snapshot(&backend).await?;
    step(
        out,
        &format!("4. overwrite {OVERWRITTEN} (new rows), delete {DELETED}"),
    )?;
    let new = overwrite();
    let current = pipeline
        .store
        .head(LANDING, OVERWRITTEN)
        .await?
        .ok_or("the object to overwrite is missing")?;
    put(&backend, &new, WriteCondition::Matches(current.etag)).await?;
    writeln!(
        out,
        "  overwrote {OVERWRITTEN}: {} rows → {} rows",
        landing[OVERWRITTEN].rows, new.rows
    )?;
    landing.insert(new.key.clone(), new);
    pipeline.store.delete(LANDING, DELETED, None).await?;
    landing.remove(DELETED);
    // The delete event, through the per-object path (the pipeline HEADs the key first).
    let orders_source = backend.source("orders")?;
    let deleted = pipeline
        .process(
            orders_source,
            DELETED,
            Target::Delete(DeleteRef {
                sequencer: None,
                version_id: None,
                delete_marker: false,
            }),
            &backend.ctx(&format!("demo-delete-{}", uuid::Uuid::new_v4())),
        )
        .await?;
    match deleted {
        Outcome::Deleted { outputs_removed } => writeln!(
            out,
            "  deleted {DELETED}; its delete event went through the pipeline: \
             {outputs_removed} output(s) removed, record marked deleted"
        )?,
        other => return fail(out, &format!("the delete came back {other:?}")),
    }

    // 5. Third run: only the overwrite.
    step(
        out,
        "5. tidemark run: only the overwritten object is processed",
    )?;
    let third = run(&backend, &Plan::default()).await?;
    print_report(&third, &backend.description, out)?;
    if third.total.processed != 1 || third.failed() {
        return fail(out, "the third run did not process exactly the overwrite");
    }
    let after = lake_snapshot(&backend).await?;
    let replaced = report_lake_changes(&before, &after, out)?;
    if replaced != (1, 1) {
        return fail(
            out,
            &format!("expected 1 output replaced and 1 removed, got {replaced:?}"),
        );
    }

    // 6. Rows and sums: source vs lake vs ledger.
    step(
        out,
        "6. rows and sums: SOURCE files (recounted by the demo) vs LAKE (Parquet read back) vs LEDGER",
    )?;
    let statuses = status(&backend, None).await?;
    let mut mismatches = Vec::new();
    for source in &backend.config().sources {
        let files = lake(pipeline, source).await?;
        let totals = [
            ("source", source_totals(&backend, source.id(), &landing)?),
            ("lake", lake_totals(source, &files)?),
            (
                "ledger",
                statuses
                    .iter()
                    .find(|s| s.source_id == source.id())
                    .map(|s| s.totals.clone())
                    .ok_or("status lacks a source")?,
            ),
        ];
        let objects = landing
            .values()
            .filter(|g| source.matches(LANDING, &g.key))
            .count();
        let mut headers = vec![
            "SOURCE".to_string(),
            "WHERE".to_string(),
            ">OBJECTS".to_string(),
            ">ROWS".to_string(),
        ];
        headers.extend(source.doc.sum_columns.iter().map(|c| format!(">SUM({c})")));
        let mut t = Table::new(&headers.iter().map(String::as_str).collect::<Vec<_>>());
        let done = statuses
            .iter()
            .find(|s| s.source_id == source.id())
            .map_or(0, |s| s.count(tidemark::model::Status::Done));
        for ((name, total), count) in totals.iter().zip([objects, files.len(), done as usize]) {
            let mut row = vec![
                source.id().to_string(),
                name.to_string(),
                count.to_string(),
                total.rows.to_string(),
            ];
            row.extend(source.doc.sum_columns.iter().map(|c| total.sum_text(c)));
            t.row(row);
        }
        write!(out, "{}", t.render())?;
        writeln!(out)?;
        let (src, lake_t, ledger_t) = (&totals[0].1, &totals[1].1, &totals[2].1);
        if src != lake_t || src != ledger_t || objects != files.len() || objects != done as usize {
            mismatches.push(source.id().to_string());
        }
    }
    if !mismatches.is_empty() {
        return fail(
            out,
            &format!(
                "rows or sums differ between source, lake and ledger for {}",
                mismatches.join(", ")
            ),
        );
    }
    writeln!(
        out,
        "OK: source, lake and ledger agree exactly: every row landed once, none twice"
    )?;

    // 7. The reconciler agrees: nothing missing, stale, stuck or orphaned; counts match.
    step(
        out,
        "7. tidemark reconcile --deep: source recounted vs ledger vs lake, nothing missing",
    )?;
    let now = backend.now();
    let window = tidemark::reconcile::Window {
        from_ms: now - 86_400_000,
        to_ms: now + 60_000,
    };
    let mut report = tidemark::reconcile::Report {
        run_id: "demo".into(),
        generated_at: now,
        sources: Vec::new(),
        jobs: Vec::new(),
        freshness: Vec::new(),
    };
    for source in &backend.config().sources {
        // Every object through the deep tier: the source recounted, the sums read back.
        let opts = tidemark::reconcile::Options {
            repair: false,
            deep_sample: Some(1.0),
            ..Default::default()
        };
        report.sources.push(
            tidemark::reconcile::reconcile_source(
                pipeline,
                source,
                window,
                opts,
                &backend.ctx("demo-reconcile"),
            )
            .await?,
        );
    }
    for s in &report.sources {
        writeln!(
            out,
            "  {}: {} objects ({} deep-checked), {} findings, {} mismatches; rows source {} / ledger {} / lake {}",
            s.source_id,
            s.objects,
            s.checked.deep,
            s.finding_count(),
            s.mismatch_count(),
            s.totals.deep.source.rows,
            s.totals.deep.ledger.rows,
            s.totals.deep.lake.rows
        )?;
    }
    let html = dir.join("reconcile.html");
    std::fs::write(&html, report.to_html())?;
    writeln!(out, "  report: {}", html.display())?;
    if !report.clean() {
        return fail(out, "the reconciliation report is not clean");
    }

    // 8. The ledger, as plain SQL.
    step(out, "8. the ledger is a SQLite file; read it with sqlite3")?;
    writeln!(
        out,
        "  sqlite3 {d}/ledger.db \"SELECT source_id, status, count(*), sum(rows) FROM ledger GROUP BY 1, 2\""
    )?;

    // 9. Status.
    step(out, "9. tidemark status")?;
    print_status(&statuses, &backend, out)?;
    // The folder of this very binary (`target/debug` after `cargo run`), so the reader can
    // go on with the build they already have.
    let bin = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.display().to_string()))
        .unwrap_or_else(|| "target/debug".to_string());
    writeln!(
        out,
        "\nTry it yourself on this workspace (with the `tidemark` this demo ran as on the PATH):\n  \
         export PATH=\"{bin}:$PATH\" TIDEMARK_ROOT={d} TIDEMARK_CONFIG_FILE={d}/sources.json\n  \
         tidemark status\n  \
         tidemark explain orders {OVERWRITTEN}\n  \
         tidemark rewind --to -1h && tidemark run   # reprocess; outputs replaced, never duplicated\n  \
         tidemark outputs orders\n  \
         tidemark audit"
    )?;
    Ok(ExitCode::SUCCESS)
}

async fn put(backend: &Backend, g: &Generated, condition: WriteCondition) -> Result<(), Error> {
    match backend
        .pipeline
        .store
        .put(
            LANDING,
            &g.key,
            Bytes::from(g.body.clone()),
            &BTreeMap::new(),
            &condition,
        )
        .await?
    {
        PutOutcome::Written { .. } => Ok(()),
        PutOutcome::PreconditionFailed => {
            Err(format!("landing {}: precondition failed", g.key).into())
        }
    }
}

/// Print the outputs replaced, removed and added between two lake snapshots; returns
/// `(replaced, removed)`.
fn report_lake_changes(
    before: &BTreeMap<String, (String, u64)>,
    after: &BTreeMap<String, (String, u64)>,
    out: Out<'_>,
) -> Result<(usize, usize), Error> {
    let (mut replaced, mut removed) = (0, 0);
    for (key, (etag, rows)) in before {
        match after.get(key) {
            Some((new_etag, new_rows)) if new_etag != etag => {
                replaced += 1;
                writeln!(
                    out,
                    "  replaced: {LAKE}/{key}  {rows} rows → {new_rows} rows (etag {} → {})",
                    short(etag),
                    short(new_etag)
                )?;
            }
            Some(_) => {}
            None => {
                removed += 1;
                writeln!(
                    out,
                    "  removed:  {LAKE}/{key}  ({rows} rows gone with their source)"
                )?;
            }
        }
    }
    for key in after.keys().filter(|k| !before.contains_key(*k)) {
        writeln!(out, "  added:    {LAKE}/{key}")?;
    }
    Ok((replaced, removed))
}

fn short(etag: &str) -> &str {
    &etag[..etag.len().min(8)]
}

/// The demo's directory layout, for tests: (sources document, ledger file).
pub fn layout(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("sources.json"), dir.join("ledger.db"))
}
