"""capture's misconfigurations (one line naming what is missing, no log made), --drop-slot, stat, passwords."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import cli_env, log_records, run_cli
from pgserver import PgServer


def _fails(proc: subprocess.CompletedProcess, code: int, *words: str) -> str:
    err = proc.stderr.decode()
    assert proc.returncode == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamctl: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in err, err
    return err


def test_setup_errors_name_what_is_missing(pg: PgServer, db: str, tmp_path: Path) -> None:
    pg.sql("create table nokey (a int)", db)
    pg.sql("create table ok (id int primary key)", db)
    pg.sql("do $$ begin create role norepl login; exception when duplicate_object then null; end $$")
    log = str(tmp_path / "out")
    _fails(run_cli("capture", pg.dsn(db), log, "--table", "missing"), 1, "public.missing", "no such table")
    _fails(run_cli("capture", pg.dsn(db), log, "--table", "nokey"), 1, "public.nokey", "no primary key")
    _fails(run_cli("capture", pg.dsn(db, user="norepl"), log, "--table", "ok"), 1, "REPLICATION", "norepl")
    _fails(run_cli("capture", "this is not a dsn", log, "--table", "ok"), 2, "DSN")
    _fails(run_cli("capture", f"postgresql://postgres@127.0.0.1:port/{db}", log, "--table", "ok"), 2, "port")
    _fails(run_cli("capture", pg.dsn(db), log), 2, "--table")
    _fails(run_cli("capture", pg.dsn(db), log, "--table", "ok", "--snapshot", "sometimes"), 2, "--snapshot")
    _fails(run_cli("capture", f"host={pg.sock} port=1 dbname={db}", log, "--table", "ok"), 1, "cannot connect")
    assert not os.path.exists(log)
    assert pg.sql("select count(*) from pg_replication_slots where database = %s", args=(db,))[0][0] == 0


def test_wal_level_must_be_logical(tmp_path: Path) -> None:
    import tempfile

    from pgserver import pg_bin

    base = Path(tempfile.mkdtemp(prefix="streamctl-pg-replica-"))  # pytest's tmp folders are closed to others
    if os.getuid() == 0:
        import pwd

        pw = pwd.getpwnam("postgres")
        os.chown(base, pw.pw_uid, pw.pw_gid)
    from pgserver import _free_port

    srv = PgServer(pg_bin(), str(base / "data"), str(base), _free_port(), "postgres" if os.getuid() == 0 else "")
    cmd = [os.path.join(srv.bin, "initdb"), "-D", srv.data, "-U", "postgres", "-A", "trust", "--no-sync"]
    subprocess.run(srv._as_server_user(*cmd), capture_output=True, check=True, timeout=120)
    with open(os.path.join(srv.data, "postgresql.auto.conf"), "a") as f:
        f.write(f"wal_level = replica\nport = {srv.port}\nunix_socket_directories = '{base}'\n"
                "listen_addresses = ''\nfsync = off\nshared_buffers = 16MB\n")
    srv.start()
    try:
        srv.sql("create table ok (id int primary key)")
        log = str(tmp_path / "out")
        _fails(run_cli("capture", srv.dsn(), log, "--table", "ok"), 1, "wal_level", "logical")
        assert not os.path.exists(log)
    finally:
        srv.stop("immediate")
        import shutil

        shutil.rmtree(base, ignore_errors=True)


def test_password_never_printed(pg: PgServer, db: str, tmp_path: Path) -> None:
    pg.sql("do $$ begin create role capper login replication password 's3cr3t-pw'; "
           "exception when duplicate_object then null; end $$")
    pg.sql("create table pw (id int primary key, v text)", db)
    pg.sql("alter table pw owner to capper", db)
    pg.sql(f"grant create on database {db} to capper")  # for the publication capture makes
    pg.sql("insert into pw values (1, 'a')", db)
    log = str(tmp_path / "pw")
    url = f"postgresql://capper:s3cr3t-pw@127.0.0.1:{pg.port}/{db}"
    outputs = []
    p = run_cli("capture", url, log, "--table", "missing")
    outputs.append(p.stderr)
    assert p.returncode == 1
    p = run_cli("capture", f"postgresql://capper:wrong-pw@127.0.0.1:{pg.port}/{db}", log, "--table", "pw")
    assert p.returncode == 1 and b"wrong-pw" not in p.stderr
    p = run_cli("capture", f"host=127.0.0.1 port={pg.port} dbname={db} user=capper password=s3cr3t-pw", log,
                "--table", "pw", check=True)
    outputs.append(p.stderr)
    # the password from PGPASSWORD, as the docs advise
    p = run_cli("capture", f"postgresql://capper@127.0.0.1:{pg.port}/{db}", log, "--table", "pw", check=True,
                env=cli_env(PGPASSWORD="s3cr3t-pw"))
    outputs.append(p.stderr)
    st = run_cli("stat", log, "--json", env=cli_env(PGPASSWORD="s3cr3t-pw"), check=True)
    outputs += [st.stdout, st.stderr, run_cli("stat", log, env=cli_env(PGPASSWORD="s3cr3t-pw")).stdout]
    for name in os.listdir(log):
        if os.path.isfile(os.path.join(log, name)):
            outputs.append(Path(log, name).read_bytes())
    outputs += [p.read_bytes() for p in Path(log).rglob("*.jsonl")]
    assert outputs and all(b"s3cr3t" not in o for o in outputs)
    assert json.loads(st.stdout)["capture"]["server"] == "reachable"
    assert len(log_records(log)) == 1


@pytest.mark.parametrize("dsn", ["postgres://app:sek%rit@[::1", "host=127.0.0.1 password='sek rit",
                                 "postgresql://h/db?password=sek%rit&x=1", "host=h password=sekrit port=x",
                                 "host=h password=sek\\ rit port=x", "host=h password=sek\\ rit port='x"])
def test_a_bad_dsn_is_named_without_its_password(dsn: str, tmp_path: Path) -> None:
    """A DSN libpq refuses is a usage error naming it, with no piece of the password in the line,
    even where libpq's own message quotes the piece it could not read."""
    p = run_cli("capture", dsn, str(tmp_path / "e"), "--table", "orders")
    assert p.returncode == 2 and p.stderr.startswith(b"streamctl: bad DSN")
    assert b"sek" not in p.stderr and b"rit" not in p.stderr
    assert not (tmp_path / "e").exists()


