#!/usr/bin/env bash
# The cost of reconciliation in two tiers, measured on the `tidemark` CLI (release build):
#
# 1. memory: a window holding one ≈1 GB CSV object (the orders dataset of `tidemark-bench
#    gen`, 9.1M rows) and its output, ingested with `tidemark run` on the embedded backends;
#    peak RSS (GNU time) of `tidemark reconcile --deep --no-repair` (the source recounted,
#    the output's sum columns read back by ranged reads) and of the cheap tier alone
#    (`--sample 0`: listing, ledger, the output's footer);
# 2. cost: a window of 10,000 small objects (20 rows each): CPU seconds (user + sys) and
#    wall time of `tidemark reconcile --no-repair` with the default deep sample (1%),
#    against `tidemark run` ingesting the same window, medians of BENCH_RUNS runs each, on
#    the embedded backends and, when the local stack is up (`AWS_ENDPOINT_URL_S3` set, e.g.
#    `source .local/stack.env`), on S3 + DynamoDB (moto + DynamoDB Local) with
#    `--backend aws`. The cheap tier alone (`--sample 0`) is measured beside it.
#
#   bench/reconcile.sh                                  # the full run (≈30 min once built)
#   BENCH_BIG_ROWS=500000 BENCH_SMALL_OBJECTS=500 BENCH_RUNS=1 bench/reconcile.sh   # quick
#
# Environment (all optional): BENCH_BIG_ROWS (9100000), BENCH_SMALL_OBJECTS (10000),
# BENCH_SMALL_ROWS (rows per small object, 20), BENCH_RUNS (3), BENCH_PARTS (comma list of
# big,small,aws; default all three, aws only when the stack is up).
# Every measured command is printed as it is run; the results table at the end, and with
# every sample in .local/bench-results/reconcile-<UTC time>.json.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
say() { printf 'bench: %s\n' "$*" >&2; }

[ -x /usr/bin/time ] || { say "GNU time (/usr/bin/time) is required: apt-get install time"; exit 1; }

say "building tidemark-cli (release) and bench/ (release)"
cargo build --release --quiet -p tidemark-cli
cargo build --release --quiet --manifest-path bench/Cargo.toml

venv=""
if [ -n "${AWS_ENDPOINT_URL_S3:-}" ] && [[ "${BENCH_PARTS:-big,small,aws}" == *aws* ]]; then
    venv="$repo/.local/venv-reconcile-bench"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/python" -c "import boto3" 2>/dev/null ||
        "$venv/bin/pip" install --quiet --disable-pip-version-check boto3
fi

exec "${venv:+$venv/bin/}python3" - "$repo" <<'PY'
import json, os, shutil, statistics, subprocess, sys, time, uuid
from concurrent.futures import ThreadPoolExecutor

repo = sys.argv[1]
tm = f"{repo}/target/release/tidemark"
gen = f"{repo}/bench/target/release/tidemark-bench"
big_rows = int(os.environ.get("BENCH_BIG_ROWS", "9100000"))
n_small = int(os.environ.get("BENCH_SMALL_OBJECTS", "10000"))
small_rows = int(os.environ.get("BENCH_SMALL_ROWS", "20"))
runs = int(os.environ.get("BENCH_RUNS", "3"))
parts = os.environ.get("BENCH_PARTS", "big,small,aws").split(",")
if "aws" in parts and not os.environ.get("AWS_ENDPOINT_URL_S3"):
    print("bench: AWS_ENDPOINT_URL_S3 is not set: the S3 + DynamoDB part is skipped", file=sys.stderr)
    parts.remove("aws")
data = f"{repo}/.local/bench-data"
work = f"{repo}/.local/bench-out/reconcile"
results = {"load_start": os.getloadavg()[0], "runs": runs, "samples": {}}

SCHEMA = json.load(open(f"{repo}/bench/schema.json"))
SUMS = ["order_id", "customer_id", "product_id", "quantity", "unit_price", "total"]


