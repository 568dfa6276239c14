//! Specs shared by the converter targets: small fixed schemas, options taken from the
//! first bytes of the input, decompression bounded; and the check that batching changes
//! nothing.
#![allow(dead_code)]

use tidemark::convert::{
    BadRows, BadValues, Compression, ConvertSpec, ConvertStats, CsvColumns, CsvOptions,
    EmptyStrings, Ignored, InputFormat, UnknownFields,
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

/// The orders of the Avro and ORC fixtures (`tests/fixtures/avro_orc`).
const ORDERS: &str = r#"[
    {"name": "order_id", "type": "int64", "nullable": false},
    {"name": "customer", "type": "string"},
    {"name": "quantity", "type": "int32"},
    {"name": "amount", "type": "decimal(12,2)"},
    {"name": "ordered_at", "type": "timestamp"}
]"#;

/// The nested columns of `tests/fixtures/avro_orc/nested.orc` (struct, list, map, list of
/// structs, list of timestamps, JSON text), read into wider types.
const NESTED: &str = r#"[
    {"name": "id", "type": "int64", "nullable": false},
    {"name": "user", "type": "struct<age:int64,name:string,missing:string>"},
    {"name": "tags", "type": "array<string>"},
    {"name": "attrs", "type": "map<string,int64>"},
    {"name": "events", "type": "array<struct<kind:string,at:timestamp>>"},
    {"name": "moments", "type": "array<timestamp>"},
    {"name": "payload", "type": "json"}
]"#;

/// The same file read through paths (struct fields, list elements, map keys, steps that are
/// not there) and as JSON texts.
const PATHS: &str = r#"[
    {"name": "name", "path": "user.name", "type": "string", "nullable": false},
    {"name": "age", "path": "user.age", "type": "int32"},
    {"name": "t0", "path": "tags[0]", "type": "string"},
    {"name": "t5", "path": "tags[5]", "type": "string"},
    {"name": "k1", "path": "attrs.k1", "type": "int64"},
    {"name": "kind", "path": "events[0].kind", "type": "string"},
    {"name": "at", "path": "events[1].at", "type": "timestamp"},
    {"name": "nope", "path": "user.nope", "type": "string"},
    {"name": "deeper", "path": "tags[0].x", "type": "string"},
    {"name": "tags", "type": "json"},
    {"name": "first", "path": "events[0]", "type": "json"},
    {"name": "payload", "type": "json"}
]"#;

/// The typed CloudTrail records (`tests/fixtures/nested/cloudtrail.{avro,orc,parquet}`).
const CLOUDTRAIL: &str = include_str!("../../tests/fixtures/nested/cloudtrail-typed.schema.json");

/// Columns of a schema in the sources document's spelling.
pub fn columns(json: &str) -> Vec<ColumnSpec> {
    serde_json::from_str(json).expect("the schemas of the targets are valid")
}

/// A spec for a typed input (Parquet, Avro, ORC) taken from `data`'s first byte; returns it
/// and the rest of `data`, the file. Bits 0-1: the schema (orders, nested, paths, CloudTrail);
/// 2: required columns as declared (else every column nullable); 3-4: unknown fields
/// ignored, refused or rescued; 5: bad values rescued; 6-7: rows per batch (1, 7, 100, 8192).
pub fn typed_spec(format: InputFormat, data: &[u8]) -> Option<(ConvertSpec, &[u8])> {
    let (&a, rest) = data.split_first()?;
    let mut columns = columns([ORDERS, NESTED, PATHS, CLOUDTRAIL][usize::from(a & 3)]);
    if a & 4 == 0 {
        for c in &mut columns {
            c.nullable = true;
        }
    }
    let mut spec = ConvertSpec::with_columns(format, &columns);
    spec.sum_columns = summable(&columns);
    spec.unknown_fields = match a >> 3 & 3 {
        1 => UnknownFields::Fail,
        2 => UnknownFields::Rescue,
        _ => UnknownFields::Ignore,
    };
    if a & 32 != 0 {
        spec.bad_values = BadValues::Rescue;
    }
    spec.batch_rows = [1, 7, 100, 8192][usize::from(a >> 6)];
    spec.max_decoded_bytes = Some(8 << 20);
    Some((spec, rest))
}

