//! The commands, one module per group. Each exposes a typed function that does the work and
//! returns a serializable report (what the tests assert on), and a `*_command` function that
//! prints the report (a table, or `--json`) and picks the exit code.

pub mod audit;
pub mod backfill;
pub mod convert;
pub mod explain;
pub mod init;
pub mod invoke;
pub mod mode;
pub mod outputs;
pub mod plan;
pub mod rename;
pub mod repair;
pub mod run;
pub mod status;
pub mod table;
pub mod watermark;

use serde::Serialize;

use crate::{Error, Out};

/// Print `value` as pretty JSON, one document.
pub(crate) fn print_json(out: Out<'_>, value: &impl Serialize) -> Result<(), Error> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)?;
    Ok(())
}
