//! Reconciliation: nothing is skipped silently. For one source and one closed window of
//! last-modified times, list the source objects under the window's prefixes only, compare
//! them with the ledger and the outputs, and (optionally) repair through the same per-object
//! path as ingest:
//! - missing (in S3, not done), stale (done for another version), stuck (claimed past its
//!   lease), quarantined, orphaned (done, source gone);
//! - rows and each configured sum, three ways: the source objects recounted (the honest
//!   check), the ledger, and the Parquet outputs read back — Glue Data Quality's RowCountMatch
//!   and AggregateMatch, exact for integers and decimals, within a stated tolerance for floats.
//!
//! The result is a [`Report`] (JSON, an HTML page, CloudWatch embedded-metric lines). Windows
//! that a scheduled run closed are remembered in a small state object beside the reports, so
//! each is closed once; any window can be re-checked on demand.

pub mod outputs;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;
use tokio_util::io::SyncIoBridge;

use crate::config::{ReportsDoc, Source};
use crate::convert::{self, SumValue};
use crate::error::{ProcessError, Result};
use crate::model::{Record, Status, Target, VersionRef};
use crate::ports::{GetOutcome, ObjectMeta, PutOutcome, WriteCondition};
use crate::process::{Pipeline, RunContext};
use crate::schema::ColumnType;

/// A window of last-modified times, `[from_ms, to_ms)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// Start (inclusive), ms since the epoch.
    pub from_ms: i64,
    /// End (exclusive), ms since the epoch.
    pub to_ms: i64,
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
    /// Details (status, versions, last error).
    pub detail: String,
    /// Rows of the source object (recounted): what the lake lacks or holds wrongly.
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
    /// The ledger's rows or sums differ from a recount of the source object.
    LedgerVsSource,
    /// The Parquet output's rows or sums differ from the ledger's.
    LakeVsLedger,
    /// A committed output does not exist.
    OutputMissing,
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
    pub sums: BTreeMap<String, String>,
}

/// The three tallies over the window's done objects.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Recounted from the source objects.
    pub source: Tally,
    /// As recorded in the ledger.
    pub ledger: Tally,
    /// Read back from the Parquet outputs.
    pub lake: Tally,
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
    /// Objects found wrong.
    pub findings: Vec<Finding>,
    /// Counts that disagree.
    pub mismatches: Vec<Mismatch>,
    /// Rows and sums three ways.
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
    /// window (as their commits record them; each object's count is also checked against a
    /// recount of the source).
    #[serde(default)]
    pub rejected_rows: u64,
    /// A source with bookmark keys: its counts since it began (objects, emitted, late and
    /// re-exported rows), from its lock record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bookmark: Option<crate::model::BookmarkCounts>,
}

impl SourceReport {
    /// Complete, with no findings and no mismatches.
    pub fn clean(&self) -> bool {
        self.complete
            && self.error.is_none()
            && self.findings.is_empty()
            && self.mismatches.is_empty()
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
            bookmark: None,
        }
    }

    fn count(&self, kind: FindingKind) -> usize {
        self.findings.iter().filter(|f| f.kind == kind).count()
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
}

/// Options of a reconciliation.
#[derive(Debug, Clone)]
pub struct Options {
    /// Re-drive missing, stale, stuck and orphaned objects through the per-object path.
    pub repair: bool,
    /// Recount the source objects (reads them all; the honest check).
    pub recount: bool,
    /// Stop taking new objects once the clock passes this, ms since the epoch.
    pub stop_at_ms: i64,
    /// Check at most this many objects (then stop, incomplete).
    pub max_objects: Option<u64>,
    /// Resume a window: skip keys up to and including this one.
    pub start_after: Option<String>,
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
        .map(|c| c.ty)
}

fn same(a: &SumValue, b: &SumValue, tolerance: f64) -> bool {
    match (a, b) {
        (SumValue::Float(x), SumValue::Float(y)) => {
            (x - y).abs() <= tolerance * x.abs().max(y.abs()).max(1.0)
        }
        _ => a == b,
    }
}

/// Running tallies: 0 source, 1 ledger, 2 lake.
#[derive(Default)]
struct Counter {
    sums: [BTreeMap<String, SumValue>; 3],
    tallies: [Tally; 3],
}

