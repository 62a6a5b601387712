"""Open grid windows (tumbling, hopping) kept as columns: a batch's events of a window folded at once.

A window's groups are slots (key -> slot number). Each aggregation keeps its
states one of two ways:
- in numpy arrays, for count, sum and avg: one slot layout for all three, the
  total, how many numbers it holds and whether a float was among them (a
  count's total stays 0), which each class reads and writes through its slot
  methods. A batch's events of
  one window are folded with `np.add.at`, which adds in index order, one
  element at a time: each slot's total is the same left-to-right float sum
  that `Plan.add` makes event by event, so the rows are the same, bit for bit;
- as the aggregation's own Python state, one per slot (percentiles, distinct,
  first, last, min, max, stddev, sketches), folded a group at a time by the
  class's `fold_groups` from the batch's raw column (the same state as its
  `add` per event; tests/props/test_aggregations.py ties them).

Ints are exact in a float64 total while every partial sum stays below 2**53:
the arrays hold ints of at most 2**31 in size, in windows of fewer than 2**21
numbers. Where a batch brings a larger int, or a window reaches that many
numbers, that aggregation of the windows concerned moves to its exact Python
state (`to_python`), which changes no result; windows opened later start in
arrays again.

Which aggregations can be arrays is each one's class's word (its `slots`:
count, sum and avg; aggregations.base), and what a slot's result and exact
Python state are is the class's too (slot_results, slot_state, slot_values);
nothing here goes by a function's name.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, filterfalse, repeat
from typing import Any

import numpy as np

from streamctl.processing.aggregations import Agg

INT_LIMIT = 1 << 31  # the largest int a column holds (with fewer than COUNT_LIMIT numbers: sums stay exact)
COUNT_LIMIT = 1 << 21


__all__ = ["COUNT_LIMIT", "INT_LIMIT", "Cells", "NumberColumn", "SlotStates", "number_columns"]


class NumberColumn:
    """One aggregation input column of a batch, as numpy arrays: its values (0 where null), which
    are present, which are floats; None from `of` when an int is too large to be kept exactly."""

    __slots__ = ("values", "present", "floats")

    def __init__(self, values: np.ndarray, present: np.ndarray | None, floats: np.ndarray | None) -> None:
        self.values = values
        self.present = present  # None: all present
        self.floats = floats  # None: none is a float (a bool array otherwise)

    @classmethod
    def of(cls, col: list) -> NumberColumn | None:
        types = {*map(type, col)}
        present = None
        if type(None) in types:
            mask = [v is not None for v in col]
            present = np.array(mask, dtype=bool)
            col = [0 if v is None else v for v in col]
            types.discard(type(None))
        if int in types:
            ints = col if len(types) == 1 else [v for v in col if type(v) is int]
            if ints and (max(ints) > INT_LIMIT or min(ints) < -INT_LIMIT):
                return None
        values = np.array(col, dtype=np.float64) if col else np.zeros(0)
        floats = None
        if float in types:
            floats = np.array([type(v) is float for v in col], dtype=bool) if int in types else \
                np.ones(len(col), dtype=bool)
        return cls(values, present, floats)

    @classmethod
    def presence(cls, col: list) -> NumberColumn:
        """A count's input: only which values are present (not null) matters."""
        present = None if None not in col else np.array([v is not None for v in col], dtype=bool)
        return cls(np.zeros(len(col)), present, None)

    def take(self, sel: np.ndarray | slice | None) -> NumberColumn:
        if sel is None:
            return self
        return NumberColumn(self.values[sel], None if self.present is None else self.present[sel],
                            None if self.floats is None else self.floats[sel])

    __getitem__ = take  # selected as a numpy array is (windows._window_runs cuts both alike)


def number_columns(aggs: Sequence[Agg], cols: Sequence[list | None]) -> tuple[list[NumberColumn | None], set[int]]:
    """A batch's inputs of the aggregations that can live in arrays as NumberColumns (None for a
    bare count and for the others), and which of them hold an int too large to be kept exactly
    (those fold as Python states instead: Slots.to_python)."""
    out: list[NumberColumn | None] = []
    too_big = set()
    for i, (col, agg) in enumerate(zip(cols, aggs, strict=True)):
        number = None
        if col is not None and agg.slots is not None:
            number = NumberColumn.presence(col) if agg.slots == "count" else NumberColumn.of(col)
            if number is None:
                too_big.add(i)
        out.append(number)
    return out, too_big


