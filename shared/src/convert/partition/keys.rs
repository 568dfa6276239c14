//! Which partition each row of a batch falls in, computed from the values themselves rather
//! than from their text: a row's partition is found with one or two hash lookups of an
//! integer (a timestamp's day, an id) or of the string as it stands, and the escaped text of a
//! value ([`super::value_at`]) is made once per distinct value, not once per row.
//!
//! Partitions are numbered in the order they first appear in the object; their directories
//! (`name=value/` per partition column) are kept by number.

use std::hash::Hash;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int32Type, Int64Type,
    TimestampMicrosecondType,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, TimeUnit};

use super::{PartitionColumn, Transform, value_at};
use crate::convert::ConvertError;

/// The converter's hash maps (foldhash, as elsewhere in the converter).
type HashMap<K, V> = foldhash::HashMap<K, V>;

/// Microseconds in a day and in an hour.
const DAY_MICROS: i64 = 86_400_000_000;
const HOUR_MICROS: i64 = 3_600_000_000;

/// The partitions of an object's rows.
pub(super) struct Partitions {
    columns: Vec<Column>,
    /// Partition number by the codes of its values, for two or more columns.
    combined: HashMap<Vec<u32>, u32>,
    /// The codes of one row, reused.
    row_codes: Vec<u32>,
    /// Each partition's directories, by number.
    dirs: Vec<String>,
    /// More partitions than this fail the object.
    max: usize,
}

/// One partition column: its values' codes (equal codes for equal directory names).
struct Column {
    /// Its index in the batches.
    index: usize,
    spec: PartitionColumn,
    /// The code of each directory name seen.
    by_text: HashMap<String, u32>,
    /// The directory name of each code.
    texts: Vec<String>,
    /// For a single partition column: the partition of each code (`u32::MAX`: none yet).
    partition_of: Vec<u32>,
    keys: Keys,
    /// The code of NULL, once seen.
    null: Option<u32>,
}

/// Codes by the value a row holds (after its transform, for times), kept by kind.
enum Keys {
    /// Integers, dates, days and hours of timestamps, float bits, booleans.
    Int(Cache<i64>),
    /// Decimals.
    Wide(Cache<i128>),
    /// Strings, looked up as they stand; the last one looked up and its code kept aside.
    Text(HashMap<Box<str>, u32>, String, Option<u32>),
    /// Any other type: by the directory name, made for every row.
    Other,
}

/// A map of codes with the last value looked up kept aside: rows of one partition often
/// come together.
struct Cache<K> {
    map: HashMap<K, u32>,
    last: Option<(K, u32)>,
}

impl<K: Hash + Eq + Copy> Cache<K> {
    fn new() -> Self {
        Self {
            map: HashMap::default(),
            last: None,
        }
    }

    /// The code of `key`, made by `make` on a miss.
    #[inline]
    fn code(
        &mut self,
        key: K,
        make: impl FnOnce() -> Result<u32, ConvertError>,
    ) -> Result<u32, ConvertError> {
        if let Some((last, code)) = self.last
            && last == key
        {
            return Ok(code);
        }
        let code = match self.map.get(&key) {
            Some(&code) => code,
            None => {
                let code = make()?;
                self.map.insert(key, code);
                code
            }
        };
        self.last = Some((key, code));
        Ok(code)
    }
}

impl Column {
    fn new(index: usize, spec: PartitionColumn, data_type: &DataType) -> Self {
        let keys = match data_type {
            DataType::Utf8 | DataType::LargeUtf8 => {
                Keys::Text(HashMap::default(), String::new(), None)
            }
            DataType::Decimal128(_, _) => Keys::Wide(Cache::new()),
            DataType::Timestamp(TimeUnit::Microsecond, _)
            | DataType::Date32
            | DataType::Int32
            | DataType::Int64
            | DataType::Float32
            | DataType::Float64
            | DataType::Boolean => Keys::Int(Cache::new()),
            _ => Keys::Other,
        };
        Self {
            index,
            spec,
            by_text: HashMap::default(),
            texts: Vec::new(),
            partition_of: Vec::new(),
            keys,
            null: None,
        }
    }

