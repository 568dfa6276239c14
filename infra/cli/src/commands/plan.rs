//! `plan`: what deploying a sources document would do, before it runs — the step before every
//! deploy. The document given by `--config` is the one to deploy; the live state is the
//! ledger and the landing buckets. Per source of the document:
//!
//! - `new`: objects it matches that the ledger has no record of: the next `run`, backfill or
//!   reconcile processes them; those another source id has committed (a rename) are counted
//!   again as `reprocessed`;
//! - `stale_config`: objects committed under another configuration of the source (a schema,
//!   format or output change): what `backfill --stale-config` would rewrite;
//!   With stale objects, `columns` says how the output columns change: the footer of one
//!   stale object's output (one ranged GET) against the document's output columns (added,
//!   removed, retyped), so the change is shown before it is deployed;
//! - `untracked`: records of the source whose key it no longer matches (a narrowed prefix,
//!   include or exclude): left in the ledger, never looked at again;
//! - and for the document as a whole: source ids the ledger holds that it does not name
//!   (`orphaned`: renamed or removed, with a hint when another source now matches their keys)
//!   and keys two sources would both take (`overlaps`).
//!
//! Exit 1 when anything would be reprocessed, rewritten, orphaned, untracked or taken twice,
//! unless `--allow`. Reads every listed object and every record of the sources: at 10 million
//! objects, ≈10,000 ListObjectsV2 requests and the ledger's items once (≈5 GB of items,
//! ≈625,000 eventually consistent read units on DynamoDB).

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;

use serde::Serialize;
use tidemark::backfill::{committed_under_other, done_for};
use tidemark::model::{Record, Status};

use super::print_json;
use crate::backend::Backend;
use crate::render::Table;
use crate::{Error, Out};

/// Keys shown per finding at most.
pub const EXAMPLES: usize = 5;

/// A count and the first keys it counts.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Keys {
    /// How many.
    pub count: u64,
    /// The first [`EXAMPLES`], in key order.
    pub examples: Vec<String>,
}

impl Keys {
    fn add(&mut self, key: &str) {
        self.count += 1;
        if self.examples.len() < EXAMPLES {
            self.examples.push(key.to_string());
        }
    }
}

/// What deploying the document would do to one of its sources.
#[derive(Debug, Clone, Serialize)]
pub struct SourcePlan {
    /// The source.
    pub source_id: String,
    /// The ledger has records of it (else a source added by the document).
    pub known: bool,
    /// Objects it matches now.
    pub listed: u64,
    /// Matched objects done for their current version under its current configuration.
    pub up_to_date: u64,
    /// Matched objects without a record: processed next.
    pub new: Keys,
    /// Of `new`, objects another source id has committed: processed a second time.
    pub reprocessed: Keys,
    /// Matched objects committed under another configuration: `backfill --stale-config`.
    pub stale_config: Keys,
    /// How the output columns of a stale object (its output's footer) differ from the
    /// document's: `+ name type`, `- name type`, `~ name: old -> new` (empty: the same
    /// columns, or no stale object).
    pub columns: Vec<String>,
    /// Its records whose key it no longer matches.
    pub untracked: Keys,
}

/// A source id of the ledger that the document does not name.
#[derive(Debug, Clone, Serialize)]
pub struct Orphaned {
    /// The id.
    pub source_id: String,
    /// Its records.
    pub records: u64,
    /// Sources of the document matching some of its keys (a rename's likely new id).
    pub keys_now_in: Vec<String>,
}

/// Keys two or more sources of the document would take.
#[derive(Debug, Clone, Serialize)]
pub struct Overlap {
    /// The sources.
    pub sources: Vec<String>,
    /// The keys.
    pub keys: Keys,
}

/// The plan.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// Per source of the document.
    pub sources: Vec<SourcePlan>,
    /// Ledger state the document does not reach.
    pub orphaned: Vec<Orphaned>,
    /// Keys taken twice.
    pub overlaps: Vec<Overlap>,
    /// Why deploying needs `--allow` (empty: nothing is reprocessed, rewritten or lost).
    pub attention: Vec<String>,
}

