//! Column types as a user writes them in a table definition, and their Arrow form.
//!
//! A table's schema is declared as a list of [`ColumnSpec`]s whose types are spelled
//! `int32`, `decimal(12,2)`, `timestamp`, `json`, `struct<type:string,arn:string>`,
//! `array<…>`, `map<string,…>`… in configuration, as Athena and Glue DDL spell them. This
//! module parses and prints those spellings and maps them onto the one Arrow [`DataType`]
//! each stands for, so that every reader and the Parquet writer agree on the physical
//! layout: timestamps are always UTC microseconds (never INT96), dates are `Date32`,
//! decimals are `Decimal128`, lists and maps use the names the Parquet spec gives their
//! parts. It also reads the column options that say where a value is ([`FieldPath`]) and
//! how a time is written ([`TimeFormat`], [`Zone`]).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

/// The time zone every `timestamp` column carries: values are instants in UTC.
const UTC: &str = "+00:00";

/// Largest precision a `Decimal128` holds.
const MAX_DECIMAL_PRECISION: u8 = 38;

/// The type of one column, as spelled in a table definition.
///
/// Serialized as its spelling (`"int64"`, `"decimal(12,2)"`, …), see [`FromStr`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnType {
    /// `int32`: 32-bit signed integer.
    Int32,
    /// `int64`: 64-bit signed integer.
    Int64,
    /// `float32`: IEEE 754 single precision.
    Float32,
    /// `float64`: IEEE 754 double precision.
    Float64,
    /// `decimal(P,S)`: exact decimal with `1 <= P <= 38` digits, `S` of them after the
    /// point (`0 <= S <= P`), stored as `Decimal128`. Text with more than `S` fraction
    /// digits is rounded half away from zero (arrow-cast's `parse_decimal`); text with
    /// more than `P - S` integer digits is an error.
    Decimal {
        /// Total number of digits.
        precision: u8,
        /// Digits after the decimal point.
        scale: i8,
    },
    /// `string`: UTF-8 text.
    String,
    /// `bool`: `true` or `false`.
    Bool,
    /// `date`: calendar date (`2024-01-02`), stored as `Date32`.
    Date,
    /// `timestamp`: an instant, stored as microseconds since the epoch in UTC.
    /// Values without an offset are read as UTC.
    Timestamp,
}

impl ColumnType {
    /// The Arrow type a column of this type is decoded into and written as.
    pub fn to_arrow(&self) -> DataType {
        match *self {
            Self::Int32 => DataType::Int32,
            Self::Int64 => DataType::Int64,
            Self::Float32 => DataType::Float32,
            Self::Float64 => DataType::Float64,
            Self::Decimal { precision, scale } => DataType::Decimal128(precision, scale),
            Self::String => DataType::Utf8,
            Self::Bool => DataType::Boolean,
            Self::Date => DataType::Date32,
            Self::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
        }
    }

    /// The inverse of [`Self::to_arrow`]: `None` for an Arrow type no column type maps to.
    pub fn from_arrow(data_type: &DataType) -> Option<Self> {
        Some(match data_type {
            DataType::Int32 => Self::Int32,
            DataType::Int64 => Self::Int64,
            DataType::Float32 => Self::Float32,
            DataType::Float64 => Self::Float64,
            &DataType::Decimal128(precision, scale) => decimal(precision, scale)?,
            DataType::Utf8 => Self::String,
            DataType::Boolean => Self::Bool,
            DataType::Date32 => Self::Date,
            DataType::Timestamp(TimeUnit::Microsecond, Some(tz)) if tz.as_ref() == UTC => {
                Self::Timestamp
            }
            _ => return None,
        })
    }

    /// Whether a column of this type can be summed (integers, floats and decimals).
    pub fn is_summable(&self) -> bool {
        matches!(
            self,
            Self::Int32 | Self::Int64 | Self::Float32 | Self::Float64 | Self::Decimal { .. }
        )
    }
}

/// A decimal type, if `precision` and `scale` are within the supported range.
fn decimal(precision: u8, scale: i8) -> Option<ColumnType> {
    let valid = (1..=MAX_DECIMAL_PRECISION).contains(&precision)
        && u8::try_from(scale).is_ok_and(|s| s <= precision);
    valid.then_some(ColumnType::Decimal { precision, scale })
}

impl fmt::Display for ColumnType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Int32 => f.write_str("int32"),
            Self::Int64 => f.write_str("int64"),
            Self::Float32 => f.write_str("float32"),
            Self::Float64 => f.write_str("float64"),
            Self::Decimal { precision, scale } => write!(f, "decimal({precision},{scale})"),
            Self::String => f.write_str("string"),
            Self::Bool => f.write_str("bool"),
            Self::Date => f.write_str("date"),
            Self::Timestamp => f.write_str("timestamp"),
        }
    }
}

/// A column type spelling that [`ColumnType::from_str`] does not accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown column type {0:?}: expected one of int32, int64, float32, float64, \
     decimal(P,S) with 1 <= P <= 38 and 0 <= S <= P, string, bool, date, timestamp"
)]
pub struct ParseColumnTypeError(String);

impl FromStr for ColumnType {
    type Err = ParseColumnTypeError;

    /// Parses `int32`, `int64`, `float32`, `float64`, `decimal(P,S)` (spaces allowed
    /// around `P` and `S`), `string`, `bool`, `date` or `timestamp`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parsed = match s {
            "int32" => Some(Self::Int32),
            "int64" => Some(Self::Int64),
            "float32" => Some(Self::Float32),
            "float64" => Some(Self::Float64),
            "string" => Some(Self::String),
            "bool" => Some(Self::Bool),
            "date" => Some(Self::Date),
            "timestamp" => Some(Self::Timestamp),
            _ => s
                .strip_prefix("decimal(")
                .and_then(|rest| rest.strip_suffix(')'))
                .and_then(|args| args.split_once(','))
                .and_then(|(p, s)| decimal(p.trim().parse().ok()?, s.trim().parse().ok()?)),
        };
        parsed.ok_or_else(|| ParseColumnTypeError(s.to_owned()))
    }
}

