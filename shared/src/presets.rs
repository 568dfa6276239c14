//! Presets: the source blocks for the logs AWS itself writes to S3 (`"preset": "aws.alb"`).
//!
//! A preset is data: one file per log under `shared/presets/`, holding where AWS documents the
//! log's fields and the Athena table for it, where AWS writes the files, and the source block
//! that reads them (format, pattern or records, schema, policies, partitioning by event day).
//! The columns are named and typed as the Athena table AWS documents, so queries written for
//! that table run unchanged on the output; an event-time column is added where Athena's time is
//! text, so that the output can be partitioned by event day.
//!
//! [`expand`] applies a source's own members to its preset's block as a JSON Merge Patch (RFC
//! 7396): members the source gives replace the preset's (objects merged member by member, so
//! `"output": {"bucket": "lake"}` keeps the preset's partitioning; arrays and scalars replaced
//! whole; `null` removes the preset's member). The expanded block is then an ordinary source:
//! validated, fingerprinted and planned as if written out, so a preset whose expansion changes
//! in a new release shows as a configuration change in `tidemark plan`.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// One preset, as its file holds it.
#[derive(Debug, Clone, Serialize)]
pub struct Preset {
    /// Its name (`aws.alb`).
    pub name: String,
    /// What it reads (`Application Load Balancer access logs`).
    pub title: String,
    /// Where AWS documents the fields (guide, section and address).
    pub fields: String,
    /// The Athena table whose columns it writes (guide, section and address), if AWS documents
    /// one.
    pub athena: Option<String>,
    /// Where AWS writes the files (a key with placeholders).
    pub keys: String,
    /// Notes: what differs from the Athena table, and why.
    pub notes: Vec<String>,
    /// The source block it expands into (no `source_id`, `bucket` nor `output.bucket`).
    pub source: Map<String, Value>,
}

/// The preset files, compiled in: each `presets/<name>.json`.
macro_rules! files {
    ($($name:literal),* $(,)?) => {
        [$(($name, include_str!(concat!("../presets/", $name, ".json")))),*]
    };
}
const FILES: [(&str, &str); 9] = files!(
    "aws.cloudtrail",
    "aws.cloudwatch_logs",
    "aws.alb",
    "aws.nlb",
    "aws.clb",
    "aws.cloudfront",
    "aws.s3_access",
    "aws.vpc_flow",
    "aws.waf",
);

/// Every preset, in the order `tidemark presets` lists them.
pub fn all() -> Vec<Preset> {
    FILES.iter().map(|(name, text)| parse(name, text)).collect()
}

/// The preset named `name`.
pub fn get(name: &str) -> Option<Preset> {
    FILES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(name, text)| parse(name, text))
}

/// The names of the presets.
pub fn names() -> Vec<&'static str> {
    FILES.iter().map(|(n, _)| *n).collect()
}

fn parse(name: &str, text: &str) -> Preset {
    // The files are part of the build; their tests read each one.
    let mut doc: Map<String, Value> = serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("presets/{name}.json is not a JSON object: {e}"));
    let mut take = |key: &str| doc.remove(key).unwrap_or(Value::Null);
    let text = |v: Value| v.as_str().unwrap_or_default().to_string();
    let preset = Preset {
        name: text(take("name")),
        title: text(take("title")),
        fields: text(take("fields")),
        athena: take("athena").as_str().map(str::to_string),
        keys: text(take("keys")),
        notes: match take("notes") {
            Value::Array(notes) => notes.into_iter().map(text).collect(),
            _ => Vec::new(),
        },
        source: match take("source") {
            Value::Object(source) => source,
            _ => panic!("presets/{name}.json has no source block"),
        },
    };
    assert_eq!(preset.name, name, "presets/{name}.json names itself");
    preset
}

/// Expand the `"preset"` of every source of a sources document (`{"sources": [...]}`): each
/// source with one becomes its preset's block with the source's own members applied (see the
/// module's documentation), and keeps `"preset"` to say where it came from. The rest of the
/// document is passed on as written, member order and repeated members included, so that its
/// reading reports what it reported before. An unknown preset, or a `"preset"` that is not a
/// string, is an error naming the source (`sources[1].preset`).
pub fn expand(text: &str) -> Result<Cow<'_, str>, (String, String)> {
    // A document that does not read as an object of sources is passed on whole: its reading
    // says what is wrong with it.
    if !text.contains("\"preset\"") {
        return Ok(Cow::Borrowed(text));
    }
    let Ok(Members(doc)) = serde_json::from_str::<Members>(text) else {
        return Ok(Cow::Borrowed(text));
    };
    let mut out = String::with_capacity(text.len());
    out.push('{');
    for (n, (key, value)) in doc.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        push_key(&mut out, key);
        let sources = match serde_json::from_str::<Vec<&RawValue>>(value.get()) {
            Ok(sources) if key == "sources" => sources,
            _ => {
                out.push_str(value.get());
                continue;
            }
        };
        out.push('[');
        for (i, source) in sources.into_iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            expand_source(&mut out, source, i)?;
        }
        out.push(']');
    }
    out.push('}');
    Ok(Cow::Owned(out))
}

