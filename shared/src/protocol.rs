//! The ledger protocol as pure functions: given the record a conditional write found (or
//! none), decide what to write. No I/O here, so every race of DESIGN.md's protocol is a unit
//! test, and the DynamoDB and SQLite ledgers cannot drift apart: both only store records and
//! refuse a write whose revision moved.
//!
//! Transitions, each applied by the caller as one conditional write on the revision it read:
//! - [`decide_claim`]: take the key for a target, record a newer target on a live claim
//!   ("superseded by"), or skip a duplicate / stale / in-flight / quarantined event. A
//!   version a listing saw (no sequencer) never takes the place of one an event recorded
//!   and nobody committed: the event's is worked first, the listing's kept behind it;
//! - [`commit`], [`fail`], [`release`]: end a claim, only while its token is still on the record.

use std::cmp::Ordering;

use crate::model::{Claim, Committed, Record, Status, Target};

/// Why a claim was not taken. None of these is an error: each is a normal outcome of
/// at-least-once, unordered delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// This version is already committed.
    Duplicate,
    /// The event is older than what the ledger already holds or is working on.
    Stale,
    /// Another worker holds a live claim for this very version.
    InFlight,
    /// The version exhausted its attempts; only a newer version or an operator moves it on.
    Quarantined,
}

impl Skip {
    /// The name used in logs and summaries.
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::Duplicate => "duplicate",
            Skip::Stale => "stale",
            Skip::InFlight => "in_flight",
            Skip::Quarantined => "skipped_quarantined",
        }
    }
}

/// A request to claim a key for a target.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// Source of the key.
    pub source_id: String,
    /// The decoded key.
    pub key: String,
    /// What the event (or listing) says the key should be brought to.
    pub target: Target,
    /// Fresh random token for this claim.
    pub token: String,
    /// The run (invocation or CLI run) asking.
    pub run_id: String,
    /// Now, ms since the epoch.
    pub now: i64,
    /// Lease expiry to write, ms since the epoch.
    pub lease_until: i64,
    /// The source's maximum attempts before quarantine.
    pub max_attempts: u32,
    /// Claim the committed version again if it was committed under another configuration
    /// fingerprint than this one (`backfill --stale-config`); a duplicate otherwise.
    pub refresh_config: Option<String>,
}

/// What to write after reading a record.
#[derive(Debug, Clone)]
pub enum Decision {
    /// Write `record`; once written the claim (for `target`, which may be newer than the
    /// request's) belongs to the caller.
    Claim {
        /// The record to write.
        record: Record,
        /// The target actually claimed (the newest known).
        target: Target,
    },
    /// A live claim holds an older version: write `record`, which carries the request's target
    /// as `pending` so the holder, or the next retry, processes it. The event is then handled.
    Defer {
        /// The record to write.
        record: Record,
    },
    /// Expired leases used up the attempts: write `record` (quarantined).
    Quarantine {
        /// The record to write.
        record: Record,
    },
    /// Write `record` (an expired claim cleared), then report `Skip`: the work the dead
    /// worker was doing is already committed.
    Settle {
        /// The record to write.
        record: Record,
        /// Why nothing more is done.
        skip: Skip,
    },
    /// Nothing to write.
    Skip(Skip),
}

/// The fresh record of a key the ledger has never seen, claimed for `req.target`.
pub fn fresh_claim(req: &ClaimRequest) -> Record {
    let mut record = Record {
        source_id: req.source_id.clone(),
        key: req.key.clone(),
        status: Status::Claimed,
        rev: 1,
        committed: None,
        claim: Some(new_claim(req, req.target.clone())),
        pending: None,
        attempts: 0,
        last_error: None,
        note: None,
        updated_at: req.now,
        bookmark: None,
        writing: Vec::new(),
    };
    record.status = record.derive_status(req.max_attempts);
    record
}

fn new_claim(req: &ClaimRequest, target: Target) -> Claim {
    Claim {
        token: req.token.clone(),
        target,
        lease_until: req.lease_until,
        claimed_at: req.now,
        run_id: req.run_id.clone(),
    }
}

