//! Schema inference (`tidemark::infer`) on an arbitrary sample, as the CLI's `infer` runs it:
//! the format from the first byte (CSV with `,` `;` or tab, JSON Lines, Parquet, Avro, ORC),
//! the rest the sample. Must hold: no panic; every proposed column reads back as itself from
//! the sources document's JSON (names, nested types, formats); and, the proposal loaded as a
//! source of a sources document, the converter converts the sample or fails with an error,
//! never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tidemark::convert::{CsvOptions, InputFormat};
use tidemark::infer::{
    Json, JsonShape, SeenColumn, TextTable, csv_records, json_columns, typed_columns,
};
use tidemark::schema::ColumnSpec;

mod common;

/// The proposal for a file with types of its own: its columns as the converter reads them.
fn typed(data: &[u8], format: InputFormat, notes: &mut Vec<String>) -> Option<Vec<SeenColumn>> {
    let progress = tidemark::watchdog::Progress::default();
    typed_columns(|| Ok(data), "sample", format, &progress, notes).ok()
}

/// The CSV proposal: the records of the sample, the first one a header when `header` (names
/// made unique as the CLI makes them), every record as wide as the first.
fn csv(data: &[u8], delimiter: u8, header: bool, partial: bool) -> Option<Vec<SeenColumn>> {
    let records = csv_records(data, delimiter, b'"', partial).ok()?;
    let first = records.first()?;
    let names: Vec<String> = if header {
        let mut names: Vec<String> = Vec::new();
        for (i, field) in first.iter().enumerate() {
            let base = match field.trim() {
                "" => format!("column_{}", i + 1),
                name => name.to_string(),
            };
            let mut name = base.clone();
            let mut n = 2;
            while names.contains(&name) {
                name = format!("{base}_{n}");
                n += 1;
            }
            names.push(name);
        }
        names
    } else {
        (1..=first.len()).map(|i| format!("column_{i}")).collect()
    };
    let width = first.len();
    let mut table = TextTable::new(names);
    for record in &records[usize::from(header)..] {
        if record.len() != width {
            return None;
        }
        table.add_row(record.iter().map(|f| Some(f.as_str())));
    }
    Some(table.columns())
}

/// The JSON Lines proposal: one object per non-blank line (the last line dropped when the
/// sample is `partial`).
fn jsonl(data: &[u8], partial: bool) -> Option<Vec<SeenColumn>> {
    let text = std::str::from_utf8(data).ok()?;
    let mut lines: Vec<&str> = text.split('\n').collect();
    if partial {
        lines.pop();
    }
    let mut records = JsonShape::default();
    for line in lines {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let value = Json::parse(line).ok()?;
        if !matches!(value, Json::Object(_)) {
            return None;
        }
        records.add(&value);
    }
    (records.objects() > 0).then(|| json_columns(&records))
}

fuzz_target!(|data: &[u8]| {
    // The readers' panics the converter catches pass; those inference meets are crashes.
    common::tolerate_caught_reader_panics();
    let Some((&a, sample)) = data.split_first() else {
        return;
    };
    let partial = a & 8 != 0;
    let header = a & 16 != 0;
    let mut notes = Vec::new();
    let (format, name, proposal) = match a & 7 {
        n @ 0..=2 => {
            let delimiter = [b',', b';', b'\t'][usize::from(n)];
            let options = CsvOptions {
                delimiter,
                quote: b'"',
                escape: None,
                header,
            };
            (
                InputFormat::Csv(options),
                "csv",
                csv(sample, delimiter, header, partial),
            )
        }
        3 | 4 => (InputFormat::JsonLines, "jsonl", jsonl(sample, partial)),
        5 => (
            InputFormat::Parquet,
            "parquet",
            typed(sample, InputFormat::Parquet, &mut notes),
        ),
        6 => (
            InputFormat::Avro,
            "avro",
            typed(sample, InputFormat::Avro, &mut notes),
        ),
        _ => (
            InputFormat::Orc,
            "orc",
            typed(sample, InputFormat::Orc, &mut notes),
        ),
    };
    let show = common::show();
    if show {
        eprintln!("{proposal:?} {notes:?}");
    }
    let Some(proposal) = proposal else {
        return;
    };
    let columns: Vec<ColumnSpec> = proposal.into_iter().map(|seen| seen.column).collect();
    for column in &columns {
        // The proposal is written into a sources document: it must read back as itself.
        let json = serde_json::to_string(column).expect("a column spec serializes");
        let back: ColumnSpec = serde_json::from_str(&json)
            .unwrap_or_else(|e| panic!("the proposed column {json} does not read back: {e}"));
        assert_eq!(&back, column, "{json}");
    }
    // As the CLI does next: the proposal in a sources document, which the product loads
    // (or refuses, e.g. a JSON key "" as a column name), and the sample converted under it;
    // the converter is the last word on a proposal: an answer or an error, never a panic.
    let mut source = serde_json::json!({
        "source_id": "sample",
        "bucket": "landing",
        "prefix": "in/",
        "format": name,
        "schema": columns,
        "output": {"bucket": "lake", "prefix": "out/"},
    });
    if let InputFormat::Csv(options) = format {
        source["csv"] = serde_json::json!({
            "delimiter": (options.delimiter as char).to_string(),
            "header": options.header,
        });
    }
    let doc = serde_json::json!({ "sources": [source] }).to_string();
    let config = match tidemark::config::Config::from_json(&doc) {
        Ok(config) => config,
        Err(e) => {
            if show {
                eprintln!("refused: {e}");
            }
            return;
        }
    };
    let mut spec = config.sources[0].convert_spec("in/sample");
    spec.max_decoded_bytes = Some(8 << 20);
    let outcome = tidemark::convert::count(sample, &spec);
    if show {
        eprintln!("{outcome:?}");
    }
    if let Err(e) = outcome {
        let _ = e.to_string();
    }
});
