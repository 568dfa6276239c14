//! The commands, one module per group. Each exposes a typed function that does the work and
//! returns a serializable report (what the tests assert on), and a `*_command` function that
//! prints the report (a table, or `--json`) and picks the exit code.

pub mod audit;
pub mod backfill;
pub mod catalog;
pub mod convert;
pub mod explain;
pub mod infer;
pub mod init;
pub mod invoke;
pub mod mode;
pub mod outputs;
pub mod plan;
pub mod presets;
pub mod rename;
pub mod repair;
pub mod rescued;
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

/// Ledger records and sources the commands' unit tests share.
#[cfg(test)]
pub(crate) mod fixtures {
    use std::collections::BTreeMap;

    use tidemark::config::{Config, Source};
    use tidemark::model::{Committed, IgnoredFields, Record, Status, Target, VersionRef};

    /// Source `trail` (JSON Lines under `in/`), with the fields of `extra` (`,"k":v…`).
    pub(crate) fn source(extra: &str) -> Source {
        let doc = format!(
            r#"{{"sources":[{{"source_id":"trail","bucket":"landing","prefix":"in/",
            "format":"jsonl","schema":[{{"name":"id","type":"int64"}}],
            "output":{{"bucket":"lake","prefix":"trail/"}}{extra}}}]}}"#
        );
        Config::from_json(&doc).unwrap().sources[0].clone()
    }

    /// A record done with 10 rows, `rescued` of them rescued, the values of the `ignored`
    /// fields and `unnamed` more ignored.
    pub(crate) fn done(key: &str, rescued: u64, ignored: &[(&str, u64)], unnamed: u64) -> Record {
        let fields: BTreeMap<String, u64> =
            ignored.iter().map(|(f, n)| (f.to_string(), *n)).collect();
        Record {
            source_id: "trail".into(),
            key: key.into(),
            status: Status::Done,
            rev: 2,
            committed: Some(Committed {
                target: Target::Version(VersionRef {
                    version: "e".into(),
                    version_id: None,
                    etag: Some("e".into()),
                    sequencer: None,
                    size: None,
                }),
                rows: 10,
                sums: BTreeMap::new(),
                outputs: Vec::new(),
                rejected: 0,
                rejects: None,
                rescued,
                ignored: IgnoredFields {
                    values: fields.values().sum::<u64>() + unnamed,
                    fields,
                },
                config_fp: "fp".into(),
                committed_at: 5,
                run_id: "run".into(),
            }),
            claim: None,
            pending: None,
            attempts: 0,
            last_error: None,
            note: None,
            updated_at: 5,
            bookmark: None,
            writing: Vec::new(),
        }
    }
}
