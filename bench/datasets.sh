# Sourced by the bench scripts: the files of the generated datasets bench/run.sh cached under
# .local/bench-data/, the newest dataset of each kind (run.sh keys its cache by the
# generator's source, so older directories may be left beside it).
#
#   dataset_files csv jsonl     # prints one path per line: orders.csv, orders.jsonl, wide.csv…
dataset_files() {
    local prefix d ext f
    for prefix in orders-rows-1000000 wide-rows; do
        d="$(ls -dt .local/bench-data/"$prefix"-* 2>/dev/null | head -1)"
        [ -n "$d" ] || continue
        for ext in "$@"; do
            f="$(ls "$d"/*."$ext" 2>/dev/null | head -1)"
            [ -n "$f" ] && printf '%s\n' "$f"
        done
    done
    return 0
}

# Sets `files`: $BENCH_FILES (space-separated) when given, else `dataset_files "$@"`; fails
# when there is none.
bench_files() {
    if [ -n "${BENCH_FILES:-}" ]; then
        read -r -a files <<< "$BENCH_FILES"
    else
        mapfile -t files < <(dataset_files "$@")
    fi
    [ "${#files[@]}" -gt 0 ] || { echo "no dataset: run bench/run.sh (and BENCH_DATASET=wide) first" >&2; exit 1; }
}
