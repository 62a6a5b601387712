"""window: hand-checked boundary cases, late policies, emit modes, output formats, inputs, bad times."""

from __future__ import annotations

import csv
import io
import json

import orjson
import pytest

from streamctl.errors import DataError, UsageError
from streamctl.processing.windows.config import WindowConfig
from streamctl.processing.windows.driver import WindowRun
from streamctl.processing.windows.output import row_dict
from streamctl.timeparse import format_iso, parse_iso

T0 = parse_iso("2026-11-21T10:00:00Z")
S = 1000
M = 60_000


def window(events: list[dict], kind: str = "tumbling", size: int = M, **kw) -> tuple[list[dict], WindowRun]:
    """Run the core over plain-file records (value = event); rows as output dicts."""
    cfg = WindowConfig(kind=kind, size=size, **kw)
    run = WindowRun(cfg, is_log=False)
    rows: list = []
    recs = ({"offset": i, "partition": 0, "key": None, "value": e} for i, e in enumerate(events))
    run.feed(recs, rows.extend)
    run.finish(rows.extend)
    return [row_dict(r) for r in rows], run


def w(start_ms: int, end_ms: int) -> dict:
    return {"start": format_iso(start_ms), "end": format_iso(end_ms)}


def jsonl(events: list[dict]) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


# -- window boundaries --------------------------------------------------------


def test_tumbling_event_exactly_on_edge_starts_the_next_window():
    rows, _ = window([{"ts": T0 + M - 1}, {"ts": T0 + M}], by=[])
    assert [(r["window"], r["count"]) for r in rows] == [(w(T0, T0 + M), 1), (w(T0 + M, T0 + 2 * M), 1)]


def test_tumbling_windows_are_epoch_aligned_not_first_event_aligned():
    rows, _ = window([{"ts": T0 + 17 * S}, {"ts": T0 + 59 * S}])
    assert rows == [{"window": w(T0, T0 + M), "key": None, "count": 2}]


def test_negative_epoch_times_floor_into_the_right_window():
    # -1 ms is 1969-12-31T23:59:59.999Z: it belongs to [-1m, 0), not [0, 1m)
    rows, _ = window([{"ts": "1969-12-31T23:59:59.999Z"}, {"ts": "1970-01-01T00:00:00Z"}], lateness=M)
    assert [r["window"] for r in rows] == [
        {"start": "1969-12-31T23:59:00.000Z", "end": "1970-01-01T00:00:00.000Z"},
        {"start": "1970-01-01T00:00:00.000Z", "end": "1970-01-01T00:01:00.000Z"},
    ]


def test_early_epoch_seconds_are_read_by_magnitude():
    rows, _ = window([{"ts": 90}, {"ts": 90_000}], size=M)  # 90 s and 90 000 s since 1970
    assert [r["window"]["start"] for r in rows] == ["1970-01-01T00:01:00.000Z", "1970-01-02T01:00:00.000Z"]


def test_hopping_windows_start_before_the_first_event():
    rows, _ = window([{"ts": T0 + 10 * S}], kind="hopping", size=M, hop=30 * S)
    assert [r["window"] for r in rows] == [w(T0 - 30 * S, T0 + 30 * S), w(T0, T0 + M)]
    assert all(r["count"] == 1 for r in rows)


def test_hopping_event_on_a_hop_edge():
    rows, _ = window([{"ts": T0 + 30 * S}], kind="hopping", size=M, hop=30 * S)
    assert [r["window"] for r in rows] == [w(T0, T0 + M), w(T0 + 30 * S, T0 + 90 * S)]


def test_sliding_includes_both_ends():
    evs = [{"ts": T0}, {"ts": T0 + M}, {"ts": T0 + M + 1}]
    rows, _ = window(evs, kind="sliding", size=M)
    assert [(r["window"], r["count"]) for r in rows] == [
        (w(T0 - M, T0), 1),
        (w(T0, T0 + M), 2),  # T0 is exactly SIZE before: included
        (w(T0 + 1, T0 + M + 1), 2),  # T0 is now 1 ms outside
    ]


