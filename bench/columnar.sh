#!/usr/bin/env bash
# Columnar input (BENCHMARKS.md, "Columnar input"): the orders dataset (1M rows) as ORC
# (zstd, zlib) and Avro (deflate, snappy), converted by `tidemark-bench convert` on one thread;
# with two builds given (BEFORE and AFTER, each a tidemark-bench binary), runs them
# alternately RUNS times per file and prints the median CPU seconds (user + sys) of each and
# their ratio: what a change to the columnar readers costs.
#
#   bench/columnar.sh AFTER_BIN [BEFORE_BIN] [RUNS]
#
# The files are written once under .local/bench-columnar by pyarrow (ORC) and polars (Avro)
# from the orders CSV that bench/run.sh generates (run it first), in the bench virtualenv.
set -euo pipefail
cd "$(dirname "$0")/.."
after=$1
before=${2:-}
runs=${3:-5}
py=.local/venv-bench/bin/python
data=$(ls -d .local/bench-data/orders-rows-1000000-* | head -1)
out=.local/bench-columnar
mkdir -p "$out"
if [ ! -f "$out/orders-snappy.avro" ]; then
  "$py" - "$data" "$out" <<'PY'
import sys, pyarrow as pa, pyarrow.csv as pc, pyarrow.compute as pcm, pyarrow.orc as po, polars as pl
data, out = sys.argv[1], sys.argv[2]
t = pc.read_csv(f"{data}/orders.csv")
t = t.set_column(t.schema.get_field_index("quantity"), "quantity", pcm.cast(t["quantity"], pa.int32()))
t = t.set_column(t.schema.get_field_index("created_at"), "created_at", pcm.cast(t["created_at"], pa.timestamp("us")))
po.write_table(t, f"{out}/orders-zstd.orc", compression="zstd")
po.write_table(t, f"{out}/orders-zlib.orc", compression="zlib")
df = pl.from_arrow(t)
df.write_avro(f"{out}/orders-deflate.avro", compression="deflate")
df.write_avro(f"{out}/orders-snappy.avro", compression="snappy")
PY
fi
cpu() { # prints user+sys seconds of one conversion
  /usr/bin/time -f "%U %S" "$1" convert --format "$2" --compression none "$3" /dev/null 2>&1 >/dev/null \
    | tail -1 | awk '{print $1 + $2}'
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
for f in orders-zstd.orc orders-zlib.orc orders-deflate.avro orders-snappy.avro; do
  format=${f##*.}
  a=(); b=()
  for _ in $(seq "$runs"); do
    a+=("$(cpu "$after" "$format" "$out/$f")")
    if [ -n "$before" ]; then b+=("$(cpu "$before" "$format" "$out/$f")"); fi
  done
  ma=$(printf '%s\n' "${a[@]}" | median)
  if [ -n "$before" ]; then
    mb=$(printf '%s\n' "${b[@]}" | median)
    echo "$f: after ${ma}s, before ${mb}s, after/before $(awk -v a="$ma" -v b="$mb" 'BEGIN {printf "%.2f", a / b}')"
  else
    echo "$f: ${ma}s"
  fi
done
