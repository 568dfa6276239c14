"""Partitioned writes, measured: see run.sh. Each engine runs as a child process; its CPU
(user + system) and peak RSS come from wait4. Every engine's output is read back by DuckDB
(hive partitioning) and must hold the same rows per partition."""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORK = os.path.join(REPO, ".local", "bench-partition")

DUCKDB = r"""
import duckdb, sys, json
con = duckdb.connect()
con.execute("SET threads = 1")
columns = sys.argv[3]
con.execute(f"COPY (SELECT * FROM read_csv('{sys.argv[1]}', header = true, columns = {columns}))"
            f" TO '{sys.argv[2]}' (FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 3,"
            f" PARTITION_BY (p))")
"""

PYARROW = r"""
import pyarrow as pa, pyarrow.csv as csv, pyarrow.dataset as ds, sys, json
pa.set_cpu_count(1); pa.set_io_thread_count(1)
types = {"int64": pa.int64(), "int32": pa.int32(), "float64": pa.float64(),
         "string": pa.string(), "timestamp": pa.timestamp("us", tz="UTC")}
schema = json.loads(sys.argv[3])
convert = csv.ConvertOptions(column_types={c["name"]: types[c["type"]] for c in schema})
table = csv.read_csv(sys.argv[1], read_options=csv.ReadOptions(use_threads=False),
                     convert_options=convert)
fmt = ds.ParquetFileFormat()
ds.write_dataset(table, sys.argv[2], format="parquet", partitioning=["p"],
                 partitioning_flavor="hive", use_threads=False,
                 file_options=fmt.make_write_options(compression="zstd", compression_level=3),
                 existing_data_behavior="overwrite_or_ignore")
"""

DUCK_TYPES = {"int64": "BIGINT", "int32": "INTEGER", "float64": "DOUBLE", "string": "VARCHAR",
              "timestamp": "TIMESTAMPTZ"}


def measure(argv):
    """Run argv under /usr/bin/time (a forked Python child would count its parent's pages in
    its peak RSS); (wall seconds, CPU seconds, peak RSS MiB)."""
    report = os.path.join(WORK, "time.txt")
    done = subprocess.run(["/usr/bin/time", "-f", "%e %U %S %M", "-o", report, *argv],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if done.returncode != 0:
        sys.exit(f"{argv[0]} failed: {done.stderr.decode()}")
    wall, user, system, rss_kib = open(report).read().split()[-4:]
    return float(wall), float(user) + float(system), int(rss_kib) / 1024


def per_partition(out_dir):
    import duckdb
    rows = duckdb.sql(
        f"SELECT p, count(*) FROM read_parquet('{out_dir}/**/*.parquet', hive_partitioning = true,"
        f" hive_types_autocast = false) GROUP BY p ORDER BY p").fetchall()
    return [(str(p), n) for p, n in rows]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--partitions", type=int, nargs="+", default=[1, 10, 100])
    args = ap.parse_args()
    os.makedirs(WORK, exist_ok=True)
    data = os.path.join(WORK, f"orders-{args.rows}")
    if not os.path.exists(os.path.join(data, "orders.csv")):
        subprocess.run([args.bench, "gen", "--rows", str(args.rows), "--out", data], check=True)
    schema = json.load(open(os.path.join(REPO, "bench", "schema.json")))
    schema_p = schema + [{"name": "p", "type": "string", "nullable": False}]
    schema_file = os.path.join(WORK, "schema-p.json")
    json.dump(schema_p, open(schema_file, "w"))
    duck_columns = "{" + ", ".join(f"'{c['name']}': '{DUCK_TYPES[c['type']]}'" for c in schema_p) + "}"
    import duckdb
    results = []
    for n in args.partitions:
        src = os.path.join(WORK, f"orders-p{n}.csv")
        if not os.path.exists(src):
            duckdb.sql(
                f"COPY (SELECT *, (order_id::BIGINT % {n})::VARCHAR AS p FROM read_csv('{data}/orders.csv',"
                f" header = true, all_varchar = true)) TO '{src}' (HEADER)")
        engines = {
            "tidemark, unpartitioned": lambda out: [
                args.bench, "convert", "--format", "csv", "--compression", "none",
                "--schema", schema_file, src, out + ".parquet"],
            "tidemark": lambda out: [
                args.bench, "partition", "--format", "csv", "--compression", "none",
                "--schema", schema_file, "--by", "p", src, out],
            "duckdb": lambda out: [sys.executable, "-c", DUCKDB, src, out, duck_columns],
            "pyarrow": lambda out: [sys.executable, "-c", PYARROW, src, out, json.dumps(schema_p)],
        }
        reference = None
        for name, argv in engines.items():
            samples = []
            for _ in range(args.runs + 1):  # the first run warms the page cache
                out = os.path.join(WORK, "out")
                shutil.rmtree(out, ignore_errors=True)
                if os.path.exists(out + ".parquet"):
                    os.remove(out + ".parquet")
                samples.append(measure(argv(out)))
            samples = samples[1:]
            if name != "tidemark, unpartitioned":
                got = per_partition(out)
                reference = reference or got
                if got != reference or len(got) != n:
                    sys.exit(f"{name}: {len(got)} partitions, rows differ from the others")
            files = sum(len(f) for _, _, f in os.walk(out)) if os.path.isdir(out) else 1
            results.append({
                "partitions": n, "engine": name, "files": files,
                "wall": statistics.median(s[0] for s in samples),
                "cpu": statistics.median(s[1] for s in samples),
                "rss_mib": statistics.median(s[2] for s in samples),
            })
            print(json.dumps(results[-1]), file=sys.stderr)
    print("| partitions | engine | CPU s (median) | vs tidemark | peak RSS MiB | files |")
    print("|---:|---|---:|---:|---:|---:|")
    for n in args.partitions:
        ours = next(r for r in results if r["partitions"] == n and r["engine"] == "tidemark")
        for r in (r for r in results if r["partitions"] == n):
            print(f"| {n} | {r['engine']} | {r['cpu']:.2f} | {r['cpu'] / ours['cpu']:.2f}× |"
                  f" {r['rss_mib']:.0f} | {r['files']} |")


if __name__ == "__main__":
    main()
