//! tidemark: process what is new in S3 exactly once.
//!
//! An object event (or a listing) names a version of an object; the ledger decides, with one
//! conditional write, whether this worker processes it; the object is converted to Parquet and
//! written under a key derived from the source key with a conditional PUT; only then is the
//! version committed. Duplicate, reordered and concurrent events, overwrites, deletes and
//! crashes at any step leave exactly one output per source object.
//!
//! Module map:
//! - [`events`]: every S3 event delivery shape → [`events::ObjectEvent`]; key decoding and
//!   sequencer ordering.
//! - [`config`]: the sources document, validated once at start-up; [`presets`]: the source
//!   blocks for AWS's own logs a source names with `"preset"`.
//! - [`model`], [`protocol`]: ledger records and the pure rules that move them.
//! - [`ports`]: `ObjectStore`, `Ledger`, `Clock`; [`aws`]: their S3 and DynamoDB adapters.
//! - [`local`]: the embedded adapters: local folders as buckets, a SQLite ledger.
//! - [`schema`], [`convert`]: CSV / JSON Lines / Parquet (plain, gzip, zstd) → Parquet, rows and sums.
//! - [`process`]: the per-object path every capability shares; [`bookmark`]: row-level
//!   bookmark keys (a per-source mark, lock and index of emitted keys).
//! - [`ingest`]: the ingest handler (the Lambda's body, also runnable in-process).
//! - [`reconcile`], [`backfill`]: find and repair what was missed; backfills and replays as
//!   a planner ([`backfill`], listing or an S3 Inventory: [`inventory`]) that sends work items
//!   ([`work`]) to a queue the ingest fleet takes them from, watched through a job record
//!   ([`jobs`]) — all through the same per-object path. [`fleet`] runs that fleet locally.
//! - [`telemetry`]: logging set-up shared by the binaries.

#[cfg(feature = "aws")]
pub mod aws;
pub mod backfill;
pub mod bookmark;
pub mod catalog;
pub mod compact;
pub mod config;
pub mod convert;
pub mod error;
pub mod events;
pub mod fleet;
pub mod infer;
pub mod ingest;
pub mod inventory;
pub mod jobs;
pub mod local;
pub mod model;
pub mod ports;
pub mod presets;
pub mod process;
pub mod protocol;
pub mod reconcile;
pub mod schema;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod upsert;
pub mod watchdog;
pub mod work;

pub use error::{ProcessError, Result};
