//! [`Ledger`] on DynamoDB.
//!
//! # Item layout
//! One item per `(source_id, key)`; nothing else lives on the per-object path, so writes
//! spread over partitions by key and no item is hot.
//!
//! | attribute      | type | meaning |
//! |----------------|------|---------|
//! | `pk`           | S    | partition key: `<source_id>/<key>` (a source id never holds `/`) |
//! | `gsi1pk`       | S    | `<source_id>#<shard 00-15>`: partition key of index `by_source`, sharded so a source's records spread over 16 partitions |
//! | `gsi1sk`       | S    | the key: sort key of index `by_source` (status, reconcile) |
//! | `source_id`, `key` | S | the source and the decoded S3 key |
//! | `status`       | S    | claimed / done / deleted / pending / failed / quarantined / released |
//! | `rev`          | N    | revision; every write is conditional on it (`attribute_not_exists(pk)` to create) |
//! | `committed`    | M    | the committed version (`target`), `rows`, `sums` (exact decimal strings), `outputs` (bucket, key, etag), `rejected` and `rejects` (bad rows set aside and their file, when any), `rescued` (rows with values in the rescued column, when any), `ignored` (`values` of fields not in the schema dropped, and `fields`: a map of field path → values, when any), `config_fp`, `committed_at`, `run_id` |
//! | `claim`        | M    | `token`, `target`, `lease_until` (ms), `claimed_at`, `run_id` |
//! | `pending`      | M    | newest known target not yet committed ("superseded by", or the failing version) |
//! | `attempts`     | N    | failed attempts of the pending / claimed target |
//! | `last_error`, `note` | S | the last error (naming object and line), why a claim ended without commit |
//! | `updated_at`   | N    | ms since the epoch |
//!
//! A `target` map is `{kind: "version", version, version_id?, etag?, sequencer?, size?}` or
//! `{kind: "delete", sequencer?, version_id?, delete_marker}`.
//!
//! Conditional writes ask for `ReturnValuesOnConditionCheckFailure = ALL_OLD`, so a lost
//! race returns the winner's item and needs no second read.
//!
//! # Operator items
//! Two more kinds of item share the table. Their `pk` starts with `~`, which no source id
//! can (`[a-z0-9_-]`), and they carry no `gsi1pk`, so they never appear in `by_source`:
//!
//! | `pk` | attributes | what |
//! |------|------------|------|
//! | `~audit/<source_id>/<at, 15 digits>/<uuid>` | `at` N, `source_id` S, `command` S, `args` S (JSON), `affected` N, `operator` S | one audit log entry |
//! | `~source/<source_id>` | `source_id` S, `mode` S, `updated_at` N | the operator's mode override (`tidemark mode`) |
//!
//! | `~job/<id>` | `id`, `kind`, `source_id`, `request` (M), `rev` N, `started_at` N, `updated_at` N, `plan` (M); `gsi1pk` = `~jobs`, `gsi1sk` = `<started_at, 15 digits>/<id>` | a bulk job and its planner's progress ([`crate::jobs::Job`]) |
//! | `~job/<id>/c<00-15>` | `job_id`, `messages`, `items`, `processed`, `duplicate`, `skipped`, `quarantined`, `rows`, `failures` (N, added to), `updated_at` N | one of a job's 16 counter shards |
//! | `~job/<id>/m<n>` | `job_id`, `at` N, `expires_at` N (TTL, seconds) | message `n` of the job is counted |
//!
//! The audit log is read with a Scan filtered on `begins_with(pk, "~audit/…")`: fine for an
//! operator command that runs rarely, and it keeps the audit log off the hot path entirely.
//! Jobs are listed from the `by_source` index's `~jobs` partition (newest first), which no
//! source's records share. A worker that finishes a message writes its mark and adds to one
//! counter shard in one `TransactWriteItems`; a mark that exists cancels the transaction, so a
//! redelivered message is counted once.
//!
//! # Reading a source's records
//! [`Ledger::list`] queries `by_source` on each of the 16 shards, following
//! `LastEvaluatedKey`. A GSI read is eventually consistent (there is no strongly consistent
//! read of a global secondary index): a record written in the last second may be missing or
//! stale. Every operator write that follows is conditional on the revision it read.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement,
    KeyType, KeysAndAttributes, Projection, ProjectionType, Put,
    ReturnValuesOnConditionCheckFailure, ScalarAttributeType, StreamSpecification, StreamViewType,
    TransactWriteItem, Update,
};

use super::failure;
use crate::config::Mode;
use crate::error::{LedgerError, Retry};
use crate::jobs::{Job, JobCounts};
use crate::model::{AuditEntry, Record};
use crate::ports::{JobStore, JobWrite, KeyRange, Ledger, LedgerWrite};

