//! The sources document: one typed JSON document shared by the Lambdas and the CLI, read once
//! at start-up from a file (`TIDEMARK_CONFIG_FILE`) or inline (`TIDEMARK_CONFIG`), validated
//! before any event is touched. A bad document fails with the path of the field at fault
//! (`sources[1].schema[2].type: …`).
//!
//! ```json
//! {"sources": [{
//!   "source_id": "orders",
//!   "bucket": "landing", "prefix": "orders/",
//!   "include": ["*.csv", "*.csv.gz"], "exclude": ["*/_tmp/*"],
//!   "format": "csv", "csv": {"delimiter": ",", "header": true},
//!   "compression": "auto",
//!   "schema": [{"name": "order_id", "type": "int64", "nullable": false},
//!              {"name": "amount", "type": "decimal(12,2)"}],
//!   "sum_columns": ["amount"],
//!   "output": {"bucket": "lake", "prefix": "orders/", "partitioning": "key_date"},
//!   "on_delete": "delete", "mode": "enable", "max_attempts": 3
//! }]}
//! ```

use std::collections::HashSet;
use std::path::Path;

use arrow_schema::SchemaRef;
use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};

use crate::convert::{
    BadValues, Compression, ConvertSpec, CsvOptions, CsvValues, DEFAULT_RESCUE_COLUMN,
    EmptyStrings, InputFormat, KeyMatch, Lineage, UnknownFields,
};
use crate::schema::{ColumnSpec, ColumnType, FieldType, arrow_schema};

/// The environment variable holding the document inline.
pub const ENV_CONFIG: &str = "TIDEMARK_CONFIG";
/// The environment variable naming a file that holds the document.
pub const ENV_CONFIG_FILE: &str = "TIDEMARK_CONFIG_FILE";

/// The configuration could not be read or is invalid.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Neither variable is set.
    #[error("no configuration: set {ENV_CONFIG_FILE} (a path) or {ENV_CONFIG} (the JSON document)")]
    Missing,
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The document does not parse or a field is wrong; `path` names the field.
    #[error("invalid configuration at {path}: {message}")]
    Invalid {
        /// Where in the document (`sources[0].schema[1].type`).
        path: String,
        /// What is wrong.
        message: String,
    },
}

fn invalid(path: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        path: path.into(),
        message: message.into(),
    }
}

/// The whole document.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ConfigDoc {
    /// The sources served by this deployment.
    pub sources: Vec<SourceDoc>,
    /// Where reconciliation reports go (JSON and HTML); none: reports are only returned.
    #[serde(default)]
    pub reports: Option<ReportsDoc>,
}

/// Where reconciliation reports are written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ReportsDoc {
    /// Bucket of the reports.
    pub bucket: String,
    /// Prefix of the reports (may be empty).
    #[serde(default)]
    pub prefix: String,
}

/// How a source is reconciled.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ReconcileDoc {
    /// Objects modified in the last `grace_minutes` are left to their events (default 15).
    #[serde(default = "default_grace")]
    pub grace_minutes: u32,
    /// Longest window one scheduled run closes (default 1440: a day).
    #[serde(default = "default_window")]
    pub max_window_minutes: u32,
    /// Date-partitioned keys: a template below the source prefix with `{yyyy}`, `{mm}`,
    /// `{dd}` (and optionally `{hh}`), e.g. `"{yyyy}/{mm}/{dd}/"`. A window then lists only
    /// the prefixes of its days (or hours), never the whole source.
    #[serde(default)]
    pub date_prefix: Option<String>,
    /// Relative tolerance for float sums (default 1e-9); integers and decimals are exact.
    #[serde(default = "default_tolerance")]
    pub float_tolerance: f64,
    /// The fraction of each window's objects the deep tier checks (the source recounted, the
    /// outputs' sum columns read back), in [0, 1] (default 0.01). The sample is a stable hash
    /// of key and ETag, so a re-run checks the same objects. Objects with a cheap-tier
    /// finding are checked deeply whatever this is.
    #[serde(default = "default_deep_sample")]
    pub deep_sample: f64,
    /// When a scheduled window ends past a UTC midnight, check every object of the day it
    /// closed deeply as well, as an extra entry of the report (default false).
    #[serde(default)]
    pub deep_closed_days: bool,
    /// A window holding more objects than this is split into parts of this many, checked by
    /// parallel invocations from the reconcile queue and merged into one report (default
    /// 5,000; at least 100). Without a reconcile queue, windows are checked whole.
    #[serde(default = "default_part_objects")]
    pub part_objects: u64,
}

fn default_grace() -> u32 {
    15
}
fn default_window() -> u32 {
    1440
}
fn default_tolerance() -> f64 {
    1e-9
}
fn default_deep_sample() -> f64 {
    0.01
}
fn default_part_objects() -> u64 {
    5_000
}

impl Default for ReconcileDoc {
    fn default() -> Self {
        Self {
            grace_minutes: default_grace(),
            max_window_minutes: default_window(),
            date_prefix: None,
            float_tolerance: default_tolerance(),
            deep_sample: default_deep_sample(),
            deep_closed_days: false,
            part_objects: default_part_objects(),
        }
    }
}

/// Input format of a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum FormatDoc {
    /// Comma- (or otherwise) separated values.
    Csv,
    /// One JSON object per line.
    Jsonl,
    /// Line logs: each line matched whole against `regex.pattern`, whose named groups are
    /// the fields (load balancer, CloudFront and S3 access logs, as Athena's RegexSerDe).
    Regex,
    /// JSON documents: one value, a top-level array, or values back to back with or without
    /// whitespace (Firehose's `{…}{…}`, pretty-printed objects); `json.records` names the
    /// array of records inside each value (`{"Records":[…]}`).
    Json,
    /// Parquet, columns matched by name (the file is spooled to local disk to be read).
    Parquet,
    /// Avro Object Container File, fields matched by name (read as a stream).
    Avro,
    /// ORC, columns matched by name (the file is spooled to local disk to be read).
    Orc,
}

impl FormatDoc {
    /// A format whose files carry their own types (Parquet, Avro, ORC): its values are
    /// read typed, never parsed from text.
    pub fn is_typed(self) -> bool {
        matches!(self, Self::Parquet | Self::Avro | Self::Orc)
    }
}

/// CSV options of a source.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CsvDoc {
    /// One ASCII character (default `,`).
    #[serde(default = "default_delimiter")]
    pub delimiter: char,
    /// One ASCII character (default `"`).
    #[serde(default = "default_quote")]
    pub quote: char,
    /// Escape character, if the files use one (default: none, quotes are doubled).
    #[serde(default)]
    pub escape: Option<char>,
    /// Whether the first line is a header (default true).
    #[serde(default = "yes")]
    pub header: bool,
    /// How columns are matched to the schema: `position` (default: the header is skipped,
    /// its names unchecked) or `name` (by the header's names, in any order; a nullable
    /// column a file lacks is NULL, a required one fails the object, others are ignored).
    /// (Left out when `position`, so fingerprints of configurations that never set it do not
    /// move.)
    #[serde(default, skip_serializing_if = "CsvColumnsDoc::is_position")]
    pub columns: CsvColumnsDoc,
    /// Fields read as NULL in any column, e.g. `["", "NA", "\\N", "NULL"]` (compared whole,
    /// case-sensitive, after unquoting). Default: an empty field only (and see
    /// `empty_strings` for string columns). A listed string is NULL in string columns too,
    /// whatever `empty_strings` says; in a required column it fails the row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub null_values: Option<Vec<String>>,
    /// Fields read as `true` in `bool` columns, e.g. `["Y", "yes", "1"]` (compared whole,
    /// case-sensitive). Default: `true` in any case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub true_values: Option<Vec<String>>,
    /// Fields read as `false` in `bool` columns (default: `false` in any case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub false_values: Option<Vec<String>>,
    /// The decimal point of decimal and float fields: `"."` (default) or `","` (`1,50`, as
    /// European exports write them; the digits may not then be grouped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decimal_point: Option<char>,
}

/// The pattern of a line-log source (`format: "regex"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RegexDoc {
    /// A regular expression (Rust's `regex` syntax) that matches a whole line; its named
    /// groups, `(?P<name>…)`, are the line's fields, read by the columns of those names (or
    /// by `path`: a column `client` with `"path": "client_ip"`). A line that does not match is
    /// a bad row (`on_bad_row`).
    pub pattern: String,
    /// Field texts that stand for NULL (default `["-"]`, as AWS's logs write an absent field).
    #[serde(default = "default_line_nulls")]
    pub null_values: Vec<String>,
    /// Lines starting with this are skipped (CloudFront's `#Version:` and `#Fields:`): e.g.
    /// `"#"`. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

fn default_line_nulls() -> Vec<String> {
    vec!["-".into()]
}

/// JSON options of a source (`jsonl` and `json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct JsonDoc {
    /// How keys are matched to column and struct field names: `exact` (default) or
    /// `case_insensitive` (two keys of one object that differ only by case and match one
    /// field fail the object, or are rescued under `on_bad_value: "rescue"`).
    #[serde(default)]
    pub keys: KeyMatch,
    /// `json` only: the key of the array of records inside each value (`"Records"`,
    /// `"logEvents"`, `"configurationItems"`). Unset: each value, and each element of a
    /// top-level array, is a record. A value without the array is a bad row (`on_bad_row`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records: Option<String>,
    /// `json` with `records` only: members of each value read into every one of its records,
    /// as if each record held them (`["logGroup", "owner"]`); a record holding one of them
    /// itself holds a key twice. Members after the records array are read too: the value's
    /// records wait for them, up to `max_record_bytes`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub envelope: Vec<String>,
}

/// Lineage columns: column name → what it holds, written in the document's order after the
/// schema's columns (and the rescued column).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataColumns(pub Vec<(String, Lineage)>);

impl MetadataColumns {
    /// No lineage column.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for MetadataColumns {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, lineage) in &self.0 {
            map.serialize_entry(name, lineage)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for MetadataColumns {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Ordered;
        impl<'de> serde::de::Visitor<'de> for Ordered {
            type Value = MetadataColumns;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "an object of column names to key, version_id, etag, last_modified or row_number",
                )
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut columns: Vec<(String, Lineage)> = Vec::new();
                while let Some((name, lineage)) = map.next_entry::<String, Lineage>()? {
                    if columns.iter().any(|(n, _)| *n == name) {
                        return Err(serde::de::Error::custom(format!(
                            "column {name:?} is named twice"
                        )));
                    }
                    columns.push((name, lineage));
                }
                Ok(MetadataColumns(columns))
            }
        }
        deserializer.deserialize_map(Ordered)
    }
}

/// In the JSON Schema: an object of column names to lineage values (its order is the
/// columns' order).
#[cfg(feature = "config-schema")]
impl schemars::JsonSchema for MetadataColumns {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "MetadataColumns".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <std::collections::BTreeMap<String, Lineage>>::json_schema(generator)
    }
}

impl CsvColumnsDoc {
    fn is_position(&self) -> bool {
        *self == CsvColumnsDoc::Position
    }
}

/// How a CSV source's columns are matched to its schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum CsvColumnsDoc {
    /// The n-th field is the n-th column.
    #[default]
    Position,
    /// By the header's names.
    Name,
}

fn default_delimiter() -> char {
    ','
}
fn default_quote() -> char {
    '"'
}
fn yes() -> bool {
    true
}

impl Default for CsvDoc {
    fn default() -> Self {
        Self {
            delimiter: ',',
            quote: '"',
            escape: None,
            header: true,
            columns: CsvColumnsDoc::Position,
            null_values: None,
            true_values: None,
            false_values: None,
            decimal_point: None,
        }
    }
}

/// Compression of a source's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum CompressionDoc {
    /// By extension: `.gz` / `.gzip` gzip, `.zst` / `.zstd` zstd, otherwise none.
    #[default]
    Auto,
    /// Plain.
    None,
    /// gzip (multi-member files too).
    Gzip,
    /// zstd.
    Zstd,
}

/// The most partitions (files) one object may spread over: a commit names every file of the
/// set (key, ETag, rows, sums: ≈250 bytes each), and a DynamoDB item holds at most 400 KB.
pub const MAX_PARTITIONS: u32 = 1000;

