//! `tidemark`, the operator CLI. It runs the same core as the Lambdas: `invoke` runs a
//! function's handler in-process on an event file, `explain` shows one object's ledger
//! record, `outputs` lists a source's Parquet outputs with their row counts.
//!
//! Backends: AWS (any endpoint: `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL_DYNAMODB`, so the
//! local stack works) with the ledger table named by `TIDEMARK_TABLE`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand, ValueEnum};
use parquet::file::reader::{FileReader, SerializedFileReader};
use tidemark::config::Config;
use tidemark::ingest;
use tidemark::model::{Record, Target};
use tidemark::ports::{Clock, GetOutcome, SystemClock};
use tidemark::process::{Pipeline, RunContext};
use tokio::io::AsyncReadExt;

#[derive(Parser)]
#[command(
    name = "tidemark",
    version,
    about = "Process what is new in S3 exactly once: operator CLI"
)]
struct Cli {
    /// The sources document (JSON).
    #[arg(long, global = true, env = "TIDEMARK_CONFIG_FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a Lambda handler in-process on an event file.
    Invoke {
        /// The function.
        function: Function,
        /// The event (any shape the function accepts: S3, SQS, SNS, EventBridge).
        #[arg(long)]
        event: PathBuf,
        /// Objects processed at once.
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
    },
    /// Show the ledger record of one object.
    Explain {
        /// The source id.
        source: String,
        /// The object key (decoded, as in S3).
        key: String,
        /// Print the record as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List a source's outputs with their row counts.
    Outputs {
        /// The source id.
        source: String,
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Function {
    /// The ingest function.
    Ingest,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    tidemark::telemetry::init("warn");
    match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tidemark: {e}");
            ExitCode::from(2)
        }
    }
}

type Error = Box<dyn std::error::Error>;

async fn run(cli: Cli) -> Result<ExitCode, Error> {
    let config = Arc::new(match &cli.config {
        Some(path) => Config::from_file(path)?,
        None => Config::from_env()?,
    });
    let pipeline = tidemark::aws::pipeline_from_env(config.clone()).await?;
    match cli.command {
        Command::Invoke {
            function: Function::Ingest,
            event,
            concurrency,
        } => invoke(&pipeline, &event, concurrency).await,
        Command::Explain { source, key, json } => {
            let Some(record) = pipeline.ledger.get(&source, &key).await? else {
                eprintln!("no ledger record for {source} / {key}: never seen");
                return Ok(ExitCode::from(1));
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&record)?);
            } else {
                print!("{}", describe(&record));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Outputs { source, json } => {
            let source = config
                .source(&source)
                .ok_or_else(|| format!("no source {source:?} in the configuration"))?;
            outputs(&pipeline, source, json).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn invoke(
    pipeline: &Pipeline,
    event: &PathBuf,
    concurrency: usize,
) -> Result<ExitCode, Error> {
    let text = std::fs::read_to_string(event)
        .map_err(|e| format!("cannot read {}: {e}", event.display()))?;
    let payload: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", event.display()))?;
    let ctx = RunContext {
        run_id: format!("cli-{}", uuid::Uuid::new_v4()),
        deadline_ms: SystemClock.now_ms() + 15 * 60 * 1000,
    };
    let response = ingest::handle(pipeline, &payload, &ctx, concurrency).await?;
    eprintln!("summary: {}", serde_json::to_string(&response.summary)?);
    for e in &response.errors {
        eprintln!("error: {e}");
    }
    println!("{}", serde_json::to_string_pretty(&response.to_json())?);
    Ok(
        if response.must_fail() || !response.retry_messages.is_empty() {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        },
    )
}

fn when(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

fn describe(r: &Record) -> String {
    let mut out = format!(
        "source:     {}\nkey:        {}\nstatus:     {}\nrevision:   {}\nupdated:    {}\n",
        r.source_id,
        r.key,
        r.status.as_str(),
        r.rev,
        when(r.updated_at)
    );
    let label = |t: &Target| match t {
        Target::Version(v) => format!(
            "version {} (etag {}, sequencer {})",
            v.version,
            v.etag.as_deref().unwrap_or("-"),
            v.sequencer
                .as_ref()
                .map_or("-".to_string(), |s| s.to_string())
        ),
        Target::Delete(d) => format!(
            "delete (sequencer {})",
            d.sequencer
                .as_ref()
                .map_or("-".to_string(), |s| s.to_string())
        ),
    };
    if let Some(c) = &r.committed {
        out += &format!(
            "committed:  {} at {} by run {}\n  rows:     {}\n",
            label(&c.target),
            when(c.committed_at),
            c.run_id,
            c.rows
        );
        for (col, sum) in &c.sums {
            out += &format!("  sum({col}): {sum}\n");
        }
        for o in &c.outputs {
            out += &format!(
                "  output:   s3://{}/{} (etag {})\n",
                o.bucket, o.key, o.etag
            );
        }
        out += &format!("  config:   {}\n", c.config_fp);
    }
    if let Some(c) = &r.claim {
        out += &format!(
            "claim:      {} by run {}, lease until {}\n",
            label(&c.target),
            c.run_id,
            when(c.lease_until)
        );
    }
    if let Some(p) = &r.pending {
        out += &format!("pending:    {}\n", label(p));
    }
    out += &format!("attempts:   {}\n", r.attempts);
    if let Some(e) = &r.last_error {
        out += &format!("last error: {e}\n");
    }
    if let Some(n) = &r.note {
        out += &format!("note:       {n}\n");
    }
    out
}

async fn outputs(
    pipeline: &Pipeline,
    source: &tidemark::config::Source,
    json: bool,
) -> Result<(), Error> {
    let out = &source.doc.output;
    let mut token: Option<String> = None;
    let (mut files, mut rows) = (0u64, 0i64);
    loop {
        let page = pipeline
            .store
            .list(&out.bucket, &out.prefix, token.as_deref())
            .await?;
        for o in &page.objects {
            let GetOutcome::Found { mut body, .. } =
                pipeline.store.get(&out.bucket, &o.key, None).await?
            else {
                continue;
            };
            let mut bytes = Vec::with_capacity(o.size as usize);
            body.read_to_end(&mut bytes).await?;
            let n = SerializedFileReader::new(bytes::Bytes::from(bytes))
                .map_err(|e| format!("s3://{}/{}: {e}", out.bucket, o.key))?
                .metadata()
                .file_metadata()
                .num_rows();
            files += 1;
            rows += n;
            if json {
                println!(
                    "{}",
                    serde_json::json!({"bucket": out.bucket, "key": o.key, "rows": n, "bytes": o.size, "etag": o.etag})
                );
            } else {
                println!(
                    "{n:>10} rows  {:>10} bytes  s3://{}/{}",
                    o.size, out.bucket, o.key
                );
            }
        }
        match page.next {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    if !json {
        println!("{rows:>10} rows in {files} file(s)");
    }
    Ok(())
}
