#!/usr/bin/env bash
# The soak run (BENCHMARKS.md, "Soak"): the ingest handler fed continuously for MINUTES
# (default 60) on the local stack, its RSS, open file descriptors, temporary-file bytes and
# handler latency sampled every 10 s, then plotted.
#
#   bench/soak/run.sh [MINUTES] [OUT]     (OUT default: bench/soak/results/<UTC date>)
#
# Starts the local stack (infra/localstack.sh) and builds the harness (tests/src/bin/soak.rs,
# a debug build: the suites' profile) first. The run gets a temporary directory of its own,
# so the bytes it leaves there are measured.
set -euo pipefail
cd "$(dirname "$0")/../.."
minutes=${1:-60}
out=${2:-bench/soak/results/$(date -u +%Y-%m-%d)}
bash infra/localstack.sh start >/dev/null
# shellcheck disable=SC1091
. .local/stack.env
cargo build -p tidemark-tests --bin soak
mkdir -p "$out/tmp"
TMPDIR="$PWD/$out/tmp" ./target/debug/soak --minutes "$minutes" --out "$out"
rmdir "$out/tmp" 2>/dev/null || echo "files left in $out/tmp: $(du -sh "$out/tmp" | cut -f1)"
python3 bench/soak/plot.py "$out/soak.csv" "$out/soak.svg"
echo "plot: $out/soak.svg"
