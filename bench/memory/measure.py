"""The ingest function's memory, measured: started by bench/memory/run.sh (which builds the
binary); see its header for what is measured and why.

    python3 measure.py --bin TIDEMARK_BENCH --data DIR --out DIR [--runs N] [--quick]

Inputs (made once into DIR, then reused): the wide dataset (`tidemark-bench gen --dataset
wide`), CloudTrail records (tests/fixtures/nested/generate.py), the orders dataset
(`tidemark-bench gen`); at each size a prefix of the largest file (its first N records); the
partitioned inputs are the wide and orders rows with `p = id % 1000` (a string) appended, so
every batch spreads over all 1,000 partitions.

Every run is one process under `/usr/bin/time -f %M` (peak RSS, KiB); 1 thread is
`--threads 1` for the converter and `taskset -c 0` for the whole path (`tidemark-bench
ingest`, whose conversion takes 2 threads when it may run on 2 CPUs, as the function's). Each
cell runs BENCH_RUNS times; the table gives the largest peak (and the smallest). Results:
OUT/peaks.json (every sample, the commands, the machine) and OUT/peaks.md.
"""

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MIB = 1024 * 1024

WIDE_ROWS = [20_000, 100_000, 250_000, 500_000, 1_000_000]
# Wide CSV beyond the generated 1M rows: the 1M rows repeated (the same rows again: each row
# group is of the same data as before, so the converter does the same work per row group).
WIDE_CSV_REPEATED = [2_000_000, 4_000_000]
TRAIL_RECORDS = [30_000, 100_000, 300_000, 1_000_000]
ORDERS_ROWS = [100_000, 1_000_000, 3_000_000]
QUICK = {"wide": [20_000, 100_000], "trail": [30_000], "orders": [100_000], "repeated": [200_000]}


def tunables():
    """The ingest function's GLIBC_TUNABLES in template.yaml (None when it sets none)."""
    for line in open(os.path.join(REPO, "template.yaml")):
        if line.strip().startswith("GLIBC_TUNABLES:"):
            return line.split(":", 1)[1].strip()
    return None


sys.dont_write_bytecode = True
_spec = importlib.util.spec_from_file_location("bench_harness", os.path.join(REPO, "bench", "harness.py"))
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)
log = harness.log


def sh(cmd, **kw):
    log("+", " ".join(cmd))
    subprocess.run(cmd, check=True, **kw)


def prefix(src, dst, lines):
    """The first `lines` lines of src into dst (made once)."""
    if os.path.exists(dst):
        return dst
    tmp = dst + ".part"
    with open(src, "rb") as i, open(tmp, "wb") as o:
        for n, line in enumerate(i):
            if n >= lines:
                break
            o.write(line)
    os.replace(tmp, dst)
    return dst


def repeated(src, dst, times):
    """The CSV file src (with a header) with its rows `times` times over."""
    if os.path.exists(dst):
        return dst
    tmp = dst + ".part"
    with open(tmp, "wb") as o:
        for n in range(times):
            with open(src, "rb") as i:
                header = i.readline()
                if n == 0:
                    o.write(header)
                shutil.copyfileobj(i, o, 1 << 20)
    os.replace(tmp, dst)
    return dst


def with_p(src, dst, fmt, id_column, n=1000):
    """src with the column p = id % n (a string) appended to every record."""
    if os.path.exists(dst):
        return dst
    tmp = dst + ".part"
    with open(src, "rb") as i, open(tmp, "wb") as o:
        if fmt == "csv":
            o.write(i.readline().rstrip(b"\n") + b",p\n")
            for line in i:
                rid = int(line[: line.index(b",")])
                o.write(line.rstrip(b"\n") + b",%d\n" % (rid % n))
        else:
            key = b'{"%s":' % id_column.encode()
            for line in i:
                assert line.startswith(key), line[:40]
                rest = line[len(key):]
                rid = int(rest[: rest.index(b",")])
                o.write(b'{"p":"%d",' % (rid % n) + line[1:])
    os.replace(tmp, dst)
    return dst


def add_p_column(schema_file, dst):
    columns = json.load(open(schema_file))
    columns.append({"name": "p", "type": "string", "nullable": False})
    json.dump(columns, open(dst, "w"), indent=1)
    return dst


