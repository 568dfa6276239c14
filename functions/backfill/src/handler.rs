//! One invocation: one bounded slice of the backfill, then the next slice by asynchronous
//! self-invocation.

use std::sync::Arc;

use lambda_runtime::{Diagnostic, LambdaEvent};
use serde_json::Value;
use tidemark::backfill::{self, Request, RequestError, Response};
use tidemark::config::Config;
use tidemark::process::{Pipeline, RunContext};

/// Stop taking new objects this long before the deadline, ms.
const SAFETY_MS: i64 = 30_000;

/// How the next slice is started.
pub(crate) enum Chain {
    /// Invoke this function again, asynchronously (`InvocationType=Event`).
    SelfInvoke {
        client: aws_sdk_lambda::Client,
        function: String,
    },
    /// Return the continuation to the caller only (`TIDEMARK_BACKFILL_CHAIN=off`).
    Off,
}

/// Self-invocation unless `TIDEMARK_BACKFILL_CHAIN=off`; the function's own name comes from
/// the Lambda environment (`AWS_LAMBDA_FUNCTION_NAME`).
pub(crate) fn chain_from_env(client: aws_sdk_lambda::Client) -> Chain {
    match (
        std::env::var("TIDEMARK_BACKFILL_CHAIN").as_deref(),
        std::env::var("AWS_LAMBDA_FUNCTION_NAME"),
    ) {
        (Ok("off"), _) | (_, Err(_)) => Chain::Off,
        (_, Ok(function)) => Chain::SelfInvoke { client, function },
    }
}

pub(crate) struct Deps {
    pub pipeline: Pipeline,
    pub config: Arc<Config>,
    pub chain: Chain,
}

/// The invocation failed as a whole.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HandlerError {
    /// Not a backfill request (unknown fields are refused, not ignored).
    #[error("not a backfill request: {0}")]
    Payload(String),
    /// The request cannot be served.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The next slice could not be started; the response's continuation resumes it.
    #[error(
        "could not invoke the next slice (resume with continuation {continuation:?}): {message}"
    )]
    Chain {
        continuation: String,
        message: String,
    },
}

impl From<HandlerError> for Diagnostic {
    fn from(e: HandlerError) -> Self {
        let error_type = match &e {
            HandlerError::Request(RequestError::Process(p)) if p.is_retryable() => "Retryable",
            HandlerError::Chain { .. } => "Retryable",
            _ => "Permanent",
        };
        Diagnostic {
            error_type: error_type.into(),
            error_message: e.to_string(),
        }
    }
}

pub(crate) async fn function_handler(
    deps: &Deps,
    event: LambdaEvent<Value>,
) -> Result<Response, HandlerError> {
    let req: Request =
        serde_json::from_value(event.payload).map_err(|e| HandlerError::Payload(e.to_string()))?;
    let deadline_ms = i64::try_from(event.context.deadline).unwrap_or(i64::MAX / 2);
    let ctx = RunContext {
        run_id: event.context.request_id.clone(),
        deadline_ms,
    };
    let resp = backfill::run(
        &deps.pipeline,
        &deps.config,
        &req,
        &ctx,
        deadline_ms - SAFETY_MS,
    )
    .await?;
    tracing::info!(source = %resp.source, taken = resp.taken, processed = resp.processed, failed = resp.failed, continuation = ?resp.continuation, "backfill slice done");
    if let (Some(continuation), Chain::SelfInvoke { client, function }, false) =
        (&resp.continuation, &deps.chain, req.dry_run)
    {
        let next = Request {
            continuation: Some(continuation.clone()),
            ..req
        };
        let payload = serde_json::to_vec(&next).unwrap_or_default();
        client
            .invoke()
            .function_name(function)
            .invocation_type(aws_sdk_lambda::types::InvocationType::Event)
            .payload(aws_sdk_lambda::primitives::Blob::new(payload))
            .send()
            .await
            .map_err(|e| HandlerError::Chain {
                continuation: continuation.clone(),
                message: aws_sdk_lambda::error::DisplayErrorContext(&e).to_string(),
            })?;
    }
    Ok(resp)
}
