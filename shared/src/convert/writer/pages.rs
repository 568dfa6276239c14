//! Where the Parquet writer's finished pages are compressed, and kept until their row group
//! is written.
//!
//! **Kept.** Parquet wants each column chunk contiguous while batches arrive with every
//! column at once, so the writer holds all of a row group's compressed pages until the group
//! closes: on the heap, that is as much memory as the row group is large (64 MiB by default:
//! on rows of 30 columns, more than all the rest of the converter's memory). [`PageStores`]
//! keeps pages in memory up to a budget shared by the columns of a conversion and appends the
//! rest to an anonymous temporary file per column chunk (removed when the chunk is written or
//! the conversion abandoned), so memory no longer grows with the row group. Small files never
//! touch the disk; a row group of a large one is written to the temporary directory once and
//! read back once (`TMPDIR`, else `/tmp`: Lambda's ephemeral storage, 512 MB by default, holds
//! a row group of the default size with room to spare). The output is the same bytes
//! wherever the pages waited.
//!
//! **Compressed.** arrow-rs compresses a page in the column writer that made it, with a zstd
//! context of that writer's own: one per column of each row group being written, ≈ 0.7 MB
//! each at level 3 (≈ 20 MB on rows of 30 columns with two row groups open), and each cold
//! in the processor's caches by the time its column's next page comes. So the writer is
//! given no codec, and the stores compress each page as it arrives, with one zstd context
//! per thread ([`compress`]), writing the compressed size into the page's header; when the
//! chunk is spliced into its row group ([`ChunkWriter::append_to`]), its metadata (codec,
//! sizes, page offsets) is rewritten to match. The file is the same bytes arrow-rs writes
//! with the codec itself (zstd gives the same output for the same input and level, whatever
//! the context compressed before): the tests of [`super::columns`] compare them.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::{Buf, Bytes};
use parquet::arrow::arrow_writer::{
    ArrowColumnWriter, ArrowLeafColumn, ArrowRowGroupWriterFactory, PageKey, PageStore,
    PageStoreArgs, PageStoreFactory,
};
use parquet::basic::{Compression, ZstdLevel};
use parquet::errors::{ParquetError, Result};
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::writer::SerializedRowGroupWriter;

/// Makes the [`PageStore`] of each column chunk of a conversion; they share one budget of
/// bytes kept in memory, and compress the pages they are given at `level` (`None`: the
/// pages come compressed, or are to stay as they come).
#[derive(Debug)]
pub(crate) struct PageStores {
    budget: usize,
    /// Bytes of pages held in memory by all its stores.
    resident: Arc<AtomicUsize>,
    level: Option<ZstdLevel>,
    /// Chunks made and not yet given to their [`ChunkWriter`], in the order of their columns.
    made: Mutex<Vec<Arc<Chunk>>>,
}

