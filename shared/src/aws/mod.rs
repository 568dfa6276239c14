//! The AWS adapters: the only modules that use the AWS SDK. They map SDK errors to ours,
//! keeping expected conflicts (HTTP 412, ConditionalCheckFailed) as values.

pub mod dynamodb;
pub mod s3;
pub mod sqs;

use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

use crate::error::Retry;

/// Error codes that mean "try again later".
const TRANSIENT_CODES: &[&str] = &[
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestTimeout",
    "RequestTimeoutException",
    "InternalError",
    "InternalServerError",
    "ServiceUnavailable",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "TransactionInProgressException",
];

/// What an SDK error was: the HTTP status (when a response came), the service's error code,
/// whether a retry may help, and the full message.
pub(crate) struct Failure {
    pub status: Option<u16>,
    pub code: Option<String>,
    pub retry: Retry,
    pub message: String,
}

pub(crate) fn failure<E, R>(e: &SdkError<E, R>) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + HasStatus,
{
    let message = DisplayErrorContext(e).to_string();
    match e {
        SdkError::ServiceError(se) => {
            let status = se.raw().status();
            let code = se.err().code().map(str::to_string);
            let transient = status >= 500
                || status == 429
                || code
                    .as_deref()
                    .is_some_and(|c| TRANSIENT_CODES.contains(&c));
            Failure {
                status: Some(status),
                code,
                retry: if transient {
                    Retry::Transient
                } else {
                    Retry::Permanent
                },
                message,
            }
        }
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            Failure {
                status: None,
                code: None,
                retry: Retry::Transient,
                message,
            }
        }
        _ => Failure {
            status: None,
            code: None,
            retry: Retry::Permanent,
            message,
        },
    }
}

/// The HTTP status of a raw response.
pub(crate) trait HasStatus {
    fn status(&self) -> u16;
}

impl HasStatus for aws_sdk_s3::config::http::HttpResponse {
    fn status(&self) -> u16 {
        self.status().as_u16()
    }
}

/// The environment variable naming the ledger table.
pub const ENV_TABLE: &str = "TIDEMARK_TABLE";

/// The environment variable naming the work queue of backfills (its URL): the backfill
/// function sends to it, the ingest function's event source mapping takes from it.
pub const ENV_BACKFILL_QUEUE: &str = "TIDEMARK_BACKFILL_QUEUE_URL";

/// The environment variable naming the reconcile queue (its URL): the reconcile function
/// sends the parts of a window too large for one invocation to it, and its event source
/// mapping brings them back. Optional: without it every window is checked whole.
pub const ENV_RECONCILE_QUEUE: &str = "TIDEMARK_RECONCILE_QUEUE_URL";

/// The queue named by the environment variable `var` (a URL), with a client from the standard
/// AWS environment (`AWS_ENDPOINT_URL_SQS` and the like).
pub async fn queue_from_env(var: &str) -> Result<sqs::SqsQueue, crate::config::ConfigError> {
    let url = std::env::var(var).map_err(|_| crate::config::ConfigError::Invalid {
        path: var.into(),
        message: "must name the queue (its URL)".into(),
    })?;
    let conf = aws_config::load_from_env().await;
    Ok(sqs::SqsQueue::from_conf(&conf, url))
}

/// The S3 store from the standard AWS environment (credentials, region, `AWS_ENDPOINT_URL_S3`).
pub async fn store_from_env() -> s3::S3Store {
    s3::S3Store::from_conf(&aws_config::load_from_env().await)
}

/// The pipeline on S3 and DynamoDB, from the standard AWS environment (credentials, region,
/// `AWS_ENDPOINT_URL_*`) and the ledger table named by `TIDEMARK_TABLE`.
pub async fn pipeline_from_env(
    config: std::sync::Arc<crate::config::Config>,
) -> Result<crate::process::Pipeline, crate::config::ConfigError> {
    let table = std::env::var(ENV_TABLE).map_err(|_| crate::config::ConfigError::Invalid {
        path: ENV_TABLE.into(),
        message: "must name the ledger table".into(),
    })?;
    let conf = aws_config::load_from_env().await;
    Ok(crate::process::Pipeline::new(
        std::sync::Arc::new(s3::S3Store::from_conf(&conf)),
        std::sync::Arc::new(dynamodb::DynamoLedger::new(
            aws_sdk_dynamodb::Client::new(&conf),
            table,
        )),
        std::sync::Arc::new(crate::ports::SystemClock),
        config,
    ))
}
