//! `tidemark convert`: local files under the demo's sources document (and variants of it),
//! through the parsed command line as `main` runs it. Rows and sums are checked against the
//! values the test files were written with, and an output is read back from its Parquet.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{Value, json};
use tidemark::config::Config;
use tidemark::model::IgnoredFields;
use tidemark_cli::commands::convert::{ConvertArgs, Shown, convert_file, render};

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
        Self::with(&doc)
    }

    /// The sources document `doc`.
    fn with(doc: &Value) -> Self {
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

    /// `convert --json` of `input` under `source` into `<name>.parquet` in the folder: (exit
    /// code, the report, the output's path).
    async fn convert_into(
        &self,
        source: &str,
        input: &str,
        name: &str,
    ) -> (ExitCode, Value, PathBuf) {
        let out = self.path(&format!("{name}.parquet"));
        let out_arg = out.display().to_string();
        let (code, r) = self
            .json(&["convert", "--source", source, input, &out_arg])
            .await;
        (code, r, out)
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
    let (code, r, out) = dir.convert_into("orders", &csv, "orders").await;
    assert_eq!(code, ExitCode::SUCCESS, "{r}");
    assert_eq!(r["output"], json!(out.display().to_string()));
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

#[tokio::test]
async fn the_columns_are_listed_with_their_types_as_the_schema_spells_them() {
    let dir = Dir::with(&json!({"sources": [{
        "source_id": "trail", "bucket": "landing", "prefix": "in/", "format": "jsonl",
        "schema": [
            {"name": "eventTime", "type": "timestamp", "nullable": false},
            {"name": "userIdentity",
             "type": "struct<type:string,sessionContext:struct<attributes:struct<mfaAuthenticated:bool>>>"},
            {"name": "arn", "path": "resources[0].ARN", "type": "string"},
            {"name": "resources", "type": "array<struct<ARN:string,accountId:string>>"},
            {"name": "tags", "type": "map<string,int64>"},
            {"name": "requestParameters", "type": "json"}
        ],
        "on_unknown_field": "rescue",
        "metadata_columns": {"_source_key": "key", "_row": "row_number"},
        "output": {"bucket": "lake", "prefix": "trail/"}
    }]}));
    let file = dir.write(
        "a.jsonl",
        br#"{"eventTime": "2026-11-29T10:00:00Z", "userIdentity": {"type": "IAMUser"}}
"#,
    );
    // The contract is shown whether or not the sample converts.
    let (_, text) = dir.cli(&["check", "--source", "trail", &file]).await;
    let columns: Vec<&str> = text.lines().filter(|l| l.starts_with("column:")).collect();
    assert_eq!(
        columns,
        [
            "column:     eventTime timestamp not null",
            "column:     userIdentity struct<type:string,sessionContext:struct<attributes:struct<mfaAuthenticated:bool>>>",
            "column:     arn string (from resources[0].ARN)",
            "column:     resources array<struct<ARN:string,accountId:string>>",
            "column:     tags map<string,int64>",
            "column:     requestParameters json",
            "column:     _rescued_data json (rescued values)",
            "column:     _row int64 not null (lineage: row_number)",
            "column:     _source_key string not null (lineage: key)",
        ],
        "{text}"
    );
    let (_, r) = dir.json(&["convert", "--source", "trail", &file]).await;
    assert_eq!(
        (
            &r["on_unknown_field"],
            &r["on_bad_value"],
            &r["rescued_column"]
        ),
        (&json!("rescue"), &json!("fail"), &json!("_rescued_data"))
    );
    assert_eq!(r["columns"].as_array().unwrap().len(), 9, "{r}");
    assert_eq!(
        r["columns"][1],
        json!({"name": "userIdentity", "nullable": true,
               "type": "struct<type:string,sessionContext:struct<attributes:struct<mfaAuthenticated:bool>>>"})
    );
    assert_eq!(
        r["columns"][2],
        json!({"name": "arn", "type": "string", "nullable": true, "path": "resources[0].ARN"})
    );
    assert_eq!(
        r["columns"][6],
        json!({"name": "_rescued_data", "type": "json", "nullable": true, "filled_with": "rescued values"})
    );
}

#[tokio::test]
async fn rescued_rows_and_ignored_fields_are_shown_with_their_counts() {
    let dir = Dir::demo();
    let csv = dir.write("orders-0001.csv", ORDERS.as_bytes());
    let mut report = convert_file(&dir.config(), &args("orders", &csv)).expect("runs");
    // Nothing rescued or ignored: the lines say so.
    let text = render(&report);
    assert!(
        text.contains("rejected:      0\nrescued:       0\nignored:       0\n"),
        "{text}"
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(
        (&json["rescued"], &json["ignored"]),
        (&json!(0), &json!({"values": 0}))
    );

    // Counts as a decoder that rescues and ignores reports them.
    report.rescued_column = Some("_rescued_data".into());
    let converted = report.result.as_mut().unwrap();
    converted.rescued = 2;
    converted.ignored = IgnoredFields {
        values: 9,
        fields: [("tags".to_string(), 3), ("userIdentity.extra".into(), 4)].into(),
    };
    let text = render(&report);
    assert!(
        text.ends_with(
            "rejected:      0\n\
             rescued:       2 rows (with values in column _rescued_data)\n\
             ignored:       9 values of fields not in the schema (on_unknown_field: ignore)\n\
             \x20 userIdentity.extra: 4\n\
             \x20 tags: 3\n\
             \x20 (other fields): 2\n"
        ),
        "{text}"
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["rescued"], 2);
    assert_eq!(
        json["ignored"],
        json!({"values": 9, "fields": {"tags": 3, "userIdentity.extra": 4}})
    );
}

#[tokio::test]
async fn lineage_columns_describe_the_file_as_the_object_its_key_names() {
    let dir = Dir::new(|id, s| {
        if id == "orders" {
            s["metadata_columns"] =
                json!({"_source_key": "key", "_etag": "etag", "_row": "row_number"});
        }
    });
    let csv = dir.write("orders-0001.csv", ORDERS.as_bytes());
    let (code, r, out) = dir.convert_into("orders", &csv, "orders").await;
    assert_eq!(code, ExitCode::SUCCESS, "{r}");
    assert_eq!(r["rows"], 3);

    use arrow_array::cast::AsArray;
    let file = std::fs::File::open(&out).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let batch = reader.into_iter().next().unwrap().unwrap();
    let strings = |name: &str| -> Vec<String> {
        batch
            .column_by_name(name)
            .unwrap()
            .as_string::<i32>()
            .iter()
            .map(|v| v.unwrap().to_string())
            .collect()
    };
    use md5::Digest;
    let md5: String = md5::Md5::digest(ORDERS.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(strings("_etag"), [md5.as_str(); 3]);
    assert_eq!(strings("_source_key"), ["orders/orders-0001.csv"; 3]);
    let rows = batch.column_by_name("_row").unwrap();
    let rows = rows.as_primitive::<arrow_array::types::Int64Type>();
    assert_eq!(rows.values().to_vec(), [1, 2, 3]);
}
