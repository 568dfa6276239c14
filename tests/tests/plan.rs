//! `tidemark plan` on both backend pairs (S3 emulator + DynamoDB Local, and local folders +
//! SQLite): a renamed source, a schema change, a changed prefix / include / exclude and two
//! sources taking the same keys, each found before the document is deployed, with exactly the
//! objects concerned.

use std::process::ExitCode;
use std::sync::Arc;

use serde_json::Value;
use tidemark::config::Config;
use tidemark_cli::Backend;
use tidemark_tests::{Backends, orders_csv, orders_doc};

fn config(doc: &Value) -> Arc<Config> {
    Arc::new(Config::from_json(&doc.to_string()).expect("valid document"))
}

/// `plan --json [extra]` under `doc`: exit code and the plan.
async fn plan(b: &Backends, doc: &Value, extra: &[&str]) -> (ExitCode, Value) {
    let backend = Backend::from_pipeline(b.pipeline_with(config(doc)), b.name);
    let mut argv = vec!["tidemark", "plan", "--json"];
    argv.extend(extra);
    let cli = tidemark_cli::parse_args(&argv).unwrap();
    let mut out = Vec::new();
    let code = tidemark_cli::dispatch(cli.command, &backend, cli.json, &mut out)
        .await
        .expect("plan runs");
    (code, serde_json::from_slice(&out).unwrap())
}

async fn run(b: &Backends, doc: &Value) {
    let backend = Backend::from_pipeline(b.pipeline_with(config(doc)), b.name);
    let cli = tidemark_cli::parse_args(["tidemark", "run", "--json"]).unwrap();
    let mut out = Vec::new();
    let code = tidemark_cli::dispatch(cli.command, &backend, cli.json, &mut out)
        .await
        .unwrap();
    assert_eq!(code, ExitCode::SUCCESS, "{}", String::from_utf8_lossy(&out));
}

fn source<'a>(plan: &'a Value, id: &str) -> &'a Value {
    plan["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["source_id"] == id)
        .unwrap_or_else(|| panic!("{id} in {plan}"))
}

