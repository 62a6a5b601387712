"""streamctl join: hand-checked cases for each kind and --how, determinism, and the CLI."""

from __future__ import annotations

import os
from typing import Any

import orjson
import pytest

from conftest import run_cli
from streamctl.processing.joins import driver as joining
from streamctl.processing.joins.stream_stream import StreamStreamJoin
from streamctl.processing.joins.stream_table import TableAsOfTime, TableAtPosition
from streamctl.processing.joins.table_table import TableTableJoin
from streamctl.storage import log as logmod
from streamctl.storage import record

L, R = 0, 1


def rec(key: Any, value: Any, ts: int | None = None) -> dict:
    r = {"offset": 0, "partition": 0, "key": key, "value": value}
    if ts is not None:
        r["ts"] = ts
    return r


def join_rows(kind: str, items: list[tuple[int, dict]], **kw: Any) -> list[dict]:
    rows: list[dict] = []
    spec = joining.make_spec("L", "R", within=kw.pop("within", None), table=kind == "table",
                             tables=kind == "tables", **kw)
    joining.run(spec,
                lambda k, lv, rv: rows.append({"key": k, "left": lv, "right": rv}),
                lambda op, k, lv, rv: rows.append({"op": op, "key": k, "left": lv, "right": rv}),
                items=iter(items))
    return rows


def pairs(rows: list[dict]) -> list[tuple]:
    return [(r["key"], r["left"], r["right"]) for r in rows]


# ---------------------------------------------------------------- stream-stream

SEARCHES_CLICKS = [
    (L, rec("q1", "s1", 1000)),     # matched by c1 at exactly 1000 ms apart (inclusive)
    (R, rec("q2", "c0", 1500)),     # a click that arrives before its search
    (L, rec("q2", "s2", 1600)),     # pairs with c0 on arrival (100 ms apart)
    (R, rec("q1", "c1", 2000)),     # 1000 ms after s1: the boundary, matches
    (L, rec("q3", "s3", 2000)),     # never clicked
    (R, rec("q3", "c3", 3001)),     # 1001 ms after s3: one ms too late, no pair
    (L, rec("q4", "s4", 5000)),     # watermark 5000 passes 2000 + 1000 and 3001 + 1000
    (R, rec(None, "cx", 5000)),     # null key: never matches
]


def test_stream_inner_pairs_and_boundary():
    rows = join_rows("stream", SEARCHES_CLICKS, within="1s")
    assert pairs(rows) == [("q2", "s2", "c0"), ("q1", "s1", "c1")]


def test_stream_left_emits_unmatched_once_watermark_passes():
    rows = join_rows("stream", SEARCHES_CLICKS, within="1s", how="left")
    assert pairs(rows) == [
        ("q2", "s2", "c0"),
        ("q1", "s1", "c1"),
        ("q3", "s3", None),   # evicted when s4 moved the watermark to 5000 > 2000 + 1000
        ("q4", "s4", None),   # end of input
    ]


def test_stream_right_and_outer():
    right = join_rows("stream", SEARCHES_CLICKS, within="1s", how="right")
    assert pairs(right) == [("q2", "s2", "c0"), ("q1", "s1", "c1"), ("q3", None, "c3"), (None, None, "cx")]
    outer = join_rows("stream", SEARCHES_CLICKS, within="1s", how="outer")
    assert pairs(outer) == [
        ("q2", "s2", "c0"), ("q1", "s1", "c1"),
        ("q3", "s3", None),            # at s4: evictions by (time, position): s3 (2000)
        ("q3", None, "c3"),            # then c3 (3001)
        ("q4", "s4", None), (None, None, "cx"),   # end of input: (5000, pos 7), (5000, pos 8)
    ]


