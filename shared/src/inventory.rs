//! S3 Inventory as the backfill planner's source of objects, for buckets too large to list:
//! an inventory report is a `manifest.json` naming data files (CSV, gzip-compressed, or
//! Parquet) with one row per object. The planner reads them file by file, row by row, in
//! bounded memory (a chunk of rows at a time; a Parquet file is spooled to a temporary file,
//! as Parquet is read by seeking), and resumes at a position `<file index>:<row index>`.
//!
//! What is taken from a report: the key (URL-encoded in CSV reports, as AWS documents, and
//! decoded like an event's), the ETag (required: the worker pins its GET to it), the size,
//! the last-modified time (needed only for `since` / `until`) and the version id. Rows of
//! delete markers and of versions that are not the latest are passed over. ORC reports are
//! refused.

use std::collections::HashMap;
use std::io::BufReader;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use serde::Deserialize;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio_util::io::SyncIoBridge;

use crate::error::{ProcessError, Result};
use crate::ports::{Body, GetOutcome, ObjectMeta, ObjectStore};

/// Rows per page (as a listing page).
const PAGE_ROWS: usize = 1000;
/// Largest manifest read, bytes.
const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// The format of an inventory's data files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Gzip-compressed CSV without a header; columns as `fileSchema` names them.
    Csv,
    /// Parquet; columns named in snake case (`key`, `e_tag`, …).
    Parquet,
}

/// An inventory report's manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Where the manifest is (`s3://bucket/key`).
    pub location: String,
    /// The bucket holding the data files.
    pub bucket: String,
    /// Their format.
    pub format: Format,
    /// CSV: the column names, in order.
    pub columns: Vec<String>,
    /// The data files' keys, in the manifest's order.
    pub files: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManifestDoc {
    source_bucket: String,
    destination_bucket: String,
    file_format: String,
    #[serde(default)]
    file_schema: String,
    files: Vec<ManifestFile>,
}

#[derive(Deserialize)]
struct ManifestFile {
    key: String,
}

fn invalid(location: &str, message: impl Into<String>) -> ProcessError {
    ProcessError::Inventory {
        location: location.to_string(),
        message: message.into(),
    }
}

/// `s3://bucket/key` → (bucket, key).
pub fn parse_location(location: &str) -> Option<(&str, &str)> {
    let rest = location.strip_prefix("s3://")?;
    let (bucket, key) = rest.split_once('/')?;
    (!bucket.is_empty() && !key.is_empty()).then_some((bucket, key))
}

impl Manifest {
    /// Read the manifest at `location` (`s3://bucket/…/manifest.json`), which must describe
    /// an inventory of `source_bucket` with the columns the planner needs.
    pub async fn load(
        store: &dyn ObjectStore,
        location: &str,
        source_bucket: &str,
    ) -> Result<Self> {
        let (bucket, key) = parse_location(location)
            .ok_or_else(|| invalid(location, "not an s3://bucket/key location"))?;
        let mut body = match store.get(bucket, key, None).await? {
            GetOutcome::Found { meta, body } if meta.size <= MAX_MANIFEST_BYTES => body,
            GetOutcome::Found { meta, .. } => {
                return Err(invalid(
                    location,
                    format!("{} bytes is too large for a manifest", meta.size),
                ));
            }
            _ => return Err(invalid(location, "no such object")),
        };
        let mut bytes = Vec::new();
        body.read_to_end(&mut bytes)
            .await
            .map_err(|e| invalid(location, format!("reading it failed: {e}")))?;
        Self::parse(location, &bytes, source_bucket)
    }

    /// Parse a manifest's JSON.
    pub fn parse(location: &str, json: &[u8], source_bucket: &str) -> Result<Self> {
        let doc: ManifestDoc = serde_json::from_slice(json)
            .map_err(|e| invalid(location, format!("not an S3 Inventory manifest: {e}")))?;
        if doc.source_bucket != source_bucket {
            return Err(invalid(
                location,
                format!(
                    "it is an inventory of bucket {:?}; the source reads {source_bucket:?}",
                    doc.source_bucket
                ),
            ));
        }
        let bucket = doc
            .destination_bucket
            .strip_prefix("arn:aws:s3:::")
            .unwrap_or(&doc.destination_bucket)
            .to_string();
        let format = match doc.file_format.to_ascii_lowercase().as_str() {
            "csv" => Format::Csv,
            "parquet" => Format::Parquet,
            other => {
                return Err(invalid(
                    location,
                    format!("fileFormat {other:?} is not read (CSV and Parquet inventories are)"),
                ));
            }
        };
        let columns: Vec<String> = doc
            .file_schema
            .split(',')
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .collect();
        if format == Format::Csv {
            for needed in ["Key", "ETag"] {
                if !columns.iter().any(|c| c == needed) {
                    return Err(invalid(
                        location,
                        format!(
                            "the inventory has no {needed} field (its fileSchema: {:?}); \
                             configure the inventory with the ETag and Size fields",
                            doc.file_schema
                        ),
                    ));
                }
            }
        }
        Ok(Self {
            location: location.to_string(),
            bucket,
            format,
            columns,
            files: doc.files.into_iter().map(|f| f.key).collect(),
        })
    }
}

