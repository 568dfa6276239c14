//! JSON documents: layouts, records arrays and envelopes, bad values, errors naming the
//! record, and the scanner against serde_json's reading of generated files.

use std::io::BufReader;

use serde_json::{Value, json};

use super::super::testutil::*;
use super::super::{
    BadRows, ConvertSpec, InputFormat, JsonDocuments, Lineage, ObjectInfo, convert,
};
use super::documents::{Documents, Next};
use crate::schema::ColumnSpec;

fn spec(columns: &str, records: Option<&str>, envelope: &[&str]) -> ConvertSpec {
    let columns: Vec<ColumnSpec> = serde_json::from_str(columns).unwrap();
    let mut spec = ConvertSpec::with_columns(InputFormat::Json, &columns);
    spec.json = JsonDocuments {
        records: records.map(str::to_owned),
        envelope: envelope.iter().map(|e| e.to_string()).collect(),
    };
    spec
}

const AB: &str = r#"[{"name":"a","type":"int64"},{"name":"b","type":"string"}]"#;

/// Rows written `a,b`.
fn cells(rows: &[&str]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|r| r.split(',').map(str::to_owned).collect())
        .collect()
}

fn rows(input: &str, spec: &ConvertSpec) -> Vec<Vec<String>> {
    run(input, spec).1.rows
}

#[test]
fn one_document_an_array_or_values_back_to_back_with_or_without_whitespace() {
    let plain = spec(AB, None, &[]);
    let expected = cells(&["1,x", "2,∅", "3,z"]);
    for input in [
        r#"[{"a":1,"b":"x"},{"a":2},{"a":3,"b":"z"}]"#,
        r#"{"a":1,"b":"x"}{"a":2}{"a":3,"b":"z"}"#,
        "{\"a\":1,\"b\":\"x\"}\n{\"a\":2}\r\n\n{\"a\":3,\"b\":\"z\"}",
        "  [\n  {\n    \"a\": 1,\n    \"b\": \"x\"\n  },\n  { \"a\": 2 } ,\n{\"a\":3,\"b\":\"z\"}\n]\n",
        "{\n  \"a\": 1,\n  \"b\": \"x\"\n}\n{\n  \"a\": 2\n}{\"a\":3,\n\"b\":\"z\"}",
        // Arrays back to back, and an empty one, are values too.
        r#"[{"a":1,"b":"x"}][][{"a":2},{"a":3,"b":"z"}]"#,
    ] {
        assert_eq!(rows(input, &plain), expected, "{input}");
    }
    for empty in ["", "  \n", "[]", "[ ]\n[]"] {
        assert_eq!(rows(empty, &plain), Vec::<Vec<String>>::new(), "{empty:?}");
    }
}

