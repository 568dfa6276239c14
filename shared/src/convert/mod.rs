//! Conversion of one CSV, JSON Lines, Parquet, Avro or ORC object, possibly gzip- or
//! zstd-compressed, into one Parquet file, with the row count and column sums that let a
//! caller check the result against the source.
//!
//! [`convert`] streams: the input is decompressed, parsed and encoded one batch at a
//! time, and the Parquet writer closes a row group whenever it reaches
//! [`ConvertSpec::row_group_rows`] rows or 64 MiB, keeping its pages in memory up to 4 MiB
//! and in a temporary file beyond (see [`pages`]), so memory stays bounded whatever the
//! object's size. Input is untrusted: malformed bytes end in a [`ConvertError`] that
//! says where (1-based physical line of the decompressed file, column), never in a
//! panic; [`ConvertSpec::max_decoded_bytes`] stops decompression bombs, and
//! [`ConvertSpec::max_record_bytes`] and [`ConvertSpec::batch_bytes`] bound what one
//! record and one batch hold, so that an endless line cannot exhaust memory.
//!
//! A value is stored exactly or refused: where the Arrow readers would round a decimal,
//! truncate a fraction, sub-microsecond digits or a time of day, read an overflowing
//! float as infinity, keep the last of a JSON key given twice, or read `"abc"x` in CSV
//! as `abcx`, the conversion fails naming the line and column instead. By default a bad row
//! fails the whole object, so an output is always the whole source; under
//! [`BadRows::Reject`] the rows whose error is confined to them are set aside instead, with
//! their line, error and bytes, in [`ConvertStats::rejects`] (see [`reject`] for which
//! errors those are).

// Each format is a folder of its own; this module only routes an object to its decoder
// ([`Decoding::run`]) and the decoded batches to the writer.
//
// Text formats: `csv/` (delimited text; `csv/header.rs` matches a header's names),
// `json/` (JSON Lines, and JSON documents through `json/documents.rs`), sharing the exact
// readings of `value.rs`. Columnar formats: `columnar/` (Parquet, Avro, ORC, with the
// projection and casts they share). The Parquet writer: `writer/` (the encoder, its
// columns and pages). Around them: the spec (`spec.rs`), errors (`error.rs`), the input's
// decompression (`input.rs`), bad rows (`reject.rs`), counts and sums (`stats.rs`),
// partitioned output (`partition/`).
mod columnar;
mod csv;
mod error;
mod input;
mod json;
mod lines;
pub mod partition;
pub mod progress;
pub mod reject;
mod spec;
mod stats;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;
mod value;
mod writer;

pub use columnar::arrays::reads;
pub(crate) use columnar::typed;
use columnar::{arrays, avro, orc, parquet_input};
pub use error::ConvertError;
pub use input::decoder;
pub use json::documents::JsonRecords;
pub use partition::{Budget, PartFile, Routed, convert_partitioned};
pub use reject::{BadRows, Rejected};
pub use spec::*;
pub use stats::{ConvertStats, Ignored, MAX_IGNORED_PATHS, ParseSumError, SumValue};
use writer::{Encoder, columns};

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::io::{BufRead, Read, Write};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, Schema, SchemaRef};
use parquet::basic::{Encoding, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterPropertiesBuilder};
use parquet::schema::types::ColumnPath;
use serde::{Deserialize, Serialize};

use crate::schema::{ColumnSpec, ColumnType, FieldType};
use columns::Columns;
/// An Arrow error's message without the "Parser error: "-style prefix of its Display.
fn arrow_message(e: ArrowError) -> String {
    match e {
        ArrowError::ParseError(m) | ArrowError::CsvError(m) | ArrowError::JsonError(m) => m,
        e => e.to_string(),
    }
}

/// `schema` with every field nullable: inputs are decoded against it so that NULLs in
/// non-nullable columns are reported by [`null_violation`] with their location.
fn nullable(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}

/// The first `(row, column)` of `batch` holding a NULL where `schema` forbids one.
fn null_violation(batch: &RecordBatch, schema: &Schema) -> Option<(usize, usize)> {
    schema
        .fields()
        .iter()
        .zip(batch.columns())
        .enumerate()
        .filter(|(_, (field, array))| !field.is_nullable() && array.null_count() > 0)
        .filter_map(|(col, (_, array))| Some(((0..array.len()).find(|&r| array.is_null(r))?, col)))
        .min()
}

