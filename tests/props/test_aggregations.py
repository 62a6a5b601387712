"""Each aggregation class against itself: its batch kernel (fold_groups) equals its one-value add,
merge equals adding one state's values after the other's, dump/load continues where it left off;
the sketches meet their error bounds, give the same state in another process, and exact distinct
holds a set's worth of memory."""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import subprocess
import sys
from bisect import bisect_left, bisect_right

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from streamctl.processing.aggregations import AGG_FUNCS, agg_class
from streamctl.processing.aggregations.base import is_number
from streamctl.processing.checkpoint import agg_type, encode

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SKETCHES = ("approx_distinct", "approx_p50", "approx_p90", "approx_p99")

json_value = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.integers(-2**62, 2**62),
                       st.floats(-1e6, 1e6), st.sampled_from([1.0, -0.0, 0.0, 2.5]), st.text(max_size=2),
                       st.lists(st.integers(0, 2), max_size=2), st.dictionaries(st.sampled_from("ab"), st.integers(0, 1)))


def make(func: str):
    return agg_class(func)(func)


def inputs(func: str, values: list) -> list:
    """What Plan.extract hands an aggregation: a numeric one sees only numbers (others are None)."""
    return [v if not make(func).numeric or is_number(v) else None for v in values]


def canonical(agg, state):
    """A state's checkpoint form, in an order that does not depend on set iteration."""
    d = agg.dump(state)
    return sorted(d) if agg.func == "distinct" else d


def by_add(agg, col: list, seq0: int = 0):
    s = agg.new()
    for j, v in enumerate(col):
        s = agg.add(s, v, seq0 + j)
    return s


@pytest.mark.parametrize("func", AGG_FUNCS)
@SETTINGS
@given(values=st.lists(json_value, max_size=40), cuts=st.lists(st.integers(0, 40), max_size=5),
       picks=st.lists(st.integers(0, 2), min_size=40, max_size=40))
def test_fold_groups_equals_add_one_by_one(func, values, cuts, picks):
    """The batch kernel over batches (cut anywhere), with the events of a batch spread over three
    windows, gives each window the state add() gives it value by value."""
    agg = make(func)
    col = inputs(func, values)
    bounds = sorted({0, len(col), *[c for c in cuts if c <= len(col)]})
    want = [agg.new() for _ in range(3)]
    got = [[agg.new()] for _ in range(3)]  # Plan's states: a list with this aggregation's slot
    for j, v in enumerate(col):
        want[picks[j]] = agg.add(want[picks[j]], v, 100 + j)
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        groups = [(got[w], [j - lo for j in range(lo, hi) if picks[j] == w]) for w in range(3)]
        agg.fold_groups(0, [g for g in groups if g[1]], col[lo:hi], 100 + lo)
    for w in range(3):
        assert canonical(agg, got[w][0]) == canonical(agg, want[w])
        assert repr(agg.result(got[w][0])) == repr(agg.result(want[w]))


def test_bare_count_folds_the_batch():
    agg = make("count")
    slot = [5]
    agg.fold_groups(0, [(slot, [0, 2, 3])], None, 0)
    assert slot == [8]


@pytest.mark.parametrize("func", [f for f in AGG_FUNCS if f not in SKETCHES])
@SETTINGS
@given(values=st.lists(json_value, max_size=40), cut=st.integers(0, 40), ints=st.booleans())
def test_merge_equals_adding_one_after_the_other(func, values, cut, ints):
    """merge(state of A, state of B) = the state of A's values then B's (first/last by seq).
    Float totals are added in another order by a merge: equal to 1e-9 there, exactly over ints."""
    agg = make(func)
    col = inputs(func, [v if not ints or type(v) is not float else None for v in values])
    a, b = col[:cut], col[cut:]
    merged = agg.merge(by_add(agg, a), by_add(agg, b, len(a)))
    want = by_add(agg, col)
    got_r, want_r = agg.result(merged), agg.result(want)
    if func in ("sum", "avg", "stddev") and (not ints or func != "sum"):
        assert (got_r is None) == (want_r is None)
        if got_r is not None:
            assert math.isclose(got_r, want_r, rel_tol=1e-9, abs_tol=1e-6)
    else:
        assert canonical(agg, merged) == canonical(agg, want)


