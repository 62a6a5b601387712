"""Stream-stream window join: pairs with equal key and event times at most `within` apart.

The rule, exactly (it is what the tests' brute-force reference and the Spark job
compute): records are numbered by their position in the input order; W(p) is
the watermark after position p: the largest event time seen up to and
including p, minus `lateness`. An event b is late when t_b + within < W(b): the
partners it could have had before it in time have left the window, so it is
not joined at all -- not paired, not stored, not emitted as unmatched -- only
counted (and handed to the caller to keep, `--late-out`). Joining it with the
partners that happen to remain would give a result that depends on how late
it came; leaving it out gives exactly the rows of the other events (Flink's
interval join drops late elements the same way). With `lateness` at least as
large as how far event times run behind the largest time seen before them,
nothing is late and every pair with |t_a - t_b| <= within is found.

An earlier event a and a later event b of the other side, neither late, pair up
when their keys are equal (and not null), |t_a - t_b| <= within, and a is still
in the window when b arrives: t_a + within >= W(b). Pairs are emitted when b
arrives, in a's input order.

An event leaves the state at the first position where the watermark passes
its time + within (W > t + within), or at the end of the input. Then, if it
never paired and its side is kept by `how`, it is emitted with the other side
null, never earlier: a later event could still have matched it. Evictions at
one position come out after that position's pairs, ordered by (time, position).
State holds only events inside the window behind the watermark.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any

from streamctl.processing.joins import Emit
from streamctl.processing.watermark import Watermark

# An event in the state is a list (cheaper to make than an object, and compared
# by identity below): [time, value, matched, side, normalized key, key].
# A key's buffer holds the event itself while it is the only one (most keys
# in a click stream), and a list of events from the second on; an event's
# first item is its time, an int, which tells the two apart.


def _unbuffer(buf: dict[Any, Any], nkey: Any, ev: list) -> None:
    """Remove exactly this event (by identity: equal-looking events can be different events)."""
    cur = buf[nkey]
    if cur is ev:
        del buf[nkey]
        return
    for i, x in enumerate(cur):
        if x is ev:
            del cur[i]
            break
    if len(cur) == 1:
        buf[nkey] = cur[0]


class StreamStreamJoin:
    def __init__(self, within: int, how: str, emit: Emit, lateness: int = 0) -> None:
        self.within = within
        self.lateness = lateness
        self.late = 0  # events not joined: late on arrival
        self.keep = (how in ("left", "outer"), how in ("right", "outer"))
        self.emit = emit
        # side -> normalized key -> the event, or a list of events, still in the window (input order)
        self.buffers: tuple[dict[Any, Any], dict[Any, Any]] = ({}, {})
        # Eviction order is (time, position). Input mostly comes in time order, so
        # events that keep that order queue in a deque (O(1)); the others go to a heap,
        # and eviction takes the smaller head of the two.
        self.queue: deque[tuple[int, int, list]] = deque()
        self.heap: list[tuple[int, int, list]] = []
        self.clock = Watermark(lateness)

    def push(self, side: int, nkey: Any, key: Any, t: int, value: Any, pos: int) -> bool:
        """One event at input position `pos`; nkey is None for a null key (never matches).
        Returns True when the event is late (counted in `late`, otherwise ignored)."""
        within = self.within
        clock = self.clock
        moved = clock.observe(t)
        wm = clock.value
        if not moved and t + within < wm:  # (an event that moves the watermark is never behind it)
            self.late += 1
            return True
        ev = [t, value, False, side, nkey, key]
        if nkey is not None:
            found = self.buffers[1 - side].get(nkey)
            if found is not None:
                emit = self.emit
                for o in ((found,) if found[0].__class__ is int else found):
                    ot = o[0]
                    if ot + within >= wm and -within <= ot - t <= within:
                        o[2] = True
                        ev[2] = True
                        if side:
                            emit(key, o[1], value)
                        else:
                            emit(key, value, o[1])
            buf = self.buffers[side]
            cur = buf.get(nkey)
            if cur is None:
                buf[nkey] = ev
            elif cur[0].__class__ is int:
                buf[nkey] = [cur, ev]
            else:
                cur.append(ev)
        end = t + within
        queue = self.queue
        if not queue or queue[-1][0] <= end:
            queue.append((end, pos, ev))  # positions only grow, so (time, position) order holds
        else:
            heapq.heappush(self.heap, (end, pos, ev))
        if self.heap:
            if queue[0][0] < wm or self.heap[0][0] < wm:
                self._evict(wm)
            return False
        # the common case, inlined: in-order input, evict from the queue's head
        while queue and queue[0][0] < wm:
            ev = queue.popleft()[2]
            _t, value, matched, side, nkey, key = ev
            if nkey is not None:
                buf = self.buffers[side]
                if buf[nkey] is ev:
                    del buf[nkey]
                else:
                    _unbuffer(buf, nkey, ev)
            if not matched and self.keep[side]:
                if side:
                    self.emit(key, None, value)
                else:
                    self.emit(key, value, None)
        return False

    def _evict(self, wm: int | None) -> None:
        heap = self.heap
        queue = self.queue
        keep = self.keep
        emit = self.emit
        buffers = self.buffers
        while True:
            if queue and (not heap or queue[0][:2] < heap[0][:2]):
                if wm is not None and queue[0][0] >= wm:
                    return
                ev = queue.popleft()[2]
            elif heap:
                if wm is not None and heap[0][0] >= wm:
                    return
                ev = heapq.heappop(heap)[2]
            else:
                return
            _t, value, matched, side, nkey, key = ev
            if nkey is not None:
                _unbuffer(buffers[side], nkey, ev)
            if not matched and keep[side]:
                if side:
                    emit(key, None, value)
                else:
                    emit(key, value, None)

    def restore(self, events: list[tuple[int, int, list]]) -> None:
        """Put back the events a checkpoint kept (joins/feeders.py StreamFeed.load), as (end, position,
        event): the state is then what it was when the checkpoint was written."""
        for _end, _pos, ev in sorted(events, key=lambda e: e[1]):  # a key's buffer is in input order
            nkey = ev[4]
            if nkey is None:
                continue
            buf = self.buffers[ev[3]]
            cur = buf.get(nkey)
            if cur is None:
                buf[nkey] = ev
            elif cur[0].__class__ is int:
                buf[nkey] = [cur, ev]
            else:
                cur.append(ev)
        self.queue.extend(sorted(events, key=lambda e: e[:2]))

    def finish(self) -> None:
        """End of input: every event still in the window is final now."""
        self._evict(None)

    def state_size(self) -> int:
        return len(self.queue) + len(self.heap)
