//! `status`: per source, from one read of its ledger records (`Ledger::list`): objects by
//! status (a claim whose lease has expired counts as `stuck`), rows and each sum column
//! over the committed versions (exact: integers and decimals in `i128`), the last commit,
//! the oldest object waiting (pending or failed) and the lag behind it, and the mode in force.

use std::collections::BTreeMap;
use std::process::ExitCode;

use serde::Serialize;
use tidemark::config::{Mode, Source};
use tidemark::model::{Record, Status};

use super::print_json;
use crate::backend::{Backend, ModeOrigin};
use crate::render::{Table, duration, when};
use crate::totals::{Totals, ledger_totals};
use crate::{Error, Out};

/// The statuses `status` counts, in display order.
pub const STATUSES: [Status; 7] = [
    Status::Done,
    Status::Deleted,
    Status::Pending,
    Status::Failed,
    Status::Quarantined,
    Status::Claimed,
    Status::Released,
];

/// The oldest object waiting to be processed.
#[derive(Debug, Clone, Serialize)]
pub struct Waiting {
    /// Its key.
    pub key: String,
    /// `pending` or `failed`.
    pub status: Status,
    /// When its record last moved (ms since the epoch).
    pub since: i64,
    /// Now minus `since`, ms.
    pub lag_ms: i64,
}

/// The status of one source.
#[derive(Debug, Clone, Serialize)]
pub struct SourceStatus {
    /// The source.
    pub source_id: String,
    /// The mode in force for the CLI.
    pub mode: Mode,
    /// Where it comes from.
    pub mode_origin: ModeOrigin,
    /// Records per status (every status, zeros included).
    pub objects: BTreeMap<&'static str, u64>,
    /// Claims whose lease has expired (a worker died or timed out; the next claim takes
    /// over); counted in `claimed` too.
    pub stuck: u64,
    /// Rows and sums over the committed versions.
    pub totals: Totals,
    /// The last commit (ms since the epoch).
    pub last_commit: Option<i64>,
    /// The oldest pending or failed object.
    pub oldest_waiting: Option<Waiting>,
    /// A source with bookmark keys: its mark and row counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bookmark: Option<BookmarkStatus>,
    /// Rows set aside by the committed versions (`on_bad_row: reject`; not in `totals`).
    pub rejected_rows: u64,
    /// Committed versions with a rejects file.
    pub objects_with_rejects: u64,
    /// Where the rejects files are: `s3://<output bucket>/<output prefix>_rejects/`, for a
    /// source with `on_bad_row: reject`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejects_at: Option<String>,
    /// Rows committed within the source's `freshness.max_silence`, against its minimum.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub freshness: Option<tidemark::reconcile::Freshness>,
}

/// The row-level bookmark of a source, from its lock record.
#[derive(Debug, Clone, Serialize)]
pub struct BookmarkStatus {
    /// Key columns.
    pub keys: Vec<String>,
    /// `ascending` or `descending`.
    pub order: tidemark::bookmark::KeyOrder,
    /// `write` or `drop`.
    pub late_rows: tidemark::bookmark::LatePolicy,
    /// The high-water mark, one typed string per key column (`None`: nothing emitted).
    pub mark: Option<Vec<String>>,
    /// Objects, emitted, late and re-exported (skipped) rows since the source began.
    pub counts: tidemark::model::BookmarkCounts,
    /// A worker holds the source's lock (until this time, ms since the epoch).
    pub locked_until: Option<i64>,
    /// An advance prepared but not applied yet: the object it belongs to.
    pub advance_pending: Option<String>,
}

impl SourceStatus {
    /// Records with this status.
    pub fn count(&self, status: Status) -> u64 {
        self.objects.get(status.as_str()).copied().unwrap_or(0)
    }
}

/// The status of `source` from its records, at `now`.
pub fn summarize(
    source: &Source,
    mode: (Mode, ModeOrigin),
    records: &[Record],
    now: i64,
) -> Result<SourceStatus, Error> {
    let mut objects: BTreeMap<&'static str, u64> =
        STATUSES.iter().map(|s| (s.as_str(), 0)).collect();
    let mut stuck = 0;
    let mut last_commit: Option<i64> = None;
    let mut oldest: Option<&Record> = None;
    let (mut rejected_rows, mut objects_with_rejects) = (0, 0);
    for r in records {
        *objects.entry(r.status.as_str()).or_default() += 1;
        if r.claim.as_ref().is_some_and(|c| c.lease_until <= now) {
            stuck += 1;
        }
        if let Some(c) = &r.committed {
            last_commit = last_commit.max(Some(c.committed_at));
            rejected_rows += c.rejected;
            objects_with_rejects += u64::from(c.rejected > 0);
        }
        if matches!(r.status, Status::Pending | Status::Failed)
            && oldest.is_none_or(|o| r.updated_at < o.updated_at)
        {
            oldest = Some(r);
        }
    }
    Ok(SourceStatus {
        source_id: source.id().to_string(),
        mode: mode.0,
        mode_origin: mode.1,
        objects,
        stuck,
        totals: ledger_totals(source, records)?,
        last_commit,
        oldest_waiting: oldest.map(|r| Waiting {
            key: r.key.clone(),
            status: r.status,
            since: r.updated_at,
            lag_ms: now - r.updated_at,
        }),
        bookmark: None,
        rejected_rows,
        objects_with_rejects,
        rejects_at: (source.doc.on_bad_row == tidemark::config::OnBadRow::Reject).then(|| {
            format!(
                "s3://{}/{}_rejects/",
                source.doc.output.bucket, source.doc.output.prefix
            )
        }),
        freshness: tidemark::reconcile::freshness_of(source, records, now),
    })
}

