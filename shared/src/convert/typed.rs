//! What the typed inputs (Parquet, Avro, ORC) share: the columns of a file matched to the
//! source's schema by name, the lossless widening of a file's types to the schema's, and
//! the batches of the file in the spec's schema.
//!
//! The contract between a file and the source's schema:
//!
//! - columns are matched by exact name, in any order; file columns that the schema does
//!   not name are not read;
//! - a schema column absent from the file is NULL when nullable, and otherwise fails the
//!   object before any row is read;
//! - a file column must hold its schema column's type, or a type every value of which
//!   the schema's type stores exactly: `int8`/`int16`/`uint8`/`uint16` into `int32`,
//!   those and `int32`/`uint32` into `int64`, `float32` into `float64`, an integer or
//!   decimal into a decimal with at least as many integer digits and at least the
//!   scale, strings (large, view or dictionary-encoded) into `string`, timestamps of any
//!   unit and zone (or none: read as UTC) into `timestamp`; anything else fails the
//!   object naming the column and both types (as Arrow names them);
//! - values are stored exactly or refused, naming the 1-based row of the file: a
//!   nanosecond timestamp that is not a whole microsecond, a second or millisecond
//!   timestamp beyond the microsecond range, a NULL in a non-nullable column.

use std::fs::File;
use std::io::{self, BufRead, Write};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, RecordBatch, TimestampMicrosecondArray, new_null_array};
use arrow_cast::{CastOptions, cast_with_options};
use arrow_schema::{ArrowError, DataType, SchemaRef, TimeUnit};

use super::{Batches, ConvertError, ConvertSpec};
use crate::schema::ColumnType;

/// Casts that must never turn a value into NULL: an unexpected failure is an error.
const STRICT: CastOptions<'static> = CastOptions {
    safe: false,
    format_options: arrow_cast::display::FormatOptions::new(),
};

/// Which file column each schema column reads: the first step of matching a file.
#[derive(Debug)]
pub(super) struct Selection {
    /// Per schema column, the position of its file column (`None`: absent, all NULL).
    at: Vec<Option<usize>>,
    /// The positions to read, ascending: the columns of a projected batch, in order.
    pub(super) roots: Vec<usize>,
}

/// Matches the file's top-level column `names` (in file order) with the spec's schema.
pub(super) fn select<'a>(
    names: impl IntoIterator<Item = &'a str>,
    spec: &ConvertSpec,
) -> Result<Selection, ConvertError> {
    let names: Vec<&str> = names.into_iter().collect();
    let mut at = Vec::new();
    for field in spec.schema.fields() {
        let name = field.name();
        let mut found = names.iter().enumerate().filter(|(_, n)| **n == name);
        at.push(match (found.next(), found.next()) {
            (Some(_), Some(_)) => {
                return Err(column_error(name, "appears more than once in the file"));
            }
            (None, _) if field.is_nullable() => None,
            (None, _) => {
                return Err(column_error(
                    name,
                    "missing from the file, and the source's schema requires it",
                ));
            }
            (Some((root, _)), None) => Some(root),
        });
    }
    let mut roots: Vec<usize> = at.iter().flatten().copied().collect();
    roots.sort_unstable();
    Ok(Selection { at, roots })
}

impl Selection {
    /// Checks the type of each selected file column, `projected` being the types of
    /// [`Self::roots`] in that order, and plans how each is read.
    pub(super) fn plan(
        self,
        spec: &ConvertSpec,
        types: &[ColumnType],
        projected: &[&DataType],
    ) -> Result<Typed, ConvertError> {
        debug_assert_eq!(projected.len(), self.roots.len());
        let mut columns = Vec::new();
        for ((field, ty), at) in spec.schema.fields().iter().zip(types).zip(self.at) {
            let source = match at {
                None => None,
                Some(root) => {
                    let index = self.roots.binary_search(&root).unwrap_or_default();
                    let file_type = projected.get(index).ok_or_else(|| {
                        column_error(field.name(), "not read from the file (a reader error)")
                    })?;
                    let read = plan(file_type, *ty).ok_or_else(|| {
                        column_error(
                            field.name(),
                            format!("type {file_type} in the file cannot be read as {ty}"),
                        )
                    })?;
                    Some((index, read))
                }
            };
            columns.push(Column {
                name: field.name().clone(),
                data_type: field.data_type().clone(),
                nullable: field.is_nullable(),
                source,
            });
        }
        Ok(Typed {
            columns,
            schema: spec.schema.clone(),
        })
    }
}

/// How a file column becomes its schema column.
#[derive(Debug, Clone, PartialEq)]
enum How {
    /// Already of the schema's type.
    Same,
    /// A lossless arrow cast (widening, string flavours, dictionary unpacking).
    Cast,
    /// A timestamp of this unit, to UTC microseconds, checked value by value.
    Timestamp(TimeUnit),
}

/// One column of the output.
#[derive(Debug)]
struct Column {
    name: String,
    data_type: DataType,
    nullable: bool,
    /// Position in the projected batch and how to read it; `None`: absent, all NULL.
    source: Option<(usize, How)>,
}

