//! The fast path of [`super::JsonBatches`]: JSON objects read in one pass, straight into the
//! typed columns of a batch, nested values and path columns included.
//!
//! arrow-json first writes every line to a tape and then walks the tape once per column
//! (and `tree`'s decoders walk it again for nested values); most lines of a file are objects
//! whose keys come in the schema's order, which can be read byte by byte into the builders
//! instead. The decoder here accepts a line only when it is certain that arrow-json's path
//! (its tape and the strict decoders of `super` and `tree`) would read the same values from
//! it, and count the same unknown fields; on any doubt it [`Declined`], and the whole batch
//! goes through that path, which then reports errors and sets rows aside exactly as before.
//! So this module never produces an error message of its own.
//!
//! What it accepts, arrow-json's tape accepts too: strict JSON where the tape is lenient
//! (a missing or extra comma is declined), tokens cut where the tape cuts them (a number
//! is the longest run of `0-9+-.eE`, as arrow-json hands it to the column decoders), and
//! escapes decoded as the tape decodes them — except surrogate pairs, read as the
//! characters they stand for, which is what arrow-json reads once the converter has
//! spelled them out (a line where that matters is reported by [`FastDecoder::push`]).
//! Values are converted by the same functions as the strict decoders ([`value`],
//! arrow-cast's parsers); `json` values are copied as they stand when `tree::write_json`
//! would write them so, and written again in its form otherwise (`cursor.rs`); a column
//! read from a `path` reads the value there, and the rest of a value only paths step into
//! is counted as unknown, as `tree::cover` counts it. A path that starts in a column read by
//! name and steps only into its struct fields and list elements is not read from the line
//! at all: its values are taken from that column's arrays ([`Derived`]). Declined: a value of a JSON type other
//! than the column decoder reads, a key given twice in an object or a map, a value that
//! fails to convert, a float too large for its type, nesting deeper than
//! [`cursor::MAX_DEPTH`] where it is skipped or read as text, anything after the object, an
//! unknown key under a policy other than ignoring it.

mod column;
mod cursor;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;

use self::column::{Column, Ctx, Fields};
pub(super) use self::cursor::Declined;
use self::cursor::{Cursor, Key, Read, skip_value};
use super::super::{Ignored, UnknownFields};
use super::tree::child_path;
use crate::schema::{ColumnSpec, Step};

/// The converter's hash maps of keys (foldhash, as in `tree`).
type HashMap<K, V> = foldhash::HashMap<K, V>;

/// Rows of JSON objects decoded into the columns of a batch.
pub(super) struct FastDecoder {
    /// The schema of the batches: the decode schema of [`super::JsonBatches`].
    schema: SchemaRef,
    /// The row object's keys: the columns read by name.
    root: Fields,
    /// One per column of the schema.
    columns: Vec<Column>,
    /// Where path columns read, as a tree of steps from the row object (node 0).
    paths: Vec<Node>,
    /// The row object's keys that path columns read from, in the line being read: their
    /// node and where their value starts.
    roots: Vec<(usize, usize)>,
    ctx: Ctx,
    /// Rows read since the last [`Self::finish`].
    rows: usize,
    /// Of `rows`, those already moved out of the builders into `chunks`.
    chunked: usize,
    /// Per column, the arrays of rows read before a line was rolled back.
    chunks: Vec<Vec<ArrayRef>>,
    /// Path columns taken from the arrays of the column their path starts in (see
    /// [`Derived`]), not read from the line.
    derived: Vec<Derived>,
    /// A column could not be cut back to its complete rows: the batch is declined.
    broken: bool,
    /// Part of a row may have been appended (after [`Declined`]): roll it back or clear
    /// before reuse.
    dirty: bool,
}

/// A path column whose path starts at a column read by name and steps only into that
/// column's struct fields and list elements, to a value of the path column's own type: its
/// values are those of the decoded column, taken from its arrays once the batch is read
/// rather than read from each line again. The same values: the column read them with the
/// same reader of the same type, and a row where a step finds nothing (a NULL or absent
/// struct, a list too short) is NULL, as the path reads it. A path that steps into a map, a
/// `json` value, or a field the column's type lacks is read from the line.
struct Derived {
    /// The path column, and the column its path starts in.
    column: usize,
    from: usize,
    steps: Vec<Take>,
}

