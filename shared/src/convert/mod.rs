//! Conversion of one CSV, JSON Lines, Parquet, Avro or ORC object, possibly gzip- or
//! zstd-compressed, into one Parquet file, with the row count and column sums that let a
//! caller check the result against the source.
//!
//! [`convert`] streams: the input is decompressed, parsed and encoded one batch at a
//! time, and the Parquet writer closes a row group whenever it reaches
//! [`ConvertSpec::row_group_rows`] rows or 64 MiB, keeping its pages in memory up to 4 MiB
//! and in a temporary file beyond (see [`pages`]), so memory stays bounded whatever the
//! object's size. Input is untrusted: malformed bytes end in a [`ConvertError`] that
//! says where (1-based physical line of the decompressed file, column), never in a
//! panic; [`ConvertSpec::max_decoded_bytes`] stops decompression bombs, and
//! [`ConvertSpec::max_record_bytes`] and [`ConvertSpec::batch_bytes`] bound what one
//! record and one batch hold, so that an endless line cannot exhaust memory.
//!
//! A value is stored exactly or refused: where the Arrow readers would round a decimal,
//! truncate a fraction, sub-microsecond digits or a time of day, read an overflowing
//! float as infinity, keep the last of a JSON key given twice, or read `"abc"x` in CSV
//! as `abcx`, the conversion fails naming the line and column instead. By default a bad row
//! fails the whole object, so an output is always the whole source; under
//! [`BadRows::Reject`] the rows whose error is confined to them are set aside instead, with
//! their line, error and bytes, in [`ConvertStats::rejects`] (see [`reject`] for which
//! errors those are).

mod arrays;
pub use arrays::reads;
mod avro;
mod columns;
mod csv;
mod header;
mod input;
pub use input::decoder;
mod json;
mod orc;
// Not `mod parquet`, which would shadow the crate of that name here.
mod pages;
#[path = "parquet.rs"]
pub(crate) mod parquet_input;
pub mod partition;
pub use partition::{Budget, PartFile, Routed, convert_partitioned};
pub mod progress;
pub mod reject;
mod stats;
#[cfg(test)]
mod testutil;
pub(crate) mod typed;
mod value;

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::io::{BufRead, Read, Write};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, Schema, SchemaRef};
use parquet::basic::{Encoding, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterPropertiesBuilder};
use parquet::schema::types::ColumnPath;
use serde::{Deserialize, Serialize};

use crate::schema::{ColumnSpec, ColumnType, FieldType};
use columns::Columns;

pub use reject::{BadRows, Rejected};
pub use stats::{ConvertStats, Ignored, MAX_IGNORED_PATHS, ParseSumError, SumValue};

/// Size at which the Parquet writer closes a row group even if it has fewer rows than
/// [`ConvertSpec::row_group_rows`] (estimated encoded size): the default of
/// [`ConvertSpec::row_group_bytes`].
pub const DEFAULT_ROW_GROUP_BYTES: usize = 64 << 20;

/// Default of [`ConvertSpec::page_memory_bytes`]: 4 MiB (BENCHMARKS.md, "Pages in a
/// temporary file": no CPU cost measured against keeping every page in memory).
pub const DEFAULT_PAGE_MEMORY_BYTES: usize = 4 << 20;

/// Default of [`ConvertSpec::dictionary_bytes`]: 1 MiB, the L2 cache of one core of a
/// Graviton2 (Lambda's arm64); the Intel Xeon the benchmarks ran on has 2 MiB per core
/// (BENCHMARKS.md, "Dictionaries that fit the cache", now in docs/benchmarks-history/).
pub const DEFAULT_DICTIONARY_BYTES: usize = 1 << 20;

/// Default of [`ConvertSpec::page_bytes`]: 1 MiB, arrow-rs's default data page size. Smaller
/// pages keep two threads busier (a page is one zstd call, which the other thread may wait
/// for) and cost one thread CPU (BENCHMARKS.md, "A page size per source").
pub const DEFAULT_PAGE_BYTES: usize = 1 << 20;

/// Default of [`ConvertSpec::max_record_bytes`]: 8 MiB.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 8 << 20;

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

/// The suffixes that name a compression, lower case.
const COMPRESSION_SUFFIXES: [(&str, Compression); 4] = [
    (".gz", Compression::Gzip),
    (".gzip", Compression::Gzip),
    (".zst", Compression::Zstd),
    (".zstd", Compression::Zstd),
];

impl Compression {
    /// The compression a key's suffix names (`.gz` / `.gzip`, `.zst` / `.zstd`, any case),
    /// and the key without that suffix; `None` and the whole key otherwise.
    pub fn from_key(key: &str) -> (Self, &str) {
        for (suffix, compression) in COMPRESSION_SUFFIXES {
            let at = key.len().saturating_sub(suffix.len());
            if key.is_char_boundary(at) && key[at..].eq_ignore_ascii_case(suffix) {
                return (compression, &key[..at]);
            }
        }
        (Self::None, key)
    }
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
    /// A Parquet file, columns matched to the schema by name and read by row group; the
    /// input is spooled to a temporary file first (see `convert/parquet.rs`).
    Parquet,
    /// An Avro Object Container File, fields matched to the schema by name and read block
    /// by block as a stream (see `convert/avro.rs`).
    Avro,
    /// An ORC file, columns matched to the schema by name and read by stripe; the input
    /// is spooled to a temporary file first (see `convert/orc.rs`).
    Orc,
}

/// How the columns of a CSV file with a header are matched to the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CsvColumns {
    /// The n-th field is the n-th column; the header is skipped, its names unchecked.
    #[default]
    ByPosition,
    /// By the header's names, in any order: a nullable column the file lacks is NULL, a
    /// required one fails the object naming it, other columns follow
    /// [`ConvertSpec::unknown_fields`] (see `convert/header.rs`).
    ByName,
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

/// What a field of the input that the schema does not name does: a JSON key no column (or
/// struct field) has, a Parquet, Avro or ORC column or struct field the schema lacks, a
/// CSV column a header names that the schema does not (with `csv.columns: "name"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum UnknownFields {
    /// Dropped, and counted per field path in the ledger.
    #[default]
    Ignore,
    /// The object fails, naming the field.
    Fail,
    /// Kept in the rescued column.
    Rescue,
}

/// What a value that does not read as its column's type does (a string in an `int64`
/// column, `"maybe"` in a `bool` field of a struct).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum BadValues {
    /// The object (or the row, under `on_bad_row: reject`) fails, naming line and path.
    #[default]
    Fail,
    /// The value becomes NULL and goes to the rescued column with the reason; the row
    /// lands. A NULL where the schema forbids one still fails.
    Rescue,
}

/// How JSON object keys are matched to column and struct field names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum KeyMatch {
    /// Exactly (a key that differs only by case is another field).
    #[default]
    Exact,
    /// Whatever their case (Unicode lower case compared); two keys of one object that
    /// both match one field are an error (or rescued), naming both.
    CaseInsensitive,
}

/// How CSV fields spell NULL, booleans and decimal points.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CsvValues {
    /// Fields that are NULL in any column (compared whole, after unquoting). `None`: only
    /// an empty field is (see [`EmptyStrings`] for string columns).
    pub null_values: Option<Vec<String>>,
    /// Fields read as `true` in a `bool` column (`None`: `true`, any case).
    pub true_values: Option<Vec<String>>,
    /// Fields read as `false` in a `bool` column (`None`: `false`, any case).
    pub false_values: Option<Vec<String>>,
    /// Decimal and float fields written with a decimal comma (`1,50`).
    pub decimal_comma: bool,
}

impl CsvValues {
    /// Only the default spellings.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// A lineage value: a function of the object version (and the row's place in it), so that
/// converting the same version again writes the same values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Lineage {
    /// The object's key (`string`).
    Key,
    /// Its S3 versionId (`string`, NULL in an unversioned bucket).
    VersionId,
    /// Its ETag, without quotes (`string`).
    Etag,
    /// Its last-modified time (`timestamp`).
    LastModified,
    /// The row's 1-based position among the rows the object gave (`int64`; rows rejected
    /// under `on_bad_row: reject` are not counted).
    RowNumber,
}

impl Lineage {
    /// The column type of its values.
    pub fn column_type(self) -> ColumnType {
        match self {
            Self::Key | Self::VersionId | Self::Etag => ColumnType::String,
            Self::LastModified => ColumnType::Timestamp,
            Self::RowNumber => ColumnType::Int64,
        }
    }

    /// Whether the value is never NULL.
    pub fn always_set(self) -> bool {
        self != Self::VersionId
    }
}

/// The object version a conversion reads, for the [`Lineage`] columns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObjectInfo {
    /// Key.
    pub key: String,
    /// S3 versionId, in a versioned bucket.
    pub version_id: Option<String>,
    /// ETag without quotes.
    pub etag: String,
    /// Last modified, in milliseconds since the epoch.
    pub last_modified_ms: i64,
}

