//! [`Ledger`] on SQLite: one file that several processes (CLI runs) and threads share.
//!
//! # Table `ledger`
//! One row per `(source_id, key)` (the primary key), indexed on `(source_id, status)`:
//!
//! | column | type | meaning |
//! |--------|------|---------|
//! | `source_id`, `key` | TEXT | the source and the decoded S3 key |
//! | `status` | TEXT | claimed / done / deleted / pending / failed / quarantined / released |
//! | `rev` | INTEGER | revision; every write is conditional on it |
//! | `version` | TEXT | the committed version's identity (NULL when nothing, or a delete, is committed) |
//! | `rows` | INTEGER | rows of the committed version |
//! | `rescued` | INTEGER | of those, rows with values in the rescued column |
//! | `ignored` | INTEGER | values of fields not in the schema the committed version dropped (`on_unknown_field: ignore`; which fields: `record`'s `committed.ignored.fields`) |
//! | `lease_until` | INTEGER | lease expiry of the claim, ms since the epoch |
//! | `attempts` | INTEGER | failed attempts of the pending / claimed target |
//! | `last_error` | TEXT | the last error |
//! | `updated_at` | INTEGER | last write, ms since the epoch |
//! | `record` | TEXT | the whole [`Record`] as JSON |
//!
//! `record` is the source of truth; the other columns are derived from it on every write, so
//! a person can query the ledger with `sqlite3`:
//! `sqlite3 ledger.db "SELECT source_id, status, count(*) FROM ledger GROUP BY 1,2"`, or
//! `sqlite3 ledger.db "SELECT source_id, sum(rows), sum(rescued), sum(ignored) FROM ledger GROUP BY 1"`.
//!
//! # Table `audit`
//! The operator's audit log, one row per entry ([`AuditEntry`]): `id` (INTEGER, insertion
//! order), `at` (ms since the epoch), `source_id`, `command`, `args` (JSON), `affected`,
//! `operator`.
//!
//! # Table `sources`
//! The operator's mode override per source (`tidemark mode`): `source_id` (primary key),
//! `mode` (enable / pause / disable), `updated_at`.
//!
//! # Tables `jobs`, `job_counts`, `job_messages`
//! Bulk jobs ([`crate::jobs`]): `jobs` holds each job record (`id`, `kind`, `source_id`,
//! `started_at`, `rev`, and the whole [`Job`] as JSON in `job`); `job_counts` the counts its
//! workers added (`job_id`, [`JobCounts`] as JSON); `job_messages` one row per message counted
//! (`job_id`, `message`, `at`), so a message delivered twice is counted once.
//!
//! The schema version is `PRAGMA user_version` (1: `ledger` only; 2: with `audit` and
//! `sources`; 3: with the job tables; 4: with `ledger`'s `rescued` and `ignored` columns).
//! Older files gain the newer tables and columns in place, the new columns filled from
//! `record`.
//!
//! Each write runs in a `BEGIN IMMEDIATE` transaction, which holds the database's write lock
//! from its start: the condition (no row, or the expected `rev`) is checked, and on a lost
//! race the current record read, under the same lock as the write. The database is in WAL
//! mode (readers never wait for the writer) with a 5 s busy timeout. Calls run on tokio's
//! blocking threads, over one connection per [`SqliteLedger`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};

use crate::config::Mode;
use crate::error::{LedgerError, Retry};
use crate::jobs::{Job, JobCounts};
use crate::model::{AuditEntry, Record, Target};
use crate::ports::{JobStore, JobWrite, KeyRange, Ledger, LedgerWrite};

