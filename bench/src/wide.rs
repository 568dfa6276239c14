//! The `wide` dataset (`tidemark-bench gen --dataset wide`): 30 columns of every type
//! the schema format has but `float32`, unlike the orders dataset in what makes parsing
//! hard: NULLs in 11 columns (integers, floats, decimals, dates, timestamps, bools and
//! strings), long strings (a user agent of ≈100–200 bytes, a message of ≈200–800 bytes
//! with commas, `"quotes"`, tabs, backslashes and non-ASCII), high-cardinality strings
//! (a UUID, 40- and 64-digit hex hashes) next to low-cardinality ones (4–12 values),
//! decimals, dates before 1970, timestamps with UTC offsets, integers beyond 2^53.
//!
//! The spelling, chosen so that every engine of the benchmark reads the same values:
//! - a NULL is an empty CSV field; in JSON Lines `null`, or the key left out (for
//!   `retry_count` and `processed_at`). No string is ever empty, so the empty CSV field
//!   of a string column is NULL for every engine (tidemark's `empty_strings: null`).
//! - decimals are plain text in CSV and JSON *strings* in JSON Lines (`"amount":"12.5"`),
//!   as money usually is in JSON: polars reads a JSON number through f64, which loses
//!   digits of a `decimal(18,4)`.
//! - in JSON Lines the message's non-ASCII characters are written as `\uXXXX` escapes
//!   (surrogate pairs beyond the BMP) in every other row, and as UTF-8 in the others.
//! - no value holds a line break (pyarrow's CSV reader needs `newlines_in_values` for
//!   that, which the orders benchmark does not set).
//! - floats have 3 or 6 digits after the point, some in exponent form (`1.234567e2`),
//!   so that their exact sums are known.

use std::fmt::Write as _;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::{DataFiles, Result, Rng, civil_from_days, csv_field, json_string};

/// The columns, shared with the Python engines (bench/schema-wide.json).
pub const SCHEMA_JSON: &str = include_str!("../schema-wide.json");

/// One value as written in both formats.
enum Cell {
    Null,
    /// An integer, bare in both formats.
    Int(i64),
    /// A float or decimal written as `text`, exactly `unscaled × 10^-scale`; a JSON
    /// string rather than a number when `json_string`.
    Fixed {
        unscaled: i128,
        scale: u32,
        text: String,
        json_string: bool,
    },
    Bool(bool),
    /// Days since the epoch.
    Date(i64),
    /// Microseconds since the epoch, and the text (which may carry an offset).
    Timestamp(i64, String),
    Str(String),
}

/// What the generator knows about one column, for expected.json.
#[derive(Default)]
struct Totals {
    nulls: u64,
    /// Integers, dates (days), timestamps (µs), floats and decimals (unscaled).
    sum: i128,
    scale: u32,
    trues: u64,
    string_bytes: u64,
}

