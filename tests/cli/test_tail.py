"""tail: the last N merged across partitions, and -f following appends, rolls, rewrites, signals."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time

import pytest

from conftest import CLI, cli_env, run_cli


class Lines:
    """Reads a child's stdout line by line with a deadline (no thread, no blocking forever)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.buf = b""
        self.lines: list[bytes] = []

    def wait_for(self, n: int, timeout: float = 8.0) -> list[bytes]:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while len(self.lines) < n:
            left = deadline - time.monotonic()
            r, _, _ = select.select([fd], [], [], max(0.0, left))
            if not r:
                raise AssertionError(f"timed out waiting for {n} lines, got {len(self.lines)}: {self.lines[-3:]}")
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self.buf += chunk
            *done, self.buf = self.buf.split(b"\n")
            self.lines.extend(done)
        return self.lines


def start(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env or cli_env())


def stop(proc: subprocess.Popen, sig: int = signal.SIGINT) -> tuple[int, bytes]:
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return proc.returncode, err


def produce(log: str, *values: object, extra: tuple[str, ...] = ()) -> None:
    data = "".join(json.dumps(v) + "\n" for v in values)
    run_cli("produce", log, "--key-field", "k", *extra, input=data, check=True)


@pytest.fixture
def three(logdir: str) -> str:
    # three appends, so timestamps differ between them and the merge order matters
    for b in range(3):
        produce(logdir, *({"k": f"u{i % 7}", "i": i} for i in range(b * 10, b * 10 + 10)),
                extra=("--partitions", "3"))
    return logdir


def test_last_ten_merged_like_consume(three: str) -> None:
    every = run_cli("consume", three, check=True).stdout.splitlines()
    out = run_cli("tail", three, check=True).stdout.splitlines()
    assert out == every[-10:]
    parts = {json.loads(ln)["partition"] for ln in out}
    assert len(parts) > 1


def test_n_partition_value_format(three: str) -> None:
    p1 = run_cli("consume", three, "--partition", "1", check=True).stdout.splitlines()
    assert run_cli("tail", three, "-n", "3", "--partition", "1", check=True).stdout.splitlines() == p1[-3:]
    vals = run_cli("tail", three, "-n", "2", "--value", check=True).stdout.splitlines()
    assert [json.loads(v) for v in vals] == [json.loads(ln)["value"] for ln in
                                            run_cli("consume", three, check=True).stdout.splitlines()[-2:]]
    fmt = run_cli("tail", three, "-n", "1", "--format", "%p:%o %k\\n", check=True).stdout
    last = json.loads(run_cli("consume", three, check=True).stdout.splitlines()[-1])
    assert fmt == f"{last['partition']}:{last['offset']} {last['key']}\n".encode()
    assert run_cli("tail", three, "-n", "0", check=True).stdout == b""
    assert len(run_cli("tail", three, "-n", "100", check=True).stdout.splitlines()) == 30


def test_usage_errors(three: str, tmp_path) -> None:
    assert run_cli("tail", three, "--value", "--format", "%s").returncode == 2
    assert run_cli("tail", three, "--partition", "9").returncode == 2
    assert run_cli("tail", str(tmp_path / "nope")).returncode == 2
    r = run_cli("tail", three, "-n", "-1")
    assert r.returncode == 2 and b"Traceback" not in r.stderr


def test_plain_file(tmp_path) -> None:
    f = tmp_path / "e.jsonl"
    f.write_text("".join(f'{{"n":{i}}}\n' for i in range(20)))
    out = run_cli("tail", str(f), "-n", "2", "--value", check=True).stdout
    assert out == b'{"n":18}\n{"n":19}\n'


def test_follow_prints_new_record_and_sigint_is_clean(logdir: str) -> None:
    produce(logdir, {"k": "a", "n": "before"})
    proc = start("tail", "-f", logdir, "-n", "1", "--value")
    try:
        rd = Lines(proc)
        assert json.loads(rd.wait_for(1)[0]) == {"k": "a", "n": "before"}
        produce(logdir, {"k": "b", "n": "new"})
        assert json.loads(rd.wait_for(2)[1]) == {"k": "b", "n": "new"}
    finally:
        rc, err = stop(proc, signal.SIGINT)
    assert rc == 130
    assert b"Traceback" not in err
    # tail never commits
    assert not os.path.exists(os.path.join(logdir, "groups")) or not [
        n for n in os.listdir(os.path.join(logdir, "groups")) if n.endswith(".json")]


def test_follow_sigterm_exits_zero(logdir: str) -> None:
    produce(logdir, {"k": "a"})
    proc = start("tail", "--follow", logdir, "-n", "1")
    Lines(proc).wait_for(1)
    rc, err = stop(proc, signal.SIGTERM)
    assert rc == 0 and b"Traceback" not in err


