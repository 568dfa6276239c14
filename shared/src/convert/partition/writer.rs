//! One object converted into one Parquet file per partition, each row encoded once, in
//! memory bounded whatever the number of partitions.
//!
//! Rows are routed to their partition as they are decoded:
//!
//! - **One partition streams.** One partition is *live*: its rows go straight into its file's
//!   encoder, as an unpartitioned conversion writes them. The first is the one with the most
//!   rows of the first batch (of skewed data, likely the largest of all). An object of one
//!   partition, or sorted by the partition's time, never waits.
//! - **The others wait, then spill.** The rows of other partitions wait in the decoded
//!   batches; past [`Budget::buffer_bytes`] of them they are written to a spill file in Arrow
//!   IPC, one segment per partition ([`super::spill`]), and memory is free again.
//! - **The live partition changes** when a batch has none of its rows and most of them fall
//!   in another: the old one closes its row group (its file stays open, holding its footer's
//!   metadata only) and the new one first reads back what it had waiting. At most
//!   [`Budget::max_open`] files are open at once; past that, the live partition stays.
//! - **At the end** the live file is closed, then each other partition in turn reads back its
//!   segments and waiting rows, in the order they came, into its own encoder and is closed:
//!   one encoder at a time. Small segments (many partitions make them) are joined into
//!   batches of about a batch's rows on their way to the encoder.
//!
//! Every row is decoded once and encoded once; rows keep their order within each file; a
//! partition file's row groups are as large as an unpartitioned output's (closed by
//! [`ConvertSpec::row_group_rows`] and [`ConvertSpec::row_group_bytes`]), except where the
//! live partition changed, which ends its row group there.
//!
//! Memory: the live encoder (as an unpartitioned conversion's), the waiting rows (at most
//! [`Budget::buffer_bytes`], as decoded) and one segment read back. Temporary files: the
//! spill holds the rows of every partition but the live one, as decoded (with
//! [`Budget::compress_spill`], LZ4: 43–64% of that), until the conversion ends;
//! the partition files are the output.

use std::fs::File;
use std::io::{BufWriter, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{BooleanArray, RecordBatch};
use arrow_schema::{Schema, SchemaRef};

use super::PartitionColumn;
use super::keys::Partitions;
use super::spill::{Reader, Segment, Spill};
use crate::convert::{
    BatchTally, ConvertError, ConvertSpec, ConvertStats, Encoder, SumValue, columns, decode_with,
};

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
    pub sums: std::collections::BTreeMap<String, SumValue>,
}

/// What a partitioned conversion may hold.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Decoded rows of partitions other than the live one kept in memory before they are
    /// spilled, in bytes of their Arrow buffers (default 16 MiB: 48 spilled 1–6% fewer rows for
    /// the same CPU and 37–45 MiB more, bench/partition/results/2026-12-07/budget.md).
    pub buffer_bytes: usize,
    /// Partition files open at once: the live one, and those that were live and wait for
    /// the end to take their other rows (default 32).
    pub max_open: usize,
    /// Whether the spill file is LZ4-compressed (default: no; BENCHMARKS.md, "Partitioned
    /// writes": LZ4 took the spill to 64% on orders CSV and 43% on events JSON Lines for 11% and
    /// 21% more CPU, bench/partition/results/2026-12-07/budget.md).
    pub compress_spill: bool,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            buffer_bytes: 16 << 20,
            max_open: 32,
            compress_spill: false,
        }
    }
}

/// What a partitioned conversion did besides its rows: for measurements and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Routed {
    /// Rows written to the spill file (the others never left memory on their way).
    pub spilled: u64,
    /// Bytes of the spill file at the end.
    pub spill_bytes: u64,
    /// Times the live partition changed.
    pub switches: u64,
}

