//! CSV columns matched to the schema by header name ([`CsvColumns::ByName`]): the schema
//! contract for CSV.
//!
//! The header is read first, with csv-core (the parser under arrow-csv, with the same
//! dialect), and decides for this one file which of its columns feeds which schema column.
//! The file is then decoded by [`super`] against a schema in the file's own column
//! order — each column of the source's schema with its type, any other column as text that
//! is dropped afterwards — so its errors name the file's columns and lines as always; every
//! batch is then put in the schema's order, with NULLs for a nullable schema column the file
//! does not have.
//!
//! A column the schema requires (`nullable: false`) that the header lacks, and a column
//! named twice in the header, fail the object naming the column (line 1). Names are
//! compared exactly (case and surrounding spaces count).
//!
//! A column the header names and the schema does not follows
//! [`ConvertSpec::unknown_fields`]: under `Ignore` its values are dropped and counted (each
//! field neither empty nor a null value, per column name) in [`Batches::take_ignored`];
//! under `Fail` the object fails naming it (line 1), before any row is read; under `Rescue`
//! each row's value of it (neither empty nor a null value) goes to the rescued column, with
//! the reason "not in the schema", among the row's rescued values in the order of the
//! file's columns.

use std::io::{BufRead, BufReader, Cursor, Read};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, new_null_array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::CsvBatches;
use crate::convert::{
    Batches, ConvertError, ConvertSpec, CsvOptions, Ignored, UnknownFields, nullable, scalar_types,
};

/// Where each schema column comes from in this file.
struct Mapping {
    /// The spec to decode the file with: the file's columns, in its order.
    file_spec: ConvertSpec,
    /// For each column of the source's schema, its index among the file's columns.
    sources: Vec<Option<usize>>,
    /// The file's columns that the schema does not name.
    unknown: Vec<usize>,
}

/// The batches of the CSV input `reader` (with a header) whose columns are matched to
/// `spec`'s schema by name.
pub(in crate::convert) fn open<'a, R: BufRead + 'a>(
    reader: R,
    options: CsvOptions,
    spec: &ConvertSpec,
) -> Result<ByName<'a>, ConvertError> {
    let (mapping, reader) = map_header(reader, &options, spec)?;
    let types = scalar_types(&mapping.file_spec.schema, "CSV")?;
    let file = CsvBatches::new(reader, options, &mapping.file_spec, types)?
        .with_unknown(mapping.unknown.clone());
    Ok(ByName::new(Box::new(file), mapping, spec))
}

/// Reads the header record from `reader` (consuming it) and maps the file's columns to
/// `spec`'s schema. Returns the mapping and a reader that yields the header again followed
/// by the rest of the input, so the CSV decoder sees the file whole and counts its lines.
fn map_header<'a, R: BufRead + 'a>(
    mut reader: R,
    options: &CsvOptions,
    spec: &ConvertSpec,
) -> Result<(Mapping, impl BufRead + 'a), ConvertError> {
    let (raw, names) = read_header(&mut reader, options, spec.max_record_bytes)?;
    let mapping = match names {
        Some(names) => map(spec, &names)?,
        // An empty file has no rows, so nothing to match: zero rows, as by position.
        None => Mapping {
            file_spec: ConvertSpec {
                sum_columns: Vec::new(),
                ..spec.clone()
            },
            sources: (0..spec.schema.fields().len()).map(Some).collect(),
            unknown: Vec::new(),
        },
    };
    Ok((mapping, BufReader::new(Cursor::new(raw).chain(reader))))
}