/// The records of the JSON documents ([`InputFormat::Json`]) of `input`, each its text, cut
/// as the converter cuts them (`options` says where the records are; the envelope's members
/// are put in each). A bad value (not an object, or without its records array) or a record
/// past `max_record_bytes` is an `Err` and the records go on; an `Err` that puts the structure
/// in doubt (the input ends inside a value, a bracket that does not match) is the last item.
/// For inference, which reads the first records of a sample.
pub fn json_records<R: BufRead>(
    input: R,
    options: &JsonDocuments,
    max_record_bytes: usize,
) -> JsonRecords<R> {
    json::documents::records(input, options, max_record_bytes)
}

/// A source of decoded record batches, checked against the spec's schema.
trait Batches {
    /// The next batch (possibly of no rows, when every row of it was rejected); `None` at
    /// the end of the input.
    fn next_batch(&mut self) -> Result<Option<RecordBatch>, ConvertError>;

    /// The rows rejected since the last call (under [`BadRows::Reject`]).
    fn take_rejects(&mut self) -> Vec<Rejected> {
        Vec::new()
    }

    /// The values of unknown fields dropped so far (under [`UnknownFields::Ignore`]).
    fn take_ignored(&mut self) -> Ignored {
        Ignored::default()
    }
}

/// `read`, with a panic inside it turned into a [`ConvertError::Parse`]: for readers of
/// untrusted files known to panic on some corrupt ones (`orc-rust` unwraps a block that does
/// not decompress). The reader is dropped with the error, so no state it left half-done is
/// used again. Needs `panic = "unwind"` (the workspace's release profile says why).
fn guarded<T>(read: impl FnOnce() -> Result<T, ConvertError>) -> Result<T, ConvertError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        Err(ConvertError::parse(
            None,
            None,
            format!("not a valid file: its reader failed on it ({what})"),
        ))
    })
}

/// [`Batches`] whose every call is [`guarded`].
struct Guarded<'a>(Box<dyn Batches + 'a>);

impl Batches for Guarded<'_> {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>, ConvertError> {
        guarded(|| self.0.next_batch())
    }

    fn take_rejects(&mut self) -> Vec<Rejected> {
        self.0.take_rejects()
    }

    fn take_ignored(&mut self) -> Ignored {
        self.0.take_ignored()
    }
}

/// Converts `input` as `spec` describes into a Parquet file written to `output`.
///
/// Returns the number of rows, the sums of [`ConvertSpec::sum_columns`] and byte
/// counts. A zero-row input still gives a valid Parquet file with the full schema.
/// On error, `output` holds an incomplete file and must be discarded.
///
/// # Errors
///
/// [`ConvertError::InvalidSpec`] before any input is read; [`ConvertError::Parse`],
/// [`ConvertError::Decompress`], [`ConvertError::TooLarge`] or [`ConvertError::Io`] for
/// the input; [`ConvertError::Encode`] for the output.
///
/// ```
/// use tidemark::{convert::*, schema::*};
///
/// let columns: Vec<ColumnSpec> = serde_json::from_str(
///     r#"[{"name": "id", "type": "int64", "nullable": false},
///         {"name": "price", "type": "decimal(12,2)"}]"#,
/// )?;
/// let mut spec = ConvertSpec::new(InputFormat::Csv(CsvOptions::default()), arrow_schema(&columns));
/// spec.sum_columns = vec!["price".into()];
///
/// let mut parquet = Vec::new();
/// let stats = convert(&b"id,price\n1,0.10\n2,0.20\n"[..], &spec, &mut parquet)?;
/// assert_eq!(stats.rows, 2);
/// assert_eq!(stats.sums["price"].to_string(), "0.30");
/// assert_eq!(&parquet[..4], b"PAR1");
///
/// let err = convert(&b"id,price\n1,0.10\nx,0.20\n"[..], &spec, Vec::new()).unwrap_err();
/// assert_eq!(err.to_string(), r#"line 3: column "id": cannot parse "x" as int64"#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn convert<R: Read + Send, W: Write + Send>(
    input: R,
    spec: &ConvertSpec,
    output: W,
) -> Result<ConvertStats, ConvertError> {
    decode_into(input, spec, Ok, Encoder::new(output, spec)?)
}

