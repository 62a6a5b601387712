"""The input order of window and join: lanes (partitions, plain files) merged by the running maximum
of their event time, against a brute-force sort; windows over partitioned logs whose partitions are
each in event-time order up to a jitter J."""

from __future__ import annotations

import os
import random
from itertools import accumulate

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamctl.processing import inputorder, mergeorder
from streamctl.processing.windows.config import WindowConfig
from streamctl.processing.windows.driver import WindowRun
from streamctl.processing.windows.events import records_of
from tests.conftest import closed_rows

from test_window_props import AGGS, T0, reference, reference_late, same


def _log_records(path, time_of=None):
    """A log's records in the input order, one by one."""
    return [r for b in inputorder.log_batches(path, time_of=time_of) for r in b]


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])


def brute_force_order(lanes: list[list[int | None]]) -> list[tuple[int, int]]:
    """(lane, position) of every item, sorted by (running max of the lane's times, lane, position)."""
    keyed = []
    for k, times in enumerate(lanes):
        high = mergeorder.NO_TIME
        for i, t in enumerate(times):
            if t is not None and t > high:
                high = t
            keyed.append((high, k, i))
    return [(k, i) for _h, k, i in sorted(keyed)]


def _blocks(items: list, cuts: list[int]) -> list[list]:
    edges = sorted({0, len(items), *(c % (len(items) + 1) for c in cuts)})
    return [items[a:b] for a, b in zip(edges, edges[1:], strict=False) if b > a]


lane_times = st.lists(st.one_of(st.none(), st.integers(0, 50)), max_size=30)


@SETTINGS
@given(lanes=st.lists(lane_times, min_size=1, max_size=6), cuts=st.lists(st.integers(0, 40), max_size=8))
def test_merge_lanes_equals_brute_force_sort(lanes, cuts):
    made = [mergeorder.record_lane(k, iter(_blocks([(k, i, t) for i, t in enumerate(times)], cuts)), lambda it: it[2])
            for k, times in enumerate(lanes)]
    got, highs = [], {}
    for batch in mergeorder.merge_lanes(made):
        assert batch and len(batch.lanes) == len(batch)
        assert [it[0] for it in batch] == batch.lanes
        got += [(k, i) for k, i, _t in batch]
        highs.update(batch.highs)
    assert got == brute_force_order(lanes)
    for k, times in enumerate(lanes):
        if times:  # the merge key after the lane's last item
            assert highs[k] == max([mergeorder.NO_TIME] + [t for t in times if t is not None])


@SETTINGS
@given(lanes=st.lists(lane_times, min_size=1, max_size=6), cuts=st.lists(st.integers(0, 40), max_size=8),
       keyed=st.booleans())
def test_merge_of_array_lanes_equals_brute_force_sort(lanes, cuts, keyed):
    """The column paths' lanes (keys as arrays: decoder.py, joins/plain_inputs.py) go through the
    same merge and give the brute-force order too, whether the lane makes the keys or is handed them."""
    import numpy as np

    def blocks(k: int, times: list[int | None]):
        high = mergeorder.NO_TIME
        for block in _blocks([(k, i, t) for i, t in enumerate(times)], cuts):
            ts = [t for _k, _i, t in block]
            if keyed:
                keys = mergeorder.merge_key_array(np.array([mergeorder.NO_TIME if t is None else t for t in ts],
                                                           dtype=np.int64), high)
                high = int(keys[-1])
                yield keys, block
            else:
                yield ts, block

    made = [mergeorder.Lane(blocks(k, times), array=True, keyed=keyed) for k, times in enumerate(lanes)]
    got = []
    for parts, order in mergeorder.merge(made):
        items = [it for k, s, e in parts for it in made[k].payload[s:e]]
        got += [(k, i) for k, i, _t in (items if order is None else [items[j] for j in order.tolist()])]
    assert got == brute_force_order(lanes)


@SETTINGS
@given(times=lane_times, high=st.one_of(st.just(mergeorder.NO_TIME), st.integers(-5, 60)))
def test_merge_key_array_is_merge_keys(times, high):
    """The numpy merge keys (merge_key_array, from a list or an array) are merge_keys' values."""
    import numpy as np

    want = mergeorder.merge_keys(times, high)
    assert mergeorder.merge_key_array(times, high).tolist() == want
    arr = np.array([mergeorder.NO_TIME if t is None else t for t in times], dtype=np.int64)
    assert mergeorder.merge_key_array(arr, high).tolist() == want


