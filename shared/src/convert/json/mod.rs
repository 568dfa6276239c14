//! JSON Lines → record batches with arrow-json's push decoder, with line numbers.
//!
//! arrow-json reports no positions, so lines are fed to its decoder one at a time
//! (keeping the lines of the batch in progress, one batch at most): a line that is
//! not exactly one complete JSON value fails on the spot with its number, and when
//! turning a batch into columns fails (a value of the wrong type, a line that is not
//! an object), its lines are decoded again one by one to find the first bad one.
//!
//! A line is read only up to [`ConvertSpec::max_record_bytes`], and a batch closes once
//! its lines reach [`ConvertSpec::batch_bytes`], so memory stays bounded whatever the input.
//! Every column is decoded by the decoders of [`tree`], made by [`Strict`]: nested types to
//! any depth, columns read from paths, unknown fields counted, refused or rescued, and values
//! whose arrow-json reading would change them (integers, decimals, dates, timestamps, floats;
//! see [`super::value`]) read exactly or refused; an object holding a field's key twice is
//! refused (or the second value rescued) rather than read as its last value. A failure names
//! its line and the path of the value (`line 3: column "resources[1].ARN": …`), found by the
//! row decoder from the failing value's place on the tape.
//!
//! Most batches never reach arrow-json: their lines are read in one pass by the
//! [`fast::FastDecoder`], which declines any line it is not certain to read as arrow-json
//! would. The batch of a declined line is then fed to arrow-json from its first line, so
//! that its rows, errors and rejected rows are exactly those of arrow-json's path. Sources
//! with nested or `json` columns, paths, time formats, case-insensitive keys or a rescued
//! column are read by arrow-json's path only.

#[cfg(test)]
mod differential;
pub(super) mod documents;
#[cfg(test)]
mod documents_tests;
mod fast;
#[cfg(test)]
mod nested_differential;
#[cfg(test)]
mod nested_tests;
mod tree;

use std::io::BufRead;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::builder::PrimitiveBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowPrimitiveType, Date32Type, Decimal128Type, Float32Type, Float64Type, Int32Type, Int64Type,
    TimestampMicrosecondType,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_cast::parse::Parser;
use arrow_json::ReaderBuilder;
use arrow_json::reader::{
    ArrayDecoder, Decoder, DecoderContext, DecoderFactory, Tape, TapeElement,
};
use arrow_schema::{ArrowError, DataType, FieldRef, Schema, SchemaRef};

use self::documents::{Documents, Next, Place};
use self::fast::FastDecoder;
use self::tree::{Shared, StructDecoder, TimeReading, show};
use super::reject::RejectLog;
use super::value;
use super::{
    Batches, ConvertError, ConvertSpec, Ignored, KeyMatch, arrow_message, null_violation, nullable,
};
use crate::schema::{ColumnSpec, ColumnType};

/// Where the records come from.
enum Input<R> {
    /// JSON Lines: a record per line.
    Lines(R),
    /// JSON documents, cut into records.
    Documents(Box<Documents<R>>),
    /// A line log: each matched line as the JSON object of its fields.
    Regex(Box<super::lines::RegexLines<R>>),
}

/// Record batches decoded from JSON Lines text, or from JSON documents cut into records.
pub(super) struct JsonBatches<R> {
    input: Input<R>,
    batch_rows: usize,
    batch_bytes: usize,
    max_record_bytes: usize,
    /// The spec's decoded schema (its columns and the rescued column, if any).
    schema: SchemaRef,
    /// `schema` with all fields nullable: what batches are decoded against.
    decode_schema: SchemaRef,
    /// Makes the decoders; shares what they find.
    strict: Arc<Strict>,
    decoder: Decoder,
    /// The fast path, `None` when the schema has a column it does not read.
    fast_decoder: Option<FastDecoder>,
    /// The batch in progress is read by `fast_decoder` (no line of it declined so far); otherwise
    /// its lines are in `decoder`.
    fast: bool,
    /// The lines of the batch in progress, each ending with a newline.
    buf: Vec<u8>,
    /// Place and extent in `buf` of each record holding a row.
    rows: Vec<(Place, Range<usize>)>,
    /// Lines read so far (JSON Lines).
    line: u64,
    /// The record being read.
    place: Place,
    end: bool,
    /// Rows set aside (policy [`super::BadRows::Reject`]).
    rejects: RejectLog,
    /// Values of unknown fields dropped in the batches returned so far.
    ignored: Ignored,
    /// Of the batch being read.
    batch_ignored: Ignored,
}

impl<R: BufRead> JsonBatches<R> {
    /// Prepares to decode the JSON documents of `reader` ([`super::InputFormat::Json`]).
    pub(super) fn documents(reader: R, spec: &ConvertSpec) -> Result<Self, ConvertError> {
        let documents = Documents::new(reader, &spec.json, spec.max_record_bytes);
        Self::with_input(Input::Documents(Box::new(documents)), spec)
    }

    /// Prepares to decode the lines of a line log ([`super::InputFormat::Regex`]).
    pub(super) fn regex(reader: R, spec: &ConvertSpec) -> Result<Self, ConvertError> {
        let Some(pattern) = &spec.lines else {
            return Err(ConvertError::invalid_spec(
                "the regex format needs a pattern",
            ));
        };
        let lines = super::lines::RegexLines::new(reader, pattern, spec.max_record_bytes);
        Self::with_input(Input::Regex(Box::new(lines)), spec)
    }

    /// Prepares to decode the JSON Lines of `reader`.
    pub(super) fn new(reader: R, spec: &ConvertSpec) -> Result<Self, ConvertError> {
        Self::with_input(Input::Lines(reader), spec)
    }