/// `output.partitioning` by columns against the rest of the source: each column an output
/// column its transform can partition, each name a valid and distinct partition key, and
/// nothing the set of files per object does not serve yet.
fn check_partitioning(doc: &SourceDoc, at: &str) -> Result<(), ConfigError> {
    let out = &doc.output;
    let here = format!("{at}.output.partitioning");
    if let Some(n) = out.max_partitions_per_object
        && !(1..=MAX_PARTITIONS).contains(&n)
    {
        return Err(invalid(
            format!("{at}.output.max_partitions_per_object"),
            format!(
                "{n} is not in 1..={MAX_PARTITIONS} (the ledger's item names every file of an \
                 object's set: DynamoDB items hold at most 400 KB)"
            ),
        ));
    }
    if out.partitioning.kind != Partitioning::Columns {
        if out.max_partitions_per_object.is_some() {
            return Err(invalid(
                format!("{at}.output.max_partitions_per_object"),
                "only with partitioning by columns",
            ));
        }
        return Ok(());
    }
    if out.partitioning.columns.is_empty() {
        return Err(invalid(here, "at least one partition column"));
    }
    if doc.bookmark.is_some() {
        return Err(invalid(
            here,
            "partitioning by columns is not yet available for a source with bookmark keys",
        ));
    }
    let columns = output_columns(doc);
    let mut names = HashSet::new();
    for (i, p) in out.partitioning.columns.iter().enumerate() {
        let path = format!("{here}.columns[{i}]");
        let Some(c) = columns.iter().find(|c| c.name == p.from) else {
            return Err(invalid(
                format!("{path}.from"),
                format!("{:?} is not an output column of the source", p.from),
            ));
        };
        if let Some(why) = p.refuses(&c.ty) {
            return Err(invalid(format!("{path}.transform"), why));
        }
        let name = p.name();
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid {
            return Err(invalid(
                format!("{path}.as"),
                format!(
                    "{name:?}: a partition key is lower-case letters, digits and _, starting \
                     with a letter or _"
                ),
            ));
        }
        if !names.insert(name) {
            return Err(invalid(
                format!("{path}.as"),
                format!("{name:?} is given twice"),
            ));
        }
        if !p.moves_out() && columns.iter().any(|c| c.name.eq_ignore_ascii_case(name)) {
            return Err(invalid(
                format!("{path}.as"),
                format!(
                    "{name:?} is an output column: a partition key must not be one (give \
                     another name, or partition by that column itself)"
                ),
            ));
        }
        if p.moves_out() && doc.sum_columns.contains(&p.from) {
            return Err(invalid(
                format!("{path}.from"),
                format!("{:?} is summed: it cannot leave the files", p.from),
            ));
        }
        if let (true, Some(table)) = (p.moves_out(), &out.table) {
            // The value is then only in the Delta log, as a partition value of the column's
            // type; Delta writes timestamps there as `2026-11-29 13:00:00`, not as the path.
            if c.ty.scalar() == Some(ColumnType::Timestamp) {
                return Err(invalid(
                    format!("{path}.as"),
                    format!(
                        "{:?} is a timestamp: in a Delta table it cannot leave the files; \
                         partition by its hour or day, or give the partition another name",
                        p.from
                    ),
                ));
            }
            let merged = table.merge_keys.iter().chain(&table.merge_order);
            if merged.into_iter().any(|k| k == &p.from) {
                return Err(invalid(
                    format!("{path}.from"),
                    format!(
                        "{:?} is a merge key or order: it cannot leave the files (give the \
                         partition another name)",
                        p.from
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// How output keys are partitioned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Partitioning {
    /// `<prefix><relative key>.parquet`.
    #[default]
    None,
    /// `<prefix>dt=YYYY-MM-DD/<relative key>.parquet`, the date taken from the first
    /// `YYYY-MM-DD` or `YYYY/MM/DD` in the key (`dt=__HIVE_DEFAULT_PARTITION__` when none).
    KeyDate,
    /// By the rows' values (`{"columns": [...]}`, [`OutputPartitioning::columns`]).
    #[serde(skip)]
    Columns,
}

/// `output.partitioning`: `"none"`, `"key_date"`, or `{"columns": [...]}` (one object's rows
/// split over one file per partition value: [`crate::convert::partition`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OutputPartitioning {
    /// Which kind (`Columns` exactly when `columns` is not empty).
    pub kind: Partitioning,
    /// The partition columns, outermost directory first.
    pub columns: Vec<crate::convert::partition::PartitionColumn>,
}

impl PartialEq<Partitioning> for OutputPartitioning {
    fn eq(&self, other: &Partitioning) -> bool {
        self.kind == *other
    }
}

/// How `output.partitioning` is written.
#[derive(Serialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(untagged)]
enum PartitioningRepr {
    /// `"none"` or `"key_date"`.
    Named(Partitioning),
    /// `{"columns": [{"from": "eventTime", "as": "dt", "transform": "day"}, {"from": "region"}]}`:
    /// one directory level per column, outermost first.
    Columns {
        /// The partition columns.
        columns: Vec<crate::convert::partition::PartitionColumn>,
    },
}

impl Serialize for OutputPartitioning {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.kind {
            Partitioning::Columns => PartitioningRepr::Columns {
                columns: self.columns.clone(),
            }
            .serialize(s),
            kind => PartitioningRepr::Named(kind).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for OutputPartitioning {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        /// The object spelling, read on its own so that its errors name the field.
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Columns {
            columns: Vec<crate::convert::partition::PartitionColumn>,
        }
        // Each spelling read apart: an error says what is wrong in the one given, not that
        // neither matched.
        let value = serde_json::Value::deserialize(d)?;
        if value.is_string() {
            let kind = Partitioning::deserialize(value).map_err(D::Error::custom)?;
            return Ok(Self {
                kind,
                columns: Vec::new(),
            });
        }
        let Columns { columns } = Columns::deserialize(value).map_err(|e| {
            D::Error::custom(format!(
                "{e} (partitioning is \"none\", \"key_date\" or {{\"columns\": [...]}})"
            ))
        })?;
        Ok(Self {
            kind: Partitioning::Columns,
            columns,
        })
    }
}

#[cfg(feature = "config-schema")]
impl schemars::JsonSchema for OutputPartitioning {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "OutputPartitioning".into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        PartitioningRepr::json_schema(generator)
    }
}

/// Where a source's Parquet goes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct OutputDoc {
    /// Output bucket.
    pub bucket: String,
    /// Output prefix (may be empty).
    #[serde(default)]
    pub prefix: String,
    /// Partitioning of output keys: `"none"` (default), `"key_date"` (`dt=` from the date in
    /// the key), or `{"columns": [{"from": C, "as": NAME, "transform": T}, …]}`: each object's
    /// rows split over one file per partition value, `<NAME>=<value>/` per column, outermost
    /// first; `transform` is `identity` (default), or `year`, `month`, `day`, `hour` of a
    /// timestamp (UTC) or date column; `as` defaults to `from` (and then the column leaves the
    /// files: its value is in the path, as Hive lays partitions out).
    #[serde(default)]
    pub partitioning: OutputPartitioning,
    /// At most this many partitions per object under `partitioning: {"columns": …}` (1–1000;
    /// default 1000: a commit names every file of the set, and a DynamoDB item holds at most
    /// 400 KB): an object spreading over more fails, naming the limit. Not part of the
    /// configuration's fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_partitions_per_object: Option<u32>,
    /// Publish the outputs as a table (a Delta Lake table whose root is
    /// `s3://<bucket>/<prefix>`), instead of loose files only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<TableDoc>,
    /// Row groups of the Parquet outputs close at this many MiB of encoded data (1–1024;
    /// default 64). The converter holds the row group in progress, so this bounds most of
    /// its memory: a smaller size suits wide rows and small Lambdas; readers favour larger
    /// groups. Not part of the configuration's fingerprint (it changes no value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_group_mib: Option<u32>,
    /// zstd level of the Parquet outputs' column chunks (1–22; default 3, the level the
    /// peers are measured at). Lower is cheaper in CPU and larger on disk. Not part of the
    /// configuration's fingerprint (it changes no value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zstd_level: Option<i32>,
    /// Memory in KiB a column's dictionary may take while the writer builds it (0–65536;
    /// default 1024, a core's L2 cache): a column whose first rows predict more is written
    /// without a dictionary, which costs less CPU and some size (BENCHMARKS.md,
    /// "Dictionaries that fit the cache"); 0 turns dictionaries off, larger values favour
    /// size. Not part of the configuration's fingerprint (it changes no value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dictionary_kib: Option<u32>,
    /// Size in KiB at which a Parquet data page closes (64–16384; default 1024, arrow-rs's
    /// default). Each page is compressed in one call: smaller pages let a function with two
    /// vCPUs keep both busy (256: 5–9% less wall time on wide rows, a smaller peak RSS)
    /// and cost one vCPU CPU, and files grow slightly (BENCHMARKS.md, "A page size per
    /// source"). Not part of the configuration's fingerprint (it changes no value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_kib: Option<u32>,
}

/// A source's outputs published as a table (`output.table`).
///
/// The table's root is the output location (`s3://<bucket>/<prefix>`); with
/// `partitioning: "key_date"` it is partitioned by the string column `dt`. Output files are
/// immutable: each attempt writes a new name carrying the source version, the ingest path
/// never deletes or overwrites one, and the committer (`functions/publish`) turns the
/// ledger's commits into table commits (Add for the new file, Remove for the one it replaces
/// or for a deleted object). Unreferenced files are removed by the table's VACUUM only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct TableDoc {
    /// The table format: `"delta"`.
    pub format: TableFormat,
    /// Upsert by business key: the columns that identify a row. The table then holds one row
    /// per key, across every object of the source: the row with the greatest `merge_order`
    /// value; on equal values (or without `merge_order`) the row of the object whose name
    /// in the table sorts last (its key relative to the source prefix, every byte outside
    /// `[A-Za-z0-9._-]` made `_`, then the key's MD5), and within one object the later row.
    /// A replace or delete of an object brings back the rows it had beaten. Float columns
    /// are not allowed as keys (`-0.0` and `0.0` differ in their bits).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merge_keys: Vec<String>,
    /// The column whose greatest value wins among the rows of one key (NULL loses to any
    /// value), e.g. an `updated_at` timestamp. Needs `merge_keys`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_order: Option<String>,
}

impl TableDoc {
    /// The upsert's key and order columns, when the table is merged by key.
    pub fn merge(&self) -> Option<(&[String], Option<&str>)> {
        (!self.merge_keys.is_empty())
            .then_some((self.merge_keys.as_slice(), self.merge_order.as_deref()))
    }
}

/// Table formats the committer writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum TableFormat {
    /// Delta Lake (reader version 1, writer version 2).
    Delta,
}

/// What happens to outputs when their source object is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum OnDelete {
    /// Delete the outputs (the lake mirrors the landing bucket).
    #[default]
    Delete,
    /// Keep them (the lake is an archive); the record is marked deleted either way.
    Keep,
}

/// What a row that does not decode does (see `convert::reject` for which errors are a
/// row's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum OnBadRow {
    /// The object fails, naming the row; it is retried and quarantined after
    /// `max_attempts`, and nothing of it reaches the lake.
    #[default]
    Fail,
    /// The row goes to the object's rejects file (`<output prefix>_rejects/…jsonl`) and the
    /// other rows to its output; the count is recorded with the commit and reported by
    /// reconcile. More than `max_rejected_rows` bad rows fail the object.
    Reject,
}

impl OnBadRow {
    fn is_fail(&self) -> bool {
        *self == OnBadRow::Fail
    }
}

/// Default of `max_rejected_rows`.
pub const DEFAULT_MAX_REJECTED_ROWS: u64 = 1000;

/// Default of `max_decoded_bytes`: 64 GiB.
pub const DEFAULT_MAX_DECODED_BYTES: u64 = 64 << 30;

/// Glue's job-bookmark modes (see `process::Pipeline::process`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Process what is new and advance the ledger.
    #[default]
    Enable,
    /// Process what is new (versions the ledger has not committed) into their outputs, without
    /// advancing the ledger: the same objects are new again next time (Glue's
    /// `job-bookmark-pause`).
    Pause,
    /// Process every object into its output, ledger untouched (Glue's
    /// `job-bookmark-disable`).
    Disable,
}

impl Mode {
    /// The name used in the document and by the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enable => "enable",
            Mode::Pause => "pause",
            Mode::Disable => "disable",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "enable" => Ok(Mode::Enable),
            "pause" => Ok(Mode::Pause),
            "disable" => Ok(Mode::Disable),
            other => Err(format!(
                "unknown mode {other:?}: expected enable, pause or disable"
            )),
        }
    }
}

