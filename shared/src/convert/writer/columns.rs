//! The Parquet writer of [`super::convert`], fed a column at a time, so that the columns of
//! a batch can be encoded on several threads.
//!
//! arrow-rs's `ArrowWriter` encodes a batch's columns one after another on the calling
//! thread. Its parts (one `ArrowColumnWriter` per column chunk, each `Send`) can encode
//! each column on any thread, as long as a column's values reach its writer in order.
//! [`Columns`] cuts the batches it is given into *parts*, each going to one row group, and
//! hands out their columns as tasks; [`encode_beside`] runs a decoder on the calling thread
//! and shares the tasks out between it and the other threads.
//!
//! Where a row group closes depends on the size of what it holds, known only once its
//! columns are encoded. `ArrowWriter` decides for each batch from the size after the batch
//! before, so each batch would have to wait for every column of the one before: at the end
//! of each batch one thread would wait for another's last column. [`Columns`] decides a
//! part's row group from the size after the part before the one before (see
//! [`Columns::decide`]), so two parts are encoded at once: a column of the newer one waits
//! only for the same column of the older. The decisions depend on the rows alone, never
//! on which thread encoded what or when, so a file is the same bytes whatever the number
//! of threads.
//!
//! Memory: two parts are encoded at once and one decoded batch waits at most (the decoding
//! thread encodes instead of decoding another), besides the batch being decoded.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{FieldRef, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_writer::{
    ArrowRowGroupWriterFactory, ArrowWriterOptions, compute_leaves,
};
use parquet::basic::Compression;
use parquet::errors::{ParquetError, Result};
use parquet::file::properties::{WriterProperties, WriterVersion};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnPath;

use super::ConvertError;
use super::pages::{ChunkWriter, PageStores};

/// A Parquet file being written a column at a time.
pub(in crate::convert) struct Columns<W: Write + Send> {
    file: SerializedFileWriter<W>,
    factory: ArrowRowGroupWriterFactory,
    /// The factory's page stores.
    stores: Arc<PageStores>,
    schema: SchemaRef,
    /// Leaf columns of each field (one for a flat field).
    leaves: Vec<usize>,
    max_rows: Option<usize>,
    max_bytes: Option<usize>,
    /// Row groups not yet written, oldest first; parts go to the last unless it is closed.
    groups: VecDeque<Group>,
    /// Parts being encoded, oldest first (two at most).
    parts: VecDeque<Part>,
    /// A batch, or what remains of one, waiting for its first rows to become a part.
    waiting: Option<RecordBatch>,
    /// Parts made.
    made: u64,
    /// The complete parts a decision may still need (the last two made: parts of
    /// different row groups can complete out of order).
    complete: Vec<Complete>,
    /// What each field took to encode last, in nanoseconds per row.
    cost: Vec<f64>,
    /// The fields in the order they are handed out: the costliest first, so that the
    /// threads run out of work together rather than one waiting for another's long column.
    order: Vec<usize>,
}

/// A row group: its writers, and the parts it holds.
struct Group {
    /// Its index in the file.
    number: usize,
    /// Its writers by field (a field's are out of their place while a thread encodes it).
    writers: Vec<Vec<ChunkWriter>>,
    /// Rows of its parts.
    rows: usize,
    /// Its parts not yet complete.
    encoding: usize,
    /// It takes no more parts.
    closed: bool,
}

/// Rows of a batch going to one row group.
struct Part {
    /// Its number among the parts of the file.
    number: u64,
    /// The [`Group::number`] it goes to.
    group: usize,
    batch: RecordBatch,
    /// Rows of its row group up to and including it.
    rows_through: usize,
    /// Fields handed out.
    taken: Vec<bool>,
    /// Fields written.
    written: Vec<bool>,
    /// Estimated bytes of its row group's writers after it, summed as its fields are
    /// written.
    estimate: usize,
}

/// What a complete part left: its row group's rows and estimated bytes after it.
struct Complete {
    part: u64,
    group: usize,
    rows_through: usize,
    estimate: usize,
}