/// Plan the document of `backend` against its ledger and buckets.
pub async fn plan(backend: &Backend) -> Result<Plan, Error> {
    let p = &backend.pipeline;
    let config = backend.config();
    // Every object each source matches, listed once per bucket and prefix.
    let mut matched: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new(); // id -> (key, etag)
    let mut takers: BTreeMap<(String, String), Vec<String>> = BTreeMap::new(); // (bucket, key) -> ids
    for source in &config.sources {
        let mut objects = Vec::new();
        for o in super::run::list_objects(p, source, None, None, None).await? {
            takers
                .entry((source.doc.bucket.clone(), o.key.clone()))
                .or_default()
                .push(source.id().to_string());
            objects.push((o.key, o.etag));
        }
        matched.insert(source.id().to_string(), objects);
    }
    // The ledger's ids the document lacks, and their committed keys.
    let mut orphaned = Vec::new();
    let mut orphan_keys: BTreeMap<String, BTreeSet<String>> = BTreeMap::new(); // key -> ids
    for base in config.orphaned_ids(p.ledger.source_ids().await?) {
        let records = p.ledger.list(&base).await?;
        if records.is_empty() {
            continue;
        }
        for r in &records {
            if r.status == Status::Done {
                orphan_keys
                    .entry(r.key.clone())
                    .or_default()
                    .insert(base.clone());
            }
        }
        let mut keys_now_in = BTreeSet::new();
        for r in &records {
            for source in &config.sources {
                if matched[source.id()].iter().any(|(k, _)| k == &r.key) {
                    keys_now_in.insert(source.id().to_string());
                }
            }
        }
        orphaned.push(Orphaned {
            source_id: base,
            records: records.len() as u64,
            keys_now_in: keys_now_in.into_iter().collect(),
        });
    }
    let mut sources = Vec::new();
    for source in &config.sources {
        let records: BTreeMap<String, Record> = p
            .ledger
            .list(source.id())
            .await?
            .into_iter()
            .map(|r| (r.key.clone(), r))
            .collect();
        let mut plan = SourcePlan {
            source_id: source.id().to_string(),
            known: !records.is_empty(),
            listed: 0,
            up_to_date: 0,
            new: Keys::default(),
            reprocessed: Keys::default(),
            stale_config: Keys::default(),
            columns: Vec::new(),
            untracked: Keys::default(),
        };
        let objects = &matched[source.id()];
        for (key, etag) in objects {
            plan.listed += 1;
            match records.get(key) {
                None => {
                    plan.new.add(key);
                    if orphan_keys.contains_key(key) {
                        plan.reprocessed.add(key);
                    }
                }
                Some(r) if done_for(r, etag) && committed_under_other(r, &source.fingerprint) => {
                    plan.stale_config.add(key)
                }
                Some(r) if done_for(r, etag) => plan.up_to_date += 1,
                Some(_) => {} // pending, failed, claimed: on its way as today
            }
        }
        if let Some(first) = plan.stale_config.examples.first()
            && let Some(output) = records[first]
                .committed
                .as_ref()
                .and_then(|c| c.outputs.first())
        {
            plan.columns = column_changes(p, source, output).await?;
        }
        let listed: BTreeSet<&str> = objects.iter().map(|(k, _)| k.as_str()).collect();
        for (key, r) in &records {
            if r.status != Status::Deleted
                && !listed.contains(key.as_str())
                && !source.matches(&source.doc.bucket, key)
            {
                plan.untracked.add(key);
            }
        }
        sources.push(plan);
    }
    let mut overlaps: BTreeMap<Vec<String>, Keys> = BTreeMap::new();
    for ((_, key), ids) in &takers {
        if ids.len() > 1 {
            overlaps.entry(ids.clone()).or_default().add(key);
        }
    }
    let overlaps: Vec<Overlap> = overlaps
        .into_iter()
        .map(|(sources, keys)| Overlap { sources, keys })
        .collect();
    let mut attention = Vec::new();
    for s in &sources {
        let id = &s.source_id;
        if s.reprocessed.count > 0 {
            attention.push(format!(
                "{id}: {} objects committed under another source id would be processed again",
                s.reprocessed.count
            ));
        }
        if s.stale_config.count > 0 {
            attention.push(format!(
                "{id}: {} objects were committed under another configuration (`backfill --stale-config` rewrites them)",
                s.stale_config.count
            ));
        }
        if s.untracked.count > 0 {
            attention.push(format!(
                "{id}: {} recorded objects would no longer be matched (untracked)",
                s.untracked.count
            ));
        }
    }
    for o in &orphaned {
        let hint = match o.keys_now_in.as_slice() {
            [one] => format!(
                " (renamed to {one}? `tidemark rename-source {} {one}` first)",
                o.source_id
            ),
            _ => String::new(),
        };
        attention.push(format!(
            "{}: {} records of a source id the document does not name{hint}",
            o.source_id, o.records
        ));
    }
    for o in &overlaps {
        attention.push(format!(
            "{} keys are taken by {} at once",
            o.keys.count,
            o.sources.join(" and ")
        ));
    }
    Ok(Plan {
        sources,
        orphaned,
        overlaps,
        attention,
    })
}

