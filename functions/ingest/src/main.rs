//! The ingest Lambda: S3 object events (direct, via SQS, SNS or EventBridge) through the
//! exactly-once ledger into Parquet. Configuration is read and validated once, at cold start.

use std::sync::Arc;

use lambda_runtime::{Error, run, service_fn};

mod handler;

#[tokio::main]
async fn main() -> Result<(), Error> {
    tidemark::telemetry::init("info");
    let config = Arc::new(tidemark::config::Config::from_env()?);
    let pipeline = tidemark::aws::pipeline_from_env(config).await?;
    tidemark::ingest::warn_orphaned_sources(&pipeline).await;
    let concurrency = handler::concurrency_from_env()?;
    let pipeline = &pipeline;
    run(service_fn(move |event| async move {
        handler::function_handler(pipeline, concurrency, event).await
    }))
    .await
}
