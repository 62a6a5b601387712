"""consume --sqlite under crashes: kill -9 at random moments in a loop, and kills (or ENOSPC)
injected with strace at the commit's writes and syncs. After every crash the database passes
PRAGMA integrity_check, the table holds exactly the records below the stored offsets, the group
file never points past them, and a rerun leaves every record applied exactly once."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import time

import pytest

from conftest import CLI, cli_env, run_cli

from .util import count_calls, records, strace_run

ROUNDS = 30
POINTS = 12  # per syscall: keeps the strace sweeps near a minute on 2 cores


def make_log(log: str, n: int, partitions: int = 3, seed: int = 11) -> None:
    rnd = random.Random(seed)
    lines = []
    for i in range(n):
        key = None if rnd.random() < 0.03 else f"k{rnd.randrange(500)}"
        value = None if key is not None and rnd.random() < 0.08 else {"i": i, "pad": "x" * rnd.randrange(40)}
        env = {"key": key, "value": value}
        if i % 13 == 0:
            env["headers"] = {"n": str(i)}
        lines.append(json.dumps(env))
    run_cli("produce", log, "--partitions", str(partitions), "--envelope", input="\n".join(lines) + "\n", check=True)


def compacted(recs: list[dict]) -> dict[str, tuple]:
    out: dict[str, tuple] = {}
    for r in sorted(recs, key=lambda r: (r["ts"], r["partition"], r["offset"])):
        if r["key"] is None:
            continue
        if r["value"] is None:
            out.pop(r["key"], None)
        else:
            out[r["key"]] = (r["partition"], r["offset"])
    return out


def check_state(db: str, table: str, log: str, group: str, mode: str) -> dict[int, int]:
    """The invariants that hold after any crash; returns the database's offsets."""
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        has = con.execute("SELECT 1 FROM sqlite_schema WHERE name=?", (table,)).fetchone()
        made = con.execute("SELECT 1 FROM sqlite_schema WHERE name='streamctl_offsets'").fetchone()
        # a crash before the first commit leaves a database without tables (or no file at all)
        offs = dict(con.execute('SELECT "partition", next_offset FROM streamctl_offsets WHERE "group"=?',
                                (group,))) if made else {}
        rows = con.execute(f'SELECT "partition", "offset", key FROM "{table}"').fetchall() if has else []
    finally:
        con.close()
    recs = records(log)
    below = [r for r in recs if r["offset"] < offs.get(r["partition"], 0)]
    if mode == "append":
        keys = [(p, o) for p, o, _k in rows]
        assert len(keys) == len(set(keys)), "a record was applied twice"
        assert set(keys) == {(r["partition"], r["offset"]) for r in below}, "rows and offsets disagree"
    else:
        assert {k: (p, o) for p, o, k in rows} == compacted(below), "the table is not the compacted log"
    gpath = os.path.join(log, "groups", f"{group}.json")
    if os.path.exists(gpath):
        gfile = {int(p): o for p, o in json.loads(open(gpath).read())["offsets"].items()}
        for p, o in gfile.items():
            assert o <= offs.get(p, 0), f"the group file points past the database in partition {p}"
    return offs


def complete(db: str, table: str, log: str, group: str, mode: str, args: list[str]) -> None:
    p = run_cli(*args)
    assert p.returncode == 0, p.stderr
    offs = check_state(db, table, log, group, mode)
    ends: dict[int, int] = {}
    for r in records(log):
        ends[r["partition"]] = r["offset"] + 1
    assert offs == ends, "the run to completion did not reach the end"


@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_kill_9_at_random_moments_then_exactly_once(tmp_path, mode):
    log, db = str(tmp_path / "orders"), str(tmp_path / "r.db")
    make_log(log, 20_000)
    args = ["consume", log, "-g", "g", "--sqlite", db, "--mode", mode, "--batch", "100"]
    rnd = random.Random(2024)
    progress = []
    for _ in range(ROUNDS):
        proc = subprocess.Popen([*CLI, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=cli_env())
        time.sleep(rnd.uniform(0.15, 1.0))
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        assert b"Traceback" not in err, err
        if os.path.exists(db):
            progress.append(sum(check_state(db, "orders", log, "g", mode).values()))
    assert progress and 0 < max(progress), "no round got as far as a commit: the kills tested nothing"
    complete(db, "orders", log, "g", mode, args)


def _fresh(tmp_path, base_log: str, name: str) -> tuple[str, str]:
    from .util import copy_log

    d = tmp_path / name
    d.mkdir()
    log, db = str(d / "orders"), str(d / "r.db")
    copy_log(base_log, log)
    return log, db


@pytest.fixture
def small_log(tmp_path) -> str:
    log = str(tmp_path / "base")
    make_log(log, 400, seed=5)
    return log


def _points(n: int) -> list[int]:
    if n <= POINTS:
        return list(range(1, n + 1))
    return sorted({1, n, *(int(1 + i * n / POINTS) for i in range(POINTS))})


@pytest.mark.parametrize("syscall", ["pwrite64", "fdatasync", "fsync", "write"])
def test_kill_at_the_commits_writes_and_syncs(strace, tmp_path, small_log, syscall):
    """SQLite writes its WAL with pwrite64 and syncs it at checkpoints; the group file goes through
    write, fsync and rename. A kill at any of them loses and doubles nothing."""
    log, db = _fresh(tmp_path, small_log, "probe")
    args = ["consume", log, "-g", "g", "--sqlite", db, "--batch", "50", "--mode", "upsert"]
    n = count_calls(strace, syscall, args)
    if n == 0:
        pytest.skip(f"consume --sqlite makes no {syscall} call here")
    for k in _points(n):
        log, db = _fresh(tmp_path, small_log, f"k{k}")
        args = ["consume", log, "-g", "g", "--sqlite", db, "--batch", "50", "--mode", "upsert"]
        strace_run(strace, syscall, "signal=SIGKILL", k, args)
        if os.path.exists(db):
            check_state(db, "orders", log, "g", "upsert")
        complete(db, "orders", log, "g", "upsert", args)


def test_enospc_at_a_commit_is_a_clear_error_and_a_rerun_completes(strace, tmp_path, small_log):
    log, db = _fresh(tmp_path, small_log, "probe")
    args = ["consume", log, "-g", "g", "--sqlite", db, "--batch", "50"]
    n = count_calls(strace, "pwrite64", args)
    assert n > 4
    failed = 0
    for k in _points(n)[::2]:
        log, db = _fresh(tmp_path, small_log, f"e{k}")
        args = ["consume", log, "-g", "g", "--sqlite", db, "--batch", "50"]
        p = strace_run(strace, "pwrite64", "error=ENOSPC", k, args)
        err = p.stderr.decode()
        assert "Traceback" not in err
        # a failed checkpoint (after a commit, or at close) loses nothing: SQLite keeps the WAL
        if p.returncode != 0:
            assert p.returncode == 1, err
            assert err.startswith(f"streamctl: {db}: ") and "full" in err, err
            failed += 1
        check_state(db, "orders", log, "g", "append")
        complete(db, "orders", log, "g", "append", args)
    assert failed, "no injected ENOSPC hit a transaction"