    /// Prepares to decode the records of `input`.
    fn with_input(input: Input<R>, spec: &ConvertSpec) -> Result<Self, ConvertError> {
        let schema = spec.decoded_schema();
        let decode_schema = nullable(&schema);
        let strict = Arc::new(Strict {
            shared: Arc::new(Shared::new(
                spec.unknown_fields,
                spec.bad_values,
                spec.json_keys,
                spec.rescues().then(|| spec.rescue_column.clone()),
            )),
            columns: spec.columns.clone(),
        });
        let decoder = strict
            .decoder(&decode_schema, spec.batch_rows)
            .map_err(|e| ConvertError::invalid_spec(arrow_message(e)))?;
        // The fast path reads keys exactly and times in the default readings, and rescues
        // nothing.
        let plain = !spec.rescues()
            && spec.json_keys == KeyMatch::Exact
            && spec
                .columns
                .iter()
                .all(|c| TimeReading::from_options(c.format.clone(), c.timezone).is_default());
        let fast = plain
            .then(|| FastDecoder::new(&decode_schema, spec.unknown_fields, &spec.columns))
            .flatten()
            .filter(|_| !arrow_only());
        Ok(Self {
            input,
            batch_rows: spec.batch_rows,
            batch_bytes: spec.batch_bytes,
            max_record_bytes: spec.max_record_bytes,
            schema,
            decode_schema,
            strict,
            decoder,
            fast_decoder: fast,
            fast: false,
            buf: Vec::new(),
            rows: Vec::new(),
            line: 0,
            place: Place::line(0),
            end: false,
            rejects: RejectLog::new(spec.bad_rows),
            ignored: Ignored::default(),
            batch_ignored: Ignored::default(),
        })
    }

    /// Feeds lines to the decoder until it holds a batch or the input ends. Under policy
    /// reject, a line that fails on its own is set aside and the next one read.
    fn fill(&mut self) -> Result<(), ConvertError> {
        self.buf.clear();
        self.rows.clear();
        self.fast = self.fast_decoder.is_some();
        if let Some(flat) = &mut self.fast_decoder {
            flat.clear();
        }
        // Room for the longest line allowed and its terminator (CRLF at most).
        let limit = self.max_record_bytes.saturating_add(2);
        while !self.end && self.rows.len() < self.batch_rows && self.buf.len() < self.batch_bytes {
            let start = self.buf.len();
            if !self.next_record(limit)? {
                continue;
            }
            let Ok(text) = simdutf8::basic::from_utf8(&self.buf[start..]) else {
                let error = self.place.error(None, "invalid UTF-8");
                self.set_aside(start, error)?;
                continue;
            };
            // The fast path reads surrogate pairs as written; arrow-json needs them spelled
            // out (see `spell_out_surrogate_pairs`). The fast path reports a line that has
            // one, so that only lines arrow-json reads, or may read again, are searched.
            if self.fast
                && let Some(flat) = &mut self.fast_decoder
                && let Ok(misread_pair) = flat.push(text)
            {
                if misread_pair {
                    self.spell_out(start);
                }
                self.rows.push((self.place, start..self.buf.len()));
                continue;
            }
            self.spell_out(start);
            if self.fast {
                // A line that fails on its own closes the batch before it, as below,
                // whose other lines the fast path has all read: the batch stays on it.
                if let Some(error) =
                    self.strict
                        .line_error(&self.decode_schema, self.place, &self.buf[start..])
                {
                    if let Some(flat) = &mut self.fast_decoder {
                        flat.rollback();
                    }
                    self.set_aside(start, error)?;
                    if self.rows.is_empty() {
                        continue;
                    }
                    break;
                }
                self.decline()?;
            }
            let text = &self.buf[start..];
            let before = self.decoder.len();
            let taken = self
                .decoder
                .decode(text)
                .map_err(|e| self.place.error(None, arrow_message(e)));
            let error = match taken {
                Ok(taken)
                    if taken == text.len()
                        && !self.decoder.has_partial_record()
                        && self.decoder.len() == before + 1 =>
                {
                    None
                }
                // What the decoder says depends on how many rows it may still take: ask
                // one that takes one row, so that the error does not depend on batching.
                failed => Some(
                    self.strict
                        .line_error(&self.decode_schema, self.place, text)
                        .unwrap_or_else(|| failed.err().unwrap_or_else(|| one_value(self.place))),
                ),
            };
            if let Some(error) = error {
                self.set_aside(start, error)?;
                // The decoder may hold part of the line: start it again with the others,
                // and close the batch there, so that no line is fed again twice.
                self.refeed()?;
                if self.rows.is_empty() {
                    continue;
                }
                break;
            }
            self.rows.push((self.place, start..self.buf.len()));
        }
        Ok(())
    }

    /// Reads the next record to the end of `buf`, ending with a newline, its place in
    /// `place`: `true` if there is one to decode; `false` at the end of the input (`end`
    /// set), or when the line was blank or set aside.
    fn next_record(&mut self, limit: usize) -> Result<bool, ConvertError> {
        let start = self.buf.len();
        let cut = match &mut self.input {
            Input::Lines(_) => None,
            Input::Documents(documents) => Some(documents.next(&mut self.buf)?),
            Input::Regex(lines) => Some(lines.next(&mut self.buf)?),
        };
        match cut {
            None => {}
            Some(Next::End) => {
                self.end = true;
                return Ok(false);
            }
            Some(Next::Bad(error)) => {
                self.set_aside(start, error)?;
                return Ok(false);
            }
            Some(Next::Record(place)) => {
                self.place = place;
                return Ok(true);
            }
        }
        let Input::Lines(reader) = &mut self.input else {
            unreachable!("the cut inputs returned above")
        };
        let read = read_line(reader, &mut self.buf, limit)?;
        if read == 0 {
            self.end = true;
            return Ok(false);
        }
        self.line += 1;
        self.place = Place::line(self.line);
        let line = &self.buf[start..];
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        if line.strip_suffix(b"\r").unwrap_or(line).len() > self.max_record_bytes {
            let error = self.place.error(None, line_too_long(self.max_record_bytes));
            if !self.rejects.rejects() {
                return Err(error);
            }
            if self.buf.last() != Some(&b'\n') {
                skip_line(reader)?;
            }
            self.set_aside(start, error)?;
            return Ok(false);
        }
        if self.buf[start..].trim_ascii().is_empty() {
            self.buf.truncate(start);
            return Ok(false);
        }
        if self.buf.last() != Some(&b'\n') {
            self.buf.push(b'\n');
        }
        Ok(true)
    }

    /// The batch in progress leaves the fast path: its rows so far are fed to `decoder`,
    /// which reads the rest of it, as if the fast path had never read them.
    fn decline(&mut self) -> Result<(), ConvertError> {
        self.fast = false;
        if let Some(flat) = &mut self.fast_decoder {
            flat.clear();
        }
        self.refeed()
    }

