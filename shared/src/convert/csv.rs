//! CSV → record batches with arrow-csv's push decoder, with physical line numbers.
//!
//! arrow-csv's own error positions count records, not lines (blank lines and newlines
//! inside quotes are not counted), are 0-based counting the header for a bad value but
//! 1-based for a wrong field count or bad UTF-8, and are missing for decimals. So this
//! module feeds the decoder itself, keeping the bytes of the batch in progress (one
//! batch at most), and when a batch fails it re-decodes them one record at a time, and
//! the failing record one column at a time, to name the line, the column and the value.

use std::io::BufRead;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow_csv::ReaderBuilder;
use arrow_csv::reader::Decoder;
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};

use super::{
    Batches, ConvertError, ConvertSpec, CsvOptions, EmptyStrings, arrow_message, null_violation,
    nullable,
};
use crate::schema::ColumnType;

/// Record batches decoded from CSV text.
pub(super) struct CsvBatches<R> {
    reader: R,
    options: CsvOptions,
    empty_strings: EmptyStrings,
    /// The spec's schema and its column types.
    schema: SchemaRef,
    types: Vec<ColumnType>,
    /// `schema` with all fields nullable: what batches are decoded against.
    decode_schema: SchemaRef,
    /// All fields nullable text: decodes any record with the right number of fields.
    text_schema: SchemaRef,
    decoder: Decoder,
    /// Bytes of the records of the batch in progress (or of the header).
    raw: Vec<u8>,
    /// Newlines before `raw`.
    line: u64,
}

impl<R: BufRead> CsvBatches<R> {
    /// Prepares to decode `reader`, skipping its header if `options` say it has one.
    pub(super) fn new(
        reader: R,
        options: CsvOptions,
        spec: &ConvertSpec,
        types: Vec<ColumnType>,
    ) -> Result<Self, ConvertError> {
        let decode_schema = nullable(&spec.schema);
        let text_fields: Vec<_> = spec
            .schema
            .fields()
            .iter()
            .map(|f| Field::new(f.name(), DataType::Utf8, true))
            .collect();
        let mut batches = Self {
            reader,
            options,
            empty_strings: spec.empty_strings,
            schema: spec.schema.clone(),
            types,
            decoder: builder(&options, decode_schema.clone())
                .with_batch_size(spec.batch_rows)
                .build_decoder(),
            decode_schema,
            text_schema: Arc::new(Schema::new(text_fields)),
            raw: Vec::new(),
            line: 0,
        };
        if options.header {
            let mut header = batches.single(batches.text_schema.clone());
            fill(&mut batches.reader, &mut batches.raw, &mut header)
                .map_err(|e| batches.field_count_error(0, "header: ", e))?;
        }
        Ok(batches)
    }

    /// A decoder of one record against `schema`.
    fn single(&self, schema: SchemaRef) -> Decoder {
        builder(&self.options, schema)
            .with_batch_size(1)
            .build_decoder()
    }

    /// The 1-based physical line where the record at `offset` in `raw` starts.
    fn record_line(&self, offset: usize) -> u64 {
        let blank = self.raw[offset..]
            .iter()
            .take_while(|b| matches!(b, b'\r' | b'\n'))
            .count();
        self.line + newlines(&self.raw[..offset + blank]) + 1
    }

    /// Reads `e` as arrow-csv's "incorrect number of fields" complaint about the record
    /// at `offset` of `raw`.
    fn field_count_error(&self, offset: usize, prefix: &str, e: ArrowError) -> ConvertError {
        let line = Some(self.record_line(offset));
        let message = match e {
            ArrowError::IoError(_, e) => return e.into(),
            e => arrow_message(e),
        };
        // arrow-csv: "incorrect number of fields for line L, expected N got M"
        let message = match message.split_once(" got ") {
            Some((_, got)) if message.starts_with("incorrect number of fields") => {
                format!("expected {} fields, got {got}", self.schema.fields().len())
            }
            _ => message,
        };
        ConvertError::parse(line, None, format!("{prefix}{message}"))
    }

