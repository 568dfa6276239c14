//! Backfill and replay: list a source (or a prefix and a last-modified range of it) and drive
//! every unseen or changed object through the same per-object path as ingest. Bounded per
//! call (Glue's boundedFiles / boundedSize, and the invocation deadline); resumable from a
//! continuation (the last key handled), so a large backfill is a chain of short calls.
//!
//! `replay` re-processes the range without advancing the ledger (outputs are replaced by
//! key); `stale_config` re-processes exactly the objects whose commit was made under another
//! configuration fingerprint than the source's current one (a changed schema, format or
//! output), advancing the ledger; `dry_run` only says what would be processed.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::config::{Config, Mode, Source};
use crate::error::{ProcessError, Result};
use crate::model::{Record, Status, Target, VersionRef};
use crate::process::{Outcome, Pipeline, RunContext};
use crate::protocol::Skip;

/// A backfill request (the backfill function's manual-invoke payload).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// The source id.
    pub source: String,
    /// Only keys under this prefix (a full key prefix inside the source's prefix).
    #[serde(default)]
    pub prefix: Option<String>,
    /// Only objects last modified at or after this (RFC 3339).
    #[serde(default)]
    pub since: Option<String>,
    /// Only objects last modified before this (RFC 3339).
    #[serde(default)]
    pub until: Option<String>,
    /// Stop after this many objects were taken (processed or failed).
    #[serde(default)]
    pub max_objects: Option<u64>,
    /// Stop after this many source bytes were taken.
    #[serde(default)]
    pub max_bytes: Option<u64>,
    /// Only report what would be processed.
    #[serde(default)]
    pub dry_run: bool,
    /// Re-process every object in range without advancing the ledger.
    #[serde(default)]
    pub replay: bool,
    /// Only objects done for their current version under another configuration than the
    /// source's current one: process them again (outputs replaced, ledger advanced).
    #[serde(default)]
    pub stale_config: bool,
    /// Resume after this key (from a previous response).
    #[serde(default)]
    pub continuation: Option<String>,
}

/// What one backfill call did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The source id.
    pub source: String,
    /// Objects listed in range.
    pub listed: u64,
    /// Objects taken (processed, or failed, or would be processed in a dry run).
    pub taken: u64,
    /// Objects processed (committed, or replayed).
    pub processed: u64,
    /// Objects already done for their current version (not counted against the bounds); with
    /// `stale_config`, those done under the current configuration. (Objects not done at all
    /// are listed but not taken by `stale_config`: a plain backfill takes them.)
    pub already_done: u64,
    /// Objects skipped by the protocol while taken (in flight elsewhere, quarantined).
    pub skipped: u64,
    /// Objects that failed (recorded in the ledger; retried by the next call or ingest, unless
    /// this failure quarantined them).
    pub failed: u64,
    /// Rows written.
    pub rows: u64,
    /// Source bytes taken.
    pub bytes: u64,
    /// Keys that would be processed (dry run; first 1,000).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub would_process: Vec<String>,
    /// Errors, naming the object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// True when the range is finished; otherwise call again with `continuation`.
    pub done: bool,
    /// Where to resume when not done (`None`: from the start of the range).
    pub continuation: Option<String>,
}

/// A request that cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// No such source.
    #[error("no source {0:?} in the configuration")]
    UnknownSource(String),
    /// A field is wrong.
    #[error("{field}: {message}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Processing failed outside any one object (listing, the ledger).
    #[error(transparent)]
    Process(#[from] ProcessError),
}

fn parse_time(field: &'static str, s: &Option<String>) -> Result<Option<i64>, RequestError> {
    s.as_deref()
        .map(|t| {
            chrono::DateTime::parse_from_rfc3339(t)
                .map(|d| d.timestamp_millis())
                .map_err(|e| RequestError::Invalid {
                    field,
                    message: format!("{t:?} is not an RFC 3339 time: {e}"),
                })
        })
        .transpose()
}

