"""produce --follow killed at its K-th write (strace fault injection), then its file truncated in place
or deleted and created again (ext4 gives the new file the freed inode) while no follower runs: a rerun
reads the new content from its start, so no line is skipped and none is appended twice.

The dangerous crash points are right after a file's first records are appended, before the periodic
commit of its position: the log holds marks of the old content under an ID the registry still knows
by that inode."""

from __future__ import annotations

import json
import os
import random

import pytest

from conftest import run_cli

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
