//! `reconcile`: the reconcile function's handler, run from the command line on either backend
//! pair.
//!
//! `reconcile` without `--from`/`--to` is a scheduled run (closes each source's next windows
//! and remembers them; needs `reports` in the configuration); with them it re-checks that
//! window. A window with more objects than `reconcile.part_objects` is split into parts on
//! the reconcile queue (`<root>/queue.db` on the embedded backends; on AWS the queue named
//! by `TIDEMARK_RECONCILE_QUEUE_URL`, if set) and checked by worker tasks here (`--workers`),
//! and the merged report is shown.

use std::path::PathBuf;
use std::process::ExitCode;

use std::sync::Arc;

use serde_json::json;
use tidemark::fleet::{Fleet, FleetOptions};
use tidemark::ports::WorkQueue;
use tidemark::reconcile::{self, Report};

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
    /// Worker tasks checking the parts of a window split over the reconcile queue (default:
    /// 4 on the embedded backends; none on AWS, where the reconcile function does).
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
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

/// The reconcile queue of these backends: on the embedded pair a queue in `<root>/queue.db`;
/// on AWS the one `TIDEMARK_RECONCILE_QUEUE_URL` names, if it is set.
async fn reconcile_queue(backend: &Backend) -> Result<Option<Arc<dyn WorkQueue>>, Error> {
    if let Some(ledger) = &backend.ledger_path {
        let path = ledger.with_file_name("queue.db");
        return Ok(Some(Arc::new(tidemark::local::LocalQueue::open(
            path,
            "reconcile",
        )?)));
    }
    if std::env::var_os(tidemark::aws::ENV_RECONCILE_QUEUE).is_none() {
        return Ok(None);
    }
    Ok(Some(Arc::new(
        tidemark::aws::queue_from_env(tidemark::aws::ENV_RECONCILE_QUEUE).await?,
    )))
}

/// Work off the parts of the windows this run split, with `workers` local tasks, until each
/// is merged; the merged entries replace the run's notes about them, and the merged
/// reports' keys join `keys`.
async fn merge_split_windows(
    backend: &Backend,
    queue: Arc<dyn WorkQueue>,
    workers: usize,
    report: &mut Report,
    keys: &mut Vec<String>,
) -> Result<(), Error> {
    let jobs: Vec<String> = report
        .sources
        .iter()
        .filter_map(|s| s.fan_out.as_ref().map(|f| f.job.clone()))
        .collect();
    if jobs.is_empty() {
        return Ok(());
    }
    let fleet = Fleet {
        queue,
        handler: tidemark::fleet::reconcile_handler(backend.pipeline.clone()),
        clock: backend.pipeline.clock.clone(),
        opts: FleetOptions {
            workers,
            ..FleetOptions::default()
        },
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(async move { fleet.run(stop_rx).await });
    let bar = crate::render::spinner("reconcile");
    let mut merged = Vec::new();
    for job in &jobs {
        let report_keys = loop {
            let (j, counts) = backend
                .pipeline
                .ledger
                .get_job(job)
                .await?
                .ok_or_else(|| format!("reconcile job {job} is gone"))?;
            bar.set_message(format!(
                "{job}: {} of {} parts checked",
                counts.messages, j.plan.messages
            ));
            if let Some(k) = j.plan.merged {
                break k;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        };
        merged.push((job.clone(), report_keys));
    }
    bar.finish_and_clear();
    let _ = stop_tx.send(true);
    let _ = running.await;
    let reports = backend
        .config()
        .reports
        .as_ref()
        .ok_or("a split window needs reports in the configuration")?;
    for (job, report_keys) in merged {
        let json_key = report_keys
            .iter()
            .find(|k| k.ends_with(".json"))
            .ok_or("the merged report has no JSON")?;
        let merged_report: Report = match backend
            .pipeline
            .store
            .get(&reports.bucket, json_key, None)
            .await?
        {
            tidemark::ports::GetOutcome::Found { mut body, .. } => {
                let mut bytes = Vec::new();
                tokio::io::AsyncReadExt::read_to_end(&mut body, &mut bytes).await?;
                serde_json::from_slice(&bytes)?
            }
            _ => return Err(format!("the merged report {json_key} is missing").into()),
        };
        for s in &mut report.sources {
            if s.fan_out.as_ref().is_some_and(|f| f.job == job)
                && let Some(entry) = merged_report.sources.first()
            {
                *s = entry.clone();
            }
        }
        keys.extend(report_keys);
    }
    Ok(())
}

/// What the objects a window checked left out of their columns, as their commits record
/// it: rejected rows, rescued rows, ignored values (with the fields that held the most).
/// `None` when nothing.
pub fn kept_aside_line(s: &reconcile::SourceReport) -> Option<String> {
    let mut parts = Vec::new();
    if s.rejected_rows > 0 {
        parts.push(format!("{} rows rejected", s.rejected_rows));
    }
    if s.rescued_rows > 0 {
        parts.push(format!("{} rows with rescued values", s.rescued_rows));
    }
    if !s.ignored.is_empty() {
        parts.push(format!(
            "{} values of fields not in the schema ignored: {}",
            s.ignored.values,
            s.ignored.summary(super::status::IGNORED_FIELDS_SHOWN)
        ));
    }
    (!parts.is_empty()).then(|| format!("{}: {}", s.source_id, parts.join("; ")))
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
    let queue = reconcile_queue(backend).await?;
    let (mut report, mut keys) = reconcile::handle_with(
        &backend.pipeline,
        backend.config(),
        &payload,
        &ctx,
        i64::MAX,
        queue.as_deref(),
    )
    .await?;
    let local = backend.ledger_path.is_some();
    let workers = args.workers.unwrap_or(if local { 4 } else { 0 });
    if let Some(queue) = queue.filter(|_| workers > 0) {
        merge_split_windows(backend, queue, workers, &mut report, &mut keys).await?;
    }
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
            let n = |k| s.count(k).to_string();
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
                s.mismatch_count().to_string(),
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
            if let Some(line) = kept_aside_line(s) {
                writeln!(out, "{line}")?;
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