    /// The batch the fast path read, if it read the batch in progress and it has rows:
    /// `None` leaves the batch to `decoder` (which then holds its lines).
    fn take_flat_batch(&mut self) -> Result<Option<RecordBatch>, ConvertError> {
        if !std::mem::take(&mut self.fast) {
            return Ok(None);
        }
        let batch = self.fast_decoder.as_mut().and_then(FastDecoder::finish);
        if batch.is_none() && !self.rows.is_empty() {
            self.decline()?;
        }
        Ok(batch)
    }

    /// The line at `start` of `buf` (its end) with its surrogate pairs spelled out.
    fn spell_out(&mut self, start: usize) {
        if let Some(spelled) = spell_out_surrogate_pairs(&self.buf[start..]) {
            self.buf.truncate(start);
            self.buf.extend_from_slice(&spelled);
        }
    }

    /// Sets the line at `start` of `buf` (its end) aside for `error`, or fails with it.
    fn set_aside(&mut self, start: usize, error: ConvertError) -> Result<(), ConvertError> {
        self.rejects.reject(error, &self.buf[start..])?;
        self.buf.truncate(start);
        Ok(())
    }

    /// A new decoder, fed the lines of `rows` again.
    fn refeed(&mut self) -> Result<(), ConvertError> {
        self.decoder = self
            .strict
            .decoder(&self.decode_schema, self.batch_rows.max(self.rows.len()))
            .map_err(|e| ConvertError::invalid_spec(arrow_message(e)))?;
        for (line, range) in &self.rows {
            let text = &self.buf[range.clone()];
            let taken = self
                .decoder
                .decode(text)
                .map_err(|e| line.error(None, arrow_message(e)))?;
            if taken != text.len() {
                let message = "internal error: a line that decoded alone does not decode again";
                return Err(line.error(None, message));
            }
        }
        Ok(())
    }

    /// Policy reject, once the batch failed to decode: its lines sorted into bad ones, set
    /// aside, and good ones, returned as one batch (`rows` left holding the good ones).
    /// Ranges of lines are decoded together and halved while they fail, so that a batch
    /// with a few bad lines costs a few decodes of it, not one per line.
    fn sort_lines(&mut self) -> Result<RecordBatch, ConvertError> {
        self.batch_ignored = Ignored::default();
        let rows = std::mem::take(&mut self.rows);
        let (mut pieces, mut good) = (Vec::new(), Vec::new());
        self.sort_range(&rows, &mut pieces, &mut good)?;
        self.rows = good;
        self.decoder = self
            .strict
            .decoder(&self.decode_schema, self.batch_rows)
            .map_err(|e| ConvertError::invalid_spec(arrow_message(e)))?;
        arrow_select::concat::concat_batches(&self.decode_schema, &pieces)
            .map_err(|e| ConvertError::parse(None, None, arrow_message(e)))
    }

    /// [`Self::sort_lines`] of `rows`: good ranges pushed to `pieces` and their lines to
    /// `good`, in order.
    fn sort_range(
        &mut self,
        rows: &[(Place, Range<usize>)],
        pieces: &mut Vec<RecordBatch>,
        good: &mut Vec<(Place, Range<usize>)>,
    ) -> Result<(), ConvertError> {
        if rows.is_empty() {
            return Ok(());
        }
        if let Some(batch) = self.decode_rows(rows) {
            pieces.push(batch);
            good.extend(rows.iter().cloned());
            return Ok(());
        }
        if let [(line, range)] = rows {
            let bytes = &self.buf[range.clone()];
            let error = match self.strict.decode_line(&self.decode_schema, bytes) {
                Err(e) => self.diagnose(*line, bytes, e),
                Ok(()) => {
                    let message = "internal error: a line that decodes alone fails in a batch";
                    line.error(None, message)
                }
            };
            return self.rejects.reject(error, &self.buf[range.clone()]);
        }
        let (head, tail) = rows.split_at(rows.len() / 2);
        self.sort_range(head, pieces, good)?;
        self.sort_range(tail, pieces, good)
    }

    /// `rows` decoded together, or `None` if one of them fails.
    fn decode_rows(&mut self, rows: &[(Place, Range<usize>)]) -> Option<RecordBatch> {
        let mut decoder = self.strict.decoder(&self.decode_schema, rows.len()).ok()?;
        for (_, range) in rows {
            decoder.decode(&self.buf[range.clone()]).ok()?;
        }
        let batch = decoder.flush().ok()?;
        if batch.is_some() {
            self.keep_ignored();
        }
        batch
    }

    /// Policy reject: the rows `bad` (indexes into `rows`, in order, with their errors) set
    /// aside, and the others decoded again as the batch.
    fn set_rows_aside(
        &mut self,
        bad: Vec<(usize, ConvertError)>,
    ) -> Result<RecordBatch, ConvertError> {
        let mut rows = std::mem::take(&mut self.rows);
        for (i, error) in bad.into_iter().rev() {
            let (_, range) = rows.remove(i);
            self.rejects.reject(error, &self.buf[range])?;
        }
        self.rows = rows;
        self.refeed()?;
        let flushed = self.decoder.flush();
        if flushed.is_ok() {
            // The batch's rows are these: their count replaces what was counted before.
            self.batch_ignored = Ignored::default();
        }
        if let Ok(Some(_)) = flushed {
            self.keep_ignored();
        }
        match flushed {
            Ok(Some(batch)) => Ok(batch),
            Ok(None) => Ok(RecordBatch::new_empty(self.decode_schema.clone())),
            Err(e) => Err(self.locate(e)),
        }
    }

    /// Policy reject: the rows of `batch` holding a NULL where the schema forbids one are
    /// set aside, and the batch decoded again from the others.
    fn reject_nulls(&mut self, batch: RecordBatch) -> Result<RecordBatch, ConvertError> {
        let bad: Vec<_> = null_rows(&batch, &self.schema)
            .into_iter()
            .map(|(row, column)| {
                let name = self.schema.field(column).name();
                let message = "missing value in a non-nullable column";
                let error = match self.rows.get(row) {
                    Some((place, _)) => place.error(Some(name), message),
                    None => ConvertError::parse(None, Some(name), message),
                };
                (row, error)
            })
            .collect();
        if bad.is_empty() {
            return Ok(batch);
        }
        let batch = self.set_rows_aside(bad)?;
        match null_violation(&batch, &self.schema) {
            None => Ok(batch),
            Some(_) => {
                let message = "internal error: a row without NULLs has one once decoded again";
                Err(ConvertError::parse(None, None, message))
            }
        }
    }