def test_stream_no_eager_null():
    """The unmatched row comes only when the watermark passes t + within, not before."""
    out: list[tuple] = []
    j = StreamStreamJoin(1000, "left", lambda k, lv, rv: out.append((k, lv, rv)))
    j.push(L, "a", "a", 1000, "s", 1)
    j.push(R, "b", "b", 2000, "x", 2)     # watermark 2000 = 1000 + 1000: not passed yet
    assert out == []
    j.push(R, "a", "a", 1999, "c", 3)     # still in the window: matches
    assert out == [("a", "s", "c")]
    j.push(L, "z", "z", 2001, "y", 4)     # passes 2000: s is done (matched), no null row
    assert out == [("a", "s", "c")]
    assert j.state_size() == 3
    j.push(L, "z", "z", 9000, "w", 5)
    assert out == [("a", "s", "c"), ("z", "y", None)]
    assert j.state_size() == 1            # state bounded by the window
    j.finish()
    assert out[-1] == ("z", "w", None)


def test_stream_late_event_is_counted_not_joined():
    out: list[tuple] = []
    j = StreamStreamJoin(1000, "outer", lambda k, lv, rv: out.append((k, lv, rv)))
    assert not j.push(L, "a", "a", 1000, "s", 1)
    assert not j.push(L, "b", "b", 5000, "t", 2)  # evicts s unmatched
    assert j.push(R, "a", "a", 1500, "late", 3)   # 1500 + 1000 < 5000: late, not joined, not emitted
    assert not j.push(R, "b", "b", 4000, "ok", 4)  # 4000 + 1000 = 5000: the boundary, still on time
    j.finish()
    assert out == [("a", "s", None), ("b", "t", "ok")]
    assert j.late == 1


@pytest.mark.parametrize("t,late", [(1000, True), (1001, False), (900, True)])
def test_stream_event_whose_partner_left_is_late(t, late):
    """L a@0 leaves when the watermark reaches 1500 (0 + 1000 < 1500), written unmatched. R a@t is not
    behind the window (t + 1000 >= 1500); it is late exactly when L a was its partner (|t - 0| <= 1000,
    the boundary included): joined now it would contradict that row, left out it would lose the pair."""
    out: list[tuple] = []
    j = StreamStreamJoin(1000, "outer", lambda k, lv, rv: out.append((k, lv, rv)))
    assert not j.push(L, "a", "a", 0, "s", 1)
    assert not j.push(R, "z", "z", 1500, "z", 2)
    assert out == [("a", "s", None)]
    assert j.push(R, "a", "a", t, "c", 3) is late
    j.finish()
    assert out == [("a", "s", None), *([] if late else [("a", None, "c")]), ("z", None, "z")]
    assert j.late == int(late)


def test_stream_times_of_events_that_left_are_forgotten():
    """The times kept for that rule are forgotten as the watermark moves on: state stays bounded."""
    j = StreamStreamJoin(10, "inner", lambda *a: None)
    held = []
    for i in range(5000):
        j.push(i % 2, f"k{i}", f"k{i}", i, "v", i + 1)
        held.append(sum(map(len, (*j.gone, *j.gone_old))))
    assert max(held) <= 40  # the events that left over at most 3 * 10 ms of watermark


def test_stream_late_event_could_still_see_a_partner_but_is_left_out():
    """A late event is left out whole, even where a partner is still in the window: its other
    partners left already, so joining it with the rest would depend on how late it came."""
    out: list[tuple] = []
    j = StreamStreamJoin(1000, "left", lambda k, lv, rv: out.append((k, lv, rv)))
    j.push(L, "a", "a", 4500, "s", 1)
    j.push(L, "b", "b", 5000, "t", 2)
    assert j.push(R, "a", "a", 3900, "c", 3)       # 3900 + 1000 < 5000: late, though s (4500) is 600 ms away
    j.finish()
    assert out == [("a", "s", None), ("b", "t", None)]


