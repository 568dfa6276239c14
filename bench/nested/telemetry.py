#!/usr/bin/env python3
"""Device and app telemetry as JSON Lines: the nested benchmark's second dataset, unlike
CloudTrail. Deterministic (one --seed gives the same bytes), standard library only.

    python3 bench/nested/telemetry.py --out DIR [--records 1000000] [--seed 11] [--gzip]

Writes DIR/telemetry.jsonl (one JSON object per line), DIR/telemetry.schema.json (the source's
columns as the sources document spells them: struct<…>, array<…>, map<string,…>, json,
scalars, and six columns read by `path`) and, with --gzip, DIR/telemetry.jsonl.gz (level 6).
At 1,000,000 records the JSON Lines are about 1.3 GB (about 1,300 bytes a record; generating
them takes about three minutes, gzipping them one more).

A record is what a telemetry SDK on a phone, a browser or an embedded device uploads: who sent
it (`device`, `app`, `session`), what it measured (`samples`, `latency_hist`, `counters`,
`spans`), free-form `labels`, and two subtrees kept as text (`payload`, `debug`). 23 columns:

| column | type |
|---|---|
| record_id | string, not null (a ULID) |
| received_at | timestamp, not null (RFC 3339, offsets Z, +02:00, -07:00, +05:30, …; 0/3/6 fraction digits) |
| kind | string (metrics, trace, crash, log) |
| device | struct<id, model, os:struct<name, version, build:int64, locale>, hw:struct<cpu:struct<arch, cores:int32, freq_mhz:float64>, mem_mb:int64, sensors:array<string>>, location:struct<lat, lon, accuracy_m: float64>> (four levels: device.hw.cpu.arch) |
| app | struct<name, version, build:int64, install_date:date, flags:array<string>, sdk:struct<name, version>> |
| session | struct<id, started_at:timestamp, seq:int64, user:struct<id:int64, tier, consent:struct<analytics:bool, ads:bool>>> |
| tags | array<string> |
| labels | map<string,string> (arbitrary keys: dots, slashes, non-ASCII, escapes) |
| counters | map<string,int64> |
| samples | array<float64> |
| latency_hist | array<int64> |
| spans | array<struct<name, start_us:int64, dur_us:int64, ok:bool, errors:array<string>, marks:array<int64>>> (an array of structs holding arrays) |
| billing | struct<plan, amount:decimal(12,4), currency> |
| battery | struct<level:float64, charging:bool, temp_c:float64> |
| payload | json (per kind: metric batches, stack frames, log attributes; objects, arrays, scalars) |
| debug | json (mostly absent) |
| message | string (log text: quotes, backslashes, line breaks, tabs, accents, CJK, emoji) |
| device_model, cpu_arch, consent_ads, first_span_name, first_sample, first_span_mark2 | read by path: `device.model`, `device.hw.cpu.arch`, `session.user.consent.ads`, `spans[0].name`, `samples[0]`, `spans[0].marks[1]` |

How it differs from CloudTrail (tests/fixtures/nested/generate.py): structs nested four levels
deep rather than three; arrays of scalars (string, int64, float64) and an array of structs
that itself holds arrays; two map columns (JSON objects whose keys are data); a date, a
decimal, int32 and float64 inside structs; path columns into an array of scalars and into an
array inside an array's element; and three producers (an iOS SDK, an Android SDK, a C SDK on
embedded devices) that write every struct's keys in their own order (map and json keys are
data: their order is kept). NULLs at every level: a NULL or absent struct (`device.location`,
`app`, `session.user`, `billing`, `battery`), a NULL field inside a struct at each depth, a
NULL and an empty array, a NULL element (`tags`, `samples`, `spans`), a NULL field of an
element, a NULL and an empty map, a NULL map value, a NULL and an absent `json` value; NULL is
written as `null` or as an absent key. Unknown fields at four depths (`_sdk` at the top,
`device.fingerprint`, `device.hw.cpu.vendor_id`, `spans[].trace_flags`), which the default
policy drops and counts. Strings with escapes: one producer escapes every non-ASCII character
(`\\u00e9`, surrogate pairs for emoji) and every slash (`\\/`), the others write UTF-8 raw; all
escape `\\"`, `\\\\`, `\\n`, `\\t`. A quarter of the `payload` subtrees and half of the
`debug` ones are not in compact form: spaces and tabs between tokens, slashes escaped; their
numbers are written as producers write them (`1.50`, `1e3`, `2.0`).

What it leaves out on purpose, so that every engine can read the same values: no key appears
twice in one object (the converter's model leaves a key twice inside a `json` value open, and
a map or struct key twice is a bad value); integers are written as integers (`7`, never
`7.0`, which pyarrow's JSON reader refuses for an int64: "couldn't parse:7.0"); a float64
field is written with a fraction or exponent except where a producer writes a whole number as
an integer (`"temp_c": 31`), which every engine reads as 31.0; map keys are never empty;
timestamps have at most six fraction digits (the converter refuses sub-microsecond digits).
"""

