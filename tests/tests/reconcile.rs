//! Reconcile, each case on both backend pairs (S3 emulator + DynamoDB Local, and local
//! folders and SQLite): nothing is skipped silently, and hand edits are each reported as
//! their own kind with exact numbers. Backfills are in `backfill.rs`.

use bytes::Bytes;
use tidemark::model::Status;
use tidemark::ports::{Clock, LedgerWrite};
use tidemark::reconcile::{self, FindingKind, MismatchKind, Options, Tier, Window};
use tidemark_tests::{Backends, FlakyStore, Totals, orders_csv};

fn window(b: &Backends) -> Window {
    Window {
        from_ms: 0,
        to_ms: b.clock.now_ms() + 86_400_000,
    }
}

/// Both tiers on every object (the source recounted, the outputs' sums read back).
fn opts(repair: bool) -> Options {
    Options {
        repair,
        deep_sample: Some(1.0),
        ..Options::default()
    }
}

async fn reconcile_orders(b: &Backends, repair: bool) -> reconcile::SourceReport {
    let p = b.pipeline();
    let config = b.config();
    let source = config.source("orders").unwrap();
    reconcile::reconcile_source(&p, source, window(b), opts(repair), &b.ctx("reconcile"))
        .await
        .expect("reconcile")
}

fn amount(t: &Totals) -> String {
    format!("{}.{:02}", t.amount_cents / 100, t.amount_cents % 100)
}

/// Upload `n` order files without events; returns their totals (and each file's).
async fn land(b: &Backends, n: i64) -> (Totals, Vec<Totals>) {
    let mut all = Totals::default();
    let mut each = Vec::new();
    for i in 0..n {
        let (csv, t) = orders_csv(i * 1000, 5 + i as usize);
        b.upload(&format!("in/2026/11/{i:02}.csv"), &csv).await;
        all.add(&t);
        each.push(t);
    }
    (all, each)
}

async fn objects_without_events_are_found_missing_repaired_and_the_window_is_clean_after(
    b: Backends,
) {
    let (expected, each) = land(&b, 5).await;

    let r = reconcile_orders(&b, true).await;
    assert_eq!(r.objects, 5);
    assert_eq!(r.findings.len(), 5, "{:#?}", r.findings);
    for (f, t) in r.findings.iter().zip(&each) {
        assert_eq!((f.kind, f.tier), (FindingKind::Missing, Tier::Cheap));
        assert_eq!(f.rows, Some(t.rows), "the finding says what the lake lacks");
        assert_eq!(f.sums["amount"], amount(t));
        assert_eq!(f.repair.as_deref(), Some("processed"), "{f:?}");
    }
    assert_eq!(r.totals.deep.source.rows, expected.rows);
    assert_eq!(
        (r.totals.ledger.rows, r.totals.deep.ledger.rows),
        (0, 0),
        "nothing was in the ledger at check time"
    );
    assert_eq!(r.deep_checked.len(), 5, "every finding is checked deeply");
    assert_eq!(b.lake_totals().await, expected);

    let again = reconcile_orders(&b, true).await;
    assert!(again.clean(), "{again:#?}");
    for t in [
        &again.totals.ledger,
        &again.totals.deep.source,
        &again.totals.deep.ledger,
        &again.totals.deep.lake,
    ] {
        assert_eq!((t.objects, t.rows), (5, expected.rows));
        assert_eq!(t.sums["amount"], amount(&expected));
        assert_eq!(t.sums["quantity"], expected.quantity.to_string());
    }
    let footers = &again.totals.lake;
    assert_eq!((footers.objects, footers.rows), (5, expected.rows));
    assert!(footers.sums.is_empty(), "a footer holds no sums");
}

async fn a_run_that_stops_early_resumes_from_its_cursor(b: Backends) {
    let (expected, _) = land(&b, 5).await;
    let p = b.pipeline();
    let config = b.config();
    let source = config.source("orders").unwrap();
    let first = reconcile::reconcile_source(
        &p,
        source,
        window(&b),
        Options {
            max_objects: Some(2),
            ..opts(true)
        },
        &b.ctx("first"),
    )
    .await
    .unwrap();
    assert!(!first.complete);
    assert_eq!(first.resume_after.as_deref(), Some("in/2026/11/01.csv"));
    assert_eq!(first.findings.len(), 2);
    let rest = reconcile::reconcile_source(
        &p,
        source,
        window(&b),
        Options {
            start_after: first.resume_after.clone(),
            ..opts(true)
        },
        &b.ctx("rest"),
    )
    .await
    .unwrap();
    assert!(rest.complete);
    let keys: Vec<_> = rest.findings.iter().map(|f| f.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "in/2026/11/02.csv",
            "in/2026/11/03.csv",
            "in/2026/11/04.csv"
        ]
    );
    assert_eq!(
        b.lake_totals().await,
        expected,
        "every object repaired exactly once"
    );

    // One key range of the window: (00, 02].
    let part = reconcile::reconcile_source(
        &p,
        source,
        window(&b),
        Options {
            start_after: Some("in/2026/11/00.csv".into()),
            through: Some("in/2026/11/02.csv".into()),
            ..opts(true)
        },
        &b.ctx("part"),
    )
    .await
    .unwrap();
    assert!(part.clean(), "{part:#?}");
    assert_eq!((part.objects, part.checked.cheap), (2, 2));
    assert_eq!(
        part.deep_checked,
        ["in/2026/11/01.csv", "in/2026/11/02.csv"]
    );
}

