//! The ports the pipeline runs on: an object store (S3, or local folders), a ledger
//! (DynamoDB, or SQLite) and a clock. They are object-safe (`dyn`), because the backend is
//! chosen at run time (Lambda, CLI, tests) and fault-injecting layers wrap the real ones.
//!
//! Expected conflicts come back as values ([`PutOutcome::PreconditionFailed`],
//! [`LedgerWrite::Conflict`]), never as errors: the protocol branches on them.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::io::AsyncRead;

use crate::config::Mode;
use crate::error::{LedgerError, QueueError, StoreError};
use crate::jobs::{Job, JobCounts};
use crate::model::{AuditEntry, Record};

/// What the store knows of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Key of the object.
    pub key: String,
    /// ETag without quotes.
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
    /// versionId, where the bucket is versioned.
    pub version_id: Option<String>,
    /// Last modified, ms since the epoch.
    pub last_modified: i64,
    /// User metadata (`x-amz-meta-*`), keys lower-case without the prefix.
    pub metadata: BTreeMap<String, String>,
}

/// An object body being read.
pub type Body = Pin<Box<dyn AsyncRead + Send>>;

/// The answer to a GET.
pub enum GetOutcome {
    /// The object, pinned to the requested ETag when one was given.
    Found {
        /// Its metadata.
        meta: ObjectMeta,
        /// Its bytes, streamed.
        body: Body,
    },
    /// No such key.
    NotFound,
    /// The object exists but is another version than the one pinned (`If-Match` failed).
    Changed,
}

/// The condition a write is made under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteCondition {
    /// Only if no object exists under the key (`If-None-Match: *`).
    Absent,
    /// Only if the current object has this ETag (`If-Match`).
    Matches(String),
}

/// The answer to a conditional write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutOutcome {
    /// Written; the new ETag (without quotes).
    Written {
        /// ETag of the new object.
        etag: String,
    },
    /// The condition did not hold: someone else's object is there (or none is).
    PreconditionFailed,
}

/// A byte range of an object, for a ranged GET.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// The last `n` bytes (`Range: bytes=-n`); the whole object when it is shorter.
    Suffix(u64),
    /// Bytes `start..end` (end exclusive; `Range: bytes=start-(end-1)`), cut at the end of
    /// the object.
    Span {
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
    },
}

/// The answer to a ranged GET.
#[derive(Debug)]
pub enum RangeOutcome {
    /// The bytes asked for; `meta.size` is the size of the whole object.
    Found {
        /// Metadata of the object (size: the whole object's).
        meta: ObjectMeta,
        /// The bytes of the range.
        bytes: Bytes,
    },
    /// No such key.
    NotFound,
    /// The object exists but is another version than the one pinned (`If-Match` failed).
    Changed,
}

/// One page of a listing.
#[derive(Debug, Clone, Default)]
pub struct ListPage {
    /// Objects in key order.
    pub objects: Vec<ObjectMeta>,
    /// Token of the next page, if any.
    pub next: Option<String>,
}

/// A bucket-and-key object store with conditional writes.
#[async_trait]
pub trait ObjectStore: Send + Sync {
    /// Metadata of the current object under `key`, if any.
    async fn head(&self, bucket: &str, key: &str) -> Result<Option<ObjectMeta>, StoreError>;

    /// Stream the current object, only if its ETag is `if_match` (when given).
    async fn get(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&str>,
    ) -> Result<GetOutcome, StoreError>;

    /// A byte range of the current object under `key`, only if its ETag is `if_match` (when
    /// given): how reconcile reads a Parquet footer, and the column chunks of a row group,
    /// without reading the whole output.
    async fn get_range(
        &self,
        bucket: &str,
        key: &str,
        range: ByteRange,
        if_match: Option<&str>,
    ) -> Result<RangeOutcome, StoreError>;

