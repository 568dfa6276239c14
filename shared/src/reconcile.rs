//! Reconciliation: nothing is skipped silently. For one source and one closed window of
//! last-modified times, list the source objects under the window's prefixes only, compare
//! them with the ledger and the outputs, and (optionally) repair through the same per-object
//! path as ingest. Two tiers, so that checking every window costs a small fraction of
//! ingesting it, and memory never grows with an object:
//! - the **cheap tier**, for every object: the listing against the ledger records of the
//!   window's prefixes (missing, stale, stuck, quarantined, orphaned), and each committed
//!   output's Parquet footer, read by one ranged GET pinned to the committed ETag (deleted,
//!   replaced, or holding another row count than the ledger says); the rejects file by HEAD;
//! - the **deep tier**: the source object recounted (decoded again, streamed) and the
//!   outputs' sum columns read back row group by row group ([`outputs`]), so rows and each
//!   configured sum are compared three ways — Glue Data Quality's RowCountMatch and
//!   AggregateMatch, exact for integers and decimals, within a stated tolerance for floats.
//!   It runs on a stable sample of each window (`reconcile.deep_sample`), on every object
//!   the cheap tier found something wrong with, on every object on demand, and on the days
//!   a scheduled run closes when `reconcile.deep_closed_days` is set.
//!
//! The result is a [`Report`] (JSON, an HTML page, CloudWatch embedded-metric lines) that
//! says which tier checked what. Windows that a scheduled run closed are remembered in a
//! small state object beside the reports, so each is closed once; any window can be
//! re-checked on demand.

pub mod outputs;
pub mod parts;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;
use tokio_util::io::SyncIoBridge;

use crate::config::{ReportsDoc, Source};
use crate::convert::{self, SumValue};
use crate::error::{ProcessError, Result};
use crate::model::{
    BookmarkCounts, Committed, IgnoredFields, OutputRef, Record, Status, Target, VersionRef,
};
use crate::ports::{GetOutcome, KeyRange, ObjectMeta, PutOutcome, WriteCondition};
use crate::process::{Pipeline, RunContext};
use crate::schema::ColumnType;
use outputs::{Footer, Read, ReadError};

/// Objects whose cheap-tier reads (ledger record aside: read with the listing) may be in
/// flight at once, ahead of the object being checked.
const READ_AHEAD: usize = 16;

/// A window of last-modified times, `[from_ms, to_ms)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// Start (inclusive), ms since the epoch.
    pub from_ms: i64,
    /// End (exclusive), ms since the epoch.
    pub to_ms: i64,
}

/// Which tier of reconciliation made a finding or a mismatch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// The listing against the ledger, and the outputs' footers: every object.
    #[default]
    Cheap,
    /// The source recounted and the outputs' sum columns read back.
    Deep,
}

impl Tier {
    /// `cheap` or `deep`, as the report writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Cheap => "cheap",
            Tier::Deep => "deep",
        }
    }
}

/// What reconciliation found wrong with one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// In S3, not done: an event was lost (or never sent).
    Missing,
    /// Done for another version than the one in S3: an overwrite's event was lost.
    Stale,
    /// Claimed past its lease: the worker died and no retry came.
    Stuck,
    /// Attempts exhausted.
    Quarantined,
    /// Done, but the source object is gone: a delete's event was lost.
    Orphaned,
    /// Could not be checked: a store or ledger call failed (the detail says which). The rest
    /// of the window is checked; a scheduled run does not close the window, so the next run
    /// checks it again.
    Unchecked,
}

impl FindingKind {
    /// Repaired by default (missing, stale, stuck, orphaned) — quarantined objects need a
    /// person or a new version.
    pub fn repairable(self) -> bool {
        !matches!(self, FindingKind::Quarantined | FindingKind::Unchecked)
    }
}

/// One object reconciliation found wrong.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// What is wrong.
    pub kind: FindingKind,
    /// The key.
    pub key: String,
    /// Which tier found it: the cheap one for everything but a deep-tier read that failed.
    #[serde(default)]
    pub tier: Tier,
    /// Details (status, versions, last error).
    pub detail: String,
    /// Rows of the source object (recounted by the deep tier): what the lake lacks or holds
    /// wrongly.
    pub rows: Option<u64>,
    /// Sums of the source object (recounted).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sums: BTreeMap<String, String>,
    /// The outcome of the repair, when one was made.
    pub repair: Option<String>,
}

/// Which two counts disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MismatchKind {
    /// The ledger's rows or sums differ from a recount of the source object (deep tier).
    LedgerVsSource,
    /// The Parquet output's rows (from its footer: cheap tier) or sums (read back: deep
    /// tier) differ from the ledger's.
    LakeVsLedger,
    /// A committed output does not exist.
    OutputMissing,
    /// A committed output was replaced: its ETag is not the one the ledger committed (the
    /// rows and sums of what is there now are compared too).
    OutputChanged,
    /// A committed output is not a Parquet file that can be read.
    OutputUnreadable,
    /// The source object could not be recounted (it no longer decodes under the config).
    SourceUnreadable,
}

/// Counts that disagree for one object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mismatch {
    /// Which counts.
    pub kind: MismatchKind,
    /// The source key.
    pub key: String,
    /// Which tier found it.
    #[serde(default)]
    pub tier: Tier,
    /// `rows` or `sum(<column>)` (or the output key).
    pub measure: String,
    /// The reference value (the source's for ledger-vs-source, the ledger's for lake-vs-ledger).
    pub expected: String,
    /// The value found.
    pub found: String,
}

/// Objects, rows and sums counted one way.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    /// Objects counted.
    pub objects: u64,
    /// Rows.
    pub rows: u64,
    /// Sums by column, as exact decimal strings.
    #[serde(default)]
    pub sums: BTreeMap<String, String>,
}

/// The tallies of a window. Each counts only what was read: the ledger and the outputs'
/// footers for every done object the cheap tier checked; the source, the ledger and the
/// outputs' sum columns, three ways, for the objects the deep tier checked.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// The done objects checked: rows and sums as the ledger recorded them.
    pub ledger: Tally,
    /// The done objects whose outputs could all be read: rows from the outputs' footers.
    /// No sums: only the deep tier reads column values (see `deep.lake`).
    pub lake: Tally,
    /// The deep-checked objects, three ways.
    pub deep: DeepTotals,
}

/// Rows and sums of the deep-checked objects, three ways.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeepTotals {
    /// Recounted from the source objects (every deep-checked object that could be read,
    /// done or not: a missing object's rows are what the lake lacks).
    pub source: Tally,
    /// The deep-checked done objects, as the ledger recorded them.
    pub ledger: Tally,
    /// The deep-checked done objects' outputs, their sum columns read back.
    pub lake: Tally,
}

/// How many objects each tier checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierCounts {
    /// Objects the cheap tier checked (every object the run reached).
    pub cheap: u64,
    /// Objects the deep tier checked.
    pub deep: u64,
}

/// Reconciliation of one source over one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceReport {
    /// The source.
    pub source_id: String,
    /// The window.
    pub window: Window,
    /// The prefixes listed (only these: never the whole bucket for date-partitioned keys).
    pub prefixes: Vec<String>,
    /// Source objects in the window.
    pub objects: u64,
    /// The fraction of objects the deep tier sampled (1: every object).
    #[serde(default)]
    pub deep_sample: f64,
    /// A closed day checked deeply in full (`reconcile.deep_closed_days`), besides the
    /// scheduled window that closed it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub closed_day: bool,
    /// Objects checked by each tier.
    #[serde(default)]
    pub checked: TierCounts,
    /// The keys the deep tier checked: the sample, and every object with a cheap-tier
    /// finding or mismatch.
    #[serde(default)]
    pub deep_checked: Vec<String>,
    /// Objects found wrong.
    pub findings: Vec<Finding>,
    /// Counts that disagree.
    pub mismatches: Vec<Mismatch>,
    /// Rows and sums, by tier.
    pub totals: Totals,
    /// Age of the oldest missing / stale / stuck object, ms (0 when none).
    pub lag_ms: i64,
    /// False when the run stopped at its deadline; `resume_after` is the last key checked.
    pub complete: bool,
    /// The last key checked when incomplete.
    pub resume_after: Option<String>,
    /// This run resumed the window after this key (the counts cover the rest only).
    pub resumed_after: Option<String>,
    /// The source could not be reconciled at all (its listing or its ledger records could
    /// not be read): nothing else in this entry is meaningful, and the window stays open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A source with bookmark keys: LATE rows of the objects checked in this window (keys at
    /// or below the mark that were never emitted; written to `_late/` or dropped by policy).
    #[serde(default)]
    pub late_rows: u64,
    /// A source with `on_bad_row: reject`: rows set aside by the objects checked in this
    /// window (as their commits record them; the deep tier also checks each object's count
    /// against a recount of the source).
    #[serde(default)]
    pub rejected_rows: u64,
    /// Rows of the objects checked in this window with values in the rescued column (as
    /// their commits record them; the deep tier also checks each object's count against a
    /// recount of the source).
    #[serde(default)]
    pub rescued_rows: u64,
    /// Values of fields not in the schema the objects checked in this window dropped
    /// (`on_unknown_field: ignore`, as their commits record them), naming at most
    /// [`IGNORED_FIELDS_LISTED`] fields: those with the most values.
    #[serde(default)]
    pub ignored: IgnoredFields,
    /// A source with bookmark keys: its counts since it began (objects, emitted, late and
    /// re-exported rows), from its lock record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bookmark: Option<BookmarkCounts>,
    /// Entries left out of the lists above: a window merged from parts lists at most
    /// [`parts::MAX_LISTED`] of each; the counts, the metrics and `clean` include them.
    #[serde(default, skip_serializing_if = "Omitted::is_empty")]
    pub omitted: Omitted,
    /// The window was split into parts checked by parallel invocations: this entry only says
    /// so (`complete` is false); the merged report is written when the last part is checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fan_out: Option<parts::FanOut>,
}

/// Counts of report entries left out of its lists (see [`SourceReport::omitted`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Omitted {
    /// Findings, by kind.
    pub findings: BTreeMap<FindingKind, u64>,
    /// Mismatches.
    pub mismatches: u64,
    /// Keys the deep tier checked.
    pub deep_checked: u64,
}

impl Omitted {
    /// Nothing was left out.
    pub fn is_empty(&self) -> bool {
        self.findings.values().all(|n| *n == 0) && self.mismatches == 0 && self.deep_checked == 0
    }
}

