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

A batch, stragglers included, is folded by the batch kernel (session_kernel.py:
array passes, the same rows, order and state as add() per event); where it
cannot take an event, that event goes alone through add(), counted and reported.

Each open session has one entry in the close heap, pushed when it is created
with the end it had then; an entry popped for a session that has grown since
is pushed again with the new end, so extending a session costs nothing and
the heap holds one entry per open session (plus merged-away ones until popped).
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from typing import Any

from streamctl.processing.aggregations import columnar
from streamctl.processing.eventfields import key_positions
from streamctl.processing.windows import NO_WATERMARK
from streamctl.processing.windows.session_kernel import SessionKernel, SessionWindow

# with states beyond what slots keep, how many batches go by between two tries to move them back
RETRY_SLOTS = 64


def _session_start(s: SessionWindow) -> int:
    return s.start


class Session(SessionKernel):
    DECLINE_REASON = "an event bridged two sessions of its group, or a session closed before all its events arrived"

    def __init__(self, gap: int, plan, update: bool = False, correct: bool = False) -> None:
        if gap <= 0:
            raise ValueError("GAP must be positive")
        self.gap = gap
        self.plan = plan
        self.update = update
        self.correct = correct
        self.open: dict[bytes, list[SessionWindow]] = {}  # key -> its open sessions
        self.heap: list[tuple[int, int, bytes]] = []  # (end when pushed, session id, key)
        # --late correct: key -> every closed session of the group, by start
        self.closed: dict[bytes, list[SessionWindow]] = {}
        # --late drop: key -> last event time of the group's latest closed session, and
        # (last, key) in the order they closed, to forget them once no event can be within GAP
        self.closed_last: dict[bytes, int] = {}
        self.closed_order: deque[tuple[int, bytes]] = deque()
        self.forgot = NO_WATERMARK  # the watermark _forget last saw
        self.next_sid = 0  # the next session's SID: sessions are numbered as they are made
        # the sessions' aggregation states: Plan's lists, or with only count/sum/avg and rows only at
        # close, slots in numpy arrays (cells.SlotStates, the same interface and the same numbers)
        # (taken at the first batch: the Spark job's per-group replay adds event by event, without numpy)
        self.states: Any = plan
        self.columnar = False
        self.slots_ok = not update and not correct and columnar(plan.funcs)
        self.text_rows = False  # closed sessions' rows as their JSON lines (GridWindows.text_rows)
        # the batch kernel's state (session_kernel.py): while `arrays`, the OpenIndex holds every open
        # and closed session, and `open`, `heap`, `closed_last` and `closed_order` are empty
        self.index: Any = None
        self.arrays = False
        # batches the kernel declined (folded one event at a time instead), and their events
        self.declined = 0
        self.declined_events = 0
        self.exact_batches = 0  # batches folded with Plan's states since slots were last tried

    def _use_slots(self) -> None:
        """Keep the states in slots where they can be: from the first batch, and again after a move
        to exact states (to_states) once every open session's state fits a slot (tried when nothing
        is open, and every RETRY_SLOTS batches)."""
        if not self.slots_ok or self.columnar:
            return
        if self.open_windows() and self.exact_batches < RETRY_SLOTS:
            self.exact_batches += 1
            return
        self.exact_batches = 0
        self._to_lists()
        self._into_slots()

    def _into_slots(self) -> None:
        """The open sessions' Plan states (the one-event path's lists) into numpy slots, where all fit."""
        from streamctl.processing.windows.cells import SlotStates

        slots = SlotStates(self.plan.funcs, self.plan.names)
        moved = [(s, slots.new()) for v in self.open.values() for s in v]
        if all(slots.set_state(slot, s.state) for s, slot in moved):
            for s, slot in moved:
                s.state = slot
            self.states, self.columnar = slots, True

    def _touching(self, sessions: list[SessionWindow], t: int) -> list[SessionWindow]:
        gap = self.gap
        return [s for s in sessions if s.start - gap <= t <= s.last + gap]

    def _near_closed(self, key: bytes, t: int) -> bool:
        """Whether t (not late by t + GAP <= watermark) lies within GAP of a closed session of its group.
        Every closed session ended before the watermark, so t is after its last event: only the
        latest one's last + GAP matters."""
        if self.correct:
            closed = self.closed.get(key)
            return closed is not None and bool(closed) and t <= closed[-1].last + self.gap
        last = self.closed_last.get(key)
        return last is not None and t <= last + self.gap

    def _add_state(self, s: SessionWindow, vals: tuple, seq: int) -> None:
        if self.states.add(s.state, vals, seq) is False:  # beyond what slots keep exactly
            self.to_states()
            self.states.add(s.state, vals, seq)

    def add(self, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool:
        if self.arrays:
            self._to_lists()
        return self._add(key, t, seq, vals, wm, out)

    def _add(self, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool:
        gap = self.gap
        if t + gap <= wm or self._near_closed(key, t):
            if self.correct:
                self._correct(key, t, seq, vals, wm, out)
            return True
        sessions = self.open.get(key)
        if sessions is not None and len(sessions) == 1:
            s = sessions[0]
            if s.start <= t <= s.last + gap:
                # the hot path: the event extends (or falls inside) the group's only session
                self._add_state(s, vals, seq)
                if t > s.last:
                    s.last = t
                if self.update:
                    self._write(s, key, out)
                return False
        if sessions is None:
            sessions = self.open[key] = []
        touched = self._touching(sessions, t)
        if touched:
            s = touched[0]
            for other in touched[1:]:
                self._absorb(s, other)
                sessions.remove(other)  # its heap entry goes stale
        else:
            s = self._new(t)
            sessions.append(s)
            heapq.heappush(self.heap, (t + gap, s.sid, key))
        self._add_state(s, vals, seq)
        if t < s.start:
            s.start = t
        elif t > s.last:
            s.last = t
        if self.update:
            self._write(s, key, out)
        return False

    def _new(self, t: int) -> SessionWindow:
        return SessionWindow(t, t, self.states.new(), self._sid())

    def _sid(self) -> int:
        sid = self.next_sid
        self.next_sid += 1
        return sid

    def _absorb(self, s: SessionWindow, other: SessionWindow) -> None:
        """Merge session `other` into `s` (its written windows become s's to withdraw)."""
        self.states.merge(s.state, other.state)
        if other.start < s.start:
            s.start = other.start
        if other.last > s.last:
            s.last = other.last
        s.rev += other.rev
        if other.shown:
            s.shown = (s.shown or []) + other.shown

    def _correct(self, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> None:
        """--late correct: the late event joins every session of its group it touches, open or closed."""
        gap = self.gap
        opened = self.open.get(key) or []
        closed = self.closed.setdefault(key, [])
        # closed sessions are disjoint and sorted by start: the ones within GAP of t are a run
        hi = bisect.bisect_right(closed, t + gap, key=_session_start)
        lo = hi
        while lo > 0 and closed[lo - 1].last + gap >= t:
            lo -= 1
        near = closed[lo:hi]
        del closed[lo:hi]
        touched = self._touching(opened, t)
        if touched:
            s, rest = touched[0], touched[1:] + near
        elif near:
            s, rest = near[0], near[1:]
        else:
            s, rest = self._new(t), []
        for other in rest:
            self._absorb(s, other)
        for other in touched[1:]:  # (the closed ones in `near` are out of `closed` already)
            opened.remove(other)
        self._add_state(s, vals, seq)
        s.start = min(s.start, t)
        s.last = max(s.last, t)
        s.rev += 1
        end = s.last + gap
        if end < wm:
            # closed (an open session it touched would have an end at or past the watermark)
            bisect.insort(closed, s, key=_session_start)
            self._write(s, key, out)
            return
        if not touched:
            self.open.setdefault(key, []).append(s)
            heapq.heappush(self.heap, (end, s.sid, key))
        if self.update:
            self._write(s, key, out)

    def _write(self, s: SessionWindow, key: bytes, out: list) -> None:
        """The session's row, after a delete row for each window written for it before under other bounds."""
        window = (s.start, s.last + self.gap)
        shown = s.shown
        if shown:
            for old in sorted(shown):
                if old != window:
                    out.append((old[0], old[1], key, None, None))
        out.append((window[0], window[1], key, self.states.result(s.state), s.rev or None))
        s.shown = [window]

    def close(self, wm: int, out: list) -> None:
        # Strictly after the end: an event at exactly last + GAP is "at most GAP apart"
        # and still joins the session, so the session cannot close while wm == end.
        if self.arrays:
            self._to_lists()
        heap = self.heap
        if not heap or heap[0][0] >= wm:
            if not self.correct:
                self._forget(wm)  # at every watermark: the state after a batch is the same however it was cut
            return
        batch = []
        gap = self.gap
        while heap and heap[0][0] < wm:
            end, sid, key = heapq.heappop(heap)
            sessions = self.open.get(key)
            if not sessions:
                continue
            for i, s in enumerate(sessions):
                if s.sid == sid:
                    now_end = s.last + gap
                    if now_end > end:
                        heapq.heappush(heap, (now_end, sid, key))  # it grew: check again then
                    else:
                        del sessions[i]
                        batch.append((s.start, now_end, key, s))
                    break
            if not sessions:
                del self.open[key]
        self._emit(batch, out)
        if not self.correct:
            self._forget(wm)

    def _forget(self, wm: int) -> None:
        """Drop mode: forget closed sessions no event can be within GAP of any more (last + 2 GAP <= wm)."""
        if wm > self.forgot:
            self.forgot = wm
        order, last_of, gap2 = self.closed_order, self.closed_last, 2 * self.gap
        while order and order[0][0] + gap2 <= wm:
            last, key = order.popleft()
            if last_of.get(key) == last:
                del last_of[key]

    def flush(self, out: list) -> None:
        if self.arrays:
            self._flush_arrays(out)
            return
        batch = [(s.start, s.last + self.gap, key, s) for key, sessions in self.open.items() for s in sessions]
        self.open.clear()
        self.heap.clear()
        self._emit(batch, out)

    def _emit(self, batch: list, out: list) -> None:
        place = key_positions(r[2] for r in batch)
        batch.sort(key=lambda r: (r[0], place[r[2]]))
        if self.correct:
            closed = self.closed
            for _start, _end, key, s in batch:
                if not self.update:
                    self._write(s, key, out)
                bisect.insort(closed.setdefault(key, []), s, key=_session_start)
            return
        if not self.update:
            states = [b[3].state for b in batch]
            if self.columnar:
                import numpy as np

                results = self.states.results_at(self.plan.names, np.array(states, dtype=np.intp))
                for st in states:
                    self.states.release(st)
            else:
                results = list(map(self.plan.result, states))
            out += [(start, end, key, res, None) for (start, end, key, _s), res in zip(batch, results, strict=True)]
        last_of, order = self.closed_last, self.closed_order
        for _start, _end, key, s in batch:
            last = s.last
            if last_of.get(key, NO_WATERMARK) < last:
                last_of[key] = last
                order.append((last, key))

    def to_states(self) -> None:
        """Move every session's state from slots to Plan's lists (exact Python numbers); _use_slots
        moves them back once they fit."""
        if not self.columnar:
            return
        slots = self.states
        for sessions in self.open.values():  # (while arrays: the sessions _fold_one took out)
            for s in sessions:
                s.state = slots.state_at(s.state)
        if self.arrays:
            index = self.index
            for h in index.open_handles().tolist():
                index.state[h] = slots.state_at(int(index.slot[h]))
        self.states = self.plan
        self.columnar = False

    def open_windows(self) -> int:
        n = sum(len(v) for v in self.open.values())
        return n + int(self.index.nopen.sum()) if self.arrays else n

    def dump(self) -> dict:
        dump = self.states.dump

        def sessions(d: dict) -> list:
            # by key: a batch and one event at a time leave the same groups in another dict order
            return [[k.decode(), [[s.start, s.last, dump(s.state), s.rev, s.shown] for s in v]]
                    for k, v in sorted(d.items())]
        # the closed sessions an event that is not late can still reach (the ones a watermark move
        # left for _forget's next turn are not: the batch kernel keeps them apart), by key
        if self.arrays:
            opened = self._dump_arrays()
            closed_last = self._closed_in_arrays()
        else:
            opened = sessions(self.open)
            gap2, forgot = 2 * self.gap, self.forgot
            closed_last = {k: last for k, last in self.closed_last.items() if last + gap2 > forgot}
        return {"open": opened, "closed": sessions(self.closed),
                "closed_last": [[k.decode(), last] for k, last in sorted(closed_last.items())]}

    def load(self, data: dict) -> None:
        # a checkpoint holds Plan's states: read as such, then moved into slots when they fit
        columnar = self.slots_ok
        self.arrays, self.index = False, None
        self.open, self.closed_last = {}, {}
        self.to_states()
        load = self.plan.load
        for name in ("open", "closed"):
            target = getattr(self, name)
            for k, v in data[name]:
                target[k.encode()] = [SessionWindow(a, b, load(st), self._sid(), r,
                                                    [tuple(w) for w in rest[0]] if rest and rest[0] else None)
                                      for a, b, st, r, *rest in v]
        self.heap = [(s.last + self.gap, s.sid, k) for k, v in self.open.items() for s in v]
        heapq.heapify(self.heap)
        self.closed_last = {k.encode(): last for k, last in data.get("closed_last", [])}
        self.closed_order = deque(sorted((last, k) for k, last in self.closed_last.items()))
        if columnar:
            self._into_slots()