def test_merge_lanes_carries_a_lane_high_into_its_next_read():
    # a follow round that starts with high 40 for lane 0: its record at 10 sorts at 40
    a = mergeorder.record_lane("a", iter([[10]]), lambda t: t, high=40)
    b = mergeorder.record_lane("b", iter([[20, 30, 50]]), lambda t: t)
    out = [(lane, t) for batch in mergeorder.merge_lanes([a, b]) for lane, t in zip(batch.lanes, batch, strict=True)]
    assert out == [(1, 20), (1, 30), (0, 10), (1, 50)]


def test_merge_keys_running_max_and_none():
    assert mergeorder.merge_keys([5, 3, None, 9, 1], mergeorder.NO_TIME) == [5, 5, 5, 9, 9]
    assert mergeorder.merge_keys([None, 2], 7) == [7, 7]
    assert mergeorder.merge_keys([1, 2, 3], 0) == [1, 2, 3]
    assert mergeorder.merge_keys([1, 2, 3], 2) == [2, 2, 3]


# -- partitioned logs written as produce would have written them -------------------------------

def write_log(path: str, partitions: list[list[dict]], segment_bytes: int = 1 << 20) -> None:
    """partitions: per partition, its records' (ts, key, value) dicts in stored order."""
    os.makedirs(path)
    with open(os.path.join(path, "streamctl.json"), "wb") as f:
        f.write(orjson.dumps({"format": 1, "partitions": len(partitions), "segment_bytes": segment_bytes,
                              "created": T0}))
    for p, recs in enumerate(partitions):
        os.makedirs(os.path.join(path, f"p{p}"))
        with open(os.path.join(path, f"p{p}", f"{0:020d}.jsonl"), "wb") as f:
            for off, r in enumerate(recs):
                f.write(orjson.dumps({"offset": off, "partition": p, "ts": r["ts"], "key": r["key"],
                                      "value": r["value"]}) + b"\n")


def partitioned_events(rnd: random.Random, n_parts: int, n: int, jitter: int) -> list[list[dict]]:
    """n events with event time `at` rising 7 ms apart (give or take the jitter), keyed a..e, spread
    over the partitions by key as produce --key-field would; append times come in random batches
    (one produce call may hold events of any age), unrelated to event time."""
    parts: list[list[dict]] = [[] for _ in range(n_parts)]
    ts = [T0 + 10_000_000] * n_parts
    for i in range(n):
        key = rnd.choice("abcde")
        p = "abcde".index(key) % n_parts
        if rnd.random() < 0.2:
            ts[p] += rnd.randint(1, 5)  # a new produce batch for this partition
        at = T0 + i * 7 + rnd.randint(-jitter, jitter)
        parts[p].append({"ts": ts[p], "key": key, "value": {"at": at, "k": key, "v": rnd.randint(-5, 20)}})
    # each partition in event-time order up to the jitter: a record is at most `jitter` behind
    # its partition's running max (2 * jitter apart is the most the draw above allows)
    return parts


def jitter_of(parts: list[list[dict]]) -> int:
    j = 0
    for recs in parts:
        high = None
        for r in recs:
            at = r["value"]["at"]
            if high is not None:
                j = max(j, high - at)
            high = at if high is None else max(high, at)
    return j


def ordered_events(parts: list[list[dict]]) -> list[tuple[int, str, int]]:
    """(t, k, v) in the brute-force input order."""
    order = brute_force_order([[r["value"]["at"] for r in recs] for recs in parts])
    return [(parts[k][i]["value"]["at"], parts[k][i]["value"]["k"], parts[k][i]["value"]["v"]) for k, i in order]


