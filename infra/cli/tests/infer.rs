//! `tidemark infer`, run as a user runs it: the proposal converts every sampled file with no
//! row rejected and no value rescued, and inferring again from the Parquet it wrote gives the
//! same schema (round trips on generated data and on the repository's fixtures, every
//! format); hostile samples each get a clear answer.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tidemark(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(args)
        .env_remove("TIDEMARK_CONFIG_FILE")
        .env_remove("TIDEMARK_CONFIG")
        .output()
        .expect("run tidemark")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `infer --json` on `paths`: the report, asserting it checked.
fn infer(paths: &[&Path], extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["--json", "infer"];
    args.extend_from_slice(extra);
    let paths: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    args.extend(paths.iter().map(String::as_str));
    let out = tidemark(&args);
    assert!(out.status.success(), "infer failed: {}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    assert_eq!(report["checked"], true, "{report:#}");
    report
}

/// (name, type, nullable) of each proposed column.
fn schema(report: &serde_json::Value) -> Vec<(String, String, bool)> {
    report["source"]["schema"]
        .as_array()
        .expect("schema")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["type"].as_str().unwrap().to_string(),
                c["nullable"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// Convert `file` under the proposal of `report` into `out` (Parquet).
fn convert(report: &serde_json::Value, file: &Path, out: &Path, dir: &Path) {
    let config = dir.join("proposed.json");
    std::fs::write(
        &config,
        serde_json::json!({ "sources": [report["source"]] }).to_string(),
    )
    .expect("write the document");
    let source = report["source"]["source_id"].as_str().unwrap();
    let o = tidemark(&[
        "--config",
        config.to_str().unwrap(),
        "convert",
        "--source",
        source,
        file.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    assert!(
        o.status.success(),
        "convert under the proposal failed: {}",
        text(&o)
    );
}

/// Infer from `file`, convert it under the proposal, infer from the Parquet: the same columns
/// (a `json` column is marked as such in the Parquet file's Arrow schema).
fn round_trip(file: &Path) -> Vec<(String, String, bool)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = infer(&[file], &[]);
    let parquet = dir.path().join("out.parquet");
    convert(&first, file, &parquet, dir.path());
    let again = infer(&[&parquet], &[]);
    assert_eq!(
        schema(&again),
        schema(&first),
        "inferred again from the Parquet it wrote"
    );
    schema(&first)
}

#[test]
fn generated_csv_round_trips_with_the_narrowest_types() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("mixed.csv");
    let mut csv = String::from("id,big,price,ratio,ok,day,eu_day,at,zip,name,empty\n");
    for i in 0..500u64 {
        csv.push_str(&format!(
            "{i},{},{}.{:02},{}e-3,{},2024-01-{:02},{:02}/12/2024,2024-01-02T03:04:{:02}Z,0{},\"name, {i}\",\n",
            9_000_000_000u64 + i,
            i,
            i % 100,
            i,
            i % 2 == 0,
            i % 28 + 1,
            i % 28 + 1,
            i % 60,
            1000 + i,
        ));
    }
    csv.push_str("500,,,,,,,,,,\n");
    std::fs::write(&file, csv).expect("write");
    let columns = round_trip(&file);
    let types: Vec<(&str, &str, bool)> = columns
        .iter()
        .map(|(n, t, null)| (n.as_str(), t.as_str(), *null))
        .collect();
    assert_eq!(
        types,
        [
            ("id", "int32", false),
            ("big", "int64", true),
            ("price", "decimal(5,2)", true),
            ("ratio", "float64", true),
            ("ok", "bool", true),
            ("day", "date", true),
            ("eu_day", "date", true),
            ("at", "timestamp", true),
            ("zip", "string", true),
            ("name", "string", true),
            ("empty", "string", true),
        ]
    );
}

#[test]
fn fixtures_of_every_format_round_trip() {
    let fixtures = repo().join("tests/fixtures");
    for file in [
        "nested/cloudtrail.jsonl",
        "nested/github.jsonl",
        "nested/clickstream.jsonl",
        "nested/cloudtrail.parquet",
        "nested/cloudtrail.avro",
        "nested/cloudtrail.orc",
        "avro_orc/orders-deflate.avro",
        "avro_orc/orders-lz4.orc",
    ] {
        let columns = round_trip(&fixtures.join(file));
        assert!(!columns.is_empty(), "{file}: no column proposed");
    }
    // The sample orders: three files, one with "two" in `quantity`: it stays text, noted.
    let report = infer(&[&repo().join("infra/sample/landing/orders")], &[]);
    let quantity = schema(&report)
        .into_iter()
        .find(|(n, ..)| n == "quantity")
        .expect("quantity");
    assert_eq!(quantity.1, "string");
    let notes = report["notes"].to_string();
    assert!(notes.contains("not \\\"two\\\""), "{notes}");
    assert_eq!(report["files"].as_array().unwrap().len(), 3);
}

#[test]
fn nested_json_keeps_its_shape_and_conflicts_become_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("events.jsonl");
    std::fs::write(
        &file,
        concat!(
            r#"{"id": 1, "user": {"arn": "a", "mfa": true}, "tags": ["x"], "v": 1}"#,
            "\n",
            r#"{"id": 2, "user": {"arn": "b"}, "tags": [], "v": "one", "extra": null}"#,
            "\n"
        ),
    )
    .expect("write");
    let columns = round_trip(&file);
    assert_eq!(
        columns,
        [
            ("id".into(), "int32".into(), false),
            ("user".into(), "struct<arn:string,mfa:bool>".into(), false),
            ("tags".into(), "array<string>".into(), false),
            ("v".into(), "json".into(), false),
            ("extra".into(), "string".into(), true),
        ]
    );
}

#[test]
fn a_sample_cut_inside_a_character_reads_whole_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("names.jsonl");
    let lines: String = (0..20_000)
        .map(|i| format!("{{\"id\": {i}, \"name\": \"Zoë Ærøskøbing {i}\"}}\n"))
        .collect();
    std::fs::write(&file, lines).expect("write");
    // A 64 KiB sample (the least share) of a ~900 KB file: its end falls inside an `ø`.
    let report = infer(&[&file], &["--sample-bytes", "65536"]);
    assert_eq!(
        schema(&report),
        [
            ("id".into(), "int32".into(), false),
            ("name".into(), "string".into(), false)
        ]
    );
    assert!(report["files"][0]["records"].as_u64().unwrap() < 20_000);
    assert_eq!(report["files"][0]["converted_rows"], 20_000);
}

#[test]
fn hostile_samples_get_clear_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let at = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).expect("write");
        path
    };
    // An empty file: nothing to infer from, exit 2, said so.
    let empty = at("empty.csv", b"");
    let o = tidemark(&["infer", empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("empty"), "{}", text(&o));
    // A binary file named .csv: not text, naming the byte.
    let binary = at("image.csv", &[0x89, b'P', b'N', b'G', 0xff, 0x00, 0xfe]);
    let o = tidemark(&["infer", binary.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("invalid UTF-8 at byte 0"), "{}", text(&o));
    // Header only: nullable strings, noted, and it converts.
    let header = at("header.csv", b"a,b,c\n");
    let report = infer(&[&header], &[]);
    assert!(
        schema(&report)
            .iter()
            .all(|(_, t, null)| t == "string" && *null)
    );
    assert!(
        report["notes"]
            .to_string()
            .contains("no record below the header")
    );
    // A column of NULLs, integers past int64 and past decimal(38): each typed and noted.
    let wide = format!("n,big,huge\n,{},{}\n,1,2\n", "9".repeat(25), "9".repeat(40));
    let report = infer(&[&at("wide.csv", wide.as_bytes())], &[]);
    assert_eq!(
        schema(&report),
        [
            ("n".into(), "string".into(), true),
            ("big".into(), "decimal(25,0)".into(), false),
            ("huge".into(), "string".into(), false),
        ]
    );
    let notes = report["notes"].to_string();
    assert!(notes.contains("no value but NULLs"), "{notes}");
    assert!(notes.contains("too wide for int64"), "{notes}");
    assert!(notes.contains("40 digits"), "{notes}");
    // 10,000 columns.
    let names: Vec<String> = (0..10_000).map(|i| format!("c{i}")).collect();
    let values: Vec<String> = (0..10_000).map(|i| i.to_string()).collect();
    let many = at(
        "many.csv",
        format!("{}\n{}\n", names.join(","), values.join(",")).as_bytes(),
    );
    let report = infer(&[&many], &[]);
    assert_eq!(schema(&report).len(), 10_000);
    assert!(schema(&report).iter().all(|(_, t, _)| t == "int32"));
    // A line that is not a JSON object, and records of different widths: named.
    let o = tidemark(&[
        "infer",
        at("bad.jsonl", b"{\"a\":1}\n[1,2]\n").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("line 2: not a JSON object"),
        "{}",
        text(&o)
    );
    let o = tidemark(&[
        "infer",
        at("ragged.csv", b"a,b\n1,2\n3\n").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("record 3 has 1 fields"), "{}", text(&o));
}

#[test]
fn compared_with_a_source_it_names_what_fails_and_proposes_only_additions() {
    let sample = repo().join("infra/sample");
    let config = sample.join("sources.json");
    let run = |path: &Path| {
        let out = tidemark(&[
            "--json",
            "--config",
            config.to_str().unwrap(),
            "infer",
            "--source",
            "orders",
            path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", text(&out));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        report["compared"].clone()
    };
    // The sample's orders: the malformed file fails under the current contract, named; the
    // narrower types the files show (int32 ids, decimal(5,2) amounts) are not differences.
    let compared = run(&sample.join("landing/orders"));
    let outcomes: Vec<&str> = compared["under_current"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["converts", "converts", "fails"]);
    assert!(
        compared["under_current"][2]["why"]
            .as_str()
            .unwrap()
            .contains(r#"column "quantity": cannot parse "two" as int32"#)
    );
    assert_eq!(
        compared["differing"],
        serde_json::json!([["quantity", "int32", "string"]])
    );
    assert!(compared["proposed"].is_null(), "nothing to add");
    // A file with one more column: proposed as a nullable addition, nothing else changed.
    let dir = tempfile::tempdir().expect("tempdir");
    let original =
        std::fs::read_to_string(sample.join("landing/orders/2026/11/29/orders-0001.csv")).unwrap();
    let widened: String = original
        .lines()
        .enumerate()
        .map(|(i, l)| format!("{l},{}\n", if i == 0 { "channel" } else { "web" }))
        .collect();
    std::fs::write(dir.path().join("orders-0009.csv"), widened).unwrap();
    let compared = run(dir.path());
    assert_eq!(compared["added"][0]["name"], "channel");
    assert_eq!(compared["added"][0]["nullable"], true);
    let schema = compared["proposed"]["schema"].as_array().unwrap();
    assert_eq!(
        schema.len(),
        7,
        "the six columns kept as they are, one added"
    );
    assert_eq!(
        schema[3]["type"], "int32",
        "quantity untouched: only additions"
    );
    assert!(
        compared["notes"].to_string().contains("csv.columns")
            || compared["notes"].to_string().contains("columns")
    );
    assert_eq!(compared["under_current"][0]["outcome"], "fails");
}

/// `tidemark infer` on `path` with a stall limit of 2 s: it fails (exit 2, not a panic's 101),
/// naming the file and saying one of `why`.
fn fails_naming(path: &Path, why: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(["infer", path.to_str().unwrap()])
        .env_remove("TIDEMARK_CONFIG_FILE")
        .env_remove("TIDEMARK_CONFIG")
        .env("TIDEMARK_STALL_SECONDS", "2")
        .output()
        .expect("run tidemark");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let said = String::from_utf8_lossy(&o.stderr);
    let said = said.lines().last().unwrap_or_default();
    assert!(
        said.contains(&path.display().to_string()) && why.iter().any(|w| said.contains(w)),
        "{}: expected …{why:?}…, got {said}",
        path.display()
    );
}

#[test]
fn files_on_which_the_readers_loop_or_panic_fail_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = |from: PathBuf, name: &str| {
        let to = dir.path().join(name);
        std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
        to
    };
    let fixtures = repo().join("tests/fixtures");
    // The readers loop on these (an RLE v2 run in ORC, a block in Avro): the watchdog
    // abandons them, as it does a landed object.
    let stalled = &["no progress for 2 s (no input byte read, no row decoded)"];
    fails_naming(
        &copy(fixtures.join("avro_orc/poison-rle-loop.orc"), "loop.orc"),
        stalled,
    );
    fails_naming(
        &copy(
            fixtures.join("avro_orc/poison-block-loop.avro"),
            "loop.avro",
        ),
        stalled,
    );
    // parquet-rs and arrow-rs panic on these (found by fuzzing): invalid files.
    let mut crashes: Vec<_> = std::fs::read_dir(fixtures.join("fuzz/parquet"))
        .expect("fuzz fixtures")
        .map(|e| e.expect("entry").path())
        .collect();
    crashes.sort();
    assert!(!crashes.is_empty());
    for (i, crash) in crashes.into_iter().enumerate() {
        fails_naming(
            &copy(crash, &format!("crash-{i}.parquet")),
            &["not a valid", "cannot read the Parquet data"],
        );
    }
}

/// JSON documents as AWS and others land them (`tests/fixtures/aws`): a CloudTrail file's
/// `{"Records":[...]}` is read as its records (the name says `.json.gz`), CloudWatch Logs data
/// delivered by Firehose (gzip without `.gz`, concatenated envelopes) as its `logEvents` with
/// the envelope's scalars, a Firehose delivery of records back to back and a pretty-printed
/// array each as records; JSON Lines named `.json` whose objects hold arrays of objects stay
/// JSON Lines.
#[test]
fn json_documents_propose_their_records_array_and_envelope() {
    let aws = repo().join("tests/fixtures/aws");
    // The files alone, out of the key layout that would make them the preset's
    // (`aws_logs_are_recognised_by_their_names_and_get_their_preset`).
    let loose = tempfile::tempdir().unwrap();
    let walk = std::fs::read_dir(
        aws.join("cloudtrail/AWSLogs/111122223333/CloudTrail/us-east-1/2026/12/01"),
    )
    .unwrap();
    for file in walk {
        let file = file.unwrap().path();
        std::fs::copy(&file, loose.path().join(file.file_name().unwrap())).unwrap();
    }
    let trail = infer(&[loose.path()], &[]);
    let source = &trail["source"];
    assert_eq!(
        (source["format"].as_str(), source["json"].clone()),
        (Some("json"), serde_json::json!({"records": "Records"})),
        "{trail:#}"
    );
    let names: Vec<String> = schema(&trail).into_iter().map(|c| c.0).collect();
    assert!(
        names.contains(&"eventName".to_string()) && names.contains(&"userIdentity".to_string()),
        "{names:?}"
    );
    // 80 + 40 + 0 records in the three files, all read and converted.
    let rows: u64 = trail["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["converted_rows"].as_u64().unwrap())
        .sum();
    assert_eq!(rows, 120, "{trail:#}");

    let cw = infer(&[&aws.join("cloudwatch")], &["--format", "json"]);
    let source = &cw["source"];
    assert_eq!(source["compression"], "gzip", "{cw:#}");
    assert_eq!(
        source["json"],
        serde_json::json!({"records": "logEvents",
            "envelope": ["messageType", "owner", "logGroup", "logStream"]})
    );
    assert_eq!(
        schema(&cw).into_iter().map(|c| c.0).collect::<Vec<_>>(),
        [
            "messageType",
            "owner",
            "logGroup",
            "logStream",
            "id",
            "timestamp",
            "message"
        ]
    );

    for (dir, extra) in [("firehose", &["--format", "json"][..]), ("export", &[][..])] {
        let report = infer(&[&aws.join(dir)], extra);
        assert_eq!(report["source"]["format"], "json", "{dir}: {report:#}");
        assert!(report["source"].get("json").is_none(), "{dir}: {report:#}");
    }

    let dir = tempfile::tempdir().unwrap();
    let lines = dir.path().join("orders.json");
    std::fs::write(
        &lines,
        "{\"id\":1,\"items\":[{\"sku\":\"a\"}]}\n{\"id\":2,\"items\":[{\"sku\":\"b\"},{\"sku\":\"c\"}]}\n",
    )
    .unwrap();
    let report = infer(&[&lines], &[]);
    assert_eq!(report["source"]["format"], "jsonl", "{report:#}");
}

/// Files named as AWS names its logs get their preset, once every sampled file converts under
/// it: the block is the preset and the places, and it converts each file into as many rows as
/// the preset does. A file named like an ALB log that is not one gets an inferred proposal,
/// with a note saying why not the preset.
#[test]
fn aws_logs_are_recognised_by_their_names_and_get_their_preset() {
    let aws = repo().join("tests/fixtures/aws");
    for (dir, preset, rows) in [
        ("cloudtrail", "aws.cloudtrail", 120),
        ("alb", "aws.alb", 150),
        ("nlb", "aws.nlb", 80),
        ("clb", "aws.clb", 80),
        ("cloudfront", "aws.cloudfront", 80),
        ("s3_access", "aws.s3_access", 80),
        ("vpc_flow", "aws.vpc_flow", 80),
        ("waf", "aws.waf", 60),
    ] {
        let report = infer(&[&aws.join(dir)], &["--source-id", dir]);
        let source = &report["source"];
        assert_eq!(source["preset"], preset, "{dir}: {report:#}");
        assert!(source.get("schema").is_none() && source.get("format").is_none());
        let converted: u64 = report["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["converted_rows"].as_u64().unwrap())
            .sum();
        assert_eq!(converted, rows, "{dir}: {report:#}");
        // The block is a source as it stands.
        let doc = serde_json::json!({ "sources": [source] }).to_string();
        tidemark::config::Config::from_json(&doc).unwrap_or_else(|e| panic!("{dir}: {e}"));
    }

    // Named like an ALB log, holding CSV: inferred from the contents, the note says why.
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join(
        "111122223333_elasticloadbalancing_us-east-1_app.lb.1_20261201T0000Z_192.0.2.1_x.csv",
    );
    std::fs::write(&fake, "id,name\n1,a\n2,b\n").unwrap();
    let report = infer(&[&fake], &[]);
    assert!(report["source"].get("preset").is_none(), "{report:#}");
    assert_eq!(report["source"]["format"], "csv");
    let notes = report["notes"].to_string();
    assert!(
        notes.contains("the names say aws.alb, but")
            && notes.contains("inferred from the contents"),
        "{notes}"
    );
}

/// A null marker (`NA`) standing where numbers and dates do is proposed as
/// `csv.null_values`, and the proposal converts the file with it NULL; beside text it stays
/// text.
#[test]
fn a_null_marker_among_numbers_is_proposed_as_csv_null_values() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("scores.csv");
    std::fs::write(
        &file,
        "id,score,day\n1,2.5,2026-01-01\n2,NA,NA\n3,4,2026-01-03\n",
    )
    .unwrap();
    let report = infer(&[&file], &[]);
    assert_eq!(
        report["source"]["csv"]["null_values"],
        serde_json::json!(["NA"])
    );
    let types: Vec<(String, String, bool)> = schema(&report);
    assert_eq!(types[2], ("day".into(), "date".into(), true), "{report:#}");
    assert_eq!(report["files"][0]["converted_rows"], 3);

    let text = dir.path().join("countries.csv");
    std::fs::write(&text, "id,score,country\n1,2.5,DE\n2,NA,NA\n").unwrap();
    let report = infer(&[&text], &[]);
    assert!(
        report["source"]["csv"].get("null_values").is_none(),
        "{report:#}"
    );
}
