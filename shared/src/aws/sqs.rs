//! [`WorkQueue`] on Amazon SQS (or any SQS-compatible endpoint set with
//! `AWS_ENDPOINT_URL_SQS`): the queue the bulk paths hand their work items to. On AWS the
//! messages are taken by the event source mapping of the function that works them off; the
//! `receive` / `delete` half serves the local fleet and the tests.

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{
    MessageSystemAttributeName, QueueAttributeName, SendMessageBatchRequestEntry,
};

use super::failure;
use crate::error::{QueueError, Retry};
use crate::ports::{QueueDepth, QueueMessage, WorkQueue};

/// Entries per SendMessageBatch request (SQS's maximum).
pub const BATCH_ENTRIES: usize = 10;
/// Bytes of message bodies per SendMessageBatch request: SQS bills each 64 KiB of a payload
/// as one request and accepts up to 1 MiB; 256 KiB keeps a batch within the limit of every
/// SQS-compatible service we know of.
pub const BATCH_BYTES: usize = 256 * 1024;
/// Times a batch entry that failed for a reason of the service (not of the message) is sent
/// again before the send fails.
const RESENDS: u32 = 5;

/// An SQS queue behind the [`WorkQueue`] port.
#[derive(Debug, Clone)]
pub struct SqsQueue {
    client: Client,
    url: String,
}

impl SqsQueue {
    /// The queue at `url`.
    pub fn new(client: Client, url: impl Into<String>) -> Self {
        Self {
            client,
            url: url.into(),
        }
    }

    /// The queue at `url`, with a client from the shared AWS configuration.
    pub fn from_conf(conf: &aws_config::SdkConfig, url: impl Into<String>) -> Self {
        Self::new(Client::new(conf), url)
    }

    /// The queue's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn err(&self, op: &'static str, f: super::Failure) -> QueueError {
        QueueError {
            op,
            queue: self.url.clone(),
            message: f.message,
            retry: f.retry,
        }
    }

    /// Send one batch (≤ 10 entries, ≤ [`BATCH_BYTES`]); entries the service could not take
    /// are sent again, up to [`RESENDS`] times.
    async fn send_batch(&self, bodies: &[&String]) -> Result<(), QueueError> {
        let mut left: Vec<(usize, &String)> = bodies.iter().copied().enumerate().collect();
        for attempt in 0..=RESENDS {
            let entries = left
                .iter()
                .map(|(i, body)| {
                    SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(body.as_str())
                        .build()
                        .map_err(|e| QueueError {
                            op: "SendMessageBatch",
                            queue: self.url.clone(),
                            message: e.to_string(),
                            retry: Retry::Permanent,
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let o = self
                .client
                .send_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| self.err("SendMessageBatch", failure(&e)))?;
            let failed = o.failed();
            if failed.is_empty() {
                return Ok(());
            }
            if let Some(f) = failed.iter().find(|f| f.sender_fault()) {
                return Err(QueueError {
                    op: "SendMessageBatch",
                    queue: self.url.clone(),
                    message: format!("{}: {}", f.code(), f.message().unwrap_or_default()),
                    retry: Retry::Permanent,
                });
            }
            let again: std::collections::HashSet<&str> = failed.iter().map(|f| f.id()).collect();
            left.retain(|(i, _)| again.contains(i.to_string().as_str()));
            tokio::time::sleep(std::time::Duration::from_millis(50 << attempt)).await;
        }
        Err(QueueError {
            op: "SendMessageBatch",
            queue: self.url.clone(),
            message: format!(
                "{} messages not accepted after {RESENDS} resends",
                left.len()
            ),
            retry: Retry::Transient,
        })
    }
}

/// Group bodies into SendMessageBatch requests: at most [`BATCH_ENTRIES`] each, and at most
/// [`BATCH_BYTES`] of bodies (a body larger than that goes alone).
pub fn batches(bodies: &[String]) -> Vec<Vec<&String>> {
    let mut out: Vec<Vec<&String>> = Vec::new();
    let mut bytes = 0;
    for body in bodies {
        let fits = out
            .last()
            .is_some_and(|b| b.len() < BATCH_ENTRIES && bytes + body.len() <= BATCH_BYTES);
        if !fits {
            out.push(Vec::new());
            bytes = 0;
        }
        bytes += body.len();
        out.last_mut().expect("a batch was just pushed").push(body);
    }
    out
}

#[async_trait]
impl WorkQueue for SqsQueue {
    async fn send(&self, bodies: &[String]) -> Result<(), QueueError> {
        for batch in batches(bodies) {
            self.send_batch(&batch).await?;
        }
        Ok(())
    }

    async fn receive(
        &self,
        max: usize,
        visibility_ms: u64,
        wait_ms: u64,
    ) -> Result<Vec<QueueMessage>, QueueError> {
        let o = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(max.clamp(1, BATCH_ENTRIES) as i32)
            .visibility_timeout(visibility_ms.div_ceil(1000).min(43_200) as i32)
            .wait_time_seconds((wait_ms / 1000).min(20) as i32)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .send()
            .await
            .map_err(|e| self.err("ReceiveMessage", failure(&e)))?;
        Ok(o.messages()
            .iter()
            .map(|m| {
                let attribute = |name: MessageSystemAttributeName| {
                    m.attributes()
                        .and_then(|a| a.get(&name))
                        .and_then(|v| v.parse::<i64>().ok())
                        .unwrap_or(0)
                };
                QueueMessage {
                    id: m.message_id().unwrap_or_default().to_string(),
                    receipt: m.receipt_handle().unwrap_or_default().to_string(),
                    body: m.body().unwrap_or_default().to_string(),
                    receive_count: attribute(MessageSystemAttributeName::ApproximateReceiveCount)
                        as u32,
                    sent_at: attribute(MessageSystemAttributeName::SentTimestamp),
                }
            })
            .collect())
    }

    async fn delete(&self, receipt: &str) -> Result<(), QueueError> {
        self.client
            .delete_message()
            .queue_url(&self.url)
            .receipt_handle(receipt)
            .send()
            .await
            .map_err(|e| self.err("DeleteMessage", failure(&e)))?;
        Ok(())
    }

    async fn depth(&self) -> Result<QueueDepth, QueueError> {
        let o = self
            .client
            .get_queue_attributes()
            .queue_url(&self.url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .map_err(|e| self.err("GetQueueAttributes", failure(&e)))?;
        let get = |name: QueueAttributeName| {
            o.attributes()
                .and_then(|a| a.get(&name))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Ok(QueueDepth {
            visible: get(QueueAttributeName::ApproximateNumberOfMessages),
            in_flight: get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_hold_ten_entries_and_256_kib_at_most() {
        let small: Vec<String> = (0..25).map(|i| format!("m{i}")).collect();
        let sizes: Vec<usize> = batches(&small).iter().map(Vec::len).collect();
        assert_eq!(sizes, [10, 10, 5]);
        let big: Vec<String> = (0..5).map(|_| "x".repeat(100 * 1024)).collect();
        let sizes: Vec<usize> = batches(&big).iter().map(Vec::len).collect();
        assert_eq!(sizes, [2, 2, 1]);
        let huge = vec!["y".repeat(300 * 1024), "z".into()];
        let sizes: Vec<usize> = batches(&huge).iter().map(Vec::len).collect();
        assert_eq!(sizes, [1, 1]);
        assert!(batches(&[]).is_empty());
    }
}
