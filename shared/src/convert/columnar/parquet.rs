//! Parquet input: a Parquet file (possibly wrapped whole in gzip or zstd) read row group
//! by row group, projected onto the leaves the source's columns read and cast to their
//! types.
//!
//! Parquet keeps its footer at the end and is read by seeking, while the converter reads
//! its input once, front to back. The decompressed input is therefore spooled to an
//! anonymous temporary file first (in the system's temporary directory: `/tmp` in
//! Lambda), which costs local disk equal to the decompressed object and is gone when the
//! converter drops it (or its process dies). [`ConvertSpec::max_decoded_bytes`] bounds
//! the spool as it bounds any decompressed input. The file is then read with only the
//! Parquet columns (leaves) that the source's columns read projected, down to a struct's
//! fields, and [`ConvertSpec::batch_rows`] rows at a time, so memory is bounded by a batch
//! of the projected columns (and a page of each), not by the file.
//!
//! Columns are matched to the source's schema and widened as `convert/columnar/typed.rs` says
//! (the contract shared with Avro and ORC input). The values of a field the schema does
//! not name (under `on_unknown_field: ignore`) are counted from the footer without reading
//! a page when it is a scalar and every row group says: its definition level histogram
//! (arrow-rs and recent writers write one), or, outside any list, its values less its
//! statistics' NULL count. A struct, list or map, or a chunk that says neither, is read
//! to be counted.

use std::io::BufRead;

use arrow_schema::DataType;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::file::metadata::ParquetMetaData;

use super::arrays::{Cover, Level, element_type};
use super::typed::{Rows, TypedBatches, invalid, spool, typed};
use super::{ConvertError, ConvertSpec};
use crate::schema::FieldType;

/// Batches of a spooled Parquet file in the spec's schema.
pub(in crate::convert) type ParquetBatches = TypedBatches<ParquetRecordBatchReader>;

/// The top-level fields of the Parquet file `input` as its reader reads them (from the
/// footer; no page read).
pub(in crate::convert) fn fields(
    input: impl BufRead,
) -> Result<arrow_schema::Fields, ConvertError> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(spool(input)?)
        .map_err(|e| invalid(format!("not a valid Parquet file: {e}")))?;
    Ok(builder.schema().fields().clone())
}

/// Spools `input` and checks the file's footer and columns against the spec's schema.
pub(in crate::convert) fn batches(
    input: impl BufRead,
    spec: &ConvertSpec,
    types: &[FieldType],
) -> Result<ParquetBatches, ConvertError> {
    let file = spool(input)?;
    let spooled = file.metadata().map_or(0, |m| m.len());
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| invalid(format!("not a valid Parquet file: {e}")))?;
    let metadata = builder.metadata().clone();
    inflated_within(&metadata, spooled, spec.max_decoded_bytes)?;
    let groups: i64 = metadata.row_groups().iter().map(|g| g.num_rows()).sum();
    let total = metadata.file_metadata().num_rows();
    if total != groups || total < 0 {
        return Err(invalid(format!(
            "not a valid Parquet file: the footer counts {total} rows, its row groups {groups}"
        )));
    }
    let file_schema = builder.schema().clone();
    let fields = file_schema.fields();
    // The first leaf (Parquet column) of each top-level column, when the Arrow schema's
    // leaves are the file's: then nested fields are projected alone, and a field the schema
    // does not name is counted from the footer.
    let mut firsts = Vec::with_capacity(fields.len());
    let mut leaf = 0;
    for field in fields {
        firsts.push(leaf);
        leaf += leaves(field.data_type());
    }
    let firsts = (leaf == builder.parquet_schema().num_columns()).then_some(firsts);
    let counted = |root: usize, levels: &[Level]| {
        let first = firsts.as_ref()?[root];
        footer_count(&metadata, leaf_at(fields[root].data_type(), levels, first)?)
    };
    let (typed, needs) = typed(fields, spec, types, counted)?;

    let rows = u64::try_from(total).unwrap_or_default();
    let rows_from = if needs.is_empty() || rows == 0 {
        Rows::Blank(rows)
    } else {
        let parquet_schema = builder.parquet_schema();
        let mask = match &firsts {
            Some(firsts) => {
                let mut read = Vec::new();
                for (&root, cover) in &needs {
                    needed(fields[root].data_type(), cover, firsts[root], &mut read);
                }
                ProjectionMask::leaves(parquet_schema, read)
            }
            None => ProjectionMask::roots(parquet_schema, needs.keys().copied()),
        };
        let reader = builder
            .with_projection(mask)
            .with_batch_size(spec.batch_rows)
            .build()
            .map_err(|e| invalid(format!("not a valid Parquet file: {e}")))?;
        Rows::Read {
            reader,
            use_columns: true,
        }
    };
    Ok(TypedBatches::new(rows_from, typed, spec, "Parquet", None))
}

