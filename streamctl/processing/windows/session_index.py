"""The sessions of a session-window run, in one store that the one-event path and the batch kernel share.

Session windows (session.py) hold every session in this store: its columns
by handle (a session's number while it lives, and the slot of its
aggregation state in cells.SlotStates while the states are slots: start,
last event time, creation number, group, whether it is in use) are stdlib
`array.array`s, which the one-event path (Session.add) reads and writes an
item at a time, and the batch kernel (session_kernel.py) as numpy arrays over
the same memory (`view`, no copy); in a run the kernel never folds (rows per
event), plain lists. Per group (an id per group key): its open
sessions' handles in creation order, the closed ones `--late correct` keeps
(by start), and the last event time of its latest closed session (what
`--late drop` remembers). So a batch, stragglers included, is assigned with a
few sorts and array passes (`cluster`), its new sessions made, and the
sessions it closes written and released with array work, Python work being
left per distinct new key and per session made or closed, not per event; and
one event goes through add() against the same state. numpy is imported where
it is used: the Spark job's per-group replay goes through add() alone.

An array that numpy views cannot grow (BufferError): the kernel takes its
views where it uses them and holds none across `add_open`.

Keys no event can reach any more (no open session, no kept closed one, and
the latest closed one beyond 2 GAP of the watermark) are forgotten by
`compact`, once the store holds INDEX_SLACK more keys than four per open
group: memory bounded by the groups that matter.
"""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass
from itertools import compress, repeat
from operator import is_
from typing import TYPE_CHECKING, Any

from streamctl.processing.watermark import NO_WATERMARK

if TYPE_CHECKING:
    import numpy as np

# once the store holds this many more keys than four per open group, compact forgets the keys no
# event can reach (with the closed sessions an event that is not late can still reach kept)
INDEX_SLACK = 65536

# the columns by handle, each an array of int64 (q) or of bytes (b: whether the handle is in use)
COLUMNS = (("start", "q"), ("last", "q"), ("sid", "q"), ("group", "q"), ("alive", "b"))


