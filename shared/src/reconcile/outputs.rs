//! The Parquet outputs, read in place by ranged GETs pinned to an ETag, never whole:
//! - [`read_footer`]: the footer alone (usually one request), whose row groups give the
//!   file's row count — what the cheap tier compares with the ledger for every object;
//! - [`read_sums`]: the sum columns streamed one row group at a time, only their column
//!   chunks fetched (parquet's own async reader over [`ObjectStore::get_range`]) — what the
//!   deep tier adds up, exactly as [`crate::convert::tally_parquet`] does on a whole file.
//!
//! Memory is bounded by the footer and one row group's projected column chunks, whatever the
//! size of the output.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use futures::future::{BoxFuture, FutureExt};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStreamBuilder};
use parquet::errors::ParquetError;
use parquet::file::metadata::{FooterTail, ParquetMetaData, ParquetMetaDataReader};

use crate::convert::{BatchTally, SumValue};
use crate::error::StoreError;
use crate::ports::{ByteRange, ObjectStore, RangeOutcome};

/// Bytes asked for by the first read of a footer, from the end of the file. The footer of an
/// output (a few columns, a few row groups) is a few KiB, so one request usually reads it
/// whole; a longer one costs a second request for the rest.
pub const FOOTER_PROBE: u64 = 64 << 10;

/// Rows batched together when the sum columns are decoded.
const BATCH_ROWS: usize = 8192;

/// The end of every Parquet file: the footer's length (4 bytes, little-endian) and `PAR1`.
const TAIL: usize = 8;

/// An output's footer, decoded.
#[derive(Debug, Clone)]
pub struct Footer {
    /// The ETag of the object the footer was read from; later reads are pinned to it.
    pub etag: String,
    /// Size of the whole object, bytes.
    pub size: u64,
    /// The file's metadata: schema, row groups, column chunks.
    pub metadata: Arc<ParquetMetaData>,
}

impl Footer {
    /// Rows of the file: the sum of its row groups' row counts.
    pub fn rows(&self) -> u64 {
        self.metadata
            .row_groups()
            .iter()
            .map(|g| u64::try_from(g.num_rows()).unwrap_or(0))
            .sum()
    }
}

/// The answer to a pinned read of an output.
#[derive(Debug)]
pub enum Read<T> {
    /// What was read.
    Found(T),
    /// No such object.
    NotFound,
    /// The object is another version than the one pinned (its ETag differs).
    Changed,
}

/// An output that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A store call failed: the output could not be checked.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The object is not a Parquet file that can be read, or its sums cannot be taken.
    #[error("s3://{bucket}/{key}: {message}")]
    Invalid {
        /// Bucket of the output.
        bucket: String,
        /// Key of the output.
        key: String,
        /// What is wrong.
        message: String,
    },
}

fn invalid(bucket: &str, key: &str, message: impl ToString) -> ReadError {
    ReadError::Invalid {
        bucket: bucket.to_string(),
        key: key.to_string(),
        message: message.to_string(),
    }
}

/// Read and decode the footer of `bucket/key`, pinned to `if_match` when given (unpinned, the
/// footer says which ETag it was read from, and a second request for a long footer is pinned
/// to that).
pub async fn read_footer(
    store: &dyn ObjectStore,
    bucket: &str,
    key: &str,
    if_match: Option<&str>,
) -> Result<Read<Footer>, ReadError> {
    read_footer_probing(store, bucket, key, if_match, FOOTER_PROBE).await
}

