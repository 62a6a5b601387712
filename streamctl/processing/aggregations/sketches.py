"""The approximate aggregations: approx_distinct (HyperLogLog) and approx_p50/p90/p99 (KLL).

Both keep a few KiB of state however many values a window sees, merge (sessions), and give the
same result on both engines and run after run: a state is a function of the values added, in
input order, and of the merges, never of how the input was cut into batches, of when a
checkpoint was written, nor of a random seed.

approx_distinct is Apache DataSketches' HLL sketch (the `datasketches` package, imported only
when the aggregation is used). Each value is hashed by its JSON text (sorted keys), the rule of
`distinct`: 1, 1.0, "1" and true are four values.

approx_pNN is a KLL sketch (Karnin, Lang, Liberty) written here: DataSketches' KLL, REQ and
classic quantile sketches draw their compaction coin from a per-process random seed that the
Python package cannot fix, so two runs over the same data differ; its t-digest is deterministic
but misses the median by more than 1% of rank on skewed data. Here the coin of a compaction is a
hash of how many compactions the sketch has made (SplitMix64), so the sketch behaves like the
randomized one on data that does not know the hash, and is the same every run. The result is one
of the numbers added (as a float), whose rank is within 1% of the asked one.
"""

from __future__ import annotations

import base64
import math
import struct
from bisect import bisect_left
from itertools import accumulate
from typing import Any

from streamctl.processing.aggregations.base import Agg, register

try:
    import orjson
except ImportError:  # the Spark window job on a cluster without orjson (streamctl itself always has it)
    from streamctl import orjson_fallback as orjson  # type: ignore[no-redef]

HLL_LG_K = 14  # 2^14 registers of 4 bits: 8 KiB; relative standard error about 0.65-0.8%
KLL_K = 200  # the top level's capacity: about 600 numbers kept (4.7 KiB)
KLL_C = 2 / 3  # each level below holds 2/3 of the one above
KLL_MIN = 8  # the least a level holds (DataSketches' KLL: 8)
KLL_LOW = 64  # the least the lowest level (weight 1) holds: a compaction every 32 numbers, not 4


def _datasketches() -> Any:
    try:
        import datasketches
    except ImportError:  # a Spark executor without it (streamctl itself depends on it)
        raise RuntimeError("approx_distinct needs the datasketches package (pip install datasketches)") from None
    return datasketches


@register
class ApproxDistinct(Agg):
    """`approx_distinct:PATH`: HyperLogLog estimate of the number of distinct values."""

    names = ("approx_distinct",)

    def __init__(self, func: str) -> None:
        super().__init__(func)
        self.ds = _datasketches()
        self.kind = self.ds.tgt_hll_type.HLL_4

    def new(self) -> Any:
        return self.ds.hll_sketch(HLL_LG_K, self.kind)

    def fold(self, st: Any, vals: list) -> Any:
        update, dumps, sort = st.update, orjson.dumps, orjson.OPT_SORT_KEYS
        for v in vals:
            try:
                update(dumps(v, option=sort).decode())
            except TypeError:  # an int beyond 64 bits: its exact text
                from streamctl.processing import exactjson

                update(exactjson.dumps(v, option=sort).decode())
        return st

    def merge(self, a: Any, b: Any) -> Any:
        union = self.ds.hll_union(HLL_LG_K)
        union.update(a)
        union.update(b)
        return union.get_result(self.kind)

    def result(self, st: Any) -> int:
        return int(round(st.get_estimate()))

    def dump(self, st: Any) -> str:
        return base64.b64encode(st.serialize_updatable()).decode()

    def load(self, data: str) -> Any:
        return self.ds.hll_sketch.deserialize(base64.b64decode(data))

    @classmethod
    def state_type(cls, t: Any) -> Any:
        return str  # the sketch's bytes in base64


_MASK = (1 << 64) - 1


