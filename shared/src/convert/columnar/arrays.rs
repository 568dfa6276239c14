//! The one reading of a typed file's Arrow arrays (Parquet, Avro and ORC input) into the
//! types of the source's schema, recursive over [`FieldType`]: what `convert/columnar/typed.rs`
//! calls for each column, whatever the format.
//!
//! A [`Plan`] is made once per file from the file's Arrow type and the schema's type, and
//! reads each batch: scalars are widened losslessly (at any depth), a struct's fields are
//! matched by exact name, any list flavour becomes a list, a map with string keys a map,
//! and any value becomes `json` text (a string column's values are parsed as JSON texts).
//! The arrays it returns have exactly [`FieldType::to_arrow`]'s types.
//!
//! A value it cannot store is refused where it is met ([`Reading::refuse`]): with the row
//! of the file and the value's precise path (`items[2].at`) in the error, or, when bad
//! values are rescued, kept as JSON in the rescued column ([`rescued_column`]) with the
//! reason, its own slot left NULL. A [`Place`] says where a slot of an array is (which row,
//! which element of which list), worked out only for the slots refused or rescued.

use std::fmt::Write as _;
use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{
    Array, ArrayRef, ListArray, MapArray, StringArray, StructArray, TimestampMicrosecondArray,
    UInt32Array, make_array, new_empty_array, new_null_array,
};
use arrow_buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_cast::{CastOptions, cast_with_options};
use arrow_json::writer::{EncoderOptions, make_encoder};
use arrow_schema::{ArrowError, DataType, Field, TimeUnit};
use arrow_select::take::take;

use super::ConvertError;
use crate::schema::{ColumnType, FieldPath, FieldType, Step};

/// Casts that must never turn a value into NULL: an unexpected failure is an error.
const STRICT: CastOptions<'static> = CastOptions {
    safe: false,
    format_options: FormatOptions::new(),
};

/// The reason given for a field the schema does not name.
pub(in crate::convert) const NOT_IN_THE_SCHEMA: &str = "not in the schema";

/// Characters of a value shown in a message, at most.
const SHOWN_CHARS: usize = 80;

/// How a value of a file's type becomes a value of the schema's type.
#[derive(Debug)]
pub(in crate::convert) struct Plan {
    how: How,
    /// The schema's Arrow type ([`FieldType::to_arrow`]).
    target: DataType,
}

#[derive(Debug)]
enum How {
    /// Already of the schema's type.
    Same,
    /// NULL whatever the type.
    Nulls,
    /// A lossless arrow cast (widening, string flavours, dictionary unpacking).
    Cast,
    /// A timestamp of this unit, to UTC microseconds, checked value by value.
    Timestamp(TimeUnit),
    /// Any value, as its compact JSON text.
    Json,
    /// A string holding a JSON text, checked and made compact.
    JsonText,
    /// A struct from a struct: per field of the schema's, the file's field (`None`: the
    /// file has none, NULL).
    Struct(Vec<Option<Child>>),
    /// A list from any list flavour, its elements read so.
    List(Box<Plan>),
    /// A map from a map with string keys, its values read so.
    Map(Box<Plan>),
    /// Not readable as the schema's type, for this reason: every value is refused.
    Refused(String),
}

/// A field of a file struct that a field of the schema's struct reads.
#[derive(Debug)]
struct Child {
    name: String,
    /// Its position among the file struct's fields.
    position: usize,
    plan: Plan,
}

/// Whether the typed readers (Parquet, Avro, ORC) read every value of a file column of type
/// `file` as `target`, at every level of it.
pub fn reads(file: &DataType, target: &FieldType) -> bool {
    fn all(plan: &Plan) -> bool {
        match &plan.how {
            How::Refused(_) => false,
            How::Struct(children) => children.iter().flatten().all(|c| all(&c.plan)),
            How::List(inner) | How::Map(inner) => all(inner),
            _ => true,
        }
    }
    all(&plan(file, target))
}

/// How a value of the file's type `file` is read as `target`.
pub(in crate::convert) fn plan(file: &DataType, target: &FieldType) -> Plan {
    let refused = || {
        How::Refused(format!(
            "type {file} in the file cannot be read as {target}"
        ))
    };
    let how = match target {
        // A column of no values (Arrow's `Null`) is NULL in any type.
        _ if *file == DataType::Null => How::Nulls,
        FieldType::Scalar(ty) => scalar(file, *ty).unwrap_or_else(refused),
        FieldType::Json if is_text(file) => How::JsonText,
        FieldType::Json if encodes_as_json(file) => How::Json,
        FieldType::Json => refused(),
        FieldType::Struct(fields) => match file {
            DataType::Struct(children) => How::Struct(
                fields
                    .iter()
                    .map(|field| {
                        let position = children.iter().position(|c| *c.name() == field.name)?;
                        Some(Child {
                            name: field.name.clone(),
                            position,
                            plan: plan(children[position].data_type(), &field.ty),
                        })
                    })
                    .collect(),
            ),
            _ => refused(),
        },
        FieldType::Array(element) => match element_type(file) {
            Some(file) => How::List(Box::new(plan(file, element))),
            None => refused(),
        },
        FieldType::Map(value) => match map_value_type(file) {
            Some(file) => How::Map(Box::new(plan(file, value))),
            None => refused(),
        },
    };
    Plan {
        how,
        target: target.to_arrow(),
    }
}

/// The type of a list flavour's elements.
pub(in crate::convert) fn element_type(file: &DataType) -> Option<&DataType> {
    match file {
        DataType::List(element)
        | DataType::LargeList(element)
        | DataType::ListView(element)
        | DataType::LargeListView(element)
        | DataType::FixedSizeList(element, _) => Some(element.data_type()),
        _ => None,
    }
}

/// The type of a map's values, when its keys are strings.
pub(in crate::convert) fn map_value_type(file: &DataType) -> Option<&DataType> {
    let DataType::Map(entries, _) = file else {
        return None;
    };
    match entries.data_type() {
        DataType::Struct(kv) if kv.len() == 2 && is_text(kv[0].data_type()) => {
            Some(kv[1].data_type())
        }
        _ => None,
    }
}

