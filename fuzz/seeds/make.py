#!/usr/bin/env python3
"""Writes the seeds of the fuzz targets parquet, avro, orc, jsonl_nested and infer.

    python3 fuzz/seeds/make.py

Needs pyarrow and fastavro: like the nested fixtures' scripts, it installs them on first use
into the readers' virtualenv (tests/fixtures/nested/readers_venv.py) and runs again there.
Each seed is the option bytes its target reads first (see fuzz/fuzz_targets/*.rs), then a
valid input: the Avro and ORC fixtures of tests/fixtures/avro_orc (all but
poison-rle-loop.orc, the file orc-rust loops on) and of tests/fixtures/nested, small files
written here with the same rows (pyarrow for Parquet and ORC, fastavro for Avro), and lines of
the nested JSON Lines fixtures. Every seed stays under the 64 KiB the campaigns allow.
Deterministic: running it again rewrites the same files.
"""

import datetime
import decimal
import io
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
AVRO_ORC = os.path.join(ROOT, "tests", "fixtures", "avro_orc")
NESTED = os.path.join(ROOT, "tests", "fixtures", "nested")
sys.path.insert(0, NESTED)
import readers_venv  # noqa: E402

readers_venv.require("pyarrow", "fastavro")

import fastavro  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.orc as orc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

MAX = 64 << 10

# The first byte of the typed targets (fuzz_targets/common.rs, `typed_spec`): bits 0-1 the
# schema, 2 required columns as declared, 3-4 unknown fields (1 fail, 2 rescue), 5 bad values
# rescued, 6-7 rows per batch (1, 7, 100, 8192).
ORDERS, NESTED_COLUMNS, PATHS, CLOUDTRAIL = 0, 1, 2, 3
REQUIRED = 4
UNKNOWN_FAIL, UNKNOWN_RESCUE = 1 << 3, 2 << 3
BAD_RESCUE = 32
BATCH_1, BATCH_7, BATCH_100, BATCH_ALL = 0, 64, 128, 192


def typed_prefixes(schema):
    """A strict and a rescuing spec for files of this schema."""
    if schema == NESTED_COLUMNS:
        return [
            NESTED_COLUMNS | REQUIRED | BATCH_100,
            PATHS | REQUIRED | BATCH_7,
            NESTED_COLUMNS | UNKNOWN_RESCUE | BAD_RESCUE | BATCH_1,
        ]
    return [
        schema | REQUIRED | BATCH_100,
        schema | UNKNOWN_RESCUE | BAD_RESCUE | BATCH_7,
    ]


