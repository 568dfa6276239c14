"""One conversion of nested JSON Lines by one peer engine, as a user would write it: the whole
process is what bench/nested/harness.py times (interpreter start, imports, read, write).

    python engines.py ENGINE COMPRESSION IN OUT SCHEMA_JSON [LAYOUT [RECORDS_KEY]]

ENGINE is pyarrow or duckdb; COMPRESSION none or gzip; SCHEMA_JSON the source's columns as
the sources document spells them (struct<…>, array<…>, map<string,…>, json, scalars, and
columns read by `path`). Both engines get the schema as their explicit schema, write Parquet
with zstd level 3 and run on one thread:

LAYOUT (DuckDB's read_json format) is newline_delimited (default), array (one top-level array
of records) or unstructured (values back to back); pyarrow reads newline_delimited only.
With RECORDS_KEY the input is JSON documents, one per line, each holding its records in the
array under that key (CloudTrail's `{"Records":[...]}`): DuckDB reads the key as a list of
STRUCT and unnests it (`WITH recs AS (SELECT unnest(KEY) AS r FROM read_json(...)) SELECT
r."a", ...`); pyarrow reads it as a list of structs and flattens it into a table.

- duckdb: `read_json(..., format='newline_delimited', columns={...})` with STRUCT, LIST, MAP
  and JSON types, the path columns as struct fields and list elements of the columns read
  (`"userIdentity"."arn"`, `"resources"[1]."ARN"`), then `COPY (...) TO ... (FORMAT parquet,
  COMPRESSION zstd, COMPRESSION_LEVEL 3)`; `SET threads=1`.
- pyarrow: `pyarrow.json.read_json` with the explicit schema (fields it lacks ignored, at
  every level), the path columns taken with `pyarrow.compute` (struct_field, list_slice), then
  `pq.write_table(..., compression='zstd', compression_level=3)`; `set_cpu_count(1)`,
  `set_io_thread_count(1)`, `use_threads=False`. Its JSON reader cannot keep a subtree as
  text and has no map type: a `json` or `map` column (at any depth) is not produced (nor a
  path column reading into one), which the harness says next to its figures. It converts no
  string to date32 either: a date (at any depth) is read as a string and cast after.
"""

import json
import os
import re
import sys

ZSTD_LEVEL = 3


def parse_type(text):
    """A type spelling as nested tuples: ("scalar", name) | ("decimal", p, s) | ("json",) |
    ("struct", [(name, type)]) | ("array", type) | ("map", type)."""
    at = 0

    def ws():
        nonlocal at
        while at < len(text) and text[at].isspace():
            at += 1

    def eat(c):
        nonlocal at
        ws()
        if text.startswith(c, at):
            at += 1
            return True
        return False

    def ty():
        nonlocal at
        ws()
        m = re.compile(r"[A-Za-z0-9_]+").match(text, at)
        word = m.group()
        at = m.end()
        word = {"int": "int32", "integer": "int32", "bigint": "int64", "float": "float32", "double": "float64",
                "boolean": "bool"}.get(word, word)
        if word == "decimal":
            end = text.index(")", at)
            p, s = text[at + 1:end].split(",")
            at = end + 1
            return ("decimal", int(p), int(s))
        if word == "json":
            return ("json",)
        if word == "struct":
            eat("<")
            fields = []
            while True:
                ws()
                if eat("`"):
                    end = text.index("`", at)
                    name = text[at:end]
                    at = end + 1
                else:
                    m = re.compile(r"[^:,<>`]+").match(text, at)
                    name = m.group().strip()
                    at = m.end()
                eat(":")
                fields.append((name, ty()))
                if eat(">"):
                    return ("struct", fields)
                eat(",")
        if word in ("array", "map"):
            eat("<")
            if word == "map":
                ty()
                eat(",")
            t = ty()
            eat(">")
            return (word, t)
        return ("scalar", word)

    return ty()


def parse_path(text):
    """[("key", name) | ("index", n)] of a path spelling (`a.b[0]["x.y"]`)."""
    steps = []
    for m in re.finditer(r'\["((?:[^"\\]|\\.)*)"\]|\[(\d+)\]|\.?([^.\[\]"]+)', text):
        if m.group(1) is not None:
            steps.append(("key", json.loads('"' + m.group(1) + '"')))
        elif m.group(2) is not None:
            steps.append(("index", int(m.group(2))))
        else:
            steps.append(("key", m.group(3)))
    return steps