/// Default of [`ConvertSpec::rescue_column`].
pub const DEFAULT_RESCUE_COLUMN: &str = "_rescued_data";

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
    /// Input bytes after which a batch is closed at the next record boundary even if it
    /// has fewer than `batch_rows` rows, so that wide rows do not make batches (and the
    /// memory they take) large (default 1 MiB: 8192 JSON Lines of ≈240 bytes would hold
    /// ≈2 MB of text twice over, once here and once in the decoder).
    pub batch_bytes: usize,
    /// Rows per Parquet row group at most (default 1,048,576); a row group is also
    /// closed when its estimated encoded size reaches `row_group_bytes` (estimated a batch
    /// late, so that two batches can be encoded at once: it may pass it by about a batch).
    pub row_group_rows: usize,
    /// Encoded bytes at which a row group is closed (default [`DEFAULT_ROW_GROUP_BYTES`]).
    pub row_group_bytes: usize,
    /// Bytes of the row group in progress kept in memory (its finished, compressed pages;
    /// default [`DEFAULT_PAGE_MEMORY_BYTES`]): the rest wait in an anonymous temporary file
    /// until the row group is written, so memory does not grow with `row_group_bytes`.
    pub page_memory_bytes: usize,
    /// Memory a column's dictionary may take while the writer builds it (its values,
    /// their offsets and hash slots, as predicted from the first rows; default
    /// [`DEFAULT_DICTIONARY_BYTES`]): a column predicted past it is written without a
    /// dictionary. Every value of a dictionary column is looked up in it, and once it
    /// outgrows the CPU's cache each lookup waits on memory; see [`column_choices`].
    pub dictionary_bytes: usize,
    /// Encoded size at which a Parquet data page closes (default [`DEFAULT_PAGE_BYTES`]);
    /// a page also closes at 20,000 rows, arrow-rs's default.
    pub page_bytes: usize,
    /// Decompressed size at which to give up with [`ConvertError::TooLarge`].
    pub max_decoded_bytes: Option<u64>,
    /// Longest record accepted, in decompressed bytes without its line terminator: a
    /// JSON line, or a CSV record (which quoted newlines may spread over several lines).
    /// A longer one is a [`ConvertError::Parse`] naming its line, found after reading at
    /// most this many bytes of it (plus a 64 KiB buffer), so that one endless line
    /// cannot exhaust memory: neither arrow-csv nor arrow-json bounds a record, both
    /// buffer it whole. Default [`DEFAULT_MAX_RECORD_BYTES`].
    pub max_record_bytes: usize,
    /// How empty CSV fields of string columns are read.
    pub empty_strings: EmptyStrings,
    /// How the columns of a CSV file with a header are matched to the schema (default
    /// [`CsvColumns::ByPosition`]).
    pub csv_columns: CsvColumns,
    /// zstd level of the Parquet column chunks (default 3).
    pub zstd_level: i32,
    /// What a row that does not decode does (default [`BadRows::Fail`]).
    pub bad_rows: BadRows,
    /// Threads of [`convert`]: with 2 or more, one decodes, and the columns of each batch
    /// are encoded on all of them (see `columns`); the file is the same bytes whatever
    /// the number (default: 2 when the process may run on more than one CPU, else 1).
    pub threads: usize,
    /// Options of the schema's columns (their `path`, `format` and `timezone`), looked up
    /// by name; a column without an entry has none (see [`Self::options`]).
    pub columns: Vec<ColumnSpec>,
    /// What a field the schema does not name does (default [`UnknownFields::Ignore`]).
    pub unknown_fields: UnknownFields,
    /// What a value that does not read as its type does (default [`BadValues::Fail`]).
    pub bad_values: BadValues,
    /// The name of the rescued column, a JSON object per row, written after the schema's
    /// columns when either policy rescues (see [`Self::rescues`]).
    pub rescue_column: String,
    /// How JSON keys are matched (default [`KeyMatch::Exact`]).
    pub json_keys: KeyMatch,
    /// How CSV fields spell NULL, booleans and decimal points.
    pub csv_values: CsvValues,
    /// Lineage columns written last, in order: name and value.
    pub lineage: Vec<(String, Lineage)>,
    /// The object version converted, for `lineage` (NULL values without it).
    pub object: Option<ObjectInfo>,
    /// The counter the conversion moves as it reads and decodes, for a watchdog
    /// ([`progress`]); the default watches nothing.
    pub progress: progress::Progress,
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
            batch_bytes: 1 << 20,
            row_group_rows: 1_048_576,
            row_group_bytes: DEFAULT_ROW_GROUP_BYTES,
            page_memory_bytes: DEFAULT_PAGE_MEMORY_BYTES,
            dictionary_bytes: DEFAULT_DICTIONARY_BYTES,
            page_bytes: DEFAULT_PAGE_BYTES,
            max_decoded_bytes: None,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            empty_strings: EmptyStrings::Null,
            csv_columns: CsvColumns::ByPosition,
            zstd_level: 3,
            bad_rows: BadRows::Fail,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(2)),
            columns: Vec::new(),
            unknown_fields: UnknownFields::Ignore,
            bad_values: BadValues::Fail,
            rescue_column: DEFAULT_RESCUE_COLUMN.to_owned(),
            json_keys: KeyMatch::Exact,
            csv_values: CsvValues::default(),
            lineage: Vec::new(),
            object: None,
            progress: progress::Progress::default(),
        }
    }

    /// A spec for `format` input with these columns (their options included).
    pub fn with_columns(format: InputFormat, columns: &[ColumnSpec]) -> Self {
        let mut spec = Self::new(format, crate::schema::arrow_schema(columns));
        spec.columns = columns.to_vec();
        spec
    }

    /// The options of the column `name` (path, format, timezone), if any.
    pub fn options(&self, name: &str) -> Option<&ColumnSpec> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// Whether a policy puts values in the rescued column.
    pub fn rescues(&self) -> bool {
        self.unknown_fields == UnknownFields::Rescue || self.bad_values == BadValues::Rescue
    }

    /// The columns a decoder gives: the schema's, and the rescued column when
    /// [`Self::rescues`].
    pub fn decoded_schema(&self) -> SchemaRef {
        if !self.rescues() {
            return self.schema.clone();
        }
        let mut fields: Vec<_> = self.schema.fields().iter().cloned().collect();
        fields.push(Arc::new(rescue_field(&self.rescue_column)));
        Arc::new(Schema::new(fields))
    }

    /// The columns of the Parquet file: [`Self::decoded_schema`]'s, then the lineage
    /// columns.
    pub fn output_schema(&self) -> SchemaRef {
        if self.lineage.is_empty() {
            return self.decoded_schema();
        }
        let mut fields: Vec<_> = self.decoded_schema().fields().iter().cloned().collect();
        for (name, lineage) in &self.lineage {
            let ty = FieldType::Scalar(lineage.column_type());
            fields.push(Arc::new(ty.arrow_field(name, !lineage.always_set())));
        }
        Arc::new(Schema::new(fields))
    }
}

/// The rescued column: a JSON object per row (NULL when nothing was rescued from it).
pub fn rescue_field(name: &str) -> arrow_schema::Field {
    FieldType::Json.arrow_field(name, true)
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
    /// The conversion made no progress and was abandoned, or its thread died (the
    /// watchdog's verdict, [`progress::Abandoned`]).
    #[error("{0}")]
    Abandoned(#[from] progress::Abandoned),
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
        e.downcast::<ConvertError>()
            .unwrap_or_else(ConvertError::Io)
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
    /// The next batch (possibly of no rows, when every row of it was rejected); `None` at
    /// the end of the input.
    fn next_batch(&mut self) -> Result<Option<RecordBatch>, ConvertError>;

    /// The rows rejected since the last call (under [`BadRows::Reject`]).
    fn take_rejects(&mut self) -> Vec<Rejected> {
        Vec::new()
    }

    /// The values of unknown fields dropped so far (under [`UnknownFields::Ignore`]).
    fn take_ignored(&mut self) -> Ignored {
        Ignored::default()
    }
}

/// `read`, with a panic inside it turned into a [`ConvertError::Parse`]: for readers of
/// untrusted files known to panic on some corrupt ones (`orc-rust` unwraps a block that does
/// not decompress). The reader is dropped with the error, so no state it left half-done is
/// used again. Needs `panic = "unwind"` (the workspace's release profile says why).
fn guarded<T>(read: impl FnOnce() -> Result<T, ConvertError>) -> Result<T, ConvertError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        Err(ConvertError::parse(
            None,
            None,
            format!("not a valid file: its reader failed on it ({what})"),
        ))
    })
}

/// [`Batches`] whose every call is [`guarded`].
struct Guarded<'a>(Box<dyn Batches + 'a>);

impl Batches for Guarded<'_> {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>, ConvertError> {
        guarded(|| self.0.next_batch())
    }

    fn take_rejects(&mut self) -> Vec<Rejected> {
        self.0.take_rejects()
    }

    fn take_ignored(&mut self) -> Ignored {
        self.0.take_ignored()
    }
}

/// Converts `input` as `spec` describes into a Parquet file written to `output`.
///
/// Returns the number of rows, the sums of [`ConvertSpec::sum_columns`] and byte
/// counts. A zero-row input still gives a valid Parquet file with the full schema.
/// On error, `output` holds an incomplete file and must be discarded.
///
/// # Errors
///
/// [`ConvertError::InvalidSpec`] before any input is read; [`ConvertError::Parse`],
/// [`ConvertError::Decompress`], [`ConvertError::TooLarge`] or [`ConvertError::Io`] for
/// the input; [`ConvertError::Encode`] for the output.
///
/// ```
/// use tidemark::{convert::*, schema::*};
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
pub fn convert<R: Read + Send, W: Write + Send>(
    input: R,
    spec: &ConvertSpec,
    output: W,
) -> Result<ConvertStats, ConvertError> {
    decode_into(input, spec, Ok, Encoder::new(output, spec)?)
}

/// [`decode_with`] into `encoder`, which is then closed: on this thread, or with
/// [`ConvertSpec::threads`] above 1, this thread decoding and the columns of each batch
/// encoded on it and the others (see `columns`): two batches are encoded at once and one
/// more waits at most, and compressed input is inflated at most [`input::AHEAD_BYTES`]
/// ahead, so memory grows by a few batches, not by the file.
fn decode_into<R: Read + Send, W: Write + Send>(
    input: R,
    spec: &ConvertSpec,
    mut keep: impl FnMut(RecordBatch) -> Result<RecordBatch, ConvertError>,
    mut encoder: Encoder<'_, W>,
) -> Result<ConvertStats, ConvertError> {
    let (mut stats, encoder) = if spec.threads < 2 {
        let stats = decode_with(input, spec, &mut keep, |batch| encoder.write(batch))?;
        (stats, encoder)
    } else if spec.compression == Compression::None {
        columns::encode_beside(encoder, spec.threads, &|| false, |each| {
            decode_with(input, spec, &mut keep, each)
        })?
    } else {
        // The input is inflated ahead by threads that have nothing to encode (see `input`).
        let decoding = Decoding::new(spec)?;
        let meter = input::Meter::watching(spec.progress.clone());
        let ahead = input::open_ahead(input, spec, &meter)?;
        columns::encode_beside(encoder, spec.threads, &|| ahead.work(), |each| {
            decoding.run(ahead.reader(), &meter, &mut keep, each)
        })?
    };
    stats.row_groups = encoder.close()?;
    Ok(stats)
}

/// The Parquet writer of [`convert`], made when the first [`CHOICE_MIN_ROWS`] rows have
/// arrived so that each column's encoding is chosen from them (see [`column_choices`]).
/// Batches are closed by bytes, so one batch of wide rows can hold fewer than that: the
/// first batches wait in `pending` (a few MiB at most) until there are enough rows.
struct Encoder<'s, W: Write + Send> {
    spec: &'s ConvertSpec,
    /// The file's columns: the spec's output schema, or fewer (a partition's file).
    schema: SchemaRef,
    /// Row groups closed at this many bytes (the spec's, but for [`convert_split`]'s rows
    /// set aside).
    row_group_bytes: usize,
    output: Option<W>,
    file: Option<Columns<W>>,
    pending: Vec<RecordBatch>,
    /// The writer's settings, when they were chosen for it (from other rows than its own:
    /// the files of one partitioned object share the object's first rows' choices).
    chosen: Option<WriterProperties>,
}

impl<'s, W: Write + Send> Encoder<'s, W> {
    /// Checks what of the spec the writer uses, before any input is read.
    fn new(output: W, spec: &'s ConvertSpec) -> Result<Self, ConvertError> {
        Self::with_row_group_bytes(output, spec, spec.row_group_bytes)
    }

    fn with_row_group_bytes(
        output: W,
        spec: &'s ConvertSpec,
        row_group_bytes: usize,
    ) -> Result<Self, ConvertError> {
        Self::for_schema(output, spec, spec.output_schema(), row_group_bytes)
    }

