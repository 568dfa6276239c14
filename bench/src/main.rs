//! `tidemark-bench`: the Rust side of the benchmark harness (`bench/run.sh` drives it).
//!
//! ```text
//! tidemark-bench gen [--dataset orders|wide] --rows N --out DIR
//!     Writes a deterministic dataset: orders (the default: orders.csv, orders.jsonl)
//!     or wide (wide.csv, wide.jsonl; see wide.rs), their .gz versions, schema.json and
//!     expected.json (row count and exact sums, for checking every engine's Parquet
//!     output).
//! tidemark-bench convert --format csv|jsonl|json|parquet|avro|orc --compression none|gzip [--schema FILE] [--records KEY] [--bad-rows fail|reject] [--threads N] IN OUT
//!     tidemark's converter (`tidemark::convert::convert`) on IN with the schema of FILE
//!     (a JSON list of columns as in bench/schema.json or a source's `schema`, nested types
//!     and `path`, `format`, `timezone` included; default: the orders schema),
//!     zstd level 3, Parquet to OUT; prints the stats (rows, exact sums of every
//!     numeric column, rows rejected) as JSON. `--bad-rows reject`: the policy
//!     `on_bad_row: reject`, with no cap. OUT `-`: decode only, nothing encoded
//!     (`tidemark::convert::count`, reconciliation's recount): the decoder's share.
//! tidemark-bench convert --source FILE [--threads N] IN OUT
//!     The same with the spec a source block gives IN (FILE: a source as the sources
//!     document spells it, a `"preset"` included; format and compression decided from IN's
//!     name as ingest decides them from the key; no partitions): line logs, presets.
//! tidemark-bench partition --format csv|jsonl --compression none|gzip [--schema FILE] [--threads N] --by COL[:TRANSFORM][=NAME] [--by …] IN OUTDIR
//!     What ingest does for `partitioning: {"columns": …}`
//!     (`tidemark::convert::convert_partitioned`, its default budget; one thread unless
//!     asked): one Parquet file per partition, each moved to its Hive directories under
//!     OUTDIR (`p=3/data.parquet`); prints rows, partitions, row groups, the rows
//!     spilled, the spill file's bytes and the seconds as JSON. BENCH_BUFFER_MIB and
//!     BENCH_SPILL=plain|lz4 set the budget's buffer and the spill's compression.
//! tidemark-bench ingest --source FILE [--concurrency N] IN…
//!     The ingest function's whole per-object path on local files
//!     (`tidemark::testing::ingest_local_files`): the source block of FILE (a source as the
//!     sources document spells it; bucket, prefix and output bucket are set), each IN placed
//!     in a landing folder and processed by one invocation of `tidemark::ingest::handle`, N
//!     objects at once (default 1): claim, pinned GET, conversion with the source's settings
//!     (threads: 2 on two CPUs or more, else 1), 8 MiB upload parts or partition files,
//!     commit, on the embedded backends (folders, SQLite) in a temporary directory. Prints the
//!     handler's summary and the seconds as JSON. For measuring what an object costs.
//! tidemark-bench spoil --every N IN OUT
//!     Copies the (uncompressed) CSV or JSON Lines file IN to OUT with the first digit of
//!     every Nth data line replaced by `x`: a bad `order_id` in CSV, invalid JSON in JSON
//!     Lines. For measuring the cost of rejecting rows.
//! tidemark-bench read --compression none|gzip FILE
//!     The floor: only read (and decompress) the bytes, through the same 64 KiB buffer
//!     and gzip decoder (flate2 + zlib-rs) as the converter; prints the byte counts.
//! tidemark-bench recompress [--level N] FILE.parquet
//!     The zstd floor of a Parquet file (any engine's): every page of every column chunk,
//!     read back uncompressed, compressed again at level N (default 3) with one reused
//!     context, as arrow-rs's writer does; prints the seconds spent in zstd alone and the
//!     bytes in and out. What any writer of those pages pays at that level.
//! tidemark-bench --version
//!     Prints the version: a whole Rust process with the converter linked, for the
//!     start-up comparison.
//! ```

use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use parquet::column::page::Page;
use parquet::file::reader::{FileReader, SerializedFileReader};
use tidemark::convert::{
    BadRows, Compression, ConvertSpec, CsvOptions, InputFormat, convert, count,
};
use tidemark::schema::ColumnSpec;

mod wide;