impl SourceReport {
    /// Complete, with no findings and no mismatches.
    pub fn clean(&self) -> bool {
        self.complete
            && self.error.is_none()
            && self.findings.is_empty()
            && self.mismatches.is_empty()
            && self.omitted.is_empty()
    }

    /// Mismatches, listed or omitted.
    pub fn mismatch_count(&self) -> usize {
        self.mismatches.len() + self.omitted.mismatches as usize
    }

    /// Findings, listed or omitted.
    pub fn finding_count(&self) -> usize {
        self.findings.len() + self.omitted.findings.values().sum::<u64>() as usize
    }

    /// Every object of the window was checked (some may be wrong): the window may be closed.
    pub fn checked(&self) -> bool {
        self.complete && self.error.is_none() && self.count(FindingKind::Unchecked) == 0
    }

    /// The entry of a source that could not be reconciled at all.
    pub fn failed(source: &Source, window: Window, error: String) -> Self {
        SourceReport {
            source_id: source.id().to_string(),
            window,
            prefixes: window_prefixes(source, window),
            objects: 0,
            deep_sample: source.doc.reconcile.deep_sample,
            closed_day: false,
            checked: TierCounts::default(),
            deep_checked: Vec::new(),
            findings: Vec::new(),
            mismatches: Vec::new(),
            totals: Totals::default(),
            lag_ms: 0,
            complete: false,
            resume_after: None,
            resumed_after: None,
            error: Some(error),
            late_rows: 0,
            rejected_rows: 0,
            rescued_rows: 0,
            ignored: IgnoredFields::default(),
            bookmark: None,
            omitted: Omitted::default(),
            fan_out: None,
        }
    }

    /// Findings of `kind`, listed or omitted.
    pub fn count(&self, kind: FindingKind) -> usize {
        self.findings.iter().filter(|f| f.kind == kind).count()
            + self.omitted.findings.get(&kind).copied().unwrap_or(0) as usize
    }

    fn repaired(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.repair.as_deref().is_some_and(|r| !r.starts_with("error")))
            .count()
    }
}

/// A reconciliation run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The run.
    pub run_id: String,
    /// When it ran, ms since the epoch.
    pub generated_at: i64,
    /// One entry per source and window.
    pub sources: Vec<SourceReport>,
    /// The backfill jobs of the report's sources that are not finished, or finished in the
    /// last day: what a backfill did next to what reconcile found.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<crate::jobs::JobStatus>,
    /// The freshness of each source with `freshness` set (scheduled runs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub freshness: Vec<Freshness>,
}

/// How recently a source committed rows, against its `freshness` setting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Freshness {
    /// The source.
    pub source_id: String,
    /// `freshness.max_silence`, ms.
    pub max_silence_ms: i64,
    /// `freshness.min_rows_per_window`.
    pub min_rows: u64,
    /// The start of the period looked at: the run's time minus `max_silence`.
    pub since_ms: i64,
    /// Rows committed since then (new versions, not deletes).
    pub rows: u64,
    /// Objects committed since then.
    pub objects: u64,
    /// The last commit seen (`None`: none in the records read).
    pub last_commit_ms: Option<i64>,
    /// Fewer than `min_rows` rows since `since_ms`: the alarm's condition.
    pub breached: bool,
}

/// The [`Freshness`] of `source` at `now`, if it has a `freshness` setting. Reads the
/// source's records committed since `now − max_silence`: with `reconcile.date_prefix`, only
/// those under the date prefixes of that period (plus a day before it, for keys dated the day
/// before they land); without, every record of the source.
pub async fn freshness(p: &Pipeline, source: &Source, now: i64) -> Result<Option<Freshness>> {
    let Some((max_silence_ms, _)) = source.freshness() else {
        return Ok(None);
    };
    let since_ms = now - max_silence_ms;
    let records = if source.doc.reconcile.date_prefix.is_some() {
        let window = Window {
            from_ms: since_ms - 86_400_000,
            to_ms: now + 1,
        };
        let mut records = Vec::new();
        for prefix in window_prefixes(source, window) {
            records.extend(
                p.ledger
                    .list_range(source.id(), &crate::ports::KeyRange::prefix(prefix))
                    .await?,
            );
        }
        records
    } else {
        p.ledger.list(source.id()).await?
    };
    Ok(freshness_of(source, &records, now))
}

/// The [`Freshness`] of `source` at `now` from `records` (those committed since `now −
/// max_silence` at least), if it has a `freshness` setting.
pub fn freshness_of(
    source: &Source,
    records: &[crate::model::Record],
    now: i64,
) -> Option<Freshness> {
    let (max_silence_ms, min_rows) = source.freshness()?;
    let since_ms = now - max_silence_ms;
    let (mut rows, mut objects, mut last_commit_ms) = (0, 0, None::<i64>);
    for r in records {
        let Some(c) = &r.committed else { continue };
        if !matches!(c.target, crate::model::Target::Version(_)) {
            continue;
        }
        last_commit_ms = Some(last_commit_ms.map_or(c.committed_at, |l| l.max(c.committed_at)));
        if c.committed_at >= since_ms {
            rows += c.rows;
            objects += 1;
        }
    }
    Some(Freshness {
        source_id: source.id().to_string(),
        max_silence_ms,
        min_rows,
        since_ms,
        rows,
        objects,
        last_commit_ms,
        breached: rows < min_rows,
    })
}

/// How far back a finished backfill job still shows in a report.
const JOBS_SHOWN_MS: i64 = 86_400_000;
/// Jobs looked at for the report (the most recent).
const JOBS_LOOKED_AT: usize = 20;

impl Report {
    /// Add the backfill jobs of the report's sources: those not finished, and those finished
    /// in the last day. A failure to read them costs the report this section only.
    pub async fn add_jobs(&mut self, p: &Pipeline) {
        let sources: BTreeSet<&str> = self.sources.iter().map(|s| s.source_id.as_str()).collect();
        let since = self.generated_at - JOBS_SHOWN_MS;
        match p.ledger.list_jobs(JOBS_LOOKED_AT).await {
            Ok(jobs) => {
                self.jobs = jobs
                    .into_iter()
                    .filter(|(j, _)| {
                        j.kind == crate::jobs::JobKind::Backfill
                            && sources.contains(j.source_id.as_str())
                    })
                    .map(|(j, c)| crate::jobs::JobStatus::of(j, c))
                    .filter(|s| s.finished_at.is_none_or(|t| t >= since))
                    .collect();
            }
            Err(e) => {
                tracing::warn!(error = %e, "the backfill jobs could not be read for the report")
            }
        }
    }
}

/// Options of a reconciliation.
#[derive(Debug, Clone)]
pub struct Options {
    /// Re-drive missing, stale, stuck and orphaned objects through the per-object path.
    pub repair: bool,
    /// The fraction of the window's done objects the deep tier checks (a stable sample by
    /// key and ETag; 1: every object); `None`: the source's `reconcile.deep_sample`. Objects
    /// with a cheap-tier finding are checked deeply whatever this is.
    pub deep_sample: Option<f64>,
    /// Stop taking new objects once the clock passes this, ms since the epoch.
    pub stop_at_ms: i64,
    /// Check at most this many objects (then stop, incomplete).
    pub max_objects: Option<u64>,
    /// Only keys after this one: a window resumed, or a part of it.
    pub start_after: Option<String>,
    /// Only keys at or before this one: with `start_after`, one key range of a window (its
    /// listing, ledger records and orphans alone), so that a window can be split.
    pub through: Option<String>,
}

impl Default for Options {
    /// Repair, the source's sample, no deadline, the whole window.
    fn default() -> Self {
        Self {
            repair: true,
            deep_sample: None,
            stop_at_ms: i64::MAX,
            max_objects: None,
            start_after: None,
            through: None,
        }
    }
}

/// Is the version `etag` of `key` in a deep-tier sample of `fraction` of the objects? A
/// stable hash of both decides, so a re-run checks the same objects, and a new version of an
/// object is drawn afresh.
pub fn sampled(key: &str, etag: &str, fraction: f64) -> bool {
    if fraction >= 1.0 {
        return true;
    }
    let digest = Md5::new()
        .chain_update(key.as_bytes())
        .chain_update([0])
        .chain_update(etag.as_bytes())
        .finalize();
    let mut head = [0; 8];
    head.copy_from_slice(&digest[..8]);
    // The first 64 bits, as a fraction of 2^64.
    (u64::from_be_bytes(head) as f64) < fraction * 18_446_744_073_709_551_616.0
}

/// The prefixes a window of `source` lists: the source prefix, or with a `date_prefix`
/// template, one prefix per day (or hour, with `{hh}`) the window touches.
pub fn window_prefixes(source: &Source, window: Window) -> Vec<String> {
    let base = &source.doc.prefix;
    let Some(template) = &source.doc.reconcile.date_prefix else {
        return vec![base.clone()];
    };
    let hourly = template.contains("{hh}");
    let step = if hourly { 3_600_000 } else { 86_400_000 };
    let mut out = BTreeSet::new();
    let mut t = window.from_ms - window.from_ms.rem_euclid(step);
    while t < window.to_ms {
        if let Some(d) = chrono::DateTime::from_timestamp_millis(t) {
            let expanded = template
                .replace("{yyyy}", &d.format("%Y").to_string())
                .replace("{mm}", &d.format("%m").to_string())
                .replace("{dd}", &d.format("%d").to_string())
                .replace("{hh}", &d.format("%H").to_string());
            out.insert(format!("{base}{expanded}"));
        }
        t += step;
    }
    out.into_iter().collect()
}

fn sum_type(source: &Source, column: &str) -> Option<ColumnType> {
    source
        .doc
        .schema
        .iter()
        .find(|c| c.name == column)
        .and_then(|c| c.ty.scalar())
}

fn same(a: &SumValue, b: &SumValue, tolerance: f64) -> bool {
    match (a, b) {
        (SumValue::Float(x), SumValue::Float(y)) => {
            (x - y).abs() <= tolerance * x.abs().max(y.abs()).max(1.0)
        }
        _ => a == b,
    }
}

/// A running tally.
#[derive(Default)]
struct Count {
    objects: u64,
    rows: u64,
    sums: BTreeMap<String, SumValue>,
}

impl Count {
    fn add(&mut self, rows: u64, sums: &BTreeMap<String, SumValue>) {
        self.objects += 1;
        self.rows += rows;
        for (col, v) in sums {
            self.sums
                .entry(col.clone())
                .and_modify(|t| *t = t.plus(v))
                .or_insert(*v);
        }
    }