/// Condition of a first write.
pub const COND_ABSENT: &str = "attribute_not_exists(pk)";
/// Condition of every later write.
pub const COND_REV: &str = "rev = :rev";
/// Name of the index over a source's records.
pub const INDEX_BY_SOURCE: &str = "by_source";
/// Shards of the index's partition key per source.
pub const SHARDS: u64 = 16;

/// Prefix of the `pk` of bulk jobs, their counter shards and their message marks.
pub const JOB_PREFIX: &str = "~job/";
/// The `gsi1pk` under which jobs are listed in the `by_source` index (no source id can be it).
pub const JOBS_PARTITION: &str = "~jobs";
/// Counter items per job: workers finishing messages spread their additions over them, so no
/// item takes more than a sixteenth of a large job's writes.
pub const JOB_SHARDS: u64 = 16;
/// How long a message mark is kept (TTL), seconds: far longer than a message can be
/// redelivered (SQS keeps a message 14 days at most).
pub const MARK_TTL_S: i64 = 30 * 24 * 3600;

/// Keys per BatchGetItem request (DynamoDB's maximum).
pub const BATCH_GET_KEYS: usize = 100;

/// Prefix of the `pk` of audit entries.
pub const AUDIT_PREFIX: &str = "~audit/";
/// Prefix of the `pk` of source control items (mode overrides).
pub const SOURCE_PREFIX: &str = "~source/";

/// `gsi1pk` of the source registry: one item per source id that ever had a record (see
/// [`Ledger::source_ids`]).
pub const SOURCES_PARTITION: &str = "~sources";
/// Prefix of the `pk` of registry items.
pub const REGISTRY_PREFIX: &str = "~registry/";

/// The ledger on a DynamoDB table.
#[derive(Debug, Clone)]
pub struct DynamoLedger {
    client: Client,
    table: String,
    page_limit: Option<i32>,
    /// Source ids this process has registered already (one PutItem per source and process).
    registered: Arc<Mutex<HashSet<String>>>,
}

/// The partition key of a record.
pub fn pk(source_id: &str, key: &str) -> String {
    format!("{source_id}/{key}")
}

/// The index shard of a key (FNV-1a, stable across processes).
pub fn shard(key: &str) -> u64 {
    crate::config::fnv1a_bytes(key.bytes()) % SHARDS
}

