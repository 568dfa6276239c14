//! The columns of the fast path: builders that read values of their type at a cursor, to any
//! depth (structs, arrays, maps, `json` texts), declining whatever the strict decoders of
//! `tree` would read otherwise; and what the columns of one decoder share ([`Ctx`]).
//!
//! A declined line may leave a partial row in the builders (a struct whose first fields were
//! read, a list whose elements were): every column is finished at a number of rows
//! ([`Column::finish`]), which cuts what follows, children included.

use std::hash::BuildHasher;
use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, PrimitiveBuilder, StringBuilder};
use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int32Type, Int64Type,
    TimestampMicrosecondType,
};
use arrow_array::{Array, ArrayRef, ListArray, MapArray, StructArray};
use arrow_buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_cast::parse::Parser;
use arrow_schema::{ArrowError, DataType, FieldRef};

use super::super::super::{Ignored, UnknownFields, value};
use super::super::tree::child_path;
use super::cursor::{Cursor, Declined, Key, Read, is_json_number, short_float, skip_value};
use crate::schema::{ColumnType, FieldType};

/// The converter's hash maps of keys (foldhash, as in `tree`).
type HashMap<K, V> = foldhash::HashMap<K, V>;

/// What the columns of one decoder share: scratch space, and the unknown fields met.
pub(super) struct Ctx {
    /// Strings with escapes, decoded.
    pub(super) scratch: Vec<u8>,
    /// A `json` value written again.
    text: String,
    /// What an unknown key does: under [`UnknownFields::Ignore`] its value is counted, under
    /// the others the line is declined (arrow-json's path refuses or rescues it).
    unknown: UnknownFields,
    /// The schema paths of the unknown fields met, by number.
    paths: Vec<String>,
    /// Their numbers by path.
    numbers: HashMap<String, u32>,
    /// The unknown fields whose values (not null) the line being read has.
    line: Vec<u32>,
    /// Values counted per path number, in the rows read since the last [`Self::take`].
    counts: Vec<u64>,
    /// Hashes of the keys of the map being read.
    map_keys: foldhash::HashSet<u64>,
}

impl Ctx {
    pub(super) fn new(unknown: UnknownFields) -> Self {
        Self {
            scratch: Vec::new(),
            text: String::new(),
            unknown,
            paths: Vec::new(),
            numbers: HashMap::default(),
            line: Vec::new(),
            counts: Vec::new(),
            map_keys: foldhash::HashSet::default(),
        }
    }

    /// The number of the unknown field at schema path `path`.
    pub(super) fn number(&mut self, path: String) -> u32 {
        if let Some(&n) = self.numbers.get(&path) {
            return n;
        }
        let n = self.paths.len() as u32;
        self.paths.push(path.clone());
        self.numbers.insert(path, n);
        self.counts.push(0);
        n
    }

    /// Skips the value at `cur` of the unknown field numbered `n`, counted (unless null)
    /// once its line is read; declined unless unknown fields are ignored.
    pub(super) fn unknown(&mut self, cur: &mut Cursor<'_>, n: u32) -> Read {
        if self.unknown != UnknownFields::Ignore {
            return Err(Declined);
        }
        if cur.peek() != Some(b'n') {
            self.line.push(n);
        }
        skip_value(cur, &mut self.scratch, 0)
    }

    /// The values of the unknown fields of the line just read count.
    pub(super) fn line_read(&mut self) {
        for n in self.line.drain(..) {
            self.counts[n as usize] += 1;
        }
    }

    /// The line being read is dropped: its unknown fields do not count.
    pub(super) fn line_dropped(&mut self) {
        self.line.clear();
    }

    /// The values of unknown fields counted since the last call.
    pub(super) fn take(&mut self) -> Ignored {
        let mut ignored = Ignored::default();
        for (path, count) in self.paths.iter().zip(&mut self.counts) {
            if *count > 0 {
                ignored.add(path, std::mem::take(count));
            }
        }
        ignored
    }

    /// Forgets the values counted.
    pub(super) fn clear(&mut self) {
        self.line.clear();
        self.counts.iter_mut().for_each(|c| *c = 0);
    }
}

