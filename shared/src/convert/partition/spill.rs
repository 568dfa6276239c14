//! Rows waiting for their partition's turn, spilled to one anonymous temporary file
//! (`TMPDIR`, else `/tmp`) as Arrow IPC record batch messages, one segment per partition per
//! spill, read back in order when the partition is encoded.
//!
//! Arrow IPC is the columns' own layout: writing a segment copies its buffers, reading one
//! back copies them again and checks them (offsets, UTF-8), with no parsing and no encoding,
//! so a row costs about two copies of its bytes on its way through the file. The messages are
//! LZ4-compressed (a frame per buffer) when the spill is made `compressed`, which takes the
//! file to about a third for a few percent of the conversion's CPU.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};

use arrow_array::RecordBatch;
use arrow_buffer::Buffer;
use arrow_ipc::CompressionType;
use arrow_ipc::reader::StreamDecoder;
use arrow_ipc::writer::{IpcWriteOptions, StreamEncoder};
use arrow_schema::{ArrowError, Schema};

use crate::convert::ConvertError;

/// Where a segment is: offset and length in the file.
#[derive(Debug, Clone, Copy)]
pub(super) struct Segment {
    at: u64,
    len: u64,
}

/// The spill file of one conversion.
pub(super) struct Spill {
    file: BufWriter<File>,
    /// Bytes written.
    end: u64,
    encoder: StreamEncoder,
    /// The stream's first message (the schema), given to every reader before its segments.
    head: Buffer,
}

fn failed(e: impl std::fmt::Display) -> ConvertError {
    ConvertError::Encode {
        message: format!("cannot spill rows to a temporary file: {e}"),
    }
}

impl Spill {
    /// A spill file for batches of `schema`.
    pub(super) fn new(schema: &Schema, compressed: bool) -> Result<Self, ConvertError> {
        let mut options = IpcWriteOptions::default();
        if compressed {
            options = options
                .try_with_compression(Some(CompressionType::LZ4_FRAME))
                .map_err(failed)?;
        }
        let mut encoder = StreamEncoder::try_new_with_options(schema, options).map_err(failed)?;
        // The first encoding starts with the schema's message: encoding a batch of no rows
        // gives it, and every reader reads it (and that empty batch) before its segments.
        let empty = RecordBatch::new_empty(std::sync::Arc::new(schema.clone()));
        let mut head = Vec::new();
        for buffer in encoder.encode(&empty).map_err(failed)? {
            head.extend_from_slice(buffer.as_slice());
        }
        let file = tempfile::tempfile().map_err(failed)?;
        Ok(Self {
            file: BufWriter::with_capacity(256 << 10, file),
            end: 0,
            encoder,
            head: Buffer::from_vec(head),
        })
    }

    /// Bytes in the file.
    pub(super) fn bytes(&self) -> u64 {
        self.end
    }

    /// Appends `batch` as one segment.
    pub(super) fn write(&mut self, batch: &RecordBatch) -> Result<Segment, ConvertError> {
        let at = self.end;
        for buffer in self.encoder.encode(batch).map_err(failed)? {
            self.file.write_all(buffer.as_slice()).map_err(failed)?;
            self.end += buffer.len() as u64;
        }
        Ok(Segment {
            at,
            len: self.end - at,
        })
    }

    /// A reader of segments.
    pub(super) fn reader(&self) -> Result<Reader, ConvertError> {
        let mut decoder = StreamDecoder::new();
        let mut head = self.head.clone();
        while !head.is_empty() {
            decoder.decode(&mut head).map_err(failed)?; // the schema, and no rows
        }
        Ok(Reader { decoder })
    }

    /// The rows of `segment`, read back by `reader`.
    pub(super) fn read(
        &mut self,
        reader: &mut Reader,
        segment: Segment,
    ) -> Result<Vec<RecordBatch>, ConvertError> {
        self.file.flush().map_err(failed)?;
        let file = self.file.get_mut();
        file.seek(SeekFrom::Start(segment.at)).map_err(failed)?;
        let mut bytes = vec![0; segment.len as usize];
        file.read_exact(&mut bytes).map_err(failed)?;
        file.seek(SeekFrom::End(0)).map_err(failed)?;
        let mut buffer = Buffer::from_vec(bytes);
        let mut batches = Vec::new();
        while !buffer.is_empty() {
            if let Some(batch) = reader
                .decoder
                .decode(&mut buffer)
                .map_err(|e: ArrowError| {
                    failed(format!("a spilled segment does not read back: {e}"))
                })?
            {
                batches.push(batch);
            }
        }
        Ok(batches)
    }
}

/// Reads segments back (a stream decoder that has read the schema).
pub(super) struct Reader {
    decoder: StreamDecoder,
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field};

    use super::*;

    #[test]
    fn segments_read_back_as_written_in_any_order() {
        for compressed in [false, true] {
            let schema = Arc::new(Schema::new(vec![
                Field::new("n", DataType::Int64, false),
                Field::new("s", DataType::Utf8, true),
            ]));
            let batch = |from: i64, len: i64| {
                RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(Int64Array::from_iter_values(from..from + len)),
                        Arc::new(StringArray::from_iter(
                            (from..from + len).map(|i| (i % 3 != 0).then(|| format!("v{i}"))),
                        )),
                    ],
                )
                .unwrap()
            };
            let mut spill = Spill::new(&schema, compressed).unwrap();
            let whole = batch(0, 1000);
            // A slice is written as its own rows only.
            let a = spill.write(&whole.slice(100, 50)).unwrap();
            let b = spill.write(&batch(5000, 3)).unwrap();
            let c = spill.write(&whole.slice(0, 1000)).unwrap();
            let mut reader = spill.reader().unwrap();
            assert_eq!(
                spill.read(&mut reader, c).unwrap(),
                std::slice::from_ref(&whole)
            );
            assert_eq!(spill.read(&mut reader, a).unwrap(), [whole.slice(100, 50)]);
            // Written after reading: appended at the end, not over what was read.
            let d = spill.write(&batch(7, 2)).unwrap();
            assert_eq!(spill.read(&mut reader, b).unwrap(), [batch(5000, 3)]);
            let mut other = spill.reader().unwrap();
            assert_eq!(spill.read(&mut other, d).unwrap(), [batch(7, 2)]);
            assert!(spill.bytes() > 0);
        }
    }
}
