"""window --follow --group: kill -9 in a loop while events are produced; nothing lost, nothing double-counted."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time

import orjson
import pytest

from tests.conftest import CLI, cli_env, closed_rows, run_cli

T0 = 1_763_719_200_000
WINDOW = ["--tumbling", "2s", "--time-field", "at", "--agg", "count", "--agg", "sum:v", "--lateness", "10s"]


def batches(n_batches: int, per_batch: int, seed: int = 7) -> list[str]:
    rnd = random.Random(seed)
    out = []
    i = 0
    for _ in range(n_batches):
        lines = []
        for _ in range(per_batch):
            at = T0 + i * 100 + rnd.randint(-300, 300)
            lines.append(json.dumps({"at": at, "u": f"u{rnd.randrange(3)}", "v": rnd.randint(1, 9)}))
            i += 1
        out.append("\n".join(lines) + "\n")
    return out


def watermark(todo: list[str], lateness: int = 10_000) -> int:
    """The watermark after the events of `todo` (batches()' lines): their largest time minus the lateness."""
    return max(json.loads(line)["at"] for b in todo for line in b.splitlines()) - lateness


def rows_of(data: bytes) -> list[bytes]:
    return [line for line in data.splitlines() if line.strip()]


def start_follow(log: str, out_path: str, *extra: str) -> subprocess.Popen:
    out = open(out_path, "ab")
    try:
        return subprocess.Popen([*CLI, "window", log, *WINDOW, "--follow", "--group", "g", *extra],
                                stdout=out, stderr=subprocess.DEVNULL, env=cli_env())
    finally:
        out.close()


@pytest.mark.slow
def test_kill_9_loop_equals_one_uninterrupted_run(tmp_path):
    log = str(tmp_path / "events")
    out_path = str(tmp_path / "follow.jsonl")
    todo = batches(12, 40)
    run_cli("produce", log, "--partitions", "2", "--key-field", "u", input=todo[0], check=True)

    def producer() -> None:
        for b in todo[1:]:
            run_cli("produce", log, "--key-field", "u", input=b, check=True)
            time.sleep(0.15)

    th = threading.Thread(target=producer)
    th.start()
    rnd = random.Random(1)
    kills = 0
    try:
        while th.is_alive() or kills < 4:
            proc = start_follow(log, out_path)
            time.sleep(rnd.uniform(0.3, 1.2))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
    finally:
        th.join()
    # a clean finish: runs until idle; the windows still open stay in the checkpoint, unwritten
    proc = start_follow(log, out_path, "--idle-timeout", "1s")
    assert proc.wait(timeout=60) == 0

    followed = rows_of(open(out_path, "rb").read())
    once = closed_rows(rows_of(run_cli("window", log, *WINDOW, check=True).stdout), watermark(todo))
    # rows emitted after the last checkpoint are written again, identically, after a restart
    assert set(followed) == set(once)
    by_window: dict = {}
    for line in followed:
        r = orjson.loads(line)
        by_window.setdefault((r["window"]["start"], r["key"]), set()).add(line)
    assert all(len(v) == 1 for v in by_window.values()), "a window was emitted with two different contents"
    ck = orjson.loads(open(os.path.join(log, "groups", ".g.window.json"), "rb").read())
    assert ck["run"]["stats"]["events"] == 12 * 40
    assert sum(ck["offsets"].values()) == 12 * 40
    assert kills >= 4


def test_restart_continues_from_checkpoint(tmp_path):
    log = str(tmp_path / "events")
    todo = batches(2, 30)
    run_cli("produce", log, "--key-field", "u", input=todo[0], check=True)
    a = run_cli("window", log, *WINDOW, "--follow", "--group", "g", "--idle-timeout", "300ms", check=True)
    run_cli("produce", log, "--key-field", "u", input=todo[1], check=True)
    b = run_cli("window", log, *WINDOW, "--follow", "--group", "g", "--idle-timeout", "300ms", check=True)
    once = run_cli("window", log, *WINDOW, check=True).stdout
    # each run writes the windows its watermark closed; the open ones wait in the checkpoint for
    # the run that closes them: the runs' rows, put together, are the batch run's closed rows
    assert rows_of(a.stdout) == closed_rows(rows_of(once), watermark(todo[:1]))
    assert rows_of(a.stdout) + rows_of(b.stdout) == closed_rows(rows_of(once), watermark(todo))
    # stat sees the group's progress
    assert orjson.loads(open(os.path.join(log, "groups", "g.json"), "rb").read())["offsets"] == {"0": 60}



SKETCH_WINDOWS = {
    "tumbling": ["--tumbling", "1h"],  # hundreds of values a key: the sketches compact
    "session": ["--session", "400ms", "--lateness", "1s"],  # jitter bridges sessions: states merge
}


@pytest.mark.parametrize("kind", list(SKETCH_WINDOWS))
def test_new_aggregations_survive_restarts(tmp_path, kind):
    """stddev and the sketches through checkpoints: four runs, each stopped and restarted from the
    checkpoint, end where one uninterrupted run ends, to the byte."""
    window = [*SKETCH_WINDOWS[kind], "--time-field", "at", "--agg", "count", "--agg", "stddev:v",
              "--agg", "approx_distinct:w", "--agg", "approx_p50:w", "--agg", "approx_p99:w"]
    log = str(tmp_path / "events")
    rnd = random.Random(4)
    runs = []
    for b in range(4):
        lines = [json.dumps({"at": T0 + (b * 400 + i) * 100 + rnd.randint(-300, 300), "u": f"u{rnd.randrange(3)}",
                             "v": rnd.randint(1, 9), "w": rnd.lognormvariate(2, 1)}) for i in range(400)]
        run_cli("produce", log, "--key-field", "u", input="\n".join(lines) + "\n", check=True)
        runs.append(run_cli("window", log, *window, "--follow", "--group", "g", "--idle-timeout", "300ms",
                            check=True).stdout)
    # a last event an hour later closes every window: the runs' rows, put together, are the batch
    # run's but the closer's own (still open for the follower, flushed by the batch run's end)
    closer = json.dumps({"at": T0 + 3_600_000 + 10 * 400 * 100, "u": "closer", "v": 1, "w": 1.0})
    run_cli("produce", log, "--key-field", "u", input=closer + "\n", check=True)
    runs.append(run_cli("window", log, *window, "--follow", "--group", "g", "--idle-timeout", "300ms",
                        check=True).stdout)
    once = rows_of(run_cli("window", log, *window, check=True).stdout)
    assert orjson.loads(once[-1])["key"] == "closer"
    assert [line for out in runs for line in rows_of(out)] == once[:-1]
    if kind == "tumbling":
        assert max(orjson.loads(line)["count"] for line in once) > 300
    ck = orjson.loads(open(os.path.join(log, "groups", ".g.window.json"), "rb").read())
    assert len(json.dumps(ck)) < 3 * 60_000  # a few KiB a sketch, not the values

def test_changed_options_refuse_the_checkpoint(tmp_path):
    log = str(tmp_path / "events")
    run_cli("produce", log, input=batches(1, 5)[0], check=True)
    run_cli("window", log, *WINDOW, "--follow", "--group", "g", "--idle-timeout", "100ms", check=True)
    p = run_cli("window", log, "--tumbling", "5s", "--follow", "--group", "g", "--idle-timeout", "100ms")
    assert p.returncode == 2 and b"different window options" in p.stderr


def test_sigterm_checkpoints_and_exits_0(tmp_path):
    log = str(tmp_path / "events")
    run_cli("produce", log, input=batches(1, 20)[0], check=True)
    proc = subprocess.Popen([*CLI, "window", log, *WINDOW, "--follow", "--group", "g"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
    ck = os.path.join(log, "groups", ".g.window.json")
    deadline = time.monotonic() + 20
    while not os.path.exists(ck) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert orjson.loads(open(ck, "rb").read())["offsets"] == {"0": 20}


def test_follow_needs_a_log(tmp_path):
    f = tmp_path / "e.jsonl"
    f.write_text('{"at": 1}\n')
    p = run_cli("window", str(f), "--tumbling", "1s", "--follow")
    assert p.returncode == 2 and b"needs a log" in p.stderr


def test_a_second_follower_on_the_group_is_refused(tmp_path):
    log = str(tmp_path / "events")
    run_cli("produce", log, input=batches(1, 3)[0], check=True)
    proc = subprocess.Popen([*CLI, "window", log, *WINDOW, "--follow", "--group", "g"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cli_env())
    try:
        ck = os.path.join(log, "groups", ".g.window.json")
        deadline = time.monotonic() + 20
        while not os.path.exists(ck) and time.monotonic() < deadline:
            time.sleep(0.05)
        p = run_cli("window", log, *WINDOW, "--follow", "--group", "g", "--idle-timeout", "100ms")
        assert p.returncode == 1 and b"another" in p.stderr
    finally:
        proc.kill()
        proc.wait()


def test_processing_time_windows_close_on_the_clock(tmp_path):
    log = str(tmp_path / "events")
    run_cli("produce", log, input='{"a": 1}\n{"a": 2}\n', check=True)
    p = run_cli("window", log, "--tumbling", "200ms", "--processing-time", "--follow", "--group", "g",
                "--idle-timeout", "1500ms", check=True)
    rows = [orjson.loads(x) for x in p.stdout.splitlines()]
    assert sum(r["count"] for r in rows) == 2
    # closed by the clock before the idle timeout: nothing was left open in the checkpoint
    ck = orjson.loads(open(os.path.join(log, "groups", ".g.window.json"), "rb").read())
    assert ck["run"]["state"]["open"] == []


def test_damaged_checkpoint_is_a_clear_error(tmp_path):
    log = str(tmp_path / "events")
    run_cli("produce", log, input=batches(1, 5)[0], check=True)
    ck = os.path.join(log, "groups", ".g.window.json")
    os.makedirs(os.path.dirname(ck), exist_ok=True)
    for text in ('{"format":1,"group":"g","offsets":{"0":3}}', '{"format":1,"offsets":{},"run":{"x":1}}', "{oops"):
        with open(ck, "w") as f:
            f.write(text)
        p = run_cli("window", log, *WINDOW, "--follow", "--group", "g", "--idle-timeout", "100ms")
        assert p.returncode == 1 and b"checkpoint" in p.stderr and b"Traceback" not in p.stderr, p.stderr


# -- resuming where retention deleted unread records, or past the end (as consume --group does) --

def padded(first: int, n: int) -> str:
    """n events, one per 100 ms from T0 + first * 100, padded so a 16 KiB segment holds ~100."""
    return "".join(json.dumps({"at": T0 + i * 100, "u": "u", "v": 1, "pad": "x" * 100}) + "\n"
                   for i in range(first, first + n))


def retention_log(tmp_path, checkpoint_first: int) -> tuple[str, int]:
    """2000 events in small segments, of which a group has read `checkpoint_first` (a window checkpoint
    when > 0, else only committed offsets 0), then retention deleted the oldest segments, unread ones
    included: (log, its first offset left)."""
    from streamctl.storage import log as logmod
    from streamctl.storage import reader

    log = str(tmp_path / "events")
    run_cli("produce", log, "--segment-bytes", "16KiB", input=padded(0, checkpoint_first or 2000), check=True)
    if checkpoint_first:
        run_cli("window", log, *WINDOW, "--follow", "--group", "g", "--idle-timeout", "300ms", check=True)
        run_cli("produce", log, input=padded(checkpoint_first, 2000 - checkpoint_first), check=True)
    else:
        run_cli("replay", log, "--group", "g", "--to-earliest", "--execute", check=True)  # committed 0, nothing read
    run_cli("compact", log, "--retention-bytes", "64KiB", "--force", check=True)
    first = reader.partition_info(logmod.open_log(log), 0).first_offset
    assert first > max(checkpoint_first, 1), "retention must have deleted records the group did not read"
    return log, first


@pytest.mark.parametrize("checkpoint_first", [0, 300])
def test_resume_in_a_range_retention_deleted_says_so_and_goes_on(tmp_path, checkpoint_first):
    from streamctl.processing.windows.config import WindowConfig
    from streamctl.processing.windows.follow import follow

    log, first = retention_log(tmp_path, checkpoint_first)
    cfg = WindowConfig("tumbling", 2000, time_field="at", aggs=["count", "sum:v"], lateness=10_000)
    rows: list = []
    notes: list[str] = []
    run = follow(log, "g", cfg, rows.extend, lambda: None, 0.3, notice=notes.append)
    assert len(notes) == 1
    assert f"committed offset {checkpoint_first} is no longer in the log" in notes[0]
    assert f"resuming at {first}, the next existing record" in notes[0]
    assert run.stats.events == checkpoint_first + 2000 - first  # what the first run read, and the rest
    ck = orjson.loads(open(os.path.join(log, "groups", ".g.window.json"), "rb").read())
    assert ck["offsets"] == {"0": 2000}
    # the next run resumes at the end: nothing more to say
    notes.clear()
    follow(log, "g", cfg, rows.extend, lambda: None, 0.3, notice=notes.append)
    assert notes == []


CLOSER = json.dumps({"at": T0 + 3_600_000, "u": "closer", "v": 1}) + "\n"  # closes the windows of padded()


def test_resume_after_retention_from_the_shell(tmp_path):
    log, first = retention_log(tmp_path, 0)
    run_cli("produce", log, input=CLOSER, check=True)
    p = run_cli("window", log, *WINDOW, "--follow", "--group", "g", "--idle-timeout", "1s")
    assert p.returncode == 0, p.stderr
    assert f"resuming at {first}, the next existing record".encode() in p.stderr
    assert sum(orjson.loads(x)["count"] for x in p.stdout.splitlines()) == 2000 - first
    assert orjson.loads(open(os.path.join(log, "groups", "g.json"), "rb").read())["offsets"] == {"0": 2001}


def test_retention_while_following_says_so_and_goes_on(tmp_path):
    """Retention deletes records a running follower has not read yet (it was stopped meanwhile):
    the follower says so on stderr, resumes at the next record and counts the rest."""
    log = str(tmp_path / "events")
    run_cli("produce", log, "--segment-bytes", "16KiB", input=padded(0, 100), check=True)
    proc = subprocess.Popen([*CLI, "window", log, *WINDOW, "--follow", "--group", "g", "--idle-timeout", "3s"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
    try:
        ck = os.path.join(log, "groups", ".g.window.json")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the first 100 are read and checkpointed
            if os.path.exists(ck) and orjson.loads(open(ck, "rb").read())["offsets"].get("0") == 100:
                break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGSTOP)
        run_cli("produce", log, input=padded(100, 1900) + CLOSER, check=True)
        run_cli("compact", log, "--retention-bytes", "64KiB", "--force", check=True)
        from streamctl.storage import log as logmod
        from streamctl.storage import reader

        first = reader.partition_info(logmod.open_log(log), 0).first_offset
        assert first > 100
        os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert b"offset 100 is no longer in the log" in err and f"resuming at {first}".encode() in err
    assert sum(orjson.loads(x)["count"] for x in out.splitlines()) == 100 + 2000 - first


@pytest.mark.parametrize("where", ["group file", "checkpoint"])
def test_committed_offset_past_the_end_is_refused(tmp_path, where):
    log = str(tmp_path / "events")
    run_cli("produce", log, "--partitions", "2", "--key-field", "u", input=batches(1, 40)[0], check=True)
    groups = os.path.join(log, "groups")
    if where == "checkpoint":
        run_cli("window", log, *WINDOW, "--follow", "--group", "g", "--idle-timeout", "300ms", check=True)
        ck = os.path.join(groups, ".g.window.json")
        body = orjson.loads(open(ck, "rb").read())
        body["offsets"]["1"] = body["offsets"].get("1", 0) + 1000
        with open(ck, "wb") as f:
            f.write(orjson.dumps(body))
        past = body["offsets"]["1"]
    else:
        run_cli("replay", log, "--group", "g", "--to-earliest", "--execute", check=True)
        gf = os.path.join(groups, "g.json")
        body = orjson.loads(open(gf, "rb").read())
        body["offsets"]["1"] = past = 1000
        with open(gf, "wb") as f:
            f.write(orjson.dumps(body))
    consume = run_cli("consume", log, "--group", "g") if where == "group file" else None
    p = run_cli("window", log, *WINDOW, "--follow", "--group", "g", "--idle-timeout", "300ms")
    assert p.returncode == 1, p.stderr
    err = p.stderr.decode()
    assert err.startswith("streamctl: ") and "Traceback" not in err
    assert f"committed offset {past} for partition 1 is past the end of the log" in err
    assert p.stdout == b""  # no partition read while another is skipped
    if consume is not None:  # the same refusal, the same exit code as consume --group
        assert consume.returncode == p.returncode and consume.stderr == p.stderr
    else:
        assert ".g.window.json: move that checkpoint away too" in err


def test_a_sum_beyond_64_bits_survives_a_restart(tmp_path):
    """The checkpoint keeps a total past 64 bits exactly (orjson refuses such ints, and reads them as floats)."""
    log = str(tmp_path / "log")
    big = (1 << 63) - 1
    lines = "".join(json.dumps({"k": "a", "ts": T0 + i, "v": big}) + "\n" for i in range(3))
    args = ("window", log, "--tumbling", "1m", "--time-field", "value.ts", "--agg", "sum:value.v",
            "--follow", "--group", "g", "--idle-timeout", "200ms")
    run_cli("produce", log, "--key-field", "k", input=lines, check=True)
    p = run_cli(*args)
    assert p.returncode == 0 and p.stdout == b"", p.stderr  # the window is open: in the checkpoint
    closer = json.dumps({"k": "a", "ts": T0 + 120_000, "v": 0}) + "\n"
    run_cli("produce", log, "--key-field", "k", input=lines + closer, check=True)
    p = run_cli(*args)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-1].endswith(b'"sum_v":%d}' % (6 * big))


def test_a_restart_reports_its_own_counts(tmp_path):
    """Each run reports what it read itself: its records without a usable time (naming its first,
    never "first: None") and its late events; the checkpoint keeps the totals of all runs."""
    log = str(tmp_path / "log")
    args = ("window", log, "--tumbling", "1m", "--time-field", "t", "--follow", "--group", "g",
            "--idle-timeout", "200ms")
    run_cli("produce", log, input='{"t":"2025-11-21T10:01:00Z"}\n{"x":1}\n{"t":"2025-11-21T10:00:00Z"}\n',
            check=True)
    first = run_cli(*args, check=True).stderr
    one_bad = b"1 record(s) without a usable time in 't' skipped (first: "
    assert one_bad in first and b"offset 1" in first and b"1 late event(s) DROPPED" in first, first
    quiet = run_cli(*args, check=True).stderr  # nothing new to read: nothing to report
    assert b"record(s) without a usable time" not in quiet and b"late" not in quiet, quiet
    run_cli("produce", log, input='{"t":"2025-11-21T10:01:30Z"}\n{"y":1}\n', check=True)
    again = run_cli(*args, check=True).stderr
    assert one_bad in again and b"offset 4" in again and b"None" not in again and b"late" not in again, again
    ck = orjson.loads(open(os.path.join(log, "groups", ".g.window.json"), "rb").read())
    assert ck["run"]["stats"]["bad_time"] == 2 and ck["run"]["stats"]["late"] == 1
    assert "offset 1" in ck["run"]["stats"]["bad_time_example"]


def _fold(lines: list[bytes]) -> dict:
    """Rows folded by (window, key): a row replaces the one before, a delete row removes it."""
    table: dict = {}
    for line in lines:
        r = orjson.loads(line)
        at = (r["window"]["start"], r["window"]["end"], orjson.dumps(r["key"]))
        if r.get("op") == "delete":
            table.pop(at, None)
        else:
            table[at] = {k: v for k, v in r.items() if k != "revision"}
    return table


@pytest.mark.parametrize("kind", [["--session", "5m"], ["--tumbling", "10m"], ["--sliding", "5m"]])
@pytest.mark.parametrize("late", [[], ["--late", "correct"], ["--emit", "update"]])
def test_successive_runs_write_each_window_once(tmp_path, kind, late):
    """An idle timeout with --group writes only the windows the watermark closed; the open ones
    stay in the checkpoint and are written once, by the run that closes them. So the outputs of
    successive runs, put together, are the batch run's rows (but for the windows only the end of
    input closes); a run with nothing new to read writes nothing."""
    log = str(tmp_path / "log")
    args = ("window", log, *kind, "--time-field", "at", "--agg", "sum:v", *late)
    follow = (*args, "--follow", "--group", "g", "--idle-timeout", "200ms")
    batches = [[("a", "10:00", 1), ("b", "10:00", 10)], [("a", "10:03", 2)], [("a", "10:06", 4), ("b", "10:30", 8)],
               [("a", "10:40", 16)], [("z", "12:00", 0)]]  # the last one closes every window but its own
    out: list[bytes] = []
    for batch in batches:
        lines = "".join(json.dumps({"key": k, "value": {"at": f"2026-01-01T{t}:00Z", "v": v}}) + "\n"
                        for k, t, v in batch)
        run_cli("produce", log, "--envelope", input=lines, check=True)
        for _ in range(2):  # the second run has nothing new: it writes nothing
            p = run_cli(*follow)
            assert p.returncode == 0, p.stderr
            out += rows_of(p.stdout)
    once = rows_of(run_cli(*args, check=True).stdout)
    if late == ["--emit", "update"]:  # a row at every change, open windows too
        assert out == once
        return
    closed = [line for line in once if orjson.loads(line)["key"] != "z"]
    assert len(closed) == len(once) - 1
    assert out == closed


def test_idle_timeout_without_a_group_flushes_the_open_windows(tmp_path):
    """Without --group no later run resumes the open windows: the idle timeout writes them, as the
    end of input would."""
    log = str(tmp_path / "log")
    todo = batches(1, 30)
    run_cli("produce", log, "--key-field", "u", input=todo[0], check=True)
    once = run_cli("window", log, *WINDOW, check=True).stdout
    p = run_cli("window", log, *WINDOW, "--follow", "--idle-timeout", "300ms", check=True)
    assert p.stdout == once and len(rows_of(once)) > len(closed_rows(rows_of(once), watermark(todo)))
