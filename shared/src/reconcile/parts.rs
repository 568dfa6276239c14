//! A window too large for one invocation, split into parts checked in parallel and merged
//! into one report.
//!
//! The coordinator (a scheduled or manual reconcile) lists the window's keys once — only the
//! keys: one LIST request per thousand — and cuts them into parts of `reconcile.part_objects`
//! window objects: consecutive key ranges `(after, through]`, the last one open-ended. Each
//! part goes to the reconcile queue as a message of a job ([`crate::jobs`], kind
//! `reconcile`); the reconcile function's event source mapping hands parts to parallel
//! invocations (locally: the fleet of `tidemark reconcile`). A part is checked like a whole
//! window restricted to its range — its listing, its ledger records, its orphans, both tiers
//! — and its result is written beside the reports (`<reports prefix>_runs/<job>/part-NNNNNN.json`)
//! before its message is counted. The invocation that finishes the last part merges the
//! results into one report (JSON, HTML, metric lines) and, for a scheduled window, closes it.
//!
//! Safety: the coordinator records each part on the job before sending it, so a coordinator
//! that dies resends the same part under the same number; a part delivered twice keeps the
//! result written first and is counted once; the merge is claimed on the job record with a
//! lease, and a merger that dies is replaced by the next
//! scheduled run. A part that runs out of time leaves its window incomplete (reported as
//! such, and a scheduled window stays open): a part is meant to be one invocation's share.
//! The merged report lists at most [`MAX_LISTED`] findings, mismatches and deep-checked keys
//! each (the counts and metrics include every one).

use std::collections::BTreeMap;

use aws_lambda_events::sqs::SqsBatchResponse;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;

use super::{
    Finding, InvocationError, Mismatch, Omitted, Options, Report, SourceReport, Tally, Window,
    load_state, reconcile_source, rfc3339, save_state, sum_type, window_prefixes,
};
use crate::config::{Config, ReportsDoc, Source};
use crate::convert::SumValue;
use crate::error::{ProcessError, Result};
use crate::jobs::{Job, JobCounts, JobKind, JobState, JobStatus, PendingPage, Plan, new_job_id};
use crate::ports::{GetOutcome, JobWrite, PutOutcome, WorkQueue, WriteCondition};
use crate::process::{Pipeline, RunContext};

/// Findings, mismatches and deep-checked keys listed at most in a merged report (each).
pub const MAX_LISTED: usize = 10_000;
/// A split window whose job has not finished after this long (a part lost) is split again by
/// the next scheduled run, ms.
pub const ABANDON_AFTER_MS: i64 = 24 * 3600 * 1000;
/// How long a merger's claim on a merge holds, ms.
const MERGE_LEASE_MS: i64 = 5 * 60 * 1000;

/// The tag of a part message body (`"tidemark": "reconcile_part"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartTag {
    /// A part of a split window.
    ReconcilePart,
}

/// One part of a split window: a message on the reconcile queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Part {
    /// Always `reconcile_part`.
    pub tidemark: PartTag,
    /// The job of the split window.
    pub job: String,
    /// The part's number in the job.
    pub message: u64,
    /// The source.
    pub source: String,
    /// The window.
    pub window: Window,
    /// Keys after this one (`None`: from the start of the window's prefixes).
    pub after: Option<String>,
    /// Keys up to this one (`None`: to the end).
    pub through: Option<String>,
    /// Repair what is found.
    pub repair: bool,
    /// The deep tier's sample (`None`: the source's).
    pub deep_sample: Option<f64>,
}

impl Part {
    /// The message body.
    pub fn to_body(&self) -> String {
        serde_json::to_string(self).expect("a part serializes")
    }
}

/// What the job of a split window was asked (its `request`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Split {
    source: String,
    window: Window,
    repair: bool,
    deep_sample: Option<f64>,
    /// A scheduled window: closed in the window state by the merge.
    scheduled: bool,
}

/// A window split into parts, as the coordinator's report entry tells it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FanOut {
    /// The job of the split window.
    pub job: String,
    /// Parts sent so far.
    pub parts: u64,
    /// Every part is sent (else a later run goes on listing).
    pub planned: bool,
}