/// What a key of an object is.
pub(super) enum Found {
    /// The key of this field.
    Field(usize),
    /// A key no field has: the number of its schema path.
    Unknown(u32),
    /// At the root: a key only path columns read from (a node of the paths' tree).
    Root(usize),
}

/// The keys of an object: the fields of a struct, or the columns of the row object.
pub(super) struct Fields {
    /// Each field's name, as keys are compared with it (`None`: no key names the field, a
    /// path column of the root).
    names: Vec<Option<String>>,
    /// Each name as a key spells it without escapes, compared in place with the key at the
    /// cursor (`None` for a name with a `"` or `\`, which a key spells with escapes).
    keys: Vec<Option<Key>>,
    /// Field by name.
    index: HashMap<String, usize>,
    /// The object (row) in which each field was last given a value.
    pub(super) seen: Vec<u64>,
    pub(super) generation: u64,
    /// The schema path of the object (empty at the root), for unknown fields' paths.
    path: String,
    /// The schema path numbers of unknown keys, by key.
    unknown: HashMap<String, u32>,
    /// At the root: the node of the paths' tree of each key path columns read from
    /// (see [`Found::Root`]), and of each field that also holds path columns.
    pub(super) roots: HashMap<String, usize>,
    pub(super) field_roots: Vec<Option<usize>>,
    /// Whether a field holds path columns (`field_roots` has a node).
    pub(super) has_field_roots: bool,
}

impl Fields {
    /// The keys of an object at schema path `path` whose fields are named `names`; `None`
    /// when two fields share a name (arrow-json then fills the first).
    pub(super) fn new(names: Vec<Option<String>>, path: String) -> Option<Self> {
        let mut index = HashMap::default();
        for (i, name) in names.iter().enumerate() {
            if let Some(name) = name
                && index.insert(name.clone(), i).is_some()
            {
                return None;
            }
        }
        Some(Self {
            keys: names
                .iter()
                .map(|n| n.as_deref().and_then(Key::new))
                .collect(),
            seen: vec![0; names.len()],
            field_roots: vec![None; names.len()],
            names,
            index,
            generation: 0,
            path,
            unknown: HashMap::default(),
            roots: HashMap::default(),
            has_field_roots: false,
        })
    }

    /// What the key at `cur` (after its opening quote) is, when it is not the field expected
    /// (`next`), consumed with its closing quote. Keys mostly come in the fields' order,
    /// some skipped: the ones after `next` are compared in place (eight, or every one of a
    /// small struct) before the key is read and looked up.
    #[inline(never)]
    fn key_elsewhere(&mut self, cur: &mut Cursor<'_>, next: usize, ctx: &mut Ctx) -> Read<Found> {
        let rest = cur.rest();
        let len = self.keys.len();
        let tried = if len <= 16 { len } else { 8 };
        for step in 1..tried {
            let k = (next + step) % len;
            if let Some(key) = &self.keys[k]
                && key.starts(rest)
            {
                cur.at += key.len();
                return Ok(Found::Field(k));
            }
        }
        let key = cur.string(&mut ctx.scratch)?;
        let field = match self.names.get(next) {
            Some(Some(name)) if name == key => Some(next),
            _ => self.index.get(key).copied(),
        };
        if let Some(field) = field {
            return Ok(Found::Field(field));
        }
        if let Some(&node) = self.roots.get(key) {
            return Ok(Found::Root(node));
        }
        if let Some(&n) = self.unknown.get(key) {
            return Ok(Found::Unknown(n));
        }
        let key = key.to_owned();
        let n = ctx.number(child_path(&self.path, &key));
        self.unknown.insert(key, n);
        Ok(Found::Unknown(n))
    }

