//! Partitioning by the data (`partitioning: {"columns": [...]}`), on both backend pairs:
//! objects spread over 1, 10 and 1,000 partitions, each a set of files committed together
//! with each file's rows and sums; an overwrite that moves rows between partitions (the
//! partition left without rows of the object loses its file); a delete removing the whole
//! set; late data landing in an old partition; a crash between two files of a set, retried
//! into the same set; an object over `max_partitions_per_object` failing alone; reconcile
//! clean on both tiers; and DuckDB's hive-partitioned read of the lake equal to the source,
//! partition by partition.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::json;
use tidemark::config::Config;
use tidemark::process::{Faults, Step};
use tidemark_tests::{Backends, Events, LEASE_MARGIN_MS};

const EVENTS: &str = "events";

fn config(b: &Backends, max_partitions: Option<u32>) -> Arc<Config> {
    let mut doc = json!({"sources": [{
        "source_id": EVENTS, "bucket": b.landing, "prefix": "events/", "format": "jsonl",
        "schema": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "at", "type": "timestamp"},
            {"name": "region", "type": "string"},
            {"name": "amount", "type": "int64"}
        ],
        "sum_columns": ["amount"],
        "output": {"bucket": b.lake, "prefix": "events/", "partitioning": {"columns": [
            {"from": "at", "as": "dt", "transform": "day"},
            {"from": "region"}
        ]}},
        "reconcile": {"deep_sample": 1.0},
        "max_attempts": 2
    }]});
    if let Some(n) = max_partitions {
        doc["sources"][0]["output"]["max_partitions_per_object"] = json!(n);
    }
    Arc::new(Config::from_json(&doc.to_string()).expect("valid document"))
}

/// One row: (id, day of November 2026, region, amount); a region of `None` is NULL.
type Row = (i64, u32, Option<String>, i64);

fn jsonl(rows: &[Row]) -> String {
    rows.iter()
        .map(|(id, day, region, amount)| {
            json!({"id": id, "at": format!("2026-11-{day:02}T10:00:00Z"), "region": region,
                   "amount": amount})
            .to_string()
                + "\n"
        })
        .collect()
}

/// The partition directories of a row.
fn dirs(row: &Row) -> String {
    format!(
        "dt=2026-11-{:02}/region={}/",
        row.1,
        row.2.as_deref().unwrap_or("__HIVE_DEFAULT_PARTITION__")
    )
}

/// Rows and the sum of `amount` per partition directory.
fn per_partition<'a>(rows: impl IntoIterator<Item = &'a Row>) -> BTreeMap<String, (u64, i64)> {
    let mut out = BTreeMap::new();
    for r in rows {
        let e = out.entry(dirs(r)).or_insert((0, 0));
        e.0 += 1;
        e.1 += r.3;
    }
    out
}

fn rows(first: i64, days: &[u32], regions: &[&str], per: usize) -> Vec<Row> {
    let mut out = Vec::new();
    let mut id = first;
    for day in days {
        for region in regions {
            for _ in 0..per {
                out.push((id, *day, Some(region.to_string()), id % 7 + 1));
                id += 1;
            }
        }
    }
    out
}

/// The committed set of `key`: output key → (rows, sums["amount"]).
async fn committed_set(b: &Backends, key: &str) -> BTreeMap<String, (u64, String)> {
    let r = b.ledger.get(EVENTS, key).await.unwrap().expect("a record");
    let c = r.committed.expect("committed");
    c.outputs
        .iter()
        .map(|o| {
            (
                o.key.clone(),
                (o.rows.expect("a file's rows"), o.sums["amount"].clone()),
            )
        })
        .collect()
}

