//! The Delta committer's benchmark (BENCHMARKS.md, "Delta committer").
//!
//! ```sh
//! source .local/stack.env   # the S3 emulator and DynamoDB Local
//! cargo run --release -p tidemark-delta --example publish_bench -- throughput --runs 3
//! cargo run --release -p tidemark-delta --example publish_bench -- log --objects 100000 --batch 1000
//! ```
//!
//! - `throughput`: on the local stack (S3 emulator + DynamoDB Local), a fresh ledger table
//!   and one fresh lake bucket per row; objects are prepared directly (not timed): each
//!   object's output is a small Parquet file written by the project's converter from a CSV
//!   of 3–7 order rows, PUT under the name the ingest path gives a table source's output,
//!   and its ledger record is created committed, naming it. Then `publish_keys` with B keys
//!   per call (one commit each), timed per call. A checkpoint (`maintain`, nothing else) is
//!   written every `--checkpoint-every` commits, outside the timed calls, except in the row
//!   that shows the log growing without one. Per commit, beside the call's wall time: the
//!   time the call spent reading footers (the object store is wrapped and timed), and,
//!   measured separately right after the call (not inside it), a snapshot load (`open` +
//!   the active files + the transaction version) and the ledger read of the same keys.
//! - `log`: on the embedded backends (local folders + SQLite), `--objects` objects published
//!   `--batch` per commit with a checkpoint every `--checkpoint-every` commits; at each mark
//!   the `_delta_log` is measured and fresh processes (this binary's `load`) time loading
//!   the table and report their peak RSS: `open` (snapshot and active files), `check` (open
//!   plus the sweep-style comparison with the ledger, what `tidemark status` does) and
//!   `commit` (one more object published, what a committer invocation does).
//!
//! Every sample goes to `--out` (JSON); the medians are printed as markdown.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{Value, json};
use tidemark::config::{Config, Source};
use tidemark::error::StoreError;
use tidemark::model::{Committed, OutputRef, Record, Status, Target, VersionRef};
use tidemark::ports::{
    ByteRange, Clock, GetOutcome, Ledger, LedgerWrite, ListPage, ObjectMeta, ObjectStore,
    PutOutcome, RangeOutcome, SystemClock, WriteCondition,
};
use tidemark_delta::maintain::MaintainOptions;
use tidemark_delta::{Publisher, TableStore};

type Error = Box<dyn std::error::Error + Send + Sync>;

const SCHEMA: &str = r#"[
    {"name": "order_id", "type": "int64", "nullable": false},
    {"name": "customer", "type": "string"},
    {"name": "quantity", "type": "int32"},
    {"name": "amount", "type": "decimal(12,2)"},
    {"name": "ordered_at", "type": "timestamp"}
]"#;

fn usage() -> ! {
    eprintln!(
        "usage: publish_bench throughput [--runs N] [--checkpoint-every K] [--rows SPEC] [--growth N]\n\
         \x20                               [--out FILE]\n\
         \x20      publish_bench log [--objects N] [--batch B] [--checkpoint-every K] [--marks N,N,..]\n\
         \x20                        [--load-runs N] [--dir DIR] [--keep] [--out FILE]\n\
         \x20      publish_bench load --dir DIR --what open|check|commit\n\
         SPEC: comma-separated B:commits (e.g. 1:60,10:60,100:20,1000:5)"
    );
    std::process::exit(2)
}

struct Args(Vec<String>);

impl Args {
    fn value(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .position(|a| a == name)
            .and_then(|i| self.0.get(i + 1))
            .map(String::as_str)
    }

    fn num<T: std::str::FromStr>(&self, name: &str, default: T) -> T {
        match self.value(name) {
            Some(v) => v.parse().unwrap_or_else(|_| usage()),
            None => default,
        }
    }

    fn flag(&self, name: &str) -> bool {
        self.0.iter().any(|a| a == name)
    }
}

fn main() -> Result<(), Error> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some(command) = argv.first().cloned() else {
        usage()
    };
    let args = Args(argv[1..].to_vec());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match command.as_str() {
        "throughput" => runtime.block_on(throughput(&args)),
        "log" => runtime.block_on(log(&args)),
        "load" => runtime.block_on(load(&args)),
        _ => usage(),
    }
}

// ---------------------------------------------------------------------------------------
// Objects

/// The date folder of object `i`: about 3,400 objects a day from 2026-11-01.
fn day(i: u64) -> String {
    let d = i / 3400;
    if d < 30 {
        format!("2026-11-{:02}", d + 1)
    } else {
        format!("2026-12-{:02}", (d - 30) % 31 + 1)
    }
}

/// The source key of object `i` under `prefix`.
fn key(prefix: &str, i: u64) -> String {
    format!("{prefix}{}/obj-{i:07}.csv", day(i))
}

