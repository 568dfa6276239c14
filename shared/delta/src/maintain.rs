//! Table maintenance, run by one scheduled writer (never by the committer on its hot path):
//! a checkpoint at the current version, removal of log files older than the log retention
//! (only those a kept checkpoint makes unnecessary), VACUUM of data files no snapshot within
//! the file retention references (replaced and deleted objects' files, leftovers of attempts
//! that never committed) except those the ledger still names as an object's output, and
//! compaction of closed partitions ([`Publisher::compact`], where the rule is stated).
//!
//! Concurrent committers are harmless to all of them: a checkpoint describes one version
//! already written, log cleanup keeps everything after the newest checkpoint older than the
//! cutoff, VACUUM only deletes files that are unreferenced at the latest version *and*
//! older than the retention — a file the committer is about to add was committed to the
//! ledger moments ago, so it is younger than any retention accepted here (at least one day,
//! longer than a change feed record lives) — and compaction commits only on top of the
//! snapshot it read.

use std::sync::Arc;
use std::time::Duration;

use deltalake::kernel::Action;
use deltalake::operations::vacuum::VacuumMode;
use deltalake::protocol::DeltaOperation;
use serde::Serialize;
use tidemark::model::Status;

use crate::{PublishError, Publisher, delta};

/// The shortest VACUUM retention accepted: the DynamoDB stream keeps a record 24 hours, so a
/// committed output can wait that long to be published.
pub const MIN_FILE_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// What maintenance does.
#[derive(Debug, Clone)]
pub struct MaintainOptions {
    /// Write a checkpoint at the current version.
    pub checkpoint: bool,
    /// Remove log files older than this (and before a checkpoint that is); `None`: keep all.
    pub log_retention: Option<Duration>,
    /// VACUUM data files unreferenced for longer than this; `None`: no VACUUM.
    pub file_retention: Option<Duration>,
    /// Change nothing: no checkpoint, no log cleanup; report what VACUUM would delete.
    pub dry_run: bool,
}

impl Default for MaintainOptions {
    fn default() -> Self {
        Self {
            checkpoint: true,
            log_retention: Some(Duration::from_secs(30 * 24 * 3600)),
            file_retention: Some(Duration::from_secs(7 * 24 * 3600)),
            dry_run: false,
        }
    }
}

/// What one maintenance run did to one table.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Maintained {
    /// The source.
    pub source_id: String,
    /// The table version maintained.
    pub version: i64,
    /// The checkpoint written, at this version.
    pub checkpoint: Option<i64>,
    /// Log files removed.
    pub log_files_removed: usize,
    /// Data files VACUUM deleted (or would delete, on a dry run).
    pub files_vacuumed: Vec<String>,
    /// Unreferenced files kept because the ledger names them as an object's output (objects
    /// compacted into a shared file).
    pub files_kept: usize,
}

/// A VACUUM clock that reads the publisher's clock (so tests can move time).
struct VacuumClock(Arc<dyn tidemark::ports::Clock>);

impl std::fmt::Debug for VacuumClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VacuumClock({})", self.0.now_ms())
    }
}

impl deltalake::operations::vacuum::Clock for VacuumClock {
    fn current_timestamp_millis(&self) -> i64 {
        self.0.now_ms()
    }
}

impl Publisher {
    /// Maintain the table of `source_id`.
    pub async fn maintain(
        &self,
        source_id: &str,
        options: &MaintainOptions,
    ) -> Result<Maintained, PublishError> {
        let source = self.source(source_id)?;
        let table_err = |error| PublishError::Table {
            source_id: source_id.to_string(),
            error,
        };
        if let Some(r) = options.file_retention
            && r < MIN_FILE_RETENTION
        {
            return Err(table_err(deltalake::DeltaTableError::Generic(format!(
                "a file retention of {r:?} is shorter than {MIN_FILE_RETENTION:?}: a committed \
                 output may wait that long to be published"
            ))));
        }
        let mut table = delta::open(&self.tables, source).await.map_err(table_err)?;
        let version = table.version().map_or(-1, |v| v as i64);
        let mut done = Maintained {
            source_id: source_id.to_string(),
            version,
            checkpoint: None,
            log_files_removed: 0,
            files_vacuumed: Vec::new(),
            files_kept: 0,
        };
        if options.checkpoint && version > 0 && !options.dry_run {
            deltalake::checkpoints::create_checkpoint(&table, None)
                .await
                .map_err(table_err)?;
            done.checkpoint = Some(version);
        }
        if let Some(keep) = options.log_retention.filter(|_| !options.dry_run) {
            let cutoff = self.clock.now_ms() - keep.as_millis() as i64;
            done.log_files_removed = deltalake::checkpoints::cleanup_expired_logs_for(
                version.max(0) as u64,
                table.log_store().as_ref(),
                cutoff,
                None,
            )
            .await
            .map_err(table_err)?;
            table.update_state().await.map_err(table_err)?;
        }
        if let Some(keep) = options.file_retention {
            // delta-rs lists what VACUUM may delete (unreferenced by every snapshot within the
            // retention, older than it); files the ledger still names as an object's committed
            // output are kept: an object compacted into a shared file keeps its own file, which
            // reconcile checks (rows in the footer) and a rebuild of the table from the ledger
            // reads. They go once the object changes.
            let (_, metrics) =
                table
                    .clone()
                    .vacuum()
                    .with_retention_period(chrono::Duration::from_std(keep).map_err(|e| {
                        table_err(deltalake::DeltaTableError::Generic(e.to_string()))
                    })?)
                    .with_mode(VacuumMode::Full)
                    .with_dry_run(true)
                    .with_clock(Arc::new(VacuumClock(self.clock.clone())))
                    .await
                    .map_err(table_err)?;
            let named: std::collections::HashSet<String> = self
                .ledger
                .list(source_id)
                .await?
                .iter()
                .filter_map(|r| r.committed.as_ref())
                .flat_map(|c| c.outputs.iter())
                .filter(|o| o.bucket == source.doc.output.bucket)
                .filter_map(|o| o.key.strip_prefix(source.doc.output.prefix.as_str()))
                .map(str::to_string)
                .collect();
            for path in metrics.files_deleted {
                if named.contains(&path) {
                    done.files_kept += 1;
                    continue;
                }
                if !options.dry_run {
                    let key = format!("{}{path}", source.doc.output.prefix);
                    self.store
                        .delete(&source.doc.output.bucket, &key, None)
                        .await
                        .map_err(|e| self.file_error(source, &path, e.to_string()))?;
                }
                done.files_vacuumed.push(path);
            }
        }
        Ok(done)
    }
}

