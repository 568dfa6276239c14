//! The exactly-once ingest path against DynamoDB Local and the S3 emulator: every claim of
//! DESIGN.md's protocol, with rows and sums of the Parquet outputs read back.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tidemark::model::Status;
use tidemark::ports::Ledger;
use tidemark::process::{Faults, Step};
use tidemark::{ProcessError, Result};
use tidemark_tests::{FlakyStore, Stack, Totals, direct, orders_csv, sqs};

async fn record(stack: &Stack, key: &str) -> tidemark::model::Record {
    tidemark::aws::dynamodb::DynamoLedger::new(stack.dynamo.clone(), &stack.table)
        .get("orders", key)
        .await
        .expect("ledger read")
        .unwrap_or_else(|| panic!("no ledger record for {key}"))
}

#[tokio::test]
async fn a_new_object_is_processed_once() {
    let stack = Stack::new().await;
    let pipeline = stack.pipeline(3);
    let (csv, totals) = orders_csv(1, 250);
    let event = direct(vec![stack.upload_event("in/2024-03-01/a.csv", &csv).await]);

    let r = stack.invoke(&pipeline, &event, "run-1").await;
    assert_eq!((r.summary.processed, r.summary.failed), (1, 0), "{r:?}");
    assert_eq!(r.summary.rows, 250);

    let lake = stack.lake_objects().await;
    assert_eq!(
        lake.keys().collect::<Vec<_>>(),
        ["orders/2024-03-01/a.csv.parquet"]
    );
    assert_eq!(stack.lake_totals().await, totals);

    let rec = record(&stack, "in/2024-03-01/a.csv").await;
    assert_eq!(rec.status, Status::Done);
    let committed = rec.committed.expect("committed");
    assert_eq!(committed.rows, 250);
    assert_eq!(committed.sums["quantity"], totals.quantity.to_string());
    assert_eq!(
        committed.sums["amount"],
        format!(
            "{}.{:02}",
            totals.amount_cents / 100,
            totals.amount_cents % 100
        )
    );
    assert_eq!(committed.outputs.len(), 1);
}

#[tokio::test]
async fn the_same_event_delivered_three_times_gives_one_output() {
    let stack = Stack::new().await;
    let pipeline = stack.pipeline(3);
    let (csv, totals) = orders_csv(1, 40);
    let event = direct(vec![stack.upload_event("in/a.csv", &csv).await]);

    let mut processed = 0;
    let mut duplicates = 0;
    for i in 0..3 {
        let r = stack.invoke(&pipeline, &event, &format!("run-{i}")).await;
        processed += r.summary.processed;
        duplicates += r.summary.duplicates;
    }
    assert_eq!((processed, duplicates), (1, 2));
    assert_eq!(stack.lake_objects().await.len(), 1);
    assert_eq!(stack.lake_totals().await, totals);
}

#[tokio::test]
async fn events_in_reverse_sequencer_order_leave_the_newest_version() {
    let stack = Stack::new().await;
    let pipeline = stack.pipeline(3);
    let (v1, _) = orders_csv(1, 10);
    let (v2, v2_totals) = orders_csv(1000, 7);
    let e1 = stack.upload_event("in/a.csv", &v1).await;
    let e2 = stack.upload_event("in/a.csv", &v2).await;

    let r = stack.invoke(&pipeline, &direct(vec![e2]), "run-2").await;
    assert_eq!(r.summary.processed, 1);
    let r = stack.invoke(&pipeline, &direct(vec![e1]), "run-1").await;
    assert_eq!((r.summary.stale, r.summary.processed), (1, 0), "{r:?}");

    assert_eq!(stack.lake_totals().await, v2_totals);
    assert_eq!(stack.lake_objects().await.len(), 1);
}

