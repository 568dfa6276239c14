//! The per-object path every capability shares (ingest events, CLI runs, reconcile repairs,
//! backfills): claim → GET pinned to the version → convert → conditional PUT → commit, or
//! fail / release. Generic over the ports, so it runs unchanged on S3 + DynamoDB and on the
//! embedded backends, and fault-injection points let tests stop a worker at each step.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use tokio::sync::mpsc;
use tokio_util::io::SyncIoBridge;
use tracing::{info, warn};

use crate::config::{Config, Mode, OnBadRow, OnDelete, Source};
use crate::convert::{ConvertError, ConvertStats, convert};
use crate::error::{ProcessError, Result, Retry, StoreError};
use crate::events::{ObjectEvent, ObjectEventKind, Sequencer};
use crate::model::{
    Committed, DeleteRef, IgnoredFields, OutputRef, Record, Status, Target, VersionRef,
};
use crate::ports::{
    Body, Clock, GetOutcome, Ledger, LedgerWrite, ObjectStore, PutOutcome, WriteCondition,
};
use crate::protocol::{self, ClaimLost, ClaimRequest, Decision, Skip};

mod keyed;

/// User-metadata keys written on every output, so a retry can tell its own leftover output
/// from a newer writer's.
pub mod meta {
    /// The source id.
    pub const SOURCE_ID: &str = "tidemark-source-id";
    /// The source key, percent-encoded (metadata is ASCII).
    pub const SOURCE_KEY: &str = "tidemark-source-key";
    /// The version identity of the source object the output came from.
    pub const SOURCE_VERSION: &str = "tidemark-source-version";
    /// The sequencer of that version, when known.
    pub const SOURCE_SEQUENCER: &str = "tidemark-source-sequencer";
    /// The run that wrote it.
    pub const RUN: &str = "tidemark-run";
}

/// A protocol step at which a worker can be stopped (fault injection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// The claim is written.
    AfterClaim,
    /// The source object is open.
    AfterGet,
    /// The output is written, nothing committed.
    AfterOutputPut,
    /// Under partitioning by columns: the first file of an object's set is written, the
    /// others not yet.
    BetweenPartFiles,
    /// Just before the commit write (for a source with bookmark keys: the mark advance is
    /// prepared on the source's lock record).
    BeforeCommit,
    /// A source with bookmark keys: the object is committed, the mark advance not applied
    /// and the source's lock not released.
    AfterCommit,
    /// The backfill planner recorded a page on its job (as pending) and sent nothing yet.
    PageRecorded,
    /// The planner sent a page's messages and has not recorded them as sent.
    PageSent,
}

impl Step {
    /// The step's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::AfterClaim => "after claim",
            Step::AfterGet => "after GET",
            Step::AfterOutputPut => "after output PUT",
            Step::BetweenPartFiles => "between the files of a set",
            Step::BeforeCommit => "before commit",
            Step::AfterCommit => "after commit",
            Step::PageRecorded => "page recorded",
            Step::PageSent => "page sent",
        }
    }
}

/// Decides whether a worker stops at a step. Production uses [`NoFaults`].
pub trait Faults: Send + Sync {
    /// `Err(ProcessError::Crashed)` to stop the worker at `step` for `key`.
    fn check(&self, step: Step, key: &str) -> Result<()>;

    /// Called on the conversion's thread before it decodes `key`: a test makes a decoder
    /// stand still here (the watchdog's suites). Does nothing by default.
    fn converting(&self, _key: &str) {}
}

/// Never stops a worker.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoFaults;

impl Faults for NoFaults {
    fn check(&self, _: Step, _: &str) -> Result<()> {
        Ok(())
    }
}

/// Tunables of the per-object path.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Lease beyond the invocation deadline, ms.
    pub lease_margin_ms: i64,
    /// Multipart part size; an output below it goes up in one PUT.
    pub part_size: usize,
    /// Parts buffered between the converter and the uploader.
    pub parts_in_flight: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            lease_margin_ms: 30_000,
            part_size: 8 << 20,
            parts_in_flight: 2,
        }
    }
}

/// Who is working and until when.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// Id of this run (the Lambda request id, or a CLI run id); recorded on claims, commits
    /// and outputs. Work of a bulk job runs as `<job id>/<request id>`.
    pub run_id: String,
    /// The invocation deadline, ms since the epoch: leases end a margin after it.
    pub deadline_ms: i64,
    /// The bulk job (backfill) this work belongs to, if any: a version the same job
    /// committed earlier (an SQS message delivered again) then counts as processed by the
    /// job, not as someone else's duplicate.
    pub job: Option<String>,
}

impl RunContext {
    /// A run outside any job.
    pub fn new(run_id: impl Into<String>, deadline_ms: i64) -> Self {
        Self {
            run_id: run_id.into(),
            deadline_ms,
            job: None,
        }
    }

    /// The context of job `job`'s work in invocation `request_id`.
    pub fn for_job(job: &str, request_id: &str, deadline_ms: i64) -> Self {
        Self {
            run_id: format!("{job}/{request_id}"),
            deadline_ms,
            job: Some(job.to_string()),
        }
    }

    /// Was `run_id` (of a commit) a run of this context's job?
    pub fn same_job(&self, run_id: &str) -> bool {
        self.job.as_deref().is_some_and(|job| {
            run_id
                .strip_prefix(job)
                .is_some_and(|rest| rest.starts_with('/'))
        })
    }
}

/// What happened to one object event for one source. None of these is an error.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A version was converted and committed.
    Processed {
        /// Its identity.
        version: String,
        /// Rows written.
        rows: u64,
        /// Rows set aside as bad (`on_bad_row: reject`).
        rejected: u64,
        /// Rows written with something in the rescued column.
        rescued: u64,
        /// Values of fields the schema does not name, dropped (`on_unknown_field: ignore`).
        ignored: u64,
        /// Its outputs.
        outputs: Vec<OutputRef>,
    },
    /// A delete was committed; `outputs_removed` outputs were deleted by policy.
    Deleted {
        /// How many outputs were deleted.
        outputs_removed: usize,
    },
    /// The protocol skipped the event (duplicate, stale, in flight, quarantined).
    Skipped(Skip),
    /// A newer version arrived during another worker's claim; it is recorded for the holder.
    Deferred,
    /// The claimed version is no longer the object's current one; the newer version's event
    /// (or reconcile) brings it.
    NotCurrent,
    /// This object failed its last attempt and is quarantined.
    Quarantined {
        /// The last error.
        error: String,
    },
    /// Processed without touching the ledger (source mode `pause` or `disable`).
    Untracked {
        /// Rows written.
        rows: u64,
    },
    /// No source claims the object.
    Unrouted,
}

impl Outcome {
    /// A short name for logs and summaries.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Processed { .. } => "processed",
            Outcome::Deleted { .. } => "deleted",
            Outcome::Skipped(s) => s.as_str(),
            Outcome::Deferred => "deferred",
            Outcome::NotCurrent => "not_current",
            Outcome::Quarantined { .. } => "quarantined",
            Outcome::Untracked { .. } => "untracked",
            Outcome::Unrouted => "unrouted",
        }
    }
}

/// The result of one event for one source.
#[derive(Debug)]
pub struct ObjectResult {
    /// The source, if one claimed the object.
    pub source_id: Option<String>,
    /// Bucket.
    pub bucket: String,
    /// Key.
    pub key: String,
    /// What happened, or the error (already recorded in the ledger where it applies).
    pub outcome: Result<Outcome>,
}

/// The per-object pipeline over its ports.
#[derive(Clone)]
pub struct Pipeline {
    /// Source and output objects.
    pub store: Arc<dyn ObjectStore>,
    /// The ledger.
    pub ledger: Arc<dyn Ledger>,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// The sources.
    pub config: Arc<Config>,
    /// Fault injection ([`NoFaults`] in production).
    pub faults: Arc<dyn Faults>,
    /// Tunables.
    pub settings: Settings,
}

