//! The sources' Delta tables from the CLI: `publish` (the committer's sweep: compare every
//! record of each table source with its table and commit the difference), `maintain`
//! (checkpoint, log cleanup, VACUUM), and the table lines of `status` and `run`.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde::Serialize;
use tidemark_delta::maintain::{CompactOptions, Compacted, MaintainOptions, Maintained};
use tidemark_delta::{Published, TableCheck};

use super::print_json;
use crate::backend::Backend;
use crate::{Error, Out};

/// The table sources among `only` (every source when `None`); an error when the one named
/// publishes no table.
fn table_sources<'a>(backend: &'a Backend, only: Option<&str>) -> Result<Vec<&'a str>, Error> {
    let sources = backend.sources(only)?;
    if let (Some(id), Some(s)) = (only, sources.first())
        && s.table().is_none()
    {
        return Err(format!("source {id:?} publishes no table (no output.table)").into());
    }
    Ok(sources
        .into_iter()
        .filter(|s| s.table().is_some())
        .map(|s| s.id())
        .collect())
}

/// One table's publish: what it did, or why it failed.
#[derive(Debug, Clone, Serialize)]
pub struct TablePublish {
    /// The source.
    pub source_id: String,
    /// What the committer did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published: Option<Published>,
    /// Why it failed (it can be run again: nothing is half done).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Publish the tables of `only` (or every table source): a sweep per source.
pub async fn publish_sources(
    backend: &Backend,
    only: Option<&str>,
) -> Result<Vec<TablePublish>, Error> {
    let ids = table_sources(backend, only)?;
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let publisher = backend.publisher()?;
    let mut out = Vec::new();
    for id in ids {
        let (published, error) = match publisher.publish_all(id).await {
            Ok(p) => (Some(p), None),
            Err(e) => (None, Some(e.to_string())),
        };
        out.push(TablePublish {
            source_id: id.to_string(),
            published,
            error,
        });
    }
    Ok(out)
}

/// Lines for a list of publishes.
pub fn print_publishes(publishes: &[TablePublish], out: Out<'_>) -> Result<(), Error> {
    for t in publishes {
        match (&t.published, &t.error) {
            (Some(p), _) => match p.committed {
                Some(v) => writeln!(
                    out,
                    "table {}: version {v}: +{} file(s), -{} file(s), txn {} ({} attempt(s))",
                    t.source_id,
                    p.added,
                    p.removed,
                    p.txn_version.unwrap_or(-1),
                    p.attempts
                )?,
                None => writeln!(
                    out,
                    "table {}: version {}, up to date with the ledger ({} records)",
                    t.source_id, p.table_version, p.keys
                )?,
            },
            (None, Some(e)) => writeln!(out, "table {}: FAILED: {e}", t.source_id)?,
            (None, None) => {}
        }
    }
    Ok(())
}

/// `tidemark publish`.
pub async fn publish_command(
    backend: &Backend,
    source: Option<String>,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    let publishes = publish_sources(backend, source.as_deref()).await?;
    if json {
        print_json(out, &publishes)?;
    } else if publishes.is_empty() {
        writeln!(out, "no source publishes a table (output.table)")?;
    } else {
        print_publishes(&publishes, out)?;
    }
    Ok(if publishes.iter().any(|p| p.error.is_some()) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `tidemark maintain` arguments.
#[derive(Debug, Clone, Args)]
pub struct MaintainArgs {
    /// Only this source.
    #[arg(long)]
    pub source: Option<String>,
    /// Write no checkpoint.
    #[arg(long)]
    pub no_checkpoint: bool,
    /// Compact no partition.
    #[arg(long)]
    pub no_compact: bool,
    /// A partition is closed (compacted) once its newest file is older than this.
    #[arg(long, default_value = "1d")]
    pub compact_after: String,
    /// Remove log files older than this (behind a checkpoint): `30d`, `12h`; `0` keeps all.
    #[arg(long, default_value = "30d")]
    pub log_retention: String,
    /// VACUUM data files unreferenced for longer than this (at least `1d`); `0`: no VACUUM.
    #[arg(long, default_value = "7d")]
    pub file_retention: String,
    /// Change nothing (no checkpoint, no log cleanup); list what VACUUM would delete.
    #[arg(long)]
    pub dry_run: bool,
}

fn retention(text: &str, what: &str) -> Result<Option<Duration>, Error> {
    if text == "0" {
        return Ok(None);
    }
    let ms = tidemark::config::parse_duration_ms(text).map_err(|e| format!("--{what}: {e}"))?;
    Ok(Some(Duration::from_millis(ms as u64)))
}

/// `tidemark maintain`.
pub async fn maintain_command(
    backend: &Backend,
    args: &MaintainArgs,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    let options = MaintainOptions {
        checkpoint: !args.no_checkpoint,
        log_retention: retention(&args.log_retention, "log-retention")?,
        file_retention: retention(&args.file_retention, "file-retention")?,
        dry_run: args.dry_run,
    };
    let ids = table_sources(backend, args.source.as_deref())?;
    let publisher = backend.publisher()?;
    let compact = CompactOptions {
        compact_after: retention(&args.compact_after, "compact-after")?.unwrap_or(Duration::ZERO),
        ..CompactOptions::default()
    };
    let mut done: Vec<Maintained> = Vec::new();
    let mut compacted: Vec<Compacted> = Vec::new();
    for id in ids {
        if !args.no_compact && !args.dry_run {
            compacted.push(publisher.compact(id, &compact).await?);
        }
        done.push(publisher.maintain(id, &options).await?);
    }
    if json {
        print_json(
            out,
            &serde_json::json!({"compacted": compacted, "maintained": done}),
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    for c in &compacted {
        writeln!(
            out,
            "table {}: compacted {} partition(s): {} file(s) of {} object(s) into {} ({} left open: \
             an object in them may change; {} commit(s) lost to the committer and redone)",
            c.source_id, c.partitions, c.files_in, c.objects, c.files_out, c.open, c.lost
        )?;
    }
    if done.is_empty() {
        writeln!(out, "no source publishes a table (output.table)")?;
    }
    for m in &done {
        writeln!(
            out,
            "table {}: version {}: checkpoint {}, {} log file(s) removed, {} data file(s) {} ({} kept: the ledger names them)",
            m.source_id,
            m.version,
            m.checkpoint
                .map_or_else(|| "not written".to_string(), |v| format!("at {v}")),
            m.log_files_removed,
            m.files_vacuumed.len(),
            if args.dry_run {
                "to vacuum (dry run)"
            } else {
                "vacuumed"
            },
            m.files_kept
        )?;
        for f in &m.files_vacuumed {
            writeln!(out, "  {f}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Each table source's table compared with the ledger (for `status`: a source named that
/// has no table has no line).
pub async fn checks(backend: &Backend, only: Option<&str>) -> Result<Vec<TableCheck>, Error> {
    let ids: Vec<&str> = backend
        .sources(only)?
        .into_iter()
        .filter(|s| s.table().is_some())
        .map(|s| s.id())
        .collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let publisher = backend.publisher()?;
    let mut out = Vec::new();
    for id in ids {
        out.push(publisher.check(id).await?);
    }
    Ok(out)
}

/// The `status` lines of the tables.
pub fn print_checks(checks: &[TableCheck], out: Out<'_>) -> Result<(), Error> {
    for c in checks {
        let Some(version) = c.version else {
            writeln!(
                out,
                "TABLE {}: not created yet ({} unpublished file(s)) at {}",
                c.source_id, c.unpublished, c.table
            )?;
            continue;
        };
        let state = if c.is_clean() {
            "matches the ledger".to_string()
        } else {
            format!(
                "{} unpublished, {} stale file(s): `tidemark publish` (the committer catches up)",
                c.unpublished, c.stale
            )
        };
        writeln!(
            out,
            "TABLE {}: delta version {version} (txn {}), {} file(s), {} rows (ledger {}): {state} — {}",
            c.source_id,
            c.txn_version
                .map_or_else(|| "-".to_string(), |t| t.to_string()),
            c.files,
            c.table_rows,
            c.ledger_rows,
            c.table
        )?;
    }
    Ok(())
}
