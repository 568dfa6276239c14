//! One worker: an execution environment (the `bootstrap` process behind its own Runtime
//! API) and the event source mapping poller that feeds it, one invocation at a time, as a
//! Lambda instance consuming SQS.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};
use bytes::Bytes;
use serde::Serialize;
use tokio::process::{Child, Command};
use tokio::sync::{oneshot, watch};

use crate::event::{SqsMessage, batch_item_failures, sqs_event};
use crate::rng::Rng;
use crate::runtime_api::{Invocation, Outcome, RuntimeApi};

/// Long-poll wait of each `ReceiveMessage`, seconds: also how long a stop may wait for it.
const POLL_WAIT_S: i32 = 2;

/// What every worker shares: the function, the queue and the chaos knobs.
#[derive(Debug)]
pub struct Setup {
    /// The function's executable.
    pub bootstrap: PathBuf,
    /// `AWS_LAMBDA_FUNCTION_NAME`.
    pub function_name: String,
    /// `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`, MB.
    pub memory_mb: u32,
    /// The function timeout.
    pub timeout: Duration,
    /// The invoked function's ARN.
    pub function_arn: String,
    /// `--env` extras for the function, applied last.
    pub env: Vec<(String, String)>,
    /// Where `worker-<n>.log` files go.
    pub log_dir: PathBuf,
    /// The SQS client.
    pub sqs: Client,
    /// The queue consumed.
    pub queue_url: String,
    /// Its ARN (`eventSourceARN`).
    pub queue_arn: String,
    /// The region (`awsRegion`).
    pub region: String,
    /// Messages per invocation, at most 10.
    pub batch_size: i32,
    /// Visibility timeout of each receive, seconds.
    pub visibility_s: i32,
    /// Probability that an acknowledged message is left for redelivery.
    pub redeliver: f64,
}

/// Invocation counts.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Invocations {
    /// The function answered.
    pub ok: u64,
    /// The function reported an error.
    pub function_error: u64,
    /// No answer before the function timeout.
    pub timeout: u64,
    /// The process died (or was killed) inside the invocation.
    pub crashed: u64,
}

/// Message counts: `received = deleted + left_by_chaos + left_by_failures`.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Messages {
    /// Received from SQS (a redelivery counts again).
    pub received: u64,
    /// Deleted after a successful invocation.
    pub deleted: u64,
    /// Acknowledged by the function, left undeleted by `--redeliver`.
    pub left_by_chaos: u64,
    /// Left for redelivery by a failure: a batch item failure, a failed, timed out or
    /// crashed invocation, or a failed delete.
    pub left_by_failures: u64,
}

/// What one worker (or the whole fleet) did.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Stats {
    /// Invocation counts.
    pub invocations: Invocations,
    /// Message counts.
    pub messages: Messages,
    /// Processes killed by `--kill-every-s`.
    pub kills: u64,
    /// Execution environments started after the first one.
    pub restarts: u64,
}

impl Stats {
    /// Add another worker's counts.
    pub fn add(&mut self, o: &Stats) {
        let (i, m) = (&mut self.invocations, &mut self.messages);
        i.ok += o.invocations.ok;
        i.function_error += o.invocations.function_error;
        i.timeout += o.invocations.timeout;
        i.crashed += o.invocations.crashed;
        m.received += o.messages.received;
        m.deleted += o.messages.deleted;
        m.left_by_chaos += o.messages.left_by_chaos;
        m.left_by_failures += o.messages.left_by_failures;
        self.kills += o.kills;
        self.restarts += o.restarts;
    }
}

/// Lets the chaos killer crash a worker's process, only while it is inside an invocation.
#[derive(Debug, Default)]
pub struct KillSwitch(Mutex<Option<oneshot::Sender<()>>>);

impl KillSwitch {
    /// True while the worker is inside an invocation.
    pub fn is_armed(&self) -> bool {
        self.slot().is_some()
    }

    /// Kill the current invocation's process; false if there is none any more.
    pub fn fire(&self) -> bool {
        self.slot().take().is_some_and(|kill| kill.send(()).is_ok())
    }

    fn arm(&self) -> oneshot::Receiver<()> {
        let (kill, killed) = oneshot::channel();
        *self.slot() = Some(kill);
        killed
    }

