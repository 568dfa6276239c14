//! The reconcile Lambda: on its schedule, closes each source's windows and repairs what was
//! missed; on a manual invoke `{source?, from, to, repair?}`, re-checks a window. Reports go to
//! the configured reports location; metric lines go to CloudWatch through the logs.

use std::sync::Arc;

use lambda_runtime::{Error, run, service_fn};

mod handler;

#[tokio::main]
async fn main() -> Result<(), Error> {
    tidemark::telemetry::init("info");
    let config = Arc::new(tidemark::config::Config::from_env()?);
    let pipeline = tidemark::aws::pipeline_from_env(config.clone()).await?;
    let (pipeline, config) = (&pipeline, &config);
    run(service_fn(move |event| async move {
        handler::function_handler(pipeline, config, event).await
    }))
    .await
}
