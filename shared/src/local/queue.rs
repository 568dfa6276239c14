//! [`WorkQueue`] on a SQLite file: the embedded stand-in for SQS, so a local backfill runs
//! the same planner and the same workers as on AWS. Semantics follow SQS standard queues:
//! at-least-once delivery, a visibility timeout after each receive (a message not deleted in
//! time comes back), a receive count, and a dead-letter rule (a message received
//! `max_receives` times without being deleted is set aside as dead, as a redrive policy
//! would move it to a DLQ). Several processes may share one file.
//!
//! # Table `messages`
//! | column | type | meaning |
//! |--------|------|---------|
//! | `queue` | TEXT | the queue's name (one file holds several queues) |
//! | `id` | INTEGER | the message id, in send order |
//! | `body` | TEXT | the body |
//! | `sent_at` | INTEGER | when it was sent, ms since the epoch |
//! | `visible_at` | INTEGER | it can be received from this time on |
//! | `receives` | INTEGER | how many times it was received |
//! | `receipt` | TEXT | the handle of its latest receive (a stale handle deletes nothing) |
//! | `dead` | INTEGER | 1 once set aside as dead |

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, TransactionBehavior, params};

use crate::error::{QueueError, Retry};
use crate::ports::{Clock, QueueDepth, QueueMessage, SystemClock, WorkQueue};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS messages (
    queue      TEXT    NOT NULL,
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    body       TEXT    NOT NULL,
    sent_at    INTEGER NOT NULL,
    visible_at INTEGER NOT NULL,
    receives   INTEGER NOT NULL DEFAULT 0,
    receipt    TEXT,
    dead       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS messages_ready ON messages (queue, dead, visible_at, id);
";

/// Receives after which a message is set aside as dead (as SQS's `maxReceiveCount`).
pub const DEFAULT_MAX_RECEIVES: u32 = 10;
/// How often a waiting receive looks again.
const POLL: Duration = Duration::from_millis(25);

/// A queue in a SQLite file.
#[derive(Clone)]
pub struct LocalQueue {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
    name: String,
    max_receives: u32,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for LocalQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalQueue")
            .field("path", &self.path)
            .field("name", &self.name)
            .finish()
    }
}

fn sql_err(op: &'static str, queue: &str, e: rusqlite::Error) -> QueueError {
    use rusqlite::ErrorCode::{DatabaseBusy, DatabaseLocked};
    let retry = match e.sqlite_error_code() {
        Some(DatabaseBusy | DatabaseLocked) => Retry::Transient,
        _ => Retry::Permanent,
    };
    QueueError {
        op,
        queue: queue.to_string(),
        message: e.to_string(),
        retry,
    }
}

impl LocalQueue {
    /// Open (creating it if missing) queue `name` in the file at `path`.
    pub fn open(path: impl AsRef<Path>, name: &str) -> Result<Self, QueueError> {
        let path = path.as_ref().to_path_buf();
        let label = format!("{}#{name}", path.display());
        let err = |e| sql_err("open", &label, e);
        let conn = Connection::open(&path).map_err(err)?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(err)?;
        conn.pragma_update(None, "journal_mode", "wal")
            .map_err(err)?;
        conn.execute_batch(SCHEMA).map_err(err)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            path,
            name: name.to_string(),
            max_receives: DEFAULT_MAX_RECEIVES,
            clock: Arc::new(SystemClock),
        })
    }

    /// Set the receives after which a message is dead.
    pub fn with_max_receives(mut self, n: u32) -> Self {
        self.max_receives = n.max(1);
        self
    }

    /// The file and queue, as errors name them.
    pub fn label(&self) -> String {
        format!("{}#{}", self.path.display(), self.name)
    }

    async fn call<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, QueueError> {
        let conn = Arc::clone(&self.conn);
        let label = self.label();
        tokio::task::spawn_blocking(move || {
            f(&mut conn.lock().unwrap_or_else(PoisonError::into_inner))
        })
        .await
        .map_err(|e| QueueError {
            op,
            queue: label.clone(),
            message: format!("worker thread failed: {e}"),
            retry: Retry::Transient,
        })?
        .map_err(|e| sql_err(op, &label, e))
    }

    /// Take up to `max` ready messages now (none waiting).
    async fn take(&self, max: usize, visibility_ms: u64) -> Result<Vec<QueueMessage>, QueueError> {
        let (name, now, max_receives) = (self.name.clone(), self.clock.now_ms(), self.max_receives);
        self.call("ReceiveMessage", move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            // Messages received as often as allowed and not deleted are dead.
            tx.execute(
                "UPDATE messages SET dead = 1 WHERE queue = ?1 AND dead = 0 \
                 AND visible_at <= ?2 AND receives >= ?3",
                params![name, now, max_receives],
            )?;
            let mut taken = Vec::new();
            {
                let mut stmt = tx.prepare(
                    "SELECT id, body, sent_at, receives FROM messages \
                     WHERE queue = ?1 AND dead = 0 AND visible_at <= ?2 ORDER BY id LIMIT ?3",
                )?;
                let rows = stmt.query_map(params![name, now, max as i64], |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, i64>(2)?,
                        row.get::<_, i64>(3)?,
                    ))
                })?;
                for row in rows {
                    let (id, body, sent_at, receives) = row?;
                    taken.push(QueueMessage {
                        id: id.to_string(),
                        receipt: format!("{id}:{}", uuid::Uuid::new_v4().simple()),
                        body,
                        receive_count: receives as u32 + 1,
                        sent_at,
                    });
                }
            }
            for m in &taken {
                tx.execute(
                    "UPDATE messages SET visible_at = ?2, receives = receives + 1, receipt = ?3 \
                     WHERE id = ?1",
                    params![
                        m.id.parse::<i64>().unwrap_or(-1),
                        now + visibility_ms as i64,
                        m.receipt
                    ],
                )?;
            }
            tx.commit()?;
            Ok(taken)
        })
        .await
    }
}

