//! Rows set aside instead of failing their object: the policy ([`BadRows`]), one rejected
//! row ([`Rejected`]) and the running log a decoder keeps of them ([`RejectLog`]).
//!
//! Only errors confined to one record can reject a row: a value that does not parse or
//! does not fit its column, a wrong number of fields, invalid UTF-8, a NULL in a
//! non-nullable column, a JSON line that is not one object or holds a key twice, a JSON
//! line longer than `max_record_bytes`. Whatever puts the boundaries of the next records
//! in doubt still fails the object under either policy: malformed CSV quoting, a CSV
//! record longer than the limit (where it ends is unknown until a scan reads it all), a
//! bad header, a corrupt compressed stream, and every error of a Parquet input.

use super::ConvertError;

/// Bytes of a rejected record kept in [`Rejected::record`]; the rest is dropped and
/// [`Rejected::truncated`] set, so that a rejects log stays small whatever the records.
pub const REJECT_RECORD_BYTES: usize = 64 << 10;

/// What happens to a row that does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BadRows {
    /// The object fails, naming the row: nothing of it is written (the default).
    #[default]
    Fail,
    /// The row is set aside as a [`Rejected`] row and the object's other rows are
    /// converted; the object fails when more than `max` rows are rejected.
    Reject {
        /// Most rows one object may reject.
        max: u64,
    },
}

/// One row set aside under [`BadRows::Reject`]: where it is, why, and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// 1-based physical line of the decompressed input where the record starts.
    pub line: Option<u64>,
    /// 1-based ordinal of the record, for formats whose records are not lines (JSON
    /// documents).
    pub record_number: Option<u64>,
    /// The offending column, when known.
    pub column: Option<String>,
    /// The whole complaint, as the object's error would read: `line 3: column "qty": …`.
    pub error: String,
    /// The record as read (decompressed), without its line terminator, at most
    /// [`REJECT_RECORD_BYTES`].
    pub record: Vec<u8>,
    /// The record was longer than [`REJECT_RECORD_BYTES`] and is cut.
    pub truncated: bool,
}

impl Rejected {
    fn new(error: ConvertError, record: &[u8]) -> Self {
        let (line, record_number, column) = match &error {
            ConvertError::Parse {
                line,
                record,
                column,
                ..
            } => (*line, record.map(|r| r.get()), column.clone()),
            _ => (None, None, None),
        };
        let record = trim_terminators(record);
        let truncated = record.len() > REJECT_RECORD_BYTES;
        Self {
            line,
            record_number,
            column,
            error: error.to_string(),
            record: record[..record.len().min(REJECT_RECORD_BYTES)].to_vec(),
            truncated,
        }
    }
}

fn trim_terminators(mut record: &[u8]) -> &[u8] {
    while let [b'\r' | b'\n', rest @ ..] = record {
        record = rest;
    }
    while let [rest @ .., b'\r' | b'\n'] = record {
        record = rest;
    }
    record
}

/// The rows a decoder rejected since it was last asked, and how many in all.
#[derive(Debug, Default)]
pub(super) struct RejectLog {
    /// `None`: policy [`BadRows::Fail`].
    max: Option<u64>,
    total: u64,
    rows: Vec<Rejected>,
}

impl RejectLog {
    pub(super) fn new(policy: BadRows) -> Self {
        Self {
            max: match policy {
                BadRows::Fail => None,
                BadRows::Reject { max } => Some(max),
            },
            total: 0,
            rows: Vec::new(),
        }
    }

    /// Does the policy reject rows (rather than fail the object)?
    pub(super) fn rejects(&self) -> bool {
        self.max.is_some()
    }

    /// Sets the row of `record` aside for `error`; `error` itself back under policy
    /// [`BadRows::Fail`], and an error naming the limit when this row is one too many.
    pub(super) fn reject(
        &mut self,
        error: ConvertError,
        record: &[u8],
    ) -> Result<(), ConvertError> {
        let Some(max) = self.max else {
            return Err(error);
        };
        if !matches!(error, ConvertError::Parse { .. }) {
            return Err(error);
        }
        self.total += 1;
        if self.total > max {
            // The location is in the message of the row.
            let message =
                format!("more than {max} bad rows (max_rejected_rows); the last: {error}");
            return Err(ConvertError::parse(None, None, message));
        }
        self.rows.push(Rejected::new(error, record));
        Ok(())
    }

