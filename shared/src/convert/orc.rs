//! ORC input: an ORC file (possibly wrapped whole in gzip or zstd) read stripe by stripe
//! by `orc-rust`, with only the top-level columns it reads read.
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
//! timestamp without zone (read as UTC) and `timestamp with local time zone` one in UTC,
//! `struct` a struct, `list` a list, `map` a map (of string keys to be read as one), and
//! `union` a union, which no type of the schema reads (its values are bad values). The
//! rows the footer counts must be the rows the stripes hold. The values of a field the
//! schema does not name are counted from the file's column statistics (the non-NULL
//! values of each column, nested ones included), without reading it; a file without
//! statistics has the field read to count them.

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
    use super::super::{ConvertSpec, InputFormat, SumValue};

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

    #[test]
    fn files_of_every_codec_written_by_pyarrow_read_exactly() {
        for codec in ["uncompressed", "zlib", "snappy", "lz4", "zstd"] {
            let bytes = checks::fixture(&format!("orders-{codec}.orc"));
            checks::orders(InputFormat::Orc, &bytes, codec);
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
        checks::a_file_that_breaks_the_contract(InputFormat::Orc, file);
        let doubles = file(vec![(
            "x",
            Arc::new(Float64Array::from(vec![1.0])) as ArrayRef,
        )]);
        assert_eq!(
            parse_error(&doubles, &spec(r#"[{"name":"x","type":"decimal(12,2)"}]"#)),
            r#"column "x": type Float64 in the file cannot be read as decimal(12,2)"#
        );
    }

    #[test]
    fn many_stripes_stream_in_bounded_batches() {
        let bytes = file_with(checks::wide_and_numbered(20_000), 256 << 10);
        let stripes = orc_rust::ArrowReaderBuilder::try_new(bytes::Bytes::from(bytes.clone()))
            .unwrap()
            .file_metadata()
            .stripe_metadatas()
            .len();
        assert!(stripes > 3, "{stripes}");
        checks::streams_in_bounded_batches(InputFormat::Orc, &bytes, 20_000);
    }

    #[test]
    fn no_column_of_the_schema_gives_null_rows_of_the_files_length() {
        let other = Arc::new(Int64Array::from_iter_values(0..7)) as ArrayRef;
        checks::no_schema_column_gives_null_rows(InputFormat::Orc, &file(vec![("other", other)]));
    }

    #[test]
    fn a_gzip_or_zstd_wrapped_file_is_read_through_its_wrapper() {
        let bytes = file(vec![
            ("b", Arc::new(StringArray::from(vec!["x", "y"])) as ArrayRef),
            ("a", Arc::new(Int64Array::from(vec![4, 5]))),
        ]);
        checks::read_through_wrappers(InputFormat::Orc, &bytes);
    }

    #[test]
    fn the_spool_is_bounded_by_max_decoded_bytes() {
        let a = Arc::new(Int64Array::from_iter_values(0..1000)) as ArrayRef;
        checks::the_spool_is_bounded(InputFormat::Orc, &file(vec![("a", a)]));
    }

    #[test]
    fn truncated_or_foreign_files_are_errors() {
        let bytes = checks::fixture("orders-zstd.orc");
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
    /// on which it loops forever is caught outside the converter, by the watchdog that
    /// abandons a conversion making no progress: `tidemark::watchdog`, tests/tests/poison.rs.)
    #[test]
    fn a_file_on_which_orc_rust_panics_fails_as_invalid() {
        let bytes = checks::fixture("orders-zstd.orc");
        let spec = spec(r#"[{"name":"order_id","type":"int64"}]"#);
        // Only the guard writes this message: when orc-rust stops panicking here, the file
        // fails with its own error, this assertion fails, and docs/pages/limitations.md wants a look.
        let err = fail(&bytes[3..], &spec).to_string();
        assert!(
            err.starts_with("not a valid file: its reader failed on it ("),
            "{err}"
        );
    }

    #[test]
    fn nested_columns_paths_and_policies() {
        let bytes = checks::fixture("nested.orc");
        checks::nested(InputFormat::Orc, &bytes);
    }

    #[test]
    fn unknown_fields_are_counted_from_the_files_statistics() {
        use super::super::arrays::Level;
        let builder = orc_rust::ArrowReaderBuilder::try_new(bytes::Bytes::from(checks::fixture(
            "nested.orc",
        )))
        .unwrap();
        let metadata = builder.file_metadata();
        let children = metadata.root_data_type().children();
        let count = |root: usize, levels: &[Level]| {
            let column = super::column_at(children[root].data_type(), levels)?;
            Some(metadata.column_file_statistics()[column.column_index()].number_of_values())
        };
        let field = |name: &str| Level::Field {
            name: name.into(),
            position: 0,
        };
        assert_eq!(count(1, &[field("extra")]), Some(1));
        assert_eq!(count(4, &[Level::Elements, field("note")]), Some(2));
        assert_eq!(count(5, &[]), Some(2), "the lists, not their elements");
        assert_eq!(count(5, &[Level::Elements]), Some(2));
        assert_eq!(count(3, &[Level::Values]), Some(3));
        assert_eq!(count(1, &[field("nope")]), None);
    }
}
