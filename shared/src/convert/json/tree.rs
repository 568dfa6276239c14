//! The column decoders of [`super::JsonBatches`]'s general path: every column type, nested
//! to any depth, read from arrow-json's tape.
//!
//! arrow-json turns each line into a tape (its own iterative parser: no recursion, whatever
//! the nesting) and asks [`super::Strict`] for the decoder of the row objects; from there
//! every decoder here is made by this module, so that one set of rules holds at every depth:
//!
//! - object keys are matched to fields exactly or whatever their case
//!   ([`KeyMatch`]); a field's key given twice in one object, or two keys that differ only by
//!   case, is a bad value at the second one;
//! - a key no field names is an unknown field: counted and dropped, an error, or rescued
//!   ([`UnknownFields`]); a part of an object that only a column's `path` reads is covered
//!   by that path, and the rest of it is unknown;
//! - a value that does not read as its type is an error naming its path (`resources[1].ARN`),
//!   or is rescued ([`BadValues`]): its place becomes NULL and the value, with the reason,
//!   goes to the rescued column, a JSON object per row;
//! - `json` columns, rescued values and values shown in errors are written by one iterative
//!   serializer ([`write_json`]): compact, keys in input order, numbers as written.
//!
//! The decoders report what they find to the [`Shared`] state of their batch decoder by
//! tape position; the row decoder ([`StructDecoder`] at the root) turns positions into rows
//! and paths, since a position says both: rows take consecutive parts of the tape.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};

use arrow_array::builder::{BooleanBuilder, StringBuilder};
use arrow_array::{ArrayRef, ListArray, MapArray, StructArray, new_null_array};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_json::reader::{ArrayDecoder, Tape, TapeElement};
use arrow_schema::{ArrowError, DataType, FieldRef, Fields};

use super::super::{BadValues, Ignored, KeyMatch, UnknownFields};

/// The converter's hash maps of keys: foldhash, which hashbrown uses by default (SipHash,
/// the standard library's, took 6% of a CloudTrail conversion).
type HashMap<K, V> = foldhash::HashMap<K, V>;
use crate::schema::{FieldPath, FieldType, Step};

/// Deepest nesting of a value written as JSON text (a `json` column, a rescued value): the
/// limit of Jackson's reader (Spark, Athena's JSON functions), so that what is stored can be
/// read back. A deeper value fails its row.
pub(super) const MAX_JSON_DEPTH: usize = 1000;

/// Longest text of a value shown in an error (then cut, with `…`).
const SHOWN_BYTES: usize = 80;

/// What every decoder of one batch decoder shares: the policies, and what the decoding of
/// the current batch found.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) unknown: UnknownFields,
    pub(super) bad: BadValues,
    pub(super) keys: KeyMatch,
    /// The rescued column's name, when a policy rescues.
    pub(super) rescue_column: Option<String>,
    findings: Mutex<Findings>,
}

/// What the decoding of one batch found.
#[derive(Debug, Default)]
pub(super) struct Findings {
    /// Values to rescue: tape position and reason.
    rescued: Vec<(u32, String)>,
    /// The first value that failed: tape position and message.
    failure: Option<(u32, String)>,
    /// That failure located by the row decoder: row of the batch, path, message.
    pub(super) located: Option<(usize, String, String)>,
    /// A row that cannot be kept whatever the policy (a value nested too deep to write):
    /// tape position and message.
    row_failure: Option<(u32, String)>,
    /// Values of unknown fields dropped by the last decoding of rows.
    pub(super) ignored: Ignored,
}

fn json_error(message: impl Into<String>) -> ArrowError {
    ArrowError::JsonError(message.into())
}

impl Shared {
    pub(super) fn new(
        unknown: UnknownFields,
        bad: BadValues,
        keys: KeyMatch,
        rescue_column: Option<String>,
    ) -> Self {
        Self {
            unknown,
            bad,
            keys,
            rescue_column,
            findings: Mutex::new(Findings::default()),
        }
    }

