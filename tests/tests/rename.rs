//! A renamed source on both backend pairs (S3 emulator + DynamoDB Local, and local folders +
//! SQLite): the ledger state the old id left behind is found (`status`, the ingest Lambda's
//! cold-start check), `rename-source` moves it — resumably, leaving a key the new id already
//! holds differently in place — and the next `run` processes nothing.

use std::process::ExitCode;
use std::sync::Arc;

use serde_json::Value;
use tidemark::config::Config;
use tidemark::model::Status;
use tidemark::ports::LedgerWrite;
use tidemark_cli::Backend;
use tidemark_tests::{Backends, orders_csv, orders_doc};

/// The suite's document with `orders` called `id` (same prefix, same output location).
fn renamed(b: &Backends, id: &str) -> Arc<Config> {
    let mut doc = orders_doc(&b.landing, &b.lake, 3, Some("reports/"));
    let orders = &mut doc["sources"][0];
    assert_eq!(orders["source_id"], "orders");
    orders["source_id"] = id.into();
    orders["output"]["prefix"] = "orders/".into(); // where `orders` wrote
    Arc::new(Config::from_json(&doc.to_string()).unwrap())
}

async fn cli(backend: &Backend, args: &[&str]) -> Result<(ExitCode, String), String> {
    let mut argv = vec!["tidemark"];
    argv.extend(args);
    let cli = tidemark_cli::parse_args(&argv).expect("valid command line");
    let mut out = Vec::new();
    tidemark_cli::dispatch(cli.command, backend, cli.json, &mut out)
        .await
        .map(|code| (code, String::from_utf8(out).unwrap()))
        .map_err(|e| e.to_string())
}

async fn json(backend: &Backend, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let (_, out) = cli(backend, &args).await.expect("command runs");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

async fn renamed_source_state_moves_and_costs_no_reprocessing(b: Backends) {
    let name = b.name;
    for i in 0..4 {
        let (csv, _) = orders_csv(i * 100, 5 + i as usize);
        b.upload(&format!("in/2026/11/0{i}/orders-{i}.csv"), csv)
            .await;
    }
    let before = Backend::from_pipeline(b.pipeline(), name);
    let run = json(&before, &["run"]).await;
    assert_eq!(run["total"]["processed"], 4, "{name}: {run}");
    let rows: u64 = (0..4).map(|i| 5 + i).sum();

    // The document now calls `orders` `orders_v2`: status and the cold-start check see the
    // state of `orders`; NEW shows nothing yet.
    let after = Backend::from_pipeline(b.pipeline_with(renamed(&b, "orders_v2")), name);
    let status = json(&after, &["status"]).await;
    let orphaned = status["orphaned"].as_array().unwrap();
    assert_eq!(orphaned.len(), 1, "{name}: {status}");
    assert_eq!(orphaned[0]["source_id"], "orders");
    assert_eq!(orphaned[0]["records"], 4);
    assert_eq!(orphaned[0]["objects"]["done"], 4);
    assert_eq!(orphaned[0]["rows"], rows);
    let v2 = &status["sources"][0];
    assert_eq!(
        (v2["source_id"].as_str(), v2["objects"]["done"].as_u64()),
        (Some("orders_v2"), Some(0))
    );
    assert_eq!(
        tidemark::ingest::warn_orphaned_sources(&after.pipeline).await,
        ["orders"],
        "{name}"
    );
    let (_, text) = cli(&after, &["status"]).await.unwrap();
    assert!(
        text.contains(
            "ORPHANED: orders: not in the sources document, the ledger holds 4 records (4 done)"
        ) && text.contains("tidemark rename-source orders NEW"),
        "{name}: {text}"
    );

    // A crash in an earlier rename left one copy made and its original in place; NEW holds a
    // different record of another key (processed under NEW since the deploy).
    let ledger = &b.ledger;
    let records = ledger.list("orders").await.unwrap();
    let mut copied = records[0].clone();
    copied.source_id = "orders_v2".into();
    assert_eq!(ledger.create(&copied).await.unwrap(), LedgerWrite::Written);
    let mut different = records[1].clone();
    different.source_id = "orders_v2".into();
    different.committed.as_mut().unwrap().rows += 1;
    assert_eq!(
        ledger.create(&different).await.unwrap(),
        LedgerWrite::Written
    );

    let (code, _) = cli(&after, &["rename-source", "orders", "orders_v2"])
        .await
        .unwrap();
    assert_eq!(code, ExitCode::FAILURE, "{name}: a conflict is left");
    let left = ledger.list("orders").await.unwrap();
    assert_eq!(left.len(), 1, "{name}");
    assert_eq!(left[0].key, records[1].key);
    // The operator settles the conflict (here: NEW's record goes), and runs it again.
    let theirs = ledger
        .get("orders_v2", &records[1].key)
        .await
        .unwrap()
        .unwrap();
    ledger
        .delete("orders_v2", &theirs.key, theirs.rev)
        .await
        .unwrap();
    let report = json(&after, &["rename-source", "orders", "orders_v2"]).await;
    assert_eq!(
        (report["moved"].as_u64(), report["complete"].as_bool()),
        (Some(1), Some(true)),
        "{name}: {report}"
    );
    assert!(ledger.list("orders").await.unwrap().is_empty(), "{name}");
    let moved = ledger.list("orders_v2").await.unwrap();
    assert_eq!(moved.len(), 4, "{name}");
    assert!(moved.iter().all(|r| r.status == Status::Done));

    // Nothing of `orders` is left to find, and the next run processes nothing.
    let status = json(&after, &["status"]).await;
    assert_eq!(status["orphaned"], Value::Array(vec![]), "{name}: {status}");
    assert_eq!(
        status["sources"][0]["totals"]["rows"], rows,
        "{name}: {status}"
    );
    assert!(
        tidemark::ingest::warn_orphaned_sources(&after.pipeline)
            .await
            .is_empty()
    );
    let run = json(&after, &["run", "--source", "orders_v2"]).await;
    assert_eq!(
        (
            run["total"]["processed"].as_u64(),
            run["total"]["duplicates"].as_u64()
        ),
        (Some(0), Some(4)),
        "{name}: {run}"
    );
    let err = cli(&after, &["rename-source", "orders", "orders_v2"])
        .await
        .unwrap_err();
    assert!(
        err.contains("no records of source \"orders\""),
        "{name}: {err}"
    );
    // The move is in the audit log of both ids.
    let audit = json(&after, &["audit", "--source", "orders_v2"]).await;
    assert!(
        audit
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["command"] == "rename-source"),
        "{name}: {audit}"
    );
}

