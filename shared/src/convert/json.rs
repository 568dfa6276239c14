//! JSON Lines → record batches with arrow-json's push decoder, with line numbers.
//!
//! arrow-json reports no positions, so lines are fed to its decoder one at a time
//! (keeping the lines of the batch in progress, one batch at most): a line that is
//! not exactly one complete JSON value fails on the spot with its number, and when
//! turning a batch into columns fails (a value of the wrong type, a line that is not
//! an object), its lines are decoded again one by one to find the first bad one.

use std::io::BufRead;
use std::ops::Range;

use arrow_array::RecordBatch;
use arrow_json::ReaderBuilder;
use arrow_json::reader::Decoder;
use arrow_schema::{ArrowError, SchemaRef};

use super::{Batches, ConvertError, ConvertSpec, arrow_message, null_violation, nullable};

/// Record batches decoded from JSON Lines text.
pub(super) struct JsonBatches<R> {
    reader: R,
    batch_rows: usize,
    /// The spec's schema.
    schema: SchemaRef,
    /// `schema` with all fields nullable: what batches are decoded against.
    decode_schema: SchemaRef,
    decoder: Decoder,
    /// The lines of the batch in progress, each ending with a newline.
    buf: Vec<u8>,
    /// Number and extent in `buf` of each line holding a row.
    rows: Vec<(u64, Range<usize>)>,
    /// Lines read so far.
    line: u64,
    end: bool,
}

impl<R: BufRead> JsonBatches<R> {
    /// Prepares to decode `reader`.
    pub(super) fn new(reader: R, spec: &ConvertSpec) -> Result<Self, ConvertError> {
        let decode_schema = nullable(&spec.schema);
        let decoder = decoder(&decode_schema, spec.batch_rows)
            .map_err(|e| ConvertError::invalid_spec(arrow_message(e)))?;
        Ok(Self {
            reader,
            batch_rows: spec.batch_rows,
            schema: spec.schema.clone(),
            decode_schema,
            decoder,
            buf: Vec::new(),
            rows: Vec::new(),
            line: 0,
            end: false,
        })
    }

    /// Feeds lines to the decoder until it holds a batch or the input ends.
    fn fill(&mut self) -> Result<(), ConvertError> {
        self.buf.clear();
        self.rows.clear();
        while !self.end && self.rows.len() < self.batch_rows {
            let start = self.buf.len();
            if self.reader.read_until(b'\n', &mut self.buf)? == 0 {
                self.end = true;
                break;
            }
            self.line += 1;
            if self.buf[start..].trim_ascii().is_empty() {
                self.buf.truncate(start);
                continue;
            }
            if self.buf.last() != Some(&b'\n') {
                self.buf.push(b'\n');
            }
            let text = &self.buf[start..];
            let before = self.decoder.len();
            let taken = self
                .decoder
                .decode(text)
                .map_err(|e| self.error(Some(self.line), e))?;
            if taken != text.len()
                || self.decoder.has_partial_record()
                || self.decoder.len() != before + 1
            {
                let message = "expected exactly one JSON value on the line";
                return Err(ConvertError::parse(Some(self.line), None, message));
            }
            self.rows.push((self.line, start..self.buf.len()));
        }
        Ok(())
    }

    /// Locates the first line of the batch that fails on its own, to report `e` there.
    fn locate(&self, e: ArrowError) -> ConvertError {
        for (line, range) in &self.rows {
            let Ok(mut decoder) = decoder(&self.decode_schema, 1) else {
                break;
            };
            if let Err(e) = decoder
                .decode(&self.buf[range.clone()])
                .and_then(|_| decoder.flush())
            {
                return self.error(Some(*line), e);
            }
        }
        self.error(None, e)
    }

    /// `e` at `line`, with the column it names if any.
    fn error(&self, line: Option<u64>, e: ArrowError) -> ConvertError {
        let message = arrow_message(e);
        // arrow-json prefixes failures inside a column with "whilst decoding field 'NAME': "
        let column = self.schema.fields().iter().find_map(|f| {
            let rest = message.strip_prefix(&format!("whilst decoding field '{}': ", f.name()))?;
            Some((f.name(), rest))
        });
        match column {
            Some((name, rest)) => ConvertError::parse(line, Some(name), rest),
            None => ConvertError::parse(line, None, message),
        }
    }
}

impl<R: BufRead> Batches for JsonBatches<R> {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>, ConvertError> {
        self.fill()?;
        let batch = match self.decoder.flush() {
            Ok(Some(batch)) => batch,
            Ok(None) => return Ok(None),
            Err(e) => return Err(self.locate(e)),
        };
        if let Some((row, column)) = null_violation(&batch, &self.schema) {
            let line = self.rows.get(row).map(|(line, _)| *line);
            let name = self.schema.field(column).name();
            let message = "missing value in a non-nullable column";
            return Err(ConvertError::parse(line, Some(name), message));
        }
        Ok(Some(batch))
    }
}

/// An arrow-json decoder of objects with `schema`'s fields, `batch_rows` at a time.
fn decoder(schema: &SchemaRef, batch_rows: usize) -> Result<Decoder, ArrowError> {
    ReaderBuilder::new(schema.clone())
        .with_batch_size(batch_rows)
        .build_decoder()
}
