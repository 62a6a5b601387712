"""capture --follow across lost connections: the server restarted under it (pg_ctl restart -m fast) while a
writer commits small transactions, and a server side that ends the connection; every change in the log
exactly once, in commit order; a misconfiguration found on reconnecting still ends it with one line."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

from test_capture_crash import _check_exactly_once, _setup

from conftest import CLI, cli_env, log_records, run_cli
from pgserver import PgServer


class SurvivingWriter(threading.Thread):
    """Small transactions (two inserts and the counter's update) through server restarts: a transaction whose
    commit was cut off is looked up after reconnecting and made again only if it did not commit, so the set
    of committed transactions is known exactly (ids 1..next_id-1, counter 1..txns)."""

    def __init__(self, pg: PgServer, db: str) -> None:
        super().__init__(daemon=True)
        self.pg, self.db = pg, db
        self.stop = threading.Event()
        self.next_id = 1
        self.txns = 0
        self.failures = 0

    def _connect(self):  # noqa: ANN202
        while not self.stop.is_set():
            try:
                return self.pg.connect(self.db, autocommit=False)
            except Exception:
                time.sleep(0.05)
        return None

    def run(self) -> None:
        conn = self._connect()
        while conn is not None and not self.stop.is_set():
            a, b = self.next_id, self.next_id + 1
            try:
                with conn.cursor() as cur:
                    cur.execute("insert into ev values (%s, %s), (%s, %s)", (a, f"row {a}", b, f"row {b}"))
                    cur.execute("update counter set n = %s where id = 0", (self.txns + 1,))
                conn.commit()
            except Exception:
                self.failures += 1
                try:
                    conn.close()
                except Exception:
                    pass
                conn = self._connect()
                if conn is None:
                    return  # stopped: the cut-off transaction is looked up below
                with conn.cursor() as cur:
                    cur.execute("select count(*) from ev where id = %s", (a,))
                    committed = cur.fetchone()[0] == 1
                conn.rollback()
                if not committed:
                    continue
            self.next_id += 2
            self.txns += 1
            time.sleep(0.003)
        if conn is not None:
            conn.close()

    def settle(self) -> None:
        """After the thread ended: count a last transaction whose commit was cut off but went through."""
        rows = self.pg.sql("select count(*) from ev where id = %s", self.db, args=(self.next_id,))[0][0]
        if rows:
            self.next_id += 2
            self.txns += 1


def _wait_streaming(pg: PgServer, db: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not pg.sql("select count(*) from pg_replication_slots where database = %s and active", args=(db,))[0][0]:
        assert time.monotonic() < deadline, "capture --follow is not streaming"
        time.sleep(0.05)


def _walsender(pg: PgServer, db: str) -> int | None:
    """The server process streaming the database's slot now (None: no one is)."""
    rows = pg.sql("select active_pid from pg_replication_slots where database = %s", args=(db,))
    return rows[0][0] if rows else None


def _wait_for_ids(log: str, n: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = sum(1 for r in log_records(log) if r["headers"]["op"] != "r")
        if got >= n:
            return
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
        assert time.monotonic() < deadline, f"{got} of {n} changes in the log"
        time.sleep(0.1)


def test_follow_reconnects_across_server_restarts(pg: PgServer, db: str, tmp_path: Path) -> None:
    _setup(pg, db)
    log = str(tmp_path / "cdc" / "{table}")
    ev_log, counter_log = str(tmp_path / "cdc" / "public.ev"), str(tmp_path / "cdc" / "public.counter")
    dsn = pg.dsn(db)
    proc = subprocess.Popen([*CLI, "capture", dsn, log, "--table", "ev", "--table", "counter", "--follow"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=cli_env())
    writer = SurvivingWriter(pg, db)
    try:
        _wait_streaming(pg, db)
        writer.start()
        for _ in range(2):
            time.sleep(1.0)
            pg.ctl("-m", "fast", "restart", "-l", str(Path(pg.data).parent / "server.log"))
            _wait_streaming(pg, db)  # capture is back on its own
        time.sleep(1.0)
    finally:
        writer.stop.set()
        writer.join()
    writer.settle()
    assert writer.txns > 20 and writer.failures >= 1, (writer.txns, writer.failures)
    _wait_for_ids(ev_log, writer.next_id - 1, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    text = err.decode()
    assert "Traceback" not in text
    assert text.count("streamctl: lost the connection to") == 2, text
    assert text.count("streamctl: reconnected to") == 2, text
    _check_exactly_once(pg, db, ev_log, counter_log, writer)  # type: ignore[arg-type]
    # and a run after it finds nothing new: the log and the slot agree
    out = run_cli("capture", dsn, log, "--table", "ev", "--table", "counter", check=True)
    _check_exactly_once(pg, db, ev_log, counter_log, writer)  # type: ignore[arg-type]
    assert b"Traceback" not in out.stderr


def test_follow_reconnects_after_its_connection_is_ended_then_stops_on_a_misconfiguration(
        pg: PgServer, db: str, tmp_path: Path) -> None:
    pg.sql("do $$ begin create role recon login replication; exception when duplicate_object then "
           "alter role recon replication; end $$")
    pg.sql(f"grant create on database {db} to recon")
    pg.sql("create table r (id int primary key)", db)
    pg.sql("alter table r owner to recon", db)
    log = str(tmp_path / "r")
    dsn = pg.dsn(db, user="recon")
    proc = subprocess.Popen([*CLI, "capture", dsn, log, "--table", "r", "--follow"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=cli_env())
    try:
        _wait_streaming(pg, db)
        pg.sql("insert into r values (1)", db)
        # a change read through the slot: the slot's server process is now the streaming one (while
        # capture starts, another connection may hold the slot for a moment)
        _wait_for_ids(log, 1, proc)
        # the server ends the streaming connection (an administrator, a failover proxy): a transient loss
        old = _walsender(pg, db)
        pg.sql("select pg_terminate_backend(%s)", args=(old,))
        deadline = time.monotonic() + 30
        while _walsender(pg, db) in (None, old):  # streaming again, through a new connection
            assert time.monotonic() < deadline, "capture did not reconnect"
            time.sleep(0.05)
        pg.sql("insert into r values (2)", db)
        _wait_for_ids(log, 2, proc)
        # now the role loses REPLICATION and its connection is ended again: reconnecting finds the
        # misconfiguration, which no retry mends
        pg.sql("alter role recon noreplication")
        pg.sql("select pg_terminate_backend(active_pid) from pg_replication_slots where database = %s",
               args=(db,))
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        pg.sql("alter role recon replication")
    text = err.decode()
    assert proc.returncode == 1, text
    assert "Traceback" not in text
    assert text.count("streamctl: reconnected to") == 1, text
    last = text.strip().splitlines()[-1]
    assert last.startswith("streamctl: ") and "REPLICATION" in last, text
    assert [r["key"] for r in log_records(log)] == ["1", "2"]