/// The columns of the orders dataset, shared with the Python engines (bench/schema.json).
const SCHEMA_JSON: &str = include_str!("../schema.json");

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tidemark-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: tidemark-bench gen [--dataset orders|wide] --rows N --out DIR
       tidemark-bench convert --format csv|jsonl|json --compression none|gzip [--schema FILE] [--records KEY] [--bad-rows fail|reject] [--threads N] IN OUT|-
       tidemark-bench partition --format csv|jsonl --compression none|gzip [--schema FILE] [--threads N] --by COL[:TRANSFORM][=NAME] IN OUTDIR
       tidemark-bench ingest --source FILE [--concurrency N] IN...
       tidemark-bench spoil --every N IN OUT
       tidemark-bench read --compression none|gzip FILE
       tidemark-bench recompress [--level N] FILE.parquet
       tidemark-bench --version";

fn run(args: &[String]) -> Result<()> {
    let Some((command, rest)) = args.split_first() else {
        return Err(USAGE.into());
    };
    match command.as_str() {
        "--version" | "-V" => {
            println!("tidemark-bench {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        "gen" => {
            let (opts, positional) = parse(rest, &["--dataset", "--rows", "--out"])?;
            if !positional.is_empty() {
                return Err(USAGE.into());
            }
            let rows = required(&opts, "--rows")?.replace('_', "").parse::<u64>()?;
            let out = Path::new(required(&opts, "--out")?);
            match option(&opts, "--dataset").unwrap_or("orders") {
                "orders" => generate(rows, out),
                "wide" => wide::generate(rows, out),
                other => Err(format!("unknown dataset {other:?}: orders or wide").into()),
            }
        }
        "convert" => {
            let (opts, positional) = parse(
                rest,
                &[
                    "--format",
                    "--compression",
                    "--schema",
                    "--bad-rows",
                    "--threads",
                    "--records",
                    "--source",
                ],
            )?;
            let [input, output] = positional.as_slice() else {
                return Err(USAGE.into());
            };
            let threads = option(&opts, "--threads").map_or(Ok(1), str::parse::<usize>)?;
            if let Some(file) = option(&opts, "--source") {
                return convert_with_source(file, threads, Path::new(input), Path::new(output));
            }
            let bad_rows = match option(&opts, "--bad-rows") {
                None | Some("fail") => BadRows::Fail,
                Some("reject") => BadRows::Reject { max: u64::MAX },
                Some(other) => return Err(format!("unknown policy {other:?}").into()),
            };
            let columns = match option(&opts, "--schema") {
                None => columns(SCHEMA_JSON)?,
                Some(file) => {
                    columns(&fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?)
                        .map_err(|e| format!("{file}: {e}"))?
                }
            };
            let format = match required(&opts, "--format")? {
                "csv" => InputFormat::Csv(CsvOptions::default()),
                "jsonl" => InputFormat::JsonLines,
                "json" => InputFormat::Json,
                "parquet" => InputFormat::Parquet,
                "avro" => InputFormat::Avro,
                "orc" => InputFormat::Orc,
                other => return Err(format!("unknown format {other:?}").into()),
            };
            let compression = compression(required(&opts, "--compression")?)?;
            // JSON documents: the key of each value's array of records.
            let records = option(&opts, "--records").map(str::to_owned);
            convert_file(
                (format, records),
                compression,
                bad_rows,
                threads,
                &columns,
                Path::new(input),
                Path::new(output),
            )
        }
        "partition" => {
            let (opts, positional) = parse(
                rest,
                &["--format", "--compression", "--schema", "--by", "--threads"],
            )?;
            let [input, output] = positional.as_slice() else {
                return Err(USAGE.into());
            };
            let columns = match option(&opts, "--schema") {
                None => columns(SCHEMA_JSON)?,
                Some(file) => {
                    columns(&fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?)?
                }
            };
            let format = match required(&opts, "--format")? {
                "csv" => InputFormat::Csv(CsvOptions::default()),
                "jsonl" => InputFormat::JsonLines,
                other => return Err(format!("unknown format {other:?}").into()),
            };
            let by: Vec<tidemark::convert::partition::PartitionColumn> = opts
                .iter()
                .filter(|(n, _)| *n == "--by")
                .map(|(_, v)| partition_column(v))
                .collect::<Result<_>>()?;
            if by.is_empty() {
                return Err(format!("give at least one --by\n{USAGE}").into());
            }
            let threads = option(&opts, "--threads").map_or(Ok(1), str::parse::<usize>)?;
            partition_file(
                format,
                compression(required(&opts, "--compression")?)?,
                threads,
                &columns,
                &by,
                Path::new(input),
                Path::new(output),
            )
        }
        "ingest" => {
            let (opts, positional) = parse(rest, &["--source", "--concurrency"])?;
            if positional.is_empty() {
                return Err(USAGE.into());
            }
            let file = required(&opts, "--source")?;
            let source: serde_json::Value = serde_json::from_str(
                &fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?,
            )
            .map_err(|e| format!("{file}: {e}"))?;
            let concurrency = option(&opts, "--concurrency").map_or(Ok(1), str::parse::<usize>)?;
            let inputs: Vec<PathBuf> = positional.iter().map(PathBuf::from).collect();
            ingest_files(&source, &inputs, concurrency)
        }
        "spoil" => {
            let (opts, positional) = parse(rest, &["--every"])?;
            let [input, output] = positional.as_slice() else {
                return Err(USAGE.into());
            };
            let every = required(&opts, "--every")?.parse::<usize>()?;
            spoil(every.max(1), Path::new(input), Path::new(output))
        }
        "read" => {
            let (opts, positional) = parse(rest, &["--compression"])?;
            let [input] = positional.as_slice() else {
                return Err(USAGE.into());
            };
            read_file(
                compression(required(&opts, "--compression")?)?,
                Path::new(input),
            )
        }
        "recompress" => {
            let (opts, positional) = parse(rest, &["--level"])?;
            let [input] = positional.as_slice() else {
                return Err(USAGE.into());
            };
            let level = option(&opts, "--level").map_or(Ok(3), str::parse::<i32>)?;
            recompress(level, Path::new(input))
        }
        _ => Err(USAGE.into()),
    }
}

/// `--name value` pairs, in order.
type Options<'a> = Vec<(&'a str, &'a str)>;

/// `--name value` options among `known`, and the positional arguments.
fn parse<'a>(args: &'a [String], known: &[&'a str]) -> Result<(Options<'a>, Vec<&'a str>)> {
    let (mut opts, mut positional) = (Vec::new(), Vec::new());
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if let Some(name) = known.iter().find(|k| **k == arg) {
            let value = it.next().ok_or_else(|| format!("{name} needs a value"))?;
            opts.push((*name, value.as_str()));
        } else if arg.starts_with("--") {
            return Err(format!("unknown option {arg}\n{USAGE}").into());
        } else {
            positional.push(arg.as_str());
        }
    }
    Ok((opts, positional))
}