impl Serialize for ColumnType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ColumnType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(de::Error::custom)
    }
}

/// Field metadata marking a `json` column: its Arrow type is `Utf8`, and the key tells the
/// readers that the text is a JSON value (kept in the Parquet file's Arrow schema).
pub const JSON_METADATA_KEY: &str = "tidemark:type";

/// Deepest nesting a type spelling may have (`array<array<…>>`).
pub const MAX_TYPE_DEPTH: usize = 64;

/// The accepted spellings, for errors.
const SPELLINGS: &str = "int32, int64, float32, float64, decimal(P,S) with 1 <= P <= 38 and \
     0 <= S <= P, string, bool, date, timestamp, json, struct<name:type,…>, array<type>, \
     map<string,type> (Glue's int, integer, bigint, float, double and boolean read as int32, \
     int64, float32, float64 and bool)";

/// The type of a column or of a field inside one: a scalar, a JSON subtree kept as text, or
/// a nested type, spelled as Athena and Glue DDL spell them and nested to any depth
/// (`array<struct<type:string,ARN:string>>`).
///
/// Serialized as its spelling, see [`FromStr`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FieldType {
    /// A scalar (`int64`, `decimal(12,2)`, `timestamp`, …).
    Scalar(ColumnType),
    /// `json`: any JSON value, kept as its compact text (keys in input order, numbers as
    /// written), stored as a Parquet string.
    Json,
    /// `struct<name:type,…>`: named fields, each nullable, in order.
    Struct(Vec<StructField>),
    /// `array<type>`: a list of values of one type (elements nullable).
    Array(Box<FieldType>),
    /// `map<string,type>`: string keys (never NULL) to values of one type (nullable).
    Map(Box<FieldType>),
}

/// A field of a [`FieldType::Struct`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StructField {
    /// The field's name (any text but empty; JSON keys are matched by it).
    pub name: String,
    /// Its type.
    pub ty: FieldType,
}

impl From<ColumnType> for FieldType {
    fn from(ty: ColumnType) -> Self {
        Self::Scalar(ty)
    }
}

impl FieldType {
    /// The scalar type, if this is one.
    pub fn scalar(&self) -> Option<ColumnType> {
        match self {
            Self::Scalar(ty) => Some(*ty),
            _ => None,
        }
    }

    /// A struct, array or map.
    pub fn is_nested(&self) -> bool {
        matches!(self, Self::Struct(_) | Self::Array(_) | Self::Map(_))
    }

    /// Whether a column of this type can be summed (integers, floats and decimals).
    pub fn is_summable(&self) -> bool {
        self.scalar().is_some_and(|t| t.is_summable())
    }

    /// Levels of nesting: 0 for a scalar or `json`.
    pub fn depth(&self) -> usize {
        match self {
            Self::Scalar(_) | Self::Json => 0,
            Self::Struct(fields) => 1 + fields.iter().map(|f| f.ty.depth()).max().unwrap_or(0),
            Self::Array(t) | Self::Map(t) => 1 + t.depth(),
        }
    }

    /// The Arrow type a value of this type is decoded into and written as: `Struct` with
    /// nullable fields; `List` of a nullable `element` (the name the Parquet spec gives
    /// it); `Map` of `key_value` entries with a non-null `Utf8` `key` and a nullable
    /// `value`; `Utf8` for `json` (the field says it holds JSON: [`Self::arrow_field`]).
    pub fn to_arrow(&self) -> DataType {
        match self {
            Self::Scalar(ty) => ty.to_arrow(),
            Self::Json => DataType::Utf8,
            Self::Struct(fields) => DataType::Struct(
                fields
                    .iter()
                    .map(|f| f.ty.arrow_field(&f.name, true))
                    .collect(),
            ),
            Self::Array(element) => {
                DataType::List(Arc::new(element.arrow_field(LIST_ELEMENT, true)))
            }
            Self::Map(value) => DataType::Map(
                Arc::new(Field::new(
                    MAP_ENTRIES,
                    DataType::Struct(
                        vec![
                            Field::new(MAP_KEY, DataType::Utf8, false),
                            value.arrow_field(MAP_VALUE, true),
                        ]
                        .into(),
                    ),
                    false,
                )),
                false,
            ),
        }
    }

    /// The Arrow field `name` of this type; a `json` one carries [`JSON_METADATA_KEY`].
    pub fn arrow_field(&self, name: &str, nullable: bool) -> Field {
        let field = Field::new(name, self.to_arrow(), nullable);
        match self {
            Self::Json => field.with_metadata(std::collections::HashMap::from([(
                JSON_METADATA_KEY.to_string(),
                "json".to_string(),
            )])),
            _ => field,
        }
    }

    /// The inverse of [`Self::arrow_field`]: `None` for a field no type maps to.
    pub fn from_field(field: &Field) -> Option<Self> {
        if field.metadata().get(JSON_METADATA_KEY).map(String::as_str) == Some("json") {
            return (field.data_type() == &DataType::Utf8).then_some(Self::Json);
        }
        Self::from_arrow(field.data_type())
    }

