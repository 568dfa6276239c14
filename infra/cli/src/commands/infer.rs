//! `infer PATH…`: propose a source from sample files — its format, CSV dialect and schema —
//! and prove the proposal by converting every sampled file under it.
//!
//! The files are local files or folders (read recursively); past `--sample-files`, files
//! spread evenly over the sorted listing are read, and of each text file at most its share of
//! `--sample-bytes` (whole records only). Types come from `tidemark::infer`: text values take
//! the narrowest type that reads them all, JSON keeps its shape, Parquet, Avro and ORC files
//! give their own schema. Then every sampled file is converted, whole, with the converter
//! ingest uses, under the proposed source: a file that fails naming a column widens that
//! column (a scalar to `string`, a nested one to `json`) with a note saying why, and the
//! files are converted again, until all convert with no row rejected and no value rescued,
//! or a failure names no column (then the answer says so, exit 1).

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;
use tidemark::config::Config;
use tidemark::convert::{Compression, InputFormat, decoder};
use tidemark::infer::{JsonShape, SeenColumn, TextTable, TextTypes, csv_records, json_columns};
use tidemark::schema::{ColumnType, FieldType};

use super::convert::{ConvertArgs, Shown, convert_file};
use super::print_json;
use crate::render::Table;
use crate::{Error, Out};

/// Whether CSV files start with a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Header {
    /// Decide from the first record: a header when its fields are distinct, non-empty texts
    /// where the records below hold numbers, dates or booleans (or when every column is text).
    Auto,
    /// The first record is a header.
    Yes,
    /// There is no header: columns are named `column_1`, `column_2`, ….
    No,
}

/// Arguments of `infer`.
#[derive(Debug, Clone, clap::Args)]
pub struct InferArgs {
    /// Files or folders of sample files (folders are read recursively), or `s3://bucket/prefix`
    /// on the chosen backend (`--backend local`: the folder of that bucket under `--root`;
    /// `aws`: S3 from the AWS environment).
    #[arg(
        value_name = "PATH",
        required_unless_present = "rescued",
        conflicts_with = "rescued"
    )]
    pub paths: Vec<PathBuf>,
    /// Propose columns for what a source rescued instead of sample files: read the rescued
    /// column (`_rescued_data`) of the committed outputs of the objects whose commits counted
    /// rescued rows, propose the additive change that gives those fields columns (new
    /// columns, new struct fields, path columns), and check it by converting the sampled
    /// objects' committed versions under it. Opens the backend and reads the sources document.
    /// The next steps: deploy the change, `tidemark plan`, `backfill --stale-config`.
    #[arg(long, value_name = "SOURCE", conflicts_with = "source")]
    pub rescued: Option<String>,
    /// The format, when the files' extensions do not say (`.csv`, `.tsv`, `.jsonl`, `.json`,
    /// `.ndjson`, `.parquet`, `.avro`, `.orc`, each optionally `.gz` / `.zst`).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// The id of the proposed source.
    #[arg(long, default_value = "new_source")]
    pub source_id: String,
    /// Compare with this source of the sources document (`--config`): convert the sampled
    /// files under its current contract (which fail, which rescue values, and why), and
    /// propose only additive changes (the columns the files have that it lacks, nullable).
    #[arg(long, value_name = "ID")]
    pub source: Option<String>,
    /// The landing bucket of the proposed source.
    #[arg(long, default_value = "landing")]
    pub bucket: String,
    /// The key prefix of the proposed source (default: the source id and `/`).
    #[arg(long)]
    pub prefix: Option<String>,
    /// The lake bucket of the proposed source's output.
    #[arg(long, default_value = "lake")]
    pub lake: String,
    /// Files read at most, spread evenly over the sorted listing.
    #[arg(long, default_value_t = 1000)]
    pub sample_files: usize,
    /// Bytes of text read at most, shared among the sampled files (decompressed; whole
    /// records only). Every sampled file is still converted whole to check the proposal.
    #[arg(long, default_value_t = 64 << 20)]
    pub sample_bytes: u64,
    /// Keys listed at most under an `s3://bucket/prefix` path (1,000 per request); the sample
    /// is spread over what was listed.
    #[arg(long, default_value_t = 100_000)]
    pub list_max: usize,
    /// CSV field delimiter (default: `,`, or a tab for `.tsv` files).
    #[arg(long)]
    pub delimiter: Option<char>,
    /// Whether CSV files start with a header.
    #[arg(long, value_enum, default_value_t = Header::Auto)]
    pub header: Header,
}

/// Input formats `infer` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Delimited text.
    Csv,
    /// One JSON object per line.
    Jsonl,
    /// JSON documents: one value, a top-level array, or values back to back (with or without
    /// whitespace); the records are each value's array of objects when it holds one.
    Json,
    /// Parquet.
    Parquet,
    /// Avro Object Container Files.
    Avro,
    /// ORC.
    Orc,
}

impl Format {
    /// The format a file's name says, after its compression suffix.
    fn of(name: &str) -> Option<Self> {
        let (_, stem) = Compression::from_key(name);
        let ext = stem.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
        Some(match ext.as_str() {
            "csv" | "tsv" | "txt" => Format::Csv,
            "jsonl" | "json" | "ndjson" => Format::Jsonl,
            "parquet" | "pq" => Format::Parquet,
            "avro" => Format::Avro,
            "orc" => Format::Orc,
            _ => return None,
        })
    }
}

/// One sampled file.
#[derive(Debug, Clone, Serialize)]
pub struct SampledFile {
    /// The path, as found.
    pub path: String,
    /// Its size on disk.
    pub bytes: u64,
    /// Records read for inference (rows of typed files).
    pub records: u64,
    /// Rows its conversion under the final proposal wrote (`None`: it did not convert).
    pub converted_rows: Option<u64>,
}

/// What `infer` found.
#[derive(Debug, Clone, Serialize)]
pub struct InferReport {
    /// The proposed source, as a block of the sources document.
    pub source: SourceBlock,
    /// Files found under the paths.
    pub files_found: usize,
    /// The files read.
    pub files: Vec<SampledFile>,
    /// Per column, what was seen.
    pub columns: Vec<SeenColumn>,
    /// Notes not tied to one column (duplicate header names, columns left out, widenings).
    pub notes: Vec<String>,
    /// The comparison with `--source`, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compared: Option<Comparison>,
    /// Did every sampled file convert under the proposal, nothing rejected or rescued?
    pub checked: bool,
    /// Why not, when not.
    pub error: Option<String>,
}