    /// A writer of files of `schema` (the spec's output columns, or some of them), with the
    /// spec's settings.
    fn for_schema(
        output: W,
        spec: &'s ConvertSpec,
        schema: SchemaRef,
        row_group_bytes: usize,
    ) -> Result<Self, ConvertError> {
        writer_builder(spec, row_group_bytes)?;
        Ok(Self {
            spec,
            schema,
            row_group_bytes,
            output: Some(output),
            file: None,
            pending: Vec::new(),
            chosen: None,
        })
    }

    /// The settings of the file, chosen before its first rows (see [`Self::choose`]).
    fn with_properties(mut self, properties: WriterProperties) -> Self {
        self.chosen = Some(properties);
        self
    }

    /// The settings a file of the spec's would have after `first`, its first rows.
    fn choose(
        spec: &ConvertSpec,
        row_group_bytes: usize,
        first: &RecordBatch,
    ) -> Result<WriterProperties, ConvertError> {
        Ok(column_choices(writer_builder(spec, row_group_bytes)?, first, spec).build())
    }

    /// Ends the row group in progress (the rows before the file exists go in its first).
    fn end_row_group(&mut self) -> Result<(), ConvertError> {
        if let Some(file) = self.file.as_mut() {
            file.end_row_group()?;
        }
        Ok(())
    }

    /// Makes the writer, its columns' encodings chosen from the pending batches, and writes
    /// them.
    fn start(&mut self) -> Result<&mut Columns<W>, ConvertError> {
        if let Some(output) = self.output.take() {
            let pending = std::mem::take(&mut self.pending);
            let properties = match self.chosen.take() {
                Some(chosen) => chosen,
                None if pending.is_empty() => {
                    writer_builder(self.spec, self.row_group_bytes)?.build()
                }
                None => {
                    let first = arrow_select::concat::concat_batches(&self.schema, &pending)
                        .map_err(|e| ConvertError::Encode {
                            message: e.to_string(),
                        })?;
                    Self::choose(self.spec, self.row_group_bytes, &first)?
                }
            };
            let file = self.file.insert(Columns::new(
                output,
                self.schema.clone(),
                properties,
                self.spec.page_memory_bytes,
            )?);
            for batch in &pending {
                file.write(batch)?;
            }
        }
        Ok(self.file.as_mut().expect("made above"))
    }

    fn write(&mut self, batch: &RecordBatch) -> Result<(), ConvertError> {
        if let Some(file) = self.file.as_mut() {
            file.write(batch)?;
            return Ok(());
        }
        if batch.num_rows() == 0 {
            return Ok(()); // choose from rows, not from a batch whose rows were all rejected
        }
        self.pending.push(batch.clone());
        if self.chosen.is_some()
            || self
                .pending
                .iter()
                .map(RecordBatch::num_rows)
                .sum::<usize>()
                >= CHOICE_MIN_ROWS
        {
            self.start()?;
        }
        Ok(())
    }

    /// Finishes the file; returns its number of row groups.
    fn close(mut self) -> Result<usize, ConvertError> {
        self.start()?;
        Ok(self.file.expect("made above").close()?)
    }
}

impl<W: Write + Send> columns::Sink for Encoder<'_, W> {
    type Output = W;

    fn write_before_file(&mut self, batch: &RecordBatch) -> Result<bool, ConvertError> {
        if self.file.is_some() {
            return Ok(false);
        }
        self.write(batch)?;
        Ok(true)
    }

    fn file(&mut self) -> Option<&mut Columns<W>> {
        self.file.as_mut()
    }
}

/// Rows below which the first values say too little to turn a column's dictionary off.
const CHOICE_MIN_ROWS: usize = 1_000;

/// The dictionary page limit of the Parquet writer (its default, 1 MiB): a column whose
/// dictionary grows past it falls back to plain encoding for the rest of the row group.
const DICTIONARY_LIMIT: f64 = (1 << 20) as f64;

/// `properties` with each column's encoding chosen from `batch`, the first rows of the
/// file. A dictionary is turned off where the first values predict that within the first
/// half of a row group it would pass its page limit — a dictionary that fills up costs the
/// time to build it and then falls back to plain encoding anyway (ids, times, free text) —
/// or take more than `spec.dictionary_bytes` of memory while it is built: the writer
/// looks every value up in its dictionary, and a dictionary larger than the CPU's cache
/// makes each lookup wait on memory (50,000 product codes: 15% of a file's CPU;
/// BENCHMARKS.md, "Dictionaries that fit the cache"). It is left on
/// where values repeat within that bound (codes, categories, countries). For an
/// integer, date or timestamp column without a dictionary, `DELTA_BINARY_PACKED` is chosen
/// when the differences between neighbours take at most half the bits of the values (ids
/// counting up, times in order, small numbers), which gives zstd far fewer bytes.
fn column_choices(
    mut properties: WriterPropertiesBuilder,
    batch: &RecordBatch,
    spec: &ConvertSpec,
) -> WriterPropertiesBuilder {
    if batch.num_rows() < CHOICE_MIN_ROWS {
        return properties;
    }
    let mut leaves = Vec::new();
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        leaf_columns(vec![field.name().clone()], column, &mut leaves);
    }
    for (path, column) in leaves {
        let Some(profile) = profile(column.as_ref()) else {
            continue;
        };
        let expected = profile.expected_distinct(spec.row_group_rows / 2);
        let building = expected * (profile.value_bytes + profile.entry_overhead);
        if expected * profile.value_bytes <= DICTIONARY_LIMIT
            && building <= spec.dictionary_bytes as f64
        {
            continue;
        }
        let path = ColumnPath::new(path);
        properties = properties.set_column_dictionary_enabled(path.clone(), false);
        if let Some((delta_bits, bits)) = profile.delta_bits
            && delta_bits * 2 <= bits
        {
            properties = properties.set_column_encoding(path, Encoding::DELTA_BINARY_PACKED);
        }
    }
    properties
}

/// The leaf columns of `column` (named `path` in the Parquet file) with their values: a
/// scalar column is its own leaf; a struct's leaves are its fields' (`a.b`), a list's its
/// elements' (`a.list.element`), a map's its keys' and values' (`a.key_value.key`), as
/// arrow-rs names them in the file.
fn leaf_columns(path: Vec<String>, column: &ArrayRef, out: &mut Vec<(Vec<String>, ArrayRef)>) {
    use arrow_array::cast::AsArray;
    use arrow_schema::DataType;
    let child = |name: &str| {
        let mut p = path.clone();
        p.push(name.to_owned());
        p
    };
    match column.data_type() {
        DataType::Struct(fields) => {
            for (field, values) in fields.iter().zip(column.as_struct().columns()) {
                leaf_columns(child(field.name()), values, out);
            }
        }
        DataType::List(element) => {
            let mut p = child("list");
            p.push(element.name().clone());
            leaf_columns(p, column.as_list::<i32>().values(), out);
        }
        DataType::Map(entries, _) => {
            let map = column.as_map();
            let DataType::Struct(kv) = entries.data_type() else {
                return;
            };
            let base = child(entries.name());
            for (field, values) in kv.iter().zip([map.keys(), map.values()]) {
                let mut p = base.clone();
                p.push(field.name().clone());
                leaf_columns(p, values, out);
            }
        }
        _ => out.push((path, column.clone())),
    }
}

/// Distinct values expected among `rows` values drawn like the `count` seen, of which
/// `distinct` differed: the number of equally likely values `v` for which `count` draws give
/// `distinct` different ones on average (`v (1 - e^(-count/v))`), then the same for `rows`.
fn expected_distinct(count: usize, distinct: usize, rows: usize) -> f64 {
    let (count, distinct, rows) = (count as f64, distinct as f64, rows as f64);
    if distinct >= count {
        return rows;
    }
    let drawn = |v: f64, n: f64| v * -(-n / v).exp_m1();
    let (mut low, mut high) = (distinct, 1e15_f64);
    for _ in 0..200 {
        let middle = (low * high).sqrt();
        if drawn(middle, count) < distinct {
            low = middle;
        } else {
            high = middle;
        }
    }
    drawn(high, rows)
}

/// What [`column_choices`] reads from a column's first values.
struct Profile {
    /// Non-NULL values.
    count: usize,
    /// Distinct values among them.
    distinct: usize,
    /// Bytes a distinct value takes in a dictionary page, on average.
    value_bytes: f64,
    /// Bytes the writer keeps for each distinct value beside the value itself while it
    /// builds the dictionary: a hash slot (≈ 16 bytes: 9 per slot, the table between
    /// half and seven eighths full), and for strings their offsets in the page (16).
    entry_overhead: f64,
    /// For integer-like columns: bits of the spread of neighbours' differences, and bits
    /// of the type.
    delta_bits: Option<(u32, u32)>,
    /// Distinct values among the first half of the values, among the second half, and in
    /// both.
    halves: (usize, usize, usize),
}

impl Profile {
    /// Distinct values expected among the first `rows`: the larger of two estimates.
    /// [`expected_distinct`] takes the values for draws from a fixed set, which holds for
    /// codes and categories but not for values that keep arriving new with a few repeats
    /// (times in order with several rows per second, ids of sessions): the first rows of a
    /// CloudTrail file have 1,123 distinct times in 1,352, which that model reads as about
    /// 3,500 times in all. The second estimate counts the set by capture and recapture
    /// (Lincoln–Petersen): the halves' distinct values multiplied, over those the halves
    /// share. Fresh values share almost none, so the set is as large as the rows. Used only
    /// when each half has at least [`HALF_DISTINCT`] values, so that a sorted column of a
    /// few values (one in each half) is not taken for fresh values.
    fn expected_distinct(&self, rows: usize) -> f64 {
        let model = expected_distinct(self.count, self.distinct, rows);
        let (first, second, both) = self.halves;
        if first < HALF_DISTINCT || second < HALF_DISTINCT {
            return model;
        }
        if both == 0 {
            return rows as f64;
        }
        let set = first as f64 * second as f64 / both as f64;
        let drawn = set * -(-(rows as f64) / set).exp_m1();
        model.max(drawn.min(rows as f64))
    }
}

/// Distinct values each half of a column's first values must have for
/// [`Profile::expected_distinct`] to count the set by capture and recapture.
const HALF_DISTINCT: usize = 32;