/// The pages are inflated inside the reader: what the footer says every column chunk's
/// pages inflate to counts against `limit` with the spooled file, before a page is read (all
/// the columns, read or not: a bound, not a measure). parquet-rs then checks each page's
/// inflated size against its header and fails the file on a difference.
fn inflated_within(
    metadata: &ParquetMetaData,
    spooled: u64,
    limit: Option<u64>,
) -> Result<(), ConvertError> {
    let Some(limit) = limit else { return Ok(()) };
    let pages = metadata
        .row_groups()
        .iter()
        .flat_map(|g| g.columns())
        .map(|c| u64::try_from(c.uncompressed_size()).unwrap_or(u64::MAX))
        .fold(spooled, u64::saturating_add);
    if pages > limit {
        return Err(ConvertError::TooLarge { limit });
    }
    Ok(())
}

/// The Parquet columns (leaves) a value of Arrow type `data_type` is stored in.
fn leaves(data_type: &DataType) -> usize {
    match data_type {
        DataType::Struct(children) => children.iter().map(|c| leaves(c.data_type())).sum(),
        DataType::Map(entries, _) => leaves(entries.data_type()),
        other => element_type(other).map_or(1, leaves),
    }
}

/// Adds to `read` the leaves (from `first`) of a value of type `data_type` that `cover`
/// reads: a map's keys always, and one field of a struct none of whose fields is read
/// (for the struct's NULLs).
fn needed(data_type: &DataType, cover: &Cover, first: usize, read: &mut Vec<usize>) {
    match (cover, data_type) {
        (Cover::Fields(covered), DataType::Struct(children)) => {
            let before = read.len();
            let mut at = first;
            for (position, child) in children.iter().enumerate() {
                if let Some(cover) = covered.get(&position) {
                    needed(child.data_type(), cover, at, read);
                }
                at += leaves(child.data_type());
            }
            if read.len() == before && at > first {
                read.push(first);
            }
        }
        (Cover::Values(cover), DataType::Map(entries, _)) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => {
                let keys = leaves(kv[0].data_type());
                read.extend(first..first + keys);
                needed(kv[1].data_type(), cover, first + keys, read);
            }
            _ => read.extend(first..first + leaves(data_type)),
        },
        (Cover::Elements(cover), data_type) if element_type(data_type).is_some() => {
            let element = element_type(data_type).unwrap_or(data_type);
            needed(element, cover, first, read);
        }
        _ => read.extend(first..first + leaves(data_type)),
    }
}

/// The leaf (from `first`) of the scalar at `levels` inside a value of type `data_type`,
/// `None` when what is there is not a scalar.
fn leaf_at(data_type: &DataType, levels: &[Level], first: usize) -> Option<usize> {
    let Some((level, rest)) = levels.split_first() else {
        let nested = matches!(data_type, DataType::Struct(_) | DataType::Map(..))
            || element_type(data_type).is_some();
        return (!nested).then_some(first);
    };
    match (level, data_type) {
        (Level::Field { position, .. }, DataType::Struct(children)) => {
            let before: usize = children[..*position]
                .iter()
                .map(|c| leaves(c.data_type()))
                .sum();
            leaf_at(children.get(*position)?.data_type(), rest, first + before)
        }
        (Level::Values, DataType::Map(entries, _)) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => {
                let keys = leaves(kv[0].data_type());
                leaf_at(kv[1].data_type(), rest, first + keys)
            }
            _ => None,
        },
        (Level::Elements, data_type) => leaf_at(element_type(data_type)?, rest, first),
        _ => None,
    }
}