fn files_under(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Error> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        entries.sort();
        for path in entries {
            let hidden = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.') || n.starts_with('_'));
            if hidden {
                continue;
            }
            if path.is_dir() {
                walk(&path, out)?;
            } else {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    for path in paths {
        if path.is_dir() {
            walk(path, &mut out).map_err(|e| format!("cannot list {}: {e}", path.display()))?;
        } else if path.is_file() {
            out.push(path.clone());
        } else {
            return Err(format!("{}: no such file or folder", path.display()).into());
        }
    }
    Ok(out)
}

/// `n` of `items` (at least one), spread evenly over them.
fn spread<T: Clone>(items: Vec<T>, n: usize) -> Vec<T> {
    let n = n.max(1);
    if items.len() <= n {
        return items;
    }
    (0..n).map(|i| items[i * items.len() / n].clone()).collect()
}

/// `path` decompressed as its name says.
fn decompressed(path: &Path) -> Result<Box<dyn Read + Send>, String> {
    let file = File::open(path).map_err(|e| format!("cannot open it: {e}"))?;
    let compression = match Compression::from_key(&name_of(path)) {
        (Compression::None, _) => sniffed(path).unwrap_or(Compression::None),
        (named, _) => named,
    };
    decoder(BufReader::new(file), compression).map_err(|e| e.to_string())
}

/// The compression a file's first bytes say (gzip's or zstd's magic number), for files whose
/// names say none: Firehose writes CloudWatch Logs data gzipped under a name without `.gz`.
fn sniffed(path: &Path) -> Option<Compression> {
    let mut magic = [0u8; 4];
    File::open(path).ok()?.read_exact(&mut magic).ok()?;
    match magic {
        [0x1f, 0x8b, ..] => Some(Compression::Gzip),
        [0x28, 0xb5, 0x2f, 0xfd] => Some(Compression::Zstd),
        _ => None,
    }
}

fn name_of(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The first `limit` bytes of `path` (decompressed), and whether there was more: cut
/// anywhere, for JSON documents (one CloudTrail file is one line).
fn raw_sample(path: &Path, limit: u64) -> Result<(Vec<u8>, bool), String> {
    let mut data = Vec::new();
    decompressed(path)?
        .take(limit + 1)
        .read_to_end(&mut data)
        .map_err(|e| format!("cannot read it: {e}"))?;
    let partial = data.len() as u64 > limit;
    data.truncate(limit as usize);
    Ok((data, partial))
}

/// One JSON record's `text` parsed and added to `records`; `at` names it in errors (`FILE:
/// line 3`), `hint` follows "not a JSON object".
fn add_record(records: &mut JsonShape, text: &str, at: &str, hint: &str) -> Result<(), String> {
    let value = tidemark::infer::Json::parse(text).map_err(|e| format!("{at}: not JSON: {e}"))?;
    if !matches!(value, tidemark::infer::Json::Object(_)) {
        return Err(format!("{at}: not a JSON object{hint}"));
    }
    records.add(&value);
    Ok(())
}

/// Where the records of JSON documents are, as proposed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct JsonBlock {
    /// The key of each value's array of records.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records: Option<String>,
    /// The value's members read into each record.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub envelope: Vec<String>,
}

/// The records array of a JSON value, if it holds one: an object with exactly one member
/// that is an array of objects (nulls allowed) and every other member a scalar or an array of
/// scalars (the envelope: CloudWatch Logs' `logGroup` beside its `logEvents`, a CloudTrail
/// file's lone `Records`). The key and the scalar members.
fn records_array(value: &tidemark::infer::Json) -> Option<JsonBlock> {
    use tidemark::infer::Json;
    let Json::Object(members) = value else {
        return None;
    };
    let mut records = None;
    let mut envelope = Vec::new();
    for (key, v) in members {
        match v {
            Json::Array(items)
                if !items.is_empty()
                    && items
                        .iter()
                        .all(|i| matches!(i, Json::Object(_) | Json::Null))
                    && items.iter().any(|i| matches!(i, Json::Object(_))) =>
            {
                if records.replace(key.clone()).is_some() {
                    return None;
                }
            }
            Json::Array(items)
                if items
                    .iter()
                    .all(|i| !matches!(i, Json::Object(_) | Json::Array(_))) => {}
            Json::Object(_) | Json::Array(_) => return None,
            _ => envelope.push(key.clone()),
        }
    }
    Some(JsonBlock {
        records: Some(records?),
        envelope,
    })
}

/// The key of a value whose text starts `{"KEY":[`: the records array of a first value too
/// large for the sample (a CloudTrail file), found from its first bytes.
fn leading_array_key(sample: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(&sample[..sample.len().min(4096)]).ok()?;
    let rest = text.trim_start().strip_prefix('{')?.trim_start();
    let rest = rest.strip_prefix('"')?;
    let end = rest.find('"')?;
    let (key, after) = (&rest[..end], &rest[end + 1..]);
    if key.contains('\\') {
        return None;
    }
    let after = after.trim_start().strip_prefix(':')?.trim_start();
    after.starts_with('[').then(|| key.to_string())
}

/// How the JSON files read: as JSON Lines (every line of every sample one object, and more
/// than one value somewhere or none holding a records array) or as JSON documents, with the
/// records array the first value proposes.
fn json_layout(
    files: &[PathBuf],
    share: u64,
    explicit: Option<Format>,
) -> Result<(Format, JsonBlock), String> {
    let mut lines_read = true;
    let mut values = 0;
    let mut first: Option<Vec<u8>> = None;
    for file in files {
        let (data, partial) =
            raw_sample(file, share).map_err(|e| format!("{}: {e}", file.display()))?;
        let mut text = &data[..];
        if partial {
            text = &text[..text.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1)];
        }
        for line in text.split(|&b| b == b'\n') {
            let line = std::str::from_utf8(line).unwrap_or("\u{0}");
            if line.trim().is_empty() {
                continue;
            }
            values += 1;
            match tidemark::infer::Json::parse(line.trim_end_matches('\r')) {
                Ok(tidemark::infer::Json::Object(_)) => {}
                _ => lines_read = false,
            }
        }
        if partial && text.is_empty() {
            lines_read = false; // one line longer than the sample: not JSON Lines to sample
        }
        first.get_or_insert(data);
        if explicit.is_some() {
            break; // the format is given: the first file's value says where the records are
        }
    }
    let Some(sample) = first else {
        return Ok((Format::Jsonl, JsonBlock::default()));
    };
    let top_array = sample.trim_ascii_start().first() == Some(&b'[');
    let block = if top_array {
        None
    } else {
        let none = tidemark::convert::JsonDocuments::default();
        match tidemark::convert::json_records(&sample[..], &none, usize::MAX).next() {
            Some(Ok(text)) => std::str::from_utf8(&text)
                .ok()
                .and_then(|t| tidemark::infer::Json::parse(t).ok())
                .and_then(|v| records_array(&v)),
            _ => leading_array_key(&sample).map(|records| JsonBlock {
                records: Some(records),
                envelope: Vec::new(),
            }),
        }
    };
    let format = match explicit {
        Some(f) => f,
        None if lines_read && (values > files.len() || block.is_none()) => Format::Jsonl,
        None => Format::Json,
    };
    Ok((
        format,
        if format == Format::Json {
            block.unwrap_or_default()
        } else {
            JsonBlock::default()
        },
    ))
}

/// Up to `limit` decompressed bytes of `path`, and whether the file goes on past them.
fn text_sample(path: &Path, limit: u64) -> Result<(Vec<u8>, bool), String> {
    let (mut data, partial) = raw_sample(path, limit)?;
    if partial {
        // Whole lines only: a cut inside a record, or inside a character, is no sample.
        let end = data.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        data.truncate(end);
    }
    Ok((data, partial))
}

/// Names for a header's fields: empty ones become `column_N`, repeated ones get `_2`, `_3`.
fn header_names(fields: &[String], notes: &mut Vec<String>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (i, field) in fields.iter().enumerate() {
        let base = if field.trim().is_empty() {
            notes.push(format!("header field {} is empty: column_{}", i + 1, i + 1));
            format!("column_{}", i + 1)
        } else {
            field.trim().to_string()
        };
        let mut name = base.clone();
        let mut n = 2;
        while names.contains(&name) {
            name = format!("{base}_{n}");
            n += 1;
        }
        if name != base {
            notes.push(format!("header name {base:?} repeated: {name}"));
        }
        names.push(name);
    }
    names
}

/// Is the first record a header? Distinct non-empty texts over records whose columns are
/// not all text, or over text columns (nothing tells them apart: a header is the safer
/// reading, as data rows lost to it show up as a missing row count when converted).
fn looks_like_header(records: &[Vec<String>]) -> bool {
    let Some(first) = records.first() else {
        return false;
    };
    let mut seen = std::collections::HashSet::new();
    let texts = first.iter().all(|f| {
        let mut t = TextTypes::default();
        t.add(f);
        !f.trim().is_empty() && t.decide().0 == ColumnType::String && seen.insert(f.as_str())
    });
    if !texts {
        return false;
    }
    if records.len() == 1 {
        return true;
    }
    let width = first.len();
    let mut table = TextTable::new((0..width).map(|i| format!("c{i}")).collect());
    for record in &records[1..] {
        table.add_row(record.iter().map(|f| Some(f.as_str())));
    }
    let columns = table.columns();
    columns
        .iter()
        .any(|c| c.column.ty != ColumnType::String.into())
        || columns
            .iter()
            .all(|c| c.column.ty == ColumnType::String.into())
}

/// The proposal from the sampled files.
struct Proposal {
    format: Format,
    compression: Option<&'static str>,
    json: JsonBlock,
    delimiter: u8,
    header: bool,
    /// CSV: the texts read as NULL ([`TextTable::null_values`]).
    null_values: Vec<&'static str>,
    columns: Vec<SeenColumn>,
    records: Vec<u64>,
    notes: Vec<String>,
}

/// The bytes sampled from each of `files` files: `sample_bytes` shared, 64 KiB at least.
fn sample_share(sample_bytes: u64, files: usize) -> u64 {
    (sample_bytes / files.max(1) as u64).max(64 << 10)
}

/// The proposal for `files` in `format`; `json`: where a JSON document's records are (see
/// [`json_layout`]).
fn propose(
    args: &InferArgs,
    files: &[PathBuf],
    format: Format,
    json: JsonBlock,
) -> Result<Proposal, String> {
    let mut notes = Vec::new();
    let share = sample_share(args.sample_bytes, files.len());
    let mut records_read = Vec::new();
    match format {
        Format::Csv => {
            let tsv = files
                .iter()
                .all(|f| name_of(f).to_ascii_lowercase().contains(".tsv"));
            let delimiter = match args.delimiter {
                Some(c) if c.is_ascii() => c as u8,
                Some(c) => return Err(format!("the delimiter {c:?} is not one ASCII character")),
                None if tsv => b'\t',
                None => b',',
            };
            // One file's records at a time: the table keeps per-column statistics only.
            let mut table: Option<(TextTable, Vec<String>, bool, usize)> = None;
            for file in files {
                let (data, partial) =
                    text_sample(file, share).map_err(|e| format!("{}: {e}", file.display()))?;
                let records = csv_records(&data, delimiter, b'"', partial)
                    .map_err(|e| format!("{}: {e}", file.display()))?;
                drop(data);
                if records.is_empty() {
                    records_read.push(0);
                    continue;
                }
                let (t, first, header, width) = table.get_or_insert_with(|| {
                    let header = match args.header {
                        Header::Yes => true,
                        Header::No => false,
                        Header::Auto => looks_like_header(&records),
                    };
                    let width = records[0].len();
                    let names = if header {
                        header_names(&records[0], &mut notes)
                    } else {
                        (1..=width).map(|i| format!("column_{i}")).collect()
                    };
                    (TextTable::new(names), records[0].clone(), header, width)
                });
                let body = if *header {
                    if records[0] != *first {
                        return Err(format!(
                            "{}: its header differs from the first file's ({:?} against {:?}): \
                             infer the two shapes apart, or give `--header no`",
                            file.display(),
                            records[0],
                            first
                        ));
                    }
                    &records[1..]
                } else {
                    &records[..]
                };
                for (i, record) in body.iter().enumerate() {
                    if record.len() != *width {
                        return Err(format!(
                            "{}: record {} has {} fields, the first has {width}",
                            file.display(),
                            i + 1 + usize::from(*header),
                            record.len()
                        ));
                    }
                    t.add_row(record.iter().map(|f| Some(f.as_str())));
                }
                records_read.push(body.len() as u64);
            }
            let (table, _, header, _) = table
                .ok_or("every sampled file is empty: there is nothing to infer a schema from")?;
            if table.rows() == 0 {
                notes.push("no record below the header: every column is a nullable string".into());
            }
            let null_values = table.null_values();
            if !null_values.is_empty() {
                notes.push(format!(
                    "{null_values:?} stand where numbers, dates or booleans do, and never among \
                     text: csv.null_values reads them as NULL in every column"
                ));
            }
            Ok(Proposal {
                format,
                compression: None,
                json: JsonBlock::default(),
                delimiter,
                header,
                null_values,
                columns: table.columns(),
                records: records_read,
                notes,
            })
        }
        Format::Jsonl => {
            let mut records = JsonShape::default();
            for file in files {
                let (data, partial) =
                    text_sample(file, share).map_err(|e| format!("{}: {e}", file.display()))?;
                let text = std::str::from_utf8(&data).map_err(|e| {
                    format!(
                        "{}: not text: invalid UTF-8 at byte {}",
                        file.display(),
                        e.valid_up_to()
                    )
                })?;
                let mut lines: Vec<&str> = text.split('\n').collect();
                if partial {
                    lines.pop(); // cut by the sample
                }
                let mut read = 0;
                for (i, line) in lines.iter().enumerate() {
                    let line = line.trim_end_matches('\r');
                    if line.trim().is_empty() {
                        continue;
                    }
                    let at = format!("{}: line {}", file.display(), i + 1);
                    let hint = " (JSON Lines holds one object per line)";
                    add_record(&mut records, line, &at, hint)?;
                    read += 1;
                }
                records_read.push(read);
            }
            if records.objects() == 0 {
                return Err(
                    "every sampled file is empty: there is nothing to infer a schema from".into(),
                );
            }
            Ok(Proposal {
                format,
                compression: None,
                json: JsonBlock::default(),
                delimiter: b',',
                header: false,
                null_values: Vec::new(),
                columns: json_columns(&records),
                records: records_read,
                notes,
            })
        }
        Format::Json => {
            match &json.records {
                Some(key) => notes.push(format!(
                    "each value holds an array of objects, {key:?}: its elements are the records \
                     (json.records){}",
                    if json.envelope.is_empty() {
                        String::new()
                    } else {
                        format!(
                            ", and the value's {:?} are read into each (json.envelope)",
                            json.envelope
                        )
                    }
                )),
                None => notes
                    .push("each JSON value (each element of a top-level array) is a record".into()),
            }
            let options = tidemark::convert::JsonDocuments {
                records: json.records.clone(),
                envelope: json.envelope.clone(),
            };
            let mut records = JsonShape::default();
            for file in files {
                let (data, partial) =
                    raw_sample(file, share).map_err(|e| format!("{}: {e}", file.display()))?;
                let mut read = 0;
                let mut cut =
                    tidemark::convert::json_records(&data[..], &options, usize::MAX).peekable();
                while let Some(item) = cut.next() {
                    let text = match item {
                        Ok(text) => text,
                        // The sample ends inside a value: what came before it is the sample.
                        Err(_) if partial && cut.peek().is_none() => break,
                        Err(e) => return Err(format!("{}: {e}", file.display())),
                    };
                    let text = std::str::from_utf8(&text).map_err(|e| {
                        format!("{}: not text: invalid UTF-8 ({e})", file.display())
                    })?;
                    let at = format!("{}: record {}", file.display(), read + 1);
                    add_record(&mut records, text, &at, "")?;
                    read += 1;
                }
                records_read.push(read);
            }
            if records.objects() == 0 {
                return Err(
                    "no record in the sampled files: there is nothing to infer a schema from"
                        .into(),
                );
            }
            Ok(Proposal {
                format,
                compression: None,
                json,
                delimiter: b',',
                header: false,
                null_values: Vec::new(),
                columns: json_columns(&records),
                records: records_read,
                notes,
            })
        }
        Format::Parquet | Format::Avro | Format::Orc => {
            let mut merged: Vec<SeenColumn> = Vec::new();
            for (n, file) in files.iter().enumerate() {
                let at = |e: String| format!("{}: {e}", file.display());
                let typed = match format {
                    Format::Parquet => InputFormat::Parquet,
                    Format::Orc => InputFormat::Orc,
                    _ => InputFormat::Avro,
                };
                let (columns, file_notes) = typed_columns_watched(file, typed).map_err(at)?;
                notes.extend(file_notes);
                records_read.push(
                    columns
                        .iter()
                        .map(|c| c.values + c.nulls)
                        .max()
                        .unwrap_or(0),
                );
                for column in columns {
                    match merged
                        .iter_mut()
                        .find(|m| m.column.name == column.column.name)
                    {
                        Some(m) => {
                            m.values += column.values;
                            m.nulls += column.nulls;
                            m.column.nullable |= column.column.nullable;
                            if m.column.ty != column.column.ty {
                                m.notes.push(format!(
                                    "{} in {}, {} before: json",
                                    column.column.ty,
                                    file.display(),
                                    m.column.ty
                                ));
                                m.column.ty = FieldType::Json;
                            }
                        }
                        None => {
                            let mut column = column;
                            if n > 0 {
                                column.column.nullable = true;
                                column.notes.push("not in every file".into());
                            }
                            merged.push(column);
                        }
                    }
                }
            }
            Ok(Proposal {
                format,
                compression: None,
                json: JsonBlock::default(),
                delimiter: b',',
                header: false,
                null_values: Vec::new(),
                columns: merged,
                records: records_read,
                notes,
            })
        }
    }
}

/// The proposed source, as a block of the sources document (fields in the document's order).
#[derive(Debug, Clone, Serialize)]
pub struct SourceBlock {
    /// The id.
    pub source_id: String,
    /// The preset for AWS's log the files' names say they are, when every sampled file
    /// converts under it: the block is then the preset and the places.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preset: Option<&'static str>,
    /// Landing bucket.
    pub bucket: String,
    /// Key prefix.
    pub prefix: String,
    /// Input format (none with a preset: the preset's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
    /// The compression, when the files' names do not say theirs (`gzip` files named without
    /// `.gz`, as Firehose names them): `auto`, the default, reads the names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<&'static str>,
    /// CSV options.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub csv: Option<CsvBlock>,
    /// Where a JSON document's records are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub json: Option<JsonBlock>,
    /// The columns (none with a preset: the preset's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schema: Vec<tidemark::schema::ColumnSpec>,
    /// Where the Parquet goes.
    pub output: OutputBlock,
}

/// CSV options of the proposal.
#[derive(Debug, Clone, Serialize)]
pub struct CsvBlock {
    /// Field delimiter, when not `,`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delimiter: Option<String>,
    /// Is there a header?
    pub header: bool,
    /// `name` with a header: columns matched by the header's names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub columns: Option<&'static str>,
    /// Texts read as NULL in every column (`NA` where numbers stand).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub null_values: Vec<&'static str>,
}

/// Output of the proposal.
#[derive(Debug, Clone, Serialize)]
pub struct OutputBlock {
    /// Lake bucket.
    pub bucket: String,
    /// Output prefix.
    pub prefix: String,
}

/// The key prefix of the proposed source: `--prefix`, or the source id and `/`.
fn proposed_prefix(args: &InferArgs) -> String {
    args.prefix
        .clone()
        .unwrap_or_else(|| format!("{}/", args.source_id))
}

fn source_block(args: &InferArgs, p: &Proposal) -> SourceBlock {
    let prefix = proposed_prefix(args);
    SourceBlock {
        source_id: args.source_id.clone(),
        preset: None,
        bucket: args.bucket.clone(),
        prefix: prefix.clone(),
        format: Some(p.format),
        compression: p.compression,
        csv: (p.format == Format::Csv).then(|| CsvBlock {
            delimiter: (p.delimiter != b',').then(|| (p.delimiter as char).to_string()),
            header: p.header,
            columns: p.header.then_some("name"),
            null_values: p.null_values.clone(),
        }),
        json: (p.format == Format::Json && p.json != JsonBlock::default()).then(|| p.json.clone()),
        schema: p.columns.iter().map(|c| c.column.clone()).collect(),
        output: OutputBlock {
            bucket: args.lake.clone(),
            prefix,
        },
    }
}

/// The widening of a column that failed to convert: scalars to `string`, nested types to
/// `json`; `None` when it is one of those already.
fn widened(ty: &FieldType) -> Option<FieldType> {
    match ty {
        FieldType::Scalar(ColumnType::String) | FieldType::Json => None,
        FieldType::Scalar(_) => Some(ColumnType::String.into()),
        _ => Some(FieldType::Json),
    }
}

/// `file` converted, output discarded, under source `id` of `config`, as the object
/// `<prefix><file name>` would be.
fn convert_sample(
    config: &Config,
    id: &str,
    prefix: &str,
    file: &Path,
) -> Result<super::convert::ConvertReport, Error> {
    convert_file(
        config,
        &ConvertArgs {
            source: id.to_string(),
            key: Some(format!("{prefix}{}", name_of(file))),
            rejects: Shown::First(0),
            input: file.to_path_buf(),
            output: None,
        },
    )
}

/// Loosen the column `failure` names so that the value it failed on reads: a wider type
/// ([`widened`]), or NULLs allowed when the converter found one. `false` when the failure
/// names no proposed column or the column is as loose as it gets: then it is the answer.
fn relax(columns: &mut [SeenColumn], failure: &super::convert::Failure) -> bool {
    let Some(c) = failure.column.as_deref().and_then(|name| {
        let top = name.split(['.', '[']).next().unwrap_or(name);
        columns.iter_mut().find(|c| c.column.name == top)
    }) else {
        return false;
    };
    if let Some(ty) = widened(&c.column.ty) {
        c.notes.push(format!(
            "{} did not read every value ({}): {ty}",
            c.column.ty, failure.message
        ));
        c.column.ty = ty;
        c.column.format = None;
        return true;
    }
    if !c.column.nullable && failure.message.contains("NULL") {
        c.column.nullable = true;
        c.notes.push(format!(
            "NULL found by the converter: nullable ({})",
            failure.message
        ));
        return true;
    }
    false
}

/// The columns of the Parquet, Avro or ORC file at `path` ([`tidemark::infer::typed_columns`]),
/// read under the watchdog as a landed object is: a reader that loops on the file is
/// abandoned after `TIDEMARK_STALL_SECONDS` (default 60) without progress, and the command
/// fails naming the file. Its notes are returned with its columns.
fn typed_columns_watched(
    path: &Path,
    format: InputFormat,
) -> Result<(Vec<SeenColumn>, Vec<String>), String> {
    let path = path.to_path_buf();
    let name = name_of(&path);
    tidemark::watchdog::run_blocking(tidemark::watchdog::stall_limit(i64::MAX), move |p| {
        let mut notes = Vec::new();
        let open = || File::open(&path);
        let columns = tidemark::infer::typed_columns(open, &name, format, &p, &mut notes)?;
        Ok((columns, notes))
    })
    .map_err(|e| e.to_string())?
}

/// Propose, then convert every file under the proposal, widening what fails.
pub fn infer(args: &InferArgs) -> Result<InferReport, Error> {
    let found = files_under(&args.paths)?;
    if found.is_empty() {
        return Err("no file under the given paths".into());
    }
    let files_found = found.len();
    // AWS's logs, by the names AWS gives them: their preset, when every file reads under it.
    let mut preset_notes = Vec::new();
    if args.format.is_none()
        && args.source.is_none()
        && let Some(preset) = recognized(&found)
    {
        let sampled = spread(found.clone(), args.sample_files);
        match with_preset(args, preset, &sampled, files_found)? {
            Ok(report) => return Ok(report),
            Err(why) => preset_notes.push(why),
        }
    }
    let format = match args.format {
        Some(f) => f,
        None => {
            let formats: std::collections::BTreeSet<_> = found
                .iter()
                .map(|f| {
                    Format::of(&name_of(f)).ok_or_else(|| {
                        format!(
                            "{}: the name does not say its format: give --format",
                            f.display()
                        )
                    })
                })
                .collect::<Result<_, _>>()?;
            let formats: Vec<Format> = formats.into_iter().collect();
            match formats[..] {
                [one] => one,
                _ => {
                    return Err(format!(
                        "the files are of several formats ({formats:?}): infer each apart"
                    )
                    .into());
                }
            }
        }
    };
    let sampled = spread(found, args.sample_files);
    // `.json` says JSON, not which: JSON Lines, or documents (a CloudTrail file's one
    // `{"Records":[...]}`, Firehose's values back to back, an array). `.jsonl` and `.ndjson`
    // say JSON Lines.
    let json_named = sampled.iter().all(|f| {
        let name = name_of(f);
        let (_, stem) = Compression::from_key(&name);
        stem.to_ascii_lowercase().ends_with(".json")
    });
    let share = sample_share(args.sample_bytes, sampled.len());
    let (format, json) = match format {
        Format::Json => json_layout(&sampled, share, Some(Format::Json))?,
        Format::Jsonl if args.format.is_none() && json_named => json_layout(&sampled, share, None)?,
        other => (other, JsonBlock::default()),
    };
    let mut proposal = propose(args, &sampled, format, json)?;
    let unnamed: Vec<Option<Compression>> = sampled
        .iter()
        .filter(|f| Compression::from_key(&name_of(f)).0 == Compression::None)
        .map(|f| sniffed(f))
        .collect();
    if unnamed.len() == sampled.len() && unnamed.iter().all(|c| c.is_some() && *c == unnamed[0]) {
        proposal.compression = match unnamed[0] {
            Some(Compression::Gzip) => Some("gzip"),
            Some(Compression::Zstd) => Some("zstd"),
            _ => None,
        };
        if let Some(c) = proposal.compression {
            proposal.notes.push(format!(
                "the files are {c} without a name saying so: compression {c:?}"
            ));
        }
    }
    let mut notes = preset_notes;
    notes.append(&mut proposal.notes);
    // Convert every sampled file under the proposal; widen a column that fails.
    let mut converted = vec![None; sampled.len()];
    let mut error = None;
    'rounds: for _ in 0..=proposal.columns.len() {
        let block = source_block(args, &proposal);
        let document = serde_json::json!({ "sources": [&block] }).to_string();
        let config = Config::from_json(&document)
            .map_err(|e| format!("the proposed source is not valid: {e}"))?;
        for (i, file) in sampled.iter().enumerate() {
            let report = convert_sample(&config, &args.source_id, &block.prefix, file)?;
            match (&report.result, &report.error) {
                (Some(result), _) if result.rejected == 0 && result.rescued == 0 => {
                    converted[i] = Some(result.rows);
                }
                (Some(result), _) => {
                    error = Some(format!(
                        "{}: {} rows rejected, {} rescued under the proposal",
                        file.display(),
                        result.rejected,
                        result.rescued
                    ));
                    break 'rounds;
                }
                (None, Some(failure)) if relax(&mut proposal.columns, failure) => {
                    converted = vec![None; sampled.len()];
                    continue 'rounds;
                }
                (None, failure) => {
                    error = Some(failure.as_ref().map_or_else(
                        || format!("{}: did not convert", file.display()),
                        |f| f.message.clone(),
                    ));
                    break 'rounds;
                }
            }
        }
        break;
    }
    let source = source_block(args, &proposal);
    notes.extend(proposal.columns.iter().flat_map(|c| {
        c.notes
            .iter()
            .map(move |n| format!("{}: {n}", c.column.name))
            .collect::<Vec<_>>()
    }));
    let files = sampled
        .iter()
        .zip(&proposal.records)
        .zip(&converted)
        .map(|((path, records), rows)| SampledFile {
            path: path.display().to_string(),
            bytes: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
            records: *records,
            converted_rows: *rows,
        })
        .collect();
    Ok(InferReport {
        source,
        files_found,
        files,
        columns: proposal.columns,
        notes,
        compared: None,
        checked: error.is_none(),
        error,
    })
}

