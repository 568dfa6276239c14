//! Parquet row groups encoded column by column on several threads.
//!
//! [`ColumnsWriter`] writes the same bytes as [`ArrowWriter`] with the same properties: it
//! starts from one (so the footer, the schema and the Arrow metadata are the writer's own),
//! closes row groups by the same rule, and feeds each column's writer the same values in
//! the same order. Only who runs a column's writer differs: every batch's columns are shared
//! out among the threads, the costliest first, by what each column cost in the batch before
//! (longest-processing-time scheduling), and the threads meet again before the next batch.
//! Which thread encodes a column never changes the column's bytes.

use std::io::Write;
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_writer::{
    ArrowColumnChunk, ArrowColumnWriter, ArrowRowGroupWriterFactory, compute_leaves,
};
use parquet::errors::{ParquetError, Result};
use parquet::file::writer::SerializedFileWriter;

pub(super) struct ColumnsWriter<W: Write + Send> {
    file: SerializedFileWriter<W>,
    factory: ArrowRowGroupWriterFactory,
    schema: SchemaRef,
    /// The row group in progress: one writer per column (empty: none in progress).
    columns: Vec<ArrowColumnWriter>,
    buffered_rows: usize,
    max_rows: Option<usize>,
    max_bytes: Option<usize>,
    threads: usize,
    /// What each column cost in the last batch, in nanoseconds.
    cost: Vec<u64>,
    /// What closing each column cost at the last row group, in nanoseconds.
    close_cost: Vec<u64>,
}

impl<W: Write + Send> ColumnsWriter<W> {
    /// Takes over `writer`, which must not have been written to, to run on `threads` threads.
    pub(super) fn new(writer: ArrowWriter<W>, schema: SchemaRef, threads: usize) -> Result<Self> {
        let (file, factory) = writer.into_serialized_writer()?;
        let (max_rows, max_bytes) = (
            file.properties().max_row_group_row_count(),
            file.properties().max_row_group_bytes(),
        );
        if schema.fields().iter().any(|f| f.data_type().is_nested()) {
            // One writer per field below; nested fields have several leaves.
            return Err(ParquetError::NYI(
                "nested columns on several threads".into(),
            ));
        }
        Ok(Self {
            file,
            factory,
            cost: vec![0; schema.fields().len()],
            close_cost: vec![0; schema.fields().len()],
            schema,
            columns: Vec::new(),
            buffered_rows: 0,
            max_rows,
            max_bytes,
            threads: threads.max(1),
        })
    }

    fn estimated_bytes(&self) -> usize {
        self.columns
            .iter()
            .map(ArrowColumnWriter::get_estimated_total_bytes)
            .sum()
    }