/// Is `cand` a newer target than `cur`? By sequencer where both have one; otherwise a
/// candidate the ledger recorded later is preferred over a request that merely repeats the
/// committed state (the pinned GET then verifies which version is current).
fn newer(cand: &Target, cur: &Target, committed: Option<&Target>) -> bool {
    match cand.order(cur) {
        Some(o) => o == Ordering::Greater,
        None => {
            !cand.same_as(cur)
                && committed.is_some_and(|c| c.same_as(cur))
                && !committed.is_some_and(|c| c.same_as(cand))
        }
    }
}

/// Does `event`, a target an event brought (it has a sequencer) and nobody committed, go
/// before `listed`, a version a listing saw (no sequencer, so the two cannot be ordered)?
/// Always: the listing may be older than the event, and working the listing's version first
/// would drop the event's from the record. The listing's version is kept behind it, and the
/// GET pinned to each decides which one is current.
fn event_before_listing(event: &Target, listed: &Target, committed: Option<&Target>) -> bool {
    listed.sequencer().is_none()
        && event.sequencer().is_some()
        && !event.same_as(listed)
        && !committed.is_some_and(|c| c.same_as(event))
}

fn is_older_or_equal(a: &Target, b: &Target) -> bool {
    matches!(a.order(b), Some(Ordering::Less | Ordering::Equal))
}

/// Decide what a claim for `req` writes, given the current record.
pub fn decide_claim(current: Option<&Record>, req: &ClaimRequest) -> Decision {
    let Some(r) = current else {
        let record = fresh_claim(req);
        return Decision::Claim {
            target: req.target.clone(),
            record,
        };
    };
    let committed = r.committed.as_ref().map(|c| &c.target);

    // A live claim: never take it; an older or equal request is stale, a newer one is
    // recorded as pending for the holder.
    if let Some(c) = r.claim.as_ref().filter(|c| c.lease_until > req.now) {
        if c.target.same_as(&req.target) {
            return Decision::Skip(Skip::InFlight);
        }
        if is_older_or_equal(&req.target, &c.target) {
            return Decision::Skip(Skip::Stale);
        }
        if let Some(p) = &r.pending {
            if p.same_as(&req.target) {
                return Decision::Skip(Skip::InFlight);
            }
            if is_older_or_equal(&req.target, p) {
                return Decision::Skip(Skip::Stale);
            }
            // A listing's version never takes the place of the version an event recorded:
            // the holder works that one off, and the object's own events (or reconcile)
            // bring whatever is newer.
            if event_before_listing(p, &req.target, committed) {
                return Decision::Skip(Skip::InFlight);
            }
        }
        let mut record = r.clone();
        record.pending = Some(req.target.clone());
        return Decision::Defer {
            record: advance(record, req.now, req.max_attempts),
        };
    }

    // No live claim. Work on the newest target known: the request, the pending one, or the
    // target of an expired claim (its holder crashed or timed out). A version an event
    // brought and nobody committed goes before a listing's, which is kept behind it.
    let expired = r.claim.as_ref();
    let mut target = req.target.clone();
    let mut behind: Option<Target> = None;
    for cand in [r.pending.as_ref(), expired.map(|c| &c.target)]
        .into_iter()
        .flatten()
    {
        if cand.same_as(&target) {
            // The same version: keep the copy that carries the event's sequencer.
            if target.sequencer().is_none() && cand.sequencer().is_some() {
                target = cand.clone();
            }
        } else if newer(cand, &target, committed) {
            target = cand.clone();
        } else if event_before_listing(cand, &target, committed) {
            behind = Some(std::mem::replace(&mut target, cand.clone()));
        }
    }

    // Committed under another configuration, and the caller asks for such objects again.
    let refresh = req.refresh_config.as_deref().is_some_and(|fp| {
        r.committed
            .as_ref()
            .is_some_and(|c| c.target.same_as(&target) && c.config_fp != fp)
    });
    if let Some(com) = committed.filter(|_| !refresh) {
        if com.same_as(&target) {
            if let Some(c) = expired {
                // The dead worker's target is committed already: clear its claim so the
                // record does not stay stuck.
                let mut record = r.clone();
                record.claim = None;
                if record
                    .pending
                    .as_ref()
                    .is_some_and(|p| p.same_as(&c.target))
                {
                    record.pending = None;
                }
                if record.pending.is_none() {
                    record.attempts = 0;
                }
                record.note = Some(format!("expired claim of run {} cleared", c.run_id));
                return Decision::Settle {
                    record: advance(record, req.now, req.max_attempts),
                    skip: Skip::Duplicate,
                };
            }
            return Decision::Skip(Skip::Duplicate);
        }
        if is_older_or_equal(&target, com) {
            return Decision::Skip(Skip::Stale);
        }
    }

    // Attempts carried by this target: the failures recorded for it, plus one for an expired
    // claim on it (a worker that died or ran out of time used up an attempt).
    let mut attempts = 0;
    if r.pending.as_ref().is_some_and(|p| p.same_as(&target)) {
        attempts = r.attempts;
    }
    if let Some(c) = expired.filter(|c| c.target.same_as(&target)) {
        attempts = r.attempts + 1;
        if attempts >= req.max_attempts {
            let mut record = r.clone();
            record.claim = None;
            record.pending = Some(target);
            record.attempts = attempts;
            record.last_error = Some(format!(
                "lease of run {} expired without a commit; {attempts} attempts used",
                c.run_id
            ));
            return Decision::Quarantine {
                record: advance(record, req.now, req.max_attempts),
            };
        }
    } else if r.claim.is_none() && attempts >= req.max_attempts {
        return Decision::Skip(Skip::Quarantined);
    }

    let mut record = r.clone();
    record.pending = r
        .pending
        .clone()
        .filter(|p| !p.same_as(&target) && newer(p, &target, committed))
        .or_else(|| behind.filter(|b| !committed.is_some_and(|c| c.same_as(b))));
    record.claim = Some(new_claim(req, target.clone()));
    record.attempts = attempts;
    record.note = None;
    Decision::Claim {
        record: advance(record, req.now, req.max_attempts),
        target,
    }
}

