#!/usr/bin/env python3
"""Cold start of the ingest Lambda binary against a fake Lambda Runtime API, on this machine.

Started by bench/coldstart.sh (which builds the binary and finds the Python); run by hand as

    coldstart.py --bin PATH --python PATH [--runs 30] [--results DIR]

What it does. A minimal Runtime API (the 2018-06-01 API, HTTP/1.1 on 127.0.0.1) runs in this
process. Each measured process is spawned with the environment Lambda gives a function
(AWS_LAMBDA_RUNTIME_API pointing at that fake API, AWS_LAMBDA_FUNCTION_NAME / _VERSION /
_MEMORY_SIZE, AWS_REGION, credentials, TIDEMARK_TABLE, TIDEMARK_CONFIG with one source) and an
otherwise empty environment (HOME is an empty directory: no ~/.aws). Timestamps are taken in
the API's request handler as each request arrives:

  ready     spawn -> its first GET /runtime/invocation/next: configuration read and validated,
            AWS clients built, runtime started: ready for the first event;
  answered  spawn -> the POST /runtime/invocation/{id}/response of the first event: an SQS
            batch whose one message is S3's s3:TestEvent, which the ingest handler skips
            without any AWS request (answer {"batchItemFailures": []}, checked).

When the process asks for its second event it is holding no work: the API reads its peak RSS
(VmHWM in /proc/PID/status), the process is killed, and wait4 gives its CPU time (user + sys,
start to kill). Also measured the same way: a Python process with the same fake API that
imports boto3 and pyarrow and creates an S3 and a DynamoDB client before its first request
(twice: boto3 + pyarrow only, and with the pyarrow.csv / .json / .parquet modules a converting
handler imports), and /bin/true (spawn -> exit) as the floor of spawning from this harness.

One unmeasured warm-up of each process, then --runs rounds, each running every process once,
interleaved so that load from elsewhere falls on all of them alike. The binary runs a second
time with SSL_CERT_FILE naming the system CA bundle, which skips the scan of the certificate
directory (see below). Not measured here: the
Lambda sandbox (Firecracker) and its init, arm64, a cold page cache; see BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import http.server
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

API = "/2018-06-01/runtime"
FUNCTION = "tidemark-ingest"
REGION = "eu-west-1"
ACCOUNT = "123456789012"
TIMEOUT_S = 60

# The Python emulation of a handler: what a Python Lambda doing tidemark's job loads before it
# can take an event, and the same Runtime API loop (as awslambdaric does it, in plain Python).
PYTHON_HANDLER = r'''
import http.client, json, os, sys
import boto3
import pyarrow
if sys.argv[1] == "full":
    import pyarrow.csv, pyarrow.json, pyarrow.parquet
s3 = boto3.client("s3")
ledger = boto3.client("dynamodb")
table = os.environ["TIDEMARK_TABLE"]
sources = json.loads(os.environ["TIDEMARK_CONFIG"])["sources"]

def handle(event):
    failures = []
    for record in event.get("Records", []):
        body = json.loads(record["body"])
        if body.get("Event") == "s3:TestEvent":
            continue
        failures.append({"itemIdentifier": record["messageId"]})  # not modelled here
    return {"batchItemFailures": failures}

api = http.client.HTTPConnection(os.environ["AWS_LAMBDA_RUNTIME_API"])
while True:
    api.request("GET", "/2018-06-01/runtime/invocation/next")
    r = api.getresponse()
    event = json.loads(r.read())
    request_id = r.getheader("Lambda-Runtime-Aws-Request-Id")
    out = json.dumps(handle(event)).encode()
    api.request("POST", f"/2018-06-01/runtime/invocation/{request_id}/response", body=out,
                headers={"Content-Type": "application/json"})
    api.getresponse().read()
'''


def sqs_test_event() -> bytes:
    """An SQS batch of one message: the s3:TestEvent S3 sends to a new queue destination."""
    body = {
        "Service": "Amazon S3",
        "Event": "s3:TestEvent",
        "Time": "2026-11-29T11:59:00.000Z",
        "Bucket": "tidemark-landing",
        "RequestId": "5582815E1AEA5ADF",
        "HostId": "8cLeGAmw098X5cv4Zkwcmo8vvZa3eH3eKxsPzbB9wrR+YstdA6Knx4Ip8EXAMPLE",
    }
    record = {
        "messageId": "5fea7756-0ea4-451a-a703-a558b933e274",
        "receiptHandle": "AQEB0",
        "body": json.dumps(body),
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": "1764417600000",
            "SenderId": "AIDAEXAMPLE",
            "ApproximateFirstReceiveTimestamp": "1764417600001",
        },
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:{REGION}:{ACCOUNT}:tidemark-ingest",
        "awsRegion": REGION,
    }
    return json.dumps({"Records": [record]}).encode()


EVENT = sqs_test_event()
EXPECTED_ANSWER = {"batchItemFailures": []}


def vm_kb(pid: int | None, field: str) -> int | None:
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class Run:
    """The state of one spawned process, written by the API thread, read by the main thread."""

    def __init__(self) -> None:
        self.request_id = str(uuid.uuid4())
        self.pid: int | None = None
        self.t0 = 0
        self.ready_ns: int | None = None
        self.answered_ns: int | None = None
        self.answer: bytes | None = None
        self.ready_rss_kb: int | None = None
        self.peak_rss_kb: int | None = None
        self.failure: str | None = None
        self.finished = threading.Event()  # second GET /next, an error, or init error
        self.release = threading.Event()  # set by the main thread once the process is dead
        self.nexts = 0


class FakeRuntimeAPI(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.run: Run | None = None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeRuntimeAPI

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
        pass

    def reply(self, status: str, body: bytes, headers: dict[str, str] | None = None) -> None:
        lines = [f"HTTP/1.1 {status}", "Content-Type: application/json",
                 f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        # One write: no Nagle / delayed-ACK stall between headers and body.
        self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)

    def read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        now = time.perf_counter_ns()
        run = self.server.run
        if run is None or self.path != f"{API}/invocation/next":
            self.reply("404 Not Found", b'{"errorType":"NotFound"}')
            return
        run.nexts += 1
        if run.nexts == 1:
            run.ready_ns = now
            run.ready_rss_kb = vm_kb(run.pid, "VmHWM")
            deadline = int(time.time() * 1000) + 900_000
            self.reply("200 OK", EVENT, {
                "Lambda-Runtime-Aws-Request-Id": run.request_id,
                "Lambda-Runtime-Deadline-Ms": str(deadline),
                "Lambda-Runtime-Invoked-Function-Arn":
                    f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{FUNCTION}",
                "Lambda-Runtime-Trace-Id":
                    "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0",
            })
            return
        # The next event: the process is idle, done with the first one. Hold the request
        # until the main thread has killed it.
        run.peak_rss_kb = vm_kb(run.pid, "VmHWM")
        run.finished.set()
        run.release.wait(TIMEOUT_S)
        self.close_connection = True

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        now = time.perf_counter_ns()
        run = self.server.run
        body = self.read_body()
        if run is None:
            self.reply("404 Not Found", b'{"errorType":"NotFound"}')
            return
        if self.path == f"{API}/invocation/{run.request_id}/response":
            run.answered_ns = now
            run.answer = body
        elif self.path == f"{API}/invocation/{run.request_id}/error":
            run.failure = f"invocation error: {body.decode(errors='replace')}"
            run.finished.set()
        elif self.path == f"{API}/init/error":
            run.failure = f"init error: {body.decode(errors='replace')}"
            run.finished.set()
        else:
            self.reply("404 Not Found", b'{"errorType":"NotFound"}')
            return
        self.reply("202 Accepted", b'{"status":"OK"}')


def lambda_env(api: str, config: str, home: str) -> dict[str, str]:
    """What Lambda sets for a function (provided.al2023 / python3.x), with fake credentials."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "en_US.UTF-8",
        "TZ": ":UTC",
        "HOME": home,
        "AWS_CONFIG_FILE": os.path.join(home, "no-config"),
        "AWS_SHARED_CREDENTIALS_FILE": os.path.join(home, "no-credentials"),
        "AWS_LAMBDA_RUNTIME_API": api,
        "AWS_LAMBDA_FUNCTION_NAME": FUNCTION,
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "128",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{FUNCTION}",
        "AWS_LAMBDA_LOG_STREAM_NAME": "2026/11/29/[$LATEST]0123456789abcdef0123456789abcdef",
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "ASIAFAKEFAKEFAKEFAKE",
        "AWS_SECRET_ACCESS_KEY": "fake/fake/fake/fake/fake/fake/fake/fake0",
        "AWS_SESSION_TOKEN": "fake-token",
        "LAMBDA_TASK_ROOT": home,
        "_HANDLER": "bootstrap",
        "TIDEMARK_TABLE": "tidemark-ledger",
        "TIDEMARK_CONFIG": config,
    }


