//! The backfill Lambda, invoked by hand with `{source, prefix?, since?, until?, max_objects?,
//! max_bytes?, dry_run?, replay?, stale_config?, continuation?, inventory?}` (or `{job}` to
//! resume one): the planner. It lists the range (or reads an S3 Inventory), leaves out what
//! the ledger has done, and sends the rest as work items to the backfill queue, which the
//! ingest function's event source mapping takes them from: the fleet does the work. It
//! invokes itself asynchronously to go on listing, so it is a chain of short calls, never one
//! long loop.

use std::sync::Arc;

use lambda_runtime::{Error, run, service_fn};

mod handler;

#[tokio::main]
async fn main() -> Result<(), Error> {
    tidemark::telemetry::init("info");
    let config = Arc::new(tidemark::config::Config::from_env()?);
    let pipeline = tidemark::aws::pipeline_from_env(config).await?;
    let queue = tidemark::aws::queue_from_env(tidemark::aws::ENV_BACKFILL_QUEUE).await?;
    let lambda = aws_sdk_lambda::Client::new(&aws_config::load_from_env().await);
    let deps = handler::Deps {
        pipeline,
        queue: Arc::new(queue),
        chain: handler::chain_from_env(lambda),
    };
    let deps = &deps;
    run(service_fn(move |event| async move {
        handler::function_handler(deps, event).await
    }))
    .await
}
