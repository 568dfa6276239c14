"""Runs every engine on every case, times whole processes, checks the outputs, prints the
table. Started by bench/run.sh, which prepares the venv, the binary and the dataset.

    python harness.py --bin TIDEMARK_BENCH --data DIR --work DIR --results DIR

Environment: BENCH_RUNS (measured runs per engine and case, default 5), BENCH_ENGINES
(comma list, default all), BENCH_CASES (comma list of csv,csv.gz,jsonl,jsonl.gz),
BENCH_COLD_RUNS (start-up runs, default 20), BENCH_RSS (time|wait4: how peak RSS is
taken; default time when /usr/bin/time exists).

Method:
- Each measurement is one whole child process (interpreter start and imports included
  for the Python engines), started with its wall time taken around fork/exec/wait.
- Peak RSS is the child's maximum resident set: `/usr/bin/time -f %M` (the engine
  process itself), else the rusage that os.wait4 returns for that one child. CPU time
  (user + sys) comes from os.wait4; CPU > wall would mean the engine used more than one
  thread.
- One unmeasured warm-up run per engine and case (page cache, .pyc files), whose output
  is verified; then BENCH_RUNS rounds, each running every engine once per case
  (interleaved, so that load from other processes on the machine falls on all engines
  alike rather than on whichever ran during a burst).
- Verification reads every engine's Parquet back with pyarrow: row count, NULL counts,
  exact sums of the integer columns, math.fsum (the correctly rounded sum) of the float
  columns, the sum of the timestamps in microseconds, total UTF-8 bytes of every string
  column; they must equal tidemark's and the generator's expected.json.
"""

import argparse
import datetime as dt
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))