    /// The code of the directory name `text`.
    fn code_of_text(
        by_text: &mut HashMap<String, u32>,
        texts: &mut Vec<String>,
        partition_of: &mut Vec<u32>,
        text: String,
    ) -> u32 {
        if let Some(&code) = by_text.get(&text) {
            return code;
        }
        let code = texts.len() as u32;
        by_text.insert(text.clone(), code);
        texts.push(text);
        partition_of.push(u32::MAX);
        code
    }

    /// The code of each row of `array`, pushed to `codes`.
    fn codes(&mut self, array: &ArrayRef, codes: &mut Vec<u32>) -> Result<(), ConvertError> {
        codes.clear();
        codes.reserve(array.len());
        let transform = self.spec.transform;
        let error = |message: String| ConvertError::Parse {
            line: None,
            record: None,
            column: Some(self.spec.from.clone()),
            message: format!("partition {}: {message}", self.spec.name()),
        };
        let Self {
            by_text,
            texts,
            partition_of,
            keys,
            null,
            ..
        } = self;
        // The code of row `row` from its directory name (a value not seen before).
        let mut named = |row: usize| -> Result<u32, ConvertError> {
            let text = value_at(array, row, transform).map_err(&error)?;
            Ok(Self::code_of_text(by_text, texts, partition_of, text))
        };
        macro_rules! each {
            ($cache:expr, $values:expr) => {{
                let values = $values;
                for row in 0..array.len() {
                    if array.is_null(row) {
                        let code = match *null {
                            Some(code) => code,
                            None => *null.insert(named(row)?),
                        };
                        codes.push(code);
                        continue;
                    }
                    codes.push($cache.code(values(row), || named(row))?);
                }
            }};
        }
        match keys {
            Keys::Int(cache) => match array.data_type() {
                DataType::Timestamp(_, _) => {
                    let a = array.as_primitive::<TimestampMicrosecondType>();
                    // Years and months by the day: the cache holds a month's days at most.
                    let unit = match transform {
                        Transform::Identity => 1,
                        Transform::Hour => HOUR_MICROS,
                        Transform::Day | Transform::Month | Transform::Year => DAY_MICROS,
                    };
                    each!(cache, |row| a.value(row).div_euclid(unit))
                }
                DataType::Date32 => {
                    let a = array.as_primitive::<Date32Type>();
                    each!(cache, |row| i64::from(a.value(row)))
                }
                DataType::Int32 => {
                    let a = array.as_primitive::<Int32Type>();
                    each!(cache, |row| i64::from(a.value(row)))
                }
                DataType::Int64 => {
                    let a = array.as_primitive::<Int64Type>();
                    each!(cache, |row| a.value(row))
                }
                DataType::Float32 => {
                    let a = array.as_primitive::<Float32Type>();
                    each!(cache, |row| i64::from(a.value(row).to_bits()))
                }
                DataType::Float64 => {
                    let a = array.as_primitive::<Float64Type>();
                    each!(cache, |row| a.value(row).to_bits() as i64)
                }
                _ => {
                    let a = array.as_boolean();
                    each!(cache, |row| i64::from(a.value(row)))
                }
            },
            Keys::Wide(cache) => {
                let a = array.as_primitive::<Decimal128Type>();
                each!(cache, |row| a.value(row))
            }
            Keys::Text(map, last, last_code) => {
                let strings: Vec<Option<&str>> = match array.data_type() {
                    DataType::LargeUtf8 => array.as_string::<i64>().iter().collect(),
                    _ => array.as_string::<i32>().iter().collect(),
                };
                for (row, value) in strings.into_iter().enumerate() {
                    let Some(s) = value else {
                        let code = match *null {
                            Some(code) => code,
                            None => *null.insert(named(row)?),
                        };
                        codes.push(code);
                        continue;
                    };
                    if let Some(code) = *last_code
                        && last.as_str() == s
                    {
                        codes.push(code);
                        continue;
                    }
                    let code = match map.get(s) {
                        Some(&code) => code,
                        None => {
                            let code = named(row)?;
                            map.insert(s.into(), code);
                            code
                        }
                    };
                    last.clear();
                    last.push_str(s);
                    *last_code = Some(code);
                    codes.push(code);
                }
            }
            Keys::Other => {
                for row in 0..array.len() {
                    codes.push(named(row)?);
                }
            }
        }
        Ok(())
    }
}

