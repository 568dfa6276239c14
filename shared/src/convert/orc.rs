//! ORC input: an ORC file (possibly wrapped whole in gzip or zstd) read stripe by stripe
//! by `orc-rust`, with only the source's columns read.
//!
//! ORC keeps its footer at the end and is read by seeking, as Parquet is: the
//! decompressed input is spooled to an anonymous temporary file first, as
//! `convert/parquet.rs` says (local disk equal to the decompressed object, bounded by
//! [`ConvertSpec::max_decoded_bytes`]). The file is then read a stripe at a time: the
//! projected columns of one stripe are held in memory (compressed, as the file stores
//! them) and decoded [`ConvertSpec::batch_rows`] rows at a time, so memory is bounded by
//! the largest stripe's projected columns (64 MiB stripes by default in the reference
//! writers, before compression) and a batch, not by the file. Every codec of the format
//! is read (zlib, snappy, lz4, lzo, zstd).
//!
//! Columns are matched to the source's schema and widened as `convert/typed.rs` says
//! (the contract shared with Parquet and Avro input), the ORC types as `orc-rust` reads
//! them: `tinyint` is `Int8`, `smallint` `Int16`, `int` `Int32`, `bigint` `Int64`,
//! `float` `Float32`, `double` `Float64`, `string`, `char` and `varchar` `Utf8`,
//! `decimal(p,s)` `Decimal128(p, s)`, `date` `Date32`, `timestamp` a nanosecond
//! timestamp without zone (read as UTC) and `timestamp with local time zone` one in UTC.
//! The rows the footer counts must be the rows the stripes hold.

use std::fs::File;
use std::io::BufRead;

use arrow_schema::{Field, Fields};
use orc_rust::ArrowReaderBuilder;
use orc_rust::arrow_reader::ArrowReader;
use orc_rust::projection::ProjectionMask;
use orc_rust::schema::DataType as OrcType;

use super::arrays::Level;
use super::typed::{Rows, TypedBatches, invalid, spool, typed};
use super::{ConvertError, ConvertSpec};
use crate::schema::FieldType;

/// Batches of a spooled ORC file in the spec's schema.
pub(super) type OrcBatches = TypedBatches<ArrowReader<File>>;

/// Spools `input` and checks the file's footer and columns against the spec's schema.
pub(super) fn batches(
    input: impl BufRead,
    spec: &ConvertSpec,
    types: &[FieldType],
) -> Result<OrcBatches, ConvertError> {
    let file = spool(input)?;
    let builder = ArrowReaderBuilder::try_new(file)
        .map_err(|e| invalid(format!("not a valid ORC file: {e}")))?;
    let metadata = builder.file_metadata();
    let total = metadata.number_of_rows();
    let stripes: u64 = metadata
        .stripe_metadatas()
        .iter()
        .map(|s| s.number_of_rows())
        .fold(0, u64::saturating_add);
    if total != stripes {
        return Err(invalid(format!(
            "not a valid ORC file: the footer counts {total} rows, its stripes {stripes}"
        )));
    }
    let root = metadata.root_data_type().clone();
    let children = root.children();
    let fields: Fields = children
        .iter()
        .map(|c| Field::new(c.name(), c.data_type().to_arrow_data_type(), true))
        .collect();
    let statistics = metadata.column_file_statistics();
    let counted = |at: usize, levels: &[Level]| {
        let column = column_at(children[at].data_type(), levels)?.column_index();
        statistics.get(column).map(|s| s.number_of_values())
    };
    let (typed, needs) = typed(&fields, spec, types, counted)?;

    let rows_from = if needs.is_empty() || total == 0 {
        Rows::Blank(total)
    } else {
        let roots = needs
            .keys()
            .map(|&at| children[at].data_type().column_index());
        let mask = ProjectionMask::roots(&root, roots);
        let reader = builder
            .with_projection(mask)
            .with_batch_size(spec.batch_rows)
            .build();
        Rows::Read {
            reader,
            use_columns: true,
        }
    };
    Ok(TypedBatches::new(
        rows_from,
        typed,
        spec,
        "ORC",
        Some(total),
    ))
}