def window_log(path: str, kind: str, size: int, hop: int, lateness: int):
    cfg = WindowConfig(kind=kind, size=size, hop=hop, by=["value.k"], aggs=AGGS, time_field="value.at",
                       lateness=lateness)
    is_log, recs = records_of(path, cfg)
    run = WindowRun(cfg, is_log)
    rows: list = []
    run.feed(recs, rows.extend)
    run.finish(rows.extend)
    out = [(s, e, orjson.loads(key), tuple(vals.values())) for s, e, key, vals, _rev in rows]
    return sorted(out, key=repr), run.stats.late


KINDS = [("tumbling", 100, 0), ("tumbling", 1000, 0), ("hopping", 300, 100), ("sliding", 50, 0),
         ("session", 20, 0), ("session", 200, 0)]


@SETTINGS
@given(n_parts=st.integers(1, 8), n=st.integers(1, 120), jitter=st.sampled_from([0, 3, 40, 500]),
       seed=st.integers(0, 10**6), kind=st.sampled_from(KINDS), extra=st.integers(0, 100))
def test_partitioned_log_with_lateness_of_the_jitter_has_no_late_event(tmp_path_factory, n_parts, n, jitter, seed,
                                                                        kind, extra):
    parts = partitioned_events(random.Random(seed), n_parts, n, jitter)
    path = str(tmp_path_factory.mktemp("log") / "log")
    write_log(path, parts)
    name, size, hop = kind
    got, late = window_log(path, name, size, hop, jitter_of(parts) + extra)
    assert late == 0
    same(got, reference(ordered_events(parts), name, size, hop))


@SETTINGS
@given(n_parts=st.integers(1, 8), n=st.integers(1, 120), jitter=st.sampled_from([0, 3, 40, 500]),
       seed=st.integers(0, 10**6), kind=st.sampled_from([k for k in KINDS if k[0] != "session"]))
def test_partitioned_log_late_count_equals_the_rule(tmp_path_factory, n_parts, n, jitter, seed, kind):
    parts = partitioned_events(random.Random(seed), n_parts, n, jitter)
    path = str(tmp_path_factory.mktemp("log") / "log")
    write_log(path, parts)
    name, size, hop = kind
    _got, late = window_log(path, name, size, hop, 0)
    assert late == reference_late(ordered_events(parts), name, size, hop)


def test_append_time_order_is_unchanged(tmp_path):
    """With the default time field (ts, non-decreasing in a partition) the order is (ts, partition, offset)."""
    rnd = random.Random(3)
    parts = partitioned_events(rnd, 3, 500, 50)
    path = str(tmp_path / "log")
    write_log(path, parts)
    got = [(r["ts"], r["partition"], r["offset"]) for r in _log_records(path)]
    assert got == sorted(got)
    by_at = [r["value"]["at"] for r in _log_records(path, time_of=lambda r: r["value"]["at"])]
    assert by_at != [r["value"]["at"] for r in _log_records(path)]


def test_bad_times_keep_their_place(tmp_path):
    path = str(tmp_path / "log")
    write_log(path, [
        [{"ts": 1, "key": "a", "value": {"at": 100}}, {"ts": 1, "key": "a", "value": {"at": "never"}},
         {"ts": 1, "key": "a", "value": {"at": 300}}],
        [{"ts": 9, "key": "b", "value": {"at": 150}}, {"ts": 9, "key": "b", "value": {"at": 200}}],
    ])
    from streamctl.timeparse import event_time_ms

    got = [(r["partition"], r["offset"]) for r in
           _log_records(path, time_of=lambda r: event_time_ms(r["value"]["at"]))]
    # p0's unreadable time sorts with its running max (100): before p1's 150
    assert got == [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2)]


def test_two_inputs_merge_by_event_time_ties_to_the_first(tmp_path):
    left, right = str(tmp_path / "left"), str(tmp_path / "right.jsonl")
    # the left log was appended a day after the right file's events: its ts says nothing of event time
    write_log(left, [[{"ts": T0 + 86_400_000, "key": None, "value": {"at": t}} for t in (10, 20, 30)],
                     [{"ts": T0 + 86_400_000, "key": None, "value": {"at": t}} for t in (5, 20)]])
    with open(right, "wb") as f:
        f.writelines(orjson.dumps({"at": t}) + b"\n" for t in (1, 20, 25))
    specs = [inputorder.classify(left), inputorder.classify(right)]
    got = [(i, r["partition"], r["value"]["at"]) for i, r in inputorder.merged(specs, lambda r: r["value"]["at"])]
    assert got == [(1, 0, 1), (0, 1, 5), (0, 0, 10), (0, 0, 20), (0, 1, 20), (1, 0, 20), (1, 0, 25), (0, 0, 30)]


