"""Stream-table join: enrich each LEFT event with the RIGHT changelog's row for its key.

The table is a changelog folded into the latest value per key; a null value
(tombstone) deletes the key. Two ways to pick the row:

- `TableAtPosition` (default): the row as it stands at the event's position in
  the input order, i.e. after every table change that came before the event.
  Emitted at once, in input order.
- `TableAsOfTime` (`--as-of event-time`): the version whose event time is at
  or before the event's (the latest by (time, position) among versions with
  time <= t). So that a version with the same or an earlier time arriving a
  little later still counts, an event waits until the watermark passes its
  time (W > t; W is the stream-stream join's watermark: the largest event time
  seen so far over both inputs, minus `lateness`) or the input ends; then it
  is looked up among the versions seen so far. Events that resolve at one
  position come out ordered by (time, position).
  Lateness: an event that arrives with its time already behind W resolves at
  once, and its answer is exact -- every version that came in on time and
  could be its answer (time <= t < W) is already in the history -- so events
  are never late here (Kafka Streams' stream-table join with a grace period
  joins such a record at once too). What can come too late is a table change:
  one whose time is behind W when it arrives (t < W) may be missing from rows
  already written for events at or after its time. It is still applied (a
  table never loses a change; later lookups see it), and it is counted late.
  `retention` bounds the history: a key keeps only the versions an event not
  older than W - retention could need (every version after the newest one at
  or before W - retention). An event older than that finds nothing if its key
  changed between its time and W - retention (Kafka Streams' versioned store
  answers null past its history retention too).

`TableAtPosition` has a batch kernel beside it, `enrich` (rows written as JSON lines; any mix of
logs and plain files, any join and time paths): the same rows, bytes and order, with the
per-record layers taken out.
Both inputs are read in blocks, and the input order (the table side first on equal merge keys)
is kept by merging runs of records rather than single records: a run of events between two
table changes all see the same table. Each table value is written to JSON once when it
changes (an orjson.Fragment pasted into every row that uses it), and a run's rows are encoded
by one C-level map. tests/props/test_join_enrich.py and tests/props/test_join_props.py hold
the kernel to the reference.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any

import orjson

from streamctl.processing import inputorder, mergeorder
from streamctl.processing.joins import MIN_TIME, Emit
from streamctl.processing.joins.keys import block_column, block_times, changed_rows, key_getter, norm_key, time_getter
from streamctl.processing.watermark import Watermark

Record = dict[str, Any]


class TableAtPosition:
    def __init__(self, inner: bool, emit: Emit, table: MutableMapping[Any, Any] | None = None) -> None:
        self.inner = inner
        self.emit = emit
        # the latest row per normalized key: a dict, or a follower's table on disk (joins/store.py)
        self.table: MutableMapping[Any, Any] = {} if table is None else table

    def change(self, nkey: Any, value: Any) -> None:
        if value is None:
            self.table.pop(nkey, None)
        else:
            self.table[nkey] = value

    def event(self, nkey: Any, key: Any, value: Any) -> None:
        row = self.table.get(nkey) if nkey is not None else None
        if row is not None or not self.inner:
            self.emit(key, value, row)

    def finish(self) -> None:
        """Nothing waits here: each event is joined with the table as it stands when it arrives."""

    def state_size(self) -> int:
        return len(self.table)


class _History:
    """One key's versions sorted by (time, position); value None = deleted."""

    __slots__ = ("pos", "times", "values")

    def __init__(self) -> None:
        self.times: list[int] = []
        self.pos: list[int] = []
        self.values: list[Any] = []

    def add(self, t: int, pos: int, value: Any) -> None:
        times = self.times
        if not times or t >= times[-1]:
            times.append(t)
            self.pos.append(pos)
            self.values.append(value)
            return
        # an out-of-order version: positions only grow, so the same time sorts after its equals
        i = bisect_right(times, t)
        times.insert(i, t)
        self.pos.insert(i, pos)
        self.values.insert(i, value)

    def prune(self, horizon: int) -> None:
        """Drop the versions superseded by a version at or before `horizon`."""
        i = bisect_right(self.times, horizon) - 1
        if i > 0:
            del self.times[:i]
            del self.pos[:i]
            del self.values[:i]

    def at(self, t: int) -> Any:
        i = bisect_right(self.times, t)
        return self.values[i - 1] if i else None

    def dump(self) -> list:
        return [self.times, self.pos, self.values]

    @classmethod
    def load(cls, data: list) -> _History:
        h = cls()
        h.times, h.pos, h.values = data
        return h


