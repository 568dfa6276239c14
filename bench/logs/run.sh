#!/usr/bin/env bash
# The line-log benchmark: tidemark's presets (`"format": "regex"`) against DuckDB and pyarrow on
# AWS's logs, one thread each, zstd 3 Parquet. Two generators unlike each other
# (tests/fixtures/aws/generate.py): Application Load Balancer logs (the preset aws.alb; 30
# space-separated fields, quoted ones with escapes, `client:port` and the request split) and
# S3 server access logs (aws.s3_access; bracketed times with offsets, four eras of fields).
# One command:
#
#   bench/logs/run.sh
#
# Environment (all optional):
#   BENCH_LINES=1000000  lines per dataset
#   BENCH_RUNS=3         measured runs per engine (after one warm-up); medians
#   BENCH_BIN=PATH       a tidemark-bench binary instead of building bench/ (release)
#   BENCH_RESULTS=DIR    where logs-<UTC time>.md and .json go (default .local/bench-results)
#   BENCH_CPU=K|none     the CPU every engine is pinned to (default the last one)
#
# The peers (bench/logs/peers.py): DuckDB's read_csv with a space delimiter, quotes and
# backslash escapes (ALB only: it reads fields as they stand, `client:port` and the request
# one field each, so it does less than the preset), pyarrow's CSV reader alike (it drops the
# line with a field appended after the documented ones), and DuckDB's regexp_extract with the
# preset's own pattern (the same fields as the preset).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
lines="${BENCH_LINES:-1000000}"
venv="$repo/.local/venv-bench"
say() { printf 'bench: %s\n' "$*" >&2; }

if [ ! -x "$venv/bin/python" ]; then
    say "creating $venv"
    python3 -m venv "$venv"
fi
for pkg in pyarrow duckdb; do
    "$venv/bin/python" -c "import $pkg" 2>/dev/null ||
        "$venv/bin/pip" install --quiet --disable-pip-version-check "$pkg"
done
if [ -n "${BENCH_BIN:-}" ]; then
    bin="$BENCH_BIN"
else
    bin="${CARGO_TARGET_DIR:-$repo/bench/target}/release/tidemark-bench"
    say "building bench/ (release)"
    cargo build --release --quiet --manifest-path bench/Cargo.toml
fi

key="$(sha256sum <tests/fixtures/aws/generate.py | cut -c1-12)"
data="$repo/.local/bench-data/logs-$lines-$key"
if [ ! -f "$data/s3_access.log" ]; then
    say "generating $lines lines of each log into $data"
    mkdir -p "$data"
    (cd tests/fixtures/aws && python3 - "$data" "$lines" <<'PY'
import glob, gzip, math, os, shutil, sys
import generate
out, lines = sys.argv[1], int(sys.argv[2])
for name, per_scale in (("alb", 150), ("s3_access", 80)):
    getattr(generate, name)(out, math.ceil(lines / per_scale))
    (path,) = [p for p in glob.glob(f"{out}/{name}/**/*", recursive=True) if os.path.isfile(p)]
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f, open(f"{out}/{name}.log", "wb") as g:
        shutil.copyfileobj(f, g)
    shutil.rmtree(f"{out}/{name}")
    with open(f"{out}/{name}.preset.json", "w") as f:
        f.write('{"preset": "aws.%s", "compression": "none", "output": {}}\n' % name)
PY
    )
fi
exec python3 bench/logs/harness.py --bin "$bin" --python "$venv/bin/python" --data "$data" \
    --out "${BENCH_RESULTS:-$repo/.local/bench-results}" --runs "${BENCH_RUNS:-3}" \
    --cpu "${BENCH_CPU:-$(($(nproc) - 1))}"
