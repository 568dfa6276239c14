//! `convert --source S IN [OUT]`: one local file converted under a source's contract, with the
//! conversion ingest runs on an object, so a contract can be checked on a sample before it is
//! deployed. Nothing is read from or written to the backends.
//!
//! What is the same as ingest: the [`ConvertSpec`](tidemark::convert::ConvertSpec) comes from
//! [`Source::convert_spec`] for a key (`--key`, else the source's prefix followed by the file's
//! name), so format, compression (`auto` reads the key's suffix), CSV dialect, empty strings,
//! record and decompression limits and the bad-row policy are the ones ingest would use; an
//! input over `max_object_bytes` is refused as ingest refuses it; a source with bookmark keys
//! runs the rows through the same row filter (`convert_split`) as ingest does. What differs: a
//! key the source's include / exclude globs would not select is converted anyway, with a
//! warning; no rejects file or late-rows file is written; the bookmark filter starts from no
//! mark and an empty index (as for the first object of a new source), since the source's mark
//! lives in the ledger, so no row is late and only keys repeated within the file are skipped
//! as re-exported; lineage columns describe the file as the object its key names: that key, no
//! version id, the file's MD5 as the ETag (what a single PUT of it would get) and its
//! modification time.
//!
//! Besides rows and sums, the report shows the contract itself (the output's columns, each
//! type spelled as the schema spells it: `struct<…>`, `array<…>`, `map<string,…>`, `json`)
//! and what did not land in a column of its own: rejected rows, rows with values in the
//! rescued column, and the values of fields not in the schema that were ignored, per field.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Seek, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Instant;

use md5::{Digest, Md5};
use serde::Serialize;
use tidemark::bookmark::{Index, RowFilter, key_columns};
use tidemark::config::{Config, Source};
use tidemark::convert::{
    BadRows, BadValues, Compression, ConvertError, ConvertStats, InputFormat, ObjectInfo, Rejected,
    SumValue, UnknownFields, convert,
};
use tidemark::model::IgnoredFields;

use super::print_json;
use crate::backend::source_in;
use crate::render::{duration, ignored_fields};
use crate::{Error, Out};

/// Rejected rows shown unless `--rejects` says otherwise.
pub const REJECTS_SHOWN: usize = 10;

/// Characters of a rejected record shown; the rest is cut (marked `…`).
pub const RECORD_CHARS: usize = 120;

/// Arguments of `convert`.
#[derive(Debug, Clone, clap::Args)]
pub struct ConvertArgs {
    /// The source whose contract applies (its id in the sources document).
    #[arg(long)]
    pub source: String,
    /// The object key that decides format and compression, and that the include / exclude
    /// globs are checked on (default: the source's prefix followed by IN's file name).
    #[arg(long)]
    pub key: Option<String>,
    /// Rejected rows to list: a number, or `all`.
    #[arg(long, value_name = "N|all", default_value_t = Shown::First(REJECTS_SHOWN))]
    pub rejects: Shown,
    /// The local file to convert.
    #[arg(value_name = "IN")]
    pub input: PathBuf,
    /// Where to write the Parquet file (replaced only when the conversion succeeds);
    /// without it the output is fully encoded, then discarded.
    #[arg(value_name = "OUT")]
    pub output: Option<PathBuf>,
}

/// How many rejected rows to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    /// Every one.
    All,
    /// The first n.
    First(usize),
}

impl Shown {
    fn limit(self) -> usize {
        match self {
            Shown::All => usize::MAX,
            Shown::First(n) => n,
        }
    }
}

impl FromStr for Shown {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "all" {
            return Ok(Shown::All);
        }
        s.parse()
            .map(Shown::First)
            .map_err(|_| format!("{s:?}: expected a number of rows or `all`"))
    }
}

impl std::fmt::Display for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shown::All => f.write_str("all"),
            Shown::First(n) => write!(f, "{n}"),
        }
    }
}