/// The preset for AWS's log whose key layout every one of `files` has (`…/CloudTrail/…`,
/// `…_elasticloadbalancing_…_app.…`, `…_vpcflowlogs_…`, a CloudFront or S3 access log's name),
/// as AWS names the files it writes (the presets' `keys`).
fn recognized(files: &[PathBuf]) -> Option<&'static str> {
    fn kind(path: &Path) -> Option<&'static str> {
        let name = name_of(path);
        let full = path.to_string_lossy().replace('\\', "/");
        let digits = |s: &str, shape: &str| {
            s.len() == shape.len()
                && s.bytes().zip(shape.bytes()).all(|(c, k)| match k {
                    b'9' => c.is_ascii_digit(),
                    b'X' => c.is_ascii_hexdigit(),
                    k => c == k,
                })
        };
        if full.contains("/CloudTrail/") && name.contains("_CloudTrail_") {
            return Some("aws.cloudtrail");
        }
        if name.contains("_elasticloadbalancing_") {
            return Some(if name.contains("_app.") {
                "aws.alb"
            } else if name.contains("_net.") {
                "aws.nlb"
            } else {
                "aws.clb"
            });
        }
        if name.contains("_vpcflowlogs_") {
            return Some("aws.vpc_flow");
        }
        if name.contains("_waflogs_") {
            return Some("aws.waf");
        }
        // `<distribution>.<yyyy-mm-dd-hh>.<unique>.gz`
        let parts: Vec<&str> = name.split('.').collect();
        if let [dist, hour, unique, "gz"] = parts[..]
            && !dist.is_empty()
            && dist
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
            && digits(hour, "9999-99-99-99")
            && unique.bytes().all(|b| b.is_ascii_alphanumeric())
        {
            return Some("aws.cloudfront");
        }
        // `<yyyy-mm-dd-hh-mm-ss>-<16 hexadecimal digits>`
        if digits(&name, "9999-99-99-99-99-99-XXXXXXXXXXXXXXXX") {
            return Some("aws.s3_access");
        }
        None
    }
    let first = kind(files.first()?)?;
    files
        .iter()
        .all(|f| kind(f) == Some(first))
        .then_some(first)
}

