//! Specs shared by the converter targets: a small fixed schema, options taken from the
//! first bytes of the input, decompression bounded at 1 MiB.

use tidemark::convert::{
    BadRows, Compression, ConvertSpec, ConvertStats, CsvColumns, CsvOptions, EmptyStrings,
    InputFormat,
};
use tidemark::schema::{ColumnSpec, arrow_schema};

/// One column of every type.
const WIDE: &str = r#"[
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

/// Three columns, so that random records often have the right number of fields.
const NARROW: &str = r#"[
    {"name": "id", "type": "int32", "nullable": false},
    {"name": "name", "type": "string"},
    {"name": "price", "type": "decimal(5,2)"}
]"#;

/// A spec for `format`, its options and limits taken from `data`'s first three bytes;
/// returns it and the rest of `data`.
pub fn spec(data: &[u8], csv: bool) -> Option<(ConvertSpec, &[u8])> {
    let (&[a, b, c], rest) = data.split_first_chunk::<3>()?;
    let wide = a & 1 != 0;
    let columns: Vec<ColumnSpec> = serde_json::from_str(if wide { WIDE } else { NARROW }).ok()?;
    let format = if csv {
        InputFormat::Csv(CsvOptions {
            delimiter: [b',', b';', b'\t', b'|'][usize::from(a >> 1 & 3)],
            quote: if a & 8 != 0 { b'\'' } else { b'"' },
            escape: (a & 16 != 0).then_some(b'\\'),
            header: a & 32 != 0,
        })
    } else {
        InputFormat::JsonLines
    };
    let mut spec = ConvertSpec::new(format, arrow_schema(&columns));
    spec.sum_columns = if wide {
        vec!["id".into(), "qty".into(), "price".into(), "ratio".into()]
    } else {
        vec!["id".into(), "price".into()]
    };
    spec.empty_strings = if a & 64 != 0 {
        EmptyStrings::Empty
    } else {
        EmptyStrings::Null
    };
    spec.compression = if a & 128 != 0 {
        Compression::Gzip
    } else {
        Compression::None
    };
    spec.batch_rows = 1 + usize::from(b & 7);
    spec.batch_bytes = 1 + usize::from(b >> 3) * 8;
    if c < 128 {
        spec.max_record_bytes = 1 + usize::from(c);
    } else if csv && c >= 192 {
        // Columns matched by header name (only with a header; by position otherwise).
        spec.csv_columns = CsvColumns::ByName;
    }
    if c >= 128 && c & 32 != 0 {
        // Bad rows set aside, at most 0-7 of them.
        spec.bad_rows = BadRows::Reject {
            max: u64::from(c & 7),
        };
    }
    spec.max_decoded_bytes = Some(1 << 20);
    Some((spec, rest))
}

/// What two conversions of the same input must agree on: rows, sums, and the line and
/// error of each rejected row.
pub fn summary(stats: &ConvertStats) -> (u64, Vec<(String, String)>, Vec<(Option<u64>, String)>) {
    let sums = stats
        .sums
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect();
    let rejects = stats
        .rejects
        .iter()
        .map(|r| (r.line, r.error.clone()))
        .collect();
    (stats.rows, sums, rejects)
}

/// Converts `input` with `spec`, and decodes it again in one big batch: batches are an
/// implementation detail, so both succeed with the same rows and sums, or both fail.
pub fn check(input: &[u8], spec: &ConvertSpec) {
    let small = tidemark::convert::convert(input, spec, std::io::sink());
    let mut big = spec.clone();
    big.batch_rows = 8192;
    big.batch_bytes = 8 << 20;
    let large = tidemark::convert::count(input, &big);
    match (&small, &large) {
        (Ok(a), Ok(b)) => assert_eq!(summary(a), summary(b)),
        (Err(_), Err(_)) => {}
        _ => panic!("batches change the outcome: {small:?} vs {large:?}"),
    }
    if let Err(e) = &small {
        // Every error displays (and says where when it can).
        let _ = e.to_string();
    }
    if spec.bad_rows != BadRows::Fail {
        // Rejecting changes nothing for an input without bad rows, and an input with
        // none rejected converts the same under policy fail.
        let mut fail = big.clone();
        fail.bad_rows = BadRows::Fail;
        let strict = tidemark::convert::count(input, &fail);
        match (&strict, &large) {
            (Ok(a), Ok(b)) => assert_eq!(summary(a), summary(b)),
            (Ok(_), Err(_)) => panic!("rejecting fails a clean input: {large:?}"),
            (Err(_), Ok(b)) => assert!(!b.rejects.is_empty(), "{strict:?} vs {large:?}"),
            (Err(_), Err(_)) => {}
        }
    }
}
