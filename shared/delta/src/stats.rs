//! A data file's Delta statistics (`numRecords`, `nullCount`, `minValues`, `maxValues`) from
//! its Parquet footer.
//!
//! Readers skip files by these bounds, so a bound that is wrong loses rows silently: only
//! bounds that are exact (or safely wider) are written. Integers, dates and timestamps get
//! min and max when every row group has exact statistics for them (timestamps rounded
//! outward to the millisecond, the precision of Delta's statistics); strings when the bounds
//! are exact and at most 32 characters; floats, decimals and booleans get none. `nullCount`
//! is written for a column when every row group reports it.

use parquet::file::metadata::ParquetMetaData;
use parquet::file::statistics::Statistics;
use serde_json::{Map, Value, json};
use tidemark::schema::{ColumnSpec, ColumnType};

/// Longest string bound written (Delta's own writers truncate at 32 characters).
const MAX_STRING_BOUND: usize = 32;

/// The statistics JSON of a data file with `columns`, read from its footer.
pub fn file_stats(metadata: &ParquetMetaData, columns: &[ColumnSpec]) -> String {
    let groups = metadata.row_groups();
    let rows: i64 = groups.iter().map(|g| g.num_rows()).sum();
    let schema = metadata.file_metadata().schema_descr();
    let (mut mins, mut maxs, mut nulls) = (Map::new(), Map::new(), Map::new());
    for (i, leaf) in schema.columns().iter().enumerate() {
        // Top-level scalar columns only: a nested column's leaves carry no bounds here.
        if leaf.path().parts().len() != 1 {
            continue;
        }
        let Some(spec) = columns.iter().find(|c| c.name == leaf.name()) else {
            continue;
        };
        let Some(ty) = spec.ty.scalar() else {
            continue;
        };
        let stats: Option<Vec<&Statistics>> =
            groups.iter().map(|g| g.column(i).statistics()).collect();
        let Some(stats) = stats else { continue };
        let null_count: Option<u64> = stats.iter().map(|s| s.null_count_opt()).sum();
        if let Some(n) = null_count {
            nulls.insert(spec.name.clone(), json!(n));
        }
        if let Some((lo, hi)) = bounds(&stats, &ty) {
            mins.insert(spec.name.clone(), lo);
            maxs.insert(spec.name.clone(), hi);
        }
    }
    json!({
        "numRecords": rows,
        "minValues": mins,
        "maxValues": maxs,
        "nullCount": nulls,
    })
    .to_string()
}

/// The exact (or outward-rounded) bounds of a column over every row group, as Delta writes
/// them; `None` when a row group has none, they are inexact, or the type gets none.
fn bounds(stats: &[&Statistics], ty: &ColumnType) -> Option<(Value, Value)> {
    if stats.is_empty() || stats.iter().any(|s| !s.min_is_exact() || !s.max_is_exact()) {
        return None;
    }
    match ty {
        ColumnType::Int32 | ColumnType::Date => {
            let (lo, hi) = fold(stats, |s| match s {
                Statistics::Int32(v) => Some((i64::from(*v.min_opt()?), i64::from(*v.max_opt()?))),
                _ => None,
            })?;
            Some(match ty {
                ColumnType::Date => (date(lo)?, date(hi)?),
                _ => (json!(lo), json!(hi)),
            })
        }
        ColumnType::Int64 | ColumnType::Timestamp => {
            let (lo, hi) = fold(stats, |s| match s {
                Statistics::Int64(v) => Some((*v.min_opt()?, *v.max_opt()?)),
                _ => None,
            })?;
            Some(match ty {
                // Microseconds, written at millisecond precision: the minimum rounded down,
                // the maximum up, so the bounds still hold every value.
                ColumnType::Timestamp => (
                    timestamp_ms(lo.div_euclid(1000))?,
                    timestamp_ms(hi.div_euclid(1000) + i64::from(hi.rem_euclid(1000) != 0))?,
                ),
                _ => (json!(lo), json!(hi)),
            })
        }
        ColumnType::String => {
            let mut lo: Option<&[u8]> = None;
            let mut hi: Option<&[u8]> = None;
            for s in stats {
                let Statistics::ByteArray(v) = s else {
                    return None;
                };
                let (a, b) = (v.min_opt()?.data(), v.max_opt()?.data());
                lo = Some(lo.map_or(a, |l| l.min(a)));
                hi = Some(hi.map_or(b, |h| h.max(b)));
            }
            let lo = std::str::from_utf8(lo?).ok()?;
            let hi = std::str::from_utf8(hi?).ok()?;
            (lo.chars().count() <= MAX_STRING_BOUND && hi.chars().count() <= MAX_STRING_BOUND)
                .then(|| (json!(lo), json!(hi)))
        }
        _ => None,
    }
}