/// The ORC column at `levels` (struct fields, any element, any value) inside `data_type`.
fn column_at<'a>(data_type: &'a OrcType, levels: &[Level]) -> Option<&'a OrcType> {
    let Some((level, rest)) = levels.split_first() else {
        return Some(data_type);
    };
    let inner = match (level, data_type) {
        (Level::Field { name, .. }, OrcType::Struct { children, .. }) => {
            children.iter().find(|c| c.name() == name)?.data_type()
        }
        (Level::Elements, OrcType::List { child, .. }) => child,
        (Level::Values, OrcType::Map { value, .. }) => value,
        _ => return None,
    };
    column_at(inner, rest)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Float64Array, Int16Array, Int64Array, RecordBatch, StringArray};
    use orc_rust::ArrowWriterBuilder;

    use super::super::testutil::*;
    use super::super::typed::checks;
    use super::super::{Compression, ConvertError, ConvertSpec, InputFormat, SumValue, decode};

    /// An ORC file of `columns` (name, values), stripes of about `stripe_bytes`.
    fn file_with(columns: Vec<(&str, ArrayRef)>, stripe_bytes: usize) -> Vec<u8> {
        let batch = RecordBatch::try_from_iter(columns).unwrap();
        let mut out = Vec::new();
        let mut writer = ArrowWriterBuilder::new(&mut out, batch.schema())
            .with_stripe_byte_size(stripe_bytes)
            .try_build()
            .unwrap();
        let mut at = 0;
        while at < batch.num_rows() {
            let n = 500.min(batch.num_rows() - at);
            writer.write(&batch.slice(at, n)).unwrap();
            at += n;
        }
        writer.close().unwrap();
        out
    }

    fn file(columns: Vec<(&str, ArrayRef)>) -> Vec<u8> {
        file_with(columns, 64 << 20)
    }

    fn spec(columns: &str) -> ConvertSpec {
        ConvertSpec::new(InputFormat::Orc, schema(columns))
    }

    fn fixture(name: &str) -> Vec<u8> {
        let path = format!(
            "{}/../tests/fixtures/avro_orc/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn files_of_every_codec_written_by_pyarrow_read_exactly() {
        let mut spec = spec(
            r#"[{"name": "order_id", "type": "int64", "nullable": false},
                {"name": "customer", "type": "string"},
                {"name": "quantity", "type": "int32"},
                {"name": "amount", "type": "decimal(12,2)"},
                {"name": "ordered_at", "type": "timestamp"}]"#,
        );
        spec.sum_columns = vec!["quantity".into(), "amount".into()];
        spec.batch_rows = 300;
        // The rows of `orders_csv(1, 1000)`.
        let ids = 1..=1000_i128;
        let quantity: i128 = ids.clone().map(|id| id % 7 + 1).sum();
        let cents: i128 = ids.map(|id| (id % 1000) * 101 + 5).sum();
        for codec in ["uncompressed", "zlib", "snappy", "lz4", "zstd"] {
            let bytes = fixture(&format!("orders-{codec}.orc"));
            let (stats, file) = run(&bytes, &spec);
            assert_eq!(stats.rows, 1000, "{codec}");
            assert_eq!(stats.sums["quantity"], SumValue::Int(quantity), "{codec}");
            assert_eq!(
                stats.sums["amount"],
                SumValue::Decimal {
                    unscaled: cents,
                    scale: 2
                },
                "{codec}"
            );
            assert_eq!(
                file.rows[0],
                ["1", "Customer, 1", "2", "1.06", "2024-03-02T10:01:00Z"],
                "{codec}"
            );
            assert_eq!(
                file.rows[999],
                [
                    "1000",
                    "Customer, 1000",
                    "7",
                    "0.05",
                    "2024-03-21T10:40:00Z"
                ],
                "{codec}"
            );
        }
    }

    #[test]
    fn columns_are_matched_by_name_widened_and_extra_ones_skipped() {
        let bytes = file(vec![
            (
                "extra",
                Arc::new(StringArray::from(vec!["x", "y"])) as ArrayRef,
            ),
            ("q", Arc::new(Int16Array::from(vec![Some(7), None]))),
            ("s", Arc::new(StringArray::from(vec![None, Some("b")]))),
        ]);
        let mut spec = spec(
            r#"[{"name":"s","type":"string"},{"name":"q","type":"int32"},
                {"name":"absent","type":"float64"}]"#,
        );
        spec.sum_columns = vec!["q".into()];
        let (stats, file) = run(&bytes, &spec);
        assert_eq!(file.rows, text_rows(&["∅|7|∅", "b|∅|∅"]));
        assert_eq!(stats.sums["q"], SumValue::Int(7));
    }

    #[test]
    fn a_file_that_breaks_the_contract_fails_naming_the_column() {
        let bytes = file(vec![
            ("n", Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef),
            ("x", Arc::new(Float64Array::from(vec![1.0, 2.0]))),
        ]);
        for (columns, error) in [
            (
                r#"[{"name":"n","type":"int32"}]"#,
                r#"column "n": type Int64 in the file cannot be read as int32"#,
            ),
            (
                r#"[{"name":"x","type":"decimal(12,2)"}]"#,
                r#"column "x": type Float64 in the file cannot be read as decimal(12,2)"#,
            ),
            (
                r#"[{"name":"n","type":"int64"},{"name":"id","type":"int64","nullable":false}]"#,
                r#"column "id": missing from the file, and the source's schema requires it"#,
            ),
        ] {
            assert_eq!(parse_error(&bytes, &spec(columns)), error);
        }
        let nulls = file(vec![(
            "n",
            Arc::new(Int64Array::from(vec![Some(1), None])) as ArrayRef,
        )]);
        assert_eq!(
            parse_error(
                &nulls,
                &spec(r#"[{"name":"n","type":"int64","nullable":false}]"#)
            ),
            r#"row 2: column "n": missing value in a non-nullable column"#
        );
    }

    #[test]
    fn many_stripes_stream_in_bounded_batches() {
        let n = 20_000;
        let bytes = file_with(
            vec![
                (
                    "wide",
                    Arc::new(StringArray::from_iter_values(
                        (0..n).map(|i| format!("{i:0>200}")),
                    )) as ArrayRef,
                ),
                ("n", Arc::new(Int64Array::from_iter_values(0..n))),
            ],
            256 << 10,
        );
        let stripes = orc_rust::ArrowReaderBuilder::try_new(bytes::Bytes::from(bytes.clone()))
            .unwrap()
            .file_metadata()
            .stripe_metadatas()
            .len();
        assert!(stripes > 3, "{stripes}");
        let mut spec = spec(r#"[{"name":"n","type":"int64","nullable":false}]"#);
        spec.batch_rows = 300;
        spec.sum_columns = vec!["n".into()];
        let mut batches = 0;
        let stats = decode(&bytes[..], &spec, |batch| {
            assert!(batch.num_rows() <= 300, "{}", batch.num_rows());
            assert_eq!(batch.num_columns(), 1, "only the schema's column");
            batches += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(stats.rows, n as u64);
        assert!(batches >= n as usize / 300, "{batches}");
        assert_eq!(
            stats.sums["n"],
            SumValue::Int(i128::from(n - 1) * i128::from(n) / 2)
        );
    }

    #[test]
    fn no_column_of_the_schema_gives_null_rows_of_the_files_length() {
        let bytes = file(vec![(
            "other",
            Arc::new(Int64Array::from_iter_values(0..7)) as ArrayRef,
        )]);
        let mut spec = spec(r#"[{"name":"a","type":"string"}]"#);
        spec.batch_rows = 2;
        let (stats, file) = run(&bytes, &spec);
        assert_eq!(stats.rows, 7);
        assert!(file.rows.iter().all(|r| r == &["∅"]));
    }

    #[test]
    fn a_gzip_or_zstd_wrapped_file_is_read_through_its_wrapper() {
        let bytes = file(vec![
            ("b", Arc::new(StringArray::from(vec!["x", "y"])) as ArrayRef),
            ("a", Arc::new(Int64Array::from(vec![4, 5]))),
        ]);
        let mut spec = spec(r#"[{"name":"a","type":"int64"},{"name":"b","type":"string"}]"#);
        spec.sum_columns = vec!["a".into()];
        for (compression, wrapped) in [
            (Compression::Gzip, gzip(&bytes)),
            (Compression::Zstd, zstd(&bytes)),
        ] {
            spec.compression = compression;
            let (stats, file) = run(&wrapped, &spec);
            assert_eq!(file.rows, text_rows(&["4|x", "5|y"]), "{compression}");
            assert_eq!(stats.sums["a"], SumValue::Int(9));
            assert_eq!(stats.bytes_decoded, bytes.len() as u64);
        }
    }

    #[test]
    fn the_spool_is_bounded_by_max_decoded_bytes() {
        let bytes = file(vec![(
            "a",
            Arc::new(Int64Array::from_iter_values(0..1000)) as ArrayRef,
        )]);
        let mut spec = spec(r#"[{"name":"a","type":"int64"}]"#);
        spec.max_decoded_bytes = Some(bytes.len() as u64 - 1);
        assert!(matches!(fail(&bytes, &spec), ConvertError::TooLarge { .. }));
        spec.max_decoded_bytes = Some(bytes.len() as u64);
        assert_eq!(run(&bytes, &spec).0.rows, 1000);
    }

    #[test]
    fn truncated_or_foreign_files_are_errors() {
        let bytes = fixture("orders-zstd.orc");
        let spec = spec(
            r#"[{"name":"order_id","type":"int64","nullable":false},{"name":"customer","type":"string"}]"#,
        );
        for input in [
            &b""[..],
            b"ORC",
            ALL_TYPES_CSV.as_bytes(),
            &bytes[..bytes.len() - 1],
            &bytes[..bytes.len() / 2],
        ] {
            let err = fail(input, &spec);
            assert!(
                err.to_string().starts_with("not a valid ORC file: "),
                "{err}"
            );
        }
    }

    /// A known flaw of `orc-rust` 0.6.2: some corrupt files panic instead of failing (a
    /// compressed block that does not decompress is unwrapped in `Decompressor::read`,
    /// still so in 0.9.0; a file cut at its start overruns a buffer). The converter turns
    /// such a panic into an error naming the file as invalid (`convert::guarded`), so the
    /// object fails like any bad input and the other objects go on. (A corrupt RLE v2 run
    /// that loops forever is not caught: see the README's limits.)
    #[test]
    fn a_file_on_which_orc_rust_panics_fails_as_invalid() {
        let bytes = fixture("orders-zstd.orc");
        let spec = spec(r#"[{"name":"order_id","type":"int64"}]"#);
        // Only the guard writes this message: when orc-rust stops panicking here, the file
        // fails with its own error, this assertion fails, and the README's limits want a look.
        let err = fail(&bytes[3..], &spec).to_string();
        assert!(
            err.starts_with("not a valid file: its reader failed on it ("),
            "{err}"
        );
    }

    #[test]
    fn nested_columns_paths_and_policies() {
        let bytes = fixture("nested.orc");
        checks::nested_columns_round_trip(InputFormat::Orc, &bytes);
        checks::paths_read_the_values_there(InputFormat::Orc, &bytes);
        checks::json_columns(InputFormat::Orc, &bytes);
        checks::unknown_fields_by_policy(InputFormat::Orc, &bytes);
        checks::bad_values_by_policy(InputFormat::Orc, &bytes);
    }
}