    /// Locates the failure `e` of the batch: at the line and path the row decoder found, or
    /// else at the first line of the batch that fails on its own.
    fn locate(&self, e: ArrowError) -> ConvertError {
        let located = self.strict.shared.findings().located.take();
        if let Some((row, path, message)) = located
            && let Some((line, _)) = self.rows.get(row)
        {
            return line.error(Some(&path), message);
        }
        match self.rows.iter().find_map(|(line, range)| {
            let bytes = &self.buf[range.clone()];
            let e = self.strict.decode_line(&self.decode_schema, bytes).err()?;
            Some((*line, bytes, e))
        }) {
            Some((line, bytes, e)) => self.diagnose(line, bytes, e),
            None => ConvertError::parse(None, None, arrow_message(e)),
        }
    }

    /// The error of `line` (its `bytes`), which just failed on its own with `e`: at the path
    /// the row decoder found, or else of the line as a whole (one that is not an object).
    fn diagnose(&self, line: Place, _bytes: &[u8], e: ArrowError) -> ConvertError {
        if let Some((_, path, message)) = self.strict.shared.findings().located.take() {
            return line.error(Some(&path), message);
        }
        let message = arrow_message(e);
        if message.starts_with("expected { got") {
            return line.error(None, format!("not a JSON object: {message}"));
        }
        line.error(None, message)
    }

    /// Adds the values of unknown fields the last decoding of rows dropped to the batch's
    /// count: called right after a decoding of rows that gave some (a flush of none decodes
    /// nothing, and what a failed decoding counted is never kept).
    fn keep_ignored(&mut self) {
        let ignored = std::mem::take(&mut self.strict.shared.findings().ignored);
        self.batch_ignored.merge(ignored);
    }

    /// The next batch: see [`Batches::next_batch`]. Counts the values of unknown fields of
    /// its rows (and of no others) in `batch_ignored`.
    fn read_batch(&mut self) -> Result<Option<RecordBatch>, ConvertError> {
        self.fill()?;
        let flushed = match self.take_flat_batch()? {
            Some(batch) => {
                if let Some(flat) = &mut self.fast_decoder {
                    self.batch_ignored = flat.take_ignored();
                }
                Ok(Some(batch))
            }
            None => {
                let flushed = self.decoder.flush();
                if let Ok(Some(_)) = flushed {
                    self.keep_ignored();
                }
                flushed
            }
        };
        let batch = match flushed {
            Ok(Some(batch)) => batch,
            Ok(None) if self.end => return Ok(None),
            Ok(None) => return Ok(Some(RecordBatch::new_empty(self.decode_schema.clone()))),
            Err(_) if self.rejects.rejects() => {
                let batch = self.sort_lines()?;
                return self.reject_nulls(batch).map(Some);
            }
            Err(e) => return Err(self.locate(e)),
        };
        if self.rejects.rejects() {
            return self.reject_nulls(batch).map(Some);
        }
        if let Some((row, column)) = null_violation(&batch, &self.schema) {
            let name = self.schema.field(column).name();
            let message = "missing value in a non-nullable column";
            return Err(match self.rows.get(row) {
                Some((place, _)) => place.error(Some(name), message),
                None => ConvertError::parse(None, Some(name), message),
            });
        }
        Ok(Some(batch))
    }
}

impl<R: BufRead> Batches for JsonBatches<R> {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>, ConvertError> {
        self.batch_ignored = Ignored::default();
        let batch = self.read_batch()?;
        if batch.is_some() {
            let counted = std::mem::take(&mut self.batch_ignored);
            self.ignored.merge(counted);
        }
        Ok(batch)
    }

    fn take_rejects(&mut self) -> Vec<super::Rejected> {
        self.rejects.take()
    }

    fn take_ignored(&mut self) -> Ignored {
        std::mem::take(&mut self.ignored)
    }
}

fn one_value(place: Place) -> ConvertError {
    let message = match place.record {
        None => "expected exactly one JSON value on the line",
        Some(_) => "expected exactly one JSON value in the record",
    };
    place.error(None, message)
}

/// Whether arrow-json reads an escaped surrogate pair whose high half is `0xD800 +
/// high_offset` as another character: its tape joins the two halves with `|` where UTF-16
/// adds them, which differs when bit 0x40 of the offset meets the 0x10000 added (U+20000
/// and up, every other block of 64 surrogates; not the emoji's `\uD83D`).
pub(super) fn arrow_json_misreads_pair(high_offset: u32) -> bool {
    high_offset & 0x40 != 0
}

/// `line` with every escaped UTF-16 surrogate pair in its strings (`\uD840\uDC00`) spelled
/// out as the character's UTF-8 bytes, or `None` if it has none. The same JSON either way,
/// but arrow-json's tape joins the two halves with `|` where UTF-16 adds them, which gives
/// another character whenever their bits overlap (U+20000, written `\uD840\uDC00`, reads
/// as U+10000); spelled out, every reader reads the character written.
fn spell_out_surrogate_pairs(line: &[u8]) -> Option<Vec<u8>> {
    let hex4 = |at: usize| {
        let digits = line.get(at..at + 4)?;
        digits.iter().try_fold(0, |value, &b| {
            Some(value << 4 | char::from(b).to_digit(16)?)
        })
    };
    // Most lines have no escape that arrow-json misreads (see `arrow_json_misreads_pair`).
    // Text is full of other escapes (`\u0009`): a first digit other than `d` rules one out
    // without reading the rest.
    let misread = memchr::memmem::find_iter(line, b"\\u").any(|at| {
        line.get(at + 2).is_some_and(|b| b | 0x20 == b'd')
            && hex4(at + 2).is_some_and(|high| {
                (0xD800..=0xDBFF).contains(&high) && arrow_json_misreads_pair(high - 0xD800)
            })
    });
    if !misread {
        return None;
    }
    let mut spelled = Vec::with_capacity(line.len());
    let (mut in_string, mut changed, mut i) = (false, false, 0);
    while let Some(&b) = line.get(i) {
        if !in_string || b != b'\\' {
            in_string ^= b == b'"';
            spelled.push(b);
            i += 1;
            continue;
        }
        // An escape in a string: a surrogate pair is spelled out, anything else copied.
        let pair = (line.get(i + 1) == Some(&b'u') && line.get(i + 6..i + 8) == Some(b"\\u"))
            .then(|| Some((hex4(i + 2)?, hex4(i + 8)?)))
            .flatten()
            .filter(|(high, low)| {
                (0xD800..=0xDBFF).contains(high) && (0xDC00..=0xDFFF).contains(low)
            })
            .and_then(|(high, low)| {
                char::from_u32(0x1_0000 + ((high - 0xD800) << 10) + (low - 0xDC00))
            });
        match pair {
            Some(c) => {
                spelled.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                changed = true;
                i += 12;
            }
            None => {
                spelled.extend_from_slice(&line[i..(i + 2).min(line.len())]);
                i += 2;
            }
        }
    }
    changed.then_some(spelled)
}

