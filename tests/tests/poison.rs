//! Poison inputs under the conversion watchdog (`tidemark::watchdog`), on both backend pairs:
//! a corrupt ORC file on which `orc-rust` loops forever (`poison-rle-loop.orc`: the
//! fixtures' uncompressed orders with one bit flipped in a RLE v2 run), an Avro file on which
//! `arrow-avro` loops (`poison-block-loop.avro`, found by the `avro` fuzz target), and a
//! test-only decoder that stands still, each fail within the stall limit as bad input naming
//! the reason, are quarantined after `max_attempts`, and the other objects of their batches
//! land exactly.
//!
//! The stall limit here is the floor (`watchdog::MIN_STALL`, 2 s): a third of the 6 s the
//! invocations are given. The threads the watchdog leaves behind spin until this test binary
//! ends (on Lambda the function exits after answering: `watchdog::lambda`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tidemark::config::Config;
use tidemark::model::Status;
use tidemark::process::{Faults, RunContext, Step};
use tidemark_tests::{Backends, orders_csv, orders_source};

const MAX_ATTEMPTS: u32 = 2;
/// Longer than a bounded delivery takes on a loaded machine (the stall limit and the
/// batch's good objects), shorter than the spinning fault's 30 s.
const BOUNDED: Duration = Duration::from_secs(25);