/// The report proposing `preset` for the sampled files, when every one converts under it
/// (nothing rejected; rescued rows are fields AWS added, said in a note); else why not.
fn with_preset(
    args: &InferArgs,
    preset: &'static str,
    sampled: &[PathBuf],
    files_found: usize,
) -> Result<Result<InferReport, String>, Error> {
    let prefix = proposed_prefix(args);
    let block = SourceBlock {
        source_id: args.source_id.clone(),
        preset: Some(preset),
        bucket: args.bucket.clone(),
        prefix: prefix.clone(),
        format: None,
        compression: None,
        csv: None,
        json: None,
        schema: Vec::new(),
        output: OutputBlock {
            bucket: args.lake.clone(),
            prefix: prefix.clone(),
        },
    };
    let document = serde_json::json!({ "sources": [&block] }).to_string();
    let config = Config::from_json(&document)
        .map_err(|e| format!("the preset {preset} is not valid: {e}"))?;
    let mut files = Vec::new();
    let mut rescued = 0;
    for file in sampled {
        let report = convert_sample(&config, &args.source_id, &prefix, file)?;
        match (&report.result, &report.error) {
            (Some(result), _) if result.rejected == 0 => {
                rescued += result.rescued;
                files.push(SampledFile {
                    path: file.display().to_string(),
                    bytes: std::fs::metadata(file).map(|m| m.len()).unwrap_or(0),
                    records: result.rows,
                    converted_rows: Some(result.rows),
                });
            }
            (_, failure) => {
                let why = failure
                    .as_ref()
                    .map_or_else(|| "rows rejected".to_string(), |f| f.message.clone());
                return Ok(Err(format!(
                    "the names say {preset}, but {} does not convert under it ({why}): the \
                     proposal is inferred from the contents instead",
                    file.display()
                )));
            }
        }
    }
    let mut notes = vec![format!(
        "the files are named as AWS names {preset}'s (`tidemark presets show {preset}` prints \
         the block it expands into; the source's own members change it)"
    )];
    if rescued > 0 {
        notes.push(format!(
            "{rescued} rows hold fields the preset does not name: kept in the rescued column"
        ));
    }
    Ok(Ok(InferReport {
        source: block,
        files_found,
        files,
        columns: Vec::new(),
        notes,
        compared: None,
        checked: true,
        error: None,
    }))
}