impl Counter {
    fn add(&mut self, which: usize, rows: u64, sums: &BTreeMap<String, SumValue>) {
        self.tallies[which].objects += 1;
        self.tallies[which].rows += rows;
        for (col, v) in sums {
            self.sums[which]
                .entry(col.clone())
                .and_modify(|t| *t = t.plus(v))
                .or_insert(*v);
        }
    }

    fn finish(mut self) -> Totals {
        for (tally, sums) in self.tallies.iter_mut().zip(&self.sums) {
            tally.sums = sums
                .iter()
                .map(|(k, v)| (k.clone(), v.to_string()))
                .collect();
        }
        let [source, ledger, lake] = self.tallies;
        Totals {
            source,
            ledger,
            lake,
        }
    }
}

/// Compare two row counts and sum maps, recording each difference.
#[allow(clippy::too_many_arguments)]
fn compare(
    out: &mut Vec<Mismatch>,
    kind: MismatchKind,
    key: &str,
    tolerance: f64,
    expected: (u64, &BTreeMap<String, SumValue>),
    found: (u64, &BTreeMap<String, SumValue>),
) {
    if expected.0 != found.0 {
        out.push(Mismatch {
            kind,
            key: key.to_string(),
            measure: "rows".into(),
            expected: expected.0.to_string(),
            found: found.0.to_string(),
        });
    }
    for (col, e) in expected.1 {
        match found.1.get(col) {
            Some(f) if same(e, f, tolerance) => {}
            f => out.push(Mismatch {
                kind,
                key: key.to_string(),
                measure: format!("sum({col})"),
                expected: e.to_string(),
                found: f.map_or("absent".into(), |f| f.to_string()),
            }),
        }
    }
}

