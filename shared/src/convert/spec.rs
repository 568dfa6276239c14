//! What a conversion reads and how: [`ConvertSpec`], its options and their defaults.

use super::*;

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
    /// A file of JSON values (one document, a top-level array, or values concatenated with
    /// or without whitespace between them), cut into records as [`ConvertSpec::json`] says
    /// and read as JSON Lines are (see `convert/json/documents.rs`).
    Json,
    /// Line logs: each line matched whole against a pattern whose named groups are its
    /// fields ([`ConvertSpec::lines`]), then read as the JSON object of those fields (see
    /// `convert/lines/`).
    Regex,
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

/// Where the records of a file of JSON documents ([`InputFormat::Json`]) are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JsonDocuments {
    /// The key of the array of records inside each value (`Records`, `logEvents`); `None`:
    /// each value, and each element of a top-level array, is a record.
    pub records: Option<String>,
    /// Members of each value read into every one of its records (with `records`): the
    /// envelope around them (`logGroup`, `owner`). They must come before the records array.
    pub envelope: Vec<String>,
}

/// The pattern of a line log ([`InputFormat::Regex`]).
#[derive(Debug, Clone)]
pub struct LinePattern {
    /// The pattern, anchored at both ends of the line: its named groups are the fields.
    pub regex: regex::Regex,
    /// Texts that stand for NULL in any field (`-`).
    pub null_values: Vec<String>,
    /// Lines starting with this are skipped (`#`).
    pub comment: Option<String>,
}

impl LinePattern {
    /// `pattern` matched against whole lines; an error if it does not compile or names no
    /// group.
    pub fn new(
        pattern: &str,
        null_values: Vec<String>,
        comment: Option<String>,
    ) -> Result<Self, String> {
        let regex = regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| e.to_string())?;
        if regex.capture_names().flatten().next().is_none() {
            return Err(
                "the pattern names no group: fields are its named groups, (?P<name>…)".into(),
            );
        }
        Ok(Self {
            regex,
            null_values,
            comment,
        })
    }
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
    /// Where the records of JSON documents are ([`InputFormat::Json`] only).
    pub json: JsonDocuments,
    /// The pattern of a line log ([`InputFormat::Regex`] only, which needs it).
    pub lines: Option<LinePattern>,
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
            json: JsonDocuments::default(),
            lines: None,
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
