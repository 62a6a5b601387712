"""Sliding windows: one row per event, aggregating its group's events with time in [t - SIZE, t].

Both ends are inclusive (Spark's `rangeBetween(-SIZE, 0)`), so the row for an
event at t can still change while the watermark is at t: it closes when the
watermark passes t, and an event is late when t < watermark. State per group
is the events inside the last SIZE before the watermark (plus the ones not yet
closed); older ones are evicted as the watermark moves, except with
`--late correct`, which must keep history to revise old rows.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort

from streamctl.processing.eventfields import key_positions
from streamctl.processing.windows import Windower


def _time(ev: tuple) -> int:
    return ev[0]


class Sliding(Windower):
    """A row per event (module docstring), folded one event at a time (Windower.fold: close() sweeps
    on every watermark move)."""

    def __init__(self, size: int, plan, update: bool = False, correct: bool = False) -> None:
        super().__init__(size, plan, update, correct)
        self.events: dict[bytes, list[tuple]] = {}  # key -> [(t, seq, vals)] sorted by (t, seq)
        self.pending: list[tuple[int, bytes, int]] = []  # heap of rows not yet closed: (t, key, seq)
        self.revisions: dict[tuple[bytes, int], int] = {}  # --late correct: (key, t) -> last revision
        self._swept: int | None = None

    def _result(self, evs: list, t: int) -> dict:
        lo = bisect_left(evs, t - self.size, key=_time)
        hi = bisect_right(evs, t, key=_time)
        return self.plan.result_of_events(evs[lo:hi])

    def add(self, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool:
        evs = self.events.get(key)
        if evs is None:
            evs = self.events[key] = []
        ev = (t, seq, vals)
        if evs and ev < evs[-1]:
            insort(evs, ev)
        else:
            evs.append(ev)
        size = self.size
        late = t < wm
        if late and not self.correct and t < wm - size:
            evs.remove(ev)  # no open row can hold it
            return True
        if not late:
            heapq.heappush(self.pending, (t, key, seq))
        if self.update or (late and self.correct):
            # every row whose window [t' - SIZE, t'] holds t changed (this event's own included): a closed
            # one is revised with --late correct; an open one (a late event still counts in those) is
            # written again with --emit update
            done = set()
            for t2, _s, _v in evs[bisect_left(evs, t, key=_time):bisect_right(evs, t + size, key=_time)]:
                if t2 in done:
                    continue
                done.add(t2)
                if t2 < wm:
                    if self.correct:
                        rev = self.revisions.get((key, t2), 0) + 1
                        self.revisions[(key, t2)] = rev
                        out.append((t2 - size, t2, key, self._result(evs, t2), rev))
                elif self.update:
                    out.append((t2 - size, t2, key, self._result(evs, t2), None))
        return late

    def close(self, wm: int, out: list) -> None:
        pending = self.pending
        if not pending or pending[0][0] >= wm:
            self._sweep(wm)
            return
        batch = []
        while pending and pending[0][0] < wm:
            t, key, _seq = heapq.heappop(pending)
            batch.append((t - self.size, t, key))
        self._emit(batch, out)
        self._sweep(wm)

    def flush(self, out: list) -> None:
        batch = [(t - self.size, t, key) for t, key, _seq in sorted(self.pending)]
        self.pending.clear()
        self._emit(batch, out)
        if not self.correct:
            self.events.clear()

    def _emit(self, batch: list, out: list) -> None:
        place = key_positions(r[2] for r in batch)
        batch.sort(key=lambda r: (r[0], place[r[2]]))
        cache: dict = {}
        for start, t, key in batch:
            # events of one group at the same time share a row: compute it once
            res = cache.get((key, t))
            if res is None:
                res = cache[(key, t)] = self._result(self.events[key], t)
            if not self.update:
                out.append((start, t, key, res, None))

    def _sweep(self, wm: int) -> None:
        """Drop events no open or future row can hold (time < wm - SIZE); at most once per SIZE of watermark."""
        if self.correct or (self._swept is not None and wm - self._swept < self.size):
            return
        self._swept = wm
        horizon = wm - self.size
        for key in list(self.events):
            evs = self.events[key]
            i = bisect_left(evs, horizon, key=_time)
            if i:
                del evs[:i]
            if not evs:
                del self.events[key]

    def open_windows(self) -> int:
        return len(self.pending)

    def dump(self) -> dict:
        return {
            "events": [[k.decode(), [[t, s, list(v)] for t, s, v in evs]] for k, evs in self.events.items()],
            "pending": [[t, k.decode(), s] for t, k, s in self.pending],
            "revisions": [[k.decode(), t, r] for (k, t), r in self.revisions.items()],
            "swept": self._swept,
        }

    def load(self, data: dict) -> None:
        self.events = {k.encode(): [(t, s, tuple(v)) for t, s, v in evs] for k, evs in data["events"]}
        self.pending = [(t, k.encode(), s) for t, k, s in data["pending"]]
        heapq.heapify(self.pending)
        self.revisions = {(k.encode(), t): r for k, t, r in data["revisions"]}
        self._swept = data["swept"]