def test_stream_lateness_shifts_the_watermark_for_matching_and_eviction():
    items = [(L, rec("a", "s", 1000)), (L, rec("b", "t", 5000)), (R, rec("a", "c", 1500)),
             (L, rec("z", "u", 9000))]
    spec_rows = join_rows("stream", items, within="1s", how="left")
    assert pairs(spec_rows) == [("a", "s", None), ("b", "t", None), ("z", "u", None)]  # c late
    rows = join_rows("stream", items, within="1s", how="left", lateness="3s")
    # watermark 5000 - 3000 = 2000 <= 1000 + 1000: s is still in the window when c arrives
    assert pairs(rows) == [("a", "s", "c"), ("b", "t", None), ("z", "u", None)]
    late = [joining.run(joining.make_spec("L", "R", within="1s", lateness=d), lambda *a: None,
                        items=iter(items)).late for d in ("2499ms", "2500ms", "3000ms")]
    # c is late while 1500 + 1000 < 5000 - lateness, and also while its partner s has left before it
    # came (1000 + 1000 < 5000 - lateness): s was written unmatched, so c cannot pair with it any more
    assert late == [[0, 1], [0, 1], [0, 0]]


def test_stream_late_out_lines_and_counts_per_side():
    lines: list[tuple[int, bytes]] = []
    items = [(L, rec("a", {"n": 1}, 10_000)), (R, rec("a", {"n": 2}, 1_000)), (L, rec("a", {"n": 3}, 2_000))]
    stats = joining.run(joining.make_spec("L", "R", within="1s", how="outer"), lambda *a: None, items=iter(items),
                        late=lambda side, line: lines.append((side, line)))
    assert stats.late == [1, 1]
    assert [s for s, _ in lines] == [R, L]
    assert orjson.loads(lines[0][1]) == rec("a", {"n": 2}, 1_000) and lines[0][1].endswith(b"\n")


def test_stream_many_to_many_in_input_order():
    items = [(L, rec("k", "l1", 100)), (L, rec("k", "l2", 200)), (R, rec("k", "r1", 150)),
             (R, rec("k", "r2", 250))]
    assert pairs(join_rows("stream", items, within="100ms")) == [
        ("k", "l1", "r1"), ("k", "l2", "r1"), ("k", "l2", "r2")]


def test_stream_keys_compare_as_json():
    items = [(L, rec("k", {"id": 7, "n": 1}, 100)), (R, rec("k", {"id": "7"}, 100)),
             (R, rec("k", {"id": 7.0}, 100)), (R, rec("k", {"id": 7}, 100))]
    rows = join_rows("stream", items, within="1s", on="id")
    assert pairs(rows) == [(7, {"id": 7, "n": 1}, {"id": 7})]


def test_stream_event_without_time_is_skipped_and_counted():
    spec = joining.make_spec("L", "R", within="1s", time_field="at")
    rows: list = []
    stats = joining.run(spec, lambda *a: rows.append(a), None,
                        items=iter([(L, rec("k", {"at": "2026-11-21T10:00:00Z"})), (R, rec("k", {"at": "soon"})),
                                    (R, rec("k", {"at": "2026-11-21T10:00:00.500Z"}))]))
    assert rows == [("k", {"at": "2026-11-21T10:00:00Z"}, {"at": "2026-11-21T10:00:00.500Z"})]
    assert stats.no_time == [0, 1]


# ---------------------------------------------------------------- stream-table

PROFILE_ITEMS = [
    (L, rec("u1", "e0", 1)),            # before any profile: left -> null, inner -> dropped
    (R, rec("u1", {"plan": "free"}, 2)),
    (L, rec("u1", "e1", 3)),
    (R, rec("u1", {"plan": "pro"}, 4)),  # a table update between two events
    (L, rec("u1", "e2", 5)),
    (R, rec("u1", None, 6)),             # tombstone
    (L, rec("u1", "e3", 7)),
    (L, rec(None, "e4", 8)),
]


def test_table_position_left():
    assert pairs(join_rows("table", PROFILE_ITEMS, how="left")) == [
        ("u1", "e0", None), ("u1", "e1", {"plan": "free"}), ("u1", "e2", {"plan": "pro"}),
        ("u1", "e3", None), (None, "e4", None)]


def test_table_position_inner():
    assert pairs(join_rows("table", PROFILE_ITEMS)) == [
        ("u1", "e1", {"plan": "free"}), ("u1", "e2", {"plan": "pro"})]


