"""The partitioned writer's budget, measured: the spill plain against LZ4, and the buffer of rows
that wait, on the inputs of bench/partition/run.sh (made by it first).

    .local/venv-bench/bin/python bench/partition/budget.py --bench TIDEMARK_BENCH [--runs 5] [--cpu 1]
        [--out FILE]

Each setting runs `tidemark-bench partition --threads 1` (BENCH_SPILL=plain|lz4, BENCH_BUFFER_MIB)
on the same input, settings interleaved per round, pinned to one CPU, under /usr/bin/time: CPU
(user + sys), peak RSS, and the writer's own report (rows spilled, spill bytes). Medians. Every
setting's output is checked against the first's with pyarrow (run it with .local/venv-bench's
python): the same files, each the same table (rows, order, values); the bytes may differ a
little (rows read back from the spill reach the encoder in other batches, so pages end
elsewhere).
Writes a Markdown table with the commit, the machine's load and every sample to --out.
"""

import argparse
import datetime as dt
import glob
import importlib.util
import json
import os
import shutil
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(REPO, ".local", "bench-data", "partition")
sys.dont_write_bytecode = True
_spec = importlib.util.spec_from_file_location("bench_harness", os.path.join(REPO, "bench", "harness.py"))
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)

SETTINGS = [
    ("plain, 16 MiB", {"BENCH_SPILL": "plain", "BENCH_BUFFER_MIB": "16"}),
    ("lz4, 16 MiB", {"BENCH_SPILL": "lz4", "BENCH_BUFFER_MIB": "16"}),
    ("plain, 48 MiB", {"BENCH_SPILL": "plain", "BENCH_BUFFER_MIB": "48"}),
]


def inputs():
    """(label, file, schema, column) of the cells measured: orders CSV into 100 partitions (rows
    spread evenly) and events JSON Lines into 10 (Zipf-skewed)."""
    orders = os.path.join(DATA, "orders-1000000")
    events = sorted(glob.glob(os.path.join(DATA, "events-1000000-*")))
    if not os.path.isdir(orders) or not events:
        sys.exit(f"budget: no inputs under {DATA}: run bench/partition/run.sh first")
    return [
        ("orders csv, N=100", os.path.join(orders, "orders-p100.csv"), os.path.join(orders, "schema-p.json"),
         "p", "csv"),
        ("events jsonl, N=10", os.path.join(events[-1], "events-p10.jsonl"),
         os.path.join(events[-1], "events.schema.json"), "tenant", "jsonl"),
    ]


def tables_of(out):
    """Each file under out (relative path) and its contents."""
    import pyarrow.parquet as pq

    return {os.path.relpath(os.path.join(d, f), out): pq.read_table(os.path.join(d, f))
            for d, _, fs in os.walk(out) for f in fs}


def same(a, b):
    return a.keys() == b.keys() and all(a[k].equals(b[k]) for k in a)


def measure(a, runner, base_env, work, samples, label, src, schema, column, fmt):
    """The table rows of one cell: every setting, a warm-up (outputs checked) and a.runs rounds."""
    if not os.path.exists(src):
        sys.exit(f"budget: no {src}: run bench/partition/run.sh first")
    reference = None
    runs = {name: [] for name, _ in SETTINGS}
    out = os.path.join(work, "out")
    for run in range(a.runs + 1):  # the first round is a warm-up
        for name, env in SETTINGS:
            shutil.rmtree(out, ignore_errors=True)
            harness.warm(src)
            runner.env = {**base_env, **env}
            r = runner.spawn(["taskset", "-c", a.cpu, a.bench, "partition", "--format", fmt, "--compression",
                              "none", "--schema", schema, "--threads", "1", "--by", column, src, out])
            report = json.loads(r["stdout"].decode().strip().splitlines()[-1])
            if run == 0:  # the warm-up's outputs, checked
                tables = tables_of(out)
                if reference is None:
                    reference = tables
                elif not same(tables, reference):
                    sys.exit(f"budget: {label}, {name}: the output differs from the first setting's")
            s = {"cell": label, "setting": name, "run": run, "cpu": r["cpu"], "rss_mib": r["rss"] / 2**20,
                 "report": report}
            samples.append(s)
            harness.log(f"{label} {name} run {run}: {s['cpu']:.2f} s CPU, {s['rss_mib']:.0f} MiB, spilled "
                        f"{report.get('spilled')} rows, {report.get('spill_bytes', 0) / 1e6:.0f} MB")
            if run > 0:
                runs[name].append(s)
    base = statistics.median(x["cpu"] for x in runs[SETTINGS[0][0]])
    rows = []
    for name, _ in SETTINGS:
        r = runs[name]
        cpu = statistics.median(x["cpu"] for x in r)
        rows.append(f"| {label} | {name} | {cpu:.3f} | {cpu / base:.2f} | "
                    f"{statistics.median(x['rss_mib'] for x in r):.0f} | {r[-1]['report'].get('spilled'):,} | "
                    f"{r[-1]['report'].get('spill_bytes', 0) / 1e6:.0f} |")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cpu", default="1")
    ap.add_argument("--out", default=os.path.join(REPO, ".local", "bench-results", "partition-budget.md"))
    a = ap.parse_args()
    work = os.path.join(REPO, ".local", "bench-partition", "budget")
    code = harness.source_state()
    started = dt.datetime.now(dt.timezone.utc)
    load_before = harness.loadavg()
    samples = []
    lines = []
    runner = harness.Runner("time")
    base_env = runner.env
    with runner:
        for cell in inputs():
            lines += measure(a, runner, base_env, work, samples, *cell)
    finished = dt.datetime.now(dt.timezone.utc)

    text = "\n".join([
        f"# The partitioned writer's budget, {started:%Y-%m-%d %H:%M}–{finished:%H:%M} UTC",
        "",
        f"{code[0].upper()}{code[1:]}; binary {a.bench}; pinned to CPU {a.cpu}; load average before {load_before}, "
        f"after {harness.loadavg()}; {a.runs} rounds after a warm-up, settings interleaved, medians. "
        "Reproduce: `.local/venv-bench/bin/python bench/partition/budget.py --bench TIDEMARK_BENCH`. "
        "Every setting's output is the same tables as the first's (pyarrow `Table.equals`, file by file).",
        "",
        "| cell | spill, buffer | CPU s | × plain 16 MiB | peak RSS MiB | rows spilled | spill MB |",
        "|---|---|---:|---:|---:|---:|---:|",
        *lines,
        "",
        "## Samples",
        "",
        "```",
        *(json.dumps(s) for s in samples),
        "```",
        "",
    ])
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
