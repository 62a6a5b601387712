"""produce --follow killed at its K-th write (strace fault injection), then its file truncated in place
or deleted and created again (ext4 gives the new file the freed inode) while no follower runs: a rerun
reads the new content from its start, so no line is skipped and none is appended twice. And killed at
random while a writer truncates its file in place (copytruncate) as it goes.

The dangerous crash points are right after a file's first records are appended, before the periodic
commit of its position: the log holds marks of the old content under an ID the registry still knows
by that inode."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import threading
import time

import pytest

from conftest import CLI, cli_env, run_cli

from .util import assert_log_sound, strace_run


def _lines(gen: int, first: int, n: int) -> bytes:
    return b"".join(json.dumps({"g": gen, "n": i, "k": f"k{i % 3}"}).encode() + b"\n" for i in range(first, first + n))


@pytest.mark.parametrize("seed,partitions", [(1, 1), (2, 2)])
def test_truncated_or_recreated_while_down_after_a_kill(strace, tmp_path, seed, partitions):
    rnd = random.Random(seed)
    app, log = str(tmp_path / "app.jsonl"), str(tmp_path / "log")
    extra = ["--partitions", str(partitions)] + (["--key-field", "k"] if partitions > 1 else [])
    args = ["produce", log, app, "--follow", "--idle-timeout", "300ms", *extra]
    written: dict[int, int] = {}  # generation -> lines written to it
    gen = 0
    open(app, "wb").close()
    for _ in range(20):
        n = rnd.randrange(1, 30)
        with open(app, "ab") as f:
            f.write(_lines(gen, written.get(gen, 0), n))
        written[gen] = written.get(gen, 0) + n
        # the first writes are the registry's and the first appends: the window that matters
        p = strace_run(strace, "write", "signal=SIGKILL", rnd.randrange(2, 9), args)
        assert b"Traceback" not in p.stderr, p.stderr.decode()
        if rnd.random() < 0.7:
            gen += 1
            if rnd.random() < 0.5:
                open(app, "wb").close()  # truncated in place (copytruncate), same inode
            else:
                os.unlink(app)
                open(app, "wb").close()  # a new file; ext4 reuses the freed inode
    with open(app, "ab") as f:
        f.write(_lines(gen, written.get(gen, 0), 5))
    written[gen] = written.get(gen, 0) + 5
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr.decode()

    recs = assert_log_sound(log)
    got = [(r["value"]["g"], r["value"]["n"]) for r in recs]
    assert len(got) == len(set(got)), f"a line appended twice: {sorted(x for x in got if got.count(x) > 1)[:6]}"
    # the file's content now is in the log whole
    assert {n for g, n in got if g == gen} == set(range(written[gen])), "a line of the current file is missing"
    # a content truncated while no follower ran lost only its unread lines: per key (one partition),
    # what is in the log is a prefix of that content's lines
    for g in range(gen):
        for k in range(3):
            have = sorted(n for gg, n in got if gg == g and n % 3 == k)
            assert have == list(range(k, k + 3 * len(have), 3)), f"generation {g}, key k{k}: a line was skipped"


def _copytruncate_writer(path: str, stop: threading.Event, written: dict[int, int], seed: int) -> None:
    """Lines {"g": generation, "n": N, "k": ...} in bursts; now and then logrotate's copytruncate: the file
    copied away (not followed) and truncated in place, and the writer goes on from its start."""
    rnd = random.Random(seed)
    gen = 0
    with open(path, "ab", buffering=0) as f:
        while not stop.is_set():
            n = rnd.randrange(1, 40)
            f.write(_lines(gen, written.get(gen, 0), n))
            written[gen] = written.get(gen, 0) + n
            if rnd.random() < 0.15:
                shutil.copyfile(path, f"{path}.{gen}")
                os.ftruncate(f.fileno(), 0)
                gen += 1
                written[gen] = 0
            time.sleep(rnd.random() * 0.03)


def test_kill9_loop_with_a_copytruncate_writer(tmp_path):
    """Lines written between the follower's last read and a truncation are lost (they are only in the copy,
    as with any follower of copytruncate): per generation and key, what is in the log is a prefix of what
    was written. Everything else is exact: nothing twice, nothing skipped, the last generation whole."""
    app, log = str(tmp_path / "app.jsonl"), str(tmp_path / "log")
    rnd = random.Random(5)
    open(app, "wb").close()
    extra = ["--partitions", "2", "--key-field", "k"]
    stop = threading.Event()
    written: dict[int, int] = {}
    writer = threading.Thread(target=_copytruncate_writer, args=(app, stop, written, 5))
    writer.start()
    kills = 0
    try:
        t_end = time.monotonic() + 6.0
        while time.monotonic() < t_end:
            proc = subprocess.Popen([*CLI, "produce", log, app, "--follow", *extra], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, env=cli_env())
            time.sleep(0.6 + rnd.random() * 0.8)
            proc.kill()
            _, err = proc.communicate()
            assert b"Traceback" not in err, err.decode()
            kills += 1
    finally:
        stop.set()
        writer.join()
    last = max(written)
    r = run_cli("produce", log, app, "--follow", "--idle-timeout", "1s", *extra)
    assert r.returncode == 0, r.stderr.decode()
    recs = assert_log_sound(log)
    got = [(r["value"]["g"], r["value"]["n"]) for r in recs]
    assert len(got) == len(set(got)), f"a line appended twice after {kills} kills"
    missing = sorted(set(range(written[last])) - {n for g, n in got if g == last})
    assert not missing, f"lines of the current file missing: {missing[:20]} of {written[last]}; {r.stderr.decode()[-600:]}"
    for g in range(last):
        for k in range(3):
            have = sorted(n for gg, n in got if gg == g and n % 3 == k)
            assert have == list(range(k, k + 3 * len(have), 3)), f"generation {g}, key k{k}: a line was skipped"
    assert kills >= 3 and last >= 3