impl DynamoLedger {
    /// The ledger in `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            page_limit: None,
            registered: Arc::default(),
        }
    }

    /// Ask for at most `limit` items per Query / Scan page (DynamoDB's default is 1 MB of
    /// items), so tests exercise pagination with few records.
    pub fn with_page_limit(mut self, limit: i32) -> Self {
        self.page_limit = Some(limit);
        self
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    fn service_err(
        &self,
        op: &'static str,
        record: (&str, &str),
        f: super::Failure,
    ) -> LedgerError {
        LedgerError::Service {
            op,
            source_id: record.0.to_string(),
            key: record.1.to_string(),
            message: format!("table {}: {}", self.table, f.message),
            retry: f.retry,
        }
    }

    fn to_item(&self, r: &Record) -> Result<HashMap<String, AttributeValue>, LedgerError> {
        let mut item: HashMap<String, AttributeValue> =
            serde_dynamo::to_item(r).map_err(|e| LedgerError::Corrupt {
                source_id: r.source_id.clone(),
                key: r.key.clone(),
                message: e.to_string(),
            })?;
        item.insert("pk".into(), AttributeValue::S(pk(&r.source_id, &r.key)));
        item.insert(
            "gsi1pk".into(),
            AttributeValue::S(format!("{}#{:02}", r.source_id, shard(&r.key))),
        );
        item.insert("gsi1sk".into(), AttributeValue::S(r.key.clone()));
        Ok(item)
    }

    fn from_item(
        source_id: &str,
        key: &str,
        mut item: HashMap<String, AttributeValue>,
    ) -> Result<Record, LedgerError> {
        for k in ["pk", "gsi1pk", "gsi1sk"] {
            item.remove(k);
        }
        serde_dynamo::from_item(item).map_err(|e| LedgerError::Corrupt {
            source_id: source_id.to_string(),
            key: key.to_string(),
            message: e.to_string(),
        })
    }

    async fn put(
        &self,
        record: &Record,
        condition: &'static str,
        rev: Option<u64>,
    ) -> Result<LedgerWrite, LedgerError> {
        let req = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(self.to_item(record)?))
            .condition_expression(condition)
            .set_expression_attribute_values(rev.map(|rev| {
                HashMap::from([(":rev".to_string(), AttributeValue::N(rev.to_string()))])
            }))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        match req.send().await {
            Ok(_) => Ok(LedgerWrite::Written),
            Err(e) => {
                if let Some(PutItemError::ConditionalCheckFailedException(c)) = e.as_service_error()
                {
                    let current = c
                        .item()
                        .filter(|i| !i.is_empty())
                        .map(|i| Self::from_item(&record.source_id, &record.key, i.clone()))
                        .transpose()?;
                    return Ok(LedgerWrite::Conflict(current.map(Box::new)));
                }
                Err(self.service_err("PutItem", (&record.source_id, &record.key), failure(&e)))
            }
        }
    }

    /// The source ids this process has registered.
    fn registered(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Make sure the registry lists `source_id` before its first record of this process is
    /// written (an unconditional, idempotent PutItem), so that [`Ledger::source_ids`] finds
    /// every source with records.
    async fn register(&self, source_id: &str) -> Result<(), LedgerError> {
        if self.registered().contains(source_id) {
            return Ok(());
        }
        self.client
            .put_item()
            .table_name(&self.table)
            .item(
                "pk",
                AttributeValue::S(format!("{REGISTRY_PREFIX}{source_id}")),
            )
            .item("gsi1pk", AttributeValue::S(SOURCES_PARTITION.into()))
            .item("gsi1sk", AttributeValue::S(source_id.into()))
            .send()
            .await
            .map_err(|e| self.service_err("PutItem", (source_id, ""), failure(&e)))?;
        self.registered().insert(source_id.to_string());
        Ok(())
    }

    /// The items of these partition keys (absent ones are left out), by BatchGetItem, 100
    /// keys a request. Unprocessed keys (throttling, the 16 MB answer limit) are asked for
    /// again after a growing pause, as the DynamoDB documentation advises.
    /// The records of `keys` of a source, read in batches (strongly consistent or not).
    async fn records_of(
        &self,
        source_id: &str,
        keys: &[String],
        consistent: bool,
    ) -> Result<Vec<Record>, LedgerError> {
        let pks = keys.iter().map(|k| pk(source_id, k)).collect();
        self.batch_get(pks, consistent, source_id)
            .await?
            .into_iter()
            .map(|item| {
                let key = text(&item, "key").unwrap_or_default();
                Self::from_item(source_id, &key, item)
            })
            .collect()
    }

    async fn batch_get(
        &self,
        pks: Vec<String>,
        consistent: bool,
        source_id: &str,
    ) -> Result<Vec<HashMap<String, AttributeValue>>, LedgerError> {
        let mut items = Vec::with_capacity(pks.len());
        for chunk in pks.chunks(BATCH_GET_KEYS) {
            let wanted: Vec<HashMap<String, AttributeValue>> = chunk
                .iter()
                .map(|k| HashMap::from([("pk".to_string(), AttributeValue::S(k.clone()))]))
                .collect();
            let mut request = KeysAndAttributes::builder()
                .set_keys(Some(wanted))
                .consistent_read(consistent)
                .build()
                .map_err(|e| self.service_err("BatchGetItem", (source_id, ""), build_failure(e)))?;
            for attempt in 0.. {
                let o = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, request)
                    .send()
                    .await
                    .map_err(|e| self.service_err("BatchGetItem", (source_id, ""), failure(&e)))?;
                items.extend(
                    o.responses
                        .and_then(|mut r| r.remove(&self.table))
                        .unwrap_or_default(),
                );
                match o.unprocessed_keys.and_then(|mut u| u.remove(&self.table)) {
                    Some(left) if !left.keys().is_empty() => {
                        if attempt >= 8 {
                            return Err(LedgerError::Service {
                                op: "BatchGetItem",
                                source_id: source_id.to_string(),
                                key: String::new(),
                                message: format!(
                                    "table {}: {} keys still unprocessed after {attempt} retries",
                                    self.table,
                                    left.keys().len()
                                ),
                                retry: Retry::Transient,
                            });
                        }
                        tokio::time::sleep(std::time::Duration::from_millis(25 << attempt)).await;
                        request = left;
                    }
                    _ => break,
                }
            }
        }
        Ok(items)
    }

    /// Create the table (on-demand, with the `by_source` index and a `KEYS_ONLY` stream, the
    /// Delta committer's change feed) unless it exists, and wait until it is active. For the
    /// local stack and first-time setup; the SAM template declares the same table.
    pub async fn ensure_table(&self) -> Result<(), LedgerError> {
        let s = |name: &str| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("attribute definition has its fields")
        };
        let k = |name: &str, t: KeyType| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(t)
                .build()
                .expect("key schema element has its fields")
        };
        let index = GlobalSecondaryIndex::builder()
            .index_name(INDEX_BY_SOURCE)
            .key_schema(k("gsi1pk", KeyType::Hash))
            .key_schema(k("gsi1sk", KeyType::Range))
            .projection(
                Projection::builder()
                    .projection_type(ProjectionType::All)
                    .build(),
            )
            .build()
            .expect("index has its fields");
        let created = self
            .client
            .create_table()
            .table_name(&self.table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(s("pk"))
            .attribute_definitions(s("gsi1pk"))
            .attribute_definitions(s("gsi1sk"))
            .key_schema(k("pk", KeyType::Hash))
            .global_secondary_indexes(index)
            .stream_specification(
                StreamSpecification::builder()
                    .stream_enabled(true)
                    .stream_view_type(StreamViewType::KeysOnly)
                    .build()
                    .expect("stream specification has its fields"),
            )
            .send()
            .await;
        if let Err(e) = created {
            let f = failure(&e);
            if f.code.as_deref() != Some("ResourceInUseException") {
                return Err(self.service_err("CreateTable", ("", ""), f));
            }
        }
        for _ in 0..100 {
            let d = self
                .client
                .describe_table()
                .table_name(&self.table)
                .send()
                .await
                .map_err(|e| self.service_err("DescribeTable", ("", ""), failure(&e)))?;
            let active = d
                .table()
                .and_then(|t| t.table_status())
                .is_some_and(|s| s.as_str() == "ACTIVE");
            if active {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Err(LedgerError::Service {
            op: "DescribeTable",
            source_id: String::new(),
            key: String::new(),
            message: format!("table {} did not become active", self.table),
            retry: Retry::Transient,
        })
    }
}

/// Names of the counters of [`JobCounts`] as attributes of a counter item.
const COUNTERS: [&str; 8] = [
    "messages",
    "items",
    "processed",
    "duplicate",
    "skipped",
    "quarantined",
    "rows",
    "failures",
];

fn counter_values(c: &JobCounts) -> [u64; 8] {
    [
        c.messages,
        c.items,
        c.processed,
        c.duplicate,
        c.skipped,
        c.quarantined,
        c.rows,
        c.failures,
    ]
}

fn job_pk(id: &str) -> String {
    format!("{JOB_PREFIX}{id}")
}

fn shard_pk(id: &str, shard: u64) -> String {
    format!("{JOB_PREFIX}{id}/c{shard:02}")
}

impl DynamoLedger {
    fn job_err(&self, op: &'static str, id: &str, f: super::Failure) -> LedgerError {
        self.service_err(op, ("(job)", id), f)
    }

    fn job_item(&self, job: &Job) -> Result<HashMap<String, AttributeValue>, LedgerError> {
        let mut item: HashMap<String, AttributeValue> =
            serde_dynamo::to_item(job).map_err(|e| LedgerError::Corrupt {
                source_id: "(job)".into(),
                key: job.id.clone(),
                message: e.to_string(),
            })?;
        item.insert("pk".into(), AttributeValue::S(job_pk(&job.id)));
        item.insert("gsi1pk".into(), AttributeValue::S(JOBS_PARTITION.into()));
        item.insert(
            "gsi1sk".into(),
            AttributeValue::S(format!("{:015}/{}", job.started_at.max(0), job.id)),
        );
        Ok(item)
    }

    fn job_from_item(mut item: HashMap<String, AttributeValue>) -> Result<Job, LedgerError> {
        let id = text(&item, "id").unwrap_or_default();
        for k in ["pk", "gsi1pk", "gsi1sk"] {
            item.remove(k);
        }
        serde_dynamo::from_item(item).map_err(|e| LedgerError::Corrupt {
            source_id: "(job)".into(),
            key: id,
            message: e.to_string(),
        })
    }

    /// The counts of job `id`: its counter items added up (read consistently).
    async fn job_counts(&self, id: &str) -> Result<JobCounts, LedgerError> {
        let pks = (0..JOB_SHARDS).map(|n| shard_pk(id, n)).collect();
        let mut total = JobCounts::default();
        for item in self.batch_get(pks, true, "(job)").await? {
            let number = |name: &str| match item.get(name) {
                Some(AttributeValue::N(n)) => n.parse::<i64>().unwrap_or(0),
                _ => 0,
            };
            let v: Vec<u64> = COUNTERS
                .iter()
                .map(|c| u64::try_from(number(c)).unwrap_or(0))
                .collect();
            total.add(&JobCounts {
                messages: v[0],
                items: v[1],
                processed: v[2],
                duplicate: v[3],
                skipped: v[4],
                quarantined: v[5],
                rows: v[6],
                failures: v[7],
                updated_at: number("updated_at"),
            });
        }
        Ok(total)
    }

    /// The update adding `counts` to a counter item.
    fn add_to_shard(
        &self,
        id: &str,
        shard: u64,
        counts: &JobCounts,
        now: i64,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        let mut adds = Vec::new();
        let mut req = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(shard_pk(id, shard)));
        for (i, (name, value)) in COUNTERS.iter().zip(counter_values(counts)).enumerate() {
            adds.push(format!("#c{i} :c{i}"));
            req = req
                .expression_attribute_names(format!("#c{i}"), *name)
                .expression_attribute_values(
                    format!(":c{i}"),
                    AttributeValue::N(value.to_string()),
                );
        }
        req.update_expression(format!(
            "ADD {} SET #at = :now, #job = :job",
            adds.join(", ")
        ))
        .expression_attribute_names("#at", "updated_at")
        .expression_attribute_names("#job", "job_id")
        .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
        .expression_attribute_values(":job", AttributeValue::S(id.to_string()))
    }
}

