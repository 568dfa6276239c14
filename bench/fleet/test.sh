#!/usr/bin/env bash
# End-to-end test of tidemark-fleet: the real ingest binary (target/debug/ingest of the main
# workspace) run as a fleet of 2 workers against the local stack, once plain and once with
# the chaos knobs (--redeliver 0.2 --kill-every-s 3). Each scenario gets its own ledger
# table, buckets and queue; it uploads N small CSV objects, sends one S3-notification-shaped
# SQS message per object (real ETags, increasing sequencers), runs the fleet until the queue
# stays empty, then checks that every object has exactly one Parquet output and one `done`
# ledger record, and that the summary's counts add up.
#
# Needs the local stack running (infra/localstack.sh start); it neither starts nor stops it.
#   STACK_ENV  the stack's environment file   [<repo>/.local/stack.env]
#   PYTHON     a python with boto3            [<dir of STACK_ENV>/venv/bin/python]
#   OBJECTS    objects per scenario           [200]
#   INGEST_BIN the function binary            [<repo>/target/debug/ingest, built first]
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
STACK_ENV="${STACK_ENV:-$ROOT/.local/stack.env}"
PYTHON="${PYTHON:-$(dirname "$STACK_ENV")/venv/bin/python}"
OBJECTS="${OBJECTS:-200}"

die() {
    echo "fleet test: ERROR: $*" >&2
    exit 1
}
[[ -f "$STACK_ENV" ]] || die "no $STACK_ENV: start the local stack first (infra/localstack.sh start)"
[[ -x "$PYTHON" ]] || die "no python with boto3 at $PYTHON"
# shellcheck source=/dev/null
source "$STACK_ENV"
[[ -n "${AWS_ENDPOINT_URL_SQS:-}" ]] || die "$STACK_ENV sets no AWS_ENDPOINT_URL_SQS"

# One cargo build at a time: the function (unless given), then the fleet.
if [[ -z "${INGEST_BIN:-}" ]]; then
    INGEST_BIN="$ROOT/target/debug/ingest"
    (cd "$ROOT" && cargo build --quiet -p ingest)
fi
[[ -x "$INGEST_BIN" ]] || die "no function binary at $INGEST_BIN"
(cd "$HERE" && cargo build --quiet)
FLEET="$HERE/target/debug/tidemark-fleet"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# The boto3 side: make the resources and the messages, check the outcome, clean up.
cat >"$WORK/stack.py" <<'PY'
import json, sys, boto3

cmd, run = sys.argv[1], sys.argv[2]
table, landing, lake, queue = f"fleet-{run}", f"fleet-{run}-landing", f"fleet-{run}-lake", f"fleet-{run}"
ddb, s3, sqs = boto3.client("dynamodb"), boto3.client("s3"), boto3.client("sqs")

def keys(n):
    return [f"in/part {i:04d}.csv" for i in range(n)]

def form_encode(key):  # as S3 encodes keys in notifications
    safe = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~/")
    return "".join("+" if b == 32 else chr(b) if b in safe else f"%{b:02X}" for b in key.encode())

def record(key, etag, size, seq):
    return {"eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
            "eventTime": "2026-11-29T12:00:00.000Z", "eventName": "ObjectCreated:Put",
            "userIdentity": {"principalId": "AWS:AIDAEXAMPLE"},
            "requestParameters": {"sourceIPAddress": "127.0.0.1"},
            "responseElements": {"x-amz-request-id": "C3D13FE58DE4C810", "x-amz-id-2": "FMyUVURIY8"},
            "s3": {"s3SchemaVersion": "1.0", "configurationId": "tidemark",
                   "bucket": {"name": landing, "ownerIdentity": {"principalId": "A3NL1KOZZKExample"},
                              "arn": f"arn:aws:s3:::{landing}"},
                   "object": {"key": form_encode(key), "size": size, "eTag": etag, "sequencer": f"{seq:018X}"}}}

