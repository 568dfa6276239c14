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

/// `check.py ARGS…`, told that a number spelled as a JSON string (`"12"`) reads in a number
/// column, as the converter (and arrow's readers) read it.
fn check(args: &[String]) -> (bool, String) {
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.push("--quoted-numbers");
    python("check.py", &args)
}

/// Every profile of random records, 10,000 records each (NULL at every level, empty arrays
/// and objects, unicode, deep nesting, numbers at their types' limits, repeated keys, fields
/// the schema lacks, mixed-case keys), under its policies: every value pyarrow and DuckDB
/// read back equals the model's, every rescued field is in the rescued column with its
/// value, and rows, rescued rows, ignored values and sums agree; the `fail` profile fails at
/// the line and path the model says.
#[test]
fn random_nested_records_convert_as_the_independent_model_reads_them() {
    for profile in [
        "rescue",
        "ignore",
        "case_insensitive",
        "clean",
        "fail",
        "flat",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let args = convert_profile(dir.path(), profile, 10_000);
        let (ok, text) = check(&args);
        assert!(ok, "{profile}: the output differs from the model:\n{text}");
        if profile == "fail" {
            assert!(text.contains("fails at line"), "{profile}: {text}");
        } else {
            assert!(
                text.contains("equal: 10000 rows") && text.contains("read by pyarrow and duckdb"),
                "{profile}: {text}"
            );
        }
    }
}

/// The committed fixtures (CloudTrail-like records, GitHub events, a clickstream with mixed-case
/// keys), each under its own schema (path columns included) and policies.
#[test]
fn the_nested_fixtures_convert_as_the_independent_model_reads_them() {
    for name in ["cloudtrail", "github", "clickstream"] {
        let dir = tempfile::tempdir().unwrap();
        let fixture = |ext: &str| {
            fixtures()
                .join(format!("{name}.{ext}"))
                .display()
                .to_string()
        };
        let schema: Vec<ColumnSpec> =
            serde_json::from_str(&fs::read_to_string(fixture("schema.json")).unwrap()).unwrap();
        let policies: Value =
            serde_json::from_str(&fs::read_to_string(fixture("policies.json")).unwrap()).unwrap();
        let mut spec = ConvertSpec::with_columns(InputFormat::JsonLines, &schema);
        spec.unknown_fields = serde_json::from_value(policies["on_unknown_field"].clone()).unwrap();
        spec.bad_values = serde_json::from_value(policies["on_bad_value"].clone()).unwrap();
        if let Some(keys) = policies.pointer("/json/keys") {
            spec.json_keys = serde_json::from_value(keys.clone()).unwrap();
        }
        let out = dir.path().join("out.parquet");
        let stats = convert(
            File::open(fixture("jsonl")).unwrap(),
            &spec,
            File::create(&out).unwrap(),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let stats_path = dir.path().join("stats.json");
        fs::write(&stats_path, serde_json::to_string(&stats).unwrap()).unwrap();
        let args: Vec<String> = [
            "--source",
            &fixture("jsonl"),
            "--schema",
            &fixture("schema.json"),
            "--policies",
            &fixture("policies.json"),
            "--parquet",
            &out.display().to_string(),
            "--stats",
            &stats_path.display().to_string(),
        ]
        .map(String::from)
        .into();
        let (ok, text) = check(&args);
        assert!(ok, "{name}: the output differs from the model:\n{text}");
        assert!(
            text.contains("read by pyarrow and duckdb"),
            "{name}: {text}"
        );
    }
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
