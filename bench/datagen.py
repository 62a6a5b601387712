# ruff: noqa: UP031  (printf-style formatting is the fast way to build bytes lines here)
"""Seeded data for the benchmark: no downloads, the same bytes for every tool and every run.

One folder per (seed, events) holds, built on first use and cached:

- events.jsonl   N click-stream events, ~200-byte JSON values, 10k users, event time in
                 `time` (epoch ms, non-decreasing, ~2 ms apart on average)
- events.log     that file produced with `--key-field user` (1 partition)
- profiles.log   10k user profiles keyed by `id`, produced *before* events.log so a
                 stream-table join sees every profile (inputs interleave by append ts)
- cdc.jsonl/.log N envelope lines `{"key", "value"}` over the same 10k keys, 1% tombstones
- searches.jsonl N/2 searches (key `sid`), clicks.jsonl N/2 clicks on random searches,
                 0-2 h later (exponential, mean 15 min), sorted by time

and the realistic shape (ISO-8601 event times in `ts`, nested values):

- events-iso.jsonl       N events, one event object a line (`key`, `value.amount`)
- events-iso-p3.log      those lines produced into 3 partitions with `--key-field key`
- profiles-iso.jsonl     10k profiles (`key`), each timed before every event
- searches-iso.jsonl,    N/2 searches and N/2 clicks 0-2 h after a random search, both in
  clicks-iso.jsonl       time order, the search id in `value.session`
"""

from __future__ import annotations

import random
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.runner import Bench

KEYS = 10_000
BASE_MS = 1_763_683_200_000  # 2025-11-21T00:00:00Z
TYPES = ["view", "click", "add_to_cart", "purchase", "search", "scroll"]
COUNTRIES = ["DE", "FR", "US", "GB", "JP", "BR", "IN", "NL", "ES", "IT"]
DEVICES = ["mobile", "desktop", "tablet"]
TIERS = ["free", "plus", "gold", "platinum"]
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
NOTE = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod"

EVENT = ('{"user":"user-%05d","time":%d,"type":"%s","page":"/products/%d","amount":%.2f,'
         '"country":"%s","device":"%s","session":"%012x","note":"%s"}')


def _writer(path: Path):
    f = open(path, "wb", buffering=1 << 20)
    return f


def events(n: int, seed: int):
    """Yield (key index, value text) for n events."""
    rnd = random.Random(seed)
    t = BASE_MS
    ri = rnd.randrange
    rr = rnd.random
    for _ in range(n):
        t += ri(5)
        u = ri(KEYS)
        yield u, EVENT % (u, t, TYPES[ri(6)], ri(100_000), rr() * 200, COUNTRIES[u % 10], DEVICES[ri(3)],
                          rnd.getrandbits(48), NOTE[: 20 + ri(30)])


def write_events(path: Path, n: int, seed: int) -> None:
    with _writer(path) as f:
        for _, v in events(n, seed):
            f.write(v.encode() + b"\n")


def write_cdc(path: Path, n: int, seed: int) -> None:
    rnd = random.Random(seed + 1)
    with _writer(path) as f:
        for u, v in events(n, seed):
            if rnd.random() < 0.01:
                f.write(b'{"key":"user-%05d","value":null}\n' % u)
            else:
                f.write(b'{"key":"user-%05d","value":%s}\n' % (u, v.encode()))


def write_profiles(path: Path, seed: int) -> None:
    rnd = random.Random(seed + 2)
    with _writer(path) as f:
        for u in range(KEYS):
            f.write(('{"id":"user-%05d","name":"User %d","tier":"%s","country":"%s","since":%d,"score":%.3f}\n' % (
                u, u, TIERS[rnd.randrange(4)], COUNTRIES[u % 10], BASE_MS - rnd.randrange(10**11), rnd.random()
            )).encode())