/// Converts `input` as `spec` describes into one Parquet file per partition of `by` under
/// `dir` (`part-000000.parquet`, … in the order the partitions first appear), at most
/// `max_partitions` of them; the columns a partition moves out of the files
/// ([`PartitionColumn::moves_out`]) are not written. Returns the object's stats (as
/// [`crate::convert::convert`] counts them; `row_groups` of all files), each file with its
/// rows and the sums of `sum_columns` in it, and what the routing did.
///
/// # Errors
///
/// As [`crate::convert::convert`]; [`ConvertError::Parse`] when the rows fall in more than
/// `max_partitions` partitions or a value cannot name a partition.
pub fn convert_partitioned<R: Read + Send>(
    input: R,
    spec: &ConvertSpec,
    by: &[PartitionColumn],
    sum_columns: &[String],
    max_partitions: usize,
    budget: Budget,
    dir: &Path,
) -> Result<(ConvertStats, Vec<PartFile>, Routed), ConvertError> {
    let mut router = Router::new(spec, by, sum_columns, max_partitions, budget, dir)?;
    let mut stats = if spec.threads < 2 {
        decode_with(input, spec, Ok, |batch| router.route(batch))?
    } else {
        // The decoder on a thread of its own, a batch ahead of the router.
        std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<RecordBatch>(1);
            let decoding = scope.spawn(move || {
                decode_with(input, spec, Ok, |batch| {
                    tx.send(batch.clone()).map_err(|_| ConvertError::Encode {
                        message: "the partition writer stopped".into(),
                    })
                })
            });
            let mut routed = Ok(());
            for batch in rx.iter() {
                routed = router.route(&batch);
                if routed.is_err() {
                    break;
                }
            }
            drop(rx);
            let decoded = decoding.join().unwrap_or_else(|panic| {
                std::panic::resume_unwind(panic);
            });
            // A failure of the router is the cause of the decoder's.
            routed?;
            decoded
        })?
    };
    let (parts, routed, row_groups) = router.finish()?;
    stats.row_groups = row_groups;
    Ok((stats, parts, routed))
}

/// Rows of the spill's marker for a row that went to a live file.
const TAKEN: u32 = u32::MAX;

/// The state of one partitioned conversion.
struct Router<'s> {
    spec: &'s ConvertSpec,
    partitions: Partitions,
    /// The files' schema.
    schema: SchemaRef,
    /// The output columns the files keep, when some move out.
    kept: Option<Vec<usize>>,
    sum_columns: &'s [String],
    dir: &'s Path,
    budget: Budget,
    parts: Vec<Part<'s>>,
    /// The partition whose rows go straight to its file.
    live: Option<usize>,
    /// Decoded batches holding rows that wait, with each row's partition (or [`TAKEN`]).
    waiting: Vec<(RecordBatch, Vec<u32>)>,
    waiting_bytes: usize,
    spill: Option<(Spill, Reader)>,
    /// The files' writer settings, chosen from the object's first rows (as an
    /// unpartitioned output's would be): every file encodes its columns alike.
    properties: Option<parquet::file::properties::WriterProperties>,
    /// The waiting rows grouped by partition, once the input has ended: where each
    /// partition's rows start (see [`Self::group_waiting`]).
    grouped: Option<Grouped>,
    /// Files open (see [`Budget::max_open`]).
    open: usize,
    routed: Routed,
    /// Per partition, rows of the batch being routed; and which partitions it touched.
    counts: Vec<u32>,
    touched: Vec<u32>,
    ids: Vec<u32>,
    codes: Vec<Vec<u32>>,
}

/// Waiting rows grouped by partition: each row as (batch, row), partition by
/// partition; and where each partition's rows start (one more entry: the end).
type Grouped = (Vec<(usize, usize)>, Vec<usize>);

/// One partition.
struct Part<'s> {
    /// Its file's encoder, once it has been live (closed: `None` and `done`).
    writer: Option<Encoder<'s, BufWriter<File>>>,
    tally: BatchTally,
    /// Its spilled rows.
    segments: Vec<Segment>,
    /// Its rows in `waiting`.
    waiting: usize,
    /// Its file is complete.
    done: Option<(u64, std::collections::BTreeMap<String, SumValue>, usize)>,
}