async fn a_source_still_in_the_document_or_writing_elsewhere_is_refused(b: Backends) {
    let name = b.name;
    let (csv, _) = orders_csv(0, 3);
    b.upload("in/a.csv", csv).await;
    let before = Backend::from_pipeline(b.pipeline(), name);
    json(&before, &["run"]).await;
    let err = cli(&before, &["rename-source", "orders", "orders_json"])
        .await
        .unwrap_err();
    assert!(
        err.contains("still in the sources document"),
        "{name}: {err}"
    );
    // NEW with its own output prefix would leave the outputs where NEW does not look.
    let mut doc = orders_doc(&b.landing, &b.lake, 3, Some("reports/"));
    doc["sources"][0]["source_id"] = "orders_v2".into();
    doc["sources"][0]["output"]["prefix"] = "orders_v2/".into();
    let config = Arc::new(Config::from_json(&doc.to_string()).unwrap());
    let after = Backend::from_pipeline(b.pipeline_with(config), name);
    let err = cli(&after, &["rename-source", "orders", "orders_v2"])
        .await
        .unwrap_err();
    assert!(
        err.contains("have their output where \"orders_v2\" would not write it"),
        "{name}: {err}"
    );
    assert_eq!(
        b.ledger.list("orders").await.unwrap().len(),
        1,
        "{name}: nothing moved"
    );
}

#[tokio::test]
async fn embedded_renamed_source_state_moves_and_costs_no_reprocessing() {
    renamed_source_state_moves_and_costs_no_reprocessing(Backends::embedded().await).await;
}

#[tokio::test]
async fn aws_renamed_source_state_moves_and_costs_no_reprocessing() {
    renamed_source_state_moves_and_costs_no_reprocessing(Backends::aws().await).await;
}

#[tokio::test]
async fn embedded_a_source_still_in_the_document_or_writing_elsewhere_is_refused() {
    a_source_still_in_the_document_or_writing_elsewhere_is_refused(Backends::embedded().await)
        .await;
}

#[tokio::test]
async fn aws_a_source_still_in_the_document_or_writing_elsewhere_is_refused() {
    a_source_still_in_the_document_or_writing_elsewhere_is_refused(Backends::aws().await).await;
}