def inputs(bench, data, quick):
    """Every input file, by (shape, records)."""
    os.makedirs(data, exist_ok=True)
    wide_rows = QUICK["wide"] if quick else WIDE_ROWS
    trail_records = QUICK["trail"] if quick else TRAIL_RECORDS
    orders_rows = QUICK["orders"] if quick else ORDERS_ROWS
    wide_dir = os.path.join(data, f"wide-{max(wide_rows)}")
    if not os.path.exists(os.path.join(wide_dir, "wide.jsonl")):
        sh([bench, "gen", "--dataset", "wide", "--rows", str(max(wide_rows)), "--out", wide_dir])
    orders_dir = os.path.join(data, f"orders-{max(orders_rows)}")
    if not os.path.exists(os.path.join(orders_dir, "orders.csv")):
        sh([bench, "gen", "--rows", str(max(orders_rows)), "--out", orders_dir])
    trail_dir = os.path.join(data, f"cloudtrail-{max(trail_records)}")
    if not os.path.exists(os.path.join(trail_dir, "cloudtrail.jsonl")):
        sh([sys.executable, os.path.join(REPO, "tests/fixtures/nested/generate.py"), "--out",
            trail_dir, "--records", str(max(trail_records)), "--datasets", "cloudtrail"])
    schemas = {
        "wide": os.path.join(wide_dir, "schema.json"),
        "wide-p": add_p_column(os.path.join(wide_dir, "schema.json"),
                               os.path.join(data, "wide-p.schema.json")),
        "orders-p": add_p_column(os.path.join(orders_dir, "schema.json"),
                                 os.path.join(data, "orders-p.schema.json")),
        "cloudtrail": os.path.join(trail_dir, "cloudtrail.schema.json"),
    }
    policies = json.load(open(os.path.join(trail_dir, "cloudtrail.policies.json")))
    files = {}
    sized = os.path.join(data, "sized")
    os.makedirs(sized, exist_ok=True)
    for rows in wide_rows:
        for fmt in ["csv", "jsonl"]:
            header = 1 if fmt == "csv" else 0
            src = os.path.join(wide_dir, f"wide.{fmt}")
            plain = src if rows == max(wide_rows) else prefix(
                src, os.path.join(sized, f"wide-{rows}.{fmt}"), rows + header)
            files[("wide", fmt, rows)] = plain
            files[("wide-p", fmt, rows)] = with_p(
                plain, os.path.join(sized, f"wide-p-{rows}.{fmt}"), fmt, "event_id")
    for rows in QUICK["repeated"] if quick else WIDE_CSV_REPEATED:
        times = rows // max(wide_rows)
        files[("wide", "csv", rows)] = repeated(
            os.path.join(wide_dir, "wide.csv"), os.path.join(sized, f"wide-{rows}.csv"), times)
    for records in trail_records:
        src = os.path.join(trail_dir, "cloudtrail.jsonl")
        files[("cloudtrail", "jsonl", records)] = src if records == max(trail_records) else prefix(
            src, os.path.join(sized, f"cloudtrail-{records}.jsonl"), records)
    for rows in orders_rows:
        src = os.path.join(orders_dir, "orders.csv")
        plain = src if rows == max(orders_rows) else prefix(
            src, os.path.join(sized, f"orders-{rows}.csv"), rows + 1)
        files[("orders-p", "csv", rows)] = with_p(
            plain, os.path.join(sized, f"orders-p-{rows}.csv"), "csv", "order_id")
    return files, schemas, policies


def source_block(shape, fmt, schemas, policies, row_group_mib=None):
    """The source `tidemark-bench ingest` runs the shape under."""
    block = {"source_id": shape.replace("-", "_"), "format": fmt,
             "schema": json.load(open(schemas[shape])), "output": {"prefix": "out/"}}
    if shape in ("wide-p", "orders-p"):
        block["output"]["partitioning"] = {"columns": [{"from": "p"}]}
    if shape == "cloudtrail":
        block.update(policies)
    if row_group_mib:
        block["output"]["row_group_mib"] = row_group_mib
    return block