impl<'s> Router<'s> {
    fn new(
        spec: &'s ConvertSpec,
        by: &[PartitionColumn],
        sum_columns: &'s [String],
        max_partitions: usize,
        budget: Budget,
        dir: &'s Path,
    ) -> Result<Self, ConvertError> {
        let output = spec.output_schema();
        let partitions = Partitions::new(&output, by, max_partitions)?;
        // The files keep every column but those whose value is their directory.
        let kept: Vec<usize> = (0..output.fields().len())
            .filter(|i| {
                !by.iter()
                    .any(|c| c.moves_out() && output.field(*i).name() == &c.from)
            })
            .collect();
        let schema = Arc::new(Schema::new_with_metadata(
            kept.iter()
                .map(|i| output.field(*i).clone())
                .collect::<Vec<_>>(),
            output.metadata().clone(),
        ));
        // The sums' columns must be in the files: checked before any input is read.
        BatchTally::new(&schema, sum_columns)?;
        let kept = (kept.len() < output.fields().len()).then_some(kept);
        Ok(Self {
            spec,
            partitions,
            schema,
            kept,
            sum_columns,
            dir,
            budget,
            parts: Vec::new(),
            live: None,
            waiting: Vec::new(),
            waiting_bytes: 0,
            spill: None,
            properties: None,
            grouped: None,
            open: 0,
            routed: Routed::default(),
            counts: Vec::new(),
            touched: Vec::new(),
            ids: Vec::new(),
            codes: Vec::new(),
        })
    }

    fn path(&self, p: usize) -> PathBuf {
        self.dir.join(format!("part-{p:06}.parquet"))
    }

    /// Routes the rows of `batch` (of the spec's output schema).
    fn route(&mut self, batch: &RecordBatch) -> Result<(), ConvertError> {
        let rows = batch.num_rows();
        if rows == 0 {
            return Ok(());
        }
        let mut ids = std::mem::take(&mut self.ids);
        self.partitions.assign(batch, &mut self.codes, &mut ids)?;
        while self.parts.len() < self.partitions.len() {
            self.parts.push(Part {
                writer: None,
                tally: BatchTally::new(&self.schema, self.sum_columns)?,
                segments: Vec::new(),
                waiting: 0,
                done: None,
            });
            self.counts.push(0);
        }
        let batch = match &self.kept {
            Some(kept) => batch.project(kept).map_err(encode)?,
            None => batch.clone(),
        };
        if self.properties.is_none() {
            let chosen =
                Encoder::<BufWriter<File>>::choose(self.spec, self.spec.row_group_bytes, &batch)?;
            self.properties = Some(chosen);
        }
        for &p in &ids {
            let count = &mut self.counts[p as usize];
            if *count == 0 {
                self.touched.push(p);
            }
            *count += 1;
        }
        // The partition with the most of the batch's rows, and it again if it has at least
        // half of them.
        let most = self
            .touched
            .iter()
            .copied()
            .max_by_key(|&p| (self.counts[p as usize], std::cmp::Reverse(p)))
            .map(|p| p as usize)
            .expect("a batch of rows touches a partition");
        let dominant = Some(most).filter(|&p| self.counts[p] as usize * 2 >= rows);
        match (self.live, dominant) {
            // The first live partition is the one with the most rows of the first batch:
            // of skewed data, likely the one with the most rows of all, which then never waits.
            (None, _) => self.switch(most)?,
            (Some(live), Some(q))
                if self.counts[live] == 0
                    && (self.parts[q].writer.is_some() || self.open < self.budget.max_open) =>
            {
                self.switch(q)?;
            }
            _ => {}
        }
        let live = self.live.expect("chosen above");
        let streamed = self.counts[live] as usize;
        for p in self.touched.drain(..) {
            let p = p as usize;
            if p != live {
                self.parts[p].waiting += self.counts[p] as usize;
            }
            self.counts[p] = 0;
        }
        if streamed == rows {
            self.write(live, &batch)?;
            self.ids = ids;
            return Ok(());
        }
        if streamed > 0 {
            let mask: BooleanArray = ids.iter().map(|&p| Some(p as usize == live)).collect();
            let rows = arrow_select::filter::filter_record_batch(&batch, &mask).map_err(encode)?;
            self.write(live, &rows)?;
            for p in ids.iter_mut().filter(|p| **p as usize == live) {
                *p = TAKEN;
            }
        }
        self.waiting_bytes += batch.get_array_memory_size();
        self.waiting.push((batch, ids));
        if self.waiting_bytes > self.budget.buffer_bytes {
            self.spill_waiting()?;
        }
        Ok(())
    }

