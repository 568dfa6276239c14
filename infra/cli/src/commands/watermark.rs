//! Moving the watermark by hand: `rewind`, `reset`, `mark-processed` (Glue's missing "set
//! bookmark") and `forget`.
//!
//! Every ledger change is a conditional write on the revision read (`Ledger::delete`, or the
//! protocol's claim + commit for `mark-processed`), so a command racing a worker never loses
//! the worker's update: a record that moved is re-read and re-judged. A record under a live
//! claim is left alone and reported as in flight (its worker is about to commit it).
//!
//! Why rewinding or resetting never duplicates rows: outputs are keyed by source object
//! (`Source::output_key`), so when the next `run` processes a forgotten object again its
//! conditional write finds the old output, sees (by a HEAD) that no newer version wrote it,
//! and replaces it. The one output a replay would not overwrite — one recorded under another
//! key, written under an older configuration — is deleted by `rewind` and `reset` when they
//! forget its record.

use std::collections::{BTreeSet, HashMap};
use std::process::ExitCode;

use futures::StreamExt;
use serde::Serialize;
use serde_json::{Value, json};
use tidemark::config::Source;
use tidemark::model::{OutputRef, Record, Target};
use tidemark::ports::LedgerWrite;
use tidemark::process::Outcome;
use tidemark::protocol::Skip;

use super::audit::{self, with_keys};
use super::print_json;
use super::run::{done_for, list_objects, listed_version};
use crate::backend::Backend;
use crate::render::{Table, progress, when};
use crate::when::parse_time;
use crate::{Error, Out};

/// Arguments of `rewind`.
#[derive(Debug, Clone, clap::Args)]
pub struct RewindArgs {
    /// Forget every object committed at or after TIME: RFC 3339 (2026-11-29T10:00:00Z), a
    /// date (midnight UTC) or relative (-2h, -30m, -1d).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub to: String,
    /// Only this source.
    #[arg(long)]
    pub source: Option<String>,
    /// Only show what would be forgotten.
    #[arg(long)]
    pub dry_run: bool,
}

/// Arguments of `reset`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ResetArgs {
    /// Only this source (default: every source).
    #[arg(long)]
    pub source: Option<String>,
    /// Only keys under this prefix.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Also delete the outputs: those the records name, and the output key of every source
    /// object in scope (outputs a pause or replay wrote without a record included).
    #[arg(long)]
    pub purge_outputs: bool,
    /// Only show what would be forgotten.
    #[arg(long)]
    pub dry_run: bool,
}

/// Arguments of `mark-processed`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct MarkArgs {
    /// Only this source (default: every source).
    #[arg(long)]
    pub source: Option<String>,
    /// Only keys under this prefix.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Only objects last modified before TIME (RFC 3339, a date, or -2h style).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub until: Option<String>,
    /// Only show what would be marked.
    #[arg(long)]
    pub dry_run: bool,
    /// Objects marked at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
}

/// What a watermark command did to one source.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SourceChange {
    /// The source.
    pub source_id: String,
    /// Records forgotten (rewind, reset, forget) or objects marked (mark-processed); in a dry
    /// run, those that would be.
    pub affected: u64,
    /// Their keys.
    pub keys: Vec<String>,
    /// Keys under a live claim, left alone.
    pub in_flight: Vec<String>,
    /// Outputs deleted (reset --purge-outputs; rewind: outputs under a key a replay would
    /// not overwrite).
    pub outputs_deleted: u64,
    /// mark-processed: objects already done for their current version.
    pub already_done: u64,
    /// mark-processed: objects the ledger knows a newer version of, left alone.
    pub not_current: u64,
    /// Errors, naming the object.
    pub errors: Vec<String>,
}

/// What a watermark command did.
#[derive(Debug, Clone, Serialize)]
pub struct ChangeReport {
    /// The command.
    pub command: &'static str,
    /// Its arguments (times resolved).
    pub args: Value,
    /// Nothing was written.
    pub dry_run: bool,
    /// Per source.
    pub sources: Vec<SourceChange>,
}

impl ChangeReport {
    /// Objects affected over all sources.
    pub fn affected(&self) -> u64 {
        self.sources.iter().map(|s| s.affected).sum()
    }

