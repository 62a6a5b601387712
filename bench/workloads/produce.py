# ruff: noqa: UP031  (printf-style formatting is the fast way to build bytes lines here)
"""produce: 1M events in every input mode with --fsync batch (and always on a small count) vs the
orjson floor over the same input, and cat.

The input is what services export: nested values with ISO-8601 event times (write_values),
and for --envelope the same records as `streamctl consume` prints them (write_envelopes).
The target is judged on CPU time.
"""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path

from bench.datagen import BASE_MS, COUNTRIES, DEVICES, KEYS, TYPES, size
from bench.runner import Bench, Contestant

CITIES = ["Berlin", "Paris", "New York", "London", "Tokyo", "São Paulo", "Mumbai", "Amsterdam", "Madrid", "Milano"]
REFERRERS = ["search", "email", "direct", "social", "ads"]
OS = ["ios", "android", "windows", "macos", "linux"]
RECORD = '{"offset":%d,"partition":%d,"ts":%d,"key":%s,"value":%s%s}\n'
VALUE = ('{"user":"user-%05d","time":"%s.%03dZ","type":"%s","page":{"path":"/products/%d","ref":"%s"},'
         '"amount":%.2f,"geo":{"country":"%s","city":"%s"},"device":{"kind":"%s","os":"%s"},"items":[%s],'
         '"session":"%012x"}')


def _records(n: int, seed: int):
    """Yield (partition, key JSON text, value JSON text, headers member or "", ts) for n events."""
    rnd = random.Random(seed + 4)
    ri, rr = rnd.randrange, rnd.random
    t = BASE_MS
    sec, iso = -1, ""
    for _ in range(n):
        t += ri(5)
        if t // 1000 != sec:
            sec = t // 1000
            iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        u = ri(KEYS)
        key = "null" if rr() < 0.02 else '"user-%05d"' % u
        items = ",".join('{"sku":"sku-%04d","qty":%d}' % (ri(5000), 1 + ri(3)) for _ in range(ri(3)))
        value = VALUE % (u, iso, t % 1000, TYPES[ri(6)], ri(100_000), REFERRERS[ri(5)], rr() * 200,
                         COUNTRIES[u % 10], CITIES[u % 10], DEVICES[ri(3)], OS[ri(5)], items,
                         rnd.getrandbits(48))
        if rr() < 0.01:
            value = "null"
        headers = ',"headers":{"trace":"%016x","source":"web"}' % rnd.getrandbits(64) if rr() < 0.2 else ""
        yield u % 3, key, value, headers, t + 3


def write_envelopes(path: Path, n: int, seed: int) -> None:
    """n lines as `streamctl consume` prints them, the shape `produce --envelope` takes in practice.

    Values are nested objects with an ISO-8601 event time (UTC, milliseconds), a list of
    items and a non-ASCII city now and then; 20% of the records carry headers, 2% have
    no key and 1% are tombstones.
    """
    offsets = [0, 0, 0]
    with open(path, "wb", buffering=1 << 20) as f:
        for p, key, value, headers, ts in _records(n, seed):
            f.write((RECORD % (offsets[p], p, ts, key, value, headers)).encode())
            offsets[p] += 1


def write_values(path: Path, n: int, seed: int) -> None:
    """The values of write_envelopes's lines, one a line: the input of plain, keyed and raw produce.

    A tombstone's `null` is left out (the key field must be there for --key-field).
    """
    with open(path, "wb", buffering=1 << 20) as f:
        for _, _, value, _, _ in _records(n, seed):
            if value != "null":
                f.write(value.encode() + b"\n")


def run(b: Bench) -> None:
    n = b.records
    envelopes = b.data._once(n, "envelopes.jsonl", lambda p: write_envelopes(p, n, b.args.seed))
    src = b.data._once(n, "values.jsonl", lambda p: write_values(p, n, b.args.seed))
    nbytes = size(src)
    log = b.work / "produce.log"

    def fresh() -> None:
        shutil.rmtree(log, ignore_errors=True)

    def produce(*flags: str, input_file: Path = src) -> list[str]:
        return b.sc("produce", str(log), str(input_file), *flags, "--fsync", "batch")

    # the values of the envelopes below (ISO times, nested objects), one a line; the loop over the same file
    group = f"produce {n // 1000}k --fsync batch"
    modes = [
        ("streamctl produce", produce()),
        ("streamctl produce --key-field user", produce("--key-field", "user")),
        ("streamctl produce --raw", produce("--raw")),
    ]
    b.compare(group, [
        *(Contestant(tool, argv, subject=True, setup=fresh, teardown=fresh) for tool, argv in modes),
        Contestant("orjson loads+dumps loop", b.ref("orjson_loop", "line", str(src))),
        Contestant("cat", ["cat", str(src)]),
    ], records=n, nbytes=nbytes)
    # consume-shaped envelopes (ISO times, nested values, headers on some): the loop over the same file
    egroup = f"produce {n // 1000}k --envelope --fsync batch"
    b.compare(egroup, [
        Contestant("streamctl produce --envelope", produce("--envelope", input_file=envelopes), subject=True,
                   setup=fresh, teardown=fresh),
        Contestant("orjson loads+dumps loop", b.ref("orjson_loop", "line", str(envelopes))),
    ], records=n, nbytes=size(envelopes))
    # the target compares CPU time (user + system): on a shared machine it moves less than wall time
    for grp, tool in [*((group, t) for t, _ in modes), (egroup, "streamctl produce --envelope")]:
        r = b.ratio(grp, tool, "orjson loads+dumps loop", cpu=True)
        if r is not None:
            b.target(f"`{tool[10:]}` --fsync batch >= 0.6x the orjson loop's records/s (CPU time)",
                     f"{r:.2f}x (takes {1 / r:.2f}x its CPU time)", r >= 0.6)

    k = 2_000 if b.quick else 20_000
    small = b.data.head(src, k)
    group = f"produce {k // 1000}k --fsync always"
    b.compare(group, [
        Contestant("streamctl produce --fsync always", b.sc("produce", str(log), str(small), "--key-field", "user",
                   "--fsync", "always"), subject=True, setup=fresh, teardown=fresh),
        Contestant("streamctl produce --fsync batch", b.sc("produce", str(log), str(small), "--key-field", "user",
                   "--fsync", "batch"), subject=True, setup=fresh, teardown=fresh),
        Contestant("orjson loads+dumps loop", b.ref("orjson_loop", "line", str(small))),
    ], records=k, nbytes=size(small), note="one fsync per record: measured on a smaller count")
