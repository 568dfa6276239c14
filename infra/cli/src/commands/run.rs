//! `run` and `replay`: list a source's objects and drive each through the same per-object
//! path as ingest (`Pipeline::process` with the listed ETag as the version).
//!
//! `run` reads the source's ledger records once (`Ledger::list`, not one GET per object) and
//! skips the objects already done for their current ETag without counting them against the
//! bounds; it then takes objects oldest first (by last-modified, then key) until
//! `--max-objects` or `--max-bytes` is reached (Glue's boundedFiles / boundedSize, per
//! source: the object that reaches the byte bound is still taken). The source's mode applies,
//! with the operator's override (`tidemark mode`) taking precedence over the document.
//!
//! `replay` processes a range (prefix, last-modified since / until) with `disable`
//! semantics: every object in range is converted and its output replaced by key, and the
//! ledger is not touched.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::Instant;

use futures::StreamExt;
use serde::Serialize;
use serde_json::json;
use tidemark::config::{Mode, Source};
use tidemark::model::{Record, Status, Target, VersionRef};
use tidemark::ports::ObjectMeta;
use tidemark::process::{Outcome, Pipeline};
use tidemark::protocol::Skip;

use super::audit;
use super::print_json;
use crate::backend::{Backend, ModeOrigin};
use crate::render::{Table, progress, spinner};
use crate::when::parse_time;
use crate::{Error, Out};

/// Arguments of `run`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RunArgs {
    /// Only this source.
    #[arg(long)]
    pub source: Option<String>,
    /// Only keys under this prefix (a full key prefix, within the source's prefix).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Take at most N new objects per source (Glue's boundedFiles); the rest is left for the
    /// next run.
    #[arg(long, value_name = "N")]
    pub max_objects: Option<u64>,
    /// Stop taking new objects of a source once B bytes are taken (Glue's boundedSize).
    #[arg(long, value_name = "B")]
    pub max_bytes: Option<u64>,
    /// Objects processed at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
}

/// Arguments of `replay`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ReplayArgs {
    /// Only this source.
    #[arg(long)]
    pub source: Option<String>,
    /// Only keys under this prefix (a full key prefix, within the source's prefix).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Only objects last modified at or after TIME (RFC 3339, a date, or -2h style).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub since: Option<String>,
    /// Only objects last modified before TIME.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub until: Option<String>,
    /// Take at most N objects per source.
    #[arg(long, value_name = "N")]
    pub max_objects: Option<u64>,
    /// Stop taking objects of a source once B bytes are taken.
    #[arg(long, value_name = "B")]
    pub max_bytes: Option<u64>,
    /// Objects processed at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
}

/// What to run: `run` or `replay`, in one shape.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Only this source.
    pub source: Option<String>,
    /// Only keys under this prefix.
    pub prefix: Option<String>,
    /// Last modified at or after (TIME argument).
    pub since: Option<String>,
    /// Last modified before (TIME argument).
    pub until: Option<String>,
    /// Bound on objects taken per source.
    pub max_objects: Option<u64>,
    /// Bound on bytes taken per source.
    pub max_bytes: Option<u64>,
    /// Objects at once.
    pub concurrency: usize,
    /// Replay: `disable` semantics whatever the mode.
    pub replay: bool,
}

impl From<RunArgs> for Plan {
    fn from(a: RunArgs) -> Self {
        Self {
            source: a.source,
            prefix: a.prefix,
            max_objects: a.max_objects,
            max_bytes: a.max_bytes,
            concurrency: a.concurrency,
            ..Self::default()
        }
    }
}

impl From<ReplayArgs> for Plan {
    fn from(a: ReplayArgs) -> Self {
        Self {
            source: a.source,
            prefix: a.prefix,
            since: a.since,
            until: a.until,
            max_objects: a.max_objects,
            max_bytes: a.max_bytes,
            concurrency: a.concurrency,
            replay: true,
        }
    }
}

