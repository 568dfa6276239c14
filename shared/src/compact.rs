//! Compacted table files: many objects' outputs in one Parquet file that still knows, row
//! group by row group, which object each row came from — so a later replace or delete of
//! one of those objects can take exactly its rows out again.
//!
//! A compacted file keeps each input file's rows in row groups of their own (one or more per
//! input, never shared), and lists them in its footer's key-value metadata under
//! [`MANIFEST_KEY`]: a JSON array of [`Entry`], in row-group order. Rewriting without some
//! objects ([`merge`] with a filter) decodes and re-encodes the kept row groups; values are
//! unchanged (same schema, same types).

use std::sync::Arc;

use arrow_array::RecordBatch;
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::{KeyValue, ParquetMetaData};
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};

/// The footer key holding a compacted file's manifest.
pub const MANIFEST_KEY: &str = "tidemark.compacted";

/// Where a compacted file's name starts (`<partition>/compacted-<hash>.parquet`).
pub const FILE_PREFIX: &str = "compacted-";

/// One input file inside a compacted file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The source key's hash (as in the input file's name).
    pub key_hash: String,
    /// The input file's path in the table (what the ledger's committed output names).
    pub path: String,
    /// Its rows.
    pub rows: u64,
    /// How many consecutive row groups hold them.
    pub row_groups: usize,
}

/// Why a compaction could not be written.
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    /// An input is not readable Parquet, or the output could not be written.
    #[error("{0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// An input's schema differs from the first one's.
    #[error("{path}: schema differs from the other files of the partition")]
    Schema {
        /// The input.
        path: String,
    },
    /// A compacted input's manifest does not match its row groups.
    #[error("{path}: manifest lists {listed} row groups, the file has {found}")]
    Manifest {
        /// The input.
        path: String,
        /// Row groups the manifest lists.
        listed: usize,
        /// Row groups in the file.
        found: usize,
    },
}

/// Is `path` (a table path) a compacted file's?
pub fn is_compacted(path: &str) -> bool {
    path.rsplit('/')
        .next()
        .is_some_and(|n| n.starts_with(FILE_PREFIX) && n.ends_with(".parquet"))
}

/// The manifest of a compacted file, from its footer; `None` for any other file.
pub fn manifest(metadata: &ParquetMetaData) -> Option<Vec<Entry>> {
    let kv = metadata.file_metadata().key_value_metadata()?;
    let text = kv
        .iter()
        .find(|k| k.key == MANIFEST_KEY)?
        .value
        .as_deref()?;
    serde_json::from_str(text).ok()
}

/// One input of [`merge`]: a file's bytes and what it holds (for a per-object file, one
/// entry of all its row groups; for a compacted file, its manifest).
pub struct Input {
    /// The file's path in the table (for messages).
    pub path: String,
    /// Its bytes.
    pub bytes: Bytes,
    /// Its entries, in row-group order.
    pub entries: Vec<Entry>,
}

/// Write the entries of `inputs` that `keep` accepts into one compacted file: the file, its
/// manifest and its rows. `None` when nothing is kept.
pub fn merge(
    inputs: &[Input],
    keep: impl Fn(&Entry) -> bool,
) -> Result<Option<(Bytes, Vec<Entry>, u64)>, CompactError> {
    let mut writer: Option<ArrowWriter<Vec<u8>>> = None;
    let mut schema = None;
    let mut written: Vec<Entry> = Vec::new();
    let mut rows_total = 0u64;
    for input in inputs {
        let builder = ParquetRecordBatchReaderBuilder::try_new(input.bytes.clone())?;
        let found = builder.metadata().num_row_groups();
        let listed: usize = input.entries.iter().map(|e| e.row_groups).sum();
        if listed != found {
            return Err(CompactError::Manifest {
                path: input.path.clone(),
                listed,
                found,
            });
        }
        let file_schema = builder.schema().clone();
        match &schema {
            None => schema = Some(file_schema.clone()),
            Some(s) if strip(s) != strip(&file_schema) => {
                return Err(CompactError::Schema {
                    path: input.path.clone(),
                });
            }
            Some(_) => {}
        }
        let mut first_group = 0;
        for entry in &input.entries {
            let groups: Vec<usize> = (first_group..first_group + entry.row_groups).collect();
            first_group += entry.row_groups;
            if !keep(entry) {
                continue;
            }
            let w = match &mut writer {
                Some(w) => w,
                None => writer.insert(ArrowWriter::try_new(
                    Vec::new(),
                    strip(schema.as_ref().expect("set above")),
                    Some(properties()),
                )?),
            };
            let before = w.flushed_row_groups().len();
            let reader = ParquetRecordBatchReaderBuilder::try_new(input.bytes.clone())?
                .with_row_groups(groups)
                .build()?;
            let mut rows = 0u64;
            for batch in reader {
                let batch = batch.map_err(parquet::errors::ParquetError::from)?;
                rows += batch.num_rows() as u64;
                let batch =
                    RecordBatch::try_new(strip(batch.schema_ref()), batch.columns().to_vec())
                        .map_err(parquet::errors::ParquetError::from)?;
                w.write(&batch)?;
            }
            w.flush()?;
            let row_groups = w.flushed_row_groups().len() - before;
            rows_total += rows;
            written.push(Entry {
                rows,
                row_groups,
                ..entry.clone()
            });
        }
    }
    let Some(mut w) = writer else {
        return Ok(None);
    };
    w.append_key_value_metadata(KeyValue::new(
        MANIFEST_KEY.to_string(),
        serde_json::to_string(&written).expect("entries serialize"),
    ));
    let bytes = w.into_inner()?;
    Ok(Some((Bytes::from(bytes), written, rows_total)))
}

