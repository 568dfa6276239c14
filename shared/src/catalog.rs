//! Each source's table in the Glue Data Catalog, derived from the sources document: what
//! `tidemark catalog sync` (and the deploy's catalog step) writes, what `tidemark catalog ddl`
//! prints, and how a table found in the catalog compares with it.
//!
//! - A source without `output.table` gets a Parquet table over its output prefix: the output
//!   columns (schema, rescued column, lineage columns) in Glue's type spelling, and for
//!   `partitioning: key_date` the partition key `dt` with partition projection (no crawler,
//!   no partition to add: the partitions are computed from the table's properties).
//! - A source with `output.table` (a Delta Lake table) gets the definition Athena documents
//!   for Delta Lake: the location and `table_type = DELTA`, nothing else; Athena reads the
//!   schema, partitions and current files from the Delta log, so there are no columns to keep
//!   in step (and a table over the loose files would count replaced versions until VACUUM).
//!
//! Names are lower case, as Athena's DDL stores them (Glue and Athena match names without
//! case; Parquet columns are matched by name).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::config::{Partitioning, Source};
use crate::schema::{ColumnType, FieldType};

/// Hive's Parquet input format, as Athena's `STORED AS PARQUET` declares it.
pub const PARQUET_INPUT: &str = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat";
/// Hive's Parquet output format.
pub const PARQUET_OUTPUT: &str = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat";
/// Hive's Parquet SerDe.
pub const PARQUET_SERDE: &str = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe";
/// The first day partition projection lists for `dt`.
pub const PROJECTION_START: &str = "2020-01-01";

/// A column of a Glue table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GlueColumn {
    /// Its name, lower case.
    pub name: String,
    /// Its type, spelled as Glue and Athena spell it (`bigint`, `struct<a:int>`).
    #[serde(rename = "type")]
    pub ty: String,
}

/// How the table's files are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    /// Parquet files under the location (Hive's Parquet SerDe).
    Parquet,
    /// A Delta Lake table rooted at the location.
    Delta,
}

/// One source's table in the catalog.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TableDef {
    /// The table's name: the source id, lower case, other characters than letters, digits
    /// and `_` as `_`.
    pub name: String,
    /// The source it describes.
    pub source_id: String,
    /// `s3://bucket/prefix`.
    pub location: String,
    /// Parquet or Delta.
    pub storage: Storage,
    /// The columns (none for a Delta table: Athena reads them from its log).
    pub columns: Vec<GlueColumn>,
    /// Partition keys (`dt` for `key_date`).
    pub partition_keys: Vec<GlueColumn>,
    /// Table parameters (classification, partition projection, `table_type`).
    pub parameters: BTreeMap<String, String>,
}

/// A source's name as a table name.
pub fn table_name(source_id: &str) -> String {
    source_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// A name in a type spelling or DDL: lower case, in backquotes unless a plain identifier.
fn name_in_type(name: &str) -> String {
    let lower = name.to_lowercase();
    if !lower.is_empty() && lower.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        lower
    } else {
        format!("`{}`", lower.replace('`', "``"))
    }
}

/// `ty` spelled as Glue and Athena spell it: `int32` → `int`, `int64` → `bigint`, `float32`
/// → `float`, `float64` → `double`, `bool` → `boolean`, `json` → `string` (the JSON text),
/// nested types field by field, struct field names lower case.
pub fn glue_type(ty: &FieldType) -> String {
    match ty {
        FieldType::Scalar(s) => match s {
            ColumnType::Int32 => "int".into(),
            ColumnType::Int64 => "bigint".into(),
            ColumnType::Float32 => "float".into(),
            ColumnType::Float64 => "double".into(),
            ColumnType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
            ColumnType::String => "string".into(),
            ColumnType::Bool => "boolean".into(),
            ColumnType::Date => "date".into(),
            ColumnType::Timestamp => "timestamp".into(),
        },
        FieldType::Json => "string".into(),
        FieldType::Struct(fields) => format!(
            "struct<{}>",
            fields
                .iter()
                .map(|f| format!("{}:{}", name_in_type(&f.name), glue_type(&f.ty)))
                .collect::<Vec<_>>()
                .join(",")
        ),
        FieldType::Array(element) => format!("array<{}>", glue_type(element)),
        FieldType::Map(value) => format!("map<string,{}>", glue_type(value)),
    }
}