    fn has_errors(&self) -> bool {
        self.sources.iter().any(|s| !s.errors.is_empty())
    }
}

fn live_claim(r: &Record, now: i64) -> bool {
    r.claim.as_ref().is_some_and(|c| c.lease_until > now)
}

/// Forget the records of `source` that `select` picks, each conditional on its revision;
/// a record that moved is judged again. Returns the records forgotten and the keys left
/// alone under a live claim.
async fn forget_where(
    backend: &Backend,
    source: &Source,
    records: Vec<Record>,
    select: impl Fn(&Record) -> bool,
    dry_run: bool,
) -> Result<(Vec<Record>, Vec<String>), Error> {
    let ledger = &backend.pipeline.ledger;
    let (mut forgotten, mut in_flight) = (Vec::new(), Vec::new());
    for record in records.into_iter().filter(|r| select(r)) {
        let mut current = record;
        loop {
            if live_claim(&current, backend.now()) {
                in_flight.push(current.key.clone());
                break;
            }
            if dry_run {
                forgotten.push(current);
                break;
            }
            match ledger
                .delete(source.id(), &current.key, current.rev)
                .await?
            {
                LedgerWrite::Written => {
                    forgotten.push(current);
                    break;
                }
                LedgerWrite::Conflict(None) => break, // gone already
                LedgerWrite::Conflict(Some(now)) if select(&now) => current = *now,
                LedgerWrite::Conflict(Some(_)) => break, // moved out of scope
            }
        }
    }
    Ok((forgotten, in_flight))
}

/// Delete outputs, unconditionally; returns how many were there to delete.
async fn delete_outputs(
    backend: &Backend,
    outputs: impl IntoIterator<Item = (String, String)>,
    errors: &mut Vec<String>,
) -> u64 {
    let mut n = 0;
    for (bucket, key) in outputs {
        match backend.pipeline.store.delete(&bucket, &key, None).await {
            Ok(true) => n += 1,
            Ok(false) => {}
            Err(e) => errors.push(format!("output s3://{bucket}/{key} not deleted: {e}")),
        }
    }
    n
}

/// The outputs (and rejects file) of `r` that a replay of its object would not overwrite.
fn off_key_outputs(source: &Source, r: &Record) -> Vec<OutputRef> {
    // A table's files leave the table through the committer (the forgotten record is no
    // longer published) and the disk through VACUUM: a reader may still hold a snapshot.
    if source.table().is_some() {
        return Vec::new();
    }
    let own = own_keys(source, &r.key);
    r.committed
        .iter()
        .filter(|c| matches!(c.target, Target::Version(_)))
        .flat_map(|c| c.files())
        .filter(|o| o.bucket != source.doc.output.bucket || !own.contains(&o.key))
        .cloned()
        .collect()
}

/// The output keys that processing `key` writes (or removes), in the output bucket.
fn own_keys(source: &Source, key: &str) -> Vec<String> {
    let mut keys = vec![source.output_key(key)];
    if source.doc.on_bad_row == tidemark::config::OnBadRow::Reject {
        keys.push(source.rejects_key(key));
    }
    keys
}

/// `rewind --to TIME`: forget every record committed at or after TIME.
pub async fn rewind(backend: &Backend, args: &RewindArgs) -> Result<ChangeReport, Error> {
    let to = parse_time(&args.to, backend.now())?;
    let mut report = ChangeReport {
        command: "rewind",
        args: json!({"to": when(to), "to_ms": to}),
        dry_run: args.dry_run,
        sources: Vec::new(),
    };
    for source in backend.sources(args.source.as_deref())? {
        let records = backend.pipeline.ledger.list(source.id()).await?;
        // Committed versions only: a tombstone has nothing to reprocess, and keeping it keeps
        // a late event of the deleted version from bringing the object back.
        let select = |r: &Record| {
            r.committed
                .as_ref()
                .is_some_and(|c| c.committed_at >= to && matches!(c.target, Target::Version(_)))
        };
        let (forgotten, in_flight) =
            forget_where(backend, source, records, select, args.dry_run).await?;
        let mut change = SourceChange {
            source_id: source.id().to_string(),
            affected: forgotten.len() as u64,
            keys: forgotten.iter().map(|r| r.key.clone()).collect(),
            in_flight,
            ..SourceChange::default()
        };
        if !args.dry_run {
            let stray = forgotten
                .iter()
                .flat_map(|r| off_key_outputs(source, r))
                .map(|o| (o.bucket, o.key));
            change.outputs_deleted = delete_outputs(backend, stray, &mut change.errors).await;
        }
        finish(backend, &report, source, &mut change).await?;
        report.sources.push(change);
    }
    Ok(report)
}

