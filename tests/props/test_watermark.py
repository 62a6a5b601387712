"""The watermark's array forms (watermark.before_array, after_array: the window and join
kernels') against its value form (Watermark.observe folded over the same times, the reference)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamctl.processing.watermark import NO_WATERMARK, Watermark, after_array, before_array

times = st.lists(st.integers(-10**13, 10**13) | st.integers(0, 50), min_size=1, max_size=40)
prior = st.one_of(st.just(None), st.integers(-10**13, 10**13), st.integers(0, 50))
lateness = st.integers(0, 10**6) | st.integers(0, 20)


def folded(ts: list[int], max_time: int | None, late: int) -> tuple[list[int], list[int], Watermark]:
    """(watermark before each event, watermark after each event, the clock at the end), by observe."""
    clock = Watermark(late)
    if max_time is not None:
        clock.observe(max_time)
    pre, post = [], []
    for t in ts:
        pre.append(clock.value)
        clock.observe(t)
        post.append(clock.value)
    return pre, post, clock


@settings(max_examples=300, deadline=None)
@given(times, prior, lateness)
def test_array_forms_are_the_value_form(ts, max_time, late):
    pre, post, clock = folded(ts, max_time, late)
    start = NO_WATERMARK if max_time is None else max_time
    t = np.array(ts, dtype=np.int64)
    assert before_array(t, start, late).tolist() == pre
    wm, high = after_array(t, max_time, late)
    assert wm.tolist() == post and high == clock.max_time


@settings(max_examples=100, deadline=None)
@given(times, lateness)
def test_checkpoint_keeps_the_watermark(ts, late):
    _pre, _post, clock = folded(ts, None, late)
    again = Watermark.load(clock.dump())
    assert (again.value, again.max_time, again.lateness) == (clock.value, clock.max_time, clock.lateness)
