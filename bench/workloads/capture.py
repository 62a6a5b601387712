"""capture: a table's snapshot and a stream of small transactions, against what a user would script instead.

- Snapshot of an N-row table: `capture` (slot, exported snapshot, rows into the log) against
  `psql -c "\\copy (select row_to_json(t) from t) to stdout" | streamctl produce LOG --key-field id`.
  Target: within 1.5x of that pipe's wall time.
- Change stream: N/10 rows inserted two per transaction, read from the slot into the log by
  `capture` against `pg_recvlogical` (the same pgoutput plugin and publication) writing the raw
  stream to a file. Target: at least 0.5x its rows/s.

A PostgreSQL server is started for the workload (initdb into a temporary folder, run as the
`postgres` user when this runs as root), and stopped at the end. The changes are written in
each contestant's setup, untimed, after its slot was made.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile

from bench.runner import Bench, Contestant, say

PG_BINS = [f"/usr/lib/postgresql/{v}/bin" for v in (17, 16, 15, 14, 13, 12)]


class _Server:
    def __init__(self) -> None:
        self.bin = next((d for d in PG_BINS if os.path.exists(os.path.join(d, "initdb"))), "")
        self.base = tempfile.mkdtemp(prefix="streamctl-bench-pg-")
        self.user = "postgres" if os.getuid() == 0 else pwd.getpwuid(os.getuid()).pw_name
        if os.getuid() == 0:
            pw = pwd.getpwnam(self.user)
            os.chown(self.base, pw.pw_uid, pw.pw_gid)
        self.data = os.path.join(self.base, "data")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.dsn = f"host={self.base} port={self.port} dbname=postgres user=postgres"

    def _as(self, *cmd: str) -> list[str]:
        return ["runuser", "-u", self.user, "--", *cmd] if os.getuid() == 0 else list(cmd)

    def start(self) -> None:
        subprocess.run(self._as(os.path.join(self.bin, "initdb"), "-D", self.data, "-U", "postgres", "-A", "trust",
                                "--no-sync"), check=True, capture_output=True)
        with open(os.path.join(self.data, "postgresql.auto.conf"), "a") as f:
            # durable commits as a production server has them: the stream's rate is the server's too
            f.write(f"wal_level = logical\nmax_replication_slots = 10\nmax_wal_senders = 10\nport = {self.port}\n"
                    f"unix_socket_directories = '{self.base}'\nlisten_addresses = ''\nshared_buffers = 256MB\n"
                    "synchronous_commit = off\nmax_wal_size = 4GB\n")
        subprocess.run(self._as(os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-w", "-l",
                                os.path.join(self.base, "server.log"), "start"), check=True, capture_output=True)

    def stop(self) -> None:
        subprocess.run(self._as(os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-m", "immediate", "stop"),
                       capture_output=True)
        shutil.rmtree(self.base, ignore_errors=True)

    def psql(self, sql: str) -> str:
        return subprocess.run([os.path.join(self.bin, "psql"), self.dsn, "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql],
                              check=True, capture_output=True, text=True).stdout.strip()

    def drop_slot(self, slot: str) -> None:
        self.psql(f"select pg_drop_replication_slot(slot_name) from pg_replication_slots where slot_name = '{slot}'")


def run(b: Bench) -> None:
    srv = _Server()
    if not srv.bin:
        b.skip("capture", "PostgreSQL server binaries not found (apt-get install postgresql)")
        return
    srv.start()
    try:
        _snapshot(b, srv)
        _stream(b, srv)
    finally:
        srv.stop()


def _snapshot(b: Bench, srv: _Server) -> None:
    n = b.records
    srv.psql("create table t (id int primary key, customer text, amount numeric(10,2), placed_at timestamptz, "
             "country text, note text)")
    srv.psql(f"insert into t select g, 'user-' || (g % 10007), (g % 100000) / 100.0, "
             f"'2026-11-21 10:00:00+00'::timestamptz + g * interval '37 ms', "
             f"(array['JP','FI','DE','US','BR'])[1 + g % 5], 'order note ' || md5(g::text) "
             f"from generate_series(1, {n}) g")
    srv.psql("vacuum analyze t")
    log, log2 = b.work / "capture.log", b.work / "capture-ref.log"

    def fresh() -> None:
        shutil.rmtree(log, ignore_errors=True)
        shutil.rmtree(log2, ignore_errors=True)
        srv.drop_slot("bench_snapshot")

    sc = shlex.join(b.sc("produce", str(log2), "--key-field", "id"))
    psql = shlex.join([os.path.join(srv.bin, "psql"), srv.dsn, "-Xq", "-c",
                       "\\copy (select row_to_json(t) from t) to stdout"])
    group = f"capture snapshot {n // 1000}k rows"
    b.compare(group, [
        Contestant("streamctl capture (snapshot)", b.sc("capture", srv.dsn, str(log), "--table", "t", "--slot",
                                                        "bench_snapshot"), subject=True, setup=fresh, teardown=fresh),
        Contestant("psql \\copy row_to_json | streamctl produce --key-field id", ["sh", "-c", f"{psql} | {sc}"],
                   setup=fresh, teardown=fresh),
    ], records=n, nbytes=None)
    r = b.ratio(group, "streamctl capture (snapshot)", "psql \\copy row_to_json | streamctl produce --key-field id")
    if r is not None:
        b.target("`capture` snapshot within 1.5x of the psql | produce pipe's wall time",
                 f"takes {1 / r:.2f}x its time", 1 / r <= 1.5)
    srv.psql("drop table t")


def _stream(b: Bench, srv: _Server) -> None:
    m = max(b.records // 10, 2000)
    srv.psql("create table s (id int primary key, v text, n int)")
    srv.psql("create publication bench_recv for table s")
    log = b.work / "capture-stream.log"
    out = b.work / "recvlogical.out"
    endpos = b.work / "recvlogical.endpos"

    def changes() -> None:
        # two rows per transaction, committed one by one (a procedure-style DO block may COMMIT)
        srv.psql(f"do $$ begin for i in 0..{m // 2 - 1} loop insert into s values (2 * i, 'v' || i, i), "
                 f"(2 * i + 1, 'w' || i, i); commit; end loop; end $$")

    def capture_setup() -> None:
        shutil.rmtree(log, ignore_errors=True)
        srv.drop_slot("bench_stream")
        srv.psql("truncate s")
        subprocess.run(b.sc("capture", srv.dsn, str(log), "--table", "s", "--slot", "bench_stream", "--snapshot",
                            "never"), check=True, capture_output=True)
        changes()

    def recv_setup() -> None:
        out.unlink(missing_ok=True)
        srv.drop_slot("bench_recv")
        srv.psql("truncate s")
        subprocess.run([os.path.join(srv.bin, "pg_recvlogical"), "-d", srv.dsn, "-S", "bench_recv", "-P", "pgoutput",
                        "--create-slot"], check=True, capture_output=True)
        changes()
        endpos.write_text(srv.psql("select pg_current_wal_insert_lsn()"))

    def cleanup() -> None:
        shutil.rmtree(log, ignore_errors=True)
        out.unlink(missing_ok=True)

    recv = shlex.join([os.path.join(srv.bin, "pg_recvlogical"), "-d", srv.dsn, "-S", "bench_recv", "--start", "-f",
                       str(out), "-o", "proto_version=1", "-o", "publication_names=bench_recv", "--no-loop"])
    group = f"capture change stream {m // 1000}k rows, 2 per transaction"
    b.compare(group, [
        Contestant("streamctl capture (changes)", b.sc("capture", srv.dsn, str(log), "--table", "s", "--slot",
                                                       "bench_stream"), subject=True, setup=capture_setup,
                   teardown=cleanup),
        Contestant("pg_recvlogical -P pgoutput -f FILE", ["sh", "-c", f"{recv} --endpos $(cat {endpos})"],
                   setup=recv_setup, teardown=cleanup),
    ], records=m, nbytes=None, note="the changes are written before each run (untimed); both read them from a slot")
    r = b.ratio(group, "streamctl capture (changes)", "pg_recvlogical -P pgoutput -f FILE")
    if r is not None:
        b.target("`capture` change stream >= 0.5x pg_recvlogical's rows/s", f"{r:.2f}x", r >= 0.5)
    say(f"  capture: {m} changes per run")