    /// The type of an Arrow `data_type` as [`Self::to_arrow`] makes it (a `json` field
    /// inside a struct, list or map is recognised by its metadata; a top-level one needs
    /// its field: [`Self::from_field`]).
    pub fn from_arrow(data_type: &DataType) -> Option<Self> {
        Some(match data_type {
            DataType::Struct(fields) if !fields.is_empty() => Self::Struct(
                fields
                    .iter()
                    .map(|f| {
                        Some(StructField {
                            name: f.name().clone(),
                            ty: Self::from_field(f)?,
                        })
                    })
                    .collect::<Option<_>>()?,
            ),
            DataType::List(element) => Self::Array(Box::new(Self::from_field(element)?)),
            DataType::Map(entries, false) => {
                let DataType::Struct(kv) = entries.data_type() else {
                    return None;
                };
                match kv.iter().collect::<Vec<_>>().as_slice() {
                    [key, value] if key.data_type() == &DataType::Utf8 && !key.is_nullable() => {
                        Self::Map(Box::new(Self::from_field(value)?))
                    }
                    _ => return None,
                }
            }
            other => Self::Scalar(ColumnType::from_arrow(other)?),
        })
    }
}

/// The name of a list's element field, as the Parquet spec names it.
pub const LIST_ELEMENT: &str = "element";
/// The names of a map's entries, key and value, as the Parquet spec names them.
pub const MAP_ENTRIES: &str = "key_value";
/// See [`MAP_ENTRIES`].
pub const MAP_KEY: &str = "key";
/// See [`MAP_ENTRIES`].
pub const MAP_VALUE: &str = "value";

impl fmt::Display for FieldType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Scalar(ty) => ty.fmt(f),
            Self::Json => f.write_str("json"),
            Self::Struct(fields) => {
                f.write_str("struct<")?;
                for (i, field) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{}:{}", FieldName(&field.name), field.ty)?;
                }
                f.write_str(">")
            }
            Self::Array(element) => write!(f, "array<{element}>"),
            Self::Map(value) => write!(f, "map<string,{value}>"),
        }
    }
}

/// A struct field's name as spelled in a type: in backquotes (a backquote doubled) unless it
/// is a plain identifier (ASCII letters, digits and `_`).
struct FieldName<'a>(&'a str);

impl fmt::Display for FieldName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.0;
        // Glue's DDL needs backquotes around any name but a plain identifier.
        let plain = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if plain {
            f.write_str(name)
        } else {
            write!(f, "`{}`", name.replace('`', "``"))
        }
    }
}

/// A type spelling that [`FieldType::from_str`] does not accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown column type {spelling:?}: {detail}expected one of {SPELLINGS}")]
pub struct ParseFieldTypeError {
    spelling: String,
    /// What is wrong and where, ending in `"; "`, or empty.
    detail: String,
}

impl FromStr for FieldType {
    type Err = ParseFieldTypeError;

    /// Parses a scalar spelling (see [`ColumnType::from_str`], plus Glue's `int`,
    /// `integer`, `bigint`, `float`, `double` and `boolean`), `json`, `struct<name:type,…>`
    /// (a name in backquotes may hold any character, a backquote doubled), `array<type>` or
    /// `map<string,type>`, with spaces allowed between the parts.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut spelling = Spelling { text: s, at: 0 };
        let error = |detail: String| ParseFieldTypeError {
            spelling: s.to_owned(),
            detail,
        };
        let ty = spelling.ty(0).map_err(|e| error(format!("{e}; ")))?;
        spelling.ws();
        if spelling.at < s.len() {
            return Err(error(format!(
                "unexpected {:?} at character {}; ",
                &s[spelling.at..],
                spelling.at + 1
            )));
        }
        Ok(ty)
    }
}

/// A recursive-descent reader of a type spelling.
struct Spelling<'a> {
    text: &'a str,
    at: usize,
}

