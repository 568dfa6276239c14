#!/usr/bin/env bash
# Runs every cargo-fuzz target of tidemark for a bounded time and prints what each did.
#
#   fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 60 seconds, every target)
#   KEEP_GOING=1 fuzz/run.sh ...                      (go on after crashes too, counting them)
#
# Needs cargo-fuzz, which it installs from crates.io when `cargo fuzz` is missing
# (`cargo install cargo-fuzz --locked`), and a nightly toolchain (`rustup toolchain install
# nightly`); without nightly it falls back to the stable toolchain with RUSTC_BOOTSTRAP=1
# (cargo-fuzz needs -Z flags). Each target starts from its seeds (fuzz/seeds/<target>,
# committed) and the corpus it grew before (fuzz/corpus/<target>, not committed), with its
# dictionary, capped at 512 MB of RSS, 64 KiB inputs and 10 s per input. A crash stops the
# target's run and leaves its input in fuzz/artifacts/<target>/: turn it into a regression
# test (see fuzz/README.md). The targets that read ORC or Avro (orc, avro, infer) run in
# libFuzzer's fork mode and go on after a timeout: orc-rust 0.6.2 loops forever on some
# corrupt RLE v2 runs, and arrow-avro 60.1 on a block holding more data than its count of
# objects, which the product handles outside the converter (its watchdog abandons the
# conversion); their timeouts are counted in the summary, their inputs left in
# fuzz/artifacts/<target>/. With KEEP_GOING=1 every target runs so and goes on after a crash
# too, which is counted (each crash's input is left in fuzz/artifacts/<target>/): for a
# campaign that measures a target with a finding still open. Summary lines go to
# fuzz/last-run.txt.
set -euo pipefail
cd "$(dirname "$0")"

seconds=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(event_decoder form_key csv jsonl csv_vs_csv_core jsonl_nested parquet avro orc infer)
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

if rustup run nightly rustc --version >/dev/null 2>&1; then
  fuzz=(cargo +nightly fuzz)
else
  export RUSTC_BOOTSTRAP=1
  fuzz=(cargo fuzz)
fi
# No sanitizer: the crates are safe Rust (unsafe_code is forbidden) over arrow; debug
# assertions on, so integer overflow panics instead of wrapping.
build_flags=(-a -s none --codegen-units 16)

declare -A dict=([event_decoder]=dict/events.dict [csv]=dict/csv.dict [csv_vs_csv_core]=dict/csv.dict [jsonl]=dict/jsonl.dict [jsonl_nested]=dict/jsonl_nested.dict)
# Targets that may meet the ORC or Avro reader's endless loops: fork mode, timeouts counted,
# not fatal.
declare -A loops=([orc]=1 [avro]=1 [infer]=1)

"${fuzz[@]}" build "${build_flags[@]}"
: > last-run.txt
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "seeds/$t" "artifacts/$t"
  opts=(-max_total_time="$seconds" -rss_limit_mb=512 -malloc_limit_mb=512 -max_len=65536 -timeout=10 -print_final_stats=1)
  if [ -n "${dict[$t]:-}" ]; then opts+=(-dict="${dict[$t]}"); fi
  fork=""
  if [ -n "${KEEP_GOING:-}" ]; then
    fork=1
    opts+=(-fork=1 -ignore_timeouts=1 -ignore_crashes=1 -ignore_ooms=1)
  elif [ -n "${loops[$t]:-}" ]; then
    fork=1
    opts+=(-fork=1 -ignore_timeouts=1)
  fi
  log="corpus/$t.log"
  echo "== $t: ${seconds}s"
  status=0
  marker=$(mktemp)
  start=$(date +%s)
  "${fuzz[@]}" run "${build_flags[@]}" "$t" "corpus/$t" "seeds/$t" -- "${opts[@]}" >"$log" 2>&1 || status=$?
  elapsed=$(( $(date +%s) - start ))
  # The inputs this run left: crash-*, oom-*, timeout-* (one per distinct input).
  new() { find "artifacts/$t" -name "$1-*" -newer "$marker" | wc -l; }
  crashes=$(new crash) ooms=$(new oom) timeouts=$(new timeout)
  rm -f "$marker"
  if [ -n "$fork" ]; then
    # Fork mode: the parent's progress lines, "#EXECS: cov: N ft: ...".
    progress=$(grep -E '^#[0-9]+: cov:' "$log" | tail -1)
    execs=$(sed -E 's/^#([0-9]+):.*/\1/' <<<"$progress")
    cov=$(grep -o 'cov: [0-9]*' <<<"$progress" | grep -o '[0-9]*$')
  else
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
  fi
  rate="?"
  if [ -n "${execs:-}" ] && [ "$elapsed" -gt 0 ]; then rate=$(( execs / elapsed )); fi
  corpus=$(find "corpus/$t" -type f | wc -l)
  found="$crashes crashes, $ooms out of memory, $timeouts timeouts"
  if [ "$crashes" -eq 0 ] && [ "$ooms" -eq 0 ] && { [ "$status" -eq 0 ] || [ -n "$fork" ]; }; then
    result="no finding"
    if [ "$timeouts" -gt 0 ]; then result="$timeouts timeouts (see fuzz/README.md for the known loops)"; fi
  else
    result="FINDING (exit $status, $found): see $log and artifacts/$t/"
  fi
  line="$t: ${execs:-?} executions in ${elapsed}s (${rate}/s), coverage ${cov:-?} edges, corpus $corpus inputs: $result"
  echo "$line" | tee -a last-run.txt
done
