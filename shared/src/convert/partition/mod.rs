//! Partitioning outputs by the data: `"partitioning": {"columns": [...]}` splits one object's
//! rows into one output file per partition value, under Hive-style directories
//! (`<prefix>dt=2026-11-29/region=eu/<relative key>.parquet`).
//!
//! - A partition column names an output column (`from`) and a `transform`: `identity` (the
//!   value itself, for a scalar column), or `year`, `month`, `day`, `hour` of a `timestamp`
//!   (UTC) or `date` column: `2026`, `2026-11`, `2026-11-29`, `2026-11-29-13`. Its directory
//!   name is `as` (default: `from`).
//! - Values are made safe for paths as Hive makes them (`FileUtils.escapePathName`): the
//!   characters `"#%'*/:=?\^{[]` and DEL, and control characters, are written `%XX` (upper-case
//!   hex of the UTF-8 byte); anything else stays as it is. NULL and the empty string are
//!   `__HIVE_DEFAULT_PARTITION__`, as Hive, Spark and Athena write them.
//! - A partition whose name is the column's own (`{"from": "region"}`) is taken out of the
//!   files (Hive's layout: the value is in the path, and Athena declares partition keys apart
//!   from the columns); one with another name (`as: "dt"`) leaves its source column in the
//!   files.
//!
//! [`convert_partitioned`] writes the files: each row is routed to its partition as it is
//! decoded and encoded once, in memory bounded whatever the number of partitions (see
//! `writer.rs`; the rows' partitions are found in `keys.rs`, rows that wait are spilled by
//! `spill.rs`).

mod keys;
mod spill;
mod writer;

pub use writer::{Budget, PartFile, Routed, convert_partitioned};

use std::fmt::Write as _;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int32Type, Int64Type,
    TimestampMicrosecondType,
};
use arrow_array::{Array, ArrayRef};
use arrow_schema::{DataType, TimeUnit};
use chrono::{DateTime, Datelike, NaiveDate, Timelike};
use serde::{Deserialize, Serialize};

use crate::schema::{ColumnType, FieldType};

/// The directory name of a NULL or empty partition value.
pub const DEFAULT_PARTITION: &str = "__HIVE_DEFAULT_PARTITION__";

/// What a partition column takes of its column's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Transform {
    /// The value itself (a scalar column).
    #[default]
    Identity,
    /// The year of a `timestamp` (UTC) or `date`: `2026`.
    Year,
    /// Year and month: `2026-11`.
    Month,
    /// The day: `2026-11-29`.
    Day,
    /// Day and hour (UTC): `2026-11-29-13`.
    Hour,
}

/// One level of the partition directories.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PartitionColumn {
    /// The output column whose value decides the partition (a schema column, a path column,
    /// a lineage column).
    pub from: String,
    /// The directory's name (`<as>=<value>/`); default: `from`. Lower-case letters, digits and
    /// `_`, starting with a letter or `_` (a name Athena and Glue take as a partition key).
    #[serde(rename = "as", default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What of the value: `identity` (default), `year`, `month`, `day`, `hour`.
    #[serde(default, skip_serializing_if = "is_identity")]
    pub transform: Transform,
}

fn is_identity(t: &Transform) -> bool {
    *t == Transform::Identity
}

impl PartitionColumn {
    /// The directory's name.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.from)
    }

    /// Whether its column leaves the files (a partition named as its column).
    pub fn moves_out(&self) -> bool {
        self.name() == self.from
    }

    /// Why this partition column cannot partition a column of type `ty` (`None`: it can).
    pub fn refuses(&self, ty: &FieldType) -> Option<String> {
        let Some(scalar) = ty.scalar() else {
            return Some(format!(
                "column {:?} is {ty}: only scalar columns partition",
                self.from
            ));
        };
        match (self.transform, scalar) {
            (Transform::Identity, ColumnType::Float32 | ColumnType::Float64) => Some(format!(
                "column {:?} is {ty}: floats do not partition (every value a directory of its own)",
                self.from
            )),
            (Transform::Identity, _) => None,
            (Transform::Hour, ColumnType::Date) => {
                Some(format!("column {:?} is a date: it has no hour", self.from))
            }
            (_, ColumnType::Timestamp | ColumnType::Date) => None,
            (t, _) => Some(format!(
                "transform {t:?} needs a timestamp or date column; {:?} is {ty}",
                self.from
            )),
        }
    }
}