    pub(super) fn findings(&self) -> MutexGuard<'_, Findings> {
        // A decoder that panicked mid-batch leaves nothing worth keeping.
        self.findings.lock().unwrap_or_else(|poisoned| {
            let mut f = poisoned.into_inner();
            *f = Findings::default();
            f
        })
    }

    /// A value at `p` that does not read as its type: rescued (`Ok`, its place NULL) or the
    /// batch's error.
    pub(super) fn bad(&self, p: u32, message: String) -> Result<(), ArrowError> {
        let mut f = self.findings();
        match self.bad {
            BadValues::Rescue if f.row_failure.is_none() => {
                f.rescued.push((p, message));
                Ok(())
            }
            _ => {
                f.failure.get_or_insert((p, message.clone()));
                Err(json_error(message))
            }
        }
    }

    /// A value at `p` that no policy can keep: the batch's error.
    fn fail(&self, p: u32, message: String) -> ArrowError {
        let mut f = self.findings();
        f.failure.get_or_insert((p, message.clone()));
        f.row_failure.get_or_insert((p, message.clone()));
        json_error(message)
    }

    /// The value at `p` of a field no column reads, `schema_path` naming the field for the
    /// count: dropped and counted, an error, or rescued.
    fn unknown(&self, tape: &Tape<'_>, p: u32, schema_path: &str) -> Result<(), ArrowError> {
        if matches!(tape.get(p), TapeElement::Null) {
            return Ok(()); // nothing to keep
        }
        let mut f = self.findings();
        match self.unknown {
            UnknownFields::Ignore => {
                f.ignored.add(schema_path, 1);
                Ok(())
            }
            UnknownFields::Rescue => {
                f.rescued.push((p, "not in the schema".into()));
                Ok(())
            }
            UnknownFields::Fail => {
                let message = "not in the schema".to_string();
                f.failure.get_or_insert((p, message.clone()));
                Err(json_error(message))
            }
        }
    }
}

/// The name `key` compared under `keys`.
fn folded(key: &str, keys: KeyMatch) -> std::borrow::Cow<'_, str> {
    match keys {
        KeyMatch::Exact => key.into(),
        KeyMatch::CaseInsensitive if key.bytes().all(|b| !b.is_ascii_uppercase() && b < 0x80) => {
            key.into()
        }
        KeyMatch::CaseInsensitive => key.to_lowercase().into(),
    }
}

/// The schema path of field `name` inside `parent` (for counts of ignored values).
pub(super) fn child_path(parent: &str, name: &str) -> String {
    let step = FieldPath::new(vec![Step::Key(name.to_owned())])
        .map(|p| p.to_string())
        .unwrap_or_default();
    match (parent.is_empty(), step.starts_with('[')) {
        (true, _) => step,
        (false, true) => format!("{parent}{step}"),
        (false, false) => format!("{parent}.{step}"),
    }
}

/// How a top-level column reads times (its `format` and `timezone`).
pub(super) type TimeReading = super::super::value::TimeReading;

/// Makes the decoder of a value of `field`'s type at `path` (a schema path, for counts),
/// times read by `time` (a top-level column's options; the default inside nested types).
pub(super) fn make(
    shared: &Arc<Shared>,
    ctx: &arrow_json::reader::DecoderContext,
    field: &FieldRef,
    path: String,
    time: TimeReading,
) -> Result<Box<dyn ArrayDecoder>, ArrowError> {
    let ty = FieldType::from_field(field).ok_or_else(|| {
        json_error(format!(
            "column {:?} has a type the JSON reader does not read: {}",
            field.name(),
            field.data_type()
        ))
    })?;
    Ok(match ty {
        FieldType::Scalar(scalar) => super::scalar_decoder(shared, ctx, field, scalar, time)?,
        FieldType::Json => Box::new(JsonText {
            shared: shared.clone(),
        }),
        FieldType::Struct(_) => Box::new(StructDecoder::new(shared, ctx, field, path, None)?),
        FieldType::Array(_) => {
            let DataType::List(element) = field.data_type() else {
                unreachable!("an array is a list")
            };
            let child = make(
                shared,
                ctx,
                element,
                format!("{path}[]"),
                TimeReading::default(),
            )?;
            Box::new(ListDecoder {
                shared: shared.clone(),
                element: element.clone(),
                child,
                ty: ty.to_string(),
            })
        }
        FieldType::Map(_) => {
            let DataType::Map(entries, _) = field.data_type() else {
                unreachable!("a map is a map")
            };
            let DataType::Struct(kv) = entries.data_type() else {
                unreachable!("map entries are a struct")
            };
            let child = make(
                shared,
                ctx,
                &kv[1],
                format!("{path}{{}}"),
                TimeReading::default(),
            )?;
            Box::new(MapDecoder {
                shared: shared.clone(),
                entries: entries.clone(),
                kv: kv.clone(),
                child,
                ty: ty.to_string(),
            })
        }
    })
}

