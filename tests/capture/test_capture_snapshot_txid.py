"""Snapshot rows (op r) carry the txid of the transaction that read the snapshot, never the txid of a
change: a reader that groups records by txid (a transaction's changes, SPEC: headers op, lsn, txid)
must not find snapshot rows inside the first transaction after the snapshot."""

from __future__ import annotations

from pathlib import Path

from conftest import log_records, run_cli


def test_snapshot_txid_is_not_a_change_txid(pg, db, tmp_path: Path) -> None:
    pg.sql("create table orders (id int primary key, qty int)", db)
    pg.sql("insert into orders select g, g from generate_series(1, 3) g", db)
    log = str(tmp_path / "orders")
    run_cli("capture", pg.dsn(db), log, "--table", "orders", check=True, timeout=60)
    # the next writing transaction, with nothing else running on the server
    conn = pg.connect(db, autocommit=False)
    with conn.cursor() as cur:
        cur.execute("insert into orders values (4, 4)")
        cur.execute("select txid_current()")
        change_txid = str(cur.fetchone()[0])
    conn.commit()
    conn.close()
    run_cli("capture", pg.dsn(db), log, "--table", "orders", check=True, timeout=60)
    recs = log_records(log)
    snap = {r["headers"]["txid"] for r in recs if r["headers"]["op"] == "r"}
    assert [r["headers"]["txid"] for r in recs if r["headers"]["op"] == "c"] == [change_txid]
    assert len(snap) == 1 and snap.pop().isdigit()
    assert change_txid not in {r["headers"]["txid"] for r in recs if r["headers"]["op"] == "r"}


def test_resync_tombstones_carry_the_snapshot_txid(pg, db, tmp_path: Path) -> None:
    """A key deleted while no slot was kept gets a tombstone at the resync with every header a record
    has: op d, the snapshot's lsn and the txid of the transaction that read the snapshot."""
    pg.sql("create table orders (id int primary key, qty int)", db)
    pg.sql("insert into orders select g, g from generate_series(1, 3) g", db)
    log = str(tmp_path / "orders")
    run_cli("capture", pg.dsn(db), log, "--table", "orders", check=True, timeout=60)
    run_cli("capture", pg.dsn(db), log, "--drop-slot", check=True, timeout=60)
    pg.sql("delete from orders where id = 2", db)
    pg.sql("update orders set qty = 30 where id = 3", db)
    run_cli("capture", pg.dsn(db), log, "--table", "orders", check=True, timeout=60)
    recs = log_records(log)[3:]
    assert sorted((r["key"], r["headers"]["op"]) for r in recs) == [("2", "d"), ("3", "r")]
    (tomb,) = [r["headers"] for r in recs if r["headers"]["op"] == "d"]
    (row,) = [r["headers"] for r in recs if r["headers"]["op"] == "r"]
    assert set(tomb) == {"op", "lsn", "txid"} and tomb["txid"].isdigit()
    assert (tomb["lsn"], tomb["txid"]) == (row["lsn"], row["txid"])