    /// Replaces NULLs in text columns with "" if the spec asks for it.
    fn fill_empty_strings(&self, batch: RecordBatch) -> Result<RecordBatch, ConvertError> {
        if self.empty_strings == EmptyStrings::Null {
            return Ok(batch);
        }
        let columns = batch
            .columns()
            .iter()
            .map(|column| match column.as_string_opt::<i32>() {
                Some(text) if text.null_count() > 0 => Arc::new(
                    text.iter()
                        .map(|v| Some(v.unwrap_or_default()))
                        .collect::<StringArray>(),
                ) as ArrayRef,
                _ => column.clone(),
            })
            .collect();
        RecordBatch::try_new(batch.schema(), columns)
            .map_err(|e| ConvertError::parse(None, None, arrow_message(e)))
    }

    /// Finds the first record in `raw` that does not decode and says where and why;
    /// `fallback` if they all do.
    fn diagnose(&self, fallback: ConvertError) -> ConvertError {
        let mut offset = 0;
        while offset < self.raw.len() {
            let line = self.record_line(offset);
            let rest = &self.raw[offset..];
            let mut decoder = self.single(self.text_schema.clone());
            let span = match feed(&mut decoder, rest) {
                Ok(span) => span,
                Err(e) => return self.field_count_error(offset, "", e),
            };
            let text = match decoder.flush() {
                Ok(Some(text)) if span > 0 => text,
                Ok(_) => break,
                Err(e) => return self.utf8_error(line, e),
            };
            let record = &rest[..span];
            let mut typed = self.single(self.decode_schema.clone());
            let parses = feed(&mut typed, record).and_then(|_| typed.flush()).is_ok();
            if let Some(e) = self.check_fields(line, record, &text, parses) {
                return e;
            }
            offset += span;
        }
        fallback
    }

    /// Reads `e` as arrow-csv's invalid UTF-8 complaint about the record at `line`.
    fn utf8_error(&self, line: u64, e: ArrowError) -> ConvertError {
        let message = arrow_message(e);
        if !message.contains("UTF-8") {
            return ConvertError::parse(Some(line), None, message);
        }
        // arrow-csv: "Encountered invalid UTF-8 data for line L and field F", F 1-based
        let column = message
            .rsplit_once("field ")
            .and_then(|(_, field)| field.parse::<usize>().ok()?.checked_sub(1))
            .and_then(|index| self.schema.fields().get(index));
        ConvertError::parse(
            Some(line),
            column.map(|f| f.name().as_str()),
            "invalid UTF-8",
        )
    }

    /// The first field of `record` (decoded as `text`) that does not fit its column;
    /// values are parsed one by one only if the whole record does not `parse`.
    fn check_fields(
        &self,
        line: u64,
        record: &[u8],
        text: &RecordBatch,
        parses: bool,
    ) -> Option<ConvertError> {
        let fields = self.schema.fields().iter().zip(&self.types);
        for (index, (field, ty)) in fields.enumerate() {
            let value = text.column(index).as_string_opt::<i32>()?;
            let error =
                |message| Some(ConvertError::parse(Some(line), Some(field.name()), message));
            if value.is_null(0) {
                let kept = *ty == ColumnType::String && self.empty_strings == EmptyStrings::Empty;
                if !field.is_nullable() && !kept {
                    return error("empty value in a non-nullable column".to_owned());
                }
            } else if !parses && *ty != ColumnType::String {
                let mut typed = self.text_schema.fields().to_vec();
                typed[index] = self.decode_schema.fields()[index].clone();
                let mut decoder = self.single(Arc::new(Schema::new(typed)));
                if feed(&mut decoder, record)
                    .and_then(|_| decoder.flush())
                    .is_err()
                {
                    return error(format!("cannot parse {:?} as {ty}", value.value(0)));
                }
            }
        }
        None
    }
}

impl<R: BufRead> Batches for CsvBatches<R> {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>, ConvertError> {
        self.line += newlines(&self.raw);
        self.raw.clear();
        let decoded = fill(&mut self.reader, &mut self.raw, &mut self.decoder)
            .and_then(|()| self.decoder.flush());
        let batch = match decoded {
            Ok(Some(batch)) => self.fill_empty_strings(batch)?,
            Ok(None) => return Ok(None),
            Err(ArrowError::IoError(_, e)) => return Err(e.into()),
            Err(e) => {
                let fallback = ConvertError::parse(None, None, arrow_message(e));
                return Err(self.diagnose(fallback));
            }
        };
        if let Some((_, column)) = null_violation(&batch, &self.schema) {
            let name = self.schema.field(column).name();
            let fallback =
                ConvertError::parse(None, Some(name), "missing value in a non-nullable column");
            return Err(self.diagnose(fallback));
        }
        Ok(Some(batch))
    }
}