/// The claim of `token` is no longer on the record: another worker took it over after the
/// lease expired. The caller must not commit, and its work is discarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the claim was taken over by another worker (lease expired)")]
pub struct ClaimLost;

fn holding<'a>(r: &'a Record, token: &str) -> Result<&'a Claim, ClaimLost> {
    r.claim
        .as_ref()
        .filter(|c| c.token == token)
        .ok_or(ClaimLost)
}

fn advance(mut record: Record, now: i64, max_attempts: u32) -> Record {
    record.rev += 1;
    record.updated_at = now;
    record.status = record.derive_status(max_attempts);
    record
}

/// Commit `committed` for the claim `token`: the key is done (or deleted). A target recorded as
/// pending while the claim ran stays, so the caller processes it next.
pub fn commit(
    r: &Record,
    token: &str,
    committed: Committed,
    now: i64,
    max_attempts: u32,
) -> Result<Record, ClaimLost> {
    holding(r, token)?;
    let mut record = r.clone();
    record.pending = r
        .pending
        .clone()
        .filter(|p| !p.same_as(&committed.target) && !is_older_or_equal(p, &committed.target));
    record.committed = Some(committed);
    record.claim = None;
    // The set is committed: the files announced before it are either in it or deleted.
    record.writing.clear();
    record.attempts = 0;
    record.last_error = None;
    record.note = None;
    Ok(advance(record, now, max_attempts))
}

/// The claim holder announces the files it is about to write (partitioning by columns):
/// added to [`Record::writing`], so that whichever attempt comes next can delete those its
/// own set lacks even if this one dies between two files. `gone` are earlier announced
/// files the holder has deleted: they leave the list, which so holds at most the files of
/// two attempts however many came before (a table source names its files per claim).
pub fn note_writing(
    r: &Record,
    token: &str,
    keys: &[String],
    gone: &[String],
    now: i64,
    max_attempts: u32,
) -> Result<Record, ClaimLost> {
    holding(r, token)?;
    let mut record = r.clone();
    record.writing.retain(|k| !gone.contains(k));
    for k in keys {
        if !record.writing.contains(k) {
            record.writing.push(k.clone());
        }
    }
    Ok(advance(record, now, max_attempts))
}

