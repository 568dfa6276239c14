#!/usr/bin/env bash
# `tidemark infer` on 1,000 sampled files: wall time and peak RSS, once per dataset.
#
# Usage: bench/infer/run.sh [TIDEMARK_BIN]
#   TIDEMARK_BIN: a release build of the CLI (default target/release/tidemark; build it with
#   `cargo build --release -p tidemark-cli`).
#
# Datasets (generated into .local/bench-infer/, kept for the next run):
#   orders: 1,000 CSV files of 1,000 order rows each (59 MB), written by a seeded generator here;
#   cloudtrail: 1,000 JSON Lines files of 200 CloudTrail records each (296 MB), the nested
#   benchmark's generator (tests/fixtures/nested/generate.py) split in 1,000.
# Each run reads its share of --sample-bytes (64 MiB) of every file, then converts all 1,000
# files whole under the proposal (the proof), so the time covers both.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
BIN="${1:-target/release/tidemark}"
DATA=.local/bench-infer
[ -x "$BIN" ] || { echo "no binary at $BIN: cargo build --release -p tidemark-cli" >&2; exit 2; }

if [ ! -d "$DATA/orders" ]; then
    mkdir -p "$DATA/orders"
    python3 - "$DATA/orders" <<'PY'
import os, random, sys
random.seed(7)
statuses = ["paid", "shipped", "cancelled", "refunded"]
oid = 0
for f in range(1000):
    with open(os.path.join(sys.argv[1], f"orders-{f:04d}.csv"), "w") as out:
        out.write("order_id,customer,status,quantity,amount,ordered_at\n")
        for _ in range(1000):
            oid += 1
            out.write(f"{oid},customer {random.randint(1, 50000)},{random.choice(statuses)},"
                      f"{random.randint(1, 20)},{random.randint(100, 99999) / 100:.2f},"
                      f"2026-11-{random.randint(1, 28):02d}T{random.randint(0, 23):02d}:"
                      f"{random.randint(0, 59):02d}:{random.randint(0, 59):02d}Z\n")
PY
fi
if [ ! -d "$DATA/cloudtrail" ]; then
    python3 tests/fixtures/nested/generate.py --out "$DATA/gen" --records 200000 --datasets cloudtrail
    mkdir -p "$DATA/cloudtrail"
    split -l 200 -d -a 4 --additional-suffix=.jsonl "$DATA/gen/cloudtrail.jsonl" "$DATA/cloudtrail/part-"
    rm -rf "$DATA/gen"
fi

for set in orders cloudtrail; do
    log="$DATA/$set.time"
    /usr/bin/time -v "$BIN" --json infer "$DATA/$set" > "$DATA/$set.json" 2> "$log"
    wall=$(grep 'Elapsed (wall clock)' "$log" | awk '{print $NF}')
    rss=$(grep 'Maximum resident' "$log" | awk '{print $NF}')
    cpu=$(grep -E 'User time|System time' "$log" | awk '{s += $NF} END {print s}')
    checked=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['checked'], len(r['files']), sum(f['converted_rows'] or 0 for f in r['files']))" "$DATA/$set.json")
    echo "$set: wall $wall, CPU ${cpu} s, peak RSS $((rss / 1024)) MB; checked, files, rows converted: $checked"
done
