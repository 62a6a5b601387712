"""Files changed underneath a follower: truncated, deleted, replaced."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from conftest import CLI, cli_env, run_cli


def follow(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())


@pytest.mark.parametrize("cmd", [["tail", "-f", "-n", "1"], ["consume", "--follow", "--group", "g"]])
def test_segment_truncated_under_a_follower_is_a_clear_error(logdir, cmd):
    run_cli("produce", logdir, input="".join(f"{i}\n" for i in range(200)), check=True)
    proc = follow([cmd[0], logdir, *cmd[1:]])
    time.sleep(2.0)
    seg = os.path.join(logdir, "p0", "00000000000000000000.jsonl")
    os.truncate(seg, 150)
    run_cli("produce", logdir, input="x\n" if False else "7\n", check=True)
    try:
        proc.wait(timeout=20)
    finally:
        proc.kill()
    err = proc.stderr.read()
    assert proc.returncode == 1, err
    assert b"shrank" in err and b"00000000000000000000.jsonl" in err and b"Traceback" not in err
    if cmd[0] == "consume":
        committed = json.load(open(os.path.join(logdir, "groups", "g.json")))["offsets"]["0"]
        assert committed <= 200


def test_old_segments_deleted_under_a_follower_are_reported(logdir):
    lines = "".join(json.dumps({"i": i, "pad": "p" * 100}) + "\n" for i in range(300))
    run_cli("produce", logdir, "--segment-bytes", "4KiB", input=lines, check=True)
    segs = sorted(n for n in os.listdir(os.path.join(logdir, "p0")) if n.endswith(".jsonl"))
    # a follower starts at the beginning but is slowed by a stalled reader
    proc = subprocess.Popen(f"{' '.join(CLI)} consume {logdir} --follow --idle-timeout 3s --value | (sleep 2; cat)",
                            shell=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
    time.sleep(0.5)
    for name in segs[:-2]:
        os.unlink(os.path.join(logdir, "p0", name))  # retention done by hand, from outside
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    got = [json.loads(x)["i"] for x in out.splitlines()]
    assert got == sorted(got) and got[-1] == 299 and len(got) == len(set(got))
    assert b"Traceback" not in err
    if len(got) < 300:
        assert b"deleted" in err or b"no longer" in err


def test_active_segment_replaced_under_tail_keeps_offsets_in_order(logdir):
    run_cli("produce", logdir, input="".join(f"{i}\n" for i in range(20)), check=True)
    proc = follow(["tail", logdir, "-f", "-n", "0", "--format", "%o\n"])
    time.sleep(1.5)
    seg = os.path.join(logdir, "p0", "00000000000000000000.jsonl")
    data = open(seg, "rb").read()
    tmp = seg + ".new"
    open(tmp, "wb").write(data)
    os.replace(tmp, seg)  # same bytes, new inode (what a compaction swap looks like)
    run_cli("produce", logdir, input="20\n21\n", check=True)
    time.sleep(2.0)
    proc.terminate()
    out, err = proc.communicate(timeout=20)
    assert out.split() == [b"20", b"21"], (out, err)