import argparse
import datetime as dt
import gzip
import json
import os
import random
import shutil

COLUMNS = [
    {"name": "record_id", "type": "string", "nullable": False},
    {"name": "received_at", "type": "timestamp", "nullable": False},
    {"name": "kind", "type": "string"},
    {"name": "device", "type": "struct<id:string,model:string,os:struct<name:string,version:string,build:int64,"
                                "locale:string>,hw:struct<cpu:struct<arch:string,cores:int32,freq_mhz:float64>,"
                                "mem_mb:int64,sensors:array<string>>,location:struct<lat:float64,lon:float64,"
                                "accuracy_m:float64>>"},
    {"name": "app", "type": "struct<name:string,version:string,build:int64,install_date:date,flags:array<string>,"
                             "sdk:struct<name:string,version:string>>"},
    {"name": "session", "type": "struct<id:string,started_at:timestamp,seq:int64,user:struct<id:int64,tier:string,"
                                 "consent:struct<analytics:bool,ads:bool>>>"},
    {"name": "tags", "type": "array<string>"},
    {"name": "labels", "type": "map<string,string>"},
    {"name": "counters", "type": "map<string,int64>"},
    {"name": "samples", "type": "array<float64>"},
    {"name": "latency_hist", "type": "array<int64>"},
    {"name": "spans", "type": "array<struct<name:string,start_us:int64,dur_us:int64,ok:bool,errors:array<string>,"
                               "marks:array<int64>>>"},
    {"name": "billing", "type": "struct<plan:string,amount:decimal(12,4),currency:string>"},
    {"name": "battery", "type": "struct<level:float64,charging:bool,temp_c:float64>"},
    {"name": "payload", "type": "json"},
    {"name": "debug", "type": "json"},
    {"name": "message", "type": "string"},
    {"name": "device_model", "path": "device.model", "type": "string"},
    {"name": "cpu_arch", "path": "device.hw.cpu.arch", "type": "string"},
    {"name": "consent_ads", "path": "session.user.consent.ads", "type": "bool"},
    {"name": "first_span_name", "path": "spans[0].name", "type": "string"},
    {"name": "first_sample", "path": "samples[0]", "type": "float64"},
    {"name": "first_span_mark2", "path": "spans[0].marks[1]", "type": "int64"},
]

START = dt.datetime(2025, 6, 1, tzinfo=dt.timezone.utc)
OFFSETS = [("Z", 0), ("+00:00", 0), ("+02:00", 120), ("-07:00", -420), ("+05:30", 330), ("+09:00", 540),
           ("-03:00", -180), ("+01:00", 60), ("+10:00", 600), ("-04:00", -240)]