/// A CSV of 3–7 order rows for object `i` (`generation` changes the values, as a replacing
/// upload would).
fn csv(i: u64, generation: u64) -> String {
    let rows = 3 + (i * 7919 + generation) % 5;
    let mut s = String::from("order_id,customer,quantity,amount,ordered_at\n");
    for r in 0..rows {
        let id = i * 10 + r;
        let cents = (id * 7 + generation * 13) % 100_000 + 5;
        s.push_str(&format!(
            "{id},\"Customer, {}\",{},{}.{:02},{}T{:02}:{:02}:{:02}Z\n",
            (id * 31) % 50_000,
            id % 7 + 1,
            cents / 100,
            cents % 100,
            day(i),
            (id / 60) % 24,
            id % 60,
            (id * 13) % 60,
        ));
    }
    s
}

/// Write the output of object `i` (its Parquet, through the converter) where ingest would,
/// and create or replace its ledger record as a committed one naming it.
async fn prepare(
    source: &Source,
    store: &dyn ObjectStore,
    ledger: &dyn Ledger,
    key: &str,
    i: u64,
    generation: u64,
) -> Result<(), Error> {
    let text = csv(i, generation);
    let mut spec = source.convert_spec(key);
    spec.threads = 1;
    let mut parquet = Vec::new();
    let stats = tidemark::convert::convert(text.as_bytes(), &spec, &mut parquet)?;
    let version = format!("{:016x}{:016x}", i, generation);
    let token = uuid::Uuid::new_v4().simple().to_string();
    let out_key = source.table_output_key(key, &version, &token);
    let bucket = &source.doc.output.bucket;
    let etag = match store
        .put(
            bucket,
            &out_key,
            Bytes::from(parquet),
            &BTreeMap::new(),
            &WriteCondition::Absent,
        )
        .await?
    {
        PutOutcome::Written { etag } => etag,
        PutOutcome::PreconditionFailed => return Err(format!("{out_key} exists").into()),
    };
    let now = SystemClock.now_ms();
    let committed = Committed {
        target: Target::Version(VersionRef {
            version: version.clone(),
            version_id: None,
            etag: Some(version),
            sequencer: None,
            size: Some(text.len() as u64),
        }),
        rows: stats.rows,
        sums: stats
            .sums
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect(),
        outputs: vec![OutputRef {
            bucket: bucket.clone(),
            key: out_key,
            etag,
            ..OutputRef::default()
        }],
        rejected: 0,
        rejects: None,
        rescued: stats.rescued_rows,
        ignored: (&stats.ignored).into(),
        config_fp: source.fingerprint.clone(),
        committed_at: now,
        run_id: "publish-bench".into(),
    };
    let mut record = Record {
        source_id: source.id().to_string(),
        key: key.to_string(),
        status: Status::Done,
        rev: 1,
        committed: Some(committed),
        claim: None,
        pending: None,
        attempts: 0,
        last_error: None,
        note: None,
        updated_at: now,
        bookmark: None,
        writing: Vec::new(),
    };
    let written = if generation == 0 {
        ledger.create(&record).await?
    } else {
        let current = ledger
            .get(source.id(), key)
            .await?
            .ok_or_else(|| format!("{key}: no record to replace"))?;
        record.rev = current.rev + 1;
        ledger.replace(&record, current.rev).await?
    };
    match written {
        LedgerWrite::Written => Ok(()),
        LedgerWrite::Conflict(_) => Err(format!("{key}: ledger conflict").into()),
    }
}

