"""Window operators: tumbling, hopping, sliding and session windows over event time.

Each kind is one operator class (grid windows, tumbling and hopping, here; sliding.py;
session.py), made by kinds.make_operator. The driver
(`streamctl.processing.windows.driver`, reading through `windows.events`) reads event time and builds batches of
columns; the operator assigns events to windows and the aggregations
(`streamctl.processing.aggregations`) fold them. Every operator has the same
small interface (the Spark engine's per-group replay uses add/close/flush):

    fold(batch, out) -> (max time, late positions)   a Batch of events in input order
    add(key, t, seq, vals, wm, out) -> bool   fold one event in; True if it was late
    close(wm, out)                            emit the windows the watermark closed
    flush(out)                                end of input: emit every open window
    dump() / load(data)                       state for follow-mode checkpoints

`fold` gives the same rows and state as add() per event with close() after
each watermark move (`fold_events` does exactly that, and is the fold of the
operators whose rows depend on single events); grid windows fold a batch by
window and key at once.

`key` is the group key's JSON text (bytes: hashable for any JSON value, and
its byte order is the documented tie-break), `t` the event time in ms, `seq`
the event's position in the input order (first/last use it), `vals` what
`aggregations.Plan.extract` pulled out of the event, `wm` the watermark
before this event. Rows appended to `out` are `(start, end, key, values, revision)`;
revision is None except for `--late correct` rows. A row with values None is a
delete: it withdraws the row written before for that window and key (a
session whose bounds changed, see session.py), and is written as
`{"window": ..., "key": K, "op": "delete"}`. Folding the rows by (window, key)
-- a row replaces the one before, a delete removes it -- gives with `--emit
update` the rows of `--emit final`, and with `--late correct` the rows of a run
whose lateness let nothing be late.

A batch of windows closed by one watermark move comes out sorted by
(start, key): with the watermark's monotony that gives the spec's
"window-close order, ties by window start, then group key".
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from itertools import compress, repeat
from typing import Any, NamedTuple

from streamctl.processing.aggregations import columnar
from streamctl.processing.watermark import NO_WATERMARK, Watermark, before, before_array


def fold_events(op, batch: Batch, out: list) -> tuple[int, list[int]]:
    """Fold a batch one event at a time: add() against the watermark before the event, then
    close() when the event moves the watermark. Returns (largest time, positions of late events).
    This is the whole of an operator's fold where rows depend on each single event (sliding,
    sessions, `--emit update`, `--late correct`)."""
    ts, ks, cols, seq, maxt, lateness = batch[:6]
    add, close = op.add, op.close
    clock = Watermark(lateness)
    if maxt != NO_WATERMARK:
        clock.observe(maxt)
    observe = clock.observe
    lates = []
    for i, (t, k, vals) in enumerate(zip(ts, ks, rows(cols), strict=False)):  # rows() may have no end
        if add(k, t, seq + i, vals, clock.value, out):
            lates.append(i)
        if observe(t):
            close(clock.value, out)
    return (NO_WATERMARK if clock.max_time is None else clock.max_time), lates


def rows(cols: Sequence[list | None]) -> Iterator[tuple]:
    """Each event's aggregation inputs (Plan.add's `vals`) from a batch's columns (None: a bare count)."""
    return zip(*(repeat(True) if c is None else c for c in cols), strict=False) if cols else repeat(())


class Batch(NamedTuple):
    """Events in input order, as columns: times (ms), group keys (JSON text), one column per
    aggregation (None for a bare count); the first event's sequence number; the largest time
    before the batch (NO_WATERMARK: none) and the lateness, which give the watermarks."""

    ts: list[int]
    ks: list[bytes]
    cols: list[list | None]
    seq: int
    maxt: int
    lateness: int
    # each key's id (events.KeyIds) as (id space, int64 array), when the keys were numbered where read
    ids: tuple[int, Any] | None = None
    # the times as an int64 array too, when they came as one (events.EventColumns.packed)
    times: Any = None