/// The entry of a coordinator's report for a split window.
pub(super) fn split_entry(source: &Source, window: Window, fan_out: FanOut) -> SourceReport {
    let mut entry = SourceReport::failed(source, window, String::new());
    entry.error = None;
    entry.fan_out = Some(fan_out);
    entry
}

/// Where the result of part `n` of `job` is kept.
fn part_key(reports: &ReportsDoc, job: &str, n: u64) -> String {
    format!("{}_runs/{job}/part-{n:06}.json", reports.prefix)
}

/// Where the claim of part `n` of `job` is kept: the invocation checking it, until when.
fn claim_key(reports: &ReportsDoc, job: &str, n: u64) -> String {
    format!("{}_runs/{job}/part-{n:06}.claim", reports.prefix)
}

/// The longest a part's check may hold its claim: a Lambda invocation's limit, plus the
/// lease margin of object claims.
const PART_LEASE_MS: i64 = 15 * 60 * 1000 + 30_000;

/// A part's claim, as stored.
#[derive(Debug, Serialize, Deserialize)]
struct PartClaim {
    run_id: String,
    lease_until: i64,
}

/// Take part `part`'s claim for this invocation: `Ok(None)` when it is ours (new, ours
/// already, or taken over from a claimant whose lease ran out), `Ok(Some(claim))` when another
/// live check holds it. Conditional writes (create if absent, replace at the ETag read), so
/// two deliveries of a part's message never check it at once: the first check to finish
/// would write the part's result, and a repair made meanwhile by the other would not be in it.
async fn claim_part(
    p: &Pipeline,
    reports: &ReportsDoc,
    part: &Part,
    ctx: &RunContext,
    stop_at_ms: i64,
) -> Result<Option<PartClaim>> {
    let now = p.clock.now_ms();
    let key = claim_key(reports, &part.job, part.message);
    let mine = PartClaim {
        run_id: ctx.run_id.clone(),
        lease_until: stop_at_ms.min(now.saturating_add(PART_LEASE_MS)),
    };
    let body = Bytes::from(serde_json::to_vec(&mine).unwrap_or_default());
    let (key, body) = (&key, &body);
    let put = |condition: WriteCondition| async move {
        p.store
            .put(
                &reports.bucket,
                key,
                body.clone(),
                &BTreeMap::new(),
                &condition,
            )
            .await
    };
    if let PutOutcome::Written { .. } = put(WriteCondition::Absent).await? {
        return Ok(None);
    }
    let (etag, held) = match p.store.get(&reports.bucket, key, None).await? {
        GetOutcome::Found { meta, mut body } => {
            let mut text = Vec::new();
            body.read_to_end(&mut text)
                .await
                .map_err(|e| ProcessError::Internal(e.to_string()))?;
            (meta.etag, serde_json::from_slice::<PartClaim>(&text).ok())
        }
        // Gone or replaced between the two calls: someone else is at it.
        _ => {
            return Ok(Some(PartClaim {
                run_id: "(unknown)".into(),
                lease_until: now,
            }));
        }
    };
    match held {
        Some(h) if h.run_id == ctx.run_id => Ok(None),
        Some(h) if h.lease_until > now => Ok(Some(h)),
        // Its claimant died (or wrote garbage): take it over, if nobody else did first.
        _ => match put(WriteCondition::Matches(etag)).await? {
            PutOutcome::Written { .. } => Ok(None),
            PutOutcome::PreconditionFailed => Ok(Some(PartClaim {
                run_id: "(another taker)".into(),
                lease_until: now,
            })),
        },
    }
}

/// The result of part `part`, if a check wrote it.
async fn part_result(
    p: &Pipeline,
    reports: &ReportsDoc,
    part: &Part,
) -> Result<Option<SourceReport>> {
    let key = part_key(reports, &part.job, part.message);
    match p.store.get(&reports.bucket, &key, None).await? {
        GetOutcome::Found { mut body, .. } => {
            let mut text = Vec::new();
            body.read_to_end(&mut text)
                .await
                .map_err(|e| ProcessError::Internal(e.to_string()))?;
            Ok(serde_json::from_slice(&text).ok())
        }
        _ => Ok(None),
    }
}

/// Cuts a window's listing into parts: a cut after every `size` window objects, confirmed
/// when another window object follows (so the last part is never empty).
struct Cutter {
    size: u64,
    count: u64,
    /// The last cut made (the `after` of the next part).
    last_cut: Option<String>,
    /// A cut waiting for the next window object.
    candidate: Option<String>,
}