/// Where path columns read, as a tree of steps from the row object: a node a column reads
/// covers its whole value; the other parts of an object (or array) a path passes through
/// are unknown fields.
#[derive(Debug, Default)]
struct Trie {
    /// Columns reading the value here.
    columns: Vec<usize>,
    /// Steps further in, by (folded) key or index.
    keys: HashMap<String, Trie>,
    indexes: HashMap<usize, Trie>,
}

impl Trie {
    fn insert(&mut self, steps: &[Step], column: usize, keys: KeyMatch) {
        match steps.split_first() {
            None => self.columns.push(column),
            Some((Step::Key(k), rest)) => self
                .keys
                .entry(folded(k, keys).into_owned())
                .or_default()
                .insert(rest, column, keys),
            Some((Step::Index(i), rest)) => self
                .indexes
                .entry(*i)
                .or_default()
                .insert(rest, column, keys),
        }
    }
}

/// The row objects (`root`), or the values of a `struct` column or field.
pub(super) struct StructDecoder {
    shared: Arc<Shared>,
    /// The schema path of this struct (empty at the root).
    path: String,
    fields: Fields,
    /// One per field; `None` for the rescued column (root only), built here.
    children: Vec<Option<Box<dyn ArrayDecoder>>>,
    /// Plain fields by folded name.
    index: HashMap<String, usize>,
    /// Folded names of the plain fields by index (`None` for a path column or the rescued
    /// column): keys usually come in the schema's order, so the field after the last one
    /// found is compared first.
    names: Vec<Option<String>>,
    /// The schema paths of unknown keys, by key (to count ignored values without allocating).
    unknown_paths: HashMap<String, String>,
    /// The row in which each field was last given a value, and by which key.
    seen: Vec<u64>,
    seen_key: Vec<u32>,
    generation: u64,
    /// Field-major positions of the fields' values (0: absent, the tape's leading NULL).
    positions: Vec<u32>,
    /// Root only: where the path columns read, and the rescued column's index.
    trie: Trie,
    rescue: Option<usize>,
    ty: String,
}

impl StructDecoder {
    /// The decoder of `field` (a struct) at `path`; `columns` for the root: the columns'
    /// options (paths, formats), by name.
    pub(super) fn new(
        shared: &Arc<Shared>,
        ctx: &arrow_json::reader::DecoderContext,
        field: &FieldRef,
        path: String,
        columns: Option<&[crate::schema::ColumnSpec]>,
    ) -> Result<Self, ArrowError> {
        let DataType::Struct(fields) = field.data_type() else {
            unreachable!("a struct decoder for a struct")
        };
        let root = columns.is_some();
        let keys = shared.keys;
        let mut children = Vec::with_capacity(fields.len());
        let (mut index, mut names) = (HashMap::default(), Vec::new());
        let (mut trie, mut rescue) = (Trie::default(), None);
        for (i, child) in fields.iter().enumerate() {
            let name = folded(child.name(), keys).into_owned();
            if root && shared.rescue_column.as_deref() == Some(child.name().as_str()) {
                rescue = Some(i);
                children.push(None);
                names.push(None);
                continue;
            }
            let options = columns.and_then(|c| c.iter().find(|c| c.name == *child.name()));
            let time = options.map_or_else(TimeReading::default, |c| {
                TimeReading::from_options(c.format.clone(), c.timezone)
            });
            match options.and_then(|c| c.path.as_ref()) {
                Some(path) => {
                    trie.insert(path.steps(), i, keys);
                    names.push(None);
                }
                None => {
                    names.push(Some(name.clone()));
                    if index.insert(name, i).is_some() {
                        return Err(json_error(format!(
                            "fields {:?} and another match the same keys",
                            child.name()
                        )));
                    }
                }
            }
            let child_path = child_path(&path, child.name());
            children.push(Some(make(shared, ctx, child, child_path, time)?));
        }
        let ty = FieldType::from_field(field).map_or_else(String::new, |t| t.to_string());
        Ok(Self {
            shared: shared.clone(),
            path,
            fields: fields.clone(),
            children,
            index,
            names,
            unknown_paths: HashMap::default(),
            seen: vec![0; fields.len()],
            seen_key: vec![0; fields.len()],
            generation: 0,
            positions: Vec::new(),
            trie,
            rescue,
            ty,
        })
    }

    fn is_root(&self) -> bool {
        self.path.is_empty()
    }

    /// The field of (folded) `key`; `next` is the field expected.
    fn field_of(&self, key: &str, next: usize) -> Option<usize> {
        match self.names.get(next) {
            Some(Some(name)) if name == key => Some(next),
            _ => self.index.get(key).copied(),
        }
    }