KINDS = ["metrics", "metrics", "metrics", "trace", "trace", "log", "log", "crash"]
MODELS = {
    "ios": [("iPhone15,3", "iOS", "17.4.1"), ("iPhone14,5", "iOS", "17.2"), ("iPad13,8", "iPadOS", "17.4")],
    "android": [("Pixel 8", "Android", "14"), ("SM-S918B", "Android", "14"), ("moto g(7) power", "Android", "11"),
                ("Redmi Note 12 \"Pro\"", "Android", "13")],
    "embedded": [("Raspberry Pi 4 Model B Rev 1.4", "Linux", "6.6.20-v8+"), ("ESP32-S3", "FreeRTOS", "10.5.1"),
                 ("Jetson Orin Nano", "Linux", "5.15.122-tegra")],
}
ARCH = {"ios": "arm64e", "android": "arm64-v8a", "embedded": "aarch64"}
APPS = ["Fahrrad-Navi", "Café Finder", "メモ帳", "Tracker Pro", "weather/now", "Kühlschrank-Monitor"]
SDKS = {"ios": "otel-swift", "android": "otel-android", "embedded": "tm-telemetry-c"}
SENSORS = ["accel", "gyro", "mag", "baro", "gps", "lidar", "temp", "hum", "light", "prox"]
FLAGS = ["beta", "dark_mode", "new_onboarding", "offline_maps", "a/b:variant-2", "ünïcode_flag"]
TAGS = ["prod", "staging", "canary", "eu", "us", "wifi", "cellular", "low-power", "tag with space", "tag,comma",
        "quote\"tag", "日本", "emoji😀"]
LABEL_KEYS = ["env", "team", "region", "build.channel", "k8s/pod", "région", "owner\"quoted\"", "path\\win",
              "feature.flags.v2", "ci_job", "语言"]
LABEL_VALUES = ["prod", "ios-core", "eu-central-1", "nightly", "telemetry-7f9c", "Zoë", "C:\\temp\\x", "a\nb",
                "tab\tsep", "https://example.com/a/b?c=d", "✓ ok", "中文"]
COUNTER_KEYS = ["frames_dropped", "gc_pauses", "net.retries", "db.queries", "cache.hits", "cache.misses",
                "crashes.native", "anr", "disk.bytes_written", "wake_locks", "ble.scans"]
SPAN_NAMES = ["GET /api/v1/items", "POST /api/v1/events", "db.query SELECT", "render MainView", "decode jpeg",
              "sync \"inbox\"", "Lade Karte", "ble.connect", "mqtt.publish telemetry/up"]
ERRORS = ["timeout", "HTTP 503", "ECONNRESET", "certificate expired", "quota exceeded: \"uploads\"",
          "Zeitüberschreitung", "null pointer at 0x0"]
MESSAGES = ["Can't open \"settings.json\": no such file", "retrying in 5 s\u2026", "path C:\\Users\\zoë\\app.log",
            "line one\nline two", "col1\tcol2\tcol3", "Benutzer hat Einstellungen geändert", "同期が完了しました",
            "battery low 🔋 (12%)", "url=https://api.example.com/v1/x?y=1&z=2", "{\"not\": \"json column\"}",
            "backslash at end \\"]
TIERS = ["free", "pro", "enterprise", None]
PLANS = ["pro-monthly", "pro-yearly", "enterprise", "family"]


class Struct:
    """A schema struct: its keys are written in the producer's order; ABSENT entries are left out."""

    __slots__ = ("items",)

    def __init__(self, *items):
        self.items = list(items)


class Json:
    """A `json` subtree: written as it is, compact or not."""

    __slots__ = ("value", "loose")

    def __init__(self, value, loose):
        self.value, self.loose = value, loose


class Num:
    """A number written as given text (a decimal with its digits, `1e3`, `1.50`)."""

    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text


ABSENT = object()


def order(items, producer):
    if producer == 1:  # the Android SDK: reversed
        return items[::-1]
    if producer == 2:  # the C SDK: from the middle on, then the start
        k = len(items) // 2
        return items[k:] + items[:k]
    return items


def string(s, producer):
    if producer == 1:
        # Every non-ASCII character escaped, and slashes too.
        return json.dumps(s).replace("/", "\\/")
    return json.dumps(s, ensure_ascii=False)


def encode(v, producer, out):
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, int):
        out.append(str(v))
    elif isinstance(v, float):
        out.append(repr(v))
    elif isinstance(v, Num):
        out.append(v.text)
    elif isinstance(v, str):
        out.append(string(v, producer))
    elif isinstance(v, Struct):
        out.append("{")
        first = True
        for k, x in order(v.items, producer):
            if x is ABSENT:
                continue
            if not first:
                out.append(",")
            first = False
            out.append(f'"{k}":')
            encode(x, producer, out)
        out.append("}")
    elif isinstance(v, dict):  # a map: its keys are data, in their order
        out.append("{")
        first = True
        for k, x in v.items():
            if not first:
                out.append(",")
            first = False
            out.append(string(k, producer))
            out.append(":")
            encode(x, producer, out)
        out.append("}")
    elif isinstance(v, list):
        out.append("[")
        for i, x in enumerate(v):
            if i:
                out.append(",")
            encode(x, producer, out)
        out.append("]")
    elif isinstance(v, Json):
        out.append(json_text(v.value, v.loose, producer))
    else:
        raise TypeError(type(v))