    /// Write `body` under `key` with user `metadata`, if `condition` holds.
    async fn put(
        &self,
        bucket: &str,
        key: &str,
        body: Bytes,
        metadata: &BTreeMap<String, String>,
        condition: &WriteCondition,
    ) -> Result<PutOutcome, StoreError>;

    /// Start a multipart upload; returns its id.
    async fn create_multipart(
        &self,
        bucket: &str,
        key: &str,
        metadata: &BTreeMap<String, String>,
    ) -> Result<String, StoreError>;

    /// Upload part `part_number` (1-based) of an upload; returns the part's ETag.
    async fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Bytes,
    ) -> Result<String, StoreError>;

    /// Complete an upload from its parts `(number, etag)`, if `condition` holds. On
    /// [`PutOutcome::PreconditionFailed`] the upload stays open, so it can be completed again
    /// under another condition.
    async fn complete_multipart(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[(i32, String)],
        condition: &WriteCondition,
    ) -> Result<PutOutcome, StoreError>;

    /// Abandon an upload and its parts.
    async fn abort_multipart(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), StoreError>;

    /// Delete `key`, only if its ETag is `if_match` (when given). Deleting a missing key, or
    /// one whose ETag moved on, is not an error: `false` says nothing was deleted (S3 cannot
    /// tell a missing key from a deleted one without `if_match`, and answers `true`).
    async fn delete(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&str>,
    ) -> Result<bool, StoreError>;

    /// One page of the objects under `prefix`.
    async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        page_token: Option<&str>,
    ) -> Result<ListPage, StoreError>;

    /// The first page of the objects under `prefix` whose keys sort after `start_after`;
    /// further pages with [`ObjectStore::list`] and the page's token. The default lists from
    /// the start and skips; stores that can start there (S3's `StartAfter`) override it.
    async fn list_after(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: &str,
    ) -> Result<ListPage, StoreError> {
        let mut token: Option<String> = None;
        loop {
            let mut page = self.list(bucket, prefix, token.as_deref()).await?;
            page.objects.retain(|o| o.key.as_str() > start_after);
            if !page.objects.is_empty() || page.next.is_none() {
                return Ok(page);
            }
            token = page.next;
        }
    }
}

/// The answer to a conditional ledger write.
#[derive(Debug, Clone, PartialEq)]
pub enum LedgerWrite {
    /// Written.
    Written,
    /// The condition failed; the record as it is now (`None`: it does not exist), returned by
    /// the same request so a lost race needs no second read.
    Conflict(Option<Box<Record>>),
}

/// The answer to a conditional write of a job record.
#[derive(Debug, Clone, PartialEq)]
pub enum JobWrite {
    /// Written.
    Written,
    /// The revision moved (or the job is gone): the job as it is now.
    Conflict(Option<Box<Job>>),
}

/// Bulk jobs, kept in the ledger's store (see [`crate::jobs`]): the job record written by its
/// planner, and counts its workers add to once per finished message.
#[async_trait]
pub trait JobStore: Send + Sync {
    /// Write a new job; `false` if a job with its id exists.
    async fn create_job(&self, job: &Job) -> Result<bool, LedgerError>;

    /// Replace the job record only if its stored revision is `expected_rev`.
    async fn replace_job(&self, job: &Job, expected_rev: u64) -> Result<JobWrite, LedgerError>;

    /// The job and its counts, if there is such a job.
    async fn get_job(&self, id: &str) -> Result<Option<(Job, JobCounts)>, LedgerError>;

    /// The most recent jobs (by start time, newest first), at most `limit`, with their counts.
    async fn list_jobs(&self, limit: usize) -> Result<Vec<(Job, JobCounts)>, LedgerError>;

    /// Add `counts` (the outcomes of message `message`'s items) and one finished message to
    /// job `job_id`'s counts, once: `false` when this message was counted already (a redelivered message, or one
    /// a restarted planner sent again) and nothing was added. The mark and the addition are
    /// one atomic write.
    async fn finish_message(
        &self,
        job_id: &str,
        message: u64,
        counts: &JobCounts,
        now: i64,
    ) -> Result<bool, LedgerError>;