    /// Counts or reports the value at `p` of the unknown key `key`.
    fn unknown(&mut self, tape: &Tape<'_>, p: u32, key: &str) -> Result<(), ArrowError> {
        if self.shared.unknown == UnknownFields::Ignore && !self.unknown_paths.contains_key(key) {
            let path = child_path(&self.path, key);
            self.unknown_paths.insert(key.to_owned(), path);
        }
        let path = self.unknown_paths.get(key).map_or("", String::as_str);
        self.shared.unknown(tape, p, path)
    }

    /// Reads the keys of the object at `p` (ending at `end`) as row `row` of `rows`.
    fn read_object(
        &mut self,
        tape: &Tape<'_>,
        p: u32,
        end: u32,
        row: usize,
        rows: usize,
    ) -> Result<(), ArrowError> {
        self.generation += 1;
        let keys = self.shared.keys;
        let mut at = p + 1;
        let mut next = 0;
        while at < end {
            let TapeElement::String(k) = tape.get(at) else {
                return Err(tape.error(at, "field name"));
            };
            let value = at + 1;
            let after = tape.next(value, "field value")?;
            let key = tape.get_string(k);
            let key = folded(key, keys);
            match self.field_of(&key, next) {
                Some(field) => {
                    next = field + 1;
                    if self.seen[field] == self.generation {
                        let first = tape.get_string(match tape.get(self.seen_key[field]) {
                            TapeElement::String(s) => s,
                            _ => unreachable!("a key"),
                        });
                        let message = if first == tape.get_string(k) {
                            "the key appears twice in the object".to_string()
                        } else {
                            format!(
                                "the keys {:?} and {:?} differ only by case",
                                first,
                                tape.get_string(k)
                            )
                        };
                        self.shared.bad(value, message)?;
                    } else {
                        self.seen[field] = self.generation;
                        self.seen_key[field] = at;
                        self.positions[field * rows + row] = value;
                    }
                }
                None if self.is_root() && self.trie.keys.contains_key(key.as_ref()) => {
                    // Only path columns read in it.
                    let node = &self.trie.keys[key.as_ref()];
                    let mut found = Vec::new();
                    let head = child_path("", tape.get_string(k));
                    cover(&self.shared, tape, value, node, &mut found, Some(&head))?;
                    for (column, pos) in found {
                        self.set_path(column, row, rows, pos);
                    }
                }
                None => self.unknown(tape, value, &key)?,
            }
            // A plain field may also hold path columns (`a` and `a.b`): they read in it too.
            if self.is_root()
                && self.index.contains_key(key.as_ref())
                && let Some(node) = self.trie.keys.get(key.as_ref())
            {
                let mut found = Vec::new();
                cover(&self.shared, tape, value, node, &mut found, None)?;
                for (column, pos) in found {
                    self.set_path(column, row, rows, pos);
                }
            }
            at = after;
        }
        Ok(())
    }

    fn set_path(&mut self, field: usize, row: usize, rows: usize, pos: u32) {
        let slot = &mut self.positions[field * rows + row];
        if *slot == 0 {
            *slot = pos;
        }
    }
}

/// Finds, in the value at `p`, the positions the path columns of `node` read (pushed to
/// `found` as (column, position)); with `report` (the schema path of the value), the parts of
/// it no column reads are unknown fields.
fn cover(
    shared: &Shared,
    tape: &Tape<'_>,
    p: u32,
    node: &Trie,
    found: &mut Vec<(usize, u32)>,
    report: Option<&str>,
) -> Result<(), ArrowError> {
    for &column in &node.columns {
        found.push((column, p));
    }
    // A value a column reads is covered whole.
    let report = report.filter(|_| node.columns.is_empty());
    // The schema path of a part, for counts of ignored values only.
    let counted = shared.unknown == UnknownFields::Ignore;
    match tape.get(p) {
        TapeElement::Null => Ok(()),
        TapeElement::StartObject(end) if node.indexes.is_empty() || !node.keys.is_empty() => {
            let mut at = p + 1;
            while at < end {
                let TapeElement::String(k) = tape.get(at) else {
                    return Err(tape.error(at, "field name"));
                };
                let value = at + 1;
                let key = tape.get_string(k);
                let path = report.filter(|_| counted).map(|r| child_path(r, key));
                match (node.keys.get(folded(key, shared.keys).as_ref()), report) {
                    (Some(child), _) => {
                        let inner = report.map(|r| path.clone().unwrap_or_else(|| r.to_owned()));
                        cover(shared, tape, value, child, found, inner.as_deref())?;
                    }
                    (None, Some(_)) => {
                        shared.unknown(tape, value, path.as_deref().unwrap_or(""))?
                    }
                    (None, None) => {}
                }
                at = tape.next(value, "field value")?;
            }
            Ok(())
        }
        TapeElement::StartList(end) if !node.indexes.is_empty() => {
            let (mut at, mut i) = (p + 1, 0);
            let path = report.map(|r| format!("{r}[]"));
            while at < end {
                match (node.indexes.get(&i), path.as_deref()) {
                    (Some(child), inner) => cover(shared, tape, at, child, found, inner)?,
                    (None, Some(path)) => shared.unknown(tape, at, path)?,
                    (None, None) => {}
                }
                at = tape.next(at, "list value")?;
                i += 1;
            }
            Ok(())
        }
        // A value that is not what the paths step into: no column reads from it.
        _ => match report {
            Some(path) => shared.unknown(tape, p, path),
            None => Ok(()),
        },
    }
}

