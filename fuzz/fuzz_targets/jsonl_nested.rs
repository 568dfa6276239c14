//! The JSON Lines converter on arbitrary bytes into nested schemas (structs, arrays, maps,
//! `json` columns, path columns, time formats and zones), under the policies for unknown
//! fields, bad values, key case and bad rows taken from the first bytes; output to a sink,
//! decompression bounded: never a panic, never unbounded memory, and the same outcome, rows,
//! sums, rejected rows, rescued rows and ignored values in small batches as in one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tidemark::convert::{
    BadRows, BadValues, ConvertSpec, InputFormat, KeyMatch, Lineage, ObjectInfo, UnknownFields,
};

mod common;

/// The nested fixtures' schemas (`tests/fixtures/nested`), and one of every time format,
/// zone, map, nested array and quoted path key.
const SCHEMAS: [&str; 4] = [
    include_str!("../../tests/fixtures/nested/clickstream.schema.json"),
    include_str!("../../tests/fixtures/nested/cloudtrail.schema.json"),
    include_str!("../../tests/fixtures/nested/github.schema.json"),
    r#"[
        {"name": "n", "type": "int64", "nullable": false},
        {"name": "d", "type": "decimal(6,2)"},
        {"name": "s", "type": "struct<ok:bool,at:timestamp,`odd name`:array<int32>>"},
        {"name": "tags", "type": "map<string,int32>"},
        {"name": "grid", "type": "array<array<float64>>"},
        {"name": "deep", "type": "map<string,array<struct<x:date,y:float32>>>"},
        {"name": "j", "type": "json"},
        {"name": "ms", "type": "timestamp", "format": "epoch_millis"},
        {"name": "local", "type": "timestamp", "format": "%d/%m/%Y %H:%M", "timezone": "Europe/Paris"},
        {"name": "zoned", "type": "timestamp", "timezone": "America/New_York"},
        {"name": "day", "type": "date", "format": "epoch_seconds"},
        {"name": "at", "path": "s.at", "type": "timestamp"},
        {"name": "dotted", "path": "tags[\"a.b\"]", "type": "int64"},
        {"name": "cell", "path": "grid[1][0]", "type": "float64"},
        {"name": "first", "path": "deep.k[0]", "type": "json"}
    ]"#,
];

/// A spec from `data`'s first three bytes; returns it and the rest of `data`.
///
/// `a`: bits 0-1 the schema; 2-3 unknown fields ignored, refused or rescued; 4 bad values
/// rescued; 5 keys matched whatever their case; 6 lineage columns (row number, key); 7
/// required columns as declared (else every column nullable). `b`: rows (1-8) and bytes
/// (1-249) per batch. `c`: bit 0 bad rows rejected (at most bits 1-3 of them), bit 4 records
/// of at most 64 + 128 × (bits 5-7) bytes.
fn spec(data: &[u8]) -> Option<(ConvertSpec, &[u8])> {
    let (&[a, b, c], rest) = data.split_first_chunk::<3>()?;
    let mut columns = common::columns(SCHEMAS[usize::from(a & 3)]);
    if a & 128 == 0 {
        for c in &mut columns {
            c.nullable = true;
        }
    }
    let mut spec = ConvertSpec::with_columns(InputFormat::JsonLines, &columns);
    spec.sum_columns = common::summable(&columns);
    spec.unknown_fields = match a >> 2 & 3 {
        1 => UnknownFields::Fail,
        2 => UnknownFields::Rescue,
        _ => UnknownFields::Ignore,
    };
    if a & 16 != 0 {
        spec.bad_values = BadValues::Rescue;
    }
    if a & 32 != 0 {
        spec.json_keys = KeyMatch::CaseInsensitive;
    }
    if a & 64 != 0 {
        spec.lineage = vec![
            ("_row".into(), Lineage::RowNumber),
            ("_key".into(), Lineage::Key),
        ];
        spec.object = Some(ObjectInfo {
            key: "in/events.jsonl".into(),
            version_id: None,
            etag: "0".into(),
            last_modified_ms: 0,
        });
    }
    spec.batch_rows = 1 + usize::from(b & 7);
    spec.batch_bytes = 1 + usize::from(b >> 3) * 8;
    if c & 1 != 0 {
        spec.bad_rows = BadRows::Reject {
            max: u64::from(c >> 1 & 7),
        };
    }
    if c & 16 != 0 {
        spec.max_record_bytes = 64 + usize::from(c >> 5) * 128;
    }
    spec.max_decoded_bytes = Some(8 << 20);
    Some((spec, rest))
}

fuzz_target!(|data: &[u8]| {
    if let Some((spec, input)) = spec(data) {
        common::check_by(input, &spec, common::full_summary);
    }
});
