//! JSON Lines times written as epoch numbers and as strftime-formatted strings (naive ones in a
//! named time zone), read by the converter under each column's `format` and `timezone`, and
//! compared value by value with pyarrow's reading of the same file with the same options
//! (`tests/readers/read_json_times.py`: a cast of the integers to a timestamp of their unit,
//! `pyarrow.compute.strptime`, `assume_timezone`), in the virtualenv `.local/venv-readers` that
//! `infra/test.sh` installs.

use std::process::Command;

use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, TimestampMicrosecondType};
use bytes::Bytes;
use chrono::{DateTime, TimeZone};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};
use tidemark::convert::{ConvertSpec, InputFormat, convert};
use tidemark::schema::ColumnSpec;
use tidemark_tests::table_reader::reader_python;

fn columns() -> Value {
    json!([
        {"name": "s", "type": "timestamp", "format": "epoch_seconds"},
        {"name": "ms", "type": "timestamp", "format": "epoch_millis"},
        {"name": "us", "type": "timestamp", "format": "epoch_micros"},
        {"name": "day", "type": "date", "format": "epoch_millis"},
        {"name": "eu", "type": "timestamp", "format": "%d/%m/%Y %H:%M:%S"},
        {"name": "ny", "type": "timestamp", "format": "%Y-%m-%d %H:%M:%S", "timezone": "America/New_York"},
        {"name": "off", "type": "timestamp", "format": "%Y-%m-%dT%H:%M:%S%z"}
    ])
}

/// Random records: instants from 1950 to 2100, NULLs and absent keys among them; the New
/// York times at noon (which no daylight-saving change skips or repeats), up to 2037.
fn records(n: usize) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let ny = chrono_tz::America::New_York;
    let mut out = String::new();
    for _ in 0..n {
        let micros: i64 = rng.random_range(-631_152_000_000_000..4_102_444_800_000_000);
        let at = DateTime::from_timestamp_micros(micros).unwrap();
        let secs = micros.div_euclid(1_000_000);
        let mut r = json!({
            "s": secs,
            "ms": micros.div_euclid(1000),
            "us": micros,
            "day": secs.div_euclid(86_400) * 86_400_000,
            "eu": at.format("%d/%m/%Y %H:%M:%S").to_string(),
            "off": at.with_timezone(&chrono::FixedOffset::east_opt(rng.random_range(-12..=14) * 3600).unwrap())
                .format("%Y-%m-%dT%H:%M:%S%z").to_string(),
        });
        // Within 2037: pyarrow's time zone data has no daylight-saving rules past it.
        let year_2037 = 2_145_916_800_000_000;
        let ny_at = DateTime::from_timestamp_micros(micros.min(year_2037)).unwrap();
        let local = ny_at
            .with_timezone(&ny)
            .naive_local()
            .date()
            .and_hms_opt(12, 0, 0)
            .unwrap();
        r["ny"] = json!(local.format("%Y-%m-%d %H:%M:%S").to_string());
        assert!(ny.from_local_datetime(&local).single().is_some());
        for key in ["s", "ms", "us", "day", "eu", "ny", "off"] {
            match rng.random_range(0..20) {
                0 => r[key] = Value::Null,
                1 => {
                    r.as_object_mut().unwrap().remove(key);
                }
                _ => {}
            }
        }
        out.push_str(&r.to_string());
        out.push('\n');
    }
    out
}

#[test]
fn epoch_and_formatted_times_read_as_pyarrow_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("times.jsonl");
    std::fs::write(&path, records(5_000)).unwrap();
    let specs: Vec<ColumnSpec> = serde_json::from_value(columns()).unwrap();
    let spec = ConvertSpec::with_columns(InputFormat::JsonLines, &specs);
    let mut parquet = Vec::new();
    let stats = convert(std::fs::File::open(&path).unwrap(), &spec, &mut parquet).unwrap();
    assert_eq!(stats.rows, 5_000);

    let out = Command::new(reader_python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/readers/read_json_times.py"
        ))
        .arg(&path)
        .arg(columns().to_string())
        .output()
        .expect("run pyarrow");
    assert!(
        out.status.success(),
        "pyarrow failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs: Value = serde_json::from_slice(&out.stdout).unwrap();

    let reader = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(parquet))
        .unwrap()
        .build()
        .unwrap();
    let mut ours: Vec<Vec<Option<i64>>> = vec![Vec::new(); specs.len()];
    for batch in reader {
        let batch = batch.unwrap();
        for (i, column) in batch.columns().iter().enumerate() {
            let values: Vec<Option<i64>> = match column.as_primitive_opt::<Date32Type>() {
                Some(days) => days.iter().map(|d| d.map(i64::from)).collect(),
                None => column
                    .as_primitive::<TimestampMicrosecondType>()
                    .iter()
                    .collect(),
            };
            ours[i].extend(values);
        }
    }
    for (i, c) in specs.iter().enumerate() {
        let expected: Vec<Option<i64>> = theirs[&c.name]
            .as_array()
            .unwrap()
            .iter()
            .map(Value::as_i64)
            .collect();
        assert_eq!(expected.len(), ours[i].len(), "{}", c.name);
        let nulls = expected.iter().filter(|v| v.is_none()).count();
        assert!(nulls > 100 && nulls < 1000, "{}: {nulls} NULLs", c.name);
        for (row, (a, b)) in ours[i].iter().zip(&expected).enumerate() {
            assert_eq!(a, b, "column {} row {}", c.name, row + 1);
        }
    }
}