    /// Writes `batch`, closing row groups where [`ArrowWriter::write`] would.
    pub(super) fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let mut remaining = batch.clone();
        loop {
            if self.columns.is_empty() {
                let index = self.file.flushed_row_groups().len();
                self.columns = self.factory.create_column_writers(index)?;
                self.buffered_rows = 0;
            }
            let buffered = self.buffered_rows;
            let mut split_at = match self.max_rows {
                Some(max) if buffered + remaining.num_rows() > max => Some(max - buffered),
                _ => None,
            };
            let candidate_rows = split_at.unwrap_or_else(|| remaining.num_rows());
            if let Some(max_bytes) = self.max_bytes
                && buffered > 0
            {
                let current = self.estimated_bytes();
                if current >= max_bytes {
                    self.flush()?;
                    continue;
                }
                if let Some(fit) = (max_bytes - current).checked_div(current / buffered)
                    && candidate_rows > fit
                {
                    if fit == 0 {
                        self.flush()?;
                        continue;
                    }
                    split_at = Some(fit);
                }
            }
            let rest = split_at.map(|at| {
                let rest = remaining.slice(at, remaining.num_rows() - at);
                remaining = remaining.slice(0, at);
                rest
            });
            self.write_columns(&remaining)?;
            self.buffered_rows += remaining.num_rows();
            let full = self.max_rows.is_some_and(|max| self.buffered_rows >= max)
                || self
                    .max_bytes
                    .is_some_and(|max| self.estimated_bytes() >= max);
            if full {
                self.flush()?;
            }
            match rest {
                Some(rest) => remaining = rest,
                None => return Ok(()),
            }
        }
    }

    fn write_columns(&mut self, batch: &RecordBatch) -> Result<()> {
        let fields = self.schema.fields();
        let work = |index: usize, writer: &mut ArrowColumnWriter| -> Result<()> {
            for leaf in compute_leaves(&fields[index], batch.column(index))? {
                writer.write(&leaf)?;
            }
            Ok(())
        };
        let columns = std::mem::take(&mut self.columns);
        let (columns, result) = shared_out(columns, &mut self.cost, self.threads, work);
        self.columns = columns;
        result
    }

    /// Closes the row group in progress and writes it to the file.
    fn flush(&mut self) -> Result<()> {
        if self.columns.is_empty() {
            return Ok(());
        }
        let columns = std::mem::take(&mut self.columns);
        let mut chunks: Vec<Option<ArrowColumnChunk>> = Vec::new();
        chunks.resize_with(columns.len(), || None);
        let slots = std::sync::Mutex::new(&mut chunks);
        let (_, result) = shared_out(
            columns.into_iter().map(Some).collect::<Vec<_>>(),
            &mut self.close_cost,
            self.threads,
            |index, writer: &mut Option<ArrowColumnWriter>| {
                let chunk = writer.take().expect("each column closed once").close()?;
                slots.lock().expect("no panics while held")[index] = Some(chunk);
                Ok(())
            },
        );
        result?;
        let mut row_group = self.file.next_row_group()?;
        for chunk in chunks {
            chunk
                .expect("every column closed")
                .append_to_row_group(&mut row_group)?;
        }
        row_group.close()?;
        Ok(())
    }

    /// Finishes the file; returns its number of row groups.
    pub(super) fn close(mut self) -> Result<usize> {
        self.flush()?;
        Ok(self.file.close()?.num_row_groups())
    }
}

