//! The table committer: publishes what the ledger committed into each source's Delta Lake
//! table (`output.table`), many objects per table commit, exactly.
//!
//! # The crate
//! The Delta committer library (`tidemark-delta`), used by the publish function
//! (`functions/publish`: the change feed and the sweeps), by the maintenance function (the
//! same binary with `TIDEMARK_MAINTENANCE=1`: [`maintain`], compaction and the [`catalog`]
//! step) and by the CLI (`tidemark publish`, `maintain`, `status`, `catalog`). It is a crate of
//! its own because of `deltalake`: its size (delta kernel, object_store, an arrow of its own)
//! and its build time stay out of the core `tidemark` (`shared/`) and out of the other
//! functions, which never compile or link it.
//!
//! # What a publish does
//! A publish is given a source and the keys whose records changed (from the ledger's change
//! feed: DynamoDB Streams, see [`stream`]), or asked to compare the whole source (a sweep:
//! the embedded backends, a repair, a first publish of an existing lake). It
//! 1. loads the table's latest snapshot (creating the table on first use);
//! 2. reads the keys' records **strongly consistent** from the ledger (a sweep lists the
//!    source, then re-reads consistently every key that differs);
//! 3. computes, per key, the files the table must hold (the committed outputs of the record;
//!    none for a deleted or forgotten object) against the files it holds (found by the key's
//!    hash in their names), giving Add actions (with the row count and statistics read from
//!    each new file's footer) and Remove actions (the replaced or deleted version's file);
//! 4. commits them in one table version, with the application transaction
//!    `tidemark:<source_id>` at the next version (read from the snapshot before every
//!    attempt), or nothing at all when the table already matches.
//!
//! A commit that loses the race to another writer is rebuilt from step 1 after a jittered
//! backoff. Because every attempt derives its actions from the ledger's current state and
//! the table's current snapshot, a publish repeated after a crash at any step (before the
//! commit, after it, before the change feed is acknowledged) finds nothing left to do: no
//! object is published twice, and a replace (Remove + Add) lands in one version, so a reader
//! sees the old rows or the new ones, never both or neither. The ledger stays the truth: the
//! table can be rebuilt from it.
//!
//! Checkpoints, log cleanup, VACUUM and compaction are not done by a publish: the maintenance
//! function does them, with [`maintain`] (docs/pages/design/committer.md).

pub mod catalog;
pub mod delta;
pub mod maintain;
mod merge;
pub mod stats;
pub mod stream;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use deltalake::kernel::{Action, Add, Remove};
use deltalake::{DeltaTable, DeltaTableError};
use futures::StreamExt;
use serde::Serialize;
use tidemark::config::{Config, Source, table_key_hash, table_key_hash_of};
use tidemark::error::LedgerError;
use tidemark::model::Record;
use tidemark::ports::{Clock, Ledger, ObjectStore};
use tidemark::reconcile::outputs::{Read, read_footer};
use tracing::{info, warn};

pub use delta::TableStore;

/// A data file's size and statistics JSON.
type Footer = (i64, String);

/// Footers of new files read at once.
const FOOTER_READS: usize = 32;

/// A step of a publish, where a test can stop it as a crash would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The table's snapshot is loaded.
    Loaded,
    /// The records are read and the actions built (footers read).
    Planned,
    /// The commit landed; nothing after it ran (the change feed is not acknowledged).
    Committed,
}

/// Injected failures (tests); the default injects none.
pub trait Faults: Send + Sync {
    /// Fail at `step` of a publish of `source_id`.
    fn check(&self, step: Step, source_id: &str) -> Result<(), PublishError>;
}

/// No failures.
#[derive(Debug, Default)]
pub struct NoFaults;

impl Faults for NoFaults {
    fn check(&self, _: Step, _: &str) -> Result<(), PublishError> {
        Ok(())
    }
}

/// Why a publish did not complete. Every one is retryable: nothing is half done.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The source is not in the document, or publishes no table.
    #[error("source {0:?} publishes no table (no output.table in the sources document)")]
    NoTable(String),
    /// The table could not be read or written.
    #[error("table of source {source_id:?}: {error}")]
    Table {
        /// The source.
        source_id: String,
        /// What delta-rs said.
        error: DeltaTableError,
    },
    /// The ledger could not be read.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// A committed output could not be read (missing, changed, not Parquet).
    #[error("source {source_id:?}, object {key:?}: output {output}: {message}")]
    Output {
        /// The source.
        source_id: String,
        /// The source key.
        key: String,
        /// `s3://bucket/key` of the output.
        output: String,
        /// What is wrong.
        message: String,
    },
    /// Other writers kept committing first.
    #[error("source {source_id:?}: {attempts} commit attempts lost to other writers")]
    Contended {
        /// The source.
        source_id: String,
        /// Attempts made.
        attempts: u32,
    },
    /// A failure injected by a test.
    #[error("stopped at {0:?} (injected)")]
    Crashed(Step),
}