/// [`decode_with`] into `encoder`, which is then closed: on this thread, or with
/// [`ConvertSpec::threads`] above 1, this thread decoding and the columns of each batch
/// encoded on it and the others (see `columns`): two batches are encoded at once and one
/// more waits at most, and compressed input is inflated at most [`input::AHEAD_BYTES`]
/// ahead, so memory grows by a few batches, not by the file.
fn decode_into<R: Read + Send, W: Write + Send>(
    input: R,
    spec: &ConvertSpec,
    mut keep: impl FnMut(RecordBatch) -> Result<RecordBatch, ConvertError>,
    mut encoder: Encoder<'_, W>,
) -> Result<ConvertStats, ConvertError> {
    let (mut stats, encoder) = if spec.threads < 2 {
        let stats = decode_with(input, spec, &mut keep, |batch| encoder.write(batch))?;
        (stats, encoder)
    } else if spec.compression == Compression::None {
        columns::encode_beside(encoder, spec.threads, &|| false, |each| {
            decode_with(input, spec, &mut keep, each)
        })?
    } else {
        // The input is inflated ahead by threads that have nothing to encode (see `input`).
        let decoding = Decoding::new(spec)?;
        let meter = input::Meter::watching(spec.progress.clone());
        let ahead = input::open_ahead(input, spec, &meter)?;
        columns::encode_beside(encoder, spec.threads, &|| ahead.work(), |each| {
            decoding.run(ahead.reader(), &meter, &mut keep, each)
        })?
    };
    stats.row_groups = encoder.close()?;
    Ok(stats)
}

/// A row filter of [`convert_split`]: for each decoded batch, the rows to keep and the rows
/// to set aside (`None`: none).
pub type Split<'a> =
    dyn FnMut(&RecordBatch) -> Result<(RecordBatch, Option<RecordBatch>), ConvertError> + 'a;

/// [`convert`], with each decoded batch passed through `split` before anything else: only
/// the rows it keeps are counted (rows, sums) and written to `output`; the rows it sets
/// aside are written as a second Parquet file to `aside` (same schema and settings, row
/// groups closed at 8 MiB), or discarded when `aside` is `None`. Each file's columns are
/// encoded as [`convert`] chooses, from its own first rows. Row-level bookmark keys use
/// it (see [`crate::bookmark`]).
///
/// With [`ConvertSpec::threads`] above 1, `output`'s columns are encoded on all the
/// threads as in [`convert`] (the same bytes whatever the number); `split` and `aside`'s
/// writer run on the decoding thread.
pub fn convert_split<R: Read + Send, W: Write + Send, A: Write + Send>(
    input: R,
    spec: &ConvertSpec,
    output: W,
    split: &mut Split<'_>,
    aside: Option<A>,
) -> Result<ConvertStats, ConvertError> {
    let encoder = Encoder::new(output, spec)?;
    let mut aside = aside
        .map(|a| Encoder::with_row_group_bytes(a, spec, 8 << 20))
        .transpose()?;
    let keep = |batch: RecordBatch| {
        let (kept, set_aside) = split(&batch)?;
        if let (Some(e), Some(b)) = (aside.as_mut(), set_aside) {
            e.write(&b)?;
        }
        Ok(kept)
    };
    let stats = decode_into(input, spec, keep, encoder)?;
    if let Some(e) = aside {
        e.close()?;
    }
    Ok(stats)
}

/// Decode `input` as [`convert`] does and count its rows and sums, writing nothing: the
/// honest recount of a source object that reconciliation compares with the ledger.
pub fn count<R: Read + Send>(input: R, spec: &ConvertSpec) -> Result<ConvertStats, ConvertError> {
    // Lineage columns are neither counted nor summed: they need no object version here.
    let mut spec = spec.clone();
    spec.lineage.clear();
    decode(input, &spec, |_| Ok(()))
}