/// One field of one part, to encode on any thread.
struct Task {
    part: u64,
    group: usize,
    field: usize,
    description: FieldRef,
    column: ArrayRef,
    writers: Vec<ChunkWriter>,
}

/// A [`Task`] done: the writers back, and what it took.
struct Done {
    task: Task,
    result: Result<()>,
    took: Duration,
    /// Estimated bytes of the field's writers after it.
    estimate: usize,
}

impl Task {
    /// Encodes the column.
    fn run(mut self) -> Done {
        let began = Instant::now();
        let result = (|| {
            let leaves = compute_leaves(&self.description, &self.column)?;
            for (writer, leaf) in self.writers.iter_mut().zip(leaves) {
                writer.write(&leaf)?;
            }
            Ok(())
        })();
        let took = began.elapsed();
        let estimate = self.writers.iter().map(ChunkWriter::estimated_bytes).sum();
        Done {
            task: self,
            result,
            took,
            estimate,
        }
    }
}

impl<W: Write + Send> Columns<W> {
    /// A file of `schema` written to `output` as an `ArrowWriter` with `properties` writes
    /// it, its finished pages held in memory up to `page_memory_bytes` between its columns
    /// (see [`super::pages`]). Pages to be compressed with zstd (version 1 data pages, one
    /// codec for the file) are compressed by the page stores, not by arrow-rs's writers.
    pub(super) fn new(
        output: W,
        schema: SchemaRef,
        properties: WriterProperties,
        page_memory_bytes: usize,
    ) -> Result<Self> {
        Self::with_stores_compressing(output, schema, properties, page_memory_bytes, true)
    }

    /// [`Columns::new`], the pages compressed by arrow-rs's writers unless `stores`.
    fn with_stores_compressing(
        output: W,
        schema: SchemaRef,
        properties: WriterProperties,
        page_memory_bytes: usize,
        stores: bool,
    ) -> Result<Self> {
        let level = match properties.compression(&ColumnPath::new(Vec::new())) {
            Compression::ZSTD(level)
                if stores && properties.writer_version() == WriterVersion::PARQUET_1_0 =>
            {
                Some(level)
            }
            _ => None,
        };
        let properties = match level {
            Some(_) => properties
                .into_builder()
                .set_compression(Compression::UNCOMPRESSED)
                .build(),
            None => properties,
        };
        let stores = Arc::new(PageStores::new(page_memory_bytes, level));
        let options = ArrowWriterOptions::new()
            .with_properties(properties)
            .with_page_store_factory(stores.clone());
        let (file, factory) = ArrowWriter::try_new_with_options(output, schema.clone(), options)?
            .into_serialized_writer()?;
        if level.is_some()
            && let Some(column) = file
                .schema_descr()
                .columns()
                .iter()
                .find(|c| file.properties().compression(c.path()) != Compression::UNCOMPRESSED)
        {
            return Err(ParquetError::General(format!(
                "column {}: a codec of its own beside the file's zstd",
                column.path()
            )));
        }
        let descriptor = file.schema_descr();
        let mut leaves = vec![0; schema.fields().len()];
        for leaf in 0..descriptor.num_columns() {
            leaves[descriptor.get_column_root_idx(leaf)] += 1;
        }
        let properties = file.properties();
        let (max_rows, max_bytes) = (
            properties.max_row_group_row_count(),
            properties.max_row_group_bytes(),
        );
        let fields = schema.fields().len();
        Ok(Self {
            file,
            factory,
            stores,
            schema,
            leaves,
            max_rows,
            max_bytes,
            groups: VecDeque::new(),
            parts: VecDeque::new(),
            waiting: None,
            made: 0,
            complete: Vec::new(),
            cost: vec![0.0; fields],
            order: (0..fields).collect(),
        })
    }