    /// Reads the object at `cur` (after its `{`) into `children`, one per field; each key
    /// that path columns read from is pushed to `roots` with where its value starts. Fields
    /// the object lacks are left to [`Self::fill`].
    pub(super) fn read(
        &mut self,
        children: &mut [Column],
        cur: &mut Cursor<'_>,
        ctx: &mut Ctx,
        mut roots: Option<&mut Vec<(usize, usize)>>,
    ) -> Read {
        self.generation += 1;
        cur.skip_ws();
        if cur.eat(b'}') {
            return Ok(());
        }
        let mut next = 0;
        loop {
            cur.expect(b'"')?;
            // The key expected, compared in place (most keys), or any other.
            let found = match self.keys.get(next) {
                Some(Some(key)) if key.starts(cur.rest()) => {
                    cur.at += key.len();
                    Found::Field(next)
                }
                _ => self.key_elsewhere(cur, next, ctx)?,
            };
            cur.skip_ws();
            cur.expect(b':')?;
            cur.skip_ws();
            match found {
                Found::Field(field) => {
                    if self.seen[field] == self.generation {
                        return Err(Declined);
                    }
                    self.seen[field] = self.generation;
                    next = field + 1;
                    if self.has_field_roots
                        && let Some(roots) = roots.as_deref_mut()
                        && let Some(node) = self.field_roots[field]
                    {
                        roots.push((node, cur.at));
                    }
                    // Scalars read here, inline: most values are.
                    match &mut children[field] {
                        Column::Scalar(scalar) => scalar.read(cur, &mut ctx.scratch)?,
                        child => child.read(cur, ctx)?,
                    }
                }
                Found::Root(node) => {
                    let roots = roots.as_deref_mut().ok_or(Declined)?;
                    // A key given twice: arrow-json's path reads the first.
                    if roots.iter().any(|&(n, _)| n == node) {
                        return Err(Declined);
                    }
                    roots.push((node, cur.at));
                    skip_value(cur, &mut ctx.scratch, 0)?;
                }
                Found::Unknown(n) => ctx.unknown(cur, n)?,
            }
            cur.skip_ws();
            match cur.next() {
                Some(b',') => cur.skip_ws(),
                Some(b'}') => return Ok(()),
                _ => return Err(Declined),
            }
        }
    }

    /// Gives a NULL to every field of `children` the object just read lacks.
    pub(super) fn fill(&self, children: &mut [Column]) {
        for (child, _) in children
            .iter_mut()
            .zip(&self.seen)
            .filter(|(_, seen)| **seen != self.generation)
        {
            child.null();
        }
    }
}

/// The builder of one column or field of any type.
pub(super) enum Column {
    Scalar(Scalar),
    /// A `json` value as its compact text.
    Json(StringBuilder),
    Struct(Box<Struct>),
    List(Box<List>),
    Map(Box<Map>),
}

/// A `struct` column or field.
pub(super) struct Struct {
    fields: Fields,
    children: Vec<Column>,
    valid: Vec<bool>,
    arrow: arrow_schema::Fields,
}

/// An `array` column or field.
pub(super) struct List {
    offsets: Vec<i32>,
    valid: Vec<bool>,
    child: Column,
    element: FieldRef,
}

/// A `map<string,…>` column or field.
pub(super) struct Map {
    offsets: Vec<i32>,
    valid: Vec<bool>,
    keys: StringBuilder,
    values: Column,
    entries: FieldRef,
    kv: arrow_schema::Fields,
}

impl Column {
    /// The column of `field` at schema path `path`, or `None` for a type it does not read.
    pub(super) fn new(field: &FieldRef, path: String) -> Option<Self> {
        Some(match FieldType::from_field(field)? {
            FieldType::Scalar(ty) => Self::Scalar(Scalar::new(ty, field.data_type())?),
            FieldType::Json => Self::Json(StringBuilder::new()),
            FieldType::Struct(_) => {
                let DataType::Struct(arrow) = field.data_type() else {
                    return None;
                };
                let children = arrow
                    .iter()
                    .map(|f| Column::new(f, child_path(&path, f.name())))
                    .collect::<Option<Vec<_>>>()?;
                let names = arrow.iter().map(|f| Some(f.name().clone())).collect();
                Self::Struct(Box::new(Struct {
                    fields: Fields::new(names, path)?,
                    children,
                    valid: Vec::new(),
                    arrow: arrow.clone(),
                }))
            }
            FieldType::Array(_) => {
                let DataType::List(element) = field.data_type() else {
                    return None;
                };
                Self::List(Box::new(List {
                    offsets: vec![0],
                    valid: Vec::new(),
                    child: Column::new(element, format!("{path}[]"))?,
                    element: element.clone(),
                }))
            }
            FieldType::Map(_) => {
                let DataType::Map(entries, _) = field.data_type() else {
                    return None;
                };
                let DataType::Struct(kv) = entries.data_type() else {
                    return None;
                };
                Self::Map(Box::new(Map {
                    offsets: vec![0],
                    valid: Vec::new(),
                    keys: StringBuilder::new(),
                    values: Column::new(&kv[1], format!("{path}{{}}"))?,
                    entries: entries.clone(),
                    kv: kv.clone(),
                }))
            }
        })
    }

