"""produce --follow: growing files, rotation by rename, copytruncate, globs, partial lines, restarts, stat.

Real files and real processes: a follower runs in a subprocess while the test writes,
renames and truncates its files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from conftest import CLI, cli_env, log_records, run_cli


def start(log: str, *files: str, extra: tuple[str, ...] = ()) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "produce", log, *files, "--follow", *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=cli_env())


def values(log: str) -> list:
    if not os.path.exists(os.path.join(log, "streamctl.json")):
        return []
    return [r["value"] for r in log_records(log)]


def wait_for(log: str, n: int, timeout: float = 15.0) -> list:
    deadline = time.monotonic() + timeout
    while True:
        got = values(log)
        if len(got) >= n:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {n} records in {log}, got {len(got)}: {got[-5:]}")
        time.sleep(0.05)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> tuple[int, str]:
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=20)
    return proc.returncode, err.decode()


def lines(path: str, vals, mode: str = "a") -> None:
    with open(path, mode) as f:
        f.write("".join(json.dumps(v) + "\n" for v in vals))


def test_follows_growth_and_waits_for_the_newline(tmp_path):
    app, log = str(tmp_path / "app.jsonl"), str(tmp_path / "log")
    lines(app, [{"n": 0}, {"n": 1}])
    with open(app, "a") as f:
        f.write('{"n": 2')  # a partial line: not appended until its newline
    proc = start(log, app)
    try:
        assert wait_for(log, 2) == [{"n": 0}, {"n": 1}]
        time.sleep(0.3)
        assert len(values(log)) == 2
        with open(app, "a") as f:
            f.write("}\n")
        lines(app, [{"n": 3}])
        assert wait_for(log, 4) == [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}]
    finally:
        rc, err = stop(proc)
    assert rc == 0, err
    assert "produced 4 record(s)" in err
    recs = log_records(log)
    # each record names its file and the byte where its line starts
    assert [r["headers"]["streamctl.file"].split(":")[1] for r in recs] == ["0", "9", "18", "27"]


def test_rotation_by_rename(tmp_path):
    app, log = str(tmp_path / "app.log"), str(tmp_path / "log")
    lines(app, [{"i": i} for i in range(50)])
    proc = start(log, app)
    try:
        wait_for(log, 50)
        old = open(app, "a")  # the writer keeps its fd across the rename, like a logger before SIGHUP
        old.write("".join(json.dumps({"i": i}) + "\n" for i in range(50, 60)))
        old.flush()
        os.rename(app, app + ".1")
        lines(app, [{"i": i} for i in range(100, 120)])  # the new file of that name
        old.write("".join(json.dumps({"i": i}) + "\n" for i in range(60, 70)))  # the last lines into the old one
        old.close()
        got = wait_for(log, 90)
    finally:
        rc, err = stop(proc)
    assert rc == 0, err
    assert sorted(v["i"] for v in got) == list(range(70)) + list(range(100, 120))
    # in order per file
    by_file: dict[str, list[int]] = {}
    for r in log_records(log):
        by_file.setdefault(r["headers"]["streamctl.file"].split(":")[0], []).append(r["value"]["i"])
    assert sorted(by_file.values()) == [list(range(70)), list(range(100, 120))]
    # a rerun reads nothing again
    again = run_cli("produce", log, app, "--follow", "--idle-timeout", "300ms")
    assert again.returncode == 0, again.stderr
    assert b"produced 0 record(s)" in again.stderr
    assert len(values(log)) == 90


def test_copytruncate_reads_again_from_the_start(tmp_path):
    app, log = str(tmp_path / "app.log"), str(tmp_path / "log")
    lines(app, [{"i": i} for i in range(10)])
    proc = start(log, app)
    try:
        wait_for(log, 10)
        # logrotate's copytruncate: copy, then truncate in place; the writer goes on (O_APPEND)
        with open(app) as src, open(app + ".1", "w") as dst:
            dst.write(src.read())
        os.truncate(app, 0)
        lines(app, [{"i": i} for i in range(10, 15)])
        got = wait_for(log, 15)
    finally:
        rc, err = stop(proc)
    assert rc == 0, err
    assert [v["i"] for v in got] == list(range(15))
    assert "truncated" in err


def test_truncated_and_regrown_past_the_position_is_caught_by_the_first_bytes(tmp_path):
    app, log = str(tmp_path / "app.log"), str(tmp_path / "log")
    lines(app, [{"i": i} for i in range(3)])
    r = run_cli("produce", log, app, "--follow", "--idle-timeout", "200ms")
    assert r.returncode == 0, r.stderr
    # while nobody follows: truncated and rewritten longer than before (same inode)
    lines(app, [{"j": j, "pad": "x" * 20} for j in range(5)], mode="w")
    r = run_cli("produce", log, app, "--follow", "--idle-timeout", "200ms")
    assert r.returncode == 0, r.stderr
    assert values(log) == [{"i": 0}, {"i": 1}, {"i": 2}] + [{"j": j, "pad": "x" * 20} for j in range(5)]


def test_glob_picks_up_new_files(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    log = str(tmp_path / "log")
    lines(str(d / "a.log"), [{"f": "a", "i": 0}])
    proc = start(log, str(d / "*.log"))
    try:
        wait_for(log, 1)
        lines(str(d / "b.log"), [{"f": "b", "i": 0}, {"f": "b", "i": 1}])
        lines(str(d / "a.log"), [{"f": "a", "i": 1}])
        lines(str(d / "c.txt"), [{"f": "c", "i": 0}])  # not matched
        got = wait_for(log, 4)
    finally:
        rc, err = stop(proc)
    assert rc == 0, err
    assert sorted((v["f"], v["i"]) for v in got) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert "followed 2 file(s)" in err


def test_restart_goes_on_where_it_stopped(tmp_path):
    app, log = str(tmp_path / "app.log"), str(tmp_path / "log")
    lines(app, [{"i": i} for i in range(5)])
    assert run_cli("produce", log, app, "--follow", "--idle-timeout", "200ms").returncode == 0
    lines(app, [{"i": i} for i in range(5, 8)])
    r = run_cli("produce", log, app, "--follow", "--idle-timeout", "200ms")
    assert r.returncode == 0, r.stderr
    assert b"produced 3 record(s)" in r.stderr
    assert [v["i"] for v in values(log)] == list(range(8))


def test_kill9_then_rerun_skips_what_the_killed_run_appended(tmp_path):
    """The registry is written about once a second: a run killed right after appending leaves records the
    registry does not cover; the rerun finds their marks and appends each line once."""
    app, log = str(tmp_path / "app.log"), str(tmp_path / "log")
    lines(app, [{"i": i} for i in range(3)])
    proc = start(log, app)
    try:
        wait_for(log, 3)
        time.sleep(1.3)  # the registry now covers those
        lines(app, [{"i": i} for i in range(3, 2000)])
        wait_for(log, 2000)
    finally:
        proc.kill()
        proc.wait()
    reg = json.load(open(os.path.join(log, ".follow", "registry.json")))
    assert reg["files"][0]["pos"] < os.path.getsize(app)  # killed before the registry caught up
    r = run_cli("produce", log, app, "--follow", "--idle-timeout", "200ms")
    assert r.returncode == 0, r.stderr
    assert b"already in the log" in r.stderr
    assert [v["i"] for v in values(log)] == list(range(2000))


def test_modes_and_partitions(tmp_path):
    app, log = str(tmp_path / "app.log"), str(tmp_path / "log")
    lines(app, [{"user": f"u{i % 5}", "i": i} for i in range(40)] + [{"i": 40}])
    r = run_cli("produce", log, app, "--follow", "--idle-timeout", "200ms", "--key-field", "user",
                "--partitions", "3")
    assert r.returncode == 0, r.stderr
    recs = log_records(log)
    assert sorted(r["value"]["i"] for r in recs) == list(range(41))
    for rec in recs:
        if rec["key"] is not None:
            assert rec["key"] == rec["value"]["user"]
    # the same records as produce without --follow puts them (Kafka's partitioner)
    plain = str(tmp_path / "plain")
    run_cli("produce", plain, "--key-field", "user", "--partitions", "3",
            input="".join(json.dumps({"user": f"u{i % 5}", "i": i}) + "\n" for i in range(40)), check=True)
    where = {r["value"]["i"]: r["partition"] for r in log_records(plain)}
    assert all(where[r["value"]["i"]] == r["partition"] for r in recs if r["key"] is not None)

    env = str(tmp_path / "env.log")
    lines(env, [{"key": "k1", "value": 1, "headers": {"trace": "t1"}}, {"key": None, "value": 2}])
    elog = str(tmp_path / "elog")
    r = run_cli("produce", elog, env, "--follow", "--idle-timeout", "200ms", "--envelope")
    assert r.returncode == 0, r.stderr
    recs = log_records(elog)
    assert [(r["key"], r["value"]) for r in recs] == [("k1", 1), (None, 2)]
    assert recs[0]["headers"]["trace"] == "t1" and recs[0]["headers"]["streamctl.file"].endswith(":0")

    rawf = str(tmp_path / "raw.log")
    with open(rawf, "w") as f:
        f.write("GET /a 200\r\nGET /b 404\n\n")
    rlog = str(tmp_path / "rlog")
    r = run_cli("produce", rlog, rawf, "--follow", "--idle-timeout", "200ms", "--raw", "--echo")
    assert r.returncode == 0, r.stderr
    assert values(rlog) == ["GET /a 200", "GET /b 404"]
    assert [json.loads(x)["value"] for x in r.stdout.splitlines()] == ["GET /a 200", "GET /b 404"]


def test_bad_lines(tmp_path):
    app, log = str(tmp_path / "app.log"), str(tmp_path / "log")
    with open(app, "w") as f:
        f.write('{"i": 0}\nnot json\n{"i": 1}\n' + '{"long": "' + "x" * 3000 + '"}\n{"i": 2}\n')
    r = run_cli("produce", log, app, "--follow", "--idle-timeout", "200ms")
    assert r.returncode == 65
    assert f"{app}:2: the line at byte 9".encode() in r.stderr
    assert values(log) == [{"i": 0}]
    dead = str(tmp_path / "dead.jsonl")
    r = run_cli("produce", log, app, "--follow", "--idle-timeout", "200ms", "--max-record-bytes", "1KiB",
                "--on-error", f"dead-letter={dead}")
    assert r.returncode == 0, r.stderr
    assert values(log) == [{"i": 0}, {"i": 1}, {"i": 2}]
    rejected = [json.loads(x) for x in open(dead)]
    assert [(d["byte"], d["raw"]) for d in rejected] == [(9, "not json"), (27, '{"long": "' + "x" * 3000 + '"}')]
    assert b"2 bad line(s) rejected" in r.stderr


def test_fsync_always_and_sigint(tmp_path):
    app, log = str(tmp_path / "app.log"), str(tmp_path / "log")
    lines(app, [{"i": i} for i in range(20)])
    proc = start(log, app, extra=("--fsync", "always"))
    try:
        wait_for(log, 20)
    finally:
        rc, err = stop(proc, signal.SIGINT)
    assert rc == 130, err
    assert "produced 20 record(s)" in err
    r = run_cli("produce", log, app, "--follow", "--idle-timeout", "200ms")
    assert b"produced 0 record(s)" in r.stderr


def test_usage_errors(tmp_path):
    log = str(tmp_path / "log")
    r = run_cli("produce", log, "--follow", input="{}\n")
    assert r.returncode == 2 and b"--follow needs FILEs" in r.stderr
    r = run_cli("produce", log, "-", "--follow", input="{}\n")
    assert r.returncode == 2 and b"not stdin" in r.stderr
    r = run_cli("produce", log, "--idle-timeout", "1s", input="{}\n")
    assert r.returncode == 2 and b"--idle-timeout needs --follow" in r.stderr
    assert not os.path.exists(log)


def test_missing_file_is_waited_for(tmp_path):
    app, log = str(tmp_path / "later.log"), str(tmp_path / "log")
    proc = start(log, app)
    try:
        time.sleep(0.3)
        lines(app, [{"i": 0}])
        assert wait_for(log, 1) == [{"i": 0}]
    finally:
        rc, err = stop(proc)
    assert rc == 0, err


def test_one_follower_per_log(tmp_path):
    app, log = str(tmp_path / "app.log"), str(tmp_path / "log")
    lines(app, [{"i": 0}])
    proc = start(log, app)
    try:
        wait_for(log, 1)
        r = run_cli("produce", log, app, "--follow", "--idle-timeout", "200ms")
        assert r.returncode == 1
        assert b"another `streamctl produce --follow` is feeding this log" in r.stderr
    finally:
        stop(proc)


def test_stat_shows_positions_and_unread_bytes(tmp_path):
    app, log = str(tmp_path / "app.log"), str(tmp_path / "log")
    lines(app, [{"i": i} for i in range(3)])
    assert run_cli("produce", log, app, "--follow", "--idle-timeout", "200ms").returncode == 0
    size = os.path.getsize(app)
    lines(app, [{"i": 3}])
    st = json.loads(run_cli("stat", log, "--json", check=True).stdout)
    assert set(st) == {"log", "partitions", "groups", "files"}
    [f] = st["files"]
    assert (f["file"], f["position"], f["size"], f["unread"], f["state"]) == (
        app, size, size + 9, 9, "active")
    table = run_cli("stat", log, check=True).stdout.decode()
    assert "unread" in table and app in table
    os.rename(app, app + ".1")
    [f] = json.loads(run_cli("stat", log, "--json", check=True).stdout)["files"]
    assert (f["file"], f["unread"], f["state"]) == (app + ".1", 9, "rotated")
    os.unlink(app + ".1")
    [f] = json.loads(run_cli("stat", log, "--json", check=True).stdout)["files"]
    assert (f["unread"], f["state"]) == (None, "gone")
    # a log never followed keeps the shape it always had
    plain = str(tmp_path / "plain")
    run_cli("produce", plain, input="1\n", check=True)
    assert set(json.loads(run_cli("stat", plain, "--json", check=True).stdout)) == {"log", "partitions", "groups"}
