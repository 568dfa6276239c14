//! The Glue Data Catalog kept in step with the sources document: one table per source
//! (`tidemark::catalog` defines it), created when missing, updated in place when the document
//! only adds to it, and left alone with the difference reported when the change would break
//! files written before (a column removed or retyped, another partition key or location),
//! unless replacing is allowed.
//!
//! Calls per sync: one `GetTable` per source, plus one `CreateTable` or `UpdateTable` per
//! table that changes (the CLI also calls `GetDatabase`, and `CreateDatabase` when the
//! database is missing). The deploy's catalog step (CloudFormation's custom resource, served by the
//! maintenance function) and `tidemark catalog sync` make the same calls.

use std::collections::BTreeMap;

use aws_sdk_glue::Client;
use aws_sdk_glue::types::{Column, DatabaseInput, SerDeInfo, StorageDescriptor, TableInput};
use tidemark::catalog::{
    Change, GlueColumn, PARQUET_INPUT, PARQUET_OUTPUT, PARQUET_SERDE, Storage, TableDef, compare,
    table_for,
};
use tidemark::config::Config;

/// Environment variable naming the Glue database of the lake's tables.
pub const ENV_DATABASE: &str = "TIDEMARK_GLUE_DATABASE";

/// A catalog error (a Glue call, or a table the document cannot define).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CatalogError(pub String);

fn glue_error<E: std::fmt::Debug + aws_sdk_glue::error::ProvideErrorMetadata>(
    call: &str,
    e: &aws_sdk_glue::error::SdkError<E>,
) -> CatalogError {
    let detail = e
        .as_service_error()
        .and_then(|s| s.message().map(str::to_string))
        .unwrap_or_else(|| format!("{e:?}"));
    CatalogError(format!("glue {call}: {detail}"))
}

/// What a sync did to one source's table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Synced {
    /// The source.
    pub source_id: String,
    /// `database.table`.
    pub table: String,
    /// `created`, `updated`, `unchanged`, `replaced`, or `refused` (a breaking change), or
    /// with `dry_run` what would be done (`would create`, …).
    pub action: String,
    /// The differences found (for `updated`, `replaced` and `refused`).
    pub differences: Vec<String>,
}

/// How to sync.
#[derive(Debug, Clone, Default)]
pub struct SyncOptions {
    /// Only these sources (all when empty).
    pub sources: Vec<String>,
    /// Replace a table whose change is breaking, instead of refusing.
    pub allow_breaking: bool,
    /// Report what would be done; change nothing.
    pub dry_run: bool,
}

/// The catalog: a Glue client and the database of the lake's tables.
#[derive(Debug, Clone)]
pub struct Catalog {
    client: Client,
    /// The database.
    pub database: String,
}

impl Catalog {
    /// A catalog on this client.
    pub fn new(client: Client, database: impl Into<String>) -> Self {
        Self {
            client,
            database: database.into(),
        }
    }

    /// Glue from the AWS environment (`AWS_ENDPOINT_URL_GLUE` honoured by the SDK).
    pub async fn from_env(database: impl Into<String>) -> Self {
        let conf = aws_config::load_from_env().await;
        Self::new(Client::new(&conf), database)
    }

    /// The table named `name` as the catalog has it, if it exists.
    pub async fn find_table(&self, name: &str) -> Result<Option<TableDef>, CatalogError> {
        let got = match self
            .client
            .get_table()
            .database_name(&self.database)
            .name(name)
            .send()
            .await
        {
            Ok(got) => got,
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_entity_not_found_exception()) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(glue_error("GetTable", &e)),
        };
        let Some(table) = got.table() else {
            return Ok(None);
        };
        let parameters: BTreeMap<String, String> = table
            .parameters()
            .map(|p| p.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        let columns = |cs: &[Column]| -> Vec<GlueColumn> {
            cs.iter()
                .map(|c| GlueColumn {
                    name: c.name().to_lowercase(),
                    ty: c.r#type().unwrap_or_default().to_string(),
                })
                .collect()
        };
        let sd = table.storage_descriptor();
        let delta = parameters
            .get("table_type")
            .is_some_and(|t| t.eq_ignore_ascii_case("delta"));
        Ok(Some(TableDef {
            name: table.name().to_string(),
            source_id: String::new(),
            location: sd
                .and_then(|s| s.location())
                .unwrap_or_default()
                .to_string(),
            storage: if delta {
                Storage::Delta
            } else {
                Storage::Parquet
            },
            columns: sd.map(|s| columns(s.columns())).unwrap_or_default(),
            partition_keys: columns(table.partition_keys()),
            parameters,
        }))
    }

