"""Reading a window's events: the group key, the event time and the aggregation inputs of each
record, one record at a time (make_prepare: the reference) or a block at a time as columns
(EventColumns), and the input's records a block at a time (records_of)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

from streamctl.processing import aggregations, eventfields, exactjson, inputorder
from streamctl.processing import columns as fieldcolumns
from streamctl.processing.aggregations.base import is_number
from streamctl.processing.eventfields import SORT_KEYS
from streamctl.processing.inputorder import column
from streamctl.processing.windows.config import WindowConfig, make_plan, time_range
from streamctl.timeparse import (
    epoch_ms_column,
    event_times,
    now_ms,
)


def key_json_cached(cache: dict[str, bytes] | None = None) -> Callable[[Any], bytes]:
    """JSON text of a key value, memoized for strings (keys repeat; orjson.dumps costs ~1-2 us a call)."""
    dumps = orjson.dumps
    if cache is None:
        cache = {}

    def key_json(k: Any) -> bytes:
        if type(k) is str:
            j = cache.get(k)
            if j is None:
                if len(cache) >= 200_000:
                    cache.clear()  # bounded: memory must not grow with the number of distinct keys
                # a copy of the text: orjson's result keeps its whole write buffer (4 KiB) alive with it
                j = cache[k] = b"%b" % dumps(k)
            return j
        if k is None:
            return b"null"
        try:
            return b"%b" % dumps(k, option=SORT_KEYS)  # eventfields.key_json's text
        except TypeError:  # an int beyond 64 bits: its exact text
            return exactjson.dumps(k, option=SORT_KEYS)
    return key_json


def time_getter(cfg: WindowConfig, is_log: bool) -> Callable[[dict], int | None]:
    """Event time in ms, or None when missing, unparseable or outside time_range(cfg)
    (eventfields.time_getter), with a `column` attribute reading a block's times at once."""
    if cfg.processing_time:
        return lambda r: now_ms()
    lo, hi = time_range(cfg)
    event_time = eventfields.time_getter(cfg.time_field, is_log, lo, hi)
    parts = eventfields.time_path(cfg.time_field, is_log)
    if parts == ("ts",):
        return event_time  # a log's append time

    def event_time_column(recs: list[dict]) -> list[int | None]:
        """event_time of each record (the input-order merge reads a block's times at once)."""
        return [t if t is not None and lo <= t <= hi else None for t in event_times(column(recs, parts))]

    event_time.column = event_time_column  # type: ignore[attr-defined]
    return event_time


def make_prepare(cfg: WindowConfig, is_log: bool, plan: aggregations.Plan) -> Callable[[dict], tuple]:
    """record -> (event time ms, key JSON, aggregation inputs), or (None, None, None) when the record
    has no usable time: the per-record read (follow mode with --processing-time, and the reference
    the column read agrees with)."""
    event_time = time_getter(cfg, is_log)
    key = eventfields.key_getter(cfg.by, key_json_cached())  # strings' texts memoized
    extract = plan.extract

    def prepare(r: dict) -> tuple:
        t = event_time(r)
        if t is None:
            return None, None, None
        return t, key(r), extract(r)
    return prepare


_INT_NONE = {int, type(None)}
_NUMBERS = {int, float, type(None)}


def _numeric_column(col: list) -> tuple[list, int]:
    """A numeric aggregation's column with the values that are not numbers (nor null) replaced by None,
    and how many there were: Plan.extract's per-value check, for a whole column at once."""
    types = {*map(type, col)}
    if types <= _INT_NONE:
        return col, 0
    if types <= _NUMBERS:
        try:
            # a NaN or an infinity makes the sum non-finite (falsy values cannot, so filter(None) may drop them)
            if math.isfinite(sum(filter(None, col))):
                return col, 0
        except OverflowError:
            pass
    clean = [x if x is None or is_number(x) else None for x in col]
    return clean, clean.count(None) - col.count(None)


