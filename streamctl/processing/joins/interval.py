"""The stream-stream join of batched input, a chunk of records at a time with numpy.

The rows, bytes and order are StreamStreamJoin's (joins/stream_stream.py states the rule; the
record-at-a-time class is the reference, tests/props/test_join_plain_fast.py holds the two
together). What changes is how the rule is evaluated: instead of a dict lookup, a list walk and
a queue per event, a chunk of some thousands of records is matched at once.

The work is split in two steps that can run in separate processes (joins/driver.py forks a
reader per file):

- The reading side (joins/plain_inputs.py's file_blocks) does everything that needs only one
  file: it parses a block, reads its times, merge keys and join keys, and gives each key a
  code (key_codes: its hash with the sign and lowest bits cleared, -2 for a null key). It
  sends numeric columns as bytes, so the joining side builds no Python object per event.
- `IntervalJoin.chunk` takes the merged records and computes what needs the events before
  them: the watermark W_i = (running max of t up to i) - lateness, and lateness (record i is
  late when t_i + within < W_i: then it cannot be above the running max, so this is the
  reference's test). Equal keys have equal codes; unequal keys may share one (a hash
  collision), so a candidate pair is checked on the normalized keys (joins.keys.norm_key)
  before it counts.
- `IntervalJoin` matches. The code of an event is its key id with the side in the lowest bit,
  so one sorted array answers "the other side's events with this key": the target of an event
  is its own code with that bit flipped (a null key has a negative code and is never a target).
- State: the events of earlier chunks still in the window, sorted by (code, position). An event
  a pairs with b of the chunk when their codes target each other, |t_a - t_b| <= within and
  t_a + within >= W_b (an event that left the window during the chunk fails the last test).
  Pairs within the chunk are found the same way in the chunk sorted by code, keeping those
  whose earlier event comes first. After each chunk, the events whose time + within is behind
  the watermark leave the state, and the chunk's others join it (a merge of two sorted runs).
- Unmatched events (left/right/outer): an event leaves at the first position where the
  watermark passes t + within (its pairs are all made before then), and comes out there, after
  that position's pairs, by (time, position), when it never paired and its side is kept. At
  the end of input the rest come out by (time, position).
- Rows are sorted by (the position they come out at, pairs before unmatched, the earlier
  event's position | (time, position)) and written as the reference's JSON lines, three pieces
  a row: `{"key":K` of the later event, then `,"left":L` and `,"right":R}` + newline (or their
  null forms). A payload is a line's own bytes when they are orjson's for its value, else its
  value dumped once.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from operator import is_
from typing import Any

import numpy as np
import orjson

from streamctl.processing.watermark import after_array

# The pieces of an output row
_KEY, _LEFT, _RIGHT, _END = b'{"key":', b',"left":', b',"right":', b"}\n"
_NULL = b"null"
CHUNK = 16384  # records matched at a time: large enough that numpy's per-call costs vanish
_I8 = np.int64
_hash = hash  # (tests give every key one hash, to check that keys, not codes, decide a pair)
_CODE_BITS = (1 << 63) - 2  # a key's hash without its sign bit and lowest bit (the side goes there)

def _objects(items: list[Any]) -> np.ndarray:
    """A 1-d object array of the items (tuples stay elements, not rows)."""
    return np.fromiter(items, dtype=object, count=len(items))


def _expand(lo: np.ndarray, cnt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ranges [lo[i], lo[i] + cnt[i]): (i, j) for every j in range i, i ascending."""
    total = int(cnt.sum())
    owner = np.repeat(np.arange(len(cnt), dtype=_I8), cnt)
    start = np.cumsum(cnt) - cnt
    return owner, np.arange(total, dtype=_I8) - np.repeat(start - lo, cnt)