    fn finish(self) -> Tally {
        Tally {
            objects: self.objects,
            rows: self.rows,
            sums: self
                .sums
                .iter()
                .map(|(k, v)| (k.clone(), v.to_string()))
                .collect(),
        }
    }
}

/// The running tallies of a window (see [`Totals`]).
#[derive(Default)]
struct Counts {
    recorded: Count,
    footers: Count,
    deep_source: Count,
    deep_ledger: Count,
    deep_lake: Count,
}

impl Counts {
    fn finish(self) -> Totals {
        Totals {
            ledger: self.recorded.finish(),
            lake: self.footers.finish(),
            deep: DeepTotals {
                source: self.deep_source.finish(),
                ledger: self.deep_ledger.finish(),
                lake: self.deep_lake.finish(),
            },
        }
    }
}

fn describe(rows: u64, sums: &BTreeMap<String, SumValue>) -> String {
    let mut s = format!("rows {rows}");
    for (col, v) in sums {
        s.push_str(&format!(", sum({col}) {v}"));
    }
    s
}

fn location(out: &OutputRef) -> String {
    format!("s3://{}/{}", out.bucket, out.key)
}

/// What the ledger record says of a listed object.
enum Ledgered<'r> {
    /// Done for the listed version.
    Done(&'r Committed, Option<BookmarkCounts>),
    /// Claimed, its lease still running: its worker is on it.
    InFlight,
    /// Wrong.
    Finding(FindingKind, String),
}

fn ledgered<'r>(record: Option<&'r Record>, object: &ObjectMeta, now: i64) -> Ledgered<'r> {
    let Some(r) = record else {
        return Ledgered::Finding(FindingKind::Missing, "no ledger record".into());
    };
    match r.status {
        Status::Claimed => match r.claim.as_ref().filter(|c| c.lease_until <= now) {
            Some(c) => Ledgered::Finding(
                FindingKind::Stuck,
                format!("claimed by run {} past its lease", c.run_id),
            ),
            None => Ledgered::InFlight,
        },
        Status::Quarantined => Ledgered::Finding(
            FindingKind::Quarantined,
            r.last_error.clone().unwrap_or_default(),
        ),
        Status::Done => match r.committed.as_ref() {
            Some(c) => match &c.target {
                Target::Version(v) if v.etag.as_deref() == Some(object.etag.as_str()) => {
                    Ledgered::Done(c, r.bookmark.as_ref().map(|b| b.counts))
                }
                Target::Version(v) => Ledgered::Finding(
                    FindingKind::Stale,
                    format!(
                        "done for etag {}, the object is now etag {}",
                        v.etag.as_deref().unwrap_or("-"),
                        object.etag
                    ),
                ),
                Target::Delete(_) => {
                    Ledgered::Finding(FindingKind::Missing, "no committed version".into())
                }
            },
            None => Ledgered::Finding(FindingKind::Missing, "no committed version".into()),
        },
        other => Ledgered::Finding(
            FindingKind::Missing,
            format!(
                "status {}{}",
                other.as_str(),
                r.last_error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ),
        ),
    }
}

/// What the cheap tier read of one listed object.
enum Cheap<'r> {
    /// Done for the listed version: its outputs' footers (or the call that failed).
    Done {
        committed: &'r Committed,
        classified: Option<BookmarkCounts>,
        outputs: Result<OutputsRead<'r>>,
    },
    /// Claimed, its lease still running.
    InFlight,
    /// Wrong.
    Finding(FindingKind, String),
}

/// Reconcile `source` over `window` (or the key range of it that `opts` names).
pub async fn reconcile_source(
    p: &Pipeline,
    source: &Source,
    window: Window,
    opts: Options,
    ctx: &RunContext,
) -> Result<SourceReport> {
    let bucket = &source.doc.bucket;
    let prefixes = window_prefixes(source, window);
    let range = |prefix: &str| KeyRange {
        prefix: prefix.to_string(),
        after: opts.start_after.clone(),
        through: opts.through.clone(),
    };

    // Every key of the range under the prefixes (to tell orphans), the window's objects, and
    // the ledger records of the same keys.
    let mut listed = BTreeSet::new();
    let mut objects: BTreeMap<String, ObjectMeta> = BTreeMap::new();
    let mut records: HashMap<String, Record> = HashMap::new();
    for prefix in &prefixes {
        let range = range(prefix);
        let mut page = match &range.after {
            Some(after) => p.store.list_after(bucket, prefix, after).await?,
            None => p.store.list(bucket, prefix, None).await?,
        };
        loop {
            let mut past = false;
            for o in page.objects {
                if range.through.as_deref().is_some_and(|t| o.key.as_str() > t) {
                    past = true;
                    break;
                }
                if !range.contains(&o.key) || !source.matches(bucket, &o.key) {
                    continue;
                }
                listed.insert(o.key.clone());
                if o.last_modified >= window.from_ms && o.last_modified < window.to_ms {
                    objects.insert(o.key.clone(), o);
                }
            }
            match page.next {
                Some(next) if !past => page = p.store.list(bucket, prefix, Some(&next)).await?,
                _ => break,
            }
        }
        for r in p.ledger.list_range(source.id(), &range).await? {
            records.insert(r.key.clone(), r);
        }
    }

    let mut check = Check {
        p,
        source,
        ctx,
        repair: opts.repair,
        sample: opts.deep_sample.unwrap_or(source.doc.reconcile.deep_sample),
        now: p.clock.now_ms(),
        tolerance: source.doc.reconcile.float_tolerance,
        findings: Vec::new(),
        mismatches: Vec::new(),
        counts: Counts::default(),
        checked: TierCounts::default(),
        deep_checked: Vec::new(),
        lag_ms: 0,
        late_rows: 0,
        rejected_rows: 0,
        rescued_rows: 0,
        ignored: IgnoredFields::default(),
    };
    let mut complete = true;
    let mut resume_after = None;
    let mut last_key: Option<String> = None;
    // The cheap tier's reads run ahead of the checks, a few objects at a time, in key order.
    let now = check.now;
    // (The futures are made up front: a stream holding a closure would not be `Send` for
    // all lifetimes, and the fleet spawns this future.)
    let reads: Vec<_> = objects
        .iter()
        .map(|(key, object)| {
            let record = records.get(key);
            async move {
                let read = match ledgered(record, object, now) {
                    Ledgered::Done(committed, classified) => Cheap::Done {
                        committed,
                        classified,
                        outputs: read_outputs(p, source, key, committed).await,
                    },
                    Ledgered::InFlight => Cheap::InFlight,
                    Ledgered::Finding(kind, detail) => Cheap::Finding(kind, detail),
                };
                (key, object, read)
            }
        })
        .collect();
    let mut reads = futures::stream::iter(reads).buffered(READ_AHEAD);
    let mut n = 0u64;
    while let Some((key, object, read)) = reads.next().await {
        if p.clock.now_ms() >= opts.stop_at_ms || opts.max_objects.is_some_and(|m| n >= m) {
            complete = false;
            resume_after = last_key.clone().or_else(|| opts.start_after.clone());
            break;
        }
        n += 1;
        last_key = Some(key.clone());
        check.object(key, object, read).await;
    }
    // Reads that ran ahead of a stop are dropped unused.
    drop(reads);

    // Orphans: committed in this window's time or later, among the keys this run covered
    // (all of its range, or up to the last key checked), source gone.
    let covered = if complete {
        opts.through.clone()
    } else {
        resume_after.clone()
    };
    let mut orphans: Vec<&Record> = records
        .values()
        .filter(|_| complete || resume_after.is_some())
        .filter(|r| r.status == Status::Done)
        .filter(|r| {
            r.committed
                .as_ref()
                .is_some_and(|c| c.committed_at >= window.from_ms)
        })
        .filter(|r| !listed.contains(&r.key))
        .filter(|r| covered.as_deref().is_none_or(|c| r.key.as_str() <= c))
        .collect();
    orphans.sort_by(|a, b| a.key.cmp(&b.key));
    for r in orphans {
        check.orphan(r).await;
    }

    let bookmark = match &source.doc.bookmark {
        None => None,
        Some(_) => Some(
            p.ledger
                .get(
                    &crate::bookmark::lock_source_id(source.id()),
                    crate::bookmark::LOCK_KEY,
                )
                .await?
                .and_then(|r| r.bookmark)
                .map(|b| b.counts)
                .unwrap_or_default(),
        ),
    };
    Ok(SourceReport {
        source_id: source.id().to_string(),
        window,
        prefixes,
        objects: objects.len() as u64,
        deep_sample: check.sample,
        closed_day: false,
        checked: check.checked,
        deep_checked: check.deep_checked,
        findings: check.findings,
        mismatches: check.mismatches,
        totals: check.counts.finish(),
        lag_ms: check.lag_ms,
        complete,
        resume_after,
        resumed_after: opts.start_after.clone(),
        error: None,
        late_rows: check.late_rows,
        rejected_rows: check.rejected_rows,
        rescued_rows: check.rescued_rows,
        ignored: check.ignored.trimmed(IGNORED_FIELDS_LISTED),
        bookmark,
        omitted: Omitted::default(),
        fan_out: None,
    })
}

/// What the cheap tier read of a done object's outputs: each one's footer (when it could be
/// read), and what was wrong with them.
type OutputsRead<'c> = (Vec<Output<'c>>, Vec<Mismatch>);

/// The ledger's sums of a commit, typed by the source's schema.
fn ledger_sums(source: &Source, committed: &Committed) -> BTreeMap<String, SumValue> {
    committed
        .sums
        .iter()
        .filter_map(|(col, s)| {
            let ty = sum_type(source, col)?;
            Some((col.clone(), SumValue::parse_for(&ty, s).ok()?))
        })
        .collect()
}