/// Tunables of the commit loop.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Commit attempts before giving up (the change feed delivers the batch again).
    pub max_attempts: u32,
    /// First backoff after a lost commit; doubled per attempt, full jitter.
    pub backoff_base: Duration,
    /// Longest backoff.
    pub backoff_max: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_attempts: 12,
            backoff_base: Duration::from_millis(50),
            backoff_max: Duration::from_secs(2),
        }
    }
}

/// What one publish did.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Published {
    /// The source.
    pub source_id: String,
    /// The table version this publish committed, `None` when the table already matched.
    pub committed: Option<i64>,
    /// The table's version when the publish ended.
    pub table_version: i64,
    /// The committer's transaction version on the table after the publish (`None`: never).
    pub txn_version: Option<i64>,
    /// Files added and removed by the commit.
    pub added: usize,
    /// Files removed by the commit.
    pub removed: usize,
    /// Keys compared.
    pub keys: usize,
    /// Commit attempts (1 when no other writer interfered).
    pub attempts: u32,
}

impl Published {
    /// The CloudWatch metric line (embedded metric format, namespace `tidemark`) of this
    /// publish: files added and removed, the table version, and — for a sweep — `TableDrift`,
    /// the files the sweep had to add or remove: what the change feed did not publish (zero
    /// when the stream path works; the template does not alarm on it: see
    /// docs/pages/operations/alarms-and-metrics.md).
    pub fn metric_line(&self, now_ms: i64, sweep: bool) -> String {
        let mut metrics = vec![
            serde_json::json!({"Name": "TableFilesAdded", "Unit": "Count"}),
            serde_json::json!({"Name": "TableFilesRemoved", "Unit": "Count"}),
            serde_json::json!({"Name": "TableVersion", "Unit": "None"}),
        ];
        let mut line = serde_json::json!({
            "source_id": self.source_id,
            "TableFilesAdded": self.added,
            "TableFilesRemoved": self.removed,
            "TableVersion": self.table_version,
        });
        if sweep {
            metrics.push(serde_json::json!({"Name": "TableDrift", "Unit": "Count"}));
            line["TableDrift"] = (self.added + self.removed).into();
        }
        line["_aws"] = serde_json::json!({
            "Timestamp": now_ms,
            "CloudWatchMetrics": [{
                "Namespace": "tidemark",
                "Dimensions": [["source_id"]],
                "Metrics": metrics,
            }],
        });
        line.to_string()
    }
}

/// The committer: the ledger and lake of a deployment, and where its tables live.
pub struct Publisher {
    /// The sources document.
    pub config: Arc<Config>,
    /// The ledger (the truth the tables are published from).
    pub ledger: Arc<dyn Ledger>,
    /// The object store the outputs are read from (footers).
    pub store: Arc<dyn ObjectStore>,
    /// Where the tables live, as delta-rs reaches them.
    pub tables: TableStore,
    /// The clock (modification times, transaction times).
    pub clock: Arc<dyn Clock>,
    /// Injected failures.
    pub faults: Arc<dyn Faults>,
    /// The commit loop's tunables.
    pub settings: Settings,
    /// Manifests of compacted files read so far (they never change), by output key.
    manifests: std::sync::Mutex<HashMap<String, Arc<Vec<tidemark::compact::Entry>>>>,
    /// Tables loaded by earlier publishes of this process, by source id.
    open_tables: std::sync::Mutex<HashMap<String, DeltaTable>>,
    /// Keys and order values of merged tables' outputs read so far (they never change).
    keyed: std::sync::Mutex<tidemark::upsert::KeyedCache>,
}

/// What a publish compares.
enum Scope<'a> {
    Keys(&'a [String]),
    All,
}

/// The actions of one commit, before statistics.
#[derive(Default)]
struct Plan {
    /// (source key, output key, committed at) of each file to add.
    adds: Vec<(String, String, i64)>,
    /// Files to remove, by path.
    removes: BTreeMap<String, Remove>,
    keys: usize,
    /// Rows of the listed records whose outputs belong in the table (sweeps only).
    ledger_rows: u64,
    /// Compacted files to rewrite without these original paths' rows.
    rewrites: BTreeMap<String, BTreeSet<String>>,
    /// Files of a merged table to write: selections of outputs ([`merge`]).
    selections: Vec<merge::Selection>,
}