/// The last value given for `name`, if any.
fn option<'a>(opts: &[(&str, &'a str)], name: &str) -> Option<&'a str> {
    opts.iter().rev().find(|(n, _)| *n == name).map(|(_, v)| *v)
}

fn required<'a>(opts: &[(&str, &'a str)], name: &str) -> Result<&'a str> {
    option(opts, name).ok_or_else(|| format!("missing {name}\n{USAGE}").into())
}

fn compression(name: &str) -> Result<Compression> {
    match name {
        "none" => Ok(Compression::None),
        "gzip" => Ok(Compression::Gzip),
        other => Err(format!("unknown compression {other:?}").into()),
    }
}

/// The columns of a schema file (bench/schema.json's format).
fn columns(json: &str) -> Result<Vec<ColumnSpec>> {
    Ok(serde_json::from_str(json)?)
}

// ---------------------------------------------------------------------------------
// convert and read

/// The converter as the ingest path calls it (`Source::convert_spec` with this schema):
/// default batch and row-group sizes, zstd level 3, the 64 GiB decoded-size cap; the
/// sums of every numeric column.
/// `convert --source FILE`: the spec a source block gives the file (format, compression
/// from its name, pattern, schema, policies; a `"preset"` expanded), as ingest builds it,
/// on `threads` threads (one unless asked: the one-core comparison is the default).
fn convert_with_source(file: &str, threads: usize, input: &Path, output: &Path) -> Result<()> {
    let mut block: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?,
    )
    .map_err(|e| format!("{file}: {e}"))?;
    for (k, v) in [("source_id", "bench"), ("bucket", "landing")] {
        block[k] = v.into();
    }
    block["output"]["bucket"] = "lake".into();
    // One file: no partitions (their cost is `partition`'s to measure).
    block["output"]["partitioning"] = "none".into();
    let doc = serde_json::json!({ "sources": [block] }).to_string();
    let config = tidemark::config::Config::from_json(&doc).map_err(|e| format!("{file}: {e}"))?;
    let key = input.file_name().and_then(|n| n.to_str()).unwrap_or("input");
    let mut spec = config.sources[0].convert_spec(key);
    spec.threads = threads;
    let input = File::open(input).map_err(|e| format!("{}: {e}", input.display()))?;
    let out = File::create(output).map_err(|e| format!("{}: {e}", output.display()))?;
    let mut out = BufWriter::with_capacity(1 << 20, out);
    let stats = convert(input, &spec, &mut out)?;
    out.flush()?;
    println!("{}", serde_json::to_string(&stats)?);
    Ok(())
}

