//! `tidemark`, the operator CLI, as a library: `main.rs` parses the command line and calls
//! [`main_with`]; the test suites call the same functions with their own backends.
//!
//! It runs the same core as the Lambdas, on either backend pair, chosen at run time:
//! - `--backend local` (the default): embedded backends under `--root` (default
//!   `./.tidemark`): buckets are the folders `<root>/buckets/<bucket>`, the ledger is the SQLite
//!   file `<root>/ledger.db`;
//! - `--backend aws`: S3 and DynamoDB from the standard AWS environment (any endpoint:
//!   `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL_DYNAMODB`, so the local stack works), the ledger
//!   table named by `TIDEMARK_TABLE`.
//!
//! Module map, one module per command group:
//! - [`backend`]: opening the backends; [`render`]: tables, times, durations; [`when`]:
//!   parsing `TIME` arguments; [`totals`]: exact rows and sums (ledger, lake);
//! - [`commands::run`]: `run` and `replay`; [`commands::status`]: `status`;
//!   [`commands::explain`]: `explain`; [`commands::watermark`]: `rewind`, `reset`,
//!   `mark-processed`, `forget`; [`commands::mode`]: `mode`; [`commands::audit`]: `audit` and
//!   the audit entries every state-changing command writes; [`commands::invoke`]: `invoke`;
//!   [`commands::outputs`]: `outputs`; [`commands::repair`]: `reconcile`;
//!   [`commands::backfill`]: `backfill` and `backfill status`; [`commands::convert`]:
//!   `convert` (alias `check`), a local file under a source's contract (no backend);
//! - [`demo`]: `demo`, the zero-setup tour.
//!
//! Exit codes: 0 success; 1 the command ran and found a problem (an object failed, a record
//! is missing, the demo's totals differ); 2 the command could not run (usage, configuration,
//! backend).

pub mod backend;
pub mod commands;
pub mod demo;
pub mod render;
pub mod totals;
pub mod when;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use tidemark::config::{Config, Mode};

pub use backend::{Backend, BackendKind};

