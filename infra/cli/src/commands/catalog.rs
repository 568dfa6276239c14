//! `catalog sync` and `catalog ddl`: each source's table in the Glue Data Catalog, from the
//! sources document (`tidemark::catalog` defines it, `tidemark_delta::catalog` writes it).

use std::process::ExitCode;

use tidemark::catalog::{ddl, table_for};
use tidemark::config::Config;
use tidemark_delta::catalog::{Catalog, ENV_DATABASE, SyncOptions, refused};

use super::print_json;
use crate::render::Table;
use crate::{Error, Out};

/// Arguments of `catalog`.
#[derive(Debug, Clone, clap::Args)]
pub struct CatalogArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: CatalogCommand,
}

/// The subcommands of `catalog`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum CatalogCommand {
    /// Create or update each source's Glue table from the sources document (Glue from the AWS
    /// environment; `AWS_ENDPOINT_URL_GLUE` for another endpoint): a missing table is
    /// created, an additive change (columns or struct fields added, partition projection) is
    /// applied in place, a breaking one (a column removed or retyped, another partition key,
    /// location or storage) is refused with the difference, exit 1. The deployment runs the
    /// same sync on every deploy (CloudFormation's catalog step).
    Sync {
        /// The Glue database (created when missing).
        #[arg(long, env = ENV_DATABASE, default_value = "tidemark")]
        database: String,
        /// Only this source (repeatable; default: every source).
        #[arg(long = "source", value_name = "ID")]
        sources: Vec<String>,
        /// Replace a table whose change is breaking instead of refusing it (rewrite the old
        /// outputs first: `backfill --stale-config`).
        #[arg(long)]
        allow_breaking: bool,
        /// Say what would be done; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Print the Athena DDL of each source's table, for a catalog managed elsewhere: the
    /// same table `catalog sync` writes. Reads only the sources document.
    Ddl {
        /// The database named in the statements.
        #[arg(long, env = ENV_DATABASE, default_value = "tidemark")]
        database: String,
        /// Only this source (repeatable; default: every source).
        #[arg(long = "source", value_name = "ID")]
        sources: Vec<String>,
    },
}

fn chosen<'a>(
    config: &'a Config,
    sources: &[String],
) -> Result<Vec<&'a tidemark::config::Source>, Error> {
    for id in sources {
        crate::backend::source_in(config, id)?;
    }
    Ok(config
        .sources
        .iter()
        .filter(|s| sources.is_empty() || sources.iter().any(|id| id == s.id()))
        .collect())
}

/// Run `catalog`.
pub async fn catalog_command(
    config: &Config,
    args: CatalogArgs,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    match args.command {
        CatalogCommand::Ddl { database, sources } => {
            let mut tables = Vec::new();
            for source in chosen(config, &sources)? {
                tables.push(table_for(source)?);
            }
            if json {
                print_json(out, &tables)?;
            } else {
                for (i, t) in tables.iter().enumerate() {
                    if i > 0 {
                        writeln!(out)?;
                    }
                    writeln!(out, "-- source {}", t.source_id)?;
                    write!(out, "{}", ddl(&database, t))?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        CatalogCommand::Sync {
            database,
            sources,
            allow_breaking,
            dry_run,
        } => {
            chosen(config, &sources)?;
            let catalog = Catalog::from_env(database).await;
            if !dry_run {
                catalog.ensure_database().await.map_err(|e| e.to_string())?;
            }
            let synced = catalog
                .sync(
                    config,
                    &SyncOptions {
                        sources,
                        allow_breaking,
                        dry_run,
                    },
                )
                .await
                .map_err(|e| e.to_string())?;
            let failed = refused(&synced);
            if json {
                print_json(out, &synced)?;
            } else {
                let mut t = Table::new(&["SOURCE", "TABLE", "ACTION", "DIFFERENCES"]);
                for s in &synced {
                    t.row(vec![
                        s.source_id.clone(),
                        s.table.clone(),
                        s.action.clone(),
                        s.differences.join("; "),
                    ]);
                }
                write!(out, "{}", t.render())?;
                if let Some(message) = &failed {
                    writeln!(out, "{message}")?;
                }
            }
            Ok(if failed.is_some() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}