/// Reconcile `source` over `window`.
pub async fn reconcile_source(
    p: &Pipeline,
    source: &Source,
    window: Window,
    opts: Options,
    ctx: &RunContext,
) -> Result<SourceReport> {
    let bucket = &source.doc.bucket;
    let prefixes = window_prefixes(source, window);
    let now = p.clock.now_ms();

    // Every key under the prefixes (to tell orphans), and the window's objects.
    let mut listed = BTreeSet::new();
    let mut objects: BTreeMap<String, ObjectMeta> = BTreeMap::new();
    for prefix in &prefixes {
        let mut token = None;
        loop {
            let page = p.store.list(bucket, prefix, token.as_deref()).await?;
            for o in page.objects {
                if !source.matches(bucket, &o.key) {
                    continue;
                }
                listed.insert(o.key.clone());
                if o.last_modified >= window.from_ms && o.last_modified < window.to_ms {
                    objects.insert(o.key.clone(), o);
                }
            }
            match page.next {
                Some(next) => token = Some(next),
                None => break,
            }
        }
    }
    let records: HashMap<String, Record> = p
        .ledger
        .list(source.id())
        .await?
        .into_iter()
        .map(|r| (r.key.clone(), r))
        .collect();

    let tolerance = source.doc.reconcile.float_tolerance;
    let mut findings = Vec::new();
    let mut mismatches = Vec::new();
    let mut counter = Counter::default();
    let mut lag_ms = 0;
    let mut complete = true;
    let mut resume_after = None;
    let mut last_key: Option<String> = None;
    let mut late_rows = 0;
    let mut rejected_rows = 0;

    let start = opts.start_after.as_deref().unwrap_or("");
    let todo = objects.iter().filter(|(k, _)| k.as_str() > start);
    for (checked, (key, object)) in (0u64..).zip(todo) {
        if p.clock.now_ms() >= opts.stop_at_ms || opts.max_objects.is_some_and(|m| checked >= m) {
            complete = false;
            resume_after = last_key.clone().or_else(|| opts.start_after.clone());
            break;
        }
        last_key = Some(key.clone());
        // The honest count: every object of the window, read again.
        let recounted = if opts.recount {
            match recount_source(p, source, key, object).await {
                Ok(Ok(stats)) => {
                    counter.add(0, stats.rows, &stats.sums);
                    Some(Ok(stats))
                }
                Ok(Err(message)) => Some(Err(message)),
                Err(e) => {
                    findings.push(unchecked(key, &e));
                    continue;
                }
            }
        } else {
            None
        };
        let finding = match records.get(key) {
            None => Some((FindingKind::Missing, "no ledger record".to_string())),
            Some(r) => match r.status {
                Status::Claimed => r.claim.as_ref().filter(|c| c.lease_until <= now).map(|c| {
                    (
                        FindingKind::Stuck,
                        format!("claimed by run {} past its lease", c.run_id),
                    )
                }),
                Status::Quarantined => Some((
                    FindingKind::Quarantined,
                    r.last_error.clone().unwrap_or_default(),
                )),
                Status::Done => match r.committed.as_ref().map(|c| &c.target) {
                    Some(Target::Version(v)) if v.etag.as_deref() == Some(object.etag.as_str()) => {
                        let committed = r.committed.as_ref().expect("done has a commit");
                        let classified = r.bookmark.as_ref().map(|b| b.counts);
                        late_rows += classified.map_or(0, |c| c.late);
                        rejected_rows += committed.rejected;
                        match count_object(
                            p,
                            source,
                            key,
                            (committed, classified.as_ref()),
                            recounted.as_ref(),
                            tolerance,
                            &mut counter,
                            &mut mismatches,
                        )
                        .await
                        {
                            Ok(()) => None,
                            Err(e) => Some((FindingKind::Unchecked, e.to_string())),
                        }
                    }
                    Some(Target::Version(v)) => Some((
                        FindingKind::Stale,
                        format!(
                            "done for etag {}, the object is now etag {}",
                            v.etag.as_deref().unwrap_or("-"),
                            object.etag
                        ),
                    )),
                    _ => Some((FindingKind::Missing, "no committed version".into())),
                },
                other => Some((
                    FindingKind::Missing,
                    format!(
                        "status {}{}",
                        other.as_str(),
                        r.last_error
                            .as_deref()
                            .map(|e| format!(": {e}"))
                            .unwrap_or_default()
                    ),
                )),
            },
        };
        if let Some((kind, detail)) = finding {
            if kind != FindingKind::Quarantined {
                lag_ms = lag_ms.max(now - object.last_modified);
            }
            let repair = if opts.repair && kind.repairable() {
                let target = Target::Version(VersionRef {
                    version: object.etag.clone(),
                    version_id: object.version_id.clone(),
                    etag: Some(object.etag.clone()),
                    sequencer: None,
                    size: Some(object.size),
                });
                Some(repair_with(p, source, key, target, ctx).await)
            } else {
                None
            };
            let (rows, sums) = match &recounted {
                Some(Ok(stats)) => (
                    Some(stats.rows),
                    stats
                        .sums
                        .iter()
                        .map(|(k, v)| (k.clone(), v.to_string()))
                        .collect(),
                ),
                _ => (None, BTreeMap::new()),
            };
            findings.push(Finding {
                kind,
                key: key.clone(),
                detail,
                rows,
                sums,
                repair,
            });
        }
    }

    // Orphans: committed in this window's time or later, under its prefixes, source gone.
    if complete {
        let mut orphans: Vec<&Record> = records
            .values()
            .filter(|r| r.status == Status::Done)
            .filter(|r| {
                r.committed
                    .as_ref()
                    .is_some_and(|c| c.committed_at >= window.from_ms)
            })
            .filter(|r| prefixes.iter().any(|pre| r.key.starts_with(pre.as_str())))
            .filter(|r| !listed.contains(&r.key))
            .collect();
        orphans.sort_by(|a, b| a.key.cmp(&b.key));
        for r in orphans {
            let repair = if opts.repair {
                let target = Target::Delete(crate::model::DeleteRef {
                    sequencer: None,
                    version_id: None,
                    delete_marker: false,
                });
                Some(repair_with(p, source, &r.key, target, ctx).await)
            } else {
                None
            };
            let committed = r.committed.as_ref();
            findings.push(Finding {
                kind: FindingKind::Orphaned,
                key: r.key.clone(),
                detail: "done, but the source object is gone".into(),
                rows: committed.map(|c| c.rows),
                sums: committed.map(|c| c.sums.clone()).unwrap_or_default(),
                repair,
            });
        }
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
        late_rows,
        rejected_rows,
        bookmark,
        source_id: source.id().to_string(),
        window,
        prefixes,
        objects: objects.len() as u64,
        findings,
        mismatches,
        totals: counter.finish(),
        lag_ms,
        complete,
        resume_after,
        resumed_after: opts.start_after.clone(),
        error: None,
    })
}