/// What compaction does.
#[derive(Debug, Clone)]
pub struct CompactOptions {
    /// A partition is closed once its newest file is older than this.
    pub compact_after: Duration,
    /// Largest compacted file (by the inputs' sizes).
    pub target_bytes: u64,
    /// Attempts per partition when a committer commits first.
    pub max_attempts: u32,
}

impl Default for CompactOptions {
    fn default() -> Self {
        Self {
            compact_after: Duration::from_secs(24 * 3600),
            target_bytes: 128 << 20,
            max_attempts: 8,
        }
    }
}

/// What one compaction run did to one table.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Compacted {
    /// The source.
    pub source_id: String,
    /// Partitions compacted.
    pub partitions: usize,
    /// Files merged.
    pub files_in: usize,
    /// Compacted files written (and committed).
    pub files_out: usize,
    /// Objects whose rows moved into compacted files.
    pub objects: usize,
    /// Partitions left alone because an object in them is not settled (claimed, pending,
    /// failing): the ledger says it may change soon.
    pub open: usize,
    /// Table versions committed.
    pub commits: Vec<i64>,
    /// Commits lost to another writer (each retried from a fresh snapshot).
    pub lost: u32,
}

/// A candidate input of a compaction.
struct Candidate {
    path: String,
    size: i64,
    compacted: bool,
    remove: deltalake::kernel::Remove,
}

