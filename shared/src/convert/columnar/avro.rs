//! Avro input: an Avro Object Container File (possibly wrapped whole in gzip or zstd) read
//! front to back, block by block, by `arrow-avro`, with only the fields it reads decoded.
//!
//! The file's header is read first, to learn its writer schema (the names of its
//! top-level fields) and its codec; the bytes of the header are kept and given again to
//! the reader, so the input is still read once, as a stream (no spool). Every codec of
//! the format is read: null, deflate, snappy, zstandard, bzip2 and xz. The file's records
//! must be Avro records; their fields are the file's columns, matched to the source's
//! schema and widened as `convert/columnar/typed.rs` says (the contract shared with Parquet and
//! ORC input), the Avro types as `arrow-avro` reads them: `int` is `Int32`, `long`
//! `Int64`, `float` `Float32`, `double` `Float64`, `string` `Utf8`, an `enum` a dictionary
//! of strings, a union of `null` and one type a nullable column of that type, the logical
//! types `decimal` a `Decimal128`, `date` a `Date32`, `timestamp-*` and
//! `local-timestamp-*` a timestamp of that unit, a `record` a struct, an `array` a list,
//! a `map` a map of string keys. A top-level field no column reads is not decoded, unless
//! its values must be counted (`on_unknown_field: ignore`: the format has no statistics,
//! so the field is decoded to count them, which costs the decoding of that field) or
//! rescued; a record's fields are decoded with their record, read or not.
//!
//! Memory is bounded by one block of the file (compressed and decompressed: a block is
//! decompressed whole, and a block's size is the writer's choice, 64 KiB by default in
//! the reference writers) and by [`ConvertSpec::batch_rows`] rows of the projected
//! columns. Each block is inflated once before the reader takes it, into nothing, so
//! that what the blocks inflate to counts against [`ConvertSpec::max_decoded_bytes`] with
//! the input ([`BlockScan`]): a block that would take it past the limit fails the file as
//! too large before the reader inflates it. The format has no footer and no row count: a file must end with a whole block
//! (its last 16 bytes the file's sync marker), or it fails as truncated; a file cut
//! exactly between two blocks cannot be told from a whole one.

use std::io::{self, BufRead, Read};
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use arrow_avro::compression::CompressionCodec;
use arrow_avro::reader::{Reader, ReaderBuilder, read_header_info};
use arrow_schema::{ArrowError, Fields};

use super::typed::{Rows, TypedBatches, invalid, typed};
use super::{ConvertError, ConvertSpec};
use crate::schema::FieldType;

/// Batches of an Avro file in the spec's schema.
pub(in crate::convert) type AvroBatches<R> = TypedBatches<Blocks<R>>;

/// The input with its header given again in front (it was read to learn the schema).
type Replayed<R> = io::Chain<io::Cursor<Vec<u8>>, Recorder<R>>;

/// The top-level fields of the Avro file `input` as its reader reads them (from the header;
/// no block read).
pub(in crate::convert) fn fields(
    input: impl BufRead,
    spec: &ConvertSpec,
) -> Result<Fields, ConvertError> {
    Ok(open(input, spec, None)?.schema().fields().clone())
}

