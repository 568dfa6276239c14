//! The ingest function's memory: the largest object of each of the worst shapes (wide CSV,
//! wide JSON Lines, nested CloudTrail JSON Lines, and wide JSON Lines partitioned into 1,000
//! partitions) goes through the function's per-object path within the share of memory the
//! template's `MemorySize` and `ObjectConcurrency` leave one object ([`Function::per_object`]),
//! and that limit is enforced: a smaller one fails the object.
//!
//! Each object runs in a child process (`tests/src/bin/object_memory.rs`:
//! `tidemark::testing::ingest_local_files`, the ingest handler on folders and SQLite: claim,
//! pinned GET, conversion, 8 MiB upload parts or partition files, commit), with the
//! `GLIBC_TUNABLES` the template gives the function. The test sets the child's `RLIMIT_DATA`
//! with prlimit(2) before letting it start (the workspace forbids unsafe code, and with it a
//! `pre_exec` hook): an allocation past the limit fails and the child aborts. The child
//! reports its peak resident set (`VmHWM`, what `wait4` reports as `ru_maxrss`), which must
//! stay under the limit too. `RLIMIT_DATA`, not `RLIMIT_AS`: the address space holds the
//! binary's mapping and glibc's 64 MiB arena reservations, which take no memory; the data
//! limit counts private writable memory (the heap, the arenas' committed parts, the threads'
//! stacks), as close as an rlimit gets to what Lambda counts.
//!
//! The limit of the child, one object in a process of its own: the function's baseline
//! ([`BASELINE_MIB`]) and one object's share, less [`ROW_GROUP_ALLOWANCE_MIB`]. The child is a
//! debug build, whose own baseline is larger than the release build's (21 MiB): the test is
//! stricter than the function by that difference.
//!
//! "Largest": memory is bounded by the row group in progress, the upload parts in flight and
//! the partitioned writer's buffer, not by the object's size; past a row group or two the peak
//! is flat (bench/memory/results/2026-12-07/peaks.md, docs/pages/deploy.md, "Memory"). The test converts objects
//! of at least 3 row groups each (10 and 18 here), with `row_group_mib` at [`ROW_GROUP_MIB`]
//! instead of the default 64, so that a debug build gets through them in about a minute; a
//! smaller row group takes less memory (a closed row group goes to the uploader in 8 MiB parts,
//! and fewer of them are in flight), so the limit is lowered by the most that saved on any shape
//! in the release measurements. The partitioned object decodes to several times the writer's
//! 16 MiB buffer, so most of its rows are spilled and read back.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

const MIB: u64 = 1 << 20;

/// What the ingest function's process holds besides its objects, in MiB: the release ingest
/// path measured 21.1 MiB with a 1,000-row object (bench/memory/results/2026-12-07); the rest is left
/// for what the local path lacks (the AWS SDK's connections and TLS state, the runtime
/// client) (docs/pages/deploy.md, "Memory").
const BASELINE_MIB: u64 = 48;

/// Kept free beside the baseline and the objects, in MiB.
const HEADROOM_MIB: u64 = 32;

/// The row groups of the test's objects, in MiB of encoded data (a source's `row_group_mib`;
/// default 64).
const ROW_GROUP_MIB: u64 = 4;

/// What a process converting an object with [`ROW_GROUP_MIB`] row groups takes less than with
/// the default 64 MiB ones, at most, in MiB (bench/memory/results/2026-12-07: the largest
/// difference between the two on any shape at its largest size, wide JSON Lines of 1.5 GB,
/// 86.7 against 52.0 MiB): taken off the test's limit, so the smaller row groups are held to
/// the budget of the default ones.
const ROW_GROUP_ALLOWANCE_MIB: u64 = 35;

/// The lines of the template's block `name` (a parameter or a resource: from `  name:` to the
/// next line indented as little).
fn block<'t>(template: &'t str, name: &str) -> &'t str {
    let at = template
        .find(&format!("\n  {name}:\n"))
        .unwrap_or_else(|| panic!("template.yaml has no {name}"))
        + 1;
    let rest = &template[at..];
    let end = rest
        .match_indices("\n  ")
        .find(|(i, _)| !rest[i + 3..].starts_with(' '))
        .map_or(rest.len(), |(i, _)| i);
    &rest[..end]
}

