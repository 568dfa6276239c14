#!/usr/bin/env bash
# Cold start of the ingest Lambda binary against a fake Lambda Runtime API, compared with a
# Python handler importing boto3 + pyarrow, on this machine. One command:
#
#   bench/coldstart.sh
#
# Environment (all optional):
#   COLDSTART_RUNS=30    measured runs of each process (after one warm-up)
#   COLDSTART_BIN=PATH   measure this ingest binary instead of building one
#   CARGO_TARGET_DIR     where the release build goes (default .local/coldstart-target, so that
#                        it never waits for the lock of the main target/)
#
# What it does: builds functions/ingest in release with the workspace's release profile (the
# Lambda's: LTO, one codegen unit, stripped, panic = "abort") for this machine (x86_64 here;
# the Lambda is arm64, see infra/package.sh); makes .local/venv-bench with boto3 and pyarrow if
# it is missing; runs bench/coldstart.py, which prints the markdown table and writes it, with
# every sample, to .local/bench-results/<UTC time>-coldstart.{md,json}. The first release build
# compiles the AWS SDK: ≈25 min on 2 busy cores.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
venv="$repo/.local/venv-bench"

say() { printf 'coldstart: %s\n' "$*" >&2; }

if [ ! -x "$venv/bin/python" ]; then
    say "creating $venv"
    python3 -m venv "$venv"
fi
for pkg in boto3 pyarrow; do
    if ! "$venv/bin/python" -c "import $pkg" 2>/dev/null; then
        say "installing $pkg into $venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check "$pkg"
    fi
done

if [ -n "${COLDSTART_BIN:-}" ]; then
    bin="$COLDSTART_BIN"
else
    target="${CARGO_TARGET_DIR:-$repo/.local/coldstart-target}"
    say "building functions/ingest (release) into $target"
    CARGO_TARGET_DIR="$target" cargo build --release --quiet -p ingest
    bin="$target/release/ingest"
fi

say "binary: $bin ($(stat -c %s "$bin") bytes)"
say "load before the run: $(uptime)"
exec "$venv/bin/python" bench/coldstart.py --bin "$bin" --python "$venv/bin/python" \
    --runs "${COLDSTART_RUNS:-30}" --results "$repo/.local/bench-results"