/// The bookmark status of `source`, if it has bookmark keys.
pub async fn bookmark_status(
    backend: &Backend,
    source: &Source,
) -> Result<Option<BookmarkStatus>, Error> {
    let Some(doc) = &source.doc.bookmark else {
        return Ok(None);
    };
    let lock = backend
        .pipeline
        .ledger
        .get(
            &tidemark::bookmark::lock_source_id(source.id()),
            tidemark::bookmark::LOCK_KEY,
        )
        .await?;
    let state = lock
        .as_ref()
        .and_then(|r| r.bookmark.clone())
        .unwrap_or_default();
    Ok(Some(BookmarkStatus {
        keys: doc.keys.clone(),
        order: doc.order,
        late_rows: doc.late_rows,
        mark: state.mark,
        counts: state.counts,
        locked_until: lock
            .as_ref()
            .and_then(|r| r.claim.as_ref())
            .map(|c| c.lease_until),
        advance_pending: state.advance.map(|a| a.key),
    }))
}

/// The status of each source (or one).
pub async fn status(backend: &Backend, source: Option<&str>) -> Result<Vec<SourceStatus>, Error> {
    let mut all = Vec::new();
    for configured in backend.sources(source)? {
        let (effective, origin) = backend.effective(configured).await?;
        let records = backend.pipeline.ledger.list(configured.id()).await?;
        let mut summary = summarize(
            configured,
            (effective.doc.mode, origin),
            &records,
            backend.now(),
        )?;
        summary.bookmark = bookmark_status(backend, configured).await?;
        all.push(summary);
    }
    Ok(all)
}

/// Ledger state of a source id the document does not have: a source renamed or removed.
#[derive(Debug, Clone, Serialize)]
pub struct Orphan {
    /// The id.
    pub source_id: String,
    /// Its records.
    pub records: u64,
    /// Records per status (only the statuses present).
    pub objects: BTreeMap<&'static str, u64>,
    /// Rows over its committed versions.
    pub rows: u64,
}

/// The source ids the ledger holds records of that the document does not name (a row-level
/// bookmark's lock id counts as its source's).
pub async fn orphans(backend: &Backend) -> Result<Vec<Orphan>, Error> {
    let ledger = &backend.pipeline.ledger;
    let ids = backend.config().orphaned_ids(ledger.source_ids().await?);
    let mut found = Vec::new();
    for id in ids {
        let records = ledger.list(&id).await?;
        let lock = ledger
            .list(&tidemark::bookmark::lock_source_id(&id))
            .await?;
        if records.is_empty() && lock.is_empty() {
            continue; // registered, but nothing left (a removal that did not unregister)
        }
        let mut objects = BTreeMap::new();
        let mut rows = 0;
        for r in &records {
            *objects.entry(r.status.as_str()).or_insert(0) += 1;
            rows += r.committed.as_ref().map_or(0, |c| c.rows);
        }
        found.push(Orphan {
            source_id: id,
            records: (records.len() + lock.len()) as u64,
            objects,
            rows,
        });
    }
    Ok(found)
}

