"""consume --follow: new records, --idle-timeout, --max, signals commit what was written, kill -9 loop."""

from __future__ import annotations

import json
import os
import random
import select
import signal
import subprocess
import threading
import time

from conftest import CLI, cli_env, run_cli


class Lines:
    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.buf = b""
        self.lines: list[bytes] = []

    def wait_for(self, n: int, timeout: float = 8.0) -> list[bytes]:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while len(self.lines) < n:
            r, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not r:
                raise AssertionError(f"timed out waiting for {n} lines, got {len(self.lines)}")
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self.buf += chunk
            *done, self.buf = self.buf.split(b"\n")
            self.lines.extend(done)
        return self.lines


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())


def produce(log: str, *values: object, extra: tuple[str, ...] = ()) -> None:
    run_cli("produce", log, "--key-field", "k", *extra, input="".join(json.dumps(v) + "\n" for v in values),
            check=True)


def committed(log: str, group: str) -> dict[int, int]:
    try:
        with open(os.path.join(log, "groups", f"{group}.json")) as f:
            return {int(p): o for p, o in json.load(f)["offsets"].items()}
    except FileNotFoundError:
        return {}


def test_follow_new_records_then_idle_timeout(logdir: str) -> None:
    produce(logdir, {"k": "a", "i": 0}, extra=("--partitions", "2"))
    proc = start("consume", logdir, "--follow", "--idle-timeout", "1500ms", "--value")
    rd = Lines(proc)
    assert json.loads(rd.wait_for(1)[0]) == {"k": "a", "i": 0}
    produce(logdir, {"k": "b", "i": 1}, {"k": "c", "i": 2})
    got = sorted(json.loads(x)["i"] for x in rd.wait_for(3)[1:3])
    assert got == [1, 2]
    out, err = proc.communicate(timeout=10)  # ends by itself after 1.5 s of nothing new
    assert proc.returncode == 0, err
    assert out == b""


def test_follow_from_latest_and_max(logdir: str) -> None:
    produce(logdir, *({"k": f"k{i}", "i": i} for i in range(5)), extra=("--partitions", "2"))
    proc = start("consume", logdir, "--follow", "--from", "latest", "--max", "3", "--group", "g",
                 "--format", "%s\\n")
    for i in range(5, 40):  # keep appending until it has had its 3 (its start-up time varies)
        time.sleep(0.2)
        if proc.poll() is not None:
            break
        produce(logdir, {"k": f"k{i}", "i": i})
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    got = [json.loads(x) for x in out.splitlines()]
    assert len(got) == 3 and all(v["i"] >= 5 for v in got)
    ends = {}
    for ln in run_cli("consume", logdir, check=True).stdout.splitlines():
        r = json.loads(ln)
        if r["value"] in got:
            ends[r["partition"]] = r["offset"] + 1
    assert committed(logdir, "g") == ends


def _sig_commits(logdir: str, sig: int, rc: int) -> None:
    produce(logdir, *({"k": f"k{i}", "i": i} for i in range(6)), extra=("--partitions", "3"))
    proc = start("consume", logdir, "--group", "g", "--follow")
    rd = Lines(proc)
    rd.wait_for(6)
    produce(logdir, {"k": "x", "i": 6})
    rd.wait_for(7)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == rc
    assert b"Traceback" not in err
    seen: dict[int, int] = {}
    for ln in rd.lines:
        r = json.loads(ln)
        seen[r["partition"]] = max(seen.get(r["partition"], -1), r["offset"] + 1)
    assert committed(logdir, "g") == seen
    # the next run has nothing left
    assert run_cli("consume", logdir, "--group", "g", check=True).stdout == b""


def test_sigint_commits_what_was_written_exit_130(logdir: str) -> None:
    _sig_commits(logdir, signal.SIGINT, 130)


def test_sigterm_commits_what_was_written_exit_0(logdir: str) -> None:
    _sig_commits(logdir, signal.SIGTERM, 0)


def test_a_group_needs_a_log_but_a_plain_file_can_be_followed(tmp_path) -> None:
    f = tmp_path / "x.jsonl"
    f.write_text("1\n")
    assert run_cli("consume", str(f), "--follow", "--group", "g").returncode == 2
    p = run_cli("consume", str(f), "--follow", "--idle-timeout", "200ms", "--value", timeout=60)
    assert p.returncode == 0 and p.stdout == b"1\n"


def test_kill9_loop_committed_offset_monotonic_and_never_past_delivered(tmp_path) -> None:
    """A committing follower killed at random points while a producer keeps appending."""
    log = str(tmp_path / "log")
    out_path = tmp_path / "delivered.jsonl"
    produce(log, *({"k": f"k{i % 11}", "i": i} for i in range(300)), extra=("--partitions", "2"))
    feeder = subprocess.Popen([*CLI, "produce", log, "--key-field", "k"], stdin=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=cli_env())
    stop = threading.Event()

    def feed() -> None:
        i = 300
        while not stop.is_set():
            feeder.stdin.write("".join(json.dumps({"k": f"k{j % 11}", "i": j}) + "\n"
                                       for j in range(i, i + 20)).encode())
            feeder.stdin.flush()
            i += 20
            time.sleep(0.01)

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    rng = random.Random(7)
    last: dict[int, int] = {}
    try:
        for _round in range(8):
            with open(out_path, "ab") as out:
                proc = subprocess.Popen([*CLI, "consume", log, "--group", "g", "--follow"], stdout=out,
                                        stderr=subprocess.DEVNULL, env=cli_env())
                # kill at a random point once it is running (start-up time varies with load)
                size = out_path.stat().st_size
                deadline = time.monotonic() + 10
                while out_path.stat().st_size == size and time.monotonic() < deadline:
                    time.sleep(0.01)
                time.sleep(rng.uniform(0, 0.4))
                proc.kill()
                proc.wait()
            now = committed(log, "g")
            delivered: dict[int, set[int]] = {}
            for ln in out_path.read_bytes().splitlines():
                r = json.loads(ln)
                delivered.setdefault(r["partition"], set()).add(r["offset"])
            for p, off in now.items():
                assert off >= last.get(p, 0), f"partition {p}: committed went back {last.get(p)} -> {off}"
                missing = set(range(off)) - delivered.get(p, set())
                assert not missing, f"partition {p}: committed {off} but never delivered {sorted(missing)[:5]}"
            last = now
    finally:
        stop.set()
        t.join()
        feeder.stdin.close()
        feeder.wait(timeout=10)
    assert sum(last.values()) > 300  # it made progress through the live part too
    assert run_cli("check", log).returncode == 0


def test_follower_behind_retention_is_told_and_resumes(logdir: str) -> None:
    """In-process: a cursor whose next records were deleted says so and resumes at the next one."""
    from streamctl.live.cursor import Follower
    from streamctl.storage import log as logmod

    produce(logdir, *({"k": "a", "i": i, "pad": "x" * 100} for i in range(40)), extra=("--segment-bytes", "1KiB"))
    lg = logmod.open_log(logdir)
    f = Follower(lg, {0: 0})
    first = f.poll(per_line=True, limit=300)  # reads a little of the first segment, then stops
    assert first and first[0][1] == 1
    segs = lg.segments(0)
    for seg in segs[:3]:
        os.unlink(seg.path)
    rest = []
    while items := f.poll(per_line=True):
        rest += items
    notes = f.notices()
    assert len(notes) == 1 and f"resuming at {segs[3].base}" in notes[0]
    assert [nxt - 1 for _, nxt, _ in rest] == list(range(segs[3].base, 40))
    f.close()