/// A string type: plain, large, view, or dictionary-encoded.
fn is_text(file: &DataType) -> bool {
    match file {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
        DataType::Dictionary(_, values) => is_text(values),
        _ => false,
    }
}

fn encodes_as_json(file: &DataType) -> bool {
    let field = Arc::new(Field::new("", file.clone(), true));
    let empty = new_empty_array(file);
    make_encoder(&field, empty.as_ref(), &json_options()).is_ok()
}

/// What the file holds at a place, as far as the schema reads it: the whole value, some
/// fields of a struct (by position in the file's struct), or part of each element of a
/// list or value of a map. What no column covers is a field the schema does not name.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::convert) enum Cover {
    All,
    Fields(std::collections::BTreeMap<usize, Cover>),
    Elements(Box<Cover>),
    Values(Box<Cover>),
}

impl Cover {
    /// What `self` or `other` covers.
    pub(super) fn merge(self, other: Cover) -> Cover {
        match (self, other) {
            (Cover::Fields(mut a), Cover::Fields(b)) => {
                for (position, cover) in b {
                    let merged = match a.remove(&position) {
                        Some(c) => c.merge(cover),
                        None => cover,
                    };
                    a.insert(position, merged);
                }
                Cover::Fields(a)
            }
            (Cover::Elements(a), Cover::Elements(b)) => Cover::Elements(Box::new(a.merge(*b))),
            (Cover::Values(a), Cover::Values(b)) => Cover::Values(Box::new(a.merge(*b))),
            _ => Cover::All,
        }
    }

    /// The cover of a value reached from here by `levels` and covered by `inner`.
    pub(super) fn at(levels: &[Level], inner: Cover) -> Cover {
        levels.iter().rev().fold(inner, |cover, level| match level {
            Level::Field { position, .. } => Cover::Fields([(*position, cover)].into()),
            Level::Index(_) | Level::Elements => Cover::Elements(Box::new(cover)),
            Level::Key(_) | Level::Values => Cover::Values(Box::new(cover)),
        })
    }

    /// The fields of a value of type `file` that `self` leaves uncovered, each with its
    /// levels from here (fields, `Elements`, `Values`), appended to `out`.
    pub(super) fn uncovered(
        &self,
        file: &DataType,
        at: &mut Vec<Level>,
        out: &mut Vec<Vec<Level>>,
    ) {
        match (self, file) {
            (Cover::Fields(covered), DataType::Struct(children)) => {
                for (position, child) in children.iter().enumerate() {
                    at.push(Level::Field {
                        name: child.name().clone(),
                        position,
                    });
                    match covered.get(&position) {
                        Some(cover) => cover.uncovered(child.data_type(), at, out),
                        None => out.push(at.clone()),
                    }
                    at.pop();
                }
            }
            (Cover::Elements(cover), file) => {
                if let Some(element) = element_type(file) {
                    at.push(Level::Elements);
                    cover.uncovered(element, at, out);
                    at.pop();
                }
            }
            (Cover::Values(cover), file) => {
                if let Some(value) = map_value_type(file) {
                    at.push(Level::Values);
                    cover.uncovered(value, at, out);
                    at.pop();
                }
            }
            _ => {}
        }
    }
}

impl Plan {
    /// What of the file's value the plan reads.
    pub(super) fn cover(&self) -> Cover {
        match &self.how {
            How::Struct(children) => Cover::Fields(
                children
                    .iter()
                    .flatten()
                    .map(|c| (c.position, c.plan.cover()))
                    .collect(),
            ),
            How::List(element) => Cover::Elements(Box::new(element.cover())),
            How::Map(value) => Cover::Values(Box::new(value.cover())),
            _ => Cover::All,
        }
    }

    /// The first part of the file's value that cannot be read as the schema's type: its
    /// path from here (`.a[].b`, empty for the value itself) and why.
    pub(super) fn refusal(&self) -> Option<(String, &str)> {
        match &self.how {
            How::Refused(reason) => Some((String::new(), reason)),
            How::Struct(children) => children.iter().flatten().find_map(|c| {
                let (path, reason) = c.plan.refusal()?;
                Some((key_step(&c.name) + &path, reason))
            }),
            How::List(element) => element.refusal().map(|(p, r)| ("[]".to_owned() + &p, r)),
            How::Map(value) => value.refusal().map(|(p, r)| ("{}".to_owned() + &p, r)),
            _ => None,
        }
    }