enum Claimed {
    Ours {
        record: Box<Record>,
        target: Target,
        token: String,
    },
    Done(Outcome),
}

enum Work {
    Commit(Box<Committed>),
    Release(String),
}

/// How a claim is taken.
#[derive(Clone, Copy)]
struct ClaimOptions {
    /// Attempts before quarantine.
    max_attempts: u32,
    /// Record a newer target on another worker's live claim (the event path); otherwise
    /// leave the record alone and report the key in flight.
    defer: bool,
    /// Claim a version committed under another configuration fingerprint again.
    refresh: bool,
}

impl Pipeline {
    /// A pipeline with default settings and no fault injection.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        ledger: Arc<dyn Ledger>,
        clock: Arc<dyn Clock>,
        config: Arc<Config>,
    ) -> Self {
        Self {
            store,
            ledger,
            clock,
            config,
            faults: Arc::new(NoFaults),
            settings: Settings::default(),
        }
    }

    /// Handle one object event: once per source that claims the object.
    pub async fn handle_event(&self, event: &ObjectEvent, ctx: &RunContext) -> Vec<ObjectResult> {
        let sources: Vec<&Source> = self.config.route(&event.bucket, &event.key).collect();
        if sources.is_empty() {
            info!(bucket = %event.bucket, key = %event.key, outcome = "unrouted", "no source claims this object");
            return vec![ObjectResult {
                source_id: None,
                bucket: event.bucket.clone(),
                key: event.key.clone(),
                outcome: Ok(Outcome::Unrouted),
            }];
        }
        let target = target_of(event);
        let mut results = Vec::with_capacity(sources.len());
        for source in sources {
            let started = Instant::now();
            let outcome = self.process(source, &event.key, target.clone(), ctx).await;
            log_result(
                source.id(),
                &event.bucket,
                &event.key,
                &target,
                &outcome,
                started,
            );
            results.push(ObjectResult {
                source_id: Some(source.id().to_string()),
                bucket: event.bucket.clone(),
                key: event.key.clone(),
                outcome,
            });
        }
        results
    }

    /// Handle one work item of a bulk job (a backfill's message): the listed version through
    /// the per-object path, as the batch's mode says — process it, replay it (ledger
    /// untouched), or refresh a commit made under another configuration. An item whose
    /// source is not in the configuration, or which the source no longer takes, is an error:
    /// its message goes back to the queue (and, if it stays wrong, to the dead-letter queue),
    /// never dropped silently.
    pub async fn handle_item(
        &self,
        batch: &crate::work::WorkBatch,
        item: &crate::work::WorkItem,
        ctx: &RunContext,
    ) -> ObjectResult {
        use crate::work::WorkMode;
        let started = Instant::now();
        let target = item.target();
        let source = self.config.source(&batch.source);
        let bucket = source.map_or_else(String::new, |s| s.doc.bucket.clone());
        let outcome = match source {
            None => Err(ProcessError::Unsupported {
                source_id: batch.source.clone(),
                message: format!(
                    "work item {:?} of job {}: no such source in the configuration",
                    item.key, batch.job
                ),
            }),
            Some(s) if !s.matches(&s.doc.bucket, &item.key) => Err(ProcessError::Unsupported {
                source_id: batch.source.clone(),
                message: format!(
                    "work item {:?} of job {}: the source does not take this key (was its \
                     prefix or include / exclude changed?)",
                    item.key, batch.job
                ),
            }),
            Some(s) => match batch.mode {
                WorkMode::Process => self.process(s, &item.key, target.clone(), ctx).await,
                WorkMode::Replay => self.replay(s, &item.key, target.clone(), ctx).await,
                WorkMode::StaleConfig => self.refresh(s, &item.key, target.clone(), ctx).await,
            },
        };
        log_result(
            &batch.source,
            &bucket,
            &item.key,
            &target,
            &outcome,
            started,
        );
        ObjectResult {
            source_id: Some(batch.source.clone()),
            bucket,
            key: item.key.clone(),
            outcome,
        }
    }

    /// Process `key` of `source` with the ledger untouched (Glue's `disable`), its output
    /// replaced by key: a replay. Refused for sources with bookmark keys.
    pub async fn replay(
        &self,
        source: &Source,
        key: &str,
        target: Target,
        ctx: &RunContext,
    ) -> Result<Outcome> {
        let mut untracked = source.clone();
        untracked.doc.mode = Mode::Disable;
        self.process(&untracked, key, target, ctx).await
    }

    /// Bring `key` of `source` to `target` through the ledger (or, for a paused or disabled
    /// source, straight to its output).
    pub async fn process(
        &self,
        source: &Source,
        key: &str,
        target: Target,
        ctx: &RunContext,
    ) -> Result<Outcome> {
        match source.doc.mode {
            Mode::Enable => self.process_tracked(source, key, target, ctx, false).await,
            Mode::Pause | Mode::Disable => {
                keyed::refuse(source, "pause and disable (processing outside the ledger)")?;
                self.process_untracked(source, key, target, ctx).await
            }
        }
    }

    /// [`Pipeline::process`], but a version already committed under another configuration
    /// fingerprint than the source's current one is processed again (its output replaced,
    /// its commit carrying the new fingerprint); one committed under the current
    /// configuration is a duplicate as usual. `backfill --stale-config`.
    pub async fn refresh(
        &self,
        source: &Source,
        key: &str,
        target: Target,
        ctx: &RunContext,
    ) -> Result<Outcome> {
        keyed::refuse(source, "reprocessing committed versions (--stale-config)")?;
        match source.doc.mode {
            Mode::Enable => self.process_tracked(source, key, target, ctx, true).await,
            Mode::Pause | Mode::Disable => self.process_untracked(source, key, target, ctx).await,
        }
    }

    async fn process_tracked(
        &self,
        source: &Source,
        key: &str,
        mut target: Target,
        ctx: &RunContext,
        refresh: bool,
    ) -> Result<Outcome> {
        let max = source.doc.max_attempts;
        let opts = ClaimOptions {
            max_attempts: max,
            defer: true,
            refresh,
        };
        loop {
            let claim = self.claim_with(source, key, target, ctx, opts).await?;
            let (record, claimed, token) = match claim {
                Claimed::Done(outcome) => return Ok(outcome),
                Claimed::Ours {
                    record,
                    target,
                    token,
                } => (*record, target, token),
            };
            // A source with bookmark keys: its versions go through the source's lock.
            if source.doc.bookmark.is_some() && matches!(claimed, Target::Version(_)) {
                let (after, result) = self
                    .process_keyed(source, key, record, &claimed, &token, ctx)
                    .await?;
                match after.pending.filter(|p| !p.same_as(&claimed)) {
                    Some(next) => {
                        target = next;
                        continue;
                    }
                    None => return result,
                }
            }
            let work = self.work(source, key, &record, &claimed, &token, ctx).await;
            let now = self.clock.now_ms();
            let (after, result) = match work {
                Ok(Work::Commit(committed)) => {
                    let old_files: Vec<OutputRef> = record
                        .committed
                        .iter()
                        .flat_map(|c| c.files().cloned())
                        .collect();
                    let old_outputs = record.committed.as_ref().map_or(0, |c| c.outputs.len());
                    let new_files: Vec<OutputRef> = committed.files().cloned().collect();
                    let new_outputs = committed.outputs.clone();
                    let outcome = match &committed.target {
                        Target::Version(v) => Outcome::Processed {
                            version: v.version.clone(),
                            rows: committed.rows,
                            rejected: committed.rejected,
                            rescued: committed.rescued,
                            ignored: committed.ignored.values,
                            outputs: new_outputs.clone(),
                        },
                        Target::Delete(_) => Outcome::Deleted {
                            outputs_removed: old_outputs - new_outputs.len(),
                        },
                    };
                    let after = self
                        .transition(source, key, record, |r| {
                            protocol::commit(r, &token, (*committed).clone(), now, max)
                        })
                        .await?;
                    // Outputs (and rejects file) of the replaced version that the new one
                    // did not overwrite (a delete has already handled them by policy). A
                    // table's files are removed from the table by the committer and deleted
                    // by its VACUUM, never here.
                    // A partitioned set deleted those before its commit (convert_partitioned).
                    if matches!(claimed, Target::Version(_))
                        && source.table().is_none()
                        && source.partition_columns().is_none()
                    {
                        for old in old_files.iter().filter(|o| {
                            !new_files
                                .iter()
                                .any(|n| n.bucket == o.bucket && n.key == o.key)
                        }) {
                            self.store
                                .delete(&old.bucket, &old.key, Some(&old.etag))
                                .await?;
                        }
                    }
                    (after, Ok(outcome))
                }
                Ok(Work::Release(note)) => {
                    let after = self
                        .release_claim(source, key, record, &token, &note)
                        .await?;
                    (after, Ok(Outcome::NotCurrent))
                }
                // A stopped worker writes nothing more: its lease expires.
                Err(e @ ProcessError::Crashed(_)) => return Err(e),
                Err(error) => self.fail_claim(source, key, record, &token, error).await?,
            };
            // A newer version (or delete) arrived while we held the claim and was recorded
            // for us: the holder processes it now, whatever became of its own target.
            match after.pending.filter(|p| !p.same_as(&claimed)) {
                Some(next) => {
                    info!(source_id = source.id(), key, next = %next.label(), "processing the version that arrived during the claim");
                    target = next;
                }
                None => return result,
            }
        }
    }

    /// End the claim `token` on `key` without a commit: the target is no longer current.
    async fn release_claim(
        &self,
        source: &Source,
        key: &str,
        record: Record,
        token: &str,
        note: &str,
    ) -> Result<Record> {
        let (now, max) = (self.clock.now_ms(), source.doc.max_attempts);
        self.transition(source, key, record, |r| {
            protocol::release(r, token, note, now, max)
        })
        .await
    }

    /// End the claim `token` on `key` with `error`: an attempt counted unless the error is
    /// transient, the object quarantined after `max_attempts` (then `Outcome::Quarantined`,
    /// else the error is given back for the caller to retry).
    async fn fail_claim(
        &self,
        source: &Source,
        key: &str,
        record: Record,
        token: &str,
        error: ProcessError,
    ) -> Result<(Record, Result<Outcome>)> {
        let (now, max) = (self.clock.now_ms(), source.doc.max_attempts);
        let message = error.to_string();
        let failure = if error.is_transient() {
            protocol::Failure::Transient
        } else {
            protocol::Failure::Counted
        };
        let after = self
            .transition(source, key, record, |r| {
                protocol::fail(r, token, &message, failure, now, max)
            })
            .await?;
        let result = if after.status == Status::Quarantined {
            warn!(source_id = source.id(), key, attempts = after.attempts, error = %message, "quarantined");
            Ok(Outcome::Quarantined { error: message })
        } else {
            Err(error)
        };
        Ok((after, result))
    }

    /// Record `version` of `key` as committed WITHOUT processing it: the operator's "set the
    /// bookmark" (`tidemark mark-processed`). It is a claim and a commit of the protocol, each
    /// a conditional write, so a race with a worker stays safe: a key another worker holds is
    /// left alone (`Skipped(InFlight)`), a version already committed is a duplicate, and when
    /// the ledger knows a newer version than `version` the claim is released
    /// (`NotCurrent`). Quarantine does not stop it: marking a poisoned version processed is
    /// how an operator moves past it.
    ///
    /// The commit has rows 0, no sums and no outputs, and the run id of `ctx`. The lake is not
    /// touched: an output of an older version of the key stays where it is (`tidemark reset
    /// --purge-outputs` removes it).
    pub async fn mark_processed(
        &self,
        source: &Source,
        key: &str,
        version: VersionRef,
        ctx: &RunContext,
    ) -> Result<Outcome> {
        let max = source.doc.max_attempts;
        let wanted = Target::Version(version.clone());
        let opts = ClaimOptions {
            max_attempts: u32::MAX,
            defer: false,
            refresh: false,
        };
        let (record, claimed, token) = match self
            .claim_with(source, key, wanted.clone(), ctx, opts)
            .await?
        {
            Claimed::Done(outcome) => return Ok(outcome),
            Claimed::Ours {
                record,
                target,
                token,
            } => (*record, target, token),
        };
        let now = self.clock.now_ms();
        if !claimed.same_as(&wanted) {
            let note = format!(
                "mark-processed of version {} yielded to the newer {}",
                version.version,
                claimed.label()
            );
            self.transition(source, key, record, |r| {
                protocol::release(r, &token, &note, now, max)
            })
            .await?;
            return Ok(Outcome::NotCurrent);
        }
        let committed = Committed {
            target: wanted,
            rows: 0,
            sums: BTreeMap::new(),
            outputs: Vec::new(),
            rejected: 0,
            rejects: None,
            rescued: 0,
            ignored: IgnoredFields::default(),
            config_fp: source.fingerprint.clone(),
            committed_at: now,
            run_id: ctx.run_id.clone(),
        };
        self.transition(source, key, record, |r| {
            protocol::commit(r, &token, committed.clone(), now, max)
        })
        .await?;
        Ok(Outcome::Processed {
            version: version.version,
            rows: 0,
            rejected: 0,
            rescued: 0,
            ignored: 0,
            outputs: Vec::new(),
        })
    }

    /// Take the claim, or learn why not, in as few requests as the race allows: one create
    /// for a key never seen; on a conflict the ledger returns the current record, so each
    /// further round trip is a single conditional write.
    async fn claim_with(
        &self,
        source: &Source,
        key: &str,
        target: Target,
        ctx: &RunContext,
        opts: ClaimOptions,
    ) -> Result<Claimed> {
        let now = self.clock.now_ms();
        let req = ClaimRequest {
            source_id: source.id().to_string(),
            key: key.to_string(),
            target,
            token: uuid::Uuid::new_v4().to_string(),
            run_id: ctx.run_id.clone(),
            now,
            lease_until: ctx.deadline_ms.max(now) + self.settings.lease_margin_ms,
            max_attempts: opts.max_attempts,
            refresh_config: opts.refresh.then(|| source.fingerprint.clone()),
        };
        let fresh = protocol::fresh_claim(&req);
        let mut current = match self.ledger.create(&fresh).await? {
            LedgerWrite::Written => {
                return Ok(Claimed::Ours {
                    record: Box::new(fresh),
                    target: req.target.clone(),
                    token: req.token,
                });
            }
            LedgerWrite::Conflict(current) => current,
        };
        loop {
            let decision = protocol::decide_claim(current.as_deref(), &req);
            let (record, done) = match decision {
                Decision::Skip(skip) => {
                    return Ok(Claimed::Done(skipped(skip, current.as_deref(), ctx)));
                }
                Decision::Claim { record, target } => (record, Err(target)),
                Decision::Defer { .. } if !opts.defer => {
                    return Ok(Claimed::Done(Outcome::Skipped(Skip::InFlight)));
                }
                Decision::Defer { record } => (record, Ok(Outcome::Deferred)),
                Decision::Settle { record, skip } => {
                    let outcome = skipped(skip, Some(&record), ctx);
                    (record, Ok(outcome))
                }
                Decision::Quarantine { record } => {
                    let error = record.last_error.clone().unwrap_or_default();
                    (record, Ok(Outcome::Quarantined { error }))
                }
            };
            let write = match current.as_deref() {
                None => self.ledger.create(&record).await?,
                Some(c) => self.ledger.replace(&record, c.rev).await?,
            };
            match write {
                LedgerWrite::Conflict(now_current) => current = now_current,
                LedgerWrite::Written => {
                    return Ok(match done {
                        Ok(outcome) => Claimed::Done(outcome),
                        Err(target) => Claimed::Ours {
                            record: Box::new(record),
                            target,
                            token: req.token,
                        },
                    });
                }
            }
        }
    }

    /// Apply a transition of our claim as a conditional write, re-reading from the conflict
    /// until it lands or the claim is no longer ours.
    async fn transition(
        &self,
        source: &Source,
        key: &str,
        mut current: Record,
        f: impl Fn(&Record) -> Result<Record, ClaimLost>,
    ) -> Result<Record> {
        let lost = |e: ClaimLost| ProcessError::ClaimLost {
            bucket: source.doc.bucket.clone(),
            key: key.to_string(),
            source: e,
        };
        loop {
            let next = f(&current).map_err(lost)?;
            match self.ledger.replace(&next, current.rev).await? {
                LedgerWrite::Written => return Ok(next),
                LedgerWrite::Conflict(Some(now)) => current = *now,
                LedgerWrite::Conflict(None) => return Err(lost(ClaimLost)),
            }
        }
    }

    async fn work(
        &self,
        source: &Source,
        key: &str,
        record: &Record,
        target: &Target,
        token: &str,
        ctx: &RunContext,
    ) -> Result<Work> {
        self.faults.check(Step::AfterClaim, key)?;
        let bucket = &source.doc.bucket;
        match target {
            Target::Version(v) => {
                let committed_etag = |out_key: String| {
                    record
                        .committed
                        .as_ref()
                        .and_then(|c| c.files().find(|o| o.key == out_key))
                        .map(|o| o.etag.clone())
                };
                // A table source's output is a new file per claim: nothing is there to replace.
                let expected = (
                    source
                        .table()
                        .is_none()
                        .then(|| committed_etag(source.output_key(key)))
                        .flatten(),
                    committed_etag(source.rejects_key(key)),
                );
                let Some(Converted {
                    version,
                    stats,
                    outputs,
                    rejects,
                }) = self
                    .convert_version(
                        source,
                        key,
                        v,
                        (expected.0, expected.1, Some(record)),
                        Some(token),
                        ctx,
                    )
                    .await?
                else {
                    return Ok(Work::Release(
                        "not current: the object changed or was deleted after the event".into(),
                    ));
                };
                self.faults.check(Step::BeforeCommit, key)?;
                Ok(Work::Commit(Box::new(Committed {
                    target: Target::Version(version),
                    rows: stats.rows,
                    sums: stats
                        .sums
                        .iter()
                        .map(|(k, v)| (k.clone(), v.to_string()))
                        .collect(),
                    outputs,
                    rejected: stats.rejects.len() as u64,
                    rejects,
                    rescued: stats.rescued_rows,
                    ignored: IgnoredFields::from(&stats.ignored),
                    config_fp: source.fingerprint.clone(),
                    committed_at: self.clock.now_ms(),
                    run_id: ctx.run_id.clone(),
                })))
            }
            Target::Delete(_) => {
                if self.store.head(bucket, key).await?.is_some() {
                    return Ok(Work::Release(
                        "not current: the key has a current object again".into(),
                    ));
                }
                let previous = record.committed.as_ref();
                // Files of a set an attempt announced and never committed: ours to delete
                // under the claim, whatever the policy keeps of the committed version.
                for k in record
                    .writing
                    .iter()
                    .filter(|k| !previous.is_some_and(|c| c.files().any(|o| &o.key == *k)))
                {
                    self.store
                        .delete(&source.doc.output.bucket, k, None)
                        .await?;
                }
                let (kept, kept_rejects) = match source.doc.on_delete {
                    OnDelete::Keep => (
                        previous.map(|c| c.outputs.clone()).unwrap_or_default(),
                        previous.and_then(|c| c.rejects.clone()),
                    ),
                    // A table's files stay where they are: the committer removes them from the
                    // table, and only the table's VACUUM deletes them (a reader of an older
                    // snapshot may still be reading one). The rejects file is not in the table.
                    OnDelete::Delete if source.table().is_some() => {
                        if source.doc.on_bad_row == OnBadRow::Reject {
                            self.store
                                .delete(&source.doc.output.bucket, &source.rejects_key(key), None)
                                .await?;
                        }
                        (Vec::new(), None)
                    }
                    OnDelete::Delete => {
                        // We hold the claim, so the deterministic output keys are ours to
                        // delete, including leftovers of an attempt that never committed.
                        let out_bucket = &source.doc.output.bucket;
                        self.store
                            .delete(out_bucket, &source.output_key(key), None)
                            .await?;
                        if source.doc.on_bad_row == OnBadRow::Reject {
                            self.store
                                .delete(out_bucket, &source.rejects_key(key), None)
                                .await?;
                        }
                        for o in previous.iter().flat_map(|c| c.files()) {
                            self.store.delete(&o.bucket, &o.key, None).await?;
                        }
                        (Vec::new(), None)
                    }
                };
                self.faults.check(Step::BeforeCommit, key)?;
                Ok(Work::Commit(Box::new(Committed {
                    target: target.clone(),
                    rows: 0,
                    sums: BTreeMap::new(),
                    outputs: kept,
                    rejected: 0,
                    rejects: kept_rejects,
                    rescued: 0,
                    ignored: IgnoredFields::default(),
                    config_fp: source.fingerprint.clone(),
                    committed_at: self.clock.now_ms(),
                    run_id: ctx.run_id.clone(),
                })))
            }
        }
    }

    /// How long a conversion of this invocation may stand still ([`crate::watchdog`]).
    fn stall_limit(&self, ctx: &RunContext) -> Duration {
        crate::watchdog::stall_limit(ctx.deadline_ms - self.clock.now_ms())
    }

    /// GET the version pinned to its ETag, convert it and write its output (and its rejects
    /// file). `expected` holds the ETags the ledger has for the output and the rejects file,
    /// and the record as the claim left it (`None` outside the ledger: a partitioned set's
    /// expected ETags and announced files);
    /// `claim` is the token of the claim the write is made under, `None` for a write outside
    /// the ledger (see [`Guard::untracked`]). `None` when the object is no longer that version.
    async fn convert_version(
        &self,
        source: &Source,
        key: &str,
        version: &VersionRef,
        (expected_output, expected_rejects, record): (
            Option<String>,
            Option<String>,
            Option<&Record>,
        ),
        claim: Option<&str>,
        ctx: &RunContext,
    ) -> Result<Option<Converted>> {
        let bucket = &source.doc.bucket;
        let tracked = claim.is_some();
        let out_key = match (source.table(), claim) {
            (None, _) => source.output_key(key),
            (Some(_), Some(token)) => source.table_output_key(key, &version.version, token),
            (Some(_), None) => {
                return Err(ProcessError::Unsupported {
                    source_id: source.id().to_string(),
                    message: format!(
                        "{key}: a source with a table is processed only through the ledger \
                         (mode \"enable\"): a write outside it would never reach the table"
                    ),
                });
            }
        };
        let named_version = version.version.clone();
        let Some((version, body, object)) = self.get_pinned(source, key, version).await? else {
            return Ok(None);
        };

        let out_bucket = source.doc.output.bucket.clone();
        let metadata = output_metadata(source, key, &version, ctx);
        let spec = source.convert_spec_for(object);
        let limit = self.stall_limit(ctx);
        let untracked = (!tracked).then_some((bucket.as_str(), key));
        let guard = Guard {
            expected: expected_output,
            version: &version,
            untracked,
        };
        let (stats, outputs) = match source.partition_columns() {
            Some(columns) => {
                self.convert_partitioned(
                    body,
                    spec,
                    (source, key, &named_version, claim),
                    columns,
                    record,
                    &metadata,
                    &guard,
                    limit,
                )
                .await?
            }
            None => {
                let (stats, etag) = self
                    .convert_and_upload(
                        body,
                        spec,
                        (bucket, key),
                        (&out_bucket, &out_key),
                        &metadata,
                        &guard,
                        limit,
                    )
                    .await?;
                let output = OutputRef {
                    bucket: out_bucket,
                    key: out_key,
                    etag,
                    ..OutputRef::default()
                };
                (stats, vec![output])
            }
        };
        let guard = Guard {
            expected: expected_rejects,
            ..guard
        };
        let rejects = self
            .write_rejects(source, key, &stats, &metadata, &guard)
            .await?;
        log_kept_aside(source.id(), key, &stats);
        self.faults.check(Step::AfterOutputPut, key)?;
        Ok(Some(Converted {
            version,
            stats,
            outputs,
            rejects,
        }))
    }

    /// Convert `body` under a source partitioned by columns: one local file per partition
    /// ([`crate::convert::convert_partitioned`]), each written under the conditions of any
    /// output (its committed ETag when the committed set has the same key, else absent; a
    /// leftover of an attempt that never committed is replaced). The set is committed
    /// together by the caller; a crash between two files leaves files the ledger does not
    /// count, and the retry rebuilds the same set. A source with a table writes names of this
    /// claim's own ([`Source::table_partition_output_key`]) and leaves the committed set's
    /// files to the table's VACUUM.
    #[allow(clippy::too_many_arguments)]
    async fn convert_partitioned(
        &self,
        body: Body,
        spec: crate::convert::ConvertSpec,
        (source, key, version, claim): (&Source, &str, &str, Option<&str>),
        columns: &[crate::convert::partition::PartitionColumn],
        record: Option<&Record>,
        metadata: &BTreeMap<String, String>,
        guard: &Guard<'_>,
        limit: Duration,
    ) -> Result<(ConvertStats, Vec<OutputRef>)> {
        let src_bucket = source.doc.bucket.clone();
        let dir = std::env::temp_dir().join(format!("tidemark-parts-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).map_err(|e| ProcessError::Internal(e.to_string()))?;
        let _cleanup = RemoveOnDrop(dir.clone());
        let (body, cut) = WatchedBody::new(body);
        let reader = SyncIoBridge::new(body);
        let columns_owned = columns.to_vec();
        let sums = source.doc.sum_columns.clone();
        let max_partitions = source.max_partitions();
        let work_dir = dir.clone();
        let faults = self.faults.clone();
        let object_key = key.to_string();
        let converted = crate::watchdog::convert(spec, limit, move |spec| {
            faults.converting(&object_key);
            let (stats, parts, _) = crate::convert::convert_partitioned(
                reader,
                &spec,
                &columns_owned,
                &sums,
                max_partitions,
                crate::convert::Budget::default(),
                &work_dir,
            )?;
            Ok((stats, parts))
        })
        .await;
        let (stats, parts) = match converted {
            Ok(done) => done,
            Err(e) => {
                if let Some(e) = cut.error(&src_bucket, key) {
                    return Err(ProcessError::Store(e));
                }
                return Err(ProcessError::Convert {
                    bucket: src_bucket,
                    key: key.to_string(),
                    source: e,
                });
            }
        };
        let out_bucket = source.doc.output.bucket.clone();
        let table_claim = source.table().and(claim);
        let keys: Vec<String> = parts
            .iter()
            .map(|p| match table_claim {
                Some(token) => source.table_partition_output_key(key, &p.dirs, version, token),
                None => source.partition_output_key(key, &p.dirs),
            })
            .collect();
        let committed_files: Vec<OutputRef> = record
            .and_then(|r| r.committed.as_ref())
            .map(|c| c.files().cloned().collect())
            .unwrap_or_default();
        if let (Some(token), Some(record)) = (claim, record) {
            self.announce_set(source, key, token, &keys, record).await?;
        }
        let mut outputs = Vec::with_capacity(parts.len());
        for (i, (part, out_key)) in parts.iter().zip(keys).enumerate() {
            let expected = committed_files
                .iter()
                .find(|o| o.key == out_key && o.bucket == out_bucket)
                .map(|o| o.etag.clone());
            let guard = Guard {
                expected,
                ..guard.clone()
            };
            let etag = self
                .upload_file(&out_bucket, &out_key, &part.path, metadata, &guard)
                .await?;
            outputs.push(OutputRef {
                bucket: out_bucket.clone(),
                key: out_key,
                etag,
                rows: Some(part.rows),
                sums: part
                    .sums
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_string()))
                    .collect(),
            });
            if i == 0 {
                self.faults.check(Step::BetweenPartFiles, key)?;
            }
        }
        // The committed set's files this one lacks (a partition the object no longer has a row
        // in) go now, under the claim, as a single output is replaced in place before its
        // commit: a commit whose reply is lost leaves nothing behind to clean up.
        // A table's files are the table's: a reader of an older snapshot may be reading them.
        if claim.is_some() && source.table().is_none() {
            for old in committed_files.iter().filter(|o| {
                o.bucket == out_bucket
                    && !outputs.iter().any(|n| n.key == o.key)
                    && Some(o.key.as_str()) != Some(source.rejects_key(key).as_str())
            }) {
                self.store
                    .delete(&old.bucket, &old.key, Some(&old.etag))
                    .await?;
            }
        }
        Ok((stats, outputs))
    }

    /// Under the claim `token`, before a set's files are written: delete the files earlier
    /// attempts announced that neither this set nor the committed one has (an attempt that
    /// died between two files, of this version or of one never committed), then replace them
    /// in the record's announced files by `keys`. A crash in between leaves them announced
    /// (deleted again next time: a delete of nothing is no error). The claim makes this
    /// attempt the only writer of the object.
    async fn announce_set(
        &self,
        source: &Source,
        key: &str,
        token: &str,
        keys: &[String],
        record: &Record,
    ) -> Result<()> {
        // The record as the claim left it: under the claim nobody else writes it.
        let committed = record.committed.as_ref();
        let gone: Vec<String> = record
            .writing
            .iter()
            .filter(|k| {
                !keys.contains(k) && !committed.is_some_and(|c| c.files().any(|o| &o.key == *k))
            })
            .cloned()
            .collect();
        let bucket = &source.doc.output.bucket;
        for old in &gone {
            self.store.delete(bucket, old, None).await?;
        }
        let now = self.clock.now_ms();
        let max = source.doc.max_attempts;
        self.transition(source, key, record.clone(), |r| {
            protocol::note_writing(r, token, keys, &gone, now, max)
        })
        .await?;
        Ok(())
    }

    /// Write the local file `path` to `bucket/key` under `guard`'s condition: one PUT, or a
    /// multipart upload in parts of `part_size` read from the file one at a time.
    async fn upload_file(
        &self,
        bucket: &str,
        key: &str,
        path: &std::path::Path,
        metadata: &BTreeMap<String, String>,
        guard: &Guard<'_>,
    ) -> Result<String> {
        use tokio::io::AsyncReadExt;
        let internal =
            |e: std::io::Error| ProcessError::Internal(format!("{}: {e}", path.display()));
        let size = tokio::fs::metadata(path).await.map_err(internal)?.len() as usize;
        let part_size = self.settings.part_size;
        let upload = if size <= part_size {
            Upload::Single(Bytes::from(tokio::fs::read(path).await.map_err(internal)?))
        } else {
            let id = self.store.create_multipart(bucket, key, metadata).await?;
            let mut file = tokio::fs::File::open(path).await.map_err(internal)?;
            let mut parts = Vec::new();
            loop {
                let mut chunk = Vec::with_capacity(part_size);
                (&mut file)
                    .take(part_size as u64)
                    .read_to_end(&mut chunk)
                    .await
                    .map_err(internal)?;
                if chunk.is_empty() {
                    break;
                }
                let n = parts.len() as i32 + 1;
                match self
                    .store
                    .upload_part(bucket, key, &id, n, Bytes::from(chunk))
                    .await
                {
                    Ok(etag) => parts.push((n, etag)),
                    Err(e) => {
                        self.store.abort_multipart(bucket, key, &id).await?;
                        return Err(e.into());
                    }
                }
            }
            Upload::Multipart(id, parts)
        };
        let etag = self
            .conditional_write(bucket, key, &upload, metadata, guard)
            .await;
        if let (Err(_), Upload::Multipart(id, _)) = (&etag, &upload) {
            self.store.abort_multipart(bucket, key, id).await?;
        }
        etag
    }

    /// GET `version` of `key` pinned to its ETag, refusing an object over
    /// `max_object_bytes` (by the size the event gave, then by the one the GET found): the
    /// version completed from the GET, its body, and what the lineage columns say of it.
    /// `None` when the object is no longer that version.
    async fn get_pinned(
        &self,
        source: &Source,
        key: &str,
        version: &VersionRef,
    ) -> Result<Option<(VersionRef, Body, crate::convert::ObjectInfo)>> {
        let bucket = &source.doc.bucket;
        let too_large = |size: u64| match source.doc.max_object_bytes {
            Some(limit) if size > limit => Err(ProcessError::TooLarge {
                bucket: bucket.clone(),
                key: key.to_string(),
                size,
                limit,
            }),
            _ => Ok(()),
        };
        too_large(version.size.unwrap_or(0))?;
        let (meta, body) = match self.store.get(bucket, key, version.etag.as_deref()).await? {
            GetOutcome::Found { meta, body } => (meta, body),
            GetOutcome::NotFound | GetOutcome::Changed => return Ok(None),
        };
        too_large(meta.size)?;
        self.faults.check(Step::AfterGet, key)?;
        let object = crate::convert::ObjectInfo {
            key: key.to_string(),
            version_id: meta.version_id.clone(),
            etag: meta.etag.clone(),
            last_modified_ms: meta.last_modified,
        };
        Ok(Some((pinned(version, &meta), body, object)))
    }

    /// Under `on_bad_row: reject`, write the rejects file of `version` of `key` (its
    /// rejected rows as JSON Lines) under the same conditions as an output; when it has
    /// none, remove a rejects file an attempt that never committed (or an older version)
    /// left there, unless it came from a newer version.
    async fn write_rejects(
        &self,
        source: &Source,
        key: &str,
        stats: &ConvertStats,
        metadata: &BTreeMap<String, String>,
        guard: &Guard<'_>,
    ) -> Result<Option<OutputRef>> {
        if source.doc.on_bad_row != OnBadRow::Reject {
            return Ok(None);
        }
        let bucket = &source.doc.output.bucket;
        let rejects_key = source.rejects_key(key);
        let version = guard.version;
        if stats.rejects.is_empty() {
            if let Some(found) = self.store.head(bucket, &rejects_key).await? {
                self.may_replace(bucket, &rejects_key, &found, guard)
                    .await?;
                self.store
                    .delete(bucket, &rejects_key, Some(&found.etag))
                    .await?;
            }
            return Ok(None);
        }
        warn!(
            source_id = source.id(),
            key,
            rejected = stats.rejects.len(),
            first = %stats.rejects[0].error,
            "bad rows set aside"
        );
        let body = rejects_jsonl(&source.doc.bucket, key, &version.version, &stats.rejects);
        let etag = self
            .conditional_write(bucket, &rejects_key, &Upload::Single(body), metadata, guard)
            .await?;
        Ok(Some(OutputRef {
            bucket: bucket.clone(),
            key: rejects_key,
            etag,
            ..OutputRef::default()
        }))
    }

    /// Stream `body` through the converter on a blocking thread while the async side uploads
    /// the Parquet bytes: in one PUT when the output fits in one part, else by multipart. The
    /// write is conditional; see [`Pipeline::conditional_write`].
    #[allow(clippy::too_many_arguments)]
    async fn convert_and_upload(
        &self,
        body: Body,
        spec: crate::convert::ConvertSpec,
        src: (&str, &str),
        out: (&str, &str),
        metadata: &BTreeMap<String, String>,
        guard: &Guard<'_>,
        limit: Duration,
    ) -> Result<(ConvertStats, String)> {
        let (stats, etag, _) = self
            .convert_and_upload_filtered(body, spec, src, out, metadata, guard, None, limit)
            .await?;
        Ok((stats, etag))
    }

    /// [`Pipeline::convert_and_upload`], the rows passed through a bookmark `filter` (given
    /// back with its classification) when there is one.
    #[allow(clippy::too_many_arguments)]
    async fn convert_and_upload_filtered(
        &self,
        body: Body,
        spec: crate::convert::ConvertSpec,
        (src_bucket, src_key): (&str, &str),
        (out_bucket, out_key): (&str, &str),
        metadata: &BTreeMap<String, String>,
        guard: &Guard<'_>,
        filter: Option<Box<crate::bookmark::RowFilter>>,
        limit: Duration,
    ) -> Result<(
        ConvertStats,
        String,
        Option<Box<crate::bookmark::RowFilter>>,
    )> {
        let (tx, mut rx) = mpsc::channel::<Bytes>(self.settings.parts_in_flight);
        let part_size = self.settings.part_size;
        let (body, cut) = WatchedBody::new(body);
        let reader = SyncIoBridge::new(body);
        let faults = self.faults.clone();
        let key = src_key.to_string();
        let converter = crate::watchdog::convert(spec, limit, move |spec| {
            faults.converting(&key);
            let mut sink = PartSink {
                tx,
                buf: Vec::new(),
                part_size,
                progress: spec.progress.clone(),
            };
            let mut filter = filter;
            let stats = match filter.as_mut() {
                None => convert(reader, &spec, &mut sink)?,
                Some(f) => f.convert(reader, &spec, &mut sink)?,
            };
            sink.finish()?;
            Ok((stats, filter))
        });

        // Upload parts as they come; the first is held back until a second shows the output
        // needs a multipart upload.
        let store = &self.store;
        let uploader = async {
            let mut first: Option<Bytes> = None;
            let mut upload: Option<(String, Vec<(i32, String)>)> = None;
            while let Some(chunk) = rx.recv().await {
                match (&mut upload, first.take()) {
                    (None, None) => first = Some(chunk),
                    (None, Some(held)) => {
                        let id = store
                            .create_multipart(out_bucket, out_key, metadata)
                            .await?;
                        let mut parts = Vec::new();
                        for body in [held, chunk] {
                            let n = parts.len() as i32 + 1;
                            let etag = store.upload_part(out_bucket, out_key, &id, n, body).await?;
                            parts.push((n, etag));
                        }
                        upload = Some((id, parts));
                    }
                    (Some((id, parts)), _) => {
                        let n = parts.len() as i32 + 1;
                        let etag = store.upload_part(out_bucket, out_key, id, n, chunk).await?;
                        parts.push((n, etag));
                    }
                }
            }
            Ok::<_, ProcessError>(match upload {
                Some(u) => Upload::Multipart(u.0, u.1),
                None => Upload::Single(first.unwrap_or_default()),
            })
        };
        // The converter ends first, closing the parts' channel, unless it is abandoned: then
        // the uploader, waiting for parts that never come, is dropped with its upload.
        tokio::pin!(uploader, converter);
        let (uploaded, converted) = tokio::select! {
            converted = &mut converter => (None, converted),
            uploaded = &mut uploader => (Some(uploaded), converter.await),
        };
        let uploaded = match (uploaded, &converted) {
            (Some(uploaded), _) => uploaded,
            (None, Err(ConvertError::Abandoned(why))) => {
                Err(ProcessError::Internal(why.to_string()))
            }
            (None, _) => uploader.await,
        };
        let (stats, filter) = match converted {
            Ok(done) => done,
            Err(source) => {
                if let Ok(Upload::Multipart(id, _)) = &uploaded {
                    store.abort_multipart(out_bucket, out_key, id).await?;
                }
                // The converter saw the error of a dropped connection (through whichever
                // decoder wrapped it): the network failed, not the object.
                if let Some(e) = cut.error(src_bucket, src_key) {
                    return Err(ProcessError::Store(e));
                }
                return Err(ProcessError::Convert {
                    bucket: src_bucket.to_string(),
                    key: src_key.to_string(),
                    source,
                });
            }
        };
        let upload = uploaded?;
        let etag = self
            .conditional_write(out_bucket, out_key, &upload, metadata, guard)
            .await;
        if let (Err(_), Upload::Multipart(id, _)) = (&etag, &upload) {
            store.abort_multipart(out_bucket, out_key, id).await?;
        }
        Ok((stats, etag?, filter))
    }

    /// Write (or complete) the output under the condition the ledger implies: absent for a
    /// first write, the committed ETag for a replacement. When the condition fails, the
    /// output found there is a leftover of an attempt that never committed (or of an older
    /// version): overwrite it, conditional on its ETag, unless [`Pipeline::may_replace`]
    /// says this attempt is stale.
    async fn conditional_write(
        &self,
        bucket: &str,
        key: &str,
        upload: &Upload,
        metadata: &BTreeMap<String, String>,
        guard: &Guard<'_>,
    ) -> Result<String> {
        const TRIES: u32 = 4;
        let mut condition = guard
            .expected
            .clone()
            .map_or(WriteCondition::Absent, WriteCondition::Matches);
        for _ in 0..TRIES {
            let outcome = match upload {
                Upload::Single(body) => {
                    self.store
                        .put(bucket, key, body.clone(), metadata, &condition)
                        .await?
                }
                Upload::Multipart(id, parts) => {
                    self.store
                        .complete_multipart(bucket, key, id, parts, &condition)
                        .await?
                }
            };
            match outcome {
                PutOutcome::Written { etag } => return Ok(etag),
                PutOutcome::PreconditionFailed => {
                    condition = match self.store.head(bucket, key).await? {
                        None => WriteCondition::Absent,
                        Some(found) => {
                            self.may_replace(bucket, key, &found, guard).await?;
                            info!(bucket, key, found_run = ?found.metadata.get(meta::RUN), "replacing an uncommitted output");
                            WriteCondition::Matches(found.etag)
                        }
                    };
                }
            }
        }
        Err(ProcessError::OutputContended {
            bucket: bucket.to_string(),
            key: key.to_string(),
            attempts: TRIES,
        })
    }

    /// May the write of `guard.version` replace `found`, the object under `bucket`/`key`? Not
    /// when `found` was written from a newer version of the source (by the sequencers). A
    /// write outside the ledger whose version an event did not order (a replay of a listed
    /// version) replaces another version's output only while its own version is still the
    /// source object's current one: a HEAD of the source decides, and the conditional write
    /// that follows fails if the output changed after it was looked at.
    async fn may_replace(
        &self,
        bucket: &str,
        key: &str,
        found: &crate::ports::ObjectMeta,
        guard: &Guard<'_>,
    ) -> Result<()> {
        let stale = || ProcessError::StaleOutput {
            bucket: bucket.to_string(),
            key: key.to_string(),
        };
        if written_after(found, guard.version.sequencer.as_ref()) {
            return Err(stale());
        }
        if let Some((src_bucket, src_key)) = guard.untracked
            && !from_version(found, &guard.version.version)
        {
            let current = self.store.head(src_bucket, src_key).await?;
            if current.map(|m| m.etag) != guard.version.etag {
                return Err(stale());
            }
        }
        Ok(())
    }

    /// A paused or disabled source: convert straight to the output, ledger untouched. Pause
    /// still skips a version the ledger has committed (Glue: process what is new, do not
    /// advance); disable processes everything.
    async fn process_untracked(
        &self,
        source: &Source,
        key: &str,
        target: Target,
        ctx: &RunContext,
    ) -> Result<Outcome> {
        let Target::Version(version) = target else {
            return Ok(Outcome::Untracked { rows: 0 });
        };
        if source.doc.mode == Mode::Pause
            && let Some(r) = self.ledger.get(source.id(), key).await?
            && r.committed
                .as_ref()
                .is_some_and(|c| c.target.same_as(&Target::Version(version.clone())))
        {
            return Ok(Outcome::Skipped(Skip::Duplicate));
        }
        match self
            .convert_version(source, key, &version, (None, None, None), None, ctx)
            .await
        {
            Ok(Some(converted)) => Ok(Outcome::Untracked {
                rows: converted.stats.rows,
            }),
            // The object moved on, or the output found is another version's and ours is no
            // longer the object's current one: nothing to replace.
            Ok(None) | Err(ProcessError::StaleOutput { .. }) => Ok(Outcome::NotCurrent),
            Err(e) => Err(e),
        }
    }
}

