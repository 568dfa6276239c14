//! Row-level bookmark keys (Glue's `jobBookmarkKeys` / `jobBookmarkKeysSortOrder`), per
//! source, optional: for feeds where each file re-exports old rows (full snapshots,
//! overlapping windows), only rows whose key is beyond the source's high-water mark are
//! emitted, and the mark advances with the object's commit.
//!
//! Pieces, all pure here (the I/O is in `process::keyed`):
//! - [`BookmarkDoc`]: the `bookmark` field of a source, validated against its schema;
//! - [`Key`], [`KeyColumn`]: a row's key tuple, typed (integers, decimals, dates and
//!   timestamps as exact integers, strings as strings), rendered as typed strings;
//! - [`Index`]: the exact set of key tuples the source has accounted for (emitted, or
//!   reported late): a row at or below the mark is "re-exported" only if its key is in it,
//!   else it is LATE. Never a probabilistic filter: a false positive would skip a late row
//!   silently. A single integer-like key is stored as runs of consecutive values;
//! - [`RowFilter`]: classifies each decoded batch into emitted / late / re-exported rows;
//! - the per-source lock: a ledger [`Record`] of source `"<id>~bookmark"` (a real source id
//!   is `[a-z0-9_-]`, so it can never collide nor show in a source's listing), key
//!   [`LOCK_KEY`], whose `claim` serializes the objects of the source and whose `bookmark`
//!   holds the mark, the index reference, counters and the advance prepared by the holder.
//!
//! # Crash safety without cross-item transactions
//! The holder of the lock prepares an [`Advance`] (new mark, new index object, counters,
//! the object's output and claim token) on the lock record, then commits the object (the
//! decision point), then applies the advance and releases the lock. A worker that finds an
//! expired lock with an advance settles it with [`settle`] from the object's record:
//! committed with the advance's output → apply; the holder's object claim still on the
//! record → fence it first (clear it, so the holder can never commit), then discard;
//! otherwise the holder can no longer commit → discard.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int32Type, Int64Type,
    TimestampMicrosecondType,
};
use arrow_array::{Array, ArrayRef, BooleanArray, PrimitiveArray, RecordBatch, StringArray};
use arrow_schema::{DataType, Schema};
use serde::{Deserialize, Serialize};

use crate::config::ConfigError;
use crate::convert::{ConvertError, ConvertSpec, ConvertStats};
use crate::model::{Advance, BookmarkCounts, BookmarkState, Claim, Record, Target};
use crate::protocol::ClaimLost;
use crate::schema::{ColumnSpec, ColumnType};

/// The key of the lock record.
pub const LOCK_KEY: &str = "mark";

/// What [`lock_source_id`] appends to a source id.
pub const LOCK_SUFFIX: &str = "~bookmark";

/// The ledger source id of a source's lock record.
pub fn lock_source_id(source_id: &str) -> String {
    format!("{source_id}{LOCK_SUFFIX}")
}

/// Encoded late-rows output kept in memory at most, beyond which the object fails
/// (`late_rows: "drop"` keeps nothing). The writer also holds one row group of late rows
/// (closed at [`LATE_ROW_GROUP_BYTES`]), so late rows cost at most 40 MiB of memory.
pub const MAX_LATE_BYTES: usize = 32 << 20;
/// Row-group size of the late-rows output.
pub const LATE_ROW_GROUP_BYTES: usize = 8 << 20;

/// The `bookmark` field of a source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct BookmarkDoc {
    /// Key columns, compared as a tuple in this order.
    pub keys: Vec<String>,
    /// Sort order of the key: rows beyond the mark are greater (ascending) or smaller.
    #[serde(default)]
    pub order: KeyOrder,
    /// What happens to late rows (at or below the mark, never accounted for).
    #[serde(default)]
    pub late_rows: LatePolicy,
}

/// Sort order of a bookmark key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum KeyOrder {
    /// New rows have greater keys.
    #[default]
    Ascending,
    /// New rows have smaller keys.
    Descending,
}

/// What happens to late rows; they are counted either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum LatePolicy {
    /// Written to `<output prefix>_late/<relative key>.<version>.parquet`.
    #[default]
    Write,
    /// Counted, not written.
    Drop,
}

