//! Helpers shared by the conversion tests: specs from column lists, running a
//! conversion and reading the Parquet file back as text.

use std::io::Write;

use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::SchemaRef;
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::{ConvertError, ConvertSpec, ConvertStats, CsvOptions, InputFormat, convert};
use crate::schema::{ColumnSpec, arrow_schema};

/// Columns of the shared test table, one of each type.
pub(super) const ALL_TYPES: &str = r#"[
    {"name": "id", "type": "int64", "nullable": false},
    {"name": "qty", "type": "int32"},
    {"name": "price", "type": "decimal(12,2)"},
    {"name": "ratio", "type": "float64"},
    {"name": "weight", "type": "float32"},
    {"name": "name", "type": "string"},
    {"name": "ok", "type": "bool"},
    {"name": "day", "type": "date"},
    {"name": "at", "type": "timestamp"}
]"#;

/// The shared test table as CSV.
pub(super) const ALL_TYPES_CSV: &str = "\
id,qty,price,ratio,weight,name,ok,day,at
1,10,0.10,0.5,1.5,\"Smith, John\",true,2024-01-02,2024-01-02T03:04:05Z
2,-3,0.20,,2.25,\"say \"\"hi\"\"\",false,2024-02-29,2024-01-02T03:04:05.123456+00:00
3,,-12.30,1e3,,\"two\nlines\",,,2024-01-02 03:04:05
";

/// The shared test table as JSON Lines.
pub(super) const ALL_TYPES_JSONL: &str = r#"{"id":1,"qty":10,"price":0.10,"ratio":0.5,"weight":1.5,"name":"Smith, John","ok":true,"day":"2024-01-02","at":"2024-01-02T03:04:05Z"}
{"id":2,"qty":-3,"price":"0.20","ratio":null,"weight":2.25,"name":"say \"hi\"","ok":false,"day":"2024-02-29","at":"2024-01-02T03:04:05.123456Z"}
{"id":3,"price":-12.30,"ratio":1000,"name":"two\nlines","at":"2024-01-02 03:04:05"}
"#;

/// The shared test table as read back from Parquet.
pub(super) fn all_types_rows() -> Vec<Vec<String>> {
    text_rows(&[
        "1|10|0.10|0.5|1.5|Smith, John|true|2024-01-02|2024-01-02T03:04:05Z",
        "2|-3|0.20|∅|2.25|say \"hi\"|false|2024-02-29|2024-01-02T03:04:05.123456Z",
        "3|∅|-12.30|1000.0|∅|two\nlines|∅|∅|2024-01-02T03:04:05Z",
    ])
}

/// Rows written as `|`-separated cells.
pub(super) fn text_rows(rows: &[&str]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|r| r.split('|').map(str::to_owned).collect())
        .collect()
}

pub(super) fn schema(columns: &str) -> SchemaRef {
    arrow_schema(&serde_json::from_str::<Vec<ColumnSpec>>(columns).unwrap())
}

/// A spec for default CSV with `columns` (JSON column specs).
pub(super) fn csv_spec(columns: &str) -> ConvertSpec {
    ConvertSpec::new(InputFormat::Csv(CsvOptions::default()), schema(columns))
}

/// A spec for JSON Lines with `columns` (JSON column specs).
pub(super) fn json_spec(columns: &str) -> ConvertSpec {
    ConvertSpec::new(InputFormat::JsonLines, schema(columns))
}

/// Converts `input`, which must succeed, and reads the Parquet file back.
pub(super) fn run(input: impl AsRef<[u8]>, spec: &ConvertSpec) -> (ConvertStats, Parquet) {
    let mut out = Vec::new();
    let stats = convert(input.as_ref(), spec, &mut out).unwrap();
    let parquet = read_parquet(out);
    assert_eq!(parquet.rows.len() as u64, stats.rows);
    assert_eq!(parquet.row_groups, stats.row_groups);
    assert_eq!(
        parquet.schema,
        spec.output_schema(),
        "the file has the spec's output schema"
    );
    (stats, parquet)
}

/// Converts `input`, which must fail.
pub(super) fn fail(input: impl AsRef<[u8]>, spec: &ConvertSpec) -> ConvertError {
    convert(input.as_ref(), spec, Vec::new()).unwrap_err()
}

/// Converts `input`, which must fail with a parse error, and returns its display.
pub(super) fn parse_error(input: impl AsRef<[u8]>, spec: &ConvertSpec) -> String {
    match fail(input, spec) {
        e @ ConvertError::Parse { .. } => e.to_string(),
        e => panic!("expected a parse error, got {e:?}"),
    }
}

/// A Parquet file read back.
#[derive(Debug)]
pub(super) struct Parquet {
    pub(super) schema: SchemaRef,
    pub(super) row_groups: usize,
    /// Every cell as text, NULL as "∅".
    pub(super) rows: Vec<Vec<String>>,
}

pub(super) fn read_parquet(file: Vec<u8>) -> Parquet {
    let builder = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(file)).unwrap();
    let schema = builder.schema().clone();
    let row_groups = builder.metadata().num_row_groups();
    let options = FormatOptions::default().with_null("∅");
    let mut rows = Vec::new();
    for batch in builder.build().unwrap() {
        let batch = batch.unwrap();
        let formatters: Vec<_> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for row in 0..batch.num_rows() {
            rows.push(
                formatters
                    .iter()
                    .map(|f| f.value(row).to_string())
                    .collect(),
            );
        }
    }
    Parquet {
        schema,
        row_groups,
        rows,
    }
}

/// A xorshift64 generator from `seed` (not zero): the tests' reproducible randomness.
pub(super) fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

pub(super) fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

pub(super) fn zstd(data: &[u8]) -> Vec<u8> {
    zstd::encode_all(data, 3).unwrap()
}
