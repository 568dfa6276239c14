//! Freshness on both backend pairs (S3 emulator + DynamoDB Local, and local folders +
//! SQLite): a source with `freshness: {max_silence, min_rows_per_window}` is flagged by the
//! scheduled reconcile (report entry, metric line) and by `status` (LAG) after a silent
//! period or too few rows, and not after a busy one — with and without `date_prefix`.

use std::process::ExitCode;
use std::sync::Arc;

use serde_json::{Value, json};
use tidemark::config::Config;
use tidemark::reconcile::{self, Freshness};
use tidemark_cli::Backend;
use tidemark_tests::{Backends, orders_csv, orders_doc};

const HOUR: i64 = 3_600_000;

/// The suite's document: `orders` (keys anywhere under `in/`) and `archive` (keys under
/// `keep/<yyyy>/<mm>/<dd>/`, read by date prefix) both expect 10 rows every 2 hours.
fn config(b: &Backends) -> Arc<Config> {
    let mut doc = orders_doc(&b.landing, &b.lake, 3, Some("reports/"));
    for i in [0, 2] {
        doc["sources"][i]["freshness"] = json!({"max_silence": "2h", "min_rows_per_window": 10});
    }
    doc["sources"][2]["reconcile"]["date_prefix"] = "{yyyy}/{mm}/{dd}/".into();
    Arc::new(Config::from_json(&doc.to_string()).unwrap())
}

async fn run(backend: &Backend) {
    let cli = tidemark_cli::parse_args(["tidemark", "run", "--json"]).unwrap();
    let mut out = Vec::new();
    let code = tidemark_cli::dispatch(cli.command, backend, cli.json, &mut out)
        .await
        .unwrap();
    assert_eq!(code, ExitCode::SUCCESS, "{}", String::from_utf8_lossy(&out));
}

/// One scheduled reconcile: the freshness entries by source, and the metric lines of them.
async fn scheduled(b: &Backends, backend: &Backend, run: &str) -> (Vec<Freshness>, Vec<Value>) {
    let event = json!({"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}});
    let (report, _) = reconcile::handle(
        &backend.pipeline,
        backend.config(),
        &event,
        &b.ctx(run),
        i64::MAX,
    )
    .await
    .unwrap();
    let metrics = report
        .metric_lines()
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|m| m.get("FreshnessBreached").is_some())
        .collect();
    (report.freshness, metrics)
}

fn of<'a>(entries: &'a [Freshness], id: &str) -> &'a Freshness {
    entries
        .iter()
        .find(|f| f.source_id == id)
        .unwrap_or_else(|| panic!("no freshness of {id}: {entries:?}"))
}

async fn status_lag(backend: &Backend, id: &str) -> String {
    let cli = tidemark_cli::parse_args(["tidemark", "status", "--source", id]).unwrap();
    let mut out = Vec::new();
    tidemark_cli::dispatch(cli.command, backend, cli.json, &mut out)
        .await
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    text.lines()
        .find(|l| l.starts_with(id))
        .unwrap_or_else(|| panic!("{text}"))
        .to_string()
}

async fn silent_sources_are_flagged_and_busy_ones_are_not(b: Backends) {
    let name = b.name;
    let backend = Backend::from_pipeline(b.pipeline_with(config(&b)), name);
    let today = |b: &Backends| {
        use tidemark::ports::Clock;
        chrono::DateTime::from_timestamp_millis(b.clock.now_ms())
            .unwrap()
            .format("%Y/%m/%d")
            .to_string()
    };
    // Busy: 11 rows in each source (≥ 10).
    b.upload("in/a.csv", orders_csv(0, 5).0).await;
    b.upload("in/b.csv", orders_csv(100, 6).0).await;
    b.upload(&format!("keep/{}/c.csv", today(&b)), orders_csv(200, 11).0)
        .await;
    run(&backend).await;
    b.clock.advance(60_000);
    let (fresh, metrics) = scheduled(&b, &backend, "sched-1").await;
    for id in ["orders", "archive"] {
        let f = of(&fresh, id);
        assert_eq!((f.rows, f.breached), (11, false), "{name} {id}: {f:?}");
        assert!(f.last_commit_ms.is_some());
    }
    assert_eq!(
        fresh.len(),
        2,
        "{name}: only the sources with freshness: {fresh:?}"
    );
    assert!(
        metrics.iter().all(|m| m["FreshnessBreached"] == 0),
        "{name}: {metrics:?}"
    );
    assert!(!status_lag(&backend, "orders").await.contains("silent"));

    // Silent: three hours later nothing was committed in the last two.
    b.clock.advance(3 * HOUR);
    let (fresh, metrics) = scheduled(&b, &backend, "sched-2").await;
    for id in ["orders", "archive"] {
        let f = of(&fresh, id);
        assert_eq!(
            (f.rows, f.objects, f.breached),
            (0, 0, true),
            "{name} {id}: {f:?}"
        );
    }
    let orders_metric = metrics.iter().find(|m| m["source_id"] == "orders").unwrap();
    assert_eq!(
        orders_metric["FreshnessBreached"], 1,
        "{name}: {orders_metric}"
    );
    assert_eq!(orders_metric["RecentRows"], 0);
    assert!(
        orders_metric["SilenceSeconds"].as_i64().unwrap() >= 3 * 3600,
        "{name}: {orders_metric}"
    );
    let lag = status_lag(&backend, "orders").await;
    assert!(
        lag.contains("silent 3h") && lag.contains("0 rows in 2h 00m (min 10)"),
        "{name}: {lag}"
    );

    // Too few: 5 new rows in `orders` are below its 10; 12 in `archive` are enough.
    b.upload("in/d.csv", orders_csv(300, 5).0).await;
    b.upload(&format!("keep/{}/e.csv", today(&b)), orders_csv(400, 12).0)
        .await;
    run(&backend).await;
    b.clock.advance(60_000);
    let (fresh, _) = scheduled(&b, &backend, "sched-3").await;
    let orders = of(&fresh, "orders");
    assert_eq!(
        (orders.rows, orders.breached),
        (5, true),
        "{name}: {orders:?}"
    );
    let archive = of(&fresh, "archive");
    assert_eq!(
        (archive.rows, archive.breached),
        (12, false),
        "{name}: {archive:?}"
    );
    let lag = status_lag(&backend, "orders").await;
    assert!(
        lag.contains("too few rows: 5 rows in 2h 00m (min 10)"),
        "{name}: {lag}"
    );
    assert!(
        !status_lag(&backend, "archive").await.contains("rows in"),
        "{name}"
    );
}

#[tokio::test]
async fn embedded_silent_sources_are_flagged_and_busy_ones_are_not() {
    silent_sources_are_flagged_and_busy_ones_are_not(Backends::embedded().await).await;
}

#[tokio::test]
async fn aws_silent_sources_are_flagged_and_busy_ones_are_not() {
    silent_sources_are_flagged_and_busy_ones_are_not(Backends::aws().await).await;
}
