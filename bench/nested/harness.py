"""The nested JSON benchmark: tidemark, pyarrow and DuckDB convert the same nested JSON Lines
(CloudTrail-like or device telemetry; plain and gzip) into Parquet on one thread each; whole
processes are timed; every output is compared value by value with the others. Started by
bench/nested/run.sh.

    python harness.py --bin TIDEMARK_BENCH --data DIR [--stem cloudtrail] --work DIR --results DIR

DIR holds STEM.jsonl, STEM.jsonl.gz and STEM.schema.json (the source's columns: struct,
array, map, json and path columns): cloudtrail (tests/fixtures/nested/generate.py) or
telemetry (bench/nested/telemetry.py). Environment: BENCH_RUNS (measured runs per engine and case,
default 3), BENCH_ENGINES (comma list of tidemark,pyarrow,duckdb), BENCH_CASES (jsonl,jsonl.gz),
BENCH_RSS (time|wait4). The cases json and json.gz (not run unless asked) read STEM.json and
STEM.json.gz: the same records as JSON documents, `{"Records":[...]}` of 1,000 per line.

The method is bench/harness.py's (its Runner and helpers are used as they are): one
unmeasured warm-up per engine and case, whose output is verified; then BENCH_RUNS rounds,
each running every engine once per case, interleaved; the input read once, untimed, before
every measured run; wall time around spawn and wait, CPU (user + sys) from wait4, peak RSS
from /usr/bin/time -f %M; medians. Floors: `tidemark-bench read` (the converter's read path
and gzip decoder) and cat / gzip -dc.

Verification: every output is read back with pyarrow in batches. Each column two engines
both wrote is brought to one Arrow type (integers as int64, strings as large_string,
timestamps as UTC microseconds, lists and maps with one child name; the schema decides) and
compared batch by batch, row by row; `json` columns are compared as parsed JSON (numbers as
decimals, keys in order), since engines may spell the same value differently. The reference
is tidemark's output, or DuckDB's when tidemark cannot convert the file (then the results say
"tidemark: not available" and why, and the ratios are against DuckDB). A column an engine
does not write (pyarrow's JSON reader has no way to keep a subtree as text and no map type:
its `json` and `map` columns, and path columns into them) is listed as such; every other
column must be equal.
"""

import argparse
import datetime as dt
import importlib.util
import json
import os
import statistics
import sys
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# bench/harness.py's measuring and helpers, as they are; this folder's peers.
base = load("bench_harness", os.path.join(os.path.dirname(HERE), "harness.py"))
nested_engines = load("nested_engines", os.path.join(HERE, "engines.py"))
MB, Runner, aligned, fmt_s, log = base.MB, base.Runner, base.aligned, base.fmt_s, base.log
loadavg, machine, refaults, source_state, warm = base.loadavg, base.machine, base.refaults, base.source_state, base.warm

# case: (compression, file suffix, layout, the records key of JSON documents). The same records
# in each: JSON Lines; JSON documents `{"Records":[...]}` of 1,000 records, one per line (a
# CloudTrail log file's shape, many files' worth in one); one top-level array of them all
# (`array`); all of them back to back with no delimiter (`concat`, Firehose's delivery). tidemark
# reads all but JSON Lines as `"format": "json"`; DuckDB's read_json as format='newline_delimited'
# (the Records list unnested), 'array' and 'unstructured'; pyarrow reads JSON Lines and the
# documents, not the array nor the concatenation.
CASES = {"jsonl": ("none", ".jsonl", "jsonl", None), "jsonl.gz": ("gzip", ".jsonl.gz", "jsonl", None),
         "json": ("none", ".json", "newline_delimited", "Records"),
         "json.gz": ("gzip", ".json.gz", "newline_delimited", "Records"),
         "array": ("none", ".array.json", "array", None), "concat": ("none", ".concat.json", "unstructured", None)}
PYARROW_LAYOUTS = ("jsonl", "newline_delimited")
ENGINES = ["tidemark", "pyarrow", "duckdb"]
FLOORS = ["floor: bench read", "floor: cat/zcat"]


def canonical_type(t):
    """The Arrow type outputs are compared in, for a parsed schema type (engines.parse_type)."""
    import pyarrow as pa

    k = t[0]
    if k == "scalar":
        return {"int32": pa.int64(), "int64": pa.int64(), "float32": pa.float64(), "float64": pa.float64(),
                "string": pa.large_string(), "bool": pa.bool_(), "date": pa.date32(),
                "timestamp": pa.timestamp("us", tz="UTC")}[t[1]]
    if k == "decimal":
        return pa.decimal128(38, t[2])
    if k == "json":
        return pa.large_string()
    if k == "struct":
        return pa.struct([(n, canonical_type(x)) for n, x in t[1]])
    if k == "array":
        return pa.large_list(pa.field("element", canonical_type(t[1])))
    return pa.map_(pa.large_string(), canonical_type(t[1]))