/// What a failure says about the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The attempt may have failed because of the object (bad input, a permanent service
    /// error): it counts towards quarantine.
    Counted,
    /// A transient failure of a service or the network (throttling, 5xx, a timeout, a
    /// dropped connection): retried without limit by redelivery and reconcile, never a
    /// reason to quarantine a good object.
    Transient,
}

/// Record a failed attempt of the claim `token`. The target becomes pending with one more
/// attempt if the failure is [`Failure::Counted`] (quarantined once attempts reach the
/// maximum) unless a newer target is already pending, which then replaces it with a clean
/// slate.
pub fn fail(
    r: &Record,
    token: &str,
    error: &str,
    failure: Failure,
    now: i64,
    max_attempts: u32,
) -> Result<Record, ClaimLost> {
    let claim = holding(r, token)?;
    let mut record = r.clone();
    let superseded = r
        .pending
        .as_ref()
        .is_some_and(|p| !p.same_as(&claim.target));
    if superseded {
        record.attempts = 0;
    } else {
        record.pending = Some(claim.target.clone());
        if failure == Failure::Counted {
            record.attempts = r.attempts + 1;
        }
    }
    record.claim = None;
    record.last_error = Some(error.to_string());
    Ok(advance(record, now, max_attempts))
}

/// Give the claim `token` back without a commit or a failure: the claimed version is no longer
/// the object's current one (`note` says why).
pub fn release(
    r: &Record,
    token: &str,
    note: &str,
    now: i64,
    max_attempts: u32,
) -> Result<Record, ClaimLost> {
    let claim = holding(r, token)?;
    let mut record = r.clone();
    record.claim = None;
    if record
        .pending
        .as_ref()
        .is_some_and(|p| p.same_as(&claim.target))
    {
        record.pending = None;
    }
    // The attempts were the released target's; a version still pending starts clean.
    record.attempts = 0;
    record.note = Some(note.to_string());
    Ok(advance(record, now, max_attempts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Sequencer;
    use crate::model::{DeleteRef, VersionRef};

    const MAX: u32 = 3;

    fn v(id: &str, seq: Option<&str>) -> Target {
        Target::Version(VersionRef {
            version: id.into(),
            version_id: None,
            etag: Some(id.into()),
            sequencer: seq.map(|s| s.parse::<Sequencer>().unwrap()),
            size: Some(1),
        })
    }

    fn del(seq: &str) -> Target {
        Target::Delete(DeleteRef {
            sequencer: Some(seq.parse().unwrap()),
            version_id: None,
            delete_marker: false,
        })
    }

    fn req(target: Target, token: &str, now: i64) -> ClaimRequest {
        ClaimRequest {
            source_id: "s".into(),
            key: "k".into(),
            target,
            token: token.into(),
            run_id: format!("run-{token}"),
            now,
            lease_until: now + 100,
            max_attempts: MAX,
            refresh_config: None,
        }
    }

    fn done(target: Target) -> Committed {
        Committed {
            target,
            rows: 1,
            sums: Default::default(),
            outputs: vec![],
            rejected: 0,
            rejects: None,
            rescued: 0,
            ignored: Default::default(),
            config_fp: "fp".into(),
            committed_at: 0,
            run_id: "r".into(),
        }
    }

    /// GIVEN a key claimed and committed for `target`.
    fn committed(target: Target) -> Record {
        let r = req(target.clone(), "t0", 0);
        let Decision::Claim { record, .. } = decide_claim(None, &r) else {
            panic!()
        };
        commit(&record, "t0", done(target), 1, MAX).unwrap()
    }

    fn claimed(d: Decision) -> (Record, Target) {
        match d {
            Decision::Claim { record, target } => (record, target),
            other => panic!("expected a claim, got {other:?}"),
        }
    }

    #[test]
    fn new_key_is_claimed_then_done() {
        let (r, t) = claimed(decide_claim(None, &req(v("a", Some("10")), "t", 0)));
        assert_eq!(r.status, Status::Claimed);
        assert_eq!(t, v("a", Some("10")));
        let r = commit(&r, "t", done(t), 5, MAX).unwrap();
        assert_eq!(r.status, Status::Done);
        assert_eq!(r.rev, 2);
        assert!(r.claim.is_none());
    }

    #[test]
    fn announced_files_hold_at_most_two_attempts_and_clear_at_the_commit() {
        let (r, t) = claimed(decide_claim(None, &req(v("a", Some("10")), "t", 0)));
        let names = |attempt: &str| -> Vec<String> {
            (0..3)
                .map(|i| format!("dt={i}/a-{attempt}.parquet"))
                .collect()
        };
        let mut r = note_writing(&r, "t", &names("1"), &[], 1, MAX).unwrap();
        // Each later attempt deleted the one before's files: the list never grows past two.
        for attempt in 2..10 {
            let before = names(&(attempt - 1).to_string());
            let gone = names(&(attempt - 2).to_string());
            r = note_writing(&r, "t", &names(&attempt.to_string()), &gone, 1, MAX).unwrap();
            assert_eq!(r.writing.len(), 6, "{:?}", r.writing);
            assert!(before.iter().all(|k| r.writing.contains(k)));
        }
        assert!(note_writing(&r, "other", &[], &[], 1, MAX).is_err());
        let r = commit(&r, "t", done(t), 5, MAX).unwrap();
        assert!(r.writing.is_empty());
    }

    #[test]
    fn duplicate_of_committed_version_is_skipped() {
        let r = committed(v("a", Some("10")));
        let d = decide_claim(Some(&r), &req(v("a", Some("10")), "t", 10));
        assert!(matches!(d, Decision::Skip(Skip::Duplicate)));
    }

    #[test]
    fn an_expired_claim_on_the_committed_version_is_cleared_as_a_duplicate() {
        // GIVEN a committed record whose claim for the same version was left by a dead worker.
        let mut stuck = committed(v("a", Some("10")));
        stuck.claim = Some(Claim {
            token: "dead".into(),
            target: v("a", Some("10")),
            lease_until: 50,
            claimed_at: 0,
            run_id: "dead-run".into(),
        });
        // WHEN a claim for that version comes after the lease.
        let d = decide_claim(Some(&stuck), &req(v("a", Some("10")), "t2", 1_000));
        // THEN the claim is cleared and the event is a duplicate.
        let Decision::Settle { record, skip } = d else {
            panic!("expected settle, got {d:?}")
        };
        assert_eq!(skip, Skip::Duplicate);
        assert!(record.claim.is_none());
        assert_eq!(record.status, Status::Done);
        // Inside the lease it stays in flight.
        let d = decide_claim(Some(&stuck), &req(v("a", Some("10")), "t2", 10));
        assert!(matches!(d, Decision::Skip(Skip::InFlight)), "{d:?}");
    }

    #[test]
    fn older_version_after_newer_commit_is_stale() {
        let r = committed(v("b", Some("20")));
        let d = decide_claim(Some(&r), &req(v("a", Some("10")), "t", 10));
        assert!(matches!(d, Decision::Skip(Skip::Stale)));
    }

    #[test]
    fn overwrite_claims_the_newer_version() {
        let r = committed(v("a", Some("10")));
        let (r2, t) = claimed(decide_claim(Some(&r), &req(v("b", Some("20")), "t", 10)));
        assert_eq!(t, v("b", Some("20")));
        // The committed version stays until the new one commits.
        assert_eq!(r2.committed.unwrap().target, v("a", Some("10")));
    }

    #[test]
    fn same_version_on_live_claim_is_in_flight_and_older_is_stale() {
        let (r, _) = claimed(decide_claim(None, &req(v("b", Some("20")), "t1", 0)));
        let same = decide_claim(Some(&r), &req(v("b", Some("20")), "t2", 50));
        assert!(matches!(same, Decision::Skip(Skip::InFlight)));
        let older = decide_claim(Some(&r), &req(v("a", Some("10")), "t2", 50));
        assert!(matches!(older, Decision::Skip(Skip::Stale)));
    }

    #[test]
    fn newer_version_on_live_claim_is_recorded_and_picked_up_after_commit() {
        let (r, t) = claimed(decide_claim(None, &req(v("a", Some("10")), "t1", 0)));
        let Decision::Defer { record } = decide_claim(Some(&r), &req(v("b", Some("20")), "t2", 50))
        else {
            panic!("expected defer")
        };
        assert_eq!(record.pending, Some(v("b", Some("20"))));
        // The holder commits its version; the newer one stays pending ...
        let after = commit(&record, "t1", done(t), 60, MAX).unwrap();
        assert_eq!(after.status, Status::Pending);
        // ... and any claim, even a duplicate of the old version, works on the newer one.
        let (_, t) = claimed(decide_claim(
            Some(&after),
            &req(v("a", Some("10")), "t3", 70),
        ));
        assert_eq!(t, v("b", Some("20")));
    }

    #[test]
    fn expired_claim_is_taken_over_and_counts_an_attempt() {
        let (r, _) = claimed(decide_claim(None, &req(v("a", Some("10")), "t1", 0)));
        let (r2, t) = claimed(decide_claim(Some(&r), &req(v("a", Some("10")), "t2", 500)));
        assert_eq!(t, v("a", Some("10")));
        assert_eq!(r2.attempts, 1);
        assert_eq!(r2.claim.as_ref().unwrap().token, "t2");
        // The first holder can no longer commit.
        assert_eq!(commit(&r2, "t1", done(t.clone()), 501, MAX), Err(ClaimLost));
        assert!(commit(&r2, "t2", done(t), 501, MAX).is_ok());
    }

    #[test]
    fn expired_claim_of_older_version_yields_to_a_newer_request() {
        let (r, _) = claimed(decide_claim(None, &req(v("a", Some("10")), "t1", 0)));
        let (r2, t) = claimed(decide_claim(Some(&r), &req(v("b", Some("20")), "t2", 500)));
        assert_eq!(t, v("b", Some("20")));
        assert_eq!(r2.attempts, 0);
    }

    #[test]
    fn failures_quarantine_after_max_attempts_and_a_newer_version_frees_it() {
        let mut r: Option<Record> = None;
        for (i, now) in [(1, 0), (2, 10), (3, 20)] {
            let token = format!("t{i}");
            let (c, _) = claimed(decide_claim(
                r.as_ref(),
                &req(v("a", Some("10")), &token, now),
            ));
            let f = fail(&c, &token, "bad line 3", Failure::Counted, now + 1, MAX).unwrap();
            assert_eq!(f.attempts, i);
            r = Some(f);
        }
        let r = r.unwrap();
        assert_eq!(r.status, Status::Quarantined);
        assert_eq!(r.last_error.as_deref(), Some("bad line 3"));
        let d = decide_claim(Some(&r), &req(v("a", Some("10")), "t9", 30));
        assert!(matches!(d, Decision::Skip(Skip::Quarantined)));
        let (r2, t) = claimed(decide_claim(Some(&r), &req(v("b", Some("20")), "t9", 30)));
        assert_eq!(t, v("b", Some("20")));
        assert_eq!(r2.attempts, 0);
    }

    #[test]
    fn a_refresh_claims_only_versions_committed_under_another_config() {
        let r = committed(v("a", Some("10")));
        let fp = r.committed.as_ref().unwrap().config_fp.clone();
        let mut same = req(v("a", Some("10")), "t", 10);
        same.refresh_config = Some(fp);
        assert!(matches!(
            decide_claim(Some(&r), &same),
            Decision::Skip(Skip::Duplicate)
        ));
        let mut other = req(v("a", Some("10")), "t", 10);
        other.refresh_config = Some("another".into());
        let (c, t) = claimed(decide_claim(Some(&r), &other));
        assert_eq!(t, v("a", Some("10")));
        let mut newer = committed(v("a", Some("10")));
        newer.committed.as_mut().unwrap().config_fp = "another".into();
        let r2 = commit(&c, "t", done(t), 11, MAX).unwrap();
        assert_eq!(r2.status, Status::Done);
        // An older version is stale whatever the configuration.
        let mut old = req(v("z", Some("05")), "t2", 12);
        old.refresh_config = Some("another".into());
        assert!(matches!(
            decide_claim(Some(&newer), &old),
            Decision::Skip(Skip::Stale)
        ));
    }

    #[test]
    fn transient_failures_are_recorded_but_never_quarantine() {
        let mut r: Option<Record> = None;
        for i in 0..10 {
            let token = format!("t{i}");
            let (c, _) = claimed(decide_claim(
                r.as_ref(),
                &req(v("a", Some("10")), &token, i * 10),
            ));
            let f = fail(
                &c,
                &token,
                "GetObject: connection reset",
                Failure::Transient,
                i * 10 + 1,
                MAX,
            )
            .unwrap();
            assert_eq!((f.attempts, f.status), (0, Status::Pending));
            assert_eq!(f.pending, Some(v("a", Some("10"))));
            assert_eq!(f.last_error.as_deref(), Some("GetObject: connection reset"));
            r = Some(f);
        }
        // …while a counted failure after them still counts from where the count stood.
        let (c, _) = claimed(decide_claim(
            r.as_ref(),
            &req(v("a", Some("10")), "tx", 200),
        ));
        let f = fail(&c, "tx", "bad line 3", Failure::Counted, 201, MAX).unwrap();
        assert_eq!((f.attempts, f.status), (1, Status::Failed));
    }

    #[test]
    fn crashes_count_as_attempts_until_quarantine() {
        let (mut r, _) = claimed(decide_claim(None, &req(v("a", None), "t0", 0)));
        for i in 1..MAX {
            let now = i64::from(i) * 1000;
            let (next, _) = claimed(decide_claim(Some(&r), &req(v("a", None), "t", now)));
            assert_eq!(next.attempts, i);
            r = next;
        }
        let d = decide_claim(Some(&r), &req(v("a", None), "t", 10_000));
        let Decision::Quarantine { record } = d else {
            panic!("expected quarantine, got {d:?}")
        };
        assert_eq!(record.status, Status::Quarantined);
        assert!(record.last_error.unwrap().contains("expired"));
    }

    #[test]
    fn delete_then_late_create_is_stale() {
        let r = committed(v("a", Some("10")));
        let (c, t) = claimed(decide_claim(Some(&r), &req(del("30"), "t", 10)));
        let r = commit(&c, "t", done(t), 11, MAX).unwrap();
        assert_eq!(r.status, Status::Deleted);
        let late = decide_claim(Some(&r), &req(v("b", Some("20")), "t2", 20));
        assert!(matches!(late, Decision::Skip(Skip::Stale)));
        let recreate = decide_claim(Some(&r), &req(v("c", Some("40")), "t3", 20));
        assert!(matches!(recreate, Decision::Claim { .. }));
    }

    #[test]
    fn failure_of_a_superseded_version_keeps_the_newer_pending_with_a_clean_slate() {
        let (r, _) = claimed(decide_claim(None, &req(v("a", Some("10")), "t1", 0)));
        let Decision::Defer { record } = decide_claim(Some(&r), &req(v("b", Some("20")), "t2", 5))
        else {
            panic!()
        };
        let f = fail(&record, "t1", "boom", Failure::Counted, 6, MAX).unwrap();
        assert_eq!(f.pending, Some(v("b", Some("20"))));
        assert_eq!(f.attempts, 0);
        assert_eq!(f.status, Status::Pending);
    }

    #[test]
    fn release_leaves_committed_state_alone() {
        let r = committed(v("a", Some("10")));
        let (c, _) = claimed(decide_claim(Some(&r), &req(v("b", None), "t", 10)));
        let r2 = release(&c, "t", "not current", 11, MAX).unwrap();
        assert_eq!(r2.status, Status::Done);
        assert_eq!(r2.committed, r.committed);
        assert_eq!(r2.note.as_deref(), Some("not current"));
    }

    #[test]
    fn sequencers_of_different_lengths_order_by_right_padding() {
        let r = committed(v("a", Some("0A1")));
        // "0A0F" < "0A10" once padded; so it is stale.
        let d = decide_claim(Some(&r), &req(v("b", Some("0A0F")), "t", 10));
        assert!(matches!(d, Decision::Skip(Skip::Stale)));
    }

    #[test]
    fn a_listing_never_takes_the_place_of_a_version_an_event_recorded() {
        // GIVEN version b (an event, sequencer 30) failed once after a committed.
        let r = committed(v("a", Some("10")));
        let (c, _) = claimed(decide_claim(Some(&r), &req(v("b", Some("30")), "t1", 10)));
        let failed = fail(&c, "t1", "GetObject: timeout", Failure::Counted, 11, MAX).unwrap();
        assert_eq!(
            (failed.pending.clone(), failed.attempts),
            (Some(v("b", Some("30"))), 1)
        );
        // WHEN a listing that saw version x (no sequencer: it cannot be ordered) claims.
        let (record, target) = claimed(decide_claim(Some(&failed), &req(v("x", None), "t2", 20)));
        // THEN the event's version is worked first, with its attempts, and the listing's is
        // kept behind it: neither is dropped.
        assert_eq!(target, v("b", Some("30")));
        assert_eq!(record.attempts, 1);
        assert_eq!(record.pending, Some(v("x", None)));
        // The holder fails to find b current (its GET is pinned): the release keeps x, which
        // the next claim takes.
        let released = release(&record, "t2", "not current", 21, MAX).unwrap();
        assert_eq!(
            (released.pending.clone(), released.status),
            (Some(v("x", None)), Status::Pending)
        );
        let (_, next) = claimed(decide_claim(Some(&released), &req(v("x", None), "t3", 22)));
        assert_eq!(next, v("x", None));
    }

    #[test]
    fn a_listing_of_the_version_an_event_recorded_claims_it_with_the_sequencer() {
        let (c, _) = claimed(decide_claim(None, &req(v("a", Some("10")), "t1", 0)));
        let failed = fail(&c, "t1", "throttled", Failure::Transient, 1, MAX).unwrap();
        let (record, target) = claimed(decide_claim(Some(&failed), &req(v("a", None), "t2", 5)));
        assert_eq!(target, v("a", Some("10")));
        assert!(record.pending.is_none());
    }

    #[test]
    fn a_listing_during_a_live_claim_never_replaces_a_pending_event_version() {
        let (c, _) = claimed(decide_claim(None, &req(v("a", Some("10")), "t1", 0)));
        let Decision::Defer { record } = decide_claim(Some(&c), &req(v("b", Some("20")), "t2", 5))
        else {
            panic!("expected defer")
        };
        let d = decide_claim(Some(&record), &req(v("x", None), "t3", 6));
        assert!(matches!(d, Decision::Skip(Skip::InFlight)), "{d:?}");
        // With the pending slot free, the listing's version waits behind the holder.
        let Decision::Defer { record } = decide_claim(Some(&c), &req(v("x", None), "t3", 6)) else {
            panic!("expected defer")
        };
        assert_eq!(record.pending, Some(v("x", None)));
    }

    #[test]
    fn a_listing_after_a_dead_event_worker_takes_over_the_events_version_first() {
        let r = committed(v("a", Some("10")));
        let (dead, _) = claimed(decide_claim(Some(&r), &req(v("b", Some("20")), "t1", 10)));
        let (record, target) = claimed(decide_claim(Some(&dead), &req(v("x", None), "t2", 500)));
        assert_eq!(target, v("b", Some("20")));
        assert_eq!(record.attempts, 1, "the dead worker's attempt counts");
        assert_eq!(record.pending, Some(v("x", None)));
        // A pending delete an event brought goes first too.
        let (c, _) = claimed(decide_claim(Some(&r), &req(del("40"), "t3", 10)));
        let failed = fail(&c, "t3", "throttled", Failure::Transient, 11, MAX).unwrap();
        let (record, target) = claimed(decide_claim(Some(&failed), &req(v("y", None), "t4", 12)));
        assert_eq!((target, record.pending), (del("40"), Some(v("y", None))));
    }

    #[test]
    fn a_listing_of_another_version_than_the_committed_one_is_claimed_for_its_pinned_get() {
        // The ledger cannot order a listed version against the committed one: it is claimed,
        // and only the GET pinned to its ETag can let it commit (if it is the current object).
        let r = committed(v("b", Some("20")));
        let (record, target) = claimed(decide_claim(Some(&r), &req(v("a", None), "t", 10)));
        assert_eq!(target, v("a", None));
        assert_eq!(
            record.committed, r.committed,
            "the commit stays until a new one lands"
        );
        assert!(record.pending.is_none());
        // A listing of the committed version is a duplicate.
        let d = decide_claim(Some(&r), &req(v("b", None), "t", 10));
        assert!(matches!(d, Decision::Skip(Skip::Duplicate)), "{d:?}");
    }
}
