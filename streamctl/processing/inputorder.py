"""The inputs of window and join, read in the one input order (streamctl.processing.mergeorder).

Here are the lanes' sources: a log's partitions (read a piece at a time, each line checked)
and plain files (a block of lines at a time), and the merges of them that window and join
read: `log_batches` (one log), `merged` (several inputs, for join). The order itself, merge
keys and the merge, is mergeorder's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import chain, repeat
from operator import itemgetter
from typing import Any, TypeVar

import orjson

from streamctl.clients import consumer
from streamctl.errors import StorageError, UsageError
from streamctl.processing import columns, exactjson
from streamctl.processing.mergeorder import NO_TIME, Lane, MergedBatch, merge_lanes, record_lane
from streamctl.storage import fieldpaths, plainfile, reader, record
from streamctl.storage import log as logmod

Record = dict[str, Any]
# A record's event time (None: none). A TimeOf may carry `column`, a function giving the times of
# a list of records at once (the same values): a lane then reads a block's times with one call.
TimeOf = Callable[[Record], "int | None"]
# A block of records in input order: a list of records, or (a log read for a few fields) the
# columns of those fields, which parse a record in full only when it is taken.
Block = Sequence[Record] | columns.FieldBatch

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


# -- lanes of a log and of a plain file ---------------------------------------------------

def _ts_of(rec: Record) -> int | None:
    return rec["ts"]


# The lanes of a read, in tie order: (input, partition, first offset, end offset or None: as far as
# the partition reaches when it is read) of each log partition with records to read
Plan = list[tuple[int, int, int, int | None]]


def log_plan(path: str, i: int = 0, starts: dict[int, int] | None = None) -> Plan:
    """Input i's lanes: each partition of the log at `path` with records past `starts` (from the
    partition's own start where it has none)."""
    _lg, ranges = read_plan(path, starts)
    return [(i, p, start, end) for p, start, end in ranges]


def plan_blocks(paths: Sequence[str], plan: Plan) -> Iterator[tuple[int, int, Iterator[list[Record]]]]:
    """(input, partition, its records in lists in stored order) of each lane of the plan (the lanes'
    sources: for record_lanes, and for a reader that makes its own lanes of them)."""
    opened: dict[int, logmod.Log] = {}
    for i, p, start, end in plan:
        lg = opened.get(i) or opened.setdefault(i, logmod.open_log(paths[i]))
        yield i, p, partition_blocks(paths[i], lg, p, start, end)


def record_lanes(paths: Sequence[str], plan: Plan, time_of: Sequence[TimeOf],
                 highs: Sequence[dict[int, int]] | None = None) -> list[Lane]:
    """The plan's lanes of records (mergeorder.record_lane), each named (input, partition), its
    records timed by time_of[input], its merge key carried on from highs[input] (by partition:
    where the follower's last round left it)."""
    return [record_lane((i, p), blocks, time_of[i], NO_TIME if highs is None else highs[i].get(p, NO_TIME))
            for i, p, blocks in plan_blocks(paths, plan)]


def log_batches(path: str, starts: dict[int, int] | None = None, time_of: TimeOf | None = None,
                highs: dict[int, int] | None = None) -> Generator[Block, None, None]:
    """A log's records in the input order, in lists.

    A one-partition log is its own order: it is parsed a block at a time (one orjson call for
    the block, its envelopes checked column by column). Several partitions go through
    merge_lanes, as MergedBatch lists of records (`highs` of each by (0, partition)), timed by
    `time_of` (the append time by default). (A window's read of a log as columns of the fields
    it needs: decoder.log_batches.)
    """
    plan = log_plan(path, 0, starts)
    if len(plan) == 1 and highs is None:
        for _i, _p, blocks in plan_blocks([path], plan):
            yield from blocks
        return
    yield from merge_lanes(record_lanes([path], plan, [time_of or _ts_of], None if highs is None else [highs]))


def partition_blocks(path: str, lg: logmod.Log, p: int, start: int, end: int | None) -> Iterator[list[Record]]:
    """A partition's records from offset start to end, in lists (piece_records of each piece)."""
    return map(partial(piece_records, path, p), partition_pieces(lg, p, start, end))


