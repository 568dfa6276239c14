//! The end-to-end suites, one module each (`tests/tests/<suite>.rs`), in one test binary.
//! Run one suite with a filter on its module: `cargo test -p tidemark-tests --test suite
//! hostile::`. The poison suite is its own binary (`--test poison`).

mod avro_orc_input;
mod backfill;
mod bookmark;
mod budget;
mod catalog;
mod chaos;
mod cli;
mod conformance;
mod csv_spellings;
mod delta_table;
mod drift;
mod freshness;
mod hostile;
mod infer_bucket;
mod ingest;
mod json_documents;
mod json_model;
mod json_times;
mod memory;
mod nested;
mod parquet_input;
mod partitioned;
mod plan;
mod presets;
mod reconcile;
mod reconcile_split;
mod rename;
mod schema;
mod typed_nested;