impl Cutter {
    /// A window object `key`: `Some((after, through))` when it confirms a cut before it.
    fn object(&mut self, key: &str) -> Option<(Option<String>, String)> {
        let confirmed = self.candidate.take().map(|through| {
            let after = self.last_cut.replace(through.clone());
            self.count = 0;
            (after, through)
        });
        self.count += 1;
        if self.count == self.size {
            self.candidate = Some(key.to_string());
        }
        confirmed
    }
}

/// The coordinator: split `window` of `source` into parts of `reconcile.part_objects` window
/// objects and send them as a new job's messages to `queue`; `None` (nothing sent, no job)
/// when the window holds no more objects than one part — then check it whole. Stops sending
/// at `opts.stop_at_ms` (a later [`resume`] goes on).
pub async fn fan_out(
    p: &Pipeline,
    queue: &dyn WorkQueue,
    source: &Source,
    window: Window,
    opts: &Options,
    scheduled: bool,
) -> Result<Option<FanOut>> {
    let split = Split {
        source: source.id().to_string(),
        window,
        repair: opts.repair,
        deep_sample: opts.deep_sample,
        scheduled,
    };
    let mut job: Option<Job> = None;
    let done = cut_and_send(p, queue, source, &split, None, &mut job, opts.stop_at_ms).await?;
    Ok(job.map(|j| FanOut {
        job: j.id,
        parts: j.plan.messages,
        planned: done,
    }))
}

/// Go on with the coordinator of a split window whose listing stopped at a deadline (and
/// resend a part it recorded and may not have sent).
pub async fn resume(
    p: &Pipeline,
    queue: &dyn WorkQueue,
    config: &Config,
    job_id: &str,
    stop_at_ms: i64,
) -> Result<FanOut> {
    let (job, _) = p
        .ledger
        .get_job(job_id)
        .await?
        .ok_or_else(|| gone(job_id))?;
    let split: Split =
        serde_json::from_value(job.request.clone()).map_err(|e| unreadable(&job, e))?;
    let source = config
        .source(&split.source)
        .ok_or_else(|| no_source(&split.source))?;
    let mut job = Some(job);
    let done = if job.as_ref().is_some_and(|j| j.plan.done) {
        true
    } else {
        let after = job.as_ref().and_then(|j| j.plan.cursor.clone());
        cut_and_send(p, queue, source, &split, after, &mut job, stop_at_ms).await?
    };
    let job = job.expect("the job exists");
    Ok(FanOut {
        job: job.id,
        parts: job.plan.messages,
        planned: done,
    })
}

fn gone(job: &str) -> ProcessError {
    ProcessError::Unsupported {
        source_id: String::new(),
        message: format!("reconcile job {job} is not in the ledger"),
    }
}

fn no_source(id: &str) -> ProcessError {
    ProcessError::Unsupported {
        source_id: id.to_string(),
        message: "no such source in the configuration (a part of a split window names it)".into(),
    }
}

fn unreadable(job: &Job, e: impl std::fmt::Display) -> ProcessError {
    ProcessError::Unsupported {
        source_id: job.source_id.clone(),
        message: format!("job {}: unreadable request: {e}", job.id),
    }
}