/// A source's table, or why it has none that can be defined.
pub fn table_for(source: &Source) -> Result<TableDef, String> {
    let out = &source.doc.output;
    let location = format!("s3://{}/{}", out.bucket, out.prefix);
    let name = table_name(source.id());
    if out.table.is_some() {
        return Ok(TableDef {
            name,
            source_id: source.id().to_string(),
            location,
            storage: Storage::Delta,
            columns: Vec::new(),
            partition_keys: Vec::new(),
            parameters: BTreeMap::from([("table_type".to_string(), "DELTA".to_string())]),
        });
    }
    let partition_columns = source.partition_columns().unwrap_or_default();
    let mut columns: Vec<GlueColumn> = Vec::new();
    for c in source.output_columns() {
        // A column partitioned under its own name is in the path, not in the files.
        if partition_columns
            .iter()
            .any(|p| p.moves_out() && p.from == c.name)
        {
            continue;
        }
        let lower = c.name.to_lowercase();
        if let Some(twin) = columns.iter().find(|g| g.name == lower) {
            return Err(format!(
                "source {}: columns {:?} and {:?} are one name in the catalog (names there have \
                 no case): rename one",
                source.id(),
                twin.name,
                c.name
            ));
        }
        columns.push(GlueColumn {
            name: lower,
            ty: glue_type(&c.ty),
        });
    }
    let mut parameters = BTreeMap::from([
        ("classification".to_string(), "parquet".to_string()),
        ("EXTERNAL".to_string(), "TRUE".to_string()),
    ]);
    let mut partition_keys = Vec::new();
    if out.partitioning == Partitioning::KeyDate {
        if columns.iter().any(|c| c.name == "dt") {
            return Err(format!(
                "source {}: a column is named dt, the partition key of key_date: rename it",
                source.id()
            ));
        }
        partition_keys.push(GlueColumn {
            name: "dt".into(),
            ty: "string".into(),
        });
        for (k, v) in [
            ("projection.enabled", "true".to_string()),
            ("projection.dt.type", "date".to_string()),
            ("projection.dt.format", "yyyy-MM-dd".to_string()),
            ("projection.dt.range", format!("{PROJECTION_START},NOW")),
            ("projection.dt.interval", "1".to_string()),
            ("projection.dt.interval.unit", "DAYS".to_string()),
            (
                "storage.location.template",
                format!("{location}dt=${{dt}}/"),
            ),
        ] {
            parameters.insert(k.to_string(), v);
        }
    }
    if !partition_columns.is_empty() {
        use crate::convert::partition::Transform;
        parameters.insert("projection.enabled".into(), "true".into());
        let mut template = location.clone();
        for p in partition_columns {
            let key = p.name().to_string();
            partition_keys.push(GlueColumn {
                name: key.clone(),
                ty: "string".into(),
            });
            template.push_str(&format!("{key}=${{{key}}}/"));
            let dated = match p.transform {
                Transform::Identity => None,
                Transform::Year => Some(("yyyy", "2020", "YEARS")),
                Transform::Month => Some(("yyyy-MM", "2020-01", "MONTHS")),
                Transform::Day => Some(("yyyy-MM-dd", PROJECTION_START, "DAYS")),
                Transform::Hour => Some(("yyyy-MM-dd-HH", "2020-01-01-00", "HOURS")),
            };
            let at = |what: &str| format!("projection.{key}.{what}");
            match dated {
                // Any value: a query names the values it reads (Athena's `injected` type).
                None => {
                    parameters.insert(at("type"), "injected".into());
                }
                Some((format, start, unit)) => {
                    parameters.insert(at("type"), "date".into());
                    parameters.insert(at("format"), format.into());
                    parameters.insert(at("range"), format!("{start},NOW"));
                    parameters.insert(at("interval"), "1".into());
                    parameters.insert(at("interval.unit"), unit.into());
                }
            }
        }
        parameters.insert("storage.location.template".into(), template);
    }
    Ok(TableDef {
        name,
        source_id: source.id().to_string(),
        location,
        storage: Storage::Parquet,
        columns,
        partition_keys,
        parameters,
    })
}