/// [`prepare`] for many objects, `concurrency` at a time.
async fn prepare_many(
    source: &Source,
    store: &dyn ObjectStore,
    ledger: &dyn Ledger,
    objects: &[(String, u64)],
    generation: u64,
    concurrency: usize,
) -> Result<(), Error> {
    let mut results = futures::stream::iter(
        objects
            .iter()
            .map(|(key, i)| prepare(source, store, ledger, key, *i, generation)),
    )
    .buffer_unordered(concurrency);
    while let Some(r) = results.next().await {
        r?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The object store, timed

/// Wraps the store the publisher reads footers from and measures its reads: their count, and
/// the wall time during which at least one was in flight (the publisher reads footers
/// concurrently, so a sum of their durations would overcount).
#[derive(Default)]
struct ReadClock {
    in_flight: usize,
    since: Option<Instant>,
    busy: Duration,
    reads: u64,
}

struct TimedStore {
    inner: Arc<dyn ObjectStore>,
    clock: std::sync::Mutex<ReadClock>,
}

impl TimedStore {
    fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self {
            inner,
            clock: Default::default(),
        }
    }

    /// The reads since the last call and the wall time they took.
    fn take(&self) -> (Duration, u64) {
        let mut c = self.clock.lock().expect("not poisoned");
        let taken = (c.busy, c.reads);
        c.busy = Duration::ZERO;
        c.reads = 0;
        taken
    }

    async fn timed<T>(&self, read: impl std::future::Future<Output = T>) -> T {
        {
            let mut c = self.clock.lock().expect("not poisoned");
            if c.in_flight == 0 {
                c.since = Some(Instant::now());
            }
            c.in_flight += 1;
            c.reads += 1;
        }
        let r = read.await;
        let mut c = self.clock.lock().expect("not poisoned");
        c.in_flight -= 1;
        if c.in_flight == 0
            && let Some(since) = c.since.take()
        {
            c.busy += since.elapsed();
        }
        r
    }
}

#[async_trait]
impl ObjectStore for TimedStore {
    async fn head(&self, bucket: &str, key: &str) -> Result<Option<ObjectMeta>, StoreError> {
        self.timed(self.inner.head(bucket, key)).await
    }

    async fn get(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&str>,
    ) -> Result<GetOutcome, StoreError> {
        self.timed(self.inner.get(bucket, key, if_match)).await
    }

    async fn get_range(
        &self,
        bucket: &str,
        key: &str,
        range: ByteRange,
        if_match: Option<&str>,
    ) -> Result<RangeOutcome, StoreError> {
        self.timed(self.inner.get_range(bucket, key, range, if_match))
            .await
    }

    async fn put(
        &self,
        bucket: &str,
        key: &str,
        body: Bytes,
        metadata: &BTreeMap<String, String>,
        condition: &WriteCondition,
    ) -> Result<PutOutcome, StoreError> {
        self.inner.put(bucket, key, body, metadata, condition).await
    }

    async fn create_multipart(
        &self,
        bucket: &str,
        key: &str,
        metadata: &BTreeMap<String, String>,
    ) -> Result<String, StoreError> {
        self.inner.create_multipart(bucket, key, metadata).await
    }

    async fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Bytes,
    ) -> Result<String, StoreError> {
        self.inner
            .upload_part(bucket, key, upload_id, part_number, body)
            .await
    }

    async fn complete_multipart(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[(i32, String)],
        condition: &WriteCondition,
    ) -> Result<PutOutcome, StoreError> {
        self.inner
            .complete_multipart(bucket, key, upload_id, parts, condition)
            .await
    }

    async fn abort_multipart(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), StoreError> {
        self.inner.abort_multipart(bucket, key, upload_id).await
    }

    async fn delete(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&str>,
    ) -> Result<bool, StoreError> {
        self.inner.delete(bucket, key, if_match).await
    }

    async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        page_token: Option<&str>,
    ) -> Result<ListPage, StoreError> {
        self.inner.list(bucket, prefix, page_token).await
    }

    async fn list_after(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: &str,
    ) -> Result<ListPage, StoreError> {
        self.inner.list_after(bucket, prefix, start_after).await
    }
}

// ---------------------------------------------------------------------------------------
// Configuration

/// A source `id` reading `landing/<prefix>` whose outputs and Delta table are under
/// `lake/orders/`, partitioned by the key's date.
fn source_doc(id: &str, landing: &str, prefix: &str, lake: &str) -> Value {
    json!({
        "source_id": id,
        "bucket": landing,
        "prefix": prefix,
        "format": "csv",
        "schema": serde_json::from_str::<Value>(SCHEMA).expect("schema is JSON"),
        "sum_columns": ["quantity", "amount"],
        "output": {"bucket": lake, "prefix": "orders/", "partitioning": "key_date",
                   "table": {"format": "delta"}},
    })
}

fn source<'a>(config: &'a Config, id: &str) -> &'a Source {
    config.source(id).expect("configured")
}

