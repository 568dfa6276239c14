//! The Glue Data Catalog kept in step with the sources document, against the local stack's
//! Glue (moto): tables created (Parquet with partition projection, nested columns, the
//! rescued and lineage columns; a Delta Lake table as Athena documents it), each equal to
//! what `catalog ddl`'s statement declares; an additive change applied in place, keeping a
//! parameter set by hand; a breaking one refused with the difference (exit 1, table
//! untouched) until `--allow-breaking`; a dry run changing nothing.

use std::process::ExitCode;

use serde_json::{Value, json};
use tidemark::catalog::{PARQUET_INPUT, PARQUET_OUTPUT, PARQUET_SERDE};
use tidemark::config::Config;
use tidemark_delta::catalog::{Catalog, SyncOptions};

fn require_glue() {
    std::env::var("AWS_ENDPOINT_URL_GLUE").unwrap_or_else(|_| {
        panic!(
            "AWS_ENDPOINT_URL_GLUE is not set: this suite runs against the local stack's Glue. \
             Run it with `infra/test.sh`, or `infra/localstack.sh start && source .local/stack.env` first."
        )
    });
}

fn doc(trail_schema: Value) -> Value {
    json!({"sources": [
        {"source_id": "orders", "bucket": "landing", "prefix": "orders/", "format": "csv",
         "schema": [
            {"name": "order_id", "type": "int64", "nullable": false},
            {"name": "amount", "type": "decimal(12,2)"},
            {"name": "ordered_at", "type": "timestamp"}],
         "output": {"bucket": "lake", "prefix": "orders/", "partitioning": "key_date"}},
        {"source_id": "cloud-trail", "bucket": "landing", "prefix": "trail/", "format": "jsonl",
         "schema": trail_schema,
         "on_unknown_field": "rescue",
         "metadata_columns": {"_source_key": "key", "_row": "row_number"},
         "output": {"bucket": "lake", "prefix": "trail/"}},
        {"source_id": "users", "bucket": "landing", "prefix": "users/", "format": "jsonl",
         "schema": [{"name": "id", "type": "int64", "nullable": false}, {"name": "at", "type": "timestamp"}],
         "output": {"bucket": "lake", "prefix": "tables/users/", "table": {"format": "delta"}}}
    ]})
}

fn trail_schema() -> Value {
    json!([
        {"name": "eventTime", "type": "timestamp"},
        {"name": "userIdentity", "type": "struct<type:string,arn:string>"},
        {"name": "resources", "type": "array<struct<ARN:string,type:string>>"},
        {"name": "requestParameters", "type": "json"},
        {"name": "bytes_in", "path": "additionalEventData.bytesTransferredIn", "type": "int64"}
    ])
}

fn config(doc: &Value) -> Config {
    Config::from_json(&doc.to_string()).expect("valid document")
}

async fn glue() -> aws_sdk_glue::Client {
    require_glue();
    aws_sdk_glue::Client::new(&aws_config::load_from_env().await)
}

async fn get(client: &aws_sdk_glue::Client, db: &str, name: &str) -> aws_sdk_glue::types::Table {
    client
        .get_table()
        .database_name(db)
        .name(name)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GetTable {db}.{name}: {e:?}"))
        .table
        .expect("a table")
}

