//! `tidemark convert`: local files under the demo's sources document (and variants of it),
//! through the parsed command line as `main` runs it. Rows and sums are checked against the
//! values the test files were written with, and an output is read back from its Parquet.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{Value, json};
use tidemark::config::Config;
use tidemark_cli::commands::convert::{ConvertArgs, Shown, convert_file};

/// Orders as the demo writes them: 3 good rows, quantity 2 + 5 + 1 = 8, amount 10.00 + 0.05 +
/// 1234.56 = 1244.61 (a NULL quantity and amount on the last one would not count).
const ORDERS: &str = "order_id,customer,quantity,amount,ordered_at\n\
    1,Ada,2,10.00,2026-11-29T10:00:00Z\n\
    2,\"Grace \"\"Amazing\"\" Hopper\",5,0.05,2026-11-29T10:05:00Z\n\
    3,Bob,1,1234.56,2026-11-29T10:07:00Z\n";

/// The same with a bad quantity on line 3 (the second record).
const ORDERS_BAD: &str = "order_id,customer,quantity,amount,ordered_at\n\
    1,Ada,2,10.00,2026-11-29T10:00:00Z\n\
    2,Bob,two,5.00,2026-11-29T10:05:00Z\n\
    3,Eve,1,1234.56,2026-11-29T10:07:00Z\n";

/// Clicks: 4 rows, ms_on_page 100 + 250 + (null) + 1000 = 1350.
const CLICKS: &str = r#"{"user_id": 1, "page": "/", "ms_on_page": 100, "at": "2026-11-29T08:00:00Z"}
{"user_id": 2, "page": "/pay", "ms_on_page": 250, "at": "2026-11-29T08:01:00Z"}
{"user_id": 3, "page": "/help", "ms_on_page": null, "at": "2026-11-29T08:02:00Z"}
{"user_id": 4, "page": "/", "ms_on_page": 1000, "at": "2026-11-29T08:03:00Z"}
"#;

/// A temp folder holding a sources document and input files.
struct Dir {
    dir: tempfile::TempDir,
}

