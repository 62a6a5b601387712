"""Session windows against closed sessions, delete rows, and the fold of --emit update / --late correct.

Folding the rows by (window, key) -- a row replaces the one before, a delete
removes it -- must leave the rows of a run whose lateness let nothing be late
(with --late correct), or the rows of --emit final (with --emit update and
--late drop), for every window kind; through the core and through the CLI.
"""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_cli
from streamctl.processing.windows.config import WindowConfig
from streamctl.processing.windows.driver import WindowRun
from streamctl.processing.windows.output import row_dict
from streamctl.timeparse import format_iso

T0 = 1_763_719_200_000
S = 1000
AGGS = ["count", "sum:v", "min:v", "max:v", "p50:v", "distinct:v", "first:v", "last:v"]


def run_core(events, kind="session", size=45 * S, hop=0, lateness=0, late="drop", emit="final", aggs=None):
    """events: (t, key, v) in arrival order -> (operator rows, WindowRun)."""
    cfg = WindowConfig(kind=kind, size=size, hop=hop, by=["k"], aggs=aggs or AGGS, lateness=lateness, late=late,
                       emit=emit)
    run = WindowRun(cfg, is_log=False)
    rows: list = []
    recs = ({"offset": i, "partition": 0, "key": None, "value": {"ts": t, "k": k, "v": v}}
            for i, (t, k, v) in enumerate(events))
    run.feed(recs, rows.extend)
    run.finish(rows.extend)
    return rows, run


def fold(rows) -> dict:
    """(start, end, key JSON) -> values; a delete must withdraw a row that is there."""
    table: dict = {}
    for start, end, key, values, _revision in rows:
        if values is None:
            assert (start, end, key) in table, f"delete of a row never written: {(start, end, key)}"
            del table[(start, end, key)]
        else:
            table[(start, end, key)] = values
    return table


def max_disorder(events) -> int:
    d, mx = 0, None
    for t, _, _ in events:
        if mx is not None:
            d = max(d, mx - t)
        mx = t if mx is None else max(mx, t)
    return d


def no_late(events, kind, size, hop=0, aggs=None) -> dict:
    """The rows of the same engine with a lateness larger than any disorder: nothing is late."""
    rows, run = run_core(events, kind, size, hop, lateness=max_disorder(events) + 1, aggs=aggs)
    assert run.stats.late == 0
    return fold(rows)


def a_at(*seconds: int):
    return [(T0 + s * S, "a", i) for i, s in enumerate(seconds)]


def w(start_s: int, end_s: int) -> dict:
    return {"start": format_iso(T0 + start_s * S), "end": format_iso(T0 + end_s * S)}


def shown(rows) -> list[tuple]:
    return [(r["window"], r.get("op") or r["count"], r.get("revision")) for r in map(row_dict, rows)]


# -- the three cases ---------------------------------------------------------------


def test_event_within_gap_of_a_closed_session_is_late_and_sessions_never_overlap():
    # a@50 moves the watermark to 50 s: [0, 45) closes and a@50 opens [50, 95). a@40 is not late by
    # t + GAP <= watermark (85 > 50), but it is within GAP of the closed session (40 - 0 <= 45)
    rows, run = run_core(a_at(0, 50, 40), aggs=["count"])
    assert shown(rows) == [(w(0, 45), 1, None), (w(50, 95), 1, None)]
    assert run.stats.late == 1
    # dropped whole: it does not join the open session it also touches
    rows, run = run_core(a_at(0, 50, 40), emit="update", aggs=["count"])
    assert shown(rows) == [(w(0, 45), 1, None), (w(50, 95), 1, None)]
    assert run.stats.late == 1