class TableAsOfTime:
    def __init__(self, inner: bool, emit: Emit, retention: int | None = None, lateness: int = 0,
                 history: MutableMapping[Any, _History] | None = None) -> None:
        self.inner = inner
        self.emit = emit
        self.retention = retention
        self.lateness = lateness
        # each key's versions: a dict, or a follower's table on disk (joins/store.py)
        self.history: MutableMapping[Any, _History] = {} if history is None else history
        self.waiting: list[tuple[int, int, Any, Any, Any]] = []  # (t, position, nkey, key, value)
        self.clock = Watermark(lateness)

    @property
    def watermark(self) -> int | None:
        """The watermark, None before any time."""
        return None if self.clock.max_time is None else self.clock.value

    def advance(self, t: int) -> None:
        """Move the watermark (every record with a time does, even one without a usable key)."""
        if self.clock.observe(t):
            wm = self.clock.value
            if self.waiting and self.waiting[0][0] < wm:
                self._resolve(wm)

    def is_late(self, t: int | None) -> bool:
        """Whether a table change with time t comes too late (behind the watermark; see above)."""
        wm = self.watermark
        return t is not None and wm is not None and t < wm

    def change(self, nkey: Any, t: int | None, value: Any, pos: int) -> None:
        """A table version; t None = no time: valid from the beginning, does not move the watermark."""
        h = self.history.get(nkey)
        if h is None:
            h = self.history[nkey] = _History()
        h.add(MIN_TIME if t is None else t, pos, value)
        if self.retention is not None and self.watermark is not None:
            h.prune(self.watermark - self.retention)
        if t is not None:
            self.advance(t)

    def event(self, nkey: Any, key: Any, t: int, value: Any, pos: int) -> None:
        heapq.heappush(self.waiting, (t, pos, nkey, key, value))
        self.advance(t)
        if self.waiting[0][0] < self.watermark:  # type: ignore[operator]  # an event already behind it
            self._resolve(self.watermark)

    def _resolve(self, wm: int | None) -> None:
        waiting = self.waiting
        history = self.history
        emit = self.emit
        inner = self.inner
        horizon = None if self.retention is None or self.watermark is None else self.watermark - self.retention
        while waiting and (wm is None or waiting[0][0] < wm):
            t, _pos, nkey, key, value = heapq.heappop(waiting)
            row = None
            if nkey is not None:
                h = history.get(nkey)
                if h is not None:
                    if horizon is not None:
                        h.prune(horizon)
                    row = h.at(t)
            if row is not None or not inner:
                emit(key, value, row)

    def finish(self) -> None:
        self._resolve(None)

    def state_size(self) -> int:
        return sum(len(h.times) for h in self.history.values()) + len(self.waiting)


# ---- the batch kernel of TableAtPosition ------------------------------------------------------
#
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
# path (offset, partition, headers...) by key_getter / time_getter on each record -- for a plain
# file, on the records inputorder.plain_records_of makes of its lines (offset = record number,
# partition 0, no key, no ts), so `--time-field offset` means what it means on the record path.

Path = tuple[str, ...]
# A side's block: values, join keys, record keys (None: a plain file, or events, which need none),
# and what its times_of reads (the merge keys themselves when times_of is None)
Block = tuple[list[Any], list[Any], list[Any] | None, Any]
TimesOf = Callable[[Any], Sequence[int | None]]


class _Side:
    """One input a block at a time: values, join keys, record keys (None: a plain file, or events),
    the merge keys when asked, and the position of the next record in the block."""

    def __init__(self, blocks: Iterator[Block], times_of: TimesOf | None,
                 closers: list[Callable[[], None]] | None = None) -> None:
        self.blocks = blocks
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


def _log_side(path: str, on: Path, time_field: Path, table: bool, ahead: bool = False) -> _Side:
    """A log's blocks in input order, joined on `on` (the record key, a value path or another record
    path), its times read from `time_field` (the append time `ts` by default); its record keys
    are kept for a table (tombstones), not for events. With `ahead`, read on other cores
    (_read_ahead, _partition_readers)."""
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
        times_of = _on_records(time_getter(time_field))

    def columns(batch: list[Record]) -> Block:
        vals = getattr(batch, "values", None)
        values = vals if vals is not None else [r["value"] for r in batch]
        rk = getattr(batch, "keys", None)
        rkeys = rk if rk is not None else [r.get("key") for r in batch]
        return values, (rkeys if key_of is None else key_of(batch, values)), rkeys if table else None, (batch, values)

    parts = inputorder.log_partitions(path)
    if len(parts) <= 1:  # one lane: its stored order
        blocks = (columns(b) for _p, part in parts for b in part if b)
        side = _Side(blocks, lambda source: times_of(*source))
        return _read_ahead(side, path) if ahead else side

    def lane(part: Iterator[list[Record]]) -> Iterator[tuple[Sequence[int | None], Block]]:
        for b in part:
            if b:
                block = columns(b)
                yield times_of(*block[3]), block

    if ahead and len(parts) <= MAX_READERS:
        return _partition_readers([lane(part) for _p, part in parts], path)
    side = _Side(_merged([mergeorder.Lane(lane(part)) for _p, part in parts]), None)
    return _read_ahead(side, path) if ahead else side