/// Decode `input` as [`convert`] does and hand each batch (in the spec's output schema) to
/// `each`, writing nothing: schema inference counts the values of each column with it.
pub fn read<R: Read + Send>(
    input: R,
    spec: &ConvertSpec,
    each: impl FnMut(&RecordBatch) -> Result<(), ConvertError>,
) -> Result<ConvertStats, ConvertError> {
    decode(input, spec, each)
}

/// The top-level fields of a Parquet, Avro or ORC file (`spec`'s format and compression),
/// as its reader in [`convert`] reads them: from the footer or the header, no row read. Read
/// as a conversion reads the file: the decompressed input counts against
/// [`ConvertSpec::max_decoded_bytes`] and moves the spec's progress, and a panic of the
/// reader fails the file as invalid.
pub fn file_fields<R: Read + Send>(
    input: R,
    spec: &ConvertSpec,
) -> Result<arrow_schema::Fields, ConvertError> {
    let meter = input::Meter::watching(spec.progress.clone());
    let reader = input::open(input, spec, &meter)?;
    guarded(|| match spec.format {
        InputFormat::Parquet => parquet_input::fields(reader),
        InputFormat::Avro => avro::fields(reader, spec),
        InputFormat::Orc => orc::fields(reader),
        _ => Err(ConvertError::invalid_spec(
            "only Parquet, Avro and ORC files carry their fields",
        )),
    })
}

/// Rows and sums of `columns` in a Parquet file (an output, read back).
pub fn tally_parquet(
    body: bytes::Bytes,
    columns: &[String],
) -> Result<(u64, BTreeMap<String, SumValue>), ConvertError> {
    use arrow_array::RecordBatchReader;
    let reader =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(body)?.build()?;
    let mut tally = BatchTally::new(&reader.schema(), columns)?;
    for batch in reader {
        tally.add(&batch.map_err(|e| ConvertError::Encode {
            message: e.to_string(),
        })?)?;
    }
    Ok(tally.finish())
}

/// Rows and sums of `columns` over batches read back from Parquet, in the order they come:
/// what [`tally_parquet`] counts, for a caller that reads the batches itself (reconcile
/// streams an output's sum columns by ranged reads, one row group at a time). The batches
/// may hold only some of the file's columns, as long as they hold the summed ones.
pub struct BatchTally {
    rows: u64,
    sums: stats::Sums,
}

impl BatchTally {
    /// A tally of `columns`, each a summable column of `schema` (the batches' schema).
    pub fn new(schema: &Schema, columns: &[String]) -> Result<Self, ConvertError> {
        let types = column_types(schema)?;
        Ok(Self {
            rows: 0,
            sums: stats::Sums::new(schema, &types, columns)?,
        })
    }

    /// Count the rows of `batch` and add its values.
    pub fn add(&mut self, batch: &RecordBatch) -> Result<(), ConvertError> {
        self.rows += batch.num_rows() as u64;
        self.sums.add(batch)
    }

    /// The rows and the sums by column.
    pub fn finish(self) -> (u64, BTreeMap<String, SumValue>) {
        (self.rows, self.sums.finish())
    }
}

fn decode<R: Read + Send>(
    input: R,
    spec: &ConvertSpec,
    each: impl FnMut(&RecordBatch) -> Result<(), ConvertError>,
) -> Result<ConvertStats, ConvertError> {
    decode_with(input, spec, Ok, each)
}

/// [`decode`], each batch first passed through `keep` (what it returns is counted and given
/// to `each`).
fn decode_with<R: Read + Send>(
    input: R,
    spec: &ConvertSpec,
    keep: impl FnMut(RecordBatch) -> Result<RecordBatch, ConvertError>,
    each: impl FnMut(&RecordBatch) -> Result<(), ConvertError>,
) -> Result<ConvertStats, ConvertError> {
    let decoding = Decoding::new(spec)?;
    let meter = input::Meter::watching(spec.progress.clone());
    let reader = input::open(input, spec, &meter)?;
    decoding.run(reader, &meter, keep, each)
}