    /// `array` (of the file's type, at `place`) read as the schema's type.
    pub(super) fn read(
        &self,
        array: &ArrayRef,
        place: &Place<'_>,
        reading: &mut Reading,
    ) -> Result<ArrayRef, ConvertError> {
        let cast_error = |e: ArrowError| place.error(format!("cannot read: {e}"));
        match &self.how {
            How::Same => Ok(array.clone()),
            How::Nulls => Ok(new_null_array(&self.target, array.len())),
            How::Cast => cast_with_options(array, &self.target, &STRICT).map_err(cast_error),
            How::Timestamp(unit) => {
                let DataType::Timestamp(_, zone) = &self.target else {
                    unreachable!("planned for timestamp columns only")
                };
                let raw = match array.data_type() {
                    DataType::Dictionary(_, values) => {
                        cast_with_options(array, values, &STRICT).map_err(cast_error)?
                    }
                    _ => array.clone(),
                };
                let raw = cast_with_options(&raw, &DataType::Int64, &STRICT).map_err(cast_error)?;
                let raw = raw.as_primitive::<Int64Type>();
                let mut micros = Vec::with_capacity(raw.len());
                for (slot, value) in raw.iter().enumerate() {
                    micros.push(match value.map(|v| to_micros(v, *unit)) {
                        Some(Err(message)) => {
                            reading.refuse(array.as_ref(), place, slot, &message)?;
                            None
                        }
                        Some(Ok(v)) => Some(v),
                        None => None,
                    });
                }
                Ok(Arc::new(
                    TimestampMicrosecondArray::from(micros).with_timezone_opt(zone.clone()),
                ))
            }
            How::Json => {
                let mut out = StringBuilder::with_capacity(array.len(), array.len() * 16);
                let nulls = array.logical_nulls();
                each_json(array.as_ref(), 0..array.len(), |slot, text| match &nulls {
                    Some(n) if n.is_null(slot) => out.append_null(),
                    _ => out.append_value(text),
                })
                .map_err(cast_error)?;
                Ok(Arc::new(out.finish()))
            }
            How::JsonText => {
                let texts =
                    cast_with_options(array, &DataType::Utf8, &STRICT).map_err(cast_error)?;
                let mut out = StringBuilder::with_capacity(texts.len(), texts.len() * 16);
                for (slot, text) in texts.as_string::<i32>().iter().enumerate() {
                    match text {
                        Some(text) if is_json(text) => out.append_value(compact(text)),
                        Some(text) => {
                            let message = format!("cannot parse {} as json", shown(text));
                            reading.refuse(array.as_ref(), place, slot, &message)?;
                            out.append_null();
                        }
                        None => out.append_null(),
                    }
                }
                Ok(Arc::new(out.finish()))
            }
            How::Struct(children) => {
                let file = array
                    .as_struct_opt()
                    .ok_or_else(|| place.error("not a struct (a reader error)"))?;
                let DataType::Struct(fields) = &self.target else {
                    unreachable!("planned for struct columns only")
                };
                let columns = fields
                    .iter()
                    .zip(children)
                    .map(|(field, child)| match child {
                        None => Ok(new_null_array(field.data_type(), array.len())),
                        Some(child) => {
                            let values = field_of(file, &child.name, place)?;
                            let place = Place::Field {
                                parent: place,
                                name: &child.name,
                                position: child.position,
                            };
                            child.plan.read(&values, &place, reading)
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let built = StructArray::try_new(fields.clone(), columns, file.nulls().cloned());
                Ok(Arc::new(built.map_err(cast_error)?))
            }
            How::List(element) => {
                let lists = lists(array.as_ref()).map_err(|m| place.error(m))?;
                let inner = Place::Element {
                    parent: place,
                    offsets: &lists.offsets,
                };
                let values = element.read(&lists.values, &inner, reading)?;
                let DataType::List(field) = &self.target else {
                    unreachable!("planned for array columns only")
                };
                let built = ListArray::try_new(field.clone(), lists.offsets, values, lists.nulls);
                Ok(Arc::new(built.map_err(cast_error)?))
            }
            How::Map(value) => {
                let lists = lists(array.as_ref()).map_err(|m| place.error(m))?;
                let (keys, values) = entries(&lists.values, place)?;
                let inner = Place::Value {
                    parent: place,
                    offsets: &lists.offsets,
                    keys: &keys,
                };
                let values = value.read(&values, &inner, reading)?;
                let DataType::Map(field, _) = &self.target else {
                    unreachable!("planned for map columns only")
                };
                let DataType::Struct(kv) = field.data_type() else {
                    unreachable!("a map's entries are a struct")
                };
                let entries = StructArray::try_new(kv.clone(), vec![Arc::new(keys), values], None)
                    .map_err(cast_error)?;
                let built =
                    MapArray::try_new(field.clone(), lists.offsets, entries, lists.nulls, false);
                Ok(Arc::new(built.map_err(cast_error)?))
            }
            How::Refused(reason) => {
                for slot in valid_slots(array.as_ref()) {
                    reading.refuse(array.as_ref(), place, slot, reason)?;
                }
                Ok(new_null_array(&self.target, array.len()))
            }
        }
    }
}

/// How a file value of type `file` is read as the scalar `target`, `None` if it cannot be
/// without losing values.
fn scalar(file: &DataType, target: ColumnType) -> Option<How> {
    use DataType as D;
    if *file == target.to_arrow() {
        return Some(How::Same);
    }
    if let D::Dictionary(_, values) = file {
        // Unpacked first, then read as the values' type would be.
        return scalar(values, target).map(|read| match read {
            How::Same => How::Cast,
            read => read,
        });
    }
    let cast = match (target, file) {
        (ColumnType::Int32, D::Int8 | D::Int16 | D::UInt8 | D::UInt16) => true,
        (ColumnType::Int64, D::Int8 | D::Int16 | D::Int32 | D::UInt8 | D::UInt16 | D::UInt32) => {
            true
        }
        (ColumnType::Float64, D::Float32) => true,
        (ColumnType::String, D::Utf8 | D::LargeUtf8 | D::Utf8View) => true,
        (ColumnType::Timestamp, D::Timestamp(unit, _)) => return Some(How::Timestamp(*unit)),
        (ColumnType::Decimal { precision, scale }, file) => {
            let (digits, file_scale) = match *file {
                D::Int8 | D::UInt8 => (3, 0),
                D::Int16 | D::UInt16 => (5, 0),
                D::Int32 | D::UInt32 => (10, 0),
                D::Int64 => (19, 0),
                D::UInt64 => (20, 0),
                D::Decimal32(p, s)
                | D::Decimal64(p, s)
                | D::Decimal128(p, s)
                | D::Decimal256(p, s)
                    if s >= 0 && i16::from(s) <= i16::from(p) =>
                {
                    (i16::from(p) - i16::from(s), i16::from(s))
                }
                _ => return None,
            };
            let (precision, scale) = (i16::from(precision), i16::from(scale));
            file_scale <= scale && digits <= precision - scale
        }
        _ => false,
    };
    cast.then_some(How::Cast)
}

/// A timestamp `value` in `unit` as microseconds, exactly, or why it cannot be.
fn to_micros(value: i64, unit: TimeUnit) -> Result<i64, String> {
    match unit {
        TimeUnit::Second => value.checked_mul(1_000_000),
        TimeUnit::Millisecond => value.checked_mul(1_000),
        TimeUnit::Microsecond => Some(value),
        TimeUnit::Nanosecond if value % 1_000 == 0 => Some(value / 1_000),
        TimeUnit::Nanosecond => {
            let shown = chrono::DateTime::from_timestamp_nanos(value)
                .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
            return Err(format!(
                "{shown} has digits below the microsecond and would be truncated"
            ));
        }
    }
    .ok_or_else(|| {
        let unit = match unit {
            TimeUnit::Second => "seconds",
            _ => "milliseconds",
        };
        format!("{value} {unit} since the epoch is out of range for a timestamp in microseconds")
    })
}

/// A step from a value to values inside it: what a path or a field the schema does not
/// name goes through.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::convert) enum Level {
    /// A struct's field, by name, at this position among the file struct's fields.
    Field { name: String, position: usize },
    /// The n-th element (from 0) of a list: a path's `[n]`.
    Index(usize),
    /// A map's value at this key: a path's key on a map.
    Key(String),
    /// Every element of a list: `[]`.
    Elements,
    /// Every value of a map: `{}`.
    Values,
}

/// The path of a top-level column `root` and `levels` inside it, as [`FieldPath`] spells
/// it, with `[]` for any element of a list and `{}` for any value of a map.
pub(in crate::convert) fn spell(root: &str, levels: &[Level]) -> String {
    let mut out = FieldPath::new(vec![Step::Key(root.to_owned())])
        .map(|p| p.to_string())
        .unwrap_or_default();
    for level in levels {
        match level {
            Level::Field { name, .. } | Level::Key(name) => out.push_str(&key_step(name)),
            Level::Index(n) => {
                let _ = write!(out, "[{n}]");
            }
            Level::Elements => out.push_str("[]"),
            Level::Values => out.push_str("{}"),
        }
    }
    out
}

/// `key` as [`FieldPath`] spells a key after the first step: `.key`, or `["a.b"]`.
fn key_step(key: &str) -> String {
    let path = FieldPath::new(vec![Step::Key("_".into()), Step::Key(key.to_owned())]);
    path.map(|p| p.to_string().split_off(1)).unwrap_or_default()
}

/// Where the slots of an array are in the file: a top-level column's slots are the rows of
/// the batch, and each step inside a value says how its slots map to its parent's.
pub(in crate::convert) enum Place<'a> {
    /// A top-level column of the file, at this position among its columns.
    Column { name: &'a str, position: usize },
    /// A struct's field: its slots are the struct's.
    Field {
        parent: &'a Place<'a>,
        name: &'a str,
        position: usize,
    },
    /// The elements of a list: slot `i` is in the list whose offsets hold it.
    Element {
        parent: &'a Place<'a>,
        offsets: &'a [i32],
    },
    /// The values of a map, keyed by `keys`.
    Value {
        parent: &'a Place<'a>,
        offsets: &'a [i32],
        keys: &'a StringArray,
    },
    /// One value picked from each of the parent's (a path's `[n]`, or key of a map), at
    /// `orders[i]` among its list's elements or its map's entries.
    Picked {
        parent: &'a Place<'a>,
        step: &'a Step,
        orders: &'a [u32],
    },
}

/// Where one slot is: its row in the batch, its precise path, and its order among the
/// values of the row as the file holds them.
pub(in crate::convert) struct Spot {
    pub(super) row: usize,
    steps: Vec<Step>,
    order: Vec<u32>,
}

impl Place<'_> {
    /// Where `slot` is.
    fn locate(&self, slot: usize) -> Spot {
        let (parent, slot, step, order) = match self {
            Place::Column { name, position } => {
                return Spot {
                    row: slot,
                    steps: vec![Step::Key((*name).to_owned())],
                    order: vec![*position as u32],
                };
            }
            Place::Field {
                parent,
                name,
                position,
            } => (
                *parent,
                slot,
                Step::Key((*name).to_owned()),
                *position as u32,
            ),
            Place::Element { parent, offsets }
            | Place::Value {
                parent, offsets, ..
            } => {
                let list = offsets
                    .partition_point(|&o| o as usize <= slot)
                    .saturating_sub(1);
                let index = slot - offsets[list] as usize;
                let step = match self {
                    Place::Value { keys, .. } => Step::Key(keys.value(slot).to_owned()),
                    _ => Step::Index(index),
                };
                (*parent, list, step, index as u32)
            }
            Place::Picked {
                parent,
                step,
                orders,
            } => (*parent, slot, (*step).clone(), orders[slot]),
        };
        let mut spot = parent.locate(slot);
        spot.steps.push(step);
        spot.order.push(order);
        spot
    }

    /// The path of this place's values, with `[]` and `{}` for any element and value.
    fn schema_path(&self) -> String {
        match self {
            Place::Column { name, .. } => spell(name, &[]),
            Place::Field { parent, name, .. } => parent.schema_path() + &key_step(name),
            Place::Element { parent, .. } => parent.schema_path() + "[]",
            Place::Value { parent, .. } => parent.schema_path() + "{}",
            Place::Picked { parent, step, .. } => {
                let step = match step {
                    Step::Key(key) => key_step(key),
                    Step::Index(n) => format!("[{n}]"),
                };
                parent.schema_path() + &step
            }
        }
    }

    /// An error about every value of this place.
    fn error(&self, message: impl Into<String>) -> ConvertError {
        ConvertError::parse(None, Some(&self.schema_path()), message)
    }
}

/// What a batch's reading found to refuse or rescue.
pub(in crate::convert) struct Reading {
    /// Whether a refused value is rescued (else it fails the object).
    pub(super) rescue: bool,
    /// The 1-based row of the file of the batch's first row.
    pub(super) first_row: u64,
    /// The values to put in the rescued column.
    pub(super) found: Vec<Found>,
}

/// A value for the rescued column.
pub(in crate::convert) struct Found {
    row: usize,
    order: Vec<u32>,
    path: String,
    value: String,
    reason: String,
}

impl Reading {
    /// A value refused at `slot` of `array`, at `place`, for `reason`: rescued, or the
    /// error naming its row and path.
    pub(super) fn refuse(
        &mut self,
        array: &dyn Array,
        place: &Place<'_>,
        slot: usize,
        reason: &str,
    ) -> Result<(), ConvertError> {
        if self.rescue {
            self.rescue(array, place, slot, reason);
            return Ok(());
        }
        let spot = place.locate(slot);
        let path = FieldPath::new(spot.steps).map(|p| p.to_string());
        Err(row_error(
            self.first_row + spot.row as u64,
            &path.unwrap_or_default(),
            reason,
        ))
    }