/// The sampled files against a source of the document.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The source compared with.
    pub source_id: String,
    /// Columns the files have and the source lacks, proposed as nullable additions.
    pub added: Vec<tidemark::schema::ColumnSpec>,
    /// Columns of the source no sampled file had.
    pub not_seen: Vec<String>,
    /// Columns whose type in the files differs from the source's: (name, source's, seen).
    pub differing: Vec<(String, String, String)>,
    /// Each sampled file under the source's current contract.
    pub under_current: Vec<FileOutcome>,
    /// The source with the additions: the additive change to deploy (`None`: nothing to add).
    pub proposed: Option<tidemark::config::SourceDoc>,
    /// Why an addition needs care (a positional CSV source, whose columns are matched by
    /// position: set `csv.columns: "name"` with it).
    pub notes: Vec<String>,
}

/// Does a column of type `source` read every value the files gave as `seen`? The same type,
/// a wider integer, a decimal with room for the digits, a float for any number, text for any
/// scalar (the files' text is kept as written).
fn reads(source: &FieldType, seen: &FieldType) -> bool {
    use ColumnType::*;
    if source == seen {
        return true;
    }
    let (Some(source), Some(seen)) = (source.scalar(), seen.scalar()) else {
        return false;
    };
    match (seen, source) {
        (Int32, Int64) | (Int32 | Int64 | Float32, Float64) | (_, String) => true,
        (Int32, Decimal { precision, scale }) => i16::from(precision) - i16::from(scale) >= 10,
        (Int64, Decimal { precision, scale }) => i16::from(precision) - i16::from(scale) >= 19,
        (
            Decimal {
                precision: p1,
                scale: s1,
            },
            Decimal {
                precision: p2,
                scale: s2,
            },
        ) => s1 <= s2 && i16::from(p1) - i16::from(s1) <= i16::from(p2) - i16::from(s2),
        (Decimal { .. }, Float64) => true,
        _ => false,
    }
}