@pytest.mark.parametrize("polling", ["0", "1"])
def test_follow_across_segment_rolls(logdir: str, polling: str) -> None:
    run_cli("produce", logdir, "--segment-bytes", "1KiB", "--partitions", "2", "--key-field", "k",
            input='{"k":"start"}\n', check=True)
    proc = start("tail", "-f", logdir, "-n", "1", "--value", env=cli_env(STREAMCTL_FORCE_POLLING=polling))
    try:
        rd = Lines(proc)
        rd.wait_for(1)
        sent = []
        for batch in range(4):
            vals = [{"k": f"k{i % 5}", "b": batch, "i": i, "pad": "x" * 60} for i in range(15)]
            produce(logdir, *vals)
            sent += vals
        got = [json.loads(ln) for ln in rd.wait_for(1 + len(sent))[1:]]
    finally:
        stop(proc)
    assert sorted(got, key=lambda v: (v["b"], v["i"])) == sent
    assert len(os.listdir(os.path.join(logdir, "p0"))) > 2  # it did roll


def test_follow_survives_retention_and_compaction_swaps(logdir: str) -> None:
    """Segments deleted (retention) and rewritten in place by rename (compaction) beside tail -f."""
    vals = [{"k": f"k{i % 3}", "i": i, "pad": "y" * 80} for i in range(40)]
    run_cli("produce", logdir, "--segment-bytes", "1KiB", "--key-field", "k",
            input="".join(json.dumps(v) + "\n" for v in vals), check=True)
    proc = start("tail", "-f", logdir, "-n", "2", "--format", "%o\\n")
    try:
        rd = Lines(proc)
        assert rd.wait_for(2) == [b"38", b"39"]
        pdir = os.path.join(logdir, "p0")
        segs = sorted(os.listdir(pdir))
        assert len(segs) > 3
        os.unlink(os.path.join(pdir, segs[0]))  # retention drops the oldest
        # compaction swaps a closed segment for a copy holding fewer records (same offsets)
        victim = os.path.join(pdir, segs[1])
        with open(victim, "rb") as f:
            kept = f.readlines()[-1:]
        tmp = victim + ".cleaned"
        with open(tmp, "wb") as f:
            f.writelines(kept)
        os.replace(tmp, victim)
        produce(logdir, {"k": "after", "i": 40})
        produce(logdir, *({"k": "z", "i": 41 + j, "pad": "z" * 80} for j in range(20)))
        got = rd.wait_for(2 + 21)
    finally:
        stop(proc)
    assert got[2:] == [str(o).encode() for o in range(40, 61)]
    assert run_cli("check", logdir).returncode == 0


def test_follow_beside_compact_roll_and_retention(logdir: str) -> None:
    """The real `compact --roll` with retention beside tail -f: new records once each, in order."""
    vals = [{"k": f"k{i % 4}", "i": i, "pad": "q" * 60} for i in range(60)]
    run_cli("produce", logdir, "--segment-bytes", "1KiB", "--key-field", "k",
            input="".join(json.dumps(v) + "\n" for v in vals), check=True)
    proc = start("tail", "-f", logdir, "-n", "1", "--format", "%o\\n")
    try:
        rd = Lines(proc)
        assert rd.wait_for(1) == [b"59"]
        produce(logdir, {"k": "k1", "i": 60})
        rd.wait_for(2)
        r = run_cli("compact", logdir, "--roll", "--retention-bytes", "1KiB", "--force")
        assert r.returncode == 0, r.stderr
        produce(logdir, *({"k": f"n{j}", "i": 61 + j, "pad": "r" * 60} for j in range(25)))
        got = rd.wait_for(2 + 25)
    finally:
        stop(proc)
    assert got == [str(o).encode() for o in range(59, 86)]


def test_follow_plain_file_like_tail_F(tmp_path) -> None:
    f = tmp_path / "events.jsonl"
    f.write_text('{"n":0}\n{"n":1}\n')
    proc = start("tail", "-f", "-n", "1", str(f), "--format", "%o %s\\n")
    try:
        rd = Lines(proc)
        assert rd.wait_for(1) == [b'1 {"n":1}']
        with open(f, "a") as w:
            w.write('{"n":2}\n{"n":')  # the second line is not complete yet
            w.flush()
            assert rd.wait_for(2)[1] == b'2 {"n":2}'
            w.write('3}\n')
        assert rd.wait_for(3)[2] == b'3 {"n":3}'
        f.write_text('{"n":"again"}\n')  # truncated and rewritten: read from the start
        assert rd.wait_for(4)[3] == b'0 {"n":"again"}'
        new = tmp_path / "events.jsonl.new"  # rotated by rename: follow the name
        new.write_text('{"n":"rotated"}\n')
        os.replace(new, f)
        assert rd.wait_for(5)[4] == b'0 {"n":"rotated"}'
    finally:
        rc, err = stop(proc)
    assert rc == 130 and b"truncated" in err and b"replaced" in err
