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

A batch, stragglers included, is folded by a batch kernel (Session._fold_batch)
without a loop per event: the late stragglers found with the running maximum,
the others assigned to sessions by session_index.OpenIndex.cluster (a sort by
group and time and a few array passes), each session's events folded at once,
then the sessions the batch closes closed where the one-event path would close
them: the same rows, order and state as add() per event, which the property
tests check. The kernel declines a batch in which an event would bridge two
sessions or a session would close before all of its events arrived (those need
the one-event order); such a batch is folded one event at a time, counted
(`declined`, reported on stderr), and the next batch goes to the kernel again.

Each open session has one entry in the close heap, pushed when it is created
with the end it had then; an entry popped for a session that has grown since
is pushed again with the new end, so extending a session costs nothing and
the heap holds one entry per open session (plus merged-away ones until popped).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections import deque
from itertools import repeat
from typing import Any

from streamctl.processing.aggregations import columnar
from streamctl.processing.windows import NO_WATERMARK, Batch, fold_events

# a session: [start, last, state, late events in it, id, windows written for it and still valid (or None),
# its handle in the OpenIndex (NO_HANDLE: none)]
START, LAST, STATE, REV, SID, SHOWN, HANDLE = range(7)
NO_HANDLE = -1
# the OpenIndex keeps an id for every key it has seen; once it holds this many more than four per
# open group, it is made again from the open sessions (memory bounded by the open groups)
INDEX_SLACK = 65536


def _session_start(s: list) -> int:
    return s[START]


def _remove_session(sessions: list[list], s: list) -> None:
    """Remove `s` itself (list.remove compares by value, states included)."""
    for i, x in enumerate(sessions):
        if x is s:
            del sessions[i]
            return