/// List the window after `after` (a cut already sent), cut it and send the parts; the job is
/// created at the first part. Returns whether every part is sent.
async fn cut_and_send(
    p: &Pipeline,
    queue: &dyn WorkQueue,
    source: &Source,
    split: &Split,
    after: Option<String>,
    job: &mut Option<Job>,
    stop_at_ms: i64,
) -> Result<bool> {
    // A part recorded and perhaps not sent by a coordinator that died: send it again.
    if let Some(j) = job.as_mut()
        && let Some(pending) = j.plan.pending.clone()
    {
        let through = Some(pending.through.clone()).filter(|t| !t.is_empty());
        send_part(
            p,
            queue,
            split,
            j,
            pending.after.clone(),
            through,
            Some(pending.first_message),
        )
        .await?;
    }
    let bucket = &source.doc.bucket;
    let window = split.window;
    let mut cutter = Cutter {
        size: source.doc.reconcile.part_objects,
        count: 0,
        last_cut: after.clone(),
        candidate: None,
    };
    for prefix in window_prefixes(source, window) {
        let mut page = match &after {
            Some(a) => p.store.list_after(bucket, &prefix, a).await?,
            None => p.store.list(bucket, &prefix, None).await?,
        };
        loop {
            for o in &page.objects {
                let in_window = o.last_modified >= window.from_ms && o.last_modified < window.to_ms;
                if !in_window || !source.matches(bucket, &o.key) {
                    continue;
                }
                if let Some((after, through)) = cutter.object(&o.key) {
                    if job.is_none() {
                        *job = Some(new_split_job(p, split).await?);
                    }
                    let j = job.as_mut().expect("just created");
                    send_part(p, queue, split, j, after, Some(through), None).await?;
                    if p.clock.now_ms() >= stop_at_ms {
                        return Ok(false);
                    }
                }
            }
            match page.next.take() {
                Some(token) => page = p.store.list(bucket, &prefix, Some(&token)).await?,
                None => break,
            }
        }
    }
    // The last part, open-ended, unless the window never needed splitting.
    let Some(j) = job.as_mut() else {
        return Ok(true);
    };
    send_part(p, queue, split, j, cutter.last_cut.clone(), None, None).await?;
    j.plan.done = true;
    j.plan.planned_at = Some(p.clock.now_ms());
    save(p, j).await?;
    Ok(true)
}

async fn new_split_job(p: &Pipeline, split: &Split) -> Result<Job> {
    let now = p.clock.now_ms();
    let job = Job {
        id: new_job_id(JobKind::Reconcile, now),
        kind: JobKind::Reconcile,
        source_id: split.source.clone(),
        request: serde_json::to_value(split).expect("a split serializes"),
        rev: 1,
        started_at: now,
        updated_at: now,
        plan: Plan::default(),
    };
    if !p.ledger.create_job(&job).await? {
        return Err(ProcessError::Unsupported {
            source_id: split.source.clone(),
            message: format!("a job {} exists already", job.id),
        });
    }
    Ok(job)
}

/// Record the part `(after, through]` on the job, send it, record it sent. `number`: the
/// number a pending part was recorded under (else the next one).
async fn send_part(
    p: &Pipeline,
    queue: &dyn WorkQueue,
    split: &Split,
    job: &mut Job,
    after: Option<String>,
    through: Option<String>,
    number: Option<u64>,
) -> Result<()> {
    let message = number.unwrap_or(job.plan.next_message);
    if number.is_none() {
        job.plan.pending = Some(PendingPage {
            after: after.clone(),
            through: through.clone().unwrap_or_default(),
            first_message: message,
            messages: 1,
        });
        job.plan.next_message += 1;
        save(p, job).await?;
    }
    let part = Part {
        tidemark: PartTag::ReconcilePart,
        job: job.id.clone(),
        message,
        source: split.source.clone(),
        window: split.window,
        after,
        through: through.clone(),
        repair: split.repair,
        deep_sample: split.deep_sample,
    };
    queue.send(&[part.to_body()]).await?;
    job.plan.pending = None;
    job.plan.cursor = through.or(job.plan.cursor.take());
    job.plan.messages += 1;
    save(p, job).await
}

/// Write the job, conditional on its revision.
async fn save(p: &Pipeline, job: &mut Job) -> Result<()> {
    let expected = job.rev;
    job.rev += 1;
    job.updated_at = p.clock.now_ms();
    match p.ledger.replace_job(job, expected).await? {
        JobWrite::Written => Ok(()),
        JobWrite::Conflict(_) => Err(ProcessError::Unsupported {
            source_id: job.source_id.clone(),
            message: format!(
                "job {}: changed by another writer (revision {expected})",
                job.id
            ),
        }),
    }
}

