//! Backfill = a planner + the fleet. The planner lists a source (or a prefix and a
//! last-modified range of it; or reads an S3 Inventory manifest, see [`crate::inventory`]),
//! leaves out what the ledger has done already — one batched ledger read per page, never the
//! whole ledger — and sends the rest as work items ([`crate::work`]) to the work queue. The
//! ingest fleet takes them like S3 events, through the same per-object path and claims, so
//! the queue may deliver a message twice and nothing is processed twice.
//!
//! The planner runs one bounded call at a time (the request's `max_objects` / `max_bytes`,
//! and the invocation deadline) and keeps its progress on a job record ([`crate::jobs`]), so
//! the next call — the backfill function invoking itself, or `tidemark backfill --all` —
//! resumes from the cursor. It only lists; it never processes an object itself.
//!
//! `replay` re-processes the range without advancing the ledger (outputs are replaced by
//! key); `stale_config` re-processes exactly the objects whose commit was made under another
//! configuration fingerprint than the source's current one (a changed schema, format or
//! output), advancing the ledger; `dry_run` only says what would be enqueued.
//!
//! # Crash safety of the planner
//! Each page is recorded on the job as *pending* (its range and message numbers) before its
//! messages are sent, and marked sent after. A planner that dies in between is resumed on
//! the same page: it lists that range again and sends the same message numbers (an empty
//! message for a number the page no longer fills), so the workers' counts, which are added
//! once per message number, count each item once; the items themselves are protected by the
//! ledger's claims as always. Duplicated messages in the queue are expected and harmless.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::config::{Config, Source};
use crate::error::{ProcessError, Result};
use crate::inventory::{InventoryWalk, Manifest};
use crate::jobs::{Job, JobKind, PendingPage, Plan, new_job_id};
use crate::model::{Record, Status, Target};
use crate::ports::{JobWrite, ObjectMeta, ObjectStore, WorkQueue};
use crate::process::{Pipeline, Step};
use crate::work::{Packing, WorkBatch, WorkItem, WorkMode, pack};

/// A backfill request (the backfill function's manual-invoke payload).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// The source id (not needed to resume a job).
    #[serde(default)]
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
    /// Enqueue at most this many objects per call (Glue's boundedFiles).
    #[serde(default)]
    pub max_objects: Option<u64>,
    /// Enqueue at most this many source bytes per call (Glue's boundedSize).
    #[serde(default)]
    pub max_bytes: Option<u64>,
    /// Only report what would be enqueued (no job, no messages).
    #[serde(default)]
    pub dry_run: bool,
    /// Re-process every object in range without advancing the ledger.
    #[serde(default)]
    pub replay: bool,
    /// Only objects done for their current version under another configuration than the
    /// source's current one: process them again (outputs replaced, ledger advanced).
    #[serde(default)]
    pub stale_config: bool,
    /// Start after this key (a new job only).
    #[serde(default)]
    pub continuation: Option<String>,
    /// Resume this job (its request is the one it was started with; other fields are
    /// ignored).
    #[serde(default)]
    pub job: Option<String>,
    /// Read the objects from this S3 Inventory manifest (`s3://bucket/…/manifest.json`, CSV
    /// or Parquet inventory) instead of listing the source.
    #[serde(default)]
    pub inventory: Option<String>,
}

/// What one planner call did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The job (none for a dry run).
    pub job: Option<String>,
    /// The source id.
    pub source: String,
    /// Objects listed in range by this call.
    pub listed: u64,
    /// Objects left out because they are done already (for `stale_config`: done under the
    /// current configuration). They do not count against the bounds.
    pub already_done: u64,
    /// Objects enqueued (or, in a dry run, that would be).
    pub enqueued: u64,
    /// Source bytes enqueued.
    pub bytes: u64,
    /// Messages sent.
    pub messages: u64,
    /// Keys that would be enqueued (dry run; first 1,000).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub would_process: Vec<String>,
    /// True when the whole range is listed and enqueued.
    pub done: bool,
    /// Why the call stopped before the end: `max_objects`, `max_bytes` or `deadline`.
    pub stopped: Option<String>,
    /// Where the next call resumes (the last key, or inventory position, handled).
    pub continuation: Option<String>,
}

