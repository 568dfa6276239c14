//! Support for the end-to-end suites: a connection to the local stack (DynamoDB Local and the
//! S3 emulator that `infra/test.sh` starts), a fresh table and buckets per test, events shaped
//! exactly as AWS documents them, and read-back of the Parquet outputs.
//!
//! A test that cannot reach the stack fails with a message saying how to start it; it never
//! skips.

pub mod chaos;
mod flaky;
pub mod table_reader;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Int32Type, Int64Type};
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{Value, json};
use tidemark::aws::dynamodb::DynamoLedger;
use tidemark::aws::s3::S3Store;
use tidemark::config::Config;
use tidemark::ingest::{self, Response};
use tidemark::ports::{
    GetOutcome, Ledger, ObjectStore, PutOutcome, TestClock, WorkQueue, WriteCondition,
};
use tidemark::process::{Faults, Pipeline, RunContext};

pub use flaky::FlakyStore;

/// Lease margin used by the suites (ms): short, and moved past with the test clock.
pub const LEASE_MARGIN_MS: i64 = 60_000;

/// A fresh ledger table and landing / lake buckets on the local stack.
pub struct Stack {
    /// Raw S3 client (for uploads and read-back).
    pub s3: aws_sdk_s3::Client,
    /// Raw DynamoDB client.
    pub dynamo: aws_sdk_dynamodb::Client,
    /// The ledger table of this test.
    pub table: String,
    /// The landing bucket.
    pub landing: String,
    /// The lake bucket.
    pub lake: String,
    /// The clock every pipeline of this test uses.
    pub clock: TestClock,
    /// Sequencer counter for events.
    seq: std::sync::atomic::AtomicU64,
}

fn require_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: these suites run against the local stack. \
             Run them with `infra/test.sh`, or `infra/localstack.sh start && source .local/stack.env` first."
        )
    })
}

