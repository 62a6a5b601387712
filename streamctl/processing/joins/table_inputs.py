"""The inputs of the enrichment kernel (stream_table.py's `enrich`): each side a log or a plain
file, read a block at a time as columns with its merge keys, on other cores where that pays."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import orjson

from streamctl.processing import inputorder, mergeorder
from streamctl.processing.inputorder import column
from streamctl.processing.joins.keys import column_times

Record = dict[str, Any]

# A side is one input, a log (any number of partitions) or a plain file (or `-`), read a block at
# a time into columns: values, join keys, record keys (for tombstones; a plain file has none) and,
# when asked, merge keys: the running maximum of the side's times in the side's own order
# (mergeorder.merge_keys, carried from block to block). A plain file and a one-partition log are
# one lane each, so that running maximum is each record's merge key by definition. A log of
# several partitions is merged by mergeorder.merge over its partitions' lanes, their times read
# once by the side's time field (the append time or any other), and each record keeps its lane's
# merge key: the merge hands records out in merge-key order, so the running maximum over the
# merged records is those same keys (a record's key is a time of its own lane read at or before
# it, and no record before it has a larger key). Either way, comparing the two sides' merge keys,
# the table first on equal keys, is the input order's rule: (merge key, input, partition,
# offset), the table's lanes first.
#
# Keys and times are read as the record path reads them, a column at a time (side_reader: each a
# column of the block, inputorder.column, the times then as keys.column_times reads them; a
# plain file's record paths other than value paths -- offset, partition -- on the records
# inputorder.plain_records_of makes of its lines: offset = line number, partition 0, no key, no
# ts), so `--time-field offset` means what it means on the record path.

Path = tuple[str, ...]
# A side's block: values, join keys, record keys (None: a plain file, or events, which need none),
# and what its times_of reads (the merge keys themselves when times_of is None)
Block = tuple[list[Any], list[Any], list[Any] | None, Any]
TimesOf = Callable[[Any], Sequence[int | None]]


class Side:
    """One input a block at a time: values, join keys, record keys (None: a plain file, or events),
    the merge keys when asked, and the position of the next record in the block."""

    def __init__(self, blocks: Iterator[Block], times_of: TimesOf | None,
                 closers: list[Callable[[], None]] | None = None, heads: bool = False) -> None:
        self.blocks = blocks
        # events whose values are the texts of their rows up to the right side (a follower's batch:
        # stream_table.enrich_sides says how)
        self.heads = heads
        self.closers = closers or []  # what stops the side's reading processes
        self.times_of = times_of  # None: a block's source is its merge keys already (a merged log)
        self.high = mergeorder.NO_TIME
        self.values: list[Any] = []
        self.keys: list[Any] = []
        self.rkeys: list[Any] | None = None
        self.marks: list[int] = []
        self.i = self.n = 0

    def next_block(self, timed: bool) -> bool:
        """The next block (its merge keys read when `timed`); False at the end of the input."""
        for values, keys, rkeys, source in self.blocks:
            if not values:
                continue
            self.values, self.keys, self.rkeys = values, keys, rkeys
            if self.times_of is None:
                self.marks = source
            elif timed:
                self.marks = mergeorder.merge_keys(self.times_of(source), self.high)
                self.high = self.marks[-1]
            self.i, self.n = 0, len(values)
            return True
        self.i = self.n = 0
        return False


def side(path: str, is_log: bool, on: Path, time_field: Path, table: bool, piece: int, ahead: bool = False) -> Side:
    """A side's blocks in input order (a log, `is_log`, of any number of partitions, or a plain file
    read in pieces of about `piece` bytes), read by side_reader: joined on `on` (the record key,
    a value path or another record path), its times read from `time_field` (the append time
    `ts` by default); a log's record keys are kept for a table (tombstones), not for events.
    A plain file and a one-partition log are one lane: its stored order. With `ahead`, a log is
    read on other cores (_read_ahead, _partition_readers); a plain file never is (its events'
    times are read only while the table lasts)."""
    columns, times_of = side_reader(on, time_field, table and is_log)  # (a plain file has no record keys)
    parts: list[Iterator[Any]]  # each lane's blocks
    if is_log:
        parts = [blocks for _i, _p, blocks in inputorder.plan_blocks([path], inputorder.log_plan(path))]
    else:
        ahead = False
        parts = [(inputorder.plain_block(values, base)
                  for values, _payloads, base in inputorder.plain_blocks(path, piece))]
    if len(parts) <= 1:  # one lane: its stored order
        one = Side((columns(b) for part in parts for b in part if b), times_of)
    else:
        lanes = [log_lane(part, columns, times_of) for part in parts]
        if ahead and len(parts) <= MAX_READERS:
            return _partition_readers(lanes, path)
        one = Side(_merged([mergeorder.Lane(lane) for lane in lanes]), None)
    return _read_ahead(one, path) if ahead else one


def side_reader(on: Path, time_field: Path, table: bool) -> tuple[Callable[[Any], Block], TimesOf]:
    """How a side's blocks -- a log's lists of records, a plain file's values (inputorder.PlainBlock)
    -- become Blocks: values, join keys by `on` (the record key, a value path or another record
    path), a table's record keys (tombstones); and how a Block's source, the block, gives its
    times by `time_field` (the append time `ts` as it is). Each is a column of the block,
    inputorder.column, as a window reads its fields. The one reading of a join side as columns:
    `side`, the follower's lanes (joins/follow_inputs.py) and the stream-stream join's plain files
    (joins/plain_inputs.py)."""

    def columns(block: Any) -> Block:
        return column(block, _VALUE), column(block, on), column(block, _KEY) if table else None, block

    if time_field == ("ts",):
        return columns, _append_times
    return columns, lambda block: column_times(column(block, time_field))


_VALUE, _KEY, _TS = ("value",), ("key",), ("ts",)


def _append_times(block: Any) -> list[int | None]:
    return column(block, _TS)


def log_lane(part: Iterator[list[Record]], columns: Callable[[list[Record]], Block],
             times_of: TimesOf) -> Iterator[tuple[Sequence[int | None], Block]]:
    """A partition's blocks as a mergeorder.Lane takes them: (times, Block) each."""
    for b in part:
        if b:
            block = columns(b)
            yield times_of(block[3]), block