/// One source, expanded into `out` (as written when it names no preset).
fn expand_source(out: &mut String, source: &RawValue, i: usize) -> Result<(), (String, String)> {
    let own = match serde_json::from_str::<Members>(source.get()) {
        Ok(Members(own)) if own.iter().any(|(k, _)| k == "preset") => own,
        _ => {
            out.push_str(source.get());
            return Ok(());
        }
    };
    let at = format!("sources[{i}].preset");
    let (_, name) = own
        .iter()
        .rfind(|(k, _)| k == "preset")
        .expect("looked for above");
    let Ok(name) = serde_json::from_str::<String>(name.get()) else {
        return Err((at, "a preset is named by a string, e.g. \"aws.alb\"".into()));
    };
    let Some(preset) = get(&name) else {
        return Err((
            at,
            format!(
                "unknown preset {name:?} (the presets: {}; `tidemark presets` lists them)",
                names().join(", ")
            ),
        ));
    };
    // The preset's members the source leaves alone, then the source's own, in its order:
    // objects both give merged, `null` dropping the preset's member.
    let mut block = preset.source;
    out.push('{');
    let mut first = true;
    let mut member = |out: &mut String, key: &str, value: &str| {
        if !std::mem::take(&mut first) {
            out.push(',');
        }
        push_key(out, key);
        out.push_str(value);
    };
    let given: Vec<&str> = own.iter().map(|(k, _)| k.as_str()).collect();
    for (key, value) in block.iter().filter(|(k, _)| !given.contains(&k.as_str())) {
        member(out, key, &value.to_string());
    }
    for (key, raw) in &own {
        // `null` removes the preset's member, and is nothing where the preset has none.
        if raw.get().trim() == "null" {
            block.remove(key);
            continue;
        }
        match block.remove(key) {
            Some(mut theirs @ Value::Object(_)) => {
                let Ok(patch) = serde_json::from_str::<Value>(raw.get()) else {
                    member(out, key, raw.get());
                    continue;
                };
                merge_patch(&mut theirs, &patch);
                member(out, key, &theirs.to_string());
            }
            _ => member(out, key, raw.get()),
        }
    }
    out.push('}');
    Ok(())
}

fn push_key(out: &mut String, key: &str) {
    out.push_str(&Value::from(key).to_string());
    out.push(':');
}

/// A JSON object's members as written: in order, repeated ones kept, values unread.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Members<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, &'de RawValue>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(Visitor)
    }
}