async fn read_footer_probing(
    store: &dyn ObjectStore,
    bucket: &str,
    key: &str,
    if_match: Option<&str>,
    probe: u64,
) -> Result<Read<Footer>, ReadError> {
    let (meta, end) = match store
        .get_range(bucket, key, ByteRange::Suffix(probe), if_match)
        .await?
    {
        RangeOutcome::Found { meta, bytes } => (meta, bytes),
        RangeOutcome::NotFound => return Ok(Read::NotFound),
        RangeOutcome::Changed => return Ok(Read::Changed),
    };
    if end.len() < TAIL {
        return Err(invalid(
            bucket,
            key,
            format!("not a Parquet file: {} bytes long", meta.size),
        ));
    }
    let tail = FooterTail::try_from(&end[end.len() - TAIL..])
        .map_err(|e| invalid(bucket, key, format!("not a Parquet file: {e}")))?;
    if tail.is_encrypted_footer() {
        return Err(invalid(bucket, key, "the footer is encrypted"));
    }
    let needed = tail.metadata_length() as u64 + TAIL as u64;
    if needed > meta.size {
        return Err(invalid(
            bucket,
            key,
            format!(
                "the footer claims {needed} bytes of a {}-byte file",
                meta.size
            ),
        ));
    }
    let footer = if needed <= end.len() as u64 {
        end.slice(end.len() - needed as usize..end.len() - TAIL)
    } else {
        // Longer than the first read: fetch what is missing, pinned to what was read.
        let start = meta.size - needed;
        let span = ByteRange::Span {
            start,
            end: meta.size - end.len() as u64,
        };
        let head = match store.get_range(bucket, key, span, Some(&meta.etag)).await? {
            RangeOutcome::Found { bytes, .. } => bytes,
            RangeOutcome::NotFound => return Ok(Read::NotFound),
            RangeOutcome::Changed => return Ok(Read::Changed),
        };
        let mut whole = BytesMut::with_capacity(needed as usize);
        whole.extend_from_slice(&head);
        whole.extend_from_slice(&end[..end.len() - TAIL]);
        whole.freeze()
    };
    let metadata = ParquetMetaDataReader::decode_metadata(&footer)
        .map_err(|e| invalid(bucket, key, format!("the footer does not decode: {e}")))?;
    Ok(Read::Found(Footer {
        etag: meta.etag,
        size: meta.size,
        metadata: Arc::new(metadata),
    }))
}

/// Rows and sums of `columns` in the output `bucket/key` whose `footer` was read: the sum
/// columns only, one row group at a time, each request pinned to the footer's ETag. The sums
/// are exactly [`crate::convert::tally_parquet`]'s (the same code adds the same values in the
/// same order). With no sum columns nothing more is read: the rows are the footer's.
pub async fn read_sums(
    store: Arc<dyn ObjectStore>,
    bucket: &str,
    key: &str,
    footer: &Footer,
    columns: &[String],
) -> Result<Read<(u64, BTreeMap<String, SumValue>)>, ReadError> {
    if columns.is_empty() {
        return Ok(Read::Found((footer.rows(), BTreeMap::new())));
    }
    let arrow = ArrowReaderMetadata::try_new(footer.metadata.clone(), ArrowReaderOptions::new())
        .map_err(|e| invalid(bucket, key, e))?;
    // Outputs are flat: a column's index in the Arrow schema is its root in the Parquet one.
    // A sum column the file lacks is left out here and named by the tally below.
    let roots: Vec<usize> = columns
        .iter()
        .filter_map(|c| arrow.schema().index_of(c).ok())
        .collect();
    let mask = ProjectionMask::roots(arrow.parquet_schema(), roots);
    let file = RangedFile {
        store,
        bucket: bucket.to_string(),
        key: key.to_string(),
        etag: footer.etag.clone(),
        metadata: footer.metadata.clone(),
    };
    let mut stream = ParquetRecordBatchStreamBuilder::new_with_metadata(file, arrow)
        .with_projection(mask)
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| invalid(bucket, key, e))?;
    let mut tally =
        BatchTally::new(stream.schema(), columns).map_err(|e| invalid(bucket, key, e))?;
    while let Some(batch) = stream.next().await {
        match batch {
            Ok(batch) => tally.add(&batch).map_err(|e| invalid(bucket, key, e))?,
            Err(ParquetError::External(e)) if e.is::<Interrupted>() => {
                return match *e.downcast::<Interrupted>().expect("checked by is") {
                    Interrupted::Store(e) => Err(ReadError::Store(e)),
                    Interrupted::NotFound => Ok(Read::NotFound),
                    Interrupted::Changed => Ok(Read::Changed),
                };
            }
            Err(e) => return Err(invalid(bucket, key, e)),
        }
    }
    Ok(Read::Found(tally.finish()))
}

/// Why a ranged read under the Parquet reader stopped: carried through its error type and
/// taken out again by [`read_sums`].
#[derive(Debug, thiserror::Error)]
enum Interrupted {
    #[error(transparent)]
    Store(StoreError),
    #[error("the object is gone")]
    NotFound,
    #[error("the object was replaced")]
    Changed,
}

/// An output as parquet's async reader sees it: ranged GETs pinned to one ETag, and the
/// metadata already read.
struct RangedFile {
    store: Arc<dyn ObjectStore>,
    bucket: String,
    key: String,
    etag: String,
    metadata: Arc<ParquetMetaData>,
}

