"""consume --exec: batches on a command's stdin, committed only when it exits 0."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time

import pytest

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


def test_failure_without_a_group_promises_no_redelivery(logdir: str) -> None:
    """Without --group nothing is committed and nothing resumes: the message says so instead of
    a group's "not committed, delivered again on the next run"."""
    produce(logdir, 0, 3)
    r = run_cli("consume", logdir, "--exec", "cat > /dev/null; exit 3")
    assert r.returncode == 1
    assert r.stderr == (b"streamctl: --exec 'cat > /dev/null; exit 3' exited with status 3; consume stops at "
                        b"this batch of 3 record(s) (p0 0..2); without --group nothing is committed, so a rerun "
                        b"starts again where --from says (the first record by default)\n")
    assert not os.path.exists(os.path.join(logdir, "groups")) or not os.listdir(os.path.join(logdir, "groups"))


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


@pytest.mark.parametrize("args,message", [
    (["--exec", ""], b"--exec needs a command"),
    (["--exec", "  "], b"--exec needs a command"),
    (["--exec", "", "--group", "g"], b"--exec needs a command"),
    (["--sqlite", "", "--group", "g"], b"--sqlite needs a database file"),
    (["--sqlite", ""], b"--sqlite needs a database file"),
])
def test_empty_command_or_database_is_refused(tmp_path, args: list[str], message: bytes) -> None:
    """An empty --exec or --sqlite is refused with or without a group, from a log or a plain
    file: it is never taken as no flag at all."""
    log = str(tmp_path / "log")
    produce(log, 0, 2)
    plain = tmp_path / "v.jsonl"
    plain.write_text('{"a":1}\n')
    for source in (log, str(plain)):
        r = run_cli("consume", source, "--max", "2", *args)
        assert (r.returncode, r.stdout) == (2, b""), r.stderr
        assert r.stderr == b"streamctl: " + message + b"\n"
    assert committed(log, "g") == {}


# --- retries and dead letters ------------------------------------------------------------

# The command of the tests below: each run's stdin is kept in runs/NNNNN with, on its first
# line, the group's committed offsets and the dead-letter log's size as they were when it ran;
# a batch holding "poison" fails (exit 3, a line on stderr), any other is appended to delivered.
RECORDING_CMD = r"""
dir=%(dir)s
n=$(printf %%05d $(ls "$dir/runs" | wc -l))
{ cat "%(group)s" 2>/dev/null || echo '{}'; echo; cat "%(dead)s"/p*/*.jsonl 2>/dev/null | wc -l; } | tr -d '\n' > "$dir/runs/$n"
echo >> "$dir/runs/$n"
cat >> "$dir/runs/$n"
if tail -n +2 "$dir/runs/$n" | grep -q poison; then echo "poison in run $n" >&2; exit 3; fi
tail -n +2 "$dir/runs/$n" >> "$dir/delivered"
"""


def recording_cmd(tmp_path, log: str, dead: str, group: str = "g") -> str:
    (tmp_path / "runs").mkdir()
    return RECORDING_CMD % {"dir": tmp_path, "group": os.path.join(log, "groups", f"{group}.json"), "dead": dead}


def runs(tmp_path) -> list[tuple[dict[int, int], int, list[tuple[int, int]]]]:
    """Each run: (committed offsets then, records in the dead-letter log then, [(partition, offset)] seen)."""
    out = []
    for f in sorted((tmp_path / "runs").iterdir()):
        head, *lines = f.read_text().splitlines()
        brace = head.rindex("}")
        offs = json.loads(head[:brace + 1]).get("offsets", {})
        seen = [(int(p), int(o)) for p, o in (ln.split()[:2] for ln in lines)]
        out.append(({int(p): o for p, o in offs.items()}, int(head[brace + 1:]), seen))
    return out


def delivered(tmp_path) -> list[tuple[int, int]]:
    f = tmp_path / "delivered"
    return [(int(p), int(o)) for p, o in (ln.split()[:2] for ln in f.read_text().splitlines())] if f.exists() else []