def read_plan(path: str, starts: dict[int, int] | None = None) -> tuple[logmod.Log, list[tuple[int, int, int | None]]]:
    """The log and (partition, start, end) of each partition with something to read (past `starts`)."""
    lg = logmod.open_log(path)
    pl = consumer.plan(lg, list(range(lg.partitions)), None, None)
    if starts:
        for p, off in starts.items():
            if p in pl.positions:
                pl.positions[p].start = off
    return lg, [(p, pos.start, pos.end) for p, pos in pl.positions.items()
                if pos.end is None or pos.start < pos.end]


def corrupt_line(path: str, p: int, line: bytes, e: Exception) -> StorageError:
    """A corrupt stored line of partition p: a StorageError (exit 1) naming its segment file and byte
    offset, found by searching the partition's segments for the line (only on this error path)."""
    import mmap
    import os

    try:
        for seg in logmod.open_log(path).segments(p):
            with open(seg.path, "rb") as f:
                if os.fstat(f.fileno()).st_size == 0:
                    continue
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                    whole = line + b"\n"
                    pos = 0 if m[:len(whole)] == whole else m.find(b"\n" + whole) + 1
                    if pos > 0 or m[:len(whole)] == whole:
                        return reader.corrupt(seg.path, pos, e)
    except (OSError, ValueError, StorageError):
        pass
    return StorageError(f"{path}: partition {p}: corrupt record ({e}); run `streamctl check` on the log")


def partition_pieces(lg: logmod.Log, p: int, start: int, end: int | None, piece_bytes: int = 0) -> Iterator[bytes]:
    """A partition's lines from offset start to end, in pieces of whole lines of about PIECE bytes:
    a batch's objects then stay in the CPU cache while the consumer goes over them column by
    column (1 MiB pieces measured 2x slower)."""
    size = piece_bytes or PIECE
    for block in reader.iter_blocks(lg, p, start, end):
        i, n = 0, len(block)
        while i < n:
            j = block.rfind(b"\n", i, i + size) if i + size < n else n - 1
            if j < i:
                j = block.find(b"\n", i + size)
            piece = block[i:j + 1] if i or j + 1 < n else block
            i = j + 1
            yield piece


def piece_records(path: str, p: int, piece: bytes) -> list[Record]:
    """A piece's records, read in full and each line checked (a corrupt line is a StorageError
    naming it)."""
    recs = _block_records(piece)
    if recs is None:  # something wrong in the piece: line by line, for the first bad line's message
        return [_line_record(path, p, line) for line in piece.splitlines()]
    return recs


def _line_record(path: str, p: int, line: bytes) -> Record:
    """One line's record, by _block_records' check (record.parse's, for the message, when it fails)."""
    recs = _block_records(line)
    if recs is not None:
        return recs[0]
    try:
        return record.parse(line)
    except record.BadRecord as e:
        raise corrupt_line(path, p, line, e) from None


PIECE = 1 << 16
# Pieces read as columns (the window's read of a log: FieldReader, then numpy for times and cells):
# larger, so numpy's per-call cost is spread over ~1000 lines (1M epoch-ms events, tumbling 1m
# count+avg: 4.1-4.2 s wall in 64 KiB pieces, 3.6 s in 256 KiB)
COLUMN_PIECE = 1 << 18


_NoneType = type(None)
_KEY_TYPES = {str, _NoneType}


class RecordBatch(list):
    """A list of records with the columns the envelope check read anyway: each record's key and
    value (in order), for a consumer that needs them; from _block_records also each one's ts and
    offset (`tss`, `offs`: a batch made elsewhere may lack them)."""

    __slots__ = ("keys", "values", "tss", "offs")
    keys: list[Any]
    values: list[Any]
    tss: list[int]
    offs: list[int]


def _block_records(block: bytes) -> RecordBatch | None:
    """A block's records when every line is one (orjson's parse of each line, the envelope checked a
    column at a time), else None. (Parsing the block as one JSON array is a little faster but needs
    two more scans of the bytes to prove it reads the same lines.)"""
    try:
        lines = block.splitlines()
        objs = exactjson.exact_all(list(map(orjson.loads, lines)), lines, block)
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
    batch.keys, batch.values, batch.tss, batch.offs = keys, values, tss, offs
    return batch


_INT = {int}
_get_ts, _get_offset, _get_partition, _get_value = (itemgetter(k) for k in ("ts", "offset", "partition", "value"))


PLAIN_BLOCK = 1 << 20  # bytes read from a plain file at a time


