#!/usr/bin/env python3
"""The peers of the line-log benchmark, one engine per process (the harness times it):

    peers.py duckdb-csv   DATASET IN OUT   # DuckDB read_csv, space-delimited, quoted, typed
    peers.py duckdb-regex DATASET IN OUT   # DuckDB regexp_extract with the Athena pattern's groups
    peers.py pyarrow-csv  DATASET IN OUT   # pyarrow.csv, space-delimited, quoted, typed

DATASET is alb or s3_access. One thread each, zstd level 3 Parquet. `read_csv` reads a log's
space-separated fields as they stand (`client:port` one field, the quoted request one field),
less work than the presets do (they split those and add a typed event time); the regex
variant does the presets' work: the same named groups as tidemark's preset pattern.
Prints the rows written as JSON.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..", "..")

# The fields as AWS writes them, typed as the presets type them.
CSV_COLUMNS = {
    "alb": [
        ("type", "VARCHAR"), ("time", "TIMESTAMP"), ("elb", "VARCHAR"), ("client", "VARCHAR"),
        ("target", "VARCHAR"), ("request_processing_time", "DOUBLE"),
        ("target_processing_time", "DOUBLE"), ("response_processing_time", "DOUBLE"),
        ("elb_status_code", "INTEGER"), ("target_status_code", "VARCHAR"),
        ("received_bytes", "BIGINT"), ("sent_bytes", "BIGINT"), ("request", "VARCHAR"),
        ("user_agent", "VARCHAR"), ("ssl_cipher", "VARCHAR"), ("ssl_protocol", "VARCHAR"),
        ("target_group_arn", "VARCHAR"), ("trace_id", "VARCHAR"), ("domain_name", "VARCHAR"),
        ("chosen_cert_arn", "VARCHAR"), ("matched_rule_priority", "VARCHAR"),
        ("request_creation_time", "VARCHAR"), ("actions_executed", "VARCHAR"),
        ("redirect_url", "VARCHAR"), ("lambda_error_reason", "VARCHAR"),
        ("target_port_list", "VARCHAR"), ("target_status_code_list", "VARCHAR"),
        ("classification", "VARCHAR"), ("classification_reason", "VARCHAR"),
        ("conn_trace_id", "VARCHAR"),
    ],
}


def preset(name):
    with open(os.path.join(REPO, "shared", "presets", f"aws.{name}.json")) as f:
        return json.load(f)["source"]


DUCK = {"int32": "INTEGER", "int64": "BIGINT", "float64": "DOUBLE", "float32": "FLOAT",
        "string": "VARCHAR", "date": "DATE", "timestamp": "TIMESTAMP"}


def duckdb_regex(dataset, inp, out):
    import duckdb
    src = preset(dataset)
    pattern = src["regex"]["pattern"]  # RE2 takes (?P<name>…)
    names = [c["name"] for c in src["schema"] if "path" not in c]
    types = {c["name"]: c["type"] for c in src["schema"]}
    nulls = src["regex"]["null_values"]
    con = duckdb.connect()
    con.execute("SET threads=1")
    null_list = ", ".join("'" + n.replace("'", "''") + "'" for n in nulls)
    fields = []
    for n in names:
        v = f"nullif_any(m['{n}'])"
        fields.append(f"TRY_CAST({v} AS {DUCK[types[n]]}) AS \"{n}\"")
    con.execute(f"CREATE MACRO nullif_any(x) AS CASE WHEN x IN ({null_list}) THEN NULL ELSE x END")
    names_sql = ", ".join(f"'{n}'" for n in names)
    pat = pattern.replace("'", "''")
    con.execute(f"""
        COPY (
          SELECT {", ".join(fields)}
          FROM (SELECT regexp_extract(line, '^{pat}$', [{names_sql}]) AS m
                FROM read_csv('{inp}', columns={{'line': 'VARCHAR'}}, delim='\\0', quote='',
                              escape='', header=false, auto_detect=false))
        ) TO '{out}' (FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 3)
    """)
    return con.execute(f"SELECT count(*) FROM '{out}'").fetchone()[0]


def duckdb_csv(dataset, inp, out):
    import duckdb
    con = duckdb.connect()
    con.execute("SET threads=1")
    cols = ", ".join(f"'{n}': '{t}'" for n, t in CSV_COLUMNS[dataset])
    con.execute(f"""
        COPY (SELECT * FROM read_csv('{inp}', delim=' ', quote='"', escape='\\', header=false,
                                     auto_detect=false, columns={{{cols}}}, nullstr='-',
                                     strict_mode=false, ignore_errors=true))
        TO '{out}' (FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 3)
    """)
    return con.execute(f"SELECT count(*) FROM '{out}'").fetchone()[0]


def pyarrow_csv(dataset, inp, out):
    import pyarrow as pa
    import pyarrow.csv as pc
    import pyarrow.parquet as pq
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    arrow = {"VARCHAR": pa.string(), "TIMESTAMP": pa.timestamp("us", tz="UTC"), "DOUBLE": pa.float64(),
             "INTEGER": pa.int32(), "BIGINT": pa.int64()}
    names = [n for n, _ in CSV_COLUMNS[dataset]]
    table = pc.read_csv(
        inp,
        read_options=pc.ReadOptions(column_names=names, use_threads=False, block_size=1 << 22),
        parse_options=pc.ParseOptions(delimiter=" ", quote_char='"', escape_char="\\",
                                      invalid_row_handler=lambda row: "skip"),
        convert_options=pc.ConvertOptions(column_types={n: arrow[t] for n, t in CSV_COLUMNS[dataset]},
                                          null_values=["-"], strings_can_be_null=True),
    )
    pq.write_table(table, out, compression="zstd", compression_level=3)
    return table.num_rows


def main():
    engine, dataset, inp, out = sys.argv[1:5]
    rows = {"duckdb-csv": duckdb_csv, "duckdb-regex": duckdb_regex, "pyarrow-csv": pyarrow_csv}[engine](dataset, inp, out)
    print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