@pytest.mark.parametrize("func", AGG_FUNCS)
@SETTINGS
@given(values=st.lists(json_value, max_size=40), cut=st.integers(0, 40))
@example(values=[-1, -(1 << 62), -(1 << 62)], cut=3)  # a total beyond 64 bits: orjson refuses it
def test_dump_load_continues_where_it_left_off(func, values, cut):
    """A checkpoint's state (dumped, written as JSON the way a checkpoint is, checked against its
    msgspec type, read back as a checkpoint is, loaded) goes on to the same state as one never
    written: a sum of ints that leaves 64 bits included."""
    agg = make(func)
    col = inputs(func, values)
    s = by_add(agg, col[:cut])
    text = encode(agg.dump(s))
    msgspec.json.decode(text, type=agg_type([func]).__args__[0])  # the checkpoint's own check
    s = agg.load(msgspec.json.decode(text))
    for j, v in enumerate(col[cut:]):
        s = agg.add(s, v, cut + j)
    want = by_add(agg, col)
    assert canonical(agg, s) == canonical(agg, want)
    assert repr(agg.result(s)) == repr(agg.result(want))


@pytest.mark.parametrize("func", ["approx_distinct", "approx_p50"])
def test_sketch_state_round_trips_at_every_size(func):
    """Through the sketches' modes (HLL: list, set, registers; KLL: one level, many)."""
    agg = make(func)
    rnd = random.Random(3)
    col = [rnd.randrange(10**9) for _ in range(60_000)]
    for cut in (5, 150, 3000, 20_000):
        s = agg.load(orjson.loads(orjson.dumps(agg.dump(by_add(agg, col[:cut])))))
        s = agg.fold(s, col[cut:])
        assert agg.dump(s) == agg.dump(agg.fold(agg.new(), col))


def test_distinct_counts_json_types_apart():
    agg = make("distinct")
    assert agg.result(agg.fold(agg.new(), [1, 1.0, "1", True, [1], {"a": 1}, 1, "1", {"a": 1}])) == 6
    hll = make("approx_distinct")
    assert hll.result(hll.fold(hll.new(), [1, 1.0, "1", True, [1], {"a": 1}, 1, "1", {"a": 1}])) == 6


def test_distinct_checkpoint_does_not_depend_on_the_hash_seed():
    """A set's order follows PYTHONHASHSEED; the dump is sorted, so its bytes are the same in every run."""
    code = ("from streamctl.processing.aggregations import agg_class; import orjson; a = agg_class('distinct')('distinct');"
            "print(orjson.dumps(a.dump(a.fold(a.new(), ['x%d' % i for i in range(50)] + [3, 1.5, [1], 'é']))).decode())")
    outs = {subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed},
                           capture_output=True, text=True, check=True).stdout for seed in ("1", "2", "3")}
    assert len(outs) == 1
    agg = make("distinct")
    assert agg.result(agg.load(orjson.loads(outs.pop()))) == 54


@given(values=st.lists(st.one_of(st.integers(-10**6, 10**6), st.floats(-1e6, 1e6)), max_size=30))
@SETTINGS
def test_stddev_is_the_sample_standard_deviation(values):
    agg = make("stddev")
    got = agg.result(agg.fold(agg.new(), values))
    if len(values) < 2:
        assert got is None  # Spark's stddev (stddev_samp) of one value is null
    else:
        assert math.isclose(got, statistics.stdev(values), rel_tol=1e-9, abs_tol=1e-6)


