//! The chaos run: the product claim — every row of every current source object lands in the
//! lake exactly once, whatever happens — turned into numbers anyone can rerun.
//!
//! [`run`] generates objects of several sources (CSV, CSV gzip, JSON Lines, JSON Lines zstd;
//! some keys with spaces, `+`, `%`, `=`, `&` and non-ASCII), overwrites a share of them and
//! deletes another share, uploads every version to the landing bucket in version order per key,
//! and only then drives their S3 notifications (AWS's shape: real ETags from the uploads,
//! increasing sequencers per key, some of them with their trailing zeros dropped) through the
//! real ingest handler ([`ingest::handle`]) as SQS batches pulled by concurrent workers from a
//! shared queue:
//! - every event is delivered 1–3 times (each copy its own SQS message), all copies shuffled
//!   across and within keys (a delete's event may come before its create's), released in waves;
//! - each worker has its own [`Pipeline`] over [`FaultyStore`] and [`FaultyLedger`] (the REAL
//!   adapters, wrapped: on a seeded share of calls a transient error before the call, or for
//!   writes after it — the write happened, the caller sees an error) and a [`CrashInjector`]
//!   (the worker stops at a protocol step on a seeded share of the times it reaches it);
//! - a message in the partial batch response comes back; a batch whose invocation crashed
//!   comes back whole (a dead invocation returns no partial batch response). Like SQS with a
//!   visibility timeout longer than the lease (AWS's guidance: 6 × the function timeout), a
//!   message comes back only after the leases of its attempt expired: when the queue is empty
//!   and no worker is busy, the shared test clock moves past the lease margin and the messages
//!   waiting for redelivery (and the next wave) become visible. Rounds are bounded.
//!
//! Then reconcile (with repair, every source, one window over everything), a second reconcile
//! that must be clean, and an independent check of the lake (Parquet read back, `order_id` by
//! `order_id`) and of the ledger against the generated data.
//!
//! Table mode ([`ChaosConfig::table`]): `orders` (partitioned by the date in its keys) and
//! `archive` (`on_delete: keep`) publish a Delta table, `orders_json` stays loose files. Every
//! ledger write that lands feeds a change feed, and committers beside the workers publish its
//! keys into the tables, crashing at each step of a publish and meeting faults of their own
//! ([`committer`]); after reconcile the feed is drained by the committers alone. The check
//! then reads each table back with an independent reader (the Python `deltalake` package):
//! its rows must be exactly the current objects' (`order_id` by `order_id`), and a sweep of
//! the ledger against the table must find nothing left to commit. A table source's outputs
//! are named per claim and never deleted on the ingest path, so its loose files of replaced
//! versions and crashed attempts are counted apart: the table is the truth for it.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Int32Type, Int64Type};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};
use tidemark::config::{Config, Mode, table_key_hash_of};
use tidemark::error::{LedgerError, ProcessError, Retry, StoreError};
use tidemark::ingest::{self, Summary};
use tidemark::jobs::{Job, JobCounts};
use tidemark::model::{AuditEntry, Record, Status, Target};
use tidemark::ports::{
    ByteRange, Clock, GetOutcome, JobStore, JobWrite, KeyRange, Ledger, LedgerWrite, ListPage,
    ObjectMeta, ObjectStore, PutOutcome, RangeOutcome, WriteCondition,
};
use tidemark::process::{Faults, NoFaults, Pipeline, RunContext, Step};
use tidemark::reconcile::{self, Options, Window};

use crate::{
    Backends, LEASE_MARGIN_MS, Totals, direct, form_encode, orders_csv, orders_doc, orders_jsonl,
    sqs,
};

pub mod committer;

use committer::{CommitterReport, Committers, FeedLedger, PUBLISH_STEPS};

/// The seed used when `TIDEMARK_CHAOS_SEED` is not set.
pub const DEFAULT_SEED: u64 = 0x7D3E_2026;

/// The seed of a run: `TIDEMARK_CHAOS_SEED` (decimal or `0x` hex), else [`DEFAULT_SEED`].
pub fn seed_from_env() -> u64 {
    match std::env::var("TIDEMARK_CHAOS_SEED") {
        Ok(s) => {
            let s = s.trim();
            let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => s.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("TIDEMARK_CHAOS_SEED={s:?} is not a u64: {e}"))
        }
        Err(_) => DEFAULT_SEED,
    }
}

/// What a chaos run does.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    /// Seed of the data, the event order, the delivery copies and the fault / crash decisions.
    pub seed: u64,
    /// Source objects (keys) generated.
    pub objects: usize,
    /// Share of keys overwritten 1–3 times.
    pub overwrite_share: f64,
    /// Share of keys deleted (after their last version).
    pub delete_share: f64,
    /// Share of keys deleted and then created again (one more version after the delete).
    pub recreate_share: f64,
    /// Each event is delivered 1..=this many times.
    pub max_copies: u32,
    /// Concurrent workers (each its own pipeline, as concurrent Lambda invocations).
    pub workers: usize,
    /// SQS batch size (a pull takes 1..=this many messages).
    pub batch_size: usize,
    /// Objects of one invocation processed at once (the ingest function's `TIDEMARK_CONCURRENCY`).
    pub handler_concurrency: usize,
    /// Share of object-store and ledger calls that fail transiently.
    pub fault_rate: f64,
    /// Probability that a worker stops at a protocol step each time it reaches one.
    pub crash_rate: f64,
    /// Attempts before quarantine. Raised from the default 3 because every injected fault or
    /// crash costs the object an attempt (an expired lease counts as one) and at these rates
    /// about 2 attempts in 5 fail (full run: ≈6,000 failed attempts for ≈9,600 that ended):
    /// with 3, a 1,000-object run quarantined 26 objects (2.6%) for purely transient reasons.
    /// At 20 that is ≈0.4^20 ≈ 1e-8 per object, so a quarantine here is a finding, not noise.
    pub max_attempts: u32,
    /// Initial deliveries are released in this many waves (one per round), so redeliveries
    /// mix with first deliveries.
    pub waves: usize,
    /// Clock advances (rounds) before the driver gives up.
    pub max_rounds: u32,
    /// Share of keys whose overwrites and deletes come in a second phase, after their first
    /// version was processed (so outputs are replaced and deleted, and old events meet a
    /// newer commit); the other keys get every version and their delete uploaded before any
    /// of their events is driven (so the pinned GET only ever finds the last version).
    pub staged_share: f64,
    /// Share of the deliveries of first-phase events held back to the second phase (late
    /// duplicates, or an event first seen after a newer one committed).
    pub late_share: f64,
    /// Rows per object version, inclusive range.
    pub rows: (usize, usize),
    /// Share of events never delivered at all (S3 notifications can be lost): 0 in the runs
    /// of issue 7, where every event is delivered 1–3 times. Above 0, the event path alone
    /// leaves missing, stale and orphaned objects that reconcile must find and repair.
    pub lost_share: f64,
    /// Table mode: `orders` and `archive` publish Delta tables, committers run beside the
    /// workers (see the module doc).
    pub table: bool,
    /// Run `orders_json` partitioned by its rows (`dt` by the day of `ordered_at`, then
    /// `customer`): each version a set of 1–8 files, crashes between the files of a set.
    pub partitioned: bool,
    /// Committers running at once (table mode): they race on the tables.
    pub committers: usize,
    /// Feed records a committer takes at most per batch.
    pub publish_batch: usize,
    /// How long a committer waits for a batch to fill (ms, real time).
    pub publish_window_ms: u64,
    /// Share of feed records delivered twice.
    pub feed_duplicate_share: f64,
    /// Probability that a publish stops at a step each time it reaches one.
    pub publish_crash_rate: f64,
    /// Share of the committers' ledger and object-store calls that fail transiently. Lower
    /// than [`ChaosConfig::fault_rate`]: a publish of a batch makes dozens of calls (a footer
    /// per file added) and any fault fails the whole publish.
    pub publish_fault_rate: f64,
}

impl ChaosConfig {
    /// The always-on size: 250 objects (≈310 events, ≈620 deliveries), the full fault and
    /// crash rates.
    pub fn small(seed: u64) -> Self {
        Self {
            seed,
            objects: 250,
            ..Self::full(seed)
        }
    }

    /// The full size: 8,000 objects, ≈10,300 events, ≈20,000 deliveries.
    pub fn full(seed: u64) -> Self {
        Self {
            seed,
            objects: 8_000,
            overwrite_share: 0.10,
            delete_share: 0.05,
            recreate_share: 0.02,
            max_copies: 3,
            workers: 8,
            batch_size: 10,
            handler_concurrency: 4,
            fault_rate: 0.05,
            crash_rate: 0.05,
            max_attempts: 20,
            waves: 4,
            max_rounds: 200,
            staged_share: 0.5,
            late_share: 0.1,
            rows: (1, 8),
            lost_share: 0.0,
            table: false,
            partitioned: false,
            committers: 2,
            // Batches of up to 100 records keep the publishes (each loads the table's whole
            // log: no checkpoints) few enough for the S3 emulator: ≈25 commits per small run.
            publish_batch: 100,
            publish_window_ms: 100,
            feed_duplicate_share: 0.1,
            // A small run reaches each step 25–70 times: at 15% a step without a crash is
            // ≈1% likely for an arbitrary seed (the default seed crashes within the first six
            // times each step is reached).
            publish_crash_rate: 0.15,
            publish_fault_rate: 0.03,
        }
    }

    /// The same run with `orders_json` partitioned by its rows.
    pub fn with_partitions(self) -> Self {
        Self {
            partitioned: true,
            ..self
        }
    }

    /// The same run in table mode.
    pub fn with_table(self) -> Self {
        Self {
            table: true,
            ..self
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Seeded decisions

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// The n-th decision of a stream: a pure function of (seed, stream, n).
fn draw(seed: u64, stream: u64, n: u64) -> u64 {
    mix(seed ^ mix(stream.wrapping_mul(GOLDEN) ^ mix(n)))
}

/// A transient failure as a client sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// Throttling (`SlowDown`, `ProvisionedThroughputExceeded`).
    Throttle,
    /// An HTTP 500.
    ServerError,
    /// A timeout.
    Timeout,
    /// A dropped connection.
    ConnectionReset,
}

impl FaultKind {
    const ALL: [FaultKind; 4] = [
        FaultKind::Throttle,
        FaultKind::ServerError,
        FaultKind::Timeout,
        FaultKind::ConnectionReset,
    ];

    /// The error message.
    pub fn message(self) -> &'static str {
        match self {
            FaultKind::Throttle => "injected throttle",
            FaultKind::ServerError => "injected 500",
            FaultKind::Timeout => "injected timeout",
            FaultKind::ConnectionReset => "injected connection reset",
        }
    }

    fn label(self) -> &'static str {
        match self {
            FaultKind::Throttle => "throttle",
            FaultKind::ServerError => "500",
            FaultKind::Timeout => "timeout",
            FaultKind::ConnectionReset => "connection reset",
        }
    }
}

/// When an injected fault hits, relative to the real call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultTiming {
    /// Before the call: nothing happened.
    Before,
    /// After a write: it happened, the caller sees an error.
    AfterWrite,
    /// While the caller reads a GET's body: the connection drops part way.
    MidBody,
}

impl FaultTiming {
    fn label(self) -> &'static str {
        match self {
            FaultTiming::Before => "before the call",
            FaultTiming::AfterWrite => "after the write (it happened)",
            FaultTiming::MidBody => "mid-body (GET stream cut)",
        }
    }
}

/// Counts of injected faults: by (layer, timing, kind), and ledger after-write faults by the
/// protocol step whose write was made.
#[derive(Debug, Default)]
pub struct FaultStats {
    calls: Mutex<BTreeMap<&'static str, u64>>,
    by: Mutex<BTreeMap<(&'static str, FaultTiming, FaultKind), u64>>,
    ledger_after: Mutex<BTreeMap<&'static str, u64>>,
}

impl FaultStats {
    fn bump(&self, layer: &'static str, timing: FaultTiming, kind: FaultKind) {
        *self
            .by
            .lock()
            .unwrap()
            .entry((layer, timing, kind))
            .or_default() += 1;
    }

    fn bump_ledger_after(&self, what: &'static str) {
        *self.ledger_after.lock().unwrap().entry(what).or_default() += 1;
    }

    /// Faults counted per (layer, timing, kind).
    pub fn snapshot(&self) -> BTreeMap<(&'static str, FaultTiming, FaultKind), u64> {
        self.by.lock().unwrap().clone()
    }

    /// Ledger writes made whose reply was replaced by an error, by the step they belong to.
    pub fn ledger_after(&self) -> BTreeMap<&'static str, u64> {
        self.ledger_after.lock().unwrap().clone()
    }

    /// Calls made through the faulty layers, by operation.
    pub fn calls(&self) -> BTreeMap<&'static str, u64> {
        self.calls.lock().unwrap().clone()
    }

    /// All faults injected.
    pub fn total(&self) -> u64 {
        self.by.lock().unwrap().values().sum()
    }
}

/// The seeded fault decisions of one layer (shared by every worker's wrapper of that layer,
/// so the share is exact over the whole run whatever the interleaving).
#[derive(Debug)]
pub struct FaultPlan {
    seed: u64,
    stream: u64,
    rate: f64,
    calls: AtomicU64,
    /// What was injected.
    pub stats: Arc<FaultStats>,
}

