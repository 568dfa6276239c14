#!/usr/bin/env bash
# Partitioned writes: one object converted to Parquet and split into N Hive partitions
# (OUT/COL=VALUE/…) by tidemark (`tidemark-bench partition`: the split ingest makes under
# `partitioning: {"columns": …}`), against its own unpartitioned conversion, DuckDB's
# `COPY … (PARTITION_BY …)` and pyarrow's `dataset.write_dataset(partitioning=…)`; every engine
# on one thread, zstd level 3; CSV and JSON Lines input; N = 1, 10, 100, 1000; two datasets:
#   orders  `tidemark-bench gen` + p = order_id % N (a string: rows spread evenly);
#   events  bench/partition/events.py: web/app events, 20 columns, NULLs, long quoted and
#           escaped strings, offsets; partition column `tenant`, Zipf-skewed over N values.
# CPU (user + sys), wall and peak RSS (/usr/bin/time) per run; medians of BENCH_RUNS runs after
# one warm-up (one run for an engine whose warm-up took over BENCH_SLOW CPU seconds), engines interleaved per round, input read (untimed) before each run. Every
# engine's output is read back by DuckDB and compared with tidemark's value by value (EXCEPT
# ALL both ways over all columns), rows per partition with the input's, and the partition
# directories counted; a difference fails the run (exit 1). One command:
#
#   bench/partition/run.sh
#
# Environment (all optional):
#   BENCH_ROWS=1000000             rows per input (events: ~300 MB CSV, ~540 MB JSON Lines)
#   BENCH_RUNS=3                   measured runs per engine and cell
#   BENCH_PARTITIONS="1 10 100 1000"
#   BENCH_FORMATS="csv jsonl"
#   BENCH_DATASETS="orders events"
#   BENCH_ENGINES="tidemark tidemark-whole duckdb pyarrow"   (tidemark is required)
#   BENCH_BIN=PATH                 a tidemark-bench binary to use instead of building bench/
#   BENCH_RESULTS=DIR              where partition-<UTC time>.md and .json go
#                                  (default .local/bench-results)
#   BENCH_RSS=time|wait4           how peak RSS is taken (default /usr/bin/time when present)
#   BENCH_CPU=K|none               the CPU every engine is pinned to with taskset (default the
#                                  last one)
#   BENCH_SLOW=60                  an engine whose warm-up takes more CPU seconds runs once
#
# Uses .local/venv-bench (pyarrow, duckdb: made by bench/run.sh or here); inputs are made once
# into .local/bench-data/partition/, outputs written to .local/bench-partition/out/.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
venv="$repo/.local/venv-bench"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
for pkg in pyarrow duckdb; do
    "$venv/bin/python" -c "import $pkg" 2>/dev/null ||
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$pkg"
done
if [ -n "${BENCH_BIN:-}" ]; then
    bin="$BENCH_BIN"
else
    cargo build --release --quiet --manifest-path bench/Cargo.toml
    bin="${CARGO_TARGET_DIR:-$repo/bench/target}/release/tidemark-bench"
fi
words() { tr ',' ' ' <<<"$1"; }
echo "partition: load before the run: $(uptime)" >&2
# shellcheck disable=SC2046  # the lists are words on purpose
exec "$venv/bin/python" bench/partition/run.py --bench "$bin" \
    --rows "${BENCH_ROWS:-1000000}" --runs "${BENCH_RUNS:-3}" --slow "${BENCH_SLOW:-60}" \
    --partitions $(words "${BENCH_PARTITIONS:-1 10 100 1000}") \
    --formats $(words "${BENCH_FORMATS:-csv jsonl}") \
    --datasets $(words "${BENCH_DATASETS:-orders events}") \
    --engines $(words "${BENCH_ENGINES:-tidemark tidemark-whole duckdb pyarrow}") \
    --results "${BENCH_RESULTS:-$repo/.local/bench-results}"
