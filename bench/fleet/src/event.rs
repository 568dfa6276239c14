//! The SQS side of the event source mapping: the Lambda event built from received
//! messages, exactly as AWS delivers it, and the reading of the function's partial batch
//! response (`ReportBatchItemFailures`).

use std::collections::{BTreeMap, HashSet};

use serde_json::{Value, json};

/// One received SQS message, as much of it as the Lambda event carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsMessage {
    /// The SQS message id (the partial batch response's `itemIdentifier`).
    pub message_id: String,
    /// The receipt handle of this receive, needed to delete it.
    pub receipt_handle: String,
    /// The message body.
    pub body: String,
    /// MD5 of the body, as SQS computed it.
    pub md5_of_body: String,
    /// The system attributes SQS returned (`ApproximateReceiveCount`, `SentTimestamp`, ...).
    pub attributes: BTreeMap<String, String>,
}

/// The Lambda event for a batch of messages: `{"Records": [...]}` with the field names of
/// AWS's SQS event (`aws_lambda_events::sqs::SqsEvent`). Message attributes are not
/// forwarded: `messageAttributes` is always `{}`.
pub fn sqs_event(messages: &[SqsMessage], queue_arn: &str, region: &str) -> Value {
    let records: Vec<Value> = messages
        .iter()
        .map(|m| {
            json!({
                "messageId": m.message_id,
                "receiptHandle": m.receipt_handle,
                "body": m.body,
                "attributes": m.attributes,
                "messageAttributes": {},
                "md5OfBody": m.md5_of_body,
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            })
        })
        .collect();
    json!({ "Records": records })
}

/// The message ids a successful invocation reports as failed, following AWS's rules for
/// `ReportBatchItemFailures`: an empty body, `null`, `{}` or an empty or null
/// `batchItemFailures` list mean the whole batch succeeded; a response that is not JSON,
/// or a failure whose `itemIdentifier` is missing, empty, not a string or not a message of
/// the batch, fails the whole batch (`Err` with the reason).
pub fn batch_item_failures(body: &[u8], batch: &[&str]) -> Result<HashSet<String>, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(HashSet::new());
    }
    let response: Value =
        serde_json::from_slice(body).map_err(|e| format!("response is not JSON: {e}"))?;
    let failures = match response.get("batchItemFailures") {
        None | Some(Value::Null) => return Ok(HashSet::new()),
        Some(Value::Array(items)) => items,
        Some(other) => return Err(format!("batchItemFailures is not a list: {other}")),
    };
    failures
        .iter()
        .map(|item| match item.get("itemIdentifier") {
            Some(Value::String(id)) if batch.contains(&id.as_str()) => Ok(id.clone()),
            _ => Err(format!("invalid batch item failure: {item}")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(id: &str, body: &str) -> SqsMessage {
        SqsMessage {
            message_id: id.into(),
            receipt_handle: format!("handle-{id}"),
            body: body.into(),
            md5_of_body: "098f6bcd4621d373cade4e832627b4f6".into(),
            attributes: BTreeMap::from([
                ("ApproximateReceiveCount".into(), "1".into()),
                ("SentTimestamp".into(), "1545082649183".into()),
                ("SenderId".into(), "AIDAIENQZJOLO23YVJ4VO".into()),
                (
                    "ApproximateFirstReceiveTimestamp".into(),
                    "1545082649185".into(),
                ),
            ]),
        }
    }

    #[test]
    fn the_event_has_the_shape_aws_delivers() {
        let arn = "arn:aws:sqs:us-east-2:123456789012:my-queue";
        let event = sqs_event(&[message("m-1", "test")], arn, "us-east-2");
        // AWS's documented example of an SQS event for Lambda, field for field.
        let expected = json!({"Records": [{
            "messageId": "m-1",
            "receiptHandle": "handle-m-1",
            "body": "test",
            "attributes": {
                "ApproximateReceiveCount": "1",
                "SentTimestamp": "1545082649183",
                "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                "ApproximateFirstReceiveTimestamp": "1545082649185"
            },
            "messageAttributes": {},
            "md5OfBody": "098f6bcd4621d373cade4e832627b4f6",
            "eventSource": "aws:sqs",
            "eventSourceARN": arn,
            "awsRegion": "us-east-2"
        }]});
        assert_eq!(event, expected);
    }

    #[test]
    fn records_keep_the_order_of_the_batch() {
        let batch = [message("a", "1"), message("b", "2"), message("c", "3")];
        let event = sqs_event(&batch, "arn", "us-east-1");
        let ids: Vec<&str> = event["Records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["messageId"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["a", "b", "c"]);
    }

    #[test]
    fn empty_answers_mean_the_whole_batch_succeeded() {
        for body in [
            "",
            "null",
            "{}",
            r#"{"batchItemFailures": []}"#,
            r#"{"batchItemFailures": null}"#,
            r#"{"processed": 3}"#,
        ] {
            assert_eq!(
                batch_item_failures(body.as_bytes(), &["a"]),
                Ok(HashSet::new()),
                "{body}"
            );
        }
    }

    #[test]
    fn listed_messages_fail_and_the_others_succeed() {
        let body = br#"{"batchItemFailures": [{"itemIdentifier": "b"}]}"#;
        assert_eq!(
            batch_item_failures(body, &["a", "b", "c"]),
            Ok(HashSet::from(["b".to_string()]))
        );
    }

    #[test]
    fn a_malformed_answer_fails_the_whole_batch() {
        for body in [
            "not json",
            r#"{"batchItemFailures": [{"itemIdentifier": "zzz"}]}"#,
            r#"{"batchItemFailures": [{"itemIdentifier": ""}]}"#,
            r#"{"batchItemFailures": [{"itemIdentifier": null}]}"#,
            r#"{"batchItemFailures": [{"id": "a"}]}"#,
            r#"{"batchItemFailures": "a"}"#,
        ] {
            assert!(
                batch_item_failures(body.as_bytes(), &["a"]).is_err(),
                "{body}"
            );
        }
    }
}
