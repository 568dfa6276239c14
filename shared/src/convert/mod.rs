//! Conversion of one CSV or JSON Lines object, possibly gzip- or zstd-compressed,
//! into one Parquet file, with the row count and column sums that let a caller
//! check the result against the source.
//!
//! [`convert`] streams: the input is decompressed, parsed and encoded one batch at a
//! time, and the Parquet writer closes a row group whenever it reaches
//! [`ConvertSpec::row_group_rows`] rows or 64 MiB, so memory stays bounded whatever the
//! object's size. Input is untrusted: malformed bytes end in a [`ConvertError`] that
//! says where (1-based physical line of the decompressed file, column), never in a
//! panic, and [`ConvertSpec::max_decoded_bytes`] stops decompression bombs.

mod csv;
mod input;
mod json;
mod stats;

use std::collections::HashSet;
use std::fmt;
use std::io::{Read, Write};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::ZstdLevel;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use serde::{Deserialize, Serialize};

use crate::schema::ColumnType;

pub use stats::{ConvertStats, ParseSumError, SumValue};

/// Size at which the Parquet writer closes a row group even if it has fewer rows than
/// [`ConvertSpec::row_group_rows`] (estimated encoded size).
const MAX_ROW_GROUP_BYTES: usize = 64 << 20;

/// Compression of the input object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// Plain bytes.
    #[default]
    None,
    /// gzip, possibly several members concatenated (as `cat a.gz b.gz` makes).
    Gzip,
    /// zstd, possibly several frames concatenated.
    Zstd,
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Zstd => "zstd",
        })
    }
}

/// Text format of the (decompressed) input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    /// Delimited text, columns matched to the schema by position.
    Csv(CsvOptions),
    /// One JSON object per line, keys matched to the schema by name; keys not in the
    /// schema are ignored, missing keys are NULL, blank lines are skipped.
    JsonLines,
}

/// CSV dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CsvOptions {
    /// Field separator.
    pub delimiter: u8,
    /// Quote character; inside quotes a doubled quote stands for one.
    pub quote: u8,
    /// Escape character inside quotes, if any.
    pub escape: Option<u8>,
    /// Whether the first record is a header (skipped; its names are not checked).
    pub header: bool,
}

impl Default for CsvOptions {
    /// `,` separated, `"` quoted, no escape, with a header.
    fn default() -> Self {
        Self {
            delimiter: b',',
            quote: b'"',
            escape: None,
            header: true,
        }
    }
}

/// How an empty CSV field of a `string` column is read. Fields of other types read
/// as NULL when empty, and JSON Lines is not affected (`""` is `""`, `null` is NULL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmptyStrings {
    /// NULL, as arrow-csv reads it.
    #[default]
    Null,
    /// The empty string, as pyarrow and pandas read it. A non-nullable string column
    /// then accepts empty fields.
    Empty,
}

/// What to convert and how.
#[derive(Debug, Clone)]
pub struct ConvertSpec {
    /// Input text format.
    pub format: InputFormat,
    /// Input compression.
    pub compression: Compression,
    /// Columns of the input and of the Parquet file. Every field must have a type that
    /// [`ColumnType::from_arrow`] knows, e.g. from [`crate::schema::arrow_schema`].
    pub schema: SchemaRef,
    /// Columns to sum into [`ConvertStats::sums`]; each must be summable.
    pub sum_columns: Vec<String>,
    /// Rows decoded at a time (default 8192).
    pub batch_rows: usize,
    /// Rows per Parquet row group at most (default 1,048,576); a row group is also
    /// closed when its estimated encoded size reaches 64 MiB.
    pub row_group_rows: usize,
    /// Decompressed size at which to give up with [`ConvertError::TooLarge`].
    pub max_decoded_bytes: Option<u64>,
    /// How empty CSV fields of string columns are read.
    pub empty_strings: EmptyStrings,
    /// zstd level of the Parquet column chunks (default 3).
    pub zstd_level: i32,
}

