//! The fleet, run locally: what AWS Lambda's SQS event source mapping does for a function —
//! take messages from a queue in batches, hand each batch to the function as an SQS event,
//! and delete the messages its partial batch response did not name (a failed invocation
//! deletes none, so they come back after their visibility timeout) — as N worker tasks over
//! a [`WorkQueue`]. `tidemark backfill` runs its work items this way on the embedded backends
//! (and, with `--workers`, on an SQS queue), and the tests run the real ingest handler
//! through it; on AWS the event source mapping does the same for the deployed function.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::ports::{Clock, QueueMessage, WorkQueue};
use crate::process::RunContext;

/// A function the fleet invokes: the SQS event and the invocation's context in, the
/// function's answer (a partial batch response, for SQS) or its error out.
pub type Handler =
    Arc<dyn Fn(Value, RunContext) -> BoxFuture<'static, Result<Value, String>> + Send + Sync>;

/// How the fleet takes messages.
#[derive(Debug, Clone, Copy)]
pub struct FleetOptions {
    /// Worker tasks (Lambda's concurrent executions).
    pub workers: usize,
    /// Messages per invocation (the event source mapping's batch size, at most 10).
    pub batch_size: usize,
    /// How long a received message stays hidden (the queue's visibility timeout).
    pub visibility_ms: u64,
    /// How long a receive waits for a message (long polling).
    pub wait_ms: u64,
    /// The function timeout: each invocation's deadline is this far after its start.
    pub timeout_ms: i64,
}

impl Default for FleetOptions {
    fn default() -> Self {
        Self {
            workers: 4,
            batch_size: 10,
            visibility_ms: 30_000,
            wait_ms: 200,
            timeout_ms: 15 * 60 * 1000,
        }
    }
}

/// What the fleet did.
#[derive(Debug, Default)]
pub struct FleetStats {
    /// Invocations made.
    pub invocations: AtomicU64,
    /// Invocations that failed as a whole (no message deleted).
    pub failed_invocations: AtomicU64,
    /// Messages received (a redelivered message counts again).
    pub received: AtomicU64,
    /// Messages deleted after their invocation.
    pub deleted: AtomicU64,
    /// Messages the function named in its partial batch response (left to come back).
    pub returned: AtomicU64,
}

/// The Lambda SQS event of `messages`, as the event source mapping builds it.
pub fn sqs_event(messages: &[QueueMessage], source_arn: &str) -> Value {
    json!({"Records": messages.iter().map(|m| json!({
        "messageId": m.id,
        "receiptHandle": m.receipt,
        "body": m.body,
        "attributes": {
            "ApproximateReceiveCount": m.receive_count.to_string(),
            "SentTimestamp": m.sent_at.to_string(),
        },
        "messageAttributes": {},
        "eventSource": "aws:sqs",
        "eventSourceARN": source_arn,
        "awsRegion": "local",
    })).collect::<Vec<_>>()})
}

