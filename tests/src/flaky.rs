//! [`FlakyStore`]: a real object store with chosen failures — GET bodies whose connection
//! drops part-way, GETs of one key failing, listings failing — each a transient error as
//! S3 or the network would give it; and races — another writer's work run while a reader
//! holds a GET it pinned.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use async_trait::async_trait;
use bytes::Bytes;
use tidemark::error::{Retry, StoreError};
use tidemark::ports::{
    Body, ByteRange, GetOutcome, ListPage, ObjectMeta, ObjectStore, PutOutcome, RangeOutcome,
    WriteCondition,
};
use tokio::io::{AsyncRead, ReadBuf};

/// Wraps a real store; failures are switched on and off while a test runs.
pub struct FlakyStore {
    inner: Arc<dyn ObjectStore>,
    cuts: AtomicU32,
    cut_after: AtomicUsize,
    failing_key: Mutex<Option<String>>,
    failing_lists: AtomicBool,
    race: Mutex<Option<(String, futures::future::BoxFuture<'static, ()>)>>,
}

impl FlakyStore {
    /// No failures until switched on.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self {
            inner,
            cuts: AtomicU32::new(0),
            cut_after: AtomicUsize::new(0),
            failing_key: Mutex::new(None),
            failing_lists: AtomicBool::new(false),
            race: Mutex::new(None),
        }
    }

    /// On the next GET of `key` pinned to a version, run `race` (another writer's work: an
    /// overwrite and its event, say) after the pinned body was read and before the reader
    /// gets it: the reader then holds a version that is no longer the current one.
    pub fn race_pinned_get(&self, key: &str, race: futures::future::BoxFuture<'static, ()>) {
        *self.race.lock().unwrap() = Some((key.to_string(), race));
    }

    /// The bodies of the next `n` GETs fail with a connection reset after `after` bytes.
    pub fn cut_bodies(&self, n: u32, after: usize) {
        self.cut_after.store(after, SeqCst);
        self.cuts.store(n, SeqCst);
    }

    /// Every GET of `key` (in any bucket) fails with a transient 500; `None` stops that.
    pub fn fail_gets_of(&self, key: Option<&str>) {
        *self.failing_key.lock().unwrap() = key.map(str::to_string);
    }

    /// Every listing fails with a transient 500 while `on`.
    pub fn fail_lists(&self, on: bool) {
        self.failing_lists.store(on, SeqCst);
    }

    fn internal_error(op: &'static str, bucket: &str, key: &str) -> StoreError {
        StoreError {
            op,
            bucket: bucket.to_string(),
            key: key.to_string(),
            message: "InternalError: We encountered an internal error. Please try again.".into(),
            retry: Retry::Transient,
        }
    }
}

/// A GET body whose connection drops (an `io::ErrorKind::ConnectionReset` saying
/// `message`) once `left` bytes are read.
pub(crate) struct CutBody {
    inner: Body,
    left: usize,
    message: &'static str,
}

impl CutBody {
    pub(crate) fn new(inner: Body, after: usize, message: &'static str) -> Self {
        Self {
            inner,
            left: after,
            message,
        }
    }
}

impl AsyncRead for CutBody {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.left == 0 {
            let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, self.message);
            return Poll::Ready(Err(reset));
        }
        let mut limited = buf.take(self.left);
        let polled = self.inner.as_mut().poll_read(cx, &mut limited);
        let n = limited.filled().len();
        // `take` fills the outer buffer's memory: advance the outer one by what was read.
        buf.advance(n);
        self.left -= n;
        polled
    }
}

#[async_trait]
impl ObjectStore for FlakyStore {
    async fn head(&self, bucket: &str, key: &str) -> Result<Option<ObjectMeta>, StoreError> {
        self.inner.head(bucket, key).await
    }

    async fn get(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&str>,
    ) -> Result<GetOutcome, StoreError> {
        if self.failing_key.lock().unwrap().as_deref() == Some(key) {
            return Err(Self::internal_error("GetObject", bucket, key));
        }
        let got = self.inner.get(bucket, key, if_match).await?;
        let race = {
            let mut race = self.race.lock().unwrap();
            match race.take() {
                Some((k, r)) if k == key && if_match.is_some() => Some(r),
                other => {
                    *race = other;
                    None
                }
            }
        };
        // The raced body is read whole first: the reader holds the old version's bytes.
        let got = match (race, got) {
            (Some(race), GetOutcome::Found { meta, mut body }) => {
                let mut bytes = Vec::new();
                tokio::io::AsyncReadExt::read_to_end(&mut body, &mut bytes)
                    .await
                    .expect("read the raced body");
                race.await;
                GetOutcome::Found {
                    meta,
                    body: Box::pin(std::io::Cursor::new(bytes)),
                }
            }
            (_, got) => got,
        };
        let cut = self
            .cuts
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok();
        Ok(match got {
            GetOutcome::Found { meta, body } if cut => GetOutcome::Found {
                meta,
                body: Box::pin(CutBody::new(
                    body,
                    self.cut_after.load(SeqCst),
                    "connection reset by peer",
                )),
            },
            other => other,
        })
    }

    async fn get_range(
        &self,
        bucket: &str,
        key: &str,
        range: ByteRange,
        if_match: Option<&str>,
    ) -> Result<RangeOutcome, StoreError> {
        if self.failing_key.lock().unwrap().as_deref() == Some(key) {
            return Err(Self::internal_error("GetObject", bucket, key));
        }
        self.inner.get_range(bucket, key, range, if_match).await
    }

    async fn put(
        &self,
        bucket: &str,
        key: &str,
        body: Bytes,
        metadata: &BTreeMap<String, String>,
        condition: &WriteCondition,
    ) -> Result<PutOutcome, StoreError> {
        self.inner.put(bucket, key, body, metadata, condition).await
    }

    async fn create_multipart(
        &self,
        bucket: &str,
        key: &str,
        metadata: &BTreeMap<String, String>,
    ) -> Result<String, StoreError> {
        self.inner.create_multipart(bucket, key, metadata).await
    }

    async fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Bytes,
    ) -> Result<String, StoreError> {
        self.inner
            .upload_part(bucket, key, upload_id, part_number, body)
            .await
    }

    async fn complete_multipart(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[(i32, String)],
        condition: &WriteCondition,
    ) -> Result<PutOutcome, StoreError> {
        self.inner
            .complete_multipart(bucket, key, upload_id, parts, condition)
            .await
    }

    async fn abort_multipart(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), StoreError> {
        self.inner.abort_multipart(bucket, key, upload_id).await
    }

    async fn delete(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&str>,
    ) -> Result<bool, StoreError> {
        self.inner.delete(bucket, key, if_match).await
    }

    async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        page_token: Option<&str>,
    ) -> Result<ListPage, StoreError> {
        if self.failing_lists.load(SeqCst) {
            return Err(Self::internal_error("ListObjectsV2", bucket, prefix));
        }
        self.inner.list(bucket, prefix, page_token).await
    }

    async fn list_after(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: &str,
    ) -> Result<ListPage, StoreError> {
        if self.failing_lists.load(SeqCst) {
            return Err(Self::internal_error("ListObjectsV2", bucket, prefix));
        }
        self.inner.list_after(bucket, prefix, start_after).await
    }
}
