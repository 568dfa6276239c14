//! The soak run: the ingest handler fed continuously on the local stack (DynamoDB Local and
//! the S3 emulator), in this process, with its resources sampled over time.
//!
//! ```text
//! bench/soak/run.sh [MINUTES]      # starts the local stack, builds, runs, plots
//! ```
//!
//! Each round lands 1–10 objects (a bounded key space per source, so most are overwrites)
//! and hands their events to `ingest::handle` as one SQS batch; one round in five delivers
//! the previous batch again (duplicates), one object in fifty is deleted, one in twenty is a
//! bad file (a CSV with a bad line, a truncated Parquet file, bytes that are no Avro). The
//! objects are CSV, gzip'd CSV, JSON Lines, zstd'd JSON Lines, nested JSON Lines (the
//! clickstream fixture under its schema, rescuing), Parquet, Avro and ORC, and JSON Lines
//! partitioned by day and customer.
//!
//! Every `--sample-seconds` it appends to `<out>/soak.csv`: elapsed seconds, RSS and peak RSS
//! (kB, from /proc/self/status), open file descriptors (/proc/self/fd), bytes of files under
//! the temporary directory (TMPDIR: give the run a directory of its own), the rounds, objects
//! and failures so far, and the window's handler latency (p50, p95, max, ms). At the end it
//! writes `<out>/summary.json`.

use std::collections::VecDeque;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};
use tidemark::config::Config;
use tidemark::ports::Clock;
use tidemark::process::RunContext;
use tidemark_tests::{Backends, orders_columns, orders_csv, orders_jsonl, orders_source, sqs};

/// Keys per source: overwrites keep the buckets and the ledger bounded.
const KEYS: usize = 60;

struct Args {
    minutes: f64,
    sample: Duration,
    out: PathBuf,
    seed: u64,
}

fn args() -> Args {
    let mut a = Args {
        minutes: 60.0,
        sample: Duration::from_secs(10),
        out: PathBuf::from("bench/soak/results"),
        seed: 7,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--minutes" => a.minutes = value.parse().expect("--minutes"),
            "--sample-seconds" => a.sample = Duration::from_secs_f64(value.parse().expect("s")),
            "--out" => a.out = PathBuf::from(value),
            "--seed" => a.seed = value.parse().expect("--seed"),
            other => panic!("unknown flag {other} (--minutes, --sample-seconds, --out, --seed)"),
        }
    }
    a
}

