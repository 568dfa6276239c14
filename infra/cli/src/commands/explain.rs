//! `explain SOURCE KEY`: the whole ledger record of one object — status, the committed
//! version with its rows, sums and outputs, its rejected and rescued rows and the fields not
//! in the schema whose values it ignored (with their counts), a live or expired claim, the
//! pending version, attempts and the last error — the first rows of its rejects file when it
//! has one, and the audit entries that named the key (a rewind, a reset, a mark, a run that
//! processed it).

use std::process::ExitCode;

use serde::Serialize;
use tidemark::model::{AuditEntry, Record, Target};
use tidemark::ports::GetOutcome;
use tokio::io::AsyncReadExt;

use super::audit::{args_summary, names_key};
use super::print_json;
use crate::backend::Backend;
use crate::render::{ignored_fields, when, when_ms};
use crate::{Error, Out};

/// What `explain` shows.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// The record, if the ledger has one.
    pub record: Option<Record>,
    /// The first [`REJECTS_SHOWN`] rows of the committed version's rejects file, as written
    /// (`on_bad_row: reject`); empty when there is none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rejected_rows: Vec<serde_json::Value>,
    /// Audit entries that named the key, oldest first.
    pub audit: Vec<AuditEntry>,
}

/// Rows of a rejects file `explain` shows.
pub const REJECTS_SHOWN: usize = 10;

/// The record of `source`/`key` and the audit entries naming it.
pub async fn explain(backend: &Backend, source: &str, key: &str) -> Result<Explanation, Error> {
    let ledger = &backend.pipeline.ledger;
    let record = ledger.get(source, key).await?;
    let audit = ledger
        .audit_log(Some(source))
        .await?
        .into_iter()
        .filter(|e| names_key(e, key))
        .collect();
    let mut rejected_rows = Vec::new();
    if let Some(file) = record
        .as_ref()
        .and_then(|r| r.committed.as_ref()?.rejects.as_ref())
    {
        let store = &backend.pipeline.store;
        if let GetOutcome::Found { mut body, .. } =
            store.get(&file.bucket, &file.key, Some(&file.etag)).await?
        {
            let mut bytes = Vec::new();
            body.read_to_end(&mut bytes).await?;
            rejected_rows = bytes
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .take(REJECTS_SHOWN)
                .map(|l| {
                    serde_json::from_slice(l).unwrap_or_else(|_| String::from_utf8_lossy(l).into())
                })
                .collect();
        }
    }
    Ok(Explanation {
        record,
        rejected_rows,
        audit,
    })
}

/// `tidemark explain`.
pub async fn explain_command(
    backend: &Backend,
    source: &str,
    key: &str,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    let max_attempts = backend.source(source)?.doc.max_attempts;
    let e = explain(backend, source, key).await?;
    if json {
        print_json(out, &e)?;
    } else {
        match &e.record {
            Some(r) => {
                write!(out, "{}", describe(r, max_attempts))?;
                let rejected = r.committed.as_ref().map_or(0, |c| c.rejected);
                if !e.rejected_rows.is_empty() {
                    writeln!(
                        out,
                        "rejected rows ({} of {rejected}):",
                        e.rejected_rows.len()
                    )?;
                }
                for row in &e.rejected_rows {
                    let error = row["error"].as_str().unwrap_or("?");
                    let record = row["record"].as_str().map_or_else(
                        || "(not UTF-8: record_base64 in the file)".to_string(),
                        |r| format!("{r:?}"),
                    );
                    writeln!(out, "  {error}  {record}")?;
                }
            }
            None => writeln!(
                out,
                "no ledger record for {source} / {key}: never seen (or forgotten)"
            )?,
        }
        if !e.audit.is_empty() {
            writeln!(out, "audit:")?;
            for a in &e.audit {
                writeln!(
                    out,
                    "  {}  {}  {} {}",
                    when(a.at),
                    a.operator,
                    a.command,
                    args_summary(a)
                )?;
            }
        }
    }
    Ok(if e.record.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A target in words.
pub fn label(t: &Target) -> String {
    let seq =
        |s: Option<&tidemark::events::Sequencer>| s.map_or("-".to_string(), |s| s.to_string());
    match t {
        Target::Version(v) => format!(
            "version {} (etag {}, sequencer {}, {} bytes)",
            v.version,
            v.etag.as_deref().unwrap_or("-"),
            seq(v.sequencer.as_ref()),
            v.size.map_or("?".to_string(), |s| s.to_string())
        ),
        Target::Delete(d) => format!("delete (sequencer {})", seq(d.sequencer.as_ref())),
    }
}

/// The record in words, one field a line.
pub fn describe(r: &Record, max_attempts: u32) -> String {
    let mut out = format!(
        "source:     {}\nkey:        {}\nstatus:     {}\nrevision:   {}\nupdated:    {}\n",
        r.source_id,
        r.key,
        r.status.as_str(),
        r.rev,
        when_ms(r.updated_at)
    );
    if let Some(c) = &r.committed {
        out += &format!(
            "committed:  {} at {} by run {}\n  rows:     {}\n",
            label(&c.target),
            when_ms(c.committed_at),
            c.run_id,
            c.rows
        );
        for (col, sum) in &c.sums {
            out += &format!("  sum({col}): {sum}\n");
        }
        for o in &c.outputs {
            out += &format!(
                "  output:   s3://{}/{} (etag {})\n",
                o.bucket, o.key, o.etag
            );
        }
        if c.rejected > 0 || c.rejects.is_some() {
            out += &format!("  rejected: {} rows\n", c.rejected);
        }
        if let Some(o) = &c.rejects {
            out += &format!(
                "  rejects:  s3://{}/{} (etag {})\n",
                o.bucket, o.key, o.etag
            );
        }
        if c.rescued > 0 {
            out += &format!(
                "  rescued:  {} rows (with values in the rescued column)\n",
                c.rescued
            );
        }
        if !c.ignored.is_empty() {
            out += &format!(
                "  ignored:  {} values of fields not in the schema (in no column):\n",
                c.ignored.values
            );
            out += &ignored_fields(&c.ignored, "    ");
        }
        out += &format!(
            "  config:   {} (output schema version {})\n",
            c.config_fp,
            tidemark::config::schema_version(&c.config_fp)
        );
    }
    if let Some(c) = &r.claim {
        out += &format!(
            "claim:      {} by run {}, lease until {}\n",
            label(&c.target),
            c.run_id,
            when_ms(c.lease_until)
        );
    }
    if let Some(p) = &r.pending {
        out += &format!("pending:    {}\n", label(p));
    }
    out += &format!("attempts:   {} of {max_attempts}\n", r.attempts);
    if let Some(e) = &r.last_error {
        out += &format!("last error: {e}\n");
    }
    if let Some(n) = &r.note {
        out += &format!("note:       {n}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::fixtures::done;

    #[test]
    fn a_commit_shows_its_rescued_rows_and_each_ignored_field_with_its_values() {
        let r = done("in/a.json", 2, &[("tags", 1), ("userIdentity.extra", 4)], 3);
        let text = describe(&r, 3);
        assert!(
            text.contains(
                "  rows:     10\n  rescued:  2 rows (with values in the rescued column)\n  \
                 ignored:  8 values of fields not in the schema (in no column):\n    \
                 userIdentity.extra: 4\n    tags: 1\n    (other fields): 3\n"
            ),
            "{text}"
        );
        let clean = describe(&done("in/b.json", 0, &[], 0), 3);
        assert!(
            !clean.contains("rescued:") && !clean.contains("ignored:"),
            "{clean}"
        );
    }
}