#[tokio::test]
async fn an_old_event_arriving_first_is_released_and_the_newest_version_wins() {
    let stack = Stack::new().await;
    let pipeline = stack.pipeline(3);
    let (v1, _) = orders_csv(1, 10);
    let (v2, v2_totals) = orders_csv(1000, 7);
    let e1 = stack.upload_event("in/a.csv", &v1).await;
    let e2 = stack.upload_event("in/a.csv", &v2).await;

    // The object is already v2 when v1's event arrives: the pinned GET sees the change.
    let r = stack.invoke(&pipeline, &direct(vec![e1]), "run-1").await;
    assert_eq!(r.summary.not_current, 1, "{r:?}");
    assert!(stack.lake_objects().await.is_empty());
    let r = stack.invoke(&pipeline, &direct(vec![e2]), "run-2").await;
    assert_eq!(r.summary.processed, 1);
    assert_eq!(stack.lake_totals().await, v2_totals);
}

#[tokio::test]
async fn an_overwrite_replaces_the_output_without_duplicate_rows() {
    let stack = Stack::new().await;
    let pipeline = stack.pipeline(3);
    let (v1, v1_totals) = orders_csv(1, 30);
    let (v2, v2_totals) = orders_csv(500, 12);

    let e1 = stack.upload_event("in/a.csv", &v1).await;
    stack
        .invoke(&pipeline, &direct(vec![e1.clone()]), "run-1")
        .await;
    assert_eq!(stack.lake_totals().await, v1_totals);

    let e2 = stack.upload_event("in/a.csv", &v2).await;
    let r = stack.invoke(&pipeline, &direct(vec![e2]), "run-2").await;
    assert_eq!(r.summary.processed, 1, "{r:?}");
    assert_eq!(stack.lake_objects().await.len(), 1);
    assert_eq!(stack.lake_totals().await, v2_totals);

    // The old version's event, redelivered late, changes nothing.
    let r = stack.invoke(&pipeline, &direct(vec![e1]), "run-3").await;
    assert_eq!(r.summary.stale, 1, "{r:?}");
    assert_eq!(stack.lake_totals().await, v2_totals);
    let rec = record(&stack, "in/a.csv").await;
    assert_eq!(rec.committed.unwrap().rows, 12);
}

#[tokio::test]
async fn a_delete_removes_the_output_and_a_late_create_does_not_resurrect_it() {
    let stack = Stack::new().await;
    let pipeline = stack.pipeline(3);
    let (csv, _) = orders_csv(1, 5);
    let created = stack.upload_event("in/a.csv", &csv).await;
    stack
        .invoke(&pipeline, &direct(vec![created.clone()]), "run-1")
        .await;
    assert_eq!(stack.lake_objects().await.len(), 1);

    stack.remove("in/a.csv").await;
    let seq = stack.next_sequencer();
    let removed = direct(vec![stack.removed_record("in/a.csv", &seq)]);
    let r = stack.invoke(&pipeline, &removed, "run-2").await;
    assert_eq!(r.summary.deleted, 1, "{r:?}");
    assert!(stack.lake_objects().await.is_empty());
    assert_eq!(record(&stack, "in/a.csv").await.status, Status::Deleted);

    let r = stack
        .invoke(&pipeline, &direct(vec![created]), "run-3")
        .await;
    assert_eq!(r.summary.stale, 1, "{r:?}");
    assert!(stack.lake_objects().await.is_empty());
}

#[tokio::test]
async fn eight_concurrent_workers_on_the_same_fifty_events_process_each_object_once() {
    let stack = Arc::new(Stack::new().await);
    let mut events = Vec::new();
    let mut expected = Totals::default();
    for i in 0..50 {
        let (csv, t) = orders_csv(i * 100, 20 + (i as usize % 5));
        expected.add(&t);
        events.push(
            stack
                .upload_event(&format!("in/batch/{i:03}.csv"), &csv)
                .await,
        );
    }
    let mut workers = Vec::new();
    for w in 0..8 {
        let stack = stack.clone();
        let mut mine = events.clone();
        // Each worker sees the events in its own order.
        mine.rotate_left(w * 6);
        if w % 2 == 1 {
            mine.reverse();
        }
        workers.push(tokio::spawn(async move {
            let pipeline = stack.pipeline(3);
            let mut processed = 0;
            for chunk in mine.chunks(10) {
                let r = stack
                    .invoke(&pipeline, &direct(chunk.to_vec()), &format!("worker-{w}"))
                    .await;
                assert_eq!(r.summary.failed, 0, "{r:?}");
                processed += r.summary.processed;
            }
            processed
        }));
    }
    let mut processed = 0;
    for w in workers {
        processed += w.await.unwrap();
    }
    assert_eq!(
        processed, 50,
        "each object is processed by exactly one worker"
    );
    assert_eq!(stack.lake_objects().await.len(), 50);
    assert_eq!(stack.lake_totals().await, expected);
}

