//! Schema inference: the column types a sample of values supports, as the sources document
//! spells them, and what was seen of each column (values, NULLs, an example, notes).
//!
//! Text values (CSV fields, JSON strings) are typed by the narrowest type that reads every
//! value seen: `bool` (`true` / `false` in any case), `int32`, `int64`, `decimal(P,S)` (every
//! value a plain number with at most S fraction digits, P ≤ 38, integers too wide for
//! `int64` included), `float64` (any other number), `date` (`YYYY-MM-DD`, or a common
//! day-first or month-first pattern, with its `format`), `timestamp` (ISO 8601 / RFC 3339,
//! or a common pattern with its `format`), else `string`. JSON values keep their own shape:
//! objects become `struct<…>` (or `map<string,…>` past [`MAP_KEYS`] distinct keys), arrays
//! `array<…>`, and a field seen with types that no one type reads becomes `json`, with a
//! note saying what was seen. A column with no value but NULLs is a nullable `string`, noted.
//!
//! Inference proposes; it does not decide: the caller converts every sampled file under the
//! proposal with the real converter, and widens a column that still fails (see the CLI's
//! `infer`), so the converter's own reading is the last word.

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use chrono::{NaiveDate, NaiveDateTime};

use crate::schema::{ColumnSpec, ColumnType, FieldType, StructField, TimeFormat};

/// An object with more distinct keys than this (over all the records seen) is proposed as a
/// `map<string,…>`: its keys are data, not a schema.
pub const MAP_KEYS: usize = 200;
/// Characters of an example value kept.
pub const EXAMPLE_CHARS: usize = 40;

/// Date patterns tried after ISO 8601, in order (a value must read with one pattern for
/// every value of the column).
const DATE_PATTERNS: &[&str] = &["%Y/%m/%d", "%d/%m/%Y", "%m/%d/%Y", "%d.%m.%Y", "%Y%m%d"];
/// Timestamp patterns tried after ISO 8601 / RFC 3339.
const TIMESTAMP_PATTERNS: &[&str] = &[
    "%Y/%m/%d %H:%M:%S",
    "%d/%m/%Y %H:%M:%S",
    "%m/%d/%Y %H:%M:%S",
    "%d/%m/%Y %H:%M",
    "%m/%d/%Y %H:%M",
    "%d.%m.%Y %H:%M:%S",
    "%d/%b/%Y:%H:%M:%S %z",
];

/// What a run of text values supports, narrowed by each value.
#[derive(Debug, Clone)]
pub struct TextTypes {
    seen: u64,
    bool_ok: bool,
    int_ok: bool,
    int_min: i64,
    int_max: i64,
    decimal_ok: bool,
    int_digits: u32,
    scale: u32,
    float_ok: bool,
    iso_date_ok: bool,
    date_patterns: Vec<&'static str>,
    iso_timestamp_ok: bool,
    timestamp_patterns: Vec<&'static str>,
    /// Values that are plain numbers, and the first value seen that is not one.
    numbers: u64,
    first_not_number: Option<String>,
}

impl Default for TextTypes {
    fn default() -> Self {
        Self {
            seen: 0,
            bool_ok: true,
            int_ok: true,
            int_min: 0,
            int_max: 0,
            decimal_ok: true,
            int_digits: 0,
            scale: 0,
            float_ok: true,
            iso_date_ok: true,
            date_patterns: DATE_PATTERNS.to_vec(),
            iso_timestamp_ok: true,
            timestamp_patterns: TIMESTAMP_PATTERNS.to_vec(),
            numbers: 0,
            first_not_number: None,
        }
    }
}

/// The digits of a plain decimal number (`-12.50`): integer digits (leading zeros not
/// counted) and fraction digits, or `None` when it is not one.
fn plain_number(text: &str) -> Option<(u32, u32)> {
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (int, frac) = match body.split_once('.') {
        Some((int, frac)) => (int, frac),
        None => (body, ""),
    };
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if body.contains('.') && frac.is_empty() {
        return None;
    }
    let int_digits = int.trim_start_matches('0').len() as u32;
    Some((int_digits, frac.len() as u32))
}

fn iso_timestamp(text: &str) -> bool {
    chrono::DateTime::parse_from_rfc3339(text).is_ok()
        || NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f").is_ok()
        || NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f").is_ok()
        || chrono::DateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f%:z").is_ok()
}

fn reads_as_timestamp(text: &str, pattern: &str) -> bool {
    if pattern.contains("%z") {
        chrono::DateTime::parse_from_str(text, pattern).is_ok()
    } else {
        NaiveDateTime::parse_from_str(text, pattern).is_ok()
    }
}

