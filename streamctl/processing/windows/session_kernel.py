"""The batch kernel of session windows (session.py holds the rules and the one-event path, add).

A batch, stragglers included, is folded without a loop per event or per
session: the late stragglers found with the running maximum and each group's
latest closed session, the others assigned to sessions by
session_index.OpenIndex.cluster (a sort by group and time and a few array
passes), each session's events folded at once, then the sessions the batch
closes written and released where the one-event path would close them: the
same rows, order and state as add() per event, which the property tests
check. Where the kernel cannot take an event (one that bridges two sessions of
its group, or arrives after its session would have closed: those need the
one-event order), the batch is cut there: the kernel takes the events before
it, the event goes alone through add() (its group's sessions taken out of the
arrays as lists and put back after), and the kernel takes the rest. Events
folded alone are counted (`declined`, reported on stderr).

While the kernel runs (`arrays`), the OpenIndex holds the whole state: no
session list, no close heap, no closed-session dict. The one-event path's
form (session.py: `open`, `heap`, `closed_last`) is made from the arrays when
a caller needs it (add() or close() from outside, a batch folded one event at
a time, `to_states` with Plan states kept as lists), and the arrays from it
again at the next batch. numpy is imported where it is used: the Spark job's
per-group replay goes through add() alone.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any

from streamctl.processing.eventfields import key_positions
from streamctl.processing.windows import NO_WATERMARK, Batch, fold_events


@dataclass(slots=True, eq=False)  # eq=False: sessions compare (and list.remove finds them) by identity
class SessionWindow:
    """One session on the one-event path (the batch kernel keeps them as arrays, session_index.py)."""

    start: int  # its first event time
    last: int  # its last event time (the window is [start, last + GAP))
    state: Any  # Plan's state, or its slot in cells.SlotStates
    sid: int  # its creation number: a group's sessions are kept in creation order
    rev: int = 0  # the late events in it (--late correct)
    shown: list[tuple[int, int]] | None = None  # the windows written for it and still valid


# the OpenIndex keeps an id for every key it has seen; once it holds this many more than four per
# open group, it is made again from the open sessions and the closed ones still remembered
# (memory bounded by the groups that matter)
INDEX_SLACK = 65536
# cuts of one batch where the kernel stopped; past them the batch's rest goes one event at a time
MAX_SPLITS = 16


def _part(batch: Batch, lo: int, hi: int, maxt: int) -> Batch:
    """Events lo..hi of a batch as a batch of their own (maxt: the largest time before event lo)."""
    if lo == 0 and hi == len(batch.ts):
        return batch
    return Batch(batch.ts[lo:hi], batch.ks[lo:hi], [None if c is None else c[lo:hi] for c in batch.cols],
                 batch.seq + lo, maxt, batch.lateness, None if batch.ids is None else (batch.ids[0], batch.ids[1][lo:hi]),
                 None if batch.times is None else batch.times[lo:hi])


class SessionKernel:
    """Session's batch fold (a base of session.Session, whose state and one-event path it uses)."""

    # Session's state and one-event path (session.py)
    gap: int
    plan: Any
    update: bool
    correct: bool
    open: dict[bytes, list[SessionWindow]]
    heap: list[tuple[int, int, bytes]]
    closed_last: dict[bytes, int]
    closed_order: Any
    states: Any
    columnar: bool
    index: Any
    arrays: bool
    next_sid: int
    forgot: int
    declined: int
    declined_events: int
    text_rows: bool

    if TYPE_CHECKING:  # Session's methods, declared for the type checker only: Session defines them
        def _add(self, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool: ...

        def _use_slots(self) -> None: ...

        def _forget(self, wm: int) -> None: ...

        def to_states(self) -> None: ...

    def fold(self, batch: Batch, out: list) -> tuple[int, list[int]]:
        """Fold a batch: the batch kernel (_fold_batch: array passes, the same states, rows and order
        as add() per event) over as much of it as it can take. Where it stops at an event (one that
        bridges two sessions, or arrives after its session would have closed), the events before it
        go to the kernel again, that event goes alone through add() (_fold_one), and the kernel
        takes the rest: a batch is cut into parts, and any cut gives the rows and state of add()
        per event. Events folded alone are counted (`declined`: batches, `declined_events`:
        events) and reported; after MAX_SPLITS cuts in one batch its rest goes one event at a time
        (fold_events), counted too. Rows per event (`--emit update`, `--late correct`) are the
        reference fold itself."""
        self._use_slots()
        if self.update or self.correct or not batch.ts:
            return self._fold_events(batch, out)
        self._to_arrays()
        ts, maxt = batch.ts, batch.maxt
        n, lo, splits, alone = len(ts), 0, 0, 0
        lates: list[int] = []
        while lo < n:
            hi = n
            got = self._fold_batch(_part(batch, lo, hi, maxt), out)
            while isinstance(got, int) and got > 0 and splits < MAX_SPLITS:
                splits += 1
                hi = lo + got  # the events before the one the kernel stopped at
                got = self._fold_batch(_part(batch, lo, hi, maxt), out)
            if isinstance(got, int):
                if got < 0 or splits >= MAX_SPLITS:  # the rest one event at a time
                    maxt, rest = self._fold_events(_part(batch, lo, n, maxt), out)
                    lates += [lo + i for i in rest]
                    alone += n - lo
                    break
                hi = lo  # the part's first event: alone
            else:
                maxt, part_lates = got
                lates += [lo + i for i in part_lates]
            if hi < n:
                late, maxt = self._fold_one(batch, hi, maxt, out)
                alone += 1
                if late:
                    lates.append(hi)
            lo = hi + 1
        if alone:
            self.declined += 1
            self.declined_events += alone
        return maxt, lates

    def _fold_events(self, batch: Batch, out: list) -> tuple[int, list[int]]:
        """The reference fold (add() per event, close() at each watermark move) of a batch."""
        self._to_lists()
        # (an int beyond what a slot keeps exactly moves the states to Plan's at its add: _add_state)
        done = fold_events(self, batch, out)
        if self.columnar and not self.states.fits():
            self.to_states()
        return done

    def _fold_one(self, batch: Batch, i: int, maxt: int, out: list) -> tuple[bool, int]:
        """Event i of the batch through add() (the largest time before it: maxt): its group's open
        sessions and latest closed one taken out of the arrays as add() keeps them, and put back
        after; then the close() its watermark move makes, from the arrays as the kernel makes it:
        (whether it was late, the largest time)."""
        import numpy as np

        ts, ks, cols, seq, _maxt, lateness = batch[:6]
        t, k = ts[i], ks[i]
        vals = tuple(True if c is None else c[i] for c in cols)
        index, columnar = self.index, self.columnar
        g = index.group_id(k)
        hs = index.of_group(g)
        if len(hs):
            states = index.slot[hs].tolist() if columnar else [index.state[h] for h in hs.tolist()]
            self.open[k] = [SessionWindow(a, b, st, sid) for a, b, st, sid in
                            zip(index.start[hs].tolist(), index.last[hs].tolist(), states, index.sid[hs].tolist(),
                                strict=True)]
            index.release(hs, not columnar)
        if index.closed[g] != NO_WATERMARK:
            self.closed_last[k] = int(index.closed[g])
        late = self._add(k, t, seq + i, vals, NO_WATERMARK if maxt == NO_WATERMARK else maxt - lateness, out)
        self.heap.clear()  # add() pushed its new session: the arrays close it
        self.closed_last.pop(k, None)
        self._put_back([(k, s) for s in self.open.pop(k, [])])
        if t > maxt:
            self._close_batch(np.array([t], dtype=np.int64), lateness, out)
            maxt = t
        if self.columnar and not self.states.fits():
            self.to_states()
        return late, maxt

    def _put_back(self, sessions: list[tuple[bytes, SessionWindow]]) -> None:
        """Open sessions (key, session) into the arrays."""
        import numpy as np

        if not sessions:
            return
        index = self.index
        i64 = np.int64
        group_id = index.group_id
        hs = index.add_open(np.array([group_id(k) for k, _s in sessions], dtype=i64),
                            np.array([s.start for _k, s in sessions], dtype=i64),
                            np.array([s.last for _k, s in sessions], dtype=i64),
                            np.array([s.sid for _k, s in sessions], dtype=i64))
        if self.columnar:
            index.slot[hs] = [s.state for _k, s in sessions]
        else:
            for h, (_k, s) in zip(hs.tolist(), sessions, strict=True):
                index.state[h] = s.state

    def _fold_batch(self, batch: Batch, out: list) -> tuple[int, list[int]] | int:
        """The batch kernel, or when it cannot take the batch (nothing changed) the position of the
        first event it stopped at (-1: none in particular, the batch goes one event at a time).

        The watermark before each event is a running maximum (windows.watermarks, with arrays). An
        event below the largest time before it (a straggler) is late as add() finds it: t + GAP <=
        watermark, or within GAP of its group's latest closed session. The others are assigned to
        sessions by OpenIndex.cluster (which declines what would need merges or an early close),
        folded into them in input order, and then each close() the one-event path makes at an
        event that moves the watermark past a session's end is made (a session's events all
        arrive before that event: cluster checked it)."""
        import numpy as np

        from streamctl.processing.windows.session_index import Pre

        ts, ks, cols, seq, maxt, lateness = batch[:6]
        gap, n = self.gap, len(ts)
        t = np.array(ts, dtype=np.int64) if batch.times is None else batch.times
        high = np.maximum.accumulate(t)  # the largest time up to each event
        np.maximum(high, maxt, out=high)
        before = np.empty(n, dtype=np.int64)
        before[0] = maxt
        before[1:] = high[:-1]
        wm = before - lateness  # before any time (NO_WATERMARK) far below every time: nothing late
        index = self.index
        g_all = index.group_ids(ks, batch.ids)
        lates: list[int] = []
        keep = None
        straggler = np.flatnonzero(t < before)
        if len(straggler):
            st = t[straggler]
            # late: no open session could take it, or within GAP of its group's latest closed session
            # (a closed session forgotten on the one-event path is one no event that is not late can reach)
            late = (st + gap <= wm[straggler]) | (st <= index.closed[g_all[straggler]] + gap)
            if late.any():
                lates = straggler[late].tolist()
                keep = np.ones(n, dtype=bool)
                keep[straggler[late]] = False
        numbers = None
        if self.columnar:
            from streamctl.processing.windows.cells import number_columns

            numbers, too_big = number_columns(self.plan.funcs, cols)
            if too_big:  # an int too large for a float64 total to stay exact
                numbers = None
                self.to_states()
        pos = np.arange(n) if keep is None else np.flatnonzero(keep)
        if not len(pos):
            return self._close_batch(high, lateness, out), lates
        g = g_all[pos]
        ph = index.of_groups(g)  # the open sessions of the batch's groups
        pg = index.group[ph]
        pre = Pre(pg, index.start[ph], index.last[ph], ph)
        in_order = keep is None and not len(straggler) and not (len(ph) and index.nopen[pg].max() > 1)
        runs = index.cluster(t[pos], g, pos, wm[pos], pre, gap, in_order)
        if isinstance(runs, int):
            return runs
        # the runs that got events: their sessions (an open one, or a new one made at its first event)
        live = np.flatnonzero(runs.has_events)
        live = live[np.argsort(runs.first[live], kind="stable")]  # new sessions are made in input order
        pre_i = runs.pre[live]
        i64 = np.int64
        handle_of = np.empty(len(runs.has_events), dtype=i64)
        old = pre_i >= 0
        handle_of[live[old]] = pre.handle[pre_i[old]]
        fresh = live[~old]
        m = len(fresh)
        sid = self.next_sid
        self.next_sid += m
        new_h = index.add_open(runs.group[fresh], runs.start[fresh], runs.last[fresh],
                               np.arange(sid, sid + m, dtype=i64))
        handle_of[fresh] = new_h
        had = live[old]  # an open session: a straggler may move its start, later events its last
        index.start[handle_of[had]] = runs.start[had]
        index.last[handle_of[had]] = runs.last[had]
        handles = handle_of[runs.of_event]  # each kept event's session, in input order
        if numbers is not None:
            index.slot[new_h] = self.states.new_many(m)
            if keep is not None:
                numbers = [c if c is None else c.take(keep) for c in numbers]
            self.states.fold_at(index.slot[handles], numbers)
        else:
            state, new = index.state, self.plan.new
            for h in new_h.tolist():
                state[h] = new()
            order = np.argsort(handles, kind="stable")
            hs = handles[order]
            cuts = (np.flatnonzero(hs[1:] != hs[:-1]) + 1).tolist()
            where = pos[order].tolist()
            bounds = [0, *cuts, len(where)]
            heads = hs[bounds[:-1]].tolist()
            self.plan.fold_groups([(state[h], where[a:b]) for h, a, b in
                                   zip(heads, bounds, bounds[1:], strict=False)], cols, seq)
        maxt = self._close_batch(high, lateness, out)
        if self.columnar and not self.states.fits():
            self.to_states()
        if len(index.gid) > 4 * int(np.count_nonzero(index.nopen)) + INDEX_SLACK:
            # keys of closed sessions no event can reach any more: forgotten, the index made again
            self._to_lists()
            self._to_arrays()
        return maxt, lates

    def _close_batch(self, high: Any, lateness: int, out: list) -> int:
        """The close() calls the one-event path makes over a batch whose largest time up to each
        event is `high`, made from the arrays: the open sessions whose end the last watermark
        passed, each closed at the first event that moves the watermark past its end, in the
        order close() writes them (by that event, then start, then key). Returns the largest time."""
        import numpy as np

        index, gap = self.index, self.gap
        maxt = int(high[-1])
        top = index.top
        ends = index.last[:top] + gap
        hs = np.flatnonzero(index.alive[:top] & (ends < maxt - lateness))
        if len(hs):
            at = np.searchsorted(high, ends[hs] + lateness, side="right")  # the event that closes each
            self._write_closed(hs, at, out)
        self._forget(maxt - lateness)
        return maxt

    def _write_closed(self, hs: Any, at: Any, out: list) -> None:
        """Write and release the open sessions `hs`, closed at the events `at`: by that event, then
        start, then key (close()'s order), and remember each group's latest closed session."""
        import numpy as np

        index, gap = self.index, self.gap
        starts = index.start[hs]
        order = np.lexsort((starts, at))
        hs, at, starts = hs[order], at[order], starts[order]
        groups = index.group[hs]
        ks = list(map(index.gkey.__getitem__, groups.tolist()))
        same = (at[1:] == at[:-1]) & (starts[1:] == starts[:-1])
        if same.any():  # one close, one start, several groups: by key, as close() sorts them
            place = key_positions(ks)
            fix = sorted(range(len(hs)), key=lambda i: (int(at[i]), int(starts[i]), place[ks[i]]))
            hs, starts, groups = hs[fix], starts[fix], groups[fix]
            ks = [ks[i] for i in fix]
        lasts = index.last[hs]
        ends = (lasts + gap).tolist()
        if self.columnar:
            slot_idx = index.slot[hs]
            if self.text_rows:
                from streamctl.processing.windows.output import window_text

                out.append(window_text(starts.tolist(), ends, ks, self.plan.names,
                                       self.states.result_columns(slot_idx)))
            else:
                out += zip(starts.tolist(), ends, ks, self.states.results_at(self.plan.names, slot_idx),
                           repeat(None))
            self.states.release_at(slot_idx)
        else:
            results = [self.plan.result(index.state[h]) for h in hs.tolist()]
            out += zip(starts.tolist(), ends, ks, results, repeat(None))
        np.maximum.at(index.closed, groups, lasts)  # a group's sessions close in time order
        index.release(hs, not self.columnar)

    def _to_arrays(self) -> None:
        """The one-event path's sessions and closed sessions into a new OpenIndex (the arrays then
        hold the whole state)."""
        if self.arrays:
            return
        from streamctl.processing.windows.session_index import OpenIndex

        index = self.index = OpenIndex()
        self.heap = []
        # each group's sessions in creation order (SID): the order of its list
        self._put_back(sorted(((k, s) for k, v in self.open.items() for s in v), key=lambda x: x[1].sid))
        self.open = {}
        for k, last in self.closed_last.items():
            index.closed[index.group_id(k)] = last
        self.closed_last = {}
        self.closed_order.clear()
        self.arrays = True

    def _to_lists(self) -> None:
        """The arrays' state as the one-event path keeps it: `open` (each group's sessions by
        creation), the close heap, and `closed_last`/`closed_order` for the closed sessions an
        event that is not late can still reach."""
        if not self.arrays:
            return
        index = self.index
        hs = index.open_handles()
        opened: dict[bytes, list[SessionWindow]] = {}
        states = index.slot[hs].tolist() if self.columnar else [index.state[h] for h in hs.tolist()]
        for g, a, b, st, sid in zip(index.group[hs].tolist(), index.start[hs].tolist(), index.last[hs].tolist(),
                                    states, index.sid[hs].tolist(), strict=True):
            k = index.gkey[g]
            s = SessionWindow(a, b, st, sid)
            group = opened.get(k)
            if group is None:
                opened[k] = [s]
            else:
                group.append(s)
        self.open = opened
        self.closed_last = self._closed_in_arrays()
        self.closed_order.extend(sorted((last, k) for k, last in self.closed_last.items()))
        self.heap = [(s.last + self.gap, s.sid, k) for k, v in opened.items() for s in v]
        heapq.heapify(self.heap)
        self.index = None
        self.arrays = False

    def _closed_in_arrays(self) -> dict[bytes, int]:
        """The arrays' closed sessions still remembered (the one-event path forgets a group's once
        its last + 2 GAP is at or below the watermark), by key."""
        import numpy as np

        index = self.index
        n = len(index.gkey)
        closed = index.closed[:n]
        gs = np.flatnonzero((closed != NO_WATERMARK) & (closed + 2 * self.gap > self.forgot))
        return {index.gkey[g]: last for g, last in zip(gs.tolist(), closed[gs].tolist(), strict=True)}

    def _flush_arrays(self, out: list) -> None:
        """flush() from the arrays: every open session written, by start then key."""
        import numpy as np

        hs = np.flatnonzero(self.index.alive[:self.index.top])
        if len(hs):
            self._write_closed(hs, np.zeros(len(hs), dtype=np.int64), out)

    def _dump_arrays(self) -> list:
        """dump()'s open sessions from the arrays: by key, each group's by creation."""
        index = self.index
        hs = index.open_handles()
        dump = self.states.dump
        states = index.slot[hs].tolist() if self.columnar else [index.state[h] for h in hs.tolist()]
        by_key: dict[bytes, list] = {}
        for g, a, b, st in zip(index.group[hs].tolist(), index.start[hs].tolist(), index.last[hs].tolist(), states,
                               strict=True):
            by_key.setdefault(index.gkey[g], []).append([a, b, dump(st), 0, None])
        return [[k.decode(), v] for k, v in sorted(by_key.items())]