/// Stops the worker once, at one step, for one key: as if its process died there.
struct DieOnce {
    step: Step,
    key: String,
    fired: Mutex<bool>,
}

impl Faults for DieOnce {
    fn check(&self, step: Step, key: &str) -> Result<()> {
        let mut fired = self.fired.lock().unwrap();
        if step == self.step && key == self.key && !*fired {
            *fired = true;
            return Err(ProcessError::Crashed(step.as_str()));
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_worker_that_dies_after_the_output_put_leaves_exactly_one_output_after_retry() {
    let stack = Stack::new().await;
    let (csv, totals) = orders_csv(1, 60);
    let event = direct(vec![stack.upload_event("in/a.csv", &csv).await]);
    let dying = stack.pipeline_with_faults(
        3,
        Arc::new(DieOnce {
            step: Step::AfterOutputPut,
            key: "in/a.csv".into(),
            fired: Mutex::new(false),
        }),
    );

    let r = stack.invoke(&dying, &event, "run-1").await;
    assert_eq!(r.summary.failed, 1, "{r:?}");
    assert!(
        r.must_fail(),
        "a direct invocation fails so Lambda retries it"
    );
    // The output is there, the ledger still shows the claim.
    assert_eq!(stack.lake_objects().await.len(), 1);
    assert_eq!(record(&stack, "in/a.csv").await.status, Status::Claimed);

    // A retry inside the dead worker's lease is told the object is in flight ...
    let r = stack.invoke(&stack.pipeline(3), &event, "run-2").await;
    assert_eq!(r.summary.in_flight, 1, "{r:?}");
    // ... and after it, takes over, meets its leftover output and replaces it.
    stack.expire_leases();
    let r = stack.invoke(&stack.pipeline(3), &event, "run-3").await;
    assert_eq!(r.summary.processed, 1, "{r:?}");
    assert_eq!(stack.lake_objects().await.len(), 1);
    assert_eq!(stack.lake_totals().await, totals);
    let rec = record(&stack, "in/a.csv").await;
    assert_eq!(rec.status, Status::Done);
    assert_eq!(rec.committed.unwrap().run_id, "run-3");
}

#[tokio::test]
async fn a_worker_that_dies_before_commit_on_an_overwrite_leaves_the_new_version_only() {
    let stack = Stack::new().await;
    let (v1, _) = orders_csv(1, 10);
    let (v2, v2_totals) = orders_csv(100, 3);
    let e1 = direct(vec![stack.upload_event("in/a.csv", &v1).await]);
    stack.invoke(&stack.pipeline(3), &e1, "run-1").await;
    let e2 = direct(vec![stack.upload_event("in/a.csv", &v2).await]);
    let dying = stack.pipeline_with_faults(
        3,
        Arc::new(DieOnce {
            step: Step::BeforeCommit,
            key: "in/a.csv".into(),
            fired: Mutex::new(false),
        }),
    );
    let r = stack.invoke(&dying, &e2, "run-2").await;
    assert_eq!(r.summary.failed, 1);
    stack.expire_leases();
    let r = stack.invoke(&stack.pipeline(3), &e2, "run-3").await;
    assert_eq!(r.summary.processed, 1, "{r:?}");
    assert_eq!(stack.lake_objects().await.len(), 1);
    assert_eq!(stack.lake_totals().await, v2_totals);
}

#[tokio::test]
async fn a_malformed_object_is_quarantined_after_its_attempts_and_the_batch_goes_on() {
    let stack = Stack::new().await;
    let pipeline = stack.pipeline(3);
    let (good1, t1) = orders_csv(1, 10);
    let (good2, t2) = orders_csv(100, 10);
    let bad = "order_id,customer,quantity,amount,ordered_at\n\
               1,a,1,1.00,2024-03-01T00:00:00Z\n\
               2,b,not-a-number,1.00,2024-03-01T00:00:00Z\n";
    let batch = sqs(vec![
        (
            "m-1",
            direct(vec![stack.upload_event("in/good1.csv", &good1).await]),
        ),
        (
            "m-2",
            direct(vec![stack.upload_event("in/bad.csv", bad).await]),
        ),
        (
            "m-3",
            direct(vec![stack.upload_event("in/good2.csv", &good2).await]),
        ),
    ]);

    let r = stack.invoke(&pipeline, &batch, "run-1").await;
    assert_eq!(r.retry_messages, ["m-2"]);
    assert_eq!(r.to_json()["batchItemFailures"][0]["itemIdentifier"], "m-2");
    assert_eq!(r.summary.processed, 2);
    let error = &r.errors[0];
    assert!(
        error.contains(&format!("s3://{}/in/bad.csv", stack.landing)) && error.contains("line 3"),
        "the error names the object and the line: {error}"
    );
    let rec = record(&stack, "in/bad.csv").await;
    assert_eq!((rec.status, rec.attempts), (Status::Failed, 1));

    // SQS redelivers the failed message; the third attempt quarantines it.
    let r = stack.invoke(&pipeline, &batch, "run-2").await;
    assert_eq!(r.retry_messages, ["m-2"]);
    assert_eq!(r.summary.duplicates, 2);
    let r = stack.invoke(&pipeline, &batch, "run-3").await;
    assert!(r.retry_messages.is_empty(), "{r:?}");
    assert_eq!(r.summary.quarantined, 1);
    let rec = record(&stack, "in/bad.csv").await;
    assert_eq!((rec.status, rec.attempts), (Status::Quarantined, 3));
    assert!(rec.last_error.unwrap().contains("line 3"));

    // Later deliveries cost nothing and change nothing.
    let r = stack.invoke(&pipeline, &batch, "run-4").await;
    assert!(r.retry_messages.is_empty());
    let mut expected = t1;
    expected.add(&t2);
    assert_eq!(stack.lake_totals().await, expected);
    assert_eq!(stack.lake_objects().await.len(), 2);
}

#[tokio::test]
async fn keys_with_spaces_plus_unicode_and_percent_are_processed() {
    let stack = Stack::new().await;
    let pipeline = stack.pipeline(3);
    let keys = [
        "in/my file.csv",
        "in/a+b.csv",
        "in/你好/😊.csv",
        "in/100%/50% off.csv",
        "in/x=1&y=2;z.csv",
    ];
    let mut records = Vec::new();
    let mut expected = Totals::default();
    for (i, key) in keys.iter().enumerate() {
        let (csv, t) = orders_csv(i as i64 * 10, 3);
        expected.add(&t);
        records.push(stack.upload_event(key, &csv).await);
    }
    let r = stack.invoke(&pipeline, &direct(records), "run-1").await;
    assert_eq!(
        (r.summary.processed, r.summary.failed),
        (keys.len(), 0),
        "{r:?}"
    );
    let lake: HashSet<String> = stack.lake_objects().await.into_keys().collect();
    for key in keys {
        let out = format!("orders/{}.parquet", key.strip_prefix("in/").unwrap());
        assert!(lake.contains(&out), "{out} missing from {lake:?}");
        assert_eq!(record(&stack, key).await.status, Status::Done);
    }
    assert_eq!(stack.lake_totals().await, expected);
}

#[tokio::test]
async fn sqs_test_events_and_unclaimed_objects_are_acknowledged() {
    let stack = Stack::new().await;
    let pipeline = stack.pipeline(3);
    let test_event: Value = serde_json::json!({
        "Service": "Amazon S3", "Event": "s3:TestEvent", "Time": "2026-11-29T12:00:00.000Z",
        "Bucket": stack.landing, "RequestId": "5582815E1AEA5ADF", "HostId": "8cLeGAmw"
    });
    let (csv, _) = orders_csv(1, 2);
    let elsewhere = direct(vec![stack.upload_event("other/a.csv", &csv).await]);
    let r = stack
        .invoke(
            &pipeline,
            &sqs(vec![("t", test_event), ("o", elsewhere)]),
            "run-1",
        )
        .await;
    assert!(r.retry_messages.is_empty(), "{r:?}");
    assert_eq!((r.summary.skipped, r.summary.unrouted), (1, 1));
    assert!(stack.lake_objects().await.is_empty());
}

/// Holds the first worker at one step until the test lets it go.
struct Gate {
    key: String,
    step: Step,
    reached: std::sync::mpsc::SyncSender<()>,
    release: Mutex<std::sync::mpsc::Receiver<()>>,
    used: Mutex<bool>,
}

impl Faults for Gate {
    fn check(&self, step: Step, key: &str) -> Result<()> {
        let mut used = self.used.lock().unwrap();
        if step == self.step && key == self.key && !*used {
            *used = true;
            self.reached.send(()).unwrap();
            // Hand this worker's other tasks to the runtime while we wait.
            tokio::task::block_in_place(|| self.release.lock().unwrap().recv().unwrap());
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_newer_version_arriving_during_a_claim_is_processed_by_the_holder() {
    let stack = Arc::new(Stack::new().await);
    let (v1, _) = orders_csv(1, 10);
    let (v2, v2_totals) = orders_csv(700, 4);
    let e1 = direct(vec![stack.upload_event("in/a.csv", &v1).await]);
    let (reached_tx, reached_rx) = std::sync::mpsc::sync_channel(1);
    let (release_tx, release_rx) = std::sync::mpsc::channel();
    let holder = stack.pipeline_with_faults(
        3,
        Arc::new(Gate {
            key: "in/a.csv".into(),
            step: Step::AfterClaim,
            reached: reached_tx,
            release: Mutex::new(release_rx),
            used: Mutex::new(false),
        }),
    );
    let s = stack.clone();
    let first = tokio::spawn(async move { s.invoke(&holder, &e1, "holder").await });
    tokio::task::spawn_blocking(move || reached_rx.recv().unwrap())
        .await
        .unwrap();

    // While v1 is claimed, v2 lands and its event is recorded for the holder.
    let e2 = direct(vec![stack.upload_event("in/a.csv", &v2).await]);
    let r = stack.invoke(&stack.pipeline(3), &e2, "second").await;
    assert_eq!(r.summary.deferred, 1, "{r:?}");
    let rec = record(&stack, "in/a.csv").await;
    assert!(
        rec.pending.is_some(),
        "superseded-by is on the record: {rec:?}"
    );

    release_tx.send(()).unwrap();
    let r = first.await.unwrap();
    assert_eq!(r.summary.failed, 0, "{r:?}");
    // v1's pinned GET found v2 (not current); the holder then processed v2 itself.
    assert_eq!(stack.lake_totals().await, v2_totals);
    let rec = record(&stack, "in/a.csv").await;
    assert_eq!(rec.status, Status::Done);
    assert!(rec.pending.is_none());
    assert_eq!(rec.committed.unwrap().rows, 4);
}

#[tokio::test]
async fn a_large_output_goes_up_by_multipart_and_survives_a_crash_before_commit() {
    let stack = Stack::new().await;
    // Incompressible text so the Parquet output exceeds one 5 MiB part.
    let mut csv = String::from("order_id,customer,quantity,amount,ordered_at\n");
    let mut totals = Totals::default();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for id in 0..110_000i64 {
        let mut name = String::with_capacity(120);
        for _ in 0..120 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            name.push((b'a' + (x % 26) as u8) as char);
        }
        csv.push_str(&format!(
            "{id},{name},{},{}.25,2024-03-01T00:00:00Z\n",
            id % 5,
            id % 100
        ));
        totals.rows += 1;
        totals.order_ids += i128::from(id);
        totals.quantity += i128::from(id % 5);
        totals.amount_cents += i128::from(id % 100) * 100 + 25;
    }
    let event = direct(vec![stack.upload_event("in/big.csv", &csv).await]);
    let mut dying = stack.pipeline_with_faults(
        3,
        Arc::new(DieOnce {
            step: Step::AfterOutputPut,
            key: "in/big.csv".into(),
            fired: Mutex::new(false),
        }),
    );
    dying.settings.part_size = 5 << 20;
    let r = stack.invoke(&dying, &event, "run-1").await;
    assert_eq!(r.summary.failed, 1);
    let lake = stack.lake_objects().await;
    let etag = stack
        .s3
        .head_object()
        .bucket(&stack.lake)
        .key("orders/big.csv.parquet")
        .send()
        .await
        .unwrap()
        .e_tag()
        .unwrap()
        .to_string();
    assert!(
        etag.trim_matches('"').ends_with("-2"),
        "multipart ETag: {etag}"
    );
    assert_eq!(lake.len(), 1);

    stack.expire_leases();
    let mut retry = stack.pipeline(3);
    retry.settings.part_size = 5 << 20;
    let r = stack.invoke(&retry, &event, "run-2").await;
    assert_eq!(r.summary.processed, 1, "{r:?}");
    assert_eq!(stack.lake_objects().await.len(), 1);
    assert_eq!(stack.lake_totals().await, totals);
}

#[tokio::test]
async fn gzip_json_lines_and_zstd_csv_land_with_the_same_rows_and_sums() {
    let stack = Stack::new().await;
    let pipeline = stack.pipeline(3);
    let (jsonl, t1) = tidemark_tests::orders_jsonl(1, 300);
    let (csv, t2) = orders_csv(5000, 200);
    let gz = {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(jsonl.as_bytes()).unwrap();
        e.finish().unwrap()
    };
    let zst = zstd::encode_all(csv.as_bytes(), 3).unwrap();
    let records = vec![
        stack.upload_event("json/2024/a.jsonl.gz", &gz).await,
        stack.upload_event("in/b.csv.zst", &zst).await,
    ];
    let r = stack.invoke(&pipeline, &direct(records), "run-1").await;
    assert_eq!((r.summary.processed, r.summary.failed), (2, 0), "{r:?}");
    let lake = stack.lake_objects().await;
    assert_eq!(
        tidemark_tests::parquet_totals(lake["orders_json/2024/a.jsonl.gz.parquet"].clone()),
        t1
    );
    assert_eq!(
        tidemark_tests::parquet_totals(lake["orders/b.csv.zst.parquet"].clone()),
        t2
    );
}

#[tokio::test]
async fn a_header_only_object_commits_zero_rows_with_a_valid_empty_parquet() {
    let stack = Stack::new().await;
    let (csv, _) = orders_csv(1, 0);
    let r = stack
        .invoke(
            &stack.pipeline(3),
            &direct(vec![stack.upload_event("in/empty.csv", &csv).await]),
            "run-1",
        )
        .await;
    assert_eq!(r.summary.processed, 1, "{r:?}");
    assert_eq!(stack.lake_totals().await, Totals::default());
    let rec = record(&stack, "in/empty.csv").await;
    assert_eq!(rec.committed.unwrap().rows, 0);
}

#[tokio::test]
async fn the_keep_policy_keeps_outputs_of_deleted_objects() {
    let stack = Stack::new().await;
    let pipeline = stack.pipeline(3);
    let (csv, totals) = orders_csv(1, 8);
    let created = stack.upload_event("keep/a.csv", &csv).await;
    stack
        .invoke(&pipeline, &direct(vec![created]), "run-1")
        .await;
    stack.remove("keep/a.csv").await;
    let seq = stack.next_sequencer();
    let r = stack
        .invoke(
            &pipeline,
            &direct(vec![stack.removed_record("keep/a.csv", &seq)]),
            "run-2",
        )
        .await;
    assert_eq!(r.summary.deleted, 1, "{r:?}");
    assert_eq!(stack.lake_totals().await, totals);
    let rec = tidemark::aws::dynamodb::DynamoLedger::new(stack.dynamo.clone(), &stack.table)
        .get("archive", "keep/a.csv")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.status, Status::Deleted);
    assert_eq!(
        rec.committed.unwrap().outputs.len(),
        1,
        "kept outputs stay on the record"
    );
}

#[tokio::test]
async fn a_delete_event_for_a_key_that_exists_again_is_released() {
    let stack = Stack::new().await;
    let pipeline = stack.pipeline(3);
    let (v1, _) = orders_csv(1, 5);
    let (v2, v2_totals) = orders_csv(50, 6);
    let e1 = stack.upload_event("in/a.csv", &v1).await;
    stack.invoke(&pipeline, &direct(vec![e1]), "run-1").await;
    // Deleted, then re-created before the delete event is handled.
    stack.remove("in/a.csv").await;
    let del_seq = stack.next_sequencer();
    let e2 = stack.upload_event("in/a.csv", &v2).await;
    let r = stack
        .invoke(
            &pipeline,
            &direct(vec![stack.removed_record("in/a.csv", &del_seq)]),
            "run-2",
        )
        .await;
    assert_eq!(r.summary.not_current, 1, "{r:?}");
    let r = stack.invoke(&pipeline, &direct(vec![e2]), "run-3").await;
    assert_eq!(r.summary.processed, 1, "{r:?}");
    assert_eq!(stack.lake_totals().await, v2_totals);
}

/// A connection dropped while the body is read — inside the CSV reader, or inside the gzip
/// decoder — is a transient GetObject failure, not bad input: retried as often as it
/// happens without ever quarantining the object, which then lands whole.
#[tokio::test]
async fn a_connection_dropped_mid_body_is_transient_and_never_quarantines() {
    let stack = Stack::new().await;
    let (csv, totals) = orders_csv(1, 400);
    let gz = {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(csv.as_bytes()).unwrap();
        e.finish().unwrap()
    };
    for (key, body) in [("in/plain.csv", csv.into_bytes()), ("in/packed.csv.gz", gz)] {
        let mut pipeline = stack.pipeline(2);
        let flaky = Arc::new(FlakyStore::new(pipeline.store.clone()));
        flaky.cut_bodies(5, 300);
        pipeline.store = flaky;
        let event = direct(vec![stack.upload_event(key, &body).await]);
        // Five deliveries meet a dropped connection: more than max_attempts (2).
        for i in 0..5 {
            let r = stack.invoke(&pipeline, &event, &format!("run-{i}")).await;
            assert_eq!(r.summary.failed, 1, "{key}: {r:?}");
            let e = &r.errors[0];
            let expected = format!(
                "GetObject s3://{}/{key}: reading the body failed:",
                stack.landing
            );
            assert!(e.contains(&expected), "{key}: {e}");
            let rec = record(&stack, key).await;
            assert_eq!((rec.status, rec.attempts), (Status::Pending, 0), "{key}");
            assert!(
                rec.last_error.unwrap().contains("connection reset"),
                "{key}"
            );
        }
        let r = stack.invoke(&pipeline, &event, "run-ok").await;
        assert_eq!(
            (r.summary.processed, r.summary.failed),
            (1, 0),
            "{key}: {r:?}"
        );
        let rec = record(&stack, key).await;
        assert_eq!(rec.status, Status::Done, "{key}");
        assert_eq!(rec.committed.unwrap().rows, 400);
    }
    let lake = stack.lake_totals().await;
    let mut both = totals;
    both.add(&totals);
    assert_eq!(lake, both);
}
