"""Read a CSV file with pyarrow and print its columns as one JSON object on stdout, each
value in a form that compares exactly: {"column": [value, ...], ...} in the file's order.

Usage: read_csv.py FILE OPTIONS
OPTIONS is a JSON object: "delimiter" (one character), "column_types" (column name ->
int64, int32, float64, float32, string, bool, date, timestamp or decimal(P,S)), and any of
"null_values", "true_values", "false_values", "decimal_point", "timestamp_parsers",
"strings_can_be_null" and "quoted_strings_can_be_null", passed to
pyarrow.csv.ConvertOptions as they are (null: pyarrow's default).

Values: NULL as null, integers and booleans as JSON, strings as strings, floats as their
repr (a string, so that no JSON reader rounds them), decimals as their text ("1.50"),
timestamps as microseconds since the epoch, dates as days since the epoch.
"""
import json
import re
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as csv

TYPES = {
    "int64": pa.int64(),
    "int32": pa.int32(),
    "float64": pa.float64(),
    "float32": pa.float32(),
    "string": pa.string(),
    "bool": pa.bool_(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us"),
}

CONVERT_OPTIONS = (
    "null_values",
    "true_values",
    "false_values",
    "decimal_point",
    "timestamp_parsers",
    "strings_can_be_null",
    "quoted_strings_can_be_null",
)


def arrow_type(name):
    decimal = re.fullmatch(r"decimal\((\d+),(\d+)\)", name)
    if decimal:
        return pa.decimal128(int(decimal.group(1)), int(decimal.group(2)))
    return TYPES[name]


def values(column):
    kind = column.type
    if pa.types.is_timestamp(kind):
        return pc.cast(column, pa.int64()).to_pylist()
    if pa.types.is_date32(kind):
        return pc.cast(column, pa.int32()).to_pylist()
    if pa.types.is_floating(kind):
        return [None if v is None else repr(v) for v in column.to_pylist()]
    if pa.types.is_decimal(kind):
        return [None if v is None else str(v) for v in column.to_pylist()]
    return column.to_pylist()


def main():
    path, options = sys.argv[1], json.loads(sys.argv[2])
    types = {name: arrow_type(t) for name, t in options["column_types"].items()}
    convert = {k: options[k] for k in CONVERT_OPTIONS if options.get(k) is not None}
    table = csv.read_csv(
        path,
        parse_options=csv.ParseOptions(delimiter=options.get("delimiter", ",")),
        convert_options=csv.ConvertOptions(column_types=types, **convert),
    )
    json.dump({name: values(table.column(name)) for name in table.column_names}, sys.stdout)


if __name__ == "__main__":
    main()