fn convert_file(
    (format, records): (InputFormat, Option<String>),
    compression: Compression,
    bad_rows: BadRows,
    threads: usize,
    columns: &[ColumnSpec],
    input: &Path,
    output: &Path,
) -> Result<()> {
    let mut spec = base_spec(format, compression, columns);
    spec.json.records = records;
    spec.bad_rows = bad_rows;
    spec.threads = threads;
    spec.zstd_level = match std::env::var("BENCH_ZSTD_LEVEL") {
        // A source's `output.zstd_level`, for measuring other levels.
        Ok(level) => level
            .parse()
            .map_err(|e| format!("BENCH_ZSTD_LEVEL={level:?}: {e}"))?,
        Err(_) => 3,
    };
    // A source's `output.row_group_mib`, for measuring other row-group sizes.
    if let Ok(mib) = std::env::var("BENCH_ROW_GROUP_MIB") {
        spec.row_group_bytes = mib
            .parse::<usize>()
            .map_err(|e| format!("BENCH_ROW_GROUP_MIB={mib:?}: {e}"))?
            << 20;
    }
    // The converter's `page_memory_bytes`, for measuring what spilling pages costs.
    if let Ok(mib) = std::env::var("BENCH_PAGE_MEMORY_MIB") {
        spec.page_memory_bytes = mib
            .parse::<usize>()
            .map_err(|e| format!("BENCH_PAGE_MEMORY_MIB={mib:?}: {e}"))?
            << 20;
    }
    // A source's `output.page_kib`, for measuring page sizes.
    if let Ok(kib) = std::env::var("BENCH_PAGE_KIB") {
        spec.page_bytes = kib
            .parse::<usize>()
            .map_err(|e| format!("BENCH_PAGE_KIB={kib:?}: {e}"))?
            << 10;
    }
    // A source's `output.dictionary_kib`, for measuring dictionaries against their memory.
    if let Ok(kib) = std::env::var("BENCH_DICTIONARY_KIB") {
        spec.dictionary_bytes = kib
            .parse::<usize>()
            .map_err(|e| format!("BENCH_DICTIONARY_KIB={kib:?}: {e}"))?
            << 10;
    }
    let input = File::open(input).map_err(|e| format!("{}: {e}", input.display()))?;
    let stats = if output == Path::new("-") {
        count(input, &spec)?
    } else {
        let out = File::create(output).map_err(|e| format!("{}: {e}", output.display()))?;
        let mut out = BufWriter::with_capacity(1 << 20, out);
        let stats = convert(input, &spec, &mut out)?;
        // Flushed and closed, not synced: no peer syncs its output either (a sync was
        // 36-43 ms of a wide conversion's wall time, waiting for the disk).
        out.flush()?;
        stats
    };
    let mut printed = serde_json::to_value(&stats)?;
    printed["rejected"] = stats.rejects.len().into();
    println!("{printed}");
    Ok(())
}

/// The spec both conversions start from: the columns with their options (a `path` says where
/// a nested record holds the value), every numeric column summed, no decoded-size limit.
fn base_spec(format: InputFormat, compression: Compression, columns: &[ColumnSpec]) -> ConvertSpec {
    let mut spec = ConvertSpec::with_columns(format, columns);
    spec.compression = compression;
    spec.sum_columns = columns
        .iter()
        .filter(|c| c.ty.is_summable())
        .map(|c| c.name.clone())
        .collect();
    spec.max_decoded_bytes = Some(64 << 30);
    spec
}

/// `COL[:TRANSFORM][=NAME]` as a partition column.
fn partition_column(text: &str) -> Result<tidemark::convert::partition::PartitionColumn> {
    let (column, name) = match text.split_once('=') {
        Some((c, n)) => (c, Some(n.to_string())),
        None => (text, None),
    };
    let (from, transform) = match column.split_once(':') {
        Some((f, t)) => (f, serde_json::from_value(serde_json::json!(t))?),
        None => (column, tidemark::convert::partition::Transform::Identity),
    };
    Ok(tidemark::convert::partition::PartitionColumn {
        from: from.to_string(),
        name,
        transform,
    })
}

