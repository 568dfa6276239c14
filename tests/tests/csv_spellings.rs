//! CSV fields in the spellings that database and spreadsheet exports use — null values (`NA`,
//! `\N`, `NULL`), booleans (`Y`/`N`, `1`/`0`), decimal commas, timestamps in a strftime
//! format — read by the converter as pyarrow reads them with the same options, every value of
//! every row compared. pyarrow runs in `tests/readers/read_csv.py`, in the virtualenv
//! `.local/venv-readers` that `infra/test.sh` installs; a file that pyarrow refuses, the
//! converter refuses too, naming the line and column.

use std::path::PathBuf;
use std::process::Command;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Float32Type, Float64Type, Int32Type, Int64Type, TimestampMicrosecondType,
};
use arrow_array::{Array, Decimal128Array};
use arrow_schema::DataType;
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};
use tidemark::convert::{
    ConvertError, ConvertSpec, CsvOptions, CsvValues, EmptyStrings, InputFormat, convert,
};
use tidemark::schema::ColumnSpec;
use tidemark_tests::table_reader::reader_python;

/// One file: its columns and the spellings it is read with.
struct Case {
    name: &'static str,
    delimiter: u8,
    /// Column specs as a source's schema spells them (with `format`).
    columns: Value,
    values: CsvValues,
    empty_strings: EmptyStrings,
    /// For each column, the fields to draw its values from (unquoted text).
    fields: Vec<Vec<&'static str>>,
}

impl Case {
    fn names(&self) -> Vec<String> {
        let columns = self.columns.as_array().unwrap();
        columns
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_owned())
            .collect()
    }

    fn spec(&self) -> ConvertSpec {
        let columns: Vec<ColumnSpec> = serde_json::from_value(self.columns.clone()).unwrap();
        let options = CsvOptions {
            delimiter: self.delimiter,
            ..CsvOptions::default()
        };
        let mut spec = ConvertSpec::with_columns(InputFormat::Csv(options), &columns);
        spec.csv_values = self.values.clone();
        spec.empty_strings = self.empty_strings;
        spec.batch_rows = 64;
        spec
    }

    /// `rows` random rows of the case's fields, each field quoted now and then (and always
    /// when it holds the delimiter, a quote or a line break), with a header.
    fn csv(&self, rows: usize, seed: u64) -> String {
        let delimiter = char::from(self.delimiter);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut csv = self.names().join(&delimiter.to_string()) + "\n";
        for _ in 0..rows {
            let row: Vec<String> = self
                .fields
                .iter()
                .map(|fields| {
                    let field = fields[rng.random_range(0..fields.len())];
                    let special = field.contains([delimiter, '"', '\n', '\r']);
                    if special || rng.random_ratio(1, 6) {
                        format!("\"{}\"", field.replace('"', "\"\""))
                    } else {
                        field.to_owned()
                    }
                })
                .collect();
            csv += &row.join(&delimiter.to_string());
            csv += "\n";
        }
        csv
    }

    /// The options of `read_csv.py` for this case: pyarrow's `ConvertOptions` that say
    /// what the source's spellings say (null values, quoted ones too, in string columns too;
    /// boolean spellings; the decimal point; the columns' time formats).
    fn reader_options(&self) -> Value {
        let columns = self.columns.as_array().unwrap();
        let types: serde_json::Map<String, Value> = columns
            .iter()
            .map(|c| (c["name"].as_str().unwrap().to_owned(), c["type"].clone()))
            .collect();
        let formats: Vec<&Value> = columns.iter().filter_map(|c| c.get("format")).collect();
        let values = &self.values;
        json!({
            "delimiter": char::from(self.delimiter).to_string(),
            "column_types": types,
            "null_values": values.null_values,
            "true_values": values.true_values,
            "false_values": values.false_values,
            "decimal_point": if values.decimal_comma { "," } else { "." },
            "timestamp_parsers": (!formats.is_empty()).then_some(formats),
            "strings_can_be_null": true,
            "quoted_strings_can_be_null": true,
        })
    }
}

fn listed(spellings: &[&str]) -> Option<Vec<String>> {
    Some(spellings.iter().map(|s| s.to_string()).collect())
}

