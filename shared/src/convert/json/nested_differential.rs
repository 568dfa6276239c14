//! The fast path against arrow-json's path on nested records: structs, arrays, maps, `json`
//! values and path columns, to any depth the schema has. Every line the fast path reads must
//! be read by arrow-json's path into the same rows with the same unknown fields counted, and
//! whole conversions must give the same files, statistics (ignored fields included), rejected
//! rows and errors with or without it.
//!
//! The records mix valid values with hostile ones (NULLs and missing fields at every level,
//! unknown keys at every depth holding any value, keys out of order, spelled with escapes or
//! given twice, values of the wrong type, `json` values with whitespace, escapes, surrogate
//! pairs and deep nesting, maps with repeated keys, trailing commas the tape accepts), from a
//! fixed seed.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::fast::FastDecoder;
use super::tests::arrow_only;
use super::tree::Shared;
use super::{Strict, nullable};
use crate::convert::{BadRows, ConvertSpec, InputFormat, UnknownFields, convert};
use crate::schema::ColumnSpec;

const COLUMNS: &str = r#"[
    {"name": "id", "type": "int64", "nullable": false},
    {"name": "user", "type": "struct<name:string,age:int32,tags:array<string>,addr:struct<city:string,zip:string>,score:decimal(10,2),seen:timestamp>"},
    {"name": "items", "type": "array<struct<sku:string,qty:int32,price:float64,attrs:map<string,string>>>"},
    {"name": "labels", "type": "map<string,int64>"},
    {"name": "payload", "type": "json"},
    {"name": "flags", "type": "array<bool>"},
    {"name": "grid", "type": "array<array<int64>>"},
    {"name": "day", "type": "date"},
    {"name": "notes", "type": "array<json>"},
    {"name": "user_city", "path": "user.addr.city", "type": "string"},
    {"name": "first_sku", "path": "items[0].sku", "type": "string"},
    {"name": "meta_x", "path": "meta.x", "type": "int64"},
    {"name": "meta_second", "path": "meta.list[1]", "type": "json"},
    {"name": "meta_inner", "path": "meta.inner", "type": "struct<a:string,b:int64>"}
]"#;

fn columns() -> Vec<ColumnSpec> {
    serde_json::from_str(COLUMNS).unwrap()
}

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// Generates records; `hostile` is the percentage of values given some defect.
struct Records {
    rng: Rng,
    hostile: usize,
}

impl Records {
    fn defect(&mut self) -> bool {
        self.rng.chance(self.hostile)
    }

