#!/usr/bin/env bash
# The benchmark: tidemark's converter against pyarrow, DuckDB and polars, one thread each,
# on the same file, outputs verified equal value by value. One command:
#
#   bench/run.sh
#
# Environment (all optional):
#   BENCH_DATASET=orders the generated dataset: orders (11 columns, no NULLs) or wide
#                        (30 columns, NULLs, long strings, decimals; see bench/src/wide.rs)
#   BENCH_DATA=DIR       instead, an external dataset: DIR/data.csv and/or DIR/data.jsonl
#                        (the .gz versions are used from DIR when there, else made once
#                        under .local/bench-data/); DIR/expected.json is optional
#   BENCH_SCHEMA=FILE    its columns, in bench/schema.json's format (default DIR/schema.json);
#                        tidemark and every peer get them as the explicit schema
#   BENCH_ROWS=1000000   rows of the generated dataset (≈110 MB of CSV at 1M for orders)
#   BENCH_RUNS=5         measured runs per engine and case (after one warm-up)
#   BENCH_ENGINES=...    comma list of tidemark,pyarrow,pyarrow-stream,duckdb,polars
#   BENCH_CASES=...      comma list of csv,csv.gz,jsonl,jsonl.gz
#   BENCH_COLD_RUNS=20   runs of each start-up command
#   BENCH_RSS=time|wait4 how peak RSS is taken (default: /usr/bin/time when present)
#   BENCH_THREADS=1      1: every engine on one thread; 2: tidemark --threads 2 (one
#                        decoding, columns encoded on both) against every peer at its default thread count
#
# What it does: makes .local/venv-bench with pyarrow, duckdb, polars and boto3 (skipping
# any that cannot be installed, with a message); builds bench/ (tidemark-bench) in
# release with the Lambda's profile and without the AWS SDK, in bench/target (or
# $CARGO_TARGET_DIR); generates the dataset once into .local/bench-data/ (cached by
# dataset, row count and generator source); runs bench/harness.py, which prints the
# markdown table and writes it, with every sample, to .local/bench-results/<UTC time>.{md,json}.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
rows="${BENCH_ROWS:-1000000}"
dataset="${BENCH_DATASET:-orders}"
venv="$repo/.local/venv-bench"

say() { printf 'bench: %s\n' "$*" >&2; }

case "$dataset" in
    orders | wide) ;;
    *) say "BENCH_DATASET must be orders or wide, not $dataset"; exit 1 ;;
esac
if [ -n "${BENCH_DATA:-}" ]; then
    external="$(cd "$BENCH_DATA" && pwd)"
    schema="${BENCH_SCHEMA:-$external/schema.json}"
    [ -f "$schema" ] || { say "no schema: set BENCH_SCHEMA (no $schema)"; exit 1; }
    schema="$(cd "$(dirname "$schema")" && pwd)/$(basename "$schema")"
    [ -f "$external/data.csv" ] || [ -f "$external/data.jsonl" ] ||
        { say "$external has neither data.csv nor data.jsonl"; exit 1; }
fi

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
bin="${CARGO_TARGET_DIR:-$repo/bench/target}/release/tidemark-bench"

if [ -n "${BENCH_DATA:-}" ]; then
    # --- an external dataset: its files as they are, the missing .gz versions made once
    data="$repo/.local/bench-data/external-$(printf '%s' "$external" | sha256sum | cut -c1-12)"
    mkdir -p "$data"
    for name in data.csv data.jsonl expected.json; do
        rm -f "$data/$name"
        [ ! -f "$external/$name" ] || ln -s "$external/$name" "$data/$name"
    done
    for name in data.csv data.jsonl; do
        if [ -f "$external/$name.gz" ]; then
            rm -f "$data/$name.gz"
            ln -s "$external/$name.gz" "$data/$name.gz"
        elif [ -f "$external/$name" ] && { [ ! -f "$data/$name.gz" ] || [ -L "$data/$name.gz" ] ||
                                           [ "$external/$name" -nt "$data/$name.gz" ]; }; then
            say "compressing $external/$name into $data/$name.gz (gzip -6)"
            rm -f "$data/$name.gz"
            gzip -6 -c "$external/$name" >"$data/$name.gz.tmp"
            mv "$data/$name.gz.tmp" "$data/$name.gz"
        fi
    done
    set -- --data "$data" --stem data --schema "$schema" --label "external $external (schema $schema)"
else
    # --- the dataset, generated once per dataset, row count and generator version
    key="$(cat bench/src/*.rs bench/schema.json bench/schema-wide.json | sha256sum | cut -c1-12)"
    data="$repo/.local/bench-data/$dataset-rows-$rows-$key"
    if [ ! -f "$data/expected.json" ]; then
        say "generating $rows rows of $dataset into $data"
        "$bin" gen --dataset "$dataset" --rows "$rows" --out "$data" >&2
    fi
    set -- --data "$data" --stem "$dataset"
fi

say "load before the run: $(uptime)"
exec "$venv/bin/python" bench/harness.py --bin "$bin" "$@" \
    --work "$repo/.local/bench-out" --results "$repo/.local/bench-results"