/// Reads the header of `input` and checks its columns against the spec's schema.
pub(in crate::convert) fn batches<R: BufRead>(
    input: R,
    spec: &ConvertSpec,
    types: &[FieldType],
) -> Result<AvroBatches<R>, ConvertError> {
    let not_avro = |e: &dyn std::fmt::Display| invalid(format!("not a valid Avro file: {e}"));
    let tail = Arc::new(Mutex::new(Tail::default()));
    let mut recorder = Recorder {
        inner: input,
        kept: Some(Vec::new()),
        tail: tail.clone(),
        consumed: 0,
        scanned: 0,
        blocks: None,
    };
    let header = read_header_info(&mut recorder).map_err(|e| not_avro(&e))?;
    let codec = header.compression().ok().flatten();
    if codec.is_some() {
        recorder.scanned = header.header_len();
        recorder.blocks = Some(BlockScan {
            framing: Framing::START,
            codec,
            limit: spec.max_decoded_bytes,
            inflated: 0,
            block: Vec::new(),
            tail: tail.clone(),
        });
    }
    let writer_schema = header.writer_schema().map_err(|e| not_avro(&e))?;
    check_record(&writer_schema.json_string).map_err(|e| not_avro(&e))?;
    let kept = recorder.kept.take().unwrap_or_default();
    // The file's columns as Arrow types, from a reader of its header alone.
    let header_only = io::Cursor::new(kept.clone());
    let file_schema = open(header_only, spec, None)?.schema();
    let (typed, needs) = typed(file_schema.fields(), spec, types, |_, _| None)?;
    // With no column to read, the first field is read to count rows.
    let (projection, use_columns) = match needs.keys().copied().collect::<Vec<_>>() {
        roots if roots.is_empty() => (vec![0], false),
        roots => (roots, true),
    };
    let reader = open(
        io::Cursor::new(kept).chain(recorder),
        spec,
        Some(projection),
    )?;
    let reader = Blocks {
        reader: Some(reader),
        sync: header.sync(),
        tail,
    };
    Ok(TypedBatches::new(
        Rows::Read {
            reader,
            use_columns,
        },
        typed,
        spec,
        "Avro",
        None,
    ))
}

/// `arrow-avro`'s reader of `input`, of the columns `projection` (`None`: all).
fn open<I: BufRead>(
    input: I,
    spec: &ConvertSpec,
    projection: Option<Vec<usize>>,
) -> Result<Reader<I>, ConvertError> {
    let mut builder = ReaderBuilder::new().with_batch_size(spec.batch_rows);
    if let Some(projection) = projection {
        builder = builder.with_projection(projection);
    }
    builder.build(input).map_err(|e| {
        if let Some(limit) = super::typed::too_large_in(&e) {
            return ConvertError::TooLarge { limit };
        }
        match e {
            ArrowError::IoError(..) => invalid(format!("not a valid Avro file: {e}")),
            e => invalid(format!("cannot read this Avro file: {e}")),
        }
    })
}

/// The batches of `arrow-avro`'s reader, and a check at the end of the file that it ends
/// with a whole block: the reader stops silently at the end of its input, dropping a last
/// block cut short (a truncated object), so the last 16 bytes of the input must be the
/// file's sync marker, which ends the header and every block.
pub(in crate::convert) struct Blocks<R: BufRead> {
    /// `None` once the end was checked.
    reader: Option<Reader<Replayed<R>>>,
    sync: [u8; 16],
    tail: Arc<Mutex<Tail>>,
}

impl<R: BufRead> Iterator for Blocks<R> {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let next = self.reader.as_mut()?.next();
        // A block over the limit stopped the input: that is the error, whatever the reader
        // made of it.
        if let (Some(Err(_)), Some(limit)) =
            (&next, self.tail.lock().ok().and_then(|t| t.too_large))
        {
            self.reader = None;
            return Some(Err(too_large(limit)));
        }
        if next.is_some() {
            return next;
        }
        self.reader = None;
        if let Some(limit) = self.tail.lock().ok().and_then(|t| t.too_large) {
            return Some(Err(too_large(limit)));
        }
        let tail = self.tail.lock().map(|t| t.last).unwrap_or_default();
        (tail != self.sync).then(|| {
            Err(ArrowError::ParseError(
                "the file does not end with a whole block (truncated?)".into(),
            ))
        })
    }
}

/// The last 16 bytes consumed, and whether the blocks inflated past `max_decoded_bytes`.
#[derive(Default)]
pub(in crate::convert) struct Tail {
    last: [u8; 16],
    /// The limit the blocks inflated past (the input stopped there).
    too_large: Option<u64>,
}

