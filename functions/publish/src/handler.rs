//! One invocation: a stream batch, a sweep, a maintenance run or the catalog step, told apart
//! by the payload (see main.rs); the committer itself is `tidemark_delta`.

use std::time::Duration;

use lambda_runtime::Error;
use serde_json::{Value, json};
use tidemark_delta::Publisher;
use tidemark_delta::maintain::{CompactOptions, MaintainOptions};

use crate::ENV_MAINTENANCE;

/// One invocation, by its payload; `maintenance` is this function's mode (main.rs).
pub(crate) async fn handle(
    publisher: &Publisher,
    maintenance: bool,
    payload: Value,
) -> Result<Value, Error> {
    // The deploy's catalog step (CloudFormation's custom resource): the maintenance function's
    // (its role may write the catalog; the publish function's may not).
    if payload.get("ResponseURL").is_some() && payload.get("RequestType").is_some() {
        if !maintenance {
            return Err(format!(
                "the catalog step runs only on the maintenance function ({ENV_MAINTENANCE}=1); \
                 this one publishes"
            )
            .into());
        }
        return catalog_step(publisher, payload).await;
    }
    if payload.get("Records").is_some() {
        let event: aws_lambda_events::event::dynamodb::Event = serde_json::from_value(payload)?;
        let (published, response) = tidemark_delta::stream::handle(publisher, &event).await;
        let now = publisher.clock.now_ms();
        for p in &published {
            println!("{}", p.metric_line(now, false));
        }
        return Ok(serde_json::to_value(response)?);
    }
    if let Some(m) = payload.get("maintain") {
        if !maintenance {
            return Err(format!(
                "maintenance runs only on the maintenance function ({ENV_MAINTENANCE}=1, one \
                 at a time); this one publishes"
            )
            .into());
        }
        return maintain(publisher, m).await;
    }
    let only = payload.get("source").and_then(Value::as_str);
    let mut done = Vec::new();
    let mut failed = Vec::new();
    for source in publisher.table_sources() {
        if only.is_some_and(|id| id != source.id()) {
            continue;
        }
        match publisher.publish_all(source.id()).await {
            Ok(p) => {
                println!("{}", p.metric_line(publisher.clock.now_ms(), true));
                done.push(p)
            }
            Err(e) => {
                tracing::error!(source_id = source.id(), error = %e, "sweep failed");
                failed.push(format!("{}: {e}", source.id()));
            }
        }
    }
    if !failed.is_empty() {
        return Err(format!("sweep failed for {}", failed.join("; ")).into());
    }
    Ok(json!({ "published": done }))
}

/// Answer CloudFormation's catalog step: sync the Glue tables with the sources document and
/// PUT the outcome to its ResponseURL. Never fails before answering: an unanswered request
/// holds the deploy for an hour.
async fn catalog_step(publisher: &Publisher, payload: Value) -> Result<Value, Error> {
    use aws_lambda_events::event::cloudformation::CloudFormationCustomResourceRequest;
    let url = payload
        .get("ResponseURL")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let field = |name: &str| {
        payload
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let ids = (
        field("StackId"),
        field("RequestId"),
        field("LogicalResourceId"),
        field("PhysicalResourceId"),
    );
    let response = match serde_json::from_value::<CloudFormationCustomResourceRequest>(payload) {
        Ok(request) => {
            let database = std::env::var(tidemark_delta::catalog::ENV_DATABASE).unwrap_or_default();
            let catalog = tidemark_delta::catalog::Catalog::from_env(database).await;
            tidemark_delta::catalog::custom_resource(&catalog, &publisher.config, &request).await
        }
        Err(e) => {
            let mut r =
                aws_lambda_events::event::cloudformation::CloudFormationCustomResourceResponse::default();
            r.status = aws_lambda_events::event::cloudformation::CloudFormationCustomResourceResponseStatus::Failed;
            r.reason = Some(format!("not a custom resource request: {e}"));
            (
                r.stack_id,
                r.request_id,
                r.logical_resource_id,
                r.physical_resource_id,
            ) = ids;
            if r.physical_resource_id.is_empty() {
                r.physical_resource_id = "tidemark-catalog".into();
            }
            r
        }
    };
    tidemark_delta::catalog::respond(&url, &response).await?;
    Ok(serde_json::to_value(&response)?)
}

fn duration(v: &Value, field: &str, default: &str) -> Result<Option<Duration>, Error> {
    let text = v.get(field).and_then(Value::as_str).unwrap_or(default);
    if text == "0" {
        return Ok(None);
    }
    let ms = tidemark::config::parse_duration_ms(text).map_err(|e| format!("{field}: {e}"))?;
    Ok(Some(Duration::from_millis(ms as u64)))
}

async fn maintain(publisher: &Publisher, m: &Value) -> Result<Value, Error> {
    let only = m.get("source").and_then(Value::as_str);
    let compact = m.get("compact").and_then(Value::as_bool).unwrap_or(true);
    let compact_options = CompactOptions {
        compact_after: duration(m, "compact_after", "1d")?.unwrap_or(Duration::ZERO),
        ..CompactOptions::default()
    };
    let options = MaintainOptions {
        checkpoint: true,
        log_retention: duration(m, "log_retention", "30d")?,
        file_retention: duration(m, "file_retention", "7d")?,
        dry_run: m.get("dry_run").and_then(Value::as_bool).unwrap_or(false),
    };
    let mut done = Vec::new();
    let mut failed = Vec::new();
    for source in publisher.table_sources() {
        if only.is_some_and(|id| id != source.id()) {
            continue;
        }
        let id = source.id();
        let result = async {
            let compacted = match compact && !options.dry_run {
                true => Some(publisher.compact(id, &compact_options).await?),
                false => None,
            };
            let maintained = publisher.maintain(id, &options).await?;
            Ok::<_, tidemark_delta::PublishError>(
                json!({"source_id": id, "compacted": compacted, "maintained": maintained}),
            )
        }
        .await;
        match result {
            Ok(summary) => {
                tracing::info!(source_id = id, summary = %summary, "maintained");
                done.push(summary);
            }
            // The other tables are still maintained tonight.
            Err(e) => {
                tracing::error!(source_id = id, error = %e, "maintenance failed");
                failed.push(format!("{id}: {e}"));
            }
        }
    }
    // The catalog too: a table deleted or edited by hand since the last deploy is written
    // again (additive changes only; a refused one fails the run, naming the difference).
    let catalog = match std::env::var(tidemark_delta::catalog::ENV_DATABASE) {
        Ok(database) if only.is_none() && !options.dry_run => {
            let catalog = tidemark_delta::catalog::Catalog::from_env(database).await;
            match catalog
                .sync(
                    &publisher.config,
                    &tidemark_delta::catalog::SyncOptions::default(),
                )
                .await
            {
                Ok(synced) => {
                    if let Some(reason) = tidemark_delta::catalog::refused(&synced) {
                        failed.push(format!("catalog: {reason}"));
                    }
                    serde_json::to_value(&synced)?
                }
                Err(e) => {
                    failed.push(format!("catalog: {e}"));
                    Value::Null
                }
            }
        }
        _ => Value::Null,
    };
    if !failed.is_empty() {
        return Err(format!("maintenance failed for {}", failed.join("; ")).into());
    }
    Ok(json!({ "maintained": done, "catalog": catalog }))
}