    /// Whitespace, mostly none.
    fn ws(&mut self) -> &'static str {
        if self.rng.chance(85) {
            return "";
        }
        [" ", "\t", "  ", " \r"][self.rng.below(4)]
    }

    fn string(&mut self) -> String {
        let pieces = [
            "a",
            "Zürich",
            "é",
            "\\u00e9",
            "\\\"",
            "\\\\",
            "\\n",
            "\\/",
            "\\u0001",
            "😀",
            "\\uD83D\\uDE00",
            "\\uD840\\uDC00",
            "x y",
            ",",
            "{",
            "]",
            "\\t",
            "\u{7f}",
        ];
        let mut s = String::from("\"");
        for _ in 0..self.rng.below(6) {
            s.push_str(self.rng.pick(&pieces));
        }
        if self.defect() {
            s.push_str(self.rng.pick(&["\\x", "\\u12", "\\uD800", "\u{1}"]));
        }
        s.push('"');
        s
    }

    fn integer(&mut self) -> String {
        if self.defect() {
            return self
                .rng
                .pick(&[
                    "1.5",
                    "\"x\"",
                    "2147483648",
                    "1e400",
                    "true",
                    "[]",
                    "{}",
                    "01",
                    "-",
                ])
                .into();
        }
        self.rng
            .pick(&[
                "0",
                "-7",
                "42",
                "1e3",
                "1.0",
                "\"12\"",
                "9007199254740993",
                "null",
            ])
            .into()
    }

    /// Any JSON value (for `json` columns and unknown fields), `depth` levels at most.
    fn any(&mut self, depth: usize) -> String {
        match self.rng.below(if depth == 0 { 5 } else { 8 }) {
            0 => self.string(),
            1 => self
                .rng
                .pick(&["0", "-1.5e-3", "12345678901234567890", "3.14", "-0"])
                .into(),
            2 => self.rng.pick(&["true", "false", "null"]).into(),
            3 if self.defect() => self.rng.pick(&["1.", "01", "+1"]).into(),
            3 | 4 => "7".into(),
            5 => {
                let n = self.rng.below(4);
                let items: Vec<String> = (0..n).map(|_| self.any(depth - 1)).collect();
                let sep = format!(",{}", self.ws());
                format!("[{}{}{}]", self.ws(), items.join(&sep), self.ws())
            }
            _ => {
                let n = self.rng.below(4);
                let items: Vec<String> = (0..n)
                    .map(|_| {
                        let key = self.string();
                        let ws = self.ws();
                        let value = self.any(depth - 1);
                        format!("{key}{ws}:{value}")
                    })
                    .collect();
                format!("{{{}}}", items.join(","))
            }
        }
    }

    /// An object with the fields `fields` (name and value maker), in order or shuffled, some
    /// missing, some unknown keys added, sometimes a key given twice.
    fn object(&mut self, fields: Vec<(&str, String)>) -> String {
        let mut entries: Vec<(String, String)> = Vec::new();
        for (k, v) in fields {
            if !self.rng.chance(85) {
                continue;
            }
            let key = if self.rng.chance(3) && k == "name" {
                "\"n\\u0061me\"".to_string()
            } else {
                format!("\"{k}\"")
            };
            entries.push((key, v));
        }
        if self.rng.chance(25) {
            let at = self.rng.below(entries.len() + 1);
            let depth = self.rng.below(4);
            let value = self.any(depth);
            let key = self
                .rng
                .pick(&["\"extra\"", "\"Extra\"", "\"x-y\"", "\"\""]);
            entries.insert(at, (key.into(), value));
        }
        if self.rng.chance(20) && entries.len() > 1 {
            let i = self.rng.below(entries.len());
            let j = self.rng.below(entries.len());
            entries.swap(i, j);
        }
        if self.defect() && !entries.is_empty() {
            let dup = entries[self.rng.below(entries.len())].clone();
            entries.push(dup);
        }
        let body: Vec<String> = entries
            .into_iter()
            .map(|(k, v)| {
                let (a, b) = (self.ws(), self.ws());
                format!("{k}{a}:{b}{v}")
            })
            .collect();
        let trailing = if self.defect() { "," } else { "" };
        format!("{{{}{trailing}}}", body.join(","))
    }

    /// One of `good`, or of `bad` for a defect.
    fn choose(&mut self, good: &[&str], bad: &[&str]) -> String {
        if self.defect() {
            return self.rng.pick(bad).into();
        }
        self.rng.pick(good).into()
    }

    fn null_or(&mut self, value: impl FnOnce(&mut Self) -> String) -> String {
        if self.rng.chance(8) {
            return "null".into();
        }
        if self.defect() {
            return self.rng.pick(&["1", "\"s\"", "[]", "{}", "true"]).into();
        }
        value(self)
    }

    fn list(&mut self, max: usize, element: impl Fn(&mut Self) -> String) -> String {
        self.null_or(|r| {
            let n = r.rng.below(max + 1);
            let items: Vec<String> = (0..n).map(|_| element(r)).collect();
            format!("[{}]", items.join(","))
        })
    }

    fn map(&mut self, value: impl Fn(&mut Self) -> String) -> String {
        self.null_or(|r| {
            let n = r.rng.below(4);
            let mut keys: Vec<String> = (0..n).map(|i| format!("\"k{i}\"")).collect();
            if r.defect() && !keys.is_empty() {
                keys.push(keys[0].clone());
            }
            let items: Vec<String> = keys
                .into_iter()
                .map(|k| {
                    let v = value(r);
                    format!("{k}:{v}")
                })
                .collect();
            format!("{{{}}}", items.join(","))
        })
    }

    fn user(&mut self) -> String {
        self.null_or(|r| {
            let fields = vec![
                ("name", r.null_or(Self::string)),
                ("age", r.integer()),
                ("tags", r.list(3, Self::string)),
                (
                    "addr",
                    r.null_or(|r| {
                        let fields = vec![("city", r.string()), ("zip", r.string())];
                        r.object(fields)
                    }),
                ),
                (
                    "score",
                    r.choose(
                        &["1.25", "\"3.10\"", "-0.5", "100", "null"],
                        &["1.005", "[]"],
                    ),
                ),
                (
                    "seen",
                    r.choose(
                        &[
                            "\"2024-01-02T03:04:05Z\"",
                            "\"2024-01-02T03:04:05.123+01:00\"",
                            "null",
                        ],
                        &["\"2024-13-01T00:00:00Z\"", "1700000000"],
                    ),
                ),
            ];
            r.object(fields)
        })
    }

    fn item(&mut self) -> String {
        self.null_or(|r| {
            let fields = vec![
                ("sku", r.string()),
                ("qty", r.integer()),
                (
                    "price",
                    r.choose(
                        &["1.5", "2", "-0.25", "1e308", "\"inf\"", "null"],
                        &["1e999"],
                    ),
                ),
                ("attrs", r.map(Self::string)),
            ];
            r.object(fields)
        })
    }

    fn line(&mut self) -> String {
        let id = if self.defect() {
            self.integer()
        } else {
            self.rng.below(1000).to_string()
        };
        let mut fields = vec![
            ("id", id),
            ("user", self.user()),
            ("items", self.list(3, Self::item)),
            ("labels", self.map(Self::integer)),
            ("payload", self.any(3)),
            (
                "flags",
                self.list(3, |r| r.rng.pick(&["true", "false", "null"]).into()),
            ),
            ("grid", self.list(2, |r| r.list(3, Self::integer))),
            (
                "day",
                self.choose(&["\"2024-02-29\"", "null"], &["\"2023-02-29\"", "19000"]),
            ),
            ("notes", self.list(2, |r| r.any(2))),
        ];
        if self.rng.chance(60) {
            let meta = match self.rng.below(4) {
                0 => self.any(2),
                _ => {
                    let inner = self.null_or(|r| {
                        let fields = vec![("a", r.string()), ("b", r.integer())];
                        r.object(fields)
                    });
                    let list = self.list(3, |r| r.any(1));
                    let x = self.integer();
                    let fields = vec![("x", x), ("list", list), ("inner", inner)];
                    self.object(fields)
                }
            };
            fields.push(("meta", meta));
        }
        self.object(fields)
    }
}

