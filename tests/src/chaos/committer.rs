//! The chaos run's table mode: the ledger's change feed and the table committers.
//!
//! - [`FeedLedger`] wraps the ledger the workers (and reconcile) write through: every write
//!   that lands (a create, replace or delete that is not a conflict, whether or not its reply
//!   reaches the caller) appends the item's key to the [`Feed`], as DynamoDB Streams
//!   (`KEYS_ONLY`) would; a seeded share of records is delivered twice, the duplicate a few
//!   records later (the stream is at least once);
//! - `committers` tasks take batches of 1..=`publish_batch` records from the feed (after a
//!   short batching window, or at once when a full batch is waiting), group them by source as
//!   the stream handler does (records of sources without a table are acknowledged) and call
//!   [`Publisher::publish_keys`] once per source. Each committer's [`Publisher`] reads
//!   through its own [`FaultyLedger`] and [`FaultyStore`] (transient faults on
//!   `publish_fault_rate` of their calls, one sequence of decisions for both; delta-rs's own
//!   table I/O is not behind the ports) and
//!   stops at each [`tidemark_delta::Step`] on `publish_crash_rate` of the times it reaches it
//!   ([`PublishCrashes`]). A failed or crashed publish puts its source's records back at the
//!   head of the feed (the stream retries the batch);
//! - at the end the feed is closed and drained: the committers run until every record was
//!   published by a publish that succeeded (never by a sweep).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tidemark::config::{Config, Mode};
use tidemark::error::LedgerError;
use tidemark::jobs::{Job, JobCounts};
use tidemark::model::{AuditEntry, Record};
use tidemark::ports::{JobStore, JobWrite, KeyRange, Ledger, LedgerWrite};
use tidemark_delta::{PublishError, Publisher, Step};

use super::{
    ChaosConfig, FaultKind, FaultPlan, FaultStats, FaultTiming, FaultyLedger, FaultyStore, draw,
    error_class, mix, unit,
};
use crate::Backends;
use crate::table_reader::tables;

/// The committers' store and ledger calls share one sequence of fault decisions.
const STREAM_COMMITTER: u64 = 5;
const STREAM_FEED: u64 = 7;
/// Plus the step's index: each step has its own sequence of decisions, so the crashes at a
/// step depend only on how many times publishes reached it.
const STREAM_PUBLISH_CRASH: u64 = 16;

/// The committer's crash points, in the order a publish reaches them.
pub const PUBLISH_STEPS: [Step; 3] = [Step::Loaded, Step::Planned, Step::Committed];

fn publish_step_index(step: Step) -> usize {
    PUBLISH_STEPS.iter().position(|s| *s == step).unwrap_or(0)
}

/// Stops a publish ([`PublishError::Crashed`]) at a step on a seeded share of the times a
/// publish reaches it; shared by every committer of a run.
pub struct PublishCrashes {
    seed: u64,
    rate: f64,
    reached: [AtomicU64; 3],
    crashed: [AtomicU64; 3],
}

impl PublishCrashes {
    /// Crash on `rate` of the steps reached.
    pub fn new(seed: u64, rate: f64) -> Self {
        Self {
            seed,
            rate,
            reached: Default::default(),
            crashed: Default::default(),
        }
    }

    /// Per step, in order: (step, times reached, crashes).
    pub fn by_step(&self) -> Vec<(Step, u64, u64)> {
        PUBLISH_STEPS
            .iter()
            .enumerate()
            .map(|(i, s)| {
                (
                    *s,
                    self.reached[i].load(Ordering::Relaxed),
                    self.crashed[i].load(Ordering::Relaxed),
                )
            })
            .collect()
    }
}