/// A step of a [`Derived`] column.
enum Take {
    /// This field of a struct.
    Field(usize),
    /// This element of a list.
    Element(usize),
}

/// The steps of `path` after its first key, from a value of type `from` to one of type
/// `to`, when they only step into struct fields (each name held by one field) and list
/// elements.
fn derivation(
    from: &arrow_schema::DataType,
    path: &[Step],
    to: &arrow_schema::DataType,
) -> Option<Vec<Take>> {
    use arrow_schema::DataType;
    let mut ty = from;
    let mut steps = Vec::with_capacity(path.len());
    for step in path {
        match (step, ty) {
            (Step::Key(key), DataType::Struct(fields)) => {
                let mut named = fields.iter().enumerate().filter(|(_, f)| f.name() == key);
                let (i, field) = named.next()?;
                if named.next().is_some() {
                    return None;
                }
                steps.push(Take::Field(i));
                ty = field.data_type();
            }
            (Step::Index(i), DataType::List(element)) => {
                steps.push(Take::Element(*i));
                ty = element.data_type();
            }
            _ => return None,
        }
    }
    (ty == to).then_some(steps)
}

/// The values at `steps` into `array` (see [`Derived`]); `None` if the array is not of the
/// types the steps were made for (which cannot happen).
fn derive(array: &ArrayRef, steps: &[Take]) -> Option<ArrayRef> {
    use arrow_array::cast::AsArray;
    use arrow_array::{Array, UInt32Array};
    let mut array = array.clone();
    for step in steps {
        array = match step {
            Take::Field(i) => {
                let parent = array.as_struct_opt()?;
                let child = parent.columns().get(*i)?;
                crate::convert::arrays::with_nulls(child, parent.nulls()).ok()?
            }
            Take::Element(i) => {
                let list = array.as_list_opt::<i32>()?;
                let offsets = list.value_offsets();
                let at = i32::try_from(*i).ok()?;
                let indices: UInt32Array = (0..list.len())
                    .map(|r| {
                        (list.is_valid(r) && offsets[r + 1] - offsets[r] > at)
                            .then(|| u32::try_from(offsets[r] + at).ok())
                            .flatten()
                    })
                    .collect();
                arrow_select::take::take(list.values().as_ref(), &indices, None).ok()?
            }
        };
    }
    Some(array)
}

/// A step of the paths' tree (see `tree::Trie`).
#[derive(Default)]
struct Node {
    /// Columns reading the value here.
    columns: Vec<usize>,
    /// Steps further in, by key or index.
    keys: HashMap<String, usize>,
    indexes: HashMap<usize, usize>,
    /// The keys as a key without escapes spells them, compared in place first.
    spelled: Vec<(Key, String, usize)>,
    /// For a key of the row object that only path columns read from: its schema path, the
    /// parts of its value no column reads being unknown fields.
    head: Option<String>,
}

