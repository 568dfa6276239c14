//! The ingest function's binary, run as Lambda runs it (its runtime speaking to a Runtime API
//! served here), on the local stack (DynamoDB Local and the S3 emulator): a batch holding an
//! ORC file its decoder loops on is answered (the poison message reported as failed, the
//! other landed), and then the process exits, so that no invocation is served beside the
//! spinning thread the watchdog left behind. A batch without poison leaves the process
//! waiting for the next invocation.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tidemark_tests::{Backends, orders_csv};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, mpsc};

/// A Runtime API (2018-06-01) for one function process: hands out the invocations it is
/// given on `GET .../invocation/next` (holding the request while there is none), and passes
/// on each `POST .../response` or `.../error` body.
struct RuntimeApi {
    addr: std::net::SocketAddr,
    invocations: mpsc::Sender<Value>,
    outcomes: mpsc::Receiver<(String, Value)>,
}

impl RuntimeApi {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (invocations, next) = mpsc::channel::<Value>(4);
        let (done, outcomes) = mpsc::channel(4);
        let next = Arc::new(Mutex::new(next));
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                tokio::spawn(connection(stream, next.clone(), done.clone()));
            }
        });
        Self {
            addr,
            invocations,
            outcomes,
        }
    }
}

async fn connection(
    stream: TcpStream,
    next: Arc<Mutex<mpsc::Receiver<Value>>>,
    done: mpsc::Sender<(String, Value)>,
) {
    let mut stream = BufReader::new(stream);
    let mut n = 0;
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let mut length = 0;
        loop {
            let mut header = String::new();
            stream.read_line(&mut header).await.unwrap();
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        stream.read_exact(&mut body).await.unwrap();
        let (status, headers, answer) = if method == "GET" && path.ends_with("/invocation/next") {
            let Some(payload) = next.lock().await.recv().await else {
                return;
            };
            n += 1;
            let deadline = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
                + 60_000;
            let headers = format!(
                "Lambda-Runtime-Aws-Request-Id: request-{n}-{}\r\nLambda-Runtime-Deadline-Ms: \
                 {deadline}\r\nLambda-Runtime-Invoked-Function-Arn: \
                 arn:aws:lambda:us-east-1:123456789012:function:ingest\r\n\
                 Lambda-Runtime-Trace-Id: Root=1-00000000-000000000000000000000000\r\n",
                uuid::Uuid::new_v4()
            );
            (200, headers, payload.to_string().into_bytes())
        } else if method == "POST" && (path.ends_with("/response") || path.ends_with("/error")) {
            let kind = if path.ends_with("/error") {
                "error"
            } else {
                "response"
            };
            let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            done.send((kind.to_string(), value)).await.unwrap();
            (202, String::new(), br#"{"status":"OK"}"#.to_vec())
        } else {
            (404, String::new(), b"unknown".to_vec())
        };
        let head = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{headers}\r\n",
            answer.len()
        );
        let out = stream.get_mut();
        if out.write_all(head.as_bytes()).await.is_err() || out.write_all(&answer).await.is_err() {
            return;
        }
    }
}

/// The ingest binary, started against `api` with the local stack's settings (inherited from
/// the environment `infra/test.sh` sets) and `b`'s table and buckets.
fn start_ingest(b: &Backends, api: &RuntimeApi) -> tokio::process::Child {
    let source = |id: &str, prefix: &str, format: &str| {
        json!({"source_id": id, "bucket": b.landing, "prefix": prefix, "format": format,
            "schema": [{"name": "order_id", "type": "int64", "nullable": false},
                       {"name": "customer", "type": "string"},
                       {"name": "quantity", "type": "int32"},
                       {"name": "amount", "type": "decimal(12,2)"},
                       {"name": "ordered_at", "type": "timestamp"}],
            "output": {"bucket": b.lake, "prefix": format!("{id}/")}, "max_attempts": 3})
    };
    let doc =
        json!({"sources": [source("orders", "in/", "csv"), source("orders_orc", "orc/", "orc")]});
    tokio::process::Command::new(env!("CARGO_BIN_EXE_ingest"))
        .env("AWS_LAMBDA_RUNTIME_API", api.addr.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", "ingest")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("TIDEMARK_CONFIG", doc.to_string())
        .env(
            "TIDEMARK_TABLE",
            b.ledger_table.as_deref().expect("the aws pair"),
        )
        .env("TIDEMARK_STALL_SECONDS", "2")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the ingest binary starts")
}

/// An SQS batch of one message per key, each holding the key's S3 record.
async fn batch(b: &Backends, keys: &[&str]) -> Value {
    let mut messages = Vec::new();
    for key in keys {
        let record = b.created_record(key, "0000000000000001").await;
        messages.push((*key, json!({"Records": [record]})));
    }
    tidemark_tests::sqs(messages)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_poison_file_the_function_answers_then_exits() {
    let b = Backends::aws().await;
    let poison = std::fs::read(format!(
        "{}/../../tests/fixtures/avro_orc/poison-rle-loop.orc",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    b.upload("orc/poison.orc", poison).await;
    b.upload("in/good.csv", orders_csv(1, 10).0).await;
    b.upload("in/later.csv", orders_csv(100, 3).0).await;
    let mut api = RuntimeApi::start().await;

    // Without poison, the process answers and waits for the next invocation.
    let mut ingest = start_ingest(&b, &api);
    api.invocations
        .send(batch(&b, &["in/later.csv"]).await)
        .await
        .unwrap();
    let (kind, answer) = tokio::time::timeout(Duration::from_secs(60), api.outcomes.recv())
        .await
        .expect("answered")
        .unwrap();
    assert_eq!(
        (kind.as_str(), &answer),
        ("response", &json!({"batchItemFailures": []}))
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        ingest.try_wait().unwrap().is_none(),
        "a healthy process stays"
    );

    // A batch with poison: answered (only the poison message failed), then the process ends.
    api.invocations
        .send(batch(&b, &["orc/poison.orc", "in/good.csv"]).await)
        .await
        .unwrap();
    let (kind, answer) = tokio::time::timeout(Duration::from_secs(60), api.outcomes.recv())
        .await
        .expect("answered within the stall limit, not the invocation's timeout")
        .unwrap();
    assert_eq!(
        (kind.as_str(), &answer),
        (
            "response",
            &json!({"batchItemFailures": [{"itemIdentifier": "orc/poison.orc"}]})
        )
    );
    let status = tokio::time::timeout(Duration::from_secs(10), ingest.wait())
        .await
        .expect("the process exits after answering")
        .unwrap();
    assert!(status.success(), "{status:?}");
    let good = b
        .ledger
        .get("orders", "in/good.csv")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(good.committed.unwrap().rows, 10);
    let poisoned = b
        .ledger
        .get("orders_orc", "orc/poison.orc")
        .await
        .unwrap()
        .unwrap();
    assert!(
        poisoned
            .last_error
            .unwrap_or_default()
            .contains("no progress for 2 s"),
        "recorded in the ledger"
    );
}
