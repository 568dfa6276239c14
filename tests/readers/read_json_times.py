"""Read the time columns of a JSON Lines file with pyarrow, as a user of pyarrow would read
epoch numbers and formatted strings, and print them as one JSON object on stdout:
{"column": [microseconds since the epoch, or days for a date, or null, ...], ...}.

Usage: read_json_times.py FILE COLUMNS
COLUMNS is a JSON list of {"name", "type": "timestamp"|"date", "format", "timezone"?} as a
source's schema spells them: `epoch_seconds`, `epoch_millis` and `epoch_micros` columns hold
JSON integers (cast to a timestamp of that unit); a strftime `format` reads strings with
pyarrow.compute.strptime; a `timezone` is applied to the naive times with
pyarrow.compute.assume_timezone (its default: a time a daylight-saving change skips or
repeats raises).
"""
import json
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

UNITS = {"epoch_seconds": "s", "epoch_millis": "ms", "epoch_micros": "us"}


def main():
    path, columns = sys.argv[1], json.loads(sys.argv[2])
    fields = []
    for c in columns:
        kind = pa.int64() if c["format"] in UNITS else pa.string()
        fields.append(pa.field(c["name"], kind))
    table = pj.read_json(
        path,
        parse_options=pj.ParseOptions(
            explicit_schema=pa.schema(fields), unexpected_field_behavior="ignore"
        ),
    )
    out = {}
    for c in columns:
        column = table.column(c["name"])
        if c["format"] in UNITS:
            times = pc.cast(column, pa.timestamp(UNITS[c["format"]], tz="UTC"))
        else:
            times = pc.strptime(column, format=c["format"], unit="us")
            if c.get("timezone"):
                times = pc.assume_timezone(times, timezone=c["timezone"])
        times = pc.cast(times, pa.timestamp("us", tz="UTC"))
        micros = pc.cast(times, pa.int64()).to_pylist()
        if c["type"] == "date":
            out[c["name"]] = [None if m is None else m // 86_400_000_000 for m in micros]
        else:
            out[c["name"]] = micros
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
