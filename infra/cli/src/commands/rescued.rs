//! `infer --rescued SOURCE`: the first step of the drift loop. Reads the rescued column of the
//! committed outputs of the objects whose commits counted rescued rows (the ledger says
//! which), and proposes the additive change that would give the rescued fields columns of
//! their own:
//!
//! - a field under no column becomes a new nullable column of the type its values read as
//!   (`referrer`);
//! - a field inside a struct column (`userIdentity.invokedBy`, `resources[1].extra`) becomes a
//!   new field of that struct, appended (struct fields are always nullable);
//! - a field under a key that only path columns read (`additionalEventData.bytesOut`, where a
//!   column reads `additionalEventData.bytesIn`) becomes a path column named by its keys
//!   joined with `_`, or, when it is reached through an array position no column reads, a
//!   `json` column of the whole key.
//!
//! Values rescued for another reason (a bad value) are listed, not proposed: changing a
//! column's type is not additive. The proposal is then checked: the committed version of
//! every sampled object is fetched and converted under the proposed source, as ingest would
//! convert it, and must write no rescued value but those bad values (a new column that fails
//! is widened to `string` or `json`, with a note). `tidemark plan` under the changed document
//! then lists the stale objects, and `backfill --stale-config` rewrites exactly those.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;

use arrow_array::{Array, StringArray};
use serde::Serialize;
use tidemark::config::{Config, FormatDoc, SourceDoc};
use tidemark::convert::DEFAULT_RESCUE_COLUMN;
use tidemark::infer::{Json, JsonShape, SeenColumn, TextTable, json_columns};
use tidemark::model::{OutputRef, Target, VersionRef};
use tidemark::ports::GetOutcome;
use tidemark::schema::{ColumnSpec, FieldPath, FieldType, Step, StructField};
use tokio::io::AsyncReadExt;

use super::convert::{ConvertArgs, Shown, convert_file};
use super::print_json;
use crate::backend::Backend;
use crate::render::Table;
use crate::{Error, Out};

/// The reason the converter gives a field the schema does not name.
const UNKNOWN: &str = "not in the schema";

/// One rescued field, over the rows read.
#[derive(Debug, Clone, Serialize)]
pub struct RescuedField {
    /// Its path, as the rescued column names it.
    pub path: String,
    /// `unknown` (not in the schema), `bad value` (did not read as its column's type) or
    /// `repeated key` (a key given twice in one object, `path#2`).
    pub kind: &'static str,
    /// Rows holding it.
    pub rows: u64,
    /// Objects holding it.
    pub objects: u64,
    /// A value, as compact JSON cut to 80 characters.
    pub example: String,
    /// The converter's reason, for a bad value.
    pub reason: Option<String>,
}

/// One sampled object converted under the proposal.
#[derive(Debug, Clone, Serialize)]
pub struct Checked {
    /// `s3://bucket/key` of the object.
    pub object: String,
    /// Rows with rescued values when it was committed.
    pub rescued_before: u64,
    /// Rows with a bad value among them (these stay rescued).
    pub bad_value_rows: u64,
    /// Rows with rescued values under the proposal (`None`: not converted).
    pub rescued_after: Option<u64>,
    /// Rows written under the proposal.
    pub rows: Option<u64>,
    /// Why it was not converted, or did not convert.
    pub why: Option<String>,
}

/// What `infer --rescued` found and proposes.
#[derive(Debug, Clone, Serialize)]
pub struct RescuedReport {
    /// The source.
    pub source_id: String,
    /// Its rescued column.
    pub rescued_column: String,
    /// Committed objects whose commit counted rescued rows.
    pub objects_with_rescued: u64,
    /// Rescued rows those commits counted.
    pub rescued_rows: u64,
    /// Objects whose outputs were read (spread over them, at most `--sample-files`).
    pub objects_read: u64,
    /// Rescued rows read from those outputs.
    pub rows_read: u64,
    /// Every rescued field read, by path.
    pub fields: Vec<RescuedField>,
    /// Fields dropped under `on_unknown_field: ignore`, over every committed object, with
    /// their counts: their values were not kept, so nothing can be proposed from them.
    pub ignored: BTreeMap<String, u64>,
    /// New columns proposed.
    pub added: Vec<ColumnSpec>,
    /// Struct columns given new fields: (column, type now, type proposed).
    pub extended: Vec<(String, String, String)>,
    /// The source with the change (`None`: nothing to add).
    pub proposed: Option<SourceDoc>,
    /// Each sampled object converted under the proposal.
    pub checks: Vec<Checked>,
    /// Every sampled object converted under the proposal with no rescued value left but its
    /// bad values.
    pub checked: bool,
    /// How the proposal was decided, and what it leaves out.
    pub notes: Vec<String>,
}