def setup(n, config_path):
    ddb.create_table(  # the layout of shared/src/aws/dynamodb.rs ensure_table
        TableName=table, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": a, "AttributeType": "S"} for a in ("pk", "gsi1pk", "gsi1sk")],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        GlobalSecondaryIndexes=[{"IndexName": "by_source",
                                 "KeySchema": [{"AttributeName": "gsi1pk", "KeyType": "HASH"},
                                               {"AttributeName": "gsi1sk", "KeyType": "RANGE"}],
                                 "Projection": {"ProjectionType": "ALL"}}])
    ddb.get_waiter("table_exists").wait(TableName=table)
    for b in (landing, lake):
        s3.create_bucket(Bucket=b)
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    config = {"sources": [{
        "source_id": "fleet", "bucket": landing, "prefix": "in/", "include": ["*.csv"], "format": "csv",
        "schema": [{"name": "id", "type": "int64", "nullable": False},
                   {"name": "amount", "type": "decimal(12,2)"}],
        "sum_columns": ["amount"],
        "output": {"bucket": lake, "prefix": "out/", "partitioning": "none"}}]}
    with open(config_path, "w") as f:
        json.dump(config, f)
    bodies = []
    for seq, key in enumerate(keys(n), start=1):
        data = f"id,amount\n{seq},{seq % 100}.{seq % 7:02d}\n".encode()
        etag = s3.put_object(Bucket=landing, Key=key, Body=data)["ETag"].strip('"')
        bodies.append(json.dumps({"Records": [record(key, etag, len(data), seq)]}))
    for i in range(0, n, 10):
        sent = sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": str(j), "MessageBody": b} for j, b in enumerate(bodies[i:i + 10])])
        assert not sent.get("Failed"), sent
    print(url)

def check(n, summary_path, chaos):
    problems = []
    expected = {"out/" + k[len("in/"):] + ".parquet" for k in keys(n)}
    outputs = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket=lake)
               for o in p.get("Contents", [])]
    if sorted(outputs) != sorted(expected):
        problems.append(f"lake: {len(outputs)} objects ({len(set(outputs))} distinct), "
                        f"{len(expected - set(outputs))} expected outputs missing, "
                        f"unexpected: {sorted(set(outputs) - expected)[:5]}")
    for key in sorted(expected)[:3]:
        head = s3.get_object(Bucket=lake, Key=key, Range="bytes=0-3")["Body"].read()
        if head != b"PAR1":
            problems.append(f"{key} is not Parquet")
    items = [i for p in ddb.get_paginator("scan").paginate(TableName=table) for i in p["Items"]]
    done = [i["pk"]["S"] for i in items if i.get("status", {}).get("S") == "done"]
    want = {f"fleet/{k}" for k in keys(n)}
    if sorted(done) != sorted(want):
        statuses = {}
        for i in items:
            statuses[i.get("status", {}).get("S")] = statuses.get(i.get("status", {}).get("S"), 0) + 1
        problems.append(f"ledger: {len(done)} done records for {n} objects; statuses {statuses}")
    s = json.load(open(summary_path))
    m, inv = s["messages"], s["invocations"]
    def adds_up(x, who):
        mm = x["messages"]
        if mm["received"] != mm["deleted"] + mm["left_by_chaos"] + mm["left_by_failures"]:
            problems.append(f"{who}: received != deleted + left_by_chaos + left_by_failures: {mm}")
    adds_up(s, "total")
    for w in s["per_worker"]:
        adds_up(w, f"worker {w['worker']}")
    for field in ("received", "deleted", "left_by_chaos", "left_by_failures"):
        if sum(w["messages"][field] for w in s["per_worker"]) != m[field]:
            problems.append(f"per-worker {field} do not add up to the total")
    if s["stop_reason"] != "queue_empty":
        problems.append(f"stopped by {s['stop_reason']}, not an empty queue")
    if m["deleted"] != n:
        problems.append(f"{m['deleted']} messages deleted, {n} sent")
    if inv["function_error"] or inv["timeout"]:
        problems.append(f"failed invocations: {inv}")
    if chaos:
        if s["kills"] == 0 or m["left_by_chaos"] == 0:
            problems.append(f"the chaos knobs did nothing: kills {s['kills']}, left_by_chaos {m['left_by_chaos']}")
        if s["restarts"] < s["kills"] or inv["crashed"] < s["kills"]:
            problems.append(f"kills {s['kills']}, crashed {inv['crashed']}, restarts {s['restarts']}")
    elif m["left_by_chaos"] or m["left_by_failures"] or s["kills"] or s["restarts"] or inv["crashed"]:
        problems.append(f"a plain run left messages or lost workers: {s}")
    print(f"  objects {n}: {len(outputs)} Parquet outputs, {len(done)} done records; "
          f"invocations {inv}; messages {m}; kills {s['kills']}, restarts {s['restarts']}, "
          f"wall {s['wall_s']} s")
    for p in problems:
        print(f"  PROBLEM: {p}")
    sys.exit(1 if problems else 0)