    /// Reads the value at `cur`.
    pub(super) fn read(&mut self, cur: &mut Cursor<'_>, ctx: &mut Ctx) -> Read {
        match self {
            Self::Scalar(s) => s.read(cur, &mut ctx.scratch),
            Self::Json(b) => {
                if cur.peek() == Some(b'n') {
                    cur.literal("null")?;
                    b.append_null();
                    return Ok(());
                }
                let start = cur.at;
                if cur.json_value()? {
                    b.append_value(cur.since(start));
                } else {
                    cur.at = start;
                    ctx.text.clear();
                    cur.write_json(&mut ctx.text, &mut ctx.scratch)?;
                    b.append_value(&ctx.text);
                }
                Ok(())
            }
            Self::Struct(s) => match cur.peek() {
                Some(b'{') => {
                    cur.at += 1;
                    s.fields.read(&mut s.children, cur, ctx, None)?;
                    s.fields.fill(&mut s.children);
                    s.valid.push(true);
                    Ok(())
                }
                Some(b'n') => {
                    cur.literal("null")?;
                    self.null();
                    Ok(())
                }
                _ => Err(Declined),
            },
            Self::List(l) => match cur.peek() {
                Some(b'[') => {
                    cur.at += 1;
                    let mut len = *l.offsets.last().expect("offsets start at 0");
                    cur.skip_ws();
                    if !cur.eat(b']') {
                        loop {
                            l.child.read(cur, ctx)?;
                            len = len.checked_add(1).ok_or(Declined)?;
                            cur.skip_ws();
                            match cur.next() {
                                Some(b',') => cur.skip_ws(),
                                Some(b']') => break,
                                _ => return Err(Declined),
                            }
                        }
                    }
                    l.offsets.push(len);
                    l.valid.push(true);
                    Ok(())
                }
                Some(b'n') => {
                    cur.literal("null")?;
                    self.null();
                    Ok(())
                }
                _ => Err(Declined),
            },
            Self::Map(m) => match cur.peek() {
                Some(b'{') => {
                    cur.at += 1;
                    let mut len = *m.offsets.last().expect("offsets start at 0");
                    let first = len as usize;
                    ctx.map_keys.clear();
                    cur.skip_ws();
                    if !cur.eat(b'}') {
                        loop {
                            cur.expect(b'"')?;
                            let key = cur.string(&mut ctx.scratch)?;
                            let hash = foldhash::fast::FixedState::default().hash_one(key);
                            // A key given twice is a bad value of arrow-json's path.
                            if !ctx.map_keys.insert(hash) && m.has_key_since(first, key) {
                                return Err(Declined);
                            }
                            m.keys.append_value(key);
                            cur.skip_ws();
                            cur.expect(b':')?;
                            cur.skip_ws();
                            m.values.read(cur, ctx)?;
                            len = len.checked_add(1).ok_or(Declined)?;
                            cur.skip_ws();
                            match cur.next() {
                                Some(b',') => cur.skip_ws(),
                                Some(b'}') => break,
                                _ => return Err(Declined),
                            }
                        }
                    }
                    m.offsets.push(len);
                    m.valid.push(true);
                    Ok(())
                }
                Some(b'n') => {
                    cur.literal("null")?;
                    self.null();
                    Ok(())
                }
                _ => Err(Declined),
            },
        }
    }

