#!/usr/bin/env bash
# The ingest function's memory, measured (issue 47): the peak RSS of the worst shapes at growing
# object sizes, until it levels off, and of the whole per-object path. One command:
#
#   bench/memory/run.sh [OUT]        (OUT default: bench/memory/results/<UTC date>)
#
# Builds the release tidemark-bench (the functions' release profile; into BENCH_TARGET, default
# /tmp/tm-mem, so that it never waits on the workspace's target lock) unless BENCH_BIN names
# one, makes the inputs once into .local/bench-data/memory/ (≈17 GB: the wide dataset at 1M
# rows and its 2M and 4M repetitions, 1M CloudTrail records, 3M orders, their prefixes and the
# partitioned copies; the partitioned runs also spill up to ≈2.5 GB into TMPDIR), then runs
# bench/memory/measure.py, which writes OUT/peaks.json (every sample, with its command) and
# OUT/peaks.md. 30 minutes on 2 CPUs with BENCH_RUNS=1 once the inputs are made (2026-12-07);
# BENCH_NOTE=TEXT adds a line to the results (how the binary was built, what else ran).
#
# What runs, each process under `/usr/bin/time -f '%M %U %S'` (peak RSS, CPU), BENCH_RUNS times
# (default 3):
#   - the converter alone, on 2 threads (as the function converts on its 2 vCPUs) and on 1,
#     with glibc's malloc defaults: `tidemark-bench convert` on the wide dataset (CSV: 20,000
#     to 4,000,000 rows, 1 to 16 row groups of 64 MiB, the rows past 1,000,000 repeated; JSON
#     Lines: to 1,000,000) and on CloudTrail JSON Lines (30,000 to 1,000,000 records);
#     `tidemark-bench partition --by p` into 1,000 partitions of the wide rows and of the
#     orders, with p = id % 1000 appended (every batch spreads over every partition: the
#     partitioned writer's worst case, nearly every row waits and is spilled); then the
#     largest size of each shape again with the ingest function's GLIBC_TUNABLES (read from
#     template.yaml);
#   - the whole per-object path, `tidemark-bench ingest` (the ingest handler on folders and
#     SQLite: claim, pinned GET, conversion, 8 MiB upload parts or partition files, commit),
#     with the function's GLIBC_TUNABLES: one object at every size; at the largest size of
#     each shape 1 thread, two objects at once, `row_group_mib` 4 (the memory test's setting,
#     tests/tests/memory.rs), and one and two objects with glibc's defaults; a warm process
#     (8 objects, 2 at a time) of three shapes with either; and a 1,000-row object for the
#     process's own baseline.
#
# Environment (optional): BENCH_RUNS (3), BENCH_BIN (a tidemark-bench to use), BENCH_TARGET
# (/tmp/tm-mem), BENCH_DATA (.local/bench-data/memory), BENCH_QUICK=1 (two small sizes: a check
# of the harness in a few minutes).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
out="${1:-bench/memory/results/$(date -u +%Y-%m-%d)}"
bin="${BENCH_BIN:-}"
if [ -z "$bin" ]; then
    target="${BENCH_TARGET:-/tmp/tm-mem}"
    CARGO_TARGET_DIR="$target" cargo build --release --quiet --manifest-path bench/Cargo.toml
    bin="$target/release/tidemark-bench"
fi
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time)" >&2; exit 1; }
quick=()
[ "${BENCH_QUICK:-}" = 1 ] && quick=(--quick)
exec python3 bench/memory/measure.py --bin "$bin" --data "${BENCH_DATA:-.local/bench-data/memory}" \
    --out "$out" --runs "${BENCH_RUNS:-3}" "${quick[@]}"