/// The raw bytes of the first record of `reader` and its fields as text (`None`: the input
/// holds no record at all).
fn read_header<R: BufRead>(
    reader: &mut R,
    options: &CsvOptions,
    max_bytes: usize,
) -> Result<(Vec<u8>, Option<Vec<String>>), ConvertError> {
    let header_error = |message: String| ConvertError::parse(Some(1), None, message);
    let mut parser = csv_core::ReaderBuilder::new()
        .delimiter(options.delimiter)
        .quote(options.quote)
        .escape(options.escape)
        .double_quote(true)
        .build();
    let mut raw = Vec::new();
    let mut fields = vec![0u8; 4096];
    let mut ends = vec![0usize; 256];
    let (mut out, mut nends) = (0, 0);
    loop {
        let input = reader.fill_buf()?;
        let (result, nin, nout, nend) =
            parser.read_record(input, &mut fields[out..], &mut ends[nends..]);
        raw.extend_from_slice(&input[..nin]);
        reader.consume(nin);
        out += nout;
        nends += nend;
        if raw.len() > max_bytes {
            return Err(header_error(format!(
                "header: the record is longer than the limit of {max_bytes} bytes (max_record_bytes)"
            )));
        }
        match result {
            csv_core::ReadRecordResult::InputEmpty => {}
            csv_core::ReadRecordResult::OutputFull => fields.resize(fields.len() * 2, 0),
            csv_core::ReadRecordResult::OutputEndsFull => ends.resize(ends.len() * 2, 0),
            csv_core::ReadRecordResult::Record => break,
            csv_core::ReadRecordResult::End => return Ok((raw, None)),
        }
    }
    let mut names = Vec::with_capacity(nends);
    let mut start = 0;
    for &end in &ends[..nends] {
        let name = std::str::from_utf8(&fields[start..end])
            .map_err(|_| header_error("header: invalid UTF-8".into()))?;
        names.push(name.to_string());
        start = end;
    }
    Ok((raw, Some(names)))
}

fn map(spec: &ConvertSpec, names: &[String]) -> Result<Mapping, ConvertError> {
    let schema = &spec.schema;
    let mut file_fields = Vec::with_capacity(names.len());
    let mut unknown = Vec::new();
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            return Err(ConvertError::parse(
                Some(1),
                Some(name),
                "named twice in the header",
            ));
        }
        file_fields.push(match schema.field_with_name(name) {
            Ok(field) => field.clone(),
            // Not in the schema: read as text (any bytes decode), then counted or rescued,
            // and dropped.
            Err(_) => {
                unknown.push(i);
                Field::new(name, DataType::Utf8, true)
            }
        });
    }
    if spec.unknown_fields == UnknownFields::Fail
        && let Some((&first, others)) = unknown.split_first()
    {
        let others: Vec<_> = others.iter().map(|&i| format!("{:?}", names[i])).collect();
        let nor = match others.as_slice() {
            [] => String::new(),
            [other] => format!(", nor is {other}"),
            [all @ .., last] => format!(", nor are {} and {last}", all.join(", ")),
        };
        return Err(ConvertError::parse(
            Some(1),
            Some(&names[first]),
            format!("not in the schema{nor} (on_unknown_field: fail)"),
        ));
    }
    let mut sources = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let at = names.iter().position(|n| n == field.name());
        if at.is_none() && !field.is_nullable() {
            return Err(ConvertError::parse(
                Some(1),
                Some(field.name()),
                "missing from the header, and the source's schema requires it",
            ));
        }
        sources.push(at);
    }
    let mut file_spec = spec.clone();
    file_spec.schema = Arc::new(Schema::new(file_fields));
    // Sums are taken by the caller on the batches in the schema's order.
    file_spec.sum_columns = Vec::new();
    Ok(Mapping {
        file_spec,
        sources,
        unknown,
    })
}

/// The batches of a file decoded in its own column order, put in the schema's order (the
/// rescued column last, as decoded, when a policy rescues).
pub(in crate::convert) struct ByName<'a> {
    inner: Box<dyn Batches + 'a>,
    sources: Vec<Option<usize>>,
    schema: SchemaRef,
}

impl<'a> ByName<'a> {
    fn new(inner: Box<dyn Batches + 'a>, mapping: Mapping, spec: &ConvertSpec) -> Self {
        Self {
            inner,
            sources: mapping.sources,
            schema: nullable(&spec.decoded_schema()),
        }
    }
}

