"""The one deterministic input order that window and join read in.

Each input in its own order: a log's partitions merged by (ts, partition,
offset); a plain file (or `-`) line by line. Several inputs are interleaved by
ts, or by event time for plain files that have no ts; ties go to the earlier
input. A record without a usable time keeps its place in its own input (it
sorts with the last time seen in that input). Running the same thing twice on
the same inputs gives the same order, on every engine.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import Any

import orjson

from streamctl import consumer, plainfile, reader, record
from streamctl import log as logmod
from streamctl.errors import UsageError

Record = dict[str, Any]


@dataclass(frozen=True)
class InputSpec:
    path: str
    is_log: bool


def classify(path: str) -> InputSpec:
    import os

    if path != "-" and logmod.is_log(path):
        return InputSpec(path, True)
    if path != "-" and os.path.isdir(path):
        raise UsageError(f"{path}: not a streamctl log (no streamctl.json)")
    if path != "-" and not os.path.exists(path):
        raise UsageError(f"{path}: no such log or file")
    return InputSpec(path, False)


def log_records(path: str, partitions: list[int] | None = None,
                starts: dict[int, int] | None = None) -> Iterator[Record]:
    """A log's records, partitions merged by (ts, partition, offset), to the end as of now."""
    # Each line is parsed once, and the merge key comes from the parsed record
    # (not a second envelope parse): the same (ts, partition, offset) order as
    # consumer.stream at less than half its cost per record.
    lg, ranges = _read_plan(path, partitions, starts)
    streams = [_partition_records(path, lg, p, start, end) for p, start, end in ranges]
    if len(streams) == 1:
        for _ts, _p, _off, rec in streams[0]:
            yield rec
        return
    for _ts, _p, _off, rec in heapq.merge(*streams):
        yield rec


def log_batches(path: str, partitions: list[int] | None = None,
                starts: dict[int, int] | None = None) -> Iterator[list[Record]]:
    """log_records() in lists: the same records, checked the same way, in the same order.

    A one-partition log is parsed a block at a time (one orjson call for the
    block, its envelopes checked column by column), which costs about half of
    a call per line; several partitions go through log_records' merge.
    """
    lg, ranges = _read_plan(path, partitions, starts)
    if len(ranges) == 1:
        yield from _partition_batches(path, lg, *ranges[0])
        return
    from itertools import islice

    recs = log_records(path, partitions, starts) if ranges else iter(())
    while True:
        batch = list(islice(recs, BATCH))
        if not batch:
            return
        yield batch


BATCH = 4096  # records per list when log_batches cuts a merged stream

def _read_plan(path: str, partitions: list[int] | None,
               starts: dict[int, int] | None) -> tuple[logmod.Log, list[tuple[int, int, int | None]]]:
    """The log and (partition, start, end) of each partition with something to read."""
    lg = logmod.open_log(path)
    parts = partitions if partitions is not None else list(range(lg.partitions))
    pl = consumer.plan(lg, parts, None, None)
    if starts:
        for p, off in starts.items():
            if p in pl.positions:
                pl.positions[p].start = off
    return lg, [(p, pos.start, pos.end) for p, pos in pl.positions.items()
                if pos.end is None or pos.start < pos.end]


def _partition_records(path: str, lg: logmod.Log, p: int, start: int,
                       end: int | None) -> Iterator[tuple[int, int, int, Record]]:
    for block in reader.iter_blocks(lg, p, start, end):
        yield from _line_records(path, p, block)


def _line_records(path: str, p: int, block: bytes) -> Iterator[tuple[int, int, int, Record]]:
    """(ts, partition, offset, record) per line of a block, each line parsed and checked on its own."""
    loads = orjson.loads
    for line in block.splitlines():
        try:
            obj = loads(line)
            ts = obj["ts"]
            off = obj["offset"]
            ok = (ts.__class__ is int and off.__class__ is int and ts >= 0 and off >= 0
                  and "value" in obj and obj["partition"].__class__ is int
                  and (obj.get("key") is None or obj["key"].__class__ is str))
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            ok = False
        if not ok:
            try:
                obj = record.parse(line)  # the full check, for its message
            except record.BadRecord as e:
                raise UsageError(f"{path}: corrupt record: {e}") from None
            ts, off = obj["ts"], obj["offset"]
        yield ts, p, off, obj


def _partition_batches(path: str, lg: logmod.Log, p: int, start: int,
                       end: int | None) -> Iterator[list[Record]]:
    for block in reader.iter_blocks(lg, p, start, end):
        i, n = 0, len(block)
        while i < n:
            # pieces of about PIECE bytes: a batch's objects then stay in the CPU cache while the
            # consumer goes over them column by column (1 MiB pieces measured 2x slower)
            j = block.rfind(b"\n", i, i + PIECE) if i + PIECE < n else n - 1
            if j < i:
                j = block.find(b"\n", i + PIECE)
            piece = block[i:j + 1] if i or j + 1 < n else block
            i = j + 1
            recs = _block_records(piece)
            if recs is None:
                # something unusual in the piece: line by line, exactly as log_records reads it
                recs = [obj for _ts, _p, _off, obj in _line_records(path, p, piece)]
            yield recs


