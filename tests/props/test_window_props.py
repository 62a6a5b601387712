"""Property tests: every window type equals a brute-force reference when lateness is large enough,
and with lateness 0 the late (dropped) counts equal the reference's reading of the spec's rules."""

from __future__ import annotations

import math
from collections import defaultdict
from itertools import accumulate

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from streamctl.processing.windows.config import WindowConfig
from streamctl.processing.windows.driver import WindowRun

T0 = 1_763_719_200_000
AGGS = ["count", "sum:v", "min:v", "max:v", "p50:v", "p90:v", "distinct:v", "first:v", "last:v"]


def run_local(events, kind, size, hop=0, lateness=0):
    """events: (t, key, v) in arrival order -> (sorted rows as tuples, late count, rows in output order)."""
    cfg = WindowConfig(kind=kind, size=size, hop=hop, by=["k"], aggs=AGGS, lateness=lateness)
    run = WindowRun(cfg, is_log=False)
    rows: list = []
    recs = ({"offset": i, "partition": 0, "key": None, "value": {"ts": t, "k": k, "v": v}}
            for i, (t, k, v) in enumerate(events))
    run.feed(recs, rows.extend)
    run.finish(rows.extend)
    out = [(s, e, orjson.loads(key), tuple(vals.values())) for s, e, key, vals, _rev in rows]
    return sorted(out, key=repr), run.stats.late, out


def percentile(vals, q):
    s = sorted(vals)
    pos = q * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return float(s[lo]) + (pos - lo) * (float(s[hi]) - float(s[lo]))


def aggregate(members):
    """members: [(seq, t, v)] -> the AGGS tuple, by definition."""
    vs = [v for _, _, v in members]
    by_seq = sorted(members)
    return (len(vs), sum(vs), min(vs), max(vs), percentile(vs, 0.5), percentile(vs, 0.9), len(set(vs)),
            by_seq[0][2], by_seq[-1][2])


def reference(events, kind, size, hop=0):
    groups = defaultdict(list)
    for seq, (t, k, v) in enumerate(events):
        groups[k].append((seq, t, v))
    rows = []
    for k, members in groups.items():
        if kind in ("tumbling", "hopping"):
            step = size if kind == "tumbling" else hop
            wins = defaultdict(list)
            for m in members:
                t = m[1]
                s = t - t % step
                while s > t - size:
                    wins[s].append(m)
                    s -= step
            rows += [(s, s + size, k, aggregate(ms)) for s, ms in wins.items()]
        elif kind == "sliding":
            for _, t, _ in members:
                rows.append((t - size, t, k, aggregate([m for m in members if t - size <= m[1] <= t])))
        else:
            ordered = sorted(members, key=lambda m: m[1])
            cur = [ordered[0]]
            for m in ordered[1:]:
                if m[1] - cur[-1][1] <= size:
                    cur.append(m)
                else:
                    rows.append((cur[0][1], cur[-1][1] + size, k, aggregate(cur)))
                    cur = [m]
            rows.append((cur[0][1], cur[-1][1] + size, k, aggregate(cur)))
    return sorted(rows, key=repr)


def session_components(times, gap):
    """A group's event times -> its sessions [(first, last)], by definition (at most GAP apart)."""
    out = []
    for t in sorted(times):
        if out and t - out[-1][1] <= gap:
            out[-1][1] = t
        else:
            out.append([t, t])
    return out


def reference_late(events, kind, size, hop=0):
    """Late events by the spec's rules, watermark = max time before each event (lateness 0)."""
    if kind == "session":
        return len(events) - len(session_kept(events, size))
    late = 0
    wm = None
    for t, _k, _v in events:
        if wm is not None:
            if kind == "tumbling":
                late += (t - t % size) + size <= wm
            elif kind == "hopping":
                s = t - t % hop
                while s - hop > t - size:
                    s -= hop
                late += s + size <= wm  # the oldest window of t closes first
            elif kind == "sliding":
                late += t < wm
        wm = t if wm is None else max(wm, t)
    return late


