//! Reconcile of a window split into parts, on both backend pairs (the parts on SQS on the
//! emulator, or on the local queue): the coordinator cuts the window into parts of
//! `reconcile.part_objects` objects, a fleet of workers checks them in parallel, and the
//! merged report says exactly what one run over the whole window says; a scheduled window is
//! closed by the merge, and a merger that dies is replaced by the next scheduled run.

use std::sync::Arc;

use serde_json::json;
use tidemark::config::Config;
use tidemark::fleet::{Fleet, FleetOptions, reconcile_handler};

use tidemark::ports::{Clock, GetOutcome, JobWrite, SystemClock, WorkQueue};
use tidemark::process::Pipeline;
use tidemark::reconcile::{self, FindingKind, Options, Report, SourceReport, Window, parts};
use tidemark_tests::{Backends, orders_csv, orders_doc};

/// The suites' sources, orders with parts of 100 objects and a deep sample of 10%, reports
/// in the lake.
fn config(b: &Backends) -> Arc<Config> {
    let mut doc = orders_doc(&b.landing, &b.lake, 3, Some("reports/"));
    doc["sources"][0]["reconcile"] =
        json!({"grace_minutes": 0, "part_objects": 100, "deep_sample": 0.1});
    Arc::new(Config::from_json(&doc.to_string()).unwrap())
}

/// One reconcile invocation with the parts queue; `run` names it in the reports.
async fn invoke(
    b: &Backends,
    p: &Pipeline,
    config: &Config,
    payload: &serde_json::Value,
    queue: &dyn WorkQueue,
    run: &str,
) -> Report {
    reconcile::handle_with(p, config, payload, &b.ctx(run), i64::MAX, Some(queue))
        .await
        .unwrap()
        .0
}

/// 330 objects, 300 of them processed on the fleet; then problems in every part: 20 objects
/// without events (missing), 3 outputs deleted by hand, 2 sources deleted without events
/// (orphans).
async fn landscape(b: &Backends, p: &Pipeline) {
    for i in 0..300 {
        let (csv, _) = orders_csv(i * 10, 2 + (i % 3) as usize);
        b.upload(&format!("in/{i:04}.csv"), &csv).await;
    }
    let req = tidemark::backfill::Request {
        source: "orders".into(),
        ..Default::default()
    };
    let (_, s) = b.backfill(p, req, 4).await;
    assert_eq!(s.counts.processed, 300, "{}", b.name);
    for i in 300..320 {
        let (csv, _) = orders_csv(i * 10, 2);
        b.upload(&format!("in/{i:04}.csv"), &csv).await;
    }
    for i in [5, 150, 290] {
        b.store
            .delete(&b.lake, &format!("orders/{i:04}.csv.parquet"), None)
            .await
            .unwrap();
    }
    for i in [77, 222] {
        b.store
            .delete(&b.landing, &format!("in/{i:04}.csv"), None)
            .await
            .unwrap();
    }
}

fn window(b: &Backends) -> Window {
    Window {
        from_ms: 0,
        to_ms: b.clock.now_ms() + 86_400_000,
    }
}

fn fleet(b: &Backends, p: &Pipeline, queue: Arc<dyn tidemark::ports::WorkQueue>) -> Fleet {
    Fleet {
        queue,
        handler: reconcile_handler(p.clone()),
        clock: Arc::new(b.clock.clone()),
        opts: FleetOptions {
            workers: 3,
            batch_size: 1,
            // Shorter than a part's check on a loaded machine: messages come back while their
            // part is being checked, and its claim turns them away.
            visibility_ms: 2_000,
            wait_ms: 100,
            timeout_ms: 600_000,
        },
    }
}

/// A merger of job `job` that claimed the merge (for a second) and died.
async fn claim_merge_and_die(b: &Backends, job: &str, run: &str) {
    let (mut j, _) = b.ledger.get_job(job).await.unwrap().unwrap();
    j.plan.merging = Some((run.into(), b.clock.now_ms() + 1_000));
    let rev = j.rev;
    j.rev += 1;
    assert_eq!(
        b.ledger.replace_job(&j, rev).await.unwrap(),
        JobWrite::Written
    );
}