def _group(cells: list[tuple[int, bytes]], pos: Iterable[int]) -> Iterable[tuple[tuple[int, bytes], list[int]]]:
    """((window end, key), positions) per distinct cell, in first-seen order; `pos[i]` is the
    position of cells[i]. Many keys and short windows make most cells single events: when all
    are, no per-event loop is needed."""
    distinct = dict.fromkeys(cells)
    if len(distinct) == len(cells):
        return zip(cells, ([i] for i in pos), strict=True)
    groups: dict[tuple[int, bytes], list[int]] = {}
    for cell, i in zip(cells, pos, strict=True):
        g = groups.get(cell)
        if g is None:
            groups[cell] = [i]
        else:
            g.append(i)
    return groups.items()


def _window_runs(end_array: Any, ks: list[bytes], numbers: list) -> dict[int, tuple[list[bytes], list]]:
    """A batch's events split by window: {window end: (keys, number columns)}, the windows in
    first-seen order, each one's events in input order. Most events of a batch fall in one window
    (stragglers are few): that one's keys are taken with one C pass (compress), the others' sorted
    by window (stably) and cut."""
    import numpy as np

    heads, first, inverse, counts = np.unique(end_array, return_index=True, return_inverse=True,
                                              return_counts=True)
    inverse = inverse.reshape(-1)
    big = int(np.argmax(counts))
    in_big = inverse == big
    rest = np.flatnonzero(~in_big)
    rest = rest[np.argsort(inverse[rest], kind="stable")]  # by window, each in input order
    cuts = np.cumsum(np.delete(counts, big)).tolist()
    rest_ks = list(map(ks.__getitem__, rest.tolist()))
    rest_nums = [None if x is None else x.take(rest) for x in numbers]
    span = {}
    a = 0
    for w, b in zip([w for w in range(len(heads)) if w != big], cuts, strict=True):
        span[w] = slice(a, b)
        a = b
    runs = {}
    for w in np.argsort(first, kind="stable").tolist():
        if w == big:
            runs[int(heads[w])] = (list(compress(ks, in_big.tolist())),
                                   [None if x is None else x.take(in_big) for x in numbers])
        else:
            sl = span[w]
            runs[int(heads[w])] = (rest_ks[sl], [None if x is None else x.take(sl) for x in rest_nums])
    return runs


