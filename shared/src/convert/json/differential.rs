//! The fast path against arrow-json's path, on generated JSON Lines: every line the fast
//! path reads must be read by arrow-json into the same rows, and whole conversions must
//! give the same files, statistics, rejected rows and errors with or without it.
//!
//! The lines mix valid rows with hostile ones (escapes, unicode, exponents, big numbers,
//! NULLs, missing, reordered, unknown, escaped and repeated keys, nested values, values of
//! the wrong type, whitespace everywhere, garbage), from a fixed seed.

use std::fmt::Write as _;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::fast::FastDecoder;
use super::tests::arrow_only;
use super::{decoder, nullable};
use crate::convert::testutil::schema;
use crate::convert::{BadRows, ConvertSpec, InputFormat, convert};

/// One column of every type, two of them non-nullable, two with names that need care.
const COLUMNS: &str = r#"[
    {"name": "id", "type": "int64", "nullable": false},
    {"name": "qty", "type": "int32"},
    {"name": "price", "type": "decimal(12,2)"},
    {"name": "big", "type": "decimal(38,4)"},
    {"name": "ratio", "type": "float64"},
    {"name": "weight", "type": "float32"},
    {"name": "name", "type": "string"},
    {"name": "naïve \"q\"", "type": "string", "nullable": false},
    {"name": "ok", "type": "bool"},
    {"name": "day", "type": "date"},
    {"name": "at", "type": "timestamp"}
]"#;

/// The column names as JSON strings, in the schema's order.
const KEYS: [&str; 11] = [
    "\"id\"",
    "\"qty\"",
    "\"price\"",
    "\"big\"",
    "\"ratio\"",
    "\"weight\"",
    "\"name\"",
    "\"naïve \\\"q\\\"\"",
    "\"ok\"",
    "\"day\"",
    "\"at\"",
];

/// SplitMix64: a small deterministic generator.
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

    /// True with probability `percent` %.
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// Generates lines; `hostile` is the percentage of lines given some defect.
struct Lines {
    rng: Rng,
    hostile: usize,
}

