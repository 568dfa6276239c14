//! One invocation: run the shared ingest handler and map its answer to Lambda's.

use lambda_runtime::{Diagnostic, LambdaEvent};
use serde_json::Value;
use tidemark::ingest;
use tidemark::process::{Pipeline, RunContext};

/// Objects of one invocation processed at once (`TIDEMARK_CONCURRENCY`, default 8).
pub(crate) fn concurrency_from_env() -> Result<usize, String> {
    match std::env::var("TIDEMARK_CONCURRENCY") {
        Err(_) => Ok(8),
        Ok(v) => {
            v.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
                format!("TIDEMARK_CONCURRENCY must be a positive integer, got {v:?}")
            })
        }
    }
}

/// Why an invocation failed as a whole.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HandlerError {
    /// The payload is no S3 event shape: retrying cannot help.
    #[error("{0}")]
    Payload(#[from] tidemark::events::EventError),
    /// Some objects failed (already recorded in the ledger); Lambda should retry.
    #[error("{} object(s) failed: {}", .0.len(), .0.join("; "))]
    Objects(Vec<String>),
}

impl From<HandlerError> for Diagnostic {
    fn from(e: HandlerError) -> Self {
        let error_type = match e {
            HandlerError::Payload(_) => "Permanent",
            HandlerError::Objects(_) => "Retryable",
        };
        Diagnostic {
            error_type: error_type.into(),
            error_message: e.to_string(),
        }
    }
}

pub(crate) async fn function_handler(
    pipeline: &Pipeline,
    concurrency: usize,
    event: LambdaEvent<Value>,
) -> Result<Value, HandlerError> {
    let ctx = RunContext {
        run_id: event.context.request_id.clone(),
        deadline_ms: i64::try_from(event.context.deadline).unwrap_or(i64::MAX / 2),
    };
    let response = ingest::handle(pipeline, &event.payload, &ctx, concurrency).await?;
    tracing::info!(summary = ?response.summary, retry_messages = response.retry_messages.len(), "invocation done");
    if response.must_fail() {
        return Err(HandlerError::Objects(response.errors));
    }
    Ok(response.to_json())
}
