//! Upsert by business key (`output.table.merge_keys`): which rows of a table's files win.
//!
//! A source merged by key keeps, in its table, one file per live object: the object's own
//! output when every row of it wins, else a copy holding only its winning rows (possibly
//! none). Which rows win is a function of the live objects alone ([`winners`]), never of the
//! order they were processed or published in, so duplicated and reordered events, crashes
//! and racing committers all end in the same table. The objects' own outputs are never
//! changed: when a winning object is replaced or deleted, the rows it had beaten come back
//! from them.
//!
//! Keys and order values are compared in Arrow's row format, whose bytes sort as the values
//! do (NULL first, so a NULL order loses to any value).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, RecordBatch};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::{DataType, SchemaRef};
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{ArrowWriter, ProjectionMask};

use crate::compact::{properties, strip};

/// A file that cannot be read or written for the upsert.
#[derive(Debug, thiserror::Error)]
pub enum UpsertError {
    /// Parquet could not read or write it.
    #[error("{0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// A column could not be read or cast to its declared type.
    #[error("{0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    /// A key or order column is not in the file.
    #[error("column {0:?} is not in the file")]
    Missing(String),
    /// The selection does not match the file's rows.
    #[error("{selected} rows selected of a file of {rows}")]
    Rows {
        /// Rows in the selection.
        selected: usize,
        /// Rows in the file.
        rows: usize,
    },
}

/// The key and order columns of an upsert, with their declared types.
pub struct Columns {
    keys: Vec<(String, DataType)>,
    order: Option<(String, DataType)>,
    key_rows: RowConverter,
    order_rows: Option<RowConverter>,
}

/// The key and order values of one file's rows, in the row format.
pub struct KeyedRows {
    keys: Rows,
    order: Option<Rows>,
}

impl KeyedRows {
    /// Rows of the file.
    pub fn len(&self) -> usize {
        self.keys.num_rows()
    }

    /// The file has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row `i`'s key, as bytes equal exactly when the keys are.
    pub fn key(&self, i: usize) -> &[u8] {
        self.keys.row(i).data()
    }

    /// Row `i`'s order value, as bytes that sort as the values do (empty without an order).
    pub fn order(&self, i: usize) -> &[u8] {
        self.order.as_ref().map_or(&[], |o| o.row(i).data())
    }
}

impl Columns {
    /// The columns `keys` and `order` of the declared `schema`.
    pub fn new(
        schema: &SchemaRef,
        keys: &[String],
        order: Option<&str>,
    ) -> Result<Self, UpsertError> {
        let typed = |name: &str| {
            schema
                .field_with_name(name)
                .map(|f| (name.to_string(), f.data_type().clone()))
                .map_err(|_| UpsertError::Missing(name.to_string()))
        };
        let keys = keys
            .iter()
            .map(|k| typed(k))
            .collect::<Result<Vec<_>, _>>()?;
        let order = order.map(typed).transpose()?;
        let key_rows = RowConverter::new(
            keys.iter()
                .map(|(_, t)| SortField::new(t.clone()))
                .collect(),
        )?;
        let order_rows = order
            .as_ref()
            .map(|(_, t)| RowConverter::new(vec![SortField::new(t.clone())]))
            .transpose()?;
        Ok(Self {
            keys,
            order,
            key_rows,
            order_rows,
        })
    }