impl Spelling<'_> {
    fn rest(&self) -> &str {
        &self.text[self.at..]
    }

    fn ws(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, c: char) -> bool {
        self.ws();
        if self.rest().starts_with(c) {
            self.at += c.len_utf8();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: char, after: &str) -> Result<(), String> {
        if self.eat(c) {
            return Ok(());
        }
        Err(format!(
            "expected {c:?} after {after} at character {}",
            self.at + 1
        ))
    }

    /// A run of ASCII letters, digits and `_`.
    fn word(&mut self) -> &str {
        self.ws();
        let start = self.at;
        let len = self
            .rest()
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(self.rest().len());
        self.at += len;
        &self.text[start..start + len]
    }

    fn ty(&mut self, depth: usize) -> Result<FieldType, String> {
        if depth > MAX_TYPE_DEPTH {
            return Err(format!("nested deeper than {MAX_TYPE_DEPTH} levels"));
        }
        let start = self.at;
        let word = self.word().to_owned();
        Ok(match word.as_str() {
            "struct" => {
                self.expect('<', "struct")?;
                let mut fields: Vec<StructField> = Vec::new();
                loop {
                    let name = self.field_name()?;
                    if fields.iter().any(|f| f.name == name) {
                        return Err(format!("field {name:?} appears twice in a struct"));
                    }
                    self.expect(':', &format!("field name {name:?}"))?;
                    let ty = self.ty(depth + 1)?;
                    fields.push(StructField { name, ty });
                    if self.eat('>') {
                        break;
                    }
                    self.expect(',', "a struct field")?;
                }
                FieldType::Struct(fields)
            }
            "array" => {
                self.expect('<', "array")?;
                let element = self.ty(depth + 1)?;
                self.expect('>', "the element type")?;
                FieldType::Array(Box::new(element))
            }
            "map" => {
                self.expect('<', "map")?;
                let key = self.word().to_owned();
                if key != "string" {
                    return Err(format!(
                        "a map's keys must be string (JSON object keys are), not {key:?}"
                    ));
                }
                self.expect(',', "the key type")?;
                let value = self.ty(depth + 1)?;
                self.expect('>', "the value type")?;
                FieldType::Map(Box::new(value))
            }
            "json" => FieldType::Json,
            "decimal" => {
                self.expect('(', "decimal")?;
                let close = self.rest().find(')').ok_or("decimal( is not closed")?;
                let args = &self.rest()[..close];
                let spelled = format!("decimal({args})");
                self.at += close + 1;
                FieldType::Scalar(spelled.parse().map_err(|_| {
                    format!("{spelled:?} is not a decimal(P,S) with 1 <= P <= 38 and 0 <= S <= P")
                })?)
            }
            "int" | "integer" => FieldType::Scalar(ColumnType::Int32),
            "bigint" => FieldType::Scalar(ColumnType::Int64),
            "float" => FieldType::Scalar(ColumnType::Float32),
            "double" => FieldType::Scalar(ColumnType::Float64),
            "boolean" => FieldType::Scalar(ColumnType::Bool),
            scalar => match scalar.parse::<ColumnType>() {
                Ok(ty) => FieldType::Scalar(ty),
                Err(_) => {
                    self.ws();
                    let shown = if scalar.is_empty() {
                        self.rest().chars().take(20).collect::<String>()
                    } else {
                        scalar.to_owned()
                    };
                    return Err(format!(
                        "{shown:?} at character {} is not a type",
                        start + 1
                    ));
                }
            },
        })
    }

    /// A struct field's name: up to the next `:` (spaces at either end dropped), or in
    /// backquotes.
    fn field_name(&mut self) -> Result<String, String> {
        self.ws();
        if let Some(rest) = self.rest().strip_prefix('`') {
            let mut name = String::new();
            let mut chars = rest.char_indices();
            while let Some((i, c)) = chars.next() {
                if c == '`' {
                    if rest[i + 1..].starts_with('`') {
                        chars.next();
                        name.push('`');
                        continue;
                    }
                    self.at += 1 + i + 1;
                    return Ok(name);
                }
                name.push(c);
            }
            return Err("a backquoted field name is not closed".into());
        }
        let end = self
            .rest()
            .find([':', ',', '<', '>', '`'])
            .unwrap_or(self.rest().len());
        let name = self.rest()[..end].trim_end().to_owned();
        if name.is_empty() {
            return Err(format!(
                "expected a field name at character {}",
                self.at + 1
            ));
        }
        self.at += self.rest()[..end].len();
        Ok(name)
    }
}

impl Serialize for FieldType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for FieldType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(de::Error::custom)
    }
}

/// Where a column's values are in a record: a key, then keys and array indexes
/// (`userIdentity.arn`, `resources[0].ARN`, `detail["x.y"]`).
///
/// Spelled with `.` before a key, `[N]` for the N-th element (from 0) of an array, and
/// `["…"]` for a key holding `.`, `[`, `]` or `"` (a JSON string inside the brackets).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldPath {
    steps: Vec<Step>,
}

/// One step of a [`FieldPath`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Step {
    /// The value of this key of an object (a struct's field, a map's key).
    Key(String),
    /// The element at this index (from 0) of an array.
    Index(usize),
}

impl FieldPath {
    /// A path of these steps, the first a key.
    pub fn new(steps: Vec<Step>) -> Option<Self> {
        matches!(steps.first(), Some(Step::Key(_))).then_some(Self { steps })
    }

    /// The steps, the first a key.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The first key.
    pub fn head(&self) -> &str {
        match &self.steps[0] {
            Step::Key(key) => key,
            Step::Index(_) => unreachable!("a path starts with a key"),
        }
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.steps.iter().enumerate() {
            match step {
                Step::Index(n) => write!(f, "[{n}]")?,
                Step::Key(key) => {
                    let plain =
                        !key.is_empty() && !key.contains(['.', '[', ']', '"']) && key.trim() == key;
                    match (plain, i) {
                        (true, 0) => f.write_str(key)?,
                        (true, _) => write!(f, ".{key}")?,
                        (false, _) => write!(
                            f,
                            "[{}]",
                            serde_json::to_string(key).map_err(|_| fmt::Error)?
                        )?,
                    }
                }
            }
        }
        Ok(())
    }
}

/// A path spelling that [`FieldPath::from_str`] does not accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot read the path {spelling:?}: {detail} (write keys separated by dots and array \
     elements as [N], e.g. \"resources[0].ARN\"; a key holding . [ ] or \" as [\"a.b\"])"
)]
pub struct ParsePathError {
    spelling: String,
    detail: String,
}

