//! [`ObjectStore`] on Amazon S3 (or any S3-compatible endpoint set with
//! `AWS_ENDPOINT_URL_S3`). Conditional writes use `If-None-Match: *` and `If-Match`; a 412
//! comes back as [`PutOutcome::PreconditionFailed`] / [`GetOutcome::Changed`].

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart, EncodingType};
use bytes::Bytes;

use super::failure;
use crate::error::StoreError;
use crate::ports::{
    ByteRange, GetOutcome, ListPage, ObjectMeta, ObjectStore, PutOutcome, RangeOutcome,
    WriteCondition,
};

/// S3 behind the [`ObjectStore`] port.
#[derive(Debug, Clone)]
pub struct S3Store {
    client: Client,
}

impl S3Store {
    /// Wrap a client.
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    /// A client from the shared AWS configuration, path-style when an endpoint is set (as the
    /// emulators need).
    pub fn from_conf(conf: &aws_config::SdkConfig) -> Self {
        let mut b = aws_sdk_s3::config::Builder::from(conf);
        if std::env::var_os("AWS_ENDPOINT_URL_S3").is_some()
            || std::env::var_os("AWS_ENDPOINT_URL").is_some()
        {
            b = b.force_path_style(true);
        }
        Self::new(Client::from_conf(b.build()))
    }
}

fn unquote(etag: &str) -> String {
    etag.trim_matches('"').to_string()
}

fn quote(etag: &str) -> String {
    format!("\"{etag}\"")
}

fn err<E, R>(
    op: &'static str,
    bucket: &str,
    key: &str,
    e: &aws_sdk_s3::error::SdkError<E, R>,
) -> StoreError
where
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + super::HasStatus,
{
    let f = failure(e);
    StoreError {
        op,
        bucket: bucket.to_string(),
        key: key.to_string(),
        message: f.message,
        retry: f.retry,
    }
}

fn is_412<E, R>(e: &aws_sdk_s3::error::SdkError<E, R>) -> bool
where
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + super::HasStatus,
{
    let f = failure(e);
    f.status == Some(412) || f.code.as_deref() == Some("PreconditionFailed")
}

/// A 404 for the key itself; a missing bucket (`NoSuchBucket`) is an error, not an absence.
fn key_missing<E, R>(e: &aws_sdk_s3::error::SdkError<E, R>) -> bool
where
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + super::HasStatus,
{
    let f = failure(e);
    f.status == Some(404) && f.code.as_deref() != Some("NoSuchBucket")
}

fn to_hash(metadata: &BTreeMap<String, String>) -> Option<HashMap<String, String>> {
    Some(
        metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    )
}

fn millis(t: Option<&aws_sdk_s3::primitives::DateTime>) -> i64 {
    t.and_then(|t| t.to_millis().ok()).unwrap_or(0)
}

/// Our view of a HEAD or GET answer; user-metadata keys lower-cased.
fn object_meta(
    key: &str,
    etag: Option<&str>,
    size: Option<i64>,
    version_id: Option<&str>,
    last_modified: Option<&aws_sdk_s3::primitives::DateTime>,
    metadata: Option<&HashMap<String, String>>,
) -> ObjectMeta {
    ObjectMeta {
        key: key.to_string(),
        etag: etag.map(unquote).unwrap_or_default(),
        size: size.unwrap_or(0).max(0) as u64,
        version_id: version_id.map(str::to_string),
        last_modified: millis(last_modified),
        metadata: metadata
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.to_lowercase(), v.clone()))
                    .collect()
            })
            .unwrap_or_default(),
    }
}

#[async_trait]
impl ObjectStore for S3Store {
    async fn head(&self, bucket: &str, key: &str) -> Result<Option<ObjectMeta>, StoreError> {
        match self
            .client
            .head_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
        {
            Ok(o) => Ok(Some(object_meta(
                key,
                o.e_tag(),
                o.content_length(),
                o.version_id(),
                o.last_modified(),
                o.metadata(),
            ))),
            Err(e) if key_missing(&e) => Ok(None),
            Err(e) => Err(err("HeadObject", bucket, key, &e)),
        }
    }

