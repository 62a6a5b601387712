"""replay --group: offset reset forms, dry run vs --execute, the table, refusal while a member consumes,
plans as files (--export, --from-file)."""

from __future__ import annotations

import fcntl
import os

import orjson
import pytest

from streamctl.groups import offsets, resets
from streamctl.storage import reader
from streamctl.storage.log import open_log
from streamctl.timeparse import now_ms

from test_replay import make_log

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
    rows = resets.plan(open_log(path), "g", resets.by_duration(3_600_000), [0, 1])
    assert [r.new for r in rows] == [bounds(path)[p][1] for p in range(2)]
    # and a duration reaching before the first record is the start
    rows = resets.plan(open_log(path), "g", resets.by_duration(now_ms() - T0 + 1000), [0, 1])
    assert [r.new for r in rows] == [bounds(path)[p][0] for p in range(2)]


def test_shift_without_commit_starts_from_earliest(log3):
    lg = open_log(log3)
    rows = resets.plan(lg, "fresh", resets.ResetSpec("shift-by", shift=2), [0])
    first, end = bounds(log3)[0]
    assert rows[0].current is None and rows[0].new == min(first + 2, end)
    assert rows[0].lag_after == end - rows[0].new


def test_refused_while_a_member_consumes(log3, run):
    lg = open_log(log3)
    run("replay", log3, "--group", "g", "--to-latest", "--execute", check=True)
    before = committed(log3, "g")
    claim = resets.claim_path(lg, "g", 1)
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
        while not resets.active_partitions(lg, "g") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert resets.active_partitions(lg, "g"), "the consumer never claimed a partition"
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


# ---- plans as files: --export and --from-file ---------------------------------------------------------

def plan_file(tmp_path, text: str | bytes, name: str = "plan.csv") -> str:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(path)


def test_export_then_from_file_round_trip(log3, run, tmp_path):
    ends = bounds(log3)
    run("replay", log3, "--group", "g", "--shift-by", "-4", "--execute", check=True)
    start = committed(log3, "g")
    plan = str(tmp_path / "plan.csv")
    dry = run("replay", log3, "--group", "g", "--to-earliest", "--partition", "1", "--export", plan)
    assert dry.returncode == 0, dry.stderr
    assert open(plan).read() == f"1,{ends[1][0]}\n"  # Kafka's shape without the topic, no header
    assert committed(log3, "g") == start and b"wrote the plan (1 partition(s))" in dry.stderr
    # the dry run of the file shows the same table; --execute applies only the partitions it names
    again = run("replay", log3, "--group", "g", "--from-file", plan)
    assert again.stdout == dry.stdout and committed(log3, "g") == start
    run("replay", log3, "--group", "g", "--from-file", plan, "--execute", check=True)
    assert committed(log3, "g") == {**start, 1: ends[1][0]}


def test_rollback_recipe(log3, run, tmp_path):
    """Save the offsets as they are, reset, then put them back from the saved file."""
    run("replay", log3, "--group", "g", "--shift-by", "-3", "--partition", "0", "--execute", check=True)
    run("replay", log3, "--group", "g", "--to-offset", "7", "--partition", "2", "--execute", check=True)
    before = committed(log3, "g")
    saved = str(tmp_path / "before.csv")
    run("replay", log3, "--group", "g", "--shift-by", "0", "--export", saved, check=True)
    ends = bounds(log3)
    # partition 1 was never committed: saved as its first offset, where consume would start
    assert open(saved).read() == f"0,{before[0]}\n1,{ends[1][0]}\n2,{before[2]}\n"
    # the export is written before the offsets change, in the same command
    after_plan = str(tmp_path / "latest.csv")
    run("replay", log3, "--group", "g", "--to-latest", "--export", after_plan, "--execute", check=True)
    assert committed(log3, "g") == {p: e for p, (_, e) in ends.items()}
    assert open(after_plan).read() == "".join(f"{p},{e}\n" for p, (_, e) in ends.items())
    run("replay", log3, "--group", "g", "--from-file", saved, "--execute", check=True)
    assert committed(log3, "g") == {**before, 1: ends[1][0]}
    # the same file derived from stat --json (committed partitions only)
    js = orjson.loads(run("stat", log3, "--json", check=True).stdout)
    derived = "".join(f"{g['partition']},{g['committed']}\n" for g in js["groups"]
                      if g["group"] == "g" and g["committed"] is not None)
    assert derived == open(saved).read()