impl Dir {
    /// The demo's document, each source changed by `change` (given its id).
    fn new(change: impl Fn(&str, &mut Value)) -> Self {
        let mut doc = tidemark_cli::demo::sources_document();
        for source in doc["sources"].as_array_mut().unwrap() {
            let id = source["source_id"].as_str().unwrap().to_string();
            change(&id, source);
        }
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("sources.json"), doc.to_string()).unwrap();
        Self { dir }
    }

    /// The demo's document, clicks also taking `*.jsonl.gz`.
    fn demo() -> Self {
        Self::new(|id, s| {
            if id == "clicks" {
                s["include"] = json!(["*.jsonl", "*.jsonl.gz"]);
            }
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> String {
        std::fs::write(self.path(name), bytes).unwrap();
        self.path(name).display().to_string()
    }

    fn config(&self) -> Config {
        Config::from_file(&self.path("sources.json")).expect("valid document")
    }

    /// `tidemark --config <doc> ARGS`, as `main` runs it: (exit code, stdout).
    async fn cli(&self, args: &[&str]) -> (ExitCode, String) {
        let config = self.path("sources.json").display().to_string();
        let mut argv = vec!["tidemark", "--config", &config];
        argv.extend(args);
        let cli = tidemark_cli::parse_args(&argv).expect("valid command line");
        let mut out = Vec::new();
        let code = tidemark_cli::execute(cli, &mut out)
            .await
            .expect("command runs");
        (code, String::from_utf8(out).unwrap())
    }

    /// [`Dir::cli`] with `--json`: (exit code, the report).
    async fn json(&self, args: &[&str]) -> (ExitCode, Value) {
        let mut argv = vec!["--json"];
        argv.extend(args);
        let (code, out) = self.cli(&argv).await;
        (code, serde_json::from_str(&out).expect("one JSON document"))
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

fn args(source: &str, input: &str) -> ConvertArgs {
    ConvertArgs {
        source: source.into(),
        key: None,
        rejects: Shown::First(10),
        input: input.into(),
        output: None,
    }
}

/// Rows and sums of a Parquet file, read back.
fn read_back(path: &Path, columns: &[&str]) -> (u64, Vec<String>) {
    let bytes = bytes::Bytes::from(std::fs::read(path).expect("the output exists"));
    let columns: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
    let (rows, sums) = tidemark::convert::tally_parquet(bytes, &columns).expect("valid Parquet");
    (rows, columns.iter().map(|c| sums[c].to_string()).collect())
}

#[tokio::test]
async fn a_csv_and_a_gzip_json_lines_file_give_exact_rows_and_sums() {
    let dir = Dir::demo();
    let csv = dir.write("orders-0001.csv", ORDERS.as_bytes());
    let (code, r) = dir.json(&["convert", "--source", "orders", &csv]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{r}");
    assert_eq!(r["ok"], true);
    assert_eq!(r["key"], "orders/orders-0001.csv");
    assert_eq!(
        (&r["format"], &r["compression"]),
        (&json!("csv"), &json!("none"))
    );
    assert_eq!(r["selected"], true);
    assert_eq!(r["warnings"], json!([]));
    assert_eq!(r["rows"], 3);
    assert_eq!(r["sums"], json!({"amount": "1244.61", "quantity": "8"}));
    assert_eq!(r["row_groups"], 1);
    assert_eq!(r["bytes_read"], ORDERS.len());
    assert_eq!(r["bytes_decoded"], ORDERS.len());
    assert!(r["output_bytes"].as_u64().unwrap() > 100, "{r}");
    assert_eq!(r["output"], Value::Null);
    assert_eq!(
        (&r["rejected"], &r["on_bad_row"]),
        (&json!(0), &json!("fail"))
    );

    let gz = gzip(CLICKS.as_bytes());
    let jsonl = dir.write("clicks-0001.jsonl.gz", &gz);
    let (code, r) = dir.json(&["convert", "--source", "clicks", &jsonl]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{r}");
    assert_eq!(
        (&r["format"], &r["compression"]),
        (&json!("jsonl"), &json!("gzip"))
    );
    assert_eq!(r["rows"], 4);
    assert_eq!(r["sums"], json!({"ms_on_page": "1350"}));
    assert_eq!(r["bytes_read"], gz.len());
    assert_eq!(r["bytes_decoded"], CLICKS.len());

    // The same, as text.
    let (code, text) = dir.cli(&["convert", "--source", "orders", &csv]).await;
    assert_eq!(code, ExitCode::SUCCESS);
    for line in [
        "as key:        orders/orders-0001.csv (csv, compression none)\n",
        "on bad row:    fail\n",
        "rows:          3\n",
        "sum(amount):   1244.61\n",
        "sum(quantity): 8\n",
        "row groups:    1\n",
        "rejected:      0\n",
    ] {
        assert!(text.contains(line), "{line:?} not in:\n{text}");
    }
    assert!(text.contains("bytes of Parquet (discarded)"), "{text}");
}

#[tokio::test]
async fn the_output_is_written_and_reads_back_with_the_same_rows_and_sums() {
    let dir = Dir::demo();
    let csv = dir.write("orders-0001.csv", ORDERS.as_bytes());
    let out = dir.path("orders.parquet");
    let out_arg = out.display().to_string();
    let (code, r) = dir
        .json(&["convert", "--source", "orders", &csv, &out_arg])
        .await;
    assert_eq!(code, ExitCode::SUCCESS, "{r}");
    assert_eq!(r["output"], json!(out_arg));
    let size = std::fs::metadata(&out).unwrap().len();
    assert_eq!(r["output_bytes"], size);
    assert_eq!(
        read_back(&out, &["quantity", "amount"]),
        (3, vec!["8".to_string(), "1244.61".to_string()])
    );
    assert!(!dir.path("orders.parquet.partial").exists());
}

#[tokio::test]
async fn a_bad_row_under_policy_fail_fails_naming_the_file_line_and_column() {
    let dir = Dir::demo();
    let csv = dir.write("orders-0003.csv", ORDERS_BAD.as_bytes());
    let out = dir.path("bad.parquet");
    let out_arg = out.display().to_string();

    let report = convert_file(&dir.config(), &args("orders", &csv)).expect("runs");
    assert!(!report.ok);
    let e = report.error.expect("an error");
    assert_eq!(
        e.message,
        format!(r#"{csv}: line 3: column "quantity": cannot parse "two" as int32"#)
    );
    assert_eq!(
        (e.kind, e.line, e.column.as_deref()),
        ("parse", Some(3), Some("quantity"))
    );

    let (code, r) = dir
        .json(&["convert", "--source", "orders", &csv, &out_arg])
        .await;
    assert_eq!(code, ExitCode::from(1));
    assert_eq!(r["ok"], false);
    assert_eq!(r["error"]["line"], 3);
    assert!(r.get("rows").is_none(), "no counts of a failed file: {r}");
    assert!(!out.exists() && !dir.path("bad.parquet.partial").exists());

    let (code, text) = dir.cli(&["convert", "--source", "orders", &csv]).await;
    assert_eq!(code, ExitCode::from(1));
    assert!(
        text.ends_with("result:     FAILED (see the error)\n"),
        "{text}"
    );
}

#[tokio::test]
async fn a_bad_row_under_policy_reject_is_listed_and_the_file_converts() {
    let dir = Dir::new(|id, s| {
        if id == "orders" {
            s["on_bad_row"] = json!("reject");
            s["max_rejected_rows"] = json!(5);
        }
    });
    let csv = dir.write("orders-0003.csv", ORDERS_BAD.as_bytes());
    let out = dir.path("ok.parquet");
    let out_arg = out.display().to_string();
    let (code, r) = dir
        .json(&["convert", "--source", "orders", &csv, &out_arg])
        .await;
    assert_eq!(code, ExitCode::SUCCESS, "{r}");
    assert_eq!(
        (&r["on_bad_row"], &r["max_rejected_rows"]),
        (&json!("reject"), &json!(5))
    );
    assert_eq!(r["rows"], 2);
    assert_eq!(r["sums"], json!({"amount": "1244.56", "quantity": "3"}));
    assert_eq!(r["rejected"], 1);
    assert_eq!(
        r["rejects"],
        json!([{
            "line": 3, "column": "quantity",
            "error": "line 3: column \"quantity\": cannot parse \"two\" as int32",
            "record": "2,Bob,two,5.00,2026-11-29T10:05:00Z", "cut": false
        }])
    );
    assert_eq!(
        read_back(&out, &["quantity", "amount"]),
        (2, vec!["3".to_string(), "1244.56".to_string()])
    );

    let (code, text) = dir.cli(&["convert", "--source", "orders", &csv]).await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(
        text.contains("on bad row:    reject (at most 5 rows)\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "rejected:      1\n  line 3: column \"quantity\": cannot parse \"two\" as int32  \"2,Bob,two,5.00,2026-11-29T10:05:00Z\"\n"
        ),
        "{text}"
    );

    // --rejects bounds the list, not the count.
    let bad: String = ORDERS_BAD
        .lines()
        .chain(["4,Zed,four,1.00,"])
        .map(|l| format!("{l}\n"))
        .collect();
    let csv = dir.write("orders-0004.csv", bad.as_bytes());
    let (_, r) = dir
        .json(&["convert", "--source", "orders", "--rejects", "1", &csv])
        .await;
    assert_eq!(
        (&r["rejected"], r["rejects"].as_array().unwrap().len()),
        (&json!(2), 1)
    );
    let (_, r) = dir
        .json(&["convert", "--source", "orders", "--rejects", "all", &csv])
        .await;
    assert_eq!(r["rejects"][1]["line"], 5);
}

#[tokio::test]
async fn a_key_the_source_would_not_select_is_converted_with_a_warning() {
    // The demo's clicks take `*.jsonl` only.
    let dir = Dir::new(|_, _| {});
    let gz = dir.write("clicks-0001.jsonl.gz", &gzip(CLICKS.as_bytes()));
    let (code, r) = dir.json(&["convert", "--source", "clicks", &gz]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{r}");
    assert_eq!(r["selected"], false);
    assert_eq!(
        r["warnings"],
        json!([
            "source clicks would not select key \"clicks/clicks-0001.jsonl.gz\": the source's globs \
             (include [\"*.jsonl\"], exclude []) leave it out; converting anyway (--key sets the key)"
        ])
    );
    assert_eq!((&r["compression"], &r["rows"]), (&json!("gzip"), &json!(4)));

    // --key decides: a file of any name read as the key says.
    let plain = dir.write("sample.bin", CLICKS.as_bytes());
    let (code, r) = dir
        .json(&[
            "convert",
            "--source",
            "clicks",
            "--key",
            "clicks/2026/a.jsonl",
            &plain,
        ])
        .await;
    assert_eq!(code, ExitCode::SUCCESS, "{r}");
    assert_eq!(
        (&r["selected"], &r["compression"]),
        (&json!(true), &json!("none"))
    );
    assert_eq!(r["sums"], json!({"ms_on_page": "1350"}));
    let (code, r) = dir
        .json(&[
            "convert",
            "--source",
            "clicks",
            "--key",
            "other/a.jsonl.gz",
            &plain,
        ])
        .await;
    assert_eq!(code, ExitCode::from(1), "plain bytes read as gzip: {r}");
    assert_eq!(r["error"]["kind"], "decompress");
    assert!(
        r["warnings"][0]
            .as_str()
            .unwrap()
            .contains("not under the source's prefix \"clicks/\""),
        "{r}"
    );
}

#[tokio::test]
async fn a_source_with_bookmark_keys_runs_the_row_filter_from_no_mark() {
    let dir = Dir::new(|id, s| {
        if id == "orders" {
            s["bookmark"] = json!({"keys": ["order_id"]});
        }
    });
    // Order 2 twice: the second is a re-export, emitted once.
    let twice = format!("{ORDERS}2,Bob,9,9.99,2026-11-29T11:00:00Z\n");
    let csv = dir.write("orders-0005.csv", twice.as_bytes());
    let (code, r) = dir.json(&["convert", "--source", "orders", &csv]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{r}");
    assert_eq!(r["rows"], 3);
    assert_eq!(r["sums"], json!({"amount": "1244.61", "quantity": "8"}));
    assert_eq!(
        r["bookmark"],
        json!({"keys": ["order_id"], "emitted": 3, "late": 0, "skipped": 1, "mark": ["3"]})
    );
}

#[tokio::test]
async fn a_file_over_max_object_bytes_is_refused_as_ingest_refuses_it() {
    let dir = Dir::new(|id, s| {
        if id == "orders" {
            s["max_object_bytes"] = json!(100);
        }
    });
    let csv = dir.write("orders-0001.csv", ORDERS.as_bytes());
    let (code, r) = dir.json(&["convert", "--source", "orders", &csv]).await;
    assert_eq!(code, ExitCode::from(1));
    assert_eq!(r["error"]["kind"], "object_too_large");
    assert!(
        r["error"]["message"].as_str().unwrap().starts_with(&csv),
        "{r}"
    );
}

#[tokio::test]
async fn an_unknown_source_or_a_missing_file_cannot_run() {
    let dir = Dir::demo();
    let e = convert_file(&dir.config(), &args("nope", "x.csv")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "no source \"nope\" in the configuration (sources: orders, clicks)"
    );
    let missing = dir.path("missing.csv").display().to_string();
    let e = convert_file(&dir.config(), &args("orders", &missing)).unwrap_err();
    assert!(e.to_string().starts_with(&format!("{missing}: ")), "{e}");
}