impl ConvertSpec {
    /// A spec for uncompressed `format` input with `schema`, no sums and the defaults.
    pub fn new(format: InputFormat, schema: SchemaRef) -> Self {
        Self {
            format,
            compression: Compression::None,
            schema,
            sum_columns: Vec::new(),
            batch_rows: 8192,
            row_group_rows: 1_048_576,
            max_decoded_bytes: None,
            empty_strings: EmptyStrings::Null,
            zstd_level: 3,
        }
    }
}

/// Why a conversion failed. The messages read well after a prefix naming the object,
/// such as `s3://bucket/key: `.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The input is not valid for the format and schema: a value that does not parse,
    /// a wrong number of fields, invalid UTF-8, a NULL in a non-nullable column, a JSON
    /// line that is not one object…, or a sum that overflows.
    #[error("{}{message}", location(.line, .column))]
    Parse {
        /// 1-based physical line of the decompressed input where the offending record
        /// starts (the CSV header is line 1), when known.
        line: Option<u64>,
        /// The offending column, when known.
        column: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// The compressed stream is corrupt or truncated.
    #[error("cannot decompress input: {message}")]
    Decompress {
        /// Decompressor's complaint, prefixed with the compression.
        message: String,
    },
    /// The decompressed input exceeds [`ConvertSpec::max_decoded_bytes`].
    #[error("decompressed input exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: u64,
    },
    /// The Parquet writer failed (including failures of the output).
    #[error("cannot write Parquet: {message}")]
    Encode {
        /// Writer's complaint.
        message: String,
    },
    /// Reading the input failed.
    #[error("cannot read input: {0}")]
    Io(#[source] std::io::Error),
    /// The spec itself is unusable (unknown or unsummable sum column, unsupported column
    /// type, zero batch or row group size, invalid zstd level…); no input was read.
    #[error("invalid conversion spec: {message}")]
    InvalidSpec {
        /// What is wrong.
        message: String,
    },
}

fn location(line: &Option<u64>, column: &Option<String>) -> String {
    let line = line.map(|l| format!("line {l}: ")).unwrap_or_default();
    let column = column
        .as_ref()
        .map(|c| format!("column {c:?}: "))
        .unwrap_or_default();
    line + &column
}

impl From<std::io::Error> for ConvertError {
    /// Unwraps the classified errors that [`input`] sends through `io::Read`.
    fn from(e: std::io::Error) -> Self {
        e.downcast::<ConvertError>().unwrap_or_else(ConvertError::Io)
    }
}

impl From<parquet::errors::ParquetError> for ConvertError {
    fn from(e: parquet::errors::ParquetError) -> Self {
        Self::Encode {
            message: e.to_string(),
        }
    }
}

impl ConvertError {
    fn parse(line: Option<u64>, column: Option<&str>, message: impl Into<String>) -> Self {
        Self::Parse {
            line,
            column: column.map(str::to_owned),
            message: message.into(),
        }
    }

    fn invalid_spec(message: impl Into<String>) -> Self {
        Self::InvalidSpec {
            message: message.into(),
        }
    }
}

/// An Arrow error's message without the "Parser error: "-style prefix of its Display.
fn arrow_message(e: ArrowError) -> String {
    match e {
        ArrowError::ParseError(m) | ArrowError::CsvError(m) | ArrowError::JsonError(m) => m,
        e => e.to_string(),
    }
}

/// `schema` with every field nullable: inputs are decoded against it so that NULLs in
/// non-nullable columns are reported by [`null_violation`] with their location.
fn nullable(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}

/// The first `(row, column)` of `batch` holding a NULL where `schema` forbids one.
fn null_violation(batch: &RecordBatch, schema: &Schema) -> Option<(usize, usize)> {
    schema
        .fields()
        .iter()
        .zip(batch.columns())
        .enumerate()
        .filter(|(_, (field, array))| !field.is_nullable() && array.null_count() > 0)
        .filter_map(|(col, (_, array))| Some(((0..array.len()).find(|&r| array.is_null(r))?, col)))
        .min()
}

/// A source of decoded record batches, checked against the spec's schema.
trait Batches {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>, ConvertError>;
}