/// (count, examples) of a finding.
fn keys(v: &Value) -> (u64, Vec<String>) {
    let examples = v["examples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    (v["count"].as_u64().unwrap(), examples)
}

async fn plan_finds_what_a_document_would_change(b: Backends) {
    let name = b.name;
    let current = orders_doc(&b.landing, &b.lake, 3, Some("reports/"));
    for (i, key) in ["in/a/1.csv", "in/a/2.csv", "in/b/3.csv", "in/b/4.csv"]
        .iter()
        .enumerate()
    {
        b.upload(key, orders_csv(i as i64 * 10, 3).0).await;
    }
    run(&b, &current).await;

    // The document as deployed: nothing to do, exit 0.
    let (code, p) = plan(&b, &current, &[]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{name}: {p}");
    assert_eq!(source(&p, "orders")["up_to_date"], 4, "{name}: {p}");
    assert_eq!(p["attention"], Value::Array(vec![]), "{name}: {p}");

    // A rename: the old id's state is orphaned, the new id would process everything again.
    let mut renamed = current.clone();
    renamed["sources"][0]["source_id"] = "orders_v2".into();
    renamed["sources"][0]["output"]["prefix"] = "orders/".into();
    let (code, p) = plan(&b, &renamed, &[]).await;
    assert_eq!(code, ExitCode::FAILURE, "{name}: {p}");
    let v2 = source(&p, "orders_v2");
    assert_eq!(
        (v2["known"].as_bool(), keys(&v2["new"]).0),
        (Some(false), 4),
        "{name}: {p}"
    );
    assert_eq!(keys(&v2["reprocessed"]).0, 4, "{name}: {p}");
    assert_eq!(p["orphaned"][0]["source_id"], "orders", "{name}: {p}");
    assert_eq!(p["orphaned"][0]["records"], 4, "{name}: {p}");
    assert_eq!(
        p["orphaned"][0]["keys_now_in"],
        serde_json::json!(["orders_v2"])
    );
    assert!(
        p["attention"].as_array().unwrap().iter().any(|a| a
            .as_str()
            .unwrap()
            .contains("tidemark rename-source orders orders_v2")),
        "{name}: {p}"
    );
    let (code, _) = plan(&b, &renamed, &["--allow"]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{name}: --allow");

    // A schema change after two more objects landed under it: exactly the four committed
    // before are stale (what `backfill --stale-config` would rewrite).
    let mut widened = current.clone();
    widened["sources"][0]["schema"][2]["type"] = "int64".into(); // quantity int32 -> int64
    b.upload("in/c/5.csv", orders_csv(50, 2).0).await;
    b.upload("in/c/6.csv", orders_csv(60, 2).0).await;
    run(&b, &widened).await;
    let (code, p) = plan(&b, &widened, &[]).await;
    assert_eq!(code, ExitCode::FAILURE, "{name}: {p}");
    let orders = source(&p, "orders");
    assert_eq!(
        keys(&orders["stale_config"]),
        (
            4,
            vec![
                "in/a/1.csv".into(),
                "in/a/2.csv".into(),
                "in/b/3.csv".into(),
                "in/b/4.csv".into()
            ]
        ),
        "{name}: {p}"
    );
    assert_eq!(orders["up_to_date"], 2, "{name}: {p}");
    assert_eq!(
        orders["columns"],
        serde_json::json!(["~ quantity: int32 -> int64"]),
        "{name}: the change, read from a stale object's output: {p}"
    );
    assert_eq!(keys(&orders["new"]).0, 0, "{name}: {p}");

    // A prefix / include / exclude change: in/b/ is left behind (untracked), in2/ comes in
    // (new); in/a/ and in/c/ stay as they are.
    b.upload("in2/7.csv", orders_csv(70, 2).0).await;
    let mut moved = widened.clone();
    moved["sources"][0]["prefix"] = "".into();
    moved["sources"][0]["include"] = serde_json::json!(["in/*", "in2/*"]);
    moved["sources"][0]["exclude"] = serde_json::json!(["in/b/*"]);
    let (code, p) = plan(&b, &moved, &[]).await;
    assert_eq!(code, ExitCode::FAILURE, "{name}: {p}");
    let orders = source(&p, "orders");
    assert_eq!(
        keys(&orders["new"]),
        (1, vec!["in2/7.csv".into()]),
        "{name}: {p}"
    );
    assert_eq!(keys(&orders["reprocessed"]).0, 0, "{name}: {p}");
    assert_eq!(
        keys(&orders["untracked"]),
        (2, vec!["in/b/3.csv".into(), "in/b/4.csv".into()]),
        "{name}: {p}"
    );
    assert_eq!(
        keys(&orders["stale_config"]).0,
        2,
        "{name}: in/a/ only now: {p}"
    );
    assert_eq!(orders["up_to_date"], 2, "{name}: {p}");

    // Two sources taking the same keys.
    let mut twice = widened.clone();
    twice["sources"][2]["prefix"] = "in/c/".into(); // the archive source
    let (code, p) = plan(&b, &twice, &[]).await;
    assert_eq!(code, ExitCode::FAILURE, "{name}: {p}");
    assert_eq!(p["overlaps"].as_array().unwrap().len(), 1, "{name}: {p}");
    assert_eq!(
        p["overlaps"][0]["sources"],
        serde_json::json!(["orders", "archive"])
    );
    assert_eq!(
        keys(&p["overlaps"][0]["keys"]),
        (2, vec!["in/c/5.csv".into(), "in/c/6.csv".into()]),
        "{name}: {p}"
    );
}

#[tokio::test]
async fn embedded_plan_finds_what_a_document_would_change() {
    plan_finds_what_a_document_would_change(Backends::embedded().await).await;
}

#[tokio::test]
async fn aws_plan_finds_what_a_document_would_change() {
    plan_finds_what_a_document_would_change(Backends::aws().await).await;
}

/// A preset whose expansion changes (a release that documents one more field, say) is a
/// configuration change `plan` shows before it is deployed: objects committed under the older
/// expansion are `stale_config`, with the column the new one adds. Written out or named, the
/// same expansion is the same configuration: the same plan.
async fn plan_sees_a_presets_expansion_change(b: Backends) {
    let name = b.name;
    let places = serde_json::json!({
        "source_id": "vpc", "bucket": b.landing, "prefix": "vpc/",
        "output": {"bucket": b.lake, "prefix": "vpc/"},
    });
    let named = {
        let mut s = places.clone();
        s["preset"] = "aws.vpc_flow".into();
        serde_json::json!({ "sources": [s] })
    };
    // The expansion written out, and an older one: the same block without `log_status`.
    let doc = named.to_string();
    let text = tidemark::presets::expand(&doc).unwrap();
    let written: Value = serde_json::from_str(&text).unwrap();
    let mut older = written.clone();
    older["sources"][0]
        .as_object_mut()
        .unwrap()
        .remove("preset");
    older["sources"][0]["schema"]
        .as_array_mut()
        .unwrap()
        .retain(|c| c["name"] != "log_status");

    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/aws/vpc_flow");
    let file = "AWSLogs/111122223333/vpcflowlogs/us-east-1/2026/12/01/111122223333_vpcflowlogs_us-east-1_fl-1234abcd_20261201T0000Z_a1b2c3d4.log.gz";
    b.upload(
        &format!("vpc/{file}"),
        std::fs::read(fixtures.join(file)).unwrap(),
    )
    .await;
    run(&b, &older).await;

    let (code, p) = plan(&b, &named, &[]).await;
    assert_eq!(code, ExitCode::FAILURE, "{name}: {p}");
    let vpc = source(&p, "vpc");
    assert_eq!(
        keys(&vpc["stale_config"]),
        (1, vec![format!("vpc/{file}")]),
        "{name}: {p}"
    );
    let columns: Vec<&str> = vpc["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(
        columns.iter().any(|c| c.starts_with("+ log_status")),
        "{name}: {columns:?}"
    );

    // Written out, the expansion is the same configuration as the preset: the same plan.
    let mut written = written;
    written["sources"][0]
        .as_object_mut()
        .unwrap()
        .remove("preset");
    let (_, again) = plan(&b, &written, &[]).await;
    assert_eq!(source(&again, "vpc"), vpc, "{name}");
}

#[tokio::test]
async fn embedded_plan_sees_a_presets_expansion_change() {
    plan_sees_a_presets_expansion_change(Backends::embedded().await).await;
}

#[tokio::test]
async fn aws_plan_sees_a_presets_expansion_change() {
    plan_sees_a_presets_expansion_change(Backends::aws().await).await;
}
