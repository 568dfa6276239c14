"""Partitioned writes, measured and verified: see run.sh (the one command) and README.md.

    python run.py --bench TIDEMARK_BENCH [--rows N] [--runs 3] [--partitions 1 10 100 1000]
                  [--formats csv jsonl] [--datasets orders events] [--engines ...] [--results DIR]
                  [--slow 60]

Per cell (dataset × format × N partitions) every engine writes the same input into N Hive
partitions (`OUTDIR/COL=VALUE/…`); each run is one whole child process, timed by bench/harness.py's
Runner (wall around spawn and wait, CPU = user + sys from wait4, peak RSS from /usr/bin/time
%M). One warm-up run per engine, whose output is verified, then BENCH_RUNS rounds with the
engines interleaved, the input read once (untimed) before each run; medians. An engine whose
warm-up took more than --slow CPU seconds (BENCH_SLOW, default 60: pyarrow at 1,000 partitions)
runs once. The results files are rewritten after every cell (marked PARTIAL until the last).

Engines (BENCH_ENGINES / --engines; default all):
- tidemark: `tidemark-bench partition --format F --compression none --schema S --by COL IN OUT`
  (rows routed to their partition as they are decoded, `tidemark::convert::convert_partitioned`,
  as ingest does it);
- tidemark-whole: `tidemark-bench convert … --threads 1 IN OUT/whole.parquet`, the same
  conversion unpartitioned (what the split costs on top);
- duckdb, pyarrow: bench/partition/engines.py (COPY … PARTITION_BY, dataset.write_dataset).

Datasets:
- orders: `tidemark-bench gen --rows N` (orders.csv, orders.jsonl) with the column
  `p = order_id % N` (a string) appended to every record;
- events: bench/partition/events.py (web/app events, 20 columns, NULLs, long quoted strings,
  offsets; partition column `tenant`, Zipf-skewed over exactly N values).
Inputs are made once into .local/bench-data/partition/ (keyed by rows, and for events by the
generator's hash), with each file's rows per partition value beside it (STEM.counts.json,
counted by the generator or here, not by an engine).

Verification, per cell, of every engine's warm-up output, read back by DuckDB
(`read_parquet('OUT/**/*.parquet', hive_partitioning=true, hive_types_autocast=false)`: the
partition column from the directory names, as a string):
- the number of partition directories is N, and the rows per partition value are the
  input's (STEM.counts.json); tidemark's own report says N partitions and the input's rows;
- each column's type is the schema's family (a decimal must be a DECIMAL: a double is not
  exact; a timestamp without time zone or in another unit is noted);
- value by value against tidemark's output: every column brought to one type (integers
  BIGINT, timestamps TIMESTAMPTZ with the session in UTC, i.e. UTC instants, decimals
  DECIMAL(38, s) exactly, the partition column VARCHAR), then `EXCEPT ALL` both ways over all
  columns must be empty (a multiset comparison: every row, with its partition, the same
  number of times).
A difference or an engine that fails is reported in the table and the JSON, printed at once,
and makes the run exit 1 at the end ("OUTPUTS DIFFER").
"""

import argparse
import datetime as dt
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


base = load("bench_harness", os.path.join(REPO, "bench", "harness.py"))
Runner, warm, loadavg, log = base.Runner, base.warm, base.loadavg, base.log

ENGINES = ["tidemark", "tidemark-whole", "duckdb", "pyarrow"]
PEERS = ["duckdb", "pyarrow"]
LABEL = {"tidemark": "tidemark", "tidemark-whole": "tidemark convert (unpartitioned)", "duckdb": "duckdb",
         "pyarrow": "pyarrow"}
MIB = 1024 * 1024
MB = 1e6


# ---------------------------------------------------------------------------------------
# Inputs


def file_hash(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:12]