async fn hand_edits_are_each_reported_as_their_own_kind_with_exact_numbers(b: Backends) {
    let (_, each) = land(&b, 3).await;
    reconcile_orders(&b, true).await;
    let p = b.pipeline();

    // 1. A ledger record deleted by hand.
    let rec = p
        .ledger
        .get("orders", "in/2026/11/00.csv")
        .await
        .unwrap()
        .unwrap();
    let deleted = p
        .ledger
        .delete("orders", "in/2026/11/00.csv", rec.rev)
        .await
        .unwrap();
    assert_eq!(deleted, LedgerWrite::Written);
    // 2. An output deleted by hand.
    assert!(
        p.store
            .delete(&b.lake, "orders/2026/11/01.csv.parquet", None)
            .await
            .unwrap()
    );
    // 3. An output whose rows were altered: 2 of its 7 rows left.
    let config = b.config();
    let spec = config.source("orders").unwrap().convert_spec("x.csv");
    let (csv, altered) = orders_csv(2000, 2);
    let mut parquet = Vec::new();
    tidemark::convert::convert(csv.as_bytes(), &spec, &mut parquet).unwrap();
    b.overwrite_lake("orders/2026/11/02.csv.parquet", Bytes::from(parquet))
        .await;

    let r = reconcile_orders(&b, false).await;
    assert_eq!(r.findings.len(), 1, "{:#?}", r.findings);
    let missing = &r.findings[0];
    assert_eq!(
        (missing.kind, missing.key.as_str()),
        (FindingKind::Missing, "in/2026/11/00.csv")
    );
    assert_eq!(missing.rows, Some(each[0].rows));
    assert_eq!(missing.sums["quantity"], each[0].quantity.to_string());
    assert!(missing.repair.is_none(), "repair was off");

    let of = |kind: MismatchKind| r.mismatches.iter().filter(move |m| m.kind == kind);
    let gone: Vec<_> = of(MismatchKind::OutputMissing).collect();
    assert_eq!(gone.len(), 1, "{:#?}", r.mismatches);
    assert_eq!(gone[0].key, "in/2026/11/01.csv");
    assert_eq!(gone[0].tier, Tier::Cheap, "the footer's GET found nothing");
    assert_eq!(
        gone[0].expected,
        format!(
            "rows {}, sum(amount) {}, sum(quantity) {}",
            each[1].rows,
            amount(&each[1]),
            each[1].quantity
        )
    );
    assert_eq!(gone[0].found, "no such object");

    let replaced: Vec<_> = of(MismatchKind::OutputChanged).collect();
    assert_eq!(replaced.len(), 1, "{:#?}", r.mismatches);
    assert_eq!(
        (replaced[0].key.as_str(), replaced[0].tier),
        ("in/2026/11/02.csv", Tier::Cheap)
    );

    let lake: Vec<_> = of(MismatchKind::LakeVsLedger).collect();
    let measure = |m: &str| {
        lake.iter()
            .find(|x| x.measure == m)
            .unwrap_or_else(|| panic!("{m}: {lake:#?}"))
    };
    assert_eq!(lake.len(), 3, "rows and both sums differ: {lake:#?}");
    // The rows from the footer, the sums from the columns read back.
    assert_eq!(measure("rows").tier, Tier::Cheap);
    assert_eq!(measure("sum(amount)").tier, Tier::Deep);
    assert_eq!(
        (
            measure("rows").expected.as_str(),
            measure("rows").found.as_str()
        ),
        (
            each[2].rows.to_string().as_str(),
            altered.rows.to_string().as_str()
        )
    );
    assert_eq!(measure("sum(amount)").expected, amount(&each[2]));
    assert_eq!(measure("sum(amount)").found, amount(&altered));
    assert_eq!(measure("sum(quantity)").found, altered.quantity.to_string());
    assert!(lake.iter().all(|m| m.key == "in/2026/11/02.csv"));
    assert_eq!(
        of(MismatchKind::LedgerVsSource).count(),
        0,
        "the ledger itself is right"
    );

    // The report shows the same numbers to a person.
    let report = reconcile::Report {
        run_id: "r".into(),
        generated_at: b.clock.now_ms(),
        sources: vec![r],
        jobs: Vec::new(),
        freshness: Vec::new(),
    };
    let html = report.to_html();
    assert!(html.contains("in/2026/11/02.csv") && html.contains(&amount(&altered)));
    assert!(html.contains("no such object") && html.contains("problem(s)"));
}

