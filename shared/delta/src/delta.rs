//! The Delta Lake side of the committer: where a source's table lives, opening (or creating)
//! it, what its snapshot holds, and one commit attempt that never retries by itself.
//!
//! delta-rs retries a commit that lost the race itself (15 times, no backoff), checking it
//! for conflicts against a read set of the whole table, and runs checkpoints and log cleanup
//! after a commit unless told not to. Here a commit is made with `max_retries = 0` (a lost
//! race comes back at once, the caller reloads, rebuilds its actions from the ledger and the
//! new snapshot, and tries again after a jittered backoff), with checkpoints and log cleanup
//! off: those belong to the single-writer maintenance job, never to the hot path.

use std::collections::HashMap;
use std::path::PathBuf;

use deltalake::kernel::transaction::{CommitBuilder, CommitProperties, TransactionError};
use deltalake::kernel::{Action, ArrayType, DataType, MapType, StructField, Transaction};
use deltalake::protocol::{DeltaOperation, OutputMode};
use deltalake::{DeltaTable, DeltaTableBuilder, DeltaTableError};
use tidemark::config::{Partitioning, Source};
use tidemark::schema::{ColumnType, FieldType};
use url::Url;

/// The partition column of a table whose source partitions its outputs by key date.
pub const DATE_PARTITION: &str = "dt";

/// Where tables live: the local folders of the embedded backends (bucket = a folder under
/// `root`), or S3 (with the storage options the Delta S3 store reads, e.g. an endpoint).
#[derive(Debug, Clone)]
pub enum TableStore {
    /// `<root>/<bucket>/<prefix>`, as the folder store lays buckets out.
    Local {
        /// The folder store's root.
        root: PathBuf,
    },
    /// `s3://<bucket>/<prefix>`.
    S3 {
        /// Options for the S3 store (`aws_endpoint_url`, `aws_allow_http`, …); empty on AWS.
        options: HashMap<String, String>,
    },
}

impl TableStore {
    /// S3, configured from the environment the SDK clients read: an
    /// `AWS_ENDPOINT_URL_S3` (or `AWS_ENDPOINT_URL`) becomes the store's endpoint, with path-
    /// style requests and plain HTTP allowed when it is `http://`. Nothing else is needed on
    /// AWS (region and credentials come from the environment).
    pub fn s3_from_env() -> Self {
        let mut options = HashMap::new();
        let endpoint = std::env::var("AWS_ENDPOINT_URL_S3")
            .or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
            .ok();
        if let Some(endpoint) = endpoint {
            if endpoint.starts_with("http://") {
                options.insert("aws_allow_http".into(), "true".into());
            }
            options.insert("aws_endpoint_url".into(), endpoint);
            options.insert("aws_virtual_hosted_style_request".into(), "false".into());
        }
        Self::S3 { options }
    }

    /// The table root of `source`: its output bucket and prefix.
    pub fn url(&self, source: &Source) -> Result<Url, DeltaTableError> {
        let out = &source.doc.output;
        let prefix = out.prefix.trim_end_matches('/');
        let url = match self {
            Self::Local { root } => {
                let dir = std::path::absolute(root.join(&out.bucket).join(prefix))
                    .map_err(|e| DeltaTableError::Generic(format!("{}: {e}", root.display())))?;
                Url::from_directory_path(&dir).map_err(|()| {
                    DeltaTableError::Generic(format!("{} is not a folder path", dir.display()))
                })?
            }
            Self::S3 { .. } => Url::parse(&format!("s3://{}/{prefix}/", out.bucket))
                .map_err(|e| DeltaTableError::Generic(e.to_string()))?,
        };
        Ok(url)
    }

    fn options(&self) -> HashMap<String, String> {
        match self {
            Self::Local { .. } => HashMap::new(),
            Self::S3 { options } => options.clone(),
        }
    }
}

/// Make the Delta S3 store known to the table builder (once per process).
pub fn register_s3() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| deltalake::aws::register_handlers(None));
}