def test_export_to_stdout_and_plan_from_stdin(log3, run):
    ends = bounds(log3)
    proc = run("replay", log3, "--group", "g", "--to-latest", "--export", "-")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "".join(f"{p},{e}\n" for p, (_, e) in ends.items()).encode()
    assert b"partition    current    new" in proc.stderr  # the table moves to stderr
    applied = run("replay", log3, "--group", "g", "--from-file", "-", "--execute", input=proc.stdout)
    assert applied.returncode == 0, applied.stderr
    assert committed(log3, "g") == {p: e for p, (_, e) in ends.items()}


def test_plan_file_header_comments_and_blank_lines(log3, run, tmp_path):
    path = plan_file(tmp_path, "partition,offset\r\n# rolled back after the incident\r\n\r\n2, 5\r\n 0 ,4\r\n")
    run("replay", log3, "--group", "g", "--from-file", path, "--execute", check=True)
    assert committed(log3, "g") == {0: 4, 2: 5}
    # --partition picks one partition of the file; a partition the file lacks is a usage error
    run("replay", log3, "--group", "h", "--from-file", path, "--partition", "2", "--execute", check=True)
    assert committed(log3, "h") == {2: 5}
    proc = run("replay", log3, "--group", "h", "--from-file", path, "--partition", "1")
    assert proc.returncode == 2 and b"has no line for partition 1" in proc.stderr


@pytest.mark.parametrize(("text", "line", "reason"), [
    ("0,1\n1,x\n", 2, b"offset 'x' for partition 1 is not an integer"),
    ("0,1.5\n", 1, b"is not an integer"),
    ("0,-3\n", 1, b"offset -3 for partition 0 is negative"),
    ("p0,1\n", 1, b"partition 'p0' is not a partition number"),
    ("\n\n7,1\n", 3, b"partition 7 does not exist in this log (3 partition(s): 0..2)"),
    ("0,1\n0,2\n", 2, b"partition 0 again (first on line 1)"),
    ("orders,0,1\n", 1, b"expected 2 fields partition,offset, got 3"),
    ("0\n", 1, b"expected 2 fields partition,offset, got 1"),
    ("0,100000\n", 1, b"offset 100000 for partition 0 is outside the partition's offsets now [0, "),
])
def test_bad_plan_lines_are_named(log3, run, tmp_path, text, line, reason):
    run("replay", log3, "--group", "g", "--to-latest", "--execute", check=True)
    before = committed(log3, "g")
    path = plan_file(tmp_path, text)
    proc = run("replay", log3, "--group", "g", "--from-file", path, "--execute")
    assert proc.returncode == 65, proc.stderr
    assert proc.stderr.startswith(f"streamctl: {path}:{line}: ".encode()) and reason in proc.stderr
    assert b"Traceback" not in proc.stderr and proc.stdout == b""
    assert committed(log3, "g") == before


def test_every_bad_line_is_reported_at_once(log3, run, tmp_path):
    path = plan_file(tmp_path, "0,1\n1,x\n2,2\n9,1\n0,3\n")
    proc = run("replay", log3, "--group", "g", "--from-file", path)
    assert proc.returncode == 65
    err = proc.stderr.decode()
    assert err.startswith(f"streamctl: {path}: 3 bad line(s) in the plan:\n")
    assert [ln.split(": ")[0].strip() for ln in err.splitlines()[1:]] == [f"{path}:2", f"{path}:4", f"{path}:5"]
    many = plan_file(tmp_path, "".join(f"x,{i}\n" for i in range(30)), "many.csv")
    err = run("replay", log3, "--group", "g", "--from-file", many).stderr.decode()
    assert f"{many}:20:" in err and f"{many}:21:" not in err and "... and 10 more" in err


def test_a_line_out_of_range_is_reported_with_the_lines_that_do_not_parse(tmp_path, run):
    """The range check runs on every good line even when other lines failed to parse, and the
    first good line of a partition whose earlier line failed is checked too."""
    log = str(tmp_path / "two")
    run("produce", log, "--partitions", "2", "--partition", "0", input="0\n1\n2\n3\n", check=True)
    run("produce", log, "--partition", "1", input="4\n5\n6\n", check=True)
    assert bounds(log) == {0: (0, 4), 1: (0, 3)}
    run("replay", log, "--group", "g", "--to-offset", "1", "--execute", check=True)
    path = plan_file(tmp_path, "0,4\n0,3\n1,x\n5,1\n1,99\n", "p3.csv")
    for extra in ((), ("--execute",), ("--partition", "0", "--execute")):
        proc = run("replay", log, "--group", "g", "--from-file", path, *extra)
        assert proc.returncode == 65, proc.stderr
        err = proc.stderr.decode()
        assert err.startswith(f"streamctl: {path}: 4 bad line(s) in the plan:\n")
        assert [ln.split(": ")[0].strip() for ln in err.splitlines()[1:]] == [f"{path}:{n}" for n in (2, 3, 4, 5)]
        assert "offset 99 for partition 1 is outside the partition's offsets now [0, 3]" in err
        assert proc.stdout == b"" and committed(log, "g") == {0: 1, 1: 1}