async fn stale_stuck_and_orphaned_objects_are_found_and_repaired(b: Backends) {
    let (_, _) = land(&b, 3).await;
    reconcile_orders(&b, true).await;
    let p = b.pipeline();
    // Stale: overwritten with no event.
    let (v2, v2_totals) = orders_csv(90_000, 4);
    b.upload("in/2026/11/00.csv", &v2).await;
    // Orphaned: deleted with no event.
    assert!(
        p.store
            .delete(&b.landing, "in/2026/11/01.csv", None)
            .await
            .unwrap()
    );
    // Stuck: a claim whose worker died (lease long expired).
    let mut rec = p
        .ledger
        .get("orders", "in/2026/11/02.csv")
        .await
        .unwrap()
        .unwrap();
    let expected_rev = rec.rev;
    rec.rev += 1;
    rec.claim = Some(tidemark::model::Claim {
        token: "dead".into(),
        target: rec.committed.as_ref().unwrap().target.clone(),
        lease_until: b.clock.now_ms() - 1,
        claimed_at: b.clock.now_ms() - 100_000,
        run_id: "dead-run".into(),
    });
    rec.status = Status::Claimed;
    assert_eq!(
        p.ledger.replace(&rec, expected_rev).await.unwrap(),
        LedgerWrite::Written
    );

    let r = reconcile_orders(&b, true).await;
    let kinds: Vec<_> = r
        .findings
        .iter()
        .map(|f| (f.kind, f.key.as_str(), f.repair.as_deref()))
        .collect();
    assert!(
        kinds.contains(&(FindingKind::Stale, "in/2026/11/00.csv", Some("processed"))),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&(FindingKind::Stuck, "in/2026/11/02.csv", Some("duplicate"))),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&(FindingKind::Orphaned, "in/2026/11/01.csv", Some("deleted"))),
        "{kinds:?}"
    );
    assert_eq!(kinds.len(), 3, "{kinds:?}");

    let lake = b.lake_objects("orders/").await;
    assert!(
        !lake.contains_key("orders/2026/11/01.csv.parquet"),
        "orphan's output deleted"
    );
    assert_eq!(
        tidemark_tests::parquet_totals(lake["orders/2026/11/00.csv.parquet"].clone()),
        v2_totals
    );
    let again = reconcile_orders(&b, true).await;
    assert!(again.clean(), "{again:#?}");
}

async fn scheduled_runs_close_each_window_once_and_write_reports(b: Backends) {
    let (expected, _) = land(&b, 2).await;
    let p = b.pipeline();
    let config = b.config();
    let scheduled = serde_json::json!({
        "version": "0", "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
        "detail-type": "Scheduled Event", "source": "aws.events", "account": "123456789012",
        "time": "2026-11-29T12:00:00Z", "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/tidemark-reconcile"],
        "detail": {}
    });
    // Objects were just written: move past the grace and window so they are in a closed window.
    b.clock.advance(60_000);
    let (first, keys) = reconcile::handle(&p, &config, &scheduled, &b.ctx("sched-1"), i64::MAX)
        .await
        .unwrap();
    let orders = first
        .sources
        .iter()
        .find(|s| s.source_id == "orders")
        .unwrap();
    assert_eq!(orders.findings.len(), 2, "{orders:#?}");
    assert_eq!(b.lake_totals().await, expected, "repaired");
    assert_eq!(keys.len(), 2, "json and html written: {keys:?}");
    let html = b.lake_objects("reports/").await;
    let page = html.iter().find(|(k, _)| k.ends_with(".html")).unwrap().1;
    assert!(
        std::str::from_utf8(page)
            .unwrap()
            .contains("tidemark reconciliation")
    );

    // The next scheduled run starts where the first ended: nothing is checked twice.
    b.clock.advance(60_000);
    let (second, _) = reconcile::handle(&p, &config, &scheduled, &b.ctx("sched-2"), i64::MAX)
        .await
        .unwrap();
    let o2 = second
        .sources
        .iter()
        .find(|s| s.source_id == "orders")
        .unwrap();
    assert_eq!(o2.window.from_ms, orders.window.to_ms);
    assert_eq!(o2.objects, 0);

    // Re-checking the first window on demand is clean.
    let manual = serde_json::json!({
        "source": "orders",
        "from": chrono::DateTime::from_timestamp_millis(orders.window.from_ms).unwrap().to_rfc3339(),
        "to": chrono::DateTime::from_timestamp_millis(orders.window.to_ms).unwrap().to_rfc3339(),
    });
    let (recheck, _) = reconcile::handle(&p, &config, &manual, &b.ctx("manual"), i64::MAX)
        .await
        .unwrap();
    assert!(recheck.clean(), "{recheck:#?}");
    assert_eq!(recheck.sources[0].totals.lake.rows, expected.rows);
    let bad = serde_json::json!({"from": "yesterday", "to": "today"});
    assert!(
        reconcile::handle(&p, &config, &bad, &b.ctx("bad"), i64::MAX)
            .await
            .is_err()
    );
    let unknown = serde_json::json!({"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z", "force": true});
    assert!(
        reconcile::handle(&p, &config, &unknown, &b.ctx("bad"), i64::MAX)
            .await
            .is_err()
    );
}

