//! One conformance suite of the `Ledger` and `ObjectStore` ports, written once over
//! `Arc<dyn …>` and run on every backend pair: the embedded one (`FolderStore` in a temp dir +
//! `SqliteLedger`) and the AWS one (S3 on the emulator + DynamoDB Local, started by
//! `infra/test.sh`). A behaviour the protocol relies on passes on both, or the backends have
//! drifted apart.
//!
//! Each case is an `async fn(Backends)`; [`conformance!`] makes one `#[tokio::test]` of it per
//! pair, named `embedded::<case>` and `aws::<case>`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use tidemark::aws::dynamodb::DynamoLedger;
use tidemark::aws::s3::S3Store;
use tidemark::config::Mode;
use tidemark::jobs::{Job, JobCounts, JobKind, PendingPage, Plan};
use tidemark::local::{FolderStore, SqliteLedger};
use tidemark::model::{
    AuditEntry, Claim, Committed, DeleteRef, IgnoredFields, OutputRef, Record, Status, Target,
    VersionRef,
};
use tidemark::ports::{
    ByteRange, GetOutcome, JobWrite, KeyRange, Ledger, LedgerWrite, ObjectMeta, ObjectStore,
    PutOutcome, RangeOutcome, WriteCondition,
};
use tidemark_tests::Stack;
use tokio::io::AsyncReadExt;

/// A backend pair under test, with a fresh bucket and an empty ledger.
struct Backends {
    store: Arc<dyn ObjectStore>,
    ledger: Arc<dyn Ledger>,
    /// Another, independent handle on the same store and ledger, as a second process would
    /// open (for SQLite: another connection), so that races are between handles.
    connect: Connect,
    bucket: String,
    /// Whether CompleteMultipartUpload honours `If-Match`. AWS does; moto 5.2.5 completes the
    /// upload whatever the condition says (it honours `If-None-Match`), so that one check runs
    /// only where it can pass.
    honours_complete_if_match: bool,
    /// The embedded pair's files, removed when the case ends.
    _dir: Option<TempDir>,
}

type Connect = Box<dyn Fn() -> (Arc<dyn ObjectStore>, Arc<dyn Ledger>) + Send + Sync>;

/// A directory removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// FolderStore in a temp dir + SqliteLedger in the same dir.
async fn embedded() -> Backends {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("conformance-{}", uuid::Uuid::new_v4().simple()));
    let (root, db) = (dir.join("buckets"), dir.join("ledger.db"));
    FolderStore::new(&root)
        .create_bucket("conformance")
        .await
        .expect("create bucket");
    let connect: Connect = Box::new(move || {
        let ledger = SqliteLedger::open(&db).expect("open ledger");
        (Arc::new(FolderStore::new(&root)), Arc::new(ledger))
    });
    let (store, ledger) = connect();
    Backends {
        store,
        ledger,
        connect,
        bucket: "conformance".into(),
        honours_complete_if_match: true,
        _dir: Some(TempDir(dir)),
    }
}

/// S3 on the emulator + DynamoDB Local: a fresh table and bucket.
async fn aws() -> Backends {
    let stack = Stack::new().await;
    let (s3, dynamo, table) = (stack.s3.clone(), stack.dynamo.clone(), stack.table.clone());
    let connect: Connect = Box::new(move || {
        (
            Arc::new(S3Store::new(s3.clone())),
            // Small pages, so that listings and the audit scan follow LastEvaluatedKey.
            Arc::new(DynamoLedger::new(dynamo.clone(), &table).with_page_limit(7)),
        )
    });
    let (store, ledger) = connect();
    Backends {
        store,
        ledger,
        connect,
        bucket: stack.landing.clone(),
        honours_complete_if_match: false,
        _dir: None,
    }
}

/// One `#[tokio::test]` per case per backend pair.
macro_rules! conformance {
    ($($case:ident),+ $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    super::$case(super::embedded().await).await;
                }
            )+
        }
        mod aws {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    super::$case(super::aws().await).await;
                }
            )+
        }
    };
}

conformance!(
    ledger_create_only_if_absent,
    ledger_replace_with_a_wrong_rev_conflicts,
    ledger_replace_round_trips_every_field,
    ledger_get_of_an_unknown_key_is_none,
    ledger_one_writer_wins_each_race,
    ledger_awkward_keys,
    ledger_delete_is_conditional_on_the_rev,
    ledger_list_returns_one_sources_records_in_key_order,
    ledger_list_range_and_get_many,
    jobs_round_trip_and_count_each_message_once,
    ledger_audit_log_round_trips_and_filters_by_source,
    ledger_source_mode_round_trips,
    store_put_absent_twice,
    store_put_matches_a_wrong_etag,
    store_put_matches_the_right_etag,
    store_etag_is_the_md5_of_a_single_put,
    store_get_pinned_to_a_stale_etag,
    store_get_of_a_missing_key,
    store_head_returns_size_etag_and_metadata,
    store_delete_with_a_wrong_etag,
    store_one_writer_wins_each_race,
    store_multipart_upload,
    store_multipart_complete_under_a_failed_condition,
    store_multipart_abort,
    store_list_pages_in_s3_order,
    store_awkward_keys,
    store_missing_bucket,
    store_get_range,
);

// ---------------------------------------------------------------------------------------
// Ledger

const SOURCE: &str = "orders";

fn seq(s: &str) -> Option<tidemark::events::Sequencer> {
    Some(s.parse().expect("valid sequencer"))
}

/// A fresh record, as a first claim writes it.
fn fresh(key: &str) -> Record {
    Record {
        source_id: SOURCE.into(),
        key: key.into(),
        status: Status::Pending,
        rev: 1,
        committed: None,
        claim: None,
        pending: Some(Target::Version(VersionRef {
            version: "v1".into(),
            version_id: None,
            etag: Some("v1".into()),
            sequencer: None,
            size: None,
        })),
        attempts: 0,
        last_error: None,
        note: None,
        updated_at: 1_700_000_000_000,
        bookmark: None,
        writing: Vec::new(),
    }
}

