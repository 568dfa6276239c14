//! The publish Lambda: the table committer. Triggered by the ledger table's DynamoDB stream
//! (batches of changed keys, see `publish::stream`); a scheduled or manual invoke with any
//! other payload (`{}` or `{"source": "<id>"}`) sweeps: it compares every record of each
//! table source (or the one named) with its table and publishes the difference.

use std::sync::Arc;

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use publish::{Publisher, TableStore};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tidemark::telemetry::init("info");
    let config = Arc::new(tidemark::config::Config::from_env()?);
    let pipeline = tidemark::aws::pipeline_from_env(config.clone()).await?;
    let publisher = Publisher::new(
        config,
        pipeline.ledger.clone(),
        pipeline.store.clone(),
        TableStore::s3_from_env(),
        Arc::new(tidemark::ports::SystemClock),
    );
    let publisher = &publisher;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        handle(publisher, event.payload).await
    }))
    .await
}

async fn handle(publisher: &Publisher, payload: Value) -> Result<Value, Error> {
    if payload.get("Records").is_some() {
        let event: aws_lambda_events::event::dynamodb::Event = serde_json::from_value(payload)?;
        let (_, response) = publish::stream::handle(publisher, &event).await;
        return Ok(serde_json::to_value(response)?);
    }
    let only = payload.get("source").and_then(Value::as_str);
    let mut done = Vec::new();
    for source in publisher.table_sources() {
        if only.is_some_and(|id| id != source.id()) {
            continue;
        }
        done.push(publisher.publish_all(source.id()).await?);
    }
    Ok(json!({ "published": done }))
}