/// A request that cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// No such source.
    #[error("no source {0:?} in the configuration")]
    UnknownSource(String),
    /// No such job.
    #[error("no backfill job {0:?} in the ledger")]
    UnknownJob(String),
    /// A field is wrong.
    #[error("{field}: {message}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Processing failed outside any one object (listing, the ledger, the queue).
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

/// A request checked against the configuration.
struct Scope<'a> {
    source: &'a Source,
    prefix: String,
    since: Option<i64>,
    until: Option<i64>,
    mode: WorkMode,
}

impl Scope<'_> {
    fn in_range(&self, o: &ObjectMeta) -> bool {
        o.key.starts_with(&self.prefix)
            && self.source.matches(&self.source.doc.bucket, &o.key)
            && self.since.is_none_or(|s| o.last_modified >= s)
            && self.until.is_none_or(|u| o.last_modified < u)
    }

    /// Is `o` to be enqueued, given its ledger record? `Err(true)`: left out as done.
    fn wanted(&self, o: &ObjectMeta, record: Option<&Record>) -> std::result::Result<(), bool> {
        let done = record.is_some_and(|r| done_for(r, &o.etag));
        match self.mode {
            WorkMode::Replay => Ok(()),
            WorkMode::Process if done => Err(true),
            WorkMode::Process => Ok(()),
            WorkMode::StaleConfig => match record {
                Some(r) if done && committed_under_other(r, &self.source.fingerprint) => Ok(()),
                _ => Err(done),
            },
        }
    }
}

fn scope<'a>(config: &'a Config, req: &Request) -> Result<Scope<'a>, RequestError> {
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
    if req.inventory.is_some() && req.continuation.is_some() {
        return Err(RequestError::Invalid {
            field: "continuation",
            message: "a key to start after cannot be combined with an inventory".into(),
        });
    }
    let mode = if req.replay {
        WorkMode::Replay
    } else if req.stale_config {
        WorkMode::StaleConfig
    } else {
        WorkMode::Process
    };
    // The per-object path refuses these for a keyed source; refuse the job up front.
    if source.doc.bookmark.is_some() && mode != WorkMode::Process {
        return Err(RequestError::Invalid {
            field: if req.replay { "replay" } else { "stale_config" },
            message: format!(
                "source {} has bookmark keys: its objects can only be processed in order, \
                 through the ledger",
                source.id()
            ),
        });
    }
    Ok(Scope {
        source,
        prefix,
        since: parse_time("since", &req.since)?,
        until: parse_time("until", &req.until)?,
        mode,
    })
}

/// Where the planner's objects come from: a listing of the source, or an inventory. Each
/// entry comes with its position (a key, or `<file>:<row>`); a page ends at a position.
enum Walk<'a> {
    Listing(Listing<'a>),
    Inventory(Box<InventoryWalk>),
}

/// A page of candidates, in order, with the position of each, and the position the page
/// ends at (it may cover entries that were not objects of the source, such as inventory rows
/// of delete markers).
struct Page {
    entries: Vec<(ObjectMeta, String)>,
    end: String,
}

impl Walk<'_> {
    async fn next(&mut self, store: &dyn ObjectStore) -> Result<Option<Page>> {
        match self {
            Walk::Listing(l) => l.next(store).await,
            Walk::Inventory(i) => Ok(i
                .next(store)
                .await?
                .map(|(entries, end)| Page { entries, end })),
        }
    }
}

/// A listing of `prefix` after a key, in pages, optionally stopping after a key.
struct Listing<'a> {
    bucket: &'a str,
    prefix: &'a str,
    after: Option<String>,
    through: Option<String>,
    token: Option<String>,
    finished: bool,
}

impl Listing<'_> {
    async fn next(&mut self, store: &dyn ObjectStore) -> Result<Option<Page>> {
        if self.finished {
            return Ok(None);
        }
        let page = match (&self.token, &self.after) {
            (Some(t), _) => store.list(self.bucket, self.prefix, Some(t)).await?,
            (None, Some(a)) => store.list_after(self.bucket, self.prefix, a).await?,
            (None, None) => store.list(self.bucket, self.prefix, None).await?,
        };
        self.token = page.next;
        self.finished = self.token.is_none();
        let mut entries = Vec::with_capacity(page.objects.len());
        for o in page.objects {
            if self.through.as_deref().is_some_and(|t| o.key.as_str() > t) {
                self.finished = true;
                break;
            }
            let key = o.key.clone();
            entries.push((o, key));
        }
        let Some(end) = entries.last().map(|(_, k)| k.clone()) else {
            return Ok(None);
        };
        Ok(Some(Page { entries, end }))
    }
}