/// The value of `key` (the first `key: …` line) in the template's block `name`.
fn template_value<'t>(template: &'t str, name: &str, key: &str) -> Option<&'t str> {
    block(template, name)
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{key}:")))
        .map(str::trim)
}

/// What the template gives the ingest function.
struct Function {
    /// `MemorySize`, MB.
    memory: u64,
    /// The default of `ObjectConcurrency`.
    concurrency: u64,
    /// Its `GLIBC_TUNABLES`, if any: the child runs with them.
    tunables: Option<String>,
}

impl Function {
    fn from_template() -> Self {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml");
        let template = std::fs::read_to_string(path).expect("template.yaml");
        let number = |name, key| -> u64 {
            template_value(&template, name, key)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("template.yaml: no number {key} in {name}"))
        };
        Self {
            memory: number("IngestFunction", "MemorySize"),
            concurrency: number("ObjectConcurrency", "Default"),
            tunables: template_value(&template, "IngestFunction", "GLIBC_TUNABLES")
                .map(str::to_string),
        }
    }

    /// The memory one object may take, in bytes: `MemorySize` less [`BASELINE_MIB`] and
    /// [`HEADROOM_MIB`], shared by the `ObjectConcurrency` objects in flight.
    fn per_object(&self) -> u64 {
        assert!(
            self.memory > BASELINE_MIB + HEADROOM_MIB,
            "MemorySize {} MB leaves nothing for objects",
            self.memory
        );
        (self.memory - BASELINE_MIB - HEADROOM_MIB) * MIB / self.concurrency
    }
}

// ---------------------------------------------------------------------------------------
// The inputs

/// The columns of the wide rows, those of `tidemark-bench gen --dataset wide`
/// (bench/schema-wide.json): 30 of every scalar type, NULLs in 10, long strings (a user agent of
/// ≈110–190 bytes, a message of ≈200–800 bytes with commas, quotes and non-ASCII),
/// high-cardinality strings (a UUID, 40- and 64-digit hex) beside low-cardinality ones.
fn wide_columns(partitioned: bool) -> Value {
    let mut columns: Value =
        serde_json::from_str(include_str!("../../bench/schema-wide.json")).expect("the schema");
    if partitioned {
        columns
            .as_array_mut()
            .expect("a list")
            .push(json!({"name": "p", "type": "string", "nullable": false}));
    }
    columns
}

/// The words of the messages: commas, quotes, a backslash, non-ASCII of 2, 3 and 4 bytes.
const WORDS: &str = "Zahlung eingegangen, Lieferung «Express» nach Genève; 東京 → 🚚 \"quoted\" \
    say \"hi\", back\\slash 100% smörgåsbord retry timeout Ωmega €12,50 please later";

fn hex(rng: &mut ChaCha8Rng, digits: usize) -> String {
    (0..digits)
        .map(|_| char::from_digit(rng.random_range(0..16), 16).expect("a digit"))
        .collect()
}

fn words(rng: &mut ChaCha8Rng, bytes: usize) -> String {
    let vocabulary: Vec<&str> = WORDS.split_whitespace().collect();
    let mut s = String::new();
    while s.len() < bytes {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(vocabulary[rng.random_range(0..vocabulary.len())]);
        if rng.random_range(0..4) == 0 {
            s.push_str(&rng.random_range(0..100_000).to_string());
        }
    }
    s
}

/// NULL in `percent` of the rows, else `value`'s.
fn maybe(
    rng: &mut ChaCha8Rng,
    percent: u32,
    value: impl FnOnce(&mut ChaCha8Rng) -> Value,
) -> Value {
    if rng.random_range(0..100) < percent {
        Value::Null
    } else {
        value(rng)
    }
}

fn pick(rng: &mut ChaCha8Rng, items: &[&str]) -> Value {
    json!(items[rng.random_range(0..items.len())])
}

fn date(days: i64) -> Value {
    let at = chrono::DateTime::from_timestamp(days * 86_400, 0).expect("a date");
    json!(at.format("%Y-%m-%d").to_string())
}

fn time(micros: i64) -> Value {
    let at = chrono::DateTime::from_timestamp_micros(micros).expect("a time");
    json!(at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string())
}