def key_codes(keys: list[Any], norm: Callable[[Any], Any]) -> tuple[np.ndarray, list[Any] | None]:
    """The keys' codes without the side bit (a key's hash with its sign bit and lowest bit cleared;
    -2 for a null key, never a probe, never a target) and their normalized forms when some key is
    not a string (equal objects with their members in another order are one key), else None."""
    n = len(keys)
    if {*map(type, keys)} == {str}:
        nks: list[Any] = keys
        out = None
    else:
        nks = out = [k if k.__class__ is str or k is None else norm(k) for k in keys]
    code = np.fromiter(map(_hash, nks), dtype=_I8, count=n) & _CODE_BITS
    if None in nks:
        code[np.fromiter(map(is_, nks, repeat(None)), dtype=bool, count=n)] = -2
    return code, out


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


_LOW = (1 << 32) - 1
_POS_BITS = 1 << 31
_NEVER = -(1 << 63)


def _merged(older: _Events, newer: _Events, floor: int) -> _Events:
    """Two runs as one sorted by (code, position), without the events that have left the window (time
    below `floor`): the stable sort of the two sorted runs merges them in one pass."""
    a, b = older.t >= floor, newer.t >= floor
    both = _Events(*(np.concatenate((getattr(older, c)[a], getattr(newer, c)[b])) for c in _Events.COLS))
    return both.take(np.argsort(both.code, kind="stable"))