impl Stack {
    /// Connect to the local stack and create this test's table and buckets.
    pub async fn new() -> Self {
        require_env("AWS_ENDPOINT_URL_DYNAMODB");
        require_env("AWS_ENDPOINT_URL_S3");
        let conf = aws_config::load_from_env().await;
        let s3 = aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::config::Builder::from(&conf)
                .force_path_style(true)
                .build(),
        );
        let dynamo = aws_sdk_dynamodb::Client::new(&conf);
        let id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
        let stack = Self {
            table: format!("tidemark-{id}"),
            landing: format!("landing-{id}"),
            lake: format!("lake-{id}"),
            s3,
            dynamo,
            clock: TestClock::at(1_700_000_000_000),
            seq: std::sync::atomic::AtomicU64::new(0x0100_0000_0000_0000),
        };
        DynamoLedger::new(stack.dynamo.clone(), &stack.table)
            .ensure_table()
            .await
            .unwrap_or_else(|e| panic!("cannot create the ledger table on DynamoDB Local: {e}"));
        for b in [&stack.landing, &stack.lake] {
            stack
                .s3
                .create_bucket()
                .bucket(b)
                .send()
                .await
                .unwrap_or_else(|e| panic!("cannot create bucket {b} on the S3 emulator: {e:?}"));
        }
        stack
    }

    /// A fresh SQS queue on the emulator.
    pub async fn queue(&self, name: &str) -> tidemark::aws::sqs::SqsQueue {
        require_env("AWS_ENDPOINT_URL_SQS");
        let conf = aws_config::load_from_env().await;
        let sqs = aws_sdk_sqs::Client::new(&conf);
        let name = format!("{name}-{}", self.table);
        let url = sqs
            .create_queue()
            .queue_name(&name)
            .send()
            .await
            .unwrap_or_else(|e| panic!("cannot create queue {name} on the emulator: {e:?}"))
            .queue_url()
            .unwrap_or_default()
            .to_string();
        tidemark::aws::sqs::SqsQueue::new(sqs, url)
    }

    /// The sources document of the suites (see [`orders_config`]).
    pub fn config(&self, max_attempts: u32) -> Arc<Config> {
        orders_config(&self.landing, &self.lake, max_attempts, None)
    }

    /// A pipeline on the stack with this test's clock.
    pub fn pipeline(&self, max_attempts: u32) -> Pipeline {
        let mut p = Pipeline::new(
            Arc::new(S3Store::new(self.s3.clone())),
            Arc::new(DynamoLedger::new(self.dynamo.clone(), &self.table)),
            Arc::new(self.clock.clone()),
            self.config(max_attempts),
        );
        p.settings.lease_margin_ms = LEASE_MARGIN_MS;
        p
    }

    /// The same pipeline with fault injection.
    pub fn pipeline_with_faults(&self, max_attempts: u32, faults: Arc<dyn Faults>) -> Pipeline {
        let mut p = self.pipeline(max_attempts);
        p.faults = faults;
        p
    }

    /// A run context whose deadline is "now" on the test clock (the lease is the margin).
    pub fn ctx(&self, run_id: &str) -> RunContext {
        use tidemark::ports::Clock;
        RunContext::new(run_id.to_string(), self.clock.now_ms())
    }

    /// Move the test clock past every lease taken so far.
    pub fn expire_leases(&self) {
        self.clock.advance(LEASE_MARGIN_MS + 1);
    }

    /// Upload `body` to the landing bucket; returns the ETag (without quotes).
    pub async fn upload(&self, key: &str, body: impl Into<Bytes>) -> String {
        let o = self
            .s3
            .put_object()
            .bucket(&self.landing)
            .key(key)
            .body(ByteStream::from(body.into()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("upload {key}: {e:?}"));
        o.e_tag().unwrap_or_default().trim_matches('"').to_string()
    }

    /// Delete a landing object.
    pub async fn remove(&self, key: &str) {
        self.s3
            .delete_object()
            .bucket(&self.landing)
            .key(key)
            .send()
            .await
            .unwrap_or_else(|e| panic!("delete {key}: {e:?}"));
    }

    /// The next sequencer (increasing, 18 hex digits like S3's).
    pub fn next_sequencer(&self) -> String {
        let n = self.seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        format!("{n:018X}")
    }

    /// One S3 notification record for an upload, as AWS sends it (key form-encoded).
    pub fn created_record(&self, key: &str, etag: &str, size: u64, sequencer: &str) -> Value {
        json!({
            "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
            "eventTime": "2026-11-29T12:00:00.000Z", "eventName": "ObjectCreated:Put",
            "userIdentity": {"principalId": "AWS:AIDAEXAMPLE"},
            "requestParameters": {"sourceIPAddress": "127.0.0.1"},
            "responseElements": {"x-amz-request-id": "C3D13FE58DE4C810", "x-amz-id-2": "FMyUVURIY8"},
            "s3": {
                "s3SchemaVersion": "1.0", "configurationId": "tidemark",
                "bucket": {"name": self.landing, "ownerIdentity": {"principalId": "A3NL1KOZZKExample"},
                           "arn": format!("arn:aws:s3:::{}", self.landing)},
                "object": {"key": form_encode(key), "size": size, "eTag": etag, "sequencer": sequencer}
            }
        })
    }

    /// One S3 notification record for a delete.
    pub fn removed_record(&self, key: &str, sequencer: &str) -> Value {
        json!({
            "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
            "eventTime": "2026-11-29T12:00:00.000Z", "eventName": "ObjectRemoved:Delete",
            "userIdentity": {"principalId": "AWS:AIDAEXAMPLE"},
            "s3": {
                "s3SchemaVersion": "1.0", "configurationId": "tidemark",
                "bucket": {"name": self.landing, "arn": format!("arn:aws:s3:::{}", self.landing)},
                "object": {"key": form_encode(key), "sequencer": sequencer}
            }
        })
    }

    /// Upload and return the notification record of that upload.
    pub async fn upload_event(&self, key: &str, body: impl AsRef<[u8]>) -> Value {
        let body = Bytes::copy_from_slice(body.as_ref());
        let size = body.len() as u64;
        let etag = self.upload(key, body).await;
        let seq = self.next_sequencer();
        self.created_record(key, &etag, size, &seq)
    }

    /// Run the ingest handler on a payload.
    pub async fn invoke(&self, pipeline: &Pipeline, payload: &Value, run_id: &str) -> Response {
        ingest::handle(pipeline, payload, &self.ctx(run_id), 8)
            .await
            .expect("payload decodes")
    }

    /// Every object in the lake: key → Parquet bytes.
    pub async fn lake_objects(&self) -> BTreeMap<String, Bytes> {
        let mut out = BTreeMap::new();
        let mut token = None;
        loop {
            let page = self
                .s3
                .list_objects_v2()
                .bucket(&self.lake)
                .set_continuation_token(token)
                .send()
                .await
                .expect("list lake");
            for o in page.contents() {
                let key = o.key().unwrap_or_default().to_string();
                let body = self
                    .s3
                    .get_object()
                    .bucket(&self.lake)
                    .key(&key)
                    .send()
                    .await
                    .expect("get lake object")
                    .body
                    .collect()
                    .await
                    .expect("read lake object")
                    .into_bytes();
                out.insert(key, body);
            }
            match page.next_continuation_token() {
                Some(t) => token = Some(t.to_string()),
                None => return out,
            }
        }
    }

    /// Rows and sums over the whole lake, read back from the Parquet.
    pub async fn lake_totals(&self) -> Totals {
        let mut t = Totals::default();
        for (_, body) in self.lake_objects().await {
            t.add(&parquet_totals(body));
        }
        t
    }
}