    /// The keys and order values of the rows of the Parquet file `bytes` (only those columns
    /// are decoded, cast to their declared types).
    pub fn read(&self, bytes: Bytes) -> Result<KeyedRows, UpsertError> {
        let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)?;
        let names: Vec<&str> = self
            .keys
            .iter()
            .chain(&self.order)
            .map(|(n, _)| n.as_str())
            .collect();
        for n in &names {
            if builder.schema().field_with_name(n).is_err() {
                return Err(UpsertError::Missing(n.to_string()));
            }
        }
        let mask = ProjectionMask::columns(builder.parquet_schema(), names.iter().copied());
        let rows = builder.metadata().file_metadata().num_rows().max(0) as usize;
        let reader = builder.with_projection(mask).build()?;
        let mut keys = self.key_rows.empty_rows(rows, rows * 8);
        let mut order = self
            .order_rows
            .as_ref()
            .map(|c| c.empty_rows(rows, rows * 8));
        for batch in reader {
            let batch = batch?;
            let column = |(name, ty): &(String, DataType)| -> Result<ArrayRef, UpsertError> {
                let c = batch
                    .column_by_name(name)
                    .ok_or_else(|| UpsertError::Missing(name.clone()))?;
                Ok(arrow_cast::cast(c, ty)?)
            };
            let key_columns = self
                .keys
                .iter()
                .map(column)
                .collect::<Result<Vec<_>, _>>()?;
            self.key_rows.append(&mut keys, &key_columns)?;
            if let (Some(spec), Some(conv), Some(rows)) =
                (&self.order, &self.order_rows, order.as_mut())
            {
                conv.append(rows, &[column(spec)?])?;
            }
        }
        Ok(KeyedRows { keys, order })
    }
}

/// Which rows of `files` win: for every key, the row with the greatest order value, then
/// of the file with the greatest rank (the object's name), then path, then the later row.
/// `files` are `(rank, path, rows)`; the answer has one selection per file, in their order.
pub fn winners(files: &[(&str, &str, &KeyedRows)]) -> Vec<Vec<bool>> {
    let mut best: HashMap<&[u8], (usize, usize)> = HashMap::new();
    for (f, (_, _, rows)) in files.iter().enumerate() {
        for i in 0..rows.len() {
            match best.entry(rows.key(i)) {
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert((f, i));
                }
                std::collections::hash_map::Entry::Occupied(mut o) => {
                    let (g, j) = *o.get();
                    let mine = (rows.order(i), files[f].0, files[f].1, i);
                    let theirs = (files[g].2.order(j), files[g].0, files[g].1, j);
                    if mine > theirs {
                        o.insert((f, i));
                    }
                }
            }
        }
    }
    let mut selected: Vec<Vec<bool>> = files.iter().map(|(_, _, r)| vec![false; r.len()]).collect();
    for (f, i) in best.into_values() {
        selected[f][i] = true;
    }
    selected
}

/// A short, stable name of a selection (which rows of a file are kept).
pub fn selection_hash(selected: &[bool]) -> String {
    let rows = selected
        .iter()
        .enumerate()
        .filter(|(_, s)| **s)
        .map(|(i, _)| i as u64)
        .chain([selected.len() as u64]);
    let h = crate::config::fnv1a_bytes(rows.flat_map(u64::to_le_bytes));
    format!("{h:016x}")
}

/// The Parquet file `bytes` with only the `selected` rows (every column; a file with no
/// rows when none is).
pub fn select(bytes: Bytes, selected: &[bool]) -> Result<Bytes, UpsertError> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)?;
    let schema = strip(builder.schema());
    let rows = builder.metadata().file_metadata().num_rows().max(0) as usize;
    if rows != selected.len() {
        return Err(UpsertError::Rows {
            selected: selected.len(),
            rows,
        });
    }
    let mut writer = ArrowWriter::try_new(Vec::new(), schema.clone(), Some(properties()))?;
    let mut at = 0;
    for batch in builder.build()? {
        let batch = batch?;
        let n = batch.num_rows();
        let mask = BooleanArray::from(selected[at..at + n].to_vec());
        at += n;
        let kept = arrow_select::filter::filter_record_batch(&batch, &mask)?;
        if kept.num_rows() > 0 {
            writer.write(&RecordBatch::try_new(
                schema.clone(),
                kept.columns().to_vec(),
            )?)?;
        }
    }
    Ok(Bytes::from(writer.into_inner()?))
}

