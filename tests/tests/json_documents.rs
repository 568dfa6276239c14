//! JSON documents (`"format": "json"`) through the real ingest path on both backend pairs (S3
//! emulator + DynamoDB Local, and local folders + SQLite), with files shaped as their producers
//! write them (`tests/fixtures/aws/generate.py`): CloudTrail log files (one gzipped
//! `{"Records":[…]}` each, one of them empty), a Firehose delivery of records back to back
//! with no delimiter, CloudWatch Logs subscription data as Firehose delivers it (gzip members
//! concatenated, each an envelope of `logEvents`, a CONTROL_MESSAGE among them, the envelope
//! read into every event's row), a pretty-printed top-level array, and an Application Load
//! Balancer's access log read with `"format": "regex"` (IPv6 clients, `-` and empty fields,
//! user agents with escaped quotes, a field appended after the documented ones, rescued).
//!
//! Every output is judged against an independent reading: Python's `json` cuts each file into
//! its records, Python's `re` matches each log line with the same pattern
//! (`tests/fixtures/aws/records.py`), and the JSON Lines model of
//! `tests/fixtures/nested/check.py` compares every value pyarrow and DuckDB read back from the
//! Parquet the lake holds. Reconcile's deep tier recounts every source object to the ledger's
//! and the lake's numbers. A file with a value that holds no records array fails naming it,
//! is quarantined after `max_attempts`, and the other objects of its batch land exactly.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use serde_json::{Value, json};
use tidemark::config::Config;
use tidemark::model::Status;
use tidemark_tests::{Backends, Events};

const DATASETS: [&str; 5] = ["cloudtrail", "firehose", "cloudwatch", "alb", "export"];

pub(crate) fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// The source block of `name` from its fixture, at `name/` in both buckets.
fn source(b: &Backends, name: &str) -> Value {
    let path = fixtures().join(format!("aws/{name}.source.json"));
    let mut source: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let extra = json!({
        "source_id": name, "bucket": b.landing, "prefix": format!("{name}/"),
        "output": {"bucket": b.lake, "prefix": format!("{name}/")},
        "reconcile": {"deep_sample": 1.0},
        "max_attempts": 2,
    });
    for (k, v) in extra.as_object().unwrap() {
        source[k] = v.clone();
    }
    source
}

fn config(b: &Backends) -> Arc<Config> {
    let sources: Vec<Value> = DATASETS.iter().map(|n| source(b, n)).collect();
    Arc::new(Config::from_json(&json!({ "sources": sources }).to_string()).expect("valid config"))
}

/// The fixture files of `name`: key (under `name/`) and path.
pub(crate) fn files(name: &str) -> Vec<(String, PathBuf)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let root = fixtures().join("aws").join(name);
    let mut paths = Vec::new();
    walk(&root, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(&root).unwrap().to_str().unwrap().to_string();
            (format!("{name}/{rel}"), p)
        })
        .collect()
}