PIECE = 1 << 16


_NoneType = type(None)
_KEY_TYPES = {str, _NoneType}


def _block_records(block: bytes) -> list[Record] | None:
    """A block's records when every line passes _line_records' fast check, else None.

    The same parse per line as _line_records, with the envelope checks made a
    column at a time. (Parsing the block as one JSON array is a little faster
    but needs two more scans of the bytes to prove it reads the same lines.)
    """
    try:
        objs = list(map(orjson.loads, block.splitlines()))
        tss = list(map(_get_ts, objs))  # KeyError / TypeError: a line that is not a record
        offs = list(map(_get_offset, objs))
        if ({*map(type, tss)} != _INT or {*map(type, offs)} != _INT or min(tss) < 0 or min(offs) < 0
                or {*map(type, map(_get_partition, objs))} != _INT
                or not _KEY_TYPES.issuperset(map(type, map(dict.get, objs, repeat("key"))))):
            return None
        for _ in map(_get_value, objs):  # every line has a value
            pass
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
    return objs


_INT = {int}
_get_ts, _get_offset, _get_partition, _get_value = (itemgetter(k) for k in ("ts", "offset", "partition", "value"))


def plain_records(path: str) -> Iterator[Record]:
    """A plain file's lines as records: offset = line number from 0, partition 0, no ts."""
    for off, text in plainfile.iter_values(path, validate=False):
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as e:
            from streamctl.errors import DataError

            raise DataError(f"{path}: record {off}: invalid JSON: {e}") from None
        yield {"offset": off, "partition": 0, "key": None, "value": value}


def records(spec: InputSpec) -> Iterator[Record]:
    return log_records(spec.path) if spec.is_log else plain_records(spec.path)


def merged(specs: list[InputSpec],
           event_time: Callable[[Record], int | None] | Sequence[Callable[[Record], int | None]],
           ) -> Iterator[tuple[int, Record]]:
    """(input index, record) over all inputs in the deterministic order above.

    `event_time` reads a plain file's record time; pass one function per input
    when the inputs keep their times in different fields (join's --time-field A=B).
    """
    times = list(event_time) if isinstance(event_time, Sequence) else [event_time] * len(specs)
    # A plain function handing out the right generator: one generator layer less per record.
    if len(specs) == 1:
        return ((0, rec) for rec in records(specs[0]))
    if len(specs) == 2:
        return _merge_two(specs, times)
    return _merge_heap(specs, times)


def _merge_heap(specs: list[InputSpec], times: list[Callable[[Record], int | None]]) -> Iterator[tuple[int, Record]]:
    def keyed(i: int, spec: InputSpec) -> Iterator[tuple[int, int, int, Record]]:
        last = -(1 << 62)
        for seq, rec in enumerate(records(spec)):
            t = rec.get("ts") if spec.is_log else times[i](rec)
            if t is None:
                t = last
            else:
                last = t
            yield t, i, seq, rec

    for _t, i, _seq, rec in heapq.merge(*(keyed(i, s) for i, s in enumerate(specs))):
        yield i, rec


def _merge_two(specs: list[InputSpec], times: list[Callable[[Record], int | None]]) -> Iterator[tuple[int, Record]]:
    """merged() for two inputs without heapq's tuples: the same order (the smaller head first by
    time, carried forward over records without one; ties to the first input) at less cost per record."""
    ra, rb = records(specs[0]), records(specs[1])
    fa = _log_ts if specs[0].is_log else times[0]
    fb = _log_ts if specs[1].is_log else times[1]
    last_a = last_b = ka = kb = -(1 << 62)
    a = next(ra, None)
    if a is not None:
        t = fa(a)
        if t is not None:
            ka = last_a = t
    b = next(rb, None)
    if b is not None:
        t = fb(b)
        if t is not None:
            kb = last_b = t
    while a is not None and b is not None:
        if kb < ka:
            yield 1, b
            b = next(rb, None)
            if b is not None:
                t = fb(b)
                kb = last_b if t is None else t
                last_b = kb
        else:
            yield 0, a
            a = next(ra, None)
            if a is not None:
                t = fa(a)
                ka = last_a if t is None else t
                last_a = ka
    while a is not None:
        yield 0, a
        a = next(ra, None)
    while b is not None:
        yield 1, b
        b = next(rb, None)


def _log_ts(rec: Record) -> int | None:
    return rec["ts"]
