//! The Parquet writer: one file's encoder ([`Encoder`]), each column's encoding chosen from
//! the first rows, its columns encoded on several threads ([`columns`]) and its pages kept in
//! memory or a temporary file ([`pages`]). Every format's decoder writes through it.

pub(super) mod columns;
pub(super) mod pages;

use super::*;

/// The Parquet writer of [`convert`], made when the first [`CHOICE_MIN_ROWS`] rows have
/// arrived so that each column's encoding is chosen from them (see [`column_choices`]).
/// Batches are closed by bytes, so one batch of wide rows can hold fewer than that: the
/// first batches wait in `pending` (a few MiB at most) until there are enough rows.
pub(in crate::convert) struct Encoder<'s, W: Write + Send> {
    spec: &'s ConvertSpec,
    /// The file's columns: the spec's output schema, or fewer (a partition's file).
    schema: SchemaRef,
    /// Row groups closed at this many bytes (the spec's, but for [`convert_split`]'s rows
    /// set aside).
    row_group_bytes: usize,
    output: Option<W>,
    file: Option<Columns<W>>,
    pending: Vec<RecordBatch>,
    /// The writer's settings, when they were chosen for it (from other rows than its own:
    /// the files of one partitioned object share the object's first rows' choices).
    chosen: Option<WriterProperties>,
}

impl<'s, W: Write + Send> Encoder<'s, W> {
    /// Checks what of the spec the writer uses, before any input is read.
    pub(in crate::convert) fn new(output: W, spec: &'s ConvertSpec) -> Result<Self, ConvertError> {
        Self::with_row_group_bytes(output, spec, spec.row_group_bytes)
    }

    pub(in crate::convert) fn with_row_group_bytes(
        output: W,
        spec: &'s ConvertSpec,
        row_group_bytes: usize,
    ) -> Result<Self, ConvertError> {
        Self::for_schema(output, spec, spec.output_schema(), row_group_bytes)
    }

    /// A writer of files of `schema` (the spec's output columns, or some of them), with the
    /// spec's settings.
    pub(in crate::convert) fn for_schema(
        output: W,
        spec: &'s ConvertSpec,
        schema: SchemaRef,
        row_group_bytes: usize,
    ) -> Result<Self, ConvertError> {
        writer_builder(spec, row_group_bytes)?;
        Ok(Self {
            spec,
            schema,
            row_group_bytes,
            output: Some(output),
            file: None,
            pending: Vec::new(),
            chosen: None,
        })
    }

    /// The settings of the file, chosen before its first rows (see [`Self::choose`]).
    pub(in crate::convert) fn with_properties(mut self, properties: WriterProperties) -> Self {
        self.chosen = Some(properties);
        self
    }

    /// The settings a file of the spec's would have after `first`, its first rows.
    pub(in crate::convert) fn choose(
        spec: &ConvertSpec,
        row_group_bytes: usize,
        first: &RecordBatch,
    ) -> Result<WriterProperties, ConvertError> {
        Ok(column_choices(writer_builder(spec, row_group_bytes)?, first, spec).build())
    }

    /// Ends the row group in progress (the rows before the file exists go in its first).
    pub(in crate::convert) fn end_row_group(&mut self) -> Result<(), ConvertError> {
        if let Some(file) = self.file.as_mut() {
            file.end_row_group()?;
        }
        Ok(())
    }

    /// Makes the writer, its columns' encodings chosen from the pending batches, and writes
    /// them.
    pub(in crate::convert) fn start(&mut self) -> Result<&mut Columns<W>, ConvertError> {
        if let Some(output) = self.output.take() {
            let pending = std::mem::take(&mut self.pending);
            let properties = match self.chosen.take() {
                Some(chosen) => chosen,
                None if pending.is_empty() => {
                    writer_builder(self.spec, self.row_group_bytes)?.build()
                }
                None => {
                    let first = arrow_select::concat::concat_batches(&self.schema, &pending)
                        .map_err(|e| ConvertError::Encode {
                            message: e.to_string(),
                        })?;
                    Self::choose(self.spec, self.row_group_bytes, &first)?
                }
            };
            let file = self.file.insert(Columns::new(
                output,
                self.schema.clone(),
                properties,
                self.spec.page_memory_bytes,
            )?);
            for batch in &pending {
                file.write(batch)?;
            }
        }
        Ok(self.file.as_mut().expect("made above"))
    }