/// A source's table compared with its ledger, nothing written ([`Publisher::check`]).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TableCheck {
    /// The source.
    pub source_id: String,
    /// The table's URI.
    pub table: String,
    /// The table's latest version (`None`: no table yet).
    pub version: Option<i64>,
    /// The committer's transaction version on it.
    pub txn_version: Option<i64>,
    /// Active data files.
    pub files: usize,
    /// Rows of the active files (their `numRecords` statistics).
    pub table_rows: u64,
    /// Rows the ledger has committed for the files that belong in the table.
    pub ledger_rows: u64,
    /// Records compared.
    pub records: usize,
    /// Files the ledger has committed that the table lacks (not published yet).
    pub unpublished: usize,
    /// Files the table holds that the ledger no longer has (replaced, deleted, forgotten).
    pub stale: usize,
}

impl TableCheck {
    /// The table holds exactly the ledger's committed files and rows.
    pub fn is_clean(&self) -> bool {
        self.unpublished == 0 && self.stale == 0 && self.table_rows == self.ledger_rows
    }
}

impl Publisher {
    /// A publisher with the default settings and no injected failures.
    pub fn new(
        config: Arc<Config>,
        ledger: Arc<dyn Ledger>,
        store: Arc<dyn ObjectStore>,
        tables: TableStore,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            config,
            ledger,
            store,
            tables,
            clock,
            faults: Arc::new(NoFaults),
            settings: Settings::default(),
            manifests: Default::default(),
            open_tables: Default::default(),
            keyed: Default::default(),
        }
    }

    /// The sources that publish a table.
    pub fn table_sources(&self) -> impl Iterator<Item = &Source> {
        self.config.sources.iter().filter(|s| s.table().is_some())
    }

    fn source(&self, source_id: &str) -> Result<&Source, PublishError> {
        self.table_sources()
            .find(|s| s.id() == source_id)
            .ok_or_else(|| PublishError::NoTable(source_id.to_string()))
    }

    /// Publish the current state of `keys` of `source_id` (keys whose records changed).
    pub async fn publish_keys(
        &self,
        source_id: &str,
        keys: &[String],
    ) -> Result<Published, PublishError> {
        let source = self.source(source_id)?;
        self.publish(source, Scope::Keys(keys)).await
    }

    /// Compare every record of `source_id` with its table and publish the difference.
    pub async fn publish_all(&self, source_id: &str) -> Result<Published, PublishError> {
        let source = self.source(source_id)?;
        self.publish(source, Scope::All).await
    }

    /// [`Publisher::publish_all`] for every source with a table, in document order.
    pub async fn publish_every_source(&self) -> Vec<Result<Published, PublishError>> {
        let mut out = Vec::new();
        for s in self.table_sources() {
            out.push(self.publish(s, Scope::All).await);
        }
        out
    }

    async fn publish(&self, source: &Source, scope: Scope<'_>) -> Result<Published, PublishError> {
        let id = source.id();
        let table_err = |error| PublishError::Table {
            source_id: id.to_string(),
            error,
        };
        // A warm process keeps each table's snapshot and brings it up to date by reading only
        // the commits since (a cold one reads the last checkpoint and the log after it).
        let cached = self.open_tables.lock().expect("not poisoned").remove(id);
        let mut table = match cached {
            Some(mut t) => {
                t.update_state().await.map_err(table_err)?;
                t
            }
            None => delta::open(&self.tables, source).await.map_err(table_err)?,
        };
        let result = self.publish_on(source, &scope, &mut table).await;
        self.open_tables
            .lock()
            .expect("not poisoned")
            .insert(id.to_string(), table);
        result
    }

    async fn publish_on(
        &self,
        source: &Source,
        scope: &Scope<'_>,
        table: &mut DeltaTable,
    ) -> Result<Published, PublishError> {
        let id = source.id();
        let table_err = |error| PublishError::Table {
            source_id: id.to_string(),
            error,
        };
        let mut footers: HashMap<String, Footer> = HashMap::new();
        // Selections of a merged table written by an earlier attempt, reused.
        let mut selected: HashMap<(String, String), Add> = HashMap::new();
        let max = self.settings.max_attempts.max(1);
        for attempt in 1..=max {
            if attempt > 1 {
                self.backoff(attempt).await;
                table.update_state().await.map_err(table_err)?;
            }
            self.faults.check(Step::Loaded, id)?;
            let active = active_files(table).map_err(table_err)?;
            let plan = self.plan_files(source, scope, &active).await?;
            let txn = table
                .snapshot()
                .map_err(table_err)?
                .transaction_version(table.log_store().as_ref(), delta::app_id(source))
                .await
                .map_err(table_err)?;
            let version = table.version().map_or(-1, |v| v as i64);
            if plan.adds.is_empty()
                && plan.removes.is_empty()
                && plan.rewrites.is_empty()
                && plan.selections.is_empty()
            {
                return Ok(Published {
                    source_id: id.to_string(),
                    committed: None,
                    table_version: version,
                    txn_version: txn,
                    added: 0,
                    removed: 0,
                    keys: plan.keys,
                    attempts: attempt,
                });
            }
            let mut actions = Vec::with_capacity(plan.adds.len() + plan.removes.len());
            // The new files' footers, read concurrently (kept across attempts).
            // (Futures made first and then run: a stream of closures returning futures that
            // borrow would not be `Send` for every lifetime, which spawning needs.)
            let wanted: Vec<_> = plan
                .adds
                .iter()
                .filter(|(_, out_key, _)| !footers.contains_key(out_key))
                .map(|(key, out_key, _)| self.keyed_footer(source, key.clone(), out_key.clone()))
                .collect();
            let read: Vec<Result<(String, Footer), PublishError>> = futures::stream::iter(wanted)
                .buffer_unordered(FOOTER_READS)
                .collect()
                .await;
            for r in read {
                let (out_key, footer) = r?;
                footers.insert(out_key, footer);
            }
            for (_, out_key, committed_at) in &plan.adds {
                let (size, stats) = footers[out_key].clone();
                let path = relative(source, out_key).expect("planned under the table root");
                actions.push(Action::Add(Add {
                    partition_values: partition_values(source, path),
                    path: path.to_string(),
                    size,
                    modification_time: *committed_at,
                    data_change: true,
                    stats: Some(stats),
                    ..Default::default()
                }));
            }
            let (mut added, mut removed) = (plan.adds.len(), plan.removes.len());
            actions.extend(plan.removes.into_values().map(Action::Remove));
            for selection in &plan.selections {
                let written = (selection.original.clone(), selection.hash.clone());
                let add = match selected.get(&written) {
                    Some(add) => add.clone(),
                    None => {
                        let add = self.write_selection(source, selection).await?;
                        selected.insert(written, add.clone());
                        add
                    }
                };
                actions.push(Action::Add(add));
                added += 1;
            }
            for (file, without) in &plan.rewrites {
                let (add, remove) = self.rewrite(source, file, without, &active).await?;
                added += usize::from(add.is_some());
                removed += 1;
                actions.extend(add.map(Action::Add));
                actions.push(Action::Remove(remove));
            }
            self.faults.check(Step::Planned, id)?;
            let next_txn = txn.unwrap_or(-1) + 1;
            let metadata = serde_json::Map::from_iter([
                ("tidemark.source_id".to_string(), id.into()),
                ("tidemark.objects_added".to_string(), added.into()),
                ("tidemark.files_removed".to_string(), removed.into()),
            ]);
            let now = self.clock.now_ms();
            match delta::commit(table, source, actions, next_txn, now, metadata)
                .await
                .map_err(table_err)?
            {
                delta::Attempt::Committed(v) => {
                    info!(
                        source_id = id,
                        version = v,
                        added,
                        removed,
                        txn = next_txn,
                        attempt,
                        "published"
                    );
                    self.faults.check(Step::Committed, id)?;
                    return Ok(Published {
                        source_id: id.to_string(),
                        committed: Some(v),
                        table_version: v,
                        txn_version: Some(next_txn),
                        added,
                        removed,
                        keys: plan.keys,
                        attempts: attempt,
                    });
                }
                delta::Attempt::Lost => {
                    warn!(
                        source_id = id,
                        attempt, "another writer committed first; reloading"
                    );
                }
            }
        }
        Err(PublishError::Contended {
            source_id: id.to_string(),
            attempts: max,
        })
    }

    /// Compare the table of `source_id` with the ledger (a sweep that writes nothing): what
    /// reconcile-style monitoring asks of the table, and `tidemark status` shows.
    pub async fn check(&self, source_id: &str) -> Result<TableCheck, PublishError> {
        let source = self.source(source_id)?;
        let table_err = |error| PublishError::Table {
            source_id: source_id.to_string(),
            error,
        };
        let uri = self.tables.url(source).map_err(table_err)?.to_string();
        let table = delta::load_existing(&self.tables, source)
            .await
            .map_err(table_err)?;
        let (active, version, txn, table_rows) = match &table {
            Some(t) => {
                let snapshot = t.snapshot().map_err(table_err)?;
                let rows = snapshot
                    .log_data()
                    .iter()
                    .map(|f| f.num_records().unwrap_or(0) as u64)
                    .sum();
                let txn = snapshot
                    .transaction_version(t.log_store().as_ref(), delta::app_id(source))
                    .await
                    .map_err(table_err)?;
                (
                    active_files(t).map_err(table_err)?,
                    t.version().map(|v| v as i64),
                    txn,
                    rows,
                )
            }
            None => (BTreeMap::new(), None, None, 0),
        };
        let plan = self.plan_files(source, &Scope::All, &active).await?;
        Ok(TableCheck {
            source_id: source_id.to_string(),
            table: uri,
            version,
            txn_version: txn,
            files: active.len(),
            table_rows,
            ledger_rows: plan.ledger_rows,
            records: plan.keys,
            unpublished: plan.adds.len() + plan.selections.len(),
            stale: plan.removes.len(),
        })
    }

    /// Full jitter: a random wait up to `base × 2^(attempt-2)`, capped.
    async fn backoff(&self, attempt: u32) {
        let cap = self
            .settings
            .backoff_base
            .saturating_mul(1 << (attempt - 2).min(16))
            .min(self.settings.backoff_max);
        let random = (uuid::Uuid::new_v4().as_u128() % 1_000_000) as u32;
        tokio::time::sleep(cap.mul_f64(f64::from(random) / 1_000_000.0)).await;
    }

    /// [`Publisher::plan`], and for a table merged by key the selections of every live
    /// object ([`merge`]).
    async fn plan_files(
        &self,
        source: &Source,
        scope: &Scope<'_>,
        active: &BTreeMap<String, Remove>,
    ) -> Result<Plan, PublishError> {
        match source.table().and_then(|t| t.merge()) {
            None => self.plan(source, scope, active).await,
            Some((keys, order)) => {
                let view = merge::by_original(active);
                let plan = self.plan(source, scope, &view).await?;
                self.merge_plan(source, keys, order, plan, &view).await
            }
        }
    }

    /// The actions that bring the table's files for `scope` to the ledger's current state.
    async fn plan(
        &self,
        source: &Source,
        scope: &Scope<'_>,
        active: &BTreeMap<String, Remove>,
    ) -> Result<Plan, PublishError> {
        let id = source.id();
        match scope {
            Scope::Keys(keys) => {
                let keys: Vec<String> = keys
                    .iter()
                    .cloned()
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect();
                // Compacted files only matter in the partitions of these keys. Partitioned by
                // the data, a key's earlier rows may be in any partition: every compacted
                // file's manifest is read (once per process: they never change).
                let dirs: Option<BTreeSet<String>> =
                    source.partition_columns().is_none().then(|| {
                        keys.iter()
                            .map(|k| dir_of(source, &source.output_key(k)))
                            .collect()
                    });
                let index = self.index(source, active, dirs.as_ref()).await?;
                self.plan_keys(source, &keys, &index).await
            }
            Scope::All => {
                // The listing is eventually consistent: it only picks the keys to look at,
                // and those are read again consistently before anything is decided.
                let listed = self.ledger.list(id).await?;
                let index = self.index(source, active, None).await?;
                let mut differ = Vec::new();
                let mut seen_hashes = BTreeSet::new();
                let mut ledger_rows = 0;
                for r in &listed {
                    let hash = table_key_hash(&r.key);
                    let want = desired(source, Some(r));
                    if !want.is_empty() {
                        ledger_rows += r.committed.as_ref().map_or(0, |c| c.rows);
                    }
                    let have: BTreeSet<&str> = index.paths_of(source, &r.key, &hash).collect();
                    let want_paths: BTreeSet<&str> =
                        want.iter().map(|(_, p, _)| p.as_str()).collect();
                    if have != want_paths {
                        differ.push(r.key.clone());
                    }
                    seen_hashes.insert(hash);
                }
                let mut plan = self.plan_keys(source, &differ, &index).await?;
                // Files of keys the ledger no longer has (forgotten): out of the table.
                for (hash, paths) in &index.by_hash {
                    if !seen_hashes.contains(*hash) {
                        for p in paths {
                            plan.removes.insert((*p).clone(), active[*p].clone());
                        }
                    }
                }
                for (hash, entries) in &index.compacted_by_hash {
                    if !seen_hashes.contains(hash.as_str()) {
                        for (file, path) in entries {
                            plan.rewrites
                                .entry(file.clone())
                                .or_default()
                                .insert(path.clone());
                        }
                    }
                }
                plan.keys = listed.len();
                plan.ledger_rows = ledger_rows;
                Ok(plan)
            }
        }
    }

    async fn plan_keys(
        &self,
        source: &Source,
        keys: &[String],
        index: &Index<'_>,
    ) -> Result<Plan, PublishError> {
        let mut plan = Plan {
            keys: keys.len(),
            ..Plan::default()
        };
        let mut records: HashMap<String, Record> = HashMap::new();
        for chunk in keys.chunks(100) {
            for r in self.ledger.get_many_latest(source.id(), chunk).await? {
                records.insert(r.key.clone(), r);
            }
        }
        for key in keys {
            let want = desired(source, records.get(key));
            let hash = table_key_hash(key);
            for (out_key, path, at) in &want {
                if !index.holds(path) {
                    plan.adds.push((key.clone(), out_key.clone(), *at));
                }
            }
            let wanted = |path: &str| want.iter().any(|(_, p, _)| p == path);
            for path in index.direct_paths_of(source, key, &hash) {
                if !wanted(path) {
                    plan.removes
                        .insert(path.to_string(), index.active[path].clone());
                }
            }
            // Rows of this key inside a compacted file that the ledger no longer has: the
            // compacted file is rewritten without them, in the same commit.
            for (file, path) in index.compacted_by_hash.get(&hash).into_iter().flatten() {
                if !wanted(path) {
                    plan.rewrites
                        .entry(file.clone())
                        .or_default()
                        .insert(path.clone());
                }
            }
        }
        Ok(plan)
    }

    /// The table's files indexed by source key hash, with the manifests of its compacted
    /// files (in `dirs` only, when given).
    async fn index<'a>(
        &self,
        source: &Source,
        active: &'a BTreeMap<String, Remove>,
        dirs: Option<&BTreeSet<String>>,
    ) -> Result<Index<'a>, PublishError> {
        let mut index = Index {
            active,
            by_hash: HashMap::new(),
            inside: HashMap::new(),
            compacted_by_hash: HashMap::new(),
        };
        for path in active.keys() {
            if let Some(h) = table_key_hash_of(path) {
                index.by_hash.entry(h).or_default().push(path);
            } else if tidemark::compact::is_compacted(path)
                && dirs.is_none_or(|d| d.contains(&dir_of_path(path)))
            {
                for entry in self.manifest(source, path).await?.iter() {
                    index.inside.insert(entry.path.clone(), path.clone());
                    index
                        .compacted_by_hash
                        .entry(entry.key_hash.clone())
                        .or_default()
                        .push((path.clone(), entry.path.clone()));
                }
            }
        }
        Ok(index)
    }

    /// Rewrite the compacted file `path` without the rows of the original files `without`:
    /// the Add of the new file (none when nothing is left) and the Remove of the old one.
    async fn rewrite(
        &self,
        source: &Source,
        path: &str,
        without: &BTreeSet<String>,
        active: &BTreeMap<String, Remove>,
    ) -> Result<(Option<Add>, Remove), PublishError> {
        let entries = self.manifest(source, path).await?;
        let bytes = self.read_file(source, path).await?;
        let input = tidemark::compact::Input {
            path: path.to_string(),
            bytes,
            entries: entries.to_vec(),
        };
        let merged =
            tidemark::compact::merge(std::slice::from_ref(&input), |e| !without.contains(&e.path))
                .map_err(|e| self.file_error(source, path, e.to_string()))?;
        let add = match merged {
            Some((bytes, _, _)) => Some(
                self.write_compacted(source, &dir_of_path(path), bytes, true)
                    .await?,
            ),
            None => None,
        };
        info!(
            source_id = source.id(),
            file = path,
            without = without.len(),
            "compacted file rewritten without replaced or deleted objects"
        );
        Ok((add, active[path].clone()))
    }

    /// The bytes of the table file `path`.
    pub(crate) async fn read_file(
        &self,
        source: &Source,
        path: &str,
    ) -> Result<bytes::Bytes, PublishError> {
        use tokio::io::AsyncReadExt;
        let out_key = format!("{}{path}", source.doc.output.prefix);
        let bucket = &source.doc.output.bucket;
        match self.store.get(bucket, &out_key, None).await {
            Ok(tidemark::ports::GetOutcome::Found { mut body, .. }) => {
                let mut bytes = Vec::new();
                body.read_to_end(&mut bytes)
                    .await
                    .map_err(|e| self.file_error(source, path, e.to_string()))?;
                Ok(bytes.into())
            }
            Ok(_) => Err(self.file_error(source, path, "missing".into())),
            Err(e) => Err(self.file_error(source, path, e.to_string())),
        }
    }

    /// Write a compacted file into the folder `dir` of the table: its Add action.
    pub(crate) async fn write_compacted(
        &self,
        source: &Source,
        dir: &str,
        bytes: bytes::Bytes,
        data_change: bool,
    ) -> Result<Add, PublishError> {
        let name = format!(
            "{}{}.parquet",
            tidemark::compact::FILE_PREFIX,
            uuid::Uuid::new_v4().simple()
        );
        let path = if dir.is_empty() {
            name
        } else {
            format!("{dir}/{name}")
        };
        self.put_table_file(source, &path, bytes, data_change).await
    }

    /// Write a new file at `path` in the table (never over an existing one): its Add.
    pub(crate) async fn put_table_file(
        &self,
        source: &Source,
        path: &str,
        bytes: bytes::Bytes,
        data_change: bool,
    ) -> Result<Add, PublishError> {
        let metadata =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes.clone())
                .map_err(|e| self.file_error(source, path, e.to_string()))?
                .metadata()
                .clone();
        let out_key = format!("{}{path}", source.doc.output.prefix);
        let size = bytes.len() as i64;
        self.store
            .put(
                &source.doc.output.bucket,
                &out_key,
                bytes,
                &Default::default(),
                &tidemark::ports::WriteCondition::Absent,
            )
            .await
            .map_err(|e| self.file_error(source, path, e.to_string()))?;
        Ok(Add {
            partition_values: partition_values(source, path),
            size,
            modification_time: self.clock.now_ms(),
            data_change,
            stats: Some(stats::file_stats(&metadata, &source.output_columns())),
            path: path.to_string(),
            ..Default::default()
        })
    }

    fn file_error(&self, source: &Source, path: &str, message: String) -> PublishError {
        PublishError::Output {
            source_id: source.id().to_string(),
            key: String::new(),
            output: format!(
                "s3://{}/{}{path}",
                source.doc.output.bucket, source.doc.output.prefix
            ),
            message,
        }
    }

    /// The manifest of a compacted file (immutable, so kept for the life of the process).
    async fn manifest(
        &self,
        source: &Source,
        path: &str,
    ) -> Result<Arc<Vec<tidemark::compact::Entry>>, PublishError> {
        let out_key = format!("{}{path}", source.doc.output.prefix);
        if let Some(m) = self.manifests.lock().expect("not poisoned").get(&out_key) {
            return Ok(m.clone());
        }
        let bucket = &source.doc.output.bucket;
        let fail = |message: String| PublishError::Output {
            source_id: source.id().to_string(),
            key: String::new(),
            output: format!("s3://{bucket}/{out_key}"),
            message,
        };
        let footer = match read_footer(self.store.as_ref(), bucket, &out_key, None).await {
            Ok(Read::Found(f)) => f,
            Ok(_) => return Err(fail("a compacted file of the table is missing".into())),
            Err(e) => return Err(fail(e.to_string())),
        };
        let entries = tidemark::compact::manifest(&footer.metadata)
            .ok_or_else(|| fail("a compacted file without its manifest".into()))?;
        let entries = Arc::new(entries);
        self.manifests
            .lock()
            .expect("not poisoned")
            .insert(out_key, entries.clone());
        Ok(entries)
    }

    /// [`Publisher::footer`], with the output key it was read for.
    async fn keyed_footer(
        &self,
        source: &Source,
        key: String,
        out_key: String,
    ) -> Result<(String, Footer), PublishError> {
        let footer = self.footer(source, &key, &out_key).await?;
        Ok((out_key, footer))
    }

    /// The size and statistics of an output, from its footer.
    async fn footer(
        &self,
        source: &Source,
        key: &str,
        out_key: &str,
    ) -> Result<(i64, String), PublishError> {
        let bucket = &source.doc.output.bucket;
        let fail = |message: String| PublishError::Output {
            source_id: source.id().to_string(),
            key: key.to_string(),
            output: format!("s3://{bucket}/{out_key}"),
            message,
        };
        match read_footer(self.store.as_ref(), bucket, out_key, None).await {
            Ok(Read::Found(f)) => Ok((
                i64::try_from(f.size).unwrap_or(i64::MAX),
                stats::file_stats(&f.metadata, &source.output_columns()),
            )),
            Ok(Read::NotFound) => Err(fail(
                "the ledger's committed output is missing: not published (reconcile repairs it)"
                    .into(),
            )),
            Ok(Read::Changed) => Err(fail("changed while read".into())),
            Err(e) => Err(fail(e.to_string())),
        }
    }
}

