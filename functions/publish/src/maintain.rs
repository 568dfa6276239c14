//! Table maintenance, run by one scheduled writer (never by the committer on its hot path):
//! a checkpoint at the current version, removal of log files older than the log retention
//! (only those a kept checkpoint makes unnecessary), and VACUUM of data files no snapshot
//! within the file retention references: replaced and deleted objects' files, and leftovers
//! of attempts that never committed.
//!
//! Concurrent committers are harmless to all three: a checkpoint describes one version
//! already written, log cleanup keeps everything after the newest checkpoint older than the
//! cutoff, and VACUUM only deletes files that are unreferenced at the latest version *and*
//! older than the retention — a file the committer is about to add was committed to the
//! ledger moments ago, so it is younger than any retention accepted here (at least one day,
//! longer than a change feed record lives).

use std::sync::Arc;
use std::time::Duration;

use deltalake::kernel::transaction::CommitProperties;
use deltalake::operations::vacuum::VacuumMode;
use serde::Serialize;

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
            let props = CommitProperties::default()
                .with_create_checkpoint(false)
                .with_cleanup_expired_logs(Some(false));
            let (_, metrics) =
                table
                    .vacuum()
                    .with_retention_period(chrono::Duration::from_std(keep).map_err(|e| {
                        table_err(deltalake::DeltaTableError::Generic(e.to_string()))
                    })?)
                    .with_mode(VacuumMode::Full)
                    .with_dry_run(options.dry_run)
                    .with_clock(Arc::new(VacuumClock(self.clock.clone())))
                    .with_commit_properties(props)
                    .await
                    .map_err(table_err)?;
            done.files_vacuumed = metrics.files_deleted;
        }
        Ok(done)
    }
}