/// The schema this code reads and writes (`PRAGMA user_version`).
const SCHEMA_VERSION: i32 = 4;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS ledger (
    source_id   TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    rev         INTEGER NOT NULL,
    version     TEXT,
    rows        INTEGER,
    rescued     INTEGER,
    ignored     INTEGER,
    lease_until INTEGER,
    attempts    INTEGER NOT NULL,
    last_error  TEXT,
    updated_at  INTEGER NOT NULL,
    record      TEXT    NOT NULL,
    PRIMARY KEY (source_id, key)
);
CREATE INDEX IF NOT EXISTS ledger_by_status ON ledger (source_id, status);
CREATE TABLE IF NOT EXISTS audit (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    at        INTEGER NOT NULL,
    source_id TEXT    NOT NULL,
    command   TEXT    NOT NULL,
    args      TEXT    NOT NULL,
    affected  INTEGER NOT NULL,
    operator  TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_by_source ON audit (source_id, at);
CREATE TABLE IF NOT EXISTS sources (
    source_id  TEXT    PRIMARY KEY,
    mode       TEXT    NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    id         TEXT    PRIMARY KEY,
    kind       TEXT    NOT NULL,
    source_id  TEXT    NOT NULL,
    started_at INTEGER NOT NULL,
    rev        INTEGER NOT NULL,
    job        TEXT    NOT NULL
);
CREATE TABLE IF NOT EXISTS job_counts (
    job_id TEXT PRIMARY KEY,
    counts TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS job_messages (
    job_id  TEXT    NOT NULL,
    message INTEGER NOT NULL,
    at      INTEGER NOT NULL,
    PRIMARY KEY (job_id, message)
);
";

/// Version 4: a file of versions 1 to 3 gains `ledger`'s `rescued` and `ignored` columns,
/// filled from the records (0 for a commit from before they were counted).
const ADD_KEPT_ASIDE: &str = "
ALTER TABLE ledger ADD COLUMN rescued INTEGER;
ALTER TABLE ledger ADD COLUMN ignored INTEGER;
UPDATE ledger SET
    rescued = coalesce(json_extract(record, '$.committed.rescued'), 0),
    ignored = coalesce(json_extract(record, '$.committed.ignored.values'), 0)
    WHERE json_extract(record, '$.committed') IS NOT NULL;
";

const SELECT: &str = "SELECT record FROM ledger WHERE source_id = ?1 AND key = ?2";

const INSERT: &str = "INSERT INTO ledger
    (source_id, key, status, rev, version, rows, lease_until, attempts, last_error, updated_at,
     record, rescued, ignored)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";

const UPDATE: &str = "UPDATE ledger SET
    status = ?3, rev = ?4, version = ?5, rows = ?6, lease_until = ?7, attempts = ?8,
    last_error = ?9, updated_at = ?10, record = ?11, rescued = ?12, ignored = ?13
    WHERE source_id = ?1 AND key = ?2 AND rev = ?14";

/// How long a call waits for another connection's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The ledger in a SQLite database file.
#[derive(Debug, Clone)]
pub struct SqliteLedger {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
}

/// Why a call failed, before it is named after the call.
enum Fail {
    Sql(rusqlite::Error),
    Ledger(LedgerError),
}

impl From<rusqlite::Error> for Fail {
    fn from(e: rusqlite::Error) -> Self {
        Fail::Sql(e)
    }
}

fn retry_of(e: &rusqlite::Error) -> Retry {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => Retry::Transient,
        _ => Retry::Permanent,
    }
}

/// A count or revision as SQLite's signed integer.
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The record stored in a row, which must be the row's own.
fn decode(source_id: &str, key: &str, json: &str) -> Result<Record, Fail> {
    let corrupt = |message: String| {
        Fail::Ledger(LedgerError::Corrupt {
            source_id: source_id.to_owned(),
            key: key.to_owned(),
            message,
        })
    };
    let record: Record = serde_json::from_str(json).map_err(|e| corrupt(e.to_string()))?;
    if record.source_id != source_id || record.key != key {
        return Err(corrupt(format!(
            "the row holds the record of {}/{}",
            record.source_id, record.key
        )));
    }
    Ok(record)
}

fn select(conn: &Connection, source_id: &str, key: &str) -> Result<Option<Record>, Fail> {
    conn.query_row(SELECT, params![source_id, key], |row| {
        row.get::<_, String>(0)
    })
    .optional()?
    .map(|json| decode(source_id, key, &json))
    .transpose()
}

/// Write `record`'s row with `sql` (`INSERT`, or `UPDATE` with `expected_rev` as `?14`);
/// returns the rows changed.
fn write(
    conn: &Connection,
    sql: &str,
    record: &Record,
    expected_rev: Option<u64>,
) -> Result<usize, Fail> {
    let json = serde_json::to_string(record).map_err(|e| {
        Fail::Ledger(LedgerError::Corrupt {
            source_id: record.source_id.clone(),
            key: record.key.clone(),
            message: e.to_string(),
        })
    })?;
    let committed = record.committed.as_ref();
    let version = committed.and_then(|c| match &c.target {
        Target::Version(v) => Some(v.version.as_str()),
        Target::Delete(_) => None,
    });
    let expected_rev = expected_rev.map(int);
    let mut stmt = conn.prepare_cached(sql)?;
    let columns = params![
        record.source_id,
        record.key,
        record.status.as_str(),
        int(record.rev),
        version,
        committed.map(|c| int(c.rows)),
        record.claim.as_ref().map(|c| c.lease_until),
        record.attempts,
        record.last_error,
        record.updated_at,
        json,
        committed.map(|c| int(c.rescued)),
        committed.map(|c| int(c.ignored.values)),
    ];
    Ok(match expected_rev {
        None => stmt.execute(columns)?,
        Some(rev) => {
            let mut all = columns.to_vec();
            all.push(&rev);
            stmt.execute(all.as_slice())?
        }
    })
}

impl SqliteLedger {
    /// Open (creating it if missing) the ledger database at `path`, and create or check its
    /// schema. This blocks for as long as another process holds the write lock (up to the
    /// busy timeout): call it at start-up.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, LedgerError> {
        let path = path.as_ref().to_path_buf();
        let fail = |message: String, retry| LedgerError::Service {
            op: "open",
            source_id: String::new(),
            key: String::new(),
            message: format!("{}: {message}", path.display()),
            retry,
        };
        let sql = |e: rusqlite::Error| fail(e.to_string(), retry_of(&e));
        let mut conn = Connection::open(&path).map_err(sql)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
        conn.pragma_update(None, "journal_mode", "wal")
            .map_err(sql)?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let version: i32 = tx
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(sql)?;
        match version {
            // Every statement of the schema is `IF NOT EXISTS`: an older file gains the
            // newer tables in place, and its `ledger` table (there since version 1) the
            // newer columns.
            0..SCHEMA_VERSION => {
                if version >= 1 {
                    tx.execute_batch(ADD_KEPT_ASIDE).map_err(sql)?;
                }
                tx.execute_batch(SCHEMA).map_err(sql)?;
                tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                    .map_err(sql)?;
            }
            SCHEMA_VERSION => {}
            newer => {
                return Err(fail(
                    format!(
                        "schema version {newer} is newer than this tidemark's \
                         ({SCHEMA_VERSION}): upgrade tidemark"
                    ),
                    Retry::Permanent,
                ));
            }
        }
        tx.commit().map_err(sql)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            path,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every record, of one source or of all, ordered by source and key.
    pub async fn list_all(&self, source_id: Option<&str>) -> Result<Vec<Record>, LedgerError> {
        let source = source_id.map(str::to_owned);
        self.call("list", source_id.unwrap_or_default(), "", move |conn| {
            let sql = match source {
                Some(_) => {
                    "SELECT source_id, key, record FROM ledger WHERE source_id = ?1 \
                            ORDER BY source_id, key"
                }
                None => "SELECT source_id, key, record FROM ledger ORDER BY source_id, key",
            };
            let mut stmt = conn.prepare(sql)?;
            let rows = match &source {
                Some(s) => stmt.query(params![s])?,
                None => stmt.query([])?,
            };
            rows.mapped(|row| Ok((row.get::<_, String>(0)?, row.get(1)?, row.get(2)?)))
                .map(|row| {
                    let (source_id, key, json): (String, String, String) = row?;
                    decode(&source_id, &key, &json)
                })
                .collect()
        })
        .await
    }

    /// Run `f` on the connection, on a blocking thread; name a failure after call `op` on
    /// record `source_id`/`key`.
    async fn call<T: Send + 'static>(
        &self,
        op: &'static str,
        source_id: &str,
        key: &str,
        f: impl FnOnce(&mut Connection) -> Result<T, Fail> + Send + 'static,
    ) -> Result<T, LedgerError> {
        let conn = Arc::clone(&self.conn);
        let done = tokio::task::spawn_blocking(move || {
            f(&mut conn.lock().unwrap_or_else(PoisonError::into_inner))
        })
        .await;
        let service = |message: String, retry| LedgerError::Service {
            op,
            source_id: source_id.to_owned(),
            key: key.to_owned(),
            message: format!("{}: {message}", self.path.display()),
            retry,
        };
        match done {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(Fail::Ledger(e))) => Err(e),
            Ok(Err(Fail::Sql(e))) => Err(service(e.to_string(), retry_of(&e))),
            Err(e) => Err(service(
                format!("worker thread failed: {e}"),
                Retry::Transient,
            )),
        }
    }
}