/// Converts `input` as `spec` describes into a Parquet file written to `output`.
///
/// Returns the number of rows, the sums of [`ConvertSpec::sum_columns`] and byte
/// counts. A zero-row input still gives a valid Parquet file with the full schema.
/// On error, `output` holds an incomplete file and must be discarded.
///
/// ```
#[doc = concat!("use ", env!("CARGO_CRATE_NAME"), "::{convert::*, schema::*};")]
///
/// let columns: Vec<ColumnSpec> = serde_json::from_str(
///     r#"[{"name": "id", "type": "int64", "nullable": false},
///         {"name": "price", "type": "decimal(12,2)"}]"#,
/// )?;
/// let mut spec = ConvertSpec::new(InputFormat::Csv(CsvOptions::default()), arrow_schema(&columns));
/// spec.sum_columns = vec!["price".into()];
///
/// let mut parquet = Vec::new();
/// let stats = convert(&b"id,price\n1,0.10\n2,0.20\n"[..], &spec, &mut parquet)?;
/// assert_eq!(stats.rows, 2);
/// assert_eq!(stats.sums["price"].to_string(), "0.30");
/// assert_eq!(&parquet[..4], b"PAR1");
///
/// let err = convert(&b"id,price\n1,0.10\nx,0.20\n"[..], &spec, Vec::new()).unwrap_err();
/// assert_eq!(err.to_string(), r#"line 3: column "id": cannot parse "x" as int64"#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn convert<R: Read, W: Write + Send>(
    input: R,
    spec: &ConvertSpec,
    output: W,
) -> Result<ConvertStats, ConvertError> {
    let types = column_types(&spec.schema)?;
    let mut sums = stats::Sums::new(&spec.schema, &types, &spec.sum_columns)?;
    if spec.batch_rows == 0 || spec.row_group_rows == 0 {
        return Err(ConvertError::invalid_spec(
            "batch_rows and row_group_rows must be positive",
        ));
    }
    let level = ZstdLevel::try_new(spec.zstd_level).map_err(|e| ConvertError::invalid_spec(e.to_string()))?;
    let properties = WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(level))
        .set_max_row_group_row_count(Some(spec.row_group_rows))
        .set_max_row_group_bytes(Some(MAX_ROW_GROUP_BYTES))
        .set_dictionary_enabled(true)
        .set_statistics_enabled(EnabledStatistics::Page)
        .build();
    let mut writer = ArrowWriter::try_new(output, spec.schema.clone(), Some(properties))?;

    let meter = input::Meter::default();
    let reader = input::open(input, spec, &meter)?;
    let mut batches: Box<dyn Batches + '_> = match spec.format {
        InputFormat::Csv(options) => Box::new(csv::CsvBatches::new(reader, options, spec, types)?),
        InputFormat::JsonLines => Box::new(json::JsonBatches::new(reader, spec)?),
    };
    let mut rows = 0;
    while let Some(batch) = batches.next_batch()? {
        rows += batch.num_rows() as u64;
        sums.add(&batch)?;
        writer.write(&batch)?;
    }
    drop(batches);
    let metadata = writer.close()?;
    Ok(ConvertStats {
        rows,
        sums: sums.finish(),
        bytes_read: meter.read.get(),
        bytes_decoded: meter.decoded.get(),
        row_groups: metadata.num_row_groups(),
    })
}

/// The column type of every field, rejecting schemas the readers cannot honour.
fn column_types(schema: &Schema) -> Result<Vec<ColumnType>, ConvertError> {
    if schema.fields().is_empty() {
        return Err(ConvertError::invalid_spec("the schema has no columns"));
    }
    let mut names = HashSet::new();
    schema
        .fields()
        .iter()
        .map(|f| {
            if !names.insert(f.name()) {
                return Err(ConvertError::invalid_spec(format!("duplicate column {:?}", f.name())));
            }
            ColumnType::from_arrow(f.data_type()).ok_or_else(|| {
                ConvertError::invalid_spec(format!(
                    "column {:?} has unsupported type {}",
                    f.name(),
                    f.data_type()
                ))
            })
        })
        .collect()
}