/// A record with every field set, nested ones included.
fn full(key: &str, rev: u64) -> Record {
    Record {
        source_id: SOURCE.into(),
        key: key.into(),
        status: Status::Claimed,
        rev,
        committed: Some(Committed {
            target: Target::Version(VersionRef {
                version: "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY".into(),
                version_id: Some("3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY".into()),
                etag: Some("d41d8cd98f00b204e9800998ecf8427e-12".into()),
                sequencer: seq("0055AED6DCD90281E5"),
                size: Some(5_368_709_120),
            }),
            rows: 1_234_567,
            sums: BTreeMap::from([
                ("amount".into(), "-98765432109876543210.55".into()),
                ("quantity".into(), "0".into()),
            ]),
            outputs: vec![
                OutputRef {
                    bucket: "lake".into(),
                    key: "orders/2024/a b+c%.parquet".into(),
                    etag: "9b2cf535f27731c974343645a3985328".into(),
                    ..OutputRef::default()
                },
                OutputRef {
                    bucket: "lake".into(),
                    key: "orders/你好/😊.parquet".into(),
                    etag: "0cc175b9c0f1b6a831c399e269772661-3".into(),
                    ..OutputRef::default()
                },
            ],
            rejected: 0,
            rejects: None,
            rescued: 9_007_199_254_740_993,
            ignored: IgnoredFields {
                values: 9_007_199_254_741_000,
                fields: BTreeMap::from([
                    (
                        "userIdentity.sessionContext.extra".into(),
                        9_007_199_254_740_993,
                    ),
                    ("resources[].tags{}".into(), 4),
                    ("detail[\"x.y\"]".into(), 2),
                    ("détail 😊".into(), 1),
                ]),
            },
            config_fp: "fp-7f3a".into(),
            committed_at: 1_700_000_001_000,
            run_id: "run-1".into(),
        }),
        claim: Some(Claim {
            token: "tok-42".into(),
            target: Target::Delete(DeleteRef {
                sequencer: seq("0055AED6DCD90281E6F"),
                version_id: Some("null".into()),
                delete_marker: true,
            }),
            lease_until: 1_700_000_060_000,
            claimed_at: 1_700_000_002_000,
            run_id: "run-2".into(),
        }),
        pending: Some(Target::Version(VersionRef {
            version: "etag-3".into(),
            version_id: None,
            etag: Some("etag-3".into()),
            sequencer: seq("0A"),
            size: Some(0),
        })),
        attempts: 2,
        last_error: Some("s3://landing/in/a.csv: line 3, column 2: \"x\" is not an int64".into()),
        note: Some("superseded by etag-3".into()),
        updated_at: 1_700_000_002_000,
        bookmark: Some(full_bookmark()),
        writing: Vec::new(),
    }
}

/// Row-level bookmark state with every field set: i64-sized counters, a composite mark of
/// awkward strings, an index reference and a pending advance.
fn full_bookmark() -> tidemark::model::BookmarkState {
    use tidemark::model::{Advance, BookmarkCounts, BookmarkState};
    let counts = BookmarkCounts {
        objects: 3,
        emitted: 9_007_199_254_740_993,
        late: 1,
        skipped: 0,
    };
    let index = OutputRef {
        bucket: "lake".into(),
        key: "orders/_bookmark/index-0123456789abcdef.txt.zst".into(),
        etag: "e1".into(),
        ..OutputRef::default()
    };
    BookmarkState {
        mark: Some(vec![
            "tab\tü 😊".into(),
            "2024-02-29T23:59:59.000001Z".into(),
        ]),
        counts,
        index: Some(index.clone()),
        late_output: Some(OutputRef {
            bucket: "lake".into(),
            key: "orders/_late/a.csv.0123456789abcdef.parquet".into(),
            etag: "e2".into(),
            ..OutputRef::default()
        }),
        advance: Some(Box::new(Advance {
            key: "in/a.csv".into(),
            version: "v9".into(),
            object_token: "tok-1".into(),
            run_id: "run-9".into(),
            output: index.clone(),
            mark: Some(vec!["z".into(), "".into()]),
            index,
            delta: counts,
            at: 1_700_000_003_000,
        })),
        holder: Some("in/ü b.csv".into()),
    }
}

/// Assert two records are the same, down to their serialized form (a `Sequencer` compares
/// equal to its zero-padded self; the stored text must not change either).
#[track_caller]
fn assert_same(got: &Record, want: &Record) {
    assert_eq!(got, want);
    assert_eq!(
        serde_json::to_value(got).unwrap(),
        serde_json::to_value(want).unwrap()
    );
}

/// The record a conflict carried.
#[track_caller]
fn conflict(w: LedgerWrite) -> Option<Record> {
    match w {
        LedgerWrite::Conflict(current) => current.map(|r| *r),
        LedgerWrite::Written => panic!("expected a conflict, the write went through"),
    }
}

async fn ledger_create_only_if_absent(b: Backends) {
    let first = full("in/a.csv", 1);
    assert_eq!(b.ledger.create(&first).await.unwrap(), LedgerWrite::Written);
    let current = conflict(b.ledger.create(&fresh("in/a.csv")).await.unwrap());
    assert_same(&current.expect("the conflict carries the record"), &first);
    assert_same(
        &b.ledger.get(SOURCE, "in/a.csv").await.unwrap().unwrap(),
        &first,
    );
}

async fn ledger_replace_with_a_wrong_rev_conflicts(b: Backends) {
    let stored = fresh("in/a.csv");
    b.ledger.create(&stored).await.unwrap();
    for wrong in [0, 2, 7] {
        let current = conflict(b.ledger.replace(&full("in/a.csv", 2), wrong).await.unwrap());
        assert_same(&current.expect("the conflict carries the record"), &stored);
    }
    assert_same(
        &b.ledger.get(SOURCE, "in/a.csv").await.unwrap().unwrap(),
        &stored,
    );
    // No record at all: the condition fails too, and there is nothing to carry.
    let missing = conflict(b.ledger.replace(&full("in/none.csv", 2), 1).await.unwrap());
    assert_eq!(missing, None);
    assert_eq!(b.ledger.get(SOURCE, "in/none.csv").await.unwrap(), None);
}