/// Checkpoint only: no log cleanup, no VACUUM.
fn checkpoint_only() -> MaintainOptions {
    MaintainOptions {
        checkpoint: true,
        log_retention: None,
        file_retention: None,
        dry_run: false,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A cold snapshot load, as a committer process makes one at its first publish of a table:
/// the table at its latest version (the last checkpoint and the commits after it), its active
/// files and the committer's transaction version.
async fn snapshot_load(tables: &TableStore, source: &Source) -> Result<(Duration, usize), Error> {
    let t = Instant::now();
    let table = tidemark_delta::delta::open(tables, source).await?;
    let snapshot = table.snapshot()?;
    let files = snapshot.log_data().iter().count();
    snapshot
        .transaction_version(
            table.log_store().as_ref(),
            tidemark_delta::delta::app_id(source),
        )
        .await?;
    Ok((t.elapsed(), files))
}

/// The committer's map of a snapshot's active files (path → the Remove that would take it
/// out), built as every publish builds it, timed: the part of a commit that grows with the
/// table's active files.
fn active_map(table: &deltalake::DeltaTable) -> Result<(Duration, usize), Error> {
    let t = Instant::now();
    let map: BTreeMap<String, deltalake::kernel::Remove> = table
        .snapshot()?
        .log_data()
        .iter()
        .map(|f| (f.path().into_owned(), f.remove_action(true)))
        .collect();
    Ok((t.elapsed(), map.len()))
}

// ---------------------------------------------------------------------------------------
// Throughput on the local stack

#[derive(Clone)]
struct Row {
    label: String,
    source_id: String,
    batch: usize,
    commits: usize,
    checkpoint_every: usize,
    /// Replace the objects of this row's source (published by an earlier row).
    replace: bool,
}

fn rows(spec: &str, checkpoint_every: usize, growth: usize) -> Vec<Row> {
    let mut rows: Vec<Row> = spec
        .split(',')
        .map(|part| {
            let (b, c) = part.split_once(':').unwrap_or_else(|| usage());
            let batch: usize = b.parse().unwrap_or_else(|_| usage());
            Row {
                label: format!("B = {batch}"),
                source_id: format!("b{batch}"),
                batch,
                commits: c.parse().unwrap_or_else(|_| usage()),
                checkpoint_every,
                replace: false,
            }
        })
        .collect();
    if let Some(r) = rows.iter().find(|r| r.batch == 100).cloned() {
        rows.push(Row {
            label: "B = 100, replacing (Remove + Add)".into(),
            replace: true,
            ..r
        });
    }
    if growth > 0 {
        rows.push(Row {
            label: format!("B = 1, no checkpoint, {growth} commits"),
            source_id: "growth".into(),
            batch: 1,
            commits: growth,
            checkpoint_every: 0,
            replace: false,
        });
    }
    rows
}

async fn throughput(args: &Args) -> Result<(), Error> {
    for var in ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_DYNAMODB"] {
        if std::env::var_os(var).is_none() {
            return Err(format!(
                "{var} is not set: source .local/stack.env (infra/localstack.sh start) first"
            )
            .into());
        }
    }
    let runs: usize = args.num("--runs", 3);
    let checkpoint_every: usize = args.num("--checkpoint-every", 10);
    let spec = args.value("--rows").unwrap_or("1:60,10:60,100:20,1000:5");
    let growth: usize = args.num("--growth", 200);
    let rows = rows(spec, checkpoint_every, growth);
    let mut all = Vec::new();
    for run in 1..=runs {
        eprintln!("run {run} of {runs}");
        all.push(throughput_run(&rows).await?);
        // Written after every run, so that a failure later keeps the runs made.
        let report = summarize(&rows, &all);
        if let Some(out) = args.value("--out") {
            std::fs::write(
                out,
                serde_json::to_string_pretty(&json!({
                    "checkpoint_every": checkpoint_every, "rows_spec": spec, "runs": all,
                    "summary": report,
                }))?,
            )?;
        }
        if run == runs {
            println!("{report}");
        }
    }
    Ok(())
}

/// One run of every row on fresh buckets and a fresh ledger table: per row, its commits.
async fn throughput_run(rows: &[Row]) -> Result<Value, Error> {
    let conf = aws_config::load_from_env().await;
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&conf)
            .force_path_style(true)
            .build(),
    );
    let dynamo = aws_sdk_dynamodb::Client::new(&conf);
    let id = uuid::Uuid::new_v4().simple().to_string()[..10].to_string();
    let table = format!("publish-bench-{id}");
    let landing = format!("landing-{id}");
    let ledger = tidemark::aws::dynamodb::DynamoLedger::new(dynamo, &table);
    ledger.ensure_table().await?;
    let mut sources = Vec::new();
    let mut buckets = vec![landing.clone()];
    for r in rows.iter().filter(|r| !r.replace) {
        let lake = format!("lake-{id}-{}", r.source_id);
        sources.push(source_doc(
            &r.source_id,
            &landing,
            &format!("in-{}/", r.source_id),
            &lake,
        ));
        buckets.push(lake);
    }
    for b in &buckets {
        s3.create_bucket().bucket(b).send().await?;
    }
    let config = Arc::new(Config::from_json(
        &json!({ "sources": sources }).to_string(),
    )?);
    let store: Arc<dyn ObjectStore> = Arc::new(tidemark::aws::s3::S3Store::new(s3));
    let timed = Arc::new(TimedStore::new(store.clone()));
    let ledger: Arc<dyn Ledger> = Arc::new(ledger);
    let tables = TableStore::s3_from_env();
    let publisher = Publisher::new(
        config.clone(),
        ledger.clone(),
        timed.clone(),
        tables.clone(),
        Arc::new(SystemClock),
    );
    let mut out = Vec::new();
    for r in rows {
        let src = source(&config, &r.source_id);
        let n = (r.batch * r.commits) as u64;
        let objects: Vec<(String, u64)> = (0..n).map(|i| (key(&src.doc.prefix, i), i)).collect();
        let t = Instant::now();
        prepare_many(
            src,
            store.as_ref(),
            ledger.as_ref(),
            &objects,
            u64::from(r.replace),
            16,
        )
        .await?;
        eprintln!(
            "  {}: {n} objects prepared in {:.1} s",
            r.label,
            t.elapsed().as_secs_f64()
        );
        let mut samples = Vec::new();
        let mut checkpoints = Vec::new();
        // A table kept open beside the publisher's, brought up to date after each commit as the
        // publisher's own is at the start of its next publish (it reads the commits since).
        let mut warm = tidemark_delta::delta::open(&tables, src).await?;
        warm.update_state().await?;
        for (c, chunk) in objects.chunks(r.batch).enumerate() {
            let keys: Vec<String> = chunk.iter().map(|(k, _)| k.clone()).collect();
            timed.take();
            let t = Instant::now();
            let published = publisher.publish_keys(src.id(), &keys).await?;
            let total = t.elapsed();
            let (footer, reads) = timed.take();
            let expected = if r.replace {
                (keys.len(), keys.len())
            } else {
                (keys.len(), 0)
            };
            if (published.added, published.removed) != expected || published.attempts != 1 {
                return Err(format!("{}: unexpected publish {published:?}", r.label).into());
            }
            // Measured after the call, on the table as the next commit will find it.
            let t = Instant::now();
            warm.update_state().await?;
            let refresh = t.elapsed();
            let (snapshot, files) = snapshot_load(&tables, src).await?;
            let t = Instant::now();
            for part in keys.chunks(100) {
                ledger.get_many_latest(src.id(), part).await?;
            }
            let ledger_read = t.elapsed();
            samples.push(json!({
                "commit": c + 1, "version": published.committed, "added": published.added,
                "removed": published.removed, "total_ms": ms(total), "footer_ms": ms(footer),
                "footer_reads": reads, "refresh_ms": ms(refresh), "cold_load_ms": ms(snapshot),
                "active_files": files,
                "ledger_ms": ms(ledger_read),
            }));
            if r.checkpoint_every > 0 && (c + 1).is_multiple_of(r.checkpoint_every) {
                let t = Instant::now();
                publisher.maintain(src.id(), &checkpoint_only()).await?;
                checkpoints.push(ms(t.elapsed()));
            }
        }
        let check = publisher.check(src.id()).await?;
        if !check.is_clean() {
            return Err(format!("{}: table and ledger differ: {check:?}", r.label).into());
        }
        out.push(
            json!({"row": r.label, "samples": samples, "checkpoint_ms": checkpoints,
                        "active_files": check.files}),
        );
    }
    Ok(json!({ "ledger_table": table, "rows": out }))
}