const EVENT_TYPES: [&str; 12] = [
    "page_view",
    "click",
    "search",
    "add_to_cart",
    "remove_from_cart",
    "checkout",
    "purchase",
    "refund",
    "login",
    "logout",
    "signup",
    "error",
];
const PLATFORMS: [&str; 4] = ["web", "ios", "android", "desktop"];
const REGIONS: [&str; 9] = [
    "eu-west-1",
    "eu-central-1",
    "eu-north-1",
    "us-east-1",
    "us-east-2",
    "us-west-2",
    "ap-northeast-1",
    "ap-southeast-2",
    "sa-east-1",
];
const CURRENCIES: [&str; 5] = ["EUR", "USD", "GBP", "JPY", "CHF"];
const LABELS: [&str; 5] = ["gold", "silver", "bronze", "trial", "internal"];
const HTTP_STATUSES: [i64; 12] = [200, 200, 200, 200, 201, 204, 301, 304, 400, 404, 429, 503];
/// (offset in minutes, spelling) of the time zones `processed_at` is written in.
const OFFSETS: [(i64, &str); 6] = [
    (0, "Z"),
    (0, "+00:00"),
    (120, "+02:00"),
    (-330, "-05:30"),
    (540, "+09:00"),
    (345, "+05:45"),
];
const HOSTS: [&str; 6] = [
    "www.example.com",
    "news.example.org",
    "shop.example.de",
    "search.example.net",
    "blog.example.co.uk",
    "m.example.jp",
];
const AGENTS: [&str; 5] = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{a}.0.{b}.{c} Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/{a}.1 Safari/605.1.15",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_{a} like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1 [FBAN/FBIOS;FBAV/{b}.0.0.{c};FBBV/{b}]",
    "Mozilla/5.0 (Linux; Android 14; Pixel {a} Pro) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{b}.0.{c}.64 Mobile Safari/537.36",
    "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:{a}.0) Gecko/20100101 Firefox/{a}.0 \"custom-build\", locale=de-CH",
];
const WORDS: [&str; 40] = [
    "the",
    "order",
    "was",
    "delivered",
    "to",
    "Müller",
    "in",
    "Zürich",
    "café",
    "naïve",
    "façade",
    "東京",
    "Ωmega",
    "🚚",
    "😀",
    "price:",
    "€12,50",
    "\"quoted\"",
    "say \"hi\",",
    "C:\\temp\\file.txt",
    "a\tb",
    "back\\slash",
    "customer",
    "said,",
    "please",
    "retry",
    "later",
    "timeout",
    "after",
    "30s",
    "status",
    "unknown",
    "ok",
    "crème",
    "brûlée",
    "smörgåsbord",
    "Ελλάδα",
    "Россия",
    "100%",
    "{json: 'like'}",
];

/// 2024-01-01T00:00:00Z in microseconds.
const START_US: i64 = 1_704_067_200_000_000;

fn hex(rng: &mut Rng, digits: usize) -> String {
    let mut s = String::with_capacity(digits + 16);
    while s.len() < digits {
        write!(s, "{:016x}", rng.next()).unwrap();
    }
    s.truncate(digits);
    s
}

/// `unscaled × 10^-scale` as text: `-12.3400`, or with trailing zeros trimmed (`-12.34`,
/// `7`) when `trim`.
fn fixed(unscaled: i128, scale: u32, trim: bool) -> String {
    let sign = if unscaled < 0 { "-" } else { "" };
    let p = 10i128.pow(scale);
    let int = unscaled.abs() / p;
    let mut frac = format!("{:0w$}", unscaled.abs() % p, w = scale as usize);
    if scale == 0 {
        frac.clear();
    }
    if trim {
        while frac.ends_with('0') {
            frac.pop();
        }
    }
    if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    }
}

/// `unscaled × 10^-6` in exponent form with one digit before the point: `1.234567e2`.
fn exponent(unscaled: i128) -> String {
    let sign = if unscaled < 0 { "-" } else { "" };
    let digits = unscaled.abs().to_string();
    let exp = digits.len() as i64 - 1 - 6;
    let (first, rest) = digits.split_at(1);
    let rest = rest.trim_end_matches('0');
    if rest.is_empty() {
        format!("{sign}{first}e{exp}")
    } else {
        format!("{sign}{first}.{rest}e{exp}")
    }
}