impl ArrayDecoder for StructDecoder {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let rows = pos.len();
        if self.is_root() {
            let mut f = self.shared.findings();
            f.rescued.clear();
            f.failure = None;
            f.located = None;
            f.row_failure = None;
            f.ignored = Ignored::default();
        }
        self.positions.clear();
        self.positions.resize(self.fields.len() * rows, 0);
        let mut valid = Vec::with_capacity(rows);
        let mut result = Ok(());
        for (row, &p) in pos.iter().enumerate() {
            match tape.get(p) {
                TapeElement::StartObject(end) => {
                    valid.push(true);
                    if let Err(e) = self.read_object(tape, p, end, row, rows) {
                        result = Err(e);
                        break;
                    }
                }
                TapeElement::Null if !self.is_root() => valid.push(false),
                _ if self.is_root() => {
                    return Err(json_error(format!("expected {{ got {}", show(tape, p))));
                }
                _ => {
                    valid.push(false);
                    let message = format!("expected {} got {}", self.ty, show(tape, p));
                    if let Err(e) = self.shared.bad(p, message) {
                        result = Err(e);
                        break;
                    }
                }
            }
        }
        let mut columns = Vec::with_capacity(self.fields.len());
        if result.is_ok() {
            for (i, child) in self.children.iter_mut().enumerate() {
                let Some(child) = child else {
                    columns.push(new_null_array(self.fields[i].data_type(), rows));
                    continue;
                };
                match child.decode(tape, &self.positions[i * rows..(i + 1) * rows]) {
                    Ok(array) => columns.push(array),
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
        }
        if self.is_root() {
            return self.finish_rows(tape, pos, columns, result);
        }
        result?;
        let nulls = NullBuffer::from(valid);
        let nulls = (nulls.null_count() > 0).then_some(nulls);
        Ok(std::sync::Arc::new(StructArray::try_new(
            self.fields.clone(),
            columns,
            nulls,
        )?))
    }
}

impl StructDecoder {
    /// At the root: locates a failure (row and path), or writes the rescued column.
    fn finish_rows(
        &mut self,
        tape: &Tape<'_>,
        pos: &[u32],
        mut columns: Vec<ArrayRef>,
        result: Result<(), ArrowError>,
    ) -> Result<ArrayRef, ArrowError> {
        let row_of = |p: u32| pos.partition_point(|&start| start <= p).saturating_sub(1);
        let mut f = self.shared.findings();
        if let Err(e) = result {
            if let Some((p, message)) = f.failure.take() {
                let row = row_of(p);
                // A top-level value is named as its column is, whatever characters it has.
                let path = match top_key(tape, pos[row], p) {
                    Some(key) => key,
                    None => locate(tape, pos[row], p),
                };
                f.located = Some((row, path, message));
            }
            return Err(e);
        }
        if let Some(rescue) = self.rescue {
            let mut rescued = std::mem::take(&mut f.rescued);
            drop(f);
            rescued.sort_by_key(|(p, _)| *p);
            let mut builder = StringBuilder::with_capacity(pos.len(), 0);
            let mut next = rescued.iter().peekable();
            let mut text = String::new();
            for (row, &start) in pos.iter().enumerate() {
                let end = pos.get(row + 1).copied().unwrap_or(u32::MAX);
                let mut entries: Vec<(String, &(u32, String))> = Vec::new();
                while let Some(entry) = next.next_if(|(p, _)| *p < end) {
                    debug_assert!(entry.0 >= start);
                    let mut path = locate(tape, start, entry.0);
                    let mut n = 1;
                    while entries.iter().any(|(seen, _)| *seen == path) {
                        n += 1;
                        path = format!("{}#{n}", locate(tape, start, entry.0));
                    }
                    entries.push((path, entry));
                }
                if entries.is_empty() {
                    builder.append_null();
                    continue;
                }
                text.clear();
                text.push_str("{\"fields\":{");
                for (i, (path, (p, _))) in entries.iter().enumerate() {
                    if i > 0 {
                        text.push(',');
                    }
                    write_string(&mut text, path);
                    text.push(':');
                    if write_json(tape, *p, &mut text, None).is_err() {
                        let message = format!(
                            "{path}: the value is nested deeper than {MAX_JSON_DEPTH} levels"
                        );
                        return Err(self.shared.fail(*p, message));
                    }
                }
                text.push_str("},\"reasons\":{");
                for (i, (path, (_, reason))) in entries.iter().enumerate() {
                    if i > 0 {
                        text.push(',');
                    }
                    write_string(&mut text, path);
                    text.push(':');
                    write_string(&mut text, reason);
                }
                text.push_str("}}");
                builder.append_value(&text);
            }
            columns[rescue] = std::sync::Arc::new(builder.finish());
        }
        Ok(std::sync::Arc::new(StructArray::try_new(
            self.fields.clone(),
            columns,
            None,
        )?))
    }
}

/// The key of `target` when it is a value of the row object at `start` itself.
fn top_key(tape: &Tape<'_>, start: u32, target: u32) -> Option<String> {
    let TapeElement::StartObject(end) = tape.get(start) else {
        return None;
    };
    let mut at = start + 1;
    while at < end {
        let value = at + 1;
        if value == target {
            let TapeElement::String(k) = tape.get(at) else {
                return None;
            };
            return Some(tape.get_string(k).to_owned());
        }
        at = tape.next(value, "value").ok()?;
        if at > target {
            return None;
        }
    }
    None
}

/// The path from the row object at `start` to the value at `target`, spelled as
/// [`FieldPath`] prints it.
pub(super) fn locate(tape: &Tape<'_>, start: u32, target: u32) -> String {
    let mut steps = Vec::new();
    let mut cur = start;
    'descend: while cur != target {
        match tape.get(cur) {
            TapeElement::StartObject(end) => {
                let mut at = cur + 1;
                while at < end {
                    let value = at + 1;
                    let Ok(after) = tape.next(value, "value") else {
                        break 'descend;
                    };
                    if (value..after).contains(&target) {
                        if let TapeElement::String(k) = tape.get(at) {
                            steps.push(Step::Key(tape.get_string(k).to_owned()));
                        }
                        cur = value;
                        continue 'descend;
                    }
                    at = after;
                }
                break;
            }
            TapeElement::StartList(end) => {
                let (mut at, mut i) = (cur + 1, 0);
                while at < end {
                    let Ok(after) = tape.next(at, "value") else {
                        break 'descend;
                    };
                    if (at..after).contains(&target) {
                        steps.push(Step::Index(i));
                        cur = at;
                        continue 'descend;
                    }
                    at = after;
                    i += 1;
                }
                break;
            }
            _ => break,
        }
    }
    FieldPath::new(steps).map_or_else(String::new, |p| p.to_string())
}

