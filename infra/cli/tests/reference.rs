//! The CLI reference page (`docs/pages/reference/cli.md`) is generated from the clap
//! definitions, so it cannot drift: this test renders it and fails when the committed page
//! differs. `TIDEMARK_DOCS=overwrite cargo test -p tidemark-cli --test cli reference::` writes it.

use std::path::{Path, PathBuf};

use clap::CommandFactory;

const HEADER: &str = "\
# CLI reference

Every command of `tidemark`, the operator CLI, with its options, as `tidemark <command> --help`
prints them. This page is generated from the CLI's own definitions
(`infra/cli/tests/reference.rs`; `TIDEMARK_DOCS=overwrite cargo test -p tidemark-cli --test
cli reference::` writes it again) and the test suite fails when it is out of date.

How the commands fit together is in [Getting started](../getting-started.md); the backends
(`--backend local`, the default, or `aws`) in the [deployment guide](../deploy.md). TIME
arguments are RFC 3339, a date, `now`, or relative (`-90s`, `-2h`, `-1d`, `-1w`).

Exit codes: 0 success; 1 the command ran and found a problem (an object failed, a record is
missing, the demo's totals differ); 2 the command could not run (usage, configuration,
backend).
";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The command with every environment variable's value hidden (the page must not depend on
/// the environment the test runs in) and a fixed width.
fn command() -> clap::Command {
    fn hide_env(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|a| a.hide_env_values(true))
            .mut_subcommands(hide_env)
    }
    hide_env(tidemark_cli::Cli::command()).term_width(100)
}

fn render(cmd: &mut clap::Command, path: &[String], page: &mut String, toc: &mut Vec<String>) {
    let name = path.join(" ");
    let depth = path.len().min(3);
    let anchor = path.join("-");
    if path.len() > 1 {
        toc.push(format!(
            "{}- [`{}`](#{})",
            "  ".repeat(path.len() - 2),
            name,
            anchor
        ));
    }
    page.push_str(&format!(
        "\n{} `{}` {{#{}}}\n\n",
        "#".repeat(depth + 1),
        name,
        anchor
    ));
    let help = cmd.render_long_help().to_string();
    page.push_str("```text\n");
    for line in help.lines() {
        page.push_str(line.trim_end());
        page.push('\n');
    }
    page.push_str("```\n");
    let subcommands: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .map(|s| s.get_name().to_string())
        .collect();
    for sub in subcommands {
        let mut child = cmd.find_subcommand_mut(&sub).expect("listed").clone();
        let mut child_path = path.to_vec();
        child_path.push(sub);
        render(&mut child, &child_path, page, toc);
    }
}

fn reference() -> String {
    let mut cmd = command();
    cmd.build();
    let mut body = String::new();
    let mut toc = Vec::new();
    render(&mut cmd, &["tidemark".to_string()], &mut body, &mut toc);
    format!(
        "{HEADER}\n## Commands\n\n{}\n{}",
        toc.join("\n"),
        body.replacen(
            "\n## `tidemark` {#tidemark}",
            "\n## `tidemark` (global options) {#tidemark}",
            1
        )
    )
}

/// Compare a generated file with the committed one (or write it, under
/// `TIDEMARK_DOCS=overwrite`); `what` names the definitions it comes from.
fn check_current(path: &Path, fresh: &str, what: &str) {
    if std::env::var("TIDEMARK_DOCS").as_deref() == Ok("overwrite") {
        std::fs::write(path, fresh).expect("write a generated reference");
        return;
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == fresh,
        "{} is out of date with {what}: run \
         `TIDEMARK_DOCS=overwrite cargo test -p tidemark-cli --test cli reference::` and commit it \
         (first differing line: {:?})",
        path.display(),
        committed
            .lines()
            .zip(fresh.lines())
            .find(|(a, b)| a != b)
            .map(|(a, b)| format!("page: {a:?}, definitions: {b:?}"))
    );
}

