"""Stream-table enrichment of two logs, a batch at a time (the `--table --as-of position` hot path).

The same rows, bytes and order as joining._run_table with TableAtPosition and
the JSON-lines writer, with the per-record layers taken out: both logs are
read in blocks (inputorder.log_batches), the input order (table side first on
equal ts) is kept by merging runs of records rather than single records (a run
of events between two table changes all see the same table), each table value
is written to JSON once when it changes (an orjson.Fragment pasted into every
row that uses it), and a run's rows are encoded by one C-level map.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
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