def plain_blocks(path: str, block_bytes: int = PLAIN_BLOCK,
                 raw: bool = False) -> Iterator[tuple[list[Any], list[Any], Base]]:
    """A plain file's values (one per non-blank line), parsed a block of lines at a time, with each
    value's payload and their offsets (numbered's Base): (values, payloads, base).

    The same values as reading line by line: lines split on \\n, a line of only JSON whitespace
    is skipped (orjson reads the others with their whitespace as they are). With `raw`, a payload
    is the line's own bytes when they are exactly what orjson.dumps makes of its value (so they
    can be pasted into output as they are), else the value itself (JSON values are never bytes);
    without, the payloads are the values. An invalid line is consume's DataError naming the file
    and line (numbered), raised after the block's good values before it have been handed out.
    """
    pieces = map(partial(plain_piece, raw=raw), line_blocks(path, block_bytes))
    read = (((values, payloads), len(values), error, lines, at) for values, payloads, error, lines, at in pieces)
    for (values, payloads), base in numbered(path, read):
        yield values, payloads, base


T = TypeVar("T")


# Where a piece's records are in its file: the offset (line number from 0) of the first, the others
# on the lines after it; or, for a piece with blank lines, the offset of each record
Base = int | list[int]


def numbered(path: str, pieces: Iterable[tuple[T, int, str | None, int, list[int] | None]]) -> Iterator[tuple[T, Base]]:
    """A plain file's pieces of lines in order, each (item, its records, why its first invalid line
    is invalid or None, its lines: with an invalid line, those before it, and the line of each
    record in the piece when some line is blank, else None), as (item, its records' offsets:
    Base) of each piece with records. A plain record's offset is its line number from 0 (a blank
    line holds no record, and its number is skipped). An invalid line is consume's DataError
    naming the file and line (plainfile.invalid_json), raised after the items before it. The
    one count of a plain file's lines, whichever process read a piece (decoder.plain_batches)."""
    line = 0  # the lines before the piece
    for item, n, error, lines, at in pieces:
        if n:
            yield item, (line if at is None else [line + i for i in at])
        if error is not None:
            raise plainfile.invalid_json(path, line + lines + 1, error)
        line += lines


def line_blocks(path: str, block_bytes: int) -> Iterator[bytes]:
    """A plain file's bytes a read of `block_bytes` at a time, cut after the last newline of each
    (the rest goes with the next read); the last block may lack its newline."""
    import os

    _name, fd = plainfile.open_plain(path)
    rest: list[bytes] = []  # the line the last read ended in (joined once: a long line is not copied per read)
    try:
        while True:
            data = os.read(fd, block_bytes)
            if not data:
                if rest:
                    yield b"".join(rest)
                return
            cut = data.rfind(b"\n") + 1
            if not cut:
                rest.append(data)
                continue
            if rest:
                rest.append(data[:cut])
                yield b"".join(rest)
            else:
                yield data[:cut] if cut < len(data) else data
            rest = [data[cut:]] if cut < len(data) else []
    finally:
        if path != "-":
            os.close(fd)


# In a block of dicts parsed as one array, a line can only hand a neighbour part of its
# value if some line holds two dicts side by side: `}` `,` `{` with JSON whitespace between.
_PLAIN_SIDE_BY_SIDE = re.compile(rb"\}[ \t\r]*,[ \t\r]*\{")
_DICT = {dict}


def plain_piece(piece: bytes, raw: bool = False) -> tuple[list[Any], list[Any], str | None, int, list[int] | None]:
    """The values of a piece of whole lines (the last may lack its newline), their payloads
    (plain_blocks), why its first invalid line is invalid (None: none), its number of lines
    (with an invalid line: the lines before it; the values are those before it), and the line
    (from 0) of each value when some line is blank (None: one value a line)."""
    text = piece[:-1] if piece.endswith(b"\n") else piece
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
                values = exactjson.exact_all(values, None, text)
                return values, _payloads(values, text, array, raw), None, len(values), None
    lines = text.split(b"\n")
    try:
        values = exactjson.exact_all(list(map(loads, lines)), lines, text)
    except orjson.JSONDecodeError:
        pass
    else:
        return values, _payloads(values, text, b"[" + b",".join(lines) + b"]", raw, lines), None, len(lines), None
    values = []
    at: list[int] = []
    for i, line in enumerate(lines):
        line = line.strip(b" \t\r\n")
        if not line:
            continue
        try:
            values.append(exactjson.loads(line))
        except orjson.JSONDecodeError as e:
            return values, values, str(e), i, at
        at.append(i)
    return values, values, None, len(lines), at


