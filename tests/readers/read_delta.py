"""Read a Delta table with the `deltalake` Python package (an independent reader) and print
what the suites compare, as one JSON object on stdout.

Usage: read_delta.py TABLE_URI [VERSION]
S3 settings come from the environment (AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, ...).

Printed: the table version read, its active files, the rows, the sorted values of the first
column, the sum of every integer and decimal column (decimals as exact strings), and every
row of the table as a list (sorted), so a suite can compare it value for value.
"""
import decimal
import json
import os
import sys

from deltalake import DeltaTable


def storage_options():
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    options = {}
    if endpoint:
        options["AWS_ENDPOINT_URL"] = endpoint
        options["AWS_ALLOW_HTTP"] = "true" if endpoint.startswith("http://") else "false"
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION"):
        if os.environ.get(name):
            options[name if name != "AWS_DEFAULT_REGION" else "AWS_REGION"] = os.environ[name]
    return options


def plain(v):
    if isinstance(v, decimal.Decimal):
        return str(v)
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return v


def main():
    uri = sys.argv[1]
    version = int(sys.argv[2]) if len(sys.argv) > 2 else None
    options = storage_options() if uri.startswith("s3://") else {}
    table = DeltaTable(uri, version=version, storage_options=options)
    data = table.to_pyarrow_table()
    columns = data.column_names
    rows = sorted(
        ([plain(v) for v in row.values()] for row in data.to_pylist()),
        key=lambda r: json.dumps(r, default=str),
    )
    sums = {}
    for name in columns:
        values = [v for v in data.column(name).to_pylist() if v is not None]
        if values and all(isinstance(v, (int, decimal.Decimal)) and not isinstance(v, bool) for v in values):
            sums[name] = str(sum(values))
    first = sorted(v for v in data.column(columns[0]).to_pylist() if v is not None)
    print(json.dumps({
        "version": table.version(),
        "files": len(table.file_uris()),
        "rows": data.num_rows,
        "columns": columns,
        "first_column": first,
        "sums": sums,
        "table": rows,
    }, default=str))


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    # The package's runtime threads can abort the interpreter's own shutdown: leave at once.
    os._exit(0)
