//! ORC input: an ORC file (possibly wrapped whole in gzip or zstd) read stripe by stripe
//! by `orc-rust`, with only the top-level columns it reads read.
//!
//! ORC keeps its footer at the end and is read by seeking, as Parquet is: the
//! decompressed input is spooled to an anonymous temporary file first, as
//! `convert/columnar/parquet.rs` says (local disk equal to the decompressed object, bounded by
//! [`ConvertSpec::max_decoded_bytes`]). The file is then read a stripe at a time: the
//! projected columns of one stripe are held in memory (compressed, as the file stores
//! them) and decoded [`ConvertSpec::batch_rows`] rows at a time, so memory is bounded by
//! the largest stripe's projected columns (64 MiB stripes by default in the reference
//! writers, before compression) and a batch, not by the file. Every codec of the format
//! is read (zlib, snappy, lz4, lzo, zstd).
//!
//! Columns are matched to the source's schema and widened as `convert/columnar/typed.rs` says
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
pub(in crate::convert) type OrcBatches = TypedBatches<ArrowReader<File>>;

/// The top-level fields of the ORC file `input` as its reader reads them (from the footer;
/// no stripe read).
pub(in crate::convert) fn fields(input: impl BufRead) -> Result<Fields, ConvertError> {
    let builder = ArrowReaderBuilder::try_new(spool(input)?)
        .map_err(|e| invalid(format!("not a valid ORC file: {e}")))?;
    Ok(fields_of(builder.file_metadata().root_data_type()))
}

/// The fields of the file's root struct, each nullable.
fn fields_of(root: &orc_rust::schema::RootDataType) -> Fields {
    root.children()
        .iter()
        .map(|c| Field::new(c.name(), c.data_type().to_arrow_data_type(), true))
        .collect()
}