/// Check `doc` against the source's schema; errors name the field (`{at}.bookmark.keys[1]`).
pub fn validate(doc: &BookmarkDoc, schema: &[ColumnSpec], at: &str) -> Result<(), ConfigError> {
    let invalid = |path: String, message: String| ConfigError::Invalid { path, message };
    if doc.keys.is_empty() {
        return Err(invalid(
            format!("{at}.bookmark.keys"),
            "at least one key column is required".into(),
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, name) in doc.keys.iter().enumerate() {
        let path = format!("{at}.bookmark.keys[{i}]");
        if !seen.insert(name) {
            return Err(invalid(path, format!("{name:?} is named twice")));
        }
        let Some(c) = schema.iter().find(|c| &c.name == name) else {
            return Err(invalid(
                path,
                format!("{name:?} is not a column of the schema"),
            ));
        };
        if !c.ty.scalar().is_some_and(orderable) {
            return Err(invalid(
                path,
                format!(
                    "{name:?} is {}: a key must be int32, int64, decimal, date, timestamp or string",
                    c.ty
                ),
            ));
        }
        if c.nullable {
            return Err(invalid(
                path,
                format!("{name:?} is nullable: a key column must be \"nullable\": false"),
            ));
        }
    }
    Ok(())
}

fn orderable(ty: ColumnType) -> bool {
    matches!(
        ty,
        ColumnType::Int32
            | ColumnType::Int64
            | ColumnType::Decimal { .. }
            | ColumnType::Date
            | ColumnType::Timestamp
            | ColumnType::String
    )
}

/// One component of a key: integers, decimals (unscaled), dates (days) and timestamps
/// (microseconds) as exact integers; strings as themselves (compared bytewise).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyValue {
    /// An integer-like value.
    Int(i128),
    /// A string.
    Str(String),
}

/// A row's key tuple.
pub type Key = Vec<KeyValue>;

/// A key column: its position in the schema and its type.
#[derive(Debug, Clone)]
pub struct KeyColumn {
    /// Column name.
    pub name: String,
    /// Position in the schema.
    pub index: usize,
    /// Type.
    pub ty: ColumnType,
}

/// The key columns of `doc` in `schema` (validated by [`validate`]).
pub fn key_columns(doc: &BookmarkDoc, schema: &Schema) -> Vec<KeyColumn> {
    doc.keys
        .iter()
        .filter_map(|name| {
            let (index, field) = schema.column_with_name(name)?;
            Some(KeyColumn {
                name: name.clone(),
                index,
                ty: ColumnType::from_arrow(field.data_type())?,
            })
        })
        .collect()
}

/// Is `key` beyond `mark` in `order`?
pub fn beyond(key: &[KeyValue], mark: &[KeyValue], order: KeyOrder) -> bool {
    match order {
        KeyOrder::Ascending => key > mark,
        KeyOrder::Descending => key < mark,
    }
}

/// The typed string of one key value (`2024-01-02T03:04:05.000000Z`, `12.30`, …).
pub fn render(v: &KeyValue, ty: ColumnType) -> String {
    match (v, ty) {
        (KeyValue::Str(s), _) => s.clone(),
        (KeyValue::Int(n), ColumnType::Date) => i64::try_from(*n)
            .ok()
            .and_then(|d| chrono::DateTime::from_timestamp(d * 86_400, 0))
            .map_or_else(|| n.to_string(), |t| t.format("%Y-%m-%d").to_string()),
        (KeyValue::Int(n), ColumnType::Timestamp) => i64::try_from(*n)
            .ok()
            .and_then(chrono::DateTime::from_timestamp_micros)
            .map_or_else(
                || n.to_string(),
                |t| t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
            ),
        (KeyValue::Int(n), ColumnType::Decimal { scale, .. }) if scale > 0 => {
            let p = 10u128.pow(u32::from(scale.unsigned_abs()));
            let sign = if *n < 0 { "-" } else { "" };
            let a = n.unsigned_abs();
            format!(
                "{sign}{}.{:0width$}",
                a / p,
                a % p,
                width = usize::from(scale.unsigned_abs())
            )
        }
        (KeyValue::Int(n), _) => n.to_string(),
    }
}

/// Read back a typed string written by [`render`].
pub fn parse(s: &str, ty: ColumnType) -> Result<KeyValue, String> {
    let bad = || format!("{s:?} is not a {ty} key value");
    Ok(match ty {
        ColumnType::String => KeyValue::Str(s.to_string()),
        ColumnType::Date => {
            let d = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").map_err(|_| bad())?;
            let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).ok_or_else(bad)?;
            KeyValue::Int(i128::from((d - epoch).num_days()))
        }
        ColumnType::Timestamp => KeyValue::Int(i128::from(
            chrono::DateTime::parse_from_rfc3339(s)
                .map_err(|_| bad())?
                .timestamp_micros(),
        )),
        ColumnType::Decimal { scale, .. } if scale > 0 => {
            let (neg, body) = s.strip_prefix('-').map_or((false, s), |b| (true, b));
            let (int, frac) = body.split_once('.').unwrap_or((body, ""));
            let digits = usize::from(scale.unsigned_abs());
            if frac.len() > digits || int.is_empty() {
                return Err(bad());
            }
            let all = format!("{int}{frac:0<digits$}");
            if !all.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            let n: i128 = all.parse().map_err(|_| bad())?;
            KeyValue::Int(if neg { -n } else { n })
        }
        _ => KeyValue::Int(s.parse().map_err(|_| bad())?),
    })
}

/// The typed strings of a key.
pub fn render_key(key: &[KeyValue], cols: &[KeyColumn]) -> Vec<String> {
    key.iter().zip(cols).map(|(v, c)| render(v, c.ty)).collect()
}

/// Read back a key rendered by [`render_key`].
pub fn parse_key(parts: &[String], cols: &[KeyColumn]) -> Result<Key, String> {
    if parts.len() != cols.len() {
        return Err(format!(
            "the mark has {} values for {} key columns (was the bookmark reconfigured?)",
            parts.len(),
            cols.len()
        ));
    }
    parts
        .iter()
        .zip(cols)
        .map(|(s, c)| parse(s, c.ty))
        .collect()
}

fn value(array: &dyn Array, ty: ColumnType, row: usize) -> Option<KeyValue> {
    if array.is_null(row) {
        return None;
    }
    Some(match ty {
        ColumnType::Int32 => KeyValue::Int(i128::from(
            array.as_primitive_opt::<Int32Type>()?.value(row),
        )),
        ColumnType::Int64 => KeyValue::Int(i128::from(
            array.as_primitive_opt::<Int64Type>()?.value(row),
        )),
        ColumnType::Date => KeyValue::Int(i128::from(
            array.as_primitive_opt::<Date32Type>()?.value(row),
        )),
        ColumnType::Timestamp => KeyValue::Int(i128::from(
            array
                .as_primitive_opt::<TimestampMicrosecondType>()?
                .value(row),
        )),
        ColumnType::Decimal { .. } => {
            KeyValue::Int(array.as_primitive_opt::<Decimal128Type>()?.value(row))
        }
        ColumnType::String => KeyValue::Str(array.as_string_opt::<i32>()?.value(row).to_owned()),
        _ => return None,
    })
}

/// The exact set of key tuples a source has accounted for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Index {
    /// One integer-like key column: runs `start → end` (inclusive) of consecutive values.
    Runs(BTreeMap<i128, i128>),
    /// Any other key: the tuples themselves.
    Tuples(BTreeSet<Key>),
}

/// First line of an encoded index.
const INDEX_HEADER: &str = "tidemark-bookmark-index 1";