def write_searches_clicks(spath: Path, cpath: Path, n: int, seed: int) -> None:
    rnd = random.Random(seed + 3)
    times = []
    t = BASE_MS
    with _writer(spath) as f:
        for i in range(n):
            t += rnd.randrange(41)
            times.append(t)
            f.write(('{"sid":"s%07d","user":"user-%05d","time":%d,"query":"%s %s","results":%d}\n' % (
                i, rnd.randrange(KEYS), t, WORDS[rnd.randrange(10)], WORDS[rnd.randrange(10)], rnd.randrange(100)
            )).encode())
    clicks = []
    for _ in range(n):
        i = rnd.randrange(n)
        clicks.append((times[i] + min(int(rnd.expovariate(1 / 900_000)), 7_200_000), i, rnd.randrange(10),
                       rnd.randrange(60_000)))
    clicks.sort()
    with _writer(cpath) as f:
        for ct, i, pos, dwell in clicks:
            f.write(b'{"sid":"s%07d","time":%d,"pos":%d,"dwell_ms":%d}\n' % (i, ct, pos, dwell))


# The realistic shape: a plain .jsonl file as a service exports it, one event object a line (a
# line is a record's value: `value.ts`), the event time an ISO-8601 string, the fields nested.
ISO_EVENT = ('{"ts":"%s","key":"user-%05d","type":"%s","value":{"amount":%.2f,"page":"/products/%d",'
             '"session":"%012x"},"device":"%s"}')


def iso_ms(ms: int) -> str:
    s, frac = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s)) + ".%03dZ" % frac


def write_events_iso(path: Path, n: int, seed: int) -> None:
    """n click events (events.jsonl's users and times), ISO time in value.ts, amount in value.value."""
    rnd = random.Random(seed + 4)
    ri = rnd.randrange
    t = BASE_MS
    with _writer(path) as f:
        for _ in range(n):
            t += ri(5)
            u = ri(KEYS)
            f.write((ISO_EVENT % (iso_ms(t), u, TYPES[ri(6)], rnd.random() * 200,
                                  ri(100_000), rnd.getrandbits(48), DEVICES[ri(3)])).encode() + b"\n")


def write_profiles_iso(path: Path, seed: int) -> None:
    """10k profiles: key in `key`, a profile time before every event."""
    rnd = random.Random(seed + 5)
    with _writer(path) as f:
        for u in range(KEYS):
            t = BASE_MS - 86_400_000 + u
            f.write(('{"ts":"%s","key":"user-%05d","tier":"%s","country":"%s","score":%.3f}\n' % (
                iso_ms(t), u, TIERS[rnd.randrange(4)], COUNTRIES[u % 10], rnd.random())).encode())


def write_searches_clicks_iso(spath: Path, cpath: Path, n: int, seed: int) -> None:
    """n searches and n clicks 0-2 h after a random search, both in time order, with an ISO time in
    `ts` and the search id in `value.session`."""
    rnd = random.Random(seed + 6)
    times = []
    t = BASE_MS
    with _writer(spath) as f:
        for i in range(n):
            t += rnd.randrange(41)
            times.append(t)
            f.write(('{"ts":"%s","user":"user-%05d","value":{"session":"s%07d","query":"%s %s","results":%d}}\n' % (
                         iso_ms(t), rnd.randrange(KEYS), i, WORDS[rnd.randrange(10)],
                         WORDS[rnd.randrange(10)], rnd.randrange(100))).encode())
    clicks = sorted((times[i] + min(int(rnd.expovariate(1 / 900_000)), 7_200_000), i, rnd.randrange(10))
                    for i in (rnd.randrange(n) for _ in range(n)))
    with _writer(cpath) as f:
        for ct, i, pos in clicks:
            f.write(b'{"ts":"%s","value":{"session":"s%07d","pos":%d}}\n' % (iso_ms(ct).encode(), i, pos))


def _in_child(build, path: Path) -> None:
    """build(path) in a forked process: a generator holds whole columns in memory (5M clicks are
    ~500 MB), and a process that grew that large would hand its peak RSS to every command it
    starts afterwards (Linux keeps ru_maxrss across fork and exec), spoiling the memory figures."""
    import os
    import traceback

    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            build(path)
            code = 0
        except BaseException:  # noqa: BLE001 - reported here, the parent raises
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"generating {path} failed")


