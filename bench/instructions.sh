#!/usr/bin/env bash
# Instructions executed by the converter, counted by valgrind's callgrind: the same count for
# the same binary and input whatever else the machine is doing, so that a change of a few
# percent in the converter's own work shows where timings on a shared machine cannot (they
# spread by 15-25%). A count is not a time: a vector instruction does more than a scalar one,
# and memory stalls are not counted. Quote both.
#
#   bench/instructions.sh                     # the converter built from this checkout
#   bench/instructions.sh OLD_BIN NEW_BIN     # two builds of tidemark-bench side by side
#   BENCH_CASES=jsonl bench/instructions.sh   # csv and/or jsonl (default both)
#
# Each case is one `tidemark-bench convert` on one thread of a small generated dataset
# (orders, 100,000 rows; wide, 20,000 rows; cached under .local/bench-data/), so that a run
# under valgrind takes seconds. Prints a markdown table; the callgrind files are left under
# .local/bench-results/instructions-<UTC time>/ for `callgrind_annotate`. Needs valgrind
# (Debian's package). For names in the annotation, build with symbols:
#   CARGO_PROFILE_RELEASE_STRIP=false CARGO_PROFILE_RELEASE_DEBUG=line-tables-only \
#     cargo build --release --manifest-path bench/Cargo.toml
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
if [ "$#" -eq 0 ]; then
    cargo build --release --quiet --manifest-path bench/Cargo.toml
    set -- "${CARGO_TARGET_DIR:-$repo/bench/target}/release/tidemark-bench"
fi
IFS=, read -r -a cases <<< "${BENCH_CASES:-csv,jsonl}"
out="$repo/.local/bench-results/instructions-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$out"
key="$(cat bench/src/*.rs bench/schema.json bench/schema-wide.json | sha256sum | cut -c1-12)"
for spec in orders:100000 wide:20000; do
    dataset="${spec%%:*}" rows="${spec##*:}"
    data=".local/bench-data/$dataset-rows-$rows-$key"
    [ -f "$data/$dataset.jsonl" ] || "$1" gen --dataset "$dataset" --rows "$rows" --out "$data" >/dev/null
done
printf '| file | %s |\n|---|' "$(for b in "$@"; do printf '%s | ' "$b"; done | sed 's/ | $//')"
for _ in "$@"; do printf -- '---:|'; done
echo
for spec in orders:100000 wide:20000; do
    dataset="${spec%%:*}" rows="${spec##*:}"
    data=".local/bench-data/$dataset-rows-$rows-$key"
    for format in "${cases[@]}"; do
        row="| $dataset.$format ($rows rows) |"
        i=0
        for bin in "$@"; do
            i=$((i + 1))
            file="$out/$dataset-$format-$i.callgrind"
            valgrind --tool=callgrind --callgrind-out-file="$file" "$bin" convert \
                --format "$format" --compression none --schema "$data/schema.json" --threads 1 \
                "$data/$dataset.$format" "$out/out.parquet" >/dev/null 2>"$out/valgrind.log" ||
                { cat "$out/valgrind.log" >&2; exit 1; }
            count="$(sed -n 's/^summary: *//p' "$file")"
            row="$row $(awk -v n="$count" 'BEGIN { printf "%.1f M", n / 1e6 }') |"
        done
        echo "$row"
    done
done
echo
echo "callgrind files: $out" >&2