impl Publisher {
    /// Compact the closed partitions of `source_id`'s table.
    ///
    /// **The rule.** A partition (a folder: `dt=…`, `dt=…/region=…`, or the whole table when
    /// it has none) is compacted when it holds at least two files under the target size, its newest file is
    /// older than `compact_after`, and no record of the ledger whose output lies in it is
    /// claimed, pending or failing. Its files are merged into compacted files that keep each
    /// object's rows in row groups of their own and list them in their footer
    /// ([`tidemark::compact`]), committed as Remove(inputs) + Add(compacted) with
    /// `dataChange = false`, on top of the snapshot the inputs were read from and only there:
    /// a commit of the committer in between makes the compaction's commit lose, and it is
    /// recomputed from the new snapshot. Exactness does not rest on the partition being
    /// closed (that only avoids rewriting files about to change): the committer treats an
    /// object whose rows are in a compacted file as published, and a replace, delete or
    /// forget of it rewrites that compacted file without exactly its row groups, in the
    /// same commit as the new version's file.
    pub async fn compact(
        &self,
        source_id: &str,
        options: &CompactOptions,
    ) -> Result<Compacted, PublishError> {
        let source = self.source(source_id)?;
        let table_err = |error| PublishError::Table {
            source_id: source_id.to_string(),
            error,
        };
        let mut done = Compacted {
            source_id: source_id.to_string(),
            ..Compacted::default()
        };
        if source.table().and_then(|t| t.merge()).is_some() {
            // A merged table keeps one file per live object, named after its output (the
            // committer finds an object's rows by it): it is not compacted.
            tracing::info!(source_id, "a table merged by key is not compacted");
            return Ok(done);
        }
        let unsettled: std::collections::BTreeSet<String> = self
            .ledger
            .list(source_id)
            .await?
            .iter()
            .filter(|r| {
                matches!(r.status, Status::Claimed | Status::Pending | Status::Failed)
                    || r.claim.is_some()
                    || r.pending.is_some()
            })
            .flat_map(|r| {
                // Partitioned by the data, an object's partitions are those of its committed
                // and announced files (its next version may add others: exactness does not
                // rest on this, see above).
                let mut dirs = vec![crate::dir_of(source, &source.output_key(&r.key))];
                if source.partition_columns().is_some() {
                    let files = r.committed.iter().flat_map(|c| c.files()).map(|o| &o.key);
                    dirs.extend(files.chain(&r.writing).map(|k| crate::dir_of(source, k)));
                }
                dirs
            })
            .collect();
        let mut table = delta::open(&self.tables, source).await.map_err(table_err)?;
        let dirs: std::collections::BTreeSet<String> = table
            .snapshot()
            .map_err(table_err)?
            .log_data()
            .iter()
            .map(|f| crate::dir_of_path(&f.path()))
            .collect();
        let cutoff = self.clock.now_ms() - options.compact_after.as_millis() as i64;
        for dir in dirs {
            if unsettled.contains(&dir) {
                done.open += 1;
                continue;
            }
            for attempt in 1..=options.max_attempts.max(1) {
                if attempt > 1 {
                    table.update_state().await.map_err(table_err)?;
                }
                let snapshot = table.snapshot().map_err(table_err)?;
                let mut newest = i64::MIN;
                let mut candidates = Vec::new();
                for f in snapshot.log_data().iter() {
                    let path = f.path().into_owned();
                    if crate::dir_of_path(&path) != dir {
                        continue;
                    }
                    newest = newest.max(f.modification_time());
                    let compacted = tidemark::compact::is_compacted(&path);
                    let per_object = tidemark::config::table_key_hash_of(&path).is_some();
                    if (compacted || per_object) && (f.size() as u64) < options.target_bytes {
                        candidates.push(Candidate {
                            remove: f.remove_action(false),
                            path,
                            size: f.size(),
                            compacted,
                        });
                    }
                }
                if candidates.len() < 2 || newest > cutoff {
                    break;
                }
                candidates.sort_by(|a, b| a.path.cmp(&b.path));
                let mut groups: Vec<Vec<Candidate>> = vec![Vec::new()];
                let mut size = 0u64;
                for c in candidates {
                    if size + c.size as u64 > options.target_bytes
                        && !groups.last().expect("one").is_empty()
                    {
                        groups.push(Vec::new());
                        size = 0;
                    }
                    size += c.size as u64;
                    groups.last_mut().expect("one").push(c);
                }
                let mut actions = Vec::new();
                let (mut files_in, mut files_out, mut objects) = (0, 0, 0);
                for group in groups.into_iter().filter(|g| g.len() >= 2) {
                    let mut inputs = Vec::with_capacity(group.len());
                    for c in &group {
                        let bytes = self.read_file(source, &c.path).await?;
                        let entries = if c.compacted {
                            self.manifest(source, &c.path).await?.to_vec()
                        } else {
                            let meta =
                                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                                    bytes.clone(),
                                )
                                .map_err(|e| self.file_error(source, &c.path, e.to_string()))?
                                .metadata()
                                .clone();
                            vec![tidemark::compact::Entry {
                                key_hash: tidemark::config::table_key_hash_of(&c.path)
                                    .expect("a per-object file")
                                    .to_string(),
                                path: c.path.clone(),
                                rows: meta.row_groups().iter().map(|g| g.num_rows() as u64).sum(),
                                row_groups: meta.num_row_groups(),
                            }]
                        };
                        inputs.push(tidemark::compact::Input {
                            path: c.path.clone(),
                            bytes,
                            entries,
                        });
                    }
                    let Some((bytes, entries, _)) = tidemark::compact::merge(&inputs, |_| true)
                        .map_err(|e| self.file_error(source, &dir, e.to_string()))?
                    else {
                        continue;
                    };
                    let add = self.write_compacted(source, &dir, bytes, false).await?;
                    actions.push(Action::Add(add));
                    actions.extend(group.into_iter().map(|c| Action::Remove(c.remove)));
                    files_in += inputs.len();
                    files_out += 1;
                    objects += entries.len();
                }
                if actions.is_empty() {
                    break;
                }
                let operation = DeltaOperation::Optimize {
                    predicate: None,
                    target_size: options.target_bytes as i64,
                };
                let metadata = serde_json::Map::from_iter([(
                    "tidemark.compacted_partition".to_string(),
                    dir.clone().into(),
                )]);
                match delta::commit_as(&table, actions, operation, None, metadata)
                    .await
                    .map_err(table_err)?
                {
                    delta::Attempt::Committed(v) => {
                        done.partitions += 1;
                        done.files_in += files_in;
                        done.files_out += files_out;
                        done.objects += objects;
                        done.commits.push(v);
                        table.update_state().await.map_err(table_err)?;
                        break;
                    }
                    delta::Attempt::Lost => {
                        done.lost += 1;
                        if attempt == options.max_attempts.max(1) {
                            return Err(PublishError::Contended {
                                source_id: source_id.to_string(),
                                attempts: attempt,
                            });
                        }
                    }
                }
            }
        }
        Ok(done)
    }
}
