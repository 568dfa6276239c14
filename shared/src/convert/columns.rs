//! The Parquet writer of [`super::convert`], fed a column at a time, so that the columns of
//! a batch can be encoded on several threads.
//!
//! arrow-rs's `ArrowWriter` encodes a batch's columns one after another on the calling
//! thread. Its parts (one `ArrowColumnWriter` per column chunk, each `Send`) can encode
//! each column on any thread, as long as a column's batches reach its writer in order.
//! [`Columns`] drives them and closes row groups where `ArrowWriter::write` would (the same
//! row and estimated-byte limits, a batch split at the same row), so a file is the same
//! bytes whatever the number of threads. [`encode_beside`] runs a decoder on the calling
//! thread and shares each batch's columns out between it and the other threads.
//!
//! One batch is encoded at a time: which row group its rows go to depends on the size of
//! everything encoded before it, as in `ArrowWriter`, so the next batch starts when the last
//! column of this one is written. Its columns are handed out one by one to whichever thread
//! is free; the decoding thread takes them only while a decoded batch is waiting, and
//! decodes otherwise. At most one decoded batch waits, so memory grows by two batches, not
//! by the file.

use std::io::Write;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{FieldRef, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_writer::{
    ArrowColumnWriter, ArrowRowGroupWriterFactory, ArrowWriterOptions, compute_leaves,
};
use parquet::errors::Result;
use parquet::file::writer::SerializedFileWriter;

use super::ConvertError;

/// A Parquet file being written, its row group in progress as one writer per column.
pub(super) struct Columns<W: Write + Send> {
    file: SerializedFileWriter<W>,
    factory: ArrowRowGroupWriterFactory,
    schema: SchemaRef,
    /// Leaf columns of each field (one for a flat field).
    leaves: Vec<usize>,
    /// The writers of the row group in progress, by field (`None`: none in progress; a
    /// field's are out of their place while a thread encodes it).
    writers: Option<Vec<Vec<ArrowColumnWriter>>>,
    /// Rows written to the row group in progress.
    buffered_rows: usize,
    max_rows: Option<usize>,
    max_bytes: Option<usize>,
}

impl<W: Write + Send> Columns<W> {
    /// A file of `schema` written to `output` as an `ArrowWriter` with `options` writes it
    /// (the same metadata, properties and page stores).
    pub(super) fn new(output: W, schema: SchemaRef, options: ArrowWriterOptions) -> Result<Self> {
        let (file, factory) = ArrowWriter::try_new_with_options(output, schema.clone(), options)?
            .into_serialized_writer()?;
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
        Ok(Self {
            file,
            factory,
            schema,
            leaves,
            writers: None,
            buffered_rows: 0,
            max_rows,
            max_bytes,
        })
    }

    /// Encodes `batch` on this thread.
    pub(super) fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let mut rest = Some(batch.clone());
        while let Some(part) = self.next_part(&mut rest)? {
            let writers = self.writers.as_mut().expect("next_part starts a row group");
            for ((field, column), writers) in
                self.schema.fields().iter().zip(part.columns()).zip(writers)
            {
                encode(field, column, writers)?;
            }
            self.wrote(part.num_rows())?;
        }
        Ok(())
    }

    /// The leading rows of `batch` that go into the row group in progress, leaving the rest
    /// in it: a row group is started, and the one before closed, where `ArrowWriter::write`
    /// does (parquet 60.1, `arrow_writer/mod.rs`). `None` when `batch` holds no rows.
    fn next_part(&mut self, batch: &mut Option<RecordBatch>) -> Result<Option<RecordBatch>> {
        loop {
            let Some(remaining) = batch.take().filter(|b| b.num_rows() > 0) else {
                return Ok(None);
            };
            if self.writers.is_none() {
                self.start_row_group()?;
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
                    *batch = Some(remaining);
                    continue;
                }
                if let Some(fit) = (max_bytes - current).checked_div(current / buffered)
                    && candidate_rows > fit
                {
                    if fit == 0 {
                        self.flush()?;
                        *batch = Some(remaining);
                        continue;
                    }
                    split_at = Some(fit);
                }
            }
            return Ok(Some(match split_at {
                Some(rows) => {
                    *batch = Some(remaining.slice(rows, remaining.num_rows() - rows));
                    remaining.slice(0, rows)
                }
                None => remaining,
            }));
        }
    }

    /// Notes that every column of a part of `rows` rows was written, and closes the row
    /// group if it is full.
    fn wrote(&mut self, rows: usize) -> Result<()> {
        self.buffered_rows += rows;
        if self.max_rows.is_some_and(|max| self.buffered_rows >= max)
            || self
                .max_bytes
                .is_some_and(|max| self.estimated_bytes() >= max)
        {
            self.flush()?;
        }
        Ok(())
    }

    fn start_row_group(&mut self) -> Result<()> {
        let mut writers = self
            .factory
            .create_column_writers(self.file.flushed_row_groups().len())?
            .into_iter();
        self.writers = Some(
            self.leaves
                .iter()
                .map(|&n| writers.by_ref().take(n).collect())
                .collect(),
        );
        self.buffered_rows = 0;
        Ok(())
    }

    fn estimated_bytes(&self) -> usize {
        self.writers
            .iter()
            .flatten()
            .flatten()
            .map(ArrowColumnWriter::get_estimated_total_bytes)
            .sum()
    }

    /// Writes the row group in progress, if any.
    fn flush(&mut self) -> Result<()> {
        let Some(writers) = self.writers.take() else {
            return Ok(());
        };
        let mut row_group = self.file.next_row_group()?;
        for writer in writers.into_iter().flatten() {
            writer.close()?.append_to_row_group(&mut row_group)?;
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

/// Writes one column of a batch to the writers of its leaves.
fn encode(field: &FieldRef, column: &ArrayRef, writers: &mut [ArrowColumnWriter]) -> Result<()> {
    for (writer, leaf) in writers.iter_mut().zip(compute_leaves(field, column)?) {
        writer.write(&leaf)?;
    }
    Ok(())
}

/// What encodes the batches of [`encode_beside`]: writes on the calling thread until it has
/// a file (the first rows choose its encodings), then hands out the file's columns.
pub(super) trait Sink: Send {
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
    /// The part of a batch being encoded, and the next of its fields to hand out.
    part: Option<(RecordBatch, usize)>,
    /// Fields of `part` handed out and not yet back.
    out: usize,
    /// What each field took to encode last, in nanoseconds per row.
    cost: Vec<f64>,
    /// The fields in the order they are handed out: the costliest first, so that the
    /// threads run out of work together at the end of a part rather than one waiting for
    /// the other's long column.
    order: Vec<usize>,
    /// A decoded batch (or what remains of one that closed a row group) waiting for `part`.
    waiting: Option<RecordBatch>,
    /// No batch will come: decoding ended.
    decoded: bool,
    /// Everything stops: decoding failed, or a thread panicked.
    abandoned: bool,
    /// The first error of the encoding; every thread stops at it.
    failed: Option<ConvertError>,
}

/// A field of `part` being encoded by one thread.
struct Task {
    /// Its index, and its description.
    field: usize,
    description: FieldRef,
    column: ArrayRef,
    writers: Vec<ArrowColumnWriter>,
}

impl<S: Sink> State<S> {
    /// Hands out the next field of `part`, if any.
    fn take(&mut self) -> Option<Task> {
        let (batch, next) = self.part.as_mut()?;
        if *next == batch.num_columns() {
            return None;
        }
        let field = self.order[*next];
        *next += 1;
        self.out += 1;
        let column = batch.column(field).clone();
        let file = self.sink.file().expect("a part is encoded into a file");
        let description = file.schema.fields()[field].clone();
        let writers = std::mem::take(&mut file.writers.as_mut().expect("in progress")[field]);
        Some(Task {
            field,
            description,
            column,
            writers,
        })
    }

    /// Takes back a field encoded with `result`; when it was the part's last, notes the part
    /// written and starts the next.
    fn give_back(&mut self, task: Task, result: Result<()>, took: std::time::Duration) {
        self.out -= 1;
        if let Some((batch, _)) = &self.part {
            self.cost[task.field] = took.as_nanos() as f64 / batch.num_rows().max(1) as f64;
        }
        let file = self.sink.file().expect("a part is encoded into a file");
        file.writers.as_mut().expect("in progress")[task.field] = task.writers;
        if let Err(e) = result {
            self.failed.get_or_insert(e.into());
            return;
        }
        let Some((batch, next)) = &self.part else {
            return;
        };
        if *next == batch.num_columns() && self.out == 0 {
            let rows = batch.num_rows();
            self.part = None;
            if let Err(e) = file.wrote(rows) {
                self.failed.get_or_insert(e.into());
                return;
            }
            self.advance();
        }
    }

    /// Starts encoding the waiting batch when no part is in progress.
    fn advance(&mut self) {
        if self.part.is_some() || self.failed.is_some() {
            return;
        }
        let Some(file) = self.sink.file() else {
            return;
        };
        match file.next_part(&mut self.waiting) {
            Ok(part) => {
                let cost = &self.cost;
                self.order
                    .sort_by(|&a, &b| cost[b].total_cmp(&cost[a]).then(a.cmp(&b)));
                self.part = part.map(|p| (p, 0));
            }
            Err(e) => {
                self.failed.get_or_insert(e.into());
            }
        }
    }

    /// Every thread should stop.
    fn stopped(&self) -> bool {
        self.abandoned || self.failed.is_some()
    }

    /// Nothing is left to encode, and nothing will come.
    fn done(&self) -> bool {
        self.decoded && self.part.is_none() && self.waiting.is_none()
    }
}

struct Shared<S> {
    state: Mutex<State<S>>,
    changed: Condvar,
}

impl<S: Sink> Shared<S> {
    /// The state; a thread that panicked holding it has set `abandoned` on its way out.
    fn lock(&self) -> MutexGuard<'_, State<S>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, State<S>>) -> MutexGuard<'a, State<S>> {
        self.changed
            .wait(guard)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Encodes fields of the part in progress until `enough` says so or everything stops;
    /// `false` when it stopped.
    fn help<'a>(
        &'a self,
        mut guard: MutexGuard<'a, State<S>>,
        enough: impl Fn(&State<S>) -> bool,
    ) -> (MutexGuard<'a, State<S>>, bool) {
        loop {
            if guard.stopped() {
                return (guard, false);
            }
            if enough(&guard) {
                return (guard, true);
            }
            match guard.take() {
                Some(mut task) => {
                    drop(guard);
                    let began = std::time::Instant::now();
                    let result = encode(&task.description, &task.column, &mut task.writers);
                    let took = began.elapsed();
                    guard = self.lock();
                    guard.give_back(task, result, took);
                    self.changed.notify_all();
                }
                None => guard = self.wait(guard),
            }
        }
    }
}

/// Sets `decoded` when the decoding thread leaves, and `abandoned` if it leaves by a panic,
/// so that no other thread waits for it forever.
struct Leaving<'a, S: Sink>(&'a Shared<S>, bool);

impl<S: Sink> Drop for Leaving<'_, S> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.decoded |= self.1;
        state.abandoned |= std::thread::panicking();
        drop(state);
        self.0.changed.notify_all();
    }
}

