"""Stream-table enrichment of two logs, a batch at a time (the `--table --as-of position` hot path).

The same rows, bytes and order as joins.driver's record-at-a-time stream-table join
(TableAtPosition) with the JSON-lines writer, with the per-record layers taken out: both logs are
read in blocks (inputorder.log_batches), the input order (table side first on
equal ts) is kept by merging runs of records rather than single records (a run
of events between two table changes all see the same table), each table value
is written to JSON once when it changes (an orjson.Fragment pasted into every
row that uses it), and a run's rows are encoded by one C-level map.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from itertools import islice, repeat
from operator import itemgetter, le
from typing import Any

import orjson

from streamctl.processing import inputorder

Record = dict[str, Any]
_ts = itemgetter("ts")


class _Side:
    """One log read a batch at a time: the current batch's records, times, keys and values, and
    the position of the next record in it."""

    def __init__(self, batches: Iterator[inputorder.Block], key_field: str | None) -> None:
        self.batches = batches
        self.key_field = key_field  # a value field, or None for the record key
        self.i = 0
        self.n = 0
        self.ts: list[int] = []
        self.sorted = True
        self.next_batch()

    def next_batch(self) -> bool:
        for batch in self.batches:
            if not batch:
                continue
            self.recs = batch
            self.ts = list(map(_ts, batch))
            self.sorted = all(map(le, self.ts, islice(self.ts, 1, None)))
            vals = getattr(batch, "values", None)
            self.values = vals if vals is not None else [r["value"] for r in batch]
            if self.key_field is None:
                keys = getattr(batch, "keys", None)
                self.keys = keys if keys is not None else [r.get("key") for r in batch]
            else:
                f = self.key_field
                self.keys = [v.get(f) if v.__class__ is dict else None for v in self.values]
            self.i, self.n = 0, len(batch)
            return True
        self.i = self.n = 0
        return False

    def run_below(self, t: int, inclusive: bool) -> int:
        """The end of the run from the current record whose times are below t (at or below, inclusive)."""
        ts, i = self.ts, self.i
        if self.sorted:
            return (bisect_right if inclusive else bisect_left)(ts, t, i)
        j = i
        n = self.n
        if inclusive:
            while j < n and ts[j] <= t:
                j += 1
        else:
            while j < n and ts[j] < t:
                j += 1
        return j


def run(left: str, right: str, left_key: str | None, right_key: str | None, inner: bool,
        write_jsonl: Callable[[bytes], None], norm_key: Callable[[Any], Any],
        tombstone_keys: Callable[[str | None], list[tuple[Any, Any]]]) -> tuple[int, int, int]:
    """Enrich LEFT's events with RIGHT's table; rows go to write_jsonl. Returns (events, changes,
    table size at the end). `left_key`/`right_key`: a value field to join on, or None for the record key."""
    ev = _Side(inputorder.log_batches(left), left_key)
    tb = _Side(inputorder.log_batches(right), right_key)
    table: dict[Any, Any] = {}
    dumps, fragment = orjson.dumps, orjson.Fragment
    nl = orjson.OPT_APPEND_NEWLINE
    n_events = n_changes = 0

    def apply(j: int) -> None:
        nonlocal n_changes
        keys, values, recs = tb.keys, tb.values, tb.recs
        for x in range(tb.i, j):
            value = values[x]
            if value is None and right_key is not None:
                for nk, _k in tombstone_keys(recs[x].get("key")):
                    table.pop(nk, None)
                continue
            k = keys[x]
            if k is None:
                continue
            nk = k if k.__class__ is str else norm_key(k)
            if value is None:
                table.pop(nk, None)
            else:
                table[nk] = fragment(dumps(value))
        n_changes += j - tb.i
        tb.i = j

    def enrich(j: int) -> None:
        nonlocal n_events
        i = ev.i
        keys = ev.keys[i:j]
        get = table.get
        rights = [get(k) if k.__class__ is str else (get(norm_key(k)) if k is not None else None) for k in keys]
        rows = [{"key": k, "left": v, "right": r} for k, v, r in zip(keys, ev.values[i:j], rights, strict=True)
                if r is not None or not inner]
        if rows:
            write_jsonl(b"".join(map(dumps, rows, repeat(None), repeat(nl))))
        n_events += j - i
        ev.i = j

    while ev.n:
        if not tb.n:
            enrich(ev.n)
        else:
            # events before the next table change (the table wins ties), then changes up to the next event
            enrich(ev.run_below(tb.ts[tb.i], inclusive=False))
            if ev.i < ev.n:
                apply(tb.run_below(ev.ts[ev.i], inclusive=True))
                if tb.i == tb.n:
                    tb.next_batch()
        if ev.i == ev.n:
            ev.next_batch()
    while tb.n:  # changes after the last event: counted, and the table's final size reported
        apply(tb.n)
        tb.next_batch()
    return n_events, n_changes, len(table)


# -- two plain files ----------------------------------------------------------------------

class _PlainSide:
    """One plain file read a piece at a time (values, their keys, and their merge keys when asked)."""

    def __init__(self, path: str, key_of: Callable[[list[Any]], list[Any]],
                 times_of: Callable[[list[Any]], Sequence[int | None]], piece: int) -> None:
        self.blocks = inputorder.plain_blocks(path, piece)
        self.key_of, self.times_of = key_of, times_of
        self.high = inputorder.NO_TIME  # the running maximum of the times read so far
        self.values: list[Any] = []
        self.keys: list[Any] = []
        self.marks: list[int] = []  # merge keys of the current block (when read with times)
        self.i = self.n = 0
        self.timed = True  # whether the current block's merge keys were read

    def next_block(self, timed: bool) -> bool:
        """The next block (its merge keys read when `timed`); False at the end of the file."""
        for values in self.blocks:
            if not values:
                continue
            self.values, self.keys = values, self.key_of(values)
            self.timed = timed
            if timed:
                self.marks = inputorder.merge_keys(self.times_of(values), self.high)
                self.high = self.marks[-1]
            self.i, self.n = 0, len(values)
            return True
        self.i = self.n = 0
        return False


def run_plain(left: str, right: str, left_key: Callable[[list[Any]], list[Any]],
              right_key: Callable[[list[Any]], list[Any]], left_times: Callable[[list[Any]], Sequence[int | None]],
              right_times: Callable[[list[Any]], Sequence[int | None]], inner: bool,
              write_jsonl: Callable[[bytes], None], norm_key: Callable[[Any], Any],
              piece: int = inputorder.PIECE) -> tuple[int, int, int]:
    """Enrich plain file LEFT's events with plain file RIGHT's table (`--as-of position`): the rows
    of the record-at-a-time stream-table join, a run of events at a time. Returns (events,
    changes, table size at the end).

    The input order is inputorder.merged's for two plain files, table first on ties: a record's
    merge key is the running maximum of its own file's times, and records go in (merge key,
    table before events, line) order. The events' times only place them among the table's
    changes, so once the table file is read to its end the events are enriched in file order
    without reading their times. `*_key` and `*_times` read a block of values' join keys and
    event times (driver.block_column, driver.block_times). A file is read in pieces of about
    `piece` bytes: a piece's objects stay in the CPU cache while its rows are made (1 MiB
    blocks measured 2.5x slower end to end)."""
    ev = _PlainSide(left, left_key, left_times, piece)
    tb = _PlainSide(right, right_key, right_times, piece)
    table: dict[Any, Any] = {}
    dumps, fragment = orjson.dumps, orjson.Fragment
    nl = orjson.OPT_APPEND_NEWLINE
    n_events = n_changes = 0

    def apply(j: int) -> None:
        nonlocal n_changes
        for k, value in zip(tb.keys[tb.i:j], tb.values[tb.i:j], strict=True):
            # a null line has no key to delete (and a plain file has no record key)
            if value is None or k is None:
                continue
            table[k if k.__class__ is str else norm_key(k)] = fragment(dumps(value))
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
            enrich(ev.n)  # the table is complete: the rest of the events in file order
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