/// `input` converted into one file per partition of `by` under `output` (see the usage).
fn partition_file(
    format: InputFormat,
    compression: Compression,
    threads: usize,
    columns: &[ColumnSpec],
    by: &[tidemark::convert::partition::PartitionColumn],
    input: &Path,
    output: &Path,
) -> Result<()> {
    let mut spec = base_spec(format, compression, columns);
    spec.threads = threads;
    let mut budget = tidemark::convert::Budget::default();
    if let Ok(mib) = std::env::var("BENCH_BUFFER_MIB") {
        budget.buffer_bytes = mib
            .parse::<usize>()
            .map_err(|e| format!("BENCH_BUFFER_MIB={mib:?}: {e}"))?
            << 20;
    }
    match std::env::var("BENCH_SPILL").as_deref() {
        Err(_) => {}
        Ok("plain") => budget.compress_spill = false,
        Ok("lz4") => budget.compress_spill = true,
        Ok(other) => return Err(format!("BENCH_SPILL={other:?}: plain or lz4").into()),
    }
    fs::create_dir_all(output)?;
    let started = Instant::now();
    let source = File::open(input).map_err(|e| format!("{}: {e}", input.display()))?;
    let (stats, parts, routed) = tidemark::convert::convert_partitioned(
        source,
        &spec,
        by,
        &spec.sum_columns,
        100_000,
        budget,
        output,
    )?;
    let converted = started.elapsed().as_secs_f64();
    // Each partition's file under its Hive directories, as the lake has them.
    let mut rows = 0;
    for part in &parts {
        let dir = output.join(&part.dirs);
        fs::create_dir_all(&dir)?;
        fs::rename(&part.path, dir.join("data.parquet"))?;
        rows += part.rows;
    }
    if rows != stats.rows {
        return Err(format!("the partitions hold {rows} rows, the object {}", stats.rows).into());
    }
    println!(
        "{}",
        serde_json::json!({"rows": rows, "partitions": parts.len(),
                           "row_groups": stats.row_groups, "spilled": routed.spilled, "spill_bytes": routed.spill_bytes,
                           "switches": routed.switches, "seconds": converted})
    );
    Ok(())
}

/// The ingest function's per-object path on `inputs` (see the usage), in a temporary
/// directory beside the first input's (TMPDIR is left to the conversion's own files).
fn ingest_files(source: &serde_json::Value, inputs: &[PathBuf], concurrency: usize) -> Result<()> {
    let parent = inputs[0].parent().unwrap_or(Path::new("."));
    let dir = parent.join(format!(".tidemark-bench-ingest-{}", std::process::id()));
    fs::create_dir_all(&dir)?;
    let started = Instant::now();
    let done = tidemark::testing::ingest_local_files(&dir, source, inputs, concurrency);
    let seconds = started.elapsed().as_secs_f64();
    fs::remove_dir_all(&dir)?;
    let summary = done?;
    println!(
        "{}",
        serde_json::json!({"objects": summary.processed, "rows": summary.rows, "seconds": seconds})
    );
    Ok(())
}

/// Copies `input` to `output`, the first digit of every `every`th line after the first
/// (a CSV header, or a JSON line left clean) replaced by `x`.
fn spoil(every: usize, input: &Path, output: &Path) -> Result<()> {
    let text = fs::read(input).map_err(|e| format!("{}: {e}", input.display()))?;
    let mut out = BufWriter::new(File::create(output)?);
    let mut spoiled = 0u64;
    for (i, line) in text.split_inclusive(|&b| b == b'\n').enumerate() {
        let mut line = line.to_vec();
        if i > 0
            && i % every == 0
            && let Some(d) = line.iter_mut().find(|b| b.is_ascii_digit())
        {
            *d = b'x';
            spoiled += 1;
        }
        out.write_all(&line)?;
    }
    out.flush()?;
    println!("{}", serde_json::json!({"spoiled": spoiled}));
    Ok(())
}

/// Reads `input` to the end through the decoder the converter uses, into one reused
/// 64 KiB buffer (the converter's read buffer size).
fn read_file(compression: Compression, input: &Path) -> Result<()> {
    let file = File::open(input).map_err(|e| format!("{}: {e}", input.display()))?;
    let mut reader: Box<dyn Read> = match compression {
        Compression::None => Box::new(file),
        Compression::Gzip => Box::new(MultiGzDecoder::new(file)),
        Compression::Zstd => return Err("zstd is not benchmarked".into()),
    };
    let mut buf = vec![0u8; 64 << 10];
    let (mut decoded, mut newlines) = (0u64, 0u64);
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                decoded += n as u64;
                // Touch every byte, as any parser must.
                newlines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    println!(
        "{}",
        serde_json::json!({"bytes_read": fs::metadata(input)?.len(), "bytes_decoded": decoded, "newlines": newlines})
    );
    Ok(())
}

