"""The backfill fleet at scale: N small objects, backfilled by 1, 2, 4, 8 workers.

Driven by bench/backfill.sh (which builds the binaries and starts the local stack); see its
header for the command and the knobs. For each backend pair and worker count:

* aws (the local stack: moto's S3 and SQS, DynamoDB Local): a fresh ledger table, lake
  bucket and queue; the planner (`tidemark --backend aws backfill --no-wait`) enqueues every
  object; the fleet (bench/fleet's tidemark-fleet) runs the RELEASE ingest binary behind a
  Lambda Runtime API in W worker processes, with at-least-once chaos: a share of acknowledged
  messages is redelivered and a worker process is killed now and then;
* local (the embedded backends): a fresh root whose landing folder holds the same objects;
  `tidemark backfill --workers W` plans and works them in one process.

Then it checks exactly-once three ways: the ledger (`tidemark status --json`: done objects,
rows and sums), the lake (`tidemark outputs --json`: every output read back) and the source
(the totals the generator wrote), and prints one line per run: objects/s of the fleet (from
the job's `planned_at` to its last finished message), the planner's objects/s, counts.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIDEMARK = REPO / "target/release/tidemark"
INGEST = REPO / "target/release/ingest"
FLEET = REPO / "bench/fleet/target/release/tidemark-fleet"

# Objects one worker invocation processes at once (the template's ObjectConcurrency default).
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "2"))

SCHEMA = [
    {"name": "order_id", "type": "int64", "nullable": False},
    {"name": "customer", "type": "string"},
    {"name": "quantity", "type": "int32"},
    {"name": "amount", "type": "decimal(12,2)"},
    {"name": "ordered_at", "type": "timestamp"},
]


def say(*a):
    print("backfill-bench:", *a, file=sys.stderr, flush=True)


def object_body(i: int) -> tuple[bytes, dict]:
    """Object i: 3-7 orders rows; its bytes and totals."""
    rows = 3 + i % 5
    lines = ["order_id,customer,quantity,amount,ordered_at"]
    t = {"rows": 0, "order_id": 0, "quantity": 0, "amount": Decimal(0)}
    for r in range(rows):
        oid = i * 10 + r
        q = oid % 7 + 1
        cents = (oid * 37) % 100_000 + 1
        amount = Decimal(cents) / 100
        lines.append(f'{oid},"Customer {oid % 997}",{q},{amount:.2f},2026-11-{oid % 28 + 1:02d}T10:00:00Z')
        t["rows"] += 1
        t["order_id"] += oid
        t["quantity"] += q
        t["amount"] += amount
    return ("\n".join(lines) + "\n").encode(), t


def key_of(i: int) -> str:
    return f"in/2026/11/{i % 28 + 1:02d}/orders-{i:07d}.csv"


def expected(n: int) -> dict:
    total = {"rows": 0, "order_id": 0, "quantity": 0, "amount": Decimal(0)}
    for i in range(n):
        _, t = object_body(i)
        for k in total:
            total[k] += t[k]
    return total


def config(landing: str, lake: str) -> dict:
    return {
        "sources": [
            {
                "source_id": "orders",
                "bucket": landing,
                "prefix": "in/",
                "format": "csv",
                "schema": SCHEMA,
                "sum_columns": ["quantity", "amount"],
                "output": {"bucket": lake, "prefix": "orders/"},
                "max_attempts": 20,
            }
        ]
    }


def run(cmd, env=None, check=True) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if check and p.returncode not in (0, 1):
        say("FAILED:", " ".join(map(str, cmd)))
        say(p.stderr[-4000:])
        raise SystemExit(2)
    return p


def verify(cli_env, cfg: Path, want: dict, n: int, backend: list[str]) -> dict:
    """Ledger and lake against the source's totals."""
    st = json.loads(run([TIDEMARK, *backend, "--config", cfg, "--json", "status", "--source", "orders"], env=cli_env).stdout)
    s = st["sources"][0]
    ledger = {
        "objects": s["objects"]["done"],
        "rows": s["totals"]["rows"],
        "quantity": int(s["totals"]["sums"]["quantity"]),
        "amount": Decimal(s["totals"]["sums"]["amount"]),
    }
    out = json.loads(run([TIDEMARK, *backend, "--config", cfg, "--json", "outputs", "orders"], env=cli_env).stdout)
    lake = {
        "objects": len(out["files"]),
        "rows": out["total"]["rows"],
        "quantity": int(out["total"]["sums"]["quantity"]),
        "amount": Decimal(out["total"]["sums"]["amount"]),
    }
    source = {"objects": n, "rows": want["rows"], "quantity": want["quantity"], "amount": want["amount"]}
    return {"source": source, "ledger": ledger, "lake": lake, "exact": source == ledger == lake}