    /// Encodes `batch` on this thread.
    pub(super) fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        debug_assert!(self.waiting.is_none() && self.parts.is_empty());
        self.waiting = Some(batch.clone());
        self.admit()?;
        while let Some(task) = self.take() {
            self.give_back(task.run())?;
        }
        Ok(())
    }

    /// Nothing is waiting to be encoded: a batch may be given.
    fn ready(&self) -> bool {
        self.waiting.is_none()
    }

    /// Nothing is waiting or being encoded.
    fn idle(&self) -> bool {
        self.waiting.is_none() && self.parts.is_empty()
    }

    /// Makes parts of the waiting batch while each part before the newest is complete.
    fn admit(&mut self) -> Result<()> {
        while let Some(batch) = self.waiting.take() {
            let rows = batch.num_rows();
            if rows == 0 {
                continue;
            }
            if self.parts.iter().any(|p| p.number + 1 != self.made) {
                self.waiting = Some(batch);
                return Ok(());
            }
            let (take, new_group) = self.decide(rows);
            if new_group {
                if let Some(group) = self.groups.back_mut() {
                    group.closed = true;
                }
                self.flush_ready()?;
                // Row groups written, and those not yet.
                let number = self.file.flushed_row_groups().len() + self.groups.len();
                let mut writers = self.stores.writers(&self.factory, number)?.into_iter();
                self.groups.push_back(Group {
                    number,
                    writers: self
                        .leaves
                        .iter()
                        .map(|&n| writers.by_ref().take(n).collect())
                        .collect(),
                    rows: 0,
                    encoding: 0,
                    closed: false,
                });
            }
            let group = self.groups.back_mut().expect("made above");
            group.rows += take;
            group.encoding += 1;
            let fields = self.leaves.len();
            self.parts.push_back(Part {
                number: self.made,
                group: group.number,
                batch: batch.slice(0, take),
                rows_through: group.rows,
                taken: vec![false; fields],
                written: vec![false; fields],
                estimate: 0,
            });
            self.made += 1;
            // The next decision needs the part before the one just made.
            let made = self.made;
            self.complete.retain(|c| c.part + 2 >= made);
            if take < rows {
                self.waiting = Some(batch.slice(take, rows - take));
            }
            let cost = &self.cost;
            self.order
                .sort_by(|&a, &b| cost[b].total_cmp(&cost[a]).then(a.cmp(&b)));
        }
        Ok(())
    }

    /// How many of the next `rows` rows go into the next part, and whether it starts a
    /// row group. A row group takes at most `max_rows` rows, as in `ArrowWriter`, and
    /// closes where its estimated size reaches `max_bytes`, estimated as `ArrowWriter`
    /// does but one part late: from the writers' estimate after the part before the newest
    /// (complete by then), with the newest part's rows counted at the average size of the
    /// rows before. So a row group can pass `max_bytes` by about a part.
    fn decide(&self, rows: usize) -> (usize, bool) {
        let new_group = (self.max_rows.map_or(rows, |max| rows.min(max)), true);
        let Some(group) = self.groups.back().filter(|g| !g.closed) else {
            return new_group;
        };
        let through = group.rows;
        if self.max_rows.is_some_and(|max| through >= max) {
            return new_group;
        }
        let mut split_at = self
            .max_rows
            .filter(|&max| through + rows > max)
            .map(|max| max - through);
        let before_newest = self.made.checked_sub(2);
        if let Some(max_bytes) = self.max_bytes
            && let Some(before) = self
                .complete
                .iter()
                .find(|c| Some(c.part) == before_newest && c.group == group.number)
        {
            let average = before.estimate / before.rows_through;
            let estimate = before.estimate + (through - before.rows_through) * average;
            if estimate >= max_bytes {
                return new_group;
            }
            if let Some(fit) = (max_bytes - estimate).checked_div(average)
                && split_at.unwrap_or(rows) > fit
            {
                if fit == 0 {
                    return new_group;
                }
                split_at = Some(fit);
            }
        }
        (split_at.unwrap_or(rows), false)
    }

    /// The next field ready to encode: of the oldest part first, the costliest first, and
    /// only after the same field of an older part of its row group.
    fn take(&mut self) -> Option<Task> {
        let (index, field) = self.parts.iter().enumerate().find_map(|(index, part)| {
            let field = self.order.iter().copied().find(|&f| {
                !part.taken[f]
                    && !self
                        .parts
                        .iter()
                        .take(index)
                        .any(|older| older.group == part.group && !older.written[f])
            })?;
            Some((index, field))
        })?;
        let part = &mut self.parts[index];
        part.taken[field] = true;
        let (number, group) = (part.number, part.group);
        let column = part.batch.column(field).clone();
        let writers = std::mem::take(&mut self.group(group).writers[field]);
        Some(Task {
            part: number,
            group,
            field,
            description: self.schema.fields()[field].clone(),
            column,
            writers,
        })
    }

    fn group(&mut self, number: usize) -> &mut Group {
        self.groups
            .iter_mut()
            .find(|g| g.number == number)
            .expect("a group is kept until its parts are written")
    }

    /// Takes back a task's writers; when it completes its part, notes the part, writes its
    /// row group if that is closed and complete, and makes the next part.
    fn give_back(&mut self, done: Done) -> Result<()> {
        let Done {
            task,
            result,
            took,
            estimate,
        } = done;
        self.group(task.group).writers[task.field] = task.writers;
        result?;
        let index = self
            .parts
            .iter()
            .position(|p| p.number == task.part)
            .expect("a part is kept until its fields are written");
        let part = &mut self.parts[index];
        part.written[task.field] = true;
        part.estimate += estimate;
        self.cost[task.field] = took.as_nanos() as f64 / part.batch.num_rows() as f64;
        if part.written.iter().all(|&w| w) {
            let part = self.parts.remove(index).expect("found above");
            self.complete.push(Complete {
                part: part.number,
                group: part.group,
                rows_through: part.rows_through,
                estimate: part.estimate,
            });
            self.group(part.group).encoding -= 1;
            self.flush_ready()?;
        }
        self.admit()
    }

    /// Writes the oldest row groups while they are closed and complete.
    fn flush_ready(&mut self) -> Result<()> {
        while self
            .groups
            .front()
            .is_some_and(|g| g.closed && g.encoding == 0)
        {
            let group = self.groups.pop_front().expect("checked above");
            let mut row_group = self.file.next_row_group()?;
            for writer in group.writers.into_iter().flatten() {
                writer.append_to(&mut row_group)?;
            }
            row_group.close()?;
        }
        Ok(())
    }

    /// Ends the row group in progress: it is written once its parts are encoded (at once
    /// when nothing is being encoded), and the next rows start another.
    pub(super) fn end_row_group(&mut self) -> Result<()> {
        if let Some(group) = self.groups.back_mut() {
            group.closed = true;
        }
        self.flush_ready()
    }

    /// Finishes the file; returns its number of row groups.
    pub(super) fn close(mut self) -> Result<usize> {
        debug_assert!(self.idle());
        for group in &mut self.groups {
            group.closed = true;
        }
        self.flush_ready()?;
        Ok(self.file.close()?.num_row_groups())
    }
}