impl Lines {
    /// Optional whitespace, mostly none.
    fn ws(&mut self) -> &'static str {
        if self.rng.chance(80) {
            return "";
        }
        ["", " ", "\t", "\r", "  ", " \t "][self.rng.below(6)]
    }

    /// `min` to `min + spread - 1` random digits.
    fn digits(&mut self, min: usize, spread: usize) -> String {
        let n = min + self.rng.below(spread);
        (0..n)
            .map(|_| char::from(b'0' + self.rng.below(10) as u8))
            .collect()
    }

    /// An integer literal; `risky`: perhaps out of range or not whole.
    fn integer(&mut self, risky: bool) -> String {
        if risky {
            return match self.rng.below(5) {
                0 => self
                    .rng
                    .pick(&["2147483648", "-2147483649", "9223372036854775808"])
                    .into(),
                1 => self
                    .rng
                    .pick(&["1.5", "-0.25e1", "1e400", "01", "1e+-", "-"])
                    .into(),
                2 => format!("-{}", self.digits(1, 25)),
                3 => format!("{}", self.rng.next() as i64),
                _ => self.text_of(&["12", "-7", " 12", "1.5", "+3", "x", ""]),
            };
        }
        match self.rng.below(10) {
            0 => self
                .rng
                .pick(&["2147483647", "-2147483648", "1.0", "1e3", "-0", "-0.0"])
                .into(),
            1 => self
                .rng
                .pick(&["2.5e1", "1E2", "10e-1", "1.000e+2", "0"])
                .into(),
            2 => self.text_of(&["12", "-7", "0", "2147483647"]),
            _ => format!("{}", self.rng.below(100_000) as i64 - 50_000),
        }
    }

    /// A float literal; `risky`: perhaps out of range or not JSON.
    fn float(&mut self, risky: bool) -> String {
        if risky {
            return match self.rng.below(4) {
                0 => self
                    .rng
                    .pick(&[
                        "1e400",
                        "-1e999",
                        "1.7976931348623159e308",
                        "3.5e38",
                        "1.",
                        "-.5",
                        "01.5",
                        "1e",
                    ])
                    .into(),
                1 => self.text_of(&["1e39", "1e999", "x", " 1", "", "1,5"]),
                2 => format!("{:e}", f64::from_bits(self.rng.next())),
                _ => {
                    let exponent = self.rng.below(700) as i64 - 350;
                    format!("{}.{}e{exponent}", self.digits(1, 25), self.digits(1, 25))
                }
            };
        }
        match self.rng.below(10) {
            0 => format!("{:?}", f64::from_bits(self.rng.next() >> 2)),
            1 => format!("{}", f64::from_bits(self.rng.next() >> 4)),
            2 => format!("{:e}", f32::from_bits(self.rng.next() as u32 >> 3)),
            3 => {
                let exponent = self.rng.below(60) as i64 - 30;
                format!("{}.{}e{exponent}", self.digits(1, 25), self.digits(1, 25))
            }
            4 => self
                .rng
                .pick(&[
                    "1.7976931348623157e308",
                    "3.4028235e38",
                    "0.1",
                    "-0.0",
                    "1e-46",
                    "4.9e-324",
                    "2.4703282292062327e-324",
                    "0.30000000000000004",
                    "9007199254740993",
                    "-1e-400",
                ])
                .into(),
            5 => self.text_of(&["inf", "-Infinity", "2.5", "+1.5", "1e3", "-0"]),
            _ => {
                let int = self.rng.below(10_000);
                format!("{int}.{}", self.digits(1, 4))
            }
        }
    }

    /// A decimal literal for `decimal(12,2)`/`decimal(38,4)`; `risky`: perhaps inexact or
    /// too large.
    fn decimal(&mut self, risky: bool) -> String {
        if risky {
            return match self.rng.below(3) {
                0 => self
                    .rng
                    .pick(&["1.005", "1e11", "1e40", "1e-999", "1..2", "1e", "."])
                    .into(),
                _ => format!("{}.{}", self.digits(1, 36), self.digits(0, 6)),
            };
        }
        match self.rng.below(8) {
            0 => self
                .rng
                .pick(&["1e9", "-2.5e-1", "0.000", "1.500", "-0", "5."])
                .into(),
            1 => format!("{}.{}", self.digits(1, 9), self.digits(0, 3)),
            _ => {
                let int = self.rng.below(100_000);
                format!("{int}.{}", self.digits(0, 3))
            }
        }
    }

    /// A JSON string literal, escapes and unicode included; `risky`: perhaps an escape
    /// arrow-json refuses, or decodes differently from UTF-16.
    fn string(&mut self, risky: bool) -> String {
        let mut s = String::from("\"");
        for _ in 0..self.rng.below(12) {
            let piece = match self.rng.below(if risky { 22 } else { 17 }) {
                0 => "\\n",
                1 => "\\\"",
                2 => "\\\\",
                3 => "\\/",
                4 => "\\b\\f\\r\\t",
                5 => "\\u00e9",
                6 => "\\uD83D\\uDE00",
                7 => "\\ud83d\\ude00\\uD834\\uDD1E",
                8 => "日本語",
                9 => "é😀",
                10 => "\u{1}\t",
                11 => "\\u0000",
                12 => "\\uFFFF\\uFEFF",
                17 => self.rng.pick(&["\\uD840\\uDC00", "\\udbff\\udfff"]),
                18 => "\\uD800",
                19 => "\\uDC00\\uD800",
                20 => "\\x",
                21 => "\\u12G4",
                _ => self
                    .rng
                    .pick(&["a", "b c", "Smith, John", "x", "-", "0", "{", "]", ":"]),
            };
            s.push_str(piece);
        }
        s.push('"');
        s
    }

    fn text_of(&mut self, choices: &[&str]) -> String {
        format!("\"{}\"", self.rng.pick(choices))
    }

    /// A value for column `c`, usually of its type.
    fn value(&mut self, c: usize) -> String {
        if self.rng.chance(5) {
            return "null".into();
        }
        let risky = self.rng.chance(self.hostile);
        if risky && self.rng.chance(25) {
            return self.wrong_value();
        }
        match c {
            0 | 1 => self.integer(risky),
            2 | 3 => match self.rng.below(6) {
                0 => format!("\"{}\"", self.decimal(risky)),
                _ => self.decimal(risky),
            },
            4 | 5 => self.float(risky),
            6 | 7 => self.string(risky),
            8 => self.rng.pick(&["true", "false"]).into(),
            9 if risky => self.text_of(&["2023-02-29", "2024-01-02T00:00:00Z", "2024-1-2", "x"]),
            9 => self.text_of(&[
                "2024-02-29",
                "20240102",
                "+10999-12-31",
                "1970-01-01",
                " 2024-01-02",
            ]),
            _ if risky => self.text_of(&[
                "2024-01-02T03:04:05.1234567Z",
                "2024-02-30T00:00:00Z",
                "not a time",
                "",
            ]),
            _ => self.text_of(&[
                "2024-01-02T03:04:05Z",
                "2024-01-02T03:04:05.123456Z",
                "2024-01-02T03:04:05.123456000+01:00",
                "2024-01-02 03:04:05",
                "2024-01-02T03:04:05-05:30",
                "1969-12-31T23:59:59.999999Z",
                "2024-01-02T03:04:05.5",
            ]),
        }
    }

    /// A value of no column's type, or not one at all.
    fn wrong_value(&mut self) -> String {
        match self.rng.below(4) {
            0 => self.nested(2),
            1 => self.string(true),
            2 => self
                .rng
                .pick(&[
                    "true", "false", "1", "1.5e3", "tru", "nul", "1e+-.", "-", "01",
                ])
                .into(),
            _ => self.rng.pick(&["{}", "[]", "[1]", "{\"a\":1}"]).into(),
        }
    }

    /// Any JSON value, nested up to `depth` levels: what unknown keys hold.
    fn nested(&mut self, depth: usize) -> String {
        let kind = self.rng.below(if depth == 0 { 4 } else { 6 });
        match kind {
            0 => {
                let risky = self.rng.chance(self.hostile);
                self.string(risky)
            }
            1 => self
                .rng
                .pick(&["1", "-2.5e+3", "1e+-.", "0", "1.", "-", "00", "1E5"])
                .into(),
            2 => self.rng.pick(&["true", "false", "null"]).into(),
            3 => self.float(true),
            _ => {
                let object = kind == 4;
                let mut s = String::from(if object { "{" } else { "[" });
                s.push_str(self.ws());
                for i in 0..self.rng.below(4) {
                    if i > 0 {
                        s.push(',');
                        s.push_str(self.ws());
                    }
                    if object {
                        let key = self.string(false);
                        write!(s, "{key}{}:{}", self.ws(), self.ws()).unwrap();
                    }
                    let value = self.nested(depth - 1);
                    s.push_str(&value);
                    s.push_str(self.ws());
                }
                s.push(if object { '}' } else { ']' });
                s
            }
        }
    }

    /// A key not in the schema, or a column's key spelled with escapes.
    fn other_key(&mut self) -> String {
        match self.rng.below(8) {
            0 => "\"i\\u0064\"".into(),
            1 => "\"qty \"".into(),
            2 => "\"ID\"".into(),
            3 => "\"na\\u00efve \\\"q\\\"\"".into(),
            _ => {
                let risky = self.rng.chance(self.hostile);
                self.string(risky)
            }
        }
    }

    /// One line, without its newline.
    fn line(&mut self) -> Vec<u8> {
        let hostile = self.rng.chance(self.hostile);
        if hostile && self.rng.chance(15) {
            let bad: &[u8] = match self.rng.below(12) {
                0 => b"[1,2]",
                1 => b"1",
                2 => b"null",
                3 => b"\"x\"",
                4 => b"   ",
                5 => b"",
                6 => b"{\"id\":1,\"name\":\"\xff\"}",
                7 => b"{\"id\":1,\"naive\":\"x\"",
                8 => b"{\"id\":1}{\"id\":2}",
                9 => b"{\"id\":1} x",
                10 => b"{,\"id\":1,,\"name\":\"a\" \"qty\":2,}",
                _ => b"{\"id\":1,\"x\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],\"na\xc3\xafve \\\"q\\\"\":\"deep\"}",
            };
            return bad.to_vec();
        }
        let mut order: Vec<usize> = (0..KEYS.len()).collect();
        if self.rng.chance(10) {
            for i in (1..order.len()).rev() {
                order.swap(i, self.rng.below(i + 1));
            }
        }
        let mut fields: Vec<String> = Vec::new();
        for &c in &order {
            if self.rng.chance(8) && c != 0 && c != 7 || self.rng.chance(1) {
                continue;
            }
            let value = self.value(c);
            fields.push(format!("{}{}:{}{value}", KEYS[c], self.ws(), self.ws()));
            if hostile && self.rng.chance(10) {
                let again = self.value(c);
                fields.push(format!("{}:{again}", KEYS[c]));
            }
        }
        for _ in 0..self.rng.below(3) {
            if self.rng.chance(25) {
                let (key, value) = (self.other_key(), self.nested(3));
                let at = self.rng.below(fields.len() + 1);
                fields.insert(at, format!("{key}{}:{}{value}", self.ws(), self.ws()));
            }
        }
        let mut line = format!("{}{{{}", self.ws(), self.ws());
        for (i, field) in fields.iter().enumerate() {
            if i > 0 {
                write!(line, "{},{}", self.ws(), self.ws()).unwrap();
            }
            line.push_str(field);
        }
        write!(line, "{}}}{}", self.ws(), self.ws()).unwrap();
        line.into_bytes()
    }
}