def test_session_gap_exactly_gap_merges_and_one_ms_more_splits():
    gap = 30 * M
    evs = [{"ts": T0, "u": "a"}, {"ts": T0 + gap, "u": "a"},  # exactly GAP apart: one session
           {"ts": T0, "u": "b"}, {"ts": T0 + gap + 1, "u": "b"}]  # GAP + 1 ms: two sessions
    rows, _ = window(evs, kind="session", size=gap, by=["u"], lateness=2 * gap)
    got = sorted((r["key"], r["window"]["start"], r["window"]["end"], r["count"]) for r in rows)
    assert got == sorted([
        ("a", format_iso(T0), format_iso(T0 + 2 * gap), 2),
        ("b", format_iso(T0), format_iso(T0 + gap), 1),
        ("b", format_iso(T0 + gap + 1), format_iso(T0 + 2 * gap + 1), 1),
    ])


SESSION_END_CASES = [
    # b@10 moves the watermark to 10, the end of a's [0, 10): it closes; a@9 and a@10 are within GAP of it
    ([("a", 0), ("b", 10), ("a", 9)], [], [(0, 10, "a", 1), (10, 20, "b", 1)], 1),
    ([("a", 0), ("b", 10), ("a", 10)], [], [(0, 10, "a", 1), (10, 20, "b", 1)], 1),
    # before b@10, the watermark (0) is below the end: a@10, exactly GAP after a@0, joins the session
    ([("a", 0), ("a", 10), ("b", 10)], [], [(0, 20, "a", 2), (10, 20, "b", 1)], 0),
    # the lateness shifts the watermark (max time - 1s): 9 is below the end, 10 reaches it
    ([("a", 0), ("b", 10), ("a", 9)], ["--lateness", "1s"], [(0, 19, "a", 2), (10, 20, "b", 1)], 0),
    ([("a", 0), ("b", 10), ("a", 10)], ["--lateness", "1s"], [(0, 20, "a", 2), (10, 20, "b", 1)], 0),
    ([("a", 0), ("b", 11), ("a", 10)], ["--lateness", "1s"], [(0, 10, "a", 1), (11, 21, "b", 1)], 1),
]


@pytest.mark.parametrize("emit", ["final", "update"])
@pytest.mark.parametrize("events,extra,want,late", SESSION_END_CASES)
def test_a_session_closes_when_the_watermark_reaches_its_end(run, tmp_path, events, extra, want, late, emit):
    """A session [start, end) closes, as every window, when the watermark reaches end: an event
    within GAP of it after that is late, one before joins it (a batch, and one event at a time)."""
    f = tmp_path / "g.jsonl"
    f.write_text(jsonl([{"t": t, "k": k} for k, t in events]))
    p = run("window", str(f), "--session", "10s", "--by", "k", "--time-field", "t", "--agg", "count",
            "--emit", emit, *extra, check=True)
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    if emit == "update":  # folded by (window, key): the rows of --emit final
        folded: dict = {}
        for r in rows:
            key = (r["window"]["start"], r["window"]["end"], r["key"])
            if r.get("op") == "delete":
                del folded[key]
            else:
                folded[key] = r
        rows = list(folded.values())
    assert sorted((r["window"]["start"], r["window"]["end"], r["key"], r["count"]) for r in rows) == [
        (format_iso(a * S), format_iso(b * S), k, n) for a, b, k, n in want]
    assert (b"1 late event(s) DROPPED" in p.stderr) == (late == 1)
    assert (b"late" in p.stderr) == (late == 1)


def test_late_correct_reopens_a_session_closed_at_its_end(run, tmp_path):
    f = tmp_path / "g.jsonl"
    f.write_text(jsonl([{"t": 0, "k": "a"}, {"t": 10, "k": "b"}, {"t": 9, "k": "a"}]))
    p = run("window", str(f), "--session", "10s", "--by", "k", "--time-field", "t", "--agg", "count",
            "--late", "correct", check=True)
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    # a's [0, 10) closed at b@10 and was written; a@9 merges into it: [0, 19) ends past the watermark (10),
    # so it is open again and written at the end of input
    assert rows == [{"window": w(0, 10 * S), "key": "a", "count": 1},
                    {"window": w(0, 10 * S), "key": "a", "op": "delete"},
                    {"window": w(0, 19 * S), "key": "a", "count": 2, "revision": 1},
                    {"window": w(10 * S, 20 * S), "key": "b", "count": 1}]
    assert b"1 late event(s) corrected" in p.stderr


