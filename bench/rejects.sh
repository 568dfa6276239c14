#!/usr/bin/env bash
# The cost of `on_bad_row: "reject"`: tidemark-bench convert on the orders dataset (1M rows
# by default), clean and with the first digit of every Nth line spoiled (N = 10000, 1000,
# 100; CSV: an unparsable order_id, JSON Lines: an invalid JSON line), under both policies.
# Prints the median wall and CPU time of BENCH_RUNS runs (default 5) of each case, the
# rows landed and rejected, and the ratio to the clean file under policy fail.
#
#   bench/rejects.sh                     # the full run (≈10 min)
#   BENCH_ROWS=100000 BENCH_RUNS=2 bench/rejects.sh   # a quick check
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${BENCH_ROWS:-1000000}
RUNS=${BENCH_RUNS:-5}
cargo build --release --quiet --manifest-path bench/Cargo.toml
BIN="${CARGO_TARGET_DIR:-bench/target}/release/tidemark-bench"
DATA=.local/bench-data/rejects-$ROWS
OUT=.local/bench-out
mkdir -p "$DATA" "$OUT"
[ -f "$DATA/orders.jsonl" ] || "$BIN" gen --rows "$ROWS" --out "$DATA" >/dev/null
for fmt in csv jsonl; do
    for every in 10000 1000 100; do
        [ -f "$DATA/spoiled-$every.$fmt" ] ||
            "$BIN" spoil --every "$every" "$DATA/orders.$fmt" "$DATA/spoiled-$every.$fmt" >/dev/null
    done
done
python3 - "$BIN" "$DATA" "$OUT" "$RUNS" <<'PY'
import json, os, statistics, subprocess, sys, time

binary, data, out, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def once(args):
    start = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE)
    stdout = proc.stdout.read()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        sys.exit(f"failed: {' '.join(args)}")
    return wall, ru.ru_utime + ru.ru_stime, json.loads(stdout)

print(f"{runs} runs each; load {os.getloadavg()[0]:.2f} at the start")
print(f"{'format':6} {'input':22} {'policy':7} {'rows':>9} {'rejected':>9} {'wall s':>7} {'cpu s':>7} {'x clean':>8}")
for fmt in ("csv", "jsonl"):
    base = None
    for name, policy in [("orders", "fail"), ("orders", "reject"), ("spoiled-10000", "reject"),
                         ("spoiled-1000", "reject"), ("spoiled-100", "reject")]:
        args = [binary, "convert", "--format", fmt, "--compression", "none",
                "--bad-rows", policy, f"{data}/{name}.{fmt}", f"{out}/rejects.parquet"]
        results = [once(args) for _ in range(runs)]
        wall = statistics.median(r[0] for r in results)
        cpu = statistics.median(r[1] for r in results)
        stats = results[0][2]
        base = base or wall
        label = "clean" if name == "orders" else f"1 bad in {name.split('-')[1]}"
        print(f"{fmt:6} {label:22} {policy:7} {stats['rows']:>9} {stats['rejected']:>9} "
              f"{wall:>7.3f} {cpu:>7.3f} {wall / base:>7.2f}x", flush=True)
print(f"load {os.getloadavg()[0]:.2f} at the end")
PY
