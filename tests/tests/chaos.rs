//! The chaos suite (issue 7): S3 events delivered 1–3 times, shuffled across and within keys
//! (a delete's event may come before its create's), overwrites, deletes, deletes then
//! re-creates, 8 concurrent workers, a crash at each protocol step on 5% of the times a
//! worker reaches it, transient faults (throttle, 500, timeout, connection reset) on 5% of the
//! S3 and DynamoDB calls — before the call, or after a write that happened — then reconcile;
//! and the product claim asserted: lost 0, duplicated 0, rows and every sum of the lake equal
//! to the current source objects', the ledger right, nothing quarantined, the second reconcile
//! clean. How faults and crashes are injected: `tidemark_tests::chaos`.
//!
//! The table mode runs the same scenario with `orders` and `archive` published as Delta
//! tables by two committers beside the workers, fed by the ledger's writes (at least once,
//! batched), crashing at every step of a publish and meeting faults of their own; the feed is
//! drained by them alone, then each table is read back by the Python `deltalake` package and
//! must hold exactly the current objects' rows, and a sweep must find nothing to commit.
//!
//! The small runs are always on (both backend pairs, well under a minute each). The full-size
//! runs (8,000 objects, ≈10,300 events, ≈20,000 deliveries; one per pair, one after the other)
//! are ignored by default:
//!
//! ```sh
//! infra/localstack.sh start && . .local/stack.env && \
//!   cargo test -p tidemark-tests --test suite -- chaos:: --ignored --nocapture
//! ```
//!
//! `TIDEMARK_CHAOS_SEED=<u64 or 0x hex>` picks the seed (default
//! `tidemark_tests::chaos::DEFAULT_SEED`); every run prints it in its table's header.

use tidemark_tests::Backends;
use tidemark_tests::chaos::{self, ChaosConfig, ChaosReport};

/// The full-size runs take the whole machine: one at a time, even under the parallel harness.
static FULL_SIZE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn chaos_run(b: Backends, config: ChaosConfig) -> ChaosReport {
    let report = chaos::run(&b, config).await;
    println!("{}", report.table());
    let cleanup = std::time::Instant::now();
    drop(b);
    println!(
        "  (removing the backends afterwards: {:.1}s)",
        cleanup.elapsed().as_secs_f64()
    );
    report.assert_exactly_once();
    report
}

/// Every event is delivered 1–3 times: the event path alone must be exactly once.
fn small() -> ChaosConfig {
    ChaosConfig::small(chaos::seed_from_env())
}

/// 3% of the events are never delivered: the event path leaves missing, stale and orphaned
/// objects, and reconcile must find and repair each of them, under the same chaos.
fn small_with_lost_events() -> ChaosConfig {
    ChaosConfig {
        lost_share: 0.03,
        ..ChaosConfig::small(chaos::seed_from_env())
    }
}

/// Every event delivered 1–3 times, two sources publishing Delta tables.
fn small_with_tables() -> ChaosConfig {
    ChaosConfig::small(chaos::seed_from_env()).with_table()
}

/// Every event delivered 1–3 times, `orders_json` partitioned by its rows.
fn small_partitioned() -> ChaosConfig {
    ChaosConfig::small(chaos::seed_from_env()).with_partitions()
}

/// The committers' chaos meant something: publishes crashed at every step, commits landed,
/// some with many objects, and each table was read back.
fn assert_committers_crashed_at_every_step(r: &ChaosReport) {
    let c = r.committer.as_ref().expect("a table-mode run");
    for step in chaos::committer::PUBLISH_STEPS {
        assert!(
            c.crashes_at(step) > 0,
            "no publish crashed at {step:?}\n{}",
            r.table()
        );
    }
    for sc in r.sources.iter().filter(|sc| sc.table.is_some()) {
        let t = sc.table.as_ref().unwrap();
        assert!(
            t.commits > 1 && t.max_adds > 1,
            "{}: {} commits, at most {} files in one\n{}",
            sc.source_id,
            t.commits,
            t.max_adds,
            r.table()
        );
    }
    assert_eq!(
        r.sources.iter().filter(|sc| sc.table.is_some()).count(),
        if r.config.partitioned { 3 } else { 2 },
        "tables read"
    );
}