    pub(in crate::convert) fn write(&mut self, batch: &RecordBatch) -> Result<(), ConvertError> {
        if let Some(file) = self.file.as_mut() {
            file.write(batch)?;
            return Ok(());
        }
        if batch.num_rows() == 0 {
            return Ok(()); // choose from rows, not from a batch whose rows were all rejected
        }
        self.pending.push(batch.clone());
        if self.chosen.is_some()
            || self
                .pending
                .iter()
                .map(RecordBatch::num_rows)
                .sum::<usize>()
                >= CHOICE_MIN_ROWS
        {
            self.start()?;
        }
        Ok(())
    }

    /// Finishes the file; returns its number of row groups.
    pub(in crate::convert) fn close(mut self) -> Result<usize, ConvertError> {
        self.start()?;
        Ok(self.file.expect("made above").close()?)
    }
}

impl<W: Write + Send> columns::Sink for Encoder<'_, W> {
    type Output = W;

    fn write_before_file(&mut self, batch: &RecordBatch) -> Result<bool, ConvertError> {
        if self.file.is_some() {
            return Ok(false);
        }
        self.write(batch)?;
        Ok(true)
    }

    fn file(&mut self) -> Option<&mut Columns<W>> {
        self.file.as_mut()
    }
}

/// Rows below which the first values say too little to turn a column's dictionary off.
pub(in crate::convert) const CHOICE_MIN_ROWS: usize = 1_000;

/// The dictionary page limit of the Parquet writer (its default, 1 MiB): a column whose
/// dictionary grows past it falls back to plain encoding for the rest of the row group.
pub(in crate::convert) const DICTIONARY_LIMIT: f64 = (1 << 20) as f64;

/// `properties` with each column's encoding chosen from `batch`, the first rows of the
/// file. A dictionary is turned off where the first values predict that within the first
/// half of a row group it would pass its page limit — a dictionary that fills up costs the
/// time to build it and then falls back to plain encoding anyway (ids, times, free text) —
/// or take more than `spec.dictionary_bytes` of memory while it is built: the writer
/// looks every value up in its dictionary, and a dictionary larger than the CPU's cache
/// makes each lookup wait on memory (50,000 product codes: 15% of a file's CPU;
/// BENCHMARKS.md, "Dictionaries that fit the cache"). It is left on
/// where values repeat within that bound (codes, categories, countries). For an
/// integer, date or timestamp column without a dictionary, `DELTA_BINARY_PACKED` is chosen
/// when the differences between neighbours take at most half the bits of the values (ids
/// counting up, times in order, small numbers), which gives zstd far fewer bytes.
pub(in crate::convert) fn column_choices(
    mut properties: WriterPropertiesBuilder,
    batch: &RecordBatch,
    spec: &ConvertSpec,
) -> WriterPropertiesBuilder {
    if batch.num_rows() < CHOICE_MIN_ROWS {
        return properties;
    }
    let mut leaves = Vec::new();
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        leaf_columns(vec![field.name().clone()], column, &mut leaves);
    }
    for (path, column) in leaves {
        let Some(profile) = profile(column.as_ref()) else {
            continue;
        };
        let expected = profile.expected_distinct(spec.row_group_rows / 2);
        let building = expected * (profile.value_bytes + profile.entry_overhead);
        if expected * profile.value_bytes <= DICTIONARY_LIMIT
            && building <= spec.dictionary_bytes as f64
        {
            continue;
        }
        let path = ColumnPath::new(path);
        properties = properties.set_column_dictionary_enabled(path.clone(), false);
        if let Some((delta_bits, bits)) = profile.delta_bits
            && delta_bits * 2 <= bits
        {
            properties = properties.set_column_encoding(path, Encoding::DELTA_BINARY_PACKED);
        }
    }
    properties
}