/// [`ConvertError::TooLarge`] as the reader's error (`convert/columnar/typed.rs` gives it back).
fn too_large(limit: u64) -> ArrowError {
    ArrowError::ExternalError(Box::new(ConvertError::TooLarge { limit }))
}

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        if bytes.len() >= 16 {
            self.last.copy_from_slice(&bytes[bytes.len() - 16..]);
        } else {
            self.last.rotate_left(bytes.len());
            self.last[16 - bytes.len()..].copy_from_slice(bytes);
        }
    }
}

/// Checks that a writer schema is a record's with named fields (one column per field).
fn check_record(schema: &str) -> Result<(), String> {
    let schema: serde_json::Value =
        serde_json::from_str(schema).map_err(|e| format!("its schema is not JSON: {e}"))?;
    let fields = match &schema {
        serde_json::Value::Object(record) if record.get("type") == Some(&"record".into()) => {
            record.get("fields").and_then(|f| f.as_array())
        }
        _ => None,
    };
    let fields = fields.ok_or("its schema is not a record's (one column per field)")?;
    if fields.is_empty() {
        return Err("its records have no fields".into());
    }
    match fields
        .iter()
        .all(|f| f.get("name").is_some_and(|n| n.is_string()))
    {
        true => Ok(()),
        false => Err("a field of its schema has no name".into()),
    }
}

/// The input, keeping a copy of what is consumed until `kept` is taken (the header), and
/// the last 16 bytes consumed; past the header, the blocks of a compressed file are
/// followed and inflated before the reader sees them (see [`BlockScan`]).
pub(in crate::convert) struct Recorder<R> {
    inner: R,
    kept: Option<Vec<u8>>,
    tail: Arc<Mutex<Tail>>,
    /// Bytes consumed so far.
    consumed: u64,
    /// Bytes looked at by `blocks` so far (from the header's end on).
    scanned: u64,
    blocks: Option<BlockScan>,
}

/// Follows the blocks of a compressed file as its bytes arrive and inflates each, counting,
/// before the reader sees it: `arrow-avro` inflates a block whole into memory, however
/// large, so the blocks' inflated bytes and the input's count against
/// [`ConvertSpec::max_decoded_bytes`] here (a block is inflated into nothing, a piece at a
/// time, and at most up to the limit). Each block is inflated twice: here, and by the
/// reader. A snappy block too short to hold the 4-byte checksum that ends it is refused
/// too (`arrow-avro` 60.1 panics on one: it slices the checksum off unchecked).
pub(in crate::convert) struct BlockScan {
    framing: Framing,
    codec: Option<CompressionCodec>,
    limit: Option<u64>,
    /// Bytes the blocks inflated to so far.
    inflated: u64,
    /// The current block's bytes (with a limit only).
    block: Vec<u8>,
    tail: Arc<Mutex<Tail>>,
}

