//! CSV → record batches, each field split once and parsed straight into its column,
//! with physical line numbers.
//!
//! A [`Scan`] of the CSV structure, which mirrors csv-core's state machine, reads the bytes
//! of a batch (one batch at most is kept) and notes where every field's text is
//! ([`Spans`]). It knows where each record ends, so that a batch is closed after
//! [`ConvertSpec::batch_bytes`] at a record boundary and a record longer than
//! [`ConvertSpec::max_record_bytes`] is refused before it is buffered whole; and it refuses
//! what csv-core reads leniently: text after a closing quote (`"abc"x`, which csv-core
//! reads as `abcx`) and a quoted field still open at the end of the input (which csv-core
//! closes silently, swallowing the rest of the file into one field). A quote inside an
//! unquoted field (`ab"c`) is kept as a character, as every lenient reader does: nothing
//! is lost or changed.
//!
//! A clean batch is then built from those fields in one pass per column
//! ([`CsvBatches::fast_batch`]), reading only spellings on which it cannot differ from
//! arrow-csv. Any other batch — a value that does not parse, a wrong field count, invalid
//! UTF-8, an unusual spelling — goes to arrow-csv's decoder, as every batch once did; when
//! that fails it re-decodes the batch one record at a time, and the failing record one
//! column at a time, to name the line, the column and the value (arrow-csv's own error
//! positions count records, not lines, are 0-based counting the header for a bad value but
//! 1-based for a wrong field count or bad UTF-8, and are missing for decimals). A test
//! reads random files of every type both ways and requires identical Parquet, rejects
//! and errors.
//!
//! Decimal, date and timestamp columns are read by [`super::value`], which refuses what
//! arrow-csv would round, truncate or drop; float columns are checked for numbers too
//! large for the type (read as infinity).
//!
//! A source may spell values otherwise ([`super::CsvValues`], a column's time format), or
//! rescue bad values: then both paths read every column with
//! [`CsvBatches::spelled_column`], arrow-csv's only splitting the records into text fields.
//! - A field equal (whole, case-sensitive, after unquoting) to one of the null values is
//!   NULL in every column, string columns too. An empty field is NULL in every column but
//!   a string one, where it is NULL or "" as `empty_strings` says, unless "" is itself a
//!   null value. A NULL in a non-nullable column fails the row (or rejects it), naming the
//!   null value.
//! - A bool field reads as the listed `true_values` / `false_values` (exactly), or, without
//!   a list, as `true` / `false` in any case.
//! - Under a decimal comma, float and decimal fields have one comma for their point (`1,50`,
//!   `-0,5e3`); a `.` or a second comma (digits grouped) does not read. Integers are not
//!   affected.
//! - A timestamp or date column with a `format` or `timezone` is read by
//!   [`TimeReading`]; without, as ever.
//! - Under [`BadValues::Rescue`] a value of a nullable column that does not read is NULL, and
//!   its text and the message it would fail with go to the rescued column (one JSON object
//!   per row, its fields in column order, keyed by column path); the row lands. In a
//!   non-nullable column the value fails the row as ever.
//! - The columns of a header that the schema does not name (see `header.rs`) are read as
//!   text, then counted under [`UnknownFields::Ignore`] or rescued under
//!   [`UnknownFields::Rescue`], each field neither empty nor a null value.
//!
//! Without any of these, every column is read as it always was, on the same paths.

pub(super) mod header;

use std::borrow::Cow;
use std::io::BufRead;
use std::sync::Arc;

use arrow_array::builder::{ArrayBuilder, BooleanBuilder, PrimitiveBuilder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowPrimitiveType, Date32Type, Decimal128Type, Int32Type, Int64Type, TimestampMicrosecondType,
};
use arrow_array::types::{Float32Type, Float64Type};
use arrow_array::{
    Array, ArrayRef, Date32Array, Decimal128Array, PrimitiveArray, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow_cast::parse::Parser;
use arrow_csv::ReaderBuilder;
use arrow_csv::reader::Decoder;
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};

use super::reject::RejectLog;
use super::value::{self, TimeReading};
use super::{
    BadValues, Batches, ConvertError, ConvertSpec, CsvOptions, EmptyStrings, Ignored,
    UnknownFields, arrow_message, null_violation, nullable,
};
use crate::schema::{ColumnType, FieldPath, Step};

/// Record batches decoded from CSV text.
pub(super) struct CsvBatches<R> {
    reader: R,
    options: CsvOptions,
    empty_strings: EmptyStrings,
    batch_rows: usize,
    batch_bytes: usize,
    max_record_bytes: usize,
    /// The spec's schema and its column types.
    schema: SchemaRef,
    types: Vec<ColumnType>,
    /// The spec's [`ConvertSpec::decoded_schema`] with all fields nullable: the schema of
    /// the batches returned (the rescued column last when a policy rescues).
    decode_schema: SchemaRef,
    /// `schema`, all nullable, with the columns read by [`value`] as text (every column
    /// under [`Spellings`]): what arrow-csv decodes.
    read_schema: SchemaRef,
    /// How the fields spell values beyond what arrow-csv reads (`None`: they do not, and
    /// each column is read as it always was).
    spelled: Option<Spellings>,
    /// Each column's name spelled as a path: the keys of the rescued column and of the
    /// ignored fields.
    paths: Vec<String>,
    /// The columns the schema does not name (`csv.columns: "name"`): counted in `ignored`,
    /// or kept in the rescued column, as [`ConvertSpec::unknown_fields`] says.
    unknown: Vec<usize>,
    unknown_fields: UnknownFields,
    /// Values of unknown columns dropped since [`Batches::take_ignored`].
    ignored: Ignored,
    /// All fields nullable text: decodes any record with the right number of fields.
    text_schema: SchemaRef,
    /// Bytes of the records of the batch in progress (or of the header).
    raw: Vec<u8>,
    /// Where the fields of the records in `raw` are, as the scan found them.
    spans: Spans,
    /// Whether the dialect lets [`Self::fast_batch`] read fields from `spans`: delimiter,
    /// quote and escape are distinct ASCII bytes other than line terminators.
    plain_dialect: bool,
    /// Always decode with arrow-csv (tests compare the two paths).
    #[cfg(test)]
    arrow_only: bool,
    /// Newlines before `raw`.
    line: u64,
    /// The structure of the bytes fed so far.
    scan: Scan,
    /// Rows set aside (policy [`super::BadRows::Reject`]).
    rejects: RejectLog,
}

/// Why reading the records of a batch stopped short.
enum Fill {
    /// The input failed.
    Io(std::io::Error),
    /// The scan found malformed CSV in the record starting at this offset of `raw`.
    Malformed(usize, ConvertError),
}

impl From<std::io::Error> for Fill {
    fn from(e: std::io::Error) -> Self {
        Fill::Io(e)
    }
}

/// Does a column of this type go through [`value`] (decoded as text by arrow-csv)?
fn read_exactly(ty: ColumnType) -> bool {
    matches!(
        ty,
        ColumnType::Decimal { .. } | ColumnType::Date | ColumnType::Timestamp
    )
}

impl<R: BufRead> CsvBatches<R> {
    /// Prepares to decode `reader`, skipping its header if `options` say it has one.
    pub(super) fn new(
        reader: R,
        options: CsvOptions,
        spec: &ConvertSpec,
        types: Vec<ColumnType>,
    ) -> Result<Self, ConvertError> {
        let spelled = Spellings::of(spec);
        let text = |f: &Field| Field::new(f.name(), DataType::Utf8, true);
        let text_fields: Vec<_> = spec.schema.fields().iter().map(|f| text(f)).collect();
        let read_fields: Vec<_> = nullable(&spec.schema)
            .fields()
            .iter()
            .zip(&types)
            .map(|(f, ty)| {
                if read_exactly(*ty) || spelled.is_some() {
                    text(f)
                } else {
                    f.as_ref().clone()
                }
            })
            .collect();
        let read_schema = Arc::new(Schema::new(read_fields));
        let paths = spec
            .schema
            .fields()
            .iter()
            .map(|f| path_of(f.name()))
            .collect();
        let special = [Some(options.delimiter), Some(options.quote), options.escape];
        let plain_dialect = special
            .iter()
            .flatten()
            .all(|b| b.is_ascii() && !matches!(b, b'\r' | b'\n'))
            && options.delimiter != options.quote
            && options
                .escape
                .is_none_or(|e| e != options.quote && e != options.delimiter);
        let mut batches = Self {
            reader,
            options,
            empty_strings: spec.empty_strings,
            batch_rows: spec.batch_rows,
            batch_bytes: spec.batch_bytes,
            max_record_bytes: spec.max_record_bytes,
            schema: spec.schema.clone(),
            spans: Spans::new(types.len()),
            types,
            decode_schema: nullable(&spec.decoded_schema()),
            read_schema,
            spelled,
            paths,
            unknown: Vec::new(),
            unknown_fields: spec.unknown_fields,
            ignored: Ignored::default(),
            text_schema: Arc::new(Schema::new(text_fields)),
            raw: Vec::new(),
            plain_dialect,
            #[cfg(test)]
            arrow_only: tests::ARROW_ONLY.get(),
            line: 0,
            scan: Scan::default(),
            rejects: RejectLog::new(spec.bad_rows),
        };
        if options.header {
            match batches.fill(usize::MAX, 1) {
                Ok(()) => {}
                Err(Fill::Io(e)) => return Err(e.into()),
                Err(Fill::Malformed(_, e)) => return Err(e),
            }
            let mut header = batches.single(batches.text_schema.clone());
            if let Err(e) = feed(&mut header, &batches.raw) {
                let line = batches.record_line(0);
                return Err(batches.field_count_error(line, "header: ", e));
            }
        }
        Ok(batches)
    }

    /// Says which columns (indices) the schema does not name: a header's columns matched
    /// by name (see `header.rs`), each read as text.
    pub(super) fn with_unknown(mut self, unknown: Vec<usize>) -> Self {
        self.unknown = unknown;
        self
    }

    /// A decoder of one record against `schema`.
    fn single(&self, schema: SchemaRef) -> Decoder {
        builder(&self.options, schema)
            .with_batch_size(1)
            .build_decoder()
    }

