"""capture writes `numeric` as its exact digits (SPEC), and the readers print them so: every captured
record has headers, and a reader that re-encoded such a record's value printed `1.10` as `1.1`."""

from __future__ import annotations

from pathlib import Path

from conftest import run_cli


def test_numeric_digits_reach_consume_value_and_a_produce_pipe(pg, db, tmp_path: Path) -> None:
    pg.sql("create table prices (id int primary key, p numeric, ps numeric[])", db)
    pg.sql("insert into prices values (1, 12345678901234567890.123456789, '{1.10,2.000}')", db)
    log, copy = str(tmp_path / "prices"), str(tmp_path / "copy")
    run_cli("capture", pg.dsn(db), log, "--table", "prices", check=True, timeout=60)
    pg.sql("insert into prices values (2, 0.10, '{}')", db)
    run_cli("capture", pg.dsn(db), log, "--table", "prices", check=True, timeout=60)
    want = (b'{"id":1,"p":12345678901234567890.123456789,"ps":[1.10,2.000]}\n'
            b'{"id":2,"p":0.10,"ps":[]}\n')
    assert run_cli("consume", log, "--value", check=True).stdout == want
    run_cli("produce", copy, "--envelope", input=run_cli("consume", log, check=True).stdout, check=True)
    assert run_cli("consume", copy, "--value", check=True).stdout == want