/// The planned columns of a file: turns its projected batches into the spec's schema.
#[derive(Debug)]
pub(super) struct Typed {
    columns: Vec<Column>,
    schema: SchemaRef,
}

impl Typed {
    /// `len` rows of the file from its 1-based row `first_row`, read from `batch` (the
    /// projected columns; `None` when no column is read) in the spec's schema.
    pub(super) fn convert(
        &self,
        len: usize,
        batch: Option<&RecordBatch>,
        first_row: u64,
    ) -> Result<RecordBatch, ConvertError> {
        let arrays = self
            .columns
            .iter()
            .map(|column| {
                let array = match (&column.source, batch) {
                    (Some((at, read)), Some(batch)) => {
                        read_column(batch.column(*at), read, column, first_row)?
                    }
                    _ => new_null_array(&column.data_type, len),
                };
                if array.len() != len {
                    return Err(invalid(format!(
                        "column {:?}: {} values in a batch of {len} rows (a reader error)",
                        column.name,
                        array.len()
                    )));
                }
                if !column.nullable && array.null_count() > 0 {
                    let row = (0..array.len()).find(|&r| array.is_null(r)).unwrap_or(0);
                    return Err(row_error(
                        first_row + row as u64,
                        &column.name,
                        "missing value in a non-nullable column",
                    ));
                }
                Ok(array)
            })
            .collect::<Result<Vec<_>, _>>()?;
        RecordBatch::try_new(self.schema.clone(), arrays)
            .map_err(|e| invalid(format!("cannot assemble a batch: {e}")))
    }
}

/// Where the rows of a typed file come from.
pub(super) enum Rows<I> {
    /// A reader of projected batches; `use_columns` false when the batches hold a column
    /// read only to count rows (no schema column is in the file).
    Read { reader: I, use_columns: bool },
    /// No column to read: this many rows, all NULL.
    Blank(u64),
}

/// Batches of a typed file in the spec's schema, from its projected batches.
pub(super) struct TypedBatches<I> {
    /// `None` once the file is read.
    rows_from: Option<Rows<I>>,
    typed: Typed,
    batch_rows: usize,
    /// The format's name, for errors.
    format: &'static str,
    /// The rows the file says it holds, checked at its end, when it says.
    expected_rows: Option<u64>,
    /// Rows produced so far.
    rows: u64,
}

impl<I: Iterator<Item = Result<RecordBatch, ArrowError>>> TypedBatches<I> {
    pub(super) fn new(
        rows_from: Rows<I>,
        typed: Typed,
        spec: &ConvertSpec,
        format: &'static str,
        expected_rows: Option<u64>,
    ) -> Self {
        Self {
            rows_from: Some(rows_from),
            typed,
            batch_rows: spec.batch_rows,
            format,
            expected_rows,
            rows: 0,
        }
    }

    /// The next projected batch of the file (`None` for all-NULL rows) and its rows.
    fn next_file_batch(&mut self) -> Result<Option<(usize, Option<RecordBatch>)>, ConvertError> {
        match &mut self.rows_from {
            None => Ok(None),
            Some(Rows::Read {
                reader,
                use_columns,
            }) => match reader.next() {
                Some(Ok(batch)) => Ok(Some((batch.num_rows(), use_columns.then_some(batch)))),
                Some(Err(e)) => Err(invalid(format!(
                    "cannot read the {} data after row {}: {e}",
                    self.format, self.rows
                ))),
                None => {
                    self.rows_from = None;
                    Ok(None)
                }
            },
            Some(Rows::Blank(left)) => {
                if *left == 0 {
                    self.rows_from = None;
                    return Ok(None);
                }
                let n = (*left).min(self.batch_rows as u64);
                *left -= n;
                Ok(Some((n as usize, None)))
            }
        }
    }
}

impl<I: Iterator<Item = Result<RecordBatch, ArrowError>>> Batches for TypedBatches<I> {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>, ConvertError> {
        loop {
            let Some((len, batch)) = self.next_file_batch()? else {
                return match self.expected_rows {
                    Some(expected) if expected != self.rows => Err(invalid(format!(
                        "not a valid {} file: it says it holds {expected} rows, and {} were read",
                        self.format, self.rows
                    ))),
                    _ => Ok(None),
                };
            };
            if len == 0 {
                continue;
            }
            let batch = self.typed.convert(len, batch.as_ref(), self.rows + 1)?;
            self.rows += len as u64;
            return Ok(Some(batch));
        }
    }
}