/// What a page made: items to enqueue and counts.
#[derive(Default)]
struct Planned {
    items: Vec<WorkItem>,
    /// Objects in range handled (up to the cut, when there is one).
    listed: u64,
    already_done: u64,
    bytes: u64,
    /// The page was cut by a bound after this position (`None`: before its first entry);
    /// the rest of it is for the next call.
    cut: Option<Option<String>>,
}

/// Serve one planner call: create the job (or resume it), then list and enqueue until a
/// bound, the deadline (`stop_at_ms`) or the end of the range.
pub async fn plan(
    p: &Pipeline,
    queue: &dyn WorkQueue,
    req: &Request,
    stop_at_ms: i64,
    packing: Packing,
) -> Result<Response, RequestError> {
    let config: &Config = &p.config;
    let now = p.clock.now_ms();
    // A resumed job runs under the request it was started with.
    let (req, mut job) = match &req.job {
        Some(id) => {
            let (job, _) = p
                .ledger
                .get_job(id)
                .await
                .map_err(ProcessError::from)?
                .filter(|(j, _)| j.kind == JobKind::Backfill)
                .ok_or_else(|| RequestError::UnknownJob(id.clone()))?;
            let stored: Request =
                serde_json::from_value(job.request.clone()).map_err(|e| RequestError::Invalid {
                    field: "job",
                    message: format!("job {id} has an unreadable request: {e}"),
                })?;
            (stored, Some(job))
        }
        None => (req.clone(), None),
    };
    let scope = scope(config, &req)?;
    let manifest = match &req.inventory {
        Some(location) => {
            Some(Manifest::load(&*p.store, location, &scope.source.doc.bucket).await?)
        }
        None => None,
    };
    if job.is_none() && !req.dry_run {
        let new = Job {
            id: new_job_id(JobKind::Backfill, now),
            kind: JobKind::Backfill,
            source_id: scope.source.id().to_string(),
            request: serde_json::to_value(&req).expect("a request serializes"),
            rev: 1,
            started_at: now,
            updated_at: now,
            plan: Plan {
                cursor: req.continuation.clone(),
                ..Plan::default()
            },
        };
        if !p
            .ledger
            .create_job(&new)
            .await
            .map_err(ProcessError::from)?
        {
            return Err(RequestError::Invalid {
                field: "job",
                message: format!("a job {} exists already", new.id),
            });
        }
        job = Some(new);
    }
    let mut resp = Response {
        job: job.as_ref().map(|j| j.id.clone()),
        source: scope.source.id().to_string(),
        ..Response::default()
    };
    let planner = Planner {
        p,
        queue,
        scope: &scope,
        manifest: manifest.as_ref(),
        packing,
    };
    if let Some(job) = &mut job {
        job.plan.paused = None;
        job.plan.slices += 1;
        if job.plan.done {
            resp.done = true;
            resp.continuation = job.plan.cursor.clone();
            return Ok(resp);
        }
        // A page a previous call recorded and may not have sent: send it again first.
        if let Some(pending) = job.plan.pending.clone() {
            planner.resend(job, &pending, &mut resp).await?;
        }
    }
    let cursor = match &job {
        Some(j) => j.plan.cursor.clone(),
        None => req.continuation.clone(),
    };
    let mut walk = planner.walk(cursor.clone(), None)?;
    let mut position = cursor;
    let mut taken = (0u64, 0u64); // objects, bytes of this call
    loop {
        if p.clock.now_ms() >= stop_at_ms {
            resp.stopped = Some("deadline".into());
            break;
        }
        let Some(page) = walk.next(&*p.store).await? else {
            resp.done = true;
            break;
        };
        let planned = planner.admit(page.entries, &req, &mut taken).await?;
        resp.listed += planned.listed;
        resp.already_done += planned.already_done;
        resp.enqueued += planned.items.len() as u64;
        resp.bytes += planned.bytes;
        let cut = planned.cut.clone();
        let end = match &cut {
            Some(c) => c.clone(),
            None => Some(page.end.clone()),
        };
        match &mut job {
            None => {
                for item in &planned.items {
                    if resp.would_process.len() < 1000 {
                        resp.would_process.push(item.key.clone());
                    }
                }
            }
            Some(job) => {
                if let Some(through) = &end
                    && Some(through) != position.as_ref()
                {
                    resp.messages += planner
                        .send_page(job, position.clone(), through.clone(), planned)
                        .await?;
                }
            }
        }
        position = end.or(position);
        if cut.is_some() {
            resp.stopped = Some(
                if req.max_objects.is_some_and(|m| taken.0 >= m) {
                    "max_objects"
                } else {
                    "max_bytes"
                }
                .into(),
            );
            break;
        }
    }
    resp.continuation = position;
    if let Some(job) = &mut job {
        job.plan.done = resp.done;
        job.plan.paused = resp.stopped.clone().filter(|s| s != "deadline");
        if resp.done {
            job.plan.planned_at = Some(p.clock.now_ms());
        }
        planner.save(job).await?;
    }
    Ok(resp)
}

