"""Aggregations for windows: the `--agg` parser and the Plan that runs a run's aggregations.

A spec is `FUNC[:PATH]` or `NAME=FUNC:PATH`; the output field defaults to
`FUNC_LASTSEGMENT` (`avg:value.latency.ms` -> `avg_ms`) and to `count` for a
bare count. Values are pulled out of each event once (`Plan.extract`), so an
event that falls into several windows (hopping) is checked once: a value that
is not a number, for a numeric aggregation, is counted in `Plan.non_numeric`
and then ignored like a missing value (SQL's NULL), never a crash.

Each function is one class (exact.py: count, sum, avg, min, max, p50/p90/p99,
distinct, first, last, stddev; sketches.py: approx_distinct, approx_p50/p90/p99)
registered under its names (base.py); Plan holds one instance per --agg and a
window's state is a plain list with one slot per aggregation, cheap to build,
to merge (sessions) and to write into a follow-mode checkpoint.

The package uses only the standard library and orjson (when it is there; the
sketches import datasketches when used): the Spark window job carries it and
runs it on the executors, so they fold exactly as the local engine does.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from streamctl.processing.aggregations import exact, sketches  # noqa: F401  (they register their classes)
from streamctl.processing.aggregations.base import REGISTRY, Agg, agg_class, is_number
from streamctl.storage import fieldpaths

AGG_FUNCS = tuple(REGISTRY)

__all__ = ["AGG_FUNCS", "Agg", "AggSpec", "AggSpecError", "Plan", "agg_class", "parse_agg"]


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
    if func not in REGISTRY:
        raise AggSpecError(f"--agg {text!r}: unknown function {func!r} (use {', '.join(AGG_FUNCS)})")
    path = path.strip()
    if not path:
        if func != "count":
            raise AggSpecError(f"--agg {text!r}: {func} needs a field, e.g. {func}:amount")
        return AggSpec(name or "count", "count", None)
    parts = tuple(record_path(path))
    return AggSpec(name or f"{func}_{parts[-1]}", func, parts)


class Plan:
    """The aggregations of one run: extract values per event, fold them into window states.

    A state is a list with one slot per aggregation; each operation asks each aggregation's class
    (base.py): `new`, `add` (one event), `merge`, `result`, `dump`/`load`. A batch's events are
    folded by the classes' `fold_groups` into slots (windows.cells.Slots.fold), which keep the
    states of the aggregations that cannot be numpy arrays in this shape.
    """

    def __init__(self, specs: list[AggSpec]) -> None:
        names = [s.name for s in specs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise AggSpecError(f"--agg: output field {dupes[0]!r} named twice (use NAME=FUNC:PATH)")
        for n in names:
            if n in ("window", "key", "revision", "op"):  # "op": a delete row's mark (--emit update)
                raise AggSpecError(f"--agg: {n!r} is taken by the row itself (use NAME=FUNC:PATH)")
        self.specs = specs
        self.funcs = [s.func for s in specs]
        self.aggs: list[Agg] = [REGISTRY[s.func](s.func) for s in specs]
        self.getters = [fieldpaths.getter(s.path) if s.path is not None else None for s in specs]
        self.numeric = [a.numeric for a in self.aggs]
        self.non_numeric: dict[str, int] = {}
        self.n = len(specs)
        self.names = names
        self._adds = [a.add for a in self.aggs]

    # -- per event ---------------------------------------------------------------

    def extract(self, rec: dict) -> tuple:
        """The value each aggregation needs from one event (None = nothing to add; True for a bare count)."""
        out = []
        for spec, get, numeric in zip(self.specs, self.getters, self.numeric, strict=True):
            if get is None:
                out.append(True)
                continue
            v = get(rec)
            if numeric and v is not None and not is_number(v):
                self.count_non_numeric(spec.name, 1)
                v = None
            out.append(v)
        return tuple(out)

    def count_non_numeric(self, name: str, n: int) -> None:
        self.non_numeric[name] = self.non_numeric.get(name, 0) + n

    def new(self) -> list:
        """A window's state: one slot per aggregation."""
        return [a.new() for a in self.aggs]

    def add(self, st: list, vals: tuple, seq: int) -> None:
        for i, (add, v) in enumerate(zip(self._adds, vals, strict=True)):
            st[i] = add(st[i], v, seq)

    def result(self, st: list) -> dict:
        return {name: a.result(x) for name, a, x in zip(self.names, self.aggs, st, strict=True)}

    def result_of_events(self, events: list[tuple]) -> dict:
        """result() of a state built by add() over `events` [(t, seq, vals)] in that order (a sliding
        window aggregates its events again for every row): folded a column at a time."""
        st = self.new()
        n = len(events)
        if n:
            cols = [None if s.path is None else [e[2][i] for e in events] for i, s in enumerate(self.specs)]
            for i, (a, col) in enumerate(zip(self.aggs, cols, strict=True)):
                if a.by_seq:  # events are in (time, seq) order: first and last go by seq, added one by one
                    for e in events:
                        st[i] = a.add(st[i], e[2][i], e[1])
                else:
                    a.fold_groups(i, [(st, list(range(n)))], col, 0)  # type: ignore[arg-type]
        return self.result(st)

    def merge(self, a: list, b: list) -> list:
        """Fold window state b into a (sessions that an event bridges); returns a."""
        for i, agg in enumerate(self.aggs):
            a[i] = agg.merge(a[i], b[i])
        return a

    # -- checkpoints (follow mode) -------------------------------------------------

    def dump(self, st: list) -> list:
        return [a.dump(x) for a, x in zip(self.aggs, st, strict=True)]

    def load(self, data: list) -> list:
        return [a.load(x) for a, x in zip(self.aggs, data, strict=True)]
