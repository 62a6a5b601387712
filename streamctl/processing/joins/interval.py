"""The stream-stream join of batched input, a chunk of records at a time with numpy.

The rows, bytes and order are StreamStreamJoin's (joins/stream_stream.py states the rule; the
record-at-a-time class is the reference, tests/props/test_join_plain_fast.py holds the two
together). What changes is how the rule is evaluated: instead of a dict lookup, a list walk and
a queue per event, a chunk of some thousands of records is matched at once.

- Watermark and lateness: W_i = (running max of t up to i) - lateness; record i is late when
  t_i + within < W_i (then it cannot be above the running max, so this is the reference's test).
- Keys: every non-null key is hashed (its normalized form: joining.norm_key), and the lowest
  bit of the hash is replaced by the side, so one sorted array answers "the other side's
  events with this key": the target of an event is its own code with that bit flipped. Equal
  codes of unequal keys (a hash collision) are told apart by comparing the keys themselves.
- State: the events of earlier chunks still in the window, sorted by (code, position). An event
  a pairs with b of the chunk when their keys are equal, |t_a - t_b| <= within and t_a +
  within >= W_b (an event that left the window during the chunk fails the last test). Pairs
  within the chunk are found the same way in the chunk sorted by code, keeping those whose
  earlier event comes first. After each chunk, the events whose time + within is behind the
  watermark leave the state, and the chunk's others join it (a merge of two sorted runs).
- Unmatched events (left/right/outer): an event leaves at the first position where the
  watermark passes t + within (its pairs are all made before then), and comes out there, after
  that position's pairs, by (time, position), when it never paired and its side is kept. At
  the end of input the rest come out by (time, position).
- Rows are sorted by (the position they come out at, pairs before unmatched, the earlier
  event's position | (time, position)) and written as the reference's JSON lines (a payload is
  a line's own bytes when they are orjson's for its value, else its value dumped once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import compress
from typing import Any

import numpy as np
import orjson

from streamctl.errors import StreamctlError

# Output rows as JSON lines, pieced together.
_KEY, _LEFT, _RIGHT, _END, _NULL = b'{"key":', b',"left":', b',"right":', b"}\n", b"null"
CHUNK = 16384  # records matched at a time: large enough that numpy's per-call costs vanish
_I8 = np.int64
_hash = hash  # (tests give every key one hash, to check that keys, not codes, decide a pair)


def _objects(items: list[Any]) -> np.ndarray:
    """A 1-d object array of the items (tuples stay elements, not rows)."""
    return np.fromiter(items, dtype=object, count=len(items))


def _expand(lo: np.ndarray, cnt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ranges [lo[i], lo[i] + cnt[i]): (i, j) for every j in range i, i ascending."""
    total = int(cnt.sum())
    owner = np.repeat(np.arange(len(cnt), dtype=_I8), cnt)
    start = np.cumsum(cnt) - cnt
    return owner, np.arange(total, dtype=_I8) - np.repeat(start - lo, cnt)


class _Events:
    """Events as numeric columns sorted by (code, position). `slot` finds an event's key, normalized
    key and payload in the object store (chunk number << 32 | index in that chunk): objects never
    move (permuting object arrays touches every object's reference count, 100 ns an event)."""

    __slots__ = ("code", "t", "pos", "side", "matched", "slot")
    COLS = ("code", "t", "pos", "side", "matched", "slot")

    def __init__(self, code: np.ndarray, t: np.ndarray, pos: np.ndarray, side: np.ndarray, matched: np.ndarray,
                 slot: np.ndarray) -> None:
        self.code, self.t, self.pos, self.side, self.matched, self.slot = code, t, pos, side, matched, slot

    def take(self, which: np.ndarray) -> _Events:
        return _Events(*(getattr(self, c)[which] for c in self.COLS))


_LOW = (1 << 32) - 1