impl FaultPlan {
    /// Faults on `rate` of the calls, decided from `(seed, stream, call number)`.
    pub fn new(seed: u64, stream: u64, rate: f64, stats: Arc<FaultStats>) -> Self {
        Self {
            seed,
            stream,
            rate,
            calls: AtomicU64::new(0),
            stats,
        }
    }

    /// The decision for the next call (of operation `op`): a fault kind and spare random
    /// bits, or none.
    fn next(&self, op: &'static str) -> Option<(FaultKind, u64)> {
        *self.stats.calls.lock().unwrap().entry(op).or_default() += 1;
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let h = draw(self.seed, self.stream, n);
        if unit(h) >= self.rate {
            return None;
        }
        let h2 = mix(h);
        Some((FaultKind::ALL[(h2 % 4) as usize], h2 >> 2))
    }
}

// ---------------------------------------------------------------------------------------------
// The faulty object store

/// An [`ObjectStore`] that delegates to a real one and fails a seeded share of calls with a
/// transient [`StoreError`]: reads before the call (a GET also mid-body), writes (PUT,
/// complete multipart, DELETE) before or after it.
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    plan: Arc<FaultPlan>,
}

impl FaultyStore {
    /// Wrap `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>, plan: Arc<FaultPlan>) -> Self {
        Self { inner, plan }
    }

    fn error(op: &'static str, bucket: &str, key: &str, kind: FaultKind) -> StoreError {
        StoreError {
            op,
            bucket: bucket.to_string(),
            key: key.to_string(),
            message: kind.message().to_string(),
            retry: Retry::Transient,
        }
    }

    /// A read: maybe fail before it.
    fn before(&self, op: &'static str, bucket: &str, key: &str) -> Result<(), StoreError> {
        match self.plan.next(op) {
            Some((kind, _)) => {
                self.plan.stats.bump("store", FaultTiming::Before, kind);
                Err(Self::error(op, bucket, key, kind))
            }
            None => Ok(()),
        }
    }

    /// A write: maybe fail before it (`Err`), or decide to fail after it (`Ok(Some)`).
    fn write_fault(
        &self,
        op: &'static str,
        bucket: &str,
        key: &str,
    ) -> Result<Option<FaultKind>, StoreError> {
        match self.plan.next(op) {
            Some((kind, bits)) if bits & 1 == 0 => {
                self.plan.stats.bump("store", FaultTiming::Before, kind);
                Err(Self::error(op, bucket, key, kind))
            }
            Some((kind, _)) => Ok(Some(kind)),
            None => Ok(None),
        }
    }

    fn after<T>(
        &self,
        op: &'static str,
        bucket: &str,
        key: &str,
        fault: Option<FaultKind>,
        done: T,
    ) -> Result<T, StoreError> {
        match fault {
            Some(kind) => {
                self.plan.stats.bump("store", FaultTiming::AfterWrite, kind);
                Err(Self::error(op, bucket, key, kind))
            }
            None => Ok(done),
        }
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn head(&self, bucket: &str, key: &str) -> Result<Option<ObjectMeta>, StoreError> {
        self.before("HeadObject", bucket, key)?;
        self.inner.head(bucket, key).await
    }

    async fn get(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&str>,
    ) -> Result<GetOutcome, StoreError> {
        let fault = self.plan.next("GetObject");
        if let Some((kind, bits)) = fault
            && bits % 3 != 0
        {
            self.plan.stats.bump("store", FaultTiming::Before, kind);
            return Err(Self::error("GetObject", bucket, key, kind));
        }
        let got = self.inner.get(bucket, key, if_match).await?;
        match (fault, got) {
            (Some((_, bits)), GetOutcome::Found { meta, body }) => {
                self.plan
                    .stats
                    .bump("store", FaultTiming::MidBody, FaultKind::ConnectionReset);
                let left = (bits >> 2) % meta.size.max(1);
                Ok(GetOutcome::Found {
                    meta,
                    body: Box::pin(crate::flaky::CutBody::new(
                        body,
                        left as usize,
                        FaultKind::ConnectionReset.message(),
                    )),
                })
            }
            (_, got) => Ok(got),
        }
    }

    async fn get_range(
        &self,
        bucket: &str,
        key: &str,
        range: ByteRange,
        if_match: Option<&str>,
    ) -> Result<RangeOutcome, StoreError> {
        self.before("GetObject", bucket, key)?;
        self.inner.get_range(bucket, key, range, if_match).await
    }

    async fn put(
        &self,
        bucket: &str,
        key: &str,
        body: Bytes,
        metadata: &BTreeMap<String, String>,
        condition: &WriteCondition,
    ) -> Result<PutOutcome, StoreError> {
        let fault = self.write_fault("PutObject", bucket, key)?;
        let out = self
            .inner
            .put(bucket, key, body, metadata, condition)
            .await?;
        self.after("PutObject", bucket, key, fault, out)
    }

    async fn create_multipart(
        &self,
        bucket: &str,
        key: &str,
        metadata: &BTreeMap<String, String>,
    ) -> Result<String, StoreError> {
        self.before("CreateMultipartUpload", bucket, key)?;
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
        self.before("UploadPart", bucket, key)?;
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
        let fault = self.write_fault("CompleteMultipartUpload", bucket, key)?;
        let out = self
            .inner
            .complete_multipart(bucket, key, upload_id, parts, condition)
            .await?;
        self.after("CompleteMultipartUpload", bucket, key, fault, out)
    }

    async fn abort_multipart(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), StoreError> {
        self.before("AbortMultipartUpload", bucket, key)?;
        self.inner.abort_multipart(bucket, key, upload_id).await
    }

    async fn delete(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&str>,
    ) -> Result<bool, StoreError> {
        let fault = self.write_fault("DeleteObject", bucket, key)?;
        let out = self.inner.delete(bucket, key, if_match).await?;
        self.after("DeleteObject", bucket, key, fault, out)
    }

    async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        page_token: Option<&str>,
    ) -> Result<ListPage, StoreError> {
        self.before("ListObjectsV2", bucket, prefix)?;
        self.inner.list(bucket, prefix, page_token).await
    }

    async fn list_after(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: &str,
    ) -> Result<ListPage, StoreError> {
        self.before("ListObjectsV2", bucket, prefix)?;
        self.inner.list_after(bucket, prefix, start_after).await
    }
}

// ---------------------------------------------------------------------------------------------
// The faulty ledger

/// A [`Ledger`] that delegates to a real one and fails a seeded share of calls with a
/// transient [`LedgerError::Service`]: reads before the call, writes (create, replace, delete)
/// before or after it.
pub struct FaultyLedger {
    inner: Arc<dyn Ledger>,
    plan: Arc<FaultPlan>,
}

impl FaultyLedger {
    /// Wrap `inner`.
    pub fn new(inner: Arc<dyn Ledger>, plan: Arc<FaultPlan>) -> Self {
        Self { inner, plan }
    }

    fn error(op: &'static str, source_id: &str, key: &str, kind: FaultKind) -> LedgerError {
        LedgerError::Service {
            op,
            source_id: source_id.to_string(),
            key: key.to_string(),
            message: kind.message().to_string(),
            retry: Retry::Transient,
        }
    }

    fn before(&self, op: &'static str, source_id: &str, key: &str) -> Result<(), LedgerError> {
        match self.plan.next(op) {
            Some((kind, _)) => {
                self.plan.stats.bump("ledger", FaultTiming::Before, kind);
                Err(Self::error(op, source_id, key, kind))
            }
            None => Ok(()),
        }
    }

    fn write_fault(
        &self,
        op: &'static str,
        source_id: &str,
        key: &str,
    ) -> Result<Option<FaultKind>, LedgerError> {
        match self.plan.next(op) {
            Some((kind, bits)) if bits & 1 == 0 => {
                self.plan.stats.bump("ledger", FaultTiming::Before, kind);
                Err(Self::error(op, source_id, key, kind))
            }
            Some((kind, _)) => Ok(Some(kind)),
            None => Ok(None),
        }
    }

    /// Which protocol step a written record belongs to.
    fn step_of(record: &Record) -> &'static str {
        if record.claim.is_some() {
            "claim / defer"
        } else if record.committed.is_some()
            && record.note.is_none()
            && record.last_error.is_none()
            && record.attempts == 0
        {
            "commit"
        } else {
            "fail / release / settle"
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn after(
        &self,
        op: &'static str,
        source_id: &str,
        key: &str,
        fault: Option<FaultKind>,
        step: &'static str,
        out: LedgerWrite,
    ) -> Result<LedgerWrite, LedgerError> {
        match fault {
            Some(kind) => {
                self.plan
                    .stats
                    .bump("ledger", FaultTiming::AfterWrite, kind);
                if out == LedgerWrite::Written {
                    self.plan.stats.bump_ledger_after(step);
                } else {
                    self.plan
                        .stats
                        .bump_ledger_after("(a conflict, nothing written)");
                }
                Err(Self::error(op, source_id, key, kind))
            }
            None => Ok(out),
        }
    }
}

#[async_trait]
impl JobStore for FaultyLedger {
    async fn create_job(&self, job: &Job) -> Result<bool, LedgerError> {
        self.before("PutItem", "(job)", &job.id)?;
        self.inner.create_job(job).await
    }

    async fn replace_job(&self, job: &Job, expected_rev: u64) -> Result<JobWrite, LedgerError> {
        self.before("PutItem", "(job)", &job.id)?;
        self.inner.replace_job(job, expected_rev).await
    }

    async fn get_job(&self, id: &str) -> Result<Option<(Job, JobCounts)>, LedgerError> {
        self.before("GetItem", "(job)", id)?;
        self.inner.get_job(id).await
    }

    async fn list_jobs(&self, limit: usize) -> Result<Vec<(Job, JobCounts)>, LedgerError> {
        self.before("Query", "(job)", "")?;
        self.inner.list_jobs(limit).await
    }

    async fn finish_message(
        &self,
        job_id: &str,
        message: u64,
        counts: &JobCounts,
        now: i64,
    ) -> Result<bool, LedgerError> {
        self.before("TransactWriteItems", "(job)", job_id)?;
        self.inner
            .finish_message(job_id, message, counts, now)
            .await
    }

    async fn add_failures(&self, job_id: &str, n: u64, now: i64) -> Result<(), LedgerError> {
        self.before("UpdateItem", "(job)", job_id)?;
        self.inner.add_failures(job_id, n, now).await
    }
}

#[async_trait]
impl Ledger for FaultyLedger {
    async fn get(&self, source_id: &str, key: &str) -> Result<Option<Record>, LedgerError> {
        self.before("GetItem", source_id, key)?;
        self.inner.get(source_id, key).await
    }

    async fn create(&self, record: &Record) -> Result<LedgerWrite, LedgerError> {
        let (s, k) = (&record.source_id, &record.key);
        let fault = self.write_fault("PutItem (create)", s, k)?;
        let out = self.inner.create(record).await?;
        self.after("PutItem (create)", s, k, fault, "claim (create)", out)
    }

    async fn replace(
        &self,
        record: &Record,
        expected_rev: u64,
    ) -> Result<LedgerWrite, LedgerError> {
        let (s, k) = (&record.source_id, &record.key);
        let fault = self.write_fault("PutItem (replace)", s, k)?;
        let out = self.inner.replace(record, expected_rev).await?;
        self.after("PutItem (replace)", s, k, fault, Self::step_of(record), out)
    }

    async fn delete(
        &self,
        source_id: &str,
        key: &str,
        expected_rev: u64,
    ) -> Result<LedgerWrite, LedgerError> {
        let fault = self.write_fault("DeleteItem", source_id, key)?;
        let out = self.inner.delete(source_id, key, expected_rev).await?;
        self.after("DeleteItem", source_id, key, fault, "forget", out)
    }

    async fn list(&self, source_id: &str) -> Result<Vec<Record>, LedgerError> {
        self.before("Query", source_id, "")?;
        self.inner.list(source_id).await
    }

    async fn get_many(&self, source_id: &str, keys: &[String]) -> Result<Vec<Record>, LedgerError> {
        self.before("BatchGetItem", source_id, "")?;
        self.inner.get_many(source_id, keys).await
    }

    async fn get_many_latest(
        &self,
        source_id: &str,
        keys: &[String],
    ) -> Result<Vec<Record>, LedgerError> {
        self.before("BatchGetItem (consistent)", source_id, "")?;
        self.inner.get_many_latest(source_id, keys).await
    }

    async fn list_range(
        &self,
        source_id: &str,
        range: &KeyRange,
    ) -> Result<Vec<Record>, LedgerError> {
        self.before("Query", source_id, &range.prefix)?;
        self.inner.list_range(source_id, range).await
    }

    async fn audit(&self, entry: &AuditEntry) -> Result<(), LedgerError> {
        self.before("PutItem", &entry.source_id, "")?;
        self.inner.audit(entry).await
    }

    async fn audit_log(&self, source_id: Option<&str>) -> Result<Vec<AuditEntry>, LedgerError> {
        self.before("Query", source_id.unwrap_or(""), "")?;
        self.inner.audit_log(source_id).await
    }

    async fn source_mode(&self, source_id: &str) -> Result<Option<Mode>, LedgerError> {
        self.before("GetItem", source_id, "")?;
        self.inner.source_mode(source_id).await
    }

    async fn set_source_mode(
        &self,
        source_id: &str,
        mode: Mode,
        at: i64,
    ) -> Result<(), LedgerError> {
        self.before("PutItem", source_id, "")?;
        self.inner.set_source_mode(source_id, mode, at).await
    }

