"""The epoch-number rule (seconds, milliseconds or microseconds by magnitude) is timeparse.event_time_ms;
the shortcuts hot loops take for the common case (is_epoch_ms, epoch_ms_column, event_times) agree
with it on every number, at the edges of each range too."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streamctl.timeparse import EPOCH_MS_BELOW, EPOCH_S_BELOW, epoch_ms_column, event_time_ms, event_times, is_epoch_ms

edges = st.sampled_from([b + d for b in (EPOCH_S_BELOW, EPOCH_MS_BELOW, -EPOCH_S_BELOW, -EPOCH_MS_BELOW, 0)
                         for d in (-1, 0, 1)])
numbers = st.one_of(edges, st.integers(-(10**18), 10**18), st.integers(-(10**15), 10**15),
                    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
                    st.integers(-(10**15), 10**15).map(str))


@settings(max_examples=300, deadline=None)
@given(numbers)
def test_is_epoch_ms_only_where_event_time_ms_is_the_value(v):
    if is_epoch_ms(v):
        assert event_time_ms(v) == v
    if type(v) is int and v >= EPOCH_S_BELOW and event_time_ms(v) == v:
        assert is_epoch_ms(v)


@settings(max_examples=200, deadline=None)
@given(st.lists(numbers, max_size=20))
def test_epoch_ms_column_and_event_times_follow_event_time_ms(col):
    if epoch_ms_column(col):
        assert [event_time_ms(v) for v in col] == col
    else:
        assert not col or not all(map(is_epoch_ms, col))
    assert event_times(col) == [event_time_ms(v) for v in col]


@settings(max_examples=300, deadline=None)
@given(numbers, st.sampled_from([("value", "t"), ("value", "a", "t"), ("value", "0"), ("headers", "t")]))
def test_a_records_time_is_event_time_ms_of_its_field(v, parts):
    """eventfields.record_time, which every join side and every window reads times with, is the
    rule itself on the field's value; a log's `ts` is the append time as it is."""
    from streamctl.processing.eventfields import record_time, time_getter
    from streamctl.storage import fieldpaths

    rec = {"ts": 7, "value": {"t": v, "a": {"t": v}, "0": v}, "headers": {"t": v}}
    assert record_time(parts)(rec) == event_time_ms(fieldpaths.get(rec, parts))
    assert record_time(("ts",))(rec) == 7
    window_time = time_getter(".".join(parts), True, 0, 10**13)(rec)
    t = event_time_ms(fieldpaths.get(rec, parts))
    assert window_time == (t if t is not None and 0 <= t <= 10**13 else None)
