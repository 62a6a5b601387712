"""capture writes `numeric` as its exact digits (SPEC), and the readers print them so: every captured
record has headers, and a reader that re-encoded such a record's value printed `1.10` as `1.1`."""

from __future__ import annotations

from pathlib import Path

from conftest import log_records, run_cli


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


def test_numeric_beyond_the_double_range_is_a_string_the_readers_accept(pg, db, tmp_path: Path) -> None:
    """A numeric no double holds (1e400) is written as its exact digits in a JSON string, as NaN is, by
    the snapshot's fast lane, its converters' lane and the stream alike: `check` finds the log sound and
    `replay --compact` reads it; numbers a double holds stay exact JSON numbers."""
    import json

    huge = "1" + "0" * 400 + ".5"
    pg.sql("create table big (id int primary key, n numeric)", db)
    pg.sql("create table big_arr (id int primary key, n numeric, na numeric[])", db)  # no fast lane
    pg.sql("create table big_key (a numeric, b text, primary key (a, b))", db)
    for t in ("big", "big_arr"):
        pg.sql(f"insert into {t} (id, n) values (1, 1e400 + 0.5), (2, -(1e400 + 0.5)), (3, 12.50)", db)
    pg.sql("update big_arr set na = array[n, 1.5]", db)
    pg.sql("insert into big_key values (1e400 + 0.5, 'x'), (2.0, 'y')", db)
    logs = {t: str(tmp_path / t) for t in ("big", "big_arr", "big_key")}
    for t, log in logs.items():
        run_cli("capture", pg.dsn(db), log, "--table", t, check=True, timeout=60)
    for t in ("big", "big_arr"):
        pg.sql(f"insert into {t} (id, n) values (4, 1e400 + 0.5), (5, 0.10)", db)
        pg.sql(f"update {t} set na = array[n] where id = 4" if t == "big_arr" else "select 1", db)
    pg.sql("update big_key set b = 'z' where b = 'x'", db)  # the old key's tombstone, then the new row
    for t, log in logs.items():
        run_cli("capture", pg.dsn(db), log, "--table", t, check=True, timeout=60)
        run_cli("check", log, check=True)
        compact = [json.loads(x) for x in run_cli("replay", log, "--compact", check=True).stdout.splitlines()]
        assert compact
    raw = b"".join(p.read_bytes() for log in logs.values() for p in Path(log).rglob("*.jsonl"))
    assert b'"n":"%s"' % huge.encode() in raw and b'"n":"-%s"' % huge.encode() in raw
    assert b'"n":12.50' in raw and b'"n":0.10' in raw
    assert b'"na":["%s",1.5]' % huge.encode() in raw
    values = {r["key"]: r["value"] for r in log_records(logs["big"])}
    assert values["1"]["n"] == huge and values["4"]["n"] == huge and values["2"]["n"] == "-" + huge
    keys = [(r["key"], r["headers"]["op"]) for r in log_records(logs["big_key"])]
    assert keys[-2:] == [(f'["{huge}","x"]', "d"), (f'["{huge}","z"]', "u")]
    assert sorted(keys[:2]) == sorted([(f'["{huge}","x"]', "r"), ('[2.0,"y"]', "r")])