    fn disarm(&self) {
        self.slot().take();
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<oneshot::Sender<()>>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// How one invocation ended.
#[derive(Debug)]
enum Ended {
    Answered(Outcome),
    Timeout,
    Crashed(Option<ExitStatus>),
    Killed,
}

/// The `bootstrap` process and its Runtime API.
struct Environment {
    api: RuntimeApi,
    child: Child,
}

impl Environment {
    async fn start(setup: &Setup, worker: usize, generation: u64) -> Result<Self> {
        let api = RuntimeApi::start().await?;
        let path = setup.log_dir.join(format!("worker-{worker}.log"));
        let mut log = OpenOptions::new()
            .create(true)
            .append(generation > 0)
            .write(true)
            .truncate(generation == 0)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        writeln!(
            log,
            "--- tidemark-fleet: worker {worker}, execution environment {generation} ---"
        )
        .with_context(|| format!("writing {}", path.display()))?;
        let log_stream = format!("fleet/[$LATEST]worker-{worker}-{generation}");
        let child = Command::new(&setup.bootstrap)
            .env("AWS_LAMBDA_RUNTIME_API", api.addr().to_string())
            .env("AWS_LAMBDA_FUNCTION_NAME", &setup.function_name)
            .env(
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
                setup.memory_mb.to_string(),
            )
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env(
                "AWS_LAMBDA_LOG_GROUP_NAME",
                format!("/aws/lambda/{}", setup.function_name),
            )
            .env("AWS_LAMBDA_LOG_STREAM_NAME", log_stream)
            .env("AWS_LAMBDA_INITIALIZATION_TYPE", "on-demand")
            .env("AWS_REGION", &setup.region)
            .envs(setup.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("duplicating the log file handle")?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", setup.bootstrap.display()))?;
        Ok(Self { api, child })
    }

    /// Run one invocation to its end, killing the process on a timeout or a kill.
    async fn invoke(
        &mut self,
        setup: &Setup,
        payload: Bytes,
        killed: oneshot::Receiver<()>,
    ) -> Result<Ended> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let id = uuid::Uuid::new_v4();
        let invocation = Invocation {
            request_id: id.to_string(),
            payload,
            deadline_ms: u64::try_from((now + setup.timeout).as_millis()).unwrap_or(u64::MAX),
            function_arn: setup.function_arn.clone(),
            trace_id: format!(
                "Root=1-{:08x}-{};Sampled=0",
                now.as_secs(),
                &id.simple().to_string()[..24]
            ),
        };
        let answered = self.api.invoke(invocation).await?;
        let ended = tokio::select! {
            biased;
            outcome = answered => match outcome {
                Ok(outcome) => Ended::Answered(outcome),
                Err(_) => Ended::Crashed(None),
            },
            status = self.child.wait() => Ended::Crashed(status.ok()),
            _ = tokio::time::sleep(setup.timeout) => Ended::Timeout,
            Ok(()) = killed => Ended::Killed,
        };
        if matches!(ended, Ended::Timeout | Ended::Killed) {
            self.child
                .kill()
                .await
                .context("killing the function process")?;
        }
        Ok(ended)
    }

    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// One worker's loop until `stop` turns true; its counts.
pub async fn run(
    setup: Arc<Setup>,
    worker: usize,
    mut rng: Rng,
    kill_switch: Arc<KillSwitch>,
    stop: watch::Receiver<bool>,
) -> Result<Stats> {
    let mut stats = Stats::default();
    let mut generation = 0;
    let mut env = Environment::start(&setup, worker, generation).await?;
    // Environments lost in a row without a successful invocation: they back off.
    let mut lost = 0u32;
    while !*stop.borrow() {
        if let Some(status) = env
            .child
            .try_wait()
            .context("checking the function process")?
        {
            eprintln!("tidemark-fleet: worker {worker}: function exited while idle ({status})");
            lost += 1;
            generation += 1;
            env = restart(env, &setup, worker, generation, lost, &mut stats).await?;
            continue;
        }
        let messages = receive(&setup).await?;
        if messages.is_empty() {
            continue;
        }
        let n = messages.len() as u64;
        stats.messages.received += n;
        let payload = serde_json::to_vec(&sqs_event(&messages, &setup.queue_arn, &setup.region))
            .context("serialising the SQS event")?;
        let killed = kill_switch.arm();
        let ended = env.invoke(&setup, payload.into(), killed).await;
        kill_switch.disarm();
        // The environment is lost (and replaced) on a timeout, a kill or a crash.
        let lost_env = match ended? {
            Ended::Answered(Outcome::Response(body)) => {
                stats.invocations.ok += 1;
                lost = 0;
                acknowledge(&setup, worker, &messages, &body, &mut rng, &mut stats).await;
                None
            }
            Ended::Answered(Outcome::Error(body)) => {
                stats.invocations.function_error += 1;
                stats.messages.left_by_failures += n;
                let error = String::from_utf8_lossy(&body);
                eprintln!("tidemark-fleet: worker {worker}: function error: {error}");
                None
            }
            Ended::Timeout => {
                stats.invocations.timeout += 1;
                Some("timed out, killed".to_owned())
            }
            Ended::Killed => {
                stats.kills += 1;
                stats.invocations.crashed += 1;
                Some("killed by --kill-every-s".to_owned())
            }
            Ended::Crashed(status) => {
                stats.invocations.crashed += 1;
                Some(match status {
                    Some(status) => format!("the function process died ({status})"),
                    None => "the function process died".to_owned(),
                })
            }
        };
        if let Some(how) = lost_env {
            stats.messages.left_by_failures += n;
            eprintln!("tidemark-fleet: worker {worker}: invocation failed: {how}");
            lost += 1;
            generation += 1;
            env = restart(env, &setup, worker, generation, lost, &mut stats).await?;
        }
    }
    env.stop().await;
    Ok(stats)
}

/// Replace a lost environment by a fresh one, after a pause that grows with the number
/// of environments lost in a row (a function failing at start-up does not spin).
async fn restart(
    old: Environment,
    setup: &Setup,
    worker: usize,
    generation: u64,
    lost: u32,
    stats: &mut Stats,
) -> Result<Environment> {
    if let Some(error) = old.api.init_error() {
        let error = String::from_utf8_lossy(&error);
        eprintln!("tidemark-fleet: worker {worker}: the function reported an init error: {error}");
    }
    old.stop().await;
    let pause = Duration::from_millis(100 << lost.min(6)).min(Duration::from_secs(5));
    tokio::time::sleep(pause).await;
    stats.restarts += 1;
    Environment::start(setup, worker, generation).await
}

/// An SDK error in one line: the service's code and message, or the whole cause chain
/// when the request never got an answer (a connection refused, a timeout).
pub fn sdk_error<E, R>(e: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match e.as_service_error() {
        Some(service) => format!(
            "{}: {}",
            service.code().unwrap_or("unknown error"),
            service.message().unwrap_or("no message")
        ),
        None => DisplayErrorContext(e).to_string(),
    }
}

/// One long poll; transient errors are retried a few times before giving up.
async fn receive(setup: &Setup) -> Result<Vec<SqsMessage>> {
    let mut attempt = 0;
    let output = loop {
        let sent = setup
            .sqs
            .receive_message()
            .queue_url(&setup.queue_url)
            .max_number_of_messages(setup.batch_size)
            .wait_time_seconds(POLL_WAIT_S)
            .visibility_timeout(setup.visibility_s)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .message_system_attribute_names(
                MessageSystemAttributeName::ApproximateFirstReceiveTimestamp,
            )
            .message_system_attribute_names(MessageSystemAttributeName::SenderId)
            .send()
            .await;
        match sent {
            Ok(output) => break output,
            Err(e) if attempt < 5 => {
                attempt += 1;
                let e = sdk_error(&e);
                eprintln!("tidemark-fleet: ReceiveMessage failed (attempt {attempt}): {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => {
                bail!("ReceiveMessage on {}: {}", setup.queue_url, sdk_error(&e))
            }
        }
    };
    output
        .messages
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            let field = |v: Option<String>, name: &str| {
                v.with_context(|| format!("a received message has no {name}"))
            };
            Ok(SqsMessage {
                message_id: field(m.message_id, "MessageId")?,
                receipt_handle: field(m.receipt_handle, "ReceiptHandle")?,
                body: m.body.unwrap_or_default(),
                md5_of_body: m.md5_of_body.unwrap_or_default(),
                attributes: m
                    .attributes
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k.as_str().to_owned(), v))
                    .collect::<BTreeMap<_, _>>(),
            })
        })
        .collect()
}

