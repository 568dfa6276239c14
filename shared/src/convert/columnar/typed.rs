//! What the typed inputs (Parquet, Avro, ORC) share: the columns of a file matched to the
//! source's schema by name (or path), read into the schema's types by `convert/columnar/arrays.rs`,
//! the fields of the file the schema does not name ignored, refused or rescued, and the
//! batches of the file in the spec's decoded schema.
//!
//! The contract between a file and the source's schema:
//!
//! - columns are matched by exact name, in any order, and so are the fields of a struct;
//!   a column with a `path` reads the value there (`userIdentity.arn`, `resources[0].ARN`,
//!   a key of a map), NULL wherever a step is absent (a NULL parent, a short list, a
//!   missing key), and the file columns a path reads from are read;
//! - a schema column absent from the file (or whose path the file's schema does not have)
//!   is NULL when nullable, and otherwise fails the object before any row is read; a
//!   struct's field the file's struct lacks is NULL;
//! - a file column (or struct field, list element, map value) must hold its schema type,
//!   or a type every value of which the schema's type stores exactly:
//!   `int8`/`int16`/`uint8`/`uint16` into `int32`, those and `int32`/`uint32` into
//!   `int64`, `float32` into `float64`, an integer or decimal into a decimal with at least
//!   as many integer digits and at least the scale, strings (large, view or
//!   dictionary-encoded) into `string`, timestamps of any unit and zone (or none: read as
//!   UTC) into `timestamp`, any struct into a struct, any list flavour (large, view, fixed
//!   size) into an array, a map with string keys into a map, and anything into `json`
//!   (its compact JSON text, or for a string the JSON text it holds). Any other type is a
//!   bad value at its path (`column "a.b": type Utf8 in the file cannot be read as
//!   int32`): under `on_bad_value: fail` the object fails before any row is read, under
//!   `rescue` the column (or field) is NULL and each of its values is rescued;
//! - values are stored exactly or refused, naming the 1-based row of the file and the
//!   value's path (`row 3: column "items[1].at": …`): a nanosecond timestamp that is not a
//!   whole microsecond, a second or millisecond timestamp beyond the microsecond range, a
//!   string that is not JSON in a `json` column (each rescued instead under `rescue`), and
//!   a NULL in a non-nullable column (never rescued);
//! - a field of the file no column covers (a top-level column, a struct's field, at any
//!   depth: `resources[].extra`) is counted by path under `on_unknown_field: ignore` (from
//!   the file's footer when it says, else read: see each format), fails the object before
//!   any row is read under `fail`, and is rescued value by value under `rescue`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufRead, Write};

use arrow_array::{Array, ArrayRef, RecordBatch, new_null_array};
use arrow_schema::{ArrowError, DataType, Fields, SchemaRef};

use super::arrays::{
    Cover, Level, NOT_IN_THE_SCHEMA, Place, Plan, Reading, element_type, follow, map_value_type,
    plan, rescued_column, row_error, spell, valid_slots,
};
use super::{BadValues, Batches, ConvertError, ConvertSpec, Ignored, UnknownFields};
use crate::schema::{FieldType, Step};

/// What of each top-level column of the file is read, by its position among them: the
/// columns absent are not read at all.
pub(in crate::convert) type Needs = BTreeMap<usize, Cover>;

/// A schema column and where its values are in the file.
#[derive(Debug)]
struct Column {
    nullable: bool,
    /// Its Arrow type.
    target: DataType,
    /// Its path in the file, for errors: its name, or its `path`.
    shown: String,
    /// `None`: not in the file, all NULL.
    source: Option<Source>,
    /// How its values are read (`None` when not in the file).
    plan: Option<Plan>,
}

/// Where values are in the file.
#[derive(Debug)]
struct Source {
    /// The top-level file column they are in, and its position among the file's columns.
    root: String,
    position: usize,
    /// The position of that column in a projected batch.
    at: usize,
    /// From the column's value to the values.
    levels: Vec<Level>,
}

impl Source {
    /// The top-level column of `batch` the values are in, and its place.
    fn start<'a>(
        &'a self,
        batch: &'a RecordBatch,
    ) -> Result<(&'a ArrayRef, Place<'a>), ConvertError> {
        let file = batch
            .columns()
            .get(self.at)
            .ok_or_else(|| column_error(&self.root, "not read from the file (a reader error)"))?;
        let place = Place::Column {
            name: &self.root,
            position: self.position,
        };
        Ok((file, place))
    }
}

/// A field of the file that the schema does not name, whose values are read to be
/// rescued or counted.
#[derive(Debug)]
struct Unknown {
    source: Source,
    /// Its path, `[]` for any element and `{}` for any value.
    path: String,
}