impl Partitions {
    /// The partitions of batches of `schema` by `columns` (each naming a column of it), at
    /// most `max` of them.
    pub(super) fn new(
        schema: &arrow_schema::Schema,
        columns: &[PartitionColumn],
        max: usize,
    ) -> Result<Self, ConvertError> {
        let columns = columns
            .iter()
            .map(|c| {
                let index = schema.index_of(&c.from).map_err(|_| {
                    ConvertError::invalid_spec(format!("no output column {:?}", c.from))
                })?;
                Ok(Column::new(
                    index,
                    c.clone(),
                    schema.field(index).data_type(),
                ))
            })
            .collect::<Result<Vec<_>, ConvertError>>()?;
        if columns.is_empty() {
            return Err(ConvertError::invalid_spec("no partition column"));
        }
        Ok(Self {
            row_codes: Vec::with_capacity(columns.len()),
            columns,
            combined: HashMap::default(),
            dirs: Vec::new(),
            max,
        })
    }

    /// The number of partitions so far.
    pub(super) fn len(&self) -> usize {
        self.dirs.len()
    }

    /// The directories of partition `p` (`dt=2026-11-29/region=eu/`).
    pub(super) fn dirs(&self, p: usize) -> &str {
        &self.dirs[p]
    }

    /// A new partition of these codes (one per column): its number.
    fn add(&mut self, codes: &[u32]) -> Result<u32, ConvertError> {
        if self.dirs.len() == self.max {
            return Err(ConvertError::Parse {
                line: None,
                record: None,
                column: None,
                message: format!(
                    "the object's rows fall in more than {} partitions \
                     (max_partitions_per_object)",
                    self.max
                ),
            });
        }
        let mut dirs = String::new();
        for (column, &code) in self.columns.iter().zip(codes) {
            dirs.push_str(column.spec.name());
            dirs.push('=');
            dirs.push_str(&column.texts[code as usize]);
            dirs.push('/');
        }
        self.dirs.push(dirs);
        Ok(self.dirs.len() as u32 - 1)
    }