fn columns(cs: &[aws_sdk_glue::types::Column]) -> Vec<(String, String)> {
    cs.iter()
        .map(|c| {
            (
                c.name().to_string(),
                c.r#type().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The table a `CREATE EXTERNAL TABLE` statement of `catalog ddl` declares: its columns,
/// partition keys, location and properties, read from the statement's text.
struct Declared {
    columns: Vec<(String, String)>,
    partition_keys: Vec<(String, String)>,
    location: String,
    properties: Vec<(String, String)>,
}

fn declared(ddl: &str) -> Declared {
    let mut d = Declared {
        columns: Vec::new(),
        partition_keys: Vec::new(),
        location: String::new(),
        properties: Vec::new(),
    };
    let mut in_columns = false;
    let mut in_properties = false;
    for line in ddl.lines() {
        if line.starts_with("CREATE EXTERNAL TABLE") {
            in_columns = line.ends_with('(');
        } else if line == ")" {
            in_columns = false;
        } else if in_columns {
            let line = line.trim().trim_end_matches(',');
            let (name, ty) = line.split_once(' ').expect("`name` type");
            d.columns.push((name.trim_matches('`').into(), ty.into()));
        } else if let Some(keys) = line.strip_prefix("PARTITIONED BY (") {
            for key in keys.trim_end_matches(')').split(", ") {
                let (name, ty) = key.split_once(' ').unwrap();
                d.partition_keys
                    .push((name.trim_matches('`').into(), ty.into()));
            }
        } else if let Some(l) = line.strip_prefix("LOCATION ") {
            d.location = l.trim_matches('\'').into();
        } else if line.starts_with("TBLPROPERTIES (") {
            in_properties = true;
            if let Some(inner) = line
                .strip_prefix("TBLPROPERTIES (")
                .and_then(|l| l.strip_suffix(");"))
            {
                let (k, v) = inner.split_once(" = ").unwrap();
                d.properties
                    .push((k.trim_matches('\'').into(), v.trim_matches('\'').into()));
                in_properties = false;
            }
        } else if in_properties && line != ");" {
            let (k, v) = line.trim().trim_end_matches(',').split_once(" = ").unwrap();
            d.properties
                .push((k.trim_matches('\'').into(), v.trim_matches('\'').into()));
        }
    }
    d
}

async fn cli(doc: &Value, argv: &[&str]) -> (ExitCode, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sources.json");
    std::fs::write(&path, doc.to_string()).unwrap();
    let path = path.display().to_string();
    let mut args = vec!["tidemark", "--config", &path];
    args.extend(argv);
    let cli = tidemark_cli::parse_args(&args).expect("valid command line");
    let mut out = Vec::new();
    let code = tidemark_cli::execute(cli, &mut out).await.expect("runs");
    (code, String::from_utf8(out).unwrap())
}

#[tokio::test]
async fn tables_follow_the_document_and_breaking_changes_are_refused() {
    let client = glue().await;
    let db = format!(
        "tidemark_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let catalog = Catalog::new(client.clone(), &db);
    let first = doc(trail_schema());
    catalog.ensure_database().await.expect("database");
    let synced = catalog
        .sync(&config(&first), &SyncOptions::default())
        .await
        .expect("sync");
    let actions: Vec<(&str, &str)> = synced
        .iter()
        .map(|s| (s.table.as_str(), s.action.as_str()))
        .collect();
    assert_eq!(
        actions,
        [
            (format!("{db}.orders").as_str(), "created"),
            (format!("{db}.cloud_trail").as_str(), "created"),
            (format!("{db}.users").as_str(), "created"),
        ]
    );

    // Each table is the one its DDL declares.
    let (code, ddl) = cli(&first, &["catalog", "ddl", "--database", &db]).await;
    assert_eq!(code, ExitCode::SUCCESS);
    let statements: Vec<&str> = ddl.split("\n\n").collect();
    assert_eq!(statements.len(), 3, "{ddl}");
    for (statement, name) in statements.iter().zip(["orders", "cloud_trail"]) {
        assert!(
            statement.contains(&format!(
                "CREATE EXTERNAL TABLE IF NOT EXISTS `{db}`.`{name}` ("
            )),
            "{statement}"
        );
        let d = declared(statement);
        let t = get(&client, &db, name).await;
        let sd = t.storage_descriptor().expect("a storage descriptor");
        assert_eq!(columns(sd.columns()), d.columns, "{name}");
        assert_eq!(columns(t.partition_keys()), d.partition_keys, "{name}");
        assert_eq!(sd.location(), Some(d.location.as_str()), "{name}");
        // STORED AS PARQUET, as Athena declares it.
        assert_eq!(sd.input_format(), Some(PARQUET_INPUT));
        assert_eq!(sd.output_format(), Some(PARQUET_OUTPUT));
        let serde = sd.serde_info().expect("serde");
        assert_eq!(serde.serialization_library(), Some(PARQUET_SERDE));
        assert_eq!(
            serde
                .parameters()
                .and_then(|p| p.get("serialization.format"))
                .map(String::as_str),
            Some("1")
        );
        assert_eq!(t.table_type(), Some("EXTERNAL_TABLE"));
        let parameters = t.parameters().expect("parameters");
        for (k, v) in &d.properties {
            assert_eq!(parameters.get(k), Some(v), "{name}: property {k}");
        }
        assert_eq!(
            parameters.len(),
            d.properties.len() + 1,
            "{name}: {parameters:?}"
        );
        assert_eq!(parameters.get("EXTERNAL").map(String::as_str), Some("TRUE"));
    }
    let orders = declared(statements[0]);
    assert_eq!(
        orders.columns,
        [
            ("order_id".to_string(), "bigint".to_string()),
            ("amount".into(), "decimal(12,2)".into()),
            ("ordered_at".into(), "timestamp".into())
        ]
    );
    assert_eq!(
        orders.partition_keys,
        [("dt".to_string(), "string".to_string())]
    );
    assert!(orders.properties.contains(&(
        "storage.location.template".into(),
        "s3://lake/orders/dt=${dt}/".into()
    )));
    let trail = declared(statements[1]);
    assert_eq!(
        trail.columns,
        [
            ("eventtime".to_string(), "timestamp".to_string()),
            (
                "useridentity".into(),
                "struct<type:string,arn:string>".into()
            ),
            (
                "resources".into(),
                "array<struct<arn:string,type:string>>".into()
            ),
            ("requestparameters".into(), "string".into()),
            ("bytes_in".into(), "bigint".into()),
            ("_rescued_data".into(), "string".into()),
            ("_row".into(), "bigint".into()),
            ("_source_key".into(), "string".into()),
        ]
    );
    assert!(trail.partition_keys.is_empty());
    // The Delta Lake table: only the location and table_type, as Athena documents.
    assert_eq!(
        statements[2].trim_end(),
        format!(
            "-- source users\nCREATE EXTERNAL TABLE `{db}`.`users`\nLOCATION 's3://lake/tables/users/'\nTBLPROPERTIES ('table_type' = 'DELTA');"
        )
    );
    let users = get(&client, &db, "users").await;
    assert_eq!(
        users
            .parameters()
            .and_then(|p| p.get("table_type"))
            .map(String::as_str),
        Some("DELTA")
    );
    assert_eq!(
        users.storage_descriptor().and_then(|s| s.location()),
        Some("s3://lake/tables/users/")
    );
    assert!(users.storage_descriptor().unwrap().columns().is_empty());

    // A parameter set by hand survives the updates.
    let mut input = catalog_input(&get(&client, &db, "cloud_trail").await);
    input = input.parameters("owner", "security-team");
    client
        .update_table()
        .database_name(&db)
        .table_input(input.build().unwrap())
        .send()
        .await
        .unwrap();

    // An additive change: a column and a struct field.
    let mut schema = trail_schema();
    schema[1]["type"] = "struct<type:string,arn:string,invokedBy:string>".into();
    schema
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "sharedEventID", "type": "string"}));
    let grown = doc(schema);
    let dry = catalog
        .sync(
            &config(&grown),
            &SyncOptions {
                dry_run: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(dry[1].action, "would update", "{dry:?}");
    assert_eq!(
        columns(
            get(&client, &db, "cloud_trail")
                .await
                .storage_descriptor()
                .unwrap()
                .columns()
        )
        .len(),
        8,
        "a dry run changes nothing"
    );
    let (code, text) = cli(&grown, &["--json", "catalog", "sync", "--database", &db]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    let synced: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(synced[0]["action"], "unchanged");
    assert_eq!(synced[1]["action"], "updated");
    assert_eq!(
        synced[1]["differences"],
        json!([
            "column useridentity: struct<type:string,arn:string> -> struct<type:string,arn:string,invokedby:string> (fields added)",
            "add column sharedeventid string"
        ])
    );
    let t = get(&client, &db, "cloud_trail").await;
    let cols = columns(t.storage_descriptor().unwrap().columns());
    assert!(
        cols.contains(&("sharedeventid".into(), "string".into())),
        "{cols:?}"
    );
    assert!(cols.contains(&(
        "useridentity".into(),
        "struct<type:string,arn:string,invokedby:string>".into()
    )));
    assert_eq!(
        t.parameters()
            .and_then(|p| p.get("owner"))
            .map(String::as_str),
        Some("security-team"),
        "a parameter set by hand is kept"
    );

    // A breaking change: refused with the difference, the table untouched.
    let mut schema = trail_schema();
    schema[1]["type"] = "struct<type:string,arn:string,invokedBy:string>".into();
    schema
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "sharedEventID", "type": "string"}));
    schema[4]["type"] = "string".into(); // bytes_in bigint -> string
    let retyped = doc(schema);
    let (code, text) = cli(&retyped, &["catalog", "sync", "--database", &db]).await;
    assert_eq!(code, ExitCode::from(1), "{text}");
    assert!(text.contains("refused"), "{text}");
    assert!(
        text.contains("column bytes_in: bigint in the catalog, string in the document"),
        "{text}"
    );
    let t = get(&client, &db, "cloud_trail").await;
    assert!(
        columns(t.storage_descriptor().unwrap().columns())
            .contains(&("bytes_in".into(), "bigint".into()))
    );
    // A removed column and a moved location are breaking too.
    let mut moved = grown.clone();
    moved["sources"][0]["output"]["prefix"] = "orders-v2/".into();
    let synced = catalog
        .sync(&config(&moved), &SyncOptions::default())
        .await
        .unwrap();
    assert_eq!(synced[0].action, "refused");
    assert_eq!(
        synced[0].differences,
        ["location: s3://lake/orders/ in the catalog, s3://lake/orders-v2/ in the document"]
    );
    // Replacing is allowed when asked.
    let (code, text) = cli(
        &retyped,
        &["catalog", "sync", "--database", &db, "--allow-breaking"],
    )
    .await;
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    assert!(text.contains("replaced"), "{text}");
    let t = get(&client, &db, "cloud_trail").await;
    assert!(
        columns(t.storage_descriptor().unwrap().columns())
            .contains(&("bytes_in".into(), "string".into()))
    );
}

/// A table's definition as the input of an update.
fn catalog_input(
    t: &aws_sdk_glue::types::Table,
) -> aws_sdk_glue::types::builders::TableInputBuilder {
    let mut input = aws_sdk_glue::types::TableInput::builder()
        .name(t.name())
        .table_type(t.table_type().unwrap_or_default())
        .set_storage_descriptor(t.storage_descriptor().cloned())
        .set_partition_keys(Some(t.partition_keys().to_vec()));
    for (k, v) in t.parameters().cloned().unwrap_or_default() {
        input = input.parameters(k, v);
    }
    input
}

/// The deploy's catalog step: CloudFormation's custom resource request answered through a
/// pre-signed S3 PUT URL (as CloudFormation gives one), on create, update (refused when
/// breaking, so the deploy rolls back) and delete (tables left to the stack's database).
#[tokio::test]
async fn the_deploys_catalog_step_answers_cloudformation() {
    use aws_lambda_events::event::cloudformation::CloudFormationCustomResourceRequest;
    let client = glue().await;
    let stack = tidemark_tests::Stack::new().await;
    let db = format!(
        "tidemark_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    client
        .create_database()
        .database_input(
            aws_sdk_glue::types::DatabaseInput::builder()
                .name(&db)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let catalog = Catalog::new(client.clone(), &db);
    let presigned = |key: &str| {
        let s3 = stack.s3.clone();
        let bucket = stack.lake.clone();
        let key = key.to_string();
        async move {
            s3.put_object()
                .bucket(bucket)
                .key(key)
                .presigned(
                    aws_sdk_s3::presigning::PresigningConfig::expires_in(
                        std::time::Duration::from_secs(300),
                    )
                    .unwrap(),
                )
                .await
                .unwrap()
                .uri()
                .to_string()
        }
    };
    let answered = |key: &str| {
        let s3 = stack.s3.clone();
        let bucket = stack.lake.clone();
        let key = key.to_string();
        async move {
            let body = s3
                .get_object()
                .bucket(bucket)
                .key(key)
                .send()
                .await
                .expect("the answer was PUT")
                .body
                .collect()
                .await
                .unwrap()
                .into_bytes();
            serde_json::from_slice::<Value>(&body).unwrap()
        }
    };
    let request = |kind: &str, url: &str| -> CloudFormationCustomResourceRequest {
        let mut r = json!({
            "RequestType": kind, "ResponseURL": url,
            "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/demo/1",
            "RequestId": format!("req-{kind}"), "ResourceType": "Custom::TidemarkCatalog",
            "LogicalResourceId": "CatalogSync",
            "ResourceProperties": {"ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:m", "Database": db}
        });
        if kind != "Create" {
            r["PhysicalResourceId"] = json!(format!("tidemark-catalog-{db}"));
            r["OldResourceProperties"] = json!({});
        }
        serde_json::from_value(r).unwrap()
    };

    // One step: a request of `kind` with `doc` as the function's document, answered through a
    // pre-signed URL, and the answer as CloudFormation reads it.
    let step = |kind: &'static str, doc: Value| {
        let catalog = &catalog;
        async move {
            let key = format!("cfn/{kind}");
            let url = presigned(&key).await;
            let response = tidemark_delta::catalog::custom_resource(
                catalog,
                &config(&doc),
                &request(kind, &url),
            )
            .await;
            tidemark_delta::catalog::respond(&url, &response)
                .await
                .expect("answered");
            answered(&key).await
        }
    };

    // Create: the tables, SUCCESS.
    let a = step("Create", doc(trail_schema())).await;
    assert_eq!(a["Status"], "SUCCESS", "{a}");
    assert_eq!(a["RequestId"], "req-Create");
    assert_eq!(a["LogicalResourceId"], "CatalogSync");
    assert_eq!(a["PhysicalResourceId"], format!("tidemark-catalog-{db}"));
    assert_eq!(
        a["Data"]["Tables"],
        format!("{db}.orders created, {db}.cloud_trail created, {db}.users created")
    );

    // Update with a breaking change: FAILED, the difference as the reason, nothing changed.
    let mut schema = trail_schema();
    schema[0]["type"] = "string".into();
    let a = step("Update", doc(schema)).await;
    assert_eq!(a["Status"], "FAILED", "{a}");
    assert!(
        a["Reason"]
            .as_str()
            .unwrap()
            .contains("column eventtime: timestamp in the catalog, string in the document"),
        "{a}"
    );
    let t = get(&client, &db, "cloud_trail").await;
    assert_eq!(
        columns(t.storage_descriptor().unwrap().columns())[0].1,
        "timestamp"
    );

    // Delete: SUCCESS, the tables stay (they go with the database).
    assert_eq!(
        step("Delete", doc(trail_schema())).await["Status"],
        "SUCCESS"
    );
    get(&client, &db, "orders").await;
}
