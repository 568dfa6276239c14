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

    /// The message S3 sends once to a new SNS topic or SQS queue destination.
    fn s3_test_event() -> Value {
        json!({"Service": "Amazon S3", "Event": "s3:TestEvent", "Time": "2024-05-01T09:30:00.512Z",
               "Bucket": "landing", "RequestId": "5582815E1AEA5ADF",
               "HostId": "8cLeGAmw098X5cv4Zkwcmo8vvZa3eH3eKxsPzbB9wrR+YstdA6Knx4Ip8EXAMPLE"})
    }

    /// An invocation that did nothing and skipped one message.
    fn assert_skipped_one(answer: &Value) {
        assert_eq!(
            (&answer["skipped"], &answer["events"], &answer["processed"]),
            (&json!(1), &json!(0), &json!(0)),
            "{answer}"
        );
        assert_eq!(answer["failed"], 0);
    }

    #[tokio::test]
    async fn an_s3_test_event_through_sns_is_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let p = pipeline(dir.path()).await;
        let topic = "arn:aws:sns:us-east-1:123456789012:tidemark-objects";
        let payload = json!({"Records": [{
            "EventSource": "aws:sns",
            "EventVersion": "1.0",
            "EventSubscriptionArn": format!("{topic}:21be56ed-a058-49f5-8c98-aedd2564c486"),
            "Sns": {
                "Type": "Notification",
                "MessageId": "95df01b4-ee98-5cb9-9903-4c221d41eb5e",
                "TopicArn": topic,
                "Subject": "Amazon S3 Notification",
                "Message": s3_test_event().to_string(),
                "Timestamp": "2024-05-01T09:30:00.612Z",
                "SignatureVersion": "1",
                "Signature": "EXAMPLE",
                "SigningCertUrl": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0000.pem",
                "UnsubscribeUrl": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe",
                "MessageAttributes": {}
            }
        }]});
        let answer = function_handler(&p, 2, event(payload)).await.unwrap();
        assert_skipped_one(&answer);

        // The same message handed over on its own, outside any envelope.
        let answer = function_handler(&p, 2, event(s3_test_event()))
            .await
            .unwrap();
        assert_skipped_one(&answer);
    }

    #[tokio::test]
    async fn an_s3_test_event_through_sqs_is_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let p = pipeline(dir.path()).await;
        let payload = json!({"Records": [{
            "messageId": "2e1424d4-f796-459a-8184-9c92662be6da",
            "receiptHandle": "AQEBzWwaftRI0KuVm4tP+/7q1rGgNqicHq...",
            "body": s3_test_event().to_string(),
            "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1714555800512"},
            "messageAttributes": {},
            "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:tidemark-events",
            "awsRegion": "us-east-1"
        }]});
        let answer = function_handler(&p, 2, event(payload)).await.unwrap();
        assert_eq!(answer, json!({"batchItemFailures": []}));
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
