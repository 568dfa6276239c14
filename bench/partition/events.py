#!/usr/bin/env python3
"""Web and app events, the partition benchmark's second dataset: deterministic, standard library
only.

    python3 bench/partition/events.py --out DIR [--rows 1000000] [--partitions 1 10 100 1000]
                                      [--seed 7] [--formats csv jsonl]

Writes into DIR, for every N of --partitions, `events-p{N}.csv` (a header, RFC 4180 quoting:
a field is quoted when it holds a comma, a quote, CR or LF, quotes doubled) and
`events-p{N}.jsonl` (one compact JSON object per line) holding the same records, and
`events.schema.json`, the source schema tidemark reads them with (bench/schema.json's format),
and `events-p{N}.counts.json`, the rows per tenant (what every engine's output must hold).
The files for different N differ only in the partition column `tenant`; every other value is
the same for one --rows and --seed. At the default size (1,000,000 rows) the CSV is about
300 MB and the JSON Lines about 540 MB per N; generating the eight files takes about 100 s.

What the records are: one row per event an analytics collector receives from web pages, mobile
apps and servers, 20 columns:

| column | type | what |
|---|---|---|
| event_id | int64 | snowflake-like id (the collector's milliseconds << 22 \| a sequence) |
| event_time | timestamp | RFC 3339 with the producer's offset (Z, +00:00, -00:00, +01:00, +05:30, +05:45, -03:30, -08:00, +13:00 …), 0, 3 or 6 fraction digits; 2% up to a day late |
| tenant | string | **the partition column**: one of exactly N tenant slugs, Zipf-distributed (s = 1.1: the largest tenant has 37% of the rows at N = 10, 23% at 100, 18% at 1000, where the smallest has about 90 of a million), in random row order |
| session_id | string | `s-` and 16 hex digits |
| user_id | int64 | NULL for anonymous visitors (about 18%) |
| event_name | string | page_view, click, scroll, search, add_to_cart, purchase, … (skewed) |
| page_url | string | https URL with paths, percent-escapes, raw non-ASCII path segments, query strings with `&`, `=`, commas, UTM parameters; 20–160 characters |
| referrer | string | a URL, NULL for about 43% |
| user_agent | string | browser, mobile-app, bot and CLI user agents (commas, parentheses, semicolons, quotes in a few) |
| ip | string | IPv4 or IPv6 |
| search_query | string | NULL unless a search (about 90% NULL); quotes, commas, backslashes, tabs, a newline in some, accented, CJK and emoji text |
| duration_ms | float64 | NULL for about 10%; exponential, shortest round-trip decimal text |
| geo_lat | float64 | NULL for about 25%; -90..90 with 4-6 decimals |
| bytes_sent | int64 | 0 .. 10^10 |
| http_status | int32 | 200, 204, 301, 304, 400, 403, 404, 429, 500, 503 |
| screen_width | int32 | NULL for server events |
| is_bot | bool | |
| is_first_visit | bool | NULL for about 40% |
| revenue | decimal(12,4) | NULL unless a purchase or refund; 0-4 fraction digits written, negative for refunds |
| signup_date | date | NULL for anonymous visitors and some others |

How it differs from the project's own generators. From `tidemark-bench gen`'s orders (11
non-null columns, sequential ids, short strings, two-decimal float prices, UTC timestamps,
and here `p = order_id % N`, which spreads rows evenly over partitions) in nearly every
respect: NULLs in 9 columns (an empty CSV field; in JSON Lines `null` or an absent key, half
and half), long and irregular strings that need CSV quoting, timestamps with offsets, a
decimal, a date, int32 and nullable bools. From the wide dataset (`gen --dataset wide`, which
has long strings, NULLs and offsets too) in what that one leaves out or does otherwise: quoted
CSV fields holding line breaks (pyarrow needs `newlines_in_values`), JSON keys in three orders
(one per producer: web, app, server), one producer escaping every non-ASCII character and
every slash (`\\u00e9`, `\\/`) where the others write UTF-8, decimals as JSON numbers with 0
to 4 fraction digits, URLs with query strings. From both: a partition key that is a string
with a skewed, non-modular distribution over exactly N values.

No field is ever the empty string (an empty CSV field is NULL), no float is -0.0, NaN or
infinite, and no timestamp has digits below the microsecond, so every engine can read the
same value from either format.
"""