def prepare_orders(args, root):
    """{(fmt, n): (path, counts)}, the schema file, the partition column, multiline."""
    data = os.path.join(root, f"orders-{args.rows}")
    if not os.path.exists(os.path.join(data, "orders.jsonl")):
        log(f"partition: generating {args.rows} orders into {data}")
        shutil.rmtree(data + ".tmp", ignore_errors=True)
        subprocess.run([args.bench, "gen", "--rows", str(args.rows), "--out", data + ".tmp"], check=True,
                       stdout=subprocess.DEVNULL)
        os.replace(data + ".tmp", data)
    with open(os.path.join(REPO, "bench", "schema.json")) as f:
        schema = json.load(f) + [{"name": "p", "type": "string", "nullable": False}]
    schema_file = os.path.join(data, "schema-p.json")
    with open(schema_file, "w") as f:
        json.dump(schema, f, indent=1)
    inputs = {}
    for fmt in args.formats:
        for n in args.partitions:
            path = os.path.join(data, f"orders-p{n}.{fmt}")
            counts_file = os.path.join(data, f"orders-p{n}.{fmt}.counts.json")
            if not os.path.exists(counts_file):
                log(f"partition: writing {path} (p = order_id % {n})")
                counts = add_modulus(os.path.join(data, f"orders.{fmt}"), path + ".tmp", fmt, n)
                os.replace(path + ".tmp", path)
                with open(counts_file, "w") as f:
                    json.dump(counts, f)
            with open(counts_file) as f:
                inputs[(fmt, n)] = (path, json.load(f))
    return inputs, schema_file, "p", False


def add_modulus(src, dst, fmt, n):
    """src's records with `p` = order_id % n (a string) appended; the rows per value."""
    counts = {}
    with open(src, encoding="utf-8", newline="") as fin, open(dst, "w", encoding="utf-8", newline="") as out:
        if fmt == "csv":
            import csv

            reader = csv.reader(fin)
            writer = csv.writer(out, lineterminator="\n")
            header = next(reader)
            at = header.index("order_id")
            writer.writerow(header + ["p"])
            for row in reader:
                p = str(int(row[at]) % n)
                counts[p] = counts.get(p, 0) + 1
                writer.writerow(row + [p])
        else:
            for line in fin:
                line = line.rstrip("\n")
                if not line:
                    continue
                p = str(json.loads(line)["order_id"] % n)
                counts[p] = counts.get(p, 0) + 1
                if not line.endswith("}"):
                    sys.exit(f"partition: {src}: a line that is not one JSON object")
                out.write(f'{line[:-1]},"p":"{p}"}}\n')
    return counts


def prepare_events(args, root):
    generator = os.path.join(HERE, "events.py")
    data = os.path.join(root, f"events-{args.rows}-{file_hash(generator)}")
    os.makedirs(data, exist_ok=True)
    missing = [n for n in args.partitions
               if not all(os.path.exists(os.path.join(data, f"events-p{n}.{x}")) for x in args.formats + ["counts.json"])]
    if missing:
        log(f"partition: generating {args.rows} events for N = {' '.join(map(str, missing))} into {data}")
        subprocess.run([sys.executable, generator, "--out", data, "--rows", str(args.rows), "--seed", "7", "--partitions",
                        *map(str, missing), "--formats", *args.formats], check=True, stdout=subprocess.DEVNULL)
    inputs = {}
    for n in args.partitions:
        # The generator's own count of its assignment, independent of any engine's reading.
        with open(os.path.join(data, f"events-p{n}.counts.json")) as f:
            counts = json.load(f)
        for fmt in args.formats:
            inputs[(fmt, n)] = (os.path.join(data, f"events-p{n}.{fmt}"), counts)
    return inputs, os.path.join(data, "events.schema.json"), "tenant", True


# ---------------------------------------------------------------------------------------
# Verification


def duck_canonical(ty):
    if ty.startswith("decimal("):
        return f"DECIMAL(38,{ty[len('decimal('):-1].split(',')[1]})"
    return {"int32": "BIGINT", "int64": "BIGINT", "float64": "DOUBLE", "string": "VARCHAR", "bool": "BOOLEAN",
            "date": "DATE", "timestamp": "TIMESTAMPTZ"}[ty]