/// Check one part: its range of the window through both tiers, its result written beside
/// the reports, its message counted; and, if it was the last one, the merge. Returns the
/// merged report (and its keys) when this call merged.
pub async fn check_part(
    p: &Pipeline,
    config: &Config,
    part: &Part,
    ctx: &RunContext,
    stop_at_ms: i64,
) -> Result<Option<(Report, Vec<String>)>> {
    let source = config
        .source(&part.source)
        .ok_or_else(|| no_source(&part.source))?;
    let reports = config.reports.as_ref().ok_or_else(|| ProcessError::Unsupported {
        source_id: part.source.clone(),
        message: "a split window needs \"reports\" in the configuration (its parts' results are kept there)".into(),
    })?;
    let opts = Options {
        repair: part.repair,
        deep_sample: part.deep_sample,
        stop_at_ms,
        max_objects: None,
        start_after: part.after.clone(),
        through: part.through.clone(),
    };
    // A part delivered again after its check wrote the result is not checked again: counted
    // (once) and merged from what is written.
    let result = match part_result(p, reports, part).await? {
        Some(written) => written,
        None => {
            if let Some(held) = claim_part(p, reports, part, ctx, stop_at_ms).await? {
                return Err(ProcessError::Internal(format!(
                    "part {} of {} is being checked by {} until {}: its message comes back later",
                    part.message,
                    part.job,
                    held.run_id,
                    rfc3339(held.lease_until)
                )));
            }
            // A part that runs out of time is incomplete, and so is the merged window (which
            // then stays open): a part is one invocation's share (see
            // `reconcile.part_objects`).
            let result = reconcile_source(p, source, part.window, opts, ctx).await?;
            let body = Bytes::from(serde_json::to_vec(&result).unwrap_or_default());
            p.store
                .put(
                    &reports.bucket,
                    &part_key(reports, &part.job, part.message),
                    body,
                    &BTreeMap::new(),
                    &WriteCondition::Absent,
                )
                .await?;
            result
        }
    };
    let counts = JobCounts {
        items: result.objects,
        ..JobCounts::default()
    };
    p.ledger
        .finish_message(&part.job, part.message, &counts, p.clock.now_ms())
        .await?;
    merge_if_done(p, config, &part.job, ctx).await
}

/// Merge the parts of job `job_id` if every part is checked and nobody merged them (or the
/// merger's claim ran out): fold the parts' results into one entry, write the report,
/// close a scheduled window. Returns the report and its keys when this call merged.
pub async fn merge_if_done(
    p: &Pipeline,
    config: &Config,
    job_id: &str,
    ctx: &RunContext,
) -> Result<Option<(Report, Vec<String>)>> {
    let Some((mut job, counts)) = p.ledger.get_job(job_id).await? else {
        return Err(gone(job_id));
    };
    let now = p.clock.now_ms();
    let status = JobStatus::of(job.clone(), counts);
    let claimed = job
        .plan
        .merging
        .as_ref()
        .is_some_and(|(_, until)| *until > now);
    if status.state != JobState::Finished || job.plan.merged.is_some() || claimed {
        return Ok(None);
    }
    job.plan.merging = Some((ctx.run_id.clone(), now + MERGE_LEASE_MS));
    let expected = job.rev;
    job.rev += 1;
    if p.ledger.replace_job(&job, expected).await? != JobWrite::Written {
        return Ok(None); // another worker took the merge
    }
    let split: Split =
        serde_json::from_value(job.request.clone()).map_err(|e| unreadable(&job, e))?;
    let source = config
        .source(&split.source)
        .ok_or_else(|| no_source(&split.source))?;
    let reports = config
        .reports
        .as_ref()
        .ok_or_else(|| no_source(&split.source))?;
    let mut merged: Option<SourceReport> = None;
    for n in 0..job.plan.next_message {
        let key = part_key(reports, &job.id, n);
        let part: SourceReport = match p.store.get(&reports.bucket, &key, None).await? {
            GetOutcome::Found { mut body, .. } => {
                let mut bytes = Vec::new();
                body.read_to_end(&mut bytes)
                    .await
                    .map_err(|e| ProcessError::Internal(format!("reading {key}: {e}")))?;
                serde_json::from_slice(&bytes)
                    .map_err(|e| ProcessError::Internal(format!("part result {key}: {e}")))?
            }
            _ => {
                // Every finished part wrote its result first: a missing one was removed.
                let mut lost = SourceReport::failed(
                    source,
                    split.window,
                    format!(
                        "the result of part {n} (s3://{}/{key}) is missing",
                        reports.bucket
                    ),
                );
                lost.complete = true;
                lost
            }
        };
        fold(&mut merged, part, source);
    }
    let mut entry =
        merged.unwrap_or_else(|| SourceReport::failed(source, split.window, "no parts".into()));
    entry.prefixes = window_prefixes(source, split.window);
    let mut report = Report {
        run_id: job.id.clone(),
        generated_at: p.clock.now_ms(),
        sources: vec![entry],
        jobs: Vec::new(),
        freshness: Vec::new(),
    };
    report.add_jobs(p).await;
    let keys = report.write(p, reports).await?;
    if split.scheduled {
        close_window(
            p,
            reports,
            source,
            split.window,
            &job.id,
            report.sources[0].checked(),
        )
        .await?;
    }
    job.plan.merging = None;
    job.plan.merged = Some(keys.clone());
    save(p, &mut job).await?;
    Ok(Some((report, keys)))
}