/// The sources document of the suites: the same orders schema as CSV under `in/`, as JSON
/// Lines under `json/`, and as CSV under `keep/` with the `keep` delete policy; reports (when
/// given a prefix) in the lake bucket.
pub fn orders_config(
    landing: &str,
    lake: &str,
    max_attempts: u32,
    reports_prefix: Option<&str>,
) -> Arc<Config> {
    let doc = orders_doc(landing, lake, max_attempts, reports_prefix);
    Arc::new(Config::from_json(&doc.to_string()).expect("suite config is valid"))
}

/// The columns of [`orders_csv`], as a sources document spells them.
pub fn orders_columns() -> Value {
    json!([
        {"name": "order_id", "type": "int64", "nullable": false},
        {"name": "customer", "type": "string"},
        {"name": "quantity", "type": "int32"},
        {"name": "amount", "type": "decimal(12,2)"},
        {"name": "ordered_at", "type": "timestamp"}
    ])
}

/// A source of the orders ([`orders_columns`], `quantity` and `amount` summed) in
/// `format` under `prefix` of `landing`, written to `<id>/` in `lake`.
pub fn orders_source(
    (landing, lake): (&str, &str),
    id: &str,
    prefix: &str,
    format: &str,
    max_attempts: u32,
) -> Value {
    json!({
        "source_id": id,
        "bucket": landing,
        "prefix": prefix,
        "format": format,
        "schema": orders_columns(),
        "sum_columns": ["quantity", "amount"],
        "output": {"bucket": lake, "prefix": format!("{id}/")},
        "max_attempts": max_attempts
    })
}

/// The document of [`orders_config`], to change before it is read.
pub fn orders_doc(
    landing: &str,
    lake: &str,
    max_attempts: u32,
    reports_prefix: Option<&str>,
) -> Value {
    let source = |id: &str, prefix: &str, format: &str| {
        let mut s = orders_source((landing, lake), id, prefix, format, max_attempts);
        s["reconcile"] = json!({"grace_minutes": 0});
        s
    };
    let mut keep = source("archive", "keep/", "csv");
    keep["on_delete"] = "keep".into();
    let mut doc = json!({"sources": [
        source("orders", "in/", "csv"),
        source("orders_json", "json/", "jsonl"),
        keep,
    ]});
    if let Some(prefix) = reports_prefix {
        doc["reports"] = json!({"bucket": lake, "prefix": prefix});
    }
    doc
}

/// A pair of backends behind the ports — S3 + DynamoDB on the local stack, or local folders +
/// SQLite — with a landing and a lake bucket, so one test body runs on both.
pub struct Backends {
    /// Which pair.
    pub name: &'static str,
    /// The object store.
    pub store: Arc<dyn ObjectStore>,
    /// The ledger.
    pub ledger: Arc<dyn Ledger>,
    /// Landing bucket.
    pub landing: String,
    /// Lake bucket.
    pub lake: String,
    /// The clock of every pipeline (starts at the real time: reconcile windows compare it with
    /// objects' last-modified times).
    pub clock: TestClock,
    /// The work queue of backfills: an SQS queue on the emulator, or a local queue.
    pub queue: Arc<dyn WorkQueue>,
    /// The ledger's DynamoDB table (`None` on SQLite).
    pub ledger_table: Option<String>,
    dir: Option<std::path::PathBuf>,
}