    /// Writes `batch` to partition `p`'s file.
    fn write(&mut self, p: usize, batch: &RecordBatch) -> Result<(), ConvertError> {
        let part = &mut self.parts[p];
        part.tally.add(batch)?;
        part.writer
            .as_mut()
            .expect("a partition written has a file")
            .write(batch)?;
        self.spec.progress.tick(batch.num_rows() as u64);
        Ok(())
    }

    /// Makes `p` the live partition: the live one's row group ends, and `p` has a file with
    /// its earlier rows in it.
    fn switch(&mut self, p: usize) -> Result<(), ConvertError> {
        if let Some(live) = self.live.replace(p) {
            self.parts[live]
                .writer
                .as_mut()
                .expect("the live partition has a file")
                .end_row_group()?;
            self.routed.switches += 1;
        }
        self.open_file(p)?;
        self.catch_up(p, &mut |router, batch| router.write(p, batch))
    }

    /// Gives partition `p` a file, if it has none.
    fn open_file(&mut self, p: usize) -> Result<(), ConvertError> {
        if self.parts[p].writer.is_none() {
            let file = BufWriter::with_capacity(256 << 10, File::create(self.path(p))?);
            let mut encoder = Encoder::for_schema(
                file,
                self.spec,
                self.schema.clone(),
                self.spec.row_group_bytes,
            )?;
            if let Some(properties) = &self.properties {
                encoder = encoder.with_properties(properties.clone());
            }
            self.parts[p].writer = Some(encoder);
            self.open += 1;
        }
        Ok(())
    }

    /// Hands `p`'s spilled rows, then its waiting rows, to `each` in the order they came.
    fn catch_up(
        &mut self,
        p: usize,
        each: &mut dyn FnMut(&mut Self, &RecordBatch) -> Result<(), ConvertError>,
    ) -> Result<(), ConvertError> {
        // Segments are a spill's rows of one partition: few rows each when the partitions are
        // many. Small ones go to the encoder joined into batches of about a batch's rows, as
        // decoded rows come, not one small batch per segment; a large one goes as it is.
        let segments = std::mem::take(&mut self.parts[p].segments);
        let mut pending: Vec<RecordBatch> = Vec::new();
        let mut pending_rows = 0;
        for segment in segments {
            let (spill, reader) = self.spill.as_mut().expect("a segment is in the spill");
            for batch in spill.read(reader, segment)? {
                if pending_rows + batch.num_rows() > self.spec.batch_rows {
                    if let Some(joined) = join(&self.schema, &mut pending)? {
                        each(self, &joined)?;
                    }
                    pending_rows = 0;
                }
                if batch.num_rows() >= self.spec.batch_rows {
                    each(self, &batch)?;
                } else {
                    pending_rows += batch.num_rows();
                    pending.push(batch);
                }
            }
        }
        if let Some(joined) = join(&self.schema, &mut pending)? {
            each(self, &joined)?;
        }
        if self.parts[p].waiting > 0 {
            let indices = match &self.grouped {
                // At the end: the rows are grouped already (nothing routes any more).
                Some((indices, start)) => indices[start[p]..start[p + 1]].to_vec(),
                None => {
                    let mut indices = Vec::with_capacity(self.parts[p].waiting);
                    for (b, (_, ids)) in self.waiting.iter_mut().enumerate() {
                        for (row, id) in ids.iter_mut().enumerate() {
                            if *id as usize == p {
                                indices.push((b, row));
                                *id = TAKEN;
                            }
                        }
                    }
                    indices
                }
            };
            self.parts[p].waiting = 0;
            // (Shared buffers: `each` may route more rows meanwhile.)
            let owned: Vec<RecordBatch> = self.waiting.iter().map(|(b, _)| b.clone()).collect();
            let batches: Vec<&RecordBatch> = owned.iter().collect();
            // In pieces of a batch's rows at most, so that no copy outgrows a batch.
            for piece in indices.chunks(self.spec.batch_rows.max(1)) {
                let rows = arrow_select::interleave::interleave_record_batch(&batches, piece)
                    .map_err(encode)?;
                each(self, &rows)?;
            }
        }
        Ok(())
    }