def session_kept(events, size, lateness=0):
    """The events that are not late by the spec's session rules (watermark = max time before each
    event - lateness): late when t + GAP <= watermark, or when t lies within GAP of a closed
    session of its group (one whose end, last + GAP, the watermark has reached: end <= watermark);
    the sessions are those of the group's events that were not late."""
    wm = None
    kept: dict = defaultdict(list)
    out = []
    for t, k, v in events:
        closed = [c for c in session_components(kept[k], size) if wm is not None and c[1] + size <= wm]
        if not ((wm is not None and t + size <= wm) or any(a - size <= t <= b + size for a, b in closed)):
            kept[k].append(t)
            out.append((t, k, v))
        wm = t - lateness if wm is None else max(wm, t - lateness)
    return out


def max_disorder(events):
    d, mx = 0, None
    for t, _, _ in events:
        if mx is not None:
            d = max(d, mx - t)
        mx = t if mx is None else max(mx, t)
    return d


event = st.tuples(st.integers(-3000, 3000).map(lambda x: T0 + x * 7), st.sampled_from(["a", "b", "c"]),
                  st.integers(-5, 20))
events = st.lists(event, min_size=1, max_size=40)
window_kind = st.sampled_from([("tumbling", 1000, 0), ("tumbling", 60, 0), ("hopping", 1000, 250),
                               ("hopping", 900, 300), ("hopping", 500, 500), ("sliding", 400, 0),
                               ("sliding", 7, 0), ("session", 300, 0), ("session", 7, 0)])
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x[:3] == y[:3]
        for u, v in zip(x[3], y[3], strict=True):
            assert u == v or (isinstance(u, float) and math.isclose(u, v, rel_tol=1e-12)), (x, y)


@SETTINGS
@given(evs=events, kind=window_kind, data=st.data())
def test_equals_reference_with_enough_lateness(evs, kind, data):
    name, size, hop = kind
    order = data.draw(st.permutations(evs))
    # one more than the largest disorder: no event can be late (for sessions an event
    # exactly GAP after a closed session would otherwise start a new one: Kafka's rule)
    lateness = max_disorder(order) + 1 + data.draw(st.integers(0, 2000))
    got, late, _ = run_local(order, name, size, hop, lateness)
    assert late == 0
    same(got, reference(order, name, size, hop))


@SETTINGS
@given(evs=events, kind=window_kind)
def test_lateness_zero_drop_counts_equal_reference(evs, kind):
    name, size, hop = kind
    _, late, _ = run_local(evs, name, size, hop, 0)
    assert late == reference_late(evs, name, size, hop)


@SETTINGS
@given(evs=events, kind=window_kind)
def test_in_order_input_needs_no_lateness(evs, kind):
    name, size, hop = kind
    ordered = sorted(evs, key=lambda e: e[0])
    got, late, out = run_local(ordered, name, size, hop, 0)
    assert late == 0
    same(got, reference(ordered, name, size, hop))
    if name == "session":
        return  # sessions closed by one watermark move are ordered by start, whatever their ends
    # window-close order: a row never closes before one that precedes it
    closes = [(e + (1 if name == "sliding" else 0)) for _s, e, _k, _v in out]
    assert closes == sorted(closes)


dense_event = st.tuples(st.integers(0, 400).map(lambda x: T0 + x * 7), st.sampled_from(["a", "b"]),
                        st.integers(-5, 20))


@SETTINGS
@given(evs=st.lists(dense_event, min_size=1, max_size=40), gap=st.sampled_from([7, 60, 300]))
def test_session_late_counts_equal_reference_with_closed_sessions(evs, gap):
    """Dense events, so that an event often lands within GAP of a session that already closed."""
    _, late, _ = run_local(evs, "session", gap, 0, 0)
    assert late == reference_late(evs, "session", gap)