/// Compresses every page of `input` again at `level`, timing only the compression.
/// Data pages v2 keep their levels uncompressed (the format's rule), so only their values
/// are compressed, as a writer would.
fn recompress(level: i32, input: &Path) -> Result<()> {
    let file = File::open(input).map_err(|e| format!("{}: {e}", input.display()))?;
    let reader = SerializedFileReader::new(file)?;
    let mut compressor = zstd::bulk::Compressor::new(level)?;
    let mut out = Vec::new();
    let (mut pages, mut bytes_in, mut bytes_out) = (0u64, 0u64, 0u64);
    let mut seconds = 0f64;
    for group in 0..reader.num_row_groups() {
        let group = reader.get_row_group(group)?;
        for column in 0..group.num_columns() {
            let mut pages_of = group.get_column_page_reader(column)?;
            while let Some(page) = pages_of.get_next_page()? {
                let levels = match &page {
                    Page::DataPageV2 {
                        def_levels_byte_len,
                        rep_levels_byte_len,
                        ..
                    } => (def_levels_byte_len + rep_levels_byte_len) as usize,
                    _ => 0,
                };
                let values = &page.buffer()[levels..];
                out.clear();
                out.reserve(zstd::zstd_safe::compress_bound(values.len()));
                let started = Instant::now();
                compressor.compress_to_buffer(values, &mut out)?;
                seconds += started.elapsed().as_secs_f64();
                pages += 1;
                bytes_in += values.len() as u64;
                bytes_out += out.len() as u64;
            }
        }
    }
    println!(
        "{}",
        serde_json::json!({"level": level, "pages": pages, "bytes_in": bytes_in, "bytes_out": bytes_out, "zstd_seconds": seconds})
    );
    Ok(())
}

// ---------------------------------------------------------------------------------
// gen

/// splitmix64: a fixed seed makes the dataset identical on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

const COUNTRIES: [&str; 24] = [
    "DE", "FR", "GB", "US", "ES", "IT", "NL", "BE", "AT", "CH", "SE", "NO", "DK", "FI", "PL", "CZ",
    "PT", "IE", "CA", "AU", "JP", "BR", "MX", "IN",
];

/// Status and its weight in thousandths.
const STATUSES: [(&str, u64); 6] = [
    ("delivered", 500),
    ("shipped", 200),
    ("paid", 120),
    ("pending", 100),
    ("cancelled", 50),
    ("returned", 30),
];

const WORDS: [&str; 48] = [
    "please",
    "leave",
    "at",
    "the",
    "door",
    "ring",
    "twice",
    "gift",
    "wrap",
    "fragile",
    "call",
    "before",
    "delivery",
    "back",
    "entrance",
    "no",
    "plastic",
    "thanks",
    "urgent",
    "office",
    "reception",
    "floor",
    "2nd",
    "left",
    "side",
    "box",
    "neighbour",
    "Müller",
    "café",
    "garden",
    "shed",
    "weekend",
    "only",
    "after",
    "5pm",
    "birthday",
    "present",
    "don't",
    "knock",
    "dog",
    "friendly",
    "parcel",
    "locker",
    "code",
    "1234",
    "blue",
    "gate",
    "Zürich",
];

/// Exact totals of the generated data, written to expected.json.
#[derive(Default)]
struct Expected {
    rows: u64,
    int_sums: [i128; 4],     // order_id, customer_id, product_id, quantity
    cents_sums: [i128; 2],   // unit_price, total (values are cents / 100 exactly)
    string_bytes: [u64; 4],  // sku, country, status, note: UTF-8 bytes
    created_at_micros: i128, // sum of the timestamps as microseconds since the epoch
}

/// One generated row; prices in cents, time in milliseconds since the epoch.
struct Order<'a> {
    order_id: i64,
    customer_id: i64,
    product_id: i64,
    quantity: i32,
    unit_cents: i64,
    total_cents: i64,
    country: &'a str,
    status: &'a str,
    created_ms: i64,
    note: String,
}

/// 2024-01-01T00:00:00Z in milliseconds.
const START_MS: i64 = 1_704_067_200_000;

