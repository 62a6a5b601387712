"""A join's keys and times, read the same way by every join kind and kernel: the join key (a field
path), the event time (eventfields.record_time, a window's too), the normalized key two keys compare by (JSON equality), the rows a table
record changes (its key, or a tombstone's), and the event times of a column of values for the
batch kernels (column_times)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    import orjson
except ImportError:  # the Spark join job on a cluster without orjson: the standard library, the same text
    from streamctl import orjson_fallback as orjson  # type: ignore[no-redef]

from streamctl.storage import fieldpaths
from streamctl.timeparse import epoch_ms_column

Record = dict[str, Any]


def key_getter(parts: tuple[str, ...]) -> Callable[[Record], Any]:
    return fieldpaths.getter(parts)


def value_field(parts: tuple[str, ...]) -> str | None:
    """The object key when the path is one key under value (the fast path), else None (an index
    into an array, or a deeper path, goes through fieldpaths)."""
    return parts[1] if len(parts) == 2 and parts[0] == "value" and not fieldpaths.is_index(parts[1]) else None


class RememberedTime:
    """A time getter that remembers its last answer: the input merge reads a plain file's times,
    and the join reads the same record's time right after, without parsing it twice.
    `memo` is [record, time]; holding the record keeps `is` exact (no other dict can get its address)."""

    __slots__ = ("get", "memo", "remember")

    def __init__(self, get: Callable[[Record], int | None]) -> None:
        self.get = get
        memo: list[Any] = [None, None]
        self.memo = memo

        def remember(rec: Record) -> int | None:
            t = get(rec)
            memo[0] = rec
            memo[1] = t
            return t

        self.remember = remember


_SORT = orjson.OPT_SORT_KEYS


def tombstone_keys(record_key: str | None) -> list[tuple[Any, Any]]:
    """(normalized key, key) pairs a tombstone with this record key deletes when the table key is a value path.

    `produce --key-field id` stores the number 7 as the record key "7", so the
    tombstone "7" deletes the row of 7 as well as the row of "7".
    """
    if record_key is None:
        return []
    out: list[tuple[Any, Any]] = [(record_key, record_key)]
    try:
        alt = orjson.loads(record_key)
    except ValueError:  # (orjson's JSONDecodeError is one)
        return out
    if isinstance(alt, (int, float)) and not isinstance(alt, bool) and orjson.dumps(alt).decode() == record_key:
        out.append((norm_key(alt), alt))
    return out


def norm_key(k: Any) -> Any:
    """A hashable stand-in that is equal exactly when the JSON of two keys is equal."""
    if k.__class__ is str or k is None:
        return k
    # a copy of the text: orjson's result keeps its whole write buffer (4 KiB) alive with it
    try:
        return ("\x00json", b"%b" % orjson.dumps(k, option=_SORT))
    except TypeError:  # an int beyond 64 bits: its exact text
        from streamctl.processing import exactjson

        return ("\x00json", exactjson.dumps(k, option=_SORT))


def key_of_norm(nk: Any) -> Any:
    """A key whose norm_key is `nk` (for a checkpoint: JSON, unlike the stand-in)."""
    return orjson.loads(nk[1]) if nk.__class__ is tuple else nk


def column_times(ts: list[Any]) -> list[int | None]:
    """The event times of a column of values (what eventfields.record_time reads from each record's):
    epoch milliseconds as they are (the common case), else ISO-8601 strings parsed as bytes with
    numpy, and every other value as timeparse.event_time_ms reads it."""
    if epoch_ms_column(ts):
        return ts
    from streamctl.processing.timecolumns import iso_column_ms

    return iso_column_ms(ts)


def change_keys(rec: Record, key_of: Callable[[Record], Any], by_value_path: bool) -> list[tuple[Any, Any]]:
    """changed_rows of a table record, its join key read by `key_of`."""
    return changed_rows(rec["value"], rec.get("key"), key_of(rec), by_value_path)


def changed_rows(value: Any, record_key: str | None, key: Any, by_value_path: bool) -> list[tuple[Any, Any]]:
    """(normalized key, key) of each row a table record changes: its join key's; for a tombstone
    (null value) of a table keyed by a value path, the rows its record key names
    (tombstone_keys; a plain file's line has no record key). Empty: the record has no key and
    changes nothing. The reference operators (feeders.py), the enrichment kernel
    (stream_table.py) and the Spark join job read a table record's rows here."""
    if by_value_path and value is None:
        return tombstone_keys(record_key)
    if key is None:
        return []
    return [(key if key.__class__ is str else norm_key(key), key)]


def norm_text(k: Any) -> str | None:
    """norm_key as text, for an engine that compares keys as a string column (the Spark join job):
    two keys' texts are equal exactly when their norm_key are."""
    if k is None:
        return None
    return "s" + k if k.__class__ is str else "j" + norm_key(k)[1].decode()
