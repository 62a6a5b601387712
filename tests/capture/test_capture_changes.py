"""What capture writes for each kind of change and each type (against a real PostgreSQL)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from conftest import log_records, run_cli


def cap(pg, db: str, log: str, *args: str):
    return run_cli("capture", pg.dsn(db), log, *args, check=True, timeout=60)


def test_types(pg, db, tmp_path: Path) -> None:
    pg.sql("""create table t (
        id bigint primary key, n numeric, f float8, r real, b boolean, s text, v varchar(10),
        j json, jb jsonb, by bytea, ts timestamptz, tsn timestamp, d date, tm time, iv interval,
        ia int[], ta text[], na numeric[], u uuid, nn int)""", db)
    pg.sql("""insert into t values (1, 12345678901234567890.123456789012, 0.1, 1.5, true, 'héllo' || chr(9) || 'x\\y',
        'v', '{"a": [1, 2.50]}', '{"b": {"c": null}}', '\\x00ff10', '2026-11-21 11:00:00.123+01', '2026-11-21 10:00:00',
        '2026-11-21', '10:00:01.5', '1 day 2 hours', '{1,2,NULL}', '{"a b","c,d",e}', '{1.10,NaN}',
        'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', null)""", db)
    pg.sql("""insert into t (id, n, f, r) values (2, 'NaN', 'Infinity', '-Infinity')""", db)
    log = str(tmp_path / "t")
    cap(pg, db, log, "--table", "t", "--snapshot", "never")  # the stream's path first
    cap(pg, db, str(tmp_path / "snap"), "--table", "public.t")  # then the snapshot's path: the same values
    pg.sql("""insert into t select id + 10, n, f, r, b, s, v, j, jb, by, ts, tsn, d, tm, iv, ia, ta, na, u, nn
              from t""", db)
    cap(pg, db, log, "--table", "t", "--snapshot", "never")
    stream = log_records(log)
    snap = log_records(str(tmp_path / "snap"))
    assert len(stream) == 2 and len(snap) == 2
    for a, b in zip(snap, stream, strict=True):
        assert {**a["value"], "id": 0} == {**b["value"], "id": 0}
    v = snap[0]["value"]
    raw = [line for line in open(next((tmp_path / "snap" / "p0").glob("*.jsonl")), "rb")][0]
    assert b'"n":12345678901234567890.123456789012' in raw  # exact digits, no float on the way
    assert v["f"] == 0.1 and v["r"] == 1.5 and v["b"] is True
    assert v["s"] == "héllo\tx\\y" and v["v"] == "v"
    assert v["j"] == {"a": [1, 2.5]} and v["jb"] == {"b": {"c": None}}
    assert base64.b64decode(v["by"]) == b"\x00\xff\x10"
    assert v["ts"] == "2026-11-21T10:00:00.123000Z"
    assert v["tsn"] == "2026-11-21T10:00:00" and v["d"] == "2026-11-21" and v["tm"] == "10:00:01.5"
    assert v["iv"] == "P1DT2H"
    assert v["ia"] == [1, 2, None] and v["ta"] == ["a b", "c,d", "e"] and v["na"] == [1.1, "NaN"]
    assert v["u"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11" and v["nn"] is None
    w = snap[1]["value"]
    assert (w["n"], w["f"], w["r"]) == ("NaN", "Infinity", "-Infinity")
    assert snap[0]["key"] == "1"


def test_pk_update_delete_truncate_composite(pg, db, tmp_path: Path) -> None:
    pg.sql("create table c (a int, b text, x int, primary key (a, b))", db)
    pg.sql("insert into c values (1, 'x', 10), (2, 'y', 20)", db)
    log = str(tmp_path / "cdc" / "{table}")
    cap(pg, db, log, "--table", "c")
    path = str(tmp_path / "cdc" / "public.c")
    assert [r["key"] for r in log_records(path)] == ['[1,"x"]', '[2,"y"]']
    pg.sql("update c set a = 3 where a = 1", db)  # a key change: tombstone, then the new row
    pg.sql("begin; insert into c values (4, 'z', 40); truncate c; insert into c values (5, 'w', 50); commit", db)
    cap(pg, db, log, "--table", "c")
    recs = log_records(path)[2:]
    got = [(r["key"], r["headers"]["op"], r["value"]) for r in recs]
    assert got[:2] == [('[1,"x"]', "d", None), ('[3,"x"]', "u", {"a": 3, "b": "x", "x": 10})]
    assert got[2] == ('[4,"z"]', "c", {"a": 4, "b": "z", "x": 40})
    assert sorted(got[3:6]) == [('[2,"y"]', "d", None), ('[3,"x"]', "d", None), ('[4,"z"]', "d", None)]
    assert got[6:] == [('[5,"w"]', "c", {"a": 5, "b": "w", "x": 50})]
    assert len({r["headers"]["lsn"] for r in recs[2:]}) == 1  # one transaction, one commit LSN, contiguous
    compact = [json.loads(x)["value"] for x in run_cli("replay", path, "--compact", check=True).stdout.splitlines()]
    assert compact == pg.sql("select json_agg(t) from c t", db)[0][0]


def test_toast_unchanged_and_schema_change(pg, db, tmp_path: Path) -> None:
    pg.sql("create table d (id int primary key, big text, n int)", db)
    big = "".join(f"{i:08x}" for i in range(40_000))  # 320 KB, not compressible: stored out of line
    pg.sql("insert into d values (1, %s, 0), (2, %s, 0)", db, args=(big, big[::-1]))
    log = str(tmp_path / "d")
    cap(pg, db, log, "--table", "d")
    pg.sql("update d set n = 1 where id = 1", db)
    cap(pg, db, log, "--table", "d")  # a new run: the unchanged value comes from the log
    pg.sql("update d set n = 2 where id = 1; update d set n = 3 where id = 2", db)
    pg.sql("alter table d add column extra text default 'e'", db)
    pg.sql("update d set n = 4 where id = 1", db)
    pg.sql("alter table d drop column n", db)
    pg.sql("update d set extra = 'f' where id = 2", db)
    cap(pg, db, log, "--table", "d")
    recs = [r for r in log_records(log) if r["headers"]["op"] == "u"]
    assert [r["value"].get("n") for r in recs] == [1, 2, 3, 4, None]
    assert [r["value"]["big"] == (big if r["key"] == "1" else big[::-1]) for r in recs] == [True] * 5
    assert "extra" not in recs[1]["value"] and recs[3]["value"]["extra"] == "e"
    assert "n" not in recs[4]["value"] and recs[4]["value"]["extra"] == "f"
    # a key change keeps the unchanged value too (the old key's row, read before its tombstone)
    pg.sql("update d set id = 10 where id = 1", db)
    cap(pg, db, log, "--table", "d")
    last = log_records(log)[-2:]
    assert [(r["key"], r["value"] is None) for r in last] == [("1", True), ("10", False)]
    assert last[1]["value"]["big"] == big
    # a log that never saw the row (--snapshot never): the value is read back from the database
    other = str(tmp_path / "d2")
    cap(pg, db, other, "--table", "d", "--snapshot", "never")
    pg.sql("update d set extra = 'g' where id = 2", db)
    cap(pg, db, other, "--table", "d", "--snapshot", "never")
    (only,) = log_records(other)
    assert only["value"] == {"id": 2, "big": big[::-1], "extra": "g"}


def test_partitioned_table(pg, db, tmp_path: Path) -> None:
    """A partitioned table's rows and changes arrive under the table's own name and primary key (the
    publication publishes through the partition root), a row moved to another partition included."""
    pg.sql("create table pm (id int primary key, v text) partition by range (id)", db)
    pg.sql("create table pm_low partition of pm for values from (0) to (100)", db)
    pg.sql("create table pm_high partition of pm for values from (100) to (200)", db)
    pg.sql("insert into pm values (1, 'snap'), (2, 'two')", db)
    log = str(tmp_path / "pm")
    cap(pg, db, log, "--table", "pm")
    pg.sql("insert into pm values (150, 'new')", db)
    pg.sql("update pm set v = 'changed' where id = 1", db)
    pg.sql("update pm set id = 120 where id = 2", db)  # to the other partition: a delete, then an insert
    cap(pg, db, log, "--table", "pm")
    got = [(r["key"], r["headers"]["op"], r["value"]) for r in log_records(log)]
    assert got[:2] == [("1", "r", {"id": 1, "v": "snap"}), ("2", "r", {"id": 2, "v": "two"})]
    assert got[2:] == [("150", "c", {"id": 150, "v": "new"}), ("1", "u", {"id": 1, "v": "changed"}),
                       ("2", "d", None), ("120", "c", {"id": 120, "v": "two"})]
    compact = [json.loads(x)["value"] for x in run_cli("replay", log, "--compact", check=True).stdout.splitlines()]
    assert sorted(compact, key=lambda v: v["id"]) == pg.sql("select json_agg(t order by id) from pm t", db)[0][0]


def test_generated_columns_are_left_out(pg, db, tmp_path: Path) -> None:
    """Logical replication never sends a generated column, so the snapshot leaves it out too: a row
    has one column set whichever way it came, and the compacted log is the table's other columns."""
    pg.sql("create table g (id int primary key, qty int, total int generated always as (qty * 10) stored, "
           "note text)", db)
    pg.sql("insert into g (id, qty, note) values (1, 2, 'snap')", db)
    log = str(tmp_path / "g")
    cap(pg, db, log, "--table", "g")
    pg.sql("insert into g (id, qty, note) values (2, 3, 'new')", db)
    pg.sql("update g set qty = 4 where id = 1", db)
    cap(pg, db, log, "--table", "g")
    got = [(r["key"], r["headers"]["op"], r["value"]) for r in log_records(log)]
    assert got == [("1", "r", {"id": 1, "qty": 2, "note": "snap"}), ("2", "c", {"id": 2, "qty": 3, "note": "new"}),
                   ("1", "u", {"id": 1, "qty": 4, "note": "snap"})]
    # a table without a fast-lane form for every column takes the converters: the same column set
    pg.sql("create table g2 (id int primary key, p point, twice int generated always as (id * 2) stored)", db)
    pg.sql("insert into g2 (id, p) values (1, '(1,2)')", db)
    cap(pg, db, str(tmp_path / "g2"), "--table", "g2")
    assert [r["value"] for r in log_records(str(tmp_path / "g2"))] == [{"id": 1, "p": "(1,2)"}]