/// A `json` column: each value as its compact text.
struct JsonText {
    shared: Arc<Shared>,
}

impl ArrayDecoder for JsonText {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let mut builder = StringBuilder::with_capacity(pos.len(), pos.len() * 16);
        let mut text = String::new();
        for &p in pos {
            if matches!(tape.get(p), TapeElement::Null) {
                builder.append_null();
                continue;
            }
            text.clear();
            if write_json(tape, p, &mut text, None).is_err() {
                let message = format!("the value is nested deeper than {MAX_JSON_DEPTH} levels");
                return Err(self.shared.fail(p, message));
            }
            builder.append_value(&text);
        }
        Ok(std::sync::Arc::new(builder.finish()))
    }
}

/// An `array` column or field.
struct ListDecoder {
    shared: Arc<Shared>,
    element: FieldRef,
    child: Box<dyn ArrayDecoder>,
    ty: String,
}

impl ArrayDecoder for ListDecoder {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let mut elements = Vec::new();
        let open = |e| match e {
            TapeElement::StartList(end) => Some(end),
            _ => None,
        };
        let (offsets, nulls) = containers(&self.shared, tape, pos, &self.ty, open, |p, end| {
            let mut at = p + 1;
            while at < end {
                elements.push(at);
                at = tape.next(at, "list value")?;
            }
            Ok(elements.len())
        })?;
        let values = self.child.decode(tape, &elements)?;
        Ok(std::sync::Arc::new(ListArray::try_new(
            self.element.clone(),
            offsets,
            values,
            nulls,
        )?))
    }
}