/// The cheap tier's reads of a done object's outputs: each footer by one ranged GET pinned
/// to the committed ETag (a replaced output's footer is read unpinned), and the rejects file
/// by HEAD. Every problem is a mismatch; a failed call is the error.
async fn read_outputs<'c>(
    p: &Pipeline,
    source: &Source,
    key: &str,
    committed: &'c Committed,
) -> Result<OutputsRead<'c>> {
    let store = &*p.store;
    let mut mismatches = Vec::new();
    let mut mismatch = |kind, measure: String, expected: String, found: String| {
        mismatches.push(Mismatch {
            kind,
            key: key.to_string(),
            tier: Tier::Cheap,
            measure,
            expected,
            found,
        });
    };
    let mut outputs = Vec::with_capacity(committed.outputs.len());
    for out in &committed.outputs {
        let mut read = outputs::read_footer(store, &out.bucket, &out.key, Some(&out.etag)).await;
        if let Ok(Read::Changed) = read {
            read = outputs::read_footer(store, &out.bucket, &out.key, None).await;
            let found = match &read {
                Ok(Read::Found(f)) => format!("ETag {}", f.etag),
                Ok(Read::NotFound) => "deleted since".into(),
                _ => "another object".into(),
            };
            let expected = format!("ETag {}", out.etag);
            mismatch(MismatchKind::OutputChanged, location(out), expected, found);
        }
        let footer = match read {
            Ok(Read::Found(footer)) => Some(footer),
            Ok(Read::NotFound) => {
                let expected = describe(committed.rows, &ledger_sums(source, committed));
                let found = "no such object".into();
                mismatch(MismatchKind::OutputMissing, location(out), expected, found);
                None
            }
            // Replaced again between the two reads: the next run sees it settled.
            Ok(Read::Changed) => None,
            Err(ReadError::Store(e)) => return Err(e.into()),
            Err(e @ ReadError::Invalid { .. }) => {
                let expected = "a Parquet file".into();
                mismatch(
                    MismatchKind::OutputUnreadable,
                    location(out),
                    expected,
                    e.to_string(),
                );
                None
            }
        };
        outputs.push(Output {
            output: out,
            footer,
        });
    }
    if let Some(rejects) = &committed.rejects {
        let found = match p.store.head(&rejects.bucket, &rejects.key).await? {
            Some(found) if found.etag == rejects.etag => None,
            Some(found) => Some(format!("ETag {}", found.etag)),
            None => Some("no such object".to_string()),
        };
        if let Some(found) = found {
            let expected = format!(
                "the rejects file of {} rows (ETag {})",
                committed.rejected, rejects.etag
            );
            mismatch(
                MismatchKind::OutputMissing,
                location(rejects),
                expected,
                found,
            );
        }
    }
    Ok((outputs, mismatches))
}

/// One committed output as the cheap tier found it: its footer, when it could be read (of
/// the object there now, if it was replaced).
struct Output<'c> {
    output: &'c OutputRef,
    footer: Option<Footer>,
}

/// The checks of one window, and what they found.
struct Check<'a> {
    p: &'a Pipeline,
    source: &'a Source,
    ctx: &'a RunContext,
    repair: bool,
    sample: f64,
    now: i64,
    tolerance: f64,
    findings: Vec<Finding>,
    mismatches: Vec<Mismatch>,
    counts: Counts,
    checked: TierCounts,
    deep_checked: Vec<String>,
    lag_ms: i64,
    late_rows: u64,
    rejected_rows: u64,
    rescued_rows: u64,
    ignored: IgnoredFields,
}

impl Check<'_> {
    fn mismatch(
        &mut self,
        kind: MismatchKind,
        tier: Tier,
        key: &str,
        measure: impl Into<String>,
        expected: impl Into<String>,
        found: impl Into<String>,
    ) {
        self.mismatches.push(Mismatch {
            kind,
            key: key.to_string(),
            tier,
            measure: measure.into(),
            expected: expected.into(),
            found: found.into(),
        });
    }

    fn unchecked(&mut self, key: &str, tier: Tier, e: &dyn std::fmt::Display) {
        self.findings.push(Finding {
            kind: FindingKind::Unchecked,
            key: key.to_string(),
            tier,
            detail: e.to_string(),
            rows: None,
            sums: BTreeMap::new(),
            repair: None,
        });
    }

    /// Both tiers on one listed object, given what the cheap tier read of it.
    async fn object(&mut self, key: &str, object: &ObjectMeta, read: Cheap<'_>) {
        self.checked.cheap += 1;
        match read {
            Cheap::InFlight => {}
            Cheap::Done {
                committed,
                classified,
                outputs,
            } => self.done(key, object, committed, classified, outputs).await,
            Cheap::Finding(kind, detail) => {
                // Every finding is checked deeply: the recount says what the lake lacks.
                self.checked.deep += 1;
                self.deep_checked.push(key.to_string());
                let recounted = match recount_source(self.p, self.source, key, object).await {
                    Ok(r) => r.ok(),
                    Err(e) => {
                        self.unchecked(key, Tier::Deep, &e);
                        None
                    }
                };
                if let Some(stats) = &recounted {
                    self.counts.deep_source.add(stats.rows, &stats.sums);
                }
                if kind != FindingKind::Quarantined {
                    self.lag_ms = self.lag_ms.max(self.now - object.last_modified);
                }
                let repair = if self.repair && kind.repairable() {
                    let target = Target::Version(VersionRef {
                        version: object.etag.clone(),
                        version_id: object.version_id.clone(),
                        etag: Some(object.etag.clone()),
                        sequencer: None,
                        size: Some(object.size),
                    });
                    Some(repair_with(self.p, self.source, key, target, self.ctx).await)
                } else {
                    None
                };
                self.findings.push(Finding {
                    kind,
                    key: key.to_string(),
                    tier: Tier::Cheap,
                    detail,
                    rows: recounted.as_ref().map(|s| s.rows),
                    sums: recounted
                        .map(|s| {
                            s.sums
                                .iter()
                                .map(|(k, v)| (k.clone(), v.to_string()))
                                .collect()
                        })
                        .unwrap_or_default(),
                    repair,
                });
            }
        }
    }

    /// A done object: its outputs' footers and rejects file (cheap), then, when sampled or
    /// when something was wrong, the source recounted and the sum columns read (deep).
    async fn done(
        &mut self,
        key: &str,
        object: &ObjectMeta,
        committed: &Committed,
        classified: Option<BookmarkCounts>,
        outputs: Result<OutputsRead<'_>>,
    ) {
        self.late_rows += classified.map_or(0, |c| c.late);
        self.rejected_rows += committed.rejected;
        self.rescued_rows += committed.rescued;
        self.ignored.add(&committed.ignored);
        let ledger_sums = ledger_sums(self.source, committed);
        self.counts.recorded.add(committed.rows, &ledger_sums);

        let before = self.mismatches.len();
        let outputs = match outputs {
            Ok((outputs, mismatches)) => {
                self.mismatches.extend(mismatches);
                outputs
            }
            Err(e) => return self.unchecked(key, Tier::Cheap, &e),
        };
        if outputs.iter().all(|o| o.footer.is_some()) {
            let rows = outputs
                .iter()
                .flat_map(|o| &o.footer)
                .map(Footer::rows)
                .sum();
            self.counts.footers.add(rows, &BTreeMap::new());
            if rows != committed.rows {
                self.mismatch(
                    MismatchKind::LakeVsLedger,
                    Tier::Cheap,
                    key,
                    "rows",
                    committed.rows.to_string(),
                    rows.to_string(),
                );
            }
        }
        let wrong = self.mismatches.len() > before;
        if !wrong && !sampled(key, &object.etag, self.sample) {
            return;
        }

        // The deep tier.
        self.checked.deep += 1;
        self.deep_checked.push(key.to_string());
        let recounted = match recount_source(self.p, self.source, key, object).await {
            Ok(r) => r,
            Err(e) => return self.unchecked(key, Tier::Deep, &e),
        };
        self.counts.deep_ledger.add(committed.rows, &ledger_sums);
        match &recounted {
            Ok(stats) => {
                self.counts.deep_source.add(stats.rows, &stats.sums);
                self.source_vs_ledger(key, stats, committed, &ledger_sums, classified);
            }
            Err(message) => self.mismatch(
                MismatchKind::SourceUnreadable,
                Tier::Deep,
                key,
                "rows",
                "a readable object",
                message.clone(),
            ),
        }
        if let Err(e) = self.sums(key, &outputs, &ledger_sums).await {
            self.unchecked(key, Tier::Deep, &e);
        }
    }

    /// The deep tier's read of the outputs: their sum columns, added up and compared with
    /// the ledger's sums (the rows were compared by the cheap tier, from the footers).
    async fn sums(
        &mut self,
        key: &str,
        outputs: &[Output<'_>],
        ledger_sums: &BTreeMap<String, SumValue>,
    ) -> Result<()> {
        let columns = &self.source.doc.sum_columns;
        let mut rows = 0;
        let mut sums: BTreeMap<String, SumValue> = BTreeMap::new();
        for o in outputs {
            // A missing or unreadable output is a cheap-tier mismatch already.
            let Some(footer) = &o.footer else {
                return Ok(());
            };
            let (bucket, out_key) = (&o.output.bucket, &o.output.key);
            let read =
                outputs::read_sums(Arc::clone(&self.p.store), bucket, out_key, footer, columns)
                    .await;
            let replaced = |why: &str| (format!("ETag {}", footer.etag), why.to_string());
            let found = match read {
                Ok(Read::Found(found)) => found,
                Ok(gone @ (Read::NotFound | Read::Changed)) => {
                    let (kind, why) = match gone {
                        Read::NotFound => {
                            (MismatchKind::OutputMissing, "deleted while it was read")
                        }
                        _ => (MismatchKind::OutputChanged, "replaced while it was read"),
                    };
                    let (expected, found) = replaced(why);
                    let out = location(o.output);
                    self.mismatch(kind, Tier::Deep, key, out, expected, found);
                    return Ok(());
                }
                Err(ReadError::Store(e)) => return Err(e.into()),
                Err(e @ ReadError::Invalid { .. }) => {
                    self.mismatch(
                        MismatchKind::OutputUnreadable,
                        Tier::Deep,
                        key,
                        location(o.output),
                        "a Parquet file with the sum columns",
                        e.to_string(),
                    );
                    return Ok(());
                }
            };
            rows += found.0;
            for (col, v) in found.1 {
                sums.entry(col).and_modify(|t| *t = t.plus(&v)).or_insert(v);
            }
        }
        // A set of no file (an object of no rows, partitioned by its rows) sums to zero.
        if outputs.is_empty() {
            for (col, expected) in ledger_sums {
                let zero = match expected {
                    SumValue::Int(_) => SumValue::Int(0),
                    SumValue::Decimal { scale, .. } => SumValue::Decimal {
                        unscaled: 0,
                        scale: *scale,
                    },
                    SumValue::Float(_) => SumValue::Float(0.0),
                };
                sums.insert(col.clone(), zero);
            }
        }
        self.counts.deep_lake.add(rows, &sums);
        for (col, expected) in ledger_sums {
            match sums.get(col) {
                Some(found) if same(expected, found, self.tolerance) => {}
                found => self.mismatch(
                    MismatchKind::LakeVsLedger,
                    Tier::Deep,
                    key,
                    format!("sum({col})"),
                    expected.to_string(),
                    found.map_or("absent".into(), |f| f.to_string()),
                ),
            }
        }
        Ok(())
    }

    /// The ledger's rows, sums, rejected and rescued rows against the source recounted.
    fn source_vs_ledger(
        &mut self,
        key: &str,
        stats: &convert::ConvertStats,
        committed: &Committed,
        ledger_sums: &BTreeMap<String, SumValue>,
        classified: Option<BookmarkCounts>,
    ) {
        let kind = MismatchKind::LedgerVsSource;
        // A source with bookmark keys: every row of the object was emitted, reported late
        // or recognized as re-exported (the ledger's rows and sums are the emitted ones, of
        // every version of the key).
        if let Some(c) = classified {
            if stats.rows != c.rows() {
                self.mismatch(
                    kind,
                    Tier::Deep,
                    key,
                    "rows",
                    stats.rows.to_string(),
                    c.rows().to_string(),
                );
            }
            return;
        }
        if stats.rows != committed.rows {
            self.mismatch(
                kind,
                Tier::Deep,
                key,
                "rows",
                stats.rows.to_string(),
                committed.rows.to_string(),
            );
        }
        for (col, expected) in &stats.sums {
            match ledger_sums.get(col) {
                Some(found) if same(expected, found, self.tolerance) => {}
                found => self.mismatch(
                    kind,
                    Tier::Deep,
                    key,
                    format!("sum({col})"),
                    expected.to_string(),
                    found.map_or("absent".into(), |f| f.to_string()),
                ),
            }
        }
        let rows_kept_aside = [
            (
                "rejected rows",
                stats.rejects.len() as u64,
                committed.rejected,
            ),
            ("rescued rows", stats.rescued_rows, committed.rescued),
        ];
        for (measure, recounted, recorded) in rows_kept_aside {
            if recounted != recorded {
                self.mismatch(
                    kind,
                    Tier::Deep,
                    key,
                    measure,
                    recounted.to_string(),
                    recorded.to_string(),
                );
            }
        }
    }

    /// A record done under the window's prefixes whose source is gone.
    async fn orphan(&mut self, r: &Record) {
        let repair = if self.repair {
            let target = Target::Delete(crate::model::DeleteRef {
                sequencer: None,
                version_id: None,
                delete_marker: false,
            });
            Some(repair_with(self.p, self.source, &r.key, target, self.ctx).await)
        } else {
            None
        };
        let committed = r.committed.as_ref();
        self.findings.push(Finding {
            kind: FindingKind::Orphaned,
            key: r.key.clone(),
            tier: Tier::Cheap,
            detail: "done, but the source object is gone".into(),
            rows: committed.map(|c| c.rows),
            sums: committed.map(|c| c.sums.clone()).unwrap_or_default(),
            repair,
        });
    }
}