impl FastDecoder {
    /// A decoder of rows of `schema`, whose columns have the options in `options` (paths;
    /// their time readings must be the default); `None` when a column has a type this
    /// decoder does not read, or two columns or fields share a name (arrow-json then fills
    /// the first).
    pub(super) fn new(
        schema: &SchemaRef,
        unknown: UnknownFields,
        options: &[ColumnSpec],
    ) -> Option<Self> {
        let fields = schema.fields();
        let path_of = |name: &str| {
            options
                .iter()
                .find(|c| c.name == name)
                .and_then(|c| c.path.as_ref())
        };
        let mut paths = vec![Node::default()];
        let mut names = Vec::with_capacity(fields.len());
        let mut columns = Vec::with_capacity(fields.len());
        let mut derived = Vec::new();
        for (i, field) in fields.iter().enumerate() {
            columns.push(Column::new(field, child_path("", field.name()))?);
            let path = path_of(field.name());
            let from = path.and_then(|path| {
                // The column read by name that the path starts in.
                let from = fields.iter().position(|f| f.name() == path.head())?;
                if path_of(fields[from].name()).is_some() {
                    return None;
                }
                let steps = derivation(
                    fields[from].data_type(),
                    &path.steps()[1..],
                    field.data_type(),
                )?;
                Some(Derived {
                    column: i,
                    from,
                    steps,
                })
            });
            if let Some(from) = from {
                derived.push(from);
                names.push(None);
                continue;
            }
            match path {
                Some(path) => {
                    let mut node = 0;
                    for step in path.steps() {
                        let next = match step {
                            Step::Key(k) => paths[node].keys.get(k).copied(),
                            Step::Index(i) => paths[node].indexes.get(i).copied(),
                        };
                        node = next.unwrap_or_else(|| {
                            paths.push(Node::default());
                            let new = paths.len() - 1;
                            match step {
                                Step::Key(k) => paths[node].keys.insert(k.clone(), new),
                                Step::Index(i) => paths[node].indexes.insert(*i, new),
                            };
                            new
                        });
                    }
                    paths[node].columns.push(i);
                    names.push(None);
                }
                None => names.push(Some(field.name().clone())),
            }
        }
        if names.is_empty() {
            return None;
        }
        for node in &mut paths {
            node.spelled = node
                .keys
                .iter()
                .filter_map(|(k, &n)| Some((Key::new(k)?, k.clone(), n)))
                .collect();
        }
        // A key of the row object paths read from is a plain column's (whose value is read
        // as that column too), or a key of its own.
        let plain: Vec<(usize, String)> = names
            .iter()
            .enumerate()
            .filter_map(|(i, n)| Some((i, n.clone()?)))
            .collect();
        let mut root = Fields::new(names, String::new())?;
        let root_keys: Vec<(String, usize)> =
            paths[0].keys.iter().map(|(k, &n)| (k.clone(), n)).collect();
        for (key, node) in root_keys {
            match plain.iter().find(|(_, name)| *name == key) {
                Some(&(field, _)) => {
                    root.field_roots[field] = Some(node);
                    root.has_field_roots = true;
                }
                None => {
                    paths[node].head = Some(child_path("", &key));
                    root.roots.insert(key, node);
                }
            }
        }
        Some(Self {
            schema: schema.clone(),
            root,
            chunks: vec![Vec::new(); columns.len()],
            columns,
            paths,
            roots: Vec::new(),
            derived,
            ctx: Ctx::new(unknown),
            rows: 0,
            chunked: 0,
            broken: false,
            dirty: false,
        })
    }

    /// The values of unknown keys counted in the rows of the batch taken last.
    pub(super) fn take_ignored(&mut self) -> Ignored {
        self.ctx.take()
    }

    /// Reads `line` (one line of text, its newline included or not) as one more row, or
    /// declines it; after declining, the decoder holds part of a row until
    /// [`Self::rollback`] or [`Self::clear`]. Returns whether the line has an escaped
    /// surrogate pair that arrow-json would read as another character (see
    /// [`super::arrow_json_misreads_pair`]), so that the caller can spell it out before arrow-json
    /// ever reads the line again.
    pub(super) fn push(&mut self, line: &str) -> Read<bool> {
        self.dirty = true;
        self.ctx.line_dropped();
        self.roots.clear();
        let mut cur = Cursor::new(line);
        cur.skip_ws();
        cur.expect(b'{')?;
        self.root.read(
            &mut self.columns,
            &mut cur,
            &mut self.ctx,
            Some(&mut self.roots),
        )?;
        cur.skip_ws();
        if !cur.is_end() {
            return Err(Declined);
        }
        for k in 0..self.roots.len() {
            let (node, start) = self.roots[k];
            let mut value = cur.clone();
            value.at = start;
            let head = self.paths[node].head.clone();
            self.cover(&mut value, node, head)?;
            cur.misread_pair |= value.misread_pair;
        }
        self.root.fill(&mut self.columns);
        self.rows += 1;
        self.dirty = false;
        self.ctx.line_read();
        Ok(cur.misread_pair)
    }