/// The table's files, found by source key.
struct Index<'a> {
    /// Every active file, by path.
    active: &'a BTreeMap<String, Remove>,
    /// Per-object files by the key hash in their names.
    by_hash: HashMap<&'a str, Vec<&'a String>>,
    /// Original path → the active compacted file holding its rows.
    inside: HashMap<String, String>,
    /// Key hash → (compacted file, original path) of each of its entries.
    compacted_by_hash: HashMap<String, Vec<(String, String)>>,
}

impl Index<'_> {
    /// Does the table hold the rows of the file `path` (as itself, or inside a compacted file)?
    fn holds(&self, path: &str) -> bool {
        self.active.contains_key(path) || self.inside.contains_key(path)
    }

    /// Active per-object files of `key`: by its hash, and its pre-table output if active.
    fn direct_paths_of<'s>(
        &'s self,
        source: &Source,
        key: &str,
        hash: &str,
    ) -> impl Iterator<Item = &'s str> {
        self.by_hash
            .get(hash)
            .into_iter()
            .flatten()
            .map(|p| p.as_str())
            .chain(legacy(source, key, self.active).map(|p| p.as_str()))
    }

    /// Every path of `key` the table holds, compacted or not.
    fn paths_of<'s>(
        &'s self,
        source: &Source,
        key: &str,
        hash: &str,
    ) -> impl Iterator<Item = &'s str> {
        self.direct_paths_of(source, key, hash).chain(
            self.compacted_by_hash
                .get(hash)
                .into_iter()
                .flatten()
                .map(|(_, p)| p.as_str()),
        )
    }
}

