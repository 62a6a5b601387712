"""produce --exactly-once: a crashed `consume A | produce B` pipeline rerun gives B each record once."""

from __future__ import annotations

import collections
import json
import random
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import CLI, cli_env, run_cli


def fill(log: str, n: int, partitions: int, keyed: bool = True) -> None:
    rows = [{"k": f"user-{i % 17}", "i": i, "pad": "p" * 40} for i in range(n)]
    args = ("--key-field", "k") if keyed else ()
    run_cli("produce", log, "--partitions", str(partitions), *args,
            input="".join(json.dumps(r) + "\n" for r in rows), check=True)


def sources(log: str) -> list[tuple[int, str]]:
    """(B partition, streamctl.source header) of every record of B, in offset order per partition.

    Read straight from the segment files (whole lines only) to keep the crash loop fast.
    """
    out = []
    for pdir in sorted(Path(log).glob("p*")):
        for seg in sorted(pdir.glob("*.jsonl")):
            data = seg.read_bytes()
            for ln in data[: data.rfind(b"\n") + 1].splitlines():
                r = json.loads(ln)
                out.append((r["partition"], r["offset"], r["headers"]["streamctl.source"]))
    out.sort()
    return [(p, s) for p, _, s in out]


def check_once_in_order(a: str, b: str, complete: bool, name: str | None = None) -> None:
    src = sources(b)
    dups = [s for s, c in collections.Counter(s for _, s in src).items() if c > 1]
    assert dups == [], f"duplicated in B: {dups[:5]}"
    # per B partition, each source partition's offsets only grow (source order)
    last: dict[tuple[int, str], int] = {}
    for bp, s in src:
        log, sp, off = s.rsplit("/", 2)
        key = (bp, f"{log}/{sp}")
        assert int(off) > last.get(key, -1), f"out of order in B p{bp}: {s}"
        last[key] = int(off)
    if complete:
        consumed = run_cli("consume", a, check=True).stdout.splitlines()
        want = {f"{name or a}/{r['partition']}/{r['offset']}" for r in map(json.loads, consumed)}
        assert {s for _, s in src} == want


def test_rerun_skips_what_was_appended(tmp_path) -> None:
    a, b = str(tmp_path / "A"), str(tmp_path / "B")
    fill(a, 30, 3)
    for _ in range(2):
        c = subprocess.run(f"{' '.join(CLI)} consume {a} | {' '.join(CLI)} produce {b} --envelope --exactly-once "
                           f"--source A --partitions 2", shell=True, capture_output=True, env=cli_env())
        assert c.returncode == 0, c.stderr
    assert b"30 duplicate(s) skipped" in c.stderr
    src = sources(b)
    assert len(src) == 30 and len({s for _, s in src}) == 30
    assert run_cli("check", b).returncode == 0


def test_source_object_in_envelope_and_headers_kept(tmp_path) -> None:
    b = str(tmp_path / "B")
    lines = [{"key": "x", "value": i, "headers": {"h": "v"}, "source": {"log": "orders", "partition": 1, "offset": i}}
             for i in range(5)]
    data = "".join(json.dumps(r) + "\n" for r in lines)
    r1 = run_cli("produce", b, "--envelope", "--exactly-once", input=data, check=True)
    r2 = run_cli("produce", b, "--envelope", "--exactly-once", input=data + data, check=True)
    assert b"produced 5 record(s)" in r1.stderr
    assert b"produced 0 record(s)" in r2.stderr and b"10 duplicate(s)" in r2.stderr
    recs = [json.loads(x) for x in run_cli("consume", b, check=True).stdout.splitlines()]
    assert [r["headers"] for r in recs] == [{"h": "v", "streamctl.source": f"orders/1/{i}"} for i in range(5)]
    assert b"without a source" not in r1.stderr + r2.stderr
    # a record without a source (partition/offset without --source too) is appended as usual, and counted
    r3 = run_cli("produce", b, "--envelope", "--exactly-once",
                 input='{"key":"y","value":1}\n{"key":"y","value":2,"partition":0,"offset":3}\n', check=True)
    assert b"2 record(s) without a source appended as they are, not deduplicated" in r3.stderr
    assert len(run_cli("consume", b, check=True).stdout.splitlines()) == 7


def test_needs_envelope(tmp_path) -> None:
    r = run_cli("produce", str(tmp_path / "B"), "--exactly-once", input="1\n")
    assert r.returncode == 2


def test_state_is_rebuilt_from_the_log_when_the_cache_is_gone(tmp_path) -> None:
    a, b = str(tmp_path / "A"), str(tmp_path / "B")
    fill(a, 20, 2, keyed=False)
    pipe = f"{' '.join(CLI)} consume {a} | {' '.join(CLI)} produce {b} --envelope --exactly-once --source A"
    subprocess.run(pipe, shell=True, check=True, capture_output=True, env=cli_env())
    import shutil

    shutil.rmtree(tmp_path / "B" / ".exactly-once", ignore_errors=True)
    c = subprocess.run(pipe, shell=True, capture_output=True, env=cli_env())
    assert b"20 duplicate(s) skipped" in c.stderr
    check_once_in_order(a, b, complete=True, name="A")


def test_concurrent_producers_of_the_same_source(tmp_path) -> None:
    a, b = str(tmp_path / "A"), str(tmp_path / "B")
    fill(a, 400, 2)
    pipe = f"{' '.join(CLI)} consume {a} | {' '.join(CLI)} produce {b} --envelope --exactly-once --source A --partitions 3"
    run_cli("produce", b, "--partitions", "3", input="")  # create B first so both agree on its shape
    procs = [subprocess.Popen(pipe, shell=True, stderr=subprocess.PIPE, env=cli_env()) for _ in range(3)]
    for p in procs:
        p.communicate(timeout=30)
        assert p.returncode == 0
    check_once_in_order(a, b, complete=True, name="A")