/// Counts of one run, per source or in total.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Objects of the source in range.
    pub listed: u64,
    /// Already done for their current version: skipped, not counted against the bounds
    /// (and objects another worker committed while this run claimed them).
    pub duplicates: u64,
    /// Objects taken within the bounds.
    pub taken: u64,
    /// Versions converted and committed.
    pub processed: u64,
    /// Objects converted into their outputs without the ledger (pause, disable, replay).
    pub untracked: u64,
    /// Objects another worker holds.
    pub in_flight: u64,
    /// Objects that changed (or vanished) while the run had them.
    pub not_current: u64,
    /// Objects that failed; the ledger records the attempt, the next run retries.
    pub failed: u64,
    /// Objects quarantined: by this run's failure, or already (skipped).
    pub quarantined: u64,
    /// Of those, quarantined by this run.
    pub newly_quarantined: u64,
    /// Objects left for the next run by the bounds.
    pub left: u64,
    /// Rows written.
    pub rows: u64,
    /// Rows set aside as bad (`on_bad_row: reject`).
    pub rejected: u64,
    /// Rows written with values in the rescued column.
    pub rescued: u64,
    /// Values of fields not in the schema, dropped (`on_unknown_field: ignore`).
    pub ignored: u64,
    /// Source bytes taken.
    pub bytes: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.listed += o.listed;
        self.duplicates += o.duplicates;
        self.taken += o.taken;
        self.processed += o.processed;
        self.untracked += o.untracked;
        self.in_flight += o.in_flight;
        self.not_current += o.not_current;
        self.failed += o.failed;
        self.quarantined += o.quarantined;
        self.newly_quarantined += o.newly_quarantined;
        self.left += o.left;
        self.rows += o.rows;
        self.rejected += o.rejected;
        self.rescued += o.rescued;
        self.ignored += o.ignored;
        self.bytes += o.bytes;
    }

    /// Objects whose output this run wrote.
    pub fn written(&self) -> u64 {
        self.processed + self.untracked
    }
}

/// One source of a run.
#[derive(Debug, Clone, Serialize)]
pub struct SourceRun {
    /// The source.
    pub source_id: String,
    /// The mode it ran in.
    pub mode: Mode,
    /// Where the mode came from.
    pub mode_origin: ModeOrigin,
    /// What happened.
    pub counts: Counts,
}

/// An object that failed.
#[derive(Debug, Clone, Serialize)]
pub struct ObjectError {
    /// The source.
    pub source_id: String,
    /// The key.
    pub key: String,
    /// The error (naming the object and where).
    pub error: String,
    /// True when this failure quarantined the object.
    pub quarantined: bool,
}

/// What a `run` or `replay` did.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// `run` or `replay`.
    pub command: &'static str,
    /// The run id (claims, commits and output metadata carry it).
    pub run_id: String,
    /// Per source.
    pub sources: Vec<SourceRun>,
    /// Over all sources.
    pub total: Counts,
    /// Failures.
    pub errors: Vec<ObjectError>,
    /// Wall time.
    pub seconds: f64,
    /// The Delta tables of the sources run, published after the run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tables: Vec<super::table::TablePublish>,
}

impl RunReport {
    /// Did any object fail (or get quarantined) in this run?
    pub fn failed(&self) -> bool {
        self.total.failed > 0 || self.total.newly_quarantined > 0
    }
}

/// The prefix to list for `source` under an optional narrower `prefix`; `None` when the two
/// are disjoint (nothing of the source is under `prefix`).
pub fn listing_prefix(source: &Source, prefix: Option<&str>) -> Option<String> {
    let own = source.doc.prefix.as_str();
    match prefix {
        None => Some(own.to_string()),
        Some(p) if p.starts_with(own) => Some(p.to_string()),
        Some(p) if own.starts_with(p) => Some(own.to_string()),
        Some(_) => None,
    }
}