/// Matches the file's top-level columns `fields` (in file order, their Arrow types) with
/// the spec's schema (of the column types `types`): what each schema column reads, and what
/// of the file must be read. `counted(position, levels)` is the number of values of a field
/// the schema does not name (inside the top-level column `position`, at `levels`), when
/// the file says it without being read.
pub(in crate::convert) fn typed(
    fields: &Fields,
    spec: &ConvertSpec,
    types: &[FieldType],
    counted: impl Fn(usize, &[Level]) -> Option<u64>,
) -> Result<(Typed, Needs), ConvertError> {
    let mut needs = Needs::new();
    let mut columns = Vec::with_capacity(types.len());
    for (field, ty) in spec.schema.fields().iter().zip(types) {
        let path = spec.options(field.name()).and_then(|c| c.path.as_ref());
        let head = path.map_or(field.name().as_str(), |p| p.head());
        let shown = path.map_or_else(|| spell(field.name(), &[]), |p| p.to_string());
        let mut found = fields.iter().enumerate().filter(|(_, f)| f.name() == head);
        let found = match (found.next(), found.next()) {
            (Some(_), Some(_)) => {
                return Err(column_error(head, "appears more than once in the file"));
            }
            (None, _) => None,
            (Some((position, file)), None) => {
                let steps = path.map_or(&[][..], |p| &p.steps()[1..]);
                resolve(file.data_type(), steps).map(|(levels, leaf)| (position, levels, leaf))
            }
        };
        let (source, plan) = match found {
            None if !field.is_nullable() => {
                return Err(column_error(
                    &shown,
                    "missing from the file, and the source's schema requires it",
                ));
            }
            None => (None, None),
            Some((position, levels, leaf)) => {
                let plan = plan(leaf, ty);
                need(&mut needs, position, Cover::at(&levels, plan.cover()));
                let source = Source {
                    root: head.to_owned(),
                    position,
                    at: 0,
                    levels,
                };
                (Some(source), Some(plan))
            }
        };
        columns.push(Column {
            nullable: field.is_nullable(),
            target: field.data_type().clone(),
            shown,
            source,
            plan,
        });
    }
    if spec.bad_values == BadValues::Fail {
        for column in &columns {
            if let Some((inside, reason)) = column.plan.as_ref().and_then(Plan::refusal) {
                return Err(column_error(&(column.shown.clone() + &inside), reason));
            }
        }
    }

    let uncovered = uncovered(fields, &needs);
    if spec.unknown_fields == UnknownFields::Fail
        && let Some((_, _, first)) = uncovered.first()
    {
        let others: Vec<_> = uncovered[1..]
            .iter()
            .map(|(.., p)| format!("{p:?}"))
            .collect();
        let nor = match others.len() {
            0 => String::new(),
            _ => format!(", nor are {}", others.join(", ")),
        };
        return Err(column_error(first, format!("{NOT_IN_THE_SCHEMA}{nor}")));
    }
    let mut ignored = Ignored::default();
    let mut unknown = Vec::new();
    for (position, levels, path) in uncovered {
        if spec.unknown_fields == UnknownFields::Ignore
            && let Some(n) = counted(position, &levels)
        {
            if n > 0 {
                ignored.add(&path, n);
            }
            continue;
        }
        need(&mut needs, position, Cover::at(&levels, Cover::All));
        let source = Source {
            root: fields[position].name().clone(),
            position,
            at: 0,
            levels,
        };
        unknown.push(Unknown { source, path });
    }

    let roots: Vec<usize> = needs.keys().copied().collect();
    let sources = columns.iter_mut().filter_map(|c| c.source.as_mut());
    for source in sources.chain(unknown.iter_mut().map(|u| &mut u.source)) {
        source.at = roots.binary_search(&source.position).unwrap_or_default();
    }
    let typed = Typed {
        columns,
        unknown,
        rescue_unknown: spec.unknown_fields == UnknownFields::Rescue,
        rescue_bad: spec.bad_values == BadValues::Rescue,
        rescues: spec.rescues(),
        schema: spec.decoded_schema(),
        ignored,
    };
    Ok((typed, needs))
}

/// Adds `cover` to what is read of the top-level column `position`.
fn need(needs: &mut Needs, position: usize, cover: Cover) {
    let merged = match needs.remove(&position) {
        Some(c) => c.merge(cover),
        None => cover,
    };
    needs.insert(position, merged);
}

/// The fields of the file that `needs` leaves uncovered, in file order: the top-level
/// column's position, the levels inside it, the path.
fn uncovered(fields: &Fields, needs: &Needs) -> Vec<(usize, Vec<Level>, String)> {
    let mut out = Vec::new();
    for (position, file) in fields.iter().enumerate() {
        let mut found = Vec::new();
        match needs.get(&position) {
            None => found.push(Vec::new()),
            Some(cover) => cover.uncovered(file.data_type(), &mut Vec::new(), &mut found),
        }
        out.extend(found.into_iter().map(|levels| {
            let path = spell(file.name(), &levels);
            (position, levels, path)
        }));
    }
    out
}

/// The levels of a path's `steps` (after its first) inside a value of type `file`, and
/// the type of the values at its end; `None` when the file's schema has no such place.
fn resolve<'a>(file: &'a DataType, steps: &[Step]) -> Option<(Vec<Level>, &'a DataType)> {
    let mut levels = Vec::with_capacity(steps.len());
    let mut at = file;
    for step in steps {
        match (step, at) {
            (Step::Key(key), DataType::Struct(children)) => {
                let position = children.iter().position(|c| c.name() == key)?;
                levels.push(Level::Field {
                    name: key.clone(),
                    position,
                });
                at = children[position].data_type();
            }
            (Step::Key(key), _) => {
                at = map_value_type(at)?;
                levels.push(Level::Key(key.clone()));
            }
            (Step::Index(n), _) => {
                at = element_type(at)?;
                levels.push(Level::Index(*n));
            }
        }
    }
    Some((levels, at))
}

/// The planned columns of a file: turns its projected batches into the spec's decoded
/// schema, and counts or rescues the values of the fields the schema does not name.
#[derive(Debug)]
pub(in crate::convert) struct Typed {
    columns: Vec<Column>,
    unknown: Vec<Unknown>,
    rescue_unknown: bool,
    rescue_bad: bool,
    /// Whether the batches have a rescued column.
    rescues: bool,
    schema: SchemaRef,
    /// The values of the fields the schema does not name, counted so far.
    ignored: Ignored,
}

