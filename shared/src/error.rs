//! Errors per layer, composed into [`ProcessError`]. Each S3 error names the bucket and key;
//! each error knows whether a retry can help ([`ProcessError::is_retryable`]).

use crate::convert::ConvertError;
use crate::protocol::ClaimLost;

/// Whether a failed call may succeed when tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Throttling, 5xx, timeouts, dropped connections.
    Transient,
    /// Anything else: access denied, bad request, missing bucket.
    Permanent,
}

/// An object-store call failed (expected conflicts are outcomes, not errors).
#[derive(Debug, thiserror::Error)]
#[error("{op} s3://{bucket}/{key}: {message}")]
pub struct StoreError {
    /// The operation (`GetObject`, `PutObject`, …).
    pub op: &'static str,
    /// Bucket.
    pub bucket: String,
    /// Key (or prefix, for a listing).
    pub key: String,
    /// What the service or the transport said.
    pub message: String,
    /// Whether to retry.
    pub retry: Retry,
}

/// A queue call failed.
#[derive(Debug, thiserror::Error)]
#[error("{op} {queue}: {message}")]
pub struct QueueError {
    /// The operation (`SendMessageBatch`, …).
    pub op: &'static str,
    /// The queue (URL, or the local queue's file and name).
    pub queue: String,
    /// What the service or the transport said.
    pub message: String,
    /// Whether to retry.
    pub retry: Retry,
}

/// A ledger call failed (lost races are outcomes, not errors).
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The service or the transport failed.
    #[error("ledger {op} ({source_id}/{key}): {message}")]
    Service {
        /// The operation (`PutItem`, …).
        op: &'static str,
        /// Source of the record.
        source_id: String,
        /// Key of the record.
        key: String,
        /// What the service said.
        message: String,
        /// Whether to retry.
        retry: Retry,
    },
    /// A stored record could not be read back.
    #[error("ledger record {source_id}/{key} is unreadable: {message}")]
    Corrupt {
        /// Source of the record.
        source_id: String,
        /// Key of the record.
        key: String,
        /// What was wrong.
        message: String,
    },
}

/// Processing one object event failed.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The object's bytes could not be converted (bad input): names the object and where.
    #[error("s3://{bucket}/{key}: {source}")]
    Convert {
        /// Bucket of the source object.
        bucket: String,
        /// Key of the source object.
        key: String,
        /// What was wrong, and where (line, column).
        source: ConvertError,
    },
    /// The object is larger than the source allows.
    #[error(
        "s3://{bucket}/{key}: object is {size} bytes, more than the source's max_object_bytes {limit}"
    )]
    TooLarge {
        /// Bucket of the source object.
        bucket: String,
        /// Key of the source object.
        key: String,
        /// Its size.
        size: u64,
        /// The configured limit.
        limit: u64,
    },
    /// An object-store call failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A ledger call failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// A queue call failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// Another worker took the claim over (our lease expired); our work is discarded.
    #[error("s3://{bucket}/{key}: {source}")]
    ClaimLost {
        /// Bucket of the source object.
        bucket: String,
        /// Key of the source object.
        key: String,
        /// The lost claim.
        source: ClaimLost,
    },
    /// The output key holds the output of a newer version than ours.
    #[error(
        "s3://{bucket}/{key}: output was written from a newer source version; this attempt is stale"
    )]
    StaleOutput {
        /// Output bucket.
        bucket: String,
        /// Output key.
        key: String,
    },
    /// A conditional write kept losing races with other writers.
    #[error(
        "s3://{bucket}/{key}: output kept changing under us ({attempts} conditional writes lost)"
    )]
    OutputContended {
        /// Output bucket.
        bucket: String,
        /// Output key.
        key: String,
        /// Conditional writes tried.
        attempts: u32,
    },
    /// A worker stopped at a protocol step (fault injection: the process "died" there).
    #[error("worker stopped at {0}")]
    Crashed(&'static str),
    /// A background task failed (a panic in the converter thread, or a cancelled task).
    #[error("internal: {0}")]
    Internal(String),
    /// Another worker held the source's bookmark lock for as long as this one could wait:
    /// transient, the event is redelivered.
    #[error(
        "source {source_id}: another object of the source holds the bookmark lock until {until_ms}; retry later"
    )]
    SourceBusy {
        /// The source.
        source_id: String,
        /// The holder's lease expiry, ms since the epoch.
        until_ms: i64,
    },
    /// The source's configuration does not allow this operation.
    #[error("source {source_id}: {message}")]
    Unsupported {
        /// The source.
        source_id: String,
        /// Why.
        message: String,
    },
    /// An S3 Inventory report cannot be read as the planner needs it.
    #[error("inventory {location}: {message}")]
    Inventory {
        /// The manifest or data file.
        location: String,
        /// What is wrong.
        message: String,
    },
    /// The source's bookmark state cannot be read (its index object is missing or changed).
    #[error("source {source_id}: bookmark state: {message}")]
    Bookmark {
        /// The source.
        source_id: String,
        /// What is wrong.
        message: String,
    },
}

impl ProcessError {
    /// May the same work succeed if tried again? Bad input never does; a lost claim is
    /// another worker's business; everything transient does.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProcessError::Convert { .. } | ProcessError::TooLarge { .. } => false,
            ProcessError::Store(e) => e.retry == Retry::Transient,
            ProcessError::Ledger(LedgerError::Service { retry, .. }) => *retry == Retry::Transient,
            ProcessError::Ledger(LedgerError::Corrupt { .. }) => false,
            ProcessError::Queue(e) => e.retry == Retry::Transient,
            ProcessError::ClaimLost { .. } | ProcessError::StaleOutput { .. } => false,
            ProcessError::OutputContended { .. }
            | ProcessError::Crashed(_)
            | ProcessError::Internal(_)
            | ProcessError::SourceBusy { .. } => true,
            ProcessError::Unsupported { .. }
            | ProcessError::Bookmark { .. }
            | ProcessError::Inventory { .. } => false,
        }
    }
}

impl ProcessError {
    /// Did a service or the network fail, rather than the object or our own code? Such a
    /// failure is recorded on the ledger record but does not count towards quarantine.
    pub fn is_transient(&self) -> bool {
        match self {
            ProcessError::Store(e) => e.retry == Retry::Transient,
            ProcessError::Ledger(LedgerError::Service { retry, .. }) => *retry == Retry::Transient,
            ProcessError::Queue(e) => e.retry == Retry::Transient,
            ProcessError::OutputContended { .. } | ProcessError::SourceBusy { .. } => true,
            _ => false,
        }
    }
}

/// Result of the core, with [`ProcessError`] as the default error.
pub type Result<T, E = ProcessError> = std::result::Result<T, E>;
