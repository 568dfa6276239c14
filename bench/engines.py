"""One conversion by one peer engine, as a user would write it: the whole process is what
bench/harness.py times (interpreter start, imports, read, write).

    python engines.py ENGINE FORMAT COMPRESSION IN OUT SCHEMA_JSON

ENGINE is pyarrow, pyarrow-stream (CSV only), duckdb or polars; FORMAT csv or jsonl;
COMPRESSION none or gzip. Every engine gets the explicit schema of SCHEMA_JSON (the
format of bench/schema.json: int32, int64, float32, float64, decimal(P,S), string, bool,
date, timestamp), writes Parquet with zstd level 3 and runs on one thread. OUT `-`:
decode only, into memory, nothing written (for bench/split.sh): pyarrow and polars read
the whole table, DuckDB materialises it as a table, which is more than its COPY does
while streaming, so an upper bound on its decoding. Imports are
inside each function so that each process only pays for its own engine.

NULLs are read as tidemark reads them: in CSV an empty field is NULL, also in a string
column (tidemark's default `empty_strings: null`; pyarrow is told so with
`strings_can_be_null` when a string column is nullable, and only "" is a NULL spelling,
not pyarrow's default list of "NA", "null", "nan"...; DuckDB and polars do so by
default); in JSON Lines `null` or a missing key. Where a reader lacks a conversion, the
column is read as text and cast, as a user would: pyarrow's JSON reader has no date
parsing (date columns are read as strings, then cast to date32), and polars reads a
JSON number meant for a decimal through f64 and refuses a JSON string for a Decimal
(decimal columns are read as strings, then cast; exact for JSON strings, which is how
the wide dataset spells decimals).
"""

import json
import os
import sys

# BENCH_THREADS=1 (the default): one thread everywhere; any other value: every engine at
# its own default thread count. Must be set before the engines are imported.
ONE_THREAD = os.environ.get("BENCH_THREADS", "1") == "1"
if ONE_THREAD:
    os.environ.setdefault("POLARS_MAX_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")

ZSTD_LEVEL = 3


def decimal_args(ty):
    """(precision, scale) of "decimal(P,S)", else None."""
    if ty.startswith("decimal(") and ty.endswith(")"):
        p, s = ty[len("decimal("):-1].split(",")
        return int(p), int(s)
    return None