#[async_trait]
impl WorkQueue for LocalQueue {
    async fn send(&self, bodies: &[String]) -> Result<(), QueueError> {
        let (name, bodies, now) = (self.name.clone(), bodies.to_vec(), self.clock.now_ms());
        self.call("SendMessageBatch", move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            for body in &bodies {
                tx.execute(
                    "INSERT INTO messages (queue, body, sent_at, visible_at) VALUES (?1, ?2, ?3, ?3)",
                    params![name, body, now],
                )?;
            }
            tx.commit()
        })
        .await
    }

    async fn receive(
        &self,
        max: usize,
        visibility_ms: u64,
        wait_ms: u64,
    ) -> Result<Vec<QueueMessage>, QueueError> {
        let until = self.clock.now_ms() + wait_ms as i64;
        loop {
            let taken = self.take(max.max(1), visibility_ms).await?;
            if !taken.is_empty() || self.clock.now_ms() >= until {
                return Ok(taken);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn delete(&self, receipt: &str) -> Result<(), QueueError> {
        let receipt = receipt.to_string();
        self.call("DeleteMessage", move |conn| {
            conn.execute("DELETE FROM messages WHERE receipt = ?1", params![receipt])
                .map(|_| ())
        })
        .await
    }

    /// Messages set aside as dead (received `max_receives` times without being deleted).
    async fn dead(&self) -> Result<Option<u64>, QueueError> {
        let name = self.name.clone();
        self.call("dead", move |conn| {
            conn.query_row(
                "SELECT count(*) FROM messages WHERE queue = ?1 AND dead = 1",
                params![name],
                |row| row.get::<_, i64>(0),
            )
            .map(|n| Some(n as u64))
        })
        .await
    }

    async fn depth(&self) -> Result<QueueDepth, QueueError> {
        let (name, now) = (self.name.clone(), self.clock.now_ms());
        self.call("GetQueueAttributes", move |conn| {
            conn.query_row(
                "SELECT coalesce(sum(visible_at <= ?2), 0), coalesce(sum(visible_at > ?2), 0) \
                 FROM messages WHERE queue = ?1 AND dead = 0",
                params![name, now],
                |row| {
                    Ok(QueueDepth {
                        visible: row.get::<_, i64>(0)? as u64,
                        in_flight: row.get::<_, i64>(1)? as u64,
                    })
                },
            )
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn messages_come_back_after_their_visibility_timeout_and_die_after_max_receives() {
        let dir = tempfile::tempdir().unwrap();
        let q = LocalQueue::open(dir.path().join("q.db"), "work")
            .unwrap()
            .with_max_receives(2);
        let other = LocalQueue::open(dir.path().join("q.db"), "other").unwrap();
        q.send(&["a".into(), "b".into(), "c".into()]).await.unwrap();
        other.send(&["x".into()]).await.unwrap();
        let first = q.receive(2, 60_000, 0).await.unwrap();
        assert_eq!(
            first.iter().map(|m| m.body.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(first[0].receive_count, 1);
        assert_eq!(
            q.depth().await.unwrap(),
            QueueDepth {
                visible: 1,
                in_flight: 2
            }
        );
        // A deleted message is gone; a stale receipt deletes nothing.
        q.delete(&first[0].receipt).await.unwrap();
        let second = q.receive(10, 0, 0).await.unwrap();
        assert_eq!(
            second.iter().map(|m| m.body.as_str()).collect::<Vec<_>>(),
            ["c"]
        );
        q.delete("9999:stale").await.unwrap();
        // "c" was taken with no visibility: it is back at once; its second receive is its
        // last one, and a third turns it dead.
        let again = q.receive(10, 0, 0).await.unwrap();
        assert_eq!((again[0].body.as_str(), again[0].receive_count), ("c", 2));
        assert!(q.receive(10, 0, 0).await.unwrap().is_empty());
        assert_eq!(q.dead().await.unwrap(), Some(1));
        // "b" is still hidden; the other queue is untouched.
        assert_eq!(
            q.depth().await.unwrap(),
            QueueDepth {
                visible: 0,
                in_flight: 1
            }
        );
        assert_eq!(other.receive(10, 1_000, 0).await.unwrap()[0].body, "x");
        // An empty queue waits up to wait_ms.
        let t = std::time::Instant::now();
        assert!(other.receive(1, 1_000, 200).await.unwrap().is_empty());
        assert!(t.elapsed() >= Duration::from_millis(190));
    }
}