/// What `convert` did with one file.
#[derive(Debug, Clone, Serialize)]
pub struct ConvertReport {
    /// The source id.
    pub source_id: String,
    /// The input file, as given.
    pub input: String,
    /// The key format and compression were decided for.
    pub key: String,
    /// Would the source select that key (prefix, include and exclude globs)?
    pub selected: bool,
    /// Input format: `csv`, `jsonl`, `json`, `parquet`, `avro` or `orc`.
    pub format: &'static str,
    /// Input compression.
    pub compression: Compression,
    /// Bad-row policy: `fail`, or `reject` with its `max_rejected_rows`.
    pub on_bad_row: &'static str,
    /// Under `reject`: most bad rows the object may have.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_rejected_rows: Option<u64>,
    /// What a field the schema does not name does: `ignore`, `fail` or `rescue`.
    pub on_unknown_field: UnknownFields,
    /// What a value that does not read as its type does: `fail` or `rescue`.
    pub on_bad_value: BadValues,
    /// The rescued column, when a policy rescues.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rescued_column: Option<String>,
    /// The columns of the Parquet output, in order: the schema's, the rescued column, the
    /// lineage columns.
    pub columns: Vec<Column>,
    /// Where the Parquet file went (`None`: discarded).
    pub output: Option<String>,
    /// Things the operator should know (a key the source would not select…).
    pub warnings: Vec<String>,
    /// Did the conversion succeed?
    pub ok: bool,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Failure>,
    /// What it produced, when it succeeded.
    #[serde(flatten)]
    pub result: Option<Converted>,
}

/// One column of the output, its type spelled as Glue DDL (`struct<arn:string,tags:array<string>>`).
#[derive(Debug, Clone, Serialize)]
pub struct Column {
    /// Its name.
    pub name: String,
    /// Its type: `int64`, `decimal(12,2)`, `struct<…>`, `array<…>`, `map<string,…>`, `json`.
    #[serde(rename = "type")]
    pub ty: String,
    /// May it hold NULLs?
    pub nullable: bool,
    /// Where its values are read from, when not the top-level field of its name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// What fills it when not the input: `rescued values`, or `lineage: <value>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filled_with: Option<String>,
}

/// A failed conversion, as `ConvertError` tells it.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    /// The whole message, naming the file: `IN: line 3: column "quantity": …`.
    pub message: String,
    /// `parse`, `decompress`, `too_large`, `encode`, `io`, `invalid_spec` or
    /// `object_too_large` (over `max_object_bytes`).
    pub kind: &'static str,
    /// 1-based line of the decompressed input, when known.
    pub line: Option<u64>,
    /// 1-based ordinal of the record, for JSON documents (whose records are not lines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<u64>,
    /// The column, when known.
    pub column: Option<String>,
}

/// What a successful conversion produced.
#[derive(Debug, Clone, Serialize)]
pub struct Converted {
    /// Rows written.
    pub rows: u64,
    /// Exact sum of each of the source's `sum_columns` (exact decimal strings in JSON).
    pub sums: BTreeMap<String, SumValue>,
    /// Row groups of the Parquet file.
    pub row_groups: usize,
    /// Bytes read from the file (compressed, if it is).
    pub bytes_read: u64,
    /// Bytes after decompression.
    pub bytes_decoded: u64,
    /// Size of the Parquet file.
    pub output_bytes: u64,
    /// Wall time of the conversion, in milliseconds.
    pub elapsed_ms: f64,
    /// Rows rejected under policy `reject` (not in `rows` or the sums).
    pub rejected: u64,
    /// The first of them (`--rejects`), in input order.
    pub rejects: Vec<RejectedRow>,
    /// Rows with values in the rescued column (counted in `rows`).
    pub rescued: u64,
    /// Values of fields the schema does not name, dropped (`on_unknown_field: ignore`):
    /// how many, and per field (the first 32 fields met).
    pub ignored: IgnoredFields,
    /// For a source with bookmark keys: what the row filter did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bookmark: Option<BookmarkOutcome>,
}

/// One rejected row, shortened.
#[derive(Debug, Clone, Serialize)]
pub struct RejectedRow {
    /// 1-based line where the record starts.
    pub line: Option<u64>,
    /// The offending column, when known.
    pub column: Option<String>,
    /// The complaint, as the object's error would read.
    pub error: String,
    /// The record as read (invalid UTF-8 replaced), at most [`RECORD_CHARS`] characters.
    pub record: String,
    /// The record is longer than shown.
    pub cut: bool,
}

/// The bookmark row filter's counts, from no mark.
#[derive(Debug, Clone, Serialize)]
pub struct BookmarkOutcome {
    /// The key columns.
    pub keys: Vec<String>,
    /// Rows emitted (the output's rows).
    pub emitted: u64,
    /// Rows at or below the mark never accounted for (always 0 from no mark).
    pub late: u64,
    /// Rows whose key an earlier row of the file already had.
    pub skipped: u64,
    /// The mark after this file, rendered.
    pub mark: Option<Vec<String>>,
}

