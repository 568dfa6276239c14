"""Writes a CSV file whose columns repeat a given number of distinct values, for measuring
dictionaries against their cardinality (BENCHMARKS.md, "Dictionaries that fit the cache"):

    python3 bench/cardinality.py 65536 DIR      # DIR/c65536.csv and DIR/schema.json

1,000,000 rows: `id` (counting up), and for each row one of K products drawn at random:
its code `s` ("item-0001234-" and 0–6 x's: 13–19 bytes), its number `n` (12 digits) and its
price `p` (two decimals, 1–5000). Seeded by K, so a file is the same on every machine."""
import json
import os
import random
import sys

k, out = int(sys.argv[1]), sys.argv[2]
rows = 1_000_000
random.seed(k)
codes = ["item-%07d-%s" % (i, "x" * (i % 7)) for i in range(k)]
prices = [round(random.uniform(1, 5000), 2) for _ in range(k)]
numbers = [random.randrange(10**12) for _ in range(k)]
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, f"c{k}.csv"), "w") as f:
    f.write("id,s,n,p\n")
    for r in range(rows):
        j = random.randrange(k)
        f.write(f"{r},{codes[j]},{numbers[j]},{prices[j]}\n")
columns = [("id", "int64"), ("s", "string"), ("n", "int64"), ("p", "float64")]
with open(os.path.join(out, "schema.json"), "w") as f:
    json.dump([{"name": n, "type": t, "nullable": False} for n, t in columns], f)