/// The body of the planner: its ports and the checked request.
struct Planner<'a> {
    p: &'a Pipeline,
    queue: &'a dyn WorkQueue,
    scope: &'a Scope<'a>,
    manifest: Option<&'a Manifest>,
    packing: Packing,
}

impl Planner<'_> {
    /// The walk of the source's objects after position `after` (from the start when
    /// `None`), stopping after position `through` when given (to list a page again).
    fn walk(&self, after: Option<String>, through: Option<String>) -> Result<Walk<'_>> {
        Ok(match self.manifest {
            Some(m) => Walk::Inventory(Box::new(InventoryWalk::new(m, after, through)?)),
            None => Walk::Listing(Listing {
                bucket: &self.scope.source.doc.bucket,
                prefix: &self.scope.prefix,
                after,
                through,
                token: None,
                finished: false,
            }),
        })
    }

    /// Filter a page: in range, not done (one ledger read for the page), within the bounds
    /// (`taken`: objects and bytes this call enqueued so far).
    async fn admit(
        &self,
        entries: Vec<(ObjectMeta, String)>,
        req: &Request,
        taken: &mut (u64, u64),
    ) -> Result<Planned> {
        let keys: Vec<String> = entries
            .iter()
            .filter(|(o, _)| self.scope.in_range(o))
            .map(|(o, _)| o.key.clone())
            .collect();
        let records: HashMap<String, Record> = if keys.is_empty() {
            HashMap::new()
        } else {
            self.p
                .ledger
                .get_many(self.scope.source.id(), &keys)
                .await?
                .into_iter()
                .map(|r| (r.key.clone(), r))
                .collect()
        };
        let mut planned = Planned::default();
        let mut last: Option<String> = None;
        for (o, position) in entries {
            if self.scope.in_range(&o) {
                match self.scope.wanted(&o, records.get(&o.key)) {
                    Err(done) => planned.already_done += u64::from(done),
                    Ok(()) => {
                        let over = req.max_objects.is_some_and(|m| taken.0 >= m)
                            || req.max_bytes.is_some_and(|m| taken.1 >= m);
                        if over {
                            planned.cut = Some(last);
                            return Ok(planned);
                        }
                        taken.0 += 1;
                        taken.1 += o.size;
                        planned.bytes += o.size;
                        planned.items.push(WorkItem {
                            key: o.key,
                            etag: o.etag,
                            size: o.size,
                            version_id: o.version_id,
                        });
                    }
                }
                planned.listed += 1;
            }
            last = Some(position);
        }
        Ok(planned)
    }

    /// Record the page as pending, send its messages, record it as sent: the job's cursor
    /// moves to `through`. Returns the messages sent.
    async fn send_page(
        &self,
        job: &mut Job,
        after: Option<String>,
        through: String,
        planned: Planned,
    ) -> Result<u64> {
        let batches = pack(
            &job.id,
            self.scope.source.id(),
            self.scope.mode,
            job.plan.next_message,
            planned.items,
            self.packing,
        );
        let n = batches.len() as u64;
        job.plan.pending = Some(PendingPage {
            after,
            through: through.clone(),
            first_message: job.plan.next_message,
            messages: n,
        });
        job.plan.next_message += n;
        self.save(job).await?;
        self.p.faults.check(Step::PageRecorded, &through)?;
        let bodies: Vec<String> = batches.iter().map(|b| b.to_body()).collect();
        self.queue.send(&bodies).await?;
        self.p.faults.check(Step::PageSent, &through)?;
        let plan = &mut job.plan;
        plan.pending = None;
        plan.cursor = Some(through);
        plan.listed += planned.listed;
        plan.already_done += planned.already_done;
        plan.enqueued += batches.iter().map(|b| b.items.len() as u64).sum::<u64>();
        plan.bytes += planned.bytes;
        plan.messages += n;
        self.save(job).await?;
        Ok(n)
    }

    /// Send a page a previous call recorded as pending, under the same message numbers.
    async fn resend(
        &self,
        job: &mut Job,
        pending: &PendingPage,
        resp: &mut Response,
    ) -> Result<()> {
        let mut walk = self.walk(pending.after.clone(), Some(pending.through.clone()))?;
        let mut items = Vec::new();
        let (mut listed, mut already_done, mut bytes) = (0, 0, 0);
        while let Some(page) = walk.next(&*self.p.store).await? {
            // The page was admitted before: its bounds are not applied again.
            let planned = self
                .admit(page.entries, &Request::default(), &mut (0, 0))
                .await?;
            listed += planned.listed;
            already_done += planned.already_done;
            bytes += planned.bytes;
            items.extend(planned.items);
        }
        let enqueued = items.len() as u64;
        let mut batches = pack(
            &job.id,
            self.scope.source.id(),
            self.scope.mode,
            pending.first_message,
            items,
            self.packing,
        );
        let recorded = pending.first_message..pending.first_message + pending.messages;
        // Numbers the page no longer fills get an empty message (so each recorded number
        // is finished); a page that now needs more takes new numbers.
        let mut next = job.plan.next_message;
        for b in &mut batches {
            if !recorded.contains(&b.message) {
                b.message = next;
                next += 1;
            }
        }
        let filled = batches.len() as u64;
        for message in pending.first_message + filled.min(pending.messages)..recorded.end {
            batches.push(WorkBatch::empty(
                &job.id,
                self.scope.source.id(),
                self.scope.mode,
                message,
            ));
        }
        let bodies: Vec<String> = batches.iter().map(|b| b.to_body()).collect();
        self.queue.send(&bodies).await?;
        let plan = &mut job.plan;
        plan.next_message = next;
        plan.pending = None;
        plan.cursor = Some(pending.through.clone());
        plan.listed += listed;
        plan.already_done += already_done;
        plan.enqueued += enqueued;
        plan.bytes += bytes;
        plan.messages += batches.len() as u64;
        self.save(job).await?;
        resp.listed += listed;
        resp.already_done += already_done;
        resp.enqueued += enqueued;
        resp.bytes += bytes;
        resp.messages += batches.len() as u64;
        Ok(())
    }

    /// Write the job, conditional on its revision: a conflict means another planner call
    /// runs the same job, and this one stops.
    async fn save(&self, job: &mut Job) -> Result<()> {
        let expected = job.rev;
        job.rev += 1;
        job.updated_at = self.p.clock.now_ms();
        match self.p.ledger.replace_job(job, expected).await? {
            JobWrite::Written => Ok(()),
            JobWrite::Conflict(_) => Err(ProcessError::Unsupported {
                source_id: job.source_id.clone(),
                message: format!(
                    "job {}: another planner call changed it (revision {expected} moved on); \
                     this one stops",
                    job.id
                ),
            }),
        }
    }
}

/// Was `r`'s commit made under another source configuration than `fingerprint`'s? (What
/// `stale_config` re-processes.)
pub fn committed_under_other(r: &Record, fingerprint: &str) -> bool {
    r.committed
        .as_ref()
        .is_some_and(|c| c.config_fp != fingerprint)
}

/// Is `r` done for the object version with `etag`?
pub fn done_for(r: &Record, etag: &str) -> bool {
    r.status == Status::Done
        && matches!(
            r.committed.as_ref().map(|c| &c.target),
            Some(Target::Version(v)) if v.etag.as_deref() == Some(etag)
        )
}