/// The outcome of a claim the protocol skipped. A duplicate of a version the caller's own job
/// committed (a work item delivered again) is that job's processed item, with the commit's
/// numbers: the job counts it once, as processed, whichever delivery finishes its message.
fn skipped(skip: Skip, record: Option<&Record>, ctx: &RunContext) -> Outcome {
    let ours = record
        .and_then(|r| r.committed.as_ref())
        .filter(|c| skip == Skip::Duplicate && ctx.same_job(&c.run_id));
    match ours.map(|c| (c, &c.target)) {
        Some((c, Target::Version(v))) => Outcome::Processed {
            version: v.version.clone(),
            rows: c.rows,
            rejected: c.rejected,
            rescued: c.rescued,
            ignored: c.ignored.values,
            outputs: c.outputs.clone(),
        },
        _ => Outcome::Skipped(skip),
    }
}

/// Removes a temporary folder when dropped.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What a conditional write of an output (or rejects file) may replace.
#[derive(Clone)]
struct Guard<'a> {
    /// The ETag the ledger has for the object (`None`: a first write).
    expected: Option<String>,
    /// The source version being written: its sequencer, when an event gave one, orders it
    /// against the version an output found there came from.
    version: &'a VersionRef,
    /// For a write outside the ledger (replay, pause, disable): the source object's bucket
    /// and key, whose current version is checked before another version's output is
    /// replaced. `None` for the claim holder's writes, which the ledger serializes.
    untracked: Option<(&'a str, &'a str)>,
}

