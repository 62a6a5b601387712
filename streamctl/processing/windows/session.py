"""Session windows: a group's events at most GAP apart form one session [first, last + GAP).

The rules (this code decides on both engines: the Spark job replays each
group through it):

- An event joins every open session of its group that it is within GAP of
  (start - GAP <= t <= last + GAP); they merge, so one event can bridge two.
- A session closes when the watermark passes its end, last + GAP (strictly:
  an event exactly GAP after the last still joins it).
- An event is late when t + GAP <= watermark (no open session could take it,
  Kafka Streams' rule), or when it lies within GAP of a session of its group
  that has already closed (it would change a closed window). So sessions of
  one group never overlap within GAP: a late event is dropped whole
  (`--late drop`), even from an open session it also touches. With `a@0s,
  a@50s, a@40s` and `--session 45s`: a@50 closes [0s, 45s); a@40 is within GAP
  of it, so it is late, and [50s, 95s) stays as it was.
- `--late correct` keeps the closed sessions. A late event joins every session
  of its group it touches, closed or open, and they merge. The result is closed
  when its end is before the watermark (written at once) and open otherwise
  (written when it closes, or at once with `--emit update`): a correction that
  reaches the open sessions reopens the closed ones it merges, and the events
  after it join as usual. Its rows carry `"revision": n`, the number of late
  events in the session.
- A written row stays valid until its session's bounds change (the session
  grows, or merges with another). The next row of that session then comes
  after a delete row for each old window, `(start, end, key, None, None)`,
  written as `{"window": OLD, "key": K, "op": "delete"}`. Folding the rows by
  (window, key) -- a row replaces the one before, a delete removes it -- leaves
  the rows of `--emit final` for `--emit update`, and with `--late correct` the
  sessions of all the events: the rows of a run whose lateness let nothing be late.

Drop mode remembers, per group, only the last event time of its latest closed
session (no other closed session can be within GAP of an event that is not
late by the first rule), and forgets it when the watermark is 2 GAP past it
(from then on the first rule covers every event it could catch).

One store holds every session: the arrays of session_index.OpenIndex (a session
is a handle: its start, last event time, creation number and aggregation state;
per group its open sessions and the last event time of its latest closed
one). add() below is the rule, one event at a time, over that store; the batch
kernel (session_kernel.py) is its batch form over the same arrays, stragglers
included, tied to add() by the property tests. Where the kernel cannot take an
event, that event goes alone through add(), counted and reported.
"""

from __future__ import annotations

import bisect
from typing import Any

from streamctl.processing.aggregations import columnar
from streamctl.processing.windows import NO_WATERMARK
from streamctl.processing.windows.session_kernel import SessionKernel