#[async_trait]
impl JobStore for DynamoLedger {
    async fn create_job(&self, job: &Job) -> Result<bool, LedgerError> {
        let req = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(self.job_item(job)?))
            .condition_expression(COND_ABSENT);
        match req.send().await {
            Ok(_) => Ok(true),
            Err(e) => match e.as_service_error() {
                Some(PutItemError::ConditionalCheckFailedException(_)) => Ok(false),
                _ => Err(self.job_err("PutItem", &job.id, failure(&e))),
            },
        }
    }

    async fn replace_job(&self, job: &Job, expected_rev: u64) -> Result<JobWrite, LedgerError> {
        let req = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(self.job_item(job)?))
            .condition_expression(COND_REV)
            .expression_attribute_values(":rev", AttributeValue::N(expected_rev.to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        match req.send().await {
            Ok(_) => Ok(JobWrite::Written),
            Err(e) => {
                if let Some(PutItemError::ConditionalCheckFailedException(c)) = e.as_service_error()
                {
                    let current = c
                        .item()
                        .filter(|i| !i.is_empty())
                        .map(|i| Self::job_from_item(i.clone()))
                        .transpose()?;
                    return Ok(JobWrite::Conflict(current.map(Box::new)));
                }
                Err(self.job_err("PutItem", &job.id, failure(&e)))
            }
        }
    }

    async fn get_job(&self, id: &str) -> Result<Option<(Job, JobCounts)>, LedgerError> {
        let o = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(job_pk(id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.job_err("GetItem", id, failure(&e)))?;
        let Some(item) = o.item else {
            return Ok(None);
        };
        let job = Self::job_from_item(item)?;
        let counts = self.job_counts(id).await?;
        Ok(Some((job, counts)))
    }

    async fn list_jobs(&self, limit: usize) -> Result<Vec<(Job, JobCounts)>, LedgerError> {
        let mut jobs = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        while jobs.len() < limit {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(INDEX_BY_SOURCE)
                .key_condition_expression("gsi1pk = :p")
                .expression_attribute_values(":p", AttributeValue::S(JOBS_PARTITION.into()))
                .scan_index_forward(false)
                .set_limit(self.page_limit)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.job_err("Query", "", failure(&e)))?;
            for item in page.items.unwrap_or_default() {
                jobs.push(Self::job_from_item(item)?);
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        jobs.truncate(limit);
        let mut out = Vec::with_capacity(jobs.len());
        for job in jobs {
            let counts = self.job_counts(&job.id).await?;
            out.push((job, counts));
        }
        Ok(out)
    }

    async fn finish_message(
        &self,
        job_id: &str,
        message: u64,
        counts: &JobCounts,
        now: i64,
    ) -> Result<bool, LedgerError> {
        let mark = Put::builder()
            .table_name(&self.table)
            .item(
                "pk",
                AttributeValue::S(format!("{JOB_PREFIX}{job_id}/m{message}")),
            )
            .item("job_id", AttributeValue::S(job_id.to_string()))
            .item("at", AttributeValue::N(now.to_string()))
            .item(
                "expires_at",
                AttributeValue::N((now / 1000 + MARK_TTL_S).to_string()),
            )
            .condition_expression(COND_ABSENT)
            .build()
            .map_err(|e| self.job_err("TransactWriteItems", job_id, build_failure(e)))?;
        let counts = JobCounts {
            messages: 1,
            ..*counts
        };
        let add = self
            .add_to_shard(job_id, message % JOB_SHARDS, &counts, now)
            .as_input()
            .clone();
        let update = Update::builder()
            .table_name(&self.table)
            .set_key(add.get_key().clone())
            .set_update_expression(add.get_update_expression().clone())
            .set_expression_attribute_names(add.get_expression_attribute_names().clone())
            .set_expression_attribute_values(add.get_expression_attribute_values().clone())
            .build()
            .map_err(|e| self.job_err("TransactWriteItems", job_id, build_failure(e)))?;
        let sent = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(mark).build())
            .transact_items(TransactWriteItem::builder().update(update).build())
            .send()
            .await;
        match sent {
            Ok(_) => Ok(true),
            Err(e) => {
                // The mark exists: this message was counted before.
                if let Some(TransactWriteItemsError::TransactionCanceledException(c)) =
                    e.as_service_error()
                    && c.cancellation_reasons().first().and_then(|r| r.code())
                        == Some("ConditionalCheckFailed")
                {
                    return Ok(false);
                }
                Err(self.job_err("TransactWriteItems", job_id, failure(&e)))
            }
        }
    }

    async fn add_failures(&self, job_id: &str, n: u64, now: i64) -> Result<(), LedgerError> {
        let counts = JobCounts {
            failures: n,
            ..JobCounts::default()
        };
        let shard = uuid::Uuid::new_v4().as_u128() as u64 % JOB_SHARDS;
        self.add_to_shard(job_id, shard, &counts, now)
            .send()
            .await
            .map_err(|e| self.job_err("UpdateItem", job_id, failure(&e)))?;
        Ok(())
    }
}

#[async_trait]
impl Ledger for DynamoLedger {
    async fn source_ids(&self) -> Result<Vec<String>, LedgerError> {
        let mut ids = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(INDEX_BY_SOURCE)
                .key_condition_expression("gsi1pk = :p")
                .expression_attribute_values(":p", AttributeValue::S(SOURCES_PARTITION.into()))
                .set_limit(self.page_limit)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.service_err("Query", ("", ""), failure(&e)))?;
            for item in page.items.unwrap_or_default() {
                if let Some(AttributeValue::S(id)) = item.get("gsi1sk") {
                    ids.push(id.clone());
                }
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        ids.sort();
        Ok(ids)
    }

    async fn unregister_source(&self, source_id: &str) -> Result<(), LedgerError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .key(
                "pk",
                AttributeValue::S(format!("{REGISTRY_PREFIX}{source_id}")),
            )
            .send()
            .await
            .map_err(|e| self.service_err("DeleteItem", (source_id, ""), failure(&e)))?;
        self.registered().remove(source_id);
        Ok(())
    }

    async fn get(&self, source_id: &str, key: &str) -> Result<Option<Record>, LedgerError> {
        let o = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(pk(source_id, key)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.service_err("GetItem", (source_id, key), failure(&e)))?;
        o.item
            .map(|item| Self::from_item(source_id, key, item))
            .transpose()
    }

    async fn create(&self, record: &Record) -> Result<LedgerWrite, LedgerError> {
        self.register(&record.source_id).await?;
        self.put(record, COND_ABSENT, None).await
    }

    async fn replace(
        &self,
        record: &Record,
        expected_rev: u64,
    ) -> Result<LedgerWrite, LedgerError> {
        self.put(record, COND_REV, Some(expected_rev)).await
    }

    async fn delete(
        &self,
        source_id: &str,
        key: &str,
        expected_rev: u64,
    ) -> Result<LedgerWrite, LedgerError> {
        let req = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(pk(source_id, key)))
            .condition_expression(COND_REV)
            .expression_attribute_values(":rev", AttributeValue::N(expected_rev.to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        match req.send().await {
            Ok(_) => Ok(LedgerWrite::Written),
            Err(e) => {
                if let Some(DeleteItemError::ConditionalCheckFailedException(c)) =
                    e.as_service_error()
                {
                    let current = c
                        .item()
                        .filter(|i| !i.is_empty())
                        .map(|i| Self::from_item(source_id, key, i.clone()))
                        .transpose()?;
                    return Ok(LedgerWrite::Conflict(current.map(Box::new)));
                }
                Err(self.service_err("DeleteItem", (source_id, key), failure(&e)))
            }
        }
    }

    async fn list(&self, source_id: &str) -> Result<Vec<Record>, LedgerError> {
        self.list_range(source_id, &KeyRange::default()).await
    }

    async fn get_many(&self, source_id: &str, keys: &[String]) -> Result<Vec<Record>, LedgerError> {
        self.records_of(source_id, keys, false).await
    }

    async fn get_many_latest(
        &self,
        source_id: &str,
        keys: &[String],
    ) -> Result<Vec<Record>, LedgerError> {
        self.records_of(source_id, keys, true).await
    }

    async fn list_range(
        &self,
        source_id: &str,
        range: &KeyRange,
    ) -> Result<Vec<Record>, LedgerError> {
        // Bounds on the index's sort key (the object key), applied again exactly below
        // (BETWEEN is inclusive; `after` is not). Every key under the prefix sorts before the
        // prefix's successor.
        let lower = match &range.after {
            Some(a) if a.as_str() > range.prefix.as_str() => a.clone(),
            _ => range.prefix.clone(),
        };
        let upper = match (&range.through, prefix_successor(&range.prefix)) {
            (Some(t), Some(s)) => Some(t.clone().min(s)),
            (t, s) => t.clone().or(s),
        };
        if upper.as_ref().is_some_and(|u| &lower > u) {
            return Ok(Vec::new());
        }
        let mut records = Vec::new();
        for n in 0..SHARDS {
            let partition = format!("{source_id}#{n:02}");
            let mut start: Option<HashMap<String, AttributeValue>> = None;
            loop {
                let mut q = self
                    .client
                    .query()
                    .table_name(&self.table)
                    .index_name(INDEX_BY_SOURCE)
                    .expression_attribute_values(":p", AttributeValue::S(partition.clone()));
                // An empty string cannot be a key condition's value.
                let condition = match (lower.is_empty(), &upper) {
                    (true, None) => "gsi1pk = :p",
                    (true, Some(_)) => "gsi1pk = :p AND gsi1sk <= :hi",
                    (false, None) => "gsi1pk = :p AND gsi1sk >= :lo",
                    (false, Some(_)) => "gsi1pk = :p AND gsi1sk BETWEEN :lo AND :hi",
                };
                if !lower.is_empty() {
                    q = q.expression_attribute_values(":lo", AttributeValue::S(lower.clone()));
                }
                if let Some(hi) = &upper {
                    q = q.expression_attribute_values(":hi", AttributeValue::S(hi.clone()));
                }
                q = q.key_condition_expression(condition);
                let page = q
                    .set_limit(self.page_limit)
                    .set_exclusive_start_key(start.take())
                    .send()
                    .await
                    .map_err(|e| {
                        self.service_err("Query", (source_id, &range.prefix), failure(&e))
                    })?;
                for item in page.items.unwrap_or_default() {
                    let key = text(&item, "key").unwrap_or_default();
                    if range.contains(&key) {
                        records.push(Self::from_item(source_id, &key, item)?);
                    }
                }
                match page.last_evaluated_key {
                    Some(k) if !k.is_empty() => start = Some(k),
                    _ => break,
                }
            }
        }
        records.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(records)
    }

    async fn audit(&self, entry: &AuditEntry) -> Result<(), LedgerError> {
        let id = format!(
            "{AUDIT_PREFIX}{}/{:015}/{}",
            entry.source_id,
            entry.at.max(0),
            uuid::Uuid::new_v4()
        );
        let item = HashMap::from([
            ("pk".to_string(), AttributeValue::S(id)),
            ("at".to_string(), AttributeValue::N(entry.at.to_string())),
            (
                "source_id".to_string(),
                AttributeValue::S(entry.source_id.clone()),
            ),
            (
                "command".to_string(),
                AttributeValue::S(entry.command.clone()),
            ),
            (
                "args".to_string(),
                AttributeValue::S(entry.args.to_string()),
            ),
            (
                "affected".to_string(),
                AttributeValue::N(entry.affected.to_string()),
            ),
            (
                "operator".to_string(),
                AttributeValue::S(entry.operator.clone()),
            ),
        ]);
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(COND_ABSENT)
            .send()
            .await
            .map_err(|e| self.service_err("PutItem", (&entry.source_id, "(audit)"), failure(&e)))?;
        Ok(())
    }

    async fn audit_log(&self, source_id: Option<&str>) -> Result<Vec<AuditEntry>, LedgerError> {
        let prefix = match source_id {
            Some(s) => format!("{AUDIT_PREFIX}{s}/"),
            None => AUDIT_PREFIX.to_string(),
        };
        let sid = source_id.unwrap_or_default();
        let mut entries = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("begins_with(pk, :p)")
                .expression_attribute_values(":p", AttributeValue::S(prefix.clone()))
                .consistent_read(true)
                .set_limit(self.page_limit)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.service_err("Scan", (sid, "(audit)"), failure(&e)))?;
            for item in page.items.unwrap_or_default() {
                let pk = text(&item, "pk").unwrap_or_default();
                let corrupt = |message: String| LedgerError::Corrupt {
                    source_id: sid.to_string(),
                    key: pk.clone(),
                    message,
                };
                let number = |name: &str| -> Result<i64, LedgerError> {
                    match item.get(name) {
                        Some(AttributeValue::N(n)) => n
                            .parse()
                            .map_err(|_| corrupt(format!("{name} is not a number: {n}"))),
                        _ => Err(corrupt(format!("{name} is missing"))),
                    }
                };
                let field = |name: &str| {
                    text(&item, name).ok_or_else(|| corrupt(format!("{name} is missing")))
                };
                entries.push((
                    pk.clone(),
                    AuditEntry {
                        at: number("at")?,
                        source_id: field("source_id")?,
                        command: field("command")?,
                        args: serde_json::from_str(&field("args")?)
                            .map_err(|e| corrupt(format!("args: {e}")))?,
                        affected: u64::try_from(number("affected")?).unwrap_or(0),
                        operator: field("operator")?,
                    },
                ));
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        entries.sort_by(|(pa, a), (pb, b)| a.at.cmp(&b.at).then_with(|| pa.cmp(pb)));
        Ok(entries.into_iter().map(|(_, e)| e).collect())
    }

    async fn source_mode(&self, source_id: &str) -> Result<Option<Mode>, LedgerError> {
        let o = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(
                "pk",
                AttributeValue::S(format!("{SOURCE_PREFIX}{source_id}")),
            )
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.service_err("GetItem", (source_id, "(mode)"), failure(&e)))?;
        let Some(item) = o.item else {
            return Ok(None);
        };
        let mode = text(&item, "mode").unwrap_or_default();
        mode.parse()
            .map(Some)
            .map_err(|message| LedgerError::Corrupt {
                source_id: source_id.to_string(),
                key: "(mode)".into(),
                message,
            })
    }

    async fn set_source_mode(
        &self,
        source_id: &str,
        mode: Mode,
        at: i64,
    ) -> Result<(), LedgerError> {
        let item = HashMap::from([
            (
                "pk".to_string(),
                AttributeValue::S(format!("{SOURCE_PREFIX}{source_id}")),
            ),
            (
                "source_id".to_string(),
                AttributeValue::S(source_id.to_string()),
            ),
            (
                "mode".to_string(),
                AttributeValue::S(mode.as_str().to_string()),
            ),
            ("updated_at".to_string(), AttributeValue::N(at.to_string())),
        ]);
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| self.service_err("PutItem", (source_id, "(mode)"), failure(&e)))?;
        Ok(())
    }
}