/// How a table found in the catalog compares with the one the document defines.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "change", content = "differences", rename_all = "lowercase")]
pub enum Change {
    /// Nothing to do.
    Same,
    /// Only additions (columns appended, struct fields appended, parameters): the table is
    /// updated in place and every file written before still reads.
    Additive(Vec<String>),
    /// A column removed, renamed, moved or retyped, another partition key, location or
    /// storage: refused (files written before would read wrong or not at all).
    Breaking(Vec<String>),
}

/// Is `to` the type `from` with struct fields appended (through arrays, maps and fields)?
fn type_extends(from: &str, to: &str) -> bool {
    match (parse_glue(from), parse_glue(to)) {
        (Some(a), Some(b)) => extends(&a, &b),
        _ => false,
    }
}

/// A Glue type spelling, parsed only as far as comparing them needs.
#[derive(Debug, PartialEq)]
enum Glue {
    Leaf(String),
    Struct(Vec<(String, Glue)>),
    Array(Box<Glue>),
    Map(Box<Glue>),
}

fn parse_glue(s: &str) -> Option<Glue> {
    let (g, rest) = parse_at(s.trim())?;
    rest.trim().is_empty().then_some(g)
}

fn parse_at(s: &str) -> Option<(Glue, &str)> {
    let s = s.trim_start();
    if let Some(rest) = s.strip_prefix("struct<") {
        let mut fields = Vec::new();
        let mut rest = rest;
        loop {
            let r = rest.trim_start();
            if let Some(after) = r.strip_prefix('>') {
                return Some((Glue::Struct(fields), after));
            }
            let r = r.strip_prefix(',').unwrap_or(r).trim_start();
            let (name, after) = if let Some(q) = r.strip_prefix('`') {
                let mut name = String::new();
                let mut chars = q.char_indices();
                let mut end = None;
                while let Some((i, c)) = chars.next() {
                    if c == '`' {
                        if q[i + 1..].starts_with('`') {
                            name.push('`');
                            chars.next();
                        } else {
                            end = Some(i + 1);
                            break;
                        }
                    } else {
                        name.push(c);
                    }
                }
                (name, &q[end?..])
            } else {
                let at = r.find(':')?;
                (r[..at].trim().to_string(), &r[at..])
            };
            let after = after.trim_start().strip_prefix(':')?;
            let (ty, after) = parse_at(after)?;
            fields.push((name.to_lowercase(), ty));
            rest = after;
        }
    }
    if let Some(rest) = s.strip_prefix("array<") {
        let (element, rest) = parse_at(rest)?;
        return Some((
            Glue::Array(Box::new(element)),
            rest.trim_start().strip_prefix('>')?,
        ));
    }
    if let Some(rest) = s.strip_prefix("map<") {
        let rest = rest.trim_start().strip_prefix("string")?.trim_start();
        let (value, rest) = parse_at(rest.strip_prefix(',')?)?;
        return Some((
            Glue::Map(Box::new(value)),
            rest.trim_start().strip_prefix('>')?,
        ));
    }
    // A scalar: up to the next `,` or `>` outside parentheses.
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' | '>' if depth == 0 => {
                return Some((Glue::Leaf(s[..i].trim().to_lowercase()), &s[i..]));
            }
            _ => {}
        }
    }
    Some((Glue::Leaf(s.trim().to_lowercase()), ""))
}

