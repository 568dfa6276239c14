//! `reconcile` and `backfill`: the reconcile and backfill functions' handlers, run from the
//! command line on either backend pair.
//!
//! `reconcile` without `--from`/`--to` is a scheduled run (closes each source's next windows
//! and remembers them; needs `reports` in the configuration); with them it re-checks that
//! window. `backfill` takes one bounded slice, or with `--all` follows the continuations to
//! the end of the range, the way the function's self-invocations do.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;
use tidemark::backfill::{self, Request};
use tidemark::reconcile;

use super::{audit, print_json};
use crate::backend::Backend;
use crate::render::{Table, when};
use crate::when::parse_time;
use crate::{Error, Out};

/// Arguments of `reconcile`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ReconcileArgs {
    /// Only this source (with --from/--to).
    #[arg(long)]
    pub source: Option<String>,
    /// Re-check the window starting at TIME (RFC 3339, a date, or -2h style).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true, requires = "to")]
    pub from: Option<String>,
    /// End of the window (exclusive).
    #[arg(
        long,
        value_name = "TIME",
        allow_hyphen_values = true,
        requires = "from"
    )]
    pub to: Option<String>,
    /// Report only: do not re-drive missing, stale, stuck or orphaned objects.
    #[arg(long)]
    pub no_repair: bool,
    /// Check every object with the deep tier too: recount the source, read the outputs'
    /// sum columns back (with --from/--to).
    #[arg(long, requires = "from", conflicts_with = "sample")]
    pub deep: bool,
    /// The deep tier's sample for this run, a fraction in [0, 1] (default: each source's
    /// reconcile.deep_sample; with --from/--to).
    #[arg(long, value_name = "F", requires = "from", value_parser = fraction)]
    pub sample: Option<f64>,
    /// Also write the HTML report to this file.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

/// A fraction in [0, 1].
fn fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        Ok(f) => Err(format!("{f} is not a fraction in [0, 1]")),
        Err(e) => Err(e.to_string()),
    }
}

/// Arguments of `backfill`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BackfillArgs {
    /// The source.
    #[arg(long)]
    pub source: String,
    /// Only keys under this prefix (within the source's prefix).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Only objects last modified at or after TIME.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub since: Option<String>,
    /// Only objects last modified before TIME.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub until: Option<String>,
    /// Take at most N objects per slice.
    #[arg(long, value_name = "N")]
    pub max_objects: Option<u64>,
    /// Take at most B source bytes per slice.
    #[arg(long, value_name = "B")]
    pub max_bytes: Option<u64>,
    /// Only list what would be processed.
    #[arg(long)]
    pub dry_run: bool,
    /// Re-process the range without advancing the ledger.
    #[arg(long)]
    pub replay: bool,
    /// Re-process only the objects processed under an older configuration of the source
    /// (another schema, format or output), advancing the ledger.
    #[arg(long, conflicts_with = "replay")]
    pub stale_config: bool,
    /// Resume after this key (a previous slice's continuation).
    #[arg(long, value_name = "KEY")]
    pub continuation: Option<String>,
    /// Follow the continuations until the range is done.
    #[arg(long)]
    pub all: bool,
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339())
        .unwrap_or_default()
}