/// One source, as written in the document.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SourceDoc {
    /// Stable id of the source: `[a-z0-9_-]{1,64}`; never derived from a path.
    pub source_id: String,
    /// A preset for a log AWS writes (`aws.cloudtrail`, `aws.cloudwatch_logs`, `aws.alb`,
    /// `aws.nlb`, `aws.clb`, `aws.cloudfront`, `aws.s3_access`, `aws.vpc_flow`, `aws.waf`):
    /// the source is the preset's block (format, pattern or records, include, schema named
    /// and typed as AWS's Athena table, policies, partitioning by event day) with this
    /// source's own members applied as a JSON Merge Patch (RFC 7396: objects merged member
    /// by member, arrays and values replaced, `null` removes). `tidemark presets show NAME`
    /// prints the block. With a preset, `format` and `schema` may be left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// Landing bucket.
    pub bucket: String,
    /// Key prefix (may be empty).
    #[serde(default)]
    pub prefix: String,
    /// Globs on the key relative to the prefix (`*` also crosses `/`); empty: everything.
    #[serde(default)]
    pub include: Vec<String>,
    /// Globs to leave out, applied after `include`.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Input format.
    pub format: FormatDoc,
    /// CSV options (only for `csv`).
    #[serde(default)]
    pub csv: Option<CsvDoc>,
    /// The pattern of a line log (required for `regex`, and only for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<RegexDoc>,
    /// Compression.
    #[serde(default)]
    pub compression: CompressionDoc,
    /// Explicit schema: the columns, in order.
    pub schema: Vec<ColumnSpec>,
    /// Numeric columns whose sums are recorded for reconciliation.
    #[serde(default)]
    pub sum_columns: Vec<String>,
    /// How an empty CSV field of a string column is read (`null`, the default, or `empty`).
    #[serde(default)]
    pub empty_strings: EmptyStringsDoc,
    /// Output location.
    pub output: OutputDoc,
    /// Delete policy.
    #[serde(default)]
    pub on_delete: OnDelete,
    /// Bad-row policy: `fail` (default) or `reject` (CSV, JSON Lines and JSON sources).
    #[serde(default, skip_serializing_if = "OnBadRow::is_fail")]
    pub on_bad_row: OnBadRow,
    /// Under `on_bad_row: reject`, more bad rows than this in one object fail it (default
    /// 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rejected_rows: Option<u64>,
    /// A field of the input the schema does not name: `ignore` (default: dropped, and
    /// counted per field in the ledger, `status`, `explain` and the report), `fail` (the
    /// object fails naming it) or `rescue` (kept in the rescued column).
    #[serde(default, skip_serializing_if = "is_default")]
    pub on_unknown_field: UnknownFields,
    /// A value that does not read as its column's type: `fail` (default: the object fails,
    /// or the row is rejected under `on_bad_row: reject`) or `rescue` (the value is NULL in
    /// its column and kept, with the reason, in the rescued column; the row lands).
    #[serde(default, skip_serializing_if = "is_default")]
    pub on_bad_value: BadValues,
    /// The name of the rescued column (default `_rescued_data`), written when a policy
    /// rescues: per row NULL, or a JSON object of what was rescued (see "Data semantics").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rescued_column: Option<String>,
    /// JSON options (for `jsonl` and `json`): key matching, and where a JSON document's
    /// records are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<JsonDoc>,
    /// Lineage columns, e.g. `{"_source_key": "key", "_row": "row_number"}`: values that are
    /// functions of the object version (`key`, `version_id`, `etag`, `last_modified`,
    /// `row_number`), written after the schema's columns.
    #[serde(default, skip_serializing_if = "MetadataColumns::is_empty")]
    pub metadata_columns: MetadataColumns,
    /// Mode.
    #[serde(default)]
    pub mode: Mode,
    /// Failed attempts before an object is quarantined (default 3).
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    /// Objects larger than this are rejected (recorded, not processed).
    #[serde(default)]
    pub max_object_bytes: Option<u64>,
    /// Decompressed bytes beyond this fail the object (a guard against decompression bombs;
    /// default 64 GiB). It also bounds what a columnar file inflates to inside. Parquet: the
    /// spooled file plus every column chunk's uncompressed size from the footer (every
    /// column, read or not), checked before a page is read. ORC: the spooled file plus every
    /// compression chunk of every stripe, each inflated once before the file is read (LZO
    /// chunks counted at the compression block size). Avro: the input read so far plus every
    /// block, inflated once as the file streams in, before the reader inflates it.
    #[serde(default)]
    pub max_decoded_bytes: Option<u64>,
    /// A record (CSV record, JSON line or a JSON document's record) longer than this fails the
    /// object (or is rejected under `on_bad_row: reject`), found after reading at most this
    /// much of it (default 8 MiB).
    #[serde(default)]
    pub max_record_bytes: Option<u64>,
    /// Reconciliation settings.
    #[serde(default)]
    pub reconcile: ReconcileDoc,
    /// Row-level bookmark keys: emit only rows whose key is beyond the source's mark.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bookmark: Option<crate::bookmark::BookmarkDoc>,
    /// Freshness alarm: the scheduled reconcile flags the source when it has committed fewer
    /// rows than `min_rows_per_window` within the last `max_silence`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freshness: Option<FreshnessDoc>,
}

/// The freshness expectation of a source: "alarm if it processes zero records".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct FreshnessDoc {
    /// The longest time the source may commit nothing (or too few rows): a number and a unit,
    /// `m`, `h` or `d` (`"90m"`, `"6h"`, `"2d"`); at least a minute.
    pub max_silence: String,
    /// Rows the source must commit within every `max_silence` (default 1).
    #[serde(default = "one_row")]
    pub min_rows_per_window: u64,
}

fn one_row() -> u64 {
    1
}

/// `"90m"`, `"6h"`, `"2d"` in milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} has no unit: use m, h or d (e.g. \"6h\")"))?;
    let (number, unit) = text.split_at(split);
    let number: i64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a whole number"))?;
    let unit_ms = match unit {
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        other => return Err(format!("unknown unit {other:?} in {text:?}: use m, h or d")),
    };
    match number.checked_mul(unit_ms) {
        Some(ms) if ms >= 60_000 => Ok(ms),
        Some(_) => Err(format!("{text:?} is shorter than a minute")),
        None => Err(format!("{text:?} is too long")),
    }
}

fn default_attempts() -> u32 {
    3
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// See [`SourceDoc::empty_strings`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum EmptyStringsDoc {
    /// NULL (arrow-csv's reading).
    #[default]
    Null,
    /// The empty string (pyarrow's and pandas' reading).
    Empty,
}

/// A validated source, ready to route and convert.
#[derive(Debug, Clone)]
pub struct Source {
    /// The document it came from.
    pub doc: SourceDoc,
    /// The Arrow schema of its columns (what its inputs are decoded into).
    pub schema: SchemaRef,
    /// The Arrow schema of its outputs: [`Self::schema`], then the rescued column when a
    /// policy rescues, then the lineage columns (see [`Source::output_columns`]).
    pub output_schema: SchemaRef,
    /// Fingerprint of everything that shapes its output.
    pub fingerprint: String,
    include: Option<GlobSet>,
    exclude: Option<GlobSet>,
    /// The compiled `regex.pattern`.
    lines: Option<crate::convert::LinePattern>,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The sources, in document order.
    pub sources: Vec<Source>,
    /// Where reconciliation reports go.
    pub reports: Option<ReportsDoc>,
}

impl Config {
    /// Read the document from `TIDEMARK_CONFIG_FILE` or `TIDEMARK_CONFIG`.
    pub fn from_env() -> Result<Self, ConfigError> {
        if let Ok(path) = std::env::var(ENV_CONFIG_FILE) {
            return Self::from_file(Path::new(&path));
        }
        match std::env::var(ENV_CONFIG) {
            Ok(json) => Self::from_json(&json),
            Err(_) => Err(ConfigError::Missing),
        }
    }

    /// Read the document from a file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_json(&text)
    }

    /// Parse and validate the document.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let text =
            crate::presets::expand(text).map_err(|(path, message)| invalid(path, message))?;
        let de = &mut serde_json::Deserializer::from_str(&text);
        let doc: ConfigDoc = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            invalid(
                if path == "." { "document".into() } else { path },
                e.into_inner().to_string(),
            )
        })?;
        Self::from_doc(doc)
    }

    /// Validate a parsed document.
    pub fn from_doc(doc: ConfigDoc) -> Result<Self, ConfigError> {
        if doc.sources.is_empty() {
            return Err(invalid("sources", "at least one source is required"));
        }
        let mut ids = HashSet::new();
        let sources = doc
            .sources
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                if !ids.insert(s.source_id.clone()) {
                    return Err(invalid(
                        format!("sources[{i}].source_id"),
                        format!("duplicate source_id {:?}", s.source_id),
                    ));
                }
                Source::new(s, &format!("sources[{i}]"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            sources,
            reports: doc.reports,
        })
    }

    /// The sources that claim `bucket/key`, in document order.
    pub fn route<'a>(&'a self, bucket: &'a str, key: &'a str) -> impl Iterator<Item = &'a Source> {
        self.sources.iter().filter(move |s| s.matches(bucket, key))
    }
    /// The ledger's source ids (`ids`, from [`crate::ports::Ledger::source_ids`]) that this
    /// document does not name, sorted and once each: state a renamed or removed source left
    /// behind. A row-level bookmark's lock id counts as its source's.
    pub fn orphaned_ids(&self, ids: impl IntoIterator<Item = String>) -> Vec<String> {
        let mut orphaned: Vec<String> = ids
            .into_iter()
            .map(|id| match id.strip_suffix(crate::bookmark::LOCK_SUFFIX) {
                Some(base) => base.to_string(),
                None => id,
            })
            .filter(|id| self.source(id).is_none())
            .collect();
        orphaned.sort();
        orphaned.dedup();
        orphaned
    }

    /// The source with this id.
    pub fn source(&self, source_id: &str) -> Option<&Source> {
        self.sources.iter().find(|s| s.doc.source_id == source_id)
    }
}

fn globs(patterns: &[String], at: &str) -> Result<Option<GlobSet>, ConfigError> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for (i, p) in patterns.iter().enumerate() {
        b.add(Glob::new(p).map_err(|e| invalid(format!("{at}[{i}]"), e.to_string()))?);
    }
    b.build()
        .map(Some)
        .map_err(|e| invalid(at.to_string(), e.to_string()))
}

fn ascii_byte(c: char, at: &str) -> Result<u8, ConfigError> {
    u8::try_from(c)
        .ok()
        .filter(u8::is_ascii)
        .ok_or_else(|| invalid(at.to_string(), format!("{c:?} is not one ASCII character")))
}