def _slot_values(agg: Agg, st: Any) -> tuple[Any, int, bool] | None:
    """A Python state as its slot's (total, count, floaty) (Agg.slot_values); None when a slot
    cannot keep it exactly."""
    got = agg.slot_values(st)
    return got if got is not None and (agg.slots == "count" or got[1] < COUNT_LIMIT) else None


class Slots:
    """The states of a run's aggregations (a Plan's) as numpy arrays, one slot per state (module
    docstring). Every aggregation in arrays has the one slot layout its class's slot methods read
    and write: a total (float64), a count (int64) and whether a float was among the numbers (bool);
    a count's total stays 0."""

    def __init__(self, plan: Any) -> None:
        self.plan = plan
        self.aggs: list[Agg] = plan.aggs
        self.names: list[str] = plan.names
        self.sums = [a.slots == "total" for a in self.aggs]  # which fold their numbers into the total
        self.size = 0
        # every value ever counted into a slot (folds, adds, loaded states): no count is above it, so
        # while it is below COUNT_LIMIT every total is exact without looking (fits)
        self.folded = 0
        # the aggregations kept as Python states (module docstring), and those states: one list per
        # slot, Plan's state shape (an entry per aggregation, those in arrays unused), so that each
        # class's fold_groups folds into them as it does into Plan's
        self.py = {i for i, a in enumerate(self.aggs) if a.slots is None}
        self.rows: list[Any] = []  # (a free slot's: None, SlotStates.release_at)
        self._alloc(16)

    def _alloc(self, cap: int) -> None:
        self.cap = cap
        n = len(self.aggs)
        self.total = [np.zeros(cap, dtype=np.float64) for _ in range(n)]
        self.count = [np.zeros(cap, dtype=np.int64) for _ in range(n)]
        self.floaty = [np.zeros(cap, dtype=bool) for _ in range(n)]

    def _arrays(self) -> Iterator[np.ndarray]:
        """Every array of every aggregation's slots."""
        return chain(self.total, self.count, self.floaty)

    def _grow(self, need: int) -> None:
        cap = self.cap
        while cap < need:
            cap *= 2
        was = list(self._arrays())
        self._alloc(cap)
        for new, old in zip(self._arrays(), was, strict=True):
            new[:len(old)] = old

    def fold(self, idx: np.ndarray, numbers: Sequence[NumberColumn | None], raw: Sequence[list | None],
             positions: np.ndarray, seq0: int) -> None:
        """Fold events into the slots `idx` (one per event, in input order): the aggregations in
        arrays from their inputs as NumberColumns (number_columns; None for a bare count), those kept
        as Python states from the batch's raw columns `raw` (whose first event is number seq0), the
        event at positions[j] into slot idx[j]: each slot's events in input order, a group per slot
        (Agg.fold_groups)."""
        self.folded += len(idx)
        for i, col in enumerate(numbers):
            if i in self.py:
                continue
            if col is None:
                np.add.at(self.count[i], idx, 1)
                continue
            at = idx if col.present is None else idx[col.present]
            np.add.at(self.count[i], at, 1)
            if self.sums[i]:
                vals = col.values if col.present is None else col.values[col.present]
                np.add.at(self.total[i], at, vals)  # in index order: each slot's total sums left to right
                if col.floats is not None:
                    floats = col.floats if col.present is None else col.floats[col.present]
                    self.floaty[i][at[floats]] = True
        if not self.py:
            return
        order = np.argsort(idx, kind="stable")
        slot_of = idx[order]
        cut = (np.flatnonzero(slot_of[1:] != slot_of[:-1]) + 1).tolist()
        pos = positions[order].tolist()
        rows = self.rows
        groups = [(rows[s], pos[a:b]) for s, a, b in
                  zip(slot_of[[0, *cut]].tolist(), [0, *cut], [*cut, len(pos)], strict=True)]
        for i in sorted(self.py):
            self.aggs[i].fold_groups(i, groups, raw[i], seq0)  # type: ignore[arg-type]  # None: a bare count

    def keep_exact(self) -> None:
        """Move each aggregation whose totals could stop being exact (COUNT_LIMIT numbers in a
        slot) to Python states."""
        if self.folded >= COUNT_LIMIT:
            for i, c in enumerate(self.count):
                if self.sums[i] and i not in self.py and int(c[:self.size].max(initial=0)) >= COUNT_LIMIT:
                    self.to_python(i)

    def to_python(self, i: int) -> None:
        """Keep aggregation i as Python states from now on: each slot's exact state (slot_state)."""
        if i in self.py:
            return
        if not self.py:  # the rows are kept while an aggregation is Python states: one per slot
            self.rows = [[None] * len(self.aggs) for _ in range(self.size)]
        for s, row in enumerate(self.rows):
            if row is not None:  # (None: a free slot, SlotStates.release_at)
                row[i] = self._slot_state(i, s)
        self.py.add(i)

    def to_arrays(self) -> None:
        """Move each aggregation kept as Python states whose class can live in arrays back to them,
        where every slot's state fits (SlotStates: once the sessions holding a number beyond a slot
        have closed)."""
        for i in sorted(self.py):
            agg = self.aggs[i]
            if agg.slots is None:
                continue
            live = [s for s, row in enumerate(self.rows) if row is not None]
            got = [_slot_values(agg, self.rows[s][i]) for s in live]
            if all(got):
                for s, values in zip(live, got, strict=True):
                    self._put(i, s, values)  # type: ignore[arg-type]  # (all of them)
                self.py.discard(i)

    def keep_python(self, states: Iterable[list]) -> None:
        """Before any slot is made: keep each aggregation that a slot cannot hold exactly in one of
        these Plan states as Python states (a checkpoint's states put into slots, set_state)."""
        states = list(states)
        for i, agg in enumerate(self.aggs):
            if i not in self.py and not all(_slot_values(agg, st[i]) is not None for st in states):
                self.py.add(i)

    def _new_rows(self, slots: Iterable[int]) -> None:
        """The Python states of new slots (fresh ones, Agg.new), while some aggregation is kept so."""
        if self.py:
            rows, py = self.rows, [(i, self.aggs[i].new) for i in sorted(self.py)]
            rows += [None] * (self.size - len(rows))
            for s in slots:
                row = [None] * len(self.aggs)
                for i, make in py:
                    row[i] = make()
                rows[s] = row

    def _slot_state(self, i: int, s: int) -> Any:
        return self.aggs[i].slot_state(float(self.total[i][s]), int(self.count[i][s]), bool(self.floaty[i][s]))

    def result_columns(self, idx: np.ndarray) -> list[list]:
        """Each aggregation's results (Plan.result's values) of the states in slots `idx`, a column each."""
        columns: list[list[Any]] = []
        for i, agg in enumerate(self.aggs):
            if i in self.py:
                rows = self.rows
                columns.append([agg.result(rows[s][i]) for s in idx.tolist()])
            else:
                columns.append(agg.slot_results(self.total[i][idx], self.count[i][idx], self.floaty[i][idx]))
        return columns

    def write(self, out: list, start: Any, end: Any, keys: list[bytes], idx: np.ndarray, text: bool) -> None:
        """The rows of closed windows onto `out`, key j's state in slot idx[j]: (start, end, key,
        Plan.result, None), `start` and `end` an int each (one window) or a list (a window a key);
        with `text` (the rows go to JSON lines) and every state in arrays, their JSON lines at once
        (output.window_text, which writes numbers and nulls)."""
        names, columns = self.names, self.result_columns(idx)
        if text and not self.py:
            from streamctl.processing.windows.output import window_text

            out.append(window_text(start, end, keys, names, columns))
            return
        if len(names) == 1:  # dict displays: a third of dict(zip())'s time, for the usual one or two
            (a,), (ca,) = names, columns
            results = [{a: x} for x in ca]
        elif len(names) == 2:
            (a, b), (ca, cb) = names, columns
            results = [{a: x, b: y} for x, y in zip(ca, cb, strict=True)]
        else:
            results = [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]
        if isinstance(start, int):
            start, end = repeat(start), repeat(end)
        out += zip(start, end, keys, results, repeat(None))

    def state_at(self, s: int) -> list:
        """Plan's state of slot s, exact."""
        return [self.rows[s][i] if i in self.py else self._slot_state(i, s) for i in range(len(self.aggs))]

    def set_state(self, s: int, st: list) -> None:
        """Put Plan's state `st` into slot s (which keep_python made sure it fits)."""
        for i, a in enumerate(self.aggs):
            if i in self.py:
                self.rows[s][i] = st[i]
                continue
            got = _slot_values(a, st[i])
            assert got is not None
            self._put(i, s, got)

    def _put(self, i: int, s: int, got: tuple[Any, int, bool]) -> None:
        """Aggregation i's state in slot s, as its class's slot_values gave it."""
        self.total[i][s], self.count[i][s], self.floaty[i][s] = got
        self.folded += got[1]