    async fn get(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&str>,
    ) -> Result<GetOutcome, StoreError> {
        let req = self
            .client
            .get_object()
            .bucket(bucket)
            .key(key)
            .set_if_match(if_match.map(quote));
        match req.send().await {
            Ok(o) => {
                let meta = object_meta(
                    key,
                    o.e_tag(),
                    o.content_length(),
                    o.version_id(),
                    o.last_modified(),
                    o.metadata(),
                );
                Ok(GetOutcome::Found {
                    meta,
                    body: Box::pin(o.body.into_async_read()),
                })
            }
            Err(e) if is_412(&e) => Ok(GetOutcome::Changed),
            Err(e) if key_missing(&e) => Ok(GetOutcome::NotFound),
            Err(e) => Err(err("GetObject", bucket, key, &e)),
        }
    }

    async fn get_range(
        &self,
        bucket: &str,
        key: &str,
        range: ByteRange,
        if_match: Option<&str>,
    ) -> Result<RangeOutcome, StoreError> {
        let header = match range {
            ByteRange::Suffix(n) => format!("bytes=-{n}"),
            // An empty span still asks for one byte; it is cut off below.
            ByteRange::Span { start, end } => format!("bytes={start}-{}", end.max(start + 1) - 1),
        };
        let req = self
            .client
            .get_object()
            .bucket(bucket)
            .key(key)
            .range(header)
            .set_if_match(if_match.map(quote));
        match req.send().await {
            Ok(o) => {
                let mut meta = object_meta(
                    key,
                    o.e_tag(),
                    o.content_length(),
                    o.version_id(),
                    o.last_modified(),
                    o.metadata(),
                );
                // `Content-Range: bytes a-b/total`: the size of the whole object.
                if let Some(total) = o
                    .content_range()
                    .and_then(|r| r.rsplit_once('/'))
                    .and_then(|(_, t)| t.parse::<u64>().ok())
                {
                    meta.size = total;
                }
                let mut bytes = o
                    .body
                    .collect()
                    .await
                    .map_err(|e| StoreError {
                        op: "GetObject",
                        bucket: bucket.to_string(),
                        key: key.to_string(),
                        message: format!("reading the range failed: {e}"),
                        retry: crate::error::Retry::Transient,
                    })?
                    .into_bytes();
                if let ByteRange::Span { start, end } = range {
                    bytes.truncate(end.saturating_sub(start) as usize);
                }
                Ok(RangeOutcome::Found { meta, bytes })
            }
            Err(e) if is_412(&e) => Ok(RangeOutcome::Changed),
            Err(e) if key_missing(&e) => Ok(RangeOutcome::NotFound),
            // 416: the range starts past the end (an empty object): no bytes.
            Err(e) if failure(&e).status == Some(416) => match self.head(bucket, key).await? {
                Some(meta) if if_match.is_none_or(|m| m == meta.etag) => Ok(RangeOutcome::Found {
                    meta,
                    bytes: Bytes::new(),
                }),
                Some(_) => Ok(RangeOutcome::Changed),
                None => Ok(RangeOutcome::NotFound),
            },
            Err(e) => Err(err("GetObject", bucket, key, &e)),
        }
    }

    async fn put(
        &self,
        bucket: &str,
        key: &str,
        body: Bytes,
        metadata: &BTreeMap<String, String>,
        condition: &WriteCondition,
    ) -> Result<PutOutcome, StoreError> {
        let mut req = self
            .client
            .put_object()
            .bucket(bucket)
            .key(key)
            .body(ByteStream::from(body))
            .set_metadata(to_hash(metadata));
        req = match condition {
            WriteCondition::Absent => req.if_none_match("*"),
            WriteCondition::Matches(etag) => req.if_match(quote(etag)),
        };
        match req.send().await {
            Ok(o) => Ok(PutOutcome::Written {
                etag: o.e_tag().map(unquote).unwrap_or_default(),
            }),
            // 412, or 404 for If-Match on a key that is gone.
            Err(e) if is_412(&e) || key_missing(&e) => Ok(PutOutcome::PreconditionFailed),
            Err(e) => Err(err("PutObject", bucket, key, &e)),
        }
    }

    async fn create_multipart(
        &self,
        bucket: &str,
        key: &str,
        metadata: &BTreeMap<String, String>,
    ) -> Result<String, StoreError> {
        let o = self
            .client
            .create_multipart_upload()
            .bucket(bucket)
            .key(key)
            .set_metadata(to_hash(metadata))
            .send()
            .await
            .map_err(|e| err("CreateMultipartUpload", bucket, key, &e))?;
        Ok(o.upload_id().unwrap_or_default().to_string())
    }