fn assert_full_size(r: &ChaosReport) {
    assert!(r.keys >= 2_000, "{} objects", r.keys);
    assert!(r.events >= 10_000, "{} events", r.events);
    assert!(r.config.workers >= 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_chaos_run_on_the_embedded_backends() {
    chaos_run(Backends::embedded().await, small()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_chaos_run_on_dynamodb_local_and_the_s3_emulator() {
    chaos_run(Backends::aws().await, small()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_chaos_run_with_lost_events_is_repaired_by_reconcile_on_the_embedded_backends() {
    let r = chaos_run(Backends::embedded().await, small_with_lost_events()).await;
    assert!(r.lost_events > 0, "no event was lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_chaos_run_with_lost_events_is_repaired_by_reconcile_on_dynamodb_local_and_the_s3_emulator()
 {
    let r = chaos_run(Backends::aws().await, small_with_lost_events()).await;
    assert!(r.lost_events > 0, "no event was lost");
}

/// Crashes between the files of a set happened.
fn assert_sets_crashed(r: &ChaosReport) {
    let between = r
        .crashes
        .iter()
        .find(|(s, _)| *s == tidemark::process::Step::BetweenPartFiles)
        .map_or(0, |(_, n)| *n);
    assert!(
        between > 0,
        "no crash between the files of a set\n{}",
        r.table()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_partitioned_chaos_run_on_the_embedded_backends() {
    let r = chaos_run(Backends::embedded().await, small_partitioned()).await;
    assert_sets_crashed(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_partitioned_chaos_run_on_dynamodb_local_and_the_s3_emulator() {
    let r = chaos_run(Backends::aws().await, small_partitioned()).await;
    assert_sets_crashed(&r);
}

/// Table mode with `orders_json` partitioned by its rows: sets published to a Delta table.
fn small_partitioned_with_tables() -> ChaosConfig {
    small_with_tables().with_partitions()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_partitioned_chaos_run_with_tables_on_the_embedded_backends() {
    let r = chaos_run(Backends::embedded().await, small_partitioned_with_tables()).await;
    assert_sets_crashed(&r);
    assert_committers_crashed_at_every_step(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_partitioned_chaos_run_with_tables_on_dynamodb_local_and_the_s3_emulator() {
    let r = chaos_run(Backends::aws().await, small_partitioned_with_tables()).await;
    assert_sets_crashed(&r);
    assert_committers_crashed_at_every_step(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_chaos_run_with_tables_on_the_embedded_backends() {
    let r = chaos_run(Backends::embedded().await, small_with_tables()).await;
    assert_committers_crashed_at_every_step(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_chaos_run_with_tables_on_dynamodb_local_and_the_s3_emulator() {
    let r = chaos_run(Backends::aws().await, small_with_tables()).await;
    assert_committers_crashed_at_every_step(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_chaos_run_with_lost_events_and_tables_on_the_embedded_backends() {
    let r = chaos_run(
        Backends::embedded().await,
        small_with_lost_events().with_table(),
    )
    .await;
    assert!(r.lost_events > 0, "no event was lost");
    assert_committers_crashed_at_every_step(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_chaos_run_with_lost_events_and_tables_on_dynamodb_local_and_the_s3_emulator() {
    let r = chaos_run(Backends::aws().await, small_with_lost_events().with_table()).await;
    assert!(r.lost_events > 0, "no event was lost");
    assert_committers_crashed_at_every_step(&r);
}

/// A full-size run, one at a time (each takes minutes and both cores): its report checked
/// for size, and for the committers' crashes when it publishes tables.
async fn full_run(b: Backends, tables: bool) {
    full_run_of(b, tables, false).await;
}

/// [`full_run`], with `orders_json` partitioned by its rows when `partitioned`.
async fn full_run_of(b: Backends, tables: bool, partitioned: bool) {
    let _one_at_a_time = FULL_SIZE.lock().await;
    let config = ChaosConfig::full(chaos::seed_from_env());
    let config = if tables { config.with_table() } else { config };
    let config = if partitioned {
        config.with_partitions()
    } else {
        config
    };
    let r = chaos_run(b, config).await;
    assert_full_size(&r);
    if tables {
        assert_committers_crashed_at_every_step(&r);
    }
    if partitioned {
        assert_sets_crashed(&r);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full-size chaos run (minutes): cargo test -p tidemark-tests --test suite -- chaos:: --ignored --nocapture"]
async fn full_partitioned_chaos_run_with_tables_on_the_embedded_backends() {
    full_run_of(Backends::embedded().await, true, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full-size chaos run (minutes, needs the local stack): cargo test -p tidemark-tests --test suite -- chaos:: --ignored --nocapture"]
async fn full_partitioned_chaos_run_with_tables_on_dynamodb_local_and_the_s3_emulator() {
    full_run_of(Backends::aws().await, true, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full-size chaos run (minutes, needs the local stack): cargo test -p tidemark-tests --test suite -- chaos:: --ignored --nocapture"]
async fn full_chaos_run_with_tables_on_dynamodb_local_and_the_s3_emulator() {
    full_run(Backends::aws().await, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full-size chaos run (minutes): cargo test -p tidemark-tests --test suite -- chaos:: --ignored --nocapture"]
async fn full_chaos_run_with_tables_on_the_embedded_backends() {
    full_run(Backends::embedded().await, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full-size chaos run (minutes): cargo test -p tidemark-tests --test suite -- chaos:: --ignored --nocapture"]
async fn full_chaos_run_on_the_embedded_backends() {
    full_run(Backends::embedded().await, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full-size chaos run (minutes, needs the local stack): cargo test -p tidemark-tests --test suite -- chaos:: --ignored --nocapture"]
async fn full_chaos_run_on_dynamodb_local_and_the_s3_emulator() {
    full_run(Backends::aws().await, false).await;
}
