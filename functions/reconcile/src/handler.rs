//! One invocation: reconcile (or check parts of a split window taken from the reconcile
//! queue), print the metric lines, answer with a summary (or a partial batch response).

use lambda_runtime::{Diagnostic, LambdaEvent};
use serde_json::{Value, json};
use tidemark::config::Config;
use tidemark::ports::WorkQueue;
use tidemark::process::{Pipeline, RunContext};
use tidemark::reconcile::{self, InvocationError, parts};

/// Stop taking new objects this long before the deadline, ms.
const SAFETY_MS: i64 = 30_000;

/// The invocation failed as a whole.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub(crate) struct HandlerError(#[from] InvocationError);

impl From<HandlerError> for Diagnostic {
    fn from(e: HandlerError) -> Self {
        let error_type = match &e.0 {
            InvocationError::Process(p) if p.is_retryable() => "Retryable",
            _ => "Permanent",
        };
        Diagnostic {
            error_type: error_type.into(),
            error_message: e.to_string(),
        }
    }
}

/// What the function runs on.
pub(crate) struct Deps {
    pub pipeline: Pipeline,
    pub config: std::sync::Arc<Config>,
    /// The reconcile queue (`TIDEMARK_RECONCILE_QUEUE_URL`): large windows are split into
    /// parts sent to it, and this function's event source mapping brings them back. `None`:
    /// every window is checked whole.
    pub queue: Option<std::sync::Arc<dyn WorkQueue>>,
}

pub(crate) async fn function_handler(
    deps: &Deps,
    event: LambdaEvent<Value>,
) -> Result<Value, HandlerError> {
    let (pipeline, config) = (&deps.pipeline, &*deps.config);
    let deadline_ms = i64::try_from(event.context.deadline).unwrap_or(i64::MAX / 2);
    let ctx = RunContext::new(event.context.request_id.clone(), deadline_ms);
    if parts::is_sqs(&event.payload) {
        let response = parts::handle_parts(
            pipeline,
            config,
            &event.payload,
            &ctx,
            deadline_ms - SAFETY_MS,
        )
        .await?;
        for (report, _) in &response.merged {
            for line in report.metric_lines() {
                println!("{line}");
            }
        }
        return Ok(response.to_json());
    }
    let (report, keys) = reconcile::handle_with(
        pipeline,
        config,
        &event.payload,
        &ctx,
        deadline_ms - SAFETY_MS,
        deps.queue.as_deref(),
    )
    .await?;
    for line in report.metric_lines() {
        // Embedded metric format: CloudWatch turns these log lines into metrics.
        println!("{line}");
    }
    Ok(json!({
        "clean": report.clean(),
        "reports": keys,
        "sources": report.sources.iter().map(|s| json!({
            "source_id": s.source_id,
            "window": s.window,
            "objects": s.objects,
            "checked": s.checked,
            "findings": s.finding_count(),
            "mismatches": s.mismatch_count(),
            "complete": s.complete,
            "split": s.fan_out,
            "error": s.error,
        })).collect::<Vec<_>>(),
    }))
}

#[cfg(test)]
mod tests {
    use lambda_runtime::Context;
    use serde_json::json;
    use tidemark::testing::{embedded_pipeline, land};

    use super::*;

    fn ctx() -> Context {
        use tidemark::ports::Clock;
        let mut c = Context::default();
        c.deadline = (tidemark::ports::SystemClock.now_ms() + 120_000) as u64;
        c
    }

    #[tokio::test]
    async fn a_manual_window_finds_and_repairs_an_object_that_had_no_event() {
        let dir = tempfile::tempdir().unwrap();
        let p = embedded_pipeline(dir.path()).await;
        let config = p.config.clone();
        land(&p, "in/lost.csv", "id,amount\n1,1.00\n2,2.00\n", "01").await;
        let d = Deps {
            pipeline: p.clone(),
            config,
            queue: None,
        };
        let payload = json!({"from": "2000-01-01T00:00:00Z", "to": "2100-01-01T00:00:00Z"});
        let first = function_handler(&d, LambdaEvent::new(payload.clone(), ctx()))
            .await
            .unwrap();
        assert_eq!(first["clean"], false);
        assert_eq!(first["sources"][0]["findings"], 1);
        assert_eq!(first["reports"].as_array().unwrap().len(), 2, "json + html");
        let second = function_handler(&d, LambdaEvent::new(payload, ctx()))
            .await
            .unwrap();
        assert_eq!(second["clean"], true, "{second}");

        // Out of time before the first object: incomplete, never reported clean.
        let late = function_handler(
            &d,
            LambdaEvent::new(
                json!({"from": "2000-01-01T00:00:00Z", "to": "2100-01-01T00:00:00Z"}),
                Context::default(),
            ),
        )
        .await
        .unwrap();
        assert_eq!(
            (
                late["clean"].clone(),
                late["sources"][0]["complete"].clone()
            ),
            (json!(false), json!(false))
        );

        let err = function_handler(
            &d,
            LambdaEvent::new(
                json!({"from": "x", "to": "y", "extra": 1}),
                Context::default(),
            ),
        )
        .await
        .unwrap_err();
        assert_eq!(Diagnostic::from(err).error_type, "Permanent");

        // A part that is no part comes back (and, after its receives, goes to the DLQ).
        let sqs = json!({"Records": [{"messageId": "m1", "receiptHandle": "h", "body": "{}",
                                      "eventSource": "aws:sqs"}]});
        let answer = function_handler(&d, LambdaEvent::new(sqs, ctx()))
            .await
            .unwrap();
        assert_eq!(
            answer["batchItemFailures"],
            json!([{"itemIdentifier": "m1"}])
        );
    }
}
