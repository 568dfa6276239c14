//! The ledger's data model: one [`Record`] per `(source_id, key)`, the version it refers to,
//! and the claim, commit and failure state the protocol moves it through.
//!
//! A record is plain data. It is stored field for field as a DynamoDB item (see
//! `aws::dynamodb` for the item layout) and as a SQLite row, so an operator can read it with
//! the tools they already have. Every rule that changes a record lives in [`crate::protocol`].

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::events::Sequencer;

/// One version of one source object: what a claim, a commit or a failure refers to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRef {
    /// The identity of the version: the S3 versionId where the bucket is versioned, else the
    /// ETag (without quotes).
    pub version: String,
    /// S3 versionId, when the bucket is versioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    /// ETag without quotes; the GET is pinned to it (`If-Match`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// The S3 event sequencer of the write that created this version, when an event told us.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequencer: Option<Sequencer>,
    /// Size in bytes, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// A delete of the object (a `DeleteObject` or a delete marker).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteRef {
    /// The sequencer of the delete event, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequencer: Option<Sequencer>,
    /// The versionId the delete event named (a delete marker's own id, or the version removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    /// True for `ObjectRemoved:DeleteMarkerCreated`.
    #[serde(default)]
    pub delete_marker: bool,
}

/// What a unit of work brings the key to: a new version, or a deletion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    /// Process this version of the object.
    Version(VersionRef),
    /// The object was deleted.
    Delete(DeleteRef),
}

impl Target {
    /// The sequencer of the event behind this target, if any.
    pub fn sequencer(&self) -> Option<&Sequencer> {
        match self {
            Target::Version(v) => v.sequencer.as_ref(),
            Target::Delete(d) => d.sequencer.as_ref(),
        }
    }

    /// Does this target denote the same state of the object as `other`?
    ///
    /// Two versions are the same when their identities match; two deletes are the same when
    /// their sequencers match (or neither has one).
    pub fn same_as(&self, other: &Target) -> bool {
        match (self, other) {
            (Target::Version(a), Target::Version(b)) => a.version == b.version,
            (Target::Delete(a), Target::Delete(b)) => a.sequencer == b.sequencer,
            _ => false,
        }
    }

    /// Order two targets of the same key by their event sequencers. `None` when either has
    /// no sequencer (listing-driven work, or an emulator that sends none): the pinned GET and
    /// the HEAD before a delete then decide what is current.
    pub fn order(&self, other: &Target) -> Option<Ordering> {
        Some(self.sequencer()?.cmp(other.sequencer()?))
    }

    /// A short human label: `version <id>` or `delete`.
    pub fn label(&self) -> String {
        match self {
            Target::Version(v) => format!("version {}", v.version),
            Target::Delete(_) => "delete".to_string(),
        }
    }
}

/// One output object written for a committed version.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct OutputRef {
    /// Output bucket.
    pub bucket: String,
    /// Output key.
    pub key: String,
    /// ETag the output had when committed; replacements are conditional on it.
    pub etag: String,
    /// Rows in this file, for a file of a partitioned set (the commit's `rows` is the set's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
    /// Exact sums of the configured columns in this file, for a file of a partitioned set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sums: BTreeMap<String, String>,
}

/// The committed state of a key: the version processed (with its numbers), or a tombstone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Committed {
    /// The version (or delete) that was committed.
    pub target: Target,
    /// Rows written (0 for a delete).
    pub rows: u64,
    /// Exact sums of the configured columns, as decimal strings.
    #[serde(default)]
    pub sums: BTreeMap<String, String>,
    /// Outputs that hold this version's rows (kept outputs of a delete under policy `keep`).
    #[serde(default)]
    pub outputs: Vec<OutputRef>,
    /// Rows of the version set aside under `on_bad_row: reject` (not in `rows` or `sums`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rejected: u64,
    /// The rejects file holding them (JSON Lines), when there are any (or a delete kept it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejects: Option<OutputRef>,
    /// Rows of the version written with something in the rescued column (counted in `rows`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rescued: u64,
    /// Values of fields the schema does not name, dropped under `on_unknown_field: ignore`.
    #[serde(default, skip_serializing_if = "IgnoredFields::is_empty")]
    pub ignored: IgnoredFields,
    /// Fingerprint of the source configuration the version was processed under.
    pub config_fp: String,
    /// When the commit happened (ms since the epoch).
    pub committed_at: i64,
    /// The run (invocation or CLI run) that committed it.
    pub run_id: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Values of fields the schema does not name, dropped under `on_unknown_field: ignore`: how