    /// Reads whole records into `raw`, their fields into `spans`, until there are
    /// `max_records` of them, they reach `budget` bytes, or the input ends.
    fn fill(&mut self, budget: usize, max_records: usize) -> Result<(), Fill> {
        self.spans.max_records = max_records;
        loop {
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                return self.end_of_input();
            }
            let mut scan = self.scan;
            let found = scan.run(
                &self.options,
                self.max_record_bytes,
                buf,
                self.raw.len(),
                budget,
                &mut self.spans,
            );
            let (n, failure) = match found {
                Found::End => (buf.len(), None),
                Found::Boundary(n) => (n, None),
                Found::Malformed(n, message) => (n, Some(message.to_owned())),
                Found::TooLong(n) => (
                    n,
                    Some(format!(
                        "the record is longer than the limit of {} bytes (max_record_bytes)",
                        self.max_record_bytes
                    )),
                ),
            };
            self.raw.extend_from_slice(&buf[..n]);
            self.reader.consume(n);
            self.scan = scan;
            if let Some(message) = failure {
                return Err(self.malformed(message));
            }
            if matches!(found, Found::Boundary(_)) {
                return Ok(());
            }
        }
    }

    /// The input ended: the record the scan is in ends too, unless a quoted field is open.
    fn end_of_input(&mut self) -> Result<(), Fill> {
        if matches!(self.scan.state, State::Quoted | State::Escaped) {
            let message = "a quoted field is still open at the end of the input";
            return Err(self.malformed(message));
        }
        if self.scan.state != State::StartRecord {
            let closing_quote = usize::from(self.scan.state == State::QuoteEnd);
            let end = self.raw.len() - closing_quote;
            self.spans
                .push(self.scan.field_start, end, self.scan.unescape);
            self.spans.end_record(self.scan.field + 1);
        }
        self.scan.state = State::StartRecord;
        Ok(())
    }

    /// The error for malformed CSV in the record the scan is in.
    fn malformed(&self, message: impl Into<String>) -> Fill {
        let column = self.schema.fields().get(self.scan.field);
        let start = self.scan.record_start.min(self.raw.len());
        let error = ConvertError::parse(
            Some(self.record_line(start)),
            column.map(|f| f.name().as_str()),
            message,
        );
        Fill::Malformed(start, error)
    }

    /// The 1-based physical line where the record at `offset` in `raw` starts.
    fn record_line(&self, offset: usize) -> u64 {
        let blank = self.raw[offset..]
            .iter()
            .take_while(|b| matches!(b, b'\r' | b'\n'))
            .count();
        self.line + newlines(&self.raw[..offset + blank]) + 1
    }

    /// Reads `e` as arrow-csv's "incorrect number of fields" complaint about the record
    /// starting at `line`.
    fn field_count_error(&self, line: u64, prefix: &str, e: ArrowError) -> ConvertError {
        let line = Some(line);
        let message = match e {
            ArrowError::IoError(_, e) => return e.into(),
            e => arrow_message(e),
        };
        // arrow-csv: "incorrect number of fields for line L, expected N got M"
        let message = match message.split_once(" got ") {
            Some((_, got)) if message.starts_with("incorrect number of fields") => {
                format!("expected {} fields, got {got}", self.schema.fields().len())
            }
            _ => message,
        };
        ConvertError::parse(line, None, format!("{prefix}{message}"))
    }

    /// Reads the text columns of `batch` that stand for decimal, date and timestamp
    /// columns exactly (every column, under [`Spellings`]); `None` if a value does not read
    /// (left to [`Self::first_error`]).
    fn read_exact(&self, batch: RecordBatch) -> Option<RecordBatch> {
        if self.spelled.is_some() {
            return self.read_text(&batch);
        }
        if !self.types.iter().any(|ty| read_exactly(*ty)) {
            return Some(batch);
        }
        let columns = batch
            .columns()
            .iter()
            .zip(&self.types)
            .map(|(column, ty)| {
                if !read_exactly(*ty) {
                    return Some(column.clone());
                }
                let text = column.as_string_opt::<i32>()?;
                let values = text.iter();
                Some(match *ty {
                    ColumnType::Decimal { precision, scale } => Arc::new(
                        values
                            .map(|v| {
                                v.map(|v| value::decimal(v, precision, scale.unsigned_abs()).ok())
                                    .map_or(Some(None), |v| v.map(Some))
                            })
                            .collect::<Option<Decimal128Array>>()?
                            .with_precision_and_scale(precision, scale)
                            .ok()?,
                    ) as ArrayRef,
                    ColumnType::Date => Arc::new(
                        values
                            .map(|v| {
                                v.map(|v| value::date(v).ok())
                                    .map_or(Some(None), |v| v.map(Some))
                            })
                            .collect::<Option<Date32Array>>()?,
                    ),
                    _ => Arc::new(
                        values
                            .map(|v| {
                                v.map(|v| value::timestamp(v).ok())
                                    .map_or(Some(None), |v| v.map(Some))
                            })
                            .collect::<Option<TimestampMicrosecondArray>>()?
                            .with_data_type(ty.to_arrow()),
                    ),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        RecordBatch::try_new(self.decode_schema.clone(), columns).ok()
    }

    /// Replaces NULLs in string columns with "" if the spec asks for it.
    fn fill_empty_strings(&self, batch: RecordBatch) -> Result<RecordBatch, ConvertError> {
        // Under spellings the columns are read whole by `spelled_column`.
        if self.empty_strings == EmptyStrings::Null || self.spelled.is_some() {
            return Ok(batch);
        }
        let columns = batch
            .columns()
            .iter()
            .zip(&self.types)
            .map(|(column, ty)| match column.as_string_opt::<i32>() {
                Some(text) if *ty == ColumnType::String && text.null_count() > 0 => Arc::new(
                    text.iter()
                        .map(|v| Some(v.unwrap_or_default()))
                        .collect::<StringArray>(),
                )
                    as ArrayRef,
                _ => column.clone(),
            })
            .collect();
        RecordBatch::try_new(batch.schema(), columns)
            .map_err(|e| ConvertError::parse(None, None, arrow_message(e)))
    }

    /// The first record in `raw[..end]` that does not decode, and where and why.
    fn first_error(&self, end: usize) -> Option<ConvertError> {
        let mut offset = 0;
        let mut line = self.line;
        while offset < end {
            let blank = self.raw[offset..end]
                .iter()
                .take_while(|b| matches!(b, b'\r' | b'\n'))
                .count();
            line += newlines(&self.raw[offset..offset + blank]);
            match self.check_record(offset, end, line + 1) {
                Ok(0) => break,
                Ok(span) => {
                    line += newlines(&self.raw[offset + blank..offset + span]);
                    offset += span;
                }
                Err(e) => return Some(e),
            }
        }
        None
    }

    /// The record at `offset` of `raw[..end]`, starting on `line`: how many bytes it spans
    /// (0: there is none), or where and why it does not decode.
    fn check_record(&self, offset: usize, end: usize, line: u64) -> Result<usize, ConvertError> {
        let rest = &self.raw[offset..end];
        let mut decoder = self.single(self.text_schema.clone());
        let span = feed(&mut decoder, rest).map_err(|e| self.field_count_error(line, "", e))?;
        if let Err(e) = std::str::from_utf8(&rest[..span]) {
            return Err(self.invalid_utf8(offset, e.valid_up_to(), line));
        }
        let text = match decoder.flush() {
            Ok(Some(text)) if span > 0 => text,
            Ok(_) => return Ok(0),
            Err(e) => return Err(self.utf8_error(line, e)),
        };
        let record = &rest[..span];
        let mut typed = self.single(self.read_schema.clone());
        let parses = feed(&mut typed, record).and_then(|_| typed.flush()).is_ok();
        match self.check_fields(line, record, &text, parses) {
            Some(e) => Err(e),
            None => Ok(span),
        }
    }

    /// How many bytes the record at `offset` of `raw[..end]` spans, by the scan (which
    /// agrees with csv-core, and knows a record arrow-csv refuses).
    fn record_extent(&self, offset: usize, end: usize) -> usize {
        let mut scan = Scan::default();
        let bytes = &self.raw[offset..end];
        let mut spans = Spans::new(self.types.len());
        match scan.run(
            &self.options,
            usize::MAX,
            bytes,
            offset,
            offset + 1,
            &mut spans,
        ) {
            Found::Boundary(n) => n,
            _ => bytes.len(),
        }
    }

    /// Policy reject: the records of `raw` sorted into bad ones, set aside, and good ones,
    /// returned as one batch (of no rows if none is good). Ranges of records are decoded
    /// together and halved while they fail, so that a batch with a few bad records costs a
    /// few decodes of it, not one per record. Where the scan's fields describe the batch,
    /// ranges are decoded as a clean batch is ([`Self::fast_records`]), and arrow-csv
    /// decodes only ranges of at most [`Self::ARROW_RANGE`] records that the fast path
    /// declines (the bad record itself, or a spelling the fast path leaves to arrow-csv,
    /// if there is one: none is known in this dialect).
    fn sort_records(&mut self) -> Result<RecordBatch, ConvertError> {
        // Each record: its bytes in `raw` and the line it starts on.
        let end = self.raw.len();
        let mut records = Vec::new();
        let (mut offset, mut line) = (0, self.line);
        while offset < end {
            let extent = self.record_extent(offset, end);
            let bytes = &self.raw[offset..offset + extent];
            let blank = bytes
                .iter()
                .take_while(|b| matches!(b, b'\r' | b'\n'))
                .count();
            if blank < extent {
                let starts = line + newlines(&bytes[..blank]) + 1;
                records.push((offset..offset + extent, starts));
            }
            line += newlines(bytes);
            offset += extent;
        }
        let fields_fit = self.fields_describe_batch() && self.spans.records == records.len();
        let text = fields_fit
            .then(|| simdutf8::basic::from_utf8(&self.raw).ok())
            .flatten();
        #[cfg(test)]
        tests::FAST_SORTS.set(tests::FAST_SORTS.get() + usize::from(text.is_some()));
        let mut sorted = Sorted {
            text,
            pieces: Vec::new(),
            rejected: Vec::new(),
        };
        if text.is_some() && records.len() > 1 {
            // The fast path has declined the whole batch already: its halves next.
            self.sort_halves(&records, 0, &mut sorted)?;
        } else {
            self.sort_range(&records, 0, &mut sorted)?;
        }
        let Sorted {
            pieces, rejected, ..
        } = sorted;
        for (e, range) in rejected {
            self.rejects.reject(e, &self.raw[range])?;
        }
        arrow_select::concat::concat_batches(&self.decode_schema, &pieces)
            .map_err(|e| ConvertError::parse(None, None, arrow_message(e)))
    }

    /// Ranges of at most this many records that the fast path declines are decoded by
    /// arrow-csv before they are halved: a spelling only arrow-csv reads costs a decode of
    /// a small range, never one per record.
    const ARROW_RANGE: usize = 64;

    /// [`Self::sort_records`] of `records`, the `first`th record of the batch onwards, into
    /// `sorted`.
    fn sort_range(
        &self,
        records: &[Record],
        first: usize,
        sorted: &mut Sorted<'_>,
    ) -> Result<(), ConvertError> {
        let (Some(head), Some(last)) = (records.first(), records.last()) else {
            return Ok(());
        };
        let decoded = match sorted.text {
            Some(text) => self.fast_records(first, records.len(), text).or_else(|| {
                (records.len() <= Self::ARROW_RANGE)
                    .then(|| self.decode_range(head.0.start..last.0.end, records))
                    .flatten()
            }),
            None => self.decode_range(head.0.start..last.0.end, records),
        };
        if let Some(batch) = decoded {
            sorted.pieces.push(batch);
            return Ok(());
        }
        if let [(range, line)] = records {
            return match self.check_record(range.start, range.end, *line) {
                Err(e) => {
                    sorted.rejected.push((e, range.clone()));
                    Ok(())
                }
                Ok(_) => {
                    let message =
                        "internal error: a record that does not decode passes every check";
                    Err(ConvertError::parse(Some(*line), None, message))
                }
            };
        }
        self.sort_halves(records, first, sorted)
    }

    /// [`Self::sort_range`] of each half of `records` (two or more), in order.
    fn sort_halves(
        &self,
        records: &[Record],
        first: usize,
        sorted: &mut Sorted<'_>,
    ) -> Result<(), ConvertError> {
        let half = records.len() / 2;
        let (head, tail) = records.split_at(half);
        self.sort_range(head, first, sorted)?;
        self.sort_range(tail, first + half, sorted)
    }

    /// The `records` spanning `range` of `raw` as one checked batch, or `None` if one of
    /// them does not decode.
    fn decode_range(
        &self,
        range: std::ops::Range<usize>,
        records: &[Record],
    ) -> Option<RecordBatch> {
        let bytes = &self.raw[range];
        std::str::from_utf8(bytes).ok()?;
        let mut decoder = builder(&self.options, self.read_schema.clone())
            .with_batch_size(records.len())
            .build_decoder();
        decode(&mut decoder, &mut true, bytes).ok()?;
        decoder.decode(&[]).ok()?;
        let batch = decoder.flush().ok()??;
        if batch.num_rows() != records.len() {
            return None;
        }
        let batch = self.read_exact(batch)?;
        // An infinity may stand for an overflow, which only the record's own check tells.
        if self.may_overflow(&batch)
            && records
                .iter()
                .any(|(r, line)| self.check_record(r.start, r.end, *line).is_err())
        {
            return None;
        }
        let batch = self.fill_empty_strings(batch).ok()?;
        null_violation(&batch, &self.schema)
            .is_none()
            .then_some(batch)
    }

    /// Invalid UTF-8 `at` bytes into the record at `offset` of `raw`, in the column the
    /// scan finds there.
    fn invalid_utf8(&self, offset: usize, at: usize, line: u64) -> ConvertError {
        let mut scan = Scan::default();
        let bytes = &self.raw[offset..offset + at];
        let mut spans = Spans::new(self.types.len());
        scan.run(
            &self.options,
            usize::MAX,
            bytes,
            offset,
            usize::MAX,
            &mut spans,
        );
        let column = self.schema.fields().get(scan.field);
        ConvertError::parse(
            Some(line),
            column.map(|f| f.name().as_str()),
            "invalid UTF-8",
        )
    }

    /// Reads `e` as arrow-csv's invalid UTF-8 complaint about the record at `line`.
    fn utf8_error(&self, line: u64, e: ArrowError) -> ConvertError {
        let message = arrow_message(e);
        if !message.contains("UTF-8") {
            return ConvertError::parse(Some(line), None, message);
        }
        // arrow-csv: "Encountered invalid UTF-8 data for line L and field F", F 1-based
        let column = message
            .rsplit_once("field ")
            .and_then(|(_, field)| field.parse::<usize>().ok()?.checked_sub(1))
            .and_then(|index| self.schema.fields().get(index));
        ConvertError::parse(
            Some(line),
            column.map(|f| f.name().as_str()),
            "invalid UTF-8",
        )
    }

    /// The first field of `record` (decoded as `text`) that does not fit its column;
    /// values arrow-csv reads are parsed one by one only if the whole record does not
    /// `parse`.
    fn check_fields(
        &self,
        line: u64,
        record: &[u8],
        text: &RecordBatch,
        parses: bool,
    ) -> Option<ConvertError> {
        let fields = self.schema.fields().iter().zip(&self.types);
        for (index, (field, ty)) in fields.enumerate() {
            let value = text.column(index).as_string_opt::<i32>()?;
            let error =
                |message| Some(ConvertError::parse(Some(line), Some(field.name()), message));
            if self.spelled.is_some() {
                // The reading of the batch itself, of this one field.
                let field = (!value.is_null(0)).then(|| Cow::Borrowed(value.value(0)));
                let read =
                    self.spelled_column(index, std::iter::once(Some(field)), 1, &mut Vec::new());
                if let Err(Some(message)) = read {
                    return error(message);
                }
            } else if value.is_null(0) {
                let kept = *ty == ColumnType::String && self.empty_strings == EmptyStrings::Empty;
                if !field.is_nullable() && !kept {
                    return error("empty value in a non-nullable column".to_owned());
                }
            } else if let Some(message) = exact_error(*ty, value.value(0)) {
                return error(message);
            } else if !parses && *ty != ColumnType::String && !read_exactly(*ty) {
                let mut typed = self.text_schema.fields().to_vec();
                typed[index] = self.read_schema.fields()[index].clone();
                let mut decoder = self.single(Arc::new(Schema::new(typed)));
                if feed(&mut decoder, record)
                    .and_then(|_| decoder.flush())
                    .is_err()
                {
                    return error(format!(
                        "cannot parse {} as {ty}",
                        value::Quoted(value.value(0))
                    ));
                }
            }
        }
        None
    }
}

/// Why `text` is not an exact value of a column of type `ty`, for the types that
/// [`value`] reads (and floats, whose overflow arrow-csv reads as infinity).
fn exact_error(ty: ColumnType, text: &str) -> Option<String> {
    let shown = || value::Quoted(text).to_string();
    match ty {
        ColumnType::Decimal { precision, scale } => {
            value::decimal(text, precision, scale.unsigned_abs())
                .err()
                .map(|e| value::decimal_message(&shown(), ty, e))
        }
        ColumnType::Date => value::date(text).err(),
        ColumnType::Timestamp => value::timestamp(text).err(),
        ColumnType::Float64 => Float64Type::parse(text)
            .is_some_and(|v| v.is_infinite() && !value::spells_infinity(text))
            .then(|| value::float_overflow(&shown(), ty)),
        ColumnType::Float32 => Float32Type::parse(text)
            .is_some_and(|v| v.is_infinite() && !value::spells_infinity(text))
            .then(|| value::float_overflow(&shown(), ty)),
        _ => None,
    }
}

/// Whether a float column of `batch` holds an infinity (which may stand for an overflow).
fn has_infinity(batch: &RecordBatch) -> bool {
    batch.columns().iter().any(|c| {
        if let Some(a) = c.as_primitive_opt::<Float64Type>() {
            a.values().iter().any(|v| v.is_infinite())
        } else if let Some(a) = c.as_primitive_opt::<Float32Type>() {
            a.values().iter().any(|v| v.is_infinite())
        } else {
            false
        }
    })
}

impl<R: BufRead> Batches for CsvBatches<R> {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>, ConvertError> {
        let batch = self.next_records()?;
        if let Some(batch) = &batch
            && !self.unknown.is_empty()
        {
            self.count_ignored(batch);
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

impl<R: BufRead> CsvBatches<R> {
    /// The next batch of records, every column read (see [`Batches::next_batch`]).
    fn next_records(&mut self) -> Result<Option<RecordBatch>, ConvertError> {
        self.line += newlines(&self.raw);
        self.raw.clear();
        self.spans.clear();
        self.scan.record_start = 0;
        match self.fill(self.batch_bytes, self.batch_rows) {
            Ok(()) => {}
            Err(Fill::Io(e)) => return Err(e.into()),
            // Malformed CSV fails the object under either policy; rows rejected before it
            // do not matter then, but under policy fail an error in an earlier record of
            // the batch comes first.
            Err(Fill::Malformed(_, e)) if self.rejects.rejects() => return Err(e),
            Err(Fill::Malformed(start, e)) => return Err(self.first_error(start).unwrap_or(e)),
        }
        if self.spans.records == 0 {
            return Ok(None);
        }
        if let Some(batch) = self.fast_batch() {
            return Ok(Some(batch));
        }
        // Under policy reject, a batch that the fast path declines and whose fields it
        // could read holds a bad record: sorting it with the fast path costs less than
        // decoding it whole with arrow-csv first, only to find that it fails.
        if self.rejects.rejects() && self.fields_describe_batch() {
            return self.sort_records().map(Some);
        }
        match self.decode_batch() {
            Ok(batch) => Ok(Some(batch)),
            Err(ConvertError::Parse { .. }) if self.rejects.rejects() => {
                self.sort_records().map(Some)
            }
            Err(e) => Err(e),
        }
    }
}

impl<R: BufRead> CsvBatches<R> {
    /// The records in `raw` decoded by arrow-csv and checked: the path of a batch that
    /// [`Self::fast_batch`] declines, which names the first bad record under policy fail.
    fn decode_batch(&mut self) -> Result<RecordBatch, ConvertError> {
        // Before arrow-csv builds strings: it checks UTF-8 on the concatenated fields only,
        // so `a\xDA,\x92b` passes as one character split across two fields and becomes two
        // strings of invalid UTF-8. Delimiters, quotes and terminators are ASCII, so whole
        // records of valid UTF-8 give fields of valid UTF-8.
        if std::str::from_utf8(&self.raw).is_err() {
            let fallback = ConvertError::parse(None, None, "invalid UTF-8");
            return Err(self.diagnosed(fallback));
        }
        // Room for one record more than the scan found, so that csv-core reads the line
        // terminators after the last one too (and a record the scan missed shows).
        let mut decoder = builder(&self.options, self.read_schema.clone())
            .with_batch_size(self.spans.records + 1)
            .build_decoder();
        let fed = decode(&mut decoder, &mut true, &self.raw).and_then(|taken| {
            decoder.decode(&[])?;
            Ok(taken)
        });
        let batch = match fed.and_then(|taken| Ok((taken, decoder.flush()?))) {
            Ok((taken, Some(batch)))
                if taken == self.raw.len() && batch.num_rows() == self.spans.records =>
            {
                batch
            }
            Ok(_) => {
                // The scan and csv-core disagree on the records: a bug, never a misreading.
                let message = "internal error: the CSV scan lost track of the records";
                return Err(ConvertError::parse(
                    Some(self.record_line(0)),
                    None,
                    message,
                ));
            }
            Err(e) => {
                let fallback = ConvertError::parse(None, None, arrow_message(e));
                return Err(self.diagnosed(fallback));
            }
        };
        let Some(batch) = self.read_exact(batch) else {
            let fallback = ConvertError::parse(None, None, "a value does not read exactly");
            return Err(self.diagnosed(fallback));
        };
        if self.may_overflow(&batch) {
            // An infinity may stand for an overflow, which only each record's check tells.
            if self.rejects.rejects() {
                return Err(ConvertError::parse(None, None, "a float may overflow"));
            }
            if let Some(e) = self.first_error(self.raw.len()) {
                return Err(e);
            }
        }
        let batch = self.fill_empty_strings(batch)?;
        if let Some((_, column)) = null_violation(&batch, &self.schema) {
            let name = self.schema.field(column).name();
            let fallback =
                ConvertError::parse(None, Some(name), "missing value in a non-nullable column");
            return Err(self.diagnosed(fallback));
        }
        Ok(batch)
    }

    /// The error of the batch: that of its first bad record under policy fail; under
    /// policy reject `fallback` (the caller sorts the records, finding each bad one).
    fn diagnosed(&self, fallback: ConvertError) -> ConvertError {
        if self.rejects.rejects() {
            return fallback;
        }
        self.first_error(self.raw.len()).unwrap_or(fallback)
    }

    /// The records in `raw` read straight from the fields the scan found, each value
    /// parsed once into its column: the path of every clean batch. Each value goes through
    /// the parser arrow-csv itself uses for its type (arrow-cast's for numbers, its
    /// `true` / `false`, [`value`] for the exact types), so it reads the same values by
    /// construction; the batch is declined (`None`) at anything that would fail — a wrong
    /// field count, a value that does not parse, a float that overflows, a NULL where none
    /// is allowed, invalid UTF-8 — leaving it to [`Self::decode_batch`], which accepts or
    /// refuses it with the same messages as ever (under policy reject, to
    /// [`Self::sort_records`] when the scan's fields describe the batch).
    fn fast_batch(&self) -> Option<RecordBatch> {
        if !self.fields_describe_batch() {
            return None;
        }
        let rows = self.spans.records;
        // Once for the whole batch: delimiters, quotes and terminators are ASCII, so every
        // field of valid UTF-8 records is valid UTF-8 (and `str::get` below checks it).
        let text = simdutf8::basic::from_utf8(&self.raw).ok()?;
        let batch = self.fast_records(0, rows, text);
        #[cfg(test)]
        tests::FAST_BATCHES.set(tests::FAST_BATCHES.get() + usize::from(batch.is_some()));
        batch
    }

    /// The dialect is one the fast path reads, and the scan's fields are the records'
    /// fields, record after record: [`Self::fast_records`] can read any of them.
    fn fields_describe_batch(&self) -> bool {
        #[cfg(test)]
        if self.arrow_only {
            return false;
        }
        self.plain_dialect
            && !self.spans.irregular
            && self.spans.fields.len() == self.spans.records * self.types.len()
    }

    /// [`Self::fast_batch`] of `rows` records from the `first`th, `text` being `raw`; the
    /// caller has checked that the scan's fields describe the batch.
    fn fast_records(&self, first: usize, rows: usize, text: &str) -> Option<RecordBatch> {
        let width = self.types.len();
        let fields = &self.spans.fields[first * width..(first + rows) * width];
        let mut rescued = Vec::new();
        let mut columns = Vec::with_capacity(width + 1);
        for c in 0..width {
            let fields = fields[c..].iter().step_by(width);
            columns.push(self.fast_column(c, fields, rows, text, &mut rescued)?);
        }
        self.batch_of(columns, rows, rescued)
    }

    /// The batch of `columns` (of `rows` rows), with the rescued column when a policy
    /// rescues: the `rescued` fields and the values of unknown columns, in the order of
    /// their rows and columns.
    fn batch_of(
        &self,
        mut columns: Vec<ArrayRef>,
        rows: usize,
        mut rescued: Vec<Rescued>,
    ) -> Option<RecordBatch> {
        if let Some(spelled) = self.spelled.as_ref().filter(|s| s.rescues) {
            if spelled.rescue_unknown {
                for &c in &self.unknown {
                    let values = columns[c].as_string_opt::<i32>()?;
                    let kept = values.iter().enumerate().filter_map(|(row, v)| {
                        let text = v.filter(|v| !v.is_empty())?.to_owned();
                        let why = "not in the schema".to_owned();
                        Some(Rescued {
                            row,
                            column: c,
                            text,
                            why,
                        })
                    });
                    rescued.extend(kept);
                }
            }
            // Found column by column: in row order now.
            rescued.sort_by_key(|r| (r.row, r.column));
            columns.push(Arc::new(rescued_column(rows, &rescued, &self.paths)?));
        }
        RecordBatch::try_new(self.decode_schema.clone(), columns).ok()
    }

    /// The text columns of `batch` (arrow-csv's split of the records) read as the fast path
    /// reads the scan's fields: under [`Spellings`], both paths read every column with
    /// [`Self::spelled_column`].
    fn read_text(&self, batch: &RecordBatch) -> Option<RecordBatch> {
        let mut rescued = Vec::new();
        let mut columns = Vec::with_capacity(batch.num_columns() + 1);
        for (c, column) in batch.columns().iter().enumerate() {
            let text = column.as_string_opt::<i32>()?;
            let texts = text.iter().map(|v| Some(v.map(Cow::Borrowed)));
            columns.push(
                self.spelled_column(c, texts, text.len(), &mut rescued)
                    .ok()?,
            );
        }
        self.batch_of(columns, batch.num_rows(), rescued)
    }

    /// Whether a float column of `batch` holds an infinity that may stand for an overflow
    /// (under [`Spellings`] a float that overflows does not read, and an infinity is spelled
    /// out).
    fn may_overflow(&self, batch: &RecordBatch) -> bool {
        self.spelled.is_none() && has_infinity(batch)
    }

    /// Counts the values of unknown columns in `batch` (the rows that land) under
    /// [`UnknownFields::Ignore`]: every field neither empty nor a null value.
    fn count_ignored(&mut self, batch: &RecordBatch) {
        if self.unknown_fields != UnknownFields::Ignore {
            return;
        }
        for &c in &self.unknown {
            let Some(values) = batch.column(c).as_string_opt::<i32>() else {
                continue;
            };
            let n = values.iter().flatten().filter(|v| !v.is_empty()).count();
            if n > 0 {
                self.ignored.add(&self.paths[c], n as u64);
            }
        }
    }

    /// Column `c` of the batch from its fields, or `None` to decline (see
    /// [`Self::fast_batch`]).
    fn fast_column<'a>(
        &self,
        c: usize,
        fields: impl Iterator<Item = &'a (u32, u32)>,
        rows: usize,
        raw: &'a str,
        rescued: &mut Vec<Rescued>,
    ) -> Option<ArrayRef> {
        let ty = self.types[c];
        let nullable = self.schema.field(c).is_nullable();
        let options = &self.options;
        // The text of each field (`None`: empty, a NULL), unescaped only where needed.
        let texts = fields.map(move |&(start, end)| {
            let (start, end, unescape) = Spans::unpack(start, end);
            let text = raw.get(start..end)?;
            if text.is_empty() {
                return Some(None);
            }
            if unescape {
                return Some(Some(Cow::Owned(unquote(text, options)?)));
            }
            Some(Some(Cow::Borrowed(text)))
        });
        if self.spelled.is_some() {
            return self.spelled_column(c, texts, rows, rescued).ok();
        }
        Some(match ty {
            ColumnType::String => {
                let keep = self.empty_strings == EmptyStrings::Empty;
                let mut builder = StringBuilder::with_capacity(rows, 0);
                for text in texts {
                    match text? {
                        Some(text) => builder.append_value(text),
                        None if keep => builder.append_value(""),
                        None if nullable => builder.append_null(),
                        None => return None,
                    }
                }
                Arc::new(builder.finish()) as ArrayRef
            }
            // arrow-csv's own parsers (arrow-cast's), so the values are the same by
            // construction; a float that overflows to infinity is left to the checks.
            ColumnType::Int64 => Arc::new(primitive::<Int64Type>(
                texts,
                nullable,
                rows,
                Int64Type::parse,
            )?),
            ColumnType::Int32 => Arc::new(primitive::<Int32Type>(
                texts,
                nullable,
                rows,
                Int32Type::parse,
            )?),
            ColumnType::Float64 => {
                Arc::new(primitive::<Float64Type>(texts, nullable, rows, |t| {
                    Float64Type::parse(t).filter(|v| !v.is_infinite() || value::spells_infinity(t))
                })?)
            }
            ColumnType::Float32 => {
                Arc::new(primitive::<Float32Type>(texts, nullable, rows, |t| {
                    Float32Type::parse(t).filter(|v| !v.is_infinite() || value::spells_infinity(t))
                })?)
            }
            ColumnType::Bool => {
                let mut builder = BooleanBuilder::with_capacity(rows);
                for text in texts {
                    match text? {
                        Some(t) if t.eq_ignore_ascii_case("true") => builder.append_value(true),
                        Some(t) if t.eq_ignore_ascii_case("false") => builder.append_value(false),
                        None if nullable => builder.append_null(),
                        _ => return None,
                    }
                }
                Arc::new(builder.finish())
            }
            ColumnType::Decimal { precision, scale } => Arc::new(
                primitive::<Decimal128Type>(texts, nullable, rows, |t| {
                    value::decimal(t, precision, scale.unsigned_abs()).ok()
                })?
                .with_precision_and_scale(precision, scale)
                .ok()?,
            ),
            ColumnType::Date => Arc::new(primitive::<Date32Type>(texts, nullable, rows, |t| {
                value::date(t).ok()
            })?),
            ColumnType::Timestamp => Arc::new(
                primitive::<TimestampMicrosecondType>(texts, nullable, rows, |t| {
                    value::timestamp(t).ok()
                })?
                .with_data_type(ty.to_arrow()),
            ),
        })
    }
}

impl<R> CsvBatches<R> {
    /// Column `c` of a batch read from the texts of its fields under [`Spellings`], on
    /// either path (`None`: a field that cannot be read as text; `Some(None)`: an empty
    /// field): a null value is NULL, any other field is read by the column's type and the
    /// source's spellings, and a value that does not read is rescued into `rescued` (its
    /// row counted from the first text) under [`BadValues::Rescue`] when the column is
    /// nullable. `Err` when the column cannot be built: `None` for a field that cannot be
    /// read, else the message of the first field that fails (a value that does not read, a
    /// NULL in a non-nullable column).
    fn spelled_column<'a>(
        &self,
        c: usize,
        texts: impl Iterator<Item = Option<Option<Cow<'a, str>>>>,
        rows: usize,
        rescued: &mut Vec<Rescued>,
    ) -> Result<ArrayRef, Option<String>> {
        let spelled = self.spelled.as_ref().ok_or(None)?;
        let ty = self.types[c];
        let nullable = self.schema.field(c).is_nullable();
        let fields = SpelledFields {
            spelled,
            column: c,
            nullable,
            empty_text: ty == ColumnType::String && spelled.empty_text,
            rescue: nullable && spelled.rescue_values,
        };
        let cannot = |t: &str| format!("cannot parse {} as {ty}", value::Quoted(t));
        Ok(match ty {
            ColumnType::String => {
                let mut builder = StringBuilder::with_capacity(rows, 0);
                fields.fill(texts, rescued, &mut builder)?;
                Arc::new(builder.finish()) as ArrayRef
            }
            ColumnType::Int64 => {
                Arc::new(fields.primitive::<Int64Type>(texts, rows, rescued, |t| {
                    Int64Type::parse(t).ok_or_else(|| cannot(t))
                })?)
            }
            ColumnType::Int32 => {
                Arc::new(fields.primitive::<Int32Type>(texts, rows, rescued, |t| {
                    Int32Type::parse(t).ok_or_else(|| cannot(t))
                })?)
            }
            ColumnType::Float64 => {
                Arc::new(fields.primitive::<Float64Type>(texts, rows, rescued, |t| {
                    spelled.float::<Float64Type>(t, ty, f64::is_infinite)
                })?)
            }
            ColumnType::Float32 => {
                Arc::new(fields.primitive::<Float32Type>(texts, rows, rescued, |t| {
                    spelled.float::<Float32Type>(t, ty, f32::is_infinite)
                })?)
            }
            ColumnType::Bool => {
                let mut column = Parsed {
                    builder: BooleanBuilder::with_capacity(rows),
                    read: |t: &str| spelled.bool(t),
                };
                fields.fill(texts, rescued, &mut column)?;
                Arc::new(column.builder.finish())
            }
            ColumnType::Decimal { precision, scale } => Arc::new(
                fields
                    .primitive::<Decimal128Type>(texts, rows, rescued, |t| spelled.decimal(t, ty))?
                    .with_precision_and_scale(precision, scale)
                    .map_err(|e| Some(arrow_message(e)))?,
            ),
            ColumnType::Date => {
                let time = &spelled.times[c];
                Arc::new(fields.primitive::<Date32Type>(texts, rows, rescued, |t| time.date(t))?)
            }
            ColumnType::Timestamp => {
                let time = &spelled.times[c];
                Arc::new(
                    fields
                        .primitive::<TimestampMicrosecondType>(texts, rows, rescued, |t| {
                            time.timestamp(t)
                        })?
                        .with_data_type(ty.to_arrow()),
                )
            }
        })
    }
}

/// A column of type `T` of `texts` (`None`: decline; `Some(None)`: an empty field, a NULL),
/// each value read by `read` (`None`: decline).
fn primitive<'a, T: ArrowPrimitiveType>(
    texts: impl Iterator<Item = Option<Option<Cow<'a, str>>>>,
    nullable: bool,
    rows: usize,
    read: impl Fn(&str) -> Option<T::Native>,
) -> Option<PrimitiveArray<T>> {
    let mut builder = PrimitiveBuilder::<T>::with_capacity(rows);
    for text in texts {
        match text? {
            Some(text) => builder.append_value(read(&text)?),
            None if nullable => builder.append_null(),
            None => return None,
        }
    }
    Some(builder.finish())
}

/// What the fields of a source spell beyond what arrow-csv reads (null values, booleans,
/// decimal commas, time formats), and what a value that does not read becomes. A decoder
/// with any of these reads every column with [`CsvBatches::spelled_column`] on both paths:
/// arrow-csv then only splits the records into text fields, so that the two read the same
/// values by construction.
#[derive(Debug)]
struct Spellings {
    /// Fields that are NULL in every column, compared whole after unquoting
    /// ([`super::CsvValues::null_values`]).
    nulls: Vec<String>,
    /// The first bytes of the non-empty `nulls`, a bit each: a field starting otherwise is
    /// no null value, found without comparing it (every field is checked).
    null_starts: [u64; 4],
    /// An empty field of a string column is "" (`empty_strings` says so, and "" is not a
    /// null value); of any other column it is NULL.
    empty_text: bool,
    /// Fields read as `true` in a bool column (`None`: `true` in any case).
    trues: Option<Vec<String>>,
    /// Fields read as `false` in a bool column (`None`: `false` in any case).
    falses: Option<Vec<String>>,
    /// Float and decimal fields have a comma for their decimal point.
    decimal_comma: bool,
    /// Each column's time format and zone.
    times: Vec<TimeReading>,
    /// A value of a nullable column that does not read is NULL and rescued
    /// ([`BadValues::Rescue`]).
    rescue_values: bool,
    /// The decoder gives the rescued column.
    rescues: bool,
    /// The values of unknown columns go to the rescued column ([`UnknownFields::Rescue`]).
    rescue_unknown: bool,
}

impl Spellings {
    /// The spellings of `spec`; `None` when it has arrow-csv's alone, no column has a time
    /// format or zone, and no policy rescues (the default, read as it always was).
    fn of(spec: &ConvertSpec) -> Option<Self> {
        let times: Vec<_> = spec
            .schema
            .fields()
            .iter()
            .map(|f| TimeReading::of(spec, f.name()))
            .collect();
        let values = &spec.csv_values;
        if values.is_default() && !spec.rescues() && times.iter().all(TimeReading::is_default) {
            return None;
        }
        let nulls = values.null_values.clone().unwrap_or_default();
        let mut null_starts = [0u64; 4];
        for &b in nulls.iter().filter_map(|n| n.as_bytes().first()) {
            null_starts[usize::from(b >> 6)] |= 1 << (b & 63);
        }
        Some(Self {
            null_starts,
            empty_text: spec.empty_strings == EmptyStrings::Empty
                && !nulls.iter().any(String::is_empty),
            nulls,
            trues: values.true_values.clone(),
            falses: values.false_values.clone(),
            decimal_comma: values.decimal_comma,
            times,
            rescue_values: spec.bad_values == BadValues::Rescue,
            rescues: spec.rescues(),
            rescue_unknown: spec.unknown_fields == UnknownFields::Rescue,
        })
    }

    /// Whether the (non-empty) text of a field is a null value.
    #[inline]
    fn is_null(&self, text: &str) -> bool {
        let Some(&b) = text.as_bytes().first() else {
            return false;
        };
        self.null_starts[usize::from(b >> 6)] & (1 << (b & 63)) != 0
            && self.nulls.iter().any(|n| n == text)
    }

    /// A bool field's value.
    #[inline]
    fn bool(&self, text: &str) -> Result<bool, String> {
        let spells = |listed: &Option<Vec<String>>, word: &str| match listed {
            Some(spellings) => spellings.iter().any(|s| s == text),
            None => text.eq_ignore_ascii_case(word),
        };
        if spells(&self.trues, "true") {
            Ok(true)
        } else if spells(&self.falses, "false") {
            Ok(false)
        } else {
            Err(format!("cannot parse {} as bool", value::Quoted(text)))
        }
    }

    /// What `read` gives for the text of a float or decimal field (of type `ty`) with a `.`
    /// for its decimal point: under a decimal comma, one comma becomes the point, and a `.`
    /// or a second comma (digits grouped) does not read.
    #[inline(always)]
    fn number<R>(
        &self,
        text: &str,
        ty: ColumnType,
        read: impl FnOnce(&str) -> Result<R, String>,
    ) -> Result<R, String> {
        if self.decimal_comma {
            Self::comma_number(text, ty, read)
        } else {
            read(text)
        }
    }

    /// [`Self::number`] under a decimal comma.
    fn comma_number<R>(
        text: &str,
        ty: ColumnType,
        read: impl FnOnce(&str) -> Result<R, String>,
    ) -> Result<R, String> {
        if text.contains('.') {
            return Err(format!(
                "cannot parse {} as {ty}: the decimal point is a comma (decimal_point)",
                value::Quoted(text)
            ));
        }
        match text.bytes().filter(|&b| b == b',').count() {
            0 => read(text),
            1 => read(&text.replacen(',', ".", 1)),
            _ => Err(format!(
                "cannot parse {} as {ty}: it has more than one decimal comma (digits may \
                 not be grouped)",
                value::Quoted(text)
            )),
        }
    }

    /// A float field's value, read by arrow-csv's own parser; a number too large for the
    /// type does not read (arrow-cast reads it as infinity).
    #[inline(always)]
    fn float<T: Parser>(
        &self,
        text: &str,
        ty: ColumnType,
        infinite: impl Fn(T::Native) -> bool,
    ) -> Result<T::Native, String> {
        self.number(text, ty, |number| match T::parse(number) {
            Some(v) if infinite(v) && !value::spells_infinity(number) => {
                Err(value::float_overflow(&value::Quoted(text).to_string(), ty))
            }
            Some(v) => Ok(v),
            None => Err(format!("cannot parse {} as {ty}", value::Quoted(text))),
        })
    }

    /// A decimal field's value, exactly (see [`value::decimal`]).
    #[inline(always)]
    fn decimal(&self, text: &str, ty: ColumnType) -> Result<i128, String> {
        let ColumnType::Decimal { precision, scale } = ty else {
            return Err(format!("cannot parse {} as {ty}", value::Quoted(text)));
        };
        self.number(text, ty, |number| {
            value::decimal(number, precision, scale.unsigned_abs())
                .map_err(|e| value::decimal_message(&value::Quoted(text).to_string(), ty, e))
        })
    }
}

/// The fields of one column read under [`Spellings`] (see [`CsvBatches::spelled_column`]).
struct SpelledFields<'s> {
    spelled: &'s Spellings,
    column: usize,
    nullable: bool,
    /// An empty field is "" (a string column under `empty_strings: "empty"`).
    empty_text: bool,
    /// A value that does not read is rescued (the column is nullable).
    rescue: bool,
}

impl SpelledFields<'_> {
    /// Fills `column` with the fields of `texts` in turn: a value for each text it reads,
    /// NULL for an empty field, a null value, or a value rescued after `column` refused it.
    /// `Err` at the first field that cannot be read (`None`), or the first that fails, with
    /// its message: a value `column` refuses (unless rescued), a NULL in a non-nullable
    /// column.
    fn fill<'a>(
        &self,
        texts: impl Iterator<Item = Option<Option<Cow<'a, str>>>>,
        rescued: &mut Vec<Rescued>,
        column: &mut impl TextColumn,
    ) -> Result<(), Option<String>> {
        for text in texts {
            let text = text.ok_or(None)?;
            // The null value the field is (`None`: it is empty).
            let null = match &text {
                None if self.empty_text => {
                    column.value("").map_err(Some)?;
                    continue;
                }
                None => None,
                Some(t) if self.spelled.is_null(t) => Some(t),
                Some(t) => match column.value(t) {
                    Ok(()) => continue,
                    Err(why) if self.rescue => {
                        // Each field before this one has given one value.
                        let (row, text) = (column.len(), t.to_string());
                        rescued.push(Rescued {
                            row,
                            column: self.column,
                            text,
                            why,
                        });
                        column.null();
                        continue;
                    }
                    Err(why) => return Err(Some(why)),
                },
            };
            if !self.nullable {
                return Err(Some(match null {
                    None => "empty value in a non-nullable column".to_owned(),
                    Some(t) => format!(
                        "null value {} (null_values) in a non-nullable column",
                        value::Quoted(t)
                    ),
                }));
            }
            column.null();
        }
        Ok(())
    }

    /// A column of type `T`, each value read by `read`.
    fn primitive<'a, T: ArrowPrimitiveType>(
        &self,
        texts: impl Iterator<Item = Option<Option<Cow<'a, str>>>>,
        rows: usize,
        rescued: &mut Vec<Rescued>,
        read: impl Fn(&str) -> Result<T::Native, String>,
    ) -> Result<PrimitiveArray<T>, Option<String>> {
        let mut column = Parsed {
            builder: PrimitiveBuilder::<T>::with_capacity(rows),
            read,
        };
        self.fill(texts, rescued, &mut column)?;
        Ok(column.builder.finish())
    }
}