fn date_text(days: i64) -> String {
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

/// `micros` (UTC) as local time at `offset_min` with `frac` fraction digits (0, 3 or 6;
/// the digits dropped must be zero) and the offset's spelling.
fn timestamp_text(micros: i64, offset_min: i64, zone: &str, frac: usize) -> String {
    let local = micros + offset_min * 60_000_000;
    let (secs, us) = (local.div_euclid(1_000_000), local.rem_euclid(1_000_000));
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let mut s = format!(
        "{}T{:02}:{:02}:{:02}",
        date_text(days),
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    );
    match frac {
        0 => debug_assert_eq!(us, 0),
        3 => write!(s, ".{:03}", us / 1000).unwrap(),
        _ => write!(s, ".{us:06}").unwrap(),
    }
    s.push_str(zone);
    s
}

/// Words separated by spaces or commas, at least `min_bytes` long.
fn words(rng: &mut Rng, min_bytes: usize) -> String {
    let mut s = String::new();
    while s.len() < min_bytes {
        if !s.is_empty() {
            s.push(if rng.below(8) == 0 { ',' } else { ' ' });
            if s.ends_with(',') {
                s.push(' ');
            }
        }
        s.push_str(rng.pick(&WORDS));
    }
    s
}

/// `None` with probability `percent`%, else `Some(f())`.
fn maybe<T>(rng: &mut Rng, percent: u64, f: impl FnOnce(&mut Rng) -> T) -> Option<T> {
    if rng.below(100) < percent {
        None
    } else {
        Some(f(rng))
    }
}

fn int(v: Option<i64>) -> Cell {
    v.map_or(Cell::Null, Cell::Int)
}

fn string(v: Option<String>) -> Cell {
    v.map_or(Cell::Null, Cell::Str)
}

/// One row, in schema order.
fn row(rng: &mut Rng, i: u64) -> Vec<Cell> {
    let created = START_US + i as i64 * 2_500_000 + rng.below(2_500_000) as i64;
    let status = HTTP_STATUSES[rng.below(HTTP_STATUSES.len() as u64) as usize];
    let agent = rng
        .pick(&AGENTS)
        .replace("{a}", &(10 + rng.below(120)).to_string())
        .replace("{b}", &(100 + rng.below(400)).to_string())
        .replace("{c}", &rng.below(10_000).to_string());
    let message_len = 200 + rng.below(600) as usize;
    let float = |unscaled: i128, scale: u32, text: String| Cell::Fixed {
        unscaled,
        scale,
        text,
        json_string: false,
    };
    vec![
        Cell::Int(5_000_000_001 + i as i64),
        Cell::Str({
            let h = hex(rng, 32);
            format!(
                "{}-{}-{}-{}-{}",
                &h[..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..]
            )
        }),
        Cell::Str(hex(rng, 40)),
        int(maybe(rng, 7, |r| 1 + r.below(10_000_000) as i64)),
        Cell::Int(1 + rng.below(500) as i64),
        Cell::Str(rng.pick(&EVENT_TYPES).into()),
        Cell::Str(rng.pick(&PLATFORMS).into()),
        Cell::Str(rng.pick(&REGIONS).into()),
        Cell::Str(rng.pick(&CURRENCIES).into()),
        string(maybe(rng, 30, |r| r.pick(&LABELS).into())),
        string(maybe(rng, 25, |r| {
            let host = r.pick(&HOSTS);
            let q = words(r, 10).replace([' ', '\t'], "+");
            format!(
                "https://{host}/p/{}?q={q}&utm_source=mail&id={}",
                r.below(1000),
                r.below(1 << 40)
            )
        })),
        Cell::Str(agent),
        Cell::Str(words(rng, message_len)),
        Cell::Str(hex(rng, 64)),
        Cell::Bool(rng.below(100) < 45),
        maybe(rng, 10, |r| r.below(100) < 60).map_or(Cell::Null, Cell::Bool),
        Cell::Date(created.div_euclid(86_400_000_000)),
        // 1940-01-01 (-10958) to 2007-12-31 (13878).
        maybe(rng, 12, |r| -10_958 + r.below(24_837) as i64).map_or(Cell::Null, Cell::Date),
        Cell::Timestamp(created, timestamp_text(created, 0, "Z", 6)),
        maybe(rng, 15, |r| {
            let (offset, zone) = OFFSETS[r.below(OFFSETS.len() as u64) as usize];
            let frac = [0, 3, 6][r.below(3) as usize];
            let unit = [1_000_000, 1_000, 1][frac / 3];
            let at = (created + r.below(3_600_000_000) as i64) / unit * unit;
            (at, timestamp_text(at, offset, zone, frac))
        })
        .map_or(Cell::Null, |(at, text)| Cell::Timestamp(at, text)),
        Cell::Int(status),
        int(maybe(rng, 30, |r| r.below(6) as i64)),
        Cell::Int(-3 + rng.below(101) as i64),
        Cell::Int(rng.below(1 << 62) as i64),
        int(maybe(rng, 10, |r| {
            r.below(2_000_000_000_001) as i64 - 1_000_000_000_000
        })),
        maybe(rng, 5, |r| r.below(60_000_001) as i128)
            .map_or(Cell::Null, |v| float(v, 3, fixed(v, 3, true))),
        {
            let v = rng.below(2_000_000_001) as i128 - 1_000_000_000;
            let text = if v != 0 && rng.below(4) == 0 {
                exponent(v)
            } else {
                fixed(v, 6, false)
            };
            float(v, 6, text)
        },
        maybe(rng, 20, |r| r.below(180_000_001) as i128 - 90_000_000)
            .map_or(Cell::Null, |v| float(v, 6, fixed(v, 6, false))),
        maybe(rng, 40, |r| {
            // Up to 14 integer digits; a quarter with trailing zeros left out.
            let v = (i128::from(r.next() >> 8) % 200_000_000_000_000_000) - 100_000_000_000_000_000;
            (v, r.below(4) == 0)
        })
        .map_or(Cell::Null, |(v, trim)| Cell::Fixed {
            unscaled: v,
            scale: 4,
            text: fixed(v, 4, trim),
            json_string: true,
        }),
        {
            let v = rng.below(100_000_000) as i128;
            Cell::Fixed {
                unscaled: v,
                scale: 2,
                text: fixed(v, 2, false),
                json_string: true,
            }
        },
    ]
}

/// A JSON string with every character outside ASCII as a `\uXXXX` escape (UTF-16 code
/// units, so a surrogate pair beyond the BMP).
fn json_string_escaped(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            c if (c as u32) < 0x20 || !c.is_ascii() => {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    out.extend_from_slice(format!("\\u{unit:04x}").as_bytes());
                }
            }
            c => out.push(c as u8),
        }
    }
    out.push(b'"');
}