def test_drop_slot_and_stat(pg: PgServer, db: str, tmp_path: Path) -> None:
    pg.sql("create table s (id int primary key)", db)
    pg.sql("insert into s values (1)", db)
    log = str(tmp_path / "s")
    run_cli("capture", pg.dsn(db), log, "--table", "s", "--slot", "my_slot", check=True)
    pg.sql("insert into s select generate_series(2, 2000)", db)  # WAL the idle slot holds back
    st = json.loads(run_cli("stat", log, "--json", check=True).stdout)
    c = st["capture"]
    assert c["slot"] == "my_slot" and c["slot_exists"] is True and c["wal_held_bytes"] > 10_000
    table = run_cli("stat", log, check=True).stdout.decode()
    assert "my_slot" in table and "bytes of WAL" in table
    p = run_cli("capture", pg.dsn(db), log, "--slot", "my_slot", "--drop-slot", check=True)
    assert b"dropped" in p.stderr
    assert pg.sql("select count(*) from pg_replication_slots where slot_name = 'my_slot'")[0][0] == 0
    assert pg.sql("select count(*) from pg_publication where pubname = 'my_slot'", db)[0][0] == 0
    # the server unreachable: stat still answers, quickly, and says so
    meta = Path(log, "streamctl.json")
    obj = json.loads(meta.read_text())
    obj["capture"]["dsn"] = f"host={pg.sock} port=1 dbname={db}"
    meta.write_text(json.dumps(obj))
    st = run_cli("stat", log, "--json", check=True)
    assert json.loads(st.stdout)["capture"]["server"] == "unreachable" and st.stderr == b""


@pytest.mark.parametrize("partitions", [3])
def test_default_slot_and_partitions(pg: PgServer, db: str, tmp_path: Path, partitions: int) -> None:
    pg.sql("create table k (id text primary key, n int)", db)
    pg.sql("insert into k select 'u-' || g, g from generate_series(1, 30) g", db)
    log = str(tmp_path / "k")
    run_cli("capture", pg.dsn(db), log, "--table", "k", "--partitions", str(partitions), check=True)
    recs = log_records(log)
    assert len(recs) == 30 and {r["partition"] for r in recs} == set(range(partitions))
    from streamctl.storage.partitioner import partition_for_key

    assert all(r["partition"] == partition_for_key(r["key"], partitions) for r in recs)
    slot = json.loads(Path(log, "streamctl.json").read_text())["capture"]["slot"]
    assert slot.startswith("streamctl_k_")
    run_cli("capture", pg.dsn(db), log, "--drop-slot", check=True)
    assert pg.sql("select count(*) from pg_replication_slots where slot_name = %s", args=(slot,))[0][0] == 0