/// many, and how many of each field. A field is named by its path, with `[]` for any array
/// element and `{}` for any map value (`userIdentity.extra`, `resources[].tags`). A commit
/// names at most [`MAX_IGNORED_PATHS`](crate::convert::MAX_IGNORED_PATHS) fields (the first
/// its version met); the values of the others count in `values` only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IgnoredFields {
    /// Values dropped.
    pub values: u64,
    /// Values dropped per field.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: BTreeMap<String, u64>,
}

impl IgnoredFields {
    /// Nothing was ignored.
    pub fn is_empty(&self) -> bool {
        self.values == 0
    }

    /// Adds the counts of `other`, every field it names included.
    pub fn add(&mut self, other: &IgnoredFields) {
        self.values += other.values;
        for (path, n) in &other.fields {
            *self.fields.entry(path.clone()).or_default() += n;
        }
    }

    /// The `n` fields with the most values, most first (ties by path).
    pub fn most_frequent(&self, n: usize) -> Vec<(&str, u64)> {
        let mut fields: Vec<(&str, u64)> =
            self.fields.iter().map(|(p, c)| (p.as_str(), *c)).collect();
        fields.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        fields.truncate(n);
        fields
    }

    /// These counts naming only the `n` fields with the most values (the values of the
    /// others still count in `values`).
    pub fn trimmed(&self, n: usize) -> IgnoredFields {
        IgnoredFields {
            values: self.values,
            fields: self
                .most_frequent(n)
                .into_iter()
                .map(|(p, c)| (p.to_string(), c))
                .collect(),
        }
    }

    /// Values of fields not named in `fields`.
    pub fn unnamed(&self) -> u64 {
        self.values.saturating_sub(self.fields.values().sum())
    }

    /// The `n` fields with the most values, in words: `userIdentity.extra (3), tags (2)`,
    /// then how many values the other fields held (`, 4 in other fields`).
    pub fn summary(&self, n: usize) -> String {
        let shown = self.most_frequent(n);
        let rest = self
            .values
            .saturating_sub(shown.iter().map(|(_, c)| c).sum());
        let mut parts: Vec<String> = shown.iter().map(|(p, c)| format!("{p} ({c})")).collect();
        if rest > 0 {
            parts.push(format!("{rest} in other fields"));
        }
        parts.join(", ")
    }
}

impl From<&crate::convert::Ignored> for IgnoredFields {
    fn from(ignored: &crate::convert::Ignored) -> Self {
        IgnoredFields {
            values: ignored.values,
            fields: ignored.fields.clone(),
        }
    }
}

impl Committed {
    /// Every object in the lake this commit refers to: its outputs, then its rejects file.
    pub fn files(&self) -> impl Iterator<Item = &OutputRef> {
        self.outputs.iter().chain(&self.rejects)
    }
}

/// A live or expired claim: one worker's exclusive right to bring the key to `target`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// Random token of this claim; a commit or release succeeds only while it is still here.
    pub token: String,
    /// What the holder is bringing the key to.
    pub target: Target,
    /// Lease expiry (ms since the epoch): the invocation deadline plus a margin.
    pub lease_until: i64,
    /// When the claim was taken.
    pub claimed_at: i64,
    /// The run (invocation or CLI run) holding it.
    pub run_id: String,
}

/// Status of a record, stored for queries and derived from the rest by [`Record::derive_status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// A worker holds a claim (live or expired).
    Claimed,
    /// The newest known version is processed.
    Done,
    /// The object is deleted and its outputs handled by policy.
    Deleted,
    /// A newer version is known and not processed yet.
    Pending,
    /// The last attempt failed; attempts are left.
    Failed,
    /// Attempts are exhausted; only a newer version (or an operator) moves it on.
    Quarantined,
    /// A claim was released because the version was no longer current; the newer version's
    /// event (or reconcile) brings it.
    Released,
}