class Runner:
    """BENCH_RUNS runs of a command per cell, each measured by bench/harness.py's Runner
    (peak RSS by /usr/bin/time, CPU = user + sys from wait4, wall); a run that fails is
    recorded as failed, with the end of its stderr."""

    def __init__(self, bench, work, runs):
        self.bench, self.work, self.runs = bench, work, runs
        self.samples = []
        self.spawner = harness.Runner("time")
        self.base_env = self.spawner.env

    def measure(self, cell, argv, env=None):
        """BENCH_RUNS runs of argv; returns the samples."""
        out = []
        with self.spawner as spawner:
            for run in range(self.runs):
                shutil.rmtree(os.path.join(self.work, "out"), ignore_errors=True)
                os.makedirs(self.work, exist_ok=True)
                spawner.env = {**self.base_env, **(env or {})}
                sample = {**cell, "run": run, "argv": argv, "env": env or {}, "ok": True, "peak_mib": None,
                          "wall_s": None, "cpu_s": None, "report": None}
                try:
                    r = spawner.spawn(argv)
                except RuntimeError as e:
                    sample.update(ok=False, stderr=str(e)[-2000:])
                    log("FAILED:", " ".join(argv), str(e)[-2000:])
                else:
                    sample.update(peak_mib=round(r["rss"] / MIB, 1), wall_s=round(r["wall"], 2),
                                  cpu_s=round(r["cpu"], 2), report=last_json(r["stdout"].decode()))
                log(f"{cell}: {sample['peak_mib']} MiB, {sample['wall_s']} s, CPU {sample['cpu_s']} s")
                self.samples.append(sample)
                out.append(sample)
        shutil.rmtree(os.path.join(self.work, "out"), ignore_errors=True)
        return out


def last_json(text):
    """The last line of text that is JSON, parsed (None if none is)."""
    for line in reversed(text.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            pass
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default=os.path.join(REPO, ".local/bench-memory"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--note", default=os.environ.get("BENCH_NOTE", ""),
                    help="a line for the results (e.g. how the binary was built)")
    ap.add_argument("--render", metavar="PEAKS_JSON",
                    help="only write peaks.md again from this peaks.json (into --out)")
    a = ap.parse_args()
    if a.render:
        result = json.load(open(a.render))
        if a.note:
            result["note"] = a.note
        os.makedirs(a.out, exist_ok=True)
        write_markdown(result, os.path.join(a.out, "peaks.md"))
        return
    bench = os.path.abspath(a.bin)
    files, schemas, policies = inputs(bench, os.path.abspath(a.data), a.quick)
    work = os.path.abspath(a.work)
    r = Runner(bench, work, a.runs)
    out_file = os.path.join(work, "out.parquet")
    out_dir = os.path.join(work, "out")
    os.makedirs(work, exist_ok=True)
    started = dt.datetime.now(dt.timezone.utc)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                           capture_output=True, text=True).stdout.strip() != ""
    load_before = os.getloadavg()

    def size_of(path):
        return round(os.path.getsize(path) / MIB, 1)

    # 1. The converter alone, growing objects.
    def converter_argv(shape, fmt, path, threads):
        if shape in ("wide-p", "orders-p"):
            return [bench, "partition", "--format", fmt, "--compression", "none", "--schema",
                    schemas[shape], "--threads", str(threads), "--by", "p", path, out_dir]
        return [bench, "convert", "--format", fmt, "--compression", "none", "--schema",
                schemas[shape], "--threads", str(threads), path, out_file]

    for (shape, fmt, records), path in sorted(files.items()):
        for threads in [2, 1]:
            cell = {"part": "converter", "shape": shape, "format": fmt, "records": records,
                    "input_mib": size_of(path), "threads": threads}
            r.measure(cell, converter_argv(shape, fmt, path, threads))

    # 1b. The converter at the largest size of each shape, with the function's malloc settings.
    shipped = tunables()
    shipped_env = {"GLIBC_TUNABLES": shipped} if shipped else None
    largest = {}
    for (shape, fmt, records), path in files.items():
        if (shape, fmt) == ("wide", "csv") and records > max(QUICK["wide"] if a.quick else WIDE_ROWS):
            continue  # the repeated rows: the largest is the generated one
        if records >= largest.get((shape, fmt), (0, None))[0]:
            largest[(shape, fmt)] = (records, path)
    if shipped_env:
        for (shape, fmt), (records, path) in sorted(largest.items()):
            for threads in [2, 1]:
                cell = {"part": "converter", "shape": shape, "format": fmt, "records": records,
                        "input_mib": size_of(path), "threads": threads,
                        "environment": f"GLIBC_TUNABLES={shipped}"}
                r.measure(cell, converter_argv(shape, fmt, path, threads), shipped_env)

    # 2. The whole per-object path (`tidemark-bench ingest`: the ingest handler on folders and
    # SQLite), with the function's malloc settings unless said otherwise: one object on 2
    # threads at every size; at the largest size of each shape, 1 thread, two objects at once,
    # `row_group_mib` 4 (the memory test's setting), and one and two objects with glibc's
    # defaults; a warm process (8 objects two at a time, with either setting) on three shapes;
    # and a tiny object, for the process's own baseline.
    smallest_wide = min(rec for (s, f, rec) in files if s == "wide")
    tiny = prefix(files[("wide", "csv", smallest_wide)],
                  os.path.join(os.path.abspath(a.data), "sized", "wide-1000.csv"), 1001)
    blocks = os.path.join(work, "sources")
    os.makedirs(blocks, exist_ok=True)

    def block_file(shape, fmt, row_group_mib=None):
        name = f"{shape}-{fmt}-{row_group_mib or 'default'}.json"
        path = os.path.join(blocks, name)
        json.dump(source_block(shape, fmt, schemas, policies, row_group_mib), open(path, "w"))
        return path

    def ingest(shape, fmt, records, path, threads=2, objects=1, concurrency=None,
               row_group_mib=None, env=shipped_env, part="ingest", block=None):
        pin = [] if threads == 2 else ["taskset", "-c", "0"]
        concurrency = concurrency or objects
        cell = {"part": part, "shape": shape, "format": fmt, "records": records,
                "input_mib": size_of(path), "threads": threads, "objects": objects,
                "concurrency": concurrency, "row_group_mib": row_group_mib or 64,
                "environment": " ".join(f"{k}={v}" for k, v in (env or {}).items())
                or "glibc defaults"}
        argv = pin + [bench, "ingest", "--source", block_file(*(block or (shape, fmt)), row_group_mib),
                      "--concurrency", str(concurrency)] + [path] * objects
        r.measure(cell, argv, env)

    for threads in [2, 1]:
        ingest("baseline (wide, 1,000 rows)", "csv", 1000, tiny, threads=threads,
               part="baseline", block=("wide", "csv"))
    for (shape, fmt, records), path in sorted(files.items()):
        ingest(shape, fmt, records, path, part="ingest-sizes")
    for (shape, fmt), (records, path) in sorted(largest.items()):
        ingest(shape, fmt, records, path, threads=1)
        ingest(shape, fmt, records, path, objects=2)
        ingest(shape, fmt, records, path, row_group_mib=4)
        if shipped_env:
            ingest(shape, fmt, records, path, env=None)
            ingest(shape, fmt, records, path, objects=2, env=None)
    partitioned = ("wide-p", "jsonl", WIDE_ROWS[2])  # 250,000 rows: 8 of them spill 3 GB
    warm = [("wide", "csv", largest[("wide", "csv")]),
            ("cloudtrail", "jsonl", largest[("cloudtrail", "jsonl")]),
            ("wide-p", "jsonl", (partitioned[2], files[partitioned]) if partitioned in files
             else largest[("wide-p", "jsonl")])]
    for shape, fmt, (records, path) in warm:
        ingest(shape, fmt, records, path, objects=8, concurrency=2, part="warm")
        if shipped_env:
            ingest(shape, fmt, records, path, objects=8, concurrency=2, env=None, part="warm")

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), platform.machine())
    result = {
        "started": started.isoformat(timespec="seconds"),
        "ended": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit, "dirty": dirty, "bin": bench, "runs": a.runs, "note": a.note,
        "machine": {"nproc": os.cpu_count(), "cpu": cpu, "kernel": platform.release(),
                    "load_before": load_before, "load_after": os.getloadavg()},
        "samples": r.samples,
    }
    os.makedirs(a.out, exist_ok=True)
    json.dump(result, open(os.path.join(a.out, "peaks.json"), "w"), indent=1)
    write_markdown(result, os.path.join(a.out, "peaks.md"))
    log("results:", a.out)