/// `reset`: forget the records of a source (or a prefix), optionally purging outputs.
pub async fn reset(backend: &Backend, args: &ResetArgs) -> Result<ChangeReport, Error> {
    let prefix = args.prefix.clone().unwrap_or_default();
    let mut report = ChangeReport {
        command: "reset",
        args: json!({"prefix": args.prefix, "purge_outputs": args.purge_outputs}),
        dry_run: args.dry_run,
        sources: Vec::new(),
    };
    for source in backend.sources(args.source.as_deref())? {
        let records = backend.pipeline.ledger.list(source.id()).await?;
        let select = |r: &Record| r.key.starts_with(&prefix);
        let (forgotten, in_flight) =
            forget_where(backend, source, records, select, args.dry_run).await?;
        let mut change = SourceChange {
            source_id: source.id().to_string(),
            affected: forgotten.len() as u64,
            keys: forgotten.iter().map(|r| r.key.clone()).collect(),
            in_flight,
            ..SourceChange::default()
        };
        if args.purge_outputs && source.table().is_some() {
            return Err(format!(
                "source {:?} publishes a table: --purge-outputs would delete files its snapshots \
                 reference; reset without it (the committer removes the forgotten objects' files \
                 from the table, and its VACUUM deletes them after the retention period)",
                source.id()
            )
            .into());
        }
        if !args.dry_run {
            let mut outputs: BTreeSet<(String, String)> = BTreeSet::new();
            if args.purge_outputs {
                let out_bucket = &source.doc.output.bucket;
                for r in &forgotten {
                    for own in own_keys(source, &r.key) {
                        outputs.insert((out_bucket.clone(), own));
                    }
                    for o in r.committed.iter().flat_map(|c| c.files()) {
                        outputs.insert((o.bucket.clone(), o.key.clone()));
                    }
                }
                // Outputs written without a record (pause, replay) of objects still there.
                let listed = list_objects(
                    &backend.pipeline,
                    source,
                    args.prefix.as_deref(),
                    None,
                    None,
                )
                .await?;
                let busy: BTreeSet<&String> = change.in_flight.iter().collect();
                for o in listed.iter().filter(|o| !busy.contains(&o.key)) {
                    for own in own_keys(source, &o.key) {
                        outputs.insert((out_bucket.clone(), own));
                    }
                }
            } else {
                outputs.extend(
                    forgotten
                        .iter()
                        .flat_map(|r| off_key_outputs(source, r))
                        .map(|o| (o.bucket, o.key)),
                );
            }
            change.outputs_deleted = delete_outputs(backend, outputs, &mut change.errors).await;
        }
        finish(backend, &report, source, &mut change).await?;
        report.sources.push(change);
    }
    Ok(report)
}

