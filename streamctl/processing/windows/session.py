"""Session windows: a group's events at most GAP apart form one session [first, last + GAP).

The rules (this code decides on both engines: the Spark job replays each
group through it):

- An event joins every open session of its group that it is within GAP of
  (start - GAP <= t <= last + GAP); they merge, so one event can bridge two.
- A session closes when the watermark reaches its end, last + GAP (end <=
  watermark, as every window). An event exactly GAP after the last joins it
  while the watermark is below that end; once the watermark reaches the end
  the session is closed, and such an event is late (within GAP of it).
- An event is late when t + GAP <= watermark (no open session could take it,
  Kafka Streams' rule), or when it lies within GAP of a session of its group
  that has already closed (it would change a closed window). So sessions of
  one group never overlap within GAP: a late event is dropped whole
  (`--late drop`), even from an open session it also touches. With `a@0s,
  a@50s, a@40s` and `--session 45s`: a@50 closes [0s, 45s); a@40 is within GAP
  of it, so it is late, and [50s, 95s) stays as it was.
- `--late correct` keeps the closed sessions. A late event joins every session
  of its group it touches, closed or open, and they merge. The result is closed
  when its end is at or before the watermark (written at once) and open otherwise
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
late by the first rule); once the watermark reaches 2 GAP past it, the first rule
covers every event it could catch, and the store may forget the group
(session_index.SessionStore.compact).

Every session lives in one store (session_index.py: columns by handle,
lists by group) that add() and the batch kernel work on alike. A batch,
stragglers included, is folded by the batch kernel (session_kernel.py: array
passes, the same rows, order and state as add() per event); where it cannot
take an event, that event goes alone through add(), counted and reported.

For add() and close() one event at a time, each open session has one entry
in the close heap, pushed when it is created with the end it had then; an
entry popped for a session that has grown since is pushed again with the new
end, so extending a session costs nothing and the heap holds one entry per
open session (plus merged-away ones until popped). The kernel closes
sessions by scanning the store's ends instead; the heap, an index of the
store and no state of its own, is made again from the store when close()
needs it after the kernel ran.
"""

from __future__ import annotations

import bisect
import heapq
from typing import Any

from streamctl.processing.eventfields import key_positions
from streamctl.processing.windows import NO_WATERMARK
from streamctl.processing.windows.session_index import SessionStore
from streamctl.processing.windows.session_kernel import SessionKernel

# with states beyond what slots keep, how many batches go by between two tries to move them back
RETRY_SLOTS = 64