class Cells(Slots):
    """One open window's groups as columns: a slot per group key."""

    def __init__(self, plan: Any) -> None:
        super().__init__(plan)
        self.slot: dict[bytes, int] = {}

    def slots(self, keys: list[bytes]) -> np.ndarray:
        """Each key's slot, made for keys not seen before."""
        slot = self.slot
        # a new key's slot is the number of keys before it (self.size == len(slot)), in first-seen
        # order; each step a C loop (map, filterfalse, update), no Python frame per event
        new = list(filterfalse(slot.__contains__, dict.fromkeys(keys)))
        if new:
            fresh = range(len(slot), len(slot) + len(new))
            slot.update(zip(new, fresh, strict=True))
            self.size = len(slot)
            if self.size > self.cap:
                self._grow(self.size)
            self._new_rows(fresh)
        return self.slots_of(keys)

    def slots_of(self, keys: list[bytes]) -> np.ndarray:
        return np.fromiter(map(self.slot.__getitem__, keys), dtype=np.intp, count=len(keys))

    def states(self) -> dict[bytes, list]:
        """Plan's state of each key ({key: [slot per aggregation]}), exact."""
        return {key: self.state_at(s) for key, s in self.slot.items()}

    @classmethod
    def from_states(cls, plan: Any, states: dict[bytes, list]) -> Cells:
        """Cells holding Plan states (a checkpoint's); an aggregation whose total is beyond what
        arrays keep exactly is kept as Python states."""
        cells = cls(plan)
        cells.keep_python(states.values())
        idx = cells.slots(list(states))
        for s, st in zip(idx.tolist(), states.values(), strict=True):
            cells.set_state(s, st)
        return cells

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.slot)


