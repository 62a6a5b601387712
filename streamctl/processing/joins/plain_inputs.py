"""Two plain files read as columns for the stream-stream join, and merged in input order.

Reading a file (parsing its lines, checking that a line is orjson's bytes for its value, reading
the time and key columns, hashing the keys) is most of a join's work, and it does not depend
on the other file. So each file can be read by a process of its own (joins/driver.py forks one
per file), which sends `FileBlock`s: numbers as the bytes of numpy arrays, and the keys and
payloads as lists. The joining process merges the two streams of blocks with numpy and joins
(joins/interval_kernel.py's IntervalJoin). Three processes on two cores: whichever side is the
slower one, the cores stay busy.

The merge is the input order's (mergeorder.merge), on arrays: a record's merge key is the largest time in
its own file up to and including it (a record without a time keeps the largest so far), records
go out in (merge key, input) order, LEFT first on ties, and a record goes out once the other
input is known up to its key. Block boundaries do not change the order; on a bad line, the
records merged before the block that holds it are joined, then the error is raised, whichever
process read it.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from itertools import repeat
from operator import is_
from typing import Any

import numpy as np
import orjson

from streamctl.errors import StreamctlError
from streamctl.processing import exactjson, inputorder, mergeorder
from streamctl.processing.joins.keys import norm_key
from streamctl.processing.joins.table_inputs import side_reader

_I8 = np.int64

_hash = hash  # (tests give every key one hash, to check that keys, not codes, decide a pair)
_CODE_BITS = (1 << 63) - 2  # a key's hash without its sign bit and lowest bit (the side goes there)

# One block of a file, as the pipe carries it (marshal: tuples, lists, ints, bytes and None):
# (number of records, times, which have a time (None: all), merge keys, key codes -- int64 or bool
#  arrays as bytes --, keys, payloads (JSON bytes), normalized keys (None: the keys themselves))
FileBlock = tuple[int, bytes, bytes | None, bytes, bytes, list[Any], list[bytes], list[Any] | None]


def key_codes(keys: list[Any]) -> tuple[np.ndarray, list[Any] | None]:
    """The keys' codes for IntervalJoin, without the side bit: a key's hash with its sign and lowest
    bits cleared, -2 for a null key (never a probe, never a target); and their normalized forms
    (keys.norm_key) when some key is not a string, else None."""
    n = len(keys)
    if {*map(type, keys)} == {str}:
        nks: list[Any] = keys
        out = None
    else:
        nks = out = list(map(norm_key, keys))
    code = np.fromiter(map(_hash, nks), dtype=_I8, count=n) & _CODE_BITS
    if None in nks:
        code[np.fromiter(map(is_, nks, repeat(None)), dtype=bool, count=n)] = -2
    return code, out


def file_blocks(path: str, on: tuple[str, ...], time_field: tuple[str, ...],
                block_bytes: int) -> Generator[FileBlock, None, None]:
    """The blocks of one plain file (inputorder.plain_blocks'), as columns: its keys read by `on` and
    its times by `time_field` as every join side's are (table_inputs.side_reader)."""
    columns, times_of = side_reader(on, time_field, False)
    high = mergeorder.NO_TIME
    dumps = orjson.dumps
    for values, payloads, base in inputorder.plain_blocks(path, block_bytes, raw=True):
        _values, keys, _rkeys, block = columns(inputorder.plain_block(values, base))
        ts = times_of(block)
        n = len(values)
        if None in ts:
            has = np.array([t is not None for t in ts], dtype=bool)
            t = np.array([0 if x is None else x for x in ts], dtype=_I8)
            ordering = np.where(has, t, mergeorder.NO_TIME)
            timed: bytes | None = has.tobytes()
        else:
            t = ordering = np.array(ts, dtype=_I8)
            timed = None
        mk = mergeorder.merge_key_array(ordering, high)
        high = int(mk[-1])
        code, nks = key_codes(keys)
        if payloads is values or {*map(type, payloads)} != {bytes}:
            # (a copy of the text: orjson's result keeps its 4 KiB write buffer, and the join keeps payloads)
            try:
                payloads = [p if p.__class__ is bytes else b"%b" % dumps(p) for p in payloads]
            except TypeError:  # an int beyond 64 bits (inputorder reads it exactly): its exact text
                payloads = [p if p.__class__ is bytes else exactjson.dumps(p) for p in payloads]
        yield n, t.tobytes(), timed, mk.tobytes(), code.tobytes(), keys, payloads, nks


def objects(items: list[Any]) -> np.ndarray:
    """A 1-d object array of the items (tuples stay elements, not rows)."""
    return np.fromiter(items, dtype=object, count=len(items))


def _columns(side: bool, blocks: Iterator[FileBlock]) -> Iterator[tuple[np.ndarray, list[np.ndarray]]]:
    """(merge keys, the block's columns as IntervalJoin.chunk takes them: side, t, timed, code (no
    side bit), keys, payloads, normalized keys) of each block, as a keyed mergeorder.Lane reads."""
    frombuffer = np.frombuffer
    for n, tb, timed, mk, code, keys, pays, nks in blocks:
        ks = objects(keys)
        yield frombuffer(mk, _I8), [np.full(n, side, dtype=bool), frombuffer(tb, _I8),
                                    np.ones(n, dtype=bool) if timed is None else frombuffer(timed, bool),
                                    frombuffer(code, _I8), ks, objects(pays), ks if nks is None else objects(nks)]


def merged_chunks(left: Iterator[FileBlock], right: Iterator[FileBlock],
                  chunk: int) -> Iterator[list[np.ndarray]]:
    """The records of both inputs in input order (mergeorder.merge: LEFT first on ties, each round's
    columns by mergeorder.round_columns), about `chunk` at a time, as columns: side, t, timed,
    code (no side bit), keys, payloads, normalized keys (IntervalJoin.chunk's)."""
    lanes = [mergeorder.Lane(_columns(side, blocks), keyed=True) for side, blocks in ((False, left), (True, right))]
    parts: list[list[np.ndarray]] = []
    held = 0
    try:
        for where, order in mergeorder.merge(lanes):
            piece = mergeorder.round_columns(lanes, where, order, 7)
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