/// The least string greater than every string that starts with `prefix` (its last character
/// moved to the next one); `None` for the empty prefix, or one made of U+10FFFF only.
fn prefix_successor(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = (u32::from(last) + 1..=0x10FFFF).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// A request that the SDK refused to build (a required field missing): our bug, not retried.
fn build_failure(e: aws_sdk_dynamodb::error::BuildError) -> super::Failure {
    super::Failure {
        status: None,
        code: None,
        retry: Retry::Permanent,
        message: e.to_string(),
    }
}

/// A string attribute of an item.
fn text(item: &HashMap<String, AttributeValue>, name: &str) -> Option<String> {
    match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Committed, IgnoredFields, Status, Target, VersionRef};

    fn done(rescued: u64, ignored: IgnoredFields) -> Record {
        Record {
            source_id: "trail".into(),
            key: "in/a.json".into(),
            status: Status::Done,
            rev: 2,
            committed: Some(Committed {
                target: Target::Version(VersionRef {
                    version: "e1".into(),
                    version_id: None,
                    etag: Some("e1".into()),
                    sequencer: None,
                    size: None,
                }),
                rows: 3,
                sums: Default::default(),
                outputs: Vec::new(),
                rejected: 0,
                rejects: None,
                rescued,
                ignored,
                config_fp: "fp".into(),
                committed_at: 1,
                run_id: "run".into(),
            }),
            claim: None,
            pending: None,
            attempts: 0,
            last_error: None,
            note: None,
            updated_at: 1,
            bookmark: None,
            writing: Vec::new(),
        }
    }

    #[test]
    fn rescued_rows_and_ignored_fields_are_numbers_and_a_map_of_the_committed_map() {
        let ignored = IgnoredFields {
            values: 4,
            fields: [
                ("resources[].tags".to_string(), 3),
                ("a[\"x.y\"]".into(), 1),
            ]
            .into(),
        };
        let record = done(2, ignored);
        let item: HashMap<String, AttributeValue> = serde_dynamo::to_item(&record).unwrap();
        let committed = item["committed"].as_m().unwrap();
        assert_eq!(committed["rescued"], AttributeValue::N("2".into()));
        let ignored = committed["ignored"].as_m().unwrap();
        assert_eq!(ignored["values"], AttributeValue::N("4".into()));
        let fields = ignored["fields"].as_m().unwrap();
        assert_eq!(fields["resources[].tags"], AttributeValue::N("3".into()));
        assert_eq!(fields["a[\"x.y\"]"], AttributeValue::N("1".into()));
        assert_eq!(
            DynamoLedger::from_item("trail", "in/a.json", item).unwrap(),
            record
        );

        // Nothing rescued or ignored: neither attribute, as in items written before them.
        let clean = done(0, IgnoredFields::default());
        let item: HashMap<String, AttributeValue> = serde_dynamo::to_item(&clean).unwrap();
        let committed = item["committed"].as_m().unwrap();
        assert!(!committed.contains_key("rescued") && !committed.contains_key("ignored"));
        assert_eq!(
            DynamoLedger::from_item("trail", "in/a.json", item).unwrap(),
            clean
        );
    }

    #[test]
    fn the_prefix_successor_bounds_every_key_under_the_prefix() {
        assert_eq!(prefix_successor("in/").as_deref(), Some("in0"));
        assert_eq!(prefix_successor(""), None);
        assert_eq!(prefix_successor("\u{10FFFF}"), None);
        assert_eq!(prefix_successor("a\u{10FFFF}").as_deref(), Some("b"));
        // The surrogate gap is skipped.
        assert_eq!(prefix_successor("\u{D7FF}").as_deref(), Some("\u{E000}"));
        let s = prefix_successor("in/").unwrap();
        for key in ["in/", "in/\u{10FFFF}\u{10FFFF}x", "in/你好"] {
            assert!(key < s.as_str(), "{key:?}");
        }
        assert!("in0" >= s.as_str());
    }
}
