"""A window's rows as the output writes them: an operator row (start, end, key JSON, values,
revision) as an object (row_dict) or a JSON line (row_json, rows_jsonl a batch at a time)."""

from __future__ import annotations

from itertools import chain, groupby, repeat
from operator import itemgetter

import orjson

from streamctl.timeparse import MAX_MS, MIN_MS, format_iso


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
    if type(row) is RowsText:
        return row
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
    """row_json() of each row, joined: the same bytes, made a batch of rows at a time.

    Every bound is written by one numpy call for the batch (`iso_many`), and the
    aggregates of the rows are encoded in one orjson call as a list of objects,
    cut apart at `},{` (kept only when that gives one piece per row: a string
    holding `},{` would make more). A row is then `{"window":...,"key":`, the
    key's JSON text, `,`, its piece and `}`. Batches with a revised or a delete
    row (values None) go a window at a time, those rows through row_json.
    Raises where row_json would (a value orjson cannot write); the caller then
    writes row by row, so the rows before it still come out.
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


def window_text(start: int, end: int, keys: list[bytes], names: list[str], columns: list[list]) -> RowsText:
    """row_json() of the rows (start, end, keys[i], {names[j]: columns[j][i]}, None), joined: a closed
    grid window's rows without an object a row. Each column's values are numbers or null (a window
    kept as cells.Cells), written by one orjson call and cut at its commas; the lines are then one
    join of the pieces, interleaved by slice assignment."""
    n = len(keys)
    if not n:
        return RowsText()
    m = 3 + 2 * len(names)
    parts: list = [None] * (n * m)
    parts[0::m] = [b'{"window":{"start":"%s","end":"%s"},"key":' % (_iso(start).encode(), _iso(end).encode())] * n
    parts[1::m] = keys
    for j, (name, col) in enumerate(zip(names, columns, strict=True)):
        parts[2 + 2 * j::m] = [b",%b:" % orjson.dumps(name)] * n
        texts = orjson.dumps(col)[1:-1].split(b",")
        assert len(texts) == n  # numbers and nulls: no comma inside one
        parts[3 + 2 * j::m] = texts
    parts[m - 1::m] = [b"}\n"] * n
    return RowsText(b"".join(parts))


def iso_many(ms: list[int]) -> list[bytes]:
    """format_iso of each time, as ASCII bytes, in one numpy call (numpy writes years 1..9999 as
    format_iso does, proleptic Gregorian, 4 digits); a time outside them raises as format_iso does."""
    if not ms:
        return []
    if min(ms) < MIN_MS or max(ms) > MAX_MS:
        return [format_iso(t).encode() for t in ms]
    import numpy as np

    text = np.datetime_as_string(np.array(ms, dtype="datetime64[ms]"), unit="ms")  # YYYY-MM-DDTHH:MM:SS.mmm
    return np.char.add(text.astype("S23"), b"Z").tolist()


_row_window = itemgetter(0, 1)
_row_start, _row_end, _row_key, _row_values, _row_revision = (itemgetter(0), itemgetter(1), itemgetter(2),
                                                               itemgetter(3), itemgetter(4))
_NONE = {None}


def late_line(rec: dict, is_log: bool) -> bytes:
    """A late event as written to --late-out: the record (log) or the value line (plain file)."""
    return orjson.dumps(rec if is_log else rec.get("value")) + b"\n"