/// Appends the next line of `reader` to `buf`, newline included, reading at most `limit`
/// bytes (what `reader.take(limit).read_until(b'\n', buf)` does, with `memchr`); returns
/// the number of bytes read, 0 at the end of the input.
pub(in crate::convert) fn read_line(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<usize> {
    let mut read = 0;
    while read < limit {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let available = &available[..available.len().min(limit - read)];
        if available.is_empty() {
            break;
        }
        let (taken, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        buf.extend_from_slice(&available[..taken]);
        reader.consume(taken);
        read += taken;
        if done {
            break;
        }
    }
    Ok(read)
}

/// What a line longer than `max_record_bytes` is told.
pub(in crate::convert) fn line_too_long(max_record_bytes: usize) -> String {
    format!("the line is longer than the limit of {max_record_bytes} bytes (max_record_bytes)")
}

/// Whether tests asked for arrow-json's path only (see [`tests::arrow_only`]).
#[cfg(test)]
fn arrow_only() -> bool {
    tests::ARROW_ONLY.with(std::cell::Cell::get)
}

#[cfg(not(test))]
fn arrow_only() -> bool {
    false
}

/// Reads to the end of the line (or of the input) without keeping what it reads.
pub(in crate::convert) fn skip_line(reader: &mut impl BufRead) -> Result<(), ConvertError> {
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                reader.consume(n);
            }
        }
    }
}

/// Every row of `batch` holding a NULL where `schema` forbids one, with its first such
/// column, in row order.
fn null_rows(batch: &RecordBatch, schema: &Schema) -> Vec<(usize, usize)> {
    let mut rows = std::collections::BTreeMap::new();
    for (col, (field, array)) in schema.fields().iter().zip(batch.columns()).enumerate() {
        if field.is_nullable() || array.null_count() == 0 {
            continue;
        }
        for row in (0..array.len()).filter(|&r| array.is_null(r)) {
            rows.entry(row).or_insert(col);
        }
    }
    rows.into_iter().collect()
}

/// Makes the decoders of the converter: arrow-json asks it for the decoder of the row
/// objects, and everything from there is made by [`tree`], by column type and options.
#[derive(Debug)]
struct Strict {
    shared: Arc<Shared>,
    /// The columns' options (paths, time formats), by name.
    columns: Vec<ColumnSpec>,
}

impl Strict {
    /// An arrow-json decoder of objects with `schema`'s fields, `batch_rows` at a time.
    fn decoder(
        self: &Arc<Self>,
        schema: &Schema,
        batch_rows: usize,
    ) -> Result<Decoder, ArrowError> {
        ReaderBuilder::new(Arc::new(schema.clone()))
            .with_batch_size(batch_rows)
            .with_decoder_factory(self.clone())
            .build_decoder()
    }

    /// Decodes one line against `schema`, for diagnosis.
    fn decode_line(self: &Arc<Self>, schema: &Schema, line: &[u8]) -> Result<(), ArrowError> {
        let mut decoder = self.decoder(schema, 1)?;
        decoder.decode(line)?;
        decoder.flush().map(drop)
    }

    /// The error of JSON line `line` (its `text`, with its newline) read on its own by a
    /// decoder of one row (its syntax, not its values): `None` if it reads.
    fn line_error(
        self: &Arc<Self>,
        schema: &Schema,
        line: Place,
        text: &[u8],
    ) -> Option<ConvertError> {
        let Ok(mut decoder) = self.decoder(schema, 1) else {
            return None;
        };
        match decoder.decode(text) {
            Err(e) => Some(line.error(None, arrow_message(e))),
            Ok(taken)
                if taken != text.len() || decoder.has_partial_record() || decoder.len() != 1 =>
            {
                Some(one_value(line))
            }
            Ok(_) => None,
        }
    }
}

/// An arrow-json decoder of `schema` under the default policies, for tests comparing paths.
#[cfg(test)]
fn decoder(schema: &Schema, batch_rows: usize) -> Result<Decoder, ArrowError> {
    let strict = Arc::new(Strict {
        shared: Arc::new(Shared::new(
            Default::default(),
            Default::default(),
            Default::default(),
            None,
        )),
        columns: Vec::new(),
    });
    strict.decoder(schema, batch_rows)
}

impl DecoderFactory for Strict {
    fn make_default_decoder(
        &self,
        ctx: &DecoderContext,
        field: &FieldRef,
        _is_nullable: bool,
    ) -> Result<Option<Box<dyn ArrayDecoder>>, ArrowError> {
        // Only the (nameless) root is asked for: the decoders below it are made by `tree`.
        if field.name().is_empty() && matches!(field.data_type(), DataType::Struct(_)) {
            let root =
                StructDecoder::new(&self.shared, ctx, field, String::new(), Some(&self.columns))?;
            return Ok(Some(Box::new(root)));
        }
        tree::make(
            &self.shared,
            ctx,
            field,
            field.name().clone(),
            TimeReading::default(),
        )
        .map(Some)
    }
}

/// The decoder of a scalar column or field of type `ty`, times read by `time`.
fn scalar_decoder(
    shared: &Arc<Shared>,
    ctx: &DecoderContext,
    field: &FieldRef,
    ty: ColumnType,
    time: TimeReading,
) -> Result<Box<dyn ArrayDecoder>, ArrowError> {
    let shared = shared.clone();
    Ok(match ty {
        ColumnType::Int32 => Box::new(Whole::<Int32Type>::new(shared, ty, i32::MIN, i32::MAX)),
        ColumnType::Int64 => Box::new(Whole::<Int64Type>::new(shared, ty, i64::MIN, i64::MAX)),
        ColumnType::Decimal { .. } | ColumnType::Date | ColumnType::Timestamp => {
            Box::new(Exact { shared, ty, time })
        }
        ColumnType::Float32 | ColumnType::Float64 => Box::new(Finite {
            inner: ctx.make_builtin_decoder(field, true)?,
            shared,
            ty,
        }),
        ColumnType::String => Box::new(tree::Text { shared }),
        ColumnType::Bool => Box::new(tree::Flag { shared }),
    })
}