def json_text(value, loose, producer):
    """A json subtree's text: compact, or (loose) with spaces and tabs and escaped slashes."""
    parts = []

    def w(x, depth):
        if isinstance(x, dict):
            parts.append("{")
            for i, (k, y) in enumerate(x.items()):
                if i:
                    parts.append(", " if loose else ",")
                parts.append(string(k, producer))
                parts.append(" : " if loose and depth % 2 else (": " if loose else ":"))
                w(y, depth + 1)
            parts.append("}")
        elif isinstance(x, list):
            parts.append("[ " if loose else "[")
            for i, y in enumerate(x):
                if i:
                    parts.append(",\t" if loose else ",")
                w(y, depth + 1)
            parts.append(" ]" if loose else "]")
        else:
            if isinstance(x, Num):
                parts.append(x.text)
            elif isinstance(x, str):
                parts.append(string(x, producer))
            else:
                parts.append(json.dumps(x))

    w(value, 0)
    text = "".join(parts)
    if loose:
        text = text.replace("/", "\\/")  # "/" occurs only inside strings
        text = " " + text + "\t"
    return text


def ts(at, r):
    label, minutes = r.choice(OFFSETS)
    local = (at + dt.timedelta(minutes=minutes)).replace(tzinfo=None)
    digits = r.choice((0, 3, 6, 6))
    if digits == 0:
        frac = ""
    elif digits == 3:
        frac = f".{local.microsecond // 1000:03d}"
    else:
        frac = f".{local.microsecond:06d}"
    return local.strftime("%Y-%m-%dT%H:%M:%S") + frac + label


def maybe(r, p_null, value, p_absent=0.0):
    """value, or NULL (written as null) with p_null, or absent with p_absent."""
    x = r.random()
    if x < p_absent:
        return ABSENT
    if x < p_absent + p_null:
        return None
    return value


def ulid(r, ms):
    alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    n = (ms << 80) | r.getrandbits(80)
    return "".join(alphabet[(n >> (5 * i)) & 31] for i in range(25, -1, -1))


def payload(r, kind):
    if kind == "metrics":
        return {"batch": [{"name": r.choice(COUNTER_KEYS), "value": Num(r.choice(("1.50", "1e3", "0", "-2", "3.25"))),
                           "unit": r.choice(("ms", "count", "By", "%"))} for _ in range(r.randint(1, 4))],
                "window_s": r.choice((10, 30, 60))}
    if kind == "trace":
        return {"trace_id": f"{r.getrandbits(128):032x}", "sampled": r.random() < 0.5,
                "attrs": {"http.route": r.choice(("/api/v1/items/{id}", "/login", "/")),
                          "http.status_code": r.choice((200, 200, 404, 503)), "retry": None}}
    if kind == "crash":
        return {"signal": r.choice(("SIGSEGV", "SIGABRT", "EXC_BAD_ACCESS")),
                "frames": [{"fn": r.choice(("main", "objc_msgSend", "std::vector<int>::at", "Løader::run")),
                            "addr": f"0x{r.getrandbits(40):x}", "line": r.randint(1, 5000)}
                           for _ in range(r.randint(2, 6))],
                "note": r.choice(MESSAGES)}
    choice = r.random()
    if choice < 0.6:
        return {"level": r.choice(("debug", "info", "warn", "error")), "logger": r.choice(("net", "ui", "db/sqlite")),
                "fields": {"user": r.choice(("zoë", "anon", "日本")), "ok": r.random() < 0.5, "n": r.randint(-5, 10**9)}}
    if choice < 0.8:
        return [r.randint(0, 100), "mixed", None, {"deep": {"deeper": {"deepest": [1, Num("2.0"), "three"]}}}]
    return r.choice(("just a string", 42, Num("3.14"), True))


