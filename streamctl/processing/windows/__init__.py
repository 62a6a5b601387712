"""Window operators: tumbling, hopping, sliding and session windows over event time.

Each kind is one operator class (grid windows, tumbling and hopping, here; sliding.py;
session.py) on the one base, Windower, made by kinds.make_operator. The driver
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

`key` is the group key's JSON text (bytes: hashable for any JSON value; rows
that close together are ordered by eventfields.key_order), `t` the event time in ms, `seq`
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
(start, key in the group-key order): with the watermark's monotony that gives the spec's
"window-close order, ties by window start, then group key".
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from itertools import compress, repeat
from typing import Any, NamedTuple

from streamctl.processing.eventfields import key_order
from streamctl.processing.watermark import NO_WATERMARK, Watermark, before_array


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


def _window_runs(end_array: Any, ks: list[bytes], numbers: list) -> dict[int, tuple[list[bytes], list]]:
    """A batch's events split by window: {window end: (keys, columns)}, the windows in first-seen
    order, each one's events in input order (`numbers`: NumberColumns, numpy arrays or None, each
    cut alike). Most events of a batch fall in one window (stragglers are few): that one's keys are
    taken with one C pass (compress), the others' sorted by window (stably) and cut."""
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
    rest_nums = [None if x is None else x[rest] for x in numbers]
    span = {}
    a = 0
    for w, b in zip([w for w in range(len(heads)) if w != big], cuts, strict=True):
        span[w] = slice(a, b)
        a = b
    runs = {}
    for w in np.argsort(first, kind="stable").tolist():
        if w == big:
            runs[int(heads[w])] = (list(compress(ks, in_big.tolist())),
                                   [None if x is None else x[in_big] for x in numbers])
        else:
            sl = span[w]
            runs[int(heads[w])] = (rest_ks[sl], [None if x is None else x[sl] for x in rest_nums])
    return runs


class Windower:
    """What the operator of every window kind has: its SIZE (a session's GAP) in ms, the run's Plan,
    `update` (--emit update) and `correct` (--late correct), and the reference fold (fold_events),
    which a kind with a batch kernel overrides."""

    # a closed window's rows may come as their JSON lines (output.window_text), not a row tuple each:
    # set where the rows go to JSON lines (WindowRun's text_rows)
    text_rows = False
    # batches the batch kernel declined, and their events (session.py's kernel is the one that may)
    declined = 0
    declined_events = 0

    def __init__(self, size: int, plan: Any, update: bool = False, correct: bool = False) -> None:
        self.size = size
        self.plan = plan
        self.update = update
        self.correct = correct

    def fold(self, batch: Batch, out: list) -> tuple[int, list[int]]:
        """Fold a batch of events (the module docstring's `fold`): add() per event, close() at each
        watermark move."""
        return fold_events(self, batch, out)