/// RFC 7396: `patch` applied to `target`.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target) = target else {
        unreachable!("made an object above")
    };
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_preset_file_is_read_and_names_its_sources() {
        for preset in all() {
            assert!(!preset.title.is_empty(), "{}", preset.name);
            assert!(preset.fields.contains("https://"), "{}", preset.name);
            if let Some(athena) = &preset.athena {
                assert!(athena.contains("https://docs.aws.amazon.com/"), "{athena}");
            }
            assert!(!preset.keys.is_empty(), "{}", preset.name);
            for key in ["source_id", "bucket", "preset"] {
                assert!(!preset.source.contains_key(key), "{} {key}", preset.name);
            }
        }
        assert_eq!(names().len(), all().len());
    }

    #[test]
    fn every_preset_expands_into_a_valid_source() {
        for name in names() {
            let doc = json!({"sources": [{
                "source_id": "logs", "bucket": "landing", "preset": name,
                "output": {"bucket": "lake", "prefix": "logs/"},
            }]});
            let config = crate::config::Config::from_json(&doc.to_string())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let source = &config.sources[0];
            assert_eq!(source.doc.preset.as_deref(), Some(name));
            // Every preset partitions by event day, under the output prefix the source gave.
            assert_eq!(source.doc.output.prefix, "logs/");
            let columns = &source.doc.output.partitioning.columns;
            assert_eq!(columns.len(), 1, "{name}");
            assert_eq!(columns[0].name(), "day", "{name}");
        }
    }

    #[test]
    fn the_sources_own_members_are_a_merge_patch() {
        let doc = json!({"sources": [{
            "source_id": "alb", "bucket": "landing", "preset": "aws.alb",
            "include": ["AWSLogs/*/elasticloadbalancing/eu-west-1/*"],
            "regex": {"null_values": ["-"]},
            "output": {"bucket": "lake", "partitioning": null},
            "on_bad_row": "reject",
            "max_object_bytes": null,
        }]});
        let doc: Value = serde_json::from_str(&expand(&doc.to_string()).unwrap()).unwrap();
        let s = &doc["sources"][0];
        let preset = get("aws.alb").unwrap().source;
        // Arrays and scalars replaced, objects merged, null removes.
        assert_eq!(
            s["include"],
            json!(["AWSLogs/*/elasticloadbalancing/eu-west-1/*"])
        );
        assert_eq!(s["regex"]["null_values"], json!(["-"]));
        assert_eq!(s["regex"]["pattern"], preset["regex"]["pattern"]);
        assert_eq!(s["output"]["bucket"], "lake");
        assert!(s["output"].get("partitioning").is_none());
        assert_eq!(s["on_bad_row"], "reject");
        assert_eq!(s["schema"], preset["schema"]);
        assert_eq!(s["preset"], "aws.alb");
        assert!(s.get("max_object_bytes").is_none());
    }

    #[test]
    fn an_unknown_or_misspelt_preset_names_the_source() {
        for (preset, says) in [
            (
                json!("aws.elb"),
                "unknown preset \"aws.elb\" (the presets: aws.cloudtrail",
            ),
            (json!(7), "a preset is named by a string"),
        ] {
            let doc = json!({"sources": [
                {"source_id": "a", "bucket": "b", "preset": "aws.waf", "output": {"bucket": "c"}},
                {"source_id": "d", "bucket": "b", "preset": preset, "output": {"bucket": "c"}},
            ]});
            let err = crate::config::Config::from_json(&doc.to_string())
                .unwrap_err()
                .to_string();
            assert!(err.contains("sources[1].preset"), "{err}");
            assert!(err.contains(says), "{err}");
        }
    }

    #[test]
    fn a_preset_and_its_written_out_block_are_the_same_configuration() {
        // `tidemark presets show` prints the block; pasted into a document it is the same
        // source, fingerprint included, so moving between them rewrites nothing.
        let with = json!({"sources": [{
            "source_id": "vpc", "bucket": "landing", "preset": "aws.vpc_flow",
            "output": {"bucket": "lake"},
        }]});
        let mut block = Value::Object(get("aws.vpc_flow").unwrap().source);
        merge_patch(
            &mut block,
            &json!({"source_id": "vpc", "bucket": "landing", "output": {"bucket": "lake"}}),
        );
        let without = json!({ "sources": [block] });
        let a = crate::config::Config::from_json(&with.to_string()).unwrap();
        let b = crate::config::Config::from_json(&without.to_string()).unwrap();
        assert_eq!(a.sources[0].fingerprint, b.sources[0].fingerprint);
    }

    #[test]
    fn each_preset_takes_its_logs_and_not_the_others_under_one_prefix() {
        // One bucket receiving every log under `AWSLogs/`, as AWS lays them out.
        let keys = [
            (
                "aws.cloudtrail",
                "AWSLogs/1/CloudTrail/us-east-1/2026/12/01/1_CloudTrail_us-east-1_20261201T1000Z_A1.json.gz",
            ),
            (
                "aws.alb",
                "AWSLogs/1/elasticloadbalancing/us-east-1/2026/12/01/1_elasticloadbalancing_us-east-1_app.lb.5_20261201T0005Z_192.0.2.1_x.log.gz",
            ),
            (
                "aws.nlb",
                "AWSLogs/1/elasticloadbalancing/us-east-1/2026/12/01/1_elasticloadbalancing_us-east-1_net.lb.5_20261201T0005Z_x.log.gz",
            ),
            (
                "aws.clb",
                "AWSLogs/1/elasticloadbalancing/us-east-1/2026/12/01/1_elasticloadbalancing_us-east-1_lb_20261201T0005Z_192.0.2.1_x.log",
            ),
            (
                "aws.vpc_flow",
                "AWSLogs/1/vpcflowlogs/us-east-1/2026/12/01/1_vpcflowlogs_us-east-1_fl-1_20261201T0005Z_x.log.gz",
            ),
            (
                "aws.waf",
                "AWSLogs/1/WAFLogs/us-east-1/acl/2026/12/01/00/05/1_waflogs_us-east-1_acl_20261201T0005Z_x.log.gz",
            ),
        ];
        let sources: Vec<_> = keys
            .iter()
            .map(|(name, _)| {
                json!({"source_id": name.replace('.', "-"), "preset": name, "bucket": "logs",
                       "prefix": "AWSLogs/", "output": {"bucket": "lake", "prefix": format!("{name}/")}})
            })
            .collect();
        let config =
            crate::config::Config::from_json(&json!({ "sources": sources }).to_string()).unwrap();
        for (name, key) in keys {
            let takers: Vec<&str> = config.route("logs", key).map(|s| s.id()).collect();
            assert_eq!(takers, [name.replace('.', "-")], "{key}");
        }
        // A CloudTrail digest file is no log.
        let digest = "AWSLogs/1/CloudTrail-Digest/us-east-1/2026/12/01/1_CloudTrail-Digest_us-east-1_x.json.gz";
        assert_eq!(config.route("logs", digest).count(), 0);
    }
}