    /// Reads the path columns of node `node` from the value at `cur`, as `tree::cover` finds
    /// them; with `report` (the value's schema path), the parts of it no column reads are
    /// unknown fields.
    fn cover(&mut self, cur: &mut Cursor<'_>, node: usize, report: Option<String>) -> Read {
        for k in 0..self.paths[node].columns.len() {
            let column = self.paths[node].columns[k];
            if self.root.seen[column] == self.root.generation {
                return Err(Declined);
            }
            self.root.seen[column] = self.root.generation;
            let mut value = cur.clone();
            self.columns[column].read(&mut value, &mut self.ctx)?;
            cur.misread_pair |= value.misread_pair;
        }
        // A value a column reads is covered whole.
        let report = report.filter(|_| self.paths[node].columns.is_empty());
        let (objects, lists) = (
            self.paths[node].indexes.is_empty() || !self.paths[node].keys.is_empty(),
            !self.paths[node].indexes.is_empty(),
        );
        match cur.peek() {
            Some(b'n') => cur.literal("null"),
            Some(b'{') if objects => {
                cur.at += 1;
                cur.skip_ws();
                if cur.eat(b'}') {
                    return Ok(());
                }
                loop {
                    cur.expect(b'"')?;
                    let rest = cur.rest();
                    let spelled = self.paths[node]
                        .spelled
                        .iter()
                        .find(|(k, _, _)| k.starts(rest))
                        .map(|(k, name, child)| (k.len(), name, *child));
                    let (child, path) = match spelled {
                        Some((len, name, child)) => {
                            cur.at += len;
                            (Some(child), report.as_deref().map(|r| child_path(r, name)))
                        }
                        None => {
                            let key = cur.string(&mut self.ctx.scratch)?;
                            let child = self.paths[node].keys.get(key).copied();
                            (child, report.as_deref().map(|r| child_path(r, key)))
                        }
                    };
                    cur.skip_ws();
                    cur.expect(b':')?;
                    cur.skip_ws();
                    match (child, path) {
                        (Some(child), inner) => self.cover(cur, child, inner)?,
                        (None, Some(path)) => self.unknown(cur, path)?,
                        (None, None) => skip_value(cur, &mut self.ctx.scratch, 0)?,
                    }
                    cur.skip_ws();
                    match cur.next() {
                        Some(b',') => cur.skip_ws(),
                        Some(b'}') => return Ok(()),
                        _ => return Err(Declined),
                    }
                }
            }
            Some(b'[') if lists => {
                cur.at += 1;
                cur.skip_ws();
                if cur.eat(b']') {
                    return Ok(());
                }
                let path = report.map(|r| format!("{r}[]"));
                let mut i = 0;
                loop {
                    match (self.paths[node].indexes.get(&i).copied(), &path) {
                        (Some(child), inner) => self.cover(cur, child, inner.clone())?,
                        (None, Some(path)) => self.unknown(cur, path.clone())?,
                        (None, None) => skip_value(cur, &mut self.ctx.scratch, 0)?,
                    }
                    i += 1;
                    cur.skip_ws();
                    match cur.next() {
                        Some(b',') => cur.skip_ws(),
                        Some(b']') => return Ok(()),
                        _ => return Err(Declined),
                    }
                }
            }
            // A value that is not what the paths step into: no column reads from it.
            _ => match report {
                Some(path) => self.unknown(cur, path),
                None => skip_value(cur, &mut self.ctx.scratch, 0),
            },
        }
    }

    /// The value at `cur` of an unknown field at schema path `path`.
    fn unknown(&mut self, cur: &mut Cursor<'_>, path: String) -> Read {
        let n = self.ctx.number(path);
        self.ctx.unknown(cur, n)
    }