/// Was `found` written from version `version` of its source (by its metadata)?
fn from_version(found: &crate::ports::ObjectMeta, version: &str) -> bool {
    found
        .metadata
        .get(meta::SOURCE_VERSION)
        .is_some_and(|v| *v == utf8_percent_encode(version, NON_ALPHANUMERIC).to_string())
}

/// What [`Pipeline::convert_version`] made of a version.
struct Converted {
    /// The version, completed from the pinned GET.
    version: VersionRef,
    stats: ConvertStats,
    /// Its output, or under partitioning by columns the set of files, one per partition.
    outputs: Vec<OutputRef>,
    /// Its rejects file, when it has rejected rows.
    rejects: Option<OutputRef>,
}

/// The rejects file of `version` of `bucket/key`: one JSON object per rejected row, in
/// input order, naming the object, the line, the column and the error, with the record as
/// read (`record`; `record_base64` instead when it is not UTF-8; `truncated` when it was
/// longer than [`crate::convert::reject::REJECT_RECORD_BYTES`]).
fn rejects_jsonl(
    bucket: &str,
    key: &str,
    version: &str,
    rejects: &[crate::convert::Rejected],
) -> Bytes {
    use base64::Engine;
    let mut out = Vec::new();
    for r in rejects {
        let mut line = serde_json::json!({
            "bucket": bucket, "key": key, "version": version,
            "line": r.line, "column": r.column, "error": r.error,
        });
        match std::str::from_utf8(&r.record) {
            Ok(text) => line["record"] = text.into(),
            Err(_) => {
                line["record_base64"] = base64::engine::general_purpose::STANDARD
                    .encode(&r.record)
                    .into();
            }
        }
        if let Some(record) = r.record_number {
            line["record_number"] = record.into();
        }
        if r.truncated {
            line["truncated"] = true.into();
        }
        out.extend_from_slice(line.to_string().as_bytes());
        out.push(b'\n');
    }
    Bytes::from(out)
}