impl Index {
    /// An empty index for these key columns.
    pub fn new(cols: &[KeyColumn]) -> Self {
        if cols.len() == 1 && cols[0].ty != ColumnType::String {
            Index::Runs(BTreeMap::new())
        } else {
            Index::Tuples(BTreeSet::new())
        }
    }

    /// Is `key` in the index?
    pub fn contains(&self, key: &[KeyValue]) -> bool {
        match (self, key) {
            (Index::Runs(runs), [KeyValue::Int(v)]) => runs
                .range(..=*v)
                .next_back()
                .is_some_and(|(_, &end)| end >= *v),
            (Index::Tuples(set), _) => set.contains(key),
            _ => false,
        }
    }

    /// Add `key`; `false` if it was there.
    pub fn insert(&mut self, key: Key) -> bool {
        if self.contains(&key) {
            return false;
        }
        match (self, key.as_slice()) {
            (Index::Runs(runs), [KeyValue::Int(v)]) => {
                let v = *v;
                let left = runs
                    .range(..v)
                    .next_back()
                    .map(|(&s, &e)| (s, e))
                    .filter(|&(_, e)| v.checked_sub(1) == Some(e));
                let right = v
                    .checked_add(1)
                    .and_then(|n| runs.get(&n).copied().map(|e| (n, e)));
                match (left, right) {
                    (Some((s, _)), Some((n, e))) => {
                        runs.remove(&n);
                        runs.insert(s, e);
                    }
                    (Some((s, _)), None) => {
                        runs.insert(s, v);
                    }
                    (None, Some((n, e))) => {
                        runs.remove(&n);
                        runs.insert(v, e);
                    }
                    (None, None) => {
                        runs.insert(v, v);
                    }
                }
                true
            }
            (Index::Tuples(set), _) => set.insert(key),
            _ => false,
        }
    }

    /// Keys in the index.
    pub fn len(&self) -> u64 {
        match self {
            Index::Runs(runs) => runs
                .iter()
                .map(|(s, e)| u64::try_from(e - s + 1).unwrap_or(u64::MAX))
                .fold(0, u64::saturating_add),
            Index::Tuples(set) => set.len() as u64,
        }
    }

    /// Is the index empty?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The index as a zstd-compressed text file: a header, then one line per run
    /// (`start..end`, or `value` for a run of one; integers) or per tuple (values separated by tabs; integers in
    /// decimal, strings with `\\`, tab and newline escaped).
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        let mut text = String::from(INDEX_HEADER);
        text.push('\n');
        match self {
            Index::Runs(runs) => {
                for (s, e) in runs {
                    if s == e {
                        let _ = writeln!(text, "{s}");
                    } else {
                        let _ = writeln!(text, "{s}..{e}");
                    }
                }
            }
            Index::Tuples(set) => {
                for key in set {
                    for (i, v) in key.iter().enumerate() {
                        if i > 0 {
                            text.push('\t');
                        }
                        match v {
                            KeyValue::Int(n) => {
                                let _ = write!(text, "{n}");
                            }
                            KeyValue::Str(s) => {
                                for c in s.chars() {
                                    match c {
                                        '\\' => text.push_str("\\\\"),
                                        '\t' => text.push_str("\\t"),
                                        '\n' => text.push_str("\\n"),
                                        '\r' => text.push_str("\\r"),
                                        c => text.push(c),
                                    }
                                }
                            }
                        }
                    }
                    text.push('\n');
                }
            }
        }
        zstd::stream::encode_all(text.as_bytes(), 3).map_err(|e| e.to_string())
    }

    /// Read back [`Index::encode`]'s bytes for these key columns.
    pub fn decode(bytes: &[u8], cols: &[KeyColumn]) -> Result<Self, String> {
        let mut text = String::new();
        zstd::stream::Decoder::new(bytes)
            .and_then(|mut d| d.read_to_string(&mut text))
            .map_err(|e| format!("cannot read the index: {e}"))?;
        let mut lines = text.lines();
        if lines.next() != Some(INDEX_HEADER) {
            return Err("not a bookmark index".into());
        }
        let mut index = Index::new(cols);
        for (n, line) in lines.enumerate() {
            let bad = || format!("index line {}: {line:?}", n + 2);
            match &mut index {
                Index::Runs(runs) => {
                    let (s, e) = line.split_once("..").unwrap_or((line, line));
                    runs.insert(s.parse().map_err(|_| bad())?, e.parse().map_err(|_| bad())?);
                }
                Index::Tuples(set) => {
                    let parts: Vec<&str> = line.split('\t').collect();
                    if parts.len() != cols.len() {
                        return Err(bad());
                    }
                    let key = parts
                        .iter()
                        .zip(cols)
                        .map(|(p, c)| {
                            if c.ty == ColumnType::String {
                                unescape(p).map(KeyValue::Str)
                            } else {
                                p.parse().map(KeyValue::Int).ok()
                            }
                        })
                        .collect::<Option<Key>>()
                        .ok_or_else(bad)?;
                    set.insert(key);
                }
            }
        }
        Ok(index)
    }
}

fn unescape(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next()? {
            '\\' => '\\',
            't' => '\t',
            'n' => '\n',
            'r' => '\r',
            _ => return None,
        });
    }
    Some(out)
}

/// Classifies the rows of one object against the source's mark and index, batch by batch.
#[derive(Debug)]
pub struct RowFilter {
    cols: Vec<KeyColumn>,
    order: KeyOrder,
    policy: LatePolicy,
    mark: Option<Key>,
    /// The index, with this object's keys added as they are classified.
    pub index: Index,
    /// The mark after this object.
    pub new_mark: Option<Key>,
    /// This object's counts (`objects` is 1).
    pub counts: BookmarkCounts,
    /// The late-rows Parquet file, when policy `write` and there were late rows.
    pub late: Option<Vec<u8>>,
}

impl RowFilter {
    /// A filter for `doc` over `schema`, from the source's `mark` and `index`.
    pub fn new(doc: &BookmarkDoc, schema: &Schema, mark: Option<Key>, index: Index) -> Self {
        Self {
            cols: key_columns(doc, schema),
            order: doc.order,
            policy: doc.late_rows,
            new_mark: mark.clone(),
            mark,
            index,
            counts: BookmarkCounts {
                objects: 1,
                ..BookmarkCounts::default()
            },
            late: None,
        }
    }

