//! Bulk jobs (backfills, fanned-out reconciliations): the record an operator watches.
//!
//! A job is planned by one writer (the planner: the backfill function, or the CLI) and carried
//! out by many (the ingest fleet, each worker taking SQS messages of work items). So its state
//! has two parts, stored apart:
//! - the [`Job`] itself — the request, and the [`Plan`]: how far the listing got, what was
//!   listed, left out as already done, and enqueued — written only by the planner, each write
//!   conditional on the revision it read;
//! - its [`JobCounts`] — what the workers made of the enqueued items — which every worker adds
//!   to once per finished message, idempotently: a message delivered twice, or sent twice by a
//!   planner that crashed, is counted once (see [`crate::ports::JobStore::finish_message`]).
//!
//! A job is finished when its plan is done and every message it enqueued is finished.

use serde::{Deserialize, Serialize};

/// What a job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// A backfill (or replay, or stale-config refresh) through the ingest fleet.
    Backfill,
    /// A reconciliation split into parts checked in parallel.
    Reconcile,
}

impl JobKind {
    /// The name used in ids and displays.
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Backfill => "backfill",
            JobKind::Reconcile => "reconcile",
        }
    }
}

/// A page the planner recorded before sending its messages, so a planner that crashed while
/// sending can send the same message numbers again: each is counted once, whichever copy
/// finishes first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingPage {
    /// The cursor the page started after (`None`: the start of the range).
    pub after: Option<String>,
    /// The last key (or position) the page covered.
    pub through: String,
    /// The number of the page's first message.
    pub first_message: u64,
    /// How many messages the page had.
    pub messages: u64,
}

/// How far the planner got. Written by the planner only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Plan {
    /// The last key (listing) or position (inventory: `<file>:<row>`) handled; planning
    /// resumes after it.
    pub cursor: Option<String>,
    /// The whole range is listed and enqueued.
    pub done: bool,
    /// Planning stopped at the request's bounds (`max_objects` / `max_bytes`) and waits to
    /// be resumed; `None` while it goes on by itself (or is done).
    pub paused: Option<String>,
    /// Objects listed in range.
    pub listed: u64,
    /// Objects left out because the ledger has them done already (a plain backfill), or done
    /// under the current configuration (`stale_config`).
    pub already_done: u64,
    /// Objects enqueued.
    pub enqueued: u64,
    /// Source bytes enqueued.
    pub bytes: u64,
    /// Messages enqueued.
    pub messages: u64,
    /// Number of the next message.
    pub next_message: u64,
    /// A page being sent (see [`PendingPage`]).
    pub pending: Option<PendingPage>,
    /// Planner invocations so far.
    pub slices: u64,
    /// When planning finished (ms since the epoch).
    pub planned_at: Option<i64>,
    /// A reconciliation split into parts: the run merging the parts' results, and until when
    /// its claim on the merge holds (ms since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merging: Option<(String, i64)>,
    /// A reconciliation split into parts: the keys of the merged report, once written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merged: Option<Vec<String>>,
}

/// A bulk job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Unique id, e.g. `bf-20261201T101500-3f9c2a`.
    pub id: String,
    /// What it does.
    pub kind: JobKind,
    /// The source it works on.
    pub source_id: String,
    /// The request it was started with (as given, so it can be resumed and shown).
    pub request: serde_json::Value,
    /// Bumped by every write; every write is conditional on it.
    pub rev: u64,
    /// When it started (ms since the epoch).
    pub started_at: i64,
    /// Last write of the planner (ms since the epoch).
    pub updated_at: i64,
    /// The planner's progress.
    #[serde(default)]
    pub plan: Plan,
}

/// What the workers made of a job's items, added up over its finished messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobCounts {
    /// Messages finished (every item in them ended one way or another).
    pub messages: u64,
    /// Items in the finished messages.
    pub items: u64,
    /// Items processed (committed, or replayed) by this job.
    pub processed: u64,
    /// Items already done when a worker came to them (another run committed them).
    pub duplicate: u64,
    /// Items skipped by the protocol: in flight elsewhere, stale, or no longer the current
    /// version (the newer version's event brings it).
    pub skipped: u64,
    /// Items quarantined (their attempts exhausted).
    pub quarantined: u64,
    /// Rows written by the processed items.
    pub rows: u64,
    /// Failed attempts at items (their messages are delivered again): a count of attempts,
    /// not of objects, and not idempotent.
    pub failures: u64,
    /// Last time a worker added to the counts (ms since the epoch).
    pub updated_at: i64,
}