def run_batches(events, size, lateness, sizes):
    """Sessions over events cut into batches of `sizes` (the batch kernel) -> (sorted rows, late count)."""
    cfg = WindowConfig(kind="session", size=size, by=["k"], aggs=AGGS, lateness=lateness)
    run = WindowRun(cfg, is_log=False)
    rows: list = []
    recs = [{"offset": i, "partition": 0, "key": None, "value": {"ts": t, "k": k, "v": v}}
            for i, (t, k, v) in enumerate(events)]
    parts, i = [], 0
    for n in [*sizes, len(recs)]:
        if i < len(recs):
            parts.append(recs[i:i + n])
            i += n
    run.feed_batches(parts, rows.extend)
    run.finish(rows.extend)
    out = [(s, e, orjson.loads(key), tuple(vals.values())) for s, e, key, vals, _rev in rows]
    return sorted(out, key=repr), run.stats.late


def at(*events):
    """(seconds * 7 ms after T0, key, value) -> events on the dense grid."""
    return [(T0 + x * 7, k, v) for x, k, v in events]


@SETTINGS
@given(evs=st.lists(dense_event, min_size=1, max_size=40), gap=st.sampled_from([7, 14, 60, 300]),
       lateness=st.sampled_from([0, 7, 20]), sizes=st.lists(st.integers(1, 9), max_size=8))
# ties at exactly a session's end (times in steps of 7 ms, GAP one step): b@1 moves the watermark to
# the end of a's [0, 1) and closes it, so a@1 after it is late (within GAP of a closed session); a@1
# before b@1 still joins it; with a lateness of one step, b@2 closes it
@example(evs=at((0, "a", 1), (1, "b", 2), (1, "a", 3)), gap=7, lateness=0, sizes=[])
@example(evs=at((0, "a", 1), (1, "b", 2), (1, "a", 3)), gap=7, lateness=0, sizes=[2])
@example(evs=at((0, "a", 1), (1, "a", 2), (1, "b", 3), (2, "a", 4)), gap=7, lateness=0, sizes=[])
@example(evs=at((0, "a", 1), (2, "b", 2), (1, "a", 3)), gap=7, lateness=7, sizes=[])
@example(evs=at((0, "a", 1), (1, "b", 2), (1, "a", 3)), gap=7, lateness=7, sizes=[1])
def test_session_rows_at_their_end_equal_the_spec(evs, gap, lateness, sizes):
    """The spec's rule on dense events, where ties at exactly a session's end (end = watermark)
    are common: the late events, and the rows, the sessions of the events that are not late; one
    event at a time and in batches (the batch kernel) alike."""
    kept = session_kept(evs, gap, lateness)
    ref = reference(kept, "session", gap) if kept else []
    got, late, _ = run_local(evs, "session", gap, 0, lateness)
    assert late == len(evs) - len(kept)
    same(got, ref)
    got, late = run_batches(evs, gap, lateness, sizes)
    assert late == len(evs) - len(kept)
    same(got, ref)


@SETTINGS
@given(evs=events, kind=window_kind)
def test_drop_mode_counts_add_up(evs, kind):
    """Every event is folded or counted late: into one row or late (tumbling, session); into each of
    its windows still open when it arrives, late when one had closed (hopping); its own row at its
    time unless late (sliding)."""
    name, size, hop = kind
    got, late, _ = run_local(evs, name, size, hop, 0)
    wms = [None, *accumulate((t for t, _, _ in evs), max)][:-1]  # the watermark before each event
    counts = sum(r[3][0] for r in got)
    if name in ("tumbling", "session"):
        assert counts + late == len(evs)
    elif name == "hopping":
        ends = [[s + size for s in range(t - t % hop, t - size, -hop)] for t, _, _ in evs]
        still = [[e for e in es if wm is None or e > wm] for es, wm in zip(ends, wms, strict=True)]
        assert counts == sum(map(len, still))
        assert late == sum(len(a) < len(b) for a, b in zip(still, ends, strict=True))
    else:
        kept = [(t, k) for (t, k, _), wm in zip(evs, wms, strict=True) if wm is None or t >= wm]
        assert late == len(evs) - len(kept)
        assert {(r[1], r[2]) for r in got} == set(kept)