CASES = {
    # name: (format, compression, file)
    "csv": ("csv", "none", "orders.csv"),
    "csv.gz": ("csv", "gzip", "orders.csv.gz"),
    "jsonl": ("jsonl", "none", "orders.jsonl"),
    "jsonl.gz": ("jsonl", "gzip", "orders.jsonl.gz"),
}
ENGINES = ["tidemark", "pyarrow", "pyarrow-stream", "duckdb", "polars"]
PEERS = ["pyarrow", "pyarrow-stream", "duckdb", "polars"]
MODULES = {"pyarrow": "pyarrow", "pyarrow-stream": "pyarrow", "duckdb": "duckdb", "polars": "polars"}
FLOORS = ["floor: bench read", "floor: cat/zcat"]
MB = 1e6


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# The fallback for peak RSS without GNU time. os.wait4 on a child started by this (large)
# process is no good: Linux carries the high-water mark of the memory the child had
# before exec (this process's, with vfork / posix_spawn or fork) into the child's
# ru_maxrss. So a small interpreter forks the engine and reports wait4 of that
# grandchild (floor: the wrapper's own few MB, carried over the same way).
RSS_WRAPPER = """
import os, sys
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(str(ru.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def machine():
    model = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) / 1024 / 1024
    return f"{os.cpu_count()} CPUs ({model}), {mem:.0f} GiB RAM, Linux {platform.release()}"


def source_state():
    """The commit measured, and whether the converter's sources had uncommitted changes."""
    try:
        git = lambda *a: subprocess.run(["git", "-C", os.path.dirname(HERE), *a], capture_output=True,
                                         text=True, check=True).stdout.strip()
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "shared", "Cargo.lock")
        return f"commit {head}" + (f" with uncommitted changes in {len(dirty.splitlines())} files under shared/" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class Runner:
    """Spawns one child at a time and measures it."""

    def __init__(self, rss_mode):
        self.rss_mode = rss_mode
        self.env = dict(os.environ, POLARS_MAX_THREADS="1", OMP_NUM_THREADS="1")

    def __enter__(self):
        self.stdout = tempfile.TemporaryFile()
        self.stderr = tempfile.TemporaryFile()
        self.timefile = tempfile.NamedTemporaryFile("r", suffix=".time")
        self.devnull = open(os.devnull, "wb")
        return self

    def __exit__(self, *exc):
        self.stdout.close()
        self.stderr.close()
        self.timefile.close()
        self.devnull.close()

    def spawn(self, cmd, discard=False):
        """{wall, cpu, rss, stdout} of one run of cmd: wall seconds from spawn to exit,
        user + sys seconds and peak RSS bytes of the child. discard: stdout to /dev/null."""
        for f in (self.stdout, self.stderr):
            f.seek(0)
            f.truncate()
        full = cmd
        if self.rss_mode == "time":
            full = ["/usr/bin/time", "-f", "%M", "-o", self.timefile.name] + cmd
        else:
            full = ["/usr/bin/python3", "-S", "-c", RSS_WRAPPER, self.timefile.name] + cmd
        exe = full[0] if "/" in full[0] else shutil.which(full[0])
        out = self.devnull if discard else self.stdout
        actions = [(os.POSIX_SPAWN_DUP2, out.fileno(), 1), (os.POSIX_SPAWN_DUP2, self.stderr.fileno(), 2)]
        t0 = time.perf_counter()
        pid = os.posix_spawn(exe, full, self.env, file_actions=actions)
        _, status, ru = os.wait4(pid, 0)
        wall = time.perf_counter() - t0
        code = os.waitstatus_to_exitcode(status)
        self.stdout.seek(0)
        stdout = self.stdout.read()
        if code != 0:
            self.stderr.seek(0)
            err = self.stderr.read().decode(errors="replace")[-3000:]
            raise RuntimeError(f"{' '.join(cmd)} exited with {code}: {err}")
        with open(self.timefile.name) as f:
            rss = int([l for l in f.read().split("\n") if l.strip()][-1]) * 1024
        # wait4's CPU time covers the wrapper (time or python) and the engine it reaped;
        # the wrapper's own share is a few ms (it is in the /bin/true start-up row).
        return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss": rss, "stdout": stdout}


def fingerprint(path, schema):
    """What must be equal between engines, and what is only informative."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    table = pq.read_table(path)
    fp = {"rows": table.num_rows, "columns": {}}
    for c in schema:
        col = table.column(c["name"])
        entry = {"nulls": col.null_count}
        t = c["type"]
        if t in ("int32", "int64"):
            entry["sum"] = str(pc.sum(col.cast(pa.int64())).as_py() or 0)
        elif t == "float64":
            s = math.fsum(col.to_pylist())
            entry["fsum"] = repr(s)
            entry["sum"] = str(Decimal(s).quantize(Decimal("0.01")))
        elif t == "timestamp":
            entry["tz_aware"] = col.type.tz is not None
            micros = col.cast(pa.timestamp("us", tz=col.type.tz)).cast(pa.int64())
            secs = pc.divide(micros, 1_000_000)
            rest = pc.subtract(micros, pc.multiply(secs, 1_000_000))
            entry["sum"] = str((pc.sum(secs).as_py() or 0) * 1_000_000 + (pc.sum(rest).as_py() or 0))
        elif t == "string":
            entry["bytes"] = pc.sum(pc.binary_length(col)).as_py() or 0
        fp["columns"][c["name"]] = entry
    codecs = {meta.row_group(0).column(i).compression for i in range(meta.num_columns)} if meta.num_row_groups else set()
    info = {"row_groups": meta.num_row_groups, "codecs": sorted(codecs), "bytes": os.path.getsize(path),
            "types": {f.name: str(f.type) for f in table.schema}}
    return fp, info


def expected_fingerprint(expected, schema):
    fp = {"rows": expected["rows"], "columns": {}}
    for c in schema:
        name, entry = c["name"], {"nulls": 0}
        if c["type"] == "string":
            entry["bytes"] = expected["string_bytes"][name]
        else:
            entry["sum"] = expected["sums"][name]
        if c["type"] == "timestamp":
            entry["tz_aware"] = True
        fp["columns"][name] = entry
    return fp


def differences(fp, ref, label):
    """Mismatches of fp against ref (only the keys ref has)."""
    out = []
    if fp["rows"] != ref["rows"]:
        out.append(f"rows {fp['rows']} != {label} {ref['rows']}")
    for name, want in ref["columns"].items():
        got = fp["columns"].get(name, {})
        for k, v in want.items():
            if got.get(k) != v:
                out.append(f"{name}.{k} {got.get(k)} != {label} {v}")
    return out


def fmt_s(x):
    return f"{x:.3f}" if x < 10 else f"{x:.2f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--results", required=True)
    args = ap.parse_args()

    runs = int(os.environ.get("BENCH_RUNS", "5"))
    cold_runs = int(os.environ.get("BENCH_COLD_RUNS", "20"))
    engines = [e for e in os.environ.get("BENCH_ENGINES", ",".join(ENGINES)).split(",") if e]
    cases = [c for c in os.environ.get("BENCH_CASES", ",".join(CASES)).split(",") if c]
    rss_mode = os.environ.get("BENCH_RSS") or ("time" if os.access("/usr/bin/time", os.X_OK) else "wait4")
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.results, exist_ok=True)
    schema = json.load(open(os.path.join(args.data, "schema.json")))
    expected = json.load(open(os.path.join(args.data, "expected.json")))
    want = expected_fingerprint(expected, schema)
    python = sys.executable
    engines_py = os.path.join(HERE, "engines.py")

    versions = {}
    for engine in list(engines):
        if engine == "tidemark":
            continue
        mod = MODULES.get(engine)
        if mod is None:
            sys.exit(f"unknown engine {engine}")
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            log(f"bench: {mod} is not installed in the bench venv: skipping {engine}")
            engines.remove(engine)
    if "tidemark" not in engines:
        sys.exit("bench: tidemark must be among BENCH_ENGINES (ratios are against it)")

    def command(engine, case):
        fmt, comp, name = CASES[case]
        src = os.path.join(args.data, name)
        out = os.path.join(args.work, f"{engine}-{case}.parquet")
        if engine == "tidemark":
            return [args.bin, "convert", "--format", fmt, "--compression", comp, src, out], out
        if engine == "floor: bench read":
            return [args.bin, "read", "--compression", comp, src], None
        if engine == "floor: cat/zcat":
            return (["gzip", "-dc", src] if comp == "gzip" else ["cat", src]), None
        return [python, engines_py, engine, fmt, comp, src, out, os.path.join(args.data, "schema.json")], out

    jobs = [(case, engine) for case in cases for engine in engines + FLOORS
            if not (engine == "pyarrow-stream" and CASES[case][0] != "csv")]
    started = dt.datetime.now(dt.timezone.utc)
    load_start = loadavg()
    log(f"bench: {len(jobs)} engine×case jobs, 1 warm-up + {runs} runs each, RSS via {rss_mode}, load {load_start}")

    samples = {job: [] for job in jobs}
    verified = {}
    infos = {}
    tidemark_stats = {}
    load_samples = []
    with Runner(rss_mode) as runner:
        # Warm-up and verification.
        for case, engine in jobs:
            cmd, out = command(engine, case)
            r = runner.spawn(cmd, discard=engine in FLOORS)
            log(f"  warm-up {case:9} {engine:18} {r['wall']:.3f}s")
            if engine == "tidemark":
                tidemark_stats[case] = json.loads(r["stdout"])
            if out:
                fp, info = fingerprint(out, schema)
                infos[(case, engine)] = info
                problems = differences(fp, want, "expected")
                verified[(case, engine)] = (fp, problems)
        for case in cases:
            ref = verified[(case, "tidemark")][0]
            for engine in engines:
                if (case, engine) in verified:
                    fp, problems = verified[(case, engine)]
                    # Floats: fsum must be bit-identical to tidemark's (same parsed doubles).
                    problems = problems + differences(fp, ref, "tidemark")
                    verified[(case, engine)] = (fp, problems)
            # tidemark's own stats must agree with the read-back.
            st = tidemark_stats[case]
            if st["rows"] != ref["rows"]:
                verified[(case, "tidemark")][1].append(f"stats rows {st['rows']}")
            for name in ("order_id", "customer_id", "product_id", "quantity"):
                if st["sums"][name] != ref["columns"][name]["sum"]:
                    verified[(case, "tidemark")][1].append(f"stats {name} {st['sums'][name]}")
        # Measured rounds, interleaved.
        for i in range(runs):
            load_samples.append(loadavg())
            for case, engine in jobs:
                cmd, _ = command(engine, case)
                samples[(case, engine)].append(runner.spawn(cmd, discard=engine in FLOORS))
            log(f"  round {i + 1}/{runs} done, load {loadavg()}")

        # Start-up: whole processes that do (almost) nothing.
        cold = {}
        cold_cmds = {
            "/bin/true (spawn cost)": ["/bin/true"],
            "tidemark-bench --version": [args.bin, "--version"],
            "python -c 'import boto3, pyarrow'": [python, "-c", "import boto3, pyarrow"],
        }
        have_boto3 = True
        try:
            __import__("boto3")
        except ImportError:
            have_boto3 = False
            log("bench: boto3 is not installed in the bench venv: skipping the Python start-up figure")
            del cold_cmds["python -c 'import boto3, pyarrow'"]
        for label, cmd in cold_cmds.items():
            runner.spawn(cmd)  # warm-up
            cold[label] = [runner.spawn(cmd) for _ in range(cold_runs)]
    finished = dt.datetime.now(dt.timezone.utc)
    load_end = loadavg()

    # ---- report
    sizes = {case: os.path.getsize(os.path.join(args.data, CASES[case][2])) for case in cases}
    med = {job: statistics.median(s["wall"] for s in samples[job]) for job in jobs}
    lines = []
    lines.append(f"Run {started:%Y-%m-%d %H:%M} – {finished:%H:%M} UTC; load average (1, 5, 15 min) "
                 f"at start {load_start}, at the start of each round {'; '.join(load_samples)}, at the end {load_end}.")
    lines.append(f"Machine: {machine()}. Code: {source_state()}.")
    lines.append(f"Rows: {expected['rows']:,}; {runs} measured runs per engine and case after one warm-up; "
                 f"peak RSS via {'/usr/bin/time %M' if rss_mode == 'time' else 'os.wait4 rusage in a python -S wrapper'}; "
                 f"versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + f", Python {platform.python_version()}.")
    lines.append("")
    lines.append("| case | engine | median s | min s | max s | MB/s | × tidemark | CPU s | CPU × tidemark | peak RSS MB | Parquet MB | row groups | output |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    summary = []
    cpu_med = {job: statistics.median(x["cpu"] for x in samples[job]) for job in jobs}
    for case in cases:
        tm = med[(case, "tidemark")]
        tm_cpu = cpu_med[(case, "tidemark")]
        for engine in engines + FLOORS:
            job = (case, engine)
            if job not in samples:
                continue
            s = samples[job]
            walls = [x["wall"] for x in s]
            cpu = cpu_med[job]
            rss = max(x["rss"] for x in s)
            info = infos.get(job)
            if job in verified:
                problems = verified[job][1]
                check = "equal" if not problems else "DIFFERS: " + "; ".join(problems[:3])
            else:
                check = "–"
            out_cols = f"{info['bytes'] / MB:.1f} | {info['row_groups']}" if info else "– | –"
            lines.append(
                f"| {case} ({sizes[case] / MB:.0f} MB) | {engine} | {fmt_s(med[job])} | {fmt_s(min(walls))} | "
                f"{fmt_s(max(walls))} | {sizes[case] / MB / med[job]:.0f} | {med[job] / tm:.2f} | "
                f"{fmt_s(cpu)} | {cpu / tm_cpu:.2f} | {rss / MB:.0f} | {out_cols} | {check} |"
            )
        peers = [(med[(case, e)], e) for e in PEERS if (case, e) in med]
        if peers:
            best, who = min(peers)
            best_cpu, who_cpu = min((cpu_med[(case, e)], e) for e in PEERS if (case, e) in cpu_med)
            rss = max(x["rss"] for x in samples[(case, "tidemark")])
            floor = med[(case, "floor: bench read")]
            floor_cpu = cpu_med[(case, "floor: bench read")]
            summary.append(
                f"- {case}: wall — fastest peer {who} {best:.3f} s, tidemark {tm:.3f} s: tidemark has "
                f"{best / tm:.2f}× its throughput (target ≥ 1.50: {'met' if best / tm >= 1.5 else 'missed'}); "
                f"CPU — leanest peer {who_cpu} {best_cpu:.3f} s, tidemark {tm_cpu:.3f} s: {best_cpu / tm_cpu:.2f}×; "
                f"tidemark peak RSS {rss / MB:.0f} MB (target ≤ 64: {'met' if rss / MB <= 64 else 'missed'}); "
                f"read+decompress floor {floor:.3f} s wall / {floor_cpu:.3f} s CPU: tidemark takes "
                f"{tm / floor:.1f}× / {tm_cpu / floor_cpu:.1f}× the floor."
            )
    lines.append("")
    lines.append("× tidemark = engine median wall / tidemark median wall (above 1: tidemark is faster); CPU s = "
                 "median user + sys of the process, CPU × tidemark the same ratio on it (less sensitive to other "
                 "load on the machine than wall time). MB = 10^6 bytes; MB/s = input file bytes (compressed, "
                 "for .gz) / median wall; peak RSS = the highest of the runs.")
    lines.append("tidemark = `tidemark-bench convert` (tidemark::convert::convert); pyarrow = read_csv / read_json "
                 "+ write_table; pyarrow-stream = open_csv in 16 MiB blocks + ParquetWriter.write_batch; duckdb = "
                 "COPY (SELECT * FROM read_csv/read_json) TO parquet, threads=1; polars = read_csv / read_ndjson + "
                 "write_parquet, POLARS_MAX_THREADS=1; floor: bench read = `tidemark-bench read` (the converter's "
                 "read path and gzip decoder, no parsing); floor: cat/zcat = `cat` / `gzip -dc` to /dev/null.")
    lines.append("")
    if expected["rows"] != 1_000_000:
        summary.insert(0, f"- The targets are for 1,000,000 rows; this run has {expected['rows']:,}: "
                          "the verdicts below are only a check of the harness.")
    lines.extend(summary)
    lines.append("")
    lines.append(f"Start-up, {cold_runs} runs each after one warm-up: whole process, from spawn to exit, through the "
                 "same RSS wrapper as above (its cost is in the /bin/true row). Not a Lambda cold start: no runtime "
                 "API, no handler initialisation, no AWS client.")
    lines.append("")
    lines.append("| command | median ms | min ms | max ms | median CPU ms | peak RSS MB |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    for label, s in cold.items():
        walls = [x["wall"] * 1000 for x in s]
        lines.append(f"| `{label}` | {statistics.median(walls):.1f} | {min(walls):.1f} | {max(walls):.1f} | "
                     f"{statistics.median(x['cpu'] for x in s) * 1000:.1f} | {max(x['rss'] for x in s) / MB:.0f} |")
    lines.append("")
    lines.append(f"tidemark-bench binary (release, LTO, stripped, converter linked, no AWS SDK): "
                 f"{os.path.getsize(args.bin) / MB:.1f} MB.")
    report = "\n".join(lines) + "\n"

    stamp = started.strftime("%Y%m%d-%H%M%S")
    with open(os.path.join(args.results, f"{stamp}.md"), "w") as f:
        f.write(report)
    with open(os.path.join(args.results, f"{stamp}.json"), "w") as f:
        json.dump({
            "started": started.isoformat(), "finished": finished.isoformat(), "rows": expected["rows"],
            "load": {"start": load_start, "rounds": load_samples, "end": load_end}, "rss_mode": rss_mode,
            "versions": versions, "sizes": sizes,
            "samples": {f"{c}|{e}": [{k: v for k, v in x.items() if k != "stdout"} for x in s] for (c, e), s in samples.items()},
            "verification": {f"{c}|{e}": {"fingerprint": fp, "problems": p} for (c, e), (fp, p) in verified.items()},
            "outputs": {f"{c}|{e}": i for (c, e), i in infos.items()},
            "tidemark_stats": tidemark_stats,
            "startup": {k: [{kk: vv for kk, vv in x.items() if kk != "stdout"} for x in v] for k, v in cold.items()},
        }, f, indent=1, default=str)
    print(report)
    log(f"bench: results in {args.results}/{stamp}.md and .json")
    bad = [job for job, (_, p) in verified.items() if p]
    if bad:
        log(f"bench: OUTPUTS DIFFER for {bad}")
        sys.exit(1)


if __name__ == "__main__":
    main()
