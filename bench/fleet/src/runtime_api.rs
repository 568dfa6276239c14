//! The Lambda Runtime API (version 2018-06-01) as the `lambda_runtime` crate uses it, served
//! on 127.0.0.1 for one execution environment:
//!
//! - `GET /2018-06-01/runtime/invocation/next` blocks until there is an invocation, then
//!   answers its payload with the `Lambda-Runtime-*` headers the runtime reads;
//! - `POST /2018-06-01/runtime/invocation/{id}/response` and `.../{id}/error` complete it;
//! - `POST /2018-06-01/runtime/init/error` reports a failed initialisation.
//!
//! Each execution environment gets a fresh server, dropped with it, so a request left
//! pending by a killed process can never take the next environment's invocation.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};

/// One invocation handed to the function.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// `Lambda-Runtime-Aws-Request-Id`.
    pub request_id: String,
    /// The event, JSON.
    pub payload: Bytes,
    /// `Lambda-Runtime-Deadline-Ms`: ms since the epoch.
    pub deadline_ms: u64,
    /// `Lambda-Runtime-Invoked-Function-Arn`.
    pub function_arn: String,
    /// `Lambda-Runtime-Trace-Id`.
    pub trace_id: String,
}

/// How the function completed an invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `POST .../response`: the function's answer.
    Response(Bytes),
    /// `POST .../error`: the function's error (a `{"errorType", "errorMessage"}` document).
    Error(Bytes),
}

struct State {
    /// Invocations waiting for a `GET .../next`.
    next: tokio::sync::Mutex<mpsc::Receiver<Invocation>>,
    /// Invocations handed out and not completed yet, by request id.
    pending: Mutex<HashMap<String, oneshot::Sender<Outcome>>>,
    /// The body of the last `POST .../init/error`, if any.
    init_error: Mutex<Option<Bytes>>,
}

/// A running Runtime API server; stops when dropped.
pub struct RuntimeApi {
    addr: SocketAddr,
    invocations: mpsc::Sender<Invocation>,
    state: Arc<State>,
    server: JoinHandle<()>,
}

