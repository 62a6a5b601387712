"""The session store (session_index.SessionStore) shared by the batch kernel (session_kernel.py) and
the one-event path: batches, single events and checkpoints in any mix give the rows and the
checkpoint of one event at a time, and the store stays bounded by the groups that matter."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamctl.processing.windows.config import WindowConfig
from streamctl.processing.windows.driver import WindowRun

T0 = 1_763_719_200_000
M = 60_000

values = st.one_of(st.integers(-5, 5), st.floats(-10, 10, allow_nan=False), st.none(), st.just(2**40))
# times mostly in order, stragglers a few ms to beyond the lateness old, ten groups
arrivals = st.lists(st.tuples(st.integers(0, 90_000), st.sampled_from([0] * 6 + [1, 20_000, 4 * M, 12 * M, 40 * M]),
                              st.integers(0, 9), values), max_size=120)
# how each part goes in: a batch (the kernel), one record at a time (add/close from outside), and
# whether the run is restored from its checkpoint before it
steps = st.lists(st.tuples(st.integers(1, 30), st.sampled_from(["batch", "batch", "records"]), st.booleans()),
                 max_size=12)


def records(arrivals_: list[tuple]) -> list[dict]:
    out, t = [], T0
    for i, (step, back, k, v) in enumerate(arrivals_):
        t += step
        out.append({"offset": i, "partition": 0, "key": None, "value": {"ts": t - back, "k": "abcdefghij"[k], "v": v}})
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evs=arrivals, how=steps, gap=st.sampled_from([M, 3 * M, 30 * M]), lateness=st.sampled_from([0, M, 15 * M]),
       aggs=st.sampled_from([["count", "avg:v"], ["count", "sum:v", "first:v", "max:v"]]))
def test_batches_records_and_restores_in_any_mix_equal_one_event_at_a_time(evs, how, gap, lateness, aggs):
    _in_any_mix(evs, how, WindowConfig(kind="session", size=gap, by=["k"], aggs=aggs, lateness=lateness))


# times on a grid of half a GAP, mostly in order: events exactly GAP after a session's last, at the
# watermark that reaches its end (it closes), or just before it, are common
grid_arrivals = st.lists(st.tuples(st.sampled_from([0, 0, M // 2, M, M, 2 * M]),
                                   st.sampled_from([0] * 6 + [M // 2, M, 2 * M]), st.integers(0, 3), values),
                         max_size=80)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evs=grid_arrivals, how=steps, lateness=st.sampled_from([0, M // 2, M]),
       aggs=st.sampled_from([["count", "avg:v"], ["count", "sum:v", "first:v", "max:v"]]))
def test_ties_at_a_session_end_in_any_mix_equal_one_event_at_a_time(evs, how, lateness, aggs):
    """A session closes when the watermark reaches its end: the kernel's in-order and out-of-order
    assignments, its closes and its late stragglers and ties agree with add() at that edge."""
    _in_any_mix(evs, how, WindowConfig(kind="session", size=M, by=["k"], aggs=aggs, lateness=lateness))


def _in_any_mix(evs: list[tuple], how: list[tuple], cfg: WindowConfig) -> None:
    recs = records(evs)
    ref, run = WindowRun(cfg, is_log=False), WindowRun(cfg, is_log=False)
    rows_ref: list = []
    rows: list = []
    i = 0
    for n, mode, restore in [*how, (len(recs), "batch", False)]:
        part = recs[i:i + n]
        i += len(part)
        if restore:
            data = orjson.loads(orjson.dumps(run.dump()))
            run = WindowRun(cfg, is_log=False)
            run.load(data)
        ref.feed_records(iter(part), rows_ref.extend)
        if mode == "batch":
            run.feed_batches([part], rows.extend)
        else:
            run.feed_records(iter(part), rows.extend)
        assert rows == rows_ref
        if not restore:  # (a restored run has not seen the watermark that forgot a closed session)
            assert orjson.dumps(run.dump()) == orjson.dumps(ref.dump())
    ref.finish(rows_ref.extend)
    run.finish(rows.extend)
    assert rows == rows_ref
    assert vars(run.stats) == vars(ref.stats)


def test_batches_and_add_from_outside_work_on_one_store():
    """While batches are folded, the open sessions are handles in the store and the close heap is left
    empty; a record through add() from outside (follow mode's records) works on the same store, and
    its close() makes the heap again from it."""
    evs = [{"offset": i, "partition": 0, "key": None, "value": {"ts": T0 + i * 7_000, "k": "abc"[i % 3], "v": i}}
           for i in range(60)]
    cfg = WindowConfig(kind="session", size=M, by=["k"], aggs=["count", "avg:v"])
    run = WindowRun(cfg, is_log=False)
    run.feed_batches([evs[:50]], lambda rows: None)
    op = run.op
    store = op.store
    assert not op.heap_ok and op.heap == [] and op.open_windows() == 3
    handles = store.open_handles()
    run.feed_records(iter(evs[50:]), lambda rows: None)
    assert op.heap_ok and len(op.heap) == 3 and op.store is store and store.open_handles() == handles
    assert sorted(store.gkey[g] for g, hs in enumerate(store.opened) if hs) == [b'"a"', b'"b"', b'"c"']


def test_the_arrays_forget_keys_no_event_can_reach():
    """Many short sessions, a new key each: the store is compacted once it holds INDEX_SLACK more keys
    than four per open group, keeping only the open groups and the closed sessions an event that is
    not late can still reach (what --late drop remembers)."""
    from streamctl.processing.windows import session_index

    gap = 10_000
    evs = [{"offset": i, "partition": 0, "key": None, "value": {"ts": T0 + i * 100_000, "k": f"u{i}", "v": 1}}
           for i in range(3000)]
    cfg = WindowConfig(kind="session", size=gap, by=["k"], aggs=["count"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(session_index, "INDEX_SLACK", 100)
        run = WindowRun(cfg, is_log=False)
        rows: list = []
        run.feed_batches([evs[i:i + 50] for i in range(0, len(evs), 50)], rows.extend)
        store = run.op.store
        assert len(store.gid) <= 4 + 100 + 50
        assert len(store.gid) < 3000 and run.op.open_windows() == 1
        # u2998 closed 100 s before the watermark: beyond 2 GAP, no event that is not late can reach it
        assert run.op.dump()["closed_last"] == []
        run.finish(rows.extend)
    assert len(rows) == 3000


@settings(max_examples=200, deadline=None)
@given(items=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 400)), min_size=1, max_size=80),
       big=st.sampled_from([0, 1 << 40]))
def test_one_key_sort_is_the_lexsort_of_group_time_and_position(items, big):
    """The session index's sort by group, then time, then position (one int64 key when it fits,
    np.lexsort otherwise: `big` groups take the second)."""
    import numpy as np

    from streamctl.processing.windows.session_index import _by_group_time

    g = np.array([a + (big if a % 2 else 0) for a, _ in items], dtype=np.int64)
    t = np.array([b for _, b in items], dtype=np.int64)
    p = np.arange(len(items), dtype=np.int64)[::-1].copy()  # unique, not in item order
    assert _by_group_time(g, t, p, 401).tolist() == np.lexsort((p, t, g)).tolist()