/// After a successful invocation: delete every message not reported as failed, except
/// those the `--redeliver` knob leaves for SQS to deliver again.
async fn acknowledge(
    setup: &Setup,
    worker: usize,
    messages: &[SqsMessage],
    body: &[u8],
    rng: &mut Rng,
    stats: &mut Stats,
) {
    let ids: Vec<&str> = messages.iter().map(|m| m.message_id.as_str()).collect();
    let failed = match batch_item_failures(body, &ids) {
        Ok(failed) => failed,
        Err(reason) => {
            eprintln!("tidemark-fleet: worker {worker}: the whole batch fails: {reason}");
            stats.messages.left_by_failures += messages.len() as u64;
            return;
        }
    };
    stats.messages.left_by_failures += failed.len() as u64;
    let mut entries = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        if failed.contains(&m.message_id) {
            continue;
        }
        if rng.chance(setup.redeliver) {
            stats.messages.left_by_chaos += 1;
            continue;
        }
        let entry = DeleteMessageBatchRequestEntry::builder()
            .id(i.to_string())
            .receipt_handle(&m.receipt_handle)
            .build();
        match entry {
            Ok(entry) => entries.push(entry),
            Err(e) => {
                eprintln!("tidemark-fleet: worker {worker}: delete entry: {e}");
                stats.messages.left_by_failures += 1;
            }
        }
    }
    let asked = entries.len() as u64;
    if asked == 0 {
        return;
    }
    let deleted = setup
        .sqs
        .delete_message_batch()
        .queue_url(&setup.queue_url)
        .set_entries(Some(entries))
        .send()
        .await;
    let deleted = match deleted {
        Ok(output) => {
            for f in &output.failed {
                eprintln!("tidemark-fleet: worker {worker}: delete failed: {f:?}");
            }
            output.successful.len() as u64
        }
        Err(e) => {
            let e = sdk_error(&e);
            eprintln!("tidemark-fleet: worker {worker}: DeleteMessageBatch failed: {e}");
            0
        }
    };
    stats.messages.deleted += deleted;
    stats.messages.left_by_failures += asked - deleted;
}