async fn ledger_replace_round_trips_every_field(b: Backends) {
    b.ledger.create(&fresh("in/a.csv")).await.unwrap();
    let everything = full("in/a.csv", 2);
    let w = b.ledger.replace(&everything, 1).await.unwrap();
    assert_eq!(w, LedgerWrite::Written);
    assert_same(
        &b.ledger.get(SOURCE, "in/a.csv").await.unwrap().unwrap(),
        &everything,
    );

    // Fields dropped by a replace are gone, not left over from the previous record.
    let mut done = everything.clone();
    done.rev = 3;
    done.status = Status::Deleted;
    done.claim = None;
    done.pending = None;
    done.last_error = None;
    done.note = None;
    done.attempts = 0;
    let committed = done.committed.as_mut().unwrap();
    committed.target = Target::Delete(DeleteRef {
        sequencer: None,
        version_id: None,
        delete_marker: false,
    });
    committed.sums.clear();
    committed.outputs.clear();
    committed.rescued = 0;
    committed.ignored = IgnoredFields::default();
    assert_eq!(
        b.ledger.replace(&done, 2).await.unwrap(),
        LedgerWrite::Written
    );
    assert_same(
        &b.ledger.get(SOURCE, "in/a.csv").await.unwrap().unwrap(),
        &done,
    );
}

async fn ledger_get_of_an_unknown_key_is_none(b: Backends) {
    assert_eq!(b.ledger.get(SOURCE, "in/none.csv").await.unwrap(), None);
    b.ledger.create(&fresh("in/a.csv")).await.unwrap();
    // Records are per source and per exact key.
    assert_eq!(b.ledger.get("clicks", "in/a.csv").await.unwrap(), None);
    assert_eq!(b.ledger.get(SOURCE, "in/a.cs").await.unwrap(), None);
    assert_eq!(b.ledger.get(SOURCE, "in/a.csv ").await.unwrap(), None);
}

async fn ledger_one_writer_wins_each_race(b: Backends) {
    const TASKS: usize = 16;
    const ROUNDS: u64 = 5;
    let key = "in/race.csv";
    for round in 0..=ROUNDS {
        let expected = round; // the rev the racers read (0: no record yet)
        let results = futures::future::join_all((0..TASKS).map(|task| {
            let (_, ledger) = (b.connect)();
            let mut record = fresh(key);
            record.rev = expected + 1;
            record.note = Some(format!("round {round} task {task}"));
            tokio::spawn(async move {
                if expected == 0 {
                    ledger.create(&record).await
                } else {
                    ledger.replace(&record, expected).await
                }
            })
        }))
        .await;
        let stored = b.ledger.get(SOURCE, key).await.unwrap().unwrap();
        assert_eq!(stored.rev, expected + 1);
        let mut winners = 0;
        for result in results {
            match result.unwrap().unwrap() {
                LedgerWrite::Written => winners += 1,
                // Every loser is handed the winner's record.
                LedgerWrite::Conflict(current) => assert_same(&current.unwrap(), &stored),
            }
        }
        assert_eq!(winners, 1, "round {round}");
    }
}

async fn ledger_awkward_keys(b: Backends) {
    let keys = [
        "a b",
        "a+b",
        "a%20b",
        "100%",
        "你好/😊",
        "x?y#z",
        "a//b",
        "../escape",
        "trailing/",
        "/lead",
        "quote'\"",
        "e\u{301}",
        "\u{e9}",
    ];
    for (i, key) in keys.iter().enumerate() {
        let mut r = fresh(key);
        r.attempts = i as u32;
        assert_eq!(
            b.ledger.create(&r).await.unwrap(),
            LedgerWrite::Written,
            "{key:?}"
        );
    }
    for (i, key) in keys.iter().enumerate() {
        let r = b.ledger.get(SOURCE, key).await.unwrap();
        let r = r.unwrap_or_else(|| panic!("{key:?} not found"));
        assert_eq!((r.key.as_str(), r.attempts), (*key, i as u32));
    }
}

async fn ledger_delete_is_conditional_on_the_rev(b: Backends) {
    let stored = full("in/a.csv", 4);
    b.ledger.create(&stored).await.unwrap();
    for wrong in [0, 3, 5] {
        let current = conflict(b.ledger.delete(SOURCE, "in/a.csv", wrong).await.unwrap());
        assert_same(&current.expect("the conflict carries the record"), &stored);
    }
    assert_same(
        &b.ledger.get(SOURCE, "in/a.csv").await.unwrap().unwrap(),
        &stored,
    );
    // Per source and per exact key.
    let other = conflict(b.ledger.delete("clicks", "in/a.csv", 4).await.unwrap());
    assert_eq!(other, None);
    assert_eq!(
        b.ledger.delete(SOURCE, "in/a.csv", 4).await.unwrap(),
        LedgerWrite::Written
    );
    assert_eq!(b.ledger.get(SOURCE, "in/a.csv").await.unwrap(), None);
    // Deleting again: nothing there, nothing carried; a create starts afresh.
    assert_eq!(
        conflict(b.ledger.delete(SOURCE, "in/a.csv", 4).await.unwrap()),
        None
    );
    assert_eq!(
        b.ledger.create(&fresh("in/a.csv")).await.unwrap(),
        LedgerWrite::Written
    );
}

async fn ledger_list_returns_one_sources_records_in_key_order(b: Backends) {
    assert!(b.ledger.list(SOURCE).await.unwrap().is_empty());
    // Enough keys to fill every shard of the DynamoDB index and several pages of each.
    let mut keys: Vec<String> = (0..60).map(|i| format!("in/{i:03}.csv")).collect();
    keys.extend(["a b", "你好/😊", "../escape", "trailing/"].map(String::from));
    for (i, key) in keys.iter().enumerate() {
        let r = if i % 2 == 0 { fresh(key) } else { full(key, 1) };
        b.ledger.create(&r).await.unwrap();
    }
    let mut other = fresh("in/000.csv");
    other.source_id = "orders_json".into(); // shares a prefix with SOURCE
    b.ledger.create(&other).await.unwrap();
    // Operator items of the same source never show up as records.
    b.ledger
        .set_source_mode(SOURCE, Mode::Pause, 1)
        .await
        .unwrap();
    b.ledger
        .audit(&audit_entry(SOURCE, 1, "reset"))
        .await
        .unwrap();

    let listed = b.ledger.list(SOURCE).await.unwrap();
    keys.sort();
    assert_eq!(
        listed.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        keys
    );
    for r in &listed {
        assert_same(r, &b.ledger.get(SOURCE, &r.key).await.unwrap().unwrap());
    }
    let others = b.ledger.list("orders_json").await.unwrap();
    assert_eq!(others.len(), 1);
    assert_same(&others[0], &other);
    assert!(b.ledger.list("clicks").await.unwrap().is_empty());
}

