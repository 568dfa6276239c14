//! The ingest Lambda: S3 object events (direct, via SQS, SNS or EventBridge) through the
//! exactly-once ledger into Parquet. Configuration is read and validated once, at cold start.

use std::sync::Arc;

use lambda_runtime::layers::TracingLayer;
use lambda_runtime::{Error, Runtime, service_fn};
use tidemark::watchdog::lambda::ExitWhenAbandoned;

mod handler;

#[tokio::main]
async fn main() -> Result<(), Error> {
    tidemark::telemetry::init("info");
    let config = Arc::new(tidemark::config::Config::from_env()?);
    let pipeline = tidemark::aws::pipeline_from_env(config).await?;
    tidemark::ingest::warn_orphaned_sources(&pipeline).await;
    let concurrency = handler::concurrency_from_env()?;
    let pipeline = &pipeline;
    // A conversion abandoned by the watchdog leaves a thread behind: the process exits once
    // the invocation is answered (tidemark::watchdog).
    Runtime::new(service_fn(move |event| async move {
        handler::function_handler(pipeline, concurrency, event).await
    }))
    .layer(TracingLayer::new())
    .layer(ExitWhenAbandoned)
    .run()
    .await
}