    /// The rows read since the last call as a batch, and the decoder ready for the next;
    /// `None` when there are none (or, which cannot happen, the columns do not make one).
    pub(super) fn finish(&mut self) -> Option<RecordBatch> {
        let rows = std::mem::take(&mut self.rows);
        let last = rows - std::mem::take(&mut self.chunked);
        self.dirty = false;
        let mut whole = !std::mem::take(&mut self.broken);
        let mut columns = Vec::with_capacity(self.columns.len());
        for (column, chunks) in self.columns.iter_mut().zip(&mut self.chunks) {
            let Ok(array) = column.finish(last) else {
                whole = false;
                chunks.clear();
                continue;
            };
            if chunks.is_empty() {
                columns.push(array);
                continue;
            }
            chunks.push(array);
            let parts: Vec<&dyn arrow_array::Array> = chunks.iter().map(AsRef::as_ref).collect();
            let joined = arrow_select::concat::concat(&parts);
            chunks.clear();
            match joined {
                Ok(joined) => columns.push(joined),
                Err(_) => whole = false,
            }
        }
        if rows == 0 || !whole {
            return None;
        }
        for d in &self.derived {
            columns[d.column] = derive(&columns[d.from], &d.steps)?;
        }
        RecordBatch::try_new(self.schema.clone(), columns)
            .ok()
            .filter(|b| b.num_rows() == rows)
    }

    /// Drops the part of a row that a declined line left, keeping the rows read before
    /// it: the builders' arrays are cut to those rows and set aside until [`Self::finish`].
    pub(super) fn rollback(&mut self) {
        if !std::mem::take(&mut self.dirty) {
            return;
        }
        self.ctx.line_dropped();
        let complete = self.rows - self.chunked;
        for (column, chunks) in self.columns.iter_mut().zip(&mut self.chunks) {
            match column.finish(complete) {
                Ok(array) => chunks.push(array),
                Err(_) => self.broken = true,
            }
        }
        self.chunked = self.rows;
    }

    /// Forgets the rows read and any part of a row.
    pub(super) fn clear(&mut self) {
        if self.dirty || self.rows > 0 {
            self.finish();
        }
        self.broken = false;
        self.ctx.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float64Type, Int32Type};
    use arrow_schema::{DataType, Field, Schema};

    use super::cursor::is_json_number;
    use super::*;

    fn decoder() -> FastDecoder {
        let schema = Schema::new(vec![
            Field::new("name", DataType::Utf8, true),
            Field::new("n", DataType::Int32, true),
        ]);
        FastDecoder::new(&Arc::new(schema), UnknownFields::Ignore, &[]).unwrap()
    }