fn field(samples: &[Value], name: &str) -> Vec<f64> {
    samples
        .iter()
        .map(|s| s[name].as_f64().unwrap_or(f64::NAN))
        .collect()
}

/// Per row, the median over runs of each run's figures.
fn summarize(rows: &[Row], runs: &[Value]) -> String {
    let mut s = String::from(
        "| commits | objects / commit | commits / min | objects / min | ms / commit | footers ms (reads) | snapshot refresh ms* | ledger read ms* | rest ms** | cold snapshot load ms* |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (i, r) in rows.iter().enumerate() {
        let per_run: Vec<&Vec<Value>> = runs
            .iter()
            .map(|run| run["rows"][i]["samples"].as_array().expect("samples"))
            .collect();
        let row_fig = |f: &dyn Fn(&[Value]) -> f64| {
            median(
                per_run
                    .iter()
                    .map(|samples| f(samples.as_slice()))
                    .collect(),
            )
        };
        let cpm =
            row_fig(&|v| v.len() as f64 / (field(v, "total_ms").iter().sum::<f64>() / 60_000.0));
        let opm = row_fig(&|v| {
            let objects: f64 = field(v, "added").iter().sum();
            objects / (field(v, "total_ms").iter().sum::<f64>() / 60_000.0)
        });
        let total = row_fig(&|v| median(field(v, "total_ms")));
        let footer = row_fig(&|v| median(field(v, "footer_ms")));
        let reads = row_fig(&|v| median(field(v, "footer_reads")));
        let refresh = row_fig(&|v| median(field(v, "refresh_ms")));
        let cold = row_fig(&|v| median(field(v, "cold_load_ms")));
        let ledger = row_fig(&|v| median(field(v, "ledger_ms")));
        let rest = row_fig(&|v| {
            median(
                v.iter()
                    .map(|s| {
                        s["total_ms"].as_f64().unwrap_or(0.0)
                            - s["footer_ms"].as_f64().unwrap_or(0.0)
                            - s["refresh_ms"].as_f64().unwrap_or(0.0)
                            - s["ledger_ms"].as_f64().unwrap_or(0.0)
                    })
                    .collect(),
            )
        });
        s.push_str(&format!(
            "| {} | {} | {cpm:.0} | {opm:.0} | {total:.1} | {footer:.1} ({reads:.0}) | {refresh:.1} | {ledger:.1} | {rest:.1} | {cold:.1} |\n",
            r.label, r.batch
        ));
        if r.checkpoint_every == 0 {
            // The log growing: commits near the start, the middle and the end of the row.
            let n = r.commits;
            let w = 10.min(n / 3).max(1);
            let windows = [(0, w), (n / 2 - w / 2, n / 2 - w / 2 + w), (n - w, n)];
            let at = |name: &str, (a, b): (usize, usize)| {
                median(
                    per_run
                        .iter()
                        .map(|v| median(field(&v[a.min(v.len())..b.min(v.len())], name)))
                        .collect(),
                )
            };
            s.push_str(&format!("\n{} (medians of {w} commits each):\n", r.label));
            for (a, b) in windows {
                s.push_str(&format!(
                    "- commits {}–{}: {:.1} ms / commit (warm committer), cold snapshot load {:.1} ms\n",
                    a + 1,
                    b,
                    at("total_ms", (a, b)),
                    at("cold_load_ms", (a, b)),
                ));
            }
        }
    }
    s.push_str(
        "\n* measured right after each commit, outside it, on the table as the next commit finds it: \
         the refresh of a table kept open (what a warm committer does), the ledger read of the same keys, \
         and a cold load (a committer's first publish); ** ms / commit − footers − refresh − ledger read: \
         the log write and the planning\n",
    );
    s
}