/// What encodes the batches of [`encode_beside`]: writes on the calling thread until it has
/// a file (the first rows choose its encodings), then hands out the file's columns.
pub(in crate::convert) trait Sink: Send {
    /// The file once it exists.
    type Output: Write + Send;
    /// Writes `batch` on this thread unless the file exists (`false`: it exists, and the
    /// batch was not written).
    fn write_before_file(&mut self, batch: &RecordBatch) -> Result<bool, ConvertError>;
    /// The file, if it exists.
    fn file(&mut self) -> Option<&mut Columns<Self::Output>>;
}

/// The state the threads of [`encode_beside`] share.
struct State<S> {
    sink: S,
    /// No batch will come: decoding ended.
    decoded: bool,
    /// Everything stops: decoding failed, or a thread panicked.
    abandoned: bool,
    /// The first error of the encoding; every thread stops at it.
    failed: Option<ConvertError>,
}

impl<S: Sink> State<S> {
    /// Every thread should stop.
    fn stopped(&self) -> bool {
        self.abandoned || self.failed.is_some()
    }

    /// Nothing is left to encode, and nothing will come.
    fn done(&mut self) -> bool {
        self.decoded && self.sink.file().is_none_or(|f| f.idle())
    }

    /// A decoded batch may be given.
    fn ready(&mut self) -> bool {
        self.sink.file().is_none_or(|f| f.ready())
    }
}