fn order<'a>(rng: &mut Rng, i: u64) -> Order<'a> {
    let product_id = 1 + rng.below(50_000) as i64;
    let quantity = if rng.below(100) < 95 {
        1 + rng.below(10)
    } else {
        1 + rng.below(500)
    } as i32;
    let unit_cents = 99 + rng.below(49_902) as i64;
    let mut w = rng.below(1000);
    let status = STATUSES
        .iter()
        .find(|(_, weight)| {
            let hit = w < *weight;
            w = w.saturating_sub(*weight);
            hit
        })
        .map_or("delivered", |(s, _)| s);
    let mut note = String::new();
    for k in 0..1 + rng.below(5) {
        if k > 0 {
            note.push(' ');
        }
        let word = rng.pick(&WORDS);
        if rng.below(100) < 12 {
            note.push('"');
            note.push_str(word);
            note.push('"');
        } else {
            note.push_str(word);
        }
        if rng.below(100) < 20 {
            note.push(',');
        }
    }
    Order {
        order_id: 1_000_000_001 + i as i64,
        customer_id: 1 + rng.below(2_000_000) as i64,
        product_id,
        quantity,
        unit_cents,
        total_cents: unit_cents * i64::from(quantity),
        country: rng.pick(&COUNTRIES),
        status,
        created_ms: START_MS + i as i64 * 31_000 + rng.below(30_000) as i64,
        note,
    }
}

fn cents(c: i64) -> String {
    format!("{}.{:02}", c / 100, c % 100)
}

/// `2024-01-01T00:00:31.123Z`.
fn iso8601(ms: i64) -> String {
    let (secs, milli) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{milli:03}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

/// Howard Hinnant's days-since-epoch → proleptic Gregorian date.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn csv_field(out: &mut Vec<u8>, s: &str) {
    if s.contains([',', '"', '\n', '\r']) {
        out.push(b'"');
        out.extend_from_slice(s.replace('"', "\"\"").as_bytes());
        out.push(b'"');
    } else {
        out.extend_from_slice(s.as_bytes());
    }
}

fn json_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            c if (c as u32) < 0x20 => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes())
            }
            c => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out.push(b'"');
}

const COLUMN_NAMES: &str =
    "order_id,customer_id,product_id,sku,quantity,unit_price,total,country,status,created_at,note";

/// The four data files of a generated dataset (`STEM.csv`, `STEM.jsonl` and their gzip,
/// level 6), written under `.tmp` names: the caller renames them once the dataset is whole,
/// so an interrupted run never leaves a dataset that looks complete.
pub struct DataFiles {
    csv: BufWriter<File>,
    jsonl: BufWriter<File>,
    csv_gz: GzEncoder<BufWriter<File>>,
    jsonl_gz: GzEncoder<BufWriter<File>>,
}

impl DataFiles {
    /// Creates the files in `dir`, the CSV ones starting with `csv_header`.
    pub fn create(dir: &Path, stem: &str, csv_header: &str) -> Result<Self> {
        let tmp = |suffix: &str| -> Result<BufWriter<File>> {
            let file = File::create(dir.join(format!("{stem}.{suffix}.tmp")))?;
            Ok(BufWriter::with_capacity(1 << 20, file))
        };
        let level = flate2::Compression::new(6);
        let mut files = Self {
            csv: tmp("csv")?,
            jsonl: tmp("jsonl")?,
            csv_gz: GzEncoder::new(tmp("csv.gz")?, level),
            jsonl_gz: GzEncoder::new(tmp("jsonl.gz")?, level),
        };
        files.csv.write_all(csv_header.as_bytes())?;
        files.csv_gz.write_all(csv_header.as_bytes())?;
        Ok(files)
    }

    /// Appends CSV text `csv` and JSON Lines text `jsonl`, plain and compressed.
    pub fn write(&mut self, csv: &[u8], jsonl: &[u8]) -> Result<()> {
        self.csv.write_all(csv)?;
        self.csv_gz.write_all(csv)?;
        self.jsonl.write_all(jsonl)?;
        self.jsonl_gz.write_all(jsonl)?;
        Ok(())
    }

    /// Flushes and closes the four files.
    pub fn finish(self) -> Result<()> {
        self.csv.into_inner().map_err(|e| e.into_error())?;
        self.jsonl.into_inner().map_err(|e| e.into_error())?;
        self.csv_gz
            .finish()?
            .into_inner()
            .map_err(|e| e.into_error())?;
        self.jsonl_gz
            .finish()?
            .into_inner()
            .map_err(|e| e.into_error())?;
        Ok(())
    }
}