    /// Appends a NULL.
    pub(super) fn null(&mut self) {
        match self {
            Self::Scalar(s) => s.null(),
            Self::Json(b) => b.append_null(),
            Self::Struct(s) => {
                s.valid.push(false);
                for child in &mut s.children {
                    child.null();
                }
            }
            Self::List(l) => {
                let last = *l.offsets.last().expect("offsets start at 0");
                l.offsets.push(last);
                l.valid.push(false);
            }
            Self::Map(m) => {
                let last = *m.offsets.last().expect("offsets start at 0");
                m.offsets.push(last);
                m.valid.push(false);
            }
        }
    }

    /// The first `rows` values as an array, and the builder empty again: what a partial row
    /// left after them (children included) is dropped.
    pub(super) fn finish(&mut self, rows: usize) -> Result<ArrayRef, ArrowError> {
        let cut = |array: ArrayRef| -> Result<ArrayRef, ArrowError> {
            match array.len() {
                len if len == rows => Ok(array),
                len if len > rows => Ok(array.slice(0, rows)),
                len => Err(ArrowError::InvalidArgumentError(format!(
                    "{len} values for {rows} rows"
                ))),
            }
        };
        match self {
            Self::Scalar(s) => cut(s.finish()),
            Self::Json(b) => cut(Arc::new(b.finish())),
            Self::Struct(s) => {
                let nulls = nulls(&mut s.valid, rows)?;
                let children = s
                    .children
                    .iter_mut()
                    .map(|c| c.finish(rows))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Arc::new(StructArray::try_new(
                    s.arrow.clone(),
                    children,
                    nulls,
                )?))
            }
            Self::List(l) => {
                let (offsets, nulls, end) = offsets(&mut l.offsets, &mut l.valid, rows)?;
                let values = l.child.finish(end)?;
                Ok(Arc::new(ListArray::try_new(
                    l.element.clone(),
                    offsets,
                    values,
                    nulls,
                )?))
            }
            Self::Map(m) => {
                let (offsets, nulls, end) = offsets(&mut m.offsets, &mut m.valid, rows)?;
                let keys: ArrayRef = Arc::new(m.keys.finish());
                let keys = if keys.len() > end {
                    keys.slice(0, end)
                } else {
                    keys
                };
                let values = m.values.finish(end)?;
                let entries = StructArray::try_new(m.kv.clone(), vec![keys, values], None)?;
                Ok(Arc::new(MapArray::try_new(
                    m.entries.clone(),
                    offsets,
                    entries,
                    nulls,
                    false,
                )?))
            }
        }
    }
}

impl Map {
    /// Whether the keys appended since the `first`-th one hold `key`.
    fn has_key_since(&self, first: usize, key: &str) -> bool {
        let offsets = self.keys.offsets_slice();
        let values = self.keys.values_slice();
        offsets[first..]
            .windows(2)
            .any(|w| &values[w[0] as usize..w[1] as usize] == key.as_bytes())
    }
}

/// The validity of the first `rows` values (`None`: all valid), and `valid` empty again.
fn nulls(valid: &mut Vec<bool>, rows: usize) -> Result<Option<NullBuffer>, ArrowError> {
    if valid.len() < rows {
        return Err(ArrowError::InvalidArgumentError(format!(
            "{} values for {rows} rows",
            valid.len()
        )));
    }
    valid.truncate(rows);
    let nulls = (!valid.iter().all(|&v| v)).then(|| NullBuffer::from(valid.as_slice()));
    valid.clear();
    Ok(nulls)
}

/// The offsets and validity of the first `rows` lists or maps, where their values end, and
/// the builders empty again.
fn offsets(
    offsets: &mut Vec<i32>,
    valid: &mut Vec<bool>,
    rows: usize,
) -> Result<(OffsetBuffer<i32>, Option<NullBuffer>, usize), ArrowError> {
    if offsets.len() <= rows {
        return Err(ArrowError::InvalidArgumentError(format!(
            "{} offsets for {rows} rows",
            offsets.len()
        )));
    }
    offsets.truncate(rows + 1);
    let end = offsets[rows] as usize;
    let buffer = OffsetBuffer::new(ScalarBuffer::from(std::mem::replace(offsets, vec![0])));
    Ok((buffer, nulls(valid, rows)?, end))
}

