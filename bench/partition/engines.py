"""One partitioned write by one peer engine, as a user would write it: the whole process is what
bench/partition/run.py times (interpreter start, imports, read, write).

    python engines.py ENGINE FORMAT IN OUTDIR SCHEMA_JSON PARTITION_COLUMN PARTITIONS [multiline]

ENGINE is duckdb or pyarrow; FORMAT csv or jsonl (uncompressed); SCHEMA_JSON the source's flat
columns (bench/schema.json's format: int32, int64, float64, string, bool, date, timestamp,
decimal(p,s)); PARTITION_COLUMN the string column whose values name the Hive directories
(`OUTDIR/COL=VALUE/…`, the column left out of the files, as tidemark does); PARTITIONS the
number of distinct values expected (pyarrow refuses more than its `max_partitions`, 1024 by
default, so it is raised to this); `multiline`: some quoted CSV fields hold line breaks.
Both engines get the schema as their explicit columns, one thread, zstd level 3:

- duckdb: `COPY (SELECT * FROM read_csv(IN, header=true, columns={...}) | read_json(IN,
  format='newline_delimited', columns={...})) TO OUTDIR (FORMAT parquet, COMPRESSION zstd,
  COMPRESSION_LEVEL 3, PARTITION_BY (COL))`, `SET threads=1`. TIMESTAMPTZ for timestamps;
  DuckDB reads a quoted CSV field with line breaks as it is.
- pyarrow: `pyarrow.csv.read_csv` (ConvertOptions(column_types=schema, strings_can_be_null=True):
  an empty field is NULL, as tidemark reads it; `newlines_in_values=True` when `multiline`) or
  `pyarrow.json.read_json` (ParseOptions(explicit_schema=...)); its JSON reader converts no
  string to date32, so a date column is read as a string and cast (`pyarrow.compute`); then
  `pyarrow.dataset.write_dataset(table, OUTDIR, partitioning=[COL], partitioning_flavor="hive",
  max_partitions=max(1024, PARTITIONS), use_threads=False)`, zstd level 3;
  `set_cpu_count(1)`, `set_io_thread_count(1)`, `use_threads=False` when reading.
"""

import json
import os
import sys

ZSTD_LEVEL = 3

DUCK_TYPES = {"int64": "BIGINT", "int32": "INTEGER", "float64": "DOUBLE", "string": "VARCHAR", "bool": "BOOLEAN",
              "date": "DATE", "timestamp": "TIMESTAMPTZ"}


def duck_type(t):
    if t.startswith("decimal("):
        return t.upper().replace(" ", "")
    return DUCK_TYPES[t]


def literal(text):
    return "'" + text.replace("'", "''") + "'"


def ident(name):
    return '"' + name.replace('"', '""') + '"'


def run_duckdb(fmt, src, out, schema, column, multiline):
    import duckdb

    cols = "{" + ", ".join(f"{literal(c['name'])}: {literal(duck_type(c['type']))}" for c in schema) + "}"
    if fmt == "csv":
        scan = f"read_csv({literal(src)}, header=true, delim=',', quote='\"', escape='\"', columns={cols})"
    else:
        scan = f"read_json({literal(src)}, format='newline_delimited', columns={cols})"
    con = duckdb.connect()
    con.execute("SET threads=1")
    con.execute(f"COPY (SELECT * FROM {scan}) TO {literal(out)} (FORMAT parquet, COMPRESSION zstd, "
                f"COMPRESSION_LEVEL {ZSTD_LEVEL}, PARTITION_BY ({ident(column)}))")
    con.close()


def arrow_type(t):
    import pyarrow as pa

    if t.startswith("decimal("):
        p, s = t[len("decimal("):-1].split(",")
        return pa.decimal128(int(p), int(s))
    return {"int64": pa.int64(), "int32": pa.int32(), "float64": pa.float64(), "string": pa.string(),
            "bool": pa.bool_(), "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC")}[t]


def run_pyarrow(fmt, src, out, schema, column, partitions, multiline):
    import pyarrow as pa
    import pyarrow.dataset as ds

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    arrow_schema = pa.schema([pa.field(c["name"], arrow_type(c["type"])) for c in schema])
    if fmt == "csv":
        import pyarrow.csv as csv

        table = csv.read_csv(
            src, read_options=csv.ReadOptions(use_threads=False),
            parse_options=csv.ParseOptions(newlines_in_values=multiline),
            convert_options=csv.ConvertOptions(column_types=arrow_schema, strings_can_be_null=True,
                                               include_columns=arrow_schema.names))
    else:
        import pyarrow.json as pjson

        # No string-to-date32 conversion in the JSON reader: dates as strings, cast after.
        dates = [f.name for f in arrow_schema if pa.types.is_date(f.type)]
        read_schema = pa.schema([f.with_type(pa.string()) if f.name in dates else f for f in arrow_schema])
        table = pjson.read_json(src, read_options=pjson.ReadOptions(use_threads=False),
                                parse_options=pjson.ParseOptions(explicit_schema=read_schema,
                                                                 unexpected_field_behavior="ignore"))
        for name in dates:
            i = table.schema.get_field_index(name)
            table = table.set_column(i, name, table.column(name).cast(pa.date32()))
        table = table.select(arrow_schema.names)
    fmt_opts = ds.ParquetFileFormat().make_write_options(compression="zstd", compression_level=ZSTD_LEVEL)
    ds.write_dataset(table, out, format="parquet", partitioning=[column], partitioning_flavor="hive",
                     file_options=fmt_opts, use_threads=False, max_partitions=max(1024, partitions),
                     existing_data_behavior="overwrite_or_ignore")


def main(argv):
    if len(argv) not in (8, 9):
        sys.exit(__doc__)
    engine, fmt, src, out, schema_path, column, partitions = argv[1:8]
    multiline = len(argv) == 9 and argv[8] == "multiline"
    with open(schema_path) as f:
        schema = json.load(f)
    if engine == "duckdb":
        run_duckdb(fmt, src, out, schema, column, multiline)
    elif engine == "pyarrow":
        run_pyarrow(fmt, src, out, schema, column, int(partitions), multiline)
    else:
        sys.exit(f"unknown engine {engine!r}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(sys.argv)