/// A store failure while one object is checked is that object's finding (`unchecked`),
/// not the end of the pass: the other objects are checked and counted, a listing failure is
/// that source's error, and a scheduled window with anything unchecked stays open until a
/// later run has checked everything.
async fn store_failures_are_reported_per_object_and_keep_the_window_open(b: Backends) {
    let (expected, each) = land(&b, 3).await;
    assert_eq!(reconcile_orders(&b, true).await.findings.len(), 3);
    let mut p = b.pipeline();
    let flaky = std::sync::Arc::new(FlakyStore::new(p.store.clone()));
    p.store = flaky.clone();
    let config = b.config();
    let source = config.source("orders").unwrap();
    let check = |p: &tidemark::process::Pipeline| {
        let p = p.clone();
        let ctx = b.ctx("check");
        let w = window(&b);
        async move {
            reconcile::reconcile_source(&p, source, w, opts(true), &ctx)
                .await
                .expect("a pass with failing objects still reports")
        }
    };

    // The source object of 01.csv cannot be read; the output of 02.csv cannot be read.
    flaky.fail_gets_of(Some("in/2026/11/01.csv"));
    let r = check(&p).await;
    assert_eq!(r.findings.len(), 1, "{:#?}", r.findings);
    let f = &r.findings[0];
    assert_eq!(
        (f.kind, f.key.as_str()),
        (FindingKind::Unchecked, "in/2026/11/01.csv")
    );
    assert!(f.detail.starts_with("GetObject s3://"), "{f:?}");
    assert!(f.repair.is_none(), "nothing to repair: {f:?}");
    assert!(r.mismatches.is_empty(), "{:#?}", r.mismatches);
    assert!(!r.clean() && !r.checked());
    let others = each[0].rows + each[2].rows;
    assert_eq!(
        (r.totals.deep.source.rows, r.totals.deep.lake.rows),
        (others, others)
    );
    assert_eq!(
        f.tier,
        Tier::Deep,
        "the recount failed, not the cheap check"
    );
    assert_eq!(r.totals.lake.rows, expected.rows, "every footer was read");

    flaky.fail_gets_of(Some("orders/2026/11/02.csv.parquet"));
    let r = check(&p).await;
    let kinds: Vec<_> = r
        .findings
        .iter()
        .map(|f| (f.kind, f.key.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [(FindingKind::Unchecked, "in/2026/11/02.csv")],
        "{r:#?}"
    );
    assert!(
        r.findings[0]
            .detail
            .contains("orders/2026/11/02.csv.parquet"),
        "{r:#?}"
    );
    assert_eq!(r.findings[0].tier, Tier::Cheap);
    // An object whose cheap check failed is left to the next run whole: no deep check.
    assert_eq!(r.deep_checked, ["in/2026/11/00.csv", "in/2026/11/01.csv"]);
    assert_eq!(r.totals.deep.source.rows, each[0].rows + each[1].rows);

    // A listing failure is the source's error in the report; the run itself succeeds.
    flaky.fail_gets_of(None);
    flaky.fail_lists(true);
    let manual = serde_json::json!({
        "from": "2000-01-01T00:00:00Z",
        "to": chrono::DateTime::from_timestamp_millis(window(&b).to_ms).unwrap().to_rfc3339(),
    });
    let (report, _) = reconcile::handle(&p, &config, &manual, &b.ctx("m"), i64::MAX)
        .await
        .expect("the run reports the failing source");
    let orders = report
        .sources
        .iter()
        .find(|s| s.source_id == "orders")
        .unwrap();
    assert!(
        orders
            .error
            .as_deref()
            .unwrap()
            .starts_with("ListObjectsV2 s3://"),
        "{orders:#?}"
    );
    assert!(!report.clean());
    assert!(report.to_html().contains("not reconciled"));
    let metrics = report.metric_lines().join("\n");
    assert!(metrics.contains("\"Unchecked\":1"), "{metrics}");

    // Scheduled: the window with an unchecked object is not closed, and the next run
    // (the fault gone) checks the same window again and closes it.
    flaky.fail_lists(false);
    flaky.fail_gets_of(Some("orders/2026/11/00.csv.parquet"));
    let scheduled =
        serde_json::json!({"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}});
    b.clock.advance(60_000);
    let (first, _) = reconcile::handle(&p, &config, &scheduled, &b.ctx("s1"), i64::MAX)
        .await
        .unwrap();
    let o1 = first
        .sources
        .iter()
        .find(|s| s.source_id == "orders")
        .unwrap();
    assert_eq!(o1.findings.len(), 1, "{o1:#?}");
    assert_eq!(o1.findings[0].kind, FindingKind::Unchecked);
    flaky.fail_gets_of(None);
    b.clock.advance(60_000);
    let (second, _) = reconcile::handle(&p, &config, &scheduled, &b.ctx("s2"), i64::MAX)
        .await
        .unwrap();
    let o2 = second
        .sources
        .iter()
        .find(|s| s.source_id == "orders")
        .unwrap();
    // Had the first run closed its window, this one would start at its end, with nothing
    // in it; it checks all three objects again instead.
    assert!(o2.window.from_ms < o1.window.to_ms, "{o1:#?} {o2:#?}");
    assert_eq!(o2.objects, 3);
    assert!(o2.clean(), "{o2:#?}");
    assert_eq!(o2.totals.lake.rows, expected.rows);
    b.clock.advance(60_000);
    let (third, _) = reconcile::handle(&p, &config, &scheduled, &b.ctx("s3"), i64::MAX)
        .await
        .unwrap();
    let o3 = third
        .sources
        .iter()
        .find(|s| s.source_id == "orders")
        .unwrap();
    assert_eq!(o3.window.from_ms, o2.window.to_ms, "closed at last");
}

/// Reconcile `orders` with repair off and the deep tier sampling `sample` of the objects.
async fn sampled_check(b: &Backends, sample: f64) -> reconcile::SourceReport {
    let p = b.pipeline();
    let config = b.config();
    let source = config.source("orders").unwrap();
    let opts = Options {
        repair: false,
        deep_sample: Some(sample),
        ..Options::default()
    };
    reconcile::reconcile_source(&p, source, window(b), opts, &b.ctx("sampled"))
        .await
        .expect("reconcile")
}

/// The report's mismatches as (kind, tier, measure, expected, found).
fn mismatch_rows(r: &reconcile::SourceReport) -> Vec<(MismatchKind, Tier, &str, String, String)> {
    r.mismatches
        .iter()
        .map(|m| {
            (
                m.kind,
                m.tier,
                m.measure.as_str(),
                m.expected.clone(),
                m.found.clone(),
            )
        })
        .collect()
}

/// The cheap tier alone (a sample of none) finds an object the ledger never saw and an
/// output deleted by hand, and sends exactly those two to the deep tier.
async fn the_cheap_tier_finds_a_missing_object_and_a_deleted_output(b: Backends) {
    let (_, each) = land(&b, 3).await;
    reconcile_orders(&b, true).await;
    let p = b.pipeline();
    let rec = p
        .ledger
        .get("orders", "in/2026/11/00.csv")
        .await
        .unwrap()
        .unwrap();
    let forgotten = p.ledger.delete("orders", &rec.key, rec.rev).await.unwrap();
    assert_eq!(forgotten, LedgerWrite::Written);
    let deleted = p
        .store
        .delete(&b.lake, "orders/2026/11/01.csv.parquet", None);
    assert!(deleted.await.unwrap());

    let r = sampled_check(&b, 0.0).await;
    let findings: Vec<_> = r
        .findings
        .iter()
        .map(|f| (f.kind, f.key.as_str(), f.tier))
        .collect();
    assert_eq!(
        findings,
        [(FindingKind::Missing, "in/2026/11/00.csv", Tier::Cheap)]
    );
    assert_eq!(
        r.findings[0].rows,
        Some(each[0].rows),
        "recounted by the deep tier"
    );
    let mismatches: Vec<_> = r
        .mismatches
        .iter()
        .map(|m| (m.kind, m.key.as_str(), m.tier, m.found.as_str()))
        .collect();
    assert_eq!(
        mismatches,
        [(
            MismatchKind::OutputMissing,
            "in/2026/11/01.csv",
            Tier::Cheap,
            "no such object"
        )]
    );
    assert_eq!(r.checked.cheap, 3);
    assert_eq!(r.deep_checked, ["in/2026/11/00.csv", "in/2026/11/01.csv"]);
    assert_eq!(r.checked.deep, 2);
    let t = &r.totals;
    // Done: 01 and 02; footers read: 02's; deep: 00 and 01 recounted, 01 in the ledger.
    assert_eq!(
        (t.ledger.objects, t.ledger.rows),
        (2, each[1].rows + each[2].rows)
    );
    assert_eq!((t.lake.objects, t.lake.rows), (1, each[2].rows));
    assert_eq!(
        (t.deep.source.objects, t.deep.source.rows),
        (2, each[0].rows + each[1].rows)
    );
    assert_eq!((t.deep.ledger.objects, t.deep.lake.objects), (1, 0));
}

/// An output replaced by hand with another Parquet file of the same row count: its footer
/// agrees with the ledger, but its ETag does not, so the cheap tier flags it and the deep
/// tier, reading its sum columns, reports what differs.
async fn an_output_replaced_with_the_same_row_count_is_caught_by_both_tiers(b: Backends) {
    let (_, each) = land(&b, 3).await;
    reconcile_orders(&b, true).await;
    let p = b.pipeline();
    let committed = p
        .ledger
        .get("orders", "in/2026/11/01.csv")
        .await
        .unwrap()
        .unwrap()
        .committed
        .unwrap();
    let config = b.config();
    let spec = config.source("orders").unwrap().convert_spec("x.csv");
    let (csv, other) = orders_csv(70_123, each[1].rows as usize);
    assert_eq!(other.rows, each[1].rows);
    assert_ne!(other.amount_cents, each[1].amount_cents);
    let mut parquet = Vec::new();
    tidemark::convert::convert(csv.as_bytes(), &spec, &mut parquet).unwrap();
    b.overwrite_lake("orders/2026/11/01.csv.parquet", Bytes::from(parquet))
        .await;
    let now = p
        .store
        .head(&b.lake, "orders/2026/11/01.csv.parquet")
        .await
        .unwrap()
        .unwrap();

    let r = sampled_check(&b, 0.0).await;
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
    let mismatches = mismatch_rows(&r);
    let output = format!("s3://{}/orders/2026/11/01.csv.parquet", b.lake);
    assert_eq!(
        mismatches,
        [
            (
                MismatchKind::OutputChanged,
                Tier::Cheap,
                output.as_str(),
                format!("ETag {}", committed.outputs[0].etag),
                format!("ETag {}", now.etag)
            ),
            (
                MismatchKind::LakeVsLedger,
                Tier::Deep,
                "sum(amount)",
                amount(&each[1]),
                amount(&other)
            ),
            (
                MismatchKind::LakeVsLedger,
                Tier::Deep,
                "sum(quantity)",
                each[1].quantity.to_string(),
                other.quantity.to_string()
            ),
        ],
        "no row mismatch: the footer has the ledger's rows"
    );
    assert!(r.mismatches.iter().all(|m| m.key == "in/2026/11/01.csv"));
    assert_eq!(r.deep_checked, ["in/2026/11/01.csv"]);
    assert_eq!(r.totals.deep.lake.sums["amount"], amount(&other));
    assert_eq!(r.totals.deep.source.sums["amount"], amount(&each[1]));

    // The report says which tier found what, in JSON, on the page and in the metrics.
    let report = reconcile::Report {
        run_id: "r".into(),
        generated_at: b.clock.now_ms(),
        sources: vec![r],
        jobs: Vec::new(),
        freshness: Vec::new(),
    };
    let json = serde_json::to_value(&report).unwrap();
    let entry = &json["sources"][0];
    assert_eq!(
        entry["deep_checked"],
        serde_json::json!(["in/2026/11/01.csv"])
    );
    assert_eq!(entry["checked"], serde_json::json!({"cheap": 3, "deep": 1}));
    assert_eq!(entry["mismatches"][0]["tier"], "cheap");
    assert_eq!(entry["mismatches"][0]["kind"], "output_changed");
    assert_eq!(entry["mismatches"][1]["tier"], "deep");
    let back: reconcile::Report = serde_json::from_value(json).unwrap();
    assert_eq!(back, report);
    let html = report.to_html();
    assert!(html.contains("3 object(s) by the cheap tier"), "{html}");
    assert!(html.contains("1 by the deep tier"), "{html}");
    assert!(html.contains("<td class=\"k\">deep</td>"), "{html}");
    let metrics = report.metric_lines().join("\n");
    assert!(metrics.contains("\"Checked\":3") && metrics.contains("\"DeepChecked\":1"));
}

/// A footer whose row count is not the ledger's (here the ledger record was forged) is a
/// cheap-tier mismatch; the deep tier then finds the ledger wrong against the source too.
async fn a_footer_row_count_unlike_the_ledgers_is_a_cheap_tier_mismatch(b: Backends) {
    let (_, each) = land(&b, 2).await;
    reconcile_orders(&b, true).await;
    let p = b.pipeline();
    let mut rec = p
        .ledger
        .get("orders", "in/2026/11/01.csv")
        .await
        .unwrap()
        .unwrap();
    let expected_rev = rec.rev;
    rec.rev += 1;
    rec.committed.as_mut().unwrap().rows += 1;
    assert_eq!(
        p.ledger.replace(&rec, expected_rev).await.unwrap(),
        LedgerWrite::Written
    );

    let r = sampled_check(&b, 0.0).await;
    let mismatches = mismatch_rows(&r);
    let (ledger, lake) = ((each[1].rows + 1).to_string(), each[1].rows.to_string());
    assert_eq!(
        mismatches,
        [
            (
                MismatchKind::LakeVsLedger,
                Tier::Cheap,
                "rows",
                ledger.clone(),
                lake.clone()
            ),
            (
                MismatchKind::LedgerVsSource,
                Tier::Deep,
                "rows",
                lake,
                ledger
            ),
        ]
    );
    assert!(r.mismatches.iter().all(|m| m.key == "in/2026/11/01.csv"));
    assert_eq!(r.deep_checked, ["in/2026/11/01.csv"]);
}

/// The deep tier's sample is a stable hash of key and ETag: two runs check the same objects,
/// about the asked fraction of them; 0 checks none, 1 and a manual `deep` every one.
async fn the_deep_sample_is_the_same_on_every_run(b: Backends) {
    let n = 40;
    for i in 0..n {
        let (csv, _) = orders_csv(i * 100, 3);
        b.upload(&format!("in/2026/12/{i:03}.csv"), &csv).await;
    }
    assert_eq!(reconcile_orders(&b, true).await.findings.len(), n as usize);
    let p = b.pipeline();
    let mut listed = Vec::new();
    let mut token = None;
    loop {
        let page = p
            .store
            .list(&b.landing, "in/", token.as_deref())
            .await
            .unwrap();
        listed.extend(page.objects.into_iter().map(|o| (o.key, o.etag)));
        match page.next {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    assert_eq!(listed.len(), n as usize);

    let half = sampled_check(&b, 0.5).await;
    assert!(half.clean(), "{half:#?}");
    let expected: Vec<&str> = listed
        .iter()
        .filter(|(k, e)| reconcile::sampled(k, e, 0.5))
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(half.deep_checked, expected);
    assert!(
        (8..=32).contains(&expected.len()),
        "{} of {n}",
        expected.len()
    );
    assert_eq!(sampled_check(&b, 0.5).await.deep_checked, half.deep_checked);
    assert_eq!(half.totals.deep.lake.objects, expected.len() as u64);
    assert_eq!(half.totals.deep.source.rows, 3 * expected.len() as u64);
    assert_eq!(half.totals.lake.rows, 3 * n as u64, "every footer read");

    let none = sampled_check(&b, 0.0).await;
    assert_eq!((none.checked.cheap, none.checked.deep), (n as u64, 0));
    assert_eq!(none.totals.deep, reconcile::DeepTotals::default());
    let all = sampled_check(&b, 1.0).await;
    assert_eq!(all.deep_checked.len(), n as usize);
    // The source's default (1%) from the configuration: the same objects every run.
    let default = |run: &'static str| {
        let (p, config, ctx, w) = (b.pipeline(), b.config(), b.ctx(run), window(&b));
        async move {
            let source = config.source("orders").unwrap();
            reconcile::reconcile_source(&p, source, w, Options::default(), &ctx)
                .await
                .unwrap()
        }
    };
    let (one, two) = (default("d1").await, default("d2").await);
    assert_eq!(one.deep_sample, 0.01);
    assert_eq!(one.deep_checked, two.deep_checked);

    // A manual request: `deep` checks every object, `sample` overrides the fraction.
    let config = b.config();
    let manual = |extra: serde_json::Value| {
        let mut req = serde_json::json!({
            "source": "orders", "repair": false,
            "from": "2000-01-01T00:00:00Z",
            "to": chrono::DateTime::from_timestamp_millis(window(&b).to_ms).unwrap().to_rfc3339(),
        });
        req.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        req
    };
    let (deep, _) = reconcile::handle(
        &p,
        &config,
        &manual(serde_json::json!({"deep": true})),
        &b.ctx("m1"),
        i64::MAX,
    )
    .await
    .unwrap();
    assert_eq!(deep.sources[0].deep_checked.len(), n as usize);
    assert!(deep.clean(), "{deep:#?}");
    let (half_again, _) = reconcile::handle(
        &p,
        &config,
        &manual(serde_json::json!({"sample": 0.5})),
        &b.ctx("m2"),
        i64::MAX,
    )
    .await
    .unwrap();
    assert_eq!(half_again.sources[0].deep_checked, half.deep_checked);
    let e = reconcile::handle(
        &p,
        &config,
        &manual(serde_json::json!({"sample": 1.5})),
        &b.ctx("m3"),
        i64::MAX,
    )
    .await
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("sample: 1.5 is not a fraction in [0, 1]"),
        "{e}"
    );
}

/// With `reconcile.deep_closed_days`, the scheduled run whose window passes a UTC midnight
/// also checks every object of the day it closed with the deep tier, as its own report
/// entry, once.
async fn a_closed_day_is_checked_deeply_once(b: Backends) {
    let (expected, _) = land(&b, 3).await;
    let doc = serde_json::json!({
        "sources": [{
            "source_id": "orders", "bucket": b.landing, "prefix": "in/", "format": "csv",
            "schema": [
                {"name": "order_id", "type": "int64", "nullable": false},
                {"name": "customer", "type": "string"},
                {"name": "quantity", "type": "int32"},
                {"name": "amount", "type": "decimal(12,2)"},
                {"name": "ordered_at", "type": "timestamp"}
            ],
            "sum_columns": ["quantity", "amount"],
            "output": {"bucket": b.lake, "prefix": "orders/"},
            "reconcile": {"grace_minutes": 0, "deep_sample": 0, "deep_closed_days": true}
        }],
        "reports": {"bucket": b.lake, "prefix": "reports/"}
    });
    let config =
        std::sync::Arc::new(tidemark::config::Config::from_json(&doc.to_string()).unwrap());
    let p = b.pipeline_with(config.clone());
    let scheduled =
        serde_json::json!({"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}});
    // The objects landed today: move to just past the coming midnight, which closes today.
    let day = 86_400_000;
    let midnight = (b.clock.now_ms() / day + 1) * day;
    b.clock.advance(midnight + 60_000 - b.clock.now_ms());
    let (first, _) = reconcile::handle(&p, &config, &scheduled, &b.ctx("s1"), i64::MAX)
        .await
        .unwrap();
    assert_eq!(first.sources.len(), 2, "{first:#?}");
    let (window, closed) = (&first.sources[0], &first.sources[1]);
    assert!(!window.closed_day && closed.closed_day);
    assert_eq!(
        window.findings.len(),
        3,
        "repaired by the window's run: {window:#?}"
    );
    assert_eq!(
        (closed.window.from_ms, closed.window.to_ms),
        (midnight - day, midnight)
    );
    assert!(closed.clean(), "{closed:#?}");
    assert_eq!((closed.objects, closed.checked.deep), (3, 3));
    for t in [
        &closed.totals.deep.source,
        &closed.totals.deep.ledger,
        &closed.totals.deep.lake,
    ] {
        assert_eq!((t.objects, t.rows), (3, expected.rows));
        assert_eq!(t.sums["amount"], amount(&expected));
    }
    assert!(
        first
            .to_html()
            .contains("closed day, every object deep-checked")
    );

    b.clock.advance(60_000);
    let (second, _) = reconcile::handle(&p, &config, &scheduled, &b.ctx("s2"), i64::MAX)
        .await
        .unwrap();
    assert_eq!(
        second.sources.len(),
        1,
        "the day was checked once: {second:#?}"
    );
    assert!(!second.sources[0].closed_day);
}

tidemark_tests::on_both!(
    a_run_that_stops_early_resumes_from_its_cursor,
    objects_without_events_are_found_missing_repaired_and_the_window_is_clean_after,
    hand_edits_are_each_reported_as_their_own_kind_with_exact_numbers,
    stale_stuck_and_orphaned_objects_are_found_and_repaired,
    scheduled_runs_close_each_window_once_and_write_reports,
    store_failures_are_reported_per_object_and_keep_the_window_open,
    the_cheap_tier_finds_a_missing_object_and_a_deleted_output,
    an_output_replaced_with_the_same_row_count_is_caught_by_both_tiers,
    a_footer_row_count_unlike_the_ledgers_is_a_cheap_tier_mismatch,
    the_deep_sample_is_the_same_on_every_run,
    a_closed_day_is_checked_deeply_once,
);
