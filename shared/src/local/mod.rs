//! The embedded backends, for the zero-setup path (`tidemark run` on a laptop) and tests:
//! [`FolderStore`], local folders as buckets, and [`SqliteLedger`], the ledger in one SQLite
//! file. They implement the same ports with the same semantics as the AWS adapters; the
//! conformance suite (`tests/tests/conformance.rs`) runs on both pairs.

pub mod folder;
pub mod sqlite;

pub use folder::FolderStore;
pub use sqlite::SqliteLedger;