impl Source {
    fn new(doc: SourceDoc, at: &str) -> Result<Self, ConfigError> {
        let id = &doc.source_id;
        if id.is_empty()
            || id.len() > 64
            || !id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        {
            return Err(invalid(
                format!("{at}.source_id"),
                format!("{id:?} must be 1-64 characters of a-z, 0-9, _ and -"),
            ));
        }
        if doc.bucket.is_empty() {
            return Err(invalid(format!("{at}.bucket"), "must not be empty"));
        }
        if doc.output.bucket.is_empty() {
            return Err(invalid(format!("{at}.output.bucket"), "must not be empty"));
        }
        if doc.output.bucket == doc.bucket
            && (doc.output.prefix.starts_with(&doc.prefix)
                || doc.prefix.starts_with(&doc.output.prefix))
        {
            return Err(invalid(
                format!("{at}.output.prefix"),
                "output prefix overlaps the source prefix in the same bucket: outputs would trigger ingest",
            ));
        }
        if let Some(f) = &doc.freshness {
            parse_duration_ms(&f.max_silence)
                .map_err(|e| invalid(format!("{at}.freshness.max_silence"), e))?;
        }
        if doc.schema.is_empty() {
            return Err(invalid(
                format!("{at}.schema"),
                "at least one column is required",
            ));
        }
        let mut names = HashSet::new();
        for (i, c) in doc.schema.iter().enumerate() {
            if !names.insert(c.name.as_str()) {
                return Err(invalid(
                    format!("{at}.schema[{i}].name"),
                    format!("duplicate column {:?}", c.name),
                ));
            }
            if let Err((field, message)) = c.check() {
                return Err(invalid(format!("{at}.schema[{i}].{field}"), message));
            }
            if doc.format == FormatDoc::Regex
                && !matches!(c.ty, FieldType::Scalar(_) | FieldType::Json)
            {
                return Err(invalid(
                    format!("{at}.schema[{i}].type"),
                    format!(
                        "{} in a regex source: a line's fields are text, read as scalars",
                        c.ty
                    ),
                ));
            }
            if doc.format == FormatDoc::Csv {
                if !matches!(c.ty, FieldType::Scalar(_)) {
                    return Err(invalid(
                        format!("{at}.schema[{i}].type"),
                        format!(
                            "{} in a CSV source: CSV columns are scalars (int32 … timestamp); \
                             nested and json columns are for jsonl, parquet, avro and orc",
                            c.ty
                        ),
                    ));
                }
                if c.path.is_some() {
                    return Err(invalid(
                        format!("{at}.schema[{i}].path"),
                        "a CSV record has no structure to follow: paths are for jsonl, parquet, avro and orc",
                    ));
                }
            }
            if doc.format.is_typed() && c.format.is_some() {
                return Err(invalid(
                    format!("{at}.schema[{i}].format"),
                    "a format is for text inputs (csv, jsonl): Parquet, Avro and ORC times are typed",
                ));
            }
        }
        let rescues =
            doc.on_unknown_field == UnknownFields::Rescue || doc.on_bad_value == BadValues::Rescue;
        let mut extra = Vec::new();
        match (&doc.rescued_column, rescues) {
            (Some(_), false) => {
                return Err(invalid(
                    format!("{at}.rescued_column"),
                    "only with on_unknown_field or on_bad_value \"rescue\"",
                ));
            }
            (name, true) => {
                let name = name.as_deref().unwrap_or(DEFAULT_RESCUE_COLUMN);
                if name.is_empty() {
                    return Err(invalid(format!("{at}.rescued_column"), "must not be empty"));
                }
                extra.push((format!("{at}.rescued_column"), name));
            }
            (None, false) => {}
        }
        for (name, _) in &doc.metadata_columns.0 {
            extra.push((format!("{at}.metadata_columns.{name}"), name.as_str()));
        }
        for (path, name) in extra {
            if name.is_empty() {
                return Err(invalid(path, "a column name must not be empty"));
            }
            if !names.insert(name) {
                return Err(invalid(
                    path,
                    format!("column {name:?} is already a column of the source"),
                ));
            }
        }
        if let Some(json) = &doc.json {
            if !matches!(doc.format, FormatDoc::Jsonl | FormatDoc::Json) {
                return Err(invalid(
                    format!("{at}.json"),
                    "only for formats \"jsonl\" and \"json\"",
                ));
            }
            if doc.format != FormatDoc::Json
                && (json.records.is_some() || !json.envelope.is_empty())
            {
                return Err(invalid(
                    format!("{at}.json"),
                    "records and envelope are for format \"json\" (JSON Lines has a record per line)",
                ));
            }
            if json.records.as_deref() == Some("") {
                return Err(invalid(format!("{at}.json.records"), "must not be empty"));
            }
            if !json.envelope.is_empty() && json.records.is_none() {
                return Err(invalid(
                    format!("{at}.json.envelope"),
                    "an envelope is what surrounds a records array: set json.records too",
                ));
            }
            let mut seen = HashSet::new();
            for (i, name) in json.envelope.iter().enumerate() {
                if Some(name) == json.records.as_ref() || !seen.insert(name) {
                    return Err(invalid(
                        format!("{at}.json.envelope[{i}]"),
                        format!("{name:?} is the records key or named twice"),
                    ));
                }
            }
        }
        for (i, name) in doc.sum_columns.iter().enumerate() {
            match doc.schema.iter().find(|c| &c.name == name) {
                None => {
                    return Err(invalid(
                        format!("{at}.sum_columns[{i}]"),
                        format!("{name:?} is not a column of the schema"),
                    ));
                }
                Some(c) if !c.ty.is_summable() => {
                    return Err(invalid(
                        format!("{at}.sum_columns[{i}]"),
                        format!("{name:?} is {}, not a numeric column", c.ty),
                    ));
                }
                Some(_) => {}
            }
        }
        check_partitioning(&doc, at)?;
        if let Some(t) = &doc.reconcile.date_prefix {
            let known = t
                .replace("{yyyy}", "")
                .replace("{mm}", "")
                .replace("{dd}", "")
                .replace("{hh}", "");
            if known.contains('{') || known.contains('}') || !t.contains("{yyyy}") {
                return Err(invalid(
                    format!("{at}.reconcile.date_prefix"),
                    format!(
                        "{t:?}: use {{yyyy}}, {{mm}}, {{dd}} and {{hh}}, starting with {{yyyy}}"
                    ),
                ));
            }
        }
        let sample = doc.reconcile.deep_sample;
        if !(0.0..=1.0).contains(&sample) {
            return Err(invalid(
                format!("{at}.reconcile.deep_sample"),
                format!(
                    "{sample} is not a fraction in [0, 1] (0.01 deep-checks 1% of each window)"
                ),
            ));
        }
        if doc.reconcile.part_objects < 100 {
            return Err(invalid(
                format!("{at}.reconcile.part_objects"),
                format!(
                    "{} is below 100 (a part is one invocation's share of a window)",
                    doc.reconcile.part_objects
                ),
            ));
        }
        if doc.max_attempts == 0 {
            return Err(invalid(format!("{at}.max_attempts"), "must be at least 1"));
        }
        if doc.max_record_bytes == Some(0) {
            return Err(invalid(
                format!("{at}.max_record_bytes"),
                "must be at least 1",
            ));
        }
        if doc.format != FormatDoc::Csv && doc.csv.is_some() {
            return Err(invalid(format!("{at}.csv"), "only for format \"csv\""));
        }
        if let Some(csv) = &doc.csv {
            ascii_byte(csv.delimiter, &format!("{at}.csv.delimiter"))?;
            ascii_byte(csv.quote, &format!("{at}.csv.quote"))?;
            if let Some(e) = csv.escape {
                ascii_byte(e, &format!("{at}.csv.escape"))?;
            }
            if csv.columns == CsvColumnsDoc::Name && !csv.header {
                return Err(invalid(
                    format!("{at}.csv.columns"),
                    "\"name\" needs a header (header: true)",
                ));
            }
            if let Some(point) = csv.decimal_point
                && point != '.'
                && point != ','
            {
                return Err(invalid(
                    format!("{at}.csv.decimal_point"),
                    format!("{point:?}: the decimal point is \".\" or \",\""),
                ));
            }
            let spellings = [
                ("true_values", &csv.true_values),
                ("false_values", &csv.false_values),
            ];
            for (field, values) in spellings {
                if values
                    .as_ref()
                    .is_some_and(|v| v.is_empty() || v.iter().any(String::is_empty))
                {
                    return Err(invalid(
                        format!("{at}.csv.{field}"),
                        "list at least one spelling, none of them empty",
                    ));
                }
            }
            let listed = |values: &Option<Vec<String>>| values.clone().unwrap_or_default();
            let (nulls, trues, falses) = (
                listed(&csv.null_values),
                listed(&csv.true_values),
                listed(&csv.false_values),
            );
            let clash = trues
                .iter()
                .find(|t| falses.contains(t) || nulls.contains(t))
                .or_else(|| falses.iter().find(|f| nulls.contains(f)));
            if let Some(spelling) = clash {
                return Err(invalid(
                    format!("{at}.csv"),
                    format!(
                        "{spelling:?} is listed twice among null_values, true_values and false_values"
                    ),
                ));
            }
        }
        if let Some(b) = &doc.bookmark {
            crate::bookmark::validate(b, &doc.schema, at)?;
        }
        let writer_settings = [
            (
                "row_group_mib",
                doc.output.row_group_mib.map(i64::from),
                1..=1024,
            ),
            ("zstd_level", doc.output.zstd_level.map(i64::from), 1..=22),
            (
                "dictionary_kib",
                doc.output.dictionary_kib.map(i64::from),
                0..=65536,
            ),
            ("page_kib", doc.output.page_kib.map(i64::from), 64..=16384),
        ];
        for (name, value, range) in writer_settings {
            if value.is_some_and(|v| !range.contains(&v)) {
                return Err(invalid(
                    format!("{at}.output.{name}"),
                    format!("must be between {} and {}", range.start(), range.end()),
                ));
            }
        }
        if let Some(table) = &doc.output.table {
            validate_merge(table, &output_columns(&doc), &format!("{at}.output.table"))?;
        }
        if doc.output.table.is_some() && doc.bookmark.is_some() {
            return Err(invalid(
                format!("{at}.output.table"),
                "a table is not available for a source with bookmark keys yet (its outputs are per version and kept, not replaced)",
            ));
        }
        if doc.on_bad_row == OnBadRow::Reject {
            if doc.format.is_typed() {
                return Err(invalid(
                    format!("{at}.on_bad_row"),
                    "\"reject\" is for csv, jsonl, json and regex: a Parquet, Avro or ORC input's values are typed, and its errors fail the object",
                ));
            }
            if doc.bookmark.is_some() {
                return Err(invalid(
                    format!("{at}.on_bad_row"),
                    "\"reject\" is not available for a source with bookmark keys",
                ));
            }
        } else if doc.max_rejected_rows.is_some() {
            return Err(invalid(
                format!("{at}.max_rejected_rows"),
                "only with on_bad_row \"reject\"",
            ));
        }
        let lines = match (&doc.regex, doc.format) {
            (Some(r), FormatDoc::Regex) => {
                let pattern = crate::convert::LinePattern::new(
                    &r.pattern,
                    r.null_values.clone(),
                    r.comment.clone().filter(|c| !c.is_empty()),
                )
                .map_err(|e| invalid(format!("{at}.regex.pattern"), e))?;
                let groups: std::collections::BTreeSet<&str> =
                    pattern.regex.capture_names().flatten().collect();
                for (i, c) in doc.schema.iter().enumerate() {
                    // A line's fields are flat: a path renames one, it steps into nothing.
                    let field = match &c.path {
                        Some(path) if path.steps().len() > 1 => {
                            return Err(invalid(
                                format!("{at}.schema[{i}].path"),
                                "a line's fields are flat: a path names one group",
                            ));
                        }
                        Some(path) => path.head(),
                        None => c.name.as_str(),
                    };
                    if !groups.contains(field) {
                        return Err(invalid(
                            format!("{at}.schema[{i}]"),
                            format!(
                                "{field:?} is no named group of the pattern (its groups: {groups:?})"
                            ),
                        ));
                    }
                }
                Some(pattern)
            }
            (None, FormatDoc::Regex) => {
                return Err(invalid(
                    format!("{at}.regex"),
                    "format \"regex\" needs its pattern",
                ));
            }
            (Some(_), _) => {
                return Err(invalid(format!("{at}.regex"), "only for format \"regex\""));
            }
            (None, _) => None,
        };
        let include = globs(&doc.include, &format!("{at}.include"))?;
        let exclude = globs(&doc.exclude, &format!("{at}.exclude"))?;
        let schema = arrow_schema(&doc.schema);
        let output_schema = arrow_schema(&output_columns(&doc));
        let fingerprint = fingerprint(&doc);
        Ok(Self {
            doc,
            schema,
            output_schema,
            fingerprint,
            include,
            exclude,
            lines,
        })
    }

    /// The source id.
    pub fn id(&self) -> &str {
        &self.doc.source_id
    }

    /// `freshness.max_silence` in milliseconds and `min_rows_per_window`, if set (validated).
    pub fn freshness(&self) -> Option<(i64, u64)> {
        let f = self.doc.freshness.as_ref()?;
        let ms = parse_duration_ms(&f.max_silence).expect("validated with the document");
        Some((ms, f.min_rows_per_window))
    }

    /// Does this source claim `bucket/key`?
    pub fn matches(&self, bucket: &str, key: &str) -> bool {
        if bucket != self.doc.bucket {
            return false;
        }
        let Some(rel) = key.strip_prefix(self.doc.prefix.as_str()) else {
            return false;
        };
        if rel.is_empty() || rel.ends_with('/') {
            return false;
        }
        self.include.as_ref().is_none_or(|g| g.is_match(rel))
            && !self.exclude.as_ref().is_some_and(|g| g.is_match(rel))
    }

    /// How to convert `key`.
    pub fn convert_spec(&self, key: &str) -> ConvertSpec {
        let compression = match self.doc.compression {
            CompressionDoc::None => Compression::None,
            CompressionDoc::Gzip => Compression::Gzip,
            CompressionDoc::Zstd => Compression::Zstd,
            CompressionDoc::Auto => Compression::from_key(key).0,
        };
        let format = match self.doc.format {
            FormatDoc::Jsonl => InputFormat::JsonLines,
            FormatDoc::Json => InputFormat::Json,
            FormatDoc::Regex => InputFormat::Regex,
            FormatDoc::Parquet => InputFormat::Parquet,
            FormatDoc::Avro => InputFormat::Avro,
            FormatDoc::Orc => InputFormat::Orc,
            FormatDoc::Csv => {
                let c = self.doc.csv.clone().unwrap_or_default();
                // Validated as ASCII in `Source::new`.
                InputFormat::Csv(CsvOptions {
                    delimiter: c.delimiter as u8,
                    quote: c.quote as u8,
                    escape: c.escape.map(|e| e as u8),
                    header: c.header,
                })
            }
        };
        let mut spec = ConvertSpec::new(format, self.schema.clone());
        if let Some(mib) = self.doc.output.row_group_mib {
            spec.row_group_bytes = (mib as usize) << 20;
        }
        if let Some(level) = self.doc.output.zstd_level {
            spec.zstd_level = level;
        }
        if let Some(kib) = self.doc.output.dictionary_kib {
            spec.dictionary_bytes = (kib as usize) << 10;
        }
        if let Some(kib) = self.doc.output.page_kib {
            spec.page_bytes = (kib as usize) << 10;
        }
        spec.compression = compression;
        spec.sum_columns = self.doc.sum_columns.clone();
        spec.max_decoded_bytes = Some(
            self.doc
                .max_decoded_bytes
                .unwrap_or(DEFAULT_MAX_DECODED_BYTES),
        );
        if let Some(max) = self.doc.max_record_bytes {
            spec.max_record_bytes = usize::try_from(max).unwrap_or(usize::MAX);
        }
        spec.empty_strings = match self.doc.empty_strings {
            EmptyStringsDoc::Null => EmptyStrings::Null,
            EmptyStringsDoc::Empty => EmptyStrings::Empty,
        };
        if self.doc.on_bad_row == OnBadRow::Reject {
            spec.bad_rows = crate::convert::BadRows::Reject {
                max: self
                    .doc
                    .max_rejected_rows
                    .unwrap_or(DEFAULT_MAX_REJECTED_ROWS),
            };
        }
        if self
            .doc
            .csv
            .as_ref()
            .is_some_and(|c| c.columns == CsvColumnsDoc::Name)
        {
            spec.csv_columns = crate::convert::CsvColumns::ByName;
        }
        if let Some(csv) = &self.doc.csv {
            spec.csv_values = CsvValues {
                null_values: csv.null_values.clone(),
                true_values: csv.true_values.clone(),
                false_values: csv.false_values.clone(),
                decimal_comma: csv.decimal_point == Some(','),
            };
        }
        spec.columns = self.doc.schema.clone();
        spec.unknown_fields = self.doc.on_unknown_field;
        spec.bad_values = self.doc.on_bad_value;
        if let Some(name) = &self.doc.rescued_column {
            spec.rescue_column = name.clone();
        }
        spec.json_keys = self.doc.json.as_ref().map(|j| j.keys).unwrap_or_default();
        spec.lines = self.lines.clone();
        if let Some(json) = &self.doc.json {
            spec.json = crate::convert::JsonDocuments {
                records: json.records.clone(),
                envelope: json.envelope.clone(),
            };
        }
        spec.lineage = self.doc.metadata_columns.0.clone();
        spec
    }