/// A decoding whose spec has been checked, before any input is read.
struct Decoding<'s> {
    spec: &'s ConvertSpec,
    types: Vec<FieldType>,
    sums: stats::Sums,
}

impl<'s> Decoding<'s> {
    fn new(spec: &'s ConvertSpec) -> Result<Self, ConvertError> {
        if spec.batch_rows == 0 || spec.batch_bytes == 0 || spec.max_record_bytes == 0 {
            return Err(ConvertError::invalid_spec(
                "batch_rows, batch_bytes and max_record_bytes must be positive",
            ));
        }
        let types = column_types(&spec.schema)?;
        let sums = stats::Sums::new(&spec.schema, &types, &spec.sum_columns)?;
        let output = spec.output_schema();
        let mut names = HashSet::new();
        if let Some(name) = output
            .fields()
            .iter()
            .map(|f| f.name())
            .find(|n| !names.insert(*n))
        {
            return Err(ConvertError::invalid_spec(format!(
                "duplicate column {name:?} (a schema column, the rescued column or a lineage column)"
            )));
        }
        Ok(Self { spec, types, sums })
    }

    /// Decodes the byte stream `reader` (counted by `meter`): see [`decode_with`].
    fn run(
        mut self,
        reader: impl BufRead,
        meter: &input::Meter,
        mut keep: impl FnMut(RecordBatch) -> Result<RecordBatch, ConvertError>,
        mut each: impl FnMut(&RecordBatch) -> Result<(), ConvertError>,
    ) -> Result<ConvertStats, ConvertError> {
        let (spec, types) = (self.spec, self.types);
        let mut batches: Box<dyn Batches + '_> = match spec.format {
            InputFormat::Csv(options)
                if options.header && spec.csv_columns == CsvColumns::ByName =>
            {
                Box::new(csv::header::open(reader, options, spec)?)
            }
            InputFormat::Csv(options) => {
                let types = scalar_types(&spec.schema, "CSV")?;
                Box::new(csv::CsvBatches::new(reader, options, spec, types)?)
            }
            InputFormat::JsonLines => Box::new(json::JsonBatches::new(reader, spec)?),
            InputFormat::Json => Box::new(json::JsonBatches::documents(reader, spec)?),
            InputFormat::Regex => Box::new(json::JsonBatches::regex(reader, spec)?),
            // The columnar readers panic on some corrupt files (parquet-rs and arrow-rs on
            // pages whose levels or lengths lie, found by fuzzing): a panic fails the file
            // as invalid, naming it, as any bad input.
            InputFormat::Parquet => {
                let opened = guarded(|| parquet_input::batches(reader, spec, &types))?;
                Box::new(Guarded(Box::new(opened)))
            }
            InputFormat::Avro => {
                let opened = guarded(|| avro::batches(reader, spec, &types))?;
                Box::new(Guarded(Box::new(opened)))
            }
            InputFormat::Orc => {
                let opened = guarded(|| orc::batches(reader, spec, &types))?;
                Box::new(Guarded(Box::new(opened)))
            }
        };
        drop(types);
        let decoded = spec.decoded_schema();
        let output = spec.output_schema();
        let mut lineage = LineageColumns::new(spec);
        let mut rows = 0;
        let mut rescued_rows = 0;
        let mut rejects = Vec::new();
        while let Some(batch) = batches.next_batch()? {
            rejects.extend(batches.take_rejects());
            let batch = with_rescue_column(batch, &decoded)?;
            if spec.rescues() {
                let rescued = batch.column(decoded.fields().len() - 1);
                rescued_rows += (rescued.len() - rescued.null_count()) as u64;
            }
            let batch = lineage.append(batch, &output)?;
            spec.progress.tick(batch.num_rows() as u64);
            let batch = keep(batch)?;
            rows += batch.num_rows() as u64;
            self.sums.add(&batch)?;
            each(&batch)?;
        }
        rejects.extend(batches.take_rejects());
        Ok(ConvertStats {
            rows,
            sums: self.sums.finish(),
            bytes_read: meter.read(),
            bytes_decoded: meter.decoded(),
            row_groups: 0,
            rejects,
            rescued_rows,
            ignored: batches.take_ignored().trimmed(),
        })
    }
}