def type_check(ty, got, ref):
    """(problem, note) for an output column of DuckDB type `got` (tidemark's: `ref`)."""
    g = got.upper()
    if ty in ("int32", "int64"):
        ok = g in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
                   "UBIGINT")
    elif ty == "float64":
        ok = g in ("DOUBLE", "FLOAT")
    elif ty == "string":
        ok = g == "VARCHAR"
    elif ty == "bool":
        ok = g == "BOOLEAN"
    elif ty == "date":
        ok = g == "DATE"
    elif ty == "timestamp":
        if not g.startswith("TIMESTAMP"):
            return f"{got}, not a timestamp", None
        return None, (None if g == "TIMESTAMP WITH TIME ZONE" else f"{got}")
    else:
        scale = ty[len("decimal("):-1].split(",")[1].strip()
        m = re.fullmatch(r"DECIMAL\((\d+),\s*(\d+)\)", g)
        if not m:
            return f"{got} for {ty}: not exact", None
        if m.group(2) != scale:
            return f"{got} for {ty}: another scale", None
        return None, (None if ref is None or g == ref.upper() else got)
    if not ok:
        return f"{got}, not {ty}", None
    return None, (None if ref is None or g == ref.upper() else got)


def scan(engine, out):
    if engine == "tidemark-whole":
        return f"read_parquet('{os.path.join(out, 'whole.parquet')}')"
    return f"read_parquet('{out}/**/*.parquet', hive_partitioning = true, hive_types_autocast = false)"


def verify(con, schema, column, n, counts, outputs, stats):
    """{engine: (problems, notes)} of every engine's output in `outputs` (engine: OUTDIR)."""
    names = [c["name"] for c in schema]
    result = {}
    types = {}
    for engine, out in outputs.items():
        problems, notes = [], {}
        try:
            described = dict((r[0], r[1]) for r in con.execute(f"DESCRIBE SELECT * FROM {scan(engine, out)}").fetchall())
        except Exception as e:  # noqa: BLE001: unreadable output
            result[engine] = ([f"cannot read the output back: {e}"], {})
            continue
        types[engine] = described
        missing = [x for x in names if x not in described]
        if missing:
            problems.append(f"no column {', '.join(missing)}")
        extra = [x for x in described if x not in names]
        if extra:
            problems.append(f"columns not in the schema: {', '.join(extra)}")
        for c in schema:
            if c["name"] in described and not (c["name"] == column and engine != "tidemark-whole"):
                ref = types.get("tidemark", {}).get(c["name"])
                problem, note = type_check(c["type"], described[c["name"]], ref)
                if problem:
                    problems.append(f"{c['name']}: {problem}")
                if note:
                    notes[c["name"]] = note
        if engine != "tidemark-whole":
            dirs = [d for d in os.listdir(out) if os.path.isdir(os.path.join(out, d))]
            named = [d for d in dirs if d.startswith(column + "=")]
            if len(named) != n or len(dirs) != len(named):
                problems.append(f"{len(named)} partition directories (and {len(dirs) - len(named)} others), not {n}")
        if not missing:
            got = dict(con.execute(f"SELECT {column}, count(*) FROM {scan(engine, out)} GROUP BY ALL").fetchall())
            if got != counts:
                wrong = sorted(set(got) ^ set(counts)) or sorted(k for k in counts if got.get(k) != counts[k])
                problems.append(f"rows per partition differ from the input's ({len(got)} values, "
                                f"{sum(got.values())} rows; first different: {wrong[:3]})")
        if engine == "tidemark" and stats is not None:
            if stats.get("partitions") != n or stats.get("rows") != sum(counts.values()):
                problems.append(f"tidemark reports {stats.get('partitions')} partitions and {stats.get('rows')} rows")
        result[engine] = (problems, notes)
    # Value by value against tidemark's output.
    if "tidemark" not in outputs or result["tidemark"][0]:
        for engine in outputs:
            if engine != "tidemark":
                result[engine][1]["_not_compared"] = "tidemark's output is missing or wrong"
    else:
        canon = ", ".join(f"CAST({base_ident(c['name'])} AS {duck_canonical(c['type'])}) AS {base_ident(c['name'])}"
                          for c in schema)
        ref = f"SELECT {canon} FROM {scan('tidemark', outputs['tidemark'])}"
        for engine, out in outputs.items():
            if engine == "tidemark" or result[engine][0]:
                continue
            mine = f"SELECT {canon} FROM {scan(engine, out)}"
            for label, a, b in (("not in tidemark's", mine, ref), ("of tidemark's missing", ref, mine)):
                t0 = time.perf_counter()
                diff = con.execute(f"SELECT count(*) FROM ({a} EXCEPT ALL {b})").fetchone()[0]
                if diff:
                    # Which columns: those whose values alone differ as multisets.
                    cols = [c["name"] for c in schema if con.execute(
                        f"SELECT count(*) FROM (SELECT {base_ident(c['name'])} FROM ({a}) EXCEPT ALL "
                        f"SELECT {base_ident(c['name'])} FROM ({b}))").fetchone()[0]]
                    sample = con.execute(f"{a} EXCEPT ALL {b} LIMIT 2").fetchall()
                    show = "; ".join(repr(r)[:300] for r in sample)
                    result[engine][0].append(f"{diff} rows {label}, in columns {', '.join(cols) or '(rows only)'} "
                                             f"(e.g. {show})")
                log(f"    {engine}: EXCEPT ALL, rows {label}: {diff} ({time.perf_counter() - t0:.1f} s)")
    return result


