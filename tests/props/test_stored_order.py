"""The (ts, partition, offset) order of stored lines (consume, tail, replay over several partitions):
reader.merge_by_ts, its definition, against a brute-force sort; consume's merge of runs of equal
ts (consumer.stream, its kernel) against merge_by_ts."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_input_order import T0, write_log

from streamctl.clients import consumer
from streamctl.storage import log as logmod
from streamctl.storage import reader

# per partition: steps of its append time (0: the same produce batch as the record before)
steps = st.lists(st.lists(st.integers(0, 3), max_size=25), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps, per_line=st.booleans())
def test_consume_runs_and_merge_by_ts_are_the_stored_order(tmp_path_factory, steps, per_line):
    parts = []
    for p, ds in enumerate(steps):
        ts, recs = T0, []
        for i, d in enumerate(ds):
            ts += d
            recs.append({"ts": ts, "key": f"k{p}", "value": {"p": p, "i": i}})
        parts.append(recs)
    path = str(tmp_path_factory.mktemp("order") / "log")
    write_log(path, parts)
    want = sorted((r["ts"], p, i) for p, recs in enumerate(parts) for i, r in enumerate(recs))

    lg = logmod.open_log(path)
    lines = [(p, list(reader.iter_lines(lg, p, 0, None))) for p in range(len(parts))]
    merged = list(reader.merge_by_ts(lines))
    assert [(p, off) for p, off, _ln in merged] == [(p, i) for _ts, p, i in want]

    pl = consumer.plan(lg, list(range(len(parts))), None, None)
    got = [ln for _p, _next, data in consumer.stream(lg, pl, True, per_line) for ln in data.splitlines(keepends=True)]
    assert got == [ln for _p, _off, ln in merged]