impl Batches for ByName<'_> {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>, ConvertError> {
        let Some(batch) = self.inner.next_batch()? else {
            return Ok(None);
        };
        let mut columns: Vec<ArrayRef> = self
            .sources
            .iter()
            .zip(self.schema.fields())
            .map(|(at, field)| match at {
                Some(i) => batch.column(*i).clone(),
                None => new_null_array(field.data_type(), batch.num_rows()),
            })
            .collect();
        if self.schema.fields().len() > self.sources.len() {
            // The rescued column, which the file's decoder gives last.
            columns.extend(batch.columns().last().cloned());
        }
        RecordBatch::try_new(self.schema.clone(), columns)
            .map(Some)
            .map_err(|e| ConvertError::parse(None, None, crate::convert::arrow_message(e)))
    }

    fn take_rejects(&mut self) -> Vec<crate::convert::Rejected> {
        self.inner.take_rejects()
    }

    fn take_ignored(&mut self) -> Ignored {
        self.inner.take_ignored()
    }
}

#[cfg(test)]
mod tests {
    use crate::convert::testutil::*;
    use crate::convert::{BadRows, BadValues, CsvColumns, EmptyStrings, UnknownFields, convert};

    const SCHEMA: &str = r#"[{"name":"id","type":"int64","nullable":false},
        {"name":"name","type":"string"},{"name":"qty","type":"int32"}]"#;

    fn spec() -> crate::convert::ConvertSpec {
        let mut spec = csv_spec(SCHEMA);
        spec.csv_columns = CsvColumns::ByName;
        spec.sum_columns = vec!["qty".into()];
        spec
    }

    fn error(csv: &str) -> String {
        convert(csv.as_bytes(), &spec(), Vec::new())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn columns_in_another_order_with_extras_and_a_missing_nullable_one() {
        let csv = "qty,extra,\"id\"\n3,x,1\n4,\"y,z\",2\n";
        let (stats, parquet) = run(csv, &spec());
        assert_eq!(stats.rows, 2);
        assert_eq!(stats.sums["qty"].to_string(), "7");
        assert_eq!(parquet.rows, text_rows(&["1|∅|3", "2|∅|4"]));
        assert_eq!(
            stats.ignored.values, 2,
            "the extra column's values are counted"
        );
    }

    /// Under `Ignore` (the default), each unknown column's values that are neither empty nor
    /// a null value are counted, in the rows that land.
    #[test]
    fn unknown_columns_ignored_are_counted_by_name() {
        let mut spec = spec();
        spec.csv_values.null_values = Some(vec!["NA".into()]);
        spec.empty_strings = EmptyStrings::Empty;
        spec.bad_rows = BadRows::Reject { max: 10 };
        let csv = "id,extra,qty,a.b\n1,x,3,\n2,NA,4,hi\n3,,5,\"yo\"\nx,lost,6,lost\n";
        let (stats, parquet) = run(csv, &spec);
        assert_eq!(parquet.rows, text_rows(&["1|∅|3", "2|∅|4", "3|∅|5"]));
        assert_eq!(stats.rejects.len(), 1);
        assert_eq!(stats.ignored.values, 3);
        let fields: Vec<_> = stats.ignored.fields.into_iter().collect();
        assert_eq!(
            fields,
            [("[\"a.b\"]".to_owned(), 2), ("extra".to_owned(), 1)]
        );
    }

    #[test]
    fn unknown_columns_fail_the_object_naming_them() {
        let mut spec = spec();
        spec.unknown_fields = UnknownFields::Fail;
        let err = |csv: &str| {
            convert(csv.as_bytes(), &spec, Vec::new())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("id,extra,qty\n1,x,2\n"),
            r#"line 1: column "extra": not in the schema (on_unknown_field: fail)"#
        );
        assert_eq!(
            err("x,id,y,z\n"),
            r#"line 1: column "x": not in the schema, nor are "y" and "z" (on_unknown_field: fail)"#
        );
        let (stats, _) = run("qty,id\n1,2\n", &spec);
        assert_eq!(
            stats.rows, 1,
            "a file with the schema's columns only converts"
        );
    }

    /// Under `Rescue`, each row's values of unknown columns go to the rescued column with
    /// its bad values, in the order of the file's columns.
    #[test]
    fn unknown_columns_rescued_with_bad_values_in_the_files_order() {
        let mut spec = spec();
        spec.unknown_fields = UnknownFields::Rescue;
        spec.bad_values = BadValues::Rescue;
        spec.csv_values.null_values = Some(vec!["NA".into()]);
        let csv = "extra,qty,id,a.b\nx,three,1,\n,4,2,\"y\"\"\"\nNA,,3,\n";
        let (stats, parquet) = run(csv, &spec);
        assert_eq!((stats.rows, stats.rescued_rows), (3, 2));
        assert!(stats.ignored.is_empty());
        let first = r#"{"fields":{"extra":"x","qty":"three"},"reasons":{"extra":"not in the schema","qty":"cannot parse \"three\" as int32"}}"#;
        let second =
            r#"{"fields":{"[\"a.b\"]":"y\""},"reasons":{"[\"a.b\"]":"not in the schema"}}"#;
        assert_eq!(
            parquet.rows,
            vec![
                vec!["1", "∅", "∅", first],
                vec!["2", "∅", "4", second],
                vec!["3", "∅", "∅", "∅"],
            ]
        );

        // Only bad values rescued: unknown columns are still counted, not kept.
        spec.unknown_fields = UnknownFields::Ignore;
        let (stats, parquet) = run(csv, &spec);
        assert_eq!(stats.ignored.values, 2);
        let first =
            r#"{"fields":{"qty":"three"},"reasons":{"qty":"cannot parse \"three\" as int32"}}"#;
        assert_eq!(parquet.rows[0][3], first);
        assert_eq!(parquet.rows[1][3], "∅");
    }

    #[test]
    fn by_position_an_extra_field_is_still_a_field_count_error() {
        let mut spec = spec();
        spec.csv_columns = CsvColumns::ByPosition;
        spec.unknown_fields = UnknownFields::Rescue;
        let e = convert(&b"id,name,qty\n1,x,2,extra\n"[..], &spec, Vec::new()).unwrap_err();
        assert_eq!(e.to_string(), "line 2: expected 3 fields, got more than 3");
    }

    #[test]
    fn by_position_is_the_default_and_ignores_names() {
        let mut spec = spec();
        spec.csv_columns = CsvColumns::ByPosition;
        let (_, parquet) = run("a,b,c\n1,x,2\n", &spec);
        assert_eq!(parquet.rows, text_rows(&["1|x|2"]));
    }

    #[test]
    fn a_required_column_missing_from_the_header_names_it() {
        assert_eq!(
            error("name,qty\nx,1\n"),
            r#"line 1: column "id": missing from the header, and the source's schema requires it"#
        );
    }

    #[test]
    fn a_column_named_twice_is_refused() {
        assert_eq!(
            error("id,qty,qty\n1,2,3\n"),
            r#"line 1: column "qty": named twice in the header"#
        );
    }

    #[test]
    fn later_errors_name_the_file_column_and_line() {
        assert_eq!(
            error("qty,id\n1,1\n2,x\n"),
            r#"line 3: column "id": cannot parse "x" as int64"#
        );
    }

    #[test]
    fn an_empty_file_and_a_header_only_file_have_no_rows() {
        for csv in ["", "\n\n", "id,name\n"] {
            let (stats, parquet) = run(csv, &spec());
            assert_eq!((stats.rows, parquet.rows.len()), (0, 0), "{csv:?}");
        }
    }

    #[test]
    fn a_header_longer_than_the_record_limit_is_refused() {
        let mut spec = spec();
        spec.max_record_bytes = 64;
        let csv = format!("id,{}\n1,2\n", "x".repeat(100));
        let e = convert(csv.as_bytes(), &spec, Vec::new()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 1: header: the record is longer than the limit of 64 bytes (max_record_bytes)"
        );
    }
}