/// `python3 tests/fixtures/SCRIPT ARGS…`: its exit status, stdout and stderr.
pub(crate) fn python(script: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("python3")
        .arg(fixtures().join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("python3 {script}: {e} (the model needs Python 3)"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The records of the fixture at `path` as Python's `json` reads them (JSON Lines), written
/// into `dir`: the file and how many records.
pub(crate) fn python_records(source: &Value, path: &Path, dir: &Path) -> (PathBuf, u64) {
    let mut args = vec![path.to_str().unwrap().to_string()];
    if let Some(regex) = source.get("regex") {
        args.extend([
            "--pattern".into(),
            regex["pattern"].as_str().unwrap().into(),
        ]);
        args.extend(["--null-values".into(), regex["null_values"].to_string()]);
        if let Some(comment) = regex["comment"].as_str() {
            args.extend(["--comment".into(), comment.into()]);
        }
    }
    if let Some(records) = source.pointer("/json/records").and_then(Value::as_str) {
        args.extend(["--records".into(), records.into()]);
    }
    if let Some(envelope) = source.pointer("/json/envelope").and_then(Value::as_array) {
        let names: Vec<&str> = envelope.iter().map(|e| e.as_str().unwrap()).collect();
        args.extend(["--envelope".into(), names.join(",")]);
    }
    let gzip = match source["compression"].as_str() {
        Some("gzip") => true,
        Some("auto") => path.to_str().unwrap().ends_with(".gz"),
        _ => false,
    };
    if gzip {
        args.push("--gzip".into());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, stdout, stderr) = python("aws/records.py", &args);
    assert!(ok, "records.py {args:?}: {stderr}");
    assert!(stderr.contains("bad values: 0"), "{stderr}");
    let file = dir.join("records.jsonl");
    std::fs::write(&file, &stdout).unwrap();
    (file, stdout.lines().count() as u64)
}

/// `check.py`'s judgement of the Parquet `parquet` as the conversion of `records` (JSON
/// Lines) under `source`'s schema and policies.
pub(crate) fn check(source: &Value, records: &Path, parquet: &Path, dir: &Path) -> (bool, String) {
    let schema = dir.join("schema.json");
    std::fs::write(&schema, source["schema"].to_string()).unwrap();
    let policies = dir.join("policies.json");
    let keep = ["on_unknown_field", "on_bad_value", "rescued_column", "json"];
    // (check.py models JSON Lines: a line log is judged as the JSON object of its groups.)
    let p: serde_json::Map<String, Value> = keep
        .iter()
        .filter_map(|k| Some((k.to_string(), source.get(*k)?.clone())))
        .collect();
    std::fs::write(&policies, Value::Object(p).to_string()).unwrap();
    let mut args = vec![
        "--source",
        records.to_str().unwrap(),
        "--schema",
        schema.to_str().unwrap(),
        "--policies",
        policies.to_str().unwrap(),
        "--parquet",
        parquet.to_str().unwrap(),
    ];
    // A line log's fields are text: its numbers are read from text (`--quoted-numbers`).
    if source["format"] == "regex" {
        args.push("--quoted-numbers");
    }
    let (ok, stdout, stderr) = python("nested/check.py", &args);
    (ok, stdout + &stderr)
}

async fn documents_land_as_python_reads_them(b: Backends) {
    let config = config(&b);
    let ev = Events::new(&b, &config);
    let mut seq = 0x20_0000;
    let dir = tempfile::tempdir().unwrap();
    let mut objects = 0;
    for name in DATASETS {
        let source = source(&b, name);
        for (key, path) in files(name) {
            b.upload(&key, std::fs::read(&path).unwrap()).await;
            seq += 1;
            let record = b.created_record(&key, &format!("{seq:018X}")).await;
            ev.send(record).await;
            objects += 1;

            let (records, count) = python_records(&source, &path, dir.path());
            let rec = b.ledger.get(name, &key).await.unwrap().expect("a record");
            assert_eq!(rec.status, Status::Done, "{}: {key}: {rec:?}", b.name);
            let committed = rec.committed.expect("committed");
            assert_eq!(committed.rows, count, "{}: {key}: rows", b.name);
            let lake = b.lake_objects(&format!("{key}.parquet")).await;
            let body = lake
                .get(&format!("{key}.parquet"))
                .unwrap_or_else(|| panic!("{}: no output for {key}: {lake:?}", b.name));
            let parquet = dir.path().join("out.parquet");
            std::fs::write(&parquet, body).unwrap();
            let (ok, text) = check(&source, &records, &parquet, dir.path());
            assert!(
                ok,
                "{}: {key}: the output differs from Python's reading:\n{text}",
                b.name
            );
            assert!(
                text.contains(&format!("equal: {count} rows"))
                    && text.contains("pyarrow and duckdb"),
                "{}: {key}: {text}",
                b.name
            );
        }
    }

    // Reconcile's deep tier recounts every source object: clean, the same rows everywhere.
    let mut checked = 0;
    for name in DATASETS {
        let report = b.reconcile_all(&config, name).await;
        assert!(report.clean(), "{}: {name}: {report:#?}", b.name);
        checked += report.deep_checked.len();
        let t = &report.totals;
        assert_eq!(t.deep.source.rows, t.ledger.rows, "{}: {name}", b.name);
        assert_eq!(t.deep.lake.rows, t.ledger.rows, "{}: {name}", b.name);
    }
    assert_eq!(checked, objects, "{}: every object recounted", b.name);
}

/// A CloudTrail-shaped file with a value that holds no records array fails naming the value,
/// is quarantined after `max_attempts`, and a good file of the same batch lands exactly.
async fn a_value_without_records_quarantines_its_file_only(b: Backends) {
    let config = config(&b);
    let p = b.pipeline_with(config.clone());
    let good = "cloudtrail/AWSLogs/111122223333/CloudTrail/us-east-1/2026/12/02/good.json";
    let bad = "cloudtrail/AWSLogs/111122223333/CloudTrail/us-east-1/2026/12/02/bad.json";
    let record = r#"{"eventVersion":"1.08","eventTime":"2026-12-02T10:00:00Z","eventID":"e1","eventName":"GetObject","eventSource":"s3.amazonaws.com","awsRegion":"us-east-1"}"#;
    b.upload(good, format!(r#"{{"Records":[{record},{record}]}}"#))
        .await;
    b.upload(
        bad,
        format!(r#"{{"Records":[{record}]}}{{"Digest":[{record}]}}"#),
    )
    .await;
    let batch = json!({"Records": [
        b.created_record(good, "0000000000000000A1").await,
        b.created_record(bad, "0000000000000000A2").await,
    ]});
    for attempt in 1..=2 {
        let r = tidemark::ingest::handle(&p, &batch, &b.ctx("event"), 4)
            .await
            .unwrap();
        let rec = b.ledger.get("cloudtrail", bad).await.unwrap().unwrap();
        assert_eq!(
            rec.last_error.as_deref(),
            Some(
                format!(
                    r#"s3://{}/{bad}: line 1: value 2 holds no "Records" array of records"#,
                    b.landing
                )
                .as_str()
            ),
            "{}: attempt {attempt}",
            b.name
        );
        let expected = if attempt == 1 {
            Status::Failed
        } else {
            Status::Quarantined
        };
        assert_eq!(rec.status, expected, "{}: {r:?}", b.name);
        assert!(rec.committed.is_none());
    }
    let rec = b.ledger.get("cloudtrail", good).await.unwrap().unwrap();
    assert_eq!(rec.committed.map(|c| c.rows), Some(2), "{}", b.name);
    let lake = b.lake_objects("cloudtrail/").await;
    assert_eq!(
        lake.keys().collect::<Vec<_>>(),
        [&format!("{good}.parquet")],
        "{}: the good file only",
        b.name
    );
}

/// CloudTrail files partitioned by the day of each record's `eventTime`, as the guide's
/// source does: every file's records land in `dt=` folders by their own day, as many rows per
/// day as Python's reading of the files holds.
async fn cloudtrail_files_partition_by_event_day(b: Backends) {
    let mut source = source(&b, "cloudtrail");
    source["output"]["partitioning"] =
        json!({"columns": [{"from": "eventTime", "as": "dt", "transform": "day"}]});
    let config = Arc::new(Config::from_json(&json!({ "sources": [source] }).to_string()).unwrap());
    let ev = Events::new(&b, &config);
    let dir = tempfile::tempdir().unwrap();
    let mut expected: std::collections::BTreeMap<String, u64> = Default::default();
    for (n, (key, path)) in files("cloudtrail").into_iter().enumerate() {
        b.upload(&key, std::fs::read(&path).unwrap()).await;
        ev.send(
            b.created_record(&key, &format!("{:018X}", 0x30_0000 + n))
                .await,
        )
        .await;
        let (records, _) = python_records(&source, &path, dir.path());
        for line in std::fs::read_to_string(records).unwrap().lines() {
            let record: Value = serde_json::from_str(line).unwrap();
            let day = record["eventTime"].as_str().unwrap()[..10].to_string();
            *expected.entry(day).or_default() += 1;
        }
    }
    let got = rows_per_partition(&b, "cloudtrail/", "dt").await;
    assert!(
        expected.len() > 1,
        "the fixtures span several days: {expected:?}"
    );
    assert_eq!(got, expected, "{}", b.name);
}

/// The rows of the Parquet files under `prefix` in the lake, per value of the partition
/// folder `<name>=<value>/` right under it (every file must be in one).
pub(crate) async fn rows_per_partition(
    b: &Backends,
    prefix: &str,
    name: &str,
) -> std::collections::BTreeMap<String, u64> {
    let mut got = std::collections::BTreeMap::new();
    for (key, body) in b.lake_objects(prefix).await {
        let value = key
            .strip_prefix(&format!("{prefix}{name}="))
            .and_then(|k| k.split('/').next())
            .unwrap_or_else(|| panic!("{}: {key} is not under {name}=", b.name))
            .to_string();
        let rows = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(body)
            .unwrap()
            .metadata()
            .file_metadata()
            .num_rows() as u64;
        *got.entry(value).or_default() += rows;
    }
    got
}

tidemark_tests::on_both!(
    documents_land_as_python_reads_them,
    a_value_without_records_quarantines_its_file_only,
    cloudtrail_files_partition_by_event_day
);

/// The source blocks of the guide (`docs/pages/guides/aws-logs.md`) read the fixtures they
/// describe: each block is a valid source (a preset's included), and converts every fixture
/// file of its kind into as many rows as Python's `json` or `re` reads records from it.
#[test]
fn the_guides_sources_read_the_fixtures() {
    let guide = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/pages/guides/aws-logs.md"),
    )
    .unwrap();
    let blocks: Vec<Value> = guide
        .split("```json\n")
        .skip(1)
        .map(|b| serde_json::from_str(&b[..b.find("```").unwrap()]).unwrap())
        .collect();
    let mut read = Vec::new();
    for block in &blocks {
        let id = block["source_id"].as_str().unwrap();
        let config = Config::from_json(&json!({ "sources": [block] }).to_string())
            .unwrap_or_else(|e| panic!("{id}: {e}"));
        let source = config.source(id).unwrap();
        let dir = tempfile::tempdir().unwrap();
        // Python reads the files as the fixture's own source says, or as the guide's preset
        // expands (a preset's block is checked against Python in `presets.rs`).
        let fixture =
            match std::fs::read_to_string(fixtures().join(format!("aws/{id}.source.json"))) {
                Ok(text) if block.get("preset").is_none() => serde_json::from_str(&text).unwrap(),
                _ => serde_json::to_value(&source.doc).unwrap(),
            };
        for (key, path) in files(id) {
            let (_, count) = python_records(&fixture, &path, dir.path());
            let spec = source.convert_spec(&key);
            let stats = tidemark::convert::convert(
                std::fs::File::open(&path).unwrap(),
                &spec,
                std::io::sink(),
            )
            .unwrap_or_else(|e| panic!("{id}: {key}: {e}"));
            assert_eq!(stats.rows, count, "{id}: {key}");
        }
        read.push(id.to_string());
    }
    assert_eq!(read, ["vpc_flow", "cloudtrail", "cloudwatch", "alb"]);
}
