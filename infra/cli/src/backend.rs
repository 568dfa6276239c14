//! Opening the backends the CLI runs on, chosen at run time: the embedded pair (a folder per
//! bucket and a SQLite ledger under one root) or the AWS pair (S3 + DynamoDB from the AWS
//! environment). Commands see only a [`Backend`]: the pipeline over its ports, plus the
//! operator's mode overrides read from the ledger.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::ValueEnum;
use tidemark::config::{Config, Mode, Source};
use tidemark::local::{FolderStore, LocalQueue, SqliteLedger};
use tidemark::ports::{Clock, SystemClock, WorkQueue};
use tidemark::process::{Pipeline, RunContext};

use crate::Error;

/// Which backend pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// Folders as buckets and a SQLite ledger, under `--root`.
    Local,
    /// S3 and DynamoDB (any endpoint), the table named by `TIDEMARK_TABLE`.
    Aws,
}

/// How long a CLI worker's claim is meant to last, before the lease margin: the CLI is one
/// process, so its "invocation deadline" is simply far enough ahead for one object.
pub const CLAIM_DEADLINE_MS: i64 = 15 * 60 * 1000;

/// Where a source's effective mode comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModeOrigin {
    /// The sources document.
    Config,
    /// The operator's override in the ledger (`tidemark mode`).
    Override,
}

/// The ledger file of the embedded pair under a root.
pub const LEDGER_FILE: &str = "ledger.db";

/// Every bucket the sources name, landing and output, once each, in order.
pub fn buckets(config: &Config) -> Vec<String> {
    let mut buckets: Vec<String> = Vec::new();
    for source in &config.sources {
        for bucket in [&source.doc.bucket, &source.doc.output.bucket] {
            if !buckets.contains(bucket) {
                buckets.push(bucket.clone());
            }
        }
    }
    buckets
}

/// `root` holds an embedded workspace (its ledger), or an error saying what is missing.
fn workspace_exists(root: &Path) -> Result<(), Error> {
    let shown = root.display();
    if !root.is_dir() {
        return Err(format!(
            "no workspace at {shown}: the folder does not exist (check --root / TIDEMARK_ROOT; \
             `tidemark init --root {shown}` creates one)"
        )
        .into());
    }
    if !root.join(LEDGER_FILE).is_file() {
        return Err(format!(
            "no workspace at {shown}: it has no {LEDGER_FILE} (check --root / TIDEMARK_ROOT; \
             `tidemark init --root {shown}` makes it one)"
        )
        .into());
    }
    Ok(())
}

/// Open backends: the pipeline the commands drive.
#[derive(Clone)]
pub struct Backend {
    /// The pipeline over the chosen ports (its `config` holds the sources).
    pub pipeline: Pipeline,
    /// A short description for summaries (`embedded: ./.tidemark`, `aws: table …`).
    pub description: String,
    /// The SQLite ledger file, for the embedded pair.
    pub ledger_path: Option<PathBuf>,
    /// The work queue of backfills: on the embedded pair a SQLite file beside the ledger
    /// (`<root>/queue.db`); on AWS `None`, and `backfill` opens the queue named by
    /// `TIDEMARK_BACKFILL_QUEUE_URL`.
    pub backfill_queue: Option<Arc<dyn WorkQueue>>,
    /// Where the sources' Delta tables live (the folder store's buckets, or S3); `None` for
    /// backends built around a pipeline without one ([`Backend::with_tables`]).
    pub tables: Option<tidemark_delta::TableStore>,
}

impl Backend {
    /// Open the backends of `kind`. The embedded pair must exist already (`tidemark init`
    /// makes it): a mistyped `--root` is an error naming it, not an empty workspace.
    pub async fn open(kind: BackendKind, root: &Path, config: Arc<Config>) -> Result<Self, Error> {
        match kind {
            BackendKind::Local => {
                workspace_exists(root)?;
                Self::embedded(root, config, Arc::new(SystemClock), false).await
            }
            BackendKind::Aws => Self::aws(config).await,
        }
    }

