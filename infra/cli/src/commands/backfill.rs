//! `backfill`: the backfill planner from the command line, and the fleet that works its
//! messages off, on either backend pair; `backfill status`: the jobs.
//!
//! On the embedded backends the work queue is a SQLite file beside the ledger
//! (`<root>/queue.db`) and the fleet is N worker tasks in this process running the ingest
//! handler, so `tidemark backfill --source S` is one command that plans, works and reports.
//! On AWS the planner sends to the queue named by `TIDEMARK_BACKFILL_QUEUE_URL`, which the
//! deployed ingest function takes from; `--wait` watches the job, and `--workers N` also works
//! the queue from here (the local stack has no Lambda).

use std::process::ExitCode;
use std::sync::Arc;

use serde_json::json;
use tidemark::backfill::{self, Request, Response};
use tidemark::fleet::{Fleet, FleetOptions, ingest_handler};
use tidemark::jobs::{JobKind, JobState, JobStatus};
use tidemark::ports::WorkQueue;
use tidemark::work::Packing;

use super::{audit, print_json};
use crate::backend::Backend;
use crate::render::{Table, progress, when};
use crate::when::parse_time;
use crate::{Error, Out};

/// Arguments of `backfill`.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BackfillArgs {
    /// `status`: show the jobs.
    #[command(subcommand)]
    pub command: Option<BackfillCommand>,
    /// The source.
    #[arg(long, required_unless_present = "resume")]
    pub source: Option<String>,
    /// Only keys under this prefix (within the source's prefix).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Only objects last modified at or after TIME.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub since: Option<String>,
    /// Only objects last modified before TIME.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub until: Option<String>,
    /// Enqueue at most N objects per planner call (with --all, every call).
    #[arg(long, value_name = "N")]
    pub max_objects: Option<u64>,
    /// Enqueue at most B source bytes per planner call.
    #[arg(long, value_name = "B")]
    pub max_bytes: Option<u64>,
    /// Only list what would be enqueued (no job, nothing sent).
    #[arg(long)]
    pub dry_run: bool,
    /// Re-process the range without advancing the ledger.
    #[arg(long)]
    pub replay: bool,
    /// Re-process only the objects processed under an older configuration of the source
    /// (another schema, format or output), advancing the ledger.
    #[arg(long, conflicts_with = "replay")]
    pub stale_config: bool,
    /// Start after this key.
    #[arg(long, value_name = "KEY")]
    pub continuation: Option<String>,
    /// Read the objects from an S3 Inventory manifest (s3://bucket/…/manifest.json, CSV or
    /// Parquet) instead of listing the source.
    #[arg(long, value_name = "S3_URL")]
    pub inventory: Option<String>,
    /// Resume job JOB (planning goes on from its cursor, under its own request).
    #[arg(long, value_name = "JOB", conflicts_with_all = ["source", "inventory", "continuation"])]
    pub resume: Option<String>,
    /// Plan the whole range: call the planner again until it is done (each call bounded by
    /// --max-objects / --max-bytes).
    #[arg(long)]
    pub all: bool,
    /// Wait for the job's messages to be worked off, with a progress bar (the default on the
    /// embedded backends, or with --workers).
    #[arg(long)]
    pub wait: bool,
    /// Only plan: do not work the queue nor wait (on the embedded backends the messages wait
    /// in <root>/queue.db for a later `tidemark backfill --resume JOB`).
    #[arg(long, conflicts_with = "wait")]
    pub no_wait: bool,
    /// Worker tasks working the queue from this process (default: 4 on the embedded
    /// backends, none on AWS, where the deployed ingest function does).
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    /// Objects each worker invocation processes at once.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub concurrency: usize,
    /// Seconds a message taken by a worker stays hidden (the queue's visibility timeout): a
    /// message whose work failed comes back after it.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub visibility: u64,
}

/// The subcommands of `backfill`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum BackfillCommand {
    /// Show the backfill jobs (newest first), or one job.
    Status {
        /// The job id.
        job: Option<String>,
        /// How many jobs to show.
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339())
        .unwrap_or_default()
}

/// The work queue of backfills on these backends.
pub async fn queue(backend: &Backend) -> Result<Arc<dyn WorkQueue>, Error> {
    match &backend.backfill_queue {
        Some(queue) => Ok(queue.clone()),
        None => Ok(Arc::new(
            tidemark::aws::queue_from_env(tidemark::aws::ENV_BACKFILL_QUEUE)
                .await
                .map_err(|e| format!("{e} (the backfill queue the ingest function takes from)"))?,
        )),
    }
}