/// A column being built from the texts of its fields (see [`SpelledFields::fill`]).
trait TextColumn {
    /// Appends the value `text` reads as; `Err`, appending nothing, if it does not read.
    fn value(&mut self, text: &str) -> Result<(), String>;
    /// Appends a NULL.
    fn null(&mut self);
    /// Values appended.
    fn len(&self) -> usize;
}

impl TextColumn for StringBuilder {
    #[inline(always)]
    fn value(&mut self, text: &str) -> Result<(), String> {
        self.append_value(text);
        Ok(())
    }

    #[inline(always)]
    fn null(&mut self) {
        self.append_null();
    }

    fn len(&self) -> usize {
        ArrayBuilder::len(self)
    }
}

/// A builder with the reading of its values from text.
struct Parsed<B, F> {
    builder: B,
    read: F,
}

impl<T: ArrowPrimitiveType, F: Fn(&str) -> Result<T::Native, String>> TextColumn
    for Parsed<PrimitiveBuilder<T>, F>
{
    #[inline(always)]
    fn value(&mut self, text: &str) -> Result<(), String> {
        self.builder.append_value((self.read)(text)?);
        Ok(())
    }

    #[inline(always)]
    fn null(&mut self) {
        self.builder.append_null();
    }

    fn len(&self) -> usize {
        self.builder.len()
    }
}