/// The [`Profile`] of `column` (`None`: a type whose dictionary is left on, or no values).
fn profile(column: &dyn arrow_array::Array) -> Option<Profile> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{
        Date32Type, Decimal128Type, Float64Type, Int32Type, Int64Type, TimestampMicrosecondType,
    };

    /// The difference of two integers, and the bits of their type.
    type Delta<'a, T> = (&'a dyn Fn(T, T) -> i128, u32);

    /// A dictionary entry's hash slot, and a string's offsets (see [`Profile`]).
    const SLOT: f64 = 16.0;
    const OFFSETS: f64 = 16.0;

    /// The profile of `values` (about `expected` of them), each taking `size(value)` bytes
    /// in a dictionary page and `entry_overhead` more while the dictionary is built. The
    /// set of distinct values is sized for them all and hashed with foldhash: with the
    /// standard library's SipHash and growing as it went, profiling the first batch of
    /// orders CSV (8,192 rows, 11 columns) took 37 M instructions, 4.8% of converting
    /// 100,000 rows.
    fn of<T: std::hash::Hash + Eq + Copy>(
        values: impl Iterator<Item = T>,
        expected: usize,
        size: impl Fn(T) -> usize,
        entry_overhead: f64,
        delta: Option<Delta<'_, T>>,
    ) -> Option<Profile> {
        use foldhash::HashMapExt;
        // Each value's halves: 1 for the first, 2 for the second.
        let mut seen = foldhash::HashMap::<T, u8>::with_capacity(expected);
        let (mut count, mut bytes, mut previous) = (0usize, 0usize, None);
        let (mut low, mut high) = (i128::MAX, i128::MIN);
        let half = expected / 2;
        for value in values {
            let bit = if count < half { 1 } else { 2 };
            count += 1;
            match seen.entry(value) {
                std::collections::hash_map::Entry::Occupied(mut e) => *e.get_mut() |= bit,
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(bit);
                    bytes += size(value);
                }
            }
            if let (Some((difference, _)), Some(p)) = (delta, previous) {
                let d = difference(value, p);
                (low, high) = (low.min(d), high.max(d));
            }
            previous = Some(value);
        }
        if count == 0 {
            return None;
        }
        let spread = high.saturating_sub(low).max(0) as u128;
        let mut halves = (0, 0, 0);
        for &bits in seen.values() {
            halves.0 += usize::from(bits & 1 != 0);
            halves.1 += usize::from(bits & 2 != 0);
            halves.2 += usize::from(bits == 3);
        }
        Some(Profile {
            halves,
            count,
            distinct: seen.len(),
            value_bytes: bytes as f64 / seen.len() as f64,
            entry_overhead,
            delta_bits: delta.map(|(_, bits)| (u128::BITS - spread.leading_zeros(), bits)),
        })
    }
    let values = column.len() - column.null_count();
    let wide = |a: i64, b: i64| i128::from(a) - i128::from(b);
    let narrow = |a: i32, b: i32| i128::from(a) - i128::from(b);
    if let Some(a) = column.as_string_opt::<i32>() {
        // A string in a dictionary page: its bytes after a 4-byte length.
        of(
            a.iter().flatten(),
            values,
            |s: &str| s.len() + 4,
            SLOT + OFFSETS,
            None,
        )
    } else if let Some(a) = column.as_primitive_opt::<Int64Type>() {
        of(a.iter().flatten(), values, |_| 8, SLOT, Some((&wide, 64)))
    } else if let Some(a) = column.as_primitive_opt::<TimestampMicrosecondType>() {
        of(a.iter().flatten(), values, |_| 8, SLOT, Some((&wide, 64)))
    } else if let Some(a) = column.as_primitive_opt::<Int32Type>() {
        of(a.iter().flatten(), values, |_| 4, SLOT, Some((&narrow, 32)))
    } else if let Some(a) = column.as_primitive_opt::<Date32Type>() {
        of(a.iter().flatten(), values, |_| 4, SLOT, Some((&narrow, 32)))
    } else if let Some(a) = column.as_primitive_opt::<Float64Type>() {
        of(
            a.iter().flatten().map(f64::to_bits),
            values,
            |_| 8,
            SLOT,
            None,
        )
    } else if let Some(a) = column.as_primitive_opt::<Decimal128Type>() {
        of(a.iter().flatten(), values, |_| 16, SLOT, None)
    } else {
        None
    }
}

/// The writer settings every output shares (`max_bytes`: row group size in bytes at most).
fn writer_builder(
    spec: &ConvertSpec,
    max_bytes: usize,
) -> Result<WriterPropertiesBuilder, ConvertError> {
    if spec.row_group_rows == 0 {
        return Err(ConvertError::invalid_spec(
            "row_group_rows must be positive",
        ));
    }
    if max_bytes == 0 {
        return Err(ConvertError::invalid_spec(
            "row_group_bytes must be positive",
        ));
    }
    if spec.page_bytes == 0 {
        return Err(ConvertError::invalid_spec("page_bytes must be positive"));
    }
    let level = ZstdLevel::try_new(spec.zstd_level)
        .map_err(|e| ConvertError::invalid_spec(format!("zstd_level {}: {e}", spec.zstd_level)))?;
    let mut builder = WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(level))
        .set_max_row_group_row_count(Some(spec.row_group_rows))
        .set_max_row_group_bytes(Some(max_bytes))
        .set_data_page_size_limit(spec.page_bytes)
        .set_dictionary_enabled(true)
        .set_statistics_enabled(EnabledStatistics::Page);
    // A JSON text's minimum and maximum select nothing a reader would ask for, and comparing
    // every value of long texts took 2-3% of a CloudTrail conversion: none are written.
    let mut texts = Vec::new();
    for field in spec.output_schema().fields() {
        json_leaves(vec![field.name().clone()], field, &mut texts);
    }
    for path in texts {
        builder =
            builder.set_column_statistics_enabled(ColumnPath::new(path), EnabledStatistics::None);
    }
    Ok(builder)
}

/// The leaf paths of the `json` columns and fields in `field` (named `path`), as arrow-rs
/// names them in the file (see [`leaf_columns`]).
fn json_leaves(path: Vec<String>, field: &arrow_schema::Field, out: &mut Vec<Vec<String>>) {
    use arrow_schema::DataType;
    let child = |name: &str| {
        let mut p = path.clone();
        p.push(name.to_owned());
        p
    };
    match field.data_type() {
        DataType::Struct(fields) => {
            for f in fields {
                json_leaves(child(f.name()), f, out);
            }
        }
        DataType::List(element) => {
            let mut p = child("list");
            p.push(element.name().clone());
            json_leaves(p, element, out);
        }
        DataType::Map(entries, _) => {
            if let DataType::Struct(kv) = entries.data_type() {
                for f in kv {
                    let mut p = child(entries.name());
                    p.push(f.name().clone());
                    json_leaves(p, f, out);
                }
            }
        }
        _ if FieldType::from_field(field) == Some(FieldType::Json) => out.push(path),
        _ => {}
    }
}

/// A row filter of [`convert_split`]: for each decoded batch, the rows to keep and the rows
/// to set aside (`None`: none).
pub type Split<'a> =
    dyn FnMut(&RecordBatch) -> Result<(RecordBatch, Option<RecordBatch>), ConvertError> + 'a;

/// [`convert`], with each decoded batch passed through `split` before anything else: only
/// the rows it keeps are counted (rows, sums) and written to `output`; the rows it sets
/// aside are written as a second Parquet file to `aside` (same schema and settings, row
/// groups closed at 8 MiB), or discarded when `aside` is `None`. Each file's columns are
/// encoded as [`convert`] chooses, from its own first rows. Row-level bookmark keys use
/// it (see [`crate::bookmark`]).
///
/// With [`ConvertSpec::threads`] above 1, `output`'s columns are encoded on all the
/// threads as in [`convert`] (the same bytes whatever the number); `split` and `aside`'s
/// writer run on the decoding thread.
pub fn convert_split<R: Read + Send, W: Write + Send, A: Write + Send>(
    input: R,
    spec: &ConvertSpec,
    output: W,
    split: &mut Split<'_>,
    aside: Option<A>,
) -> Result<ConvertStats, ConvertError> {
    let encoder = Encoder::new(output, spec)?;
    let mut aside = aside
        .map(|a| Encoder::with_row_group_bytes(a, spec, 8 << 20))
        .transpose()?;
    let keep = |batch: RecordBatch| {
        let (kept, set_aside) = split(&batch)?;
        if let (Some(e), Some(b)) = (aside.as_mut(), set_aside) {
            e.write(&b)?;
        }
        Ok(kept)
    };
    let stats = decode_into(input, spec, keep, encoder)?;
    if let Some(e) = aside {
        e.close()?;
    }
    Ok(stats)
}

/// Decode `input` as [`convert`] does and count its rows and sums, writing nothing: the
/// honest recount of a source object that reconciliation compares with the ledger.
pub fn count<R: Read + Send>(input: R, spec: &ConvertSpec) -> Result<ConvertStats, ConvertError> {
    // Lineage columns are neither counted nor summed: they need no object version here.
    let mut spec = spec.clone();
    spec.lineage.clear();
    decode(input, &spec, |_| Ok(()))
}

/// Decode `input` as [`convert`] does and hand each batch (in the spec's output schema) to
/// `each`, writing nothing: schema inference counts the values of each column with it.
pub fn read<R: Read + Send>(
    input: R,
    spec: &ConvertSpec,
    each: impl FnMut(&RecordBatch) -> Result<(), ConvertError>,
) -> Result<ConvertStats, ConvertError> {
    decode(input, spec, each)
}

/// The top-level fields of a Parquet, Avro or ORC file (`spec`'s format and compression),
/// as its reader in [`convert`] reads them: from the footer or the header, no row read. Read
/// as a conversion reads the file: the decompressed input counts against
/// [`ConvertSpec::max_decoded_bytes`] and moves the spec's progress, and a panic of the
/// reader fails the file as invalid.
pub fn file_fields<R: Read + Send>(
    input: R,
    spec: &ConvertSpec,
) -> Result<arrow_schema::Fields, ConvertError> {
    let meter = input::Meter::watching(spec.progress.clone());
    let reader = input::open(input, spec, &meter)?;
    guarded(|| match spec.format {
        InputFormat::Parquet => parquet_input::fields(reader),
        InputFormat::Avro => avro::fields(reader, spec),
        InputFormat::Orc => orc::fields(reader),
        _ => Err(ConvertError::invalid_spec(
            "only Parquet, Avro and ORC files carry their fields",
        )),
    })
}

/// Rows and sums of `columns` in a Parquet file (an output, read back).
pub fn tally_parquet(
    body: bytes::Bytes,
    columns: &[String],
) -> Result<(u64, BTreeMap<String, SumValue>), ConvertError> {
    use arrow_array::RecordBatchReader;
    let reader =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(body)?.build()?;
    let mut tally = BatchTally::new(&reader.schema(), columns)?;
    for batch in reader {
        tally.add(&batch.map_err(|e| ConvertError::Encode {
            message: e.to_string(),
        })?)?;
    }
    Ok(tally.finish())
}

/// Rows and sums of `columns` over batches read back from Parquet, in the order they come:
/// what [`tally_parquet`] counts, for a caller that reads the batches itself (reconcile
/// streams an output's sum columns by ranged reads, one row group at a time). The batches
/// may hold only some of the file's columns, as long as they hold the summed ones.
pub struct BatchTally {
    rows: u64,
    sums: stats::Sums,
}

impl BatchTally {
    /// A tally of `columns`, each a summable column of `schema` (the batches' schema).
    pub fn new(schema: &Schema, columns: &[String]) -> Result<Self, ConvertError> {
        let types = column_types(schema)?;
        Ok(Self {
            rows: 0,
            sums: stats::Sums::new(schema, &types, columns)?,
        })
    }

    /// Count the rows of `batch` and add its values.
    pub fn add(&mut self, batch: &RecordBatch) -> Result<(), ConvertError> {
        self.rows += batch.num_rows() as u64;
        self.sums.add(batch)
    }

