"""Kill streamctl exactly at its K-th write/fsync/rename/ftruncate (strace fault injection) and
check the guarantees of SPEC section 4 after every single crash point."""

from __future__ import annotations

import json
import os

import pytest

from conftest import run_cli

from .util import assert_log_sound, copy_log, count_calls, records, strace_run

MAX_POINTS = 45  # per syscall: bounds the run to a few minutes on 2 cores


def sweep(n: int) -> list[int]:
    if n <= MAX_POINTS:
        return list(range(1, n + 1))
    step = n / MAX_POINTS
    return sorted({1, n, *(int(1 + i * step) for i in range(MAX_POINTS))})


@pytest.fixture
def base_log(tmp_path):
    log = str(tmp_path / "base")
    run_cli("produce", log, "--partitions", "2", "--key-field", "k",
            input="".join(json.dumps({"k": f"k{i % 3}", "id": f"base-{i}"}) + "\n" for i in range(20)), check=True)
    # a torn tail from an earlier crash: the next writer must truncate it (an ftruncate to crash at)
    for part in ("p0", "p1"):
        seg = os.path.join(log, part, "00000000000000000000.jsonl")
        with open(seg, "ab") as f:
            f.write(b'{"offset":99,"partition":0,"ts":1,"key":nu')
    return log


@pytest.mark.parametrize("syscall", ["write", "fsync", "ftruncate"])
def test_produce_crash_points(strace, base_log, tmp_path, syscall):
    payload = "".join(json.dumps({"k": f"k{i % 3}", "id": f"new-{i}"}) + "\n" for i in range(25)).encode()
    args = ["produce", str(tmp_path / "log"), "--fsync", "always", "--echo", "--key-field", "k"]
    copy_log(base_log, str(tmp_path / "log"))
    n = count_calls(strace, syscall, args, payload)
    if n == 0:
        pytest.skip(f"produce makes no {syscall} call on this path")
    for k in sweep(n):
        log = str(tmp_path / "log")
        copy_log(base_log, log)
        p = strace_run(strace, syscall, "signal=SIGKILL", k, args, payload)
        acked = [json.loads(x)["value"]["id"] for x in p.stdout.splitlines() if x.endswith(b"}")]
        recs = assert_log_sound(log)
        ids = [r["value"]["id"] for r in recs]
        assert len(ids) == len(set(ids)), f"K={k}: a record appears twice"
        assert {f"base-{i}" for i in range(20)} <= set(ids), f"K={k}: an old record was lost"
        assert set(acked) <= set(ids), f"K={k}: an acknowledged record is missing"
        # the next writer continues contiguously
        run_cli("produce", log, input="1\n", check=True)
        assert_log_sound(log)


@pytest.mark.parametrize("syscall", ["write", "fsync", "rename"])
def test_log_creation_crash_points(strace, tmp_path, syscall):
    args = ["produce", "newlog", "--partitions", "3"]
    n = count_calls(strace, syscall, args, b"1\n2\n", cwd=str(tmp_path / "probe") if os.makedirs(tmp_path / "probe") is None else None)
    for k in sweep(n):
        d = tmp_path / f"c{k}"
        d.mkdir()
        strace_run(strace, syscall, "signal=SIGKILL", k, args, b"1\n2\n", cwd=str(d))
        # whatever state the crash left, the next produce finishes the job
        p = run_cli("produce", "newlog", input="3\n", cwd=str(d))
        assert p.returncode == 0, (k, p.stderr)
        assert_log_sound(str(d / "newlog"))


