//! `invoke FUNCTION --event FILE`: run a Lambda handler in-process on an event file, against
//! the chosen backends, so any real event can be replayed on a laptop. Prints the handler's
//! answer (stdout) and its summary and errors (stderr); exits 1 when the invocation would
//! fail or ask SQS for a retry.

use std::path::Path;
use std::process::ExitCode;

use clap::ValueEnum;
use tidemark::ingest;

use crate::backend::Backend;
use crate::{Error, Out};

/// The functions `invoke` can run.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Function {
    /// The ingest function.
    Ingest,
}

/// `tidemark invoke`.
pub async fn invoke_command(
    backend: &Backend,
    function: Function,
    event: &Path,
    concurrency: usize,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    let Function::Ingest = function;
    let text = std::fs::read_to_string(event)
        .map_err(|e| format!("cannot read {}: {e}", event.display()))?;
    let payload: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", event.display()))?;
    let ctx = backend.ctx(&format!("cli-{}", uuid::Uuid::new_v4()));
    let response = ingest::handle(&backend.pipeline, &payload, &ctx, concurrency).await?;
    eprintln!("summary: {}", serde_json::to_string(&response.summary)?);
    for e in &response.errors {
        eprintln!("error: {e}");
    }
    writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(&response.to_json())?
    )?;
    Ok(
        if response.must_fail() || !response.retry_messages.is_empty() {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        },
    )
}
