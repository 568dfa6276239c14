//! `presets`: the source blocks for the logs AWS writes to S3. `tidemark presets` lists them
//! (name, format, what each reads, where AWS documents its fields); `tidemark presets show NAME`
//! prints a whole source block using the preset, expanded (format, pattern or records,
//! include, schema, policies, partitioning), ready to paste into the sources document and edit.
//! Needs no sources document and opens no backend.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{Value, json};
use tidemark::presets::{self, Preset};

use super::print_json;
use crate::render::Table;
use crate::{Error, Out};

/// `tidemark presets [show NAME]`.
#[derive(Debug, Args)]
pub struct PresetsArgs {
    /// What to do (default: list the presets).
    #[command(subcommand)]
    pub action: Option<PresetsAction>,
}

/// The `presets` subcommands.
#[derive(Debug, Subcommand)]
pub enum PresetsAction {
    /// Print a source block using the preset, expanded: every member the preset sets,
    /// written out, with the places given here (edit them, or anything else, and paste the
    /// block into the sources document; written out or as `"preset"`, it is the same source).
    Show(ShowArgs),
}

/// `tidemark presets show NAME`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The preset (`tidemark presets` lists them).
    pub name: String,
    /// The source's id (default: the preset's name after `aws.`).
    #[arg(long)]
    pub source_id: Option<String>,
    /// The bucket AWS writes the logs to.
    #[arg(long, default_value = "amzn-s3-demo-logs")]
    pub bucket: String,
    /// The key prefix under it (default: `AWSLogs/` for logs AWS writes there, else none).
    #[arg(long)]
    pub prefix: Option<String>,
    /// The bucket of the Parquet outputs.
    #[arg(long, default_value = "amzn-s3-demo-lake")]
    pub output_bucket: String,
    /// The outputs' prefix (default: the source id and `/`).
    #[arg(long)]
    pub output_prefix: Option<String>,
    /// Keep `"preset": NAME` in the block instead of writing the preset out.
    #[arg(long)]
    pub short: bool,
}

/// The source block `show` prints.
pub fn show(args: &ShowArgs) -> Result<Value, Error> {
    let preset = presets::get(&args.name).ok_or_else(|| {
        format!(
            "unknown preset {:?} (the presets: {})",
            args.name,
            presets::names().join(", ")
        )
    })?;
    let id = args
        .source_id
        .clone()
        .unwrap_or_else(|| preset.name.trim_start_matches("aws.").replace('.', "_"));
    let prefix = args
        .prefix
        .clone()
        .unwrap_or_else(|| match preset.keys.starts_with("AWSLogs/") {
            true => "AWSLogs/".into(),
            false => String::new(),
        });
    let output_prefix = args.output_prefix.clone().unwrap_or(format!("{id}/"));
    let own = json!({
        "source_id": id, "preset": preset.name, "bucket": args.bucket, "prefix": prefix,
        "output": {"bucket": args.output_bucket, "prefix": output_prefix},
    });
    if args.short {
        return Ok(own);
    }
    let doc = json!({ "sources": [own] }).to_string();
    let text = presets::expand(&doc).map_err(|(at, message)| format!("{at}: {message}"))?;
    let mut doc: Value = serde_json::from_str(&text)?;
    let mut block = doc["sources"][0].take();
    // Written out, the block stands on its own: it is what the preset expands into.
    if let Some(b) = block.as_object_mut() {
        b.remove("preset");
    }
    Ok(block)
}

/// Run `presets`.
pub fn presets_command(args: PresetsArgs, json: bool, out: Out<'_>) -> Result<ExitCode, Error> {
    match args.action {
        Some(PresetsAction::Show(show_args)) => {
            // The block is JSON either way: it is meant to be pasted.
            print_json(out, &show(&show_args)?)?;
        }
        None => {
            let all = presets::all();
            if json {
                print_json(out, &all)?;
            } else {
                write!(out, "{}", list(&all).render())?;
                writeln!(
                    out,
                    "\n`tidemark presets show NAME` prints one as a source block; \
                     `tidemark --json presets` adds where AWS documents each log's fields and \
                     table, where it writes the files, and what differs from the Athena table."
                )?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn list(all: &[Preset]) -> Table {
    let mut t = Table::new(&["PRESET", "FORMAT", "READS", "PARTITIONED BY"]);
    for p in all {
        let day = p
            .source
            .get("output")
            .and_then(|o| o.pointer("/partitioning/columns/0"))
            .map(|c| format!("day of {}", c["from"].as_str().unwrap_or_default()))
            .unwrap_or_default();
        t.row(vec![
            p.name.clone(),
            p.source["format"].as_str().unwrap_or_default().to_string(),
            p.title.clone(),
            day,
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(name: &str) -> ShowArgs {
        ShowArgs {
            name: name.into(),
            source_id: None,
            bucket: "logs".into(),
            prefix: None,
            output_bucket: "lake".into(),
            output_prefix: None,
            short: false,
        }
    }

    #[test]
    fn a_shown_block_is_a_valid_source_and_the_same_as_the_preset() {
        for name in presets::names() {
            let block = show(&args(name)).unwrap();
            assert!(block.get("preset").is_none(), "{name}");
            assert!(block["schema"].as_array().is_some_and(|s| !s.is_empty()));
            let written =
                tidemark::config::Config::from_json(&json!({ "sources": [block] }).to_string())
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
            let short = show(&ShowArgs {
                short: true,
                ..args(name)
            })
            .unwrap();
            assert_eq!(short["preset"], name);
            let preset =
                tidemark::config::Config::from_json(&json!({ "sources": [short] }).to_string())
                    .unwrap();
            assert_eq!(
                written.sources[0].fingerprint, preset.sources[0].fingerprint,
                "{name}"
            );
        }
        let alb = show(&args("aws.alb")).unwrap();
        assert_eq!(alb["source_id"], "alb");
        assert_eq!(alb["prefix"], "AWSLogs/");
        assert_eq!(alb["output"]["prefix"], "alb/");
        let cf = show(&args("aws.cloudfront")).unwrap();
        assert_eq!(cf["prefix"], "");
        let err = show(&args("aws.elb")).unwrap_err().to_string();
        assert!(err.contains("unknown preset \"aws.elb\""), "{err}");
    }

    #[test]
    fn the_list_names_every_preset_and_its_partitioning() {
        let text = list(&presets::all()).render();
        for name in presets::names() {
            assert!(text.contains(name), "{text}");
        }
        assert!(text.contains("day of event_time"), "{text}");
        assert!(text.contains("day of date"), "{text}");
    }
}
