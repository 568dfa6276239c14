//! The publish Lambda: the table committer, and (as a second function of the same code) the
//! tables' maintenance.
//!
//! - A batch of the ledger table's DynamoDB stream (changed keys, see `tidemark_delta::stream`):
//!   publish those keys; failed sources are reported as batch item failures.
//! - Any other payload (`{}` from the daily schedule, or `{"source": "<id>"}`): sweep each
//!   table source (or the one named): compare every record with its table and publish the
//!   difference. Every source is tried; the invocation fails after if one failed. Each
//!   publish prints a metric line (`TableFilesAdded`, `TableFilesRemoved`, `TableVersion`;
//!   for a sweep `TableDrift`: what the change feed had not published).
//! - `{"maintain": {...}}` (only where `TIDEMARK_MAINTENANCE=1`, the function deployed with a
//!   reserved concurrency of one: maintenance is single-writer): compact closed partitions,
//!   then checkpoint, clean the log and VACUUM. Fields, all optional: `source`, `compact`
//!   (default true), `compact_after` ("1d"), `file_retention` ("7d", "0" = no VACUUM),
//!   `log_retention` ("30d"), `dry_run` (false). A run over every source (no `source`, not a
//!   dry run) also syncs the Glue tables (`TIDEMARK_GLUE_DATABASE`), so a table deleted or
//!   edited by hand is written again within a day.
//! - A CloudFormation custom resource request (the deploy's catalog step, maintenance
//!   function only): sync the Glue tables and answer through its pre-signed URL.

use std::sync::Arc;

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;
use tidemark_delta::{Publisher, TableStore};

mod handler;

/// Set to `1` on the maintenance function only.
const ENV_MAINTENANCE: &str = "TIDEMARK_MAINTENANCE";

#[tokio::main]
async fn main() -> Result<(), Error> {
    tidemark::telemetry::init("info");
    let config = Arc::new(tidemark::config::Config::from_env()?);
    let pipeline = tidemark::aws::pipeline_from_env(config.clone()).await?;
    let publisher = Publisher::new(
        config,
        pipeline.ledger.clone(),
        pipeline.store.clone(),
        TableStore::s3_from_env(),
        Arc::new(tidemark::ports::SystemClock),
    );
    let maintenance = std::env::var(ENV_MAINTENANCE).is_ok_and(|v| v == "1");
    let publisher = &publisher;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        handler::handle(publisher, maintenance, event.payload).await
    }))
    .await
}