/// The key `input` stands for under `source`: the source's prefix followed by its file name.
pub fn default_key(source: &Source, input: &Path) -> String {
    let name = input
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{}{name}", source.doc.prefix)
}

/// Convert `args.input` under the contract of `args.source`. `Err` when the command cannot
/// run (unknown source, unreadable input, unwritable output folder); a conversion that fails
/// is a report with `ok: false`.
pub fn convert_file(config: &Config, args: &ConvertArgs) -> Result<ConvertReport, Error> {
    // Watched as ingest's conversions are: a decoder that loops on the file is abandoned
    // after TIDEMARK_STALL_SECONDS (default 60) without progress.
    let (config, owned) = (config.clone(), args.clone());
    tidemark::watchdog::run_blocking(tidemark::watchdog::stall_limit(i64::MAX), move |p| {
        convert_file_watched(&config, &owned, &p)
    })
    .map_err(|e| format!("{}: {e}", args.input.display()))?
}

/// [`convert_file`], moving `progress` as it reads and decodes (for the watchdog).
fn convert_file_watched(
    config: &Config,
    args: &ConvertArgs,
    progress: &tidemark::watchdog::Progress,
) -> Result<ConvertReport, Error> {
    let source = source_in(config, &args.source)?;
    let input_name = args.input.display().to_string();
    let key = args
        .key
        .clone()
        .unwrap_or_else(|| default_key(source, &args.input));
    let mut spec = source.convert_spec(&key);
    spec.progress = progress.clone();
    let selected = source.matches(&source.doc.bucket, &key);
    let mut warnings = Vec::new();
    if !selected {
        warnings.push(not_selected(source, &key));
    }
    let (on_bad_row, max_rejected_rows) = match spec.bad_rows {
        BadRows::Fail => ("fail", None),
        BadRows::Reject { max } => ("reject", Some(max)),
    };
    let mut report = ConvertReport {
        source_id: source.id().to_string(),
        input: input_name.clone(),
        key,
        selected,
        format: format_name(&spec.format),
        compression: spec.compression,
        on_bad_row,
        max_rejected_rows,
        on_unknown_field: spec.unknown_fields,
        on_bad_value: spec.bad_values,
        rescued_column: spec.rescues().then(|| spec.rescue_column.clone()),
        columns: columns(
            source,
            spec.rescues().then_some(spec.rescue_column.as_str()),
        ),
        output: args.output.as_ref().map(|p| p.display().to_string()),
        warnings,
        ok: false,
        error: None,
        result: None,
    };

    let file = File::open(&args.input).map_err(|e| format!("{input_name}: {e}"))?;
    let size = file
        .metadata()
        .map_err(|e| format!("{input_name}: {e}"))?
        .len();
    if let Some(limit) = source.doc.max_object_bytes.filter(|&l| size > l) {
        report.error = Some(Failure {
            message: format!(
                "{input_name}: {size} bytes is over the source's max_object_bytes of {limit}: \
                 ingest records such an object as too large without converting it"
            ),
            kind: "object_too_large",
            line: None,
            record: None,
            column: None,
        });
        return Ok(report);
    }

    let spec = if source.doc.metadata_columns.0.is_empty() {
        spec
    } else {
        source.convert_spec_for(
            object_info(&file, &report.key).map_err(|e| format!("{input_name}: {e}"))?,
        )
    };
    let mut sink = Sink::open(args.output.as_deref())?;
    let mut filter = source.doc.bookmark.as_ref().map(|doc| {
        RowFilter::new(
            doc,
            &source.schema,
            None,
            Index::new(&key_columns(doc, &source.schema)),
        )
    });
    let started = Instant::now();
    let reader = BufReader::with_capacity(256 << 10, file);
    let converted = match filter.as_mut() {
        None => convert(reader, &spec, &mut sink),
        Some(f) => f.convert(reader, &spec, &mut sink),
    }
    .and_then(|stats| sink.finish().map(|bytes| (stats, bytes)));
    let elapsed = started.elapsed();
    match converted {
        Ok((stats, output_bytes)) => {
            report.ok = true;
            report.result = Some(converted_report(
                stats,
                output_bytes,
                elapsed.as_secs_f64() * 1000.0,
                args.rejects,
                filter.as_ref(),
                source,
            ));
        }
        Err(e) => {
            sink.discard();
            report.error = Some(failure(&input_name, &e));
        }
    }
    Ok(report)
}