// ---------------------------------------------------------------------------------------
// The log after many objects, on the embedded backends

struct Local {
    config: Arc<Config>,
    store: Arc<dyn ObjectStore>,
    ledger: Arc<dyn Ledger>,
    tables: TableStore,
}

const LOCAL_SOURCE: &str = "orders";

async fn local(dir: &Path) -> Result<Local, Error> {
    let root = dir.join("buckets");
    let store = tidemark::local::FolderStore::new(&root);
    for b in ["landing", "lake"] {
        store.create_bucket(b).await?;
    }
    let ledger = tidemark::local::SqliteLedger::open(dir.join("ledger.db"))?;
    let doc = json!({"sources": [source_doc(LOCAL_SOURCE, "landing", "in/", "lake")]});
    Ok(Local {
        config: Arc::new(Config::from_json(&doc.to_string())?),
        store: Arc::new(store),
        ledger: Arc::new(ledger),
        tables: TableStore::Local { root },
    })
}

impl Local {
    fn publisher(&self) -> Publisher {
        Publisher::new(
            self.config.clone(),
            self.ledger.clone(),
            self.store.clone(),
            self.tables.clone(),
            Arc::new(SystemClock),
        )
    }

    fn log_dir(&self) -> Result<PathBuf, Error> {
        let url = self.tables.url(source(&self.config, LOCAL_SOURCE))?;
        let root = url
            .to_file_path()
            .map_err(|()| format!("{url} is not a folder"))?;
        Ok(root.join("_delta_log"))
    }
}

/// What the `_delta_log` folder holds.
fn log_stats(dir: &Path, objects: u64) -> Result<Value, Error> {
    let mut json_files = 0u64;
    let mut json_bytes = 0u64;
    let mut first_commit_bytes = 0u64;
    let mut checkpoints: Vec<(u64, u64)> = Vec::new();
    let mut other = 0u64;
    let mut total = 0u64;
    let mut files = 0u64;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let size = entry.metadata()?.len();
        if !entry.file_type()?.is_file() {
            continue;
        }
        files += 1;
        total += size;
        if let Some(v) = name
            .strip_suffix(".json")
            .and_then(|v| v.parse::<u64>().ok())
        {
            json_files += 1;
            json_bytes += size;
            if v == 0 {
                first_commit_bytes = size;
            }
        } else if let Some(v) = name
            .strip_suffix(".checkpoint.parquet")
            .and_then(|v| v.parse::<u64>().ok())
        {
            checkpoints.push((v, size));
        } else {
            other += size;
        }
    }
    checkpoints.sort();
    let latest = checkpoints.last().copied();
    // What a reader needs: the latest checkpoint, the commits after it, `_last_checkpoint`.
    let mut needed = other + latest.map_or(0, |(_, s)| s);
    let mut needed_files = u64::from(latest.is_some()) + u64::from(other > 0);
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(v) = name
            .strip_suffix(".json")
            .and_then(|v| v.parse::<u64>().ok())
            && latest.is_none_or(|(c, _)| v > c)
        {
            needed += entry.metadata()?.len();
            needed_files += 1;
        }
    }
    Ok(json!({
        "objects": objects,
        "files": files,
        "bytes": total,
        "json_files": json_files,
        "json_bytes": json_bytes,
        "json_bytes_per_object": (json_bytes - first_commit_bytes) as f64 / objects.max(1) as f64,
        "checkpoints": checkpoints.len(),
        "checkpoint_bytes_all": checkpoints.iter().map(|(_, s)| s).sum::<u64>(),
        "latest_checkpoint": latest.map(|(v, s)| json!({"version": v, "bytes": s})),
        "latest_checkpoint_bytes_per_file": latest.map(|(_, s)| s as f64 / objects.max(1) as f64),
        "reader_needs_bytes": needed,
        "reader_needs_files": needed_files,
    }))
}