class Session(SessionKernel):
    DECLINE_REASON = "an event bridged two sessions of its group, or a session closed before all its events arrived"

    def __init__(self, gap: int, plan, update: bool = False, correct: bool = False) -> None:
        super().__init__(gap, plan, update, correct)
        self.gap = gap
        # every session (open, and the closed ones --late correct keeps) and what each group remembers
        # of its closed ones: the one state add() and the batch kernel work on
        self.store = SessionStore(arrays=not update and not correct)  # (arrays: for the batch kernel)
        self.heap: list[tuple[int, int, int]] = []  # (end when pushed, session id, handle)
        self.heap_ok = True  # False once the kernel made or closed sessions: close() makes it again
        self.forgot = NO_WATERMARK  # the latest watermark close() or the kernel saw (--late drop)
        self.next_sid = 0  # the next session's SID: sessions are numbered as they are made
        # the sessions' aggregation states: Plan's lists (the store's `state`), or with rows only at
        # close, slots (cells.SlotStates, the same interface and the same states: count, sum and avg
        # in numpy arrays, the others, and those a number beyond a slot came to, as Python states;
        # the store's `slot`), taken at the first batch: the Spark job's per-group replay adds event
        # by event, without numpy
        self.states: Any = plan
        self.columnar = False
        self.slots_ok = not update and not correct
        self.exact_batches = 0  # batches since an aggregation moved to Python states was last tried

    def _use_slots(self) -> None:
        """Keep the states in slots: from the first batch on; and an aggregation that a number
        beyond a slot moved to Python states (cells.Slots.to_python) back in arrays once every open
        session's state of it fits (tried when nothing is open, and every RETRY_SLOTS batches)."""
        if not self.slots_ok:
            return
        if not self.columnar:
            self._into_slots()
        elif any(self.plan.aggs[i].slots for i in self.states.py):
            if self.open_windows() and self.exact_batches < RETRY_SLOTS:
                self.exact_batches += 1
                return
            self.exact_batches = 0
            self.states.to_arrays()

    def _into_slots(self) -> None:
        """The open sessions' Plan states into slots."""
        from streamctl.processing.windows.cells import SlotStates

        store, slots = self.store, SlotStates(self.plan)
        hs = store.open_handles()
        slots.keep_python(store.state[h] for h in hs)
        slots.open(hs)
        for h in hs:
            slots.set_state(h, store.state[h])
            store.state[h] = None
        self.states, self.columnar = slots, True

    def _state(self, h: int) -> Any:
        """Session h's aggregation state: its slot (h), or its Plan state."""
        return h if self.columnar else self.store.state[h]

    def _touching(self, hs: list[int], t: int) -> list[int]:
        gap, start, last = self.gap, self.store.start, self.store.last
        return [h for h in hs if start[h] - gap <= t <= last[h] + gap]

    def _near_closed(self, g: int, t: int) -> bool:
        """Whether t (not late by t + GAP <= watermark) lies within GAP of a closed session of group g.
        Every closed session ends at or before the watermark, so t (t + GAP > watermark >= last +
        GAP) is after its last event: only the latest one's last + GAP matters (NO_WATERMARK, none,
        is far below every time)."""
        if self.correct:
            shut = self.store.shut[g]
            return bool(shut) and t <= self.store.last[shut[-1]] + self.gap
        return t <= self.store.closed[g] + self.gap

    def _add_state(self, h: int, vals: tuple, seq: int) -> None:
        self.states.add(h if self.columnar else self.store.state[h], vals, seq)  # (_state, inline: per event)

    def add(self, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool:
        gap, store = self.gap, self.store
        g = store.gid.get(key)
        if g is None:
            g = store.group_id(key)
        if t + gap <= wm or self._near_closed(g, t):
            if self.correct:
                self._correct(g, t, seq, vals, wm, out)
            return True
        hs = store.opened[g]
        start, last = store.start, store.last
        if len(hs) == 1:
            h = hs[0]
            lh = last[h]
            if start[h] <= t <= lh + gap:
                # the hot path: the event extends (or falls inside) the group's only session
                self._add_state(h, vals, seq)
                if t > lh:
                    last[h] = t
                if self.update:
                    self._write(h, key, out)
                return False
        touched = self._touching(hs, t)
        if touched:
            h = touched[0]
            for other in touched[1:]:
                self._absorb(h, other)
                hs.remove(other)  # its heap entry goes stale
                store.release(other)
        else:
            h = self._new(g, t)
            hs.append(h)
            heapq.heappush(self.heap, (t + gap, store.sid[h], h))
        self._add_state(h, vals, seq)
        if t < start[h]:
            start[h] = t
        elif t > last[h]:
            last[h] = t
        if self.update:
            self._write(h, key, out)
        return False

    def _new(self, g: int, t: int) -> int:
        """A new session [t, t + GAP) of group g, in no list yet."""
        h = self.store.new(g, t, t, self._sid())
        if self.columnar:
            self.states.open([h])
        else:
            self.store.state[h] = self.plan.new()
        return h

    def _sid(self) -> int:
        sid = self.next_sid
        self.next_sid += 1
        return sid

    def _absorb(self, h: int, other: int) -> None:
        """Merge session `other` into `h` (its written windows become h's to withdraw); the caller takes
        it out of its list and releases it."""
        store = self.store
        self.states.merge(self._state(h), self._state(other))
        start, last = store.start, store.last
        if start[other] < start[h]:
            start[h] = start[other]
        if last[other] > last[h]:
            last[h] = last[other]
        store.rev[h] += store.rev[other]
        if store.shown[other]:
            store.shown[h] = (store.shown[h] or []) + store.shown[other]

    def _correct(self, g: int, t: int, seq: int, vals: tuple, wm: int, out: list) -> None:
        """--late correct: the late event joins every session of its group it touches, open or closed."""
        gap, store = self.gap, self.store
        opened, closed = store.opened[g], store.shut[g]
        start, last = store.start, store.last
        # closed sessions are disjoint and sorted by start: the ones within GAP of t are a run
        hi = bisect.bisect_right(closed, t + gap, key=start.__getitem__)
        lo = hi
        while lo > 0 and last[closed[lo - 1]] + gap >= t:
            lo -= 1
        near = closed[lo:hi]
        del closed[lo:hi]
        touched = self._touching(opened, t)
        if touched:
            h, rest = touched[0], touched[1:] + near
        elif near:
            h, rest = near[0], near[1:]
        else:
            h, rest = self._new(g, t), []
        for other in rest:
            self._absorb(h, other)
        for other in touched[1:]:  # (the closed ones in `near` are out of `closed` already)
            opened.remove(other)
        for other in rest:
            store.release(other)
        self._add_state(h, vals, seq)
        start[h] = min(start[h], t)
        last[h] = max(last[h], t)
        store.rev[h] += 1
        end = last[h] + gap
        if end <= wm:
            # closed (an open session it touched has its end past the watermark: it stays open)
            bisect.insort(closed, h, key=start.__getitem__)
            self._write(h, store.gkey[g], out)
            return
        if not touched:
            opened.append(h)
            heapq.heappush(self.heap, (end, store.sid[h], h))
        if self.update:
            self._write(h, store.gkey[g], out)

    def _write(self, h: int, key: bytes, out: list) -> None:
        """The session's row, after a delete row for each window written for it before under other bounds
        (with --emit update or --late correct: its state is Plan's, never a slot)."""
        store = self.store
        window = (store.start[h], store.last[h] + self.gap)
        shown = store.shown[h]
        if shown:
            for old in sorted(shown):
                if old != window:
                    out.append((old[0], old[1], key, None, None))
        out.append((window[0], window[1], key, self.plan.result(store.state[h]), store.rev[h] or None))
        store.shown[h] = [window]

    def close(self, wm: int, out: list) -> None:
        # A session closes when the watermark reaches its end (end <= wm), as every window: an
        # event at exactly last + GAP joins it only while the watermark is below that end.
        if not self.heap_ok:
            self._heap_again()
        heap = self.heap
        if heap and heap[0][0] <= wm:
            store, gap = self.store, self.gap
            alive, sids, last = store.alive, store.sid, store.last
            batch = []
            while heap and heap[0][0] <= wm:
                end, sid, h = heapq.heappop(heap)
                if not alive[h] or sids[h] != sid:
                    continue  # merged away (its handle free, or in use by a later session)
                now_end = last[h] + gap
                if now_end > end:
                    heapq.heappush(heap, (now_end, sid, h))  # it grew: check again then
                else:
                    batch.append(h)
            self._emit(batch, out)
        self._seen(wm)  # at every watermark: the state after a batch is the same however it was cut

    def _heap_again(self) -> None:
        """The close heap made from the store's open sessions (after the kernel made and closed some)."""
        store, gap = self.store, self.gap
        last, sid = store.last, store.sid
        self.heap = [(last[h] + gap, sid[h], h) for h in store.open_handles()]
        heapq.heapify(self.heap)
        self.heap_ok = True

    def _seen(self, wm: int) -> None:
        """The watermark moved to wm: what --late drop remembers of closed sessions is read against it,
        and the store forgets the groups no event can reach once it holds too many."""
        if not self.correct and wm > self.forgot:
            self.forgot = wm
        store = self.store
        if len(store.gkey) > store.compact_at:
            # a closed session with last + 2 GAP <= the watermark is out of reach of every event not late
            # (one within GAP of it has t + GAP <= last + 2 GAP <= the watermark: late by the first rule)
            store.compact(self.forgot - 2 * self.gap)

    def flush(self, out: list) -> None:
        self.heap.clear()
        self.heap_ok = True
        self._emit(self.store.open_handles(), out)

    def _emit(self, batch: list[int], out: list) -> None:
        """Write the open sessions `batch`, closed, by start then key: kept (--late correct) or released,
        each group's latest closed one remembered (--late drop). With slots (numpy's there), the
        kernel's writer does it (_write_closed: the same rows, JSON lines with text_rows)."""
        if not batch:
            return
        if self.columnar:
            import numpy as np

            self._write_closed(np.array(batch, dtype=np.int64), np.zeros(len(batch), dtype=np.int64), out)
            return
        store = self.store
        group, gkey, start, last, opened = store.group, store.gkey, store.start, store.last, store.opened
        for h in batch:
            opened[group[h]].remove(h)
        keys = [gkey[group[h]] for h in batch]
        place = key_positions(keys)
        order = sorted(range(len(batch)), key=lambda i: (start[batch[i]], place[keys[i]]))
        batch = [batch[i] for i in order]
        keys = [keys[i] for i in order]
        if self.correct:
            shut = store.shut
            for h, k in zip(batch, keys, strict=True):
                if not self.update:
                    self._write(h, k, out)
                bisect.insort(shut[group[h]], h, key=start.__getitem__)
            return
        gap = self.gap
        if not self.update:
            results = [self.plan.result(store.state[h]) for h in batch]
            out += [(start[h], last[h] + gap, k, res, None) for h, k, res in zip(batch, keys, results, strict=True)]
        closed = store.closed
        for h in batch:
            g = group[h]
            if closed[g] < last[h]:
                closed[g] = last[h]
            store.release(h)

    def open_windows(self) -> int:
        return sum(map(len, self.store.opened))

    def dump(self) -> dict:
        store, dump = self.store, self.states.dump

        def sessions(by_group: list[list[int]]) -> list:
            # by key: a batch and one event at a time leave the same groups in another order
            return [[k.decode(), [[store.start[h], store.last[h], dump(self._state(h)), store.rev[h], store.shown[h]]
                                  for h in hs]]
                    for k, hs in sorted((store.gkey[g], hs) for g, hs in enumerate(by_group) if hs)]
        # the closed sessions an event that is not late can still reach (last + 2 GAP past the
        # watermark: the ones beyond it may wait for compact), by key
        reach = self.forgot - 2 * self.gap
        closed_last = sorted((store.gkey[g], last) for g, last in enumerate(store.closed)
                             if last != NO_WATERMARK and last > reach)
        return {"open": sessions(store.opened), "closed": sessions(store.shut),
                "closed_last": [[k.decode(), last] for k, last in closed_last]}

    def load(self, data: dict) -> None:
        # a checkpoint holds Plan's states: read as such, then moved into slots
        self.states, self.columnar = self.plan, False
        store = self.store = SessionStore(arrays=not self.update and not self.correct)
        load = self.plan.load
        for name, lists in (("open", store.opened), ("closed", store.shut)):
            for k, v in data[name]:
                g = store.group_id(k.encode())
                for a, b, st, r, *rest in v:
                    h = store.new(g, a, b, self._sid())
                    store.state[h] = load(st)
                    store.rev[h] = r
                    store.shown[h] = [tuple(w) for w in rest[0]] if rest and rest[0] else None
                    lists[g].append(h)
        for k, last in data.get("closed_last", []):
            store.closed[store.group_id(k.encode())] = last
        self._heap_again()
        if self.slots_ok:
            self._into_slots()
