//! `status`: per source, from one read of its ledger records (`Ledger::list`): objects by
//! status (a claim whose lease has expired counts as `stuck`), rows and each sum column
//! over the committed versions (exact: integers and decimals in `i128`), the last commit,
//! the oldest object waiting (pending or failed) and the lag behind it, and the mode in force.

use std::collections::BTreeMap;
use std::process::ExitCode;

use serde::Serialize;
use tidemark::config::{Mode, Source};
use tidemark::model::{IgnoredFields, Record, Status};

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

/// Ignored fields `status --json` names per source: the ones with the most values.
pub const IGNORED_FIELDS_LISTED: usize = tidemark::convert::MAX_IGNORED_PATHS;

/// Ignored fields the `status` line names.
pub const IGNORED_FIELDS_SHOWN: usize = 5;

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
    /// Rows of the committed versions with values in the rescued column (counted in
    /// `totals`).
    pub rescued_rows: u64,
    /// Committed versions with rescued rows.
    pub objects_with_rescued: u64,
    /// The rescued column, for a source whose policy rescues (`on_unknown_field` or
    /// `on_bad_value` "rescue").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rescued_column: Option<String>,
    /// Values of fields not in the schema the committed versions dropped
    /// (`on_unknown_field: ignore`), naming the [`IGNORED_FIELDS_LISTED`] fields with the
    /// most values.
    pub ignored: IgnoredFields,
    /// Committed versions that dropped some.
    pub objects_with_ignored: u64,
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
    let (mut rescued_rows, mut objects_with_rescued) = (0, 0);
    let (mut ignored, mut objects_with_ignored) = (IgnoredFields::default(), 0);
    for r in records {
        *objects.entry(r.status.as_str()).or_default() += 1;
        if r.claim.as_ref().is_some_and(|c| c.lease_until <= now) {
            stuck += 1;
        }
        if let Some(c) = &r.committed {
            last_commit = last_commit.max(Some(c.committed_at));
            rejected_rows += c.rejected;
            objects_with_rejects += u64::from(c.rejected > 0);
            rescued_rows += c.rescued;
            objects_with_rescued += u64::from(c.rescued > 0);
            ignored.add(&c.ignored);
            objects_with_ignored += u64::from(!c.ignored.is_empty());
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
        rescued_rows,
        objects_with_rescued,
        rescued_column: {
            let spec = source.convert_spec(&source.doc.prefix);
            spec.rescues().then_some(spec.rescue_column)
        },
        ignored: ignored.trimmed(IGNORED_FIELDS_LISTED),
        objects_with_ignored,
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

/// The `status` lines of a source's rescued rows (for a source that rescues, or that has
/// some) and ignored values (when it has some, with the fields that held the most).
pub fn kept_aside_lines(s: &SourceStatus) -> Vec<String> {
    let mut lines = Vec::new();
    if s.rescued_column.is_some() || s.rescued_rows > 0 {
        lines.push(format!(
            "{}: {} rows with rescued values in {} objects ({}counted in ROWS)",
            s.source_id,
            s.rescued_rows,
            s.objects_with_rescued,
            s.rescued_column
                .as_ref()
                .map_or(String::new(), |c| format!("in column {c}, ")),
        ));
    }
    if !s.ignored.is_empty() {
        lines.push(format!(
            "{}: {} values ignored in {} objects (fields not in the schema, in no column): {}",
            s.source_id,
            s.ignored.values,
            s.objects_with_ignored,
            s.ignored.summary(IGNORED_FIELDS_SHOWN),
        ));
    }
    lines
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
        for line in kept_aside_lines(s) {
            writeln!(out, "{line}")?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::fixtures::{done, source};

    fn summary(source: &Source, records: &[Record]) -> SourceStatus {
        summarize(source, (Mode::Enable, ModeOrigin::Config), records, 10).unwrap()
    }

    #[test]
    fn rescued_rows_and_ignored_values_are_summed_over_the_commits() {
        let records = [
            done("in/a.json", 2, &[("userIdentity.extra", 4), ("tags", 1)], 0),
            done("in/b.json", 0, &[("tags", 2), ("resources[].x", 1)], 3),
            done("in/c.json", 1, &[], 0),
        ];
        let rescuing = source(r#","on_bad_value":"rescue""#);
        let s = summary(&rescuing, &records);
        assert_eq!((s.rescued_rows, s.objects_with_rescued), (3, 2));
        assert_eq!((s.ignored.values, s.objects_with_ignored), (11, 2));
        assert_eq!(s.rescued_column.as_deref(), Some("_rescued_data"));
        assert_eq!(
            kept_aside_lines(&s),
            [
                "trail: 3 rows with rescued values in 2 objects (in column _rescued_data, counted in ROWS)",
                "trail: 11 values ignored in 2 objects (fields not in the schema, in no column): \
                 userIdentity.extra (4), tags (3), resources[].x (1), 3 in other fields",
            ]
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["rescued_rows"], 3);
        assert_eq!(json["rescued_column"], "_rescued_data");
        assert_eq!(
            json["ignored"],
            serde_json::json!({"values": 11, "fields": {"userIdentity.extra": 4, "tags": 3, "resources[].x": 1}})
        );

        // A source that does not rescue and has nothing kept aside shows no line.
        let plain = source("");
        let s = summary(&plain, &[done("in/a.json", 0, &[], 0)]);
        assert_eq!(s.rescued_column, None);
        assert!(kept_aside_lines(&s).is_empty());
        // It shows what its commits hold all the same (a policy changed since).
        let s = summary(&plain, &[done("in/a.json", 1, &[], 2)]);
        assert_eq!(
            kept_aside_lines(&s),
            [
                "trail: 1 rows with rescued values in 1 objects (counted in ROWS)",
                "trail: 2 values ignored in 1 objects (fields not in the schema, in no column): \
                 2 in other fields",
            ]
        );
    }

    #[test]
    fn the_json_names_the_fields_with_the_most_values() {
        let records: Vec<Record> = (0..IGNORED_FIELDS_LISTED as u64 + 3)
            .map(|i| {
                done(
                    &format!("in/{i}.json"),
                    0,
                    &[(&format!("f{i:02}"), i + 1)],
                    0,
                )
            })
            .collect();
        let s = summary(&source(""), &records);
        assert_eq!(s.ignored.fields.len(), IGNORED_FIELDS_LISTED);
        assert!(!s.ignored.fields.contains_key("f00"), "the fewest values");
        assert_eq!(s.ignored.unnamed(), 1 + 2 + 3);
    }
}
