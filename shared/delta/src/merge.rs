//! Upsert by business key (`output.table.merge_keys`) in the committer.
//!
//! A merged table holds exactly one file per live object: the object's own output when every
//! row of it wins, else a *selection* of it, a file named after the output
//! (`<output name>.m<hash of the selection>.<nonce>.parquet`) holding only its winning rows,
//! possibly none. So the table itself tells which objects are live (a selection of no rows
//! keeps an object known while another beats all its rows), and every publish, whatever keys
//! triggered it, computes the winners of all live objects ([`tidemark::upsert::winners`])
//! and brings each object's file to its selection, in the one commit that also adds and
//! removes the changed objects' files. Readers see one row per key at every version.
//!
//! Cost: the keys and order values of every live object are held in memory by a warm
//! process (read once per output, which never changes), and each publish compares them all:
//! O(rows of the table) CPU per publish. Sized for tables of up to some millions of rows;
//! merged tables are not compacted (see docs/pages/limitations.md, "Delta table").

use std::collections::BTreeMap;
use std::sync::Arc;

use deltalake::kernel::{Add, Remove};
use futures::StreamExt;
use tidemark::config::{Source, table_key_hash_of};
use tidemark::upsert::{Columns, KeyedRows, selection_hash, winners};

use crate::{FOOTER_READS, Plan, PublishError, Publisher, relative};

/// A file the table must hold for a live object: only these rows of its output.
pub(crate) struct Selection {
    /// The object's output, relative to the table root.
    pub original: String,
    /// Which of its rows.
    pub selected: Vec<bool>,
    /// [`selection_hash`] of `selected`.
    pub hash: String,
}

/// The active files of a merged table by the output whose rows they hold: the output's path
/// → the Remove of the file that holds them (the output itself or a selection of it).
pub(crate) fn by_original(active: &BTreeMap<String, Remove>) -> BTreeMap<String, Remove> {
    active
        .iter()
        .map(|(path, remove)| {
            let original = original_of(path).map_or_else(|| path.clone(), |(o, _)| o);
            (original, remove.clone())
        })
        .collect()
}

/// The output a selection file was made from, and its selection hash.
pub(crate) fn original_of(path: &str) -> Option<(String, &str)> {
    let stem = path.strip_suffix(".parquet")?;
    let (rest, nonce) = stem.rsplit_once('.')?;
    let (original, selection) = rest.rsplit_once(".m")?;
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    let original = format!("{original}.parquet");
    (hex(nonce, 8) && hex(selection, 16) && table_key_hash_of(&original).is_some())
        .then_some((original, selection))
}

/// A new name for a selection of `original` (a new file each time: a name the table once
/// referenced, and VACUUM may be deleting, is never written again).
fn selection_name(original: &str, hash: &str) -> String {
    let stem = original.strip_suffix(".parquet").unwrap_or(original);
    let nonce = &uuid::Uuid::new_v4().simple().to_string()[..8];
    format!("{stem}.m{hash}.{nonce}.parquet")
}

/// An output's rank among objects: its name without the version's hash (the object key made
/// safe, then the key's MD5), so that the same object ranks the same in every version.
fn rank(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.rsplit_once('-').map_or(name, |(r, _)| r)
}