async fn ledger_list_range_and_get_many(b: Backends) {
    // More keys than one BatchGetItem takes, over every index shard, with awkward ones.
    let mut keys: Vec<String> = (0..130).map(|i| format!("in/{i:03}.csv")).collect();
    keys.extend(
        [
            "in/a b",
            "in/你好/😊",
            "in/\u{10FFFF}x",
            "inside",
            "other/1",
        ]
        .map(String::from),
    );
    for key in &keys {
        b.ledger.create(&fresh(key)).await.unwrap();
    }
    let mut other = fresh("in/001.csv");
    other.source_id = "orders_json".into();
    b.ledger.create(&other).await.unwrap();
    let range = |prefix: &str, after: Option<&str>, through: Option<&str>| KeyRange {
        prefix: prefix.into(),
        after: after.map(String::from),
        through: through.map(String::from),
    };
    let listed = |r: Vec<Record>| r.into_iter().map(|r| r.key).collect::<Vec<_>>();
    let mut expect: Vec<String> = keys
        .iter()
        .filter(|k| k.starts_with("in/"))
        .cloned()
        .collect();
    expect.sort();
    let all = b
        .ledger
        .list_range(SOURCE, &KeyRange::prefix("in/"))
        .await
        .unwrap();
    assert_eq!(listed(all), expect);
    // (after, through]: exclusive below, inclusive above.
    let part = b
        .ledger
        .list_range(
            SOURCE,
            &range("in/", Some("in/010.csv"), Some("in/020.csv")),
        )
        .await
        .unwrap();
    let want: Vec<String> = (11..=20).map(|i| format!("in/{i:03}.csv")).collect();
    assert_eq!(listed(part), want);
    // An `after` below the prefix and a `through` beyond it are cut to the prefix.
    let wide = b
        .ledger
        .list_range(SOURCE, &range("in/1", Some("a"), Some("z")))
        .await
        .unwrap();
    assert_eq!(listed(wide).len(), 30);
    // An empty range, and the whole source.
    let empty = b
        .ledger
        .list_range(
            SOURCE,
            &range("in/", Some("in/050.csv"), Some("in/040.csv")),
        )
        .await
        .unwrap();
    assert!(empty.is_empty());
    assert_eq!(
        b.ledger
            .list_range(SOURCE, &KeyRange::default())
            .await
            .unwrap()
            .len(),
        keys.len()
    );

    let mut asked: Vec<String> = keys.iter().step_by(2).cloned().collect();
    asked.push("in/never.csv".into());
    let mut got = listed(b.ledger.get_many(SOURCE, &asked).await.unwrap());
    got.sort();
    let mut want: Vec<String> = keys.iter().step_by(2).cloned().collect();
    want.sort();
    assert_eq!(got, want);
    let theirs = b.ledger.get_many("orders_json", &asked).await.unwrap();
    assert_eq!(theirs.len(), 0, "in/001.csv is not asked for");
    let theirs = b
        .ledger
        .get_many("orders_json", &["in/001.csv".to_string()])
        .await
        .unwrap();
    assert_same(&theirs[0], &other);
    assert!(b.ledger.get_many(SOURCE, &[]).await.unwrap().is_empty());
}

fn job(id: &str, started_at: i64) -> Job {
    Job {
        id: id.into(),
        kind: JobKind::Backfill,
        source_id: SOURCE.into(),
        request: serde_json::json!({"source": SOURCE, "prefix": "in/", "max_objects": null}),
        rev: 1,
        started_at,
        updated_at: started_at,
        plan: Plan::default(),
    }
}

async fn jobs_round_trip_and_count_each_message_once(b: Backends) {
    let first = job("bf-a", 1_000);
    assert!(b.ledger.create_job(&first).await.unwrap());
    assert!(!b.ledger.create_job(&first).await.unwrap(), "the id exists");
    let (got, counts) = b.ledger.get_job("bf-a").await.unwrap().unwrap();
    assert_eq!(got, first);
    assert_eq!(counts, JobCounts::default());
    assert!(b.ledger.get_job("bf-none").await.unwrap().is_none());

    // The planner's writes are conditional on the revision.
    let mut next = first.clone();
    next.rev = 2;
    next.plan = Plan {
        cursor: Some("in/你好 😊".into()),
        listed: 10,
        enqueued: 7,
        messages: 2,
        next_message: 2,
        pending: Some(PendingPage {
            after: None,
            through: "in/z".into(),
            first_message: 0,
            messages: 2,
        }),
        ..Plan::default()
    };
    assert_eq!(
        b.ledger.replace_job(&next, 1).await.unwrap(),
        JobWrite::Written
    );
    let mut stale = first.clone();
    stale.rev = 2;
    match b.ledger.replace_job(&stale, 1).await.unwrap() {
        JobWrite::Conflict(Some(now)) => assert_eq!(*now, next),
        other => panic!("{other:?}"),
    }
    assert_eq!(b.ledger.get_job("bf-a").await.unwrap().unwrap().0, next);

    // Each message is counted once, however often it is finished, from any handle.
    let counts = |processed, rows| JobCounts {
        messages: 1,
        items: processed + 1,
        processed,
        duplicate: 1,
        rows,
        ..JobCounts::default()
    };
    let (_, other_ledger) = (b.connect)();
    let mut finishes = futures::stream::iter(0..40u64)
        .map(|i| {
            let ledger = if i % 2 == 0 {
                b.ledger.clone()
            } else {
                other_ledger.clone()
            };
            async move {
                let message = i % 20;
                ledger
                    .finish_message(
                        "bf-a",
                        message,
                        &counts(message, 10 * message),
                        5_000 + i as i64,
                    )
                    .await
                    .unwrap()
            }
        })
        .buffer_unordered(8);
    let mut firsts = 0;
    while let Some(first) = finishes.next().await {
        firsts += u64::from(first);
    }
    assert_eq!(firsts, 20, "20 messages, each counted once");
    b.ledger.add_failures("bf-a", 3, 9_000).await.unwrap();
    b.ledger.add_failures("bf-a", 2, 9_001).await.unwrap();
    let (_, total) = b.ledger.get_job("bf-a").await.unwrap().unwrap();
    assert_eq!(
        (
            total.messages,
            total.items,
            total.processed,
            total.duplicate,
            total.rows
        ),
        (20, 210, 190, 20, 1_900)
    );
    assert_eq!((total.failures, total.updated_at), (5, 9_001));

    // Newest first; another job's counts are its own.
    b.ledger.create_job(&job("bf-b", 3_000)).await.unwrap();
    b.ledger.create_job(&job("bf-c", 2_000)).await.unwrap();
    b.ledger
        .finish_message("bf-b", 0, &counts(4, 4), 1)
        .await
        .unwrap();
    let listed = b.ledger.list_jobs(10).await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|(j, _)| j.id.as_str()).collect();
    assert_eq!(ids, ["bf-b", "bf-c", "bf-a"]);
    assert_eq!(listed[0].1.processed, 4);
    assert_eq!(listed[2].1.processed, 190);
    assert_eq!(b.ledger.list_jobs(2).await.unwrap().len(), 2);
    // Jobs never show up among a source's records.
    assert!(b.ledger.list(SOURCE).await.unwrap().is_empty());
}