class SessionStore:
    """Every session of a run, by handle; its group's open and kept closed ones, by group id.

    `arrays`: the columns are array.arrays, for the batch kernel's views (a run where it may fold,
    --emit final with --late drop); otherwise plain lists, the same items (add() alone uses them,
    and a list's item is read without making an int: a tenth fewer instructions a event there)."""

    def __init__(self, arrays: bool = True) -> None:
        column: Any = array if arrays else (lambda _code: [])
        self.gid: dict[bytes, int] = {}  # group key -> group id
        self.gkey: list[bytes] = []  # by group id: its key
        self.opened: list[list[int]] = []  # by group id: its open sessions' handles, by creation
        self.shut: list[list[int]] = []  # by group id: the closed sessions --late correct keeps, by start
        # by group id: the last event time of its latest closed session (NO_WATERMARK: none), --late drop
        self.closed = column("q")
        # by handle: the session's first and last event times (its window is [start, last + GAP)), its
        # creation number (Session's SID), its group id, whether the handle is in use (an open session,
        # or a closed one --late correct keeps)
        self.start = column("q")
        self.last = column("q")
        self.sid = column("q")
        self.group = column("q")
        self.alive = column("b")
        self.state: list = []  # by handle: its Plan state, while the states are not slots
        self.rev: list[int] = []  # by handle: the late events in it (--late correct)
        self.shown: list[list[tuple[int, int]] | None] = []  # by handle: its windows written and still valid
        self.free: list[int] = []
        # by key id (events.KeyIds) of the space `id_space`: its group id, -1 when not known yet
        self.by_id: Any = None
        self.id_space = -1
        self.compact_at = INDEX_SLACK  # compact once the store holds more keys than this
        self.views: dict[str, Any] = {}  # the numpy views made so far, dropped before a column grows

    def view(self, name: str) -> np.ndarray:
        """Column `name` (or `closed`) as a numpy array over its memory (writes go to the store)."""
        v = self.views.get(name)
        if v is None:
            import numpy as np

            v = self.views[name] = np.frombuffer(getattr(self, name), dtype=bool if name == "alive" else np.int64)
        return v

    def group_id(self, k: bytes) -> int:
        g = self.gid.get(k)
        if g is None:
            g = self.gid[k] = len(self.gkey)
            self.views.pop("closed", None)
            self.gkey.append(k)
            self.opened.append([])
            self.shut.append([])
            self.closed.append(NO_WATERMARK)
        return g

    def new(self, g: int, start: int, last: int, sid: int) -> int:
        """A handle for a new session of group g (in no group list yet: the caller puts it in one)."""
        if self.free:
            h = self.free.pop()
            self.start[h], self.last[h], self.sid[h], self.group[h], self.alive[h] = start, last, sid, g, 1
            self.rev[h], self.shown[h] = 0, None
            return h
        h = len(self.start)
        self.views.clear()
        for col, v in zip((self.start, self.last, self.sid, self.group, self.alive),
                          (start, last, sid, g, 1), strict=True):
            col.append(v)
        self.state.append(None)
        self.rev.append(0)
        self.shown.append(None)
        return h

    def release(self, h: int) -> None:
        """Handle h's session is written or merged away (out of its group's list: the caller's part)."""
        self.alive[h] = 0
        self.state[h] = None
        self.free.append(h)

    def alloc(self, m: int) -> list[int]:
        """m handles in use (the caller sets their columns; `rev` and `shown` stay 0 and None: the
        kernel runs without rows per event)."""
        free = self.free
        take = min(m, len(free))
        got = free[len(free) - take:]
        del free[len(free) - take:]
        base = len(self.start)
        grow = m - take
        if grow:
            self.views.clear()
            for name, code in COLUMNS:
                getattr(self, name).frombytes(bytes(grow * (8 if code == "q" else 1)))
            self.state += [None] * grow
            self.rev += [0] * grow
            self.shown += [None] * grow
        return got + list(range(base, base + grow))

    def add_open(self, g: np.ndarray, start: np.ndarray, last: np.ndarray, sid: np.ndarray) -> np.ndarray:
        """Handles for new open sessions of groups `g`, each put last in its group's list (their
        states set by the caller)."""
        import numpy as np

        hs = np.array(self.alloc(len(g)), dtype=np.int64)
        self.view("group")[hs] = g
        self.view("start")[hs] = start
        self.view("last")[hs] = last
        self.view("sid")[hs] = sid
        self.view("alive")[hs] = True
        # (map: a loop in C, per session made)
        _all(map(list.append, map(self.opened.__getitem__, g.tolist()), hs.tolist()))
        return hs

    def release_many(self, hs: np.ndarray, groups: list[int]) -> None:
        """The open sessions of handles `hs` (of groups `groups`), their states in slots, are written:
        out of their groups' lists, their handles free (their slots: the caller's part)."""
        self.view("alive")[hs] = False
        hl = hs.tolist()
        _all(map(list.remove, map(self.opened.__getitem__, groups), hl))
        self.free += hl

    def open_handles(self) -> list[int]:
        """Every open session's handle, group by group, each group's by creation."""
        return [h for hs in self.opened for h in hs]

    def of_groups(self, gs: np.ndarray) -> np.ndarray:
        """The open sessions' handles of the groups `gs` (with the kernel, where only open sessions are
        in use)."""
        import numpy as np

        want = np.zeros(len(self.gkey), dtype=bool)
        want[gs] = True
        return np.flatnonzero(self.view("alive") & want[self.view("group")])

    def group_ids(self, ks: list[bytes], ids: tuple[int, np.ndarray] | None = None) -> np.ndarray:
        """Each key's group id (keys not seen before get the next ids in first-seen order). With the
        keys' ids (events.KeyIds: (id space, ids)), by the table `by_id` (id -> group id, -1: not
        known yet) of the current space: a look-up in the dict only for an id the table lacks."""
        import numpy as np

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
        import numpy as np

        if space != self.id_space or self.by_id is None:  # a new space: its ids mean other keys
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

    def compact(self, reach: int) -> None:
        """Forget the groups with no open session, no kept closed one and no latest closed one whose
        last event time is after `reach` (the ones an event that is not late can still be within GAP
        of): group ids renumbered in their order, the key ids' table made again."""
        closed = self.closed
        keep = [g for g in range(len(self.gkey))
                if self.opened[g] or self.shut[g] or (closed[g] != NO_WATERMARK and closed[g] > reach)]
        group = self.group
        for h in self.free:  # a free handle's group: one that is still there
            group[h] = 0
        for new, g in enumerate(keep):
            for h in self.opened[g]:
                group[h] = new
            for h in self.shut[g]:
                group[h] = new
        self.gkey = [self.gkey[g] for g in keep]
        self.gid = {k: g for g, k in enumerate(self.gkey)}
        self.opened = [self.opened[g] for g in keep]
        self.shut = [self.shut[g] for g in keep]
        self.views.clear()
        kept = [closed[g] for g in keep]
        self.closed = array("q", kept) if isinstance(closed, array) else kept
        self.by_id, self.id_space = None, -1
        self.compact_at = 4 * sum(1 for hs in self.opened if hs) + INDEX_SLACK