/// The local file as the object version the lineage columns describe: the key it stands
/// for, its MD5 as the ETag (what a single PUT of it would get) and its modification time.
/// The file is read once for the MD5.
fn object_info(file: &File, key: &str) -> std::io::Result<ObjectInfo> {
    let mut md5 = Md5::new();
    let mut reader = BufReader::with_capacity(256 << 10, file);
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        md5.update(chunk);
        let n = chunk.len();
        reader.consume(n);
    }
    let modified = file.metadata()?.modified()?;
    let file_md5 = md5.finalize();
    let last_modified_ms = chrono::DateTime::<chrono::Utc>::from(modified).timestamp_millis();
    (&*file).seek(std::io::SeekFrom::Start(0))?;
    Ok(ObjectInfo {
        key: key.to_string(),
        version_id: None,
        etag: file_md5.iter().map(|b| format!("{b:02x}")).collect(),
        last_modified_ms,
    })
}

fn converted_report(
    stats: ConvertStats,
    output_bytes: u64,
    elapsed_ms: f64,
    shown: Shown,
    filter: Option<&RowFilter>,
    source: &Source,
) -> Converted {
    let bookmark = filter.map(|f| BookmarkOutcome {
        keys: source
            .doc
            .bookmark
            .as_ref()
            .map(|b| b.keys.clone())
            .unwrap_or_default(),
        emitted: f.counts.emitted,
        late: f.counts.late,
        skipped: f.counts.skipped,
        mark: f.rendered_mark(),
    });
    Converted {
        rows: stats.rows,
        sums: stats.sums,
        row_groups: stats.row_groups,
        bytes_read: stats.bytes_read,
        bytes_decoded: stats.bytes_decoded,
        output_bytes,
        elapsed_ms: (elapsed_ms * 1000.0).round() / 1000.0,
        rejected: stats.rejects.len() as u64,
        rejects: stats
            .rejects
            .iter()
            .take(shown.limit())
            .map(shorten)
            .collect(),
        rescued: stats.rescued_rows,
        ignored: IgnoredFields::from(&stats.ignored),
        bookmark,
    }
}

/// The output columns of `source`, each with its type spelled as the schema spells it.
fn columns(source: &Source, rescued_column: Option<&str>) -> Vec<Column> {
    let schema_columns = source.doc.schema.len();
    source
        .output_columns()
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let lineage = source
                .doc
                .metadata_columns
                .0
                .iter()
                .find(|(name, _)| *name == c.name)
                .map(|(_, l)| serde_json::to_value(l).unwrap_or_default());
            let filled_with = match lineage {
                _ if i < schema_columns => None,
                Some(l) => Some(format!("lineage: {}", l.as_str().unwrap_or("?"))),
                None if Some(c.name.as_str()) == rescued_column => {
                    Some("rescued values".to_string())
                }
                None => None,
            };
            Column {
                name: c.name,
                ty: c.ty.to_string(),
                nullable: c.nullable,
                path: c.path.map(|p| p.to_string()),
                filled_with,
            }
        })
        .collect()
}

fn shorten(r: &Rejected) -> RejectedRow {
    let text = String::from_utf8_lossy(&r.record);
    let record: String = text.chars().take(RECORD_CHARS).collect();
    let cut = r.truncated || record.len() < text.len();
    RejectedRow {
        line: r.line,
        column: r.column.clone(),
        error: r.error.clone(),
        record,
        cut,
    }
}

fn not_selected(source: &Source, key: &str) -> String {
    let doc = &source.doc;
    let why = if !key.starts_with(doc.prefix.as_str()) {
        format!("it is not under the source's prefix {:?}", doc.prefix)
    } else {
        format!(
            "the source's globs (include {:?}, exclude {:?}) leave it out",
            doc.include, doc.exclude
        )
    };
    format!(
        "source {} would not select key {key:?}: {why}; converting anyway (--key sets the key)",
        source.id()
    )
}

fn format_name(format: &InputFormat) -> &'static str {
    match format {
        InputFormat::Csv(_) => "csv",
        InputFormat::JsonLines => "jsonl",
        InputFormat::Json => "json",
        InputFormat::Regex => "regex",
        InputFormat::Parquet => "parquet",
        InputFormat::Avro => "avro",
        InputFormat::Orc => "orc",
    }
}

