"""produce: 1M events with --fsync batch (and always on a small count) vs the orjson floor and cat."""

from __future__ import annotations

import shutil

from bench.datagen import size
from bench.runner import Bench, Contestant


def run(b: Bench) -> None:
    n = b.records
    src = b.data.events_jsonl(n)
    nbytes = size(src)
    log = b.work / "produce.log"

    def fresh() -> None:
        shutil.rmtree(log, ignore_errors=True)

    group = f"produce {n // 1000}k --fsync batch"
    refs = [
        Contestant("orjson loads+dumps loop", b.ref("orjson_loop", "line", str(src))),
        Contestant("cat", ["cat", str(src)]),
    ]
    b.compare(group, [
        Contestant("streamctl produce", b.sc("produce", str(log), str(src), "--fsync", "batch"), subject=True,
                   setup=fresh, teardown=fresh),
        Contestant("streamctl produce --key-field user", b.sc("produce", str(log), str(src), "--key-field", "user",
                   "--fsync", "batch"), subject=True, setup=fresh, teardown=fresh),
        *refs,
    ], records=n, nbytes=nbytes)
    for tool in ("streamctl produce", "streamctl produce --key-field user"):
        r = b.ratio(group, tool, "orjson loads+dumps loop")
        if r is not None:
            b.target("2, 9", f"`{tool[10:]}` --fsync batch >= 0.6x the orjson loop's records/s", f"{r:.2f}x",
                     r >= 0.6)

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