/// Errors of the CLI: shown to the operator as they are.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Where a command writes what it shows (stdout in the binary, a buffer in tests).
pub type Out<'a> = &'a mut (dyn Write + Send);

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "tidemark",
    version,
    about = "Process what is new in S3 exactly once: operator CLI",
    long_about = "Process what is new in S3 exactly once: operator CLI.\n\n\
        Runs the same pipeline as the Lambdas on the embedded backends (a folder per bucket and \
        a SQLite ledger under --root) or on AWS (S3 + DynamoDB, any endpoint), and reads, \
        rewinds, resets and sets the ledger. Start with `tidemark demo`."
)]
pub struct Cli {
    /// Backends: `local` (folders + SQLite under --root) or `aws` (S3 + DynamoDB from the
    /// AWS environment, table from TIDEMARK_TABLE).
    #[arg(long, global = true, env = "TIDEMARK_BACKEND", value_enum,
          default_value_t = BackendKind::Local, help_heading = "Global options")]
    pub backend: BackendKind,
    /// Root of the local backend: buckets are <root>/buckets/<bucket>, the ledger
    /// <root>/ledger.db.
    #[arg(
        long,
        global = true,
        env = "TIDEMARK_ROOT",
        default_value = "./.tidemark",
        help_heading = "Global options"
    )]
    pub root: PathBuf,
    /// The sources document (JSON); else TIDEMARK_CONFIG (the document inline).
    #[arg(
        long,
        global = true,
        env = "TIDEMARK_CONFIG_FILE",
        help_heading = "Global options"
    )]
    pub config: Option<PathBuf>,
    /// Print machine-readable JSON instead of tables.
    #[arg(long, global = true, help_heading = "Global options")]
    pub json: bool,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Make the embedded workspace under --root (the folder, the SQLite ledger, a folder for
    /// every bucket the sources name), or on AWS check that the table and buckets answer.
    ///
    /// Idempotent: run it again after adding a source. Every other command on the embedded
    /// backends needs the workspace, so a mistyped --root is an error, not an empty ledger.
    /// Exits 1 when something on AWS is missing.
    Init,
    /// Process every unseen object of each source (or one) once: list, claim, convert, commit.
    ///
    /// Objects already done for their current ETag are skipped without counting against the
    /// bounds. The source's mode applies (`tidemark mode` overrides the document's): pause
    /// writes outputs without advancing the ledger, disable processes every object, ledger
    /// untouched. Exits 1 if any object failed.
    Run(commands::run::RunArgs),
    /// Show, per source, objects by status, rows and sums, last commit and lag.
    Status {
        /// Only this source.
        #[arg(long)]
        source: Option<String>,
    },
    /// Show the whole ledger record of one object, and the audit entries that named it.
    Explain {
        /// The source id.
        source: String,
        /// The object key (decoded, as in S3).
        key: String,
    },
    /// Move the watermark back: forget every object committed at or after TIME, so the next
    /// `run` processes it again and REPLACES its output (never duplicate rows).
    Rewind(commands::watermark::RewindArgs),
    /// Forget the records of a source (or a prefix of it), optionally purging their outputs.
    Reset(commands::watermark::ResetArgs),
    /// Set the watermark: record the objects present now as processed WITHOUT processing them.
    ///
    /// Each object is committed for its current ETag with rows 0 and no outputs (`status` and
    /// `explain` show them with rows 0), so a later `run` skips it; a newer version of it is
    /// processed as usual. The lake is not touched.
    MarkProcessed(commands::watermark::MarkArgs),
    /// Forget one object: the next `run` (or event) processes it again.
    Forget {
        /// The source id.
        source: String,
        /// The object key.
        key: String,
    },
    /// What deploying the sources document given by --config would do, against the live
    /// ledger and buckets: per source the objects it would process (new), process again
    /// (committed under another id), rewrite with `backfill --stale-config`, or stop tracking;
    /// ledger state of ids the document lacks (a rename: `rename-source`), keys two sources
    /// take. Run it before every deploy. Exits 1 when anything would be reprocessed, rewritten,
    /// orphaned, untracked or taken twice, unless --allow.
    Plan {
        /// Exit 0 even when the plan needs attention.
        #[arg(long)]
        allow: bool,
    },
    /// Move the ledger state of a renamed source (an id the document no longer has, listed
    /// by `status`) to the id that replaced it, so the rename costs no reprocessing.
    ///
    /// Conditional writes, resumable (run it again after a crash or a conflict), audited
    /// under both ids; the row-level bookmark, mode override and reconcile window state move
    /// too. Outputs are never touched: NEW must write to the same output location as OLD.
    /// Exits 1 while something of OLD is left (a live claim, a key NEW already holds).
    RenameSource {
        /// The id the ledger holds and the document no longer has.
        old: String,
        /// The id of the document that replaces it.
        new: String,
    },
    /// Set a source's mode (Glue's job-bookmark options), stored in the ledger.
    ///
    /// enable: process what is new and advance the ledger. pause: process what is new into its
    /// outputs without advancing the ledger. disable: process every object into its output,
    /// ledger untouched. The override is read by the CLI (`run`, `status`); the Lambdas read
    /// the mode from their configuration document only.
    Mode {
        /// The source id.
        source: String,
        /// enable, pause or disable.
        mode: Mode,
    },
    /// Process a range again without advancing the ledger: outputs are replaced by key.
    Replay(commands::run::ReplayArgs),
    /// Publish each table source's ledger state into its Delta table (`output.table`): a
    /// sweep comparing every record with the table, one commit of the difference. What the
    /// publish Lambda does on its schedule; safe beside it (commits are idempotent and
    /// retried after a lost race). `run` does it for the sources it processed. Exits 1 when
    /// a table could not be published.
    Publish {
        /// Only this source.
        #[arg(long)]
        source: Option<String>,
    },
    /// Maintain the Delta tables: compaction of closed partitions (newest file older than
    /// --compact-after, no object in them in flight), a checkpoint, log files older than
    /// --log-retention removed (behind a checkpoint), VACUUM of data files unreferenced for
    /// --file-retention (replaced and deleted objects' files, leftovers of attempts that never
    /// committed) except those the ledger names. One writer at a time: not beside another
    /// `maintain`.
    Maintain(commands::table::MaintainArgs),
    /// Run a Lambda handler in-process on an event file, against the chosen backends.
    Invoke {
        /// The function.
        function: commands::invoke::Function,
        /// The event (any shape the function accepts: S3, SQS, SNS, EventBridge).
        #[arg(long)]
        event: PathBuf,
        /// Objects processed at once.
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
    },
    /// List a source's Parquet outputs, read back: rows and sums per file and in total.
    Outputs {
        /// The source id.
        source: String,
    },
    /// Show the audit log of the state-changing commands.
    Audit {
        /// Only this source.
        #[arg(long)]
        source: Option<String>,
    },
    /// Reconcile: find what is missing, stale, stuck, orphaned or quarantined, compare the
    /// ledger's rows with the outputs' footers, and rows and sums of source, ledger and lake
    /// for a sample (every object with --deep), and repair. Without --from/--to, close each
    /// source's next windows as the scheduled function does. Exits 1 unless clean.
    Reconcile(commands::repair::ReconcileArgs),
    /// Backfill a source (or a prefix / time range of it, or an S3 Inventory): the planner
    /// lists what is not done and enqueues it as work items; the fleet (local worker tasks on
    /// the embedded backends, the ingest function on AWS) takes them through the exactly-once
    /// path. `backfill status [JOB]` shows the jobs.
    Backfill(commands::backfill::BackfillArgs),
    /// Convert a local file under a source's contract, as ingest would convert an object, and
    /// print the output's columns with their types (`struct<…>`, `array<…>`, as the schema
    /// spells them), rows, exact sums, row groups, bytes, output size, time, and the rows and
    /// fields that did not land in their columns: rejected rows, rescued rows, and the fields
    /// not in the schema whose values were ignored, with their counts. `check` is the same
    /// command: without OUT, it checks a file against the contract and writes nothing.
    ///
    /// Format and compression are decided for a key as ingest decides them (--key, default:
    /// the source's prefix followed by IN's file name); a key the source's include / exclude
    /// globs would not select is converted anyway, with a warning. The bad-row policy and
    /// limits are the source's. A source with bookmark keys runs the rows through ingest's
    /// row filter, but from no mark (the mark is in the ledger, which convert does not read):
    /// only keys repeated within the file are skipped. No backend is opened. Exits 1 when the
    /// file does not convert (the error names the file, line and column).
    #[command(visible_alias = "check")]
    Convert(commands::convert::ConvertArgs),
    /// Propose a source from sample files: format, CSV dialect and schema (nested types for
    /// JSON Lines; Parquet, Avro and ORC files' own schemas), with per column the values,
    /// NULLs and an example seen. Every sampled file is then converted under the proposal, as
    /// ingest would convert it; a column that fails is widened (to `string`, or `json` for a
    /// nested one) with a note saying why. Prints the source block to paste into the sources
    /// document. Files named as AWS names its logs (CloudTrail, load balancer, CloudFront, S3
    /// access, VPC flow and WAF logs) get their preset instead (`"preset": "aws.alb"`), once
    /// every sampled file converts under it. Needs no sources document and opens no backend.
    /// Exits 1 when a sampled file does not convert under any proposal (the answer names it).
    Infer(commands::infer::InferArgs),
    /// Each source's table in the Glue Data Catalog: `sync` creates and updates them from the
    /// sources document (additive changes only; a breaking one is refused with the
    /// difference), `ddl` prints the Athena DDL of the same tables. Opens no ledger.
    Catalog(commands::catalog::CatalogArgs),
    /// The presets for the logs AWS writes to S3 (CloudTrail, CloudWatch Logs via Firehose,
    /// ALB, NLB, Classic ELB, CloudFront, S3 access, VPC flow, WAF): `presets` lists them,
    /// `presets show NAME` prints one as a source block to paste and edit. A source uses one
    /// with `"preset": NAME`. Needs no sources document and opens no backend.
    Presets(commands::presets::PresetsArgs),
    /// The zero-setup tour on the embedded backends: generate data, run, overwrite, delete,
    /// and check rows and sums of source, lake and ledger.
    Demo {
        /// Where to put it (an empty or new directory); default: a fresh temp directory.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// Parse a command line (the first item is the program name), as `main` does.
pub fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    Cli::try_parse_from(args)
}

/// Run the command line; errors are printed to stderr. The exit code follows the module docs.
pub async fn main_with(cli: Cli, out: Out<'_>) -> ExitCode {
    match execute(cli, out).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tidemark: {e}");
            ExitCode::from(2)
        }
    }
}