def pyarrow_type(ty):
    import pyarrow as pa

    types = {
        "int32": pa.int32(),
        "int64": pa.int64(),
        "float32": pa.float32(),
        "float64": pa.float64(),
        "string": pa.string(),
        "bool": pa.bool_(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }
    dec = decimal_args(ty)
    return pa.decimal128(*dec) if dec else types[ty]


def pyarrow_types(columns):
    import pyarrow as pa

    return pa.schema([pa.field(c["name"], pyarrow_type(c["type"]), c.get("nullable", True)) for c in columns])


def run_pyarrow(fmt, compression, src, out, columns, stream=False):
    import pyarrow as pa
    import pyarrow.parquet as pq

    if ONE_THREAD:
        pa.set_cpu_count(1)
        pa.set_io_thread_count(1)
    schema = pyarrow_types(columns)
    source = pa.input_stream(src, compression="gzip" if compression == "gzip" else None)
    if fmt == "csv":
        import pyarrow.csv as pcsv

        convert = pcsv.ConvertOptions(
            column_types={f.name: f.type for f in schema},
            null_values=[""],
            strings_can_be_null=any(c["type"] == "string" and c.get("nullable", True) for c in columns),
        )
        if stream:
            # Streaming: bounded memory. 16 MiB blocks give row groups of ~150k rows
            # (pyarrow writes one or more row groups per batch, never merges batches).
            read = pcsv.ReadOptions(use_threads=not ONE_THREAD, block_size=16 << 20)
            reader = pcsv.open_csv(source, read_options=read, convert_options=convert)
            if out == "-":
                for _ in reader:
                    pass
                return
            with pq.ParquetWriter(out, reader.schema, compression="zstd", compression_level=ZSTD_LEVEL) as w:
                for batch in reader:
                    w.write_batch(batch)
            return
        table = pcsv.read_csv(source, read_options=pcsv.ReadOptions(use_threads=not ONE_THREAD), convert_options=convert)
    else:
        import pyarrow.json as pjson

        # No date parsing in pyarrow's JSON reader: read dates as strings, then cast.
        dates = [f.name for f in schema if f.type == pa.date32()]
        read_schema = pa.schema([f.with_type(pa.string()) if f.name in dates else f for f in schema])
        table = pjson.read_json(
            source,
            read_options=pjson.ReadOptions(use_threads=not ONE_THREAD),
            parse_options=pjson.ParseOptions(explicit_schema=read_schema, unexpected_field_behavior="ignore"),
        )
        if dates:
            table = table.cast(schema)
    if out != "-":
        pq.write_table(table, out, compression="zstd", compression_level=ZSTD_LEVEL)


def run_duckdb(fmt, compression, src, out, columns):
    import duckdb

    types = {"int32": "INTEGER", "int64": "BIGINT", "float32": "FLOAT", "float64": "DOUBLE", "string": "VARCHAR",
             "bool": "BOOLEAN", "date": "DATE", "timestamp": "TIMESTAMPTZ"}
    sql_type = lambda ty: "DECIMAL({},{})".format(*decimal_args(ty)) if decimal_args(ty) else types[ty]
    cols = "{" + ", ".join(f"'{c['name']}': '{sql_type(c['type'])}'" for c in columns) + "}"
    comp = "gzip" if compression == "gzip" else "none"
    con = duckdb.connect()
    if ONE_THREAD:
        con.execute("SET threads=1")
    if fmt == "csv":
        scan = f"read_csv('{src}', header=true, delim=',', quote='\"', escape='\"', columns={cols}, compression='{comp}', auto_detect=false)"
    else:
        scan = f"read_json('{src}', format='newline_delimited', columns={cols}, compression='{comp}')"
    if out == "-":
        con.execute(f"CREATE TABLE decoded AS SELECT * FROM {scan}")
    else:
        con.execute(f"COPY (SELECT * FROM {scan}) TO '{out}' (FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL {ZSTD_LEVEL})")
    con.close()


def run_polars(fmt, compression, src, out, columns):
    import polars as pl

    types = {
        "int32": pl.Int32,
        "int64": pl.Int64,
        "float32": pl.Float32,
        "float64": pl.Float64,
        "string": pl.String,
        "bool": pl.Boolean,
        "date": pl.Date,
        "timestamp": pl.Datetime("us", "UTC"),
    }
    dtype = lambda ty: pl.Decimal(*decimal_args(ty)) if decimal_args(ty) else types[ty]
    schema = {c["name"]: dtype(c["type"]) for c in columns}
    # read_csv / read_ndjson decompress a .gz path themselves (into memory).
    if fmt == "csv":
        df = pl.read_csv(src, schema=schema, quote_char='"')
    else:
        # Decimals as text, then cast (read_ndjson has no exact JSON-to-Decimal path).
        decimals = {name: t for name, t in schema.items() if isinstance(t, pl.Decimal)}
        df = pl.read_ndjson(src, schema={name: pl.String if name in decimals else t for name, t in schema.items()})
        if decimals:
            df = df.with_columns(pl.col(name).cast(t) for name, t in decimals.items())
    if out != "-":
        df.write_parquet(out, compression="zstd", compression_level=ZSTD_LEVEL)


def main(argv):
    if len(argv) != 7:
        sys.exit(__doc__)
    _, engine, fmt, compression, src, out, schema_path = argv
    with open(schema_path) as f:
        columns = json.load(f)
    if engine == "pyarrow":
        run_pyarrow(fmt, compression, src, out, columns)
    elif engine == "pyarrow-stream":
        if fmt != "csv":
            sys.exit("pyarrow-stream is CSV only")
        run_pyarrow(fmt, compression, src, out, columns, stream=True)
    elif engine == "duckdb":
        run_duckdb(fmt, compression, src, out, columns)
    elif engine == "polars":
        run_polars(fmt, compression, src, out, columns)
    else:
        sys.exit(f"unknown engine {engine!r}")


if __name__ == "__main__":
    main(sys.argv)