impl TextTypes {
    /// Narrow by one non-NULL value.
    pub fn add(&mut self, text: &str) {
        self.seen += 1;
        let text = text.trim();
        if plain_number(text).is_some() {
            self.numbers += 1;
        } else if self.first_not_number.is_none() {
            self.first_not_number = Some(cut(text));
        }
        // `007` is an identifier, not seven: a number would lose its zeros.
        let digits = text.strip_prefix('-').unwrap_or(text);
        if digits.len() > 1 && digits.starts_with('0') && digits.bytes().all(|b| b.is_ascii_digit())
        {
            self.int_ok = false;
            self.decimal_ok = false;
            self.float_ok = false;
        }
        if self.bool_ok {
            self.bool_ok = text.eq_ignore_ascii_case("true") || text.eq_ignore_ascii_case("false");
        }
        if self.int_ok {
            match text.parse::<i64>() {
                Ok(v) if !text.starts_with('+') => {
                    if self.seen == 1 {
                        (self.int_min, self.int_max) = (v, v);
                    } else {
                        self.int_min = self.int_min.min(v);
                        self.int_max = self.int_max.max(v);
                    }
                }
                _ => self.int_ok = false,
            }
        }
        if self.decimal_ok {
            match plain_number(text) {
                Some((int_digits, scale)) if !text.starts_with('+') => {
                    self.int_digits = self.int_digits.max(int_digits);
                    self.scale = self.scale.max(scale);
                }
                _ => self.decimal_ok = false,
            }
        }
        if self.float_ok {
            self.float_ok = !text.starts_with('+') && plain_number(text).is_some()
                || (text.parse::<f64>().is_ok_and(f64::is_finite)
                    && text.bytes().any(|b| b == b'e' || b == b'E'));
        }
        if self.iso_date_ok {
            self.iso_date_ok = NaiveDate::parse_from_str(text, "%Y-%m-%d").is_ok();
        }
        self.date_patterns
            .retain(|p| NaiveDate::parse_from_str(text, p).is_ok());
        if self.iso_timestamp_ok {
            self.iso_timestamp_ok = iso_timestamp(text);
        }
        self.timestamp_patterns
            .retain(|p| reads_as_timestamp(text, p));
    }

    /// The narrowest type reading every value, its `format` when not ISO 8601, and notes.
    pub fn decide(&self) -> (ColumnType, Option<TimeFormat>, Vec<String>) {
        let mut notes = Vec::new();
        if self.seen == 0 {
            notes.push("no value but NULLs: string".to_string());
            return (ColumnType::String, None, notes);
        }
        if self.bool_ok {
            return (ColumnType::Bool, None, notes);
        }
        if self.int_ok {
            let fits32 = self.int_min >= i64::from(i32::MIN) && self.int_max <= i64::from(i32::MAX);
            return (
                if fits32 {
                    ColumnType::Int32
                } else {
                    ColumnType::Int64
                },
                None,
                notes,
            );
        }
        if self.decimal_ok {
            let precision = (self.int_digits + self.scale).max(1);
            if precision <= 38 {
                if self.scale == 0 {
                    notes.push("integers too wide for int64: decimal".to_string());
                }
                return (
                    ColumnType::Decimal {
                        precision: precision as u8,
                        scale: self.scale as i8,
                    },
                    None,
                    notes,
                );
            }
            notes.push(format!(
                "numbers of {precision} digits do not fit decimal(38,s): {}",
                if self.scale == 0 { "string" } else { "float64" }
            ));
            if self.scale == 0 {
                return (ColumnType::String, None, notes);
            }
        }
        if self.float_ok {
            return (ColumnType::Float64, None, notes);
        }
        let timed = [
            (
                ColumnType::Date,
                self.iso_date_ok,
                &self.date_patterns,
                "dates",
            ),
            (
                ColumnType::Timestamp,
                self.iso_timestamp_ok,
                &self.timestamp_patterns,
                "times",
            ),
        ];
        for (ty, iso, patterns, what) in timed {
            if iso {
                return (ty, None, notes);
            }
            if let Some(pattern) = patterns.first() {
                if patterns.len() > 1 {
                    notes.push(format!(
                        "{what} also read as {}: check the format",
                        patterns[1..].join(", ")
                    ));
                }
                return (ty, Some(TimeFormat::Pattern((*pattern).to_string())), notes);
            }
        }
        if let (true, Some(other)) = (self.numbers > 0, &self.first_not_number) {
            notes.push(format!(
                "{} of {} values are numbers, but not {other:?}: string",
                self.numbers, self.seen
            ));
        }
        (ColumnType::String, None, notes)
    }
}

/// A JSON value with its object keys in input order (serde_json's `Value` sorts them), as
/// inference proposes columns and struct fields in the order the data has them.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number, as written.
    Number(serde_json::Number),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Json>),
    /// An object, keys in input order (a key given twice appears twice).
    Object(Vec<(String, Json)>),
}