class Datasets:
    def __init__(self, bench: Bench) -> None:
        self.b = bench

    def folder(self, n: int) -> Path:
        d = self.b.data_root / f"s{self.b.args.seed}-n{n}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _once(self, n: int, name: str, build) -> Path:
        from bench.runner import say

        d = self.folder(n)
        path = d / name
        done = d / f".done-{name}"
        if not done.exists():
            say(f"generating {path.name} ({n} events)")
            if path.is_dir():
                import shutil

                shutil.rmtree(path)
            _in_child(build, path)
            done.touch()
        return path

    def _produce(self, path: Path, src: Path, *flags: str) -> None:
        subprocess.run(self.b.sc("produce", str(path), str(src), "--fsync", "never", *flags), check=True,
                       stderr=subprocess.DEVNULL, env=self.b.env())

    def events_jsonl(self, n: int) -> Path:
        return self._once(n, "events.jsonl", lambda p: write_events(p, n, self.b.args.seed))

    def profiles_jsonl(self, n: int) -> Path:
        return self._once(n, "profiles.jsonl", lambda p: write_profiles(p, self.b.args.seed))

    def profiles_log(self, n: int) -> Path:
        src = self.profiles_jsonl(n)
        return self._once(n, "profiles.log", lambda p: self._produce(p, src, "--key-field", "id"))

    def events_log(self, n: int) -> Path:
        src = self.events_jsonl(n)
        self.profiles_log(n)  # first: the join's table side must be older than the events
        return self._once(n, "events.log", lambda p: self._produce(p, src, "--key-field", "user"))

    def cdc_jsonl(self, n: int) -> Path:
        return self._once(n, "cdc.jsonl", lambda p: write_cdc(p, n, self.b.args.seed))

    def cdc_log(self, n: int) -> Path:
        src = self.cdc_jsonl(n)
        return self._once(n, "cdc.log", lambda p: self._produce(p, src, "--envelope"))

    def searches_clicks(self, n: int) -> tuple[Path, Path]:
        d = self.folder(n)

        def build(_: Path) -> None:
            write_searches_clicks(d / "searches.jsonl", d / "clicks.jsonl", n // 2, self.b.args.seed)

        self._once(n, "searches+clicks", build)
        return d / "searches.jsonl", d / "clicks.jsonl"

    # the realistic shape (ISO-8601 times, nested values): plain files, and the events in a keyed log
    def events_iso(self, n: int) -> Path:
        return self._once(n, "events-iso.jsonl", lambda p: write_events_iso(p, n, self.b.args.seed))

    def profiles_iso(self, n: int) -> Path:
        return self._once(n, "profiles-iso.jsonl", lambda p: write_profiles_iso(p, self.b.args.seed))

    def events_iso_log(self, n: int, partitions: int = 3) -> Path:
        """events_iso's lines produced into a log of `partitions` partitions keyed by user (`key`)."""
        src = self.events_iso(n)
        return self._once(n, f"events-iso-p{partitions}.log",
                          lambda p: self._produce(p, src, "--key-field", "key", "--partitions", str(partitions)))

    def searches_clicks_iso(self, n: int) -> tuple[Path, Path]:
        """n/2 searches and n/2 clicks (ISO times, the search id in value.session)."""
        d = self.folder(n)

        def build(_: Path) -> None:
            write_searches_clicks_iso(d / "searches-iso.jsonl", d / "clicks-iso.jsonl", n // 2, self.b.args.seed)

        self._once(n, "searches+clicks-iso", build)
        return d / "searches-iso.jsonl", d / "clicks-iso.jsonl"

    def head(self, src: Path, k: int) -> Path:
        """The first k lines of src, as its own file (for --fsync always)."""
        path = src.with_name(f"{src.stem}-head{k}{src.suffix}")
        if not path.exists():
            with open(src, "rb") as f, open(path, "wb") as out:
                for i, line in enumerate(f):
                    if i >= k:
                        break
                    out.write(line)
        return path


def segments(log: Path) -> list[str]:
    """A log's segment files in offset order (every partition)."""
    return [str(p) for p in sorted(log.glob("p*/*.jsonl"))]


def size(paths) -> int:
    if isinstance(paths, (str, Path)):
        paths = [paths]
    return sum(Path(p).stat().st_size for p in paths)


def lines(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            n += chunk.count(b"\n")
    return n