def test_table_on_value_path_and_tombstone_by_record_key():
    items = [(R, rec("7", {"id": 7, "name": "ann"})), (L, rec(None, {"user": 7, "x": 1})),
             (R, rec("7", None)), (L, rec(None, {"user": 7, "x": 2}))]
    assert pairs(join_rows("table", items, on="user=id", how="left")) == [
        (7, {"user": 7, "x": 1}, {"id": 7, "name": "ann"}), (7, {"user": 7, "x": 2}, None)]


def test_table_as_of_event_time():
    items = [
        (R, rec("u", {"v": 1}, 100)),
        (R, rec("u", {"v": 2}, 200)),
        (L, rec("u", "at150", 150)),        # behind the watermark (200): resolves at once, sees v1
        (L, rec("u", "at200", 200)),        # waits: a version at 200 could still come
        (R, rec("u", {"v": 3}, 200)),       # same time, later position: the newer version at 200
        (L, rec("u", "at250", 250)),        # moves the watermark past 200: at200 resolves -> v3
        (R, rec("u", None, 240)),           # late tombstone at 240, before at250's time
        (L, rec("u", "at90", 90)),          # before every version
        (L, rec("u", "at300", 300)),        # at250 resolves: deleted at 240 -> no row
    ]
    rows = pairs(join_rows("table", items, as_of="event-time", how="left"))
    assert rows == [("u", "at150", {"v": 1}), ("u", "at200", {"v": 3}), ("u", "at90", None),
                    ("u", "at250", None), ("u", "at300", None)]
    inner = pairs(join_rows("table", items, as_of="event-time"))
    assert inner == [("u", "at150", {"v": 1}), ("u", "at200", {"v": 3})]


def test_table_as_of_lateness_waits_longer_and_counts_late_changes():
    items = [
        (R, rec("u", {"v": 1}, 100)),
        (L, rec("u", "at150", 150)),
        (L, rec("x", "tick", 400)),         # watermark 400 (lateness 0): at150 resolves -> v1
        (R, rec("u", {"v": 2}, 120)),       # a change behind the watermark: late for at150
        (L, rec("u", "at300", 300)),        # behind the watermark: resolves at once, exact -> v2
    ]
    spec = joining.make_spec("L", "R", table=True, as_of="event-time", how="left")
    rows: list = []
    stats = joining.run(spec, lambda *a: rows.append(a), items=iter(items))
    assert rows[:2] == [("u", "at150", {"v": 1}), ("x", "tick", None)] or rows[0] == ("u", "at150", {"v": 1})
    assert ("u", "at300", {"v": 2}) in rows
    assert stats.late == [0, 1]
    # with lateness 300 ms the watermark is 100 when v2 arrives: at150 still waits, and sees v2
    rows2: list = []
    spec2 = joining.make_spec("L", "R", table=True, as_of="event-time", how="left", lateness="300ms")
    stats2 = joining.run(spec2, lambda *a: rows2.append(a), items=iter(items))
    assert ("u", "at150", {"v": 2}) in rows2 and stats2.late == [0, 0]


def test_table_as_of_retention():
    items = [(R, rec("u", {"v": 1}, 100)), (R, rec("u", {"v": 2}, 1000)), (L, rec("x", "tick", 5000)),
             (L, rec("u", "old", 500)), (L, rec("u", "recent", 4500))]
    full = pairs(join_rows("table", items, as_of="event-time", how="left"))
    assert full[:2] == [("u", "old", {"v": 1}), ("u", "recent", {"v": 2})]
    kept = pairs(join_rows("table", items, as_of="event-time", how="left", table_retention="2s"))
    # watermark 5000 - 2 s = 3000: v2 (1000) is the newest version at or before it, v1 is gone
    assert kept[:2] == [("u", "old", None), ("u", "recent", {"v": 2})]


