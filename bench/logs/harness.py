#!/usr/bin/env python3
"""Times the line-log benchmark's engines (bench/logs/run.sh drives it): tidemark's preset
against DuckDB and pyarrow, one thread each, pinned to one CPU, zstd 3 Parquet.

    harness.py --bin TIDEMARK_BENCH --python PEERS_PYTHON --data DIR --out RESULTS_DIR
               [--runs 3] [--cpu K] [--datasets alb,s3_access]

Per dataset (DIR/<dataset>.log and DIR/<dataset>.preset.json) and engine: one warm-up, then
--runs measured runs, interleaved; wall, CPU (user + sys) and peak RSS from /usr/bin/time;
medians. Every engine's row count is checked against the file's line count (less the lines
each engine is documented to drop). Writes logs-<UTC time>.md and .json (commit, parameters,
every sample) into --out and prints the table.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))

# Which peers read which dataset: read_csv cannot split S3 access logs' bracketed time.
PEERS = {"alb": ["duckdb-csv", "pyarrow-csv", "duckdb-regex"], "s3_access": ["duckdb-regex"]}


def timed(cmd, cpu):
    if cpu != "none":
        cmd = ["taskset", "-c", cpu] + cmd
    with tempfile.NamedTemporaryFile("r") as t:
        p = subprocess.run(["/usr/bin/time", "-f", "%e %U %S %M", "-o", t.name] + cmd,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {p.stderr[-2000:]}")
        wall, user, sys_, rss = t.read().split()[-4:]
    return {"wall": float(wall), "cpu": float(user) + float(sys_), "rss_mb": int(rss) / 1024,
            "out": p.stdout}


def rows_of(engine, out):
    if engine == "tidemark":
        return json.loads(out)["rows"]
    return json.loads(out.strip().splitlines()[-1])["rows"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cpu", default=str(os.cpu_count() - 1))
    ap.add_argument("--datasets", default="alb,s3_access")
    args = ap.parse_args()
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip() != ""
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {"commit": commit + ("+changes" if dirty else ""), "started": started.isoformat(),
               "runs": args.runs, "cpu": args.cpu, "load": os.getloadavg(), "datasets": {}}
    out_parquet = os.path.join(tempfile.gettempdir(), "bench-logs-out.parquet")
    for dataset in args.datasets.split(","):
        log = os.path.join(args.data, f"{dataset}.log")
        lines = sum(1 for _ in open(log, "rb"))
        engines = {"tidemark": [args.bin, "convert", "--source",
                                os.path.join(args.data, f"{dataset}.preset.json"), log, out_parquet]}
        for peer in PEERS[dataset]:
            engines[peer] = [args.python, os.path.join(HERE, "peers.py"), peer, dataset, log, out_parquet]
        samples = {e: [] for e in engines}
        rows = {}
        for run in range(args.runs + 1):
            for engine, cmd in engines.items():
                s = timed(cmd, args.cpu)
                rows[engine] = rows_of(engine, s.pop("out"))
                if run > 0:
                    samples[engine].append(s)
        med = {e: {k: statistics.median(x[k] for x in v) for k in ("wall", "cpu", "rss_mb")}
               for e, v in samples.items()}
        results["datasets"][dataset] = {"lines": lines, "bytes": os.path.getsize(log), "rows": rows,
                                        "samples": samples, "medians": med}
    finished = datetime.datetime.now(datetime.timezone.utc)
    results["finished"] = finished.isoformat()
    stamp = started.strftime("%Y%m%d-%H%M%S")
    os.makedirs(args.out, exist_ok=True)
    md = [f"# Line logs, {started:%Y-%m-%d %H:%M}–{finished:%H:%M} UTC, commit {results['commit']}", "",
          f"One thread each, pinned to CPU {args.cpu}; {args.runs} runs after a warm-up, medians; "
          f"load average at the start {results['load'][0]:.2f}. × = the engine's median CPU over "
          "tidemark's (above 1: tidemark uses less).", ""]
    for dataset, d in results["datasets"].items():
        md += [f"## {dataset}: {d['lines']:,} lines, {d['bytes'] / 1e6:.1f} MB", "",
               "| engine | rows | wall s | CPU s | × CPU | peak RSS MB |", "|---|---:|---:|---:|---:|---:|"]
        t = d["medians"]["tidemark"]["cpu"]
        for e, m in d["medians"].items():
            md.append(f"| {e} | {d['rows'][e]:,} | {m['wall']:.2f} | {m['cpu']:.2f} | "
                      f"{m['cpu'] / t:.2f} | {m['rss_mb']:.0f} |")
        md.append("")
    text = "\n".join(md)
    with open(os.path.join(args.out, f"logs-{stamp}.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, f"logs-{stamp}.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