impl FromStr for FieldPath {
    type Err = ParsePathError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let error = |detail: String| ParsePathError {
            spelling: s.to_owned(),
            detail,
        };
        let mut steps = Vec::new();
        let mut rest = s;
        while !rest.is_empty() {
            if let Some(inner) = rest.strip_prefix('[') {
                let close = inner
                    .find(']')
                    .ok_or_else(|| error("a [ is not closed".into()))?;
                if inner.starts_with('"') {
                    // A JSON string, which may itself hold `]`: read it whole.
                    let mut stream =
                        serde_json::Deserializer::from_str(inner).into_iter::<String>();
                    let key = match stream.next() {
                        Some(Ok(key)) => key,
                        _ => return Err(error("a quoted key is not a JSON string".into())),
                    };
                    let after = &inner[stream.byte_offset()..];
                    rest = after
                        .strip_prefix(']')
                        .ok_or_else(|| error("expected ] after a quoted key".into()))?;
                    steps.push(Step::Key(key));
                } else {
                    let digits = &inner[..close];
                    let index = digits
                        .parse::<usize>()
                        .ok()
                        .filter(|_| digits.bytes().all(|b| b.is_ascii_digit()))
                        .ok_or_else(|| {
                            error(format!("[{digits}] is not an array index such as [0]"))
                        })?;
                    if steps.is_empty() {
                        return Err(error("a path starts with a key".into()));
                    }
                    steps.push(Step::Index(index));
                    rest = &inner[close + 1..];
                }
                continue;
            }
            let key_text = if steps.is_empty() {
                rest
            } else {
                rest.strip_prefix('.')
                    .ok_or_else(|| error(format!("expected . or [ before {rest:?}")))?
            };
            let end = key_text
                .find(['.', '[', ']', '"'])
                .unwrap_or(key_text.len());
            let key = &key_text[..end];
            if key.is_empty() || key.trim() != key {
                return Err(error(format!(
                    "an empty key, or one with spaces at either end, before {:?} (write it as [\"…\"])",
                    &key_text[end..]
                )));
            }
            steps.push(Step::Key(key.to_owned()));
            rest = &key_text[end..];
        }
        Self::new(steps).ok_or_else(|| error("a path starts with a key".into()))
    }
}

impl Serialize for FieldPath {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for FieldPath {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(de::Error::custom)
    }
}

/// How a `timestamp` or `date` column's values are written in text inputs (CSV, JSON
/// Lines), when not as ISO 8601 / RFC 3339 strings.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TimeFormat {
    /// `epoch_seconds`: a number of seconds since 1970-01-01T00:00:00Z (a fraction allowed
    /// down to the microsecond), as a JSON number or a string.
    EpochSeconds,
    /// `epoch_millis`: milliseconds since the epoch (a fraction down to the microsecond).
    EpochMillis,
    /// `epoch_micros`: whole microseconds since the epoch.
    EpochMicros,
    /// A strftime pattern as chrono reads it (`%d/%m/%Y %H:%M:%S`, `%s`…); a value with an
    /// offset (`%z`) is that instant, one without is read in the column's `timezone`.
    Pattern(String),
}

impl TimeFormat {
    /// The unit of an epoch format, in microseconds.
    pub fn epoch_micros(&self) -> Option<i64> {
        match self {
            Self::EpochSeconds => Some(1_000_000),
            Self::EpochMillis => Some(1_000),
            Self::EpochMicros => Some(1),
            Self::Pattern(_) => None,
        }
    }
}

impl fmt::Display for TimeFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::EpochSeconds => "epoch_seconds",
            Self::EpochMillis => "epoch_millis",
            Self::EpochMicros => "epoch_micros",
            Self::Pattern(p) => p,
        })
    }
}

impl FromStr for TimeFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use chrono::format::{Item, StrftimeItems};
        Ok(match s {
            "epoch_seconds" => Self::EpochSeconds,
            "epoch_millis" => Self::EpochMillis,
            "epoch_micros" => Self::EpochMicros,
            pattern => {
                let items: Vec<Item<'_>> = StrftimeItems::new(pattern).collect();
                if pattern.is_empty() || items.iter().any(|i| matches!(i, Item::Error)) {
                    return Err(format!(
                        "{pattern:?} is not epoch_seconds, epoch_millis, epoch_micros or a \
                         strftime pattern chrono reads (e.g. \"%d/%m/%Y %H:%M\")"
                    ));
                }
                Self::Pattern(pattern.to_owned())
            }
        })
    }
}

impl Serialize for TimeFormat {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TimeFormat {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(de::Error::custom)
    }
}

/// The time zone in which a timestamp written without an offset is read: `UTC`, a fixed
/// offset (`+05:30`) or an IANA name (`America/New_York`). A local time that a zone's
/// daylight-saving change skips or repeats fails, as it is no one instant (pyarrow's and
/// pandas' default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Zone {
    /// A fixed offset from UTC (`UTC` is `+00:00`).
    Fixed(chrono::FixedOffset),
    /// An IANA time zone.
    Named(chrono_tz::Tz),
}

impl Default for Zone {
    fn default() -> Self {
        Self::Fixed(chrono::FixedOffset::east_opt(0).expect("zero is an offset"))
    }
}

impl Zone {
    /// The instant a local date-time stands for here, or why there is none.
    pub fn instant(
        &self,
        local: chrono::NaiveDateTime,
    ) -> Result<chrono::DateTime<chrono::Utc>, String> {
        use chrono::{LocalResult, TimeZone};
        let found = match self {
            Self::Fixed(offset) => offset
                .from_local_datetime(&local)
                .map(|t| t.with_timezone(&chrono::Utc)),
            Self::Named(tz) => tz
                .from_local_datetime(&local)
                .map(|t| t.with_timezone(&chrono::Utc)),
        };
        match found {
            LocalResult::Single(t) => Ok(t),
            LocalResult::Ambiguous(..) => Err(format!(
                "{local} happens twice in {self} (a daylight-saving change): write it with an offset"
            )),
            LocalResult::None => Err(format!(
                "{local} does not exist in {self} (skipped by a daylight-saving change)"
            )),
        }
    }

    /// The calendar date of `instant` here.
    pub fn date(&self, instant: chrono::DateTime<chrono::Utc>) -> chrono::NaiveDate {
        match self {
            Self::Fixed(offset) => instant.with_timezone(offset).date_naive(),
            Self::Named(tz) => instant.with_timezone(tz).date_naive(),
        }
    }

    /// Whether this is UTC.
    pub fn is_utc(&self) -> bool {
        *self == Self::default()
    }
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            _ if self.is_utc() => f.write_str("UTC"),
            Self::Fixed(offset) => offset.fmt(f),
            Self::Named(tz) => f.write_str(tz.name()),
        }
    }
}