@SETTINGS
@given(evs=events, kind=window_kind, lateness=st.integers(0, 300))
def test_late_correct_last_revision_equals_reference(evs, kind, lateness):
    """With --late correct, the latest row per (window, key) is the whole truth; a delete row
    withdraws a session's window whose bounds a late event changed."""
    name, size, hop = kind
    cfg = WindowConfig(kind=name, size=size, hop=hop, by=["k"], aggs=AGGS, lateness=lateness, late="correct")
    run = WindowRun(cfg, is_log=False)
    rows: list = []
    recs = ({"offset": i, "partition": 0, "key": None, "value": {"ts": t, "k": k, "v": v}}
            for i, (t, k, v) in enumerate(evs))
    run.feed(recs, rows.extend)
    run.finish(rows.extend)
    latest = {}
    for s, e, key, vals, _rev in rows:
        if vals is None:
            del latest[(s, e, orjson.loads(key))]
        else:
            latest[(s, e, orjson.loads(key))] = tuple(vals.values())
    got = sorted(((s, e, k, v) for (s, e, k), v in latest.items()), key=repr)
    ref = reference(evs, name, size, hop)
    if name == "sliding":  # events of a group at one time share a row
        ref = sorted(set(ref), key=repr)
    same(got, ref)


@SETTINGS
@given(evs=events, kind=window_kind, data=st.data())
def test_checkpoint_and_restore_anywhere_changes_nothing(evs, kind, data):
    """Follow mode's checkpoint: dump the state at any point, load it into a fresh run, carry on."""
    name, size, hop = kind
    late = data.draw(st.sampled_from(["drop", "correct"]))
    emit = data.draw(st.sampled_from(["final", "update"]))
    lateness = data.draw(st.integers(0, 400))
    cut = data.draw(st.integers(0, len(evs)))
    cfg = WindowConfig(kind=name, size=size, hop=hop, by=["k"], aggs=AGGS, lateness=lateness, late=late, emit=emit)

    def recs(part):
        return ({"offset": i, "partition": 0, "key": None, "value": {"ts": t, "k": k, "v": v}} for i, (t, k, v) in part)

    whole = WindowRun(cfg, is_log=False)
    want: list = []
    whole.feed(recs(enumerate(evs)), want.extend)
    whole.finish(want.extend)

    first = WindowRun(cfg, is_log=False)
    got: list = []
    first.feed(recs(list(enumerate(evs))[:cut]), got.extend)
    saved = orjson.loads(orjson.dumps(first.dump()))
    second = WindowRun(cfg, is_log=False)
    second.load(saved)
    second.feed(recs(list(enumerate(evs))[cut:]), got.extend)
    second.finish(got.extend)
    assert got == want
    assert second.stats.late == whole.stats.late


json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-10**15, 10**15), st.text(max_size=4),
                        st.floats(allow_nan=True, allow_infinity=True),
                        st.sampled_from(["2026-11-21T10:00:00Z", "2026-11-21T10:00:00+02:00", "1763719200"]))
json_value = st.recursive(json_scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                               st.dictionaries(st.sampled_from("abk"), inner,
                                                                               max_size=3)), max_leaves=6)


@SETTINGS
@given(value=st.dictionaries(st.sampled_from(["ts", "k", "v", "a", "b"]), json_value, max_size=5),
       key=st.one_of(st.none(), st.text(max_size=3)), is_log=st.booleans(),
       by=st.sampled_from([[], ["k"], ["a.b"], ["k", "value.v"], ["key"]]),
       time_field=st.sampled_from(["ts", "v", "a.k"]))