    async fn source_ids(&self) -> Result<Vec<String>, LedgerError> {
        self.before("Query", "", "")?;
        self.inner.source_ids().await
    }

    async fn unregister_source(&self, source_id: &str) -> Result<(), LedgerError> {
        self.before("DeleteItem", source_id, "")?;
        self.inner.unregister_source(source_id).await
    }
}

// ---------------------------------------------------------------------------------------------
// Crashes

const STEPS: [Step; 5] = [
    Step::AfterClaim,
    Step::AfterGet,
    Step::BetweenPartFiles,
    Step::AfterOutputPut,
    Step::BeforeCommit,
];

fn step_index(step: Step) -> usize {
    STEPS.iter().position(|s| *s == step).unwrap_or(0)
}

/// Crashes injected, by step.
#[derive(Debug, Default)]
pub struct CrashStats {
    counts: [AtomicU64; 5],
    decisions: AtomicU64,
}

impl CrashStats {
    /// Crashes per step, in protocol order.
    pub fn by_step(&self) -> Vec<(Step, u64)> {
        STEPS
            .iter()
            .map(|s| (*s, self.counts[step_index(*s)].load(Ordering::Relaxed)))
            .collect()
    }

    /// Times a worker reached a step.
    pub fn checks(&self) -> u64 {
        self.decisions.load(Ordering::Relaxed)
    }
}

/// A [`Faults`] that stops the worker ([`ProcessError::Crashed`]) at a step on a seeded share
/// of the times a worker reaches it. One per worker: `fired` says whether its current
/// invocation died.
pub struct CrashInjector {
    seed: u64,
    rate: f64,
    stats: Arc<CrashStats>,
    fired: AtomicBool,
}

impl CrashInjector {
    /// Crash on `rate` of the steps reached, decided from `(seed, global check number)`.
    pub fn new(seed: u64, rate: f64, stats: Arc<CrashStats>) -> Self {
        Self {
            seed,
            rate,
            stats,
            fired: AtomicBool::new(false),
        }
    }
}

const STREAM_CRASH: u64 = 3;
const STREAM_STORE: u64 = 1;
const STREAM_LEDGER: u64 = 2;

impl Faults for CrashInjector {
    fn check(&self, step: Step, _key: &str) -> tidemark::error::Result<()> {
        let n = self.stats.decisions.fetch_add(1, Ordering::Relaxed);
        if unit(draw(self.seed, STREAM_CRASH, n)) < self.rate {
            self.stats.counts[step_index(step)].fetch_add(1, Ordering::Relaxed);
            self.fired.store(true, Ordering::SeqCst);
            return Err(ProcessError::Crashed(step.as_str()));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Generated data

/// The sources of the run: (source id, prefix, JSON Lines?, compressed extension).
const SOURCES: [(&str, &str, bool, &str); 3] = [
    ("orders", "in/", false, ".csv.gz"),
    ("orders_json", "json/", true, ".jsonl.zst"),
    ("archive", "keep/", false, ".csv.gz"),
];

/// Sources (by index into [`SOURCES`]) with `on_bad_row: reject`: some of their versions
/// hold bad rows, which must end in the version's rejects file and nowhere else.
const REJECTING: [bool; 3] = [true, true, false];

/// Share of the versions of a rejecting source that hold 1–3 bad rows.
const BAD_ROW_SHARE: f64 = 0.15;

/// Sources (by index into [`SOURCES`]) partitioned by their rows in partitioned mode.
const PARTITIONED: [bool; 3] = [false, true, false];

/// Sources (by index into [`SOURCES`]) that publish a Delta table in table mode, with their
/// partitioning: `orders` by the date in its keys, `archive` (`on_delete: keep`) not
/// partitioned; `orders_json` keeps the loose-file path covered.
const TABLES: [Option<&str>; 3] = [Some("key_date"), None, Some("none")];

/// Whether source `i` publishes a table: the [`TABLES`] sources in table mode, and the
/// [`PARTITIONED`] ones too when the mode is also partitioned (sets published to a table).
fn has_table(table: bool, partitioned: bool, i: usize) -> bool {
    table && (TABLES[i].is_some() || (partitioned && PARTITIONED[i]))
}

/// The suites' sources document with `on_bad_row: reject` on the [`REJECTING`] sources, and
/// in table mode an `output.table` on the [`TABLES`] sources.
fn chaos_config(b: &Backends, max_attempts: u32, table: bool, partitioned: bool) -> Arc<Config> {
    let mut doc = orders_doc(&b.landing, &b.lake, max_attempts, None);
    let sources = doc["sources"].as_array_mut().expect("sources");
    for (i, source) in sources.iter_mut().enumerate() {
        if REJECTING[i] {
            source["on_bad_row"] = "reject".into();
        }
        if has_table(table, partitioned, i) {
            source["output"]["partitioning"] = TABLES[i].unwrap_or("none").into();
            source["output"]["table"] = json!({"format": "delta"});
        }
        if partitioned && PARTITIONED[i] {
            source["output"]["partitioning"] = json!({"columns": [
                {"from": "ordered_at", "as": "dt", "transform": "day"},
                {"from": "customer"}
            ]});
        }
    }
    Arc::new(Config::from_json(&doc.to_string()).expect("chaos config is valid"))
}

#[derive(Debug, Clone)]
struct Version {
    ids: std::ops::Range<i64>,
    totals: Totals,
    /// Bad rows among its lines (rejected, not in `totals`).
    bad: u64,
    body: Bytes,
    etag: String,
    sequencer: String,
}

/// What happens to a key, in order; each op has its own event (and sequencer).
#[derive(Debug, Clone)]
enum Op {
    /// A version is uploaded.
    Put(Version),
    /// The key is deleted (its sequencer).
    Delete(String),
}

#[derive(Debug, Clone)]
struct Object {
    source: usize,
    key: String,
    /// Uploads and deletes, in order.
    ops: Vec<Op>,
    /// Every op after the first comes in the second phase.
    staged: bool,
    /// A delivery of the first version's event came in the first phase (so it was committed
    /// before the second phase's uploads).
    first_seen_early: bool,
    /// The final delete's event was never delivered ([`ChaosConfig::lost_share`]).
    delete_lost: bool,
}

impl Object {
    fn versions(&self) -> impl Iterator<Item = &Version> {
        self.ops.iter().filter_map(|op| match op {
            Op::Put(v) => Some(v),
            Op::Delete(_) => None,
        })
    }

    /// The current version: none when the last op is a delete.
    fn live(&self) -> Option<&Version> {
        match self.ops.last() {
            Some(Op::Put(v)) => Some(v),
            _ => None,
        }
    }

    /// Deleted at the end, after more than one version.
    fn deleted_after_overwrite(&self) -> bool {
        self.live().is_none() && self.versions().count() > 1
    }

    /// Deleted, then created again.
    fn recreated(&self) -> bool {
        self.ops[..self.ops.len() - 1]
            .iter()
            .any(|op| matches!(op, Op::Delete(_)))
    }

    /// The phase whose uploads bring op `j`.
    fn phase_of(&self, j: usize) -> usize {
        if self.staged && j > 0 { 2 } else { 1 }
    }

    /// The version whose output the lake must hold at the end: the current one; for a
    /// deleted key of a `keep` source, the version committed before the deletes, which is the
    /// first version of a staged key whose event came in the first phase (every other
    /// version of a deleted key was gone before its event, so none was ever written).
    fn expected_output(&self, keep: bool) -> Option<&Version> {
        match self.live() {
            Some(v) => Some(v),
            None if keep && self.staged && self.first_seen_early => self.versions().next(),
            None => None,
        }
    }
}

fn generate(cfg: &ChaosConfig, rng: &mut ChaCha8Rng) -> Vec<Object> {
    let mut next_id: i64 = 1;
    let mut seq: u64 = 0x0100_0000_0000_0000;
    let mut sequencer = |rng: &mut ChaCha8Rng| {
        seq += 16 * rng.random_range(1..=4u64);
        let s = format!("{seq:018X}");
        // S3 sequencers differ in length; they compare right-padded with zeros, so dropping
        // trailing zeros keeps the order.
        if rng.random_bool(0.5) {
            s.trim_end_matches('0').to_string()
        } else {
            s
        }
    };
    let awkward = ["my file ", "a+b ", "été-", "100% off ", "x=1&y=2 "];
    let mut objects = Vec::with_capacity(cfg.objects);
    for i in 0..cfg.objects {
        let r: f64 = rng.random();
        let source = if r < 0.45 {
            0
        } else if r < 0.85 {
            1
        } else {
            2
        };
        let (_, prefix, jsonl, compressed) = SOURCES[source];
        let ext = if rng.random_bool(0.1) {
            compressed
        } else if jsonl {
            ".jsonl"
        } else {
            ".csv"
        };
        let name = if rng.random_bool(0.03) {
            format!("{}{i:05}", awkward[rng.random_range(0..awkward.len())])
        } else {
            format!("part-{i:05}")
        };
        let key = format!(
            "{prefix}2026/11/{:02}/{:02}/{name}{ext}",
            rng.random_range(1..=28),
            rng.random_range(0..24)
        );
        let mut version = |rng: &mut ChaCha8Rng, sequencer: String| {
            let rows = rng.random_range(cfg.rows.0..=cfg.rows.1);
            let first = next_id;
            next_id += rows as i64;
            let (mut text, totals) = if jsonl {
                orders_jsonl(first, rows)
            } else {
                orders_csv(first, rows)
            };
            let mut bad = 0;
            if REJECTING[source] && rng.random_bool(BAD_ROW_SHARE) {
                let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
                bad = rng.random_range(1..=3u64);
                for k in 0..bad {
                    let line = match (jsonl, k % 2) {
                        (true, 0) => r#"{"order_id":"x","quantity":1}"#,
                        (true, _) => r#"{"order_id":7,"quantity":"#,
                        (false, 0) => "x,bad,1,1.00,2024-03-01T00:00:00Z",
                        (false, _) => "1,short",
                    };
                    // After a CSV header.
                    let at = rng.random_range(usize::from(!jsonl)..=lines.len());
                    lines.insert(at, line.to_owned());
                }
                text = lines.join("\n") + "\n";
            }
            let body = if ext.ends_with(".gz") {
                let mut gz =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                gz.write_all(text.as_bytes()).expect("gzip");
                Bytes::from(gz.finish().expect("gzip"))
            } else if ext.ends_with(".zst") {
                Bytes::from(zstd::encode_all(text.as_bytes(), 3).expect("zstd"))
            } else {
                Bytes::from(text)
            };
            Op::Put(Version {
                ids: first..next_id,
                totals,
                bad,
                body,
                etag: String::new(),
                sequencer,
            })
        };
        let n_versions = if rng.random_bool(cfg.overwrite_share) {
            1 + rng.random_range(1..=3)
        } else {
            1
        };
        let mut ops = Vec::new();
        for _ in 0..n_versions {
            let seq = sequencer(rng);
            ops.push(version(rng, seq));
        }
        if rng.random_bool(cfg.recreate_share) {
            ops.push(Op::Delete(sequencer(rng)));
            let seq = sequencer(rng);
            ops.push(version(rng, seq));
        }
        // Some deletes come after overwrites: 30% of the overwritten keys are deleted, and
        // enough of the others to make `delete_share` overall.
        let p_delete = if n_versions > 1 {
            0.3
        } else {
            ((cfg.delete_share - cfg.overwrite_share * 0.3) / (1.0 - cfg.overwrite_share))
                .clamp(0.0, 1.0)
        };
        if rng.random_bool(p_delete) {
            ops.push(Op::Delete(sequencer(rng)));
        }
        let staged = rng.random_bool(cfg.staged_share);
        objects.push(Object {
            source,
            key,
            ops,
            staged,
            first_seen_early: false,
            delete_lost: false,
        });
    }
    objects
}

/// One S3 notification record for an upload to `bucket`, as AWS sends it (key form-encoded).
pub fn created_record(bucket: &str, key: &str, etag: &str, size: u64, sequencer: &str) -> Value {
    json!({
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
        "eventTime": "2026-11-29T12:00:00.000Z", "eventName": "ObjectCreated:Put",
        "userIdentity": {"principalId": "AWS:AIDAEXAMPLE"},
        "requestParameters": {"sourceIPAddress": "127.0.0.1"},
        "responseElements": {"x-amz-request-id": "C3D13FE58DE4C810", "x-amz-id-2": "FMyUVURIY8"},
        "s3": {
            "s3SchemaVersion": "1.0", "configurationId": "tidemark",
            "bucket": {"name": bucket, "ownerIdentity": {"principalId": "A3NL1KOZZKExample"},
                       "arn": format!("arn:aws:s3:::{bucket}")},
            "object": {"key": form_encode(key), "size": size, "eTag": etag, "sequencer": sequencer}
        }
    })
}

/// One S3 notification record for a delete in `bucket`.
pub fn removed_record(bucket: &str, key: &str, sequencer: &str) -> Value {
    json!({
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
        "eventTime": "2026-11-29T12:00:00.000Z", "eventName": "ObjectRemoved:Delete",
        "userIdentity": {"principalId": "AWS:AIDAEXAMPLE"},
        "requestParameters": {"sourceIPAddress": "127.0.0.1"},
        "responseElements": {"x-amz-request-id": "C3D13FE58DE4C811", "x-amz-id-2": "FMyUVURIY9"},
        "s3": {
            "s3SchemaVersion": "1.0", "configurationId": "tidemark",
            "bucket": {"name": bucket, "ownerIdentity": {"principalId": "A3NL1KOZZKExample"},
                       "arn": format!("arn:aws:s3:::{bucket}")},
            "object": {"key": form_encode(key), "sequencer": sequencer}
        }
    })
}

/// Apply the ops of phase `phase` of every object to the landing bucket, in order per key
/// (keys in parallel); fills in the real ETags of the uploads.
async fn upload_phase(b: &Backends, objects: &mut [Object], phase: usize) {
    let store = b.store.clone();
    let landing = b.landing.clone();
    type Job = (usize, String, WriteCondition, Vec<(usize, Option<Bytes>)>);
    let inputs: Vec<Job> = objects
        .iter()
        .enumerate()
        .filter_map(|(i, o)| {
            let todo: Vec<(usize, Option<Bytes>)> = (0..o.ops.len())
                .filter(|j| o.phase_of(*j) == phase)
                .map(|j| match &o.ops[j] {
                    Op::Put(v) => (j, Some(v.body.clone())),
                    Op::Delete(_) => (j, None),
                })
                .collect();
            let first = todo.first()?.0;
            // The state the key is in before the phase.
            let condition = match first.checked_sub(1).map(|j| &o.ops[j]) {
                Some(Op::Put(v)) => WriteCondition::Matches(v.etag.clone()),
                _ => WriteCondition::Absent,
            };
            Some((i, o.key.clone(), condition, todo))
        })
        .collect();
    let jobs = inputs.into_iter().map(|(i, key, mut condition, todo)| {
        let store = store.clone();
        let landing = landing.clone();
        async move {
            let mut etags = Vec::new();
            for (j, body) in todo {
                match body {
                    Some(body) => {
                        let out = store
                            .put(&landing, &key, body, &BTreeMap::new(), &condition)
                            .await
                            .unwrap_or_else(|e| panic!("upload {key}: {e}"));
                        let PutOutcome::Written { etag } = out else {
                            panic!("upload {key}: {out:?}")
                        };
                        condition = WriteCondition::Matches(etag.clone());
                        etags.push((j, etag));
                    }
                    None => {
                        store
                            .delete(&landing, &key, None)
                            .await
                            .unwrap_or_else(|e| panic!("delete {key}: {e}"));
                        condition = WriteCondition::Absent;
                    }
                }
            }
            (i, etags)
        }
    });
    let mut done = futures::stream::iter(jobs).buffer_unordered(8);
    while let Some((i, etags)) = done.next().await {
        for (j, etag) in etags {
            if let Op::Put(v) = &mut objects[i].ops[j] {
                v.etag = etag;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The queue

#[derive(Debug, Clone)]
struct Message {
    id: String,
    body: Value,
    receives: u32,
}

struct QueueState {
    visible: Vec<Message>,
    waves: VecDeque<Vec<Message>>,
    /// Failed messages waiting for their visibility timeout.
    delayed: Vec<Message>,
    busy: usize,
    rounds: u32,
    finished: bool,
    rng: ChaCha8Rng,
}

struct Queue {
    state: Mutex<QueueState>,
    notify: tokio::sync::Notify,
    clock: tidemark::ports::TestClock,
    max_rounds: u32,
    batch_size: usize,
}

impl Queue {
    /// The next batch, or `None` when the run is over. When nothing is visible and no worker
    /// is busy, moves the clock past the leases and makes the redeliveries (and the next wave)
    /// visible.
    async fn take(&self) -> Option<Vec<Message>> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut q = self.state.lock().unwrap();
                if q.finished {
                    return None;
                }
                if !q.visible.is_empty() {
                    let n = q.rng.random_range(1..=self.batch_size).min(q.visible.len());
                    let at = q.visible.len() - n;
                    let mut batch = q.visible.split_off(at);
                    for m in &mut batch {
                        m.receives += 1;
                    }
                    q.busy += 1;
                    return Some(batch);
                }
                if q.busy == 0 {
                    if q.delayed.is_empty() && q.waves.is_empty() {
                        q.finished = true;
                        self.notify.notify_waiters();
                        return None;
                    }
                    if q.rounds >= self.max_rounds {
                        q.finished = true;
                        self.notify.notify_waiters();
                        return None;
                    }
                    // Every lease of the round has expired before SQS shows the messages again.
                    self.clock.advance(LEASE_MARGIN_MS + 1);
                    q.rounds += 1;
                    let mut next = std::mem::take(&mut q.delayed);
                    if let Some(wave) = q.waves.pop_front() {
                        next.extend(wave);
                    }
                    next.shuffle(&mut q.rng);
                    q.visible = next;
                    continue;
                }
            }
            notified.await;
        }
    }

    fn done(&self, failed: Vec<Message>) {
        let mut q = self.state.lock().unwrap();
        q.delayed.extend(failed);
        q.busy -= 1;
        self.notify.notify_waiters();
    }
}

/// Held by a worker while it handles a batch: if the worker panics, the run stops (instead
/// of the other workers waiting for it forever) and the panic surfaces when it is joined.
struct Busy<'a>(&'a Queue);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut q = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
            q.finished = true;
            self.0.notify.notify_waiters();
        }
    }
}

#[derive(Debug, Default, Clone)]
struct WorkerTally {
    summary: Summary,
    invocations: u64,
    crashed_invocations: u64,
    redeliveries: u64,
    max_receives: u32,
    errors: BTreeMap<String, u64>,
    samples: Vec<String>,
    rounds: u32,
    left: usize,
}

impl WorkerTally {
    fn merge(&mut self, t: WorkerTally) {
        add_summary(&mut self.summary, &t.summary);
        self.invocations += t.invocations;
        self.crashed_invocations += t.crashed_invocations;
        self.redeliveries += t.redeliveries;
        self.max_receives = self.max_receives.max(t.max_receives);
        for (k, v) in t.errors {
            *self.errors.entry(k).or_default() += v;
        }
        for s in t.samples {
            if self.samples.len() < 20 {
                self.samples.push(s);
            }
        }
    }
}

fn add_summary(a: &mut Summary, b: &Summary) {
    a.events += b.events;
    a.processed += b.processed;
    a.deleted += b.deleted;
    a.duplicates += b.duplicates;
    a.stale += b.stale;
    a.in_flight += b.in_flight;
    a.deferred += b.deferred;
    a.not_current += b.not_current;
    a.quarantined += b.quarantined;
    a.untracked += b.untracked;
    a.unrouted += b.unrouted;
    a.failed += b.failed;
    a.skipped += b.skipped;
    a.rows += b.rows;
    a.rejected += b.rejected;
}

fn error_class(e: &str) -> String {
    for kind in FaultKind::ALL {
        if e.contains(kind.message()) {
            return format!("injected fault ({})", kind.label());
        }
    }
    if e.contains("worker stopped at") {
        return "injected crash".into();
    }
    // Strip the object name, keep the kind of error.
    match e.rsplit_once(": ") {
        Some((_, tail)) => tail.to_string(),
        None => e.to_string(),
    }
}

async fn worker(
    w: usize,
    queue: Arc<Queue>,
    pipeline: Pipeline,
    crash: Arc<CrashInjector>,
    concurrency: usize,
) -> WorkerTally {
    let mut t = WorkerTally::default();
    while let Some(batch) = queue.take().await {
        let _busy = Busy(&queue);
        t.invocations += 1;
        crash.fired.store(false, Ordering::SeqCst);
        let payload = sqs(batch
            .iter()
            .map(|m| (m.id.as_str(), m.body.clone()))
            .collect());
        let ctx = RunContext::new(
            format!("chaos-w{w}-{}", t.invocations),
            pipeline.clock.now_ms(),
        );
        let response = ingest::handle(&pipeline, &payload, &ctx, concurrency)
            .await
            .expect("an SQS batch of S3 notifications decodes");
        add_summary(&mut t.summary, &response.summary);
        for e in &response.errors {
            let class = error_class(e);
            if !class.starts_with("injected") && t.samples.len() < 20 {
                t.samples.push(e.clone());
            }
            *t.errors.entry(class).or_default() += 1;
        }
        for m in &batch {
            t.max_receives = t.max_receives.max(m.receives);
        }
        // A crashed invocation returns nothing: the whole batch comes back. Otherwise the
        // partial batch response names the messages to deliver again.
        let failed: Vec<Message> = if crash.fired.load(Ordering::SeqCst) {
            t.crashed_invocations += 1;
            batch
        } else {
            batch
                .into_iter()
                .filter(|m| response.retry_messages.contains(&m.id))
                .collect()
        };
        t.redeliveries += failed.len() as u64;
        queue.done(failed);
    }
    t
}

// ---------------------------------------------------------------------------------------------
// Checks

/// Rows, sums and the `order_id`s of one Parquet file of orders.
fn parquet_ids(body: Bytes) -> Result<(Totals, Vec<i64>), String> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(body)
        .and_then(|b| b.build())
        .map_err(|e| e.to_string())?;
    let mut t = Totals::default();
    let mut ids = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| e.to_string())?;
        t.rows += batch.num_rows() as u64;
        let col = |name: &str| {
            batch
                .column_by_name(name)
                .ok_or_else(|| format!("no column {name}"))
        };
        let id = col("order_id")?.as_primitive::<Int64Type>();
        ids.extend(id.iter().flatten());
        t.order_ids += id.iter().flatten().map(i128::from).sum::<i128>();
        let q = col("quantity")?.as_primitive::<Int32Type>();
        t.quantity += q.iter().flatten().map(i128::from).sum::<i128>();
        let a = col("amount")?.as_primitive::<Decimal128Type>();
        t.amount_cents += a.iter().flatten().sum::<i128>();
    }
    Ok((t, ids))
}