    /// The rows and the sums by column.
    pub fn finish(self) -> (u64, BTreeMap<String, SumValue>) {
        (self.rows, self.sums.finish())
    }
}

fn decode<R: Read + Send>(
    input: R,
    spec: &ConvertSpec,
    each: impl FnMut(&RecordBatch) -> Result<(), ConvertError>,
) -> Result<ConvertStats, ConvertError> {
    decode_with(input, spec, Ok, each)
}

/// [`decode`], each batch first passed through `keep` (what it returns is counted and given
/// to `each`).
fn decode_with<R: Read + Send>(
    input: R,
    spec: &ConvertSpec,
    keep: impl FnMut(RecordBatch) -> Result<RecordBatch, ConvertError>,
    each: impl FnMut(&RecordBatch) -> Result<(), ConvertError>,
) -> Result<ConvertStats, ConvertError> {
    let decoding = Decoding::new(spec)?;
    let meter = input::Meter::watching(spec.progress.clone());
    let reader = input::open(input, spec, &meter)?;
    decoding.run(reader, &meter, keep, each)
}

/// A decoding whose spec has been checked, before any input is read.
struct Decoding<'s> {
    spec: &'s ConvertSpec,
    types: Vec<FieldType>,
    sums: stats::Sums,
}

impl<'s> Decoding<'s> {
    fn new(spec: &'s ConvertSpec) -> Result<Self, ConvertError> {
        if spec.batch_rows == 0 || spec.batch_bytes == 0 || spec.max_record_bytes == 0 {
            return Err(ConvertError::invalid_spec(
                "batch_rows, batch_bytes and max_record_bytes must be positive",
            ));
        }
        let types = column_types(&spec.schema)?;
        let sums = stats::Sums::new(&spec.schema, &types, &spec.sum_columns)?;
        let output = spec.output_schema();
        let mut names = HashSet::new();
        if let Some(name) = output
            .fields()
            .iter()
            .map(|f| f.name())
            .find(|n| !names.insert(*n))
        {
            return Err(ConvertError::invalid_spec(format!(
                "duplicate column {name:?} (a schema column, the rescued column or a lineage column)"
            )));
        }
        Ok(Self { spec, types, sums })
    }

    /// Decodes the byte stream `reader` (counted by `meter`): see [`decode_with`].
    fn run(
        mut self,
        reader: impl BufRead,
        meter: &input::Meter,
        mut keep: impl FnMut(RecordBatch) -> Result<RecordBatch, ConvertError>,
        mut each: impl FnMut(&RecordBatch) -> Result<(), ConvertError>,
    ) -> Result<ConvertStats, ConvertError> {
        let (spec, types) = (self.spec, self.types);
        let mut batches: Box<dyn Batches + '_> = match spec.format {
            InputFormat::Csv(options)
                if options.header && spec.csv_columns == CsvColumns::ByName =>
            {
                Box::new(header::open(reader, options, spec)?)
            }
            InputFormat::Csv(options) => {
                let types = scalar_types(&spec.schema, "CSV")?;
                Box::new(csv::CsvBatches::new(reader, options, spec, types)?)
            }
            InputFormat::JsonLines => Box::new(json::JsonBatches::new(reader, spec)?),
            // The columnar readers panic on some corrupt files (parquet-rs and arrow-rs on
            // pages whose levels or lengths lie, found by fuzzing): a panic fails the file
            // as invalid, naming it, as any bad input.
            InputFormat::Parquet => {
                let opened = guarded(|| parquet_input::batches(reader, spec, &types))?;
                Box::new(Guarded(Box::new(opened)))
            }
            InputFormat::Avro => {
                let opened = guarded(|| avro::batches(reader, spec, &types))?;
                Box::new(Guarded(Box::new(opened)))
            }
            InputFormat::Orc => {
                let opened = guarded(|| orc::batches(reader, spec, &types))?;
                Box::new(Guarded(Box::new(opened)))
            }
        };
        drop(types);
        let decoded = spec.decoded_schema();
        let output = spec.output_schema();
        let mut lineage = LineageColumns::new(spec);
        let mut rows = 0;
        let mut rescued_rows = 0;
        let mut rejects = Vec::new();
        while let Some(batch) = batches.next_batch()? {
            rejects.extend(batches.take_rejects());
            let batch = with_rescue_column(batch, &decoded)?;
            if spec.rescues() {
                let rescued = batch.column(decoded.fields().len() - 1);
                rescued_rows += (rescued.len() - rescued.null_count()) as u64;
            }
            let batch = lineage.append(batch, &output)?;
            spec.progress.tick(batch.num_rows() as u64);
            let batch = keep(batch)?;
            rows += batch.num_rows() as u64;
            self.sums.add(&batch)?;
            each(&batch)?;
        }
        rejects.extend(batches.take_rejects());
        Ok(ConvertStats {
            rows,
            sums: self.sums.finish(),
            bytes_read: meter.read(),
            bytes_decoded: meter.decoded(),
            row_groups: 0,
            rejects,
            rescued_rows,
            ignored: batches.take_ignored().trimmed(),
        })
    }
}

/// `batch` with the rescued column of `decoded` (all NULL) when its decoder gives none.
fn with_rescue_column(
    batch: RecordBatch,
    decoded: &SchemaRef,
) -> Result<RecordBatch, ConvertError> {
    if batch.num_columns() == decoded.fields().len() {
        return Ok(batch);
    }
    let mut columns = batch.columns().to_vec();
    for field in &decoded.fields()[columns.len()..] {
        columns.push(arrow_array::new_null_array(
            field.data_type(),
            batch.num_rows(),
        ));
    }
    RecordBatch::try_new(decoded.clone(), columns).map_err(|e| ConvertError::Encode {
        message: format!("cannot add the rescued column: {e}"),
    })
}

/// The lineage columns of the batches of one object: the same values for every row, and
/// row numbers counting on from batch to batch.
struct LineageColumns<'s> {
    spec: &'s ConvertSpec,
    rows: i64,
}

impl<'s> LineageColumns<'s> {
    fn new(spec: &'s ConvertSpec) -> Self {
        Self { spec, rows: 0 }
    }

    /// `batch` (of the decoded schema) with the lineage columns of `output` after it.
    fn append(
        &mut self,
        batch: RecordBatch,
        output: &SchemaRef,
    ) -> Result<RecordBatch, ConvertError> {
        use arrow_array::{ArrayRef, Int64Array, StringArray, TimestampMicrosecondArray};
        let first = self.rows;
        let n = batch.num_rows();
        self.rows += n as i64;
        if self.spec.lineage.is_empty() {
            return Ok(batch);
        }
        let object = self.spec.object.as_ref();
        let text = |value: Option<&str>| -> ArrayRef {
            Arc::new(StringArray::from_iter(std::iter::repeat_n(value, n)))
        };
        let mut columns = batch.columns().to_vec();
        for (_, lineage) in &self.spec.lineage {
            columns.push(match lineage {
                Lineage::Key => text(object.map(|o| o.key.as_str())),
                Lineage::VersionId => text(object.and_then(|o| o.version_id.as_deref())),
                Lineage::Etag => text(object.map(|o| o.etag.as_str())),
                Lineage::LastModified => Arc::new(
                    TimestampMicrosecondArray::from_iter(std::iter::repeat_n(
                        object.map(|o| o.last_modified_ms.saturating_mul(1000)),
                        n,
                    ))
                    .with_timezone("+00:00"),
                ),
                Lineage::RowNumber => Arc::new(Int64Array::from_iter_values(
                    (first + 1)..=(first + n as i64),
                )),
            });
        }
        RecordBatch::try_new(output.clone(), columns).map_err(|e| ConvertError::Encode {
            message: if object.is_none() {
                format!("cannot add the lineage columns (no object version was given): {e}")
            } else {
                format!("cannot add the lineage columns: {e}")
            },
        })
    }
}

/// The type of every field, rejecting schemas the readers cannot honour.
fn column_types(schema: &Schema) -> Result<Vec<FieldType>, ConvertError> {
    if schema.fields().is_empty() {
        return Err(ConvertError::invalid_spec("the schema has no columns"));
    }
    let mut names = HashSet::new();
    schema
        .fields()
        .iter()
        .map(|f| {
            if !names.insert(f.name()) {
                return Err(ConvertError::invalid_spec(format!(
                    "duplicate column {:?}",
                    f.name()
                )));
            }
            FieldType::from_field(f).ok_or_else(|| {
                ConvertError::invalid_spec(format!(
                    "column {:?} has unsupported type {}",
                    f.name(),
                    f.data_type()
                ))
            })
        })
        .collect()
}