/// Run a fleet on `queue` until `parts` parts of job `job` are checked.
async fn check_parts(
    b: &Backends,
    p: &Pipeline,
    queue: Arc<dyn tidemark::ports::WorkQueue>,
    job: &str,
    parts: u64,
) {
    let fleet = fleet(b, p, queue);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(async move { fleet.run(stop_rx).await });
    loop {
        let (_, counts) = b.ledger.get_job(job).await.unwrap().unwrap();
        if counts.messages == parts {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let _ = stop_tx.send(true);
    running.await.unwrap();
}

/// Run a fleet on `queue` until job `job` is merged; the merged report.
async fn merged(
    b: &Backends,
    p: &Pipeline,
    queue: Arc<dyn tidemark::ports::WorkQueue>,
    job: &str,
) -> Report {
    let fleet = fleet(b, p, queue);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(async move { fleet.run(stop_rx).await });
    let keys = wait_merged(b, job).await;
    let _ = stop_tx.send(true);
    running.await.unwrap();
    read_report(b, &keys).await
}

async fn wait_merged(b: &Backends, job: &str) -> Vec<String> {
    for _ in 0..1200 {
        let (j, _) = b.ledger.get_job(job).await.unwrap().unwrap();
        if let Some(keys) = j.plan.merged {
            return keys;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{}: job {job} was not merged", b.name)
}

async fn read_report(b: &Backends, keys: &[String]) -> Report {
    let key = keys.iter().find(|k| k.ends_with(".json")).unwrap();
    let GetOutcome::Found { mut body, .. } = b.store.get(&b.lake, key, None).await.unwrap() else {
        panic!("{key} missing")
    };
    let mut bytes = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut body, &mut bytes)
        .await
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// What a report entry says, comparable across runs (the lists sorted by key).
fn essence(s: &SourceReport) -> serde_json::Value {
    let mut findings: Vec<_> = s
        .findings
        .iter()
        .map(|f| (f.key.clone(), format!("{:?}", f.kind), f.rows))
        .collect();
    findings.sort();
    let mut mismatches: Vec<_> = s
        .mismatches
        .iter()
        .map(|m| (m.key.clone(), format!("{:?}", m.kind), m.measure.clone()))
        .collect();
    mismatches.sort();
    let mut deep = s.deep_checked.clone();
    deep.sort();
    json!({"objects": s.objects, "checked": s.checked, "findings": findings,
           "mismatches": mismatches, "totals": s.totals, "deep_checked": deep,
           "complete": s.complete, "error": s.error})
}

async fn a_split_window_reports_what_one_run_over_the_window_reports(b: Backends) {
    let config = config(&b);
    let p = b.pipeline_with(config.clone());
    landscape(&b, &p).await;
    let source = config.source("orders").unwrap();
    let opts = Options {
        repair: false,
        ..Options::default()
    };
    let whole = reconcile::reconcile_source(&p, source, window(&b), opts.clone(), &b.ctx("whole"))
        .await
        .unwrap();
    assert_eq!(whole.objects, 318, "{}", b.name);
    assert_eq!(
        (
            whole.count(FindingKind::Missing),
            whole.count(FindingKind::Orphaned)
        ),
        (20, 2)
    );
    assert_eq!(whole.mismatch_count(), 3, "{:#?}", whole.mismatches);

    // A manual request on a pipeline with the queue: split, checked by the fleet, merged.
    let queue = b.queue.clone();
    let from = chrono::DateTime::from_timestamp_millis(0)
        .unwrap()
        .to_rfc3339();
    let to = chrono::DateTime::from_timestamp_millis(window(&b).to_ms)
        .unwrap()
        .to_rfc3339();
    let payload = json!({"source": "orders", "from": from, "to": to, "repair": false});
    let coordinator = invoke(&b, &p, &config, &payload, &*queue, "coordinator").await;
    let fan_out = coordinator.sources[0].fan_out.clone().expect("split");
    assert_eq!(
        (fan_out.parts, fan_out.planned),
        (4, true),
        "{}: 318 objects in parts of 100",
        b.name
    );
    assert!(!coordinator.sources[0].complete);
    let report = merged(&b, &p, queue, &fan_out.job).await;
    assert_eq!(report.run_id, fan_out.job);
    let split = &report.sources[0];
    assert_eq!(
        essence(split),
        essence(&whole),
        "{}: the merged parts say what one run says",
        b.name
    );
    assert!(!split.clean());
    // Its metric line counts the same.
    let line: serde_json::Value = serde_json::from_str(&report.metric_lines()[0]).unwrap();
    assert_eq!(
        (
            line["Missing"].as_u64(),
            line["Orphaned"].as_u64(),
            line["Mismatches"].as_u64()
        ),
        (Some(20), Some(2), Some(3))
    );
    let (job, counts) = b.ledger.get_job(&fan_out.job).await.unwrap().unwrap();
    assert_eq!((counts.messages, counts.items), (4, 318));
    assert_eq!(job.plan.merging, None);
    // The backfill that processed the window's objects is summed up in the report.
    let backfill = report
        .jobs
        .iter()
        .find(|j| j.job.kind == tidemark::jobs::JobKind::Backfill)
        .expect("the backfill job");
    assert_eq!(
        (backfill.state, backfill.counts.processed),
        (tidemark::jobs::JobState::Finished, 300)
    );
    let html = report.to_html();
    assert!(html.contains("backfill jobs") && html.contains(&backfill.job.id));
    let coordinator_html = coordinator.to_html();
    assert!(
        coordinator_html.contains("split into 4 part(s)"),
        "{coordinator_html}"
    );
}

async fn a_scheduled_split_window_is_closed_by_its_merge_and_a_dead_merger_is_replaced(
    b: Backends,
) {
    let config = config(&b);
    let p = b.pipeline_with(config.clone());
    landscape(&b, &p).await;
    let queue = b.queue.clone();
    let scheduled =
        json!({"detail-type": "Scheduled Event", "source": "aws.scheduler", "detail": {}});
    let reports = config.reports.clone().unwrap();
    // The scheduled window ends at the test clock's now: move it past the uploads.
    b.clock
        .advance((SystemClock.now_ms() - b.clock.now_ms()).max(0) + 60_000);
    let first = invoke(&b, &p, &config, &scheduled, &*queue, "run-1").await;
    let fan_out = first.sources[0].fan_out.clone().expect("split");
    let (state, _) = reconcile::load_state(&p, &reports, "orders").await.unwrap();
    let (window, job) = state.fanned.clone().expect("the window is in flight");
    assert_eq!(job, fan_out.job);
    assert_eq!(state.closed_through_ms, None, "not closed before its merge");

    // A merger that claimed the merge and died: the parts finish, nobody merges.
    claim_merge_and_die(&b, &job, "dead-run").await;
    check_parts(&b, &p, queue.clone(), &job, fan_out.parts).await;
    let (j, _) = b.ledger.get_job(&job).await.unwrap().unwrap();
    assert!(j.plan.merged.is_none(), "the dead merger's claim holds");

    // While the claim holds, a scheduled run starts no new window; once it ran out, the next
    // scheduled run merges, and the merge closes the window.
    let second = invoke(&b, &p, &config, &scheduled, &*queue, "run-2").await;
    assert!(
        second.sources[0].fan_out.is_some(),
        "{:#?}",
        second.sources[0]
    );
    b.clock.advance(2_000);
    let third = invoke(&b, &p, &config, &scheduled, &*queue, "run-3").await;
    let merged_entry = &third.sources[0];
    assert!(
        merged_entry.fan_out.is_none() && merged_entry.complete,
        "{merged_entry:#?}"
    );
    assert_eq!(
        (
            merged_entry.count(FindingKind::Missing),
            merged_entry.objects
        ),
        (20, 318)
    );
    let (j, _) = b.ledger.get_job(&job).await.unwrap().unwrap();
    let keys = j.plan.merged.expect("merged by run 3");
    assert!(keys.iter().any(|k| k.contains(&job)), "{keys:?}");
    let (state, _) = reconcile::load_state(&p, &reports, "orders").await.unwrap();
    assert_eq!(
        (state.fanned, state.closed_through_ms),
        (None, Some(window.to_ms))
    );

    // The next window holds nothing: checked whole, no split.
    b.clock.advance(60_000);
    let fourth = invoke(&b, &p, &config, &scheduled, &*queue, "run-4").await;
    assert!(fourth.sources[0].fan_out.is_none() && fourth.sources[0].complete);
}

/// A manual split whose merger died is merged by the next scheduled run; a scheduled split
/// whose parts were lost (taken off the queue) is split again a day later.
async fn split_windows_left_behind_are_looked_after_by_scheduled_runs(b: Backends) {
    let config = config(&b);
    let p = b.pipeline_with(config.clone());
    landscape(&b, &p).await;
    let queue = b.queue.clone();
    let scheduled =
        json!({"detail-type": "Scheduled Event", "source": "aws.scheduler", "detail": {}});
    let iso = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .to_rfc3339()
    };
    let manual =
        json!({"source": "orders", "from": iso(0), "to": iso(window(&b).to_ms), "repair": false});
    let r = invoke(&b, &p, &config, &manual, &*queue, "manual").await;
    let manual_job = r.sources[0].fan_out.clone().unwrap().job;
    // Its merger dies: the claim is taken and never released.
    claim_merge_and_die(&b, &manual_job, "dead").await;
    check_parts(&b, &p, queue.clone(), &manual_job, 4).await;

    // The scheduled window is split too; its parts are then lost before anyone checks them.
    b.clock
        .advance((SystemClock.now_ms() - b.clock.now_ms()).max(0) + 60_000);
    let first = invoke(&b, &p, &config, &scheduled, &*queue, "s1").await;
    let lost_job = first.sources[0].fan_out.clone().expect("split").job;
    loop {
        let taken = queue.receive(10, 60_000, 200).await.unwrap();
        if taken.is_empty() {
            break;
        }
        for m in taken {
            queue.delete(&m.receipt).await.unwrap();
        }
    }
    // The manual merge is done by the next scheduled run once the dead claim ran out.
    b.clock.advance(2_000);
    let second = invoke(&b, &p, &config, &scheduled, &*queue, "s2").await;
    let (j, _) = b.ledger.get_job(&manual_job).await.unwrap().unwrap();
    assert!(
        j.plan.merged.is_some(),
        "{}: the manual split is merged",
        b.name
    );
    // (The first scheduled run, past the dead claim already, merged it.)
    assert!(
        first
            .sources
            .iter()
            .chain(&second.sources)
            .any(|s| s.fan_out.is_none() && s.objects == 318),
        "{:#?}",
        second.sources
    );
    // A day later the lost split is abandoned and the window split again; its new parts are
    // checked and merged, and the window is closed.
    b.clock.advance(parts::ABANDON_AFTER_MS + 1);
    let third = invoke(&b, &p, &config, &scheduled, &*queue, "s3").await;
    let again = third.sources[0].fan_out.clone().expect("split again").job;
    assert_ne!(again, lost_job);
    let report = merged(&b, &p, queue, &again).await;
    assert_eq!(report.sources[0].objects, 318);
    let (state, _) = reconcile::load_state(&p, config.reports.as_ref().unwrap(), "orders")
        .await
        .unwrap();
    assert!(
        state.fanned.is_none() && state.closed_through_ms.is_some(),
        "{state:?}"
    );
}

/// Every part's message delivered twice at once, then once more after its check: each part
/// is checked by one of them (its claim), the other comes back, the late one reads the
/// result written — and the merged report counts every missing object, each repaired once.
async fn a_part_delivered_twice_at_once_is_checked_once(b: Backends) {
    let config = config(&b);
    let p = b.pipeline_with(config.clone());
    landscape(&b, &p).await;
    let to = chrono::DateTime::from_timestamp_millis(window(&b).to_ms)
        .unwrap()
        .to_rfc3339();
    let payload =
        json!({"source": "orders", "from": "1970-01-01T00:00:00Z", "to": to, "repair": true});
    let queue = b.queue.clone();
    let coordinator = invoke(&b, &p, &config, &payload, &*queue, "coordinator").await;
    let fan_out = coordinator.sources[0].fan_out.clone().expect("split");
    let mut messages = Vec::new();
    while (messages.len() as u64) < fan_out.parts {
        messages.extend(queue.receive(10, 600_000, 500).await.unwrap());
    }
    let mut held = 0;
    for m in &messages {
        let part: parts::Part = serde_json::from_str(&m.body).unwrap();
        let (first, second) = (b.ctx("first"), b.ctx("second"));
        let (one, two) = tokio::join!(
            parts::check_part(&p, &config, &part, &first, i64::MAX),
            parts::check_part(&p, &config, &part, &second, i64::MAX),
        );
        for outcome in [&one, &two] {
            if let Err(e) = outcome {
                assert!(
                    e.to_string().contains("is being checked by"),
                    "{}: {e}",
                    b.name
                );
                held += 1;
            }
        }
        assert!(
            one.is_ok() || two.is_ok(),
            "{}: one of them checks the part",
            b.name
        );
        // The message of the one that was turned away comes back after the check.
        parts::check_part(&p, &config, &part, &b.ctx("late"), i64::MAX)
            .await
            .unwrap();
    }
    assert!(held > 0, "{}: the deliveries overlapped", b.name);
    let report = read_report(&b, &wait_merged(&b, &fan_out.job).await).await;
    let split = &report.sources[0];
    assert_eq!(
        (split.objects, split.count(FindingKind::Missing)),
        (318, 20),
        "{}: {:#?}",
        b.name,
        split.findings
    );
    let (_, counts) = b.ledger.get_job(&fan_out.job).await.unwrap().unwrap();
    assert_eq!(
        counts.messages, fan_out.parts,
        "{}: each part counted once",
        b.name
    );
    let lake = b.lake_objects("orders/").await;
    for i in 300..320 {
        assert!(
            lake.contains_key(&format!("orders/{i:04}.csv.parquet")),
            "{}: missing object {i} repaired",
            b.name
        );
    }
    let repaired = split
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::Missing && f.repair.as_deref() == Some("processed"))
        .count();
    assert_eq!(repaired, 20, "{}: {:#?}", b.name, split.findings);
}

tidemark_tests::on_both!(
    a_part_delivered_twice_at_once_is_checked_once,
    split_windows_left_behind_are_looked_after_by_scheduled_runs,
    a_split_window_reports_what_one_run_over_the_window_reports,
    a_scheduled_split_window_is_closed_by_its_merge_and_a_dead_merger_is_replaced,
);