/// An arrow-csv reader builder for `options`, without header (the header is skipped
/// by [`CsvBatches::new`] so that its lines are counted).
fn builder(options: &CsvOptions, schema: SchemaRef) -> ReaderBuilder {
    let builder = ReaderBuilder::new(schema)
        .with_header(false)
        .with_delimiter(options.delimiter)
        .with_quote(options.quote);
    match options.escape {
        Some(escape) => builder.with_escape(escape),
        None => builder,
    }
}

/// Feeds `decoder` from `reader`, keeping the bytes it takes in `raw`, until it has a
/// full batch or the input ends.
fn fill(
    reader: &mut impl BufRead,
    raw: &mut Vec<u8>,
    decoder: &mut Decoder,
) -> Result<(), ArrowError> {
    loop {
        let buf = reader.fill_buf()?;
        let end = buf.is_empty();
        let result = decoder.decode(buf);
        let taken = *result.as_ref().unwrap_or(&buf.len());
        raw.extend_from_slice(&buf[..taken]);
        reader.consume(taken);
        result?;
        if end || decoder.capacity() == 0 {
            return Ok(());
        }
    }
}

/// Feeds `bytes`, which end at a record boundary or at the end of the input, to a
/// one-record decoder; returns how many bytes its record spans.
fn feed(decoder: &mut Decoder, bytes: &[u8]) -> Result<usize, ArrowError> {
    let span = decoder.decode(bytes)?;
    if decoder.capacity() != 0 {
        decoder.decode(&[])?;
    }
    Ok(span)
}