#[test]
fn cli_reference_page_is_current() {
    let path = repo_root().join("docs/pages/reference/cli.md");
    check_current(&path, &reference(), "the CLI's definitions");
}

#[test]
fn cli_reference_names_every_command() {
    let page = reference();
    let cmd = command();
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let heading = format!("`tidemark {}`", sub.get_name());
        assert!(page.contains(&heading), "no section for {heading}");
    }
    assert!(page.contains("--backend"), "the global options are missing");
}

// ---- The configuration reference: generated from the sources document's JSON Schema, which
// schemars derives from the document's types (`tidemark::config::ConfigDoc`, feature
// `config-schema`) and their doc comments.

const CONFIG_HEADER: &str = "\
# Configuration reference

Every field of the *sources document*, the one JSON document that the Lambdas and the CLI
read at start-up (from the file named by `TIDEMARK_CONFIG_FILE` or `--config`, or inline from
`TIDEMARK_CONFIG`) and validate before any event is touched: an unknown field or a wrong value
fails with the path of the field at fault (`invalid configuration at sources[1].schema[2].type:
…`). How to write one is in [Sources and schemas](../guides/sources-and-schemas.md).

This page is generated from the document's own types and their doc comments
(`infra/cli/tests/reference.rs`; `TIDEMARK_DOCS=overwrite cargo test -p tidemark-cli --test
cli reference::` writes it again) and the test suite fails when it is out of date. The same
definitions as a JSON Schema, for editors that validate as you type:
[`sources.schema.json`](sources.schema.json).
";

fn schema_json() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(tidemark::config::ConfigDoc))
        .expect("the schema as JSON")
}

/// Doc-comment text made fit for one cell of a Markdown table.
fn cell(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    // Rust intra-doc links, [`Type::item`], become plain code.
    while let Some(start) = rest.find("[`") {
        let Some(end) = rest[start..].find("`]") else {
            break;
        };
        out.push_str(&rest[..start]);
        out.push_str(&rest[start + 1..start + end + 1]);
        rest = &rest[start + end + 2..];
    }
    out.push_str(rest);
    out.replace("\n\n", "<br>")
        .replace('\n', " ")
        .replace('|', "\\|")
}

fn definition<'a>(schema: &'a serde_json::Value, reference: &str) -> &'a serde_json::Value {
    let name = reference
        .strip_prefix("#/$defs/")
        .expect("a local definition");
    &schema["$defs"][name]
}

/// The schema of a property with `null` taken out of `anyOf` / `type` (optional fields).
fn non_null(property: &serde_json::Value) -> serde_json::Value {
    if let Some(any) = property.get("anyOf").and_then(|a| a.as_array()) {
        let rest: Vec<&serde_json::Value> = any.iter().filter(|s| s["type"] != "null").collect();
        if rest.len() == 1 {
            let mut merged = rest[0].clone();
            for key in ["description", "default"] {
                if let Some(v) = property.get(key) {
                    merged[key] = v.clone();
                }
            }
            return merged;
        }
    }
    let mut p = property.clone();
    if let Some(types) = p.get("type").and_then(|t| t.as_array()).cloned() {
        let rest: Vec<_> = types.into_iter().filter(|t| t != "null").collect();
        if rest.len() == 1 {
            p["type"] = rest[0].clone();
        }
    }
    p
}

/// Allowed values of an enum definition, each with its description.
fn enum_values(def: &serde_json::Value) -> Option<Vec<(String, String)>> {
    if let Some(values) = def.get("enum").and_then(|e| e.as_array()) {
        return Some(
            values
                .iter()
                .map(|v| (v.as_str().unwrap_or_default().to_string(), String::new()))
                .collect(),
        );
    }
    let variants = def.get("oneOf").and_then(|o| o.as_array())?;
    let mut out = Vec::new();
    for variant in variants {
        let description = variant["description"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if let Some(value) = variant.get("const").and_then(|c| c.as_str()) {
            out.push((value.to_string(), description));
        } else if let Some(values) = variant.get("enum").and_then(|e| e.as_array()) {
            for v in values {
                out.push((v.as_str()?.to_string(), description.clone()));
            }
        } else {
            return None;
        }
    }
    Some(out)
}

/// An object section still to render: its path in the document and its definition.
struct Pending {
    path: String,
    def: serde_json::Value,
}

fn anchor(path: &str) -> String {
    let parts: Vec<&str> = path
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|p| !p.is_empty())
        .collect();
    if parts.is_empty() {
        "document".to_string()
    } else {
        parts.join("-")
    }
}

