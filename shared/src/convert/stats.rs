//! What a conversion reports: row count, exact column sums and byte counts.
//!
//! The sums let a caller reconcile the Parquet output with the source (or with a
//! control total shipped next to it), so integer and decimal sums are exact `i128`
//! arithmetic, and every sum prints as an exact decimal string that
//! [`SumValue::parse_for`] reads back without loss.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowPrimitiveType, Decimal128Type, Float32Type, Float64Type, Int32Type, Int64Type,
};
use arrow_array::{Array, RecordBatch};
use arrow_schema::Schema;
use serde::{Serialize, Serializer};

use super::ConvertError;
use crate::schema::{ColumnType, FieldType};

/// The sum of a column's non-NULL values.
///
/// Serialized as its [`Display`](fmt::Display) string, e.g. `"12.30"`. There is
/// deliberately no `Deserialize`: the string alone does not tell a float sum of `12`
/// from an integer one, so read it back with [`SumValue::parse_for`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SumValue {
    /// Sum of an `int32` or `int64` column, exact.
    Int(i128),
    /// Sum of a `decimal(P,S)` column, exact: `unscaled × 10^-scale`.
    Decimal {
        /// The sum in units of `10^-scale`.
        unscaled: i128,
        /// Digits after the decimal point (the column's scale).
        scale: i8,
    },
    /// Sum of a `float32` or `float64` column, added in `f64` in row order.
    Float(f64),
}

/// A string that is not a sum of the expected type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseSumError(String);

impl SumValue {
    /// `self + other` for sums of one column (saturating for integers and decimals; the
    /// scale is `self`'s; sums of different kinds give `self`).
    pub fn plus(&self, other: &SumValue) -> SumValue {
        match (self, other) {
            (Self::Int(x), Self::Int(y)) => Self::Int(x.saturating_add(*y)),
            (Self::Decimal { unscaled: x, scale }, Self::Decimal { unscaled: y, .. }) => {
                Self::Decimal {
                    unscaled: x.saturating_add(*y),
                    scale: *scale,
                }
            }
            (Self::Float(x), Self::Float(y)) => Self::Float(x + y),
            (x, _) => *x,
        }
    }

    /// The sum of no values of type `ty`, `None` if `ty` is not summable.
    fn zero(ty: ColumnType) -> Option<Self> {
        match ty {
            ColumnType::Int32 | ColumnType::Int64 => Some(Self::Int(0)),
            ColumnType::Decimal { scale, .. } => Some(Self::Decimal { unscaled: 0, scale }),
            ColumnType::Float32 | ColumnType::Float64 => Some(Self::Float(0.0)),
            _ => None,
        }
    }

    /// Reads back the [`Display`](fmt::Display) form of the sum of a column of type
    /// `ty`. A decimal may have fewer fraction digits than the scale (`"12.3"` for
    /// `decimal(12,2)` is 12.30) but not more.
    pub fn parse_for(ty: &ColumnType, s: &str) -> Result<Self, ParseSumError> {
        let error = || ParseSumError(format!("invalid sum {s:?} for a {ty} column"));
        match *ty {
            ColumnType::Int32 | ColumnType::Int64 => s.parse().map(Self::Int).map_err(|_| error()),
            ColumnType::Float32 | ColumnType::Float64 => {
                s.parse().map(Self::Float).map_err(|_| error())
            }
            ColumnType::Decimal { scale, .. } => {
                let (unscaled, digits) = parse_decimal(s).ok_or_else(error)?;
                let missing =
                    u32::try_from(i32::from(scale) - i32::from(digits)).map_err(|_| error())?;
                let unscaled = 10i128
                    .checked_pow(missing)
                    .and_then(|factor| unscaled.checked_mul(factor))
                    .ok_or_else(error)?;
                Ok(Self::Decimal { unscaled, scale })
            }
            _ => Err(ParseSumError(format!("a {ty} column has no sum"))),
        }
    }