async fn log(args: &Args) -> Result<(), Error> {
    let objects: u64 = args.num("--objects", 100_000);
    let batch: u64 = args.num("--batch", 1000);
    let every: u64 = args.num("--checkpoint-every", 10);
    let load_runs: usize = args.num("--load-runs", 3);
    let marks: Vec<u64> = args
        .value("--marks")
        .unwrap_or("10000,30000,100000")
        .split(',')
        .map(|m| m.parse().unwrap_or_else(|_| usage()))
        .filter(|m| *m <= objects)
        .collect();
    let dir = match args.value("--dir") {
        Some(d) => PathBuf::from(d),
        None => std::env::temp_dir().join(format!(
            "tidemark-publish-bench-{}",
            uuid::Uuid::new_v4().simple()
        )),
    };
    std::fs::create_dir_all(&dir)?;
    eprintln!("table, outputs and ledger under {}", dir.display());
    let env = local(&dir).await?;
    let timed = Arc::new(TimedStore::new(env.store.clone()));
    let publisher = Publisher::new(
        env.config.clone(),
        env.ledger.clone(),
        timed.clone(),
        env.tables.clone(),
        Arc::new(SystemClock),
    );
    let src = source(&env.config, LOCAL_SOURCE);
    // A table kept open beside the publisher's, as in `throughput`.
    let mut warm = tidemark_delta::delta::open(&env.tables, src).await?;
    let mut commit_ms = Vec::new();
    let mut split = Vec::new();
    let mut prepare_ms = 0.0;
    let mut checkpoint_ms = Vec::new();
    let mut at_marks = Vec::new();
    let started = Instant::now();
    let mut done = 0u64;
    // Objects the `commit` loads published (one each), beside the `done` of the commits.
    let mut extra = 0u64;
    let mut commits = 0u64;
    while done < objects {
        let n = batch.min(objects - done);
        let chunk: Vec<(String, u64)> = (done..done + n).map(|i| (key("in/", i), i)).collect();
        let t = Instant::now();
        prepare_many(src, env.store.as_ref(), env.ledger.as_ref(), &chunk, 0, 8).await?;
        prepare_ms += ms(t.elapsed());
        let keys: Vec<String> = chunk.into_iter().map(|(k, _)| k).collect();
        timed.take();
        let t = Instant::now();
        let published = publisher.publish_keys(src.id(), &keys).await?;
        commit_ms.push(ms(t.elapsed()));
        let (footers, _) = timed.take();
        if published.added != keys.len() {
            return Err(format!("unexpected publish {published:?}").into());
        }
        let t = Instant::now();
        warm.update_state().await?;
        let refresh = t.elapsed();
        let (map, _) = active_map(&warm)?;
        split.push(json!({"footer_ms": ms(footers), "refresh_ms": ms(refresh),
                          "active_map_ms": ms(map)}));
        done += n;
        commits += 1;
        if every > 0 && commits.is_multiple_of(every) {
            let t = Instant::now();
            publisher.maintain(src.id(), &checkpoint_only()).await?;
            checkpoint_ms.push(json!({"objects": done, "ms": ms(t.elapsed())}));
        }
        if marks.contains(&done) {
            let at = done + extra;
            let stats = log_stats(&env.log_dir()?, at)?;
            let last = &commit_ms[commit_ms.len().saturating_sub(10)..];
            let last_split = &split[split.len().saturating_sub(10)..];
            let mut loads = BTreeMap::new();
            for what in ["open", "check", "commit"] {
                let mut samples = Vec::new();
                for _ in 0..load_runs {
                    samples.push(load_process(&dir, what)?);
                }
                loads.insert(what, samples);
            }
            // Measured before the `commit` loads: count their objects from now on.
            extra += load_runs as u64;
            let mark = json!({
                "objects": at,
                "elapsed_s": started.elapsed().as_secs_f64(),
                "log": stats,
                "commit_ms_last_10_median": median(last.to_vec()),
                "footer_ms_last_10_median": median(field(last_split, "footer_ms")),
                "refresh_ms_last_10_median": median(field(last_split, "refresh_ms")),
                "active_map_ms_last_10_median": median(field(last_split, "active_map_ms")),
                "loads": loads,
            });
            eprintln!("{}", serde_json::to_string(&mark)?);
            at_marks.push(mark);
        }
    }
    let report = log_report(batch, every, &at_marks);
    println!("{report}");
    if let Some(out) = args.value("--out") {
        std::fs::write(
            out,
            serde_json::to_string_pretty(&json!({
                "objects": objects, "batch": batch, "checkpoint_every": every,
                "prepare_ms_total": prepare_ms, "commit_ms": commit_ms, "commit_split": split,
                "checkpoint_ms": checkpoint_ms, "marks": at_marks, "summary": report,
            }))?,
        )?;
    }
    if !args.flag("--keep") && args.value("--dir").is_none() {
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(())
}

fn log_report(batch: u64, every: u64, marks: &[Value]) -> String {
    let mut size = format!(
        "commits of {batch} objects, a checkpoint every {every} commits (no log cleanup)\n\n\
         | objects | _delta_log files | _delta_log MB | JSON bytes / object | latest checkpoint MB | checkpoint bytes / file | a reader needs MB |\n\
         |---:|---:|---:|---:|---:|---:|---:|\n"
    );
    let mut time = String::from(
        "\n| objects | ms / commit, warm (last 10) | footers ms | refresh ms | active-files map ms | open s | open peak RSS MB | check s | check peak RSS MB | cold commit s | cold commit peak RSS MB |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mb = |b: f64| b / 1e6;
    for m in marks {
        let log = &m["log"];
        let num = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
        let load = |what: &str, f: &str| {
            median(
                m["loads"][what]
                    .as_array()
                    .map(|v| v.iter().map(|x| num(&x[f])).collect())
                    .unwrap_or_default(),
            )
        };
        size.push_str(&format!(
            "| {} | {} | {:.2} | {:.0} | {:.2} | {:.0} | {:.2} |\n",
            m["objects"],
            log["files"],
            mb(num(&log["bytes"])),
            num(&log["json_bytes_per_object"]),
            mb(num(&log["latest_checkpoint"]["bytes"])),
            num(&log["latest_checkpoint_bytes_per_file"]),
            mb(num(&log["reader_needs_bytes"])),
        ));
        time.push_str(&format!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.0} | {:.2} | {:.0} | {:.2} | {:.0} |\n",
            m["objects"],
            num(&m["commit_ms_last_10_median"]),
            num(&m["footer_ms_last_10_median"]),
            num(&m["refresh_ms_last_10_median"]),
            num(&m["active_map_ms_last_10_median"]),
            load("open", "seconds"),
            load("open", "peak_rss_mb"),
            load("check", "seconds"),
            load("check", "peak_rss_mb"),
            load("commit", "seconds"),
            load("commit", "peak_rss_mb"),
        ));
    }
    size + &time
}