def test_session_bridging_event_merges_two_sessions():
    gap = 10 * S
    evs = [{"ts": T0}, {"ts": T0 + 20 * S}, {"ts": T0 + 10 * S}]
    rows, run = window(evs, kind="session", size=gap, lateness=M)
    assert [(r["window"], r["count"]) for r in rows] == [(w(T0, T0 + 30 * S), 3)]
    assert run.stats.late == 0


# -- order and keys ---------------------------------------------------------------


def test_rows_in_close_order_ties_by_start_then_key():
    evs = [{"ts": T0, "u": "b"}, {"ts": T0, "u": "a"}, {"ts": T0 + M, "u": "a"}, {"ts": T0 + 2 * M, "u": "c"}]
    rows, _ = window(evs, by=["u"])
    assert [(r["window"]["start"], r["key"]) for r in rows] == [
        (format_iso(T0), "a"), (format_iso(T0), "b"), (format_iso(T0 + M), "a"), (format_iso(T0 + 2 * M), "c")]


def test_several_by_paths_make_a_list_key():
    rows, _ = window([{"ts": T0, "r": {"x": 1}, "h": "h1"}], by=["r.x", "value.h"])
    assert rows[0]["key"] == [1, "h1"]


# -- aggregations ----------------------------------------------------------------


def test_aggregations_and_default_names():
    evs = [{"ts": T0 + i, "ms": v, "p": p} for i, (v, p) in enumerate([(4, "/a"), (1, "/b"), (3, "/a"), (2, "/c")])]
    rows, _ = window(evs, aggs=["count", "sum:ms", "avg:ms", "min:ms", "max:ms", "p50:ms", "p90:ms", "p99:ms",
                                "distinct:p", "first:p", "last:p", "lat=p99:value.ms"])
    r = rows[0]
    assert r["count"] == 4 and r["sum_ms"] == 10 and r["avg_ms"] == 2.5
    assert (r["min_ms"], r["max_ms"]) == (1, 4)
    # Spark's percentile: position p * (n - 1) over the sorted values, linear in between
    assert r["p50_ms"] == 2.5 and r["p90_ms"] == pytest.approx(3.7) and r["p99_ms"] == pytest.approx(3.97)
    assert r["lat"] == r["p99_ms"]
    assert r["distinct_p"] == 3 and r["first_p"] == "/a" and r["last_p"] == "/c"


def test_first_and_last_follow_input_order_not_time():
    evs = [{"ts": T0 + 5, "v": "arrived-first"}, {"ts": T0 + 1, "v": "arrived-last"}]
    rows, _ = window(evs, aggs=["first:v", "last:v"], lateness=M)
    assert rows[0]["first_v"] == "arrived-first" and rows[0]["last_v"] == "arrived-last"


def test_non_numeric_values_are_counted_not_fatal():
    evs = [{"ts": T0, "ms": 1}, {"ts": T0, "ms": "slow"}, {"ts": T0, "ms": True}, {"ts": T0}]
    rows, run = window(evs, aggs=["avg:ms", "count"])
    assert rows[0]["avg_ms"] == 1.0 and rows[0]["count"] == 4
    assert run.plan.non_numeric == {"avg_ms": 2}


def test_empty_numeric_aggregate_is_null():
    rows, _ = window([{"ts": T0}], aggs=["sum:ms", "p50:ms", "min:ms", "first:ms"])
    assert rows[0]["sum_ms"] is None and rows[0]["p50_ms"] is None and rows[0]["first_ms"] is None


def test_bad_agg_specs_are_usage_errors():
    for spec in ("median:x", "sum", "a=count,", "=count", "key=count", "p50:"):
        with pytest.raises(UsageError):
            window([], aggs=[spec])
    with pytest.raises(UsageError):
        window([], aggs=["n=count", "n=sum:x"])


# -- watermark, lateness and late policies ------------------------------------------


LATE = [{"ts": T0 + 10 * S, "v": 1}, {"ts": T0 + 70 * S, "v": 2}, {"ts": T0 + 20 * S, "v": 4}]


def test_late_drop_counts_and_skips():
    rows, run = window(LATE, aggs=["count", "sum:v"])
    assert [(r["window"], r["sum_v"]) for r in rows] == [(w(T0, T0 + M), 1), (w(T0 + M, T0 + 2 * M), 2)]
    assert run.stats.late == 1