impl Typed {
    /// `len` rows of the file from its 1-based row `first_row`, read from `batch` (the
    /// projected columns; `None` when no column is read) in the spec's decoded schema.
    pub(super) fn convert(
        &mut self,
        len: usize,
        batch: Option<&RecordBatch>,
        first_row: u64,
    ) -> Result<RecordBatch, ConvertError> {
        let mut reading = Reading {
            rescue: self.rescue_bad,
            first_row,
            found: Vec::new(),
        };
        let mut arrays = Vec::with_capacity(self.columns.len() + 1);
        for column in &self.columns {
            let array = match (&column.source, &column.plan, batch) {
                (Some(source), Some(plan), Some(batch)) => {
                    let (file, place) = source.start(batch)?;
                    follow(file, &source.levels, &place, &mut |array, place| {
                        plan.read(array, place, &mut reading)
                    })?
                }
                _ => new_null_array(&column.target, len),
            };
            if array.len() != len {
                return Err(invalid(format!(
                    "column {:?}: {} values in a batch of {len} rows (a reader error)",
                    column.shown,
                    array.len()
                )));
            }
            if !column.nullable && array.null_count() > 0 {
                let row = (0..array.len()).find(|&r| array.is_null(r)).unwrap_or(0);
                return Err(row_error(
                    first_row + row as u64,
                    &column.shown,
                    "missing value in a non-nullable column",
                ));
            }
            arrays.push(array);
        }
        if let Some(batch) = batch {
            let rescue = self.rescue_unknown;
            for unknown in &self.unknown {
                let (file, place) = unknown.source.start(batch)?;
                let levels = &unknown.source.levels;
                let values = follow(file, levels, &place, &mut |array, place| {
                    let slots = valid_slots(array.as_ref());
                    if !rescue {
                        return Ok(slots.count() as u64);
                    }
                    for slot in slots {
                        reading.rescue(array.as_ref(), place, slot, NOT_IN_THE_SCHEMA);
                    }
                    Ok(0)
                })?;
                if values > 0 {
                    self.ignored.add(&unknown.path, values);
                }
            }
        }
        if self.rescues {
            arrays.push(rescued_column(reading.found, len));
        }
        RecordBatch::try_new(self.schema.clone(), arrays)
            .map_err(|e| invalid(format!("cannot assemble a batch: {e}")))
    }

    /// The values of fields the schema does not name counted since the last call.
    fn take_ignored(&mut self) -> Ignored {
        std::mem::take(&mut self.ignored)
    }
}

/// Where the rows of a typed file come from.
pub(in crate::convert) enum Rows<I> {
    /// A reader of projected batches; `use_columns` false when the batches hold a column
    /// read only to count rows (no schema column is in the file).
    Read { reader: I, use_columns: bool },
    /// No column to read: this many rows, all NULL.
    Blank(u64),
}

/// Batches of a typed file in the spec's decoded schema, from its projected batches.
pub(in crate::convert) struct TypedBatches<I> {
    /// `None` once the file is read.
    rows_from: Option<Rows<I>>,
    typed: Typed,
    batch_rows: usize,
    /// The format's name, for errors.
    format: &'static str,
    /// The rows the file says it holds, checked at its end, when it says.
    expected_rows: Option<u64>,
    /// Rows produced so far.
    rows: u64,
}

impl<I: Iterator<Item = Result<RecordBatch, ArrowError>>> TypedBatches<I> {
    pub(super) fn new(
        rows_from: Rows<I>,
        typed: Typed,
        spec: &ConvertSpec,
        format: &'static str,
        expected_rows: Option<u64>,
    ) -> Self {
        Self {
            rows_from: Some(rows_from),
            typed,
            batch_rows: spec.batch_rows,
            format,
            expected_rows,
            rows: 0,
        }
    }

    /// The next projected batch of the file (`None` for all-NULL rows) and its rows.
    fn next_file_batch(&mut self) -> Result<Option<(usize, Option<RecordBatch>)>, ConvertError> {
        match &mut self.rows_from {
            None => Ok(None),
            Some(Rows::Read {
                reader,
                use_columns,
            }) => match reader.next() {
                Some(Ok(batch)) => Ok(Some((batch.num_rows(), use_columns.then_some(batch)))),
                Some(Err(e)) => Err(match too_large_in(&e) {
                    Some(limit) => ConvertError::TooLarge { limit },
                    None => invalid(format!(
                        "cannot read the {} data after row {}: {e}",
                        self.format, self.rows
                    )),
                }),
                None => {
                    self.rows_from = None;
                    Ok(None)
                }
            },
            Some(Rows::Blank(left)) => {
                if *left == 0 {
                    self.rows_from = None;
                    return Ok(None);
                }
                let n = (*left).min(self.batch_rows as u64);
                *left -= n;
                Ok(Some((n as usize, None)))
            }
        }
    }
}

impl<I: Iterator<Item = Result<RecordBatch, ArrowError>>> Batches for TypedBatches<I> {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>, ConvertError> {
        loop {
            let Some((len, batch)) = self.next_file_batch()? else {
                return match self.expected_rows {
                    Some(expected) if expected != self.rows => Err(invalid(format!(
                        "not a valid {} file: it says it holds {expected} rows, and {} were read",
                        self.format, self.rows
                    ))),
                    _ => Ok(None),
                };
            };
            if len == 0 {
                continue;
            }
            let batch = self.typed.convert(len, batch.as_ref(), self.rows + 1)?;
            self.rows += len as u64;
            return Ok(Some(batch));
        }
    }

    fn take_ignored(&mut self) -> Ignored {
        self.typed.take_ignored()
    }
}