/// The type column of a property, and the object definition it leads to, if any.
fn type_text(
    schema: &serde_json::Value,
    property: &serde_json::Value,
    path: &str,
    queue: &mut Vec<Pending>,
) -> (String, Option<Vec<(String, String)>>) {
    let p = non_null(property);
    if let Some(reference) = p.get("$ref").and_then(|r| r.as_str()) {
        let def = definition(schema, reference);
        if let Some(values) = enum_values(def) {
            return ("string".to_string(), Some(values));
        }
        if def.get("properties").is_some() {
            queue.push(Pending {
                path: path.to_string(),
                def: def.clone(),
            });
            return (format!("object, [below](#{})", anchor(path)), None);
        }
        if def.get("additionalProperties").is_some() {
            return type_text(schema, def, path, queue);
        }
        // One of several spellings (`"key_date"`, or `{"columns": [...]}`): each named.
        if let Some(alternatives) = def.get("anyOf").and_then(|a| a.as_array()) {
            let mut kinds = Vec::new();
            let mut listed = None;
            for alternative in alternatives {
                let (kind, values) = type_text(schema, alternative, path, queue);
                listed = listed.or(values);
                kinds.push(kind);
            }
            return (kinds.join(", or "), listed);
        }
        return (def["type"].as_str().unwrap_or("value").to_string(), None);
    }
    match p.get("type").and_then(|t| t.as_str()) {
        Some("array") => {
            let (inner, values) = type_text(schema, &p["items"], &format!("{path}[]"), queue);
            (format!("array of {inner}"), values)
        }
        Some("object") if p.get("properties").is_some() => {
            queue.push(Pending {
                path: path.to_string(),
                def: p.clone(),
            });
            (format!("object, [below](#{})", anchor(path)), None)
        }
        Some("object") => {
            let inner = p
                .get("additionalProperties")
                .map(|a| type_text(schema, a, &format!("{path}.*"), queue));
            match inner {
                Some((inner, values)) => (format!("object of name → {inner}"), values),
                None => ("object".to_string(), None),
            }
        }
        Some("integer") => {
            let format = p.get("format").and_then(|f| f.as_str()).unwrap_or("");
            let unsigned = p.get("minimum").is_some_and(|m| m == 0);
            (
                match (format, unsigned) {
                    ("uint32", _) | ("uint", _) => "integer ≥ 0 (32-bit)".to_string(),
                    ("uint64", _) => "integer ≥ 0".to_string(),
                    ("int32", _) => "integer (32-bit)".to_string(),
                    (_, true) => "integer ≥ 0".to_string(),
                    _ => "integer".to_string(),
                },
                None,
            )
        }
        Some("number") => ("number".to_string(), None),
        Some("boolean") => ("boolean".to_string(), None),
        Some("string") => {
            if p.get("minLength") == Some(&serde_json::json!(1))
                && p.get("maxLength") == Some(&serde_json::json!(1))
            {
                ("string (one character)".to_string(), None)
            } else {
                ("string".to_string(), None)
            }
        }
        _ => ("value".to_string(), None),
    }
}