/// A position in an inventory: the row `row` of data file `file`.
fn parse_position(s: &str) -> Option<(usize, u64)> {
    let (f, r) = s.split_once(':')?;
    Some((f.parse().ok()?, r.parse().ok()?))
}

fn position(file: usize, row: u64) -> String {
    format!("{file}:{row}")
}

/// One row of a data file: the object it describes, if it is a current object.
type Row = Option<ObjectMeta>;

/// The rows of an inventory after a position, a page at a time (see
/// [`crate::backfill`]).
pub struct InventoryWalk {
    manifest: Manifest,
    /// The data file being read, and the index of the next row it yields.
    file: usize,
    next_row: u64,
    /// Rows of the current file before this index are passed over (a resumed position).
    skip_to: u64,
    /// Stop after this position.
    through: Option<(usize, u64)>,
    rows: Option<mpsc::Receiver<Result<Vec<Row>>>>,
}

impl InventoryWalk {
    /// A walk starting after position `after` (from the start when `None`), stopping after
    /// `through` when given.
    pub fn new(
        manifest: &Manifest,
        after: Option<String>,
        through: Option<String>,
    ) -> Result<Self> {
        let bad = |p: &str| {
            invalid(
                &manifest.location,
                format!("{p:?} is not an inventory position <file>:<row>"),
            )
        };
        let (file, skip_to) = match after.as_deref() {
            None => (0, 0),
            Some(a) => parse_position(a)
                .map(|(f, r)| (f, r + 1))
                .ok_or_else(|| bad(a))?,
        };
        let through = match through.as_deref() {
            None => None,
            Some(t) => Some(parse_position(t).ok_or_else(|| bad(t))?),
        };
        Ok(Self {
            manifest: manifest.clone(),
            file,
            next_row: 0,
            skip_to,
            through,
            rows: None,
        })
    }

    /// The next page: up to a thousand rows of one data file, the objects among them with
    /// their positions, and the position of the page's last row.
    pub(crate) async fn next(
        &mut self,
        store: &dyn ObjectStore,
    ) -> Result<Option<(Vec<(ObjectMeta, String)>, String)>> {
        loop {
            if self.file >= self.manifest.files.len()
                || self
                    .through
                    .is_some_and(|(f, r)| (self.file, self.next_row) > (f, r))
            {
                return Ok(None);
            }
            let rows = match &mut self.rows {
                Some(rows) => rows,
                None => {
                    let key = &self.manifest.files[self.file];
                    let body = match store.get(&self.manifest.bucket, key, None).await? {
                        GetOutcome::Found { body, .. } => body,
                        _ => {
                            return Err(invalid(
                                &self.manifest.location,
                                format!("data file s3://{}/{key} is missing", self.manifest.bucket),
                            ));
                        }
                    };
                    self.next_row = 0;
                    self.rows.insert(read_file(
                        body,
                        self.manifest.format,
                        self.manifest.columns.clone(),
                        format!("s3://{}/{key}", self.manifest.bucket),
                    ))
                }
            };
            let Some(chunk) = rows.recv().await else {
                // The file is done: the next one.
                self.rows = None;
                self.file += 1;
                self.skip_to = 0;
                continue;
            };
            let mut entries = Vec::new();
            let mut last = None;
            for row in chunk? {
                let (file, index) = (self.file, self.next_row);
                self.next_row += 1;
                if index < self.skip_to {
                    continue;
                }
                if self.through.is_some_and(|t| (file, index) > t) {
                    break;
                }
                let pos = position(file, index);
                if let Some(object) = row {
                    entries.push((object, pos.clone()));
                }
                last = Some(pos);
            }
            if let Some(end) = last {
                return Ok(Some((entries, end)));
            }
        }
    }
}

/// Read a data file on a blocking thread, sending its rows in chunks of a page.
fn read_file(
    body: Body,
    format: Format,
    columns: Vec<String>,
    name: String,
) -> mpsc::Receiver<Result<Vec<Row>>> {
    let (tx, rx) = mpsc::channel(2);
    tokio::task::spawn_blocking(move || {
        let reader = BufReader::new(SyncIoBridge::new(body));
        let sent = match format {
            Format::Csv => read_csv(reader, &columns, &tx, &name),
            Format::Parquet => read_parquet(reader, &tx, &name),
        };
        if let Err(e) = sent {
            let _ = tx.blocking_send(Err(e));
        }
    });
    rx
}