/// The offsets and validity of a column of containers (lists, maps): at each position, a
/// container `open` recognises (giving its end) has its children gathered by `gather`, which
/// says how many have been gathered in all; NULL is NULL; anything else is a bad value.
fn containers(
    shared: &Shared,
    tape: &Tape<'_>,
    pos: &[u32],
    ty: &str,
    open: impl Fn(TapeElement) -> Option<u32>,
    mut gather: impl FnMut(u32, u32) -> Result<usize, ArrowError>,
) -> Result<(OffsetBuffer<i32>, Option<NullBuffer>), ArrowError> {
    let mut offsets = Vec::with_capacity(pos.len() + 1);
    offsets.push(0i32);
    let mut valid = Vec::with_capacity(pos.len());
    let mut gathered = 0;
    for &p in pos {
        let element = tape.get(p);
        match open(element) {
            Some(end) => {
                gathered = gather(p, end)?;
                valid.push(true);
            }
            None if matches!(element, TapeElement::Null) => valid.push(false),
            None => {
                shared.bad(p, format!("expected {ty} got {}", show(tape, p)))?;
                valid.push(false);
            }
        }
        let len = i32::try_from(gathered)
            .map_err(|_| json_error(format!("more than 2^31 values of {ty} in one batch")))?;
        offsets.push(len);
    }
    let nulls = NullBuffer::from(valid);
    let nulls = (nulls.null_count() > 0).then_some(nulls);
    Ok((OffsetBuffer::new(offsets.into()), nulls))
}

/// A `map<string,…>` column or field: an object's keys and values. A key given twice in one
/// object is a bad value at its second value (the first stays).
struct MapDecoder {
    shared: Arc<Shared>,
    entries: FieldRef,
    kv: Fields,
    child: Box<dyn ArrayDecoder>,
    ty: String,
}

impl ArrayDecoder for MapDecoder {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let mut keys = StringBuilder::new();
        let mut values = Vec::new();
        let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
        let shared = &self.shared;
        let open = |e| match e {
            TapeElement::StartObject(end) => Some(end),
            _ => None,
        };
        let (offsets, nulls) = containers(shared, tape, pos, &self.ty, open, |p, end| {
            seen.clear();
            let mut at = p + 1;
            while at < end {
                let TapeElement::String(k) = tape.get(at) else {
                    return Err(tape.error(at, "field name"));
                };
                let key = tape.get_string(k);
                if seen.insert(key) {
                    keys.append_value(key);
                    values.push(at + 1);
                } else {
                    shared.bad(at + 1, "the key appears twice in the object".into())?;
                }
                at = tape.next(at + 1, "field value")?;
            }
            Ok(values.len())
        })?;
        let values = self.child.decode(tape, &values)?;
        let entries = StructArray::try_new(
            self.kv.clone(),
            vec![std::sync::Arc::new(keys.finish()), values],
            None,
        )?;
        Ok(std::sync::Arc::new(MapArray::try_new(
            self.entries.clone(),
            offsets,
            entries,
            nulls,
            false,
        )?))
    }
}

/// A `string` column or field: JSON strings only.
pub(super) struct Text {
    pub(super) shared: Arc<Shared>,
}

impl ArrayDecoder for Text {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let mut builder = StringBuilder::with_capacity(pos.len(), pos.len() * 8);
        for &p in pos {
            match tape.get(p) {
                TapeElement::String(s) => builder.append_value(tape.get_string(s)),
                TapeElement::Null => builder.append_null(),
                _ => {
                    self.shared
                        .bad(p, format!("expected string got {}", show(tape, p)))?;
                    builder.append_null();
                }
            }
        }
        Ok(std::sync::Arc::new(builder.finish()))
    }
}

/// A `bool` column or field: `true` and `false` only.
pub(super) struct Flag {
    pub(super) shared: Arc<Shared>,
}

impl ArrayDecoder for Flag {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let mut builder = BooleanBuilder::with_capacity(pos.len());
        for &p in pos {
            match tape.get(p) {
                TapeElement::True => builder.append_value(true),
                TapeElement::False => builder.append_value(false),
                TapeElement::Null => builder.append_null(),
                _ => {
                    self.shared
                        .bad(p, format!("expected bool got {}", show(tape, p)))?;
                    builder.append_null();
                }
            }
        }
        Ok(std::sync::Arc::new(builder.finish()))
    }
}