def test_column_read_agrees_with_the_record_read(value, key, is_log, by, time_field):
    """EventColumns (a batch at a time) reads what make_prepare reads from each record, and
    Plan.fold folds what Plan.add folds."""
    from streamctl.processing.aggregations import Plan, parse_agg
    from streamctl.processing.windows import rows
    from streamctl.processing.windows.events import EventColumns, make_prepare
    from streamctl.storage.fieldpaths import record_path

    rec = {"offset": 3, "partition": 0, "key": key, "value": value}
    if is_log:
        rec["ts"] = T0
    specs = ["count", "count:v", "sum:v", "avg:a.b", "min:v", "max:k", "p50:v", "distinct:k", "first:a",
             "last:value.v"]
    cfg = WindowConfig(kind="tumbling", size=1000, by=by, time_field=time_field, aggs=specs)
    column_plan = Plan([parse_agg(s, record_path) for s in specs])
    record_plan = Plan([parse_agg(s, record_path) for s in specs])
    ts, ks, cols, counts = EventColumns(cfg, is_log, column_plan)([rec])
    t, k, vals = make_prepare(cfg, is_log, record_plan)(rec)
    assert ts == [t]
    if t is None:
        assert ks is None
        return
    assert ks == [k]
    (got_vals,) = rows(cols)
    assert repr(got_vals) == repr(vals)
    assert {column_plan.specs[i].name: n for i, n in counts} == record_plan.non_numeric
    a, b = column_plan.new(), record_plan.new()
    for i, (agg, col) in enumerate(zip(column_plan.aggs, cols, strict=True)):
        agg.fold_groups(i, [(a, [0])], col, 1)
    record_plan.add(b, vals, 1)
    assert repr(a) == repr(b)
    assert repr(column_plan.result(a)) == repr(record_plan.result(b))


@SETTINGS
@given(rows=st.lists(st.tuples(st.integers(0, 50), st.one_of(st.none(), st.integers(-5, 5), st.floats(-1e6, 1e6),
                                                             st.text(max_size=2))), max_size=25))
def test_column_results_equal_folded_results(rows):
    """Sliding rows are computed column-wise; that must equal folding the events one by one."""
    from streamctl.processing.aggregations import Plan, parse_agg
    from streamctl.storage.fieldpaths import record_path

    plan = Plan([parse_agg(s, record_path) for s in AGGS + ["avg:v", "count:v", "p99:v"]])
    events = []
    for seq, (_t, v) in enumerate(rows):
        vals = plan.extract({"value": {"v": v}})
        events.append((0, (seq * 7919) % 101, vals))  # input order differs from time order
    st_ = plan.new()
    for _t, seq, vals in events:
        plan.add(st_, vals, seq)
    assert repr(plan.result_of_events(events)) == repr(plan.result(st_))


@SETTINGS
@given(values=st.lists(st.one_of(st.none(), st.integers(-5, 5), st.floats(-1e6, 1e6), st.text(max_size=2)),
                       max_size=30),
       cuts=st.lists(st.integers(0, 30), max_size=4), picks=st.lists(st.booleans(), min_size=30, max_size=30))
def test_fold_equals_add_one_by_one(values, cuts, picks):
    """Each class's fold_groups over a batch's positions (in pieces, as batches come), into Plan's
    state, equals Plan.add per event."""
    from streamctl.processing.aggregations import Plan, parse_agg
    from streamctl.processing.windows import rows
    from streamctl.storage.fieldpaths import record_path

    plan = Plan([parse_agg(s, record_path) for s in AGGS + ["avg:v", "count:v", "p99:v"]])
    cols = [None if s.path is None else [v if not numeric or type(v) in (int, float) else None for v in values]
            for s, numeric in zip(plan.specs, plan.numeric, strict=True)]
    one, folded = plan.new(), plan.new()
    idx = [i for i in range(len(values)) if picks[i]]
    for i, vals in enumerate(rows(cols)):
        if picks[i]:
            plan.add(one, vals, 100 + i)
    for lo, hi in zip([0, *sorted(cuts)], [*sorted(cuts), len(values)], strict=True):
        part = [i for i in idx if lo <= i < hi]
        if part:
            for j, (agg, col) in enumerate(zip(plan.aggs, cols, strict=True)):
                agg.fold_groups(j, [(folded, part)], col, 100)
    assert repr(plan.result(folded)) == repr(plan.result(one))