fn file_error(name: &str, message: impl std::fmt::Display) -> ProcessError {
    ProcessError::Inventory {
        location: name.to_string(),
        message: message.to_string(),
    }
}

/// The values of the columns a row needs, by their names in a CSV report.
struct Columns<'a> {
    bucket: Option<&'a dyn Array>,
    key: &'a dyn Array,
    etag: &'a dyn Array,
    size: Option<&'a dyn Array>,
    modified: Option<&'a dyn Array>,
    version_id: Option<&'a dyn Array>,
    is_latest: Option<&'a dyn Array>,
    is_delete_marker: Option<&'a dyn Array>,
}

fn text(a: &dyn Array, i: usize) -> Option<String> {
    if a.is_null(i) {
        return None;
    }
    match a.data_type() {
        DataType::Utf8 => Some(a.as_string::<i32>().value(i).to_string()),
        DataType::LargeUtf8 => Some(a.as_string::<i64>().value(i).to_string()),
        DataType::Utf8View => Some(a.as_string_view().value(i).to_string()),
        DataType::Binary => {
            Some(String::from_utf8_lossy(a.as_binary::<i32>().value(i)).into_owned())
        }
        _ => None,
    }
}

fn flag(a: Option<&dyn Array>, i: usize) -> Option<bool> {
    let a = a?;
    if a.is_null(i) {
        return None;
    }
    match a.data_type() {
        DataType::Boolean => Some(a.as_boolean().value(i)),
        _ => text(a, i).map(|t| t.eq_ignore_ascii_case("true")),
    }
}

fn number(a: Option<&dyn Array>, i: usize) -> Option<i64> {
    let a = a?;
    if a.is_null(i) {
        return None;
    }
    match a.data_type() {
        DataType::Int64 => Some(a.as_primitive::<Int64Type>().value(i)),
        DataType::Timestamp(..) => arrow_cast::cast(
            &a.slice(i, 1),
            &DataType::Timestamp(TimeUnit::Millisecond, None),
        )
        .ok()
        .and_then(|c| arrow_cast::cast(&c, &DataType::Int64).ok())
        .map(|c| c.as_primitive::<Int64Type>().value(0)),
        _ => text(a, i).and_then(|t| {
            t.parse::<i64>().ok().or_else(|| {
                chrono::DateTime::parse_from_rfc3339(&t)
                    .ok()
                    .map(|d| d.timestamp_millis())
            })
        }),
    }
}

impl Columns<'_> {
    fn row(&self, i: usize, url_encoded: bool, name: &str) -> Result<Row> {
        if flag(self.is_delete_marker, i) == Some(true) || flag(self.is_latest, i) == Some(false) {
            return Ok(None);
        }
        let raw =
            text(self.key, i).ok_or_else(|| file_error(name, format!("row {}: no key", i + 1)))?;
        let key = if url_encoded {
            crate::events::decode_form_key(&raw)
                .map_err(|e| file_error(name, format!("row {}: {e}", i + 1)))?
        } else {
            raw
        };
        let etag = text(self.etag, i)
            .map(|e| e.trim_matches('"').to_string())
            .filter(|e| !e.is_empty())
            .ok_or_else(|| file_error(name, format!("row {}: key {key:?} has no ETag", i + 1)))?;
        let _ = self.bucket;
        Ok(Some(ObjectMeta {
            key,
            etag,
            size: number(self.size, i).map_or(0, |s| s.max(0) as u64),
            version_id: self
                .version_id
                .and_then(|v| text(v, i))
                .filter(|v| !v.is_empty() && v != "null"),
            last_modified: number(self.modified, i).unwrap_or(0),
            metadata: Default::default(),
        }))
    }
}

fn send_batch(
    batch: &RecordBatch,
    names: &HashMap<&str, usize>,
    url_encoded: bool,
    tx: &mpsc::Sender<Result<Vec<Row>>>,
    name: &str,
) -> Result<bool> {
    let col = |n: &str| names.get(n).map(|&i| batch.column(i).as_ref());
    let missing = |n: &str| file_error(name, format!("no column {n}"));
    let columns = Columns {
        bucket: col("bucket"),
        key: col("key").ok_or_else(|| missing("key"))?,
        etag: col("e_tag").ok_or_else(|| missing("e_tag (ETag)"))?,
        size: col("size"),
        modified: col("last_modified_date"),
        version_id: col("version_id"),
        is_latest: col("is_latest"),
        is_delete_marker: col("is_delete_marker"),
    };
    let mut start = 0;
    while start < batch.num_rows() {
        let end = (start + PAGE_ROWS).min(batch.num_rows());
        let rows = (start..end)
            .map(|i| columns.row(i, url_encoded, name))
            .collect::<Result<Vec<_>>>()?;
        if tx.blocking_send(Ok(rows)).is_err() {
            return Ok(false); // the walk stopped reading
        }
        start = end;
    }
    Ok(true)
}