class GridWindows:
    """Windows on a fixed grid aligned to the epoch: [start, start + SIZE) for every start that is a
    multiple of HOP. Tumbling windows are HOP = SIZE (every event in exactly one); hopping windows
    overlap (SIZE/HOP of them hold each event, windows that start before the first event included).
    An event is late for each of its windows that has already closed; with `--late drop` it still
    counts in the ones that are open."""

    def __init__(self, size: int, hop: int, plan, update: bool = False, correct: bool = False) -> None:
        if hop <= 0 or hop > size:
            raise ValueError("HOP must be positive and at most SIZE")
        self.size = size
        self.hop = hop
        self.plan = plan
        self.update = update
        self.correct = correct
        self.open: dict[int, Any] = {}  # end -> {key: state}, or its cells.Cells while columnar
        self.ends: list[int] = []  # heap of the ends in `open`
        # --late correct only: closed windows kept so a late event can revise them
        self.closed: dict[tuple[int, bytes], list] = {}  # (end, key) -> [state, revision]
        # rows only at close, and only count/sum/avg: open windows as columns (cells.py), folded with numpy
        self.columnar = not update and not correct and columnar(plan.funcs)
        # a closed window kept as columns written as its JSON lines (output.window_text), not a row
        # tuple each: set where the rows go to JSON lines (WindowRun's text_rows)
        self.text_rows = False

    def add(self, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool:
        late = False
        for end in self.ends_of(t):  # oldest window first
            late |= self._add_one(end, key, seq, vals, wm, out)
        return late

    def _add_one(self, end: int, key: bytes, seq: int, vals: tuple, wm: int, out: list) -> bool:
        plan = self.plan
        if self.columnar:  # one event at a time (the per-record reading, the Spark replay): Plan's states
            self.to_states()
        if end <= wm:
            if self.correct:
                entry = self.closed.get((end, key))
                if entry is None:
                    entry = self.closed[(end, key)] = [plan.new(), 0]
                plan.add(entry[0], vals, seq)
                entry[1] += 1
                out.append((end - self.size, end, key, plan.result(entry[0]), entry[1]))
            return True
        d = self.open.get(end)
        if d is None:
            d = self.open[end] = {}
            heapq.heappush(self.ends, end)
        st = d.get(key)
        if st is None:
            st = d[key] = plan.new()
        plan.add(st, vals, seq)
        if self.update:
            out.append((end - self.size, end, key, plan.result(st), None))
        return False

    def close(self, wm: int, out: list) -> None:
        ends = self.ends
        if not ends or ends[0] > wm:
            return
        while ends and ends[0] <= wm:
            end = heapq.heappop(ends)
            self._emit(end, self.open.pop(end), out)

    def flush(self, out: list) -> None:
        for end in sorted(self.open):
            self._emit(end, self.open[end], out)
        self.open.clear()
        self.ends.clear()

    def _emit(self, end: int, d: Any, out: list) -> None:
        """One closed window's rows, by key. Windows close in end order and start = end - size, so
        rows come out by (start, key) within a close (the order the module docstring promises)."""
        start = end - self.size
        keys = sorted(d)
        if not isinstance(d, dict):  # cells.Cells
            if self.text_rows:
                from streamctl.processing.windows.output import window_text

                out.append(window_text(start, end, keys, self.plan.names, d.result_columns(d.slots_of(keys))))
            else:
                out += zip(repeat(start), repeat(end), keys, d.results(self.plan.names, keys), repeat(None))
            return
        if not self.update:
            out += zip(repeat(start), repeat(end), keys, self.plan.results(map(d.__getitem__, keys)), repeat(None))
        if self.correct:
            closed = self.closed
            for key in keys:
                closed[(end, key)] = [d[key], 0]

    def open_windows(self) -> int:
        return sum(len(d) for d in self.open.values())

    def fold(self, batch: Batch, out: list) -> tuple[int, list[int]]:
        """Fold a batch. Two routes: with rows per event (--emit update, --late correct) the
        reference, fold_events; otherwise the batch kernel: each event's windows (the late ones
        left out), the events grouped by (window, key) and each group folded at once, into the
        open windows' cells (numpy) or Plan's states, then the windows the watermark passed close."""
        if self.update or self.correct:
            return fold_events(self, batch, out)
        ts, ks, cols, seq, maxt, lateness = batch[:6]
        ends, ks, pos, lates = (self._tumbling(ts, ks, maxt, lateness, batch.times) if self.size == self.hop
                                else self._hopping(ts, ks, maxt, lateness))
        if self.columnar:
            self._fold_cells(ends, ks, pos, cols)
        else:
            self._fold_states(_group(list(zip(ends, ks, strict=True)), pos), cols, seq)
        if ts:
            maxt = max(maxt, max(ts))
            self.close(maxt - lateness, out)
        return maxt, lates

    def _tumbling(self, ts: list[int], ks: list[bytes], maxt: int, lateness: int,
                  times: Any = None) -> tuple[Any, list, Any, list]:
        """(each kept event's window end, its key, its position, the late events' positions) with
        numpy: an event's window, the watermark before it (watermark.before_array), late or not."""
        import numpy as np

        n = len(ts)
        t = np.fromiter(ts, dtype=np.int64, count=n) if times is None else times
        size = self.size
        end_array = t - t % size + size  # numpy's % floors as Python's does: pre-1970 times too
        # before the first time (NO_WATERMARK) nothing is late: every end is far above it
        late = end_array <= before_array(t, maxt, lateness)
        if not late.any():
            return (end_array if self.columnar else end_array.tolist()), ks, range(n), []
        kept = np.flatnonzero(~late)
        pos = kept.tolist()
        end_array = end_array[kept]
        return ((end_array if self.columnar else end_array.tolist()), [ks[i] for i in pos], pos,
                np.flatnonzero(late).tolist())

    def _hopping(self, ts: list[int], ks: list[bytes], maxt: int, lateness: int) -> tuple[list, list, list, list]:
        """_tumbling for hopping windows: an event in each window holding it (a cell each), late
        when one of them had closed."""
        ends: list[int] = []
        keys: list[bytes] = []
        where: list[int] = []
        lates: list[int] = []
        for i, (t, k, wm) in enumerate(zip(ts, ks, before(ts, maxt, lateness), strict=True)):
            dropped = False
            for end in self.ends_of(t):
                if end <= wm:
                    dropped = True
                else:
                    ends.append(end)
                    keys.append(k)
                    where.append(i)
            if dropped:
                lates.append(i)
        return ends, keys, where, lates

    def _fold_states(self, groups: Iterable[tuple[tuple[int, bytes], list[int]]], cols: list[list | None],
                     seq: int) -> None:
        opened, new = self.open, self.plan.new
        folds = []
        last_end: int | None = None
        d: dict[bytes, list] = {}
        for (end, k), idx in groups:
            if end != last_end:  # cells of one window mostly follow each other
                last_end = end
                got = opened.get(end)
                if got is None:
                    got = opened[end] = {}
                    heapq.heappush(self.ends, end)
                d = got
            st = d.get(k)
            if st is None:
                st = d[k] = new()
            folds.append((st, idx))
        self.plan.fold_groups(folds, cols, seq)

    def _fold_cells(self, ends: Any, ks: list[bytes], pos: Sequence[int], cols: list[list | None]) -> None:
        """The events at `pos` (their windows' `ends`, a list or an int64 array; their groups `ks`) into
        the open windows' cells: the batch sorted by window once (stable: each window's events stay in
        input order, so its totals are the same left-to-right sums), each window's run folded at once."""
        import numpy as np

        from streamctl.processing.windows import cells

        # the events kept (and repeated, for hopping windows)
        kept = cols if isinstance(pos, range) else [None if col is None else [col[i] for i in pos] for col in cols]
        numbers = cells.number_columns(self.plan.funcs, kept)
        end_array = np.asarray(ends, dtype=np.int64)
        if numbers is None:  # an int too large for a float64 total to stay exact
            self.to_states()
            groups = _group(list(zip(end_array.tolist(), ks, strict=True)), pos)
            self._fold_states(groups, cols, 0)
            return
        n = len(end_array)
        if not n:
            return
        if end_array[0] == end_array[-1] and (end_array == end_array[0]).all():
            runs = {int(end_array[0]): (ks, numbers)}
        else:
            runs = _window_runs(end_array, ks, numbers)
        touched = []
        for end, (run_ks, run_nums) in runs.items():
            table = self.open.get(end)
            if table is None:
                table = self.open[end] = cells.Cells(self.plan.funcs)
                heapq.heappush(self.ends, end)
            table.fold(run_ks, run_nums)
            touched.append(table)
        if not all(map(cells.Cells.fits, touched)):  # (the windows not touched were checked before)
            self.to_states()

    def to_states(self) -> None:
        """Move the open windows from columns to Plan's states (exact Python numbers), for good."""
        self.columnar = False
        self.open = {end: (d if isinstance(d, dict) else d.states()) for end, d in self.open.items()}

    def ends_of(self, t: int) -> list[int]:
        """The ends of the windows holding t, oldest first: the grid formula (`_tumbling` is its
        array form). Python's % floors, so negative (pre-1970) times land in the right windows too."""
        size, hop = self.size, self.hop
        first = t - t % hop
        if hop == size:  # tumbling: the one window that starts at first
            return [first + size]
        return [s + size for s in range(first - ((size - 1) // hop) * hop, first + 1, hop) if s + size > t]

    def dump(self) -> dict:
        dump = self.plan.dump
        opened = {end: (d if isinstance(d, dict) else d.states()) for end, d in self.open.items()}
        return {
            "open": [[end, key.decode(), dump(st)] for end, d in opened.items() for key, st in d.items()],
            "closed": [[end, key.decode(), dump(e[0]), e[1]] for (end, key), e in self.closed.items()],
        }

    def load(self, data: dict) -> None:
        load = self.plan.load
        for end, key, st in data["open"]:
            d = self.open.get(end)
            if d is None:
                d = self.open[end] = {}
                heapq.heappush(self.ends, end)
            d[key.encode()] = load(st)
        for end, key, st, rev in data["closed"]:
            self.closed[(end, key.encode())] = [load(st), rev]
        if self.columnar:
            from streamctl.processing.windows import cells

            tables = {end: cells.Cells.from_states(self.plan.funcs, d) for end, d in self.open.items()}
            if all(t is not None for t in tables.values()):
                self.open = tables
            else:
                self.columnar = False
