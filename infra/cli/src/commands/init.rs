//! `init`: make the embedded workspace under `--root` — the folder, the SQLite ledger and a
//! folder for every bucket the sources name — or, on AWS, check that the ledger table and the
//! buckets answer (SAM creates them; `init` creates nothing there). Idempotent: says what it
//! found and what it made. Every other command on the embedded backends needs the workspace
//! to exist, so a mistyped `--root` is an error instead of an empty ledger.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use serde::Serialize;
use tidemark::config::Config;
use tidemark::ports::SystemClock;

use super::print_json;
use crate::backend::{Backend, BackendKind, LEDGER_FILE, buckets};
use crate::render::Table;
use crate::{Error, Out};

/// One thing `init` looked at.
#[derive(Debug, Clone, Serialize)]
pub struct Checked {
    /// `root`, `ledger` or `bucket`.
    pub kind: &'static str,
    /// The path, table or bucket name.
    pub name: String,
    /// `created`, `exists`, or `missing: <error>` (AWS).
    pub state: String,
}

/// What `init` found and made.
#[derive(Debug, Clone, Serialize)]
pub struct InitReport {
    /// The backends (`embedded: <root>` or `aws: table …`).
    pub backend: String,
    /// Everything checked, in order.
    pub checked: Vec<Checked>,
}

impl InitReport {
    /// Something is missing (AWS only: the embedded pair is made).
    pub fn missing(&self) -> bool {
        self.checked.iter().any(|c| c.state.starts_with("missing"))
    }
}

/// Make (embedded) or check (AWS) the backends the sources need.
pub async fn init(
    kind: BackendKind,
    root: &Path,
    config: Arc<Config>,
) -> Result<InitReport, Error> {
    let names = buckets(&config);
    match kind {
        BackendKind::Local => {
            let existed = |p: &Path| if p.exists() { "exists" } else { "created" };
            let root_state = existed(root);
            let ledger_state = existed(&root.join(LEDGER_FILE));
            let bucket_states: Vec<&str> = names
                .iter()
                .map(|b| existed(&root.join("buckets").join(b)))
                .collect();
            let backend = Backend::local(root, config, Arc::new(SystemClock)).await?;
            let mut checked = vec![
                Checked {
                    kind: "root",
                    name: root.display().to_string(),
                    state: root_state.into(),
                },
                Checked {
                    kind: "ledger",
                    name: root.join(LEDGER_FILE).display().to_string(),
                    state: ledger_state.into(),
                },
            ];
            for (name, state) in names.into_iter().zip(bucket_states) {
                checked.push(Checked {
                    kind: "bucket",
                    name,
                    state: state.into(),
                });
            }
            Ok(InitReport {
                backend: backend.description,
                checked,
            })
        }
        BackendKind::Aws => {
            let backend = Backend::aws(config).await?;
            let table = std::env::var(tidemark::aws::ENV_TABLE).unwrap_or_default();
            let mut checked = Vec::new();
            let state = match backend.pipeline.ledger.get("~init", "~check").await {
                Ok(_) => "exists".to_string(),
                Err(e) => format!("missing: {e}"),
            };
            checked.push(Checked {
                kind: "ledger",
                name: table,
                state,
            });
            for name in names {
                let state = match backend.pipeline.store.list(&name, "~init/", None).await {
                    Ok(_) => "exists".to_string(),
                    Err(e) => format!("missing: {e}"),
                };
                checked.push(Checked {
                    kind: "bucket",
                    name,
                    state,
                });
            }
            Ok(InitReport {
                backend: backend.description,
                checked,
            })
        }
    }
}

/// `tidemark init`: exit 0 when everything is there (made or found), 1 when something on
/// AWS is missing.
pub async fn init_command(
    kind: BackendKind,
    root: &Path,
    config: Arc<Config>,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    let report = init(kind, root, config).await?;
    if json {
        print_json(out, &report)?;
    } else {
        let mut table = Table::new(&["WHAT", "NAME", "STATE"]);
        for c in &report.checked {
            table.row(vec![c.kind.to_string(), c.name.clone(), c.state.clone()]);
        }
        write!(out, "{}", table.render())?;
        writeln!(out, "{}", report.backend)?;
    }
    Ok(if report.missing() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