fn extends(from: &Glue, to: &Glue) -> bool {
    match (from, to) {
        (Glue::Leaf(a), Glue::Leaf(b)) => a.replace(' ', "") == b.replace(' ', ""),
        (Glue::Struct(a), Glue::Struct(b)) => {
            a.len() <= b.len()
                && a.iter()
                    .zip(b)
                    .all(|((na, ta), (nb, tb))| na == nb && extends(ta, tb))
        }
        (Glue::Array(a), Glue::Array(b)) | (Glue::Map(a), Glue::Map(b)) => extends(a, b),
        _ => false,
    }
}

fn same_type(a: &str, b: &str) -> bool {
    match (parse_glue(a), parse_glue(b)) {
        (Some(a), Some(b)) => a == b,
        _ => a.eq_ignore_ascii_case(b),
    }
}

/// Compare the table in the catalog (`current`) with the one the document defines.
pub fn compare(current: &TableDef, desired: &TableDef) -> Change {
    let mut additive = Vec::new();
    let mut breaking = Vec::new();
    if current.storage != desired.storage {
        breaking.push(format!(
            "storage: {:?} in the catalog, {:?} in the document",
            current.storage, desired.storage
        ));
    }
    if current.location.trim_end_matches('/') != desired.location.trim_end_matches('/') {
        breaking.push(format!(
            "location: {} in the catalog, {} in the document",
            current.location, desired.location
        ));
    }
    if current.partition_keys != desired.partition_keys {
        let show = |keys: &[GlueColumn]| {
            keys.iter()
                .map(|k| format!("{} {}", k.name, k.ty))
                .collect::<Vec<_>>()
                .join(", ")
        };
        breaking.push(format!(
            "partition keys: ({}) in the catalog, ({}) in the document",
            show(&current.partition_keys),
            show(&desired.partition_keys)
        ));
    }
    // Columns are matched by name, as Athena reads Parquet: an order change breaks nothing.
    for c in &current.columns {
        match desired.columns.iter().find(|d| d.name == c.name) {
            Some(d) if same_type(&c.ty, &d.ty) => {}
            Some(d) if type_extends(&c.ty, &d.ty) => {
                additive.push(format!(
                    "column {}: {} -> {} (fields added)",
                    c.name, c.ty, d.ty
                ));
            }
            Some(d) => breaking.push(format!(
                "column {}: {} in the catalog, {} in the document",
                c.name, c.ty, d.ty
            )),
            None => breaking.push(format!(
                "column {} {} is in the catalog, not in the document",
                c.name, c.ty
            )),
        }
    }
    for d in &desired.columns {
        if !current.columns.iter().any(|c| c.name == d.name) {
            additive.push(format!("add column {} {}", d.name, d.ty));
        }
    }
    for (k, v) in &desired.parameters {
        match current.parameters.get(k) {
            Some(was) if was == v => {}
            Some(was) => additive.push(format!("parameter {k}: {was} -> {v}")),
            None => additive.push(format!("parameter {k} = {v}")),
        }
    }
    if !breaking.is_empty() {
        Change::Breaking(breaking)
    } else if !additive.is_empty() {
        Change::Additive(additive)
    } else {
        Change::Same
    }
}