def one_source_config(path: str) -> str:
    doc = json.load(open(path))
    return json.dumps({"sources": doc["sources"][:1], "reports": doc.get("reports")})


def measure(server: FakeRuntimeAPI, cmd: list[str], env: dict[str, str], log: str) -> dict:
    run = Run()
    server.run = run
    with open(log, "wb") as out:
        run.t0 = time.perf_counter_ns()
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)
        run.pid = proc.pid
        deadline = time.monotonic() + TIMEOUT_S
        while not run.finished.wait(0.02):
            if proc.poll() is not None:
                run.failure = run.failure or f"exited with status {proc.returncode}"
                break
            if time.monotonic() > deadline:
                run.failure = f"no second GET /next within {TIMEOUT_S} s"
                break
        rusage = None
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGKILL)
            _, _, rusage = os.wait4(proc.pid, 0)
            proc.returncode = -signal.SIGKILL
        run.release.set()
    server.run = None
    if run.failure is None and run.answered_ns is None:
        run.failure = "no response POST"
    if run.failure is None and json.loads(run.answer or b"null") != EXPECTED_ANSWER:
        run.failure = f"unexpected answer {run.answer!r}"
    if run.failure:
        with open(log, "rb") as f:
            tail = f.read()[-2000:].decode(errors="replace")
        raise SystemExit(f"coldstart: {' '.join(cmd)}: {run.failure}\n--- output:\n{tail}")
    return {
        "ready_ms": (run.ready_ns - run.t0) / 1e6,
        "answered_ms": (run.answered_ns - run.t0) / 1e6,
        "cpu_ms": (rusage.ru_utime + rusage.ru_stime) * 1000 if rusage else None,
        "ready_rss_kb": run.ready_rss_kb,
        "peak_rss_kb": run.peak_rss_kb,
    }