/// Was the output `found` written for a newer version of its source object than the one of
/// `sequencer` (by the sequencer in its metadata)? Unknown sequencers say no.
fn written_after(found: &crate::ports::ObjectMeta, sequencer: Option<&Sequencer>) -> bool {
    let theirs = found
        .metadata
        .get(meta::SOURCE_SEQUENCER)
        .and_then(|s| s.parse::<Sequencer>().ok());
    matches!((theirs, sequencer), (Some(theirs), Some(ours)) if &theirs > ours)
}

/// `version` completed from the metadata of the GET that pinned it (ETag, size, version id).
fn pinned(version: &VersionRef, meta: &crate::ports::ObjectMeta) -> VersionRef {
    let mut version = version.clone();
    version.etag.get_or_insert(meta.etag.clone());
    version.size = Some(meta.size);
    if version.version_id.is_none() {
        version.version_id = meta.version_id.clone();
    }
    version
}

/// The user metadata of an output: which source object and version it came from, and the
/// run that wrote it (how a leftover of an attempt that never committed is recognised).
fn output_metadata(
    source: &Source,
    key: &str,
    version: &VersionRef,
    ctx: &RunContext,
) -> BTreeMap<String, String> {
    let mut metadata = BTreeMap::from([
        (meta::SOURCE_ID.to_string(), source.id().to_string()),
        (
            meta::SOURCE_KEY.to_string(),
            utf8_percent_encode(key, NON_ALPHANUMERIC).to_string(),
        ),
        (
            meta::SOURCE_VERSION.to_string(),
            utf8_percent_encode(&version.version, NON_ALPHANUMERIC).to_string(),
        ),
        (meta::RUN.to_string(), ctx.run_id.clone()),
    ]);
    if let Some(seq) = &version.sequencer {
        metadata.insert(meta::SOURCE_SEQUENCER.to_string(), seq.to_string());
    }
    metadata
}

