//! JSON Lines conversion against an independent model of it: random records
//! (`tests/fixtures/nested/random_records.py`) converted by `tidemark::convert::convert` under
//! their schema and policies, then judged by `tests/fixtures/nested/check.py`, which computes
//! the rows from Python's own reading of the file (numbers as written) and compares every
//! value pyarrow and DuckDB read back from the Parquet output, the rescued column and the
//! statistics — or, when the file must fail, that the error names its line and path.
//!
//! Needs `python3`; the checker installs pyarrow and DuckDB into `.local/venv-readers` on
//! first use. A profile is a kind of record (see random_records.py): `flat` holds top-level
//! scalar columns only, with whole numbers spelled `7.0` and `7e0`, decimals with zeros past
//! their scale, floats at their limits, timestamps with offsets, escaped and astral-plane
//! text, and keys the schema lacks (ignored, and counted).

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tidemark::convert::{ConvertSpec, InputFormat, convert};
use tidemark::schema::ColumnSpec;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/nested")
}

/// `python3 SCRIPT ARGS…`: its exit status, and its stdout and stderr together.
fn python(script: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new("python3")
        .arg(fixtures().join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("python3 {script}: {e} (the model needs Python 3)"));
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// The records of `profile` in `dir`, converted under their schema and policies: the
/// arguments that tell the checker what the converter made of them.
fn convert_profile(dir: &Path, profile: &str, records: u32) -> Vec<String> {
    let path = |name: &str| dir.join(name).display().to_string();
    let (ok, text) = python(
        "random_records.py",
        &[
            "--out",
            &path(""),
            "--profile",
            profile,
            "--records",
            &records.to_string(),
        ],
    );
    assert!(ok, "random_records.py failed: {text}");
    let schema: Vec<ColumnSpec> =
        serde_json::from_str(&fs::read_to_string(dir.join("random.schema.json")).unwrap()).unwrap();
    let policies: Value =
        serde_json::from_str(&fs::read_to_string(dir.join("random.policies.json")).unwrap())
            .unwrap();
    let mut spec = ConvertSpec::with_columns(InputFormat::JsonLines, &schema);
    spec.sum_columns = schema
        .iter()
        .filter(|c| c.ty.is_summable())
        .map(|c| c.name.clone())
        .collect();
    spec.unknown_fields = serde_json::from_value(policies["on_unknown_field"].clone()).unwrap();
    spec.bad_values = serde_json::from_value(policies["on_bad_value"].clone()).unwrap();
    if let Some(keys) = policies.pointer("/json/keys") {
        spec.json_keys = serde_json::from_value(keys.clone()).unwrap();
    }
    let mut args = vec![
        "--source".to_owned(),
        path("random.jsonl"),
        "--schema".to_owned(),
        path("random.schema.json"),
        "--policies".to_owned(),
        path("random.policies.json"),
    ];
    let input = File::open(dir.join("random.jsonl")).unwrap();
    let output = File::create(dir.join("random.parquet")).unwrap();
    match convert(input, &spec, output) {
        Ok(stats) => {
            fs::write(
                dir.join("stats.json"),
                serde_json::to_string(&stats).unwrap(),
            )
            .unwrap();
            args.extend(["--parquet".to_owned(), path("random.parquet")]);
            args.extend(["--stats".to_owned(), path("stats.json")]);
        }
        Err(e) => args.extend(["--error".to_owned(), e.to_string()]),
    }
    args
}

fn check(args: &[String]) -> (bool, String) {
    python(
        "check.py",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    )
}

#[test]
fn flat_records_convert_as_the_independent_model_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = convert_profile(dir.path(), "flat", 2_000);
    // Every statistic but the ignored values, which the JSON Lines decoder does not count
    // yet (`Batches::take_ignored` is the trait's default there).
    args.extend([
        "--stats-checks".to_owned(),
        "rows,rescued_rows,sums".to_owned(),
    ]);
    let (ok, text) = check(&args);
    assert!(ok, "the output differs from the model:\n{text}");
    assert!(
        text.contains("equal: 2000 rows") && text.contains("read by pyarrow and duckdb"),
        "{text}"
    );
}

#[test]
fn the_model_refuses_an_output_it_does_not_give() {
    // The same conversion judged under another policy: the model says the first unknown
    // field fails the object, so a written file is a difference, named by its line.
    let dir = tempfile::tempdir().unwrap();
    let mut args = convert_profile(dir.path(), "flat", 200);
    args.extend(["--on-unknown-field".to_owned(), "fail".to_owned()]);
    let (ok, text) = check(&args);
    assert!(
        !ok,
        "the checker accepted an output its model does not give:\n{text}"
    );
    assert!(
        text.contains("MISMATCH") && text.contains("must fail the object"),
        "{text}"
    );
}
