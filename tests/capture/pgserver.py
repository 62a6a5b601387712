"""A real PostgreSQL server for the capture tests (fixtures `pg` and `db`, imported by each test module): initdb into a temporary folder, run as `postgres`.

The server refuses to run as root, so when the tests run as root the folder is handed to the
`postgres` user and the server tools are run through runuser. It listens on a Unix socket in
the temporary folder and on a free localhost port, with wal_level=logical, and is stopped at the
end of the session. Missing binaries are a test failure, never a skip (scripts/test installs them).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

PG_BIN_CANDIDATES = [f"/usr/lib/postgresql/{v}/bin" for v in (17, 16, 15, 14, 13, 12)]


def pg_bin() -> str:
    for d in PG_BIN_CANDIDATES:
        if os.path.exists(os.path.join(d, "initdb")):
            return d
    found = shutil.which("initdb")
    if found:
        return os.path.dirname(found)
    pytest.fail("PostgreSQL server binaries (initdb, pg_ctl) not found: install postgresql (scripts/test does)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    bin: str
    data: str
    sock: str
    port: int
    user: str  # the OS user the server runs as

    def dsn(self, db: str = "postgres", user: str = "postgres") -> str:
        return f"host={self.sock} port={self.port} dbname={db} user={user}"

    def url(self, db: str = "postgres", user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{db}"

    def _as_server_user(self, *cmd: str) -> list[str]:
        if os.getuid() == 0:
            return ["runuser", "-u", self.user, "--", *cmd]
        return list(cmd)

    def ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(self._as_server_user(os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-w", *args),
                              capture_output=True, text=True, check=check, timeout=60)

    def start(self) -> None:
        self.ctl("-l", os.path.join(os.path.dirname(self.data), "server.log"), "start")

    def stop(self, mode: str = "fast") -> None:
        self.ctl("-m", mode, "stop", check=False)

    def restart(self) -> None:
        self.stop()
        self.start()

    def connect(self, db: str = "postgres", user: str = "postgres", autocommit: bool = True):  # noqa: ANN201
        import psycopg2

        conn = psycopg2.connect(self.dsn(db, user))
        conn.autocommit = autocommit
        return conn

    def sql(self, query: str, db: str = "postgres", args: tuple | None = None) -> list[tuple]:
        conn = self.connect(db)
        try:
            with conn.cursor() as cur:
                cur.execute(query, args)
                return cur.fetchall() if cur.description is not None else []
        finally:
            conn.close()


@pytest.fixture(scope="session")
def pg() -> Iterator[PgServer]:
    bindir = pg_bin()
    base = tempfile.mkdtemp(prefix="streamctl-pg-")
    user = "postgres" if os.getuid() == 0 else pwd.getpwuid(os.getuid()).pw_name
    if os.getuid() == 0:
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            pytest.fail("running as root and there is no `postgres` user to run the server as")
        os.chown(base, pw.pw_uid, pw.pw_gid)
    os.chmod(base, 0o755)
    data = os.path.join(base, "data")
    srv = PgServer(bindir, data, base, _free_port(), user)
    subprocess.run(srv._as_server_user(os.path.join(bindir, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
                                       "--no-sync", "-E", "UTF8", "--locale=C"),
                   capture_output=True, check=True, timeout=120)
    with open(os.path.join(data, "postgresql.auto.conf"), "a") as f:
        f.write(f"wal_level = logical\nmax_replication_slots = 40\nmax_wal_senders = 40\n"
                f"listen_addresses = '127.0.0.1'\nport = {srv.port}\nunix_socket_directories = '{base}'\n"
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 100\n"
                "wal_sender_timeout = 60s\nshared_buffers = 32MB\n")
    # md5 for TCP so the password tests need one; trust on the socket for the fixture itself
    with open(os.path.join(data, "pg_hba.conf"), "w") as f:
        f.write("local all all trust\nlocal replication all trust\n"
                "host all postgres 127.0.0.1/32 trust\nhost replication postgres 127.0.0.1/32 trust\n"
                "host all all 127.0.0.1/32 scram-sha-256\nhost replication all 127.0.0.1/32 scram-sha-256\n")
    srv.start()
    deadline = time.monotonic() + 30
    while True:
        try:
            srv.sql("select 1")
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    try:
        yield srv
    finally:
        srv.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


_counter = [0]


@pytest.fixture
def db(pg: PgServer) -> Iterator[str]:
    """A fresh database per test (its own tables and slots), dropped afterwards."""
    _counter[0] += 1
    name = f"t{os.getpid()}_{_counter[0]}"
    pg.sql(f"create database {name}")
    yield name
    # a test's slots hold the database; drop them first
    for (slot,) in pg.sql("select slot_name from pg_replication_slots where database = %s", args=(name,)):
        pg.sql("select pg_terminate_backend(active_pid) from pg_replication_slots where slot_name = %s and active_pid "
               "is not null", args=(slot,))
        for _ in range(50):
            try:
                pg.sql("select pg_drop_replication_slot(%s)", args=(slot,))
                break
            except Exception:
                time.sleep(0.1)
    pg.sql(f"drop database if exists {name} with (force)")