/// The builder of a scalar column or field, and how it reads each kind of JSON value: as
/// the strict decoder of `json` for its type reads it, declining wherever that decoder fails.
pub(super) enum Scalar {
    Int32(PrimitiveBuilder<Int32Type>),
    Int64(PrimitiveBuilder<Int64Type>),
    Float32(PrimitiveBuilder<Float32Type>),
    Float64(PrimitiveBuilder<Float64Type>),
    Decimal(PrimitiveBuilder<Decimal128Type>, ColumnType),
    String(StringBuilder),
    Bool(BooleanBuilder),
    Date(PrimitiveBuilder<Date32Type>),
    Timestamp(PrimitiveBuilder<TimestampMicrosecondType>),
}

impl Scalar {
    /// The column of `ty`, whose Arrow type is `data_type`.
    fn new(ty: ColumnType, data_type: &DataType) -> Option<Self> {
        let dt = data_type.clone();
        Some(match ty {
            ColumnType::Int32 => Self::Int32(PrimitiveBuilder::new()),
            ColumnType::Int64 => Self::Int64(PrimitiveBuilder::new()),
            ColumnType::Float32 => Self::Float32(PrimitiveBuilder::new()),
            ColumnType::Float64 => Self::Float64(PrimitiveBuilder::new()),
            ColumnType::Decimal { .. } => {
                Self::Decimal(PrimitiveBuilder::new().with_data_type(dt), ty)
            }
            ColumnType::String => Self::String(StringBuilder::new()),
            ColumnType::Bool => Self::Bool(BooleanBuilder::new()),
            ColumnType::Date => Self::Date(PrimitiveBuilder::new()),
            ColumnType::Timestamp => Self::Timestamp(PrimitiveBuilder::new().with_data_type(dt)),
        })
    }

    /// Reads the value at `cur`.
    #[inline(always)]
    fn read(&mut self, cur: &mut Cursor<'_>, scratch: &mut Vec<u8>) -> Read {
        match cur.peek() {
            Some(b'"') => {
                cur.at += 1;
                self.string(cur.string(scratch)?)
            }
            Some(b'-' | b'0'..=b'9') => {
                let token = cur.number();
                if self.is_whole()
                    && let Some(v) = value::short_integer(token)
                {
                    return self.whole(v);
                }
                if let Self::Float64(b) = self
                    && let Some(v) = short_float(token)
                {
                    b.append_value(v);
                    return Ok(());
                }
                self.number(token)
            }
            Some(b'n') => {
                cur.literal("null")?;
                self.null();
                Ok(())
            }
            Some(b't') => {
                cur.literal("true")?;
                self.boolean(true)
            }
            Some(b'f') => {
                cur.literal("false")?;
                self.boolean(false)
            }
            _ => Err(Declined),
        }
    }

    fn null(&mut self) {
        match self {
            Self::Int32(b) => b.append_null(),
            Self::Int64(b) => b.append_null(),
            Self::Float32(b) => b.append_null(),
            Self::Float64(b) => b.append_null(),
            Self::Decimal(b, _) => b.append_null(),
            Self::String(b) => b.append_null(),
            Self::Bool(b) => b.append_null(),
            Self::Date(b) => b.append_null(),
            Self::Timestamp(b) => b.append_null(),
        }
    }

    /// A JSON string (decoded).
    #[inline(always)]
    fn string(&mut self, s: &str) -> Read {
        match self {
            Self::String(b) => b.append_value(s),
            Self::Int32(b) => b.append_value(Int32Type::parse(s).ok_or(Declined)?),
            Self::Int64(b) => b.append_value(Int64Type::parse(s).ok_or(Declined)?),
            Self::Float32(b) => {
                let v = Float32Type::parse(s).ok_or(Declined)?;
                b.append_value(finite_or_spelled(v, v.is_infinite(), s)?);
            }
            Self::Float64(b) => {
                let v = Float64Type::parse(s).ok_or(Declined)?;
                b.append_value(finite_or_spelled(v, v.is_infinite(), s)?);
            }
            Self::Decimal(b, ty) => b.append_value(decimal(s, *ty)?),
            Self::Date(b) => b.append_value(value::date(s).map_err(|_| Declined)?),
            Self::Timestamp(b) => b.append_value(value::timestamp(s).map_err(|_| Declined)?),
            Self::Bool(_) => return Err(Declined),
        }
        Ok(())
    }

