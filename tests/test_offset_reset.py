"""replay --group: offset reset forms, dry run vs --execute, the table, refusal while a member consumes."""

from __future__ import annotations

import fcntl
import os

import orjson
import pytest
from test_replay import make_log

from streamctl import offsetreset, offsets, reader
from streamctl.log import open_log
from streamctl.timeparse import now_ms

T0 = 1_763_719_200_000


@pytest.fixture
def log3(tmp_path) -> str:
    path = str(tmp_path / "log")
    make_log(path, 3, 20, seed=7, t0=T0)
    return path


def table_rows(stdout: bytes) -> list[list[str]]:
    lines = stdout.decode().splitlines()
    assert lines[0].split() == ["partition", "current", "new", "lag-after"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    return [ln.split() for ln in lines[2:]]


def bounds(path: str) -> dict[int, tuple[int, int]]:
    lg = open_log(path)
    return {p: (reader.partition_info(lg, p).first_offset, reader.partition_info(lg, p).next_offset)
            for p in range(lg.partitions)}


def committed(path: str, group: str) -> dict[int, int]:
    return offsets.load(open_log(path), group)


def test_dry_run_changes_nothing(log3, run):
    proc = run("replay", log3, "--group", "g", "--to-latest")
    assert proc.returncode == 0, proc.stderr
    ends = bounds(log3)
    assert table_rows(proc.stdout) == [[str(p), "-", str(ends[p][1]), "0"] for p in range(3)]
    assert b"dry run" in proc.stderr and b"--execute" in proc.stderr
    assert committed(log3, "g") == {}
    assert not os.path.exists(open_log(log3).group_path("g"))


def test_execute_forms(log3, run):
    ends = bounds(log3)
    ok = run("replay", log3, "--group", "g", "--to-latest", "--execute")
    assert ok.returncode == 0, ok.stderr
    assert committed(log3, "g") == {p: e for p, (_, e) in ends.items()}

    proc = run("replay", log3, "--group", "g", "--shift-by", "-5", "--execute")
    rows = table_rows(proc.stdout)
    assert rows == [[str(p), str(ends[p][1]), str(ends[p][1] - 5), "5"] for p in range(3)]
    assert committed(log3, "g") == {p: e - 5 for p, (_, e) in ends.items()}

    run("replay", log3, "--group", "g", "--to-offset", "3", "--partition", "1", "--execute", check=True)
    assert committed(log3, "g") == {0: ends[0][1] - 5, 1: 3, 2: ends[2][1] - 5}

    run("replay", log3, "--group", "g", "--to-earliest", "--execute", check=True)
    assert committed(log3, "g") == {p: f for p, (f, _) in ends.items()}
    # consume resumes from the reset offsets
    out = run("consume", log3, "--group", "g", "--partition", "0").stdout
    assert len(out.splitlines()) == 20


def test_clamping_into_range(log3, run):
    ends = bounds(log3)
    proc = run("replay", log3, "--group", "g", "--to-offset", "100000")
    assert [r[2] for r in table_rows(proc.stdout)] == [str(ends[p][1]) for p in range(3)]
    proc = run("replay", log3, "--group", "g", "--shift-by", "-100000")
    assert [r[2] for r in table_rows(proc.stdout)] == [str(ends[p][0]) for p in range(3)]


def test_to_datetime_and_by_duration(tmp_path, run):
    path = str(tmp_path / "log")
    lines = make_log(path, 2, 20, seed=3, t0=T0)
    cut = T0 + 500
    proc = run("replay", path, "--group", "g", "--to-datetime", f"@{cut}", "--execute")
    assert proc.returncode == 0, proc.stderr
    want = {}
    for p in range(2):
        offs = [orjson.loads(ln)["offset"] for ln in lines
                if orjson.loads(ln)["partition"] == p and orjson.loads(ln)["ts"] >= cut]
        want[p] = offs[0] if offs else bounds(path)[p][1]
    assert committed(path, "g") == want
    # by-duration: now - D; the log's records are from 2025, so 1h ago is past every record: the end
    rows = offsetreset.plan(open_log(path), "g", offsetreset.by_duration(3_600_000), [0, 1])
    assert [r.new for r in rows] == [bounds(path)[p][1] for p in range(2)]
    # and a duration reaching before the first record is the start
    rows = offsetreset.plan(open_log(path), "g", offsetreset.by_duration(now_ms() - T0 + 1000), [0, 1])
    assert [r.new for r in rows] == [bounds(path)[p][0] for p in range(2)]


def test_shift_without_commit_starts_from_earliest(log3):
    lg = open_log(log3)
    rows = offsetreset.plan(lg, "fresh", offsetreset.ResetSpec("shift-by", shift=2), [0])
    first, end = bounds(log3)[0]
    assert rows[0].current is None and rows[0].new == min(first + 2, end)
    assert rows[0].lag_after == end - rows[0].new


def test_refused_while_a_member_consumes(log3, run):
    lg = open_log(log3)
    run("replay", log3, "--group", "g", "--to-latest", "--execute", check=True)
    before = committed(log3, "g")
    claim = offsetreset.claim_path(lg, "g", 1)
    fd = os.open(claim, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a live `consume --group g --follow` holds
        proc = run("replay", log3, "--group", "g", "--to-earliest", "--execute")
        assert proc.returncode == 1
        assert b"group g is consuming" in proc.stderr and b"partition(s) 1" in proc.stderr
        assert committed(log3, "g") == before
        dry = run("replay", log3, "--group", "g", "--to-earliest")
        assert dry.returncode == 0 and b"would be refused" in dry.stderr
        # another group is not affected
        assert run("replay", log3, "--group", "other", "--to-earliest", "--execute").returncode == 0
    finally:
        os.close(fd)
    # released: the reset goes through (an unlocked claim file left behind is no member)
    assert run("replay", log3, "--group", "g", "--to-earliest", "--execute").returncode == 0
    assert committed(log3, "g") == {p: f for p, (f, _) in bounds(log3).items()}


def test_bad_group_and_partition(log3, run):
    proc = run("replay", log3, "--group", "../x", "--to-earliest")
    assert proc.returncode == 2
    proc = run("replay", log3, "--group", "g", "--to-earliest", "--partition", "9")
    assert proc.returncode == 2 and b"partition 9" in proc.stderr
    proc = run("replay", log3, "--group", "g", "--to-offset", "-1")
    assert proc.returncode == 2
    proc = run("replay", log3, "--group", "g", "--by-duration", "soon")
    assert proc.returncode == 2 and b"duration" in proc.stderr


def test_refused_while_a_live_consume_follows(log3, run):
    """The real thing: `consume --group g --follow` holds its slot and claims until it stops."""
    import signal
    import subprocess
    import sys
    import time

    from conftest import cli_env

    lg = open_log(log3)
    proc = subprocess.Popen([sys.executable, "-m", "streamctl", "consume", log3, "--group", "g", "--follow"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=cli_env())
    try:
        deadline = time.monotonic() + 15
        while not offsetreset.active_partitions(lg, "g") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert offsetreset.active_partitions(lg, "g"), "the consumer never claimed a partition"
        refused = run("replay", log3, "--group", "g", "--to-earliest", "--execute")
        assert refused.returncode == 1 and b"group g is consuming" in refused.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
    done = run("replay", log3, "--group", "g", "--to-earliest", "--execute")
    assert done.returncode == 0, done.stderr
    assert committed(log3, "g") == {p: f for p, (f, _) in bounds(log3).items()}


def test_a_live_member_without_partitions_counts(log3, run):
    lg = open_log(log3)
    os.makedirs(lg.groups_dir(), exist_ok=True)
    fd = os.open(os.path.join(lg.groups_dir(), ".g.m0.member"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = run("replay", log3, "--group", "g", "--to-earliest", "--execute")
        assert proc.returncode == 1 and b"1 live member(s)" in proc.stderr
    finally:
        os.close(fd)
    assert run("replay", log3, "--group", "g", "--to-earliest", "--execute").returncode == 0
