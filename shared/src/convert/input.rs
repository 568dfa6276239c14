//! The byte pipeline in front of the parsers: count compressed bytes, decompress,
//! count and cap decompressed bytes, drop a UTF-8 byte order mark, buffer.
//!
//! Everything streams: nothing here holds more than a buffer's worth of the object.
//! Errors are classified on the way so that the caller can tell a failing source
//! ([`ConvertError::Io`]) from a corrupt or truncated compressed stream
//! ([`ConvertError::Decompress`]) and from a decompression bomb
//! ([`ConvertError::TooLarge`]).

use std::cell::Cell;
use std::io::{self, BufRead, BufReader, Read};

use flate2::read::MultiGzDecoder;

use super::{Compression, ConvertError, ConvertSpec};

/// Read buffer between the decompressor and the parsers.
const BUFFER_BYTES: usize = 64 << 10;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Byte counts on both sides of the decompressor.
#[derive(Debug, Default)]
pub(super) struct Meter {
    /// Bytes read from the caller's input.
    pub(super) read: Cell<u64>,
    /// Bytes coming out of the decompressor.
    pub(super) decoded: Cell<u64>,
    /// Whether the caller's input itself failed (so the error is not a decompression one).
    input_failed: Cell<bool>,
}

/// The caller's input, counted.
struct Source<'m, R> {
    inner: R,
    meter: &'m Meter,
}

impl<R: Read> Read for Source<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let result = self.inner.read(buf);
        match &result {
            Ok(n) => self.meter.read.set(self.meter.read.get() + *n as u64),
            Err(e) if e.kind() != io::ErrorKind::Interrupted => self.meter.input_failed.set(true),
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
                let total = self.meter.decoded.get() + n as u64;
                self.meter.decoded.set(total);
                match self.limit {
                    Some(limit) if total > limit => {
                        Err(io::Error::other(ConvertError::TooLarge { limit }))
                    }
                    _ => Ok(n),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted || self.meter.input_failed.get() => {
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
pub(super) fn open<'a, R: Read + 'a>(
    input: R,
    spec: &ConvertSpec,
    meter: &'a Meter,
) -> Result<impl BufRead + 'a, ConvertError> {
    let source = Source {
        inner: input,
        meter,
    };
    let inner: Box<dyn Read + 'a> = match spec.compression {
        Compression::None => Box::new(source),
        Compression::Gzip => Box::new(MultiGzDecoder::new(source)),
        Compression::Zstd => {
            Box::new(
                zstd::Decoder::new(source).map_err(|e| ConvertError::Decompress {
                    message: format!("zstd: {e}"),
                })?,
            )
        }
    };
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
    Ok(BufReader::with_capacity(
        BUFFER_BYTES,
        io::Cursor::new(head).chain(decoded),
    ))
}