def canonical(arr, t):
    import pyarrow as pa

    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if isinstance(arr.type, pa.ExtensionType):
        arr = arr.storage
    return arr.cast(canonical_type(t))


def parsed_json(text):
    """A json column's value as a comparable tree: numbers as decimals (1e3 == 1000.0), keys in
    order, and booleans tagged (in Python True == Decimal(1))."""
    if text is None:
        return None

    def tag(v):
        if isinstance(v, bool):
            return ("bool", v)
        if isinstance(v, list):
            return [tag(x) for x in v]
        if isinstance(v, tuple):  # ("obj", pairs)
            return ("obj", [(k, tag(x)) for k, x in v[1]])
        return v

    return tag(json.loads(text, parse_float=Decimal, parse_int=Decimal,
                          object_pairs_hook=lambda pairs: ("obj", pairs)))


def compare(path, ref_path, schema):
    """(problems, columns compared, columns this output lacks) of the output at path against
    the reference output, value by value."""
    import pyarrow.parquet as pq

    got, ref = pq.ParquetFile(path), pq.ParquetFile(ref_path)
    problems = []
    if got.metadata.num_rows != ref.metadata.num_rows:
        problems.append(f"rows {got.metadata.num_rows} != {ref.metadata.num_rows}")
    have = set(got.schema_arrow.names)
    ref_have = set(ref.schema_arrow.names)
    names = [c["name"] for c in schema if c["name"] in have and c["name"] in ref_have]
    lacks = [c["name"] for c in schema if c["name"] not in have]
    types = {c["name"]: nested_engines.parse_type(c["type"]) for c in schema}
    first_bad = {}
    offset = 0
    for a, b in aligned(got, ref, names):
        for name in names:
            if name in first_bad:
                continue
            t = types[name]
            try:
                x, y = canonical(a.column(name), t), canonical(b.column(name), t)
            except Exception as e:  # a type that cannot be brought to the schema's
                first_bad[name] = f"{name}: {a.column(name).type} cannot be compared ({e})"
                continue
            if x.equals(y):
                continue
            xs, ys = x.to_pylist(), y.to_pylist()
            for i, (u, v) in enumerate(zip(xs, ys)):
                if u == v or (t[0] == "json" and parsed_json(u) == parsed_json(v)):
                    continue
                show = lambda z: repr(z)[:120]  # noqa: E731
                first_bad[name] = f"{name}: row {offset + i + 1}: {show(u)} (reference {show(v)})"
                break
        offset += a.num_rows
    problems += list(first_bad.values())
    return problems, names, lacks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--stem", default="cloudtrail")
    ap.add_argument("--work", required=True)
    ap.add_argument("--results", required=True)
    args = ap.parse_args()

    runs = int(os.environ.get("BENCH_RUNS", "3"))
    engines = [e for e in os.environ.get("BENCH_ENGINES", ",".join(ENGINES)).split(",") if e]
    cases = [c for c in os.environ.get("BENCH_CASES", "jsonl,jsonl.gz").split(",") if c]
    rss_mode = os.environ.get("BENCH_RSS") or ("time" if os.access("/usr/bin/time", os.X_OK) else "wait4")
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.results, exist_ok=True)
    schema_path = os.path.join(os.path.abspath(args.data), f"{args.stem}.schema.json")
    with open(schema_path) as f:
        schema = json.load(f)
    source = lambda case: os.path.join(args.data, args.stem + CASES[case][1])  # noqa: E731
    for case in cases:
        if case not in CASES or not os.path.exists(source(case)):
            sys.exit(f"bench: no input for case {case} ({source(case) if case in CASES else 'unknown case'})")
    python = sys.executable
    engines_py = os.path.join(HERE, "engines.py")
    versions = {}
    for engine in engines:
        if engine != "tidemark":
            versions[engine] = __import__(engine).__version__

    def command(engine, case):
        comp, _, layout, records = CASES[case]
        src = source(case)
        out = os.path.join(args.work, f"nested-{engine}-{case}.parquet")
        if engine == "tidemark":
            format = ["--format", "jsonl"] if layout == "jsonl" else ["--format", "json"]
            format += ["--records", records] if records else []
            return [args.bin, "convert", *format, "--compression", comp, "--schema", schema_path,
                    "--threads", "1", src, out], out
        if engine == "floor: bench read":
            return [args.bin, "read", "--compression", comp, src], None
        if engine == "floor: cat/zcat":
            return (["gzip", "-dc", src] if comp == "gzip" else ["cat", src]), None
        extra = [] if layout == "jsonl" else [layout] + ([records] if records else [])
        return [python, engines_py, engine, comp, src, out, schema_path] + extra, out

    floors = [f for f in FLOORS if f != "floor: bench read" or os.access(args.bin, os.X_OK)]
    jobs = [(case, engine) for case in cases for engine in engines + floors
            if engine != "pyarrow" or CASES[case][2] in PYARROW_LAYOUTS]
    started = dt.datetime.now(dt.timezone.utc)
    load_start = loadavg()
    log(f"bench: {len(jobs)} engine×case jobs, 1 warm-up + {runs} runs each, RSS via {rss_mode}, load {load_start}")

    unavailable = {}  # engine: why
    samples = {job: [] for job in jobs}
    outputs = {}
    stats = {}
    load_samples = []
    refaulted = 0
    with Runner(rss_mode) as runner:
        for case, engine in jobs:
            if engine in unavailable:
                continue
            cmd, out = command(engine, case)
            if engine == "tidemark" and not os.access(args.bin, os.X_OK):
                unavailable[engine] = f"no binary at {args.bin}"
                continue
            try:
                r = runner.spawn(cmd, discard=engine in FLOORS)
            except RuntimeError as e:
                if engine != "tidemark":
                    raise
                # "CMD exited with N: STDERR": the code and the converter's own words.
                _, _, said = str(e).partition(" exited with ")
                unavailable[engine] = f"tidemark-bench convert exited with {said.strip()}"[:600]
                log(f"  tidemark: not available: {unavailable[engine]}")
                continue
            log(f"  warm-up {case:9} {engine:18} {r['wall']:.3f}s")
            if engine == "tidemark":
                stats[case] = json.loads(r["stdout"])
            if out:
                outputs[(case, engine)] = out
        measured = [job for job in jobs if job[1] not in unavailable]
        for i in range(runs):
            load_samples.append(loadavg())
            for case, engine in measured:
                cmd, _ = command(engine, case)
                warm(source(case))
                before = refaults()
                samples[(case, engine)].append(runner.spawn(cmd, discard=engine in FLOORS))
                after = refaults()
                if before is not None and after is not None:
                    refaulted += after - before
            log(f"  round {i + 1}/{runs} done, load {loadavg()}")
    finished = dt.datetime.now(dt.timezone.utc)

    # Value by value, against tidemark's output, else DuckDB's.
    verified = {}
    for case in cases:
        ref_engine = "tidemark" if (case, "tidemark") in outputs else "duckdb"
        if (case, ref_engine) not in outputs:
            continue
        ref = outputs[(case, ref_engine)]
        for engine in engines:
            if (case, engine) not in outputs or engine == ref_engine:
                continue
            problems, names, lacks = compare(outputs[(case, engine)], ref, schema)
            verified[(case, engine)] = (ref_engine, problems, names, lacks)
            log(f"  compared {case:9} {engine} with {ref_engine}: {'equal' if not problems else problems[:3]}")
        verified[(case, ref_engine)] = (None, [], [], [])
        if ref_engine == "tidemark":
            rows = __import__("pyarrow.parquet").parquet.ParquetFile(ref).metadata.num_rows
            if stats[case].get("rows") != rows:
                verified[(case, "tidemark")][1].append(f"stats rows {stats[case].get('rows')} != {rows} read back")

    # ---- report
    import pyarrow.parquet as pq

    sizes = {case: os.path.getsize(source(case)) for case in cases}
    any_out = next(iter(outputs.values()))
    rows = pq.ParquetFile(any_out).metadata.num_rows
    lines = [f"Run {started:%Y-%m-%d %H:%M} – {finished:%H:%M} UTC; load average at start {load_start}, at the "
             f"start of each round {'; '.join(load_samples)}, at the end {loadavg()}.",
             f"Machine: {machine()}. Code: {source_state()}.",
             f"Dataset: {args.stem} ({rows:,} records, {len(schema)} columns: "
             f"{sum(1 for c in schema if c['type'].startswith(('struct', 'array', 'map')))} struct/array/map, "
             f"{sum(1 for c in schema if c['type'] == 'json')} json, {sum(1 for c in schema if c.get('path'))} read by path); "
             f"{runs} measured runs per engine and case after one warm-up; peak RSS via "
             f"{'/usr/bin/time %M' if rss_mode == 'time' else 'os.wait4'}; versions: "
             + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + ".", ""]
    for engine, why in unavailable.items():
        lines.append(f"**{engine}: not available** ({why}).")
        lines.append("")
    base = "tidemark" if "tidemark" not in unavailable and "tidemark" in engines else "duckdb"
    lines.append(f"| case | engine | median s | min s | max s | MB/s | × {base} | CPU s | peak RSS MB | Parquet MB | output |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    med = {job: statistics.median(x["wall"] for x in s) for job, s in samples.items() if s}
    cpu = {job: statistics.median(x["cpu"] for x in s) for job, s in samples.items() if s}
    for case in cases:
        for engine in engines + floors:
            job = (case, engine)
            if job not in med:
                if engine in unavailable:
                    lines.append(f"| {case} | {engine} | – | – | – | – | – | – | – | – | not available |")
                continue
            walls = [x["wall"] for x in samples[job]]
            check = "–"
            if job in verified:
                ref_engine, problems, names, lacks = verified[job]
                if ref_engine is None:
                    check = "reference"
                elif problems:
                    check = "DIFFERS: " + "; ".join(problems[:3])
                else:
                    check = f"equal to {ref_engine} on {len(names)} columns" + (
                        f" (not written: {', '.join(lacks)})" if lacks else "")
            out_mb = f"{os.path.getsize(outputs[job]) / MB:.1f}" if job in outputs else "–"
            ratio = f"{med[job] / med[(case, base)]:.2f}" if (case, base) in med else "–"
            lines.append(f"| {case} ({sizes[case] / MB:.0f} MB) | {engine} | {fmt_s(med[job])} | {fmt_s(min(walls))} | "
                         f"{fmt_s(max(walls))} | {sizes[case] / MB / med[job]:.0f} | {ratio} | {fmt_s(cpu[job])} | "
                         f"{max(x['rss'] for x in samples[job]) / MB:.0f} | {out_mb} | {check} |")
    lines.append("")
    lines.append(f"× {base} = median wall / {base}'s median wall. CPU s = median user + sys. MB = 10^6 bytes; "
                 "MB/s = input file bytes / median wall; peak RSS = the highest of the runs. File pages read back "
                 f"from disk during the measured runs: {refaulted * os.sysconf('SC_PAGE_SIZE') / 1e6:.1f} MB.")
    lines.append("Threads: one per engine (tidemark `--threads 1`; pyarrow set_cpu_count(1), set_io_thread_count(1), "
                 "use_threads=False; DuckDB threads=1). tidemark = `tidemark-bench convert --format jsonl` "
                 "(tidemark::convert::convert with the schema's columns and paths, default policies); pyarrow = "
                 "pyarrow.json.read_json with the explicit nested schema + path columns by pyarrow.compute + "
                 "write_table; duckdb = COPY (SELECT columns, path expressions FROM read_json(..., columns=...)) TO "
                 "parquet; all zstd level 3.")
    lines.append("output = every column both engines wrote equal value by value, row by row (json columns as parsed "
                 "JSON), against the reference named.")
    report = "\n".join(lines) + "\n"
    stamp = started.strftime("%Y%m%d-%H%M%S")
    with open(os.path.join(args.results, f"nested-{stamp}.md"), "w") as f:
        f.write(report)
    with open(os.path.join(args.results, f"nested-{stamp}.json"), "w") as f:
        json.dump({"started": started.isoformat(), "finished": finished.isoformat(), "rows": rows,
                   "data": os.path.abspath(args.data), "schema": schema_path, "versions": versions,
                   "unavailable": unavailable, "sizes": sizes,
                   "samples": {f"{c}|{e}": [{k: v for k, v in x.items() if k != "stdout"} for x in s]
                               for (c, e), s in samples.items() if s},
                   "verification": {f"{c}|{e}": {"reference": r, "problems": p, "columns": n, "not_written": lk}
                                    for (c, e), (r, p, n, lk) in verified.items()},
                   "tidemark_stats": stats}, f, indent=1, default=str)
    print(report)
    log(f"bench: results in {args.results}/nested-{stamp}.md and .json")
    if any(p for _, p, _, _ in verified.values()):
        log("bench: OUTPUTS DIFFER")
        sys.exit(1)


if __name__ == "__main__":
    main()