def test_table_as_of_object_api_state():
    out: list = []
    j = TableAsOfTime(False, lambda *a: out.append(a), retention=1000)
    for i in range(100):
        j.change("k", i * 1000, {"v": i}, i)
    j.event("k", "k", 99_500, "e", 1000)
    j.finish()
    assert out == [("k", "e", {"v": 99})]
    assert len(j.history["k"].times) <= 2
    p = TableAtPosition(True, lambda *a: out.append(a))
    p.change("k", 1)
    p.change("k", None)
    assert p.state_size() == 0


# ---------------------------------------------------------------- table-table

def test_tables_changelog():
    items = [
        (L, rec("alice", {"post": "p1"})),       # no right row yet: nothing
        (R, rec("alice", ["bob"])),              # joins the current left row
        (L, rec("alice", {"post": "p2"})),       # upsert with the current right
        (R, rec("alice", ["bob", "carol"])),
        (R, rec("dave", ["x"])),                 # no left: nothing
        (L, rec("alice", None)),                 # delete, carrying the row as it was
        (L, rec("alice", None)),                 # deleting a missing key: nothing
        (R, rec("erin", None)),                  # nothing
        (L, rec("dave", {"post": "d1"})),
    ]
    rows = join_rows("tables", items)
    assert rows == [
        {"op": "upsert", "key": "alice", "left": {"post": "p1"}, "right": ["bob"]},
        {"op": "upsert", "key": "alice", "left": {"post": "p2"}, "right": ["bob"]},
        {"op": "upsert", "key": "alice", "left": {"post": "p2"}, "right": ["bob", "carol"]},
        {"op": "delete", "key": "alice", "left": {"post": "p2"}, "right": ["bob", "carol"]},
        {"op": "upsert", "key": "dave", "left": {"post": "d1"}, "right": ["x"]},
    ]


def test_tables_right_delete():
    out: list = []
    j = TableTableJoin(lambda *a: out.append(a))
    j.change(L, "k", "k", 1)
    j.change(R, "k", "k", 2)
    j.change(R, "k", "k", None)
    assert out == [("upsert", "k", 1, 2), ("delete", "k", 1, 2)]


# ---------------------------------------------------------------- flags

@pytest.mark.parametrize("kw,msg", [
    ({}, "choose one join kind"),
    ({"within": "1s", "table": True}, "choose one join kind"),
    ({"table": True, "how": "outer"}, "takes inner|left"),
    ({"tables": True, "how": "left"}, "takes inner"),
    ({"within": "1s", "as_of": "event-time"}, "--as-of needs --table"),
    ({"table": True, "table_retention": "1h"}, "needs --as-of event-time"),
    ({"within": "soon"}, "invalid duration"),
    ({"within": "1s", "on": "a=b=c"}, "LEFTPATH=RIGHTPATH"),
    ({"within": "1s", "on": "id="}, "a path on each side of ="),
    ({"within": "1s", "on": "=id"}, "a path on each side of ="),
    ({"within": "1s", "time_field": "at= "}, "a path on each side of ="),
    ({"table": True, "lateness": "1s"}, "--lateness needs a watermark"),
    ({"tables": True, "lateness": "1s"}, "--lateness needs a watermark"),
    ({"within": "1s", "lateness": "-1s"}, "invalid duration"),
])
def test_make_spec_refuses(kw, msg):
    from streamctl.errors import UsageError

    with pytest.raises(UsageError, match=msg):
        joining.make_spec("L", "R", **kw)


# ---------------------------------------------------------------- CLI, logs, determinism

def write_log(path: str, partitions: int, records: list[tuple[Any, Any, int]], place=None) -> None:
    """A log with chosen ts: records (key, value, ts) in ts order; place(i, key) -> partition."""
    logmod.open_or_create(path, partitions, None, 0)
    offsets = [0] * partitions
    files = [open(os.path.join(path, f"p{p}", "00000000000000000000.jsonl"), "ab") for p in range(partitions)]
    try:
        for i, (key, value, ts) in enumerate(records):
            p = place(i, key) if place else i % partitions
            files[p].write(record.encode(offsets[p], p, ts, orjson.dumps(key), orjson.dumps(value)))
            offsets[p] += 1
    finally:
        for f in files:
            f.close()


