#!/usr/bin/env bash
# The sample job: tidemark's ingest handler on a sample SQS batch of S3 events, against the
# local stack (DynamoDB Local + the S3 emulator, started if needed), then the outputs and the
# ledger. It resets the local stack's default table and buckets first, so every run starts
# from an empty ledger.
#
# Usage: infra/sample.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

bash infra/localstack.sh start >/dev/null
bash infra/localstack.sh reset
# shellcheck disable=SC1091
. .local/stack.env
export TIDEMARK_CONFIG_FILE="$ROOT/infra/sample/sources.json"
export TIDEMARK_BACKEND=aws

# Land the sample files in the landing bucket; the events in infra/sample/events name them
# with their real ETags.
.local/venv/bin/python - "$ROOT/infra/sample/landing" "$TIDEMARK_LANDING_BUCKET" <<'PY'
import os, sys
import boto3

root, bucket = sys.argv[1:3]
s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"])
for dirpath, _, files in os.walk(root):
    for name in sorted(files):
        path = os.path.join(dirpath, name)
        key = os.path.relpath(path, root)
        s3.upload_file(path, bucket, key)
        print(f"landed s3://{bucket}/{key}")
PY

cargo build -p tidemark-cli   # progress shown: the first build takes minutes
tm() { "$ROOT/target/debug/tidemark" "$@"; }
if [[ -t 1 ]]; then
    step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
    step() { printf '\n== %s\n' "$*"; } # no escape codes in a file or a pipe
fi

step "1. ingest an SQS batch: a test event and four S3 notifications (one file is malformed)"
tm invoke ingest --event infra/sample/events/sqs-batch.json || true
step "2. the same batch delivered again: the three good files are duplicates, the bad one fails again"
tm invoke ingest --event infra/sample/events/sqs-batch.json || true
step "3. a third delivery: the bad file is quarantined (max_attempts 3) and the batch is acknowledged"
tm invoke ingest --event infra/sample/events/sqs-batch.json
step "4. the lake: one Parquet file per source object"
tm outputs orders
tm outputs clicks
step "5. the ledger: a committed object and the quarantined one"
tm explain orders orders/2026/11/29/orders-0002.csv.gz
echo
tm explain orders orders/2026/11/29/orders-0003.csv