async fn repair_with(
    p: &Pipeline,
    source: &Source,
    key: &str,
    target: Target,
    ctx: &RunContext,
) -> String {
    match p.process(source, key, target, ctx).await {
        Ok(outcome) => outcome.as_str().to_string(),
        Err(e) => format!("error: {e}"),
    }
}

/// Recount a source object (pinned to the listed ETag). The inner error is a message for
/// the report: the object changed, or no longer decodes.
async fn recount_source(
    p: &Pipeline,
    source: &Source,
    key: &str,
    object: &ObjectMeta,
) -> Result<std::result::Result<convert::ConvertStats, String>> {
    let GetOutcome::Found { body, .. } = p
        .store
        .get(&source.doc.bucket, key, Some(&object.etag))
        .await?
    else {
        return Ok(Err("the object changed during reconciliation".into()));
    };
    let spec = source.convert_spec(key);
    let (body, cut) = crate::process::WatchedBody::new(body);
    let reader = SyncIoBridge::new(body);
    // A recount that stands still is abandoned as ingest's conversion is: the object is
    // reported as no longer decoding.
    let limit = crate::watchdog::stall_limit(i64::MAX);
    let counted =
        crate::watchdog::convert(spec, limit, move |spec| convert::count(reader, &spec)).await;
    if let (Err(_), Some(e)) = (&counted, cut.error(&source.doc.bucket, key)) {
        return Err(ProcessError::Store(e));
    }
    Ok(counted.map_err(|e| e.to_string()))
}

/// Where the scheduled reconciler remembers how far each source's windows are closed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WindowState {
    /// Windows before this are closed, ms since the epoch.
    pub closed_through_ms: Option<i64>,
    /// A window a run stopped inside (at its deadline), and the last key it checked.
    #[serde(default)]
    pub partial: Option<(Window, String)>,
    /// With `reconcile.deep_closed_days`: the days closed windows passed the end of, each
    /// waiting for its deep check (with the last key checked when a run stopped inside it),
    /// oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub closed_days: Vec<(Window, Option<String>)>,
    /// A window split into parts ([`parts`]) and the job checking them: closed (or left
    /// open) by the merge of its parts; no later window is started meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fanned: Option<(Window, String)>,
}

fn state_key(reports: &ReportsDoc, source_id: &str) -> String {
    format!("{}_state/{source_id}.json", reports.prefix)
}

/// Read a source's window state (and its ETag, for the conditional update).
pub async fn load_state(
    p: &Pipeline,
    reports: &ReportsDoc,
    source_id: &str,
) -> Result<(WindowState, Option<String>)> {
    match p
        .store
        .get(&reports.bucket, &state_key(reports, source_id), None)
        .await?
    {
        GetOutcome::Found { meta, mut body } => {
            let mut text = Vec::new();
            body.read_to_end(&mut text)
                .await
                .map_err(|e| ProcessError::Internal(e.to_string()))?;
            let state = serde_json::from_slice(&text).unwrap_or_default();
            Ok((state, Some(meta.etag)))
        }
        _ => Ok((WindowState::default(), None)),
    }
}

/// Record that windows before `closed_through_ms` are closed; conditional on the ETag read,
/// so two overlapping scheduled runs cannot both move it.
pub async fn save_state(
    p: &Pipeline,
    reports: &ReportsDoc,
    source_id: &str,
    state: &WindowState,
    etag: Option<String>,
) -> Result<bool> {
    let body = Bytes::from(serde_json::to_vec(state).unwrap_or_default());
    let cond = etag.map_or(WriteCondition::Absent, WriteCondition::Matches);
    let outcome = p
        .store
        .put(
            &reports.bucket,
            &state_key(reports, source_id),
            body,
            &BTreeMap::new(),
            &cond,
        )
        .await?;
    Ok(matches!(outcome, PutOutcome::Written { .. }))
}

/// Fields a report names of those whose values were ignored: the ones with the most values.
pub const IGNORED_FIELDS_LISTED: usize = 32;

/// The ignored values of a window in HTML: how many, and of which fields.
fn ignored_html(ignored: &IgnoredFields, esc: impl Fn(&str) -> String) -> String {
    let mut h = format!(
        "<p class=\"diff\">ignored: <b>{} values</b> of fields not in the schema, dropped by the objects of this window (<code>on_unknown_field: ignore</code>)</p>",
        ignored.values
    );
    h.push_str("<table><tr><th class=\"k\">ignored field</th><th>values</th></tr>");
    for (path, n) in ignored.most_frequent(IGNORED_FIELDS_LISTED) {
        h.push_str(&format!(
            "<tr><td class=\"k\">{}</td><td>{n}</td></tr>",
            esc(path)
        ));
    }
    if ignored.unnamed() > 0 {
        h.push_str(&format!(
            "<tr><td class=\"k\">(other fields)</td><td>{}</td></tr>",
            ignored.unnamed()
        ));
    }
    h.push_str("</table>");
    h
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| ms.to_string())
}

impl Report {
    /// True when every source is clean.
    pub fn clean(&self) -> bool {
        self.sources.iter().all(SourceReport::clean)
    }

    /// Write the report as `<prefix><date>/<run id>.json` and `.html`; returns their keys.
    pub async fn write(&self, p: &Pipeline, reports: &ReportsDoc) -> Result<Vec<String>> {
        let day = chrono::DateTime::from_timestamp_millis(self.generated_at)
            .map(|t| t.format("%Y-%m-%d").to_string())
            .unwrap_or_default();
        let base = format!("{}{day}/{}", reports.prefix, self.run_id);
        let json = Bytes::from(serde_json::to_vec_pretty(self).unwrap_or_default());
        let html = Bytes::from(self.to_html());
        let mut keys = Vec::new();
        for (key, body) in [
            (format!("{base}.json"), json),
            (format!("{base}.html"), html),
        ] {
            p.store
                .put(
                    &reports.bucket,
                    &key,
                    body,
                    &BTreeMap::new(),
                    &WriteCondition::Absent,
                )
                .await?;
            keys.push(key);
        }
        Ok(keys)
    }