    /// Adds the non-NULL values of `array` in order; `None` on overflow or if `array`
    /// is not of this sum's type.
    fn add(&mut self, array: &dyn Array) -> Option<()> {
        match self {
            Self::Int(total) => add_exact::<Int32Type>(total, array)
                .or_else(|| add_exact::<Int64Type>(total, array)),
            Self::Decimal { unscaled, .. } => add_exact::<Decimal128Type>(unscaled, array),
            Self::Float(total) => add_float::<Float64Type>(total, array)
                .or_else(|| add_float::<Float32Type>(total, array)),
        }
    }
}

fn add_exact<T>(total: &mut i128, array: &dyn Array) -> Option<()>
where
    T: ArrowPrimitiveType,
    T::Native: Into<i128>,
{
    let values = array.as_primitive_opt::<T>()?;
    *total = values
        .iter()
        .flatten()
        .try_fold(*total, |sum, v| sum.checked_add(v.into()))?;
    Some(())
}

fn add_float<T>(total: &mut f64, array: &dyn Array) -> Option<()>
where
    T: ArrowPrimitiveType,
    T::Native: Into<f64>,
{
    let values = array.as_primitive_opt::<T>()?;
    *total = values
        .iter()
        .flatten()
        .fold(*total, |sum, v| sum + v.into());
    Some(())
}

/// Parses `[+-]digits[.digits]` into its digits as an integer and the number of
/// fraction digits.
fn parse_decimal(s: &str) -> Option<(i128, i8)> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let all_digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    let unsigned = int.strip_prefix(['-', '+']).unwrap_or(int);
    if unsigned.is_empty() || !all_digits(unsigned) || !all_digits(frac) || s.ends_with('.') {
        return None;
    }
    Some((
        format!("{int}{frac}").parse().ok()?,
        frac.len().try_into().ok()?,
    ))
}

impl fmt::Display for SumValue {
    /// Integers as such, decimals with exactly `scale` fraction digits (`"-0.05"`),
    /// floats in the shortest form that reads back to the same `f64`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Int(v) => write!(f, "{v}"),
            Self::Float(v) => write!(f, "{v}"),
            Self::Decimal { unscaled, scale } => {
                let sign = if unscaled < 0 { "-" } else { "" };
                let digits = unscaled.unsigned_abs().to_string();
                match usize::try_from(scale) {
                    Ok(0) => write!(f, "{sign}{digits}"),
                    Ok(scale) => {
                        let padded = format!("{digits:0>width$}", width = scale + 1);
                        let (int, frac) = padded.split_at(padded.len() - scale);
                        write!(f, "{sign}{int}.{frac}")
                    }
                    // A negative scale counts zeros before the point.
                    Err(_) if unscaled == 0 => f.write_str("0"),
                    Err(_) => write!(
                        f,
                        "{sign}{digits}{}",
                        "0".repeat(scale.unsigned_abs().into())
                    ),
                }
            }
        }
    }
}

impl FromStr for SumValue {
    type Err = ParseSumError;

    /// Reads any [`Display`](fmt::Display) form without knowing the column type: an
    /// integer is [`SumValue::Int`], digits with a point are [`SumValue::Decimal`] with
    /// as many fraction digits as written, anything else `f64` accepts is
    /// [`SumValue::Float`]. So a float sum of `12` reads back as `Int(12)`; use
    /// [`SumValue::parse_for`] to get the column's variant.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Ok(v) = s.parse() {
            Ok(Self::Int(v))
        } else if let Some((unscaled, scale)) = parse_decimal(s) {
            Ok(Self::Decimal { unscaled, scale })
        } else {
            s.parse()
                .map(Self::Float)
                .map_err(|_| ParseSumError(format!("invalid sum {s:?}")))
        }
    }
}

