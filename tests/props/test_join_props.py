"""Property tests: each join kind against a brute-force reference written from the rules alone."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streamctl.processing.joins import JoinStats, interval_kernel, plain_inputs
from streamctl.processing.joins import driver as joining

L, R = 0, 1
MIN_TIME = -(1 << 62)

keys = st.sampled_from(["a", "b", "c", None])
times = st.integers(0, 40)
events = st.lists(st.tuples(st.sampled_from([L, R]), keys, times), max_size=40)


def items_of(evs: list[tuple[int, Any, Any]], values: list[Any] | None = None) -> list[tuple[int, dict]]:
    out = []
    for i, (side, k, t) in enumerate(evs):
        v = values[i] if values is not None else f"{'LR'[side]}{i}"
        r = {"offset": i, "partition": 0, "key": k, "value": v}
        if t is not None:
            r["ts"] = t
        out.append((side, r))
    return out


def run_join(kind: str, items: list[tuple[int, dict]], **kw: Any) -> list[tuple]:
    rows: list[tuple] = []
    spec = joining.make_spec("L", "R", table=kind == "table", tables=kind == "tables", **kw)
    joining.run(spec, lambda k, lv, rv: rows.append((k, lv, rv)),
                lambda op, k, lv, rv: rows.append((op, k, lv, rv)), items=iter(items))
    return rows


def watermarks(ts: list[int | None], lateness: int = 0) -> list[int | None]:
    """W(p): the largest time up to and including p, minus the lateness (None before any time)."""
    out, w = [], None
    for t in ts:
        if t is not None and (w is None or t > w):
            w = t
        out.append(None if w is None else w - lateness)
    return out


def ref_stream(evs: list[tuple[int, Any, int]], within: int, how: str, lateness: int = 0) -> tuple[list[tuple], list[int]]:
    """Late: tb + within < W(b), or an event a before b of the other side, not late, with the same
    non-null key and |ta - tb| <= within has left (W(p) > ta + within at some p from a to b - 1); a
    late event takes no part at all. Pairs (a before b, neither late): same non-null key,
    |ta - tb| <= within, ta + within >= W(b), emitted at b in a's order; an unmatched event at
    max(its position, first p with W(p) > t + within) (or the end), after that position's pairs, by
    (time, position). Returns (rows, late count per side)."""
    n = len(evs)
    W = watermarks([t for _, _, t in evs], lateness)
    late: list[bool] = []
    for b, (sb, kb, tb) in enumerate(evs):
        late.append(tb + within < W[b] or (kb is not None and any(
            not late[a] and sa != sb and ka == kb and abs(ta - tb) <= within
            and any(W[p] > ta + within for p in range(a, b))
            for a, (sa, ka, ta) in enumerate(evs[:b]))))
    keep = (how in ("left", "outer"), how in ("right", "outer"))
    out: list[tuple[tuple, tuple]] = []
    matched = [False] * n
    for b in range(n):
        sb, kb, tb = evs[b]
        if late[b]:
            continue
        for a in range(b):
            sa, ka, ta = evs[a]
            if late[a]:
                continue
            if sa != sb and ka is not None and ka == kb and abs(ta - tb) <= within and ta + within >= W[b]:
                matched[a] = matched[b] = True
                lv, rv = (f"L{a}", f"R{b}") if sa == L else (f"L{b}", f"R{a}")
                out.append(((b, 0, a, 0), (kb, lv, rv)))
    for x in range(n):
        s, k, t = evs[x]
        if matched[x] or late[x] or not keep[s]:
            continue
        evict = next((p for p in range(n) if W[p] > t + within), n)
        v = f"{'LR'[s]}{x}"
        out.append(((max(evict, x), 1, t, x), (k, v, None) if s == L else (k, None, v)))
    late_counts = [sum(1 for x in range(n) if late[x] and evs[x][0] == side) for side in (L, R)]
    return [row for _, row in sorted(out, key=lambda r: r[0])], late_counts


@settings(max_examples=300, deadline=None)
@given(events, st.integers(0, 10), st.sampled_from(["inner", "left", "right", "outer"]), st.integers(0, 12))
def test_stream_stream_matches_reference(evs, within, how, lateness):
    rows: list[tuple] = []
    spec = joining.make_spec("L", "R", within=f"{within}ms", how=how, lateness=f"{lateness}ms")
    stats = joining.run(spec, lambda k, lv, rv: rows.append((k, lv, rv)), items=iter(items_of(evs)))
    assert (rows, stats.late) == ref_stream(evs, within, how, lateness)


@settings(max_examples=300, deadline=None)
@given(events, st.integers(0, 10), st.sampled_from(["inner", "left", "right", "outer"]), st.integers(0, 12))
def test_stream_stream_loses_no_pair_of_events_not_late(evs, within, how, lateness):
    """Every pair of events that are not late, with equal key and times at most `within` apart, is
    a row, and no event of a pair is written unmatched: what is not joined is counted late."""
    rows: list[tuple] = []
    late: list[tuple[int, Any]] = []
    spec = joining.make_spec("L", "R", within=f"{within}ms", how=how, lateness=f"{lateness}ms")
    stats = joining.run(spec, lambda k, lv, rv: rows.append((k, lv, rv)), items=iter(items_of(evs)),
                        late=lambda side, line: late.append((side, orjson.loads(line)["value"])))
    late_names = {v for _, v in late}
    assert len(late_names) == sum(stats.late)
    on_time = [(i, s, k, t) for i, (s, k, t) in enumerate(evs) if f"{'LR'[s]}{i}" not in late_names]
    want = {(k, f"L{i}", f"R{j}") for i, s, k, t in on_time if s == L and k is not None
            for j, s2, k2, t2 in on_time if s2 == R and k2 == k and abs(t - t2) <= within}
    pairs = {r for r in rows if r[1] is not None and r[2] is not None}
    assert pairs == want and len(pairs) == len([r for r in rows if r[1] is not None and r[2] is not None])
    paired = {v for r in pairs for v in r[1:]}
    assert not any(v in paired for r in rows if r[1] is None or r[2] is None for v in r[1:] if v is not None)


def join_batches(batches: Iterable[tuple[list[bool], list[Any], list[Any], list[Any]]], within: int, how: str, write: Callable[[bytes], None],
                 counts: list[int], no_time: list[int], lateness: int = 0, late_counts: list[int] | None = None,
                 late: Callable[[int, bytes], None] | None = None, chunk: int = 16384) -> int:
    """The plain-file batch kernel (interval_kernel.py's IntervalJoin) fed as the join driver feeds
    it: StreamStreamJoin's rows (the bytes of orjson.dumps({"key", "left", "right"}) + newline per row, in its order) for (sides, times, keys, payloads) batches in input order, matched `chunk`
    records at a time. Counts go to `counts`, `no_time` and `late_counts` per side; returns the
    largest number of events held."""
    stats = JoinStats()
    j = interval_kernel.IntervalJoin(within, how, write, lateness, late, stats)
    buf: list[list[Any]] = [[], [], [], []]

    def flush() -> None:
        sides, times, keys, payloads = buf
        dumps = orjson.dumps
        code, nks = plain_inputs.key_codes(keys)
        key_a = plain_inputs.objects(keys)
        j.chunk(np.array(sides, dtype=bool), np.array([0 if t is None else t for t in times], dtype=np.int64),
                np.array([t is not None for t in times], dtype=bool), code, key_a,
                plain_inputs.objects([p if p.__class__ is bytes else dumps(p) for p in payloads]),
                key_a if nks is None else plain_inputs.objects(nks))

    for batch in batches:
        for col, part in zip(buf, batch, strict=True):
            col += part
        if len(buf[0]) >= chunk:
            flush()
            buf = [[], [], [], []]
    flush()
    j.finish()
    for i in (0, 1):
        counts[i] += stats.records[i]
        no_time[i] += stats.no_time[i]
        if late_counts is not None:
            late_counts[i] += stats.late[i]
    return stats.max_state


@settings(max_examples=200, deadline=None)
@given(events, st.integers(0, 10), st.sampled_from(["inner", "left", "right", "outer"]), st.integers(0, 12),
       st.integers(1, 7))
# late because a partner left: one before the chunk, in it, and one whose partner is late itself
@example([(L, "a", 0), (R, "z", 15), (R, "a", 10)], 10, "outer", 0, 1)
@example([(L, "a", 0), (R, "z", 15), (R, "a", 10)], 10, "outer", 0, 3)
@example([(R, "z", 15), (L, "a", 6), (R, "z", 17), (R, "a", 12)], 10, "outer", 0, 4)
@example([(R, "a", 0), (R, "z", 15), (L, "a", 6), (R, "z", 17), (R, "a", 12)], 10, "outer", 0, 5)
def test_stream_stream_plain_batches_match_reference(tmp_path_factory, evs, within, how, lateness, block):
    """The plain-file batch path (interval_kernel.py's IntervalJoin, chunks of `block` records) gives
    the reference rows and late counts, for inputs whose own order the merge keeps."""
    sides = [s for s, _, _ in evs]
    times = [t for _, _, t in evs]
    keys = [k for _, k, _ in evs]
    payloads = [f"{'LR'[s]}{i}" for i, s in enumerate(sides)]
    batches = [([bool(x) for x in sides[i:i + block]], times[i:i + block], keys[i:i + block], payloads[i:i + block])
               for i in range(0, len(evs), block)]
    out: list[bytes] = []
    late_lines: list[tuple[int, Any]] = []
    late = [0, 0]
    join_batches(batches, within, how, out.append, [0, 0], [0, 0], lateness, late,
                 lambda side, v: late_lines.append((side, v)), chunk=block)

    rows = [(r["key"], r["left"], r["right"]) for chunk in out for r in map(orjson.loads, chunk.splitlines())]
    ref_rows, ref_late = ref_stream(evs, within, how, lateness)
    assert late == ref_late and len(late_lines) == sum(ref_late)
    assert rows == ref_rows


def ref_as_of(evs: list[tuple[int, Any, int | None, Any]], retention: int | None, inner: bool,
              lateness: int = 0) -> tuple[list[tuple], int]:
    """LEFT event e resolves at r = max(e, first p with W(p) > t_e) (or the end) and joins the version
    with max (time, position) among RIGHT records up to r with the same key and time <= t_e
    (no time: the beginning, for a tombstone the largest time before it); with retention, nothing if a version up to r has a time in
    (t_e, W(r) - retention]. Rows by (r, t_e, e). W is lateness-shifted; a RIGHT record with a
    time behind W and a key is a late change (returned: the count)."""
    n = len(evs)
    W = watermarks([t if not (s == L and t is None) else None for s, _, t, _ in evs], lateness)

    def version_time(p: int) -> int:
        """A RIGHT record's time; without one, a version's is the beginning and a tombstone's the
        largest time before it."""
        t, value = evs[p][2], evs[p][3]
        if t is not None:
            return t
        seen = [tv for _s, _k, tv, _v in evs[:p] if tv is not None]
        return max(seen) if value is None and seen else MIN_TIME
    out = []
    for e, (s, k, t, v) in enumerate(evs):
        if s != L or t is None:
            continue
        r = next((p for p in range(e, n) if W[p] is not None and W[p] > t), n)
        w_r = W[r] if r < n else W[-1]
        cands = [(version_time(p), p, vv) for p, (sv, kv, _tv, vv) in enumerate(evs[:r + 1])
                 if sv == R and k is not None and kv == k]
        best = max((c for c in cands if c[0] <= t), default=None)
        row = best[2] if best else None
        if retention is not None and any(t < c[0] <= w_r - retention for c in cands):
            row = None
        if row is not None or not inner:
            out.append(((r, t, e), (k, v, row)))
    late = sum(1 for p, (s, k, t, _v) in enumerate(evs)
               if s == R and k is not None and t is not None and W[p] is not None and t < W[p])
    return [row for _, row in sorted(out, key=lambda x: x[0])], late


table_events = st.lists(st.tuples(st.sampled_from([L, R]), keys, st.one_of(times, st.none()),
                                  st.sampled_from([None, 1, 2, 3])), max_size=40)


@settings(max_examples=300, deadline=None)
@given(table_events, st.one_of(st.none(), st.integers(0, 15)), st.sampled_from(["inner", "left"]),
       st.integers(0, 12))
def test_stream_table_as_of_matches_reference(evs, retention, how, lateness):
    values = [v if s == R else f"L{i}" for i, (s, _, _, v) in enumerate(evs)]
    items = items_of([(s, k, t) for s, k, t, _ in evs], values)
    kw: dict[str, Any] = {"as_of": "event-time", "how": how, "lateness": f"{lateness}ms"}
    if retention is not None:
        kw["table_retention"] = f"{retention}ms"
    rows: list[tuple] = []
    stats = joining.run(joining.make_spec("L", "R", table=True, **kw), lambda k, lv, rv: rows.append((k, lv, rv)),
                        items=iter(items))
    ref_evs = [(s, k, t, values[i]) for i, (s, k, t, _) in enumerate(evs)]
    ref_rows, ref_late = ref_as_of(ref_evs, retention, how == "inner", lateness)
    assert rows == ref_rows and stats.late == [0, ref_late]


@settings(max_examples=200, deadline=None)
@given(table_events, st.sampled_from(["inner", "left"]))
def test_stream_table_position_matches_reference(evs, how):
    values = [v if s == R else f"L{i}" for i, (s, _, _, v) in enumerate(evs)]
    items = items_of([(s, k, t) for s, k, t, _ in evs], values)
    got = run_join("table", items, how=how)
    table: dict = {}
    ref = []
    for i, (s, k, _t, _v) in enumerate(evs):
        if s == R:
            if k is None:
                continue
            if values[i] is None:
                table.pop(k, None)
            else:
                table[k] = values[i]
        else:
            row = table.get(k) if k is not None else None
            if row is not None or how == "left":
                ref.append((k, values[i], row))
    assert got == ref


changes = st.lists(st.tuples(st.sampled_from([L, R]), st.sampled_from(["a", "b", "c", "d"]),
                             st.one_of(st.none(), st.integers(0, 5))), max_size=60)


@settings(max_examples=300, deadline=None)
@given(changes)
def test_table_table_fold_equals_batch_join(chs):
    items = items_of([(s, k, None) for s, k, _ in chs], [v for _, _, v in chs])
    rows = run_join("tables", items)
    folded: dict = {}
    for op, k, lv, rv in rows:
        assert op in ("upsert", "delete")
        if op == "upsert":
            folded[k] = (lv, rv)
        else:
            assert k in folded and folded[k] == (lv, rv)  # a delete carries the row it removes
            del folded[k]
    tables: tuple[dict, dict] = ({}, {})
    for s, k, v in chs:
        if v is None:
            tables[s].pop(k, None)
        else:
            tables[s][k] = v
    batch = {k: (tables[0][k], tables[1][k]) for k in tables[0] if k in tables[1]}
    assert folded == batch


def _heap_reference(specs, times):
    """The two-input merge as heapq.merge over (time carried forward, input, seq): the general path."""
    import heapq

    from streamctl.processing import inputorder

    def keyed(i, spec):
        last = -(1 << 62)
        for seq, rec in enumerate(inputorder.records(spec)):
            t = rec.get("ts") if spec.is_log else times[i](rec)
            if t is None:
                t = last
            else:
                last = t
            yield t, i, seq, rec

    return [(i, rec) for _t, i, _s, rec in heapq.merge(*(keyed(i, s) for i, s in enumerate(specs)))]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(0, 9)), max_size=15),
       st.lists(st.one_of(st.none(), st.integers(0, 9)), max_size=15))
def test_two_input_merge_equals_heap_merge(tmp_path_factory, ta, tb):
    import orjson

    from streamctl.processing import inputorder

    d = tmp_path_factory.mktemp("merge")
    paths = []
    for name, ts in (("a", ta), ("b", tb)):
        p = d / f"{name}.jsonl"
        p.write_bytes(b"".join(orjson.dumps({"n": i, "at": t}) + b"\n" for i, t in enumerate(ts)))
        paths.append(str(p))
    specs = [inputorder.classify(p) for p in paths]
    times = [lambda r: r["value"]["at"], lambda r: r["value"]["at"]]
    assert list(inputorder.merged(specs, times)) == _heap_reference(specs, times)