impl BlockScan {
    /// Follows `bytes` (the input from `consumed` on); an error for a block too short or one
    /// that takes the input past the limit.
    fn scan(&mut self, bytes: &[u8], consumed: u64) -> io::Result<bool> {
        let snappy = matches!(self.codec, Some(CompressionCodec::Snappy));
        let collect = self.limit.is_some();
        let framing = std::mem::replace(&mut self.framing, Framing::START);
        let mut ended = Vec::new();
        let next = framing
            .scan(bytes, snappy, |data, end| {
                if collect {
                    self.block.extend_from_slice(data);
                    if end {
                        ended.push(std::mem::take(&mut self.block));
                    }
                }
            })
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        for block in ended {
            self.inflate(&block, consumed)?;
        }
        match next {
            Some(framing) => {
                self.framing = framing;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Inflates one block into nothing, counting it.
    fn inflate(&mut self, block: &[u8], consumed: u64) -> io::Result<()> {
        let (Some(limit), Some(codec)) = (self.limit, self.codec) else {
            return Ok(());
        };
        let left = limit.saturating_sub(consumed.saturating_add(self.inflated));
        let cap = left.saturating_add(1);
        let sink = &mut io::sink();
        // A block that does not inflate is left to the reader, which says why.
        let inflated = match codec {
            CompressionCodec::Deflate => io::copy(
                &mut flate2::read::DeflateDecoder::new(block).take(cap),
                sink,
            )
            .ok(),
            CompressionCodec::Snappy => block
                .len()
                .checked_sub(4)
                .and_then(|n| snap::raw::decompress_len(&block[..n]).ok())
                .map(|n| n as u64),
            CompressionCodec::ZStandard => zstd::stream::read::Decoder::new(block)
                .and_then(|d| io::copy(&mut d.take(cap), sink))
                .ok(),
            CompressionCodec::Bzip2 => {
                io::copy(&mut bzip2::read::BzDecoder::new(block).take(cap), sink).ok()
            }
            CompressionCodec::Xz => {
                io::copy(&mut liblzma::read::XzDecoder::new(block).take(cap), sink).ok()
            }
        };
        self.inflated = self.inflated.saturating_add(inflated.unwrap_or(0));
        if consumed.saturating_add(self.inflated) > limit {
            if let Ok(mut tail) = self.tail.lock() {
                tail.too_large = Some(limit);
            }
            return Err(io::Error::other(ConvertError::TooLarge { limit }));
        }
        Ok(())
    }
}

/// Where the scan is in a file's blocks.
#[derive(Debug)]
pub(in crate::convert) enum Framing {
    /// A varint of the block's header: the record count (`count: true`), then the size.
    Varint { count: bool, shift: u32, value: u64 },
    /// Bytes of the block's data, then of its sync marker, still to pass.
    Skip { data: u64, sync: u8 },
}

impl Framing {
    const START: Self = Self::Varint {
        count: true,
        shift: 0,
        value: 0,
    };

    /// Follows `bytes`, giving each piece of a block's data to `data` (with `true` on its
    /// last piece); an error for a snappy block too short. `None` when the framing is
    /// broken in a way the reader itself reports (the scan stops there).
    fn scan(
        mut self,
        bytes: &[u8],
        snappy: bool,
        mut data: impl FnMut(&[u8], bool),
    ) -> Result<Option<Self>, String> {
        let mut at = 0;
        while at < bytes.len() {
            self = match self {
                Self::Varint {
                    count,
                    shift,
                    value,
                } => {
                    let byte = bytes[at];
                    at += 1;
                    if shift > 63 {
                        return Ok(None);
                    }
                    let value = value | (u64::from(byte & 0x7f) << shift);
                    if byte & 0x80 != 0 {
                        Self::Varint {
                            count,
                            shift: shift + 7,
                            value,
                        }
                    } else if count {
                        Self::Varint {
                            count: false,
                            shift: 0,
                            value: 0,
                        }
                    } else {
                        // Zigzag: a negative size is the reader's error.
                        if value & 1 != 0 {
                            return Ok(None);
                        }
                        let size = value >> 1;
                        if snappy && size < 4 {
                            return Err(format!(
                                "a snappy block of {size} bytes cannot hold its 4-byte checksum"
                            ));
                        }
                        if size == 0 {
                            data(&[], true);
                        }
                        Self::Skip {
                            data: size,
                            sync: 16,
                        }
                    }
                }
                Self::Skip { data: left, sync } => {
                    let available = (bytes.len() - at) as u64;
                    if left > 0 {
                        let n = left.min(available);
                        data(&bytes[at..at + n as usize], n == left);
                        at += n as usize;
                        Self::Skip {
                            data: left - n,
                            sync,
                        }
                    } else {
                        let n = u64::from(sync).min(available);
                        at += n as usize;
                        match sync - n as u8 {
                            0 => Self::START,
                            sync => Self::Skip { data: 0, sync },
                        }
                    }
                }
            };
        }
        Ok(Some(self))
    }
}

impl<R: BufRead> Read for Recorder<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = {
            let available = self.fill_buf()?;
            let n = available.len().min(buf.len());
            buf[..n].copy_from_slice(&available[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Recorder<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        let buf = self.inner.fill_buf()?;
        if let Some(blocks) = self.blocks.as_mut() {
            let from = usize::try_from(self.scanned.saturating_sub(self.consumed))
                .unwrap_or(usize::MAX)
                .min(buf.len());
            self.scanned = self.scanned.max(self.consumed + buf.len() as u64);
            if !blocks.scan(&buf[from..], self.consumed + buf.len() as u64)? {
                self.blocks = None;
            }
        }
        Ok(buf)
    }

    fn consume(&mut self, n: usize) {
        self.consumed += n as u64;
        if n > 0 {
            // What `fill_buf` returned last: buffered, so no read happens here.
            if let Ok(buf) = self.inner.fill_buf() {
                let consumed = &buf[..n.min(buf.len())];
                if let Some(kept) = &mut self.kept {
                    kept.extend_from_slice(consumed);
                }
                if let Ok(mut tail) = self.tail.lock() {
                    tail.push(consumed);
                }
            }
        }
        self.inner.consume(n);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{
        ArrayRef, Decimal128Array, Float32Array, Int32Array, Int64Array, RecordBatch, StringArray,
        TimestampMillisecondArray,
    };
    use arrow_avro::compression::CompressionCodec;
    use arrow_avro::writer::WriterBuilder;
    use arrow_avro::writer::format::AvroOcfFormat;

    use super::super::testutil::*;
    use super::super::typed::checks;
    use super::super::{ConvertError, ConvertSpec, InputFormat, SumValue};

    /// An Avro file of `columns` (name, values), `block_rows` rows per block.
    fn file_with(
        columns: Vec<(&str, ArrayRef)>,
        block_rows: usize,
        codec: Option<CompressionCodec>,
    ) -> Vec<u8> {
        let batch = RecordBatch::try_from_iter(columns).unwrap();
        let mut writer = WriterBuilder::new(batch.schema().as_ref().clone())
            .with_compression(codec)
            .build::<_, AvroOcfFormat>(Vec::new())
            .unwrap();
        let mut at = 0;
        while at < batch.num_rows() {
            let n = block_rows.min(batch.num_rows() - at);
            writer.write(&batch.slice(at, n)).unwrap();
            at += n;
        }
        writer.finish().unwrap();
        writer.into_inner()
    }

    fn file(columns: Vec<(&str, ArrayRef)>) -> Vec<u8> {
        file_with(columns, 1000, None)
    }

    fn spec(columns: &str) -> ConvertSpec {
        ConvertSpec::new(InputFormat::Avro, schema(columns))
    }

    #[test]
    fn files_of_every_codec_written_by_fastavro_read_exactly() {
        for codec in ["null", "deflate", "snappy", "zstandard", "bzip2", "xz"] {
            let bytes = checks::fixture(&format!("orders-{codec}.avro"));
            checks::orders(InputFormat::Avro, &bytes, codec);
        }
    }

    /// Blocks count against `max_decoded_bytes` as they inflate, with the input: a small
    /// file of zeros in one block of each codec fails as too large under a limit ten times
    /// its size, and reads under one that holds what it inflates to.
    #[test]
    fn inflated_blocks_are_bounded_by_max_decoded_bytes() {
        let spec_with = |limit: u64| {
            let mut spec = spec(r#"[{"name":"a","type":"int64"}]"#);
            spec.max_decoded_bytes = Some(limit);
            spec
        };
        for codec in [
            CompressionCodec::Deflate,
            CompressionCodec::Snappy,
            CompressionCodec::ZStandard,
            CompressionCodec::Bzip2,
            CompressionCodec::Xz,
        ] {
            let zeros = Arc::new(Int64Array::from(vec![0_i64; 300_000])) as ArrayRef;
            let bytes = file_with(vec![("a", zeros)], 300_000, Some(codec));
            assert!(bytes.len() < 30_000, "{codec:?}: {}", bytes.len());
            let err = fail(&bytes, &spec_with(10 * bytes.len() as u64));
            assert!(
                matches!(err, ConvertError::TooLarge { .. }),
                "{codec:?}: {err}"
            );
            assert_eq!(
                run(&bytes, &spec_with(4 << 20)).0.rows,
                300_000,
                "{codec:?}"
            );
        }
    }

    #[test]
    fn codecs_of_the_rust_writer_read_too() {
        let mut spec = spec(r#"[{"name":"a","type":"int64"}]"#);
        spec.sum_columns = vec!["a".into()];
        for codec in [
            None,
            Some(CompressionCodec::Deflate),
            Some(CompressionCodec::Snappy),
            Some(CompressionCodec::ZStandard),
            Some(CompressionCodec::Bzip2),
            Some(CompressionCodec::Xz),
        ] {
            let bytes = file_with(
                vec![(
                    "a",
                    Arc::new(Int64Array::from_iter_values(0..5000)) as ArrayRef,
                )],
                700,
                codec,
            );
            let (stats, _) = run(&bytes, &spec);
            assert_eq!(stats.sums["a"], SumValue::Int(4999 * 5000 / 2), "{codec:?}");
        }
    }

    #[test]
    fn columns_are_matched_by_name_widened_and_extra_ones_skipped() {
        let bytes = file(vec![
            (
                "extra",
                Arc::new(StringArray::from(vec!["x", "y"])) as ArrayRef,
            ),
            ("w", Arc::new(Float32Array::from(vec![1.5, -2.25]))),
            (
                "at",
                Arc::new(
                    TimestampMillisecondArray::from(vec![1_704_164_645_005, 0])
                        .with_timezone("+00:00"),
                ),
            ),
            (
                "price",
                Arc::new(
                    Decimal128Array::from(vec![12345, -5])
                        .with_precision_and_scale(7, 2)
                        .unwrap(),
                ),
            ),
            ("n", Arc::new(Int32Array::from(vec![Some(7), None]))),
        ]);
        let spec = spec(
            r#"[{"name":"n","type":"int64"},{"name":"price","type":"decimal(12,3)"},
                {"name":"w","type":"float64"},{"name":"at","type":"timestamp"},
                {"name":"absent","type":"string"}]"#,
        );
        let (stats, file) = run(&bytes, &spec);
        assert_eq!(stats.rows, 2);
        assert_eq!(
            file.rows,
            text_rows(&[
                "7|123.450|1.5|2024-01-02T03:04:05.005Z|∅",
                "∅|-0.050|-2.25|1970-01-01T00:00:00Z|∅"
            ])
        );
    }

    #[test]
    fn a_file_that_breaks_the_contract_fails_naming_the_column() {
        checks::a_file_that_breaks_the_contract(InputFormat::Avro, file);
    }

    #[test]
    fn many_blocks_stream_in_bounded_batches() {
        let columns = checks::wide_and_numbered(20_000);
        let bytes = file_with(columns, 777, Some(CompressionCodec::Deflate));
        checks::streams_in_bounded_batches(InputFormat::Avro, &bytes, 20_000);
    }

    #[test]
    fn no_column_of_the_schema_gives_null_rows_of_the_files_length() {
        let other = Arc::new(Int32Array::from_iter_values(0..7)) as ArrayRef;
        let bytes = file_with(vec![("other", other)], 3, None);
        checks::no_schema_column_gives_null_rows(InputFormat::Avro, &bytes);
    }

    #[test]
    fn a_gzip_or_zstd_wrapped_file_is_read_through_its_wrapper() {
        let bytes = file(vec![
            ("b", Arc::new(StringArray::from(vec!["x", "y"])) as ArrayRef),
            ("a", Arc::new(Int32Array::from(vec![4, 5]))),
        ]);
        checks::read_through_wrappers(InputFormat::Avro, &bytes);
    }

    #[test]
    fn corrupt_or_truncated_files_are_errors_never_panics() {
        let spec =
            spec(r#"[{"name":"a","type":"int64","nullable":false},{"name":"s","type":"string"}]"#);
        for codec in [
            None,
            Some(CompressionCodec::Deflate),
            Some(CompressionCodec::Snappy),
            Some(CompressionCodec::ZStandard),
        ] {
            let bytes = file_with(checks::numbered_and_repeated(), 700, codec);
            for input in [&b""[..], b"Obj\x01", ALL_TYPES_CSV.as_bytes()] {
                let err = fail(input, &spec);
                assert!(
                    err.to_string().starts_with("not a valid Avro file: "),
                    "{err}"
                );
            }
            for input in [&bytes[..bytes.len() - 1], &bytes[..bytes.len() / 2]] {
                let err = fail(input, &spec);
                assert!(
                    matches!(err, ConvertError::Parse { .. }),
                    "{codec:?}: {err:?}"
                );
            }
            let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
            let mut failures = 0;
            for _ in 0..300 {
                let state = next();
                let mut corrupt = bytes.clone();
                let at = (state % corrupt.len() as u64) as usize;
                corrupt[at] ^= 1 << (state >> 60 & 7);
                match super::super::convert(&corrupt[..], &spec, Vec::new()) {
                    Ok(stats) => assert!(stats.rows <= 3000, "{codec:?}"),
                    Err(e) => {
                        assert!(matches!(e, ConvertError::Parse { .. }), "{codec:?}: {e:?}");
                        failures += 1;
                    }
                }
            }
            assert!(failures > 0, "{codec:?}");
        }
    }

    #[test]
    fn a_snappy_block_shorter_than_its_checksum_is_an_error() {
        let bytes = file_with(
            vec![("a", Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef)],
            10,
            Some(CompressionCodec::Snappy),
        );
        let sync = &bytes[bytes.len() - 16..];
        let header_len = bytes.windows(16).position(|w| w == sync).unwrap() + 16;
        let mut corrupt = bytes[..header_len].to_vec();
        corrupt.extend_from_slice(&[2, 4, 0, 0]); // 1 record in 2 bytes
        corrupt.extend_from_slice(sync);
        let err = parse_error(&corrupt, &spec(r#"[{"name":"a","type":"int64"}]"#));
        assert!(
            err.ends_with("a snappy block of 2 bytes cannot hold its 4-byte checksum"),
            "{err}"
        );
    }

    #[test]
    fn a_file_not_of_records_is_refused() {
        let mut bytes = b"Obj\x01".to_vec();
        // The header's metadata: one entry, avro.schema = "long", then the sync marker.
        let key = b"avro.schema";
        let value = br#""long""#;
        bytes.push(2); // one entry (zigzag 1)
        bytes.push((key.len() * 2) as u8);
        bytes.extend_from_slice(key);
        bytes.push((value.len() * 2) as u8);
        bytes.extend_from_slice(value);
        bytes.push(0);
        bytes.extend_from_slice(&[7; 16]);
        assert_eq!(
            parse_error(&bytes, &spec(r#"[{"name":"a","type":"int64"}]"#)),
            "not a valid Avro file: its schema is not a record's (one column per field)"
        );
    }

    #[test]
    fn nested_columns_paths_and_policies() {
        let batch = checks::nested_batch();
        let mut writer = WriterBuilder::new(batch.schema().as_ref().clone())
            .build::<_, AvroOcfFormat>(Vec::new())
            .unwrap();
        writer.write(&batch).unwrap();
        writer.finish().unwrap();
        let bytes = writer.into_inner();
        checks::nested(InputFormat::Avro, &bytes);
    }
}