    /// CloudWatch embedded-metric-format lines, one per source and window: missing, stale,
    /// stuck, orphaned, quarantined, mismatches, repaired, lag, late, rejected and rescued
    /// rows, ignored values, and the objects each tier checked.
    pub fn metric_lines(&self) -> Vec<String> {
        self.sources
            .iter()
            .map(|s| {
                serde_json::json!({
                    "_aws": {
                        "Timestamp": self.generated_at,
                        "CloudWatchMetrics": [{
                            "Namespace": "tidemark",
                            "Dimensions": [["source_id"]],
                            "Metrics": [
                                {"Name": "Missing", "Unit": "Count"},
                                {"Name": "Stale", "Unit": "Count"},
                                {"Name": "Stuck", "Unit": "Count"},
                                {"Name": "Orphaned", "Unit": "Count"},
                                {"Name": "Quarantined", "Unit": "Count"},
                                {"Name": "Unchecked", "Unit": "Count"},
                                {"Name": "Mismatches", "Unit": "Count"},
                                {"Name": "Repaired", "Unit": "Count"},
                                {"Name": "LagSeconds", "Unit": "Seconds"},
                                {"Name": "LateRows", "Unit": "Count"},
                                {"Name": "RejectedRows", "Unit": "Count"},
                                {"Name": "RescuedRows", "Unit": "Count"},
                                {"Name": "IgnoredValues", "Unit": "Count"},
                                {"Name": "Checked", "Unit": "Count"},
                                {"Name": "DeepChecked", "Unit": "Count"}
                            ]
                        }]
                    },
                    "source_id": s.source_id,
                    "Missing": s.count(FindingKind::Missing),
                    "Stale": s.count(FindingKind::Stale),
                    "Stuck": s.count(FindingKind::Stuck),
                    "Orphaned": s.count(FindingKind::Orphaned),
                    "Quarantined": s.count(FindingKind::Quarantined),
                    "Unchecked": s.count(FindingKind::Unchecked) + usize::from(s.error.is_some()),
                    "Mismatches": s.mismatch_count(),
                    "Repaired": s.repaired(),
                    "LagSeconds": s.lag_ms / 1000,
                    "LateRows": s.late_rows,
                    "RejectedRows": s.rejected_rows,
                    "RescuedRows": s.rescued_rows,
                    "IgnoredValues": s.ignored.values,
                    "Checked": s.checked.cheap,
                    "DeepChecked": s.checked.deep,
                    "window_from": rfc3339(s.window.from_ms),
                    "window_to": rfc3339(s.window.to_ms),
                })
                .to_string()
            })
            .chain(self.freshness.iter().map(|f| {
                let silence = self.generated_at - f.last_commit_ms.unwrap_or(f.since_ms);
                serde_json::json!({
                    "_aws": {
                        "Timestamp": self.generated_at,
                        "CloudWatchMetrics": [{
                            "Namespace": "tidemark",
                            "Dimensions": [["source_id"]],
                            "Metrics": [
                                {"Name": "FreshnessBreached", "Unit": "Count"},
                                {"Name": "RecentRows", "Unit": "Count"},
                                {"Name": "SilenceSeconds", "Unit": "Seconds"}
                            ]
                        }]
                    },
                    "source_id": f.source_id,
                    "FreshnessBreached": u8::from(f.breached),
                    "RecentRows": f.rows,
                    "SilenceSeconds": silence.max(0) / 1000,
                    "max_silence_seconds": f.max_silence_ms / 1000,
                    "min_rows_per_window": f.min_rows,
                })
                .to_string()
            }))
            .collect()
    }

    /// A self-contained HTML page a person reads at a glance.
    pub fn to_html(&self) -> String {
        let esc = |s: &str| {
            s.replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
                .replace('"', "&quot;")
        };
        let mut h = String::new();
        h.push_str("<!doctype html><html><head><meta charset=\"utf-8\"><title>tidemark reconciliation</title><style>\
            body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}\
            h1{font-size:20px}h2{font-size:16px;margin-top:2em}\
            table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}\
            th{background:#f3f3f3}td.k,th.k{text-align:left;font-family:monospace}\
            .ok{color:#fff;background:#2a7d2a;padding:2px 8px;border-radius:4px}\
            .bad{color:#fff;background:#b3261e;padding:2px 8px;border-radius:4px}\
            tr.diff td{background:#fde7e7}</style></head><body>");
        h.push_str(&format!(
            "<h1>tidemark reconciliation</h1><p>run <code>{}</code>, generated {} — {}</p>",
            esc(&self.run_id),
            rfc3339(self.generated_at),
            if self.clean() {
                "<span class=\"ok\">clean</span>".to_string()
            } else {
                let n: usize = self
                    .sources
                    .iter()
                    .map(|s| s.finding_count() + s.mismatch_count())
                    .sum();
                format!("<span class=\"bad\">{n} problem(s)</span>")
            }
        ));
        for s in &self.sources {
            h.push_str(&format!(
                "<h2>{}{} &nbsp; {} → {} {}</h2><p>{} object(s) under {}{}</p>",
                esc(&s.source_id),
                if s.closed_day {
                    " &nbsp; closed day, every object deep-checked"
                } else {
                    ""
                },
                rfc3339(s.window.from_ms),
                rfc3339(s.window.to_ms),
                if s.clean() {
                    "<span class=\"ok\">clean</span>"
                } else {
                    "<span class=\"bad\">problems</span>"
                },
                s.objects,
                s.prefixes
                    .iter()
                    .map(|p| format!("<code>{}</code>", esc(p)))
                    .collect::<Vec<_>>()
                    .join(", "),
                if let Some(f) = &s.fan_out {
                    format!(
                        " — <b>split into {} part(s)</b>{} (job <code>{}</code>): they are checked \
                         in parallel, and the merged report is written when the last one is",
                        f.parts,
                        if f.planned { "" } else { " so far" },
                        esc(&f.job)
                    )
                } else if let Some(e) = &s.error {
                    format!(" — <b>not reconciled</b>: {}", esc(e))
                } else if s.complete {
                    String::new()
                } else {
                    format!(
                        " — <b>incomplete</b>, resumes after <code>{}</code>",
                        esc(s.resume_after.as_deref().unwrap_or(""))
                    )
                }
            ));
            h.push_str(&format!(
                "<p>checked: {} object(s) by the cheap tier (listing vs ledger, output footers), \
                 {} by the deep tier (source recounted, sum columns read back; sample {}%, and \
                 every object with a cheap-tier finding)</p>",
                s.checked.cheap,
                s.checked.deep,
                s.deep_sample * 100.0
            ));
            if !s.deep_checked.is_empty() {
                h.push_str("<details><summary>deep-checked keys</summary><p>");
                let keys: Vec<String> = s
                    .deep_checked
                    .iter()
                    .map(|k| format!("<code>{}</code>", esc(k)))
                    .collect();
                h.push_str(&keys.join(", "));
                h.push_str("</p></details>");
            }
            h.push_str("<table><tr><th class=\"k\">kind</th>");
            for k in [
                "missing",
                "stale",
                "stuck",
                "quarantined",
                "orphaned",
                "unchecked",
                "mismatches",
                "repaired",
            ] {
                h.push_str(&format!("<th>{k}</th>"));
            }
            h.push_str("</tr><tr><td class=\"k\">objects</td>");
            for n in [
                s.count(FindingKind::Missing),
                s.count(FindingKind::Stale),
                s.count(FindingKind::Stuck),
                s.count(FindingKind::Quarantined),
                s.count(FindingKind::Orphaned),
                s.count(FindingKind::Unchecked),
                s.mismatch_count(),
                s.repaired(),
            ] {
                h.push_str(&format!("<td>{n}</td>"));
            }
            h.push_str("</tr></table>");
            if let Some(b) = &s.bookmark {
                h.push_str(&format!(
                    "<p{}>bookmark keys: <b>{} LATE rows</b> in this window (keys at or below the mark, never emitted); since the source began: {} objects, {} rows emitted, {} late, {} re-exported and skipped</p>",
                    if s.late_rows > 0 { " class=\"diff\"" } else { "" },
                    s.late_rows, b.objects, b.emitted, b.late, b.skipped
                ));
            }
            if s.rejected_rows > 0 {
                h.push_str(&format!(
                    "<p class=\"diff\">bad rows: <b>{} rows rejected</b> by the objects of this window (in their rejects files under <code>_rejects/</code>)</p>",
                    s.rejected_rows
                ));
            }
            if s.rescued_rows > 0 {
                h.push_str(&format!(
                    "<p class=\"diff\">rescued values: <b>{} rows</b> of the objects of this window hold values in the rescued column (counted in their rows)</p>",
                    s.rescued_rows
                ));
            }
            if !s.ignored.is_empty() {
                h.push_str(&ignored_html(&s.ignored, esc));
            }
            let t = &s.totals;
            let cols: BTreeSet<&String> = t
                .ledger
                .sums
                .keys()
                .chain(t.deep.source.sums.keys())
                .chain(t.deep.ledger.sums.keys())
                .chain(t.deep.lake.sums.keys())
                .collect();
            h.push_str("<table><tr><th class=\"k\">counted from</th><th>objects</th><th>rows</th>");
            for c in &cols {
                h.push_str(&format!("<th>sum({})</th>", esc(c)));
            }
            h.push_str("</tr>");
            // Each tier's rows are compared with its reference: the ledger for the footers,
            // the source recount for the deep tier.
            let differs =
                |a: &Tally, b: &Tally, sums: bool| a.rows != b.rows || (sums && a.sums != b.sums);
            for (name, tally, differs) in [
                ("ledger (every done object)", &t.ledger, false),
                (
                    "lake, rows from footers (every done object)",
                    &t.lake,
                    differs(&t.lake, &t.ledger, false),
                ),
                ("deep: source (recount)", &t.deep.source, false),
                (
                    "deep: ledger",
                    &t.deep.ledger,
                    differs(&t.deep.ledger, &t.deep.source, true),
                ),
                (
                    "deep: lake (sum columns read back)",
                    &t.deep.lake,
                    differs(&t.deep.lake, &t.deep.source, true),
                ),
            ] {
                h.push_str(&format!(
                    "<tr{}><td class=\"k\">{name}</td><td>{}</td><td>{}</td>",
                    if differs { " class=\"diff\"" } else { "" },
                    tally.objects,
                    tally.rows
                ));
                for c in &cols {
                    h.push_str(&format!(
                        "<td>{}</td>",
                        esc(tally.sums.get(*c).map(String::as_str).unwrap_or("–"))
                    ));
                }
                h.push_str("</tr>");
            }
            h.push_str("</table>");
            if !s.findings.is_empty() {
                h.push_str("<table><tr><th class=\"k\">finding</th><th class=\"k\">tier</th><th class=\"k\">key</th><th class=\"k\">detail</th><th>rows</th><th class=\"k\">sums</th><th class=\"k\">repair</th></tr>");
                for f in &s.findings {
                    let sums: Vec<String> =
                        f.sums.iter().map(|(c, v)| format!("{c} {v}")).collect();
                    h.push_str(&format!(
                        "<tr><td class=\"k\">{:?}</td><td class=\"k\">{}</td><td class=\"k\">{}</td><td class=\"k\">{}</td><td>{}</td><td class=\"k\">{}</td><td class=\"k\">{}</td></tr>",
                        f.kind,
                        f.tier.as_str(),
                        esc(&f.key),
                        esc(&f.detail),
                        f.rows.map_or("–".into(), |r| r.to_string()),
                        esc(&sums.join(", ")),
                        esc(f.repair.as_deref().unwrap_or("–"))
                    ));
                }
                h.push_str("</table>");
            }
            if !s.omitted.is_empty() {
                h.push_str(&format!(
                    "<p>not listed (the lists keep {} of each): {} finding(s), {} mismatch(es), \
                     {} deep-checked key(s); the counts above include them</p>",
                    parts::MAX_LISTED,
                    s.omitted.findings.values().sum::<u64>(),
                    s.omitted.mismatches,
                    s.omitted.deep_checked
                ));
            }
            if !s.mismatches.is_empty() {
                h.push_str("<table><tr><th class=\"k\">mismatch</th><th class=\"k\">tier</th><th class=\"k\">key</th><th class=\"k\">measure</th><th>expected</th><th>found</th></tr>");
                for m in &s.mismatches {
                    h.push_str(&format!(
                        "<tr class=\"diff\"><td class=\"k\">{:?}</td><td class=\"k\">{}</td><td class=\"k\">{}</td><td class=\"k\">{}</td><td>{}</td><td>{}</td></tr>",
                        m.kind,
                        m.tier.as_str(),
                        esc(&m.key),
                        esc(&m.measure),
                        esc(&m.expected),
                        esc(&m.found)
                    ));
                }
                h.push_str("</table>");
            }
        }
        if !self.jobs.is_empty() {
            h.push_str("<h2>backfill jobs</h2><table><tr><th class=\"k\">job</th><th class=\"k\">source</th><th class=\"k\">state</th><th>enqueued</th><th>processed</th><th>duplicate</th><th>skipped</th><th>quarantined</th><th>failed attempts</th><th>outstanding</th><th>rows</th></tr>");
            for j in &self.jobs {
                h.push_str(&format!(
                    "<tr><td class=\"k\">{}</td><td class=\"k\">{}</td><td class=\"k\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&j.job.id),
                    esc(&j.job.source_id),
                    j.state.as_str(),
                    j.job.plan.enqueued,
                    j.counts.processed,
                    j.counts.duplicate,
                    j.counts.skipped,
                    j.counts.quarantined,
                    j.counts.failures,
                    j.outstanding,
                    j.counts.rows
                ));
            }
            h.push_str("</table>");
        }
        if !self.freshness.is_empty() {
            h.push_str(
                "<h2>Freshness</h2><table><tr><th class=\"k\">source</th><th>rows since</th>\
                 <th>objects</th><th>min rows</th><th class=\"k\">last commit</th><th></th></tr>",
            );
            for f in &self.freshness {
                h.push_str(&format!(
                    "<tr{}><td class=\"k\">{}</td><td>{} ({})</td><td>{}</td><td>{}</td>\
                     <td class=\"k\">{}</td><td>{}</td></tr>",
                    if f.breached { " class=\"diff\"" } else { "" },
                    esc(&f.source_id),
                    f.rows,
                    rfc3339(f.since_ms),
                    f.objects,
                    f.min_rows,
                    f.last_commit_ms.map_or("none seen".into(), rfc3339),
                    if f.breached {
                        "<span class=\"bad\">silent</span>"
                    } else {
                        "<span class=\"ok\">fresh</span>"
                    },
                ));
            }
            h.push_str("</table>");
        }
        h.push_str("</body></html>");
        h
    }
}

