#!/usr/bin/env bash
# A source's output settings against the converter's peak RSS, CPU time and output size, on
# the generated datasets bench/run.sh caches: `row_group_mib` (the Parquet row-group size),
# `zstd_level`, `dictionary_kib` (the memory a column's dictionary may take while it is built),
# `page_kib` (the size at which a data page closes), or the converter's `page_memory_mib`
# (pages of the row group in progress kept in memory; the rest wait in a temporary file).
#
#   bench/settings.sh                                   # row_group_mib 64,32,16,8; 3 rounds
#   BENCH_SETTING=zstd_level BENCH_VALUES=3,1 BENCH_RUNS=5 bench/settings.sh
#   BENCH_SETTING=page_memory_mib bench/settings.sh        # 1024 (all in memory),4,0
#   BENCH_SETTING=dictionary_kib bench/settings.sh         # 65536,1024,0
#   BENCH_SETTING=page_kib BENCH_THREADS=2 bench/settings.sh   # 1024,256
#   BENCH_FILES="DIR/a.csv DIR/b.jsonl" bench/settings.sh   (schema: DIR/schema.json)
#
# Every run is `tidemark-bench convert` on one pinned CPU (taskset -c 1, one thread; with
# BENCH_THREADS=2, two threads on CPUs 0 and 1) under /usr/bin/time; the values are
# interleaved within each round so that the machine's drift spreads over all of them. Prints
# a markdown table of medians, with CPU against the first value.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
runs="${BENCH_RUNS:-3}"
setting="${BENCH_SETTING:-row_group_mib}"
case "$setting" in
    row_group_mib) knob=BENCH_ROW_GROUP_MIB; default_values=64,32,16,8 ;;
    zstd_level) knob=BENCH_ZSTD_LEVEL; default_values=3,1 ;;
    page_memory_mib) knob=BENCH_PAGE_MEMORY_MIB; default_values=1024,4,0 ;;
    dictionary_kib) knob=BENCH_DICTIONARY_KIB; default_values=65536,1024,0 ;;
    page_kib) knob=BENCH_PAGE_KIB; default_values=1024,256 ;;
    *) echo "BENCH_SETTING must be row_group_mib, zstd_level, dictionary_kib, page_kib or page_memory_mib" >&2
       exit 1 ;;
esac
threads="${BENCH_THREADS:-1}"
case "$threads" in
    1) cpus=1 ;;
    2) cpus=0,1 ;;
    *) echo "BENCH_THREADS must be 1 or 2" >&2; exit 1 ;;
esac
IFS=, read -r -a values <<< "${BENCH_VALUES:-$default_values}"
cargo build --release --quiet --manifest-path bench/Cargo.toml
bin="${CARGO_TARGET_DIR:-$repo/bench/target}/release/tidemark-bench"
. bench/datasets.sh
bench_files csv jsonl
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
results="$out/results.tsv"
for round in $(seq "$runs"); do
    for f in "${files[@]}"; do
        case "$f" in *.jsonl) format=jsonl ;; *) format=csv ;; esac
        schema="$(dirname "$f")/schema.json"
        for value in "${values[@]}"; do
            env "$knob=$value" /usr/bin/time -f "%e %U %S %M" -o "$out/time" \
                taskset -c "$cpus" "$bin" convert --format "$format" --compression none \
                --schema "$schema" --threads "$threads" "$f" "$out/out.parquet" > "$out/stats.json"
            read -r wall user sys rss < "$out/time"
            groups="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["row_groups"])' "$out/stats.json")"
            size="$(stat -c %s "$out/out.parquet")"
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(basename "$f")" "$value" "$wall" \
                "$(python3 -c "print($user + $sys)")" "$rss" "$size" "$groups" >> "$results"
            echo "round $round: $(basename "$f") $setting=$value: ${wall} s, ${rss} KB" >&2
        done
    done
done
python3 - "$results" "$setting" "${values[0]}" <<'EOF'
import statistics, sys
from collections import defaultdict
rows = defaultdict(list)
for line in open(sys.argv[1]):
    name, value, wall, cpu, rss, size, groups = line.split()
    rows[(name, int(value))].append((float(wall), float(cpu), int(rss), int(size), int(groups)))
setting, first = sys.argv[2], int(sys.argv[3])
print(f"| file | {setting} | median wall s | median CPU s | CPU × {setting} {first} | peak RSS MB (median) | Parquet MB | row groups |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for (name, value) in sorted(rows, key=lambda k: (k[0], -k[1])):
    r = rows[(name, value)]
    base = rows.get((name, first))
    cpu = statistics.median(x[1] for x in r)
    ratio = cpu / statistics.median(x[1] for x in base) if base else float("nan")
    print(f"| {name} | {value} | {statistics.median(x[0] for x in r):.3f} | {cpu:.3f} | {ratio:.2f} | "
          f"{statistics.median(x[2] for x in r) / 1024:.0f} | {r[0][3] / 1e6:.1f} | {r[0][4]} |")
EOF