class Session(SessionKernel):
    DECLINE_REASON = "an event bridged two sessions of its group, or a session closed before all its events arrived"

    def __init__(self, gap: int, plan, update: bool = False, correct: bool = False) -> None:
        if gap <= 0:
            raise ValueError("GAP must be positive")
        from streamctl.processing.windows.session_index import OpenIndex

        self.gap = gap
        self.plan = plan
        self.update = update
        self.correct = correct
        self.index = OpenIndex()  # the one store: every open session, and the closed ones that matter
        # --late correct: group id -> every closed session of the group (handles kept), by start
        self.closed: dict[int, list[int]] = {}
        self.forgot = NO_WATERMARK  # the last watermark a close saw (closed sessions below 2 GAP of it: forgotten)
        self.next_end = NO_WATERMARK  # at or below every open session's end: close() has nothing to do up to it
        self.next_sid = 0  # the next session's creation number
        # the sessions' aggregation states: Plan's lists, or with only count/sum/avg and rows only at
        # close, slots in numpy arrays (cells.SlotStates, the same interface and the same numbers)
        # (taken at the first batch: the Spark job's per-group replay adds event by event)
        self.states: Any = plan
        self.columnar = False
        self.slots_ok = not update and not correct and columnar(plan.funcs)
        self.text_rows = False  # closed sessions' rows as their JSON lines (GridWindows.text_rows)
        # batches the kernel declined (folded one event at a time instead), and their events
        self.declined = 0
        self.declined_events = 0

    def _use_slots(self) -> None:
        if self.slots_ok and not self.columnar and not self.open_windows():
            from streamctl.processing.windows.cells import SlotStates

            self.states = SlotStates(self.plan.funcs, self.plan.names)
            self.columnar = True

    def _state(self, h: int) -> Any:
        return int(self.index.slot[h]) if self.columnar else self.index.state[h]

    def _near_closed(self, g: int, t: int) -> bool:
        """Whether t (not late by t + GAP <= watermark) lies within GAP of a closed session of its group.
        Every closed session ended before the watermark, so t is after its last event: only the
        latest one's last + GAP matters (drop mode: the group's `closed` entry)."""
        index = self.index
        if self.correct:
            closed = self.closed.get(g)
            return bool(closed) and t <= index.last[closed[-1]] + self.gap  # type: ignore[index]
        return t <= index.closed[g] + self.gap

    def _add_state(self, h: int, vals: tuple, seq: int) -> None:
        if self.states.add(self._state(h), vals, seq) is False:  # beyond what slots keep exactly
            self.to_states()
            self.states.add(self.index.state[h], vals, seq)

    def add(self, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool:
        index = self.index
        index.track()
        return self._add(index.group_id(key), key, t, seq, vals, wm, out)

    def _add(self, g: int, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool:
        gap, index = self.gap, self.index
        if t + gap <= wm or self._near_closed(g, t):
            if self.correct:
                self._correct(g, key, t, seq, vals, wm, out)
            return True
        start, last = index.start, index.last
        hs = index.of_group(g)
        if len(hs) == 1:
            h = hs[0]
            if start[h] <= t <= last[h] + gap:
                # the hot path: the event extends (or falls inside) the group's only session
                self._add_state(h, vals, seq)
                if t > last[h]:
                    last[h] = t
                if self.update:
                    self._write(h, key, out)
                return False
        touched = [h for h in hs if start[h] - gap <= t <= last[h] + gap]
        if touched:
            h = touched[0]
            self._absorb(h, touched[1:])
            if t < start[h]:
                start[h] = t
            elif t > last[h]:
                last[h] = t
        else:
            h = self._new(g, t)
        self._add_state(h, vals, seq)
        if self.update:
            self._write(h, key, out)
        return False

    def _new(self, g: int, t: int, alive: bool = True) -> int:
        h = self.index.new_one(g, t, self.next_sid, alive)
        self.next_sid += 1
        if self.columnar:
            self.index.slot[h] = self.states.new()
        else:
            self.index.state[h] = self.states.new()
        self.next_end = min(self.next_end, t + self.gap)
        return h

    def _absorb(self, h: int, others: list[int]) -> None:
        """Merge sessions `others` into h (their written windows become h's to withdraw), and free them."""
        import numpy as np

        if not others:
            return
        index = self.index
        for o in others:
            self.states.merge(self._state(h), self._state(o))
            index.start[h] = min(index.start[h], index.start[o])
            index.last[h] = max(index.last[h], index.last[o])
            index.rev[h] += index.rev[o]
            if index.shown[o]:
                index.shown[h] = (index.shown[h] or []) + index.shown[o]
        index.release(np.array(others, dtype=np.int64), not self.columnar)

    def _correct(self, g: int, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> None:
        """--late correct: the late event joins every session of its group it touches, open or closed."""
        gap, index = self.gap, self.index
        start, last = index.start, index.last
        closed = self.closed.setdefault(g, [])
        # closed sessions are disjoint and sorted by start: the ones within GAP of t are a run
        hi = bisect.bisect_right(closed, t + gap, key=start.__getitem__)
        lo = hi
        while lo > 0 and last[closed[lo - 1]] + gap >= t:
            lo -= 1
        near = closed[lo:hi]
        del closed[lo:hi]
        touched = [h for h in index.of_group(g) if start[h] - gap <= t <= last[h] + gap]
        if touched:
            h, rest = touched[0], touched[1:] + near
        elif near:
            h, rest = near[0], near[1:]
        else:
            h, rest = self._new(g, t, alive=False), []
            start, last = index.start, index.last  # (a new handle may grow the arrays)
        self._absorb(h, rest)
        self._add_state(h, vals, seq)
        start[h] = min(start[h], t)
        last[h] = max(last[h], t)
        index.rev[h] += 1
        end = int(last[h]) + gap
        if end < wm:
            # closed (an open session it touched would have an end at or past the watermark)
            bisect.insort(closed, h, key=start.__getitem__)
            self._write(h, key, out)
            return
        if not touched:
            index.reopen(h)
            self.next_end = min(self.next_end, end)
        if self.update:
            self._write(h, key, out)

    def _write(self, h: int, key: bytes, out: list) -> None:
        """The session's row, after a delete row for each window written for it before under other bounds."""
        index = self.index
        window = (int(index.start[h]), int(index.last[h]) + self.gap)
        shown = index.shown[h]
        if shown:
            for old in sorted(shown):
                if old != window:
                    out.append((old[0], old[1], key, None, None))
        out.append((window[0], window[1], key, self.states.result(self._state(h)), index.rev[h] or None))
        index.shown[h] = [window]

    def close(self, wm: int, out: list) -> None:
        # Strictly after the end: an event at exactly last + GAP is "at most GAP apart"
        # and still joins the session, so the session cannot close while wm == end.
        import numpy as np

        self.forgot = max(self.forgot, wm)
        if wm <= self.next_end:
            return
        index = self.index
        top = index.top
        ends = index.last[:top] + self.gap
        alive = index.alive[:top]
        shut = alive & (ends < wm)
        rest = ends[alive & ~shut]
        self.next_end = int(rest.min()) if len(rest) else wm
        hs = np.flatnonzero(shut)
        if len(hs):
            self._shut(hs, np.zeros(len(hs), dtype=np.int64), out)
            self._bound()

    def flush(self, out: list) -> None:
        import numpy as np

        hs = np.flatnonzero(self.index.alive[:self.index.top])
        if len(hs):
            self._shut(hs, np.zeros(len(hs), dtype=np.int64), out)

    def to_states(self) -> None:
        """Move every session's state from slots to Plan's lists (exact Python numbers), for good."""
        self.slots_ok = False
        if not self.columnar:
            return
        slots, index = self.states, self.index
        for h in index.open_handles().tolist():
            index.state[h] = slots.state_at(int(index.slot[h]))
        self.states = self.plan
        self.columnar = False

    def open_windows(self) -> int:
        return int(self.index.nopen.sum())

    def dump(self) -> dict:
        index, dump = self.index, self.states.dump
        gkey = index.gkey

        def sessions(by_group: dict[int, list[int]], empty: bool) -> list:
            # by key: a batch and one event at a time leave the same groups in another order
            return [[gkey[g].decode(), [[int(index.start[h]), int(index.last[h]), dump(self._state(h)), index.rev[h],
                                         index.shown[h]] for h in hs]]
                    for g, hs in sorted(by_group.items(), key=lambda x: gkey[x[0]]) if hs or empty]
        # the closed sessions an event that is not late can still reach, by key
        return {"open": sessions(index.by_group(), False), "closed": sessions(self.closed, True),
                "closed_last": [[k.decode(), last] for k, last in sorted(self._closed_in_arrays().items())]}

    def load(self, data: dict) -> None:
        # a checkpoint holds Plan's states: read as such, then moved into slots when they fit
        from streamctl.processing.windows.session_index import OpenIndex

        columnar = self.slots_ok
        self.to_states()
        index = self.index = OpenIndex()
        index.track()
        self.closed, self.next_end = {}, NO_WATERMARK
        load = self.plan.load
        for name in ("open", "closed"):
            for k, v in data[name]:
                g = index.group_id(k.encode())
                if name == "closed":
                    self.closed.setdefault(g, [])
                for a, b, st, r, *rest in v:
                    h = self._new(g, a, alive=name == "open")
                    index.last[h], index.state[h], index.rev[h] = b, load(st), r
                    index.shown[h] = [tuple(w) for w in rest[0]] if rest and rest[0] else None
                    if name == "closed":
                        self.closed.setdefault(g, []).append(h)
        for k, last in data.get("closed_last", []):
            index.closed[index.group_id(k.encode())] = last
        if columnar:
            from streamctl.processing.windows.cells import SlotStates

            slots = SlotStates(self.plan.funcs, self.plan.names)
            hs = index.open_handles().tolist()
            moved = [(h, slots.new()) for h in hs]
            if all(slots.set_state(slot, index.state[h]) for h, slot in moved):
                for h, slot in moved:
                    index.slot[h], index.state[h] = slot, None
                self.states, self.columnar, self.slots_ok = slots, True, True