fn test_schema() -> SchemaRef {
    nullable(&schema(COLUMNS))
}

/// `lines` decoded together by arrow-json as the converter's decoder does, or `None`.
fn arrow_batch(schema: &SchemaRef, lines: &[String]) -> Option<RecordBatch> {
    let mut decoder = decoder(schema, lines.len().max(1)).ok()?;
    for line in lines {
        let before = decoder.len();
        // As the converter gives it lines: surrogate pairs spelled out.
        let spelled = super::spell_out_surrogate_pairs(line.as_bytes());
        let line = spelled.as_deref().unwrap_or(line.as_bytes());
        let taken = decoder.decode(line).ok()?;
        let whole = taken == line.len() && !decoder.has_partial_record();
        if !whole || decoder.len() != before + 1 {
            return None;
        }
    }
    decoder.flush().ok()?
}

#[test]
fn lines_the_fast_path_reads_arrow_json_reads_the_same() {
    let schema = test_schema();
    let mut flat = FastDecoder::new(&schema, super::super::UnknownFields::Ignore, &[]).unwrap();
    let mut lines = Lines {
        rng: Rng(0x7469_6465),
        hostile: 3,
    };
    let (mut read, mut declined) = (0, 0);
    let mut group: Vec<String> = Vec::new();
    for i in 0..20_000 {
        let Ok(mut line) = String::from_utf8(lines.line()) else {
            continue;
        };
        line.push('\n');
        if flat.push(&line).is_err() {
            declined += 1;
            // The rows read before a declined line are kept without it, or dropped.
            if i % 3 == 0 {
                flat.clear();
                group.clear();
            } else {
                flat.rollback();
            }
            continue;
        }
        read += 1;
        group.push(line);
        if group.len() == 1 + i % 7 {
            let fast = flat.finish().expect("rows were read");
            let slow = arrow_batch(&schema, &group);
            assert_eq!(Some(&fast), slow.as_ref(), "{group:#?}");
            group.clear();
        }
    }
    assert!(
        read > 5_000 && declined > 2_000,
        "read {read}, declined {declined}"
    );
}