/// Load the configuration, open the backends and run the command.
pub async fn execute(cli: Cli, out: Out<'_>) -> Result<ExitCode, Error> {
    if let Command::Demo { dir } = &cli.command {
        return demo::demo(dir.clone(), out).await;
    }
    // Data compiled in: no sources document, no backend.
    if let Command::Presets(args) = cli.command {
        return commands::presets::presets_command(args, cli.json, out);
    }
    // Sample files, no sources document, no backend.
    if let Command::Infer(args) = cli.command {
        if args.rescued.is_some() {
            let config = Arc::new(match &cli.config {
                Some(path) => Config::from_file(path)?,
                None => Config::from_env()?,
            });
            let backend = Backend::open(cli.backend, &cli.root, config).await?;
            return dispatch(Command::Infer(args), &backend, cli.json, out).await;
        }
        return commands::infer::infer_command(
            args,
            cli.backend,
            &cli.root,
            cli.config.as_deref(),
            cli.json,
            out,
        )
        .await;
    }
    let config = Arc::new(match &cli.config {
        Some(path) => Config::from_file(path)?,
        None => Config::from_env()?,
    });
    // A local file against the sources document: no backend to open.
    if let Command::Convert(args) = cli.command {
        return commands::convert::convert_command(config, args, cli.json, out).await;
    }
    // The Glue catalog against the sources document: no ledger to open.
    if let Command::Catalog(args) = cli.command {
        return commands::catalog::catalog_command(&config, args, cli.json, out).await;
    }
    if let Command::Init = cli.command {
        return commands::init::init_command(cli.backend, &cli.root, config, cli.json, out).await;
    }
    let backend = Backend::open(cli.backend, &cli.root, config).await?;
    dispatch(cli.command, &backend, cli.json, out).await
}

