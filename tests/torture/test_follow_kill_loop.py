"""produce --follow killed with SIGKILL over and over while a writer appends and rotates its file:
every line ends up in the log exactly once, in order per file."""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time

import pytest

from conftest import CLI, cli_env, log_records, run_cli


def _registered(registry: str) -> set[int]:
    try:
        with open(registry, "rb") as r:
            return {e["ino"] for e in json.load(r)["files"]}
    except (OSError, ValueError):
        return set()


def _writer(path: str, stop: threading.Event, counter: list[int], seed: int, rotate_every: int,
            registry: str | None) -> None:
    """Lines {"seq": N}, in bursts, sometimes torn across two writes; renamed away to path.K every
    rotate_every lines (never deleted, so every line stays readable), a new file under the name.
    With `registry`, a file is renamed away only once a follower has registered it."""
    rnd = random.Random(seed)
    n = 0
    gen = 0
    f = open(path, "ab", buffering=0)
    while not stop.is_set():
        burst = b"".join(json.dumps({"seq": n + i, "pad": "x" * rnd.randrange(40)}).encode() + b"\n"
                         for i in range(rnd.randrange(1, 60)))
        n += burst.count(b"\n")
        if rnd.random() < 0.3:
            cut = rnd.randrange(len(burst))
            f.write(burst[:cut])
            time.sleep(0.002)
            f.write(burst[cut:])
        else:
            f.write(burst)
        if n // rotate_every > gen:
            ino = os.fstat(f.fileno()).st_ino
            while registry and not stop.is_set() and ino not in _registered(registry):
                time.sleep(0.01)
            if registry and ino not in _registered(registry):
                continue  # stopped before any follower saw it: not renamed
            gen = n // rotate_every
            os.rename(path, f"{path}.{gen}")
            if rnd.random() < 0.5:  # a logger that goes on writing a little into the renamed file
                tail = b"".join(json.dumps({"seq": n + i, "pad": ""}).encode() + b"\n" for i in range(3))
                f.write(tail)
                n += 3
            f.close()
            f = open(path, "ab", buffering=0)
        time.sleep(rnd.random() * 0.02)
    f.close()
    counter.append(n)


# The name alone: a file rotated twice while no follower runs is never seen (as with tail -F), so the
# writer renames a file away only once a follower has registered it (on a busy machine a restart can
# take longer than writing rotate_every lines). A glob over the rotated names: any speed, no wait.
@pytest.mark.parametrize("seed,partitions,pattern,rotate_every", [(1, 1, "app.log", 3000), (2, 3, "app.log*", 300)])
def test_kill9_loop_with_rotation(tmp_path, seed, partitions, pattern, rotate_every):
    app, log = str(tmp_path / "app.log"), str(tmp_path / "log")
    rnd = random.Random(seed)
    stop = threading.Event()
    counter: list[int] = []
    open(app, "w").close()
    registry = None if "*" in pattern else os.path.join(log, ".follow", "registry.json")
    writer = threading.Thread(target=_writer, args=(app, stop, counter, seed, rotate_every, registry))
    kills = 0
    extra = ["--partitions", str(partitions)] + (["--key-field", "pad"] if partitions > 1 else [])
    files = str(tmp_path / pattern)
    try:
        t_end = None
        while t_end is None or time.monotonic() < t_end:
            proc = subprocess.Popen([*CLI, "produce", log, files, "--follow", *extra], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, env=cli_env())
            if t_end is None:  # the writer starts once the first follower knows the file
                while not os.path.exists(os.path.join(log, ".follow", "registry.json")):
                    assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                    time.sleep(0.02)
                writer.start()
                t_end = time.monotonic() + 5.0
            time.sleep(0.7 + rnd.random() * 0.8)  # start-up takes ~0.5-1 s here: killed at any point of its work
            proc.kill()
            _, err = proc.communicate()
            assert b"Traceback" not in err, err.decode()
            kills += 1
    finally:
        stop.set()
        writer.join()
    total = counter[0]
    r = run_cli("produce", log, files, "--follow", "--idle-timeout", "1s", *extra)
    assert r.returncode == 0, r.stderr
    recs = log_records(log)
    seqs = [rec["value"]["seq"] for rec in recs]
    assert len(seqs) == len(set(seqs)), f"duplicates after {kills} kills: {len(seqs) - len(set(seqs))}"
    assert sorted(seqs) == list(range(total)), f"missing after {kills} kills: {sorted(set(range(total)) - set(seqs))[:10]}"
    # in order per file and partition
    by: dict[tuple[int, str], list[int]] = {}
    for rec in recs:
        by.setdefault((rec["partition"], rec["headers"]["streamctl.file"].split(":")[0]), []).append(
            rec["value"]["seq"])
    assert all(v == sorted(v) for v in by.values())
    assert total > 1000 and kills >= 3
    assert run_cli("check", log).returncode == 0
