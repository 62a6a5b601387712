"""A window's rows as the output writes them: an operator row (start, end, key JSON, values,
revision) as an object (row_dict) or a JSON line (row_json, rows_jsonl a batch at a time)."""

from __future__ import annotations

from itertools import chain, groupby, repeat
from operator import itemgetter
from typing import Any

try:
    import orjson
except ImportError:  # the Spark window job on a cluster without orjson writes its rows with row_json too
    from streamctl import orjson_fallback as orjson  # type: ignore[no-redef]

from streamctl.timeparse import MAX_MS, MIN_MS, format_iso


def row_dict(row: tuple) -> dict:
    """An operator row -> the output object `{"window": {...}, "key": ..., aggregates, ["revision"]}`,
    or for a delete row (values None: a row written before is withdrawn) `{"window", "key", "op": "delete"}`."""
    start, end, key, values, revision = row
    out = {"window": {"start": format_iso(start), "end": format_iso(end)}, "key": _key_value(key)}
    if values is None:
        out["op"] = "delete"
        return out
    out.update(values)
    if revision is not None:
        out["revision"] = revision
    return out


def _key_value(key: bytes) -> Any:
    """A group key's value from its JSON text, an int beyond 64 bits exact (orjson reads it as a float)."""
    value = orjson.loads(key)
    if len(key) >= 19 and _holds_float(value):
        import json

        try:
            return json.loads(key)
        except (ValueError, RecursionError):
            return value
    return value


def _holds_float(v: Any) -> bool:
    t = type(v)
    if t is float:
        return True
    if t is list:
        return any(map(_holds_float, v))
    if t is dict:
        return any(map(_holds_float, v.values()))
    return False


_iso_cache: dict[int, str] = {}


def _iso(ms: int) -> str:
    s = _iso_cache.get(ms)
    if s is None:
        if len(_iso_cache) > 4096:
            _iso_cache.clear()
        s = _iso_cache[ms] = format_iso(ms)
    return s


def row_json(row: tuple) -> bytes:
    """The JSON line of a row (row_dict's object), with the key's JSON text spliced in as is.

    The line is pieces of text, the aggregates one object whose `{` is cut off, not one object
    with the key as an orjson.Fragment: the Spark window job writes its rows here too, where the
    standard library's json may stand in for orjson (streamctl.orjson_fallback has no Fragment).
    An aggregate cannot be named window, key or revision (Plan), so no name is written twice."""
    if type(row) is RowsText:
        return row
    start, end, key, values, revision = row
    head = b'{"window":{"start":"%b","end":"%b"},"key":%b' % (_iso(start).encode(), _iso(end).encode(), key)
    if values is None:
        return head + b',"op":"delete"}\n'
    if revision is not None:
        values = {**values, "revision": revision}
    try:
        text = orjson.dumps(values)
    except TypeError:  # an int beyond 64 bits (a sum of big ints): written exactly, as JSON allows
        text = orjson.dumps({k: _int_text(v) for k, v in values.items()})
    return head + (b"," + text[1:] if values else b"}") + b"\n"


def _int_text(v: Any) -> Any:
    """`v` with every int orjson cannot write (beyond 64 bits: a sum, or a first/last value or part
    of one) as its exact JSON text. (Only orjson refuses such ints: the standard library's json,
    which may stand in, writes them.)"""
    t = type(v)
    if t is int and not -(1 << 63) <= v < 1 << 64:
        return orjson.Fragment(b"%d" % v)
    if t is dict:
        return {k: _int_text(x) for k, x in v.items()}
    if t is list or t is tuple:
        return [_int_text(x) for x in v]
    return v


def rows_jsonl(rows: list) -> bytes:
    """row_json() of each row, joined: the same bytes, made a batch of rows at a time.

    Every bound is written by one numpy call for the batch (`iso_many`), and the
    aggregates of the rows are encoded in one orjson call as a list of objects,
    cut apart at `},{` (kept only when that gives one piece per row: a string
    holding `},{` would make more). A row is then `{"window":...,"key":`, the
    key's JSON text, `,`, its piece and `}`. Batches with a revised or a delete
    row (values None) go a window at a time, those rows through row_json.
    Raises where orjson cannot write a value (an int beyond 64 bits, which
    row_json writes exactly; a bound outside years 1..9999, where row_json
    raises too); the caller then writes row by row, so the rows before it
    still come out.
    """
    if not rows:
        return b""
    if any(type(r) is RowsText for r in rows):  # windows written already, between rows that are not
        return b"".join([b"".join(grp) if text else rows_jsonl(list(grp))
                         for text, grp in groupby(rows, lambda r: type(r) is RowsText)])
    dumps = orjson.dumps
    starts, ends = list(map(_row_start, rows)), list(map(_row_end, rows))
    bounds = dict.fromkeys(starts + ends)
    iso = dict(zip(bounds, iso_many(list(bounds)), strict=True))
    values = list(map(_row_values, rows))
    if {*map(_row_revision, rows)} == _NONE and all(values):
        pieces = dumps(values)[2:-2].split(b"},{")
        if len(pieces) == len(rows):
            windows = list(map(_row_window, rows))
            distinct = dict.fromkeys(windows)
            if 4 * len(distinct) <= len(rows):  # many rows a window (grid windows): its prefix made once
                prefix = {w: b'{"window":{"start":"%s","end":"%s"},"key":' % (iso[w[0]], iso[w[1]]) for w in distinct}
                return b"".join(map(b"".join, zip(map(prefix.__getitem__, windows), map(_row_key, rows),
                                                  repeat(b","), pieces, repeat(b"}\n"))))
            line = b'{"window":{"start":"%s","end":"%s"},"key":%s,%s}\n'
            return b"".join([line % (iso[a], iso[e], k, p)
                             for a, e, k, p in zip(starts, ends, map(_row_key, rows), pieces, strict=True)])
    parts: list[bytes] = []
    for (start, end), group in groupby(rows, _row_window):
        grp = list(group)
        values = list(map(_row_values, grp))
        if {*map(_row_revision, grp)} == _NONE and all(values):
            pieces = dumps(values)[2:-2].split(b"},{")
            if len(pieces) == len(grp):
                prefix = b'{"window":{"start":"' + iso[start] + b'","end":"' + iso[end] + b'"},"key":'
                parts += chain.from_iterable(zip(repeat(prefix), map(_row_key, grp), repeat(b","), pieces,
                                                 repeat(b"}\n")))
                continue
        parts += map(row_json, grp)
    return b"".join(parts)


