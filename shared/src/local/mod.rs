//! The embedded backends, for the zero-setup path (`tidemark run` on a laptop) and tests:
//! [`FolderStore`], local folders as buckets, [`SqliteLedger`], the ledger in one SQLite
//! file, and [`LocalQueue`], the work queue of the bulk paths in another. They implement the same ports with the same semantics as the AWS adapters; the
//! conformance suite (`tests/tests/conformance.rs`) runs on both pairs.

pub mod folder;
pub mod queue;
pub mod sqlite;

pub use folder::FolderStore;
pub use queue::LocalQueue;
pub use sqlite::SqliteLedger;