pub fn generate(rows: u64, dir: &Path) -> Result<()> {
    let columns: Vec<serde_json::Value> = serde_json::from_str(SCHEMA_JSON)?;
    let names: Vec<&str> = columns
        .iter()
        .map(|c| c["name"].as_str().expect("a column has a name"))
        .collect();
    fs::create_dir_all(dir)?;
    let path = |name: &str| -> PathBuf { dir.join(name) };

    let mut rng = Rng(0x7769_6465_5f74_6d6b); // "wide_tmk"
    let mut totals: Vec<Totals> = names.iter().map(|_| Totals::default()).collect();
    let header = names.join(",") + "\n";
    let mut files = DataFiles::create(dir, "wide", &header)?;
    let (mut c, mut j) = (Vec::with_capacity(2 << 20), Vec::with_capacity(3 << 20));
    for i in 0..rows {
        let cells = row(&mut rng, i);
        debug_assert_eq!(cells.len(), names.len());
        j.push(b'{');
        let mut first_key = true;
        for (k, (cell, t)) in cells.iter().zip(&mut totals).enumerate() {
            if k > 0 {
                c.push(b',');
            }
            let name = names[k];
            // A NULL of these columns leaves its key out of the JSON line.
            if matches!(cell, Cell::Null) && (name == "retry_count" || name == "processed_at") {
                t.nulls += 1;
                continue;
            }
            if !first_key {
                j.push(b',');
            }
            first_key = false;
            write!(j, "\"{name}\":")?;
            match cell {
                Cell::Null => {
                    t.nulls += 1;
                    j.extend_from_slice(b"null");
                }
                Cell::Int(v) => {
                    write!(c, "{v}")?;
                    write!(j, "{v}")?;
                    t.sum += i128::from(*v);
                }
                Cell::Fixed {
                    unscaled,
                    scale,
                    text,
                    json_string: quoted,
                } => {
                    c.extend_from_slice(text.as_bytes());
                    if *quoted {
                        json_string(&mut j, text);
                    } else {
                        j.extend_from_slice(text.as_bytes());
                    }
                    t.sum += unscaled;
                    t.scale = *scale;
                }
                Cell::Bool(b) => {
                    write!(c, "{b}")?;
                    write!(j, "{b}")?;
                    t.trues += u64::from(*b);
                }
                Cell::Date(days) => {
                    let text = date_text(*days);
                    c.extend_from_slice(text.as_bytes());
                    json_string(&mut j, &text);
                    t.sum += i128::from(*days);
                }
                Cell::Timestamp(micros, text) => {
                    c.extend_from_slice(text.as_bytes());
                    json_string(&mut j, text);
                    t.sum += i128::from(*micros);
                }
                Cell::Str(s) => {
                    csv_field(&mut c, s);
                    if name == "message" && i % 2 == 1 {
                        json_string_escaped(&mut j, s);
                    } else {
                        json_string(&mut j, s);
                    }
                    t.string_bytes += s.len() as u64;
                }
            }
        }
        c.push(b'\n');
        j.extend_from_slice(b"}\n");
        if c.len() >= 1 << 20 || i + 1 == rows {
            files.write(&c, &j)?;
            c.clear();
            j.clear();
        }
    }
    files.finish()?;

    let mut sums = serde_json::Map::new();
    let mut nulls = serde_json::Map::new();
    let mut trues = serde_json::Map::new();
    let mut bytes = serde_json::Map::new();
    for ((column, t), name) in columns.iter().zip(&totals).zip(&names) {
        let name = name.to_string();
        match column["type"].as_str().unwrap_or_default() {
            "string" => {
                bytes.insert(name.clone(), t.string_bytes.into());
            }
            "bool" => {
                trues.insert(name.clone(), t.trues.into());
            }
            ty if ty.starts_with("decimal") || ty.starts_with("float") => {
                sums.insert(name.clone(), fixed(t.sum, t.scale, false).into());
            }
            _ => {
                sums.insert(name.clone(), t.sum.to_string().into());
            }
        }
        nulls.insert(name, t.nulls.into());
    }
    let expected_json = serde_json::json!({
        "rows": rows,
        "seed": "0x77696465_5f746d6b",
        // Exact sums as decimal strings: integers; floats and decimals as exact decimals
        // of the values written; dates as days and timestamps as microseconds since the
        // epoch. Strings as total UTF-8 bytes; bools as the count of true.
        "sums": sums,
        "string_bytes": bytes,
        "true_counts": trues,
        "nulls": nulls,
    });
    fs::write(
        path("expected.json.tmp"),
        serde_json::to_string_pretty(&expected_json)? + "\n",
    )?;
    fs::write(path("schema.json.tmp"), SCHEMA_JSON)?;
    let data = ["wide.csv", "wide.jsonl", "wide.csv.gz", "wide.jsonl.gz"];
    for name in data.iter().chain(&["schema.json", "expected.json"]) {
        fs::rename(path(&format!("{name}.tmp")), path(name))?;
    }
    for name in data {
        println!(
            "{:>12} bytes  {}",
            fs::metadata(path(name))?.len(),
            path(name).display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_spelled_exactly() {
        assert_eq!(fixed(-123_400, 4, false), "-12.3400");
        assert_eq!(fixed(-123_400, 4, true), "-12.34");
        assert_eq!(fixed(70_000, 4, true), "7");
        assert_eq!(fixed(5, 6, false), "0.000005");
        assert_eq!(exponent(123_456_700), "1.234567e2");
        assert_eq!(exponent(-5), "-5e-6");
        assert_eq!(exponent(1_000_000), "1e0");
    }

    #[test]
    fn timestamps_carry_their_offset() {
        assert_eq!(
            timestamp_text(START_US + 1, 0, "Z", 6),
            "2024-01-01T00:00:00.000001Z"
        );
        assert_eq!(
            timestamp_text(START_US, -330, "-05:30", 3),
            "2023-12-31T18:30:00.000-05:30"
        );
        assert_eq!(date_text(-10_958), "1940-01-01");
        assert_eq!(date_text(13_878), "2007-12-31");
    }

    #[test]
    fn escaped_json_reads_back_as_the_text() {
        let text = "Zürich 東京 😀 \"q\" \\ a\tb";
        let mut out = Vec::new();
        json_string_escaped(&mut out, text);
        assert!(out.is_ascii());
        assert_eq!(serde_json::from_slice::<String>(&out).unwrap(), text);
    }

    #[test]
    fn rows_have_every_column_and_are_deterministic() {
        let columns: Vec<serde_json::Value> = serde_json::from_str(SCHEMA_JSON).unwrap();
        let texts = |seed| {
            let mut rng = Rng(seed);
            (0..20)
                .map(|i| {
                    let cells = row(&mut rng, i);
                    assert_eq!(cells.len(), columns.len());
                    match &cells[12] {
                        Cell::Str(s) => s.clone(),
                        _ => panic!("message is a string"),
                    }
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(texts(1), texts(1));
        assert_ne!(texts(1), texts(2));
    }
}