def _all(calls: Any) -> None:
    """Run an iterator of calls to its end in C (each call's result, None, dropped)."""
    deque(calls, maxlen=0)


def _grown(a: np.ndarray, need: int, fill: int) -> np.ndarray:
    import numpy as np

    cap = max(len(a), 16)
    while cap < need:
        cap *= 2
    if cap == len(a):
        return a
    b = np.full(cap, fill, dtype=a.dtype)
    b[:len(a)] = a
    return b


def cluster(t: np.ndarray, g: np.ndarray, pos: np.ndarray, wm: np.ndarray, pre: Pre,
        gap: int, in_order: bool = False) -> Clusters | int:
    """Assign a batch's events that are not late (times `t`, group ids `g`, input positions `pos`
    ascending, the watermark before each `wm`) to sessions the way Session.add does one event at a
    time, or when that cannot be done without the one-event path the input position of the first
    event it stopped at (the events before it may be taken again; -1: no event in particular).

    The sessions of a group are the runs of its events and open sessions (`pre`) sorted by time
    that are at most GAP apart (what Session.add's merging leaves, whatever the arrival order), as
    long as nothing closes or merges along the way. So a batch is taken here when, for each run
    in input order, every event touches what the run holds when it arrives (start - GAP <= t <=
    last + GAP: it joins one session, never bridges two), the watermark before it is below that
    last + GAP (the session is still open when it arrives: it closes when the watermark reaches
    its end), and a run holds at most one open session. Then each run is one session, and its
    events are folded into it in input order, as Session.add folds them: the same states, bit
    for bit. A run without an open session is a new session, made at its first event in input
    order.

    `in_order`: the batch has no straggler (its times never go down, the first at or above the
    largest time before it) and no group has more than one open session. Then a group's items
    sorted by time are its open session and its events in input order (one stable sort by
    group), and every check holds but one: an event within GAP of its group's latest item is
    within GAP of its run's last time, and a run cannot hold two open sessions; the watermark
    before it is at most the event's own time, so it is below the run's last + GAP unless both
    are that time: a tie (no lateness, the event at the largest time before it, exactly GAP
    after its run's last), where the session closed before the event came. Only those are
    checked."""
    import numpy as np

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
        # an event exactly GAP after its run's last that the watermark before it reached: the
        # session closed (only events come after a group's first item, and they are not new)
        edge = np.flatnonzero(ss[1:] == ls[:-1] + gap) + 1
        if len(edge):
            edge = edge[gs[edge] == gs[edge - 1]]
            ev = order[edge]
            shut = wm[ev] - lo >= ss[edge]
            if shut.any():
                return int(pos[ev[shut]].min())
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
        reach = held_last[prev] + gap  # the session's end: it closes when the watermark reaches it
        ok = (ta >= held_start[prev] - gap) & (ta <= reach) & (w < reach)
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
    import numpy as np

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
    """cluster's answer: each event's run, and per run whether it has events, its open
    session (an index into Pre, -1: a new session), its start and last, its group and first event."""

    of_event: np.ndarray
    has_events: np.ndarray
    pre: np.ndarray
    start: np.ndarray
    last: np.ndarray
    group: np.ndarray
    first: np.ndarray
