"""The batch kernel of the stream-stream join: `IntervalJoin`, the rule of
joins/stream_stream.py (StreamStreamJoin.push states it) evaluated on a chunk of records at a
time with numpy, for two plain files written as JSON lines (read as columns by
joins/plain_inputs.py). tests/props/test_join_props.py and tests/props/test_join_plain_fast.py
hold it to the reference: the same rows, bytes, order and counts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streamctl.processing.joins import JoinStats
from streamctl.processing.watermark import Watermark, after_array

if TYPE_CHECKING:
    import numpy as np

# IntervalJoin evaluates the rule of joins/stream_stream.py on a chunk of some thousands of records in input order at
# once, instead of a dict lookup, a list walk and a queue step per event. Its input is what
# joins/plain_inputs.py sends from the reading processes: numeric columns as arrays (no Python
# object per event) and the keys, normalized keys and payloads as object arrays.
#
# - A key's code (plain_inputs.key_codes) is its hash with the sign and lowest bits cleared (-2 for
#   a null key); the side goes into the lowest bit, so one sorted array answers "the other side's events with
#   this key": the target of an event is its own code with that bit flipped (a null key has a
#   negative code and is never a target). Unequal keys may share a code (a hash collision), so a
#   candidate pair is checked on the normalized keys before it counts.
# - W(p) for the chunk is watermark.after_array; the state is the events of earlier chunks still
#   in the window, as runs sorted by (code, position).
# - Rows are sorted by (the position they come out at, pairs before unmatched, the earlier event's
#   position | (time, position)) and written as the reference's rows through the JSON-lines
#   writer, three pieces a row: `{"key":K` of the later event, then `,"left":L` and `,"right":R}`
#   and a newline (or their null forms). A payload is a line's own bytes when they are orjson's
#   for its value, else its value dumped once.

_KEY, _LEFT, _RIGHT, _END = b'{"key":', b',"left":', b',"right":', b"}\n"
_NULL = b"null"
CHUNK = 16384  # records matched at a time: large enough that numpy's per-call costs vanish
_LOW = (1 << 32) - 1
_POS_BITS = 1 << 31
_NEVER = -(1 << 63)


def _expand(lo: np.ndarray, cnt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ranges [lo[i], lo[i] + cnt[i]): (i, j) for every j in range i, i ascending."""
    import numpy as np

    total = int(cnt.sum())
    owner = np.repeat(np.arange(len(cnt), dtype=np.int64), cnt)
    start = np.cumsum(cnt) - cnt
    return owner, np.arange(total, dtype=np.int64) - np.repeat(start - lo, cnt)


