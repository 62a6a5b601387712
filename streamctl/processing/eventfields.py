"""A window's record fields, one definition: which field is the group key and which the event time
(a plain file's `ts` being its value's own `ts`), and how each is read from one record.

It imports only field paths, time parsing and orjson (with the standard library's fallback), so
the Spark window job carries it to its executors as it is (spark/window_job.py), and the local
engine builds its reads on it (processing/windows/events.py: per record, and as columns).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import itemgetter
from typing import Any

try:
    import orjson
except ImportError:  # the Spark window job on a cluster without orjson: the standard library, the same text
    from streamctl import orjson_fallback as orjson  # type: ignore[no-redef]

from streamctl.storage import fieldpaths
from streamctl.timeparse import EPOCH_MS_BELOW, EPOCH_S_BELOW, event_time_ms


def time_path(time_field: str, is_log: bool) -> tuple[str, ...]:
    """The record path of the event time (see input_time_path)."""
    return input_time_path(fieldpaths.record_path(time_field), is_log)


def input_time_path(parts: tuple[str, ...], is_log: bool) -> tuple[str, ...]:
    """The event time's record path for one input, in window and join alike. In a log, `ts` is the
    append time (epoch ms as it is); a plain file has no envelope ts, so there `ts` means the
    value's own `ts` field (`{"ts": "2026-11-21T10:00:00Z", ...}` lines work as is)."""
    return ("value", "ts") if parts == ("ts",) and not is_log else parts


def key_paths(by: list[str]) -> list[tuple[str, ...]]:
    """The group key's record paths: one per --by, or the record key without any."""
    return [fieldpaths.record_path(p) for p in by] if by else [("key",)]


SORT_KEYS = orjson.OPT_SORT_KEYS


def key_json(k: Any) -> bytes:
    """A key value's JSON text (a copy: orjson's result keeps its whole 4 KiB write buffer alive),
    an object's fields sorted: objects that differ only in field order are one group, as they are
    one value to --where, distinct and join keys."""
    if k is None:
        return b"null"
    try:
        return b"%b" % orjson.dumps(k, option=SORT_KEYS)
    except TypeError:  # an int beyond 64 bits: its exact text
        from streamctl.processing import exactjson

        return exactjson.dumps(k, option=SORT_KEYS)


def key_getter(by: list[str], key_json: Callable[[Any], bytes] = key_json) -> Callable[[dict], bytes]:
    """The group key as JSON text: one path -> its value's (through `key_json`, which may memoize);
    several -> a list's."""
    if not by:
        return lambda r: key_json(r.get("key"))  # (a record is a dict: no getter to call)
    getters = [fieldpaths.getter(p) for p in key_paths(by)]
    if len(getters) == 1:
        g = getters[0]
        return lambda r: key_json(g(r))
    dumps = orjson.dumps
    return lambda r: b"%b" % dumps([g(r) for g in getters], option=SORT_KEYS)  # a copy, as in key_json


def _rank(v: Any) -> tuple:
    """A JSON value's place in the group-key order: null, false, true, numbers by value, strings by
    code point, arrays element by element, objects by their JSON text with sorted fields."""
    if v is None or v is False or v is True:
        return (0 if v is None else 1 + v,)
    if isinstance(v, (int, float)):
        return (3, v)
    if isinstance(v, str):
        return (4, v)
    if isinstance(v, list):
        return (5, tuple(map(_rank, v)))
    return (6, orjson.dumps(v, option=orjson.OPT_SORT_KEYS))


def key_rank(k: bytes) -> tuple:
    """A group key's (JSON text's) place in the group-key order, the tie-break of rows that close
    together (ties by window start, then group key): `9` before `10`, `"ab"` before `"ab!"`."""
    return _rank(orjson.loads(k))


_between_quotes = itemgetter(slice(1, -1))


def key_order(keys: Iterable[bytes]) -> list[bytes]:
    """Group keys (JSON texts) in the group-key order (key_rank)."""
    keys = list(keys)
    if keys and min(keys)[:1] == b'"' == max(keys)[:1] and b"\\" not in b"".join(keys):
        # every key a string without an escape (the common case): its UTF-8 bytes between the
        # quotes sort as its code points, with no key parsed
        return sorted(keys, key=_between_quotes)
    try:
        return sorted(keys, key=int)  # every key an integer (int() reads its JSON text as it is)
    except ValueError:
        return sorted(keys, key=key_rank)


def key_positions(keys: Iterable[bytes]) -> dict[bytes, int]:
    """Each distinct key's place in key_order, to sort rows by (..., key) with."""
    return {k: i for i, k in enumerate(key_order(set(keys)))}


def bad_time_place(source: str, partition: Any, offset: Any, is_log: bool, time_field: str) -> str:
    """Where a record without a usable time is, as a run names the first one (both engines): a log's
    partition and offset; a plain file's line, from 1 (its offset is the line number from 0), written
    FILE:LINE as every other message about a line of a plain file is."""
    if is_log:
        return f"{source}: partition {partition} offset {offset}: no usable time in {time_field!r}"
    line = offset + 1 if isinstance(offset, int) else offset
    return f"{source}:{line}: no usable time in {time_field!r}"


def field_getter(time_field: str, is_log: bool) -> tuple[Callable[[dict], Any], bool]:
    """The raw value of the event-time field, and whether it is epoch ms as it is (a log's append
    time) rather than a value timeparse.event_time_ms reads."""
    parts = time_path(time_field, is_log)
    if parts == ("ts",):
        return (lambda r: r.get("ts")), True
    return fieldpaths.getter(parts), False


def record_time(parts: tuple[str, ...]) -> Callable[[dict], int | None]:
    """A record's event time at a record path, in epoch ms (timeparse.event_time_ms of the value;
    None when it is no time); `ts`, a log's append time, as it is. Each join side's times are read
    here, and a window's (time_getter)."""
    if parts == ("ts",):
        return lambda r: r.get("ts")
    get = fieldpaths.getter(parts)
    s_below, ms_below = EPOCH_S_BELOW, EPOCH_MS_BELOW

    def time_of(r: dict) -> int | None:
        v = get(r)
        # epoch milliseconds, the common case, without event_time_ms's checks (timeparse.is_epoch_ms, inline)
        if v.__class__ is int and s_below <= v < ms_below:
            return v
        return event_time_ms(v)
    return time_of


def time_getter(time_field: str, is_log: bool, lo: int, hi: int) -> Callable[[dict], int | None]:
    """A window's event time in ms (record_time of the window's field, time_path), or None when
    missing, unparseable or outside [lo, hi] (the run's usable range, timeparse.usable_range: where
    every window bound can be written as ISO-8601)."""
    parts = time_path(time_field, is_log)
    if parts == ("ts",):
        def appended(r: dict) -> int | None:
            t = r.get("ts")
            return t if type(t) is int and lo <= t <= hi else None
        return appended
    get = record_time(parts)

    def event_time(r: dict) -> int | None:
        t = get(r)
        return t if t is not None and lo <= t <= hi else None
    return event_time