#[test]
fn strings_holding_brackets_quotes_and_escapes_do_not_cut_records() {
    let plain = spec(AB, None, &[]);
    let input = r#"[{"a":1,"b":"]}{[\",\\"},{"a":2,"b":"\\\"}{"},{"b":"\u005d\n","a":3}]"#;
    assert_eq!(
        rows(input, &plain),
        vec![
            vec!["1".to_string(), r#"]}{[",\"#.to_string()],
            vec!["2".to_string(), r#"\"}{"#.to_string()],
            vec!["3".to_string(), "]\n".to_string()],
        ]
    );
}

#[test]
fn records_arrays_inside_each_value() {
    let trail = spec(AB, Some("Records"), &[]);
    let input = concat!(
        r#"{"Records":[{"a":1,"b":"x"},{"a":2}]}"#,
        "\n",
        r#"{"Records":[]}"#,
        r#"{"other":{"Records":[{"a":9}]},"Records":[{"a":3,"b":"z"}],"after":[1,{"x":"]"}]}"#,
        // A top-level array of such values.
        r#"[{"Records":[{"a":4}]},{"Records":[{"a":5}]}]"#,
    );
    assert_eq!(
        rows(input, &trail),
        cells(&["1,x", "2,∅", "3,z", "4,∅", "5,∅"])
    );
}

#[test]
fn envelope_members_are_read_into_every_record_of_their_value() {
    let columns = r#"[{"name":"logGroup","type":"string"},{"name":"owner","type":"string"},
        {"name":"id","type":"string"},{"name":"timestamp","type":"int64"},
        {"name":"message","type":"string"}]"#;
    let cw = spec(columns, Some("logEvents"), &["owner", "logGroup"]);
    let input = concat!(
        r#"{"messageType":"DATA_MESSAGE","owner":"111","logGroup":"/aws/lambda/f","logStream":"s","subscriptionFilters":["f"],"logEvents":[{"id":"1","timestamp":10,"message":"hello"},{"id":"2","timestamp":11,"message":"{\"k\":1}"}]}"#,
        r#"{"messageType":"DATA_MESSAGE","owner":"222","logEvents":[{"id":"3","timestamp":12,"message":"no group"},{}]}"#,
    );
    assert_eq!(
        rows(input, &cw),
        vec![
            vec!["/aws/lambda/f", "111", "1", "10", "hello"],
            vec!["/aws/lambda/f", "111", "2", "11", r#"{"k":1}"#],
            vec!["∅", "222", "3", "12", "no group"],
            vec!["∅", "222", "∅", "∅", "∅"],
        ]
        .into_iter()
        .map(|r| r.into_iter().map(str::to_owned).collect::<Vec<_>>())
        .collect::<Vec<_>>()
    );
    // A record holding a member of the envelope holds a key twice: refused, as in JSON Lines.
    let twice = r#"{"owner":"1","logEvents":[{"id":"1","owner":"2"}]}"#;
    let err = parse_error(twice, &cw);
    assert!(
        err.contains("record 1 (line 1)") && err.contains("owner"),
        "{err}"
    );
    // Envelope members after the records (keys in sorted order): the records wait for them.
    let late = r#"{"logEvents":[{"id":"1"},{"id":"2"}],"logGroup":"g","owner":"o"}{"logEvents":[{"id":"3"}],"owner":"p"}"#;
    let got: Vec<_> = rows(late, &cw)
        .into_iter()
        .map(|r| format!("{}/{}/{}", r[0], r[1], r[2]))
        .collect();
    assert_eq!(got, ["g/o/1", "g/o/2", "∅/p/3"]);
    // Up to max_record_bytes of them.
    let mut small = cw.clone();
    small.max_record_bytes = 15;
    let err = parse_error(late, &small);
    assert!(
        err.starts_with("line 1: value 1 has more than max_record_bytes (15) of records before its envelope member(s) [\"owner\", \"logGroup\"]"),
        "{err}"
    );
}

#[test]
fn a_value_without_its_records_is_a_bad_row_never_skipped() {
    let trail = spec(AB, Some("Records"), &[]);
    let input = concat!(
        r#"{"Records":[{"a":1}]}"#,
        "\n",
        r#"{"digest":"x","Records":null}"#,
        "\n",
        r#"42"#,
        "\n",
        r#"{"Records":[{"a":2}]}"#,
    );
    assert_eq!(
        parse_error(input, &trail),
        r#"line 2: value 2 holds no "Records" array of records"#
    );
    let mut rejecting = trail.clone();
    rejecting.bad_rows = BadRows::Reject { max: 10 };
    let (stats, parquet) = run(input, &rejecting);
    assert_eq!(parquet.rows, cells(&["1,∅", "2,∅"]));
    let rejects: Vec<_> = stats
        .rejects
        .iter()
        .map(|r| (r.line, r.error.as_str(), String::from_utf8_lossy(&r.record)))
        .collect();
    assert_eq!(
        rejects,
        vec![
            (
                Some(2),
                r#"line 2: value 2 holds no "Records" array of records"#,
                r#"{"digest":"x","Records":null}"#.into()
            ),
            (Some(3), "line 3: value 3 is not a JSON object", "42".into()),
        ]
    );
}

#[test]
fn errors_name_the_record_its_line_and_the_path_inside_it() {
    let plain = spec(
        r#"[{"name":"a","type":"int64"},{"name":"r","type":"array<struct<x:int64>>"}]"#,
        Some("Records"),
        &[],
    );
    let input = "{\"Records\":[\n{\"a\":1},\n{\"a\":2,\"r\":[{\"x\":1},{\"x\":\"no\"}]}]}";
    let err = parse_error(input, &plain);
    assert!(
        err.starts_with("record 2 (line 3): column \"r[1].x\": "),
        "{err}"
    );
    let not_object = parse_error(r#"{"Records":[{"a":1},[1]]}"#, &plain);
    assert!(
        not_object.starts_with("record 2 (line 1): "),
        "{not_object}"
    );
    let mut rejecting = plain.clone();
    rejecting.bad_rows = BadRows::Reject { max: 10 };
    let (stats, parquet) = run(input, &rejecting);
    assert_eq!(parquet.rows.len(), 1);
    assert_eq!(stats.rejects.len(), 1);
    assert_eq!(
        (stats.rejects[0].line, stats.rejects[0].record_number),
        (Some(3), Some(2))
    );
}

#[test]
fn broken_structure_fails_the_object_under_either_policy() {
    let mut trail = spec(AB, Some("Records"), &[]);
    for bad_rows in [BadRows::Fail, BadRows::Reject { max: 10 }] {
        trail.bad_rows = bad_rows;
        for (input, expected) in [
            (
                r#"{"Records":[{"a":1}"#,
                "line 1: not JSON: expected the end of an array",
            ),
            (
                r#"{"Records" [{"a":1}]}"#,
                "line 1: not JSON: expected ':' after a key",
            ),
            (
                r#"{"Records":[{"a":1}{"a":2}]}"#,
                "line 1: not JSON: expected ',' or ']'",
            ),
            (
                "{\"Records\":[{\"b\":\"open\n",
                "line 1: not JSON: the input ends inside a string",
            ),
            (
                r#"{"Records":[{"a":1},]}"#,
                "line 1: not JSON: expected a value after ','",
            ),
        ] {
            let err = parse_error(input, &trail);
            assert!(err.starts_with(expected), "{input}: {err}");
        }
        // Brackets that do not match inside a record: the record does not read, and the array
        // around it does not close.
        let err = parse_error(r#"{"Records":[{"a":1]]}"#, &trail);
        let expected = match bad_rows {
            BadRows::Fail => "record 1 (line 1): ",
            BadRows::Reject { .. } => "line 1: not JSON: expected the end of an array",
        };
        assert!(err.starts_with(expected), "{err}");
    }
}

#[test]
fn a_record_past_max_record_bytes_is_refused_naming_it() {
    let mut plain = spec(AB, None, &[]);
    plain.max_record_bytes = 64;
    let long = format!(
        r#"[{{"a":1}},{{"a":2,"b":"{}"}},{{"a":3}}]"#,
        "x".repeat(100)
    );
    let err = parse_error(&long, &plain);
    assert_eq!(
        err,
        "record 2 (line 1): the record is longer than the limit of 64 bytes (max_record_bytes)"
    );
    plain.bad_rows = BadRows::Reject { max: 10 };
    let (stats, parquet) = run(&long, &plain);
    assert_eq!(parquet.rows, cells(&["1,∅", "3,∅"]));
    assert_eq!(stats.rejects[0].record_number, Some(2));
}

#[test]
fn row_numbers_count_records_across_values() {
    let mut trail = spec(AB, Some("Records"), &[]);
    trail.lineage = vec![("_row".into(), Lineage::RowNumber)];
    trail.object = Some(ObjectInfo::default());
    let input = r#"{"Records":[{"a":10},{"a":11}]}{"Records":[{"a":12}]}"#;
    let got: Vec<_> = rows(input, &trail)
        .into_iter()
        .map(|r| (r[0].clone(), r[2].clone()))
        .collect();
    assert_eq!(
        got,
        [("10", "1"), ("11", "2"), ("12", "3")].map(|(a, b)| (a.to_string(), b.to_string()))
    );
}

/// The records of `input`, cut with a buffer of `capacity` bytes.
fn cut(input: &[u8], capacity: usize, options: &JsonDocuments) -> Vec<String> {
    let mut documents = Documents::new(BufReader::with_capacity(capacity, input), options, 1 << 20);
    let mut out = Vec::new();
    loop {
        let mut buf = Vec::new();
        match documents.next(&mut buf).unwrap() {
            Next::End => return out,
            Next::Bad(e) => panic!("{e}"),
            Next::Record(_) => out.push(String::from_utf8(buf).unwrap()),
        }
    }
}

/// A file of generated values in a random layout, with what serde_json reads as its records
/// (each with the envelope's members added).
fn generated(next: &mut impl FnMut() -> u64, records_key: bool) -> (String, Vec<Value>) {
    let pieces = [
        "]", "}", "[", "{", "\\\"", "\\\\", ",", ":", " ", "\\n", "é", "\\u00e9", "x",
    ];
    let text = |next: &mut dyn FnMut() -> u64| -> String {
        (0..next() % 6)
            .map(|_| pieces[(next() % pieces.len() as u64) as usize])
            .collect()
    };
    let mut expected = Vec::new();
    let mut values = Vec::new();
    for v in 0..1 + next() % 5 {
        let records: Vec<Value> = (0..next() % 4)
            .map(|i| {
                let s: Value = serde_json::from_str(&format!("\"{}\"", text(next))).unwrap();
                json!({"a": v * 10 + i, "b": s, "n": {"deep": [[], {"k": [1, {"q": null}]}]}})
            })
            .collect();
        if records_key {
            let group = format!("g{v}");
            expected.extend(records.iter().map(|r| {
                let mut r = r.clone();
                r["group"] = json!(group);
                r
            }));
            values.push(
                json!({"group": group, "skip": {"Records": [1]}, "Records": records, "tail": "]"}),
            );
        } else {
            expected.extend(records.iter().cloned());
            values.extend(records);
        }
    }
    let render = |v: &Value, pretty: bool| {
        if pretty {
            serde_json::to_string_pretty(v).unwrap()
        } else {
            v.to_string()
        }
    };
    let pretty = next().is_multiple_of(2);
    let text = match next() % 3 {
        0 => render(&Value::Array(values.clone()), pretty),
        1 => values
            .iter()
            .map(|v| render(v, pretty))
            .collect::<Vec<_>>()
            .join(""),
        _ => values
            .iter()
            .map(|v| render(v, pretty))
            .collect::<Vec<_>>()
            .join(" \n\t"),
    };
    (text, expected)
}

#[test]
fn records_cut_from_generated_files_are_what_serde_json_reads_whatever_the_buffer() {
    let mut next = xorshift(0x5eed_d0c5);
    for round in 0..300 {
        let records_key = round % 2 == 0;
        let (text, expected) = generated(&mut next, records_key);
        let options = JsonDocuments {
            records: records_key.then(|| "Records".to_string()),
            envelope: if records_key {
                vec!["group".into()]
            } else {
                vec![]
            },
        };
        for capacity in [1, 2, 3, 7, 64, 1 << 16] {
            let got: Vec<Value> = cut(text.as_bytes(), capacity, &options)
                .iter()
                .map(|r| serde_json::from_str(r).unwrap())
                .collect();
            assert_eq!(got, expected, "round {round}, buffer {capacity}: {text}");
        }
        // And through the converter.
        let columns = r#"[{"name":"a","type":"int64"},{"name":"b","type":"string"},
            {"name":"group","type":"string"},{"name":"n","type":"json"}]"#;
        let spec = spec(
            columns,
            options.records.as_deref(),
            &options
                .envelope
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        let mut out = Vec::new();
        let stats = convert(text.as_bytes(), &spec, &mut out).unwrap();
        assert_eq!(stats.rows, expected.len() as u64, "{text}");
        let got = read_parquet(out).rows;
        for (row, want) in got.iter().zip(&expected) {
            assert_eq!(row[0], want["a"].to_string());
            assert_eq!(&row[1], want["b"].as_str().unwrap());
            assert_eq!(row[2], want["group"].as_str().unwrap_or("∅"));
        }
    }
}
