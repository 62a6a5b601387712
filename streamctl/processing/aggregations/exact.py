"""The exact aggregations: count, sum, avg, min, max, p50/p90/p99, distinct, first, last, stddev.

One class each (the interface is in base.py). count, sum and avg can live in numpy slots
(windows.cells: a count, or a float64 total that stays exact); the others keep every value
(percentiles, distinct), the input order (first, last), the type of a winning value (min, max) or
a running mean (stddev) in Python.
"""

from __future__ import annotations

import math
from functools import reduce
from operator import add
from typing import Any

from streamctl.processing.aggregations.base import Agg, non_null, register

try:
    import orjson
except ImportError:  # the Spark window job on a cluster without orjson (streamctl itself always has it)
    from streamctl import orjson_fallback as orjson  # type: ignore[no-redef]


@register
class Count(Agg):
    """`count` (events) or `count:PATH` (events where PATH is not null)."""

    names = ("count",)
    slots = "count"

    def new(self) -> int:
        return 0

    def fold(self, st: int, vals: list) -> int:
        return st + len(vals)

    def fold_groups(self, i: int, groups: list[tuple[list, list[int]]], col: list | None, seq0: int) -> None:
        if col is None:  # a bare count (its values are all True)
            for st, idx in groups:
                st[i] += len(idx)
        else:
            for st, idx in groups:
                st[i] += len(idx) - [col[j] for j in idx].count(None)

    def merge(self, a: int, b: int) -> int:
        return a + b

    @classmethod
    def state_type(cls, t: Any) -> Any:
        return t.Count

    def slot_results(self, total: Any, count: Any, floaty: Any) -> list:
        return count.tolist()

    def slot_state(self, total: float, count: int, floaty: bool) -> int:
        return count

    def slot_values(self, st: int) -> tuple[Any, int, bool] | None:
        return 0.0, st, False


@register
class Sum(Agg):
    """`sum:PATH`: state [total, how many numbers]; an int total while only ints were added."""

    names = ("sum",)
    numeric = True
    slots = "total"

    def new(self) -> list:
        return [0, 0]

    def fold(self, st: list, vals: list) -> list:
        # reduce(add) adds left to right from the total so far: the same float as add() per
        # event (sum() compensates float rounding on Python 3.12+, which would not be)
        st[0] = reduce(add, vals, st[0])
        st[1] += len(vals)
        return st

    def fold_groups(self, i: int, groups: list[tuple[list, list[int]]], col: list, seq0: int) -> None:
        # many keys and short windows make most groups one event: that case without a list
        for st, idx in groups:
            if len(idx) == 1:
                v = col[idx[0]]
                if v is not None:
                    acc = st[i]
                    acc[0] += v
                    acc[1] += 1
            else:
                vals = non_null(col, idx)
                if vals:
                    acc = st[i]
                    acc[0] = reduce(add, vals, acc[0])
                    acc[1] += len(vals)

    def merge(self, a: list, b: list) -> list:
        a[0] += b[0]
        a[1] += b[1]
        return a

    def result(self, st: list) -> Any:
        return st[0] if st[1] else None

    @classmethod
    def state_type(cls, t: Any) -> Any:
        return tuple[t.Number, t.Count]  # total, how many numbers

    def slot_results(self, total: Any, count: Any, floaty: Any) -> list:
        import numpy as np

        if floaty.all():
            out = total.tolist()
        elif not floaty.any():
            out = total.astype(np.int64).tolist()  # int totals, exact in float64 (|total| < 2**53)
        else:
            out = [t if fl else int(t) for t, fl in zip(total.tolist(), floaty.tolist(), strict=True)]
        return _none_where_empty(out, count)

    def slot_state(self, total: float, count: int, floaty: bool) -> list:
        return [total if floaty else int(total), count]

    def slot_values(self, st: list) -> tuple[Any, int, bool] | None:
        t, n = st
        if type(t) is int and abs(t) >= 1 << 52:
            return None  # beyond what a float64 total keeps exactly
        return t, n, type(t) is float