    /// Whether this is an integer column, which [`Self::whole`] appends to.
    fn is_whole(&self) -> bool {
        matches!(self, Self::Int32(_) | Self::Int64(_))
    }

    /// A number token read as a whole number (by [`value::short_integer`]): appended if
    /// in range, as [`Self::number`] would append the token.
    #[inline(always)]
    fn whole(&mut self, v: i64) -> Read {
        match self {
            Self::Int32(b) => b.append_value(i32::try_from(v).map_err(|_| Declined)?),
            Self::Int64(b) => b.append_value(v),
            _ => return Err(Declined),
        }
        Ok(())
    }

    /// A JSON number token, as arrow-json's tape cuts it.
    fn number(&mut self, literal: &str) -> Read {
        match self {
            Self::Int32(b) => {
                b.append_value(whole(literal, ColumnType::Int32, i32::MIN, i32::MAX)?)
            }
            Self::Int64(b) => {
                b.append_value(whole(literal, ColumnType::Int64, i64::MIN, i64::MAX)?)
            }
            Self::Float32(b) => b.append_value(float::<f32>(literal, f32::is_finite)?),
            Self::Float64(b) => b.append_value(float::<f64>(literal, f64::is_finite)?),
            Self::Decimal(b, ty) => b.append_value(decimal(literal, *ty)?),
            Self::String(_) | Self::Bool(_) | Self::Date(_) | Self::Timestamp(_) => {
                return Err(Declined);
            }
        }
        Ok(())
    }

    fn boolean(&mut self, v: bool) -> Read {
        match self {
            Self::Bool(b) => b.append_value(v),
            _ => return Err(Declined),
        }
        Ok(())
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Self::Int32(b) => Arc::new(b.finish()),
            Self::Int64(b) => Arc::new(b.finish()),
            Self::Float32(b) => Arc::new(b.finish()),
            Self::Float64(b) => Arc::new(b.finish()),
            Self::Decimal(b, _) => Arc::new(b.finish()),
            Self::String(b) => Arc::new(b.finish()),
            Self::Bool(b) => Arc::new(b.finish()),
            Self::Date(b) => Arc::new(b.finish()),
            Self::Timestamp(b) => Arc::new(b.finish()),
        }
    }
}

/// A float read from a string: an infinity only when the string spells it (a finite
/// number too large for the type is an error of `super::Finite`).
fn finite_or_spelled<T>(v: T, infinite: bool, s: &str) -> Read<T> {
    if infinite && !value::spells_infinity(s) {
        return Err(Declined);
    }
    Ok(v)
}

/// A float read from a number token: finite, and only from a strict JSON number.
fn float<T: std::str::FromStr + Copy>(literal: &str, is_finite: fn(T) -> bool) -> Read<T> {
    if !is_json_number(literal) {
        return Err(Declined);
    }
    let v = literal.parse::<T>().map_err(|_| Declined)?;
    if is_finite(v) { Ok(v) } else { Err(Declined) }
}

/// A decimal of `ty` read from a string or a number token, as `super::Exact` reads it.
fn decimal(text: &str, ty: ColumnType) -> Read<i128> {
    let ColumnType::Decimal { precision, scale } = ty else {
        return Err(Declined);
    };
    value::decimal(text, precision, scale.unsigned_abs()).map_err(|_| Declined)
}

/// A JSON number as a whole number of `ty` within `min..=max`, read by
/// [`value::whole_number`] as the strict decoder reads it.
fn whole<T: TryFrom<i128> + Into<i128>>(literal: &str, ty: ColumnType, min: T, max: T) -> Read<T> {
    let v = value::whole_number(literal, ty, min.into(), max.into());
    v.ok().and_then(|v| T::try_from(v).ok()).ok_or(Declined)
}