class GridWindows(Windower):
    """Windows on a fixed grid aligned to the epoch: [start, start + SIZE) for every start that is a
    multiple of HOP. Tumbling windows are HOP = SIZE (every event in exactly one); hopping windows
    overlap (SIZE/HOP of them hold each event, windows that start before the first event included).
    An event is late for each of its windows that has already closed; with `--late drop` it still
    counts in the ones that are open."""

    def __init__(self, size: int, hop: int, plan, update: bool = False, correct: bool = False) -> None:
        if hop <= 0 or hop > size:
            raise ValueError("HOP must be positive and at most SIZE")
        super().__init__(size, plan, update, correct)
        self.hop = hop
        self.open: dict[int, Any] = {}  # end -> {key: state}, or its cells.Cells while columnar
        self.ends: list[int] = []  # heap of the ends in `open`
        # --late correct only: closed windows kept so a late event can revise them
        self.closed: dict[tuple[int, bytes], list] = {}  # (end, key) -> [state, revision]
        # rows only at close: open windows as columns (cells.py), a batch folded a window at a time;
        # rows per event come from Plan's states, folded one event at a time (fold_events)
        self.columnar = not update and not correct

    def add(self, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool:
        late = False
        for end in self.ends_of(t):  # oldest window first
            late |= self._add_one(end, key, seq, vals, wm, out)
        return late

    def _add_one(self, end: int, key: bytes, seq: int, vals: tuple, wm: int, out: list) -> bool:
        plan = self.plan
        if self.columnar:  # the per-event interface (the Spark job's per-group replay): Plan's states
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
        keys = key_order(d)
        if not isinstance(d, dict):  # cells.Cells
            d.write(out, start, end, keys, d.slots_of(keys), self.text_rows)
            return
        if not self.update:
            out += zip(repeat(start), repeat(end), keys, map(self.plan.result, map(d.__getitem__, keys)), repeat(None))
        if self.correct:
            closed = self.closed
            for key in keys:
                closed[(end, key)] = [d[key], 0]

    def open_windows(self) -> int:
        return sum(len(d) for d in self.open.values())

    def fold(self, batch: Batch, out: list) -> tuple[int, list[int]]:
        """Fold a batch. Two routes: the reference, fold_events, where rows come per event (--emit
        update, --late correct); otherwise the batch kernel: each event's windows (the late ones
        left out) with numpy, the batch cut by window and each window's run folded into its cells
        at once, then the windows the watermark passed close."""
        if not self.columnar:
            return super().fold(batch, out)
        import numpy as np

        from streamctl.processing.windows import cells

        ts, ks, cols, seq, maxt, lateness = batch[:6]
        n = len(ts)
        if not n:
            return maxt, []
        t = np.fromiter(ts, dtype=np.int64, count=n) if batch.times is None else batch.times
        # the grid formula (ends_of) for a whole batch: each event's candidate windows, oldest first
        k = (self.size - 1) // self.hop + 1
        first = t - t % self.hop  # numpy's % floors as Python's does: pre-1970 times too
        end_array = first[:, None] + (self.size - self.hop * np.arange(k - 1, -1, -1, dtype=np.int64))
        holds = end_array > t[:, None] if k > 1 else None  # the windows that hold t
        # before the first time (NO_WATERMARK) nothing is late: every end is far above it
        closed = end_array <= before_array(t, maxt, lateness)[:, None]
        late = closed if holds is None else closed & holds
        keep = ~late if holds is None else ~closed & holds
        lates = np.flatnonzero(late.any(axis=1)).tolist()
        if not lates and holds is None:  # tumbling, nothing late: every event as it is
            ends, pos, kept = end_array.reshape(-1), np.arange(n), cols
        else:
            pos = np.nonzero(keep)[0]  # each kept (event, window), events in input order
            ends = end_array[keep]
            where = pos.tolist()
            ks = list(map(ks.__getitem__, where))
            kept = [None if col is None else list(map(col.__getitem__, where)) for col in cols]
        numbers, too_big = cells.number_columns(self.plan.aggs, kept)
        if len(ends):
            self._fold_cells(ends, ks, numbers, too_big, batch, pos)
        maxt = max(maxt, int(t.max()))
        self.close(maxt - lateness, out)
        return maxt, lates

    def _fold_cells(self, end_array: Any, ks: list[bytes], numbers: list, too_big: set[int], batch: Batch,
                    pos: Any) -> None:
        """Events (their windows' ends, an int64 array; their groups `ks`; their inputs in arrays,
        `numbers`, and their positions `pos` in the batch, for the aggregations kept as Python
        states and those in `too_big`) into the open windows' cells: the batch cut by window
        (stably: each window's events stay in input order, so its totals are the same left-to-right
        sums), each window's run folded at once."""
        from streamctl.processing.windows import cells

        cols = [*numbers, pos]  # the positions cut by window with the rest
        if end_array[0] == end_array[-1] and (end_array == end_array[0]).all():
            runs = {int(end_array[0]): (ks, cols)}
        else:
            runs = _window_runs(end_array, ks, cols)
        for end, (run_ks, run_cols) in runs.items():
            table = self.open.get(end)
            if table is None:
                table = self.open[end] = cells.Cells(self.plan)
                heapq.heappush(self.ends, end)
            for i in too_big:
                table.to_python(i)
            table.fold(table.slots(run_ks), run_cols[:-1], batch.cols, run_cols[-1], batch.seq)
            table.keep_exact()

    def to_states(self) -> None:
        """Move the open windows from columns to Plan's states, where events come one at a time."""
        self.columnar = False
        self.open = {end: (d if isinstance(d, dict) else d.states()) for end, d in self.open.items()}

    def ends_of(self, t: int) -> list[int]:
        """The ends of the windows holding t, oldest first: the grid formula (fold has its array
        form). Python's % floors, so negative (pre-1970) times land in the right windows too."""
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

            self.open = {end: cells.Cells.from_states(self.plan, d) for end, d in self.open.items()}
