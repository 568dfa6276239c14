#!/usr/bin/env bash
# Runs every cargo-fuzz target of tidemark for a bounded time and prints what each did.
#
#   fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 60 seconds, every target)
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and a nightly toolchain (`rustup toolchain
# install nightly`); without nightly it falls back to the stable toolchain with
# RUSTC_BOOTSTRAP=1 (cargo-fuzz needs -Z flags). Each target starts from its seeds
# (fuzz/seeds/<target>, committed) and the corpus it grew before (fuzz/corpus/<target>, not
# committed), with its dictionary, capped at 512 MB of RSS and 64 KiB inputs. A crash stops
# the run and leaves its input in fuzz/artifacts/<target>/: turn it into a regression test
# (see fuzz/README.md). Summary lines go to fuzz/last-run.txt.
set -euo pipefail
cd "$(dirname "$0")"

seconds=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(event_decoder form_key csv jsonl csv_vs_csv_core)
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

declare -A dict=([event_decoder]=dict/events.dict [csv]=dict/csv.dict [csv_vs_csv_core]=dict/csv.dict [jsonl]=dict/jsonl.dict)

"${fuzz[@]}" build "${build_flags[@]}"
: > last-run.txt
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "seeds/$t"
  opts=(-max_total_time="$seconds" -rss_limit_mb=512 -malloc_limit_mb=512 -max_len=65536 -timeout=10 -print_final_stats=1)
  if [ -n "${dict[$t]:-}" ]; then opts+=(-dict="${dict[$t]}"); fi
  log="corpus/$t.log"
  echo "== $t: ${seconds}s"
  status=0
  "${fuzz[@]}" run "${build_flags[@]}" "$t" "corpus/$t" "seeds/$t" -- "${opts[@]}" >"$log" 2>&1 || status=$?
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
  corpus=$(find "corpus/$t" -type f | wc -l)
  if [ "$status" -eq 0 ]; then result="no finding"; else result="FINDING (exit $status): see $log and artifacts/$t/"; fi
  line="$t: ${execs:-?} executions in ${seconds}s, coverage ${cov:-?} edges, corpus $corpus inputs: $result"
  echo "$line" | tee -a last-run.txt
done