class SlotStates(Slots):
    """Plan's state interface (add, merge, dump) over slots, for session windows: a
    session's state is the slot of its handle in the store (session_index.SessionStore), opened
    with the session (open) and released when it is written or merged away."""

    def open(self, hs: Sequence[int] | np.ndarray) -> None:
        """The states of new sessions (their handles `hs`): empty (a released slot's arrays are 0)."""
        if len(hs):
            need = int(np.max(hs)) + 1
            if need > self.size:
                self.size = need
                if need > self.cap:
                    self._grow(need)
            self._new_rows(hs.tolist() if isinstance(hs, np.ndarray) else hs)

    def release(self, s: int) -> None:
        self.release_at(np.array([s], dtype=np.intp))

    def release_at(self, idx: np.ndarray) -> None:
        """Zero the slots `idx` and drop their Python states."""
        for a in self._arrays():
            a[idx] = 0
        if self.py:
            rows = self.rows
            for s in idx.tolist():
                rows[s] = None

    def add(self, s: int, vals: tuple, seq: int) -> None:
        """Plan.add into slot s. A number beyond what a slot keeps exactly (an int past INT_LIMIT, a
        total's COUNT_LIMIT-th number) moves its aggregation to Python states first (to_python)."""
        self.folded += 1
        for i, v in enumerate(vals):
            if v is not None and self.sums[i] and i not in self.py and (
                    (type(v) is int and not -INT_LIMIT <= v <= INT_LIMIT) or self.count[i][s] + 1 >= COUNT_LIMIT):
                self.to_python(i)
            if i in self.py:
                row = self.rows[s]
                row[i] = self.aggs[i].add(row[i], v, seq)
            elif v is not None:
                self.count[i][s] += 1
                if self.sums[i]:
                    self.total[i][s] += v  # a float64 add, as np.add.at makes
                    if type(v) is float:
                        self.floaty[i][s] = True

    def merge(self, a: int, b: int) -> int:
        """Fold state b into a (Plan.merge: counts added, totals added as floats, the Python states
        merged by their classes)."""
        for i, agg in enumerate(self.aggs):
            if i in self.py:
                self.rows[a][i] = agg.merge(self.rows[a][i], self.rows[b][i])
            self.count[i][a] += self.count[i][b]
            self.total[i][a] += self.total[i][b]
            self.floaty[i][a] |= self.floaty[i][b]
        self.release(b)
        return a

    def dump(self, s: int) -> list:
        return self.plan.dump(self.state_at(s))
