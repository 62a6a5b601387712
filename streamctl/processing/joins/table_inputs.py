"""The inputs of the enrichment kernel (stream_table.py's `enrich`): each side a log or a plain
file, read a block at a time as columns with its merge keys, on other cores where that pays."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import Any

import orjson

from streamctl.processing import inputorder, mergeorder
from streamctl.processing.eventfields import record_time
from streamctl.processing.joins.keys import block_column, block_times, key_getter

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
# Keys and times are read as the record path reads them (joins/keys.py): a value path a column at
# a time (block_column, block_times); the record key and `ts` from the records; any other record
# path (offset, partition, headers...) by key_getter / record_time on each record -- for a plain
# file, on the records inputorder.plain_records_of makes of its lines (offset = line number,
# partition 0, no key, no ts), so `--time-field offset` means what it means on the record path.

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


def log_side(path: str, on: Path, time_field: Path, table: bool, ahead: bool = False) -> Side:
    """A log's blocks in input order, joined on `on` (the record key, a value path or another record
    path), its times read from `time_field` (the append time `ts` by default); its record keys
    are kept for a table (tombstones), not for events. With `ahead`, read on other cores
    (_read_ahead, _partition_readers)."""
    columns, times_of = log_reader(on, time_field, table)
    parts = [blocks for _i, _p, blocks in inputorder.plan_blocks([path], inputorder.log_plan(path))]
    if len(parts) <= 1:  # one lane: its stored order
        side = Side((columns(b) for part in parts for b in part if b), times_of)
    else:
        lanes = [log_lane(part, columns, times_of) for part in parts]
        if ahead and len(parts) <= MAX_READERS:
            return _partition_readers(lanes, path)
        side = Side(_merged([mergeorder.Lane(lane) for lane in lanes]), None)
    return _read_ahead(side, path) if ahead else side


def log_reader(on: Path, time_field: Path, table: bool) -> tuple[Callable[[list[Record]], Block], TimesOf]:
    """How a log's blocks of records become a side's Blocks (joined on `on`, record keys kept for a
    table), and how a Block's source gives its times (read from `time_field`): for log_side, and
    for the follower's lanes (joins/follow_inputs.py)."""
    if on == ("key",):
        key_of = None
    elif on[0] == "value":
        key_of = _on_values(block_column(on))
    else:
        key_of = _on_records(key_getter(on))
    if time_field == ("ts",):
        times_of: Callable[[list[Record], list[Any]], Sequence[int | None]] = _ts_column
    elif time_field[0] == "value":
        times_of = _on_values(block_times(time_field))
    else:
        times_of = _on_records(record_time(time_field))

    def columns(batch: list[Record]) -> Block:
        values, rkeys = log_columns(batch)
        return values, (rkeys if key_of is None else key_of(batch, values)), rkeys if table else None, (batch, values)

    return columns, lambda source: times_of(*source)


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

    dumps, fragment = orjson.dumps, orjson.Fragment
    items = decoder.items(lambda: ((source, list(map(dumps, values)), keys) for source, values, keys in make()), path)
    closers.append(items.close)
    for source, texts, keys in items:
        yield list(map(fragment, texts)), keys, None, source


def _merged(lanes: list[mergeorder.Lane]) -> Iterator[Block]:
    """The lanes' Blocks in input order (mergeorder.merged_columns), each block's source its merge keys."""
    for _parts, (values, keys, rkeys, marks) in mergeorder.merged_columns(lanes, 3, marks=True):
        yield values, keys, rkeys, marks


def log_columns(batch: list[Record]) -> tuple[list[Any], list[Any]]:
    """A log block's values and record keys: the columns a decoded block carries, else its records'."""
    values = getattr(batch, "values", None)
    rkeys = getattr(batch, "keys", None)
    return (values if values is not None else [r["value"] for r in batch],
            rkeys if rkeys is not None else [r.get("key") for r in batch])


def plain_side(path: str, on: Path, time_field: Path, piece: int) -> Side:
    """A plain file's blocks, joined on the value path `on`, its times read from `time_field`."""
    key_of = block_column(on)
    times_of: TimesOf
    if time_field[0] == "value":
        times_of = _first(block_times(time_field))
    elif time_field == ("ts",):
        times_of = _first(_no_times)  # a plain record has no ts: with the default time field the file has none
    else:
        get = record_time(time_field)

        def times_of(source: tuple[list[Any], int]) -> list[int | None]:
            return list(map(get, inputorder.plain_records_of(*source)))

    def blocks() -> Iterator[Block]:
        for values, _payloads, base in inputorder.plain_blocks(path, piece):  # base: its first value's number
            yield values, key_of(values), None, (values, base)

    return Side(blocks(), times_of)


_ts = itemgetter("ts")


def _ts_column(batch: list[Record], _values: list[Any]) -> list[int | None]:
    tss = getattr(batch, "tss", None)  # a decoded block's column of append times
    return tss if tss is not None else list(map(_ts, batch))


def _no_times(values: list[Any]) -> list[int | None]:
    return [None] * len(values)


def _first(f: Callable[[list[Any]], Sequence[int | None]]) -> TimesOf:
    return lambda source: f(source[0])


def _on_values(f: Callable[[list[Any]], list[Any]]) -> Callable[[list[Record], list[Any]], list[Any]]:
    return lambda _batch, values: f(values)


def _on_records(get: Callable[[Record], Any]) -> Callable[[list[Record], list[Any]], list[Any]]:
    return lambda batch, _values: list(map(get, batch))


def _read_ahead(side: Side, path: str) -> Side:
    """An events log side read on a second core (_in_reader): the forked process also reads the
    records' times, merges the partitions and sends each block's merge keys. Not for a plain
    event file, whose times this process reads only while the table lasts."""

    def blocks() -> Iterator[tuple[list[int], list[Any], list[Any]]]:
        while side.next_block(True):
            yield side.marks, side.values, side.keys

    closers: list[Callable[[], None]] = []
    return Side(_in_reader(blocks, path, closers), None, closers)