    /// The embedded pair under `root`, creating the root, the ledger and every bucket the
    /// sources name (so a fresh root works at once: drop files into its landing folders).
    pub async fn local(
        root: &Path,
        config: Arc<Config>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, Error> {
        Self::embedded(root, config, clock, true).await
    }

    async fn embedded(
        root: &Path,
        config: Arc<Config>,
        clock: Arc<dyn Clock>,
        create: bool,
    ) -> Result<Self, Error> {
        if create {
            std::fs::create_dir_all(root)
                .map_err(|e| format!("cannot create the root {}: {e}", root.display()))?;
        }
        let store = FolderStore::new(root.join("buckets"));
        if create {
            for bucket in buckets(&config) {
                store.create_bucket(&bucket).await?;
            }
        }
        let ledger_path = root.join(LEDGER_FILE);
        let ledger = SqliteLedger::open(&ledger_path)?;
        let queue = LocalQueue::open(root.join("queue.db"), "backfill")?;
        Ok(Self {
            pipeline: Pipeline::new(Arc::new(store), Arc::new(ledger), clock, config),
            description: format!("embedded: {}", root.display()),
            ledger_path: Some(ledger_path),
            backfill_queue: Some(Arc::new(queue)),
            tables: Some(tidemark_delta::TableStore::Local {
                root: root.join("buckets"),
            }),
        })
    }

    /// The AWS pair from the environment.
    pub async fn aws(config: Arc<Config>) -> Result<Self, Error> {
        let pipeline = tidemark::aws::pipeline_from_env(config).await?;
        let table = std::env::var(tidemark::aws::ENV_TABLE).unwrap_or_default();
        Ok(Self::from_pipeline(pipeline, format!("aws: table {table}"))
            .with_tables(tidemark_delta::TableStore::s3_from_env()))
    }

    /// Backends around a pipeline built elsewhere (tests, other tools).
    pub fn from_pipeline(pipeline: Pipeline, description: impl Into<String>) -> Self {
        Self {
            pipeline,
            description: description.into(),
            ledger_path: None,
            backfill_queue: None,
            tables: None,
        }
    }

    /// These backends with the sources' Delta tables at `tables`.
    pub fn with_tables(mut self, tables: tidemark_delta::TableStore) -> Self {
        self.tables = Some(tables);
        self
    }

    /// The table committer over these backends.
    pub fn publisher(&self) -> Result<tidemark_delta::Publisher, Error> {
        let tables = self.tables.clone().ok_or(
            "these backends have no table store (a pipeline built without one): \
             Backend::with_tables",
        )?;
        Ok(tidemark_delta::Publisher::new(
            self.pipeline.config.clone(),
            self.pipeline.ledger.clone(),
            self.pipeline.store.clone(),
            tables,
            self.pipeline.clock.clone(),
        ))
    }

    /// These backends with `queue` as the work queue of backfills.
    pub fn with_backfill_queue(mut self, queue: Arc<dyn WorkQueue>) -> Self {
        self.backfill_queue = Some(queue);
        self
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.pipeline.config
    }

    /// Now, by the pipeline's clock (ms since the epoch).
    pub fn now(&self) -> i64 {
        self.pipeline.clock.now_ms()
    }

    /// A run context for one object of run `run_id`: its lease runs from now.
    pub fn ctx(&self, run_id: &str) -> RunContext {
        RunContext::new(run_id.to_string(), self.now() + CLAIM_DEADLINE_MS)
    }

    /// The source `id`, which must be in the configuration.
    pub fn source(&self, id: &str) -> Result<&Source, Error> {
        source_in(self.config(), id)
    }

    /// The source `id`, or every source.
    pub fn sources(&self, id: Option<&str>) -> Result<Vec<&Source>, Error> {
        match id {
            Some(id) => Ok(vec![self.source(id)?]),
            None => Ok(self.config().sources.iter().collect()),
        }
    }

    /// The source as `run` sees it: with the operator's mode override applied.
    pub async fn effective(&self, source: &Source) -> Result<(Source, ModeOrigin), Error> {
        let mut effective = source.clone();
        match self.pipeline.ledger.source_mode(source.id()).await? {
            Some(mode) => {
                effective.doc.mode = mode;
                Ok((effective, ModeOrigin::Override))
            }
            None => Ok((effective, ModeOrigin::Config)),
        }
    }

    /// The source with `mode` forced (replay).
    pub fn with_mode(source: &Source, mode: Mode) -> Source {
        let mut s = source.clone();
        s.doc.mode = mode;
        s
    }
}

/// The source `id` of `config`, or an error naming the sources there are.
pub fn source_in<'a>(config: &'a Config, id: &str) -> Result<&'a Source, Error> {
    config.source(id).ok_or_else(|| {
        let known: Vec<&str> = config.sources.iter().map(|s| s.id()).collect();
        format!(
            "no source {id:?} in the configuration (sources: {})",
            known.join(", ")
        )
        .into()
    })
}