/// The columns that can be summed, as the bench and the sources sum them.
pub fn summable(columns: &[ColumnSpec]) -> Vec<String> {
    columns
        .iter()
        .filter(|c| c.ty.is_summable())
        .map(|c| c.name.clone())
        .collect()
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

/// [`summary`], and what the nested policies count: rows with something rescued, and the
/// values of unknown fields ignored.
pub fn full_summary(
    stats: &ConvertStats,
) -> (
    (u64, Vec<(String, String)>, Vec<(Option<u64>, String)>),
    u64,
    Ignored,
) {
    (summary(stats), stats.rescued_rows, stats.ignored.clone())
}

/// Converts `input` with `spec`, and decodes it again in one big batch: batches are an
/// implementation detail, so both succeed with the same rows and sums, or both fail.
pub fn check(input: &[u8], spec: &ConvertSpec) {
    check_by(input, spec, summary);
}

/// Lets the panics the converter catches on purpose pass: those of the readers of Parquet,
/// Avro and ORC files (parquet-rs, arrow-avro, orc-rust, and what they call), which panic on
/// some corrupt files, inside `convert::guarded` (which makes each a parse error naming the
/// file as invalid). libfuzzer-sys's panic hook aborts at every panic, caught or not; this
/// one aborts (through it) at every other panic, so that a panic of tidemark's own code, even
/// under `guarded`, or of a reader called from anywhere else (inference), is still a crash.
/// Call it first in a target.
pub fn tolerate_caught_reader_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let abort = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if caught_reader_panic() {
                if show() {
                    eprintln!("reader panic, caught by the converter: {info}");
                }
                return;
            }
            abort(info);
        }));
    });
}

/// Whether the panic being raised comes from a reader of Parquet, Avro or ORC, called by
/// tidemark under `tidemark::convert::guarded`: of the frames inside tidemark's innermost one,
/// the outermost of a dependency is a reader's. Frames are told by their source files, as
/// inlined frames carry short names only.
fn caught_reader_panic() -> bool {
    const READERS: [&str; 3] = ["/orc-rust-", "/parquet-", "/arrow-avro-"];
    let trace = format!("{:?}", std::backtrace::Backtrace::force_capture());
    // Innermost first: `{ fn: "name", file: "path", line: n }`.
    let frames: Vec<&str> = trace.split("{ fn: ").skip(1).collect();
    let Some(ours) = frames.iter().position(|f| f.contains("/shared/src/")) else {
        return false;
    };
    let guarded = frames[ours..]
        .iter()
        .any(|f| f.contains("guarded") && f.contains("/shared/src/convert/mod.rs"));
    let called = frames[..ours]
        .iter()
        .rev()
        .find(|f| f.contains("/registry/src/"));
    guarded && called.is_some_and(|f| READERS.iter().any(|r| f.contains(r)))
}

/// Whether to print each input's outcome (`FUZZ_SHOW=1`, when running a target on a few
/// inputs to see what they do).
pub fn show() -> bool {
    static SHOW: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SHOW.get_or_init(|| std::env::var_os("FUZZ_SHOW").is_some())
}

/// [`check`], the two conversions agreeing on everything `summarize` gives.
pub fn check_by<S: PartialEq + std::fmt::Debug>(
    input: &[u8],
    spec: &ConvertSpec,
    summarize: fn(&ConvertStats) -> S,
) {
    let small = tidemark::convert::convert(input, spec, std::io::sink());
    if show() {
        eprintln!("{small:?}");
    }
    let mut big = spec.clone();
    big.batch_rows = 8192;
    big.batch_bytes = 8 << 20;
    let large = tidemark::convert::count(input, &big);
    match (&small, &large) {
        (Ok(a), Ok(b)) => assert_eq!(summarize(a), summarize(b)),
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
            (Ok(a), Ok(b)) => assert_eq!(summarize(a), summarize(b)),
            (Ok(_), Err(_)) => panic!("rejecting fails a clean input: {large:?}"),
            (Err(_), Ok(b)) => assert!(!b.rejects.is_empty(), "{strict:?} vs {large:?}"),
            (Err(_), Err(_)) => {}
        }
    }
}