fn parse_cents(s: &str) -> Option<i128> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    let mut frac = frac.to_string();
    if frac.len() > 2 {
        return None;
    }
    while frac.len() < 2 {
        frac.push('0');
    }
    let v = whole.parse::<i128>().ok()? * 100 + frac.parse::<i128>().ok()?;
    Some(if neg { -v } else { v })
}

/// The independent check of one source: the generated data against the lake and the ledger.
#[derive(Debug, Clone, Default)]
pub struct SourceCheck {
    /// The source.
    pub source_id: String,
    /// Keys generated.
    pub keys: usize,
    /// Current source objects (keys not deleted).
    pub objects: usize,
    /// Rows and sums of the current source objects, from the generated data.
    pub source: Totals,
    /// Outputs of deleted keys that the source's `keep` policy keeps.
    pub kept_objects: usize,
    /// Their rows and sums.
    pub kept: Totals,
    /// Output objects in the lake under the source's output prefix.
    pub lake_objects: usize,
    /// Files the ledger's commits of the current (and kept) objects name under the output
    /// prefix: one per object, or each file of a partitioned object's set.
    pub expected_files: usize,
    /// Rows and sums read back from the Parquet outputs.
    pub lake: Totals,
    /// Records done / deleted / other in the ledger, for the keys generated.
    pub ledger_done: usize,
    /// Records deleted (tombstones).
    pub ledger_deleted: usize,
    /// Quarantined records.
    pub ledger_quarantined: usize,
    /// Rows and sums the ledger records for the current objects.
    pub ledger: Totals,
    /// Current objects without their output, or whose output holds other rows.
    pub lost_objects: usize,
    /// Outputs that belong to no current object (deleted keys, strays).
    pub orphan_outputs: usize,
    /// Rows of current objects not in the lake.
    pub lost_rows: u64,
    /// Rows in the lake more than once, or rows of a replaced or deleted version.
    pub duplicated_rows: u64,
    /// Ledger records that do not say "done for the current version with its rows and
    /// sums" (live keys) or "deleted" (deleted keys).
    pub ledger_wrong: usize,
    /// Bad rows of the current objects (`on_bad_row: reject`), from the generated data.
    pub source_rejected: u64,
    /// Rejected rows the ledger records for the current objects.
    pub ledger_rejected: u64,
    /// Rejected rows in the rejects files of the lake.
    pub lake_rejected: u64,
    /// Current objects with bad rows whose rejects file is missing or holds another count.
    pub lost_rejects: usize,
    /// Rejects files that belong to no current object with bad rows.
    pub orphan_rejects: usize,
    /// A table source's files under its output prefix that its ledger records do not name:
    /// outputs of replaced versions and of crashed attempts (named per claim, kept until the
    /// table's VACUUM). Not in `lake_objects` or `lake`.
    pub loose_outputs: usize,
    /// Their rows.
    pub loose_rows: u64,
    /// A table source's table, read back (table mode, final check).
    pub table: Option<TableCheck>,
}

/// A table read back by the Python `deltalake` package (its latest version), and its log
/// read back through the object store.
#[derive(Debug, Clone, Default)]
pub struct TableCheck {
    /// The version read.
    pub version: i64,
    /// Its active files.
    pub files: usize,
    /// Its rows and sums.
    pub totals: Totals,
    /// Rows of current objects not in the table.
    pub lost_rows: u64,
    /// Rows in the table more than once, or of a replaced, deleted or unknown version.
    pub duplicated_rows: u64,
    /// Commits after the table's creation (versions 1..).
    pub commits: usize,
    /// Files added and removed by them.
    pub adds: u64,
    /// Files removed by them.
    pub removes: u64,
    /// Most files one commit added.
    pub max_adds: u64,
    /// Data files added by more than one commit (each file of the table is added once).
    pub readded: usize,
}

