//! The per-object path of a source with row-level bookmark keys (see [`crate::bookmark`]).
//!
//! The object is claimed as usual; then, holding the source's lock (a ledger record, one
//! holder at a time), the version is read pinned to its ETag, its rows are classified
//! against the mark and the index of accounted-for keys, the emitted rows are written to a
//! per-version output, the late rows (policy `write`) to `<output prefix>_late/…`, and the
//! new index to `<output prefix>_bookmark/…`; the advance is prepared on the lock record, the
//! object committed (the decision point), the advance applied and the lock released.
//!
//! Outputs are per version (`<relative key>.<16 hex>.parquet`): a later version of the same
//! key emits only the rows no earlier object emitted, so the outputs of earlier versions are
//! kept (the commit lists them all, and its rows and sums are theirs added up) rather than
//! replaced: an overwrite never loses rows emitted before.

use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use super::*;
use crate::bookmark::{
    self, Index, LOCK_KEY, LockDecision, LockRequest, RowFilter, Settlement, key_columns, parse_key,
};
use crate::convert::SumValue;
use crate::model::{Advance, BookmarkState, IgnoredFields};
use crate::schema::ColumnType;

/// Real time a worker waits for the source's lock at least…
const LOCK_WAIT_MIN: Duration = Duration::from_secs(5);
/// …and at most (otherwise half of what is left before its deadline).
const LOCK_WAIT_MAX: Duration = Duration::from_secs(120);
/// Longest pause between two looks at the lock.
const LOCK_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// Refuse `what` for a source with bookmark keys.
pub(super) fn refuse(source: &Source, what: &str) -> Result<()> {
    if source.doc.bookmark.is_some() {
        return Err(ProcessError::Unsupported {
            source_id: source.id().to_string(),
            message: format!(
                "{what} is not available for a source with bookmark keys: it would emit rows \
                 the mark has already accounted for"
            ),
        });
    }
    Ok(())
}

/// The output key of one version of `key`: `<output key without .parquet>.<hash>.parquet`.
pub fn versioned_output_key(source: &Source, key: &str, version: &str) -> String {
    let base = source.output_key(key);
    let stem = base.strip_suffix(".parquet").unwrap_or(&base);
    format!("{stem}.{}.parquet", bookmark::short_hash(&[key, version]))
}

/// The late-rows output of a version: the versioned output key under `<prefix>_late/`.
pub fn late_output_key(source: &Source, key: &str, version: &str) -> String {
    let out = versioned_output_key(source, key, version);
    let prefix = &source.doc.output.prefix;
    let rest = out.strip_prefix(prefix.as_str()).unwrap_or(&out);
    format!("{prefix}_late/{rest}")
}

/// The index object written with a version by the holder of lock token `lock_token`: one
/// name per attempt, so no attempt can overwrite the index the lock record refers to (even
/// for a key deleted and uploaded again with the same bytes, hence the same version).
pub fn index_key(source: &Source, key: &str, version: &str, lock_token: &str) -> String {
    format!(
        "{}_bookmark/index-{}.txt.zst",
        source.doc.output.prefix,
        bookmark::short_hash(&[key, version, lock_token])
    )
}

/// The source's lock, held.
struct Held {
    record: Record,
    token: String,
    /// An advance is on the lock record: only its settlement may remove it.
    prepared: bool,
}

enum KeyedDone {
    Committed {
        after: Box<Record>,
        outcome: Outcome,
    },
    Release(String),
}

impl Pipeline {
    /// Process `claimed` (a version) of `key` of a source with bookmark keys; the object's
    /// claim `token` is ours. Returns the object's record after, and the outcome, as the
    /// unkeyed path does.
    pub(super) async fn process_keyed(
        &self,
        source: &Source,
        key: &str,
        record: Record,
        claimed: &Target,
        token: &str,
        ctx: &RunContext,
    ) -> Result<(Record, Result<Outcome>)> {
        let work = self
            .keyed_work(source, key, &record, claimed, token, ctx)
            .await;
        match work {
            Ok(KeyedDone::Committed { after, outcome }) => Ok((*after, Ok(outcome))),
            Ok(KeyedDone::Release(note)) => {
                let after = self
                    .release_claim(source, key, record, token, &note)
                    .await?;
                Ok((after, Ok(Outcome::NotCurrent)))
            }
            Err(e @ ProcessError::Crashed(_)) => Err(e),
            Err(error) => self.fail_claim(source, key, record, token, error).await,
        }
    }