/// A job stored in a row, which must be the row's own.
fn decode_job(id: &str, json: &str) -> Result<Job, Fail> {
    serde_json::from_str(json).map_err(|e| {
        Fail::Ledger(LedgerError::Corrupt {
            source_id: "(job)".into(),
            key: id.to_owned(),
            message: e.to_string(),
        })
    })
}

fn encode<T: serde::Serialize>(id: &str, value: &T) -> Result<String, Fail> {
    serde_json::to_string(value).map_err(|e| {
        Fail::Ledger(LedgerError::Corrupt {
            source_id: "(job)".into(),
            key: id.to_owned(),
            message: e.to_string(),
        })
    })
}

fn select_job(conn: &Connection, id: &str) -> Result<Option<Job>, Fail> {
    conn.query_row("SELECT job FROM jobs WHERE id = ?1", params![id], |row| {
        row.get::<_, String>(0)
    })
    .optional()?
    .map(|json| decode_job(id, &json))
    .transpose()
}

fn select_counts(conn: &Connection, id: &str) -> Result<JobCounts, Fail> {
    conn.query_row(
        "SELECT counts FROM job_counts WHERE job_id = ?1",
        params![id],
        |row| row.get::<_, String>(0),
    )
    .optional()?
    .map(|json| {
        serde_json::from_str(&json).map_err(|e| {
            Fail::Ledger(LedgerError::Corrupt {
                source_id: "(job counts)".into(),
                key: id.to_owned(),
                message: e.to_string(),
            })
        })
    })
    .transpose()
    .map(Option::unwrap_or_default)
}