/// `mark-processed`: record the source objects present now as committed for their current
/// ETag, without processing them.
pub async fn mark_processed(backend: &Backend, args: &MarkArgs) -> Result<ChangeReport, Error> {
    let until = args
        .until
        .as_deref()
        .map(|t| parse_time(t, backend.now()))
        .transpose()?;
    let run_id = format!("mark-processed-{}", uuid::Uuid::new_v4());
    let mut report = ChangeReport {
        command: "mark-processed",
        args: json!({"prefix": args.prefix, "until": until.map(when), "run_id": run_id}),
        dry_run: args.dry_run,
        sources: Vec::new(),
    };
    let pipeline = &backend.pipeline;
    for source in backend.sources(args.source.as_deref())? {
        let objects = list_objects(pipeline, source, args.prefix.as_deref(), None, until).await?;
        let records: HashMap<String, Record> = pipeline
            .ledger
            .list(source.id())
            .await?
            .into_iter()
            .map(|r| (r.key.clone(), r))
            .collect();
        let mut change = SourceChange {
            source_id: source.id().to_string(),
            ..SourceChange::default()
        };
        let todo: Vec<_> = objects
            .into_iter()
            .filter(|o| {
                let done = records.get(&o.key).is_some_and(|r| done_for(r, &o.etag));
                change.already_done += u64::from(done);
                !done
            })
            .collect();
        if args.dry_run {
            change.affected = todo.len() as u64;
            change.keys = todo.iter().map(|o| o.key.clone()).collect();
            report.sources.push(change);
            continue;
        }
        let bar = progress(todo.len() as u64, source.id());
        let work = todo.iter().map(|o| {
            let (bar, run_id) = (&bar, &run_id);
            async move {
                let ctx = backend.ctx(run_id);
                let outcome = pipeline
                    .mark_processed(source, &o.key, listed_version(o), &ctx)
                    .await;
                bar.inc(1);
                (o, outcome)
            }
        });
        let mut results = futures::stream::iter(work).buffer_unordered(args.concurrency.max(1));
        while let Some((o, outcome)) = results.next().await {
            match outcome {
                Ok(Outcome::Processed { .. }) => {
                    change.affected += 1;
                    change.keys.push(o.key.clone());
                }
                Ok(Outcome::Skipped(Skip::Duplicate)) => change.already_done += 1,
                Ok(Outcome::Skipped(_) | Outcome::Deferred) => change.in_flight.push(o.key.clone()),
                Ok(_) => change.not_current += 1,
                Err(e) => change.errors.push(format!("{}: {e}", o.key)),
            }
        }
        bar.finish_and_clear();
        change.keys.sort();
        change.in_flight.sort();
        finish(backend, &report, source, &mut change).await?;
        report.sources.push(change);
    }
    Ok(report)
}

/// Write the audit entry of one source's change (when it changed something).
async fn finish(
    backend: &Backend,
    report: &ChangeReport,
    source: &Source,
    change: &mut SourceChange,
) -> Result<(), Error> {
    if report.dry_run || (change.affected == 0 && change.outputs_deleted == 0) {
        return Ok(());
    }
    let mut args = report.args.clone();
    if let Value::Object(map) = &mut args
        && report.command != "mark-processed"
    {
        map.insert("outputs_deleted".into(), change.outputs_deleted.into());
    }
    audit::record(
        backend,
        source.id(),
        report.command,
        with_keys(args, &change.keys),
        change.affected,
    )
    .await?;
    Ok(())
}

/// `forget SOURCE KEY`: the record, if there was one to forget.
pub async fn forget(backend: &Backend, source: &str, key: &str) -> Result<ForgetOutcome, Error> {
    let configured = backend.source(source)?;
    let Some(record) = backend.pipeline.ledger.get(source, key).await? else {
        return Ok(ForgetOutcome::NoRecord);
    };
    let (forgotten, in_flight) =
        forget_where(backend, configured, vec![record], |_| true, false).await?;
    if let Some(r) = forgotten.into_iter().next() {
        audit::record(
            backend,
            source,
            "forget",
            json!({"key": key, "status": r.status.as_str(), "rev": r.rev}),
            1,
        )
        .await?;
        return Ok(ForgetOutcome::Forgotten(Box::new(r)));
    }
    if !in_flight.is_empty() {
        let r = backend.pipeline.ledger.get(source, key).await?;
        let until = r.and_then(|r| r.claim).map_or(0, |c| c.lease_until);
        return Ok(ForgetOutcome::InFlight { lease_until: until });
    }
    Ok(ForgetOutcome::NoRecord)
}

/// What `forget` found.
#[derive(Debug)]
pub enum ForgetOutcome {
    /// The record, now forgotten.
    Forgotten(Box<Record>),
    /// There was no record.
    NoRecord,
    /// A worker holds the key; try after its lease.
    InFlight {
        /// Lease expiry, ms since the epoch.
        lease_until: i64,
    },
}

