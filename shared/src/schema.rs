//! Column types as a user writes them in a table definition, and their Arrow form.
//!
//! A table's schema is declared as a list of [`ColumnSpec`]s whose types are spelled
//! `int32`, `decimal(12,2)`, `timestamp`… in configuration. This module parses and
//! prints those spellings and maps them onto the one Arrow [`DataType`] each stands
//! for, so that every reader (CSV, JSON Lines) and the Parquet writer agree on the
//! physical layout: timestamps are always UTC microseconds (never INT96), dates are
//! `Date32`, decimals are `Decimal128`.

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

/// One column of a table definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnSpec {
    /// Column name: the CSV header is not checked against it (columns are matched by
    /// position), JSON Lines keys are matched by it.
    pub name: String,
    /// Column type.
    #[serde(rename = "type")]
    pub ty: ColumnType,
    /// Whether the column may hold NULLs (an empty CSV field, a missing or `null` JSON
    /// value). Defaults to `true`.
    #[serde(default = "nullable_by_default")]
    pub nullable: bool,
}

fn nullable_by_default() -> bool {
    true
}

/// The Arrow schema of a table with these columns, in order.
pub fn arrow_schema(cols: &[ColumnSpec]) -> SchemaRef {
    Arc::new(Schema::new(
        cols.iter()
            .map(|c| Field::new(&c.name, c.ty.to_arrow(), c.nullable))
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
        assert_eq!(cols[0].ty, ColumnType::Int64);
        assert!(!cols[0].nullable);
        assert!(cols[1].nullable, "nullable defaults to true");
        assert_eq!(
            serde_json::to_string(&cols[1]).unwrap(),
            r#"{"name":"price","type":"decimal(12,2)","nullable":true}"#
        );
        let unknown = serde_json::from_str::<ColumnSpec>(r#"{"name":"a","type":"int32","x":1}"#);
        assert!(unknown.unwrap_err().to_string().contains("unknown field"));
        let bad = serde_json::from_str::<ColumnSpec>(r#"{"name":"a","type":"int"}"#);
        assert!(bad.unwrap_err().to_string().contains("expected one of"));

        let schema = arrow_schema(&cols);
        assert_eq!(schema.field(0).data_type(), &DataType::Int64);
        assert!(!schema.field(0).is_nullable());
        assert_eq!(schema.field(1).name(), "price");
    }
}