fn failure(input: &str, e: &ConvertError) -> Failure {
    let (kind, line, record, column) = match e {
        ConvertError::Parse {
            line,
            record,
            column,
            ..
        } => ("parse", *line, record.map(|r| r.get()), column.clone()),
        ConvertError::Decompress { .. } => ("decompress", None, None, None),
        ConvertError::TooLarge { .. } => ("too_large", None, None, None),
        ConvertError::Encode { .. } => ("encode", None, None, None),
        ConvertError::Io(_) => ("io", None, None, None),
        ConvertError::InvalidSpec { .. } => ("invalid_spec", None, None, None),
        ConvertError::Abandoned(_) => ("abandoned", None, None, None),
    };
    Failure {
        message: format!("{input}: {e}"),
        kind,
        line,
        record,
        column,
    }
}

/// Where the Parquet bytes go: a temp file beside OUT, renamed over it at the end, or
/// nowhere; counted either way.
struct Sink {
    file: Option<(BufWriter<File>, PathBuf, PathBuf)>,
    bytes: u64,
}

impl Sink {
    fn open(output: Option<&Path>) -> Result<Self, Error> {
        let file = match output {
            None => None,
            Some(path) => {
                let name = path
                    .file_name()
                    .ok_or_else(|| format!("{}: not a file name", path.display()))?;
                let mut partial = name.to_os_string();
                partial.push(".partial");
                let partial = path.with_file_name(partial);
                let f = File::create(&partial)
                    .map_err(|e| format!("cannot create {}: {e}", partial.display()))?;
                Some((BufWriter::new(f), partial, path.to_path_buf()))
            }
        };
        Ok(Self { file, bytes: 0 })
    }

    /// Flush and move the file into place; the bytes written.
    fn finish(&mut self) -> Result<u64, ConvertError> {
        if let Some((w, partial, path)) = &mut self.file {
            w.flush().map_err(ConvertError::Io)?;
            w.get_ref().sync_all().map_err(ConvertError::Io)?;
            std::fs::rename(&*partial, &*path).map_err(|e| ConvertError::Encode {
                message: format!("cannot move the output to {}: {e}", path.display()),
            })?;
            self.file = None;
        }
        Ok(self.bytes)
    }

    /// Remove the incomplete file (OUT itself is untouched).
    fn discard(&mut self) {
        if let Some((_, partial, _)) = self.file.take() {
            let _ = std::fs::remove_file(partial);
        }
    }
}

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = match &mut self.file {
            Some((w, ..)) => w.write(data)?,
            None => data.len(),
        };
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.file {
            Some((w, ..)) => w.flush(),
            None => Ok(()),
        }
    }
}

/// `tidemark convert`: exit 0 when the file converts (rows rejected under policy `reject`
/// included), 1 when it fails, naming the file (and line and column when known).
pub async fn convert_command(
    config: std::sync::Arc<Config>,
    args: ConvertArgs,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    // Watched as ingest's conversions are (see convert_file); the command has nothing else
    // to run while the conversion does.
    let report = convert_file(&config, &args)?;
    if json {
        print_json(out, &report)?;
    } else {
        write!(out, "{}", render(&report))?;
    }
    match &report.error {
        None => Ok(ExitCode::SUCCESS),
        Some(e) => {
            eprintln!("tidemark: {}", e.message);
            Ok(ExitCode::from(1))
        }
    }
}