/// Run `load --what <what>` in a fresh process and read its JSON line.
fn load_process(dir: &Path, what: &str) -> Result<Value, Error> {
    let out = std::process::Command::new(std::env::current_exe()?)
        .args(["load", "--dir"])
        .arg(dir)
        .args(["--what", what])
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "load --what {what} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// `VmHWM` and `VmRSS` of this process, in MB.
fn rss_mb() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (kb("VmHWM:"), kb("VmRSS:"))
}

/// In a fresh process: load the table of an existing `log` directory (and check it against
/// the ledger, or publish one more object), then report the time and the peak RSS.
async fn load(args: &Args) -> Result<(), Error> {
    let dir = PathBuf::from(args.value("--dir").unwrap_or_else(|| usage()));
    let what = args.value("--what").unwrap_or("open");
    let env = local(&dir).await?;
    let src = source(&env.config, LOCAL_SOURCE);
    let publisher = env.publisher();
    // The object a `commit` publishes: prepared before the clock starts.
    let extra = match what {
        "commit" => {
            let i = 1_000_000_000 + u64::from(uuid::Uuid::new_v4().as_u128() as u32);
            let k = key("in/", i);
            prepare(src, env.store.as_ref(), env.ledger.as_ref(), &k, i, 0).await?;
            Some(k)
        }
        _ => None,
    };
    let (_, before) = rss_mb();
    let t = Instant::now();
    let files = match what {
        "open" => snapshot_load(&env.tables, src).await?.1,
        "check" => {
            let check = publisher.check(src.id()).await?;
            if !check.is_clean() {
                return Err(format!("table and ledger differ: {check:?}").into());
            }
            check.files
        }
        "commit" => {
            let keys = vec![extra.expect("prepared")];
            let p = publisher.publish_keys(src.id(), &keys).await?;
            if p.added != 1 {
                return Err(format!("unexpected publish {p:?}").into());
            }
            0
        }
        _ => usage(),
    };
    let seconds = t.elapsed().as_secs_f64();
    let (peak, _) = rss_mb();
    println!(
        "{}",
        json!({"what": what, "seconds": seconds, "peak_rss_mb": peak,
               "rss_before_mb": before, "active_files": files})
    );
    Ok(())
}