def has_json(t):
    if t[0] == "json":
        return True
    if t[0] == "struct":
        return any(has_json(x) for _, x in t[1])
    return t[0] in ("array", "map") and has_json(t[1])


def has_map(t):
    if t[0] == "map":
        return True
    if t[0] == "struct":
        return any(has_map(x) for _, x in t[1])
    return t[0] == "array" and has_map(t[1])


def has_date(t):
    if t == ("scalar", "date"):
        return True
    if t[0] == "struct":
        return any(has_date(x) for _, x in t[1])
    return t[0] in ("array", "map") and has_date(t[1])


# ---------------------------------------------------------------------------------------
# DuckDB


def sql_type(t):
    k = t[0]
    if k == "scalar":
        return {"int32": "INTEGER", "int64": "BIGINT", "float32": "FLOAT", "float64": "DOUBLE", "string": "VARCHAR",
                "bool": "BOOLEAN", "date": "DATE", "timestamp": "TIMESTAMPTZ"}[t[1]]
    if k == "decimal":
        return f"DECIMAL({t[1]},{t[2]})"
    if k == "json":
        return "JSON"
    if k == "struct":
        return "STRUCT(" + ", ".join(f"{ident(n)} {sql_type(x)}" for n, x in t[1]) + ")"
    if k == "array":
        return sql_type(t[1]) + "[]"
    return f"MAP(VARCHAR, {sql_type(t[1])})"


def ident(name):
    return '"' + name.replace('"', '""') + '"'


def literal(text):
    return "'" + text.replace("'", "''") + "'"


def run_duckdb(compression, src, out, columns, records=None, layout="newline_delimited"):
    import duckdb

    read = [c for c in columns if not c.get("path")]
    fields = ", ".join(f"{literal(c['name'])}: {literal(sql_type(parse_type(c['type'])))}" for c in read)
    if records:
        struct = "STRUCT(" + ", ".join(f"{ident(c['name'])} {sql_type(parse_type(c['type']))}" for c in read) + ")"
        cols = "{" + f"{literal(records)}: {literal(struct + '[]')}" + "}"
    else:
        cols = "{" + fields + "}"
    prefix = "r." if records else ""
    select = []
    for c in columns:
        if not c.get("path"):
            select.append(f"{prefix}{ident(c['name'])} AS {ident(c['name'])}")
            continue
        steps = parse_path(c["path"])
        expr = prefix + ident(steps[0][1])
        for kind, v in steps[1:]:
            expr += f"[{v + 1}]" if kind == "index" else f".{ident(v)}"
        select.append(f"{expr} AS {ident(c['name'])}")
    con = duckdb.connect()
    con.execute("SET threads=1")
    comp = "gzip" if compression == "gzip" else "none"
    scan = f"read_json({literal(src)}, format='{layout}', columns={cols}, compression='{comp}')"
    if records:
        scan = f"(SELECT unnest({ident(records)}) AS r FROM {scan})"
    con.execute(f"COPY (SELECT {', '.join(select)} FROM {scan}) TO {literal(out)} "
                f"(FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL {ZSTD_LEVEL})")
    con.close()


# ---------------------------------------------------------------------------------------
# pyarrow


def arrow_type(t, read=False):
    """The Arrow type of a parsed schema type; read: as pyarrow's JSON reader is asked for it
    (a date as a string: the reader converts no string to date32)."""
    import pyarrow as pa

    k = t[0]
    if read and t == ("scalar", "date"):
        return pa.string()
    if k == "scalar":
        return {"int32": pa.int32(), "int64": pa.int64(), "float32": pa.float32(), "float64": pa.float64(),
                "string": pa.string(), "bool": pa.bool_(), "date": pa.date32(),
                "timestamp": pa.timestamp("us", tz="UTC")}[t[1]]
    if k == "decimal":
        return pa.decimal128(t[1], t[2])
    if k == "struct":
        return pa.struct([(n, arrow_type(x, read)) for n, x in t[1]])
    if k == "array":
        return pa.list_(arrow_type(t[1], read))
    if k == "map":
        return pa.map_(pa.string(), arrow_type(t[1], read))
    raise ValueError("json")