def jl(proc) -> list[dict]:
    assert proc.returncode == 0, proc.stderr.decode()
    return [orjson.loads(x) for x in proc.stdout.splitlines()]


SEARCHES = [(f"q{i}", {"q": i, "user": f"u{i % 3}"}, 1_763_719_200_000 + i * 7_000) for i in range(40)]
CLICKS = [(f"q{i}", {"click": i}, 1_763_719_200_000 + i * 7_000 + (i % 5) * 3_000) for i in range(0, 40, 2)]


def test_cli_determinism_across_partition_layouts(tmp_path):
    outs = set()
    for n, place in ((1, None), (3, None), (4, lambda i, k: (i * 7) % 4), (2, lambda i, k: int(k[1:]) % 2)):
        s, c = str(tmp_path / f"s{n}"), str(tmp_path / f"c{n}")
        write_log(s, n, SEARCHES, place)
        write_log(c, n, sorted(CLICKS, key=lambda r: r[2]), place)
        for how, flags in (("inner", ["--within", "5s"]), ("outer", ["--within", "5s", "--how", "outer"]),
                           ("table", ["--table", "--how", "left"]), ("tables", ["--tables"])):
            p1 = run_cli("join", s, c, *flags, "--engine", "local")
            p2 = run_cli("join", s, c, *flags, "--engine", "local")
            assert p1.returncode == 0, p1.stderr
            assert p1.stdout == p2.stdout
            assert p1.stdout
            outs.add((how, p1.stdout))
    assert len(outs) == 4  # one output per kind and --how, whatever the layout
    inner = [orjson.loads(x) for how, o in outs if how == "inner" for x in o.splitlines()]
    # clicks 0..4 s after their search: i % 5 * 3 s <= 5 s for i % 5 in (0, 1)
    assert [r["key"] for r in inner] == [f"q{i}" for i in range(0, 40, 2) if i % 5 in (0, 1)]


def test_cli_plain_files_and_outputs(tmp_path):
    s = tmp_path / "s.jsonl"
    c = tmp_path / "c.jsonl"
    s.write_text('{"id":"a","at":"2026-11-21T10:00:00Z"}\n{"id":"b","at":"2026-11-21T10:00:05Z"}\n')
    c.write_text('{"sid":"a","at":"2026-11-21T10:00:01Z"}\n')
    rows = jl(run_cli("join", str(s), str(c), "--within", "1s", "--on", "id=sid", "--time-field", "at",
                      "--how", "left", "--engine", "local"))
    assert rows == [{"key": "a", "left": {"id": "a", "at": "2026-11-21T10:00:00Z"},
                     "right": {"sid": "a", "at": "2026-11-21T10:00:01Z"}},
                    {"key": "b", "left": {"id": "b", "at": "2026-11-21T10:00:05Z"}, "right": None}]
    csvp = run_cli("join", str(s), str(c), "--within", "1s", "--on", "id=sid", "--time-field", "at",
                   "--output", "csv", "--engine", "local")
    assert csvp.stdout.decode().splitlines() == [
        "key,left,right",
        'a,"{""id"":""a"",""at"":""2026-11-21T10:00:00Z""}","{""sid"":""a"",""at"":""2026-11-21T10:00:01Z""}"']
    tbl = run_cli("join", str(s), str(c), "--within", "1s", "--on", "id=sid", "--time-field", "at",
                  "--output", "table", "--engine", "local")
    assert tbl.returncode == 0 and tbl.stdout.split()[:5] == [b"key", b"left.id", b"left.at", b"right.sid", b"right.at"]
    tbl = run_cli("join", str(s), str(c), "--within", "1s", "--on", "id=sid", "--time-field", "at", "--how", "left",
                  "--output", "table", "--engine", "local")
    assert tbl.stdout.split()[:5] == [b"key", b"left.id", b"left.at", b"right.sid", b"right.at"]
    tables = run_cli("join", str(s), str(s), "--tables", "--on", "id", "--output", "csv", "--engine", "local")
    assert tables.stdout.decode().splitlines()[0] == "key,left,right,op"