/// The generated data against what the lake and the ledger hold (and, with `read_tables`,
/// the tables of table sources). `details` gets one line per problem (capped).
async fn check(
    b: &Backends,
    config: &Config,
    objects: &[Object],
    details: &mut Vec<String>,
    read_tables: bool,
) -> Vec<SourceCheck> {
    let mut out = Vec::new();
    let note = |details: &mut Vec<String>, s: String| {
        if details.len() < 40 {
            details.push(s);
        }
    };
    for (si, (id, _, _, _)) in SOURCES.iter().enumerate() {
        let source = config.source(id).expect("source in config");
        let keep = source.doc.on_delete == tidemark::config::OnDelete::Keep;
        let table = source.table().is_some();
        // A partitioned source's version is a set of files the ledger names, each with a part
        // of the version's rows: checked per object, over its set.
        let partitioned = source.partition_columns().is_some();
        let mut c = SourceCheck {
            source_id: id.to_string(),
            ..Default::default()
        };
        // The ledger, one consistent read per key: checked below, and for a table source it
        // names the outputs (one file per claim).
        let reads = objects.iter().filter(|o| o.source == si).map(|o| {
            let ledger = b.ledger.clone();
            async move { (o, ledger.get(id, &o.key).await) }
        });
        let records: Vec<(&Object, Option<Record>)> = futures::stream::iter(reads)
            .buffer_unordered(16)
            .map(|(o, r)| (o, r.unwrap_or_else(|e| panic!("ledger get {}: {e}", o.key))))
            .collect()
            .await;
        let by_key: HashMap<&str, &Record> = records
            .iter()
            .filter_map(|(o, r)| r.as_ref().map(|r| (o.key.as_str(), r)))
            .collect();
        // What the lake must hold: output key → the current version.
        let mut expected: HashMap<String, (&Object, &Version)> = HashMap::new();
        // Rejects file → the current version with bad rows.
        let mut expected_rejects: HashMap<String, (&Object, &Version)> = HashMap::new();
        // Every row id ever generated for the source → is it current?
        let mut all_ids: HashMap<i64, bool> = HashMap::new();
        for o in objects.iter().filter(|o| o.source == si) {
            c.keys += 1;
            let wanted = o.expected_output(keep);
            for v in o.versions() {
                let current = wanted.is_some_and(|l| l.sequencer == v.sequencer);
                for i in v.ids.clone() {
                    all_ids.insert(i, current);
                }
            }
            if let Some(v) = o.live() {
                c.objects += 1;
                c.source.add(&v.totals);
                c.source_rejected += v.bad;
                if v.bad > 0 {
                    expected_rejects.insert(source.rejects_key(&o.key), (o, v));
                }
            }
            if let Some(v) = wanted {
                if o.live().is_none() {
                    c.kept_objects += 1;
                    c.kept.add(&v.totals);
                }
                if !table && !partitioned {
                    expected.insert(source.output_key(&o.key), (o, v));
                    continue;
                }
                let outputs: Vec<&str> = by_key
                    .get(o.key.as_str())
                    .and_then(|r| r.committed.as_ref())
                    .map(|com| {
                        com.outputs
                            .iter()
                            .filter(|out| out.bucket == b.lake)
                            .map(|out| out.key.as_str())
                            .collect()
                    })
                    .unwrap_or_default();
                if outputs.is_empty() {
                    c.lost_objects += 1;
                    note(
                        details,
                        format!(
                            "{id}: {} (etag {}) has no committed output in the ledger",
                            o.key, v.etag
                        ),
                    );
                }
                for out in outputs {
                    expected.insert(out.to_string(), (o, v));
                }
            }
        }
        c.expected_files = expected.len();

        // The lake, read back.
        let prefix = source.doc.output.prefix.clone();
        let mut seen: HashMap<i64, u32> = HashMap::new();
        let mut found_outputs = BTreeSet::new();
        // A partitioned object's files, read: its rows' ids and totals.
        let mut sets: HashMap<&str, (Vec<i64>, Totals)> = HashMap::new();
        let mut keys = list_all(b, &b.lake, &prefix).await;
        // A table's log is not an output.
        let log_prefix = format!("{prefix}_delta_log/");
        keys.retain(|k| !k.starts_with(&log_prefix));
        // The rejects files: one JSON line per rejected row of their object's version.
        let rejects_prefix = format!("{prefix}_rejects/");
        let (rejects, keys): (Vec<String>, Vec<String>) = keys
            .into_iter()
            .partition(|k| k.starts_with(&rejects_prefix));
        let mut found_rejects = BTreeSet::new();
        for key in rejects {
            let GetOutcome::Found { mut body, .. } =
                b.store.get(&b.lake, &key, None).await.expect("get rejects")
            else {
                continue;
            };
            let mut bytes = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut body, &mut bytes)
                .await
                .expect("read rejects");
            let lines = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
            c.lake_rejected += lines;
            match expected_rejects.get(&key) {
                Some((_, v)) if v.bad == lines => {
                    found_rejects.insert(key);
                }
                Some((o, v)) => {
                    c.lost_rejects += 1;
                    found_rejects.insert(key.clone());
                    note(
                        details,
                        format!(
                            "{id}: {} rejects file holds {lines} rows, not {}",
                            o.key, v.bad
                        ),
                    );
                }
                None => {
                    c.orphan_rejects += 1;
                    note(
                        details,
                        format!("{id}: orphan rejects file {key} ({lines} rows)"),
                    );
                }
            }
        }
        for (key, (o, _)) in &expected_rejects {
            if !found_rejects.contains(key) {
                c.lost_rejects += 1;
                note(
                    details,
                    format!("{id}: {} has no rejects file {key}", o.key),
                );
            }
        }
        let reads = keys.into_iter().map(|key| {
            let store = b.store.clone();
            let lake = b.lake.clone();
            async move {
                let read = match store.get(&lake, &key, None).await.expect("get output") {
                    GetOutcome::Found { mut body, .. } => {
                        let mut bytes = Vec::new();
                        tokio::io::AsyncReadExt::read_to_end(&mut body, &mut bytes)
                            .await
                            .expect("read output");
                        parquet_ids(Bytes::from(bytes)).map_err(|e| format!("unreadable: {e}"))
                    }
                    _ => Err("vanished".to_string()),
                };
                (key, read)
            }
        });
        let mut outputs: Vec<_> = futures::stream::iter(reads)
            .buffer_unordered(16)
            .collect()
            .await;
        outputs.sort_by(|a, b| a.0.cmp(&b.0));
        for (key, read) in outputs {
            // A table source's file that its record does not name, named as one of its
            // outputs: a replaced version's, or a crashed attempt's.
            if table && !expected.contains_key(&key) && table_key_hash_of(&key).is_some() {
                c.loose_outputs += 1;
                if let Ok((totals, _)) = &read {
                    c.loose_rows += totals.rows;
                }
                continue;
            }
            // A partitioned object counts once, for its set (below).
            if !partitioned {
                c.lake_objects += 1;
            }
            let (totals, ids) = match read {
                Ok(x) => x,
                Err(e) => {
                    note(details, format!("{id}: output {key} {e}"));
                    continue;
                }
            };
            c.lake.add(&totals);
            for i in &ids {
                *seen.entry(*i).or_default() += 1;
            }
            match expected.get(&key) {
                Some((o, _)) if partitioned => {
                    found_outputs.insert(key.clone());
                    let (got, sum) = sets.entry(o.key.as_str()).or_default();
                    got.extend(ids.iter().copied());
                    sum.add(&totals);
                }
                Some((o, v)) => {
                    found_outputs.insert(key.clone());
                    let want: Vec<i64> = v.ids.clone().collect();
                    let mut got = ids.clone();
                    got.sort_unstable();
                    if got != want || totals != v.totals {
                        c.lost_objects += 1;
                        note(
                            details,
                            format!(
                                "{id}: {} holds rows {:?} of another version, not the current {:?} (etag {})",
                                o.key,
                                got.first().zip(got.last()),
                                v.ids,
                                v.etag
                            ),
                        );
                    }
                }
                None => {
                    c.orphan_outputs += 1;
                    note(
                        details,
                        format!("{id}: orphan output {key} ({} rows)", totals.rows),
                    );
                }
            }
        }
        // Each partitioned object's set holds exactly its current version's rows.
        let mut checked_sets = BTreeSet::new();
        for (o, v) in expected.values() {
            if !partitioned || !checked_sets.insert(o.key.as_str()) {
                continue;
            }
            let want: Vec<i64> = v.ids.clone().collect();
            let (mut got, totals) = sets.remove(o.key.as_str()).unwrap_or_default();
            if !got.is_empty() {
                c.lake_objects += 1;
            }
            got.sort_unstable();
            if got != want || totals != v.totals {
                c.lost_objects += 1;
                note(
                    details,
                    format!(
                        "{id}: the set of {} holds rows {:?}, not the current {:?} (etag {})",
                        o.key,
                        got.first().zip(got.last()),
                        v.ids,
                        v.etag
                    ),
                );
            }
        }
        for (out_key, (o, v)) in &expected {
            if !found_outputs.contains(out_key) {
                c.lost_objects += 1;
                note(
                    details,
                    format!("{id}: {} (etag {}) has no output {out_key}", o.key, v.etag),
                );
            }
        }
        for (i, current) in &all_ids {
            let n = u64::from(seen.get(i).copied().unwrap_or(0));
            if *current {
                if n == 0 {
                    c.lost_rows += 1;
                }
                c.duplicated_rows += n.saturating_sub(1);
            } else {
                c.duplicated_rows += n;
            }
        }
        c.duplicated_rows += seen.keys().filter(|i| !all_ids.contains_key(i)).count() as u64;

        // The ledger.
        for (o, record) in &records {
            let Some(r) = record else {
                // A deleted key whose delete event was lost may never have been seen at all
                // (no event of it delivered): nothing to record, nothing in the lake.
                if !(o.live().is_none() && o.delete_lost) {
                    c.ledger_wrong += 1;
                    note(details, format!("{id}: {} has no ledger record", o.key));
                }
                continue;
            };
            match r.status {
                Status::Done => c.ledger_done += 1,
                Status::Deleted => c.ledger_deleted += 1,
                Status::Quarantined => c.ledger_quarantined += 1,
                _ => {}
            }
            let ok = match (o.live(), &r.committed) {
                (Some(v), Some(com)) if r.status == Status::Done => match &com.target {
                    Target::Version(cv) if cv.etag.as_deref() == Some(v.etag.as_str()) => {
                        // The ledger records rows and the configured sums (quantity,
                        // amount), not a sum of order_id.
                        let t = Totals {
                            rows: com.rows,
                            order_ids: 0,
                            quantity: com
                                .sums
                                .get("quantity")
                                .and_then(|s| s.parse().ok())
                                .unwrap_or(-1),
                            amount_cents: com
                                .sums
                                .get("amount")
                                .and_then(|s| parse_cents(s))
                                .unwrap_or(-1),
                        };
                        c.ledger.add(&t);
                        c.ledger_rejected += com.rejected;
                        (t.rows, t.quantity, t.amount_cents)
                            == (v.totals.rows, v.totals.quantity, v.totals.amount_cents)
                            && com.rejected == v.bad
                            && com.rejects.is_some() == (v.bad > 0)
                    }
                    _ => false,
                },
                (None, Some(com)) => {
                    r.status == Status::Deleted && matches!(com.target, Target::Delete(_))
                }
                // Its delete event lost, a deleted key may stay as its older versions' events
                // left it: released (their GETs found nothing), nothing committed.
                (None, None) => o.delete_lost && r.status == Status::Released,
                _ => false,
            };
            if !ok {
                c.ledger_wrong += 1;
                note(
                    details,
                    format!(
                        "{id}: {} ledger {} (committed {:?}, claim {:?}, pending {:?}, attempts {}, error {:?}, note {:?}); expected {}",
                        o.key,
                        r.status.as_str(),
                        r.committed.as_ref().map(|c| c.target.label()),
                        r.claim.as_ref().map(|c| c.target.label()),
                        r.pending.as_ref().map(Target::label),
                        r.attempts,
                        r.last_error,
                        r.note,
                        match o.live() {
                            Some(v) => format!("done for etag {}", v.etag),
                            None => "deleted".into(),
                        }
                    ),
                );
            }
        }
        if table && read_tables {
            c.table = Some(check_table(b, source, &all_ids, details).await);
        }
        out.push(c);
    }
    out
}

/// Every key under `prefix` in `bucket`.
async fn list_all(b: &Backends, bucket: &str, prefix: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut token = None;
    loop {
        let page = b
            .store
            .list(bucket, prefix, token.as_deref())
            .await
            .expect("list");
        keys.extend(page.objects.into_iter().map(|m| m.key));
        match page.next {
            Some(t) => token = Some(t),
            None => return keys,
        }
    }
}