/// One wide row (see [`wide_columns`]).
fn wide_row(rng: &mut ChaCha8Rng, i: u64) -> Vec<Value> {
    let day = 19_723 + (i / 20_000) as i64; // 2024-01-01 on
    let created = day * 86_400_000_000 + rng.random_range(0..86_400_000_000i64);
    let uuid = uuid::Uuid::from_u128(rng.random()).to_string();
    let agent = format!(
        "Mozilla/5.0 (Linux; Android 14; Pixel {} Pro) AppleWebKit/537.36 (KHTML, like Gecko) \
         Chrome/{}.0.{}.64 Mobile Safari/537.36{}",
        rng.random_range(1..99),
        rng.random_range(100..999),
        rng.random_range(1000..9999),
        " [FB]".repeat(rng.random_range(0..12)),
    );
    let message_len = rng.random_range(200..800);
    vec![
        json!(5_000_000_001 + i),
        json!(uuid),
        json!(hex(rng, 40)),
        maybe(rng, 7, |r| json!(r.random_range(1..10_000_000))),
        json!(rng.random_range(1..500)),
        json!(format!("event_{}", rng.random_range(0..12))),
        pick(rng, &["web", "ios", "android", "desktop"]),
        json!(format!("region-{}", rng.random_range(1..6))),
        pick(rng, &["EUR", "USD", "GBP", "JPY", "CHF"]),
        maybe(rng, 30, |r| {
            pick(r, &["gold", "silver", "bronze", "trial", "internal"])
        }),
        maybe(rng, 25, |r| {
            let page = r.random_range(0..1000);
            let q = words(r, 40).replace(' ', "+");
            json!(format!(
                "https://shop.example.de/p/{page}?q={q}&id={}",
                r.random::<u32>()
            ))
        }),
        json!(agent),
        json!(words(rng, message_len)),
        json!(hex(rng, 64)),
        json!(rng.random_range(0..100) < 45),
        maybe(rng, 10, |r| json!(r.random_range(0..100) < 60)),
        date(day),
        maybe(rng, 12, |r| date(-10_958 + r.random_range(0..24_837))),
        time(created),
        maybe(rng, 15, |r| {
            time(created + r.random_range(0..3_600_000_000i64))
        }),
        json!([200, 200, 200, 201, 204, 301, 304, 400, 404, 503][rng.random_range(0..10)]),
        maybe(rng, 30, |r| json!(r.random_range(0..6))),
        json!(rng.random_range(-3..98)),
        json!(rng.random_range(0..1i64 << 62)),
        maybe(rng, 10, |r| {
            json!(r.random_range(-1_000_000_000_000i64..1_000_000_000_000))
        }),
        maybe(rng, 5, |r| {
            json!(f64::from(r.random_range(0..60_000_000)) / 1e3)
        }),
        json!(f64::from(rng.random_range(-1_000_000_000..1_000_000_000)) / 1e6),
        maybe(rng, 20, |r| {
            json!(f64::from(r.random_range(-90_000_000..90_000_000)) / 1e6)
        }),
        maybe(rng, 40, |r| {
            let whole = r.random_range(-10_000_000_000i64..10_000_000_000);
            json!(format!("{whole}.{:04}", r.random_range(0..10_000)))
        }),
        json!(format!(
            "{}.{:02}",
            rng.random_range(0..1_000_000),
            rng.random_range(0..100)
        )),
    ]
}