@pytest.mark.parametrize("n", [1000, 100_000, 1_000_000])
def test_approx_distinct_within_two_percent(n):
    agg = make("approx_distinct")
    rnd = random.Random(n)
    half = n // 2  # ints and strings, so both hash paths count
    s = agg.fold(agg.new(), [rnd.getrandbits(62) for _ in range(half)])
    s = agg.fold(s, [f"user-{rnd.getrandbits(62)}" for _ in range(n - half)])
    assert abs(agg.result(s) / n - 1) <= 0.02
    assert len(agg.dump(s)) <= 12 * 1024  # base64 of a few KiB
    # a merged sketch (sessions an event bridges) keeps the bound
    a = agg.fold(agg.new(), list(range(n // 3)))
    b = agg.fold(agg.new(), list(range(n // 4, n)))
    assert abs(agg.result(agg.merge(a, b)) / n - 1) <= 0.02


def rank_error(sorted_vals: list[float], x: float, q: float) -> float:
    n = len(sorted_vals)
    lo, hi = bisect_left(sorted_vals, x) / n, bisect_right(sorted_vals, x) / n
    return 0.0 if lo <= q <= hi else min(abs(lo - q), abs(hi - q))


def distributions(n: int, rnd: random.Random) -> dict[str, list[float]]:
    logn = [rnd.lognormvariate(0, 2) for _ in range(n)]
    return {"lognormal": logn, "uniform ints": [rnd.randrange(1000) for _ in range(n)],
            "sorted": sorted(logn), "reversed": sorted(logn, reverse=True),
            "bimodal": [rnd.gauss(0, 1) if rnd.random() < 0.5 else rnd.gauss(1e6, 1) for _ in range(n)]}


@pytest.mark.parametrize("n", [1000, 100_000, 1_000_000])
def test_approx_quantiles_rank_error_within_one_percent(n):
    rnd = random.Random(n)
    dists = distributions(n, rnd) if n < 1_000_000 else {"lognormal": [rnd.lognormvariate(0, 2) for _ in range(n)]}
    for name, vals in dists.items():
        ordered = sorted(vals)
        for func in ("approx_p50", "approx_p90", "approx_p99"):
            agg = make(func)
            s = agg.fold(agg.new(), vals)
            assert rank_error(ordered, agg.result(s), agg.q) <= 0.01, (name, func)
            assert len(agg.dump(s)) <= 8 * 1024, name
            # merged from pieces (sessions merging), in another grouping
            pieces = [agg.fold(agg.new(), vals[i:i + n // 7 + 1]) for i in range(0, n, n // 7 + 1)]
            m = pieces[0]
            for p in pieces[1:]:
                m = agg.merge(m, p)
            assert rank_error(ordered, agg.result(m), agg.q) <= 0.01, (name, func, "merged")


SAME_STATE = """
import json, random, sys
from streamctl.processing.aggregations import agg_class
rnd = random.Random(11)
vals = [rnd.lognormvariate(0, 1) for _ in range(50_000)] + [rnd.randrange(5000) for _ in range(50_000)]
out = {}
for func in ("approx_distinct", "approx_p50", "approx_p99", "stddev"):
    agg = agg_class(func)(func)
    a, b = agg.fold(agg.new(), vals[:70_000]), agg.fold(agg.new(), vals[70_000:])
    out[func] = [agg.dump(agg.merge(a, b)), agg.result(a)]
print(json.dumps(out))
"""


def test_sketches_are_the_same_in_every_process():
    """No random seed: two processes (as two runs, or the two engines) build the same states."""
    runs = [subprocess.run([sys.executable, "-c", SAME_STATE], capture_output=True, text=True, check=True).stdout
            for _ in range(2)]
    assert runs[0] == runs[1]
    assert set(json.loads(runs[0])) == {"approx_distinct", "approx_p50", "approx_p99", "stddev"}


MEMORY = """
import random, resource, sys
from streamctl.processing.aggregations import agg_class
kind, n = sys.argv[1], int(sys.argv[2])
rnd = random.Random(5)
vals = {"ints": lambda: [rnd.getrandbits(40) for _ in range(n)],
        "floats": lambda: [rnd.random() * 1e6 for _ in range(n)],
        "strings": lambda: [f"user-{rnd.getrandbits(40)}" for _ in range(n)],
        "mixed": lambda: [[rnd.getrandbits(20)] if i % 2 else rnd.getrandbits(40) + 0.5 for i in range(n)]}[kind]()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
agg = agg_class(sys.argv[3])(sys.argv[3])
s = agg.new()
for i in range(0, n, 1000):
    s = agg.fold(s, vals[i:i + 1000])
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024 / n)
"""


@pytest.mark.parametrize("kind", ["ints", "floats", "strings", "mixed"])
def test_exact_distinct_costs_a_set_of_the_values(kind):
    """Tens of bytes a value whatever its JSON type (the values themselves are held by the caller)."""
    per_value = float(subprocess.run([sys.executable, "-c", MEMORY, kind, "200000", "distinct"], capture_output=True,
                                     text=True, check=True).stdout)
    assert per_value < 150, per_value


def test_approx_distinct_state_does_not_grow():
    per_value = float(subprocess.run([sys.executable, "-c", MEMORY, "ints", "200000", "approx_distinct"],
                                     capture_output=True, text=True, check=True).stdout)
    assert per_value < 1, per_value


@pytest.mark.parametrize("func,pick", [("min", min), ("max", max)])
@SETTINGS
@given(values=st.lists(json_value, max_size=40))
def test_min_and_max_keep_the_first_of_equal_numbers(func, pick, values):
    """min and max give the extreme number of its own type, the first of equal ones (0 before 0.0)."""
    agg = make(func)
    col = inputs(func, values)
    numbers = [v for v in col if v is not None]
    got = agg.result(by_add(agg, col))
    want = pick(numbers) if numbers else None
    assert got == want and type(got) is type(want)
