//! The byte pipeline in front of the parsers: count compressed bytes, decompress,
//! count and cap decompressed bytes, drop a UTF-8 byte order mark, buffer.
//!
//! Everything streams: nothing here holds more than a buffer's worth of the object (or,
//! read ahead, [`AHEAD_BYTES`]). Errors are classified on the way so that the caller can
//! tell a failing source ([`ConvertError::Io`]) from a corrupt or truncated compressed
//! stream ([`ConvertError::Decompress`]) and from a decompression bomb
//! ([`ConvertError::TooLarge`]).
//!
//! **Read ahead.** With more than one thread, the parser's thread is the one that never
//! rests: it inflates the bytes and parses them, while the others encode the columns of
//! the batches it makes, and wait when there are none. [`Ahead`] lets a waiting thread
//! inflate the next bytes instead ([`Ahead::work`]), in chunks queued for the parser in
//! order, so that inflating is shared by the threads like the encoding; the parser
//! inflates for itself whenever the queue is empty (after the chunk another thread is
//! reading, if one is). Uncompressed input is not read ahead: copying it is cheap, and
//! handing it from one core to another measured slower.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use flate2::read::MultiGzDecoder;

use super::{Compression, ConvertError, ConvertSpec};

/// Read buffer between the decompressor and the parsers.
const BUFFER_BYTES: usize = 64 << 10;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Bytes read ahead at most, beside the chunk the parser is reading: a batch of the
/// default [`ConvertSpec::batch_bytes`], so that a thread done encoding a batch can read
/// the input of the next one (BENCHMARKS.md, "Inflating on the thread with nothing to
/// encode": 2 MiB in chunks of 256 KiB measured no faster).
pub(super) const AHEAD_BYTES: usize = 1 << 20;

/// The size of a chunk read ahead.
const CHUNK_BYTES: usize = 128 << 10;

/// Byte counts on both sides of the decompressor (counted by whichever thread reads).
#[derive(Debug, Default)]
pub(super) struct Meter {
    /// Bytes read from the caller's input.
    read: AtomicU64,
    /// Bytes coming out of the decompressor.
    decoded: AtomicU64,
    /// Whether the caller's input itself failed (so the error is not a decompression one).
    input_failed: AtomicBool,
    /// The watchdog's counter, moved by every read of the caller's input.
    progress: super::progress::Progress,
}

impl Meter {
    /// A meter that also moves `progress` as the input is read.
    pub(super) fn watching(progress: super::progress::Progress) -> Self {
        Self {
            progress,
            ..Self::default()
        }
    }

    /// Bytes read from the caller's input.
    pub(super) fn read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    /// Bytes coming out of the decompressor.
    pub(super) fn decoded(&self) -> u64 {
        self.decoded.load(Ordering::Relaxed)
    }
}

/// The caller's input, counted.
struct Source<'m, R> {
    inner: R,
    meter: &'m Meter,
}

impl<R: Read> Read for Source<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Waiting for the network is not the decoder standing still (`watchdog`).
        let result = self.meter.progress.wait(|| self.inner.read(buf));
        match &result {
            Ok(n) => {
                self.meter.read.fetch_add(*n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() != io::ErrorKind::Interrupted => {
                self.meter.input_failed.store(true, Ordering::Relaxed);
            }
            Err(_) => {}
        }
        result
    }
}

/// The decompressed stream, counted, capped and with its errors classified.
struct Decoded<'m, R> {
    inner: R,
    meter: &'m Meter,
    limit: Option<u64>,
    compression: Compression,
}

impl<R: Read> Read for Decoded<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                let total = self.meter.decoded.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
                match self.limit {
                    Some(limit) if total > limit => {
                        Err(io::Error::other(ConvertError::TooLarge { limit }))
                    }
                    _ => Ok(n),
                }
            }
            Err(e)
                if e.kind() == io::ErrorKind::Interrupted
                    || self.meter.input_failed.load(Ordering::Relaxed) =>
            {
                Err(e)
            }
            Err(e) => Err(match self.compression {
                Compression::None => e,
                Compression::Gzip | Compression::Zstd => {
                    io::Error::other(ConvertError::Decompress {
                        message: format!("{}: {e}", self.compression),
                    })
                }
            }),
        }
    }
}