/// The value at `p` as compact JSON for an error message: cut after [`SHOWN_BYTES`] (with
/// `…`), so a value of any size or depth costs little to show.
pub(super) fn show(tape: &Tape<'_>, p: u32) -> String {
    let mut out = String::new();
    if write_json(tape, p, &mut out, Some(SHOWN_BYTES)).is_err() {
        out.push('…');
    }
    out
}

/// The value was nested deeper than [`MAX_JSON_DEPTH`], or (with a limit) longer than it.
#[derive(Debug)]
pub(super) struct Cut;

/// Writes the value at `p` to `out` as compact JSON (keys in input order, numbers as
/// written, strings escaped as JSON requires and no more), without recursion. With `limit`,
/// stops after that many bytes (at a character boundary) and fails with [`Cut`]; without,
/// fails past [`MAX_JSON_DEPTH`] levels.
pub(super) fn write_json(
    tape: &Tape<'_>,
    p: u32,
    out: &mut String,
    limit: Option<usize>,
) -> Result<(), Cut> {
    let start_len = out.len();
    let end = match tape.get(p) {
        TapeElement::StartObject(end) | TapeElement::StartList(end) => end,
        TapeElement::I64(_) | TapeElement::F64(_) => p + 1,
        _ => p,
    };
    // Per open container: is it an object, and how many elements it has had (keys and
    // values count one each in an object).
    let mut stack: Vec<(bool, u32)> = Vec::new();
    let mut i = p;
    while i <= end {
        let element = tape.get(i);
        let closing = matches!(element, TapeElement::EndObject(_) | TapeElement::EndList(_));
        if !closing && let Some((object, n)) = stack.last_mut() {
            if *object && *n % 2 == 1 {
                out.push(':');
            } else if *n > 0 {
                out.push(',');
            }
            *n += 1;
        }
        match element {
            TapeElement::StartObject(_) | TapeElement::StartList(_) => {
                if limit.is_none() && stack.len() >= MAX_JSON_DEPTH {
                    return Err(Cut);
                }
                let object = matches!(element, TapeElement::StartObject(_));
                out.push(if object { '{' } else { '[' });
                stack.push((object, 0));
            }
            TapeElement::EndObject(_) => {
                out.push('}');
                stack.pop();
            }
            TapeElement::EndList(_) => {
                out.push(']');
                stack.pop();
            }
            TapeElement::String(s) => write_string(out, tape.get_string(s)),
            TapeElement::Number(s) => out.push_str(tape.get_string(s)),
            TapeElement::True => out.push_str("true"),
            TapeElement::False => out.push_str("false"),
            TapeElement::Null => out.push_str("null"),
            TapeElement::I32(v) => {
                let _ = write!(out, "{v}");
            }
            TapeElement::F32(v) => {
                let _ = write!(out, "{}", f32::from_bits(v));
            }
            TapeElement::I64(high) => {
                if let TapeElement::I32(low) = tape.get(i + 1) {
                    let _ = write!(out, "{}", (i64::from(high) << 32) | i64::from(low as u32));
                }
                i += 1;
            }
            TapeElement::F64(high) => {
                if let TapeElement::F32(low) = tape.get(i + 1) {
                    let bits = (u64::from(high) << 32) | u64::from(low);
                    let _ = write!(out, "{}", f64::from_bits(bits));
                }
                i += 1;
            }
            // A kind of element a later arrow-json may add: shown as it shows it.
            _ => out.push_str(&tape.error(i, "").to_string()),
        }
        if let Some(limit) = limit
            && out.len() - start_len > limit
        {
            let mut cut = start_len + limit;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
            return Err(Cut);
        }
        i += 1;
    }
    Ok(())
}

/// `s` as a JSON string: `"` and `\` escaped, control characters as `\n`, `\t`… or `\u00XX`
/// (as Python's `json.dumps(…, ensure_ascii=False)` and serde_json write them).
pub(super) fn write_string(out: &mut String, s: &str) {
    out.push('"');
    // Most strings need no escape: copied whole.
    if !s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.push_str(s);
        out.push('"');
        return;
    }
    let mut from = 0;
    for (i, b) in s.bytes().enumerate() {
        let escaped = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[from..i]);
        if escaped.is_empty() {
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.push_str(escaped);
        }
        from = i + 1;
    }
    out.push_str(&s[from..]);
    out.push('"');
}