def test_lateness_waits_for_stragglers():
    rows, run = window(LATE, aggs=["sum:v"], lateness=10 * S + 1)
    assert [r["sum_v"] for r in rows] == [5, 2] and run.stats.late == 0


def test_lateness_boundary_window_closes_when_watermark_reaches_end():
    # watermark after 70 s with lateness 10 s is exactly 60 s = the first window's end: closed
    rows, run = window(LATE, aggs=["sum:v"], lateness=10 * S)
    assert [r["sum_v"] for r in rows] == [1, 2] and run.stats.late == 1


def test_late_correct_emits_revisions():
    evs = [*LATE, {"ts": T0 + 30 * S, "v": 8}]
    rows, run = window(evs, aggs=["sum:v"], late="correct")
    assert [(r["window"]["start"], r["sum_v"], r.get("revision")) for r in rows] == [
        (format_iso(T0), 1, None), (format_iso(T0), 5, 1), (format_iso(T0), 13, 2), (format_iso(T0 + M), 2, None)]
    assert run.stats.late == 2


def test_late_correct_sliding_revises_every_closed_row_holding_the_event():
    evs = [{"ts": T0}, {"ts": T0 + 5 * S}, {"ts": T0 + 20 * S}, {"ts": T0 + 3 * S}]
    rows, _ = window(evs, kind="sliding", size=10 * S, late="correct")
    revised = [(r["window"]["end"], r["count"], r["revision"]) for r in rows if "revision" in r]
    # the late event at 3 s gets its own row and changes the row of the event at 5 s
    assert revised == [(format_iso(T0 + 3 * S), 2, 1), (format_iso(T0 + 5 * S), 3, 1)]


def test_hopping_late_event_still_counts_in_open_windows():
    evs = [{"ts": T0 + 40 * S}, {"ts": T0 + 65 * S}, {"ts": T0 + 35 * S}]
    rows, run = window(evs, kind="hopping", size=M, hop=30 * S)
    got = {r["window"]["start"]: r["count"] for r in rows}
    # 35 s is late for [0, 60) (closed at 65 s) but [30 s, 90 s) is still open
    assert got[format_iso(T0)] == 1 and got[format_iso(T0 + 30 * S)] == 3
    assert run.stats.late == 1


def test_sliding_and_session_late_rules():
    _, run = window([{"ts": T0 + 10 * S}, {"ts": T0 + 9 * S}], kind="sliding", size=M)
    assert run.stats.late == 1  # t < watermark
    _, run = window([{"ts": T0 + 10 * S}, {"ts": T0 + 10 * S}], kind="sliding", size=M)
    assert run.stats.late == 0  # t == watermark: its window is still open
    gap = 5 * S
    _, run = window([{"ts": T0 + 10 * S}, {"ts": T0 + 5 * S}], kind="session", size=gap)
    assert run.stats.late == 1  # t + GAP <= watermark
    _, run = window([{"ts": T0 + 10 * S}, {"ts": T0 + 5 * S + 1}], kind="session", size=gap)
    assert run.stats.late == 0


def test_emit_update_writes_every_change():
    evs = [{"ts": T0, "v": 1}, {"ts": T0 + S, "v": 2}, {"ts": T0 + M, "v": 3}]
    rows, _ = window(evs, aggs=["sum:v"], emit="update")
    assert [(r["window"]["start"], r["sum_v"]) for r in rows] == [
        (format_iso(T0), 1), (format_iso(T0), 3), (format_iso(T0 + M), 3)]


def test_bad_time_skip_and_fail():
    evs = [{"ts": T0}, {"ts": "yesterday"}, {"nots": 1}, {"ts": T0 + S}]
    rows, run = window(evs)
    assert rows[0]["count"] == 2 and run.stats.bad_time == 2
    with pytest.raises(DataError, match="input:2: no usable time"):  # FILE:LINE, lines from 1
        window(evs, on_bad_time="fail")


def test_iso_with_offset_and_naive_utc():
    evs = [{"ts": "2026-11-21T11:00:30+01:00"}, {"ts": "2026-11-21T10:00:40"}]
    rows, _ = window(evs)
    assert rows == [{"window": w(T0, T0 + M), "key": None, "count": 2}]


# -- the command line ----------------------------------------------------------------