impl Serialize for SumValue {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// What [`convert`](super::convert) did. Serializes with each sum as a string.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConvertStats {
    /// Rows written.
    pub rows: u64,
    /// Sum of each of [`ConvertSpec::sum_columns`](super::ConvertSpec::sum_columns),
    /// zero when there are no rows.
    pub sums: BTreeMap<String, SumValue>,
    /// Bytes consumed from the input (compressed, if it is).
    pub bytes_read: u64,
    /// Bytes after decompression, including any byte order mark.
    pub bytes_decoded: u64,
    /// Row groups in the Parquet file.
    pub row_groups: usize,
    /// Rows set aside under [`BadRows::Reject`](super::BadRows::Reject), in input order
    /// (not counted in `rows` or the sums).
    #[serde(skip)]
    pub rejects: Vec<super::Rejected>,
    /// Rows written with something in the rescued column (counted in `rows`).
    #[serde(skip_serializing_if = "is_zero")]
    pub rescued_rows: u64,
    /// Values of fields the schema does not name, dropped under
    /// [`UnknownFields::Ignore`](super::UnknownFields::Ignore).
    #[serde(skip_serializing_if = "Ignored::is_empty")]
    pub ignored: Ignored,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Most field paths an object's [`Ignored`] names: those with the most values.
pub const MAX_IGNORED_PATHS: usize = 32;

/// Most field paths counted one by one while an object is read: past them, the values of
/// fields not met before are counted in [`Ignored::values`] only. The counts of the paths
/// named in the end are exact when an object has no more distinct unknown fields than this.
const MAX_TRACKED_PATHS: usize = 1000;

/// The values an input held in fields the schema does not name, when they are ignored:
/// how many, and of which fields (the paths of nested fields with `[]` for any array
/// element and `{}` for any map value: `userIdentity.extra`, `resources[].tags`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Ignored {
    /// Values dropped.
    pub values: u64,
    /// Values dropped per field: once an object is read, the [`MAX_IGNORED_PATHS`] fields
    /// with the most values (see [`Ignored::trimmed`]).
    pub fields: BTreeMap<String, u64>,
}

impl Ignored {
    /// Nothing was ignored.
    pub fn is_empty(&self) -> bool {
        self.values == 0
    }

    /// Counts `n` values of the field `path`.
    pub fn add(&mut self, path: &str, n: u64) {
        self.values += n;
        if let Some(count) = self.fields.get_mut(path) {
            *count += n;
        } else if self.fields.len() < MAX_TRACKED_PATHS {
            self.fields.insert(path.to_owned(), n);
        }
    }

    /// The counts with only the [`MAX_IGNORED_PATHS`] fields of the most values named (on
    /// equal counts, the first by name); the others' values stay in the total.
    pub fn trimmed(mut self) -> Self {
        if self.fields.len() > MAX_IGNORED_PATHS {
            let mut by_count: Vec<(String, u64)> =
                std::mem::take(&mut self.fields).into_iter().collect();
            by_count.sort_by(|(a, x), (b, y)| y.cmp(x).then_with(|| a.cmp(b)));
            by_count.truncate(MAX_IGNORED_PATHS);
            self.fields = by_count.into_iter().collect();
        }
        self
    }

    /// Adds the counts of `other`.
    pub fn merge(&mut self, other: Ignored) {
        let named: u64 = other.fields.values().sum();
        for (path, n) in other.fields {
            self.add(&path, n);
        }
        self.values += other.values - named;
    }
}

/// Running sums of the requested columns.
pub(super) struct Sums(Vec<(usize, String, SumValue)>);

impl Sums {
    /// Sums of `columns`, which must be summable columns of `schema` (of `types`).
    pub(super) fn new(
        schema: &Schema,
        types: &[FieldType],
        columns: &[String],
    ) -> Result<Self, ConvertError> {
        let mut sums: Vec<(usize, String, SumValue)> = Vec::with_capacity(columns.len());
        for name in columns {
            let index = schema.index_of(name).map_err(|_| {
                ConvertError::invalid_spec(format!("sum column {name:?} is not in the schema"))
            })?;
            let zero = types[index]
                .scalar()
                .and_then(SumValue::zero)
                .ok_or_else(|| {
                    ConvertError::invalid_spec(format!(
                        "sum column {name:?} is of type {}, which cannot be summed",
                        types[index]
                    ))
                })?;
            if sums.iter().all(|(i, ..)| *i != index) {
                sums.push((index, name.clone(), zero));
            }
        }
        Ok(Self(sums))
    }

    /// Adds the values of `batch`.
    pub(super) fn add(&mut self, batch: &RecordBatch) -> Result<(), ConvertError> {
        for (index, name, sum) in &mut self.0 {
            sum.add(batch.column(*index)).ok_or_else(|| {
                ConvertError::parse(None, Some(name), "the column's sum overflows 128 bits")
            })?;
        }
        Ok(())
    }

