"""consume --exec: batches on a command's stdin, committed only when it exits 0."""

from __future__ import annotations

import json
import os
import subprocess
import time

from conftest import CLI, cli_env, run_cli


def produce(log: str, start: int, n: int, extra: tuple[str, ...] = ()) -> None:
    data = "".join(json.dumps({"k": f"k{i % 3}", "i": i}, separators=(",", ":")) + "\n"
                   for i in range(start, start + n))
    run_cli("produce", log, "--key-field", "k", *extra, input=data, check=True)


def committed(log: str, group: str) -> dict[int, int]:
    try:
        with open(os.path.join(log, "groups", f"{group}.json")) as f:
            return {int(p): o for p, o in json.load(f)["offsets"].items()}
    except FileNotFoundError:
        return {}


def test_success_commits_and_next_run_has_nothing(logdir: str, tmp_path) -> None:
    produce(logdir, 0, 10)
    out = tmp_path / "out.jsonl"
    r = run_cli("consume", logdir, "--group", "g", "--exec", f"cat >> {out}")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b""
    assert out.read_bytes() == run_cli("consume", logdir, check=True).stdout
    assert committed(logdir, "g") == {0: 10}
    # nothing new: the command is not run at all
    r = run_cli("consume", logdir, "--group", "g", "--exec", f"echo ran >> {tmp_path / 'ran'}")
    assert r.returncode == 0 and not (tmp_path / "ran").exists()


def test_failure_leaves_batch_uncommitted_and_redelivers(logdir: str, tmp_path) -> None:
    produce(logdir, 0, 7)
    seen = tmp_path / "seen.jsonl"
    r = run_cli("consume", logdir, "--group", "g", "--value", "--exec", f"cat > {seen}; exit 3")
    assert r.returncode == 1
    assert b"exited with status 3" in r.stderr and b"not committed" in r.stderr
    assert b"Traceback" not in r.stderr
    first = seen.read_bytes()
    assert [json.loads(x)["i"] for x in first.splitlines()] == list(range(7))
    assert committed(logdir, "g") == {}
    again = tmp_path / "again.jsonl"
    r = run_cli("consume", logdir, "--group", "g", "--value", "--exec", f"cat > {again}")
    assert r.returncode == 0, r.stderr
    assert again.read_bytes() == first
    assert committed(logdir, "g") == {0: 7}


def test_batches_and_a_failure_midway(logdir: str, tmp_path) -> None:
    produce(logdir, 0, 10)
    counts = tmp_path / "counts"
    r = run_cli("consume", logdir, "--group", "a", "--batch", "4", "--exec", f"wc -l >> {counts}")
    assert r.returncode == 0, r.stderr
    assert [int(x) for x in counts.read_text().split()] == [4, 4, 2]
    # the second batch fails: the first stays committed, the rest is delivered again
    n = tmp_path / "n"
    script = f"cat >/dev/null; c=$(cat {n} 2>/dev/null || echo 0); echo $((c+1)) > {n}; [ $c -lt 1 ]"
    r = run_cli("consume", logdir, "--group", "b", "--batch", "4", "--exec", script)
    assert r.returncode == 1
    assert b"batch of 4 record(s) (p0 4..7)" in r.stderr
    assert committed(logdir, "b") == {0: 4}
    got = run_cli("consume", logdir, "--group", "b", "--format", "%o\\n", "--exec", "cat")
    assert got.returncode == 0
    assert got.stdout.split() == [str(i).encode() for i in range(4, 10)]  # the command's stdout is ours


def test_command_killed_by_signal_is_a_failure(logdir: str) -> None:
    produce(logdir, 0, 3)
    r = run_cli("consume", logdir, "--group", "g", "--exec", "kill -9 $$")
    assert r.returncode == 1 and b"SIGKILL" in r.stderr
    assert committed(logdir, "g") == {}


def test_exec_format_and_env(logdir: str, tmp_path) -> None:
    produce(logdir, 0, 3)
    out = tmp_path / "o"
    r = run_cli("consume", logdir, "--format", "%o=%s\\n", "--exec",
                f"cat > {out}; echo $STREAMCTL_BATCH_RECORDS >> {out}")
    assert r.returncode == 0, r.stderr
    assert out.read_text().splitlines() == ['0={"k":"k0","i":0}', '1={"k":"k1","i":1}', '2={"k":"k2","i":2}', "3"]


def test_follow_exec_batch_timeout(logdir: str, tmp_path) -> None:
    produce(logdir, 0, 2)
    counts = tmp_path / "counts"
    proc = subprocess.Popen([*CLI, "consume", logdir, "--group", "g", "--follow", "--idle-timeout", "2s",
                             "--batch", "100", "--batch-timeout", "200ms", "--exec", f"wc -l >> {counts}"],
                            stderr=subprocess.PIPE, env=cli_env())
    deadline = time.monotonic() + 10
    while not counts.exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    produce(logdir, 2, 3)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    sizes = [int(x) for x in counts.read_text().split()]
    assert sizes[0] == 2 and sum(sizes) == 5  # partial batches ran after 200ms, not waiting for 100
    assert committed(logdir, "g") == {0: 5}


def test_batch_needs_positive(logdir: str) -> None:
    produce(logdir, 0, 1)
    assert run_cli("consume", logdir, "--exec", "cat", "--batch", "0").returncode == 2
    assert run_cli("consume", logdir, "--batch-timeout", "1s").returncode == 2
