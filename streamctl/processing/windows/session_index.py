"""The open sessions as arrays, so a batch is folded and closed without a loop per event or session.

Session windows (session.py) keep each open session of the one-event path
(add) as a small list. Folding a batch one event at a time reads, per event,
the group's sessions and their last event times: Python objects spread over
memory, one cache miss after another. This index holds the whole state the
batch kernel (session_kernel.py) works on as numpy arrays: an id per group key
with, per group, its number of open sessions and the last event time of its
latest closed session; per open session (a handle) its start, last event time,
creation number and aggregation slot. A batch, stragglers included, is then
assigned with a few sorts and array passes (`cluster`), its new sessions made,
and the sessions it closes written and released with array work; Python work
is left per distinct new key, not per event or session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import is_

import numpy as np

from streamctl.processing.watermark import NO_WATERMARK


def _grown(a: np.ndarray, need: int, fill: int) -> np.ndarray:
    cap = max(len(a), 16)
    while cap < need:
        cap *= 2
    if cap == len(a):
        return a
    b = np.full(cap, fill, dtype=a.dtype)
    b[:len(a)] = a
    return b


def _ints(fill: int = 0, dtype: type = np.int64) -> np.ndarray:
    return np.full(16, fill, dtype=dtype)


@dataclass
class OpenIndex:
    gid: dict[bytes, int] = field(default_factory=dict)  # group key -> group id
    gkey: list[bytes] = field(default_factory=list)  # by group id: its key
    nopen: np.ndarray = field(default_factory=_ints)  # by group id: its open sessions
    # by group id: the last event time of its latest closed session (NO_WATERMARK: none), what
    # Session.closed_last holds on the one-event path
    closed: np.ndarray = field(default_factory=lambda: _ints(NO_WATERMARK))
    top: int = 0  # handles made so far (free or not)
    start: np.ndarray = field(default_factory=_ints)  # by handle: the session's start
    last: np.ndarray = field(default_factory=_ints)  # by handle: its last event time
    sid: np.ndarray = field(default_factory=_ints)  # by handle: its creation number (Session's SID)
    group: np.ndarray = field(default_factory=_ints)  # by handle: its group id
    slot: np.ndarray = field(default_factory=lambda: _ints(0, np.intp))  # by handle: its SlotStates slot
    alive: np.ndarray = field(default_factory=lambda: _ints(0, bool))  # by handle: an open session
    state: list = field(default_factory=list)  # by handle: its Plan state, when the states are not slots
    free: list[int] = field(default_factory=list)
    # by key id (events.KeyIds) of the space `id_space`: its group id, -1 when not known yet
    by_id: np.ndarray = field(default_factory=lambda: np.full(0, -1, dtype=np.int64))
    id_space: int = -1

    def group_ids(self, ks: list[bytes], ids: tuple[int, np.ndarray] | None = None) -> np.ndarray:
        """Each key's group id (keys not seen before get the next ids in first-seen order). With the
        keys' ids (events.KeyIds: (id space, ids)), by the table `by_id` (id -> group id, -1: not
        known yet) of the current space: a look-up in the dict only for an id the table lacks."""
        if ids is not None:
            return self._group_ids_by_id(ks, *ids)
        gid = self.gid
        # One pass over the batch in C (a lookup is a memory access into a large dict, so passes
        # count); keys not seen before get the next ids in first-seen order.
        got = list(map(gid.get, ks))
        if None in got:
            miss = list(compress(range(len(ks)), map(is_, got, repeat(None))))
            group_id = self.group_id
            for i in miss:
                got[i] = group_id(ks[i])
        return np.array(got, dtype=np.int64)

    def _group_ids_by_id(self, ks: list[bytes], space: int, a: np.ndarray) -> np.ndarray:
        if space != self.id_space:  # a new space: its ids mean other keys
            self.id_space, self.by_id = space, np.full(0, -1, dtype=np.int64)
        if not len(a):
            return a
        self.by_id = by_id = _grown(self.by_id, int(a.max()) + 1, -1)
        got = by_id[a]
        miss = np.flatnonzero(got < 0)
        if len(miss):
            # in first-seen order, as the dict path numbers new keys
            group_id = self.group_id
            for i, r in zip(miss.tolist(), a[miss].tolist(), strict=True):
                if by_id[r] < 0:
                    by_id[r] = group_id(ks[i])
            got = by_id[a]
        return got

    def group_id(self, k: bytes) -> int:
        g = self.gid.get(k)
        if g is None:
            g = self.gid[k] = len(self.gkey)
            self.gkey.append(k)
            if g >= len(self.nopen):
                self.nopen = _grown(self.nopen, g + 1, 0)
                self.closed = _grown(self.closed, g + 1, NO_WATERMARK)
        return g

    def alloc(self, m: int) -> np.ndarray:
        """m free handles, open (the caller sets their arrays)."""
        free = self.free
        take = min(m, len(free))
        got = free[len(free) - take:]
        del free[len(free) - take:]
        base = self.top
        need = self.top = base + m - take
        if need > len(self.alive):
            self.start = _grown(self.start, need, 0)
            self.last = _grown(self.last, need, 0)
            self.sid = _grown(self.sid, need, 0)
            self.group = _grown(self.group, need, 0)
            self.slot = _grown(self.slot, need, 0)
            self.alive = _grown(self.alive, need, False)
        if need > len(self.state):
            self.state += [None] * (len(self.alive) - len(self.state))
        handles = np.array(got + list(range(base, need)), dtype=np.int64)
        self.alive[handles] = True
        return handles

    def add_open(self, g: np.ndarray, start: np.ndarray, last: np.ndarray, sid: np.ndarray) -> np.ndarray:
        """Handles for new open sessions of groups `g` (their slots or states set by the caller)."""
        hs = self.alloc(len(g))
        self.group[hs] = g
        self.start[hs] = start
        self.last[hs] = last
        self.sid[hs] = sid
        np.add.at(self.nopen, g, 1)
        return hs

    def release(self, hs: np.ndarray, states: bool = False) -> None:
        """The sessions of handles `hs` closed or taken out (their slots are the caller's; with
        `states`, their Plan states are dropped here)."""
        self.alive[hs] = False
        hl = hs.tolist()
        self.free += hl
        np.subtract.at(self.nopen, self.group[hs], 1)
        if states:
            state = self.state
            for h in hl:
                state[h] = None

    def open_handles(self) -> np.ndarray:
        """The open sessions' handles, by creation (the order of a group's list on the one-event path)."""
        hs = np.flatnonzero(self.alive[:self.top])
        return hs[np.argsort(self.sid[hs], kind="stable")]

    def of_group(self, g: int) -> np.ndarray:
        """Group g's open sessions' handles, by creation."""
        top = self.top
        hs = np.flatnonzero(self.alive[:top] & (self.group[:top] == g))
        return hs[np.argsort(self.sid[hs], kind="stable")]

    def of_groups(self, gs: np.ndarray) -> np.ndarray:
        """The open sessions' handles of the groups `gs`."""
        top = self.top
        want = np.zeros(len(self.gkey), dtype=bool)
        want[gs] = True
        return np.flatnonzero(self.alive[:top] & want[self.group[:top]])

    def cluster(self, t: np.ndarray, g: np.ndarray, pos: np.ndarray, wm: np.ndarray, pre: Pre,
                gap: int, in_order: bool = False) -> Clusters | int:
        """Assign a batch's events that are not late (times `t`, group ids `g`, input positions `pos`
        ascending, the watermark before each `wm`) to sessions the way Session.add does one event at a
        time, or when that cannot be done without the one-event path the input position of the first
        event it stopped at (the events before it may be taken again; -1: no event in particular).

        The sessions of a group are the runs of its events and open sessions (`pre`) sorted by time
        that are at most GAP apart (what Session.add's merging leaves, whatever the arrival order), as
        long as nothing closes or merges along the way. So a batch is taken here when, for each run
        in input order, every event touches what the run holds when it arrives (start - GAP <= t <=
        last + GAP: it joins one session, never bridges two), the watermark before it has not passed
        that last + GAP (the session is still open when it arrives), and a run holds at most one open
        session. Then each run is one session, and its events are folded into it in input order, as
        Session.add folds them: the same states, bit for bit. A run without an open session is a new
        session, made at its first event in input order.

        `in_order`: the batch has no straggler (its times never go down, the first at or above the
        largest time before it) and no group has more than one open session. Then a group's items
        sorted by time are its open session and its events in input order (one stable sort by
        group), and every check holds: an event within GAP of its group's latest item is within
        GAP of its run's last time, which the watermark before it cannot pass (that is at most the
        event's own time), and a run cannot hold two open sessions."""
        n_ev, n_pre = len(t), len(pre.g)
        ig = np.concatenate((g, pre.g))
        i_start = np.concatenate((t, pre.start))
        i_last = np.concatenate((t, pre.last))
        i_pos = np.concatenate((pos, np.full(n_pre, -1, dtype=np.int64)))  # an open session comes first
        lo = int(i_start.min())
        span = int(i_last.max()) - lo + 2 * gap + 2
        if span <= 0 or span * (len(ig) + 1) >= 1 << 62:
            return -1  # times too far apart for the offsets the running maxima below use
        if in_order:  # by group, its open session first (pos -1), then its events as they came
            order = np.argsort(ig * 2 + (i_pos >= 0), kind="stable")
        else:  # by group, then time (an open session before an event at its start), as one int64 key
            order = _by_group_time(ig, i_start - lo, i_pos + 1, span)
        gs, ss, ls = ig[order], i_start[order] - lo, i_last[order] - lo
        m = len(gs)
        head = np.empty(m, dtype=bool)  # a group's first item
        head[0] = True
        np.not_equal(gs[1:], gs[:-1], out=head[1:])
        if in_order:
            run_last = ls  # times never go down within a group
        else:
            off = np.cumsum(head) * span  # each group's own range of values: one accumulate for all
            run_last = np.maximum.accumulate(ls + off) - off  # the largest last so far in the group
        new = head.copy()
        new[1:] |= ss[1:] > run_last[:-1] + gap
        cid_sorted = np.cumsum(new) - 1
        cid = np.empty(m, dtype=np.int64)
        cid[order] = cid_sorted
        k = int(cid_sorted[-1]) + 1
        if n_pre and not in_order:
            merged = np.bincount(cid[n_ev:], minlength=k) > 1
            if merged.any():  # events merge two open sessions: the first of their runs' events
                at = pos[merged[cid[:n_ev]]]
                return int(at.min()) if len(at) else -1
        if not in_order:  # each run in input order: what it holds before each item (its open session first)
            arr = np.lexsort((i_pos, cid))
            ca, sa, la = cid[arr], i_start[arr] - lo, i_last[arr] - lo
            first = np.empty(m, dtype=bool)
            first[0] = True
            np.not_equal(ca[1:], ca[:-1], out=first[1:])
            off = np.cumsum(first) * span
            held_last = np.maximum.accumulate(la + off) - off
            held_start = -(np.maximum.accumulate(off - sa) - off)
            later = np.flatnonzero(~first)
            prev = later - 1
            ta = sa[later]
            w = wm[arr[later]] - lo  # only events come after a run's first item
            ok = (ta >= held_start[prev] - gap) & (np.maximum(ta, w) <= held_last[prev] + gap)
            if not ok.all():
                return int(pos[arr[later[~ok]]].min())  # (only events come after a run's first item)
        has_events = np.bincount(cid[:n_ev], minlength=k) > 0
        pre_of = np.full(k, -1, dtype=np.int64)
        pre_of[cid[n_ev:]] = np.arange(n_pre)
        c_start = np.full(k, 1 << 62, dtype=np.int64)
        np.minimum.at(c_start, cid, i_start)
        c_last = np.full(k, -(1 << 62), dtype=np.int64)
        np.maximum.at(c_last, cid, i_last)
        c_group = np.empty(k, dtype=np.int64)
        c_group[cid] = ig
        c_first = np.full(k, n_ev, dtype=np.int64)  # the run's first event (index into the events)
        np.minimum.at(c_first, cid[:n_ev], np.arange(n_ev))
        return Clusters(cid[:n_ev], has_events, pre_of, c_start, c_last, c_group, c_first)


def _by_group_time(g: np.ndarray, t: np.ndarray, p: np.ndarray, span: int) -> np.ndarray:
    """The order of np.lexsort((p, t, g)) for times 0 <= t < span and positions p >= 0 unique within a
    (group, time): one sort of an int64 key made of the three (half the time of lexsort's three
    stable passes), when it fits in 63 bits."""
    width = int(p.max()) + 1
    if (int(g.max()) + 1) * span * width < 1 << 62:
        return np.argsort((g * span + t) * width + p)
    return np.lexsort((p, t, g))


@dataclass
class Pre:
    """The open sessions of a batch's groups: group id, start, last event time, handle."""

    g: np.ndarray
    start: np.ndarray
    last: np.ndarray
    handle: np.ndarray


@dataclass
class Clusters:
    """OpenIndex.cluster's answer: each event's run, and per run whether it has events, its open
    session (an index into Pre, -1: a new session), its start and last, its group and first event."""

    of_event: np.ndarray
    has_events: np.ndarray
    pre: np.ndarray
    start: np.ndarray
    last: np.ndarray
    group: np.ndarray
    first: np.ndarray