impl tidemark_delta::Faults for PublishCrashes {
    fn check(&self, step: Step, _source_id: &str) -> Result<(), PublishError> {
        let i = publish_step_index(step);
        let n = self.reached[i].fetch_add(1, Ordering::Relaxed);
        if unit(draw(self.seed, STREAM_PUBLISH_CRASH + i as u64, n)) < self.rate {
            self.crashed[i].fetch_add(1, Ordering::Relaxed);
            return Err(PublishError::Crashed(step));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The change feed

/// One stream record: the source and key of a ledger item that changed.
type Change = (String, String);

struct FeedState {
    pending: VecDeque<Change>,
    /// Batches taken and not yet done.
    busy: usize,
    closed: bool,
    /// The drain gave up (bounded): the committers stop.
    given_up: bool,
    rng: ChaCha8Rng,
    records: u64,
    duplicates: u64,
    put_back_batches: u64,
    put_back_records: u64,
    /// Failed publishes after the feed closed.
    failures_after_close: u64,
}

/// The ledger's change feed as the committers see it (see the module doc).
pub struct Feed {
    state: Mutex<FeedState>,
    notify: tokio::sync::Notify,
    duplicate_share: f64,
    max_failures_after_close: u64,
}

impl Feed {
    fn new(seed: u64, duplicate_share: f64) -> Self {
        Self {
            state: Mutex::new(FeedState {
                pending: VecDeque::new(),
                busy: 0,
                closed: false,
                given_up: false,
                rng: ChaCha8Rng::seed_from_u64(mix(seed ^ STREAM_FEED)),
                records: 0,
                duplicates: 0,
                put_back_batches: 0,
                put_back_records: 0,
                failures_after_close: 0,
            }),
            notify: tokio::sync::Notify::new(),
            duplicate_share,
            max_failures_after_close: 2_000,
        }
    }

    /// A ledger item changed.
    fn push(&self, source_id: &str, key: &str) {
        let mut s = self.state.lock().unwrap();
        let change = (source_id.to_string(), key.to_string());
        s.records += 1;
        s.pending.push_back(change.clone());
        if s.rng.random_bool(self.duplicate_share) {
            // Delivered again a few records later.
            s.duplicates += 1;
            let back = s.rng.random_range(0..=8usize).min(s.pending.len());
            let at = s.pending.len() - back;
            s.pending.insert(at, change);
        }
        drop(s);
        self.notify.notify_waiters();
    }

    /// The next batch (1..=`max` records from the head), waiting up to `window` for a full
    /// batch; `None` when the feed is closed and everything in it was published.
    async fn take(&self, max: usize, window: Duration) -> Option<Vec<Change>> {
        let mut waited = false;
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wait_window = {
                let mut s = self.state.lock().unwrap();
                if s.given_up {
                    return None;
                }
                let len = s.pending.len();
                if len > 0 && (waited || s.closed || len >= max) {
                    let n = s.rng.random_range(1..=max).min(len);
                    let batch: Vec<Change> = s.pending.drain(..n).collect();
                    s.busy += 1;
                    return Some(batch);
                }
                if len == 0 && s.closed && s.busy == 0 {
                    drop(s);
                    self.notify.notify_waiters();
                    return None;
                }
                len > 0
            };
            if wait_window {
                tokio::time::sleep(window).await;
                waited = true;
            } else {
                notified.await;
            }
        }
    }

    /// A batch is done; `failed` goes back to the head of the feed (the stream retries it).
    fn done(&self, failed: Vec<Change>) {
        let mut s = self.state.lock().unwrap();
        s.busy -= 1;
        if !failed.is_empty() {
            s.put_back_batches += 1;
            s.put_back_records += failed.len() as u64;
            if s.closed {
                s.failures_after_close += 1;
                if s.failures_after_close > self.max_failures_after_close {
                    s.given_up = true;
                }
            }
            for c in failed.into_iter().rev() {
                s.pending.push_front(c);
            }
        }
        drop(s);
        self.notify.notify_waiters();
    }

    /// No more changes come: the committers drain what is left and stop.
    fn close(&self) {
        self.state.lock().unwrap().closed = true;
        self.notify.notify_waiters();
    }
}

// ---------------------------------------------------------------------------------------------
// The ledger that feeds it

/// A [`Ledger`] that appends the key of every write that landed to a [`Feed`].
pub struct FeedLedger {
    inner: Arc<dyn Ledger>,
    feed: Arc<Feed>,
}

impl FeedLedger {
    /// Wrap `inner`.
    pub fn new(inner: Arc<dyn Ledger>, feed: Arc<Feed>) -> Self {
        Self { inner, feed }
    }

    fn landed(&self, source_id: &str, key: &str, out: &LedgerWrite) {
        if *out == LedgerWrite::Written {
            self.feed.push(source_id, key);
        }
    }
}

#[async_trait]
impl JobStore for FeedLedger {
    async fn create_job(&self, job: &Job) -> Result<bool, LedgerError> {
        self.inner.create_job(job).await
    }

    async fn replace_job(&self, job: &Job, expected_rev: u64) -> Result<JobWrite, LedgerError> {
        self.inner.replace_job(job, expected_rev).await
    }

    async fn get_job(&self, id: &str) -> Result<Option<(Job, JobCounts)>, LedgerError> {
        self.inner.get_job(id).await
    }

    async fn list_jobs(&self, limit: usize) -> Result<Vec<(Job, JobCounts)>, LedgerError> {
        self.inner.list_jobs(limit).await
    }

    async fn finish_message(
        &self,
        job_id: &str,
        message: u64,
        counts: &JobCounts,
        now: i64,
    ) -> Result<bool, LedgerError> {
        self.inner
            .finish_message(job_id, message, counts, now)
            .await
    }

    async fn add_failures(&self, job_id: &str, n: u64, now: i64) -> Result<(), LedgerError> {
        self.inner.add_failures(job_id, n, now).await
    }
}

#[async_trait]
impl Ledger for FeedLedger {
    async fn get(&self, source_id: &str, key: &str) -> Result<Option<Record>, LedgerError> {
        self.inner.get(source_id, key).await
    }

    async fn create(&self, record: &Record) -> Result<LedgerWrite, LedgerError> {
        let out = self.inner.create(record).await?;
        self.landed(&record.source_id, &record.key, &out);
        Ok(out)
    }

    async fn replace(
        &self,
        record: &Record,
        expected_rev: u64,
    ) -> Result<LedgerWrite, LedgerError> {
        let out = self.inner.replace(record, expected_rev).await?;
        self.landed(&record.source_id, &record.key, &out);
        Ok(out)
    }

    async fn delete(
        &self,
        source_id: &str,
        key: &str,
        expected_rev: u64,
    ) -> Result<LedgerWrite, LedgerError> {
        let out = self.inner.delete(source_id, key, expected_rev).await?;
        self.landed(source_id, key, &out);
        Ok(out)
    }

    async fn list(&self, source_id: &str) -> Result<Vec<Record>, LedgerError> {
        self.inner.list(source_id).await
    }

    async fn get_many(&self, source_id: &str, keys: &[String]) -> Result<Vec<Record>, LedgerError> {
        self.inner.get_many(source_id, keys).await
    }

    async fn get_many_latest(
        &self,
        source_id: &str,
        keys: &[String],
    ) -> Result<Vec<Record>, LedgerError> {
        self.inner.get_many_latest(source_id, keys).await
    }

    async fn list_range(
        &self,
        source_id: &str,
        range: &KeyRange,
    ) -> Result<Vec<Record>, LedgerError> {
        self.inner.list_range(source_id, range).await
    }

    async fn audit(&self, entry: &AuditEntry) -> Result<(), LedgerError> {
        self.inner.audit(entry).await
    }

    async fn audit_log(&self, source_id: Option<&str>) -> Result<Vec<AuditEntry>, LedgerError> {
        self.inner.audit_log(source_id).await
    }

    async fn source_mode(&self, source_id: &str) -> Result<Option<Mode>, LedgerError> {
        self.inner.source_mode(source_id).await
    }

    async fn set_source_mode(
        &self,
        source_id: &str,
        mode: Mode,
        at: i64,
    ) -> Result<(), LedgerError> {
        self.inner.set_source_mode(source_id, mode, at).await
    }

    async fn source_ids(&self) -> Result<Vec<String>, LedgerError> {
        self.inner.source_ids().await
    }

    async fn unregister_source(&self, source_id: &str) -> Result<(), LedgerError> {
        self.inner.unregister_source(source_id).await
    }
}

// ---------------------------------------------------------------------------------------------
// The committers

/// What one table's publishes did.
#[derive(Debug, Clone, Default)]
pub struct PublishTally {
    /// Publishes called.
    pub publishes: u64,
    /// Publishes that committed a version and returned it.
    pub committed: u64,
    /// Publishes that found the table already matching.
    pub nothing_to_do: u64,
    /// Publishes that failed (crashed, a fault, a lost race too many): their records came back.
    pub failed: u64,
    /// Files added and removed by the returned commits.
    pub added: u64,
    /// Files removed by the returned commits.
    pub removed: u64,
    /// Most files one returned commit added.
    pub max_added: usize,
    /// Commit attempts lost to another committer (and rebuilt) inside publishes that ended.
    pub lost_races: u64,
}

impl PublishTally {
    fn merge(&mut self, o: &PublishTally) {
        self.publishes += o.publishes;
        self.committed += o.committed;
        self.nothing_to_do += o.nothing_to_do;
        self.failed += o.failed;
        self.added += o.added;
        self.removed += o.removed;
        self.max_added = self.max_added.max(o.max_added);
        self.lost_races += o.lost_races;
    }
}

#[derive(Debug, Clone, Default)]
struct CommitterTally {
    batches: u64,
    records: u64,
    ignored: u64,
    by_source: BTreeMap<String, PublishTally>,
    errors: BTreeMap<String, u64>,
    samples: Vec<String>,
}

fn publish_error_class(e: &PublishError) -> String {
    match e {
        PublishError::Crashed(step) => format!("injected crash at {step:?}"),
        PublishError::Contended { .. } => "commit attempts lost to other writers".into(),
        e => {
            let text = e.to_string();
            let class = error_class(&text);
            if class.starts_with("injected") {
                class
            } else {
                text
            }
        }
    }
}

async fn committer(
    feed: Arc<Feed>,
    publisher: Publisher,
    max: usize,
    window: Duration,
) -> CommitterTally {
    let mut t = CommitterTally::default();
    while let Some(batch) = feed.take(max, window).await {
        t.batches += 1;
        t.records += batch.len() as u64;
        // One publish per source, as the stream handler does; the source's records in order.
        let mut by_source: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (source_id, key) in batch {
            by_source.entry(source_id).or_default().push(key);
        }
        let mut failed = Vec::new();
        for (source_id, keys) in by_source {
            if !publisher.table_sources().any(|s| s.id() == source_id) {
                t.ignored += keys.len() as u64;
                continue;
            }
            let tally = t.by_source.entry(source_id.clone()).or_default();
            tally.publishes += 1;
            match publisher.publish_keys(&source_id, &keys).await {
                Ok(p) => {
                    tally.lost_races += u64::from(p.attempts.saturating_sub(1));
                    if p.committed.is_some() {
                        tally.committed += 1;
                        tally.added += p.added as u64;
                        tally.removed += p.removed as u64;
                        tally.max_added = tally.max_added.max(p.added);
                    } else {
                        tally.nothing_to_do += 1;
                    }
                }
                Err(e) => {
                    tally.failed += 1;
                    let class = publish_error_class(&e);
                    if !class.starts_with("injected") && t.samples.len() < 20 {
                        t.samples.push(format!("{source_id}: {e}"));
                    }
                    *t.errors.entry(class).or_default() += 1;
                    failed.extend(keys.into_iter().map(|k| (source_id.clone(), k)));
                }
            }
        }
        feed.done(failed);
    }
    t
}

/// What the committers did, for the report.
#[derive(Debug, Clone, Default)]
pub struct CommitterReport {
    /// Committers that ran at once.
    pub committers: usize,
    /// Records the ledger's writes put in the feed.
    pub feed_records: u64,
    /// Of which delivered a second time.
    pub feed_duplicates: u64,
    /// Batches taken by the committers.
    pub batches: u64,
    /// Records taken (with the ones taken again).
    pub records_taken: u64,
    /// Records of sources without a table (acknowledged, nothing published).
    pub ignored: u64,
    /// Publishes that failed and put their records back, and those records.
    pub put_back: (u64, u64),
    /// Failed publishes after the feed closed (the drain).
    pub failures_in_drain: u64,
    /// Records still in the feed when the drain gave up (must be 0).
    pub left: usize,
    /// Per table source.
    pub by_source: BTreeMap<String, PublishTally>,
    /// Publish crashes: (step, reached, crashed).
    pub crashes: Vec<(Step, u64, u64)>,
    /// Publish errors by class.
    pub errors: BTreeMap<String, u64>,
    /// Publish errors that were not injected (first ones).
    pub error_samples: Vec<String>,
    /// Faults injected into the committers' ledger and store calls.
    pub faults: BTreeMap<(&'static str, FaultTiming, FaultKind), u64>,
    /// The committers' store and ledger calls, by operation.
    pub calls: BTreeMap<&'static str, u64>,
    /// After the check: what a sweep (`publish_all`) of each table found to commit (must be
    /// nothing), or its error.
    pub sweeps: Vec<(String, Result<Option<i64>, String>)>,
}

impl CommitterReport {
    /// Crashes at `step`.
    pub fn crashes_at(&self, step: Step) -> u64 {
        self.crashes
            .iter()
            .find(|(s, _, _)| *s == step)
            .map_or(0, |(_, _, n)| *n)
    }
}

/// The committers of a run, with their feed.
pub struct Committers {
    /// The feed the workers' and reconcile's ledger writes go to.
    pub feed: Arc<Feed>,
    crashes: Arc<PublishCrashes>,
    fault_stats: Arc<FaultStats>,
    handles: Vec<tokio::task::JoinHandle<CommitterTally>>,
    committers: usize,
}

/// A publisher on the backends of `b`, with short backoffs (the committers race on one
/// table; a lost commit is rebuilt at once).
pub fn publisher(
    b: &Backends,
    config: &Arc<Config>,
    ledger: Arc<dyn Ledger>,
    store: Arc<dyn tidemark::ports::ObjectStore>,
) -> Publisher {
    let mut p = Publisher::new(
        config.clone(),
        ledger,
        store,
        tables(b),
        Arc::new(b.clock.clone()),
    );
    p.settings.backoff_base = Duration::from_millis(5);
    p.settings.backoff_max = Duration::from_millis(200);
    p
}

impl Committers {
    /// Start `cfg.committers` committers on `b`.
    pub fn start(b: &Backends, cfg: &ChaosConfig, config: &Arc<Config>) -> Self {
        let feed = Arc::new(Feed::new(cfg.seed, cfg.feed_duplicate_share));
        let fault_stats = Arc::new(FaultStats::default());
        let plan = Arc::new(FaultPlan::new(
            cfg.seed,
            STREAM_COMMITTER,
            cfg.publish_fault_rate,
            fault_stats.clone(),
        ));
        let crashes = Arc::new(PublishCrashes::new(cfg.seed, cfg.publish_crash_rate));
        let handles = (0..cfg.committers.max(1))
            .map(|_| {
                let mut p = publisher(
                    b,
                    config,
                    Arc::new(FaultyLedger::new(b.ledger.clone(), plan.clone())),
                    Arc::new(FaultyStore::new(b.store.clone(), plan.clone())),
                );
                p.faults = crashes.clone();
                tokio::spawn(committer(
                    feed.clone(),
                    p,
                    cfg.publish_batch.max(1),
                    Duration::from_millis(cfg.publish_window_ms),
                ))
            })
            .collect();
        Self {
            feed,
            crashes,
            fault_stats,
            handles,
            committers: cfg.committers.max(1),
        }
    }

    /// Close the feed, let the committers drain it, and count what they did.
    pub async fn finish(self) -> CommitterReport {
        self.feed.close();
        let mut r = CommitterReport {
            committers: self.committers,
            ..Default::default()
        };
        for h in self.handles {
            let t = h.await.expect("committer");
            r.batches += t.batches;
            r.records_taken += t.records;
            r.ignored += t.ignored;
            for (id, tally) in &t.by_source {
                r.by_source.entry(id.clone()).or_default().merge(tally);
            }
            for (k, v) in t.errors {
                *r.errors.entry(k).or_default() += v;
            }
            for s in t.samples {
                if r.error_samples.len() < 20 {
                    r.error_samples.push(s);
                }
            }
        }
        let s = self.feed.state.lock().unwrap();
        r.feed_records = s.records;
        r.feed_duplicates = s.duplicates;
        r.put_back = (s.put_back_batches, s.put_back_records);
        r.failures_in_drain = s.failures_after_close;
        r.left = s.pending.len();
        r.crashes = self.crashes.by_step();
        r.faults = self.fault_stats.snapshot();
        r.calls = self.fault_stats.calls();
        r
    }
}