def test_below_the_first_offset_is_refused(tmp_path, run):
    path = str(tmp_path / "log")
    make_log(path, 1, 20, seed=9, t0=T0)
    lg = open_log(path)
    oldest = lg.segments(0)[0]
    os.unlink(oldest.path)  # retention removed the oldest segment
    first = reader.partition_info(lg, 0).first_offset
    assert first > 0
    plan = plan_file(tmp_path, f"0,{first - 1}\n")
    proc = run("replay", path, "--group", "g", "--from-file", plan)
    assert proc.returncode == 65 and f"outside the partition's offsets now [{first}, ".encode() in proc.stderr
    ok = plan_file(tmp_path, f"0,{first}\n", "ok.csv")
    assert run("replay", path, "--group", "g", "--from-file", ok, "--execute").returncode == 0
    assert committed(path, "g") == {0: first}


def test_unreadable_and_empty_plans(log3, run, tmp_path):
    proc = run("replay", log3, "--group", "g", "--from-file", str(tmp_path / "missing.csv"))
    assert proc.returncode == 2 and b"missing.csv: cannot read the plan file" in proc.stderr
    proc = run("replay", log3, "--group", "g", "--from-file", str(tmp_path))
    assert proc.returncode == 2 and b"cannot read the plan file" in proc.stderr
    for text in ("", "partition,offset\n", "# nothing\n\n"):
        proc = run("replay", log3, "--group", "g", "--from-file", plan_file(tmp_path, text))
        assert proc.returncode == 65 and b"no offsets in the plan" in proc.stderr, text
    proc = run("replay", log3, "--group", "g", "--from-file", plan_file(tmp_path, b"0,\xff\n"))
    assert proc.returncode == 65 and b"not UTF-8" in proc.stderr
    assert committed(log3, "g") == {}


def test_plan_flag_conflicts(log3, run, tmp_path):
    plan = plan_file(tmp_path, "0,1\n")
    proc = run("replay", log3, "--group", "g", "--from-file", plan, "--to-latest")
    assert proc.returncode == 2 and b"exactly one of" in proc.stderr and b"--from-file" in proc.stderr
    proc = run("replay", log3, "--from-file", plan)
    assert proc.returncode == 2 and b"--from-file resets a consumer group's offsets and needs --group" in proc.stderr
    proc = run("replay", log3, "--export", str(tmp_path / "x.csv"))
    assert proc.returncode == 2 and b"--export writes an offset-reset plan and needs --group" in proc.stderr
    assert not os.path.exists(tmp_path / "x.csv")


def test_failed_export_changes_nothing(log3, run, tmp_path):
    run("replay", log3, "--group", "g", "--to-earliest", "--execute", check=True)
    before = committed(log3, "g")
    proc = run("replay", log3, "--group", "g", "--to-latest", "--execute",
               "--export", str(tmp_path / "no-such-dir" / "plan.csv"))
    assert proc.returncode == 2 and b"cannot write the plan file" in proc.stderr
    assert committed(log3, "g") == before
    os.symlink(str(tmp_path / "elsewhere"), tmp_path / "link.csv")
    proc = run("replay", log3, "--group", "g", "--to-latest", "--export", str(tmp_path / "link.csv"))
    assert proc.returncode != 0 and b"symlink" in proc.stderr and b"Traceback" not in proc.stderr
    assert not os.path.exists(tmp_path / "elsewhere")


def test_parse_plan_core():
    plan = resets.parse_plan(b"partition,offset\n1,5\n0,0\n", "p.csv", 2)
    assert plan == {1: resets.PlanLine(2, 5), 0: resets.PlanLine(3, 0)}
    rows = [resets.ResetRow(0, None, 3, 0, 9), resets.ResetRow(2, 1, 4, 0, 9)]
    assert resets.encode_plan(rows) == b"0,3\n2,4\n"
    assert resets.parse_plan(resets.encode_plan(rows), "p.csv", 3) == {
        0: resets.PlanLine(1, 3), 2: resets.PlanLine(2, 4)}