def record(r, i, ms):
    platform = r.choice(("ios", "ios", "android", "android", "embedded"))
    producer = {"ios": 0, "android": 1, "embedded": 2}[platform]
    model, os_name, os_version = r.choice(MODELS[platform])
    at = dt.datetime.fromtimestamp(ms // 1000, dt.timezone.utc).replace(microsecond=(ms % 1000) * 1000 + r.randrange(1000))
    kind = r.choice(KINDS)
    cpu = Struct(("arch", maybe(r, 0.02, ARCH[platform])), ("cores", r.choice((2, 4, 6, 8))),
                 ("freq_mhz", maybe(r, 0.05, round(r.uniform(600, 3200), r.choice((0, 1, 2))), 0.05)))
    if r.random() < 0.3:
        cpu.items.append(("vendor_id", r.choice(("ARM", "Apple", "Qualcomm"))))  # unknown: dropped, counted
    hw = Struct(("cpu", maybe(r, 0.03, cpu)), ("mem_mb", r.choice((512, 2048, 4096, 8192, 12288))),
                ("sensors", maybe(r, 0.1, r.sample(SENSORS, r.randint(0, 5)))))
    location = Struct(("lat", round(r.uniform(-90, 90), 5) or 0.5), ("lon", round(r.uniform(-180, 180), 5) or 0.5),
                      ("accuracy_m", maybe(r, 0.2, round(r.expovariate(1 / 30) + 1, 1))))
    device = Struct(("id", f"dev-{r.getrandbits(48):012x}"), ("model", maybe(r, 0.02, model)),
                    ("os", Struct(("name", os_name), ("version", os_version),
                                  ("build", maybe(r, 0.1, r.randrange(10**5, 10**8), 0.1)),
                                  ("locale", maybe(r, 0.1, r.choice(("de_DE", "en_US", "ja_JP", "pt_BR")))))),
                    ("hw", hw), ("location", maybe(r, 0.1, location, 0.05)))
    if r.random() < 0.2:
        device.items.insert(2, ("fingerprint", {"hash": f"{r.getrandbits(64):016x}", "v": 2}))  # unknown
    app = None
    if platform != "embedded" or r.random() < 0.3:
        app = Struct(("name", r.choice(APPS)), ("version", f"{r.randint(1, 9)}.{r.randint(0, 20)}.{r.randint(0, 9)}"),
                     ("build", r.randrange(100, 100000)),
                     ("install_date", maybe(r, 0.1, (dt.date(2020, 1, 1) + dt.timedelta(days=r.randrange(1900))).isoformat())),
                     ("flags", maybe(r, 0.2, r.sample(FLAGS, r.randint(0, 3)))),
                     ("sdk", maybe(r, 0.05, Struct(("name", SDKS[platform]), ("version", maybe(r, 0.1, "1.9.0"))))))
    user = Struct(("id", r.randrange(1, 1 << 45)), ("tier", maybe(r, 0.0, r.choice(TIERS), 0.1)),
                  ("consent", maybe(r, 0.1, Struct(("analytics", r.random() < 0.8), ("ads", maybe(r, 0.2, r.random() < 0.3))), 0.1)))
    session = Struct(("id", f"{r.getrandbits(64):016x}"),
                     ("started_at", ts(at - dt.timedelta(seconds=r.randrange(7200)), r)),
                     ("seq", r.randrange(0, 5000)), ("user", maybe(r, 0.2, user, 0.1)))
    tags = maybe(r, 0.1, [maybe(r, 0.05, t) for t in r.sample(TAGS, r.randint(0, 4))], 0.05)
    labels = maybe(r, 0.05, {k: maybe(r, 0.05, r.choice(LABEL_VALUES)) for k in r.sample(LABEL_KEYS, r.randint(0, 4))}, 0.05)
    counters = maybe(r, 0.05, {k: r.choice((0, r.randrange(1000), r.randrange(10**12)))
                               for k in r.sample(COUNTER_KEYS, r.randint(0, 5))}, 0.05)
    samples = maybe(r, 0.1, [maybe(r, 0.03, round(r.gauss(50, 20), r.choice((1, 3, 6)))) for _ in range(r.randint(0, 8))])
    hist = maybe(r, 0.1, [r.randrange(0, 500) for _ in range(r.choice((0, 4, 8)))])
    spans = None
    if kind in ("trace", "crash") or r.random() < 0.3:
        spans = []
        t0 = r.randrange(10**9)
        for _ in range(r.randint(0, 4)):
            if r.random() < 0.03:
                spans.append(None)
                continue
            s = Struct(("name", r.choice(SPAN_NAMES)), ("start_us", t0), ("dur_us", maybe(r, 0.05, r.randrange(1, 10**7))),
                       ("ok", maybe(r, 0.05, r.random() < 0.85)),
                       ("errors", maybe(r, 0.5, r.sample(ERRORS, r.randint(0, 2)), 0.3)),
                       ("marks", maybe(r, 0.2, [r.randrange(10**6) for _ in range(r.randint(0, 5))])))
            if r.random() < 0.25:
                s.items.append(("trace_flags", r.choice((0, 1))))  # unknown
            spans.append(s)
            t0 += r.randrange(10**5)
    elif r.random() < 0.5:
        spans = ABSENT
    billing = ABSENT
    if r.random() < 0.15:
        cents = r.randrange(1, 10**7)
        whole, frac = divmod(cents, 100)
        amount = r.choice((f"{whole}", f"{whole}.{frac:02d}", f"{whole}.{frac:02d}00", f"{whole}.{frac // 10}"))
        billing = Struct(("plan", r.choice(PLANS)), ("amount", maybe(r, 0.05, Num(amount))),
                         ("currency", r.choice(("EUR", "USD", "JPY", "BRL"))))
    battery = maybe(r, 0.15, Struct(("level", round(r.random(), 2) or 0.01), ("charging", r.random() < 0.3),
                                    # The C SDK writes whole temperatures as integers.
                                    ("temp_c", r.randint(15, 45) if producer == 2 else round(r.uniform(15, 45), 1))), 0.1)
    loose = r.random() < 0.25
    items = [
        ("record_id", ulid(r, ms)), ("received_at", ts(at, r)), ("kind", kind), ("device", device), ("app", app),
        ("session", session), ("tags", tags), ("labels", labels), ("counters", counters), ("samples", samples),
        ("latency_hist", hist), ("spans", spans), ("billing", billing), ("battery", battery),
        ("payload", maybe(r, 0.1, Json(payload(r, kind), loose))),
        ("debug", maybe(r, 0.1, Json({"build": f"{r.getrandbits(32):08x}", "flags": r.sample(FLAGS, 2),
                                      "paths": ["/var/log/app.log", "C:\\logs\\app.log"], "env": {"LANG": "de_DE.UTF-8"}},
                                     r.random() < 0.5), 0.7)),
        ("message", maybe(r, 0.3, r.choice(MESSAGES))),
    ]
    if r.random() < 0.1:
        items.insert(3, ("_sdk", {"name": SDKS[platform], "queue": r.randrange(100)}))  # unknown at the top
    out = []
    encode(Struct(*items), producer, out)
    return "".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--gzip", action="store_true", help="also write telemetry.jsonl.gz (level 6)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "telemetry.schema.json"), "w") as f:
        json.dump(COLUMNS, f, indent=1, ensure_ascii=False)
        f.write("\n")
    r = random.Random(args.seed)
    path = os.path.join(args.out, "telemetry.jsonl")
    ms = int(START.timestamp() * 1000)
    with open(path + ".tmp", "w", encoding="utf-8", newline="\n", buffering=1 << 20) as f:
        for i in range(args.records):
            ms += int(r.expovariate(1 / 25))
            f.write(record(r, i, ms))
            f.write("\n")
    os.replace(path + ".tmp", path)
    if args.gzip:
        with open(path, "rb") as src, open(path + ".gz.tmp", "wb") as raw, \
                gzip.GzipFile(filename="", mode="wb", compresslevel=6, fileobj=raw, mtime=0) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(path + ".gz.tmp", path + ".gz")
    print(json.dumps({"records": args.records, "bytes": os.path.getsize(path)}))


if __name__ == "__main__":
    main()