fn strict() -> Arc<Strict> {
    Arc::new(Strict {
        shared: Arc::new(Shared::new(
            UnknownFields::Ignore,
            Default::default(),
            Default::default(),
            None,
        )),
        columns: columns(),
    })
}

fn test_schema() -> SchemaRef {
    let spec = ConvertSpec::with_columns(InputFormat::JsonLines, &columns());
    nullable(&spec.decoded_schema())
}

/// `lines` decoded together by arrow-json's path, with the unknown fields it counted.
fn arrow_batch(
    strict: &Arc<Strict>,
    schema: &SchemaRef,
    lines: &[String],
) -> Option<(RecordBatch, crate::convert::Ignored)> {
    let mut decoder = strict.decoder(schema, lines.len().max(1)).ok()?;
    for line in lines {
        let spelled = super::spell_out_surrogate_pairs(line.as_bytes());
        let line = spelled.as_deref().unwrap_or(line.as_bytes());
        let before = decoder.len();
        let taken = decoder.decode(line).ok()?;
        if taken != line.len() || decoder.has_partial_record() || decoder.len() != before + 1 {
            return None;
        }
    }
    let batch = decoder.flush().ok()??;
    let ignored = std::mem::take(&mut strict.shared.findings().ignored);
    Some((batch, ignored))
}

#[test]
fn nested_lines_the_fast_path_reads_arrow_json_reads_the_same() {
    let schema = test_schema();
    let strict = strict();
    let mut fast = FastDecoder::new(&schema, UnknownFields::Ignore, &columns()).unwrap();
    let mut records = Records {
        rng: Rng(0x6e65_7374),
        hostile: 2,
    };
    let (mut read, mut declined) = (0, 0);
    let mut group: Vec<String> = Vec::new();
    for i in 0..15_000 {
        let mut line = records.line();
        line.push('\n');
        if fast.push(&line).is_err() {
            declined += 1;
            if i % 3 == 0 {
                fast.clear();
                group.clear();
            } else {
                fast.rollback();
            }
            continue;
        }
        read += 1;
        group.push(line);
        if group.len() == 1 + i % 5 {
            let batch = fast.finish().expect("rows were read");
            let ignored = fast.take_ignored();
            let slow = arrow_batch(&strict, &schema, &group);
            assert_eq!(Some((batch, ignored)), slow, "{group:#?}");
            group.clear();
        }
    }
    assert!(
        read > 5_000 && declined > 3_000,
        "read {read}, declined {declined}"
    );
}

#[test]
fn nested_conversions_are_the_same_with_and_without_the_fast_path() {
    let mut rng = Rng(7);
    for file in 0..40 {
        let hostile = [0, 0, 1, 3, 10][file % 5];
        let mut records = Records {
            rng: Rng(rng.next()),
            hostile,
        };
        let mut input = String::new();
        for _ in 0..1 + rng.below(200) {
            input.push_str(&records.line());
            input.push('\n');
        }
        let mut spec = ConvertSpec::with_columns(InputFormat::JsonLines, &columns());
        spec.sum_columns = vec!["id".into()];
        spec.batch_rows = [1, 3, 7, 64, 8192][rng.below(5)];
        spec.batch_bytes = [1, 500, 5_000, 1 << 20][rng.below(4)];
        for bad_rows in [BadRows::Fail, BadRows::Reject { max: u64::MAX }] {
            spec.bad_rows = bad_rows;
            let run = || {
                let mut out = Vec::new();
                convert(input.as_bytes(), &spec, &mut out)
                    .map(|stats| (format!("{stats:?}"), out))
                    .map_err(|e| format!("{e} / {e:?}"))
            };
            let fast = run();
            let slow = arrow_only(run);
            let shown = |r: &Result<(String, Vec<u8>), String>| match r {
                Ok((stats, _)) => stats.clone(),
                Err(e) => e.clone(),
            };
            assert!(
                fast == slow,
                "file {file}, {bad_rows:?}, batch_rows {}, batch_bytes {}:\nfast {}\nslow {}",
                spec.batch_rows,
                spec.batch_bytes,
                shown(&fast).chars().take(3000).collect::<String>(),
                shown(&slow).chars().take(3000).collect::<String>(),
            );
        }
    }
}