impl Drop for Backends {
    fn drop(&mut self) {
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

impl Backends {
    /// S3 on the emulator and DynamoDB Local (a fresh table and buckets).
    pub async fn aws() -> Self {
        let stack = Stack::new().await;
        let queue = stack.queue("backfill").await;
        Self {
            name: "aws",
            store: Arc::new(S3Store::new(stack.s3.clone())),
            ledger: Arc::new(DynamoLedger::new(stack.dynamo.clone(), &stack.table)),
            landing: stack.landing.clone(),
            lake: stack.lake.clone(),
            clock: TestClock::at(chrono_now()),
            queue: Arc::new(queue),
            ledger_table: Some(stack.table.clone()),
            dir: None,
        }
    }

    /// Local folders and SQLite in a fresh directory.
    pub async fn embedded() -> Self {
        let dir = std::env::temp_dir().join(format!("tidemark-test-{}", uuid::Uuid::new_v4()));
        let store = tidemark::local::FolderStore::new(dir.join("buckets"));
        for b in ["landing", "lake"] {
            store.create_bucket(b).await.expect("create bucket");
        }
        let ledger =
            tidemark::local::SqliteLedger::open(dir.join("ledger.db")).expect("open ledger");
        let queue = tidemark::local::LocalQueue::open(dir.join("queue.db"), "backfill")
            .expect("open queue");
        Self {
            name: "embedded",
            store: Arc::new(store),
            ledger: Arc::new(ledger),
            landing: "landing".into(),
            lake: "lake".into(),
            clock: TestClock::at(chrono_now()),
            queue: Arc::new(queue),
            ledger_table: None,
            dir: Some(dir),
        }
    }

    /// The folder store's root (buckets are folders under it), for the embedded pair.
    pub fn folder_root(&self) -> Option<std::path::PathBuf> {
        self.dir.as_ref().map(|d| d.join("buckets"))
    }

    /// The suite's sources document, with reports under `reports/` in the lake.
    pub fn config(&self) -> Arc<Config> {
        orders_config(&self.landing, &self.lake, 3, Some("reports/"))
    }

    /// A pipeline on these backends.
    pub fn pipeline(&self) -> Pipeline {
        self.pipeline_with(self.config())
    }

    /// A pipeline on these backends with another sources document.
    pub fn pipeline_with(&self, config: Arc<Config>) -> Pipeline {
        let mut p = Pipeline::new(
            self.store.clone(),
            self.ledger.clone(),
            Arc::new(self.clock.clone()),
            config,
        );
        p.settings.lease_margin_ms = LEASE_MARGIN_MS;
        p
    }

    /// A run context with a deadline at the test clock's now.
    pub fn ctx(&self, run_id: &str) -> RunContext {
        use tidemark::ports::Clock;
        RunContext::new(run_id, self.clock.now_ms())
    }

    /// The ObjectCreated record of `key` as it was landed (its size and ETag, the key
    /// form-encoded as S3 sends it), with `sequencer`.
    pub async fn created_record(&self, key: &str, sequencer: &str) -> Value {
        let meta = self
            .store
            .head(&self.landing, key)
            .await
            .unwrap()
            .expect("landed");
        json!({"eventVersion": "2.1", "eventSource": "aws:s3",
            "eventName": "ObjectCreated:Put", "eventTime": "2026-12-01T12:00:00.000Z",
            "s3": {"bucket": {"name": self.landing},
                   "object": {"key": form_encode(key), "size": meta.size, "eTag": meta.etag,
                              "sequencer": sequencer}}})
    }

    /// The ObjectRemoved record of `key`, with `sequencer`.
    pub fn removed_record(&self, key: &str, sequencer: &str) -> Value {
        json!({"eventVersion": "2.1", "eventSource": "aws:s3",
            "eventName": "ObjectRemoved:Delete", "eventTime": "2026-12-01T12:00:00.000Z",
            "s3": {"bucket": {"name": self.landing},
                   "object": {"key": form_encode(key), "sequencer": sequencer}}})
    }

    /// Reconcile `source` of `config` over every object landed so far, both tiers on every
    /// object, without repair: the report (the caller asserts it clean).
    pub async fn reconcile_all(
        &self,
        config: &Arc<Config>,
        source: &str,
    ) -> tidemark::reconcile::SourceReport {
        use tidemark::ports::Clock;
        let source = config.source(source).expect("the source");
        tidemark::reconcile::reconcile_source(
            &self.pipeline_with(config.clone()),
            source,
            tidemark::reconcile::Window {
                from_ms: 0,
                to_ms: self.clock.now_ms() + 86_400_000,
            },
            tidemark::reconcile::Options {
                repair: false,
                deep_sample: Some(1.0),
                ..tidemark::reconcile::Options::default()
            },
            &self.ctx("reconcile"),
        )
        .await
        .expect("reconcile")
    }

    /// One call of the backfill planner, sending to this pair's queue, with no deadline.
    pub async fn plan(
        &self,
        p: &Pipeline,
        req: &tidemark::backfill::Request,
    ) -> Result<tidemark::backfill::Response, tidemark::backfill::RequestError> {
        tidemark::backfill::plan(
            p,
            &*self.queue,
            req,
            i64::MAX,
            tidemark::work::Packing::default(),
        )
        .await
    }

    /// Run a backfill the way a deployment does: the planner (called again while it stops at
    /// its bounds, as the function's self-invocations do) sends work items to this pair's
    /// queue, and a fleet of `workers` runs the ingest handler of `p` on them until the job
    /// has nothing left to do. Returns the planner's calls and the job's last status.
    pub async fn backfill(
        &self,
        p: &Pipeline,
        req: tidemark::backfill::Request,
        workers: usize,
    ) -> (Vec<tidemark::backfill::Response>, tidemark::jobs::JobStatus) {
        let mut calls = Vec::new();
        let mut req = req;
        loop {
            let resp = self
                .plan(p, &req)
                .await
                .unwrap_or_else(|e| panic!("{}: backfill planner: {e}", self.name));
            let again = !resp.done && resp.listed > 0;
            req = tidemark::backfill::Request {
                job: resp.job.clone(),
                ..Default::default()
            };
            calls.push(resp);
            if !again || calls.len() > 100 {
                break;
            }
        }
        let job = calls[0].job.clone().expect("not a dry run");
        let status = self
            .fleet(p, workers)
            .run_job(&*self.ledger, &job, 20, |_| {})
            .await;
        (
            calls,
            status.unwrap_or_else(|e| panic!("{}: fleet: {e}", self.name)),
        )
    }

    /// A fleet of `workers` running the ingest handler of `p` on this pair's queue: messages
    /// come back 2 s after a receive that did not delete them; an invocation's deadline is a
    /// minute after the test clock's now.
    pub fn fleet(&self, p: &Pipeline, workers: usize) -> tidemark::fleet::Fleet {
        tidemark::fleet::Fleet {
            queue: self.queue.clone(),
            handler: tidemark::fleet::ingest_handler(p.clone(), 4),
            clock: Arc::new(self.clock.clone()),
            opts: tidemark::fleet::FleetOptions {
                workers,
                visibility_ms: 2_000,
                wait_ms: 100,
                timeout_ms: 60_000,
                ..Default::default()
            },
        }
    }

    /// Write `body` to the landing bucket (replacing what is there); no event is sent.
    pub async fn upload(&self, key: &str, body: impl AsRef<[u8]>) {
        put_replacing(
            &*self.store,
            &self.landing,
            key,
            Bytes::copy_from_slice(body.as_ref()),
        )
        .await;
    }

    /// Replace a lake object's bytes (a hand edit).
    pub async fn overwrite_lake(&self, key: &str, body: Bytes) {
        put_replacing(&*self.store, &self.lake, key, body).await;
    }

    /// Every lake object under `prefix`: key → bytes.
    pub async fn lake_objects(&self, prefix: &str) -> BTreeMap<String, Bytes> {
        let mut out = BTreeMap::new();
        let mut token = None;
        loop {
            let page = self
                .store
                .list(&self.lake, prefix, token.as_deref())
                .await
                .expect("list lake");
            for o in page.objects {
                let GetOutcome::Found { mut body, .. } =
                    self.store.get(&self.lake, &o.key, None).await.expect("get")
                else {
                    panic!("{} vanished", o.key)
                };
                let mut bytes = Vec::new();
                tokio::io::AsyncReadExt::read_to_end(&mut body, &mut bytes)
                    .await
                    .expect("read");
                out.insert(o.key, Bytes::from(bytes));
            }
            match page.next {
                Some(t) => token = Some(t),
                None => return out,
            }
        }
    }

    /// Rows and sums of the orders outputs (`orders/`).
    pub async fn lake_totals(&self) -> Totals {
        let mut t = Totals::default();
        for (_, body) in self.lake_objects("orders/").await {
            t.add(&parquet_totals(body));
        }
        t
    }
}

fn chrono_now() -> i64 {
    use tidemark::ports::Clock;
    tidemark::ports::SystemClock.now_ms()
}

async fn put_replacing(store: &dyn ObjectStore, bucket: &str, key: &str, body: Bytes) {
    let condition = match store.head(bucket, key).await.expect("head") {
        Some(m) => WriteCondition::Matches(m.etag),
        None => WriteCondition::Absent,
    };
    let out = store
        .put(bucket, key, body, &BTreeMap::new(), &condition)
        .await
        .expect("put");
    assert!(
        matches!(out, PutOutcome::Written { .. }),
        "write {bucket}/{key}: {out:?}"
    );
}

/// Rows and column sums of the suite's orders data.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// Rows.
    pub rows: u64,
    /// Sum of `order_id` (catches a duplicated or missing row that a count would not).
    pub order_ids: i128,
    /// Sum of `quantity`.
    pub quantity: i128,
    /// Sum of `amount`, in cents.
    pub amount_cents: i128,
}

impl Totals {
    /// Add another total.
    pub fn add(&mut self, o: &Totals) {
        self.rows += o.rows;
        self.order_ids += o.order_ids;
        self.quantity += o.quantity;
        self.amount_cents += o.amount_cents;
    }
}

/// Wait (up to two minutes) until job `job` of `b` is finished; its status.
pub async fn wait_for_job(b: &Backends, job: &str) -> tidemark::jobs::JobStatus {
    use tidemark::jobs::{JobState, JobStatus};
    let mut status = None;
    for _ in 0..1200 {
        let (j, c) = b
            .ledger
            .get_job(job)
            .await
            .expect("read job")
            .expect("job exists");
        let s = JobStatus::of(j, c);
        if s.state == JobState::Finished {
            return s;
        }
        status = Some(s);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{}: job {job} did not finish: {status:#?}", b.name)
}

/// Run a fleet of `workers` (the ingest handler of `p`) on `b`'s queue until job `job` has
/// nothing left to do; its last status.
pub async fn run_until_empty(
    b: &Backends,
    p: &Pipeline,
    job: &str,
    workers: usize,
) -> tidemark::jobs::JobStatus {
    b.fleet(p, workers)
        .run_job(&*b.ledger, job, 20, |_| {})
        .await
        .unwrap_or_else(|e| panic!("{}: fleet: {e}", b.name))
}

/// Rows and sums of one Parquet file of orders.
pub fn parquet_totals(body: Bytes) -> Totals {
    let reader = ParquetRecordBatchReaderBuilder::try_new(body)
        .expect("valid parquet")
        .build()
        .expect("parquet reader");
    let mut t = Totals::default();
    for batch in reader {
        let batch = batch.expect("parquet batch");
        t.rows += batch.num_rows() as u64;
        let ids = batch
            .column_by_name("order_id")
            .unwrap()
            .as_primitive::<Int64Type>();
        t.order_ids += ids.iter().flatten().map(i128::from).sum::<i128>();
        let q = batch
            .column_by_name("quantity")
            .unwrap()
            .as_primitive::<Int32Type>();
        t.quantity += q.iter().flatten().map(i128::from).sum::<i128>();
        let a = batch
            .column_by_name("amount")
            .unwrap()
            .as_primitive::<Decimal128Type>();
        t.amount_cents += a.iter().flatten().sum::<i128>();
    }
    t
}

/// Orders CSV with `rows` rows whose ids start at `first_id`; returns the text and its totals.
pub fn orders_csv(first_id: i64, rows: usize) -> (String, Totals) {
    let mut s = String::from("order_id,customer,quantity,amount,ordered_at\n");
    let mut t = Totals::default();
    for i in 0..rows as i64 {
        let id = first_id + i;
        let quantity = (id % 7 + 1) as i32;
        let cents = (id % 1000) * 101 + 5;
        s.push_str(&format!(
            "{id},\"Customer, {id}\",{quantity},{}.{:02},2024-03-{:02}T10:{:02}:00Z\n",
            cents / 100,
            cents % 100,
            id % 28 + 1,
            id % 60
        ));
        t.rows += 1;
        t.order_ids += i128::from(id);
        t.quantity += i128::from(quantity);
        t.amount_cents += i128::from(cents);
    }
    (s, t)
}

/// The same orders as [`orders_csv`], as JSON Lines.
pub fn orders_jsonl(first_id: i64, rows: usize) -> (String, Totals) {
    let (csv, totals) = orders_csv(first_id, rows);
    let mut s = String::new();
    for line in csv.lines().skip(1) {
        let mut rest = line;
        let id = take(&mut rest, ',');
        let customer = take(&mut rest, '"'); // the opening quote
        debug_assert!(customer.is_empty());
        let customer = take(&mut rest, '"');
        let _ = take(&mut rest, ',');
        let quantity = take(&mut rest, ',');
        let amount = take(&mut rest, ',');
        s.push_str(
            &json!({"order_id": id.parse::<i64>().unwrap(), "customer": customer,
                    "quantity": quantity.parse::<i32>().unwrap(), "amount": amount,
                    "ordered_at": rest})
            .to_string(),
        );
        s.push('\n');
    }
    (s, totals)
}

fn take<'a>(rest: &mut &'a str, sep: char) -> &'a str {
    let (head, tail) = rest.split_once(sep).unwrap_or((rest, ""));
    *rest = tail;
    head
}

/// A direct S3 notification with these records.
pub fn direct(records: Vec<Value>) -> Value {
    json!({ "Records": records })
}

/// An SQS batch: each `(message id, notification)` becomes one message whose body is the
/// notification, as S3 → SQS delivers it.
pub fn sqs(messages: Vec<(&str, Value)>) -> Value {
    json!({ "Records": messages.into_iter().map(|(id, body)| json!({
        "messageId": id,
        "receiptHandle": format!("handle-{id}"),
        "body": body.to_string(),
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1700000000000"},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:tidemark-ingest",
        "awsRegion": "us-east-1"
    })).collect::<Vec<_>>() })
}

/// Form-encode a key the way S3 notifications do: space → `+`, everything but unreserved
/// characters and `/` percent-encoded.
pub fn form_encode(key: &str) -> String {
    let mut out = String::new();
    for b in key.bytes() {
        match b {
            b' ' => out.push('+'),
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Runs each named `async fn(Backends)` of the calling test file on both backend pairs: as
/// `aws::<name>` on the S3 emulator + DynamoDB Local, and as `embedded::<name>` on local
/// folders + SQLite.
#[macro_export]
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod aws {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name($crate::Backends::aws().await).await
            })*
        }
        mod embedded {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name($crate::Backends::embedded().await).await
            })*
        }
    };
}