/// The table of `source`, loaded at its latest version; created (version 0: the schema, the
/// partition column) when there is none yet. Creation races are settled by the log: whoever
/// writes version 0 first made the table, the other loads it.
pub async fn open(store: &TableStore, source: &Source) -> Result<DeltaTable, DeltaTableError> {
    register_s3();
    let url = store.url(source)?;
    // A folder store's table root exists only once an output was written under it, and
    // delta-rs reports a missing root as an invalid location, not as "no table": make it.
    if let TableStore::Local { .. } = store {
        let dir = url
            .to_file_path()
            .map_err(|()| DeltaTableError::Generic(format!("{url} is not a local path")))?;
        std::fs::create_dir_all(&dir).map_err(|e| {
            DeltaTableError::Generic(format!("creating the table folder {}: {e}", dir.display()))
        })?;
    }
    if let Some(table) = load(store, &url).await? {
        return Ok(table);
    }
    let table = DeltaTableBuilder::from_url(url.clone())?
        .with_storage_options(store.options())
        .build()?;
    let create = table
        .create()
        .with_table_name(source.id())
        .with_comment(format!(
            "tidemark source {:?}: s3://{}/{} published from the ledger",
            source.id(),
            source.doc.bucket,
            source.doc.prefix
        ))
        .with_columns(columns(source)?)
        .with_save_mode(deltalake::protocol::SaveMode::ErrorIfExists)
        .with_commit_properties(quiet(CommitProperties::default()))
        .with_partition_columns(partition_columns(source));
    match create.await {
        Ok(table) => Ok(table),
        Err(created) => match load(store, &url).await? {
            Some(table) => Ok(table),
            None => Err(created),
        },
    }
}

/// The table of `source` at its latest version, `None` when there is none (nothing created).
pub async fn load_existing(
    store: &TableStore,
    source: &Source,
) -> Result<Option<DeltaTable>, DeltaTableError> {
    register_s3();
    let url = store.url(source)?;
    // No folder yet on the folder store: no table (delta-rs would call it an invalid location).
    if let TableStore::Local { .. } = store
        && url.to_file_path().is_ok_and(|dir| !dir.exists())
    {
        return Ok(None);
    }
    load(store, &url).await
}

