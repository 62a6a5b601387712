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
from collections.abc import Callable, MutableMapping
from itertools import chain, repeat
from typing import Any

import orjson

from streamctl.processing import inputorder
from streamctl.processing.joins import MIN_TIME, Emit, table_inputs
from streamctl.processing.joins.keys import changed_rows, norm_key
from streamctl.processing.watermark import Watermark


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
        """A table version; t None = no time, which does not move the watermark: a version is then
        valid from the beginning, and a tombstone (whose null value has no time field to read)
        deletes from the largest event time seen before it in the input order."""
        h = self.history.get(nkey)
        if h is None:
            h = self.history[nkey] = _History()
        if t is None:
            seen = self.clock.max_time
            h.add(seen if value is None and seen is not None else MIN_TIME, pos, value)
        else:
            h.add(t, pos, value)
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


# ---- the batch kernel of TableAtPosition (its inputs: table_inputs.py) ---------------------------

Path = tuple[str, ...]


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
    ev, tb = (table_inputs.side(path, logs[i], on[i], time_field[i], i == 1, piece, ahead and i == 0)
              for i, path in enumerate((left, right)))
    try:
        return enrich_sides(ev, tb, inner, write_jsonl, on[1] != ("key",))
    finally:
        for close in ev.closers:
            close()  # reading processes are stopped and reaped now, whatever a traceback keeps alive


def enrich_sides(ev: table_inputs.Side, tb: table_inputs.Side, inner: bool, write_jsonl: Callable[[bytes], None],
            by_value_path: bool, table: dict[Any, Any] | None = None) -> tuple[int, int, int]:
    """The rows of TableAtPosition over two sides; a table record changes the rows
    keys.changed_rows names. Events read their times only while the table has changes left:
    once it is read to its end, the rest of the events are enriched in their own order (a log
    of events whose blocks come with their merge keys, merged or read ahead, has them anyway).

    A follower runs this on each of its small batches (joins/follow.py:enrich_batch): `table` is
    where its table starts (the rows the batch's events read from the table on disk), its
    table changes come as their values' texts, and its events (a Side with `heads`) as the text
    of each row up to its right side, made by its reading process: each row is then pasted
    together from its head and its table row's text, the bytes the rows of events read here
    would be."""
    if table is None:
        table = {}
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
                # (a follower's change is its value's text already, bytes: no JSON value is)
                if value.__class__ is not bytes:
                    try:
                        value = fragment(b"%b" % dumps(value))
                    except TypeError:  # an int beyond 64 bits: its exact text
                        from streamctl.processing import exactjson

                        value = fragment(exactjson.dumps(value))
                table[k if k.__class__ is str else norm_key(k)] = value
        n_changes += j - tb.i
        tb.i = j

    def enrich(j: int) -> None:
        nonlocal n_events
        i = ev.i
        keys = ev.keys[i:j] if i or j < ev.n else ev.keys
        values = ev.values[i:j] if i or j < ev.n else ev.values
        get = table.get
        rights = [get(k) if k.__class__ is str else (get(norm_key(k)) if k is not None else None) for k in keys]
        if ev.heads:
            paste_rows(values, rights, inner, write_jsonl)
        else:
            if inner:
                rows = [{"key": k, "left": v, "right": r} for k, v, r in zip(keys, values, rights, strict=True)
                        if r is not None]
            else:
                rows = [{"key": k, "left": v, "right": r} for k, v, r in zip(keys, values, rights, strict=True)]
            if rows:
                try:
                    text = b"".join(map(dumps, rows, repeat(None), repeat(nl)))
                except TypeError:  # an int beyond 64 bits: written exactly
                    from streamctl.processing import exactjson

                    text = b"".join(exactjson.dumps(row, nl) for row in rows)
                write_jsonl(text)
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


def paste_rows(heads: list[bytes], rights: list[bytes | None], inner: bool, write: Callable[[bytes], None]) -> None:
    """The rows of events that come as their heads (each row's text up to its right side) with their
    table rows' texts (None: no row; with --how inner, no row out): the text orjson.dumps writes
    for {"key": k, "left": v, "right": orjson.Fragment(row) or None} with OPT_APPEND_NEWLINE."""
    texts: list[bytes]
    if inner:
        kept = [(h, r) for h, r in zip(heads, rights, strict=True) if r is not None]
        heads, texts = [h for h, _r in kept], [r for _h, r in kept]
    else:
        texts = [_NULL if r is None else r for r in rights]
    for i in range(0, len(heads), _ROWS_AT_ONCE):
        j = i + _ROWS_AT_ONCE
        write(b"".join(chain.from_iterable(zip(heads[i:j], texts[i:j], _ENDS, strict=False))))  # _ENDS: endless


_NULL = b"null"
_ENDS = repeat(b"}\n")
_ROWS_AT_ONCE = 8192  # rows joined into one write