/// `tidemark rewind`.
pub async fn rewind_command(
    backend: &Backend,
    args: &RewindArgs,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    let report = rewind(backend, args).await?;
    print_change(&report, json, out)
}

/// `tidemark reset`.
pub async fn reset_command(
    backend: &Backend,
    args: &ResetArgs,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    let report = reset(backend, args).await?;
    print_change(&report, json, out)
}

/// `tidemark mark-processed`.
pub async fn mark_command(
    backend: &Backend,
    args: &MarkArgs,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    let report = mark_processed(backend, args).await?;
    print_change(&report, json, out)
}

/// Keys shown per source in human output.
const SHOWN_KEYS: usize = 20;

fn print_change(report: &ChangeReport, json: bool, out: Out<'_>) -> Result<ExitCode, Error> {
    let code = if report.has_errors() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    };
    if json {
        print_json(out, report)?;
        return Ok(code);
    }
    let mark = report.command == "mark-processed";
    let verb = match (mark, report.dry_run) {
        (true, false) => "marked",
        (true, true) => "would mark",
        (false, false) => "forgotten",
        (false, true) => "would forget",
    };
    let args = {
        let mut a = report.args.clone();
        if let Value::Object(m) = &mut a {
            m.retain(|k, v| !v.is_null() && k != "to_ms" && k != "run_id");
        }
        a
    };
    writeln!(
        out,
        "{}{} {args}",
        report.command,
        if report.dry_run { " (dry run)" } else { "" }
    )?;
    let affected_header = format!(">{}", verb.to_uppercase());
    let mut t = Table::new(&[
        "SOURCE",
        affected_header.as_str(),
        ">IN FLIGHT",
        if mark {
            ">ALREADY DONE"
        } else {
            ">OUTPUTS DELETED"
        },
    ]);
    for s in &report.sources {
        t.row(vec![
            s.source_id.clone(),
            s.affected.to_string(),
            s.in_flight.len().to_string(),
            if mark {
                s.already_done.to_string()
            } else {
                s.outputs_deleted.to_string()
            },
        ]);
    }
    write!(out, "{}", t.render())?;
    for s in &report.sources {
        for k in s.keys.iter().take(SHOWN_KEYS) {
            writeln!(out, "  {verb}: {} / {k}", s.source_id)?;
        }
        if s.keys.len() > SHOWN_KEYS {
            writeln!(out, "  … and {} more", s.keys.len() - SHOWN_KEYS)?;
        }
        for k in &s.in_flight {
            writeln!(
                out,
                "  left alone (a worker holds it): {} / {k}",
                s.source_id
            )?;
        }
        for e in &s.errors {
            writeln!(out, "  error: {} / {e}", s.source_id)?;
        }
    }
    if !report.dry_run && report.affected() > 0 {
        writeln!(
            out,
            "{}",
            if mark {
                "the next `run` skips them (they show rows 0); a newer version of one is processed as usual"
            } else {
                "the next `run` processes them again and replaces their outputs by key"
            }
        )?;
    }
    Ok(code)
}

/// `tidemark forget`.
pub async fn forget_command(
    backend: &Backend,
    source: &str,
    key: &str,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    let outcome = forget(backend, source, key).await?;
    let (code, value, text) = match &outcome {
        ForgetOutcome::Forgotten(r) => (
            ExitCode::SUCCESS,
            json!({"forgotten": true, "record": r}),
            format!(
                "forgotten: {source} / {key} (was {}); the next `run` or event processes it again",
                r.status.as_str()
            ),
        ),
        ForgetOutcome::NoRecord => (
            ExitCode::from(1),
            json!({"forgotten": false, "reason": "no record"}),
            format!("no ledger record for {source} / {key}: nothing to forget"),
        ),
        ForgetOutcome::InFlight { lease_until } => (
            ExitCode::from(1),
            json!({"forgotten": false, "reason": "in flight", "lease_until": when(*lease_until)}),
            format!(
                "{source} / {key} is held by a worker until {}: try again after its lease",
                when(*lease_until)
            ),
        ),
    };
    if json {
        print_json(out, &value)?;
    } else {
        writeln!(out, "{text}")?;
    }
    Ok(code)
}