/// The merge of a scheduled window: it is closed in the window state if every part checked
/// everything (else it stays open and the next run checks it again).
async fn close_window(
    p: &Pipeline,
    reports: &ReportsDoc,
    source: &Source,
    window: Window,
    job: &str,
    checked: bool,
) -> Result<()> {
    for _ in 0..5 {
        let (mut state, etag) = load_state(p, reports, source.id()).await?;
        if state
            .fanned
            .as_ref()
            .is_none_or(|(w, j)| *w != window || j != job)
        {
            return Ok(()); // the state moved on (an operator, or another merge)
        }
        state.fanned = None;
        if checked {
            state.closed_through_ms = Some(
                state
                    .closed_through_ms
                    .unwrap_or(i64::MIN)
                    .max(window.to_ms),
            );
            if source.doc.reconcile.deep_closed_days {
                state.closed_days.extend(
                    super::closed_days(window)
                        .into_iter()
                        .map(|day| (day, None)),
                );
            }
        }
        if save_state(p, reports, source.id(), &state, etag).await? {
            return Ok(());
        }
    }
    Err(ProcessError::Unsupported {
        source_id: source.id().to_string(),
        message: format!("the window state kept changing under the merge of job {job}"),
    })
}

/// Fold one part's result into the merged entry.
fn fold(into: &mut Option<SourceReport>, part: SourceReport, source: &Source) {
    let Some(m) = into else {
        let mut first = part;
        cap(&mut first);
        *into = Some(first);
        return;
    };
    m.objects += part.objects;
    m.checked.cheap += part.checked.cheap;
    m.checked.deep += part.checked.deep;
    m.deep_checked.extend(part.deep_checked);
    m.findings.extend(part.findings);
    m.mismatches.extend(part.mismatches);
    add_omitted(&mut m.omitted, &part.omitted);
    add_tally(&mut m.totals.ledger, &part.totals.ledger, source);
    add_tally(&mut m.totals.lake, &part.totals.lake, source);
    add_tally(&mut m.totals.deep.source, &part.totals.deep.source, source);
    add_tally(&mut m.totals.deep.ledger, &part.totals.deep.ledger, source);
    add_tally(&mut m.totals.deep.lake, &part.totals.deep.lake, source);
    m.lag_ms = m.lag_ms.max(part.lag_ms);
    m.complete &= part.complete;
    m.error = m.error.take().or(part.error);
    m.late_rows += part.late_rows;
    m.rejected_rows += part.rejected_rows;
    m.rescued_rows += part.rescued_rows;
    m.ignored.add(&part.ignored);
    m.ignored = m.ignored.trimmed(super::IGNORED_FIELDS_LISTED);
    m.bookmark = m.bookmark.or(part.bookmark);
    m.resume_after = None;
    m.resumed_after = None;
    cap(m);
}

fn add_omitted(into: &mut Omitted, other: &Omitted) {
    for (kind, n) in &other.findings {
        *into.findings.entry(*kind).or_default() += n;
    }
    into.mismatches += other.mismatches;
    into.deep_checked += other.deep_checked;
}

/// Keep at most [`MAX_LISTED`] of each list, counting what is left out.
fn cap(r: &mut SourceReport) {
    if r.findings.len() > MAX_LISTED {
        let left: Vec<Finding> = r.findings.split_off(MAX_LISTED);
        for f in left {
            *r.omitted.findings.entry(f.kind).or_default() += 1;
        }
    }
    if r.mismatches.len() > MAX_LISTED {
        let left: Vec<Mismatch> = r.mismatches.split_off(MAX_LISTED);
        r.omitted.mismatches += left.len() as u64;
    }
    if r.deep_checked.len() > MAX_LISTED {
        let left = r.deep_checked.split_off(MAX_LISTED);
        r.omitted.deep_checked += left.len() as u64;
    }
}

