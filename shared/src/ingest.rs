//! The ingest handler, independent of the Lambda runtime so the CLI and tests run exactly
//! what the function runs: decode the invocation (any delivery shape), hand every object
//! event to the pipeline with bounded concurrency, and answer. SQS deliveries get a partial
//! batch response naming only the messages that must come back; a direct or EventBridge
//! invocation fails as a whole when any object failed, so Lambda's retry brings it again.
//!
//! The same function is the backfill fleet: an SQS message may carry a batch of work items
//! of a bulk job instead of S3 events ([`crate::work`]). Each item goes through the same
//! per-object path; once every item of a message has ended (processed, a duplicate, skipped
//! by the protocol, quarantined), the message's counts are added to its job, once whatever
//! the deliveries ([`crate::ports::JobStore::finish_message`]). A message with an item that
//! failed goes back to the queue and is counted when a later delivery finishes it.

use aws_lambda_events::sqs::SqsBatchResponse;
use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;

use crate::events::{Delivery, EventError, ObjectEvent, decode_invocation};
use crate::jobs::JobCounts;
use crate::process::{ObjectResult, Outcome, Pipeline, RunContext};
use crate::protocol::Skip;
use crate::work::{WorkBatch, WorkItem};

/// Counts of what one invocation did.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Object events decoded (work items not included).
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
    /// Rows written with values in the rescued column.
    pub rescued: u64,
    /// Values of fields the schema does not name, dropped (`on_unknown_field: ignore`).
    pub ignored: u64,
    /// Work items of bulk jobs handled (each also counted above by its outcome).
    pub work_items: usize,
    /// Messages of work items whose counts were added to their job now.
    pub work_messages_finished: usize,
    /// Work items not started before half the invocation's time was spent: their messages
    /// come back.
    pub work_items_left: usize,
}

