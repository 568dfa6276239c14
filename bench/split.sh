#!/usr/bin/env bash
# Where each engine's CPU goes: decoding against encoding. Every engine converts each file
# as in bench/run.sh, and also decodes it alone into memory (tidemark-bench / engines.py
# with OUT `-`); encoding is the difference. The last column is what tidemark's throughput
# against the fastest peer would be if its decoding cost nothing: the most a faster
# decoder alone can give, with tidemark's Parquet writer and zstd as they are.
#
#   bench/split.sh                                   # both datasets, all four inputs, 3 rounds
#   BENCH_RUNS=5 BENCH_CASES=csv,jsonl bench/split.sh
#   BENCH_FILES="DIR/a.csv DIR/b.jsonl.gz" bench/split.sh   (schema: DIR/schema.json)
#
# Needs what bench/run.sh makes (its venv, the cached datasets: run it first, and with
# BENCH_DATASET=wide for the wide files). Every run is one process on one pinned CPU
# (taskset -c 1, one thread) under /usr/bin/time; CPU is user + sys. Within a round the
# engines and modes are interleaved. A Python engine's start (the interpreter and its
# imports, measured alone as `python -c 'import ...'`) is taken out of its decoding.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
runs="${BENCH_RUNS:-3}"
IFS=, read -r -a engines <<< "${BENCH_ENGINES:-tidemark,pyarrow,duckdb,polars}"
IFS=, read -r -a cases <<< "${BENCH_CASES:-csv,csv.gz,jsonl,jsonl.gz}"
python="$repo/.local/venv-bench/bin/python"
[ -x "$python" ] || { echo "no $python: run bench/run.sh first" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time)" >&2; exit 1; }
cargo build --release --quiet --manifest-path bench/Cargo.toml
bin="${CARGO_TARGET_DIR:-$repo/bench/target}/release/tidemark-bench"
. bench/datasets.sh
bench_files "${cases[@]}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
results="$out/results.tsv"
for round in $(seq "$runs"); do
    for f in "${files[@]}"; do
        case "$f" in *.gz) compression=gzip ;; *) compression=none ;; esac
        case "$f" in *.jsonl | *.jsonl.gz) format=jsonl ;; *) format=csv ;; esac
        schema="$(dirname "$f")/schema.json"
        for engine in "${engines[@]}"; do
            modes=(convert decode start)
            [ "$engine" = tidemark ] && modes=(convert decode)
            for mode in "${modes[@]}"; do
                target="$out/out.parquet"
                [ "$mode" = decode ] && target=-
                if [ "$engine" = tidemark ]; then
                    cmd=("$bin" convert --format "$format" --compression "$compression"
                        --schema "$schema" --threads 1 "$f" "$target")
                elif [ "$mode" = start ]; then
                    case "$engine" in
                        pyarrow) modules="pyarrow, pyarrow.csv, pyarrow.json, pyarrow.parquet" ;;
                        *) modules="$engine" ;;
                    esac
                    cmd=("$python" -c "import json, os, sys, $modules")
                else
                    cmd=("$python" bench/engines.py "$engine" "$format" "$compression" "$f" "$target" "$schema")
                fi
                BENCH_THREADS=1 /usr/bin/time -f "%e %U %S" -o "$out/time" taskset -c 1 "${cmd[@]}" > /dev/null
                read -r wall user sys < "$out/time"
                printf '%s\t%s\t%s\t%s\n' "$(basename "$f")" "$engine" "$mode" \
                    "$(python3 -c "print($user + $sys)")" >> "$results"
                echo "round $round: $(basename "$f") $engine $mode: ${wall} s" >&2
                rm -f "$out/out.parquet"
            done
        done
    done
done
python3 - "$results" <<'EOF'
import statistics, sys
from collections import defaultdict
cpu = defaultdict(list)
for line in open(sys.argv[1]):
    f, engine, mode, seconds = line.rstrip("\n").split("\t")
    cpu[f, engine, mode].append(float(seconds))
med = {k: statistics.median(v) for k, v in cpu.items()}
files = list(dict.fromkeys(k[0] for k in med))
engines = list(dict.fromkeys(k[1] for k in med))
print("CPU seconds (user + sys), medians of", max(len(v) for v in cpu.values()), "runs; decode = decode-only run less start;")
print("encode = convert − decode-only run.\n")
print("| file | engine | convert | start | decode | encode | decode share |")
print("|---|---|---:|---:|---:|---:|---:|")
for f in files:
    for e in engines:
        c, d = med.get((f, e, "convert")), med.get((f, e, "decode"))
        if c is None or d is None:
            continue
        s = med.get((f, e, "start"), 0.0)
        print(f"| {f} | {e} | {c:.2f} | {s:.2f} | {d - s:.2f} | {c - d:.2f} | {(d - s) / (c - s):.0%} |")
print("\n| file | fastest peer (CPU) | tidemark | tidemark's encode | tidemark / peer | with decoding free |")
print("|---|---|---:|---:|---:|---:|")
for f in files:
    peers = [(med[f, e, "convert"], e) for e in engines if e != "tidemark" and (f, e, "convert") in med]
    if not peers or (f, "tidemark", "convert") not in med:
        continue
    best, name = min(peers)
    ours = med[f, "tidemark", "convert"]
    encode = ours - med[f, "tidemark", "decode"]
    print(f"| {f} | {name} {best:.2f} s | {ours:.2f} s | {encode:.2f} s | {best / ours:.2f}× | {best / encode:.2f}× |")
EOF
