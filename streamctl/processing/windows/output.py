"""A window's rows as the output writes them: an operator row (start, end, key JSON, values,
revision) as an object (row_dict) or a JSON line (row_json, rows_jsonl a window at a time)."""

from __future__ import annotations

from itertools import chain, groupby, repeat
from operator import itemgetter

import orjson

from streamctl.timeparse import format_iso


def row_dict(row: tuple) -> dict:
    """An operator row -> the output object `{"window": {...}, "key": ..., aggregates, ["revision"]}`,
    or for a delete row (values None: a row written before is withdrawn) `{"window", "key", "op": "delete"}`."""
    start, end, key, values, revision = row
    out = {"window": {"start": format_iso(start), "end": format_iso(end)}, "key": orjson.loads(key)}
    if values is None:
        out["op"] = "delete"
        return out
    out.update(values)
    if revision is not None:
        out["revision"] = revision
    return out


_iso_cache: dict[int, str] = {}


def _iso(ms: int) -> str:
    s = _iso_cache.get(ms)
    if s is None:
        if len(_iso_cache) > 4096:
            _iso_cache.clear()
        s = _iso_cache[ms] = format_iso(ms)
    return s


def row_json(row: tuple) -> bytes:
    """The JSON line of a row (row_dict's object), with the key's JSON text spliced in as is."""
    start, end, key, values, revision = row
    out = {"window": {"start": _iso(start), "end": _iso(end)}, "key": orjson.Fragment(key)}
    if values is None:
        out["op"] = "delete"
        return orjson.dumps(out) + b"\n"
    out.update(values)
    if revision is not None:
        out["revision"] = revision
    return orjson.dumps(out) + b"\n"


def rows_jsonl(rows: list[tuple]) -> bytes:
    """row_json() of each row, joined: the same bytes, made a window at a time.

    Rows of one window (consecutive, same start and end, no revision) share the
    `{"window":...,"key":` prefix, and their aggregates are encoded in one call
    as a list of objects, cut apart at `},{` (kept only when that gives one piece
    per row: a string holding `},{` would make more). A row is then the prefix,
    the key's JSON text, `,`, its piece and `}`. Windows with a revised or a
    delete row (values None) go through row_json. Raises where row_json would (a
    value orjson cannot write); the caller then writes row by row, so the rows
    before it still come out.
    """
    dumps = orjson.dumps
    parts: list[bytes] = []
    for (start, end), group in groupby(rows, _row_window):
        grp = list(group)
        values = list(map(_row_values, grp))
        if {*map(_row_revision, grp)} == _NONE and all(values):
            pieces = dumps(values)[2:-2].split(b"},{")
            if len(pieces) == len(grp):
                prefix = b'{"window":{"start":' + dumps(_iso(start)) + b',"end":' + dumps(_iso(end)) + b'},"key":'
                parts += chain.from_iterable(zip(repeat(prefix), map(_row_key, grp), repeat(b","), pieces,
                                                 repeat(b"}\n")))
                continue
        parts += map(row_json, grp)
    return b"".join(parts)


_row_window = itemgetter(0, 1)
_row_key, _row_values, _row_revision = itemgetter(2), itemgetter(3), itemgetter(4)
_NONE = {None}


def late_line(rec: dict, is_log: bool) -> bytes:
    """A late event as written to --late-out: the record (log) or the value line (plain file)."""
    return orjson.dumps(rec if is_log else rec.get("value")) + b"\n"