impl<F: Fn(&str) -> Result<bool, String>> TextColumn for Parsed<BooleanBuilder, F> {
    #[inline(always)]
    fn value(&mut self, text: &str) -> Result<(), String> {
        self.builder.append_value((self.read)(text)?);
        Ok(())
    }

    #[inline(always)]
    fn null(&mut self) {
        self.builder.append_null();
    }

    fn len(&self) -> usize {
        self.builder.len()
    }
}

/// A field kept in the rescued column: its row in the batch, its column, its text and why.
#[derive(Debug)]
struct Rescued {
    row: usize,
    column: usize,
    text: String,
    why: String,
}

/// The rescued column of a batch of `rows` rows: for each row, NULL when nothing of it is in
/// `rescued` (sorted by row), else `{"fields":{PATH:TEXT,…},"reasons":{PATH:WHY,…}}` with
/// its fields in order, each named by its column's path in `paths`. `None` if a field of
/// `rescued` is left out of order (or past the rows), rather than dropped.
fn rescued_column(rows: usize, rescued: &[Rescued], paths: &[String]) -> Option<StringArray> {
    let json = |s: &str| serde_json::Value::from(s).to_string();
    let mut builder = StringBuilder::with_capacity(rows, 0);
    let mut rest = rescued;
    for row in 0..rows {
        let n = rest.iter().take_while(|r| r.row == row).count();
        let (fields, more) = rest.split_at(n);
        rest = more;
        if fields.is_empty() {
            builder.append_null();
            continue;
        }
        let entries = |value: &dyn Fn(&Rescued) -> &str| {
            let entries: Vec<_> = fields
                .iter()
                .map(|r| format!("{}:{}", json(&paths[r.column]), json(value(r))))
                .collect();
            entries.join(",")
        };
        builder.append_value(format!(
            r#"{{"fields":{{{}}},"reasons":{{{}}}}}"#,
            entries(&|r| &r.text),
            entries(&|r| &r.why)
        ));
    }
    rest.is_empty().then(|| builder.finish())
}

/// A column's name spelled as a path (`a`, `["a.b"]`).
fn path_of(name: &str) -> String {
    FieldPath::new(vec![Step::Key(name.to_owned())])
        .map_or_else(|| name.to_owned(), |p| p.to_string())
}

/// The text of a quoted field with a doubled quote or an escape in it, as csv-core reads
/// it: the byte after an escape, or the second quote of a pair, kept literally (`None`:
/// not valid UTF-8 once unescaped, which only an escape before a byte of a multi-byte
/// character could cause).
fn unquote(text: &str, options: &CsvOptions) -> Option<String> {
    let bytes = text.as_bytes();
    let quote = options.quote;
    if options.escape.is_none() && quote.is_ascii() {
        // Only doubled quotes, each kept once (what `str::replace` of the pair does, from
        // `memchr` to `memchr`): no second UTF-8 check, since an ASCII byte never cuts a
        // character.
        let mut unquoted = String::with_capacity(text.len());
        let mut from = 0;
        while let Some(at) = memchr::memchr(quote, &bytes[from..]).map(|i| from + i) {
            unquoted.push_str(&text[from..=at]);
            from = at
                + if bytes.get(at + 1) == Some(&quote) {
                    2
                } else {
                    1
                };
        }
        unquoted.push_str(&text[from..]);
        return Some(unquoted);
    }
    let mut unquoted = Vec::with_capacity(bytes.len());
    let mut rest = bytes.iter();
    while let Some(&b) = rest.next() {
        if b == options.quote || Some(b) == options.escape {
            unquoted.extend(rest.next());
        } else {
            unquoted.push(b);
        }
    }
    String::from_utf8(unquoted).ok()
}

/// Where the scan is in the CSV structure: csv-core's states, less the ones it passes
/// through without reading a byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    /// Between records (line terminators here are blank lines, skipped).
    #[default]
    StartRecord,
    /// At the start of a field.
    StartField,
    /// In an unquoted field.
    Unquoted,
    /// In a quoted field.
    Quoted,
    /// After the escape character in a quoted field.
    Escaped,
    /// After a quote in a quoted field: its end, or the first of a doubled quote.
    QuoteEnd,
}

/// A scan of CSV bytes, across the chunks they arrive in.
#[derive(Debug, Clone, Copy, Default)]
struct Scan {
    state: State,
    /// The field (0-based) of the current record the scan is in.
    field: usize,
    /// Offset in `raw` of the first byte of the current record.
    record_start: usize,
    /// Offset in `raw` of the first byte of the current field's text (after its quote).
    field_start: usize,
    /// Whether the current field holds a doubled quote or an escape.
    unescape: bool,
}

/// A record of a batch being sorted under policy reject: its bytes in `raw` and the line
/// it starts on.
type Record = (std::ops::Range<usize>, u64);

/// What [`CsvBatches::sort_records`] has found of a batch so far.
struct Sorted<'t> {
    /// The batch's `raw` as text, when the scan's fields describe the batch: the fast path
    /// decodes the ranges from its fields.
    text: Option<&'t str>,
    /// Good ranges, decoded, in order.
    pieces: Vec<RecordBatch>,
    /// Bad records and their errors, in order.
    rejected: Vec<(ConvertError, std::ops::Range<usize>)>,
}

/// The fields of the records a scan read: where each one's text is in `raw`, so that
/// [`CsvBatches::fast_batch`] parses the values from there without splitting the records
/// again.
#[derive(Debug, Default)]
struct Spans {
    /// `(start, end)` in `raw` of each field's text (inside the quotes of a quoted field),
    /// record after record; `end` has [`Spans::UNESCAPE`] set when the text holds a doubled
    /// quote or an escape.
    fields: Vec<(u32, u32)>,
    /// Records ended.
    records: usize,
    /// Records after which the scan stops at the boundary.
    max_records: usize,
    /// Fields a record should have.
    width: usize,
    /// A record had another number of fields, or an offset does not fit in 31 bits:
    /// `fields` does not describe the batch.
    irregular: bool,
}

impl Spans {
    const UNESCAPE: u32 = 1 << 31;

    fn new(width: usize) -> Self {
        Self {
            width,
            max_records: usize::MAX,
            ..Self::default()
        }
    }

    fn clear(&mut self) {
        self.fields.clear();
        self.records = 0;
        self.irregular = false;
    }

    fn push(&mut self, start: usize, end: usize, unescape: bool) {
        match (u32::try_from(start), u32::try_from(end)) {
            (Ok(start), Ok(end)) if end < Self::UNESCAPE && !self.irregular => {
                let flag = if unescape { Self::UNESCAPE } else { 0 };
                self.fields.push((start, end | flag));
            }
            _ => self.irregular = true,
        }
    }

    fn end_record(&mut self, fields: usize) {
        self.records += 1;
        self.irregular |= fields != self.width;
    }

