"""Stream-stream window join: pairs with equal key and event times at most `within` apart.

The rule, exactly (it is what the tests' brute-force reference and the Spark job
compute; StreamStreamJoin.push states when an event is late): records are
numbered by their position in the input order; W(p) is the watermark after
position p: the largest event time seen up to and including p, minus
`lateness`. A late event is not joined at all -- not paired, not stored, not
emitted as unmatched -- only counted (and handed to the caller to keep,
`--late-out`). Joining it with the partners that happen to remain would give a
result that depends on how late it came; leaving it out gives exactly the rows
of the other events (Flink's interval join drops late elements the same way).
With `lateness` at least as large as how far event times run behind the
largest time seen before them, nothing is late and every pair with
|t_a - t_b| <= within is found.

An earlier event a and a later event b of the other side, neither late, pair up
when their keys are equal (and not null), |t_a - t_b| <= within, and a is still
in the window when b arrives: t_a + within >= W(b) (the lateness rule makes
that hold for every such pair). Pairs are emitted when b arrives, in a's input
order.

An event leaves the state at the first position where the watermark passes
its time + within (W > t + within), or at the end of the input. Then, if it
never paired and its side is kept by `how`, it is emitted with the other side
null, never earlier: a later event could still have matched it. Evictions at
one position come out after that position's pairs, ordered by (time, position).
State holds the events inside the window behind the watermark and, per side
and key, the time of the last event that left, while an on-time event could
still be within `within` of it (W <= t + 2 * within; forgotten a little after).

Two evaluations of this rule: `StreamStreamJoin` here, the reference, an event at a time (the
record path: logs, `--follow`, output other than JSON lines), and its batch kernel
`interval_kernel.IntervalJoin`, a chunk of records at a time with numpy (two plain files written
as JSON lines, read as columns by joins/plain_inputs.py).
tests/props/test_join_props.py and tests/props/test_join_plain_fast.py hold the kernel to the
reference: the same rows, bytes, order and counts.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable
from typing import Any

from streamctl.processing.joins import Emit
from streamctl.processing.watermark import Watermark

# An event in the state is a list (cheaper to make than an object, and compared
# by identity below): [time, value, matched, side, normalized key, key].
# A key's buffer holds the event itself while it is the only one (most keys
# in a click stream), and a list of events from the second on; an event's
# first item is its time, an int, which tells the two apart.


def _buffer(buf: dict[Any, Any], nkey: Any, ev: list) -> None:
    """Add the event to its key's buffer (after the key's other events)."""
    cur = buf.get(nkey)
    if cur is None:
        buf[nkey] = ev
    elif cur[0].__class__ is int:
        buf[nkey] = [cur, ev]
    else:
        cur.append(ev)


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
    """The reference: the rule above, one event at a time."""

    def __init__(self, within: int, how: str, emit: Emit, lateness: int = 0) -> None:
        self.within = within
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
        # side -> normalized key -> the time of its last event that left the state, while an on-time
        # event could be within `within` of it (W <= time + 2 * within). Two generations: when the
        # watermark passes `turn_at` the older is dropped whole and a new one begins, turns more
        # than `within` apart; a time goes in when W > time + within, so it is dropped at the second
        # turn after, when W > time + 2 * within (cheaper than finding each one's turn: a dict store
        # is all an event that leaves costs)
        self.gone: tuple[dict[Any, int], dict[Any, int]] = ({}, {})
        self.gone_old: tuple[dict[Any, int], dict[Any, int]] = ({}, {})
        self.turn_at: int | None = None

    def push(self, side: int, nkey: Any, key: Any, t: int, value: Any, pos: int) -> bool:
        """One event at input position `pos`; nkey is None for a null key (never matches).
        Returns True when the event is late (counted in `late`, otherwise ignored).

        The event is late, with W the watermark after it, when
        - t + within < W: it is behind the window (the partners before it in time have left), or
        - an event of the other side with the same key and a time at most `within` from t has
          already left the state (W passed its time + within: it may have been written unmatched).
        Both are judged in the input order, so a late event has no effect on the others (it never
        enters the state, so it never leaves it either). Joining an event of the second kind with
        the partners still held would lose its pair with the one that left, or contradict that
        one's null row; so no pair with |dt| <= within between two events that are not late is
        ever missing, and no null row is written for an event that pairs. Only an event behind the
        watermark (t < W) can be of the second kind: the one that left has t_a + within < W, and
        t <= t_a + within. The times of the events that left are kept per side and key at least
        until W passes time + 2 * within: after that, an event that is not behind the window
        (t >= W - within) is more than `within` after them."""
        within = self.within
        clock = self.clock
        moved = clock.observe(t)
        wm = clock.value
        if not moved and t < wm:  # (an event that moves the watermark is never behind it)
            if t + within < wm:
                self.late += 1
                return True
            if nkey is not None:
                gone = self.gone[1 - side].get(nkey)
                if gone is None:
                    gone = self.gone_old[1 - side].get(nkey)
                if gone is not None and gone >= t - within:  # (and gone <= t: it left, this did not)
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
            _buffer(self.buffers[side], nkey, ev)
        end = t + within
        queue = self.queue
        if not queue or queue[-1][0] <= end:
            queue.append((end, pos, ev))  # positions only grow, so (time, position) order holds
        else:
            heapq.heappush(self.heap, (end, pos, ev))
        if queue[0][0] < wm or (self.heap and self.heap[0][0] < wm):
            self._evict(wm)
        return False

    def _evict(self, wm: int | None) -> None:
        """The events whose time + within is behind `wm` (None: all) leave, by (time, position)."""
        heap = self.heap
        queue = self.queue
        keep = self.keep
        emit = self.emit
        buffers = self.buffers
        if wm is not None:
            if self.turn_at is None or wm > self.turn_at:
                self.gone_old, self.gone = self.gone, ({}, {})
                self.turn_at = wm + self.within
            gone = self.gone
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
            t, value, matched, side, nkey, key = ev
            if nkey is not None:
                _unbuffer(buffers[side], nkey, ev)
                if wm is not None:  # (at the end of input no event comes to ask)
                    # events leave by (time + within, position): this is the key's latest to leave
                    gone[side][nkey] = t
            if not matched and keep[side]:
                if side:
                    emit(key, None, value)
                else:
                    emit(key, value, None)

    def restore(self, events: list[tuple[int, int, list]], gone: Iterable[tuple[int, Any, int]] = ()) -> None:
        """Put back the events a checkpoint kept (joins/feeders.py StreamFeed.load), as (end, position,
        event), and the times of those that left, as (side, normalized key, time) (gone_times): the
        state is then what it was when the checkpoint was written."""
        for _end, _pos, ev in sorted(events, key=lambda e: e[1]):  # a key's buffer is in input order
            if ev[4] is not None:
                _buffer(self.buffers[ev[3]], ev[4], ev)
        self.queue.extend(sorted(events, key=lambda e: e[:2]))
        for side, nkey, t in gone:
            known = self.gone[side].get(nkey)
            self.gone[side][nkey] = t if known is None else max(known, t)

    def gone_times(self) -> list[tuple[int, Any, int]]:
        """(side, normalized key, time) of the events that left that an event on time can still reach
        (what restore takes back)."""
        floor = self.clock.value - 2 * self.within
        out = {}
        for gen in (self.gone_old, self.gone):  # the newer generation's time is the later one
            for side in (0, 1):
                for nkey, t in gen[side].items():
                    if t >= floor:
                        out[side, nkey] = t
        return [(side, nkey, t) for (side, nkey), t in out.items()]

    def finish(self) -> None:
        """End of input: every event still in the window is final now."""
        self._evict(None)

    def state_size(self) -> int:
        return len(self.queue) + len(self.heap)