/// Copies `input` to an anonymous temporary file, removed when dropped: how an input read
/// by seeking (Parquet, ORC) is read from a stream.
pub(crate) fn spool(mut input: impl BufRead) -> Result<File, ConvertError> {
    let spool_error = |e: io::Error| {
        ConvertError::Io(io::Error::new(
            e.kind(),
            format!("cannot spool the input to a temporary file: {e}"),
        ))
    };
    let mut file = tempfile::tempfile().map_err(spool_error)?;
    loop {
        let chunk = match input.fill_buf() {
            Ok([]) => break,
            Ok(chunk) => chunk,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        file.write_all(chunk).map_err(spool_error)?;
        let n = chunk.len();
        input.consume(n);
    }
    file.flush().map_err(spool_error)?;
    Ok(file)
}

/// How a file column of type `file` is read as `target`, `None` if it cannot be without
/// losing values.
fn plan(file: &DataType, target: ColumnType) -> Option<How> {
    use DataType as D;
    if *file == target.to_arrow() {
        return Some(How::Same);
    }
    if let D::Dictionary(_, values) = file {
        // Unpacked first, then read as the values' type would be.
        return plan(values, target).map(|read| match read {
            How::Same => How::Cast,
            read => read,
        });
    }
    let cast = match (target, file) {
        (ColumnType::Int32, D::Int8 | D::Int16 | D::UInt8 | D::UInt16) => true,
        (ColumnType::Int64, D::Int8 | D::Int16 | D::Int32 | D::UInt8 | D::UInt16 | D::UInt32) => {
            true
        }
        (ColumnType::Float64, D::Float32) => true,
        (ColumnType::String, D::Utf8 | D::LargeUtf8 | D::Utf8View) => true,
        (ColumnType::Timestamp, D::Timestamp(unit, _)) => return Some(How::Timestamp(*unit)),
        (ColumnType::Decimal { precision, scale }, file) => {
            let (digits, file_scale) = match *file {
                D::Int8 | D::UInt8 => (3, 0),
                D::Int16 | D::UInt16 => (5, 0),
                D::Int32 | D::UInt32 => (10, 0),
                D::Int64 => (19, 0),
                D::UInt64 => (20, 0),
                D::Decimal32(p, s)
                | D::Decimal64(p, s)
                | D::Decimal128(p, s)
                | D::Decimal256(p, s)
                    if s >= 0 && i16::from(s) <= i16::from(p) =>
                {
                    (i16::from(p) - i16::from(s), i16::from(s))
                }
                _ => return None,
            };
            let (precision, scale) = (i16::from(precision), i16::from(scale));
            file_scale <= scale && digits <= precision - scale
        }
        _ => false,
    };
    cast.then_some(How::Cast)
}

/// Reads one file column as `column`, rows numbered from `first_row`.
fn read_column(
    array: &ArrayRef,
    read: &How,
    column: &Column,
    first_row: u64,
) -> Result<ArrayRef, ConvertError> {
    let cast_error = |e: ArrowError| column_error(&column.name, format!("cannot read: {e}"));
    match read {
        How::Same => Ok(array.clone()),
        How::Cast => cast_with_options(array, &column.data_type, &STRICT).map_err(cast_error),
        How::Timestamp(unit) => {
            let array = match array.data_type() {
                DataType::Dictionary(_, values) => {
                    cast_with_options(array, values, &STRICT).map_err(cast_error)?
                }
                _ => array.clone(),
            };
            let raw = cast_with_options(&array, &DataType::Int64, &STRICT).map_err(cast_error)?;
            let raw = raw.as_primitive::<Int64Type>();
            let mut micros = Vec::with_capacity(raw.len());
            for (i, value) in raw.iter().enumerate() {
                let value = value
                    .map(|v| to_micros(v, *unit))
                    .transpose()
                    .map_err(|message| row_error(first_row + i as u64, &column.name, message))?;
                micros.push(value);
            }
            let DataType::Timestamp(_, zone) = &column.data_type else {
                unreachable!("planned for timestamp columns only")
            };
            Ok(Arc::new(
                TimestampMicrosecondArray::from(micros).with_timezone_opt(zone.clone()),
            ))
        }
    }
}

/// A timestamp `value` in `unit` as microseconds, exactly, or why it cannot be.
fn to_micros(value: i64, unit: TimeUnit) -> Result<i64, String> {
    match unit {
        TimeUnit::Second => value.checked_mul(1_000_000),
        TimeUnit::Millisecond => value.checked_mul(1_000),
        TimeUnit::Microsecond => Some(value),
        TimeUnit::Nanosecond if value % 1_000 == 0 => Some(value / 1_000),
        TimeUnit::Nanosecond => {
            let shown = chrono::DateTime::from_timestamp_nanos(value)
                .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
            return Err(format!(
                "{shown} has digits below the microsecond and would be truncated"
            ));
        }
    }
    .ok_or_else(|| {
        let unit = match unit {
            TimeUnit::Second => "seconds",
            _ => "milliseconds",
        };
        format!("{value} {unit} since the epoch is out of range for a timestamp in microseconds")
    })
}

pub(super) fn invalid(message: String) -> ConvertError {
    ConvertError::parse(None, None, message)
}

pub(super) fn column_error(column: &str, message: impl Into<String>) -> ConvertError {
    ConvertError::parse(None, Some(column), message)
}

/// An error at a row of the file: `row N: column "c": …`.
fn row_error(row: u64, column: &str, message: impl std::fmt::Display) -> ConvertError {
    ConvertError::parse(
        None,
        None,
        format!("row {row}: column {column:?}: {message}"),
    )
}