/// `rows` wide rows as CSV (with a header) and as JSON Lines, each with the column `p`
/// (`event_id % partitions`, a string) when `partitions` is given: rows in id order, so every
/// batch spreads over all the partitions.
fn wide(rows: u64, partitions: Option<u64>, csv: &Path, jsonl: &Path) {
    let names: Vec<String> = wide_columns(partitions.is_some())
        .as_array()
        .expect("a list")
        .iter()
        .map(|c| c["name"].as_str().expect("a name").to_string())
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(47);
    let mut c = std::io::BufWriter::new(std::fs::File::create(csv).expect("csv"));
    let mut j = std::io::BufWriter::new(std::fs::File::create(jsonl).expect("jsonl"));
    writeln!(c, "{}", names.join(",")).expect("write");
    for i in 0..rows {
        let mut row = wide_row(&mut rng, i);
        if let Some(n) = partitions {
            row.push(json!(((5_000_000_001 + i) % n).to_string()));
        }
        let fields: Vec<String> = row
            .iter()
            .map(|v| match v {
                Value::Null => String::new(),
                Value::String(s) if s.contains([',', '"', '\n']) => {
                    format!("\"{}\"", s.replace('"', "\"\""))
                }
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        writeln!(c, "{}", fields.join(",")).expect("write");
        let object: serde_json::Map<String, Value> = names.iter().cloned().zip(row).collect();
        writeln!(j, "{}", Value::Object(object)).expect("write");
    }
    c.flush().expect("flush");
    j.flush().expect("flush");
}

/// `records` CloudTrail records as JSON Lines by the nested fixtures' generator
/// (tests/fixtures/nested/generate.py), and the source's columns and policies.
fn cloudtrail(records: u64, dir: &Path) -> (PathBuf, Value, Value) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/nested/generate.py");
    let out = Command::new("python3")
        .args([script, "--out"])
        .arg(dir)
        .args([
            "--records",
            &records.to_string(),
            "--datasets",
            "cloudtrail",
        ])
        .output()
        .unwrap_or_else(|e| panic!("python3 {script}: {e}"));
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |name: &str| -> Value {
        serde_json::from_slice(&std::fs::read(dir.join(name)).expect(name)).expect(name)
    };
    (
        dir.join("cloudtrail.jsonl"),
        read("cloudtrail.schema.json"),
        read("cloudtrail.policies.json"),
    )
}

// ---------------------------------------------------------------------------------------
// The child

/// What the child reported.
#[derive(Debug)]
struct Run {
    ok: bool,
    report: Value,
    stderr: String,
    peak: u64,
}

/// `object_memory` on `input` under `source`, its `RLIMIT_DATA` set to `limit` bytes before it
/// starts.
fn run(source: &Value, input: &Path, limit: u64, tunables: Option<&str>) -> Run {
    let dir = input.parent().expect("a folder");
    let source_file = dir.join(format!(
        "{}.source.json",
        source["source_id"].as_str().expect("an id")
    ));
    std::fs::write(&source_file, source.to_string()).expect("the source file");
    let mut command = Command::new(env!("CARGO_BIN_EXE_object_memory"));
    match tunables {
        Some(t) => command.env("GLIBC_TUNABLES", t),
        None => command.env_remove("GLIBC_TUNABLES"),
    };
    let mut child = command
        .arg("--source")
        .arg(&source_file)
        .arg("--wait")
        .arg(input)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the child");
    let data = rustix::process::Resource::Data;
    let rlimit = rustix::process::Rlimit {
        current: Some(limit),
        maximum: Some(limit),
    };
    rustix::process::prlimit(Some(rustix::process::Pid::from_child(&child)), data, rlimit)
        .expect("prlimit RLIMIT_DATA on the child");
    child
        .stdin
        .take()
        .expect("its stdin")
        .write_all(b"go\n")
        .expect("start the child");
    let out = child.wait_with_output().expect("the child ends");
    let report: Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null);
    Run {
        ok: out.status.success(),
        peak: report["peak_rss_kib"].as_u64().unwrap_or(0) * 1024,
        report,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB as f64)
}

/// One shape: its source, its input, and the row groups (or files) that show it is past the
/// level-off size.
struct Shape {
    name: &'static str,
    source: Value,
    input: PathBuf,
    at_least: u64,
}