    async fn keyed_work(
        &self,
        source: &Source,
        key: &str,
        record: &Record,
        claimed: &Target,
        token: &str,
        ctx: &RunContext,
    ) -> Result<KeyedDone> {
        self.faults.check(Step::AfterClaim, key)?;
        let Target::Version(version) = claimed else {
            return Err(ProcessError::Internal("a keyed delete has no rows".into()));
        };
        let mut held = self.take_lock(source, key, claimed, ctx).await?;
        let result = self
            .keyed_locked(source, key, record, version, token, ctx, &mut held)
            .await;
        let crashed = matches!(result, Err(ProcessError::Crashed(_)));
        let release = match &result {
            Ok(KeyedDone::Release(note)) => Some(note.clone()),
            Err(e) if !crashed && !held.prepared => Some(format!("not advanced: {e}")),
            _ => None,
        };
        if let Some(note) = release {
            // Only while our lease runs: after it, the next holder owns these names.
            let ours = held
                .record
                .claim
                .as_ref()
                .is_some_and(|c| c.lease_until > self.clock.now_ms());
            if result.is_err()
                && ours
                && let Err(e) = self
                    .remove_uncommitted(source, key, &version.version, &held.token)
                    .await
            {
                warn!(source_id = source.id(), key, error = %e, "uncommitted outputs left for the next holder to remove");
            }
            let now = self.clock.now_ms();
            let t = held.token.clone();
            if let Err(e) = self
                .transition(source, key, held.record, |r| {
                    bookmark::abandon(r, &t, &note, now)
                })
                .await
            {
                warn!(source_id = source.id(), key, error = %e, "the bookmark lock could not be released; it expires with its lease");
            }
        }
        result
    }

