#!/usr/bin/env bash
# Partitioned writes: one 1M-row object (the orders dataset, CSV) into 1, 10 and 100
# partitions, by tidemark (the split ingest makes under `partitioning: {"columns": …}`),
# against its own unpartitioned conversion, DuckDB's `COPY … (PARTITION_BY …)` and pyarrow's
# `dataset.write_dataset(partitioning=…)`; every engine on one thread, zstd level 3; CPU
# (user + system) and peak RSS (`/usr/bin/time`) per run, medians. One command:
#
#   bench/partition/run.sh
#
# Environment (optional): BENCH_ROWS (1000000), BENCH_RUNS (3), BENCH_PARTITIONS ("1 10 100").
# Uses .local/venv-bench (pyarrow, duckdb: made by bench/run.sh or here) and the release
# build of bench/ (tidemark-bench, without the AWS SDK, in bench/target).
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
cargo build --release --quiet --manifest-path bench/Cargo.toml
exec "$venv/bin/python" bench/partition/run.py \
    --bench "${CARGO_TARGET_DIR:-$repo/bench/target}/release/tidemark-bench" \
    --rows "${BENCH_ROWS:-1000000}" --runs "${BENCH_RUNS:-3}" \
    --partitions ${BENCH_PARTITIONS:-1 10 100}