/// Every object of `source` under `prefix` (within the source's prefix) that the source
/// claims, last modified in `[since, until)`, in listing (key) order.
pub async fn list_objects(
    pipeline: &Pipeline,
    source: &Source,
    prefix: Option<&str>,
    since: Option<i64>,
    until: Option<i64>,
) -> Result<Vec<ObjectMeta>, Error> {
    let Some(list_prefix) = listing_prefix(source, prefix) else {
        return Ok(Vec::new());
    };
    let bucket = &source.doc.bucket;
    let spin = spinner(source.id());
    spin.set_message(format!("listing s3://{bucket}/{list_prefix}"));
    let mut objects = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = pipeline
            .store
            .list(bucket, &list_prefix, token.as_deref())
            .await?;
        spin.inc(page.objects.len() as u64);
        objects.extend(page.objects.into_iter().filter(|o| {
            source.matches(bucket, &o.key)
                && since.is_none_or(|t| o.last_modified >= t)
                && until.is_none_or(|t| o.last_modified < t)
        }));
        match page.next {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    spin.finish_and_clear();
    Ok(objects)
}

/// Is `record` committed for the version with this ETag?
pub fn done_for(record: &Record, etag: &str) -> bool {
    matches!(
        record.committed.as_ref().map(|c| &c.target),
        Some(Target::Version(v)) if v.version == etag || v.etag.as_deref() == Some(etag)
    )
}

fn quarantined_for(record: &Record, etag: &str) -> bool {
    record.status == Status::Quarantined
        && matches!(
            &record.pending,
            Some(Target::Version(v)) if v.version == etag || v.etag.as_deref() == Some(etag)
        )
}

/// The version a listed object names.
pub fn listed_version(o: &ObjectMeta) -> VersionRef {
    VersionRef {
        version: o.etag.clone(),
        version_id: None,
        etag: Some(o.etag.clone()),
        sequencer: None,
        size: Some(o.size),
    }
}

/// Run `plan`: every source it names, one after the other.
pub async fn run(backend: &Backend, plan: &Plan) -> Result<RunReport, Error> {
    let started = Instant::now();
    let now = backend.now();
    let since = plan
        .since
        .as_deref()
        .map(|t| parse_time(t, now))
        .transpose()?;
    let until = plan
        .until
        .as_deref()
        .map(|t| parse_time(t, now))
        .transpose()?;
    let command = if plan.replay { "replay" } else { "run" };
    let mut report = RunReport {
        command,
        run_id: format!("{command}-{}", uuid::Uuid::new_v4()),
        sources: Vec::new(),
        total: Counts::default(),
        errors: Vec::new(),
        seconds: 0.0,
        tables: Vec::new(),
    };
    for configured in backend.sources(plan.source.as_deref())? {
        let (source, origin) = if plan.replay {
            (
                Backend::with_mode(configured, Mode::Disable),
                ModeOrigin::Config,
            )
        } else {
            backend.effective(configured).await?
        };
        let (counts, keys) = run_source(
            backend,
            plan,
            &source,
            since,
            until,
            &report.run_id,
            &mut report.errors,
        )
        .await?;
        if counts.written() + counts.failed + counts.newly_quarantined > 0 {
            let args = json!({
                "run_id": report.run_id, "mode": source.doc.mode.as_str(),
                "prefix": plan.prefix, "since": plan.since, "until": plan.until,
                "max_objects": plan.max_objects, "max_bytes": plan.max_bytes,
                "failed": counts.failed, "quarantined": counts.newly_quarantined,
            });
            audit::record(
                backend,
                source.id(),
                command,
                audit::with_keys(args, &keys),
                counts.written(),
            )
            .await?;
        }
        report.total.add(&counts);
        report.sources.push(SourceRun {
            source_id: source.id().to_string(),
            mode: source.doc.mode,
            mode_origin: origin,
            counts,
        });
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// One source of a run; returns its counts and the keys whose outputs it wrote.
async fn run_source(
    backend: &Backend,
    plan: &Plan,
    source: &Source,
    since: Option<i64>,
    until: Option<i64>,
    run_id: &str,
    errors: &mut Vec<ObjectError>,
) -> Result<(Counts, Vec<String>), Error> {
    let pipeline = &backend.pipeline;
    let objects = list_objects(pipeline, source, plan.prefix.as_deref(), since, until).await?;
    let mut counts = Counts {
        listed: objects.len() as u64,
        ..Counts::default()
    };
    // Disable (and replay) process every object; enable and pause skip what the ledger has
    // committed for the current version, read in one pass.
    let records: HashMap<String, Record> = if source.doc.mode == Mode::Disable {
        HashMap::new()
    } else {
        pipeline
            .ledger
            .list(source.id())
            .await?
            .into_iter()
            .map(|r| (r.key.clone(), r))
            .collect()
    };
    let mut candidates = Vec::new();
    for o in objects {
        match records.get(&o.key) {
            Some(r) if done_for(r, &o.etag) => counts.duplicates += 1,
            Some(r) if quarantined_for(r, &o.etag) => counts.quarantined += 1,
            _ => candidates.push(o),
        }
    }
    candidates.sort_by(|a, b| (a.last_modified, &a.key).cmp(&(b.last_modified, &b.key)));
    let mut taken = Vec::new();
    for o in candidates {
        let full = plan.max_objects.is_some_and(|n| counts.taken >= n)
            || plan.max_bytes.is_some_and(|b| counts.bytes >= b);
        if full {
            counts.left += 1;
            continue;
        }
        counts.taken += 1;
        counts.bytes += o.size;
        taken.push(o);
    }

    let bar = progress(taken.len() as u64, source.id());
    let work = taken.iter().map(|o| {
        let bar = &bar;
        async move {
            bar.set_message(o.key.clone());
            let target = Target::Version(listed_version(o));
            let result = pipeline
                .process(source, &o.key, target, &backend.ctx(run_id))
                .await;
            bar.inc(1);
            (o, result)
        }
    });
    let mut results = futures::stream::iter(work).buffer_unordered(plan.concurrency.max(1));
    let mut written = Vec::new();
    while let Some((o, result)) = results.next().await {
        match result {
            Ok(Outcome::Processed {
                rows,
                rejected,
                rescued,
                ignored,
                ..
            }) => {
                counts.processed += 1;
                counts.rows += rows;
                counts.rejected += rejected;
                counts.rescued += rescued;
                counts.ignored += ignored;
                written.push(o.key.clone());
            }
            Ok(Outcome::Untracked { rows }) => {
                counts.untracked += 1;
                counts.rows += rows;
                written.push(o.key.clone());
            }
            Ok(Outcome::Skipped(Skip::Duplicate)) => counts.duplicates += 1,
            Ok(Outcome::Skipped(Skip::InFlight | Skip::Stale) | Outcome::Deferred) => {
                counts.in_flight += 1
            }
            Ok(Outcome::Skipped(Skip::Quarantined)) => counts.quarantined += 1,
            Ok(Outcome::Quarantined { error }) => {
                counts.quarantined += 1;
                counts.newly_quarantined += 1;
                errors.push(ObjectError {
                    source_id: source.id().to_string(),
                    key: o.key.clone(),
                    error,
                    quarantined: true,
                });
            }
            Ok(Outcome::NotCurrent | Outcome::Deleted { .. } | Outcome::Unrouted) => {
                counts.not_current += 1
            }
            Err(e) => {
                counts.failed += 1;
                errors.push(ObjectError {
                    source_id: source.id().to_string(),
                    key: o.key.clone(),
                    error: e.to_string(),
                    quarantined: false,
                });
            }
        }
    }
    bar.finish_and_clear();
    written.sort();
    Ok((counts, written))
}

/// `tidemark run` / `tidemark replay`.
pub async fn run_command(
    backend: &Backend,
    plan: &Plan,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    let mut report = run(backend, plan).await?;
    if backend.tables.is_some() {
        let ids: Vec<String> = report
            .sources
            .iter()
            .filter(|s| {
                backend
                    .source(&s.source_id)
                    .is_ok_and(|s| s.table().is_some())
            })
            .map(|s| s.source_id.clone())
            .collect();
        for id in ids {
            let published = super::table::publish_sources(backend, Some(&id)).await?;
            report.tables.extend(published);
        }
    }
    if json {
        print_json(out, &report)?;
    } else {
        print_report(&report, &backend.description, out)?;
        super::table::print_publishes(&report.tables, out)?;
    }
    let unpublished = report.tables.iter().any(|t| t.error.is_some());
    Ok(if report.failed() || unpublished {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// What the run's rows left out of their columns, in words: ` (2 bad rows rejected, 3 rows
/// with rescued values, 7 values of fields not in the schema ignored)`; empty when nothing.
fn kept_aside(t: &Counts) -> String {
    let mut parts = Vec::new();
    if t.rejected > 0 {
        parts.push(format!("{} bad rows rejected", t.rejected));
    }
    if t.rescued > 0 {
        parts.push(format!("{} rows with rescued values", t.rescued));
    }
    if t.ignored > 0 {
        parts.push(format!(
            "{} values of fields not in the schema ignored",
            t.ignored
        ));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

/// The human summary of a run.
pub fn print_report(report: &RunReport, backend: &str, out: Out<'_>) -> Result<(), Error> {
    writeln!(out, "{} {} ({backend})", report.command, report.run_id)?;
    let mut t = Table::new(&[
        "SOURCE",
        "MODE",
        ">LISTED",
        ">DUPLICATES",
        ">PROCESSED",
        ">FAILED",
        ">QUARANTINED",
        ">SKIPPED",
        ">LEFT",
        ">ROWS",
    ]);
    let row = |name: String, mode: String, c: &Counts| {
        vec![
            name,
            mode,
            c.listed.to_string(),
            c.duplicates.to_string(),
            c.written().to_string(),
            c.failed.to_string(),
            c.quarantined.to_string(),
            (c.in_flight + c.not_current).to_string(),
            c.left.to_string(),
            c.rows.to_string(),
        ]
    };
    for s in &report.sources {
        let mode = match s.mode_origin {
            ModeOrigin::Config => s.mode.as_str().to_string(),
            ModeOrigin::Override => format!("{}*", s.mode.as_str()),
        };
        t.row(row(s.source_id.clone(), mode, &s.counts));
    }
    if report.sources.len() > 1 {
        t.row(row("total".into(), String::new(), &report.total));
    }
    write!(out, "{}", t.render())?;
    if report
        .sources
        .iter()
        .any(|s| s.mode_origin == ModeOrigin::Override)
    {
        writeln!(out, "(* mode set by `tidemark mode`)")?;
    }
    if report.total.untracked > 0 {
        writeln!(
            out,
            "{} object(s) written without advancing the ledger (mode pause / disable, or replay)",
            report.total.untracked
        )?;
    }
    for e in &report.errors {
        let what = if e.quarantined {
            "quarantined"
        } else {
            "failed"
        };
        writeln!(out, "{what}: {} / {}: {}", e.source_id, e.key, e.error)?;
    }
    let t = &report.total;
    writeln!(
        out,
        "{} processed, {} duplicates, {} failed, {} quarantined, {} rows{} in {:.2} s{}",
        t.written(),
        t.duplicates,
        t.failed,
        t.quarantined,
        t.rows,
        kept_aside(t),
        report.seconds,
        if t.left > 0 {
            format!("; {} left for the next run (bounds)", t.left)
        } else {
            String::new()
        }
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_says_what_the_rows_left_out_of_their_columns() {
        let mut t = Counts::default();
        assert_eq!(kept_aside(&t), "");
        t.rejected = 2;
        assert_eq!(kept_aside(&t), " (2 bad rows rejected)");
        t.rescued = 3;
        t.ignored = 7;
        assert_eq!(
            kept_aside(&t),
            " (2 bad rows rejected, 3 rows with rescued values, 7 values of fields not in the \
             schema ignored)"
        );
    }
}