/// The schema without metadata (the Arrow schema a reader rebuilds from a file carries the
/// file's key-value metadata, which differs between inputs).
pub(crate) fn strip(schema: &arrow_schema::SchemaRef) -> arrow_schema::SchemaRef {
    Arc::new(arrow_schema::Schema::new(schema.fields().clone()))
}

pub(crate) fn properties() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(
            ZstdLevel::try_new(3).expect("level 3 is valid"),
        ))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    fn file(ids: std::ops::Range<i64>) -> Bytes {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(ids.clone())),
                Arc::new(StringArray::from_iter_values(ids.map(|i| format!("v{i}")))),
            ],
        )
        .unwrap();
        let mut w = ArrowWriter::try_new(Vec::new(), schema, None).unwrap();
        w.write(&batch).unwrap();
        Bytes::from(w.into_inner().unwrap())
    }

    fn ids(bytes: &Bytes) -> Vec<i64> {
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes.clone())
            .unwrap()
            .build()
            .unwrap();
        reader
            .flat_map(|b| {
                let b = b.unwrap();
                b.column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .values()
                    .to_vec()
            })
            .collect()
    }

    fn single(path: &str, hash: &str, bytes: Bytes) -> Input {
        let n = ParquetRecordBatchReaderBuilder::try_new(bytes.clone())
            .unwrap()
            .metadata()
            .num_row_groups();
        Input {
            path: path.into(),
            entries: vec![Entry {
                key_hash: hash.into(),
                path: path.into(),
                rows: 0,
                row_groups: n,
            }],
            bytes,
        }
    }

    #[test]
    fn a_compacted_file_gives_back_exactly_the_objects_kept() {
        let inputs = vec![
            single("a.parquet", "a", file(0..5)),
            single("b.parquet", "b", file(10..13)),
            single("c.parquet", "c", file(20..24)),
        ];
        let (bytes, entries, rows) = merge(&inputs, |_| true).unwrap().unwrap();
        assert_eq!(rows, 12);
        assert_eq!(ids(&bytes), [0, 1, 2, 3, 4, 10, 11, 12, 20, 21, 22, 23]);
        let meta = ParquetRecordBatchReaderBuilder::try_new(bytes.clone())
            .unwrap()
            .metadata()
            .clone();
        assert_eq!(manifest(&meta).unwrap(), entries);
        assert_eq!(
            entries
                .iter()
                .map(|e| (e.key_hash.as_str(), e.rows))
                .collect::<Vec<_>>(),
            [("a", 5), ("b", 3), ("c", 4)]
        );
        // Without b, then without a: the rest, exactly.
        let compacted = Input {
            path: "compacted-1.parquet".into(),
            bytes,
            entries,
        };
        let (bytes, entries, rows) = merge(std::slice::from_ref(&compacted), |e| e.key_hash != "b")
            .unwrap()
            .unwrap();
        assert_eq!(
            (rows, ids(&bytes)),
            (9, vec![0, 1, 2, 3, 4, 20, 21, 22, 23])
        );
        let again = Input {
            path: "compacted-2.parquet".into(),
            bytes,
            entries,
        };
        let (bytes, _, _) = merge(std::slice::from_ref(&again), |e| e.key_hash != "a")
            .unwrap()
            .unwrap();
        assert_eq!(ids(&bytes), [20, 21, 22, 23]);
        assert!(merge(&[again], |_| false).unwrap().is_none());
        assert!(is_compacted("dt=2026-01-01/compacted-00ff.parquet"));
        assert!(!is_compacted("dt=2026-01-01/a.csv-00-00.parquet"));
    }

    #[test]
    fn a_manifest_that_does_not_match_the_file_is_refused() {
        let mut input = single("a.parquet", "a", file(0..5));
        input.entries[0].row_groups = 2;
        assert!(matches!(
            merge(&[input], |_| true),
            Err(CompactError::Manifest {
                listed: 2,
                found: 1,
                ..
            })
        ));
    }
}