/// Add `other` to `into`, sums exactly by the columns' types.
fn add_tally(into: &mut Tally, other: &Tally, source: &Source) {
    into.objects += other.objects;
    into.rows += other.rows;
    for (col, value) in &other.sums {
        let Some(ty) = sum_type(source, col) else {
            continue;
        };
        let Ok(v) = SumValue::parse_for(&ty, value) else {
            continue;
        };
        let total = match into
            .sums
            .get(col)
            .and_then(|t| SumValue::parse_for(&ty, t).ok())
        {
            Some(t) => t.plus(&v),
            None => v,
        };
        into.sums.insert(col.clone(), total.to_string());
    }
}

/// Look after the split windows of manual runs (a scheduled window is looked after through
/// its window state): a coordinator that stopped at its deadline goes on, and a merge whose
/// merger died is done once its claim has run out. The merged entries are returned (their
/// reports are written as usual). Called by every scheduled run.
pub async fn tend(
    p: &Pipeline,
    queue: &dyn WorkQueue,
    config: &Config,
    ctx: &RunContext,
    stop_at_ms: i64,
) -> Vec<SourceReport> {
    let mut merged = Vec::new();
    let jobs = match p.ledger.list_jobs(JOBS_TENDED).await {
        Ok(jobs) => jobs,
        Err(e) => {
            tracing::warn!(error = %e, "split windows of manual runs could not be listed");
            return merged;
        }
    };
    for (job, _) in jobs {
        let manual =
            serde_json::from_value::<Split>(job.request.clone()).is_ok_and(|s| !s.scheduled);
        if job.kind != JobKind::Reconcile || job.plan.merged.is_some() || !manual {
            continue;
        }
        let tended = if job.plan.done {
            merge_if_done(p, config, &job.id, ctx).await
        } else {
            resume(p, queue, config, &job.id, stop_at_ms)
                .await
                .map(|_| None)
        };
        match tended {
            Ok(Some((report, _))) => merged.extend(report.sources),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(job = %job.id, error = %e, "a split window could not be looked after")
            }
        }
    }
    merged
}

/// Jobs a scheduled run looks at for [`tend`] (the most recent).
const JOBS_TENDED: usize = 20;

/// What one invocation of the reconcile function made of an SQS batch of parts.
#[derive(Debug, Default)]
pub struct PartsResponse {
    /// Reports merged by this invocation, with their keys.
    pub merged: Vec<(Report, Vec<String>)>,
    /// Messages to be delivered again.
    pub retry_messages: Vec<String>,
    /// Why they failed.
    pub errors: Vec<String>,
}

impl PartsResponse {
    /// The partial batch response ([`SqsBatchResponse`]), with the keys of the reports
    /// merged beside it (`merged`).
    pub fn to_json(&self) -> serde_json::Value {
        let mut response = SqsBatchResponse::default();
        response.set_failures(&self.retry_messages);
        let mut answer = serde_json::to_value(response).unwrap_or_default();
        answer["merged"] =
            serde_json::json!(self.merged.iter().map(|(_, keys)| keys).collect::<Vec<_>>());
        answer
    }
}

/// Is this invocation payload an SQS batch (of parts)?
pub fn is_sqs(payload: &serde_json::Value) -> bool {
    payload
        .get("Records")
        .and_then(|r| r.as_array())
        .and_then(|r| r.first())
        .and_then(|r| r.get("eventSource"))
        .and_then(|s| s.as_str())
        == Some("aws:sqs")
}

