//! The audit log: every command that changes state (`run`, `replay`, `rewind`, `reset`,
//! `mark-processed`, `forget`, `mode`) writes one entry per source it touched — who, when,
//! the arguments, how many objects — into the ledger itself (an `audit` table in SQLite,
//! `~audit/…` items in DynamoDB). `tidemark audit` reads it back.

use std::process::ExitCode;

use serde_json::Value;
use tidemark::model::AuditEntry;

use super::print_json;
use crate::backend::Backend;
use crate::render::{Table, operator, when};
use crate::{Error, Out};

/// Most keys an entry lists; beyond, `keys_truncated` says how many more there were.
pub const MAX_KEYS: usize = 1000;

/// Write one audit entry for `command` on `source_id`.
pub async fn record(
    backend: &Backend,
    source_id: &str,
    command: &str,
    args: Value,
    affected: u64,
) -> Result<AuditEntry, Error> {
    let entry = AuditEntry {
        at: backend.now(),
        source_id: source_id.to_string(),
        command: command.to_string(),
        args,
        affected,
        operator: operator(),
    };
    backend.pipeline.ledger.audit(&entry).await?;
    Ok(entry)
}

/// `keys` as an audit argument: at most [`MAX_KEYS`], plus `keys_truncated` when cut.
pub fn with_keys(mut args: Value, keys: &[String]) -> Value {
    if let Value::Object(map) = &mut args {
        map.insert(
            "keys".into(),
            keys.iter()
                .take(MAX_KEYS)
                .cloned()
                .collect::<Vec<_>>()
                .into(),
        );
        if keys.len() > MAX_KEYS {
            map.insert("keys_truncated".into(), (keys.len() - MAX_KEYS).into());
        }
    }
    args
}

/// Does `entry` name `key` (as its `key`, or among its `keys`)?
pub fn names_key(entry: &AuditEntry, key: &str) -> bool {
    entry.args.get("key").and_then(Value::as_str) == Some(key)
        || entry
            .args
            .get("keys")
            .and_then(Value::as_array)
            .is_some_and(|keys| keys.iter().any(|k| k.as_str() == Some(key)))
}

/// The arguments of an entry for a table: compact JSON without the key list.
pub fn args_summary(entry: &AuditEntry) -> String {
    let mut args = entry.args.clone();
    if let Value::Object(map) = &mut args {
        map.remove("keys");
        map.remove("keys_truncated");
        map.retain(|_, v| !v.is_null());
    }
    args.to_string()
}

/// `tidemark audit`.
pub async fn audit_command(
    backend: &Backend,
    source: Option<String>,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    if let Some(s) = &source {
        backend.source(s)?;
    }
    let entries = backend.pipeline.ledger.audit_log(source.as_deref()).await?;
    if json {
        print_json(out, &entries)?;
        return Ok(ExitCode::SUCCESS);
    }
    if entries.is_empty() {
        writeln!(out, "the audit log is empty")?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&["AT", "OPERATOR", "SOURCE", "COMMAND", ">AFFECTED", "ARGS"]);
    for e in &entries {
        t.row(vec![
            when(e.at),
            e.operator.clone(),
            e.source_id.clone(),
            e.command.clone(),
            e.affected.to_string(),
            args_summary(e),
        ]);
    }
    write!(out, "{}", t.render())?;
    Ok(ExitCode::SUCCESS)
}
