//! Nested values, paths, key matching, time formats and the policies for what does not fit,
//! read from JSON Lines.

use super::super::testutil::*;
use super::super::{
    BadRows, BadValues, ConvertSpec, InputFormat, KeyMatch, UnknownFields, convert,
};
use crate::schema::ColumnSpec;

/// A JSON Lines spec of these columns (options included), as a source document spells them.
fn spec(columns: &str) -> ConvertSpec {
    let columns: Vec<ColumnSpec> = serde_json::from_str(columns).unwrap();
    ConvertSpec::with_columns(InputFormat::JsonLines, &columns)
}

fn rescuing(columns: &str) -> ConvertSpec {
    let mut spec = spec(columns);
    spec.unknown_fields = UnknownFields::Rescue;
    spec.bad_values = BadValues::Rescue;
    spec
}

const TRAIL: &str = r#"[
    {"name": "eventName", "type": "string", "nullable": false},
    {"name": "userIdentity", "type": "struct<type:string,arn:string,sessionContext:struct<attributes:struct<mfaAuthenticated:bool,creationDate:timestamp>>>"},
    {"name": "resources", "type": "array<struct<ARN:string,type:string>>"},
    {"name": "requestParameters", "type": "json"},
    {"name": "tags", "type": "map<string,string>"},
    {"name": "user_arn", "path": "userIdentity.arn", "type": "string"},
    {"name": "first_arn", "path": "resources[0].ARN", "type": "string"},
    {"name": "second_type", "path": "resources[1].type", "type": "string"}
]"#;

const RECORD: &str = r#"{"eventName":"PutObject","userIdentity":{"type":"IAMUser","arn":"arn:aws:iam::1:user/a","sessionContext":{"attributes":{"mfaAuthenticated":true,"creationDate":"2024-01-02T03:04:05Z"}}},"resources":[{"ARN":"arn:aws:s3:::b/k","type":"AWS::S3::Object"},{"type":"AWS::S3::Bucket","ARN":"arn:aws:s3:::b"}],"requestParameters":{"bucketName": "b", "key":"k", "n": 1.50, "deep":[{"x":null}, "é\n"]},"tags":{"env":"prod","team":null}}"#;

#[test]
fn cloudtrail_shaped_records_land_in_nested_columns_and_paths() {
    let input = format!(
        "{RECORD}\n{{\"eventName\":\"GetObject\",\"userIdentity\":null,\"resources\":[],\"requestParameters\":null}}\n{{\"eventName\":\"x\",\"resources\":[null,{{\"type\":\"t\"}}],\"requestParameters\":[1,\"two\",{{}}],\"tags\":{{}}}}\n"
    );
    let (stats, file) = run(&input, &spec(TRAIL));
    assert_eq!(stats.rows, 3);
    assert_eq!(
        file.rows,
        text_rows(&[
            concat!(
                "PutObject|{type: IAMUser, arn: arn:aws:iam::1:user/a, sessionContext: {attributes: {mfaAuthenticated: true, creationDate: 2024-01-02T03:04:05Z}}}",
                "|[{ARN: arn:aws:s3:::b/k, type: AWS::S3::Object}, {ARN: arn:aws:s3:::b, type: AWS::S3::Bucket}]",
                r#"|{"bucketName":"b","key":"k","n":1.50,"deep":[{"x":null},"é\n"]}"#,
                "|{env: prod, team: ∅}|arn:aws:iam::1:user/a|arn:aws:s3:::b/k|AWS::S3::Bucket"
            ),
            "GetObject|∅|[]|∅|∅|∅|∅|∅",
            r#"x|∅|[∅, {ARN: ∅, type: t}]|[1,"two",{}]|{}|∅|∅|t"#,
        ])
    );
    assert!(stats.ignored.is_empty());
}