fn audit_entry(source_id: &str, at: i64, command: &str) -> AuditEntry {
    AuditEntry {
        at,
        source_id: source_id.into(),
        command: command.into(),
        args: serde_json::json!({
            "to": "2026-11-29T10:00:00Z", "prefix": "in/你好/", "purge_outputs": true,
            "keys": ["in/a b.csv", "in/😊.csv"], "max": null, "n": 12.5
        }),
        affected: 2,
        operator: "ada".into(),
    }
}

async fn ledger_audit_log_round_trips_and_filters_by_source(b: Backends) {
    assert!(b.ledger.audit_log(None).await.unwrap().is_empty());
    let entries = [
        audit_entry(SOURCE, 1_700_000_000_300, "rewind"),
        audit_entry("orders_json", 1_700_000_000_100, "reset"),
        audit_entry(SOURCE, 1_700_000_000_200, "mode"),
        audit_entry(SOURCE, 1_700_000_000_200, "forget"), // same instant: both kept
        audit_entry("clicks", 1_700_000_000_400, "mark-processed"),
    ];
    for e in &entries {
        b.ledger.audit(e).await.unwrap();
    }
    // Records of the source are not audit entries.
    b.ledger.create(&full("in/a.csv", 1)).await.unwrap();

    let all = b.ledger.audit_log(None).await.unwrap();
    assert_eq!(all.len(), entries.len());
    let ats: Vec<i64> = all.iter().map(|e| e.at).collect();
    assert!(ats.is_sorted(), "oldest first: {ats:?}");
    for e in &entries {
        assert!(all.contains(e), "{e:?} round-trips");
    }
    let mine = b.ledger.audit_log(Some(SOURCE)).await.unwrap();
    assert_eq!(mine.len(), 3);
    assert!(mine.iter().all(|e| e.source_id == SOURCE));
    assert_eq!(mine[2], entries[0]);
    assert_eq!(
        b.ledger.audit_log(Some("orders_json")).await.unwrap(),
        [entries[1].clone()]
    );
    assert!(b.ledger.audit_log(Some("nobody")).await.unwrap().is_empty());
}

async fn ledger_source_mode_round_trips(b: Backends) {
    assert_eq!(b.ledger.source_mode(SOURCE).await.unwrap(), None);
    for mode in [Mode::Pause, Mode::Disable, Mode::Enable] {
        b.ledger.set_source_mode(SOURCE, mode, 5).await.unwrap();
        assert_eq!(b.ledger.source_mode(SOURCE).await.unwrap(), Some(mode));
    }
    b.ledger
        .set_source_mode("orders_json", Mode::Disable, 6)
        .await
        .unwrap();
    assert_eq!(
        b.ledger.source_mode(SOURCE).await.unwrap(),
        Some(Mode::Enable)
    );
    assert_eq!(
        b.ledger.source_mode("orders_json").await.unwrap(),
        Some(Mode::Disable)
    );
    assert_eq!(b.ledger.source_mode("clicks").await.unwrap(), None);
    // A mode item is not a record of the source.
    assert_eq!(b.ledger.get(SOURCE, "").await.unwrap(), None);
}

// ---------------------------------------------------------------------------------------
// Object store

const HELLO_MD5: &str = "5d41402abc4b2a76b9719d911017c592";
const EMPTY_MD5: &str = "d41d8cd98f00b204e9800998ecf8427e";
/// `md5(md5(part 1) ‖ md5(part 2))-2` of [`parts`], computed independently.
const PARTS_ETAG: &str = "30dcfd3901d1c613b7fb532281748544-2";
const MIB: usize = 1 << 20;

fn no_meta() -> BTreeMap<String, String> {
    BTreeMap::new()
}

/// Two parts: the 5 MiB S3 requires of every part but the last, and a small last one.
fn parts() -> (Bytes, Bytes) {
    (
        Bytes::from(vec![b'a'; 5 * MIB]),
        Bytes::from_static(b"tail"),
    )
}

impl Backends {
    async fn put(&self, key: &str, body: &'static [u8], condition: WriteCondition) -> PutOutcome {
        self.store
            .put(
                &self.bucket,
                key,
                Bytes::from_static(body),
                &no_meta(),
                &condition,
            )
            .await
            .unwrap_or_else(|e| panic!("put {key:?}: {e}"))
    }

    /// Put that must succeed; returns the ETag.
    async fn put_new(&self, key: &str, body: &'static [u8]) -> String {
        match self.put(key, body, WriteCondition::Absent).await {
            PutOutcome::Written { etag } => etag,
            PutOutcome::PreconditionFailed => panic!("put {key:?}: precondition failed"),
        }
    }

