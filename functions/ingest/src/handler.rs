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
    let ctx = RunContext::new(
        event.context.request_id.clone(),
        i64::try_from(event.context.deadline).unwrap_or(i64::MAX / 2),
    );
    let response = ingest::handle(pipeline, &event.payload, &ctx, concurrency).await?;
    tracing::info!(summary = ?response.summary, retry_messages = response.retry_messages.len(), "invocation done");
    if response.must_fail() {
        return Err(HandlerError::Objects(response.errors));
    }
    Ok(response.to_json())
}

#[cfg(test)]
mod tests {
    //! The handler on the embedded backends, from JSON events shaped as AWS sends them.
    use lambda_runtime::{Context, LambdaEvent};
    use serde_json::json;
    use tidemark::testing::{embedded_pipeline as pipeline, land};

    use super::*;

    fn event(payload: Value) -> LambdaEvent<Value> {
        LambdaEvent::new(payload, Context::default())
    }

    #[tokio::test]
    async fn a_direct_notification_is_processed_once_and_a_bad_object_fails_the_invocation() {
        let dir = tempfile::tempdir().unwrap();
        let p = pipeline(dir.path()).await;
        let good = land(&p, "in/a b.csv", "id,amount\n1,1.50\n2,2.25\n", "01").await;
        let payload = json!({"Records": [good]});

        let answer = function_handler(&p, 2, event(payload.clone()))
            .await
            .unwrap();
        assert_eq!(
            (answer["processed"].clone(), answer["rows"].clone()),
            (json!(1), json!(2))
        );
        let again = function_handler(&p, 2, event(payload)).await.unwrap();
        assert_eq!(again["duplicates"], 1);

        let bad = land(&p, "in/bad.csv", "id,amount\nx,1.00\n", "02").await;
        let err = function_handler(&p, 2, event(json!({"Records": [bad]})))
            .await
            .unwrap_err();
        let diagnostic = Diagnostic::from(err);
        assert_eq!(diagnostic.error_type, "Retryable");
        assert!(
            diagnostic
                .error_message
                .contains("s3://landing/in/bad.csv: line 2"),
            "{}",
            diagnostic.error_message
        );
    }

    #[tokio::test]
    async fn an_sqs_batch_reports_only_the_failed_message() {
        let dir = tempfile::tempdir().unwrap();
        let p = pipeline(dir.path()).await;
        let good = land(&p, "in/good.csv", "id,amount\n1,1.00\n", "01").await;
        let bad = land(&p, "in/bad.csv", "id,amount\n1,1.00,extra\n", "02").await;
        let message = |id: &str, record: Value| {
            json!({"messageId": id, "receiptHandle": "h", "eventSource": "aws:sqs",
                   "body": json!({"Records": [record]}).to_string()})
        };
        let payload = json!({"Records": [message("m-good", good), message("m-bad", bad)]});
        let answer = function_handler(&p, 2, event(payload)).await.unwrap();
        assert_eq!(
            answer,
            json!({"batchItemFailures": [{"itemIdentifier": "m-bad"}]})
        );
    }

    #[tokio::test]
    async fn a_payload_of_no_known_shape_is_a_permanent_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = pipeline(dir.path()).await;
        let err = function_handler(&p, 2, event(json!({"hello": "world"})))
            .await
            .unwrap_err();
        assert_eq!(Diagnostic::from(err).error_type, "Permanent");
    }
}
