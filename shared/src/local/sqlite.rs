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
//! | `lease_until` | INTEGER | lease expiry of the claim, ms since the epoch |
//! | `attempts` | INTEGER | failed attempts of the pending / claimed target |
//! | `last_error` | TEXT | the last error |
//! | `updated_at` | INTEGER | last write, ms since the epoch |
//! | `record` | TEXT | the whole [`Record`] as JSON |
//!
//! `record` is the source of truth; the other columns are derived from it on every write, so
//! a person can query the ledger with `sqlite3`:
//! `sqlite3 ledger.db "SELECT source_id, status, count(*) FROM ledger GROUP BY 1,2"`.
//! The schema version is `PRAGMA user_version`.
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

use crate::error::{LedgerError, Retry};
use crate::model::{Record, Target};
use crate::ports::{Ledger, LedgerWrite};

/// The schema this code reads and writes (`PRAGMA user_version`).
const SCHEMA_VERSION: i32 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS ledger (
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
CREATE INDEX IF NOT EXISTS ledger_by_status ON ledger (source_id, status);
";

const SELECT: &str = "SELECT record FROM ledger WHERE source_id = ?1 AND key = ?2";

const INSERT: &str = "INSERT INTO ledger
    (source_id, key, status, rev, version, rows, lease_until, attempts, last_error, updated_at, record)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";

const UPDATE: &str = "UPDATE ledger SET
    status = ?3, rev = ?4, version = ?5, rows = ?6, lease_until = ?7, attempts = ?8,
    last_error = ?9, updated_at = ?10, record = ?11
    WHERE source_id = ?1 AND key = ?2 AND rev = ?12";

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

/// Write `record`'s row with `sql` (`INSERT`, or `UPDATE` with `expected_rev` as `?12`);
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
            0 => {
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
    pub async fn list(&self, source_id: Option<&str>) -> Result<Vec<Record>, LedgerError> {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Committed, Status, VersionRef};

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
            keys(ledger.list(None).await.unwrap()),
            [
                ("clicks".into(), "a".into()),
                ("orders".into(), "a".into()),
                ("orders".into(), "b".into())
            ]
        );
        assert_eq!(
            keys(ledger.list(Some("orders")).await.unwrap()),
            [("orders".into(), "a".into()), ("orders".into(), "b".into())]
        );
        drop(ledger);

        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", 2)
            .unwrap();
        let e = SqliteLedger::open(&path).unwrap_err();
        assert!(e.to_string().contains("schema version 2"), "{e}");
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