/// The values (not NULL) of the Parquet column `leaf` in the file, as its footer gives
/// them without reading a page: its chunks' definition level histograms (the values at the
/// highest level), else, for a column outside any list (one level a row), the chunks'
/// values less their statistics' NULLs. `None` when a chunk says neither.
fn footer_count(metadata: &ParquetMetaData, leaf: usize) -> Option<u64> {
    let mut total = 0_u64;
    for group in metadata.row_groups() {
        let chunk = group.columns().get(leaf)?;
        let descr = chunk.column_descr();
        let (max_def, max_rep) = (descr.max_def_level(), descr.max_rep_level());
        let values = if max_def == 0 && max_rep == 0 {
            chunk.num_values()
        } else if let Some(histogram) = chunk.definition_level_histogram() {
            histogram.get(usize::try_from(max_def).ok()?)?
        } else if max_rep == 0 {
            let nulls = chunk.statistics()?.null_count_opt()?;
            chunk.num_values().checked_sub(i64::try_from(nulls).ok()?)?
        } else {
            return None;
        };
        total = total.checked_add(u64::try_from(values).ok()?)?;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::StringDictionaryBuilder;
    use arrow_array::types::Int32Type;
    use arrow_array::{
        ArrayRef, Date32Array, Decimal128Array, Float32Array, Float64Array, Int8Array, Int16Array,
        Int32Array, Int64Array, LargeStringArray, RecordBatch, StringArray, StringViewArray,
        TimestampMillisecondArray, TimestampNanosecondArray, TimestampSecondArray, UInt8Array,
        UInt16Array, UInt32Array, UInt64Array,
    };
    use arrow_schema::{Field, Schema};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;

    use super::super::testutil::*;
    use super::super::typed::checks;
    use super::super::{ConvertError, ConvertSpec, InputFormat, SumValue, convert};

    /// A Parquet file of `columns` (name, values), `row_group_rows` rows per row group.
    fn file_with(columns: Vec<(&str, ArrayRef)>, row_group_rows: usize) -> Vec<u8> {
        let batch = RecordBatch::try_from_iter(columns).unwrap();
        let properties = WriterProperties::builder()
            .set_max_row_group_row_count(Some(row_group_rows))
            .build();
        let mut out = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(properties)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        out
    }

    fn file(columns: Vec<(&str, ArrayRef)>) -> Vec<u8> {
        file_with(columns, 1024)
    }

    fn spec(columns: &str) -> ConvertSpec {
        ConvertSpec::new(InputFormat::Parquet, schema(columns))
    }

    /// The one column `c` of type `ty` read from `array`, as text.
    fn read_as(ty: &str, array: ArrayRef) -> Result<Vec<String>, String> {
        let spec = spec(&format!(r#"[{{"name":"c","type":"{ty}"}}]"#));
        let mut out = Vec::new();
        convert(&file(vec![("c", array)])[..], &spec, &mut out).map_err(|e| e.to_string())?;
        Ok(read_parquet(out)
            .rows
            .into_iter()
            .map(|r| r[0].clone())
            .collect())
    }

    fn ints<T: From<i8>>(values: [Option<i8>; 3]) -> Vec<Option<T>> {
        values.into_iter().map(|v| v.map(T::from)).collect()
    }

    #[test]
    fn the_converters_own_output_reads_back_as_the_same_rows_and_sums() {
        let sum_columns: Vec<String> = ["id", "qty", "price", "ratio", "weight"]
            .map(String::from)
            .into();
        let mut csv = csv_spec(ALL_TYPES);
        csv.sum_columns = sum_columns.clone();
        let mut parquet_bytes = Vec::new();
        let csv_stats = convert(ALL_TYPES_CSV.as_bytes(), &csv, &mut parquet_bytes).unwrap();
        let mut parquet = spec(ALL_TYPES);
        parquet.sum_columns = sum_columns;
        let (stats, file) = run(&parquet_bytes, &parquet);
        assert_eq!(file.rows, all_types_rows());
        assert_eq!((stats.rows, &stats.sums), (csv_stats.rows, &csv_stats.sums));
        assert_eq!(stats.bytes_read, parquet_bytes.len() as u64);
        assert_eq!(stats.bytes_decoded, parquet_bytes.len() as u64);
    }

    #[test]
    fn columns_are_matched_by_name_and_extra_ones_ignored() {
        let bytes = file(vec![
            (
                "extra",
                Arc::new(StringArray::from(vec!["x", "y"])) as ArrayRef,
            ),
            ("b", Arc::new(StringArray::from(vec!["one", "two"]))),
            ("a", Arc::new(Int64Array::from(vec![1, 2]))),
        ]);
        let mut spec = spec(
            r#"[{"name":"a","type":"int64","nullable":false},{"name":"b","type":"string"},
                {"name":"missing","type":"float64"}]"#,
        );
        spec.sum_columns = vec!["a".into(), "missing".into()];
        let (stats, file) = run(&bytes, &spec);
        assert_eq!(file.rows, text_rows(&["1|one|∅", "2|two|∅"]));
        assert_eq!(stats.sums["a"], SumValue::Int(3));
        assert_eq!(stats.sums["missing"], SumValue::Float(0.0));
    }

    #[test]
    fn a_missing_required_column_fails_before_any_row() {
        let bytes = file(vec![("a", Arc::new(Int64Array::from(vec![1])) as ArrayRef)]);
        let spec =
            spec(r#"[{"name":"a","type":"int64"},{"name":"x","type":"int32","nullable":false}]"#);
        assert_eq!(
            parse_error(&bytes, &spec),
            r#"column "x": missing from the file, and the source's schema requires it"#
        );
    }

    #[test]
    fn widenings_are_accepted() {
        let small = [Some(1), None, Some(-7)];
        let shown = ["1", "∅", "-7"].map(String::from).to_vec();
        for (ty, array) in [
            ("int32", Arc::new(Int8Array::from(ints(small))) as ArrayRef),
            ("int32", Arc::new(Int16Array::from(ints(small)))),
            ("int64", Arc::new(Int8Array::from(ints(small)))),
            ("int64", Arc::new(Int16Array::from(ints(small)))),
            ("int64", Arc::new(Int32Array::from(ints(small)))),
            ("float64", Arc::new(Float32Array::from(ints(small)))),
        ] {
            let shown = shown.clone();
            let shown = if ty == "float64" {
                ["1.0", "∅", "-7.0"].map(String::from).to_vec()
            } else {
                shown
            };
            assert_eq!(
                read_as(ty, array.clone()),
                Ok(shown),
                "{} → {ty}",
                array.data_type()
            );
        }
        let unsigned = [Some(0), None, Some(200)];
        let shown: Vec<String> = ["0", "∅", "200"].map(String::from).into();
        let u8s: Vec<Option<u8>> = unsigned.iter().map(|v| v.map(|v: u8| v)).collect();
        for (ty, array) in [
            ("int32", Arc::new(UInt8Array::from(u8s.clone())) as ArrayRef),
            (
                "int32",
                Arc::new(UInt16Array::from_iter(u8s.iter().map(|v| v.map(u16::from)))),
            ),
            (
                "int64",
                Arc::new(UInt32Array::from_iter(u8s.iter().map(|v| v.map(u32::from)))),
            ),
            (
                "decimal(20,0)",
                Arc::new(UInt64Array::from_iter(u8s.iter().map(|v| v.map(u64::from)))),
            ),
        ] {
            assert_eq!(
                read_as(ty, array.clone()),
                Ok(shown.clone()),
                "{} → {ty}",
                array.data_type()
            );
        }
        assert_eq!(
            read_as("int64", Arc::new(UInt32Array::from(vec![u32::MAX]))),
            Ok(vec!["4294967295".to_string()])
        );
        // Integers and decimals into decimals with room for every value.
        assert_eq!(
            read_as(
                "decimal(12,2)",
                Arc::new(Int32Array::from(vec![i32::MIN, 5]))
            ),
            Ok(vec!["-2147483648.00".to_string(), "5.00".to_string()])
        );
        assert_eq!(
            read_as("decimal(21,2)", Arc::new(Int64Array::from(vec![i64::MAX]))),
            Ok(vec!["9223372036854775807.00".to_string()])
        );
        let decimal = |p, s, v: Vec<i128>| {
            Arc::new(
                Decimal128Array::from(v)
                    .with_precision_and_scale(p, s)
                    .unwrap(),
            ) as ArrayRef
        };
        assert_eq!(
            read_as("decimal(12,2)", decimal(10, 2, vec![12345678901, -5])),
            Ok(vec!["123456789.01".to_string(), "-0.05".to_string()])
        );
        assert_eq!(
            read_as("decimal(14,4)", decimal(10, 2, vec![12345678901])),
            Ok(vec!["123456789.0100".to_string()])
        );
        // Dates, strings of every flavour.
        assert_eq!(
            read_as("date", Arc::new(Date32Array::from(vec![Some(19724), None]))),
            Ok(vec!["2024-01-02".to_string(), "∅".to_string()])
        );
        let words = vec![Some("a"), None, Some("b c")];
        let shown: Vec<String> = ["a", "∅", "b c"].map(String::from).into();
        let mut dictionary = StringDictionaryBuilder::<Int32Type>::new();
        words.iter().for_each(|w| dictionary.append_option(*w));
        for array in [
            Arc::new(StringArray::from(words.clone())) as ArrayRef,
            Arc::new(LargeStringArray::from(words.clone())),
            Arc::new(StringViewArray::from(words.clone())),
            Arc::new(dictionary.finish()),
        ] {
            assert_eq!(
                read_as("string", array.clone()),
                Ok(shown.clone()),
                "{}",
                array.data_type()
            );
        }
    }

    #[test]
    fn timestamps_of_any_unit_and_zone_are_read_as_utc_micros() {
        let at = "2024-01-02T03:04:05Z";
        let secs = 1_704_164_645_i64;
        for (array, shown) in [
            (
                Arc::new(TimestampSecondArray::from(vec![secs])) as ArrayRef,
                at,
            ),
            (
                Arc::new(TimestampSecondArray::from(vec![secs]).with_timezone("+02:00")),
                at,
            ),
            (
                Arc::new(
                    TimestampMillisecondArray::from(vec![secs * 1000 + 5]).with_timezone("UTC"),
                ),
                "2024-01-02T03:04:05.005Z",
            ),
            (
                Arc::new(
                    arrow_array::TimestampMicrosecondArray::from(vec![secs * 1_000_000 + 7])
                        .with_timezone("America/New_York"),
                ),
                "2024-01-02T03:04:05.000007Z",
            ),
            (
                Arc::new(TimestampNanosecondArray::from(vec![
                    secs * 1_000_000_000 + 123_456_000,
                ])),
                "2024-01-02T03:04:05.123456Z",
            ),
        ] {
            let data_type = array.data_type().clone();
            assert_eq!(
                read_as("timestamp", array),
                Ok(vec![shown.to_string()]),
                "{data_type}"
            );
        }
        assert_eq!(
            read_as(
                "timestamp",
                Arc::new(TimestampNanosecondArray::from(vec![
                    Some(0),
                    None,
                    Some(secs * 1_000_000_000 + 123_456_789)
                ]))
            ),
            Err(r#"row 3: column "c": 2024-01-02T03:04:05.123456789Z has digits below the microsecond and would be truncated"#.to_string())
        );
        assert_eq!(
            read_as(
                "timestamp",
                Arc::new(TimestampSecondArray::from(vec![i64::MAX]))
            ),
            Err(format!(
                r#"row 1: column "c": {} seconds since the epoch is out of range for a timestamp in microseconds"#,
                i64::MAX
            ))
        );
    }

    #[test]
    fn incompatible_types_are_refused_naming_the_column_and_both_types() {
        let decimal = |p, s| {
            Arc::new(
                Decimal128Array::from(vec![1])
                    .with_precision_and_scale(p, s)
                    .unwrap(),
            ) as ArrayRef
        };
        for (ty, array, error) in [
            (
                "int32",
                Arc::new(StringArray::from(vec!["1"])) as ArrayRef,
                "type Utf8 in the file cannot be read as int32",
            ),
            (
                "int32",
                Arc::new(Int64Array::from(vec![1])),
                "type Int64 in the file cannot be read as int32",
            ),
            (
                "int32",
                Arc::new(UInt32Array::from(vec![1])),
                "type UInt32 in the file cannot be read as int32",
            ),
            (
                "int64",
                Arc::new(UInt64Array::from(vec![1])),
                "type UInt64 in the file cannot be read as int64",
            ),
            (
                "float32",
                Arc::new(Float64Array::from(vec![1.0])),
                "type Float64 in the file cannot be read as float32",
            ),
            (
                "float64",
                Arc::new(Int32Array::from(vec![1])),
                "type Int32 in the file cannot be read as float64",
            ),
            (
                "decimal(12,2)",
                Arc::new(Int64Array::from(vec![1])),
                "type Int64 in the file cannot be read as decimal(12,2)",
            ),
            (
                "decimal(12,2)",
                decimal(14, 2),
                "type Decimal128(14, 2) in the file cannot be read as decimal(12,2)",
            ),
            (
                "decimal(12,2)",
                decimal(10, 3),
                "type Decimal128(10, 3) in the file cannot be read as decimal(12,2)",
            ),
            (
                "date",
                Arc::new(TimestampSecondArray::from(vec![1])),
                "type Timestamp(s) in the file cannot be read as date",
            ),
            (
                "timestamp",
                Arc::new(Date32Array::from(vec![1])),
                "type Date32 in the file cannot be read as timestamp",
            ),
            (
                "bool",
                Arc::new(Int8Array::from(vec![1])),
                "type Int8 in the file cannot be read as bool",
            ),
            (
                "string",
                Arc::new(Int32Array::from(vec![1])),
                "type Int32 in the file cannot be read as string",
            ),
        ] {
            assert_eq!(read_as(ty, array), Err(format!(r#"column "c": {error}"#)));
        }
    }

    #[test]
    fn a_null_in_a_required_column_names_its_row() {
        let values: Vec<Option<i32>> = (0..2500).map(|i| (i != 2100).then_some(i)).collect();
        let bytes = file_with(
            vec![("n", Arc::new(Int32Array::from(values)) as ArrayRef)],
            1000,
        );
        let mut spec = spec(r#"[{"name":"n","type":"int64","nullable":false}]"#);
        spec.batch_rows = 256;
        assert_eq!(
            parse_error(&bytes, &spec),
            r#"row 2101: column "n": missing value in a non-nullable column"#
        );
    }

    #[test]
    fn many_row_groups_stream_in_bounded_batches() {
        let bytes = file_with(checks::wide_and_numbered(20_000), 1000);
        let mut spec = checks::streams_in_bounded_batches(InputFormat::Parquet, &bytes, 20_000);
        spec.row_group_rows = 5000;
        let (stats, file) = run(&bytes, &spec);
        assert_eq!((stats.rows, stats.row_groups), (20_000, 4));
        assert_eq!(file.rows[12_345], ["12345"]);
    }

    #[test]
    fn all_columns_missing_gives_null_rows_of_the_files_length() {
        let other = Arc::new(Int32Array::from_iter_values(0..7)) as ArrayRef;
        let bytes = file_with(vec![("other", other)], 3);
        checks::no_schema_column_gives_null_rows(InputFormat::Parquet, &bytes);
    }

    #[test]
    fn zero_rows_give_a_valid_empty_output() {
        let bytes = file(vec![(
            "a",
            Arc::new(Int32Array::from(Vec::<i32>::new())) as ArrayRef,
        )]);
        let mut spec = spec(r#"[{"name":"a","type":"int64","nullable":false}]"#);
        spec.sum_columns = vec!["a".into()];
        let (stats, file) = run(&bytes, &spec);
        assert_eq!((stats.rows, file.rows.len()), (0, 0));
        assert_eq!(stats.sums["a"], SumValue::Int(0));
    }

    #[test]
    fn a_gzip_or_zstd_wrapped_file_is_read_through_its_wrapper() {
        let bytes = file(vec![
            ("b", Arc::new(StringArray::from(vec!["x", "y"])) as ArrayRef),
            ("a", Arc::new(Int32Array::from(vec![4, 5]))),
        ]);
        checks::read_through_wrappers(InputFormat::Parquet, &bytes);
    }

    /// The spooled file and what its pages inflate to (the footer's uncompressed sizes) count
    /// against `max_decoded_bytes` together, before a page is read: a small zstd file of
    /// zeros written plain inflates far beyond its size.
    #[test]
    fn the_spool_and_the_inflated_pages_are_bounded_by_max_decoded_bytes() {
        use parquet::basic::{Compression as Codec, Encoding, ZstdLevel};
        let batch = RecordBatch::try_from_iter(vec![(
            "a",
            Arc::new(Int64Array::from(vec![0_i64; 200_000])) as ArrayRef,
        )])
        .unwrap();
        let properties = WriterProperties::builder()
            .set_compression(Codec::ZSTD(ZstdLevel::default()))
            .set_dictionary_enabled(false)
            .set_encoding(Encoding::PLAIN)
            .build();
        let mut bytes = Vec::new();
        let mut writer =
            ArrowWriter::try_new(&mut bytes, batch.schema(), Some(properties)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let metadata = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            bytes::Bytes::from(bytes.clone()),
        )
        .unwrap()
        .metadata()
        .clone();
        let pages: u64 = metadata
            .row_groups()
            .iter()
            .flat_map(|g| g.columns())
            .map(|c| c.uncompressed_size() as u64)
            .sum();
        assert!(
            pages > 100 * bytes.len() as u64,
            "{pages} / {}",
            bytes.len()
        );
        let mut spec = spec(r#"[{"name":"a","type":"int64"}]"#);
        spec.max_decoded_bytes = Some(bytes.len() as u64 + pages - 1);
        assert!(matches!(fail(&bytes, &spec), ConvertError::TooLarge { .. }));
        spec.max_decoded_bytes = Some(bytes.len() as u64 + pages);
        assert_eq!(run(&bytes, &spec).0.rows, 200_000);
    }

    /// Inputs on which parquet-rs or arrow-rs panicked, found by the `parquet` fuzz target
    /// (`tests/fixtures/fuzz/parquet/`, as the target read them: the orders columns, all
    /// nullable, unknown fields and bad values rescued, batches of 7 rows, 8 MiB decoded at
    /// most): each fails as an invalid file.
    #[test]
    fn files_on_which_the_readers_panicked_fail_as_invalid() {
        let dir = format!(
            "{}/../tests/fixtures/fuzz/parquet",
            env!("CARGO_MANIFEST_DIR")
        );
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        assert_eq!(names.len(), 6);
        let mut spec = spec(
            r#"[{"name":"order_id","type":"int64"},{"name":"customer","type":"string"},
            {"name":"quantity","type":"int32"},{"name":"amount","type":"decimal(12,2)"},
            {"name":"ordered_at","type":"timestamp"}]"#,
        );
        spec.unknown_fields = super::super::UnknownFields::Rescue;
        spec.bad_values = super::super::BadValues::Rescue;
        spec.batch_rows = 7;
        spec.max_decoded_bytes = Some(8 << 20);
        for path in names {
            // The fuzz target's first byte chose the spec; the rest is the file.
            let bytes = std::fs::read(&path).unwrap();
            let err = fail(&bytes[1..], &spec).to_string();
            assert!(
                err.contains("not a valid") || err.contains("cannot read the Parquet data"),
                "{}: {err}",
                path.display()
            );
        }
    }

    #[test]
    fn corrupt_or_truncated_files_are_errors_never_panics() {
        let bytes = file_with(checks::numbered_and_repeated(), 700);
        let spec =
            spec(r#"[{"name":"a","type":"int64","nullable":false},{"name":"s","type":"string"}]"#);
        for input in [
            &b""[..],
            b"PAR1",
            ALL_TYPES_CSV.as_bytes(),
            &bytes[..bytes.len() - 1],
            &bytes[..bytes.len() / 2],
        ] {
            let err = fail(input, &spec);
            assert!(
                err.to_string().starts_with("not a valid Parquet file: "),
                "{err}"
            );
        }
        // Flipped bytes anywhere: an error or (if the flip is harmless) a result, no panic.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut failures = 0;
        for _ in 0..400 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mut corrupt = bytes.clone();
            let at = (state % corrupt.len() as u64) as usize;
            corrupt[at] ^= 1 << (state >> 60 & 7);
            match convert(&corrupt[..], &spec, Vec::new()) {
                Ok(stats) => assert_eq!(stats.rows, 3000),
                Err(e) => {
                    assert!(matches!(e, ConvertError::Parse { .. }), "{e:?}");
                    failures += 1;
                }
            }
        }
        assert!(failures > 0);
    }

    #[test]
    fn column_codecs_snappy_gzip_and_zstd_are_read() {
        use parquet::basic::{Compression as Codec, GzipLevel, ZstdLevel};
        let batch = RecordBatch::try_from_iter(vec![(
            "a",
            Arc::new(Int64Array::from_iter_values(0..5000)) as ArrayRef,
        )])
        .unwrap();
        let mut spec = spec(r#"[{"name":"a","type":"int64"}]"#);
        spec.sum_columns = vec!["a".into()];
        for codec in [
            Codec::UNCOMPRESSED,
            Codec::SNAPPY,
            Codec::GZIP(GzipLevel::default()),
            Codec::ZSTD(ZstdLevel::default()),
        ] {
            let properties = WriterProperties::builder().set_compression(codec).build();
            let mut out = Vec::new();
            let mut writer =
                ArrowWriter::try_new(&mut out, batch.schema(), Some(properties)).unwrap();
            writer.write(&batch).unwrap();
            writer.close().unwrap();
            let (stats, _) = run(&out, &spec);
            assert_eq!(stats.sums["a"], SumValue::Int(4999 * 5000 / 2), "{codec}");
        }
    }

    #[test]
    fn duplicate_file_columns_are_ambiguous() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", arrow_schema::DataType::Int32, true),
            Field::new("a", arrow_schema::DataType::Int32, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int32Array::from(vec![1])),
                Arc::new(Int32Array::from(vec![2])),
            ],
        )
        .unwrap();
        let mut out = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut out, schema, None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        assert_eq!(
            parse_error(&out, &spec(r#"[{"name":"a","type":"int32"}]"#)),
            r#"column "a": appears more than once in the file"#
        );
    }

    /// [`checks::nested_batch`] as Parquet.
    fn nested(properties: Option<WriterProperties>) -> Vec<u8> {
        let batch = checks::nested_batch();
        let mut out = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), properties).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        out
    }

    #[test]
    fn nested_columns_paths_and_policies() {
        let bytes = nested(None);
        checks::nested(InputFormat::Parquet, &bytes);
    }

    #[test]
    fn unknown_leaves_are_counted_from_the_footer_and_only_read_leaves_projected() {
        use super::super::arrays::{Cover, Level};
        use super::{footer_count, leaf_at, leaves, needed};

        let field = |name: &str, position| Level::Field {
            name: name.into(),
            position,
        };
        let count = |bytes: Vec<u8>, root: usize, levels: &[Level]| {
            let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                bytes::Bytes::from(bytes),
            )
            .unwrap();
            let fields = builder.schema().fields().clone();
            let first: usize = fields[..root].iter().map(|f| leaves(f.data_type())).sum();
            let leaf = leaf_at(fields[root].data_type(), levels, first)?;
            footer_count(builder.metadata(), leaf)
        };
        // Leaves: id 0, user.name 1, .age 2, .extra 3, tags 4, attrs' keys 5 and values 6,
        // events' at 7, kind 8, note 9, moments 10, payload 11.
        let extra = [field("extra", 2)];
        let note = [Level::Elements, field("note", 2)];
        assert_eq!(count(nested(None), 1, &extra), Some(1));
        assert_eq!(count(nested(None), 4, &note), Some(2));
        assert_eq!(count(nested(None), 6, &[]), Some(2));
        assert_eq!(
            count(nested(None), 5, &[]),
            None,
            "a list: read to be counted"
        );
        // Without statistics (nor level histograms) in the footer, the values are read.
        let bare = || {
            let properties = WriterProperties::builder()
                .set_statistics_enabled(parquet::file::properties::EnabledStatistics::None)
                .build();
            nested(Some(properties))
        };
        assert_eq!(count(bare(), 1, &extra), None);
        assert_eq!(count(bare(), 4, &note), None);
        checks::nested_columns_round_trip(InputFormat::Parquet, &bare());

        let batch = checks::nested_batch();
        let schema = batch.schema();
        let leaves_read = |root: usize, cover: Cover| {
            let first: usize = schema.fields()[..root]
                .iter()
                .map(|f| leaves(f.data_type()))
                .sum();
            let mut read = Vec::new();
            needed(schema.field(root).data_type(), &cover, first, &mut read);
            read
        };
        let fields = |covered: &[(usize, Cover)]| Cover::Fields(covered.iter().cloned().collect());
        assert_eq!(leaves_read(1, fields(&[(0, Cover::All)])), [1]);
        assert_eq!(
            leaves_read(1, fields(&[])),
            [1],
            "one leaf, for the struct's NULLs"
        );
        assert_eq!(leaves_read(3, Cover::Values(Box::new(Cover::All))), [5, 6]);
        let kinds = Cover::Elements(Box::new(fields(&[(1, Cover::All)])));
        assert_eq!(leaves_read(4, kinds), [8]);
        assert_eq!(leaves_read(4, Cover::All), [7, 8, 9]);
    }
}
