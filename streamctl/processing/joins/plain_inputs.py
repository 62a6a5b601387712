"""Two plain files read as columns for the stream-stream join, and merged in input order.

Reading a file (parsing its lines, checking that a line is orjson's bytes for its value, reading
the time and key columns, hashing the keys) is most of a join's work, and it does not depend
on the other file. So each file can be read by a process of its own (joins/driver.py forks one
per file), which sends `FileBlock`s: numbers as the bytes of numpy arrays, and the keys and
payloads as lists. The joining process merges the two streams of blocks with numpy and joins
(joins/interval.py). Three processes on two cores: whichever side is the slower one, the cores
stay busy.

The merge is inputorder.merged_plain's, on arrays: a record's merge key is the largest time in
its own file up to and including it (a record without a time keeps the largest so far), records
go out in (merge key, input) order, LEFT first on ties, and a record goes out once the other
input is known up to its key. Block boundaries do not change the order; on a bad line, the
records merged before the block that holds it are joined, then the error is raised, whichever
process read it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import Any

import numpy as np
import orjson

from streamctl.errors import StreamctlError
from streamctl.processing import inputorder
from streamctl.processing.joins.interval import key_codes

_I8 = np.int64

# One block of a file, as the pipe carries it (marshal: tuples, lists, ints, bytes and None):
# (number of records, times, which have a time (None: all), merge keys, key codes -- int64 or bool
#  arrays as bytes --, keys, payloads (JSON bytes), normalized keys (None: the keys themselves))
FileBlock = tuple[int, bytes, bytes | None, bytes, bytes, list[Any], list[bytes], list[Any] | None]
Column = Callable[[list[Any]], list[Any]]


def file_blocks(path: str, times_of: Column, keys_of: Column, norm: Callable[[Any], Any],
                block_bytes: int) -> Generator[FileBlock, None, None]:
    """The blocks of one plain file (plain_blocks_raw's), as columns."""
    high = inputorder.NO_TIME
    dumps = orjson.dumps
    for values, payloads in inputorder.plain_blocks_raw(path, block_bytes, raw=True):
        n = len(values)
        ts = times_of(values)
        if None in ts:
            has = np.array([t is not None for t in ts], dtype=bool)
            t = np.array([0 if x is None else x for x in ts], dtype=_I8)
            ordering = np.where(has, t, inputorder.NO_TIME)
            timed: bytes | None = has.tobytes()
        else:
            t = ordering = np.array(ts, dtype=_I8)
            timed = None
        mk = np.maximum.accumulate(np.concatenate(([high], ordering)))[1:]
        high = int(mk[-1])
        keys = keys_of(values)
        code, nks = key_codes(keys, norm)
        if payloads is values or {*map(type, payloads)} != {bytes}:
            payloads = [p if p.__class__ is bytes else dumps(p) for p in payloads]
        yield n, t.tobytes(), timed, mk.tobytes(), code.tobytes(), keys, payloads, nks


def _objects(items: list[Any]) -> np.ndarray:
    return np.fromiter(items, dtype=object, count=len(items))


class _Lane:
    """One input's current block as arrays, and how much of it has gone out."""

    __slots__ = ("blocks", "side", "more", "start", "n", "t", "timed", "mk", "code", "keys", "pays", "nks")
    COLS = ("t", "timed", "code", "keys", "pays", "nks")

    def __init__(self, blocks: Iterator[FileBlock], side: bool) -> None:
        self.blocks = blocks
        self.side = side
        self.more = True
        self.start = self.n = 0

    def pull(self) -> None:
        """The next non-empty block, or more = False at the end of the input."""
        while self.more and self.start == self.n:
            blk = next(self.blocks, None)
            if blk is None:
                self.more = False
                return
            n, tb, timed, mk, code, keys, pays, nks = blk
            frombuffer = np.frombuffer
            self.n, self.start = n, 0
            self.t, self.mk, self.code = frombuffer(tb, _I8), frombuffer(mk, _I8), frombuffer(code, _I8)
            self.timed = np.ones(n, dtype=bool) if timed is None else frombuffer(timed, bool)
            self.keys, self.pays = _objects(keys), _objects(pays)
            self.nks = self.keys if nks is None else _objects(nks)

    def part(self, end: int) -> list[np.ndarray]:
        """Columns of the records from start to end (side first), which go out."""
        s = self.start
        self.start = end
        return [np.full(end - s, self.side, dtype=bool), *(getattr(self, c)[s:end] for c in self.COLS)]


def merged_chunks(left: Iterator[FileBlock], right: Iterator[FileBlock],
                  chunk: int) -> Iterator[list[np.ndarray]]:
    """The records of both inputs in input order, about `chunk` at a time, as columns: side, t,
    timed, code (no side bit), keys, payloads, normalized keys (IntervalJoin.chunk's)."""
    a, b = _Lane(left, False), _Lane(right, True)
    parts: list[list[np.ndarray]] = []
    held = 0
    try:
        while True:
            a.pull()
            b.pull()
            sa, sb, na, nb = a.start, b.start, a.n, b.n
            if sa == na and sb == nb:
                break
            if sa == na or sb == nb:  # one input has ended: the other's block goes out
                ea, eb = na, nb
            else:
                last_a, last_b = int(a.mk[-1]), int(b.mk[-1])
                if last_a <= last_b:
                    ea, eb = na, sb + int(np.searchsorted(b.mk[sb:], last_a, "left"))
                else:
                    ea, eb = sa + int(np.searchsorted(a.mk[sa:], last_b, "right")), nb
            if eb == sb:
                piece = a.part(ea)
            elif ea == sa:
                piece = b.part(eb)
            elif a.mk[ea - 1] <= b.mk[sb]:
                piece = [np.concatenate(pair) for pair in zip(a.part(ea), b.part(eb), strict=True)]
            else:  # interleaved: a stable sort of the merge keys, ties to LEFT (it comes first)
                order = np.argsort(np.concatenate((a.mk[sa:ea], b.mk[sb:eb])), kind="stable")
                piece = [np.concatenate(pair)[order] for pair in zip(a.part(ea), b.part(eb), strict=True)]
            parts.append(piece)
            held += len(piece[0])
            if held >= chunk:
                yield _joined(parts)
                parts, held = [], 0
    except StreamctlError:
        if parts:
            yield _joined(parts)
        raise
    if parts:
        yield _joined(parts)


def _joined(parts: list[list[np.ndarray]]) -> list[np.ndarray]:
    if len(parts) == 1:
        return parts[0]
    return [np.concatenate(cols) for cols in zip(*parts, strict=True)]