fn config(b: &Backends) -> Arc<Config> {
    let source = |id: &str, prefix: &str, format: &str| {
        orders_source((&b.landing, &b.lake), id, prefix, format, MAX_ATTEMPTS)
    };
    let doc = json!({"sources": [
        source("orders", "in/", "csv"),
        source("orders_orc", "orc/", "orc"),
        source("orders_avro", "avro/", "avro"),
    ]});
    Arc::new(Config::from_json(&doc.to_string()).expect("valid config"))
}

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/fixtures/avro_orc/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A decoder that stands still on `in/spin.csv` (for 30 s at most, then goes on: long after
/// the watchdog has given up on it).
struct Spinning;

impl Faults for Spinning {
    fn check(&self, _: Step, _: &str) -> tidemark::Result<()> {
        Ok(())
    }

    fn converting(&self, key: &str) {
        if key == "in/spin.csv" {
            let until = Instant::now() + Duration::from_secs(30);
            while Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The ObjectCreated records of `keys`, as uploaded.
async fn records(b: &Backends, keys: &[&str]) -> Value {
    let mut records = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        records.push(b.created_record(key, &format!("{:018X}", 0x100 + i)).await);
    }
    json!({"Records": records})
}

/// One delivery of `event` to the ingest handler, its invocation given 6 s: the errors, and
/// how long it took.
async fn deliver(b: &Backends, faults: Arc<dyn Faults>, event: &Value) -> (Vec<String>, Duration) {
    use tidemark::ports::Clock;
    let mut pipeline = b.pipeline_with(config(b));
    pipeline.faults = faults;
    let ctx = RunContext::new("poison", b.clock.now_ms() + 6_000);
    let started = Instant::now();
    let r = tidemark::ingest::handle(&pipeline, event, &ctx, 4)
        .await
        .unwrap();
    (r.errors, started.elapsed())
}

/// `poison` fails within the limit on each delivery and is quarantined after
/// `max_attempts`; `good` (source id, key, rows) land once, exactly.
async fn poison_is_bounded(
    b: &Backends,
    faults: Arc<dyn Faults>,
    poison: (&str, &str),
    good: &[(&str, &str, u64)],
) {
    let name = b.name;
    let mut keys = vec![poison.1];
    keys.extend(good.iter().map(|g| g.1));
    let event = records(b, &keys).await;
    for attempt in 1..=MAX_ATTEMPTS {
        let (errors, took) = deliver(b, faults.clone(), &event).await;
        // Bounded, not fast: without the watchdog the delivery never ends (the spinning
        // fault alone holds it 30 s); the margin is for a loaded machine.
        assert!(
            took < BOUNDED,
            "{name}: attempt {attempt} took {took:?}: the stall was not bounded"
        );
        let record = b.ledger.get(poison.0, poison.1).await.unwrap().unwrap();
        let error = record.last_error.clone().unwrap_or_default();
        assert!(
            error.contains(poison.1)
                && error.contains("no progress for 2 s (no input byte read, no row decoded)"),
            "{name}: attempt {attempt}: {error:?} / {errors:?}"
        );
        assert_eq!(record.attempts, attempt, "{name}: counted as bad input");
        let expected = if attempt == MAX_ATTEMPTS {
            Status::Quarantined
        } else {
            Status::Failed
        };
        assert_eq!(record.status, expected, "{name}: attempt {attempt}");
        assert!(record.committed.is_none());
        for (source, key, rows) in good {
            let r = b.ledger.get(source, key).await.unwrap().unwrap();
            assert_eq!(r.status, Status::Done, "{name}: {key}");
            assert_eq!(r.committed.unwrap().rows, *rows, "{name}: {key}");
        }
    }
    assert!(
        tidemark::watchdog::abandoned(),
        "{name}: the process is marked"
    );
    // Delivered again: quarantined, nothing is tried (a try would count an attempt),
    // nothing lands twice.
    let before = b.ledger.get(poison.0, poison.1).await.unwrap().unwrap();
    let (_, took) = deliver(b, faults.clone(), &event).await;
    assert!(took < BOUNDED, "{name}: {took:?}");
    let after = b.ledger.get(poison.0, poison.1).await.unwrap().unwrap();
    assert_eq!(
        (after.status, after.attempts, &after.last_error),
        (Status::Quarantined, MAX_ATTEMPTS, &before.last_error),
        "{name}: a quarantined object is not tried again"
    );
    let outputs = b.lake_objects("").await;
    for (source, key, _) in good {
        let rel = key.split_once('/').unwrap().1;
        assert!(
            outputs.contains_key(&format!("{source}/{rel}.parquet")),
            "{name}: {key}"
        );
    }
    assert_eq!(outputs.len(), good.len(), "{name}: {:?}", outputs.keys());
}

async fn an_orc_file_that_loops_its_decoder_is_quarantined(b: Backends) {
    b.upload("orc/poison.orc", fixture("poison-rle-loop.orc"))
        .await;
    b.upload("orc/good.orc", fixture("orders-zlib.orc")).await;
    b.upload("in/good.csv", orders_csv(1, 10).0).await;
    poison_is_bounded(
        &b,
        Arc::new(tidemark::process::NoFaults),
        ("orders_orc", "orc/poison.orc"),
        &[
            ("orders_orc", "orc/good.orc", 1000),
            ("orders", "in/good.csv", 10),
        ],
    )
    .await;
}

/// Found by the `avro` fuzz target: a block holding a byte more than its one record, on
/// which `arrow-avro` 60.1 loops.
async fn an_avro_file_that_loops_its_reader_is_quarantined(b: Backends) {
    b.upload("avro/poison.avro", fixture("poison-block-loop.avro"))
        .await;
    b.upload("avro/good.avro", fixture("orders-deflate.avro"))
        .await;
    poison_is_bounded(
        &b,
        Arc::new(tidemark::process::NoFaults),
        ("orders_avro", "avro/poison.avro"),
        &[("orders_avro", "avro/good.avro", 1000)],
    )
    .await;
}

async fn a_decoder_that_stands_still_is_quarantined(b: Backends) {
    b.upload("in/spin.csv", orders_csv(1, 5).0).await;
    b.upload("in/ok.csv", orders_csv(100, 7).0).await;
    poison_is_bounded(
        &b,
        Arc::new(Spinning),
        ("orders", "in/spin.csv"),
        &[("orders", "in/ok.csv", 7)],
    )
    .await;
}

tidemark_tests::on_both!(
    an_orc_file_that_loops_its_decoder_is_quarantined,
    an_avro_file_that_loops_its_reader_is_quarantined,
    a_decoder_that_stands_still_is_quarantined,
);