def test_cli_enrichment_from_stdin_and_tables(tmp_path):
    prof = tmp_path / "profiles.jsonl"
    prof.write_text('{"id":1,"name":"ann"}\n{"id":2,"name":"bob"}\n')
    ev = b'{"user":1,"n":1}\n{"user":3,"n":2}\n{"user":2,"n":3}\n'
    rows = jl(run_cli("join", "-", str(prof), "--table", "--on", "user=id", "--how", "left", "--engine", "local",
                      input=ev))
    assert [(r["key"], r["right"] and r["right"]["name"]) for r in rows] == [(1, "ann"), (3, None), (2, "bob")]
    posts = tmp_path / "posts.jsonl"
    posts.write_text('{"author":"a","text":"hi"}\n{"author":"a","text":"again"}\n')
    rows = jl(run_cli("join", str(posts), str(prof), "--tables", "--on", "author=name", "--engine", "local"))
    assert rows == []


@pytest.mark.parametrize("args,code,msg", [
    (["--within", "1s"], 2, "plain file: it has no key"),
    (["--table", "--on", "id", "--as-of", "event-time", "--time-field", "key"], 2, "LEFT "),
    (["--within", "1h", "--on", "id", "--time-field", "at=headers.t"], 2, "RIGHT "),
    (["--table", "--on", "ts"], 2, "plain file: it has no ts"),
    (["--table", "--on", "id", "--output", "xml"], 2, "--output must be one of"),
])
def test_cli_usage_errors(tmp_path, args, code, msg):
    f = tmp_path / "f.jsonl"
    f.write_text("{}\n")
    p = run_cli("join", str(f), str(f), *args)
    assert p.returncode == code, p.stderr
    assert msg in p.stderr.decode()
    assert b"Traceback" not in p.stderr


def test_cli_bad_json_is_data_error(tmp_path):
    f = tmp_path / "f.jsonl"
    f.write_text('{"id":1}\nnot json\n')
    p = run_cli("join", str(f), str(f), "--table", "--on", "id", "--engine", "local")
    assert p.returncode == 65 and b"invalid JSON" in p.stderr


def test_cli_help_examples_cover_flags():
    p = run_cli("join", "--help")
    text = p.stdout.decode()
    examples = text[text.index("Examples:"):]
    for flag in ("--within", "--table", "--tables", "--on", "--time-field", "--how", "--as-of", "--table-retention",
                 "--output", "--engine", "--spark-threshold", "--master", "--emit-job", "--unbuffered"):
        assert flag in examples, flag


def test_cli_corrupt_log_record_is_reported(tmp_path):
    s = str(tmp_path / "s")
    write_log(s, 2, SEARCHES[:4])
    with open(os.path.join(s, "p1", "00000000000000000000.jsonl"), "ab") as f:
        f.write(b'{"offset":2,"partition":1,"ts":"late","key":"x","value":1}\n')
    p = run_cli("join", s, s, "--within", "1s", "--engine", "local")
    assert p.returncode in (1, 2) and b"corrupt record" in p.stderr and b"Traceback" not in p.stderr


def test_cli_as_of_with_timeless_table_file_and_closed_pipe(tmp_path):
    prof = tmp_path / "profiles.jsonl"
    prof.write_text('{"id":1,"plan":"free"}\n')
    ev = tmp_path / "ev.jsonl"
    ev.write_text("".join(f'{{"user":1,"at":{1763719200 + i}}}\n' for i in range(20000)))
    rows = jl(run_cli("join", str(ev), str(prof), "--table", "--on", "user=id", "--as-of", "event-time",
                      "--time-field", "at", "--engine", "local"))
    assert len(rows) == 20000 and rows[0]["right"] == {"id": 1, "plan": "free"}
    import subprocess
    import sys

    p = subprocess.run(f"{sys.executable} -m streamctl join {ev} {prof} --table --on user=id --engine local | head -1",
                       shell=True, capture_output=True, executable="/bin/bash",
                       env={**os.environ, "PYTHONWARNINGS": ""})
    assert p.stdout.count(b"\n") == 1 and b"Traceback" not in p.stderr and b"Error" not in p.stderr