def _payloads(values: list[Any], text: bytes, array: bytes, raw: bool,
              lines: list[bytes] | None = None) -> list[Any]:
    """The lines themselves when the block's lines are all exactly orjson's bytes for their values,
    else the values. One comparison decides: `array` is the lines joined with commas in
    brackets, and when it equals orjson.dumps(values) each line equals its value's dumps
    (both are complete JSON values at the same place, so they end at the same byte)."""
    try:
        same = raw and orjson.dumps(values) == array
    except TypeError:  # an int beyond 64 bits (exactjson): the values, exact
        return values
    if same:
        return lines if lines is not None else text.split(b"\n")
    return values


def plain_record_blocks(path: str) -> Iterator[list[Record]]:
    """A plain file's records (plain_records_of) a block at a time."""
    for values, _payloads, base in plain_blocks(path):
        yield plain_records_of(values, base)


class PlainBlock(list):
    """A block of a plain file's values, with the offset of the first (`base`: numbered's Base):
    `column` reads a value path from the values, any other record path from its records
    (plain_records_of), made only then."""

    __slots__ = ("base",)
    base: Base


def plain_block(values: list[Any], base: Base) -> PlainBlock:
    block = PlainBlock(values)
    block.base = base
    return block


# The columns a RecordBatch keeps, by the record field they hold
_KEPT = {"key": "keys", "value": "values", "ts": "tss", "offset": "offs"}


def column(block: Any, parts: tuple[str, ...]) -> list:
    """The values of a record path over a block, as fieldpaths.get reads each record's: a FieldBatch's
    column; the columns a RecordBatch keeps (its records' keys, values, append times and offsets:
    a field as it is, a path under one read from it); a plain file's values for a value path
    (PlainBlock); else each record's field. The one reading of a block as columns: a window's
    (windows/events.py) and each join side's (joins/table_inputs.py:side_reader)."""
    if isinstance(block, columns.FieldBatch):
        assert block.cols is not None
        return block.cols[parts]
    head, rest = parts[0], parts[1:]
    kept: list | None = None
    if type(block) is PlainBlock:
        if head != "value":
            return column(plain_records_of(block, block.base), parts)
        kept = block
    elif type(block) is RecordBatch and head in _KEPT:
        kept = getattr(block, _KEPT[head], None)  # (a batch made elsewhere may lack some)
    if kept is None:
        kept = list(map(dict.get, block, repeat(head)))
    return fieldpaths.column(kept, rest) if rest else kept


def plain_records_of(values: list[Any], base: Base) -> list[Record]:
    """A plain file's values as records: offset = line number (numbered's Base), partition 0, no key."""
    offsets = base if isinstance(base, list) else range(base, base + len(values))
    return [{"offset": o, "partition": 0, "key": None, "value": v} for o, v in zip(offsets, values, strict=True)]


def late_line(rec: Record, is_log: bool) -> bytes:
    """A late record as --late-out keeps it (window and join alike): the record (log) or the
    value line (plain file), the form its input holds it in."""
    return exactjson.dumps(rec if is_log else rec.get("value")) + b"\n"


def records(spec: InputSpec) -> Iterator[Record]:
    """One input's records in its own order (a log's partitions merged by ts)."""
    return chain.from_iterable(log_batches(spec.path) if spec.is_log else plain_record_blocks(spec.path))


def merged(specs: Sequence[InputSpec], event_time: TimeOf | Sequence[TimeOf]) -> Iterator[tuple[int, Record]]:
    """(input index, record) over all inputs in the input order; ties go to the earlier input.

    `event_time` reads a record's time (the merge key's source); pass one function per input
    when the inputs keep their times in different fields (join's --time-field A=B).
    """
    times = list(event_time) if isinstance(event_time, Sequence) else [event_time] * len(specs)
    paths = [spec.path for spec in specs]
    lanes: list[Lane] = []
    for i, spec in enumerate(specs):
        if spec.is_log:
            lanes += record_lanes(paths, log_plan(spec.path, i), times)
        else:
            lanes.append(record_lane((i, 0), plain_record_blocks(spec.path), times[i]))
    return _with_inputs(merge_lanes(lanes), [lane.name[0] for lane in lanes])


def _with_inputs(batches: Iterator[MergedBatch], inputs: list[int]) -> Iterator[tuple[int, Record]]:
    for batch in batches:
        yield from zip(map(inputs.__getitem__, batch.lanes), batch, strict=True)