# -- from the shell ---------------------------------------------------------------------------

def _orders(path: str, n: int = 3000) -> list[dict]:
    rnd = random.Random(42)
    events = [{"order": i, "user": f"u{rnd.randint(0, 49)}", "amount": rnd.randint(1, 200),
               "at": T0 + i * 900 + rnd.randint(-5000, 5000)} for i in range(n)]
    with open(path, "wb") as f:
        f.writelines(orjson.dumps(e) + b"\n" for e in events)
    return events


def test_cli_partitioned_log_filled_by_one_produce(tmp_path, run):
    """The same events windowed as a 3-partition log filled by one produce and as a plain file: the
    late counts each equal the rule applied to their own input order, and with a lateness of the
    partitions' jitter nothing is late and the rows are the plain file's."""
    src = str(tmp_path / "orders.jsonl")
    _orders(src)
    log = str(tmp_path / "orders")
    run("produce", log, src, "--partitions", "3", "--key-field", "user", check=True)
    parts = [[orjson.loads(line) for line in open(os.path.join(log, f"p{p}", f"{0:020d}.jsonl"), "rb")]
             for p in range(3)]
    order = brute_force_order([[r["value"]["at"] for r in recs] for recs in parts])
    ordered = [(parts[k][i]["value"]["at"], None, None) for k, i in order]
    want_late = reference_late(ordered, "tumbling", 60_000)
    p = run("window", log, "--tumbling", "1m", "--time-field", "at", "--by", "value.user")
    assert p.returncode == 0, p.stderr
    assert (f"{want_late} late event(s)" in p.stderr.decode()) if want_late else "late" not in p.stderr.decode()
    assert want_late < 100  # of 3,000: each partition is nearly in order, only the jitter makes events late

    jit = max(jitter_of([recs]) for recs in [[{"value": r["value"]} for r in ps] for ps in parts])
    plain = run("window", src, "--tumbling", "1m", "--time-field", "at", "--by", "user",
                "--lateness", f"{jit + 10_000}ms", check=True)
    logged = run("window", log, "--tumbling", "1m", "--time-field", "at", "--by", "value.user",
                 "--lateness", f"{jit}ms", check=True)
    assert b"late" not in logged.stderr
    assert sorted(logged.stdout.splitlines()) == sorted(plain.stdout.splitlines())


@pytest.mark.slow
def test_cli_follow_merges_partitions_by_event_time(tmp_path, run):
    """window --follow --group over a partitioned log: the rows of the batch run, none late."""
    src = str(tmp_path / "orders.jsonl")
    events = _orders(src, 2000)
    log = str(tmp_path / "orders")
    run("produce", log, src, "--partitions", "3", "--key-field", "user", check=True)
    args = ["window", log, "--tumbling", "1m", "--time-field", "at", "--by", "value.user", "--lateness", "11s"]
    batch = run(*args, check=True)
    follow = run(*args, "--follow", "--group", "g", "--idle-timeout", "1s", check=True)
    assert b"late" not in follow.stderr and b"late" not in batch.stderr
    # the windows still open at the idle timeout wait in the checkpoint; the batch run flushes them
    wm = max(e["at"] for e in events) - 11_000
    assert sorted(follow.stdout.splitlines()) == sorted(closed_rows(batch.stdout.splitlines(), wm))
    closed = [e for e in events if e["at"] // 60_000 * 60_000 + 60_000 <= wm]
    assert sum(orjson.loads(line)["count"] for line in follow.stdout.splitlines()) == len(closed)


def test_accumulate_is_the_running_max():
    # merge_keys' in-order shortcut and its general path agree
    rnd = random.Random(1)
    for _ in range(200):
        ts = [rnd.randint(0, 20) for _ in range(rnd.randint(1, 10))]
        high = rnd.randint(-5, 25)
        assert mergeorder.merge_keys(ts, high) == list(accumulate(ts, max, initial=high))[1:]
