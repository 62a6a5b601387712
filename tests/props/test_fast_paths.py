"""The fast paths of produce --follow and capture, tied to the definitions they stand beside:
Stamped headers give the lines of the headers they stand for, and TableLog.insert the records of
change("c", ...)."""

from __future__ import annotations

import os
import tempfile

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from streamctl.capture.server import TableInfo
from streamctl.capture.tablelog import TableLog, _headers
from streamctl.capture.values import converter
from streamctl.storage import log as logmod
from streamctl.storage.appender import Appender, Stamped
from streamctl.storage.segment import list_segments

_fid = st.text(st.sampled_from("f0123456789%:"), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(fid=_fid, starts=st.lists(st.integers(0, 1 << 40), min_size=1, max_size=20), keyed=st.booleans())
def test_stamped_headers_are_the_headers_they_stand_for(fid: str, starts: list[int], keyed: bool) -> None:
    template = b'{"streamctl.file":"' + fid.encode().replace(b"%", b"%%") + b':%d"}'
    stamped = Stamped(template, starts)
    values = [b'{"n":%d}' % i for i in range(len(starts))]
    keys: bytes | list[bytes] = [b'"k%d"' % i for i in range(len(starts))] if keyed else b"null"
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, headers in (("a", stamped), ("b", stamped.texts())):
            lg = logmod.open_or_create(os.path.join(tmp, name), 1, None, 0)
            with Appender(lg, fsync="never", clock=lambda: 7) as app:
                app.append_texts(0, keys, values, headers)
            lines.append(b"".join(open(seg.path, "rb").read() for seg in list_segments(lg.partition_dir(0))))
    assert lines[0] == lines[1]
    assert lines[1].count(b'"streamctl.file":"' + fid.encode() + b":") == len(starts)


_INT, _TEXT, _NUMERIC, _TSTZ = 23, 25, 1700, 1184
_cell = {
    _INT: st.integers(-(1 << 31), (1 << 31) - 1).map(str),
    _TEXT: st.text(max_size=8),
    _NUMERIC: st.decimals(allow_nan=False, allow_infinity=False, places=2).map(str),
    _TSTZ: st.just("2026-11-21 10:00:00.5+00"),
}


@settings(max_examples=60, deadline=None)
@given(data=st.data(), key_type=st.sampled_from([_INT, _TEXT, _NUMERIC]), nulls=st.booleans())
def test_insert_is_change_c(data: st.DataObject, key_type: int, nulls: bool) -> None:
    types = [key_type, _TEXT, _INT, _NUMERIC, _TSTZ]
    cols = ["id", "t", "i", "n", "at"]
    rows = data.draw(st.lists(st.tuples(*[_cell[t] for t in types]), min_size=1, max_size=8))
    pending = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("fast", "slow"):
            info = TableInfo("public", "t", 1, list(cols), list(types), ["id"], [converter(t) for t in types])
            lg = logmod.open_or_create(os.path.join(tmp, name), 1, None, 0)
            tl = TableLog(info, lg, Appender(lg, fsync="never"))
            try:
                for i, row in enumerate(rows):
                    new = [row[0], *[None if nulls and j % 2 else v for j, v in enumerate(row[1:])]]
                    if name == "fast":
                        tl.insert(new, 100 + i, _headers("c", 100 + i, 7))
                    else:
                        tl.change("c", new, None, 100 + i, 7, lambda: None)
                # the rows remembered hold orjson.Fragment numbers: compared as the JSON they give
                pending.append((tl.pending, [(k, orjson.dumps(v)) for k, v in tl.cache.items()], tl.txn_keys))
            finally:
                tl.appender.close()
    assert pending[0] == pending[1]


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 99), st.one_of(st.none(), st.integers(0, 9))), min_size=1, max_size=12))
def test_append_writes_record_encode_lines(rows: list[tuple[int, int | None]]) -> None:
    """Appender.append's inlined line format is record.encode's, with headers and without."""
    from streamctl.storage import record

    items = [(b'"k%d"' % k, b'{"n":%d}' % k, None if h is None else b'{"h":"%d"}' % h) for k, h in rows]
    with tempfile.TemporaryDirectory() as tmp:
        lg = logmod.open_or_create(os.path.join(tmp, "l"), 1, None, 0)
        with Appender(lg, fsync="never", clock=lambda: 7) as app:
            app.append(0, items)
        got = b"".join(open(seg.path, "rb").read() for seg in list_segments(lg.partition_dir(0)))
    assert got == b"".join(record.encode(i, 0, 7, k, v, h) for i, (k, v, h) in enumerate(items))