/// The GET body, remembering a read error of the transport: the converter sees it as an
/// I/O error somewhere inside its decoders, and only this wrapper knows it was the network.
pub(crate) struct WatchedBody {
    inner: crate::ports::Body,
    failure: Arc<std::sync::Mutex<Option<String>>>,
}

/// What a [`WatchedBody`] saw, readable after the converter is done with the body.
pub(crate) struct BodyWatch(Arc<std::sync::Mutex<Option<String>>>);

impl WatchedBody {
    pub(crate) fn new(inner: crate::ports::Body) -> (Self, BodyWatch) {
        let failure = Arc::new(std::sync::Mutex::new(None));
        let watch = BodyWatch(failure.clone());
        (Self { inner, failure }, watch)
    }
}

impl BodyWatch {
    /// The transient `GetObject` error of `bucket`/`key` if reading the body failed.
    pub(crate) fn error(&self, bucket: &str, key: &str) -> Option<StoreError> {
        let message = self.0.lock().ok()?.take()?;
        Some(StoreError {
            op: "GetObject",
            bucket: bucket.to_string(),
            key: key.to_string(),
            message: format!("reading the body failed: {message}"),
            retry: Retry::Transient,
        })
    }
}

impl tokio::io::AsyncRead for WatchedBody {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let polled = self.inner.as_mut().poll_read(cx, buf);
        if let std::task::Poll::Ready(Err(e)) = &polled
            && let Ok(mut failure) = self.failure.lock()
        {
            failure.get_or_insert_with(|| e.to_string());
        }
        polled
    }
}