struct Shared<'i, S> {
    state: Mutex<State<S>>,
    changed: Condvar,
    /// Work for a thread that finds nothing to encode (reading the input ahead): returns
    /// whether it found any.
    idle: &'i (dyn Fn() -> bool + Sync),
}

impl<S: Sink> Shared<'_, S> {
    /// The state; a thread that panicked holding it has set `abandoned` on its way out.
    fn lock(&self) -> MutexGuard<'_, State<S>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, State<S>>) -> MutexGuard<'a, State<S>> {
        self.changed
            .wait(guard)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Encodes fields until `enough` says so or everything stops; `false` when it stopped.
    /// With no field to encode, does the idle work until there is none, then waits.
    fn help<'a>(
        &'a self,
        mut guard: MutexGuard<'a, State<S>>,
        enough: impl Fn(&mut State<S>) -> bool,
    ) -> (MutexGuard<'a, State<S>>, bool) {
        // The idle work found none since the state was last seen to change.
        let mut rested = false;
        loop {
            if guard.stopped() {
                return (guard, false);
            }
            if enough(&mut guard) {
                return (guard, true);
            }
            match guard.sink.file().and_then(Columns::take) {
                Some(task) => {
                    rested = false;
                    drop(guard);
                    let done = task.run();
                    guard = self.lock();
                    let file = guard.sink.file().expect("tasks come from the file");
                    if let Err(e) = file.give_back(done) {
                        guard.failed.get_or_insert(e.into());
                    }
                    self.changed.notify_all();
                }
                // Checked again under the lock before waiting, so no notice is missed.
                None if !rested => {
                    drop(guard);
                    rested = !(self.idle)();
                    guard = self.lock();
                }
                None => {
                    guard = self.wait(guard);
                    rested = false;
                }
            }
        }
    }
}

/// Sets `decoded` when the decoding thread leaves, and `abandoned` if it leaves by a panic,
/// so that no other thread waits for it forever.
struct Leaving<'a, 'i, S: Sink>(&'a Shared<'i, S>, bool);

impl<S: Sink> Drop for Leaving<'_, '_, S> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.decoded |= self.1;
        state.abandoned |= std::thread::panicking();
        drop(state);
        self.0.changed.notify_all();
    }
}