/// Add `counts` to job `id`'s counts, inside the caller's transaction.
fn add_counts(conn: &Connection, id: &str, counts: &JobCounts) -> Result<(), Fail> {
    let mut total = select_counts(conn, id)?;
    total.add(counts);
    conn.execute(
        "INSERT INTO job_counts (job_id, counts) VALUES (?1, ?2) \
         ON CONFLICT (job_id) DO UPDATE SET counts = excluded.counts",
        params![id, encode(id, &total)?],
    )?;
    Ok(())
}

#[async_trait]
impl JobStore for SqliteLedger {
    async fn create_job(&self, job: &Job) -> Result<bool, LedgerError> {
        let job = job.clone();
        self.call("create_job", "(job)", &job.id.clone(), move |conn| {
            let json = encode(&job.id, &job)?;
            let inserted = conn.execute(
                "INSERT OR IGNORE INTO jobs (id, kind, source_id, started_at, rev, job) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    job.id,
                    job.kind.as_str(),
                    job.source_id,
                    job.started_at,
                    int(job.rev),
                    json
                ],
            )?;
            Ok(inserted == 1)
        })
        .await
    }

    async fn replace_job(&self, job: &Job, expected_rev: u64) -> Result<JobWrite, LedgerError> {
        let job = job.clone();
        self.call("replace_job", "(job)", &job.id.clone(), move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let json = encode(&job.id, &job)?;
            let updated = tx.execute(
                "UPDATE jobs SET rev = ?2, job = ?3 WHERE id = ?1 AND rev = ?4",
                params![job.id, int(job.rev), json, int(expected_rev)],
            )?;
            if updated == 1 {
                tx.commit()?;
                return Ok(JobWrite::Written);
            }
            Ok(JobWrite::Conflict(select_job(&tx, &job.id)?.map(Box::new)))
        })
        .await
    }

    async fn get_job(&self, id: &str) -> Result<Option<(Job, JobCounts)>, LedgerError> {
        let id = id.to_owned();
        self.call("get_job", "(job)", &id.clone(), move |conn| {
            let Some(job) = select_job(conn, &id)? else {
                return Ok(None);
            };
            Ok(Some((job, select_counts(conn, &id)?)))
        })
        .await
    }

    async fn list_jobs(&self, limit: usize) -> Result<Vec<(Job, JobCounts)>, LedgerError> {
        self.call("list_jobs", "(job)", "", move |conn| {
            let mut stmt = conn
                .prepare("SELECT id, job FROM jobs ORDER BY started_at DESC, id DESC LIMIT ?1")?;
            let rows: Vec<(String, String)> = stmt
                .query_map(params![int(limit as u64)], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })?
                .collect::<Result<_, _>>()?;
            rows.into_iter()
                .map(|(id, json)| Ok((decode_job(&id, &json)?, select_counts(conn, &id)?)))
                .collect()
        })
        .await
    }

    async fn finish_message(
        &self,
        job_id: &str,
        message: u64,
        counts: &JobCounts,
        now: i64,
    ) -> Result<bool, LedgerError> {
        let (id, counts) = (job_id.to_owned(), *counts);
        self.call("finish_message", "(job)", job_id, move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let marked = tx.execute(
                "INSERT OR IGNORE INTO job_messages (job_id, message, at) VALUES (?1, ?2, ?3)",
                params![id, int(message), now],
            )?;
            if marked == 0 {
                return Ok(false);
            }
            add_counts(
                &tx,
                &id,
                &JobCounts {
                    messages: 1,
                    updated_at: now,
                    ..counts
                },
            )?;
            tx.commit()?;
            Ok(true)
        })
        .await
    }

    async fn add_failures(&self, job_id: &str, n: u64, now: i64) -> Result<(), LedgerError> {
        let id = job_id.to_owned();
        self.call("add_failures", "(job)", job_id, move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            add_counts(
                &tx,
                &id,
                &JobCounts {
                    failures: n,
                    updated_at: now,
                    ..JobCounts::default()
                },
            )?;
            tx.commit()?;
            Ok(())
        })
        .await
    }
}

