//! The presets for AWS's own logs (`"preset": "aws.alb"`, …) through the real ingest path on
//! both backend pairs, each over fixture files shaped and named as AWS writes them
//! (`tests/fixtures/aws/generate.py`): CloudTrail files, CloudWatch Logs subscription data
//! delivered by Firehose, ALB, NLB and Classic ELB access logs, CloudFront standard logs, S3
//! server access logs of four eras of fields, VPC flow logs with NODATA and SKIPDATA records,
//! and WAF logs; `-` values, IPv6 clients, escaped quotes, URL-encoded fields, and a field
//! appended after the documented ones (rescued, never a failure).
//!
//! A source is nothing but `{"preset": …}` with its buckets and prefixes: the preset's
//! `include` must take the files, and every value lands as the independent reading says —
//! Python's `re` with the preset's pattern, or Python's `json` (`tests/fixtures/aws/records.py`),
//! judged value by value by the model of `tests/fixtures/nested/check.py` against what pyarrow
//! and DuckDB read from the lake (event-time columns included: Python's `strptime` and epoch
//! arithmetic). The same files under the preset's default partitioning land in `day=` folders
//! holding, per day, the rows pyarrow counts by that day in the unpartitioned output.
//! Reconcile's deep tier recounts both sources clean.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;

use serde_json::{Value, json};
use tidemark::config::Config;
use tidemark::model::Status;
use tidemark_tests::{Backends, Events};

use super::json_documents::{check, files, python_records, rows_per_partition};

/// Each preset and the fixture folder of its files.
const PRESETS: [(&str, &str); 9] = [
    ("aws.cloudtrail", "cloudtrail"),
    ("aws.cloudwatch_logs", "cloudwatch"),
    ("aws.alb", "alb"),
    ("aws.nlb", "nlb"),
    ("aws.clb", "clb"),
    ("aws.cloudfront", "cloudfront"),
    ("aws.s3_access", "s3_access"),
    ("aws.vpc_flow", "vpc_flow"),
    ("aws.waf", "waf"),
];

/// The source `id` reading the files of a preset under `<id>/`: the preset and the places,
/// nothing else; without partitioning unless `by_day`.
fn own(b: &Backends, preset: &str, id: &str, by_day: bool) -> Value {
    let mut own = json!({
        "source_id": id, "preset": preset, "bucket": b.landing, "prefix": format!("{id}/"),
        "output": {"bucket": b.lake, "prefix": format!("{id}/")},
        "reconcile": {"deep_sample": 1.0},
    });
    if !by_day {
        own["output"]["partitioning"] = Value::Null;
    }
    own
}

/// The source block a preset expands into, as the configuration reads it.
fn expanded(own: &Value) -> Value {
    let doc = json!({ "sources": [own] }).to_string();
    let text = tidemark::presets::expand(&doc).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    doc["sources"][0].clone()
}

/// Rows per value of `column`'s day (UTC) in the Parquet file `path`, as pyarrow reads them.
fn rows_per_day(path: &std::path::Path, column: &str) -> BTreeMap<String, u64> {
    let script = r#"
import collections, json, sys
import pyarrow.parquet as pq
values = pq.read_table(sys.argv[1], columns=[sys.argv[2]]).column(0).to_pylist()
days = collections.Counter(v.strftime("%Y-%m-%d") for v in values)
print(json.dumps(days))
"#;
    let out = Command::new(tidemark_tests::table_reader::reader_python())
        .args(["-c", script, path.to_str().unwrap(), column])
        .output()
        .expect("the readers' Python, with pyarrow");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

async fn presets_land_as_python_reads_them(b: Backends) {
    let mut sources = Vec::new();
    for (preset, dir) in PRESETS {
        sources.push(own(&b, preset, dir, false));
        sources.push(own(&b, preset, &format!("{dir}-by-day"), true));
    }
    let config =
        Arc::new(Config::from_json(&json!({ "sources": sources }).to_string()).expect("valid"));
    let ev = Events::new(&b, &config);
    let tmp = tempfile::tempdir().unwrap();
    let mut seq = 0x40_0000;
    for (preset, dir) in PRESETS {
        let flat = expanded(&own(&b, preset, dir, false));
        let by_day = expanded(&own(&b, preset, &format!("{dir}-by-day"), true));
        let day_of = by_day["output"]["partitioning"]["columns"][0]["from"]
            .as_str()
            .unwrap()
            .to_string();
        let mut expected_days: BTreeMap<String, u64> = BTreeMap::new();
        for (key, path) in files(dir) {
            let rel = key.strip_prefix(&format!("{dir}/")).unwrap();
            let (records, count) = python_records(&flat, &path, tmp.path());
            for id in [dir.to_string(), format!("{dir}-by-day")] {
                let key = format!("{id}/{rel}");
                b.upload(&key, std::fs::read(&path).unwrap()).await;
                seq += 1;
                ev.send(b.created_record(&key, &format!("{seq:018X}")).await)
                    .await;
                let rec = b.ledger.get(&id, &key).await.unwrap();
                let rec = rec.unwrap_or_else(|| panic!("{}: {preset}: {key} not taken", b.name));
                assert_eq!(rec.status, Status::Done, "{}: {key}: {rec:?}", b.name);
                assert_eq!(rec.committed.unwrap().rows, count, "{}: {key}", b.name);
            }

            // Every value, as Python reads the file.
            let key = format!("{dir}/{rel}.parquet");
            let lake = b.lake_objects(&key).await;
            let body = lake
                .get(&key)
                .unwrap_or_else(|| panic!("{}: no output {key}: {lake:?}", b.name));
            let parquet = tmp.path().join("out.parquet");
            std::fs::write(&parquet, body).unwrap();
            let (ok, text) = check(&flat, &records, &parquet, tmp.path());
            assert!(
                ok,
                "{}: {preset}: {key}: differs from Python's reading:\n{text}",
                b.name
            );
            assert!(
                text.contains(&format!("equal: {count} rows")),
                "{}: {key}: {text}",
                b.name
            );
            for (day, rows) in rows_per_day(&parquet, &day_of) {
                *expected_days.entry(day).or_default() += rows;
            }
        }

        // The preset's default: a folder per event day, each with that day's rows.
        let got = rows_per_partition(&b, &format!("{dir}-by-day/"), "day").await;
        assert!(
            expected_days.len() > 1,
            "{preset}: the fixtures span two days: {expected_days:?}"
        );
        assert_eq!(got, expected_days, "{}: {preset}", b.name);
    }

    // Reconcile's deep tier recounts every object of both sources of every preset.
    for source in &config.sources {
        let report = b.reconcile_all(&config, source.id()).await;
        assert!(report.clean(), "{}: {}: {report:#?}", b.name, source.id());
        let t = &report.totals;
        assert_eq!(
            t.deep.source.rows,
            t.ledger.rows,
            "{}: {}",
            b.name,
            source.id()
        );
        assert_eq!(
            t.deep.lake.rows,
            t.ledger.rows,
            "{}: {}",
            b.name,
            source.id()
        );
        assert!(t.ledger.rows > 0, "{}: {}", b.name, source.id());
    }
}

tidemark_tests::on_both!(presets_land_as_python_reads_them);
