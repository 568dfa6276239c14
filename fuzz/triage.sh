#!/usr/bin/env bash
# Sorts the inputs a target left by what they are: runs each input of fuzz/artifacts/<target>/
# (crash-* and oom-*, with --timeouts timeout-*, or the files given) once and prints where it
# panicked, its message and the innermost frame of tidemark's own code; for a timeout, where
# it still is after 15 s (the three innermost frames of the readers' or tidemark's code, from
# gdb), or that it ended; then a count per place.
#
#   fuzz/triage.sh TARGET [--timeouts] [FILE...]
#
# Needs the target built (fuzz/run.sh builds every target), and gdb for timeouts.
set -uo pipefail
cd "$(dirname "$0")"

t=${1:?usage: fuzz/triage.sh TARGET [--timeouts] [FILE...]}
shift
kinds=(-name 'crash-*' -o -name 'oom-*')
if [ "${1:-}" = --timeouts ]; then
  kinds=(-name 'timeout-*')
  shift
fi
bin=target/x86_64-unknown-linux-gnu/release/$t
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  mapfile -t files < <(find "artifacts/$t" "${kinds[@]}" | sort)
fi
summary=$(mktemp)
for f in "${files[@]}"; do
  if [[ $(basename "$f") == timeout-* ]]; then
    "$bin" "$f" -timeout=600 >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 15); do
      sleep 1
      kill -0 "$pid" 2>/dev/null || break
    done
    if kill -0 "$pid" 2>/dev/null; then
      # (A frame inlined from a dependency may name its file relative to its crate: src/…)
      at=$(gdb -p "$pid" -batch -ex 'bt 60' 2>/dev/null | grep -oE ' at [^ ]+:[0-9]+' |
        grep -vE '/rustc/|libfuzzer|sysdeps|nptl|/usr/include|\.\./' |
        sed 's/^ at //; s|.*/registry/src/[^/]*/||; s|^/.*/shared/|shared/|' | head -3 | paste -sd' ' -)
      kill "$pid"
      wait "$pid" 2>/dev/null
      at="still running after 15 s in: ${at:-?}"
    else
      wait "$pid" 2>/dev/null
      at="ended within 15 s (slow, not endless)"
    fi
    printf '%s\n  %s\n' "$f" "$at"
    sed -E 's/:[0-9]+//g' <<<"$at" >>"$summary" # by file: the line moves around a loop
    continue
  fi
  out=$(RUST_BACKTRACE=1 timeout 60 "$bin" "$f" 2>&1)
  at=$(grep -m1 -o 'panicked at [^ ]*' <<<"$out" | sed 's/panicked at //; s/:$//; s|.*/registry/src/[^/]*/||; s|^/.*/shared/|shared/|')
  message=$(grep -m1 -A1 'panicked at' <<<"$out" | tail -1 | cut -c1-160)
  ours=$(grep -m1 -oE '(\./)?shared/src/[a-z_/]+\.rs:[0-9]+' <<<"$out")
  if [ -z "$at" ]; then
    at=$(grep -m1 -oE 'ERROR: libFuzzer: [a-z-]+' <<<"$out" || echo "no crash")
    message=""
  fi
  printf '%s\n  at %s\n  %s\n  first frame of tidemark: %s\n' "$f" "$at" "$message" "${ours:-none}"
  echo "$at (from ${ours:-none})" >>"$summary"
done
echo "== by location"
sort "$summary" | uniq -c | sort -rn
rm -f "$summary"