#[test]
fn conversions_are_the_same_with_and_without_the_fast_path() {
    let mut rng = Rng(42);
    for file in 0..60 {
        let hostile = [0, 0, 1, 3, 10, 40][file % 6];
        let mut lines = Lines {
            rng: Rng(rng.next()),
            hostile,
        };
        let mut input = Vec::new();
        for _ in 0..1 + rng.below(300) {
            input.extend(lines.line());
            input.extend_from_slice(if rng.chance(10) { b"\r\n" } else { b"\n" });
        }
        if rng.chance(30) {
            input.pop();
        }
        let mut spec = ConvertSpec::new(InputFormat::JsonLines, schema(COLUMNS));
        spec.sum_columns = vec!["id".into(), "qty".into(), "price".into(), "ratio".into()];
        spec.batch_rows = [1, 3, 7, 64, 8192][rng.below(5)];
        spec.batch_bytes = [1, 200, 2_000, 1 << 20][rng.below(4)];
        if rng.chance(20) {
            spec.max_record_bytes = 150 + rng.below(200);
        }
        for bad_rows in [
            BadRows::Fail,
            BadRows::Reject { max: u64::MAX },
            BadRows::Reject { max: 2 },
        ] {
            spec.bad_rows = bad_rows;
            let run = || {
                let mut out = Vec::new();
                convert(&input[..], &spec, &mut out)
                    .map(|stats| (format!("{stats:?}"), out))
                    .map_err(|e| format!("{e} / {e:?}"))
            };
            let fast = run();
            let slow = arrow_only(run);
            // Where the two reports part, for a readable failure.
            let shown = |r: &Result<(String, Vec<u8>), String>| match r {
                Ok((stats, _)) => stats.clone(),
                Err(e) => e.clone(),
            };
            let (a, b) = (shown(&fast), shown(&slow));
            let at = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
            let window = |t: &str| {
                t.chars()
                    .skip(at.saturating_sub(60))
                    .take(4000)
                    .collect::<String>()
            };
            assert!(
                fast == slow,
                "file {file}, {bad_rows:?}, batch_rows {}, batch_bytes {}: they part at {at}:\nfast …{}\nslow …{}",
                spec.batch_rows,
                spec.batch_bytes,
                window(&a),
                window(&b),
            );
        }
    }
}
