//! `rename-source OLD NEW`: move the ledger state of a source id the document no longer has
//! (a renamed source) to the id that replaced it, so the rename costs no reprocessing.
//!
//! Each record is moved by two conditional writes: the copy under NEW is created only if NEW
//! has no record of that key, then the original is deleted only at the revision read. A crash
//! between the two leaves both; the next run finds the copy equal and finishes the move, so the
//! command is resumable and idempotent. A key NEW already holds a different record of (NEW
//! processed it after the new document was deployed) is a conflict, left in place and listed;
//! a record whose claim is still live (a worker on the old document) is left for a later run.
//! The row-level bookmark's lock record, the operator's mode override and the scheduled
//! reconcile's window state move with the records. Outputs are never touched: the command
//! refuses when NEW would write a key's output anywhere else than where OLD's record says it
//! is. Audited under both ids.

use std::process::ExitCode;

use serde::Serialize;
use serde_json::{Value, json};
use tidemark::bookmark::lock_source_id;
use tidemark::model::Record;
use tidemark::ports::LedgerWrite;

use super::audit::{record, with_keys};
use super::print_json;
use crate::backend::Backend;
use crate::{Error, Out};

/// What `rename-source` did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RenameReport {
    /// The id moved from.
    pub from: String,
    /// The id moved to.
    pub to: String,
    /// Records moved by this run.
    pub moved: u64,
    /// Records a run before had copied already (its copy equal): the move finished.
    pub finished: u64,
    /// Keys NEW holds a different record of: left in place under OLD.
    pub conflicts: Vec<String>,
    /// Keys whose claim is still live: left for a later run.
    pub in_flight: Vec<String>,
    /// The row-level bookmark's lock record moved (sources with bookmark keys).
    pub bookmark_moved: bool,
    /// The operator's mode override, copied to NEW (when NEW had none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode_copied: Option<String>,
    /// The scheduled reconcile's window state, copied to NEW (when NEW had none).
    pub reconcile_state_copied: bool,
    /// Nothing of OLD is left: its id is gone from the ledger's source registry.
    pub complete: bool,
}

/// A record with its identity and bookkeeping left out, to tell a finished copy from a
/// different record.
fn content(record: &Record) -> Value {
    let mut value = serde_json::to_value(record).unwrap_or_default();
    if let Value::Object(map) = &mut value {
        for field in ["source_id", "rev", "updated_at"] {
            map.remove(field);
        }
    }
    value
}

enum Moved {
    Now,
    Before,
    Conflict,
}

/// Move one record to `to` (create the copy, then delete the original at the revision read).
async fn move_record(backend: &Backend, old: &Record, to: &str) -> Result<Moved, Error> {
    let ledger = &backend.pipeline.ledger;
    let mut copy = old.clone();
    copy.source_id = to.to_string();
    let outcome = match ledger.create(&copy).await? {
        LedgerWrite::Written => Moved::Now,
        LedgerWrite::Conflict(Some(there)) if content(&there) == content(old) => Moved::Before,
        LedgerWrite::Conflict(_) => return Ok(Moved::Conflict),
    };
    match ledger.delete(&old.source_id, &old.key, old.rev).await? {
        LedgerWrite::Written | LedgerWrite::Conflict(None) => Ok(outcome),
        // The original moved since it was read (a worker on the old document): keep both;
        // the next run compares again.
        LedgerWrite::Conflict(Some(_)) => Ok(Moved::Conflict),
    }
}