def test_a_replica_identity_without_the_key_is_refused(pg: PgServer, db: str, tmp_path: Path) -> None:
    """Updates and deletes are keyed by the old row's primary key: a replica identity that does not
    give it (USING INDEX on another index, NOTHING) is one line naming the table and the setting."""
    pg.sql("create table ri (id int primary key, code text not null)", db)
    pg.sql("create unique index ri_code on ri (code)", db)
    pg.sql("alter table ri replica identity using index ri_code", db)
    pg.sql("create table rn (id int primary key)", db)
    pg.sql("alter table rn replica identity nothing", db)
    pg.sql("create table rp (id int primary key) partition by range (id)", db)
    pg.sql("create table rp1 partition of rp for values from (0) to (10)", db)
    pg.sql("alter table rp1 replica identity nothing", db)
    pg.sql("create table rk (id int primary key, x int)", db)
    pg.sql("alter table rk replica identity using index rk_pkey", db)
    pg.sql("create table rf (id int primary key, x int)", db)
    pg.sql("alter table rf replica identity full", db)
    log = str(tmp_path / "out")
    _fails(run_cli("capture", pg.dsn(db), log, "--table", "ri"), 1, "public.ri", "REPLICA IDENTITY USING INDEX ri_code")
    _fails(run_cli("capture", pg.dsn(db), log, "--table", "rn"), 1, "public.rn", "REPLICA IDENTITY NOTHING")
    _fails(run_cli("capture", pg.dsn(db), log, "--table", "rp"), 1, "public.rp", "rp1", "REPLICA IDENTITY NOTHING")
    assert not os.path.exists(log)
    assert pg.sql("select count(*) from pg_replication_slots where database = %s", args=(db,))[0][0] == 0
    # the primary key's own index, or FULL, give the old key: deletes and key changes are tombstones
    for t in ("rk", "rf"):
        pg.sql(f"insert into {t} values (1, 1), (2, 2)", db)
        run_cli("capture", pg.dsn(db), str(tmp_path / t), "--table", t, check=True, timeout=60)
        pg.sql(f"delete from {t} where id = 1; update {t} set id = 3 where id = 2", db)
        run_cli("capture", pg.dsn(db), str(tmp_path / t), "--table", t, check=True, timeout=60)
        got = [(r["key"], r["headers"]["op"]) for r in log_records(str(tmp_path / t))[2:]]
        assert got == [("1", "d"), ("2", "d"), ("3", "u")], t


def test_a_corrupt_line_in_the_log_is_named(pg: PgServer, db: str, tmp_path: Path) -> None:
    """A line of the log that is not a record stops capture (which reads the log to resume) with one line
    naming the segment, the line and the reason, exit 1, as the log's other readers do; the log is left
    as it was."""
    pg.sql("create table cl (id int primary key, v text)", db)
    pg.sql("insert into cl values (1, 'a'), (2, 'b'), (3, 'c')", db)
    log = str(tmp_path / "cl")
    run_cli("capture", pg.dsn(db), log, "--table", "cl", check=True, timeout=60)
    pg.sql("insert into cl values (4, 'd')", db)
    run_cli("capture", pg.dsn(db), log, "--table", "cl", check=True, timeout=60)
    (seg,) = Path(log, "p0").glob("*.jsonl")
    lines = seg.read_bytes().splitlines(keepends=True)
    assert len(lines) == 4
    good = seg.read_bytes()
    # the newest line (what a rerun reads to know where it stopped) and a snapshot row (what a TRUNCATE reads)
    for at, change in ((3, "insert into cl values (5, 'e')"), (1, "truncate cl")):
        bad = lines[:]
        bad[at] = b'{"offset":%d,"partition":0,"ts":1,"key":"x","value":[1e400]}\n' % at
        seg.write_bytes(b"".join(bad))
        pg.sql(change, db)
        err = _fails(run_cli("capture", pg.dsn(db), log, "--table", "cl", timeout=60), 1,
                     f"{seg}:{at + 1}: byte {sum(map(len, lines[:at]))}", "corrupt record", "number is infinity",
                     "streamctl check")
        assert "invalid JSON: number" in err and seg.read_bytes() == b"".join(bad)
        seg.write_bytes(good)
        run_cli("capture", pg.dsn(db), log, "--table", "cl", check=True, timeout=60)  # mended: it goes on
        good = seg.read_bytes()
        lines = good.splitlines(keepends=True)
    assert [r["headers"]["op"] for r in log_records(log)] == ["r", "r", "r", "c", "c", "d", "d", "d", "d", "d"]