    /// GET, read to the end.
    async fn get(&self, key: &str, if_match: Option<&str>) -> Option<(ObjectMeta, Vec<u8>)> {
        match self.store.get(&self.bucket, key, if_match).await.unwrap() {
            GetOutcome::Found { meta, mut body } => {
                let mut bytes = Vec::new();
                body.read_to_end(&mut bytes).await.unwrap();
                Some((meta, bytes))
            }
            GetOutcome::NotFound => None,
            GetOutcome::Changed => panic!("get {key:?}: changed"),
        }
    }

    /// The body of `key`, which must exist.
    async fn body(&self, key: &str) -> Vec<u8> {
        self.get(key, None)
            .await
            .unwrap_or_else(|| panic!("{key:?} not found"))
            .1
    }

    /// Start an upload of [`parts`] to `key`; returns its id and the parts' `(number, etag)`.
    async fn upload_parts(&self, key: &str) -> (String, Vec<(i32, String)>) {
        let meta = BTreeMap::from([("source-version".to_string(), "v7".to_string())]);
        let id = self
            .store
            .create_multipart(&self.bucket, key, &meta)
            .await
            .unwrap();
        let (one, two) = parts();
        let mut done = Vec::new();
        for (n, body) in [(1, one), (2, two)] {
            let etag = self
                .store
                .upload_part(&self.bucket, key, &id, n, body)
                .await
                .unwrap();
            done.push((n, etag));
        }
        (id, done)
    }
}

async fn store_put_absent_twice(b: Backends) {
    b.put_new("out/a.parquet", b"first").await;
    let again = b
        .put("out/a.parquet", b"second", WriteCondition::Absent)
        .await;
    assert_eq!(again, PutOutcome::PreconditionFailed);
    assert_eq!(b.body("out/a.parquet").await, b"first");
}

async fn store_put_matches_a_wrong_etag(b: Backends) {
    let etag = b.put_new("out/a.parquet", b"first").await;
    let wrong = WriteCondition::Matches(EMPTY_MD5.into());
    assert_ne!(etag, EMPTY_MD5);
    assert_eq!(
        b.put("out/a.parquet", b"second", wrong.clone()).await,
        PutOutcome::PreconditionFailed
    );
    assert_eq!(b.body("out/a.parquet").await, b"first");
    // If-Match on a key that does not exist fails too (S3 answers 404, the port 412).
    assert_eq!(
        b.put("out/none.parquet", b"x", wrong).await,
        PutOutcome::PreconditionFailed
    );
    assert!(b.get("out/none.parquet", None).await.is_none());
}

async fn store_put_matches_the_right_etag(b: Backends) {
    let first = b.put_new("out/a.parquet", b"first").await;
    let PutOutcome::Written { etag: second } = b
        .put(
            "out/a.parquet",
            b"second",
            WriteCondition::Matches(first.clone()),
        )
        .await
    else {
        panic!("If-Match on the current ETag must write");
    };
    assert_ne!(second, first);
    let (meta, body) = b.get("out/a.parquet", None).await.unwrap();
    assert_eq!((meta.etag, body.as_slice()), (second, &b"second"[..]));
}

async fn store_etag_is_the_md5_of_a_single_put(b: Backends) {
    assert_eq!(b.put_new("hello.txt", b"hello").await, HELLO_MD5);
    assert_eq!(b.put_new("empty.txt", b"").await, EMPTY_MD5);
    let head = b.store.head(&b.bucket, "hello.txt").await.unwrap().unwrap();
    assert_eq!(head.etag, HELLO_MD5);
    let (meta, _) = b.get("empty.txt", None).await.unwrap();
    assert_eq!((meta.etag.as_str(), meta.size), (EMPTY_MD5, 0));
}

async fn store_get_pinned_to_a_stale_etag(b: Backends) {
    let first = b.put_new("in/a.csv", b"first").await;
    let PutOutcome::Written { etag: second } = b
        .put(
            "in/a.csv",
            b"second",
            WriteCondition::Matches(first.clone()),
        )
        .await
    else {
        panic!("overwrite failed");
    };
    let stale = b
        .store
        .get(&b.bucket, "in/a.csv", Some(&first))
        .await
        .unwrap();
    assert!(matches!(stale, GetOutcome::Changed));
    let (meta, body) = b.get("in/a.csv", Some(&second)).await.unwrap();
    assert_eq!((meta.etag, body.as_slice()), (second, &b"second"[..]));
}

async fn store_get_of_a_missing_key(b: Backends) {
    b.put_new("in/a.csv", b"x").await;
    for key in ["in/b.csv", "in/a.cs", "in/a.csv/", "in"] {
        let got = b.store.get(&b.bucket, key, None).await.unwrap();
        assert!(matches!(got, GetOutcome::NotFound), "{key:?}");
        let pinned = b.store.get(&b.bucket, key, Some(HELLO_MD5)).await.unwrap();
        assert!(matches!(pinned, GetOutcome::NotFound), "{key:?} pinned");
        assert_eq!(b.store.head(&b.bucket, key).await.unwrap(), None, "{key:?}");
    }
}

async fn store_head_returns_size_etag_and_metadata(b: Backends) {
    let meta = BTreeMap::from([
        (
            "source-version".to_string(),
            "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY".to_string(),
        ),
        ("Mixed-Case".to_string(), "Value with spaces".to_string()),
    ]);
    let put = b
        .store
        .put(
            &b.bucket,
            "out/a.parquet",
            Bytes::from_static(b"hello"),
            &meta,
            &WriteCondition::Absent,
        )
        .await
        .unwrap();
    assert_eq!(
        put,
        PutOutcome::Written {
            etag: HELLO_MD5.into()
        }
    );
    // S3 lower-cases metadata keys, and the port documents them so.
    let expected = BTreeMap::from([
        (
            "source-version".to_string(),
            "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY".to_string(),
        ),
        ("mixed-case".to_string(), "Value with spaces".to_string()),
    ]);
    let head = b
        .store
        .head(&b.bucket, "out/a.parquet")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            head.key.as_str(),
            head.size,
            head.etag.as_str(),
            &head.metadata
        ),
        ("out/a.parquet", 5, HELLO_MD5, &expected)
    );
    assert!(
        head.last_modified > 1_600_000_000_000,
        "{}",
        head.last_modified
    );
    let (got, _) = b.get("out/a.parquet", None).await.unwrap();
    assert_eq!(got, head);
}