/// An integer column: integer strings as arrow-cast reads them, and numbers only when they
/// are whole (`1.0` and `1e3` are; `1.5` is an error, where arrow-json truncates it).
struct Whole<T> {
    shared: Arc<Shared>,
    ty: ColumnType,
    /// The range of the type.
    min: i128,
    max: i128,
    _type: PhantomData<fn(T) -> T>,
}

impl<T> Whole<T> {
    fn new(
        shared: Arc<Shared>,
        ty: ColumnType,
        min: impl Into<i128>,
        max: impl Into<i128>,
    ) -> Self {
        Self {
            shared,
            ty,
            min: min.into(),
            max: max.into(),
            _type: PhantomData,
        }
    }
}

impl<T> ArrayDecoder for Whole<T>
where
    T: ArrowPrimitiveType + Parser,
    T::Native: TryFrom<i128>,
{
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let (ty, min, max) = (self.ty, self.min, self.max);
        let mut builder = PrimitiveBuilder::<T>::with_capacity(pos.len());
        for &p in pos {
            let value = match tape.get(p) {
                TapeElement::Null => {
                    builder.append_null();
                    continue;
                }
                TapeElement::String(s) => {
                    let s = tape.get_string(s);
                    T::parse(s).ok_or_else(|| format!("cannot parse {} as {ty}", value::Quoted(s)))
                }
                TapeElement::Number(s) => value::whole_number(tape.get_string(s), ty, min, max)
                    .and_then(|whole| {
                        // In range: checked by `whole_number`.
                        T::Native::try_from(whole)
                            .map_err(|_| format!("{whole} is out of range for {ty}"))
                    }),
                _ => Err(format!("expected {ty} got {}", show(tape, p))),
            };
            match value {
                Ok(value) => builder.append_value(value),
                Err(message) => {
                    self.shared.bad(p, message)?;
                    builder.append_null();
                }
            }
        }
        Ok(Arc::new(builder.finish()))
    }
}

/// A decimal, date or timestamp column, read exactly (see [`value`]). Dates and
/// timestamps are strings (a number would be read by arrow-json as days or microseconds
/// since the epoch, which no writer of JSON means by it) unless the column's format is an
/// epoch, which reads numbers.
struct Exact {
    shared: Arc<Shared>,
    ty: ColumnType,
    time: TimeReading,
}

impl Exact {
    fn decimal(&self, text: &str, shown: &str) -> Result<i128, String> {
        let ColumnType::Decimal { precision, scale } = self.ty else {
            unreachable!("a decimal decoder has a decimal type")
        };
        // The scale is at least 0 (see `schema`).
        value::decimal(text, precision, scale.unsigned_abs())
            .map_err(|e| value::decimal_message(shown, self.ty, e))
    }
}

impl ArrayDecoder for Exact {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let ty = self.ty;
        macro_rules! read {
            ($arrow:ty, |$text:ident| $string:expr, |$literal:ident| $number:expr) => {{
                let mut builder = PrimitiveBuilder::<$arrow>::with_capacity(pos.len())
                    .with_data_type(ty.to_arrow());
                for &p in pos {
                    let value = match tape.get(p) {
                        TapeElement::Null => {
                            builder.append_null();
                            continue;
                        }
                        TapeElement::String(s) => {
                            let $text = tape.get_string(s);
                            $string
                        }
                        TapeElement::Number(s) => {
                            let $literal = tape.get_string(s);
                            $number
                        }
                        _ => Err(format!("expected {ty} got {}", show(tape, p))),
                    };
                    match value {
                        Ok(value) => builder.append_value(value),
                        Err(message) => {
                            self.shared.bad(p, message)?;
                            builder.append_null();
                        }
                    }
                }
                Arc::new(builder.finish()) as ArrayRef
            }};
        }
        Ok(match ty {
            ColumnType::Decimal { .. } => read!(
                Decimal128Type,
                |text| self.decimal(text, &value::Quoted(text).to_string()),
                |literal| self.decimal(literal, literal)
            ),
            ColumnType::Date => read!(Date32Type, |text| self.time.date(text), |literal| self
                .time
                .date_number(literal)),
            _ => read!(
                TimestampMicrosecondType,
                |text| self.time.timestamp(text),
                |literal| self.time.timestamp_number(literal)
            ),
        })
    }
}

/// A float column: arrow-json's own decoder, refusing a finite number too large for the
/// type (which it reads as infinity); `"inf"` and `"-Infinity"` as strings stay infinite.
/// Only numbers, strings and nulls reach it: anything else is refused here first.
struct Finite {
    inner: Box<dyn ArrayDecoder>,
    shared: Arc<Shared>,
    ty: ColumnType,
}

impl Finite {
    /// Why the value at `p` is refused, if it is.
    fn refusal(&mut self, tape: &Tape<'_>, p: u32) -> Option<String> {
        let shown = match tape.get(p) {
            TapeElement::Null => return None,
            TapeElement::Number(s) => tape.get_string(s).to_string(),
            TapeElement::String(s) => value::Quoted(tape.get_string(s)).to_string(),
            _ => return Some(format!("expected {} got {}", self.ty, show(tape, p))),
        };
        let array = match self.inner.decode(tape, &[p]) {
            Ok(array) => array,
            Err(_) => return Some(format!("cannot parse {shown} as {}", self.ty)),
        };
        let infinite = if let Some(a) = array.as_primitive_opt::<Float64Type>() {
            a.value(0).is_infinite()
        } else if let Some(a) = array.as_primitive_opt::<Float32Type>() {
            a.value(0).is_infinite()
        } else {
            false
        };
        let spelled = matches!(tape.get(p), TapeElement::String(s) if value::spells_infinity(tape.get_string(s)));
        (infinite && !spelled).then(|| value::float_overflow(&shown, self.ty))
    }
}

