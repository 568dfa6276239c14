//! The CLI's integration tests, one module each (`infra/cli/tests/<name>.rs`), in one test
//! binary: each binary links the whole converter, the AWS SDKs and the Delta committer again
//! (≈200 MB in debug), so one binary instead of five saves ≈0.5 GB of disk and their links on
//! every fresh build. Run one with a filter on its module: `cargo test -p tidemark-cli --test
//! cli reference::`.

mod convert;
mod docs;
mod infer;
mod reference;
mod workspace;
