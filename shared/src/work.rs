//! Work items: what a bulk job hands to the fleet. The backfill planner lists a source, leaves
//! out what the ledger has done, and sends the rest as [`WorkBatch`] messages to the work
//! queue; the ingest function takes them from SQS like S3 events and drives each item through
//! the same per-object path (claim, pinned GET, convert, conditional PUT, commit).
//!
//! A message body is JSON:
//! `{"tidemark": "work", "job": "bf-…", "message": 17, "source": "orders", "mode": "process",
//!   "items": [{"key": "in/a.csv", "etag": "…", "size": 123}]}`.
//!
//! # A listing never undoes an event
//! An item says which version the listing saw (its ETag) but carries no sequencer, so the
//! ledger cannot order it against a version an event brought. The rule that makes it safe:
//! (1) the item's GET is pinned to the listed ETag, so it can only ever commit the version
//! that is the object's current one at that moment — if the object moved on (overwritten or
//! deleted since the listing), the claim is released with nothing written, and the newer
//! version's own event (or reconcile) brings it; (2) it never takes the place of a version an
//! event recorded and nobody committed yet: that version is worked on first, and the
//! listing's is kept behind it (see [`crate::protocol::decide_claim`]); (3) a replay writes an
//! output only over one written from the same source version (see
//! [`crate::process::Pipeline::process`]). So an item from an old listing costs at most a
//! claim and a GET; it cannot bring an older version back into the lake or the ledger.

use serde::{Deserialize, Serialize};

use crate::model::{Target, VersionRef};

/// The tag of a work message body (`"tidemark": "work"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkTag {
    /// A batch of work items.
    Work,
}

/// What a worker does with each item.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkMode {
    /// Process the version unless the ledger has it done (a backfill).
    #[default]
    Process,
    /// Process it with the ledger untouched; its output is replaced by key (a replay).
    Replay,
    /// Process it again if its commit was made under another configuration (stale_config).
    StaleConfig,
}

/// One object of a listing: the version the listing saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkItem {
    /// The key.
    pub key: String,
    /// Its ETag when listed (without quotes).
    pub etag: String,
    /// Its size in bytes when listed.
    pub size: u64,
    /// Its versionId, when the listing gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
}

impl WorkItem {
    /// The target a worker claims: the listed version, without a sequencer (a listing has
    /// none).
    pub fn target(&self) -> Target {
        Target::Version(VersionRef {
            version: self.etag.clone(),
            version_id: self.version_id.clone(),
            etag: Some(self.etag.clone()),
            sequencer: None,
            size: Some(self.size),
        })
    }
}

/// One message of work items.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkBatch {
    /// Always `work`: how a queue consumer tells this body from an S3 event.
    pub tidemark: WorkTag,
    /// The job the items belong to.
    pub job: String,
    /// The message's number in the job (its counts are added once per number).
    pub message: u64,
    /// The source of every item.
    pub source: String,
    /// What to do with each item.
    #[serde(default)]
    pub mode: WorkMode,
    /// The items.
    pub items: Vec<WorkItem>,
}

impl WorkBatch {
    /// Message `message` of job `job`, with no items yet.
    pub fn empty(job: &str, source: &str, mode: WorkMode, message: u64) -> Self {
        Self {
            tidemark: WorkTag::Work,
            job: job.to_string(),
            message,
            source: source.to_string(),
            mode,
            items: Vec::new(),
        }
    }

    /// The message body.
    pub fn to_body(&self) -> String {
        serde_json::to_string(self).expect("a work batch serializes")
    }
}

/// How items are packed into messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packing {
    /// Items per message at most.
    pub max_items: usize,
    /// Bytes of a message body at most (SQS takes up to 256 KiB in every region and
    /// emulator; it bills per 64 KiB).
    pub max_bytes: usize,
}

impl Default for Packing {
    /// 50 items, 60 KiB: a message is one billed SQS request, and a message that fails on
    /// one item costs the others a duplicate check each when it comes back.
    fn default() -> Self {
        Self {
            max_items: 50,
            max_bytes: 60 * 1024,
        }
    }
}

/// Pack `items` into messages numbered from `first_message`: at most `packing.max_items`
/// items and `packing.max_bytes` bytes of body each (an item too large for an empty message
/// goes alone).
pub fn pack(
    job: &str,
    source: &str,
    mode: WorkMode,
    first_message: u64,
    items: Vec<WorkItem>,
    packing: Packing,
) -> Vec<WorkBatch> {
    let empty = |message| WorkBatch::empty(job, source, mode, message);
    let overhead = empty(first_message).to_body().len();
    let mut out: Vec<WorkBatch> = Vec::new();
    let mut bytes = 0;
    for item in items {
        let size = serde_json::to_string(&item).map_or(0, |s| s.len()) + 1;
        let fits = out.last().is_some_and(|b| {
            b.items.len() < packing.max_items && overhead + bytes + size <= packing.max_bytes
        });
        if !fits {
            out.push(empty(first_message + out.len() as u64));
            bytes = 0;
        }
        bytes += size;
        out.last_mut()
            .expect("a batch was just pushed")
            .items
            .push(item);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(key: &str) -> WorkItem {
        WorkItem {
            key: key.into(),
            etag: "0123456789abcdef0123456789abcdef".into(),
            size: 10,
            version_id: None,
        }
    }

    #[test]
    fn items_pack_into_numbered_messages_within_both_limits() {
        let items: Vec<WorkItem> = (0..120).map(|i| item(&format!("in/{i:04}.csv"))).collect();
        let batches = pack(
            "bf-1",
            "orders",
            WorkMode::Process,
            7,
            items.clone(),
            Packing::default(),
        );
        assert_eq!(
            batches.iter().map(|b| b.items.len()).collect::<Vec<_>>(),
            [50, 50, 20]
        );
        assert_eq!(
            batches.iter().map(|b| b.message).collect::<Vec<_>>(),
            [7, 8, 9]
        );
        let tight = Packing {
            max_items: 1000,
            max_bytes: 1024,
        };
        let batches = pack("bf-1", "orders", WorkMode::Replay, 0, items.clone(), tight);
        assert!(
            batches.iter().all(|b| b.to_body().len() <= 1024),
            "within max_bytes"
        );
        assert_eq!(batches.iter().map(|b| b.items.len()).sum::<usize>(), 120);
        // Round trip, in order.
        let back: Vec<WorkItem> = batches
            .iter()
            .flat_map(|b| {
                serde_json::from_str::<WorkBatch>(&b.to_body())
                    .unwrap()
                    .items
            })
            .collect();
        assert_eq!(back, items);
        // An item larger than a message goes alone.
        let big = item(&"k".repeat(2000));
        let batches = pack(
            "bf-1",
            "orders",
            WorkMode::Process,
            0,
            vec![item("a"), big, item("b")],
            tight,
        );
        assert_eq!(
            batches.iter().map(|b| b.items.len()).collect::<Vec<_>>(),
            [1, 1, 1]
        );
        assert!(pack("bf-1", "orders", WorkMode::Process, 0, Vec::new(), tight).is_empty());
    }

    #[test]
    fn a_body_names_its_kind_and_refuses_unknown_fields() {
        let body = pack(
            "bf-1",
            "orders",
            WorkMode::StaleConfig,
            3,
            vec![item("a b")],
            Packing::default(),
        )[0]
        .to_body();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            (v["tidemark"].as_str(), v["mode"].as_str()),
            (Some("work"), Some("stale_config"))
        );
        let extra = body.replacen('{', "{\"surprise\":1,", 1);
        assert!(serde_json::from_str::<WorkBatch>(&extra).is_err());
    }
}