impl RangedFile {
    async fn fetch(&self, range: Range<u64>) -> parquet::errors::Result<Bytes> {
        let span = ByteRange::Span {
            start: range.start,
            end: range.end,
        };
        let outcome = self
            .store
            .get_range(&self.bucket, &self.key, span, Some(&self.etag))
            .await;
        let stop = |why| ParquetError::External(Box::new(why));
        match outcome {
            Ok(RangeOutcome::Found { bytes, .. })
                if bytes.len() as u64 == range.end - range.start =>
            {
                Ok(bytes)
            }
            Ok(RangeOutcome::Found { bytes, .. }) => Err(ParquetError::EOF(format!(
                "asked for bytes {}..{}, got {}",
                range.start,
                range.end,
                bytes.len()
            ))),
            Ok(RangeOutcome::NotFound) => Err(stop(Interrupted::NotFound)),
            Ok(RangeOutcome::Changed) => Err(stop(Interrupted::Changed)),
            Err(e) => Err(stop(Interrupted::Store(e))),
        }
    }
}

impl AsyncFileReader for RangedFile {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move { self.fetch(range).await }.boxed()
    }

    /// One request per run of adjacent ranges (the projected column chunks of a row group
    /// that sit side by side), never a byte outside them.
    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move {
            let mut out = Vec::with_capacity(ranges.len());
            let mut i = 0;
            while i < ranges.len() {
                let mut j = i + 1;
                while j < ranges.len() && ranges[j].start == ranges[j - 1].end {
                    j += 1;
                }
                let run = self.fetch(ranges[i].start..ranges[j - 1].end).await?;
                for r in &ranges[i..j] {
                    let from = (r.start - ranges[i].start) as usize;
                    out.push(run.slice(from..from + (r.end - r.start) as usize));
                }
                i = j;
            }
            Ok(out)
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        let metadata = self.metadata.clone();
        async move { Ok(metadata) }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::convert::{self, ConvertSpec, CsvOptions, InputFormat};
    use crate::local::FolderStore;
    use crate::ports::{GetOutcome, ListPage, ObjectMeta, PutOutcome, WriteCondition};
    use crate::schema::{ColumnSpec, arrow_schema};

    /// A folder store that records every ranged read and refuses whole-object GETs.
    struct Counting {
        inner: FolderStore,
        ranges: Mutex<Vec<(ByteRange, u64)>>,
    }

    impl Counting {
        fn fetched(&self) -> u64 {
            self.ranges.lock().unwrap().iter().map(|(_, n)| n).sum()
        }

        fn spans(&self) -> Vec<(u64, u64)> {
            self.ranges
                .lock()
                .unwrap()
                .iter()
                .filter_map(|(r, _)| match r {
                    ByteRange::Span { start, end } => Some((*start, *end)),
                    ByteRange::Suffix(_) => None,
                })
                .collect()
        }

        fn reset(&self) {
            self.ranges.lock().unwrap().clear();
        }
    }

    #[async_trait]
    impl ObjectStore for Counting {
        async fn head(&self, b: &str, k: &str) -> Result<Option<ObjectMeta>, StoreError> {
            self.inner.head(b, k).await
        }
        async fn get(&self, b: &str, k: &str, _: Option<&str>) -> Result<GetOutcome, StoreError> {
            panic!("a whole-object GET of {b}/{k}: outputs are read by ranges only")
        }
        async fn get_range(
            &self,
            b: &str,
            k: &str,
            range: ByteRange,
            if_match: Option<&str>,
        ) -> Result<RangeOutcome, StoreError> {
            let got = self.inner.get_range(b, k, range, if_match).await?;
            if let RangeOutcome::Found { bytes, .. } = &got {
                self.ranges
                    .lock()
                    .unwrap()
                    .push((range, bytes.len() as u64));
            }
            Ok(got)
        }
        async fn put(
            &self,
            b: &str,
            k: &str,
            body: Bytes,
            m: &BTreeMap<String, String>,
            c: &WriteCondition,
        ) -> Result<PutOutcome, StoreError> {
            self.inner.put(b, k, body, m, c).await
        }
        async fn create_multipart(
            &self,
            b: &str,
            k: &str,
            m: &BTreeMap<String, String>,
        ) -> Result<String, StoreError> {
            self.inner.create_multipart(b, k, m).await
        }
        async fn upload_part(
            &self,
            b: &str,
            k: &str,
            u: &str,
            n: i32,
            body: Bytes,
        ) -> Result<String, StoreError> {
            self.inner.upload_part(b, k, u, n, body).await
        }
        async fn complete_multipart(
            &self,
            b: &str,
            k: &str,
            u: &str,
            parts: &[(i32, String)],
            c: &WriteCondition,
        ) -> Result<PutOutcome, StoreError> {
            self.inner.complete_multipart(b, k, u, parts, c).await
        }
        async fn abort_multipart(&self, b: &str, k: &str, u: &str) -> Result<(), StoreError> {
            self.inner.abort_multipart(b, k, u).await
        }
        async fn delete(&self, b: &str, k: &str, m: Option<&str>) -> Result<bool, StoreError> {
            self.inner.delete(b, k, m).await
        }
        async fn list(&self, b: &str, p: &str, t: Option<&str>) -> Result<ListPage, StoreError> {
            self.inner.list(b, p, t).await
        }
    }

    const COLUMNS: &str = r#"[
        {"name": "id", "type": "int64", "nullable": false},
        {"name": "note", "type": "string"},
        {"name": "qty", "type": "int32"},
        {"name": "price", "type": "decimal(12,2)"},
        {"name": "ratio", "type": "float64"}
    ]"#;

    /// `rows` rows of CSV with NULLs here and there and a string column that does not
    /// compress much (so the file is larger than the footer probe).
    fn csv(rows: u64) -> String {
        let mut s = String::new();
        for i in 0..rows {
            let qty = if i % 11 == 0 {
                String::new()
            } else {
                format!("{}", (i * 7919) % 1000)
            };
            let ratio = if i % 13 == 0 {
                String::new()
            } else {
                format!("{}", (i as f64) * 0.1 + 1e-3)
            };
            s.push_str(&format!(
                "{i},note {:x},{qty},{}.{:02},{ratio}\n",
                i.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                (i * 31) % 100_000,
                i % 100
            ));
        }
        s
    }

    fn spec(row_group_rows: usize) -> ConvertSpec {
        let columns: Vec<ColumnSpec> = serde_json::from_str(COLUMNS).unwrap();
        let options = CsvOptions {
            delimiter: b',',
            quote: b'"',
            escape: None,
            header: false,
        };
        let mut spec = ConvertSpec::new(InputFormat::Csv(options), arrow_schema(&columns));
        spec.row_group_rows = row_group_rows;
        spec.sum_columns = vec!["qty".into(), "price".into(), "ratio".into()];
        spec
    }

    /// An output of `rows` rows in row groups of `group` rows, in a fresh folder store.
    async fn stored(rows: u64, group: usize) -> (tempfile::TempDir, Arc<Counting>, Bytes, String) {
        let dir = tempfile::tempdir().unwrap();
        let inner = FolderStore::new(dir.path());
        inner.create_bucket("lake").await.unwrap();
        let store = Arc::new(Counting {
            inner,
            ranges: Mutex::new(Vec::new()),
        });
        let mut parquet = Vec::new();
        convert::convert(csv(rows).as_bytes(), &spec(group), &mut parquet).unwrap();
        let parquet = Bytes::from(parquet);
        let PutOutcome::Written { etag } = store
            .put(
                "lake",
                "out.parquet",
                parquet.clone(),
                &BTreeMap::new(),
                &WriteCondition::Absent,
            )
            .await
            .unwrap()
        else {
            panic!("written")
        };
        (dir, store, parquet, etag)
    }

    fn found<T>(r: Read<T>) -> T {
        match r {
            Read::Found(t) => t,
            Read::NotFound => panic!("not found"),
            Read::Changed => panic!("changed"),
        }
    }

    #[tokio::test]
    async fn the_sums_read_by_ranges_are_tally_parquets_exactly() {
        let (_dir, store, whole, etag) = stored(20_000, 3_000).await;
        let footer = found(
            read_footer(&*store, "lake", "out.parquet", Some(&etag))
                .await
                .unwrap(),
        );
        assert_eq!(footer.rows(), 20_000);
        assert_eq!(footer.metadata.num_row_groups(), 7);
        assert_eq!(
            (footer.etag.as_str(), footer.size),
            (etag.as_str(), whole.len() as u64)
        );

        let columns = spec(1).sum_columns;
        let streamed = found(
            read_sums(store.clone(), "lake", "out.parquet", &footer, &columns)
                .await
                .unwrap(),
        );
        let expected = convert::tally_parquet(whole, &columns).unwrap();
        assert_eq!(streamed, expected);
        assert!(
            matches!(streamed.1["ratio"], SumValue::Float(_))
                && matches!(streamed.1["price"], SumValue::Decimal { scale: 2, .. }),
            "{streamed:?}"
        );
    }

    #[tokio::test]
    async fn only_the_footer_and_the_sum_columns_chunks_are_fetched() {
        let (_dir, store, whole, etag) = stored(40_000, 10_000).await;
        assert!(
            whole.len() as u64 > 2 * FOOTER_PROBE,
            "{} bytes",
            whole.len()
        );

        let footer = found(
            read_footer(&*store, "lake", "out.parquet", Some(&etag))
                .await
                .unwrap(),
        );
        assert_eq!(
            store.fetched(),
            FOOTER_PROBE,
            "one suffix read for the footer"
        );
        store.reset();

        let columns = vec!["qty".to_string(), "ratio".to_string()];
        found(
            read_sums(store.clone(), "lake", "out.parquet", &footer, &columns)
                .await
                .unwrap(),
        );
        // The column chunks of qty (2) and ratio (4) in every row group, and nothing else.
        let mut chunks: Vec<(u64, u64)> = footer
            .metadata
            .row_groups()
            .iter()
            .flat_map(|g| [2, 4].map(|c| g.column(c).byte_range()))
            .map(|(start, len)| (start, start + len))
            .collect();
        chunks.sort();
        let mut spans = store.spans();
        spans.sort();
        assert_eq!(
            spans, chunks,
            "one request per chunk (qty and ratio are not adjacent)"
        );
        let projected: u64 = chunks.iter().map(|(s, e)| e - s).sum();
        assert_eq!(store.fetched(), projected);
        assert!(
            projected * 3 < whole.len() as u64,
            "{projected} of {}",
            whole.len()
        );
        store.reset();

        // Adjacent chunks (qty, price) come in one request per row group.
        let columns = vec!["qty".to_string(), "price".to_string()];
        found(
            read_sums(store.clone(), "lake", "out.parquet", &footer, &columns)
                .await
                .unwrap(),
        );
        assert_eq!(store.spans().len(), footer.metadata.num_row_groups());
    }

    #[tokio::test]
    async fn a_footer_longer_than_the_probe_is_read_in_two_requests() {
        let (_dir, store, whole, etag) = stored(5_000, 100).await;
        let footer = found(
            read_footer_probing(&*store, "lake", "out.parquet", Some(&etag), 64)
                .await
                .unwrap(),
        );
        assert_eq!(footer.metadata.num_row_groups(), 50);
        assert_eq!(footer.rows(), 5_000);
        let ranges = store.ranges.lock().unwrap().clone();
        assert_eq!(ranges.len(), 2, "{ranges:?}");
        let length =
            u32::from_le_bytes(whole[whole.len() - 8..whole.len() - 4].try_into().unwrap());
        assert_eq!(store.fetched(), u64::from(length) + 8, "the footer exactly");
    }

    #[tokio::test]
    async fn a_replaced_a_deleted_and_a_broken_output_are_told_apart() {
        let (_dir, store, _, etag) = stored(100, 1_000).await;
        let pinned = |etag: &str| {
            let (store, etag) = (store.clone(), etag.to_string());
            async move { read_footer(&*store, "lake", "out.parquet", Some(&etag)).await }
        };
        assert!(matches!(pinned("0123").await, Ok(Read::Changed)));
        let footer = found(pinned(&etag).await.unwrap());

        // Replaced between the footer and the column chunks.
        let PutOutcome::Written { .. } = store
            .put(
                "lake",
                "out.parquet",
                Bytes::from_static(b"not parquet at all"),
                &BTreeMap::new(),
                &WriteCondition::Matches(etag.clone()),
            )
            .await
            .unwrap()
        else {
            panic!("replaced")
        };
        let columns = vec!["qty".to_string()];
        let sums = read_sums(store.clone(), "lake", "out.parquet", &footer, &columns).await;
        assert!(matches!(sums, Ok(Read::Changed)), "{sums:?}");

        let broken = read_footer(&*store, "lake", "out.parquet", None).await;
        let message = broken.unwrap_err().to_string();
        assert!(
            message.starts_with("s3://lake/out.parquet: not a Parquet file"),
            "{message}"
        );

        assert!(store.delete("lake", "out.parquet", None).await.unwrap());
        assert!(matches!(pinned(&etag).await, Ok(Read::NotFound)));
        let sums = read_sums(store.clone(), "lake", "out.parquet", &footer, &columns).await;
        assert!(matches!(sums, Ok(Read::NotFound)), "{sums:?}");
    }
}
