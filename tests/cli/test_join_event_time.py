"""Stream-stream joins on an event-time field, across partitions and inputs produced apart.

The input order merges every partition by the running max of its own event
time, so two logs produced minutes or a day apart, each partition in event-time
order, are joined exactly like a brute-force interval join: every pair with
equal key and |t_a - t_b| <= within, and (left/right/outer) every event without
one. A genuinely late event (its time + within behind the watermark when it
arrives) is counted on stderr and kept by --late-out, never joined.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import run_cli
from streamctl.processing.joins import driver as joining
from streamctl.storage.partitioner import partition_for_key

from test_join import write_log

T0 = 1_763_719_200_000  # 2025-11-21T10:00:00Z
MIN = 60_000
DAY = 86_400_000


def iso(ms: int) -> str:
    from streamctl.timeparse import format_iso

    return format_iso(ms)


def click_stream(n_searches: int = 240, seed: int = 11) -> tuple[list[dict], list[dict]]:
    """Searches by 12 users over ~40 minutes; clicks 0-3 per search, up to 100 s before or after it
    (so some are inside --within 1m and some are not). Each list is in event-time order."""
    rnd = random.Random(seed)
    searches, clicks = [], []
    t = T0
    for i in range(n_searches):
        t += rnd.choice([0, 1_000, 5_000, 17_000])
        user = f"u{rnd.randrange(12)}"
        searches.append({"user": user, "q": i, "at": iso(t)})
        for j in range(rnd.choice([0, 0, 1, 1, 2, 3])):
            clicks.append({"user": user, "q": i, "c": j, "at": iso(t + rnd.randint(-100_000, 100_000))})
    clicks.sort(key=lambda v: v["at"])
    return searches, clicks


def t_of(v: dict) -> int:
    from streamctl.timeparse import event_time_ms

    t = event_time_ms(v["at"])
    assert t is not None
    return t


def brute_force(lefts: list[dict], rights: list[dict], within: int, how: str, time=t_of) -> Counter:
    """Every (key, left, right) row of an interval join on user, as a multiset."""
    rows: Counter = Counter()
    lm = [False] * len(lefts)
    rm = [False] * len(rights)
    for i, a in enumerate(lefts):
        for j, b in enumerate(rights):
            if a["user"] == b["user"] and abs(time(a) - time(b)) <= within:
                rows[_row(a["user"], a, b)] += 1
                lm[i] = rm[j] = True
    if how in ("left", "outer"):
        rows.update(_row(a["user"], a, None) for i, a in enumerate(lefts) if not lm[i])
    if how in ("right", "outer"):
        rows.update(_row(b["user"], None, b) for j, b in enumerate(rights) if not rm[j])
    return rows


def _row(key: Any, left: Any, right: Any) -> bytes:
    return orjson.dumps({"key": key, "left": left, "right": right})


def keyed_log(path: str, values: list[dict], partitions: int, ts: list[int]) -> None:
    """A log keyed by user (Kafka's partitioner), records in the given order with the given ts."""
    write_log(path, partitions, [(v["user"], v, t) for v, t in zip(values, ts, strict=True)],
              place=lambda i, key: partition_for_key(key, partitions))


def rows_of(proc) -> Counter:
    assert proc.returncode == 0, proc.stderr.decode()
    return Counter(proc.stdout.splitlines())


@pytest.fixture(scope="module")
def produced(tmp_path_factory) -> dict[str, str]:
    """The same searches and clicks as logs written by `streamctl produce` (searches first,
    clicks after: every search's ts is before every click's), and as a day apart."""
    d = tmp_path_factory.mktemp("eventtime")
    searches, clicks = click_stream()
    paths: dict[str, str] = {}
    for name, values in (("searches", searches), ("clicks", clicks)):
        f = d / f"{name}.jsonl"
        f.write_bytes(b"".join(orjson.dumps(v) + b"\n" for v in values))
        paths[name + ".jsonl"] = str(f)
        log = str(d / name)
        p = run_cli("produce", log, str(f), "--key-field", "user", "--partitions", "3")
        assert p.returncode == 0, p.stderr.decode()
        paths[name] = log
    # a day apart: clicks appended 24 h after the searches (ts), each partition in event-time order
    keyed_log(str(d / "s_day"), searches, 3, [T0 + i for i in range(len(searches))])
    keyed_log(str(d / "c_day"), clicks, 3, [T0 + DAY + i for i in range(len(clicks))])
    paths["s_day"], paths["c_day"] = str(d / "s_day"), str(d / "c_day")
    return paths


JOIN = ["--within", "1m", "--on", "key", "--time-field", "value.at", "--engine", "local"]


@pytest.mark.parametrize("how", ["inner", "left", "right", "outer"])
@pytest.mark.parametrize("pair", ["produced", "day_apart"])
def test_logs_produced_apart_join_like_brute_force(produced, how, pair):
    searches, clicks = click_stream()
    left, right = ("searches", "clicks") if pair == "produced" else ("s_day", "c_day")
    p = run_cli("join", produced[left], produced[right], *JOIN, "--how", how)
    expected = brute_force(searches, clicks, MIN, how)
    assert sum(expected.values()) > 100
    assert rows_of(p) == expected
    assert b"late" not in p.stderr


def test_plain_files_and_logs_give_the_same_rows(produced):
    searches, clicks = click_stream()
    expected = brute_force(searches, clicks, MIN, "outer")
    plain = run_cli("join", produced["searches.jsonl"], produced["clicks.jsonl"], "--within", "1m", "--on", "user",
                    "--time-field", "at", "--how", "outer", "--engine", "local")
    assert rows_of(plain) == Counter(_row(r["key"], r["left"], r["right"]) for r in
                                     map(orjson.loads, expected))
    mixed = run_cli("join", produced["s_day"], produced["clicks.jsonl"], "--within", "1m", "--on", "user",
                    "--time-field", "at", "--how", "outer", "--engine", "local")
    assert rows_of(mixed) == expected


def test_when_the_logs_were_appended_does_not_change_the_output(produced):
    """Seconds apart by `streamctl produce` or a day apart: the same event times in the same
    partitions give the same rows in the same order."""
    a = run_cli("join", produced["searches"], produced["clicks"], *JOIN, "--how", "outer")
    b = run_cli("join", produced["s_day"], produced["c_day"], *JOIN, "--how", "outer")
    assert a.returncode == 0 and a.stdout and a.stdout == b.stdout


# ---------------------------------------------------------------- late events

@pytest.fixture(scope="module")
def with_late(tmp_path_factory) -> dict[str, Any]:
    """The clicks log plus one click appended 10 minutes behind its partition (a straggler)."""
    d = tmp_path_factory.mktemp("late")
    searches, clicks = click_stream()
    target = searches[100]
    straggler = {"user": target["user"], "q": target["q"], "c": 99, "at": iso(t_of(target) + 5_000)}
    s, c = str(d / "s"), str(d / "c")
    keyed_log(s, searches, 3, [T0 + i for i in range(len(searches))])
    # the straggler goes after every click (by event time 10+ minutes later) in its partition
    keyed_log(c, [*clicks, straggler], 3, [T0 + DAY + i for i in range(len(clicks) + 1)])
    sf, cf = d / "s.jsonl", d / "c.jsonl"
    sf.write_bytes(b"".join(orjson.dumps(v) + b"\n" for v in searches))
    cf.write_bytes(b"".join(orjson.dumps(v) + b"\n" for v in [*clicks, straggler]))
    assert max(map(t_of, clicks)) - t_of(straggler) > 10 * MIN
    return {"s": s, "c": c, "s.jsonl": str(sf), "c.jsonl": str(cf), "searches": searches, "clicks": clicks,
            "straggler": straggler, "dir": d}


@pytest.mark.parametrize("how", ["inner", "outer"])
def test_late_event_is_counted_kept_and_not_joined(with_late, how):
    late_file = with_late["dir"] / f"late-{how}.jsonl"
    p = run_cli("join", with_late["s"], with_late["c"], *JOIN, "--how", how, "--late-out", str(late_file))
    # exactly the brute-force rows of everything but the straggler
    assert rows_of(p) == brute_force(with_late["searches"], with_late["clicks"], MIN, how)
    err = p.stderr.decode()
    assert "warning: 1 late event(s) DROPPED (LEFT 0, RIGHT 1)" in err and str(late_file) in err
    kept = [orjson.loads(x) for x in late_file.read_bytes().splitlines()]
    assert len(kept) == 1 and kept[0]["value"] == with_late["straggler"]  # the record as stored
    assert set(kept[0]) >= {"offset", "partition", "ts", "key", "value"}


def test_late_event_without_late_out_is_still_reported(with_late):
    p = run_cli("join", with_late["s"], with_late["c"], *JOIN, "--how", "left")
    assert p.returncode == 0
    assert b"1 late event(s) DROPPED" in p.stderr and b"--late-out FILE" in p.stderr and b"--lateness" in p.stderr


def test_lateness_lets_the_straggler_find_its_search(with_late):
    searches, clicks = with_late["searches"], [*with_late["clicks"], with_late["straggler"]]
    for how in ("inner", "outer"):
        p = run_cli("join", with_late["s"], with_late["c"], *JOIN, "--how", how, "--lateness", "20m")
        assert rows_of(p) == brute_force(searches, clicks, MIN, how)
        assert b"late" not in p.stderr
    assert _row(with_late["straggler"]["user"], searches[100], with_late["straggler"]) in rows_of(p)


def test_plain_file_late_out_keeps_the_value_line(with_late):
    late_file = with_late["dir"] / "late-plain.jsonl"
    for how in ("inner", "right"):
        p = run_cli("join", with_late["s.jsonl"], with_late["c.jsonl"], "--within", "1m", "--on", "user",
                    "--time-field", "at", "--how", how, "--engine", "local", "--late-out", str(late_file))
        expected = brute_force(with_late["searches"], with_late["clicks"], MIN, how)
        assert rows_of(p) == Counter(_row(r["key"], r["left"], r["right"]) for r in map(orjson.loads, expected))
        assert late_file.read_bytes() == orjson.dumps(with_late["straggler"]) + b"\n"
        assert b"1 late event(s) DROPPED (LEFT 0, RIGHT 1)" in p.stderr


def test_late_flags_are_checked(with_late, tmp_path):
    p = run_cli("join", with_late["s"], with_late["c"], "--table", "--late-out", str(tmp_path / "x"))
    assert p.returncode == 2 and b"--late-out needs a watermark" in p.stderr
    p = run_cli("join", with_late["s"], with_late["c"], "--tables", "--lateness", "1m")
    assert p.returncode == 2 and b"--lateness needs a watermark" in p.stderr
    p = run_cli("join", with_late["s"], with_late["c"], *JOIN[:-2], "--engine", "spark", "--late-out",
                str(tmp_path / "x"))
    assert p.returncode == 2 and b"--engine local" in p.stderr
    p = run_cli("join", with_late["s"], with_late["c"], *JOIN, "--late-out", str(tmp_path / "no" / "such"))
    assert p.returncode == 2 and b"--late-out" in p.stderr and b"Traceback" not in p.stderr


def test_as_of_late_table_change_is_counted_and_kept(tmp_path):
    events = [{"user": "u", "n": i, "at": iso(T0 + i * MIN)} for i in range(10)]
    changes = [{"user": "u", "plan": "free", "at": iso(T0)}, {"user": "u", "plan": "pro", "at": iso(T0 + 9 * MIN)},
               {"user": "u", "plan": "trial", "at": iso(T0 + 3 * MIN)}]  # the last one is 6 minutes behind
    ev, tb = tmp_path / "ev.jsonl", tmp_path / "tb.jsonl"
    ev.write_bytes(b"".join(orjson.dumps(v) + b"\n" for v in events))
    tb.write_bytes(b"".join(orjson.dumps(v) + b"\n" for v in changes))
    late_file = tmp_path / "late.jsonl"
    args = ["join", str(ev), str(tb), "--table", "--as-of", "event-time", "--on", "user", "--time-field", "at",
            "--how", "left", "--engine", "local"]
    p = run_cli(*args, "--late-out", str(late_file))
    plans = [r["right"]["plan"] for r in map(orjson.loads, p.stdout.splitlines())]
    assert plans[:3] == ["free"] * 3 and plans[-1] == "pro"
    assert b"1 late table change(s)" in p.stderr and late_file.read_bytes() == orjson.dumps(changes[2]) + b"\n"
    ok = run_cli(*args, "--lateness", "6m")
    plans = [r["right"]["plan"] for r in map(orjson.loads, ok.stdout.splitlines())]
    assert plans == ["free"] * 3 + ["trial"] * 6 + ["pro"] and ok.stderr == b""


def test_as_of_tombstone_deletes_from_the_time_before_it(tmp_path):
    """A tombstone's null value has no time field: it deletes the key from the largest event time
    seen before it in the input order (later events get no row), not from the beginning of time
    (where every version after it would outrank it)."""
    table = str(tmp_path / "table")
    changes = [{"key": "u1", "value": {"name": "A1", "at": iso(T0)}},
               {"key": "u2", "value": {"name": "B1", "at": iso(T0)}},
               {"key": "u1", "value": {"name": "A2", "at": iso(T0 + 10 * MIN)}},
               {"key": "u2", "value": None}]
    run_cli("produce", table, "--envelope", input=b"".join(orjson.dumps(c) + b"\n" for c in changes), check=True)
    ev = tmp_path / "ev.jsonl"
    ev.write_bytes(b"".join(orjson.dumps({"user": "u2", "at": iso(T0 + m * MIN)}) + b"\n" for m in (5, 20)))
    p = run_cli("join", str(ev), table, "--table", "--on", "user=key", "--how", "left", "--as-of", "event-time",
                "--time-field", "at=at", "--engine", "local", check=True)
    rows = [orjson.loads(line) for line in p.stdout.splitlines()]
    assert [(r["left"]["at"], r["right"] and r["right"]["name"]) for r in rows] == \
        [(iso(T0 + 5 * MIN), "B1"), (iso(T0 + 20 * MIN), None)]


# ---------------------------------------------------------------- property

lane_events = st.lists(st.tuples(st.integers(0, 2), st.sampled_from("abc"), st.integers(0, 30), st.integers(0, 6)),
                       max_size=30)


@settings(max_examples=60, deadline=None)
@given(lane_events, lane_events, st.integers(1, 3), st.integers(1, 3), st.integers(0, 8),
       st.sampled_from(["inner", "left", "right", "outer"]), st.integers(0, 6))
def test_partitioned_logs_with_bounded_disorder_join_like_brute_force(tmp_path_factory, lefts, rights, n_left,
                                                                      n_right, within, how, jitter):
    """Each partition's events come in time order up to `jitter` (an event is at most that far behind the
    largest time before it in its partition); with --lateness >= jitter nothing is late and the join is
    exactly the brute-force one, however the partitions and inputs interleave."""
    d = tmp_path_factory.mktemp("prop")
    sides = []
    for name, evs, n in (("l", lefts, n_left), ("r", rights, n_right)):
        by_part: dict[int, list[tuple[str, int]]] = {}
        for p, key, step, back in evs:
            lane = by_part.setdefault(p % n, [])
            high = max((t for _k, t in lane), default=T0)
            lane.append((key, high + step if back > jitter else max(T0, high - back)))
        values = []
        recs = []
        for p, lane in sorted(by_part.items()):
            for key, t in lane:
                v = {"user": key, "id": f"{name}{len(values)}", "at": t}
                values.append(v)
                recs.append((key, v, 0, p))
        path = str(d / name)
        write_log(path, n, [(k, v, ts) for k, v, ts, _p in recs], place=lambda i, k, recs=recs: recs[i][3])
        sides.append((path, values))
    spec = joining.make_spec(sides[0][0], sides[1][0], within=f"{within}ms", on="key", time_field="value.at",
                             how=how, lateness=f"{jitter}ms")
    rows: Counter = Counter()
    stats = joining.run(spec, lambda k, lv, rv: rows.update([_row(k, lv, rv)]))
    assert stats.late == [0, 0]
    assert rows == brute_force(sides[0][1], sides[1][1], within, how, time=lambda v: v["at"])


@pytest.mark.parametrize("kind", [["--within", "1m"], ["--table", "--as-of", "event-time"]])
def test_plain_file_default_time_is_the_values_ts_as_in_window(tmp_path, kind):
    """One event-time rule: in a plain file `ts` (the default, or given) is the value's own ts field,
    in join as in window; an explicit value.ts gives the same rows."""
    ev = tmp_path / "ev.jsonl"
    ev.write_text('{"u":"a","ts":"2026-11-21T10:00:00Z"}\n{"u":"b","ts":"2026-11-21T10:00:30Z"}\n'
                  '{"u":"a","ts":"2026-11-21T10:05:00Z"}\n')
    explicit = run_cli("join", str(ev), str(ev), "--on", "u", *kind, "--time-field", "value.ts", check=True)
    assert explicit.stdout.count(b"\n") >= 3
    for given_ in ([], ["--time-field", "ts"]):
        r = run_cli("join", str(ev), str(ev), "--on", "u", *kind, *given_)
        assert (r.returncode, r.stdout, r.stderr) == (0, explicit.stdout, explicit.stderr)
    w = run_cli("window", str(ev), "--tumbling", "1m", "--by", "u", check=True)
    assert w.stdout.count(b"\n") == 3 and b"skipped" not in w.stderr


def test_as_of_event_time_reports_table_changes_without_a_usable_time(tmp_path):
    """Such a change is valid from the beginning (it cannot be placed in time), counted and reported,
    never applied silently."""
    ev, tb = tmp_path / "ev.jsonl", tmp_path / "tb.jsonl"
    ev.write_text('{"at":"2026-01-01T00:00:10Z","u":1}\n')
    tb.write_text('{"at":"2026-01-01T00:00:00Z","u":1,"name":"A"}\n{"at":"soon","u":1,"name":"B"}\n'
                  '{"at":"2026-01-01T00:00:20Z","u":1,"name":"C"}\n')
    p = run_cli("join", str(ev), str(tb), "--table", "--on", "u", "--time-field", "at", "--as-of", "event-time",
                check=True)
    assert [orjson.loads(x)["right"]["name"] for x in p.stdout.splitlines()] == ["A"]
    assert b"1 table change(s) without a usable time in value.at: each was taken as valid from the beginning" \
        in p.stderr, p.stderr
    assert b"event(s) without a usable time" not in p.stderr


@pytest.mark.parametrize("output", ["jsonl", "csv"])  # the batch kernel, the event-at-a-time operator
def test_event_whose_partner_already_left_is_late_not_lost(tmp_path, output):
    """R a@1s is not behind the window (1s + 1s > the watermark 1.5s), but its partner L a@0s left
    when the watermark passed 0s + 1s, written unmatched: joining R a now would contradict that row,
    leaving it out silently would lose the pair. It is late: counted, reported, kept by --late-out."""
    left, right = tmp_path / "L.jsonl", tmp_path / "R.jsonl"
    la = {"id": "a", "at": "2026-01-01T00:00:00Z"}
    rz, ra = {"id": "z", "at": "2026-01-01T00:00:01.500Z"}, {"id": "a", "at": "2026-01-01T00:00:01Z"}
    left.write_bytes(orjson.dumps(la) + b"\n")
    right.write_bytes(orjson.dumps(rz) + b"\n" + orjson.dumps(ra) + b"\n")
    late_file = tmp_path / "late.jsonl"
    p = run_cli("join", str(left), str(right), "--within", "1s", "--on", "id", "--time-field", "at", "--how", "outer",
                "--late-out", str(late_file), "--output", output)
    assert p.returncode == 0
    assert b"warning: 1 late event(s) DROPPED (LEFT 0, RIGHT 1)" in p.stderr
    assert late_file.read_bytes() == orjson.dumps(ra) + b"\n"
    if output == "jsonl":
        assert [orjson.loads(x) for x in p.stdout.splitlines()] == [
            {"key": "a", "left": la, "right": None}, {"key": "z", "left": None, "right": rz}]
    else:
        lines = p.stdout.decode().splitlines()
        assert len(lines) == 3 and lines[1].startswith("a,") and lines[2].startswith("z,,")