def test_late_correct_reopens_the_closed_session_and_withdraws_its_row():
    rows, run = run_core(a_at(0, 50, 40), late="correct", aggs=["count"])
    # the merged session reaches past the watermark: open again, written when it closes, after the
    # delete of the row it replaces
    assert shown(rows) == [(w(0, 45), 1, None), (w(0, 45), "delete", None), (w(0, 95), 3, 1)]
    assert run.stats.late == 1
    assert fold(rows) == no_late(a_at(0, 50, 40), "session", 45 * S, aggs=["count"])
    rows, _ = run_core(a_at(0, 50, 40), late="correct", emit="update", aggs=["count"])
    assert shown(rows) == [(w(0, 45), 1, None), (w(50, 95), 1, None),
                           (w(0, 45), "delete", None), (w(50, 95), "delete", None), (w(0, 95), 3, 1)]


def test_after_a_reopening_correction_later_events_join_as_usual():
    rows, run = run_core(a_at(0, 50, 40, 90), late="correct", aggs=["count"])
    assert run.stats.late == 1  # a@90 joins the reopened session [0, 95) on time: 90 - 50 <= 45
    assert shown(rows)[1:] == [(w(0, 45), "delete", None), (w(0, 135), 4, 1)]
    assert fold(rows) == no_late(a_at(0, 50, 40, 90), "session", 45 * S, aggs=["count"])


def test_bridging_event_under_emit_update_withdraws_both_sessions():
    rows, run = run_core(a_at(0, 20, 10), size=10 * S, lateness=60 * S, emit="update", aggs=["count"])
    assert shown(rows) == [(w(0, 10), 1, None), (w(20, 30), 1, None),
                           (w(0, 10), "delete", None), (w(20, 30), "delete", None), (w(0, 30), 3, None)]
    assert run.stats.late == 0
    final, _ = run_core(a_at(0, 20, 10), size=10 * S, lateness=60 * S, aggs=["count"])
    assert fold(rows) == fold(final)


def test_a_growing_session_under_emit_update_withdraws_its_old_window():
    rows, _ = run_core(a_at(0, 5, 3), size=10 * S, emit="update", aggs=["count"])
    # a@3 falls inside [0, 15): same bounds, the row is replaced, nothing to withdraw
    assert shown(rows) == [(w(0, 10), 1, None), (w(0, 10), "delete", None), (w(0, 15), 2, None),
                           (w(0, 15), 3, None)]


def test_late_correct_of_a_session_that_stays_closed_is_written_at_once():
    # b@100 closes a's [0, 10) and [20, 30); a@10 bridges them and the merge ends before the watermark
    evs = [*a_at(0, 20), (T0 + 100 * S, "b", 0), (T0 + 10 * S, "a", 0)]
    rows, run = run_core(evs, size=10 * S, late="correct", aggs=["count"])
    got = [(r["window"], r["key"], r.get("op") or r["count"], r.get("revision")) for r in map(row_dict, rows)]
    assert got == [(w(0, 10), "a", 1, None), (w(20, 30), "a", 1, None),
                   (w(0, 10), "a", "delete", None), (w(20, 30), "a", "delete", None), (w(0, 30), "a", 3, 1),
                   (w(100, 110), "b", 1, None)]
    assert run.stats.late == 1
    assert fold(rows) == no_late(evs, "session", 10 * S, aggs=["count"])


def test_the_gap_boundary_of_a_closed_session():
    gap = 45 * S
    # b@50 closes a's [0, 45); a@45 is exactly GAP after its last event: within GAP, late
    _, run = run_core([(T0, "a", 0), (T0 + 50 * S, "b", 0), (T0 + 45 * S, "a", 0)], size=gap)
    assert run.stats.late == 1
    # a@46 is GAP + 1 ms after it: a new session of its own
    rows, run = run_core([(T0, "a", 0), (T0 + 50 * S, "b", 0), (T0 + 45 * S + 1, "a", 0)], size=gap,
                         aggs=["count"])
    assert run.stats.late == 0
    assert [(r["key"], r["window"]["start"]) for r in map(row_dict, rows)] == [
        ("a", format_iso(T0)), ("a", format_iso(T0 + 45 * S + 1)), ("b", format_iso(T0 + 50 * S))]