    /// The value at `slot` of `array`, at `place`, put in the rescued column for `reason`.
    pub(super) fn rescue(
        &mut self,
        array: &dyn Array,
        place: &Place<'_>,
        slot: usize,
        reason: &str,
    ) {
        let spot = place.locate(slot);
        let path = FieldPath::new(spot.steps).map(|p| p.to_string());
        self.found.push(Found {
            row: spot.row,
            order: spot.order,
            path: path.unwrap_or_default(),
            value: json_value(array, slot),
            reason: reason.to_owned(),
        });
    }
}

/// An error at a row of the file: `row N: column "c": …`.
pub(in crate::convert) fn row_error(
    row: u64,
    column: &str,
    message: impl std::fmt::Display,
) -> ConvertError {
    ConvertError::parse(
        None,
        None,
        format!("row {row}: column {column:?}: {message}"),
    )
}

/// The rescued column of a batch of `rows` rows: per row NULL, or the JSON object
/// `{"fields":{path:value,…},"reasons":{path:why,…}}` of what was found in it, in the order
/// the file holds the values (a path met again in a row gets `#2`, `#3`…).
pub(in crate::convert) fn rescued_column(mut found: Vec<Found>, rows: usize) -> ArrayRef {
    found.sort_by(|a, b| (a.row, &a.order).cmp(&(b.row, &b.order)));
    let mut out = StringBuilder::with_capacity(rows, found.len() * 64);
    let mut found = found.into_iter().peekable();
    for row in 0..rows {
        let mut entries = Vec::new();
        while let Some(f) = found.next_if(|f| f.row == row) {
            entries.push(f);
        }
        if entries.is_empty() {
            out.append_null();
            continue;
        }
        let mut paths: Vec<String> = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            let seen = entries[..i].iter().filter(|e| e.path == entry.path).count();
            paths.push(match seen {
                0 => entry.path.clone(),
                n => format!("{}#{}", entry.path, n + 1),
            });
        }
        let json = |s: &str| serde_json::Value::from(s).to_string();
        let mut text = String::from(r#"{"fields":{"#);
        for (i, (path, entry)) in paths.iter().zip(&entries).enumerate() {
            let comma = if i > 0 { "," } else { "" };
            let _ = write!(text, "{comma}{}:{}", json(path), entry.value);
        }
        text.push_str(r#"},"reasons":{"#);
        for (i, (path, entry)) in paths.iter().zip(&entries).enumerate() {
            let comma = if i > 0 { "," } else { "" };
            let _ = write!(text, "{comma}{}:{}", json(path), json(&entry.reason));
        }
        text.push_str("}}");
        out.append_value(text);
    }
    Arc::new(out.finish())
}

/// The slots of `array` holding a value.
pub(in crate::convert) fn valid_slots(array: &dyn Array) -> impl Iterator<Item = usize> + use<> {
    let nulls = array.logical_nulls();
    (0..array.len()).filter(move |&i| nulls.as_ref().is_none_or(|n| n.is_valid(i)))
}

/// The field `name` of the struct `file` (at `place`), NULL wherever the struct is.
fn field_of(file: &StructArray, name: &str, place: &Place<'_>) -> Result<ArrayRef, ConvertError> {
    let values = file.column_by_name(name).ok_or_else(|| {
        place.error(format!(
            "field {name:?} not read from the file (a reader error)"
        ))
    })?;
    with_nulls(values, file.nulls()).map_err(|e| place.error(format!("cannot read: {e}")))
}

/// `values` NULL wherever `parent` is (values under a NULL are not values).
pub(in crate::convert) fn with_nulls(
    values: &ArrayRef,
    parent: Option<&NullBuffer>,
) -> Result<ArrayRef, ArrowError> {
    let Some(parent) = parent.filter(|n| n.null_count() > 0) else {
        return Ok(values.clone());
    };
    if matches!(
        values.data_type(),
        DataType::Null | DataType::Union(..) | DataType::RunEndEncoded(..)
    ) {
        return Ok(values.clone()); // no validity of their own
    }
    let nulls = NullBuffer::union(Some(parent), values.nulls());
    let data = values.to_data().into_builder().nulls(nulls).build()?;
    Ok(make_array(data))
}

/// A list-like array (any list flavour, or a map's entries) as a list of `i32` offsets
/// whose NULL slots are empty, and its values in order.
struct Lists {
    offsets: OffsetBuffer<i32>,
    values: ArrayRef,
    nulls: Option<NullBuffer>,
}

fn lists(array: &dyn Array) -> Result<Lists, String> {
    let (len, nulls) = (array.len(), array.logical_nulls());
    match array.data_type() {
        DataType::List(_) => {
            let a = array.as_list::<i32>();
            let o = a.value_offsets();
            rebuild(a.values(), len, nulls, |i| {
                (o[i] as usize, o[i + 1] as usize)
            })
        }
        DataType::LargeList(_) => {
            let a = array.as_list::<i64>();
            let o = a.value_offsets();
            rebuild(a.values(), len, nulls, |i| {
                (o[i] as usize, o[i + 1] as usize)
            })
        }
        DataType::ListView(_) => {
            let a = array.as_list_view::<i32>();
            let (o, s) = (a.value_offsets(), a.value_sizes());
            rebuild(a.values(), len, nulls, |i| {
                (o[i] as usize, o[i] as usize + s[i] as usize)
            })
        }
        DataType::LargeListView(_) => {
            let a = array.as_list_view::<i64>();
            let (o, s) = (a.value_offsets(), a.value_sizes());
            rebuild(a.values(), len, nulls, |i| {
                (o[i] as usize, o[i] as usize + s[i] as usize)
            })
        }
        DataType::FixedSizeList(_, _) => {
            let a = array.as_fixed_size_list();
            let size = a.value_length() as usize;
            rebuild(a.values(), len, nulls, |i| (i * size, (i + 1) * size))
        }
        DataType::Map(_, _) => {
            let a = array.as_map();
            let o = a.value_offsets();
            let entries: ArrayRef = Arc::new(a.entries().clone());
            rebuild(&entries, len, nulls, |i| (o[i] as usize, o[i + 1] as usize))
        }
        other => Err(format!("type {other} is not a list (a reader error)")),
    }
}

/// [`Lists`] of `len` slots, slot `i` holding `range(i)` of `values` (a slot of `nulls`
/// none): `values` as they are when the slots hold them all in order, else the values the
/// slots hold, taken.
fn rebuild(
    values: &ArrayRef,
    len: usize,
    nulls: Option<NullBuffer>,
    range: impl Fn(usize) -> (usize, usize),
) -> Result<Lists, String> {
    let slots = || {
        (0..len).map(|i| match &nulls {
            Some(n) if n.is_null(i) => (0, 0),
            _ => range(i),
        })
    };
    let mut offsets = Vec::with_capacity(len + 1);
    offsets.push(0_i32);
    let (mut total, mut in_order) = (0_usize, true);
    for (start, end) in slots() {
        if start > end || end > values.len() {
            return Err("a list's offsets are out of its values' bounds (a reader error)".into());
        }
        in_order &= start == end || start == total;
        total += end - start;
        let offset = i32::try_from(total).map_err(|_| "more than 2^31 list elements in a batch")?;
        offsets.push(offset);
    }
    let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
    if in_order && total == values.len() {
        return Ok(Lists {
            offsets,
            values: values.clone(),
            nulls,
        });
    }
    let mut indices = Vec::with_capacity(total);
    for (start, end) in slots() {
        indices.extend((start..end).map(|i| i as u32));
    }
    let values = take(values, &UInt32Array::from(indices), None).map_err(|e| e.to_string())?;
    Ok(Lists {
        offsets,
        values,
        nulls,
    })
}

/// The keys (as `Utf8`) and the values of a map's `entries`.
fn entries(entries: &ArrayRef, place: &Place<'_>) -> Result<(StringArray, ArrayRef), ConvertError> {
    let entries = entries
        .as_struct_opt()
        .filter(|e| e.num_columns() == 2)
        .ok_or_else(|| place.error("a map's entries are not keys and values (a reader error)"))?;
    let keys = cast_with_options(entries.column(0), &DataType::Utf8, &STRICT)
        .map_err(|e| place.error(format!("cannot read a map's keys: {e}")))?;
    Ok((keys.as_string::<i32>().clone(), entries.column(1).clone()))
}

/// The values reached from `array` (at `place`) by `levels`, and where they are, given to
/// `then`.
pub(in crate::convert) fn follow<R>(
    array: &ArrayRef,
    levels: &[Level],
    place: &Place<'_>,
    then: &mut dyn FnMut(&ArrayRef, &Place<'_>) -> Result<R, ConvertError>,
) -> Result<R, ConvertError> {
    let Some((level, rest)) = levels.split_first() else {
        return then(array, place);
    };
    match level {
        Level::Field { name, position } => {
            let file = array
                .as_struct_opt()
                .ok_or_else(|| place.error("not a struct (a reader error)"))?;
            let values = field_of(file, name, place)?;
            let inner = Place::Field {
                parent: place,
                name,
                position: *position,
            };
            follow(&values, rest, &inner, then)
        }
        Level::Elements | Level::Values => {
            let lists = lists(array.as_ref()).map_err(|m| place.error(m))?;
            if *level == Level::Elements {
                let inner = Place::Element {
                    parent: place,
                    offsets: &lists.offsets,
                };
                return follow(&lists.values, rest, &inner, then);
            }
            let (keys, values) = entries(&lists.values, place)?;
            let inner = Place::Value {
                parent: place,
                offsets: &lists.offsets,
                keys: &keys,
            };
            follow(&values, rest, &inner, then)
        }
        Level::Index(_) | Level::Key(_) => {
            let lists = lists(array.as_ref()).map_err(|m| place.error(m))?;
            let (values, keys) = match level {
                Level::Key(_) => {
                    let (keys, values) = entries(&lists.values, place)?;
                    (values, Some(keys))
                }
                _ => (lists.values.clone(), None),
            };
            let mut orders = Vec::with_capacity(lists.offsets.len() - 1);
            let picked: UInt32Array = lists
                .offsets
                .windows(2)
                .map(|w| {
                    let (start, end) = (w[0] as usize, w[1] as usize);
                    let at = match (level, &keys) {
                        (Level::Key(key), Some(keys)) => {
                            (start..end).position(|i| keys.value(i) == key)
                        }
                        (Level::Index(n), _) => (*n < end - start).then_some(*n),
                        _ => None,
                    };
                    orders.push(at.unwrap_or_default() as u32);
                    at.map(|at| (start + at) as u32)
                })
                .collect();
            let values = take(&values, &picked, None).map_err(|e| place.error(e.to_string()))?;
            let step = match level {
                Level::Key(key) => Step::Key(key.clone()),
                Level::Index(n) => Step::Index(*n),
                _ => unreachable!("a key or an index"),
            };
            let inner = Place::Picked {
                parent: place,
                step: &step,
                orders: &orders,
            };
            follow(&values, rest, &inner, then)
        }
    }
}

/// The options of every JSON text written: NULL fields of a struct written as `null`.
fn json_options() -> EncoderOptions {
    EncoderOptions::default().with_explicit_nulls(true)
}

/// The compact JSON text of each of `slots` of `array` (holding a value), given to `each`
/// (arrow-json's encoder: keys in the file's order, NULL fields as `null`).
fn each_json(
    array: &dyn Array,
    slots: impl Iterator<Item = usize>,
    mut each: impl FnMut(usize, &str),
) -> Result<(), ArrowError> {
    let field = Arc::new(Field::new("", array.data_type().clone(), true));
    let options = json_options();
    let mut encoder = make_encoder(&field, array, &options)?;
    let mut out = Vec::new();
    for slot in slots {
        out.clear();
        if !encoder.is_null(slot) {
            encoder.encode(slot, &mut out);
        }
        let text = std::str::from_utf8(&out)
            .map_err(|e| ArrowError::JsonError(format!("the JSON encoder wrote {e}")))?;
        each(slot, text);
    }
    Ok(())
}

/// The value at `slot` of `array` as JSON text: as arrow-json writes it, or, for a type it
/// does not write, its display as a JSON string.
fn json_value(array: &dyn Array, slot: usize) -> String {
    let one = array.slice(slot, 1);
    let mut text = String::new();
    if each_json(one.as_ref(), 0..1, |_, t| text.push_str(t)).is_ok() && !text.is_empty() {
        return text;
    }
    let options = FormatOptions::default();
    let shown = ArrayFormatter::try_new(one.as_ref(), &options)
        .map(|f| f.value(0).to_string())
        .unwrap_or_default();
    serde_json::Value::from(shown).to_string()
}

/// Whether `text` is one JSON value (whitespace around it allowed).
fn is_json(text: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
}

/// A JSON text without the whitespace between its tokens (keys, their order and numbers
/// as written).
fn compact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            in_string = c == '"';
            out.push(c);
        }
    }
    out
}

