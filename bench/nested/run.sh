#!/usr/bin/env bash
# The nested JSON benchmark: tidemark's converter against pyarrow and DuckDB on nested JSON
# Lines (struct, array, map, json and path columns), plain and gzip, one thread each, outputs
# compared value by value. Two datasets: CloudTrail-like records (the default) or device/app
# telemetry (deeper structs, arrays of scalars, maps, an array of structs holding arrays).
# One command:
#
#   bench/nested/run.sh
#   BENCH_DATASET=telemetry bench/nested/run.sh
#
# Environment (all optional):
#   BENCH_DATASET=cloudtrail  cloudtrail (tests/fixtures/nested/generate.py: 1.54 GB of JSON
#                        Lines at 1M, 0.19 GB gzipped) or telemetry (bench/nested/telemetry.py:
#                        about 1.3 GB at 1M)
#   BENCH_ROWS=1000000   records
#   BENCH_RUNS=3         measured runs per engine and case (after one warm-up); medians
#   BENCH_ENGINES=...    comma list of tidemark,pyarrow,duckdb
#   BENCH_CASES=...      comma list of jsonl,jsonl.gz (default), and JSON documents of the same
#                        records read as "format": "json": json,json.gz ({"Records":[...]} of
#                        1,000 records per line; DuckDB and pyarrow unnest the list), array (one
#                        top-level array), concat (records back to back, no delimiter)
#   BENCH_RSS=time|wait4 how peak RSS is taken (default: /usr/bin/time when present)
#   BENCH_BIN=PATH       a tidemark-bench binary to use instead of building bench/ (release)
#   BENCH_RESULTS=DIR    where nested-<UTC time>.md and .json go (default .local/bench-results)
#   BENCH_CPU=K|none     the CPU the harness and every engine are pinned to with taskset
#                        (default the last one)
#
# What it does: makes .local/venv-bench with pyarrow and duckdb (bench/run.sh's venv);
# builds bench/ (tidemark-bench) in release as bench/run.sh does, unless BENCH_BIN is set — a
# build that fails is reported and the peers still run; generates the records once into
# .local/bench-data/nested-<dataset>-<rows>-<generator hash>/ (<dataset>.jsonl, .jsonl.gz,
# <dataset>.schema.json); runs bench/nested/harness.py, which prints the table and writes it,
# with every sample, to .local/bench-results/nested-<UTC time>.{md,json}. If tidemark-bench
# cannot convert the file, the results say "tidemark: not available" and why, and the peers
# are compared with each other.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
rows="${BENCH_ROWS:-1000000}"
venv="$repo/.local/venv-bench"

say() { printf 'bench: %s\n' "$*" >&2; }

if [ ! -x "$venv/bin/python" ]; then
    say "creating $venv"
    python3 -m venv "$venv"
fi
for pkg in pyarrow duckdb; do
    if ! "$venv/bin/python" -c "import $pkg" 2>/dev/null; then
        say "installing $pkg into $venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check "$pkg"
    fi
done

if [ ! -x /usr/bin/time ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing GNU time"
    { apt-get install -y -qq time || { apt-get update -qq && apt-get install -y -qq time; }; } >/dev/null 2>&1 ||
        say "could not install GNU time: peak RSS comes from os.wait4"
fi

if [ -n "${BENCH_BIN:-}" ]; then
    bin="$BENCH_BIN"
else
    bin="${CARGO_TARGET_DIR:-$repo/bench/target}/release/tidemark-bench"
    say "building bench/ (release)"
    cargo build --release --quiet --manifest-path bench/Cargo.toml ||
        say "the build of tidemark-bench failed: tidemark is measured only if $bin exists"
fi

dataset="${BENCH_DATASET:-cloudtrail}"
case "$dataset" in
    cloudtrail) generator=tests/fixtures/nested/generate.py ;;
    telemetry) generator=bench/nested/telemetry.py ;;
    *) say "unknown BENCH_DATASET $dataset: cloudtrail or telemetry"; exit 2 ;;
esac
key="$(sha256sum <"$generator" | cut -c1-12)"
data="$repo/.local/bench-data/nested-$dataset-$rows-$key"
if [ ! -f "$data/$dataset.schema.json" ]; then
    say "generating $rows $dataset records into $data"
    rm -rf "$data.tmp"
    if [ "$dataset" = cloudtrail ]; then
        "$venv/bin/python" "$generator" --out "$data.tmp" --records "$rows" --datasets cloudtrail --gzip >&2
    else
        "$venv/bin/python" "$generator" --out "$data.tmp" --records "$rows" --gzip >&2
    fi
    mv "$data.tmp" "$data"
fi

# The JSON-document cases: the same records, 1,000 per {"Records":[...]} document, one per line.
case ",${BENCH_CASES:-}," in
    *,json,* | *,json.gz,* | *,array,* | *,concat,*)
        if [ ! -f "$data/$dataset.concat.json" ]; then
            say "writing $dataset.json, .json.gz, .array.json and .concat.json"
            "$venv/bin/python" - "$data/$dataset.jsonl" "$data/$dataset" <<'PY'
import gzip, sys
src, stem = sys.argv[1], sys.argv[2]
with open(src, encoding="utf-8") as f, open(stem + ".json.tmp", "w", encoding="utf-8") as docs, \
        gzip.open(stem + ".json.gz.tmp", "wt", encoding="utf-8", compresslevel=6) as gz, \
        open(stem + ".array.json.tmp", "w", encoding="utf-8") as array, \
        open(stem + ".concat.json.tmp", "w", encoding="utf-8") as concat:
    batch = []
    def flush():
        if batch:
            doc = '{"Records":[' + ",".join(batch) + "]}\n"
            docs.write(doc)
            gz.write(doc)
            batch.clear()
    array.write("[")
    for n, line in enumerate(f):
        record = line.rstrip("\n")
        batch.append(record)
        if len(batch) == 1000:
            flush()
        array.write(("," if n else "") + record)
        concat.write(record)
    flush()
    array.write("]\n")
PY
            for s in json json.gz array.json concat.json; do mv "$data/$dataset.$s.tmp" "$data/$dataset.$s"; done
        fi
        ;;
esac

say "load before the run: $(uptime)"
# Every engine on one CPU (its children inherit the harness's affinity), as bench/partition.
cpu="${BENCH_CPU:-$(($(nproc) - 1))}"
pin=()
[ "$cpu" != none ] && command -v taskset >/dev/null && pin=(taskset -c "$cpu")
exec "${pin[@]}" "$venv/bin/python" bench/nested/harness.py --bin "$bin" --data "$data" --stem "$dataset" \
    --work "$repo/.local/bench-out" --results "${BENCH_RESULTS:-$repo/.local/bench-results}"