    /// The partition of each row of `batch`, in `out` (cleared first); `scratch` holds the
    /// codes of each column.
    pub(super) fn assign(
        &mut self,
        batch: &RecordBatch,
        scratch: &mut Vec<Vec<u32>>,
        out: &mut Vec<u32>,
    ) -> Result<(), ConvertError> {
        out.clear();
        scratch.resize_with(self.columns.len(), Vec::new);
        for (column, codes) in self.columns.iter_mut().zip(scratch.iter_mut()) {
            column.codes(batch.column(column.index), codes)?;
        }
        let rows = batch.num_rows();
        out.reserve(rows);
        if self.columns.len() == 1 {
            let codes = &scratch[0];
            let mut last: Option<(u32, u32)> = None;
            for &code in codes {
                if let Some((c, p)) = last
                    && c == code
                {
                    out.push(p);
                    continue;
                }
                let known = self.columns[0].partition_of[code as usize];
                let p = if known == u32::MAX {
                    let p = self.add(&[code])?;
                    self.columns[0].partition_of[code as usize] = p;
                    p
                } else {
                    known
                };
                last = Some((code, p));
                out.push(p);
            }
            return Ok(());
        }
        for row in 0..rows {
            self.row_codes.clear();
            self.row_codes
                .extend(scratch.iter().map(|codes| codes[row]));
            let p = match self.combined.get(self.row_codes.as_slice()) {
                Some(&p) => p,
                None => {
                    let codes = std::mem::take(&mut self.row_codes);
                    let p = self.add(&codes)?;
                    self.combined.insert(codes, p);
                    p
                }
            };
            out.push(p);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Float64Array, Int64Array, StringArray, TimestampMicrosecondArray};
    use arrow_schema::{Field, Schema};

    use super::*;

    fn column(from: &str, name: Option<&str>, transform: Transform) -> PartitionColumn {
        PartitionColumn {
            from: from.into(),
            name: name.map(str::to_string),
            transform,
        }
    }

    /// Every row's partition agrees with its directory names made row by row by `value_at`.
    #[test]
    fn rows_fall_in_the_partitions_their_values_name() {
        let day = 86_400_000_000i64;
        let times: Vec<Option<i64>> = (0..400)
            .map(|i| (i % 7 != 3).then_some((i % 37) * day / 5 - 3 * day))
            .collect();
        let regions: Vec<Option<&str>> = (0..400)
            .map(|i| match i % 5 {
                0 => None,
                1 => Some(""),
                2 => Some("eu/west"),
                _ => Some(["us", "eu", "ap"][i % 3]),
            })
            .collect();
        let schema = Arc::new(Schema::new(vec![
            Field::new(
                "at",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
            Field::new("region", DataType::Utf8, true),
            Field::new("x", DataType::Float64, true),
            Field::new("n", DataType::Int64, true),
        ]));
        let floats = [0.0, -0.0, f64::NAN, -f64::NAN, 1.5];
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(TimestampMicrosecondArray::from(times).with_timezone("UTC")),
                Arc::new(StringArray::from(regions)),
                Arc::new(Float64Array::from_iter_values(
                    (0..400).map(|i| floats[i % floats.len()]),
                )),
                Arc::new(Int64Array::from_iter_values((0..400).map(|i| i % 11))),
            ],
        )
        .unwrap();
        for by in [
            vec![column("at", Some("dt"), Transform::Day)],
            vec![column("at", Some("m"), Transform::Month)],
            vec![column("at", Some("y"), Transform::Year)],
            vec![column("at", Some("h"), Transform::Hour)],
            vec![column("at", None, Transform::Identity)],
            vec![column("region", None, Transform::Identity)],
            vec![column("x", None, Transform::Identity)],
            vec![
                column("region", None, Transform::Identity),
                column("at", Some("dt"), Transform::Day),
                column("n", None, Transform::Identity),
            ],
        ] {
            let mut partitions = Partitions::new(&schema, &by, 10_000).unwrap();
            let (mut scratch, mut ids) = (Vec::new(), Vec::new());
            // Twice, in two halves: codes are kept from batch to batch.
            let mut all = Vec::new();
            for (offset, len) in [(0, 150), (150, 250)] {
                partitions
                    .assign(&batch.slice(offset, len), &mut scratch, &mut ids)
                    .unwrap();
                all.extend_from_slice(&ids);
            }
            let mut first_seen: Vec<String> = Vec::new();
            for (row, &p) in all.iter().enumerate() {
                let mut dirs = String::new();
                for c in &by {
                    let array = batch.column(schema.index_of(&c.from).unwrap());
                    dirs.push_str(&format!(
                        "{}={}/",
                        c.name(),
                        value_at(array, row, c.transform).unwrap()
                    ));
                }
                if !first_seen.contains(&dirs) {
                    first_seen.push(dirs.clone());
                }
                assert_eq!(partitions.dirs(p as usize), dirs, "{by:?} row {row}");
            }
            assert_eq!(partitions.len(), first_seen.len(), "{by:?}");
            for (p, dirs) in first_seen.iter().enumerate() {
                assert_eq!(partitions.dirs(p), dirs, "numbered by first appearance");
            }
        }
    }

    #[test]
    fn more_partitions_than_allowed_fail_naming_the_limit() {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(0..5))],
        )
        .unwrap();
        let mut partitions =
            Partitions::new(&schema, &[column("n", None, Transform::Identity)], 4).unwrap();
        let e = partitions
            .assign(&batch, &mut Vec::new(), &mut Vec::new())
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("more than 4 partitions (max_partitions_per_object)"),
            "{e}"
        );
    }
}