/// The output columns of `output` (a committed output of `source`, from its footer) against
/// the ones `source` writes now.
async fn column_changes(
    p: &tidemark::process::Pipeline,
    source: &tidemark::config::Source,
    output: &tidemark::model::OutputRef,
) -> Result<Vec<String>, Error> {
    use tidemark::reconcile::outputs::{Read, read_footer};
    let footer = match read_footer(&*p.store, &output.bucket, &output.key, Some(&output.etag))
        .await
        .map_err(|e| e.to_string())?
    {
        Read::Found(footer) => footer,
        _ => {
            return Ok(vec![format!(
                "(s3://{}/{} changed or gone: not compared)",
                output.bucket, output.key
            )]);
        }
    };
    let file = footer.metadata.file_metadata();
    let schema =
        parquet::arrow::parquet_to_arrow_schema(file.schema_descr(), file.key_value_metadata())
            .map_err(|e| format!("s3://{}/{}: {e}", output.bucket, output.key))?;
    let was: Vec<(String, String)> = schema
        .fields()
        .iter()
        .map(|f| {
            let ty = tidemark::schema::FieldType::from_field(f)
                .map_or_else(|| f.data_type().to_string(), |t| t.to_string());
            (f.name().clone(), ty)
        })
        .collect();
    // The files' columns: a column partitioned under its own name is in the path instead.
    let moved: Vec<&str> = source
        .partition_columns()
        .unwrap_or_default()
        .iter()
        .filter(|p| p.moves_out())
        .map(|p| p.from.as_str())
        .collect();
    let now: Vec<(String, String)> = source
        .output_columns()
        .iter()
        .filter(|c| !moved.contains(&c.name.as_str()))
        .map(|c| (c.name.clone(), c.ty.to_string()))
        .collect();
    let mut changes = Vec::new();
    for (name, ty) in &now {
        match was.iter().find(|(n, _)| n == name) {
            None => changes.push(format!("+ {name} {ty}")),
            Some((_, old)) if old != ty => changes.push(format!("~ {name}: {old} -> {ty}")),
            Some(_) => {}
        }
    }
    for (name, ty) in &was {
        if !now.iter().any(|(n, _)| n == name) {
            changes.push(format!("- {name} {ty}"));
        }
    }
    Ok(changes)
}

/// `tidemark plan [--allow]`.
pub async fn plan_command(
    backend: &Backend,
    allow: bool,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    let plan = plan(backend).await?;
    if json {
        print_json(out, &plan)?;
    } else {
        let mut t = Table::new(&[
            "SOURCE",
            "LEDGER",
            ">LISTED",
            ">UP TO DATE",
            ">NEW",
            ">REPROCESSED",
            ">STALE CONFIG",
            ">UNTRACKED",
        ]);
        for s in &plan.sources {
            t.row(vec![
                s.source_id.clone(),
                if s.known { "known" } else { "new source" }.into(),
                s.listed.to_string(),
                s.up_to_date.to_string(),
                s.new.count.to_string(),
                s.reprocessed.count.to_string(),
                s.stale_config.count.to_string(),
                s.untracked.count.to_string(),
            ]);
        }
        write!(out, "{}", t.render())?;
        for s in &plan.sources {
            for (what, keys) in [
                ("new", &s.new),
                ("reprocessed", &s.reprocessed),
                ("stale config", &s.stale_config),
                ("untracked", &s.untracked),
            ] {
                if keys.count > 0 {
                    let more = keys.count - keys.examples.len() as u64;
                    let more = if more > 0 {
                        format!(" (+{more} more)")
                    } else {
                        String::new()
                    };
                    writeln!(
                        out,
                        "  {} {what}: {}{more}",
                        s.source_id,
                        keys.examples.join(", ")
                    )?;
                }
            }
        }
        for s in &plan.sources {
            if !s.columns.is_empty() {
                writeln!(
                    out,
                    "  {} columns (a stale object's output -> the document): {}",
                    s.source_id,
                    s.columns.join(", ")
                )?;
            }
        }
        for line in &plan.attention {
            writeln!(out, "ATTENTION: {line}")?;
        }
        if plan.attention.is_empty() {
            writeln!(
                out,
                "nothing would be reprocessed, rewritten, orphaned or taken twice"
            )?;
        } else if allow {
            writeln!(out, "--allow: deploying anyway is the operator's call")?;
        } else {
            writeln!(out, "exit 1: resolve the above, or pass --allow")?;
        }
    }
    Ok(if plan.attention.is_empty() || allow {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