    /// Count `n` failed attempts at items of job `job_id` (their messages come back): not
    /// idempotent, a gauge of trouble rather than a count of objects.
    async fn add_failures(&self, job_id: &str, n: u64, now: i64) -> Result<(), LedgerError>;
}

/// The durable record of how far each key got. Each write is conditional on the record's
/// revision; the rules of what to write live in [`crate::protocol`]. The same store keeps the
/// bulk jobs ([`JobStore`]).
#[async_trait]
pub trait Ledger: JobStore + Send + Sync {
    /// The record of `(source_id, key)`, if any.
    async fn get(&self, source_id: &str, key: &str) -> Result<Option<Record>, LedgerError>;

    /// Write `record` only if no record exists for its key.
    async fn create(&self, record: &Record) -> Result<LedgerWrite, LedgerError>;

    /// Replace the record only if its stored revision is `expected_rev`.
    async fn replace(&self, record: &Record, expected_rev: u64)
    -> Result<LedgerWrite, LedgerError>;

    /// Delete the record of `(source_id, key)` only if its stored revision is `expected_rev`
    /// (the operator's rewind, reset and forget). A conflict carries the record as it is now
    /// (`None`: there is none), as for [`Ledger::replace`].
    async fn delete(
        &self,
        source_id: &str,
        key: &str,
        expected_rev: u64,
    ) -> Result<LedgerWrite, LedgerError>;

    /// Every record of a source, ordered by key. For operator commands (status, rewind,
    /// reset) and the CLI's `run`, never the per-event path. On DynamoDB this reads a global
    /// secondary index, which is eventually consistent: a write of the last second may be
    /// missing or stale. Callers that act on a record make their write conditional on the
    /// revision they read, so a stale read costs a conflict, never a lost update.
    async fn list(&self, source_id: &str) -> Result<Vec<Record>, LedgerError>;

    /// The records of `keys` of a source, in no particular order (a key without a record has
    /// none in the answer). How the backfill planner learns, one listing page at a time, which
    /// objects are done already, without reading the whole source. On DynamoDB a batched,
    /// eventually consistent read (BatchGetItem, 100 keys a request): the planner only uses
    /// it to leave out work, and the workers' claims decide.
    async fn get_many(&self, source_id: &str, keys: &[String]) -> Result<Vec<Record>, LedgerError>;

    /// [`Ledger::get_many`] read strongly consistent: every write acknowledged before the call
    /// is seen (what the table committer publishes from). On DynamoDB a BatchGetItem with
    /// `ConsistentRead` (twice the read units of [`Ledger::get_many`]).
    async fn get_many_latest(
        &self,
        source_id: &str,
        keys: &[String],
    ) -> Result<Vec<Record>, LedgerError> {
        self.get_many(source_id, keys).await
    }

    /// The records of a source whose keys are in `range`, ordered by key: what reconcile
    /// compares a window's listing with (one part of a window at a time), without reading
    /// the whole source. Eventually consistent on DynamoDB, like [`Ledger::list`].
    async fn list_range(
        &self,
        source_id: &str,
        range: &KeyRange,
    ) -> Result<Vec<Record>, LedgerError>;

    /// Append an entry to the audit log.
    async fn audit(&self, entry: &AuditEntry) -> Result<(), LedgerError>;

    /// The audit log, of one source or of all, oldest first.
    async fn audit_log(&self, source_id: Option<&str>) -> Result<Vec<AuditEntry>, LedgerError>;

    /// The operator's mode override of a source (`tidemark mode`), if one was set. Read by the
    /// CLI; the Lambdas take the mode from their configuration document only.
    async fn source_mode(&self, source_id: &str) -> Result<Option<Mode>, LedgerError>;

    /// Set the operator's mode override of a source.
    async fn set_source_mode(
        &self,
        source_id: &str,
        mode: Mode,
        at: i64,
    ) -> Result<(), LedgerError>;