/// Opens the decoded byte stream of `input` as `spec` describes it.
pub(super) fn open<'a, R: Read + Send + 'a>(
    input: R,
    spec: &ConvertSpec,
    meter: &'a Meter,
) -> Result<impl BufRead + 'a, ConvertError> {
    Ok(BufReader::with_capacity(
        BUFFER_BYTES,
        stream(input, spec, meter)?,
    ))
}

/// `input` decompressed as `compression` says (gzip: every member of a multi-member file).
pub fn decoder<'a, R: Read + Send + 'a>(
    input: R,
    compression: Compression,
) -> Result<Box<dyn Read + Send + 'a>, ConvertError> {
    Ok(match compression {
        Compression::None => Box::new(input),
        Compression::Gzip => Box::new(MultiGzDecoder::new(input)),
        Compression::Zstd => {
            Box::new(
                zstd::Decoder::new(input).map_err(|e| ConvertError::Decompress {
                    message: format!("zstd: {e}"),
                })?,
            )
        }
    })
}

/// The decoded byte stream of `input`, unbuffered (its byte order mark already dropped).
fn stream<'a, R: Read + Send + 'a>(
    input: R,
    spec: &ConvertSpec,
    meter: &'a Meter,
) -> Result<impl Read + Send + 'a, ConvertError> {
    let source = Source {
        inner: input,
        meter,
    };
    let inner = decoder(source, spec.compression)?;
    let mut decoded = Decoded {
        inner,
        meter,
        limit: spec.max_decoded_bytes,
        compression: spec.compression,
    };
    let mut head = Vec::with_capacity(BOM.len());
    decoded
        .by_ref()
        .take(BOM.len() as u64)
        .read_to_end(&mut head)?;
    if head == BOM {
        head.clear();
    }
    Ok(io::Cursor::new(head).chain(decoded))
}

/// The decoded byte stream of `input`, read by the parser through [`Ahead::reader`] and
/// ahead of it by any thread calling [`Ahead::work`].
pub(super) fn open_ahead<'a, R: Read + Send + 'a>(
    input: R,
    spec: &ConvertSpec,
    meter: &'a Meter,
) -> Result<Ahead<'a>, ConvertError> {
    Ok(Ahead {
        stream: Mutex::new(Stream {
            inner: Box::new(stream(input, spec, meter)?),
            ended: false,
            failed: None,
        }),
        queue: Mutex::default(),
        closed: AtomicBool::new(false),
    })
}

/// A byte stream read in chunks by whichever thread is free (see the module's
/// documentation). The chunks are read in order under the `stream` lock and queued in
/// that order before it is released, so the parser sees the bytes of the stream as they
/// come, errors included, wherever they were read.
pub(super) struct Ahead<'a> {
    stream: Mutex<Stream<'a>>,
    queue: Mutex<Queue>,
    /// The parser is done reading: nothing more is read ahead.
    closed: AtomicBool,
}

struct Stream<'a> {
    inner: Box<dyn Read + Send + 'a>,
    /// It ended or failed: nothing more is read from it.
    ended: bool,
    /// The error that ended it, when it came after bytes of the chunk being read: it is
    /// the next chunk.
    failed: Option<io::Error>,
}

/// Chunks read ahead, in order, and emptied ones for reuse.
#[derive(Default)]
struct Queue {
    chunks: VecDeque<io::Result<Vec<u8>>>,
    spare: Vec<Vec<u8>>,
}

