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
//! | `committed`    | M    | the committed version (`target`), `rows`, `sums` (exact decimal strings), `outputs` (bucket, key, etag), `rejected` and `rejects` (bad rows set aside and their file, when any), `config_fp`, `committed_at`, `run_id` |
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
//! The audit log is read with a Scan filtered on `begins_with(pk, "~audit/…")`: fine for an
//! operator command that runs rarely, and it keeps the audit log off the hot path entirely.
//!
//! # Reading a source's records
//! [`Ledger::list`] queries `by_source` on each of the 16 shards, following
//! `LastEvaluatedKey`. A GSI read is eventually consistent (there is no strongly consistent
//! read of a global secondary index): a record written in the last second may be missing or
//! stale. Every operator write that follows is conditional on the revision it read.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement,
    KeyType, KeysAndAttributes, Projection, ProjectionType, ReturnValuesOnConditionCheckFailure,
    ScalarAttributeType,
};

use super::failure;
use crate::config::Mode;
use crate::error::{LedgerError, Retry};
use crate::model::{AuditEntry, Record};
use crate::ports::{KeyRange, Ledger, LedgerWrite};

/// Condition of a first write.
pub const COND_ABSENT: &str = "attribute_not_exists(pk)";
/// Condition of every later write.
pub const COND_REV: &str = "rev = :rev";
/// Name of the index over a source's records.
pub const INDEX_BY_SOURCE: &str = "by_source";
/// Shards of the index's partition key per source.
pub const SHARDS: u64 = 16;

/// Keys per BatchGetItem request (DynamoDB's maximum).
pub const BATCH_GET_KEYS: usize = 100;

/// Prefix of the `pk` of audit entries.
pub const AUDIT_PREFIX: &str = "~audit/";
/// Prefix of the `pk` of source control items (mode overrides).
pub const SOURCE_PREFIX: &str = "~source/";

/// The ledger on a DynamoDB table.
#[derive(Debug, Clone)]
pub struct DynamoLedger {
    client: Client,
    table: String,
    page_limit: Option<i32>,
}

/// The partition key of a record.
pub fn pk(source_id: &str, key: &str) -> String {
    format!("{source_id}/{key}")
}

/// The index shard of a key (FNV-1a, stable across processes).
pub fn shard(key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h % SHARDS
}

impl DynamoLedger {
    /// The ledger in `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            page_limit: None,
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

    /// Create the table (on-demand, with the `by_source` index) unless it exists, and wait
    /// until it is active. For the local stack and first-time setup; the SAM template
    /// declares the same table.
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

#[async_trait]
impl Ledger for DynamoLedger {
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
        let mut records = Vec::new();
        for n in 0..SHARDS {
            let partition = format!("{source_id}#{n:02}");
            let mut start: Option<HashMap<String, AttributeValue>> = None;
            loop {
                let page = self
                    .client
                    .query()
                    .table_name(&self.table)
                    .index_name(INDEX_BY_SOURCE)
                    .key_condition_expression("gsi1pk = :p")
                    .expression_attribute_values(":p", AttributeValue::S(partition.clone()))
                    .set_limit(self.page_limit)
                    .set_exclusive_start_key(start.take())
                    .send()
                    .await
                    .map_err(|e| self.service_err("Query", (source_id, ""), failure(&e)))?;
                for item in page.items.unwrap_or_default() {
                    let key = match item.get("key") {
                        Some(AttributeValue::S(k)) => k.clone(),
                        _ => String::new(),
                    };
                    records.push(Self::from_item(source_id, &key, item)?);
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

    async fn get_many(&self, source_id: &str, keys: &[String]) -> Result<Vec<Record>, LedgerError> {
        let mut records = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(BATCH_GET_KEYS) {
            let wanted: Vec<HashMap<String, AttributeValue>> = chunk
                .iter()
                .map(|k| HashMap::from([("pk".to_string(), AttributeValue::S(pk(source_id, k)))]))
                .collect();
            let mut request = KeysAndAttributes::builder()
                .set_keys(Some(wanted))
                .build()
                .map_err(|e| self.service_err("BatchGetItem", (source_id, ""), build_failure(e)))?;
            // Unprocessed keys (throttling, the 16 MB answer limit) are asked for again with
            // a growing pause, as the SDK documentation advises.
            for attempt in 0.. {
                let o = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, request)
                    .send()
                    .await
                    .map_err(|e| self.service_err("BatchGetItem", (source_id, ""), failure(&e)))?;
                for item in o
                    .responses
                    .and_then(|mut r| r.remove(&self.table))
                    .unwrap_or_default()
                {
                    let key = text(&item, "key").unwrap_or_default();
                    records.push(Self::from_item(source_id, &key, item)?);
                }
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
        Ok(records)
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
    use super::prefix_successor;

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