def read_fields(cfg: WindowConfig, is_log: bool) -> list[tuple[str, ...]] | None:
    """The record fields a run reads (time, group key, aggregation inputs), when the input can give
    them as columns (streamctl.processing.columns: a FieldReader, a plain one for a plain file's
    lines); None when it cannot (then whole records are read). A plain file's record
    key is null: without --by it is read in full (rare: nothing to group by)."""
    if cfg.processing_time or not (is_log or cfg.by):
        return None
    fields = [eventfields.time_path(cfg.time_field, is_log), *eventfields.key_paths(cfg.by)]
    fields += [s.path for s in make_plan(cfg).specs if s.path is not None]
    return fields if fieldcolumns.readable(fields, plain=not is_log) else None


class EventColumns:
    """A batch of records (or a log piece read as columns) -> (times, keys, aggregation columns, counts).

    Times are ms (or None where a record has no usable time: missing, unparseable, or outside
    time_range); keys are the group keys' JSON texts; one column per aggregation (None for a bare
    count), numeric ones with values that are not numbers set to None; counts = [(aggregation
    index, values that were not numbers)], for the plan's counter (the caller adds them: this may
    run in the read-ahead process, decoder.py). The same reads as make_prepare, a column at a time.
    """

    def __init__(self, cfg: WindowConfig, is_log: bool, plan: aggregations.Plan) -> None:
        parts = eventfields.time_path(cfg.time_field, is_log)
        self.time_path = parts
        self.append_time = parts == ("ts",)
        self.lo, self.hi = time_range(cfg)
        self.key_paths = eventfields.key_paths(cfg.by)
        self.specs = plan.specs
        self.numeric = plan.numeric
        self.key_cache: dict[str, bytes] = {}
        self.key_json = key_json_cached(self.key_cache)
        self.key_ids: KeyIds | None = None  # made on the first packed_with_ids call (in the reading process)

    def __call__(self, recs: Any) -> tuple[list, Any, Any, Any]:
        """(times, keys, columns, counts); (times, None, None, ()) when some time is not usable (the
        caller reads the records that have one again, so only their values are counted)."""
        return _listed(self._read(recs, self.keys))

    def _read(self, recs: Any, keys: Callable[[Any], Any]) -> tuple[Any, Any, Any, Any]:
        """__call__ with the keys as keys(recs) makes them, and the times as times() gives them (an
        int64 array when all are usable and parsed as such)."""
        ts = self.times(column(recs, self.time_path))
        if type(ts) is list and None in ts:
            return ts, None, None, ()
        ks = keys(recs)
        cols, counts = self.values(recs)
        return ts, ks, cols, counts

    def values(self, recs: Any) -> tuple[list[list | None], list[tuple[int, int]]]:
        """(the aggregation columns, counts of values that were not numbers)."""
        cols: list[list | None] = []
        counts = []
        for i, (spec, numeric) in enumerate(zip(self.specs, self.numeric, strict=True)):
            if spec.path is None:
                cols.append(None)
                continue
            col = column(recs, spec.path)
            if numeric:
                col, n = _numeric_column(col)
                if n:
                    counts.append((i, n))
            cols.append(col)
        return cols, counts


    def _key_ids(self, recs: Any) -> tuple[int, bytes, list[bytes]]:
        if self.key_ids is None:
            self.key_ids = KeyIds(self.key_json)
        return self.key_ids(column(recs, self.key_paths[0]))

    def packed(self, recs: Any) -> tuple[Any, Any, Any, Any]:
        """__call__ for a plain file's grid windows, the times as int64 bytes when all are usable
        (the folding process takes them as an array, without a list to convert)."""
        return _packed(self._read(recs, self.keys))

    def packed_with_ids(self, recs: Any) -> tuple[Any, Any, Any, Any]:
        """packed with the keys as KeyIds's (space, ids, new texts) instead of their texts; for a
        plain file's pieces, in the reading process. One --by path only (else as packed)."""
        if len(self.key_paths) > 1:
            return self.packed(recs)
        return _packed(self._read(recs, self._key_ids))

    def packed_balanced(self, recs: Any) -> tuple[Any, Any, Any, Any]:
        """In the reading process of a plain file's session run: packed_with_ids while the folding
        process is the slower one (BEHIND or more of the batches sent are not folded yet), else
        packed (the keys' texts; the session index then finds their groups itself). Both give the
        same rows and state (test_window_batches.py); the numbering goes where there is time for it."""
        from streamctl.processing import decoder

        if decoder.backlog() >= BEHIND:
            return self.packed_with_ids(recs)
        return self.packed(recs)

    def times(self, x: list) -> Any:
        """The times of column x as a list (None where a time is not usable), or as an int64 array
        when all are ISO-8601 strings the array parse takes, within time_range (no list made)."""
        lo, hi = self.lo, self.hi
        # (a first value that is not an int rules out epoch ms without a pass over the column)
        if self.append_time and {*map(type, x)} == _INT_TYPE or \
                not self.append_time and x and type(x[0]) is int and epoch_ms_column(x):
            if min(x) >= lo and max(x) <= hi:
                return x  # all epoch ms, the common case: no parse
        if self.append_time:
            return [t if type(t) is int and lo <= t <= hi else None for t in x]
        from streamctl.processing.timecolumns import iso_array_ms, iso_column_ms  # numpy: imported when used

        ms = iso_array_ms(x, lo, hi)
        return iso_column_ms(x, lo, hi) if ms is None else ms

    def keys(self, recs: Any) -> list[bytes]:
        if len(self.key_paths) > 1:
            return [b"%b" % exactjson.dumps(list(t), option=SORT_KEYS) for t in zip(*(column(recs, p) for p in self.key_paths), strict=True)]
        return key_texts(column(recs, self.key_paths[0]), self.key_json)


