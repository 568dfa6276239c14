//! `tidemark-fleet`: runs a Lambda function's real `bootstrap` binary as a fleet of workers
//! consuming an SQS queue, the way AWS Lambda's SQS event source mapping runs it, on this
//! machine. Each worker is an execution environment (the process behind its own emulated
//! Runtime API, see [`runtime_api`]) fed one batch at a time by a long-polling consumer that
//! deletes what the function acknowledged (see [`worker`]). Chaos knobs leave acknowledged
//! messages for redelivery and kill processes mid-invocation. On exit it prints one JSON
//! summary line.

mod event;
mod rng;
mod runtime_api;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use aws_config::BehaviorVersion;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::QueueAttributeName;
use clap::Parser;
use serde::Serialize;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::rng::Rng;
use crate::worker::{KillSwitch, Setup, Stats};

/// Run a Lambda function's bootstrap binary as N workers consuming an SQS queue.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Workers: execution environments, each running one invocation at a time.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// The queue to consume (the endpoint comes from AWS_ENDPOINT_URL_SQS).
    #[arg(long)]
    queue_url: String,
    /// The function's executable (the `bootstrap` of the deployed zip).
    #[arg(long)]
    bootstrap: PathBuf,
    /// Messages per invocation (1 to 10).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(i32).range(1..=10))]
    batch_size: i32,
    /// Function timeout, seconds: an invocation not answered by then is killed.
    #[arg(long, default_value_t = 120)]
    timeout_s: u64,
    /// Visibility timeout of each receive, seconds [default: 6 × the function timeout].
    #[arg(long)]
    visibility_s: Option<i32>,
    /// AWS_LAMBDA_FUNCTION_NAME.
    #[arg(long, default_value = "tidemark-ingest")]
    function_name: String,
    /// AWS_LAMBDA_FUNCTION_MEMORY_SIZE, MB.
    #[arg(long, default_value_t = 256)]
    memory_mb: u32,
    /// An extra variable for the function, K=V (repeatable; applied last).
    #[arg(long = "env", value_name = "K=V", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// Where the functions' output goes, one worker-<n>.log per worker.
    #[arg(long, default_value = "target/fleet-logs")]
    log_dir: PathBuf,
    /// Probability that an acknowledged message is not deleted (SQS delivers it again).
    #[arg(long, default_value_t = 0.0)]
    redeliver: f64,
    /// Every S seconds, SIGKILL one random worker's process inside an invocation.
    #[arg(long, value_name = "S")]
    kill_every_s: Option<f64>,
    /// Seed of the chaos knobs' choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Stop once the queue has had no visible, in-flight or delayed message for T seconds.
    #[arg(long, value_name = "T")]
    until_empty_s: Option<u64>,
    /// Stop after this many seconds at most.
    #[arg(long)]
    max_runtime_s: Option<u64>,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("expected K=V, got {s:?}")),
    }
}

/// The line printed on exit.
#[derive(Debug, Serialize)]
struct Summary {
    workers: usize,
    /// `queue_empty`, `max_runtime` or `signal`.
    stop_reason: &'static str,
    wall_s: f64,
    #[serde(flatten)]
    total: Stats,
    per_worker: Vec<WorkerSummary>,
}