class IntervalJoin:
    """Rows of a stream-stream join of (side, time, key, payload) records fed in input order, a chunk at a time."""

    def __init__(self, within: int, how: str, norm: Callable[[Any], Any], write: Callable[[bytes], None],
                 lateness: int = 0, late: Callable[[int, Any], None] | None = None) -> None:
        self.within = within
        self.lateness = lateness
        self.keep = (how in ("left", "outer"), how in ("right", "outer"))
        self.inner = how == "inner"
        self.norm = norm
        self.write = write
        self.late_sink = late
        self.late = [0, 0]
        self.no_time = [0, 0]
        self.records = [0, 0]
        self.state: _Events | None = None  # the events that can still pair or leave, by (code, position)
        # chunk number -> (normalized keys, keys, payloads) of its events, while one of them is in the state
        self.store: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.chunks = 0
        self.max_t: int | None = None  # the largest time seen
        self.wm_end: int | None = None  # the watermark after the last chunk
        self.next_pos = 0
        self.max_state = 0

    def _objects_at(self, slot: np.ndarray, what: int) -> np.ndarray:
        """Column `what` (0 normalized key, 1 key, 2 payload) of the store at these slots."""
        store = self.store
        chunk = slot >> 32
        idx = slot & _LOW
        first = int(chunk[0]) if len(chunk) else 0
        if len(chunk) == 0 or (chunk == first).all():
            return store[first][what][idx] if len(chunk) else np.empty(0, dtype=object)
        out = np.empty(len(slot), dtype=object)
        for c in np.unique(chunk).tolist():
            m = chunk == c
            out[m] = store[c][what][idx[m]]
        return out

    # -- input ---------------------------------------------------------------------------

    def chunk(self, sides: list[bool], times: list[int | None], keys: list[Any], payloads: list[Any]) -> None:
        """The next records in input order (sides False = LEFT, True = RIGHT; a time None = no usable time)."""
        n = len(sides)
        if not n:
            return
        n1 = sum(sides)
        self.records[0] += n - n1
        self.records[1] += n1
        pos = np.arange(self.next_pos, self.next_pos + n, dtype=_I8)
        self.next_pos += n
        if None in times:
            timed = [t is not None for t in times]
            for s in compress(sides, [not x for x in timed]):
                self.no_time[s] += 1
            sides, times, keys, payloads = (list(compress(c, timed)) for c in (sides, times, keys, payloads))
            pos = pos[np.array(timed, dtype=bool)]
            n = len(sides)
            if not n:
                return
        t = np.array(times, dtype=_I8)
        side = np.array(sides, dtype=bool)
        high = np.maximum.accumulate(t)
        if self.max_t is not None:
            np.maximum(high, self.max_t, out=high)
        self.max_t = int(high[-1])
        wm = high - self.lateness
        late = t + self.within < wm
        if late.any():
            idx = np.flatnonzero(late).tolist()
            for i in idx:
                which = int(side[i])
                self.late[which] += 1
                if self.late_sink is not None:
                    self.late_sink(which, payloads[i])
            ok = ~late
            keep = ok.tolist()
            keys, payloads = list(compress(keys, keep)), list(compress(payloads, keep))
            t, side, pos, wm = t[ok], side[ok], pos[ok], wm[ok]
            n = len(keys)
            if not n:
                return
        dumps = orjson.dumps
        if {*map(type, payloads)} != {bytes}:
            payloads = [p if p.__class__ is bytes else dumps(p) for p in payloads]
        if {*map(type, keys)} == {str}:
            nks = keys
        else:
            norm = self.norm
            nks = [k if k.__class__ is str or k is None else norm(k) for k in keys]
        code = (np.fromiter(map(_hash, nks), dtype=_I8, count=n) & ~1) | side
        has_key = None if None not in nks else np.array([k is not None for k in nks], dtype=bool)
        self._rows(t, side, pos, wm, code, has_key, keys, nks, payloads)

    def _rows(self, t: np.ndarray, side: np.ndarray, pos: np.ndarray, wm: np.ndarray, code: np.ndarray,
              has_key: np.ndarray | None, keys: list[Any], nks: list[Any], payloads: list[Any]) -> None:
        within = self.within
        n = len(t)
        number = self.chunks
        self.chunks += 1
        nk_a, key_a, pay_a = _objects(nks), _objects(keys), _objects(payloads)
        self.store[number] = (nk_a, key_a, pay_a)
        order = np.argsort(code, kind="stable")  # (code, position): positions ascend in the chunk
        cur = _Events(code[order], t[order], pos[order], side[order], np.zeros(n, dtype=bool),
                      (number << 32) | order)
        # the probes (events with a key) in target order: searchsorted is several times faster
        # with sorted needles
        target = code ^ 1
        probe = np.arange(n, dtype=_I8) if has_key is None else np.flatnonzero(has_key)
        probe = probe[np.argsort(target[probe], kind="stable")]
        tgt = target[probe]
        # pairs: (b's index in the chunk, the events a is among, a's index there, a's payloads)
        found: list[tuple[np.ndarray, _Events, np.ndarray]] = []
        held = (cur,) if self.state is None else (self.state, cur)
        for seg in held:
            lo = seg.code.searchsorted(tgt, "left")
            cnt = seg.code.searchsorted(tgt, "right") - lo
            if not cnt.any():
                continue
            bi, ai = _expand(lo, cnt)
            b = probe[bi]
            ta = seg.t[ai]
            ok = (np.abs(ta - t[b]) <= within) & (ta + within >= wm[b])
            if seg is cur:
                ok &= seg.pos[ai] < pos[b]
            if not ok.all():
                b, ai = b[ok], ai[ok]
            if len(b):
                # a hash collision shares a code, not a key
                same = np.equal(self._objects_at(seg.slot[ai], 0), nk_a[b])
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
            bp, ap = pay_a[b], self._objects_at(seg.slot[ai], 2)
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
        # the chunk joins the state, and the events that have left the window leave it
        floor = wm_last - within
        if self.state is None:
            alive = cur.t >= floor
            self.state = cur if alive.all() else cur.take(alive)
        else:
            st = self.state
            a_st, a_cur = st.t >= floor, cur.t >= floor
            # two sorted runs: the stable sort merges them in one pass (positions keep their order)
            both = _Events(*(np.concatenate((getattr(st, c)[a_st], getattr(cur, c)[a_cur])) for c in _Events.COLS))
            self.state = both.take(np.argsort(both.code, kind="stable"))
        if len(self.state.t):
            oldest = int(self.state.slot.min()) >> 32
            for c in [c for c in self.store if c < oldest]:
                del self.store[c]
        else:
            self.store.clear()
        if len(self.state.t) > self.max_state:
            self.max_state = len(self.state.t)

    def _kept(self, seg: _Events, gone: np.ndarray) -> np.ndarray:
        """The indices of the leaving events whose side --how keeps."""
        keep = self.keep
        if not (keep[0] and keep[1]):
            gone &= seg.side if keep[1] else ~seg.side
        return np.flatnonzero(gone)

    def _leave(self, rows: _Rows, seg: _Events, idx: np.ndarray, when: np.ndarray) -> None:
        null = _objects([_NULL])
        slots = seg.slot[idx]
        pays, right_e = self._objects_at(slots, 2), seg.side[idx]
        rows.add(when, 1, seg.t[idx], seg.pos[idx], self._objects_at(slots, 1),
                 np.where(right_e, null, pays), np.where(right_e, pays, null))

    def finish(self) -> None:
        """End of input: every event still in the window leaves, unmatched ones by (time, position)."""
        st, self.state = self.state, None
        if not self.inner and st is not None:
            gone = ~st.matched
            if self.wm_end is not None:
                gone &= st.t + self.within >= self.wm_end
            idx = self._kept(st, gone)
            if len(idx):
                rows = _Rows()
                self._leave(rows, st, idx, np.zeros(len(idx), dtype=_I8))
                self.write(rows.text())
        self.store.clear()