_INT_TYPE = {int}


def _packed(pre: tuple) -> tuple:
    """EventColumns._read's result with the times as int64 bytes when all are usable."""
    from array import array

    ts, ks, cols, counts = pre
    if type(ts) is not list:
        return ts.tobytes(), ks, cols, counts
    return (ts if ks is None else array("q", ts).tobytes()), ks, cols, counts


def _listed(pre: tuple) -> tuple:
    """EventColumns._read's result with the times as a list."""
    ts = pre[0]
    return pre if type(ts) is list else (ts.tolist(), *pre[1:])


def unpacked_times(ts: Any) -> tuple[list, Any]:
    """(the times as a list, as an int64 array or None): the times of EventColumns.packed."""
    if type(ts) is not bytes:
        return ts, None
    import numpy as np

    t = np.frombuffer(ts, dtype=np.int64)
    return t.tolist(), t
# The reading process numbers at most this many group keys in one id space; the next new key starts
# a new space (KeyIds): its memory, the folding process's names and the operators' tables by id stay
# bounded by it, whatever the number of distinct keys in the input.
KEY_IDS = 1 << 16
# batches sent by the reading process and not yet folded from which the folder counts as the slower
BEHIND = 2


class KeyIds:
    """Group keys -> small ints, where the key column is read (the reading process, decoder.py), so
    the process that folds maps a batch's keys to its groups with array work, not a dict look-up a
    event. A key's id is its number among the keys of its id space in first-seen order; the text of
    each new key travels once, with the batch that first holds it. When a batch's new keys would
    take the space past `bound`, a new space starts at that batch (its number goes up by one) and
    numbers that batch's keys again: the receiving side (KeyNames, and the tables by id of the
    operators: session_index.SessionStore, cells.Cells) starts afresh on the new space's number."""

    def __init__(self, key_json: Callable[[Any], bytes], bound: int | None = None) -> None:
        self.key_json = key_json
        self.bound = KEY_IDS if bound is None else bound
        self.space = 0
        # a str key by itself, any other value by its JSON text: a str never equals a bytes, and
        # values Python calls equal (1, 1.0, True) keep their own texts
        self.ids: dict[Any, int] = {}

    def __call__(self, kv: list) -> tuple[int, bytes, list[bytes]]:
        """(id space, the keys' ids as int32 bytes, the texts of the keys new in the space in id order)."""
        from array import array

        try:
            "".join(kv)  # all strs (a quick check in C; msgspec makes no str subclass)
            look = kv
        except TypeError:
            look = [k if type(k) is str else self.key_json(k) for k in kv]
        ids = self.ids
        got: list[Any] = list(map(ids.get, look))
        new: list = []
        if None in got:
            if len(ids) + got.count(None) > self.bound and len(ids):
                ids.clear()  # a new space, started at this batch
                self.space += 1
                got = [None] * len(look)
            for i, g in enumerate(got):
                if g is None:
                    k = look[i]
                    g = ids.get(k)
                    if g is None:
                        g = ids[k] = len(ids)
                        new.append(kv[i])
                    got[i] = g
        return self.space, array("i", got).tobytes(), key_texts(new, self.key_json)