    #[allow(clippy::too_many_arguments)]
    async fn keyed_locked(
        &self,
        source: &Source,
        key: &str,
        record: &Record,
        version: &VersionRef,
        token: &str,
        ctx: &RunContext,
        held: &mut Held,
    ) -> Result<KeyedDone> {
        let doc = source
            .doc
            .bookmark
            .as_ref()
            .ok_or_else(|| ProcessError::Internal("no bookmark keys".into()))?;
        let broken = |message: String| ProcessError::Bookmark {
            source_id: source.id().to_string(),
            message,
        };
        let state = held.record.bookmark.clone().unwrap_or_default();
        let cols = key_columns(doc, &source.schema);
        let mark = state
            .mark
            .as_ref()
            .map(|m| parse_key(m, &cols))
            .transpose()
            .map_err(broken)?;
        let index = match &state.index {
            None => Index::new(&cols),
            Some(r) => {
                let body = match self.store.get(&r.bucket, &r.key, Some(&r.etag)).await? {
                    GetOutcome::Found { mut body, .. } => {
                        let mut bytes = Vec::new();
                        body.read_to_end(&mut bytes).await.map_err(|e| {
                            ProcessError::Store(StoreError {
                                op: "GetObject",
                                bucket: r.bucket.clone(),
                                key: r.key.clone(),
                                message: e.to_string(),
                                retry: Retry::Transient,
                            })
                        })?;
                        bytes
                    }
                    _ => {
                        return Err(broken(format!(
                            "the index s3://{}/{} (ETag {}) is missing or was replaced",
                            r.bucket, r.key, r.etag
                        )));
                    }
                };
                Index::decode(&body, &cols)
                    .map_err(|m| broken(format!("the index s3://{}/{}: {m}", r.bucket, r.key)))?
            }
        };
        let filter = Box::new(RowFilter::new(doc, &source.schema, mark, index));

        // The version, pinned to its ETag (as `convert_version` reads it).
        let bucket = &source.doc.bucket;
        let Some((version, body, object)) = self.get_pinned(source, key, version).await? else {
            return Ok(KeyedDone::Release(
                "not current: the object changed or was deleted after the event".into(),
            ));
        };

        let out_bucket = source.doc.output.bucket.clone();
        let out_key = versioned_output_key(source, key, &version.version);
        let metadata = output_metadata(source, key, &version, ctx);
        let previous = record
            .committed
            .as_ref()
            .filter(|c| matches!(c.target, Target::Version(_)));
        let expected = previous
            .and_then(|c| c.outputs.iter().find(|o| o.key == out_key))
            .map(|o| o.etag.clone());
        let guard = super::Guard {
            expected,
            version: &version,
            untracked: None,
        };
        let (stats, etag, filter) = self
            .convert_and_upload_filtered(
                body,
                source.convert_spec_for(object),
                (bucket, key),
                (&out_bucket, &out_key),
                &metadata,
                &guard,
                Some(filter),
                self.stall_limit(ctx),
            )
            .await?;
        let mut filter = filter.ok_or_else(|| ProcessError::Internal("filter lost".into()))?;
        log_kept_aside(source.id(), key, &stats);
        self.faults.check(Step::AfterOutputPut, key)?;

        let late_output = match filter.late.take() {
            Some(bytes) => {
                let late_key = late_output_key(source, key, &version.version);
                let etag = self
                    .put_over(&out_bucket, &late_key, Bytes::from(bytes), &metadata)
                    .await?;
                Some(OutputRef {
                    bucket: out_bucket.clone(),
                    key: late_key,
                    etag,
                    ..OutputRef::default()
                })
            }
            None => None,
        };
        let index_bytes = filter
            .index
            .encode()
            .map_err(|m| ProcessError::Internal(format!("encoding the bookmark index: {m}")))?;
        let index_key = index_key(source, key, &version.version, &held.token);
        let index_etag = self
            .put_over(&out_bucket, &index_key, Bytes::from(index_bytes), &metadata)
            .await?;
        let output = OutputRef {
            bucket: out_bucket.clone(),
            key: out_key,
            etag,
            ..OutputRef::default()
        };
        let now = self.clock.now_ms();
        let advance = Advance {
            key: key.to_string(),
            version: version.version.clone(),
            object_token: token.to_string(),
            run_id: ctx.run_id.clone(),
            output: output.clone(),
            mark: filter.rendered_mark(),
            index: OutputRef {
                bucket: out_bucket.clone(),
                key: index_key,
                etag: index_etag,
                ..OutputRef::default()
            },
            delta: filter.counts,
            at: now,
        };
        let lock_token = held.token.clone();
        held.record = self
            .transition(source, key, held.record.clone(), |r| {
                bookmark::prepare(r, &lock_token, advance.clone(), now)
            })
            .await?;
        held.prepared = true;
        self.faults.check(Step::BeforeCommit, key)?;

        // The commit: this version's output added to those of earlier versions of the key.
        let mut outputs: Vec<OutputRef> = previous
            .map(|c| c.outputs.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|o| o.key != output.key)
            .collect();
        outputs.push(output.clone());
        let mut sums: BTreeMap<String, String> = BTreeMap::new();
        for (column, sum) in &stats.sums {
            let ty = source
                .schema
                .field_with_name(column)
                .ok()
                .and_then(|f| ColumnType::from_arrow(f.data_type()));
            let before = previous
                .and_then(|c| c.sums.get(column))
                .zip(ty)
                .and_then(|(s, ty)| SumValue::parse_for(&ty, s).ok());
            let total = before.map_or(*sum, |b| b.plus(sum));
            sums.insert(column.clone(), total.to_string());
        }
        // Like rows, the counts of every version whose output the commit lists.
        let mut ignored = previous.map(|c| c.ignored.clone()).unwrap_or_default();
        ignored.add(&IgnoredFields::from(&stats.ignored));
        let committed = Committed {
            target: Target::Version(version.clone()),
            rows: previous.map_or(0, |c| c.rows) + stats.rows,
            sums,
            outputs,
            rejected: 0,
            rejects: None,
            rescued: previous.map_or(0, |c| c.rescued) + stats.rescued_rows,
            ignored: ignored.trimmed(crate::convert::MAX_IGNORED_PATHS),
            config_fp: source.fingerprint.clone(),
            committed_at: now,
            run_id: ctx.run_id.clone(),
        };
        let object_state = BookmarkState {
            mark: advance.mark.clone(),
            counts: advance.delta,
            index: None,
            late_output,
            advance: None,
            holder: None,
        };
        let max = source.doc.max_attempts;
        let committing = self
            .transition(source, key, record.clone(), |r| {
                protocol::commit(r, token, committed.clone(), now, max).map(|mut next| {
                    next.bookmark = Some(object_state.clone());
                    next
                })
            })
            .await;
        let after = match committing {
            Ok(after) => after,
            Err(error) => {
                // Did the commit land anyway (a write whose answer was lost)? Settle as a
                // later taker would; if we cannot tell, leave the advance to that taker.
                let Ok(object) = self.ledger.get(source.id(), key).await else {
                    return Err(error);
                };
                match bookmark::settle(&advance, object.as_ref(), now) {
                    Settlement::Apply => object.ok_or(error)?,
                    _ => {
                        // Not committed, and we will not commit: give the lock back.
                        let _ = self
                            .transition(source, key, held.record.clone(), |r| {
                                bookmark::abandon(r, &lock_token, "the commit failed", now)
                            })
                            .await;
                        return Err(error);
                    }
                }
            }
        };
        self.faults.check(Step::AfterCommit, key)?;
        let old_index = state.index.clone();
        match self
            .transition(source, key, held.record.clone(), |r| {
                bookmark::finish(r, &lock_token, self.clock.now_ms())
            })
            .await
        {
            Ok(_) => {
                if let Some(old) = old_index.filter(|o| o.key != advance.index.key) {
                    let _ = self
                        .store
                        .delete(&old.bucket, &old.key, Some(&old.etag))
                        .await;
                }
            }
            // Committed all the same: whoever takes the lock next applies the advance.
            Err(e) => {
                warn!(source_id = source.id(), key, error = %e, "bookmark advance left for the next holder")
            }
        }
        info!(
            source_id = source.id(),
            key,
            emitted = advance.delta.emitted,
            late = advance.delta.late,
            skipped = advance.delta.skipped,
            "bookmark advanced"
        );
        if advance.delta.late > 0 {
            warn!(
                source_id = source.id(),
                key,
                late = advance.delta.late,
                "late rows: keys at or below the mark that were never emitted"
            );
        }
        Ok(KeyedDone::Committed {
            after: Box::new(after),
            outcome: Outcome::Processed {
                version: version.version.clone(),
                rows: stats.rows,
                rejected: 0,
                rescued: stats.rescued_rows,
                ignored: stats.ignored.values,
                outputs: vec![output],
            },
        })
    }