# A log of events of up to this many partitions is read by a process per partition
# (_partition_readers); one of more partitions by one reading process that also merges them.
MAX_READERS = 8


def _partition_readers(lanes: list[Iterator[tuple[Sequence[int | None], Block]]], path: str) -> Side:
    """A partitioned events log, each partition read by a process of its own (_in_reader: its
    records' join keys, times and values written to JSON there), merged here by
    mergeorder.merge: the decoding is spread over the other cores, and the merge, the lookups
    and the rows stay in this process."""
    closers: list[Callable[[], None]] = []

    def read(lane: Iterator[tuple[Sequence[int | None], Block]]) -> Iterator[tuple[Sequence[int | None], Block]]:
        made = _in_reader(lambda: ((times, block[0], block[1]) for times, block in lane), path, closers)
        return ((block[3], block) for block in made)  # (the block's times, the block)

    return Side(_merged([mergeorder.Lane(read(lane)) for lane in lanes]), None, closers)


def _in_reader(make: Callable[[], Iterator[tuple[Any, list[Any], list[Any]]]], path: str,
               closers: list[Callable[[], None]]) -> Iterator[Block]:
    """Blocks of events read by a forked process (decoder.items): make() gives (source, values, join
    keys) of each block there, where the values are also written to JSON; this process gets
    (value texts, join keys, source) a block at a time and pastes the texts into the rows
    (orjson.Fragment: the bytes orjson.dumps writes for the value), so decoding and most of the
    rows' encoding leave the joining process. The log's end was fixed when the side was made,
    before the fork: the same records as reading here. Its stop goes to `closers`."""
    from streamctl.processing import decoder

    fragment = orjson.Fragment
    items = decoder.items(lambda: ((source, _texts(values), keys) for source, values, keys in make()), path)
    closers.append(items.close)
    for source, texts, keys in items:
        yield list(map(fragment, texts)), keys, None, source


def _texts(values: list[Any]) -> list[bytes]:
    """Each value's JSON text (orjson's; an int beyond 64 bits written exactly)."""
    try:
        return list(map(orjson.dumps, values))
    except TypeError:
        from streamctl.processing import exactjson

        return list(map(exactjson.dumps, values))


def _merged(lanes: list[mergeorder.Lane]) -> Iterator[Block]:
    """The lanes' Blocks in input order (mergeorder.round_columns), each block's source its merge keys."""
    for parts, order in mergeorder.merge(lanes):
        values, keys, rkeys, marks = mergeorder.round_columns(lanes, parts, order, 3, marks=True)
        yield values, keys, rkeys, marks


def _read_ahead(side: Side, path: str) -> Side:
    """An events log side read on a second core (_in_reader): the forked process also reads the
    records' times, merges the partitions and sends each block's merge keys. Not for a plain
    event file, whose times this process reads only while the table lasts."""

    def blocks() -> Iterator[tuple[list[int], list[Any], list[Any]]]:
        while side.next_block(True):
            yield side.marks, side.values, side.keys

    closers: list[Callable[[], None]] = []
    return Side(_in_reader(blocks, path, closers), None, closers)