def test_drop_mode_forgets_closed_sessions_once_no_event_can_reach_them():
    from streamctl.processing.windows import session_index

    gap = 10 * S
    cfg = WindowConfig(kind="session", size=gap, by=["k"], aggs=["count"])
    recs = [{"offset": i, "partition": 0, "key": None, "value": {"ts": T0 + i * 100 * S, "k": f"u{i}", "v": 0}}
            for i in range(500)]  # one short session per user
    for feed in ("batches", "records"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(session_index, "INDEX_SLACK", 20)
            run = WindowRun(cfg, is_log=False)
            if feed == "batches":
                run.feed_batches([recs[i:i + 25] for i in range(0, len(recs), 25)], lambda rows: None)
            else:
                run.feed_records(iter(recs), lambda rows: None)
        # only the latest closed sessions are remembered (last + 2 GAP still ahead of the watermark),
        # and the store forgets the groups no event can reach once it holds 20 more than four per open one
        assert len(run.op.dump()["closed_last"]) <= 2
        assert len(run.op.store.gkey) <= 4 + 20 + 1


def test_checkpoint_keeps_what_closed_sessions_decide():
    evs = a_at(0, 50, 40)
    for late in ("drop", "correct"):
        cfg = WindowConfig(kind="session", size=45 * S, by=["k"], late=late)
        first = WindowRun(cfg, is_log=False)
        rows: list = []
        recs = [{"offset": i, "partition": 0, "key": None, "value": {"ts": t, "k": k}} for i, (t, k, _v) in
                enumerate(evs)]
        first.feed(iter(recs[:2]), rows.extend)
        second = WindowRun(cfg, is_log=False)
        second.load(orjson.loads(orjson.dumps(first.dump())))
        second.feed(iter(recs[2:]), rows.extend)
        second.finish(rows.extend)
        whole, _ = run_core(evs, late=late, aggs=["count"])
        assert rows == whole and second.stats.late == 1


# -- the fold property, every window kind ---------------------------------------------

KINDS = [("tumbling", 100, 0), ("tumbling", 7, 0), ("hopping", 300, 100), ("hopping", 200, 200),
         ("sliding", 150, 0), ("sliding", 7, 0), ("session", 60, 0), ("session", 7, 0), ("session", 250, 0)]


@st.composite
def jittered(draw, max_size=40):
    """Events per key at random times, arriving each after a random delay up to a jitter."""
    n = draw(st.integers(1, max_size))
    jitter = draw(st.sampled_from([0, 20, 100, 500]))
    arrivals = []
    for i in range(n):
        t = T0 + draw(st.integers(0, 1500))
        arrivals.append((t + draw(st.integers(0, jitter)), i, (t, draw(st.sampled_from("abc")),
                                                               draw(st.integers(-5, 20)))))
    return [e for _, _, e in sorted(arrivals)]


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(evs=jittered(), kind=st.sampled_from(KINDS), lateness=st.sampled_from([0, 0, 10, 60, 300]),
       emit=st.sampled_from(["final", "update"]))
def test_late_correct_folds_to_the_rows_of_a_run_with_nothing_late(evs, kind, lateness, emit):
    name, size, hop = kind
    rows, _ = run_core(evs, name, size, hop, lateness, late="correct", emit=emit)
    assert fold(rows) == no_late(evs, name, size, hop)


@SETTINGS
@given(evs=jittered(), kind=st.sampled_from(KINDS), lateness=st.sampled_from([0, 0, 10, 60, 300]))
def test_emit_update_folds_to_emit_final(evs, kind, lateness):
    name, size, hop = kind
    update, run_u = run_core(evs, name, size, hop, lateness, emit="update")
    final, run_f = run_core(evs, name, size, hop, lateness)
    assert fold(update) == fold(final)
    assert run_u.stats.late == run_f.stats.late
    if run_f.stats.late == 0:
        assert fold(update) == no_late(evs, name, size, hop)


@SETTINGS
@given(evs=jittered(), size=st.sampled_from([7, 60, 250]), lateness=st.sampled_from([0, 10, 60, 300]),
       late=st.sampled_from(["drop", "correct"]))
def test_sessions_of_a_group_never_overlap_within_gap(evs, size, lateness, late):
    rows, _ = run_core(evs, "session", size, 0, lateness, late=late)
    by_key: dict = {}
    for start, end, key, _values in ((s, e, k, v) for (s, e, k), v in fold(rows).items()):
        by_key.setdefault(key, []).append((start, end))
    for sessions in by_key.values():
        sessions.sort()
        # end = last + GAP: the next session starts more than GAP after the last event of this one
        assert all(b[0] > a[1] for a, b in zip(sessions, sessions[1:], strict=False))


# -- through the CLI ---------------------------------------------------------------


def cli_rows(run, evs, args) -> list[dict]:
    data = "".join(json.dumps({"ts": t, "k": k, "v": v}) + "\n" for t, k, v in evs)
    p = run("window", "-", "--by", "k", *(a for spec in AGGS for a in ("--agg", spec)), *args, input=data,
            check=True)
    return [json.loads(line) for line in p.stdout.decode().splitlines()]


def cli_fold_rows(rows: list[dict]) -> dict:
    table: dict = {}
    for r in rows:
        k = (r["window"]["start"], r["window"]["end"], json.dumps(r["key"]))
        if r.get("op") == "delete":
            assert k in table and set(r) == {"window", "key", "op"}
            del table[k]
        else:
            table[k] = {f: v for f, v in r.items() if f not in ("window", "key", "revision")}
    return table


CLI_KINDS = [(["--session", "60ms"], "session"), (["--session", "250ms"], "session"),
             (["--tumbling", "100ms"], "tumbling"), (["--hopping", "300ms/100ms"], "hopping"),
             (["--sliding", "150ms"], "sliding")]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(evs=jittered(max_size=30), kind=st.sampled_from(CLI_KINDS), lateness=st.sampled_from(["0s", "10ms", "60ms"]))
def test_cli_update_and_correct_fold_to_the_rows_with_nothing_late(evs, kind, lateness):
    window_args, _name = kind
    want = cli_fold_rows(cli_rows(run_cli, evs, [*window_args, "--lateness", "1d"]))
    got = cli_fold_rows(cli_rows(run_cli, evs, [*window_args, "--lateness", lateness, "--late", "correct",
                                                "--emit", "update"]))
    assert got == want


def test_cli_the_late_session_case(run):
    evs = a_at(0, 50, 40)
    rows = cli_rows(run, evs, ["--session", "45s"])
    assert [(r["window"], r["count"]) for r in rows] == [(w(0, 45), 1), (w(50, 95), 1)]
    data = "".join(json.dumps({"ts": t, "k": k}) + "\n" for t, k, _v in evs)
    p = run("window", "-", "--by", "k", "--session", "45s", input=data, check=True)
    assert b"1 late event(s) DROPPED" in p.stderr
    p = run("window", "-", "--by", "k", "--session", "45s", "--late", "correct", input=data, check=True)
    assert [json.loads(x) for x in p.stdout.decode().splitlines()] == [
        {"window": w(0, 45), "key": "a", "count": 1},
        {"window": w(0, 45), "key": "a", "op": "delete"},
        {"window": w(0, 95), "key": "a", "count": 3, "revision": 1},
    ]


@pytest.mark.parametrize("seconds,extra,header", [
    ((0, 50, 40), ["--late", "correct"], "window.start,window.end,key,count,revision,op"),
    ((0, 5), ["--emit", "update"], "window.start,window.end,key,count,op"),
])
def test_cli_csv_has_an_op_column_for_delete_rows(run, seconds, extra, header):
    data = "".join(json.dumps({"ts": t, "k": k}) + "\n" for t, k, _v in a_at(*seconds))
    p = run("window", "-", "--by", "k", "--session", "45s", "--output", "csv", *extra, input=data, check=True)
    lines = p.stdout.decode().splitlines()
    assert lines[0] == header
    assert any(line.endswith(",delete") and ",,delete" in line for line in lines[1:])
    assert not any(line.endswith(",delete") for line in lines[1:2])