#[cfg(test)]
thread_local! {
    /// Bytes of pages this thread has written to temporary files, for the tests.
    pub(crate) static SPILLED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl PageStores {
    /// Stores keeping at most `budget` bytes of pages in memory between them.
    pub(crate) fn new(budget: usize, level: Option<ZstdLevel>) -> Self {
        Self {
            budget,
            resident: Arc::default(),
            level,
            made: Mutex::default(),
        }
    }

    fn chunk(&self) -> Chunk {
        Chunk(Mutex::new(Pages {
            budget: self.budget,
            shared: self.resident.clone(),
            level: self.level,
            blobs: Vec::new(),
            resident: 0,
            file: None,
            file_len: 0,
            header: None,
            pages: Vec::new(),
        }))
    }

    /// The column writers of row group `number`, each with its pages. `factory` must make
    /// its writers' stores with `self`.
    pub(crate) fn writers(
        &self,
        factory: &ArrowRowGroupWriterFactory,
        number: usize,
    ) -> Result<Vec<ChunkWriter>> {
        let writers = factory.create_column_writers(number)?;
        let chunks = std::mem::take(&mut *lock(&self.made));
        if chunks.len() != writers.len() {
            return Err(ParquetError::General(format!(
                "{} column writers but {} page stores",
                writers.len(),
                chunks.len()
            )));
        }
        Ok(writers
            .into_iter()
            .zip(chunks)
            .map(|(writer, chunk)| ChunkWriter { writer, chunk })
            .collect())
    }
}

impl PageStoreFactory for PageStores {
    fn create(&self, _args: &PageStoreArgs<'_>) -> Result<Box<dyn PageStore>> {
        let chunk = Arc::new(self.chunk());
        lock(&self.made).push(chunk.clone());
        Ok(Box::new(Store(chunk)))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One column chunk's pages, shared by the store its column writer puts them in and the
/// [`ChunkWriter`] that splices them into the file.
#[derive(Debug)]
pub(crate) struct Chunk(Mutex<Pages>);

/// The [`PageStore`] of a column writer.
struct Store(Arc<Chunk>);

impl PageStore for Store {
    fn put(&mut self, value: Bytes) -> Result<PageKey> {
        lock(&self.0.0).put(value)
    }

    fn take(&mut self, key: PageKey) -> Result<Bytes> {
        let index = usize::try_from(key.get())
            .map_err(|_| ParquetError::General(format!("invalid page key {}", key.get())))?;
        lock(&self.0.0).take(index)
    }

    fn memory_size(&self) -> usize {
        lock(&self.0.0).resident
    }
}

/// One column chunk's pages: in memory while the shared budget allows, else in its file.
#[derive(Debug)]
struct Pages {
    budget: usize,
    /// [`PageStores::resident`].
    shared: Arc<AtomicUsize>,
    level: Option<ZstdLevel>,
    /// Each page's header, then its data (as the column writer puts them).
    blobs: Vec<Blob>,
    /// Bytes of `blobs` in memory, returned to the budget when taken or dropped.
    resident: usize,
    file: Option<File>,
    file_len: u64,
    /// The header of the page whose data comes next.
    header: Option<Bytes>,
    pages: Vec<Page>,
}

/// A page of a [`Chunk`]: where its header and data are, and their sizes.
#[derive(Debug)]
struct Page {
    dictionary: bool,
    /// Index in [`Pages::blobs`] of its header (its data is the next).
    header: usize,
    given_header: usize,
    given_data: usize,
    stored_header: usize,
    stored_data: usize,
}

impl Page {
    /// Its bytes as the column writer counted them (header and data as given).
    fn given(&self) -> usize {
        self.given_header + self.given_data
    }

    /// Its bytes as stored (compressed, the header rewritten).
    fn stored(&self) -> usize {
        self.stored_header + self.stored_data
    }
}

#[derive(Debug)]
enum Blob {
    Memory(Bytes),
    File { offset: u64, len: usize },
    Taken,
}

fn spill_error(e: io::Error) -> ParquetError {
    ParquetError::General(format!(
        "cannot keep a row group's pages in a temporary file: {e}"
    ))
}

impl Pages {
    /// Takes a page's header, or its data: compresses the data if the stores compress,
    /// and stores both.
    fn put(&mut self, value: Bytes) -> Result<PageKey> {
        let Some(header) = self.header.take() else {
            self.header = Some(value);
            return Ok(PageKey::new(self.blobs.len() as u64));
        };
        let parsed = PageHeader::parse(&header)?;
        if parsed.compressed != value.len() {
            return Err(ParquetError::General(format!(
                "a page header gives {} bytes of data, the page has {}",
                parsed.compressed,
                value.len()
            )));
        }
        let (given_header, given_data) = (header.len(), value.len());
        let (header, data) = match self.level {
            None => (header, value),
            Some(level) => {
                if parsed.kind == PageHeader::DATA_PAGE_V2 {
                    return Err(ParquetError::General(
                        "pages compressed in the store must be version 1 data pages".into(),
                    ));
                }
                let data = compress(level, &value)?;
                (parsed.with_compressed(&header, data.len()), data)
            }
        };
        let page = Page {
            dictionary: parsed.kind == PageHeader::DICTIONARY_PAGE,
            header: self.blobs.len(),
            given_header,
            given_data,
            stored_header: header.len(),
            stored_data: data.len(),
        };
        self.pages.push(page);
        self.store(header)?;
        self.store(data)?;
        Ok(PageKey::new(self.blobs.len() as u64 - 1))
    }

    /// Bytes of the pages as the column writer counted them.
    fn given(&self) -> u64 {
        self.pages.iter().map(|p| p.given() as u64).sum()
    }

    /// Bytes of the pages as stored.
    fn stored(&self) -> u64 {
        self.pages.iter().map(|p| p.stored() as u64).sum()
    }

    /// Keeps `value` in memory if the budget allows, else in the file.
    fn store(&mut self, value: Bytes) -> Result<()> {
        let len = value.len();
        let fits = self
            .shared
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |resident| {
                resident.checked_add(len).filter(|&r| r <= self.budget)
            })
            .is_ok();
        if fits {
            self.resident += len;
            self.blobs.push(Blob::Memory(value));
        } else {
            let offset = self.write(&value).map_err(spill_error)?;
            #[cfg(test)]
            SPILLED.with(|spilled| spilled.set(spilled.get() + len));
            self.blobs.push(Blob::File { offset, len });
        }
        Ok(())
    }

    fn write(&mut self, value: &[u8]) -> io::Result<u64> {
        let file = match &mut self.file {
            Some(file) => file,
            None => self.file.insert(tempfile::tempfile()?),
        };
        let offset = self.file_len;
        file.seek(SeekFrom::Start(offset))?;
        file.write_all(value)?;
        self.file_len += value.len() as u64;
        Ok(offset)
    }

    fn take(&mut self, index: usize) -> Result<Bytes> {
        let slot = self
            .blobs
            .get_mut(index)
            .ok_or_else(|| ParquetError::General(format!("invalid page key {index}")))?;
        match std::mem::replace(slot, Blob::Taken) {
            Blob::Memory(value) => {
                self.resident -= value.len();
                self.shared.fetch_sub(value.len(), Ordering::Relaxed);
                Ok(value)
            }
            Blob::File { offset, len } => {
                let file = self
                    .file
                    .as_mut()
                    .expect("a page in the file made the file");
                let mut value = vec![0; len];
                file.seek(SeekFrom::Start(offset)).map_err(spill_error)?;
                file.read_exact(&mut value).map_err(spill_error)?;
                Ok(value.into())
            }
            Blob::Taken => Err(ParquetError::General(format!(
                "page key {index} taken twice"
            ))),
        }
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        self.shared.fetch_sub(self.resident, Ordering::Relaxed);
    }
}

/// `data` compressed at `level` with this thread's zstd context, as arrow-rs's codec does
/// with its own (`zstd::bulk`, the input's size given): the same bytes.
fn compress(level: ZstdLevel, data: &[u8]) -> Result<Bytes> {
    thread_local! {
        /// The thread's context and its level, and room for the largest page compressed.
        static ZSTD: RefCell<Option<(i32, zstd::bulk::Compressor<'static>, Vec<u8>)>> =
            const { RefCell::new(None) };
    }
    let level = level.compression_level();
    ZSTD.with(|zstd| {
        let mut zstd = zstd.borrow_mut();
        let (_, compressor, out) = match &mut *zstd {
            Some(held) if held.0 == level => held,
            other => other.insert((level, zstd::bulk::Compressor::new(level)?, Vec::new())),
        };
        out.clear();
        out.reserve(zstd::zstd_safe::compress_bound(data.len()));
        compressor.compress_to_buffer(data, out)?;
        // Kept until the row group is written: only its bytes, not the room.
        Ok(Bytes::copy_from_slice(out))
    })
}

/// The first three fields of a page header (Thrift compact protocol), which every writer of
/// the format puts first, in this order: the page's type, and its size uncompressed and
/// compressed.
struct PageHeader {
    kind: i32,
    uncompressed: usize,
    compressed: usize,
    /// Where the fields after them begin.
    rest: usize,
}

impl PageHeader {
    const DICTIONARY_PAGE: i32 = 2;
    const DATA_PAGE_V2: i32 = 3;
    /// A field of type i32 whose id is one more than the field before's.
    const NEXT_I32: u8 = 0x15;

    fn parse(header: &[u8]) -> Result<Self> {
        let malformed = || {
            ParquetError::General(format!(
                "unexpected page header {:02x?}",
                &header[..header.len().min(16)]
            ))
        };
        let mut at = 0;
        let mut field = || -> Option<i32> {
            (*header.get(at)? == Self::NEXT_I32).then_some(())?;
            at += 1;
            let mut value = 0u32;
            for shift in (0..35).step_by(7) {
                let byte = *header.get(at)?;
                at += 1;
                value |= u32::from(byte & 0x7f) << shift;
                if byte & 0x80 == 0 {
                    return Some((value >> 1) as i32 ^ -((value & 1) as i32));
                }
            }
            None
        };
        let (kind, uncompressed, compressed) = (
            field().ok_or_else(malformed)?,
            field().ok_or_else(malformed)?,
            field().ok_or_else(malformed)?,
        );
        // Field 4 would be a checksum of the data as given.
        if header.get(at).is_none_or(|&next| next == Self::NEXT_I32) {
            return Err(malformed());
        }
        Ok(Self {
            kind,
            uncompressed: usize::try_from(uncompressed).map_err(|_| malformed())?,
            compressed: usize::try_from(compressed).map_err(|_| malformed())?,
            rest: at,
        })
    }

    /// `header` (that parsed as `self`) with `compressed` as its compressed size.
    fn with_compressed(&self, header: &[u8], compressed: usize) -> Bytes {
        let mut out = Vec::with_capacity(header.len() + 5);
        for value in [
            self.kind as i64,
            self.uncompressed as i64,
            compressed as i64,
        ] {
            out.push(Self::NEXT_I32);
            let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
            while zigzag >= 0x80 {
                out.push(zigzag as u8 | 0x80);
                zigzag >>= 7;
            }
            out.push(zigzag as u8);
        }
        out.extend_from_slice(&header[self.rest..]);
        out.into()
    }
}

/// A column chunk's writer, and the pages it has finished.
pub(crate) struct ChunkWriter {
    writer: ArrowColumnWriter,
    chunk: Arc<Chunk>,
}

impl ChunkWriter {
    pub(crate) fn write(&mut self, leaf: &ArrowLeafColumn) -> Result<()> {
        self.writer.write(leaf)
    }

    /// The chunk's estimated size in the file, as arrow-rs estimates it with pages it
    /// compressed itself (what the row group limit in bytes is measured against).
    pub(crate) fn estimated_bytes(&self) -> usize {
        let pages = lock(&self.chunk.0);
        (self.writer.get_estimated_total_bytes() as u64 + pages.stored())
            .saturating_sub(pages.given()) as usize
    }

    /// Closes the chunk and writes it into `row_group`: its pages as stored, the dictionary
    /// first, and its metadata rewritten to match them.
    pub(crate) fn append_to<W: Write + Send>(
        self,
        row_group: &mut SerializedRowGroupWriter<'_, W>,
    ) -> Result<()> {
        let closed = self.writer.close()?;
        let mut close = closed.close().clone();
        drop(closed);
        let pages = lock(&self.chunk.0);
        if pages.header.is_some() {
            return Err(ParquetError::General(
                "a page header without its data".into(),
            ));
        }
        let metadata = &close.metadata;
        let (given, stored) = (pages.given(), pages.stored());
        if metadata.compressed_size() as u64 != given {
            return Err(ParquetError::General(format!(
                "the column writer counts {} bytes of pages, its store {}",
                metadata.compressed_size(),
                given
            )));
        }
        let dictionary = pages.pages.iter().find(|p| p.dictionary);
        let first_data = dictionary.map_or(0, Page::stored) as i64;
        let (given_headers, stored_headers) = pages.pages.iter().fold((0, 0), |(g, s), p| {
            (g + p.given_header as i64, s + p.stored_header as i64)
        });
        let mut builder = metadata
            .clone()
            .into_builder()
            .set_total_compressed_size(stored as i64)
            .set_total_uncompressed_size(
                metadata.uncompressed_size() - given_headers + stored_headers,
            )
            .set_dictionary_page_offset(dictionary.map(|_| 0))
            .set_data_page_offset(first_data);
        if let Some(level) = pages.level {
            builder = builder.set_compression(Compression::ZSTD(level));
        }
        close.metadata = builder.build()?;
        close.bytes_written = stored;
        let data: Vec<&Page> = pages.pages.iter().filter(|p| !p.dictionary).collect();
        if let Some(index) = close.offset_index.as_mut() {
            if index.page_locations.len() != data.len() {
                return Err(ParquetError::General(format!(
                    "an offset index of {} pages for {} data pages",
                    index.page_locations.len(),
                    data.len()
                )));
            }
            let mut offset = first_data;
            for (location, page) in index.page_locations.iter_mut().zip(&data) {
                location.offset = offset;
                location.compressed_page_size = page.stored() as i32;
                offset += page.stored() as i64;
            }
        }
        let order = dictionary
            .into_iter()
            .chain(data)
            .flat_map(|p| [p.header, p.header + 1])
            .collect();
        drop(pages);
        let splice = Splice {
            chunk: self.chunk,
            order: Mutex::new(Some(order)),
            len: stored,
        };
        row_group.append_column(&splice, close)
    }
}

/// A chunk's pages in the order of the file, read back from its store once.
struct Splice {
    chunk: Arc<Chunk>,
    /// Indexes of the blobs, until read.
    order: Mutex<Option<Vec<usize>>>,
    len: u64,
}

impl Length for Splice {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for Splice {
    type T = SpliceRead;

    fn get_read(&self, start: u64) -> Result<SpliceRead> {
        let order = lock(&self.order)
            .take()
            .filter(|_| start == 0)
            .ok_or_else(|| ParquetError::General("a chunk's pages are read once, whole".into()))?;
        Ok(SpliceRead {
            chunk: self.chunk.clone(),
            order: order.into_iter(),
            current: Bytes::new(),
        })
    }

    fn get_bytes(&self, _start: u64, _length: usize) -> Result<Bytes> {
        Err(ParquetError::General(
            "a chunk's pages are read once, whole".into(),
        ))
    }
}

struct SpliceRead {
    chunk: Arc<Chunk>,
    order: std::vec::IntoIter<usize>,
    current: Bytes,
}

impl Read for SpliceRead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            let Some(index) = self.order.next() else {
                return Ok(0);
            };
            self.current = lock(&self.chunk.0)
                .take(index)
                .map_err(|e| io::Error::other(e.to_string()))?;
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current.advance(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page header of `kind` with `len` bytes of data, and a field after the sizes.
    fn header(kind: i32, len: usize) -> Bytes {
        let parsed = PageHeader {
            kind,
            uncompressed: len,
            compressed: len,
            rest: 0,
        };
        // Field 5 (a struct, two ids on) and an empty struct: a version 1 data page header.
        parsed.with_compressed(&[0x2c, 0x00], len)
    }

    fn pages(chunk: &mut Chunk) -> &mut Pages {
        chunk.0.get_mut().unwrap()
    }

    /// Puts a page of `data` into `chunk` as a column writer does (its header, then its
    /// data); the key of its data (its header's is the one before).
    fn put(chunk: &mut Chunk, data: Bytes) -> usize {
        let pages = pages(chunk);
        pages.put(header(0, data.len())).unwrap();
        pages.put(data).unwrap().get() as usize
    }

    #[test]
    fn pages_past_the_budget_wait_in_a_file_and_come_back_whole() {
        let spilled = || SPILLED.with(|s| s.get());
        let before = spilled();
        // Headers of 8 bytes and data of 4: two pages fit a budget of 24 bytes.
        let stores = PageStores::new(24, None);
        let (mut a, mut b) = (stores.chunk(), stores.chunk());
        let data: Vec<Bytes> = (0..6u8).map(|i| Bytes::from(vec![i; 4])).collect();
        let keys: Vec<_> = data
            .iter()
            .enumerate()
            .map(|(i, d)| put(if i % 2 == 0 { &mut a } else { &mut b }, d.clone()))
            .collect();
        assert_eq!(spilled() - before, 4 * 12);
        assert_eq!(pages(&mut a).resident + pages(&mut b).resident, 24);
        for (i, &key) in keys.iter().enumerate().rev() {
            let chunk = pages(if i % 2 == 0 { &mut a } else { &mut b });
            assert_eq!(chunk.take(key).unwrap(), data[i]);
            assert_eq!(chunk.take(key - 1).unwrap(), header(0, 4));
        }
        assert_eq!(pages(&mut a).resident + pages(&mut b).resident, 0);
        assert!(pages(&mut a).take(keys[0]).is_err(), "a page is taken once");
        // What the stores gave back is free for the next ones.
        let mut c = stores.chunk();
        put(&mut c, Bytes::from(vec![9; 16]));
        assert_eq!((pages(&mut c).resident, spilled() - before), (24, 48));
        drop(c);
        let mut d = stores.chunk();
        put(&mut d, Bytes::from(vec![9; 16]));
        assert_eq!(
            (pages(&mut d).resident, spilled() - before),
            (24, 48),
            "a dropped store's pages are freed"
        );
    }

    #[test]
    fn a_compressed_page_gets_its_compressed_size_in_its_header() {
        let level = ZstdLevel::try_new(3).unwrap();
        let stores = PageStores::new(1 << 20, Some(level));
        let mut chunk = stores.chunk();
        let stored = pages(&mut chunk);
        let data = Bytes::from(b"tidemark ".repeat(1000));
        stored
            .put(header(PageHeader::DICTIONARY_PAGE, data.len()))
            .unwrap();
        stored.put(data.clone()).unwrap();
        let (stored_header, stored_data) = (stored.take(0).unwrap(), stored.take(1).unwrap());
        assert_eq!(
            zstd::bulk::decompress(&stored_data, data.len()).unwrap(),
            data
        );
        let parsed = PageHeader::parse(&stored_header).unwrap();
        assert_eq!(
            (parsed.kind, parsed.uncompressed, parsed.compressed),
            (PageHeader::DICTIONARY_PAGE, 9000, stored_data.len())
        );
        assert_eq!(&stored_header[parsed.rest..], &[0x2c, 0x00]);
        assert!(stored.pages[0].dictionary);
        assert_eq!(
            (stored.given(), stored.stored()),
            (
                (header(PageHeader::DICTIONARY_PAGE, 9000).len() + 9000) as u64,
                (stored_header.len() + stored_data.len()) as u64
            )
        );

        // What the stores cannot rewrite is refused, not written wrong.
        for (bad, why) in [
            (header(PageHeader::DATA_PAGE_V2, 4), "a version 2 data page"),
            (header(0, 5), "a size that is not the data's"),
            (
                Bytes::from_static(&[0x15, 0x00, 0x15, 0x08, 0x15, 0x08, 0x15, 0x02]),
                "a checksum",
            ),
            (Bytes::from_static(&[0x16, 0x00]), "another first field"),
        ] {
            let mut chunk = stores.chunk();
            pages(&mut chunk).put(bad).unwrap();
            assert!(
                pages(&mut chunk).put(Bytes::from(vec![1; 4])).is_err(),
                "{why}"
            );
        }
    }
}