/// Run a command on open backends.
pub async fn dispatch(
    command: Command,
    backend: &Backend,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    use commands::*;
    match command {
        Command::Init => Err("init opens the backends itself: use `execute`".into()),
        Command::Run(args) => run::run_command(backend, &args.into(), json, out).await,
        Command::Replay(args) => run::run_command(backend, &args.into(), json, out).await,
        Command::Status { source } => status::status_command(backend, source, json, out).await,
        Command::Publish { source } => table::publish_command(backend, source, json, out).await,
        Command::Maintain(args) => table::maintain_command(backend, &args, json, out).await,
        Command::Explain { source, key } => {
            explain::explain_command(backend, &source, &key, json, out).await
        }
        Command::Rewind(args) => watermark::rewind_command(backend, &args, json, out).await,
        Command::Reset(args) => watermark::reset_command(backend, &args, json, out).await,
        Command::MarkProcessed(args) => watermark::mark_command(backend, &args, json, out).await,
        Command::Forget { source, key } => {
            watermark::forget_command(backend, &source, &key, json, out).await
        }
        Command::Plan { allow } => plan::plan_command(backend, allow, json, out).await,
        Command::RenameSource { old, new } => {
            rename::rename_command(backend, &old, &new, json, out).await
        }
        Command::Mode { source, mode } => {
            mode::mode_command(backend, &source, mode, json, out).await
        }
        Command::Invoke {
            function,
            event,
            concurrency,
        } => invoke::invoke_command(backend, function, &event, concurrency, out).await,
        Command::Outputs { source } => outputs::outputs_command(backend, &source, json, out).await,
        Command::Audit { source } => audit::audit_command(backend, source, json, out).await,
        Command::Reconcile(args) => repair::reconcile_command(backend, &args, json, out).await,
        Command::Backfill(args) => backfill::backfill_command(backend, &args, json, out).await,
        Command::Convert(args) => {
            convert::convert_command(backend.pipeline.config.clone(), args, json, out).await
        }
        Command::Demo { dir } => demo::demo(dir, out).await,
        Command::Presets(args) => presets::presets_command(args, json, out),
        Command::Catalog(args) => {
            catalog::catalog_command(&backend.pipeline.config, args, json, out).await
        }
        // `execute` runs it before any backend is opened: it reads sample files, not a ledger.
        Command::Infer(args) => match &args.rescued {
            Some(id) => {
                rescued::rescued_command(
                    backend,
                    id,
                    args.sample_files,
                    args.sample_bytes,
                    json,
                    out,
                )
                .await
            }
            // `execute` runs it before any backend is opened: it reads sample files.
            None => Err("infer PATH… reads sample files and opens no backend: \
                         run it through `execute`"
                .into()),
        },
    }
}