/// A manual reconciliation request (the reconcile function's manual-invoke payload).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManualRequest {
    /// Only this source (default: all).
    #[serde(default)]
    pub source: Option<String>,
    /// Window start, RFC 3339.
    pub from: String,
    /// Window end, RFC 3339 (exclusive).
    pub to: String,
    /// Re-drive what is missing, stale, stuck or orphaned (default true).
    #[serde(default = "yes")]
    pub repair: bool,
    /// Check every object with the deep tier too (default false).
    #[serde(default)]
    pub deep: bool,
    /// The deep tier's sample for this run, a fraction in [0, 1] (default: each source's
    /// `reconcile.deep_sample`).
    #[serde(default)]
    pub sample: Option<f64>,
}

fn yes() -> bool {
    true
}

/// A reconciliation invocation that cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum InvocationError {
    /// The payload is neither a scheduled event nor a manual request.
    #[error(
        "not a scheduled event nor a manual request {{source?, from, to, repair?, deep?, sample?}}: {0}"
    )]
    Payload(String),
    /// No such source.
    #[error("no source {0:?} in the configuration")]
    UnknownSource(String),
    /// A scheduled run needs somewhere to remember its windows.
    #[error(
        "scheduled reconciliation needs \"reports\" in the configuration (it keeps its window state there)"
    )]
    NoReports,
    /// Processing failed outside any one object.
    #[error(transparent)]
    Process(#[from] ProcessError),
}

fn parse_rfc3339(field: &str, s: &str) -> std::result::Result<i64, InvocationError> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|d| d.timestamp_millis())
        .map_err(|e| InvocationError::Payload(format!("{field}: {s:?}: {e}")))
}

const DAY_MS: i64 = 86_400_000;

/// The UTC days that end inside `(window.from_ms, window.to_ms]`: the days a window that
/// reached its end has closed.
fn closed_days(window: Window) -> Vec<Window> {
    let mut days = Vec::new();
    let mut midnight = (window.from_ms.div_euclid(DAY_MS) + 1) * DAY_MS;
    while midnight <= window.to_ms {
        days.push(Window {
            from_ms: midnight - DAY_MS,
            to_ms: midnight,
        });
        midnight += DAY_MS;
    }
    days
}

/// Serve one reconcile invocation: a scheduled event closes, per enabled source, the windows
/// since the last closed one up to `now − grace` (at most `max_window_minutes` at a time) and
/// remembers them (and, with `reconcile.deep_closed_days`, then checks each day they closed
/// with the deep tier); a manual request re-checks the given window. Reports are written when
/// the configuration names a reports location, and metric lines are printed for CloudWatch.
pub async fn handle(
    p: &Pipeline,
    config: &crate::config::Config,
    payload: &serde_json::Value,
    ctx: &RunContext,
    stop_at_ms: i64,
) -> std::result::Result<(Report, Vec<String>), InvocationError> {
    handle_with(p, config, payload, ctx, stop_at_ms, None).await
}

/// [`handle`], splitting a window with more objects than `reconcile.part_objects` into
/// parts sent to `queue` (see [`parts`]) when one is given and the configuration has a
/// reports location; such a window's entry says so, and its merged report is written when
/// its last part is checked.
pub async fn handle_with(
    p: &Pipeline,
    config: &crate::config::Config,
    payload: &serde_json::Value,
    ctx: &RunContext,
    stop_at_ms: i64,
    queue: Option<&dyn crate::ports::WorkQueue>,
) -> std::result::Result<(Report, Vec<String>), InvocationError> {
    let queue = queue.filter(|_| config.reports.is_some());
    let now = p.clock.now_ms();
    let scheduled = payload.get("detail-type").and_then(|v| v.as_str()) == Some("Scheduled Event");
    let mut report = Report {
        run_id: ctx.run_id.clone(),
        generated_at: now,
        sources: Vec::new(),
        jobs: Vec::new(),
        freshness: Vec::new(),
    };
    let opts = Options {
        stop_at_ms,
        ..Options::default()
    };
    if scheduled {
        let reports = config.reports.as_ref().ok_or(InvocationError::NoReports)?;
        for source in config
            .sources
            .iter()
            .filter(|s| s.doc.mode == crate::config::Mode::Enable)
        {
            let (mut state, etag) = load_state(p, reports, source.id()).await?;
            let moved = match queue {
                Some(queue) => {
                    split_window(
                        p,
                        config,
                        queue,
                        source,
                        &mut state,
                        &opts,
                        ctx,
                        &mut report,
                    )
                    .await
                }
                _ => scheduled_window(p, source, &mut state, &opts, ctx, &mut report).await,
            };
            let days = closed_day_checks(p, source, &mut state, &opts, ctx, &mut report).await;
            if moved || days {
                save_state(p, reports, source.id(), &state, etag).await?;
            }
            match freshness(p, source, now).await {
                Ok(Some(f)) => report.freshness.push(f),
                Ok(None) => {}
                Err(e) => tracing::warn!(source_id = source.id(), error = %e,
                    "freshness not computed"),
            }
        }
        if let Some(queue) = queue {
            report
                .sources
                .extend(parts::tend(p, queue, config, ctx, stop_at_ms).await);
        }
    } else {
        let req: ManualRequest = serde_json::from_value(payload.clone())
            .map_err(|e| InvocationError::Payload(e.to_string()))?;
        let window = Window {
            from_ms: parse_rfc3339("from", &req.from)?,
            to_ms: parse_rfc3339("to", &req.to)?,
        };
        if let Some(f) = req.sample.filter(|f| !(0.0..=1.0).contains(f)) {
            return Err(InvocationError::Payload(format!(
                "sample: {f} is not a fraction in [0, 1]"
            )));
        }
        let sources: Vec<&Source> = match &req.source {
            Some(id) => vec![
                config
                    .source(id)
                    .ok_or_else(|| InvocationError::UnknownSource(id.clone()))?,
            ],
            None => config.sources.iter().collect(),
        };
        let opts = Options {
            repair: req.repair,
            deep_sample: if req.deep { Some(1.0) } else { req.sample },
            ..opts.clone()
        };
        for source in sources {
            if let Some(queue) = queue {
                match parts::fan_out(p, queue, source, window, &opts, false).await {
                    Ok(Some(fan_out)) => {
                        report
                            .sources
                            .push(parts::split_entry(source, window, fan_out));
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        report
                            .sources
                            .push(SourceReport::failed(source, window, e.to_string()));
                        continue;
                    }
                }
            }
            let r = reconcile_source(p, source, window, opts.clone(), ctx)
                .await
                .unwrap_or_else(|e| SourceReport::failed(source, window, e.to_string()));
            report.sources.push(r);
        }
    }
    report.add_jobs(p).await;
    let keys = match &config.reports {
        Some(reports) if !report.sources.is_empty() => report.write(p, reports).await?,
        _ => Vec::new(),
    };
    Ok((report, keys))
}