/// The lake read by DuckDB with hive partitioning: rows and sum per partition.
async fn duckdb_per_partition(b: &Backends) -> BTreeMap<String, (u64, i64)> {
    let dir = tempfile::tempdir().unwrap();
    for (key, body) in b.lake_objects("events/").await {
        let path = dir.path().join(&key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }
    let script = r#"
import duckdb, json, sys
rows = duckdb.sql(f"""
  select dt, region, count(*)::bigint, sum(amount)::bigint
  from read_parquet('{sys.argv[1]}/events/**/*.parquet', hive_partitioning = true,
                    hive_types_autocast = false)
  group by all order by all""").fetchall()
print(json.dumps([[r[0], r[1], r[2], r[3]] for r in rows]))
"#;
    let out = std::process::Command::new(tidemark_tests::table_reader::reader_python())
        .arg("-c")
        .arg(script)
        .arg(dir.path())
        .output()
        .expect("run DuckDB");
    assert!(
        out.status.success(),
        "DuckDB: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<(String, Option<String>, u64, i64)> =
        serde_json::from_slice(&out.stdout).unwrap();
    rows.into_iter()
        .map(|(dt, region, n, sum)| {
            // DuckDB reads the default partition's value as NULL.
            let region = region.unwrap_or_else(|| "__HIVE_DEFAULT_PARTITION__".into());
            (format!("dt={dt}/region={region}/"), (n, sum))
        })
        .collect()
}

/// Lands `rows` at `key`, crashes its conversion between the first and second files of its
/// set (nothing committed), then delivers the event again after the lease: it commits. The
/// files the crashed attempt announced.
async fn crash_between_files_then_retry(
    b: &Backends,
    config: &Arc<Config>,
    key: &str,
    rows: &[Row],
) -> Vec<String> {
    let name = b.name;
    b.upload(key, jsonl(rows)).await;
    let mut crashing = b.pipeline_with(config.clone());
    crashing.faults = Arc::new(BetweenFiles(Mutex::new(true)));
    let event = json!({"Records": [b.created_record(key, "00000000000000F000").await]});
    let r = tidemark::ingest::handle(&crashing, &event, &b.ctx("crash"), 4)
        .await
        .unwrap();
    assert!(!r.errors.is_empty(), "{name}: the crash is an error");
    let record = b.ledger.get(EVENTS, key).await.unwrap().unwrap();
    assert!(record.committed.is_none(), "{name}: nothing committed");
    b.clock.advance(LEASE_MARGIN_MS + 1_000);
    let r = tidemark::ingest::handle(&b.pipeline_with(config.clone()), &event, &b.ctx("retry"), 4)
        .await
        .unwrap();
    assert!(r.errors.is_empty(), "{name}: {:?}", r.errors);
    record.writing
}

/// Crashes the worker between the first and second files of a set, once.
struct BetweenFiles(Mutex<bool>);

impl Faults for BetweenFiles {
    fn check(&self, step: Step, _: &str) -> tidemark::Result<()> {
        let mut armed = self.0.lock().unwrap();
        if step == Step::BetweenPartFiles && *armed {
            *armed = false;
            return Err(tidemark::ProcessError::Crashed(step.as_str()));
        }
        Ok(())
    }
}

async fn objects_become_sets_of_partition_files(b: Backends) {
    let name = b.name;
    let config = config(&b, None);
    let mut ev = Events::new(&b, &config);
    let mut source: BTreeMap<String, Vec<Row>> = BTreeMap::new();

    // 1, 10 and 1,000 partitions.
    let one = rows(1, &[1], &["eu"], 5);
    let ten = rows(100, &[1, 2, 3, 4, 5], &["eu", "us"], 3);
    let regions: Vec<String> = (0..1000).map(|i| format!("r{i:04}")).collect();
    let regions: Vec<&str> = regions.iter().map(String::as_str).collect();
    let thousand = rows(10_000, &[7], &regions, 1);
    for (key, r) in [
        ("events/one.json", &one),
        ("events/ten.json", &ten),
        ("events/thousand.json", &thousand),
    ] {
        ev.put(key, &jsonl(r)).await;
        source.insert(key.to_string(), r.clone());
    }
    for (key, expected) in [
        ("events/one.json", 1),
        ("events/ten.json", 10),
        ("events/thousand.json", 1000),
    ] {
        let set = committed_set(&b, key).await;
        assert_eq!(set.len(), expected, "{name}: {key}");
        let want = per_partition(&source[key]);
        let rel = key.strip_prefix("events/").unwrap();
        let got: BTreeMap<String, (u64, i64)> = set
            .iter()
            .map(|(k, (n, s))| {
                let dirs = k
                    .strip_prefix("events/")
                    .and_then(|k| k.strip_suffix(&format!("{rel}.parquet")))
                    .unwrap_or_else(|| panic!("{k}: not under events/…/{rel}.parquet"));
                (dirs.to_string(), (*n, s.parse().unwrap()))
            })
            .collect();
        assert_eq!(
            got, want,
            "{name}: {key}: each file's rows and sums in the ledger"
        );
    }
    // A NULL region lands in the default partition.
    let nulls = vec![(50_000, 3, None, 9), (50_001, 3, Some("eu".into()), 1)];
    ev.put("events/nulls.json", &jsonl(&nulls)).await;
    source.insert("events/nulls.json".into(), nulls);
    assert_eq!(committed_set(&b, "events/nulls.json").await.len(), 2);

    // An overwrite moving rows between partitions: day 5 is gone from the object.
    let moved = rows(200, &[1, 2, 3, 6], &["eu", "us"], 2);
    ev.put("events/ten.json", &jsonl(&moved)).await;
    source.insert("events/ten.json".into(), moved);
    let set = committed_set(&b, "events/ten.json").await;
    assert_eq!(set.len(), 8, "{name}");
    let lake = b.lake_objects("events/").await;
    for day in [4, 5] {
        for region in ["eu", "us"] {
            let old = format!("events/dt=2026-11-{day:02}/region={region}/ten.json.parquet");
            assert!(!lake.contains_key(&old), "{name}: {old} left behind");
        }
    }

    // Late data: a new object whose rows belong to an old day.
    let late = rows(300, &[1], &["eu"], 4);
    ev.put("events/late.json", &jsonl(&late)).await;
    source.insert("events/late.json".into(), late);
    assert!(
        b.lake_objects("events/dt=2026-11-01/region=eu/")
            .await
            .contains_key("events/dt=2026-11-01/region=eu/late.json.parquet"),
        "{name}"
    );

    // A crash between two files of a set: nothing committed; the retry writes the same set.
    let crash = rows(400, &[8, 9], &["eu"], 2);
    crash_between_files_then_retry(&b, &config, "events/crash.json", &crash).await;
    assert_eq!(committed_set(&b, "events/crash.json").await.len(), 2);
    source.insert("events/crash.json".into(), crash);

    // A delete removes the whole set.
    ev.delete("events/one.json").await;
    source.remove("events/one.json");
    assert!(
        !b.lake_objects("events/")
            .await
            .keys()
            .any(|k| k.ends_with("/one.json.parquet")),
        "{name}"
    );

    // An object of no rows: an empty set, committed with no file.
    ev.put("events/empty.json", "").await;
    source.insert("events/empty.json".into(), Vec::new());
    assert!(
        committed_set(&b, "events/empty.json").await.is_empty(),
        "{name}"
    );

    // The lake, read by DuckDB with hive partitioning, is the source partition by partition.
    let want = per_partition(source.values().flatten());
    assert_eq!(duckdb_per_partition(&b).await, want, "{name}");

    // Reconcile, both tiers on every object: clean.
    let report = b.reconcile_all(&config, EVENTS).await;
    assert!(report.clean(), "{name}: {report:#?}");
    assert_eq!(
        report.deep_checked.len(),
        source.len(),
        "{name}: every object deeply"
    );
    let rows_total: u64 = source.values().map(|r| r.len() as u64).sum();
    let sum_total: i64 = source.values().flatten().map(|r| r.3).sum();
    for t in [
        &report.totals.ledger,
        &report.totals.deep.lake,
        &report.totals.deep.source,
    ] {
        assert_eq!(t.rows, rows_total, "{name}: {report:#?}");
        assert_eq!(t.sums["amount"], sum_total.to_string(), "{name}");
    }
}

/// `plan --json` under `config`: the events source's plan.
async fn plan(b: &Backends, config: &Arc<Config>) -> serde_json::Value {
    let backend = tidemark_cli::Backend::from_pipeline(b.pipeline_with(config.clone()), b.name);
    let cli = tidemark_cli::parse_args(["tidemark", "--json", "plan"]).unwrap();
    let mut out = Vec::new();
    tidemark_cli::dispatch(cli.command, &backend, cli.json, &mut out)
        .await
        .expect("plan runs");
    let p: serde_json::Value = serde_json::from_slice(&out).unwrap();
    p["sources"][0].clone()
}

/// The limit is not part of the configuration; changing what partitions is, and `plan` says
/// how the files' columns change (a column leaving the path comes back into the files).
async fn plan_sees_a_partitioning_change_and_not_the_limit(b: Backends) {
    let name = b.name;
    let current = config(&b, None);
    let mut ev = Events::new(&b, &current);
    ev.put("events/a.json", &jsonl(&rows(1, &[1, 2], &["eu", "us"], 1)))
        .await;
    let p = plan(&b, &config(&b, Some(3))).await;
    assert_eq!(
        (&p["up_to_date"], &p["stale_config"]["count"]),
        (&json!(1), &json!(0)),
        "{name}: {p:#}"
    );
    let mut by_day = current.as_ref().clone();
    by_day.sources[0]
        .doc
        .output
        .partitioning
        .columns
        .truncate(1);
    let by_day = Arc::new(
        Config::from_json(&json!({"sources": [by_day.sources[0].doc]}).to_string()).unwrap(),
    );
    let p = plan(&b, &by_day).await;
    assert_eq!(p["stale_config"]["count"], 1, "{name}: {p:#}");
    assert_eq!(p["columns"], json!(["+ region string"]), "{name}: {p:#}");
}

async fn too_many_partitions_fail_the_object_alone(b: Backends) {
    let name = b.name;
    let config = config(&b, Some(5));
    let wide = rows(1, &[1, 2, 3], &["eu", "us"], 1); // 6 partitions
    let narrow = rows(100, &[1], &["eu", "us"], 2); // 2
    b.upload("events/wide.json", jsonl(&wide)).await;
    b.upload("events/narrow.json", jsonl(&narrow)).await;
    let mut events = Vec::new();
    for (i, key) in ["events/wide.json", "events/narrow.json"]
        .iter()
        .enumerate()
    {
        events.push(b.created_record(key, &format!("{:018X}", 0x100 + i)).await);
    }
    let r = tidemark::ingest::handle(
        &b.pipeline_with(config.clone()),
        &json!({"Records": events}),
        &b.ctx("limit"),
        4,
    )
    .await
    .unwrap();
    let record = b
        .ledger
        .get(EVENTS, "events/wide.json")
        .await
        .unwrap()
        .unwrap();
    let error = record.last_error.clone().unwrap_or_default();
    assert!(
        error.contains("more than 5 partitions (max_partitions_per_object)")
            && error.contains("events/wide.json"),
        "{name}: {error:?} / {:?}",
        r.errors
    );
    assert!(record.committed.is_none(), "{name}");
    assert_eq!(
        committed_set(&b, "events/narrow.json").await.len(),
        2,
        "{name}"
    );
    let lake: Vec<String> = b.lake_objects("events/").await.into_keys().collect();
    assert!(
        lake.iter().all(|k| k.ends_with("/narrow.json.parquet")),
        "{name}: {lake:?}"
    );
}

/// The events source publishing a Delta table (merged by `id`, latest `at` winning, when
/// `merge`).
fn table_config(b: &Backends, merge: bool) -> Arc<Config> {
    let mut doc = serde_json::to_value(&config(b, None).sources[0].doc).unwrap();
    doc["output"]["table"] = if merge {
        json!({"format": "delta", "merge_keys": ["id"], "merge_order": "at"})
    } else {
        json!({"format": "delta"})
    };
    Arc::new(Config::from_json(&json!({"sources": [doc]}).to_string()).expect("valid document"))
}

/// The Delta table read by the Python `deltalake` package: rows and sum per partition, and
/// the ids.
fn delta_per_partition(uri: &str) -> (BTreeMap<String, (u64, i64)>, Vec<i64>) {
    let t = tidemark_tests::table_reader::read_table(uri, None);
    let columns: Vec<&str> = t["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let at = |name: &str| columns.iter().position(|c| *c == name).expect(name);
    let (dt, region, amount, id) = (at("dt"), at("region"), at("amount"), at("id"));
    let mut out = BTreeMap::new();
    let mut ids = Vec::new();
    for row in t["table"].as_array().unwrap() {
        let region = row[region].as_str().unwrap_or("__HIVE_DEFAULT_PARTITION__");
        let key = format!("dt={}/region={region}/", row[dt].as_str().unwrap());
        let e = out.entry(key).or_insert((0, 0));
        e.0 += 1;
        e.1 += row[amount].as_i64().unwrap();
        ids.push(row[id].as_i64().unwrap());
    }
    ids.sort_unstable();
    (out, ids)
}

/// Lands `r` at `key` (its event processed) and records it as the source's.
async fn land(
    ev: &mut Events<'_>,
    source: &mut BTreeMap<String, Vec<Row>>,
    key: &str,
    r: Vec<Row>,
) {
    ev.put(key, &jsonl(&r)).await;
    source.insert(key.to_string(), r);
}

/// A source partitioned by the data publishing a Delta table: each object's set lands in one
/// table version with its partition values; overwrites moving rows between partitions,
/// late data, deletes, a crash between two files, compaction and a replace of a compacted
/// object all leave the table equal to the source per partition.
async fn the_delta_table_is_the_source_per_partition(b: Backends) {
    use tidemark_delta::maintain::CompactOptions;
    let name = b.name;
    let config = table_config(&b, false);
    let source_of = &config.sources[0];
    let uri = tidemark_tests::table_reader::table_uri(&b, source_of);
    let publisher = tidemark_tests::table_reader::publisher(&b, &config);
    let mut ev = Events::new(&b, &config);
    let mut source: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    land(
        &mut ev,
        &mut source,
        "events/ten.json",
        rows(1, &[1, 2, 3, 4, 5], &["eu", "us"], 3),
    )
    .await;
    land(
        &mut ev,
        &mut source,
        "events/nulls.json",
        vec![(90, 3, None, 9), (91, 3, Some("a/b".into()), 1)],
    )
    .await;
    let check = |source: &BTreeMap<String, Vec<Row>>, what: &str| {
        let (got, ids) = delta_per_partition(&uri);
        assert_eq!(
            got,
            per_partition(source.values().flatten()),
            "{name}: {what}"
        );
        let mut want: Vec<i64> = source.values().flatten().map(|r| r.0).collect();
        want.sort_unstable();
        assert_eq!(ids, want, "{name}: {what}: every row once");
    };
    let p = publisher.publish_all(EVENTS).await.unwrap();
    assert_eq!(p.added, 12, "{name}: {p:?}");
    check(&source, "first publish");

    // The partition values are in the log, with Hive's escapes undone.
    let table =
        tidemark_delta::delta::load_existing(&tidemark_tests::table_reader::tables(&b), source_of)
            .await
            .unwrap()
            .expect("a table");
    let values: Vec<_> = table
        .snapshot()
        .unwrap()
        .log_data()
        .iter()
        .filter(|f| f.path().contains("/nulls.json-"))
        .map(|f| f.path().to_string())
        .collect();
    assert_eq!(values.len(), 2, "{name}: {values:?}");
    assert!(
        values
            .iter()
            .any(|p| p.starts_with("dt=2026-11-03/region=a%2Fb/")),
        "{name}: {values:?}"
    );

    // An overwrite moving rows out of days 4 and 5 and into day 6; late data on day 1.
    land(
        &mut ev,
        &mut source,
        "events/ten.json",
        rows(200, &[1, 2, 3, 6], &["eu", "us"], 2),
    )
    .await;
    land(
        &mut ev,
        &mut source,
        "events/late.json",
        rows(300, &[1], &["eu"], 4),
    )
    .await;
    let p = publisher.publish_all(EVENTS).await.unwrap();
    assert_eq!((p.added, p.removed), (9, 10), "{name}: one version: {p:?}");
    check(&source, "overwrite and late data");

    // A crash between two files of a set: the retry's set is published, the crashed
    // attempt's files are deleted (they were never in the table).
    let crash = rows(400, &[8, 9], &["eu"], 2);
    let announced = crash_between_files_then_retry(&b, &config, "events/crash.json", &crash).await;
    assert_eq!(announced.len(), 2, "{name}: the set was announced");
    source.insert("events/crash.json".into(), crash);
    for k in &announced {
        assert!(
            b.store.head(&b.lake, k).await.unwrap().is_none(),
            "{name}: {k} left"
        );
    }
    publisher.publish_all(EVENTS).await.unwrap();
    check(&source, "after the crash");

    // Compaction of the closed partitions, then a replace and a delete of compacted objects.
    b.clock.advance(2 * 24 * 3_600_000);
    let now_closed = CompactOptions {
        compact_after: std::time::Duration::ZERO,
        ..CompactOptions::default()
    };
    let c = publisher.compact(EVENTS, &now_closed).await.unwrap();
    assert!(c.partitions >= 1 && c.files_in >= 2, "{name}: {c:?}");
    check(&source, "compacted");
    land(
        &mut ev,
        &mut source,
        "events/late.json",
        rows(500, &[1, 7], &["us"], 2),
    )
    .await;
    ev.delete("events/ten.json").await;
    source.remove("events/ten.json");
    publisher
        .publish_keys(
            EVENTS,
            &["events/late.json".into(), "events/ten.json".into()],
        )
        .await
        .unwrap();
    check(&source, "replace and delete after compaction");
    assert_eq!(
        publisher.publish_all(EVENTS).await.unwrap().committed,
        None,
        "{name}"
    );
    assert!(publisher.check(EVENTS).await.unwrap().is_clean(), "{name}");
    let report = b.reconcile_all(&config, EVENTS).await;
    assert!(report.clean(), "{name}: {report:#?}");
}

/// Upsert by key across partitions: a key whose newest row moved to another partition is
/// in the table once, in its new partition; deleting the newer object brings the older row
/// back.
async fn a_merged_table_keeps_one_row_per_key_across_partitions(b: Backends) {
    let name = b.name;
    let config = table_config(&b, true);
    let uri = tidemark_tests::table_reader::table_uri(&b, &config.sources[0]);
    let publisher = tidemark_tests::table_reader::publisher(&b, &config);
    let mut ev = Events::new(&b, &config);
    // Ids 1..=6 on day 1 in eu; then ids 4..=8 on day 2 in us (later `at`: they win).
    let a: Vec<Row> = (1..=6).map(|id| (id, 1, Some("eu".into()), 1)).collect();
    let newer: Vec<Row> = (4..=8).map(|id| (id, 2, Some("us".into()), 10)).collect();
    ev.put("events/a.json", &jsonl(&a)).await;
    ev.put("events/b.json", &jsonl(&newer)).await;
    publisher.publish_all(EVENTS).await.unwrap();
    let (got, ids) = delta_per_partition(&uri);
    assert_eq!(ids, (1..=8).collect::<Vec<_>>(), "{name}: one row per key");
    let want = BTreeMap::from([
        ("dt=2026-11-01/region=eu/".to_string(), (3, 3)),
        ("dt=2026-11-02/region=us/".to_string(), (5, 50)),
    ]);
    assert_eq!(got, want, "{name}");
    ev.delete("events/b.json").await;
    publisher.publish_all(EVENTS).await.unwrap();
    let (got, ids) = delta_per_partition(&uri);
    assert_eq!(ids, (1..=6).collect::<Vec<_>>(), "{name}");
    assert_eq!(
        got,
        BTreeMap::from([("dt=2026-11-01/region=eu/".to_string(), (6, 6))]),
        "{name}"
    );
}

/// `tidemark --json ARGS` on `b` under `config`: its exit code and output.
async fn cli(
    b: &Backends,
    config: &Arc<Config>,
    args: &[&str],
) -> Result<(std::process::ExitCode, serde_json::Value), String> {
    let backend = tidemark_cli::Backend::from_pipeline(b.pipeline_with(config.clone()), b.name);
    let mut argv = vec!["tidemark", "--json"];
    argv.extend(args);
    let cli = tidemark_cli::parse_args(&argv).unwrap();
    let mut out = Vec::new();
    let code = tidemark_cli::dispatch(cli.command, &backend, cli.json, &mut out)
        .await
        .map_err(|e| e.to_string())?;
    Ok((code, serde_json::from_slice(&out).unwrap()))
}

/// `rename-source` moves a partitioned source's sets (its files stay where the new id writes
/// them), and refuses when the new id partitions otherwise.
async fn a_partitioned_source_renames(b: Backends) {
    let name = b.name;
    let config = config(&b, None);
    let mut ev = Events::new(&b, &config);
    ev.put("events/a.json", &jsonl(&rows(1, &[1, 2], &["eu", "us"], 2)))
        .await;
    let renamed = |partitioning: serde_json::Value| {
        let mut doc = serde_json::to_value(&config.sources[0].doc).unwrap();
        doc["source_id"] = "events_v2".into();
        doc["output"]["partitioning"] = partitioning;
        Arc::new(Config::from_json(&json!({"sources": [doc]}).to_string()).unwrap())
    };
    let by_day = renamed(json!({"columns": [{"from": "at", "as": "dt", "transform": "day"}]}));
    let refused = cli(&b, &by_day, &["rename-source", EVENTS, "events_v2"])
        .await
        .unwrap_err();
    assert!(
        refused.contains("(NEW would write s3://")
            && refused.contains("/events/dt=…/a.json.parquet)"),
        "{name}: another layout is refused: {refused}"
    );
    let same = renamed(serde_json::to_value(&config.sources[0].doc.output.partitioning).unwrap());
    let (code, report) = cli(&b, &same, &["rename-source", EVENTS, "events_v2"])
        .await
        .unwrap();
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{name}: {report}");
    assert_eq!(report["moved"], 1, "{name}: {report}");
    let (_, run) = cli(&b, &same, &["run"]).await.unwrap();
    assert_eq!(run["total"]["processed"], 0, "{name}: {run}");
}

#[tokio::test]
async fn embedded_a_partitioned_source_renames() {
    a_partitioned_source_renames(Backends::embedded().await).await;
}

#[tokio::test]
async fn aws_a_partitioned_source_renames() {
    a_partitioned_source_renames(Backends::aws().await).await;
}

#[tokio::test]
async fn embedded_the_delta_table_is_the_source_per_partition() {
    the_delta_table_is_the_source_per_partition(Backends::embedded().await).await;
}

#[tokio::test]
async fn aws_the_delta_table_is_the_source_per_partition() {
    the_delta_table_is_the_source_per_partition(Backends::aws().await).await;
}

#[tokio::test]
async fn embedded_a_merged_table_keeps_one_row_per_key_across_partitions() {
    a_merged_table_keeps_one_row_per_key_across_partitions(Backends::embedded().await).await;
}

#[tokio::test]
async fn aws_a_merged_table_keeps_one_row_per_key_across_partitions() {
    a_merged_table_keeps_one_row_per_key_across_partitions(Backends::aws().await).await;
}

#[tokio::test]
async fn embedded_objects_become_sets_of_partition_files() {
    objects_become_sets_of_partition_files(Backends::embedded().await).await;
}

#[tokio::test]
async fn aws_objects_become_sets_of_partition_files() {
    objects_become_sets_of_partition_files(Backends::aws().await).await;
}

#[tokio::test]
async fn embedded_plan_sees_a_partitioning_change_and_not_the_limit() {
    plan_sees_a_partitioning_change_and_not_the_limit(Backends::embedded().await).await;
}

#[tokio::test]
async fn aws_plan_sees_a_partitioning_change_and_not_the_limit() {
    plan_sees_a_partitioning_change_and_not_the_limit(Backends::aws().await).await;
}

#[tokio::test]
async fn embedded_too_many_partitions_fail_the_object_alone() {
    too_many_partitions_fail_the_object_alone(Backends::embedded().await).await;
}

#[tokio::test]
async fn aws_too_many_partitions_fail_the_object_alone() {
    too_many_partitions_fail_the_object_alone(Backends::aws().await).await;
}