impl Summary {
    fn count(&mut self, outcome: &Outcome) {
        match outcome {
            Outcome::Processed {
                rows,
                rejected,
                rescued,
                ignored,
                ..
            } => {
                self.processed += 1;
                self.rows += rows;
                self.rejected += rejected;
                self.rescued += rescued;
                self.ignored += ignored;
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
    /// The partial batch response of an SQS delivery: the messages to be delivered again.
    pub fn batch_response(&self) -> SqsBatchResponse {
        let mut response = SqsBatchResponse::default();
        response.set_failures(&self.retry_messages);
        response
    }

    /// The JSON the function returns: the [`SqsBatchResponse`] (`{"batchItemFailures": […]}`)
    /// for SQS, the summary otherwise.
    pub fn to_json(&self) -> Value {
        match self.delivery {
            Delivery::Sqs => serde_json::to_value(self.batch_response()),
            _ => serde_json::to_value(&self.summary),
        }
        .unwrap_or(Value::Null)
    }

    /// True when a non-SQS invocation must fail so Lambda retries it.
    pub fn must_fail(&self) -> bool {
        self.delivery != Delivery::Sqs && !self.errors.is_empty()
    }
}

/// One unit of work of an invocation: an object event, or a work item of a job.
enum Unit<'a> {
    Event(&'a ObjectEvent),
    Item(&'a WorkBatch, &'a WorkItem),
}

/// Add one item's outcome to its message's job counts; `false` if the item is not finished
/// (it failed, or another worker holds it): the message comes back.
fn tally(counts: &mut JobCounts, outcome: &crate::Result<Outcome>) -> bool {
    counts.items += 1;
    match outcome {
        Ok(Outcome::Processed { rows, .. } | Outcome::Untracked { rows }) => {
            counts.processed += 1;
            counts.rows += rows;
        }
        Ok(Outcome::Skipped(Skip::Duplicate)) => counts.duplicate += 1,
        // Another worker holds a live claim on this very version: perhaps a worker that
        // died with it (its lease runs out) or an earlier delivery of this message still at
        // work. The message comes back after its visibility timeout, by when the claim is
        // committed (the item counts as done) or expired (the item is claimed again).
        Ok(Outcome::Skipped(Skip::InFlight)) => {
            counts.items -= 1;
            return false;
        }
        Ok(Outcome::Skipped(Skip::Quarantined) | Outcome::Quarantined { .. }) => {
            counts.quarantined += 1
        }
        Ok(
            Outcome::Skipped(Skip::Stale)
            | Outcome::Deferred
            | Outcome::NotCurrent
            | Outcome::Deleted { .. }
            | Outcome::Unrouted,
        ) => counts.skipped += 1,
        Err(_) => {
            counts.items -= 1;
            counts.failures += 1;
            return false;
        }
    }
    true
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
    let n = invocation.messages.len();
    let mut failed_messages = vec![false; n];
    let mut job_counts = vec![JobCounts::default(); n];
    for (i, message) in invocation.messages.iter().enumerate() {
        response.summary.skipped += message.skipped.len();
        for reason in &message.skipped {
            tracing::info!(message_id = ?message.id, reason = %reason, "skipped");
        }
        if let Some(batch) = &message.work {
            response.summary.work_items += batch.items.len();
            work.extend(batch.items.iter().map(|item| (i, Unit::Item(batch, item))));
        }
        match &message.outcome {
            Ok(events) => work.extend(events.iter().map(|e| (i, Unit::Event(e)))),
            Err(e) => {
                tracing::warn!(message_id = ?message.id, error = %e, "undecodable message");
                failed_messages[i] = true;
                response.errors.push(e.to_string());
            }
        }
    }
    response.summary.events = work
        .iter()
        .filter(|(_, u)| matches!(u, Unit::Event(_)))
        .count();
    // Futures made up front: a stream holding a closure would not be `Send` for all
    // lifetimes, and callers spawn this future.
    // Work items are started only in the first half of the invocation's time (a message's
    // items number up to fifty, ten messages a batch): an item not started by then sends its
    // message back, to be finished by a later delivery, rather than the invocation timing
    // out with everything in it.
    let started = pipeline.clock.now_ms();
    let last_start = started + (ctx.deadline_ms - started) / 2;
    let futures: Vec<_> = work
        .into_iter()
        .map(|(i, unit)| async move {
            let results = match unit {
                Unit::Event(event) => Some(pipeline.handle_event(event, ctx).await),
                Unit::Item(..) if pipeline.clock.now_ms() >= last_start => None,
                Unit::Item(batch, item) => {
                    let job_ctx = RunContext::for_job(&batch.job, &ctx.run_id, ctx.deadline_ms);
                    Some(vec![pipeline.handle_item(batch, item, &job_ctx).await])
                }
            };
            (i, matches!(unit, Unit::Item(..)), results)
        })
        .collect();
    let mut results = futures::stream::iter(futures).buffer_unordered(concurrency.max(1));
    while let Some((i, is_item, object_results)) = results.next().await {
        let Some(object_results) = object_results else {
            response.summary.work_items_left += 1;
            failed_messages[i] = true;
            continue;
        };
        for ObjectResult { outcome, .. } in object_results {
            if is_item && !tally(&mut job_counts[i], &outcome) {
                failed_messages[i] = true;
            }
            match &outcome {
                Ok(outcome) => response.summary.count(outcome),
                Err(e) => {
                    response.summary.failed += 1;
                    failed_messages[i] = true;
                    response.errors.push(e.to_string());
                }
            }
        }
    }
    // Each finished message of work items adds its counts to its job, once.
    let now = pipeline.clock.now_ms();
    for (i, message) in invocation.messages.iter().enumerate() {
        let Some(batch) = &message.work else {
            continue;
        };
        let counts = &job_counts[i];
        if failed_messages[i] {
            if let Err(e) = pipeline
                .ledger
                .add_failures(&batch.job, counts.failures, now)
                .await
            {
                tracing::warn!(job = %batch.job, error = %e, "could not count the failures of a job");
            }
            continue;
        }
        match pipeline
            .ledger
            .finish_message(&batch.job, batch.message, counts, now)
            .await
        {
            Ok(first) => response.summary.work_messages_finished += usize::from(first),
            Err(e) => {
                // Counted when the message comes back (its items are duplicates by then).
                failed_messages[i] = true;
                response.errors.push(format!(
                    "job {} message {}: counting it failed: {e}",
                    batch.job, batch.message
                ));
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

/// The source ids the ledger holds records of that `p`'s document does not name (a row-level
/// bookmark's lock id counts as its source's), each logged once as a warning: state a
/// renamed source left behind, which `tidemark rename-source` moves. Called at cold start
/// (one Query on DynamoDB); a failure to read is logged, never fatal.
pub async fn warn_orphaned_sources(p: &Pipeline) -> Vec<String> {
    let ids = match p.ledger.source_ids().await {
        Ok(ids) => ids,
        Err(e) => {
            tracing::warn!(error = %e, "could not list the ledger's source ids");
            return Vec::new();
        }
    };
    let orphaned = p.config.orphaned_ids(ids);
    for base in &orphaned {
        tracing::warn!(
            source_id = %base,
            "the ledger holds records of source {base:?}, which the sources document does \
             not name: if it was renamed, `tidemark rename-source {base} NEW` moves them \
             (objects of NEW are processed again until then)"
        );
    }
    orphaned
}