    /// The Glue input of `def` (current parameters the definition does not set are kept).
    fn input(def: &TableDef, keep: &BTreeMap<String, String>) -> Result<TableInput, CatalogError> {
        let column = |c: &GlueColumn| {
            Column::builder()
                .name(&c.name)
                .r#type(&c.ty)
                .build()
                .map_err(|e| CatalogError(format!("column {}: {e}", c.name)))
        };
        let mut sd = StorageDescriptor::builder().location(&def.location);
        let mut input = TableInput::builder()
            .name(&def.name)
            .description(format!(
                "tidemark source {:?}: kept in step with the sources document by `catalog sync`",
                def.source_id
            ))
            .table_type("EXTERNAL_TABLE");
        if def.storage == Storage::Parquet {
            sd = sd
                .input_format(PARQUET_INPUT)
                .output_format(PARQUET_OUTPUT)
                .serde_info(
                    SerDeInfo::builder()
                        .serialization_library(PARQUET_SERDE)
                        .parameters("serialization.format", "1")
                        .build(),
                );
            for c in &def.columns {
                sd = sd.columns(column(c)?);
            }
            for k in &def.partition_keys {
                input = input.partition_keys(column(k)?);
            }
        }
        let mut parameters = keep.clone();
        parameters.extend(def.parameters.clone());
        for (k, v) in parameters {
            input = input.parameters(k, v);
        }
        input
            .storage_descriptor(sd.build())
            .build()
            .map_err(|e| CatalogError(format!("table {}: {e}", def.name)))
    }

    /// Create the database when it does not exist (the CLI's; a deployment has its own, and
    /// its catalog step does not call this).
    pub async fn ensure_database(&self) -> Result<(), CatalogError> {
        match self.client.get_database().name(&self.database).send().await {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_entity_not_found_exception()) =>
            {
                let input = DatabaseInput::builder()
                    .name(&self.database)
                    .description("tidemark: Parquet outputs in the lake, one table per source")
                    .build()
                    .map_err(|e| CatalogError(e.to_string()))?;
                self.client
                    .create_database()
                    .database_input(input)
                    .send()
                    .await
                    .map_err(|e| glue_error("CreateDatabase", &e))?;
                Ok(())
            }
            Err(e) => Err(glue_error("GetDatabase", &e)),
        }
    }

    /// Bring every source's table (or those of `opts.sources`) in step with `config`. Every
    /// source is tried; a refused one is reported, not an error (see [`refused`]).
    pub async fn sync(
        &self,
        config: &Config,
        opts: &SyncOptions,
    ) -> Result<Vec<Synced>, CatalogError> {
        let mut out = Vec::new();
        for source in &config.sources {
            if !opts.sources.is_empty() && !opts.sources.iter().any(|s| s == source.id()) {
                continue;
            }
            let desired = table_for(source).map_err(CatalogError)?;
            let full = format!("{}.{}", self.database, desired.name);
            let would = |action: &str| {
                if opts.dry_run {
                    format!("would {action}")
                } else {
                    action.to_string()
                }
            };
            let current = self.find_table(&desired.name).await?;
            let (action, differences) = match &current {
                None => {
                    if !opts.dry_run {
                        self.client
                            .create_table()
                            .database_name(&self.database)
                            .table_input(Self::input(&desired, &BTreeMap::new())?)
                            .send()
                            .await
                            .map_err(|e| glue_error("CreateTable", &e))?;
                    }
                    (
                        if opts.dry_run {
                            "would create".to_string()
                        } else {
                            "created".to_string()
                        },
                        Vec::new(),
                    )
                }
                Some(current) => match compare(current, &desired) {
                    Change::Same => ("unchanged".to_string(), Vec::new()),
                    Change::Breaking(d) if !opts.allow_breaking => ("refused".to_string(), d),
                    change => {
                        let (action, d) = match change {
                            Change::Additive(d) => (would("update"), d),
                            Change::Breaking(d) => (would("replace"), d),
                            Change::Same => unreachable!(),
                        };
                        if !opts.dry_run {
                            // Our own parameters are rewritten; others (set by hand, by
                            // Lake Formation) are kept.
                            let mut keep = current.parameters.clone();
                            keep.retain(|k, _| {
                                !k.starts_with("projection.")
                                    && k != "storage.location.template"
                                    && k != "classification"
                                    && k != "table_type"
                            });
                            self.client
                                .update_table()
                                .database_name(&self.database)
                                .table_input(Self::input(&desired, &keep)?)
                                .send()
                                .await
                                .map_err(|e| glue_error("UpdateTable", &e))?;
                        }
                        let action = match action.as_str() {
                            "update" => "updated".to_string(),
                            "replace" => "replaced".to_string(),
                            other => other.to_string(),
                        };
                        (action, d)
                    }
                },
            };
            out.push(Synced {
                source_id: source.id().to_string(),
                table: full,
                action,
                differences,
            });
        }
        Ok(out)
    }
}