fn fixture(path: &str) -> Vec<u8> {
    let p = format!("{}/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn config(b: &Backends) -> Arc<Config> {
    let source = |id: &str, format: &str| {
        orders_source((&b.landing, &b.lake), id, &format!("{id}/"), format, 3)
    };
    let mut partitioned = source("part", "jsonl");
    partitioned["output"]["partitioning"] = json!({"columns": [
        {"from": "ordered_at", "as": "dt", "transform": "day"}, {"from": "customer"}]});
    let schema: Value = serde_json::from_slice(&fixture("nested/clickstream.schema.json")).unwrap();
    let clicks = json!({"source_id": "clicks", "bucket": b.landing, "prefix": "clicks/",
        "format": "jsonl", "schema": schema, "on_unknown_field": "rescue",
        "on_bad_value": "rescue", "json": {"keys": "case_insensitive"},
        "output": {"bucket": b.lake, "prefix": "clicks/"}, "max_attempts": 3});
    let doc = json!({"sources": [source("csv", "csv"), source("jsonl", "jsonl"),
        source("parquet", "parquet"), source("avro", "avro"), source("orc", "orc"),
        partitioned, clicks]});
    Arc::new(Config::from_json(&doc.to_string()).expect("valid document"))
}

/// Parquet bytes of `rows` orders (converted from CSV as a producer would write them).
fn parquet_orders(first: i64, rows: usize) -> Vec<u8> {
    let schema: Vec<tidemark::schema::ColumnSpec> =
        serde_json::from_value(orders_columns()).unwrap();
    let spec = tidemark::convert::ConvertSpec::with_columns(
        tidemark::convert::InputFormat::Csv(Default::default()),
        &schema,
    );
    let mut out = Vec::new();
    tidemark::convert::convert(orders_csv(first, rows).0.as_bytes(), &spec, &mut out)
        .expect("orders convert");
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// One object to land: its key and bytes (bad ones included).
fn object(rng: &mut ChaCha8Rng, id: &mut i64) -> (String, Vec<u8>) {
    let n = rng.random_range(0..KEYS);
    let rows = rng.random_range(5..400);
    let first = *id;
    *id += rows as i64;
    let bad = rng.random_bool(0.05);
    match rng.random_range(0..9) {
        0 if bad => (
            format!("csv/{n}.csv"),
            b"order_id,customer\nx,\"y\n".to_vec(),
        ),
        0 => (
            format!("csv/{n}.csv"),
            orders_csv(first, rows).0.into_bytes(),
        ),
        1 => (
            format!("csv/{n}.csv.gz"),
            gzip(orders_csv(first, rows).0.as_bytes()),
        ),
        2 => (
            format!("jsonl/{n}.jsonl"),
            orders_jsonl(first, rows).0.into_bytes(),
        ),
        3 => (
            format!("jsonl/{n}.jsonl.zst"),
            zstd::encode_all(orders_jsonl(first, rows).0.as_bytes(), 1).unwrap(),
        ),
        4 if bad => {
            let whole = parquet_orders(first, rows);
            (
                format!("parquet/{n}.parquet"),
                whole[..whole.len() / 2].to_vec(),
            )
        }
        4 => (format!("parquet/{n}.parquet"), parquet_orders(first, rows)),
        5 if bad => (
            format!("avro/{n}.avro"),
            b"Obj\x01 not avro at all".to_vec(),
        ),
        5 => {
            let codec = ["null", "deflate", "snappy", "zstandard"][n % 4];
            (
                format!("avro/{n}.avro"),
                fixture(&format!("avro_orc/orders-{codec}.avro")),
            )
        }
        6 => {
            let codec = ["uncompressed", "zlib", "snappy", "zstd"][n % 4];
            (
                format!("orc/{n}.orc"),
                fixture(&format!("avro_orc/orders-{codec}.orc")),
            )
        }
        7 => (
            format!("part/{n}.jsonl"),
            orders_jsonl(first, rows).0.into_bytes(),
        ),
        _ => {
            let lines = fixture("nested/clickstream.jsonl");
            let text = String::from_utf8(lines).unwrap();
            let take: Vec<&str> = text.lines().skip(n).take(rows / 4 + 1).collect();
            (
                format!("clicks/{n}.jsonl"),
                (take.join("\n") + "\n").into_bytes(),
            )
        }
    }
}

/// Bytes of the files under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => bytes_under(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    std::fs::create_dir_all(&a.out).unwrap();
    let tmp = std::env::temp_dir();
    let b = Backends::aws().await;
    let config = config(&b);
    let pipeline = b.pipeline_with(config);
    let mut rng = ChaCha8Rng::seed_from_u64(a.seed);
    let mut csv = std::fs::File::create(a.out.join("soak.csv")).unwrap();
    writeln!(
        csv,
        "seconds,rss_kb,peak_rss_kb,fds,tmp_bytes,rounds,objects,failed,p50_ms,p95_ms,max_ms"
    )
    .unwrap();
    let started = Instant::now();
    let end = started + Duration::from_secs_f64(a.minutes * 60.0);
    let mut next_sample = started;
    let (mut rounds, mut objects, mut failed, mut id) = (0u64, 0u64, 0u64, 1i64);
    let mut window: Vec<f64> = Vec::new();
    let mut all: Vec<f64> = Vec::new();
    let mut samples: VecDeque<Value> = VecDeque::new();
    let mut previous: Option<Value> = None;
    let mut seq: u64 = 0x10_0000;
    while Instant::now() < end {
        let event = match previous.take() {
            Some(again) if rng.random_bool(0.2) => again,
            _ => {
                let mut records = Vec::new();
                for _ in 0..rng.random_range(1..=10) {
                    seq += 1;
                    let (key, body) = object(&mut rng, &mut id);
                    let sequencer = format!("{seq:018X}");
                    records.push(if rng.random_bool(0.02) {
                        b.store.delete(&b.landing, &key, None).await.unwrap();
                        b.removed_record(&key, &sequencer)
                    } else {
                        b.upload(&key, &body).await;
                        b.created_record(&key, &sequencer).await
                    });
                }
                let ids: Vec<String> = (0..records.len())
                    .map(|i| format!("m{rounds}-{i}"))
                    .collect();
                sqs(ids
                    .iter()
                    .zip(records)
                    .map(|(id, r)| (id.as_str(), json!({"Records": [r]})))
                    .collect())
            }
        };
        let ctx = RunContext::new(format!("soak-{rounds}"), b.clock.now_ms() + 900_000);
        let t = Instant::now();
        let r = tidemark::ingest::handle(&pipeline, &event, &ctx, 4)
            .await
            .expect("the handler answers");
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        window.push(ms);
        all.push(ms);
        rounds += 1;
        objects += event["Records"].as_array().map_or(0, |r| r.len() as u64);
        failed += r.errors.len() as u64;
        previous = Some(event);
        if Instant::now() >= next_sample {
            window.sort_by(f64::total_cmp);
            let row = json!({
                "seconds": started.elapsed().as_secs_f64().round(),
                "rss_kb": status_kb("VmRSS:"), "peak_rss_kb": status_kb("VmHWM:"),
                "fds": open_fds(), "tmp_bytes": bytes_under(&tmp),
                "rounds": rounds, "objects": objects, "failed": failed,
                "p50_ms": quantile(&window, 0.5), "p95_ms": quantile(&window, 0.95),
                "max_ms": window.last().copied().unwrap_or(0.0),
            });
            writeln!(
                csv,
                "{},{},{},{},{},{},{},{},{:.1},{:.1},{:.1}",
                row["seconds"],
                row["rss_kb"],
                row["peak_rss_kb"],
                row["fds"],
                row["tmp_bytes"],
                rounds,
                objects,
                failed,
                row["p50_ms"].as_f64().unwrap(),
                row["p95_ms"].as_f64().unwrap(),
                row["max_ms"].as_f64().unwrap()
            )
            .unwrap();
            csv.flush().unwrap();
            samples.push_back(row);
            window.clear();
            next_sample += a.sample;
        }
    }
    all.sort_by(f64::total_cmp);
    let summary = json!({
        "minutes": a.minutes, "seed": a.seed, "rounds": rounds, "objects": objects,
        "failed": failed, "latency_ms": {"p50": quantile(&all, 0.5), "p95": quantile(&all, 0.95),
        "p99": quantile(&all, 0.99), "max": all.last()},
        "first_sample": samples.front(), "last_sample": samples.back(),
    });
    std::fs::write(
        a.out.join("summary.json"),
        serde_json::to_string_pretty(&summary).unwrap(),
    )
    .unwrap();
    println!("{summary:#}");
}
