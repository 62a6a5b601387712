"""The batch kernel of session windows (session.py holds the rules and the one-event path, add).

A batch, stragglers included, is folded without a loop per event: the late
stragglers found with the running maximum, the others assigned to sessions by
session_index.OpenIndex.cluster (a sort by group and time and a few array
passes), each session's events folded at once, then the sessions the batch
closes closed where the one-event path would close them: the same rows, order
and state as add() per event, which the property tests check. Where the
kernel cannot take an event (one that bridges two sessions of its group, or
arrives after its session would have closed: those need the one-event order),
the batch is cut there: the kernel takes the events before it, the event goes
alone through add(), and the kernel takes the rest. Events folded alone are
counted (`declined`, reported on stderr).

The open sessions live in Python lists (the layout below: what add() reads)
and, for the kernel, in the OpenIndex's arrays; a session's last event time
is the larger of the two (`_last`). numpy is imported where it is used: the
Spark job's per-group replay goes through add() alone.
"""

from __future__ import annotations

import heapq
from itertools import repeat
from typing import TYPE_CHECKING, Any

from streamctl.processing.windows import NO_WATERMARK, Batch, fold_events

# a session: [start, last, state, late events in it, id, windows written for it and still valid (or None),
# its handle in the OpenIndex (NO_HANDLE: none)]
START, LAST, STATE, REV, SID, SHOWN, HANDLE = range(7)
NO_HANDLE = -1
# the OpenIndex keeps an id for every key it has seen; once it holds this many more than four per
# open group, it is made again from the open sessions (memory bounded by the open groups)
INDEX_SLACK = 65536
# cuts of one batch where the kernel stopped; past them the batch's rest goes one event at a time
MAX_SPLITS = 16