fn render_object(
    schema: &serde_json::Value,
    pending: &Pending,
    queue: &mut Vec<Pending>,
) -> String {
    let def = &pending.def;
    let mut out = String::new();
    let title = if pending.path.is_empty() {
        "The document".to_string()
    } else {
        format!("`{}`", pending.path)
    };
    out.push_str(&format!("\n## {title} {{#{}}}\n\n", anchor(&pending.path)));
    if let Some(description) = def.get("description").and_then(|d| d.as_str()) {
        out.push_str(&cell(description).replace("<br>", "\n\n"));
        out.push_str("\n\n");
    }
    let required: Vec<&str> = def
        .get("required")
        .and_then(|r| r.as_array())
        .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    out.push_str("| field | type | required / default | what it is |\n|---|---|---|---|\n");
    let properties = def["properties"].as_object().expect("an object definition");
    for (name, property) in properties {
        let path = if pending.path.is_empty() {
            name.clone()
        } else {
            format!("{}.{name}", pending.path)
        };
        let (ty, values) = type_text(schema, property, &path, queue);
        let default = if required.contains(&name.as_str()) {
            "required".to_string()
        } else {
            match property.get("default") {
                Some(serde_json::Value::Null) | None => "optional".to_string(),
                Some(v) => format!("`{}`", serde_json::to_string(v).expect("json")),
            }
        };
        let mut what = cell(property["description"].as_str().unwrap_or_default());
        if let Some(values) = values {
            let listed: Vec<String> = values
                .iter()
                .map(|(v, d)| {
                    if d.is_empty() {
                        format!("`{v}`")
                    } else {
                        format!("`{v}`: {}", cell(d).trim_end_matches('.'))
                    }
                })
                .collect();
            what.push_str(&format!("<br>Values:<br>{}", listed.join("<br>")));
        }
        out.push_str(&format!("| `{name}` | {ty} | {default} | {what} |\n"));
    }
    out
}

fn configuration_reference(schema: &serde_json::Value) -> String {
    let mut page = CONFIG_HEADER.to_string();
    let mut queue = vec![Pending {
        path: String::new(),
        def: schema.clone(),
    }];
    let mut done = std::collections::HashSet::new();
    while !queue.is_empty() {
        let pending = queue.remove(0);
        if !done.insert(pending.path.clone()) {
            continue;
        }
        let mut found = Vec::new();
        page.push_str(&render_object(schema, &pending, &mut found));
        queue.extend(found);
    }
    page
}

#[test]
fn configuration_reference_and_schema_are_current() {
    let schema = schema_json();
    let dir = repo_root().join("docs/pages/reference");
    let what = "the sources document's types";
    check_current(
        &dir.join("configuration.md"),
        &configuration_reference(&schema),
        what,
    );
    let json = serde_json::to_string_pretty(&schema).expect("json") + "\n";
    check_current(&dir.join("sources.schema.json"), &json, what);
}

/// Every field the document accepts is on the page: a field added to the types without a
/// section would fail here even before the page is regenerated.
#[test]
fn configuration_reference_names_every_field() {
    let schema = schema_json();
    let page = configuration_reference(&schema);
    for (name, def) in schema["$defs"].as_object().expect("definitions") {
        for field in def
            .get("properties")
            .and_then(|p| p.as_object())
            .into_iter()
            .flatten()
            .map(|(f, _)| f)
        {
            assert!(
                page.contains(&format!("| `{field}` |")),
                "{name}.{field} is not on the configuration page"
            );
        }
    }
    for field in [
        "source_id",
        "schema",
        "on_bad_row",
        "merge_keys",
        "null_values",
        "max_silence",
    ] {
        assert!(page.contains(&format!("| `{field}` |")), "{field} missing");
    }
}

/// The sample documents of the repository validate against the generated schema's shape:
/// every field they use is a property the schema declares.
#[test]
fn sample_documents_use_only_declared_fields() {
    let schema = schema_json();
    let doc: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("infra/sample/sources.json")).expect("sample"),
    )
    .expect("the sample parses");
    let source_def = definition(
        &schema,
        schema["properties"]["sources"]["items"]["$ref"]
            .as_str()
            .expect("sources are a $ref"),
    );
    for source in doc["sources"].as_array().expect("sources") {
        for key in source.as_object().expect("a source").keys() {
            assert!(
                source_def["properties"].get(key).is_some(),
                "the sample uses {key}, which the schema does not declare"
            );
        }
    }
}