/// The folder of an output key relative to the table root (`dt=…` or empty).
pub(crate) fn dir_of(source: &Source, out_key: &str) -> String {
    relative(source, out_key)
        .map(dir_of_path)
        .unwrap_or_default()
}

pub(crate) fn dir_of_path(path: &str) -> String {
    path.rsplit_once('/')
        .map(|(d, _)| d.to_string())
        .unwrap_or_default()
}

/// The table's files, by path, each with the Remove action that would take it out.
fn active_files(table: &DeltaTable) -> Result<BTreeMap<String, Remove>, DeltaTableError> {
    Ok(table
        .snapshot()?
        .log_data()
        .iter()
        .map(|f| (f.path().into_owned(), f.remove_action(true)))
        .collect())
}

/// The files the table must hold for a record: `(output key, path in the table, committed
/// at)` of each committed Parquet output under the table root.
fn desired(source: &Source, record: Option<&Record>) -> Vec<(String, String, i64)> {
    let Some(c) = record.and_then(|r| r.committed.as_ref()) else {
        return Vec::new();
    };
    c.outputs
        .iter()
        .filter(|o| o.bucket == source.doc.output.bucket)
        .filter_map(|o| {
            let path = relative(source, &o.key)?;
            Some((o.key.clone(), path.to_string(), c.committed_at))
        })
        .collect()
}