    /// The waiting rows grouped by partition, in order within each (a counting sort), and
    /// where each partition's rows start (one more entry: the end).
    fn group_waiting(&self) -> (Vec<(usize, usize)>, Vec<usize>) {
        let mut start = vec![0usize; self.parts.len() + 1];
        for (p, part) in self.parts.iter().enumerate() {
            start[p + 1] = start[p] + part.waiting;
        }
        let mut next = start.clone();
        let mut indices = vec![(0usize, 0usize); start[self.parts.len()]];
        for (b, (_, ids)) in self.waiting.iter().enumerate() {
            for (row, &id) in ids.iter().enumerate() {
                if id != TAKEN {
                    let slot = &mut next[id as usize];
                    indices[*slot] = (b, row);
                    *slot += 1;
                }
            }
        }
        (indices, start)
    }

    /// Writes every waiting row to the spill file, grouped by partition, and frees them.
    fn spill_waiting(&mut self) -> Result<(), ConvertError> {
        if self.spill.is_none() {
            let spill = Spill::new(&self.schema, self.budget.compress_spill)?;
            let reader = spill.reader()?;
            self.spill = Some((spill, reader));
        }
        let (indices, start) = self.group_waiting();
        let total = indices.len();
        // Copied out in pieces of about a batch's bytes, each a run of whole partitions (or
        // one partition's rows), then written a partition at a time.
        let per_row = self.waiting_bytes / total.max(1) + 1;
        let piece_rows = (self.spec.batch_bytes / per_row).max(1);
        let batches: Vec<&RecordBatch> = self.waiting.iter().map(|(b, _)| b).collect();
        let (spill, _) = self.spill.as_mut().expect("made above");
        let mut p = 0;
        while p < self.parts.len() {
            if self.parts[p].waiting == 0 {
                p += 1;
                continue;
            }
            let mut end = p + 1;
            while end < self.parts.len() && start[end + 1] - start[p] <= piece_rows {
                end += 1;
            }
            let rows = arrow_select::interleave::interleave_record_batch(
                &batches,
                &indices[start[p]..start[end]],
            )
            .map_err(encode)?;
            for q in p..end {
                let len = self.parts[q].waiting;
                if len == 0 {
                    continue;
                }
                let segment = spill.write(&rows.slice(start[q] - start[p], len))?;
                self.parts[q].segments.push(segment);
                self.parts[q].waiting = 0;
                self.spec.progress.tick(len as u64);
            }
            self.routed.spilled += rows.num_rows() as u64;
            p = end;
        }
        drop(batches);
        self.waiting.clear();
        self.waiting_bytes = 0;
        Ok(())
    }

    /// Closes partition `p`'s file.
    fn close(&mut self, p: usize) -> Result<(), ConvertError> {
        let part = &mut self.parts[p];
        let writer = part.writer.take().expect("a partition closed has a file");
        let row_groups = writer.close()?;
        self.open -= 1;
        let tally = std::mem::replace(
            &mut part.tally,
            BatchTally::new(&self.schema, self.sum_columns)?,
        );
        let (rows, sums) = tally.finish();
        part.done = Some((rows, sums, row_groups));
        Ok(())
    }

