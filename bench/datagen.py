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

and the main data of window and join, the shape real click data has (the two above are in time
order, 2 ms apart, so 1M events span 33 minutes and a 30-minute session never closes):

- events-real.jsonl      N events arriving ~50 ms apart (N=1M: ~14 hours of event time), keys
                         among 10k with Zipf-like skew (the busiest ~10% of events), 2% stragglers
                         whose time is up to 10 minutes older than their neighbours', ISO times
                         in `ts`, the amount nested in `value.amount` (events-iso.jsonl's fields)
- events-real-p3.log     those lines produced into 3 partitions with `--key-field key`
- profiles-real.log      a changelog of the 10k profiles: each before every event, then N/20
                         changes spread over the events' hours, 5% of them tombstones (record
                         key only, value null), one partition produced with `--envelope`
- searches-real.jsonl,   N/2 searches ~100 ms apart (users skewed) and N/2 clicks 0-2 h after a
  clicks-real.jsonl      random search, arriving in time order; 2% of each are stragglers up to
                         10 minutes older
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


BIG_TABLE = 1_000_000  # keys of the live join's table


def write_big_table(path: Path, seed: int) -> None:
    """A profiles table of BIG_TABLE keys (the live join's), in key order as a snapshot would come."""
    rnd = random.Random(seed + 7)
    with _writer(path) as f:
        for u in range(BIG_TABLE):
            f.write(('{"id":"user-%07d","tier":"%s","country":"%s","since":%d}\n' % (
                u, TIERS[rnd.randrange(4)], COUNTRIES[u % 10], BASE_MS - rnd.randrange(10**11))).encode())


def write_big_table_events(path: Path, n: int, seed: int) -> None:
    """n events whose users are spread over the whole BIG_TABLE (most hit a row no other event hit)."""
    rnd = random.Random(seed + 8)
    t = BASE_MS
    with _writer(path) as f:
        for _ in range(n):
            t += rnd.randrange(5)
            f.write(('{"user":"user-%07d","time":%d,"type":"%s","amount":%.2f}\n' % (
                rnd.randrange(BIG_TABLE), t, TYPES[rnd.randrange(6)], rnd.random() * 200)).encode())


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


# The realistic shape. Arrival order is time order, except for stragglers: a straggler's time is up
# to STRAGGLE older than the time the stream had reached (the largest time before it), so a lateness
# of 15 minutes makes none of them late and every contestant computes the same windows and pairs.
STRAGGLERS = 0.02
STRAGGLE_MS = 600_000
ZIPF_S = 1.0


def _zipf_weights(n: int) -> list[float]:
    """Cumulative Zipf(s=ZIPF_S) weights over n ranks, for random.choices(cum_weights=...)."""
    from itertools import accumulate

    return list(accumulate(1 / (r + 1) ** ZIPF_S for r in range(n)))


def _arrivals(rnd: random.Random, n: int, mean_gap_ms: int) -> list[int]:
    """n event times in arrival order: gaps uniform in [0, 2*mean], a STRAGGLERS share moved back by
    1 ms..STRAGGLE_MS from the time reached."""
    ri, rr = rnd.randrange, rnd.random
    t = BASE_MS
    out = []
    for _ in range(n):
        t += ri(2 * mean_gap_ms + 1)
        out.append(t - 1 - ri(STRAGGLE_MS) if rr() < STRAGGLERS else t)
    return out


def _straggle(rnd: random.Random, times: list[int]) -> list[int]:
    """Times in time order, with a STRAGGLERS share moved back by up to STRAGGLE_MS (arrival order kept)."""
    rr, ri = rnd.random, rnd.randrange
    return [t - 1 - ri(STRAGGLE_MS) if rr() < STRAGGLERS else t for t in times]


def write_events_real(path: Path, n: int, seed: int) -> None:
    """n click events of events_iso's shape, ~50 ms apart, skewed keys, 2% stragglers."""
    rnd = random.Random(seed + 7)
    ri = rnd.randrange
    times = _arrivals(rnd, n, 50)
    users = rnd.choices(range(KEYS), cum_weights=_zipf_weights(KEYS), k=n)
    with _writer(path) as f:
        for t, u in zip(times, users, strict=True):
            f.write((ISO_EVENT % (iso_ms(t), u, TYPES[ri(6)], rnd.random() * 200,
                                  ri(100_000), rnd.getrandbits(48), DEVICES[ri(3)])).encode() + b"\n")