#[test]
fn a_nested_value_that_does_not_read_fails_naming_its_path() {
    let bad = RECORD.replace(
        r#""mfaAuthenticated":true"#,
        r#""mfaAuthenticated":"maybe""#,
    );
    let err = parse_error(format!("{RECORD}\n\n{bad}\n"), &spec(TRAIL));
    assert_eq!(
        err,
        r#"line 3: column "userIdentity.sessionContext.attributes.mfaAuthenticated": expected bool got "maybe""#
    );
    let bad = RECORD.replace(
        r#"{"type":"AWS::S3::Bucket","ARN":"arn:aws:s3:::b"}"#,
        r#"{"type":"AWS::S3::Bucket","ARN":7}"#,
    );
    assert_eq!(
        parse_error(format!("{bad}\n"), &spec(TRAIL)),
        r#"line 1: column "resources[1].ARN": expected string got 7"#
    );
    // The report of the issue: an object where a string was declared, shown as valid JSON.
    let as_string = spec(r#"[{"name":"userIdentity","type":"string"}]"#);
    let err = parse_error(format!("{RECORD}\n"), &as_string);
    assert_eq!(
        err,
        r#"line 1: column "userIdentity": expected string got {"type":"IAMUser","arn":"arn:aws:iam::1:user/a","sessionContext":{"attributes":{…"#
    );
    // A struct where a list is, and a required path that is absent.
    let err = parse_error(
        "{\"eventName\":\"a\",\"resources\":{\"ARN\":\"x\"}}\n",
        &spec(TRAIL),
    );
    assert_eq!(
        err,
        r#"line 1: column "resources": expected array<struct<ARN:string,type:string>> got {"ARN":"x"}"#
    );
    let required =
        spec(r#"[{"name":"arn","path":"userIdentity.arn","type":"string","nullable":false}]"#);
    let err = parse_error(
        "{\"userIdentity\":{\"arn\":\"a\"}}\n{\"userIdentity\":{}}\n",
        &required,
    );
    assert_eq!(
        err,
        r#"line 2: column "arn": missing value in a non-nullable column"#
    );
}

#[test]
fn unknown_fields_are_counted_refused_or_rescued_at_any_depth() {
    let columns = r#"[{"name":"a","type":"int64"},{"name":"s","type":"struct<x:int32,l:array<struct<y:string>>>"}]"#;
    let input = concat!(
        "{\"a\":1,\"extra\":{\"p\":1},\"s\":{\"x\":1,\"z\":true,\"l\":[{\"y\":\"a\",\"w\":[]},{\"w\":null}]}}\n",
        "{\"a\":2,\"extra\":null,\"s\":null}\n",
    );
    // Ignore (the default): dropped and counted per field; nulls hold nothing to drop.
    let (stats, file) = run(input, &spec(columns));
    assert_eq!(
        file.rows,
        text_rows(&["1|{x: 1, l: [{y: a}, {y: ∅}]}", "2|∅"])
    );
    assert_eq!(stats.ignored.values, 3);
    assert_eq!(
        stats
            .ignored
            .fields
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect::<Vec<_>>(),
        [("extra", 1), ("s.l[].w", 1), ("s.z", 1)]
    );
    // Fail: the first names its path.
    let mut fail = spec(columns);
    fail.unknown_fields = UnknownFields::Fail;
    assert_eq!(
        parse_error(input, &fail),
        r#"line 1: column "extra": not in the schema"#
    );
    let err = parse_error(
        "{\"a\":1,\"s\":{\"l\":[{},{\"y\":\"b\",\"w\":1}]}}\n",
        &fail,
    );
    assert_eq!(err, r#"line 1: column "s.l[1].w": not in the schema"#);
    // Rescue: kept with their paths, in order, the row landing.
    let (stats, file) = run(input, &rescuing(columns));
    assert_eq!(
        file.rows,
        text_rows(&[
            r#"1|{x: 1, l: [{y: a}, {y: ∅}]}|{"fields":{"extra":{"p":1},"s.z":true,"s.l[0].w":[]},"reasons":{"extra":"not in the schema","s.z":"not in the schema","s.l[0].w":"not in the schema"}}"#,
            "2|∅|∅",
        ])
    );
    assert_eq!(stats.rescued_rows, 1);
    assert!(stats.ignored.is_empty());
}

#[test]
fn bad_values_are_rescued_with_their_reason_and_sums_skip_them() {
    let columns = r#"[{"name":"n","type":"int64"},{"name":"d","type":"decimal(6,2)"},{"name":"s","type":"struct<ok:bool,at:timestamp>"},{"name":"tags","type":"map<string,int32>"}]"#;
    let mut spec = rescuing(columns);
    spec.sum_columns = vec!["n".into(), "d".into()];
    let input = concat!(
        "{\"n\":1,\"d\":\"1.5\",\"s\":{\"ok\":\"maybe\",\"at\":\"2024-01-02T03:04:05Z\"},\"tags\":{\"a\":1,\"b\":\"x\",\"a\":2}}\n",
        "{\"n\":\"two\",\"d\":1.005,\"s\":[1],\"tags\":[]}\n",
        "{\"n\":3,\"d\":2}\n",
    );
    let (stats, file) = run(input, &spec);
    assert_eq!(
        file.rows,
        text_rows(&[
            r#"1|1.50|{ok: ∅, at: 2024-01-02T03:04:05Z}|{a: 1, b: ∅}|{"fields":{"s.ok":"maybe","tags.b":"x","tags.a":2},"reasons":{"s.ok":"expected bool got \"maybe\"","tags.b":"cannot parse \"x\" as int32","tags.a":"the key appears twice in the object"}}"#,
            r#"∅|∅|∅|∅|{"fields":{"n":"two","d":1.005,"s":[1],"tags":[]},"reasons":{"n":"cannot parse \"two\" as int64","d":"cannot parse 1.005 as decimal(6,2): it has more than 2 digits after the point and would be rounded","s":"expected struct<ok:bool,at:timestamp> got [1]","tags":"expected map<string,int32> got []"}}"#,
            "3|2.00|∅|∅|∅",
        ])
    );
    assert_eq!(stats.rescued_rows, 2);
    assert_eq!(
        stats.sums["n"].to_string(),
        "4",
        "a rescued value is not summed"
    );
    assert_eq!(stats.sums["d"].to_string(), "3.50");
    // A rescued value in a required column leaves it NULL: the row still fails.
    let required = rescuing(r#"[{"name":"n","type":"int64","nullable":false}]"#);
    assert_eq!(
        parse_error("{\"n\":\"x\"}\n", &required),
        r#"line 1: column "n": missing value in a non-nullable column"#
    );
}

#[test]
fn a_key_given_twice_at_depth_fails_or_is_rescued() {
    let columns = r#"[{"name":"s","type":"struct<a:struct<b:int32>>"}]"#;
    let input = "{\"s\":{\"a\":{\"b\":1,\"b\":2}}}\n";
    assert_eq!(
        parse_error(input, &spec(columns)),
        r#"line 1: column "s.a.b": the key appears twice in the object"#
    );
    let (_, file) = run(input, &rescuing(columns));
    assert_eq!(
        file.rows,
        text_rows(&[
            r#"{a: {b: 1}}|{"fields":{"s.a.b":2},"reasons":{"s.a.b":"the key appears twice in the object"}}"#
        ])
    );
    // Three times: each later one under its own name.
    let (_, file) = run(
        "{\"s\":{\"a\":{\"b\":1,\"b\":2,\"b\":3}}}\n",
        &rescuing(columns),
    );
    assert!(
        file.rows[0][1].contains(r#""s.a.b":2,"s.a.b#2":3"#),
        "{:?}",
        file.rows
    );
}

#[test]
fn keys_may_be_matched_whatever_their_case() {
    let columns = r#"[{"name":"userId","type":"string"},{"name":"context","type":"struct<page:struct<url:string>>"},{"name":"page_url","path":"context.page.url","type":"string"}]"#;
    let input = concat!(
        "{\"userId\":\"a\",\"context\":{\"page\":{\"url\":\"/x\"}}}\n",
        "{\"UserID\":\"b\",\"Context\":{\"Page\":{\"URL\":\"/y\"}}}\n",
        "{\"userid\":\"c\"}\n",
    );
    let (_, exact) = run(input, &spec(columns));
    assert_eq!(
        exact.rows,
        text_rows(&["a|{page: {url: /x}}|/x", "∅|∅|∅", "∅|∅|∅"])
    );
    let mut folded = spec(columns);
    folded.json_keys = KeyMatch::CaseInsensitive;
    let (_, file) = run(input, &folded);
    assert_eq!(
        file.rows,
        text_rows(&["a|{page: {url: /x}}|/x", "b|{page: {url: /y}}|/y", "c|∅|∅"])
    );
    // Two keys of one object for one field: an error naming both, or the second rescued.
    let twice = "{\"userId\":\"a\",\"USERID\":\"b\"}\n";
    assert_eq!(
        parse_error(twice, &folded),
        r#"line 1: column "USERID": the keys "userId" and "USERID" differ only by case"#
    );
    let mut rescue = rescuing(columns);
    rescue.json_keys = KeyMatch::CaseInsensitive;
    let (_, file) = run(twice, &rescue);
    assert_eq!(
        file.rows[0],
        [
            "a",
            "∅",
            "∅",
            r#"{"fields":{"USERID":"b"},"reasons":{"USERID":"the keys \"userId\" and \"USERID\" differ only by case"}}"#
        ]
    );
}

#[test]
fn paths_cover_what_they_read_and_the_rest_is_unknown() {
    let columns = r#"[{"name":"arn","path":"userIdentity.arn","type":"string"},{"name":"first","path":"resources[0]","type":"json"}]"#;
    let input = r#"{"userIdentity":{"arn":"a","type":"IAMUser"},"resources":[{"ARN":"x"},{"ARN":"y"}],"other":1}"#;
    let (stats, file) = run(format!("{input}\n"), &spec(columns));
    assert_eq!(file.rows, text_rows(&[r#"a|{"ARN":"x"}"#]));
    assert_eq!(
        stats
            .ignored
            .fields
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect::<Vec<_>>(),
        [("other", 1), ("resources[]", 1), ("userIdentity.type", 1)]
    );
    let (_, file) = run(format!("{input}\n"), &rescuing(columns));
    assert_eq!(
        file.rows[0][2],
        r#"{"fields":{"userIdentity.type":"IAMUser","resources[1]":{"ARN":"y"},"other":1},"reasons":{"userIdentity.type":"not in the schema","resources[1]":"not in the schema","other":"not in the schema"}}"#
    );
    // A plain column of the head covers it all: no unknowns inside it.
    let both = r#"[{"name":"userIdentity","type":"json"},{"name":"arn","path":"userIdentity.arn","type":"string"}]"#;
    let (stats, file) = run(r#"{"userIdentity":{"arn":"a","type":"t"}}"#, &spec(both));
    assert_eq!(file.rows, text_rows(&[r#"{"arn":"a","type":"t"}|a"#]));
    assert!(stats.ignored.is_empty());
}

#[test]
fn json_columns_keep_the_text_compact_in_input_order() {
    let columns = r#"[{"name":"j","type":"json"}]"#;
    let input = concat!(
        "{\"j\": { \"b\" : [ 1 , 2.50 , -0 , 1e400 ] , \"a\" : \"\\u0041\\\"\\\\\\n\\u0001é😀\" , \"b\" : null } }\n",
        "{\"j\": \"text\"}\n{\"j\": 12345678901234567890123}\n{\"j\": null}\n{\"j\": true}\n{}\n",
    );
    let (_, file) = run(input, &spec(columns));
    assert_eq!(
        file.rows,
        text_rows(&[
            r#"{"b":[1,2.50,-0,1e400],"a":"A\"\\\n\u0001é😀","b":null}"#,
            r#""text""#,
            "12345678901234567890123",
            "∅",
            "true",
            "∅",
        ])
    );
}

#[test]
fn times_in_formats_zones_and_epoch_numbers() {
    let columns = r#"[{"name":"ms","type":"timestamp","format":"epoch_millis"},
        {"name":"local","type":"timestamp","format":"%d/%m/%Y %H:%M","timezone":"Europe/Paris"},
        {"name":"zoned","type":"timestamp","timezone":"America/New_York"},
        {"name":"day","type":"date","format":"epoch_seconds"}]"#;
    let input = concat!(
        "{\"ms\":1704164645123,\"local\":\"02/07/2024 03:04\",\"zoned\":\"2024-01-02T03:04:05\",\"day\":1704153600}\n",
        "{\"ms\":\"1704164645123.5\",\"zoned\":\"2024-01-02T03:04:05+01:00\"}\n",
    );
    let (_, file) = run(input, &spec(columns));
    assert_eq!(
        file.rows,
        text_rows(&[
            "2024-01-02T03:04:05.123Z|2024-07-02T01:04:00Z|2024-01-02T08:04:05Z|2024-01-02",
            "2024-01-02T03:04:05.123500Z|∅|2024-01-02T02:04:05Z|∅",
        ])
    );
    let err = parse_error("{\"day\":1704164645}\n", &spec(columns));
    assert!(
        err.starts_with(
            r#"line 1: column "day": cannot parse 1704164645 as date: it is not a midnight"#
        ),
        "{err}"
    );
}

#[test]
fn hostile_nesting_and_sizes_fail_clearly_with_bounded_work() {
    let depth = 100_000;
    let deep = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
    // In a json column: refused, as no reader downstream could read it back.
    let json = spec(r#"[{"name":"j","type":"json"}]"#);
    let input = format!("{{\"j\":[1]}}\n{{\"j\":{deep}}}\n");
    assert_eq!(
        parse_error(&input, &json),
        r#"line 2: column "j": the value is nested deeper than 1000 levels"#
    );
    // Rejected, with the good rows landing, under on_bad_row: reject.
    let mut reject = json.clone();
    reject.bad_rows = BadRows::Reject { max: 10 };
    let (stats, file) = run(&input, &reject);
    assert_eq!((stats.rows, stats.rejects.len()), (1, 1));
    assert_eq!(file.rows, text_rows(&["[1]"]));
    // In a typed column: an error whose value is shown cut short.
    let int = spec(r#"[{"name":"j","type":"int32"}]"#);
    let err = parse_error(format!("{{\"j\":{deep}}}\n"), &int);
    assert_eq!(
        err,
        format!(
            "line 1: column \"j\": expected int32 got {}…",
            "[".repeat(80)
        )
    );
    // In a field no column reads: dropped and counted, or rescued only if it can be kept.
    let (stats, _) = run(format!("{{\"j\":1,\"x\":{deep}}}\n"), &int);
    assert_eq!(stats.ignored.values, 1);
    let mut rescue = int.clone();
    rescue.unknown_fields = UnknownFields::Rescue;
    let err = parse_error(format!("{{\"j\":1,\"x\":{deep}}}\n"), &rescue);
    assert!(err.contains("nested deeper than 1000 levels"), "{err}");
    // A 100 MB array is refused by its line's length, after reading a bounded part of it.
    let array = spec(r#"[{"name":"a","type":"array<int64>"}]"#);
    let mut read = 0;
    let endless = std::io::Read::chain(
        &b"{\"a\":[0"[..],
        Sevens {
            left: 100 << 20,
            read: &mut read,
        },
    );
    let err = convert(endless, &array, Vec::new())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("longer than the limit of 8388608 bytes"),
        "{err}"
    );
    assert!(read < 10 << 20, "read {read} bytes of 100 MiB");
    // Five million elements (10 MB) under a limit raised for them: read whole.
    let big = format!("{{\"a\":[{}0]}}\n", "7,".repeat(5_000_000));
    let mut roomy = array.clone();
    roomy.max_record_bytes = 16 << 20;
    roomy.sum_columns = vec![];
    let stats = convert(big.as_bytes(), &roomy, Vec::new()).unwrap();
    assert_eq!(stats.rows, 1);
}

/// `,7` repeated for `left` bytes, counting what was read.
struct Sevens<'a> {
    left: usize,
    read: &'a mut usize,
}

impl std::io::Read for Sevens<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.left) & !1;
        for pair in buf[..n].chunks_mut(2) {
            pair.copy_from_slice(b",7");
        }
        self.left -= n;
        *self.read += n;
        Ok(n)
    }
}

#[test]
fn flat_sources_count_or_refuse_unknown_keys_on_either_path() {
    let columns = r#"[{"name":"a","type":"int64"}]"#;
    let input = "{\"a\":1,\"b\":2,\"c\":null}\n{\"b\":[3],\"a\":2}\n";
    let (fast, _) = run(input, &spec(columns));
    let (slow, _) = super::tests::arrow_only(|| run(input, &spec(columns)));
    assert_eq!(fast.ignored, slow.ignored);
    assert_eq!(fast.ignored.fields.get("b"), Some(&2));
    assert_eq!(fast.ignored.values, 2, "a null holds nothing to drop");
    let mut fail = spec(columns);
    fail.unknown_fields = UnknownFields::Fail;
    assert_eq!(
        parse_error(input, &fail),
        r#"line 1: column "b": not in the schema"#
    );
}

#[test]
fn json_texts_are_written_without_statistics() {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let columns = r#"[{"name":"s","type":"string"},{"name":"j","type":"json"},{"name":"n","type":"struct<k:json,v:string>"}]"#;
    let mut out = Vec::new();
    let input = "{\"s\":\"a\",\"j\":{\"x\":1},\"n\":{\"k\":[1],\"v\":\"b\"}}\n";
    convert(input.as_bytes(), &spec(columns), &mut out).unwrap();
    let reader = SerializedFileReader::new(bytes::Bytes::from(out)).unwrap();
    let group = reader.metadata().row_group(0);
    let with_stats: Vec<(String, bool)> = (0..group.num_columns())
        .map(|i| {
            let c = group.column(i);
            (c.column_path().string(), c.statistics().is_some())
        })
        .collect();
    assert_eq!(
        with_stats,
        [
            ("s".to_string(), true),
            ("j".to_string(), false),
            ("n.k".to_string(), false),
            ("n.v".to_string(), true)
        ]
    );
}