impl Queue {
    /// Whether another chunk may be read ahead.
    fn has_room(&self) -> bool {
        let bytes: usize = self
            .chunks
            .iter()
            .map(|c| c.as_ref().map_or(0, Vec::len))
            .sum();
        bytes < AHEAD_BYTES
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<'a> Ahead<'a> {
    /// Reads one chunk ahead if the queue has room (after the chunk another thread is
    /// reading, if one is); returns whether it did.
    pub(super) fn work(&self) -> bool {
        if self.closed.load(Ordering::Relaxed) || !lock(&self.queue).has_room() {
            return false;
        }
        // Waits while the parser reads a chunk for itself, then reads the one after it: a
        // thread that gave up here would sleep until the next batch comes.
        let mut stream = lock(&self.stream);
        if stream.ended && stream.failed.is_none() {
            return false;
        }
        let spare = {
            let mut queued = lock(&self.queue);
            if !queued.has_room() {
                return false; // filled while this thread waited
            }
            queued.spare.pop().unwrap_or_default()
        };
        let read = stream.chunk(spare);
        lock(&self.queue).chunks.push_back(read);
        true
    }

    /// The stream for the parser: one reader at a time.
    pub(super) fn reader(&self) -> AheadReader<'_, 'a> {
        AheadReader {
            ahead: self,
            chunk: Vec::new(),
            at: 0,
        }
    }

    /// The next chunk, `used` (the one read through) kept for reuse: the oldest queued,
    /// else one read now; an empty one at the end.
    fn next_chunk(&self, used: Vec<u8>) -> io::Result<Vec<u8>> {
        let mut queued = lock(&self.queue);
        if used.capacity() > 0 {
            queued.spare.push(used);
        }
        if let Some(chunk) = queued.chunks.pop_front() {
            return chunk;
        }
        drop(queued);
        // Another thread may be reading: its chunk is queued before the lock is released.
        let mut stream = lock(&self.stream);
        let mut queued = lock(&self.queue);
        if let Some(chunk) = queued.chunks.pop_front() {
            return chunk;
        }
        let spare = queued.spare.pop().unwrap_or_default();
        drop(queued);
        stream.chunk(spare)
    }
}

impl Stream<'_> {
    /// Fills `chunk` (whatever it held; a reused one is not zeroed again) up to
    /// [`CHUNK_BYTES`] from the stream; a short chunk, or an error, ends it. The bytes read
    /// before an error come first, the error next time; after that, empty chunks.
    fn chunk(&mut self, mut chunk: Vec<u8>) -> io::Result<Vec<u8>> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        if self.ended {
            chunk.clear();
            return Ok(chunk);
        }
        chunk.resize(CHUNK_BYTES, 0);
        let mut filled = 0;
        while filled < chunk.len() {
            match self.inner.read(&mut chunk[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.ended = true;
                    if filled == 0 {
                        return Err(e);
                    }
                    self.failed = Some(e);
                    break;
                }
            }
        }
        chunk.truncate(filled);
        self.ended |= filled < CHUNK_BYTES;
        Ok(chunk)
    }
}

/// The parser's side of an [`Ahead`]: its bytes in order.
pub(super) struct AheadReader<'r, 'a> {
    ahead: &'r Ahead<'a>,
    chunk: Vec<u8>,
    /// Bytes of `chunk` consumed.
    at: usize,
}

impl Read for AheadReader<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for AheadReader<'_, '_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.at == self.chunk.len() {
            let used = std::mem::take(&mut self.chunk);
            self.at = 0;
            self.chunk = self.ahead.next_chunk(used)?;
        }
        Ok(&self.chunk[self.at..])
    }

    fn consume(&mut self, amount: usize) {
        self.at = (self.at + amount).min(self.chunk.len());
    }
}

impl Drop for AheadReader<'_, '_> {
    fn drop(&mut self) {
        self.ahead.closed.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;

    use flate2::write::GzEncoder;

    use super::super::testutil::csv_spec;
    use super::*;

    /// `len` bytes that differ from chunk to chunk, then `error` if any, counting what is
    /// pulled.
    struct Bytes {
        len: u64,
        pulled: Arc<AtomicU64>,
        error: Option<io::ErrorKind>,
    }

    fn byte(at: u64) -> u8 {
        (at % 251) as u8 ^ (at >> 16) as u8
    }

    impl Read for Bytes {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let at = self.pulled.load(Ordering::Relaxed);
            // Short reads, as from a network.
            let n = buf.len().min(10_000).min((self.len - at) as usize);
            if n == 0
                && let Some(kind) = self.error
            {
                return Err(io::Error::new(kind, "the source failed"));
            }
            for (i, b) in buf[..n].iter_mut().enumerate() {
                *b = byte(at + i as u64);
            }
            self.pulled.store(at + n as u64, Ordering::Relaxed);
            Ok(n)
        }
    }

    fn source(len: u64, error: Option<io::ErrorKind>) -> (Bytes, Arc<AtomicU64>) {
        let pulled = Arc::new(AtomicU64::new(0));
        let bytes = Bytes {
            len,
            pulled: pulled.clone(),
            error,
        };
        (bytes, pulled)
    }