/// The refused tables of a sync, as one message naming each table and its differences
/// (`None`: nothing refused).
pub fn refused(synced: &[Synced]) -> Option<String> {
    let refused: Vec<String> = synced
        .iter()
        .filter(|s| s.action == "refused")
        .map(|s| {
            format!(
                "{}: a breaking change ({}): refused; files written before would not read as \
                 the new definition says (run `tidemark catalog sync --allow-breaking` to \
                 replace it, after `backfill --stale-config` has rewritten them)",
                s.table,
                s.differences.join("; ")
            )
        })
        .collect();
    (!refused.is_empty()).then(|| refused.join("\n"))
}

/// CloudFormation's catalog step: the deploy's custom resource (`Custom::TidemarkCatalog`,
/// served by the maintenance function) asks for a sync on every create and on every update of
/// its properties (the sources document, the bucket names, the database). A refused change or a
/// failed call answers FAILED with the reason, so the deploy stops and rolls back before the
/// functions run under a document the catalog cannot follow. A delete changes nothing: the
/// tables go with the stack's Glue database.
pub async fn custom_resource(
    catalog: &Catalog,
    config: &Config,
    request: &aws_lambda_events::event::cloudformation::CloudFormationCustomResourceRequest,
) -> aws_lambda_events::event::cloudformation::CloudFormationCustomResourceResponse {
    use aws_lambda_events::event::cloudformation::{
        CloudFormationCustomResourceRequest as Request, CloudFormationCustomResourceResponse,
        CloudFormationCustomResourceResponseStatus as Status,
    };
    let (stack_id, request_id, logical_id, physical_id) = match request {
        Request::Create(r) => (&r.stack_id, &r.request_id, &r.logical_resource_id, None),
        Request::Update(r) => (
            &r.stack_id,
            &r.request_id,
            &r.logical_resource_id,
            Some(&r.physical_resource_id),
        ),
        Request::Delete(r) => (
            &r.stack_id,
            &r.request_id,
            &r.logical_resource_id,
            Some(&r.physical_resource_id),
        ),
        _ => {
            let mut response = CloudFormationCustomResourceResponse::default();
            response.status = Status::Failed;
            response.reason = Some("unknown request type".into());
            return response;
        }
    };
    let mut response = CloudFormationCustomResourceResponse::default();
    response.stack_id = stack_id.clone();
    response.request_id = request_id.clone();
    response.logical_resource_id = logical_id.clone();
    response.physical_resource_id = physical_id
        .cloned()
        .unwrap_or_else(|| format!("tidemark-catalog-{}", catalog.database));
    if matches!(request, Request::Delete(_)) {
        response.status = Status::Success;
        return response;
    }
    match catalog.sync(config, &SyncOptions::default()).await {
        Ok(synced) => {
            for s in &synced {
                tracing::info!(table = %s.table, action = %s.action, differences = ?s.differences, "catalog");
            }
            match refused(&synced) {
                Some(reason) => {
                    response.status = Status::Failed;
                    response.reason = Some(cut(&reason));
                }
                None => {
                    response.status = Status::Success;
                    response.data.insert(
                        "Tables".into(),
                        synced
                            .iter()
                            .map(|s| format!("{} {}", s.table, s.action))
                            .collect::<Vec<_>>()
                            .join(", "),
                    );
                }
            }
        }
        Err(e) => {
            response.status = Status::Failed;
            response.reason = Some(cut(&e.to_string()));
        }
    }
    response
}

/// CloudFormation shows at most 4 KiB of a reason.
fn cut(text: &str) -> String {
    if text.len() <= 3_900 {
        return text.to_string();
    }
    let mut end = 3_900;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Send a custom resource's answer to CloudFormation's pre-signed `ResponseURL` (an HTTPS PUT
/// with no content type, as the URL was signed).
pub async fn respond(
    url: &str,
    response: &aws_lambda_events::event::cloudformation::CloudFormationCustomResourceResponse,
) -> Result<(), CatalogError> {
    let body = serde_json::to_vec(response).map_err(|e| CatalogError(e.to_string()))?;
    let answer = reqwest::Client::new()
        .put(url)
        .header(reqwest::header::CONTENT_TYPE, "")
        .body(body)
        .send()
        .await
        .map_err(|e| CatalogError(format!("answering CloudFormation: {e}")))?;
    if !answer.status().is_success() {
        return Err(CatalogError(format!(
            "answering CloudFormation: HTTP {}",
            answer.status()
        )));
    }
    Ok(())
}