class IntervalJoin:
    """Rows of a stream-stream join of records fed in input order, a chunk at a time."""

    def __init__(self, within: int, how: str, write: Callable[[bytes], None], lateness: int = 0,
                 late: Callable[[int, bytes], None] | None = None) -> None:
        self.within = within
        self.lateness = lateness
        self.next_pos = 0
        self.max_t: int | None = None  # the largest time seen
        self.keep = (how in ("left", "outer"), how in ("right", "outer"))
        self.inner = how == "inner"
        self.write = write
        self.late_sink = late
        self.late = [0, 0]
        self.no_time = [0, 0]
        self.records = [0, 0]
        # the events that can still pair or leave, as runs sorted by (code, position), oldest first
        self.runs: list[_Events] = []
        # chunk number -> (keys, payloads, normalized keys) of its events, while one of them is in the state
        self.store: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.chunks = 0
        self.wm_end: int | None = None  # the watermark after the last chunk
        self.max_state = 0

    def _objects_at(self, slot: np.ndarray, what: int) -> np.ndarray:
        """Column `what` (0 keys, 1 payloads, 2 normalized keys) of the store at these slots."""
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
        n = len(side)
        if not n:
            return
        n1 = int(np.count_nonzero(side))
        self.records[0] += n - n1
        self.records[1] += n1
        pos = np.arange(self.next_pos, self.next_pos + n, dtype=_I8)
        self.next_pos += n
        if timed is not None and not timed.all():
            untimed_right = int(np.count_nonzero(side[~timed]))
            self.no_time[0] += n - int(np.count_nonzero(timed)) - untimed_right
            self.no_time[1] += untimed_right
            side, t, code, pos = side[timed], t[timed], code[timed], pos[timed]
            keys, payloads, nks = keys[timed], payloads[timed], nks[timed]
            if not len(side):
                return
        wm, self.max_t = after_array(t, self.max_t, self.lateness)
        late = t + self.within < wm
        if late.any():
            for i in np.flatnonzero(late).tolist():
                which = int(side[i])
                self.late[which] += 1
                if self.late_sink is not None:
                    self.late_sink(which, payloads[i])
            ok = ~late
            side, t, code, pos, wm = side[ok], t[ok], code[ok], pos[ok], wm[ok]
            keys, payloads, nks = keys[ok], payloads[ok], nks[ok]
            if not len(side):
                return
        self._rows(t, side, pos, wm, code | side, keys, payloads, nks)

    def _rows(self, t: np.ndarray, side: np.ndarray, pos: np.ndarray, wm: np.ndarray, code: np.ndarray,
              key_a: np.ndarray, pay_a: np.ndarray, nk_a: np.ndarray) -> None:
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
        probe = np.flatnonzero(code >= 0) if int(cur.code[0]) < 0 else np.arange(n, dtype=_I8)
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
            where = np.empty(n, dtype=_I8)  # a chunk index's place in cur
            where[order] = np.arange(n, dtype=_I8)
            for b, seg, ai in found:
                seg.matched[ai] = True
                cur.matched[where[b]] = True
        # the rows: pairs at b's position by a's position; leavers after them by (time, position)
        rows = _Rows()
        for b, seg, ai in found:
            bp, ap = pay_a[b], self._objects_at(seg.slot[ai], 1)
            right_b = side[b]
            rows.add(pos[b], 0, seg.pos[ai], np.zeros(len(b), dtype=_I8), key_a[b],
                     np.where(right_b, ap, bp), np.where(right_b, bp, ap))
        wm_last = int(wm[-1])
        if evicting:
            for seg in held:
                end = seg.t + within
                gone = (end < wm_last) & ~seg.matched
                if self.wm_end is not None:
                    gone &= end >= self.wm_end
                idx = self._kept(seg, gone)
                if len(idx):
                    self._leave(rows, seg, idx, pos[np.searchsorted(wm, end[idx], "right")])
        self.wm_end = wm_last
        if rows.when:
            self.write(rows.text())
        # The chunk joins the state as a run, runs whose events have all left the window go, and
        # the newest two merge while the older is no larger: a binary counter, so an event is
        # merged about log2(state / chunk) times instead of once a chunk (merging every chunk into
        # one run cost a third of the join). Events that left but wait in a run for their merge
        # fail the probe's window test and are never emitted twice (end >= wm_end).
        floor = wm_last - within
        runs = [r for r in self.runs if r.t_max >= floor]
        alive = cur.t >= floor
        if alive.any():
            runs.append(cur if alive.all() else cur.take(alive))
        while len(runs) > 1 and len(runs[-2].t) <= len(runs[-1].t):
            newer = runs.pop()
            runs.append(_merged(runs.pop(), newer, floor))
        self.runs = runs
        if runs:
            oldest = min(int(r.slot.min()) for r in runs) >> 32
            for c in [c for c in self.store if c < oldest]:
                del self.store[c]
        else:
            self.store.clear()
        held_now = sum(len(r.t) for r in runs)
        if held_now > self.max_state:
            self.max_state = held_now

    def _kept(self, seg: _Events, gone: np.ndarray) -> np.ndarray:
        """The indices of the leaving events whose side --how keeps."""
        keep = self.keep
        if not (keep[0] and keep[1]):
            gone &= seg.side if keep[1] else ~seg.side
        return np.flatnonzero(gone)

    def _leave(self, rows: _Rows, seg: _Events, idx: np.ndarray, when: np.ndarray) -> None:
        slots = seg.slot[idx]
        pays, right_e = self._objects_at(slots, 1), seg.side[idx]
        rows.add(when, 1, seg.t[idx], seg.pos[idx], self._objects_at(slots, 0),
                 np.where(right_e, _NULL_A, pays), np.where(right_e, pays, _NULL_A))

    def finish(self) -> None:
        """End of input: every event still in the window leaves, unmatched ones by (time, position)."""
        runs, self.runs = self.runs, []
        if not self.inner:
            rows = _Rows()
            for st in runs:
                gone = ~st.matched
                if self.wm_end is not None:
                    gone &= st.t + self.within >= self.wm_end
                idx = self._kept(st, gone)
                if len(idx):
                    self._leave(rows, st, idx, np.zeros(len(idx), dtype=_I8))
            if rows.when:
                self.write(rows.text())
        self.store.clear()


_NULL_A = _objects([_NULL])


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
        self.when.append(when)
        self.kind.append(np.full(len(when), kind, dtype=_I8))
        self.third.append(third)
        self.fourth.append(fourth)
        for col, part in zip(self.pieces, (keys, lefts, rights), strict=True):
            col.append(part)

    def text(self) -> bytes:
        """The rows as JSON lines: orjson.dumps({"key": K, "left": L, "right": R}) + newline each."""
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
        parts[0::6] = map(_KEY.__add__, map(orjson.dumps, keys))
        parts[2::6] = lefts
        parts[3::6] = [_RIGHT] * n
        parts[4::6] = rights
        parts[5::6] = [_END] * n
        return b"".join(parts)