/// Semicolons between fields, decimal commas, every null value "" included, `Y`/`N` and
/// `1`/`0` booleans, timestamps as `%d/%m/%Y %H:%M:%S`.
fn european() -> Case {
    Case {
        name: "european",
        delimiter: b';',
        columns: json!([
            {"name": "id", "type": "int64"},
            {"name": "name", "type": "string"},
            {"name": "active", "type": "bool"},
            {"name": "price", "type": "decimal(12,2)"},
            {"name": "ratio", "type": "float64"},
            {"name": "weight", "type": "float32"},
            {"name": "day", "type": "date"},
            {"name": "at", "type": "timestamp", "format": "%d/%m/%Y %H:%M:%S"},
        ]),
        values: CsvValues {
            null_values: listed(&["NA", "\\N", "NULL", ""]),
            true_values: listed(&["Y", "1"]),
            false_values: listed(&["N", "0"]),
            decimal_comma: true,
        },
        empty_strings: EmptyStrings::Null,
        fields: vec![
            vec!["1", "-42", "9007199254740993", "NA", "\\N", "", "0"],
            vec![
                "Smith, John",
                "Zoë; Ünal",
                "say \"hi\"",
                "two\nlines",
                "NA",
                "na",
                "NA ",
                "NULL",
                "\\N",
                "",
                "n/a",
            ],
            vec!["Y", "N", "1", "0", "NA", ""],
            vec![
                "1,50", "-0,05", "12345,6", "0", "7", ",5", "-3,", "NA", "NULL", "", "1,5e2",
            ],
            vec![
                "0,5",
                "-1,25",
                "1,5e3",
                "3",
                "0,1",
                "1e-5",
                "123456,789",
                "NULL",
                "",
            ],
            vec!["2,25", "0,1", "-16777217", "3,4e38", "NA", ""],
            vec!["2024-01-02", "1999-12-31", "2024-02-29", "NA", ""],
            vec![
                "03/01/2024 10:20:30",
                "29/02/2024 23:59:59",
                "01/01/1970 00:00:00",
                "31/12/1899 12:00:00",
                "\\N",
                "",
            ],
        ],
    }
}

/// Commas between fields and a point for decimals; `NA` and `\N` are null values but "" is
/// not, so that an empty string field is "" (and no other column has an empty field, which
/// pyarrow would refuse); `true`/`1` and `false`/`0`; timestamps as `%Y%m%d %H%M%S`.
fn database() -> Case {
    Case {
        name: "database",
        delimiter: b',',
        columns: json!([
            {"name": "id", "type": "int32"},
            {"name": "label", "type": "string"},
            {"name": "ok", "type": "bool"},
            {"name": "amount", "type": "decimal(18,4)"},
            {"name": "score", "type": "float64"},
            {"name": "seen", "type": "timestamp", "format": "%Y%m%d %H%M%S"},
        ]),
        values: CsvValues {
            null_values: listed(&["NA", "\\N"]),
            true_values: listed(&["true", "1"]),
            false_values: listed(&["false", "0"]),
            decimal_comma: false,
        },
        empty_strings: EmptyStrings::Empty,
        fields: vec![
            vec!["1", "-2147483648", "2147483647", "NA", "\\N"],
            vec![
                "",
                "plain",
                "a,b",
                "\"quoted\"",
                "NA",
                "\\N",
                "\\n",
                "null",
                " ",
            ],
            vec!["true", "false", "1", "0", "NA"],
            vec!["1.5", "-0.0001", "12345678901234.5678", "0", "NA", "\\N"],
            vec!["0.1", "-2.5e-3", "1e300", "42", "NA"],
            vec![
                "20240102 030405",
                "19991231 235959",
                "20240229 120000",
                "NA",
                "\\N",
            ],
        ],
    }
}

/// The converter's Parquet file as `read_csv.py` prints pyarrow's reading.
fn parquet_values(file: Vec<u8>) -> serde_json::Map<String, Value> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(file)).unwrap();
    let schema = reader.schema().clone();
    let mut columns: Vec<Vec<Value>> = vec![Vec::new(); schema.fields().len()];
    for batch in reader.build().unwrap() {
        let batch = batch.unwrap();
        for (values, array) in columns.iter_mut().zip(batch.columns()) {
            for row in 0..array.len() {
                values.push(if array.is_null(row) {
                    Value::Null
                } else {
                    cell(array.as_ref(), row)
                });
            }
        }
    }
    schema
        .fields()
        .iter()
        .zip(columns)
        .map(|(f, values)| (f.name().clone(), Value::Array(values)))
        .collect()
}

/// One value of `array` in `read_csv.py`'s form (floats as numbers, compared by value).
fn cell(array: &dyn Array, row: usize) -> Value {
    match array.data_type() {
        DataType::Int64 => json!(array.as_primitive::<Int64Type>().value(row)),
        DataType::Int32 => json!(array.as_primitive::<Int32Type>().value(row)),
        DataType::Float64 => json!(array.as_primitive::<Float64Type>().value(row)),
        DataType::Float32 => json!(f64::from(array.as_primitive::<Float32Type>().value(row))),
        DataType::Utf8 => json!(array.as_string::<i32>().value(row)),
        DataType::Boolean => json!(array.as_boolean().value(row)),
        DataType::Date32 => json!(array.as_primitive::<Date32Type>().value(row)),
        DataType::Timestamp(..) => {
            json!(array.as_primitive::<TimestampMicrosecondType>().value(row))
        }
        DataType::Decimal128(..) => {
            let decimals = array.as_any().downcast_ref::<Decimal128Array>().unwrap();
            json!(decimals.value_as_string(row))
        }
        other => panic!("no comparison for {other}"),
    }
}

/// Whether our value equals pyarrow's: floats by value (pyarrow's printed as their repr).
fn same(ours: &Value, theirs: &Value) -> bool {
    match (ours, theirs) {
        (Value::Number(n), Value::String(repr)) if n.is_f64() => {
            repr.parse::<f64>().ok() == n.as_f64()
        }
        _ => ours == theirs,
    }
}

