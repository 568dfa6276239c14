//! The ledger's change feed on DynamoDB: a batch of stream records (the Lambda event source
//! mapping on the ledger table's stream, `KEYS_ONLY`) becomes one publish per source of the
//! keys it names. A record says only *which* key changed; the publish reads that key's
//! current state, so duplicated, reordered or coalesced stream records change nothing.
//!
//! A failed source reports the sequence number of its first record in the batch as the
//! batch item failure: Lambda retries the batch from there (sources published before it in
//! the batch are published again, which finds nothing to do).

use std::collections::BTreeMap;

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use tracing::{error, warn};

use crate::{Published, Publisher};

/// The ledger item key of a stream record, split into source id and object key; `None` for
/// the ledger's own items (`~…`: audit, jobs, registry, locks of operators).
pub fn source_key(pk: &str) -> Option<(&str, &str)> {
    if pk.starts_with('~') {
        return None;
    }
    pk.split_once('/')
}

/// The `pk` of each record of `event`, with its sequence number, in order.
fn keys_of(event: &Event) -> Vec<(String, Option<String>)> {
    event
        .records
        .iter()
        .filter_map(|r| {
            let keys = serde_json::to_value(&r.change.keys).ok()?;
            let pk = keys.get("pk")?.get("S")?.as_str()?.to_string();
            Some((pk, r.change.sequence_number.clone()))
        })
        .collect()
}

/// Publish the keys a stream batch names, source by source. Records of sources without a
/// table, and of sources not in the document, are acknowledged (logged once per batch).
pub async fn handle(
    publisher: &Publisher,
    event: &Event,
) -> (Vec<Published>, DynamoDbEventResponse) {
    let mut by_source: BTreeMap<String, (Vec<String>, Option<String>)> = BTreeMap::new();
    for (pk, sequence) in keys_of(event) {
        let Some((source_id, key)) = source_key(&pk) else {
            continue;
        };
        let entry = by_source
            .entry(source_id.to_string())
            .or_insert_with(|| (Vec::new(), sequence.clone()));
        entry.0.push(key.to_string());
    }
    let mut published = Vec::new();
    let mut failures = Vec::new();
    for (source_id, (keys, first)) in by_source {
        if !publisher.table_sources().any(|s| s.id() == source_id) {
            warn!(
                source_id,
                keys = keys.len(),
                "changes of a source without a table: ignored"
            );
            continue;
        }
        match publisher.publish_keys(&source_id, &keys).await {
            Ok(p) => published.push(p),
            Err(e) => {
                error!(source_id, error = %e, "publish failed; the batch is retried from this source's first record");
                let mut failure = DynamoDbBatchItemFailure::default();
                failure.item_identifier = first;
                failures.push(failure);
            }
        }
    }
    let mut response = DynamoDbEventResponse::default();
    // Lambda retries from the lowest sequence number reported.
    failures.sort_by(|a, b| {
        let n = |f: &DynamoDbBatchItemFailure| {
            f.item_identifier
                .as_deref()
                .and_then(|s| s.parse::<u128>().ok())
        };
        n(a).cmp(&n(b))
    });
    response.batch_item_failures = failures.into_iter().take(1).collect();
    (published, response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_keys_split_into_source_and_object_key() {
        assert_eq!(
            source_key("orders/in/a b.csv"),
            Some(("orders", "in/a b.csv"))
        );
        assert_eq!(source_key("orders/in/x/y/z"), Some(("orders", "in/x/y/z")));
        assert_eq!(source_key("~audit/orders/1/2"), None);
        assert_eq!(source_key("~registry/orders"), None);
        assert_eq!(source_key("no-slash"), None);
    }

    #[test]
    fn a_stream_batch_gives_the_keys_in_order() {
        let event: Event = serde_json::from_value(serde_json::json!({"Records": [
            {"eventID": "1", "eventName": "MODIFY", "eventVersion": "1.1",
             "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
             "dynamodb": {"ApproximateCreationDateTime": 1700000000,
                          "Keys": {"pk": {"S": "orders/in/a.csv"}},
                          "SequenceNumber": "100", "SizeBytes": 30,
                          "StreamViewType": "KEYS_ONLY"},
             "eventSourceARN": "arn:aws:dynamodb:us-east-1:1:table/t/stream/x"},
            {"eventID": "2", "eventName": "INSERT", "eventVersion": "1.1",
             "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
             "dynamodb": {"ApproximateCreationDateTime": 1700000001,
                          "Keys": {"pk": {"S": "~audit/orders/1"}},
                          "SequenceNumber": "101", "SizeBytes": 30,
                          "StreamViewType": "KEYS_ONLY"},
             "eventSourceARN": "arn:aws:dynamodb:us-east-1:1:table/t/stream/x"}
        ]}))
        .unwrap();
        assert_eq!(
            keys_of(&event),
            [
                ("orders/in/a.csv".to_string(), Some("100".to_string())),
                ("~audit/orders/1".to_string(), Some("101".to_string())),
            ]
        );
    }
}