import argparse
import bisect
import datetime as dt
import itertools
import json
import os
import random
import sys

SCHEMA = [
    {"name": "event_id", "type": "int64", "nullable": False},
    {"name": "event_time", "type": "timestamp", "nullable": False},
    {"name": "tenant", "type": "string", "nullable": False},
    {"name": "session_id", "type": "string", "nullable": False},
    {"name": "user_id", "type": "int64", "nullable": True},
    {"name": "event_name", "type": "string", "nullable": False},
    {"name": "page_url", "type": "string", "nullable": False},
    {"name": "referrer", "type": "string", "nullable": True},
    {"name": "user_agent", "type": "string", "nullable": False},
    {"name": "ip", "type": "string", "nullable": False},
    {"name": "search_query", "type": "string", "nullable": True},
    {"name": "duration_ms", "type": "float64", "nullable": True},
    {"name": "geo_lat", "type": "float64", "nullable": True},
    {"name": "bytes_sent", "type": "int64", "nullable": False},
    {"name": "http_status", "type": "int32", "nullable": False},
    {"name": "screen_width", "type": "int32", "nullable": True},
    {"name": "is_bot", "type": "bool", "nullable": False},
    {"name": "is_first_visit", "type": "bool", "nullable": True},
    {"name": "revenue", "type": "decimal(12,4)", "nullable": True},
    {"name": "signup_date", "type": "date", "nullable": True},
]
NAMES = [c["name"] for c in SCHEMA]
PARTITION = "tenant"
ZIPF_S = 1.1

START = dt.datetime(2025, 3, 1, tzinfo=dt.timezone.utc)
OFFSETS = [("Z", 0), ("+00:00", 0), ("+01:00", 60), ("+02:00", 120), ("-05:00", -300), ("-08:00", -480),
           ("+05:30", 330), ("+05:45", 345), ("-03:30", -210), ("+09:00", 540), ("+13:00", 780), ("-00:00", 0)]
OFFSET_WEIGHTS = [30, 10, 12, 8, 12, 8, 6, 2, 2, 6, 1, 1]
EVENTS = ["page_view", "click", "scroll", "search", "add_to_cart", "purchase", "refund", "sign_in",
          "sign_up", "video_play", "api_call", "heartbeat"]
EVENT_WEIGHTS = [40, 20, 12, 8, 5, 2, 0.3, 3, 0.7, 3, 4, 2]
HOSTS = ["www.example.com", "shop.example.co.uk", "app.bücherladen.de", "docs.example.io", "m.example.jp",
         "api.example.com"]
PATHS = ["", "products", "category", "search", "cart", "checkout", "account", "blog", "help", "café",
         "über-uns", "製品", "2025", "sale", "p", "item", "v2", "assets"]
WORDS = ["red", "shoes", "size", "42", "naïve", "café", "crème brûlée", "東京", "データ", "😀", "Zoë", "Ärger",
         "jalapeño", "50%", "off", "C:\\Users\\me", "a\\b", "it's", "\"quoted\"", "x,y", "tab\there", "new",
         "line", "sale", "gift card", "€ 20", "<script>", "a/b", "10\" screen", "résumé"]
UTM = ["utm_source=newsletter", "utm_medium=email", "utm_campaign=spring%20sale", "gclid=Cj0KCQiA",
       "fbclid=IwAR2x", "ref=home", "ids=12,34,56", "q=red+shoes", "page=2", "sort=price_asc",
       "filter=color%3Dred%26size%3D42", "lang=de", "next=%2Fcart%3Fstep%3D2", "name=Zo%C3%AB"]
AGENTS = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{v}.0.{b}.{p} Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.{p} Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64; rv:{v}.0) Gecko/20100101 Firefox/{v}.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_{p} like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{v}.0.{b}.{p} Mobile Safari/537.36",
    "ShopApp/4.{p}.{b} (iPhone; iOS 17.3; Scale/3.00)",
    "ShopApp/4.{p}.{b} (Android 14; SM-S918B; \"Galaxy S23 Ultra\")",
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "curl/8.{p}.0",
    "python-requests/2.{v}.0",
    "Go-http-client/2.0",
    "okhttp/4.{p}.{b}",
]
AGENT_WEIGHTS = [22, 10, 5, 12, 10, 16, 6, 3, 2, 2, 2, 10]
BOTS = {7, 8, 9, 10}
TENANT_WORDS = ["acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "wonka", "tyrell", "cyberdyne",
                "soylent", "aperture", "massive", "oscorp", "gringotts", "nakatomi", "monarch", "vandelay",
                "dunder", "pied"]
