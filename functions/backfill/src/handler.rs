//! One invocation: one bounded call of the planner (list, leave out what is done, enqueue the
//! rest for the ingest fleet), then, when more remains, the next call by asynchronous
//! self-invocation with the job's id.

use std::sync::Arc;

use lambda_runtime::{Diagnostic, LambdaEvent};
use serde_json::Value;
use tidemark::backfill::{self, Request, RequestError, Response};
use tidemark::ports::WorkQueue;
use tidemark::process::Pipeline;
use tidemark::work::Packing;

/// Stop taking new pages this long before the deadline, ms.
const SAFETY_MS: i64 = 30_000;

/// How the next call is started.
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
    pub queue: Arc<dyn WorkQueue>,
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
    /// The next call could not be started; invoking `{"job": …}` resumes the job.
    #[error(
        "could not invoke the next call of job {job} (invoke {{\"job\": \"{job}\"}} to resume it): {message}"
    )]
    Chain { job: String, message: String },
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
    let resp = backfill::plan(
        &deps.pipeline,
        &*deps.queue,
        &req,
        deadline_ms - SAFETY_MS,
        Packing::default(),
    )
    .await?;
    tracing::info!(job = ?resp.job, source = %resp.source, listed = resp.listed, enqueued = resp.enqueued, messages = resp.messages, done = resp.done, stopped = ?resp.stopped, continuation = ?resp.continuation, "backfill planner call done");
    if let (false, Chain::SelfInvoke { client, function }, Some(job)) =
        (resp.done, &deps.chain, &resp.job)
    {
        if resp.listed == 0 && resp.messages == 0 {
            // Not even one page before the deadline: chaining would loop forever.
            return Err(HandlerError::Chain {
                job: job.clone(),
                message: "no progress before the deadline; raise the function timeout".into(),
            });
        }
        let next = Request {
            job: Some(job.clone()),
            ..Request::default()
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
                job: job.clone(),
                message: aws_sdk_lambda::error::DisplayErrorContext(&e).to_string(),
            })?;
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use lambda_runtime::Context;
    use serde_json::json;
    use tidemark::local::LocalQueue;
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
        let queue = LocalQueue::open(dir.join("queue.db"), "backfill").unwrap();
        Deps {
            pipeline,
            queue: Arc::new(queue),
            chain: Chain::Off,
        }
    }

    #[tokio::test]
    async fn calls_resume_the_job_and_unknown_fields_are_refused() {
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
            (first.enqueued, first.done, first.continuation.as_deref()),
            (3, false, Some("in/2.csv"))
        );
        let job = first.job.clone().unwrap();
        let rest = function_handler(&d, LambdaEvent::new(json!({"job": job}), ctx()))
            .await
            .unwrap();
        assert_eq!((rest.enqueued, rest.done), (2, true));
        let (record, _) = d.pipeline.ledger.get_job(&job).await.unwrap().unwrap();
        assert_eq!((record.plan.enqueued, record.plan.slices), (5, 2));
        assert_eq!(
            d.queue.depth().await.unwrap().visible,
            2,
            "one message per call"
        );

        // A call with no time left lists nothing and says it is not done.
        let late = function_handler(
            &d,
            LambdaEvent::new(json!({"source": "orders"}), Context::default()),
        )
        .await
        .unwrap();
        assert_eq!(
            (late.listed, late.done, late.stopped.as_deref()),
            (0, false, Some("deadline"))
        );

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