/// The leaf columns of `column` (named `path` in the Parquet file) with their values: a
/// scalar column is its own leaf; a struct's leaves are its fields' (`a.b`), a list's its
/// elements' (`a.list.element`), a map's its keys' and values' (`a.key_value.key`), as
/// arrow-rs names them in the file.
pub(in crate::convert) fn leaf_columns(
    path: Vec<String>,
    column: &ArrayRef,
    out: &mut Vec<(Vec<String>, ArrayRef)>,
) {
    use arrow_array::cast::AsArray;
    use arrow_schema::DataType;
    let child = |name: &str| {
        let mut p = path.clone();
        p.push(name.to_owned());
        p
    };
    match column.data_type() {
        DataType::Struct(fields) => {
            for (field, values) in fields.iter().zip(column.as_struct().columns()) {
                leaf_columns(child(field.name()), values, out);
            }
        }
        DataType::List(element) => {
            let mut p = child("list");
            p.push(element.name().clone());
            leaf_columns(p, column.as_list::<i32>().values(), out);
        }
        DataType::Map(entries, _) => {
            let map = column.as_map();
            let DataType::Struct(kv) = entries.data_type() else {
                return;
            };
            let base = child(entries.name());
            for (field, values) in kv.iter().zip([map.keys(), map.values()]) {
                let mut p = base.clone();
                p.push(field.name().clone());
                leaf_columns(p, values, out);
            }
        }
        _ => out.push((path, column.clone())),
    }
}

/// Distinct values expected among `rows` values drawn like the `count` seen, of which
/// `distinct` differed: the number of equally likely values `v` for which `count` draws give
/// `distinct` different ones on average (`v (1 - e^(-count/v))`), then the same for `rows`.
pub(in crate::convert) fn expected_distinct(count: usize, distinct: usize, rows: usize) -> f64 {
    let (count, distinct, rows) = (count as f64, distinct as f64, rows as f64);
    if distinct >= count {
        return rows;
    }
    let drawn = |v: f64, n: f64| v * -(-n / v).exp_m1();
    let (mut low, mut high) = (distinct, 1e15_f64);
    for _ in 0..200 {
        let middle = (low * high).sqrt();
        if drawn(middle, count) < distinct {
            low = middle;
        } else {
            high = middle;
        }
    }
    drawn(high, rows)
}

/// What [`column_choices`] reads from a column's first values.
pub(in crate::convert) struct Profile {
    /// Non-NULL values.
    count: usize,
    /// Distinct values among them.
    distinct: usize,
    /// Bytes a distinct value takes in a dictionary page, on average.
    value_bytes: f64,
    /// Bytes the writer keeps for each distinct value beside the value itself while it
    /// builds the dictionary: a hash slot (≈ 16 bytes: 9 per slot, the table between
    /// half and seven eighths full), and for strings their offsets in the page (16).
    entry_overhead: f64,
    /// For integer-like columns: bits of the spread of neighbours' differences, and bits
    /// of the type.
    delta_bits: Option<(u32, u32)>,
    /// Distinct values among the first half of the values, among the second half, and in
    /// both.
    halves: (usize, usize, usize),
}

impl Profile {
    /// Distinct values expected among the first `rows`: the larger of two estimates.
    /// [`expected_distinct`] takes the values for draws from a fixed set, which holds for
    /// codes and categories but not for values that keep arriving new with a few repeats
    /// (times in order with several rows per second, ids of sessions): the first rows of a
    /// CloudTrail file have 1,123 distinct times in 1,352, which that model reads as about
    /// 3,500 times in all. The second estimate counts the set by capture and recapture
    /// (Lincoln–Petersen): the halves' distinct values multiplied, over those the halves
    /// share. Fresh values share almost none, so the set is as large as the rows. Used only
    /// when each half has at least [`HALF_DISTINCT`] values, so that a sorted column of a
    /// few values (one in each half) is not taken for fresh values.
    pub(in crate::convert) fn expected_distinct(&self, rows: usize) -> f64 {
        let model = expected_distinct(self.count, self.distinct, rows);
        let (first, second, both) = self.halves;
        if first < HALF_DISTINCT || second < HALF_DISTINCT {
            return model;
        }
        if both == 0 {
            return rows as f64;
        }
        let set = first as f64 * second as f64 / both as f64;
        let drawn = set * -(-(rows as f64) / set).exp_m1();
        model.max(drawn.min(rows as f64))
    }
}