impl Publisher {
    /// Turn the plan of a merged table's objects (made on [`by_original`]: adds and removes
    /// of outputs) into the plan of its files: the winners of every live object computed,
    /// each object's file brought to its selection.
    pub(crate) async fn merge_plan(
        &self,
        source: &Source,
        keys: &[String],
        order: Option<&str>,
        mut plan: Plan,
        view: &BTreeMap<String, Remove>,
    ) -> Result<Plan, PublishError> {
        let columns = Columns::new(&source.output_schema, keys, order)
            .map_err(|e| self.file_error(source, "", e.to_string()))?;
        // The live objects' outputs: what the table holds less what leaves, plus what comes.
        let now = self.clock.now_ms();
        let mut live: BTreeMap<String, (String, i64)> = BTreeMap::new();
        for original in view.keys() {
            if !plan.removes.contains_key(original) {
                live.insert(original.clone(), (String::new(), now));
            }
        }
        for (key, out_key, at) in std::mem::take(&mut plan.adds) {
            let path = relative(source, &out_key).expect("planned under the table root");
            live.insert(path.to_string(), (key, at));
        }
        // Removes were keyed by output: key them by the file that goes.
        plan.removes = std::mem::take(&mut plan.removes)
            .into_values()
            .map(|r| (r.path.clone(), r))
            .collect();

        let rows = self.keyed_rows(source, &columns, live.keys()).await?;
        let files: Vec<(&str, &str, &KeyedRows)> = live
            .keys()
            .map(|p| (rank(p), p.as_str(), rows[p].as_ref()))
            .collect();
        let selections = winners(&files);
        plan.ledger_rows = 0;
        for ((original, (key, at)), selected) in live.iter().zip(selections) {
            let kept = selected.iter().filter(|s| **s).count();
            plan.ledger_rows += kept as u64;
            let current = view.get(original).map(|r| r.path.as_str());
            if kept == selected.len() {
                if current == Some(original.as_str()) {
                    continue;
                }
                let out_key = format!("{}{original}", source.doc.output.prefix);
                plan.adds.push((key.clone(), out_key, *at));
            } else {
                let hash = selection_hash(&selected);
                let same = current
                    .and_then(original_of)
                    .is_some_and(|(_, h)| h == hash);
                if same {
                    continue;
                }
                plan.selections.push(Selection {
                    original: original.clone(),
                    selected,
                    hash,
                });
            }
            if let Some(path) = current {
                plan.removes
                    .insert(path.to_string(), view[original].clone());
            }
        }
        Ok(plan)
    }

    /// The keys and order values of the outputs `paths`, read (32 at once) where this
    /// process has not read them before; the source's other outputs are forgotten.
    async fn keyed_rows<'p>(
        &self,
        source: &Source,
        columns: &Columns,
        paths: impl Iterator<Item = &'p String> + Clone,
    ) -> Result<BTreeMap<String, Arc<KeyedRows>>, PublishError> {
        let prefix = &source.doc.output.prefix;
        let bucket = &source.doc.output.bucket;
        let cache_key = |p: &str| format!("{bucket}/{prefix}{p}");
        let mut out = BTreeMap::new();
        let mut missing = Vec::new();
        {
            let mut cache = self.keyed.lock().expect("not poisoned");
            let wanted: std::collections::BTreeSet<String> =
                paths.clone().map(|p| cache_key(p)).collect();
            let mine = format!("{bucket}/{prefix}");
            cache.retain(|k, _| !k.starts_with(&mine) || wanted.contains(k));
            for p in paths {
                match cache.get(&cache_key(p)) {
                    Some(r) => {
                        out.insert(p.clone(), r.clone());
                    }
                    None => missing.push(p.clone()),
                }
            }
        }
        let reads = missing.into_iter().map(|path| async move {
            let bytes = self.read_file(source, &path).await?;
            let rows = columns
                .read(bytes)
                .map_err(|e| self.file_error(source, &path, e.to_string()))?;
            Ok::<_, PublishError>((path, Arc::new(rows)))
        });
        let read: Vec<_> = futures::stream::iter(reads)
            .buffer_unordered(FOOTER_READS)
            .collect()
            .await;
        let mut cache = self.keyed.lock().expect("not poisoned");
        for r in read {
            let (path, rows) = r?;
            cache.insert(cache_key(&path), rows.clone());
            out.insert(path, rows);
        }
        Ok(out)
    }

    /// Write a selection's file: its Add.
    pub(crate) async fn write_selection(
        &self,
        source: &Source,
        selection: &Selection,
    ) -> Result<Add, PublishError> {
        let bytes = self.read_file(source, &selection.original).await?;
        let kept = tidemark::upsert::select(bytes, &selection.selected)
            .map_err(|e| self.file_error(source, &selection.original, e.to_string()))?;
        // In the output's own folder, so it has the output's partition values.
        let path = selection_name(&selection.original, &selection.hash);
        self.put_table_file(source, &path, kept, true).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selection_names_its_output_and_an_output_is_not_a_selection() {
        let original =
            "dt=2026-12-01/a.b.csv-0123456789abcdef0123456789abcdef-0123456789abcdef.parquet";
        assert!(original_of(original).is_none());
        let name = selection_name(original, "00000000000000ff");
        let (o, h) = original_of(&name).expect("a selection");
        assert_eq!(o, original);
        assert_eq!(h, "00000000000000ff");
        assert!(table_key_hash_of(&name).is_none(), "{name}");
        assert_ne!(name, selection_name(original, "00000000000000ff"));
        assert_eq!(rank(original), "a.b.csv-0123456789abcdef0123456789abcdef");
    }
}