impl FromStr for Zone {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "UTC" || s == "Z" {
            return Ok(Self::default());
        }
        if let Ok(offset) = s.parse::<chrono::FixedOffset>() {
            return Ok(Self::Fixed(offset));
        }
        s.parse::<chrono_tz::Tz>().map(Self::Named).map_err(|_| {
            format!(
                "{s:?} is not a time zone: write UTC, an offset such as +05:30, or an IANA \
                 name such as America/New_York"
            )
        })
    }
}

impl Serialize for Zone {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Zone {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(de::Error::custom)
    }
}

/// One column of a table definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ColumnSpec {
    /// Column name: the CSV header is not checked against it (columns are matched by
    /// position) unless `csv.columns` is `name`; JSON Lines keys, and Parquet, Avro and
    /// ORC columns, are matched by it (unless `path` says where the value is).
    pub name: String,
    /// Where the value is in a record with structure (JSON Lines, Parquet, Avro, ORC):
    /// `userIdentity.arn`, `resources[0].ARN`, `detail["x.y"]` (`.` before a key, `[N]` for
    /// the N-th element from 0, `["…"]` for a key holding `.`, `[`, `]` or `"`). Absent: the
    /// top-level field `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "config-schema", schemars(with = "Option<String>"))]
    pub path: Option<FieldPath>,
    /// Column type, spelled as Athena and Glue DDL spell it: `int32`, `int64`, `float32`,
    /// `float64`, `decimal(P,S)` (1 <= P <= 38, 0 <= S <= P), `string`, `bool`, `date`,
    /// `timestamp`, `json` (a subtree kept as compact JSON text), `struct<name:type,…>`,
    /// `array<type>`, `map<string,type>`, nested to any depth; Glue's `int`, `integer`,
    /// `bigint`, `float`, `double` and `boolean` are read as `int32`, `int64`, `float32`,
    /// `float64` and `bool`.
    #[serde(rename = "type")]
    #[cfg_attr(feature = "config-schema", schemars(with = "String"))]
    pub ty: FieldType,
    /// Whether the column may hold NULLs (an empty CSV field, a missing or `null` JSON
    /// value, an absent path). Defaults to `true`.
    #[serde(default = "nullable_by_default")]
    pub nullable: bool,
    /// For `timestamp` and `date` columns of text inputs: how the values are written, when
    /// not as ISO 8601 strings: `epoch_seconds`, `epoch_millis` (both with a fraction down to
    /// the microsecond), `epoch_micros`, or a strftime pattern as chrono reads it
    /// (`%d/%m/%Y %H:%M:%S`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "config-schema", schemars(with = "Option<String>"))]
    pub format: Option<TimeFormat>,
    /// For `timestamp` (and `date` read from epoch numbers) columns: the zone of a time
    /// written without an offset (default UTC): `UTC`, a fixed offset (`+05:30`) or an IANA
    /// name (`America/New_York`); a local time a daylight-saving change skips or repeats
    /// fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "config-schema", schemars(with = "Option<String>"))]
    pub timezone: Option<Zone>,
}

fn nullable_by_default() -> bool {
    true
}

impl ColumnSpec {
    /// A nullable column of type `ty`, read from the field `name`.
    pub fn new(name: impl Into<String>, ty: impl Into<FieldType>) -> Self {
        Self {
            name: name.into(),
            path: None,
            ty: ty.into(),
            nullable: true,
            format: None,
            timezone: None,
        }
    }

    /// The column's own checks: `format` and `timezone` only where they mean something.
    /// `Err` holds the name of the field at fault and why.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let scalar = self.ty.scalar();
        let timed = matches!(scalar, Some(ColumnType::Timestamp | ColumnType::Date));
        if self.format.is_some() && !timed {
            return Err((
                "format",
                format!("only for timestamp and date columns, not {}", self.ty),
            ));
        }
        if let Some(zone) = &self.timezone {
            let used = scalar == Some(ColumnType::Timestamp)
                || (scalar == Some(ColumnType::Date)
                    && self
                        .format
                        .as_ref()
                        .is_some_and(|f| f.epoch_micros().is_some()));
            if !used {
                return Err((
                    "timezone",
                    format!(
                        "{zone} would not be used: a timezone is for timestamp columns (and \
                         date columns read from epoch numbers)"
                    ),
                ));
            }
        }
        if self.name.is_empty() {
            return Err(("name", "must not be empty".into()));
        }
        Ok(())
    }
}