    /// How to convert the object version `object` (its lineage columns filled from it).
    pub fn convert_spec_for(&self, object: crate::convert::ObjectInfo) -> ConvertSpec {
        let mut spec = self.convert_spec(&object.key);
        spec.object = Some(object);
        spec
    }

    /// The columns of the source's Parquet outputs, in order: the schema's, the rescued
    /// column when a policy rescues, then the lineage columns.
    pub fn output_columns(&self) -> Vec<ColumnSpec> {
        output_columns(&self.doc)
    }

    /// The one output key of source key `key`: deterministic, so a replay replaces it.
    pub fn output_key(&self, key: &str) -> String {
        let rel = key.strip_prefix(self.doc.prefix.as_str()).unwrap_or(key);
        let partition = match self.doc.output.partitioning.kind {
            // The object's own name, without directories: a partitioned output is a set of
            // files, each under its partition's directories ([`Source::partition_output_key`]).
            Partitioning::None | Partitioning::Columns => String::new(),
            Partitioning::KeyDate => format!(
                "dt={}/",
                date_in_key(key).unwrap_or_else(|| "__HIVE_DEFAULT_PARTITION__".into())
            ),
        };
        format!("{}{partition}{rel}.parquet", self.doc.output.prefix)
    }

    /// The output of `key`'s rows in the partition `dirs` (`dt=2026-11-29/region=eu/`), under
    /// `partitioning: {"columns": …}`: `<prefix><dirs><relative key>.parquet`.
    pub fn partition_output_key(&self, key: &str, dirs: &str) -> String {
        let rel = key.strip_prefix(self.doc.prefix.as_str()).unwrap_or(key);
        format!("{}{dirs}{rel}.parquet", self.doc.output.prefix)
    }

    /// Whether `bucket/out_key` is a name this source gives an output of `key`: its output
    /// key; with a table, any file under the table's root; partitioned by the data, the
    /// object's file in any partition of the source's columns.
    pub fn names_output(&self, key: &str, bucket: &str, out_key: &str) -> bool {
        let out = &self.doc.output;
        if bucket != out.bucket {
            return false;
        }
        if self.table().is_some() {
            return out_key.starts_with(&out.prefix);
        }
        let Some(columns) = self.partition_columns() else {
            return out_key == self.output_key(key);
        };
        let Some(mut rest) = out_key.strip_prefix(out.prefix.as_str()) else {
            return false;
        };
        for c in columns {
            let Some(after) = rest
                .strip_prefix(c.name())
                .and_then(|r| r.strip_prefix('='))
                .and_then(|r| r.split_once('/'))
            else {
                return false;
            };
            rest = after.1;
        }
        let rel = key.strip_prefix(self.doc.prefix.as_str()).unwrap_or(key);
        rest.strip_suffix(".parquet") == Some(rel)
    }

    /// The partition columns, when the outputs are partitioned by the data.
    pub fn partition_columns(&self) -> Option<&[crate::convert::partition::PartitionColumn]> {
        let p = &self.doc.output.partitioning;
        (p.kind == Partitioning::Columns).then_some(p.columns.as_slice())
    }

    /// `max_partitions_per_object` (default 1000).
    pub fn max_partitions(&self) -> usize {
        self.doc.output.max_partitions_per_object.unwrap_or(1000) as usize
    }

    /// The table the outputs are published to, if any.
    pub fn table(&self) -> Option<&TableDoc> {
        self.doc.output.table.as_ref()
    }

    /// The output of one attempt at a version of `key` for a source with a table:
    /// `<prefix>[dt=…/]<name>-<MD5 of the key>-<hash of version and claim>.parquet`, where
    /// `<name>` is the key relative to the source prefix with every byte outside
    /// `[A-Za-z0-9._-]` made `_` (at most 80 bytes). Every attempt writes a name of its own, so
    /// no file a table snapshot references is ever overwritten; the committer finds the files
    /// of a key by its hash ([`table_key_hash`]).
    pub fn table_output_key(&self, key: &str, version: &str, claim: &str) -> String {
        let out = self.output_key(key);
        let (dir, _) = out.rsplit_once('/').unwrap_or(("", &out));
        let dir = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        format!("{dir}{}", self.table_file_name(key, version, claim))
    }

    /// [`Source::table_output_key`] of `key`'s rows in the partition `dirs`, under
    /// `partitioning: {"columns": …}`: `<prefix><dirs><name>-<MD5>-<hash>.parquet`.
    pub fn table_partition_output_key(
        &self,
        key: &str,
        dirs: &str,
        version: &str,
        claim: &str,
    ) -> String {
        format!(
            "{}{dirs}{}",
            self.doc.output.prefix,
            self.table_file_name(key, version, claim)
        )
    }

    /// The file name of a table output (see [`Source::table_output_key`]).
    fn table_file_name(&self, key: &str, version: &str, claim: &str) -> String {
        let rel = key.strip_prefix(self.doc.prefix.as_str()).unwrap_or(key);
        let mut name: String = rel
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"._-".contains(&b) {
                    b as char
                } else {
                    '_'
                }
            })
            .collect();
        name.truncate(80);
        format!(
            "{name}-{}-{:016x}.parquet",
            table_key_hash(key),
            fnv1a(&format!("{version}\n{claim}"))
        )
    }

    /// The rejects file of source key `key` (policy `on_bad_row: reject`): its output key
    /// under `<output prefix>_rejects/`, ending `.jsonl` for `.parquet` (query engines skip
    /// folders starting with `_`).
    pub fn rejects_key(&self, key: &str) -> String {
        let out = self.output_key(key);
        let prefix = &self.doc.output.prefix;
        let rest = out.strip_prefix(prefix.as_str()).unwrap_or(&out);
        let rest = rest.strip_suffix(".parquet").unwrap_or(rest);
        format!("{prefix}_rejects/{rest}.jsonl")
    }
}

