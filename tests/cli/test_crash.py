"""Crash and concurrency tests for storage: kill -9 loops, concurrent producers, file-size limit."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time

import pytest

from conftest import CLI, cli_env, log_records, run_cli

all_records = log_records


@pytest.mark.slow
def test_produce_killed_at_random_moments(logdir):
    """Every record whose produce exited 0 is present exactly once; offsets contiguous; no torn line visible."""
    rng = random.Random(7)
    acknowledged: list[str] = []
    rounds = 60
    for r in range(rounds):
        payload = "".join(json.dumps({"r": r, "i": i, "pad": "p" * rng.randint(0, 300)}) + "\n" for i in range(rng.randint(50, 3000)))
        proc = subprocess.Popen([*CLI, "produce", logdir, "--partitions", "2", "--segment-bytes", "64KiB"],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cli_env())
        kill = rng.random() < 0.7
        try:
            if kill:
                proc.stdin.write(payload.encode()[: rng.randint(0, len(payload))])
                time.sleep(rng.uniform(0, 0.25))
                proc.send_signal(signal.SIGKILL)
                proc.wait()
            else:
                proc.communicate(payload.encode(), timeout=60)
        except BrokenPipeError:
            proc.wait()
        if proc.returncode == 0:
            acknowledged.append(payload)
        # a reader never sees a torn line, whatever state the log is in
        if os.path.exists(os.path.join(logdir, "streamctl.json")):
            for rec in all_records(logdir):
                assert "offset" in rec
    recs = all_records(logdir)
    for p in (0, 1):
        offs = [x["offset"] for x in recs if x["partition"] == p]
        assert offs == list(range(len(offs))), f"partition {p} offsets not contiguous"
    seen: dict[tuple, int] = {}
    for x in recs:
        k = (x["value"]["r"], x["value"]["i"])
        seen[k] = seen.get(k, 0) + 1
    assert all(c == 1 for c in seen.values()), "a record appears twice"
    for payload in acknowledged:
        for line in payload.splitlines():
            v = json.loads(line)
            assert (v["r"], v["i"]) in seen, "an acknowledged record is missing"
    run_cli("produce", logdir, input="1\n", check=True)  # the next writer truncates any torn tail
    assert run_cli("check", logdir).returncode == 0


def test_concurrent_producers_keep_offsets_contiguous_and_order(logdir):
    run_cli("produce", logdir, "--partitions", "2", input="", check=True)
    n_procs, per = 8, 2000
    procs = []
    for w in range(n_procs):
        data = "".join(json.dumps({"w": w, "i": i, "pad": "x" * (w * 30)}) + "\n" for i in range(per))
        p = subprocess.Popen([*CLI, "produce", logdir, "--key", f"writer-{w % 3}", "--segment-bytes", "256KiB"],
                             stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
        procs.append((p, data))
    for p, data in procs:
        p.stdin.write(data.encode())
        p.stdin.close()
    for p, _ in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    recs = all_records(logdir)
    assert len(recs) == n_procs * per
    for part in (0, 1):
        offs = [x["offset"] for x in recs if x["partition"] == part]
        assert offs == list(range(len(offs)))
    for w in range(n_procs):
        mine = [x["value"]["i"] for x in recs if x["value"]["w"] == w]
        assert mine == list(range(per)), f"writer {w}'s order not kept"
    assert run_cli("check", logdir).returncode == 0


def test_file_size_limit_gives_clear_error_and_valid_log(logdir):
    run_cli("produce", logdir, input="0\n", check=True)
    data = "".join(json.dumps({"i": i, "pad": "y" * 200}) + "\n" for i in range(20000)).encode()
    # ulimit -f counts 1024-byte blocks: 200 KiB per file
    p = subprocess.run(["bash", "-c", f"ulimit -f 200; exec {' '.join(CLI)} produce {logdir}"], input=data,
                       capture_output=True, env=cli_env(), timeout=60)
    assert p.returncode == 1
    assert b"file size limit" in p.stderr and b"Traceback" not in p.stderr
    assert run_cli("check", logdir).returncode == 0
    recs = all_records(logdir)
    assert [r["offset"] for r in recs] == list(range(len(recs)))
    run_cli("produce", logdir, input="1\n", check=True)
    assert run_cli("check", logdir).returncode == 0


def test_sigint_during_produce_exits_130_without_traceback(logdir):
    # SIGINT at its default in the child: an ignored SIGINT is inherited across exec, and Python
    # then raises no KeyboardInterrupt (as under nohup); this test is about produce's own handling
    proc = subprocess.Popen([*CLI, "produce", logdir], stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    proc.stdin.write(b"1\n2\n")
    proc.stdin.flush()
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    err = proc.stderr.read()
    assert proc.returncode == 130 and b"Traceback" not in err
    assert run_cli("check", logdir).returncode == 0


def test_lock_timeout_when_a_holder_is_stopped(logdir):
    run_cli("produce", logdir, input="1\n", check=True)
    holder = subprocess.Popen([*CLI, "produce", logdir, "--fsync", "always"], stdin=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=cli_env())
    import fcntl

    # hold the partition lock ourselves the way a stopped producer would
    fd = os.open(os.path.join(logdir, "p0"), os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        p = run_cli("produce", logdir, "--lock-timeout", "300ms", input="2\n")
        assert p.returncode == 1 and b"timed out" in p.stderr and b"--lock-timeout" in p.stderr
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        holder.kill()
        holder.wait()
