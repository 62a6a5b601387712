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
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import itemgetter
from typing import Any

import orjson

from streamctl import consumer, fieldread, plainfile, reader, record
from streamctl import log as logmod
from streamctl.errors import UsageError
from streamctl.fieldread import FieldPath

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
                starts: dict[int, int] | None = None,
                fields: Sequence[FieldPath] | None = None) -> Iterator[Sequence[Record]]:
    """log_records() in lists: the same records, checked the same way, in the same order.

    A one-partition log is parsed a block at a time (one orjson call for the
    block, its envelopes checked column by column), which costs about half of
    a call per line; several partitions go through log_records' merge. With
    `fields` (paths that fieldread.readable accepts), a one-partition log's
    pieces come as fieldread.FieldBatch columns of those fields where they can
    (and as records where they cannot).
    """
    lg, ranges = _read_plan(path, partitions, starts)
    if len(ranges) == 1:
        yield from _partition_batches(path, lg, *ranges[0], fields=fields)
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


def _partition_batches(path: str, lg: logmod.Log, p: int, start: int, end: int | None,
                       fields: Sequence[FieldPath] | None = None) -> Iterator[Sequence[Record]]:
    read_fields = fieldread.FieldReader(fields).read_piece if fields else None
    for piece in partition_pieces(lg, p, start, end):
        if read_fields is not None:
            cols = read_fields(piece)
            if cols is not None:
                yield cols
                continue
        yield piece_records(path, p, piece)


def partition_pieces(lg: logmod.Log, p: int, start: int, end: int | None) -> Iterator[bytes]:
    """A partition's lines from offset start to end, in pieces of whole lines of about PIECE bytes:
    a batch's objects then stay in the CPU cache while the consumer goes over them column by
    column (1 MiB pieces measured 2x slower)."""
    for block in reader.iter_blocks(lg, p, start, end):
        i, n = 0, len(block)
        while i < n:
            j = block.rfind(b"\n", i, i + PIECE) if i + PIECE < n else n - 1
            if j < i:
                j = block.find(b"\n", i + PIECE)
            piece = block[i:j + 1] if i or j + 1 < n else block
            i = j + 1
            yield piece


def piece_records(path: str, p: int, piece: bytes) -> list[Record]:
    """A piece's records, read in full and checked as log_records checks them (a corrupt line is a
    UsageError naming it)."""
    recs = _block_records(piece)
    if recs is None:
        # something unusual in the piece: line by line, exactly as log_records reads it
        recs = [obj for _ts, _p, _off, obj in _line_records(path, p, piece)]
    return recs


PIECE = 1 << 16


_NoneType = type(None)
_KEY_TYPES = {str, _NoneType}


class RecordBatch(list):
    """A list of records with two columns the envelope check read anyway: each record's key and
    value (in order), for a consumer that needs them."""

    __slots__ = ("keys", "values")


def _block_records(block: bytes) -> RecordBatch | None:
    """A block's records when every line passes _line_records' fast check, else None.

    The same parse per line as _line_records, with the envelope checks made a
    column at a time. (Parsing the block as one JSON array is a little faster
    but needs two more scans of the bytes to prove it reads the same lines.)
    """
    try:
        objs = list(map(orjson.loads, block.splitlines()))
        tss = list(map(_get_ts, objs))  # KeyError / TypeError: a line that is not a record
        offs = list(map(_get_offset, objs))
        keys = list(map(dict.get, objs, repeat("key")))
        if ({*map(type, tss)} != _INT or {*map(type, offs)} != _INT or min(tss) < 0 or min(offs) < 0
                or {*map(type, map(_get_partition, objs))} != _INT
                or not _KEY_TYPES.issuperset(map(type, keys))):
            return None
        values = list(map(_get_value, objs))  # KeyError: a record without a value
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
    batch = RecordBatch(objs)
    batch.keys, batch.values = keys, values
    return batch


_INT = {int}
_get_ts, _get_offset, _get_partition, _get_value = (itemgetter(k) for k in ("ts", "offset", "partition", "value"))


PLAIN_BLOCK = 1 << 20  # bytes read from a plain file at a time