/// pyarrow's reading of `csv` with `options`: its columns, or its complaint.
fn pyarrow_reading(csv: &str, options: &Value) -> Result<serde_json::Map<String, Value>, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input.csv");
    std::fs::write(&path, csv).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("readers/read_csv.py");
    let out = Command::new(reader_python())
        .arg(script)
        .arg(&path)
        .arg(options.to_string())
        .output()
        .expect("run pyarrow's CSV reader");
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            stderr.contains("ArrowInvalid"),
            "the reader failed other than on the file: {stderr}"
        );
        return Err(stderr);
    }
    match serde_json::from_slice(&out.stdout).expect("the reader prints JSON") {
        Value::Object(columns) => Ok(columns),
        other => panic!("the reader printed {other}"),
    }
}

/// Converts `csv` as `case` says and compares every value with pyarrow's reading.
fn compare(case: &Case, csv: &str) -> usize {
    let spec = case.spec();
    let mut parquet = Vec::new();
    let stats = convert(csv.as_bytes(), &spec, &mut parquet)
        .unwrap_or_else(|e| panic!("{}: the converter refused the file: {e}\n{csv}", case.name));
    let ours = parquet_values(parquet);
    let theirs = pyarrow_reading(csv, &case.reader_options())
        .unwrap_or_else(|e| panic!("{}: pyarrow refused the file: {e}\n{csv}", case.name));
    let lines: Vec<&str> = csv.lines().collect();
    let mut compared = 0;
    for name in case.names() {
        let (ours, theirs) = (&ours[&name], &theirs[&name]);
        let (ours, theirs) = (ours.as_array().unwrap(), theirs.as_array().unwrap());
        assert_eq!(ours.len(), theirs.len(), "{}: rows of {name}", case.name);
        assert_eq!(ours.len() as u64, stats.rows);
        for (row, (a, b)) in ours.iter().zip(theirs).enumerate() {
            assert!(
                same(a, b),
                "{}: column {name}, row {}: we read {a}, pyarrow {b} (the file's line {} if no \
                 field before spans lines: {:?})",
                case.name,
                row + 1,
                row + 2,
                lines.get(row + 1)
            );
            compared += 1;
        }
    }
    compared
}

#[test]
fn every_value_reads_as_pyarrow_reads_it() {
    for case in [european(), database()] {
        let mut compared = 0;
        let mut nulls = 0;
        for seed in 0..4 {
            let csv = case.csv(300, seed);
            compared += compare(&case, &csv);
            nulls += csv.matches("NA").count();
        }
        let width = case.fields.len();
        assert_eq!(compared, 4 * 300 * width, "{}", case.name);
        assert!(nulls > 100, "{}: {nulls} null values written", case.name);
    }
}

/// A field that does not read under the spellings: pyarrow refuses the file, and so does the
/// converter, naming the line and column.
#[test]
fn what_pyarrow_refuses_the_converter_refuses_naming_line_and_column() {
    let case = european();
    let good = "1;x;Y;1,50;0,5;2,25;2024-01-02;03/01/2024 10:20:30";
    for (bad, column, why) in [
        (
            "1;x;Y;1.50;0,5;2,25;2024-01-02;03/01/2024 10:20:30",
            "price",
            r#"cannot parse "1.50" as decimal(12,2): the decimal point is a comma (decimal_point)"#,
        ),
        (
            "1;x;y;1,50;0,5;2,25;2024-01-02;03/01/2024 10:20:30",
            "active",
            r#"cannot parse "y" as bool"#,
        ),
        (
            "1;x;true;1,50;0,5;2,25;2024-01-02;03/01/2024 10:20:30",
            "active",
            r#"cannot parse "true" as bool"#,
        ),
        (
            "1;x;Y;1,50;1.000,5;2,25;2024-01-02;03/01/2024 10:20:30",
            "ratio",
            r#"cannot parse "1.000,5" as float64: the decimal point is a comma (decimal_point)"#,
        ),
        (
            "1;x;Y;1,50;0,5;2,25;2024-01-02;2024-01-03T10:20:30",
            "at",
            r#"cannot parse "2024-01-03T10:20:30" as timestamp with the format "%d/%m/%Y %H:%M:%S""#,
        ),
        (
            "na;x;Y;1,50;0,5;2,25;2024-01-02;03/01/2024 10:20:30",
            "id",
            r#"cannot parse "na" as int64"#,
        ),
    ] {
        let csv = format!("{}\n{good}\n{bad}\n", case.names().join(";"));
        assert!(
            pyarrow_reading(&csv, &case.reader_options()).is_err(),
            "pyarrow reads {bad:?}"
        );
        match convert(csv.as_bytes(), &case.spec(), Vec::new()) {
            Err(ConvertError::Parse {
                line,
                record: None,
                column: Some(named),
                message,
            }) => {
                assert_eq!((line, named.as_str()), (Some(3), column), "{bad:?}");
                assert!(message.starts_with(why), "{bad:?}: {message}");
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}
