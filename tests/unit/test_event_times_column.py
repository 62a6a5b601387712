"""timeparse.event_times, an event-time column at once, against event_time_ms, its reference.

Random ISO-8601 strings are built from random instants with random separators, fractions,
offsets and damage, mixed with numbers, digit strings, bools, None and nested values: the column
function must give exactly event_time_ms's answer for each. The common shapes must not reach
event_time_ms at all (the fast branch really runs).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamctl import timeparse
from streamctl.timeparse import MAX_MS, MIN_MS, event_time_ms, event_times

SEPARATORS = ["T", "t", " ", "x", "", "TT", "\u2009"]
FRACTION_MARKS = [".", ",", ""]
WHITESPACE = ["", "", "", " ", "\n", "\t ", "\u00a0"]


@st.composite
def iso_strings(draw) -> str:
    dt = draw(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59, 999999)))
    text = f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}"
    text += draw(st.sampled_from(SEPARATORS)) if draw(st.booleans()) else "T"
    cut = draw(st.sampled_from(["second", "second", "second", "minute", "hour"]))
    text += f"{dt.hour:02d}" if cut == "hour" else f"{dt.hour:02d}:{dt.minute:02d}"
    if cut == "second":
        text += f":{dt.second:02d}"
        digits = draw(st.sampled_from([0, 0, 1, 2, 3, 3, 4, 6, 6, 7, 9, 12, 30]))
        if digits or draw(st.integers(0, 20)) == 0:
            frac = f"{dt.microsecond:06d}" + "".join(draw(st.lists(st.sampled_from("0123456789"), max_size=24)))
            text += (draw(st.sampled_from(FRACTION_MARKS)) if draw(st.integers(0, 9)) == 0 else ".") + frac[:digits]
    offset = draw(st.sampled_from(["", "Z", "z", "+hh:mm", "-hh:mm", "+hh:mm", "+hhmm", "-hh", "+hh:mm:ss", "Zz"]))
    if "hh" in offset:
        h = draw(st.integers(0, 25))
        m = draw(st.sampled_from([0, 0, 30, 45, 59, 60, 75]))
        offset = offset.replace("hh", f"{h:02d}").replace("mm", f"{m:02d}").replace("ss", "07")
    text += offset
    if draw(st.integers(0, 9)) == 0:  # damage: a character replaced, or the text cut short
        i = draw(st.integers(0, len(text) - 1))
        if draw(st.booleans()):
            text = text[:i] + draw(st.sampled_from("0125:-+.TZ a٣")) + text[i + 1:]
        else:
            text = text[:i]
    if draw(st.integers(0, 9)) == 0:
        text = draw(st.sampled_from(WHITESPACE)) + text + draw(st.sampled_from(WHITESPACE))
    return text


def iso_at(ms: int) -> str:
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%S.%f")


NUMBERS = st.one_of(
    st.integers(),
    st.integers(-(10**15), 10**15),
    st.sampled_from([0, -1, 99_999_999_999, 100_000_000_000, -100_000_000_000, 99_999_999_999_999,
                     100_000_000_000_000, -100_000_000_000_000, 253_402_300_799_999_000, 1 << 63, -(1 << 70)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(-1e15, 1e15),
)
SCALARS = st.one_of(
    iso_strings(), iso_strings(), iso_strings(), NUMBERS,
    NUMBERS.map(str), st.integers().map(lambda i: f" {i} "), st.booleans(), st.none(), st.text(max_size=30),
    st.sampled_from(["", "Z", "later", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59.999-00:01",
                     "9999-12-31T23:59:59.999+00:01", "2026-02-29T10:00:00Z", "2024-02-29T10:00:00Z",
                     "2026-11-21T24:00:00Z", "2026-11-21T10:00:60Z", "٢٠٢٦-11-21T10:00:05Z"]),
)
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=2), st.dictionaries(st.text(max_size=3), SCALARS, max_size=2))


@settings(max_examples=400, deadline=None)
@given(st.lists(VALUES, max_size=40))
def test_event_times_is_event_time_ms_for_every_value(values):
    assert event_times(values) == [event_time_ms(v) for v in values]


@settings(max_examples=200, deadline=None)
@given(st.lists(iso_strings(), max_size=60), st.integers(1, 4))
def test_event_times_agrees_while_its_caches_start_over(values, kept):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(timeparse, "_KEPT", kept)
        assert event_times(values) == [event_time_ms(v) for v in values]
        assert event_times(values) == [event_time_ms(v) for v in values]  # now from the caches


def test_common_shapes_never_reach_the_general_parse(monkeypatch):
    common = ["2026-11-21T10:00:05Z", "2026-11-21T10:00:05.123Z", "2026-11-21T10:00:05.123456+01:00",
              "2026-11-21 10:00:05.1z", "2026-11-21T10:00:05", "2026-11-21T10:00:05.123456789-05:30",
              "2026-11-21T10:00:05+00:00", "0001-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z",
              1_763_719_205, 1_763_719_205_123, -5, 0]
    expected = [event_time_ms(v) for v in common]

    def general_parse(value):
        raise AssertionError(f"{value!r} went to event_time_ms")

    monkeypatch.setattr(timeparse, "event_time_ms", general_parse)
    assert event_times(common) == expected
    assert event_times([iso_at(1_763_719_200_000 + i * 997) + "Z" for i in range(5000)]) == [
        1_763_719_200_000 + i * 997 for i in range(5000)]


EDGES = [b + d for b in (10**11, 10**14, MAX_MS, MIN_MS, 10**17, 1 << 63) for d in (-1, 0, 1)]
EDGE_STRINGS = ["2026-11-21T10:00:59Z", "2026-11-21T10:00:60Z", "2026-11-21T10:00:05+23:59", "2026-11-21T10:00:05+24:00",
                "2026-11-21T10:00:05-00:60", "2026-11-21T10:00:05.", "2026-11-21T10:00:05.Z", "2026-11-21T10:00:05,5Z",
                "2026-11-21T10:00:05.5 ", " 2026-11-21T10:00:05.5", "2026-11-21T10:00:05.5+01:00Z", "2026-11-21T10:00:05Zz",
                "2026-11-21T10:00:05.5+0100", "2026-11-21T10:00:05.5-01", "2026-11-21T10:00:05.5+01:00:30",
                "2026-11-21T10:00:0٥Z", "2026-11-21T10:00:05.12٣Z", "2026-11-21T10:00:05.1_2Z", "2026-11-21T10:00:05+0_:00",
                "2026-11-21T10:00", "2026-11-21T10:00Z", "2026-11-21T10:00:05ZZ", "2024-02-29T23:59:59.9999999999Z"]


def test_edges_agree():
    values = EDGES + [-v for v in EDGES] + [float(v) for v in EDGES] + [str(v) for v in EDGES] + EDGE_STRINGS
    assert event_times(values) == [event_time_ms(v) for v in values]


def test_the_ends_of_the_range():
    assert event_times(["0001-01-01T00:00:00Z", "0001-01-01T00:00:00+00:01", "0001-01-01T00:00:00-00:01",
                        "9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.999-00:01"]) == [
        MIN_MS, None, MIN_MS + 60_000, MAX_MS, None]


# -- the input-order merge reads a block's times with the window's column function ----------

RECORD_VALUES = st.one_of(st.none(), SCALARS, st.lists(SCALARS, max_size=2),
                          st.fixed_dictionaries({}, optional={"t": VALUES, "ts": VALUES,
                                                              "in": st.one_of(SCALARS, st.fixed_dictionaries(
                                                                  {}, optional={"t": VALUES}))}))


@settings(max_examples=150, deadline=None)
@given(st.lists(RECORD_VALUES, min_size=1, max_size=30), st.sampled_from(["t", "value.t", "in.t", "ts", "key"]),
       st.sampled_from([("tumbling", 60_000), ("session", 253_402_300_799_999), ("sliding", 86_400_000)]),
       st.booleans())
def test_window_time_column_is_its_per_record_time(values, field, window, batch):
    from streamctl.processing import inputorder
    from streamctl.processing.windows.config import WindowConfig
    from streamctl.processing.windows.events import time_getter

    cfg = WindowConfig(window[0], window[1], time_field=field)
    recs = [{"key": None, "value": v, "ts": 1_763_719_200_000 + i, "offset": i, "partition": 0}
            for i, v in enumerate(values)]
    if batch:  # as a log's block arrives (its values read already)
        recs = inputorder.RecordBatch(recs)
        recs.values = values
        recs.keys = [None] * len(values)
    for is_log in (True, False):
        get = time_getter(cfg, is_log)
        column = getattr(get, "column", None)
        if column is not None:
            assert column(recs) == [get(r) for r in recs]


def test_a_lane_reads_a_blocks_times_with_the_column(monkeypatch):
    from streamctl.processing import mergeorder
    from streamctl.processing.windows.config import WindowConfig
    from streamctl.processing.windows.events import time_getter

    get = time_getter(WindowConfig("tumbling", 60_000, time_field="at"), True)
    blocks = [[{"value": {"at": "2026-11-21T10:00:05Z"}}, {"value": {"at": "2026-11-21T10:00:04.5+00:00"}}]]
    lane = mergeorder.record_lane(0, iter(blocks), get)

    def general_parse(value):
        raise AssertionError(f"{value!r} went to event_time_ms")

    monkeypatch.setattr(timeparse, "event_time_ms", general_parse)
    lane.fill()
    assert lane.keys == [1_795_255_205_000, 1_795_255_205_000]