def produce_poisoned(log: str, n: int, poison: set[int], partitions: int = 1) -> None:
    """n records with keys k0..k{n-1}; those numbered in `poison` carry "poison" in their value."""
    lines = []
    for i in range(n):
        value = {"i": i, "poison": True} if i in poison else {"i": i}
        lines.append(json.dumps({"key": f"k{i}", "value": value, "headers": {"trace": f"t{i}"}}) + "\n")
    run_cli("produce", log, "--envelope", "--partitions", str(partitions), input="".join(lines), check=True)


def dead_letters(dead: str) -> list[dict]:
    from conftest import log_records

    return log_records(dead)


EXEC_FLAGS = ("--format", "%p %o %s\\n")


def test_retry_delay_doubles_up_to_a_minute() -> None:
    from streamctl.clients.execsink import MAX_BACKOFF, retry_delay

    assert MAX_BACKOFF == 60
    assert [retry_delay(i, 1.0) for i in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert [retry_delay(i, 0.01) for i in range(1, 4)] == [0.01, 0.02, 0.04]
    assert retry_delay(1, 45.0) == 45 and retry_delay(2, 45.0) == 60
    assert retry_delay(1, 300.0) == 60  # even the first wait is capped
    assert retry_delay(100_000, 1.0) == 60  # no overflow however many retries
    assert retry_delay(3, 0.0) == 0


def test_retries_run_the_same_batch_again_until_it_succeeds(logdir: str, tmp_path) -> None:
    produce(logdir, 0, 12)
    count = tmp_path / "count"
    seen = tmp_path / "seen"
    seen.mkdir()
    script = (f"c=$(cat {count} 2>/dev/null || echo 0); echo $((c+1)) > {count}; cat > {seen}/$c; "
              f"[ $c -ge 2 ] || {{ echo 'not yet' >&2; exit 7; }}")
    r = run_cli("consume", logdir, "--group", "g", "--batch", "5", "--retries", "2", "--retry-backoff", "10ms",
                "--exec", script)
    assert r.returncode == 0, r.stderr
    # the first batch failed twice, then every run succeeded
    assert sorted(os.listdir(seen), key=int) == ["0", "1", "2", "3", "4"]
    tries = [(seen / str(i)).read_bytes() for i in range(3)]
    stored = run_cli("consume", logdir, check=True).stdout.splitlines(keepends=True)
    assert tries[0] == tries[1] == tries[2] == b"".join(stored[:5])
    assert (seen / "3").read_bytes() == b"".join(stored[5:10])
    assert b"retry 1 of 2 in 10ms" in r.stderr and b"retry 2 of 2 in 20ms" in r.stderr
    assert b"exited with status 7" in r.stderr
    assert committed(logdir, "g") == {0: 12}


def test_retries_spent_stop_with_the_batch_uncommitted(logdir: str, tmp_path) -> None:
    produce(logdir, 0, 6)
    count = tmp_path / "count"
    r = run_cli("consume", logdir, "--group", "g", "--batch", "4", "--retries", "3", "--retry-backoff", "10ms",
                "--exec", f"echo x >> {count}; cat > /dev/null; exit 5")
    assert r.returncode == 1
    assert count.read_text().count("x") == 4  # the first try and 3 retries
    assert b"tried 4 times" in r.stderr and b"batch of 4 record(s) (p0 0..3) was not committed" in r.stderr
    assert b"Traceback" not in r.stderr
    assert committed(logdir, "g") == {}


def test_dead_letter_search_sets_two_poison_records_aside(tmp_path) -> None:
    log, dead = str(tmp_path / "orders"), str(tmp_path / "orders.dead")
    produce_poisoned(log, 16, {5, 12})
    cmd = recording_cmd(tmp_path, log, dead)
    r = run_cli("consume", log, "--group", "g", "--batch", "16", "--retries", "1", "--retry-backoff", "10ms", *EXEC_FLAGS,
                "--dead-letter", dead, "--exec", cmd)
    assert r.returncode == 0, r.stderr
    assert b"2 record(s) went to" in r.stderr and b"Traceback" not in r.stderr
    assert b"poison in run" in r.stderr  # the command's stderr still reaches ours
    assert delivered(tmp_path) == [(0, i) for i in range(16) if i not in (5, 12)]
    assert committed(log, "g") == {0: 16}
    got = dead_letters(dead)
    assert [(d["key"], d["value"]) for d in got] == [("k5", {"i": 5, "poison": True}),
                                                     ("k12", {"i": 12, "poison": True})]
    for d, off in zip(got, (5, 12), strict=True):
        h = d["headers"]
        assert h["trace"] == f"t{off}"  # the record's own headers are kept
        assert h["streamctl.source"] == f"{log}/0@{off}"
        assert h["streamctl.group"] == "g"
        assert h["streamctl.error"].startswith("exit status 3; stderr: poison in run ")
    # side effects in the log's order: each run saw everything before its first record committed,
    # and exactly the poison records before it in the dead-letter log
    for offs, n_dead, seen in runs(tmp_path):
        first = seen[0][1]
        assert offs.get(0, 0) == first
        assert n_dead == sum(1 for o in (5, 12) if o < first)
    # every try of a half saw the same records: runs come in pairs (a try and its retry)
    seen_runs = [s for _, _, s in runs(tmp_path)]
    failing = [s for s in seen_runs if any(o in (5, 12) for _, o in s)]
    assert all(failing.count(s) == 2 for s in failing)
    # nothing is left: the next run has nothing to do
    again = run_cli("consume", log, "--group", "g", "--dead-letter", dead, "--exec", "exit 9")
    assert again.returncode == 0 and len(dead_letters(dead)) == 2


@pytest.mark.parametrize("poison", [{0}, {15}, {0, 15}, set(range(16))], ids=["first", "last", "both-ends", "all"])
def test_dead_letter_poison_positions(tmp_path, poison: set[int]) -> None:
    log, dead = str(tmp_path / "orders"), str(tmp_path / "orders.dead")
    produce_poisoned(log, 16, poison)
    cmd = recording_cmd(tmp_path, log, dead)
    r = run_cli("consume", log, "--group", "g", "--batch", "16", *EXEC_FLAGS, "--dead-letter", dead,
                "--exec", cmd)
    assert r.returncode == 0, r.stderr
    assert delivered(tmp_path) == [(0, i) for i in range(16) if i not in poison]
    assert [d["headers"]["streamctl.source"] for d in dead_letters(dead)] == [f"{log}/0@{i}" for i in sorted(poison)]
    assert committed(log, "g") == {0: 16}
    assert f"{len(poison)} record(s) went to".encode() in r.stderr
    for offs, _, seen in runs(tmp_path):
        assert offs.get(0, 0) == seen[0][1]


def test_dead_letter_with_several_partitions(tmp_path) -> None:
    log, dead = str(tmp_path / "orders"), str(tmp_path / "orders.dead")
    poison = {3, 4, 17, 28, 29}
    produce_poisoned(log, 40, poison, partitions=3)
    where = {}  # i -> (partition, offset)
    for ln in run_cli("consume", log, check=True).stdout.splitlines():
        rec = json.loads(ln)
        where[rec["value"]["i"]] = (rec["partition"], rec["offset"])
    assert len({where[i][0] for i in poison}) > 1  # the poison is spread over partitions
    cmd = recording_cmd(tmp_path, log, dead)
    r = run_cli("consume", log, "--group", "g", "--batch", "7", *EXEC_FLAGS, "--dead-letter", dead,
                "--exec", cmd)
    assert r.returncode == 0, r.stderr
    got = delivered(tmp_path)
    assert sorted(got) == sorted(where[i] for i in range(40) if i not in poison)
    assert len(got) == len(set(got))
    assert sorted(d["headers"]["streamctl.source"] for d in dead_letters(dead)) == sorted(
        f"{log}/{where[i][0]}@{where[i][1]}" for i in poison)
    ends = {}
    for p, o in where.values():
        ends[p] = max(ends.get(p, 0), o + 1)
    assert committed(log, "g") == ends
    # within each partition, side effects keep the order: a run's records were next to commit
    for offs, _, seen in runs(tmp_path):
        firsts: dict[int, int] = {}
        for p, o in seen:
            firsts.setdefault(p, o)
        for p, o in firsts.items():
            assert offs.get(p, 0) == o


def test_dead_letter_error_keeps_the_last_kib_of_stderr(tmp_path) -> None:
    log, dead = str(tmp_path / "orders"), str(tmp_path / "orders.dead")
    produce_poisoned(log, 1, {0})
    noise = "".join(f"line {i:04d} of a long complaint\n" for i in range(200))
    (tmp_path / "noise").write_text(noise)
    r = run_cli("consume", log, "--group", "g", "--dead-letter", dead,
                "--exec", f"cat > /dev/null; cat {tmp_path / 'noise'} >&2; exit 4")
    assert r.returncode == 0, r.stderr
    assert noise.encode() in r.stderr  # passed through whole
    err = dead_letters(dead)[0]["headers"]["streamctl.error"]
    status, _, tail = err.partition("; stderr: ")
    assert status == "exit status 4"
    assert len(tail.encode()) <= 1024 and noise.rstrip().endswith(tail) and len(tail) > 900


def test_dead_letter_command_killed_by_a_signal(tmp_path) -> None:
    log, dead = str(tmp_path / "orders"), str(tmp_path / "orders.dead")
    produce_poisoned(log, 4, {2})
    r = run_cli("consume", log, "--group", "g", "--dead-letter", dead,
                "--exec", "grep -q poison && kill -9 $$; true")
    assert r.returncode == 0, r.stderr
    (d,) = dead_letters(dead)
    assert d["headers"]["streamctl.error"] == "killed by SIGKILL"
    assert d["headers"]["streamctl.source"] == f"{log}/0@2"
    assert committed(log, "g") == {0: 4}


def test_dead_letter_without_a_group(tmp_path) -> None:
    """No group: nothing is committed, so a rerun meets the same poison; it is not appended twice."""
    log, dead = str(tmp_path / "orders"), str(tmp_path / "orders.dead")
    produce_poisoned(log, 8, {6})
    for _ in range(2):
        r = run_cli("consume", log, "--dead-letter", dead, "--exec", "! grep -q poison")
        assert r.returncode == 0, r.stderr
    (d,) = dead_letters(dead)
    assert "streamctl.group" not in d["headers"] and d["headers"]["streamctl.source"] == f"{log}/0@6"
    assert b"already in" in r.stderr


def test_dead_letter_shared_by_two_groups(tmp_path) -> None:
    """Each group's failures are its own: the same source record goes to LOG2 once per group."""
    log, dead = str(tmp_path / "orders"), str(tmp_path / "orders.dead")
    produce_poisoned(log, 8, {1})
    for g in ("a", "b"):
        r = run_cli("consume", log, "--group", g, "--dead-letter", dead, "--exec", "! grep -q poison")
        assert r.returncode == 0, r.stderr
    assert sorted(d["headers"]["streamctl.group"] for d in dead_letters(dead)) == ["a", "b"]


def test_dead_letter_with_a_filter(tmp_path) -> None:
    log, dead = str(tmp_path / "orders"), str(tmp_path / "orders.dead")
    produce_poisoned(log, 20, {4, 10})
    cmd = recording_cmd(tmp_path, log, dead)
    r = run_cli("consume", log, "--group", "g", "--batch", "4", "--where", "value.i != 11", *EXEC_FLAGS,
                "--dead-letter", dead, "--exec", cmd)
    assert r.returncode == 0, r.stderr
    assert delivered(tmp_path) == [(0, i) for i in range(20) if i not in (4, 10, 11)]
    assert len(dead_letters(dead)) == 2
    assert committed(log, "g") == {0: 20}


def test_redrive_dead_letters(tmp_path) -> None:
    log, dead = str(tmp_path / "orders"), str(tmp_path / "orders.dead")
    produce_poisoned(log, 10, {2, 7})
    r = run_cli("consume", log, "--group", "g", "--dead-letter", dead, "--exec", "! grep -q poison")
    assert r.returncode == 0, r.stderr
    assert committed(log, "g") == {0: 10}
    # the fix is deployed: re-drive the dead letters into the log, the group gets them again
    letters = run_cli("consume", dead, check=True).stdout
    run_cli("produce", log, "--envelope", input=letters, check=True)
    out = tmp_path / "out"
    r = run_cli("consume", log, "--group", "g", "--dead-letter", dead, "--exec", f"cat > {out}")
    assert r.returncode == 0, r.stderr
    again = [json.loads(ln) for ln in out.read_bytes().splitlines()]
    assert [(x["offset"], x["key"], x["value"]) for x in again] == [
        (10, "k2", {"i": 2, "poison": True}), (11, "k7", {"i": 7, "poison": True})]
    for x, i in zip(again, (2, 7), strict=True):
        assert x["headers"]["trace"] == f"t{i}"
        assert x["headers"]["streamctl.source"] == f"{log}/0@{i}"
        assert x["headers"]["streamctl.error"].startswith("exit status 1")
    assert committed(log, "g") == {0: 12}
    assert len(dead_letters(dead)) == 2  # nothing new failed


def test_dead_letter_survives_kill_9_mid_search(tmp_path) -> None:
    """kill -9 (of consume and its command) at random moments of searches, then a clean rerun:
    every good record delivered (at least once), every poison record in LOG2 exactly once."""
    rng = random.Random(22)
    log, dead = str(tmp_path / "orders"), str(tmp_path / "orders.dead")
    poison = set(rng.sample(range(96), 9))
    produce_poisoned(log, 96, poison, partitions=2)
    done = tmp_path / "done"
    done.mkdir()
    # each successful run's records land in one file, moved into place whole
    cmd = (f"t=$(mktemp {done}/.tmp.XXXXXX); cat > $t; sleep 0.01; "
           f"if grep -q poison $t; then rm $t; echo poison >&2; exit 3; fi; mv $t $t.ok")
    args = ["consume", log, "--group", "g", "--batch", "12", "--format", "%p %o %s\\n", "--retries", "1",
            "--retry-backoff", "10ms", "--dead-letter", dead, "--exec", cmd]
    killed_mid_search = 0
    for _ in range(6):
        proc = subprocess.Popen([*CLI, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=cli_env(),
                                start_new_session=True)
        time.sleep(rng.uniform(0.3, 1.2))
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        killed_mid_search += b"running it in halves" in err and b"went to" not in err
    assert killed_mid_search  # the kills did land in searches
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    got: list[tuple[int, int]] = []
    for f in done.glob("*.ok"):
        got += [(int(p), int(o)) for p, o in (ln.split()[:2] for ln in f.read_text().splitlines())]
    where = {json.loads(ln)["value"]["i"]: (json.loads(ln)["partition"], json.loads(ln)["offset"])
             for ln in run_cli("consume", log, check=True).stdout.splitlines()}
    assert set(got) == {where[i] for i in range(96) if i not in poison}
    sources = [d["headers"]["streamctl.source"] for d in dead_letters(dead)]
    assert sorted(sources) == sorted(f"{log}/{where[i][0]}@{where[i][1]}" for i in poison)
    ends: dict[int, int] = {}
    for p, o in where.values():
        ends[p] = max(ends.get(p, 0), o + 1)
    assert committed(log, "g") == ends


def test_stop_during_the_backoff_wait(logdir: str, tmp_path) -> None:
    produce(logdir, 0, 3)
    for sig, code in ((signal.SIGTERM, 0), (signal.SIGINT, 130)):
        proc = subprocess.Popen([*CLI, "consume", logdir, "--group", "g", "--retries", "3", "--retry-backoff", "1m",
                                 "--exec", "cat > /dev/null; exit 1"], stderr=subprocess.PIPE, env=cli_env())
        assert proc.stderr is not None
        err = b""
        while b"retry 1 of 3 in 60s" not in err:
            line = proc.stderr.readline()
            assert line, err
            err += line
        proc.send_signal(sig)
        rest = proc.communicate(timeout=30)[1]  # well before the minute's wait would end
        assert proc.returncode == code, rest
        assert b"Traceback" not in rest
        assert committed(logdir, "g") == {}


@pytest.mark.parametrize("args,message", [
    (["--exec", "cat", "--retries", "-1"], "--retries must not be negative"),
    (["--retries", "2"], "need --exec"),
    (["--dead-letter", "DEAD"], "need --exec"),
    (["--exec", "cat", "--retry-backoff", "1s"], "--retry-backoff needs --retries"),
    (["--exec", "cat", "--retries", "1", "--retry-backoff", "soon"], "invalid duration"),
    (["--exec", "cat", "--dead-letter", "LOG"], "inside"),
    (["--exec", "cat", "--dead-letter", "LOG/"], "inside"),
    (["--exec", "cat", "--dead-letter", "LOG/dead"], "inside"),
    (["--exec", "cat", "--dead-letter", "LOG/p0"], "inside"),
    (["--exec", "cat", "--dead-letter", "."], "inside"),
    (["--exec", "cat", "--dead-letter", "FILE"], "not a streamctl log"),
    (["--exec", "cat", "--dead-letter", "STRAY"], "not a streamctl log"),
])
def test_bad_retry_and_dead_letter_flags(tmp_path, args: list[str], message: str) -> None:
    log = str(tmp_path / "log")
    produce(log, 0, 2)
    (tmp_path / "FILE").write_text("x\n")
    (tmp_path / "STRAY").mkdir()
    (tmp_path / "STRAY" / "notes.txt").write_text("x\n")
    before = sorted(os.listdir(tmp_path)), sorted(os.listdir(log))
    args = [a.replace("LOG", log).replace("DEAD", str(tmp_path / "dead")).replace("FILE", str(tmp_path / "FILE"))
            .replace("STRAY", str(tmp_path / "STRAY")) for a in args]
    r = run_cli("consume", log, "--group", "g", *args, cwd=log if "." in args else None)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(b"streamctl: ") and message.encode() in r.stderr, r.stderr
    assert b"Traceback" not in r.stderr
    assert (sorted(os.listdir(tmp_path)), sorted(os.listdir(log))) == before  # nothing created
    assert committed(log, "g") == {}


def test_redrive_exactly_once_can_be_rerun(tmp_path) -> None:
    """The on-call form: rerunning the re-drive (after a crash, or next week) appends each dead letter once."""
    log, dead = str(tmp_path / "orders"), str(tmp_path / "orders.dead")
    produce_poisoned(log, 6, {1, 4})
    assert run_cli("consume", log, "--group", "g", "--dead-letter", dead, "--exec", "! grep -q poison").returncode == 0
    for _ in range(2):
        letters = run_cli("consume", dead, check=True).stdout
        run_cli("produce", log, "--envelope", "--exactly-once", "--source", dead, input=letters, check=True)
    back = [json.loads(ln) for ln in run_cli("consume", log, "--from", "6", check=True).stdout.splitlines()]
    assert [(x["key"], x["value"]["i"]) for x in back] == [("k1", 1), ("k4", 4)]
    # the re-driven copy names the dead letter it came from; that one names the original
    assert [x["headers"]["streamctl.source"] for x in back] == [f"{dead}/0/0", f"{dead}/0/1"]
    assert [x["headers"]["trace"] for x in back] == ["t1", "t4"]


def test_dead_letter_keeps_the_value_text_as_stored(tmp_path) -> None:
    log, dead = str(tmp_path / "orders"), str(tmp_path / "orders.dead")
    run_cli("produce", log, input='{"amount": 2.50, "poison": true}\n', check=True)
    seg = os.path.join(log, "p0", "0" * 20 + ".jsonl")
    with open(seg, "ab") as f:  # a record with headers and a value in no canonical form
        f.write(b'{"offset":1,"partition":0,"ts":1,"key":"k","value":{"amount": 1.50, "poison": [1e5]},'
                b'"headers":{"trace":"x","headers":"y"}}\n')
    r = run_cli("consume", log, "--group", "g", "--dead-letter", dead, "--exec", "! grep -q poison")
    assert r.returncode == 0, r.stderr
    stored = b"".join(open(os.path.join(dead, "p0", n), "rb").read() for n in sorted(os.listdir(os.path.join(dead, "p0"))) if n.endswith(".jsonl"))
    first, second = stored.splitlines()
    assert b',"key":null,"value":{"amount": 2.50, "poison": true},"headers":{"streamctl.error":' in first
    assert b',"key":"k","value":{"amount": 1.50, "poison": [1e5]},"headers":{"trace":"x","headers":"y",' in second