    #[test]
    fn a_string_cut_by_a_bad_escape_leaves_nothing_in_the_next_value() {
        let mut flat = decoder();
        flat.push(r#"{"name":"x\ty","n":1}"#).unwrap();
        // Decoded up to `\x`, which arrow-json's tape does not read: declined mid-string.
        assert_eq!(flat.push(r#"{"name":"a\"b\x","n":2}"#), Err(Declined));
        flat.rollback();
        flat.push(r#"{"name":"c","n":3}"#).unwrap();
        let batch = flat.finish().unwrap();
        let names = batch.column(0).as_string::<i32>();
        assert_eq!(names.iter().collect::<Vec<_>>(), [Some("x\ty"), Some("c")]);
    }

    #[test]
    fn integers_read_in_place_are_the_tokens_whole_number_reads() {
        let mut flat = decoder();
        for n in [
            "0",
            "-0",
            "2147483647",
            "-2147483648",
            "007",
            "1e3",
            "1.0",
            "-12",
        ] {
            flat.push(&format!(r#"{{"n":{n}}}"#)).unwrap();
        }
        for n in ["2147483648", "1.5", "-", "1e+-", "99999999999999999999"] {
            assert_eq!(flat.push(&format!(r#"{{"n":{n}}}"#)), Err(Declined), "{n}");
            flat.rollback();
        }
        let batch = flat.finish().unwrap();
        let n = batch.column(1).as_primitive::<Int32Type>();
        let values: Vec<_> = n.iter().flatten().collect();
        assert_eq!(values, [0, 0, 2147483647, -2147483648, 7, 1000, 1, -12]);
    }

    #[test]
    fn floats_read_in_place_are_the_values_str_parse_reads() {
        let schema = Schema::new(vec![Field::new("x", DataType::Float64, true)]);
        let mut flat = FastDecoder::new(&Arc::new(schema), UnknownFields::Ignore, &[]).unwrap();
        let mut tokens: Vec<String> = [
            "0",
            "-0",
            "0.1",
            "-0.0",
            "369.47",
            "2038.98",
            "0.30000000000000004",
            "123456789012345",
            "1234567890123456",
            "99999999999999.9",
            "9007199254740993",
            "1e3",
            "1.5E-2",
            "-44.657986",
        ]
        .iter()
        .map(|t| t.to_string())
        .collect();
        let mut state = 7u64;
        for _ in 0..20_000 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let digits = format!("{}", state >> 11);
            let len = 1 + (state % 17) as usize;
            let digits = &digits[..len.min(digits.len())];
            let point = (state >> 7) as usize % (digits.len() + 1);
            let sign = if state & 1 == 0 { "-" } else { "" };
            tokens.push(match point {
                p if p == 0 || p == digits.len() => format!("{sign}{digits}"),
                p => format!("{sign}{}.{}", &digits[..p], &digits[p..]),
            });
        }
        tokens.retain(|t| is_json_number(t));
        assert!(tokens.len() > 15_000, "{}", tokens.len());
        for t in &tokens {
            flat.push(&format!(r#"{{"x":{t}}}"#)).unwrap();
        }
        let batch = flat.finish().unwrap();
        let read = batch.column(0).as_primitive::<Float64Type>();
        assert_eq!(read.len(), tokens.len());
        for (t, v) in tokens.iter().zip(read.iter()) {
            let parsed: f64 = t.parse().unwrap();
            assert_eq!(v.map(f64::to_bits), Some(parsed.to_bits()), "{t}");
        }
        // Not JSON numbers: declined, as before.
        for t in ["01.5", "1.", "-", "1.2.3"] {
            assert_eq!(flat.push(&format!(r#"{{"x":{t}}}"#)), Err(Declined), "{t}");
            flat.rollback();
        }
    }

    #[test]
    fn keys_are_compared_in_place_whatever_their_length() {
        for name in [
            "a",
            "order_id",
            "fifteen_bytes__",
            "sixteen_bytes___",
            "a_long_name_of_twenty",
        ] {
            let schema = Schema::new(vec![
                Field::new(name, DataType::Int32, true),
                Field::new("z", DataType::Int32, true),
            ]);
            let mut flat = FastDecoder::new(&Arc::new(schema), UnknownFields::Ignore, &[]).unwrap();
            flat.push(&format!(r#"{{"{name}":1,"z":2}}"#)).unwrap();
            // A key that only starts with the name is another key (unknown, skipped).
            flat.push(&format!(r#"{{"{name}x":1,"z":3}}"#)).unwrap();
            // A short line: fewer than 16 bytes after the key's quote.
            flat.push(&format!(r#"{{"{name}":4}}"#)).unwrap();
            let batch = flat.finish().unwrap();
            let first = batch.column(0).as_primitive::<Int32Type>();
            assert_eq!(
                first.iter().collect::<Vec<_>>(),
                [Some(1), None, Some(4)],
                "{name}"
            );
        }
    }
}

#[cfg(test)]
mod fixtures {
    use std::sync::Arc;

    use super::*;
    use crate::convert::{ConvertSpec, InputFormat};

    /// The nested fixtures' lines are all read by the fast path: none declined.
    #[test]
    fn the_nested_fixtures_are_read_in_one_pass() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/nested/");
        for name in ["cloudtrail", "github"] {
            let columns: Vec<ColumnSpec> = serde_json::from_str(
                &std::fs::read_to_string(format!("{root}{name}.schema.json")).unwrap(),
            )
            .unwrap();
            let spec = ConvertSpec::with_columns(InputFormat::JsonLines, &columns);
            let schema = crate::convert::nullable(&spec.decoded_schema());
            let mut fast = FastDecoder::new(&schema, UnknownFields::Ignore, &columns)
                .unwrap_or_else(|| panic!("{name}: no fast decoder"));
            let text = std::fs::read_to_string(format!("{root}{name}.jsonl")).unwrap();
            for (i, line) in text.lines().enumerate() {
                assert_eq!(
                    fast.push(line).map(drop),
                    Ok(()),
                    "{name} line {}: {line}",
                    i + 1
                );
            }
            let batch = fast.finish().unwrap();
            assert_eq!(batch.num_rows(), text.lines().count());
            let _: Arc<_> = batch.schema();
        }
    }
}