    /// Writes every partition's other rows and closes the files: the live one first, then
    /// one at a time.
    fn finish(mut self) -> Result<(Vec<PartFile>, Routed, usize), ConvertError> {
        if let Some(live) = self.live.take() {
            self.close(live)?;
        }
        self.grouped = Some(self.group_waiting());
        for p in 0..self.parts.len() {
            if self.parts[p].done.is_some() {
                continue;
            }
            self.open_file(p)?;
            let threads = self.spec.threads;
            if threads < 2 {
                self.catch_up(p, &mut |router, batch| router.write(p, batch))?;
            } else {
                // This partition's columns encoded on all the threads, as `convert` does.
                let encoder = self.parts[p].writer.take().expect("opened above");
                let ((), encoder) = columns::encode_beside(encoder, threads, &|| false, |each| {
                    self.catch_up(p, &mut |router, batch| {
                        router.parts[p].tally.add(batch)?;
                        router.spec.progress.tick(batch.num_rows() as u64);
                        each(batch)
                    })
                })?;
                self.parts[p].writer = Some(encoder);
            }
            self.close(p)?;
        }
        self.routed.spill_bytes = self.spill.as_ref().map_or(0, |(s, _)| s.bytes());
        let mut files = Vec::with_capacity(self.parts.len());
        let mut row_groups = 0;
        for (p, part) in self.parts.into_iter().enumerate() {
            let (rows, sums, groups) = part.done.expect("every partition closed");
            row_groups += groups;
            files.push(PartFile {
                dirs: self.partitions.dirs(p).to_string(),
                path: self.dir.join(format!("part-{p:06}.parquet")),
                rows,
                sums,
            });
        }
        Ok((files, self.routed, row_groups))
    }
}

/// The batches of `pending` as one (none when it is empty), and `pending` emptied.
fn join(
    schema: &SchemaRef,
    pending: &mut Vec<RecordBatch>,
) -> Result<Option<RecordBatch>, ConvertError> {
    let joined = match pending.len() {
        0 => None,
        1 => pending.pop(),
        _ => Some(arrow_select::concat::concat_batches(schema, pending.iter()).map_err(encode)?),
    };
    pending.clear();
    Ok(joined)
}

