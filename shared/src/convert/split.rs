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

/// Split `whole` (the object's output, of `totals`: its rows and sums) into one file per
/// partition under `dir`, in the order the partitions first appear; `sum_columns` are summed
/// per file. An object of one partition whose columns all stay in the files is that file as
/// it is (moved, not rewritten).
#[allow(clippy::too_many_arguments)]
pub fn split(
    whole: &Path,
    totals: (u64, &BTreeMap<String, SumValue>),
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

    // First pass, over the partition columns alone: the partitions, in order of first
    // appearance.
    let mut order: Vec<String> = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut roots: Vec<usize> = index.iter().map(|(i, _)| *i).collect();
    roots.sort_unstable();
    roots.dedup();
    let mask = parquet::arrow::ProjectionMask::roots(builder.parquet_schema(), roots.clone());
    let projected: Vec<(usize, &PartitionColumn)> = index
        .iter()
        .map(|(i, c)| (roots.iter().filter(|r| *r < i).count(), *c))
        .collect();
    for batch in builder.with_projection(mask).build().map_err(encode)? {
        let batch = batch.map_err(encode)?;
        spec.progress.tick(batch.num_rows() as u64);
        for d in dirs_of(&batch, &projected)? {
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

    // One partition, every column kept: the file is already the partition's.
    if order.len() == 1 && kept.len() == schema.fields().len() {
        let path = dir.join("part-000000.parquet");
        std::fs::rename(whole, &path)?;
        return Ok(vec![PartFile {
            dirs: order.remove(0),
            path,
            rows: totals.0,
            sums: totals.1.clone(),
        }]);
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
            spec.progress.tick(batch.num_rows() as u64);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::{InputFormat, convert};
    use crate::partition::Transform;

    fn column(from: &str, name: Option<&str>, transform: Transform) -> PartitionColumn {
        PartitionColumn {
            from: from.into(),
            name: name.map(str::to_string),
            transform,
        }
    }

    #[test]
    fn columns_in_any_order_and_twice_over_one_column_split_the_rows() {
        let dir = std::env::temp_dir().join(format!("tidemark-split-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let columns: Vec<crate::schema::ColumnSpec> = serde_json::from_str(
            r#"[{"name":"n","type":"int64"},{"name":"at","type":"timestamp"},{"name":"region","type":"string"}]"#,
        )
        .unwrap();
        let mut spec = ConvertSpec::with_columns(InputFormat::JsonLines, &columns);
        spec.sum_columns = vec!["n".into()];
        let input = concat!(
            r#"{"n":1,"at":"2026-11-29T10:00:00Z","region":"eu"}"#,
            "\n",
            r#"{"n":2,"at":"2026-12-01T10:00:00Z","region":"eu"}"#,
            "\n",
            r#"{"n":4,"at":"2026-11-30T10:00:00Z","region":"us"}"#,
            "\n",
            r#"{"n":8,"at":"2026-11-02T10:00:00Z","region":"eu"}"#,
            "\n",
        );
        let whole = dir.join("whole.parquet");
        let mut out = std::fs::File::create(&whole).unwrap();
        let stats = convert(input.as_bytes(), &spec, &mut out).unwrap();
        drop(out);
        let by = [
            column("region", None, Transform::Identity),
            column("at", Some("y"), Transform::Year),
            column("at", Some("m"), Transform::Month),
        ];
        let parts = split(
            &whole,
            (stats.rows, &stats.sums),
            &spec,
            &by,
            &spec.sum_columns,
            (2, 10),
            &dir,
        )
        .unwrap();
        let got: Vec<(String, u64, String)> = parts
            .iter()
            .map(|p| (p.dirs.clone(), p.rows, p.sums["n"].to_string()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "region=eu/y=2026/m=2026-11/".to_string(),
                    2,
                    "9".to_string()
                ),
                (
                    "region=eu/y=2026/m=2026-12/".to_string(),
                    1,
                    "2".to_string()
                ),
                (
                    "region=us/y=2026/m=2026-11/".to_string(),
                    1,
                    "4".to_string()
                ),
            ]
        );
        // `region` left the files: its value is the directory.
        let file = std::fs::File::open(&parts[0].path).unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
        let names: Vec<String> = reader
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["n", "at"]);
        // Over the limit: an error naming it.
        let whole2 = dir.join("again.parquet");
        let mut out = std::fs::File::create(&whole2).unwrap();
        convert(input.as_bytes(), &spec, &mut out).unwrap();
        drop(out);
        let e = split(
            &whole2,
            (stats.rows, &stats.sums),
            &spec,
            &by,
            &spec.sum_columns,
            (2, 2),
            &dir,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("more than 2 partitions (max_partitions_per_object)"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