# A log of events of up to this many partitions is read by a process per partition
# (_partition_readers); one of more partitions by one reading process that also merges them.
MAX_READERS = 8


def _partition_readers(lanes: list[Iterator[tuple[Sequence[int | None], Block]]], path: str) -> _Side:
    """A partitioned events log, each partition decoded in a forked process of its own (its records'
    join keys, times and values written to JSON there), merged here by mergeorder.merge: the
    decoding is spread over the other cores, and the merge, the lookups and the rows stay in
    this process, which pastes the value texts into the rows (orjson.Fragment: the bytes
    orjson.dumps writes for the value). The log's end was fixed when the lanes were made,
    before the forks: the same records as reading here."""
    from streamctl.processing import decoder

    fragment = orjson.Fragment
    closers: list[Callable[[], None]] = []

    def read(lane: Iterator[tuple[Sequence[int | None], Block]]) -> Iterator[tuple[Sequence[int | None], Block]]:
        items = decoder.items(lambda: ((times, *_texts(block)) for times, block in lane), path)
        closers.append(items.close)
        for times, texts, keys in items:
            yield times, (list(map(fragment, texts)), keys, None, None)

    return _Side(_merged([mergeorder.Lane(read(lane)) for lane in lanes]), None, closers)


def _texts(block: Block) -> tuple[list[bytes], list[Any]]:
    """A block's values written to JSON, and its join keys (what a reading process sends)."""
    return list(map(orjson.dumps, block[0])), block[1]


def _merged(lanes: list[mergeorder.Lane]) -> Iterator[Block]:
    """The lanes' columns in input order (mergeorder.merge), each block's source its merge keys."""
    for parts, order in mergeorder.merge(lanes):
        if order is None:
            k, s, e = parts[0]
            lane = lanes[k]
            values, keys, rkeys, _source = lane.payload
            whole = not s and e == len(values)
            yield ((values, keys, rkeys, lane.keys) if whole else
                   (values[s:e], keys[s:e], None if rkeys is None else rkeys[s:e], lane.keys[s:e]))
            continue
        vals: list[Any] = []
        ks: list[Any] = []
        marks: list[int] = []
        rks: list[Any] | None = None if lanes[parts[0][0]].payload[2] is None else []
        for k, s, e in parts:
            values, keys, rkeys, _source = lanes[k].payload
            vals += values[s:e]
            ks += keys[s:e]
            marks += lanes[k].keys[s:e]
            if rks is not None:
                rks += rkeys[s:e]
        marks.sort()  # the merge keys in the order's order: `order` is their stable sort
        yield (list(map(vals.__getitem__, order)), list(map(ks.__getitem__, order)),
               None if rks is None else list(map(rks.__getitem__, order)), marks)


def _plain_side(path: str, on: Path, time_field: Path, piece: int) -> _Side:
    """A plain file's blocks, joined on the value path `on`, its times read from `time_field`."""
    key_of = block_column(on)
    times_of: TimesOf
    if time_field[0] == "value":
        times_of = _first(block_times(time_field))
    elif time_field == ("ts",):
        times_of = _first(_no_times)  # a plain record has no ts: with the default time field the file has none
    else:
        get = time_getter(time_field)

        def times_of(source: tuple[list[Any], int]) -> list[int | None]:
            return list(map(get, inputorder.plain_records_of(*source)))

    def blocks() -> Iterator[Block]:
        base = 0  # the record number of the block's first value
        for values in inputorder.plain_blocks(path, piece):
            yield values, key_of(values), None, (values, base)
            base += len(values)

    return _Side(blocks(), times_of)


_ts = itemgetter("ts")


def _ts_column(batch: list[Record], _values: list[Any]) -> list[int | None]:
    return list(map(_ts, batch))


def _no_times(values: list[Any]) -> list[int | None]:
    return [None] * len(values)


def _first(f: Callable[[list[Any]], Sequence[int | None]]) -> TimesOf:
    return lambda source: f(source[0])


def _on_values(f: Callable[[list[Any]], list[Any]]) -> Callable[[list[Record], list[Any]], list[Any]]:
    return lambda _batch, values: f(values)


def _on_records(get: Callable[[Record], Any]) -> Callable[[list[Record], list[Any]], list[Any]]:
    return lambda batch, _values: list(map(get, batch))