fn encode(e: impl std::fmt::Display) -> ConvertError {
    ConvertError::Encode {
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use arrow_array::cast::AsArray;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    use super::*;
    use crate::convert::partition::{Transform, value_at};
    use crate::convert::{InputFormat, convert};

    fn column(from: &str, name: Option<&str>, transform: Transform) -> PartitionColumn {
        PartitionColumn {
            from: from.into(),
            name: name.map(str::to_string),
            transform,
        }
    }

    fn temp_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tidemark-parts-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn read(path: &Path) -> (Vec<RecordBatch>, usize) {
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap()).unwrap();
        let groups = reader.metadata().num_row_groups();
        let batches = reader.build().unwrap().map(Result::unwrap).collect();
        (batches, groups)
    }

    #[test]
    fn columns_in_any_order_and_twice_over_one_column_split_the_rows() {
        let dir = temp_dir();
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
        let by = [
            column("region", None, Transform::Identity),
            column("at", Some("y"), Transform::Year),
            column("at", Some("m"), Transform::Month),
        ];
        let (stats, parts, _) = convert_partitioned(
            input.as_bytes(),
            &spec,
            &by,
            &spec.sum_columns,
            10,
            Budget::default(),
            &dir,
        )
        .unwrap();
        assert_eq!(stats.rows, 4);
        let got: Vec<(String, u64, String)> = parts
            .iter()
            .map(|p| (p.dirs.clone(), p.rows, p.sums["n"].to_string()))
            .collect();
        assert_eq!(
            got,
            [
                ("region=eu/y=2026/m=2026-11/".into(), 2, "9".into()),
                ("region=eu/y=2026/m=2026-12/".into(), 1, "2".into()),
                ("region=us/y=2026/m=2026-11/".into(), 1, "4".into()),
            ]
        );
        // `region` left the files: its value is the directory.
        let (batches, _) = read(&parts[0].path);
        let names: Vec<String> = batches[0]
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["n", "at"]);
        // Over the limit: an error naming it.
        let e = convert_partitioned(
            input.as_bytes(),
            &spec,
            &by,
            &spec.sum_columns,
            2,
            Budget::default(),
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

    /// The CSV of `rows` rows: an id, a partition key spread as `key(i)` says, a day, text.
    fn rows_csv(rows: usize, key: impl Fn(usize) -> String) -> String {
        let mut csv = String::from("id,key,day,note\n");
        for i in 0..rows {
            let note = if i % 9 == 0 {
                String::new()
            } else {
                format!("\"note {i}, \"\"quoted\"\"\"")
            };
            csv.push_str(&format!(
                "{i},{},2026-11-{:02}T{:02}:00:00Z,{note}\n",
                key(i),
                1 + (i / 700) % 28,
                i % 24
            ));
        }
        csv
    }

    const COLUMNS: &str = r#"[{"name":"id","type":"int64","nullable":false},{"name":"key","type":"string"},{"name":"day","type":"timestamp"},{"name":"note","type":"string"}]"#;

    /// Every file holds exactly the rows of the unpartitioned output whose values name its
    /// partition, in the order they came, whatever the budget spills, switches or keeps
    /// open, on one thread or two.
    #[test]
    fn each_file_holds_its_rows_in_order_whatever_the_budget() {
        let columns: Vec<crate::schema::ColumnSpec> = serde_json::from_str(COLUMNS).unwrap();
        let layouts: Vec<(&str, String, Vec<PartitionColumn>)> = vec![
            (
                "one partition",
                rows_csv(5000, |_| "all".into()),
                vec![column("key", None, Transform::Identity)],
            ),
            (
                "interleaved, 37 partitions",
                rows_csv(5000, |i| format!("k{}", (i * 7919) % 37)),
                vec![column("key", None, Transform::Identity)],
            ),
            (
                "sorted runs, by day",
                rows_csv(20_000, |_| "x".into()),
                vec![column("day", Some("dt"), Transform::Day)],
            ),
            (
                "runs that come back, two columns",
                rows_csv(8000, |i| format!("r{}", (i / 1500) % 3)),
                vec![
                    column("key", None, Transform::Identity),
                    column("day", Some("m"), Transform::Month),
                ],
            ),
            (
                "skewed, with NULL keys",
                rows_csv(6000, |i| match i % 10 {
                    0..=6 => "big".into(),
                    7 => String::new(),
                    _ => format!("small{}", i % 13),
                }),
                vec![column("key", None, Transform::Identity)],
            ),
        ];
        let budgets = [
            Budget::default(),
            Budget {
                buffer_bytes: 1,
                max_open: 1,
                compress_spill: false,
            },
            Budget {
                buffer_bytes: 40_000,
                max_open: 3,
                compress_spill: true,
            },
        ];
        for (name, csv, by) in &layouts {
            let mut spec = ConvertSpec::with_columns(
                InputFormat::Csv(crate::convert::CsvOptions::default()),
                &columns,
            );
            spec.sum_columns = vec!["id".into()];
            spec.batch_rows = 700;
            spec.row_group_rows = 2500;
            let mut whole = Vec::new();
            let expected_stats = convert(csv.as_bytes(), &spec, &mut whole).unwrap();
            let whole: Vec<RecordBatch> =
                ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(whole))
                    .unwrap()
                    .build()
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
            let whole = arrow_select::concat::concat_batches(&whole[0].schema(), &whole).unwrap();
            // The expected files: rows by their partition's directories, in order.
            let mut expected: Vec<(String, Vec<u32>)> = Vec::new();
            for row in 0..whole.num_rows() {
                let mut dirs = String::new();
                for c in by {
                    let array = whole.column(whole.schema().index_of(&c.from).unwrap());
                    dirs.push_str(&format!(
                        "{}={}/",
                        c.name(),
                        value_at(array, row, c.transform).unwrap()
                    ));
                }
                match expected.iter_mut().find(|(d, _)| *d == dirs) {
                    Some((_, rows)) => rows.push(row as u32),
                    None => expected.push((dirs, vec![row as u32])),
                }
            }
            for budget in budgets {
                for threads in [1, 2] {
                    spec.threads = threads;
                    let dir = temp_dir();
                    let (stats, parts, routed) = convert_partitioned(
                        csv.as_bytes(),
                        &spec,
                        by,
                        &spec.sum_columns,
                        1000,
                        budget,
                        &dir,
                    )
                    .unwrap();
                    let case = format!("{name}, {budget:?}, {threads} threads");
                    assert_eq!(stats.rows, expected_stats.rows, "{case}");
                    assert_eq!(stats.sums, expected_stats.sums, "{case}");
                    assert_eq!(parts.len(), expected.len(), "{case}");
                    assert!(routed.spilled <= stats.rows, "{case}: {routed:?}");
                    let mut row_groups = 0;
                    let mut total = BTreeMap::new();
                    for (part, (dirs, rows)) in parts.iter().zip(&expected) {
                        assert_eq!(&part.dirs, dirs, "{case}");
                        let (batches, groups) = read(&part.path);
                        row_groups += groups;
                        let got =
                            arrow_select::concat::concat_batches(&batches[0].schema(), &batches)
                                .unwrap();
                        let indices = arrow_array::UInt32Array::from(rows.clone());
                        let kept: Vec<usize> = (0..whole.num_columns())
                            .filter(|&i| {
                                !by.iter().any(|c| {
                                    c.moves_out() && whole.schema().field(i).name() == &c.from
                                })
                            })
                            .collect();
                        let want = arrow_select::take::take_record_batch(
                            &whole.project(&kept).unwrap(),
                            &indices,
                        )
                        .unwrap();
                        assert_eq!(got, want, "{case}: {dirs}");
                        assert_eq!(part.rows, rows.len() as u64, "{case}");
                        let sum: i64 = got
                            .column(0)
                            .as_primitive::<arrow_array::types::Int64Type>()
                            .iter()
                            .flatten()
                            .sum();
                        assert_eq!(part.sums["id"].to_string(), sum.to_string(), "{case}");
                        total.insert(dirs.clone(), part.rows);
                    }
                    assert_eq!(stats.row_groups, row_groups, "{case}");
                    if budget.buffer_bytes == 1 && expected.len() > 1 {
                        assert!(routed.spilled > 0, "{case}: {routed:?}");
                    }
                    let _ = std::fs::remove_dir_all(&dir);
                }
            }
        }
    }

    #[test]
    fn a_partition_of_its_own_streams_and_never_spills() {
        let columns: Vec<crate::schema::ColumnSpec> = serde_json::from_str(COLUMNS).unwrap();
        let mut spec = ConvertSpec::with_columns(
            InputFormat::Csv(crate::convert::CsvOptions::default()),
            &columns,
        );
        spec.batch_rows = 500;
        let dir = temp_dir();
        let csv = rows_csv(20_000, |_| "x".into());
        let by = [column("day", Some("dt"), Transform::Day)];
        let (_, parts, routed) = convert_partitioned(
            csv.as_bytes(),
            &spec,
            &by,
            &[],
            1000,
            Budget::default(),
            &dir,
        )
        .unwrap();
        // Sorted by day: each day streams in its turn (the first rows of the next day wait
        // in memory for the end of the batch they share with the day before).
        assert_eq!(parts.len(), 28);
        assert_eq!(routed.spilled, 0, "{routed:?}");
        assert_eq!(routed.spill_bytes, 0);
        assert_eq!(routed.switches, 27);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