/// The Arrow schema of a table with these columns, in order.
pub fn arrow_schema(cols: &[ColumnSpec]) -> SchemaRef {
    Arc::new(Schema::new(
        cols.iter()
            .map(|c| c.ty.arrow_field(&c.name, c.nullable))
            .collect::<Vec<_>>(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [ColumnType; 9] = [
        ColumnType::Int32,
        ColumnType::Int64,
        ColumnType::Float32,
        ColumnType::Float64,
        ColumnType::Decimal {
            precision: 12,
            scale: 2,
        },
        ColumnType::String,
        ColumnType::Bool,
        ColumnType::Date,
        ColumnType::Timestamp,
    ];

    #[test]
    fn spellings_round_trip_through_str_and_arrow() {
        for ty in ALL {
            let spelled = ty.to_string();
            assert_eq!(spelled.parse::<ColumnType>(), Ok(ty), "{spelled}");
            assert_eq!(
                ColumnType::from_arrow(&ty.to_arrow()),
                Some(ty),
                "{spelled}"
            );
        }
        assert_eq!(ALL[4].to_string(), "decimal(12,2)");
        assert_eq!(
            "decimal( 38 , 0 )".parse(),
            Ok(ColumnType::Decimal {
                precision: 38,
                scale: 0
            })
        );
    }

    #[test]
    fn arrow_types_are_the_documented_ones() {
        assert_eq!(
            ColumnType::Timestamp.to_arrow(),
            DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
        );
        assert_eq!(ColumnType::Date.to_arrow(), DataType::Date32);
        assert_eq!(ALL[4].to_arrow(), DataType::Decimal128(12, 2));
        assert_eq!(ColumnType::from_arrow(&DataType::Int16), None);
        assert_eq!(
            ColumnType::from_arrow(&DataType::Timestamp(TimeUnit::Nanosecond, None)),
            None
        );
    }

    #[test]
    fn bad_spellings_are_rejected_with_the_accepted_list() {
        for bad in [
            "decimal(0,0)",
            "decimal(39,2)",
            "decimal(5,6)",
            "decimal(5,-1)",
            "decimal(5)",
            "decimal(5,2",
            "Int32",
            "text",
            "",
        ] {
            let err = bad.parse::<ColumnType>().unwrap_err().to_string();
            assert!(
                err.contains("int32, int64") && err.contains("timestamp"),
                "{err}"
            );
        }
    }

    #[test]
    fn summable_types() {
        let summable: Vec<_> = ALL.iter().filter(|t| t.is_summable()).collect();
        assert_eq!(summable.len(), 5);
        assert!(!ColumnType::Date.is_summable());
    }

    #[test]
    fn column_spec_serde() {
        let cols: Vec<ColumnSpec> = serde_json::from_str(
            r#"[{"name":"id","type":"int64","nullable":false},{"name":"price","type":"decimal(12,2)"}]"#,
        )
        .unwrap();
        assert_eq!(cols[0].ty, ColumnType::Int64.into());
        assert!(!cols[0].nullable);
        assert!(cols[1].nullable, "nullable defaults to true");
        assert_eq!(
            serde_json::to_string(&cols[1]).unwrap(),
            r#"{"name":"price","type":"decimal(12,2)","nullable":true}"#
        );
        let unknown = serde_json::from_str::<ColumnSpec>(r#"{"name":"a","type":"int32","x":1}"#);
        assert!(unknown.unwrap_err().to_string().contains("unknown field"));
        let bad = serde_json::from_str::<ColumnSpec>(r#"{"name":"a","type":"int8"}"#);
        assert!(bad.unwrap_err().to_string().contains("expected one of"));

        let schema = arrow_schema(&cols);
        assert_eq!(schema.field(0).data_type(), &DataType::Int64);
        assert!(!schema.field(0).is_nullable());
        assert_eq!(schema.field(1).name(), "price");
    }

    #[test]
    fn nested_spellings_round_trip_through_str_and_arrow() {
        for spelled in [
            "json",
            "struct<type:string,arn:string>",
            "array<struct<type:string,ARN:string>>",
            "map<string,string>",
            "map<string,array<decimal(12,2)>>",
            "struct<a:struct<b:struct<c:array<map<string,json>>>>,d:timestamp>",
            "struct<`a:b`:int32,`x``y`:bool,` pad`:date,`account id`:string,`x-amz-acl`:json>",
        ] {
            let ty: FieldType = spelled.parse().unwrap_or_else(|e| panic!("{spelled}: {e}"));
            assert_eq!(ty.to_string(), spelled);
            let field = ty.arrow_field("c", true);
            assert_eq!(FieldType::from_field(&field), Some(ty.clone()), "{spelled}");
        }
        let spaced: FieldType = " struct < a : int , b : array < bigint > > "
            .parse()
            .unwrap();
        assert_eq!(spaced.to_string(), "struct<a:int32,b:array<int64>>");
        assert_eq!(
            "map<string,double>"
                .parse::<FieldType>()
                .unwrap()
                .to_string(),
            "map<string,float64>"
        );
        assert_eq!(
            "array<boolean>".parse::<FieldType>().unwrap(),
            FieldType::Array(Box::new(ColumnType::Bool.into()))
        );
    }

    #[test]
    fn nested_types_map_to_the_arrow_and_parquet_names() {
        let ty: FieldType = "map<string,array<json>>".parse().unwrap();
        let DataType::Map(entries, false) = ty.to_arrow() else {
            panic!("a map")
        };
        assert_eq!(entries.name(), "key_value");
        let DataType::Struct(kv) = entries.data_type() else {
            panic!("entries")
        };
        assert_eq!((kv[0].name().as_str(), kv[0].is_nullable()), ("key", false));
        assert_eq!(
            (kv[1].name().as_str(), kv[1].is_nullable()),
            ("value", true)
        );
        let DataType::List(element) = kv[1].data_type() else {
            panic!("a list")
        };
        assert_eq!(element.name(), "element");
        assert_eq!(
            element
                .metadata()
                .get(JSON_METADATA_KEY)
                .map(String::as_str),
            Some("json")
        );
        // A plain string is not json, and a json column needs its field to be known.
        assert_eq!(
            FieldType::from_field(&Field::new("s", DataType::Utf8, true)),
            Some(ColumnType::String.into())
        );
        assert_eq!(FieldType::Json.depth(), 0);
        assert_eq!(ty.depth(), 2);
        assert!(!FieldType::Json.is_summable() && !ty.is_summable());
        assert!(FieldType::from(ColumnType::Int64).is_summable());
    }

    #[test]
    fn bad_nested_spellings_say_what_and_where() {
        for (bad, says) in [
            ("struct<>", "expected a field name"),
            ("struct<a:int32,a:string>", "appears twice"),
            ("map<int32,string>", "keys must be string"),
            ("array<foo>", "\"foo\" at character 7 is not a type"),
            ("array<int32", "expected '>'"),
            ("struct<a int32>", "expected ':'"),
            ("struct<a:int32> x", "unexpected \"x\""),
            ("array<decimal(39,1)>", "is not a decimal(P,S)"),
            ("STRUCT<a:int32>", "is not a type"),
        ] {
            let err = bad.parse::<FieldType>().unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
            assert!(err.contains("struct<name:type"), "{bad}: {err}");
        }
        let deep = "array<".repeat(100) + "int32" + &">".repeat(100);
        let err = deep.parse::<FieldType>().unwrap_err().to_string();
        assert!(err.contains("nested deeper than 64 levels"), "{err}");
    }

    #[test]
    fn paths_parse_and_print() {
        for (spelled, steps) in [
            ("a", vec![Step::Key("a".into())]),
            (
                "userIdentity.sessionContext.attributes",
                vec![
                    Step::Key("userIdentity".into()),
                    Step::Key("sessionContext".into()),
                    Step::Key("attributes".into()),
                ],
            ),
            (
                "resources[0].ARN",
                vec![
                    Step::Key("resources".into()),
                    Step::Index(0),
                    Step::Key("ARN".into()),
                ],
            ),
            (
                r#"detail["x.y"][12]["a\"b"]"#,
                vec![
                    Step::Key("detail".into()),
                    Step::Key("x.y".into()),
                    Step::Index(12),
                    Step::Key("a\"b".into()),
                ],
            ),
            (
                r#"["@timestamp"].v"#,
                vec![Step::Key("@timestamp".into()), Step::Key("v".into())],
            ),
        ] {
            let path: FieldPath = spelled.parse().unwrap_or_else(|e| panic!("{spelled}: {e}"));
            assert_eq!(path.steps(), steps.as_slice(), "{spelled}");
            let again: FieldPath = path.to_string().parse().unwrap();
            assert_eq!(again, path, "{spelled} printed as {path}");
        }
        assert_eq!(
            r#"["plain"]"#.parse::<FieldPath>().unwrap().to_string(),
            "plain"
        );
        for (bad, says) in [
            ("", "starts with a key"),
            ("[0]", "starts with a key"),
            ("a..b", "an empty key"),
            ("a[x]", "[x] is not an array index"),
            ("a[-1]", "is not an array index"),
            ("a[1", "not closed"),
            ("a.", "an empty key"),
            ("a b .c", "spaces"),
        ] {
            let err = bad.parse::<FieldPath>().unwrap_err().to_string();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
    }

    #[test]
    fn time_formats_and_zones() {
        assert_eq!("epoch_millis".parse(), Ok(TimeFormat::EpochMillis));
        assert_eq!(TimeFormat::EpochSeconds.epoch_micros(), Some(1_000_000));
        let pattern: TimeFormat = "%d/%m/%Y %H:%M".parse().unwrap();
        assert_eq!(pattern.to_string(), "%d/%m/%Y %H:%M");
        assert!("%Q".parse::<TimeFormat>().unwrap_err().contains("strftime"));
        assert!("".parse::<TimeFormat>().is_err());

        assert!(Zone::default().is_utc());
        assert_eq!("UTC".parse::<Zone>().unwrap().to_string(), "UTC");
        assert_eq!("+05:30".parse::<Zone>().unwrap().to_string(), "+05:30");
        let ny: Zone = "America/New_York".parse().unwrap();
        assert_eq!(ny.to_string(), "America/New_York");
        let at = |s: &str| chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M").unwrap();
        assert_eq!(
            ny.instant(at("2024-01-02 03:04")).unwrap().to_rfc3339(),
            "2024-01-02T08:04:00+00:00"
        );
        assert!(
            ny.instant(at("2024-11-03 01:30"))
                .unwrap_err()
                .contains("twice")
        );
        assert!(
            ny.instant(at("2024-03-10 02:30"))
                .unwrap_err()
                .contains("does not exist")
        );
        assert!("Mars/Olympus".parse::<Zone>().unwrap_err().contains("IANA"));
    }

    #[test]
    fn columns_with_paths_formats_and_zones() {
        let cols: Vec<ColumnSpec> = serde_json::from_str(
            r#"[{"name":"user_arn","path":"userIdentity.arn","type":"string"},
                {"name":"at","type":"timestamp","format":"epoch_millis","timezone":"Europe/Paris"},
                {"name":"ctx","type":"struct<page:string,ids:array<int64>>"}]"#,
        )
        .unwrap();
        assert_eq!(cols[0].path.as_ref().unwrap().head(), "userIdentity");
        assert!(cols.iter().all(|c| c.check().is_ok()));
        assert_eq!(
            serde_json::to_string(&cols[0]).unwrap(),
            r#"{"name":"user_arn","path":"userIdentity.arn","type":"string","nullable":true}"#
        );
        let schema = arrow_schema(&cols);
        assert!(matches!(schema.field(2).data_type(), DataType::Struct(f) if f.len() == 2));
        let mut bad = ColumnSpec::new("n", ColumnType::Int64);
        bad.format = Some(TimeFormat::EpochSeconds);
        assert_eq!(bad.check().unwrap_err().0, "format");
        let mut bad = ColumnSpec::new("d", ColumnType::Date);
        bad.timezone = Some(Zone::default());
        assert_eq!(bad.check().unwrap_err().0, "timezone");
        bad.format = Some(TimeFormat::EpochSeconds);
        assert!(bad.check().is_ok());
        let err =
            serde_json::from_str::<ColumnSpec>(r#"{"name":"a","path":"a..b","type":"int32"}"#)
                .unwrap_err()
                .to_string();
        assert!(err.contains("an empty key"), "{err}");
    }
}