#[derive(Debug, Serialize)]
struct WorkerSummary {
    worker: usize,
    #[serde(flatten)]
    stats: Stats,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(summary) => match serde_json::to_string(&summary) {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tidemark-fleet: writing the summary: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("tidemark-fleet: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<Summary> {
    ensure!(args.workers > 0, "--workers must be at least 1");
    ensure!(args.timeout_s > 0, "--timeout-s must be at least 1");
    ensure!(
        (0.0..=1.0).contains(&args.redeliver),
        "--redeliver is a probability (0 to 1)"
    );
    let kill_every = match args.kill_every_s.map(Duration::try_from_secs_f64) {
        None => None,
        Some(Ok(every)) if !every.is_zero() => Some(every),
        Some(_) => bail!("--kill-every-s must be a positive number of seconds"),
    };
    let visibility_s = match args.visibility_s {
        Some(v) => v,
        None => i32::try_from(6 * args.timeout_s).context("--timeout-s is too large")?,
    };
    ensure!(
        (0..=43_200).contains(&visibility_s),
        "--visibility-s must be within SQS's 0 to 43200"
    );

    let sdk = aws_config::load_defaults(BehaviorVersion::latest()).await;
    let region = sdk
        .region()
        .map_or_else(|| "us-east-1".to_owned(), ToString::to_string);
    let sqs = Client::new(&sdk);
    let queue_arn = queue_attributes(&sqs, &args.queue_url, &[QueueAttributeName::QueueArn])
        .await?
        .into_iter()
        .next()
        .unwrap_or_default();
    let account = queue_arn.split(':').nth(4).unwrap_or("123456789012");
    let function_arn = format!(
        "arn:aws:lambda:{region}:{account}:function:{}",
        args.function_name
    );
    std::fs::create_dir_all(&args.log_dir)
        .with_context(|| format!("creating {}", args.log_dir.display()))?;
    let setup = Arc::new(Setup {
        bootstrap: args.bootstrap,
        function_name: args.function_name,
        memory_mb: args.memory_mb,
        timeout: Duration::from_secs(args.timeout_s),
        function_arn,
        env: args.env,
        log_dir: args.log_dir,
        sqs: sqs.clone(),
        queue_url: args.queue_url.clone(),
        queue_arn,
        region,
        batch_size: args.batch_size,
        visibility_s,
        redeliver: args.redeliver,
    });

    let started = Instant::now();
    let (stop, stopping) = watch::channel(false);
    let switches: Vec<Arc<KillSwitch>> = (0..args.workers).map(|_| Arc::default()).collect();
    let mut workers = JoinSet::new();
    for (w, switch) in switches.iter().enumerate() {
        let (setup, switch, stopping) = (setup.clone(), switch.clone(), stopping.clone());
        let rng = Rng::new(args.seed, w as u64 + 1);
        workers.spawn(async move { (w, worker::run(setup, w, rng, switch, stopping).await) });
    }
    if let Some(every) = kill_every {
        let rng = Rng::new(args.seed, 0);
        tokio::spawn(killer(switches, every, rng, stopping.clone()));
    }

    let mut interrupt = signal(SignalKind::interrupt()).context("installing a SIGINT handler")?;
    let mut terminate = signal(SignalKind::terminate()).context("installing a SIGTERM handler")?;
    let max_runtime = async {
        match args.max_runtime_s {
            Some(s) => tokio::time::sleep(Duration::from_secs(s)).await,
            None => std::future::pending().await,
        }
    };
    let quiet = args.until_empty_s.map(Duration::from_secs);
    let stop_reason = tokio::select! {
        _ = interrupt.recv() => "signal",
        _ = terminate.recv() => "signal",
        () = max_runtime => "max_runtime",
        empty = until_empty(&sqs, &args.queue_url, quiet.unwrap_or_default()), if quiet.is_some() => {
            empty?;
            "queue_empty"
        }
        Some(ended) = workers.join_next() => {
            // Workers only end early on an error.
            let (w, result) = ended.context("a worker task panicked")?;
            result.with_context(|| format!("worker {w}"))?;
            bail!("worker {w} stopped unexpectedly")
        }
    };
    eprintln!("tidemark-fleet: stopping ({stop_reason}): finishing in-flight invocations");
    let _ = stop.send(true);

    let mut per_worker = Vec::with_capacity(args.workers);
    loop {
        let ended = tokio::select! {
            ended = workers.join_next() => ended,
            _ = interrupt.recv() => bail!("interrupted again: in-flight invocations abandoned"),
            _ = terminate.recv() => bail!("terminated again: in-flight invocations abandoned"),
        };
        let Some(ended) = ended else { break };
        let (w, result) = ended.context("a worker task panicked")?;
        let stats = result.with_context(|| format!("worker {w}"))?;
        per_worker.push(WorkerSummary { worker: w, stats });
    }
    per_worker.sort_by_key(|w| w.worker);
    let mut total = Stats::default();
    for w in &per_worker {
        total.add(&w.stats);
    }
    Ok(Summary {
        workers: args.workers,
        stop_reason,
        wall_s: (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
        total,
        per_worker,
    })
}

/// The values of some queue attributes, in the order asked.
async fn queue_attributes(
    sqs: &Client,
    queue_url: &str,
    names: &[QueueAttributeName],
) -> Result<Vec<String>> {
    let output = sqs
        .get_queue_attributes()
        .queue_url(queue_url)
        .set_attribute_names(Some(names.to_vec()))
        .send()
        .await
        .map_err(|e| anyhow::anyhow!(worker::sdk_error(&e)))
        .with_context(|| format!("GetQueueAttributes on {queue_url}"))?;
    let attributes = output.attributes.unwrap_or_default();
    names
        .iter()
        .map(|name| {
            attributes
                .get(name)
                .cloned()
                .with_context(|| format!("GetQueueAttributes on {queue_url}: no {}", name.as_str()))
        })
        .collect()
}

/// Resolves once the queue has had no visible, in-flight or delayed message for `quiet`.
async fn until_empty(sqs: &Client, queue_url: &str, quiet: Duration) -> Result<()> {
    let names = [
        QueueAttributeName::ApproximateNumberOfMessages,
        QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        QueueAttributeName::ApproximateNumberOfMessagesDelayed,
    ];
    let mut empty_since: Option<Instant> = None;
    loop {
        let mut waiting = 0u64;
        for value in queue_attributes(sqs, queue_url, &names).await? {
            waiting += value
                .parse::<u64>()
                .with_context(|| format!("a message count that is no number: {value:?}"))?;
        }
        if waiting > 0 {
            empty_since = None;
        } else if empty_since.get_or_insert_with(Instant::now).elapsed() >= quiet {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Every `every`, kill the process of one random worker among those inside an invocation
/// (none then: nothing this time).
async fn killer(
    switches: Vec<Arc<KillSwitch>>,
    every: Duration,
    mut rng: Rng,
    mut stopping: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopping.changed() => return,
        }
        let armed: Vec<usize> = (0..switches.len())
            .filter(|&w| switches[w].is_armed())
            .collect();
        if armed.is_empty() {
            continue;
        }
        let w = armed[rng.below(armed.len())];
        if switches[w].fire() {
            eprintln!("tidemark-fleet: chaos: killing worker {w}'s function mid-invocation");
        }
    }
}