def job_status(cli_env, cfg, backend, job) -> dict:
    return json.loads(run([TIDEMARK, *backend, "--config", cfg, "--json", "backfill", "status", job], env=cli_env).stdout)


def aws_run(n: int, workers: int, want: dict, landing: str, out: Path, chaos: bool) -> dict:
    import boto3

    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"])
    ddb = boto3.client("dynamodb", endpoint_url=os.environ["AWS_ENDPOINT_URL_DYNAMODB"])
    sqs = boto3.client("sqs", endpoint_url=os.environ["AWS_ENDPOINT_URL_SQS"])
    tag = f"w{workers}-{int(time.time())}"
    table, lake = f"bench-{tag}", f"bench-lake-{tag}"
    s = lambda a: {"AttributeName": a, "AttributeType": "S"}
    ddb.create_table(
        TableName=table,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[s("pk"), s("gsi1pk"), s("gsi1sk")],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by_source",
                "KeySchema": [{"AttributeName": "gsi1pk", "KeyType": "HASH"}, {"AttributeName": "gsi1sk", "KeyType": "RANGE"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
    )
    s3.create_bucket(Bucket=lake)
    queue = sqs.create_queue(QueueName=f"bench-{tag}", Attributes={"VisibilityTimeout": "360"})["QueueUrl"]
    cfg = out / f"sources-{tag}.json"
    cfg.write_text(json.dumps(config(landing, lake)))
    env = dict(os.environ, TIDEMARK_TABLE=table, TIDEMARK_BACKFILL_QUEUE_URL=queue)
    backend = ["--backend", "aws"]
    t0 = time.time()
    plan = json.loads(run([TIDEMARK, *backend, "--config", cfg, "--json", "backfill", "--source", "orders", "--no-wait"], env=env).stdout)
    planner_s = time.time() - t0
    job = plan["job"]["id"]
    fleet_cmd = [
        FLEET, "--workers", str(workers), "--queue-url", queue, "--bootstrap", INGEST,
        "--timeout-s", "60", "--visibility-s", "360", "--until-empty-s", "5",
        "--log-dir", str(out / f"fleet-{tag}"),
        "--env", f"TIDEMARK_CONFIG_FILE={cfg}", "--env", f"TIDEMARK_TABLE={table}",
        "--env", f"TIDEMARK_CONCURRENCY={CONCURRENCY}", "--env", "RUST_LOG=warn", "--seed", str(workers),
    ]
    if chaos:
        fleet_cmd += ["--redeliver", "0.02", "--kill-every-s", "45"]
    t1 = time.time()
    fleet = run(fleet_cmd, env=env)
    fleet_wall = time.time() - t1
    summary = json.loads(fleet.stdout.strip().splitlines()[-1])
    status = job_status(env, cfg, backend, job)
    work_s = (status["finished_at"] - status["plan"]["planned_at"]) / 1000 if status.get("finished_at") else None
    check = verify(env, cfg, want, n, backend)
    return {
        "write_units": write_units(ddb, table),
        "backend": "aws (local stack)", "workers": workers, "objects": n, "planner_s": round(planner_s, 1),
        "fleet_s": round(work_s or fleet_wall, 1), "objects_per_s": round(n / (work_s or fleet_wall), 1),
        "job": status["counts"] | {"state": status["state"], "enqueued": status["plan"]["enqueued"]},
        "fleet": {k: summary.get(k) for k in ("invocations", "messages", "kills", "restarts")},
        "check": check,
    }


def local_run(n: int, workers: int, want: dict, template: Path, out: Path) -> dict:
    root = out / f"local-w{workers}"
    if root.exists():
        shutil.rmtree(root)
    (root / "buckets").mkdir(parents=True)
    # Hard links: the landing folder of every run shares the files of the template.
    subprocess.run(["cp", "-al", str(template), str(root / "buckets" / "landing")], check=True)
    cfg = root / "sources.json"
    cfg.write_text(json.dumps(config("landing", "lake")))
    backend = ["--backend", "local", "--root", str(root)]
    t0 = time.time()
    res = json.loads(
        run([TIDEMARK, *backend, "--config", cfg, "--json", "backfill", "--source", "orders", "--workers", str(workers),
             "--concurrency", str(CONCURRENCY)]).stdout
    )
    wall = time.time() - t0
    status = res["job"]
    work_s = (status["finished_at"] - status["plan"]["planned_at"]) / 1000
    plan_s = (status["plan"]["planned_at"] - status["started_at"]) / 1000
    check = verify(None, cfg, want, n, backend)
    return {
        "backend": "embedded", "workers": workers, "objects": n, "planner_s": round(plan_s, 1),
        "fleet_s": round(work_s, 1), "objects_per_s": round(n / work_s, 1), "wall_s": round(wall, 1),
        "job": status["counts"] | {"state": status["state"], "enqueued": status["plan"]["enqueued"]},
        "check": check,
    }


def write_units(ddb, table: str) -> dict:
    """What one commit costs in write units, table and index, as DynamoDB (Local) counts them:
    a done record written back unchanged with ReturnConsumedCapacity=INDEXES."""
    page = ddb.scan(TableName=table, Limit=50)
    item = next((i for i in page["Items"] if i.get("status", {}).get("S") == "done"), None)
    if item is None:
        return {}
    rev = item["rev"]["N"]
    out = ddb.put_item(
        TableName=table,
        Item=item,
        ConditionExpression="rev = :rev",
        ExpressionAttributeValues={":rev": {"N": rev}},
        ReturnConsumedCapacity="INDEXES",
    )
    cc = out.get("ConsumedCapacity", {})
    return {
        "record_bytes": len(json.dumps(item)),
        "table": cc.get("Table", {}).get("CapacityUnits"),
        "index": sum(v.get("CapacityUnits", 0) for v in (cc.get("GlobalSecondaryIndexes") or {}).values()),
    }


def upload(n: int, landing: str):
    import boto3

    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"])
    try:
        s3.create_bucket(Bucket=landing)
    except Exception:
        pass
    have = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=landing, Prefix="in/"):
        have += page.get("KeyCount", 0)
    if have == n:
        say(f"{landing} holds the {n} objects already")
        return
    say(f"uploading {n} objects to {landing}")
    t = time.time()

    def put(i):
        body, _ = object_body(i)
        s3.put_object(Bucket=landing, Key=key_of(i), Body=body)

    with cf.ThreadPoolExecutor(16) as ex:
        list(ex.map(put, range(n)))
    say(f"uploaded in {time.time() - t:.0f} s")


def write_template(n: int, path: Path):
    marker = path / ".complete"
    if marker.exists() and marker.read_text() == str(n):
        return
    if path.exists():
        shutil.rmtree(path)
    for i in range(n):
        f = path / key_of(i)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(object_body(i)[0])
    marker.write_text(str(n))


def main():
    n = int(os.environ.get("BENCH_OBJECTS", "100000"))
    workers = [int(w) for w in os.environ.get("BENCH_WORKERS", "1 2 4 8").split()]
    backends = os.environ.get("BENCH_BACKENDS", "aws local").split()
    chaos = os.environ.get("BENCH_CHAOS", "1") == "1"
    out = REPO / ".local/bench-backfill" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out.mkdir(parents=True)
    want = expected(n)
    say(f"{n} objects, {want['rows']} rows; workers {workers} x {CONCURRENCY} objects at once; backends {backends}; chaos {chaos}")
    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:8]
    results = []
    if "local" in backends:
        template = REPO / f".local/bench-backfill/landing-{n}-{digest}"
        write_template(n, template)
        for w in workers:
            say(f"embedded, {w} worker(s)")
            results.append(local_run(n, w, want, template, out))
            say(json.dumps(results[-1], default=str))
    if "aws" in backends:
        landing = f"bench-landing-{n}-{digest}"
        upload(n, landing)
        for w in workers:
            say(f"local stack, {w} worker process(es)")
            results.append(aws_run(n, w, want, landing, out, chaos))
            say(json.dumps(results[-1], default=str))
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    print("| backend | workers | objects | planner s | fleet s | objects/s | processed | duplicate | skipped | kills | redelivered | exact |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        j, f = r["job"], r.get("fleet") or {}
        msgs = f.get("messages") or {}
        print(
            f"| {r['backend']} | {r['workers']} | {r['objects']} | {r['planner_s']} | {r['fleet_s']} | "
            f"{r['objects_per_s']} | {j['processed']} | {j['duplicate']} | {j['skipped']} | "
            f"{f.get('kills', '-')} | {msgs.get('left_by_chaos', '-')} | {'yes' if r['check']['exact'] else 'NO'} |"
        )
    say(f"results in {out}")
    if not all(r["check"]["exact"] for r in results):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
