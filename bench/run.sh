#!/usr/bin/env bash
# The benchmark: tidemark's converter against pyarrow, DuckDB and polars, one thread each,
# on the same deterministic orders file, outputs verified equal. One command:
#
#   bench/run.sh
#
# Environment (all optional):
#   BENCH_ROWS=1000000   rows of the generated dataset (≈110 MB of CSV at 1M)
#   BENCH_RUNS=5         measured runs per engine and case (after one warm-up)
#   BENCH_ENGINES=...    comma list of tidemark,pyarrow,pyarrow-stream,duckdb,polars
#   BENCH_CASES=...      comma list of csv,csv.gz,jsonl,jsonl.gz
#   BENCH_COLD_RUNS=20   runs of each start-up command
#   BENCH_RSS=time|wait4 how peak RSS is taken (default: /usr/bin/time when present)
#
# What it does: makes .local/venv-bench with pyarrow, duckdb, polars and boto3 (skipping
# any that cannot be installed, with a message); builds bench/ (tidemark-bench) in
# release with the Lambda's profile and without the AWS SDK, in bench/target; generates
# the dataset once into .local/bench-data/ (cached by row count and generator source);
# runs bench/harness.py, which prints the markdown table and writes it, with every
# sample, to .local/bench-results/<UTC time>.{md,json}.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
rows="${BENCH_ROWS:-1000000}"
venv="$repo/.local/venv-bench"

say() { printf 'bench: %s\n' "$*" >&2; }

# --- Python engines
if [ ! -x "$venv/bin/python" ]; then
    say "creating $venv"
    python3 -m venv "$venv"
fi
for pkg in pyarrow duckdb polars boto3; do
    if ! "$venv/bin/python" -c "import $pkg" 2>/dev/null; then
        say "installing $pkg into $venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check "$pkg" ||
            say "could not install $pkg: the runs that need it are skipped"
    fi
done
if ! "$venv/bin/python" -c "import pyarrow" 2>/dev/null; then
    say "pyarrow is required (it reads every engine's output back to verify it); giving up"
    exit 1
fi

# --- peak RSS: GNU time if it can be had, else os.wait4's rusage (see harness.py)
if [ ! -x /usr/bin/time ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing GNU time"
    { apt-get install -y -qq time || { apt-get update -qq && apt-get install -y -qq time; }; } >/dev/null 2>&1 ||
        say "could not install GNU time: peak RSS comes from os.wait4"
fi

# --- the Rust side, release, outside the main workspace (its own target/)
say "building bench/ (release)"
cargo build --release --quiet --manifest-path bench/Cargo.toml
bin="$repo/bench/target/release/tidemark-bench"

# --- the dataset, generated once per row count and generator version
key="$(cat bench/src/main.rs bench/schema.json | sha256sum | cut -c1-12)"
data="$repo/.local/bench-data/rows-$rows-$key"
if [ ! -f "$data/expected.json" ]; then
    say "generating $rows rows into $data"
    "$bin" gen --rows "$rows" --out "$data" >&2
fi

say "load before the run: $(uptime)"
exec "$venv/bin/python" bench/harness.py --bin "$bin" --data "$data" \
    --work "$repo/.local/bench-out" --results "$repo/.local/bench-results"
