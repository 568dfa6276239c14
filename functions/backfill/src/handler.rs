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
    let ctx = RunContext::new(event.context.request_id.clone(), deadline_ms);
    let resp = backfill::run(
        &deps.pipeline,
        &deps.config,
        &req,
        &ctx,
        deadline_ms - SAFETY_MS,
    )
    .await?;
    tracing::info!(source = %resp.source, taken = resp.taken, processed = resp.processed, failed = resp.failed, continuation = ?resp.continuation, "backfill slice done");
    if let (false, Chain::SelfInvoke { client, function }, false) =
        (resp.done, &deps.chain, req.dry_run)
    {
        if resp.taken == 0 {
            // Not even one object fit before the deadline: chaining would loop forever.
            return Err(HandlerError::Chain {
                continuation: resp.continuation.clone().unwrap_or_default(),
                message: "no progress before the deadline; raise the function timeout".into(),
            });
        }
        let continuation = resp.continuation.clone().unwrap_or_default();
        let next = Request {
            continuation: resp.continuation.clone(),
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

#[cfg(test)]
mod tests {
    use lambda_runtime::Context;
    use serde_json::json;
    use tidemark::testing::{embedded_pipeline, land};

    use super::*;

    fn ctx() -> Context {
        let mut c = Context::default();
        c.deadline = (chrono_now() + 120_000) as u64;
        c
    }

    fn chrono_now() -> i64 {
        use tidemark::ports::Clock;
        tidemark::ports::SystemClock.now_ms()
    }

    async fn deps(dir: &std::path::Path) -> Deps {
        let pipeline = embedded_pipeline(dir).await;
        let config = pipeline.config.clone();
        Deps {
            pipeline,
            config,
            chain: Chain::Off,
        }
    }

    #[tokio::test]
    async fn slices_follow_the_continuation_and_unknown_fields_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = deps(dir.path()).await;
        for i in 0..5 {
            land(
                &d.pipeline,
                &format!("in/{i}.csv"),
                "id,amount\n1,1.00\n",
                "01",
            )
            .await;
        }
        let first = function_handler(
            &d,
            LambdaEvent::new(json!({"source": "orders", "max_objects": 3}), ctx()),
        )
        .await
        .unwrap();
        assert_eq!(
            (first.processed, first.done, first.continuation.as_deref()),
            (3, false, Some("in/2.csv"))
        );
        let rest = function_handler(
            &d,
            LambdaEvent::new(
                json!({"source": "orders", "max_objects": 3, "continuation": "in/2.csv"}),
                ctx(),
            ),
        )
        .await
        .unwrap();
        assert_eq!((rest.processed, rest.done), (2, true));

        // A slice with no time left takes nothing and says it is not done.
        land(&d.pipeline, "in/5.csv", "id,amount\n1,1.00\n", "01").await;
        let late = function_handler(
            &d,
            LambdaEvent::new(json!({"source": "orders"}), Context::default()),
        )
        .await
        .unwrap();
        assert_eq!((late.taken, late.done), (0, false));

        let err = function_handler(
            &d,
            LambdaEvent::new(json!({"source": "orders", "max_object": 3}), ctx()),
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("max_object"), "{err}");
        assert_eq!(Diagnostic::from(err).error_type, "Permanent");
    }
}
