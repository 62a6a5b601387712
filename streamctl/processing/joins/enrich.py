"""Stream-table enrichment, a run of records at a time: the batch kernel of `--table --as-of position`.

The reference is joins/stream_table.py's TableAtPosition, fed record by record by joins/driver.py:
each LEFT event gets the table row as it stands at the event's position in the input order.
This kernel gives the same rows, bytes and order as that reference with the JSON-lines writer
(tests/props/test_join_props.py and tests/cli/test_join.py hold the two together), with the
per-record layers taken out: both inputs are read in blocks, the input order (the table side
first on equal merge keys) is kept by merging runs of records rather than single records (a
run of events between two table changes all see the same table), each table value is written
to JSON once when it changes (an orjson.Fragment pasted into every row that uses it), and a
run's rows are encoded by one C-level map.

One loop (`_enrich`) serves both kinds of input. A side is a log (its partitions merged by
inputorder.log_batches, its times the append times) or a plain file (its times read from a
value path, or none). Either way a block gives values, join keys, record keys (for
tombstones) and merge keys: the running maximum of the side's times (mergeorder.merge_keys).
For a log read in input order, that running maximum is each record's own merge key (the
merged records come in merge-key order, and each key is a time read before), so comparing
the two sides' running maxima is the input order's rule.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any

import orjson

from streamctl.processing import inputorder, mergeorder

Column = Callable[[list[Any]], list[Any]]
TimesOf = Callable[[list[Any]], Sequence[int | None]]
_ts = itemgetter("ts")


class _Side:
    """One input a block at a time: values, join keys, record keys (None: a plain file), the
    merge keys when asked, and the position of the next record in the block."""

    def __init__(self, blocks: Iterator[tuple[list[Any], list[Any], list[Any] | None, Any]],
                 times_of: TimesOf) -> None:
        self.blocks = blocks  # (values, join keys, record keys, what times_of reads)
        self.times_of = times_of
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
            if timed:
                self.marks = mergeorder.merge_keys(self.times_of(source), self.high)
                self.high = self.marks[-1]
            self.i, self.n = 0, len(values)
            return True
        self.i = self.n = 0
        return False


def _log_blocks(path: str, key_of: Column | None) -> Iterator[tuple[list[Any], list[Any], list[Any], Any]]:
    """A log's blocks in input order: join keys from `key_of` over the values (None: the record key)."""
    for batch in inputorder.log_batches(path):
        vals = getattr(batch, "values", None)
        values = vals if vals is not None else [r["value"] for r in batch]
        rk = getattr(batch, "keys", None)
        rkeys = rk if rk is not None else [r.get("key") for r in batch]
        yield values, (rkeys if key_of is None else key_of(values)), rkeys, batch


def _log_times(batch: Any) -> list[int]:
    return list(map(_ts, batch))


def _plain_blocks(path: str, key_of: Column, piece: int) -> Iterator[tuple[list[Any], list[Any], None, Any]]:
    for values in inputorder.plain_blocks(path, piece):
        yield values, key_of(values), None, values


def run(left: str, right: str, left_key: Column | None, right_key: Column | None, inner: bool,
        write_jsonl: Callable[[bytes], None], norm_key: Callable[[Any], Any],
        tombstone_keys: Callable[[str | None], list[tuple[Any, Any]]]) -> tuple[int, int, int]:
    """Enrich log LEFT's events with log RIGHT's table; rows go to write_jsonl. Returns (events,
    changes, table size at the end). `left_key`/`right_key` read a block of values' join keys
    (keys.block_column), or None for the record key."""
    ev = _Side(_log_blocks(left, left_key), _log_times)
    tb = _Side(_log_blocks(right, right_key), _log_times)
    return _enrich(ev, tb, inner, write_jsonl, norm_key, tombstone_keys if right_key is not None else None)


def run_plain(left: str, right: str, left_key: Column, right_key: Column, left_times: TimesOf,
              right_times: TimesOf, inner: bool, write_jsonl: Callable[[bytes], None],
              norm_key: Callable[[Any], Any], piece: int = inputorder.PIECE) -> tuple[int, int, int]:
    """Enrich plain file LEFT's events with plain file RIGHT's table. `*_key` and `*_times` read a
    block of values' join keys and event times (keys.block_column, keys.block_times). A file
    is read in pieces of about `piece` bytes: a piece's objects stay in the CPU cache while its
    rows are made (1 MiB blocks measured 2.5x slower end to end). A null line has no key (a
    plain file has no record key), so it deletes nothing."""
    ev = _Side(_plain_blocks(left, left_key, piece), left_times)
    tb = _Side(_plain_blocks(right, right_key, piece), right_times)
    return _enrich(ev, tb, inner, write_jsonl, norm_key, _no_record_key)


def _no_record_key(_key: str | None) -> list[tuple[Any, Any]]:
    return []  # a plain file's null line: no record key, so no row to delete


def _enrich(ev: _Side, tb: _Side, inner: bool, write_jsonl: Callable[[bytes], None], norm_key: Callable[[Any], Any],
            tombstone_keys: Callable[[str | None], list[tuple[Any, Any]]] | None) -> tuple[int, int, int]:
    """The rows of TableAtPosition over two sides. With `tombstone_keys` (a table keyed by a value
    path), a null value deletes the rows its record key names; else a null value deletes its
    join key's row. Events read their times only while the table has changes left: once it is
    read to its end, the rest of the events are enriched in their own order."""
    table: dict[Any, Any] = {}
    dumps, fragment = orjson.dumps, orjson.Fragment
    nl = orjson.OPT_APPEND_NEWLINE
    n_events = n_changes = 0

    def apply(j: int) -> None:
        nonlocal n_changes
        keys, values, rkeys = tb.keys, tb.values, tb.rkeys
        for x in range(tb.i, j):
            value = values[x]
            if value is None and tombstone_keys is not None:
                for nk, _k in tombstone_keys(rkeys[x] if rkeys is not None else None):
                    table.pop(nk, None)
                continue
            k = keys[x]
            if k is None:
                continue
            nk = k if k.__class__ is str else norm_key(k)
            if value is None:
                table.pop(nk, None)
            else:
                # a copy of the text: orjson's result keeps its whole write buffer (4 KiB) alive with it
                table[nk] = fragment(b"%b" % dumps(value))
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