class Session:
    DECLINE_REASON = "an event bridged two sessions of its group, or a session closed before all its events arrived"

    def __init__(self, gap: int, plan, update: bool = False, correct: bool = False) -> None:
        if gap <= 0:
            raise ValueError("GAP must be positive")
        self.gap = gap
        self.plan = plan
        self.update = update
        self.correct = correct
        self.open: dict[bytes, list[list]] = {}  # key -> its open sessions
        self.heap: list[tuple[int, int, bytes]] = []  # (end when pushed, session id, key)
        # --late correct: key -> every closed session of the group, by start
        self.closed: dict[bytes, list[list]] = {}
        # --late drop: key -> last event time of the group's latest closed session, and
        # (last, key) in the order they closed, to forget them once no event can be within GAP
        self.closed_last: dict[bytes, int] = {}
        self.closed_order: deque[tuple[int, bytes]] = deque()
        self._ids = itertools.count()
        # the sessions' aggregation states: Plan's lists, or with only count/sum/avg and rows only at
        # close, slots in numpy arrays (cells.SlotStates, the same interface and the same numbers)
        # (taken at the first batch: the Spark job's per-group replay adds event by event, without numpy)
        self.states: Any = plan
        self.columnar = False
        self.slots_ok = not update and not correct and columnar(plan.funcs)
        # the open sessions as arrays, for the batch kernel (made by the first batch)
        self.index: Any = None
        # batches the kernel declined (folded one event at a time instead), and their events
        self.declined = 0
        self.declined_events = 0
        self.heap_stale = False  # the batch kernel leaves the heap behind (it closes from the index)

    def _use_slots(self) -> None:
        if self.slots_ok and not self.columnar and not self.open:
            from streamctl.processing.windows.cells import SlotStates

            self.states = SlotStates(self.plan.funcs, self.plan.names)
            self.columnar = True

    def _touching(self, sessions: list[list], t: int) -> list[list]:
        gap = self.gap
        return [s for s in sessions if s[START] - gap <= t <= s[LAST] + gap]

    def _near_closed(self, key: bytes, t: int) -> bool:
        """Whether t (not late by t + GAP <= watermark) lies within GAP of a closed session of its group.
        Every closed session ended before the watermark, so t is after its last event: only the
        latest one's last + GAP matters."""
        if self.correct:
            closed = self.closed.get(key)
            return closed is not None and bool(closed) and t <= closed[-1][LAST] + self.gap
        last = self.closed_last.get(key)
        return last is not None and t <= last + self.gap

    def _add_state(self, s: list, vals: tuple, seq: int) -> None:
        if self.states.add(s[STATE], vals, seq) is False:  # beyond what slots keep exactly
            self.to_states()
            self.states.add(s[STATE], vals, seq)

    def add(self, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool:
        gap = self.gap
        if t + gap <= wm or self._near_closed(key, t):
            if self.correct:
                self._correct(key, t, seq, vals, wm, out)
            return True
        sessions = self.open.get(key)
        if sessions is not None and len(sessions) == 1:
            s = sessions[0]
            if s[START] <= t <= s[LAST] + gap:
                # the hot path: the event extends (or falls inside) the group's only session
                self._add_state(s, vals, seq)
                if t > s[LAST]:
                    s[LAST] = t
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
                _remove_session(sessions, other)  # its heap entry goes stale
        else:
            s = self._new(t)
            sessions.append(s)
            heapq.heappush(self.heap, (t + gap, s[SID], key))
        self._add_state(s, vals, seq)
        if t < s[START]:
            s[START] = t
        elif t > s[LAST]:
            s[LAST] = t
        if self.update:
            self._write(s, key, out)
        return False

    def _new(self, t: int) -> list:
        return [t, t, self.states.new(), 0, next(self._ids), None, NO_HANDLE]

    def _absorb(self, s: list, other: list) -> None:
        """Merge session `other` into `s` (its written windows become s's to withdraw)."""
        if other[HANDLE] != NO_HANDLE:
            self._last(other)
            self.index.release(other[HANDLE])  # its key is stale: the index finds its newest again
            other[HANDLE] = NO_HANDLE
        self.states.merge(s[STATE], other[STATE])
        if other[START] < s[START]:
            s[START] = other[START]
        if other[LAST] > s[LAST]:
            s[LAST] = other[LAST]
        s[REV] += other[REV]
        if other[SHOWN]:
            s[SHOWN] = (s[SHOWN] or []) + other[SHOWN]

    def _correct(self, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> None:
        """--late correct: the late event joins every session of its group it touches, open or closed."""
        gap = self.gap
        opened = self.open.get(key) or []
        closed = self.closed.setdefault(key, [])
        # closed sessions are disjoint and sorted by start: the ones within GAP of t are a run
        hi = bisect.bisect_right(closed, t + gap, key=_session_start)
        lo = hi
        while lo > 0 and closed[lo - 1][LAST] + gap >= t:
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
            _remove_session(opened, other)
        self._add_state(s, vals, seq)
        s[START] = min(s[START], t)
        s[LAST] = max(s[LAST], t)
        s[REV] += 1
        end = s[LAST] + gap
        if end < wm:
            # closed (an open session it touched would have an end at or past the watermark)
            bisect.insort(closed, s, key=_session_start)
            self._write(s, key, out)
            return
        if not touched:
            self.open.setdefault(key, []).append(s)
            heapq.heappush(self.heap, (end, s[SID], key))
        if self.update:
            self._write(s, key, out)

    def _write(self, s: list, key: bytes, out: list) -> None:
        """The session's row, after a delete row for each window written for it before under other bounds."""
        window = (s[START], s[LAST] + self.gap)
        shown = s[SHOWN]
        if shown:
            for old in sorted(shown):
                if old != window:
                    out.append((old[0], old[1], key, None, None))
        out.append((window[0], window[1], key, self.states.result(s[STATE]), s[REV] or None))
        s[SHOWN] = [window]

    def close(self, wm: int, out: list) -> None:
        # Strictly after the end: an event at exactly last + GAP is "at most GAP apart"
        # and still joins the session, so the session cannot close while wm == end.
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
                if s[SID] == sid:
                    now_end = (s[LAST] if s[HANDLE] == NO_HANDLE else self._last(s)) + gap
                    if now_end > end:
                        heapq.heappush(heap, (now_end, sid, key))  # it grew: check again then
                    else:
                        del sessions[i]
                        batch.append((s[START], now_end, key, s))
                        if s[HANDLE] != NO_HANDLE:
                            self.index.release(s[HANDLE], key)
                            s[HANDLE] = NO_HANDLE
                    break
            if not sessions:
                del self.open[key]
        self._emit(batch, out)
        if not self.correct:
            self._forget(wm)

    def _forget(self, wm: int) -> None:
        """Drop mode: forget closed sessions no event can be within GAP of any more (last + 2 GAP <= wm)."""
        order, last_of, gap2 = self.closed_order, self.closed_last, 2 * self.gap
        while order and order[0][0] + gap2 <= wm:
            last, key = order.popleft()
            if last_of.get(key) == last:
                del last_of[key]

    def flush(self, out: list) -> None:
        self._drop_index()
        batch = [(s[START], s[LAST] + self.gap, key, s) for key, sessions in self.open.items() for s in sessions]
        self.open.clear()
        self.heap.clear()
        self._emit(batch, out)

    def _emit(self, batch: list, out: list) -> None:
        batch.sort(key=lambda r: (r[0], r[2]))
        if self.correct:
            closed = self.closed
            for _start, _end, key, s in batch:
                if not self.update:
                    self._write(s, key, out)
                bisect.insort(closed.setdefault(key, []), s, key=_session_start)
            return
        if not self.update:
            states = [b[3][STATE] for b in batch]
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
            last = s[LAST]
            if last_of.get(key, NO_WATERMARK) < last:
                last_of[key] = last
                order.append((last, key))

    def fold(self, batch: Batch, out: list) -> tuple[int, list[int]]:
        """Fold a batch: the batch kernel (_fold_batch: array passes, the same states, rows and order
        as add() per event) when it can take the batch, else one event at a time (fold_events).
        Rows per event (`--emit update`, `--late correct`) always go one at a time; a batch the
        kernel declines (an event that bridges two sessions, a session that closes before all of
        its events arrived) is counted in `declined`, and the next batch is offered to it again."""
        self._use_slots()
        if not (self.update or self.correct) and batch.ts:
            done = self._fold_batch(batch, out)
            if done is not None:
                return done
            self.declined += 1
            self.declined_events += len(batch.ts)
        if self.heap_stale:
            self._make_heap()
        if self.index is not None:
            self._sync_keys(batch.ks)
        if self.columnar:
            from streamctl.processing.windows.cells import cols_too_large

            if cols_too_large(self.plan.funcs, batch.cols):
                self.to_states()
        done = fold_events(self, batch, out)
        if self.columnar and not self.states.fits():
            self.to_states()
        return done

    def _fold_batch(self, batch: Batch, out: list) -> tuple[int, list[int]] | None:
        """The batch kernel, or None (nothing changed) when it cannot take the batch.

        The watermark before each event is a running maximum (windows.watermarks, with arrays). An
        event below the largest time before it (a straggler) is late as add() finds it: t + GAP <=
        watermark, or within GAP of its group's latest closed session. The others are assigned to
        sessions by OpenIndex.cluster (which declines what would need merges or an early close),
        folded into them in input order, and then each close() the one-event path makes at an
        event that moves the watermark past a session's end is made (a session's events all
        arrive before that event: cluster checked it)."""
        import numpy as np

        from streamctl.processing.windows.session_index import Pre

        ts, ks, cols, seq, maxt, lateness = batch
        gap, n = self.gap, len(ts)
        t = np.array(ts, dtype=np.int64)
        high = np.maximum.accumulate(t)  # the largest time up to each event
        np.maximum(high, maxt, out=high)
        before = np.empty(n, dtype=np.int64)
        before[0] = maxt
        before[1:] = high[:-1]
        wm = before - lateness  # before any time (NO_WATERMARK) far below every time: nothing late
        lates: list[int] = []
        keep = None
        straggler = np.flatnonzero(t < before)
        if len(straggler):
            late = t[straggler] + gap <= wm[straggler]
            closed_last = self.closed_last
            if closed_last:
                for j, i in enumerate(straggler.tolist()):
                    last = closed_last.get(ks[i])
                    if last is not None and ts[i] <= last + gap:
                        late[j] = True
            if late.any():
                lates = straggler[late].tolist()
                keep = np.ones(n, dtype=bool)
                keep[straggler[late]] = False
        numbers = None
        if self.columnar:
            from streamctl.processing.windows.cells import number_columns

            numbers = number_columns(self.plan.funcs, cols)
            if numbers is None:  # an int too large for a float64 total to stay exact
                self.to_states()
        index = self._open_index()
        g_all = index.group_ids(ks)
        pos = np.arange(n) if keep is None else np.flatnonzero(keep)
        if not len(pos):
            return self._close_batch(high, before, lateness, out), lates
        g = g_all[pos]
        ug, at = np.unique(g, return_index=True)
        nopen, newest = index.nopen[ug], index.newest[ug]
        simple = (nopen == 1) & (newest != NO_HANDLE)
        ph = newest[simple]
        pg = ug[simple]
        sessions = index.sessions
        ps = [sessions[h][START] for h in ph.tolist()]
        pl = index.last[ph].tolist()
        gather = np.flatnonzero((nopen > 0) & ~simple)
        if len(gather):
            pg, ph = pg.tolist(), ph.tolist()
            for j in gather.tolist():
                k = ks[int(pos[at[j]])]
                for s in self.open.get(k, ()):
                    if s[HANDLE] == NO_HANDLE:
                        s[HANDLE] = index.bind(s, k, s[LAST], s[STATE] if self.columnar else None)
                    pg.append(int(ug[j]))
                    ph.append(s[HANDLE])
                    ps.append(s[START])
                    pl.append(self._last(s))
        i64 = np.int64
        pre = Pre(np.array(pg, dtype=i64), np.array(ps, dtype=i64), np.array(pl, dtype=i64),
                  np.array(ph, dtype=i64))
        runs = index.cluster(t[pos], g, pos, wm[pos], pre, gap)
        if runs is None:
            return None
        # the runs that got events: their sessions (an open one, or a new one made at its first event)
        live = np.flatnonzero(runs.has_events)
        live = live[np.argsort(runs.first[live], kind="stable")]  # new sessions are made in input order
        pre_i = runs.pre[live]
        handle_of = np.full(len(runs.has_events), NO_HANDLE, dtype=i64)
        old = pre_i >= 0
        handle_of[live[old]] = pre.handle[pre_i[old]]
        fresh = live[~old]
        new_h = index.alloc(len(fresh))
        handle_of[fresh] = new_h
        ids, opened, states = self._ids, self.open, self.states
        slots = []
        keys = index.keys
        self.heap_stale = True  # the kernel closes from the index's arrays; the heap is made again when needed
        starts, lasts = runs.start.tolist(), runs.last.tolist()
        for c, h, i in zip(fresh.tolist(), new_h.tolist(), runs.first[fresh].tolist(), strict=True):
            k = ks[int(pos[i])]
            s = [starts[c], lasts[c], states.new(), 0, next(ids), None, h]
            sessions[h] = s
            keys[h] = k
            slots.append(s[STATE])
            group = opened.get(k)
            if group is None:
                opened[k] = [s]
            else:
                group.append(s)
        # an open session that a straggler moved the start of
        moved = live[old]
        moved = moved[runs.start[moved] < pre.start[runs.pre[moved]]]
        for c in moved.tolist():
            sessions[int(handle_of[c])][START] = starts[c]
        live_h = handle_of[live]
        index.last[live_h] = runs.last[live]
        index.group[new_h] = runs.group[fresh]
        np.add.at(index.nopen, runs.group[fresh], 1)
        index.newest[runs.group[live]] = live_h
        handles = handle_of[runs.of_event]  # each kept event's session, in input order
        if numbers is not None:
            index.slot[new_h] = slots
            if keep is not None:
                numbers = [c if c is None else c.take(keep) for c in numbers]
            states.fold_at(index.slot[handles], numbers)
        else:
            order = np.argsort(handles, kind="stable")
            hs = handles[order]
            cuts = (np.flatnonzero(hs[1:] != hs[:-1]) + 1).tolist()
            where = pos[order].tolist()
            bounds = [0, *cuts, len(where)]
            heads = hs[bounds[:-1]].tolist()
            self.plan.fold_groups([(sessions[h][STATE], where[a:b]) for h, a, b in
                                   zip(heads, bounds, bounds[1:], strict=False)], cols, seq)
        maxt = self._close_batch(high, before, lateness, out)
        if self.columnar and not self.states.fits():
            self.to_states()
        if len(index.gid) > 4 * len(opened) + INDEX_SLACK:
            self._drop_index()  # keys of closed sessions: forgotten, the index made again from the open ones
        return maxt, lates

    def _close_batch(self, high: Any, before: Any, lateness: int, out: list) -> int:
        """The close() calls the one-event path makes over a batch whose largest time up to each event
        is `high` (`before`: the largest before each), made from the index's arrays: the open sessions whose end the last watermark
        passed, each closed at the first event that moves the watermark past its end, in the order
        close() writes them (by that event, then start, then key); closed_last and _forget as
        close() leaves them. Returns the largest time."""
        import numpy as np

        index, gap = self.index, self.gap
        maxt = int(high[-1])
        top = len(index.sessions)
        ends = index.last[:top] + gap
        hs = np.flatnonzero(index.alive[:top] & (ends < maxt - lateness))
        if len(hs):
            at = np.searchsorted(high, ends[hs] + lateness, side="right")  # the event that closes each
            sessions, keys = index.sessions, index.keys
            starts = np.array([sessions[h][START] for h in hs.tolist()], dtype=np.int64)
            order = np.lexsort((starts, at))
            hs, at, starts = hs[order], at[order], starts[order]
            same = (at[1:] == at[:-1]) & (starts[1:] == starts[:-1])
            if same.any():  # one close, one start, several groups: by key, as close() sorts them
                fix = sorted(range(len(hs)), key=lambda i: (int(at[i]), int(starts[i]), keys[int(hs[i])]))
                hs, at, starts = hs[fix], at[fix], starts[fix]
            if self.columnar:
                slot_idx = index.slot[hs]
                results = self.states.results_at(self.plan.names, slot_idx)
                self.states.release_at(slot_idx)
            else:
                results = [self.plan.result(sessions[h][STATE]) for h in hs.tolist()]
            hl, ks = hs.tolist(), [keys[h] for h in hs.tolist()]
            lasts = index.last[hs].tolist()
            out += zip(starts.tolist(), (ends[hs]).tolist(), ks, results, repeat(None))
            opened, last_of, closed_order = self.open, self.closed_last, self.closed_order
            forget = self._forget
            wms = (high[at] - lateness).tolist()
            befores = (before[at] - lateness).tolist()
            prev_at, prev_wm = -1, NO_WATERMARK
            for h, k, last, a, wm, wb in zip(hl, ks, lasts, at.tolist(), wms, befores, strict=True):
                if a != prev_at:  # a new close(): the watermark moves before it forget as add() would
                    if prev_at >= 0:
                        forget(prev_wm)
                    forget(wb)
                    prev_at, prev_wm = a, wm
                group = opened[k]
                if len(group) == 1:
                    del opened[k]
                else:
                    _remove_session(group, sessions[h])
                if last_of.get(k, NO_WATERMARK) < last:
                    last_of[k] = last
                    closed_order.append((last, k))
            forget(prev_wm)
            index.release_many(hs)
        self._forget(maxt - lateness)
        return maxt

    def _make_heap(self) -> None:
        """The close heap from the open sessions, for the one-event path after the kernel."""
        self.heap = [(self._last(s) + self.gap, s[SID], k) for k, v in self.open.items() for s in v]
        heapq.heapify(self.heap)
        self.heap_stale = False

    def _open_index(self) -> Any:
        """The OpenIndex, made for the open sessions when there is none, and up to date with what
        the one-event path changed since the last batch here."""
        index = self.index
        if index is None:
            from streamctl.processing.windows.session_index import OpenIndex

            index = self.index = OpenIndex()
            index.stale.update(self.open)
        if index.stale:
            columnar = self.columnar
            for k in index.stale:
                g = index.group_id(k)
                newest = index.newest
                best, best_last = NO_HANDLE, None
                for s in self.open.get(k, ()):
                    if s[HANDLE] == NO_HANDLE:
                        s[HANDLE] = index.bind(s, k, s[LAST], s[STATE] if columnar else None)
                    else:
                        index.last[s[HANDLE]] = self._last(s)
                    if best_last is None or s[LAST] > best_last:
                        best, best_last = s[HANDLE], s[LAST]
                newest[g] = best
                index.nopen[g] = len(self.open.get(k, ()))
            index.stale.clear()
        return index

    def _last(self, s: list) -> int:
        """A session's last event time: the larger of its LAST and its handle's (OpenIndex)."""
        h = s[HANDLE]
        if h != NO_HANDLE:
            t = int(self.index.last[h])
            if t > s[LAST]:
                s[LAST] = t
        return s[LAST]

    def _sync_keys(self, ks: list[bytes]) -> None:
        """Before the one-event path: the sessions of a batch's keys get their LAST from the index,
        and those keys are stale for it."""
        keys = set(ks)
        for k in keys:
            for s in self.open.get(k, ()):
                if s[HANDLE] != NO_HANDLE:
                    self._last(s)
        self.index.stale |= keys

    def _drop_index(self) -> None:
        """Every open session's LAST from the index, and no index."""
        if self.index is None:
            return
        for sessions in self.open.values():
            for s in sessions:
                if s[HANDLE] != NO_HANDLE:
                    self._last(s)
                    s[HANDLE] = NO_HANDLE
        self.index = None

    def to_states(self) -> None:
        """Move every session's state from slots to Plan's lists (exact Python numbers), for good."""
        self.slots_ok = False
        if not self.columnar:
            return
        slots = self.states
        for sessions in self.open.values():
            for s in sessions:
                s[STATE] = slots.state_at(s[STATE])
        self.states = self.plan
        self.columnar = False

    def open_windows(self) -> int:
        return sum(len(v) for v in self.open.values())

    def dump(self) -> dict:
        if self.index is not None:
            for v in self.open.values():
                for s in v:
                    self._last(s)
        dump = self.states.dump

        def sessions(d: dict) -> list:
            # by key: a batch and one event at a time leave the same groups in another dict order
            return [[k.decode(), [[s[START], s[LAST], dump(s[STATE]), s[REV], s[SHOWN]] for s in v]]
                    for k, v in sorted(d.items())]
        return {"open": sessions(self.open), "closed": sessions(self.closed),
                "closed_last": [[k.decode(), last] for k, last in self.closed_last.items()]}

    def load(self, data: dict) -> None:
        # a checkpoint holds Plan's states: read as such, then moved into slots when they fit
        columnar = self.slots_ok
        self._drop_index()
        self.to_states()
        load = self.plan.load
        for name in ("open", "closed"):
            target = getattr(self, name)
            for k, v in data[name]:
                target[k.encode()] = [[a, b, load(st), r, next(self._ids),
                                       [tuple(w) for w in rest[0]] if rest and rest[0] else None, NO_HANDLE]
                                      for a, b, st, r, *rest in v]
        self.heap = [(s[LAST] + self.gap, s[SID], k) for k, v in self.open.items() for s in v]
        heapq.heapify(self.heap)
        self.closed_last = {k.encode(): last for k, last in data.get("closed_last", [])}
        self.closed_order = deque(sorted((last, k) for k, last in self.closed_last.items()))
        if columnar:
            from streamctl.processing.windows.cells import SlotStates

            slots = SlotStates(self.plan.funcs, self.plan.names)
            moved = [(s, slots.new()) for v in self.open.values() for s in v]
            if all(slots.set_state(slot, s[STATE]) for s, slot in moved):
                for s, slot in moved:
                    s[STATE] = slot
                self.states, self.columnar, self.slots_ok = slots, True, True
