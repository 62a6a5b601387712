"""Random kill -9 loops at scale: producers (with 1 MiB records), committing consumers."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time

from conftest import CLI, cli_env, run_cli

from .util import assert_log_sound


def _kill_after(proc: subprocess.Popen, delay: float) -> None:
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_produce_kill_loop_with_big_records(tmp_path):
    rng = random.Random(11)
    log = str(tmp_path / "log")
    acked: set[str] = set()
    rounds = 80
    big = "B" * (1 << 20)
    for r in range(rounds):
        recs = []
        for i in range(rng.randint(1, 40)):
            pad = big[: rng.choice([10, 1000, 100_000, (1 << 20) - 200])]
            recs.append(json.dumps({"id": f"{r}-{i}", "pad": pad}))
        payload = ("\n".join(recs) + "\n").encode()
        proc = subprocess.Popen([*CLI, "produce", log, "--max-record-bytes", "2MiB", "--segment-bytes", "4MiB",
                                 "--partitions", "2"],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cli_env())
        try:
            if rng.random() < 0.75:
                proc.stdin.write(payload)
                proc.stdin.close()
                _kill_after(proc, rng.uniform(0.05, 0.4))
            else:
                proc.communicate(payload, timeout=120)
        except BrokenPipeError:
            proc.wait()
        if proc.returncode == 0:
            acked.update(f"{r}-{i}" for i in range(len(recs)))
    found = [r["value"]["id"] for r in assert_log_sound(log)]
    assert len(found) == len(set(found))
    assert acked <= set(found)


def test_committing_consumer_kill_loop(tmp_path):
    """The committed offset never decreases and never points past what was delivered."""
    rng = random.Random(5)
    log = str(tmp_path / "log")
    run_cli("produce", log, "--partitions", "3", input="".join(f"{i}\n" for i in range(60000)), check=True)
    gfile = os.path.join(log, "groups", "g.json")
    last: dict[str, int] = {}
    for r in range(80):
        out = tmp_path / f"out{r}"
        with open(out, "wb") as f:
            proc = subprocess.Popen([*CLI, "consume", log, "--group", "g", "--format", "%p %o\n", "--max", "20000"],
                                    stdout=f, stderr=subprocess.DEVNULL, env=cli_env())
            _kill_after(proc, rng.uniform(0.1, 0.6))
        delivered: dict[str, int] = dict(last)
        for ln in out.read_bytes().splitlines():
            if ln.count(b" ") == 1 and not ln.endswith(b" "):
                p, o = ln.split()
                delivered[p.decode()] = max(delivered.get(p.decode(), 0), int(o) + 1)
        if os.path.exists(gfile):
            now = json.load(open(gfile))["offsets"]
            for p, o in now.items():
                assert o >= last.get(p, 0), "committed offset decreased"
                assert o <= delivered.get(p, 0), "committed past what was delivered"
            last = now
        out.unlink()
    assert run_cli("check", log).returncode == 0