/// Serve one backfill call: take objects in key order until a bound, the deadline
/// (`stop_at_ms`) or the end of the range.
pub async fn run(
    p: &Pipeline,
    config: &Config,
    req: &Request,
    ctx: &RunContext,
    stop_at_ms: i64,
) -> Result<Response, RequestError> {
    let source = config
        .source(&req.source)
        .ok_or_else(|| RequestError::UnknownSource(req.source.clone()))?;
    let prefix = match &req.prefix {
        None => source.doc.prefix.clone(),
        Some(p) if p.starts_with(&source.doc.prefix) => p.clone(),
        Some(p) => {
            return Err(RequestError::Invalid {
                field: "prefix",
                message: format!(
                    "{p:?} is not inside the source prefix {:?}",
                    source.doc.prefix
                ),
            });
        }
    };
    if req.stale_config && req.replay {
        return Err(RequestError::Invalid {
            field: "stale_config",
            message:
                "cannot be combined with replay (replay re-processes everything without the ledger)"
                    .into(),
        });
    }
    if req.max_objects == Some(0) || req.max_bytes == Some(0) {
        return Err(RequestError::Invalid {
            field: "max_objects",
            message: "bounds must be at least 1".into(),
        });
    }
    let since = parse_time("since", &req.since)?;
    let until = parse_time("until", &req.until)?;
    let records: HashMap<String, Record> = p
        .ledger
        .list(source.id())
        .await
        .map_err(ProcessError::from)?
        .into_iter()
        .map(|r| (r.key.clone(), r))
        .collect();

    let mut resp = Response {
        source: source.id().to_string(),
        ..Response::default()
    };
    let bucket = &source.doc.bucket;
    let mut after = req.continuation.clone();
    let mut token: Option<String> = None;
    'pages: loop {
        let page = match &token {
            Some(t) => p.store.list(bucket, &prefix, Some(t)).await,
            None => match &after {
                Some(a) => p.store.list_after(bucket, &prefix, a).await,
                None => p.store.list(bucket, &prefix, None).await,
            },
        }
        .map_err(ProcessError::from)?;
        for o in page.objects {
            let in_range = source.matches(bucket, &o.key)
                && since.is_none_or(|s| o.last_modified >= s)
                && until.is_none_or(|u| o.last_modified < u);
            if !in_range {
                continue;
            }
            resp.listed += 1;
            let record = records.get(&o.key);
            let done = record.is_some_and(|r| done_for(r, &o.etag));
            let wanted = if req.stale_config {
                done && record.is_some_and(|r| committed_under_other(r, &source.fingerprint))
            } else {
                !done || req.replay
            };
            if !wanted {
                resp.already_done += u64::from(done);
                after = Some(o.key.clone());
                continue;
            }
            let bounded = req.max_objects.is_some_and(|m| resp.taken >= m)
                || req.max_bytes.is_some_and(|m| resp.bytes >= m)
                || p.clock.now_ms() >= stop_at_ms;
            if bounded {
                resp.continuation = after;
                return Ok(resp);
            }
            resp.taken += 1;
            resp.bytes += o.size;
            after = Some(o.key.clone());
            if req.dry_run {
                if resp.would_process.len() < 1000 {
                    resp.would_process.push(o.key.clone());
                }
                continue;
            }
            let target = Target::Version(VersionRef {
                version: o.etag.clone(),
                version_id: o.version_id.clone(),
                etag: Some(o.etag.clone()),
                sequencer: None,
                size: Some(o.size),
            });
            let outcome = if req.replay {
                replay_one(p, source, &o.key, target, ctx).await
            } else if req.stale_config {
                p.refresh(source, &o.key, target, ctx).await
            } else {
                p.process(source, &o.key, target, ctx).await
            };
            match outcome {
                Ok(Outcome::Processed { rows, .. } | Outcome::Untracked { rows }) => {
                    resp.processed += 1;
                    resp.rows += rows;
                }
                Ok(Outcome::Skipped(Skip::Duplicate | Skip::Stale)) => resp.already_done += 1,
                // This attempt used the last one: a failure, with its error, like the others.
                Ok(Outcome::Quarantined { error }) => {
                    resp.failed += 1;
                    resp.errors.push(error);
                }
                Ok(_) => resp.skipped += 1,
                Err(e) => {
                    resp.failed += 1;
                    resp.errors.push(e.to_string());
                }
            }
        }
        match page.next {
            Some(next) => token = Some(next),
            None => break 'pages,
        }
    }
    resp.done = true;
    Ok(resp)
}

/// Process one object with the ledger untouched (Glue's `disable`).
async fn replay_one(
    p: &Pipeline,
    source: &Source,
    key: &str,
    target: Target,
    ctx: &RunContext,
) -> Result<Outcome> {
    let mut untracked = source.clone();
    untracked.doc.mode = Mode::Disable;
    p.process(&untracked, key, target, ctx).await
}

fn committed_under_other(r: &Record, fingerprint: &str) -> bool {
    r.committed
        .as_ref()
        .is_some_and(|c| c.config_fp != fingerprint)
}

fn done_for(r: &Record, etag: &str) -> bool {
    r.status == Status::Done
        && matches!(
            r.committed.as_ref().map(|c| &c.target),
            Some(Target::Version(v)) if v.etag.as_deref() == Some(etag)
        )
}