    /// Every source id the ledger holds records of, sorted: how state left behind by a source
    /// renamed or removed from the document is found. On DynamoDB a registry (one item per
    /// source id, written before a process's first record of that source, read with one
    /// Query), so an id whose records were all removed may still be listed until
    /// [`Ledger::unregister_source`]; on SQLite the ids of the records themselves.
    async fn source_ids(&self) -> Result<Vec<String>, LedgerError>;

    /// Forget `source_id` in the registry of [`Ledger::source_ids`] (after its records were
    /// moved or removed). Nothing to do where the ids come from the records.
    async fn unregister_source(&self, _source_id: &str) -> Result<(), LedgerError> {
        Ok(())
    }
}

/// A message taken from a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueMessage {
    /// The queue's id of the message.
    pub id: String,
    /// The handle that deletes it (one per receive).
    pub receipt: String,
    /// The body.
    pub body: String,
    /// How many times it has been received, this time included.
    pub receive_count: u32,
    /// When it was first sent (ms since the epoch).
    pub sent_at: i64,
}

/// How many messages a queue holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepth {
    /// Waiting to be received.
    pub visible: u64,
    /// Received and not yet deleted (being worked on, or waiting out their visibility timeout).
    pub in_flight: u64,
}

/// A work queue with at-least-once delivery: Amazon SQS, or a local SQLite table. Bulk
/// paths send work items to it; the fleet takes them (on AWS, through the event source
/// mapping of the ingest or reconcile function; locally, through [`crate::fleet`]).
#[async_trait]
pub trait WorkQueue: Send + Sync {
    /// Send these message bodies (batched as the queue allows: 10 per SQS request).
    async fn send(&self, bodies: &[String]) -> Result<(), QueueError>;

    /// Take up to `max` messages, hidden from other receivers for `visibility_ms`, waiting up
    /// to `wait_ms` for the first one.
    async fn receive(
        &self,
        max: usize,
        visibility_ms: u64,
        wait_ms: u64,
    ) -> Result<Vec<QueueMessage>, QueueError>;

    /// Delete a handled message.
    async fn delete(&self, receipt: &str) -> Result<(), QueueError>;

    /// How many messages it holds (approximate on SQS).
    async fn depth(&self) -> Result<QueueDepth, QueueError>;

    /// Messages set aside as dead (received too often without being deleted), where the
    /// queue keeps them itself (the local queue); `None` where a separate dead-letter queue
    /// does (SQS: its alarm and console tell).
    async fn dead(&self) -> Result<Option<u64>, QueueError> {
        Ok(None)
    }
}

/// Keys that start with `prefix` and sort after `after` (when given) and not after `through`
/// (when given), by their UTF-8 bytes as S3 and DynamoDB order them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyRange {
    /// Every key starts with this.
    pub prefix: String,
    /// Keys sort strictly after this one.
    pub after: Option<String>,
    /// Keys sort at or before this one.
    pub through: Option<String>,
}

impl KeyRange {
    /// Every key under `prefix`.
    pub fn prefix(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            ..Self::default()
        }
    }

    /// Is `key` in the range?
    pub fn contains(&self, key: &str) -> bool {
        key.starts_with(&self.prefix)
            && self.after.as_deref().is_none_or(|a| key > a)
            && self.through.as_deref().is_none_or(|t| key <= t)
    }
}

/// Wall-clock time, injected so leases and lag are testable.
pub trait Clock: Send + Sync {
    /// Now, ms since the epoch.
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        chrono::Utc::now().timestamp_millis()
    }
}

/// A clock that moves only when told to.
#[derive(Debug, Default, Clone)]
pub struct TestClock(Arc<AtomicI64>);

impl TestClock {
    /// A clock standing at `ms`.
    pub fn at(ms: i64) -> Self {
        Self(Arc::new(AtomicI64::new(ms)))
    }

    /// Move the clock forward by `ms`.
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}