impl JobCounts {
    /// Add `other` to these counts (the later `updated_at` wins).
    pub fn add(&mut self, other: &JobCounts) {
        self.messages += other.messages;
        self.items += other.items;
        self.processed += other.processed;
        self.duplicate += other.duplicate;
        self.skipped += other.skipped;
        self.quarantined += other.quarantined;
        self.rows += other.rows;
        self.failures += other.failures;
        self.updated_at = self.updated_at.max(other.updated_at);
    }
}

/// Where a job stands, derived from its plan and counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// The planner is listing and enqueueing.
    Planning,
    /// Planning stopped at the request's bounds; resume it to go on.
    Paused,
    /// Everything is enqueued; workers are on it.
    Running,
    /// Every enqueued message is finished.
    Finished,
}

impl JobState {
    /// The name used in displays.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Planning => "planning",
            JobState::Paused => "paused",
            JobState::Running => "running",
            JobState::Finished => "finished",
        }
    }
}

/// A job as an operator sees it: the record, its counts and where it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobStatus {
    /// The job.
    #[serde(flatten)]
    pub job: Job,
    /// What the workers made of it.
    pub counts: JobCounts,
    /// Where it stands.
    pub state: JobState,
    /// Items enqueued and not in a finished message yet.
    pub outstanding: u64,
    /// When the last message finished, once the job is finished (ms since the epoch).
    pub finished_at: Option<i64>,
}

impl JobStatus {
    /// The status of `job` with `counts`.
    pub fn of(job: Job, counts: JobCounts) -> Self {
        let plan = &job.plan;
        let state = if !plan.done {
            if plan.paused.is_some() {
                JobState::Paused
            } else {
                JobState::Planning
            }
        } else if counts.messages >= plan.messages {
            JobState::Finished
        } else {
            JobState::Running
        };
        let finished_at = (state == JobState::Finished).then(|| {
            plan.planned_at
                .unwrap_or(job.updated_at)
                .max(counts.updated_at)
        });
        Self {
            outstanding: plan.enqueued.saturating_sub(counts.items),
            job,
            counts,
            state,
            finished_at,
        }
    }
}

/// A new job id: `<bf|rc>-<UTC time>-<6 hex digits>`, sortable by start time.
pub fn new_job_id(kind: JobKind, now_ms: i64) -> String {
    let prefix = match kind {
        JobKind::Backfill => "bf",
        JobKind::Reconcile => "rc",
    };
    let time = chrono::DateTime::from_timestamp_millis(now_ms)
        .map(|t| t.format("%Y%m%dT%H%M%S").to_string())
        .unwrap_or_default();
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}-{time}-{}", &random[..6])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(plan: Plan) -> Job {
        Job {
            id: "bf-1".into(),
            kind: JobKind::Backfill,
            source_id: "orders".into(),
            request: serde_json::json!({}),
            rev: 1,
            started_at: 0,
            updated_at: 10,
            plan,
        }
    }

    #[test]
    fn a_job_is_finished_when_planned_and_every_message_is_finished() {
        let planning = JobStatus::of(job(Plan::default()), JobCounts::default());
        assert_eq!(planning.state, JobState::Planning);
        let paused = Plan {
            paused: Some("max_objects".into()),
            ..Plan::default()
        };
        assert_eq!(
            JobStatus::of(job(paused), JobCounts::default()).state,
            JobState::Paused
        );
        let planned = Plan {
            done: true,
            messages: 3,
            enqueued: 120,
            planned_at: Some(20),
            ..Plan::default()
        };
        let mut counts = JobCounts {
            messages: 2,
            items: 100,
            updated_at: 30,
            ..JobCounts::default()
        };
        let running = JobStatus::of(job(planned.clone()), counts);
        assert_eq!(
            (running.state, running.outstanding),
            (JobState::Running, 20)
        );
        assert_eq!(running.finished_at, None);
        counts.add(&JobCounts {
            messages: 1,
            items: 20,
            updated_at: 40,
            ..JobCounts::default()
        });
        let finished = JobStatus::of(job(planned), counts);
        assert_eq!(finished.state, JobState::Finished);
        assert_eq!((finished.outstanding, finished.finished_at), (0, Some(40)));
    }

    #[test]
    fn job_ids_sort_by_start_time() {
        let a = new_job_id(JobKind::Backfill, 1_764_583_200_000);
        let b = new_job_id(JobKind::Backfill, 1_764_583_201_000);
        assert!(a.starts_with("bf-20251201T100000-"), "{a}");
        assert!(a < b);
    }
}