/// `source`'s table read back by the Python `deltalake` package (latest version) against
/// the rows ids of the generated data (`all_ids`: id → is it a row of a current object),
/// and its log read back through the object store.
async fn check_table(
    b: &Backends,
    source: &tidemark::config::Source,
    all_ids: &HashMap<i64, bool>,
    details: &mut Vec<String>,
) -> TableCheck {
    let id = source.id();
    let mut note = |s: String| {
        if details.len() < 40 {
            details.push(s);
        }
    };
    let uri = crate::table_reader::table_uri(b, source);
    let read = tokio::task::spawn_blocking(move || crate::table_reader::read_table(&uri, None))
        .await
        .expect("the Delta reader");
    assert_eq!(
        read["columns"][0], "order_id",
        "{id}: the table's first column: {}",
        read["columns"]
    );
    let ids: Vec<i64> = read["first_column"]
        .as_array()
        .expect("first_column")
        .iter()
        .map(|v| v.as_i64().expect("an order_id"))
        .collect();
    let sum = |name: &str| read["sums"][name].as_str().unwrap_or("0").to_string();
    let mut t = TableCheck {
        version: read["version"].as_i64().unwrap_or(-1),
        files: read["files"].as_u64().unwrap_or(0) as usize,
        totals: Totals {
            rows: read["rows"].as_u64().unwrap_or(0),
            order_ids: sum("order_id").parse().expect("sum of order_id"),
            quantity: sum("quantity").parse().expect("sum of quantity"),
            amount_cents: parse_cents(&sum("amount")).expect("sum of amount"),
        },
        ..Default::default()
    };
    let mut seen: HashMap<i64, u64> = HashMap::new();
    for i in &ids {
        *seen.entry(*i).or_default() += 1;
    }
    let mut samples = (Vec::new(), Vec::new());
    for (i, current) in all_ids {
        let n = seen.get(i).copied().unwrap_or(0);
        if *current {
            if n == 0 {
                t.lost_rows += 1;
                samples.0.push(*i);
            }
            if n > 1 {
                samples.1.push(*i);
            }
            t.duplicated_rows += n.saturating_sub(1);
        } else if n > 0 {
            t.duplicated_rows += n;
            samples.1.push(*i);
        }
    }
    for (i, n) in &seen {
        if !all_ids.contains_key(i) {
            t.duplicated_rows += n;
            samples.1.push(*i);
        }
    }
    for (what, mut rows) in [("missing", samples.0), ("extra", samples.1)] {
        if !rows.is_empty() {
            rows.sort_unstable();
            rows.truncate(12);
            note(format!(
                "{id}: table version {}: rows {what}, first order_ids {rows:?}",
                t.version
            ));
        }
    }

    // The log: every commit's adds and removes; no data file added twice.
    let log = format!("{}_delta_log/", source.doc.output.prefix);
    let mut added: HashMap<String, u32> = HashMap::new();
    for key in list_all(b, &source.doc.output.bucket, &log).await {
        let Some(version) = key
            .strip_prefix(&log)
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let GetOutcome::Found { mut body, .. } = b
            .store
            .get(&source.doc.output.bucket, &key, None)
            .await
            .expect("get a log entry")
        else {
            continue;
        };
        let mut bytes = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut body, &mut bytes)
            .await
            .expect("read a log entry");
        let (mut adds, mut removes) = (0u64, 0u64);
        for line in String::from_utf8_lossy(&bytes).lines() {
            let action: Value = serde_json::from_str(line).expect("a log action");
            if let Some(path) = action["add"]["path"].as_str() {
                adds += 1;
                *added.entry(path.to_string()).or_default() += 1;
            }
            if action.get("remove").is_some() {
                removes += 1;
            }
        }
        if version > 0 {
            t.commits += 1;
            t.adds += adds;
            t.removes += removes;
            t.max_adds = t.max_adds.max(adds);
        }
    }
    let twice: Vec<&String> = added
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(p, _)| p)
        .collect();
    t.readded = twice.len();
    if let Some(p) = twice.first() {
        note(format!(
            "{id}: {} data file(s) added by more than one commit, e.g. {p}",
            twice.len()
        ));
    }
    t
}

// ---------------------------------------------------------------------------------------------
// The run

