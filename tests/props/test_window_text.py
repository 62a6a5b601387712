"""output.window_text (a closed grid window's rows written from its cells' columns) against the one
rule for a row's JSON line, output.row_json: directly, and through the window operator (a run whose
rows go to JSON lines, text_rows, against the same run giving row tuples)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamctl.processing.windows.config import WindowConfig
from streamctl.processing.windows.driver import WindowRun
from streamctl.processing.windows.output import RowsText, row_json, rows_jsonl, window_text

T0 = 1_763_719_200_000
M = 60_000

numbers = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=True),
                    st.sampled_from([0.0, -0.0, 1e16, 1e-7, 5e-324, float("inf")]))
keys = st.sampled_from([b'"a"', b"null", b"7", b"[1,2]", b'{"o":1}', b'"x,y"', b'"\\u00e9"'])


@settings(max_examples=200, deadline=None)
@given(start=st.integers(-3 * M, 3 * M).map(lambda s: T0 + s), rows=st.lists(st.tuples(keys, numbers, numbers)),
       names=st.sampled_from([["count", "avg_v"], ["sum_v"], ["n", "s", "a \" ,}"]]))
def test_window_text_is_row_json(start, rows, names):
    cols = [[r[1 + j % 2] for r in rows] for j in range(len(names))]
    ks = [r[0] for r in rows]
    want = [(start, start + M, k, dict(zip(names, vals, strict=True)), None)
            for k, vals in zip(ks, zip(*cols, strict=True), strict=True)] if rows else []
    got = window_text(start, start + M, ks, names, cols)
    assert type(got) is RowsText
    assert got == b"".join(map(row_json, want))
    # a RowsText among row tuples is written as it is
    assert rows_jsonl([*want, got, *want]) == b"".join(map(row_json, [*want, got, *want]))


values = st.one_of(st.integers(-5, 5), st.floats(-10, 10, allow_nan=False), st.none(),
                   st.sampled_from([2**40, 2**31, 0.1, float("inf"), "x"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evs=st.lists(st.fixed_dictionaries({"ts": st.integers(0, 20 * M).map(lambda d: T0 + d),
                                           "k": st.sampled_from(["a", "b", None, 7, "x,y"]), "v": values}),
                    max_size=80),
       sizes=st.lists(st.integers(1, 30), max_size=8),
       aggs=st.sampled_from([["count"], ["count", "avg:v"], ["s=sum:v", "count:v", "avg:v"]]),
       kind=st.sampled_from(["tumbling", "hopping", "session"]), lateness=st.sampled_from([0, M]))
def test_text_rows_equal_row_tuples(evs, sizes, aggs, kind, lateness):
    """The operator's rows written as text (what `window` writes as JSON lines) are the JSON lines of
    its row tuples, windows closing mid-run and at the end alike (sessions closed by the batch kernel
    come as text, those closed at the end or by the one-event path as tuples)."""
    size, hop = {"tumbling": (M, 0), "hopping": (2 * M, M // 2), "session": (3 * M, 0)}[kind]
    cfg = WindowConfig(kind=kind, size=size, hop=hop, by=["k"], aggs=aggs, lateness=lateness)
    recs = [{"offset": i, "partition": 0, "key": None, "value": e} for i, e in enumerate(evs)]
    batches, i = [], 0
    for n in sizes:
        batches.append(recs[i:i + n])
        i += n
    batches.append(recs[i:])
    out = []
    for text in (False, True):
        run = WindowRun(cfg, is_log=False, text_rows=text)
        rows: list = []
        run.feed_batches(batches, rows.extend)
        run.finish(rows.extend)
        out.append(rows)
    assert rows_jsonl(out[1]) == b"".join(map(row_json, out[0]))
    assert all(type(r) is tuple for r in out[0])
    if kind != "session" and evs and not any(type(e["v"]) is int and abs(e["v"]) > 2**31 for e in evs):
        assert any(type(r) is RowsText for r in out[1])  # kept as cells throughout: every window as text