def _matches(codes: np.ndarray, tgt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(i, j) for every tgt[i] == codes[j], i ascending; both arrays sorted."""
    import numpy as np

    none = np.empty(0, dtype=np.int64)
    if not len(codes) or not len(tgt):
        return none, none
    lo = codes.searchsorted(tgt, "left")
    hit = np.flatnonzero(codes.take(np.minimum(lo, len(codes) - 1)) == tgt)
    if not len(hit):
        return none, none
    lo = lo[hit]
    owner, j = _expand(lo, codes.searchsorted(tgt[hit], "right") - lo)
    return hit[owner], j


class _Events:
    """Events as numeric columns sorted by (code, position). `slot` finds an event's key, normalized
    key and payload in the object store (chunk number << 32 | index in that chunk): objects never
    move (permuting object arrays touches every object's reference count, 100 ns an event)."""

    __slots__ = ("code", "t", "pos", "side", "matched", "slot", "t_max")
    COLS = ("code", "t", "pos", "side", "matched", "slot")

    def __init__(self, code: np.ndarray, t: np.ndarray, pos: np.ndarray, side: np.ndarray, matched: np.ndarray,
                 slot: np.ndarray) -> None:
        self.code, self.t, self.pos, self.side, self.matched, self.slot = code, t, pos, side, matched, slot
        self.t_max = int(t.max()) if len(t) else _NEVER

    def take(self, which: np.ndarray) -> _Events:
        return _Events(*(getattr(self, c)[which] for c in self.COLS))

    @staticmethod
    def merged(older: _Events, newer: _Events, floor: int, gone: list[_Gone]) -> _Events:
        """Two runs as one sorted by (code, position), without the events that have left the window
        (time below `floor`), which go to `gone`: the stable sort of the two sorted runs merges them
        in one pass."""
        import numpy as np

        a, b = older.t >= floor, newer.t >= floor
        for run, stay in ((older, a), (newer, b)):
            if not stay.all():
                gone.append(_Gone(run, ~stay))
        both = _Events(*(np.concatenate((getattr(older, c)[a], getattr(newer, c)[b])) for c in _Events.COLS))
        return both.take(np.argsort(both.code, kind="stable"))


class _Gone:
    """Events that left the window (some of a run's, sorted as it is): their codes, times and slots,
    while an event could still be late because of one (IntervalJoin._partner_left)."""

    __slots__ = ("code", "t", "slot", "t_max", "first")

    def __init__(self, run: _Events, which: np.ndarray | None = None) -> None:
        code, t, slot = run.code, run.t, run.slot
        if which is not None:
            code, t, slot = code[which], t[which], slot[which]
        self.code: np.ndarray = code
        self.t: np.ndarray = t
        self.slot: np.ndarray = slot
        self.t_max = int(self.t.max())
        self.first = int(self.slot.min()) >> 32  # the oldest chunk whose normalized keys it needs


class IntervalJoin:
    """The batch kernel: rows of a stream-stream join of records fed in input order, a chunk at a time.
    Counts go to `stats` (records, no_time and late per side, max_state)."""

    def __init__(self, within: int, how: str, write: Callable[[bytes], None], lateness: int = 0,
                 late: Callable[[int, bytes], None] | None = None, stats: JoinStats | None = None) -> None:
        self.within = within
        self.clock = Watermark(lateness)
        self.next_pos = 0
        self.keep = (how in ("left", "outer"), how in ("right", "outer"))
        self.inner = how == "inner"
        self.write = write
        self.late_sink = late
        self.stats = JoinStats() if stats is None else stats
        # the events that can still pair or leave, as runs sorted by (code, position), oldest first
        self.runs: list[_Events] = []
        # the events that left the runs, sorted by (code, position) each, while an on-time event could
        # be within `within` of one (StreamStreamJoin.push: such an event is late)
        self.gone: list[_Gone] = []
        # chunk number -> (keys, payloads, normalized keys) of its events, while one of them is in the
        # state; then only the normalized keys while `gone` needs them
        self.store: dict[int, tuple[Any, Any, np.ndarray]] = {}  # (None, None, normalized keys) then
        self.chunks = 0

    def _objects_at(self, slot: np.ndarray, what: int) -> np.ndarray:
        """Column `what` (0 keys, 1 payloads, 2 normalized keys) of the store at these slots."""
        import numpy as np

        store = self.store
        chunk = slot >> 32
        idx = slot & _LOW
        first = int(chunk[0]) if len(chunk) else 0
        if len(chunk) == 0 or (chunk == first).all():
            return store[first][what][idx] if len(chunk) else np.empty(0, dtype=object)
        # grouped by chunk with one sort, so each chunk's part is gathered from a slice
        by = np.argsort(chunk, kind="stable")
        sorted_chunks = chunk[by]
        cuts = np.flatnonzero(sorted_chunks[1:] != sorted_chunks[:-1]) + 1
        out = np.empty(len(slot), dtype=object)
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(by)], strict=True):
            part = by[lo:hi]
            out[part] = store[int(sorted_chunks[lo])][what][idx[part]]
        return out

    def chunk(self, side: np.ndarray, t: np.ndarray, timed: np.ndarray | None, code: np.ndarray,
              keys: np.ndarray, payloads: np.ndarray, nks: np.ndarray) -> None:
        """The next records in input order: side (False LEFT, True RIGHT), time (where `timed`, when
        given), key codes without the side bit (key_codes), keys, payloads (JSON bytes) and
        normalized keys, one array each."""
        import numpy as np

        n = len(side)
        if not n:
            return
        stats = self.stats
        n1 = int(np.count_nonzero(side))
        stats.records[0] += n - n1
        stats.records[1] += n1
        pos = np.arange(self.next_pos, self.next_pos + n, dtype=np.int64)
        self.next_pos += n
        if timed is not None and not timed.all():
            untimed_right = int(np.count_nonzero(side[~timed]))
            stats.no_time[0] += n - int(np.count_nonzero(timed)) - untimed_right
            stats.no_time[1] += untimed_right
            side, t, code, pos = side[timed], t[timed], code[timed], pos[timed]
            keys, payloads, nks = keys[timed], payloads[timed], nks[timed]
            if not len(side):
                return
        clock = self.clock
        before = clock.value  # the watermark after the chunks before (NO_WATERMARK before any time)
        wm, high = after_array(t, clock.max_time, clock.lateness)
        clock.observe(high)
        behind = t < wm  # (an event that moves the watermark is never behind it)
        late = behind
        if behind.any():
            late = t + self.within < wm  # the reference's tests (StreamStreamJoin.push)
            left = behind & ~late
            if left.any():
                late |= self._partner_left(np.flatnonzero(left), side, t, wm, code | side, nks, late)
        if late.any():
            for i in np.flatnonzero(late).tolist():
                which = int(side[i])
                stats.late[which] += 1
                if self.late_sink is not None:
                    self.late_sink(which, payloads[i])
            ok = ~late
            side, t, code, pos, wm = side[ok], t[ok], code[ok], pos[ok], wm[ok]
            keys, payloads, nks = keys[ok], payloads[ok], nks[ok]
            if not len(side):
                return
        self._rows(t, side, pos, wm, before, code | side, keys, payloads, nks)

    def _partner_left(self, cand: np.ndarray, side: np.ndarray, t: np.ndarray, wm: np.ndarray,
                      code: np.ndarray, nks: np.ndarray, late: np.ndarray) -> np.ndarray:
        """Which of the chunk's events `cand` (behind the watermark, not behind the window) are late
        because an event of the other side with their key, at most `within` before them, has left
        the state (W(b) > t_a + within) before they came: one of an earlier chunk (in the runs or
        gone), or an earlier one of this chunk that is not late (`late`: the chunk's first test).
        `code` has the side bit."""
        import numpy as np

        within = self.within
        out = np.zeros(len(t), dtype=bool)
        cand = cand[code[cand] >= 0]  # a null key has no partner
        if not len(cand):
            return out
        tgt = code[cand] ^ 1
        by = np.argsort(tgt, kind="stable")
        cand, tgt = cand[by], tgt[by]
        hit = np.zeros(len(cand), dtype=bool)
        segs: list[_Gone | _Events] = [*self.gone, *self.runs]
        for seg in segs:
            ci, ai = _matches(seg.code, tgt)
            if not len(ci):
                continue
            b, ta = cand[ci], seg.t[ai]
            ok = (ta >= t[b] - within) & (ta + within < wm[b])
            ci, ai = ci[ok], ai[ok]
            if len(ci):
                hit[ci[np.equal(self._objects_at(seg.slot[ai], 2), nks[cand[ci]])]] = True
        # this chunk's events before them
        order = np.argsort(code, kind="stable")
        ci, ai = _matches(code[order], tgt)
        a, b = order[ai], cand[ci]
        ok = (a < b) & ~late[a] & (t[a] >= t[b] - within) & (t[a] + within < wm[b])
        ci, a, b = ci[ok], a[ok], b[ok]
        same = np.equal(nks[a], nks[b])
        ci, a, b = ci[same], a[same], b[same]
        is_cand = np.zeros(len(t), dtype=bool)
        is_cand[cand] = True
        fixed = ~is_cand[a]
        hit[ci[fixed]] = True
        out[cand[hit]] = True
        if not fixed.all():
            # a partner that is itself behind the watermark counts only if it is not late: decided
            # in input order
            edges: dict[int, list[int]] = {}
            for bb, aa in zip(b[~fixed].tolist(), a[~fixed].tolist(), strict=True):
                edges.setdefault(bb, []).append(aa)
            for bb in sorted(edges):
                if not out[bb] and any(not out[aa] for aa in edges[bb]):
                    out[bb] = True
        return out

    def _rows(self, t: np.ndarray, side: np.ndarray, pos: np.ndarray, wm: np.ndarray, before: int,
              code: np.ndarray, key_a: np.ndarray, pay_a: np.ndarray, nk_a: np.ndarray) -> None:
        """Pairs with the state and within the chunk, then the events that leave (an event a pairs with
        b when their codes target each other, |t_a - t_b| <= within and t_a + within >= W_b: one
        that left the window during the chunk fails the last test)."""
        import numpy as np

        within = self.within
        n = len(t)
        number = self.chunks
        self.chunks += 1
        self.store[number] = (key_a, pay_a, nk_a)
        order = np.argsort(code, kind="stable")  # (code, position): positions ascend in the chunk
        cur = _Events(code[order], t[order], pos[order], side[order], np.zeros(n, dtype=bool),
                      (number << 32) | order)
        # the probes (events with a key) in target order: searchsorted is several times faster
        # with sorted needles
        target = code ^ 1
        probe = np.flatnonzero(code >= 0) if int(cur.code[0]) < 0 else np.arange(n, dtype=np.int64)
        probe = probe[np.argsort(target[probe], kind="stable")]
        tgt = target[probe]
        # pairs: (b's index in the chunk, the events a is among, a's index there)
        found: list[tuple[np.ndarray, _Events, np.ndarray]] = []
        held = (*self.runs, cur)
        for seg in held:
            codes = seg.code
            lo = codes.searchsorted(tgt, "left")
            # the probes whose target is there, and where its events end: searched for those only
            # (most probes find nothing in most runs)
            hit = np.flatnonzero(codes.take(np.minimum(lo, len(codes) - 1)) == tgt)
            if not len(hit):
                continue
            lo = lo[hit]
            bi, ai = _expand(lo, codes.searchsorted(tgt[hit], "right") - lo)
            b = probe[hit[bi]]
            ta = seg.t[ai]
            ok = (np.abs(ta - t[b]) <= within) & (ta + within >= wm[b])
            if seg is cur:
                ok &= seg.pos[ai] < pos[b]
            if not ok.all():
                b, ai = b[ok], ai[ok]
            if len(b):
                # a hash collision shares a code, not a key
                same = np.equal(self._objects_at(seg.slot[ai], 2), nk_a[b])
                if not same.all():
                    b, ai = b[same], ai[same]
                found.append((b, seg, ai))
        evicting = not self.inner
        if evicting and found:
            where = np.empty(n, dtype=np.int64)  # a chunk index's place in cur
            where[order] = np.arange(n, dtype=np.int64)
            for b, seg, ai in found:
                seg.matched[ai] = True
                cur.matched[where[b]] = True
        # the rows: pairs at b's position by a's position; leavers after them by (time, position)
        rows = _Rows()
        for b, seg, ai in found:
            bp, ap = pay_a[b], self._objects_at(seg.slot[ai], 1)
            right_b = side[b]
            rows.add(pos[b], 0, seg.pos[ai], np.zeros(len(b), dtype=np.int64), key_a[b],
                     np.where(right_b, ap, bp), np.where(right_b, bp, ap))
        wm_last = int(wm[-1])
        if evicting:
            for seg in held:
                end = seg.t + within
                self._leave(rows, seg, (end < wm_last) & ~seg.matched & (end >= before),
                            lambda ends: pos[np.searchsorted(wm, ends, "right")])
        if rows.when:
            self.write(rows.text())
        # The chunk joins the state as a run, runs whose events have all left the window go, and
        # the newest two merge while the older is no larger: a binary counter, so an event is
        # merged about log2(state / chunk) times instead of once a chunk (merging every chunk into
        # one run cost a third of the join). Events that left but wait in a run for their merge
        # fail the probe's window test and are never emitted twice (end >= the watermark before).
        # The events that leave the runs go to `gone`, kept until W > time + 2 * within.
        floor = wm_last - within
        gone = [g for g in self.gone if g.t_max >= floor - within]
        runs: list[_Events] = []
        for r in self.runs:
            if r.t_max >= floor:
                runs.append(r)
            elif len(r.t):
                gone.append(_Gone(r))
        alive = cur.t >= floor
        if alive.all():
            runs.append(cur)
        elif alive.any():
            runs.append(cur.take(alive))
            gone.append(_Gone(cur, ~alive))
        else:
            gone.append(_Gone(cur))
        while len(runs) > 1 and len(runs[-2].t) <= len(runs[-1].t):
            newer = runs.pop()
            runs.append(_Events.merged(runs.pop(), newer, floor, gone))
        self.runs = runs
        self.gone = gone
        store = self.store
        held_from = min(int(r.slot.min()) for r in runs) >> 32 if runs else self.chunks
        keys_from = min([held_from, *(g.first for g in gone)])
        for c in [c for c in store if c < held_from]:
            if c < keys_from:
                del store[c]
            elif store[c][0] is not None:
                store[c] = (None, None, store[c][2])  # only a gone event's normalized key is asked for
        held_now = sum(len(r.t) for r in runs)
        if held_now > self.stats.max_state:
            self.stats.max_state = held_now

    def _leave(self, rows: _Rows, seg: _Events, gone: np.ndarray,
               when: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        """Rows for the leaving events (`gone`) whose side --how keeps, at the positions `when` gives
        for their times + within (None: the end of input)."""
        import numpy as np

        keep = self.keep
        if not (keep[0] and keep[1]):
            gone &= seg.side if keep[1] else ~seg.side
        idx = np.flatnonzero(gone)
        if not len(idx):
            return
        slots = seg.slot[idx]
        pays, right_e, null = self._objects_at(slots, 1), seg.side[idx], np.array([_NULL], dtype=object)
        at = np.zeros(len(idx), dtype=np.int64) if when is None else when(seg.t[idx] + self.within)
        rows.add(at, 1, seg.t[idx], seg.pos[idx], self._objects_at(slots, 0),
                 np.where(right_e, null, pays), np.where(right_e, pays, null))

    def finish(self) -> None:
        """End of input: every event still in the window leaves, unmatched ones by (time, position)."""
        runs, self.runs, self.gone = self.runs, [], []
        if not self.inner:
            rows = _Rows()
            before = self.clock.value
            for st in runs:
                self._leave(rows, st, ~st.matched & (st.t + self.within >= before))
            if rows.when:
                self.write(rows.text())
        self.store.clear()


class _Rows:
    """Output rows of a chunk, sorted by (position they come out at, kind: 0 pair 1 leaver, the
    earlier event's position | the leaver's time, 0 | the leaver's position): keys, left and right
    payloads."""

    def __init__(self) -> None:
        self.when: list[np.ndarray] = []
        self.kind: list[np.ndarray] = []
        self.third: list[np.ndarray] = []
        self.fourth: list[np.ndarray] = []
        self.pieces: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] = ([], [], [])

    def add(self, when: np.ndarray, kind: int, third: np.ndarray, fourth: np.ndarray, keys: np.ndarray,
            lefts: np.ndarray, rights: np.ndarray) -> None:
        import numpy as np

        self.when.append(when)
        self.kind.append(np.full(len(when), kind, dtype=np.int64))
        self.third.append(third)
        self.fourth.append(fourth)
        for col, part in zip(self.pieces, (keys, lefts, rights), strict=True):
            col.append(part)

    def text(self) -> bytes:
        """The rows as JSON lines: orjson.dumps({"key": K, "left": L, "right": R}) + newline each."""
        import numpy as np
        import orjson

        cat = np.concatenate
        when, third = cat(self.when), cat(self.third)
        if not len(when):
            return b""
        if any(k[0] for k in self.kind if len(k)):  # leavers: the four keys
            order = np.lexsort((cat(self.fourth), third, cat(self.kind), when))
        elif int(when.max()) < _POS_BITS and int(third.max()) < _POS_BITS:
            # pairs only, positions below 2**31: one key, (b's position, a's position), unique
            order = np.argsort((when << 31) | third)
        else:
            order = np.lexsort((third, when))
        n = len(order)
        keys, lefts, rights = (cat(col)[order].tolist() for col in self.pieces)
        parts: list[Any] = [_LEFT] * (6 * n)
        try:
            parts[0::6] = map(_KEY.__add__, map(orjson.dumps, keys))
        except TypeError:  # a key beyond 64 bits: its exact text
            from streamctl.processing import exactjson

            parts[0::6] = map(_KEY.__add__, map(exactjson.dumps, keys))
        parts[2::6] = lefts
        parts[3::6] = [_RIGHT] * n
        parts[4::6] = rights
        parts[5::6] = [_END] * n
        return b"".join(parts)