fn unchecked(key: &str, e: &ProcessError) -> Finding {
    Finding {
        kind: FindingKind::Unchecked,
        key: key.to_string(),
        detail: e.to_string(),
        rows: None,
        sums: BTreeMap::new(),
        repair: None,
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

fn describe(rows: u64, sums: &BTreeMap<String, SumValue>) -> String {
    let mut s = format!("rows {rows}");
    for (col, v) in sums {
        s.push_str(&format!(", sum({col}) {v}"));
    }
    s
}

#[allow(clippy::too_many_arguments)]
async fn count_object(
    p: &Pipeline,
    source: &Source,
    key: &str,
    (committed, classified): (
        &crate::model::Committed,
        Option<&crate::model::BookmarkCounts>,
    ),
    recounted: Option<&std::result::Result<convert::ConvertStats, String>>,
    tolerance: f64,
    counter: &mut Counter,
    mismatches: &mut Vec<Mismatch>,
) -> Result<()> {
    let columns = &source.doc.sum_columns;
    let ledger_sums: BTreeMap<String, SumValue> = committed
        .sums
        .iter()
        .filter_map(|(col, s)| {
            let ty = sum_type(source, col)?;
            Some((col.clone(), SumValue::parse_for(&ty, s).ok()?))
        })
        .collect();
    counter.add(1, committed.rows, &ledger_sums);

    // The lake: every output read back.
    let mut lake_rows = 0;
    let mut lake_sums: BTreeMap<String, SumValue> = BTreeMap::new();
    let mut outputs_ok = true;
    for out in &committed.outputs {
        let found = match p.store.get(&out.bucket, &out.key, None).await? {
            GetOutcome::Found { mut body, .. } => {
                let mut bytes = Vec::new();
                body.read_to_end(&mut bytes)
                    .await
                    .map_err(|e| ProcessError::Internal(e.to_string()))?;
                convert::tally_parquet(Bytes::from(bytes), columns).map_err(|e| e.to_string())
            }
            _ => Err("no such object".to_string()),
        };
        match found {
            Ok((rows, sums)) => {
                lake_rows += rows;
                for (col, v) in sums {
                    lake_sums
                        .entry(col)
                        .and_modify(|t| *t = t.plus(&v))
                        .or_insert(v);
                }
            }
            Err(message) => {
                outputs_ok = false;
                mismatches.push(Mismatch {
                    kind: MismatchKind::OutputMissing,
                    key: key.to_string(),
                    measure: format!("s3://{}/{}", out.bucket, out.key),
                    expected: describe(committed.rows, &ledger_sums),
                    found: message,
                });
            }
        }
    }
    if let Some(rejects) = &committed.rejects {
        let found = match p.store.head(&rejects.bucket, &rejects.key).await? {
            Some(found) if found.etag == rejects.etag => None,
            Some(found) => Some(format!("ETag {}", found.etag)),
            None => Some("no such object".to_string()),
        };
        if let Some(found) = found {
            mismatches.push(Mismatch {
                kind: MismatchKind::OutputMissing,
                key: key.to_string(),
                measure: format!("s3://{}/{}", rejects.bucket, rejects.key),
                expected: format!(
                    "the rejects file of {} rows (ETag {})",
                    committed.rejected, rejects.etag
                ),
                found,
            });
        }
    }
    if outputs_ok {
        counter.add(2, lake_rows, &lake_sums);
        compare(
            mismatches,
            MismatchKind::LakeVsLedger,
            key,
            tolerance,
            (committed.rows, &ledger_sums),
            (lake_rows, &lake_sums),
        );
    }

    match recounted {
        // A source with bookmark keys: every row of the object was emitted, reported late
        // or recognized as re-exported (the ledger's rows and sums are the emitted ones, of
        // every version of the key).
        Some(Ok(stats)) if classified.is_some() => compare(
            mismatches,
            MismatchKind::LedgerVsSource,
            key,
            tolerance,
            (stats.rows, &BTreeMap::new()),
            (classified.map_or(0, |c| c.rows()), &BTreeMap::new()),
        ),
        Some(Ok(stats)) => {
            compare(
                mismatches,
                MismatchKind::LedgerVsSource,
                key,
                tolerance,
                (stats.rows, &stats.sums),
                (committed.rows, &ledger_sums),
            );
            let rejected = stats.rejects.len() as u64;
            if rejected != committed.rejected {
                mismatches.push(Mismatch {
                    kind: MismatchKind::LedgerVsSource,
                    key: key.to_string(),
                    measure: "rejected rows".into(),
                    expected: rejected.to_string(),
                    found: committed.rejected.to_string(),
                });
            }
        }
        Some(Err(message)) => mismatches.push(Mismatch {
            kind: MismatchKind::SourceUnreadable,
            key: key.to_string(),
            measure: "rows".into(),
            expected: "a readable object".into(),
            found: message.clone(),
        }),
        None => {}
    }
    Ok(())
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
    let counted = tokio::task::spawn_blocking(move || convert::count(reader, &spec))
        .await
        .map_err(|e| ProcessError::Internal(e.to_string()))?;
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
    /// stuck, orphaned, quarantined, mismatches, repaired, lag.
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
                                {"Name": "RejectedRows", "Unit": "Count"}
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
                    "Mismatches": s.mismatches.len(),
                    "Repaired": s.repaired(),
                    "LagSeconds": s.lag_ms / 1000,
                    "LateRows": s.late_rows,
                    "RejectedRows": s.rejected_rows,
                    "window_from": rfc3339(s.window.from_ms),
                    "window_to": rfc3339(s.window.to_ms),
                })
                .to_string()
            })
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
                    .map(|s| s.findings.len() + s.mismatches.len())
                    .sum();
                format!("<span class=\"bad\">{n} problem(s)</span>")
            }
        ));
        for s in &self.sources {
            h.push_str(&format!(
                "<h2>{} &nbsp; {} → {} {}</h2><p>{} object(s) under {}{}</p>",
                esc(&s.source_id),
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
                if let Some(e) = &s.error {
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
                s.mismatches.len(),
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
            let cols: BTreeSet<&String> = s
                .totals
                .source
                .sums
                .keys()
                .chain(s.totals.ledger.sums.keys())
                .chain(s.totals.lake.sums.keys())
                .collect();
            h.push_str("<table><tr><th class=\"k\">counted from</th><th>objects</th><th>rows</th>");
            for c in &cols {
                h.push_str(&format!("<th>sum({})</th>", esc(c)));
            }
            h.push_str("</tr>");
            let reference = &s.totals.source;
            for (name, t) in [
                ("source (recount)", &s.totals.source),
                ("ledger", &s.totals.ledger),
                ("lake (Parquet)", &s.totals.lake),
            ] {
                let differs = t.rows != reference.rows || t.sums != reference.sums;
                h.push_str(&format!(
                    "<tr{}><td class=\"k\">{name}</td><td>{}</td><td>{}</td>",
                    if differs { " class=\"diff\"" } else { "" },
                    t.objects,
                    t.rows
                ));
                for c in &cols {
                    h.push_str(&format!(
                        "<td>{}</td>",
                        esc(t.sums.get(*c).map(String::as_str).unwrap_or("–"))
                    ));
                }
                h.push_str("</tr>");
            }
            h.push_str("</table>");
            if !s.findings.is_empty() {
                h.push_str("<table><tr><th class=\"k\">finding</th><th class=\"k\">key</th><th class=\"k\">detail</th><th>rows</th><th class=\"k\">sums</th><th class=\"k\">repair</th></tr>");
                for f in &s.findings {
                    let sums: Vec<String> =
                        f.sums.iter().map(|(c, v)| format!("{c} {v}")).collect();
                    h.push_str(&format!(
                        "<tr><td class=\"k\">{:?}</td><td class=\"k\">{}</td><td class=\"k\">{}</td><td>{}</td><td class=\"k\">{}</td><td class=\"k\">{}</td></tr>",
                        f.kind,
                        esc(&f.key),
                        esc(&f.detail),
                        f.rows.map_or("–".into(), |r| r.to_string()),
                        esc(&sums.join(", ")),
                        esc(f.repair.as_deref().unwrap_or("–"))
                    ));
                }
                h.push_str("</table>");
            }
            if !s.mismatches.is_empty() {
                h.push_str("<table><tr><th class=\"k\">mismatch</th><th class=\"k\">key</th><th class=\"k\">measure</th><th>expected</th><th>found</th></tr>");
                for m in &s.mismatches {
                    h.push_str(&format!(
                        "<tr class=\"diff\"><td class=\"k\">{:?}</td><td class=\"k\">{}</td><td class=\"k\">{}</td><td>{}</td><td>{}</td></tr>",
                        m.kind,
                        esc(&m.key),
                        esc(&m.measure),
                        esc(&m.expected),
                        esc(&m.found)
                    ));
                }
                h.push_str("</table>");
            }
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
}

fn yes() -> bool {
    true
}

/// A reconciliation invocation that cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum InvocationError {
    /// The payload is neither a scheduled event nor a manual request.
    #[error("not a scheduled event nor a manual request {{source?, from, to, repair?}}: {0}")]
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

/// Serve one reconcile invocation: a scheduled event closes, per enabled source, the windows
/// since the last closed one up to `now − grace` (at most `max_window_minutes` at a time) and
/// remembers them; a manual request re-checks the given window. Reports are written when the
/// configuration names a reports location, and metric lines are printed for CloudWatch.
pub async fn handle(
    p: &Pipeline,
    config: &crate::config::Config,
    payload: &serde_json::Value,
    ctx: &RunContext,
    stop_at_ms: i64,
) -> std::result::Result<(Report, Vec<String>), InvocationError> {
    let now = p.clock.now_ms();
    let scheduled = payload.get("detail-type").and_then(|v| v.as_str()) == Some("Scheduled Event");
    let mut report = Report {
        run_id: ctx.run_id.clone(),
        generated_at: now,
        sources: Vec::new(),
    };
    let opts = Options {
        repair: true,
        recount: true,
        stop_at_ms,
        max_objects: None,
        start_after: None,
    };
    if scheduled {
        let reports = config.reports.as_ref().ok_or(InvocationError::NoReports)?;
        for source in config
            .sources
            .iter()
            .filter(|s| s.doc.mode == crate::config::Mode::Enable)
        {
            let rc = &source.doc.reconcile;
            let (mut state, etag) = load_state(p, reports, source.id()).await?;
            let (window, start_after) = match state.partial.take() {
                // Resume the window the last run stopped inside.
                Some((window, after)) => (window, Some(after)),
                None => {
                    let max_window = i64::from(rc.max_window_minutes) * 60_000;
                    let to_limit = now - i64::from(rc.grace_minutes) * 60_000;
                    let from = state.closed_through_ms.unwrap_or(to_limit - max_window);
                    let to = to_limit.min(from + max_window);
                    if to <= from {
                        continue;
                    }
                    (
                        Window {
                            from_ms: from,
                            to_ms: to,
                        },
                        None,
                    )
                }
            };
            let opts = Options {
                start_after,
                ..opts.clone()
            };
            let r = match reconcile_source(p, source, window, opts, ctx).await {
                Ok(r) => r,
                Err(e) => {
                    // This source's window stays as it was; the other sources go on.
                    report
                        .sources
                        .push(SourceReport::failed(source, window, e.to_string()));
                    continue;
                }
            };
            if r.checked() {
                state.closed_through_ms = Some(window.to_ms);
            } else if let Some(after) = &r.resume_after {
                state.partial = Some((window, after.clone()));
            }
            // A window with unchecked objects stays open: the next run checks it again.
            if r.checked() || r.resume_after.is_some() {
                save_state(p, reports, source.id(), &state, etag).await?;
            }
            report.sources.push(r);
        }
    } else {
        let req: ManualRequest = serde_json::from_value(payload.clone())
            .map_err(|e| InvocationError::Payload(e.to_string()))?;
        let window = Window {
            from_ms: parse_rfc3339("from", &req.from)?,
            to_ms: parse_rfc3339("to", &req.to)?,
        };
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
            ..opts.clone()
        };
        for source in sources {
            let r = reconcile_source(p, source, window, opts.clone(), ctx)
                .await
                .unwrap_or_else(|e| SourceReport::failed(source, window, e.to_string()));
            report.sources.push(r);
        }
    }
    let keys = match &config.reports {
        Some(reports) if !report.sources.is_empty() => report.write(p, reports).await?,
        _ => Vec::new(),
    };
    Ok((report, keys))
}