/// One sampled file converted under a source's current contract.
#[derive(Debug, Clone, Serialize)]
pub struct FileOutcome {
    /// The file (or its `s3://` URL).
    pub path: String,
    /// `converts`, `rescues` (values rescued or rows rejected) or `fails`.
    pub outcome: &'static str,
    /// Rows written, when it converted.
    pub rows: Option<u64>,
    /// Why, when it did not simply convert.
    pub why: Option<String>,
}

fn compare(
    config: &Config,
    id: &str,
    files: &[PathBuf],
    columns: &[SeenColumn],
) -> Result<Comparison, Error> {
    let source = crate::backend::source_in(config, id)?;
    let current = &source.doc.schema;
    let mut under_current = Vec::new();
    for file in files {
        let report = convert_sample(config, id, &source.doc.prefix, file)?;
        let path = file.display().to_string();
        under_current.push(match (&report.result, &report.error) {
            (Some(r), _) if r.rejected == 0 && r.rescued == 0 => FileOutcome {
                path,
                outcome: "converts",
                rows: Some(r.rows),
                why: None,
            },
            (Some(r), _) => FileOutcome {
                path,
                outcome: "rescues",
                rows: Some(r.rows),
                why: Some(format!(
                    "{} rows rejected, {} rescued",
                    r.rejected, r.rescued
                )),
            },
            (None, error) => FileOutcome {
                path,
                outcome: "fails",
                rows: None,
                why: error.as_ref().map(|e| e.message.clone()),
            },
        });
    }
    let added: Vec<_> = columns
        .iter()
        .filter(|c| !current.iter().any(|s| s.name == c.column.name))
        .map(|c| tidemark::schema::ColumnSpec {
            nullable: true,
            ..c.column.clone()
        })
        .collect();
    let not_seen = current
        .iter()
        .filter(|s| !columns.iter().any(|c| c.column.name == s.name))
        .map(|s| s.name.clone())
        .collect();
    let differing = current
        .iter()
        .filter_map(|s| {
            let seen = columns.iter().find(|c| c.column.name == s.name)?;
            (!reads(&s.ty, &seen.column.ty))
                .then(|| (s.name.clone(), s.ty.to_string(), seen.column.ty.to_string()))
        })
        .collect();
    let mut notes = Vec::new();
    let proposed = if added.is_empty() {
        None
    } else {
        let mut doc = source.doc.clone();
        doc.schema.extend(added.iter().cloned());
        let positional = source.doc.format == tidemark::config::FormatDoc::Csv
            && source
                .doc
                .csv
                .as_ref()
                .is_none_or(|c| c.columns == tidemark::config::CsvColumnsDoc::Position);
        if positional {
            notes.push(
                "a CSV source matched by position: set \"csv\": {\"columns\": \"name\"} with the \
                 added columns, or files of the old shape fail"
                    .to_string(),
            );
        }
        Some(doc)
    };
    Ok(Comparison {
        source_id: id.to_string(),
        added,
        not_seen,
        differing,
        under_current,
        proposed,
        notes,
    })
}