/// Distinct values each half of a column's first values must have for
/// [`Profile::expected_distinct`] to count the set by capture and recapture.
pub(in crate::convert) const HALF_DISTINCT: usize = 32;

/// The [`Profile`] of `column` (`None`: a type whose dictionary is left on, or no values).
pub(in crate::convert) fn profile(column: &dyn arrow_array::Array) -> Option<Profile> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{
        Date32Type, Decimal128Type, Float64Type, Int32Type, Int64Type, TimestampMicrosecondType,
    };

    /// The difference of two integers, and the bits of their type.
    type Delta<'a, T> = (&'a dyn Fn(T, T) -> i128, u32);

    /// A dictionary entry's hash slot, and a string's offsets (see [`Profile`]).
    const SLOT: f64 = 16.0;
    const OFFSETS: f64 = 16.0;

    /// The profile of `values` (about `expected` of them), each taking `size(value)` bytes
    /// in a dictionary page and `entry_overhead` more while the dictionary is built. The
    /// set of distinct values is sized for them all and hashed with foldhash: with the
    /// standard library's SipHash and growing as it went, profiling the first batch of
    /// orders CSV (8,192 rows, 11 columns) took 37 M instructions, 4.8% of converting
    /// 100,000 rows.
    pub(in crate::convert) fn of<T: std::hash::Hash + Eq + Copy>(
        values: impl Iterator<Item = T>,
        expected: usize,
        size: impl Fn(T) -> usize,
        entry_overhead: f64,
        delta: Option<Delta<'_, T>>,
    ) -> Option<Profile> {
        use foldhash::HashMapExt;
        // Each value's halves: 1 for the first, 2 for the second.
        let mut seen = foldhash::HashMap::<T, u8>::with_capacity(expected);
        let (mut count, mut bytes, mut previous) = (0usize, 0usize, None);
        let (mut low, mut high) = (i128::MAX, i128::MIN);
        let half = expected / 2;
        for value in values {
            let bit = if count < half { 1 } else { 2 };
            count += 1;
            match seen.entry(value) {
                std::collections::hash_map::Entry::Occupied(mut e) => *e.get_mut() |= bit,
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(bit);
                    bytes += size(value);
                }
            }
            if let (Some((difference, _)), Some(p)) = (delta, previous) {
                let d = difference(value, p);
                (low, high) = (low.min(d), high.max(d));
            }
            previous = Some(value);
        }
        if count == 0 {
            return None;
        }
        let spread = high.saturating_sub(low).max(0) as u128;
        let mut halves = (0, 0, 0);
        for &bits in seen.values() {
            halves.0 += usize::from(bits & 1 != 0);
            halves.1 += usize::from(bits & 2 != 0);
            halves.2 += usize::from(bits == 3);
        }
        Some(Profile {
            halves,
            count,
            distinct: seen.len(),
            value_bytes: bytes as f64 / seen.len() as f64,
            entry_overhead,
            delta_bits: delta.map(|(_, bits)| (u128::BITS - spread.leading_zeros(), bits)),
        })
    }
    let values = column.len() - column.null_count();
    let wide = |a: i64, b: i64| i128::from(a) - i128::from(b);
    let narrow = |a: i32, b: i32| i128::from(a) - i128::from(b);
    if let Some(a) = column.as_string_opt::<i32>() {
        // A string in a dictionary page: its bytes after a 4-byte length.
        of(
            a.iter().flatten(),
            values,
            |s: &str| s.len() + 4,
            SLOT + OFFSETS,
            None,
        )
    } else if let Some(a) = column.as_primitive_opt::<Int64Type>() {
        of(a.iter().flatten(), values, |_| 8, SLOT, Some((&wide, 64)))
    } else if let Some(a) = column.as_primitive_opt::<TimestampMicrosecondType>() {
        of(a.iter().flatten(), values, |_| 8, SLOT, Some((&wide, 64)))
    } else if let Some(a) = column.as_primitive_opt::<Int32Type>() {
        of(a.iter().flatten(), values, |_| 4, SLOT, Some((&narrow, 32)))
    } else if let Some(a) = column.as_primitive_opt::<Date32Type>() {
        of(a.iter().flatten(), values, |_| 4, SLOT, Some((&narrow, 32)))
    } else if let Some(a) = column.as_primitive_opt::<Float64Type>() {
        of(
            a.iter().flatten().map(f64::to_bits),
            values,
            |_| 8,
            SLOT,
            None,
        )
    } else if let Some(a) = column.as_primitive_opt::<Decimal128Type>() {
        of(a.iter().flatten(), values, |_| 16, SLOT, None)
    } else {
        None
    }
}