/// A single-quoted SQL string.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The Athena DDL that declares `table` in `database`: the same table `catalog sync` writes.
pub fn ddl(database: &str, table: &TableDef) -> String {
    let mut s = String::new();
    let full = format!("`{database}`.`{}`", table.name);
    match table.storage {
        Storage::Delta => {
            let _ = writeln!(s, "CREATE EXTERNAL TABLE {full}");
            let _ = writeln!(s, "LOCATION {}", quoted(&table.location));
            let _ = writeln!(s, "TBLPROPERTIES ('table_type' = 'DELTA');");
        }
        Storage::Parquet => {
            let _ = writeln!(s, "CREATE EXTERNAL TABLE IF NOT EXISTS {full} (");
            for (i, c) in table.columns.iter().enumerate() {
                let comma = if i + 1 < table.columns.len() { "," } else { "" };
                let _ = writeln!(s, "  `{}` {}{comma}", c.name, c.ty);
            }
            let _ = writeln!(s, ")");
            if !table.partition_keys.is_empty() {
                let keys: Vec<String> = table
                    .partition_keys
                    .iter()
                    .map(|k| format!("`{}` {}", k.name, k.ty))
                    .collect();
                let _ = writeln!(s, "PARTITIONED BY ({})", keys.join(", "));
            }
            let _ = writeln!(s, "STORED AS PARQUET");
            let _ = writeln!(s, "LOCATION {}", quoted(&table.location));
            let properties: Vec<String> = table
                .parameters
                .iter()
                .filter(|(k, _)| k.as_str() != "EXTERNAL")
                .map(|(k, v)| format!("  {} = {}", quoted(k), quoted(v)))
                .collect();
            if properties.is_empty() {
                s.pop();
                s.push_str(";\n");
            } else {
                let _ = writeln!(s, "TBLPROPERTIES (\n{}\n);", properties.join(",\n"));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn source(doc: serde_json::Value) -> Source {
        Config::from_json(&serde_json::json!({ "sources": [doc] }).to_string())
            .unwrap()
            .sources
            .remove(0)
    }

    /// (name, Glue type) of each column of `t`.
    fn names_and_types(t: &TableDef) -> Vec<(&str, &str)> {
        t.columns
            .iter()
            .map(|c| (c.name.as_str(), c.ty.as_str()))
            .collect()
    }

    fn trail() -> serde_json::Value {
        serde_json::json!({
            "source_id": "cloud-trail", "bucket": "landing", "prefix": "trail/", "format": "jsonl",
            "schema": [
                {"name": "eventTime", "type": "timestamp"},
                {"name": "userIdentity", "type": "struct<type:string,arn:string,sessionContext:struct<attributes:struct<mfaAuthenticated:string>>>"},
                {"name": "resources", "type": "array<struct<ARN:string,accountId:string>>"},
                {"name": "tags", "type": "map<string,int64>"},
                {"name": "requestParameters", "type": "json"},
                {"name": "amount", "type": "decimal(12,2)"},
                {"name": "ok", "type": "bool"},
                {"name": "n", "type": "int32"},
                {"name": "x", "type": "float32"},
                {"name": "y", "type": "float64"},
                {"name": "d", "type": "date"},
                {"name": "weird", "type": "struct<`a b`:string>"}
            ],
            "on_unknown_field": "rescue",
            "metadata_columns": {"_source_key": "key"},
            "output": {"bucket": "lake", "prefix": "trail/", "partitioning": "key_date"}
        })
    }

    #[test]
    fn columns_are_spelled_as_athena_declares_them() {
        let t = table_for(&source(trail())).unwrap();
        assert_eq!(t.name, "cloud_trail");
        let cols = names_and_types(&t);
        // The CloudTrail table of Athena's documentation spells its nested columns so:
        // `userIdentity STRUCT<type:STRING, ..., sessionContext:STRUCT<attributes:STRUCT<
        // mfaAuthenticated:STRING, ...>>>`, stored lower case.
        assert_eq!(
            cols,
            [
                ("eventtime", "timestamp"),
                (
                    "useridentity",
                    "struct<type:string,arn:string,sessioncontext:struct<attributes:struct<mfaauthenticated:string>>>"
                ),
                ("resources", "array<struct<arn:string,accountid:string>>"),
                ("tags", "map<string,bigint>"),
                ("requestparameters", "string"),
                ("amount", "decimal(12,2)"),
                ("ok", "boolean"),
                ("n", "int"),
                ("x", "float"),
                ("y", "double"),
                ("d", "date"),
                ("weird", "struct<`a b`:string>"),
                ("_rescued_data", "string"),
                ("_source_key", "string"),
            ]
        );
        assert_eq!(
            t.partition_keys,
            [GlueColumn {
                name: "dt".into(),
                ty: "string".into()
            }]
        );
        assert_eq!(t.location, "s3://lake/trail/");
        assert_eq!(
            t.parameters["storage.location.template"],
            "s3://lake/trail/dt=${dt}/"
        );
        assert_eq!(t.parameters["projection.dt.range"], "2020-01-01,NOW");
    }

    #[test]
    fn the_ddl_declares_the_same_table() {
        let t = table_for(&source(trail())).unwrap();
        let text = ddl("lakedb", &t);
        assert!(text.starts_with("CREATE EXTERNAL TABLE IF NOT EXISTS `lakedb`.`cloud_trail` (\n  `eventtime` timestamp,\n"), "{text}");
        assert!(text.contains("PARTITIONED BY (`dt` string)\nSTORED AS PARQUET\nLOCATION 's3://lake/trail/'\nTBLPROPERTIES (\n"), "{text}");
        assert!(
            text.contains("  'projection.dt.type' = 'date',\n"),
            "{text}"
        );
        assert!(text.ends_with(");\n"), "{text}");
        for c in &t.columns {
            assert!(text.contains(&format!("  `{}` {}", c.name, c.ty)), "{text}");
        }
        let mut delta = trail();
        delta["output"]["table"] = serde_json::json!({"format": "delta"});
        let d = table_for(&source(delta)).unwrap();
        assert_eq!(
            ddl("lakedb", &d),
            "CREATE EXTERNAL TABLE `lakedb`.`cloud_trail`\nLOCATION 's3://lake/trail/'\nTBLPROPERTIES ('table_type' = 'DELTA');\n"
        );
    }

    #[test]
    fn additions_update_and_everything_else_is_refused_with_the_difference() {
        let base = table_for(&source(trail())).unwrap();
        assert_eq!(compare(&base, &base), Change::Same);
        let mut more = trail();
        more["schema"][1]["type"] = "struct<type:string,arn:string,sessionContext:struct<attributes:struct<mfaAuthenticated:string,creationDate:timestamp>>,invokedBy:string>".into();
        more["schema"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"name": "extra", "type": "string"}));
        let grown = table_for(&source(more)).unwrap();
        // The new column comes before the rescued and lineage columns: matched by name, it is
        // an addition all the same.
        match compare(&base, &grown) {
            Change::Additive(d) => assert_eq!(d.len(), 2, "{d:?}"),
            other => panic!("{other:?}"),
        }
        let plain = |extra: bool, wider: bool| {
            let mut d = trail();
            d.as_object_mut().unwrap().remove("on_unknown_field");
            d.as_object_mut().unwrap().remove("metadata_columns");
            if wider {
                d["schema"][2]["type"] =
                    "array<struct<ARN:string,accountId:string,type:string>>".into();
            }
            if extra {
                d["schema"]
                    .as_array_mut()
                    .unwrap()
                    .push(serde_json::json!({"name": "Extra", "type": "int64"}));
            }
            table_for(&source(d)).unwrap()
        };
        match compare(&plain(false, false), &plain(true, true)) {
            Change::Additive(d) => assert_eq!(
                d,
                [
                    "column resources: array<struct<arn:string,accountid:string>> -> array<struct<arn:string,accountid:string,type:string>> (fields added)",
                    "add column extra bigint"
                ]
            ),
            other => panic!("{other:?}"),
        }
        match compare(&plain(true, true), &plain(false, false)) {
            Change::Breaking(d) => assert_eq!(
                d,
                [
                    "column resources: array<struct<arn:string,accountid:string,type:string>> in the catalog, array<struct<arn:string,accountid:string>> in the document",
                    "column extra bigint is in the catalog, not in the document"
                ]
            ),
            other => panic!("{other:?}"),
        }
        let mut retyped = trail();
        retyped["schema"][7]["type"] = "string".into();
        match compare(&base, &table_for(&source(retyped)).unwrap()) {
            Change::Breaking(d) => {
                assert_eq!(d, ["column n: int in the catalog, string in the document"])
            }
            other => panic!("{other:?}"),
        }
        let mut unpartitioned = trail();
        unpartitioned["output"]["partitioning"] = "none".into();
        match compare(&base, &table_for(&source(unpartitioned)).unwrap()) {
            Change::Breaking(d) => assert_eq!(
                d[0],
                "partition keys: (dt string) in the catalog, () in the document"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn partition_columns_are_keys_with_projection_and_leave_the_columns() {
        let mut d = trail();
        d["schema"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"name": "region", "type": "string"}));
        d["output"]["partitioning"] = serde_json::json!({"columns": [
            {"from": "eventTime", "as": "dt", "transform": "day"},
            {"from": "region"}
        ]});
        let t = table_for(&source(d)).unwrap();
        assert_eq!(
            t.partition_keys,
            [
                GlueColumn {
                    name: "dt".into(),
                    ty: "string".into()
                },
                GlueColumn {
                    name: "region".into(),
                    ty: "string".into()
                }
            ]
        );
        assert!(
            t.columns.iter().any(|c| c.name == "eventtime"),
            "from stays: named dt"
        );
        assert!(
            !t.columns.iter().any(|c| c.name == "region"),
            "region is in the path"
        );
        let p = |k: &str| t.parameters.get(k).map(String::as_str);
        assert_eq!(p("projection.dt.type"), Some("date"));
        assert_eq!(p("projection.dt.format"), Some("yyyy-MM-dd"));
        assert_eq!(p("projection.region.type"), Some("injected"));
        assert_eq!(
            p("storage.location.template"),
            Some("s3://lake/trail/dt=${dt}/region=${region}/")
        );
    }

    #[test]
    fn names_that_differ_only_by_case_are_refused() {
        let mut d = trail();
        d["schema"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"name": "EventTime", "type": "string"}));
        let e = table_for(&source(d)).unwrap_err();
        assert!(e.contains("\"eventtime\" and \"EventTime\""), "{e}");
    }

    /// A preset's table is the Athena table AWS documents for the log (the same columns, in
    /// its order, and types), with `event_time`, the rescued column and a `day` partition key
    /// projected by date: queries written for AWS's table run on it.
    #[test]
    fn a_presets_table_has_athenas_columns_and_a_projected_day() {
        let alb = source(serde_json::json!({
            "source_id": "alb", "preset": "aws.alb", "bucket": "logs", "prefix": "AWSLogs/",
            "output": {"bucket": "lake", "prefix": "alb/"},
        }));
        let t = table_for(&alb).unwrap();
        let cols = names_and_types(&t);
        // The start and the end of `alb_access_logs` as the Athena User Guide declares it.
        assert_eq!(
            cols[..7],
            [
                ("type", "string"),
                ("time", "string"),
                ("elb", "string"),
                ("client_ip", "string"),
                ("client_port", "int"),
                ("target_ip", "string"),
                ("target_port", "int"),
            ]
        );
        assert!(cols.contains(&("request_processing_time", "double")));
        assert!(cols.contains(&("received_bytes", "bigint")));
        assert!(cols.contains(&("lambda_error_reason", "string")));
        assert_eq!(
            cols[cols.len() - 3..],
            [
                ("conn_trace_id", "string"),
                ("event_time", "timestamp"),
                ("_rescued_data", "string"),
            ]
        );
        let keys: Vec<&str> = t.partition_keys.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(keys, ["day"]);
        let p = &t.parameters;
        assert_eq!(p["projection.day.type"], "date");
        assert_eq!(p["projection.day.format"], "yyyy-MM-dd");
        assert_eq!(p["storage.location.template"], "s3://lake/alb/day=${day}/");

        // CloudTrail's columns are Athena's, in lower case, structs included.
        let trail = source(serde_json::json!({
            "source_id": "trail", "preset": "aws.cloudtrail", "bucket": "logs",
            "output": {"bucket": "lake"},
        }));
        let t = table_for(&trail).unwrap();
        let ty = |name: &str| {
            t.columns
                .iter()
                .find(|c| c.name == name)
                .map(|c| c.ty.clone())
                .unwrap_or_else(|| panic!("{name}"))
        };
        assert_eq!(ty("eventtime"), "string");
        assert_eq!(ty("requestparameters"), "string");
        assert_eq!(
            ty("resources"),
            "array<struct<arn:string,accountid:string,type:string>>"
        );
        assert!(ty("useridentity").starts_with("struct<type:string,principalid:string,"));
    }
}
