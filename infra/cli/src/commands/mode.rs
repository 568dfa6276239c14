//! `mode SOURCE enable|pause|disable`: the operator's override of a source's mode, kept as a
//! control item in the ledger (SQLite table `sources`; DynamoDB item `~source/<id>`) so it
//! outlives the process and every CLI user sees it. `run` applies it and `status` shows it.
//! The Lambdas read the mode from their configuration document only: the per-event path
//! makes no extra read.

use std::process::ExitCode;

use serde::Serialize;
use serde_json::json;
use tidemark::config::Mode;

use super::audit;
use super::print_json;
use crate::backend::Backend;
use crate::{Error, Out};

/// What `mode` changed.
#[derive(Debug, Clone, Serialize)]
pub struct ModeChange {
    /// The source.
    pub source_id: String,
    /// The mode in force before (override, else the document's).
    pub previous: Mode,
    /// The mode now.
    pub mode: Mode,
    /// The document's mode (what the Lambdas use).
    pub configured: Mode,
}

/// Set the override of `source` to `mode`.
pub async fn set_mode(backend: &Backend, source: &str, mode: Mode) -> Result<ModeChange, Error> {
    let configured = backend.source(source)?.doc.mode;
    let ledger = &backend.pipeline.ledger;
    let previous = ledger.source_mode(source).await?.unwrap_or(configured);
    ledger.set_source_mode(source, mode, backend.now()).await?;
    audit::record(
        backend,
        source,
        "mode",
        json!({"mode": mode.as_str(), "previous": previous.as_str()}),
        1,
    )
    .await?;
    Ok(ModeChange {
        source_id: source.to_string(),
        previous,
        mode,
        configured,
    })
}

/// `tidemark mode`.
pub async fn mode_command(
    backend: &Backend,
    source: &str,
    mode: Mode,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    let change = set_mode(backend, source, mode).await?;
    if json {
        print_json(out, &change)?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "{}: mode {} (was {}) for `tidemark run`",
        change.source_id,
        change.mode.as_str(),
        change.previous.as_str()
    )?;
    let meaning = match mode {
        Mode::Enable => "process what is new and advance the ledger",
        Mode::Pause => "process what is new into its outputs, without advancing the ledger",
        Mode::Disable => "process every object into its output, ledger untouched",
    };
    writeln!(out, "  {meaning}")?;
    if change.configured != mode {
        writeln!(
            out,
            "  note: the Lambdas keep the document's mode ({}); change the document to change theirs",
            change.configured.as_str()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