def cleanup():
    for b in (landing, lake):
        try:
            for p in s3.get_paginator("list_objects_v2").paginate(Bucket=b):
                for o in p.get("Contents", []):
                    s3.delete_object(Bucket=b, Key=o["Key"])
            s3.delete_bucket(Bucket=b)
        except Exception as e:
            print(f"cleanup {b}: {e}", file=sys.stderr)
    for f in (lambda: ddb.delete_table(TableName=table),
              lambda: sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=queue)["QueueUrl"])):
        try:
            f()
        except Exception as e:
            print(f"cleanup: {e}", file=sys.stderr)

{"setup": lambda: setup(int(sys.argv[3]), sys.argv[4]),
 "check": lambda: check(int(sys.argv[3]), sys.argv[4], sys.argv[5] == "chaos"),
 "cleanup": cleanup}[cmd]()
PY

passed=0
failed=0
# scenario NAME [fleet options...]
scenario() {
    local name="$1"
    shift
    local run
    run="$(date +%s)-$RANDOM-$name"
    echo "== $name: tidemark-fleet --workers 2 --until-empty-s 5 $*"
    local url
    url="$("$PYTHON" "$WORK/stack.py" setup "$run" "$OBJECTS" "$WORK/$name-sources.json")"
    local rc=0
    "$FLEET" --workers 2 --until-empty-s 5 --max-runtime-s 900 --timeout-s 10 \
        --queue-url "$url" --bootstrap "$INGEST_BIN" --log-dir "$WORK/$name-logs" --seed 7 \
        --env "TIDEMARK_TABLE=fleet-$run" --env "TIDEMARK_CONFIG_FILE=$WORK/$name-sources.json" \
        --env "RUST_LOG=warn" "$@" >"$WORK/$name-summary.json" 2>"$WORK/$name-fleet.log" || rc=$?
    if [[ $rc -ne 0 ]]; then
        echo "  PROBLEM: tidemark-fleet exited $rc:"
        tail -20 "$WORK/$name-fleet.log" | sed 's/^/    /'
        failed=$((failed + 1))
    elif "$PYTHON" "$WORK/stack.py" check "$run" "$OBJECTS" "$WORK/$name-summary.json" \
        "$([[ $# -gt 0 ]] && echo chaos || echo plain)"; then
        passed=$((passed + 1))
    else
        echo "  summary: $(cat "$WORK/$name-summary.json")"
        echo "  fleet log (last lines):"
        tail -10 "$WORK/$name-fleet.log" | sed 's/^/    /'
        failed=$((failed + 1))
    fi
    "$PYTHON" "$WORK/stack.py" cleanup "$run"
}

scenario plain
scenario chaos --redeliver 0.2 --kill-every-s 3

echo "fleet: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