/// `text` as a JSON string for a message, cut to about [`SHOWN_CHARS`] characters.
fn shown(text: &str) -> String {
    match text.char_indices().nth(SHOWN_CHARS) {
        Some((at, _)) => serde_json::Value::from(format!("{}…", &text[..at])).to_string(),
        None => serde_json::Value::from(text).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{
        Int32Builder, LargeStringBuilder, MapBuilder, StringDictionaryBuilder,
    };
    use arrow_array::types::Int32Type;
    use arrow_array::{
        BinaryArray, BooleanArray, Date32Array, Decimal128Array, FixedSizeListArray, Float64Array,
        Int8Array, Int16Array, Int32Array, LargeListArray, LargeListViewArray, ListViewArray,
        TimestampNanosecondArray,
    };
    use arrow_cast::display::{ArrayFormatter, FormatOptions};

    use super::*;

    /// `array` read as `ty` (a column `c`): its values as text, or the error.
    fn read(ty: &str, array: ArrayRef, rescue: bool) -> Result<(Vec<String>, ArrayRef), String> {
        let target: FieldType = ty.parse().unwrap();
        let plan = plan(array.data_type(), &target);
        let mut reading = Reading {
            rescue,
            first_row: 1,
            found: Vec::new(),
        };
        let place = Place::Column {
            name: "c",
            position: 0,
        };
        let out = plan
            .read(&array, &place, &mut reading)
            .map_err(|e| e.to_string())?;
        assert_eq!(out.data_type(), &target.to_arrow(), "{ty}");
        let rescued = rescued_column(reading.found, array.len());
        Ok((text(&out), rescued))
    }

    fn text(array: &ArrayRef) -> Vec<String> {
        let options = FormatOptions::default().with_null("∅");
        let formatter = ArrayFormatter::try_new(array.as_ref(), &options).unwrap();
        (0..array.len())
            .map(|i| formatter.value(i).to_string())
            .collect()
    }

    fn values(ty: &str, array: ArrayRef) -> Vec<String> {
        read(ty, array, false).unwrap().0
    }

    #[test]
    fn every_list_flavour_reads_as_an_array() {
        let item = |ty: DataType| Arc::new(Field::new("item", ty, true));
        let shown = ["[1, ∅]", "∅", "[3, 4]"];
        let large = LargeListArray::new(
            item(DataType::Int8),
            OffsetBuffer::new(vec![0_i64, 2, 2, 4].into()),
            Arc::new(Int8Array::from(vec![Some(1), None, Some(3), Some(4)])),
            Some(NullBuffer::from(vec![true, false, true])),
        );
        let fixed = FixedSizeListArray::new(
            item(DataType::Int16),
            2,
            Arc::new(Int16Array::from(vec![
                Some(1),
                None,
                Some(9),
                Some(9),
                Some(3),
                Some(4),
            ])),
            Some(NullBuffer::from(vec![true, false, true])),
        );
        // Views out of order, overlapping, and a NULL one over values.
        let viewed = || {
            Arc::new(Int32Array::from(vec![
                Some(3),
                Some(4),
                Some(7),
                Some(1),
                None,
            ]))
        };
        let second_null = || Some(NullBuffer::from(vec![true, false, true]));
        let view = ListViewArray::new(
            item(DataType::Int32),
            vec![3, 0, 0].into(),
            vec![2, 3, 2].into(),
            viewed(),
            second_null(),
        );
        let large_view = LargeListViewArray::new(
            item(DataType::Int32),
            vec![3_i64, 0, 0].into(),
            vec![2_i64, 1, 2].into(),
            viewed(),
            second_null(),
        );
        // A NULL list over values, and a slice: the values under neither are not read.
        let list = arrow_array::ListArray::new(
            item(DataType::Int32),
            OffsetBuffer::new(vec![0, 1, 3, 4, 6].into()),
            Arc::new(Int32Array::from(vec![
                Some(0),
                Some(1),
                None,
                Some(5),
                Some(3),
                Some(4),
            ])),
            Some(NullBuffer::from(vec![true, true, false, true])),
        )
        .slice(1, 3);
        for array in [
            Arc::new(large) as ArrayRef,
            Arc::new(fixed),
            Arc::new(view),
            Arc::new(large_view),
            Arc::new(list),
        ] {
            assert_eq!(
                values("array<int64>", array.clone()),
                shown,
                "{}",
                array.data_type()
            );
        }
    }

    #[test]
    fn a_column_of_no_values_is_null_in_any_type() {
        let nulls: ArrayRef = Arc::new(arrow_array::NullArray::new(2));
        for ty in [
            "int32",
            "struct<a:date>",
            "array<string>",
            "map<string,json>",
            "json",
        ] {
            assert_eq!(values(ty, nulls.clone()), ["∅", "∅"], "{ty}");
        }
    }

    #[test]
    fn values_under_a_null_are_not_read() {
        // A sub-microsecond time under a NULL struct and in a NULL list's range.
        let at = TimestampNanosecondArray::from(vec![Some(1_000), Some(1_001)]);
        let user = StructArray::new(
            vec![Field::new("at", at.data_type().clone(), true)].into(),
            vec![Arc::new(at) as ArrayRef],
            Some(NullBuffer::from(vec![true, false])),
        );
        assert_eq!(
            values("struct<at:timestamp>", Arc::new(user)),
            ["{at: 1970-01-01T00:00:00.000001Z}", "∅"]
        );
    }

    #[test]
    fn maps_with_keys_of_any_string_flavour() {
        let mut large = MapBuilder::new(None, LargeStringBuilder::new(), Int32Builder::new());
        large.keys().append_value("a");
        large.values().append_value(1);
        large.append(true).unwrap();
        large.append(false).unwrap();
        let mut dictionary = MapBuilder::new(
            None,
            StringDictionaryBuilder::<Int32Type>::new(),
            Int32Builder::new(),
        );
        dictionary.keys().append_value("a");
        dictionary.values().append_value(1);
        dictionary.append(true).unwrap();
        dictionary.append(false).unwrap();
        let large: ArrayRef = Arc::new(large.finish());
        assert_eq!(values("json", large.clone()), [r#"{"a":1}"#, "∅"]);
        for map in [large, Arc::new(dictionary.finish())] {
            assert_eq!(values("map<string,int64>", map.clone()), ["{a: 1}", "∅"]);
        }
        let mut numbered = MapBuilder::new(None, Int32Builder::new(), Int32Builder::new());
        numbered.keys().append_value(7);
        numbered.values().append_value(1);
        numbered.append(true).unwrap();
        let numbered: ArrayRef = Arc::new(numbered.finish());
        let (shown, rescued) = read("map<string,int32>", numbered, true).unwrap();
        assert_eq!(shown, ["∅"]);
        assert_eq!(
            text(&rescued),
            [concat!(
                // arrow-json writes no map of integer keys: its display, as a JSON string.
                r#"{"fields":{"c":"{7: 1}"},"#,
                r#""reasons":{"c":"type Map(\"entries\": non-null Struct(\"key\": non-null Int32, \"value\": Int32), unsorted) in the file cannot be read as map<string,int32>"}}"#
            )]
        );
    }

    #[test]
    fn json_text_of_any_type_and_of_strings_holding_json() {
        let cases: Vec<(ArrayRef, &[&str])> = vec![
            (
                Arc::new(BooleanArray::from(vec![Some(true), None])),
                &["true", "∅"],
            ),
            (
                Arc::new(Float64Array::from(vec![1.5, f64::NAN])),
                &["1.5", "null"],
            ),
            (
                Arc::new(
                    Decimal128Array::from(vec![1234])
                        .with_precision_and_scale(6, 2)
                        .unwrap(),
                ),
                &["12.34"],
            ),
            (
                Arc::new(Date32Array::from(vec![19724])),
                &[r#""2024-01-02""#],
            ),
            (
                Arc::new(BinaryArray::from(vec![&b"\x01\xff"[..]])),
                &[r#""01ff""#],
            ),
        ];
        for (array, shown) in cases {
            assert_eq!(
                values("json", array.clone()),
                shown,
                "{}",
                array.data_type()
            );
        }
        let texts = StringArray::from(vec![
            Some("{ \"a b\" : [1, 2.50 ,\"x  y\", \"q\\\" }\"] }\n"),
            Some(" 7 "),
            Some(""),
            Some("{\"a\":1} x"),
            None,
        ]);
        let (shown, rescued) = read("json", Arc::new(texts), true).unwrap();
        assert_eq!(
            shown,
            [r#"{"a b":[1,2.50,"x  y","q\" }"]}"#, "7", "∅", "∅", "∅"]
        );
        assert_eq!(
            text(&rescued)[2..4],
            [
                r#"{"fields":{"c":""},"reasons":{"c":"cannot parse \"\" as json"}}"#,
                r#"{"fields":{"c":"{\"a\":1} x"},"reasons":{"c":"cannot parse \"{\\\"a\\\":1} x\" as json"}}"#,
            ]
        );
        let long = "x".repeat(200);
        let err = read(
            "json",
            Arc::new(StringArray::from(vec![long.as_str()])),
            false,
        )
        .unwrap_err();
        assert_eq!(
            err,
            format!(
                r#"row 1: column "c": cannot parse "{}…" as json"#,
                "x".repeat(80)
            )
        );
    }

    #[test]
    fn the_rescued_column_keeps_the_files_order_and_numbers_a_path_met_again() {
        let found = |row: usize, order: &[u32], path: &str, value: &str| Found {
            row,
            order: order.to_vec(),
            path: path.into(),
            value: value.into(),
            reason: "why".into(),
        };
        let column = rescued_column(
            vec![
                found(2, &[1, 0], "b[0]", "1"),
                found(0, &[2], "a", "2"),
                found(0, &[1], "a", "3"),
                found(0, &[3], "a", "4"),
                found(2, &[0], "z", "5"),
            ],
            3,
        );
        assert_eq!(
            text(&column),
            [
                r#"{"fields":{"a":3,"a#2":2,"a#3":4},"reasons":{"a":"why","a#2":"why","a#3":"why"}}"#,
                "∅",
                r#"{"fields":{"z":5,"b[0]":1},"reasons":{"z":"why","b[0]":"why"}}"#,
            ]
        );
    }

    #[test]
    fn paths_are_spelled_as_field_paths_are() {
        let field = |name: &str, position| Level::Field {
            name: name.into(),
            position,
        };
        assert_eq!(
            spell(
                "a",
                &[
                    field("b", 0),
                    Level::Elements,
                    field("x.y", 1),
                    Level::Values
                ]
            ),
            r#"a.b[]["x.y"]{}"#
        );
        assert_eq!(
            spell("a.b", &[Level::Index(3), Level::Key("k".into())]),
            r#"["a.b"][3].k"#
        );
    }
}