async fn store_delete_with_a_wrong_etag(b: Backends) {
    let etag = b.put_new("out/a.parquet", b"hello").await;
    let deleted = b
        .store
        .delete(&b.bucket, "out/a.parquet", Some(EMPTY_MD5))
        .await
        .unwrap();
    assert!(!deleted);
    assert_eq!(b.body("out/a.parquet").await, b"hello");
    let deleted = b
        .store
        .delete(&b.bucket, "out/a.parquet", Some(&etag))
        .await
        .unwrap();
    assert!(deleted);
    assert!(b.get("out/a.parquet", None).await.is_none());
    let again = b
        .store
        .delete(&b.bucket, "out/a.parquet", Some(&etag))
        .await
        .unwrap();
    assert!(
        !again,
        "a conditional delete of a missing key deletes nothing"
    );
}

async fn store_one_writer_wins_each_race(b: Backends) {
    const TASKS: usize = 16;
    let mut current: Option<String> = None;
    for round in 0..8 {
        let condition = match &current {
            None => WriteCondition::Absent,
            Some(etag) => WriteCondition::Matches(etag.clone()),
        };
        let results = futures::future::join_all((0..TASKS).map(|task| {
            let ((store, _), bucket) = ((b.connect)(), b.bucket.clone());
            let condition = condition.clone();
            let body = Bytes::from(format!("round {round} task {task}"));
            tokio::spawn(async move {
                let put = store
                    .put(&bucket, "out/race", body.clone(), &no_meta(), &condition)
                    .await
                    .unwrap();
                (put, body)
            })
        }))
        .await;
        let winners: Vec<_> = results
            .into_iter()
            .map(Result::unwrap)
            .filter_map(|(put, body)| match put {
                PutOutcome::Written { etag } => Some((etag, body)),
                PutOutcome::PreconditionFailed => None,
            })
            .collect();
        assert_eq!(winners.len(), 1, "round {round}");
        let (etag, body) = winners.into_iter().next().unwrap();
        let (meta, stored) = b.get("out/race", None).await.unwrap();
        assert_eq!(
            (meta.etag.as_str(), stored.as_slice()),
            (etag.as_str(), &body[..])
        );
        current = Some(etag);
    }
}

async fn store_multipart_upload(b: Backends) {
    let (id, parts_done) = b.upload_parts("out/big.parquet").await;
    let put = b
        .store
        .complete_multipart(
            &b.bucket,
            "out/big.parquet",
            &id,
            &parts_done,
            &WriteCondition::Absent,
        )
        .await
        .unwrap();
    assert_eq!(
        put,
        PutOutcome::Written {
            etag: PARTS_ETAG.into()
        }
    );
    let (meta, body) = b.get("out/big.parquet", Some(PARTS_ETAG)).await.unwrap();
    let (one, two) = parts();
    assert_eq!(body.len(), one.len() + two.len());
    assert!(body[..one.len()] == one[..] && body[one.len()..] == two[..]);
    assert_eq!(meta.size as usize, body.len());
    assert_eq!(meta.etag, PARTS_ETAG);
    assert_eq!(meta.metadata["source-version"], "v7");
}

async fn store_multipart_complete_under_a_failed_condition(b: Backends) {
    let old = b.put_new("out/big.parquet", b"old").await;
    let (id, parts_done) = b.upload_parts("out/big.parquet").await;
    let complete = |condition: WriteCondition| {
        let (b, id, parts_done) = (&b, &id, &parts_done);
        async move {
            b.store
                .complete_multipart(&b.bucket, "out/big.parquet", id, parts_done, &condition)
                .await
                .unwrap()
        }
    };
    assert_eq!(
        complete(WriteCondition::Absent).await,
        PutOutcome::PreconditionFailed
    );
    if b.honours_complete_if_match {
        assert_eq!(
            complete(WriteCondition::Matches(EMPTY_MD5.into())).await,
            PutOutcome::PreconditionFailed
        );
    }
    assert_eq!(b.body("out/big.parquet").await, b"old");
    // The upload stayed open: completing it under the right condition succeeds.
    assert_eq!(
        complete(WriteCondition::Matches(old)).await,
        PutOutcome::Written {
            etag: PARTS_ETAG.into()
        }
    );
    assert_eq!(b.body("out/big.parquet").await.len(), 5 * MIB + 4);
}

async fn store_multipart_abort(b: Backends) {
    let (id, parts_done) = b.upload_parts("out/big.parquet").await;
    b.store
        .abort_multipart(&b.bucket, "out/big.parquet", &id)
        .await
        .unwrap();
    let complete = b
        .store
        .complete_multipart(
            &b.bucket,
            "out/big.parquet",
            &id,
            &parts_done,
            &WriteCondition::Absent,
        )
        .await;
    assert!(
        complete.is_err(),
        "completing an aborted upload: {complete:?}"
    );
    assert_eq!(
        b.store.head(&b.bucket, "out/big.parquet").await.unwrap(),
        None
    );
    let listed = b.store.list(&b.bucket, "", None).await.unwrap();
    assert!(listed.objects.is_empty(), "{:?}", listed.objects);
}

/// Put each `key` with the key itself as the body, 16 at a time; returns key → ETag.
async fn put_all(b: &Backends, keys: &[String]) -> BTreeMap<String, String> {
    futures::stream::iter(keys)
        .map(|key| async move {
            let put = b
                .store
                .put(
                    &b.bucket,
                    key,
                    Bytes::from(key.clone()),
                    &no_meta(),
                    &WriteCondition::Absent,
                )
                .await
                .unwrap_or_else(|e| panic!("put {key:?}: {e}"));
            match put {
                PutOutcome::Written { etag } => (key.clone(), etag),
                PutOutcome::PreconditionFailed => panic!("put {key:?}: precondition failed"),
            }
        })
        .buffer_unordered(16)
        .collect()
        .await
}