    /// Take the source's lock, settling an advance an expired holder left; wait (polling
    /// with backoff) while another worker holds it, at most half the time left before the
    /// deadline (between 5 s and 2 min of real time), then fail transiently.
    async fn take_lock(
        &self,
        source: &Source,
        key: &str,
        claimed: &Target,
        ctx: &RunContext,
    ) -> Result<Held> {
        let lock_id = bookmark::lock_source_id(source.id());
        let token = uuid::Uuid::new_v4().to_string();
        let started = Instant::now();
        let left = u64::try_from(ctx.deadline_ms - self.clock.now_ms()).unwrap_or(0) / 2;
        let budget = Duration::from_millis(left).clamp(LOCK_WAIT_MIN, LOCK_WAIT_MAX);
        let mut backoff = Duration::from_millis(10);
        let mut current = self.ledger.get(&lock_id, LOCK_KEY).await?;
        loop {
            let mut stale_index: Option<OutputRef> = None;
            let now = self.clock.now_ms();
            let req = LockRequest {
                source_id: source.id().to_string(),
                token: token.clone(),
                key: key.to_string(),
                target: claimed.clone(),
                run_id: ctx.run_id.clone(),
                now,
                lease_until: ctx.deadline_ms.max(now) + self.settings.lease_margin_ms,
            };
            let (write, busy_until, cleanup) = match bookmark::decide_lock(current.as_ref(), &req) {
                LockDecision::Take(record) => {
                    let gone = current.as_ref().and_then(|c| bookmark::leftover(c, now));
                    (Some(*record), 0, gone)
                }
                LockDecision::Busy { until } => (None, until, None),
                LockDecision::Settle(advance) => {
                    let object = self.ledger.get(source.id(), &advance.key).await?;
                    match bookmark::settle(&advance, object.as_ref(), now) {
                        Settlement::Wait { until } => (None, until, None),
                        Settlement::Fence { fence } => {
                            let rev = object.as_ref().map_or(0, |o| o.rev);
                            // Either way, look again: fenced, or the holder moved first.
                            self.ledger.replace(&fence, rev).await?;
                            continue;
                        }
                        s => {
                            let apply = s == Settlement::Apply;
                            let lock = current
                                .as_ref()
                                .ok_or_else(|| ProcessError::Internal("lock vanished".into()))?;
                            let old = lock.bookmark.as_ref().and_then(|b| b.index.clone());
                            // The index that is no longer referenced once this is written.
                            let dropped = if apply {
                                old.clone()
                            } else {
                                Some(advance.index.clone())
                            };
                            let keep = if apply {
                                Some(advance.index.key.clone())
                            } else {
                                old.map(|o| o.key)
                            };
                            stale_index = dropped.filter(|d| Some(&d.key) != keep.as_ref());
                            info!(source_id = source.id(), key = %advance.key, run = %advance.run_id, applied = apply, "settled the bookmark advance of an expired holder");
                            // A discarded advance's outputs were never committed.
                            let gone =
                                (!apply).then(|| (advance.key.clone(), advance.version.clone()));
                            (Some(bookmark::resolved(lock, apply, &req)), 0, gone)
                        }
                    }
                }
            };
            if let Some(record) = write {
                let written = match current.as_ref() {
                    None => self.ledger.create(&record).await?,
                    Some(c) => self.ledger.replace(&record, c.rev).await?,
                };
                match written {
                    LedgerWrite::Written => {
                        if let Some(d) = stale_index.take() {
                            let _ = self.store.delete(&d.bucket, &d.key, Some(&d.etag)).await;
                        }
                        let dead = current.as_ref().and_then(|c| c.claim.as_ref());
                        if let (Some((k, v)), Some(dead)) = (cleanup, dead) {
                            info!(source_id = source.id(), key = %k, version = %v, "removing the uncommitted outputs of an expired holder");
                            self.remove_uncommitted(source, &k, &v, &dead.token).await?;
                        }
                        return Ok(Held {
                            record,
                            token,
                            prepared: false,
                        });
                    }
                    LedgerWrite::Conflict(now_current) => {
                        current = now_current.map(|b| *b);
                        continue;
                    }
                }
            }
            if started.elapsed() >= budget {
                return Err(ProcessError::SourceBusy {
                    source_id: source.id().to_string(),
                    until_ms: busy_until,
                });
            }
            let jitter = Duration::from_millis((uuid::Uuid::new_v4().as_u128() % 10) as u64);
            tokio::time::sleep(backoff + jitter).await;
            backoff = (backoff * 2).min(LOCK_BACKOFF_MAX);
            current = self.ledger.get(&lock_id, LOCK_KEY).await?;
        }
    }