def _bytes(log: str) -> int:
    return sum(f.stat().st_size for f in Path(log).glob("p*/*.jsonl"))


@pytest.mark.slow
def test_crash_loop_pipeline_each_record_once(tmp_path) -> None:
    """Kill the pipeline at random points (the consumer only, or everything), rerun; 20+ rounds.

    A keeps growing (a feeder appends all along), so every round has records in
    flight; each kill lands once the round's pipeline is appending to B.
    """
    a, b = str(tmp_path / "A"), str(tmp_path / "B")
    fill(a, 500, 4)
    feeder = subprocess.Popen([*CLI, "produce", a, "--key-field", "k"], stdin=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=cli_env())
    stop = threading.Event()

    def feed() -> None:
        i = 500
        while not stop.is_set():
            feeder.stdin.write("".join(json.dumps({"k": f"user-{j % 17}", "i": j}) + "\n"
                                       for j in range(i, i + 10)).encode())
            feeder.stdin.flush()
            i += 10
            time.sleep(0.02)

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    rng = random.Random(11)
    from_earliest = False  # after killing the producer too, B may be behind the group: rerun from the start
    kills = mid_run = 0
    try:
        for _rnd in range(21):
            cargs = [*CLI, "consume", a, "--group", "copy", "--follow"]
            if from_earliest:
                cargs += ["--from", "earliest"]
            before = _bytes(b) if Path(b).exists() else 0
            cons = subprocess.Popen(cargs, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=cli_env())
            prod = subprocess.Popen([*CLI, "produce", b, "--envelope", "--exactly-once", "--source", a,
                                     "--partitions", "3"], stdin=cons.stdout, stderr=subprocess.PIPE,
                                    env=cli_env())
            cons.stdout.close()
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline and (not Path(b, "streamctl.json").exists() or _bytes(b) == before):
                time.sleep(0.01)
            time.sleep(rng.uniform(0, 0.3))
            everything = rng.random() < 0.35
            cons.kill()
            if everything:
                prod.kill()
            cons.wait()
            prod.communicate(timeout=30)
            kills += 1
            mid_run += _bytes(b) > before
            from_earliest = everything
            check_once_in_order(a, b, complete=False)  # the invariant holds after every crash
    finally:
        stop.set()
        t.join()
        feeder.stdin.close()
        feeder.wait(timeout=10)
    # the final, uninterrupted run
    cargs = [*CLI, "consume", a, "--group", "copy", *(["--from", "earliest"] if from_earliest else [])]
    final = subprocess.run(f"{' '.join(cargs)} | {' '.join(CLI)} produce {b} --envelope --exactly-once --source {a}",
                           shell=True, capture_output=True, env=cli_env())
    assert final.returncode == 0, final.stderr
    assert kills >= 20 and mid_run >= 15
    check_once_in_order(a, b, complete=True)
    assert run_cli("check", b).returncode == 0


def test_null_keys_go_to_source_partition_mod_n(tmp_path) -> None:
    """Round-robin would put a record elsewhere on a rerun; exactly-once pins it by its source partition."""
    a, b = str(tmp_path / "A"), str(tmp_path / "B")
    fill(a, 40, 4, keyed=False)
    pipe = f"{' '.join(CLI)} consume {a} | {' '.join(CLI)} produce {b} --envelope --exactly-once --source A --partitions 3"
    for _ in range(2):
        subprocess.run(pipe, shell=True, check=True, capture_output=True, env=cli_env())
    check_once_in_order(a, b, complete=True, name="A")
    for bp, s in sources(b):
        assert int(s.split("/")[1]) % 3 == bp


@pytest.mark.parametrize("group", [False, True])
def test_the_documented_rerun_after_produce_is_killed(tmp_path, group) -> None:
    """produce's --help and docs/guide/live.md: kill the pipeline's produce part way, rerun from the
    source's start (the default without a group; --from earliest with one, whose offset is past the
    records that were in the pipe) and B has every record of A once."""
    a, b = str(tmp_path / "A"), str(tmp_path / "B")
    fill(a, 4000, 2)
    gargs = ["--group", "copy"] if group else []
    cons = subprocess.Popen([*CLI, "consume", a, *gargs], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=cli_env())
    prod = subprocess.Popen([*CLI, "produce", b, "--envelope", "--exactly-once", "--source", a, "--fsync", "always"],
                            stdin=cons.stdout, stderr=subprocess.DEVNULL, env=cli_env())
    assert cons.stdout is not None
    cons.stdout.close()
    deadline = time.monotonic() + 60
    while not (Path(b, "streamctl.json").exists() and sources(b)):
        assert time.monotonic() < deadline and prod.poll() is None
        time.sleep(0.01)
    prod.kill()
    prod.wait()
    cons.wait(timeout=60)
    assert 0 < len(sources(b)) < 4000  # killed part way
    rerun = [*CLI, "consume", a, *gargs, *(["--from", "earliest"] if group else [])]
    r = subprocess.run(f"{' '.join(rerun)} | {' '.join(CLI)} produce {b} --envelope --exactly-once --source {a}",
                       shell=True, capture_output=True, env=cli_env())
    assert r.returncode == 0, r.stderr
    check_once_in_order(a, b, complete=True)
    # and with the group, the next run from its offset has nothing new and adds nothing
    if group:
        n = len(sources(b))
        r = subprocess.run(f"{' '.join(CLI)} consume {a} --group copy | {' '.join(CLI)} produce {b} --envelope "
                           f"--exactly-once --source {a}", shell=True, capture_output=True, env=cli_env())
        assert r.returncode == 0 and len(sources(b)) == n