def test_cli_log_input_keys_and_partitions(run, logdir):
    evs = [{"user": f"u{i % 3}", "at": T0 + i * 20 * S} for i in range(9)]
    run("produce", logdir, "--partitions", "3", "--key-field", "user", input=jsonl(evs), check=True)
    # input order is (append ts, partition, offset), not event time: allow for the disorder
    p = run("window", logdir, "--tumbling", "1m", "--time-field", "at", "--agg", "n=count", "--lateness", "10m",
            check=True)
    rows = [orjson.loads(line) for line in p.stdout.splitlines()]
    assert sum(r["n"] for r in rows) == 9 and b"late" not in p.stderr
    assert {r["key"] for r in rows} == {"u0", "u1", "u2"}
    # the default time is the append time (ts): everything lands in one or two windows
    p = run("window", logdir, "--tumbling", "1h", check=True)
    assert sum(orjson.loads(x)["count"] for x in p.stdout.splitlines()) == 9


def test_cli_stdin_csv_output(run):
    evs = [{"ts": T0, "ms": 5, "u": "a,b"}, {"ts": T0 + S, "ms": 7, "u": "a,b"}]
    p = run("window", "-", "--tumbling", "1m", "--by", "u", "--agg", "avg:ms", "--output", "csv", input=jsonl(evs),
            check=True)
    got = list(csv.reader(io.StringIO(p.stdout.decode())))
    assert got == [["window.start", "window.end", "key", "avg_ms"],
                   [format_iso(T0), format_iso(T0 + M), "a,b", "6.0"]]


def test_cli_csv_cells_of_objects_are_their_json(run):
    """Only the window is spread into columns: a key or an aggregate that is an object is one cell."""
    evs = [{"ts": T0, "k": {"id": 1, "n": "a"}, "v": {"x": [1, 2]}}]
    p = run("window", "-", "--tumbling", "1m", "--by", "k", "--agg", "first:v", "--output", "csv",
            input=jsonl(evs), check=True)
    got = list(csv.reader(io.StringIO(p.stdout.decode())))
    assert got == [["window.start", "window.end", "key", "first_v"],
                   [format_iso(T0), format_iso(T0 + M), '{"id":1,"n":"a"}', '{"x":[1,2]}']]


def test_cli_table_output(run):
    p = run("window", "-", "--tumbling", "1m", "--output", "table", input=jsonl([{"ts": T0}]), check=True)
    assert b"window.start" in p.stdout and b"count" in p.stdout


def test_cli_late_out_and_loud_drop_count(run, tmp_path):
    late = tmp_path / "late.jsonl"
    p = run("window", "-", "--tumbling", "1m", "--agg", "sum:v", "--late-out", str(late), input=jsonl(LATE),
            check=True)
    assert b"1 late event(s) DROPPED" in p.stderr
    assert [json.loads(x) for x in late.read_text().splitlines()] == [LATE[2]]


def test_cli_late_correct_has_revision_column_in_csv(run):
    p = run("window", "-", "--tumbling", "1m", "--late", "correct", "--output", "csv", input=jsonl(LATE),
            check=True)
    lines = p.stdout.decode().splitlines()
    assert lines[0].endswith(",revision") and lines[2].endswith(",1")


def test_cli_bad_time_reported_and_fail_exit_65(run):
    data = jsonl([{"ts": T0}, {"ts": "nope"}])
    p = run("window", "-", "--tumbling", "1m", input=data)
    assert p.returncode == 0 and b"1 record(s) without a usable time in 'ts' skipped" in p.stderr
    p = run("window", "-", "--tumbling", "1m", "--on-bad-time", "fail", input=data)
    assert p.returncode == 65 and b"<stdin>:2: no usable time" in p.stderr and b"Traceback" not in p.stderr


def test_cli_processing_time(run):
    p = run("window", "-", "--tumbling", "1h", "--processing-time", input=jsonl([{"x": 1}, {"x": 2}]), check=True)
    rows = [orjson.loads(x) for x in p.stdout.splitlines()]
    assert sum(r["count"] for r in rows) == 2