fn fold(
    stats: &[&Statistics],
    pick: impl Fn(&Statistics) -> Option<(i64, i64)>,
) -> Option<(i64, i64)> {
    stats.iter().try_fold(None, |acc: Option<(i64, i64)>, s| {
        let (a, b) = pick(s)?;
        Some(Some(acc.map_or((a, b), |(l, h)| (l.min(a), h.max(b)))))
    })?
}

fn date(days: i64) -> Option<Value> {
    let d = chrono::DateTime::from_timestamp(days.checked_mul(86_400)?, 0)?;
    Some(json!(d.format("%Y-%m-%d").to_string()))
}

fn timestamp_ms(ms: i64) -> Option<Value> {
    let t = chrono::DateTime::from_timestamp_millis(ms)?;
    Some(json!(t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{
        ArrayRef, Date32Array, Float64Array, Int64Array, RecordBatch, StringArray,
        TimestampMicrosecondArray,
    };
    use parquet::arrow::ArrowWriter;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use serde_json::Value;

    use super::*;

    fn spec(name: &str, ty: ColumnType) -> ColumnSpec {
        ColumnSpec::new(name, ty)
    }

    #[test]
    fn bounds_are_exact_or_wider_and_absent_where_unsafe() {
        let long = "x".repeat(40);
        let columns: Vec<(&str, ArrayRef)> = vec![
            (
                "id",
                Arc::new(Int64Array::from(vec![Some(7), None, Some(-3)])),
            ),
            (
                "s",
                Arc::new(StringArray::from(vec![Some("b"), Some("a"), None])),
            ),
            (
                "long",
                Arc::new(StringArray::from(vec![
                    Some(long.as_str()),
                    Some("a"),
                    Some("c"),
                ])),
            ),
            (
                "f",
                Arc::new(Float64Array::from(vec![Some(1.5), Some(f64::NAN), None])),
            ),
            (
                "d",
                Arc::new(Date32Array::from(vec![Some(19_000), Some(19_001), None])),
            ),
            (
                "t",
                Arc::new(
                    TimestampMicrosecondArray::from(vec![Some(1_500), Some(2_001), None])
                        .with_timezone("+00:00"),
                ),
            ),
        ];
        let batch = RecordBatch::try_from_iter(columns).unwrap();
        let mut w = ArrowWriter::try_new(Vec::new(), batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        let bytes = bytes::Bytes::from(w.into_inner().unwrap());
        let meta = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap()
            .metadata()
            .clone();
        let specs = [
            spec("id", ColumnType::Int64),
            spec("s", ColumnType::String),
            spec("long", ColumnType::String),
            spec("f", ColumnType::Float64),
            spec("d", ColumnType::Date),
            spec("t", ColumnType::Timestamp),
        ];
        let stats: Value = serde_json::from_str(&file_stats(&meta, &specs)).unwrap();
        assert_eq!(stats["numRecords"], 3);
        assert_eq!(stats["minValues"]["id"], -3);
        assert_eq!(stats["maxValues"]["id"], 7);
        assert_eq!(stats["minValues"]["s"], "a");
        assert_eq!(stats["maxValues"]["s"], "b");
        assert!(stats["minValues"].get("long").is_none(), "{stats}");
        assert!(stats["minValues"].get("f").is_none(), "{stats}");
        assert_eq!(stats["minValues"]["d"], "2022-01-08");
        assert_eq!(stats["maxValues"]["d"], "2022-01-09");
        // 1,500 µs and 2,001 µs: the minimum rounded down, the maximum up, to the ms.
        assert_eq!(stats["minValues"]["t"], "1970-01-01T00:00:00.001Z");
        assert_eq!(stats["maxValues"]["t"], "1970-01-01T00:00:00.003Z");
        assert_eq!(stats["nullCount"]["id"], 1);
        assert_eq!(stats["nullCount"]["f"], 1);
    }
}