/// The message ids a function's answer names in `batchItemFailures` (its partial batch
/// response).
pub fn batch_item_failures(answer: &Value) -> Vec<String> {
    answer
        .get("batchItemFailures")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.get("itemIdentifier").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// A fleet: a queue, the function its messages go to, and how they are taken.
#[derive(Clone)]
pub struct Fleet {
    /// The queue.
    pub queue: Arc<dyn WorkQueue>,
    /// The function.
    pub handler: Handler,
    /// Time (invocation deadlines).
    pub clock: Arc<dyn Clock>,
    /// How messages are taken.
    pub opts: FleetOptions,
}

impl Fleet {
    /// Run `opts.workers` workers taking messages into the handler until `stop` turns true.
    /// Each worker finishes the invocation it is in before it stops.
    pub async fn run(&self, stop: watch::Receiver<bool>) -> Arc<FleetStats> {
        let stats = Arc::new(FleetStats::default());
        let workers: Vec<_> = (0..self.opts.workers.max(1))
            .map(|n| {
                let (fleet, stats, mut stop) = (self.clone(), stats.clone(), stop.clone());
                tokio::spawn(async move {
                    let opts = fleet.opts;
                    while !*stop.borrow_and_update() {
                        let messages = match fleet
                            .queue
                            .receive(opts.batch_size, opts.visibility_ms, opts.wait_ms)
                            .await
                        {
                            Ok(m) => m,
                            Err(e) => {
                                tracing::warn!(worker = n, error = %e, "receive failed");
                                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                                continue;
                            }
                        };
                        if !messages.is_empty() {
                            fleet.invoke(&stats, &messages).await;
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            let _ = w.await;
        }
        stats
    }

    /// Run the fleet until job `job_id` has nothing left to do: finished, or paused at its
    /// bounds with every message it sent finished, or stuck — the queue empty (no visible and
    /// no in-flight message) twice in a row while messages are unfinished, which means they
    /// were set aside as dead. `progress` sees the job's status at each look (every
    /// `poll_ms`). Returns the last status.
    pub async fn run_job(
        &self,
        ledger: &dyn crate::ports::Ledger,
        job_id: &str,
        poll_ms: u64,
        mut progress: impl FnMut(&crate::jobs::JobStatus),
    ) -> crate::Result<crate::jobs::JobStatus> {
        use crate::jobs::{JobState, JobStatus};
        let (stop_tx, stop_rx) = watch::channel(false);
        let fleet = self.clone();
        let running = tokio::spawn(async move { fleet.run(stop_rx).await });
        let mut empty_looks = 0;
        let status = loop {
            tokio::time::sleep(std::time::Duration::from_millis(poll_ms)).await;
            let Some((job, counts)) = ledger.get_job(job_id).await? else {
                break Err(crate::ProcessError::Unsupported {
                    source_id: String::new(),
                    message: format!("job {job_id} is gone"),
                });
            };
            let status = JobStatus::of(job, counts);
            progress(&status);
            let plan = &status.job.plan;
            let sent_done = status.counts.messages >= plan.messages && plan.pending.is_none();
            if status.state == JobState::Finished || (status.state == JobState::Paused && sent_done)
            {
                break Ok(status);
            }
            let depth = self.queue.depth().await?;
            let empty = depth.visible == 0 && depth.in_flight == 0 && plan.done;
            empty_looks = if empty { empty_looks + 1 } else { 0 };
            if empty_looks >= 2 {
                break Ok(status);
            }
        };
        let _ = stop_tx.send(true);
        let _ = running.await;
        status
    }

    /// One invocation of the handler with `messages`, then the deletes.
    async fn invoke(&self, stats: &FleetStats, messages: &[QueueMessage]) {
        let (queue, handler, clock, opts) = (&*self.queue, &self.handler, &*self.clock, self.opts);
        stats.invocations.fetch_add(1, Ordering::Relaxed);
        stats
            .received
            .fetch_add(messages.len() as u64, Ordering::Relaxed);
        let request_id = uuid::Uuid::new_v4().to_string();
        let ctx = RunContext::new(request_id, clock.now_ms() + opts.timeout_ms);
        let event = sqs_event(messages, "arn:aws:sqs:local:000000000000:tidemark-local");
        let failed = match handler(event, ctx).await {
            Ok(answer) => batch_item_failures(&answer),
            Err(e) => {
                tracing::warn!(error = %e, "invocation failed; its messages come back");
                stats.failed_invocations.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        for m in messages {
            if failed.contains(&m.id) {
                stats.returned.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            match queue.delete(&m.receipt).await {
                Ok(()) => {
                    stats.deleted.fetch_add(1, Ordering::Relaxed);
                }
                // Not deleted: it comes back, and its items are duplicates then.
                Err(e) => tracing::warn!(message = %m.id, error = %e, "delete failed"),
            }
        }
    }
}

/// The ingest handler as the fleet's function, on `pipeline`, `concurrency` objects at once.
pub fn ingest_handler(pipeline: crate::process::Pipeline, concurrency: usize) -> Handler {
    let pipeline = Arc::new(pipeline);
    Arc::new(move |event, ctx| {
        let pipeline = pipeline.clone();
        Box::pin(async move {
            let response = crate::ingest::handle(&pipeline, &event, &ctx, concurrency)
                .await
                .map_err(|e| e.to_string())?;
            if response.must_fail() {
                return Err(response.errors.join("; "));
            }
            Ok(response.to_json())
        })
    })
}

/// The reconcile function's handler of split windows' parts as the fleet's function, on
/// `pipeline` (and its configuration).
pub fn reconcile_handler(pipeline: crate::process::Pipeline) -> Handler {
    let pipeline = Arc::new(pipeline);
    Arc::new(move |event, ctx| {
        let pipeline = pipeline.clone();
        Box::pin(async move {
            let config = pipeline.config.clone();
            let stop_at = ctx.deadline_ms;
            crate::reconcile::parts::handle_parts(&pipeline, &config, &event, &ctx, stop_at)
                .await
                .map(|r| r.to_json())
                .map_err(|e| e.to_string())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_and_the_partial_batch_response() {
        let m = QueueMessage {
            id: "7".into(),
            receipt: "7:r".into(),
            body: "{}".into(),
            receive_count: 2,
            sent_at: 5,
        };
        let e = sqs_event(&[m], "arn");
        let decoded = crate::events::decode_invocation(&e).unwrap();
        assert_eq!(decoded.delivery, crate::events::Delivery::Sqs);
        assert_eq!(decoded.messages[0].id.as_deref(), Some("7"));
        assert_eq!(
            e["Records"][0]["attributes"]["ApproximateReceiveCount"],
            "2"
        );
        let answer =
            json!({"batchItemFailures": [{"itemIdentifier": "7"}, {"itemIdentifier": "9"}]});
        assert_eq!(batch_item_failures(&answer), ["7", "9"]);
        assert!(batch_item_failures(&json!({"processed": 1})).is_empty());
    }
}
