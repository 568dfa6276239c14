#!/usr/bin/env bash
# Package the Lambdas: cargo-lambda (from PyPI, into .local/venv-lambda; zig comes with it)
# builds every function for arm64 (Graviton) in release, as zips ready for `sam deploy` or
# `cargo lambda deploy`, and prints their sizes.
#
# Usage: infra/package.sh [extra cargo lambda build flags]
# Output: target/lambda/{ingest,reconcile,backfill,publish}/bootstrap.zip
# The publish zip is deployed twice: as the publish function (the Delta Lake committer) and,
# with TIDEMARK_MAINTENANCE=1, as the maintenance function (daily compaction of closed
# partitions, checkpoint, log cleanup after 30 days, VACUUM after 7 days keeping the files the
# ledger names; one run at a time). template.yaml's MaintainFunction points at the same crate.
#
# A clean release build of the AWS SDK takes ≈25 min on 2 busy cores (LTO, one codegen unit);
# publish adds delta-rs (through tidemark-delta, shared/delta: its S3 store, no DataFusion) and
# its own arrow.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.local/venv-lambda"

if [[ ! -x "$VENV/bin/cargo-lambda" ]]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check cargo-lambda
fi
# cargo-lambda finds zig through the virtualenv's python: keep the venv first on PATH.
export PATH="$VENV/bin:$PATH"
rustup target list --installed | grep -qx aarch64-unknown-linux-gnu ||
    rustup target add aarch64-unknown-linux-gnu

cargo lambda build --release --arm64 --output-format zip \
    -p ingest -p reconcile -p backfill -p publish "$@"

echo
echo "function    zip bytes  bootstrap bytes (unzipped)"
for f in ingest reconcile backfill publish; do
    zip="target/lambda/$f/bootstrap.zip"
    unzipped=$(unzip -l "$zip" | awk 'END {print $1}')
    printf '%-10s %10s  %10s\n' "$f" "$(stat -c %s "$zip")" "$unzipped"
done
echo "(the publish zip is also the maintenance function's)"
