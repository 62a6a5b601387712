"""Aggregations for windows: `count`, `sum`, `avg`, `min`, `max`, `p50`/`p90`/`p99`, `distinct`, `first`, `last`.

A spec is `FUNC[:PATH]` or `NAME=FUNC:PATH`; the output field defaults to
`FUNC_LASTSEGMENT` (`avg:value.latency.ms` -> `avg_ms`) and to `count` for a
bare count. Values are pulled out of each event once (`Plan.extract`), so an
event that falls into several windows (hopping) is checked once: a value that
is not a number, for a numeric aggregation, is counted in `Plan.non_numeric`
and then ignored like a missing value (SQL's NULL), never a crash.

Per-window state is a plain list (one slot per aggregation) so that it is cheap
to build, to merge (sessions) and to write into a follow-mode checkpoint.

This module uses only the standard library and orjson (when it is there): the
Spark window job carries it and runs it on the executors, so they fold exactly
as the local engine does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from functools import partial, reduce
from operator import add
from typing import Any, NamedTuple

from streamctl.storage import fieldpaths

try:
    import orjson
except ImportError:  # the Spark window job on a cluster without orjson (streamctl itself always has it)
    from streamctl import orjson_fallback as orjson  # type: ignore[no-redef]

AGG_FUNCS = ("count", "sum", "avg", "min", "max", "p50", "p90", "p99", "distinct", "first", "last")
NUMERIC_FUNCS = ("sum", "avg", "min", "max", "p50", "p90", "p99")
PERCENTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
_MISSING = object()


class AggSpecError(ValueError):
    """A malformed --agg; the message says what is accepted."""


class AggSpec(NamedTuple):
    name: str
    func: str
    path: tuple[str, ...] | None  # a record path (value.x.y); None for a bare count


def parse_agg(text: str, record_path: Any) -> AggSpec:
    """`count`, `avg:latency`, `p99_ms=p99:value.latency.ms` -> AggSpec.

    `record_path` turns a dotted path into a record path tuple (streamctl.storage.fieldpaths.record_path).
    """
    s = text.strip()
    name = None
    if "=" in s:
        name, s = (part.strip() for part in s.split("=", 1))
        if not name:
            raise AggSpecError(f"--agg {text!r}: empty name before '='")
    func, _, path = s.partition(":")
    func = func.strip().lower()
    if func not in AGG_FUNCS:
        raise AggSpecError(f"--agg {text!r}: unknown function {func!r} (use {', '.join(AGG_FUNCS)})")
    path = path.strip()
    if not path:
        if func != "count":
            raise AggSpecError(f"--agg {text!r}: {func} needs a field, e.g. {func}:amount")
        return AggSpec(name or "count", "count", None)
    parts = tuple(record_path(path))
    return AggSpec(name or f"{func}_{parts[-1]}", func, parts)


def getter(parts: tuple[str, ...]):
    """The value at a record path (the one rule: streamctl.storage.fieldpaths)."""
    return fieldpaths.getter(parts)


def _distinct_key(v: Any) -> Any:
    # Strings stand for themselves; anything else by its JSON text, so 1 and 1.0,
    # or true and 1, stay distinct values as they are in the input.
    return v if type(v) is str else orjson.dumps(v, option=orjson.OPT_SORT_KEYS)


def _is_number(v: Any) -> bool:
    """A finite int or float (bools, NaN and infinities are not numbers to aggregate)."""
    t = type(v)
    return t is int or (t is float and v == v and v not in _INF)


_INF = (math.inf, -math.inf)


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


def _zero() -> int:
    return 0


def _pair() -> list:
    return [0, 0]  # total, how many numbers


def _none() -> None:
    return None


def _same(x: Any) -> Any:
    return x


def _total(x: list) -> Any:
    return x[0] if x[1] else None


def _mean(x: list) -> Any:
    return x[0] / x[1] if x[1] else None


def _second(x: tuple | None) -> Any:
    return x[1] if x is not None else None


# a slot's start value per aggregation (min / max: the value; first / last: (input sequence
# number, value); None before any), and what result() makes of the slot
_MAKERS = {"count": _zero, "sum": _pair, "avg": _pair, "distinct": set, "min": _none, "max": _none,
           "first": _none, "last": _none}
_FINALS: dict[str, Callable[[Any], Any]] = {"count": _same, "min": _same, "max": _same, "sum": _total, "avg": _mean, "distinct": len,
           "first": _second, "last": _second}


class Plan:
    """The aggregations of one run: extract values per event, fold them into window states.

    Each aggregation is written once, in each of the few operations a state
    needs: `new`, `add` (one event), `fold` (the events of a batch that fall
    into one window, with builtins over the column: the same values, in the
    same order, as adding them one by one), `merge`, `result`, `dump`/`load`.
    """

    def __init__(self, specs: list[AggSpec]) -> None:
        names = [s.name for s in specs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise AggSpecError(f"--agg: output field {dupes[0]!r} named twice (use NAME=FUNC:PATH)")
        for n in names:
            if n in ("window", "key", "revision"):
                raise AggSpecError(f"--agg: {n!r} is taken by the row itself (use NAME=FUNC:PATH)")
        self.specs = specs
        self.funcs = [s.func for s in specs]
        self.getters = [getter(s.path) if s.path is not None else None for s in specs]
        self.numeric = [s.func in NUMERIC_FUNCS for s in specs]
        self.non_numeric: dict[str, int] = {}
        self.n = len(specs)
        self.uses_seq = any(f in ("first", "last") for f in self.funcs)
        self.names = [s.name for s in specs]
        self._makers = [_MAKERS.get(f, list) for f in self.funcs]  # a percentile keeps a list
        self._finals = [_FINALS[f] if f in _FINALS else partial(percentile, q=PERCENTILES[f]) for f in self.funcs]

    # -- per event ---------------------------------------------------------------

    def extract(self, rec: dict) -> tuple:
        """The value each aggregation needs from one event (None = nothing to add; True for a bare count)."""
        out = []
        for spec, get, numeric in zip(self.specs, self.getters, self.numeric, strict=True):
            if get is None:
                out.append(True)
                continue
            v = get(rec)
            if numeric and v is not None and not _is_number(v):
                self.count_non_numeric(spec.name, 1)
                v = None
            out.append(v)
        return tuple(out)

    def count_non_numeric(self, name: str, n: int) -> None:
        self.non_numeric[name] = self.non_numeric.get(name, 0) + n

    def new(self) -> list:
        """A window's state: one slot per aggregation."""
        return [make() for make in self._makers]

    def add(self, st: list, vals: tuple, seq: int) -> None:
        for i, (f, v) in enumerate(zip(self.funcs, vals, strict=True)):
            if f == "first":
                if st[i] is None or seq < st[i][0]:
                    st[i] = (seq, v)
            elif f == "last":
                if st[i] is None or seq > st[i][0]:
                    st[i] = (seq, v)
            elif v is None:
                pass  # a null adds to nothing but first and last
            elif f == "count":
                st[i] += 1
            elif f == "sum" or f == "avg":
                acc = st[i]
                acc[0] += v
                acc[1] += 1
            elif f == "min":
                if st[i] is None or v < st[i]:
                    st[i] = v
            elif f == "max":
                if st[i] is None or v > st[i]:
                    st[i] = v
            elif f == "distinct":
                st[i].add(_distinct_key(v))
            else:  # a percentile
                st[i].append(v)

    def fold(self, st: list, cols: Sequence[list | None], idx: list[int], seq0: int) -> None:
        """add() of the events at positions `idx` (ascending) of a batch whose columns are `cols`
        (one per aggregation, None for a bare count) and whose first event has sequence number
        seq0: one builtin call per aggregation instead of one add() per event."""
        for i, (f, col) in enumerate(zip(self.funcs, cols, strict=True)):
            if col is None:  # a bare count
                st[i] += len(idx)
            else:
                self._fold_one(i, f, st, col, idx, seq0)

    def fold_groups(self, groups: list[tuple[list, list[int]]], cols: Sequence[list | None], seq0: int) -> None:
        """fold(st, cols, idx, seq0) for each (st, idx) of `groups`, an aggregation at a time: a batch
        whose windows hold one or two events each (many keys, short windows) spends its time per
        group, so each aggregation's loop over the groups is kept to its few operations."""
        for i, (f, col) in enumerate(zip(self.funcs, cols, strict=True)):
            if col is None:  # a bare count
                for st, idx in groups:
                    st[i] += len(idx)
            elif f == "sum" or f == "avg":
                for st, idx in groups:
                    if len(idx) == 1:
                        v = col[idx[0]]
                        if v is not None:
                            acc = st[i]
                            acc[0] += v
                            acc[1] += 1
                    else:
                        vals = [v for v in map(col.__getitem__, idx) if v is not None]
                        if vals:
                            acc = st[i]
                            acc[0] = reduce(add, vals, acc[0])  # left to right, as add() per event
                            acc[1] += len(vals)
            elif f == "count":
                for st, idx in groups:
                    st[i] += len(idx) - [col[j] for j in idx].count(None)
            else:
                for st, idx in groups:
                    self._fold_one(i, f, st, col, idx, seq0)

    def _fold_one(self, i: int, f: str, st: list, col: list, idx: list[int], seq0: int) -> None:
        """fold() for aggregation i alone."""
        if f == "first":
            j = idx[0]
            if st[i] is None or seq0 + j < st[i][0]:
                st[i] = (seq0 + j, col[j])
            return
        if f == "last":
            j = idx[-1]
            if st[i] is None or seq0 + j > st[i][0]:
                st[i] = (seq0 + j, col[j])
            return
        vals = [v for v in map(col.__getitem__, idx) if v is not None]
        if not vals:
            return
        if f == "count":
            st[i] += len(vals)
        elif f == "sum" or f == "avg":
            acc = st[i]
            # reduce(add) adds left to right from the total so far: the same float as add() per
            # event (sum() compensates float rounding on Python 3.12+, which would not be)
            acc[0] = reduce(add, vals, acc[0])
            acc[1] += len(vals)
        elif f == "min":
            m = min(vals)
            if st[i] is None or m < st[i]:
                st[i] = m
        elif f == "max":
            m = max(vals)
            if st[i] is None or m > st[i]:
                st[i] = m
        elif f == "distinct":
            st[i].update(map(_distinct_key, vals))
        else:  # a percentile
            st[i].extend(vals)

    def result(self, st: list) -> dict:
        return {name: final(x) for name, final, x in zip(self.names, self._finals, st, strict=True)}

    def results(self, sts: Iterable[list]) -> list[dict]:
        return list(map(self.result, sts))

    def result_of_events(self, events: list[tuple]) -> dict:
        """result() of a state built by add() over `events` [(t, seq, vals)] in that order (a sliding
        window aggregates its events again for every row): folded a column at a time."""
        st = self.new()
        n = len(events)
        if n:
            cols = [None if s.path is None else [e[2][i] for e in events] for i, s in enumerate(self.specs)]
            self.fold(st, cols, list(range(n)), 0)
            if self.uses_seq:  # events are in (time, seq) order: first and last go by seq
                seqs = [e[1] for e in events]
                for i, f in enumerate(self.funcs):
                    if f in ("first", "last"):
                        j = (min if f == "first" else max)(range(n), key=seqs.__getitem__)
                        st[i] = (seqs[j], cols[i][j])  # type: ignore[index]
        return self.result(st)

    def merge(self, a: list, b: list) -> list:
        """Fold window state b into a (sessions that an event bridges); returns a."""
        for i, f in enumerate(self.funcs):
            x, y = a[i], b[i]
            if f == "count":
                a[i] = x + y
            elif f in ("sum", "avg"):
                x[0] += y[0]
                x[1] += y[1]
            elif f == "min":
                a[i] = y if x is None or (y is not None and y < x) else x
            elif f == "max":
                a[i] = y if x is None or (y is not None and y > x) else x
            elif f in PERCENTILES:
                x.extend(y)
            elif f == "distinct":
                x |= y
            elif f == "first":
                a[i] = y if x is None or (y is not None and y[0] < x[0]) else x
            elif f == "last":
                a[i] = y if x is None or (y is not None and y[0] > x[0]) else x
        return a

    # -- checkpoints (follow mode) -------------------------------------------------

    def dump(self, st: list) -> list:
        out: list[Any] = []
        for f, x in zip(self.funcs, st, strict=True):
            if f == "distinct":
                out.append([["s", v] if type(v) is str else ["j", v.decode()] for v in x])
            elif f in ("first", "last"):
                out.append(list(x) if x is not None else None)
            else:
                out.append(x)
        return out

    def load(self, data: list) -> list:
        st: list = []
        for f, x in zip(self.funcs, data, strict=True):
            if f == "distinct":
                st.append({v if kind == "s" else v.encode() for kind, v in x})
            elif f in ("first", "last"):
                st.append(tuple(x) if x is not None else None)
            else:
                st.append(x)
        return st
