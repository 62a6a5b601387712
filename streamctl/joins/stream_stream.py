"""Stream-stream window join: pairs with equal key and event times at most `within` apart.

The rule, exactly (it is what the tests' brute-force reference and the Spark job
compute): records are numbered by their position in the input order; W(p) is
the watermark after position p (the largest event time seen up to and
including p). An earlier event a and a later event b of the other side pair up
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
from typing import Any

from streamctl.joins import Emit


class _Event:
    # identity equality (no __eq__): list.remove finds exactly this event
    __slots__ = ("key", "matched", "side", "t", "value")

    def __init__(self, side: int, key: Any, t: int, value: Any) -> None:
        self.side = side
        self.key = key
        self.t = t
        self.value = value
        self.matched = False


class StreamStreamJoin:
    def __init__(self, within: int, how: str, emit: Emit) -> None:
        self.within = within
        self.keep = (how in ("left", "outer"), how in ("right", "outer"))
        self.emit = emit
        # side -> normalized key -> events still in the window, in input order
        self.buffers: tuple[dict[Any, list[_Event]], dict[Any, list[_Event]]] = ({}, {})
        # (t + within, position, event): eviction order is (time, position)
        self.heap: list[tuple[int, int, _Event]] = []
        self.watermark: int | None = None

    def push(self, side: int, nkey: Any, key: Any, t: int, value: Any, pos: int) -> None:
        """One event at input position `pos`; nkey is None for a null key (never matches)."""
        wm = self.watermark
        if wm is None or t > wm:
            wm = self.watermark = t
        within = self.within
        ev = _Event(side, key, t, value)
        if nkey is not None:
            others = self.buffers[1 - side].get(nkey)
            if others:
                emit = self.emit
                for o in others:
                    ot = o.t
                    if ot + within >= wm and -within <= ot - t <= within:
                        o.matched = True
                        ev.matched = True
                        if side:
                            emit(key, o.value, value)
                        else:
                            emit(key, value, o.value)
            buf = self.buffers[side]
            lst = buf.get(nkey)
            if lst is None:
                buf[nkey] = [ev]
            else:
                lst.append(ev)
        ev.key = (nkey, key)
        heapq.heappush(self.heap, (t + within, pos, ev))
        heap = self.heap
        if heap[0][0] < wm:
            self._evict(wm)

    def _evict(self, wm: int | None) -> None:
        heap = self.heap
        keep = self.keep
        emit = self.emit
        buffers = self.buffers
        while heap and (wm is None or heap[0][0] < wm):
            ev = heapq.heappop(heap)[2]
            nkey, key = ev.key
            if nkey is not None:
                buf = buffers[ev.side]
                lst = buf[nkey]
                if len(lst) == 1:
                    del buf[nkey]
                else:
                    lst.remove(ev)
            if not ev.matched and keep[ev.side]:
                if ev.side:
                    emit(key, None, ev.value)
                else:
                    emit(key, ev.value, None)

    def finish(self) -> None:
        """End of input: every event still in the window is final now."""
        self._evict(None)

    def state_size(self) -> int:
        return len(self.heap)