class KeyNames:
    """The folding side of KeyIds: each id's key text in the current space."""

    def __init__(self) -> None:
        self.space = -1
        self.names: Any = None  # numpy object array, by id

    def __call__(self, space: int, ids: bytes, new: list[bytes]) -> tuple[list[bytes], Any]:
        """(the keys' texts, their ids as an int64 array)."""
        import numpy as np

        if space != self.space:
            self.space, self.names = space, np.empty(0, dtype=object)
        if new:
            more = np.empty(len(new), dtype=object)
            more[:] = new
            self.names = np.concatenate((self.names, more))
        a = np.frombuffer(ids, dtype=np.int32).astype(np.int64)
        return self.names[a].tolist(), a


def subset(recs: Any, keep: list[int]) -> Any:
    """The records at positions `keep`, in the same form (a FieldBatch's columns, a RecordBatch's)."""
    if isinstance(recs, fieldcolumns.FieldBatch):
        assert recs.cols is not None
        return fieldcolumns.FieldBatch(None, {p: [c[i] for i in keep] for p, c in recs.cols.items()}, len(keep))
    sub = [recs[i] for i in keep]
    if type(recs) is inputorder.RecordBatch:
        batch = inputorder.RecordBatch(sub)
        batch.keys = [recs.keys[i] for i in keep]
        batch.values = [recs.values[i] for i in keep]
        return batch
    return sub


class RecordBlocks:
    """Records that come in lists (a log read a block at a time). Iterating gives them one by one;
    WindowRun.feed takes the lists as they are. `hooks` (see decoder.log_batches) lets feed hand
    the reading process the function that makes a batch's columns."""

    def __init__(self, batches: Iterable[inputorder.Block], hooks: dict | None = None) -> None:
        self.batches = batches
        self.hooks = hooks if hooks is not None else {}

    def __iter__(self) -> Iterator[dict]:
        return itertools.chain.from_iterable(self.batches)


def records_of(path: str, cfg: WindowConfig | None = None) -> tuple[bool, Iterable[dict]]:
    """The input's records; a log's come in blocks, as columns of the fields `cfg` reads where it can."""

    from streamctl.processing import inputorder

    spec = inputorder.classify(path)
    if spec.is_log:
        # a block of lines at a time (feed takes the lists as they are); several partitions are
        # merged by the event time the window reads
        time_of = time_getter(cfg, True) if cfg is not None and not cfg.processing_time else None
        fields = read_fields(cfg, True) if cfg is not None else None
        if fields is not None:
            from streamctl.processing import decoder

            hooks: dict = {}
            return True, RecordBlocks(decoder.log_batches(path, fields, hooks, time_of), hooks)
        return True, RecordBlocks(inputorder.log_batches(path, time_of=time_of))
    fields = read_fields(cfg, False) if cfg is not None else None
    if fields is not None:
        from streamctl.processing import decoder

        hooks = {}
        return False, RecordBlocks(decoder.plain_batches(path, fields, hooks), hooks)
    return False, inputorder.records(spec)


def key_texts(vals: list, key_json: Callable[[Any], bytes]) -> list[bytes]:
    """key_json of each value, from one orjson call for the list cut at its commas: each element is
    written as dumps() writes it alone, and when no text holds a comma there is one piece per
    value (the cut is kept only then)."""
    try:
        texts = orjson.dumps(vals, option=SORT_KEYS)[1:-1].split(b",")
    except TypeError:
        texts = []
    if len(texts) == len(vals) and vals:
        return texts
    return list(map(key_json, vals))