#[test]
fn the_largest_object_of_each_shape_converts_under_the_per_object_limit() {
    let function = Function::from_template();
    let per_object = function.per_object();
    // One object in a process of its own: the baseline and one object's share, less what
    // the smaller row group saves.
    let limit = (BASELINE_MIB - ROW_GROUP_ALLOWANCE_MIB) * MIB + per_object;
    let tunables = function.tunables.as_deref();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let d = dir.path();

    // 60,000 wide rows: 10 row groups of 4 MiB. 40,000 partitioned: ≈60 MB of JSON, several
    // times the partitioned writer's 16 MiB buffer once decoded, over 1,000 partitions.
    wide(60_000, None, &d.join("wide.csv"), &d.join("wide.jsonl"));
    wide(1_000, None, &d.join("tiny.csv"), &d.join("tiny.jsonl"));
    let partitioned = d.join("partitioned");
    std::fs::create_dir_all(&partitioned).expect("a folder");
    wide(
        40_000,
        Some(1000),
        &partitioned.join("wide-p.csv"),
        &partitioned.join("wide-p.jsonl"),
    );
    let nested = d.join("nested");
    let (trail, trail_columns, policies) = cloudtrail(120_000, &nested);

    let output = |partitioning: Option<Value>| {
        let mut o = json!({"prefix": "out/", "row_group_mib": ROW_GROUP_MIB});
        if let Some(p) = partitioning {
            o["partitioning"] = p;
        }
        o
    };
    let wide_source = |id: &str, format: &str, partitioned: bool| {
        json!({"source_id": id, "format": format,
            "schema": wide_columns(partitioned), "sum_columns": ["bytes_in", "fee"],
            "output": output(partitioned.then(|| json!({"columns": [{"from": "p"}]})))})
    };
    let mut trail_source = json!({"source_id": "cloudtrail", "format": "jsonl",
        "schema": trail_columns, "output": output(None)});
    for (k, v) in policies.as_object().expect("policies") {
        trail_source[k] = v.clone();
    }
    let shapes = [
        Shape {
            name: "wide CSV",
            source: wide_source("wide_csv", "csv", false),
            input: d.join("wide.csv"),
            at_least: 3,
        },
        Shape {
            name: "wide JSON Lines",
            source: wide_source("wide_jsonl", "jsonl", false),
            input: d.join("wide.jsonl"),
            at_least: 3,
        },
        Shape {
            name: "nested CloudTrail JSON Lines",
            source: trail_source,
            input: trail,
            at_least: 3,
        },
        Shape {
            name: "wide JSON Lines into 1,000 partitions",
            source: wide_source("wide_p", "jsonl", true),
            input: partitioned.join("wide-p.jsonl"),
            at_least: 1000,
        },
    ];
    let mut failures = Vec::new();
    let mut peaks = Vec::new();
    for shape in &shapes {
        let size = std::fs::metadata(&shape.input).expect("the input").len();
        let r = run(&shape.source, &shape.input, limit, tunables);
        eprintln!(
            "{}: {} in, peak RSS {} of {} allowed; {}",
            shape.name,
            mib(size),
            mib(r.peak),
            mib(limit),
            r.report
        );
        peaks.push(r.peak);
        if !r.ok {
            failures.push(format!(
                "{}: the object failed under RLIMIT_DATA {}: {}",
                shape.name,
                mib(limit),
                r.stderr.trim()
            ));
        } else if r.peak > limit {
            failures.push(format!(
                "{}: peak RSS {} over {}",
                shape.name,
                mib(r.peak),
                mib(limit)
            ));
        } else if r.report["row_groups"].as_u64().unwrap_or(0) < shape.at_least {
            failures.push(format!(
                "{}: {} row groups (at least {} wanted): not past the level-off size",
                shape.name, r.report["row_groups"], shape.at_least
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "the ingest function ({} MB, {} objects at once) leaves {} per object ({} for a \
         process with one object of {ROW_GROUP_MIB} MiB row groups):\n{}",
        function.memory,
        function.concurrency,
        mib(per_object),
        mib(limit),
        failures.join("\n")
    );

    // The limit is enforced: halfway between what a 1,000-row object and the wide CSV object
    // take, the small one converts and the large one fails.
    let small = &shapes[0].source;
    let tiny = run(small, &d.join("tiny.csv"), limit, tunables);
    assert!(tiny.ok, "the 1,000-row object failed: {}", tiny.stderr);
    let between = (tiny.peak + peaks[0]) / 2;
    let tiny = run(small, &d.join("tiny.csv"), between, tunables);
    assert!(
        tiny.ok,
        "the 1,000-row object failed under RLIMIT_DATA {}: {}",
        mib(between),
        tiny.stderr
    );
    let large = run(small, &shapes[0].input, between, tunables);
    assert!(
        !large.ok,
        "RLIMIT_DATA {} did not stop the wide CSV object (peak {}): the limit is not enforced",
        mib(between),
        mib(large.peak)
    );
}