/// The file a source wrote for `key` before it had a table (its deterministic output key),
/// when the table holds it.
fn legacy<'a>(
    source: &Source,
    key: &str,
    active: &'a BTreeMap<String, Remove>,
) -> Option<&'a String> {
    let out = source.output_key(key);
    let path = relative(source, &out)?;
    active.get_key_value(path).map(|(k, _)| k)
}

/// An output key relative to the table root (the output prefix).
fn relative<'a>(source: &Source, out_key: &'a str) -> Option<&'a str> {
    out_key
        .strip_prefix(source.doc.output.prefix.as_str())
        .filter(|p| !p.is_empty())
}

/// Partition values of a file, from its folders: `dt` when partitioned by key date, each
/// partition column when partitioned by the data. A value is the folder's text with Hive's
/// escapes undone (Delta's log holds values, not paths); the default partition is NULL.
pub(crate) fn partition_values(source: &Source, path: &str) -> HashMap<String, Option<String>> {
    let folders: Vec<&str> = path.split('/').collect();
    let folders = &folders[..folders.len().saturating_sub(1)];
    let value_of = |name: &str| -> Option<String> {
        let prefix = format!("{name}=");
        folders
            .iter()
            .find_map(|d| d.strip_prefix(prefix.as_str()))
            .filter(|v| *v != tidemark::convert::partition::DEFAULT_PARTITION)
            .map(tidemark::convert::partition::unescape)
    };
    delta::partition_columns(source)
        .into_iter()
        .map(|name| {
            let value = value_of(&name);
            (name, value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_reports_its_drift_and_a_stream_publish_does_not() {
        let p = Published {
            source_id: "orders".into(),
            committed: Some(7),
            table_version: 7,
            txn_version: Some(6),
            added: 2,
            removed: 1,
            keys: 10,
            attempts: 1,
        };
        let sweep: serde_json::Value = serde_json::from_str(&p.metric_line(1_000, true)).unwrap();
        assert_eq!(sweep["TableDrift"], 3);
        assert_eq!(sweep["TableFilesAdded"], 2);
        assert_eq!(sweep["TableVersion"], 7);
        assert_eq!(
            sweep["_aws"]["CloudWatchMetrics"][0]["Namespace"],
            "tidemark"
        );
        let names: Vec<&str> = sweep["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["Name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"TableDrift"), "{names:?}");
        let stream: serde_json::Value = serde_json::from_str(&p.metric_line(1_000, false)).unwrap();
        assert!(stream.get("TableDrift").is_none(), "{stream}");
    }
}
