//! Line logs read through a pattern's named groups.

use super::super::testutil::*;
use super::super::{BadRows, ConvertSpec, InputFormat, LinePattern, UnknownFields};
use crate::schema::ColumnSpec;

fn spec(columns: &str, pattern: &str) -> ConvertSpec {
    let columns: Vec<ColumnSpec> = serde_json::from_str(columns).unwrap();
    let mut spec = ConvertSpec::with_columns(InputFormat::Regex, &columns);
    spec.lines = Some(LinePattern::new(pattern, vec!["-".into()], Some("#".into())).unwrap());
    spec
}

/// An S3 server access log's first fields: the bracketed time holds a space.
const S3: &str = r#"(?P<bucket_owner>\S+) (?P<bucket>\S+) \[(?P<request_time>[^\]]+)\] (?P<remote_ip>\S+) (?P<requester>\S+) (?P<request_id>\S+) (?P<operation>\S+) (?P<key>\S+) "(?P<request_uri>[^"]*)" (?P<http_status>\S+) (?P<error_code>\S+) (?P<bytes_sent>\S+)(?: (?P<rest>.*))?"#;

const S3_COLUMNS: &str = r#"[{"name":"bucket","type":"string"},
    {"name":"request_time","type":"timestamp","format":"%d/%b/%Y:%H:%M:%S %z"},
    {"name":"remote_ip","type":"string"},{"name":"operation","type":"string"},
    {"name":"key","type":"string"},{"name":"uri","path":"request_uri","type":"string"},
    {"name":"http_status","type":"int32"},{"name":"error_code","type":"string"},
    {"name":"bytes_sent","type":"int64"}]"#;

const LINES: &str = concat!(
    "# a comment line\n",
    "79a5 amzn-s3-demo-bucket [06/Feb/2019:00:00:38 +0000] 192.0.2.3 79a5 3E57 REST.GET.VERSIONING - \"GET /amzn-s3-demo-bucket?versioning HTTP/1.1\" 200 - 113 - 7 - \"-\" \"S3Console/0.4\" -\n",
    "\n",
    "79a5 amzn-s3-demo-bucket [06/Feb/2019:00:00:38 -0130] 2001:db8::1 - 891C REST.PUT.OBJECT a/b.csv \"PUT /a/b.csv HTTP/1.1\" 403 AccessDenied -\n",
);

#[test]
fn named_groups_are_the_fields_and_markers_are_null() {
    let (stats, parquet) = run(LINES, &spec(S3_COLUMNS, S3));
    assert_eq!(stats.rows, 2);
    assert_eq!(
        parquet.rows,
        vec![
            vec![
                "amzn-s3-demo-bucket",
                "2019-02-06T00:00:38Z",
                "192.0.2.3",
                "REST.GET.VERSIONING",
                "∅",
                "GET /amzn-s3-demo-bucket?versioning HTTP/1.1",
                "200",
                "∅",
                "113",
            ],
            vec![
                "amzn-s3-demo-bucket",
                "2019-02-06T01:30:38Z",
                "2001:db8::1",
                "REST.PUT.OBJECT",
                "a/b.csv",
                "PUT /a/b.csv HTTP/1.1",
                "403",
                "AccessDenied",
                "∅",
            ],
        ]
        .into_iter()
        .map(|r| r.into_iter().map(str::to_owned).collect::<Vec<_>>())
        .collect::<Vec<_>>()
    );
    // Groups no column reads are unknown fields: ignored and counted (the NULLs hold nothing).
    assert_eq!(stats.ignored.values, 6, "{:?}", stats.ignored);
    assert_eq!(
        stats.ignored.fields.keys().collect::<Vec<_>>(),
        ["bucket_owner", "request_id", "requester", "rest"]
    );
    let mut strict = spec(S3_COLUMNS, S3);
    strict.unknown_fields = UnknownFields::Fail;
    assert!(parse_error(LINES, &strict).contains("line 2"));
}

#[test]
fn a_line_that_does_not_match_is_a_bad_row_naming_it() {
    let input = format!("{LINES}not a log line\n");
    let err = parse_error(&input, &spec(S3_COLUMNS, S3));
    assert_eq!(err, "line 5: the line does not match the pattern");
    let mut rejecting = spec(S3_COLUMNS, S3);
    rejecting.bad_rows = BadRows::Reject { max: 5 };
    let (stats, parquet) = run(&input, &rejecting);
    assert_eq!(parquet.rows.len(), 2);
    assert_eq!(stats.rejects.len(), 1);
    assert_eq!(stats.rejects[0].record, b"not a log line");
    // A value that does not read as its type names its line and column.
    let bad = LINES.replace(" 403 ", " 4x3 ");
    let err = parse_error(&bad, &spec(S3_COLUMNS, S3));
    assert!(err.starts_with("line 4: column \"http_status\""), "{err}");
}

#[test]
fn patterns_without_names_or_that_do_not_compile_are_refused() {
    assert!(
        LinePattern::new("(\\S+) (\\S+)", vec![], None)
            .unwrap_err()
            .contains("names no group")
    );
    assert!(LinePattern::new("(?P<a>", vec![], None).is_err());
    // Anchored: a pattern that matches part of a line does not match it.
    let partial = spec(r#"[{"name":"a","type":"string"}]"#, r"(?P<a>\w+)");
    assert_eq!(
        parse_error("abc def\n", &partial),
        "line 1: the line does not match the pattern"
    );
}
