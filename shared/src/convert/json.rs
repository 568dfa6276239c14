//! JSON Lines → record batches with arrow-json's push decoder, with line numbers.
//!
//! arrow-json reports no positions, so lines are fed to its decoder one at a time
//! (keeping the lines of the batch in progress, one batch at most): a line that is
//! not exactly one complete JSON value fails on the spot with its number, and when
//! turning a batch into columns fails (a value of the wrong type, a line that is not
//! an object), its lines are decoded again one by one to find the first bad one.

use std::io::BufRead;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_json::ReaderBuilder;
use arrow_json::reader::Decoder;
use arrow_schema::{ArrowError, Schema, SchemaRef};

use super::{Batches, ConvertError, ConvertSpec, arrow_message, null_violation, nullable};

/// Record batches decoded from JSON Lines text.
pub(super) struct JsonBatches<R> {
    reader: R,
    batch_rows: usize,
    /// The spec's schema.
    schema: SchemaRef,
    /// `schema` with all fields nullable: what batches are decoded against.
    decode_schema: SchemaRef,
    decoder: Decoder,
    /// The lines of the batch in progress, each ending with a newline.
    buf: Vec<u8>,
    /// Number and extent in `buf` of each line holding a row.
    rows: Vec<(u64, Range<usize>)>,
    /// Lines read so far.
    line: u64,
    end: bool,
}

impl<R: BufRead> JsonBatches<R> {
    /// Prepares to decode `reader`.
    pub(super) fn new(reader: R, spec: &ConvertSpec) -> Result<Self, ConvertError> {
        let decode_schema = nullable(&spec.schema);
        let decoder = decoder(&decode_schema, spec.batch_rows)
            .map_err(|e| ConvertError::invalid_spec(arrow_message(e)))?;
        Ok(Self {
            reader,
            batch_rows: spec.batch_rows,
            schema: spec.schema.clone(),
            decode_schema,
            decoder,
            buf: Vec::new(),
            rows: Vec::new(),
            line: 0,
            end: false,
        })
    }

    /// Feeds lines to the decoder until it holds a batch or the input ends.
    fn fill(&mut self) -> Result<(), ConvertError> {
        self.buf.clear();
        self.rows.clear();
        while !self.end && self.rows.len() < self.batch_rows {
            let start = self.buf.len();
            if self.reader.read_until(b'\n', &mut self.buf)? == 0 {
                self.end = true;
                break;
            }
            self.line += 1;
            if self.buf[start..].trim_ascii().is_empty() {
                self.buf.truncate(start);
                continue;
            }
            if self.buf.last() != Some(&b'\n') {
                self.buf.push(b'\n');
            }
            let text = &self.buf[start..];
            let before = self.decoder.len();
            let taken = self
                .decoder
                .decode(text)
                .map_err(|e| ConvertError::parse(Some(self.line), None, arrow_message(e)))?;
            if taken != text.len()
                || self.decoder.has_partial_record()
                || self.decoder.len() != before + 1
            {
                let message = "expected exactly one JSON value on the line";
                return Err(ConvertError::parse(Some(self.line), None, message));
            }
            self.rows.push((self.line, start..self.buf.len()));
        }
        Ok(())
    }

    /// Locates the first line of the batch that fails on its own, and in it the first
    /// column that fails on its own, to report `e` there.
    fn locate(&self, e: ArrowError) -> ConvertError {
        let Some((line, bytes, e)) = self.rows.iter().find_map(|(line, range)| {
            let bytes = &self.buf[range.clone()];
            Some((*line, bytes, decode_line(&self.decode_schema, bytes).err()?))
        }) else {
            return ConvertError::parse(None, None, arrow_message(e));
        };
        // A line that fails without any column is not an object at all.
        if decode_line(&Schema::empty(), bytes).is_err() {
            let message = format!("not a JSON object: {}", arrow_message(e));
            return ConvertError::parse(Some(line), None, message);
        }
        let column = self.decode_schema.fields().iter().find_map(|field| {
            let alone = Schema::new(vec![field.clone()]);
            Some((field.name(), decode_line(&alone, bytes).err()?))
        });
        match column {
            Some((name, e)) => {
                let message = arrow_message(e);
                // arrow-json prefixes some failures with "whilst decoding field 'NAME': "
                let prefix = format!("whilst decoding field '{name}': ");
                let message = message.strip_prefix(&prefix).unwrap_or(&message);
                ConvertError::parse(Some(line), Some(name), message)
            }
            None => ConvertError::parse(Some(line), None, arrow_message(e)),
        }
    }
}