impl Status {
    /// The name used in items, rows and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Claimed => "claimed",
            Status::Done => "done",
            Status::Deleted => "deleted",
            Status::Pending => "pending",
            Status::Failed => "failed",
            Status::Quarantined => "quarantined",
            Status::Released => "released",
        }
    }
}

/// The ledger record of one key of one source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The stable source id.
    pub source_id: String,
    /// The decoded S3 key.
    pub key: String,
    /// Derived from the fields below on every write; stored for queries.
    pub status: Status,
    /// Bumped by every write; every write is conditional on the revision it read.
    pub rev: u64,
    /// What has been committed for this key, if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed: Option<Committed>,
    /// The claim of a worker, if any (it may have expired).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<Claim>,
    /// The newest known target that is not committed yet: a version that arrived while another
    /// was claimed ("superseded by"), or the version whose attempts failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Target>,
    /// Files an attempt announced it would write under partitioning by columns (output keys
    /// in the source's output bucket) before writing them, and that no commit names yet: the
    /// next attempt (of any version) deletes those its own set lacks, and a commit clears the
    /// list. So a crash between the files of a set never leaves a file behind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writing: Vec<String>,
    /// Failed attempts at the pending (or claimed) target.
    #[serde(default)]
    pub attempts: u32,
    /// The last error, naming the object and where.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Why the last claim ended without a commit, when it did (e.g. "not current").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Last write (ms since the epoch).
    pub updated_at: i64,
    /// Row-level bookmark state: on a source's lock record (`<source_id>~bookmark`), the
    /// source's mark, index and counters; on an object's record, the mark after it and its
    /// own counts (see [`crate::bookmark`]). None for sources without bookmark keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bookmark: Option<BookmarkState>,
}

/// Rows a bookmarked source classified.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BookmarkCounts {
    /// Objects committed.
    pub objects: u64,
    /// Rows beyond the mark, emitted to the output.
    pub emitted: u64,
    /// Rows at or below the mark whose key was never accounted for: written to the
    /// late-rows output or dropped, by policy.
    pub late: u64,
    /// Rows whose key was already accounted for (re-exported), not emitted again.
    pub skipped: u64,
}

impl BookmarkCounts {
    /// Add `other` to these counts.
    pub fn add(&mut self, other: &BookmarkCounts) {
        self.objects += other.objects;
        self.emitted += other.emitted;
        self.late += other.late;
        self.skipped += other.skipped;
    }

    /// Rows of the source objects (emitted + late + skipped).
    pub fn rows(&self) -> u64 {
        self.emitted + self.late + self.skipped
    }
}

/// A mark advance prepared by the holder of a source's bookmark lock, applied once the
/// object it belongs to is committed (see [`crate::bookmark::settle`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Advance {
    /// The object's key.
    pub key: String,
    /// The object version's identity.
    pub version: String,
    /// The holder's claim token on the object's record.
    pub object_token: String,
    /// The holder's run.
    pub run_id: String,
    /// The output the commit records (how a settler recognizes the commit).
    pub output: OutputRef,
    /// The mark after the object (typed strings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark: Option<Vec<String>>,
    /// The index object after the object.
    pub index: OutputRef,
    /// The object's counts.
    pub delta: BookmarkCounts,
    /// When it was prepared (ms since the epoch).
    pub at: i64,
}

/// See [`Record::bookmark`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BookmarkState {
    /// The high-water mark, one typed string per key column (`None`: nothing emitted yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark: Option<Vec<String>>,
    /// Counts: the source's totals on the lock record, the object's own on its record.
    #[serde(default)]
    pub counts: BookmarkCounts,
    /// The index object of the keys accounted for (lock record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<OutputRef>,
    /// The late-rows output of the committed version (object record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_output: Option<OutputRef>,
    /// The advance prepared by the lock's holder, not yet applied (lock record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advance: Option<Box<Advance>>,
    /// The key of the object the lock's holder is processing (lock record, while held):
    /// whoever takes the lock after the holder died removes its uncommitted outputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
}