    /// The rows rejected since the last call, in input order (a decoder may find the
    /// rows of one batch in another order).
    pub(super) fn take(&mut self) -> Vec<Rejected> {
        let mut rows = std::mem::take(&mut self.rows);
        rows.sort_by_key(|r| (r.line, r.record_number));
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{ConvertSpec, ConvertStats, convert, count};
    use super::*;

    const ABC: &str = r#"[{"name":"a","type":"int32","nullable":false},{"name":"b","type":"string"},{"name":"c","type":"decimal(12,2)"}]"#;

    fn rejecting(mut spec: ConvertSpec, max: u64) -> ConvertSpec {
        spec.bad_rows = BadRows::Reject { max };
        spec.sum_columns = vec!["a".into(), "c".into()];
        spec
    }

    /// `(line, column, error, record)` of each rejected row.
    fn described(stats: &ConvertStats) -> Vec<(u64, Option<String>, String, String)> {
        stats
            .rejects
            .iter()
            .map(|r| {
                let record = String::from_utf8_lossy(&r.record).into_owned();
                (r.line.unwrap(), r.column.clone(), r.error.clone(), record)
            })
            .collect()
    }

    const BAD_CSV: &[u8] = b"a,b,c\n\
1,x,1.00\n\
2,y\n\
3,z,abc\n\
4,\"multi\nline\",4.00\n\
5,\xff,5\r\n\
,w,6\n\
\n\
6,v,6.00\n\
7,u,7,8\n\
8,t,8.5";

    fn bad_csv_rejects() -> Vec<(u64, Option<String>, String, String)> {
        let row = |line, column: Option<&str>, error: &str, record: &str| {
            (
                line,
                column.map(str::to_owned),
                error.to_owned(),
                record.to_owned(),
            )
        };
        vec![
            row(3, None, "line 3: expected 3 fields, got 2", "2,y"),
            row(
                4,
                Some("c"),
                r#"line 4: column "c": cannot parse "abc" as decimal(12,2)"#,
                "3,z,abc",
            ),
            row(
                7,
                Some("b"),
                r#"line 7: column "b": invalid UTF-8"#,
                "5,\u{fffd},5",
            ),
            row(
                8,
                Some("a"),
                r#"line 8: column "a": empty value in a non-nullable column"#,
                ",w,6",
            ),
            row(
                11,
                None,
                "line 11: expected 3 fields, got more than 3",
                "7,u,7,8",
            ),
        ]
    }

    #[test]
    fn csv_bad_rows_are_set_aside_and_the_others_converted() {
        let good = text_rows(&["1|x|1.00", "4|multi\nline|4.00", "6|v|6.00", "8|t|8.50"]);
        // One batch, batches of two rows, batches closed after every record.
        for (rows, bytes) in [(8192, 1 << 20), (2, 1 << 20), (8192, 1)] {
            let mut spec = rejecting(csv_spec(ABC), 10);
            (spec.batch_rows, spec.batch_bytes) = (rows, bytes);
            let (stats, parquet) = run(BAD_CSV, &spec);
            assert_eq!(parquet.rows, good, "batches of {rows} rows / {bytes} bytes");
            assert_eq!(stats.sums["a"].to_string(), "19");
            assert_eq!(stats.sums["c"].to_string(), "19.50");
            assert_eq!(
                described(&stats),
                bad_csv_rejects(),
                "batches of {rows} rows / {bytes} bytes"
            );
            assert_eq!(stats.rejects[2].record, b"5,\xff,5", "the bytes as read");
            // The recount of reconciliation sees the same.
            let counted = count(BAD_CSV, &spec).unwrap();
            assert_eq!((counted.rows, counted.rejects.len()), (4, 5));
        }
    }

    #[test]
    fn under_policy_fail_the_first_bad_row_fails_the_object() {
        let e = convert(BAD_CSV, &csv_spec(ABC), Vec::new()).unwrap_err();
        assert_eq!(e.to_string(), "line 3: expected 3 fields, got 2");
    }

    #[test]
    fn one_row_past_the_limit_fails_the_object() {
        let e = convert(BAD_CSV, &rejecting(csv_spec(ABC), 4), Vec::new()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "more than 4 bad rows (max_rejected_rows); the last: line 11: expected 3 fields, got more than 3"
        );
        let (stats, _) = run(BAD_CSV, &rejecting(csv_spec(ABC), 5));
        assert_eq!(stats.rejects.len(), 5);
    }

    #[test]
    fn rows_are_rejected_after_a_header_matched_by_name() {
        let mut spec = rejecting(csv_spec(ABC), 10);
        spec.csv_columns = super::super::CsvColumns::ByName;
        let (stats, parquet) = run("c,a\n1.5,1\nx,2\n2.5,3\n", &spec);
        assert_eq!(parquet.rows, text_rows(&["1|∅|1.50", "3|∅|2.50"]));
        assert_eq!(
            described(&stats)[0].2,
            r#"line 3: column "c": cannot parse "x" as decimal(12,2)"#
        );
    }

    #[test]
    fn broken_csv_structure_fails_the_object_under_either_policy() {
        let spec = rejecting(csv_spec(ABC), 10);
        let e = convert(&b"a,b,c\n1,x,1\n2,\"y\"z,2\n3,w,3\n"[..], &spec, Vec::new()).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"line 3: column "b": text after the closing quote of a quoted field"#
        );
        let e = convert(&b"a,b,c\n1,x,1\n2,\"y,2\n"[..], &spec, Vec::new()).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"line 3: column "b": a quoted field is still open at the end of the input"#
        );
        let mut spec = spec;
        spec.max_record_bytes = 16;
        let long = format!("a,b,c\n1,x,1\n2,{},2\n", "y".repeat(40));
        let e = convert(long.as_bytes(), &spec, Vec::new()).unwrap_err();
        assert!(
            e.to_string().contains("longer than the limit of 16 bytes"),
            "{e}"
        );
    }

    #[test]
    fn a_file_of_bad_rows_gives_an_empty_output_and_every_row_rejected() {
        let (stats, parquet) = run("a,b,c\nx,1,1\ny,2,2\n", &rejecting(csv_spec(ABC), 10));
        assert_eq!(
            (stats.rows, parquet.rows.len(), stats.rejects.len()),
            (0, 0, 2)
        );
        let jsonl = "[1]\n{\"a\":\"x\"}\n";
        let (stats, parquet) = run(jsonl, &rejecting(json_spec(ABC), 10));
        assert_eq!(
            (stats.rows, parquet.rows.len(), stats.rejects.len()),
            (0, 0, 2)
        );
    }

    #[test]
    fn many_bad_rows_spread_over_many_batches_are_each_found_once() {
        // 20,000 rows; CSV: every 7th has a bad `a`, every 13th a field too many; JSON
        // Lines: every 7th a wrong type, every 11th is invalid JSON, every 13th lacks `a`.
        let (mut csv, mut jsonl) = ("a,b,c\n".to_string(), String::new());
        let (mut csv_bad, mut json_bad) = (Vec::new(), Vec::new());
        let (mut csv_sum, mut json_sum) = (0i64, 0i64);
        for i in 1..=20_000i64 {
            let csv_line = i as u64 + 1;
            if i % 7 == 0 {
                csv += &format!("x{i},b,1.00\n");
                csv_bad.push(csv_line);
            } else if i % 13 == 0 {
                csv += &format!("{i},b,1.00,extra\n");
                csv_bad.push(csv_line);
            } else {
                csv += &format!("{i},b,1.00\n");
                csv_sum += i;
            }
            let json_line = i as u64;
            if i % 7 == 0 {
                jsonl += &format!("{{\"a\":\"x{i}\"}}\n");
                json_bad.push(json_line);
            } else if i % 11 == 0 {
                jsonl += &format!("{{\"a\":{i},\n");
                json_bad.push(json_line);
            } else if i % 13 == 0 {
                jsonl += "{\"b\":\"no a\"}\n";
                json_bad.push(json_line);
            } else {
                jsonl += &format!("{{\"a\":{i}}}\n");
                json_sum += i;
            }
        }
        for (input, spec, bad, sum) in [
            (csv, rejecting(csv_spec(ABC), 100_000), csv_bad, csv_sum),
            (
                jsonl,
                rejecting(json_spec(ABC), 100_000),
                json_bad,
                json_sum,
            ),
        ] {
            let (stats, _) = run(&input, &spec);
            let lines: Vec<u64> = stats.rejects.iter().map(|r| r.line.unwrap()).collect();
            assert_eq!(lines, bad);
            assert_eq!(stats.rows, 20_000 - bad.len() as u64);
            assert_eq!(stats.sums["a"].to_string(), sum.to_string());
        }
    }

    #[test]
    fn the_error_of_a_json_line_does_not_depend_on_batching() {
        // Found by the jsonl fuzz target: a line of several values ending in a broken
        // escape was "expected exactly one JSON value" fed to a decoder with room for a
        // few rows, and the escape error fed to one with room for many.
        let input = b"{\"a\":1,\"b\":\"x\x00Z\"}\n1234-29\",\"1.50\"\\u00";
        let mut found = Vec::new();
        for (rows, bytes) in [(3, 1), (8192, 1 << 20)] {
            let mut spec = rejecting(json_spec(ABC), 7);
            (spec.batch_rows, spec.batch_bytes) = (rows, bytes);
            let (stats, _) = run(&input[..], &spec);
            found.push(described(&stats));
            let mut fail = spec.clone();
            fail.bad_rows = BadRows::Fail;
            found.push(vec![(
                0,
                None,
                convert(&input[..], &fail, Vec::new())
                    .unwrap_err()
                    .to_string(),
                String::new(),
            )]);
        }
        assert_eq!(found[0], found[2]);
        assert_eq!(found[1], found[3]);
        assert_eq!(
            found[0][0].2,
            "line 2: expected exactly one JSON value on the line"
        );
        assert_eq!(found[1][0].2, found[0][0].2);
    }

    #[test]
    fn json_lines_bad_lines_are_set_aside_and_the_others_converted() {
        let input = [
            &br#"{"a":1,"b":"x","c":"1.00"}"#[..],
            br#"[1,2]"#,
            br#"{"a":"two","c":2}"#,
            br#"{"a":3,"b":"y""#,
            br#"{"a":4,"a":5}"#,
            br#"{"b":"no a"}"#,
            b"{\"a\":6,\"b\":\"\xff\"}",
            br#"{"a":7,"b":"zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"}"#,
            b"",
            br#"{"a":8} {"a":9}"#,
            br#"{"a":10,"c":10.5}"#,
        ]
        .join(&b'\n');
        let good = text_rows(&["1|x|1.00", "10|∅|10.50"]);
        let row = |line, column: Option<&str>, error: &str| {
            (line, column.map(str::to_owned), error.to_owned())
        };
        let expected = vec![
            row(2, None, "line 2: not a JSON object: expected { got [1,2]"),
            row(
                3,
                Some("a"),
                r#"line 3: column "a": cannot parse "two" as int32"#,
            ),
            row(
                4,
                None,
                "line 4: expected exactly one JSON value on the line",
            ),
            row(
                5,
                Some("a"),
                r#"line 5: column "a": the key appears twice in the object"#,
            ),
            row(
                6,
                Some("a"),
                r#"line 6: column "a": missing value in a non-nullable column"#,
            ),
            row(7, None, "line 7: invalid UTF-8"),
            row(
                8,
                None,
                "line 8: the line is longer than the limit of 64 bytes (max_record_bytes)",
            ),
            row(
                10,
                None,
                "line 10: expected exactly one JSON value on the line",
            ),
        ];
        for rows in [8192, 1, 3] {
            let mut spec = rejecting(json_spec(ABC), 10);
            spec.max_record_bytes = 64;
            spec.batch_rows = rows;
            let (stats, parquet) = run(&input, &spec);
            assert_eq!(parquet.rows, good, "batches of {rows}");
            let found: Vec<_> = described(&stats)
                .into_iter()
                .map(|(l, c, e, _)| (l, c, e))
                .collect();
            assert_eq!(found, expected, "batches of {rows}");
            assert_eq!(stats.rejects[1].record, br#"{"a":"two","c":2}"#);
            assert_eq!(stats.sums["c"].to_string(), "11.50");
        }
    }

    #[test]
    fn the_limit_fails_the_object_on_the_row_past_it() {
        let mut log = RejectLog::new(BadRows::Reject { max: 2 });
        for line in 1..=2 {
            let e = ConvertError::parse(Some(line), Some("qty"), "cannot parse \"x\" as int32");
            log.reject(e, b"1,x\r\n").unwrap();
        }
        let rows = log.take();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].line, Some(2));
        assert_eq!(rows[1].column.as_deref(), Some("qty"));
        assert_eq!(rows[1].record, b"1,x");
        assert_eq!(
            rows[1].error,
            r#"line 2: column "qty": cannot parse "x" as int32"#
        );
        let e = ConvertError::parse(Some(7), None, "expected 2 fields, got 3");
        let e = log.reject(e, b"1,2,3").unwrap_err();
        assert_eq!(
            e.to_string(),
            "more than 2 bad rows (max_rejected_rows); the last: line 7: expected 2 fields, got 3"
        );
    }

    #[test]
    fn under_policy_fail_and_for_object_errors_the_error_comes_back() {
        let mut log = RejectLog::new(BadRows::Fail);
        let e = log
            .reject(ConvertError::parse(Some(1), None, "bad"), b"x")
            .unwrap_err();
        assert_eq!(e.to_string(), "line 1: bad");
        let mut log = RejectLog::new(BadRows::Reject { max: 5 });
        let e = log
            .reject(ConvertError::TooLarge { limit: 1 }, b"x")
            .unwrap_err();
        assert!(matches!(e, ConvertError::TooLarge { .. }));
        assert!(log.take().is_empty());
    }

    #[test]
    fn long_records_are_cut() {
        let mut log = RejectLog::new(BadRows::Reject { max: 1 });
        let record = vec![b'a'; REJECT_RECORD_BYTES + 10];
        log.reject(ConvertError::parse(Some(1), None, "bad"), &record)
            .unwrap();
        let row = &log.take()[0];
        assert!(row.truncated);
        assert_eq!(row.record.len(), REJECT_RECORD_BYTES);
    }
}