def write_profiles_real(path: Path, n: int, seed: int) -> None:
    """The profiles changelog as `produce --envelope` lines: 10k profiles timed before every event,
    then n/20 changes (times strictly increasing over the events' span, keys skewed like the
    events'), 5% of them tombstones. A tombstone carries no time: it sorts with the time its lane
    had reached, the previous change's, so it never follows a change of its own key (that would
    tie two versions of one key)."""
    rnd = random.Random(seed + 8)
    span = n * 50
    changes = n // 20
    cw = _zipf_weights(KEYS)
    with _writer(path) as f:
        def put(u: int, t: int) -> None:
            f.write(('{"key":"user-%05d","value":{"ts":"%s","key":"user-%05d","tier":"%s","country":"%s",'
                     '"score":%.3f}}\n' % (u, iso_ms(t), u, TIERS[rnd.randrange(4)], COUNTRIES[u % 10],
                                           rnd.random())).encode())

        for u in range(KEYS):
            put(u, BASE_MS - 86_400_000 + u)
        t, last = BASE_MS, -1
        for u in rnd.choices(range(KEYS), cum_weights=cw, k=changes):
            if rnd.random() < 0.05 and u != last:
                f.write(b'{"key":"user-%05d","value":null}\n' % u)
            else:
                t += 1 + rnd.randrange(2 * span // changes)
                put(u, t)
            last = u


def write_searches_clicks_real(spath: Path, cpath: Path, n: int, seed: int) -> None:
    """n searches ~100 ms apart and n clicks 0-2 h after a random search; both arrive in time order
    with 2% stragglers; ISO time in `ts`, the search id in `value.session`, users skewed."""
    rnd = random.Random(seed + 9)
    times = _arrivals(rnd, n, 100)
    users = rnd.choices(range(KEYS), cum_weights=_zipf_weights(KEYS), k=n)
    with _writer(spath) as f:
        for i, (t, u) in enumerate(zip(times, users, strict=True)):
            f.write(('{"ts":"%s","user":"user-%05d","value":{"session":"s%07d","query":"%s %s","results":%d}}\n' % (
                         iso_ms(t), u, i, WORDS[rnd.randrange(10)], WORDS[rnd.randrange(10)],
                         rnd.randrange(100))).encode())
    clicks = sorted((times[i] + min(int(rnd.expovariate(1 / 900_000)), 7_200_000), i, rnd.randrange(10))
                    for i in (rnd.randrange(n) for _ in range(n)))
    ctimes = _straggle(rnd, [c[0] for c in clicks])
    with _writer(cpath) as f:
        for ct, (_, i, pos) in zip(ctimes, clicks, strict=True):
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

    def big_table_events_jsonl(self, n: int) -> Path:
        return self._once(n, "big-table-events.jsonl", lambda p: write_big_table_events(p, n, self.b.args.seed))

    def big_table_logs(self, n: int) -> tuple[Path, Path]:
        """(events log of n events, 3 partitions; profiles log of BIG_TABLE keys), the table produced first."""
        tsrc = self._once(n, "big-table.jsonl", lambda p: write_big_table(p, self.b.args.seed))
        table = self._once(n, "big-table.log", lambda p: self._produce(p, tsrc, "--key-field", "id"))
        esrc = self.big_table_events_jsonl(n)
        events = self._once(n, "big-table-events.log",
                            lambda p: self._produce(p, esrc, "--key-field", "user", "--partitions", "3"))
        return events, table

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

    # the realistic shape: the main window and join data
    def events_real(self, n: int) -> Path:
        return self._once(n, "events-real.jsonl", lambda p: write_events_real(p, n, self.b.args.seed))

    def events_real_log(self, n: int, partitions: int = 3) -> Path:
        src = self.events_real(n)
        return self._once(n, f"events-real-p{partitions}.log",
                          lambda p: self._produce(p, src, "--key-field", "key", "--partitions", str(partitions)))

    def profiles_real_log(self, n: int) -> Path:
        src = self._once(n, "profiles-real.jsonl", lambda p: write_profiles_real(p, n, self.b.args.seed))
        return self._once(n, "profiles-real.log", lambda p: self._produce(p, src, "--envelope"))

    def searches_clicks_real(self, n: int) -> tuple[Path, Path]:
        d = self.folder(n)

        def build(_: Path) -> None:
            write_searches_clicks_real(d / "searches-real.jsonl", d / "clicks-real.jsonl", n // 2, self.b.args.seed)

        self._once(n, "searches+clicks-real", build)
        return d / "searches-real.jsonl", d / "clicks-real.jsonl"

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
