"""The shape every aggregation class has, and the registry that maps an `--agg` name to its class.

An aggregation is one class (exact.py, sketches.py) holding all of its rule:

    new()                      an empty state
    add(st, v, seq) -> st      one value (None: missing; seq: its place in the input order)
                               fold() of [v], unless the result goes by seq (first, last)
    fold(st, vals) -> st       the non-null values of a batch's events in one window, in input
                               order: the same state as add() of each in turn (a property test
                               ties them, tests/props/test_aggregations.py)
    fold_groups(i, groups, col, seq0)
                               fold() into slot i of each (window state, event positions) of a
                               batch: the batch kernel; an override keeps its loop short
    merge(a, b) -> a           two windows' states as one (sessions an event bridges)
    result(st)                 the output value
    dump(st) / load(data)      a follow-mode checkpoint's JSON form of the state, and back
    state_type(t)              the msgspec type of dump()'s form (t: the checkpoint's number types)

and declares `numeric` (values that are not numbers are counted and ignored), `by_seq` (the result
depends on the input order: first, last) and `slots` (whether windows.cells may keep the state in
numpy arrays: "count" for a count of present values, "total" for a float64 total with its count;
None for a Python state). A state is what new() returns; Plan keeps one per aggregation in a list.

This module, like the others of the package, uses only the standard library and orjson (when it
is there): the Spark window job carries it to the executors.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

REGISTRY: dict[str, type[Agg]] = {}


def register(cls: type[Agg]) -> type[Agg]:
    """Class decorator: the class answers to each of its `names` in --agg."""
    for name in cls.names:
        REGISTRY[name] = cls
    return cls


def agg_class(func: str) -> type[Agg]:
    return REGISTRY[func]


_INF = (math.inf, -math.inf)


def is_number(v: Any) -> bool:
    """A finite int or float (bools, NaN and infinities are not numbers to aggregate)."""
    t = type(v)
    return t is int or (t is float and v == v and v not in _INF)


def non_null(col: list, idx: list[int]) -> list:
    """The values at positions idx of a column, nulls left out, in order."""
    return [v for v in map(col.__getitem__, idx) if v is not None]


class Agg:
    """One aggregation function (module docstring); an instance serves one --agg of a run."""

    names: ClassVar[tuple[str, ...]] = ()
    numeric: ClassVar[bool] = False
    by_seq: ClassVar[bool] = False
    slots: ClassVar[str | None] = None

    def __init__(self, func: str) -> None:
        self.func = func

    def new(self) -> Any:
        raise NotImplementedError

    def add(self, st: Any, v: Any, seq: int) -> Any:
        return st if v is None else self.fold(st, [v])

    def fold(self, st: Any, vals: list) -> Any:
        raise NotImplementedError

    def fold_groups(self, i: int, groups: list[tuple[list, list[int]]], col: list, seq0: int) -> None:
        fold = self.fold
        for st, idx in groups:
            vals = non_null(col, idx)
            if vals:
                st[i] = fold(st[i], vals)

    def merge(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def result(self, st: Any) -> Any:
        return st

    def dump(self, st: Any) -> Any:
        return st

    def load(self, data: Any) -> Any:
        return data

    @classmethod
    def state_type(cls, t: Any) -> Any:
        raise NotImplementedError

    # -- numpy slots (windows.cells): only for classes with `slots` ---------------------------

    def slot_results(self, total: Any, count: Any, floaty: Any) -> list:
        """result() of each slot, from numpy arrays of the slots' totals (float64; 0 for "count"
        slots), counts (int64) and whether a float was among their numbers (bool)."""
        raise NotImplementedError

    def slot_state(self, total: float, count: int, floaty: bool) -> Any:
        """The exact Python state of one slot."""
        raise NotImplementedError

    def slot_values(self, st: Any) -> tuple[Any, int, bool] | None:
        """A Python state as (total, count, floaty) for a slot; None when a slot cannot hold it
        exactly."""
        raise NotImplementedError