/// Serve an SQS batch of parts (the reconcile function's event source mapping on the
/// reconcile queue): each part checked in turn; a part that fails comes back.
pub async fn handle_parts(
    p: &Pipeline,
    config: &Config,
    payload: &serde_json::Value,
    ctx: &RunContext,
    stop_at_ms: i64,
) -> std::result::Result<PartsResponse, InvocationError> {
    let records = payload
        .get("Records")
        .and_then(|r| r.as_array())
        .ok_or_else(|| InvocationError::Payload("an SQS batch without Records".into()))?;
    let mut response = PartsResponse::default();
    for (i, record) in records.iter().enumerate() {
        let id = record
            .get("messageId")
            .and_then(|v| v.as_str())
            .ok_or_else(|| InvocationError::Payload(format!("Records[{i}].messageId is missing")))?
            .to_string();
        let part: std::result::Result<Part, String> = record
            .get("body")
            .and_then(|b| b.as_str())
            .ok_or_else(|| "no body".to_string())
            .and_then(|b| {
                serde_json::from_str(b).map_err(|e| format!("not a reconcile part: {e}"))
            });
        let outcome = match part {
            Ok(part) => check_part(p, config, &part, ctx, stop_at_ms)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(Some(merged)) => response.merged.push(merged),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(message_id = %id, error = %e, "reconcile part failed");
                response.errors.push(format!("message {id}: {e}"));
                response.retry_messages.push(id);
            }
        }
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_fall_after_every_full_part_and_the_last_part_is_never_empty() {
        let mut c = Cutter {
            size: 3,
            count: 0,
            last_cut: None,
            candidate: None,
        };
        let cuts: Vec<_> = (1..=7).filter_map(|i| c.object(&format!("k{i}"))).collect();
        assert_eq!(
            cuts,
            [
                (None, "k3".to_string()),
                (Some("k3".to_string()), "k6".to_string())
            ]
        );
        assert_eq!(
            c.last_cut.as_deref(),
            Some("k6"),
            "k7 is the open-ended last part"
        );
        // Exactly one part's worth: no cut is confirmed.
        let mut c = Cutter {
            size: 3,
            count: 0,
            last_cut: None,
            candidate: None,
        };
        assert!((1..=3).all(|i| c.object(&format!("k{i}")).is_none()));
    }

    #[test]
    fn the_merged_window_adds_up_the_rows_kept_aside_and_the_ignored_fields() {
        let (source, entry) = super::super::tests::checked_entry();
        let part = |rejected, rescued, fields: &[(&str, u64)]| {
            let mut p = entry.clone();
            p.rejected_rows = rejected;
            p.rescued_rows = rescued;
            p.ignored.fields = fields.iter().map(|(f, n)| (f.to_string(), *n)).collect();
            p.ignored.values = p.ignored.fields.values().sum::<u64>() + 1;
            p
        };
        let mut merged = None;
        fold(&mut merged, part(1, 2, &[("a", 3), ("b", 1)]), &source);
        fold(&mut merged, part(0, 5, &[("b", 4)]), &source);
        let m = merged.unwrap();
        assert_eq!((m.rejected_rows, m.rescued_rows), (1, 7));
        assert_eq!(m.ignored.values, 10);
        assert_eq!(m.ignored.most_frequent(2), [("b", 5), ("a", 3)]);

        // However many parts name fields, the merged entry names the most frequent.
        let mut merged = None;
        for i in 0..super::super::IGNORED_FIELDS_LISTED + 5 {
            let field = format!("f{i:02}");
            fold(&mut merged, part(0, 0, &[(&field, i as u64 + 1)]), &source);
        }
        let m = merged.unwrap();
        assert_eq!(m.ignored.fields.len(), super::super::IGNORED_FIELDS_LISTED);
        assert!(!m.ignored.fields.contains_key("f00"));
        assert_eq!(m.ignored.fields["f36"], 37);
    }

    #[test]
    fn a_part_names_its_kind_and_refuses_unknown_fields() {
        let part = Part {
            tidemark: PartTag::ReconcilePart,
            job: "rc-1".into(),
            message: 2,
            source: "orders".into(),
            window: Window {
                from_ms: 0,
                to_ms: 10,
            },
            after: Some("in/a".into()),
            through: None,
            repair: true,
            deep_sample: None,
        };
        let body = part.to_body();
        assert!(body.contains("\"tidemark\":\"reconcile_part\""), "{body}");
        assert_eq!(serde_json::from_str::<Part>(&body).unwrap(), part);
        let extra = body.replacen('{', "{\"x\":1,", 1);
        assert!(serde_json::from_str::<Part>(&extra).is_err());
    }
}
