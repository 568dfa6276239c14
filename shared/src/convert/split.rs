//! One object's output split by partition values (`partitioning: {"columns": [...]}`): the
//! object is converted once, whole, into a local file; this reads it back and writes one
//! Parquet file per partition value, each with the writer settings of every output.
//!
//! Memory is bounded whatever the number of partitions: at most `max_open` partition writers
//! are open at once, each closing its row group at its share of the output's row group size
//! (at least 1 MiB), so together they hold about one row group; with more partitions the file is
//! read again for the next `max_open` of them, so an object spread over P partitions is read
//! `ceil(P / max_open)` times after a first pass that finds its partitions. More than
//! `max_partitions` partitions fails the object with an error naming the limit.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, UInt32Array};
use arrow_schema::Schema;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::{BatchTally, ConvertError, ConvertSpec, SumValue, writer_builder};
use crate::partition::{PartitionColumn, value_at};

/// One partition's file.
#[derive(Debug, Clone)]
pub struct PartFile {
    /// Its directories, `name=value/` per partition column (`dt=2026-11-29/region=eu/`).
    pub dirs: String,
    /// The local file.
    pub path: PathBuf,
    /// Rows in it.
    pub rows: u64,
    /// Sums of the sum columns in it.
    pub sums: BTreeMap<String, SumValue>,
}

fn encode(e: impl std::fmt::Display) -> ConvertError {
    ConvertError::Encode {
        message: e.to_string(),
    }
}

/// The partition directories of every row of `batch`.
fn dirs_of(
    batch: &RecordBatch,
    columns: &[(usize, &PartitionColumn)],
) -> Result<Vec<String>, ConvertError> {
    let arrays: Vec<(&ArrayRef, &PartitionColumn)> = columns
        .iter()
        .map(|(i, c)| (batch.column(*i), *c))
        .collect();
    (0..batch.num_rows())
        .map(|row| {
            let mut dirs = String::new();
            for (array, c) in &arrays {
                let value =
                    value_at(array, row, c.transform).map_err(|message| ConvertError::Parse {
                        line: None,
                        column: Some(c.from.clone()),
                        message: format!("partition {}: {message}", c.name()),
                    })?;
                dirs.push_str(c.name());
                dirs.push('=');
                dirs.push_str(&value);
                dirs.push('/');
            }
            Ok(dirs)
        })
        .collect()
}

/// Split `whole` (the object's output) into one file per partition under `dir`, in the order
/// the partitions first appear; `sum_columns` are summed per file.
pub fn split(
    whole: &Path,
    spec: &ConvertSpec,
    columns: &[PartitionColumn],
    sum_columns: &[String],
    (max_open, max_partitions): (usize, usize),
    dir: &Path,
) -> Result<Vec<PartFile>, ConvertError> {
    let open = || -> Result<_, ConvertError> {
        ParquetRecordBatchReaderBuilder::try_new(File::open(whole)?).map_err(encode)
    };
    let builder = open()?;
    let schema = builder.schema().clone();
    let metadata = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .cloned();
    let mut index = Vec::with_capacity(columns.len());
    for c in columns {
        let at = schema
            .index_of(&c.from)
            .map_err(|_| ConvertError::invalid_spec(format!("no output column {:?}", c.from)))?;
        index.push((at, c));
    }
    // The files keep every column but those whose value is their directory.
    let kept: Vec<usize> = (0..schema.fields().len())
        .filter(|i| {
            !columns
                .iter()
                .any(|c| c.moves_out() && schema.field(*i).name() == &c.from)
        })
        .collect();
    let out_schema = Arc::new(Schema::new_with_metadata(
        kept.iter()
            .map(|i| schema.field(*i).clone())
            .collect::<Vec<_>>(),
        schema.metadata().clone(),
    ));
    // The open writers share one row group's budget: each closes its row group at its share
    // (at least 1 MiB), so memory stays near what one output's row group takes.
    let share = (spec.row_group_bytes / max_open.max(1)).max(1 << 20);
    let props = writer_builder(spec, share)?
        .set_key_value_metadata(metadata)
        .build();

    // First pass: the partitions, in order of first appearance.
    let mut order: Vec<String> = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for batch in builder.build().map_err(encode)? {
        let batch = batch.map_err(encode)?;
        for d in dirs_of(&batch, &index)? {
            if !seen.contains_key(&d) {
                if order.len() == max_partitions {
                    return Err(ConvertError::Parse {
                        line: None,
                        column: None,
                        message: format!(
                            "the object's rows fall in more than {max_partitions} partitions \
                             (max_partitions_per_object)"
                        ),
                    });
                }
                seen.insert(d.clone(), order.len());
                order.push(d);
            }
        }
    }

    // Then the files, `max_open` partitions per pass.
    let mut parts = Vec::with_capacity(order.len());
    for (pass, chunk) in order.chunks(max_open.max(1)).enumerate() {
        let first = pass * max_open.max(1);
        let mut writers = Vec::with_capacity(chunk.len());
        for (i, dirs) in chunk.iter().enumerate() {
            let path = dir.join(format!("part-{:06}.parquet", first + i));
            let file = BufWriter::new(File::create(&path)?);
            let writer = ArrowWriter::try_new(file, out_schema.clone(), Some(props.clone()))
                .map_err(encode)?;
            let tally = BatchTally::new(&out_schema, sum_columns)?;
            writers.push((dirs.clone(), path, writer, tally));
        }
        for batch in open()?.build().map_err(encode)? {
            let batch = batch.map_err(encode)?;
            let dirs = dirs_of(&batch, &index)?;
            let mut rows: Vec<Vec<u32>> = vec![Vec::new(); chunk.len()];
            for (row, d) in dirs.iter().enumerate() {
                let at = seen[d];
                if at >= first && at < first + chunk.len() {
                    rows[at - first].push(row as u32);
                }
            }
            let kept_batch = batch.project(&kept).map_err(encode)?;
            for (i, take) in rows.into_iter().enumerate() {
                if take.is_empty() {
                    continue;
                }
                let indices = UInt32Array::from(take);
                let columns = kept_batch
                    .columns()
                    .iter()
                    .map(|c| arrow_select::take::take(c, &indices, None))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(encode)?;
                let part = RecordBatch::try_new(out_schema.clone(), columns).map_err(encode)?;
                let (_, _, writer, tally) = &mut writers[i];
                tally.add(&part)?;
                writer.write(&part).map_err(encode)?;
            }
        }
        for (dirs, path, writer, tally) in writers {
            writer.close().map_err(encode)?;
            let (rows, sums) = tally.finish();
            parts.push(PartFile {
                dirs,
                path,
                rows,
                sums,
            });
        }
    }
    Ok(parts)
}