/// `tidemark backfill` and `tidemark backfill status`.
pub async fn backfill_command(
    backend: &Backend,
    args: &BackfillArgs,
    json_out: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    if let Some(BackfillCommand::Status { job, limit }) = &args.command {
        return status_command(backend, job.as_deref(), *limit, json_out, out).await;
    }
    let now = backend.now();
    let time = |t: &Option<String>| -> Result<Option<String>, Error> {
        Ok(t.as_deref()
            .map(|t| parse_time(t, now).map(rfc3339))
            .transpose()?)
    };
    let mut req = Request {
        source: args.source.clone().unwrap_or_default(),
        prefix: args.prefix.clone(),
        since: time(&args.since)?,
        until: time(&args.until)?,
        max_objects: args.max_objects,
        max_bytes: args.max_bytes,
        dry_run: args.dry_run,
        replay: args.replay,
        stale_config: args.stale_config,
        continuation: args.continuation.clone(),
        job: args.resume.clone(),
        inventory: args.inventory.clone(),
    };
    let queue = queue(backend).await?;
    let mut calls: Vec<Response> = Vec::new();
    loop {
        let resp = backfill::plan(
            &backend.pipeline,
            &*queue,
            &req,
            i64::MAX,
            Packing::default(),
        )
        .await?;
        let again = args.all && !resp.done && resp.job.is_some() && resp.listed > 0;
        req = Request {
            job: resp.job.clone(),
            ..Request::default()
        };
        calls.push(resp);
        if !again {
            break;
        }
    }
    let last = calls.last().expect("one call at least");
    if args.dry_run {
        return print_dry_run(&calls, json_out, out);
    }
    let job_id = last
        .job
        .clone()
        .expect("a job that is not a dry run has an id");
    let local = backend.ledger_path.is_some();
    let workers = args
        .workers
        .unwrap_or(if local && !args.no_wait { 4 } else { 0 });
    let status = if workers > 0 {
        let fleet = Fleet {
            queue: queue.clone(),
            handler: ingest_handler(backend.pipeline.clone(), args.concurrency),
            clock: backend.pipeline.clock.clone(),
            opts: FleetOptions {
                workers,
                visibility_ms: args.visibility.max(1) * 1000,
                ..FleetOptions::default()
            },
        };
        let bar = progress(0, "backfill");
        let status = fleet
            .run_job(&*backend.pipeline.ledger, &job_id, 100, |s| show(&bar, s))
            .await?;
        bar.finish_and_clear();
        status
    } else if args.wait {
        watch(backend, &job_id).await?
    } else {
        current(backend, &job_id).await?
    };
    let enqueued: u64 = calls.iter().map(|c| c.enqueued).sum();
    audit::record(
        backend,
        &status.job.source_id,
        if args.replay {
            "backfill --replay"
        } else if args.stale_config {
            "backfill --stale-config"
        } else {
            "backfill"
        },
        json!({"job": job_id, "prefix": args.prefix, "since": args.since, "until": args.until,
               "inventory": args.inventory, "calls": calls.len()}),
        enqueued,
    )
    .await?;
    let dead = queue.dead().await?.unwrap_or(0);
    if json_out {
        print_json(
            out,
            &json!({"calls": calls, "job": status, "dead_messages": dead}),
        )?;
    } else {
        write!(
            out,
            "{}",
            jobs_table(std::slice::from_ref(&status)).render()
        )?;
        if dead > 0 {
            writeln!(
                out,
                "{dead} message(s) were received 10 times without being worked off and set aside \
                 (their objects' errors are in the ledger: tidemark status / explain)"
            )?;
        }
        if status.state != JobState::Finished {
            writeln!(out, "{}", next_step(&status, workers > 0 || args.wait))?;
        }
    }
    let clean = status.counts.quarantined == 0
        && dead == 0
        && (status.state == JobState::Finished || (!args.wait && workers == 0));
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn next_step(status: &JobStatus, waited: bool) -> String {
    let id = &status.job.id;
    match status.state {
        JobState::Paused => format!(
            "job {id} is paused at its bounds ({}): `tidemark backfill --resume {id}` plans the next \
             part, --all the rest",
            status.job.plan.paused.as_deref().unwrap_or("")
        ),
        JobState::Planning => {
            format!("job {id} is still planning: `tidemark backfill --resume {id}`")
        }
        JobState::Running if waited => format!(
            "job {id}: {} item(s) not worked off (see the dead messages above, or `tidemark \
             backfill status {id}`)",
            status.outstanding
        ),
        JobState::Running => format!(
            "job {id} is enqueued; the fleet works it off: `tidemark backfill status {id}` (or \
             --wait)"
        ),
        JobState::Finished => String::new(),
    }
}

fn print_dry_run(calls: &[Response], json_out: bool, out: Out<'_>) -> Result<ExitCode, Error> {
    if json_out {
        print_json(out, &calls)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&[
        "SOURCE",
        "LISTED",
        "ALREADY DONE",
        "WOULD ENQUEUE",
        "BYTES",
        "NEXT",
    ]);
    for c in calls {
        t.row(vec![
            c.source.clone(),
            c.listed.to_string(),
            c.already_done.to_string(),
            c.enqueued.to_string(),
            c.bytes.to_string(),
            if c.done {
                "(done)".into()
            } else {
                c.continuation
                    .clone()
                    .unwrap_or_else(|| "(from the start)".into())
            },
        ]);
    }
    write!(out, "{}", t.render())?;
    for c in calls {
        for k in &c.would_process {
            writeln!(out, "would enqueue: {k}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The job as it stands.
async fn current(backend: &Backend, id: &str) -> Result<JobStatus, Error> {
    let (job, counts) = backend
        .pipeline
        .ledger
        .get_job(id)
        .await?
        .ok_or_else(|| format!("no job {id}"))?;
    Ok(JobStatus::of(job, counts))
}

/// Watch a job with a progress bar until it finishes (the deployed fleet works it).
async fn watch(backend: &Backend, id: &str) -> Result<JobStatus, Error> {
    let bar = progress(0, "backfill");
    loop {
        let status = current(backend, id).await?;
        show(&bar, &status);
        let paused_done =
            status.state == JobState::Paused && status.counts.messages >= status.job.plan.messages;
        if status.state == JobState::Finished || paused_done {
            bar.finish_and_clear();
            return Ok(status);
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

fn show(bar: &indicatif::ProgressBar, s: &JobStatus) {
    bar.set_length(s.job.plan.enqueued);
    bar.set_position(s.counts.items.min(s.job.plan.enqueued));
    bar.set_message(format!(
        "{} processed, {} duplicate, {} skipped, {} quarantined, {} failures; {}",
        s.counts.processed,
        s.counts.duplicate,
        s.counts.skipped,
        s.counts.quarantined,
        s.counts.failures,
        s.state.as_str()
    ));
}

fn jobs_table(jobs: &[JobStatus]) -> Table {
    let mut t = Table::new(&[
        "JOB",
        "SOURCE",
        "STATE",
        "STARTED",
        "LISTED",
        "ALREADY DONE",
        "ENQUEUED",
        "PROCESSED",
        "DUPLICATE",
        "SKIPPED",
        "QUARANTINED",
        "FAILURES",
        "OUTSTANDING",
        "ROWS",
    ]);
    for s in jobs {
        let (p, c) = (&s.job.plan, &s.counts);
        t.row(vec![
            s.job.id.clone(),
            s.job.source_id.clone(),
            s.state.as_str().to_string(),
            when(s.job.started_at),
            p.listed.to_string(),
            p.already_done.to_string(),
            p.enqueued.to_string(),
            c.processed.to_string(),
            c.duplicate.to_string(),
            c.skipped.to_string(),
            c.quarantined.to_string(),
            c.failures.to_string(),
            s.outstanding.to_string(),
            c.rows.to_string(),
        ]);
    }
    t
}

/// `tidemark backfill status [JOB]`.
async fn status_command(
    backend: &Backend,
    job: Option<&str>,
    limit: usize,
    json_out: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    let jobs: Vec<JobStatus> = match job {
        Some(id) => vec![current(backend, id).await?],
        None => backend
            .pipeline
            .ledger
            .list_jobs(limit)
            .await?
            .into_iter()
            .filter(|(j, _)| j.kind == JobKind::Backfill)
            .map(|(j, c)| JobStatus::of(j, c))
            .collect(),
    };
    if json_out {
        match job {
            Some(_) => print_json(out, &jobs[0])?,
            None => print_json(out, &jobs)?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    if jobs.is_empty() {
        writeln!(out, "no backfill jobs")?;
        return Ok(ExitCode::SUCCESS);
    }
    write!(out, "{}", jobs_table(&jobs).render())?;
    if let [one] = jobs.as_slice() {
        let p = &one.job.plan;
        writeln!(out, "request:  {}", one.job.request)?;
        writeln!(
            out,
            "planner:  {} call(s), cursor {}, {} message(s) sent{}",
            p.slices,
            p.cursor.as_deref().unwrap_or("(start)"),
            p.messages,
            match &p.paused {
                Some(why) => format!(", paused at {why}"),
                None if p.done => ", done".into(),
                None => String::new(),
            }
        )?;
        writeln!(
            out,
            "workers:  {} of {} message(s) finished{}",
            one.counts.messages,
            p.messages,
            one.finished_at
                .map(|t| format!(", finished {}", when(t)))
                .unwrap_or_default()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