def test_cli_engine_choice_and_emit_job_to_stdout(tmp_path):
    f = tmp_path / "f.jsonl"
    f.write_text('{"id":1}\n')
    p = run_cli("join", str(f), str(f), "--table", "--on", "id")
    assert p.returncode == 0 and p.stderr == b""  # auto staying local below the threshold is silent
    p = run_cli("join", "-", str(f), "--table", "--on", "id", "--engine", "spark", input=b'{"id":1}\n')
    assert p.returncode == 2 and b"not stdin" in p.stderr
    p = run_cli("join", str(f), str(f), "--tables", "--on", "id", "--emit-job", "-")
    assert p.returncode == 0 and p.stdout.startswith(b"#!/usr/bin/env python3") and b"def main(spark" in p.stdout
    compile(p.stdout, "job.py", "exec")


def test_cli_enrichment_of_a_plain_file_with_a_partitioned_log_table(tmp_path):
    """A mixed run: plain events (a file, then stdin) against a 3-partition log changelog, both timed
    by a value field. The table's partitions merge by that time, a tombstone (no time of its own)
    applies at its partition's running maximum, and a straggler event sees the table as of its
    file's running maximum."""
    t0 = 1_763_719_200_000
    tb = str(tmp_path / "tb")
    changes = [("u1", {"id": "u1", "tier": "free", "at": t0}, t0), ("u2", {"id": "u2", "tier": "gold", "at": t0}, t0),
               ("u1", {"id": "u1", "tier": "gold", "at": t0 + 5000}, t0), ("u2", None, t0)]
    write_log(tb, 3, changes, place=lambda i, _k: (0, 1, 2, 2)[i])
    ev = tmp_path / "ev.jsonl"
    ev.write_bytes(b"".join(orjson.dumps({"user": u, "n": n, "at": t0 + s * 1000}) + b"\n"
                            for u, n, s in (("u1", 1, 1), ("u2", 2, 2), ("u1", 3, 6), ("u1", 4, 4), ("u2", 5, 7))))
    want = [(1, "free"), (2, "gold"), (3, "gold"), (4, "gold"), (5, None)]
    flags = ["--table", "--on", "user=id", "--time-field", "at", "--engine", "local"]
    for src, stdin in ((str(ev), None), ("-", ev.read_bytes())):
        rows = jl(run_cli("join", src, tb, *flags, "--how", "left", input=stdin))
        assert [(r["left"]["n"], r["right"] and r["right"]["tier"]) for r in rows] == want
        rows = jl(run_cli("join", src, tb, *flags, input=stdin))
        assert [r["left"]["n"] for r in rows] == [1, 2, 3, 4]


def test_cli_untimed_events_are_skipped_only_where_the_join_needs_their_time(tmp_path):
    """Stream-stream and --as-of event-time skip and count an event without a usable time; an
    enrichment as of position joins it (its place in the input order is enough), uncounted, and
    --help says which is which."""
    ev, tb = tmp_path / "e.jsonl", tmp_path / "t.jsonl"
    ev.write_text('{"u":1,"at":1000}\n{"u":1,"at":"soon"}\n{"u":1}\n')
    tb.write_text('{"u":1,"at":500}\n')
    common = [str(ev), str(tb), "--on", "u", "--time-field", "at"]
    for kind in (["--within", "1h"], ["--table", "--as-of", "event-time"]):
        p = run_cli("join", *common, *kind, check=True)
        assert len(jl(p)) == 1 and b"2 event(s) without a usable time" in p.stderr
    for output in ("jsonl", "csv"):
        p = run_cli("join", *common, "--table", "-o", output, check=True)
        assert len(p.stdout.splitlines()) == 3 + (output == "csv") and b"usable time" not in p.stderr
    text = " ".join(run_cli("join", "--help", check=True).stdout.decode().split())
    assert "stream-stream (--within) and --as-of event-time" in text
    assert "An enrichment as of position (--table) needs none" in text