def _remove_session(sessions: list[list], s: list) -> None:
    """Remove `s` itself (list.remove compares by value, states included)."""
    for i, x in enumerate(sessions):
        if x is s:
            del sessions[i]
            return


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
    open: dict[bytes, list[list]]
    heap: list[tuple[int, int, bytes]]
    closed_last: dict[bytes, int]
    closed_order: Any
    _ids: Any
    states: Any
    columnar: bool
    index: Any
    declined: int
    declined_events: int
    heap_stale: bool
    text_rows: bool

    if TYPE_CHECKING:  # Session's methods, declared for the type checker only: Session defines them
        def add(self, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool: ...

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

    def _fold_one(self, batch: Batch, i: int, maxt: int, out: list) -> tuple[bool, int]:
        """Event i of the batch through add() (the largest time before it: maxt), then the close()
        its watermark move makes, made from the index's arrays as the kernel makes it (no heap):
        (whether it was late, the largest time)."""
        import numpy as np

        ts, ks, cols, seq, _maxt, lateness = batch[:6]
        t, k = ts[i], ks[i]
        vals = tuple(True if c is None else c[i] for c in cols)
        self._open_index()
        self._sync_keys([k])
        late = self.add(k, t, seq + i, vals, NO_WATERMARK if maxt == NO_WATERMARK else maxt - lateness, out)
        # closes here are made from the index (add() pushed onto the heap): the heap is made again when needed
        self.heap_stale = True
        self.heap.clear()
        self._open_index()  # the sessions add() made or merged, in the index
        if t > maxt:
            self._close_batch(np.array([t], dtype=np.int64), np.array([maxt], dtype=np.int64), lateness, out)
            maxt = t
        if self.columnar and not self.states.fits():
            self.to_states()
        return late, maxt

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
        g_all = index.group_ids(ks, batch.ids)
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
        ps = index.start[ph].tolist()
        pl = index.last[ph].tolist()
        gather = np.flatnonzero((nopen > 0) & ~simple)
        if len(gather):
            pg, ph = pg.tolist(), ph.tolist()
            for j in gather.tolist():
                k = ks[int(pos[at[j]])]
                for s in self.open.get(k, ()):
                    if s[HANDLE] == NO_HANDLE:
                        s[HANDLE] = index.bind(s, k, s[START], s[LAST], s[STATE] if self.columnar else None)
                    pg.append(int(ug[j]))
                    ph.append(s[HANDLE])
                    ps.append(s[START])
                    pl.append(self._last(s))
        i64 = np.int64
        pre = Pre(np.array(pg, dtype=i64), np.array(ps, dtype=i64), np.array(pl, dtype=i64),
                  np.array(ph, dtype=i64))
        in_order = keep is None and not len(straggler) and not len(gather)
        runs = index.cluster(t[pos], g, pos, wm[pos], pre, gap, in_order)
        if isinstance(runs, int):
            return runs
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
        keys = index.keys
        if not self.heap_stale:  # the kernel closes from the index's arrays; the heap is made again when needed
            self.heap_stale = True
            self.heap.clear()
        m = len(fresh)
        slots = states.new_many(m) if self.columnar else [states.new() for _ in range(m)]
        fresh_keys = list(map(ks.__getitem__, pos[runs.first[fresh]].tolist()))
        for h, k, a, b, st in zip(new_h.tolist(), fresh_keys, runs.start[fresh].tolist(), runs.last[fresh].tolist(),
                                  slots, strict=True):
            s = [a, b, st, 0, next(ids), None, h]
            sessions[h] = s
            keys[h] = k
            group = opened.get(k)
            if group is None:
                opened[k] = [s]
            else:
                group.append(s)
        # an open session that a straggler moved the start of
        moved = live[old]
        moved = moved[runs.start[moved] < pre.start[runs.pre[moved]]]
        for h, a in zip(handle_of[moved].tolist(), runs.start[moved].tolist(), strict=True):
            sessions[h][START] = a
        index.start[handle_of[moved]] = runs.start[moved]
        index.start[new_h] = runs.start[fresh]
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
            starts = index.start[hs]
            order = np.lexsort((starts, at))
            hs, at, starts = hs[order], at[order], starts[order]
            same = (at[1:] == at[:-1]) & (starts[1:] == starts[:-1])
            if same.any():  # one close, one start, several groups: by key, as close() sorts them
                fix = sorted(range(len(hs)), key=lambda i: (int(at[i]), int(starts[i]), keys[int(hs[i])]))
                hs, at, starts = hs[fix], at[fix], starts[fix]
            hl = hs.tolist()
            ks = list(map(keys.__getitem__, hl))
            if self.columnar:
                slot_idx = index.slot[hs]
                if self.text_rows:
                    from streamctl.processing.windows.output import window_text

                    out.append(window_text(starts.tolist(), ends[hs].tolist(), ks, self.plan.names,
                                           self.states.result_columns(slot_idx)))
                else:
                    out += zip(starts.tolist(), ends[hs].tolist(), ks,
                               self.states.results_at(self.plan.names, slot_idx), repeat(None))
                self.states.release_at(slot_idx)
            else:
                results = [self.plan.result(sessions[h][STATE]) for h in hl]
                out += zip(starts.tolist(), ends[hs].tolist(), ks, results, repeat(None))
            lasts = index.last[hs].tolist()
            opened, last_of, closed_order = self.open, self.closed_last, self.closed_order
            forget, gap2 = self._forget, 2 * gap
            befores = (before[at] - lateness).tolist()
            prev_at = -1
            for h, k, last, a, wb in zip(hl, ks, lasts, at.tolist(), befores, strict=True):
                if a != prev_at:
                    # a new close(): the watermark moved up to it, forgetting as each close() did (the
                    # one after the previous close's is the larger: only it matters, forget being monotone)
                    prev_at = a
                    if closed_order and closed_order[0][0] + gap2 <= wb:
                        forget(wb)
                group = opened[k]
                if len(group) == 1:
                    del opened[k]
                else:
                    _remove_session(group, sessions[h])
                if last_of.get(k, NO_WATERMARK) < last:
                    last_of[k] = last
                    closed_order.append((last, k))
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
                        s[HANDLE] = index.bind(s, k, s[START], s[LAST], s[STATE] if columnar else None)
                    else:
                        index.last[s[HANDLE]] = self._last(s)
                        index.start[s[HANDLE]] = s[START]
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