#[cfg(test)]
mod tests {
    //! The execution environment with stand-in functions: shell scripts speaking the
    //! Runtime API through curl, or failing in the ways a function can.
    use std::os::unix::fs::PermissionsExt;

    use aws_sdk_sqs::config::{BehaviorVersion, Region};

    use super::*;

    fn setup(dir: &std::path::Path, script: &str, timeout: Duration) -> Setup {
        let bootstrap = dir.join("bootstrap");
        std::fs::write(&bootstrap, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&bootstrap, std::fs::Permissions::from_mode(0o755)).unwrap();
        let config = aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .build();
        Setup {
            bootstrap,
            function_name: "f".into(),
            memory_mb: 128,
            timeout,
            function_arn: "arn:aws:lambda:us-east-1:123456789012:function:f".into(),
            env: vec![("EXTRA".into(), "from --env".into())],
            log_dir: dir.to_path_buf(),
            sqs: Client::from_conf(config),
            queue_url: "http://127.0.0.1:1/q".into(),
            queue_arn: "arn:aws:sqs:us-east-1:123456789012:q".into(),
            region: "us-east-1".into(),
            batch_size: 10,
            visibility_s: 60,
            redeliver: 0.0,
        }
    }

    async fn invoke(setup: &Setup, killed: oneshot::Receiver<()>) -> Ended {
        let mut env = Environment::start(setup, 0, 0).await.unwrap();
        let ended = env
            .invoke(setup, Bytes::from_static(b"{\"n\":1}"), killed)
            .await;
        env.stop().await;
        ended.unwrap()
    }

    /// A kill that never comes (its sender is leaked on purpose).
    fn never() -> oneshot::Receiver<()> {
        let (kill, killed) = oneshot::channel();
        std::mem::forget(kill);
        killed
    }

    #[tokio::test]
    async fn a_function_speaking_the_runtime_api_answers_with_its_environment() {
        let dir = tempfile_dir("answers");
        let api = r#"http://$AWS_LAMBDA_RUNTIME_API/2018-06-01/runtime/invocation"#;
        let script = format!(
            r#"headers="$(dirname "$0")/headers"
body=$(curl -sS -D "$headers" "{api}/next")
id=$(grep -i '^lambda-runtime-aws-request-id:' "$headers" | cut -d' ' -f2 | tr -d '\r')
curl -sS -X POST -d "{{\"got\":$body,\"name\":\"$AWS_LAMBDA_FUNCTION_NAME\",\"extra\":\"$EXTRA\"}}" "{api}/$id/response"
sleep 30"#
        );
        let setup = setup(&dir, &script, Duration::from_secs(20));
        match invoke(&setup, never()).await {
            Ended::Answered(Outcome::Response(body)) => assert_eq!(
                serde_json::from_slice::<serde_json::Value>(&body).unwrap(),
                serde_json::json!({"got": {"n": 1}, "name": "f", "extra": "from --env"})
            ),
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_crash_a_timeout_and_a_kill_end_the_invocation() {
        let dir = tempfile_dir("failures");
        let crash = setup(&dir, "exit 3", Duration::from_secs(20));
        assert!(
            matches!(invoke(&crash, never()).await, Ended::Crashed(Some(s)) if s.code() == Some(3))
        );

        let hang = setup(&dir, "exec sleep 30", Duration::from_millis(300));
        assert!(matches!(invoke(&hang, never()).await, Ended::Timeout));

        let hang = setup(&dir, "exec sleep 30", Duration::from_secs(20));
        let switch = KillSwitch::default();
        let killed = switch.arm();
        assert!(switch.is_armed());
        let fire = async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(switch.fire());
        };
        let (ended, ()) = tokio::join!(invoke(&hang, killed), fire);
        assert!(matches!(ended, Ended::Killed));
        assert!(!switch.is_armed() && !switch.fire());
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn tempfile_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("tidemark-fleet-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