impl Json {
    /// Parse one JSON text.
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    fn text(&self) -> String {
        match self {
            Json::Null => "null".into(),
            Json::Bool(b) => b.to_string(),
            Json::Number(n) => n.to_string(),
            Json::String(s) => s.clone(),
            Json::Array(_) => "[…]".into(),
            Json::Object(_) => "{…}".into(),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Json {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Json;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Json, E> {
                Ok(Json::Null)
            }
            fn visit_none<E>(self) -> Result<Json, E> {
                Ok(Json::Null)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
                Ok(Json::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
                Ok(Json::Number(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
                Ok(Json::Number(v.into()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Json, E> {
                serde_json::Number::from_f64(v)
                    .map(Json::Number)
                    .ok_or_else(|| E::custom("a number that is not finite"))
            }
            fn visit_str<E>(self, v: &str) -> Result<Json, E> {
                Ok(Json::String(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Json, E> {
                Ok(Json::String(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Json::Array(items))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
                let mut entries = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, Json>()? {
                    entries.push((key, value));
                }
                Ok(Json::Object(entries))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// The shape of the JSON values seen at one place of the records.
#[derive(Debug, Clone, Default)]
pub struct JsonShape {
    /// Values seen (NULL and absent ones not counted).
    pub values: u64,
    /// `null` values seen.
    pub nulls: u64,
    kinds: BTreeSet<&'static str>,
    ints: TextTypes,
    floats: bool,
    strings: TextTypes,
    /// Fields of objects, in the order first seen, with how often each was present.
    fields: Vec<(String, JsonShape)>,
    /// Where each key is in `fields`.
    index: std::collections::HashMap<String, usize>,
    objects: u64,
    elements: Option<Box<JsonShape>>,
    /// A value seen, cut to [`EXAMPLE_CHARS`].
    pub example: Option<String>,
}

fn cut(text: &str) -> String {
    let mut out: String = text.chars().take(EXAMPLE_CHARS).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

impl JsonShape {
    /// Add one value (at this place of one record).
    pub fn add(&mut self, value: &Json) {
        if *value == Json::Null {
            self.nulls += 1;
            return;
        }
        self.values += 1;
        if self.example.is_none() && !matches!(value, Json::Object(_) | Json::Array(_)) {
            self.example = Some(cut(&value.text()));
        }
        match value {
            Json::Null => {}
            Json::Bool(_) => {
                self.kinds.insert("boolean");
            }
            Json::Number(n) => {
                self.kinds.insert("number");
                if n.is_i64() || n.is_u64() {
                    self.ints.add(&n.to_string());
                } else {
                    self.floats = true;
                }
            }
            Json::String(s) => {
                self.kinds.insert("string");
                self.strings.add(s);
            }
            Json::Array(items) => {
                self.kinds.insert("array");
                let elements = self.elements.get_or_insert_with(Default::default);
                for item in items {
                    elements.add(item);
                }
            }
            Json::Object(entries) => {
                self.kinds.insert("object");
                self.objects += 1;
                // A key repeated in one record is seen once (its first value), so that a
                // field's values never outnumber the records.
                let mut seen: Vec<&String> = Vec::new();
                for (key, value) in entries {
                    if seen.contains(&key) {
                        continue;
                    }
                    seen.push(key);
                    match self.index.get(key) {
                        Some(&at) => self.fields[at].1.add(value),
                        None => {
                            let mut shape = JsonShape::default();
                            shape.add(value);
                            self.index.insert(key.clone(), self.fields.len());
                            self.fields.push((key.clone(), shape));
                        }
                    }
                }
            }
        }
    }

    /// Was a value here in every record (`present` of them) and never `null`?
    pub fn always_set(&self, present: u64) -> bool {
        self.nulls == 0 && self.values == present && present > 0
    }

    /// The type reading every value seen here, and notes on what it was decided from
    /// (`path` names the place in them).
    pub fn decide(&self, path: &str, notes: &mut Vec<String>) -> (FieldType, Option<TimeFormat>) {
        if self.kinds.is_empty() {
            notes.push(format!("{path}: no value but NULLs: string"));
            return (ColumnType::String.into(), None);
        }
        if self.kinds.len() > 1 {
            notes.push(format!(
                "{path}: seen as {}: json",
                self.kinds.iter().copied().collect::<Vec<_>>().join(" and ")
            ));
            return (FieldType::Json, None);
        }
        match *self.kinds.iter().next().expect("one kind") {
            "boolean" => (ColumnType::Bool.into(), None),
            "number" if self.floats => (ColumnType::Float64.into(), None),
            "number" => {
                let (ty, _, more) = self.ints.decide();
                notes.extend(more.into_iter().map(|n| format!("{path}: {n}")));
                // JSON integers past int64 are read exactly as decimals, or else as text.
                (ty.into(), None)
            }
            "string" => {
                let (ty, format, more) = self.strings.decide();
                notes.extend(more.into_iter().map(|n| format!("{path}: {n}")));
                // A JSON string is kept as text unless it is a date or a time: numbers
                // and booleans written as strings stay strings.
                match ty {
                    ColumnType::Date | ColumnType::Timestamp => (ty.into(), format),
                    _ => (ColumnType::String.into(), None),
                }
            }
            "array" => {
                let elements = self.elements.as_deref().cloned().unwrap_or_default();
                let (element, format) = elements.decide(&format!("{path}[]"), notes);
                if format.is_some() {
                    notes.push(format!(
                        "{path}[]: times in a pattern inside an array: string"
                    ));
                    return (FieldType::Array(Box::new(ColumnType::String.into())), None);
                }
                (FieldType::Array(Box::new(element)), None)
            }
            _ => {
                if self.fields.len() > MAP_KEYS {
                    let mut values = JsonShape::default();
                    for (_, shape) in &self.fields {
                        values.merge(shape);
                    }
                    notes.push(format!(
                        "{path}: {} distinct keys: map<string,…>",
                        self.fields.len()
                    ));
                    let (value, format) = values.decide(&format!("{path}.*"), notes);
                    let value = if format.is_some() {
                        ColumnType::String.into()
                    } else {
                        value
                    };
                    return (FieldType::Map(Box::new(value)), None);
                }
                if self.fields.is_empty() {
                    notes.push(format!("{path}: only empty objects seen: json"));
                    return (FieldType::Json, None);
                }
                let fields = self
                    .fields
                    .iter()
                    .map(|(name, shape)| {
                        let (ty, format) = shape.decide(&format!("{path}.{name}"), notes);
                        let ty = if format.is_some() {
                            notes.push(format!(
                                "{path}.{name}: times in a pattern inside a struct: string"
                            ));
                            ColumnType::String.into()
                        } else {
                            ty
                        };
                        StructField {
                            name: name.clone(),
                            ty,
                        }
                    })
                    .collect();
                (FieldType::Struct(fields), None)
            }
        }
    }

    fn merge(&mut self, other: &JsonShape) {
        // Used for map values only: the kinds and the value statistics that decide a type.
        self.values += other.values;
        self.nulls += other.nulls;
        self.kinds.extend(other.kinds.iter().copied());
        self.floats |= other.floats;
        merge_text(&mut self.ints, &other.ints);
        merge_text(&mut self.strings, &other.strings);
        for (key, shape) in &other.fields {
            match self.index.get(key) {
                Some(&at) => self.fields[at].1.merge(shape),
                None => {
                    self.index.insert(key.clone(), self.fields.len());
                    self.fields.push((key.clone(), shape.clone()));
                }
            }
        }
        self.objects += other.objects;
        if let Some(elements) = &other.elements {
            self.elements
                .get_or_insert_with(Default::default)
                .merge(elements);
        }
        if self.example.is_none() {
            self.example.clone_from(&other.example);
        }
    }

    /// The fields of the objects seen here, with their shapes.
    pub fn fields(&self) -> &[(String, JsonShape)] {
        &self.fields
    }

    /// Objects seen here.
    pub fn objects(&self) -> u64 {
        self.objects
    }
}

fn merge_text(mine: &mut TextTypes, other: &TextTypes) {
    if other.seen == 0 {
        return;
    }
    if mine.seen == 0 {
        *mine = other.clone();
        return;
    }
    mine.seen += other.seen;
    mine.bool_ok &= other.bool_ok;
    mine.int_ok &= other.int_ok;
    mine.int_min = mine.int_min.min(other.int_min);
    mine.int_max = mine.int_max.max(other.int_max);
    mine.decimal_ok &= other.decimal_ok;
    mine.int_digits = mine.int_digits.max(other.int_digits);
    mine.scale = mine.scale.max(other.scale);
    mine.float_ok &= other.float_ok;
    mine.iso_date_ok &= other.iso_date_ok;
    mine.date_patterns
        .retain(|p| other.date_patterns.contains(p));
    mine.iso_timestamp_ok &= other.iso_timestamp_ok;
    mine.timestamp_patterns
        .retain(|p| other.timestamp_patterns.contains(p));
    mine.numbers += other.numbers;
    if mine.first_not_number.is_none() {
        mine.first_not_number.clone_from(&other.first_not_number);
    }
}

/// What was seen of one proposed column.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SeenColumn {
    /// The proposed column.
    pub column: ColumnSpec,
    /// Non-NULL values seen.
    pub values: u64,
    /// NULL (or absent) values seen.
    pub nulls: u64,
    /// A value seen, cut to [`EXAMPLE_CHARS`].
    pub example: Option<String>,
    /// How the type was decided, when it is not plain.
    pub notes: Vec<String>,
}

/// Texts that exports write for a missing value, read as NULL when a column's other values
/// all have a type they are not (`NA` among numbers, `\N` among dates).
pub const NULL_MARKERS: [&str; 10] = [
    "NA", "N/A", "n/a", "#N/A", "null", "NULL", "Null", "None", "\\N", "-",
];

/// Columns of a text table (CSV): one [`TextTypes`] per column, NULL when a field is empty,
/// or one of [`NULL_MARKERS`] in columns whose other values are not text
/// ([`TextTable::null_values`]).
#[derive(Debug, Clone, Default)]
pub struct TextTable {
    names: Vec<String>,
    /// Per column, the types of its values but the null markers.
    types: Vec<TextTypes>,
    /// Per column, the null markers seen, and how often.
    markers: Vec<BTreeMap<&'static str, u64>>,
    nulls: Vec<u64>,
    examples: Vec<Option<String>>,
    rows: u64,
}

impl TextTable {
    /// A table of these columns.
    pub fn new(names: Vec<String>) -> Self {
        let n = names.len();
        Self {
            names,
            types: vec![TextTypes::default(); n],
            markers: vec![BTreeMap::new(); n],
            nulls: vec![0; n],
            examples: vec![None; n],
            rows: 0,
        }
    }

    /// Add one row (missing fields count as NULL).
    pub fn add_row<'a>(&mut self, fields: impl IntoIterator<Item = Option<&'a str>>) {
        self.rows += 1;
        let mut seen = 0;
        for (i, field) in fields.into_iter().enumerate().take(self.names.len()) {
            seen = i + 1;
            match field {
                Some(text) if NULL_MARKERS.contains(&text) => {
                    let marker = NULL_MARKERS.iter().find(|m| **m == text).expect("listed");
                    *self.markers[i].entry(marker).or_default() += 1;
                }
                Some(text) if !text.is_empty() => {
                    self.types[i].add(text);
                    if self.examples[i].is_none() {
                        self.examples[i] = Some(cut(text));
                    }
                }
                _ => self.nulls[i] += 1,
            }
        }
        for nulls in &mut self.nulls[seen..] {
            *nulls += 1;
        }
    }

    /// Rows added.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The null markers to read as NULL in every column (`csv.null_values`, which a source
    /// applies to all of its columns): those that only stand where the column's other values
    /// are all numbers, dates, times or booleans, and at least one such value was seen. A
    /// marker also found among text (`NA` for Namibia beside other country codes) stays text
    /// everywhere.
    pub fn null_values(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for marker in NULL_MARKERS {
            let mut typed = false;
            let mut text = false;
            for (types, markers) in self.types.iter().zip(&self.markers) {
                if !markers.contains_key(marker) {
                    continue;
                }
                match types.decide().0 {
                    ColumnType::String => text = true,
                    _ if types.seen > 0 => typed = true,
                    _ => text = true,
                }
            }
            if typed && !text {
                out.push(marker);
            }
        }
        out
    }

    /// The proposed columns (the markers of [`Self::null_values`] read as NULL, any other
    /// marker as the text it is).
    pub fn columns(&self) -> Vec<SeenColumn> {
        let null_values = self.null_values();
        self.names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let mut types = self.types[i].clone();
                let mut nulls = self.nulls[i];
                let mut example = self.examples[i].clone();
                let mut marked = Vec::new();
                for (marker, n) in &self.markers[i] {
                    if null_values.contains(marker) {
                        nulls += n;
                        marked.push(*marker);
                    } else {
                        for _ in 0..*n {
                            types.add(marker);
                        }
                        example.get_or_insert_with(|| marker.to_string());
                    }
                }
                let (ty, format, mut notes) = types.decide();
                if !marked.is_empty() {
                    notes.push(format!("{marked:?} read as NULL (csv.null_values)"));
                }
                let values = types.seen;
                SeenColumn {
                    column: ColumnSpec {
                        name: name.clone(),
                        path: None,
                        ty: ty.into(),
                        nullable: nulls > 0 || values == 0,
                        format,
                        timezone: None,
                    },
                    values,
                    nulls,
                    example,
                    notes,
                }
            })
            .collect()
    }
}

/// Columns of JSON records (JSON Lines): one per top-level key, in the order first seen.
pub fn json_columns(records: &JsonShape) -> Vec<SeenColumn> {
    let present = records.objects();
    records
        .fields()
        .iter()
        .map(|(name, shape)| {
            let mut notes = Vec::new();
            let (ty, format) = shape.decide(name, &mut notes);
            SeenColumn {
                column: ColumnSpec {
                    name: name.clone(),
                    path: None,
                    ty,
                    nullable: !shape.always_set(present),
                    format,
                    timezone: None,
                },
                values: shape.values,
                // A key repeated in a record counts each of its values.
                nulls: present.saturating_sub(shape.values),
                example: shape.example.clone(),
                notes,
            }
        })
        .collect()
}

/// The type a column of a file with types of its own (Parquet, Avro, ORC) is proposed as:
/// the narrowest schema type naming it (smaller integers as `int32`, `uint32` as `int64`,
/// `uint64` as `decimal(20,0)`, every timestamp unit and zone as `timestamp`, dictionaries as
/// their values), kept only when the typed readers read every value of it so
/// ([`crate::convert::reads`], their own contract); `None` for a type they do not read
/// (binary, intervals, unions, half floats).
pub fn field_type_of(field: &arrow_schema::Field) -> Option<FieldType> {
    let ty = proposed(field)?;
    crate::convert::reads(field.data_type(), &ty).then_some(ty)
}

/// The narrowest schema type naming `field`'s type, readable or not.
fn proposed(field: &arrow_schema::Field) -> Option<FieldType> {
    FieldType::from_field(field).or_else(|| named(field))
}

/// [`proposed`] for the types no schema type is written as.
fn named(field: &arrow_schema::Field) -> Option<FieldType> {
    use arrow_schema::DataType as D;
    Some(match field.data_type() {
        D::Int8 | D::Int16 | D::UInt8 | D::UInt16 => ColumnType::Int32.into(),
        D::UInt32 => ColumnType::Int64.into(),
        D::UInt64 => ColumnType::Decimal {
            precision: 20,
            scale: 0,
        }
        .into(),
        D::LargeUtf8 | D::Utf8View => ColumnType::String.into(),
        D::Dictionary(_, value) => {
            return proposed(&arrow_schema::Field::new("", (**value).clone(), true));
        }
        D::Timestamp(..) => ColumnType::Timestamp.into(),
        D::List(element) | D::LargeList(element) | D::FixedSizeList(element, _) => {
            FieldType::Array(Box::new(proposed(element)?))
        }
        D::Struct(fields) if !fields.is_empty() => FieldType::Struct(
            fields
                .iter()
                .map(|f| {
                    Some(StructField {
                        name: f.name().clone(),
                        ty: proposed(f)?,
                    })
                })
                .collect::<Option<_>>()?,
        ),
        D::Map(entries, _) => {
            let D::Struct(kv) = entries.data_type() else {
                return None;
            };
            let [key, value] = kv.iter().collect::<Vec<_>>()[..] else {
                return None;
            };
            if proposed(key) != Some(ColumnType::String.into()) {
                return None;
            }
            FieldType::Map(Box::new(proposed(value)?))
        }
        _ => return None,
    })
}

/// The columns of one Parquet, Avro or ORC file (`format`; wrapped whole in gzip or zstd
/// when `name` says so, as a key does), read as the converter reads it when it lands: its
/// fields from the footer or header ([`convert::file_fields`]), each a column of the type
/// that reads it (a field no column type reads is left out, with a note naming it), then its
/// rows decoded under those columns ([`convert::read`]), the values and NULLs of each
/// counted. `open` gives the file from its start (it is read twice). The readers' bounds
/// hold here too: a reader's panic fails the file as invalid, what it inflates to counts
/// against a source's default `max_decoded_bytes`, and the input read and every batch
/// decoded move `progress`, for a watchdog to abandon a reader that loops
/// ([`crate::watchdog::run_blocking`]).
///
/// [`convert::file_fields`]: crate::convert::file_fields
/// [`convert::read`]: crate::convert::read
pub fn typed_columns<R: std::io::Read + Send>(
    open: impl Fn() -> std::io::Result<R>,
    name: &str,
    format: crate::convert::InputFormat,
    progress: &crate::watchdog::Progress,
    notes: &mut Vec<String>,
) -> Result<Vec<SeenColumn>, String> {
    use crate::convert::{self, Compression, ConvertSpec};
    use arrow_array::Array;
    let spec_of = |columns: &[ColumnSpec]| {
        let mut spec = ConvertSpec::with_columns(format, columns);
        spec.compression = Compression::from_key(name).0;
        spec.max_decoded_bytes = Some(crate::config::DEFAULT_MAX_DECODED_BYTES);
        spec.progress = progress.clone();
        spec
    };
    let opened = || open().map_err(|e| format!("cannot open it: {e}"));
    let fields = convert::file_fields(opened()?, &spec_of(&[])).map_err(|e| e.to_string())?;
    let mut columns = Vec::new();
    for field in &fields {
        match field_type_of(field) {
            Some(ty) => columns.push(ColumnSpec {
                name: field.name().clone(),
                path: None,
                ty,
                nullable: true,
                format: None,
                timezone: None,
            }),
            None => notes.push(format!(
                "{}: type {} is read by no column type: left out",
                field.name(),
                field.data_type()
            )),
        }
    }
    let mut nulls = vec![0u64; columns.len()];
    let mut examples: Vec<Option<String>> = vec![None; columns.len()];
    let read = convert::read(opened()?, &spec_of(&columns), |batch| {
        for (i, column) in batch.columns().iter().enumerate().take(nulls.len()) {
            nulls[i] += column.null_count() as u64;
            if examples[i].is_none() {
                let options = arrow_cast::display::FormatOptions::default();
                if let Ok(formatter) =
                    arrow_cast::display::ArrayFormatter::try_new(column.as_ref(), &options)
                {
                    examples[i] = (0..column.len())
                        .find(|&r| column.is_valid(r))
                        .map(|r| cut(&formatter.value(r).to_string()));
                }
            }
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    let rows = read.rows;
    Ok(columns
        .into_iter()
        .zip(nulls.into_iter().zip(examples))
        .map(|(mut column, (nulls, example))| {
            column.nullable = nulls > 0 || rows == 0;
            SeenColumn {
                column,
                values: rows - nulls,
                nulls,
                example,
                notes: Vec::new(),
            }
        })
        .collect())
}

/// The records of CSV text (`delimiter`, `quote`), each a list of fields; a record cut by
/// the end of `data` (a sample of a larger file) is dropped when `partial`.
pub fn csv_records(
    data: &[u8],
    delimiter: u8,
    quote: u8,
    partial: bool,
) -> Result<Vec<Vec<String>>, String> {
    /// Fields of one record at most.
    const MAX_FIELDS: usize = 1_000_000;
    std::str::from_utf8(data).map_err(|e| {
        format!(
            "not text: invalid UTF-8 at byte {} (is it really a CSV file?)",
            e.valid_up_to()
        )
    })?;
    let mut reader = csv_core::ReaderBuilder::new()
        .delimiter(delimiter)
        .quote(quote)
        .build();
    // A record's fields never take more bytes than the input: neither buffer fills, so each
    // call returns whole records.
    let mut output = vec![0u8; data.len() + 1];
    let mut ends = vec![0usize; (data.len() + 1).min(MAX_FIELDS)];
    let mut records = Vec::new();
    let mut input = data;
    // What a record spanning two calls (the last one, at the end of the input) has so far.
    let (mut out_len, mut end_len) = (0, 0);
    loop {
        // As the csv crate calls it: the ends are offsets from the record's start.
        let (result, read, written, ended) =
            reader.read_record(input, &mut output[out_len..], &mut ends[end_len..]);
        input = &input[read..];
        out_len += written;
        end_len += ended;
        match result {
            csv_core::ReadRecordResult::Record => {
                records.push(split_fields(&output, &ends[..end_len]));
                (out_len, end_len) = (0, 0);
            }
            csv_core::ReadRecordResult::InputEmpty if input.is_empty() && partial => break,
            csv_core::ReadRecordResult::InputEmpty if input.is_empty() => {
                // The end of the file: a last record without a final newline.
                let (result, _, _, ended) =
                    reader.read_record(&[], &mut output[out_len..], &mut ends[end_len..]);
                if matches!(result, csv_core::ReadRecordResult::Record) {
                    records.push(split_fields(&output, &ends[..end_len + ended]));
                }
                break;
            }
            csv_core::ReadRecordResult::InputEmpty => {}
            csv_core::ReadRecordResult::OutputFull | csv_core::ReadRecordResult::OutputEndsFull => {
                return Err(format!("a record of more than {MAX_FIELDS} fields"));
            }
            csv_core::ReadRecordResult::End => break,
        }
    }
    Ok(records)
}

fn split_fields(bytes: &[u8], ends: &[usize]) -> Vec<String> {
    let mut start = 0;
    ends.iter()
        .map(|&end| {
            let field = String::from_utf8_lossy(&bytes[start..end]).into_owned();
            start = end;
            field
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(values: &[&str]) -> (ColumnType, Option<TimeFormat>, Vec<String>) {
        let mut t = TextTypes::default();
        for v in values {
            t.add(v);
        }
        t.decide()
    }

    fn dec(precision: u8, scale: i8) -> ColumnType {
        ColumnType::Decimal { precision, scale }
    }

    #[test]
    fn text_values_take_the_narrowest_type_that_reads_them_all() {
        assert_eq!(text(&["true", "FALSE"]).0, ColumnType::Bool);
        assert_eq!(text(&["1", "-7", "2147483647"]).0, ColumnType::Int32);
        assert_eq!(text(&["1", "2147483648"]).0, ColumnType::Int64);
        assert_eq!(text(&["1.5", "22.25", "3"]).0, dec(4, 2));
        assert_eq!(text(&["0.001"]).0, dec(3, 3));
        assert_eq!(text(&["1e3", "2.5"]).0, ColumnType::Float64);
        assert_eq!(text(&["2024-01-02"]).0, ColumnType::Date);
        assert_eq!(text(&["2024-01-02T03:04:05Z"]).0, ColumnType::Timestamp);
        assert_eq!(text(&["2024-01-02 03:04:05.25"]).0, ColumnType::Timestamp);
        assert_eq!(text(&["1", "x"]).0, ColumnType::String);
        assert_eq!(text(&["1", "true"]).0, ColumnType::String);
        assert_eq!(
            text(&["2024-01-02", "2024-01-02T00:00:00Z"]).0,
            ColumnType::String
        );
        assert_eq!(
            text(&["+1"]).0,
            ColumnType::String,
            "a sign the readers may refuse"
        );
        assert_eq!(
            text(&["007", "12"]).0,
            ColumnType::String,
            "leading zeros are kept"
        );
        assert_eq!(text(&["0e-3", "1.5"]).0, ColumnType::Float64);
    }

    #[test]
    fn integers_past_int64_are_decimals_up_to_38_digits_then_text() {
        let (ty, _, notes) = text(&["99999999999999999999"]);
        assert_eq!(ty, dec(20, 0));
        assert!(notes[0].contains("too wide"), "{notes:?}");
        let (ty, _, notes) = text(&[&"9".repeat(40)]);
        assert_eq!(ty, ColumnType::String);
        assert!(notes[0].contains("40 digits"), "{notes:?}");
    }

    #[test]
    fn dates_in_a_pattern_carry_the_format_and_name_the_others_that_read_them() {
        let (ty, format, notes) = text(&["31/12/2024", "01/02/2024"]);
        assert_eq!(ty, ColumnType::Date);
        assert_eq!(format, Some(TimeFormat::Pattern("%d/%m/%Y".into())));
        assert!(
            notes.is_empty(),
            "31/12 rules the month-first reading out: {notes:?}"
        );
        let (_, format, notes) = text(&["01/02/2024"]);
        assert_eq!(format, Some(TimeFormat::Pattern("%d/%m/%Y".into())));
        assert!(notes[0].contains("%m/%d/%Y"), "{notes:?}");
        let (ty, format, _) = text(&["02/01/2024 13:45:00"]);
        assert_eq!(ty, ColumnType::Timestamp);
        assert!(format.is_some());
    }

    #[test]
    fn a_column_of_nulls_is_a_nullable_string_with_a_note() {
        let mut t = TextTable::new(vec!["a".into(), "b".into()]);
        t.add_row([Some("1"), Some("")]);
        t.add_row([Some("2")]);
        let columns = t.columns();
        assert_eq!(columns[0].column.ty, ColumnType::Int32.into());
        assert!(!columns[0].column.nullable);
        assert_eq!(columns[1].column.ty, ColumnType::String.into());
        assert!(columns[1].column.nullable);
        assert_eq!(columns[1].nulls, 2);
        assert!(columns[1].notes[0].contains("NULLs"));
    }

    fn shape(lines: &[&str]) -> Vec<SeenColumn> {
        let mut records = JsonShape::default();
        for line in lines {
            records.add(&Json::parse(line).expect("json"));
        }
        json_columns(&records)
    }

    /// Found by fuzzing (`fuzz/artifacts/infer/`): a key repeated in one record made more
    /// values than records: the count of NULLs underflowed, and the column could be proposed
    /// non-nullable though a record lacks it.
    #[test]
    fn a_key_repeated_in_a_record_is_no_overflow() {
        let columns = shape(&[r#"{"a": 1, "a": 2}"#, r#"{"b": 1}"#]);
        assert_eq!(columns[0].column.name, "a");
        assert_eq!((columns[0].values, columns[0].nulls), (1, 1));
        assert!(columns[0].column.nullable);
    }

    #[test]
    fn json_records_keep_their_shape() {
        let columns = shape(&[
            r#"{"id": 1, "user": {"arn": "a", "mfa": true}, "tags": ["x"], "at": "2024-01-02T03:04:05Z"}"#,
            r#"{"id": 3000000000, "user": {"arn": "b"}, "tags": [], "score": 1.5}"#,
        ]);
        let types: Vec<String> = columns.iter().map(|c| c.column.ty.to_string()).collect();
        assert_eq!(
            types,
            [
                "int64",
                "struct<arn:string,mfa:bool>",
                "array<string>",
                "timestamp",
                "float64"
            ]
        );
        assert!(!columns[0].column.nullable, "id is in every record");
        assert!(columns[3].column.nullable, "at is missing from one record");
        assert!(columns[4].column.nullable);
    }

    #[test]
    fn conflicting_json_types_become_json_with_a_note() {
        let columns = shape(&[r#"{"v": 1}"#, r#"{"v": "one"}"#, r#"{"v": {"x": 1}}"#]);
        assert_eq!(columns[0].column.ty, FieldType::Json);
        assert!(
            columns[0].notes[0].contains("seen as"),
            "{:?}",
            columns[0].notes
        );
        let columns = shape(&[r#"{"a": [1, "x"]}"#]);
        assert_eq!(columns[0].column.ty.to_string(), "array<json>");
    }

    #[test]
    fn objects_with_many_keys_are_maps() {
        let record: serde_json::Map<String, serde_json::Value> = (0..=MAP_KEYS)
            .map(|i| (format!("k{i}"), serde_json::json!(i)))
            .collect();
        let line = serde_json::json!({ "counts": record }).to_string();
        let columns = shape(&[&line]);
        assert_eq!(columns[0].column.ty.to_string(), "map<string,int32>");
    }

    #[test]
    fn typed_columns_are_proposed_only_as_the_readers_read_them() {
        use arrow_schema::{DataType, Field, TimeUnit};
        let of = |dt: DataType| field_type_of(&Field::new("c", dt, true)).map(|t| t.to_string());
        assert_eq!(of(DataType::UInt16).as_deref(), Some("int32"));
        assert_eq!(of(DataType::UInt64).as_deref(), Some("decimal(20,0)"));
        assert_eq!(
            of(DataType::Timestamp(TimeUnit::Millisecond, None)).as_deref(),
            Some("timestamp")
        );
        assert_eq!(
            of(DataType::Dictionary(
                Box::new(DataType::Int32),
                Box::new(DataType::Utf8)
            ))
            .as_deref(),
            Some("string")
        );
        assert_eq!(
            of(DataType::Float16),
            None,
            "the readers do not read half floats"
        );
        assert_eq!(of(DataType::Binary), None);
    }

    #[test]
    fn csv_records_are_read_with_quotes_and_a_cut_last_record_dropped() {
        let data = b"a,b\n1,\"x,\"\"y\"\"\"\n2,z";
        let all = csv_records(data, b',', b'"', false).expect("csv");
        assert_eq!(all, [vec!["a", "b"], vec!["1", "x,\"y\""], vec!["2", "z"]]);
        let sampled = csv_records(data, b',', b'"', true).expect("csv");
        assert_eq!(sampled.len(), 2, "the last record may be cut: dropped");
        let err = csv_records(b"a,b\n\xff\xfe", b',', b'"', false).expect_err("binary");
        assert!(err.contains("invalid UTF-8 at byte 4"), "{err}");
    }

    #[test]
    fn json_strings_stay_strings_unless_they_are_times() {
        let columns = shape(&[r#"{"n": "12", "b": "true", "d": "2024-01-02"}"#]);
        let types: Vec<String> = columns.iter().map(|c| c.column.ty.to_string()).collect();
        assert_eq!(types, ["string", "string", "date"]);
    }

    #[test]
    fn null_markers_are_nulls_where_only_typed_values_stand_beside_them() {
        let table = |rows: &[&[&str]]| {
            let mut t = TextTable::new(vec!["n".into(), "d".into(), "s".into()]);
            for row in rows {
                t.add_row(row.iter().map(|f| Some(*f)));
            }
            t
        };
        let t = table(&[
            &["1", "2024-01-02", "DE"],
            &["NA", "\\N", "FR"],
            &["3", "2024-01-03", "-"],
        ]);
        // `NA` and `\N` only beside numbers and dates; `-` beside text stays text.
        assert_eq!(t.null_values(), ["NA", "\\N"]);
        let columns = t.columns();
        let seen: Vec<(String, u64, u64)> = columns
            .iter()
            .map(|c| (c.column.ty.to_string(), c.values, c.nulls))
            .collect();
        assert_eq!(
            seen,
            [
                ("int32".into(), 2, 1),
                ("date".into(), 2, 1),
                ("string".into(), 3, 0)
            ]
        );
        assert!(columns[0].column.nullable && columns[0].notes[0].contains("\"NA\""));

        // A marker also among text (Namibia's code) is text everywhere: the number column
        // holding it is text too, as before.
        let t = table(&[&["1", "2024-01-02", "NA"], &["NA", "2024-01-03", "DE"]]);
        assert!(t.null_values().is_empty());
        let types: Vec<String> = t
            .columns()
            .iter()
            .map(|c| c.column.ty.to_string())
            .collect();
        assert_eq!(types, ["string", "date", "string"]);

        // A column of markers only has nothing typed beside them: text.
        let t = table(&[&["NA", "2024-01-02", "x"]]);
        assert!(t.null_values().is_empty());
    }
}