/// What is read of one committed object.
struct Sampled {
    key: String,
    version: VersionRef,
    outputs: Vec<OutputRef>,
    rescued: u64,
}

/// Per path: rows, objects, an example, a reason.
#[derive(Default)]
struct Tally {
    kind: &'static str,
    rows: u64,
    objects: BTreeSet<usize>,
    example: String,
    reason: Option<String>,
}

fn cut(text: &str) -> String {
    let mut out: String = text.chars().take(80).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

fn compact(value: &Json) -> String {
    match value {
        Json::Null => "null".into(),
        Json::Bool(b) => b.to_string(),
        Json::Number(n) => n.to_string(),
        Json::String(s) => serde_json::to_string(s).unwrap_or_default(),
        Json::Array(items) => format!(
            "[{}]",
            items.iter().map(compact).collect::<Vec<_>>().join(",")
        ),
        Json::Object(entries) => format!(
            "{{{}}}",
            entries
                .iter()
                .map(|(k, v)| format!(
                    "{}:{}",
                    serde_json::to_string(k).unwrap_or_default(),
                    compact(v)
                ))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

/// Put `value` at `steps` of `into` (an object): keys make objects, an index makes an array
/// element (elements are kept per index, in the order met).
fn place(into: &mut Json, steps: &[Step], value: Json) {
    let Some((first, rest)) = steps.split_first() else {
        *into = value;
        return;
    };
    match first {
        Step::Key(key) => {
            if !matches!(into, Json::Object(_)) {
                *into = Json::Object(Vec::new());
            }
            let Json::Object(entries) = into else {
                unreachable!()
            };
            let at = match entries.iter().position(|(k, _)| k == key) {
                Some(at) => at,
                None => {
                    entries.push((key.clone(), Json::Null));
                    entries.len() - 1
                }
            };
            place(&mut entries[at].1, rest, value);
        }
        Step::Index(n) => {
            // Elements are held as an object keyed by index until `arrays` turns it into an
            // array: positions that did not hold a rescued value are not invented.
            if !matches!(into, Json::Object(_)) {
                *into = Json::Object(Vec::new());
            }
            let Json::Object(entries) = into else {
                unreachable!()
            };
            let key = format!("\u{0}[{n}]");
            let at = match entries.iter().position(|(k, _)| *k == key) {
                Some(at) => at,
                None => {
                    entries.push((key, Json::Null));
                    entries.len() - 1
                }
            };
            place(&mut entries[at].1, rest, value);
        }
    }
}

/// The objects `place` made for array positions, turned into arrays of their elements.
fn arrays(value: Json) -> Json {
    match value {
        Json::Object(entries) if entries.first().is_some_and(|(k, _)| k.starts_with('\u{0}')) => {
            Json::Array(entries.into_iter().map(|(_, v)| arrays(v)).collect())
        }
        Json::Object(entries) => {
            Json::Object(entries.into_iter().map(|(k, v)| (k, arrays(v))).collect())
        }
        other => other,
    }
}

/// `existing` with the struct fields of `seen` it lacks appended (through arrays and struct
/// fields), or `None` when nothing is added.
fn extended(existing: &FieldType, seen: &FieldType) -> Option<FieldType> {
    match (existing, seen) {
        (FieldType::Struct(fields), FieldType::Struct(more)) => {
            let mut fields = fields.clone();
            let mut changed = false;
            for field in more {
                match fields.iter_mut().find(|f| f.name == field.name) {
                    Some(f) => {
                        if let Some(ty) = extended(&f.ty, &field.ty) {
                            f.ty = ty;
                            changed = true;
                        }
                    }
                    None => {
                        fields.push(StructField {
                            name: field.name.clone(),
                            ty: field.ty.clone(),
                        });
                        changed = true;
                    }
                }
            }
            changed.then_some(FieldType::Struct(fields))
        }
        (FieldType::Array(element), FieldType::Array(seen)) => {
            extended(element, seen).map(|e| FieldType::Array(Box::new(e)))
        }
        _ => None,
    }
}

/// The type at `keys` inside `ty` (through struct fields).
fn type_at<'a>(ty: &'a FieldType, keys: &[String]) -> Option<&'a FieldType> {
    let Some((first, rest)) = keys.split_first() else {
        return Some(ty);
    };
    match ty {
        FieldType::Struct(fields) => type_at(&fields.iter().find(|f| &f.name == first)?.ty, rest),
        _ => None,
    }
}

/// Read the rescued column of one Parquet output: its non-NULL texts.
fn rescued_texts(bytes: bytes::Bytes, column: &str) -> Result<Vec<String>, String> {
    use parquet::arrow::ProjectionMask;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| e.to_string())?;
    let Some(at) = builder
        .parquet_schema()
        .root_schema()
        .get_fields()
        .iter()
        .position(|f| f.name() == column)
    else {
        return Ok(Vec::new());
    };
    let mask = ProjectionMask::roots(builder.parquet_schema(), [at]);
    let reader = builder
        .with_projection(mask)
        .build()
        .map_err(|e| e.to_string())?;
    let mut texts = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| e.to_string())?;
        let column = arrow_cast::cast(batch.column(0), &arrow_schema::DataType::Utf8)
            .map_err(|e| e.to_string())?;
        let strings = column
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or("the rescued column is not text")?;
        for i in 0..strings.len() {
            if strings.is_valid(i) {
                texts.push(strings.value(i).to_string());
            }
        }
    }
    Ok(texts)
}