TENANT_SUFFIX = ["", "-corp", "-labs", "-io", "-eu", "-us", "_shop", "-retail", "-apac", "-media"]


def tenant_names(n):
    """n distinct slugs (letters, digits, '-' and '_': one directory name in every engine's
    Hive escaping), in a seeded order so that the largest tenant is not the first by name."""
    names = []
    for i in itertools.count():
        w = TENANT_WORDS[i % len(TENANT_WORDS)]
        s = TENANT_SUFFIX[(i // len(TENANT_WORDS)) % len(TENANT_SUFFIX)]
        k = i // (len(TENANT_WORDS) * len(TENANT_SUFFIX))
        names.append(f"{w}{s}" + (f"-{k}" if k else ""))
        if len(names) == n:
            break
    random.Random(f"tenant-names-{n}").shuffle(names)
    return names


def tenants(rows, n, seed):
    """The tenant of every row: each of the n names at least once, the rest Zipf(s)-distributed
    by rank, all in a random order."""
    if rows < n:
        sys.exit(f"events: {rows} rows cannot hold {n} distinct tenants")
    rng = random.Random(f"{seed}-tenants-{n}")
    names = tenant_names(n)
    weights = [1 / (k + 1) ** ZIPF_S for k in range(n)]
    picks = list(range(n)) + rng.choices(range(n), weights=weights, k=rows - n)
    rng.shuffle(picks)
    return [names[i] for i in picks]


def csv_field(s):
    if s is None:
        return ""
    if any(c in s for c in ',"\r\n'):
        return '"' + s.replace('"', '""') + '"'
    return s


def url(rng, host=None):
    host = host or rng.choice(HOSTS)
    depth = rng.choice((0, 1, 1, 2, 2, 3))
    path = "/".join(rng.choice(PATHS) or "index" for _ in range(depth))
    if rng.random() < 0.25:
        path += f"/{rng.randrange(1, 10**6)}"
    if rng.random() < 0.1:
        path += "/" + rng.choice(["Sch%C3%B6ne%20Gr%C3%BC%C3%9Fe", "a%2Fb", "100%25-cotton", "%E2%82%AC"])
    q = ""
    if rng.random() < 0.4:
        q = "?" + "&".join(rng.sample(UTM, rng.choice((1, 1, 2, 3, 4))))
    frag = "#" + rng.choice(["top", "reviews", "section-2"]) if rng.random() < 0.05 else ""
    return f"https://{host}/{path}{q}{frag}"


def search_text(rng):
    words = [rng.choice(WORDS) for _ in range(rng.choice((1, 2, 2, 3, 4, 6)))]
    text = " ".join(words)
    if rng.random() < 0.05:
        text += "\n" + rng.choice(WORDS)  # pasted with a line break
    return text


def ip(rng):
    if rng.random() < 0.8:
        return f"{rng.randrange(1, 224)}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    return "2001:db8:" + ":".join(f"{rng.randrange(65536):x}" for _ in range(rng.choice((2, 6))))


def timestamp(at, rng):
    """at (an aware UTC datetime, whole microseconds) as RFC 3339 at a producer's offset."""
    label, minutes = OFFSETS[bisect.bisect(OFFSET_CUM, rng.random() * OFFSET_CUM[-1])]
    local = (at + dt.timedelta(minutes=minutes)).replace(tzinfo=None)
    digits = rng.choice((0, 3, 3, 6))
    if digits == 0:
        local = local.replace(microsecond=0)
        frac = ""
    elif digits == 3:
        local = local.replace(microsecond=local.microsecond // 1000 * 1000)
        frac = f".{local.microsecond // 1000:03d}"
    else:
        frac = f".{local.microsecond:06d}"
    return local.strftime("%Y-%m-%dT%H:%M:%S") + frac + label


OFFSET_CUM = list(itertools.accumulate(OFFSET_WEIGHTS))
EVENT_CUM = list(itertools.accumulate(EVENT_WEIGHTS))
AGENT_CUM = list(itertools.accumulate(AGENT_WEIGHTS))


def pick(rng, items, cum):
    return items[bisect.bisect(cum, rng.random() * cum[-1])]


def records(rows, seed):
    """Yields every record as a dict of Python values (None: NULL) with the JSON text of each
    string already made per producer style; the tenant is left out."""
    rng = random.Random(seed)
    ms = int(START.timestamp() * 1000)
    seq = 0
    for i in range(rows):
        step = int(rng.expovariate(1 / 12))  # ~12 ms between events: ~3.4 hours per million
        if step:
            ms += step
            seq = 0
        else:
            seq += 1
        producer = rng.choice(("web", "web", "app", "server"))
        micros = rng.randrange(1000)
        at = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).replace(
            microsecond=(ms % 1000) * 1000 + micros)
        # Some producers' clocks disagree with the collector's: up to a day late.
        if rng.random() < 0.02:
            at -= dt.timedelta(seconds=rng.randrange(86400))
        event = pick(rng, EVENTS, EVENT_CUM)
        anonymous = rng.random() < 0.18
        agent_i = bisect.bisect(AGENT_CUM, rng.random() * AGENT_CUM[-1])
        if producer == "server":
            agent_i = rng.choice((8, 9, 10, 11))
        agent = AGENTS[agent_i].format(v=rng.randrange(100, 125), b=rng.randrange(1000, 7000), p=rng.randrange(10))
        revenue = None
        if event in ("purchase", "refund"):
            cents = rng.randrange(1, 5_000_000)
            whole, frac = divmod(cents, 100)
            digits = rng.choice((0, 1, 2, 2, 2, 4))
            value = {0: f"{whole}", 1: f"{whole}.{frac // 10}", 2: f"{whole}.{frac:02d}",
                     4: f"{whole}.{frac:02d}{rng.randrange(100):02d}"}[digits]
            revenue = ("-" if event == "refund" else "") + value
        rec = {
            "event_id": (ms << 22) | (seq & 0x3FFFFF),
            "event_time": timestamp(at, rng),
            "session_id": f"s-{rng.getrandbits(64):016x}",
            "user_id": None if anonymous else rng.randrange(1, 1 << 40),
            "event_name": event,
            "page_url": url(rng, "api.example.com" if producer == "server" else None),
            "referrer": url(rng) if rng.random() < 0.15 else (
                rng.choice(["https://www.google.com/", "android-app://com.google.android.gm/"]) if rng.random() < 0.5
                else None),
            "user_agent": agent,
            "ip": ip(rng),
            "search_query": search_text(rng) if event == "search" or rng.random() < 0.02 else None,
            "duration_ms": None if rng.random() < 0.1 else round(rng.expovariate(1 / 850) + 0.001, rng.choice((0, 1, 3, 6))),
            "geo_lat": None if rng.random() < 0.25 else round(rng.uniform(-90, 90), rng.choice((4, 5, 6))),
            "bytes_sent": int(rng.paretovariate(1.2) * 300) % 10_000_000_001,
            "http_status": rng.choices((200, 204, 301, 304, 400, 403, 404, 429, 500, 503),
                                       weights=(80, 3, 2, 5, 2, 1, 4, 1, 1, 1))[0],
            "screen_width": None if producer == "server" else rng.choice((360, 390, 412, 768, 1280, 1366, 1440, 1920, 2560, 3840)),
            "is_bot": agent_i in BOTS,
            "is_first_visit": None if rng.random() < 0.4 else rng.random() < 0.3,
            "revenue": revenue,
            "signup_date": None if anonymous or rng.random() < 0.1 else
            (dt.date(2015, 1, 1) + dt.timedelta(days=rng.randrange(3700))).isoformat(),
        }
        if rec["duration_ms"] == 0:
            rec["duration_ms"] = 0.5
        if rec["geo_lat"] == 0:
            rec["geo_lat"] = 0.0  # never -0.0
        yield producer, rec, rng


# Key order per producer (the tenant's place included): the web SDK, the app SDK, the server.
ORDERS = {
    "web": NAMES,
    "app": ["event_name", "event_time", "event_id", "tenant", "user_id", "session_id", "screen_width", "page_url",
            "referrer", "user_agent", "ip", "is_first_visit", "is_bot", "duration_ms", "geo_lat", "search_query",
            "revenue", "signup_date", "bytes_sent", "http_status"],
    "server": ["tenant", "event_id", "event_time", "event_name", "http_status", "bytes_sent", "duration_ms", "ip",
               "user_agent", "page_url", "referrer", "session_id", "user_id", "search_query", "revenue",
               "signup_date", "geo_lat", "screen_width", "is_bot", "is_first_visit"],
}
assert all(sorted(o) == sorted(NAMES) for o in ORDERS.values())
TYPES = {c["name"]: c["type"] for c in SCHEMA}


def json_value(name, v, producer):
    if v is None:
        return "null"
    t = TYPES[name]
    if t == "bool":
        return "true" if v else "false"
    if t in ("int64", "int32", "float64"):
        return repr(v)
    if t.startswith("decimal"):
        return v  # a JSON number, as written
    # The app SDK escapes non-ASCII (\u00e9) and slashes (\/); the others write UTF-8.
    if producer == "app":
        return json.dumps(v).replace("/", "\\/")
    return json.dumps(v, ensure_ascii=False)


def csv_value(name, v):
    if v is None:
        return ""
    t = TYPES[name]
    if t == "bool":
        return "true" if v else "false"
    if t in ("int64", "int32", "float64"):
        return repr(v)
    return csv_field(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, nargs="+", default=[1, 10, 100, 1000])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--formats", nargs="+", default=["csv", "jsonl"], choices=["csv", "jsonl"])
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "events.schema.json"), "w") as f:
        json.dump(SCHEMA, f, indent=1)
        f.write("\n")
    tenant_of = {n: tenants(args.rows, n, args.seed) for n in args.partitions}
    files = {}
    for n in args.partitions:
        for fmt in args.formats:
            files[(n, fmt)] = open(os.path.join(args.out, f"events-p{n}.{fmt}.tmp"), "w", encoding="utf-8",
                                   newline="", buffering=1 << 20)
    at = NAMES.index(PARTITION)
    for n in args.partitions:
        if "csv" in args.formats:
            files[(n, "csv")].write(",".join(NAMES) + "\n")
    for i, (producer, rec, _) in enumerate(records(args.rows, args.seed)):
        if "csv" in args.formats:
            cells = [csv_value(name, rec[name]) if name != PARTITION else None for name in NAMES]
            head = ",".join(cells[:at]) + ","
            tail = "," + ",".join(cells[at + 1:]) + "\n"
        if "jsonl" in args.formats:
            order = ORDERS[producer]
            parts = []
            for name in order:
                if name == PARTITION:
                    parts.append(None)
                    continue
                v = rec[name]
                # NULL: `null` or no key, half and half.
                if v is None and (i + len(name)) % 2:
                    continue
                parts.append(f'"{name}":{json_value(name, v, producer)}')
            k = parts.index(None)
            jhead = "{" + ",".join(parts[:k])
            jhead += "," if k else ""
            jtail = ("," if k < len(parts) - 1 else "") + ",".join(parts[k + 1:]) + "}\n"
        for n in args.partitions:
            tenant = tenant_of[n][i]
            if "csv" in args.formats:
                files[(n, "csv")].write(head + tenant + tail)
            if "jsonl" in args.formats:
                files[(n, "jsonl")].write(f'{jhead}"tenant":"{tenant}"{jtail}')
    for (n, fmt), f in files.items():
        f.close()
        os.replace(f.name, f.name[: -len(".tmp")])
    for n in args.partitions:
        counts = {}
        for t in tenant_of[n]:
            counts[t] = counts.get(t, 0) + 1
        with open(os.path.join(args.out, f"events-p{n}.counts.json"), "w") as f:
            json.dump(counts, f)
    print(json.dumps({"rows": args.rows, "partitions": args.partitions,
                      "files": sorted(os.path.basename(f.name[: -len('.tmp')]) for f in files.values())}))


if __name__ == "__main__":
    main()