/// `tidemark reconcile`.
pub async fn reconcile_command(
    backend: &Backend,
    args: &ReconcileArgs,
    json_out: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    let now = backend.now();
    let payload = match (&args.from, &args.to) {
        (Some(from), Some(to)) => json!({
            "source": args.source,
            "from": rfc3339(parse_time(from, now)?),
            "to": rfc3339(parse_time(to, now)?),
            "repair": !args.no_repair,
            "deep": args.deep,
            "sample": args.sample,
        }),
        _ => json!({"detail-type": "Scheduled Event", "source": "tidemark.cli", "detail": {}}),
    };
    let ctx = backend.ctx(&format!("reconcile-{}", uuid::Uuid::new_v4()));
    let (report, keys) = reconcile::handle(
        &backend.pipeline,
        backend.config(),
        &payload,
        &ctx,
        i64::MAX,
    )
    .await?;
    if let Some(path) = &args.html {
        std::fs::write(path, report.to_html())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let repaired: usize = report
        .sources
        .iter()
        .flat_map(|s| &s.findings)
        .filter(|f| f.repair.is_some())
        .count();
    if repaired > 0 {
        for s in &report.sources {
            audit::record(
                backend,
                &s.source_id,
                "reconcile",
                json!({"window": s.window, "repaired": s.findings.iter().filter(|f| f.repair.is_some()).map(|f| &f.key).collect::<Vec<_>>()}),
                s.findings.iter().filter(|f| f.repair.is_some()).count() as u64,
            )
            .await?;
        }
    }
    if json_out {
        print_json(out, &json!({"report": report, "written": keys}))?;
    } else {
        let mut t = Table::new(&[
            "SOURCE",
            "WINDOW",
            "OBJECTS",
            "DEEP",
            "MISSING",
            "STALE",
            "STUCK",
            "ORPHANED",
            "QUARANTINED",
            "UNCHECKED",
            "MISMATCHES",
            "ROWS LEDGER/LAKE",
            "DEEP ROWS SRC/LEDGER/LAKE",
        ]);
        for s in &report.sources {
            let n = |k| {
                s.findings
                    .iter()
                    .filter(|f| f.kind == k)
                    .count()
                    .to_string()
            };
            use reconcile::FindingKind as K;
            t.row(vec![
                s.source_id.clone(),
                format!("{} → {}", when(s.window.from_ms), when(s.window.to_ms)),
                s.objects.to_string(),
                s.checked.deep.to_string(),
                n(K::Missing),
                n(K::Stale),
                n(K::Stuck),
                n(K::Orphaned),
                n(K::Quarantined),
                n(K::Unchecked),
                s.mismatches.len().to_string(),
                format!("{}/{}", s.totals.ledger.rows, s.totals.lake.rows),
                format!(
                    "{}/{}/{}",
                    s.totals.deep.source.rows, s.totals.deep.ledger.rows, s.totals.deep.lake.rows
                ),
            ]);
        }
        write!(out, "{}", t.render())?;
        for s in &report.sources {
            if let Some(e) = &s.error {
                writeln!(out, "{}: not reconciled: {e}", s.source_id)?;
            }
            for f in &s.findings {
                writeln!(
                    out,
                    "{:?} [{}] {} ({}){}",
                    f.kind,
                    f.tier.as_str(),
                    f.key,
                    f.detail,
                    f.repair
                        .as_deref()
                        .map(|r| format!(" → {r}"))
                        .unwrap_or_default()
                )?;
            }
            for m in &s.mismatches {
                writeln!(
                    out,
                    "{:?} [{}] {} {}: expected {}, found {}",
                    m.kind,
                    m.tier.as_str(),
                    m.key,
                    m.measure,
                    m.expected,
                    m.found
                )?;
            }
        }
        for k in &keys {
            writeln!(out, "report written: {k}")?;
        }
        writeln!(
            out,
            "{}",
            if report.clean() {
                "clean"
            } else {
                "problems found (see above)"
            }
        )?;
    }
    Ok(if report.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `tidemark backfill`.
pub async fn backfill_command(
    backend: &Backend,
    args: &BackfillArgs,
    json_out: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    let now = backend.now();
    let time = |t: &Option<String>| -> Result<Option<String>, Error> {
        Ok(t.as_deref()
            .map(|t| parse_time(t, now).map(rfc3339))
            .transpose()?)
    };
    let mut req = Request {
        source: args.source.clone(),
        prefix: args.prefix.clone(),
        since: time(&args.since)?,
        until: time(&args.until)?,
        max_objects: args.max_objects,
        max_bytes: args.max_bytes,
        dry_run: args.dry_run,
        replay: args.replay,
        stale_config: args.stale_config,
        continuation: args.continuation.clone(),
    };
    let mut slices = Vec::new();
    loop {
        let ctx = backend.ctx(&format!("backfill-{}", uuid::Uuid::new_v4()));
        let resp = backfill::run(&backend.pipeline, backend.config(), &req, &ctx, i64::MAX).await?;
        let (done, taken, next) = (resp.done, resp.taken, resp.continuation.clone());
        slices.push(resp);
        if done || !args.all || taken == 0 {
            break;
        }
        req.continuation = next;
    }
    let failed: u64 = slices.iter().map(|s| s.failed).sum();
    let processed: u64 = slices.iter().map(|s| s.processed).sum();
    if processed > 0 && !args.dry_run {
        audit::record(
            backend,
            &args.source,
            if args.replay {
                "backfill --replay"
            } else if args.stale_config {
                "backfill --stale-config"
            } else {
                "backfill"
            },
            json!({"prefix": args.prefix, "since": args.since, "until": args.until, "slices": slices.len()}),
            processed,
        )
        .await?;
    }
    if json_out {
        print_json(out, &slices)?;
    } else {
        let mut t = Table::new(&[
            "SLICE",
            "LISTED",
            "TAKEN",
            "PROCESSED",
            "ALREADY DONE",
            "FAILED",
            "ROWS",
            "CONTINUATION",
        ]);
        for (i, s) in slices.iter().enumerate() {
            t.row(vec![
                (i + 1).to_string(),
                s.listed.to_string(),
                s.taken.to_string(),
                s.processed.to_string(),
                s.already_done.to_string(),
                s.failed.to_string(),
                s.rows.to_string(),
                if s.done {
                    "(done)".into()
                } else {
                    s.continuation
                        .clone()
                        .unwrap_or_else(|| "(from the start)".into())
                },
            ]);
        }
        write!(out, "{}", t.render())?;
        for s in &slices {
            for k in &s.would_process {
                writeln!(out, "would process: {k}")?;
            }
            for e in &s.errors {
                writeln!(out, "error: {e}")?;
            }
        }
    }
    Ok(if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