/// `infer --rescued SOURCE` on open backends.
pub async fn rescued(
    backend: &Backend,
    id: &str,
    sample_files: usize,
    sample_bytes: u64,
) -> Result<RescuedReport, Error> {
    let source = backend.source(id)?;
    let doc = &source.doc;
    let column = doc
        .rescued_column
        .clone()
        .unwrap_or_else(|| DEFAULT_RESCUE_COLUMN.to_string());
    let records = backend.pipeline.ledger.list(id).await?;
    let mut ignored: BTreeMap<String, u64> = BTreeMap::new();
    let mut candidates = Vec::new();
    let mut rescued_rows = 0;
    for r in &records {
        let Some(c) = &r.committed else { continue };
        let Target::Version(version) = &c.target else {
            continue;
        };
        for (field, n) in &c.ignored.fields {
            *ignored.entry(field.clone()).or_default() += n;
        }
        if c.rescued > 0 {
            rescued_rows += c.rescued;
            candidates.push(Sampled {
                key: r.key.clone(),
                version: version.clone(),
                outputs: c.outputs.clone(),
                rescued: c.rescued,
            });
        }
    }
    let mut notes = Vec::new();
    let objects_with_rescued = candidates.len() as u64;
    let n = sample_files.max(1);
    let picked: Vec<Sampled> = if candidates.len() <= n {
        candidates
    } else {
        notes.push(format!(
            "{n} of {} objects with rescued rows read, spread over them (--sample-files)",
            candidates.len()
        ));
        let len = candidates.len();
        let mut taken: Vec<Option<Sampled>> = candidates.into_iter().map(Some).collect();
        (0..n).filter_map(|i| taken[i * len / n].take()).collect()
    };

    // Read the rescued column of each picked object's outputs.
    let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut rows: Vec<Json> = Vec::new();
    let mut bad_rows = vec![0u64; picked.len()];
    let mut rows_read = 0u64;
    let mut spent = 0u64;
    let mut objects_read = 0u64;
    'objects: for (i, object) in picked.iter().enumerate() {
        objects_read += 1;
        for output in &object.outputs {
            let GetOutcome::Found { mut body, .. } = backend
                .pipeline
                .store
                .get(&output.bucket, &output.key, Some(&output.etag))
                .await?
            else {
                notes.push(format!(
                    "s3://{}/{}: changed or gone since its commit: not read",
                    output.bucket, output.key
                ));
                continue;
            };
            let mut bytes = Vec::new();
            body.read_to_end(&mut bytes).await?;
            let texts = rescued_texts(bytes::Bytes::from(bytes), &column)
                .map_err(|e| format!("s3://{}/{}: {e}", output.bucket, output.key))?;
            for text in texts {
                spent += text.len() as u64;
                rows_read += 1;
                let parsed = Json::parse(&text).map_err(|e| {
                    format!(
                        "s3://{}/{}: a rescued value is not JSON: {e}",
                        output.bucket, output.key
                    )
                })?;
                let Json::Object(parts) = parsed else {
                    continue;
                };
                let part = |name: &str| {
                    parts
                        .iter()
                        .find(|(k, _)| k == name)
                        .map(|(_, v)| v.clone())
                };
                let (Some(Json::Object(fields)), reasons) = (part("fields"), part("reasons"))
                else {
                    continue;
                };
                let reasons = match reasons {
                    Some(Json::Object(r)) => r,
                    _ => Vec::new(),
                };
                let mut row = Json::Object(Vec::new());
                let mut bad = false;
                for (path, value) in fields {
                    let reason = reasons.iter().find(|(k, _)| *k == path).and_then(|(_, r)| {
                        if let Json::String(s) = r {
                            Some(s.clone())
                        } else {
                            None
                        }
                    });
                    let repeated = path.rsplit_once('#').is_some_and(|(_, n)| {
                        !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
                    });
                    let kind = if repeated {
                        "repeated key"
                    } else if reason.as_deref() == Some(UNKNOWN) {
                        "unknown"
                    } else {
                        bad = true;
                        "bad value"
                    };
                    let tally = tallies.entry(path.clone()).or_insert_with(|| {
                        order.push(path.clone());
                        Tally {
                            kind,
                            example: cut(&compact(&value)),
                            reason: (kind == "bad value")
                                .then(|| reason.clone().unwrap_or_default()),
                            ..Tally::default()
                        }
                    });
                    tally.rows += 1;
                    tally.objects.insert(i);
                    if kind == "unknown" {
                        match path.parse::<FieldPath>() {
                            Ok(p) => place(&mut row, p.steps(), value),
                            Err(e) => notes.push(format!("{path}: not a path ({e}): not proposed")),
                        }
                    }
                }
                if bad {
                    bad_rows[i] += 1;
                }
                if row != Json::Object(Vec::new()) {
                    rows.push(arrays(row));
                }
                if spent > sample_bytes {
                    notes.push(format!(
                        "--sample-bytes reached after {rows_read} rescued rows of {objects_read} objects"
                    ));
                    break 'objects;
                }
            }
        }
    }

    // The shapes of the unknown fields, by the key they are under.
    let seen: Vec<SeenColumn> = if doc.format == FormatDoc::Csv {
        // CSV values are text: typed as a CSV column's text is.
        let mut names: Vec<String> = Vec::new();
        for row in &rows {
            if let Json::Object(entries) = row {
                for (k, _) in entries {
                    if !names.contains(k) {
                        names.push(k.clone());
                    }
                }
            }
        }
        let mut table = TextTable::new(names.clone());
        for row in &rows {
            let Json::Object(entries) = row else { continue };
            let texts: Vec<Option<String>> = names
                .iter()
                .map(|n| {
                    entries
                        .iter()
                        .find(|(k, _)| k == n)
                        .and_then(|(_, v)| match v {
                            Json::Null => None,
                            Json::String(s) => Some(s.clone()),
                            other => Some(compact(other)),
                        })
                })
                .collect();
            table.add_row(texts.iter().map(|t| t.as_deref()));
        }
        table.columns()
    } else {
        let mut shape = JsonShape::default();
        for row in &rows {
            shape.add(row);
        }
        json_columns(&shape)
    };

    // The additive change.
    let mut schema = doc.schema.clone();
    let mut added: Vec<ColumnSpec> = Vec::new();
    let mut extended_columns = Vec::new();
    let taken = |schema: &[ColumnSpec], name: &str| schema.iter().any(|c| c.name == name);
    for head in &seen {
        let name = &head.column.name;
        for note in &head.notes {
            notes.push(note.clone());
        }
        let plain = schema
            .iter()
            .position(|c| c.path.is_none() && &c.name == name);
        let by_path = schema
            .iter()
            .any(|c| c.path.as_ref().is_some_and(|p| p.head() == name));
        if let Some(at) = plain {
            let was = schema[at].ty.clone();
            match extended(&was, &head.column.ty) {
                Some(ty) => {
                    extended_columns.push((name.clone(), was.to_string(), ty.to_string()));
                    schema[at].ty = ty;
                }
                None => notes.push(format!(
                    "{name}: rescued fields under it do not fit its type {was}: not proposed"
                )),
            }
        } else if by_path {
            // The unknown paths under this key, from the tallies.
            let under: Vec<FieldPath> = order
                .iter()
                .filter(|p| tallies[*p].kind == "unknown")
                .filter_map(|p| p.parse::<FieldPath>().ok())
                .filter(|p| p.head() == name)
                .collect();
            let through_array = under
                .iter()
                .any(|p| p.steps().iter().any(|s| matches!(s, Step::Index(_))));
            if through_array || under.iter().any(|p| p.steps().len() == 1) {
                let mut column = ColumnSpec::new(unique(&schema, name), FieldType::Json);
                if column.name != *name {
                    column.path = name.parse().ok();
                }
                notes.push(format!(
                    "{name}: read by path columns, and rescued values are at places they do not \
                     name through an array: a json column of all of {name} keeps them"
                ));
                schema.push(column.clone());
                added.push(column);
                continue;
            }
            let mut done: BTreeSet<String> = BTreeSet::new();
            for path in under {
                let keys: Vec<String> = path
                    .steps()
                    .iter()
                    .filter_map(|s| match s {
                        Step::Key(k) => Some(k.clone()),
                        Step::Index(_) => None,
                    })
                    .collect();
                if !done.insert(path.to_string()) {
                    continue;
                }
                let Some(ty) = type_at(&head.column.ty, &keys[1..]) else {
                    notes.push(format!("{path}: its type was not decided: not proposed"));
                    continue;
                };
                let base: String = keys
                    .iter()
                    .map(|k| {
                        k.chars()
                            .map(|c| if c.is_alphanumeric() { c } else { '_' })
                            .collect::<String>()
                    })
                    .collect::<Vec<_>>()
                    .join("_");
                let mut column = ColumnSpec::new(unique(&schema, &base), ty.clone());
                column.path = Some(path.clone());
                schema.push(column.clone());
                added.push(column);
            }
        } else {
            let mut column = head.column.clone();
            column.nullable = true;
            if taken(&schema, name) {
                column.name = unique(&schema, name);
                column.path = name.parse().ok();
            }
            schema.push(column.clone());
            added.push(column);
        }
    }
    let mut proposed = (!added.is_empty() || !extended_columns.is_empty()).then(|| {
        let mut proposed = doc.clone();
        proposed.schema = schema;
        proposed
    });

    // Check: every picked object's committed version converted under the proposal.
    let mut checks = Vec::new();
    let mut checked = true;
    if let Some(mut proposal) = proposed.take() {
        let dir = std::env::temp_dir().join(format!("tidemark-rescued-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir)?;
        let _cleanup = Cleanup(dir.clone());
        let mut local: Vec<Option<PathBuf>> = Vec::new();
        for (i, object) in picked.iter().take(objects_read as usize).enumerate() {
            let got = backend
                .pipeline
                .store
                .get(&doc.bucket, &object.key, object.version.etag.as_deref())
                .await?;
            match got {
                GetOutcome::Found { mut body, .. } => {
                    let mut bytes = Vec::new();
                    body.read_to_end(&mut bytes).await?;
                    let path = dir.join(format!("{i:05}"));
                    std::fs::write(&path, bytes)?;
                    local.push(Some(path));
                }
                _ => local.push(None),
            }
        }
        let mut outcomes;
        let mut rounds = 0;
        loop {
            rounds += 1;
            outcomes = Vec::new();
            let document = serde_json::json!({ "sources": [&proposal] }).to_string();
            let config = Config::from_json(&document)
                .map_err(|e| format!("the proposed source is not valid: {e}"))?;
            let mut widen = None;
            for (i, (object, path)) in picked.iter().zip(&local).enumerate() {
                let checked = |rescued_after, rows, why| Checked {
                    object: format!("s3://{}/{}", doc.bucket, object.key),
                    rescued_before: object.rescued,
                    bad_value_rows: bad_rows[i],
                    rescued_after,
                    rows,
                    why,
                };
                let Some(path) = path else {
                    outcomes.push(checked(
                        None,
                        None,
                        Some("the committed version is no longer current: not checked".into()),
                    ));
                    continue;
                };
                let report = convert_file(
                    &config,
                    &ConvertArgs {
                        source: id.to_string(),
                        key: Some(object.key.clone()),
                        rejects: Shown::First(0),
                        input: path.clone(),
                        output: None,
                    },
                )?;
                match (&report.result, &report.error) {
                    (Some(r), _) => outcomes.push(checked(Some(r.rescued), Some(r.rows), None)),
                    (None, failure) => {
                        let message = failure
                            .as_ref()
                            .map_or_else(|| "did not convert".to_string(), |f| f.message.clone());
                        if widen.is_none()
                            && let Some(column) = failure.as_ref().and_then(|f| f.column.clone())
                        {
                            widen = Some((column, message.clone()));
                        }
                        outcomes.push(checked(None, None, Some(message)));
                    }
                }
            }
            // A new column that failed is widened, and every object converted again.
            let Some((failed, message)) = widen else {
                break;
            };
            let top = failed
                .split(['.', '['])
                .next()
                .unwrap_or(&failed)
                .to_string();
            let Some(column) = proposal.schema.iter_mut().find(|c| {
                added.iter().any(|a| a.name == c.name) && (c.name == failed || c.name == top)
            }) else {
                break;
            };
            let wider: FieldType = match &column.ty {
                FieldType::Scalar(tidemark::schema::ColumnType::String) | FieldType::Json => break,
                FieldType::Scalar(_) => tidemark::schema::ColumnType::String.into(),
                _ => FieldType::Json,
            };
            notes.push(format!(
                "{}: {} did not read every value ({message}): {wider}",
                column.name, column.ty
            ));
            column.ty = wider.clone();
            column.format = None;
            if let Some(a) = added.iter_mut().find(|a| a.name == column.name) {
                a.ty = wider;
                a.format = None;
            }
            if rounds > added.len() + 1 {
                break;
            }
        }
        checked = outcomes.iter().all(|c| {
            c.rescued_after
                .is_some_and(|after| after <= c.bad_value_rows)
        });
        checks = outcomes;
        proposed = Some(proposal);
    }
    Ok(RescuedReport {
        source_id: id.to_string(),
        rescued_column: column,
        objects_with_rescued,
        rescued_rows,
        objects_read,
        rows_read,
        fields: fields_of(&order, &tallies),
        ignored,
        added,
        extended: extended_columns,
        proposed,
        checks,
        checked,
        notes,
    })
}

fn fields_of(order: &[String], tallies: &BTreeMap<String, Tally>) -> Vec<RescuedField> {
    order
        .iter()
        .map(|path| {
            let t = &tallies[path];
            RescuedField {
                path: path.clone(),
                kind: t.kind,
                rows: t.rows,
                objects: t.objects.len() as u64,
                example: t.example.clone(),
                reason: t.reason.clone(),
            }
        })
        .collect()
}

/// `name`, or `name_2`, `name_3`, … : the first no column of `schema` has.
fn unique(schema: &[ColumnSpec], name: &str) -> String {
    if !schema.iter().any(|c| c.name == name) {
        return name.to_string();
    }
    (2..)
        .map(|n| format!("{name}_{n}"))
        .find(|candidate| !schema.iter().any(|c| &c.name == candidate))
        .expect("a free name")
}

/// Removes a temporary folder when dropped.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run `infer --rescued` and print its report.
pub async fn rescued_command(
    backend: &Backend,
    id: &str,
    sample_files: usize,
    sample_bytes: u64,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    let report = rescued(backend, id, sample_files, sample_bytes).await?;
    let code = if report.checked {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    if json {
        print_json(out, &report)?;
        return Ok(code);
    }
    writeln!(
        out,
        "{}: {} committed objects with rescued rows ({} rows); {} read, {} rescued rows in {}",
        report.source_id,
        report.objects_with_rescued,
        report.rescued_rows,
        report.objects_read,
        report.rows_read,
        report.rescued_column
    )?;
    if !report.fields.is_empty() {
        let mut t = Table::new(&["FIELD", "KIND", ">ROWS", ">OBJECTS", "EXAMPLE"]);
        for f in &report.fields {
            let kind = match &f.reason {
                Some(reason) => format!("{} ({reason})", f.kind),
                None => f.kind.to_string(),
            };
            t.row(vec![
                f.path.clone(),
                kind,
                f.rows.to_string(),
                f.objects.to_string(),
                f.example.clone(),
            ]);
        }
        write!(out, "{}", t.render())?;
    }
    for (field, n) in &report.ignored {
        writeln!(
            out,
            "ignored: {field}: {n} values dropped under on_unknown_field \"ignore\" (set \"rescue\" \
             to keep them, or type them with `tidemark infer` on the source files)"
        )?;
    }
    for note in &report.notes {
        writeln!(out, "note: {note}")?;
    }
    let Some(doc) = &report.proposed else {
        writeln!(
            out,
            "additive change: none (no rescued field under no column or in a struct)"
        )?;
        return Ok(code);
    };
    for c in &report.added {
        match &c.path {
            Some(path) => writeln!(out, "add column {} {} (from {path})", c.name, c.ty)?,
            None => writeln!(out, "add column {} {}", c.name, c.ty)?,
        }
    }
    for (name, was, now) in &report.extended {
        writeln!(out, "extend {name}: {was} -> {now}")?;
    }
    writeln!(
        out,
        "the source's \"schema\" with them (the rest of the source is unchanged; --json gives \
         the whole source):"
    )?;
    writeln!(out, "\"schema\": [")?;
    for (i, c) in doc.schema.iter().enumerate() {
        let comma = if i + 1 < doc.schema.len() { "," } else { "" };
        writeln!(out, "  {}{comma}", serde_json::to_string(c)?)?;
    }
    writeln!(out, "]")?;
    let mut t = Table::new(&[
        "OBJECT",
        ">RESCUED ROWS",
        ">UNDER THE PROPOSAL",
        ">BAD VALUES",
        "WHY",
    ]);
    for c in &report.checks {
        t.row(vec![
            c.object.clone(),
            c.rescued_before.to_string(),
            c.rescued_after.map_or("-".into(), |n| n.to_string()),
            c.bad_value_rows.to_string(),
            c.why.clone().unwrap_or_default(),
        ]);
    }
    write!(out, "{}", t.render())?;
    if report.checked {
        writeln!(
            out,
            "checked: every sampled object converts under it with no rescued value left but bad values; \
             deploy it, then `tidemark plan` and `tidemark backfill --source {} --stale-config`",
            report.source_id
        )?;
    } else {
        writeln!(
            out,
            "NOT CHECKED: a sampled object does not convert under it, or still rescues values"
        )?;
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(paths: &[(&str, &str)]) -> Json {
        let mut row = Json::Object(Vec::new());
        for (path, value) in paths {
            let path: FieldPath = path.parse().unwrap();
            place(&mut row, path.steps(), Json::parse(value).unwrap());
        }
        arrays(row)
    }

    #[test]
    fn rescued_paths_are_put_back_in_place_and_array_positions_are_not_invented() {
        let r = row(&[
            ("s.l[1].w", "1"),
            ("s.l[3].w", "2"),
            ("top", r#"{"a":true}"#),
            (r#"x["a.b"]"#, r#""t""#),
        ]);
        assert_eq!(
            compact(&r),
            r#"{"s":{"l":[{"w":1},{"w":2}]},"top":{"a":true},"x":{"a.b":"t"}}"#
        );
    }

    #[test]
    fn struct_fields_are_appended_through_arrays_and_nothing_else_changes() {
        let ty = |s: &str| s.parse::<FieldType>().unwrap();
        assert_eq!(
            extended(
                &ty("struct<a:int64,l:array<struct<x:string>>>"),
                &ty("struct<l:array<struct<y:bool>>,b:string>")
            ),
            Some(ty(
                "struct<a:int64,l:array<struct<x:string,y:bool>>,b:string>"
            ))
        );
        assert_eq!(
            extended(&ty("struct<a:int64>"), &ty("struct<a:string>")),
            None
        );
        assert_eq!(extended(&ty("json"), &ty("struct<a:string>")), None);
        assert_eq!(
            type_at(&ty("struct<a:struct<b:int32>>"), &["a".into(), "b".into()]),
            Some(&ty("int32"))
        );
    }
}
