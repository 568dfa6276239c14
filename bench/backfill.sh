#!/usr/bin/env bash
# The backfill fleet at scale: N small objects backfilled by 1, 2, 4 and 8 workers, on the
# local stack (the release ingest binary behind a Lambda Runtime API, N worker processes on
# moto's SQS; at-least-once chaos: redelivered messages and killed workers) and on the
# embedded backends (`tidemark backfill --workers W`), every object checked exactly once
# (ledger = lake = source, rows and sums). One command:
#
#   bench/backfill.sh
#
# Environment (all optional):
#   BENCH_OBJECTS=100000       objects (3-7 order rows each, ~250 bytes)
#   BENCH_WORKERS="1 2 4 8"    worker counts
#   BENCH_BACKENDS="aws local" which pairs
#   BENCH_CHAOS=1              0: no redelivery and no kills on the local stack
#   BENCH_CONCURRENCY=2        objects each worker invocation processes at once (the
#                              template's ObjectConcurrency default; TIDEMARK_CONCURRENCY)
#
# It builds target/release/{ingest,tidemark} (the Lambda's release profile: ≈25 min from
# clean on 2 cores) and bench/fleet in release, starts the local stack (infra/localstack.sh)
# and runs bench/backfill.py, which prints a markdown table and writes every figure to
# .local/bench-backfill/<UTC time>/results.json. Exit 1 if any run is not exact.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
say() { printf 'backfill-bench: %s\n' "$*" >&2; }

say "building the release binaries (ingest, tidemark) and the fleet"
cargo build --release -p ingest -p tidemark-cli
(cd bench/fleet && cargo build --release)

[[ -x .local/venv/bin/python ]] || bash infra/localstack.sh install
if [[ " ${BENCH_BACKENDS:-aws local} " == *" aws "* ]]; then
    bash infra/localstack.sh start >/dev/null
    # shellcheck source=/dev/null
    . .local/stack.env
fi
exec .local/venv/bin/python bench/backfill.py