/// The first `YYYY-MM-DD` or `YYYY/MM/DD` in `key`, as `YYYY-MM-DD`.
fn date_in_key(key: &str) -> Option<String> {
    let b = key.as_bytes();
    (0..b.len().saturating_sub(9)).find_map(|i| {
        let w = &b[i..i + 10];
        let num = |r: std::ops::Range<usize>| {
            w[r].iter().try_fold(0u32, |n, c| {
                c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
            })
        };
        let sep = w[4];
        let shaped = (sep == b'-' || sep == b'/')
            && w[7] == sep
            && (i == 0 || !b[i - 1].is_ascii_digit())
            && b.get(i + 10).is_none_or(|c| !c.is_ascii_digit());
        let (_, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        (shaped && (1..=12).contains(&month) && (1..=31).contains(&day)).then(|| {
            // Every byte of the window is ASCII here, so these are char boundaries.
            format!(
                "{}-{}-{}",
                &key[i..i + 4],
                &key[i + 5..i + 7],
                &key[i + 8..i + 10]
            )
        })
    })
}

/// A stable fingerprint of what shapes a source's output, so a change of schema or format
/// can be detected per object: `<schema version>.<settings>`, two FNV-1a 64-bit hashes —
/// the first of the schema alone (the output schema version, see [`schema_version`]), the
/// second of everything else that shapes the output (format, dialect, compression, sums,
/// empty strings, output, bookmark, bad-row policy).
/// See [`Source::output_columns`].
fn output_columns(doc: &SourceDoc) -> Vec<ColumnSpec> {
    let mut columns = doc.schema.clone();
    if doc.on_unknown_field == UnknownFields::Rescue || doc.on_bad_value == BadValues::Rescue {
        let name = doc
            .rescued_column
            .as_deref()
            .unwrap_or(DEFAULT_RESCUE_COLUMN);
        columns.push(ColumnSpec::new(name, FieldType::Json));
    }
    for (name, lineage) in &doc.metadata_columns.0 {
        let mut column = ColumnSpec::new(name.clone(), lineage.column_type());
        column.nullable = !lineage.always_set();
        columns.push(column);
    }
    columns
}

fn fingerprint(doc: &SourceDoc) -> String {
    // The schema version covers every column of the outputs: the rescued and lineage
    // columns join it only when there are any, so that earlier fingerprints hold.
    let mut schema = serde_json::json!(doc.schema);
    let output = output_columns(doc);
    if output.len() > doc.schema.len() {
        schema = serde_json::json!({
            "schema": schema,
            "added": output[doc.schema.len()..],
            "lineage": doc.metadata_columns,
        });
    }
    // Settings that change neither an output's rows nor its name stay out: the upsert's
    // columns (the committer's business) and the row-group size (a layout).
    let mut output = serde_json::json!(doc.output);
    if let Some(o) = output.as_object_mut() {
        o.remove("row_group_mib");
        o.remove("zstd_level");
        o.remove("dictionary_kib");
        o.remove("page_kib");
        // A limit that fails an object, not a layout: raising it rewrites nothing.
        o.remove("max_partitions_per_object");
        if let Some(t) = o.get_mut("table").and_then(|t| t.as_object_mut()) {
            t.remove("merge_keys");
            t.remove("merge_order");
        }
    }
    let mut settings = serde_json::json!({
        "format": doc.format, "csv": doc.csv, "compression": doc.compression,
        "sum_columns": doc.sum_columns, "empty_strings": doc.empty_strings,
        "output": output,
    });
    if let Some(b) = &doc.bookmark {
        settings["bookmark"] = serde_json::json!(b);
    }
    // Absent when default, so that fingerprints from before they existed hold.
    if doc.on_unknown_field != UnknownFields::default() {
        settings["on_unknown_field"] = serde_json::json!(doc.on_unknown_field);
    }
    if doc.on_bad_value != BadValues::default() {
        settings["on_bad_value"] = serde_json::json!(doc.on_bad_value);
    }
    if let Some(json) = doc.json.as_ref().filter(|j| j.keys != KeyMatch::Exact) {
        settings["json"] = serde_json::json!(json);
    }
    // Absent under the default policy, so that fingerprints from before it existed hold.
    if doc.on_bad_row == OnBadRow::Reject {
        settings["on_bad_row"] = serde_json::json!(doc.on_bad_row);
        settings["max_rejected_rows"] =
            serde_json::json!(doc.max_rejected_rows.unwrap_or(DEFAULT_MAX_REJECTED_ROWS));
    }
    format!(
        "{:016x}.{:016x}",
        fnv1a(&schema.to_string()),
        fnv1a(&settings.to_string())
    )
}

/// The upsert's columns exist, are not floats, and are named once.
fn validate_merge(table: &TableDoc, schema: &[ColumnSpec], at: &str) -> Result<(), ConfigError> {
    if table.merge_keys.is_empty() {
        return match table.merge_order {
            Some(_) => Err(invalid(
                format!("{at}.merge_order"),
                "needs merge_keys (the columns that identify a row)",
            )),
            None => Ok(()),
        };
    }
    let column = |name: &str, field: &str| {
        let Some(c) = schema.iter().find(|c| c.name == name) else {
            return Err(invalid(
                format!("{at}.{field}"),
                format!("no column {name:?} in the schema"),
            ));
        };
        if c.ty.scalar().is_none() {
            return Err(invalid(
                format!("{at}.{field}"),
                format!(
                    "column {name:?} is {}: a key or order is a scalar column (a path column \
                     can take one from inside a nested value)",
                    c.ty
                ),
            ));
        }
        if matches!(
            c.ty.scalar(),
            Some(ColumnType::Float32 | ColumnType::Float64)
        ) {
            return Err(invalid(
                format!("{at}.{field}"),
                format!(
                    "column {name:?} is a float: equal keys could differ in their bits (-0.0 and 0.0)"
                ),
            ));
        }
        Ok(())
    };
    let mut seen = std::collections::BTreeSet::new();
    for k in &table.merge_keys {
        column(k, "merge_keys")?;
        if !seen.insert(k) {
            return Err(invalid(
                format!("{at}.merge_keys"),
                format!("column {k:?} is named twice"),
            ));
        }
    }
    if let Some(o) = &table.merge_order {
        // Any type orders (floats totally, NaN greatest).
        if !schema.iter().any(|c| &c.name == o) {
            return Err(invalid(
                format!("{at}.merge_order"),
                format!("no column {o:?} in the schema"),
            ));
        }
    }
    Ok(())
}

/// The hash of a source key inside the names of its table outputs (the key's MD5, 32 hex
/// digits: 128 bits, so that no two keys of a table share one), by which the committer finds
/// the files of a key in a table snapshot.
pub fn table_key_hash(key: &str) -> String {
    use md5::Digest;
    md5::Md5::digest(key.as_bytes())
        .iter()
        .fold(String::with_capacity(32), |mut s, b| {
            use std::fmt::Write;
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// The source key hash in a table output's file name, if it is one
/// ([`Source::table_output_key`]).
pub fn table_key_hash_of(path: &str) -> Option<&str> {
    let name = path.rsplit('/').next()?.strip_suffix(".parquet")?;
    let (rest, version) = name.rsplit_once('-')?;
    let (_, key) = rest.rsplit_once('-')?;
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(key, 32) && hex(version, 16)).then_some(key)
}

fn fnv1a(text: &str) -> u64 {
    fnv1a_bytes(text.bytes())
}

/// FNV-1a (64-bit) of `bytes`: the crate's stable short hash (names, shards, fingerprints).
pub(crate) fn fnv1a_bytes(bytes: impl IntoIterator<Item = u8>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The output schema version inside a configuration fingerprint (the hash of the schema
/// alone): the same for every object written under the same schema, whatever else changed.
pub fn schema_version(config_fp: &str) -> &str {
    config_fp.split('.').next().unwrap_or(config_fp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(extra: &str) -> String {
        format!(
            r#"{{"sources":[{{"source_id":"orders","bucket":"landing","prefix":"orders/",
            "format":"csv","schema":[{{"name":"id","type":"int64","nullable":false}},
            {{"name":"amount","type":"decimal(12,2)"}}],"sum_columns":["amount"],
            "output":{{"bucket":"lake","prefix":"orders/"}}{extra}}}]}}"#
        )
    }

    #[test]
    fn the_writer_settings_are_not_part_of_the_fingerprint() {
        let with = |extra: &str| {
            Config::from_json(&doc("").replace(
                r#""prefix":"orders/"}"#,
                &format!(r#""prefix":"orders/"{extra}}}"#),
            ))
        };
        let plain = with("").unwrap();
        let spec = |c: &Config| c.sources[0].convert_spec("a.csv");
        // Each setting: the converter's default, a value and what the converter gets,
        // values refused, and where the converter's spec holds it.
        type Setting = (
            &'static str,
            i64,
            &'static str,
            i64,
            &'static [&'static str],
            fn(&crate::convert::ConvertSpec) -> i64,
        );
        let settings: [Setting; 4] = [
            (
                "row_group_mib",
                64 << 20,
                "8",
                8 << 20,
                &["0", "1025"],
                |s| s.row_group_bytes as i64,
            ),
            ("zstd_level", 3, "1", 1, &["0", "23", "-1"], |s| {
                i64::from(s.zstd_level)
            }),
            (
                "dictionary_kib",
                1 << 20,
                "4096",
                4 << 20,
                &["65537", "-1"],
                |s| s.dictionary_bytes as i64,
            ),
            (
                "page_kib",
                1 << 20,
                "256",
                256 << 10,
                &["0", "63", "16385"],
                |s| s.page_bytes as i64,
            ),
        ];
        for (name, default, value, expected, refused, get) in settings {
            assert_eq!(get(&spec(&plain)), default, "{name}");
            let set = with(&format!(r#","{name}":{value}"#)).unwrap();
            assert_eq!(get(&spec(&set)), expected, "{name}");
            assert_eq!(plain.sources[0].fingerprint, set.sources[0].fingerprint);
            for bad in refused {
                let err = with(&format!(r#","{name}":{bad}"#))
                    .unwrap_err()
                    .to_string();
                assert!(err.contains(&format!("output.{name}")), "{err}");
            }
        }
        // 0 turns dictionaries off.
        let none = with(r#","dictionary_kib":0"#).unwrap();
        assert_eq!(spec(&none).dictionary_bytes, 0);
    }

    #[test]
    fn merge_keys_name_columns_that_are_not_floats() {
        let with = |table: &str| {
            Config::from_json(&doc("").replace(
                r#""prefix":"orders/"}"#,
                &format!(r#""prefix":"orders/","table":{table}}}"#),
            ))
        };
        let c = with(r#"{"format":"delta","merge_keys":["id"],"merge_order":"amount"}"#).unwrap();
        let table = c.sources[0].table().unwrap();
        assert_eq!(
            table.merge(),
            Some((&["id".to_string()][..], Some("amount")))
        );
        let plain = with(r#"{"format":"delta"}"#).unwrap();
        assert_eq!(plain.sources[0].table().unwrap().merge(), None);
        // Not a change of the objects' outputs: no object becomes stale.
        assert_eq!(plain.sources[0].fingerprint, c.sources[0].fingerprint);
        for (bad, says) in [
            (
                r#"{"format":"delta","merge_keys":["nope"]}"#,
                "no column \"nope\"",
            ),
            (
                r#"{"format":"delta","merge_keys":["id","id"]}"#,
                "named twice",
            ),
            (
                r#"{"format":"delta","merge_order":"id"}"#,
                "needs merge_keys",
            ),
            (
                r#"{"format":"delta","merge_keys":["id"],"merge_order":"x"}"#,
                "no column \"x\"",
            ),
        ] {
            let err = with(bad).unwrap_err().to_string();
            assert!(
                err.contains("output.table.merge") && err.contains(says),
                "{bad}: {err}"
            );
        }
        let floats = doc("")
            .replace(r#""type":"decimal(12,2)""#, r#""type":"float64""#)
            .replace(
                r#""prefix":"orders/"}"#,
                r#""prefix":"orders/","table":{"format":"delta","merge_keys":["amount"]}}"#,
            );
        let err = Config::from_json(&floats).unwrap_err().to_string();
        assert!(err.contains("is a float"), "{err}");
    }

    #[test]
    fn freshness_durations_are_read_or_refused_naming_the_field() {
        assert_eq!(parse_duration_ms("90m"), Ok(90 * 60_000));
        assert_eq!(parse_duration_ms("6h"), Ok(6 * 3_600_000));
        assert_eq!(parse_duration_ms(" 2d "), Ok(2 * 86_400_000));
        for bad in [
            "",
            "6",
            "h",
            "6x",
            "0m",
            "1.5h",
            "-1h",
            "99999999999999999d",
        ] {
            assert!(parse_duration_ms(bad).is_err(), "{bad:?}");
        }
        let c = Config::from_json(&doc(r#","freshness":{"max_silence":"6h"}"#)).unwrap();
        assert_eq!(c.sources[0].freshness(), Some((6 * 3_600_000, 1)));
        assert_eq!(
            Config::from_json(&doc("")).unwrap().sources[0].freshness(),
            None
        );
        let err = Config::from_json(&doc(r#","freshness":{"max_silence":"6 hours"}"#))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sources[0].freshness.max_silence") && err.contains("unknown unit"),
            "{err}"
        );
        // Not part of the fingerprint: an alarm setting does not make outputs stale.
        let with = Config::from_json(&doc(
            r#","freshness":{"max_silence":"1d","min_rows_per_window":500}"#,
        ))
        .unwrap();
        assert_eq!(
            with.sources[0].fingerprint,
            Config::from_json(&doc("")).unwrap().sources[0].fingerprint
        );
    }

    #[test]
    fn a_valid_document_loads_with_defaults() {
        let c = Config::from_json(&doc("")).unwrap();
        let s = &c.sources[0];
        assert_eq!(s.doc.max_attempts, 3);
        assert_eq!(s.doc.mode, Mode::Enable);
        assert!(s.matches("landing", "orders/a.csv"));
        assert!(!s.matches("landing", "other/a.csv"));
        assert!(!s.matches("lake", "orders/a.csv"));
        assert_eq!(s.output_key("orders/x/a b.csv"), "orders/x/a b.csv.parquet");
    }

    #[test]
    fn errors_name_the_field() {
        let e = Config::from_json(&doc(r#","mode":"sometimes""#)).unwrap_err();
        assert!(e.to_string().contains("sources[0].mode"), "{e}");
        let bad_type = doc("").replace("decimal(12,2)", "money");
        let e = Config::from_json(&bad_type).unwrap_err();
        assert!(e.to_string().contains("sources[0].schema[1].type"), "{e}");
        let e = Config::from_json(&doc(r#","surprise":1"#)).unwrap_err();
        assert!(e.to_string().contains("surprise"), "{e}");
        let bad_sum = doc("").replace(r#"["amount"]"#, r#"["nope"]"#);
        let e = Config::from_json(&bad_sum).unwrap_err();
        assert!(e.to_string().contains("sources[0].sum_columns[0]"), "{e}");
    }

    #[test]
    fn the_deep_sample_is_a_fraction() {
        let c = Config::from_json(&doc("")).unwrap();
        let r = &c.sources[0].doc.reconcile;
        assert_eq!((r.deep_sample, r.deep_closed_days), (0.01, false));
        for ok in ["0", "1", "0.25"] {
            let d = doc(&format!(
                r#","reconcile":{{"deep_sample":{ok},"deep_closed_days":true}}"#
            ));
            let c = Config::from_json(&d).unwrap();
            assert_eq!(c.sources[0].doc.reconcile.deep_sample.to_string(), ok);
        }
        for bad in ["1.5", "-0.1"] {
            let d = doc(&format!(r#","reconcile":{{"deep_sample":{bad}}}"#));
            let e = Config::from_json(&d).unwrap_err().to_string();
            assert_eq!(
                e,
                format!(
                    "invalid configuration at sources[0].reconcile.deep_sample: {bad} is not a \
                     fraction in [0, 1] (0.01 deep-checks 1% of each window)"
                )
            );
        }
        let e = Config::from_json(&doc(r#","reconcile":{"deep_sample":"all"}"#)).unwrap_err();
        assert!(e.to_string().contains("deep_sample"), "{e}");
    }

    #[test]
    fn output_inside_the_watched_prefix_is_refused() {
        let looped = doc("").replace(r#""bucket":"lake""#, r#""bucket":"landing""#);
        let e = Config::from_json(&looped).unwrap_err();
        assert!(e.to_string().contains("trigger ingest"), "{e}");
    }

    #[test]
    fn include_and_exclude_globs_apply_to_the_relative_key() {
        let c = Config::from_json(&doc(r#","include":["*.csv"],"exclude":["tmp/*"]"#)).unwrap();
        let s = &c.sources[0];
        assert!(s.matches("landing", "orders/2024/01/a.csv"));
        assert!(!s.matches("landing", "orders/a.json"));
        assert!(!s.matches("landing", "orders/tmp/a.csv"));
    }

    #[test]
    fn key_date_partitioning_reads_the_date_from_the_key() {
        assert_eq!(
            date_in_key("orders/2024/03/09/a.csv").as_deref(),
            Some("2024-03-09")
        );
        assert_eq!(
            date_in_key("orders/x-2024-12-31.csv").as_deref(),
            Some("2024-12-31")
        );
        assert_eq!(date_in_key("orders/12024-12-31.csv"), None);
        assert_eq!(date_in_key("orders/2024-13-01.csv"), None);
        assert_eq!(date_in_key("é/2024-02-0ü/99999999999/-/-/.csv"), None);
        let c = Config::from_json(&doc("").replace(
            r#""prefix":"orders/"}"#,
            r#""prefix":"out/","partitioning":"key_date"}"#,
        ))
        .unwrap();
        assert_eq!(
            c.sources[0].output_key("orders/2024-03-09.csv"),
            "out/dt=2024-03-09/2024-03-09.csv.parquet"
        );
    }

    #[test]
    fn partitioning_by_columns_is_checked_against_the_source() {
        let with = |partitioning: &str| {
            Config::from_json(&doc("").replace(
                r#""prefix":"orders/"}"#,
                &format!(r#""prefix":"out/","partitioning":{partitioning}}}"#),
            ))
        };
        let c = with(r#"{"columns":[{"from":"id","as":"bucket_id"}]}"#).unwrap();
        let s = &c.sources[0];
        assert!(s.names_output("orders/a/b.csv", "lake", "out/bucket_id=7/a/b.csv.parquet"));
        for (bucket, other) in [
            ("lake", "out/a/b.csv.parquet"),
            ("lake", "out/bucket_id=7/a/c.csv.parquet"),
            ("lake", "out/region=7/a/b.csv.parquet"),
            ("other", "out/bucket_id=7/a/b.csv.parquet"),
        ] {
            assert!(!s.names_output("orders/a/b.csv", bucket, other), "{other}");
        }
        let columns = c.sources[0].partition_columns().expect("columns");
        assert_eq!(columns[0].name(), "bucket_id");
        assert_eq!(c.sources[0].max_partitions(), 1000);
        assert_eq!(
            c.sources[0].partition_output_key("orders/a/b.csv", "bucket_id=7/"),
            "out/bucket_id=7/a/b.csv.parquet"
        );
        // The document round-trips in the spelling it was given.
        let text = serde_json::to_string(&c.sources[0].doc.output.partitioning).unwrap();
        assert_eq!(text, r#"{"columns":[{"from":"id","as":"bucket_id"}]}"#);
        assert!(
            with(r#""key_date""#).unwrap().sources[0]
                .partition_columns()
                .is_none()
        );
        for (bad, says) in [
            (r#"{"columns":[]}"#, "at least one partition column"),
            (r#"{"columns":[{"from":"nope"}]}"#, "not an output column"),
            (
                r#"{"columns":[{"from":"id","transform":"day"}]}"#,
                "needs a timestamp or date",
            ),
            (
                r#"{"columns":[{"from":"id","as":"Bad"}]}"#,
                "a partition key is lower-case",
            ),
            (
                r#"{"columns":[{"from":"id","as":"amount"}]}"#,
                "is an output column",
            ),
            (r#"{"columns":[{"from":"amount"}]}"#, "is summed"),
            (
                r#"{"columns":[{"from":"id","as":"a"},{"from":"amount","as":"a"}]}"#,
                "given twice",
            ),
            (
                r#"{"columns":[{"from":"id","as":"x","transform":"weekly"}]}"#,
                "weekly",
            ),
        ] {
            let e = with(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let table = |partitioning: &str, table: &str| {
            let d = doc("").replace(
                r#"{"name":"amount""#,
                r#"{"name":"ts","type":"timestamp"},{"name":"amount""#,
            );
            Config::from_json(&d.replace(
                r#""prefix":"orders/"}"#,
                &format!(
                    r#""prefix":"out/","partitioning":{{"columns":[{partitioning}]}},"table":{table}}}"#
                ),
            ))
        };
        let c = table(r#"{"from":"id","as":"k"}"#, r#"{"format":"delta"}"#).unwrap();
        assert_eq!(
            c.sources[0].table_partition_output_key("orders/a/b.csv", "k=7/", "v1", "t"),
            format!(
                "out/k=7/a_b.csv-{}-{:016x}.parquet",
                table_key_hash("orders/a/b.csv"),
                fnv1a("v1\nt")
            )
        );
        for (partitioning, t, says) in [
            (
                r#"{"from":"ts"}"#,
                r#"{"format":"delta"}"#,
                "cannot leave the files; partition by its hour",
            ),
            (
                r#"{"from":"id"}"#,
                r#"{"format":"delta","merge_keys":["id"]}"#,
                "is a merge key or order",
            ),
        ] {
            let e = table(partitioning, t).unwrap_err().to_string();
            assert!(e.contains(says), "{partitioning} {t}: {e}");
        }
        table(
            r#"{"from":"ts","as":"day","transform":"day"}"#,
            r#"{"format":"delta","merge_keys":["id"],"merge_order":"ts"}"#,
        )
        .unwrap();
    }

    #[test]
    fn parquet_sources_take_no_csv_options_and_any_wrapper() {
        let parquet = doc("").replace(r#""format":"csv""#, r#""format":"parquet""#);
        let c = Config::from_json(&parquet).unwrap();
        let s = &c.sources[0];
        assert_eq!(s.doc.format, FormatDoc::Parquet);
        let spec = s.convert_spec("orders/a.parquet");
        assert_eq!(spec.format, InputFormat::Parquet);
        assert_eq!(spec.compression, Compression::None);
        assert_eq!(
            s.convert_spec("orders/a.parquet.gz").compression,
            Compression::Gzip
        );
        assert_eq!(
            s.convert_spec("orders/a.parquet.zst").compression,
            Compression::Zstd
        );
        let with_csv = parquet.replace(r#""format":"parquet""#, r#""format":"parquet","csv":{}"#);
        let e = Config::from_json(&with_csv).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"invalid configuration at sources[0].csv: only for format "csv""#
        );
        let e = Config::from_json(&doc("").replace(r#""format":"csv""#, r#""format":"xlsx""#))
            .unwrap_err();
        assert!(e.to_string().contains("sources[0].format"), "{e}");
        for format in ["parquet", "avro", "orc"] {
            assert!(e.to_string().contains(format), "{e}");
        }
    }

    #[test]
    fn avro_and_orc_sources_take_no_csv_options_nor_rejects() {
        for (name, format) in [("avro", InputFormat::Avro), ("orc", InputFormat::Orc)] {
            let typed = doc("").replace(r#""format":"csv""#, &format!(r#""format":"{name}""#));
            let c = Config::from_json(&typed).unwrap();
            let s = &c.sources[0];
            assert!(s.doc.format.is_typed());
            let spec = s.convert_spec(&format!("orders/a.{name}"));
            assert_eq!(spec.format, format);
            assert_eq!(spec.compression, Compression::None);
            assert_eq!(
                s.convert_spec(&format!("orders/a.{name}.gz")).compression,
                Compression::Gzip
            );
            let with_csv = typed.replace(
                &format!(r#""format":"{name}""#),
                &format!(r#""format":"{name}","csv":{{}}"#),
            );
            assert_eq!(
                Config::from_json(&with_csv).unwrap_err().to_string(),
                r#"invalid configuration at sources[0].csv: only for format "csv""#
            );
            let reject = doc(r#","on_bad_row":"reject""#)
                .replace(r#""format":"csv""#, &format!(r#""format":"{name}""#));
            let e = Config::from_json(&reject).unwrap_err().to_string();
            assert!(
                e.contains("Parquet, Avro or ORC input's values are typed"),
                "{e}"
            );
        }
        assert!(!FormatDoc::Csv.is_typed() && !FormatDoc::Jsonl.is_typed());
    }

    #[test]
    fn bookmark_keys_are_validated_and_fingerprinted() {
        let a = Config::from_json(&doc("")).unwrap();
        let keyed = Config::from_json(&doc(r#","bookmark":{"keys":["id"]}"#)).unwrap();
        let b = keyed.sources[0].doc.bookmark.as_ref().unwrap();
        assert_eq!(b.order, crate::bookmark::KeyOrder::Ascending);
        assert_eq!(b.late_rows, crate::bookmark::LatePolicy::Write);
        assert_ne!(a.sources[0].fingerprint, keyed.sources[0].fingerprint);
        let desc =
            Config::from_json(&doc(r#","bookmark":{"keys":["id"],"order":"descending"}"#)).unwrap();
        assert_ne!(desc.sources[0].fingerprint, keyed.sources[0].fingerprint);
        let e = Config::from_json(&doc(r#","bookmark":{"keys":["amount"]}"#)).unwrap_err();
        assert!(e.to_string().contains("sources[0].bookmark.keys[0]"), "{e}");
        assert!(e.to_string().contains("nullable"), "{e}");
        let e = Config::from_json(&doc(r#","bookmark":{"keys":["id"],"order":"up"}"#)).unwrap_err();
        assert!(e.to_string().contains("sources[0].bookmark.order"), "{e}");
    }

    #[test]
    fn fingerprint_moves_with_the_schema_only() {
        let a = Config::from_json(&doc("")).unwrap();
        let b = Config::from_json(&doc(r#","max_attempts":5"#)).unwrap();
        let c = Config::from_json(&doc("").replace("int64", "int32")).unwrap();
        assert_eq!(a.sources[0].fingerprint, b.sources[0].fingerprint);
        assert_ne!(a.sources[0].fingerprint, c.sources[0].fingerprint);
        // The schema version moves with the schema alone; the settings part with the rest.
        let d = Config::from_json(&doc(r#","csv":{"columns":"name"}"#)).unwrap();
        let e = Config::from_json(&doc(r#","csv":{"columns":"position"}"#)).unwrap();
        let version = |c: &Config| schema_version(&c.sources[0].fingerprint).to_string();
        assert_ne!(version(&a), version(&c));
        assert_eq!(version(&a), version(&d));
        assert_ne!(a.sources[0].fingerprint, d.sources[0].fingerprint);
        let f = Config::from_json(&doc(r#","csv":{}"#)).unwrap();
        assert_eq!(
            f.sources[0].fingerprint, e.sources[0].fingerprint,
            "default left out"
        );
        assert_eq!(a.sources[0].fingerprint.len(), 33);
        let no_header = doc(r#","csv":{"columns":"name","header":false}"#);
        let err = Config::from_json(&no_header).unwrap_err().to_string();
        assert!(err.contains("sources[0].csv.columns"), "{err}");
    }

    #[test]
    fn the_bad_row_policy_is_validated_fingerprinted_and_given_to_the_converter() {
        use crate::convert::BadRows;
        let a = Config::from_json(&doc("")).unwrap();
        let fail = Config::from_json(&doc(r#","on_bad_row":"fail""#)).unwrap();
        let reject = Config::from_json(&doc(r#","on_bad_row":"reject""#)).unwrap();
        let at_5 =
            Config::from_json(&doc(r#","on_bad_row":"reject","max_rejected_rows":5"#)).unwrap();
        let fp = |c: &Config| c.sources[0].fingerprint.clone();
        assert_eq!(
            fp(&a),
            fp(&fail),
            "the default leaves fingerprints as they were"
        );
        assert_ne!(fp(&a), fp(&reject));
        assert_ne!(fp(&reject), fp(&at_5));
        assert_eq!(schema_version(&fp(&a)), schema_version(&fp(&reject)));
        let bad_rows = |c: &Config| c.sources[0].convert_spec("orders/a.csv").bad_rows;
        assert_eq!(bad_rows(&a), BadRows::Fail);
        assert_eq!(bad_rows(&reject), BadRows::Reject { max: 1000 });
        assert_eq!(bad_rows(&at_5), BadRows::Reject { max: 5 });

        let s = &reject.sources[0];
        assert_eq!(
            s.output_key("orders/2024/a.csv"),
            "orders/2024/a.csv.parquet"
        );
        assert_eq!(
            s.rejects_key("orders/2024/a.csv"),
            "orders/_rejects/2024/a.csv.jsonl"
        );

        let refused = |extra: &str| Config::from_json(&doc(extra)).unwrap_err().to_string();
        let e = refused(r#","max_rejected_rows":5"#);
        assert!(
            e.contains("sources[0].max_rejected_rows: only with on_bad_row"),
            "{e}"
        );
        let e = refused(r#","on_bad_row":"skip""#);
        assert!(e.contains("sources[0].on_bad_row"), "{e}");
        let e = refused(r#","on_bad_row":"reject","bookmark":{"keys":["id"]}"#);
        assert!(e.contains("bookmark keys"), "{e}");
        let parquet =
            doc(r#","on_bad_row":"reject""#).replace(r#""format":"csv""#, r#""format":"parquet""#);
        let e = Config::from_json(&parquet).unwrap_err().to_string();
        assert!(
            e.contains("Parquet, Avro or ORC input's values are typed"),
            "{e}"
        );
    }

    /// A JSON Lines source with `schema` (the inside of its list) and `extra` fields.
    fn jsonl(schema: &str, extra: &str) -> Result<Config, String> {
        Config::from_json(&format!(
            r#"{{"sources":[{{"source_id":"trail","bucket":"landing","prefix":"trail/",
            "format":"jsonl","schema":[{schema}],
            "output":{{"bucket":"lake","prefix":"trail/"}}{extra}}}]}}"#
        ))
        .map_err(|e| e.to_string())
    }

    #[test]
    fn line_logs_name_their_fields_by_the_patterns_groups() {
        use crate::convert::InputFormat;
        let doc = |schema: &str, regex: &str| {
            Config::from_json(&format!(
                r#"{{"sources":[{{"source_id":"alb","bucket":"landing","prefix":"alb/",
                "format":"regex","schema":[{schema}],{regex}
                "output":{{"bucket":"lake","prefix":"alb/"}}}}]}}"#
            ))
            .map_err(|e| e.to_string())
        };
        let pattern = r##""regex":{"pattern":"(?P<ip>[^ :]*):(?P<port>[0-9]*) (?P<rest>.*)","comment":"#"},"##;
        let c = doc(
            r#"{"name":"ip","type":"string"},{"name":"client_port","path":"port","type":"int32"}"#,
            pattern,
        )
        .unwrap();
        let spec = c.sources[0].convert_spec("alb/a.log.gz");
        assert_eq!(spec.format, InputFormat::Regex);
        let lines = spec.lines.expect("the pattern");
        assert_eq!(lines.null_values, ["-"]);
        assert_eq!(lines.comment.as_deref(), Some("#"));
        for (schema, regex, says) in [
            (
                r#"{"name":"ip","type":"string"}"#,
                "",
                "regex: format \"regex\" needs its pattern",
            ),
            (
                r#"{"name":"host","type":"string"}"#,
                pattern,
                "schema[0]: \"host\" is no named group",
            ),
            (
                r#"{"name":"ip","type":"struct<a:int32>"}"#,
                pattern,
                "a line's fields are text",
            ),
            (
                r#"{"name":"ip","path":"ip.a","type":"string"}"#,
                pattern,
                "a line's fields are flat",
            ),
            (
                r#"{"name":"ip","type":"string"}"#,
                r#""regex":{"pattern":"(\\S+)"},"#,
                "names no group",
            ),
            (
                r#"{"name":"ip","type":"string"}"#,
                r#""regex":{"pattern":"(?P<ip>"},"#,
                "regex.pattern",
            ),
        ] {
            let err = doc(schema, regex).unwrap_err();
            assert!(err.contains(says), "{schema} {regex}: {err}");
        }
        let err = jsonl(
            r#"{"name":"ip","type":"string"}"#,
            r#","regex":{"pattern":"(?P<ip>.*)"}"#,
        )
        .unwrap_err();
        assert!(err.contains("regex: only for format \"regex\""), "{err}");
    }

    #[test]
    fn json_documents_name_their_records_and_envelope() {
        use crate::convert::{InputFormat, JsonDocuments};
        let json = |json: &str| {
            jsonl(
                r#"{"name":"id","type":"string"}"#,
                &format!(r#","json":{json}"#),
            )
            .map(|c| c.sources[0].convert_spec("trail/a.json.gz"))
        };
        let documents = |json: &str| {
            Config::from_json(&format!(
                r#"{{"sources":[{{"source_id":"cw","bucket":"landing","prefix":"cw/",
                "format":"json","schema":[{{"name":"id","type":"string"}}],
                "output":{{"bucket":"lake","prefix":"cw/"}},"json":{json},"on_bad_row":"reject"}}]}}"#
            ))
            .map(|c| c.sources[0].convert_spec("cw/a.gz"))
            .map_err(|e| e.to_string())
        };
        let spec = documents(r#"{"records":"logEvents","envelope":["logGroup","owner"]}"#).unwrap();
        assert_eq!(spec.format, InputFormat::Json);
        assert_eq!(
            spec.json,
            JsonDocuments {
                records: Some("logEvents".into()),
                envelope: vec!["logGroup".into(), "owner".into()],
            }
        );
        assert_eq!(documents("{}").unwrap().json, JsonDocuments::default());
        for (bad, says) in [
            (r#"{"records":""}"#, "json.records: must not be empty"),
            (
                r#"{"envelope":["owner"]}"#,
                "json.envelope: an envelope is what surrounds",
            ),
            (
                r#"{"records":"logEvents","envelope":["logEvents"]}"#,
                "json.envelope[0]: \"logEvents\" is the records key",
            ),
            (
                r#"{"records":"r","envelope":["a","a"]}"#,
                "json.envelope[1]: \"a\" is the records key or named twice",
            ),
        ] {
            let err = documents(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
        let err = json(r#"{"records":"Records"}"#).unwrap_err();
        assert!(
            err.contains("records and envelope are for format \"json\""),
            "{err}"
        );
    }

    #[test]
    fn nested_columns_paths_and_policies_reach_the_converter() {
        use crate::convert::{BadValues, KeyMatch, Lineage, UnknownFields};
        let schema = r#"{"name":"userIdentity","type":"struct<type:string,arn:string>"},
            {"name":"user_arn","path":"userIdentity.arn","type":"string"},
            {"name":"at","type":"timestamp","format":"epoch_millis"},
            {"name":"requestParameters","type":"json"}"#;
        let c = jsonl(
            schema,
            r#","on_unknown_field":"rescue","on_bad_value":"rescue","json":{"keys":"case_insensitive"},
            "metadata_columns":{"_source_key":"key","_row":"row_number","_modified":"last_modified"}"#,
        )
        .unwrap();
        let s = &c.sources[0];
        let spec = s.convert_spec("trail/a.json");
        assert_eq!(spec.unknown_fields, UnknownFields::Rescue);
        assert_eq!(spec.bad_values, BadValues::Rescue);
        assert_eq!(spec.json_keys, KeyMatch::CaseInsensitive);
        assert_eq!(
            spec.options("user_arn")
                .and_then(|c| c.path.as_ref())
                .map(|p| p.to_string()),
            Some("userIdentity.arn".into())
        );
        assert_eq!(
            spec.lineage,
            vec![
                ("_source_key".to_string(), Lineage::Key),
                ("_row".to_string(), Lineage::RowNumber),
                ("_modified".to_string(), Lineage::LastModified)
            ],
            "in the document's order"
        );
        let names: Vec<String> = s
            .output_schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(
            names,
            [
                "userIdentity",
                "user_arn",
                "at",
                "requestParameters",
                "_rescued_data",
                "_source_key",
                "_row",
                "_modified"
            ]
        );
        assert_eq!(spec.output_schema(), s.output_schema);

        // Fingerprints: the defaults leave them as they were; each setting moves them.
        let plain = jsonl(schema, "").unwrap();
        let fp = |c: &Config| c.sources[0].fingerprint.clone();
        for same in [
            r#","on_unknown_field":"ignore""#,
            r#","on_bad_value":"fail""#,
            r#","json":{"keys":"exact"}"#,
            r#","metadata_columns":{}"#,
        ] {
            assert_eq!(fp(&plain), fp(&jsonl(schema, same).unwrap()), "{same}");
        }
        let mut seen = vec![fp(&plain)];
        for moved in [
            r#","on_unknown_field":"fail""#,
            r#","on_bad_value":"rescue""#,
            r#","on_bad_value":"rescue","rescued_column":"_extra""#,
            r#","json":{"keys":"case_insensitive"}"#,
            r#","metadata_columns":{"_k":"key"}"#,
            r#","metadata_columns":{"_k":"etag"}"#,
        ] {
            let f = fp(&jsonl(schema, moved).unwrap());
            assert!(!seen.contains(&f), "{moved}");
            seen.push(f);
        }
        // A type change deep inside a struct is a schema change.
        let deeper = schema.replace("arn:string>", "arn:int64>");
        assert_ne!(
            schema_version(&fp(&plain)),
            schema_version(&fp(&jsonl(&deeper, "").unwrap()))
        );
        assert_eq!(
            schema_version(&fp(&plain)),
            schema_version(&fp(&jsonl(schema, r#","on_unknown_field":"fail""#).unwrap()))
        );
    }

    #[test]
    fn nested_columns_paths_and_policies_are_validated() {
        let int = r#"{"name":"a","type":"int64"}"#;
        for (schema, extra, at, says) in [
            (
                int,
                r#","rescued_column":"_r""#,
                "rescued_column",
                "only with",
            ),
            (
                int,
                r#","on_bad_value":"rescue","rescued_column":"a""#,
                "rescued_column",
                "already a column",
            ),
            (
                int,
                r#","on_unknown_field":"rescue","metadata_columns":{"_rescued_data":"key"}"#,
                "metadata_columns._rescued_data",
                "already a column",
            ),
            (
                int,
                r#","metadata_columns":{"a":"key"}"#,
                "metadata_columns.a",
                "already a column",
            ),
            (
                int,
                r#","metadata_columns":{"b":"key","b":"etag"}"#,
                "metadata_columns",
                "named twice",
            ),
            (
                int,
                r#","metadata_columns":{"b":"size"}"#,
                "metadata_columns",
                "unknown variant",
            ),
            (
                int,
                r#","on_unknown_field":"drop""#,
                "on_unknown_field",
                "unknown variant",
            ),
            (
                r#"{"name":"a","type":"int64","format":"epoch_seconds"}"#,
                "",
                "schema[0].format",
                "only for timestamp and date",
            ),
            (
                r#"{"name":"a","type":"timestamp","timezone":"Mars/Base"}"#,
                "",
                "schema[0].timezone",
                "IANA",
            ),
            (
                r#"{"name":"a","path":"b[","type":"int64"}"#,
                "",
                "schema[0].path",
                "not closed",
            ),
            (
                r#"{"name":"a","type":"struct<b:int64>"}"#,
                r#","sum_columns":["a"]"#,
                "sum_columns[0]",
                "not a numeric column",
            ),
            (
                r#"{"name":"a","type":"struct<b:int64>"},{"name":"k","type":"int64"}"#,
                r#","output":{"bucket":"lake","prefix":"t/","table":{"format":"delta","merge_keys":["a"]}}"#,
                "merge_keys",
                "a key or order is a scalar column",
            ),
        ] {
            let doc = format!(
                r#"{{"sources":[{{"source_id":"t","bucket":"landing","prefix":"t/",
                "format":"jsonl","schema":[{schema}],
                "output":{{"bucket":"lake","prefix":"t/"}}{extra}}}]}}"#
            );
            // A later "output" replaces the first one (serde keeps the last).
            let doc = if extra.contains(r#""output""#) {
                doc.replacen(
                    r#""output":{"bucket":"lake","prefix":"t/"}"#,
                    r#""mode":"enable""#,
                    1,
                )
            } else {
                doc
            };
            let err = Config::from_json(&doc).unwrap_err().to_string();
            assert!(
                err.contains(at) && err.contains(says),
                "{schema} {extra}: {err}"
            );
        }
        // Lineage columns may order an upsert; CSV sources refuse what has no meaning there.
        let ok = jsonl(
            r#"{"name":"id","type":"int64"}"#,
            r#","metadata_columns":{"_modified":"last_modified"},"output":{"bucket":"lake","prefix":"t/","table":{"format":"delta","merge_keys":["id"],"merge_order":"_modified"}}"#,
        );
        let ok = ok.or_else(|_| {
            Config::from_json(
                r#"{"sources":[{"source_id":"t","bucket":"landing","prefix":"t/","format":"jsonl",
                "schema":[{"name":"id","type":"int64"}],"metadata_columns":{"_modified":"last_modified"},
                "output":{"bucket":"lake","prefix":"t/","table":{"format":"delta","merge_keys":["id"],"merge_order":"_modified"}}}]}"#,
            )
            .map_err(|e| e.to_string())
        });
        assert!(ok.is_ok(), "{ok:?}");
        for (extra, says) in [
            (r#","csv":{"decimal_point":";"}"#, "decimal_point"),
            (r#","csv":{"true_values":[]}"#, "true_values"),
            (
                r#","csv":{"true_values":["Y"],"false_values":["Y"]}"#,
                "listed twice",
            ),
            (
                r#","csv":{"null_values":["NA"],"false_values":["NA"]}"#,
                "listed twice",
            ),
            (
                r#","json":{"keys":"exact"}"#,
                "only for formats \"jsonl\" and \"json\"",
            ),
        ] {
            let err = Config::from_json(&doc(extra)).unwrap_err().to_string();
            assert!(err.contains(says), "{extra}: {err}");
        }
        // A row-level bookmark may be keyed by a path column, not by a nested one.
        let keyed = jsonl(
            r#"{"name":"seq","path":"meta.seq","type":"int64","nullable":false},{"name":"meta","type":"struct<seq:int64>"}"#,
            r#","bookmark":{"keys":["seq"]}"#,
        );
        assert!(keyed.is_ok(), "{keyed:?}");
        let err = jsonl(
            r#"{"name":"meta","type":"struct<seq:int64>","nullable":false}"#,
            r#","bookmark":{"keys":["meta"]}"#,
        )
        .unwrap_err();
        assert!(
            err.contains("bookmark.keys[0]") && err.contains("a key must be"),
            "{err}"
        );
        let nested_csv =
            doc("").replace(r#""type":"decimal(12,2)""#, r#""type":"struct<a:int32>""#);
        let err = Config::from_json(&nested_csv).unwrap_err().to_string();
        assert!(err.contains("CSV columns are scalars"), "{err}");
        let path_csv = doc("").replace(r#""name":"amount","#, r#""name":"amount","path":"x.y","#);
        let err = Config::from_json(&path_csv).unwrap_err().to_string();
        assert!(err.contains("no structure to follow"), "{err}");
        let c = Config::from_json(&doc(
            r#","csv":{"null_values":["","NA","\\N"],"true_values":["Y"],"false_values":["N"],"decimal_point":","}"#,
        ))
        .unwrap();
        let values = c.sources[0].convert_spec("orders/a.csv").csv_values;
        assert_eq!(
            values.null_values.as_deref(),
            Some(&["".to_string(), "NA".into(), "\\N".into()][..])
        );
        assert!(values.decimal_comma);
        assert_ne!(
            c.sources[0].fingerprint,
            Config::from_json(&doc("")).unwrap().sources[0].fingerprint
        );
    }
}