/// `batch` with the rescued column of `decoded` (all NULL) when its decoder gives none.
fn with_rescue_column(
    batch: RecordBatch,
    decoded: &SchemaRef,
) -> Result<RecordBatch, ConvertError> {
    if batch.num_columns() == decoded.fields().len() {
        return Ok(batch);
    }
    let mut columns = batch.columns().to_vec();
    for field in &decoded.fields()[columns.len()..] {
        columns.push(arrow_array::new_null_array(
            field.data_type(),
            batch.num_rows(),
        ));
    }
    RecordBatch::try_new(decoded.clone(), columns).map_err(|e| ConvertError::Encode {
        message: format!("cannot add the rescued column: {e}"),
    })
}

/// The lineage columns of the batches of one object: the same values for every row, and
/// row numbers counting on from batch to batch.
struct LineageColumns<'s> {
    spec: &'s ConvertSpec,
    rows: i64,
}

impl<'s> LineageColumns<'s> {
    fn new(spec: &'s ConvertSpec) -> Self {
        Self { spec, rows: 0 }
    }

    /// `batch` (of the decoded schema) with the lineage columns of `output` after it.
    fn append(
        &mut self,
        batch: RecordBatch,
        output: &SchemaRef,
    ) -> Result<RecordBatch, ConvertError> {
        use arrow_array::{ArrayRef, Int64Array, StringArray, TimestampMicrosecondArray};
        let first = self.rows;
        let n = batch.num_rows();
        self.rows += n as i64;
        if self.spec.lineage.is_empty() {
            return Ok(batch);
        }
        let object = self.spec.object.as_ref();
        let text = |value: Option<&str>| -> ArrayRef {
            Arc::new(StringArray::from_iter(std::iter::repeat_n(value, n)))
        };
        let mut columns = batch.columns().to_vec();
        for (_, lineage) in &self.spec.lineage {
            columns.push(match lineage {
                Lineage::Key => text(object.map(|o| o.key.as_str())),
                Lineage::VersionId => text(object.and_then(|o| o.version_id.as_deref())),
                Lineage::Etag => text(object.map(|o| o.etag.as_str())),
                Lineage::LastModified => Arc::new(
                    TimestampMicrosecondArray::from_iter(std::iter::repeat_n(
                        object.map(|o| o.last_modified_ms.saturating_mul(1000)),
                        n,
                    ))
                    .with_timezone("+00:00"),
                ),
                Lineage::RowNumber => Arc::new(Int64Array::from_iter_values(
                    (first + 1)..=(first + n as i64),
                )),
            });
        }
        RecordBatch::try_new(output.clone(), columns).map_err(|e| ConvertError::Encode {
            message: if object.is_none() {
                format!("cannot add the lineage columns (no object version was given): {e}")
            } else {
                format!("cannot add the lineage columns: {e}")
            },
        })
    }
}

/// The type of every field, rejecting schemas the readers cannot honour.
fn column_types(schema: &Schema) -> Result<Vec<FieldType>, ConvertError> {
    if schema.fields().is_empty() {
        return Err(ConvertError::invalid_spec("the schema has no columns"));
    }
    let mut names = HashSet::new();
    schema
        .fields()
        .iter()
        .map(|f| {
            if !names.insert(f.name()) {
                return Err(ConvertError::invalid_spec(format!(
                    "duplicate column {:?}",
                    f.name()
                )));
            }
            FieldType::from_field(f).ok_or_else(|| {
                ConvertError::invalid_spec(format!(
                    "column {:?} has unsupported type {}",
                    f.name(),
                    f.data_type()
                ))
            })
        })
        .collect()
}

/// The scalar type of every field, for a reader of scalar columns only (`format` names it).
fn scalar_types(schema: &Schema, format: &str) -> Result<Vec<ColumnType>, ConvertError> {
    column_types(schema)?
        .into_iter()
        .zip(schema.fields())
        .map(|(ty, field)| {
            ty.scalar().ok_or_else(|| {
                ConvertError::invalid_spec(format!(
                    "column {:?} is {ty}: {format} input is read into scalar columns only",
                    field.name()
                ))
            })
        })
        .collect()
}