/// Objects landed, replaced and deleted with the events AWS would send for them (real ETags
/// and sizes, rising sequencers), each handed to the ingest handler at once.
pub struct Events<'a> {
    b: &'a Backends,
    pipeline: Pipeline,
    seq: u64,
}

impl<'a> Events<'a> {
    /// Events for `b`, processed under `config`.
    pub fn new(b: &'a Backends, config: &Arc<Config>) -> Self {
        Self {
            b,
            pipeline: b.pipeline_with(config.clone()),
            seq: 0x10_0000,
        }
    }

    /// Lands `body` at `key` and sends its ObjectCreated event.
    pub async fn put(&mut self, key: &str, body: &str) {
        self.b.upload(key, body).await;
        self.seq += 1;
        let record = self
            .b
            .created_record(key, &format!("{:018X}", self.seq))
            .await;
        self.send(record).await;
    }

    /// Deletes `key` and sends its ObjectRemoved event.
    pub async fn delete(&mut self, key: &str) {
        self.b
            .store
            .delete(&self.b.landing, key, None)
            .await
            .unwrap();
        self.seq += 1;
        let record = self.b.removed_record(key, &format!("{:018X}", self.seq));
        self.send(record).await;
    }

    /// Hands one event record to the ingest handler; it must succeed.
    pub async fn send(&self, record: Value) {
        let r = tidemark::ingest::handle(
            &self.pipeline,
            &json!({"Records": [record]}),
            &self.b.ctx("event"),
            4,
        )
        .await
        .unwrap();
        assert!(r.errors.is_empty(), "{}: {:?}", self.b.name, r.errors);
    }
}