/// The limit of a [`ConvertError::TooLarge`] a reader's error carries (from the input under
/// it, or put there by a format's own check).
pub(in crate::convert) fn too_large_in(e: &ArrowError) -> Option<u64> {
    let mut at: Option<&(dyn std::error::Error + 'static)> = match e {
        ArrowError::ExternalError(inner) => Some(inner.as_ref()),
        ArrowError::IoError(_, io) => Some(io),
        _ => None,
    };
    // Down the chain of sources, and into the errors an `io::Error` wraps.
    while let Some(e) = at {
        if let Some(ConvertError::TooLarge { limit }) = e.downcast_ref::<ConvertError>() {
            return Some(*limit);
        }
        at = match e.downcast_ref::<io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

/// Copies `input` to an anonymous temporary file, removed when dropped: how an input read
/// by seeking (Parquet, ORC) is read from a stream.
pub(crate) fn spool(mut input: impl BufRead) -> Result<File, ConvertError> {
    let spool_error = |e: io::Error| {
        ConvertError::Io(io::Error::new(
            e.kind(),
            format!("cannot spool the input to a temporary file: {e}"),
        ))
    };
    let mut file = tempfile::tempfile().map_err(spool_error)?;
    loop {
        let chunk = match input.fill_buf() {
            Ok([]) => break,
            Ok(chunk) => chunk,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        file.write_all(chunk).map_err(spool_error)?;
        let n = chunk.len();
        input.consume(n);
    }
    file.flush().map_err(spool_error)?;
    Ok(file)
}

pub(in crate::convert) fn invalid(message: String) -> ConvertError {
    ConvertError::parse(None, None, message)
}

pub(in crate::convert) fn column_error(column: &str, message: impl Into<String>) -> ConvertError {
    ConvertError::parse(None, Some(column), message)
}

/// The checks every typed format passes on one file of nested columns (each format's tests
/// write [`checks::nested_batch`] in their format, or read a fixture holding its values).
#[cfg(test)]
pub(in crate::convert) mod checks {
    use std::sync::Arc;

    use arrow_array::builder::{
        Int32Builder, ListBuilder, MapBuilder, StringBuilder, TimestampNanosecondBuilder,
    };
    use arrow_array::{
        Array, ArrayRef, Int16Array, Int32Array, Int64Array, RecordBatch, StringArray, StructArray,
        TimestampNanosecondArray,
    };
    use arrow_buffer::{NullBuffer, OffsetBuffer};
    use arrow_schema::{DataType, Field, Fields, TimeUnit};

    use super::super::testutil::*;
    use super::super::{
        BadValues, Compression, ConvertError, ConvertSpec, ConvertStats, Ignored, InputFormat,
        SumValue, UnknownFields, decode,
    };
    use crate::schema::ColumnSpec;

    /// 2024-01-02T03:04:05Z in nanoseconds.
    const T0: i64 = 1_704_164_645_000_000_000;

    /// Three rows of nested columns:
    ///
    /// | id | user {name, age int16, extra} | tags | attrs | events [{at ns, kind, note}] | moments [ns] | payload |
    /// |---|---|---|---|---|---|---|
    /// | 1 | {ann, 30, x} | [a, b] | {k1: 1, k2: 2} | [{T0, click, n1}, {T0+1s, view, ∅}] | [T0, T0+1ns] | `{"a": 1, "b": [true, null]}` |
    /// | 2 | {bob, ∅, ∅} | [] | {} | ∅ | ∅ | `not json` |
    /// | 3 | ∅ | ∅ | {k1: 3} | [{T0+2s, buy, n3}] | [] | ∅ |
    pub(in super::super) fn nested_batch() -> RecordBatch {
        let user = StructArray::new(
            Fields::from(vec![
                Field::new("name", DataType::Utf8, true),
                Field::new("age", DataType::Int16, true),
                Field::new("extra", DataType::Utf8, true),
            ]),
            vec![
                Arc::new(StringArray::from(vec![Some("ann"), Some("bob"), None])),
                Arc::new(Int16Array::from(vec![Some(30), None, None])),
                Arc::new(StringArray::from(vec![Some("x"), None, None])),
            ],
            Some(NullBuffer::from(vec![true, true, false])),
        );
        let mut tags = ListBuilder::new(StringBuilder::new());
        tags.append_value([Some("a"), Some("b")]);
        tags.append_value(Vec::<Option<&str>>::new());
        tags.append_null();
        let mut attrs = MapBuilder::new(None, StringBuilder::new(), Int32Builder::new());
        for entries in [&[("k1", 1), ("k2", 2)][..], &[], &[("k1", 3)]] {
            for (k, v) in entries {
                attrs.keys().append_value(k);
                attrs.values().append_value(*v);
            }
            attrs.append(true).unwrap();
        }
        let second = 1_000_000_000;
        let event = StructArray::new(
            Fields::from(vec![
                Field::new("at", DataType::Timestamp(TimeUnit::Nanosecond, None), true),
                Field::new("kind", DataType::Utf8, true),
                Field::new("note", DataType::Utf8, true),
            ]),
            vec![
                Arc::new(TimestampNanosecondArray::from(vec![
                    T0,
                    T0 + second,
                    T0 + 2 * second,
                ])),
                Arc::new(StringArray::from(vec!["click", "view", "buy"])),
                Arc::new(StringArray::from(vec![Some("n1"), None, Some("n3")])),
            ],
            None,
        );
        let events = arrow_array::ListArray::new(
            Arc::new(Field::new("element", event.data_type().clone(), true)),
            OffsetBuffer::new(vec![0, 2, 2, 3].into()),
            Arc::new(event),
            Some(NullBuffer::from(vec![true, false, true])),
        );
        let mut moments = ListBuilder::new(TimestampNanosecondBuilder::new());
        moments.append_value([Some(T0), Some(T0 + 1)]);
        moments.append_null();
        moments.append_value([]);
        RecordBatch::try_from_iter(vec![
            ("id", Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef),
            ("user", Arc::new(user)),
            ("tags", Arc::new(tags.finish())),
            ("attrs", Arc::new(attrs.finish())),
            ("events", Arc::new(events)),
            ("moments", Arc::new(moments.finish())),
            (
                "payload",
                Arc::new(StringArray::from(vec![
                    Some(r#"{"a": 1, "b": [true, null]}"#),
                    Some("not json"),
                    None,
                ])),
            ),
        ])
        .unwrap()
    }

    /// A spec for `format` with `columns` (JSON column specs, their options included).
    fn spec(format: InputFormat, columns: &str) -> ConvertSpec {
        let columns: Vec<ColumnSpec> = serde_json::from_str(columns).unwrap();
        ConvertSpec::with_columns(format, &columns)
    }

    /// Converts `bytes`, which must succeed: the stats and the rows as text.
    fn rows(spec: &ConvertSpec, bytes: &[u8]) -> (ConvertStats, Vec<Vec<String>>) {
        let (stats, file) = run(bytes, spec);
        (stats, file.rows)
    }

    fn ignored(fields: &[(&str, u64)]) -> Ignored {
        let mut ignored = Ignored::default();
        for (path, n) in fields {
            ignored.add(path, *n);
        }
        ignored
    }

    /// The unknown fields of [`nested_batch`] when the schema reads `user.name` and `age`,
    /// `events[].at` and `kind`, and not `moments` or `payload`.
    fn unread() -> Ignored {
        ignored(&[
            ("user.extra", 1),
            ("events[].note", 2),
            ("moments", 2),
            ("payload", 2),
        ])
    }

    /// The file `name` of `tests/fixtures/avro_orc`.
    pub(in super::super) fn fixture(name: &str) -> Vec<u8> {
        let path = format!(
            "{}/../tests/fixtures/avro_orc/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// `bytes` holds the orders of the end-to-end suites' fixtures (`orders_csv(1, 1000)`,
    /// written with narrower types by `tests/fixtures/avro_orc/generate.py` with `codec`):
    /// read exactly, with their rows and sums.
    pub(in super::super) fn orders(format: InputFormat, bytes: &[u8], codec: &str) {
        let mut spec = spec(
            format,
            r#"[{"name": "order_id", "type": "int64", "nullable": false},
                {"name": "customer", "type": "string"},
                {"name": "quantity", "type": "int32"},
                {"name": "amount", "type": "decimal(12,2)"},
                {"name": "ordered_at", "type": "timestamp"}]"#,
        );
        spec.sum_columns = vec!["quantity".into(), "amount".into()];
        spec.batch_rows = 300;
        let ids = 1..=1000_i128;
        let quantity: i128 = ids.clone().map(|id| id % 7 + 1).sum();
        let cents: i128 = ids.map(|id| (id % 1000) * 101 + 5).sum();
        let (stats, file) = run(bytes, &spec);
        assert_eq!(stats.rows, 1000, "{codec}");
        assert_eq!(stats.sums["quantity"], SumValue::Int(quantity), "{codec}");
        let amount = SumValue::Decimal {
            unscaled: cents,
            scale: 2,
        };
        assert_eq!(stats.sums["amount"], amount, "{codec}");
        let first = ["1", "Customer, 1", "2", "1.06", "2024-03-02T10:01:00Z"];
        assert_eq!(file.rows[0], first, "{codec}");
        let last = [
            "1000",
            "Customer, 1000",
            "7",
            "0.05",
            "2024-03-21T10:40:00Z",
        ];
        assert_eq!(file.rows[999], last, "{codec}");
    }

    /// Columns `a` (0, 1, …) and `s` (17 values repeated) of 3,000 rows.
    pub(in super::super) fn numbered_and_repeated() -> Vec<(&'static str, ArrayRef)> {
        let repeated = (0..3000).map(|i| format!("v{}", i % 17));
        vec![
            (
                "a",
                Arc::new(Int64Array::from_iter_values(0..3000)) as ArrayRef,
            ),
            ("s", Arc::new(StringArray::from_iter_values(repeated))),
        ]
    }

    /// Columns `wide` (200-character strings) and `n` (0, 1, …) of `count` rows.
    pub(in super::super) fn wide_and_numbered(count: i32) -> Vec<(&'static str, ArrayRef)> {
        let wide = (0..count).map(|i| format!("{i:0>200}"));
        vec![
            (
                "wide",
                Arc::new(StringArray::from_iter_values(wide)) as ArrayRef,
            ),
            ("n", Arc::new(Int32Array::from_iter_values(0..count))),
        ]
    }

    /// `bytes` holds [`wide_and_numbered`]'s `count` rows in several blocks, stripes or row
    /// groups: it is read in batches of at most 300 rows of the schema's one column, with
    /// exact rows and sums. Returns the spec.
    pub(in super::super) fn streams_in_bounded_batches(
        format: InputFormat,
        bytes: &[u8],
        count: i32,
    ) -> ConvertSpec {
        let mut spec = spec(format, r#"[{"name":"n","type":"int64","nullable":false}]"#);
        spec.batch_rows = 300;
        spec.sum_columns = vec!["n".into()];
        let mut batches = 0;
        let stats = decode(bytes, &spec, |batch| {
            assert!(batch.num_rows() <= 300, "{}", batch.num_rows());
            assert_eq!(batch.num_columns(), 1, "only the schema's column");
            batches += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(stats.rows, count as u64);
        assert!(batches >= count as usize / 300, "{batches}");
        let sum = i128::from(count - 1) * i128::from(count) / 2;
        assert_eq!(stats.sums["n"], SumValue::Int(sum));
        assert_eq!(stats.bytes_decoded, bytes.len() as u64);
        spec
    }

    /// `bytes` holds one column `other` of 7 rows, which the schema does not name: 7 rows
    /// of NULL.
    pub(in super::super) fn no_schema_column_gives_null_rows(format: InputFormat, bytes: &[u8]) {
        let mut spec = spec(format, r#"[{"name":"a","type":"string"}]"#);
        spec.batch_rows = 2;
        let (stats, file) = run(bytes, &spec);
        assert_eq!(stats.rows, 7);
        assert!(file.rows.iter().all(|r| r == &["∅"]));
    }

    /// `bytes` holds `b` (`x`, `y`) and `a` (4, 5): read the same through a gzip or zstd
    /// wrapper, and a truncated wrapper fails as a decompression error (Avro's reader,
    /// reading a stream, names the row it was at).
    pub(in super::super) fn read_through_wrappers(format: InputFormat, bytes: &[u8]) {
        let mut spec = spec(
            format,
            r#"[{"name":"a","type":"int64"},{"name":"b","type":"string"}]"#,
        );
        spec.sum_columns = vec!["a".into()];
        for (compression, wrapped) in [
            (Compression::Gzip, gzip(bytes)),
            (Compression::Zstd, zstd(bytes)),
        ] {
            spec.compression = compression;
            let (stats, file) = run(&wrapped, &spec);
            assert_eq!(file.rows, text_rows(&["4|x", "5|y"]), "{compression}");
            assert_eq!(stats.sums["a"], SumValue::Int(9));
            assert_eq!(stats.bytes_read, wrapped.len() as u64);
            assert_eq!(stats.bytes_decoded, bytes.len() as u64);
            let err = fail(&wrapped[..wrapped.len() - 8], &spec).to_string();
            assert!(err.contains("cannot decompress input: "), "{err}");
        }
    }

    /// `bytes` holds `a` of 1000 rows: the spool stops at `max_decoded_bytes`.
    pub(in super::super) fn the_spool_is_bounded(format: InputFormat, bytes: &[u8]) {
        let mut spec = spec(format, r#"[{"name":"a","type":"int64"}]"#);
        spec.max_decoded_bytes = Some(bytes.len() as u64 - 1);
        assert!(matches!(fail(bytes, &spec), ConvertError::TooLarge { .. }));
        spec.max_decoded_bytes = Some(bytes.len() as u64);
        assert_eq!(run(bytes, &spec).0.rows, 1000);
    }

    /// A file of `n` (1, 2) as `int64` and `s` (`a`, `b`), and one of `n` (1, NULL), both
    /// written by `file`: a type that does not fit, a missing required column and a NULL in
    /// one fail naming it.
    pub(in super::super) fn a_file_that_breaks_the_contract(
        format: InputFormat,
        file: impl Fn(Vec<(&str, ArrayRef)>) -> Vec<u8>,
    ) {
        let bytes = file(vec![
            ("n", Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef),
            ("s", Arc::new(StringArray::from(vec!["a", "b"]))),
        ]);
        let nulls = file(vec![(
            "n",
            Arc::new(Int64Array::from(vec![Some(1), None])) as ArrayRef,
        )]);
        for (columns, error) in [
            (
                r#"[{"name":"n","type":"int32"}]"#,
                r#"column "n": type Int64 in the file cannot be read as int32"#,
            ),
            (
                r#"[{"name":"s","type":"int64"}]"#,
                r#"column "s": type Utf8 in the file cannot be read as int64"#,
            ),
            (
                r#"[{"name":"n","type":"int64"},{"name":"id","type":"int64","nullable":false}]"#,
                r#"column "id": missing from the file, and the source's schema requires it"#,
            ),
        ] {
            assert_eq!(parse_error(&bytes, &spec(format, columns)), error);
        }
        let required = spec(format, r#"[{"name":"n","type":"int64","nullable":false}]"#);
        assert_eq!(
            parse_error(&nulls, &required),
            r#"row 2: column "n": missing value in a non-nullable column"#
        );
    }

    /// Every check of nested columns, on `bytes` (of [`nested_batch`]'s rows) as `format`.
    pub(in super::super) fn nested(format: InputFormat, bytes: &[u8]) {
        nested_columns_round_trip(format, bytes);
        paths_read_the_values_there(format, bytes);
        json_columns(format, bytes);
        unknown_fields_by_policy(format, bytes);
        bad_values_by_policy(format, bytes);
    }

    /// Structs, lists and maps are read into the schema's, widened inside (an `int16`
    /// field into `int64`, `int32` map values into `int64`, nanoseconds into microseconds),
    /// a struct's field the file lacks is NULL, and the fields the schema does not name are
    /// counted by path.
    pub(in super::super) fn nested_columns_round_trip(format: InputFormat, bytes: &[u8]) {
        let spec = spec(
            format,
            r#"[{"name":"id","type":"int64","nullable":false},
                {"name":"user","type":"struct<age:int64,name:string,missing:string>"},
                {"name":"tags","type":"array<string>"},
                {"name":"attrs","type":"map<string,int64>"},
                {"name":"events","type":"array<struct<kind:string,at:timestamp>>"}]"#,
        );
        let (stats, rows) = rows(&spec, bytes);
        assert_eq!(
            rows,
            [
                [
                    "1",
                    "{age: 30, name: ann, missing: ∅}",
                    "[a, b]",
                    "{k1: 1, k2: 2}",
                    "[{kind: click, at: 2024-01-02T03:04:05Z}, {kind: view, at: 2024-01-02T03:04:06Z}]",
                ],
                ["2", "{age: ∅, name: bob, missing: ∅}", "[]", "{}", "∅"],
                [
                    "3",
                    "∅",
                    "∅",
                    "{k1: 3}",
                    "[{kind: buy, at: 2024-01-02T03:04:07Z}]"
                ],
            ]
        );
        assert_eq!(stats.ignored, unread());
        assert_eq!(stats.rescued_rows, 0);
    }

    /// Columns with a path read the value there: struct fields, list elements by index,
    /// map keys; an absent step is NULL, and the fields no path covers are counted.
    fn paths_read_the_values_there(format: InputFormat, bytes: &[u8]) {
        let spec = spec(
            format,
            r#"[{"name":"name","path":"user.name","type":"string"},
                {"name":"age","path":"user.age","type":"int32"},
                {"name":"t0","path":"tags[0]","type":"string"},
                {"name":"t1","path":"tags[1]","type":"string"},
                {"name":"t5","path":"tags[5]","type":"string"},
                {"name":"k1","path":"attrs.k1","type":"int64"},
                {"name":"k2","path":"attrs.k2","type":"int64"},
                {"name":"kind","path":"events[0].kind","type":"string"},
                {"name":"at","path":"events[1].at","type":"timestamp"},
                {"name":"nope","path":"user.nope","type":"string"},
                {"name":"deeper","path":"tags[0].x","type":"string"}]"#,
        );
        let (stats, rows) = rows(&spec, bytes);
        assert_eq!(
            rows,
            [
                text_rows(&["ann|30|a|b|∅|1|2|click|2024-01-02T03:04:06Z|∅|∅"])[0].clone(),
                text_rows(&["bob|∅|∅|∅|∅|∅|∅|∅|∅|∅|∅"])[0].clone(),
                text_rows(&["∅|∅|∅|∅|∅|3|∅|buy|∅|∅|∅"])[0].clone(),
            ]
        );
        let mut expected = unread();
        expected.add("id", 3);
        assert_eq!(stats.ignored, expected);

        let required = |path: &str| {
            let columns =
                format!(r#"[{{"name":"c","path":"{path}","type":"string","nullable":false}}]"#);
            parse_error(bytes, &self::spec(format, &columns))
        };
        assert_eq!(
            required("user.name"),
            r#"row 3: column "user.name": missing value in a non-nullable column"#
        );
        assert_eq!(
            required("tags[1]"),
            r#"row 2: column "tags[1]": missing value in a non-nullable column"#
        );
        assert_eq!(
            required("user.nope"),
            r#"column "user.nope": missing from the file, and the source's schema requires it"#
        );
    }

    /// A `json` column holds any value's compact JSON text (keys in the file's order, NULL
    /// fields as `null`), and a string's JSON text made compact; a string that is not JSON
    /// is a bad value.
    fn json_columns(format: InputFormat, bytes: &[u8]) {
        let columns = r#"[{"name":"user","type":"json"},
            {"name":"tags","type":"json"},
            {"name":"attrs","type":"json"},
            {"name":"first","path":"events[0]","type":"json"},
            {"name":"payload","type":"json"}]"#;
        let mut spec = spec(format, columns);
        assert_eq!(
            parse_error(bytes, &spec),
            r#"row 2: column "payload": cannot parse "not json" as json"#
        );
        spec.bad_values = BadValues::Rescue;
        let (stats, rows) = rows(&spec, bytes);
        assert_eq!(
            rows,
            [
                [
                    r#"{"name":"ann","age":30,"extra":"x"}"#,
                    r#"["a","b"]"#,
                    r#"{"k1":1,"k2":2}"#,
                    r#"{"at":"2024-01-02T03:04:05","kind":"click","note":"n1"}"#,
                    r#"{"a":1,"b":[true,null]}"#,
                    "∅",
                ],
                [
                    r#"{"name":"bob","age":null,"extra":null}"#,
                    "[]",
                    "{}",
                    "∅",
                    "∅",
                    r#"{"fields":{"payload":"not json"},"reasons":{"payload":"cannot parse \"not json\" as json"}}"#,
                ],
                [
                    "∅",
                    "∅",
                    r#"{"k1":3}"#,
                    r#"{"at":"2024-01-02T03:04:07","kind":"buy","note":"n3"}"#,
                    "∅",
                    "∅",
                ],
            ]
        );
        assert_eq!(stats.rescued_rows, 1);
        assert_eq!(stats.ignored, ignored(&[("id", 3), ("moments", 2)]));
    }

    /// A field the schema does not name (here inside a struct and inside a list's structs)
    /// is counted, fails the object before any row, or is rescued with its precise path.
    fn unknown_fields_by_policy(format: InputFormat, bytes: &[u8]) {
        let columns = r#"[{"name":"id","type":"int64"},
            {"name":"user","type":"struct<name:string>"},
            {"name":"tags","type":"array<string>"},
            {"name":"attrs","type":"map<string,int32>"},
            {"name":"events","type":"array<struct<at:timestamp,kind:string>>"},
            {"name":"moments","type":"json"},
            {"name":"payload","type":"string"}]"#;
        let mut spec = spec(format, columns);
        let (stats, _) = rows(&spec, bytes);
        assert_eq!(
            stats.ignored,
            ignored(&[("user.age", 1), ("user.extra", 1), ("events[].note", 2)])
        );
        spec.unknown_fields = UnknownFields::Fail;
        assert_eq!(
            parse_error(bytes, &spec),
            r#"column "user.age": not in the schema, nor are "user.extra", "events[].note""#
        );
        spec.unknown_fields = UnknownFields::Rescue;
        let (stats, rows) = rows(&spec, bytes);
        let rescued: Vec<_> = rows.iter().map(|r| r[7].as_str()).collect();
        assert_eq!(
            rescued,
            [
                concat!(
                    r#"{"fields":{"user.age":30,"user.extra":"x","events[0].note":"n1"},"#,
                    r#""reasons":{"user.age":"not in the schema","user.extra":"not in the schema","#,
                    r#""events[0].note":"not in the schema"}}"#
                ),
                "∅",
                r#"{"fields":{"events[0].note":"n3"},"reasons":{"events[0].note":"not in the schema"}}"#,
            ]
        );
        assert_eq!((stats.rescued_rows, stats.ignored.values), (2, 0));
        assert_eq!(rows[0][1], "{name: ann}");
    }

    /// A type the schema's cannot hold, deep inside a column, fails the object naming its
    /// path before any row; a value refused fails naming its row and precise path; under
    /// `rescue` both are NULL and rescued in the file's order, unknown fields among them.
    fn bad_values_by_policy(format: InputFormat, bytes: &[u8]) {
        let columns = r#"[{"name":"user","type":"struct<name:int32,age:int32>"},
            {"name":"events","type":"array<struct<at:timestamp,kind:int64>>"},
            {"name":"moments","type":"array<timestamp>"},
            {"name":"again","path":"user.name","type":"int32"},
            {"name":"payload","type":"json"},
            {"name":"id","type":"int64"},
            {"name":"tags","type":"json"},
            {"name":"attrs","type":"json"}]"#;
        let mut spec = spec(format, columns);
        assert_eq!(
            parse_error(bytes, &spec),
            r#"column "user.name": type Utf8 in the file cannot be read as int32"#
        );
        let events = self::spec(
            format,
            r#"[{"name":"events","type":"array<struct<kind:int64>>"}]"#,
        );
        assert_eq!(
            parse_error(bytes, &events),
            r#"column "events[].kind": type Utf8 in the file cannot be read as int64"#
        );
        let moments = self::spec(format, r#"[{"name":"moments","type":"array<timestamp>"}]"#);
        assert_eq!(
            parse_error(bytes, &moments),
            r#"row 1: column "moments[1]": 2024-01-02T03:04:05.000000001Z has digits below the microsecond and would be truncated"#
        );

        spec.bad_values = BadValues::Rescue;
        spec.unknown_fields = UnknownFields::Rescue;
        let (stats, rows) = rows(&spec, bytes);
        let rows: Vec<Vec<String>> = rows
            .into_iter()
            .map(|r| r[..5].iter().chain(&r[8..]).cloned().collect())
            .collect();
        let utf8 = |ty: &str| format!("type Utf8 in the file cannot be read as {ty}");
        let unknown = "not in the schema";
        let entries = |fields: &[(&str, &str, &str)]| {
            let fields_json: Vec<_> = fields
                .iter()
                .map(|(p, v, _)| format!("{p:?}:{v}"))
                .collect();
            let reasons: Vec<_> = fields
                .iter()
                .map(|(p, _, r)| format!("{p:?}:{r:?}"))
                .collect();
            format!(
                r#"{{"fields":{{{}}},"reasons":{{{}}}}}"#,
                fields_json.join(","),
                reasons.join(",")
            )
        };
        let (int32, int64) = (utf8("int32"), utf8("int64"));
        let below = "2024-01-02T03:04:05.000000001Z has digits below the microsecond and would be truncated";
        assert_eq!(
            rows,
            [
                vec![
                    "{name: ∅, age: 30}".to_string(),
                    "[{at: 2024-01-02T03:04:05Z, kind: ∅}, {at: 2024-01-02T03:04:06Z, kind: ∅}]"
                        .into(),
                    "[2024-01-02T03:04:05Z, ∅]".into(),
                    "∅".into(),
                    r#"{"a":1,"b":[true,null]}"#.into(),
                    entries(&[
                        ("user.name", r#""ann""#, &int32),
                        ("user.name#2", r#""ann""#, &int32),
                        ("user.extra", r#""x""#, unknown),
                        ("events[0].kind", r#""click""#, &int64),
                        ("events[0].note", r#""n1""#, unknown),
                        ("events[1].kind", r#""view""#, &int64),
                        ("moments[1]", r#""2024-01-02T03:04:05.000000001""#, below),
                    ]),
                ],
                vec![
                    "{name: ∅, age: ∅}".to_string(),
                    "∅".into(),
                    "∅".into(),
                    "∅".into(),
                    "∅".into(),
                    entries(&[
                        ("user.name", r#""bob""#, &int32),
                        ("user.name#2", r#""bob""#, &int32),
                        (
                            "payload",
                            r#""not json""#,
                            r#"cannot parse "not json" as json"#
                        ),
                    ]),
                ],
                vec![
                    "∅".to_string(),
                    "[{at: 2024-01-02T03:04:07Z, kind: ∅}]".into(),
                    "[]".into(),
                    "∅".into(),
                    "∅".into(),
                    entries(&[
                        ("events[0].kind", r#""buy""#, &int64),
                        ("events[0].note", r#""n3""#, unknown),
                    ]),
                ],
            ]
        );
        assert_eq!(stats.rescued_rows, 3);

        // A value rescued from a required column leaves it NULL, which fails the row.
        let required = self::spec(
            format,
            r#"[{"name":"n","path":"user.name","type":"int32","nullable":false}]"#,
        );
        let mut required = required;
        required.bad_values = BadValues::Rescue;
        assert_eq!(
            parse_error(bytes, &required),
            r#"row 1: column "user.name": missing value in a non-nullable column"#
        );
    }
}
