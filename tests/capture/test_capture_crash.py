"""Exactly once under kill -9, and a snapshot that meets the stream with no gap and no overlap."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

from conftest import CLI, cli_env, log_records, run_cli
from pgserver import PgServer


class Writer(threading.Thread):
    """Small transactions, one after the other: each inserts 1-3 rows (ids in order) and sets the counter row."""

    def __init__(self, pg: PgServer, db: str, first_id: int = 1) -> None:
        super().__init__(daemon=True)
        self.conn = pg.connect(db, autocommit=False)
        self.stop = threading.Event()
        self.next_id = first_id
        self.txns = 0

    def run(self) -> None:
        rnd = random.Random(7)
        with self.conn.cursor() as cur:
            while not self.stop.is_set():
                for _ in range(rnd.randint(1, 3)):
                    cur.execute("insert into ev values (%s, %s)", (self.next_id, f"row {self.next_id}"))
                    self.next_id += 1
                self.txns += 1
                cur.execute("update counter set n = %s where id = 0", (self.txns,))
                self.conn.commit()
                time.sleep(0.002)
        self.conn.close()


def _setup(pg: PgServer, db: str) -> None:
    pg.sql("create table ev (id int primary key, note text)", db)
    pg.sql("create table counter (id int primary key, n int)", db)
    pg.sql("insert into counter values (0, 0)", db)


def _check_exactly_once(pg: PgServer, db: str, ev_log: str, counter_log: str, writer: Writer) -> None:
    ev = [r for r in log_records(ev_log) if r["headers"]["op"] != "r"]
    ids = [int(r["key"]) for r in ev]
    assert ids == list(range(1, writer.next_id)), "every insert once, in commit order"
    ns = [r["value"]["n"] for r in log_records(counter_log) if r["headers"]["op"] == "u"]
    assert ns == list(range(1, writer.txns + 1)), "every update once, in commit order"
    lsns = [r["headers"]["lsn"] for r in ev]
    as_int = [int(a, 16) << 32 | int(b, 16) for a, b in (x.split("/") for x in lsns)]
    assert as_int == sorted(as_int)
    # a transaction's records are contiguous: an LSN never comes back after another one
    seen: list[str] = []
    for x in lsns:
        if not seen or seen[-1] != x:
            assert x not in seen
            seen.append(x)
    rows = pg.sql("select count(*) from ev", db)[0][0]
    assert rows == writer.next_id - 1


def test_kill9_loop_small_transactions(pg: PgServer, db: str, tmp_path: Path) -> None:
    _setup(pg, db)
    log = str(tmp_path / "cdc" / "{table}")
    dsn = pg.dsn(db)
    run_cli("capture", dsn, log, "--table", "ev", "--table", "counter", check=True)
    writer = Writer(pg, db)
    writer.start()
    rnd = random.Random(11)
    try:
        for _ in range(8):
            proc = subprocess.Popen([*CLI, "capture", dsn, log, "--table", "ev", "--table", "counter", "--follow"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=cli_env())
            time.sleep(rnd.uniform(0.3, 1.2))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
    finally:
        writer.stop.set()
        writer.join()
    run_cli("capture", dsn, log, "--table", "ev", "--table", "counter", check=True)
    assert writer.txns > 20
    _check_exactly_once(pg, db, str(tmp_path / "cdc" / "public.ev"), str(tmp_path / "cdc" / "public.counter"),
                        writer)
    # a server restart under a running capture --follow: tests/capture/test_capture_reconnect.py


def test_follow_latency_and_sigterm(pg: PgServer, db: str, tmp_path: Path) -> None:
    pg.sql("create table f (id int primary key)", db)
    log = str(tmp_path / "f")
    proc = subprocess.Popen([*CLI, "capture", pg.dsn(db), log, "--table", "f", "--follow"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=cli_env())
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(os.path.join(log, "streamctl.json")) or json.loads(
                Path(log, "streamctl.json").read_text()).get("capture", {}).get("snapshot") != "done":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.5)
        pg.sql("insert into f values (1)", db)
        start = time.monotonic()
        while not log_records(log):
            assert time.monotonic() - start < 10, "the change never reached the log"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert [r["key"] for r in log_records(log)] == ["1"]


def test_concurrent_inserts_during_first_snapshot(pg: PgServer, db: str, tmp_path: Path) -> None:
    _setup(pg, db)
    pg.sql("insert into ev select g, 'seed' from generate_series(1000001, 1005000) g", db)
    pg.sql("update counter set n = 0", db)
    writer = Writer(pg, db)
    writer.start()
    time.sleep(0.2)
    log = str(tmp_path / "cdc" / "{table}")
    try:
        run_cli("capture", pg.dsn(db), log, "--table", "ev", "--table", "counter", check=True)
    finally:
        writer.stop.set()
        writer.join()
    run_cli("capture", pg.dsn(db), log, "--table", "ev", "--table", "counter", check=True)
    recs = log_records(str(tmp_path / "cdc" / "public.ev"))
    keys = [r["key"] for r in recs]
    assert len(keys) == len(set(keys)) == writer.next_id - 1 + 5000, "each row exactly once, snapshot or change"
    snap = [int(r["key"]) for r in recs if r["headers"]["op"] == "r" and int(r["key"]) < 1000000]
    changes = [int(r["key"]) for r in recs if r["headers"]["op"] == "c"]
    assert snap and changes, "the writer overlapped the snapshot"
    assert max(snap) < min(changes) and changes == sorted(changes)
    counter = log_records(str(tmp_path / "cdc" / "public.counter"))
    ns = [r["value"]["n"] for r in counter]
    assert ns == list(range(ns[0], writer.txns + 1))  # the snapshot's value, then each later update once
    compact = [json.loads(x)["value"] for x in run_cli("replay", str(tmp_path / "cdc" / "public.ev"), "--compact",
                                                       check=True).stdout.splitlines()]
    want = pg.sql("select json_agg(t) from ev t", db)[0][0]
    assert sorted(compact, key=lambda v: v["id"]) == sorted(want, key=lambda v: v["id"])


def test_kill9_during_snapshot_resyncs(pg: PgServer, db: str, tmp_path: Path) -> None:
    pg.sql("create table big (id int primary key, pad text)", db)
    pg.sql("insert into big select g, repeat('x', 100) from generate_series(1, 30000) g", db)
    log = str(tmp_path / "big")
    dsn = pg.dsn(db)
    for delay in (0.6, 1.2):
        proc = subprocess.Popen([*CLI, "capture", dsn, log, "--table", "big"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=cli_env())
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    pg.sql("update big set pad = 'changed' where id <= 10", db)
    pg.sql("delete from big where id between 11 and 20", db)
    run_cli("capture", dsn, log, "--table", "big", check=True)
    pg.sql("insert into big values (0, 'after')", db)
    run_cli("capture", dsn, log, "--table", "big", check=True)
    recs = log_records(log)
    per_key: dict[str, list] = {}
    for r in recs:
        per_key.setdefault(r["key"], []).append(r["value"])
    unchanged = [v for k, v in per_key.items() if 20 < int(k)]
    assert all(len(v) == 1 for v in unchanged), "an unchanged row is in the log once"
    compact = [json.loads(x)["value"] for x in run_cli("replay", log, "--compact", check=True).stdout.splitlines()]
    want = pg.sql("select json_agg(t) from big t", db)[0][0]
    assert sorted(compact, key=lambda v: v["id"]) == sorted(want, key=lambda v: v["id"])
    assert pg.sql("select count(*) from pg_replication_slots where database = %s", args=(db,))[0][0] == 1