/// Everything a chaos run counted.
#[derive(Debug, Clone)]
pub struct ChaosReport {
    /// Which backend pair.
    pub backend: &'static str,
    /// The configuration (with the seed).
    pub config: ChaosConfig,
    /// Keys generated.
    pub keys: usize,
    /// Versions uploaded (first versions and overwrites).
    pub versions: usize,
    /// Keys overwritten at least once.
    pub overwritten: usize,
    /// Keys deleted.
    pub deleted: usize,
    /// Deleted keys that had been overwritten first.
    pub deleted_after_overwrite: usize,
    /// Keys deleted and created again.
    pub recreated: usize,
    /// S3 events generated (one per version, one per delete).
    pub events: usize,
    /// Events never delivered ([`ChaosConfig::lost_share`]).
    pub lost_events: usize,
    /// Per phase: events whose uploads came in it, deliveries made in it (late copies of
    /// phase-1 events are delivered in phase 2).
    pub phases: Vec<(usize, usize)>,
    /// Keys whose overwrites and delete came in phase 2.
    pub staged: usize,
    /// First deliveries (SQS messages; each event 1–3 times).
    pub deliveries: usize,
    /// Handler invocations (batches).
    pub invocations: u64,
    /// Invocations in which a crash was injected (their whole batch came back).
    pub crashed_invocations: u64,
    /// Messages delivered again.
    pub redeliveries: u64,
    /// Most receives of one message.
    pub max_receives: u32,
    /// Clock advances past the leases.
    pub rounds: u32,
    /// Messages never acknowledged (the driver gave up).
    pub messages_left: usize,
    /// The sum of the handler summaries.
    pub summary: Summary,
    /// Handler errors by class.
    pub errors: BTreeMap<String, u64>,
    /// Handler errors that were not injected (first ones).
    pub error_samples: Vec<String>,
    /// Crashes by step.
    pub crashes: Vec<(Step, u64)>,
    /// Times a worker reached a crash point.
    pub crash_points: u64,
    /// Injected faults by (layer, timing, kind).
    pub faults: BTreeMap<(&'static str, FaultTiming, FaultKind), u64>,
    /// Ledger writes made whose reply was lost, by step.
    pub ledger_after_writes: BTreeMap<&'static str, u64>,
    /// Object-store calls and ledger calls made through the faulty layers.
    pub calls: (u64, u64),
    /// Calls by operation.
    pub calls_by_op: BTreeMap<&'static str, u64>,
    /// The check after the event path alone, before reconcile.
    pub before_reconcile: Vec<SourceCheck>,
    /// Findings of the first reconcile, by kind (what the event path left behind).
    pub reconcile_findings: BTreeMap<String, u64>,
    /// Repairs of the first reconcile, by outcome.
    pub reconcile_repairs: BTreeMap<String, u64>,
    /// Count mismatches of the first reconcile.
    pub reconcile_mismatches: usize,
    /// The first reconcile's findings and mismatches, one line each (capped).
    pub reconcile_notes: Vec<String>,
    /// Findings and mismatches of the second reconcile (must be none).
    pub second_reconcile: Vec<String>,
    /// The second reconcile's three-way totals per source: (source, ledger, lake) rows.
    pub second_totals: Vec<(String, u64, u64, u64)>,
    /// The final check.
    pub sources: Vec<SourceCheck>,
    /// One line per problem found (capped).
    pub details: Vec<String>,
    /// Phase durations: generate + upload, drive, reconcile ×2, check.
    pub durations: Vec<(&'static str, Duration)>,
    /// Table mode: what the committers did.
    pub committer: Option<CommitterReport>,
}

/// The committers' lines of the report.
fn committer_rows(row: &mut impl FnMut(&str, String), cr: &CommitterReport) {
    row(
        "table mode: committers / feed",
        format!(
            "{} committers; {} records from ledger writes (+{} delivered twice), {} batches \
             taken ({} records; {} of the source without a table)",
            cr.committers,
            cr.feed_records,
            cr.feed_duplicates,
            cr.batches,
            cr.records_taken,
            cr.ignored
        ),
    );
    for (id, t) in &cr.by_source {
        row(
            &format!("  {id}: publishes"),
            format!(
                "{}: {} committed ({} files added, {} removed, at most {} in one), {} nothing \
                 to do, {} failed; {} lost races rebuilt",
                t.publishes,
                t.committed,
                t.added,
                t.removed,
                t.max_added,
                t.nothing_to_do,
                t.failed,
                t.lost_races
            ),
        );
    }
    let reached: u64 = cr
        .crashes
        .iter()
        .filter(|(s, _, _)| *s == PUBLISH_STEPS[0])
        .map(|(_, r, _)| r)
        .sum();
    row(
        "  publish crashes injected",
        format!(
            "{} ({} publish attempts reached the first step)",
            cr.crashes.iter().map(|(_, _, n)| n).sum::<u64>(),
            reached
        ),
    );
    for (step, reached, n) in &cr.crashes {
        row(
            &format!("    at {step:?}"),
            format!("{n} of {reached} reached"),
        );
    }
    row(
        "  publishes failed, records put back",
        format!(
            "{} / {} (failed in the drain: {}; left: {})",
            cr.put_back.0, cr.put_back.1, cr.failures_in_drain, cr.left
        ),
    );
    let layer = |l: &str| -> u64 {
        cr.faults
            .iter()
            .filter(|((x, _, _), _)| *x == l)
            .map(|(_, n)| n)
            .sum()
    };
    row(
        "  committer faults injected",
        format!(
            "store {}, ledger {}, of {} calls ({})",
            layer("store"),
            layer("ledger"),
            cr.calls.values().sum::<u64>(),
            cr.calls
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    row(
        "  publish errors",
        if cr.errors.is_empty() {
            "none".into()
        } else {
            cr.errors
                .iter()
                .map(|(k, v)| format!("{k} ×{v}"))
                .collect::<Vec<_>>()
                .join("; ")
        },
    );
    row(
        "  sweep after the check (publish_all)",
        cr.sweeps
            .iter()
            .map(|(id, r)| match r {
                Ok(None) => format!("{id}: nothing to commit"),
                Ok(Some(v)) => format!("{id}: COMMITTED version {v}"),
                Err(e) => format!("{id}: failed: {e}"),
            })
            .collect::<Vec<_>>()
            .join("; "),
    );
}

fn sum_checks(checks: &[SourceCheck], f: impl Fn(&SourceCheck) -> u64) -> u64 {
    checks.iter().map(f).sum()
}

impl ChaosReport {
    /// Current objects lost (no output, or the output of another version), over all sources.
    pub fn lost(&self) -> u64 {
        sum_checks(&self.sources, |c| {
            c.lost_objects as u64
                + c.lost_rows
                + c.lost_rejects as u64
                + c.table.as_ref().map_or(0, |t| t.lost_rows)
        })
    }

    /// Duplicated rows and orphan outputs, over all sources (with the tables' duplicated rows
    /// and files added twice).
    pub fn duplicated(&self) -> u64 {
        sum_checks(&self.sources, |c| {
            c.duplicated_rows
                + c.orphan_outputs as u64
                + c.orphan_rejects as u64
                + c.table
                    .as_ref()
                    .map_or(0, |t| t.duplicated_rows + t.readded as u64)
        })
    }

    /// Objects quarantined.
    pub fn quarantined(&self) -> u64 {
        sum_checks(&self.sources, |c| c.ledger_quarantined as u64)
    }

    /// The printed table.
    pub fn table(&self) -> String {
        let c = &self.config;
        let s = &self.summary;
        let mut t = String::new();
        let _ = writeln!(
            t,
            "== tidemark chaos run on the {} backends — seed {} (0x{:x}; TIDEMARK_CHAOS_SEED)",
            self.backend, c.seed, c.seed
        );
        let _ = writeln!(
            t,
            "   the seed fixes the data, the events, their copies and order, and the fault / crash \
             decisions' sequence; with {} concurrent workers the interleaving (which call meets \
             which decision) is not reproducible, only the distribution",
            c.workers
        );
        let _ = writeln!(
            t,
            "   {} workers, SQS batches of 1–{}, {} objects at once per invocation, faults {:.0}% \
             of calls, crashes {:.0}% per step reached, max_attempts {}, lease margin {} ms",
            c.workers,
            c.batch_size,
            c.handler_concurrency,
            c.fault_rate * 100.0,
            c.crash_rate * 100.0,
            c.max_attempts,
            LEASE_MARGIN_MS
        );
        let mut row = |k: &str, v: String| {
            let _ = writeln!(t, "  {k:<44} {v}");
        };
        row(
            "objects (keys) generated",
            format!(
                "{} (orders {}, orders_json {}, archive {})",
                self.keys,
                self.sources.first().map_or(0, |x| x.keys),
                self.sources.get(1).map_or(0, |x| x.keys),
                self.sources.get(2).map_or(0, |x| x.keys)
            ),
        );
        row(
            "  overwritten (1–3 times) / versions uploaded",
            format!("{} / {}", self.overwritten, self.versions),
        );
        row(
            "  deleted (of which after overwrites)",
            format!("{} ({})", self.deleted, self.deleted_after_overwrite),
        );
        row("  deleted, then created again", self.recreated.to_string());
        row(
            "  staged (overwrites / delete in phase 2)",
            self.staged.to_string(),
        );
        row("events generated", self.events.to_string());
        if self.lost_events > 0 {
            row(
                "  lost: never delivered (reconcile's job)",
                self.lost_events.to_string(),
            );
        }
        for (i, (e, d)) in self.phases.iter().enumerate() {
            row(
                &format!("  phase {}: events uploaded / deliveries", i + 1),
                format!("{e} / {d}"),
            );
        }
        row(
            "deliveries (each event 1–3 times)",
            format!(
                "{} first + {} redelivered = {} received",
                self.deliveries,
                self.redeliveries,
                self.deliveries as u64 + self.redeliveries
            ),
        );
        row(
            "invocations (batches) / rounds of the clock",
            format!("{} / {}", self.invocations, self.rounds),
        );
        row("processed (versions committed)", s.processed.to_string());
        row("deleted (tombstones committed)", s.deleted.to_string());
        row("duplicates suppressed", s.duplicates.to_string());
        row("stale suppressed", s.stale.to_string());
        row(
            "in flight / deferred (superseded-by)",
            format!("{} / {}", s.in_flight, s.deferred),
        );
        row(
            "not current (older version, released)",
            s.not_current.to_string(),
        );
        row(
            "failed object attempts (message retried)",
            s.failed.to_string(),
        );
        let crashes: u64 = self.crashes.iter().map(|(_, n)| n).sum();
        row(
            "crashes injected",
            format!(
                "{crashes} of {} crash points reached ({} invocations died, whole batch redelivered)",
                self.crash_points, self.crashed_invocations
            ),
        );
        for (step, n) in &self.crashes {
            row(&format!("  {}", step.as_str()), n.to_string());
        }
        row(
            "  inside commit (commit written, reply lost)",
            self.ledger_after_writes
                .get("commit")
                .copied()
                .unwrap_or(0)
                .to_string(),
        );
        let total_faults: u64 = self.faults.values().sum();
        row(
            "transient faults injected",
            format!(
                "{total_faults} (store {} of {} calls, ledger {} of {} calls)",
                self.faults
                    .iter()
                    .filter(|((l, _, _), _)| *l == "store")
                    .map(|(_, n)| n)
                    .sum::<u64>(),
                self.calls.0,
                self.faults
                    .iter()
                    .filter(|((l, _, _), _)| *l == "ledger")
                    .map(|(_, n)| n)
                    .sum::<u64>(),
                self.calls.1
            ),
        );
        for kind in FaultKind::ALL {
            let n: u64 = self
                .faults
                .iter()
                .filter(|((_, _, k), _)| *k == kind)
                .map(|(_, n)| n)
                .sum();
            row(&format!("  {}", kind.message()), n.to_string());
        }
        for layer in ["store", "ledger"] {
            for timing in [
                FaultTiming::Before,
                FaultTiming::AfterWrite,
                FaultTiming::MidBody,
            ] {
                let n: u64 = self
                    .faults
                    .iter()
                    .filter(|((l, w, _), _)| *l == layer && *w == timing)
                    .map(|(_, n)| n)
                    .sum();
                if n > 0 {
                    row(&format!("  {layer}, {}", timing.label()), n.to_string());
                }
            }
        }
        if !self.ledger_after_writes.is_empty() {
            row(
                "  ledger writes made, reply lost, by step",
                self.ledger_after_writes
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        }
        row(
            "  calls through the faulty layers",
            self.calls_by_op
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        row(
            "retries (messages redelivered)",
            format!(
                "{} (most receives of one message: {})",
                self.redeliveries, self.max_receives
            ),
        );
        let other: Vec<String> = self
            .errors
            .iter()
            .filter(|(k, _)| !k.starts_with("injected"))
            .map(|(k, v)| format!("{k} ×{v}"))
            .collect();
        row(
            "errors not injected (consequences)",
            if other.is_empty() {
                "none".into()
            } else {
                other.join("; ")
            },
        );
        row(
            "quarantined (ledger records / handler outcomes)",
            format!("{} / {}", self.quarantined(), s.quarantined),
        );
        row(
            "messages never acknowledged",
            self.messages_left.to_string(),
        );
        let before_lost = sum_checks(&self.before_reconcile, |c| {
            c.lost_objects as u64 + c.lost_rows
        });
        let before_dup = sum_checks(&self.before_reconcile, |c| {
            c.duplicated_rows + c.orphan_outputs as u64
        });
        let before_ledger = sum_checks(&self.before_reconcile, |c| c.ledger_wrong as u64);
        row(
            "after the events alone: lost / dup / ledger",
            format!("{before_lost} / {before_dup} / {before_ledger} records not final"),
        );
        row(
            "reconcile #1 (repair) findings",
            if self.reconcile_findings.is_empty() {
                "none".into()
            } else {
                self.reconcile_findings
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        );
        if !self.reconcile_repairs.is_empty() {
            row(
                "  repairs",
                self.reconcile_repairs
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        }
        row("  count mismatches", self.reconcile_mismatches.to_string());
        row(
            "reconcile #2",
            if self.second_reconcile.is_empty() {
                format!(
                    "clean ({})",
                    self.second_totals
                        .iter()
                        .map(|(id, s, l, k)| format!(
                            "{id}: rows source {s} / ledger {l} / lake {k}"
                        ))
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            } else {
                format!("{} problem(s)", self.second_reconcile.len())
            },
        );
        if let Some(cr) = &self.committer {
            committer_rows(&mut row, cr);
        }
        row(
            "durations",
            self.durations
                .iter()
                .map(|(k, d)| format!("{k} {:.1}s", d.as_secs_f64()))
                .collect::<Vec<_>>()
                .join(", "),
        );
        let _ = writeln!(t);
        let _ = writeln!(
            t,
            "  {:<12} {:<7} {:>7} {:>7} {:>14} {:>9} {:>12}",
            "SOURCE", "WHERE", "OBJECTS", "ROWS", "SUM(order_id)", "SUM(qty)", "SUM(amount)"
        );
        let money = |c: i128| format!("{}.{:02}", c / 100, c % 100);
        for sc in &self.sources {
            let mut rows = vec![("source", sc.objects, &sc.source)];
            if sc.kept_objects > 0 {
                rows.push(("kept", sc.kept_objects, &sc.kept));
            }
            rows.push(("lake", sc.lake_objects, &sc.lake));
            if let Some(tc) = &sc.table {
                rows.push(("table", tc.files, &tc.totals));
            }
            rows.push(("ledger", sc.ledger_done, &sc.ledger));
            for (name, n, tot) in rows {
                let ids = if name == "ledger" {
                    "-".to_string()
                } else {
                    tot.order_ids.to_string()
                };
                let _ = writeln!(
                    t,
                    "  {:<12} {:<7} {:>7} {:>7} {:>14} {:>9} {:>12}",
                    sc.source_id,
                    name,
                    n,
                    tot.rows,
                    ids,
                    tot.quantity,
                    money(tot.amount_cents)
                );
            }
        }
        let _ = writeln!(t);
        let _ = writeln!(
            t,
            "  {:<12} {:>12} {:>10} {:>9} {:>8} {:>12} {:>11}",
            "SOURCE",
            "LOST OBJECTS",
            "LOST ROWS",
            "DUP ROWS",
            "ORPHANS",
            "QUARANTINED",
            "LEDGER BAD"
        );
        for sc in &self.sources {
            let _ = writeln!(
                t,
                "  {:<12} {:>12} {:>10} {:>9} {:>8} {:>12} {:>11}",
                sc.source_id,
                sc.lost_objects,
                sc.lost_rows,
                sc.duplicated_rows,
                sc.orphan_outputs,
                sc.ledger_quarantined,
                sc.ledger_wrong
            );
        }
        let _ = writeln!(t);
        let _ = writeln!(
            t,
            "  {:<12} {:>20} {:>15} {:>17} {:>14} {:>15}",
            "SOURCE",
            "BAD ROWS IN SOURCE",
            "LEDGER REJECTED",
            "IN REJECTS FILES",
            "LOST REJECTS",
            "ORPHAN REJECTS"
        );
        for sc in &self.sources {
            let _ = writeln!(
                t,
                "  {:<12} {:>20} {:>15} {:>17} {:>14} {:>15}",
                sc.source_id,
                sc.source_rejected,
                sc.ledger_rejected,
                sc.lake_rejected,
                sc.lost_rejects,
                sc.orphan_rejects
            );
        }
        if self.sources.iter().any(|sc| sc.table.is_some()) {
            let _ = writeln!(t);
            let _ = writeln!(
                t,
                "  {:<12} {:>7} {:>7} {:>6} {:>6} {:>7} {:>15} {:>9} {:>8} {:>7} {:>13}",
                "TABLE",
                "VERSION",
                "COMMITS",
                "ADDS",
                "FILES",
                "REMOVES",
                "ADDS/COMMIT",
                "LOST ROWS",
                "DUP ROWS",
                "READDED",
                "LOOSE (ROWS)"
            );
            for sc in &self.sources {
                let Some(tc) = &sc.table else { continue };
                let _ = writeln!(
                    t,
                    "  {:<12} {:>7} {:>7} {:>6} {:>6} {:>7} {:>15} {:>9} {:>8} {:>7} {:>13}",
                    sc.source_id,
                    tc.version,
                    tc.commits,
                    tc.adds,
                    tc.files,
                    tc.removes,
                    format!(
                        "{:.1} avg, {} max",
                        tc.adds as f64 / tc.commits.max(1) as f64,
                        tc.max_adds
                    ),
                    tc.lost_rows,
                    tc.duplicated_rows,
                    tc.readded,
                    format!("{} ({})", sc.loose_outputs, sc.loose_rows)
                );
            }
        }
        let _ = writeln!(
            t,
            "  lost {}, duplicated {}{}",
            self.lost(),
            self.duplicated(),
            if self.lost() == 0 && self.duplicated() == 0 {
                " — every current row landed once, none twice"
            } else {
                ""
            }
        );
        for d in &self.reconcile_notes {
            let _ = writeln!(t, "  · {d}");
        }
        for d in &self.details {
            let _ = writeln!(t, "  ! {d}");
        }
        for d in &self.second_reconcile {
            let _ = writeln!(t, "  ! reconcile #2: {d}");
        }
        for e in &self.error_samples {
            let _ = writeln!(t, "  ? error: {e}");
        }
        for e in self.committer.iter().flat_map(|c| &c.error_samples) {
            let _ = writeln!(t, "  ? publish error: {e}");
        }
        t
    }

    /// The product claim, asserted: nothing lost, nothing duplicated, no orphan, the ledger
    /// right, nothing quarantined, every message acknowledged, the second reconcile clean,
    /// rows and every sum of the lake equal to the source's.
    pub fn assert_exactly_once(&self) {
        let table = self.table();
        assert_eq!(self.messages_left, 0, "messages left\n{table}");
        assert_eq!(self.lost(), 0, "lost\n{table}");
        assert_eq!(self.duplicated(), 0, "duplicated\n{table}");
        assert_eq!(self.quarantined(), 0, "quarantined\n{table}");
        for sc in &self.sources {
            let mut expected = sc.source;
            expected.add(&sc.kept);
            assert_eq!(
                sc.lake, expected,
                "{}: lake vs source (+ kept by policy)\n{table}",
                sc.source_id
            );
            assert_eq!(
                (sc.ledger.rows, sc.ledger.quantity, sc.ledger.amount_cents),
                (sc.source.rows, sc.source.quantity, sc.source.amount_cents),
                "{}: ledger vs source\n{table}",
                sc.source_id
            );
            assert_eq!(
                sc.lake_objects,
                sc.objects + sc.kept_objects,
                "{}: one output per current object\n{table}",
                sc.source_id
            );
            assert_eq!(sc.ledger_wrong, 0, "{}: ledger\n{table}", sc.source_id);
            assert_eq!(
                (sc.ledger_rejected, sc.lake_rejected),
                (sc.source_rejected, sc.source_rejected),
                "{}: rejected rows in the ledger and the rejects files vs bad rows in the source\n{table}",
                sc.source_id
            );
        }
        for (i, sc) in self.sources.iter().enumerate() {
            if has_table(self.config.table, self.config.partitioned, i) {
                assert!(
                    sc.table.is_some(),
                    "{}: table not read\n{table}",
                    sc.source_id
                );
            }
            let Some(tc) = &sc.table else { continue };
            let mut expected = sc.source;
            expected.add(&sc.kept);
            assert_eq!(
                tc.totals, expected,
                "{}: table vs source (+ kept by policy)\n{table}",
                sc.source_id
            );
            assert_eq!(
                tc.files, sc.expected_files,
                "{}: one file per current object (each file of a set) in the table\n{table}",
                sc.source_id
            );
        }
        if let Some(c) = &self.committer {
            assert_eq!(c.left, 0, "feed records never published\n{table}");
            for (id, sweep) in &c.sweeps {
                assert_eq!(
                    sweep,
                    &Ok(None),
                    "{id}: a sweep after the drain had something to commit: the feed's \
                     publishes left the table behind the ledger\n{table}"
                );
            }
        }
        assert!(
            self.second_reconcile.is_empty(),
            "the second reconcile is not clean\n{table}"
        );
        // With every event delivered at least once, reconcile is a backstop with nothing to
        // do: anything it finds is work the event path dropped silently.
        if self.lost_events == 0 {
            assert!(
                self.reconcile_findings.is_empty() && self.reconcile_mismatches == 0,
                "every event was delivered, yet the event path left work for reconcile\n{table}"
            );
        }
    }
}

/// The faulty layers and crash statistics shared by every worker of a run.
struct Layers {
    fault_stats: Arc<FaultStats>,
    store_plan: Arc<FaultPlan>,
    ledger_plan: Arc<FaultPlan>,
    crash_stats: Arc<CrashStats>,
    store: Arc<dyn ObjectStore>,
    ledger: Arc<dyn Ledger>,
    config: Arc<Config>,
}

impl Layers {
    /// The workers' faulty layers; in table mode the ledger writes also feed `feed`.
    fn new(
        b: &Backends,
        cfg: &ChaosConfig,
        config: &Arc<Config>,
        feed: Option<&Arc<committer::Feed>>,
    ) -> Self {
        let fault_stats = Arc::new(FaultStats::default());
        let store_plan = Arc::new(FaultPlan::new(
            cfg.seed,
            STREAM_STORE,
            cfg.fault_rate,
            fault_stats.clone(),
        ));
        let ledger_plan = Arc::new(FaultPlan::new(
            cfg.seed,
            STREAM_LEDGER,
            cfg.fault_rate,
            fault_stats.clone(),
        ));
        Self {
            store: Arc::new(FaultyStore::new(b.store.clone(), store_plan.clone())),
            ledger: Arc::new(FaultyLedger::new(
                fed(b.ledger.clone(), feed),
                ledger_plan.clone(),
            )),
            fault_stats,
            store_plan,
            ledger_plan,
            crash_stats: Arc::new(CrashStats::default()),
            config: config.clone(),
        }
    }
}

/// `ledger`, feeding `feed` with its writes when there is one.
fn fed(ledger: Arc<dyn Ledger>, feed: Option<&Arc<committer::Feed>>) -> Arc<dyn Ledger> {
    match feed {
        Some(feed) => Arc::new(FeedLedger::new(ledger, feed.clone())),
        None => ledger,
    }
}

/// Drive `messages` (released in waves) through `cfg.workers` workers until every message
/// is acknowledged or the rounds run out: (tally, rounds, messages left).
async fn drive(
    b: &Backends,
    cfg: &ChaosConfig,
    layers: &Layers,
    messages: Vec<Message>,
    salt: u64,
) -> (WorkerTally, u32, usize) {
    let wave_len = messages.len().div_ceil(cfg.waves.max(1)).max(1);
    let mut waves: VecDeque<Vec<Message>> =
        messages.chunks(wave_len).map(<[Message]>::to_vec).collect();
    let first = waves.pop_front().unwrap_or_default();
    let queue = Arc::new(Queue {
        state: Mutex::new(QueueState {
            visible: first,
            waves,
            delayed: Vec::new(),
            busy: 0,
            rounds: 0,
            finished: false,
            rng: ChaCha8Rng::seed_from_u64(salt),
        }),
        notify: tokio::sync::Notify::new(),
        clock: b.clock.clone(),
        max_rounds: cfg.max_rounds,
        batch_size: cfg.batch_size.max(1),
    });
    let mut handles = Vec::new();
    for w in 0..cfg.workers {
        let crash = Arc::new(CrashInjector::new(
            cfg.seed,
            cfg.crash_rate,
            layers.crash_stats.clone(),
        ));
        let mut pipeline = Pipeline::new(
            layers.store.clone(),
            layers.ledger.clone(),
            Arc::new(b.clock.clone()),
            layers.config.clone(),
        );
        pipeline.faults = crash.clone();
        pipeline.settings.lease_margin_ms = LEASE_MARGIN_MS;
        handles.push(tokio::spawn(worker(
            w,
            queue.clone(),
            pipeline,
            crash,
            cfg.handler_concurrency,
        )));
    }
    let mut tally = WorkerTally::default();
    for h in handles {
        tally.merge(h.await.expect("worker"));
    }
    let q = queue.state.lock().unwrap();
    let left = q.visible.len() + q.delayed.len() + q.waves.iter().map(Vec::len).sum::<usize>();
    (tally, q.rounds, left)
}

/// Run the chaos scenario on `b` and return what it counted (assert with
/// [`ChaosReport::assert_exactly_once`]).
pub async fn run(b: &Backends, cfg: ChaosConfig) -> ChaosReport {
    let started = Instant::now();
    let mut durations = Vec::new();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let config = chaos_config(b, cfg.max_attempts, cfg.table, cfg.partitioned);

    // 1. Data. Every event is driven only after the uploads of its phase: the keys not
    // staged get all their versions and their delete before any event; the staged ones their
    // first version in phase 1, their overwrites and delete in phase 2.
    let mut objects = generate(&cfg, &mut rng);
    durations.push(("generate", started.elapsed()));
    // Table mode: the committers run from the first event to the end of the drain.
    let committers = cfg.table.then(|| Committers::start(b, &cfg, &config));
    let feed = committers.as_ref().map(|c| c.feed.clone());
    let layers = Layers::new(b, &cfg, &config, feed.as_ref());
    let mut tally = WorkerTally::default();
    let mut events = 0;
    let mut deliveries = 0;
    let mut phases = Vec::new();
    let mut late: Vec<Message> = Vec::new();
    let mut lost_events = 0;
    for phase in [1, 2] {
        let t = Instant::now();
        upload_phase(b, &mut objects, phase).await;
        durations.push((
            if phase == 1 { "upload 1" } else { "upload 2" },
            t.elapsed(),
        ));

        // 2. The phase's events as AWS shapes them, each delivered 1–3 times; in phase 1 a
        // share of the copies is held back to phase 2. Shuffled across and within keys.
        let mut messages = std::mem::take(&mut late);
        let mut phase_events = 0;
        for o in objects.iter_mut() {
            for j in 0..o.ops.len() {
                if o.phase_of(j) != phase {
                    continue;
                }
                let record = match &o.ops[j] {
                    Op::Put(v) => created_record(
                        &b.landing,
                        &o.key,
                        &v.etag,
                        v.body.len() as u64,
                        &v.sequencer,
                    ),
                    Op::Delete(seq) => removed_record(&b.landing, &o.key, seq),
                };
                phase_events += 1;
                if cfg.lost_share > 0.0 && rng.random_bool(cfg.lost_share) {
                    lost_events += 1;
                    o.delete_lost |= j == o.ops.len() - 1 && o.live().is_none();
                    continue;
                }
                for _ in 0..rng.random_range(1..=cfg.max_copies) {
                    let m = Message {
                        id: uuid::Uuid::from_u128(rng.random()).to_string(),
                        body: direct(vec![record.clone()]),
                        receives: 0,
                    };
                    if phase == 1 && rng.random_bool(cfg.late_share) {
                        late.push(m);
                    } else {
                        if phase == 1 && j == 0 {
                            o.first_seen_early = true;
                        }
                        messages.push(m);
                    }
                }
            }
        }
        messages.shuffle(&mut rng);
        events += phase_events;
        deliveries += messages.len();
        phases.push((phase_events, messages.len()));

        // 3. The workers, until the queue is drained.
        let t = Instant::now();
        let salt = mix(cfg.seed ^ phase as u64);
        let (phase_tally, rounds, left) = drive(b, &cfg, &layers, messages, salt).await;
        tally.merge(phase_tally);
        tally.rounds += rounds;
        tally.left += left;
        durations.push((if phase == 1 { "drive 1" } else { "drive 2" }, t.elapsed()));
    }
    let Layers {
        fault_stats,
        store_plan,
        ledger_plan,
        crash_stats,
        ..
    } = layers;
    let rounds = tally.rounds;
    let messages_left = tally.left;

    // 4. What the event path alone left (informative), then reconcile. Reconcile runs on the
    // real adapters without injected faults: `reconcile_source` ends a whole pass at the first
    // store or ledger error (it reads every object and output of the window), so at 5% of
    // port calls a pass over thousands of objects could never complete; the scheduled run
    // would simply run again. The chaos is the event path's.
    let mut details = Vec::new();
    b.clock.advance(LEASE_MARGIN_MS + 1);
    let mut ignored = Vec::new();
    let t = Instant::now();
    let before_reconcile = check(b, &config, &objects, &mut ignored, false).await;
    durations.push(("check before reconcile", t.elapsed()));

    let recon = Instant::now();
    // Its re-drives write the ledger: in table mode they feed the committers too.
    let mut clean = Pipeline::new(
        b.store.clone(),
        fed(b.ledger.clone(), feed.as_ref()),
        Arc::new(b.clock.clone()),
        config.clone(),
    );
    clean.faults = Arc::new(NoFaults);
    clean.settings.lease_margin_ms = LEASE_MARGIN_MS;
    // Every object through both tiers: the source recounted, the sums read back.
    let opts = |repair| Options {
        repair,
        deep_sample: Some(1.0),
        ..Options::default()
    };
    let window = Window {
        from_ms: 0,
        to_ms: b.clock.now_ms() + 86_400_000,
    };
    let mut reconcile_findings = BTreeMap::new();
    let mut reconcile_repairs = BTreeMap::new();
    let mut reconcile_mismatches = 0;
    let mut reconcile_notes = Vec::new();
    for source in &config.sources {
        let ctx = RunContext::new("chaos-reconcile-1", b.clock.now_ms());
        let r = reconcile::reconcile_source(&clean, source, window, opts(true), &ctx)
            .await
            .unwrap_or_else(|e| panic!("reconcile {}: {e}", source.id()));
        for f in &r.findings {
            *reconcile_findings
                .entry(format!("{:?}", f.kind).to_lowercase())
                .or_insert(0u64) += 1;
            *reconcile_repairs
                .entry(f.repair.clone().unwrap_or_else(|| "none".into()))
                .or_insert(0u64) += 1;
            if reconcile_notes.len() < 40 {
                reconcile_notes.push(format!(
                    "reconcile #1 {}: {:?} {} — {} — repair {:?}",
                    source.id(),
                    f.kind,
                    f.key,
                    f.detail,
                    f.repair
                ));
            }
        }
        reconcile_mismatches += r.mismatches.len();
        for m in r.mismatches.iter().take(10) {
            reconcile_notes.push(format!("reconcile #1 {}: mismatch {m:?}", source.id()));
        }
    }
    durations.push(("reconcile #1", recon.elapsed()));

    let recon2 = Instant::now();
    b.clock.advance(LEASE_MARGIN_MS + 1);
    let window = Window {
        from_ms: 0,
        to_ms: b.clock.now_ms() + 86_400_000,
    };
    let mut second_reconcile = Vec::new();
    let mut second_totals = Vec::new();
    for source in &config.sources {
        let ctx = RunContext::new("chaos-reconcile-2", b.clock.now_ms());
        let r = reconcile::reconcile_source(&clean, source, window, opts(false), &ctx)
            .await
            .unwrap_or_else(|e| panic!("reconcile {}: {e}", source.id()));
        for f in &r.findings {
            second_reconcile.push(format!(
                "{}: {:?} {} — {}",
                source.id(),
                f.kind,
                f.key,
                f.detail
            ));
        }
        for m in &r.mismatches {
            second_reconcile.push(format!("{}: {m:?}", source.id()));
        }
        if !r.complete {
            second_reconcile.push(format!("{}: incomplete", source.id()));
        }
        second_totals.push((
            source.id().to_string(),
            r.totals.deep.source.rows,
            r.totals.deep.ledger.rows,
            r.totals.deep.lake.rows,
        ));
    }
    durations.push(("reconcile #2", recon2.elapsed()));

    // 5. Table mode: no more changes come; the committers drain the feed (only publishes
    // of the keys it names, no sweep).
    let mut committer = None;
    if let Some(c) = committers {
        let t = Instant::now();
        committer = Some(c.finish().await);
        durations.push(("drain", t.elapsed()));
    }

    // 6. The independent check.
    let chk = Instant::now();
    let sources = check(b, &config, &objects, &mut details, cfg.table).await;
    durations.push(("check", chk.elapsed()));

    // 7. Then a sweep of each table against the ledger must find nothing to commit.
    if let Some(c) = &mut committer {
        let sweeper = committer::publisher(b, &config, b.ledger.clone(), b.store.clone());
        for source in sweeper.table_sources() {
            let r = sweeper.publish_all(source.id()).await;
            c.sweeps.push((
                source.id().to_string(),
                r.map(|p| p.committed).map_err(|e| e.to_string()),
            ));
        }
    }
    durations.push(("total", started.elapsed()));

    ChaosReport {
        backend: b.name,
        keys: objects.len(),
        versions: objects.iter().map(|o| o.versions().count()).sum(),
        overwritten: objects.iter().filter(|o| o.versions().count() > 1).count(),
        deleted: objects.iter().filter(|o| o.live().is_none()).count(),
        deleted_after_overwrite: objects
            .iter()
            .filter(|o| o.deleted_after_overwrite())
            .count(),
        recreated: objects.iter().filter(|o| o.recreated()).count(),
        events,
        lost_events,
        phases,
        staged: objects.iter().filter(|o| o.staged).count(),
        deliveries,
        invocations: tally.invocations,
        crashed_invocations: tally.crashed_invocations,
        redeliveries: tally.redeliveries,
        max_receives: tally.max_receives,
        rounds,
        messages_left,
        summary: tally.summary,
        errors: tally.errors,
        error_samples: tally.samples,
        crashes: crash_stats.by_step(),
        crash_points: crash_stats.checks(),
        faults: fault_stats.snapshot(),
        ledger_after_writes: fault_stats.ledger_after(),
        calls: (
            store_plan.calls.load(Ordering::Relaxed),
            ledger_plan.calls.load(Ordering::Relaxed),
        ),
        calls_by_op: fault_stats.calls(),
        before_reconcile,
        reconcile_findings,
        reconcile_repairs,
        reconcile_mismatches,
        reconcile_notes,
        second_reconcile,
        second_totals,
        sources,
        details,
        durations,
        committer,
        config: cfg,
    }
}