/// The writer settings every output shares (`max_bytes`: row group size in bytes at most).
pub(in crate::convert) fn writer_builder(
    spec: &ConvertSpec,
    max_bytes: usize,
) -> Result<WriterPropertiesBuilder, ConvertError> {
    if spec.row_group_rows == 0 {
        return Err(ConvertError::invalid_spec(
            "row_group_rows must be positive",
        ));
    }
    if max_bytes == 0 {
        return Err(ConvertError::invalid_spec(
            "row_group_bytes must be positive",
        ));
    }
    if spec.page_bytes == 0 {
        return Err(ConvertError::invalid_spec("page_bytes must be positive"));
    }
    let level = ZstdLevel::try_new(spec.zstd_level)
        .map_err(|e| ConvertError::invalid_spec(format!("zstd_level {}: {e}", spec.zstd_level)))?;
    let mut builder = WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(level))
        .set_max_row_group_row_count(Some(spec.row_group_rows))
        .set_max_row_group_bytes(Some(max_bytes))
        .set_data_page_size_limit(spec.page_bytes)
        .set_dictionary_enabled(true)
        .set_statistics_enabled(EnabledStatistics::Page);
    // A JSON text's minimum and maximum select nothing a reader would ask for, and comparing
    // every value of long texts took 2-3% of a CloudTrail conversion: none are written.
    let mut texts = Vec::new();
    for field in spec.output_schema().fields() {
        json_leaves(vec![field.name().clone()], field, &mut texts);
    }
    for path in texts {
        builder =
            builder.set_column_statistics_enabled(ColumnPath::new(path), EnabledStatistics::None);
    }
    Ok(builder)
}

/// The leaf paths of the `json` columns and fields in `field` (named `path`), as arrow-rs
/// names them in the file (see [`leaf_columns`]).
pub(in crate::convert) fn json_leaves(
    path: Vec<String>,
    field: &arrow_schema::Field,
    out: &mut Vec<Vec<String>>,
) {
    use arrow_schema::DataType;
    let child = |name: &str| {
        let mut p = path.clone();
        p.push(name.to_owned());
        p
    };
    match field.data_type() {
        DataType::Struct(fields) => {
            for f in fields {
                json_leaves(child(f.name()), f, out);
            }
        }
        DataType::List(element) => {
            let mut p = child("list");
            p.push(element.name().clone());
            json_leaves(p, element, out);
        }
        DataType::Map(entries, _) => {
            if let DataType::Struct(kv) = entries.data_type() {
                for f in kv {
                    let mut p = child(entries.name());
                    p.push(f.name().clone());
                    json_leaves(p, f, out);
                }
            }
        }
        _ if FieldType::from_field(field) == Some(FieldType::Json) => out.push(path),
        _ => {}
    }
}
