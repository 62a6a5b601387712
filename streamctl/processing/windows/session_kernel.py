"""The batch kernel of session windows (session.py holds the rules and the one-event path, add).

A batch, stragglers included, is folded without a loop per event: the late
stragglers found with the running maximum and each group's latest closed
session, the others assigned to sessions by session_index.cluster (a sort by
group and time and a few array passes), each session's events folded at once,
then the sessions the batch closes written and released where the one-event
path would close them: the same rows, order and state as add() per event,
which the property tests check. The kernel works on the store add() works on
(session_index.SessionStore, its columns viewed as numpy arrays). Where the
kernel cannot take an event (one that bridges two sessions of its group, or
arrives after its session would have closed: those need the one-event order),
the batch is cut there: the kernel takes the events before it, the event goes
alone through add(), and the kernel takes the rest. Events folded alone are
counted (`declined`, reported on stderr). numpy is imported where it is used:
the Spark job's per-group replay goes through add() alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streamctl.processing.eventfields import key_positions
from streamctl.processing.windows import NO_WATERMARK, Batch, Windower, fold_events

# cuts of one batch where the kernel stopped; past them the batch's rest goes one event at a time
MAX_SPLITS = 16


def _part(batch: Batch, lo: int, hi: int, maxt: int) -> Batch:
    """Events lo..hi of a batch as a batch of their own (maxt: the largest time before event lo)."""
    if lo == 0 and hi == len(batch.ts):
        return batch
    return Batch(batch.ts[lo:hi], batch.ks[lo:hi], [None if c is None else c[lo:hi] for c in batch.cols],
                 batch.seq + lo, maxt, batch.lateness, None if batch.ids is None else (batch.ids[0], batch.ids[1][lo:hi]),
                 None if batch.times is None else batch.times[lo:hi])


class SessionKernel(Windower):
    """Session's batch fold (a base of session.Session, whose state and one-event path it uses)."""

    # Session's state and one-event path (session.py)
    gap: int
    store: Any  # session_index.SessionStore
    heap: list[tuple[int, int, int]]
    heap_ok: bool
    states: Any
    columnar: bool
    next_sid: int

    if TYPE_CHECKING:  # Session's methods, declared for the type checker only: Session defines them
        def add(self, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool: ...

        def _use_slots(self) -> None: ...

        def _seen(self, wm: int) -> None: ...


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
        # the kernel makes and closes sessions without the close heap: close() makes it again
        self.heap.clear()
        self.heap_ok = False
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
        # (an int beyond what a slot keeps exactly moves its aggregation to Python states at its add)
        done = fold_events(self, batch, out)
        if self.columnar:
            self.states.keep_exact()
        return done

    def _fold_one(self, batch: Batch, i: int, maxt: int, out: list) -> tuple[bool, int]:
        """Event i of the batch through add() (the largest time before it: maxt), then the close() its
        watermark move makes, as the kernel makes it: (whether it was late, the largest time)."""
        import numpy as np

        ts, ks, cols, seq, _maxt, lateness = batch[:6]
        t = ts[i]
        vals = tuple(True if c is None else c[i] for c in cols)
        late = self.add(ks[i], t, seq + i, vals, NO_WATERMARK if maxt == NO_WATERMARK else maxt - lateness, out)
        if t > maxt:
            self._close_batch(np.array([t], dtype=np.int64), lateness, out)
            maxt = t
        if self.columnar:
            self.states.keep_exact()
        return late, maxt

    def _fold_batch(self, batch: Batch, out: list) -> tuple[int, list[int]] | int:
        """The batch kernel, or when it cannot take the batch (nothing changed) the position of the
        first event it stopped at (-1: none in particular, the batch goes one event at a time).

        The watermark before each event is a running maximum (windows.watermarks, with arrays). An
        event at or below the largest time before it (a straggler, or a tie with it) is late as
        add() finds it: t + GAP <= watermark, or within GAP of its group's latest closed session (a
        tie can be only by the second: with no lateness, exactly GAP after a session the watermark
        closed on reaching its end). The others are assigned to sessions by session_index.cluster
        (which declines what would need merges or an early close), folded into them in input
        order, and then each close() the one-event path makes at an event that moves the
        watermark to a session's end or past it is made (a session's events all arrive before
        that event: cluster checked it)."""
        import numpy as np

        from streamctl.processing.windows.session_index import Pre, cluster

        ts, ks, cols, seq, maxt, lateness = batch[:6]
        gap, n = self.gap, len(ts)
        t = np.array(ts, dtype=np.int64) if batch.times is None else batch.times
        high = np.maximum.accumulate(t)  # the largest time up to each event
        np.maximum(high, maxt, out=high)
        before = np.empty(n, dtype=np.int64)
        before[0] = maxt
        before[1:] = high[:-1]
        wm = before - lateness  # before any time (NO_WATERMARK) far below every time: nothing late
        store = self.store
        g_all = store.group_ids(ks, batch.ids)
        lates: list[int] = []
        keep = None
        behind = np.flatnonzero(t <= before)  # the events that may be late: stragglers and ties
        if len(behind):
            st = t[behind]
            # late: no open session could take it, or within GAP of its group's latest closed session
            # (a closed session forgotten on the one-event path is one no event that is not late can reach)
            late = (st + gap <= wm[behind]) | (st <= store.view("closed")[g_all[behind]] + gap)
            if late.any():
                lates = behind[late].tolist()
                keep = np.ones(n, dtype=bool)
                keep[behind[late]] = False
        from streamctl.processing.windows.cells import number_columns

        states = self.states  # the slots (fold: _use_slots)
        numbers, too_big = number_columns(self.plan.aggs, cols)
        for i in too_big:  # an int too large for a float64 total to stay exact
            states.to_python(i)
        pos = np.arange(n) if keep is None else np.flatnonzero(keep)
        if not len(pos):
            return self._close_batch(high, lateness, out), lates
        g = g_all[pos]
        ph = store.of_groups(g)  # the open sessions of the batch's groups
        pg = store.view("group")[ph]
        pre = Pre(pg, store.view("start")[ph], store.view("last")[ph], ph)
        # (no views held from here: add_open grows the columns)
        has = np.zeros(len(store.gkey), dtype=bool)
        has[pg] = True
        one_each = np.count_nonzero(has) == len(pg)  # no group with two open sessions
        in_order = keep is None and one_each and not (t < before).any()  # (no straggler)
        runs = cluster(t[pos], g, pos, wm[pos], pre, gap, in_order)
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
        new_h = store.add_open(runs.group[fresh], runs.start[fresh], runs.last[fresh],
                               np.arange(sid, sid + m, dtype=i64))
        handle_of[fresh] = new_h
        had = live[old]  # an open session: a straggler may move its start, later events its last
        store.view("start")[handle_of[had]] = runs.start[had]
        store.view("last")[handle_of[had]] = runs.last[had]
        handles = handle_of[runs.of_event]  # each kept event's session, in input order
        states.open(new_h)
        if keep is not None:
            numbers = [c if c is None else c.take(keep) for c in numbers]
        states.fold(handles, numbers, cols, pos, seq)
        maxt = self._close_batch(high, lateness, out)
        states.keep_exact()
        return maxt, lates


    def _close_batch(self, high: Any, lateness: int, out: list) -> int:
        """The close() calls the one-event path makes over a batch whose largest time up to each
        event is `high`, made from the store: the open sessions whose end the last watermark
        reached (end <= watermark), each closed at the first event that moves the watermark to
        its end or past it, in the order close() writes them (by that event, then start, then
        key). Returns the largest time."""
        import numpy as np

        store, gap = self.store, self.gap
        maxt = int(high[-1])
        ends = store.view("last") + gap
        hs = np.flatnonzero(store.view("alive") & (ends <= maxt - lateness))
        if len(hs):
            # the event that closes each: the first whose watermark, high - lateness, reaches its end
            at = np.searchsorted(high, ends[hs] + lateness, side="left")
            self._write_closed(hs, at, out)
        self._seen(maxt - lateness)
        return maxt

    def _write_closed(self, hs: Any, at: Any, out: list) -> None:
        """Write and release the open sessions `hs` (their states in slots), closed at the events
        `at`: by that event, then start, then key (close()'s order), and remember each group's
        latest closed session."""
        import numpy as np

        store, gap = self.store, self.gap
        starts = store.view("start")[hs]
        order = np.lexsort((starts, at))
        hs, at, starts = hs[order], at[order], starts[order]
        groups = store.view("group")[hs]
        ks = list(map(store.gkey.__getitem__, groups.tolist()))
        same = (at[1:] == at[:-1]) & (starts[1:] == starts[:-1])
        if same.any():  # one close, one start, several groups: by key, as close() sorts them
            place = key_positions(ks)
            fix = sorted(range(len(hs)), key=lambda i: (int(at[i]), int(starts[i]), place[ks[i]]))
            hs, starts, groups = hs[fix], starts[fix], groups[fix]
            ks = [ks[i] for i in fix]
        lasts = store.view("last")[hs]
        ends = (lasts + gap).tolist()
        self.states.write(out, starts.tolist(), ends, ks, hs, self.text_rows)
        self.states.release_at(hs)
        np.maximum.at(store.view("closed"), groups, lasts)  # a group's sessions close in time order
        store.release_many(hs, groups.tolist())
