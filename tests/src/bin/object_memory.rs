//! One invocation of the ingest handler on local files, through the function's per-object path
//! (`tidemark::testing::ingest_local_files`: claim, pinned GET, conversion, 8 MiB upload parts
//! or partition files, commit; on folders and SQLite instead of S3 and DynamoDB), for the
//! memory test (`tests/tests/memory.rs`), which runs it under an enforced limit.
//!
//! ```text
//! object_memory --source FILE [--concurrency N] [--wait] IN...
//! ```
//!
//! FILE holds a source block as the sources document spells it. `--wait`: read one line from
//! stdin before starting (the parent sets this process's limits first). At the end it prints
//! one JSON line: objects, rows, the Parquet files written and their row groups (read back
//! from their footers), seconds, and this process's peak resident set (`VmHWM` of
//! `/proc/self/status`, in KiB: what `wait4`'s `ru_maxrss` reports). Its working files go to a
//! directory beside the first input (so that the inputs are hard-linked, not copied), removed
//! at the end.

use std::path::PathBuf;
use std::time::Instant;

use parquet::file::reader::{FileReader, SerializedFileReader};
use serde_json::json;

fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// The Parquet files under `dir` (not the store's own entries) and their row groups.
fn parquet_files(dir: &std::path::Path) -> (usize, usize) {
    let (mut files, mut row_groups) = (0, 0);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(".tidemark") {
            continue;
        }
        if path.is_dir() {
            let (f, g) = parquet_files(&path);
            files += f;
            row_groups += g;
        } else if name.ends_with(".parquet") {
            let file = std::fs::File::open(&path).expect("an output file");
            let reader = SerializedFileReader::new(file).expect("a Parquet file");
            files += 1;
            row_groups += reader.metadata().num_row_groups();
        }
    }
    (files, row_groups)
}

fn main() {
    let mut source = None;
    let mut concurrency = 1;
    let mut wait = false;
    let mut inputs = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--source" => source = args.next(),
            "--concurrency" => {
                concurrency = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--concurrency N")
            }
            "--wait" => wait = true,
            _ => inputs.push(PathBuf::from(arg)),
        }
    }
    let source = source.expect("--source FILE");
    assert!(!inputs.is_empty(), "no input file");
    let source: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&source).expect("the source file"))
            .expect("the source file is JSON");
    if wait {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).expect("stdin");
    }
    let dir = inputs[0]
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .join(format!(".object-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a working directory");
    let started = Instant::now();
    let done = tidemark::testing::ingest_local_files(&dir, &source, &inputs, concurrency);
    let seconds = started.elapsed().as_secs_f64();
    let peak = status_kib("VmHWM:");
    let (files, row_groups) = parquet_files(&dir.join("buckets/lake"));
    let _ = std::fs::remove_dir_all(&dir);
    match done {
        Ok(summary) => println!(
            "{}",
            json!({"objects": summary.processed, "rows": summary.rows, "files": files,
                   "row_groups": row_groups, "seconds": seconds, "peak_rss_kib": peak})
        ),
        Err(e) => {
            eprintln!("object_memory: {e}");
            std::process::exit(1);
        }
    }
}