class _Rows:
    """Output rows of a chunk, sorted by (position they come out at, kind: 0 pair 1 leaver, the
    earlier event's position | the leaver's time, 0 | the leaver's position)."""

    def __init__(self) -> None:
        self.when: list[np.ndarray] = []
        self.kind: list[np.ndarray] = []
        self.third: list[np.ndarray] = []
        self.fourth: list[np.ndarray] = []
        self.keys: list[np.ndarray] = []
        self.lefts: list[np.ndarray] = []
        self.rights: list[np.ndarray] = []

    def add(self, when: np.ndarray, kind: int, third: np.ndarray, fourth: np.ndarray, keys: np.ndarray,
            lefts: np.ndarray, rights: np.ndarray) -> None:
        self.when.append(when)
        self.kind.append(np.full(len(when), kind, dtype=_I8))
        self.third.append(third)
        self.fourth.append(fourth)
        self.keys.append(keys)
        self.lefts.append(lefts)
        self.rights.append(rights)

    def text(self) -> bytes:
        """The rows as JSON lines: orjson.dumps({"key": K, "left": L, "right": R}) + newline each,
        with the payloads (JSON texts) pasted in."""
        cat = np.concatenate
        order = np.lexsort((cat(self.fourth), cat(self.third), cat(self.kind), cat(self.when)))
        ks = cat(self.keys)[order].tolist()
        n = len(ks)
        parts: list[Any] = [_KEY] * (7 * n)
        parts[1::7] = map(orjson.dumps, ks)
        parts[2::7] = [_LEFT] * n
        parts[3::7] = cat(self.lefts)[order].tolist()
        parts[4::7] = [_RIGHT] * n
        parts[5::7] = cat(self.rights)[order].tolist()
        parts[6::7] = [_END] * n
        return b"".join(parts)


def join_batches(batches: Iterable[tuple[list[bool], list[Any], list[Any], list[Any]]],
                 norm: Callable[[Any], Any], within: int, how: str, write: Callable[[bytes], None],
                 counts: list[int], no_time: list[int], lateness: int = 0, late_counts: list[int] | None = None,
                 late: Callable[[int, Any], None] | None = None, chunk: int | None = None) -> int:
    """StreamStreamJoin's rows (the bytes of orjson.dumps({"key", "left", "right"}) + newline per row,
    in its order) for (sides, times, keys, payloads) batches (inputorder.merged_plain), matched
    `chunk` records at a time. Counts go to `counts`, `no_time` and `late_counts` per side;
    returns the largest number of events held."""
    chunk = chunk or CHUNK
    j = IntervalJoin(within, how, norm, write, lateness, late)
    buf: list[list[Any]] = [[], [], [], []]
    try:
        for batch in batches:
            for col, part in zip(buf, batch, strict=True):
                col += part
            if len(buf[0]) >= chunk:
                j.chunk(*buf)
                buf = [[], [], [], []]
    except StreamctlError:
        j.chunk(*buf)  # a bad line: the rows of the records before it come out, as record by record
        raise
    j.chunk(*buf)
    j.finish()
    for i in (0, 1):
        counts[i] += j.records[i]
        no_time[i] += j.no_time[i]
        if late_counts is not None:
            late_counts[i] += j.late[i]
    return j.max_state