/// Move the ledger state of `from` (not in the document) to `to` (in the document).
pub async fn rename_source(backend: &Backend, from: &str, to: &str) -> Result<RenameReport, Error> {
    let config = backend.config();
    if config.source(from).is_some() {
        return Err(format!(
            "source {from:?} is still in the sources document: rename it there first (and deploy \
             the document), then move its state with `tidemark rename-source {from} {to}`"
        )
        .into());
    }
    let target = backend.source(to)?;
    let ledger = &backend.pipeline.ledger;
    let records = ledger.list(from).await?;
    let lock_id = lock_source_id(from);
    let locks = ledger.list(&lock_id).await?;
    let known = ledger.source_ids().await?;
    if records.is_empty() && locks.is_empty() && !known.iter().any(|id| id == from) {
        return Err(format!(
            "the ledger holds no records of source {from:?} (moved already, or a mistyped id: \
             `tidemark status` lists the ids the document lacks)"
        )
        .into());
    }
    // Outputs stay where they are, so NEW must name the same ones.
    let elsewhere: Vec<String> = records
        .iter()
        .filter_map(|r| {
            let bucket = &target.doc.output.bucket;
            let key = match target.partition_columns() {
                Some(columns) => {
                    let dirs: String = columns.iter().map(|c| format!("{}=…/", c.name())).collect();
                    target.partition_output_key(&r.key, &dirs)
                }
                None => target.output_key(&r.key),
            };
            // A table's files have a name per attempt (the table's root must be the same); a
            // partitioned object's files are under the same partition columns.
            let output = r
                .committed
                .as_ref()?
                .outputs
                .iter()
                .find(|o| !target.names_output(&r.key, &o.bucket, &o.key))?;
            Some(format!(
                "{}: s3://{}/{} (NEW would write s3://{bucket}/{key})",
                r.key, output.bucket, output.key
            ))
        })
        .collect();
    if let Some(first) = elsewhere.first() {
        return Err(format!(
            "{} committed objects of {from:?} have their output where {to:?} would not write it \
             (first: {first}); rename-source moves ledger state and leaves outputs untouched, so \
             it needs the same output location: keep NEW's `output` as OLD's, or process NEW \
             afresh",
            elsewhere.len()
        )
        .into());
    }
    let now = backend.now();
    let mut report = RenameReport {
        from: from.into(),
        to: to.into(),
        ..RenameReport::default()
    };
    let mut moved_keys = Vec::new();
    for old in &records {
        if old.claim.as_ref().is_some_and(|c| c.lease_until > now) {
            report.in_flight.push(old.key.clone());
            continue;
        }
        match move_record(backend, old, to).await? {
            Moved::Now => {
                report.moved += 1;
                moved_keys.push(old.key.clone());
            }
            Moved::Before => report.finished += 1,
            Moved::Conflict => report.conflicts.push(old.key.clone()),
        }
    }
    for lock in &locks {
        if lock.claim.as_ref().is_some_and(|c| c.lease_until > now) {
            report.in_flight.push(format!("{lock_id}/{}", lock.key));
            continue;
        }
        match move_record(backend, lock, &lock_source_id(to)).await? {
            Moved::Now | Moved::Before => report.bookmark_moved = true,
            Moved::Conflict => report.conflicts.push(format!("{lock_id}/{}", lock.key)),
        }
    }
    if let Some(mode) = ledger.source_mode(from).await?
        && ledger.source_mode(to).await?.is_none()
    {
        ledger.set_source_mode(to, mode, now).await?;
        report.mode_copied = Some(mode.as_str().to_string());
    }
    if let Some(reports) = &config.reports {
        let p = &backend.pipeline;
        let (state, etag) = tidemark::reconcile::load_state(p, reports, from).await?;
        let (_, there) = tidemark::reconcile::load_state(p, reports, to).await?;
        if etag.is_some() && there.is_none() {
            report.reconcile_state_copied =
                tidemark::reconcile::save_state(p, reports, to, &state, None).await?;
        }
    }
    report.complete = report.conflicts.is_empty() && report.in_flight.is_empty();
    if report.complete {
        ledger.unregister_source(from).await?;
        ledger.unregister_source(&lock_id).await?;
    }
    let args = with_keys(json!({"from": from, "to": to}), &moved_keys);
    record(backend, from, "rename-source", args.clone(), report.moved).await?;
    record(backend, to, "rename-source", args, report.moved).await?;
    Ok(report)
}

/// `tidemark rename-source OLD NEW`: exit 0 when nothing of OLD is left, 1 otherwise.
pub async fn rename_command(
    backend: &Backend,
    from: &str,
    to: &str,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    let report = rename_source(backend, from, to).await?;
    if json {
        print_json(out, &report)?;
    } else {
        writeln!(
            out,
            "{from} → {to}: {} records moved, {} moves finished from an earlier run",
            report.moved, report.finished
        )?;
        if report.bookmark_moved {
            writeln!(out, "  the row-level bookmark's mark moved with them")?;
        }
        if let Some(mode) = &report.mode_copied {
            writeln!(out, "  mode override {mode} copied to {to}")?;
        }
        if report.reconcile_state_copied {
            writeln!(
                out,
                "  the scheduled reconcile's window state copied to {to}"
            )?;
        }
        for (what, keys) in [
            (
                "NEW already holds a different record (left under OLD)",
                &report.conflicts,
            ),
            (
                "claimed by a live worker (run again later)",
                &report.in_flight,
            ),
        ] {
            if !keys.is_empty() {
                let shown: Vec<&str> = keys.iter().take(5).map(String::as_str).collect();
                writeln!(out, "  {} {what}: {}", keys.len(), shown.join(", "))?;
            }
        }
        if report.complete {
            writeln!(
                out,
                "nothing of {from} is left in the ledger; outputs untouched (the same location)"
            )?;
        }
    }
    Ok(if report.complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