    /// The key columns.
    pub fn columns(&self) -> &[KeyColumn] {
        &self.cols
    }

    /// Split `batch`: the rows to emit, and the late rows to write (policy `write`).
    pub fn split(
        &mut self,
        batch: &RecordBatch,
    ) -> Result<(RecordBatch, Option<RecordBatch>), ConvertError> {
        let arrays: Vec<&ArrayRef> = self.cols.iter().map(|c| batch.column(c.index)).collect();
        let mut emit = Vec::new();
        let mut late = Vec::new();
        for row in 0..batch.num_rows() {
            let key = self
                .cols
                .iter()
                .zip(&arrays)
                .map(|(c, a)| value(a.as_ref(), c.ty, row))
                .collect::<Option<Key>>()
                .ok_or_else(|| ConvertError::Parse {
                    line: None,
                    record: None,
                    column: None,
                    message: format!("row {}: a bookmark key column is NULL", row + 1),
                })?;
            if self.index.contains(&key) {
                self.counts.skipped += 1;
                continue;
            }
            let is_new = self
                .mark
                .as_ref()
                .is_none_or(|m| beyond(&key, m, self.order));
            if is_new {
                if self
                    .new_mark
                    .as_ref()
                    .is_none_or(|m| beyond(&key, m, self.order))
                {
                    self.new_mark = Some(key.clone());
                }
                self.counts.emitted += 1;
                emit.push(row);
            } else {
                self.counts.late += 1;
                if self.policy == LatePolicy::Write {
                    late.push(row);
                }
            }
            self.index.insert(key);
        }
        let late = (!late.is_empty()).then(|| take(batch, &late)).transpose()?;
        Ok((take(batch, &emit)?, late))
    }

    /// Convert `input` to `output` keeping the emitted rows (counted in the stats), the
    /// late ones written to [`RowFilter::late`] under policy `write`.
    pub fn convert<R: Read + Send, W: Write + Send>(
        &mut self,
        input: R,
        spec: &ConvertSpec,
        output: W,
    ) -> Result<ConvertStats, ConvertError> {
        let mut late = Capped(Vec::new());
        let stats = {
            let aside = (self.policy == LatePolicy::Write).then_some(&mut late);
            crate::convert::convert_split(input, spec, output, &mut |b| self.split(b), aside)?
        };
        if self.counts.late > 0 && self.policy == LatePolicy::Write {
            self.late = Some(late.0);
        }
        Ok(stats)
    }

    /// The mark after this object, rendered.
    pub fn rendered_mark(&self) -> Option<Vec<String>> {
        self.new_mark.as_ref().map(|m| render_key(m, &self.cols))
    }
}

/// The late-rows buffer, failing beyond [`MAX_LATE_BYTES`].
struct Capped(Vec<u8>);

