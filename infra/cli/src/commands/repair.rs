//! `reconcile`: the reconcile function's handler, run from the command line on either backend
//! pair.
//!
//! `reconcile` without `--from`/`--to` is a scheduled run (closes each source's next windows
//! and remembers them; needs `reports` in the configuration); with them it re-checks that
//! window.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;
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