def config(path, landing, lake):
    doc = {"sources": [{
        "source_id": "orders", "bucket": landing, "prefix": "orders/", "format": "csv",
        "csv": {"header": True}, "schema": SCHEMA, "sum_columns": SUMS,
        "output": {"bucket": lake, "prefix": "orders/"},
        "reconcile": {"grace_minutes": 0},
    }], "reports": {"bucket": lake, "prefix": "reports/"}}
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def timed(name, args, env=None):
    """Run args under GNU time -v; wall, user+sys CPU and peak RSS. Fails loudly."""
    print("$ " + " ".join(args), file=sys.stderr, flush=True)
    out = f"{work}/time.txt"
    proc = subprocess.run(["/usr/bin/time", "-v", "-o", out, *args], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(args)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    t = {}
    for line in open(out):
        key, _, value = line.strip().rpartition(": ")
        t[key] = value
    wall = 0.0
    for part in t["Elapsed (wall clock) time (h:mm:ss or m:ss)"].split(":"):
        wall = wall * 60 + float(part)
    sample = {"wall": wall,
              "cpu": float(t["User time (seconds)"]) + float(t["System time (seconds)"]),
              "rss_mb": int(t["Maximum resident set size (kbytes)"]) / 1024,
              "command": " ".join(args)}
    results["samples"].setdefault(name, []).append(sample)
    print(f"  {name}: wall {sample['wall']:.2f} s, cpu {sample['cpu']:.2f} s, "
          f"peak RSS {sample['rss_mb']:.0f} MB", file=sys.stderr, flush=True)
    return sample, proc.stdout


def median(name, field):
    return statistics.median(s[field] for s in results["samples"][name])


def report_of(stdout):
    return json.loads(stdout)["report"]["sources"][0]


def fresh(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


WINDOW = ["--from", "2000-01-01T00:00:00Z", "--to", "now"]

# ---------------------------------------------------------------- 1. one ≈1 GB object
if "big" in parts:
    src = f"{data}/rows-{big_rows}-reconcile"
    if not os.path.exists(f"{src}/expected.json"):
        print(f"bench: generating {big_rows} rows into {src}", file=sys.stderr)
        subprocess.run([gen, "gen", "--rows", str(big_rows), "--out", src], check=True,
                       stdout=subprocess.DEVNULL)
    root = fresh(f"{work}/big")
    os.makedirs(f"{root}/buckets/landing/orders")
    os.makedirs(f"{root}/buckets/lake")
    os.link(f"{src}/orders.csv", f"{root}/buckets/landing/orders/orders.csv")
    size = os.path.getsize(f"{src}/orders.csv")
    results["big_object_bytes"] = size
    conf = config(f"{root}/sources.json", "landing", "lake")
    base = [tm, "--backend", "local", "--root", root, "--config", conf]
    timed("big: ingest (tidemark run)", base + ["run"])
    for _ in range(runs):
        _, out = timed("big: reconcile --deep", base + ["--json", "reconcile", *WINDOW, "--deep", "--no-repair"])
        r = report_of(out)
        deep = r["totals"]["deep"]
        assert r["checked"] == {"cheap": 1, "deep": 1}, r["checked"]
        assert deep["source"]["rows"] == deep["ledger"]["rows"] == deep["lake"]["rows"] == big_rows, deep
        assert deep["source"]["sums"] == deep["ledger"]["sums"] == deep["lake"]["sums"], deep
        _, out = timed("big: reconcile, cheap tier alone (--sample 0)",
                       base + ["--json", "reconcile", *WINDOW, "--sample", "0", "--no-repair"])
        assert report_of(out)["checked"] == {"cheap": 1, "deep": 0}

# ---------------------------------------------------------------- 2. 10,000 small objects
small_src = f"{data}/small-{n_small}x{small_rows}"
if ("small" in parts or "aws" in parts) and not os.path.exists(f"{small_src}/done"):
    print(f"bench: generating {n_small} objects of {small_rows} rows into {small_src}", file=sys.stderr)
    gen_dir = fresh(f"{small_src}.gen")
    subprocess.run([gen, "gen", "--rows", str(n_small * small_rows), "--out", gen_dir], check=True,
                   stdout=subprocess.DEVNULL)
    shutil.rmtree(small_src, ignore_errors=True)
    os.makedirs(f"{small_src}/orders/2026/11/30")
    with open(f"{gen_dir}/orders.csv") as f:
        header = f.readline()
        for i in range(n_small):
            with open(f"{small_src}/orders/2026/11/30/part-{i:05}.csv", "w") as o:
                o.write(header)
                for _ in range(small_rows):
                    o.write(f.readline())
    shutil.rmtree(gen_dir)
    open(f"{small_src}/done", "w").close()


def small_part(label, base_of, prepare, env=None):
    """Ingest the window, then reconcile it (default sample, then the cheap tier alone)."""
    for i in range(runs):
        base = base_of(prepare(i))
        timed(f"{label}: ingest (tidemark run)", base + ["run"], env)
        _, out = timed(f"{label}: reconcile (default sample)",
                       base + ["--json", "reconcile", *WINDOW, "--no-repair"], env)
        r = report_of(out)
        assert r["objects"] == n_small and not r["findings"] and not r["mismatches"], r["checked"]
        results.setdefault("deep_checked", {})[label] = r["checked"]["deep"]
        timed(f"{label}: reconcile, cheap tier alone (--sample 0)",
              base + ["--json", "reconcile", *WINDOW, "--sample", "0", "--no-repair"], env)


if "small" in parts:
    def local(i):
        root = fresh(f"{work}/small-{i}")
        os.makedirs(f"{root}/buckets/lake")
        subprocess.run(["cp", "-al", small_src, f"{root}/buckets/landing"], check=True)
        os.remove(f"{root}/buckets/landing/done")
        return root
    small_part("embedded",
               lambda root: [tm, "--backend", "local", "--root", root,
                             "--config", config(f"{root}/sources.json", "landing", "lake")],
               local)

if "aws" in parts:
    import boto3
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"])
    ddb = boto3.client("dynamodb", endpoint_url=os.environ["AWS_ENDPOINT_URL_DYNAMODB"])
    tag = uuid.uuid4().hex[:8]
    landing = f"bench-landing-{tag}"
    s3.create_bucket(Bucket=landing)
    names = sorted(os.listdir(f"{small_src}/orders/2026/11/30"))
    print(f"bench: uploading {len(names)} objects to s3://{landing}", file=sys.stderr, flush=True)

    def upload(name):
        with open(f"{small_src}/orders/2026/11/30/{name}", "rb") as f:
            s3.put_object(Bucket=landing, Key=f"orders/2026/11/30/{name}", Body=f.read())
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(upload, names))
    env = dict(os.environ)

    def aws(i):
        table, lake = f"bench-{tag}-{i}", f"bench-lake-{tag}-{i}"
        s = lambda n: {"AttributeName": n, "AttributeType": "S"}
        ddb.create_table(
            TableName=table, BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[s("pk"), s("gsi1pk"), s("gsi1sk")],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            GlobalSecondaryIndexes=[{
                "IndexName": "by_source",
                "KeySchema": [{"AttributeName": "gsi1pk", "KeyType": "HASH"},
                              {"AttributeName": "gsi1sk", "KeyType": "RANGE"}],
                "Projection": {"ProjectionType": "ALL"},
            }])
        ddb.get_waiter("table_exists").wait(TableName=table)
        s3.create_bucket(Bucket=lake)
        env["TIDEMARK_TABLE"] = table
        return config(f"{fresh(f'{work}/aws-{i}')}/sources.json", landing, lake)
    try:
        small_part("S3 + DynamoDB", lambda conf: [tm, "--backend", "aws", "--config", conf], aws, env)
    finally:
        # The stack is shared: leave nothing behind.
        for bucket in [landing] + [f"bench-lake-{tag}-{i}" for i in range(runs)]:
            try:
                for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                    keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                    if keys:
                        s3.delete_objects(Bucket=bucket, Delete={"Objects": keys})
                s3.delete_bucket(Bucket=bucket)
            except s3.exceptions.NoSuchBucket:
                pass
        for i in range(runs):
            try:
                ddb.delete_table(TableName=f"bench-{tag}-{i}")
            except ddb.exceptions.ResourceNotFoundException:
                pass

# ---------------------------------------------------------------- the table
results["load_end"] = os.getloadavg()[0]
print(f"\n{runs} run(s) each; load {results['load_start']:.2f} at the start, "
      f"{results['load_end']:.2f} at the end\n")
print("| measurement | median wall s | median CPU s | median peak RSS MB |")
print("|---|---:|---:|---:|")
for name in results["samples"]:
    print(f"| {name} | {median(name, 'wall'):.2f} | {median(name, 'cpu'):.2f} | "
          f"{median(name, 'rss_mb'):.0f} |")
for label in ("embedded", "S3 + DynamoDB"):
    if f"{label}: ingest (tidemark run)" not in results["samples"]:
        continue
    print(f"\n{label}, {n_small} objects of {small_rows} rows "
          f"({results['deep_checked'][label]} deep-checked by the default 1% sample):")
    for what in ("reconcile (default sample)", "reconcile, cheap tier alone (--sample 0)"):
        cpu = median(f"{label}: {what}", "cpu") / median(f"{label}: ingest (tidemark run)", "cpu")
        wall = median(f"{label}: {what}", "wall") / median(f"{label}: ingest (tidemark run)", "wall")
        print(f"  {what}: {cpu:.1%} of the ingest's CPU, {wall:.1%} of its wall time")
os.makedirs(f"{repo}/.local/bench-results", exist_ok=True)
stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
with open(f"{repo}/.local/bench-results/reconcile-{stamp}.json", "w") as f:
    json.dump(results, f, indent=1)
PY