fn generate(rows: u64, dir: &Path) -> Result<()> {
    fs::create_dir_all(dir)?;
    let path = |name: &str| -> PathBuf { dir.join(name) };
    // Written under temporary names and renamed at the end, so an interrupted run never
    // leaves a dataset that looks complete.

    let mut rng = Rng(0x7469_6465_6d61_726b); // "tidemark"
    let mut expected = Expected::default();
    let header = format!("{COLUMN_NAMES}\n");
    let mut files = DataFiles::create(dir, "orders", &header)?;
    let (mut c, mut j) = (Vec::with_capacity(1 << 20), Vec::with_capacity(2 << 20));
    for i in 0..rows {
        let o = order(&mut rng, i);
        let sku = format!("SKU-{:06}", o.product_id);
        let (unit, total, created) = (
            cents(o.unit_cents),
            cents(o.total_cents),
            iso8601(o.created_ms),
        );

        write!(
            c,
            "{},{},{},{sku},{},{unit},{total},{},{},{created},",
            o.order_id, o.customer_id, o.product_id, o.quantity, o.country, o.status
        )?;
        csv_field(&mut c, &o.note);
        c.push(b'\n');

        write!(
            j,
            r#"{{"order_id":{},"customer_id":{},"product_id":{},"sku":"{sku}","quantity":{},"unit_price":{unit},"total":{total},"country":"{}","status":"{}","created_at":"{created}","note":"#,
            o.order_id, o.customer_id, o.product_id, o.quantity, o.country, o.status
        )?;
        json_string(&mut j, &o.note);
        j.extend_from_slice(b"}\n");

        let e = &mut expected;
        e.rows += 1;
        e.int_sums[0] += i128::from(o.order_id);
        e.int_sums[1] += i128::from(o.customer_id);
        e.int_sums[2] += i128::from(o.product_id);
        e.int_sums[3] += i128::from(o.quantity);
        e.cents_sums[0] += i128::from(o.unit_cents);
        e.cents_sums[1] += i128::from(o.total_cents);
        e.string_bytes[0] += sku.len() as u64;
        e.string_bytes[1] += o.country.len() as u64;
        e.string_bytes[2] += o.status.len() as u64;
        e.string_bytes[3] += o.note.len() as u64;
        e.created_at_micros += i128::from(o.created_ms) * 1000;

        if c.len() >= 1 << 20 || i + 1 == rows {
            files.write(&c, &j)?;
            c.clear();
            j.clear();
        }
    }
    files.finish()?;

    let e = &expected;
    let expected_json = serde_json::json!({
        "rows": e.rows,
        "seed": "0x74696465_6d61726b",
        // Exact sums as decimal strings: integers, prices as exact decimals of cents,
        // timestamps as microseconds since the epoch; strings as total UTF-8 bytes.
        "sums": {
            "order_id": e.int_sums[0].to_string(),
            "customer_id": e.int_sums[1].to_string(),
            "product_id": e.int_sums[2].to_string(),
            "quantity": e.int_sums[3].to_string(),
            "unit_price": decimal_cents(e.cents_sums[0]),
            "total": decimal_cents(e.cents_sums[1]),
            "created_at": e.created_at_micros.to_string(),
        },
        "string_bytes": {
            "sku": e.string_bytes[0],
            "country": e.string_bytes[1],
            "status": e.string_bytes[2],
            "note": e.string_bytes[3],
        },
    });
    fs::write(
        path("expected.json.tmp"),
        serde_json::to_string_pretty(&expected_json)? + "\n",
    )?;
    fs::write(path("schema.json.tmp"), SCHEMA_JSON)?;
    for name in [
        "orders.csv",
        "orders.jsonl",
        "orders.csv.gz",
        "orders.jsonl.gz",
        "schema.json",
        "expected.json",
    ] {
        fs::rename(path(&format!("{name}.tmp")), path(name))?;
    }
    for name in [
        "orders.csv",
        "orders.jsonl",
        "orders.csv.gz",
        "orders.jsonl.gz",
    ] {
        println!(
            "{:>12} bytes  {}",
            fs::metadata(path(name))?.len(),
            path(name).display()
        );
    }
    Ok(())
}

fn decimal_cents(c: i128) -> String {
    let sign = if c < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", c.abs() / 100, c.abs() % 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(iso8601(START_MS), "2024-01-01T00:00:00.000Z");
        assert_eq!(
            iso8601(START_MS + 59 * 86_400_000 + 3_723_004),
            "2024-02-29T01:02:03.004Z"
        );
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn fields() {
        let mut out = Vec::new();
        csv_field(&mut out, r#"a "b", c"#);
        assert_eq!(out, br#""a ""b"", c""#);
        out.clear();
        json_string(&mut out, r#"a "b"\"#);
        assert_eq!(out, br#""a \"b\"\\""#);
        assert_eq!(decimal_cents(12_345), "123.45");
        assert_eq!(cents(105), "1.05");
    }

    #[test]
    fn the_dataset_is_deterministic() {
        let notes = |seed| {
            let mut rng = Rng(seed);
            (0..50).map(|i| order(&mut rng, i).note).collect::<Vec<_>>()
        };
        assert_eq!(notes(1), notes(1));
        assert_ne!(notes(1), notes(2));
    }
}