/// Spools `input` and checks the file's footer and columns against the spec's schema.
pub(in crate::convert) fn batches(
    input: impl BufRead,
    spec: &ConvertSpec,
    types: &[FieldType],
) -> Result<OrcBatches, ConvertError> {
    let mut file = spool(input)?;
    let spooled = file.metadata().map_or(0, |m| m.len());
    let reopened = file.try_clone().map_err(ConvertError::Io)?;
    let builder = ArrowReaderBuilder::try_new(reopened)
        .map_err(|e| invalid(format!("not a valid ORC file: {e}")))?;
    let metadata = builder.file_metadata();
    inflated_within(&mut file, metadata, spooled, spec)?;
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
    let fields = fields_of(&root);
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

/// The stripes are inflated inside `orc-rust`, a compression chunk at a time, each into
/// memory whole (zlib and zstd chunks without a bound). So before it reads one, every
/// chunk of every stripe (its index, data and footer streams: chunks tile them, each a
/// 3-byte header and its bytes) is inflated here into nothing, counting: a chunk must not
/// inflate beyond the file's compression block size (the format's rule, so `orc-rust`'s
/// memory per chunk is bounded by it), and the spooled file and every chunk inflated count
/// against the limit together. It costs a second inflation of every stream, projected or
/// not. LZO chunks are not inflated here (counted at the block size, an upper bound only
/// `orc-rust` itself does not enforce for them). Each chunk moves the watchdog's counter.
fn inflated_within(
    file: &mut File,
    metadata: &orc_rust::reader::metadata::FileMetadata,
    spooled: u64,
    spec: &ConvertSpec,
) -> Result<(), ConvertError> {
    use orc_rust::compression::CompressionType;
    use std::io::{Read, Seek, SeekFrom};
    let (Some(limit), Some(compression)) = (spec.max_decoded_bytes, metadata.compression()) else {
        return Ok(());
    };
    // `orc-rust` says the block size only in its description: "<codec> (<n> byte max block
    // size)"; its default (256 KiB) when that changes.
    let block = compression
        .to_string()
        .split_once(" (")
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(256 << 10);
    let too_large = || ConvertError::TooLarge { limit };
    let corrupt = |what: String| invalid(format!("not a valid ORC file: {what}"));
    let mut total = spooled;
    let mut compressed = Vec::new();
    for stripe in metadata.stripe_metadatas() {
        let length = stripe
            .index_length()
            .saturating_add(stripe.data_length())
            .saturating_add(stripe.footer_length());
        file.seek(SeekFrom::Start(stripe.offset()))
            .map_err(ConvertError::Io)?;
        let mut region = std::io::BufReader::new(&mut *file).take(length);
        let mut at = 0;
        while at < length {
            let mut header = [0u8; 3];
            region
                .read_exact(&mut header)
                .map_err(|e| corrupt(format!("a stripe's compression chunk header: {e}")))?;
            let value =
                u32::from(header[0]) | u32::from(header[1]) << 8 | u32::from(header[2]) << 16;
            let (original, len) = (value & 1 == 1, u64::from(value >> 1));
            compressed.clear();
            (&mut region)
                .take(len)
                .read_to_end(&mut compressed)
                .map_err(ConvertError::Io)?;
            if (compressed.len() as u64) < len {
                return Err(corrupt("a compression chunk runs past its stripe".into()));
            }
            at += 3 + len;
            let inflated = if original {
                len
            } else {
                let cap = block + 1;
                let sink = &mut std::io::sink();
                let counted = match compression.compression_type() {
                    CompressionType::Zlib => std::io::copy(
                        &mut flate2::read::DeflateDecoder::new(&compressed[..]).take(cap),
                        sink,
                    ),
                    CompressionType::Zstd => zstd::stream::read::Decoder::new(&compressed[..])
                        .and_then(|d| std::io::copy(&mut d.take(cap), sink)),
                    CompressionType::Snappy => snap::raw::decompress_len(&compressed)
                        .map(|n| n as u64)
                        .map_err(std::io::Error::other),
                    CompressionType::Lz4 => {
                        lz4_flex::block::decompress(&compressed, block as usize)
                            .map(|d| d.len() as u64)
                            .map_err(std::io::Error::other)
                    }
                    CompressionType::Lzo => Ok(block),
                };
                counted
                    .map_err(|e| corrupt(format!("a compression chunk does not inflate: {e}")))?
            };
            if inflated > block {
                return Err(corrupt(format!(
                    "a compression chunk inflates beyond the file's block size of {block} bytes"
                )));
            }
            spec.progress.tick(inflated);
            total = total.saturating_add(inflated);
            if total > limit {
                return Err(too_large());
            }
        }
    }
    Ok(())
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

    /// The compression chunks of the stripes count against `max_decoded_bytes` as they
    /// inflate, with the spooled file: the zstd fixture fails at its own size (which bounded
    /// the spool alone before), and reads under a limit that holds what it inflates to.
    #[test]
    fn inflated_stripes_are_bounded_by_max_decoded_bytes() {
        for name in [
            "orders-zstd.orc",
            "orders-zlib.orc",
            "orders-snappy.orc",
            "orders-lz4.orc",
        ] {
            let bytes = checks::fixture(name);
            let mut spec = spec(r#"[{"name":"order_id","type":"int64","nullable":false}]"#);
            spec.max_decoded_bytes = Some(bytes.len() as u64);
            assert!(
                matches!(
                    fail(&bytes, &spec),
                    super::super::ConvertError::TooLarge { .. }
                ),
                "{name}"
            );
            spec.max_decoded_bytes = Some(100 * bytes.len() as u64);
            assert_eq!(run(&bytes, &spec).0.rows, 1000, "{name}");
        }
        // Uncompressed: nothing inflates, the spool alone counts.
        let bytes = checks::fixture("orders-uncompressed.orc");
        let mut spec = spec(r#"[{"name":"order_id","type":"int64","nullable":false}]"#);
        spec.max_decoded_bytes = Some(bytes.len() as u64);
        assert_eq!(run(&bytes, &spec).0.rows, 1000);
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