def dates_cast(arr, t):
    """arr, read with dates as strings (arrow_type(t, read=True)), as arrow_type(t): the date
    strings cast to date32 at any depth. Child by child, since a plain cast of a struct also
    parses the (empty) child values under a NULL parent."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not has_date(t):
        return arr
    if t[0] == "scalar":
        return arr.cast(pa.date32())
    if t[0] == "struct":
        children = [dates_cast(pc.struct_field(arr, i), x) for i, (_, x) in enumerate(t[1])]
        return pa.StructArray.from_arrays(children, fields=[pa.field(n, arrow_type(x)) for n, x in t[1]],
                                          mask=arr.is_null())
    return pa.ListArray.from_arrays(arr.offsets, dates_cast(arr.values, t[1]), type=arrow_type(t),
                                    mask=arr.is_null())


def skipped_by_pyarrow(columns):
    """The columns pyarrow's JSON reader cannot produce: `json` ones and maps (at any depth:
    it has no way to keep a subtree as text, and no map type; an object with arbitrary keys
    could only become a struct of every key met, which is not the same value), and path
    columns that start in one."""
    types = {c["name"]: parse_type(c["type"]) for c in columns if not c.get("path")}
    out = []
    for c in columns:
        head = parse_path(c["path"])[0][1] if c.get("path") else c["name"]
        for t in (types.get(head, parse_type(c["type"])), parse_type(c["type"])):
            if has_json(t) or has_map(t):
                out.append(c["name"])
                break
    return out


def run_pyarrow(compression, src, out, columns, records=None):
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pjson
    import pyarrow.parquet as pq

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    skipped = set(skipped_by_pyarrow(columns))
    read = [c for c in columns if not c.get("path") and c["name"] not in skipped]
    schema = pa.schema([pa.field(c["name"], arrow_type(parse_type(c["type"]), read=True)) for c in read])
    if records:
        schema = pa.schema([pa.field(records, pa.list_(pa.struct(list(schema))))])
    source = pa.input_stream(src, compression="gzip" if compression == "gzip" else None)
    # A document of records is one JSON value: the block must hold it whole (1 MiB by default).
    block = (64 << 20) if records else None
    read_options = pjson.ReadOptions(use_threads=False, **({"block_size": block} if block else {}))
    table = pjson.read_json(source, read_options=read_options,
                            parse_options=pjson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"))
    if records:
        flat = pc.list_flatten(table.column(records).combine_chunks())
        table = pa.Table.from_struct_array(flat)
    for c in read:
        t = parse_type(c["type"])
        if has_date(t):
            i = table.schema.get_field_index(c["name"])
            table = table.set_column(i, c["name"], dates_cast(table.column(c["name"]).combine_chunks(), t))
    arrays, names = [], []
    for c in columns:
        if c["name"] in skipped:
            continue
        if not c.get("path"):
            arrays.append(table.column(c["name"]))
        else:
            steps = parse_path(c["path"])
            arr = table.column(steps[0][1]).combine_chunks()
            for kind, v in steps[1:]:
                if kind == "key":
                    arr = pc.struct_field(arr, v)
                else:
                    # One element per row, NULL where the list is shorter (or NULL: made
                    # empty first, since flattening drops a NULL list's slot).
                    arr = pc.fill_null(arr, pa.scalar([], arr.type))
                    arr = pc.list_slice(arr, v, v + 1, return_fixed_size_list=True).flatten()
            arrays.append(arr.cast(arrow_type(parse_type(c["type"]))))
        names.append(c["name"])
    pq.write_table(pa.table(arrays, names=names), out, compression="zstd", compression_level=ZSTD_LEVEL)


def main(argv):
    if len(argv) not in (6, 7, 8):
        sys.exit(__doc__)
    _, engine, compression, src, out, schema_path = argv[:6]
    layout = argv[6] if len(argv) > 6 else "newline_delimited"
    records = argv[7] if len(argv) > 7 else None
    with open(schema_path) as f:
        columns = json.load(f)
    if engine == "pyarrow":
        if layout != "newline_delimited":
            sys.exit(f"pyarrow's JSON reader reads newline-delimited values, not {layout}")
        run_pyarrow(compression, src, out, columns, records)
    elif engine == "duckdb":
        run_duckdb(compression, src, out, columns, records, layout)
    else:
        sys.exit(f"unknown engine {engine!r}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(sys.argv)