enum Upload {
    Single(Bytes),
    Multipart(String, Vec<(i32, String)>),
}

/// The converter's `Write`: cuts the Parquet stream into parts for the uploader.
struct PartSink {
    tx: mpsc::Sender<Bytes>,
    buf: Vec<u8>,
    part_size: usize,
    /// The conversion's progress: waiting for the uploader is not standing still.
    progress: crate::watchdog::Progress,
}

impl PartSink {
    fn send(&mut self) -> std::io::Result<()> {
        let part = Bytes::from(std::mem::take(&mut self.buf));
        let tx = &self.tx;
        self.progress
            .wait(|| tx.blocking_send(part))
            .map_err(|_| std::io::Error::other("the uploader stopped"))
    }

    fn finish(mut self) -> std::io::Result<()> {
        if !self.buf.is_empty() {
            self.send()?;
        }
        Ok(())
    }
}

impl std::io::Write for PartSink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= self.part_size {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Fields of the rows of `key` that did not land in their columns, by policy: values kept in
/// the rescued column (a warning, as for rejected rows) and values of fields the schema does
/// not name, dropped (counted, with the fields that held the most).
fn log_kept_aside(source_id: &str, key: &str, stats: &ConvertStats) {
    if stats.rescued_rows > 0 {
        warn!(
            source_id,
            key,
            rescued = stats.rescued_rows,
            "rows with values kept in the rescued column"
        );
    }
    if !stats.ignored.is_empty() {
        let ignored = IgnoredFields::from(&stats.ignored);
        info!(
            source_id,
            key,
            ignored = ignored.values,
            fields = %ignored.summary(IGNORED_FIELDS_LOGGED),
            "values of fields not in the schema ignored"
        );
    }
}

/// Ignored fields a log line names.
const IGNORED_FIELDS_LOGGED: usize = 5;

/// The target an event asks for.
pub fn target_of(event: &ObjectEvent) -> Target {
    match event.kind {
        ObjectEventKind::Created => Target::Version(VersionRef {
            version: event
                .version_id
                .clone()
                .or_else(|| event.etag.clone())
                .unwrap_or_default(),
            version_id: event.version_id.clone(),
            etag: event.etag.clone(),
            sequencer: event.sequencer.clone(),
            size: event.size,
        }),
        ObjectEventKind::Removed { delete_marker } => Target::Delete(DeleteRef {
            sequencer: event.sequencer.clone(),
            version_id: event.version_id.clone(),
            delete_marker,
        }),
    }
}

fn log_result(
    source_id: &str,
    bucket: &str,
    key: &str,
    target: &Target,
    outcome: &Result<Outcome>,
    started: Instant,
) {
    let duration_ms = started.elapsed().as_millis() as u64;
    let version = match target {
        Target::Version(v) => v.version.as_str(),
        Target::Delete(_) => "delete",
    };
    match outcome {
        Ok(o) => {
            let (rows, rejected, rescued, ignored) = match *o {
                Outcome::Processed {
                    rows,
                    rejected,
                    rescued,
                    ignored,
                    ..
                } => (rows, rejected, rescued, ignored),
                Outcome::Untracked { rows } => (rows, 0, 0, 0),
                _ => (0, 0, 0, 0),
            };
            info!(
                source_id,
                bucket,
                key,
                version,
                outcome = o.as_str(),
                rows,
                rejected,
                rescued,
                ignored,
                duration_ms,
                "object handled"
            );
        }
        Err(e) => warn!(
            source_id,
            bucket,
            key,
            version,
            outcome = "error",
            retryable = e.is_retryable(),
            error = %e,
            duration_ms,
            "object failed"
        ),
    }
}