def _coin(i: int) -> int:
    """Bit 0 of SplitMix64's i-th output: the coin of a sketch's i-th compaction."""
    z = (i * 0x9E3779B97F4A7C15 + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return (z ^ (z >> 31)) & 1


class Kll:
    """A KLL quantile sketch of floats: levels[h] holds numbers of weight 2**h."""

    __slots__ = ("n", "comps", "levels", "size", "caps", "cap")

    def __init__(self, n: int = 0, comps: int = 0, levels: list[list[float]] | None = None) -> None:
        self.n = n  # numbers added (the levels' total weight)
        self.comps = comps  # compactions made: the next coin
        self.levels = levels if levels is not None else [[]]
        self.size = sum(map(len, self.levels))
        self._capacity()

    def _capacity(self) -> None:
        top = len(self.levels) - 1
        self.caps = [self.level_cap(h, top - h) for h in range(len(self.levels))]
        self.cap = sum(self.caps)

    @staticmethod
    def level_cap(h: int, height: int) -> int:
        """How many numbers level h holds before it is halved, `height` levels below the top."""
        return max(KLL_LOW if h == 0 else KLL_MIN, int(math.ceil(KLL_C ** height * KLL_K)))

    def extend(self, vals: list[float]) -> None:
        """Add numbers in order: the same sketch as adding them one at a time, each compacting
        as soon as the sketch is full."""
        i, n = 0, len(vals)
        low = self.levels[0]
        while i < n:
            room = max(1, self.cap - self.size)
            chunk = vals[i:i + room]
            low += chunk
            self.size += len(chunk)
            self.n += len(chunk)
            i += len(chunk)
            if self.size >= self.cap:
                self.compress()
                low = self.levels[0]

    def compress(self) -> None:
        """Halve the lowest full level into the one above (KLL's lazy compaction)."""
        levels = self.levels
        for h in range(len(levels)):
            if len(levels[h]) >= self.caps[h]:
                if h + 1 == len(levels):
                    levels.append([])
                    self._capacity()
                buf = sorted(levels[h])
                odd = len(buf) % 2  # an odd one out stays (the smallest)
                levels[h] = buf[:odd]
                levels[h + 1] += buf[odd + _coin(self.comps)::2]
                self.comps += 1
                self.size = sum(map(len, levels))
                if self.size < self.cap:
                    return

    def merge(self, other: Kll) -> None:
        while len(self.levels) < len(other.levels):
            self.levels.append([])
        for h, level in enumerate(other.levels):
            self.levels[h] += level
        self.n += other.n
        self.comps += other.comps
        self.size = sum(map(len, self.levels))
        self._capacity()
        while self.size >= self.cap:
            self.compress()

    def quantile(self, q: float) -> float | None:
        """The smallest number kept whose rank (weight up to and including it) reaches q."""
        if not self.n:
            return None
        pairs = sorted((v, 1 << h) for h, level in enumerate(self.levels) for v in level)
        cum = list(accumulate(w for _, w in pairs))
        return pairs[min(bisect_left(cum, q * self.n), len(pairs) - 1)][0]

    def to_bytes(self) -> bytes:
        sizes = [len(level) for level in self.levels]
        items = [v for level in self.levels for v in level]
        return struct.pack(f"<QQI{len(sizes)}I{len(items)}d", self.n, self.comps, len(sizes), *sizes, *items)

    @classmethod
    def from_bytes(cls, data: bytes) -> Kll:
        n, comps, h = struct.unpack_from("<QQI", data)
        sizes = struct.unpack_from(f"<{h}I", data, 20)
        items = struct.unpack_from(f"<{sum(sizes)}d", data, 20 + 4 * h)
        levels, at = [], 0
        for s in sizes:
            levels.append(list(items[at:at + s]))
            at += s
        return cls(n, comps, levels)


@register
class ApproxQuantile(Agg):
    """`approx_p50:PATH`, `approx_p90:PATH`, `approx_p99:PATH`: a KLL sketch's quantile."""

    names = ("approx_p50", "approx_p90", "approx_p99")
    numeric = True

    def __init__(self, func: str) -> None:
        super().__init__(func)
        self.q = int(func.removeprefix("approx_p")) / 100

    def new(self) -> Kll:
        return Kll()

    def fold(self, st: Kll, vals: list) -> Kll:
        st.extend(list(map(float, vals)))
        return st

    def merge(self, a: Kll, b: Kll) -> Kll:
        a.merge(b)
        return a

    def result(self, st: Kll) -> float | None:
        return st.quantile(self.q)

    def dump(self, st: Kll) -> str:
        return base64.b64encode(st.to_bytes()).decode()

    def load(self, data: str) -> Kll:
        return Kll.from_bytes(base64.b64decode(data))

    @classmethod
    def state_type(cls, t: Any) -> Any:
        return str  # the sketch in base64: n, compactions, level sizes, then the numbers (float64)