def base_ident(name):
    return '"' + name.replace('"', '""') + '"'


def tree(out):
    """(files, bytes) under out."""
    files = size = 0
    for d, _, fs in os.walk(out):
        for f in fs:
            files += 1
            size += os.path.getsize(os.path.join(d, f))
    return files, size


# ---------------------------------------------------------------------------------------
# Report


def machine():
    model = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) / 1024 / 1024
    return {"nproc": os.cpu_count(), "model": model, "mem_gib": round(mem, 1), "kernel": platform.release()}


def commit():
    git = lambda *a: subprocess.run(["git", "--no-optional-locks", "-C", REPO, *a], capture_output=True,  # noqa: E731
                                    text=True, check=True).stdout
    try:
        head = git("rev-parse", "--short", "HEAD").strip()
        changed = git("status", "--porcelain").splitlines()
    except (OSError, subprocess.CalledProcessError):
        return {"head": "unknown", "dirty": None, "changed_files": None}
    return {"head": head, "dirty": bool(changed), "changed_files": len(changed),
            "changed_under_shared": sum(1 for l in changed if l[3:].startswith("shared/"))}


def fmt_s(x):
    return f"{x:.3f}" if x < 10 else f"{x:.2f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True, help="the tidemark-bench binary")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--slow", type=float, default=60.0,
                    help="an engine whose warm-up takes more CPU seconds than this runs once per cell")
    ap.add_argument("--partitions", type=int, nargs="+", default=[1, 10, 100, 1000])
    ap.add_argument("--formats", nargs="+", default=["csv", "jsonl"], choices=["csv", "jsonl"])
    ap.add_argument("--datasets", nargs="+", default=["orders", "events"], choices=["orders", "events"])
    ap.add_argument("--engines", nargs="+", default=ENGINES, choices=ENGINES)
    ap.add_argument("--results", default=os.path.join(REPO, ".local", "bench-results"))
    ap.add_argument("--work", default=os.path.join(REPO, ".local", "bench-partition"))
    ap.add_argument("--data", default=os.path.join(REPO, ".local", "bench-data", "partition"))
    ap.add_argument("--cpu", default=os.environ.get("BENCH_CPU", ""),
                    help="the CPU every engine is pinned to (taskset -c); default the last one; none: no pinning")
    args = ap.parse_args()
    args.bench = os.path.abspath(args.bench)
    if not os.access(args.bench, os.X_OK):
        sys.exit(f"partition: no tidemark-bench at {args.bench}")
    if "tidemark" not in args.engines:
        sys.exit("partition: tidemark must be among the engines (its output is the reference)")
    engines = [e for e in ENGINES if e in args.engines]
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.results, exist_ok=True)
    os.makedirs(args.data, exist_ok=True)
    import duckdb
    import pyarrow

    versions = {"duckdb": duckdb.__version__, "pyarrow": pyarrow.__version__, "python": platform.python_version()}
    rss_mode = os.environ.get("BENCH_RSS") or ("time" if os.access("/usr/bin/time", os.X_OK) else "wait4")

    # Every engine confined to one CPU: `tidemark-bench partition --threads 1`, and the peers,
    # already on one thread by their own settings, pinned alike.
    cpu = None
    if args.cpu != "none":
        cpu = int(args.cpu) if args.cpu else sorted(os.sched_getaffinity(0))[-1]
    pin = ["taskset", "-c", str(cpu)] if cpu is not None else []

    prepared = {}
    for name in args.datasets:
        prepared[name] = (prepare_orders if name == "orders" else prepare_events)(args, args.data)

    started = dt.datetime.now(dt.timezone.utc)
    load_before = loadavg()
    log(f"partition: load before {load_before}; rows {args.rows}, runs {args.runs}, N {args.partitions}, "
        f"formats {args.formats}, datasets {args.datasets}, engines {engines}")
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    samples, medians, checks, cell_load = [], [], {}, {}
    python = sys.executable
    engines_py = os.path.join(HERE, "engines.py")
    code = commit()  # the tree the binary was built from, as the run began
    cells_total = len(args.datasets) * len(args.formats) * len(args.partitions)

    def write_report(done):
        """The results so far into RESULTS/partition-STAMP.md and .json: rewritten after every cell, so that
        a run cut short leaves what it measured."""
        finished = dt.datetime.now(dt.timezone.utc)
        load_after = loadavg()
        mach = machine()
        lines = [
            f"Partitioned writes, {started:%Y-%m-%d %H:%M} – {finished:%H:%M} UTC. Load average (1, 5, 15 min) "
            f"before {load_before}, after {load_after}."
            + ("" if done == cells_total else f" PARTIAL: {done} of {cells_total} cells measured so far."),
            f"Machine: {mach['nproc']} CPUs ({mach['model']}), {mach['mem_gib']:.0f} GiB RAM, Linux {mach['kernel']}. "
            f"Code: commit {code['head']}" + (f", tree dirty ({code['changed_files']} changed files, "
                                              f"{code['changed_under_shared']} under shared/)" if code["dirty"] else ", tree clean")
            + f"; binary {args.bench}.",
            f"Parameters: {args.rows:,} rows; N = {', '.join(map(str, args.partitions))}; formats {', '.join(args.formats)}; "
            f"datasets {', '.join(args.datasets)}; {args.runs} measured runs per engine and cell after one warm-up "
            f"(one when the warm-up took over {args.slow:g} s of CPU), "
            f"engines interleaved per round, input read (untimed) before each run; medians; peak RSS via "
            f"{'/usr/bin/time %M' if rss_mode == 'time' else 'os.wait4'}; "
            + (f"every engine pinned to CPU {cpu} (taskset)" if cpu is not None else "no CPU pinning (BENCH_CPU=none)")
            + ". Versions: "
            + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".",
            "",
            "| dataset | format | N | engine | wall s | CPU s | peer CPU / tidemark CPU | peak RSS MiB | files | output MB | output |",
            "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        ratios = []
        for dataset in args.datasets:
            for fmt in args.formats:
                for n in args.partitions:
                    cell = (dataset, fmt, n)
                    rows = [m for m in medians if (m["dataset"], m["format"], m["partitions"]) == cell]
                    ours = next((m for m in rows if m["engine"] == "tidemark"), None)
                    for engine in engines:
                        m = next((x for x in rows if x["engine"] == engine), None)
                        problems, notes = checks.get(cell, {}).get(engine, ([], {}))
                        notes = dict(notes)
                        alone = notes.pop("_not_compared", None)
                        if problems:
                            check = "DIFFERS: " + "; ".join(problems)[:400]
                        elif engine == "tidemark":
                            check = "reference"
                        elif alone:
                            check = f"partitions and rows per partition right; values not compared ({alone})"
                        else:
                            check = "equal to tidemark's"
                        if notes and not problems:
                            check += " (types: " + ", ".join(f"{k} {v}" for k, v in notes.items()) + ")"
                        if m is None:
                            lines.append(f"| {dataset} | {fmt} | {n} | {LABEL[engine]} | – | – | – | – | – | – | {check} |")
                            continue
                        ratio = "–" if engine == "tidemark" or not ours else f"{m['cpu'] / ours['cpu']:.2f}"
                        lines.append(f"| {dataset} | {fmt} | {n} | {LABEL[engine]} | {fmt_s(m['wall'])} | {fmt_s(m['cpu'])} | "
                                     f"{ratio} | {m['rss_mib']:.0f} | {m['files']} | {m['output_bytes'] / MB:.1f} | {check} |")
                    if ours:
                        peers = [m for m in rows if m["engine"] in PEERS]
                        if peers:
                            ratios.append(f"- {dataset} {fmt} N={n}: tidemark {ours['cpu']:.2f} s CPU; " + ", ".join(
                                f"{m['engine']} {m['cpu'] / ours['cpu']:.2f}×" for m in peers))
        lines += ["", "CPU ratio per cell, peer CPU / tidemark CPU (above 1: tidemark uses less):", ""] + ratios
        lines += [
            "",
            "CPU s = median user + sys of the whole process; wall s = median from spawn to exit; peak RSS = median of "
            "the runs' maxima (MiB); files and output MB (10^6 bytes) of the last run. One thread per engine "
            "(`tidemark-bench partition --threads 1`; tidemark-bench convert --threads 1; DuckDB threads=1; "
            "pyarrow set_cpu_count(1), use_threads=False; every engine pinned to one CPU), "
            "zstd level 3. "
            "tidemark = `tidemark-bench partition` (rows routed to their partition as decoded, each partition "
            "encoded once, into OUT/COL=VALUE/data.parquet); tidemark "
            "convert (unpartitioned) = the same conversion into one file; duckdb = COPY (SELECT * FROM read_csv / "
            "read_json with explicit columns) TO … (PARTITION_BY); pyarrow = csv.read_csv / json.read_json with the "
            "explicit schema + dataset.write_dataset(partitioning_flavor='hive').",
            "output = read back by DuckDB with hive_partitioning: N partition directories, rows per partition equal to "
            "the input's, and every row of every column equal to tidemark's (EXCEPT ALL both ways; timestamps as UTC "
            "instants, decimals exactly, the partition column as a string).",
        ]
        report = "\n".join(lines) + "\n"
        stamp = started.strftime("%Y%m%d-%H%M%S")
        md = os.path.join(args.results, f"partition-{stamp}.md")
        with open(md, "w") as f:
            f.write(report)
        with open(os.path.join(args.results, f"partition-{stamp}.json"), "w") as f:
            json.dump({
                "started": started.isoformat(), "finished": finished.isoformat(), "commit": code, "machine": mach,
                "load": {"before": load_before, "after": load_after,
                         "cells": {f"{d}|{fm}|{n}": v for (d, fm, n), v in cell_load.items()}},
                "parameters": {"rows": args.rows, "runs": args.runs, "slow_cpu_s": args.slow, "partitions": args.partitions,
                               "formats": args.formats, "datasets": args.datasets, "engines": engines,
                               "bench": args.bench, "rss": rss_mode, "pinned_cpu": cpu},
                "versions": versions,
                "inputs": {f"{d}|{fm}|{n}": {"path": p, "bytes": os.path.getsize(p), "rows": sum(c.values()),
                                              "partition_rows_max": max(c.values()), "partition_rows_min": min(c.values())}
                           for d, (inp, _, _, _) in prepared.items() for (fm, n), (p, c) in inp.items()},
                "samples": samples, "medians": medians,
                "verification": {f"{d}|{fm}|{n}": {e: {"problems": p, "notes": nt} for e, (p, nt) in r.items()}
                                 for (d, fm, n), r in checks.items()},
            }, f, indent=1, default=str)
        return md

    with Runner(rss_mode) as runner:
        for dataset in args.datasets:
            inputs, schema_file, column, multiline = prepared[dataset]
            with open(schema_file) as f:
                schema = json.load(f)
            for fmt in args.formats:
                for n in args.partitions:
                    src, counts = inputs[(fmt, n)]
                    cell = (dataset, fmt, n)
                    cell_load[cell] = loadavg()
                    log(f"partition: {dataset} {fmt} N={n} ({os.path.getsize(src) / MB:.0f} MB, "
                        f"{sum(counts.values())} rows), load {cell_load[cell]}")

                    def command(engine, out):
                        return pin + engine_command(engine, out)

                    def engine_command(engine, out):
                        if engine == "tidemark":
                            return [args.bench, "partition", "--format", fmt, "--compression", "none", "--schema",
                                    schema_file, "--threads", "1", "--by", column, src, out]
                        if engine == "tidemark-whole":
                            return [args.bench, "convert", "--format", fmt, "--compression", "none", "--schema",
                                    schema_file, "--threads", "1", src, os.path.join(out, "whole.parquet")]
                        return [python, engines_py, engine, fmt, src, out, schema_file, column, str(n)] + (
                            ["multiline"] if multiline else [])

                    def run_once(engine, run):
                        out = os.path.join(args.work, "out", engine)
                        shutil.rmtree(out, ignore_errors=True)
                        if engine == "tidemark-whole":
                            os.makedirs(out)
                        warm(src)
                        r = runner.spawn(command(engine, out))
                        files, size = tree(out)
                        sample = {"dataset": dataset, "format": fmt, "partitions": n, "engine": engine, "run": run,
                                  "wall": r["wall"], "cpu": r["cpu"], "rss_mib": r["rss"] / MIB, "files": files,
                                  "output_bytes": size}
                        if engine.startswith("tidemark"):
                            try:
                                sample["tidemark"] = json.loads(r["stdout"])
                            except ValueError:
                                pass
                        samples.append(sample)
                        return sample, out

                    # Warm-up, verified.
                    outputs, stats, failed, warm_cpu = {}, None, {}, {}
                    for engine in engines:
                        try:
                            s, out = run_once(engine, "warm-up")
                        except RuntimeError as e:
                            failed[engine] = str(e)[-1500:]
                            log(f"  {engine}: FAILED: {failed[engine]}")
                            continue
                        log(f"  warm-up {engine:15} {s['wall']:.2f} s wall, {s['cpu']:.2f} s CPU, "
                            f"{s['rss_mib']:.0f} MiB, {s['files']} files")
                        outputs[engine] = out
                        warm_cpu[engine] = s["cpu"]
                        if engine == "tidemark":
                            stats = s.get("tidemark")
                    t0 = time.perf_counter()
                    result = verify(con, schema, column, n, counts, outputs, stats)
                    for engine, why in failed.items():
                        result[engine] = ([f"failed: {why}"], {})
                    for engine, (problems, notes) in result.items():
                        if problems:
                            log(f"  !!! {dataset} {fmt} N={n} {engine}: OUTPUT DIFFERS: " + " | ".join(problems))
                    log(f"  verified in {time.perf_counter() - t0:.1f} s: " + ", ".join(
                        f"{e} {'ok' if not p else 'DIFFERS'}" for e, (p, _) in result.items()))
                    checks[cell] = result
                    # Measured rounds, engines interleaved.
                    measured = [e for e in engines if e not in failed]
                    runs = {e: [] for e in measured}
                    # An engine whose warm-up took more than --slow seconds of CPU runs once (its
                    # ratio is far from 1 either way; three runs of pyarrow at N=1,000 take 10 min).
                    slow = {e for e in measured if warm_cpu.get(e, 0) > args.slow}
                    for i in range(args.runs):
                        for engine in list(measured):
                            if i > 0 and engine in slow:
                                continue
                            try:
                                runs[engine].append(run_once(engine, i + 1)[0])
                            except RuntimeError as e:
                                why = f"failed in run {i + 1}: {str(e)[-1500:]}"
                                log(f"  !!! {dataset} {fmt} N={n} {engine}: {why}")
                                result.setdefault(engine, ([], {}))[0].append(why)
                                measured.remove(engine)
                    for engine in runs:
                        s = runs[engine]
                        if not s:
                            continue
                        medians.append({
                            "dataset": dataset, "format": fmt, "partitions": n, "engine": engine,
                            "wall": statistics.median(x["wall"] for x in s),
                            "cpu": statistics.median(x["cpu"] for x in s),
                            "rss_mib": statistics.median(x["rss_mib"] for x in s),
                            "rss_mib_max": max(x["rss_mib"] for x in s),
                            "files": s[-1]["files"], "output_bytes": s[-1]["output_bytes"],
                            "input_bytes": os.path.getsize(src), "rows": sum(counts.values()),
                        })
                    ours = next((m for m in medians if (m["dataset"], m["format"], m["partitions"]) == cell
                                 and m["engine"] == "tidemark"), None)
                    if ours:
                        log("  CPU, peer / tidemark: " + ", ".join(
                            f"{m['engine']} {m['cpu'] / ours['cpu']:.2f}×" for m in medians
                            if (m["dataset"], m["format"], m["partitions"]) == cell and m["engine"] != "tidemark"))
                    write_report(done=len(checks))
    md = write_report(done=len(checks))
    print(open(md).read())
    log(f"partition: results in {md} and .json")
    bad = [(cell, e) for cell, r in checks.items() for e, (p, _) in r.items() if p]
    if bad:
        log("partition: OUTPUTS DIFFER (or an engine failed): " + ", ".join(f"{'/'.join(map(str, c))} {e}" for c, e in bad))
        sys.exit(1)


if __name__ == "__main__":
    main()