def plain_blocks(path: str, block_bytes: int = PLAIN_BLOCK) -> Iterator[list[Any]]:
    """A plain file's values (one per non-blank line), parsed a block of lines at a time.

    The same values as reading line by line: lines split on \\n, a line of only
    JSON whitespace is skipped (orjson reads the others with their whitespace
    as they are). An invalid line is a DataError naming its record number (the
    count of non-blank lines before it), raised after the block's good values
    before it have been handed out.
    """
    for values, _payloads in plain_blocks_raw(path, block_bytes, raw=False):
        yield values


def plain_blocks_raw(path: str, block_bytes: int = PLAIN_BLOCK,
                     raw: bool = True) -> Iterator[tuple[list[Any], list[Any]]]:
    """plain_blocks() with each value's payload: (values, payloads). A payload is the line's
    own bytes when they are exactly what orjson.dumps makes of its value (so they can be
    pasted into output as they are), else the value itself (JSON values are never bytes).
    With raw=False the payloads are the values."""
    import os

    _name, fd = plainfile.open_plain(path)
    n = 0  # values handed out so far: the next one's record number
    rest: list[bytes] = []  # the line the last read ended in
    try:
        while True:
            data = os.read(fd, block_bytes)
            if not data:
                text = b"".join(rest)
            else:
                cut = data.rfind(b"\n")
                if cut < 0:
                    rest.append(data)
                    continue
                if rest:
                    rest.append(data[:cut])
                    text = b"".join(rest)
                else:
                    text = data[:cut]
                rest = [data[cut + 1:]] if cut + 1 < len(data) else []
            if text:
                values, payloads, error = _plain_values(text, raw)
                if values:
                    n += len(values)
                    yield values, payloads
                if error is not None:
                    from streamctl.errors import DataError

                    raise DataError(f"{path}: record {n}: invalid JSON: {error}") from None
            if not data:
                return
    finally:
        if path != "-":
            os.close(fd)


# In a block of dicts parsed as one array, a line can only hand a neighbour part of its
# value if some line holds two dicts side by side: `}` `,` `{` with JSON whitespace between.
_PLAIN_SIDE_BY_SIDE = re.compile(rb"\}[ \t\r]*,[ \t\r]*\{")
_DICT = {dict}


def _plain_values(text: bytes, raw: bool) -> tuple[list[Any], list[Any], orjson.JSONDecodeError | None]:
    """The values of the lines of `text` (no final newline), their payloads (plain_blocks_raw),
    and the error of the first invalid line (the values are those before it)."""
    loads = orjson.loads
    # One parse for the block when every line is one object (the usual JSONL file): the
    # array has as many elements as lines, all objects, and no line holds two objects.
    if not _PLAIN_SIDE_BY_SIDE.search(text):
        array = b"[" + text.replace(b"\n", b",") + b"]"
        try:
            values = loads(array)
        except orjson.JSONDecodeError:
            pass
        else:
            if len(values) == text.count(b"\n") + 1 and {*map(type, values)} == _DICT:
                return values, _payloads(values, text, array, raw), None
    lines = text.split(b"\n")
    try:
        values = list(map(loads, lines))
    except orjson.JSONDecodeError:
        pass
    else:
        return values, _payloads(values, text, b"[" + b",".join(lines) + b"]", raw, lines), None
    values = []
    for line in lines:
        line = line.strip(b" \t\r\n")
        if not line:
            continue
        try:
            values.append(loads(line))
        except orjson.JSONDecodeError as e:
            return values, values, e
    return values, values, None


def _payloads(values: list[Any], text: bytes, array: bytes, raw: bool,
              lines: list[bytes] | None = None) -> list[Any]:
    """The lines themselves when the block's lines are all exactly orjson's bytes for their values,
    else the values. One comparison decides: `array` is the lines joined with commas in
    brackets, and when it equals orjson.dumps(values) each line equals its value's dumps
    (both are complete JSON values at the same place, so they end at the same byte)."""
    if raw and orjson.dumps(values) == array:
        return lines if lines is not None else text.split(b"\n")
    return values


def plain_records(path: str) -> Iterator[Record]:
    """A plain file's lines as records: offset = line number from 0, partition 0, no ts."""
    off = 0
    for values in plain_blocks(path):
        for value in values:
            yield {"offset": off, "partition": 0, "key": None, "value": value}
            off += 1


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