/// `value` made safe for a path as Hive makes it (see the module's docs).
pub fn escape(value: &str) -> String {
    if value.is_empty() {
        return DEFAULT_PARTITION.to_string();
    }
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        let special = c.is_control() || "\"#%'*/:=?\\^{[]\u{7f}".contains(c);
        if special {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                let _ = write!(out, "%{b:02X}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The value a folder name stands for: [`escape`] undone (`%XX` bytes decoded; anything else,
/// a stray `%` included, kept as it is).
pub fn unescape(name: &str) -> String {
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| name.to_string())
}

/// The partition value of row `row` of `array` (an output column) under `transform`, escaped;
/// [`DEFAULT_PARTITION`] for NULL.
pub fn value_at(array: &ArrayRef, row: usize, transform: Transform) -> Result<String, String> {
    if array.is_null(row) {
        return Ok(DEFAULT_PARTITION.to_string());
    }
    let day = |date: NaiveDate, hour: Option<u32>| -> String {
        match (transform, hour) {
            (Transform::Year, _) => format!("{:04}", date.year()),
            (Transform::Month, _) => format!("{:04}-{:02}", date.year(), date.month()),
            (Transform::Hour, Some(h)) => format!("{}-{h:02}", date.format("%Y-%m-%d")),
            _ => date.format("%Y-%m-%d").to_string(),
        }
    };
    let text = match array.data_type() {
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            let micros = array.as_primitive::<TimestampMicrosecondType>().value(row);
            let at = DateTime::from_timestamp_micros(micros)
                .ok_or_else(|| format!("timestamp {micros} µs is out of range"))?;
            match transform {
                Transform::Identity => at.format("%Y-%m-%dT%H:%M:%S%.fZ").to_string(),
                _ => day(at.date_naive(), Some(at.hour())),
            }
        }
        DataType::Date32 => {
            let days = array.as_primitive::<Date32Type>().value(row);
            let date = NaiveDate::from_num_days_from_ce_opt(days + 719_163)
                .ok_or_else(|| format!("date {days} is out of range"))?;
            day(date, None)
        }
        DataType::Int32 => array.as_primitive::<Int32Type>().value(row).to_string(),
        DataType::Int64 => array.as_primitive::<Int64Type>().value(row).to_string(),
        DataType::Float32 => array.as_primitive::<Float32Type>().value(row).to_string(),
        DataType::Float64 => array.as_primitive::<Float64Type>().value(row).to_string(),
        DataType::Decimal128(_, _) => array.as_primitive::<Decimal128Type>().value_as_string(row),
        DataType::Boolean => array.as_boolean().value(row).to_string(),
        DataType::Utf8 => array.as_string::<i32>().value(row).to_string(),
        DataType::LargeUtf8 => array.as_string::<i64>().value(row).to_string(),
        DataType::Dictionary(_, _) => {
            let values = arrow_cast::cast(array, &DataType::Utf8).map_err(|e| e.to_string())?;
            values.as_string::<i32>().value(row).to_string()
        }
        other => return Err(format!("a column of type {other} does not partition")),
    };
    Ok(escape(&text))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Date32Array, StringArray, TimestampMicrosecondArray};

    use super::*;

    #[test]
    fn values_are_escaped_as_hive_escapes_them() {
        assert_eq!(escape("eu-west-1"), "eu-west-1");
        assert_eq!(escape("a/b=c:d"), "a%2Fb%3Dc%3Ad");
        assert_eq!(escape("100%"), "100%25");
        assert_eq!(escape("x\ny"), "x%0Ay");
        assert_eq!(escape("é ü"), "é ü");
        assert_eq!(escape(""), DEFAULT_PARTITION);
        assert_eq!(escape("{[]}^?*#'\""), "%7B%5B%5D}%5E%3F%2A%23%27%22");
        for value in ["eu-west-1", "a/b=c:d", "100%", "x\ny", "é ü", "{[]}^?*#'\""] {
            assert_eq!(unescape(&escape(value)), value);
        }
        assert_eq!(unescape("50%"), "50%");
        assert_eq!(unescape("%zz%4"), "%zz%4");
    }

    #[test]
    fn transforms_of_times_and_dates() {
        // 2026-11-29T13:45:10.5Z
        let micros = 1_795_959_910_500_000;
        let ts: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(vec![Some(micros), None]).with_timezone("UTC"),
        );
        let at = |t| value_at(&ts, 0, t).unwrap();
        assert_eq!(at(Transform::Year), "2026");
        assert_eq!(at(Transform::Month), "2026-11");
        assert_eq!(at(Transform::Day), "2026-11-29");
        assert_eq!(at(Transform::Hour), "2026-11-29-13");
        assert_eq!(at(Transform::Identity), "2026-11-29T13%3A45%3A10.500Z");
        assert_eq!(value_at(&ts, 1, Transform::Day).unwrap(), DEFAULT_PARTITION);
        let dates: ArrayRef = Arc::new(Date32Array::from(vec![20_421])); // 2025-11-29
        assert_eq!(value_at(&dates, 0, Transform::Day).unwrap(), "2025-11-29");
        assert_eq!(value_at(&dates, 0, Transform::Month).unwrap(), "2025-11");
        let text: ArrayRef = Arc::new(StringArray::from(vec![Some("eu/1"), Some("")]));
        assert_eq!(value_at(&text, 0, Transform::Identity).unwrap(), "eu%2F1");
        assert_eq!(
            value_at(&text, 1, Transform::Identity).unwrap(),
            DEFAULT_PARTITION
        );
    }

    #[test]
    fn only_scalars_partition_and_times_need_times() {
        let col = |from: &str, t| PartitionColumn {
            from: from.into(),
            name: None,
            transform: t,
        };
        let ty = |s: &str| s.parse::<FieldType>().unwrap();
        assert!(
            col("a", Transform::Identity)
                .refuses(&ty("string"))
                .is_none()
        );
        assert!(col("a", Transform::Day).refuses(&ty("timestamp")).is_none());
        assert!(col("a", Transform::Day).refuses(&ty("date")).is_none());
        assert!(col("a", Transform::Hour).refuses(&ty("date")).is_some());
        assert!(col("a", Transform::Day).refuses(&ty("string")).is_some());
        assert!(
            col("a", Transform::Identity)
                .refuses(&ty("float64"))
                .is_some()
        );
        assert!(
            col("a", Transform::Identity)
                .refuses(&ty("struct<b:int32>"))
                .is_some()
        );
    }
}