impl Write for Capped {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + data.len() > MAX_LATE_BYTES {
            return Err(std::io::Error::other(format!(
                "late rows exceed {} MiB of Parquet (use \"late_rows\": \"drop\" or fix the key's order)",
                MAX_LATE_BYTES >> 20
            )));
        }
        self.0.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The rows `rows` of `batch`, in order.
fn take(batch: &RecordBatch, rows: &[usize]) -> Result<RecordBatch, ConvertError> {
    if rows.len() == batch.num_rows() {
        return Ok(batch.clone());
    }
    macro_rules! prim {
        ($a:expr, $t:ty) => {{
            let a = $a.as_primitive::<$t>();
            Arc::new(
                PrimitiveArray::<$t>::from_iter(
                    rows.iter().map(|&r| a.is_valid(r).then(|| a.value(r))),
                )
                .with_data_type(a.data_type().clone()),
            ) as ArrayRef
        }};
    }
    let columns = batch
        .columns()
        .iter()
        .map(|a| {
            Ok(match a.data_type() {
                DataType::Int32 => prim!(a, Int32Type),
                DataType::Int64 => prim!(a, Int64Type),
                DataType::Float32 => prim!(a, Float32Type),
                DataType::Float64 => prim!(a, Float64Type),
                DataType::Decimal128(..) => prim!(a, Decimal128Type),
                DataType::Date32 => prim!(a, Date32Type),
                DataType::Timestamp(..) => prim!(a, TimestampMicrosecondType),
                DataType::Utf8 => {
                    let s = a.as_string::<i32>();
                    Arc::new(StringArray::from_iter(
                        rows.iter().map(|&r| s.is_valid(r).then(|| s.value(r))),
                    )) as ArrayRef
                }
                DataType::Boolean => {
                    let b = a.as_boolean();
                    Arc::new(BooleanArray::from_iter(
                        rows.iter().map(|&r| b.is_valid(r).then(|| b.value(r))),
                    )) as ArrayRef
                }
                other => {
                    return Err(ConvertError::InvalidSpec {
                        message: format!("a bookmarked source cannot filter a {other} column"),
                    });
                }
            })
        })
        .collect::<Result<Vec<_>, ConvertError>>()?;
    RecordBatch::try_new(batch.schema(), columns).map_err(|e| ConvertError::Encode {
        message: e.to_string(),
    })
}

// ---------------------------------------------------------------------------------------
// The per-source lock, as pure functions over the lock record.

/// A request for the lock of a source.
#[derive(Debug, Clone)]
pub struct LockRequest {
    /// The source.
    pub source_id: String,
    /// Fresh random token.
    pub token: String,
    /// The key of the object being processed.
    pub key: String,
    /// Its version (for operators reading the record).
    pub target: Target,
    /// The run asking.
    pub run_id: String,
    /// Now, ms.
    pub now: i64,
    /// Lease expiry to write, ms.
    pub lease_until: i64,
}

/// What to do after reading the lock record.
#[derive(Debug, Clone, PartialEq)]
pub enum LockDecision {
    /// Write this record (create it if there was none): the lock is then ours.
    Take(Box<Record>),
    /// Another worker holds a live lease until `until`.
    Busy {
        /// Lease expiry of the holder.
        until: i64,
    },
    /// An expired holder left an advance: read the object's record, [`settle`] it, retry.
    Settle(Box<Advance>),
}

fn claim_of(req: &LockRequest) -> Claim {
    Claim {
        token: req.token.clone(),
        target: req.target.clone(),
        lease_until: req.lease_until,
        claimed_at: req.now,
        run_id: req.run_id.clone(),
    }
}

fn bump(mut r: Record, now: i64) -> Record {
    r.rev += 1;
    r.updated_at = now;
    r.status = r.derive_status(u32::MAX);
    r
}

/// Decide how to take the lock given its record.
pub fn decide_lock(current: Option<&Record>, req: &LockRequest) -> LockDecision {
    let Some(r) = current else {
        let record = Record {
            source_id: lock_source_id(&req.source_id),
            key: LOCK_KEY.into(),
            status: crate::model::Status::Claimed,
            rev: 1,
            committed: None,
            claim: Some(claim_of(req)),
            pending: None,
            attempts: 0,
            last_error: None,
            note: None,
            updated_at: req.now,
            bookmark: Some(BookmarkState {
                holder: Some(req.key.clone()),
                ..BookmarkState::default()
            }),
            writing: Vec::new(),
        };
        return LockDecision::Take(Box::new(record));
    };
    if let Some(c) = r.claim.as_ref().filter(|c| c.lease_until > req.now) {
        return LockDecision::Busy {
            until: c.lease_until,
        };
    }
    if let Some(a) = r.bookmark.as_ref().and_then(|b| b.advance.clone()) {
        return LockDecision::Settle(a);
    }
    let mut record = r.clone();
    record.claim = Some(claim_of(req));
    record
        .bookmark
        .get_or_insert_with(BookmarkState::default)
        .holder = Some(req.key.clone());
    LockDecision::Take(Box::new(bump(record, req.now)))
}

/// The object (key, version) whose outputs an expired holder may have written without ever
/// preparing an advance: they are not committed (a commit needs an advance first), and would
/// hold rows that later objects emit, so the next taker removes them.
pub fn leftover(lock: &Record, now: i64) -> Option<(String, String)> {
    let claim = lock.claim.as_ref().filter(|c| c.lease_until <= now)?;
    let state = lock.bookmark.as_ref()?;
    if state.advance.is_some() {
        return None;
    }
    match (&state.holder, &claim.target) {
        (Some(key), Target::Version(v)) => Some((key.clone(), v.version.clone())),
        _ => None,
    }
}

/// How an advance left on an expired lock is settled, from the object's record.
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    /// The object committed with the advance's output: apply it.
    Apply,
    /// The holder's object claim is still on the record and expired at `until`: write
    /// `fence` (the claim cleared, so the holder can never commit), then discard.
    Fence {
        /// The object's record without the holder's claim.
        fence: Box<Record>,
    },
    /// The holder's object claim is live: wait (the holder may still commit).
    Wait {
        /// Its lease expiry.
        until: i64,
    },
    /// The holder can no longer commit: discard the advance.
    Discard,
}

/// Settle `advance` given the object's record `object`, at `now`.
pub fn settle(advance: &Advance, object: Option<&Record>, now: i64) -> Settlement {
    let Some(o) = object else {
        return Settlement::Discard;
    };
    let committed = o.committed.as_ref().is_some_and(|c| {
        matches!(&c.target, Target::Version(v) if v.version == advance.version)
            && c.outputs.contains(&advance.output)
    });
    if committed {
        return Settlement::Apply;
    }
    match o.claim.as_ref().filter(|c| c.token == advance.object_token) {
        Some(c) if c.lease_until > now => Settlement::Wait {
            until: c.lease_until,
        },
        Some(_) => {
            let message = format!(
                "claim of run {} fenced: its lease expired before it committed, so its \
                 bookmark advance was discarded",
                advance.run_id
            );
            match crate::protocol::fail(
                o,
                &advance.object_token,
                &message,
                crate::protocol::Failure::Transient,
                now,
                u32::MAX,
            ) {
                Ok(fence) => Settlement::Fence {
                    fence: Box::new(fence),
                },
                Err(ClaimLost) => Settlement::Discard,
            }
        }
        None => Settlement::Discard,
    }
}

fn apply(state: &mut BookmarkState, a: &Advance) {
    state.mark = a.mark.clone();
    state.index = Some(a.index.clone());
    state.counts.add(&a.delta);
}

/// The lock record with its advance applied (or discarded) and no claim: what a taker
/// writes, with its own claim, after [`settle`].
pub fn resolved(lock: &Record, apply_it: bool, req: &LockRequest) -> Record {
    let mut record = lock.clone();
    let state = record.bookmark.get_or_insert_with(BookmarkState::default);
    if let Some(a) = state.advance.take()
        && apply_it
    {
        apply(state, &a);
    }
    state.holder = Some(req.key.clone());
    record.claim = Some(claim_of(req));
    bump(record, req.now)
}

fn holding(r: &Record, token: &str) -> Result<(), ClaimLost> {
    r.claim
        .as_ref()
        .filter(|c| c.token == token)
        .map(|_| ())
        .ok_or(ClaimLost)
}

/// Record the advance of the holder `token` (before the object's commit).
pub fn prepare(r: &Record, token: &str, advance: Advance, now: i64) -> Result<Record, ClaimLost> {
    holding(r, token)?;
    let mut record = r.clone();
    record
        .bookmark
        .get_or_insert_with(BookmarkState::default)
        .advance = Some(Box::new(advance));
    Ok(bump(record, now))
}