impl<R: BufRead> Batches for JsonBatches<R> {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>, ConvertError> {
        self.fill()?;
        let batch = match self.decoder.flush() {
            Ok(Some(batch)) => batch,
            Ok(None) => return Ok(None),
            Err(e) => return Err(self.locate(e)),
        };
        if let Some((row, column)) = null_violation(&batch, &self.schema) {
            let line = self.rows.get(row).map(|(line, _)| *line);
            let name = self.schema.field(column).name();
            let message = "missing value in a non-nullable column";
            return Err(ConvertError::parse(line, Some(name), message));
        }
        Ok(Some(batch))
    }
}

/// An arrow-json decoder of objects with `schema`'s fields, `batch_rows` at a time.
fn decoder(schema: &Schema, batch_rows: usize) -> Result<Decoder, ArrowError> {
    ReaderBuilder::new(Arc::new(schema.clone()))
        .with_batch_size(batch_rows)
        .build_decoder()
}

/// Decodes one line against `schema`, for diagnosis.
fn decode_line(schema: &Schema, line: &[u8]) -> Result<(), ArrowError> {
    let mut decoder = decoder(schema, 1)?;
    decoder.decode(line)?;
    decoder.flush().map(drop)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{ConvertError, convert};

    const AB: &str =
        r#"[{"name":"a","type":"int32","nullable":false},{"name":"b","type":"decimal(12,2)"}]"#;

    #[test]
    fn blank_lines_unknown_keys_and_missing_keys() {
        let input =
            "\n{\"a\":1,\"b\":\"1.5\",\"extra\":[1,{}]}\r\n   \n{\"a\":2}\n{\"b\":null,\"a\":3}";
        let (stats, parquet) = run(input, &json_spec(AB));
        assert_eq!(parquet.rows, text_rows(&["1|1.50", "2|∅", "3|∅"]));
        assert_eq!(stats.rows, 3);
    }

    #[test]
    fn a_line_that_is_not_an_object() {
        let err = parse_error("{\"a\":1}\n[1,2]\n{\"a\":3}\n", &json_spec(AB));
        assert_eq!(err, "line 2: not a JSON object: expected { got [1, 2]");
    }

    #[test]
    fn a_value_of_the_wrong_type_names_line_and_column() {
        let mut spec = json_spec(AB);
        spec.batch_rows = 3;
        let lines: Vec<String> = (1..=8)
            .map(|i| format!("{{\"a\":{i},\"b\":{i}.5}}"))
            .collect();
        let mut input = lines.join("\n\n");
        input.push_str("\n{\"a\":9,\"b\":\"nine\"}\n");
        let err = parse_error(&input, &spec);
        assert_eq!(
            err,
            r#"line 16: column "b": Invalid decimal format: "nine""#
        );
        let err = parse_error("{\"a\":1}\n{\"b\":1,\"a\":\"x\"}\n", &spec);
        assert_eq!(err, r#"line 2: column "a": failed to parse "x" as Int32"#);
    }

    #[test]
    fn a_missing_non_nullable_value_names_line_and_column() {
        for input in ["{\"a\":1}\n{\"b\":1}\n", "{\"a\":1}\n{\"a\":null}\n"] {
            assert_eq!(
                parse_error(input, &json_spec(AB)),
                r#"line 2: column "a": missing value in a non-nullable column"#
            );
        }
    }

    #[test]
    fn each_line_must_hold_exactly_one_value() {
        for (input, line) in [
            ("{\"a\":1}\n{\"a\":2} {\"a\":3}\n", 2),
            ("{\"a\":1}\n{\"a\":\n2}\n", 2),
            ("{\"a\":1}\n{\"a\":2", 2),
        ] {
            assert_eq!(
                parse_error(input, &json_spec(AB)),
                format!("line {line}: expected exactly one JSON value on the line"),
                "{input:?}"
            );
        }
        let err = parse_error("{\"a\":1}\n{\"a\" 2}\n", &json_spec(AB));
        assert!(err.starts_with("line 2: "), "{err}");
    }

    #[test]
    fn invalid_utf8_is_a_parse_error() {
        let err = parse_error(b"{\"a\":1}\n{\"a\":2,\"b\":\"\xff\"}\n", &json_spec(AB));
        assert!(err.starts_with("line 2: "), "{err}");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for input in [
            &b"\0\0"[..],
            b"]]]",
            b"{{{{{{{{",
            b"\"",
            b"{\"a\":1e999999}",
            b"nul",
            b"\xef\xbb",
        ] {
            let err = convert(input, &json_spec(AB), Vec::new()).unwrap_err();
            assert!(
                matches!(err, ConvertError::Parse { line: Some(1), .. }),
                "{input:?}: {err:?}"
            );
        }
    }
}