    /// The sums by column name.
    pub(super) fn finish(self) -> BTreeMap<String, SumValue> {
        self.0
            .into_iter()
            .map(|(_, name, sum)| (name, sum))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Decimal128Array, Float32Array, Int32Array};

    fn dec(unscaled: i128, scale: i8) -> SumValue {
        SumValue::Decimal { unscaled, scale }
    }

    #[test]
    fn display_is_exact() {
        for (value, text) in [
            (dec(1230, 2), "12.30"),
            (dec(30, 2), "0.30"),
            (dec(5, 2), "0.05"),
            (dec(-5, 2), "-0.05"),
            (dec(-1230, 2), "-12.30"),
            (dec(0, 2), "0.00"),
            (dec(7, 0), "7"),
            (dec(12, -2), "1200"),
            (
                dec(i128::MIN, 38),
                "-1.70141183460469231731687303715884105728",
            ),
            (SumValue::Int(-42), "-42"),
            (SumValue::Float(0.1 + 0.2), "0.30000000000000004"),
        ] {
            assert_eq!(value.to_string(), text);
        }
    }

    #[test]
    fn parse_for_reads_display_back() {
        let d = ColumnType::Decimal {
            precision: 12,
            scale: 2,
        };
        for value in [dec(1230, 2), dec(-5, 2), dec(0, 2), dec(i128::MAX, 2)] {
            assert_eq!(SumValue::parse_for(&d, &value.to_string()), Ok(value));
        }
        assert_eq!(SumValue::parse_for(&d, "12.3"), Ok(dec(1230, 2)));
        assert_eq!(SumValue::parse_for(&d, "-12"), Ok(dec(-1200, 2)));
        assert!(
            SumValue::parse_for(&d, "1.234").is_err(),
            "would lose digits"
        );
        for bad in ["", ".5", "1.", "1.2.3", "1e3", "--1", "abc"] {
            assert!(SumValue::parse_for(&d, bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            SumValue::parse_for(
                &ColumnType::Int64,
                "-170141183460469231731687303715884105728"
            ),
            Ok(SumValue::Int(i128::MIN))
        );
        let f = SumValue::Float(0.1 + 0.2);
        assert_eq!(
            SumValue::parse_for(&ColumnType::Float32, &f.to_string()),
            Ok(f)
        );
        let err = SumValue::parse_for(&ColumnType::Date, "1").unwrap_err();
        assert_eq!(err.to_string(), "a date column has no sum");
    }

    #[test]
    fn from_str_and_serde() {
        assert_eq!("12.30".parse(), Ok(dec(1230, 2)));
        assert_eq!("-3".parse(), Ok(SumValue::Int(-3)));
        assert_eq!("1e3".parse(), Ok(SumValue::Float(1000.0)));
        assert!("x".parse::<SumValue>().is_err());
        assert_eq!(serde_json::to_string(&dec(1230, 2)).unwrap(), r#""12.30""#);
    }

    #[test]
    fn sums_skip_nulls_and_are_exact() {
        let mut int = SumValue::Int(0);
        int.add(&Int32Array::from(vec![
            Some(i32::MAX),
            None,
            Some(i32::MAX),
        ]))
        .unwrap();
        assert_eq!(int, SumValue::Int(2 * i128::from(i32::MAX)));

        let mut d = dec(0, 2);
        let a =
            Decimal128Array::from(vec![Some(10), None, Some(20)]).with_precision_and_scale(12, 2);
        d.add(&a.unwrap()).unwrap();
        assert_eq!(d.to_string(), "0.30");

        let mut f = SumValue::Float(0.0);
        f.add(&Float32Array::from(vec![Some(0.5), None, Some(0.25)]))
            .unwrap();
        assert_eq!(f, SumValue::Float(0.75));
        assert_eq!(f.add(&Int32Array::from(vec![1])), None, "type mismatch");

        let mut big = dec(i128::MAX - 1, 0);
        let a = Decimal128Array::from(vec![2])
            .with_precision_and_scale(38, 0)
            .unwrap();
        assert_eq!(big.add(&a), None, "overflow");
    }
}