@pytest.mark.parametrize("syscall", ["write", "fsync", "rename"])
def test_committing_consume_crash_points(strace, tmp_path, syscall):
    """A group offset never points past delivered records and always parses."""
    log = str(tmp_path / "log")
    run_cli("produce", log, "--partitions", "2", input="".join(f"{i}\n" for i in range(300)), check=True)
    run_cli("consume", log, "--group", "g", "--max", "100", check=True)
    before = json.load(open(os.path.join(log, "groups", "g.json")))["offsets"]
    gfile = os.path.join(log, "groups", "g.json")
    saved = open(gfile, "rb").read()
    args = ["consume", log, "--group", "g", "--format", "%p %o\n"]
    n = count_calls(strace, syscall, args)
    open(gfile, "wb").write(saved)
    for k in sweep(n):
        open(gfile, "wb").write(saved)
        p = strace_run(strace, syscall, "signal=SIGKILL", k, args)
        delivered: dict[int, int] = {int(p_): int(o) for p_, o in before.items()}
        for ln in p.stdout.splitlines():
            if ln.count(b" ") == 1 and not ln.endswith(b" "):
                part, off = map(int, ln.split())
                delivered[part] = max(delivered.get(part, 0), off + 1)
        after = json.load(open(gfile))["offsets"]  # always parses
        for part, off in after.items():
            assert off >= before.get(part, 0), f"K={k}: committed offset went back"
            assert off <= delivered.get(int(part), 0), f"K={k}: committed past what was delivered"
        assert run_cli("check", log).returncode == 0


def test_fsync_eio_makes_produce_fail_and_never_report_success(strace, tmp_path):
    log = str(tmp_path / "log")
    run_cli("produce", log, input="0\n", check=True)
    p = strace_run(strace, "fsync", "error=EIO", 1, ["produce", log], b"1\n2\n3\n")
    assert p.returncode != 0
    assert b"fsync failed" in p.stderr and b"produced" not in p.stderr and b"Traceback" not in p.stderr
    assert_log_sound(log)


def test_enospc_on_offset_file_keeps_the_old_offset(strace, tmp_path):
    log = str(tmp_path / "log")
    run_cli("produce", log, input="".join(f"{i}\n" for i in range(50)), check=True)
    run_cli("consume", log, "--group", "g", "--max", "10", check=True)
    gfile = os.path.join(log, "groups", "g.json")
    saved = open(gfile, "rb").read()
    args = ["consume", log, "--group", "g", "--value"]
    n = count_calls(strace, "write", args)
    failures = 0
    for k in range(1, n + 1):
        open(gfile, "wb").write(saved)
        p = strace_run(strace, "write", "error=ENOSPC", k, args)
        offs = json.load(open(gfile))["offsets"]["0"]
        if p.returncode != 0:
            failures += 1
            assert b"Traceback" not in p.stderr
            assert offs in (10, 50)  # old offset intact (or the commit had already landed)
        assert not [x for x in os.listdir(os.path.join(log, "groups")) if x.endswith(".tmp")]
    assert failures > 0


def test_sigstop_lock_holder_makes_others_wait_then_fail_clearly(strace, tmp_path):
    import signal
    import subprocess
    import time

    from conftest import CLI, cli_env

    log = str(tmp_path / "log")
    run_cli("produce", log, input="0\n", check=True)
    # stop a producer at its segment write, i.e. while it holds the partition lock
    holder = subprocess.Popen([strace, "-f", "-qq", "-o", "/dev/null", "-e", "trace=pwrite64,write",
                               "-e", "inject=write:signal=SIGSTOP:when=1", *CLI, "produce", log],
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cli_env())
    holder.stdin.write(b"1\n")
    holder.stdin.close()
    time.sleep(2)
    try:
        t0 = time.monotonic()
        p = run_cli("produce", log, "--lock-timeout", "1s", input="2\n")
        waited = time.monotonic() - t0
        assert p.returncode == 1 and b"timed out" in p.stderr, p.stderr
        assert waited >= 1.0
    finally:
        subprocess.run(["pkill", "-CONT", "-f", f"produce {log}"])
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        subprocess.run(["pkill", "-KILL", "-f", f"produce {log}"])
    recs = records(log)
    assert [r["value"] for r in recs][0] == 0