@register
class Avg(Sum):
    """`avg:PATH`: sum's state, divided at the end."""

    names = ("avg",)

    def result(self, st: list) -> Any:
        return st[0] / st[1] if st[1] else None

    def slot_results(self, total: Any, count: Any, floaty: Any) -> list:
        import numpy as np

        # an int total divided by the count: Python's true division of two ints rounds once, as
        # the float64 division of their exact float64 values does (a count below 2**53 is exact)
        return _none_where_empty((total / np.maximum(count, 1)).tolist(), count)


def _none_where_empty(out: list, count: Any) -> list:
    """The results `out` with None for the slots that hold no number (a count of 0)."""
    if not count.all():
        import numpy as np

        for i in np.flatnonzero(count == 0).tolist():
            out[i] = None
    return out


class _Extreme(Agg):
    """min or max (`pick`): one number of its own type, the first of equal ones (Python's min and
    max return the first of equal arguments)."""

    numeric = True
    pick: Any = staticmethod(min)

    def new(self) -> Any:
        return None

    def fold(self, st: Any, vals: list) -> Any:
        m = self.pick(vals)
        return m if st is None else self.pick(st, m)

    def merge(self, a: Any, b: Any) -> Any:
        return b if a is None else a if b is None else self.pick(a, b)

    @classmethod
    def state_type(cls, t: Any) -> Any:
        return t.Number | None


@register
class Min(_Extreme):
    """`min:PATH`: the smallest number."""

    names = ("min",)


@register
class Max(_Extreme):
    """`max:PATH`: the largest number."""

    names = ("max",)
    pick = staticmethod(max)


def percentile(values: list, q: float) -> float | None:
    """Exact percentile with linear interpolation between ranks (Spark's `percentile`)."""
    if not values:
        return None
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = math.ceil(pos)
    if lo == hi:
        return float(s[lo])
    return float(s[lo]) + (pos - lo) * (float(s[hi]) - float(s[lo]))


@register
class Percentile(Agg):
    """`p50:PATH`, `p90:PATH`, `p99:PATH`: exact, over every number kept in a list."""

    names = ("p50", "p90", "p99")
    numeric = True

    def __init__(self, func: str) -> None:
        super().__init__(func)
        self.q = int(func[1:]) / 100

    def new(self) -> list:
        return []

    def fold(self, st: list, vals: list) -> list:
        st += vals
        return st

    def merge(self, a: list, b: list) -> list:
        a += b
        return a

    def result(self, st: list) -> float | None:
        return percentile(st, self.q)

    @classmethod
    def state_type(cls, t: Any) -> Any:
        return list[t.Number]


def distinct_key(v: Any) -> Any:
    """What `distinct` keeps of a value: a string or an int itself, anything else its JSON text
    (sorted keys), so 1, 1.0, "1" and true are four values, as they are in the input. The text is
    copied into a bytes object of its own size: orjson's result keeps its whole write buffer
    (about 4 KB) alive with it."""
    t = type(v)
    if t is str or t is int:
        return v
    try:
        return bytes(memoryview(orjson.dumps(v, option=orjson.OPT_SORT_KEYS)))
    except TypeError:  # an int beyond 64 bits inside: its exact text
        from streamctl.processing import exactjson

        return exactjson.dumps(v, option=orjson.OPT_SORT_KEYS)


def _key_of_text(text: str) -> Any:
    """distinct_key of the value whose JSON text (not a string's) a checkpoint holds."""
    return int(text) if text.lstrip("-").isdecimal() else text.encode()