impl ArrayDecoder for Finite {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let plain = pos.iter().all(|&p| {
            matches!(
                tape.get(p),
                TapeElement::Null | TapeElement::Number(_) | TapeElement::String(_)
            )
        });
        if plain && let Ok(array) = self.inner.decode(tape, pos) {
            let infinite: Vec<bool> = if let Some(a) = array.as_primitive_opt::<Float64Type>() {
                a.iter().map(|v| v.is_some_and(f64::is_infinite)).collect()
            } else if let Some(a) = array.as_primitive_opt::<Float32Type>() {
                a.iter().map(|v| v.is_some_and(f32::is_infinite)).collect()
            } else {
                return Ok(array);
            };
            if !infinite.contains(&true) {
                return Ok(array);
            }
        }
        // Some value is refused: find which, and decode the others.
        let mut kept = Vec::with_capacity(pos.len());
        for &p in pos {
            match self.refusal(tape, p) {
                None => kept.push(p),
                Some(message) => {
                    self.shared.bad(p, message)?;
                    kept.push(0); // the tape's leading NULL
                }
            }
        }
        self.inner.decode(tape, &kept)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::super::testutil::*;
    use super::super::{ConvertError, convert};

    thread_local! {
        /// Set by [`arrow_only`]: decoders made on this thread skip the fast path.
        pub(super) static ARROW_ONLY: Cell<bool> = const { Cell::new(false) };
    }

    /// `f` run with arrow-json's path only, as before the fast path: for comparing both.
    pub(super) fn arrow_only<T>(f: impl FnOnce() -> T) -> T {
        let before = ARROW_ONLY.with(|a| a.replace(true));
        let result = f();
        ARROW_ONLY.with(|a| a.set(before));
        result
    }

    const AB: &str =
        r#"[{"name":"a","type":"int32","nullable":false},{"name":"b","type":"decimal(12,2)"}]"#;

    #[test]
    fn blank_lines_unknown_keys_and_missing_keys() {
        let input =
            "\n{\"a\":1,\"b\":\"1.5\",\"extra\":[1,{}]}\r\n   \n{\"a\":2}\n{\"b\":null,\"a\":3}";
        let (stats, parquet) = run(input, &json_spec(AB));
        assert_eq!(parquet.rows, text_rows(&["1|1.50", "2|∅", "3|∅"]));
        assert_eq!(stats.rows, 3);
    }

    #[test]
    fn a_line_that_is_not_an_object() {
        let err = parse_error("{\"a\":1}\n[1,2]\n{\"a\":3}\n", &json_spec(AB));
        assert_eq!(err, "line 2: not a JSON object: expected { got [1,2]");
    }

