"""Aggregations for windows: `count`, `sum`, `avg`, `min`, `max`, `p50`/`p90`/`p99`, `distinct`, `first`, `last`.

A spec is `FUNC[:PATH]` or `NAME=FUNC:PATH`; the output field defaults to
`FUNC_LASTSEGMENT` (`avg:value.latency.ms` -> `avg_ms`) and to `count` for a
bare count. Values are pulled out of each event once (`Plan.extract`), so an
event that falls into several windows (hopping) is checked once: a value that
is not a number, for a numeric aggregation, is counted in `Plan.non_numeric`
and then ignored like a missing value (SQL's NULL), never a crash.

Per-window state is a plain list (one slot per aggregation) so that it is cheap
to build, to merge (sessions) and to write into a follow-mode checkpoint.

This module and `streamctl.processing.windows` use only the standard library and orjson:
the Spark engine pastes their source into the generated job, so executors
run exactly the same code as the local engine.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import orjson

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
    """A fast accessor for a record path (the common one- and two-level cases unrolled)."""
    if len(parts) == 1:
        (a,) = parts
        return lambda r: r.get(a)
    if len(parts) == 2:
        a, b = parts

        def get2(r: dict) -> Any:
            v = r.get(a)
            return v.get(b) if type(v) is dict else None
        return get2

    def getn(r: Any) -> Any:
        for p in parts:
            if type(r) is dict:
                r = r.get(p)
            elif type(r) is list and p.lstrip("-").isdecimal() and -len(r) <= int(p) < len(r):
                r = r[int(p)]
            else:
                return None
        return r
    return getn


def _distinct_key(v: Any) -> Any:
    # Strings stand for themselves; anything else by its JSON text, so 1 and 1.0,
    # or true and 1, stay distinct values as they are in the input.
    return v if type(v) is str else orjson.dumps(v, option=orjson.OPT_SORT_KEYS)


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


class Plan:
    """The aggregations of one run: extract values per event, fold them into window states."""

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

        self.extract = self._compile_extract()
        self.add = self._compile_add()
        self.new = self._compile_new()
        self.result, self.results = self._compile_result()

    # -- per event ---------------------------------------------------------------
    #
    # extract() and add() run once per event (add once per window of it), so
    # they are compiled for this run's aggregations: straight-line code with
    # the paths and slots inlined is about 3x faster than looping over specs.
    # The generic versions below are the reference they must agree with.

    def extract_source(self, env: dict, indent: str = "    ") -> tuple[list[str], str]:
        """Straight-line code that reads this plan's inputs from record `r` (and `_val`, its value,
        which the caller must have bound), and the tuple expression of the results."""
        env.update({"_getters": self.getters, "_bad": self._bad, "_inf": (math.inf, -math.inf)})
        lines: list[str] = []
        names = []
        for i, (spec, numeric) in enumerate(zip(self.specs, self.numeric, strict=True)):
            v = f"_a{i}"
            names.append(v)
            if spec.path is None:
                lines.append(f"{v} = True")
                continue
            if len(spec.path) == 2 and spec.path[0] == "value":
                lines.append(f"{v} = _val.get({spec.path[1]!r}) if type(_val) is dict else None")
            elif len(spec.path) == 1:
                lines.append(f"{v} = r.get({spec.path[0]!r})")
            else:
                lines.append(f"{v} = _getters[{i}](r)")
            if numeric:
                lines.append(f"if {v} is not None and type({v}) is not int"
                             f" and (type({v}) is not float or {v} != {v} or {v} in _inf):")
                lines.append(f"    {v} = _bad({i})")
        return [indent + ln for ln in lines], f"({', '.join(names)},)"

    def _compile_extract(self):
        env: dict = {}
        lines, result = self.extract_source(env)
        src = ["def extract(r):", "    _val = r.get('value')", *lines, f"    return {result}"]
        exec("\n".join(src), env)
        return env["extract"]

    def _bad(self, i: int) -> None:
        name = self.specs[i].name
        self.non_numeric[name] = self.non_numeric.get(name, 0) + 1

    def add_lines(self, st: str = "st", vals: list[str] | None = None, seq: str = "seq") -> list[str]:
        """The body of add(): straight-line code folding values named `vals` (one per aggregation;
        the literal `True` for a bare count) into state `st`. Batch loops inline it too."""
        vals = vals or [f"v{i}" for i in range(self.n)]
        lines = []
        for i, f in enumerate(self.funcs):
            v = vals[i]
            if f == "count":
                lines.append(f"{st}[{i}] += 1" if v == "True" else f"if {v} is not None: {st}[{i}] += 1")
            elif f in ("sum", "avg"):
                lines.append(f"if {v} is not None:")
                lines.append(f"    a = {st}[{i}]; a[0] += {v}; a[1] += 1")
            elif f == "min":
                lines.append(f"if {v} is not None and ({st}[{i}] is None or {v} < {st}[{i}]): {st}[{i}] = {v}")
            elif f == "max":
                lines.append(f"if {v} is not None and ({st}[{i}] is None or {v} > {st}[{i}]): {st}[{i}] = {v}")
            elif f == "distinct":
                lines.append(f"if {v} is not None: {st}[{i}].add(_dk({v}))")
            elif f == "first":
                lines.append(f"if {st}[{i}] is None or {seq} < {st}[{i}][0]: {st}[{i}] = ({seq}, {v})")
            elif f == "last":
                lines.append(f"if {st}[{i}] is None or {seq} > {st}[{i}][0]: {st}[{i}] = ({seq}, {v})")
            else:
                lines.append(f"if {v} is not None: {st}[{i}].append({v})")
        return lines

    def add_env(self) -> dict:
        """The names add_lines' code uses."""
        return {"_dk": _distinct_key}

    def _compile_add(self):
        names = [f"v{i}" for i in range(self.n)]
        lines = ["def add(st, vals, seq):", f"    {', '.join(names)}, = vals"]
        lines += ["    " + ln for ln in self.add_lines("st", names, "seq")]
        env = self.add_env()
        exec("\n".join(lines), env)
        return env["add"]

    def _compile_new(self):
        init = {"count": "0", "sum": "[0, 0]", "avg": "[0, 0]", "min": "None", "max": "None",
                "distinct": "set()", "first": "None", "last": "None"}
        env: dict = {}
        exec(f"def new():\n    return [{', '.join(init.get(f, '[]') for f in self.funcs)}]", env)
        return env["new"]

    def _compile_result(self):
        env: dict = {"_pct": percentile}
        fields = []
        for i, (spec, f) in enumerate(zip(self.specs, self.funcs, strict=True)):
            x = f"st[{i}]"
            expr = {
                "count": x, "min": x, "max": x,
                "sum": f"{x}[0] if {x}[1] else None",
                "avg": f"{x}[0] / {x}[1] if {x}[1] else None",
                "distinct": f"len({x})",
                "first": f"{x}[1] if {x} is not None else None",
                "last": f"{x}[1] if {x} is not None else None",
            }.get(f) or f"_pct({x}, {PERCENTILES.get(f)!r})"
            fields.append(f"{spec.name!r}: {expr}")
        obj = "{" + ", ".join(fields) + "}"
        # results(states): result() of each, as one comprehension (no call per closed window)
        exec(f"def result(st):\n    return {obj}\ndef results(sts):\n    return [{obj} for st in sts]", env)
        return env["result"], env["results"]

    def extract_generic(self, rec: dict) -> tuple:
        """The value each aggregation needs from one event (None = nothing to add)."""
        out = []
        for spec, get, numeric in zip(self.specs, self.getters, self.numeric, strict=True):
            if get is None:
                out.append(True)
                continue
            v = get(rec)
            if numeric and v is not None:
                t = type(v)
                if t is not int and t is not float:
                    self.non_numeric[spec.name] = self.non_numeric.get(spec.name, 0) + 1
                    v = None
                elif t is float and (v != v or v in (math.inf, -math.inf)):
                    self.non_numeric[spec.name] = self.non_numeric.get(spec.name, 0) + 1
                    v = None
            out.append(v)
        return tuple(out)

    def new_generic(self) -> list:
        st: list = []
        for f in self.funcs:
            if f == "count":
                st.append(0)
            elif f in ("sum", "avg"):
                st.append([0, 0])  # total, how many numbers
            elif f in ("min", "max"):
                st.append(None)
            elif f in PERCENTILES:
                st.append([])
            elif f == "distinct":
                st.append(set())
            else:  # first / last: (input sequence number, value) or None
                st.append(None)
        return st

    def add_generic(self, st: list, vals: tuple, seq: int) -> None:
        i = 0
        for f, v in zip(self.funcs, vals, strict=True):
            if f == "count":
                if v is not None:
                    st[i] += 1
            elif v is None and f != "first" and f != "last":
                pass
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
            elif f == "first":
                if st[i] is None or seq < st[i][0]:
                    st[i] = (seq, v)
            elif f == "last":
                if st[i] is None or seq > st[i][0]:
                    st[i] = (seq, v)
            else:  # a percentile
                st[i].append(v)
            i += 1

    def result_of_events(self, events: list[tuple]) -> dict:
        """result() of a state built by add() over `events` [(t, seq, vals)] in that order, computed
        column by column with builtins (a sliding window re-aggregates its events for every row; this
        is ~10x faster than folding them one by one, and gives the same values: the same additions in
        the same order, the first minimum / maximum, the same percentile code)."""
        out = {}
        seqs: list | None = None
        for i, (spec, f) in enumerate(zip(self.specs, self.funcs, strict=True)):
            col = [e[2][i] for e in events]
            if f == "count":
                v: Any = len(col) - col.count(None)
            elif f in ("first", "last"):
                if not col:
                    v = None
                else:
                    if seqs is None:
                        seqs = [e[1] for e in events]
                    pick = min if f == "first" else max
                    v = col[pick(range(len(seqs)), key=seqs.__getitem__)]
            else:
                nums = [x for x in col if x is not None]
                if f == "distinct":
                    v = len({_distinct_key(x) for x in nums})
                elif not nums:
                    v = None
                elif f == "sum":
                    v = sum(nums)
                elif f == "avg":
                    v = sum(nums) / len(nums)
                elif f == "min":
                    v = min(nums)
                elif f == "max":
                    v = max(nums)
                else:
                    v = percentile(nums, PERCENTILES[f])
            out[spec.name] = v
        return out

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

    def result_generic(self, st: list) -> dict:
        out = {}
        for spec, f, x in zip(self.specs, self.funcs, st, strict=True):
            if f == "count":
                v = x
            elif f == "sum":
                v = x[0] if x[1] else None
            elif f == "avg":
                v = x[0] / x[1] if x[1] else None
            elif f in ("min", "max"):
                v = x
            elif f in PERCENTILES:
                v = percentile(x, PERCENTILES[f])
            elif f == "distinct":
                v = len(x)
            else:
                v = x[1] if x is not None else None
            out[spec.name] = v
        return out

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