Batch = tuple[list[bool], list[Any], list[Any], list[Any]]
Column = Callable[[list[Any]], list[Any]]


def merged_plain(paths: Sequence[str], times_of: Sequence[Column], keys_of: Sequence[Column],
                 raw: bool = False, block_bytes: int = PLAIN_BLOCK) -> Iterator[Batch]:
    """merged() of two plain files, a batch at a time: (sides, times, keys, payloads), sides
    False for the first input and True for the second, times and keys as `times_of[i]` and
    `keys_of[i]` read them from a block of input i's values, payloads as plain_blocks_raw
    gives them (the values themselves unless `raw`).

    The order is merged()'s, computed per block instead of per record. A two-way merge
    of heads by the time carried forward (ties to the first input) takes each input in
    the order of its running maximum of those times: a record whose time is below an
    earlier one of its input comes right after that earlier one whatever the other input
    holds. Running maxima never go down, so the merge is a stable sort of two sorted
    runs. A record can go out once the other input is known up to its key: the first
    input's records up to the second's last key read, the second's below the first's.
    """
    from bisect import bisect_left, bisect_right

    blocks = [plain_blocks_raw(p, block_bytes, raw) for p in paths]
    # per input: what is left of its block (from start): times, keys, payloads, merge keys
    cols: list[list[list[Any]]] = [[[], [], [], []], [[], [], [], []]]
    start = [0, 0]
    state: list[list[Any]] = [[None, _NO_TIME], [None, _NO_TIME]]  # running max (None: none yet), last time
    more = [True, True]
    while True:
        for i in (0, 1):
            while more[i] and start[i] == len(cols[i][0]):
                block = next(blocks[i], None)
                if block is None:
                    more[i] = False
                    break
                values, payloads = block
                ts = times_of[i](values)
                cols[i] = [ts, keys_of[i](values), payloads, _running_max(ts, state[i])]
                start[i] = 0
        sa, sb = start
        a, b = cols
        na, nb = len(a[0]), len(b[0])
        if sa == na and sb == nb:
            return
        if sa == na or sb == nb:
            ea, eb = na, nb
        else:
            last_a, last_b = a[3][-1], b[3][-1]
            if last_a <= last_b:
                ea, eb = na, bisect_left(b[3], last_a, sb)
            else:
                ea, eb = bisect_right(a[3], last_b, sa), nb
        start[0], start[1] = ea, eb
        if eb == sb:
            yield [False] * (ea - sa), a[0][sa:ea], a[1][sa:ea], a[2][sa:ea]
        elif ea == sa:
            yield [True] * (eb - sb), b[0][sb:eb], b[1][sb:eb], b[2][sb:eb]
        else:
            ka, kb = a[3][sa:ea], b[3][sb:eb]
            n = len(ka)
            if ka[-1] <= kb[0]:
                yield ([False] * n + [True] * len(kb), a[0][sa:ea] + b[0][sb:eb], a[1][sa:ea] + b[1][sb:eb],
                       a[2][sa:ea] + b[2][sb:eb])
                continue
            both = ka + kb
            order = sorted(range(len(both)), key=both.__getitem__)  # stable: ties to the first input
            yield (list(map(n.__le__, order)), *(list(map((a[c][sa:ea] + b[c][sb:eb]).__getitem__, order))
                                                 for c in (0, 1, 2)))


_NO_TIME = -(1 << 62)  # the time carried before an input's first timed record (as in _merge_two)


def _running_max(ts: list[Any], state: list[Any]) -> list[Any]:
    """Merge keys of one block: the running maximum of the times carried forward over None.
    `state` is [running max or None, last time] across blocks."""
    high = state[0]
    if None not in ts:
        state[1] = ts[-1]
        if high is None or ts[0] >= high:
            if ts == sorted(ts):  # in order already (the usual case): the keys are the times
                state[0] = ts[-1]
                return ts
        out = list(accumulate(ts, max) if high is None else accumulate(ts, max, initial=high))
        if high is not None:
            del out[0]
        state[0] = out[-1]
        return out
    last = state[1]
    out = []
    for t in ts:
        if t is None:
            t = last
        else:
            last = t
        if high is None or t > high:
            high = t
        out.append(high)
    state[0], state[1] = high, last
    return out