    #[test]
    fn a_value_of_the_wrong_type_names_line_and_column() {
        let mut spec = json_spec(AB);
        spec.batch_rows = 3;
        let lines: Vec<String> = (1..=8)
            .map(|i| format!("{{\"a\":{i},\"b\":{i}.5}}"))
            .collect();
        let mut input = lines.join("\n\n");
        input.push_str("\n{\"a\":9,\"b\":\"nine\"}\n");
        let err = parse_error(&input, &spec);
        assert_eq!(
            err,
            r#"line 16: column "b": cannot parse "nine" as decimal(12,2)"#
        );
        let err = parse_error("{\"a\":1}\n{\"b\":1,\"a\":\"x\"}\n", &spec);
        assert_eq!(err, r#"line 2: column "a": cannot parse "x" as int32"#);
    }

    #[test]
    fn a_missing_non_nullable_value_names_line_and_column() {
        for input in ["{\"a\":1}\n{\"b\":1}\n", "{\"a\":1}\n{\"a\":null}\n"] {
            assert_eq!(
                parse_error(input, &json_spec(AB)),
                r#"line 2: column "a": missing value in a non-nullable column"#
            );
        }
    }

    #[test]
    fn each_line_must_hold_exactly_one_value() {
        for (input, line) in [
            ("{\"a\":1}\n{\"a\":2} {\"a\":3}\n", 2),
            ("{\"a\":1}\n{\"a\":\n2}\n", 2),
            ("{\"a\":1}\n{\"a\":2", 2),
        ] {
            assert_eq!(
                parse_error(input, &json_spec(AB)),
                format!("line {line}: expected exactly one JSON value on the line"),
                "{input:?}"
            );
        }
        let err = parse_error("{\"a\":1}\n{\"a\" 2}\n", &json_spec(AB));
        assert!(err.starts_with("line 2: "), "{err}");
    }

    #[test]
    fn invalid_utf8_is_a_parse_error() {
        for input in [
            &b"{\"a\":1}\n{\"a\":2,\"b\":\"\xff\"}\n"[..],
            b"{\"a\":1}\n{\"a\":2,\"x\":\"x\xda\",\"\x92\":1}\n",
            b"{\"a\":1}\n{\"a\":2}\xc3\n",
        ] {
            assert_eq!(parse_error(input, &json_spec(AB)), "line 2: invalid UTF-8");
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for input in [
            &b"\0\0"[..],
            b"]]]",
            b"{{{{{{{{",
            b"\"",
            b"{\"a\":1e999999}",
            b"nul",
            b"\xef\xbb",
        ] {
            let err = convert(input, &json_spec(AB), Vec::new()).unwrap_err();
            assert!(
                matches!(err, ConvertError::Parse { line: Some(1), .. }),
                "{input:?}: {err:?}"
            );
        }
    }

    const TYPED: &str = r#"[{"name":"i","type":"int32"},{"name":"l","type":"int64"},{"name":"d","type":"decimal(12,2)"},{"name":"day","type":"date"},{"name":"t","type":"timestamp"},{"name":"f","type":"float64"},{"name":"g","type":"float32"}]"#;

    #[test]
    fn values_arrow_json_would_change_are_errors_naming_line_and_column() {
        let spec = json_spec(TYPED);
        for (line, error) in [
            (
                r#"{"i":1.5}"#,
                r#"column "i": cannot parse 1.5 as int32: it is not a whole number"#,
            ),
            (
                r#"{"l":-0.25e1}"#,
                r#"column "l": cannot parse -0.25e1 as int64: it is not a whole number"#,
            ),
            (
                r#"{"i":2147483648}"#,
                r#"column "i": cannot parse 2147483648 as int32: out of range"#,
            ),
            (
                r#"{"i":"1.5"}"#,
                r#"column "i": cannot parse "1.5" as int32"#,
            ),
            (
                r#"{"d":1.005}"#,
                r#"column "d": cannot parse 1.005 as decimal(12,2): it has more than 2 digits after the point and would be rounded"#,
            ),
            (
                r#"{"d":"1.005"}"#,
                r#"column "d": cannot parse "1.005" as decimal(12,2): it has more than 2 digits after the point and would be rounded"#,
            ),
            (
                r#"{"d":1e11}"#,
                r#"column "d": cannot parse 1e11 as decimal(12,2): it has more than 10 digits before the point"#,
            ),
            (
                r#"{"day":"2024-01-02T23:30:00-05:00"}"#,
                r#"column "day": cannot parse "2024-01-02T23:30:00-05:00" as date: it has a time of day (declare the column as timestamp)"#,
            ),
            (
                r#"{"day":19000}"#,
                r#"column "day": cannot parse 19000 as date: write dates as strings such as "2024-01-31", or give the column a format such as epoch_seconds"#,
            ),
            (
                r#"{"t":"2024-01-02T03:04:05.1234567Z"}"#,
                r#"column "t": cannot parse "2024-01-02T03:04:05.1234567Z" as timestamp: it has digits below the microsecond and would be truncated"#,
            ),
            (
                r#"{"t":1700000000}"#,
                r#"column "t": cannot parse 1700000000 as timestamp: write times as RFC 3339 strings such as "2024-01-31T12:00:00Z", or give the column a format such as epoch_seconds"#,
            ),
            (
                r#"{"f":1e999}"#,
                r#"column "f": cannot parse 1e999 as float64: out of range"#,
            ),
            (
                r#"{"g":"1e39"}"#,
                r#"column "g": cannot parse "1e39" as float32: out of range"#,
            ),
            (r#"{"i":{}}"#, r#"column "i": expected int32 got {}"#),
            (
                r#"{"d":[1]}"#,
                r#"column "d": expected decimal(12,2) got [1]"#,
            ),
            (
                r#"{"t":true}"#,
                r#"column "t": expected timestamp got true"#,
            ),
        ] {
            let input = format!("{{\"i\":1}}\n\n{line}\n");
            assert_eq!(
                parse_error(&input, &spec),
                format!("line 3: {error}"),
                "{line}"
            );
        }
    }

    #[test]
    fn exact_values_in_any_spelling_are_read() {
        let input = r#"{"i":1.0,"l":"-7","d":1.500,"day":"2024-02-29","t":"2024-01-02T03:04:05.123456000+01:00","f":"-inf","g":"Infinity"}
{"i":1e3,"l":9007199254740993.0,"d":"-2.5e-1","f":1e308,"g":1.5}
"#;
        let (_, parquet) = run(input, &json_spec(TYPED));
        assert_eq!(
            parquet.rows,
            text_rows(&[
                "1|-7|1.50|2024-02-29|2024-01-02T02:04:05.123456Z|-inf|inf",
                "1000|9007199254740993|-0.25|∅|∅|1e308|1.5",
            ])
        );
    }

    #[test]
    fn a_key_given_twice_is_an_error() {
        let spec = json_spec(AB);
        assert_eq!(
            parse_error("{\"a\":1}\n{\"a\":1,\"b\":2,\"a\":3}\n", &spec),
            r#"line 2: column "a": the key appears twice in the object"#,
            "arrow-json would keep the last value"
        );
        let (_, parquet) = run("{\"a\":1,\"x\":1,\"x\":2}\n", &spec);
        assert_eq!(
            parquet.rows,
            text_rows(&["1|∅"]),
            "keys not in the schema are ignored"
        );
    }

    #[test]
    fn a_long_line_is_refused_naming_it() {
        let mut spec = json_spec(AB);
        spec.max_record_bytes = 12;
        let (_, parquet) = run("{\"a\":123456}\r\n", &spec);
        assert_eq!(parquet.rows.len(), 1, "12 bytes and a CRLF are allowed");
        assert_eq!(
            parse_error("{\"a\":1}\n{\"a\":1234567}\n", &spec),
            "line 2: the line is longer than the limit of 12 bytes (max_record_bytes)"
        );
    }

    #[test]
    fn surrogate_pairs_are_read_as_the_characters_they_stand_for() {
        let spec = json_spec(r#"[{"name":"s","type":"string"}]"#);
        let input = r#"{"s":"\uD83D\uDE00"}
{"s":"\ud869\uded6"}
{"s":"\uD840\uDC00 \ud869\uded6"}
{"s":"\\uD840\\uDC00", "\uD840\uDC00": 1}
{"s":"\uD840"}
"#;
        // arrow-json alone reads U+20000 as U+10000 (it ORs 0x10000 in where UTF-16 adds
        // it): every line has its pairs spelled out before either decoder sees it.
        let expected = text_rows(&[
            "\u{1F600}",
            "\u{2A6D6}",
            "\u{20000} \u{2A6D6}",
            "\\uD840\\uDC00",
        ]);
        let mut spec_all = spec.clone();
        spec_all.bad_rows = super::super::BadRows::Reject { max: 10 };
        let (stats, parquet) = run(input, &spec_all);
        assert_eq!(
            parquet.rows, expected,
            "a lone high surrogate is not a character"
        );
        assert_eq!(stats.rejects.len(), 1);
        assert_eq!(arrow_only(|| run(input, &spec_all)).1.rows, expected);
        let clean: String = input.lines().take(4).map(|l| format!("{l}\n")).collect();
        assert_eq!(run(&clean, &spec).1.rows, expected);
        assert_eq!(
            super::spell_out_surrogate_pairs(br#"{"a":"\n\u0041"}"#),
            None
        );
        // The fast path reads a pair as written; when a later line of the batch sends the
        // batch to arrow-json (a trailing comma: arrow-json accepts it, the fast path
        // declines), the pair's line is read again, spelled out.
        let declined = "{\"s\":\"\\uD840\\uDC00\"}\n{\"s\":\"b\",}\n";
        assert_eq!(run(declined, &spec).1.rows, text_rows(&["\u{20000}", "b"]));
    }

    #[test]
    fn batches_cut_by_bytes_read_the_same_rows() {
        let input = "{\"a\":1}\n\n{\"a\":2,\"b\":\"2.5\"}\r\n{\"a\":3}\n   \n{\"b\":null,\"a\":4}";
        let whole = run(input, &json_spec(AB)).1.rows;
        assert_eq!(whole.len(), 4);
        for batch_bytes in 1..input.len() + 2 {
            let mut spec = json_spec(AB);
            spec.batch_bytes = batch_bytes;
            spec.batch_rows = 3;
            assert_eq!(run(input, &spec).1.rows, whole, "{batch_bytes} bytes");
        }
    }
}
