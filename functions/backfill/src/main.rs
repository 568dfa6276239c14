//! The backfill Lambda, invoked by hand with `{source, prefix?, since?, until?, max_objects?,
//! max_bytes?, dry_run?, replay?, continuation?}`: takes a bounded slice of the range through
//! the exactly-once path and, when more remains, invokes itself asynchronously with the
//! continuation, so a large backfill is a chain of short invocations, never one long loop.

use std::sync::Arc;

use lambda_runtime::{Error, run, service_fn};

mod handler;

#[tokio::main]
async fn main() -> Result<(), Error> {
    tidemark::telemetry::init("info");
    let config = Arc::new(tidemark::config::Config::from_env()?);
    let pipeline = tidemark::aws::pipeline_from_env(config.clone()).await?;
    let lambda = aws_sdk_lambda::Client::new(&aws_config::load_from_env().await);
    let deps = handler::Deps {
        pipeline,
        config,
        chain: handler::chain_from_env(lambda),
    };
    let deps = &deps;
    run(service_fn(move |event| async move {
        handler::function_handler(deps, event).await
    }))
    .await
}
