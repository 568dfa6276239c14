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
    let ctx = RunContext {
        run_id: event.context.request_id.clone(),
        deadline_ms,
    };
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
            "findings": s.findings.len(),
            "mismatches": s.mismatches.len(),
            "complete": s.complete,
        })).collect::<Vec<_>>(),
    }))
}