def enrich(left: str, right: str, on: tuple[Path, Path], time_field: tuple[Path, Path], inner: bool,
           write_jsonl: Callable[[bytes], None], logs: tuple[bool, bool],
           piece: int = inputorder.PIECE) -> tuple[int, int, int]:
    """TableAtPosition's rows of events LEFT enriched with table RIGHT, written to write_jsonl: each
    side a log (`logs`, any number of partitions) or a plain file, joined on `on`, its times read
    from `time_field`. Returns (events, changes, table size at the end). A plain file is read in
    pieces of about `piece` bytes: a piece's objects stay in the CPU cache while its rows are
    made (1 MiB blocks measured 2.5x slower end to end)."""
    from streamctl.processing import decoder

    ahead = decoder.can_fork()
    ev, tb = (_log_side(path, on[i], time_field[i], i == 1, ahead and i == 0) if logs[i]
              else _plain_side(path, on[i], time_field[i], piece) for i, path in enumerate((left, right)))
    try:
        return _enrich(ev, tb, inner, write_jsonl, on[1] != ("key",))
    finally:
        for close in ev.closers:
            close()  # reading processes are stopped and reaped now, whatever a traceback keeps alive


def _read_ahead(side: _Side, path: str) -> _Side:
    """An events log side read on a second core: a forked process (decoder.items) decodes its
    records, reads their keys and times, merges its partitions and writes each value to JSON;
    this one gets (value texts, join keys, merge keys) a block at a time and pastes the texts
    into the rows (orjson.Fragment: the bytes orjson.dumps writes for the value), so decoding,
    the merge and most of the rows' encoding leave the joining process. The log's end was
    fixed when the side was made, before the fork: the same records as reading here. Not for a
    plain event file, whose times this process reads only while the table lasts."""
    from streamctl.processing import decoder

    def blocks() -> Iterator[tuple[list[bytes], list[Any], list[int]]]:
        while side.next_block(True):
            yield *_texts((side.values, side.keys, None, None)), side.marks

    fragment = orjson.Fragment
    ahead = decoder.items(blocks, path)
    received = ((list(map(fragment, texts)), keys, None, marks) for texts, keys, marks in ahead)
    return _Side(received, None, [ahead.close])


def _enrich(ev: _Side, tb: _Side, inner: bool, write_jsonl: Callable[[bytes], None],
            by_value_path: bool) -> tuple[int, int, int]:
    """The rows of TableAtPosition over two sides; a table record changes the rows
    keys.changed_rows names. Events read their times only while the table has changes left:
    once it is read to its end, the rest of the events are enriched in their own order (a log
    of events whose blocks come with their merge keys, merged or read ahead, has them anyway)."""
    table: dict[Any, Any] = {}
    dumps, fragment = orjson.dumps, orjson.Fragment
    nl = orjson.OPT_APPEND_NEWLINE
    n_events = n_changes = 0

    def apply(j: int) -> None:
        nonlocal n_changes
        keys, values, rkeys = tb.keys, tb.values, tb.rkeys
        for x in range(tb.i, j):
            value = values[x]
            if value is None:
                for nk, _k in changed_rows(None, None if rkeys is None else rkeys[x], keys[x], by_value_path):
                    table.pop(nk, None)
                continue
            k = keys[x]
            if k is not None:
                # a copy of the text: orjson's result keeps its whole write buffer (4 KiB) alive with it
                table[k if k.__class__ is str else norm_key(k)] = fragment(b"%b" % dumps(value))
        n_changes += j - tb.i
        tb.i = j

    def enrich(j: int) -> None:
        nonlocal n_events
        i = ev.i
        keys = ev.keys[i:j] if i or j < ev.n else ev.keys
        values = ev.values[i:j] if i or j < ev.n else ev.values
        get = table.get
        rights = [get(k) if k.__class__ is str else (get(norm_key(k)) if k is not None else None) for k in keys]
        if inner:
            rows = [{"key": k, "left": v, "right": r} for k, v, r in zip(keys, values, rights, strict=True)
                    if r is not None]
        else:
            rows = [{"key": k, "left": v, "right": r} for k, v, r in zip(keys, values, rights, strict=True)]
        if rows:
            write_jsonl(b"".join(map(dumps, rows, repeat(None), repeat(nl))))
        n_events += j - i
        ev.i = j

    tb.next_block(True)
    ev.next_block(tb.n > 0)
    while ev.n:
        if not tb.n:
            enrich(ev.n)  # the table is complete: the rest of the events in their own order
        else:
            # events before the next table change (the table wins ties), then changes up to the next event
            enrich(bisect_left(ev.marks, tb.marks[tb.i], ev.i))
            if ev.i < ev.n:
                apply(bisect_right(tb.marks, ev.marks[ev.i], tb.i))
                if tb.i == tb.n:
                    tb.next_block(True)
        if ev.i == ev.n:
            ev.next_block(tb.n > 0)
    while tb.n:  # changes after the last event: counted, and the table's final size reported
        apply(tb.n)
        tb.next_block(True)
    return n_events, n_changes, len(table)