@register
class Distinct(Agg):
    """`distinct:PATH`: the exact number of distinct values (distinct_key), a set of them."""

    names = ("distinct",)

    def new(self) -> set:
        return set()

    def fold(self, st: set, vals: list) -> set:
        st.update(map(distinct_key, vals))
        return st

    def merge(self, a: set, b: set) -> set:
        a |= b
        return a

    def result(self, st: set) -> int:
        return len(st)

    def dump(self, st: set) -> list:
        # sorted: a set's order follows the run's string hash seed, a checkpoint's bytes should not
        return sorted(["s", v] if type(v) is str else ["j", str(v) if type(v) is int else v.decode()] for v in st)

    def load(self, data: list) -> set:
        return {v if kind == "s" else _key_of_text(v) for kind, v in data}

    @classmethod
    def state_type(cls, t: Any) -> Any:
        from typing import Literal

        return list[tuple[Literal["s", "j"], str]]  # a string, or another value's JSON text


@register
class First(Agg):
    """`first:PATH`: the value (null too) of the event first in the input order; state (seq, value)."""

    names = ("first",)
    by_seq = True
    pick = 0  # which of a group's events (in input order) the batch kernel takes: the one better wins

    def new(self) -> Any:
        return None

    def add(self, st: Any, v: Any, seq: int) -> Any:
        return (seq, v) if st is None or self.better(seq, st[0]) else st

    @staticmethod
    def better(seq: int, than: int) -> bool:
        return seq < than

    def fold_groups(self, i: int, groups: list[tuple[list, list[int]]], col: list, seq0: int) -> None:
        better, pick = self.better, self.pick
        for st, idx in groups:
            j = idx[pick]
            x = st[i]
            if x is None or better(seq0 + j, x[0]):
                st[i] = (seq0 + j, col[j])

    def merge(self, a: Any, b: Any) -> Any:
        return b if a is None or (b is not None and self.better(b[0], a[0])) else a

    def result(self, st: Any) -> Any:
        return st[1] if st is not None else None

    def dump(self, st: Any) -> Any:
        return list(st) if st is not None else None

    def load(self, data: Any) -> Any:
        return tuple(data) if data is not None else None

    @classmethod
    def state_type(cls, t: Any) -> Any:
        return tuple[t.Count, Any] | None  # (input seq, value)


@register
class Last(First):
    """`last:PATH`: the value (null too) of the event last in the input order."""

    names = ("last",)
    pick = -1

    @staticmethod
    def better(seq: int, than: int) -> bool:
        return seq > than


@register
class Stddev(Agg):
    """`stddev:PATH`: the sample standard deviation (Spark's `stddev` = `stddev_samp`: null for
    fewer than 2 numbers). State [n, mean, m2], updated and merged with Spark's own formulas
    (CentralMomentAgg), which stay accurate where a sum of squares would cancel."""

    names = ("stddev",)
    numeric = True

    def new(self) -> list:
        return [0, 0.0, 0.0]

    def fold(self, st: list, vals: list) -> list:
        n, mean, m2 = st
        for v in vals:
            n += 1
            delta = v - mean
            delta_n = delta / n
            mean += delta_n
            m2 += delta * (delta - delta_n)
        st[0], st[1], st[2] = n, mean, m2
        return st

    def merge(self, a: list, b: list) -> list:
        n1, mean1, m2_1 = a
        n2, mean2, m2_2 = b
        if not n2:
            return a
        if not n1:
            a[:] = b
            return a
        n = n1 + n2
        delta = mean2 - mean1
        delta_n = delta / n
        a[0], a[1], a[2] = n, mean1 + delta_n * n2, m2_1 + m2_2 + delta * delta_n * n1 * n2
        return a

    def result(self, st: list) -> float | None:
        n, _mean, m2 = st
        return math.sqrt(m2 / (n - 1)) if n >= 2 else None

    def load(self, data: list) -> list:
        return [data[0], float(data[1]), float(data[2])]

    @classmethod
    def state_type(cls, t: Any) -> Any:
        return tuple[t.Count, t.Number, t.Number]  # how many numbers, their mean, sum of squared deviations
