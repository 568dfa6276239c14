//! The reconcile Lambda: on its schedule, closes each source's windows and repairs what was
//! missed; on a manual invoke `{source?, from, to, repair?, deep?, sample?}`, re-checks a
//! window. A window larger than `reconcile.part_objects` is split into parts sent to the
//! reconcile queue (`TIDEMARK_RECONCILE_QUEUE_URL`), which brings them back to this function
//! as SQS batches, checked in parallel and merged into one report. Reports go to the
//! configured reports location; metric lines go to CloudWatch through the logs.

use std::sync::Arc;

use lambda_runtime::layers::TracingLayer;
use lambda_runtime::{Error, Runtime, service_fn};
use tidemark::watchdog::lambda::ExitWhenAbandoned;

mod handler;

#[tokio::main]
async fn main() -> Result<(), Error> {
    tidemark::telemetry::init("info");
    let config = Arc::new(tidemark::config::Config::from_env()?);
    let pipeline = tidemark::aws::pipeline_from_env(config.clone()).await?;
    // Optional: without a reconcile queue every window is checked whole.
    let queue: Option<Arc<dyn tidemark::ports::WorkQueue>> =
        match std::env::var_os(tidemark::aws::ENV_RECONCILE_QUEUE) {
            Some(_) => Some(Arc::new(
                tidemark::aws::queue_from_env(tidemark::aws::ENV_RECONCILE_QUEUE).await?,
            )),
            None => None,
        };
    let deps = handler::Deps {
        pipeline,
        config,
        queue,
    };
    let deps = &deps;
    // A conversion abandoned by the watchdog leaves a thread behind: the process exits once
    // the invocation is answered (tidemark::watchdog).
    Runtime::new(service_fn(move |event| async move {
        handler::function_handler(deps, event).await
    }))
    .layer(TracingLayer::new())
    .layer(ExitWhenAbandoned)
    .run()
    .await
}
