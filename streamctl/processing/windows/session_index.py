"""The open sessions as arrays, so a batch in time order is assigned to sessions without a loop per event.

Session windows (session.py) keep each open session as a small list. Folding a
batch one event at a time reads, per event, the group's sessions and the
newest one's last event time: Python objects spread over memory, one cache
miss after another. This index holds what that assignment reads as numpy
arrays: an id per group key, each group's newest open session (a handle),
and each handle's last event time and aggregation slot. A batch in time
order is then assigned with a sort and a few array passes (`assign`), and
Python work is left per new session, per closed session and per distinct new
key, not per event.

A session's last event time is the larger of its list's LAST and
`last[handle]`: the batch path writes the array, the one-event path
(Session.add) writes the list, and Session._last reads both.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

NO_HANDLE = -1


def _grown(a: np.ndarray, need: int, fill: int) -> np.ndarray:
    cap = max(len(a), 16)
    while cap < need:
        cap *= 2
    if cap == len(a):
        return a
    b = np.full(cap, fill, dtype=a.dtype)
    b[:len(a)] = a
    return b


@dataclass
class OpenIndex:
    gid: dict[bytes, int] = field(default_factory=dict)  # group key -> group id
    newest: np.ndarray = field(default_factory=lambda: np.full(16, NO_HANDLE, dtype=np.int64))  # by group id
    last: np.ndarray = field(default_factory=lambda: np.zeros(16, dtype=np.int64))  # by handle
    slot: np.ndarray = field(default_factory=lambda: np.zeros(16, dtype=np.intp))  # by handle: its SlotStates slot
    sessions: list = field(default_factory=list)  # by handle: the session list, None when free
    free: list[int] = field(default_factory=list)
    # keys whose sessions the one-event path changed since the last batch here: their sessions get
    # handles and their newest[] is found again before the next assign()
    stale: set[bytes] = field(default_factory=set)

    def group_ids(self, ks: list[bytes]) -> np.ndarray:
        gid = self.gid
        try:
            return np.fromiter(map(gid.__getitem__, ks), dtype=np.int64, count=len(ks))
        except KeyError:  # keys not seen before: ids for them, then the lookup again
            for k in dict.fromkeys(ks).keys() - gid.keys():
                gid[k] = len(gid)
            self.newest = _grown(self.newest, len(gid), NO_HANDLE)
            return np.fromiter(map(gid.__getitem__, ks), dtype=np.int64, count=len(ks))

    def group_id(self, k: bytes) -> int:
        g = self.gid.get(k)
        if g is None:
            g = self.gid[k] = len(self.gid)
            self.newest = _grown(self.newest, len(self.gid), NO_HANDLE)
        return g

    def alloc(self, m: int) -> np.ndarray:
        """m free handles (their sessions set by the caller)."""
        free = self.free
        take = min(m, len(free))
        got = free[len(free) - take:]
        del free[len(free) - take:]
        base = len(self.sessions)
        fresh = m - take
        self.sessions.extend([None] * fresh)
        need = base + fresh
        self.last = _grown(self.last, need, 0)
        self.slot = _grown(self.slot, need, 0)
        return np.array(got + list(range(base, need)), dtype=np.int64)

    def bind(self, s: list, last: int, slot: int | None) -> int:
        """A handle for a session made by the one-event path."""
        h = int(self.alloc(1)[0])
        self.sessions[h] = s
        self.last[h] = last
        if slot is not None:
            self.slot[h] = slot
        return h

    def release(self, h: int, key: bytes | None = None) -> None:
        """Handle h's session closed or merged away (with its key: no longer its group's newest)."""
        self.sessions[h] = None
        self.free.append(h)
        if key is not None:
            g = self.gid.get(key)
            if g is not None and self.newest[g] == h:
                self.newest[g] = NO_HANDLE

    def assign(self, ts: list[int], ks: list[bytes], gap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Assign a batch of events in time order, none before any time seen so far, to sessions:
        an event extends its group's newest session when it is at most GAP after that session's
        last event (the group's event before it), and starts a new session otherwise -- what
        Session.add does with such events, where none is late and no older session can be within
        GAP. Returns each event's handle, and the positions of the events that start sessions with
        the handles allocated for them, in input order; updates the last times and newest[]."""
        n = len(ts)
        t = np.array(ts, dtype=np.int64)
        g = self.group_ids(ks)
        order = np.argsort(g, kind="stable")  # by group, in time (input) order within one
        gs, tss = g[order], t[order]
        first = np.empty(n, dtype=bool)  # a group's first event in the batch
        first[0] = True
        np.not_equal(gs[1:], gs[:-1], out=first[1:])
        starts = np.empty(n, dtype=bool)  # starts a session
        starts[0] = True
        np.greater(tss[1:] - tss[:-1], gap, out=starts[1:])
        fpos = np.flatnonzero(first)
        cur = self.newest[gs[fpos]]
        ext = cur != NO_HANDLE
        ext[ext] = tss[fpos[ext]] <= self.last[cur[ext]] + gap
        starts[fpos] = ~ext
        new_pos = np.flatnonzero(starts)
        new_h = self.alloc(len(new_pos))
        seg = starts | first  # where a run of one session's events begins
        head = np.empty(n, dtype=np.int64)
        head[new_pos] = new_h
        head[fpos[ext]] = cur[ext]
        seg_pos = np.flatnonzero(seg)
        hs = head[seg_pos][np.cumsum(seg) - 1]
        ends = np.empty(n, dtype=bool)  # a run's last event
        ends[-1] = True
        ends[:-1] = seg[1:]
        self.last[hs[ends]] = tss[ends]
        ends[:-1] = first[1:]  # a group's last event: its session is the group's newest
        self.newest[gs[ends]] = hs[ends]
        handles = np.empty(n, dtype=np.int64)
        handles[order] = hs
        at = order[new_pos]
        by_input = np.argsort(at, kind="stable")
        return handles, at[by_input], new_h[by_input]

    @staticmethod
    def runs(handles: np.ndarray) -> list[tuple[int, list[int]]]:
        """(handle, positions in input order) per session of a batch."""
        order = np.argsort(handles, kind="stable")
        hs = handles[order]
        cuts = (np.flatnonzero(hs[1:] != hs[:-1]) + 1).tolist()
        pos = order.tolist()
        heads = hs[[0, *cuts]].tolist()
        bounds = [0, *cuts, len(pos)]
        return [(h, pos[a:b]) for h, a, b in zip(heads, bounds, bounds[1:], strict=False)]
