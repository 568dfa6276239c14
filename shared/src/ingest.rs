//! The ingest handler, independent of the Lambda runtime so the CLI and tests run exactly
//! what the function runs: decode the invocation (any delivery shape), hand every object
//! event to the pipeline with bounded concurrency, and answer. SQS deliveries get a partial
//! batch response naming only the messages that must come back; a direct or EventBridge
//! invocation fails as a whole when any object failed, so Lambda's retry brings it again.

use futures::StreamExt;
use serde::Serialize;
use serde_json::{Value, json};

use crate::events::{Delivery, EventError, decode_invocation};
use crate::process::{Outcome, Pipeline, RunContext};
use crate::protocol::Skip;

/// Counts of what one invocation did.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Object events decoded.
    pub events: usize,
    /// Versions converted and committed.
    pub processed: usize,
    /// Deletes committed.
    pub deleted: usize,
    /// Events for versions already committed.
    pub duplicates: usize,
    /// Events older than what the ledger holds.
    pub stale: usize,
    /// Events for a version another worker is processing.
    pub in_flight: usize,
    /// Newer versions recorded for the worker holding the claim.
    pub deferred: usize,
    /// Versions no longer current when fetched.
    pub not_current: usize,
    /// Objects quarantined (or already quarantined).
    pub quarantined: usize,
    /// Objects processed without the ledger (paused / disabled sources).
    pub untracked: usize,
    /// Events no source claims.
    pub unrouted: usize,
    /// Objects that failed and will be retried.
    pub failed: usize,
    /// Messages skipped whole (test events, other event types).
    pub skipped: usize,
    /// Rows written.
    pub rows: u64,
    /// Rows set aside as bad (`on_bad_row: reject`), in the objects' rejects files.
    pub rejected: u64,
}

impl Summary {
    fn count(&mut self, outcome: &Outcome) {
        match outcome {
            Outcome::Processed { rows, rejected, .. } => {
                self.processed += 1;
                self.rows += rows;
                self.rejected += rejected;
            }
            Outcome::Deleted { .. } => self.deleted += 1,
            Outcome::Skipped(Skip::Duplicate) => self.duplicates += 1,
            Outcome::Skipped(Skip::Stale) => self.stale += 1,
            Outcome::Skipped(Skip::InFlight) => self.in_flight += 1,
            Outcome::Skipped(Skip::Quarantined) | Outcome::Quarantined { .. } => {
                self.quarantined += 1
            }
            Outcome::Deferred => self.deferred += 1,
            Outcome::NotCurrent => self.not_current += 1,
            Outcome::Untracked { rows } => {
                self.untracked += 1;
                self.rows += rows;
            }
            Outcome::Unrouted => self.unrouted += 1,
        }
    }
}

/// What the handler answers.
#[derive(Debug)]
pub struct Response {
    /// How the invocation arrived.
    pub delivery: Delivery,
    /// What happened.
    pub summary: Summary,
    /// SQS message ids to be delivered again (partial batch response).
    pub retry_messages: Vec<String>,
    /// For non-SQS deliveries: the errors that make the invocation fail.
    pub errors: Vec<String>,
}

impl Response {
    /// The JSON the function returns: `{"batchItemFailures": […]}` for SQS, the summary
    /// otherwise.
    pub fn to_json(&self) -> Value {
        match self.delivery {
            Delivery::Sqs => json!({
                "batchItemFailures": self.retry_messages.iter()
                    .map(|id| json!({"itemIdentifier": id}))
                    .collect::<Vec<_>>()
            }),
            _ => serde_json::to_value(&self.summary).unwrap_or(Value::Null),
        }
    }

    /// True when a non-SQS invocation must fail so Lambda retries it.
    pub fn must_fail(&self) -> bool {
        self.delivery != Delivery::Sqs && !self.errors.is_empty()
    }
}

/// Handle one invocation payload. `Err` only when the payload is no known shape at all.
pub async fn handle(
    pipeline: &Pipeline,
    payload: &Value,
    ctx: &RunContext,
    concurrency: usize,
) -> Result<Response, EventError> {
    let invocation = decode_invocation(payload)?;
    let mut response = Response {
        delivery: invocation.delivery,
        summary: Summary::default(),
        retry_messages: Vec::new(),
        errors: Vec::new(),
    };
    let mut work = Vec::new();
    let mut failed_messages = vec![false; invocation.messages.len()];
    for (i, message) in invocation.messages.iter().enumerate() {
        response.summary.skipped += message.skipped.len();
        match &message.outcome {
            Ok(events) => work.extend(events.iter().map(|e| (i, e))),
            Err(e) => {
                tracing::warn!(message_id = ?message.id, error = %e, "undecodable message");
                failed_messages[i] = true;
                response.errors.push(e.to_string());
            }
        }
    }
    response.summary.events = work.len();
    // Futures made up front: a stream holding a closure would not be `Send` for all
    // lifetimes, and callers spawn this future.
    let futures: Vec<_> = work
        .into_iter()
        .map(|(i, event)| async move { (i, pipeline.handle_event(event, ctx).await) })
        .collect();
    let mut results = futures::stream::iter(futures).buffer_unordered(concurrency.max(1));
    while let Some((i, object_results)) = results.next().await {
        for r in object_results {
            match &r.outcome {
                Ok(outcome) => response.summary.count(outcome),
                Err(e) => {
                    response.summary.failed += 1;
                    failed_messages[i] = true;
                    response.errors.push(e.to_string());
                }
            }
        }
    }
    response.retry_messages = invocation
        .messages
        .iter()
        .zip(&failed_messages)
        .filter(|(_, failed)| **failed)
        .filter_map(|(m, _)| m.id.clone())
        .collect();
    Ok(response)
}
