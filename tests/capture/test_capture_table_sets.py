"""A slot streams the tables its publication names, and a log holds one table: a run asking for another
table set (or another table into a log) is refused, so no table's changes are lost by a rerun."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import log_records, run_cli
from pgserver import PgServer


def _refused(proc: subprocess.CompletedProcess, *words: str) -> None:
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err


def test_a_smaller_table_set_is_refused_and_loses_nothing(pg: PgServer, db: str, tmp_path: Path) -> None:
    pg.sql("create table orders (id int primary key, n int)", db)
    pg.sql("create table customers (id int primary key, name text)", db)
    log = str(tmp_path / "cdc" / "{table}")
    both = ("--table", "orders", "--table", "customers")
    run_cli("capture", pg.dsn(db), log, *both, check=True, timeout=60)
    pg.sql("insert into customers values (1, 'Ada')", db)
    pg.sql("insert into orders values (1, 10)", db)
    _refused(run_cli("capture", pg.dsn(db), log, "--table", "orders", timeout=60),
             "public.customers, public.orders", "--table", "--slot")
    # a table added to the slot's set is refused as well (it would get no snapshot)
    pg.sql("create table extra (id int primary key)", db)
    _refused(run_cli("capture", pg.dsn(db), log, *both, "--table", "extra", timeout=60), "public.extra")
    assert not (tmp_path / "cdc" / "public.extra").exists()
    run_cli("capture", pg.dsn(db), log, *both, check=True, timeout=60)
    cust = log_records(str(tmp_path / "cdc" / "public.customers"))
    assert [(r["key"], r["value"]) for r in cust] == [("1", {"id": 1, "name": "Ada"})]
    assert [r["key"] for r in log_records(str(tmp_path / "cdc" / "public.orders"))] == ["1"]


def test_another_table_into_a_log_is_refused(pg: PgServer, db: str, tmp_path: Path) -> None:
    pg.sql("create table orders (id int primary key, n int)", db)
    pg.sql("create table customers (id int primary key, name text)", db)
    log = str(tmp_path / "ord")
    run_cli("capture", pg.dsn(db), log, "--table", "orders", check=True, timeout=60)
    pg.sql("insert into orders values (1, 10)", db)
    meta = Path(log, "streamctl.json").read_bytes()
    _refused(run_cli("capture", pg.dsn(db), log, "--table", "customers", timeout=60),
             log, "public.orders", "public.customers")
    assert Path(log, "streamctl.json").read_bytes() == meta
    assert json.loads(meta)["capture"]["table"] == "public.orders"
    run_cli("capture", pg.dsn(db), log, "--table", "orders", check=True, timeout=60)
    assert [(r["key"], r["headers"]["op"]) for r in log_records(log)] == [("1", "c")]
    # another LOG and another slot capture the other table, as the message says
    other = str(tmp_path / "cust")
    run_cli("capture", pg.dsn(db), other, "--table", "customers", check=True, timeout=60)
    assert os.path.isdir(other)


def test_an_ordinary_log_is_refused(pg: PgServer, db: str, tmp_path: Path) -> None:
    """A log capture did not make is never written to (a resync would tombstone its keys)."""
    pg.sql("create table orders (id int primary key, n int)", db)
    pg.sql("insert into orders values (1, 10)", db)
    log = str(tmp_path / "plain")
    run_cli("produce", log, "--key-field", "id", input=b'{"id": 7}\n{"id": 8}\n', check=True)
    before = log_records(log)
    files = sorted((p, p.read_bytes()) for p in Path(log).rglob("*") if p.is_file())
    _refused(run_cli("capture", pg.dsn(db), log, "--table", "orders", timeout=60), log, "not a capture log")
    assert log_records(log) == before and len(before) == 2
    assert sorted((p, p.read_bytes()) for p in Path(log).rglob("*") if p.is_file()) == files
    assert pg.sql("select count(*) from pg_replication_slots where database = %s", args=(db,))[0][0] == 0
    # an empty log (as capture leaves one killed between making it and marking it) is taken
    empty = str(tmp_path / "empty")
    run_cli("produce", empty, input=b"", check=True)
    run_cli("capture", pg.dsn(db), empty, "--table", "orders", check=True, timeout=60)
    assert [(r["key"], r["headers"]["op"]) for r in log_records(empty)] == [("1", "r")]


def test_quoted_names_may_hold_dots_and_quotes(pg: PgServer, db: str, tmp_path: Path) -> None:
    """`--table '"dot.ted"'` is the table dot.ted of public, `'"my.s"."a""b.c"'` the table a"b.c of the
    schema my.s: a dot inside double quotes is part of the name, as in SQL; snapshot and changes both."""
    pg.sql('create table "dot.ted" (id int primary key, v text)', db)
    pg.sql('create schema "my.s"', db)
    pg.sql('create table "my.s"."a""b.c" (id int primary key, p point)', db)  # no fast lane: COPY
    pg.sql("""insert into "dot.ted" values (1, 'x')""", db)
    pg.sql('insert into "my.s"."a""b.c" values (1, null)', db)
    log = str(tmp_path / "cdc" / "{table}")
    args = ("--table", '"dot.ted"', "--table", '"my.s"."a""b.c"')
    run_cli("capture", pg.dsn(db), log, *args, check=True, timeout=60)
    pg.sql("""insert into "dot.ted" values (2, 'y')""", db)
    pg.sql('insert into "my.s"."a""b.c" values (2, null)', db)
    run_cli("capture", pg.dsn(db), log, *args, check=True, timeout=60)
    assert [(r["key"], r["headers"]["op"]) for r in log_records(str(tmp_path / "cdc" / "public.dot.ted"))] == [
        ("1", "r"), ("2", "c")]
    assert [(r["key"], r["headers"]["op"]) for r in log_records(str(tmp_path / "cdc" / 'my.s.a"b.c'))] == [
        ("1", "r"), ("2", "c")]
    for bad in ('"dot.ted', "a.b.c", '"dot"x'):
        _refused(run_cli("capture", pg.dsn(db), str(tmp_path / "other"), "--table", bad), "--table")