/// Runs `work` on every column, shared out among `threads` threads by `cost`, the nanoseconds
/// each column took last time (updated); returns the columns (in their order) and the first
/// error.
fn shared_out<T: Send>(
    mut columns: Vec<T>,
    cost: &mut [u64],
    threads: usize,
    work: impl Fn(usize, &mut T) -> Result<()> + Sync,
) -> (Vec<T>, Result<()>) {
    let threads = threads.min(columns.len()).max(1);
    // Longest processing time first, each column to the least loaded thread.
    let mut order: Vec<usize> = (0..columns.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(cost[i]));
    let mut load = vec![0u64; threads];
    let mut owner = vec![0usize; columns.len()];
    for &i in &order {
        let least = (0..threads).min_by_key(|&t| load[t]).expect("a thread");
        owner[i] = least;
        load[least] += cost[i].max(1);
    }
    let mut shares: Vec<Vec<(usize, &mut T)>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, column) in columns.iter_mut().enumerate() {
        shares[owner[i]].push((i, column));
    }
    let run = |share: Vec<(usize, &mut T)>| -> (Vec<(usize, u64)>, Result<()>) {
        let mut costs = Vec::with_capacity(share.len());
        for (i, column) in share {
            let start = Instant::now();
            if let Err(e) = work(i, column) {
                return (costs, Err(e));
            }
            costs.push((i, start.elapsed().as_nanos() as u64));
        }
        (costs, Ok(()))
    };
    let mut shares = shares.into_iter();
    let mine = shares.next().expect("at least one thread");
    let outcomes = std::thread::scope(|scope| {
        let others: Vec<_> = shares.map(|s| scope.spawn(|| run(s))).collect();
        let mut outcomes = vec![run(mine)];
        for other in others {
            outcomes.push(
                other
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            );
        }
        outcomes
    });
    let mut result = Ok(());
    for (costs, outcome) in outcomes {
        for (i, nanos) in costs {
            cost[i] = nanos;
        }
        if result.is_ok() {
            result = outcome;
        }
    }
    (columns, result)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use parquet::basic::Compression;
    use parquet::file::properties::WriterProperties;

    use super::*;
    use crate::convert::testutil::xorshift;

    /// Batches of random sizes: an id counting up, a nullable number, a string of a few
    /// values and a long free-text string.
    fn batches(seed: u64, count: usize) -> (SchemaRef, Vec<RecordBatch>) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("amount", DataType::Int64, true),
            Field::new("status", DataType::Utf8, false),
            Field::new("text", DataType::Utf8, true),
        ]));
        let mut next = xorshift(seed);
        let mut id = 0i64;
        let batches = (0..count)
            .map(|_| {
                let rows = (next() % 3000) as usize; // some empty
                let ids: Vec<i64> = (0..rows)
                    .map(|_| {
                        id += 1;
                        id
                    })
                    .collect();
                let amounts: Vec<Option<i64>> = (0..rows)
                    .map(|_| (next() % 5 != 0).then(|| (next() % 100_000) as i64))
                    .collect();
                let statuses: Vec<&str> = (0..rows)
                    .map(|_| ["new", "paid", "sent"][(next() % 3) as usize])
                    .collect();
                let texts: Vec<Option<String>> = (0..rows)
                    .map(|_| {
                        (next() % 7 != 0).then(|| {
                            let len = (next() % 300) as usize;
                            (0..len)
                                .map(|_| char::from(b'a' + (next() % 26) as u8))
                                .collect()
                        })
                    })
                    .collect();
                let columns: Vec<ArrayRef> = vec![
                    Arc::new(Int64Array::from(ids)),
                    Arc::new(Int64Array::from(amounts)),
                    Arc::new(StringArray::from(statuses)),
                    Arc::new(StringArray::from(texts)),
                ];
                RecordBatch::try_new(schema.clone(), columns).unwrap()
            })
            .collect();
        (schema, batches)
    }

    #[test]
    fn columns_on_several_threads_give_the_arrow_writers_bytes() {
        for (seed, max_rows, max_bytes, dictionary) in [
            (1, Some(5_000), None, true),
            (2, None, Some(200_000), true),
            (3, Some(7_777), Some(1 << 20), false),
            (4, Some(1), None, true), // a row group per row
            (5, None, None, true),    // one row group
        ] {
            let (schema, batches) = batches(seed, if max_rows == Some(1) { 1 } else { 20 });
            let properties = || {
                WriterProperties::builder()
                    .set_compression(Compression::SNAPPY)
                    .set_max_row_group_row_count(max_rows)
                    .set_max_row_group_bytes(max_bytes)
                    .set_dictionary_enabled(dictionary)
                    .build()
            };
            let mut expected = Vec::new();
            let mut one =
                ArrowWriter::try_new(&mut expected, schema.clone(), Some(properties())).unwrap();
            for batch in &batches {
                one.write(batch).unwrap();
            }
            let groups = one.close().unwrap().num_row_groups();
            assert!(
                groups > 1 || max_rows.is_none(),
                "seed {seed}: {groups} row groups"
            );
            for threads in [1, 2, 3, 8] {
                let mut got = Vec::new();
                let writer =
                    ArrowWriter::try_new(&mut got, schema.clone(), Some(properties())).unwrap();
                let mut columns = ColumnsWriter::new(writer, schema.clone(), threads).unwrap();
                for batch in &batches {
                    columns.write(batch).unwrap();
                }
                assert_eq!(
                    columns.close().unwrap(),
                    groups,
                    "seed {seed}, {threads} threads"
                );
                assert!(
                    got == expected,
                    "seed {seed}, {threads} threads: {} bytes, expected {}",
                    got.len(),
                    expected.len()
                );
            }
        }
    }
}