impl RuntimeApi {
    /// Serve on an ephemeral port of 127.0.0.1.
    pub async fn start() -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the Runtime API listener on 127.0.0.1")?;
        let addr = listener
            .local_addr()
            .context("Runtime API listener address")?;
        let (invocations, receiver) = mpsc::channel(1);
        let state = Arc::new(State {
            next: tokio::sync::Mutex::new(receiver),
            pending: Mutex::new(HashMap::new()),
            init_error: Mutex::new(None),
        });
        let server = tokio::spawn(serve(listener, state.clone()));
        Ok(Self {
            addr,
            invocations,
            state,
            server,
        })
    }

    /// The `host:port` to give the function as `AWS_LAMBDA_RUNTIME_API`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queue an invocation for the function's next `GET .../next`. The receiver resolves
    /// when the function completes it; it is closed if the server stops first.
    pub async fn invoke(&self, invocation: Invocation) -> Result<oneshot::Receiver<Outcome>> {
        let (done, outcome) = oneshot::channel();
        lock(&self.state.pending).insert(invocation.request_id.clone(), done);
        self.invocations
            .send(invocation)
            .await
            .context("the Runtime API server has stopped")?;
        Ok(outcome)
    }

    /// The body of the function's `POST .../init/error`, if it sent one.
    pub fn init_error(&self) -> Option<Bytes> {
        lock(&self.state.init_error).clone()
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        // Dropping the server task drops its connection tasks (a `JoinSet` aborts them).
        self.server.abort();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn serve(listener: TcpListener, state: Arc<State>) {
    let mut connections = JoinSet::new();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                eprintln!("tidemark-fleet: Runtime API accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let state = state.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| handle(state.clone(), request));
            // A connection ends when the function closes it or its process dies.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        while connections.try_join_next().is_some() {}
    }
}

async fn handle(
    state: Arc<State>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let Some(route) = path.strip_prefix("/2018-06-01/runtime/") else {
        return Ok(answer(StatusCode::NOT_FOUND, "unknown path"));
    };
    let route: Vec<&str> = route.split('/').collect();
    Ok(match (method, route.as_slice()) {
        (Method::GET, ["invocation", "next"]) => next(&state).await,
        (Method::POST, ["invocation", id, kind @ ("response" | "error")]) => {
            match request.into_body().collect().await {
                Ok(body) => {
                    let body = body.to_bytes();
                    let outcome = match *kind {
                        "response" => Outcome::Response(body),
                        _ => Outcome::Error(body),
                    };
                    complete(&state, id, outcome)
                }
                Err(e) => answer(StatusCode::BAD_REQUEST, &format!("reading body: {e}")),
            }
        }
        (Method::POST, ["init", "error"]) => {
            let body = request.into_body().collect().await;
            let body = body.map(|b| b.to_bytes()).unwrap_or_default();
            eprintln!(
                "tidemark-fleet: init error: {}",
                String::from_utf8_lossy(&body)
            );
            *lock(&state.init_error) = Some(body);
            answer(StatusCode::ACCEPTED, r#"{"status":"OK"}"#)
        }
        _ => answer(StatusCode::NOT_FOUND, "unknown path"),
    })
}

async fn next(state: &State) -> Response<Full<Bytes>> {
    let invocation = state.next.lock().await.recv().await;
    let Some(inv) = invocation else {
        return answer(StatusCode::INTERNAL_SERVER_ERROR, "shutting down");
    };
    Response::builder()
        .status(StatusCode::OK)
        .header("Content-Type", "application/json")
        .header("Lambda-Runtime-Aws-Request-Id", &inv.request_id)
        .header("Lambda-Runtime-Deadline-Ms", inv.deadline_ms.to_string())
        .header("Lambda-Runtime-Invoked-Function-Arn", &inv.function_arn)
        .header("Lambda-Runtime-Trace-Id", &inv.trace_id)
        .body(Full::new(inv.payload))
        .unwrap_or_else(|e| answer(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()))
}

fn complete(state: &State, request_id: &str, outcome: Outcome) -> Response<Full<Bytes>> {
    match lock(&state.pending).remove(request_id) {
        Some(done) => {
            // The worker may have given up on it (a timeout): nothing to do then.
            let _ = done.send(outcome);
            answer(StatusCode::ACCEPTED, r#"{"status":"OK"}"#)
        }
        None => answer(
            StatusCode::BAD_REQUEST,
            r#"{"errorType":"InvalidRequestID","errorMessage":"unknown request id"}"#,
        ),
    }
}

fn answer(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_owned())));
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    //! Round trips through the server with a tiny HTTP/1.1 client speaking to it the way
    //! `lambda_runtime` does.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    /// One request on its own connection; the status, the headers (lower-cased) and the body.
    async fn call(
        addr: SocketAddr,
        method: &str,
        path: &str,
        body: &str,
    ) -> (u16, HashMap<String, String>, String) {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: aws-lambda-rust/test\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).await.unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        let mut lines = head.lines();
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
            .collect();
        (status, headers, body.to_string())
    }

    fn invocation(id: &str, payload: &str) -> Invocation {
        Invocation {
            request_id: id.into(),
            payload: Bytes::from(payload.to_owned()),
            deadline_ms: 1_700_000_000_000,
            function_arn: "arn:aws:lambda:us-east-1:123456789012:function:f".into(),
            trace_id: "Root=1-00000000-000000000000000000000000;Sampled=0".into(),
        }
    }

    #[tokio::test]
    async fn next_then_response_completes_the_invocation() {
        let api = RuntimeApi::start().await.unwrap();
        let addr = api.addr();
        // The function polls first, as it does at start: the GET waits for an event.
        let poll = tokio::spawn(call(addr, "GET", "/2018-06-01/runtime/invocation/next", ""));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !poll.is_finished(),
            "next must block until there is an event"
        );

        let done = api.invoke(invocation("req-1", r#"{"a":1}"#)).await.unwrap();
        let (status, headers, body) = poll.await.unwrap();
        assert_eq!((status, body.as_str()), (200, r#"{"a":1}"#));
        assert_eq!(headers["lambda-runtime-aws-request-id"], "req-1");
        assert_eq!(headers["lambda-runtime-deadline-ms"], "1700000000000");
        assert_eq!(
            headers["lambda-runtime-invoked-function-arn"],
            "arn:aws:lambda:us-east-1:123456789012:function:f"
        );
        assert!(headers["lambda-runtime-trace-id"].starts_with("Root=1-"));

        let path = "/2018-06-01/runtime/invocation/req-1/response";
        let (status, _, _) = call(addr, "POST", path, r#"{"batchItemFailures":[]}"#).await;
        assert_eq!(status, 202);
        assert_eq!(
            done.await.unwrap(),
            Outcome::Response(Bytes::from_static(br#"{"batchItemFailures":[]}"#))
        );
        // A second answer to the same invocation is refused, as Lambda does.
        assert_eq!(call(addr, "POST", path, "{}").await.0, 400);
    }

    #[tokio::test]
    async fn an_error_and_an_init_error_reach_the_worker() {
        let api = RuntimeApi::start().await.unwrap();
        let addr = api.addr();
        let done = api.invoke(invocation("req-2", "{}")).await.unwrap();
        let (status, headers, _) =
            call(addr, "GET", "/2018-06-01/runtime/invocation/next", "").await;
        assert_eq!(
            (status, headers["lambda-runtime-aws-request-id"].as_str()),
            (200, "req-2")
        );
        let diagnostic = r#"{"errorType":"Retryable","errorMessage":"boom"}"#;
        let path = "/2018-06-01/runtime/invocation/req-2/error";
        assert_eq!(call(addr, "POST", path, diagnostic).await.0, 202);
        assert_eq!(
            done.await.unwrap(),
            Outcome::Error(Bytes::from(diagnostic.to_owned()))
        );

        let path = "/2018-06-01/runtime/init/error";
        assert_eq!(call(addr, "POST", path, diagnostic).await.0, 202);
        assert_eq!(api.init_error(), Some(Bytes::from(diagnostic.to_owned())));
        assert_eq!(call(addr, "GET", "/2015-03-31/functions", "").await.0, 404);
    }
}