    /// `(start, end, unescape)` of a field of `fields`.
    fn unpack(start: u32, end: u32) -> (usize, usize, bool) {
        let text_end = end & !Self::UNESCAPE;
        (start as usize, text_end as usize, end != text_end)
    }
}

/// Where a scan of a chunk stopped.
enum Found {
    /// It read the whole chunk.
    End,
    /// It stopped after this many bytes, at a record boundary past the budget.
    Boundary(usize),
    /// The byte at this offset is malformed CSV, for this reason.
    Malformed(usize, &'static str),
    /// The record went past `max_record_bytes` at this offset.
    TooLong(usize),
}

impl Scan {
    /// Scans `bytes`, which follow `base` bytes of `raw`, noting its fields in `spans`,
    /// stopping at the first record boundary at or past `budget` bytes of `raw` or after
    /// `spans.max_records` records, at malformed CSV, or in a record longer than
    /// `max_record` bytes.
    fn run(
        &mut self,
        o: &CsvOptions,
        max_record: usize,
        bytes: &[u8],
        base: usize,
        budget: usize,
        spans: &mut Spans,
    ) -> Found {
        // Tests compare the block pass with the byte-by-byte scan alone.
        #[cfg(test)]
        let blocks = !tests::BYTEWISE.get();
        #[cfg(not(test))]
        let blocks = true;
        let terminator = |b: u8| b == b'\n' || b == b'\r';
        // The bytes that end an unquoted (a quoted) field or change its state; all others
        // are skipped in bulk, so that the state machine below runs only at field edges.
        let unquoted = [o.delimiter, b'\n', b'\r'];
        let quoted = [o.quote, o.escape.unwrap_or(o.quote), o.quote];
        // Blocks need the delimiter and the quote to be neither each other nor a line
        // terminator, and records of 64 bytes to be allowed.
        let blocks = blocks
            && max_record >= BLOCK
            && ![b'\n', b'\r', o.quote].contains(&o.delimiter)
            && !terminator(o.quote);
        let mut i = 0;
        while i < bytes.len() {
            if blocks
                && matches!(
                    self.state,
                    State::StartRecord | State::StartField | State::Unquoted
                )
                && let Some(step) = self.block(o, max_record, bytes, i, base, budget, spans)
            {
                #[cfg(test)]
                tests::BLOCKS.set(tests::BLOCKS.get() + 1);
                match step {
                    Ok(next) => {
                        i = next;
                        continue;
                    }
                    Err(found) => return found,
                }
            }
            let special = match self.state {
                State::Unquoted => Some(unquoted),
                State::Quoted => Some(quoted),
                _ => None,
            };
            if let Some(special) = special {
                // Up to the first byte that would make the record too long: the step
                // below reports it.
                let too_long = self
                    .record_start
                    .saturating_add(max_record)
                    .saturating_sub(base);
                i = skip_to(bytes, i, bytes.len().min(too_long), special);
                if i == bytes.len() {
                    break;
                }
            }
            let b = bytes[i];
            i += 1;
            let at = base + i - 1;
            if self.state == State::StartRecord {
                if terminator(b) {
                    continue;
                }
                self.start_record(at);
            }
            // The same order of tests as csv-core's NFA (quote, delimiter, terminator).
            let field_end = || at - usize::from(self.state == State::QuoteEnd);
            self.state = match self.state {
                State::StartField if b == o.quote => {
                    self.field_start = at + 1;
                    State::Quoted
                }
                State::StartField | State::Unquoted | State::QuoteEnd if b == o.delimiter => {
                    spans.push(self.field_start, field_end(), self.unescape);
                    self.field += 1;
                    self.field_start = at + 1;
                    self.unescape = false;
                    State::StartField
                }
                State::StartField | State::Unquoted | State::QuoteEnd if terminator(b) => {
                    spans.push(self.field_start, field_end(), self.unescape);
                    spans.end_record(self.field + 1);
                    State::StartRecord
                }
                State::StartField | State::Unquoted => State::Unquoted,
                State::Quoted if b == o.quote => State::QuoteEnd,
                State::Quoted if o.escape == Some(b) => {
                    self.unescape = true;
                    State::Escaped
                }
                State::Quoted | State::Escaped => State::Quoted,
                State::QuoteEnd if b == o.quote => {
                    self.unescape = true;
                    State::Quoted
                }
                State::QuoteEnd => {
                    return Found::Malformed(
                        i - 1,
                        "text after the closing quote of a quoted field",
                    );
                }
                State::StartRecord => unreachable!("left above"),
            };
            if self.state == State::StartRecord {
                if base + i >= budget || spans.records >= spans.max_records {
                    return Found::Boundary(i);
                }
            } else if base + i - self.record_start > max_record {
                return Found::TooLong(i);
            }
        }
        Found::End
    }
}

/// Bytes [`Scan::block`] reads at a time.
const BLOCK: usize = 64;

impl Scan {
    /// Reads the [`BLOCK`] bytes of `bytes` from `i` up to their first quote or carriage
    /// return, when the scan is outside quotes (between records, at the start of a field or
    /// in an unquoted field): there every delimiter ends a field and every line feed a
    /// record, found for the whole block at once, so the state machine of [`Self::run`]
    /// is left for the quoted fields alone. Does what `run` does byte by byte over the same
    /// bytes: `Some(Ok(next))`, the offset it stopped at, or `Some(Err(found))`, a boundary;
    /// `None` when it cannot read a byte (a quote or carriage return first, fewer than
    /// [`BLOCK`] bytes left, or a record that could pass `max_record` in the block).
    #[allow(clippy::too_many_arguments)]
    fn block(
        &mut self,
        o: &CsvOptions,
        max_record: usize,
        bytes: &[u8],
        i: usize,
        base: usize,
        budget: usize,
        spans: &mut Spans,
    ) -> Option<Result<usize, Found>> {
        let block: &[u8; BLOCK] = bytes.get(i..i + BLOCK)?.try_into().ok()?;
        let (separators, stops) = block_masks(block, o.delimiter, o.quote);
        let end = stops.trailing_zeros() as usize;
        if end == 0
            || (self.state != State::StartRecord && base + i + end - self.record_start > max_record)
        {
            return None;
        }
        let mut separators = if end == BLOCK {
            separators
        } else {
            separators & ((1 << end) - 1)
        };
        // The first byte not yet read.
        let mut from = i;
        while separators != 0 {
            let at = i + separators.trailing_zeros() as usize;
            separators &= separators - 1;
            let newline = bytes[at] == b'\n';
            if self.state == State::StartRecord {
                if newline && at == from {
                    from = at + 1; // a blank line
                    continue;
                }
                self.start_record(base + from);
            }
            spans.push(self.field_start, base + at, self.unescape);
            from = at + 1;
            if newline {
                spans.end_record(self.field + 1);
                self.state = State::StartRecord;
                if base + from >= budget || spans.records >= spans.max_records {
                    return Some(Err(Found::Boundary(from)));
                }
            } else {
                self.field += 1;
                self.field_start = base + from;
                self.unescape = false;
                self.state = State::StartField;
            }
        }
        if from < i + end {
            if self.state == State::StartRecord {
                self.start_record(base + from);
            }
            self.state = State::Unquoted;
        }
        Some(Ok(i + end))
    }

    /// A record starts at offset `at` of `raw`.
    fn start_record(&mut self, at: usize) {
        self.state = State::StartField;
        self.field = 0;
        self.record_start = at;
        self.field_start = at;
        self.unescape = false;
    }
}

/// Bit `k` set where byte `k` of `block` is the delimiter or a line feed, and where it is
/// the quote or a carriage return.
fn block_masks(block: &[u8; BLOCK], delimiter: u8, quote: u8) -> (u64, u64) {
    use wide::u8x16;
    let [delimiter, newline, quote, cr] = [delimiter, b'\n', quote, b'\r'].map(u8x16::splat);
    let (mut separators, mut stops) = (0, 0);
    for (k, lanes) in block.chunks_exact(16).enumerate() {
        let v = u8x16::new(lanes.try_into().expect("16 bytes"));
        let separator = v.simd_eq(delimiter) | v.simd_eq(newline);
        let stop = v.simd_eq(quote) | v.simd_eq(cr);
        separators |= u64::from(separator.to_bitmask()) << (16 * k);
        stops |= u64::from(stop.to_bitmask()) << (16 * k);
    }
    (separators, stops)
}

/// The index of the first of `special` in `bytes[from..end]`, or `end`: eight bytes at a
/// time (in the lowest flagged byte of each test a byte equal to the special one is zero,
/// so the lowest flag of all is a true match), then byte by byte.
fn skip_to(bytes: &[u8], from: usize, end: usize, special: [u8; 3]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut i = from;
    while i + 8 <= end {
        let Some(word) = bytes.get(i..i + 8).and_then(|w| w.try_into().ok()) else {
            break;
        };
        let word = u64::from_le_bytes(word);
        let found = special.iter().fold(0, |found, &b| {
            let x = word ^ (ONES * u64::from(b));
            found | (x.wrapping_sub(ONES) & !x & HIGH)
        });
        if found != 0 {
            return i + (found.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < end && !special.contains(&bytes[i]) {
        i += 1;
    }
    i
}

/// An arrow-csv reader builder for `options`, without header (the header is skipped
/// by [`CsvBatches::new`] so that its lines are counted).
fn builder(options: &CsvOptions, schema: SchemaRef) -> ReaderBuilder {
    let builder = ReaderBuilder::new(schema)
        .with_header(false)
        .with_delimiter(options.delimiter)
        .with_quote(options.quote);
    match options.escape {
        Some(escape) => builder.with_escape(escape),
        None => builder,
    }
}

/// Feeds `bytes` to `decoder` (empty: the end of the input). csv-core drops a UTF-8 byte
/// order mark from the start of the first bytes a reader is given, wherever they are in the
/// file: the first record after a header, or a record decoded alone. So the first bytes a
/// decoder is given (`fresh`) go in one byte first, and a byte order mark there stays data
/// (the file's own is dropped before, by [`super::input`]).
fn decode(decoder: &mut Decoder, fresh: &mut bool, bytes: &[u8]) -> Result<usize, ArrowError> {
    if !*fresh || bytes.len() < 2 {
        *fresh &= bytes.is_empty();
        return decoder.decode(bytes);
    }
    let first = decoder.decode(&bytes[..1])?;
    if first == 0 {
        return Ok(0);
    }
    *fresh = false;
    Ok(first + decoder.decode(&bytes[1..])?)
}

/// Feeds `bytes`, which end at a record boundary or at the end of the input, to a fresh
/// one-record decoder; returns how many bytes its record spans.
fn feed(decoder: &mut Decoder, bytes: &[u8]) -> Result<usize, ArrowError> {
    let span = decode(decoder, &mut true, bytes)?;
    if decoder.capacity() != 0 {
        decoder.decode(&[])?;
    }
    Ok(span)
}

fn newlines(bytes: &[u8]) -> u64 {
    // memchr's count is vectorised: every batch's bytes are counted (for line numbers),
    // and counting a byte at a time was ≈ 4% of a conversion's CPU.
    memchr::memchr_iter(b'\n', bytes).count() as u64
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::super::testutil::*;
    use super::super::{
        BadRows, ConvertError, ConvertStats, CsvColumns, CsvValues, InputFormat, convert,
    };
    use super::*;
    use crate::schema::ColumnSpec;

    thread_local! {
        /// Makes the decoders of this thread decode every batch with arrow-csv.
        pub(super) static ARROW_ONLY: Cell<bool> = const { Cell::new(false) };
        /// Batches this thread's decoders read from the scan's fields.
        pub(super) static FAST_BATCHES: Cell<usize> = const { Cell::new(0) };
        /// Batches sorted under policy reject with the fast path.
        pub(super) static FAST_SORTS: Cell<usize> = const { Cell::new(0) };
        /// Blocks [`Scan::block`] read on this thread.
        pub(super) static BLOCKS: Cell<usize> = const { Cell::new(0) };
        /// [`Scan::run`] reads byte by byte only, without [`Scan::block`].
        pub(super) static BYTEWISE: Cell<bool> = const { Cell::new(false) };
    }

    /// Clean files are read from the scan's fields, whatever the spelling of their values:
    /// nineteen-digit integers, signs, exponents, offsets, quoted numbers, doubled quotes.
    #[test]
    fn clean_values_of_every_spelling_are_read_from_the_fields() {
        let columns = r#"[
            {"name": "i64", "type": "int64"}, {"name": "i32", "type": "int32"},
            {"name": "f64", "type": "float64"}, {"name": "dec", "type": "decimal(18,4)"},
            {"name": "s", "type": "string"}, {"name": "b", "type": "bool"},
            {"name": "t", "type": "timestamp"}]"#;
        let input = "i64,i32,f64,dec,s,b,t\n\
            9223372036854775807,2147483647,1e300,-6757177772681.3941,\"say \"\"hi\"\"\",TRUE,2024-01-01T00:58:15+05:45\n\
            -9223372036854775808,+7,\"-0.5\",12,,false,2024-01-01 00:00:01.264581\n\
            2732332213037811979,,NaN,,x,,\n";
        FAST_BATCHES.set(0);
        let (stats, parquet) = run(input, &csv_spec(columns));
        assert_eq!((stats.rows, FAST_BATCHES.get()), (3, 1));
        assert_eq!(parquet.rows[2][0], "2732332213037811979");
        assert_eq!(parquet.rows[1][1], "7");
    }

    /// `input` converted with `spec`, every batch read by arrow-csv when `arrow_only`: the
    /// rows, the sums, rejects, ignored and rescued values as text, and the Parquet file; or
    /// the error as text.
    fn converted(
        input: &[u8],
        spec: &ConvertSpec,
        arrow_only: bool,
    ) -> Result<(u64, String, Vec<u8>), String> {
        ARROW_ONLY.set(arrow_only);
        let mut out = Vec::new();
        let result = convert(input, spec, &mut out);
        ARROW_ONLY.set(false);
        result
            .map(|stats| {
                let text = format!(
                    "{:?} {:?} {:?} rescued {}",
                    stats.sums, stats.rejects, stats.ignored, stats.rescued_rows
                );
                (stats.rows, text, out)
            })
            .map_err(|e| e.to_string())
    }

    /// Reads every batch from the scan's fields where it can and with arrow-csv where it
    /// cannot: on random files of every column type, with every spelling the two might
    /// read differently, under the source's spellings (null values, booleans, decimal
    /// commas, time formats) or without, rescuing bad values or not, columns matched by
    /// position or by name (two of them then unknown, ignored or rescued), both give
    /// byte-identical Parquet, the same sums, rejects, ignored and rescued values, or the
    /// same error.
    #[test]
    fn fields_read_once_agree_with_arrow_csv() {
        const VALUES: [&[&str]; 9] = [
            &[
                "0",
                "-5",
                "007",
                "+5",
                "123456789012345678",
                "9223372036854775807",
                "-9223372036854775808",
                "92233720368547758070",
                "1.0",
                " 1",
                "x",
                "",
                "NA",
                "\\N",
            ],
            &[
                "1",
                "-2147483648",
                "2147483647",
                "2147483648",
                "-0",
                "1e3",
                "",
                "NA",
            ],
            &[
                "1.50",
                "-0.01",
                "1.005",
                "1e2",
                "12345678901.23",
                "0",
                ".5",
                "abc",
                "",
                "1,5",
                "-0,25",
                "1,000,5",
                "NA",
            ],
            &[
                "1.5",
                "-0.0",
                "1e5",
                "1E-5",
                "1.",
                ".5",
                "inf",
                "NaN",
                "1e400",
                "0.1",
                "123456789012345678901234567890",
                "-infinity",
                "2.5e-310",
                "",
                "1,5",
                "1,5e400",
                "\\N",
            ],
            &["1.5", "3.4028236e38", "1e-46", "0.1", "16777217", "", "2,5"],
            &[
                "plain",
                "with, comma",
                "say \"hi\"",
                "two\nlines",
                "é ü 😀",
                " padded ",
                "",
                "NA",
                "\\N",
                "NA ",
            ],
            &["true", "FALSE", "True", "yes", "1", "", "Y", "N", "0", "NA"],
            &[
                "2024-01-02",
                "2024-02-30",
                "2024-1-2",
                "",
                "02.01.2024",
                "NA",
            ],
            &[
                "2024-01-02T03:04:05.123Z",
                "2024-01-02 03:04:05",
                "2024-01-02T03:04:05+01:00",
                "2024-01-02T03:04:05.1234567Z",
                "x",
                "",
                "02/01/2024 03:04",
                "31/02/2024 03:04",
                "NA",
            ],
        ];
        let columns = r#"[
            {"name": "i64", "type": "int64"}, {"name": "i32", "type": "int32", "nullable": false},
            {"name": "dec", "type": "decimal(12,2)"}, {"name": "f64", "type": "float64"},
            {"name": "f32", "type": "float32"}, {"name": "s", "type": "string"},
            {"name": "b", "type": "bool"}, {"name": "d", "type": "date"},
            {"name": "t", "type": "timestamp"}]"#;
        let formats = r#"[
            {"name": "i64", "type": "int64"}, {"name": "i32", "type": "int32", "nullable": false},
            {"name": "dec", "type": "decimal(12,2)"}, {"name": "f64", "type": "float64"},
            {"name": "f32", "type": "float32"}, {"name": "s", "type": "string"},
            {"name": "b", "type": "bool"}, {"name": "d", "type": "date", "format": "%d.%m.%Y"},
            {"name": "t", "type": "timestamp", "format": "%d/%m/%Y %H:%M",
             "timezone": "America/New_York"}]"#;
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15_u64);
        let (mut landed, mut failed, mut rescued, mut ignored) = (0, 0, 0, 0);
        FAST_BATCHES.set(0);
        for round in 0..3000 {
            let rows = 1 + next() % 12;
            let mut input = String::from("i64,i32,dec,f64,f32,s,b,d,t\n");
            for _ in 0..rows {
                let width = if next().is_multiple_of(50) { 8 } else { 9 };
                let fields: Vec<String> = VALUES[..width]
                    .iter()
                    .map(|values| {
                        // Mostly the first (clean) values, so that many files are clean.
                        let pick = if next().is_multiple_of(4) {
                            next() as usize % values.len()
                        } else {
                            next() as usize % 2
                        };
                        let value = values[pick];
                        if next().is_multiple_of(5) || value.contains([',', '"', '\n']) {
                            format!("\"{}\"", value.replace('"', "\"\""))
                        } else {
                            value.to_owned()
                        }
                    })
                    .collect();
                input.push_str(&fields.join(","));
                input.push_str(if next().is_multiple_of(3) {
                    "\r\n"
                } else {
                    "\n"
                });
            }
            // One round in three plain; the others with some of the spellings.
            let mut spec = if round % 3 == 0 {
                csv_spec(columns)
            } else {
                let pick = next();
                let spelled_columns = if pick.is_multiple_of(3) {
                    formats
                } else {
                    columns
                };
                let mut spec = spelled(spelled_columns, CsvValues::default());
                let values = &mut spec.csv_values;
                if pick & 2 != 0 {
                    values.null_values = listed(&["NA", "\\N"][..1 + (pick >> 8) as usize % 2]);
                    if pick & 4 != 0 {
                        values.null_values.as_mut().unwrap().push(String::new());
                    }
                }
                if pick & 8 != 0 {
                    values.true_values = listed(&["Y", "1", "true"]);
                    values.false_values = listed(&["N", "0"]);
                }
                values.decimal_comma = pick & 16 != 0;
                if pick & 32 != 0 {
                    spec.bad_values = BadValues::Rescue;
                }
                if pick & 64 != 0 {
                    // By the header's names, "s" and "b" unknown to the schema.
                    let known: Vec<_> = (spec.columns.iter())
                        .filter(|c| c.name != "s" && c.name != "b")
                        .cloned()
                        .collect();
                    let mut by_name = ConvertSpec::with_columns(spec.format, &known);
                    by_name.csv_columns = CsvColumns::ByName;
                    by_name.csv_values = spec.csv_values;
                    by_name.bad_values = spec.bad_values;
                    if pick & 128 != 0 {
                        by_name.unknown_fields = UnknownFields::Rescue;
                    }
                    spec = by_name;
                }
                spec
            };
            spec.batch_rows = 1 + (next() % 8) as usize;
            spec.batch_bytes = 1 + (next() % 400) as usize;
            spec.sum_columns = ["i64", "i32", "dec", "f64"].map(String::from).into();
            if round % 2 == 0 {
                spec.bad_rows = BadRows::Reject { max: 100 };
            }
            if next().is_multiple_of(3) {
                spec.empty_strings = EmptyStrings::Empty;
            }
            let fast = converted(input.as_bytes(), &spec, false);
            let arrow = converted(input.as_bytes(), &spec, true);
            assert!(
                fast == arrow,
                "{input:?} {spec:?}: {:?} against {:?}",
                fast.map(|f| f.1),
                arrow.map(|a| a.1)
            );
            match fast {
                Ok(f) => {
                    landed += 1;
                    rescued += usize::from(!f.1.ends_with(" rescued 0"));
                    ignored += usize::from(!f.1.contains("Ignored { values: 0,"));
                }
                Err(_) => failed += 1,
            }
        }
        assert!(
            landed > 1500 && failed > 1000 && rescued > 500 && ignored > 100,
            "{landed} converted ({rescued} with values rescued, {ignored} with values \
             ignored), {failed} failed"
        );
        assert!(
            FAST_BATCHES.get() > 2000,
            "{} fast batches",
            FAST_BATCHES.get()
        );
    }