/// A scheduled run's window of `source` when windows may be split: a split window in flight
/// is looked after (its listing resumed, or its merge done if its merger died; else left to
/// its parts), and a new window is split if it is large, checked whole if not. Returns
/// whether `state` moved.
#[allow(clippy::too_many_arguments)]
async fn split_window(
    p: &Pipeline,
    config: &crate::config::Config,
    queue: &dyn crate::ports::WorkQueue,
    source: &Source,
    state: &mut WindowState,
    opts: &Options,
    ctx: &RunContext,
    report: &mut Report,
) -> bool {
    // A split that has not finished in a day (a part lost, e.g. deleted from the DLQ) is
    // abandoned: its window is split again, afresh, below.
    let mut abandoned = None;
    if let Some((window, job)) = &state.fanned
        && let Ok(Some((j, _))) = p.ledger.get_job(job).await
        && j.plan.merged.is_none()
        && p.clock.now_ms() - j.started_at > parts::ABANDON_AFTER_MS
    {
        tracing::warn!(source_id = source.id(), job = %job, "a split window unfinished for a day is split again");
        abandoned = Some(*window);
        state.fanned = None;
    }
    if let Some((window, job)) = state.fanned.clone() {
        let status = match parts::resume(p, queue, config, &job, opts.stop_at_ms).await {
            Ok(fan_out) => fan_out,
            Err(e) => {
                report
                    .sources
                    .push(SourceReport::failed(source, window, e.to_string()));
                return false;
            }
        };
        // Every part checked and nobody merged (a merger that died): merge now. The merge
        // closes the window and saves the state itself.
        match parts::merge_if_done(p, config, &job, ctx).await {
            Ok(Some((merged, _))) => report.sources.extend(merged.sources),
            Ok(None) => report
                .sources
                .push(parts::split_entry(source, window, status)),
            Err(e) => report
                .sources
                .push(SourceReport::failed(source, window, e.to_string())),
        }
        return false;
    }
    let Some(window) = abandoned.or_else(|| next_window(p, source, state)) else {
        return false;
    };
    if state.partial.is_some() {
        // A window checked whole that a run stopped inside goes on whole.
        return scheduled_window(p, source, state, opts, ctx, report).await;
    }
    match parts::fan_out(p, queue, source, window, opts, true).await {
        Ok(Some(fan_out)) => {
            state.fanned = Some((window, fan_out.job.clone()));
            report
                .sources
                .push(parts::split_entry(source, window, fan_out));
            true
        }
        Ok(None) => scheduled_window(p, source, state, opts, ctx, report).await,
        Err(e) => {
            report
                .sources
                .push(SourceReport::failed(source, window, e.to_string()));
            false
        }
    }
}

/// The next window a scheduled run of `source` closes: after the last closed one, up to
/// `now − grace`, at most `max_window_minutes` long; `None` when it would be empty.
fn next_window(p: &Pipeline, source: &Source, state: &WindowState) -> Option<Window> {
    let rc = &source.doc.reconcile;
    let max_window = i64::from(rc.max_window_minutes) * 60_000;
    let to_limit = p.clock.now_ms() - i64::from(rc.grace_minutes) * 60_000;
    let from = state.closed_through_ms.unwrap_or(to_limit - max_window);
    let to = to_limit.min(from + max_window);
    (to > from).then_some(Window {
        from_ms: from,
        to_ms: to,
    })
}

/// A scheduled run's window of `source`: the one the last run stopped inside, or the next
/// one. Returns whether `state` moved (a window closed, or a cursor to resume from).
async fn scheduled_window(
    p: &Pipeline,
    source: &Source,
    state: &mut WindowState,
    opts: &Options,
    ctx: &RunContext,
    report: &mut Report,
) -> bool {
    let rc = &source.doc.reconcile;
    let (window, start_after) = match state.partial.take() {
        // Resume the window the last run stopped inside.
        Some((window, after)) => (window, Some(after)),
        None => match next_window(p, source, state) {
            Some(window) => (window, None),
            None => return false,
        },
    };
    let opts = Options {
        start_after: start_after.clone(),
        ..opts.clone()
    };
    let r = match reconcile_source(p, source, window, opts, ctx).await {
        Ok(r) => r,
        Err(e) => {
            // This source's window stays as it was; the other sources go on.
            state.partial = start_after.map(|after| (window, after));
            report
                .sources
                .push(SourceReport::failed(source, window, e.to_string()));
            return false;
        }
    };
    let moved = if r.checked() {
        state.closed_through_ms = Some(window.to_ms);
        if rc.deep_closed_days {
            state
                .closed_days
                .extend(closed_days(window).into_iter().map(|day| (day, None)));
        }
        true
    } else if let Some(after) = &r.resume_after {
        state.partial = Some((window, after.clone()));
        true
    } else {
        // A window with unchecked objects stays open: the next run checks it again.
        state.partial = start_after.map(|after| (window, after));
        false
    };
    report.sources.push(r);
    moved
}

/// The deep checks of the days closed windows passed (`reconcile.deep_closed_days`), oldest
/// first, while time is left; each is its own entry of the report. Returns whether `state`
/// moved.
async fn closed_day_checks(
    p: &Pipeline,
    source: &Source,
    state: &mut WindowState,
    opts: &Options,
    ctx: &RunContext,
    report: &mut Report,
) -> bool {
    if !source.doc.reconcile.deep_closed_days {
        // Turned off since: the days still waiting are not checked.
        let waiting = !state.closed_days.is_empty();
        state.closed_days.clear();
        return waiting;
    }
    let mut moved = false;
    while let Some((day, after)) = state.closed_days.first().cloned() {
        if p.clock.now_ms() >= opts.stop_at_ms {
            break;
        }
        let opts = Options {
            deep_sample: Some(1.0),
            start_after: after,
            ..opts.clone()
        };
        let mut r = match reconcile_source(p, source, day, opts, ctx).await {
            Ok(r) => r,
            Err(e) => {
                let mut failed = SourceReport::failed(source, day, e.to_string());
                failed.closed_day = true;
                report.sources.push(failed);
                break;
            }
        };
        r.closed_day = true;
        let next = if r.checked() {
            state.closed_days.remove(0);
            moved = true;
            true
        } else if let Some(after) = &r.resume_after {
            state.closed_days[0].1 = Some(after.clone());
            moved = true;
            false
        } else {
            // Something could not be checked: the day is checked again by the next run.
            false
        };
        report.sources.push(r);
        if !next {
            break;
        }
    }
    moved
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_is_stable_and_about_the_fraction_asked() {
        let keys: Vec<String> = (0..10_000)
            .map(|i| format!("in/2026/11/{i:05}.csv"))
            .collect();
        let taken = |fraction| {
            keys.iter()
                .filter(|k| sampled(k, "9b2cf535f27731c974343645a3985328", fraction))
                .count()
        };
        assert_eq!(taken(0.0), 0);
        assert_eq!(taken(1.0), keys.len());
        let one_percent = taken(0.01);
        assert!((60..=140).contains(&one_percent), "{one_percent}");
        let half = taken(0.5);
        assert!((4_800..=5_200).contains(&half), "{half}");
        // The same key and ETag always; a new version is drawn afresh.
        let key = &keys[0];
        let picks: Vec<bool> = (0..64)
            .map(|v| sampled(key, &format!("etag-{v}"), 0.5))
            .collect();
        assert!(picks.contains(&true) && picks.contains(&false));
        for (v, pick) in picks.iter().enumerate() {
            assert_eq!(sampled(key, &format!("etag-{v}"), 0.5), *pick);
        }
        // A sample contains every smaller one.
        for k in &keys[..1000] {
            let e = "0cc175b9c0f1b6a831c399e269772661";
            assert!(!sampled(k, e, 0.1) || sampled(k, e, 0.2), "{k}");
        }
    }

    /// The entry of a checked window of a source `orders`, with nothing found.
    pub(super) fn checked_entry() -> (Source, SourceReport) {
        let doc = r#"{"sources":[{"source_id":"orders","bucket":"landing","prefix":"in/",
            "format":"jsonl","schema":[{"name":"id","type":"int64"}],
            "output":{"bucket":"lake","prefix":"orders/"}}]}"#;
        let source = crate::config::Config::from_json(doc).unwrap().sources[0].clone();
        let window = Window {
            from_ms: 0,
            to_ms: DAY_MS,
        };
        let mut entry = SourceReport::failed(&source, window, String::new());
        entry.error = None;
        entry.complete = true;
        (source, entry)
    }

    #[test]
    fn rescued_rows_and_ignored_values_are_metrics_and_shown_in_the_page() {
        let (_, mut entry) = checked_entry();
        let report = |entry: &SourceReport| Report {
            run_id: "run-1".into(),
            generated_at: DAY_MS,
            sources: vec![entry.clone()],
            jobs: Vec::new(),
            freshness: Vec::new(),
        };
        let metrics = |r: &Report| -> serde_json::Value {
            serde_json::from_str(&r.metric_lines()[0]).unwrap()
        };
        let quiet = report(&entry);
        let line = metrics(&quiet);
        assert_eq!(
            (&line["RescuedRows"], &line["IgnoredValues"]),
            (&0.into(), &0.into())
        );
        let html = quiet.to_html();
        assert!(!html.contains("rescued values") && !html.contains("ignored field"));

        entry.rescued_rows = 3;
        entry.ignored = IgnoredFields {
            values: 9,
            fields: BTreeMap::from([
                ("detail[\"<x>\"]".into(), 2),
                ("userIdentity.extra".into(), 5),
            ]),
        };
        let r = report(&entry);
        let line = metrics(&r);
        assert_eq!(
            (&line["RescuedRows"], &line["IgnoredValues"]),
            (&3.into(), &9.into())
        );
        let names: Vec<&str> = line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["Name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"RescuedRows") && names.contains(&"IgnoredValues"));
        let html = r.to_html();
        assert!(html.contains("rescued values: <b>3 rows</b>"), "{html}");
        assert!(html.contains("ignored: <b>9 values</b>"), "{html}");
        // Most values first, paths escaped, and the values of fields not named.
        let extra = html.find("<td class=\"k\">userIdentity.extra</td><td>5</td>");
        let detail = html.find("<td class=\"k\">detail[&quot;&lt;x&gt;&quot;]</td><td>2</td>");
        assert!(extra.unwrap() < detail.unwrap(), "{html}");
        assert!(
            html.contains("<td class=\"k\">(other fields)</td><td>2</td>"),
            "{html}"
        );
        // The JSON report carries them, and reads back.
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["sources"][0]["rescued_rows"], 3);
        assert_eq!(
            json["sources"][0]["ignored"]["fields"]["userIdentity.extra"],
            5
        );
        let back: Report = serde_json::from_value(json).unwrap();
        assert_eq!(back.sources[0].ignored, entry.ignored);
    }

    #[test]
    fn a_window_closes_the_days_whose_midnights_it_passes() {
        let day = DAY_MS;
        let m = 20_000 * day;
        let w = |from_ms, to_ms| Window { from_ms, to_ms };
        assert_eq!(closed_days(w(m - 3_600_000, m - 1)), []);
        assert_eq!(closed_days(w(m - 3_600_000, m)), [w(m - day, m)]);
        assert_eq!(closed_days(w(m, m + day - 1)), [], "starts at a midnight");
        assert_eq!(
            closed_days(w(m - 1, m + day + 5)),
            [w(m - day, m), w(m, m + day)]
        );
    }
}