/// Runs `decode` on this thread, giving it the callback that encodes each batch into
/// `sink` on this thread and `threads - 1` others (see the module's documentation).
/// Returns `decode`'s result and the sink, whose file is complete up to the last batch.
///
/// An error of the encoding wins over `decode`'s (which then is only that the encoder
/// stopped); after a decoding error the other threads stop without finishing.
pub(super) fn encode_beside<S: Sink, T>(
    sink: S,
    fields: usize,
    threads: usize,
    decode: impl FnOnce(
        &mut dyn FnMut(&RecordBatch) -> Result<(), ConvertError>,
    ) -> Result<T, ConvertError>,
) -> Result<(T, S), ConvertError> {
    let shared = Shared {
        state: Mutex::new(State {
            sink,
            part: None,
            out: 0,
            cost: vec![0.0; fields],
            order: (0..fields).collect(),
            waiting: None,
            decoded: false,
            abandoned: false,
            failed: None,
        }),
        changed: Condvar::new(),
    };
    let stopped = || ConvertError::Encode {
        message: "the encoder stopped".into(),
    };
    let decoded = std::thread::scope(|scope| {
        let encoding: Vec<_> = (1..threads.max(2))
            .map(|_| {
                scope.spawn(|| {
                    let leaving = Leaving(&shared, false);
                    let (guard, _) = shared.help(shared.lock(), State::done);
                    drop(guard);
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
                let (mut state, going) = shared.help(state, |s| s.waiting.is_none());
                if !going {
                    return Err(stopped());
                }
                state.waiting = Some(batch.clone());
                state.advance();
                drop(state);
                shared.changed.notify_all();
                Ok(())
            });
            let mut state = shared.lock();
            state.decoded = true;
            if decoded.is_err() {
                state.abandoned = true;
            } else {
                // Help the others with what is left.
                state = shared.help(state, State::done).0;
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

    fn options(max_rows: usize, max_bytes: usize) -> ArrowWriterOptions {
        ArrowWriterOptions::new().with_properties(
            WriterProperties::builder()
                .set_max_row_group_row_count(Some(max_rows))
                .set_max_row_group_bytes(Some(max_bytes))
                .set_data_page_size_limit(4096)
                .build(),
        )
    }

    /// The batches given to `each` one by one.
    fn feed(
        batches: &[RecordBatch],
        each: &mut dyn FnMut(&RecordBatch) -> Result<(), ConvertError>,
    ) -> Result<(), ConvertError> {
        batches.iter().try_for_each(each)
    }

    #[test]
    fn the_file_is_the_one_arrow_writer_writes_whatever_the_threads() {
        let (schema, batches) = batches();
        // Row groups closed by rows (2,000), by bytes (24 KiB: after a batch that passes
        // it, or splitting one whose rows would), and by both.
        for (max_rows, max_bytes) in [(2_000, 1 << 30), (1 << 30, 24 << 10), (2_000, 24 << 10)] {
            let mut arrow = Vec::new();
            let mut writer = ArrowWriter::try_new_with_options(
                &mut arrow,
                schema.clone(),
                options(max_rows, max_bytes),
            )
            .unwrap();
            for batch in &batches {
                writer.write(batch).unwrap();
            }
            let row_groups = writer.close().unwrap().num_row_groups();
            assert!(row_groups > 4, "{row_groups} row groups");

            let mut serial = Vec::new();
            let mut file =
                Columns::new(&mut serial, schema.clone(), options(max_rows, max_bytes)).unwrap();
            for batch in &batches {
                file.write(batch).unwrap();
            }
            assert_eq!(file.close().unwrap(), row_groups);
            assert!(
                serial == arrow,
                "one thread, limits {max_rows} rows, {max_bytes} bytes"
            );

            for threads in [2, 3] {
                let mut out = Vec::new();
                let file = File(
                    Columns::new(&mut out, schema.clone(), options(max_rows, max_bytes)).unwrap(),
                );
                let ((), File(file)) =
                    encode_beside(file, 3, threads, |each| feed(&batches, each)).unwrap();
                assert_eq!(file.close().unwrap(), row_groups);
                assert!(
                    out == arrow,
                    "{threads} threads, limits {max_rows} rows, {max_bytes} bytes"
                );
            }
        }
    }

    #[test]
    fn a_failure_on_any_thread_stops_them_all() {
        let (schema, batches) = batches();
        let file = |out| File(Columns::new(out, schema.clone(), options(2_000, 1 << 30)).unwrap());
        let (mut out1, mut out2, mut out3) = (Vec::new(), Vec::new(), Vec::new());

        // Decoding fails: its error, after the encoding threads stopped.
        let failed = encode_beside(file(&mut out1), 3, 2, |each| {
            feed(&batches[..10], each)?;
            Err::<(), _>(ConvertError::parse(Some(7), None, "bad"))
        });
        assert_eq!(failed.err().unwrap().to_string(), "line 7: bad");

        // Decoding panics: the panic, not a thread waiting forever.
        let sink = file(&mut out2);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            encode_beside(sink, 3, 2, |each| {
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
        let failed = encode_beside(file(&mut out3), 3, 2, |each| {
            feed(&batches[..5], each)?;
            each(&wrong)?;
            feed(&batches, each)
        });
        let message = failed.err().unwrap().to_string();
        assert!(message.starts_with("cannot write Parquet: "), "{message}");
        assert!(!message.contains("stopped"), "{message}");
    }
}