    /// Policy reject on batches of hundreds of records, from none to many bad, among other
    /// spellings of good values: sorted with the fast path they give the same Parquet and
    /// the same rejects as sorted by arrow-csv alone.
    #[test]
    fn bad_records_sorted_with_the_fast_path_agree_with_arrow_csv() {
        let columns = r#"[
            {"name": "id", "type": "int64", "nullable": false}, {"name": "s", "type": "string"},
            {"name": "dec", "type": "decimal(12,2)"}, {"name": "f", "type": "float64"},
            {"name": "d", "type": "date"}]"#;
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        FAST_SORTS.set(0);
        for (round, bad_every) in [(0, 3000), (1, 300), (2, 40), (3, 7)] {
            let mut input = String::from("id,s,dec,f,d\n");
            let mut bad = 0;
            for i in 0..3000u64 {
                // Now and then another spelling (a sign, quotes, an exponent) or an empty
                // (NULL) field.
                let odd = |roll: u64, every: u64, usual: String, other: &str| {
                    if roll.is_multiple_of(every) {
                        other.to_owned()
                    } else {
                        usual
                    }
                };
                let mut id = odd(next(), 50, i.to_string(), "+7");
                let mut d = odd(next(), 60, format!("2024-01-{:02}", 1 + i % 28), "");
                if next().is_multiple_of(bad_every) {
                    bad += 1;
                    match next() % 3 {
                        0 => id = format!("{i}x"),
                        1 => d = "2024-02-30".into(),
                        _ => id = String::new(),
                    }
                }
                let dec = odd(
                    next(),
                    70,
                    format!("{}.{:02}", i % 997, i % 100),
                    "\"12.5\"",
                );
                let f = odd(next(), 80, format!("{}.25", i % 13), "1e3");
                input += &format!("{id},w{i} \"q\",{dec},{f},{d}\n");
            }
            let mut spec = csv_spec(columns);
            spec.batch_rows = 700 + 300 * round;
            spec.sum_columns = ["id", "dec", "f"].map(String::from).into();
            spec.bad_rows = BadRows::Reject { max: 10_000 };
            let fast = converted(input.as_bytes(), &spec, false).unwrap();
            let arrow = converted(input.as_bytes(), &spec, true).unwrap();
            assert_eq!(fast.0, 3000 - bad, "round {round}");
            assert_eq!((&fast.1, fast.0), (&arrow.1, arrow.0), "round {round}");
            assert!(fast.2 == arrow.2, "round {round}: the files differ");
        }
        assert!(
            FAST_SORTS.get() >= 4,
            "{} batches sorted fast",
            FAST_SORTS.get()
        );
    }

    const ABC: &str = r#"[{"name":"a","type":"int32"},{"name":"b","type":"string"},{"name":"c","type":"decimal(12,2)"}]"#;

    fn with_options(options: CsvOptions) -> ConvertSpec {
        let mut spec = csv_spec(ABC);
        spec.format = InputFormat::Csv(options);
        spec
    }

    #[test]
    fn other_delimiters_quotes_and_escapes() {
        let expected = text_rows(&["1|x;y, \"z\"|1.50", "∅|two\nlines|∅"]);
        for (delimiter, input) in [
            (b';', "a;b;c\n1;\"x;y, \"\"z\"\"\";1.50\n;\"two\nlines\";\n"),
            (b'|', "a|b|c\n1|\"x;y, \"\"z\"\"\"|1.50\n|\"two\nlines\"|\n"),
        ] {
            let options = CsvOptions {
                delimiter,
                ..CsvOptions::default()
            };
            assert_eq!(run(input, &with_options(options)).1.rows, expected);
        }
        let options = CsvOptions {
            quote: b'\'',
            escape: Some(b'\\'),
            header: false,
            ..CsvOptions::default()
        };
        let (_, parquet) = run(
            "1,'x;y, \\\"z\\\"',1.50\n,'two\nlines',\n",
            &with_options(options),
        );
        assert_eq!(parquet.rows, expected);
    }

    #[test]
    fn crlf_and_a_missing_final_newline() {
        let (_, parquet) = run("a,b,c\r\n1,x,1\r\n2,y,2", &csv_spec(ABC));
        assert_eq!(parquet.rows, text_rows(&["1|x|1.00", "2|y|2.00"]));
    }

    #[test]
    fn wrong_field_counts_name_their_line() {
        let spec = csv_spec(ABC);
        let few = parse_error("a,b,c\n1,x,1\n2,y,2\n3,z\n", &spec);
        assert_eq!(few, "line 4: expected 3 fields, got 2");
        let many = parse_error("a,b,c\n1,x,1\n2,y,2\n3,z,3,4\n", &spec);
        assert_eq!(many, "line 4: expected 3 fields, got more than 3");
        let header = parse_error("a,b\n1,x,1\n", &spec);
        assert_eq!(header, "line 1: header: expected 3 fields, got 2");
    }

    #[test]
    fn bad_values_name_their_line_column_and_value() {
        let spec = csv_spec(ABC);
        assert_eq!(
            parse_error("a,b,c\n1,x,1\nabc,y,2\n", &spec),
            r#"line 3: column "a": cannot parse "abc" as int32"#
        );
        assert_eq!(
            parse_error("a,b,c\n1,x,1\n2,y,2\n3,z,3\n4,w,abc\n", &spec),
            r#"line 5: column "c": cannot parse "abc" as decimal(12,2)"#
        );
        assert_eq!(
            parse_error("a,b,c\n1,x,1\n1,x,12345678901.5\n", &spec),
            r#"line 3: column "c": cannot parse "12345678901.5" as decimal(12,2): it has more than 10 digits before the point"#,
            "more than 12 digits"
        );
        assert_eq!(
            parse_error("a,b,c\n1,x,1.005\n", &spec),
            r#"line 2: column "c": cannot parse "1.005" as decimal(12,2): it has more than 2 digits after the point and would be rounded"#,
            "arrow-cast would round it to 1.01"
        );
        assert_eq!(
            parse_error("a,b,c\n1,x,1\n1,x,-1.004\n", &spec),
            r#"line 3: column "c": cannot parse "-1.004" as decimal(12,2): it has more than 2 digits after the point and would be rounded"#,
        );
        let (_, parquet) = run("a,b,c\n1,x,1.500\n1,x,-1e-2\n1,x,\"2.5E1\"\n", &spec);
        assert_eq!(
            parquet.rows,
            text_rows(&["1|x|1.50", "1|x|-0.01", "1|x|25.00"]),
            "exact values in any spelling"
        );
        let dated = csv_spec(r#"[{"name":"d","type":"date"},{"name":"t","type":"timestamp"}]"#);
        assert_eq!(
            parse_error(
                "d,t\n2024-01-02,2024-01-02T03:04:05Z\n2024-02-30,2024-01-02T03:04:05Z\n",
                &dated
            ),
            r#"line 3: column "d": cannot parse "2024-02-30" as date"#
        );
        assert_eq!(
            parse_error("d,t\n2024-01-02,yesterday\n", &dated),
            r#"line 2: column "t": cannot parse "yesterday" as timestamp"#
        );
    }

    #[test]
    fn line_numbers_are_physical_lines_across_batches() {
        let mut spec = csv_spec(ABC);
        spec.batch_rows = 2;
        // blank lines, quoted newlines and CRLF all move the line number
        let input = "a,b,c\r\n\r\n1,\"x\ny\",1\r\n2,y,2\n\n3,\"p\nq\nr\",3\n4,z,4\n5,z,five\n";
        assert_eq!(
            parse_error(input, &spec),
            r#"line 11: column "c": cannot parse "five" as decimal(12,2)"#
        );
        let input = "1,x,1\n2,y,2\n3,z,3\n\n4,w\n";
        spec.format = InputFormat::Csv(CsvOptions {
            header: false,
            ..CsvOptions::default()
        });
        assert_eq!(
            parse_error(input, &spec),
            "line 5: expected 3 fields, got 2"
        );
    }

    #[test]
    fn invalid_utf8_names_its_column() {
        let err = parse_error(b"a,b,c\n1,x,1\n2,\xffy,2\n", &csv_spec(ABC));
        assert_eq!(err, r#"line 3: column "b": invalid UTF-8"#);
    }

    /// Found by the `csv_vs_csv_core` fuzz target: arrow-csv checks UTF-8 on the fields of
    /// a batch joined together, so a character split by a delimiter or a line break passes,
    /// and both fields become strings of invalid UTF-8 (written to Parquet as such).
    #[test]
    fn a_character_split_across_fields_is_invalid_utf8() {
        let two = r#"[{"name":"c0","type":"string"},{"name":"c1","type":"string"}]"#;
        let mut spec = csv_spec(two);
        spec.format = InputFormat::Csv(CsvOptions {
            header: false,
            ..CsvOptions::default()
        });
        for batch_rows in [1, 2, 8192] {
            spec.batch_rows = batch_rows;
            assert_eq!(
                parse_error(b"a\xda,\x92b\n", &spec),
                r#"line 1: column "c0": invalid UTF-8"#
            );
            assert_eq!(
                parse_error(b"x,y\na+,\xda\n\x92\"c2P\"d\",P", &spec),
                r#"line 2: column "c1": invalid UTF-8"#,
                "the fuzz target's input"
            );
            assert_eq!(
                parse_error(b"x,y\n\"\n\xe4\xbd\",\xa0\n", &spec),
                r#"line 2: column "c0": invalid UTF-8"#,
                "split by a quote"
            );
            assert_eq!(
                parse_error(b"\r\xdc,\n,\x82z", &spec),
                r#"line 1: column "c0": invalid UTF-8"#,
                "split by a line break (the fuzz target's second input)"
            );
        }
        let (_, parquet) = run("你,好\n\"😊\n\",é\n", &spec);
        assert_eq!(parquet.rows, text_rows(&["你|好", "😊\n|é"]));
    }

    /// Found by the `csv` fuzz target: csv-core drops a byte order mark from the start of
    /// the first bytes each reader sees, here the first record after the header. A record
    /// that was only a byte order mark vanished (no field count error), and with small
    /// batches the converter took the missing record for the end of the input and
    /// dropped the rest of the file.
    #[test]
    fn a_byte_order_mark_after_the_start_of_the_file_is_data() {
        let fuzzed = b"in,024-01-02T20:00-05:00\x05z\"\x81\x01\x00\x00,3\n\xef\xbb\xbf\n4,\"two\n";
        let mut spec = csv_spec(ABC);
        for (batch_rows, batch_bytes) in [(8, 1), (8192, 8 << 20)] {
            (spec.batch_rows, spec.batch_bytes) = (batch_rows, batch_bytes);
            assert_eq!(
                parse_error(fuzzed, &spec),
                "line 2: expected 3 fields, got 1",
                "{batch_rows} rows, {batch_bytes} bytes"
            );
            assert_eq!(
                parse_error("a,b,c\n\u{feff}\n1,x,1\n", &spec),
                "line 2: expected 3 fields, got 1"
            );
            let (_, parquet) = run("a,b,c\n1,\u{feff}x,1\n", &spec);
            assert_eq!(parquet.rows, text_rows(&["1|\u{feff}x|1.00"]));
            assert_eq!(
                parse_error("a,b,c\n\u{feff}1,x,1\n", &spec),
                r#"line 2: column "a": cannot parse "\ufeff1" as int32"#,
                "the first record after the header keeps its byte order mark"
            );
            assert_eq!(
                parse_error("\u{feff}\u{feff}a,b\n1,x,1\n", &spec),
                "line 1: header: expected 3 fields, got 2",
                "only the file's first byte order mark is dropped"
            );
        }
    }

    #[test]
    fn empty_fields_and_nullability() {
        let columns = r#"[{"name":"a","type":"int32","nullable":false},{"name":"b","type":"string","nullable":false},{"name":"c","type":"string"}]"#;
        let mut spec = csv_spec(columns);
        let input = "a,b,c\n1,x,\n2,,\"\"\n";
        assert_eq!(
            parse_error(input, &spec),
            r#"line 3: column "b": empty value in a non-nullable column"#
        );
        assert_eq!(
            parse_error("a,b,c\n1,x,y\n,x,y\n", &spec),
            r#"line 3: column "a": empty value in a non-nullable column"#
        );

        spec.empty_strings = EmptyStrings::Empty;
        let (_, parquet) = run(input, &spec);
        assert_eq!(parquet.rows, text_rows(&["1|x|", "2||"]));
        assert_eq!(
            parse_error("a,b,c\n1,x,y\n,x,y\n", &spec),
            r#"line 3: column "a": empty value in a non-nullable column"#,
            "non-string columns are NULL when empty whatever the setting"
        );

        let (_, parquet) = run("a,b,c\n1,x,\n", &csv_spec(ABC));
        assert_eq!(parquet.rows, text_rows(&["1|x|∅"]));
        let mut spec = csv_spec(ABC);
        spec.empty_strings = EmptyStrings::Empty;
        assert_eq!(run("a,b,c\n,,\n", &spec).1.rows, text_rows(&["∅||∅"]));
    }

    /// A spec for default CSV with `columns` (JSON column specs, their formats and zones
    /// kept) and `values`.
    fn spelled(columns: &str, values: CsvValues) -> ConvertSpec {
        let columns: Vec<ColumnSpec> = serde_json::from_str(columns).unwrap();
        let mut spec = ConvertSpec::with_columns(InputFormat::Csv(CsvOptions::default()), &columns);
        spec.csv_values = values;
        spec
    }

    fn listed(spellings: &[&str]) -> Option<Vec<String>> {
        Some(spellings.iter().map(|s| s.to_string()).collect())
    }

    /// [`run`] with and without the fast path, which must agree; the first.
    fn run_both(input: &str, spec: &ConvertSpec) -> (ConvertStats, Parquet) {
        let fast = run(input, spec);
        ARROW_ONLY.set(true);
        let arrow = run(input, spec);
        ARROW_ONLY.set(false);
        assert_eq!(fast.1.rows, arrow.1.rows, "{input:?}");
        assert_eq!(fast.0, arrow.0, "{input:?}");
        fast
    }

    /// [`parse_error`] with and without the fast path, which must agree.
    fn error_both(input: &str, spec: &ConvertSpec) -> String {
        let fast = parse_error(input, spec);
        ARROW_ONLY.set(true);
        let arrow = parse_error(input, spec);
        ARROW_ONLY.set(false);
        assert_eq!(fast, arrow, "{input:?}");
        fast
    }

    const SPELLED: &str = r#"[{"name":"i","type":"int64"},{"name":"s","type":"string"},
        {"name":"b","type":"bool"},{"name":"f","type":"float64"},
        {"name":"d","type":"decimal(12,2)"},{"name":"t","type":"timestamp"}]"#;

    #[test]
    fn null_values_are_null_in_every_column_strings_too() {
        let nulls = CsvValues {
            null_values: listed(&["NA", "\\N", "NULL"]),
            ..CsvValues::default()
        };
        let mut spec = spelled(SPELLED, nulls);
        let input = "i,s,b,f,d,t\n\
            1,NA,true,1.5,\"NA\",\\N\n\
            NULL,x,NA,NA,2,2024-01-02T03:04:05Z\n\
            ,,,,,\n\
            3,na,FALSE,,,\n\
            4,\"NA \",false,-0.5,0.5,\n";
        FAST_BATCHES.set(0);
        let (stats, parquet) = run_both(input, &spec);
        assert_eq!(
            FAST_BATCHES.get(),
            1,
            "a clean batch is read from the fields"
        );
        assert_eq!(stats.rows, 5);
        let rows = [
            "1|∅|true|1.5|∅|∅",
            "∅|x|∅|∅|2.00|2024-01-02T03:04:05Z",
            "∅|∅|∅|∅|∅|∅",
            "3|na|false|∅|∅|∅",
            "4|NA |false|-0.5|0.50|∅",
        ];
        assert_eq!(
            parquet.rows,
            text_rows(&rows),
            "whole, case-sensitive, quoted or not"
        );

        // An empty string field follows empty_strings unless "" is a null value.
        spec.empty_strings = EmptyStrings::Empty;
        let (_, parquet) = run_both("i,s,b,f,d,t\n,,,,,\n5,NA,,,,\n", &spec);
        assert_eq!(parquet.rows, text_rows(&["∅||∅|∅|∅|∅", "5|∅|∅|∅|∅|∅"]));
        spec.csv_values.null_values = listed(&["NA", ""]);
        let (_, parquet) = run_both("i,s,b,f,d,t\n,,,,,\n6,\"\",,,,\n", &spec);
        assert_eq!(parquet.rows, text_rows(&["∅|∅|∅|∅|∅|∅", "6|∅|∅|∅|∅|∅"]));

        // None listed: only the spellings of the type.
        spec.csv_values.null_values = Some(Vec::new());
        assert_eq!(
            error_both("i,s,b,f,d,t\n1,x,,NA,,\n", &spec),
            r#"line 2: column "f": cannot parse "NA" as float64"#
        );
    }

    #[test]
    fn a_null_value_in_a_required_column_fails_or_rejects_its_row() {
        let columns = r#"[{"name":"id","type":"int64","nullable":false},
            {"name":"s","type":"string","nullable":false}]"#;
        let nulls = CsvValues {
            null_values: listed(&["NA", "-"]),
            ..CsvValues::default()
        };
        let mut spec = spelled(columns, nulls);
        spec.empty_strings = EmptyStrings::Empty;
        assert_eq!(
            error_both("id,s\n1,x\nNA,y\n", &spec),
            r#"line 3: column "id": null value "NA" (null_values) in a non-nullable column"#
        );
        assert_eq!(
            error_both("id,s\n1,\n2,\"-\"\n", &spec),
            r#"line 3: column "s": null value "-" (null_values) in a non-nullable column"#,
            "an empty string is a value, a null value is not"
        );
        spec.bad_rows = BadRows::Reject { max: 10 };
        let (stats, parquet) = run_both("id,s\n1,x\nNA,y\n3,-\n4,z\n", &spec);
        assert_eq!(parquet.rows, text_rows(&["1|x", "4|z"]));
        let rejected: Vec<_> = stats.rejects.iter().map(|r| r.error.as_str()).collect();
        assert_eq!(
            rejected,
            [
                r#"line 3: column "id": null value "NA" (null_values) in a non-nullable column"#,
                r#"line 4: column "s": null value "-" (null_values) in a non-nullable column"#
            ]
        );
    }

    #[test]
    fn booleans_in_the_sources_spellings() {
        let columns = r#"[{"name":"b","type":"bool"},{"name":"c","type":"bool"}]"#;
        assert_eq!(
            error_both("b,c\ntrue,1\n", &csv_spec(columns)),
            r#"line 2: column "c": cannot parse "1" as bool"#,
            "by default only true and false, in any case"
        );
        let spellings = CsvValues {
            true_values: listed(&["Y", "1"]),
            false_values: listed(&["N", "0"]),
            ..CsvValues::default()
        };
        let spec = spelled(columns, spellings);
        let (_, parquet) = run_both("b,c\nY,0\n1,N\n\"N\",\n", &spec);
        assert_eq!(
            parquet.rows,
            text_rows(&["true|false", "true|false", "false|∅"])
        );
        for (field, shown) in [("true", "true"), ("y", "y"), (" Y", " Y")] {
            assert_eq!(
                error_both(&format!("b,c\nY,N\n{field},N\n"), &spec),
                format!(r#"line 3: column "b": cannot parse "{shown}" as bool"#),
                "listed spellings are exact"
            );
        }
        // One list alone: the other keeps its word.
        let trues = CsvValues {
            true_values: listed(&["yes"]),
            ..CsvValues::default()
        };
        let spec = spelled(columns, trues);
        let (_, parquet) = run_both("b,c\nyes,FALSE\n", &spec);
        assert_eq!(parquet.rows, text_rows(&["true|false"]));
        assert_eq!(
            error_both("b,c\nTrue,false\n", &spec),
            r#"line 2: column "b": cannot parse "True" as bool"#
        );
    }

    #[test]
    fn decimal_commas_in_float_and_decimal_columns() {
        let columns = r#"[{"name":"i","type":"int64"},{"name":"f","type":"float64"},
            {"name":"g","type":"float32"},{"name":"d","type":"decimal(12,2)"}]"#;
        let comma = CsvValues {
            decimal_comma: true,
            ..CsvValues::default()
        };
        let mut spec = spelled(columns, comma);
        spec.format = InputFormat::Csv(CsvOptions {
            delimiter: b';',
            ..CsvOptions::default()
        });
        let input =
            "i;f;g;d\n1;1,5;2,25;1,50\n2;-0,25;\"3\";\"-3,5\"\n3;1,5e3;,5;,5\n4;;;\n5;inf;-0;7\n";
        let (_, parquet) = run_both(input, &spec);
        assert_eq!(
            parquet.rows,
            text_rows(&[
                "1|1.5|2.25|1.50",
                "2|-0.25|3.0|-3.50",
                "3|1500.0|0.5|0.50",
                "4|∅|∅|∅",
                "5|inf|-0.0|7.00"
            ])
        );
        for (row, error) in [
            (
                "1;1.5;;",
                r#"column "f": cannot parse "1.5" as float64: the decimal point is a comma (decimal_point)"#,
            ),
            (
                "1;;;1.000,50",
                r#"column "d": cannot parse "1.000,50" as decimal(12,2): the decimal point is a comma (decimal_point)"#,
            ),
            (
                "1;;;1,000,50",
                r#"column "d": cannot parse "1,000,50" as decimal(12,2): it has more than one decimal comma (digits may not be grouped)"#,
            ),
            (
                "1;;;1,005",
                r#"column "d": cannot parse "1,005" as decimal(12,2): it has more than 2 digits after the point and would be rounded"#,
            ),
            (
                "1;;1e39;",
                r#"column "g": cannot parse "1e39" as float32: out of range"#,
            ),
            ("1,0;;;", r#"column "i": cannot parse "1,0" as int64"#),
        ] {
            assert_eq!(
                error_both(&format!("i;f;g;d\n1;1;1;1\n{row}\n"), &spec),
                format!("line 3: {error}")
            );
        }
        // With commas for delimiters, the fields are quoted.
        spec.format = InputFormat::Csv(CsvOptions::default());
        let (_, parquet) = run_both("i,f,g,d\n1,\"1,5\",\"2\",\"0,01\"\n", &spec);
        assert_eq!(parquet.rows, text_rows(&["1|1.5|2.0|0.01"]));
    }

    #[test]
    fn times_in_each_columns_format_and_zone() {
        let columns = r#"[
            {"name":"t","type":"timestamp","format":"%d/%m/%Y %H:%M","timezone":"Europe/Paris"},
            {"name":"d","type":"date","format":"%d.%m.%Y"},
            {"name":"e","type":"timestamp","format":"epoch_millis"},
            {"name":"u","type":"timestamp"}]"#;
        let spec = spelled(columns, CsvValues::default());
        assert!(spec.csv_values.is_default() && Spellings::of(&spec).is_some());
        let input = "t,d,e,u\n03/01/2024 10:20,31.12.2023,1704274800123,2024-01-02T03:04:05Z\n\
            03/07/2024 10:20,,,\n";
        let (_, parquet) = run_both(input, &spec);
        assert_eq!(
            parquet.rows,
            text_rows(&[
                "2024-01-03T09:20:00Z|2023-12-31|2024-01-03T09:40:00.123Z|2024-01-02T03:04:05Z",
                "2024-07-03T08:20:00Z|∅|∅|∅",
            ]),
            "Paris is UTC+1 in winter, UTC+2 in summer"
        );
        let e = error_both("t,d,e,u\n2024-01-03 10:20,,,\n", &spec);
        assert!(
            e.starts_with(
                r#"line 2: column "t": cannot parse "2024-01-03 10:20" as timestamp with the format "%d/%m/%Y %H:%M""#
            ),
            "{e}"
        );
        assert_eq!(
            error_both("t,d,e,u\n,2023-12-31,,\n", &spec),
            r#"line 2: column "d": cannot parse "2023-12-31" as date with the format "%d.%m.%Y""#
        );

        // Without formats, zones or spellings, every column is read as it always was.
        assert!(Spellings::of(&csv_spec(ALL_TYPES)).is_none());
    }

    #[test]
    fn bad_values_are_rescued_and_their_rows_land() {
        let mut spec = spelled(
            r#"[{"name":"id","type":"int64","nullable":false},{"name":"b","type":"bool"},
                {"name":"a.b","type":"decimal(12,2)"},{"name":"s","type":"string"}]"#,
            CsvValues {
                null_values: listed(&["NA"]),
                ..CsvValues::default()
            },
        );
        spec.bad_values = BadValues::Rescue;
        spec.sum_columns = vec!["a.b".into()];
        let input = "id,b,a.b,s\n1,maybe,1.005,x\n2,true,2.50,\"say \"\"hi\"\"\"\n3,NA,x\"y,NA\n";
        let later = "id,b,a.b,s\n1,,,\n2,,x,\n3,no,,\n";
        FAST_BATCHES.set(0);
        let (stats, parquet) = run_both(input, &spec);
        assert_eq!(FAST_BATCHES.get(), 1, "rescued on the fast path");
        assert_eq!((stats.rows, stats.rescued_rows), (3, 2));
        assert_eq!(
            stats.sums["a.b"].to_string(),
            "2.50",
            "sums count what lands"
        );
        let first = r#"{"fields":{"b":"maybe","[\"a.b\"]":"1.005"},"reasons":{"b":"cannot parse \"maybe\" as bool","[\"a.b\"]":"cannot parse \"1.005\" as decimal(12,2): it has more than 2 digits after the point and would be rounded"}}"#;
        let third = r#"{"fields":{"[\"a.b\"]":"x\"y"},"reasons":{"[\"a.b\"]":"cannot parse \"x\\\"y\" as decimal(12,2)"}}"#;
        assert_eq!(
            parquet.rows,
            vec![
                vec!["1", "∅", "∅", "x", first],
                vec!["2", "true", "2.50", "say \"hi\"", "∅"],
                vec!["3", "∅", "∅", "∅", third],
            ]
        );
        for rescued in [first, third] {
            let value: serde_json::Value = serde_json::from_str(rescued).unwrap();
            assert!(value["fields"].is_object(), "{rescued} is JSON");
        }
        // A column's rescued value in an earlier row than the column before it.
        let (_, parquet) = run_both(later, &spec);
        let rescued: Vec<_> = parquet.rows.iter().map(|r| r[4].as_str()).collect();
        assert_eq!(
            rescued,
            [
                "∅",
                r#"{"fields":{"[\"a.b\"]":"x"},"reasons":{"[\"a.b\"]":"cannot parse \"x\" as decimal(12,2)"}}"#,
                r#"{"fields":{"b":"no"},"reasons":{"b":"cannot parse \"no\" as bool"}}"#,
            ]
        );

        // A required column cannot be NULL: its bad value fails (or rejects) the row.
        assert_eq!(
            error_both("id,b,a.b,s\n1,,,\nx,,,\n", &spec),
            r#"line 3: column "id": cannot parse "x" as int64"#
        );
        assert_eq!(
            error_both("id,b,a.b,s\nNA,maybe,,\n", &spec),
            r#"line 2: column "id": null value "NA" (null_values) in a non-nullable column"#
        );
        spec.bad_rows = BadRows::Reject { max: 10 };
        let (stats, parquet) = run_both("id,b,a.b,s\n1,maybe,,\nx,,,\n3,,,\n", &spec);
        assert_eq!(
            (stats.rows, stats.rescued_rows, stats.rejects.len()),
            (2, 1, 1)
        );
        assert_eq!(parquet.rows[1], ["3", "∅", "∅", "∅", "∅"]);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for input in [
            &b"a,b,c\n\"\n"[..],
            b"\0\0\0",
            b"a,b,c\n\xff\xfe,\x00,\"\"\"",
            b"\n\n\n",
            b"\"a\"b\"c,,",
        ] {
            if let Err(e) = convert(input, &csv_spec(ABC), Vec::new()) {
                assert!(matches!(e, ConvertError::Parse { .. }), "{e:?}");
            }
        }
    }

    #[test]
    fn text_after_a_closing_quote_is_an_error_naming_line_and_column() {
        let spec = csv_spec(ABC);
        assert_eq!(
            parse_error("a,b,c\n1,x,1\n2,\"abc\"x,2\n", &spec),
            r#"line 3: column "b": text after the closing quote of a quoted field"#,
            "csv-core would read abcx"
        );
        assert_eq!(
            parse_error("a,b,c\n1,\"two\nlines\" ,1\n", &spec),
            r#"line 2: column "b": text after the closing quote of a quoted field"#,
            "the line where the record starts"
        );
        assert_eq!(
            parse_error("\"a\"b,b,c\n1,x,1\n", &spec),
            r#"line 1: column "a": text after the closing quote of a quoted field"#,
            "in the header too"
        );
    }

    #[test]
    fn a_quoted_field_open_at_the_end_is_an_error() {
        let spec = csv_spec(ABC);
        for input in [
            "a,b,c\n1,x,1\n2,\"abc,2\n3,y,3\n",
            "a,b,c\n1,x,1\n2,y,\"3",
            "a,b,c\n1,x,1\n2,y,\"\"\"",
        ] {
            assert_eq!(
                parse_error(input, &spec),
                "line 3: column \"".to_owned()
                    + if input.contains("abc") { "b" } else { "c" }
                    + "\": a quoted field is still open at the end of the input",
                "{input:?}: csv-core would close it silently"
            );
        }
        let options = CsvOptions {
            escape: Some(b'\\'),
            ..CsvOptions::default()
        };
        assert_eq!(
            parse_error("a,b,c\n1,\"x\\\"\n", &with_options(options)),
            r#"line 2: column "b": a quoted field is still open at the end of the input"#,
            "an escaped quote does not close the field"
        );
    }

    #[test]
    fn quotes_that_change_nothing_are_accepted() {
        let (_, parquet) = run(
            "a,b,c\n1,ab\"c,1\n2,\"say \"\"hi\"\"\",2\n3,\"\",3\n4,x\"\",4\n",
            &csv_spec(ABC),
        );
        assert_eq!(
            parquet.rows,
            text_rows(&[
                "1|ab\"c|1.00",
                "2|say \"hi\"|2.00",
                "3|∅|3.00",
                "4|x\"\"|4.00"
            ]),
            "a quote inside an unquoted field is a character"
        );
    }

    #[test]
    fn exact_columns_refuse_what_arrow_csv_would_change() {
        let spec = csv_spec(
            r#"[{"name":"d","type":"date"},{"name":"t","type":"timestamp"},{"name":"f","type":"float64"},{"name":"g","type":"float32"}]"#,
        );
        for (row, error) in [
            (
                "2024-01-02T23:30:00-05:00,,,",
                r#"column "d": cannot parse "2024-01-02T23:30:00-05:00" as date: it has a time of day (declare the column as timestamp)"#,
            ),
            (
                ",2024-01-02T03:04:05.1234567Z,,",
                r#"column "t": cannot parse "2024-01-02T03:04:05.1234567Z" as timestamp: it has digits below the microsecond and would be truncated"#,
            ),
            (
                ",,1e999,",
                r#"column "f": cannot parse "1e999" as float64: out of range"#,
            ),
            (
                ",,,1e39",
                r#"column "g": cannot parse "1e39" as float32: out of range"#,
            ),
        ] {
            let input = format!("d,t,f,g\n2024-01-01,2024-01-01T00:00:00Z,1,1\n{row}\n");
            assert_eq!(parse_error(input, &spec), format!("line 3: {error}"));
        }
        let (_, parquet) = run(
            "d,t,f,g\n2024-01-02,2024-01-02T03:04:05.123456000Z,-inf,Infinity\n",
            &spec,
        );
        assert_eq!(
            parquet.rows,
            text_rows(&["2024-01-02|2024-01-02T03:04:05.123456Z|-inf|inf"]),
            "infinity spelled out, and zeros below the microsecond, are exact"
        );
    }

    /// Records split over batches by bytes (`batch_bytes`) and rows read the same as in
    /// one batch, whatever the terminators, quotes and blank lines around the cut.
    #[test]
    fn batches_cut_by_bytes_read_the_same_records() {
        let input = "a,b,c\r\n1,\"x\r\ny\",1\r\n\r\n2,\"\"\"q\"\"\",2\n\n\n3,z,3\r4,w,4\n5,\"\",5";
        let whole = run(input, &csv_spec(ABC)).1.rows;
        assert_eq!(whole.len(), 5);
        for batch_bytes in 1..input.len() + 2 {
            for batch_rows in [1, 2, 3, 100] {
                let mut spec = csv_spec(ABC);
                spec.batch_bytes = batch_bytes;
                spec.batch_rows = batch_rows;
                assert_eq!(
                    run(input, &spec).1.rows,
                    whole,
                    "{batch_bytes} bytes, {batch_rows} rows"
                );
            }
        }
        let mut spec = csv_spec(ABC);
        spec.batch_bytes = 7;
        let input = "a,b,c\n1,x,1\n2,y,2\n3,z,3\n4,w,4\n5,v,five\n";
        assert_eq!(
            parse_error(input, &spec),
            r#"line 6: column "c": cannot parse "five" as decimal(12,2)"#
        );
    }

    #[test]
    fn a_long_record_is_refused_naming_its_line() {
        let mut spec = csv_spec(ABC);
        spec.max_record_bytes = 10;
        let (_, parquet) = run("a,b,c\n1,abcdef,1\n", &spec);
        assert_eq!(parquet.rows.len(), 1, "10 bytes are allowed");
        assert_eq!(
            parse_error("a,b,c\n1,abcdef,1\n2,\"abc\ndefg\",2\n", &spec),
            r#"line 3: column "b": the record is longer than the limit of 10 bytes (max_record_bytes)"#,
            "a quoted newline does not end a record"
        );
        assert_eq!(
            parse_error("a,b,c,ddddddddd\n1,x,1\n", &spec),
            "line 1: the record is longer than the limit of 10 bytes (max_record_bytes)",
        );
    }

    #[test]
    fn skipping_in_bulk_finds_the_first_special_byte() {
        let mut next = xorshift(0x1f83_d9ab_fb41_bd6b_u64);
        for _ in 0..100_000 {
            let len = (next() % 40) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| match next() % 8 {
                    0 => b",\n\r\"\x80\xff\x00\x01"[(next() % 8) as usize],
                    _ => b'a' + (next() % 26) as u8,
                })
                .collect();
            let special = [b',', b'\n', b'\r'];
            let from = (next() as usize) % (len + 1);
            let end = from + (next() as usize) % (len - from + 1);
            let expected = (from..end)
                .find(|&i| special.contains(&bytes[i]))
                .unwrap_or(end);
            assert_eq!(skip_to(&bytes, from, end, special), expected, "{bytes:?}");
            let quote = [b'"', b'"', b'"'];
            let expected = (from..end).find(|&i| bytes[i] == b'"').unwrap_or(end);
            assert_eq!(skip_to(&bytes, from, end, quote), expected, "{bytes:?}");
        }
    }

    /// The converter reads what arrow-csv (csv-core) reads, except where csv-core is
    /// lenient (text after a closing quote, a quote left open): the scan that finds
    /// record boundaries never disagrees with csv-core on any input.
    #[test]
    fn the_scan_agrees_with_csv_core() {
        use arrow_cast::display::{ArrayFormatter, FormatOptions};

        const ALPHABET: &[u8] = b"ab,,\"\"\\\r\n\n ;'";
        let mut next = xorshift(0x243f_6a88_85a3_08d3_u64);
        let (mut agreed, mut refused) = (0, 0);
        for round in 0..12_000 {
            let len = (next() % 40) as usize;
            let input: Vec<u8> = (0..len)
                .map(|_| ALPHABET[next() as usize % ALPHABET.len()])
                .collect();
            let columns = 1 + round % 3;
            let schema: Vec<String> = (0..columns)
                .map(|i| format!(r#"{{"name":"c{i}","type":"string"}}"#))
                .collect();
            let options = CsvOptions {
                delimiter: if round % 5 == 0 { b';' } else { b',' },
                quote: if round % 7 == 0 { b'\'' } else { b'"' },
                escape: (round % 4 == 0).then_some(b'\\'),
                header: round % 2 == 0,
            };
            let mut spec = csv_spec(&format!("[{}]", schema.join(",")));
            spec.format = InputFormat::Csv(options);
            spec.batch_rows = 1 + (next() % 4) as usize;
            spec.batch_bytes = 1 + (next() % 16) as usize;

            let mut out = Vec::new();
            let ours = convert(&input[..], &spec, &mut out);
            let reader = builder(&options, nullable(&spec.schema))
                .with_header(options.header)
                .with_batch_size(3)
                .build(&input[..])
                .unwrap();
            let theirs: Result<Vec<Vec<String>>, _> = reader
                .map(|batch| {
                    let batch = batch?;
                    let format = FormatOptions::default().with_null("∅");
                    let cells: Vec<_> = batch
                        .columns()
                        .iter()
                        .map(|c| ArrayFormatter::try_new(c.as_ref(), &format).unwrap())
                        .collect();
                    Ok::<_, ArrowError>(
                        (0..batch.num_rows())
                            .map(|r| cells.iter().map(|f| f.value(r).to_string()).collect())
                            .collect::<Vec<_>>(),
                    )
                })
                .collect::<Result<Vec<_>, _>>()
                .map(|b| b.concat());
            match (ours, theirs) {
                (Ok(_), Ok(rows)) => {
                    agreed += 1;
                    assert_eq!(read_parquet(out).rows, rows, "{input:?} {options:?}");
                }
                (Err(e), Ok(_)) => {
                    let e = e.to_string();
                    assert!(
                        e.contains("closing quote") || e.contains("still open"),
                        "{input:?} {options:?}: only leniency is refused, not {e}"
                    );
                    refused += 1;
                }
                (Ok(_), Err(e)) => panic!("{input:?} {options:?}: csv-core refuses it: {e}"),
                (Err(e), Err(_)) => {
                    assert!(!e.to_string().contains("internal"), "{input:?}: {e}")
                }
            }
        }
        assert!(
            agreed > 1000 && refused > 400,
            "{agreed} agreed, {refused} refused"
        );
    }

    /// The block pass reads what the byte-by-byte scan reads: the same fields, records,
    /// boundaries, errors and state, on inputs long enough for blocks, fed in chunks as
    /// `fill` feeds them, with budgets, record caps and record limits that stop the scan
    /// inside blocks.
    #[test]
    fn blocks_read_what_the_byte_scan_reads() {
        const ALPHABET: &[u8] = b"abcdefghijklmnop,,,,;;\n\n\r\"\"'\\ ";
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15_u64);
        BLOCKS.set(0);
        for round in 0..6_000 {
            // Some inputs have no quotes or carriage returns at all.
            let alphabet = if round % 3 == 0 {
                &ALPHABET[..22]
            } else {
                ALPHABET
            };
            let len = 40 + (next() % 400) as usize;
            let input: Vec<u8> = (0..len)
                .map(|_| alphabet[next() as usize % alphabet.len()])
                .collect();
            let options = CsvOptions {
                delimiter: if round % 5 == 0 { b';' } else { b',' },
                quote: if round % 7 == 0 { b'\'' } else { b'"' },
                escape: (round % 4 == 0).then_some(b'\\'),
                header: false,
            };
            let max_record = [40, 64, 90, 300, usize::MAX][round % 5];
            let width = 1 + round % 4;
            let max_records = [usize::MAX, 1, 3][round % 3];
            let cuts: Vec<usize> = (0..64).map(|_| 1 + (next() % 150) as usize).collect();
            let budgets: Vec<usize> = (0..64).map(|_| (next() % 120) as usize).collect();
            let scan = |blocks: bool| {
                let (mut scan, mut spans) = (Scan::default(), Spans::new(width));
                spans.max_records = max_records;
                let (mut offset, mut steps, mut log) = (0, 0, Vec::new());
                let mut budget = budgets[0];
                while offset < input.len() && steps < 64 {
                    let chunk = &input[offset..(offset + cuts[steps]).min(input.len())];
                    steps += 1;
                    BYTEWISE.set(!blocks);
                    let found = scan.run(&options, max_record, chunk, offset, budget, &mut spans);
                    BYTEWISE.set(false);
                    let (n, stop) = match found {
                        Found::End => (chunk.len(), None),
                        Found::Boundary(n) => {
                            budget = offset + n + budgets[steps % 64];
                            spans.records = 0;
                            (n, Some("boundary"))
                        }
                        Found::Malformed(n, why) => (n, Some(why)),
                        Found::TooLong(n) => (n, Some("too long")),
                    };
                    log.push((offset, n, stop));
                    offset += n;
                    if stop.is_some_and(|s| s != "boundary") {
                        break;
                    }
                }
                (log, spans.fields, spans.irregular, format!("{scan:?}"))
            };
            let bytewise = scan(false);
            assert_eq!(
                scan(true),
                bytewise,
                "{:?} {options:?} max_record {max_record} width {width}",
                String::from_utf8_lossy(&input)
            );
        }
        assert!(BLOCKS.get() > 10_000, "{} blocks read", BLOCKS.get());
    }
}