    /// What the parser reads through `reader`, in reads of `step` bytes, and the error
    /// that ended it.
    fn drain(mut reader: impl BufRead, step: usize) -> (Vec<u8>, Option<io::Error>) {
        let mut got = Vec::new();
        loop {
            match reader.fill_buf() {
                Ok([]) => return (got, None),
                Ok(available) => {
                    let n = available.len().min(step);
                    got.extend_from_slice(&available[..n]);
                    reader.consume(n);
                }
                Err(e) => return (got, Some(e)),
            }
        }
    }

    #[test]
    fn read_ahead_by_other_threads_gives_the_bytes_in_order_and_the_error_last() {
        let len = 5 * CHUNK_BYTES as u64 + 12_345;
        let expected: Vec<u8> = (0..len).map(byte).collect();
        let spec = csv_spec(r#"[{"name":"a","type":"string"}]"#);
        // No help, a thread reading ahead all along, and one that read everything first.
        for helpers in [0, 1, 2] {
            for error in [None, Some(io::ErrorKind::ConnectionReset)] {
                let meter = Meter::default();
                let (bytes, _) = source(len, error);
                let ahead = open_ahead(bytes, &spec, &meter).unwrap();
                let done = AtomicBool::new(false);
                let (got, failed) = std::thread::scope(|scope| {
                    for _ in 0..helpers {
                        scope.spawn(|| {
                            while !done.load(Ordering::Relaxed) {
                                if !ahead.work() {
                                    std::thread::yield_now();
                                }
                            }
                        });
                    }
                    let drained = drain(ahead.reader(), 777);
                    done.store(true, Ordering::Relaxed);
                    drained
                });
                let case = format!("{helpers} helpers, error {error:?}");
                assert!(got == expected, "{case}: {} bytes, not the same", got.len());
                assert_eq!(failed.map(|e| e.kind()), error, "{case}");
                assert_eq!(meter.read(), len, "{case}");
                assert_eq!(meter.decoded(), len, "{case}");
            }
        }
    }

    #[test]
    fn reading_ahead_stops_at_its_bound_and_when_the_reader_is_done() {
        let spec = csv_spec(r#"[{"name":"a","type":"string"}]"#);
        let meter = Meter::default();
        let (bytes, pulled) = source(100 << 20, None);
        let ahead = open_ahead(bytes, &spec, &meter).unwrap();
        let mut reader = ahead.reader();
        assert_eq!(reader.fill_buf().unwrap().len(), CHUNK_BYTES);
        let mut chunks = 0;
        while ahead.work() {
            chunks += 1;
        }
        assert_eq!(chunks, AHEAD_BYTES / CHUNK_BYTES);
        let bound = (AHEAD_BYTES + CHUNK_BYTES) as u64;
        assert_eq!(pulled.load(Ordering::Relaxed), bound);
        // Reading one chunk makes room for one more.
        reader.consume(CHUNK_BYTES);
        assert_eq!(reader.fill_buf().unwrap().len(), CHUNK_BYTES);
        assert!(ahead.work());
        assert!(!ahead.work());
        drop(reader);
        let before = pulled.load(Ordering::Relaxed);
        // Room again, but the reader is gone.
        lock(&ahead.queue).chunks.clear();
        assert!(!ahead.work());
        assert_eq!(pulled.load(Ordering::Relaxed), before);
    }

    #[test]
    fn gzip_read_ahead_is_the_stream_inflated_and_counted() {
        let text: Vec<u8> = (0..3_000_000u32)
            .flat_map(|i| format!("{i},{}\n", i % 7).into_bytes())
            .collect();
        let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&text).unwrap();
        let gz = gz.finish().unwrap();
        let mut spec = csv_spec(r#"[{"name":"a","type":"string"}]"#);
        spec.compression = Compression::Gzip;
        let meter = Meter::default();
        let ahead = open_ahead(&gz[..], &spec, &meter).unwrap();
        while ahead.work() {}
        let (got, failed) = drain(ahead.reader(), 4096);
        assert!(failed.is_none());
        assert!(got == text, "{} bytes, not the same", got.len());
        assert_eq!(meter.read(), gz.len() as u64);
        assert_eq!(meter.decoded(), text.len() as u64);
    }
}