/// Shared across a table's publishes: keyed rows by the output they were read from (outputs
/// never change).
pub type KeyedCache = HashMap<String, Arc<KeyedRows>>;

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{Field, Schema};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
            Field::new("at", DataType::Int64, true),
        ]))
    }

    fn file(rows: &[(i64, &str, Option<i64>)]) -> Bytes {
        let batch = RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.2))),
            ],
        )
        .unwrap();
        let mut w = ArrowWriter::try_new(Vec::new(), schema(), None).unwrap();
        w.write(&batch).unwrap();
        Bytes::from(w.into_inner().unwrap())
    }

    #[test]
    fn the_greatest_order_wins_then_the_object_then_the_later_row() {
        let cols = Columns::new(&schema(), &["id".to_string()], Some("at")).unwrap();
        let a = cols
            .read(file(&[
                (1, "a1", Some(5)),
                (2, "a2", Some(5)),
                (3, "a3", None),
                (1, "a1'", Some(5)),
            ]))
            .unwrap();
        let b = cols
            .read(file(&[
                (1, "b1", Some(4)),
                (2, "b2", Some(5)),
                (3, "b3", Some(0)),
            ]))
            .unwrap();
        // b sorts after a: it wins ties; a's later row of key 1 beats its earlier one; a
        // NULL order loses to 0.
        let w = winners(&[("a", "a.parquet", &a), ("b", "b.parquet", &b)]);
        assert_eq!(
            w,
            vec![vec![false, false, false, true], vec![false, true, true]]
        );
        // The answer does not depend on the order the files are given in.
        let w = winners(&[("b", "b.parquet", &b), ("a", "a.parquet", &a)]);
        assert_eq!(
            w,
            vec![vec![false, true, true], vec![false, false, false, true]]
        );
    }

    #[test]
    fn without_an_order_the_object_sorting_last_wins() {
        let cols = Columns::new(&schema(), &["id".to_string(), "v".to_string()], None).unwrap();
        let a = cols
            .read(file(&[(1, "x", Some(9)), (2, "x", None)]))
            .unwrap();
        let b = cols
            .read(file(&[(1, "x", Some(1)), (2, "y", None)]))
            .unwrap();
        let w = winners(&[("b", "b.parquet", &b), ("a", "a.parquet", &a)]);
        assert_eq!(w, vec![vec![true, true], vec![false, true]]);
    }

    #[test]
    fn a_selection_keeps_exactly_its_rows() {
        let bytes = file(&[(1, "a", Some(1)), (2, "b", None), (3, "c", Some(3))]);
        let kept = select(bytes.clone(), &[true, false, true]).unwrap();
        let batches: Vec<RecordBatch> = ParquetRecordBatchReaderBuilder::try_new(kept)
            .unwrap()
            .build()
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let ids: Vec<i64> = batches
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .values()
                    .to_vec()
            })
            .collect();
        assert_eq!(ids, vec![1, 3]);
        let none = select(bytes.clone(), &[false, false, false]).unwrap();
        let meta = ParquetRecordBatchReaderBuilder::try_new(none).unwrap();
        assert_eq!(meta.metadata().file_metadata().num_rows(), 0);
        assert!(matches!(
            select(bytes, &[true]),
            Err(UpsertError::Rows {
                selected: 1,
                rows: 3
            })
        ));
        assert_ne!(
            selection_hash(&[true, false]),
            selection_hash(&[false, true])
        );
        assert_ne!(selection_hash(&[true]), selection_hash(&[true, false]));
    }

    #[test]
    fn a_missing_key_column_is_named() {
        let cols = Columns::new(&schema(), &["id".to_string()], None).unwrap();
        let other = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let batch =
            RecordBatch::try_new(other.clone(), vec![Arc::new(Int64Array::from(vec![1]))]).unwrap();
        let mut w = ArrowWriter::try_new(Vec::new(), other, None).unwrap();
        w.write(&batch).unwrap();
        let err = cols
            .read(Bytes::from(w.into_inner().unwrap()))
            .err()
            .unwrap();
        assert!(err.to_string().contains("\"id\""), "{err}");
        assert!(Columns::new(&schema(), &["nope".to_string()], None).is_err());
    }
}