fn newlines(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|&&b| b == b'\n').count() as u64
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{ConvertError, InputFormat, convert};
    use super::*;

    const ABC: &str = r#"[{"name":"a","type":"int32"},{"name":"b","type":"string"},{"name":"c","type":"decimal(12,2)"}]"#;

    fn with_options(options: CsvOptions) -> ConvertSpec {
        let mut spec = csv_spec(ABC);
        spec.format = InputFormat::Csv(options);
        spec
    }

    #[test]
    fn other_delimiters_quotes_and_escapes() {
        let expected = text_rows(&["1|x;y, \"z\"|1.50", "∅|two\nlines|∅"]);
        for (delimiter, input) in [
            (b';', "a;b;c\n1;\"x;y, \"\"z\"\"\";1.50\n;\"two\nlines\";\n"),
            (b'|', "a|b|c\n1|\"x;y, \"\"z\"\"\"|1.50\n|\"two\nlines\"|\n"),
        ] {
            let options = CsvOptions {
                delimiter,
                ..CsvOptions::default()
            };
            assert_eq!(run(input, &with_options(options)).1.rows, expected);
        }
        let options = CsvOptions {
            quote: b'\'',
            escape: Some(b'\\'),
            header: false,
            ..CsvOptions::default()
        };
        let (_, parquet) = run(
            "1,'x;y, \\\"z\\\"',1.50\n,'two\nlines',\n",
            &with_options(options),
        );
        assert_eq!(parquet.rows, expected);
    }

    #[test]
    fn crlf_and_a_missing_final_newline() {
        let (_, parquet) = run("a,b,c\r\n1,x,1\r\n2,y,2", &csv_spec(ABC));
        assert_eq!(parquet.rows, text_rows(&["1|x|1.00", "2|y|2.00"]));
    }

    #[test]
    fn wrong_field_counts_name_their_line() {
        let spec = csv_spec(ABC);
        let few = parse_error("a,b,c\n1,x,1\n2,y,2\n3,z\n", &spec);
        assert_eq!(few, "line 4: expected 3 fields, got 2");
        let many = parse_error("a,b,c\n1,x,1\n2,y,2\n3,z,3,4\n", &spec);
        assert_eq!(many, "line 4: expected 3 fields, got more than 3");
        let header = parse_error("a,b\n1,x,1\n", &spec);
        assert_eq!(header, "line 1: header: expected 3 fields, got 2");
    }

    #[test]
    fn bad_values_name_their_line_column_and_value() {
        let spec = csv_spec(ABC);
        assert_eq!(
            parse_error("a,b,c\n1,x,1\nabc,y,2\n", &spec),
            r#"line 3: column "a": cannot parse "abc" as int32"#
        );
        assert_eq!(
            parse_error("a,b,c\n1,x,1\n2,y,2\n3,z,3\n4,w,abc\n", &spec),
            r#"line 5: column "c": cannot parse "abc" as decimal(12,2)"#
        );
        assert_eq!(
            parse_error("a,b,c\n1,x,1\n1,x,12345678901.5\n", &spec),
            r#"line 3: column "c": cannot parse "12345678901.5" as decimal(12,2)"#,
            "more than 12 digits"
        );
        let (_, parquet) = run("a,b,c\n1,x,1.005\n1,x,-1.004\n", &spec);
        assert_eq!(
            parquet.rows,
            text_rows(&["1|x|1.01", "1|x|-1.00"]),
            "extra digits round (arrow-cast)"
        );
        let dated = csv_spec(r#"[{"name":"d","type":"date"},{"name":"t","type":"timestamp"}]"#);
        assert_eq!(
            parse_error(
                "d,t\n2024-01-02,2024-01-02T03:04:05Z\n2024-02-30,2024-01-02T03:04:05Z\n",
                &dated
            ),
            r#"line 3: column "d": cannot parse "2024-02-30" as date"#
        );
        assert_eq!(
            parse_error("d,t\n2024-01-02,yesterday\n", &dated),
            r#"line 2: column "t": cannot parse "yesterday" as timestamp"#
        );
    }

    #[test]
    fn line_numbers_are_physical_lines_across_batches() {
        let mut spec = csv_spec(ABC);
        spec.batch_rows = 2;
        // blank lines, quoted newlines and CRLF all move the line number
        let input = "a,b,c\r\n\r\n1,\"x\ny\",1\r\n2,y,2\n\n3,\"p\nq\nr\",3\n4,z,4\n5,z,five\n";
        assert_eq!(
            parse_error(input, &spec),
            r#"line 11: column "c": cannot parse "five" as decimal(12,2)"#
        );
        let input = "1,x,1\n2,y,2\n3,z,3\n\n4,w\n";
        spec.format = InputFormat::Csv(CsvOptions {
            header: false,
            ..CsvOptions::default()
        });
        assert_eq!(
            parse_error(input, &spec),
            "line 5: expected 3 fields, got 2"
        );
    }

    #[test]
    fn invalid_utf8_names_its_column() {
        let err = parse_error(b"a,b,c\n1,x,1\n2,\xffy,2\n", &csv_spec(ABC));
        assert_eq!(err, r#"line 3: column "b": invalid UTF-8"#);
    }

    #[test]
    fn empty_fields_and_nullability() {
        let columns = r#"[{"name":"a","type":"int32","nullable":false},{"name":"b","type":"string","nullable":false},{"name":"c","type":"string"}]"#;
        let mut spec = csv_spec(columns);
        let input = "a,b,c\n1,x,\n2,,\"\"\n";
        assert_eq!(
            parse_error(input, &spec),
            r#"line 3: column "b": empty value in a non-nullable column"#
        );
        assert_eq!(
            parse_error("a,b,c\n1,x,y\n,x,y\n", &spec),
            r#"line 3: column "a": empty value in a non-nullable column"#
        );

        spec.empty_strings = EmptyStrings::Empty;
        let (_, parquet) = run(input, &spec);
        assert_eq!(parquet.rows, text_rows(&["1|x|", "2||"]));
        assert_eq!(
            parse_error("a,b,c\n1,x,y\n,x,y\n", &spec),
            r#"line 3: column "a": empty value in a non-nullable column"#,
            "non-string columns are NULL when empty whatever the setting"
        );

        let (_, parquet) = run("a,b,c\n1,x,\n", &csv_spec(ABC));
        assert_eq!(parquet.rows, text_rows(&["1|x|∅"]));
        let mut spec = csv_spec(ABC);
        spec.empty_strings = EmptyStrings::Empty;
        assert_eq!(run("a,b,c\n,,\n", &spec).1.rows, text_rows(&["∅||∅"]));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for input in [
            &b"a,b,c\n\"\n"[..],
            b"\0\0\0",
            b"a,b,c\n\xff\xfe,\x00,\"\"\"",
            b"\n\n\n",
            b"\"a\"b\"c,,",
        ] {
            if let Err(e) = convert(input, &csv_spec(ABC), Vec::new()) {
                assert!(matches!(e, ConvertError::Parse { .. }), "{e:?}");
            }
        }
    }
}