    async fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Bytes,
    ) -> Result<String, StoreError> {
        let o = self
            .client
            .upload_part()
            .bucket(bucket)
            .key(key)
            .upload_id(upload_id)
            .part_number(part_number)
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|e| err("UploadPart", bucket, key, &e))?;
        Ok(o.e_tag().map(unquote).unwrap_or_default())
    }

    async fn complete_multipart(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[(i32, String)],
        condition: &WriteCondition,
    ) -> Result<PutOutcome, StoreError> {
        let parts = parts
            .iter()
            .map(|(n, etag)| {
                CompletedPart::builder()
                    .part_number(*n)
                    .e_tag(quote(etag))
                    .build()
            })
            .collect();
        let mut req = self
            .client
            .complete_multipart_upload()
            .bucket(bucket)
            .key(key)
            .upload_id(upload_id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            );
        req = match condition {
            WriteCondition::Absent => req.if_none_match("*"),
            WriteCondition::Matches(etag) => req.if_match(quote(etag)),
        };
        match req.send().await {
            Ok(o) => Ok(PutOutcome::Written {
                etag: o.e_tag().map(unquote).unwrap_or_default(),
            }),
            Err(e) if is_412(&e) => Ok(PutOutcome::PreconditionFailed),
            Err(e) => Err(err("CompleteMultipartUpload", bucket, key, &e)),
        }
    }

    async fn abort_multipart(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), StoreError> {
        self.client
            .abort_multipart_upload()
            .bucket(bucket)
            .key(key)
            .upload_id(upload_id)
            .send()
            .await
            .map_err(|e| err("AbortMultipartUpload", bucket, key, &e))?;
        Ok(())
    }

    async fn delete(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&str>,
    ) -> Result<bool, StoreError> {
        let req = self
            .client
            .delete_object()
            .bucket(bucket)
            .key(key)
            .set_if_match(if_match.map(quote));
        match req.send().await {
            Ok(_) => Ok(true),
            Err(e) if is_412(&e) || key_missing(&e) => Ok(false),
            Err(e) => Err(err("DeleteObject", bucket, key, &e)),
        }
    }

    async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        page_token: Option<&str>,
    ) -> Result<ListPage, StoreError> {
        let o = self
            .client
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .encoding_type(EncodingType::Url)
            .set_continuation_token(page_token.map(str::to_string))
            .send()
            .await
            .map_err(|e| err("ListObjectsV2", bucket, prefix, &e))?;
        list_page(bucket, &o)
    }

    async fn list_after(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: &str,
    ) -> Result<ListPage, StoreError> {
        let o = self
            .client
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .encoding_type(EncodingType::Url)
            .start_after(start_after)
            .send()
            .await
            .map_err(|e| err("ListObjectsV2", bucket, prefix, &e))?;
        list_page(bucket, &o)
    }
}

/// A listing page asked for with `encoding-type=url`: keys arrive form-encoded as in event
/// notifications, because XML text cannot carry most control characters (one such key
/// would otherwise make every listing of its prefix fail) and turns `\r` into `\n`.
fn list_page(
    bucket: &str,
    o: &aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Output,
) -> Result<ListPage, StoreError> {
    let objects = o
        .contents()
        .iter()
        .map(|c| {
            let raw = c.key().unwrap_or_default();
            let key = crate::events::decode_form_key(raw).map_err(|e| StoreError {
                op: "ListObjectsV2",
                bucket: bucket.to_string(),
                key: raw.to_string(),
                message: format!("undecodable key in a url-encoded listing: {e}"),
                retry: crate::error::Retry::Permanent,
            })?;
            Ok(ObjectMeta {
                key,
                etag: c.e_tag().map(unquote).unwrap_or_default(),
                size: c.size().unwrap_or(0).max(0) as u64,
                version_id: None,
                last_modified: millis(c.last_modified()),
                metadata: BTreeMap::new(),
            })
        })
        .collect::<Result<_, StoreError>>()?;
    Ok(ListPage {
        objects,
        next: o.next_continuation_token().map(str::to_string),
    })
}