/// Every page of a listing.
async fn list_pages(b: &Backends, prefix: &str) -> Vec<Vec<ObjectMeta>> {
    let mut pages = Vec::new();
    let mut token = None;
    loop {
        let page = b
            .store
            .list(&b.bucket, prefix, token.as_deref())
            .await
            .unwrap();
        pages.push(page.objects);
        match page.next {
            Some(next) => token = Some(next),
            None => return pages,
        }
    }
}

async fn store_list_pages_in_s3_order(b: Backends) {
    // Keys whose S3 order (bytes) differs from a naive walk of folders: `/` sorts after `-`
    // and `.` and before digits and letters.
    let mut inside: Vec<String> = [
        "p/a", "p/a-b", "p/a.b", "p/a0", "p/A", "p/é", "p/~", "p/b/c/d", "p/b-c", "p/b/c-d",
    ]
    .iter()
    .map(|k| k.to_string())
    .collect();
    inside.extend((0..1_040).map(|i| match i % 3 {
        0 => format!("p/{i:04}"),
        1 => format!("p/d{}/{i:04}.csv", i % 7),
        _ => format!("p/d{}-{i:04}", i % 7),
    }));
    assert_eq!(inside.len(), 1_050);
    let outside = ["o/1", "pa/x", "q", "p0", "P/x", "o/p/1"].map(String::from);
    let mut all = inside.clone();
    all.extend(outside.iter().cloned());
    let etags = put_all(&b, &all).await;

    let pages = list_pages(&b, "p/").await;
    let sizes: Vec<_> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, [1_000, 50], "S3 pages hold 1,000 keys");
    let listed: Vec<ObjectMeta> = pages.into_iter().flatten().collect();
    let keys: Vec<&str> = listed.iter().map(|o| o.key.as_str()).collect();
    inside.sort();
    assert_eq!(keys, inside, "every key under the prefix once, in S3 order");
    for o in &listed {
        assert_eq!(
            (o.size, &o.etag),
            (o.key.len() as u64, &etags[&o.key]),
            "{}",
            o.key
        );
    }

    // A prefix that is not a folder boundary, and one that matches nothing.
    let pages = list_pages(&b, "p/d1").await;
    let keys: Vec<String> = pages.into_iter().flatten().map(|o| o.key).collect();
    let want: Vec<&String> = inside.iter().filter(|k| k.starts_with("p/d1")).collect();
    assert!(!want.is_empty());
    assert_eq!(keys.iter().collect::<Vec<_>>(), want);
    assert_eq!(list_pages(&b, "p/zz").await, [Vec::<ObjectMeta>::new()]);
}

async fn store_awkward_keys(b: Backends) {
    let mut keys: Vec<String> = [
        "a b",
        "a+b",
        "100%",
        "%",
        "你好/😊",
        "x?y#z",
        "a//b",
        "../escape",
        "trailing/",
        "/lead",
        ".tidemark-meta/x",
        "e\u{301}",
        "\u{e9}",
    ]
    .map(String::from)
    .to_vec();
    let etags = put_all(&b, &keys).await;
    keys.sort();
    let listed: Vec<ObjectMeta> = list_pages(&b, "").await.into_iter().flatten().collect();
    let listed_keys: Vec<&String> = listed.iter().map(|o| &o.key).collect();
    assert_eq!(listed_keys, keys.iter().collect::<Vec<_>>());
    for key in &keys {
        let (meta, body) = b
            .get(key, Some(&etags[key]))
            .await
            .unwrap_or_else(|| panic!("{key:?} not found"));
        assert_eq!(
            (meta.key.as_str(), body.as_slice()),
            (key.as_str(), key.as_bytes())
        );
    }
    // Prefixes with the same characters select the same keys.
    let pages = list_pages(&b, "a").await;
    let keys: Vec<String> = pages.into_iter().flatten().map(|o| o.key).collect();
    assert_eq!(keys, ["a b", "a+b", "a//b"]);
}

async fn store_get_range(b: Backends) {
    let body: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    let put = b
        .store
        .put(
            &b.bucket,
            "r/obj",
            Bytes::from(body.clone()),
            &no_meta(),
            &WriteCondition::Absent,
        )
        .await
        .unwrap();
    let PutOutcome::Written { etag } = put else {
        panic!("{put:?}")
    };
    let get = |range, if_match: Option<String>| {
        let (store, bucket) = (b.store.clone(), b.bucket.clone());
        async move {
            store
                .get_range(&bucket, "r/obj", range, if_match.as_deref())
                .await
                .unwrap()
        }
    };
    let found = |o: RangeOutcome| match o {
        RangeOutcome::Found { meta, bytes } => (meta, bytes),
        other => panic!("{other:?}"),
    };
    let (meta, tail) = found(get(ByteRange::Suffix(8), Some(etag.clone())).await);
    assert_eq!((meta.size, meta.etag.as_str()), (100_000, etag.as_str()));
    assert_eq!(&tail[..], &body[100_000 - 8..]);
    let (_, span) = found(
        get(
            ByteRange::Span {
                start: 10,
                end: 1_010,
            },
            None,
        )
        .await,
    );
    assert_eq!(&span[..], &body[10..1_010]);
    // A suffix longer than the object is the whole object; a span is cut at the end.
    let (_, whole) = found(get(ByteRange::Suffix(1 << 20), None).await);
    assert_eq!(whole.len(), 100_000);
    let (_, cut) = found(
        get(
            ByteRange::Span {
                start: 99_990,
                end: 200_000,
            },
            None,
        )
        .await,
    );
    assert_eq!(&cut[..], &body[99_990..]);
    assert!(matches!(
        get(
            ByteRange::Suffix(8),
            Some("0123456789abcdef0123456789abcdef".into())
        )
        .await,
        RangeOutcome::Changed
    ));
    let missing = b
        .store
        .get_range(&b.bucket, "r/none", ByteRange::Suffix(8), None)
        .await
        .unwrap();
    assert!(matches!(missing, RangeOutcome::NotFound), "{missing:?}");
}

async fn store_missing_bucket(b: Backends) {
    let bucket = format!("{}-missing", b.bucket);
    let e = b.store.list(&bucket, "", None).await.unwrap_err();
    assert_eq!(e.bucket, bucket);
    assert_eq!(e.retry, tidemark::error::Retry::Permanent, "{e}");
}