class RowsText(bytes):
    """The JSON lines of a closed window's rows, written by window_text (an operator may put one in
    its rows where the output is JSON lines: WindowRun's text_rows)."""


def window_text(start: Any, end: Any, keys: list[bytes], names: list[str],
                columns: list[list]) -> RowsText:
    """row_json() of the rows (start, end, keys[i], {names[j]: columns[j][i]}, None), joined, without
    an object a row: a closed grid window's rows (`start` and `end` ints), or closed sessions' (lists:
    a start and an end a row). Each column's values are numbers or null (states kept as cells.Slots),
    written by one orjson call and cut at its commas; the lines are then one join of the pieces,
    interleaved by slice assignment."""
    n = len(keys)
    if not n:
        return RowsText()
    if isinstance(start, int) and isinstance(end, int):
        items: list = [b'{"window":{"start":"%s","end":"%s"},"key":' % (_iso(start).encode(), _iso(end).encode())]
    else:
        bounds = iso_many([*start, *end])
        items = [b'{"window":{"start":"', bounds[:n], b'","end":"', bounds[n:], b'"},"key":']
    items.append(keys)
    for name, col in zip(names, columns, strict=True):
        texts = orjson.dumps(col)[1:-1].split(b",")
        assert len(texts) == n  # numbers and nulls: no comma inside one
        items += [b",%b:" % orjson.dumps(name), texts]
    items.append(b"}\n")
    m = len(items)
    parts: list = [None] * (n * m)
    for j, item in enumerate(items):
        parts[j::m] = item if type(item) is list else [item] * n
    return RowsText(b"".join(parts))


def iso_many(ms: list[int]) -> list[bytes]:
    """format_iso of each time, as ASCII bytes, a batch at once: each distinct day's date written by
    format_iso (a batch spans few days), the time of day (HH:MM:SS.mmmZ) by digit arithmetic in a
    byte matrix; a time outside years 1..9999 raises as format_iso does."""
    if not ms:
        return []
    if min(ms) < MIN_MS or max(ms) > MAX_MS:
        return [format_iso(t).encode() for t in ms]
    import numpy as np

    day, tod = np.divmod(np.array(ms, dtype=np.int64), 86_400_000)  # floored: times before 1970 too
    days, which = np.unique(day, return_inverse=True)
    global _TWO, _THREE
    if _TWO is None:
        _TWO = np.array([b"%02d" % i for i in range(100)], dtype="S2")
        _THREE = np.array([b"%03d" % i for i in range(1000)], dtype="S3")
    hour, rest = np.divmod(tod, 3_600_000)
    minute, rest = np.divmod(rest, 60_000)
    second, milli = np.divmod(rest, 1000)
    text = np.empty(len(ms), dtype=_ISO)
    text["date"] = np.array([format_iso(d * 86_400_000)[:11].encode() for d in days.tolist()], dtype="S11")[which]
    text["h"], text["m"], text["s"], text["ms"] = _TWO[hour], _TWO[minute], _TWO[second], _THREE[milli]
    text["c1"], text["c2"], text["dot"], text["z"] = b":", b":", b".", b"Z"
    return text.view("S24").tolist()


# YYYY-MM-DDT (from format_iso, once a day) HH:MM:SS.mmmZ (from these tables of digits)
_ISO = [("date", "S11"), ("h", "S2"), ("c1", "S1"), ("m", "S2"), ("c2", "S1"), ("s", "S2"), ("dot", "S1"),
        ("ms", "S3"), ("z", "S1")]
_TWO: Any = None
_THREE: Any = None


_row_window = itemgetter(0, 1)
_row_start, _row_end, _row_key, _row_values, _row_revision = (itemgetter(0), itemgetter(1), itemgetter(2),
                                                               itemgetter(3), itemgetter(4))
_NONE = {None}