/// The scalar type of every field, for a reader of scalar columns only (`format` names it).
fn scalar_types(schema: &Schema, format: &str) -> Result<Vec<ColumnType>, ConvertError> {
    column_types(schema)?
        .into_iter()
        .zip(schema.fields())
        .map(|(ty, field)| {
            ty.scalar().ok_or_else(|| {
                ConvertError::invalid_spec(format!(
                    "column {:?} is {ty}: {format} input is read into scalar columns only",
                    field.name()
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::io::{self, Read, Write};

    use super::testutil::*;
    use super::*;

    #[test]
    fn csv_of_every_type_round_trips() {
        let spec = csv_spec(ALL_TYPES);
        let (stats, parquet) = run(ALL_TYPES_CSV, &spec);
        assert_eq!(parquet.rows, all_types_rows());
        assert_eq!(stats.rows, 3);
        assert_eq!(stats.row_groups, 1);
        assert_eq!(stats.bytes_read, ALL_TYPES_CSV.len() as u64);
        assert_eq!(stats.bytes_decoded, ALL_TYPES_CSV.len() as u64);
        assert!(!parquet.schema.field(0).is_nullable(), "id stays required");
    }

    #[test]
    fn json_lines_give_the_same_rows_and_sums_as_csv() {
        let sum_columns: Vec<String> = ["id", "qty", "price", "ratio", "weight"]
            .map(String::from)
            .into();
        let mut csv = csv_spec(ALL_TYPES);
        csv.sum_columns = sum_columns.clone();
        let mut json = json_spec(ALL_TYPES);
        json.sum_columns = sum_columns;
        let (csv_stats, csv_file) = run(ALL_TYPES_CSV, &csv);
        let (json_stats, json_file) = run(ALL_TYPES_JSONL, &json);
        assert_eq!(json_file.rows, csv_file.rows);
        assert_eq!(json_stats.sums, csv_stats.sums);
        let sums: Vec<String> = csv_stats.sums.values().map(ToString::to_string).collect();
        // BTreeMap order: id, price, qty, ratio, weight
        assert_eq!(sums, ["6", "-12.00", "7", "1000.5", "3.75"]);
    }

    #[test]
    fn sums_are_exact_and_typed() {
        let mut spec = csv_spec(
            r#"[{"name":"a","type":"decimal(12,2)"},{"name":"b","type":"int64"},{"name":"c","type":"float64"}]"#,
        );
        spec.sum_columns = vec!["a".into(), "b".into(), "c".into(), "a".into()];
        let (stats, _) = run(
            "a,b,c\n0.10,9223372036854775807,0.1\n0.20,9223372036854775807,0.2\n,,\n",
            &spec,
        );
        assert_eq!(
            stats.sums["a"],
            SumValue::Decimal {
                unscaled: 30,
                scale: 2
            }
        );
        assert_eq!(stats.sums["a"].to_string(), "0.30");
        assert_eq!(stats.sums["b"].to_string(), "18446744073709551614");
        assert_eq!(stats.sums["c"], SumValue::Float(0.1 + 0.2));
        let json = serde_json::to_value(&stats).unwrap();
        assert_eq!(
            json["sums"],
            serde_json::json!({"a": "0.30", "b": "18446744073709551614", "c": "0.30000000000000004"})
        );
    }

    #[test]
    fn zero_rows_give_a_valid_file_with_the_schema() {
        let mut csv = csv_spec(ALL_TYPES);
        csv.sum_columns = vec!["price".into()];
        let (stats, parquet) = run(ALL_TYPES_CSV.lines().next().unwrap(), &csv);
        assert_eq!(
            (stats.rows, stats.row_groups, parquet.rows.len()),
            (0, 0, 0)
        );
        assert_eq!(stats.sums["price"].to_string(), "0.00");
        for input in ["", "\n\n"] {
            let (stats, parquet) = run(input, &json_spec(ALL_TYPES));
            assert_eq!((stats.rows, parquet.rows.len()), (0, 0));
            assert_eq!(parquet.schema.fields().len(), 9);
        }
        let (stats, _) = run("", &csv);
        assert_eq!(stats.rows, 0, "not even a header");
    }

    #[test]
    fn gzip_and_zstd_inputs() {
        let mut spec = csv_spec(ALL_TYPES);
        for (compression, bytes) in [
            (Compression::Gzip, gzip(ALL_TYPES_CSV.as_bytes())),
            (Compression::Zstd, zstd(ALL_TYPES_CSV.as_bytes())),
        ] {
            spec.compression = compression;
            let (stats, parquet) = run(&bytes, &spec);
            assert_eq!(parquet.rows, all_types_rows(), "{compression}");
            assert_eq!(stats.bytes_read, bytes.len() as u64);
            assert_eq!(stats.bytes_decoded, ALL_TYPES_CSV.len() as u64);
        }
    }

    #[test]
    fn multi_member_gzip_is_read_to_the_end() {
        let (header, body) = ALL_TYPES_CSV.split_once('\n').unwrap();
        let mut spec = csv_spec(ALL_TYPES);
        spec.compression = Compression::Gzip;
        let input = [
            gzip(format!("{header}\n").as_bytes()),
            gzip(body.as_bytes()),
            gzip(body.as_bytes()),
        ]
        .concat();
        let (stats, parquet) = run(&input, &spec);
        assert_eq!(stats.rows, 6);
        assert_eq!(parquet.rows[3..], all_types_rows()[..]);
    }

    #[test]
    fn corrupt_compressed_input_is_a_decompression_error() {
        let gz = gzip(ALL_TYPES_CSV.as_bytes());
        let zst = zstd(ALL_TYPES_CSV.as_bytes());
        let mut spec = csv_spec(ALL_TYPES);
        for (compression, input) in [
            (Compression::Gzip, &gz[..gz.len() - 10]),
            (Compression::Gzip, &gz[..gz.len() / 2]),
            (Compression::Gzip, ALL_TYPES_CSV.as_bytes()),
            (Compression::Zstd, &zst[..zst.len() - 3]),
            (Compression::Zstd, ALL_TYPES_CSV.as_bytes()),
        ] {
            spec.compression = compression;
            let err = fail(input, &spec);
            assert!(
                matches!(err, ConvertError::Decompress { .. }),
                "{compression}: {err:?}"
            );
            assert!(
                err.to_string()
                    .starts_with(&format!("cannot decompress input: {compression}: ")),
                "{err}"
            );
        }
    }

    /// Yields `data`, then fails.
    struct Failing<'a>(&'a [u8]);

    impl Read for Failing<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.0.read(buf)? {
                0 => Err(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    "connection reset",
                )),
                n => Ok(n),
            }
        }
    }

    #[test]
    fn a_failing_source_is_an_io_error_even_under_a_decompressor() {
        let gz = gzip(ALL_TYPES_CSV.as_bytes());
        for (compression, input) in [
            (Compression::None, ALL_TYPES_CSV.as_bytes()),
            (Compression::Gzip, &gz[..20]),
        ] {
            let mut spec = csv_spec(ALL_TYPES);
            spec.compression = compression;
            let err = convert(Failing(input), &spec, Vec::new()).unwrap_err();
            match err {
                ConvertError::Io(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset),
                e => panic!("{compression}: {e:?}"),
            }
        }
    }

    /// A gzip member of `MIB` MiB of zeros, compressed once and streamed as often as
    /// asked: a bomb of any size in little memory.
    struct Bomb {
        member: Vec<u8>,
        left: usize,
        at: usize,
    }

    const MIB: usize = 1 << 20;

    impl Bomb {
        fn new(mib: usize) -> Self {
            Self {
                member: gzip(&vec![0; MIB]),
                left: mib,
                at: 0,
            }
        }
    }

    impl Read for Bomb {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.at == self.member.len() {
                if self.left == 0 {
                    return Ok(0);
                }
                (self.left, self.at) = (self.left - 1, 0);
            }
            let n = (&self.member[self.at..]).read(buf)?;
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn a_gzip_bomb_is_stopped_at_the_limit() {
        let mut spec = csv_spec(ALL_TYPES);
        spec.compression = Compression::Gzip;
        spec.max_decoded_bytes = Some(10 * MIB as u64);
        // Zeros are one endless record: the record limit would stop them first.
        spec.max_record_bytes = usize::MAX;
        let err = convert(Bomb::new(1024), &spec, Vec::new()).unwrap_err();
        assert!(
            matches!(err, ConvertError::TooLarge { limit } if limit == 10 * MIB as u64),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "decompressed input exceeds the limit of 10485760 bytes"
        );

        let mut spec = json_spec(ALL_TYPES);
        spec.max_decoded_bytes = Some(ALL_TYPES_JSONL.len() as u64 - 1);
        assert!(matches!(
            fail(ALL_TYPES_JSONL, &spec),
            ConvertError::TooLarge { .. }
        ));
        spec.max_decoded_bytes = Some(ALL_TYPES_JSONL.len() as u64);
        assert_eq!(
            run(ALL_TYPES_JSONL, &spec).0.rows,
            3,
            "the limit itself is allowed"
        );
    }

    /// `head`, then `filler` up to `len` bytes in all, made as they are read, counting
    /// what was read: a line of any length in no memory.
    struct Endless {
        head: &'static [u8],
        filler: u8,
        len: u64,
        pulled: Arc<std::sync::atomic::AtomicU64>,
    }

    impl Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let at = self.pulled.load(std::sync::atomic::Ordering::Relaxed);
            let n = buf.len().min((self.len - at) as usize);
            for (i, b) in buf[..n].iter_mut().enumerate() {
                *b = *self.head.get(at as usize + i).unwrap_or(&self.filler);
            }
            self.pulled
                .store(at + n as u64, std::sync::atomic::Ordering::Relaxed);
            Ok(n)
        }
    }

    #[test]
    fn a_100_mb_line_is_refused_after_reading_a_bounded_part_of_it() {
        const LINE: u64 = 100 << 20;
        let limit = DEFAULT_MAX_RECORD_BYTES as u64;
        for (head, spec, error) in [
            (
                &b"id,qty,price,ratio,weight,name,ok,day,at\n1,2,3,4,5,"[..],
                csv_spec(ALL_TYPES),
                r#"line 2: column "name": the record is longer than the limit of 8388608 bytes (max_record_bytes)"#,
            ),
            (
                b"id,qty,price,ratio,weight,name,ok,day,at\n1,2,3,4,5,\"a\n",
                csv_spec(ALL_TYPES),
                r#"line 2: column "name": the record is longer than the limit of 8388608 bytes (max_record_bytes)"#,
            ),
            (
                b"{\"id\":1}\n{\"id\":2,\"name\":\"",
                json_spec(ALL_TYPES),
                "line 2: the line is longer than the limit of 8388608 bytes (max_record_bytes)",
            ),
        ] {
            let pulled = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let input = Endless {
                head,
                filler: if head.ends_with(b"\n") { b'\n' } else { b'x' },
                len: LINE,
                pulled: pulled.clone(),
            };
            let err = convert(input, &spec, io::sink()).unwrap_err();
            assert_eq!(err.to_string(), error);
            // The record limit, and a buffer or two of 64 KiB: never the whole line.
            let pulled = pulled.load(std::sync::atomic::Ordering::Relaxed);
            assert!(pulled < limit + (256 << 10), "read {pulled} bytes");
        }
    }

    #[test]
    fn rows_are_split_into_row_groups() {
        let mut spec = csv_spec(r#"[{"name":"n","type":"int32","nullable":false}]"#);
        spec.row_group_rows = 5000;
        spec.sum_columns = vec!["n".into()];
        let input: String = (0..20_000).map(|i| format!("{i}\n")).collect();
        let (stats, parquet) = run(format!("n\n{input}"), &spec);
        assert_eq!((stats.rows, stats.row_groups), (20_000, 4));
        assert_eq!(stats.sums["n"], SumValue::Int(19_999 * 20_000 / 2));
        assert_eq!(parquet.rows[12_345], ["12345"]);
    }

    #[test]
    fn row_groups_close_at_their_byte_size() {
        let mut spec = csv_spec(r#"[{"name":"s","type":"string","nullable":false}]"#);
        // Distinct hex strings that compress poorly: ≈ 3 MB encoded.
        let value = |i: u64| {
            format!(
                "{:016x}{:016x}",
                i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                i.wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
            )
        };
        let input: String = (0..200_000).map(|i| format!("{}\n", value(i))).collect();
        let (whole, _) = run(format!("s\n{input}"), &spec);
        assert_eq!(whole.row_groups, 1);
        spec.row_group_bytes = 1 << 20;
        let (split, parquet) = run(format!("s\n{input}"), &spec);
        assert!(split.row_groups >= 3, "{} row groups", split.row_groups);
        assert_eq!((split.rows, parquet.rows.len()), (200_000, 200_000));
        assert_eq!(parquet.rows[54_321], [value(54_321)]);
    }

    #[test]
    fn pages_past_the_memory_budget_wait_in_a_file_and_give_the_same_bytes() {
        let mut spec = csv_spec(
            r#"[{"name":"s","type":"string","nullable":false},{"name":"n","type":"int64"}]"#,
        );
        spec.threads = 1; // the spill counter is the encoding thread's
        spec.row_group_bytes = 1 << 19;
        let value = |i: u64| format!("{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let input: String = (0..100_000u64)
            .map(|i| format!("{},{}\n", value(i), i % 7))
            .collect();
        let input = format!("s,n\n{input}");
        let mut outputs = Vec::new();
        for budget in [usize::MAX, 100 << 10, 0] {
            spec.page_memory_bytes = budget;
            let before = pages::SPILLED.with(|s| s.get());
            let mut out = Vec::new();
            let stats = convert(input.as_bytes(), &spec, &mut out).unwrap();
            let spilled = pages::SPILLED.with(|s| s.get()) - before;
            assert!(stats.row_groups >= 2, "{} row groups", stats.row_groups);
            match budget {
                usize::MAX => assert_eq!(spilled, 0),
                // Everything but the budget, of a file of ≈ 2 MB.
                b => assert!(
                    spilled + b >= out.len() / 2,
                    "{spilled} of {} bytes spilled",
                    out.len()
                ),
            }
            outputs.push(out);
        }
        assert!(
            outputs.windows(2).all(|w| w[0] == w[1]),
            "the same file whatever the budget"
        );
        // And the file reads back whole.
        let parquet = read_parquet(outputs[2].clone());
        assert_eq!(parquet.rows.len(), 100_000);
        assert_eq!(parquet.rows[777], [value(777), "0".into()]);
    }

    #[test]
    fn a_byte_order_mark_is_skipped() {
        let (stats, parquet) = run(format!("\u{feff}{ALL_TYPES_CSV}"), &csv_spec(ALL_TYPES));
        assert_eq!(parquet.rows, all_types_rows());
        assert_eq!(stats.bytes_decoded, ALL_TYPES_CSV.len() as u64 + 3);
        let (_, parquet) = run(format!("\u{feff}{ALL_TYPES_JSONL}"), &json_spec(ALL_TYPES));
        assert_eq!(parquet.rows, all_types_rows());
        let mut spec = csv_spec(ALL_TYPES);
        spec.compression = Compression::Gzip;
        let (_, parquet) = run(gzip(format!("\u{feff}{ALL_TYPES_CSV}").as_bytes()), &spec);
        assert_eq!(parquet.rows, all_types_rows());
    }

    #[test]
    fn unusable_specs_are_rejected() {
        let with = |change: fn(&mut ConvertSpec)| {
            let mut spec = csv_spec(ALL_TYPES);
            change(&mut spec);
            match fail(ALL_TYPES_CSV, &spec) {
                ConvertError::InvalidSpec { message } => message,
                e => panic!("{e:?}"),
            }
        };
        assert!(
            with(|s| s.sum_columns = vec!["nope".into()]).contains("\"nope\" is not in the schema")
        );
        assert!(
            with(|s| s.sum_columns = vec!["day".into()]).contains("date, which cannot be summed")
        );
        assert!(with(|s| s.batch_rows = 0).contains("positive"));
        assert!(with(|s| s.row_group_rows = 0).contains("positive"));
        assert!(with(|s| s.row_group_bytes = 0).contains("row_group_bytes must be positive"));
        assert!(with(|s| s.zstd_level = 99).contains("99"));
        assert!(with(|s| s.page_bytes = 0).contains("page_bytes must be positive"));
        let unsupported = |s: &mut ConvertSpec| {
            s.schema = Arc::new(Schema::new(vec![arrow_schema::Field::new(
                "x",
                arrow_schema::DataType::UInt8,
                true,
            )]))
        };
        assert!(with(unsupported).contains("unsupported type UInt8"));
        assert!(with(|s| s.schema = Arc::new(Schema::empty())).contains("no columns"));
        let duplicate = |s: &mut ConvertSpec| {
            s.schema = schema(r#"[{"name":"a","type":"int32"},{"name":"a","type":"int32"}]"#)
        };
        assert!(with(duplicate).contains("duplicate column \"a\""));
    }

    #[test]
    fn random_bytes_never_panic() {
        const ALPHABET: &[u8] = b",;\"\\\n\r{}[]:.-+e019aZ \xff\xef\xbb\xbf\0";
        let mut next = xorshift(0x2545_f491_4f6c_dd1d_u64);
        for round in 0..3000 {
            let len = (next() % 120) as usize;
            let input: Vec<u8> = (0..len)
                .map(|_| ALPHABET[next() as usize % ALPHABET.len()])
                .collect();
            let mut spec = match round % 3 {
                0 => csv_spec(ALL_TYPES),
                1 => json_spec(ALL_TYPES),
                _ => csv_spec(r#"[{"name":"s","type":"string","nullable":false}]"#),
            };
            spec.batch_rows = 1 + round % 4;
            spec.empty_strings = if round % 2 == 0 {
                EmptyStrings::Empty
            } else {
                EmptyStrings::Null
            };
            if let Ok(stats) = convert(&input[..], &spec, Vec::new()) {
                assert_eq!(stats.bytes_decoded, len as u64);
            }
            spec.compression = Compression::Gzip;
            assert!(convert(&input[..], &spec, Vec::new()).is_err() || input.is_empty());
        }
    }

    #[test]
    fn serde_spellings() {
        assert_eq!(
            serde_json::to_string(&Compression::Zstd).unwrap(),
            r#""zstd""#
        );
        assert_eq!(
            serde_json::from_str::<Compression>(r#""gzip""#).unwrap(),
            Compression::Gzip
        );
        assert_eq!(
            serde_json::from_str::<EmptyStrings>(r#""empty""#).unwrap(),
            EmptyStrings::Empty
        );
    }

    #[test]
    fn the_parquet_output_fails_as_an_encode_error() {
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        for threads in [1, 2] {
            let mut spec = csv_spec(ALL_TYPES);
            spec.threads = threads;
            let err = convert(ALL_TYPES_CSV.as_bytes(), &spec, Full).unwrap_err();
            assert!(matches!(err, ConvertError::Encode { .. }), "{err:?}");
            assert!(err.to_string().contains("disk full"), "{err}");
        }
    }

    #[test]
    fn data_pages_close_at_the_page_size() {
        use parquet::basic::PageType;
        use parquet::file::reader::{FileReader, SerializedFileReader};

        // 20,000 distinct 40-byte strings, ≈ 0.8 MB of plain values in one row group.
        let rows: String = (0..20_000u64)
            .map(|i| format!("{i},{:040x}\n", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
            .collect();
        let csv = format!("n,s\n{rows}");
        let columns = r#"[{"name":"n","type":"int64"},{"name":"s","type":"string"}]"#;
        let pages = |page_bytes: usize, threads: usize| {
            let mut spec = csv_spec(columns);
            spec.page_bytes = page_bytes;
            spec.dictionary_bytes = 0;
            spec.threads = threads;
            let mut out = Vec::new();
            let stats = convert(csv.as_bytes(), &spec, &mut out).unwrap();
            assert_eq!((stats.rows, stats.row_groups), (20_000, 1));
            let out = bytes::Bytes::from(out);
            let file = SerializedFileReader::new(out.clone()).unwrap();
            let group = file.get_row_group(0).unwrap();
            let count = group
                .get_column_page_reader(1)
                .unwrap()
                .map(|page| page.unwrap())
                .filter(|page| page.page_type() == PageType::DATA_PAGE)
                .count();
            (count, out)
        };
        let (default, whole) = pages(DEFAULT_PAGE_BYTES, 1);
        let (small, split) = pages(64 << 10, 1);
        // The default closes at ≈ 1 MiB (one page), 64 KiB at ≈ 13 pages.
        assert_eq!(default, 1);
        assert!((12..=14).contains(&small), "{small} pages");
        // The same values either way, and the same bytes on two threads.
        let rows = |file: &bytes::Bytes| read_parquet(file.to_vec()).rows;
        assert_eq!(rows(&whole), rows(&split));
        assert_eq!(rows(&split).len(), 20_000);
        assert_eq!(pages(64 << 10, 2).1, split);
    }

    #[test]
    fn dictionaries_that_would_outgrow_their_memory_are_left_off() {
        use parquet::basic::Encoding;
        use parquet::file::reader::{FileReader, SerializedFileReader};

        // 2,000 product codes (14 bytes each in a dictionary page) and their 2,000 numbers,
        // and 4 statuses, over 20,000 rows: built, the codes' dictionary takes ≈ 2,000 ×
        // (14 + 32) = 92 KB and the numbers' ≈ 2,000 × (8 + 16) = 48 KB.
        let mut csv = String::from("sku,product,status\n");
        for i in 0..20_000 {
            let p = i * 7_919 % 2_000;
            csv += &format!(
                "SKU-{p:06},{p},{}\n",
                ["new", "paid", "sent", "done"][i % 4]
            );
        }
        let columns = r#"[{"name":"sku","type":"string"},{"name":"product","type":"int64"},{"name":"status","type":"string"}]"#;
        let with_dictionary = |out: Vec<u8>, rows: i64| {
            let file = SerializedFileReader::new(bytes::Bytes::from(out)).unwrap();
            let group = file.metadata().row_group(0);
            assert_eq!(group.num_rows(), rows);
            (0..3)
                .map(|c| {
                    group
                        .column(c)
                        .encodings()
                        .any(|e| e == Encoding::RLE_DICTIONARY)
                })
                .collect::<Vec<_>>()
        };
        let dictionaries = |kib: usize| {
            let mut spec = csv_spec(columns);
            spec.dictionary_bytes = kib << 10;
            let mut out = Vec::new();
            convert(csv.as_bytes(), &spec, &mut out).unwrap();
            let chosen = with_dictionary(out, 20_000);
            // A bookmark source's split, the first 10,000 rows kept and the others set
            // aside: each file chooses as the whole file does (each half holds every code,
            // product and status).
            let (mut kept, mut aside, mut seen) = (Vec::new(), Vec::new(), 0);
            let mut halves = |b: &RecordBatch| {
                let rows = |first: bool| {
                    let keep = (seen..seen + b.num_rows()).map(|i| Some((i < 10_000) == first));
                    let keep = arrow_array::BooleanArray::from_iter(keep);
                    arrow_select::filter::filter_record_batch(b, &keep).unwrap()
                };
                let halves = (rows(true), Some(rows(false)));
                seen += b.num_rows();
                Ok(halves)
            };
            convert_split(
                csv.as_bytes(),
                &spec,
                &mut kept,
                &mut halves,
                Some(&mut aside),
            )
            .unwrap();
            assert_eq!(
                with_dictionary(kept, 10_000),
                chosen,
                "kept rows at {kib} KiB"
            );
            assert_eq!(
                with_dictionary(aside, 10_000),
                chosen,
                "rows set aside at {kib} KiB"
            );
            chosen
        };
        assert_eq!(
            dictionaries(1024),
            [true, true, true],
            "the default: all fit"
        );
        assert_eq!(
            dictionaries(64),
            [false, true, true],
            "the codes' would not"
        );
        assert_eq!(dictionaries(32), [false, false, true], "nor the numbers'");
        assert_eq!(dictionaries(0), [false, false, false], "none");
    }

    /// `rows` lines of an id (distinct), a status (4 values) and a note (distinct text).
    fn orders(rows: usize) -> (String, ConvertSpec) {
        let mut csv = String::from("id,status,note\n");
        for i in 0..rows {
            csv += &format!(
                "{i},{},\"note {}, {i}\"\n",
                ["new", "paid", "sent", "done"][i % 4],
                i * 7
            );
        }
        let columns = r#"[{"name":"id","type":"int64"},{"name":"status","type":"string"},{"name":"note","type":"string"}]"#;
        let mut spec = csv_spec(columns);
        spec.sum_columns = vec!["id".into()];
        (csv, spec)
    }

    #[test]
    fn decoding_beside_encoding_writes_the_same_file() {
        let (csv, mut spec) = orders(30_000);
        spec.row_group_rows = 10_000;
        let bad = csv.replace("\n20000,", "\n2000x,");
        // Compressed input is inflated ahead by the encoding threads (see `input`).
        for (compression, pack) in [
            (Compression::None, (|b| b.to_vec()) as fn(&[u8]) -> Vec<u8>),
            (Compression::Gzip, gzip),
            (Compression::Zstd, zstd),
        ] {
            spec.compression = compression;
            let input = pack(csv.as_bytes());
            let mut files = Vec::new();
            for threads in [1, 2, 3] {
                spec.threads = threads;
                let mut out = Vec::new();
                let stats = convert(&input[..], &spec, &mut out).unwrap();
                let case = format!("{compression}, {threads} threads");
                assert_eq!((stats.rows, stats.row_groups), (30_000, 3), "{case}");
                assert_eq!(stats.sums["id"].to_string(), "449985000", "{case}");
                assert_eq!(stats.bytes_read, input.len() as u64, "{case}");
                assert_eq!(stats.bytes_decoded, csv.len() as u64, "{case}");
                files.push(out);
            }
            assert!(
                files[0] == files[1] && files[1] == files[2],
                "{compression}: byte for byte"
            );
            let bad = pack(bad.as_bytes());
            for threads in [1, 2] {
                spec.threads = threads;
                let e = convert(&bad[..], &spec, Vec::new()).unwrap_err();
                assert_eq!(
                    e.to_string(),
                    r#"line 20002: column "id": cannot parse "2000x" as int64"#,
                    "{compression}, {threads} threads"
                );
            }
        }
    }

    #[test]
    fn a_split_conversion_is_the_same_whatever_the_threads() {
        let (csv, mut spec) = orders(30_000);
        spec.row_group_rows = 10_000;
        // Rows whose id ends in 7 are set aside; a batch holding row 25,000 fails when
        // `fail` says so.
        let run = |spec: &ConvertSpec, fail: bool| {
            let (mut kept, mut aside) = (Vec::new(), Vec::new());
            let mut split = |b: &RecordBatch| {
                let ids = arrow_array::cast::AsArray::as_primitive::<arrow_array::types::Int64Type>(
                    b.column(0),
                );
                if fail && ids.values().contains(&25_000) {
                    return Err(ConvertError::parse(None, None, "split failed"));
                }
                let rows = |aside: bool| {
                    let keep = ids.values().iter().map(|i| Some((i % 10 == 7) == aside));
                    let keep = arrow_array::BooleanArray::from_iter(keep);
                    arrow_select::filter::filter_record_batch(b, &keep).unwrap()
                };
                Ok((rows(false), Some(rows(true))))
            };
            convert_split(
                csv.as_bytes(),
                spec,
                &mut kept,
                &mut split,
                Some(&mut aside),
            )
            .map(|stats| (stats, kept, aside))
        };
        let mut files = Vec::new();
        for threads in [1, 2, 3] {
            spec.threads = threads;
            let (stats, kept, aside) = run(&spec, false).unwrap();
            assert_eq!(
                (stats.rows, stats.row_groups),
                (27_000, 3),
                "{threads} threads"
            );
            // 0 + 1 + … + 29,999 less the 3,000 ids ending in 7 (their sum: 3,000 × 7 +
            // 10 × (0 + … + 2,999)).
            assert_eq!(
                stats.sums["id"].to_string(),
                (449_985_000 - 21_000 - 44_985_000).to_string()
            );
            let ids = |file: &Vec<u8>| -> Vec<String> {
                read_parquet(file.clone())
                    .rows
                    .into_iter()
                    .map(|r| r[0].clone())
                    .collect()
            };
            let (kept_ids, aside_ids) = (ids(&kept), ids(&aside));
            assert_eq!((kept_ids.len(), aside_ids.len()), (27_000, 3_000));
            assert!(kept_ids.iter().all(|i| !i.ends_with('7')));
            assert!(aside_ids.iter().all(|i| i.ends_with('7')));
            files.push((kept, aside));
        }
        assert!(
            files[0] == files[1] && files[1] == files[2],
            "byte for byte"
        );
        for threads in [1, 2] {
            spec.threads = threads;
            let error = run(&spec, true).expect_err("the split fails");
            assert_eq!(error.to_string(), "split failed", "{threads} threads");
        }
    }

    #[test]
    fn the_distinct_values_of_a_row_group_are_predicted_from_the_first_ones() {
        let close = |got: f64, want: f64| (got - want).abs() <= want * 0.02;
        assert_eq!(
            expected_distinct(9_500, 9_500, 500_000),
            500_000.0,
            "all distinct"
        );
        assert!(
            close(expected_distinct(10_000, 100, 500_000), 100.0),
            "a vocabulary of 100"
        );
        // 9,500 draws from 30,000 values give ~8,140 distinct: the 30,000 are found again.
        let seen = 30_000.0 * -(-9_500.0_f64 / 30_000.0).exp_m1();
        let got = expected_distinct(9_500, seen.round() as usize, 500_000);
        assert!(close(got, 30_000.0), "{got}");
    }

    #[test]
    fn values_that_keep_arriving_new_are_not_taken_for_a_vocabulary() {
        use arrow_array::{Int64Array, StringArray};
        let rows = 500_000;
        let expected =
            |column: &dyn arrow_array::Array| profile(column).unwrap().expected_distinct(rows);
        // Times in order, one to three rows a second: 1,352 rows, ~680 distinct, and the
        // halves share only the second between them.
        let times: Int64Array = (0..1_352_i64)
            .map(|i| Some(1_700_000_000 + i / 2))
            .collect();
        assert_eq!(expected(&times), rows as f64, "times in order");
        // Draws from a vocabulary of 3,000 codes: the same estimate as before, both ways.
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        let codes: StringArray = (0..1_352)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                Some(format!("code-{}", rng % 3_000))
            })
            .collect();
        let got = expected(&codes);
        assert!(
            (2_400.0..3_600.0).contains(&got),
            "a vocabulary of 3,000: {got}"
        );
        // A column sorted by a few values (one in each half): a vocabulary, not fresh values.
        let sorted: StringArray = (0..1_352)
            .map(|i| Some(if i < 676 { "a" } else { "b" }))
            .collect();
        assert!(expected(&sorted) < 3.0, "two values");
    }

    #[test]
    fn mostly_distinct_columns_are_written_without_a_dictionary() {
        use parquet::basic::Encoding;
        use parquet::file::reader::{FileReader, SerializedFileReader};

        // Batches of 300 rows: wide rows fill a batch's bytes before 1,000 rows, and the
        // choice is then made from the first batches together.
        for batch_rows in [None, Some(300)] {
            let (csv, mut spec) = orders(5_000);
            if let Some(rows) = batch_rows {
                spec.batch_rows = rows;
            }
            let mut out = Vec::new();
            convert(csv.as_bytes(), &spec, &mut out).unwrap();
            let file = SerializedFileReader::new(bytes::Bytes::from(out)).unwrap();
            let group = file.metadata().row_group(0);
            let dictionary = |c: usize| {
                group
                    .column(c)
                    .encodings()
                    .any(|e| matches!(e, Encoding::RLE_DICTIONARY | Encoding::PLAIN_DICTIONARY))
            };
            assert!(!dictionary(0), "id: every value distinct ({batch_rows:?})");
            assert!(
                group
                    .column(0)
                    .encodings()
                    .any(|e| e == Encoding::DELTA_BINARY_PACKED),
                "id: counting up, stored as differences ({batch_rows:?})"
            );
            assert!(dictionary(1), "status: four values ({batch_rows:?})");
            assert!(
                !dictionary(2),
                "note: every value distinct ({batch_rows:?})"
            );
            assert_eq!(group.num_rows(), 5_000);
        }
        // Too few rows to tell: the dictionary stays on.
        let (csv, spec) = orders(50);
        let mut out = Vec::new();
        convert(csv.as_bytes(), &spec, &mut out).unwrap();
        let file = SerializedFileReader::new(bytes::Bytes::from(out)).unwrap();
        let column = file.metadata().row_group(0).column(0).clone();
        assert!(column.encodings().any(|e| e == Encoding::RLE_DICTIONARY));
    }

    #[test]
    fn lineage_columns_are_functions_of_the_object_version() {
        let mut spec = csv_spec(r#"[{"name":"id","type":"int64"}]"#);
        spec.lineage = vec![
            ("_key".into(), Lineage::Key),
            ("_version".into(), Lineage::VersionId),
            ("_etag".into(), Lineage::Etag),
            ("_modified".into(), Lineage::LastModified),
            ("_row".into(), Lineage::RowNumber),
        ];
        spec.object = Some(ObjectInfo {
            key: "in/a.csv".into(),
            version_id: None,
            etag: "9b2cf535f27731c974343645a3985328".into(),
            last_modified_ms: 1_733_300_000_123,
        });
        spec.batch_rows = 2;
        let input = "id\n1\n2\n3\n";
        let (stats, file) = run(input, &spec);
        let row = |id: &str, n: &str| {
            format!("{id}|in/a.csv|∅|9b2cf535f27731c974343645a3985328|2024-12-04T08:13:20.123Z|{n}")
        };
        assert_eq!(
            file.rows,
            text_rows(&[&row("1", "1"), &row("2", "2"), &row("3", "3")]),
            "row numbers count on across batches"
        );
        assert_eq!(stats.rows, 3);
        assert!(
            file.schema
                .field_with_name("_version")
                .unwrap()
                .is_nullable()
        );
        assert!(!file.schema.field_with_name("_row").unwrap().is_nullable());
        let again = run(input, &spec).1;
        assert_eq!(
            again.rows, file.rows,
            "the same version gives the same rows"
        );

        // A lineage column named like a schema column is refused before any input is read.
        spec.lineage.push(("id".into(), Lineage::Etag));
        let err = convert(input.as_bytes(), &spec, Vec::new()).unwrap_err();
        assert!(err.to_string().contains("duplicate column \"id\""), "{err}");
    }

    #[test]
    fn the_rescued_column_follows_the_schema_and_is_null_when_nothing_is_rescued() {
        let mut spec = csv_spec(r#"[{"name":"id","type":"int64"}]"#);
        spec.bad_values = BadValues::Rescue;
        spec.rescue_column = "_extra".into();
        let (stats, file) = run("id\n1\n", &spec);
        assert_eq!(file.rows, text_rows(&["1|∅"]));
        let field = file.schema.field(1);
        assert_eq!(field.name(), "_extra");
        assert_eq!(FieldType::from_field(field), Some(FieldType::Json));
        assert_eq!(stats.rescued_rows, 0);
    }
}