/// Objects sampled from `s3://bucket/prefix` paths, copied into a temporary folder.
struct Remote {
    dir: PathBuf,
    /// Local copy → `s3://bucket/key`.
    names: Vec<(PathBuf, String)>,
    notes: Vec<String>,
}

impl Remote {
    /// `text` with every local copy's path replaced by its object's URL.
    fn urls_in(&self, text: &mut String) {
        for (path, url) in &self.names {
            *text = text.replace(&path.display().to_string(), url);
        }
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sample the objects under `url` (`s3://bucket/prefix`): list at most `--list-max` keys,
/// spread `--sample-files` over them, and fetch each: a plain text object only its share of
/// `--sample-bytes` (a range, cut after its last whole line), any other whole, counted against
/// `--sample-bytes` (objects past the budget are not fetched, noted).
async fn sample_remote(
    store: &dyn tidemark::ports::ObjectStore,
    urls: &[String],
    args: &InferArgs,
) -> Result<Remote, Error> {
    use tidemark::ports::{ByteRange, GetOutcome, RangeOutcome};
    use tokio::io::AsyncReadExt;
    let dir = std::env::temp_dir().join(format!("tidemark-infer-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir)?;
    let mut remote = Remote {
        dir,
        names: Vec::new(),
        notes: Vec::new(),
    };
    let mut listed = Vec::new();
    for url in urls {
        let rest = url.strip_prefix("s3://").expect("an s3 URL");
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let mut token: Option<String> = None;
        let before = listed.len();
        loop {
            let page = store.list(bucket, prefix, token.as_deref()).await?;
            for object in page.objects {
                let name = object.key.rsplit('/').next().unwrap_or("");
                if !object.key.ends_with('/') && !name.starts_with('.') && !name.starts_with('_') {
                    listed.push((bucket.to_string(), object));
                }
            }
            token = page.next;
            if token.is_none() {
                break;
            }
            if listed.len() >= args.list_max {
                remote.notes.push(format!(
                    "{url}: listing stopped after {} keys (--list-max): the sample is spread over those",
                    listed.len() - before
                ));
                break;
            }
        }
    }
    if listed.is_empty() {
        return Err(format!("no object under {}", urls.join(", ")).into());
    }
    let listed_count = listed.len();
    let picked = spread(listed, args.sample_files);
    let n = picked.len();
    if n < listed_count {
        remote.notes.push(format!(
            "{n} of {listed_count} listed objects sampled, spread over the listing"
        ));
    }
    let share = sample_share(args.sample_bytes, n);
    let mut spent = 0u64;
    for (i, (bucket, object)) in picked.iter().enumerate() {
        let name = object.key.rsplit('/').next().unwrap_or("object");
        let local = remote.dir.join(format!("{i:05}-{name}"));
        let plain_text = matches!(Format::of(name), Some(Format::Csv | Format::Jsonl))
            && Compression::from_key(name).0 == Compression::None;
        let bytes = if plain_text && object.size > share {
            match store
                .get_range(
                    bucket,
                    &object.key,
                    ByteRange::Span {
                        start: 0,
                        end: share,
                    },
                    Some(&object.etag),
                )
                .await?
            {
                RangeOutcome::Found { bytes, .. } => {
                    let cut = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
                    bytes[..cut].to_vec()
                }
                _ => continue, // changed or gone since the listing
            }
        } else {
            if spent > 0 && spent + object.size > args.sample_bytes {
                remote.notes.push(format!(
                    "{} of {n} sampled objects fetched: --sample-bytes reached",
                    remote.names.len()
                ));
                break;
            }
            match store.get(bucket, &object.key, Some(&object.etag)).await? {
                GetOutcome::Found { mut body, .. } => {
                    let mut all = Vec::new();
                    body.read_to_end(&mut all).await?;
                    all
                }
                _ => continue,
            }
        };
        spent += bytes.len() as u64;
        std::fs::write(&local, &bytes)?;
        remote
            .names
            .push((local, format!("s3://{bucket}/{}", object.key)));
    }
    Ok(remote)
}

/// Run `infer` and print its report: the source block, the files, the columns, the notes.
pub async fn infer_command(
    args: InferArgs,
    backend: crate::BackendKind,
    root: &Path,
    config: Option<&Path>,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    // The document is read only to compare with one of its sources.
    let config = match (&args.source, config) {
        (None, _) => None,
        (Some(_), Some(path)) => Some(Config::from_file(path)?),
        (Some(_), None) => Some(Config::from_env()?),
    };
    let compare_with = |report: &mut InferReport, files: &[PathBuf]| -> Result<(), Error> {
        if let (Some(id), Some(config)) = (&args.source, &config) {
            report.compared = Some(compare(config, id, files, &report.columns)?);
        }
        Ok(())
    };
    let urls: Vec<String> = args
        .paths
        .iter()
        .map(|p| p.display().to_string())
        .filter(|p| p.starts_with("s3://"))
        .collect();
    let report = if urls.is_empty() {
        let mut report = infer(&args)?;
        let files: Vec<PathBuf> = report
            .files
            .iter()
            .map(|f| PathBuf::from(&f.path))
            .collect();
        compare_with(&mut report, &files)?;
        report
    } else {
        if urls.len() != args.paths.len() {
            return Err("give either local paths or s3:// paths, not both".into());
        }
        let store: Box<dyn tidemark::ports::ObjectStore> = match backend {
            crate::BackendKind::Local => {
                if !root.is_dir() {
                    return Err(format!(
                        "no workspace at {}: s3:// paths on the embedded backend are folders \
                         under <root>/buckets (check --root)",
                        root.display()
                    )
                    .into());
                }
                Box::new(tidemark::local::FolderStore::new(root.join("buckets")))
            }
            crate::BackendKind::Aws => Box::new(tidemark::aws::store_from_env().await),
        };
        let remote = sample_remote(store.as_ref(), &urls, &args).await?;
        let local = InferArgs {
            paths: remote.names.iter().map(|(p, _)| p.clone()).collect(),
            sample_files: usize::MAX,
            ..args.clone()
        };
        let mut report = infer(&local)?;
        compare_with(&mut report, &local.paths)?;
        for file in &mut report.files {
            remote.urls_in(&mut file.path);
        }
        for note in &mut report.notes {
            remote.urls_in(note);
        }
        if let Some(e) = &mut report.error {
            remote.urls_in(e);
        }
        if let Some(compared) = &mut report.compared {
            for outcome in &mut compared.under_current {
                remote.urls_in(&mut outcome.path);
                if let Some(why) = &mut outcome.why {
                    remote.urls_in(why);
                }
            }
        }
        report.notes.splice(0..0, remote.notes.clone());
        report
    };
    if json {
        print_json(out, &report)?;
    } else {
        serde_json::to_writer_pretty(&mut *out, &report.source)?;
        writeln!(out)?;
        writeln!(out)?;
        let mut files = Table::new(&["FILE", ">BYTES", ">RECORDS READ", ">ROWS CONVERTED"]);
        for f in &report.files {
            files.row(vec![
                f.path.clone(),
                f.bytes.to_string(),
                f.records.to_string(),
                f.converted_rows.map_or("-".into(), |r| r.to_string()),
            ]);
        }
        write!(out, "{}", files.render())?;
        if report.files.len() < report.files_found {
            writeln!(
                out,
                "({} of {} files read, spread over the listing)",
                report.files.len(),
                report.files_found
            )?;
        }
        writeln!(out)?;
        let mut columns =
            Table::new(&["COLUMN", "TYPE", "NULLABLE", ">VALUES", ">NULLS", "EXAMPLE"]);
        for c in &report.columns {
            let ty = match &c.column.format {
                Some(format) => format!("{} ({})", c.column.ty, format),
                None => c.column.ty.to_string(),
            };
            columns.row(vec![
                c.column.name.clone(),
                ty,
                if c.column.nullable { "yes" } else { "no" }.into(),
                c.values.to_string(),
                c.nulls.to_string(),
                c.example.clone().unwrap_or_default(),
            ]);
        }
        write!(out, "{}", columns.render())?;
        for note in &report.notes {
            writeln!(out, "note: {note}")?;
        }
        match &report.error {
            None => writeln!(
                out,
                "checked: every sampled file converts under this source, no row rejected, no value rescued"
            )?,
            Some(e) => writeln!(out, "NOT CHECKED: {e}")?,
        }
        if let Some(c) = &report.compared {
            writeln!(out, "\nunder the current source {:?}:", c.source_id)?;
            let mut files = Table::new(&["FILE", "OUTCOME", ">ROWS", "WHY"]);
            for f in &c.under_current {
                files.row(vec![
                    f.path.clone(),
                    f.outcome.into(),
                    f.rows.map_or("-".into(), |r| r.to_string()),
                    f.why.clone().unwrap_or_default(),
                ]);
            }
            write!(out, "{}", files.render())?;
            for (name, was, seen) in &c.differing {
                writeln!(
                    out,
                    "differs: {name}: {was} in the source, {seen} in the files (not changed: not additive)"
                )?;
            }
            for name in &c.not_seen {
                writeln!(out, "not seen: {name} (kept)")?;
            }
            for note in &c.notes {
                writeln!(out, "note: {note}")?;
            }
            match &c.proposed {
                None => writeln!(out, "additive change: none (no column the source lacks)")?,
                Some(doc) => {
                    let names: Vec<&str> = c.added.iter().map(|a| a.name.as_str()).collect();
                    writeln!(
                        out,
                        "additive change: add {} (nullable); the source with them:",
                        names.join(", ")
                    )?;
                    serde_json::to_writer_pretty(&mut *out, doc)?;
                    writeln!(out)?;
                }
            }
        }
    }
    Ok(if report.checked {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
