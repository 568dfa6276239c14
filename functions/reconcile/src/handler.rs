//! One invocation: reconcile, print the metric lines, answer with a summary.

use lambda_runtime::{Diagnostic, LambdaEvent};
use serde_json::{Value, json};
use tidemark::config::Config;
use tidemark::process::{Pipeline, RunContext};
use tidemark::reconcile::{self, InvocationError};

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

pub(crate) async fn function_handler(
    pipeline: &Pipeline,
    config: &Config,
    event: LambdaEvent<Value>,
) -> Result<Value, HandlerError> {
    let deadline_ms = i64::try_from(event.context.deadline).unwrap_or(i64::MAX / 2);
    let ctx = RunContext::new(event.context.request_id.clone(), deadline_ms);
    let (report, keys) = reconcile::handle(
        pipeline,
        config,
        &event.payload,
        &ctx,
        deadline_ms - SAFETY_MS,
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
            "deep_checked": s.checked.deep,
            "findings": s.findings.len(),
            "mismatches": s.mismatches.len(),
            "complete": s.complete,
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
        let payload = json!({"from": "2000-01-01T00:00:00Z", "to": "2100-01-01T00:00:00Z"});
        let first = function_handler(&p, &config, LambdaEvent::new(payload.clone(), ctx()))
            .await
            .unwrap();
        assert_eq!(first["clean"], false);
        assert_eq!(first["sources"][0]["findings"], 1);
        assert_eq!(first["reports"].as_array().unwrap().len(), 2, "json + html");
        let second = function_handler(&p, &config, LambdaEvent::new(payload, ctx()))
            .await
            .unwrap();
        assert_eq!(second["clean"], true, "{second}");

        // Out of time before the first object: incomplete, never reported clean.
        let late = function_handler(
            &p,
            &config,
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
            &p,
            &config,
            LambdaEvent::new(
                json!({"from": "x", "to": "y", "extra": 1}),
                Context::default(),
            ),
        )
        .await
        .unwrap_err();
        assert_eq!(Diagnostic::from(err).error_type, "Permanent");
    }
}
