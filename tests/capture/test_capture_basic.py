"""capture against a real PostgreSQL: snapshot, then changes, each record once and in commit order."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import log_records, run_cli


def cap(pg, db: str, log: str, *args: str, check: bool = True):
    return run_cli("capture", pg.dsn(db), log, *args, check=check, timeout=60)


def test_snapshot_then_stream(pg, db, tmp_path: Path) -> None:
    pg.sql("create table orders (id int primary key, item text, qty int)", db)
    pg.sql("insert into orders select g, 'item-' || g, g * 10 from generate_series(1, 5) g", db)
    log = str(tmp_path / "orders")
    p = cap(pg, db, log, "--table", "orders")
    recs = log_records(log)
    assert [r["key"] for r in recs] == ["1", "2", "3", "4", "5"]
    assert recs[0]["value"] == {"id": 1, "item": "item-1", "qty": 10}
    assert {r["headers"]["op"] for r in recs} == {"r"}
    assert "5 snapshot rows" in p.stderr.decode()
    pg.sql("insert into orders values (6, 'six', 60)", db)
    pg.sql("update orders set qty = 11 where id = 1", db)
    pg.sql("delete from orders where id = 2", db)
    cap(pg, db, log, "--table", "orders")
    recs = log_records(log)[5:]
    assert [(r["key"], r["headers"]["op"], r["value"]) for r in recs] == [
        ("6", "c", {"id": 6, "item": "six", "qty": 60}),
        ("1", "u", {"id": 1, "item": "item-1", "qty": 11}),
        ("2", "d", None),
    ]
    lsns = [r["headers"]["lsn"] for r in recs]
    assert all("/" in x for x in lsns) and len(set(lsns)) == 3
    assert all(r["headers"]["txid"].isdigit() for r in recs)
    # a rerun with nothing new appends nothing
    cap(pg, db, log, "--table", "orders")
    assert len(log_records(log)) == 8
    compact = run_cli("replay", log, "--compact", check=True).stdout.decode().splitlines()
    got = sorted((json.loads(x)["value"] for x in compact), key=lambda v: v["id"])
    (want,) = pg.sql("select json_agg(t order by id) from orders t", db)[0]
    assert got == want