    /// Delete the outputs (emitted and late) of `version` of `key` and the index written
    /// under lock token `lock_token`, which were never committed: left in the lake, the
    /// outputs would hold rows other objects emit.
    async fn remove_uncommitted(
        &self,
        source: &Source,
        key: &str,
        version: &str,
        lock_token: &str,
    ) -> Result<()> {
        let bucket = &source.doc.output.bucket;
        for out in [
            versioned_output_key(source, key, version),
            late_output_key(source, key, version),
            index_key(source, key, version, lock_token),
        ] {
            self.store.delete(bucket, &out, None).await?;
        }
        Ok(())
    }

    /// Write `body` under `key`, replacing whatever is there (a leftover of an attempt that
    /// never committed): conditional on what a HEAD finds, so a concurrent writer is noticed.
    async fn put_over(
        &self,
        bucket: &str,
        key: &str,
        body: Bytes,
        metadata: &BTreeMap<String, String>,
    ) -> Result<String> {
        const TRIES: u32 = 4;
        let mut condition = WriteCondition::Absent;
        for _ in 0..TRIES {
            match self
                .store
                .put(bucket, key, body.clone(), metadata, &condition)
                .await?
            {
                PutOutcome::Written { etag } => return Ok(etag),
                PutOutcome::PreconditionFailed => {
                    condition = match self.store.head(bucket, key).await? {
                        None => WriteCondition::Absent,
                        Some(found) => WriteCondition::Matches(found.etag),
                    };
                }
            }
        }
        Err(ProcessError::OutputContended {
            bucket: bucket.to_string(),
            key: key.to_string(),
            attempts: TRIES,
        })
    }
}