def write(target, name, data):
    assert len(data) <= MAX, f"{target}/{name}: {len(data)} bytes"
    folder = os.path.join(HERE, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def fixture(*parts):
    with open(os.path.join(ROOT, "tests", "fixtures", *parts), "rb") as f:
        return f.read()


def typed_seeds(target, name, data, schema):
    for prefix in typed_prefixes(schema):
        write(target, f"{name}-{prefix:02x}", bytes([prefix]) + data)


# --- rows -----------------------------------------------------------------------------------


def orders(rows):
    """The rows of the Avro and ORC fixtures (tests/fixtures/avro_orc/generate.py), a few."""
    out = []
    for order_id in range(1, rows + 1):
        out.append(
            {
                "order_id": order_id,
                "customer": None if order_id % 9 == 0 else f"Customer, {order_id}",
                "quantity": order_id % 7 + 1,
                "amount": decimal.Decimal((order_id % 1000) * 101 + 5).scaleb(-2),
                "ordered_at": datetime.datetime(
                    2024, 3, order_id % 28 + 1, 10, order_id % 60, tzinfo=datetime.timezone.utc
                ),
                "note": f"not in the schema {order_id}",
            }
        )
    return out


ORDERS_ARROW = pa.schema(
    [
        ("ordered_at", pa.timestamp("ms", tz="UTC")),
        ("amount", pa.decimal128(10, 2)),
        ("order_id", pa.int64()),
        ("note", pa.string()),
        ("quantity", pa.int16()),
        ("customer", pa.string()),
    ]
)


def orders_table(rows):
    return pa.Table.from_pylist(orders(rows), schema=ORDERS_ARROW)


T0 = 1_704_164_645_000_000_000  # 2024-01-02T03:04:05Z in nanoseconds
SECOND = 1_000_000_000


def nested_table(unit="ns"):
    """The rows of `checks::nested_batch` (shared/src/convert/columnar/typed.rs) and nested.orc."""
    scale = {"ns": 1, "us": 1000}[unit]
    ts = pa.timestamp(unit)
    user = pa.array(
        [
            {"name": "ann", "age": 30, "extra": "x"},
            {"name": "bob", "age": None, "extra": None},
            None,
        ],
        pa.struct([("name", pa.string()), ("age", pa.int16()), ("extra", pa.string())]),
    )
    event = pa.struct([("at", ts), ("kind", pa.string()), ("note", pa.string())])
    moments = [T0, T0 + 1000] if unit == "us" else [T0, T0 + 1]
    return pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "user": user,
            "tags": pa.array([["a", "b"], [], None], pa.list_(pa.string())),
            "attrs": pa.array(
                [[("k1", 1), ("k2", 2)], [], [("k1", 3)]], pa.map_(pa.string(), pa.int32())
            ),
            "events": pa.array(
                [
                    [
                        {"at": T0 // scale, "kind": "click", "note": "n1"},
                        {"at": (T0 + SECOND) // scale, "kind": "view", "note": None},
                    ],
                    None,
                    [{"at": (T0 + 2 * SECOND) // scale, "kind": "buy", "note": "n3"}],
                ],
                pa.list_(event),
            ),
            "moments": pa.array([[m // scale for m in moments], None, []], pa.list_(ts)),
            "payload": pa.array(['{"a": 1, "b": [true, null]}', "not json", None]),
        }
    )


def cloudtrail_table(rows):
    """The first rows of the typed CloudTrail fixture."""
    return pq.read_table(os.path.join(NESTED, "cloudtrail.parquet")).slice(0, rows)


# --- Parquet --------------------------------------------------------------------------------


def parquet(table, **options):
    out = io.BytesIO()
    pq.write_table(table, out, **options)
    return out.getvalue()


def parquet_seeds():
    table = orders_table(40)
    for name, options in {
        "orders-uncompressed": {"compression": "none", "row_group_size": 16},
        "orders-snappy": {"compression": "snappy"},
        "orders-zstd-v2-pages": {"compression": "zstd", "data_page_version": "2.0", "row_group_size": 25},
        "orders-gzip-plain": {"compression": "gzip", "use_dictionary": False},
        "orders-no-statistics": {"compression": "none", "write_statistics": False},
    }.items():
        typed_seeds("parquet", name, parquet(table, **options), ORDERS)
    typed_seeds("parquet", "nested", parquet(nested_table("us")), NESTED_COLUMNS)
    typed_seeds(
        "parquet",
        "nested-no-statistics",
        parquet(nested_table("ns"), write_statistics=False, compression="none"),
        NESTED_COLUMNS,
    )
    typed_seeds(
        "parquet",
        "cloudtrail-12",
        parquet(cloudtrail_table(12), compression="zstd", row_group_size=5),
        CLOUDTRAIL,
    )


# --- Avro -----------------------------------------------------------------------------------


def avro(schema, records, codec="null", block=10):
    out = io.BytesIO()
    fastavro.writer(
        out,
        fastavro.parse_schema(schema),
        records,
        codec=codec,
        sync_interval=block * 40,
        sync_marker=bytes(range(0x10, 0x20)),
    )
    return out.getvalue()


ORDER_AVRO = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "ordered_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "amount",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
        {"name": "order_id", "type": "long"},
        {"name": "note", "type": "string"},
        {"name": "quantity", "type": "int"},
        {"name": "customer", "type": ["null", "string"]},
    ],
}

NESTED_AVRO = {
    "type": "record",
    "name": "Row",
    "fields": [
        {"name": "id", "type": "long"},
        {
            "name": "user",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "User",
                    "fields": [
                        {"name": "name", "type": ["null", "string"]},
                        {"name": "age", "type": ["null", "int"]},
                        {"name": "extra", "type": ["null", "string"]},
                    ],
                },
            ],
        },
        {"name": "tags", "type": ["null", {"type": "array", "items": "string"}]},
        {"name": "attrs", "type": {"type": "map", "values": "int"}},
        {
            "name": "events",
            "type": [
                "null",
                {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "Event",
                        "fields": [
                            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
                            {"name": "kind", "type": "string"},
                            {"name": "note", "type": ["null", "string"]},
                        ],
                    },
                },
            ],
        },
        {
            "name": "moments",
            "type": [
                "null",
                {"type": "array", "items": {"type": "long", "logicalType": "timestamp-micros"}},
            ],
        },
        {"name": "payload", "type": ["null", "string"]},
    ],
}


def nested_records():
    t0 = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    second = datetime.timedelta(seconds=1)
    return [
        {
            "id": 1,
            "user": {"name": "ann", "age": 30, "extra": "x"},
            "tags": ["a", "b"],
            "attrs": {"k1": 1, "k2": 2},
            "events": [
                {"at": t0, "kind": "click", "note": "n1"},
                {"at": t0 + second, "kind": "view", "note": None},
            ],
            "moments": [t0, t0 + datetime.timedelta(microseconds=1)],
            "payload": '{"a": 1, "b": [true, null]}',
        },
        {
            "id": 2,
            "user": {"name": "bob", "age": None, "extra": None},
            "tags": [],
            "attrs": {},
            "events": None,
            "moments": None,
            "payload": "not json",
        },
        {
            "id": 3,
            "user": None,
            "tags": None,
            "attrs": {"k1": 3},
            "events": [{"at": t0 + 2 * second, "kind": "buy", "note": "n3"}],
            "moments": [],
            "payload": None,
        },
    ]


def avro_seeds():
    for codec in ["null", "deflate", "snappy", "zstandard", "bzip2", "xz"]:
        typed_seeds("avro", f"orders-{codec}", fixture("avro_orc", f"orders-{codec}.avro"), ORDERS)
    for name in ["bad-no-order-id", "bad-quantity-text"]:
        typed_seeds("avro", name, fixture("avro_orc", f"{name}.avro"), ORDERS)
    rows = orders(30)
    typed_seeds("avro", "orders-30-null", avro(ORDER_AVRO, rows), ORDERS)
    typed_seeds("avro", "orders-30-deflate", avro(ORDER_AVRO, rows, "deflate", 4), ORDERS)
    typed_seeds("avro", "nested", avro(NESTED_AVRO, nested_records(), block=1), NESTED_COLUMNS)
    typed_seeds("avro", "cloudtrail", fixture("nested", "cloudtrail.avro"), CLOUDTRAIL)


# --- ORC ------------------------------------------------------------------------------------


def orc_file(table, **options):
    out = io.BytesIO()
    orc.write_table(table, out, **options)
    return out.getvalue()


def orc_seeds():
    for codec in ["uncompressed", "zlib", "snappy", "lz4", "zstd"]:
        typed_seeds("orc", f"orders-{codec}", fixture("avro_orc", f"orders-{codec}.orc"), ORDERS)
    for name in ["bad-no-order-id", "bad-quantity-double"]:
        typed_seeds("orc", name, fixture("avro_orc", f"{name}.orc"), ORDERS)
    typed_seeds("orc", "orders-30", orc_file(orders_table(30), compression="uncompressed"), ORDERS)
    typed_seeds("orc", "nested", fixture("avro_orc", "nested.orc"), NESTED_COLUMNS)
    typed_seeds("orc", "cloudtrail", fixture("nested", "cloudtrail.orc"), CLOUDTRAIL)


# --- JSON Lines into nested schemas ---------------------------------------------------------

# fuzz_targets/jsonl_nested.rs: a = schema (0 clickstream, 1 cloudtrail, 2 github, 3 the
# target's own), bits 2-3 unknown fields (4 fail, 8 rescue), 16 bad values rescued, 32 keys in
# any case, 64 lineage, 128 required columns; b = batch rows and bytes; c = bit 0 reject.
CLICK, TRAIL, GITHUB, TYPES = 0, 1, 2, 3
J_FAIL, J_RESCUE, J_BAD, J_CASE, J_LINEAGE, J_REQUIRED = 4, 8, 16, 32, 64, 128
BIG_BATCH = 0xFF  # 8 rows, 249 bytes
REJECT_7 = 0x0F

TYPES_LINES = b"""\
{"n":1,"d":"1.5","s":{"ok":true,"at":"2024-01-02T03:04:05Z","odd name":[1,2]},"tags":{"a":1,"a.b":7},"grid":[[1.5],[2.5,3]],"deep":{"k":[{"x":"2024-01-02","y":0.5}]},"j":{"z":[1,null,"t"]},"ms":1704164645123,"local":"02/07/2024 03:04","zoned":"2024-01-02T03:04:05","day":1704153600}
{"n":"2","d":1.005,"s":[1],"tags":[],"grid":null,"ms":"1704164645123.5","zoned":"2024-01-02T03:04:05+01:00"}

{"n":3,"d":2,"s":{"ok":"maybe","at":null},"tags":{"a":1,"b":"x","a":2},"grid":[[],[1e3]],"deep":{},"j":"text","day":1704164645}
{"n":4,"S":{"OK":false},"Tags":{"A.B":1},"extra":{"x":1}}
"""


def lines(name, first, count, limit=4096):
    """Lines first..first+count-1 (from 1) of a nested fixture, cut to whole lines within
    `limit` bytes."""
    with open(os.path.join(NESTED, name), "rb") as f:
        all_lines = f.read().split(b"\n")
    out = b""
    for line in all_lines[first - 1 : first - 1 + count]:
        if out and len(out) + len(line) + 1 > limit:
            break
        out += line + b"\n"
    return out


def jsonl_nested_seeds():
    seeds = {
        # clickstream with its source's policies (rescue both, keys in any case)
        "clickstream-1": (CLICK | J_RESCUE | J_BAD | J_CASE | J_REQUIRED, BIG_BATCH, 0, lines("clickstream.jsonl", 1, 12)),
        "clickstream-100-strict": (CLICK | J_REQUIRED, BIG_BATCH, REJECT_7, lines("clickstream.jsonl", 100, 12)),
        "clickstream-180-small-batches": (CLICK | J_RESCUE | J_CASE, 0x13, 0, lines("clickstream.jsonl", 180, 12)),
        "cloudtrail-1": (TRAIL | J_REQUIRED, BIG_BATCH, 0, lines("cloudtrail.jsonl", 1, 4)),
        "cloudtrail-40-lineage": (TRAIL | J_LINEAGE | J_RESCUE | J_REQUIRED, 0x0A, REJECT_7, lines("cloudtrail.jsonl", 40, 4)),
        "github-1": (GITHUB | J_REQUIRED, BIG_BATCH, 0, lines("github.jsonl", 1, 4)),
        "github-50-fail-unknown": (GITHUB | J_FAIL, BIG_BATCH, 0, lines("github.jsonl", 50, 3)),
        "types": (TYPES | J_REQUIRED, BIG_BATCH, 0, TYPES_LINES),
        "types-rescue-any-case": (TYPES | J_RESCUE | J_BAD | J_CASE, 0x09, 0, TYPES_LINES),
        "types-reject": (TYPES | J_REQUIRED, 0x08, REJECT_7, TYPES_LINES),
    }
    for name, (a, b, c, data) in seeds.items():
        write("jsonl_nested", name, bytes([a, b, c]) + data)


# --- inference ------------------------------------------------------------------------------

# fuzz_targets/infer.rs: bits 0-2 the format (0-2 CSV , ; tab, 3-4 JSON Lines, 5 Parquet,
# 6 Avro, 7 ORC), 8 a partial sample, 16 a header.
CSV_COMMA, CSV_SEMICOLON, CSV_TAB, JSONL, PARQUET, AVRO, ORC = 0, 1, 2, 3, 5, 6, 7
PARTIAL, HEADER = 8, 16

CSV_TEXT = b'''\
id,qty,price,ratio,name,ok,day,at,when
1,10,0.10,0.5,"Smith, John",true,2024-01-02,2024-01-02T03:04:05Z,02/01/2024 03:04:05
2,-3,0.20,,"say ""hi""",FALSE,2024-02-29,2024-01-02T03:04:05.123456+00:00,29/02/2024 10:00:00
3,,-12.30,1e3,"two
lines",,,2024-01-02 03:04:05,01/03/2024 00:00:00
99999999999,7,1.005,2,,true,2024-12-31,2024-12-31T23:59:59Z,
'''


def infer_seeds():
    seeds = {
        "csv-header": (CSV_COMMA | HEADER, CSV_TEXT),
        "csv-no-header-partial": (CSV_COMMA | PARTIAL, CSV_TEXT.split(b"\n", 1)[1][:150]),
        "csv-semicolon": (CSV_SEMICOLON | HEADER, CSV_TEXT.replace(b",", b";")),
        "tsv": (CSV_TAB | HEADER, b"a\tb\tc\n1\t2024-01-02\tx\n2\t\t1.5\n"),
        "jsonl-clickstream": (JSONL, lines("clickstream.jsonl", 1, 10)),
        "jsonl-github-partial": (JSONL | PARTIAL, lines("github.jsonl", 1, 4)[:3000]),
        "jsonl-types": (JSONL, TYPES_LINES),
        "parquet-orders": (PARQUET, parquet(orders_table(20), compression="snappy")),
        "parquet-nested": (PARQUET, parquet(nested_table("us"))),
        "parquet-cloudtrail": (PARQUET, parquet(cloudtrail_table(6), compression="zstd")),
        "avro-orders": (AVRO, avro(ORDER_AVRO, orders(20), "deflate", 5)),
        "avro-nested": (AVRO, avro(NESTED_AVRO, nested_records())),
        "orc-orders": (ORC, orc_file(orders_table(20), compression="zstd")),
        "orc-nested": (ORC, fixture("avro_orc", "nested.orc")),
    }
    for name, (a, data) in seeds.items():
        write("infer", name, bytes([a]) + data)


def main():
    parquet_seeds()
    avro_seeds()
    orc_seeds()
    jsonl_nested_seeds()
    infer_seeds()


if __name__ == "__main__":
    main()