@pytest.mark.parametrize("args", [
    [], ["--tumbling", "1m", "--session", "1m"], ["--tumbling", "0s"], ["--hopping", "1m"],
    ["--hopping", "1m/2m"], ["--tumbling", "1m", "--agg", "nope:x"], ["--tumbling", "1m", "--late", "keep"],
    ["--tumbling", "1m", "--emit", "sometimes"], ["--tumbling", "1m", "--output", "xml"],
    ["--tumbling", "1m", "--group", "g"], ["--tumbling", "1m", "--by", "a..b"],
])
def test_cli_usage_errors_exit_2(run, args):
    p = run("window", "-", *args, input="")
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith(b"streamctl: ") and b"Traceback" not in p.stderr


def test_cli_missing_input_and_bad_json(run, tmp_path):
    p = run("window", str(tmp_path / "nope"), "--tumbling", "1m")
    assert p.returncode == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"ts": 1}\n{oops\n')
    p = run("window", str(bad), "--tumbling", "1m")
    assert p.returncode == 65 and b"Traceback" not in p.stderr


def test_cli_help_has_examples_for_every_flag(run):
    p = run("window", "--help", check=True)
    text = p.stdout.decode()
    import re

    flags = set(re.findall(r"(--[a-z][a-z-]+)", text.split("Examples:")[0]))
    examples = text.split("Examples:")[1]
    missing = sorted(f for f in flags if f not in examples and f not in ("--help",))
    assert not missing, missing


def test_closed_pipe_exits_141_quietly(run, tmp_path):
    import subprocess
    import sys

    evs = jsonl([{"ts": T0 + i * M} for i in range(20000)])
    f = tmp_path / "e.jsonl"
    f.write_text(evs)
    # 20000 rows are far more than a pipe holds, so window is still writing when head exits
    p = subprocess.run(["bash", "-c", f"{sys.executable} -m streamctl window {f} --tumbling 1m | head -1; "
                        "exit ${PIPESTATUS[0]}"], capture_output=True)
    assert p.stdout.count(b"\n") == 1
    assert p.returncode == 141 and p.stderr == b""


@pytest.mark.parametrize("kind,size,hop", [("tumbling", M, 0), ("hopping", 5 * M, M), ("sliding", M, 0),
                                           ("session", 2 * M, 0)])
def test_state_is_bounded_by_open_windows_not_input_length(kind, size, hop):
    cfg = WindowConfig(kind=kind, size=size, hop=hop, by=["u"], aggs=["count", "p99:v"], lateness=10 * S)
    run = WindowRun(cfg, is_log=False)
    peak = {"windows": 0, "events": 0}

    def recs():
        for i in range(30_000):
            # 20 users, one event every 200 ms each; a session gap every 5 minutes per user
            t = T0 + i * 10 + (i // 600) * 3 * M
            yield {"offset": i, "partition": 0, "key": None, "value": {"ts": t, "u": f"u{i % 20}", "v": i % 7}}
            if i % 1000 == 0:
                op = run.op
                peak["windows"] = max(peak["windows"], op.open_windows())
                if kind == "sliding":
                    peak["events"] = max(peak["events"], sum(len(e) for e in op.events.values()))

    rows: list = []
    run.feed(recs(), rows.extend)
    assert run.stats.late == 0 and rows
    # 30 000 events over ~2.5 h of event time; open state stays at a few minutes' worth
    if kind == "sliding":
        # pending rows: events within the lateness (10 s at 100 events/s); kept events: SIZE + lateness
        assert peak["windows"] <= 1100 and peak["events"] <= 7100
    else:
        assert peak["windows"] <= 20 * (size // hop if hop else 1) + 20


@pytest.mark.parametrize("window", [["--tumbling", "1m"], ["--hopping", "2m/1m"], ["--session", "30s"]])
def test_cli_rows_of_values_holding_commas(tmp_path, window):
    """Aggregates that are any JSON value (first, last) written as JSON lines, commas inside them too."""
    from tests.conftest import run_cli

    vals = ["x,y", {"a": [1, 2], "b": "},{"}, [1, "2,3"], 4.5, None]
    f = tmp_path / "in.jsonl"
    f.write_text("".join(json.dumps({"ts": T0 + i * 1000, "k": f"k{i % 2}", "v": v}) + "\n"
                         for i, v in enumerate(vals)))
    p = run_cli("window", str(f), *window, "--by", "k", "--agg", "first:v", "--agg", "last:v", "--agg", "count")
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    got = {(r["key"], r["first_v"] == vals[0] or r["first_v"] == vals[1], json.dumps(r["last_v"])) for r in rows}
    assert got == {("k0", True, json.dumps(vals[4])), ("k1", True, json.dumps(vals[3]))}


def test_cli_sum_beyond_64_bits_is_written_exactly(tmp_path):
    """A sum of big ints passes 64 bits: written as its exact JSON number, no traceback, both outputs."""
    from tests.conftest import run_cli

    big = (1 << 63) - 1
    f = tmp_path / "in.jsonl"
    f.write_text("".join(json.dumps({"ts": T0 + i, "k": "a", "v": big}) + "\n" for i in range(3)))
    p = run_cli("window", str(f), "--tumbling", "1m", "--by", "k", "--agg", "sum:v", "--agg", "last:v")
    assert p.returncode == 0, p.stderr
    assert p.stdout.endswith(b'"key":"a","sum_v":%d,"last_v":%d}\n' % (3 * big, big))
    p = run_cli("window", str(f), "--tumbling", "1m", "--by", "k", "--agg", "sum:v", "--output", "csv")
    assert p.returncode == 0 and p.stdout.splitlines()[1].endswith(b",a,%d" % (3 * big)), p.stderr


KEYS_IN_ORDER = [None, False, True, -1, 2.5, 9, 10, "a\"b", "ab", "ab!", "u10", "u2", "é", [1, 9], [1, 10], {"a": 1}]


@pytest.mark.parametrize("kind", [("--tumbling", "1m"), ("--hopping", "1m/30s"), ("--session", "1m"),
                                  ("--sliding", "1m")], ids=lambda k: k[0])
def test_rows_closing_together_come_by_group_key(tmp_path, kind):
    """Ties by window start, then group key: null, false, true, numbers by value (9 before 10),
    strings by code point ("ab" before "ab!"), arrays element by element, objects; whatever order
    the keys arrived in."""
    from conftest import run_cli

    path = tmp_path / "k.jsonl"
    shuffled = KEYS_IN_ORDER[::-1][1::2] + KEYS_IN_ORDER[::-1][::2]
    path.write_bytes(b"".join(orjson.dumps({"t": "2026-01-01T00:00:01Z", "k": k}) + b"\n" for k in shuffled))
    p = run_cli("window", str(path), *kind, "--time-field", "t", "--by", "k", check=True)
    rows = [orjson.loads(line) for line in p.stdout.splitlines()]
    by_start: dict = {}
    for r in rows:
        by_start.setdefault(r["window"]["start"], []).append(r["key"])
    assert by_start and all(keys == KEYS_IN_ORDER for keys in by_start.values()), by_start


@pytest.mark.parametrize("kind", ["tumbling", "hopping", "sliding", "session"])
def test_objects_differing_only_in_field_order_are_one_group(tmp_path, kind):
    """One value to --where, distinct and join keys, so one group to --by too (its key written with
    sorted fields), whichever fold route reads the keys: the CLI over a file and the core by records."""
    from tests.conftest import run_cli

    events = [{"ts": T0, "g": {"a": 1, "b": {"y": 1, "x": 2}}, "v": 1},
              {"ts": T0 + S, "g": {"b": {"x": 2, "y": 1}, "a": 1}, "v": 2}]
    flags = {"tumbling": ["--tumbling", "1m"], "hopping": ["--hopping", "1m/1m"], "sliding": ["--sliding", "1m"],
             "session": ["--session", "1m"]}[kind]
    f = tmp_path / "e.jsonl"
    f.write_text(jsonl(events))
    g = b'{"a":1,"b":{"x":2,"y":1}}'
    for by, key in ((["--by", "g"], g), (["--by", "g", "--by", "g.a"], b"[%b,1]" % g)):
        p = run_cli("window", str(f), *flags, *by, "--agg", "sum:v", check=True)
        rows = [orjson.loads(line) for line in p.stdout.splitlines()]
        assert {orjson.dumps(r["key"]) for r in rows} == {key}, rows
        assert rows[-1]["sum_v"] == 3, rows
    rows, _ = window(events, kind=kind, size=M, hop=M if kind == "hopping" else None, by=["g"], aggs=["sum:v"])
    assert len({orjson.dumps(r["key"]) for r in rows}) == 1 and rows[-1]["sum_v"] == 3, rows


@pytest.mark.parametrize("name", ["window", "key", "revision", "op"])
def test_an_output_name_the_row_itself_uses_is_refused(name):
    """`op` too: a row with an aggregate named op could not be told from a delete row."""
    with pytest.raises(UsageError, match=f"'{name}' is taken by the row itself"):
        window([{"ts": T0}], aggs=[f"{name}=last:v"])


def test_options_only_the_local_engine_runs_are_refused_for_a_uri(run, tmp_path):
    """A URI input is Spark's alone, so an option the Spark job cannot apply is refused there too,
    naming the option, rather than written into a job that would ignore it."""
    job = str(tmp_path / "job.py")
    uri = "hdfs://nn/events"
    for extra, said in ((["--emit-job", job, "--late-out", str(tmp_path / "late")], b"--late-out"),
                        (["--emit-job", job, "--emit", "update"], b"--emit update"),
                        (["--emit-job", job, "--late", "correct"], b"--late correct"),
                        (["--emit", "update"], b"--emit update"),
                        (["--engine", "spark", "--processing-time"], b"--processing-time")):
        p = run("window", uri, "--tumbling", "1m", *extra)
        assert p.returncode == 2 and b"Spark engine cannot run this: " + said in p.stderr, (extra, p.stderr)
    p = run("window", uri, "--tumbling", "1m", "--emit-job", job, "--engine", "fast")
    assert p.returncode == 2 and b"--engine must be one of" in p.stderr  # checked though --emit-job chose Spark
    assert not (tmp_path / "job.py").exists()
    p = run("window", uri, "--tumbling", "1m", "--emit-job", job)
    assert p.returncode == 0 and "def main(spark" in open(job).read()


def test_integers_beyond_64_bits_pass_through_exactly(tmp_path):
    """first, last and --by give an integer beyond 64 bits exactly as the input holds it, as jq and
    consume do (orjson reads one as a float), from a plain file, stdin and a log, as JSON lines and
    CSV; join's left and right values too. A sum over such integers may be a float."""
    from tests.conftest import run_cli

    line = '{"t":0,"v":100000000000000000000,"o":{"n":100000000000000000001},"neg":-9223372036854775809}\n'
    f = tmp_path / "big.jsonl"
    f.write_text(line)
    log = str(tmp_path / "log")
    run_cli("produce", log, input=line, check=True)
    args = ("--tumbling", "1m", "--time-field", "t", "--agg", "first:v", "--agg", "last:o", "--agg", "first:neg",
            "--by", "v")
    for src, stdin in ((str(f), None), ("-", line), (log, None)):
        p = run_cli("window", src, *args, input=stdin, check=True)
        row = json.loads(p.stdout)
        assert row["key"] == row["first_v"] == 100000000000000000000, p.stdout
        assert row["last_o"] == {"n": 100000000000000000001} and row["first_neg"] == -9223372036854775809
        p = run_cli("window", src, *args, "--output", "csv", input=stdin, check=True)
        assert b"100000000000000000000,100000000000000000000," in p.stdout and b"100000000000000000001" in p.stdout
    for left in (str(f), log):
        for how in (["--within", "1m", "--time-field", "t"], ["--table"]):
            p = run_cli("join", left, left, "--on", "v", *how, check=True)
            row = json.loads(p.stdout)
            assert row["key"] == 100000000000000000000 and row["left"] == row["right"] == json.loads(line), p.stdout


def test_rows_from_a_pipe_come_out_as_their_windows_close(tmp_path):
    """`consume LOG --follow --value | streamctl window -`: with the pipe still open, the row of a
    window the watermark closed is written (and flushed) at once, not when input ends."""
    import select
    import subprocess

    from tests.conftest import CLI, cli_env

    p = subprocess.Popen([*CLI, "window", "-", "--tumbling", "10s", "--time-field", "t"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
    try:
        assert p.stdin is not None and p.stdout is not None
        for t in (0, 1000, 2000, 12000):  # the last one closes the first window
            p.stdin.write(b'{"t":%d}\n' % (T0 + t))
        p.stdin.flush()
        ready, _, _ = select.select([p.stdout], [], [], 60)
        assert ready, "no row while the pipe was open"
        first = p.stdout.readline()
        assert json.loads(first)["count"] == 3
        p.stdin.close()
        rest = p.stdout.read()
        assert p.wait(timeout=60) == 0
        assert [json.loads(x)["count"] for x in rest.splitlines()] == [1]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