/// The report as text, one field a line (the error itself goes to stderr).
pub fn render(r: &ConvertReport) -> String {
    let mut lines: Vec<(String, String)> = Vec::new();
    let mut line = |label: &str, value: String| lines.push((format!("{label}:"), value));
    for w in &r.warnings {
        line("warning", w.clone());
    }
    line("source", r.source_id.clone());
    line("input", r.input.clone());
    line(
        "as key",
        format!("{} ({}, compression {})", r.key, r.format, r.compression),
    );
    line(
        "on bad row",
        match r.max_rejected_rows {
            Some(max) => format!("reject (at most {max} rows)"),
            None => "fail".to_string(),
        },
    );
    for c in &r.columns {
        let mut about = Vec::new();
        if let Some(path) = &c.path {
            about.push(format!("from {path}"));
        }
        if let Some(what) = &c.filled_with {
            about.push(what.clone());
        }
        line(
            "column",
            format!(
                "{} {}{}{}",
                c.name,
                c.ty,
                if c.nullable { "" } else { " not null" },
                if about.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", about.join(", "))
                }
            ),
        );
    }
    let Some(c) = &r.result else {
        line("result", "FAILED (see the error)".into());
        return aligned(&lines, label_width(&lines));
    };
    line("rows", c.rows.to_string());
    for (column, sum) in &c.sums {
        line(&format!("sum({column})"), sum.to_string());
    }
    line("row groups", c.row_groups.to_string());
    line(
        "bytes",
        format!("{} read, {} decoded", c.bytes_read, c.bytes_decoded),
    );
    line(
        "output",
        match &r.output {
            Some(path) => format!("{} bytes of Parquet in {path}", c.output_bytes),
            None => format!("{} bytes of Parquet (discarded)", c.output_bytes),
        },
    );
    line("elapsed", elapsed(c.elapsed_ms));
    if let Some(b) = &c.bookmark {
        line(
            "bookmark",
            format!(
                "keys [{}] from no mark: {} emitted, {} late, {} re-exported (repeated in the file); mark after: {}",
                b.keys.join(", "),
                b.emitted,
                b.late,
                b.skipped,
                b.mark
                    .as_ref()
                    .map_or_else(|| "none".to_string(), |m| format!("[{}]", m.join(", ")))
            ),
        );
    }
    let shown = if c.rejects.len() as u64 == c.rejected {
        String::new()
    } else {
        format!(
            " ({} shown; --rejects all lists every one)",
            c.rejects.len()
        )
    };
    line("rejected", format!("{}{shown}", c.rejected));
    let mut rejects = String::new();
    for row in &c.rejects {
        let mut record = format!("{:?}", row.record);
        if row.cut {
            record.push('…');
        }
        rejects += &format!("  {}  {record}\n", row.error);
    }
    line(
        "rescued",
        match &r.rescued_column {
            Some(column) if c.rescued > 0 => {
                format!("{} rows (with values in column {column})", c.rescued)
            }
            _ => c.rescued.to_string(),
        },
    );
    line(
        "ignored",
        if c.ignored.is_empty() {
            "0".to_string()
        } else {
            format!(
                "{} values of fields not in the schema (on_unknown_field: ignore)",
                c.ignored.values
            )
        },
    );
    // The rejected rows follow their line; the ignored fields theirs, the last.
    let (before, after) = lines.split_at(lines.len() - 2);
    let width = label_width(&lines);
    aligned(before, width) + &rejects + &aligned(after, width) + &ignored_fields(&c.ignored, "  ")
}

/// The width of the label column: one past the longest label.
fn label_width(lines: &[(String, String)]) -> usize {
    lines
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0)
        + 1
}

/// `label: value` lines, the values aligned at `width`.
fn aligned(lines: &[(String, String)], width: usize) -> String {
    lines
        .iter()
        .map(|(label, value)| format!("{label:<width$}{value}\n"))
        .collect()
}

/// Milliseconds, short: `3.42ms`, `850ms`, then as [`duration`].
fn elapsed(ms: f64) -> String {
    if ms < 10.0 {
        format!("{ms:.2}ms")
    } else if ms < 1000.0 {
        format!("{ms:.0}ms")
    } else {
        duration(ms as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_shown_parse() {
        assert_eq!("all".parse::<Shown>(), Ok(Shown::All));
        assert_eq!("3".parse::<Shown>(), Ok(Shown::First(3)));
        assert!("some".parse::<Shown>().is_err());
        assert_eq!(Shown::First(10).to_string(), "10");
    }

    #[test]
    fn records_are_shortened() {
        let long = Rejected {
            line: Some(2),
            record_number: None,
            column: None,
            error: "line 2: bad".into(),
            record: "é".repeat(200).into_bytes(),
            truncated: false,
        };
        let row = shorten(&long);
        assert_eq!((row.record.chars().count(), row.cut), (RECORD_CHARS, true));
        let short = Rejected {
            record: b"1,a".to_vec(),
            ..long
        };
        assert_eq!(
            (shorten(&short).record.as_str(), shorten(&short).cut),
            ("1,a", false)
        );
    }

    #[test]
    fn elapsed_is_short() {
        assert_eq!(elapsed(3.4219), "3.42ms");
        assert_eq!(elapsed(850.2), "850ms");
        assert_eq!(elapsed(42_000.0), "42s");
    }
}