/// `LastModifiedDate` → `last_modified_date`, `ETag` → `e_tag`: the Parquet reports' names.
fn snake(name: &str) -> String {
    match name {
        "ETag" => "e_tag".into(),
        other => {
            let mut out = String::new();
            for (i, c) in other.chars().enumerate() {
                if c.is_ascii_uppercase() {
                    if i > 0 {
                        out.push('_');
                    }
                    out.push(c.to_ascii_lowercase());
                } else {
                    out.push(c);
                }
            }
            out
        }
    }
}

fn read_csv(
    reader: impl std::io::BufRead + Send,
    columns: &[String],
    tx: &mpsc::Sender<Result<Vec<Row>>>,
    name: &str,
) -> Result<()> {
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|c| Field::new(snake(c), DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let names: HashMap<&str, usize> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| (f.name().as_str(), i))
        .collect();
    let gz = flate2::bufread::MultiGzDecoder::new(reader);
    let csv = arrow_csv::ReaderBuilder::new(schema.clone())
        .with_header(false)
        .with_batch_size(8192)
        .build(BufReader::new(gz))
        .map_err(|e| file_error(name, e))?;
    for batch in csv {
        let batch = batch.map_err(|e| file_error(name, e))?;
        if !send_batch(&batch, &names, true, tx, name)? {
            break;
        }
    }
    Ok(())
}

fn read_parquet(
    reader: impl std::io::BufRead + Send,
    tx: &mpsc::Sender<Result<Vec<Row>>>,
    name: &str,
) -> Result<()> {
    use parquet::arrow::ProjectionMask;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let file = crate::convert::typed::spool(reader).map_err(|e| file_error(name, e))?;
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| file_error(name, e))?;
    let wanted = [
        "bucket",
        "key",
        "e_tag",
        "size",
        "last_modified_date",
        "version_id",
        "is_latest",
        "is_delete_marker",
    ];
    let roots: Vec<usize> = builder
        .schema()
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| wanted.contains(&f.name().as_str()))
        .map(|(i, _)| i)
        .collect();
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
    let reader = builder
        .with_projection(mask)
        .with_batch_size(8192)
        .build()
        .map_err(|e| file_error(name, e))?;
    for batch in reader {
        let batch = batch.map_err(|e| file_error(name, e))?;
        let schema = batch.schema();
        let names: HashMap<&str, usize> = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name().as_str(), i))
            .collect();
        if !send_batch(&batch, &names, false, tx, name)? {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_names_its_files_and_must_be_of_the_sources_bucket() {
        let json = br#"{"sourceBucket": "landing", "destinationBucket": "arn:aws:s3:::inv",
            "version": "2016-11-30", "fileFormat": "CSV",
            "fileSchema": "Bucket, Key, Size, LastModifiedDate, ETag, IsLatest",
            "files": [{"key": "inv/landing/cfg/data/a.csv.gz", "size": 1, "MD5checksum": "x"}]}"#;
        let m = Manifest::parse("s3://inv/m.json", json, "landing").unwrap();
        assert_eq!((m.bucket.as_str(), m.format), ("inv", Format::Csv));
        assert_eq!(m.files, ["inv/landing/cfg/data/a.csv.gz"]);
        assert_eq!(m.columns[4], "ETag");
        let e = Manifest::parse("s3://inv/m.json", json, "other").unwrap_err();
        assert!(
            e.to_string().contains("inventory of bucket \"landing\""),
            "{e}"
        );
        let no_etag = String::from_utf8_lossy(json).replace(", ETag", "");
        let e = Manifest::parse("s3://inv/m.json", no_etag.as_bytes(), "landing").unwrap_err();
        assert!(e.to_string().contains("no ETag field"), "{e}");
        let orc = String::from_utf8_lossy(json).replace("\"CSV\"", "\"ORC\"");
        let e = Manifest::parse("s3://inv/m.json", orc.as_bytes(), "landing").unwrap_err();
        assert!(e.to_string().contains("\"orc\" is not read"), "{e}");
    }

    #[test]
    fn names_and_positions() {
        assert_eq!(snake("LastModifiedDate"), "last_modified_date");
        assert_eq!(snake("IsDeleteMarker"), "is_delete_marker");
        assert_eq!(snake("ETag"), "e_tag");
        assert_eq!(parse_position("3:999"), Some((3, 999)));
        assert_eq!(parse_position("x"), None);
        assert_eq!(parse_location("s3://b/k/m.json"), Some(("b", "k/m.json")));
        assert_eq!(parse_location("b/k"), None);
    }
}