#[async_trait]
impl Ledger for SqliteLedger {
    async fn get(&self, source_id: &str, key: &str) -> Result<Option<Record>, LedgerError> {
        let (s, k) = (source_id.to_owned(), key.to_owned());
        self.call("get", source_id, key, move |conn| select(conn, &s, &k))
            .await
    }

    async fn create(&self, record: &Record) -> Result<LedgerWrite, LedgerError> {
        let r = record.clone();
        self.call("create", &record.source_id, &record.key, move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if let Some(current) = select(&tx, &r.source_id, &r.key)? {
                return Ok(LedgerWrite::Conflict(Some(Box::new(current))));
            }
            write(&tx, INSERT, &r, None)?;
            tx.commit()?;
            Ok(LedgerWrite::Written)
        })
        .await
    }

    async fn replace(
        &self,
        record: &Record,
        expected_rev: u64,
    ) -> Result<LedgerWrite, LedgerError> {
        let r = record.clone();
        self.call("replace", &record.source_id, &record.key, move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if write(&tx, UPDATE, &r, Some(expected_rev))? == 1 {
                tx.commit()?;
                return Ok(LedgerWrite::Written);
            }
            let current = select(&tx, &r.source_id, &r.key)?;
            Ok(LedgerWrite::Conflict(current.map(Box::new)))
        })
        .await
    }

    async fn delete(
        &self,
        source_id: &str,
        key: &str,
        expected_rev: u64,
    ) -> Result<LedgerWrite, LedgerError> {
        let (s, k) = (source_id.to_owned(), key.to_owned());
        self.call("delete", source_id, key, move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let deleted = tx.execute(
                "DELETE FROM ledger WHERE source_id = ?1 AND key = ?2 AND rev = ?3",
                params![s, k, int(expected_rev)],
            )?;
            if deleted == 1 {
                tx.commit()?;
                return Ok(LedgerWrite::Written);
            }
            let current = select(&tx, &s, &k)?;
            Ok(LedgerWrite::Conflict(current.map(Box::new)))
        })
        .await
    }

    async fn list(&self, source_id: &str) -> Result<Vec<Record>, LedgerError> {
        self.list_all(Some(source_id)).await
    }

    async fn source_ids(&self) -> Result<Vec<String>, LedgerError> {
        self.call("source_ids", "", "", |conn| {
            let mut statement =
                conn.prepare_cached("SELECT DISTINCT source_id FROM ledger ORDER BY source_id")?;
            let ids = statement
                .query_map([], |row| row.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(ids)
        })
        .await
    }

    async fn get_many(&self, source_id: &str, keys: &[String]) -> Result<Vec<Record>, LedgerError> {
        let (s, keys) = (source_id.to_owned(), keys.to_vec());
        self.call("get_many", source_id, "", move |conn| {
            let mut found = Vec::new();
            for k in &keys {
                found.extend(select(conn, &s, k)?);
            }
            Ok(found)
        })
        .await
    }

    async fn list_range(
        &self,
        source_id: &str,
        range: &KeyRange,
    ) -> Result<Vec<Record>, LedgerError> {
        let (s, range) = (source_id.to_owned(), range.clone());
        self.call(
            "list_range",
            source_id,
            &range.prefix.clone(),
            move |conn| {
                // Keys compare as their UTF-8 bytes (SQLite's BINARY collation), as in S3.
                let mut stmt = conn.prepare(
                    "SELECT key, record FROM ledger WHERE source_id = ?1 AND key >= ?2 \
                 AND (?3 IS NULL OR key > ?3) AND (?4 IS NULL OR key <= ?4) ORDER BY key",
                )?;
                let mut rows = stmt.query(params![s, range.prefix, range.after, range.through])?;
                let mut found = Vec::new();
                while let Some(row) = rows.next()? {
                    let (key, json): (String, String) = (row.get(0)?, row.get(1)?);
                    if !key.starts_with(&range.prefix) {
                        break;
                    }
                    found.push(decode(&s, &key, &json)?);
                }
                Ok(found)
            },
        )
        .await
    }

    async fn audit(&self, entry: &AuditEntry) -> Result<(), LedgerError> {
        let e = entry.clone();
        self.call("audit", &entry.source_id, "", move |conn| {
            conn.execute(
                "INSERT INTO audit (at, source_id, command, args, affected, operator) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    e.at,
                    e.source_id,
                    e.command,
                    e.args.to_string(),
                    int(e.affected),
                    e.operator
                ],
            )?;
            Ok(())
        })
        .await
    }

    async fn audit_log(&self, source_id: Option<&str>) -> Result<Vec<AuditEntry>, LedgerError> {
        let source = source_id.map(str::to_owned);
        self.call(
            "audit_log",
            source_id.unwrap_or_default(),
            "",
            move |conn| {
                let mut stmt = conn.prepare(
                    "SELECT at, source_id, command, args, affected, operator FROM audit \
                 WHERE ?1 IS NULL OR source_id = ?1 ORDER BY at, id",
                )?;
                let rows = stmt.query_map(params![source], |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, String>(2)?,
                        row.get::<_, String>(3)?,
                        row.get::<_, i64>(4)?,
                        row.get::<_, String>(5)?,
                    ))
                })?;
                rows.map(|row| {
                    let (at, source_id, command, args, affected, operator) = row?;
                    let args = serde_json::from_str(&args).map_err(|e| {
                        Fail::Ledger(LedgerError::Corrupt {
                            source_id: source_id.clone(),
                            key: format!("audit entry at {at}"),
                            message: e.to_string(),
                        })
                    })?;
                    Ok(AuditEntry {
                        at,
                        source_id,
                        command,
                        args,
                        affected: u64::try_from(affected).unwrap_or(0),
                        operator,
                    })
                })
                .collect()
            },
        )
        .await
    }

    async fn source_mode(&self, source_id: &str) -> Result<Option<Mode>, LedgerError> {
        let s = source_id.to_owned();
        self.call("source_mode", source_id, "", move |conn| {
            let mode: Option<String> = conn
                .query_row(
                    "SELECT mode FROM sources WHERE source_id = ?1",
                    params![s],
                    |row| row.get(0),
                )
                .optional()?;
            mode.map(|m| {
                m.parse().map_err(|message| {
                    Fail::Ledger(LedgerError::Corrupt {
                        source_id: s.clone(),
                        key: "(mode)".into(),
                        message,
                    })
                })
            })
            .transpose()
        })
        .await
    }

    async fn set_source_mode(
        &self,
        source_id: &str,
        mode: Mode,
        at: i64,
    ) -> Result<(), LedgerError> {
        let s = source_id.to_owned();
        self.call("set_source_mode", source_id, "", move |conn| {
            conn.execute(
                "INSERT INTO sources (source_id, mode, updated_at) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (source_id) DO UPDATE SET mode = excluded.mode, \
                 updated_at = excluded.updated_at",
                params![s, mode.as_str(), at],
            )?;
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Committed, IgnoredFields, Status, VersionRef};

    /// The `ledger` table as versions 1 to 3 made it.
    const LEDGER_V3: &str = "
CREATE TABLE ledger (
    source_id   TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    rev         INTEGER NOT NULL,
    version     TEXT,
    rows        INTEGER,
    lease_until INTEGER,
    attempts    INTEGER NOT NULL,
    last_error  TEXT,
    updated_at  INTEGER NOT NULL,
    record      TEXT    NOT NULL,
    PRIMARY KEY (source_id, key)
);
CREATE INDEX ledger_by_status ON ledger (source_id, status);
";

    fn record(key: &str) -> Record {
        Record {
            source_id: "orders".into(),
            key: key.into(),
            status: Status::Done,
            rev: 3,
            committed: Some(Committed {
                target: Target::Version(VersionRef {
                    version: "etag-1".into(),
                    version_id: None,
                    etag: Some("etag-1".into()),
                    sequencer: None,
                    size: Some(10),
                }),
                rows: 42,
                sums: Default::default(),
                outputs: vec![],
                rejected: 0,
                rejects: None,
                rescued: 2,
                ignored: IgnoredFields {
                    values: 5,
                    fields: [("detail.extra".to_string(), 5)].into(),
                },
                config_fp: "fp".into(),
                committed_at: 5,
                run_id: "run".into(),
            }),
            claim: None,
            pending: None,
            attempts: 1,
            last_error: Some("boom".into()),
            note: None,
            updated_at: 7,
            bookmark: None,
            writing: Vec::new(),
        }
    }

    #[tokio::test]
    async fn columns_are_derived_for_sqlite3_users() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("ledger.db");
        let ledger = SqliteLedger::open(&path).unwrap();
        assert_eq!(
            ledger.create(&record("in/a.csv")).await.unwrap(),
            LedgerWrite::Written
        );
        let conn = Connection::open(&path).unwrap();
        let row = conn
            .query_row(
                "SELECT status, rev, version, rows, lease_until, attempts, last_error, updated_at \
                 FROM ledger WHERE source_id = 'orders' AND key = 'in/a.csv'",
                [],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, Option<String>>(2)?,
                        r.get::<_, Option<i64>>(3)?,
                        r.get::<_, Option<i64>>(4)?,
                        r.get::<_, i64>(5)?,
                        r.get::<_, Option<String>>(6)?,
                        r.get::<_, i64>(7)?,
                    ))
                },
            )
            .unwrap();
        assert_eq!(
            row,
            (
                "done".into(),
                3,
                Some("etag-1".into()),
                Some(42),
                None,
                1,
                Some("boom".into()),
                7
            )
        );
        assert_eq!(kept_aside(&conn, "in/a.csv"), (Some(2), Some(5)));
        let counts: Vec<(String, String, i64)> = conn
            .prepare("SELECT source_id, status, count(*) FROM ledger GROUP BY 1,2")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(counts, [("orders".into(), "done".into(), 1)]);
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }

    #[tokio::test]
    async fn reopening_keeps_records_and_a_newer_schema_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("ledger.db");
        let ledger = SqliteLedger::open(&path).unwrap();
        ledger.create(&record("b")).await.unwrap();
        ledger.create(&record("a")).await.unwrap();
        let mut other = record("a");
        other.source_id = "clicks".into();
        ledger.create(&other).await.unwrap();
        drop(ledger);

        let ledger = SqliteLedger::open(&path).unwrap();
        let keys = |records: Vec<Record>| -> Vec<(String, String)> {
            records.into_iter().map(|r| (r.source_id, r.key)).collect()
        };
        assert_eq!(
            keys(ledger.list_all(None).await.unwrap()),
            [
                ("clicks".into(), "a".into()),
                ("orders".into(), "a".into()),
                ("orders".into(), "b".into())
            ]
        );
        assert_eq!(
            keys(ledger.list_all(Some("orders")).await.unwrap()),
            [("orders".into(), "a".into()), ("orders".into(), "b".into())]
        );
        drop(ledger);

        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        let e = SqliteLedger::open(&path).unwrap_err();
        let newer = format!("schema version {}", SCHEMA_VERSION + 1);
        assert!(e.to_string().contains(&newer), "{e}");
    }

    /// The file's schema version.
    fn user_version(conn: &Connection) -> i32 {
        conn.pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap()
    }

    /// The `rescued` and `ignored` columns of a row.
    fn kept_aside(conn: &Connection, key: &str) -> (Option<i64>, Option<i64>) {
        conn.query_row(
            "SELECT rescued, ignored FROM ledger WHERE source_id = 'orders' AND key = ?1",
            [key],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn a_version_3_file_gains_the_rescued_and_ignored_columns_from_its_records() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("ledger.db");
        let older = |key: &str, committed: bool| {
            let mut r = record(key);
            if !committed {
                r.committed = None;
            }
            let mut json = serde_json::to_value(&r).unwrap();
            if committed {
                // As a commit from before the counts wrote it.
                let c = json["committed"].as_object_mut().unwrap();
                c.remove("rescued");
                c.remove("ignored");
            }
            (r, json.to_string())
        };
        let (old_commit, old_json) = older("in/old.csv", true);
        let (claimed, claimed_json) = older("in/claimed.csv", false);
        let (counted, counted_json) = older("in/counted.csv", true);
        let counted_json = {
            let mut json: serde_json::Value = serde_json::from_str(&counted_json).unwrap();
            json["committed"]["rescued"] = 2.into();
            json["committed"]["ignored"] = serde_json::json!({"values": 5});
            json.to_string()
        };
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(LEDGER_V3).unwrap();
            for (r, json) in [
                (&old_commit, &old_json),
                (&claimed, &claimed_json),
                (&counted, &counted_json),
            ] {
                conn.execute(
                    "INSERT INTO ledger (source_id, key, status, rev, attempts, updated_at, record) \
                     VALUES (?1, ?2, 'done', 3, 0, 7, ?3)",
                    params![r.source_id, r.key, json],
                )
                .unwrap();
            }
            conn.pragma_update(None, "user_version", 3).unwrap();
        }
        let ledger = SqliteLedger::open(&path).unwrap();
        let conn = Connection::open(&path).unwrap();
        assert_eq!(kept_aside(&conn, "in/old.csv"), (Some(0), Some(0)));
        assert_eq!(kept_aside(&conn, "in/claimed.csv"), (None, None));
        assert_eq!(kept_aside(&conn, "in/counted.csv"), (Some(2), Some(5)));
        // The old commit reads with no counts; written again, its columns follow the record.
        let read = ledger.get("orders", "in/old.csv").await.unwrap().unwrap();
        let c = read.committed.as_ref().unwrap();
        assert_eq!((c.rescued, c.ignored.is_empty()), (0, true));
        let mut next = read.clone();
        next.rev += 1;
        next.committed = record("in/old.csv").committed;
        assert_eq!(
            ledger.replace(&next, read.rev).await.unwrap(),
            LedgerWrite::Written
        );
        assert_eq!(kept_aside(&conn, "in/old.csv"), (Some(2), Some(5)));
        assert_eq!(user_version(&conn), SCHEMA_VERSION);
    }

    #[tokio::test]
    async fn a_version_1_file_gains_the_newer_tables() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("ledger.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(LEDGER_V3).unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
        }
        let ledger = SqliteLedger::open(&path).unwrap();
        ledger.create(&record("a")).await.unwrap();
        ledger
            .set_source_mode("orders", Mode::Pause, 9)
            .await
            .unwrap();
        assert_eq!(
            ledger.source_mode("orders").await.unwrap(),
            Some(Mode::Pause)
        );
        let entry = AuditEntry {
            at: 9,
            source_id: "orders".into(),
            command: "forget".into(),
            args: serde_json::json!({"key": "a"}),
            affected: 1,
            operator: "ada".into(),
        };
        ledger.audit(&entry).await.unwrap();
        assert_eq!(ledger.audit_log(None).await.unwrap(), [entry]);
        // ... and the job tables of version 3, and the columns of version 4.
        assert!(ledger.list_jobs(10).await.unwrap().is_empty());
        let conn = Connection::open(&path).unwrap();
        assert_eq!(kept_aside(&conn, "a"), (Some(2), Some(5)));
        assert_eq!(user_version(&conn), SCHEMA_VERSION);
    }

    #[tokio::test]
    async fn an_unreadable_row_is_corrupt_not_absent() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("ledger.db");
        let ledger = SqliteLedger::open(&path).unwrap();
        ledger.create(&record("a")).await.unwrap();
        Connection::open(&path)
            .unwrap()
            .execute("UPDATE ledger SET record = '{' WHERE key = 'a'", [])
            .unwrap();
        assert!(matches!(
            ledger.get("orders", "a").await,
            Err(LedgerError::Corrupt { .. })
        ));
    }
}