/// `tidemark status`.
pub async fn status_command(
    backend: &Backend,
    source: Option<String>,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    let statuses = status(backend, source.as_deref()).await?;
    let tables = match backend.tables {
        Some(_) => super::table::checks(backend, source.as_deref()).await?,
        None => Vec::new(),
    };
    let orphaned = match source {
        Some(_) => Vec::new(),
        None => orphans(backend).await?,
    };
    if json {
        print_json(
            out,
            &serde_json::json!({ "sources": statuses, "tables": tables, "orphaned": orphaned }),
        )?;
    } else {
        print_status(&statuses, backend, out)?;
        super::table::print_checks(&tables, out)?;
        print_orphans(&orphaned, out)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The orphaned source ids, with what to do about them.
pub fn print_orphans(orphaned: &[Orphan], out: Out<'_>) -> Result<(), Error> {
    for o in orphaned {
        let objects: Vec<String> = o.objects.iter().map(|(s, n)| format!("{n} {s}")).collect();
        writeln!(
            out,
            "ORPHANED: {}: not in the sources document, the ledger holds {} records ({}), {} rows: \
             if it was renamed, `tidemark rename-source {} NEW` moves them (no reprocessing)",
            o.source_id,
            o.records,
            objects.join(", "),
            o.rows,
            o.source_id,
        )?;
    }
    Ok(())
}

/// The LAG cell: how long the oldest waiting object has waited, and, for a source with a
/// `freshness` setting that it does not meet, how long it has been silent.
fn lag(s: &SourceStatus, now: i64) -> String {
    let waiting = s.oldest_waiting.as_ref().map(|w| duration(w.lag_ms));
    let silent = s.freshness.as_ref().filter(|f| f.breached).map(|f| {
        let what = match (f.rows, f.last_commit_ms) {
            (0, Some(t)) => format!("silent {}", duration(now - t)),
            (0, None) => "silent, no commit".to_string(),
            _ => "too few rows".to_string(),
        };
        format!(
            "{what}: {} rows in {} (min {})",
            f.rows,
            duration(f.max_silence_ms),
            f.min_rows
        )
    });
    match (waiting, silent) {
        (None, None) => "-".into(),
        (Some(w), None) => w,
        (None, Some(s)) => s,
        (Some(w), Some(s)) => format!("{w}; {s}"),
    }
}

/// The human form of `status`: one table of counts, then sums and lag per source.
pub fn print_status(
    statuses: &[SourceStatus],
    backend: &Backend,
    out: Out<'_>,
) -> Result<(), Error> {
    let now = backend.now();
    let mut t = Table::new(&[
        "SOURCE",
        "MODE",
        ">DONE",
        ">DELETED",
        ">PENDING",
        ">FAILED",
        ">QUARANTINED",
        ">CLAIMED",
        ">STUCK",
        ">ROWS",
        "LAST COMMIT",
        "LAG",
    ]);
    for s in statuses {
        let mode = match s.mode_origin {
            ModeOrigin::Config => s.mode.as_str().to_string(),
            ModeOrigin::Override => format!("{}*", s.mode.as_str()),
        };
        t.row(vec![
            s.source_id.clone(),
            mode,
            s.count(Status::Done).to_string(),
            s.count(Status::Deleted).to_string(),
            s.count(Status::Pending).to_string(),
            s.count(Status::Failed).to_string(),
            s.count(Status::Quarantined).to_string(),
            s.count(Status::Claimed).to_string(),
            s.stuck.to_string(),
            s.totals.rows.to_string(),
            s.last_commit.map_or("-".into(), |t| {
                format!("{} ({} ago)", when(t), duration(now - t))
            }),
            lag(s, now),
        ]);
    }
    write!(out, "{}", t.render())?;
    if statuses
        .iter()
        .any(|s| s.mode_origin == ModeOrigin::Override)
    {
        writeln!(out, "(* mode set by `tidemark mode`)")?;
    }
    let mut sums = Table::new(&["SOURCE", "COLUMN", ">SUM (committed)"]);
    for s in statuses {
        for (column, value) in &s.totals.sums {
            sums.row(vec![s.source_id.clone(), column.clone(), value.to_string()]);
        }
    }
    if !sums.is_empty() {
        writeln!(out)?;
        write!(out, "{}", sums.render())?;
    }
    for s in statuses {
        if s.rejects_at.is_some() || s.rejected_rows > 0 {
            writeln!(
                out,
                "{}: {} rows rejected in {} objects (bad rows, not in ROWS){}",
                s.source_id,
                s.rejected_rows,
                s.objects_with_rejects,
                s.rejects_at
                    .as_ref()
                    .map_or(String::new(), |at| format!("; rejects files under {at}")),
            )?;
        }
        if let Some(b) = &s.bookmark {
            let mark = b.mark.as_ref().map_or("-".to_string(), |m| {
                b.keys
                    .iter()
                    .zip(m)
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            });
            let late = match b.late_rows {
                tidemark::bookmark::LatePolicy::Write => "written to _late/",
                tidemark::bookmark::LatePolicy::Drop => "dropped",
            };
            writeln!(
                out,
                "{}: bookmark ({}) mark {mark}; rows emitted {}, LATE {} ({late}), re-exported {}; {} objects{}",
                s.source_id,
                match b.order {
                    tidemark::bookmark::KeyOrder::Ascending => "ascending",
                    tidemark::bookmark::KeyOrder::Descending => "descending",
                },
                b.counts.emitted,
                b.counts.late,
                b.counts.skipped,
                b.counts.objects,
                b.advance_pending
                    .as_ref()
                    .map_or(String::new(), |k| format!("; advance of {k} pending")),
            )?;
        }
        if let Some(w) = &s.oldest_waiting {
            writeln!(
                out,
                "{}: oldest waiting: {} ({}, since {})",
                s.source_id,
                w.key,
                w.status.as_str(),
                when(w.since)
            )?;
        }
    }
    Ok(())
}