async fn load(store: &TableStore, url: &Url) -> Result<Option<DeltaTable>, DeltaTableError> {
    let mut table = DeltaTableBuilder::from_url(url.clone())?
        .with_storage_options(store.options())
        .build()?;
    // Asked first, so that a location without a table is an answer, not a logged error.
    if !table.log_store().is_delta_table_location().await? {
        return Ok(None);
    }
    match table.load().await {
        Ok(()) => Ok(Some(table)),
        Err(DeltaTableError::NotATable(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The table's partition columns: `dt` when partitioned by key date, the partition columns'
/// names when partitioned by the data (outermost first).
pub fn partition_columns(source: &Source) -> Vec<String> {
    match source.partition_columns() {
        Some(columns) => columns.iter().map(|c| c.name().to_string()).collect(),
        None if source.doc.output.partitioning == Partitioning::KeyDate => {
            vec![DATE_PARTITION.to_string()]
        }
        None => Vec::new(),
    }
}

/// The table's columns: the source's output columns (its schema, the rescued column, the
/// lineage columns), then each partition column that is not one of them (`dt` of key date, a
/// partition named apart from its column) as a string. A column partitioned under its own
/// name keeps its type and is nullable (NULL and empty values are the default partition);
/// its values are in the log's partition values, not in the files.
fn columns(source: &Source) -> Result<Vec<StructField>, DeltaTableError> {
    let output = source.output_columns();
    let partitions = partition_columns(source);
    let mut fields = Vec::with_capacity(output.len() + partitions.len());
    for c in &output {
        let partition = partitions.contains(&c.name);
        fields.push(StructField::new(
            c.name.clone(),
            delta_type(&c.ty, &c.name)?,
            c.nullable || partition,
        ));
    }
    for p in partitions {
        if !output.iter().any(|c| c.name == p) {
            fields.push(StructField::new(p, DataType::STRING, true));
        }
    }
    Ok(fields)
}

/// The Delta type of a column (or of a field inside one, `at` naming it for errors): nested
/// types as Delta nests them, every field, element and map value nullable as in the Parquet
/// files; `json` a string.
fn delta_type(ty: &FieldType, at: &str) -> Result<DataType, DeltaTableError> {
    Ok(match ty {
        FieldType::Scalar(scalar) => match *scalar {
            ColumnType::Int32 => DataType::INTEGER,
            ColumnType::Int64 => DataType::LONG,
            ColumnType::Float32 => DataType::FLOAT,
            ColumnType::Float64 => DataType::DOUBLE,
            ColumnType::Decimal { precision, scale } => {
                let scale = u8::try_from(scale).map_err(|_| {
                    DeltaTableError::Generic(format!("{at}: a negative decimal scale"))
                })?;
                DataType::decimal(precision, scale)?
            }
            ColumnType::String => DataType::STRING,
            ColumnType::Bool => DataType::BOOLEAN,
            ColumnType::Date => DataType::DATE,
            ColumnType::Timestamp => DataType::TIMESTAMP,
        },
        FieldType::Json => DataType::STRING,
        FieldType::Struct(fields) => DataType::try_struct_type(
            fields
                .iter()
                .map(|f| {
                    let inner = delta_type(&f.ty, &format!("{at}.{}", f.name))?;
                    Ok(StructField::new(f.name.clone(), inner, true))
                })
                .collect::<Result<Vec<_>, DeltaTableError>>()?,
        )?,
        FieldType::Array(element) => {
            ArrayType::new(delta_type(element, &format!("{at}[]"))?, true).into()
        }
        FieldType::Map(value) => MapType::new(
            DataType::STRING,
            delta_type(value, &format!("{at}{{}}"))?,
            true,
        )
        .into(),
    })
}

/// No checkpoint, no log cleanup, no retry inside delta-rs.
fn quiet(props: CommitProperties) -> CommitProperties {
    props
        .with_create_checkpoint(false)
        .with_cleanup_expired_logs(Some(false))
        .with_max_retries(0)
}

/// The application id of the committer's transactions on `source`'s table.
pub fn app_id(source: &Source) -> String {
    format!("tidemark:{}", source.id())
}

/// The outcome of one commit attempt.
pub enum Attempt {
    /// Committed as this table version.
    Committed(i64),
    /// Another writer committed first: reload and rebuild.
    Lost,
}

/// One attempt to commit `actions` on top of the loaded snapshot of `table`, with the
/// committer's transaction `txn_version` for `source`.
pub async fn commit(
    table: &DeltaTable,
    source: &Source,
    actions: Vec<Action>,
    txn_version: i64,
    now_ms: i64,
    metadata: serde_json::Map<String, serde_json::Value>,
) -> Result<Attempt, DeltaTableError> {
    let app_id = app_id(source);
    let operation = DeltaOperation::StreamingUpdate {
        output_mode: OutputMode::Update,
        query_id: app_id.clone(),
        epoch_id: txn_version,
    };
    let txn = Transaction::new_with_last_update(&app_id, txn_version, Some(now_ms));
    commit_as(table, actions, operation, Some(txn), metadata).await
}

/// One attempt to commit `actions` as `operation` on top of the loaded snapshot of `table`
/// (with an application transaction when given), never retried inside delta-rs.
pub async fn commit_as(
    table: &DeltaTable,
    actions: Vec<Action>,
    operation: DeltaOperation,
    txn: Option<Transaction>,
    metadata: serde_json::Map<String, serde_json::Value>,
) -> Result<Attempt, DeltaTableError> {
    let snapshot = table.snapshot()?;
    let mut props = quiet(CommitProperties::default()).with_metadata(metadata);
    if let Some(txn) = txn {
        props = props.with_application_transaction(txn);
    }
    let committed = CommitBuilder::from(props)
        .with_actions(actions)
        .build(Some(snapshot), table.log_store(), operation)
        .await;
    match committed {
        Ok(done) => Ok(Attempt::Committed(done.version() as i64)),
        Err(DeltaTableError::Transaction {
            source:
                TransactionError::MaxCommitAttempts(_) | TransactionError::VersionAlreadyExists(_),
        }) => Ok(Attempt::Lost),
        Err(e) => Err(e),
    }
}