/// Runs `decode` on this thread, giving it the callback that encodes each batch into
/// `sink` on this thread and `threads - 1` others (see the module's documentation): the
/// decoding thread encodes only while a decoded batch waits. A thread with nothing to
/// encode calls `idle` (reading the decoder's input ahead) until it returns `false`, and
/// only then waits. Returns `decode`'s result and the sink, whose file holds every batch.
///
/// An error of the encoding wins over `decode`'s (which then is only that the encoder
/// stopped); after a decoding error the other threads stop without finishing.
pub(in crate::convert) fn encode_beside<S: Sink, T>(
    sink: S,
    threads: usize,
    idle: &(dyn Fn() -> bool + Sync),
    decode: impl FnOnce(
        &mut dyn FnMut(&RecordBatch) -> Result<(), ConvertError>,
    ) -> Result<T, ConvertError>,
) -> Result<(T, S), ConvertError> {
    let shared = Shared {
        state: Mutex::new(State {
            sink,
            decoded: false,
            abandoned: false,
            failed: None,
        }),
        changed: Condvar::new(),
        idle,
    };
    let stopped = || ConvertError::Encode {
        message: "the encoder stopped".into(),
    };
    let decoded = std::thread::scope(|scope| {
        let encoding: Vec<_> = (1..threads.max(2))
            .map(|_| {
                scope.spawn(|| {
                    let leaving = Leaving(&shared, false);
                    drop(shared.help(shared.lock(), State::done));
                    drop(leaving);
                })
            })
            .collect();
        let decoded = {
            let leaving = Leaving(&shared, true);
            let decoded = decode(&mut |batch: &RecordBatch| {
                let mut state = shared.lock();
                if state.stopped() {
                    return Err(stopped());
                }
                if state.sink.write_before_file(batch)? {
                    return Ok(());
                }
                // A decoded batch is waiting already: encode beside the other threads until
                // it is taken up, rather than decode another.
                let (mut state, going) = shared.help(state, State::ready);
                if !going {
                    return Err(stopped());
                }
                let file = state.sink.file().expect("written above");
                file.waiting = Some(batch.clone());
                if let Err(e) = file.admit() {
                    state.failed.get_or_insert(e.into());
                }
                drop(state);
                shared.changed.notify_all();
                Ok(())
            });
            let mut state = shared.lock();
            state.decoded = true;
            if decoded.is_err() {
                state.abandoned = true;
            } else {
                state = shared.help(state, State::done).0; // help with what is left
            }
            drop(state);
            drop(leaving);
            decoded
        };
        for thread in encoding {
            thread
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        }
        decoded
    });
    let state = shared
        .state
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(e) = state.failed {
        return Err(e);
    }
    Ok((decoded?, state.sink))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Float64Array, Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use parquet::file::properties::WriterProperties;

    use super::*;

    /// A sink whose file exists from the start.
    struct File<'a>(Columns<&'a mut Vec<u8>>);

    impl<'a> Sink for File<'a> {
        type Output = &'a mut Vec<u8>;

        fn write_before_file(&mut self, _: &RecordBatch) -> Result<bool, ConvertError> {
            Ok(false)
        }

        fn file(&mut self) -> Option<&mut Columns<&'a mut Vec<u8>>> {
            Some(&mut self.0)
        }
    }

    /// Batches of 0 to 900 rows: an id, a text of 0 to 200 bytes, a float NULL every
    /// seventh row.
    fn batches() -> (SchemaRef, Vec<RecordBatch>) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("text", DataType::Utf8, true),
            Field::new("price", DataType::Float64, true),
        ]));
        let mut id = 0i64;
        let batches = [
            0usize, 250, 900, 1, 0, 640, 333, 900, 77, 512, 900, 900, 5, 700,
        ]
        .iter()
        .cycle()
        .take(40)
        .map(|&rows| {
            let ids: Vec<i64> = (id..id + rows as i64).collect();
            id += rows as i64;
            let text = StringArray::from_iter(
                ids.iter()
                    .map(|i| Some("xyz".repeat((i * 7919 % 67) as usize))),
            );
            let price = Float64Array::from_iter(
                ids.iter().map(|i| (i % 7 != 0).then_some(*i as f64 / 8.0)),
            );
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from(ids)),
                    Arc::new(text),
                    Arc::new(price),
                ],
            )
            .unwrap()
        })
        .collect();
        (schema, batches)
    }

    fn properties(max_rows: usize, max_bytes: usize, codec: Compression) -> WriterProperties {
        WriterProperties::builder()
            .set_max_row_group_row_count(Some(max_rows))
            .set_max_row_group_bytes(Some(max_bytes))
            .set_data_page_size_limit(4096)
            .set_compression(codec)
            .build()
    }

    fn zstd() -> Compression {
        Compression::ZSTD(parquet::basic::ZstdLevel::try_new(3).unwrap())
    }

    /// The batches given to `each` one by one.
    fn feed(
        batches: &[RecordBatch],
        each: &mut dyn FnMut(&RecordBatch) -> Result<(), ConvertError>,
    ) -> Result<(), ConvertError> {
        batches.iter().try_for_each(each)
    }

    /// `batches` written by `ArrowWriter`: the file, and its row groups.
    fn arrow_writer(
        schema: &SchemaRef,
        batches: &[RecordBatch],
        properties: WriterProperties,
    ) -> (Vec<u8>, Vec<parquet::file::metadata::RowGroupMetaData>) {
        let mut out = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut out, schema.clone(), Some(properties)).unwrap();
        for batch in batches {
            writer.write(batch).unwrap();
        }
        let row_groups = writer.close().unwrap().row_groups().to_vec();
        (out, row_groups)
    }

    #[test]
    fn the_file_is_the_same_whatever_the_threads() {
        let (schema, batches) = batches();
        // Row groups closed by rows (2,000), by bytes (24 KiB: after a part that passes
        // it, or splitting a batch whose rows would), and by both.
        for (codec, (max_rows, max_bytes)) in [Compression::UNCOMPRESSED, zstd()]
            .into_iter()
            .flat_map(|c| {
                [(2_000, 1 << 30), (1 << 30, 24 << 10), (2_000, 24 << 10)].map(|l| (c, l))
            })
        {
            let properties = || properties(max_rows, max_bytes, codec);
            let (arrow, arrow_groups) = arrow_writer(&schema, &batches, properties());

            let serial_with = |page_memory_bytes, stores| {
                let mut out = Vec::new();
                let mut file = Columns::with_stores_compressing(
                    &mut out,
                    schema.clone(),
                    properties(),
                    page_memory_bytes,
                    stores,
                )
                .unwrap();
                for batch in &batches {
                    file.write(batch).unwrap();
                }
                let row_groups = file.close().unwrap();
                (out, row_groups)
            };
            let (serial, row_groups) = serial_with(1 << 20, true);
            let limits = format!("{codec}, limits {max_rows} rows, {max_bytes} bytes");
            // Pages compressed by the stores or by arrow-rs's writers, kept in memory or in
            // temporary files: the same bytes (and so the same row groups, closed by sizes
            // measured after compression).
            for (page_memory_bytes, stores) in [(0, true), (1 << 20, false), (0, false)] {
                assert!(
                    serial_with(page_memory_bytes, stores) == (serial.clone(), row_groups),
                    "{limits}: stores compressing {stores}, {page_memory_bytes} bytes in memory"
                );
            }
            assert!(
                row_groups_of(&serial)
                    .iter()
                    .flat_map(|g| g.columns())
                    // (A file does not keep the level it was compressed at.)
                    .all(|c| std::mem::discriminant(&c.compression())
                        == std::mem::discriminant(&codec)),
                "{limits}"
            );
            if max_bytes == 1 << 30 {
                // Closed by rows alone, the row groups are ArrowWriter's.
                assert!(serial == arrow, "{limits}");
            } else {
                // By bytes, a part later than ArrowWriter at most: here, where a batch of 900
                // rows takes up to two thirds of a row group, up to a fifth fewer row groups
                // and up to twice as large.
                let groups = row_groups_of(&serial);
                assert!(groups.len() > 4, "{limits}: {} row groups", groups.len());
                assert!(
                    groups.len() * 5 >= arrow_groups.len() * 4,
                    "{limits}: {} row groups, ArrowWriter {}",
                    groups.len(),
                    arrow_groups.len()
                );
                let largest = |g: &[parquet::file::metadata::RowGroupMetaData]| {
                    g.iter().map(|g| g.compressed_size()).max().unwrap()
                };
                assert!(
                    largest(&groups) <= largest(&arrow_groups) * 2,
                    "{limits}: {} bytes, ArrowWriter {}",
                    largest(&groups),
                    largest(&arrow_groups)
                );
            }
            assert!(
                row_groups_of(&serial)
                    .iter()
                    .all(|g| g.num_rows() <= max_rows as i64),
                "{limits}"
            );

            // Threads take the columns in any order: the same file every time.
            for threads in [2, 3, 3, 3, 3, 3, 3, 3, 3, 3] {
                let mut out = Vec::new();
                let file =
                    File(Columns::new(&mut out, schema.clone(), properties(), 1 << 20).unwrap());
                let ((), File(file)) =
                    encode_beside(file, threads, &|| false, |each| feed(&batches, each)).unwrap();
                assert_eq!(file.close().unwrap(), row_groups);
                assert!(out == serial, "{threads} threads, {limits}");
            }
        }
    }

    #[test]
    fn row_groups_close_by_their_size_compressed() {
        // Plain text that zstd shrinks to a fraction, in row groups closed at 64 KiB.
        let (schema, batches) = batches();
        let properties = |codec| {
            WriterProperties::builder()
                .set_max_row_group_bytes(Some(64 << 10))
                .set_data_page_size_limit(4096)
                .set_dictionary_enabled(false)
                .set_compression(codec)
                .build()
        };
        let write = |codec, stores| {
            let mut out = Vec::new();
            let mut file = Columns::with_stores_compressing(
                &mut out,
                schema.clone(),
                properties(codec),
                1 << 20,
                stores,
            )
            .unwrap();
            for batch in &batches {
                file.write(batch).unwrap();
            }
            file.close().unwrap();
            out
        };
        let plain = row_groups_of(&write(Compression::UNCOMPRESSED, true)).len();
        let compressed = write(zstd(), true);
        let groups = row_groups_of(&compressed).len();
        assert!(
            groups * 2 < plain,
            "{groups} row groups compressed, {plain} not"
        );
        // The stores count a page at its compressed size, as arrow-rs's writers do.
        assert!(compressed == write(zstd(), false));
    }

    /// The row groups of a Parquet file.
    fn row_groups_of(file: &[u8]) -> Vec<parquet::file::metadata::RowGroupMetaData> {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let reader = SerializedFileReader::new(bytes::Bytes::from(file.to_vec())).unwrap();
        reader.metadata().row_groups().to_vec()
    }

    #[test]
    fn a_failure_on_any_thread_stops_them_all() {
        let (schema, batches) = batches();
        let file = |out| {
            File(
                Columns::new(
                    out,
                    schema.clone(),
                    properties(2_000, 1 << 30, zstd()),
                    1 << 20,
                )
                .unwrap(),
            )
        };
        let (mut out1, mut out2, mut out3) = (Vec::new(), Vec::new(), Vec::new());

        // Decoding fails: its error, after the encoding threads stopped.
        let failed = encode_beside(file(&mut out1), 2, &|| false, |each| {
            feed(&batches[..10], each)?;
            Err::<(), _>(ConvertError::parse(Some(7), None, "bad"))
        });
        assert_eq!(failed.err().unwrap().to_string(), "line 7: bad");

        // Decoding panics: the panic, not a thread waiting forever.
        let sink = file(&mut out2);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            encode_beside(sink, 2, &|| false, |each| {
                feed(&batches[..10], each)?;
                panic!("decoder");
                #[allow(unreachable_code)]
                Ok(())
            })
        }));
        assert!(panicked.is_err());

        // Encoding fails (a column of the wrong type): its error wins over the decoder's
        // "the encoder stopped".
        let wrong = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("id", DataType::Utf8, false),
                Field::new("text", DataType::Utf8, true),
                Field::new("price", DataType::Float64, true),
            ])),
            vec![
                Arc::new(StringArray::from(vec!["1"])),
                Arc::new(StringArray::from(vec!["a"])),
                Arc::new(Float64Array::from(vec![1.0])),
            ],
        )
        .unwrap();
        let failed = encode_beside(file(&mut out3), 2, &|| false, |each| {
            feed(&batches[..5], each)?;
            each(&wrong)?;
            feed(&batches, each)
        });
        let message = failed.err().unwrap().to_string();
        assert!(message.starts_with("cannot write Parquet: "), "{message}");
        assert!(!message.contains("stopped"), "{message}");
    }
}