def write_markdown(result, path):
    cells = {}
    for s in result["samples"]:
        key = tuple((k, s.get(k)) for k in
                    ["part", "shape", "format", "records", "input_mib", "threads", "objects",
                     "concurrency", "row_group_mib", "environment"])
        cells.setdefault(key, []).append(s)
    m = result["machine"]
    lines = [
        "# Peak memory of the ingest path",
        "",
        f"{result['started']} to {result['ended']}, commit {result['commit']}"
        + (" (tree dirty)" if result["dirty"] else "")
        + f"; {m['nproc']} CPUs ({m['cpu']}), load {m['load_before'][0]:.1f} before, "
        f"{m['load_after'][0]:.1f} after; {result['runs']} runs a cell. Peak RSS by "
        "`/usr/bin/time -f %M`, in MiB: the largest of the runs (the smallest in brackets when "
        "they differ by 0.5 MiB or more); CPU = user + system, the median of the runs. "
        "Reproduce: `bench/memory/run.sh`.",
        "",
    ]
    if result.get("note"):
        lines += [result["note"], ""]

    def peak(samples):
        peaks = [s["peak_mib"] for s in samples if s["ok"] and s["peak_mib"] is not None]
        if not samples or len(peaks) < len(samples):
            return "FAILED" if samples else ""
        hi, lo = max(peaks), min(peaks)
        return f"{hi:.1f}" + (f" ({lo:.1f})" if hi - lo >= 0.5 else "")

    def cpu(samples):
        times = sorted(s["cpu_s"] for s in samples if s.get("cpu_s") is not None)
        return f"{times[len(times) // 2]:.2f} s" if times else ""

    def extra(samples):
        rep = next((s["report"] for s in samples if s.get("report")), None) or {}
        if "spill_bytes" in rep:
            return (f"{rep.get('partitions')} partitions, {rep.get('row_groups')} row groups, "
                    f"{rep['spill_bytes'] / MIB:.0f} MiB spilled")
        if "row_groups" in rep:
            return f"{rep['row_groups']} row groups"
        return ""

    def table(heading, intro, columns):
        """A section's heading (if any), its line of introduction and a table's head; a
        column whose name ends in ":" is right-aligned (the colon dropped)."""
        head = [c.rstrip(":") for c in columns]
        rule = ["---:" if c.endswith(":") else "---" for c in columns]
        return ([heading, ""] if heading else []) + [
            intro, "", "| " + " | ".join(head) + " |", "|" + "|".join(rule) + "|"]

    lines += table(
        "## The converter (`tidemark-bench convert` / `partition`)",
        "glibc's malloc defaults; the largest size again with the function's settings "
        "(`GLIBC_TUNABLES`, template.yaml) below.",
        ["shape", "format", "records:", "input MiB:", "2 threads: peak, CPU", "1 thread: peak, CPU",
         "output"])
    conv = {}
    for key, samples in cells.items():
        k = dict(key)
        if k["part"] == "converter":
            conv.setdefault((k["environment"] or "", k["shape"], k["format"], k["records"],
                             k["input_mib"]), {})[k["threads"]] = samples
    for (env, shape, fmt, records, size), by in sorted(conv.items()):
        two, one = by.get(2, []), by.get(1, [])
        label = f"{shape}, {env}" if env else shape
        lines.append(
            f"| {label} | {fmt} | {records:,} | {size} | {peak(two)}, {cpu(two)} | "
            f"{peak(one)}, {cpu(one)} | {extra(two or one)} |")
    lines += [""] + table(
        "## The whole per-object path (`tidemark-bench ingest`: the ingest handler on folders "
        "and SQLite)",
        "One object on 2 threads at each size, the default row group (64 MiB), the function's "
        "malloc settings: records (input MiB): peak MiB.",
        ["shape", "format", "peaks"])
    sizes = {}
    for key, samples in cells.items():
        k = dict(key)
        if k["part"] == "ingest-sizes":
            sizes.setdefault((k["shape"], k["format"]), []).append(
                (k["records"], f"{k['records']:,} ({k['input_mib']:.0f}): {peak(samples)}"))
    for (shape, fmt), row in sorted(sizes.items()):
        lines.append(f"| {shape} | {fmt} | " + "; ".join(t for _, t in sorted(row)) + " |")
    lines += [""] + table(
        None,
        "At the largest size of each shape; a warm process (8 objects, 2 at a time); the "
        "process's own baseline:",
        ["shape", "format", "records:", "input MiB:", "row_group_mib:", "objects (at once)", "threads:",
         "malloc", "peak MiB:", "CPU:"])
    for part in ("baseline", "ingest", "warm"):
        for key, samples in cells.items():
            k = dict(key)
            if k["part"] == part:
                lines.append(
                    f"| {k['shape']} | {k['format']} | {k['records']:,} | {k['input_mib']} | "
                    f"{k.get('row_group_mib') or '-'} | {k['objects']} ({k['concurrency']}) | "
                    f"{k['threads']} | {k.get('environment') or ''} | {peak(samples)} | "
                    f"{cpu(samples)} |")
    lines += ["", "## Commands", "", "One line per cell (the first run's):", "", "```"]
    for key, samples in cells.items():
        s = samples[0]
        env = " ".join(f"{k}={v}" for k, v in s["env"].items())
        argv = " ".join(os.path.relpath(x, REPO) if x.startswith(REPO) else x for x in s["argv"])
        lines.append(f"{env + ' ' if env else ''}/usr/bin/time -f '%M %U %S' {argv}")
    lines += ["```", ""]
    open(path, "w").write("\n".join(lines))


if __name__ == "__main__":
    main()