impl Record {
    /// The status implied by the record's fields.
    pub fn derive_status(&self, max_attempts: u32) -> Status {
        if self.claim.is_some() {
            return Status::Claimed;
        }
        if self.pending.is_some() {
            return if self.attempts >= max_attempts {
                Status::Quarantined
            } else if self.attempts > 0 {
                Status::Failed
            } else {
                Status::Pending
            };
        }
        match self.committed.as_ref().map(|c| &c.target) {
            Some(Target::Version(_)) => Status::Done,
            Some(Target::Delete(_)) => Status::Deleted,
            None => Status::Released,
        }
    }
}

/// One operator action, as the audit log keeps it: every CLI command that changes state
/// (`run`, `rewind`, `reset`, `mark-processed`, `forget`, `mode`, `replay`) writes one entry
/// per source it touched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// When (ms since the epoch).
    pub at: i64,
    /// The source acted on.
    pub source_id: String,
    /// The command (`rewind`, `reset`, …).
    pub command: String,
    /// Its arguments, and for bulk commands the keys affected (capped).
    pub args: serde_json::Value,
    /// How many objects (or records) it affected.
    pub affected: u64,
    /// Who ran it: `$USER`, or `unknown`.
    pub operator: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed() -> Committed {
        Committed {
            target: Target::Version(VersionRef {
                version: "v1".into(),
                version_id: None,
                etag: Some("v1".into()),
                sequencer: None,
                size: Some(3),
            }),
            rows: 3,
            sums: BTreeMap::new(),
            outputs: Vec::new(),
            rejected: 0,
            rejects: None,
            rescued: 0,
            ignored: IgnoredFields::default(),
            config_fp: "fp".into(),
            committed_at: 1,
            run_id: "run".into(),
        }
    }

    #[test]
    fn a_commit_without_rescued_or_ignored_values_reads_and_writes_as_before() {
        let old = r#"{"target":{"kind":"version","version":"v1","etag":"v1","size":3},"rows":3,"sums":{},"outputs":[],"config_fp":"fp","committed_at":1,"run_id":"run"}"#;
        let read: Committed = serde_json::from_str(old).unwrap();
        assert_eq!(read, committed());
        assert_eq!(serde_json::to_string(&read).unwrap(), old);
    }

    #[test]
    fn rescued_rows_and_ignored_fields_round_trip() {
        let mut c = committed();
        c.rescued = 2;
        c.ignored = IgnoredFields {
            values: 7,
            fields: BTreeMap::from([
                ("userIdentity.extra".into(), 4),
                ("detail[\"x.y\"]".into(), 1),
            ]),
        };
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["rescued"], 2);
        assert_eq!(
            json["ignored"],
            serde_json::json!({"values": 7, "fields": {"userIdentity.extra": 4, "detail[\"x.y\"]": 1}})
        );
        assert_eq!(serde_json::from_value::<Committed>(json).unwrap(), c);
    }

    #[test]
    fn ignored_fields_add_up_and_name_the_most_frequent() {
        let mut total = IgnoredFields::default();
        assert_eq!(total.summary(3), "");
        total.add(&IgnoredFields {
            values: 5,
            fields: BTreeMap::from([("a".into(), 1), ("b".into(), 3)]),
        });
        total.add(&IgnoredFields {
            values: 6,
            fields: BTreeMap::from([("a".into(), 2), ("c".into(), 3)]),
        });
        assert_eq!(total.values, 11);
        assert_eq!(total.most_frequent(2), [("a", 3), ("b", 3)]);
        assert_eq!(total.unnamed(), 2, "values past the named fields");
        assert_eq!(total.summary(2), "a (3), b (3), 5 in other fields");
        assert_eq!(total.summary(5), "a (3), b (3), c (3), 2 in other fields");
        let top = total.trimmed(1);
        assert_eq!((top.values, top.fields.len()), (11, 1));
        assert_eq!(top.unnamed(), 8);

        let mut ignored = crate::convert::Ignored::default();
        ignored.add("resources[].tags", 2);
        assert_eq!(
            IgnoredFields::from(&ignored),
            IgnoredFields {
                values: 2,
                fields: BTreeMap::from([("resources[].tags".into(), 2)]),
            }
        );
    }
}