def spawn_floor(cmd: list[str]) -> dict:
    t0 = time.perf_counter_ns()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, rusage = os.wait4(proc.pid, 0)
    t1 = time.perf_counter_ns()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"ready_ms": (t1 - t0) / 1e6, "answered_ms": None,
            "cpu_ms": (rusage.ru_utime + rusage.ru_stime) * 1000,
            # ru_maxrss would count the forked harness's pages before exec: not reported.
            "ready_rss_kb": None, "peak_rss_kb": None}


def load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def fmt(v: float | None, digits: int = 1) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def mb(kb: float | None) -> str:
    return "–" if kb is None else f"{kb * 1024 / 1e6:.1f}"


def stats(samples: list[dict], key: str) -> tuple:
    vals = [s[key] for s in samples if s[key] is not None]
    if not vals:
        return (None, None, None)
    return (statistics.median(vals), min(vals), max(vals))


def git_state(repo: str) -> str:
    try:
        head = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (f" with uncommitted changes in {len(dirty)} files" if dirty else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="the ingest binary")
    ap.add_argument("--python", required=True, help="a Python with boto3 and pyarrow")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--config", help="sources document (default infra/sample/sources.json)")
    ap.add_argument("--results", help="directory for <UTC time>-coldstart.{md,json}")
    args = ap.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    config = one_source_config(args.config or os.path.join(repo, "infra/sample/sources.json"))

    server = FakeRuntimeAPI()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    api = f"127.0.0.1:{server.server_address[1]}"

    with tempfile.TemporaryDirectory(prefix="tidemark-coldstart-") as tmp:
        home = os.path.join(tmp, "task")
        os.mkdir(home)
        handler = os.path.join(home, "handler.py")
        with open(handler, "w") as f:
            f.write(PYTHON_HANDLER)
        env = lambda_env(api, config, home)
        true = "/bin/true"
        procs = [
            ("`/bin/true` (spawn → exit: the floor)", None, [true]),
            ("tidemark ingest (Rust)", env, [os.path.abspath(args.bin)]),
        ]
        # rustls-native-certs reads the system CA bundle and then every file of the
        # certificate directory (/etc/ssl/certs: 146 PEM files on Debian). With SSL_CERT_FILE
        # set it reads that one bundle only: how much of the start-up the scan is.
        bundle = "/etc/ssl/certs/ca-certificates.crt"
        if os.path.exists(bundle):
            procs.append(("tidemark ingest (Rust), `SSL_CERT_FILE` = the CA bundle only",
                          {**env, "SSL_CERT_FILE": bundle}, [os.path.abspath(args.bin)]))
        procs += [
            ("Python: boto3 + pyarrow, S3 + DynamoDB clients", env,
             [args.python, handler, "min"]),
            ("Python: as above + pyarrow.csv / .json / .parquet", env,
             [args.python, handler, "full"]),
        ]
        samples: dict[str, list[dict]] = {name: [] for name, _, _ in procs}

        def once(name: str, penv: dict | None, cmd: list[str]) -> dict:
            if penv is None:
                return spawn_floor(cmd)
            return measure(server, cmd, penv, os.path.join(tmp, "last-output.log"))

        started = dt.datetime.now(dt.timezone.utc)
        load_start = load()
        print(f"coldstart: load before: {load_start}", file=sys.stderr)
        for name, penv, cmd in procs:  # warm-up: page cache, .pyc files
            once(name, penv, cmd)
            if penv is not None:  # what the process said, as evidence that it did the work
                with open(os.path.join(tmp, "last-output.log"), "rb") as f:
                    said = f.read().decode(errors="replace").strip().splitlines()
                print(f"coldstart: warm-up of {name}: last output line: "
                      f"{said[-1][:400] if said else '(none)'}", file=sys.stderr)
        loads = []
        for i in range(args.runs):
            loads.append(load())
            for name, penv, cmd in procs:
                samples[name].append(once(name, penv, cmd))
            print(f"coldstart: round {i + 1}/{args.runs}", file=sys.stderr)
        load_end = load()
        finished = dt.datetime.now(dt.timezone.utc)
    server.shutdown()

    versions = subprocess.run(
        [args.python, "-c",
         "import sys, boto3, botocore, pyarrow; print(sys.version.split()[0], boto3.__version__,"
         " botocore.__version__, pyarrow.__version__)"],
        capture_output=True, text=True, check=True).stdout.split()
    binary = os.path.abspath(args.bin)
    size = os.path.getsize(binary)
    sha = hashlib.sha256(open(binary, "rb").read()).hexdigest()[:12]
    cpu = "unknown"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30

    rows = []
    for name, _, _ in procs:
        s = samples[name]
        r_med, r_min, r_max = stats(s, "ready_ms")
        a_med, a_min, a_max = stats(s, "answered_ms")
        c_med, _, _ = stats(s, "cpu_ms")
        rr_med, _, _ = stats(s, "ready_rss_kb")
        _, _, peak = stats(s, "peak_rss_kb")
        rows.append(f"| {name} | {fmt(r_med)} | {fmt(r_min)} | {fmt(r_max)} | {fmt(a_med)} | "
                    f"{fmt(a_min)} | {fmt(a_max)} | {fmt(c_med)} | {mb(rr_med)} | {mb(peak)} |")
    lines = [
        f"Run {started:%Y-%m-%d %H:%M}–{finished:%H:%M} UTC; load average (1, 5, 15 min) before "
        f"{load_start}, at the start of rounds 1 / {args.runs // 2 + 1} / {args.runs}: "
        f"{loads[0]}; {loads[args.runs // 2]}; {loads[-1]}, after {load_end}.",
        f"Machine: {os.cpu_count()} CPUs ({cpu}), {mem_gib:.0f} GiB RAM, Linux "
        f"{platform.release()}, {platform.machine()}. Checkout when measured: {git_state(repo)}.",
        f"{args.runs} measured runs of each after one warm-up, interleaved. Binary: "
        f"`{os.path.relpath(binary, repo)}`, {size:,} bytes (sha256 {sha}…). Python "
        f"{versions[0]}, boto3 {versions[1]}, botocore {versions[2]}, pyarrow {versions[3]}.",
        "",
        "| process | ready median ms | min | max | answered median ms | min | max "
        "| CPU median ms | RSS at ready MB | peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        "ready = spawn → first `GET /runtime/invocation/next`; answered = spawn → the response "
        "`POST` of the first event (an SQS batch holding S3's `s3:TestEvent`, which needs no AWS "
        "request); CPU = user + sys from spawn until killed after the first event; RSS at ready "
        "= median VmHWM at the first GET; peak RSS = highest VmHWM at the second GET over all "
        "runs. MB = 10^6 bytes. For `/bin/true`, ready = spawn → exit as seen by wait4.",
    ]
    table = "\n".join(lines)
    print(table)
    if args.results:
        os.makedirs(args.results, exist_ok=True)
        stem = os.path.join(args.results, f"{started:%Y%m%dT%H%M%SZ}-coldstart")
        with open(stem + ".md", "w") as f:
            f.write(table + "\n")
        with open(stem + ".json", "w") as f:
            json.dump({"started": started.isoformat(), "loads": loads, "binary": binary,
                       "size": size, "samples": samples}, f, indent=1)
        print(f"coldstart: wrote {stem}.md and .json", file=sys.stderr)


if __name__ == "__main__":
    main()