/// Apply the holder's advance and release the lock (after the object's commit).
pub fn finish(r: &Record, token: &str, now: i64) -> Result<Record, ClaimLost> {
    holding(r, token)?;
    let mut record = r.clone();
    let state = record.bookmark.get_or_insert_with(BookmarkState::default);
    if let Some(a) = state.advance.take() {
        apply(state, &a);
    }
    state.holder = None;
    record.claim = None;
    record.note = None;
    Ok(bump(record, now))
}

/// Release the lock without advancing (the object was not committed).
pub fn abandon(r: &Record, token: &str, note: &str, now: i64) -> Result<Record, ClaimLost> {
    holding(r, token)?;
    let mut record = r.clone();
    if let Some(b) = record.bookmark.as_mut() {
        b.advance = None;
        b.holder = None;
    }
    record.claim = None;
    record.note = Some(note.to_string());
    Ok(bump(record, now))
}

/// FNV-1a of `parts`, 16 hex digits: short stable names for per-version objects.
pub fn short_hash(parts: &[&str]) -> String {
    let h = crate::config::fnv1a_bytes(parts.iter().flat_map(|p| p.bytes().chain([0u8])));
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Committed, OutputRef, Status, VersionRef};
    use crate::schema::arrow_schema;

    fn cols(spec: &str) -> (Vec<ColumnSpec>, BookmarkDoc) {
        let schema: Vec<ColumnSpec> = serde_json::from_str(spec).unwrap();
        let doc = BookmarkDoc {
            keys: schema.iter().map(|c| c.name.clone()).collect(),
            order: KeyOrder::Ascending,
            late_rows: LatePolicy::Write,
        };
        (schema, doc)
    }

    #[test]
    fn validation_names_the_field() {
        let (schema, mut doc) = cols(
            r#"[{"name":"id","type":"int64","nullable":false},{"name":"f","type":"float64","nullable":false},
                {"name":"n","type":"int64"}]"#,
        );
        doc.keys = vec!["id".into(), "f".into()];
        let e = validate(&doc, &schema, "sources[0]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sources[0].bookmark.keys[1]"), "{e}");
        doc.keys = vec!["n".into()];
        let e = validate(&doc, &schema, "sources[0]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("keys[0]") && e.contains("nullable"), "{e}");
        doc.keys = vec!["nope".into()];
        assert!(validate(&doc, &schema, "s").is_err());
        doc.keys = vec![];
        assert!(validate(&doc, &schema, "s").is_err());
        doc.keys = vec!["id".into(), "id".into()];
        assert!(validate(&doc, &schema, "s").is_err());
        doc.keys = vec!["id".into()];
        validate(&doc, &schema, "s").unwrap();
    }

    #[test]
    fn typed_strings_round_trip() {
        let cases = [
            (ColumnType::Int64, "-42"),
            (ColumnType::Date, "2024-02-29"),
            (ColumnType::Timestamp, "2024-02-29T23:59:59.000001Z"),
            (
                ColumnType::Decimal {
                    precision: 12,
                    scale: 2,
                },
                "-0.05",
            ),
            (
                ColumnType::Decimal {
                    precision: 12,
                    scale: 0,
                },
                "17",
            ),
            (ColumnType::String, "a\tb"),
        ];
        for (ty, s) in cases {
            let v = parse(s, ty).unwrap();
            assert_eq!(render(&v, ty), s, "{ty}");
        }
        assert_eq!(
            parse("2024-01-01T01:00:00+01:00", ColumnType::Timestamp).unwrap(),
            parse("2024-01-01T00:00:00Z", ColumnType::Timestamp).unwrap()
        );
        assert!(
            parse(
                "1.234",
                ColumnType::Decimal {
                    precision: 5,
                    scale: 2
                }
            )
            .is_err()
        );
        assert!(parse("x", ColumnType::Int32).is_err());
    }

    #[test]
    fn runs_compress_consecutive_keys_exactly() {
        let c = vec![KeyColumn {
            name: "id".into(),
            index: 0,
            ty: ColumnType::Int64,
        }];
        let mut idx = Index::new(&c);
        for v in [5, 3, 4, 10, 1, 9, 11, 2, 20] {
            assert!(idx.insert(vec![KeyValue::Int(v)]));
        }
        assert!(!idx.insert(vec![KeyValue::Int(4)]));
        let Index::Runs(runs) = &idx else { panic!() };
        assert_eq!(runs, &BTreeMap::from([(1, 5), (9, 11), (20, 20)]));
        assert_eq!(idx.len(), 9);
        for v in 0..22 {
            let want = (1..=5).contains(&v) || (9..=11).contains(&v) || v == 20;
            assert_eq!(idx.contains(&[KeyValue::Int(v)]), want, "{v}");
        }
        let back = Index::decode(&idx.encode().unwrap(), &c).unwrap();
        assert_eq!(back, idx);
    }

    #[test]
    fn tuples_round_trip_with_awkward_strings() {
        let c = vec![
            KeyColumn {
                name: "s".into(),
                index: 0,
                ty: ColumnType::String,
            },
            KeyColumn {
                name: "t".into(),
                index: 1,
                ty: ColumnType::Timestamp,
            },
        ];
        let mut idx = Index::new(&c);
        for s in ["a", "tab\there", "nl\nx", "back\\slash", "", "é"] {
            idx.insert(vec![KeyValue::Str(s.into()), KeyValue::Int(7)]);
        }
        let back = Index::decode(&idx.encode().unwrap(), &c).unwrap();
        assert_eq!(back, idx);
        assert!(Index::decode(b"junk", &c).is_err());
    }

    /// The size figures of the bookmark-keys guide (docs/pages/guides/bookmark-keys.md): `cargo test -p tidemark --lib --release
    /// index_size -- --ignored --nocapture`.
    #[test]
    #[ignore = "size measurement for the bookmark-keys guide: cargo test -p tidemark --lib --release index_size -- --ignored --nocapture"]
    fn index_size() {
        let int = vec![KeyColumn {
            name: "id".into(),
            index: 0,
            ty: ColumnType::Int64,
        }];
        let comp = vec![
            KeyColumn {
                name: "customer".into(),
                index: 0,
                ty: ColumnType::String,
            },
            KeyColumn {
                name: "at".into(),
                index: 1,
                ty: ColumnType::Timestamp,
            },
        ];
        let n = 1_000_000i128;
        let mut dense = Index::new(&int);
        let mut sparse = Index::new(&int);
        let mut tuples = Index::new(&comp);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..n {
            dense.insert(vec![KeyValue::Int(i)]);
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            sparse.insert(vec![KeyValue::Int(i128::from(x >> 24))]);
            tuples.insert(vec![
                KeyValue::Str(format!("customer-{:06}", x % 100_000)),
                KeyValue::Int(1_700_000_000_000_000 + i * 1_000_000),
            ]);
        }
        for (name, idx) in [("dense", &dense), ("sparse", &sparse), ("tuples", &tuples)] {
            let started = std::time::Instant::now();
            let bytes = idx.encode().unwrap();
            let encoded = started.elapsed();
            let started = std::time::Instant::now();
            let cols = if name == "tuples" { &comp } else { &int };
            Index::decode(&bytes, cols).unwrap();
            println!(
                "{name}: {} keys, {} bytes encoded (zstd), encode {encoded:?}, decode {:?}",
                idx.len(),
                bytes.len(),
                started.elapsed()
            );
        }
    }

    fn batch(ids: &[i64]) -> RecordBatch {
        let schema = arrow_schema(
            &serde_json::from_str::<Vec<ColumnSpec>>(
                r#"[{"name":"id","type":"int64","nullable":false},{"name":"v","type":"string"}]"#,
            )
            .unwrap(),
        );
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(arrow_array::Int64Array::from(ids.to_vec())),
                Arc::new(StringArray::from_iter(
                    ids.iter().map(|i| Some(format!("v{i}"))),
                )),
            ],
        )
        .unwrap()
    }

    fn ids(b: &RecordBatch) -> Vec<i64> {
        b.column(0)
            .as_primitive::<Int64Type>()
            .values()
            .iter()
            .copied()
            .collect()
    }

    fn filter(order: KeyOrder, mark: Option<i128>, seen: &[i64]) -> RowFilter {
        let b = batch(&[]);
        let doc = BookmarkDoc {
            keys: vec!["id".into()],
            order,
            late_rows: LatePolicy::Write,
        };
        let cols = key_columns(&doc, &b.schema());
        let mut index = Index::new(&cols);
        for s in seen {
            index.insert(vec![KeyValue::Int(i128::from(*s))]);
        }
        RowFilter::new(
            &doc,
            &b.schema(),
            mark.map(|m| vec![KeyValue::Int(m)]),
            index,
        )
    }

    #[test]
    fn rows_beyond_the_mark_are_emitted_once_and_unseen_rows_below_it_are_late() {
        // Emitted 1..=5 before; the mark is 5; key 2 was never seen (a gap).
        let mut f = filter(KeyOrder::Ascending, Some(5), &[1, 3, 4, 5]);
        let (emit, late) = f.split(&batch(&[1, 2, 3, 4, 5, 6, 7, 7, 8])).unwrap();
        assert_eq!(ids(&emit), vec![6, 7, 8]);
        assert_eq!(ids(&late.unwrap()), vec![2]);
        assert_eq!(
            (f.counts.emitted, f.counts.late, f.counts.skipped),
            (3, 1, 5)
        );
        assert_eq!(f.rendered_mark(), Some(vec!["8".to_string()]));
        // The late key is now accounted for: a re-export of it is not late again.
        let (emit, late) = f.split(&batch(&[2, 8, 9])).unwrap();
        assert_eq!((ids(&emit), late.is_none()), (vec![9], true));
        assert_eq!(f.counts.late, 1);
    }

    #[test]
    fn descending_keys_advance_downwards() {
        let mut f = filter(KeyOrder::Descending, Some(100), &[100, 101]);
        let (emit, late) = f.split(&batch(&[101, 100, 99, 98, 150])).unwrap();
        assert_eq!(ids(&emit), vec![99, 98]);
        assert_eq!(ids(&late.unwrap()), vec![150]);
        assert_eq!(f.rendered_mark(), Some(vec!["98".to_string()]));
        let mut first = filter(KeyOrder::Descending, None, &[]);
        let (emit, _) = first.split(&batch(&[3, 9, 1])).unwrap();
        assert_eq!(ids(&emit), vec![3, 9, 1]);
        assert_eq!(first.rendered_mark(), Some(vec!["1".to_string()]));
    }

    fn version(v: &str) -> Target {
        Target::Version(VersionRef {
            version: v.into(),
            version_id: None,
            etag: Some(v.into()),
            sequencer: None,
            size: None,
        })
    }

    fn lock_req(token: &str, now: i64) -> LockRequest {
        LockRequest {
            source_id: "s".into(),
            token: token.into(),
            key: "in/a.csv".into(),
            target: version("a"),
            run_id: format!("run-{token}"),
            now,
            lease_until: now + 100,
        }
    }

    fn out(key: &str) -> OutputRef {
        OutputRef {
            bucket: "lake".into(),
            key: key.into(),
            etag: format!("e-{key}"),
            ..OutputRef::default()
        }
    }

    fn advance(version: &str, token: &str) -> Advance {
        Advance {
            key: "in/a.csv".into(),
            version: version.into(),
            object_token: token.into(),
            run_id: "run".into(),
            output: out("o1"),
            mark: Some(vec!["9".into()]),
            index: out("idx1"),
            delta: BookmarkCounts {
                objects: 1,
                emitted: 4,
                late: 1,
                skipped: 2,
            },
            at: 5,
        }
    }

    fn take_lock(current: Option<&Record>, token: &str, now: i64) -> Record {
        match decide_lock(current, &lock_req(token, now)) {
            LockDecision::Take(r) => *r,
            other => panic!("expected to take the lock, got {other:?}"),
        }
    }

    fn object_record(token: &str, lease_until: i64) -> Record {
        Record {
            source_id: "s".into(),
            key: "in/a.csv".into(),
            status: Status::Claimed,
            rev: 3,
            committed: None,
            claim: Some(Claim {
                token: token.into(),
                target: version("v1"),
                lease_until,
                claimed_at: 0,
                run_id: "run".into(),
            }),
            pending: None,
            attempts: 0,
            last_error: None,
            note: None,
            updated_at: 0,
            bookmark: None,
            writing: Vec::new(),
        }
    }

    #[test]
    fn the_lock_serializes_holders_and_applies_on_finish() {
        let l1 = take_lock(None, "t1", 0);
        assert_eq!(l1.source_id, "s~bookmark");
        assert_eq!(
            decide_lock(Some(&l1), &lock_req("t2", 10)),
            LockDecision::Busy { until: 100 }
        );
        let p = prepare(&l1, "t1", advance("v1", "o"), 20).unwrap();
        assert!(prepare(&p, "t2", advance("v1", "o"), 20).is_err());
        let f = finish(&p, "t1", 30).unwrap();
        let state = f.bookmark.as_ref().unwrap();
        assert_eq!(state.mark, Some(vec!["9".to_string()]));
        assert_eq!(state.index, Some(out("idx1")));
        assert_eq!(state.counts.emitted, 4);
        assert!(f.claim.is_none() && state.advance.is_none());
        assert_eq!(f.rev, p.rev + 1);
        // The next holder takes it at once.
        let l2 = take_lock(Some(&f), "t2", 31);
        assert_eq!(l2.bookmark.as_ref().unwrap().mark, state.mark);
        // Abandoning leaves the mark alone.
        let p2 = prepare(&l2, "t2", advance("v2", "o2"), 32).unwrap();
        let a = abandon(&p2, "t2", "failed", 33).unwrap();
        assert_eq!(a.bookmark.as_ref().unwrap().counts.emitted, 4);
        assert!(a.bookmark.as_ref().unwrap().advance.is_none());
    }

    #[test]
    fn a_holder_that_died_before_preparing_leaves_outputs_for_the_next_taker_to_remove() {
        let l1 = take_lock(None, "t1", 0);
        assert_eq!(
            l1.bookmark.as_ref().unwrap().holder.as_deref(),
            Some("in/a.csv")
        );
        // Live: nothing to remove; expired: the holder's object and version.
        assert_eq!(leftover(&l1, 50), None);
        assert_eq!(leftover(&l1, 100), Some(("in/a.csv".into(), "a".into())));
        // Prepared: the advance settles it instead; finished or abandoned: nothing held.
        let p = prepare(&l1, "t1", advance("v1", "o"), 20).unwrap();
        assert_eq!(leftover(&p, 100), None);
        let f = finish(&p, "t1", 30).unwrap();
        assert_eq!(f.bookmark.as_ref().unwrap().holder, None);
        assert_eq!(leftover(&f, 100), None);
        let a = abandon(&take_lock(Some(&f), "t2", 31), "t2", "x", 32).unwrap();
        assert_eq!(leftover(&a, 1000), None);
    }

    #[test]
    fn a_crash_after_prepare_and_before_the_commit_is_fenced_and_discarded() {
        let p = prepare(&take_lock(None, "t1", 0), "t1", advance("v1", "o"), 20).unwrap();
        // The holder died: its lock lease is over.
        let LockDecision::Settle(a) = decide_lock(Some(&p), &lock_req("t2", 200)) else {
            panic!()
        };
        // Its object claim still live: wait.
        assert_eq!(
            settle(&a, Some(&object_record("o", 300)), 200),
            Settlement::Wait { until: 300 }
        );
        // Expired: fence it, so the holder can never commit, then discard.
        let Settlement::Fence { fence } = settle(&a, Some(&object_record("o", 150)), 200) else {
            panic!()
        };
        assert!(fence.claim.is_none());
        assert_eq!(fence.rev, 4);
        assert!(crate::protocol::commit(&fence, "o", committed("v1"), 201, 3).is_err());
        // Another claim (or none): the holder cannot commit; discard.
        assert_eq!(
            settle(&a, Some(&object_record("other", 300)), 200),
            Settlement::Discard
        );
        assert_eq!(settle(&a, None, 200), Settlement::Discard);
        let taken = resolved(&p, false, &lock_req("t2", 200));
        let state = taken.bookmark.as_ref().unwrap();
        assert_eq!((state.mark.clone(), state.counts.emitted), (None, 0));
        assert_eq!(taken.claim.as_ref().unwrap().token, "t2");
    }

    fn committed(v: &str) -> Committed {
        Committed {
            target: version(v),
            rows: 4,
            sums: Default::default(),
            outputs: vec![out("o0"), out("o1")],
            rejected: 0,
            rejects: None,
            rescued: 0,
            ignored: Default::default(),
            config_fp: "fp".into(),
            committed_at: 25,
            run_id: "run".into(),
        }
    }

    #[test]
    fn a_crash_after_the_commit_applies_the_advance() {
        let p = prepare(&take_lock(None, "t1", 0), "t1", advance("v1", "o"), 20).unwrap();
        let mut o = object_record("o", 150);
        o.claim = None;
        o.committed = Some(committed("v1"));
        let LockDecision::Settle(a) = decide_lock(Some(&p), &lock_req("t2", 200)) else {
            panic!()
        };
        assert_eq!(settle(&a, Some(&o), 200), Settlement::Apply);
        let taken = resolved(&p, true, &lock_req("t2", 200));
        let state = taken.bookmark.as_ref().unwrap();
        assert_eq!(state.mark, Some(vec!["9".to_string()]));
        assert_eq!(state.counts.late, 1);
        // Committed, but another version or without the advance's output: not ours.
        o.committed = Some(committed("v0"));
        assert_eq!(settle(&a, Some(&o), 200), Settlement::Discard);
        let mut c = committed("v1");
        c.outputs = vec![];
        o.committed = Some(c);
        assert_eq!(settle(&a, Some(&o), 200), Settlement::Discard);
    }
}
