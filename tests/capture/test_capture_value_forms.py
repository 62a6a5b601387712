"""Values the server prints in forms streamctl's readers would refuse or that two paths gave differently:
each written one way by the snapshot's fast lane, its converters' lane and the change stream."""

from __future__ import annotations

from pathlib import Path

from conftest import log_records, run_cli


def cap(pg, db: str, log: str, *args: str):
    return run_cli("capture", pg.dsn(db), log, *args, check=True, timeout=60)


def _values(log: str) -> dict[str, dict]:
    return {r["key"]: r["value"] for r in log_records(log)}


def test_json_the_readers_refuse_is_written_readable(pg, db, tmp_path: Path) -> None:
    """A number beyond the double range inside json/jsonb is a string of its text (as a numeric's is), a
    lone surrogate escape U+FFFD, a value nested deeper than the readers go its text as a string: the
    log stays readable (check, replay, the next capture run), the same through every path."""
    huge = "1" + "0" * 400
    deep = "[" * 1100 + "]" * 1100
    for t, extra in (("jf", ""), ("jc", ", p point")):  # jc: a point column, so no fast lane
        pg.sql(f"create table {t} (id int primary key, a jsonb, b json, t text{extra})", db)
        pg.sql(f"""insert into {t} (id, a, b, t) values
            (1, '{{"a": 1e400, "n": [-1e400, 2.50]}}', '[1e309, -1E+400, 1e-400, "1e309", 7]', 'x'),
            (2, '[1, 2]', '{{"s": "\\ud800", "pair": "\\ud83d\\ude00", "lit": "\\\\ud800", "k\\udc00": 1}}', '1e309'),
            (3, '{deep}', '{deep}', '{"9" * 400}'),
            (4, '{{"k": "v"}}', '{{"ok": 1.5e3}}', null)""", db)
    logs = {}
    for t in ("jf", "jc"):
        logs[t] = str(tmp_path / t)
        cap(pg, db, logs[t], "--table", t)  # the snapshot
        logs[t + "_stream"] = str(tmp_path / (t + "_stream"))
        cap(pg, db, logs[t + "_stream"], "--table", t, "--snapshot", "never", "--slot", t + "_stream")
        pg.sql(f"insert into {t} (id, a, b, t) select id + 10, a, b, t from {t}", db)
        pg.sql(f"update {t} set t = 'u' where id = 11", db)
    for log in logs.values():
        cap(pg, db, log, *(("--table", "jf") if "jf" in log else ("--table", "jc")),
            *(() if "stream" not in log else ("--snapshot", "never", "--slot", Path(log).name)))
        cap(pg, db, log, *(("--table", "jf") if "jf" in log else ("--table", "jc")),
            *(() if "stream" not in log else ("--snapshot", "never", "--slot", Path(log).name)))  # and again
        run_cli("check", log, check=True)
        assert run_cli("replay", log, "--compact", check=True).stdout
    snap = _values(logs["jf"])
    v1 = snap["1"]
    assert v1["a"] == {"a": huge, "n": ["-" + huge, 2.5]}
    assert v1["b"] == ["1e309", "-1E+400", 0.0, "1e309", 7]
    v2 = snap["2"]
    assert v2["b"] == {"s": "\ufffd", "pair": "\U0001f600", "lit": "\\ud800", "k\ufffd": 1} and v2["t"] == "1e309"
    v3 = snap["3"]
    assert v3["a"] == deep and v3["b"] == deep and v3["t"] == "9" * 400
    assert snap["4"]["b"] == {"ok": 1500.0}
    raw = b"".join(p.read_bytes() for p in Path(logs["jf"]).rglob("*.jsonl"))
    assert b'"a":{"a": "%s"' % huge.encode() in raw and b'"ok": 1.5e3' in raw  # the rest as printed
    # every path, the same values: the snapshot's two lanes and the stream's inserts and updates
    for log in logs.values():
        got = _values(log)
        for key in ("1", "2", "3", "4"):
            for k in (key, str(int(key) + 10)):
                if k in got:
                    want = {**snap[key], "t": "u"} if k == "11" else snap[key]
                    assert {c: x for c, x in got[k].items() if c not in ("id", "p")} == \
                        {c: x for c, x in want.items() if c != "id"}, (log, k)


def test_char_keys_keep_their_padding_in_both_paths(pg, db, tmp_path: Path) -> None:
    """A char(n) key is its value's text, padding kept (`"ab  "`), in the snapshot as in the stream, so a
    delete after the snapshot removes the row from `replay --compact`; composite keys too."""
    import json

    pg.sql("create table ck (k char(4) primary key, v int)", db)
    pg.sql("create table ck2 (a char(3), b int, v int, primary key (a, b))", db)
    pg.sql("insert into ck values ('ab', 1), ('x y', 2)", db)
    pg.sql("insert into ck2 values ('ab', 1, 1), ('cd', 2, 2)", db)
    logs = {t: str(tmp_path / t) for t in ("ck", "ck2")}
    for t, log in logs.items():
        cap(pg, db, log, "--table", t)
    pg.sql("delete from ck where k = 'ab'", db)
    pg.sql("delete from ck2 where a = 'ab'", db)
    pg.sql("insert into ck values ('q', 3)", db)
    for t, log in logs.items():
        cap(pg, db, log, "--table", t)
    assert [(r["key"], r["headers"]["op"]) for r in log_records(logs["ck"])] == [
        ("ab  ", "r"), ("x y ", "r"), ("ab  ", "d"), ("q   ", "c")]
    assert [(r["key"], r["headers"]["op"]) for r in log_records(logs["ck2"])] == [
        ('["ab ",1]', "r"), ('["cd ",2]', "r"), ('["ab ",1]', "d")]
    for t, log in logs.items():
        compact = [json.loads(x)["value"] for x in run_cli("replay", log, "--compact", check=True).stdout.splitlines()]
        assert sorted(compact, key=str) == sorted(pg.sql(f"select json_agg(t) from {t} t", db)[0][0], key=str)
    # an unchanged TOASTed column of a row the log never held is read back from the database by its key
    pg.sql("create table ct (k char(4) primary key, big text, n int)", db)
    big = "".join(f"{i:08x}" for i in range(40_000))
    pg.sql("insert into ct values ('ab', %s, 0)", db, args=(big,))
    other = str(tmp_path / "ct")
    cap(pg, db, other, "--table", "ct", "--snapshot", "never")
    pg.sql("update ct set n = 1", db)
    cap(pg, db, other, "--table", "ct", "--snapshot", "never")
    (only,) = log_records(other)
    assert only["key"] == "ab  " and only["value"] == {"k": "ab  ", "big": big, "n": 1}


def test_int_vectors_are_arrays_of_integers(pg, db, tmp_path: Path) -> None:
    """int2vector and oidvector print `1 2`: written as the JSON arrays [1,2], in the snapshot and the stream."""
    pg.sql("create table iv (id int primary key, a int2vector, o oidvector, aa int2vector[])", db)
    pg.sql("insert into iv values (1, '1 2', '3 4 5', array['1 2', '7']::int2vector[]), (2, '', '', null)", db)
    log = str(tmp_path / "iv")
    cap(pg, db, log, "--table", "iv")
    pg.sql("insert into iv select id + 10, a, o, aa from iv", db)
    cap(pg, db, log, "--table", "iv")
    run_cli("check", log, check=True)
    got = _values(log)
    assert got["1"] == {"id": 1, "a": [1, 2], "o": [3, 4, 5], "aa": [[1, 2], [7]]}
    assert got["2"] == {"id": 2, "a": [], "o": [], "aa": None}
    assert {**got["11"], "id": 1} == got["1"] and {**got["12"], "id": 2} == got["2"]


def test_arrays_of_a_domain_convert_as_its_base_type(pg, db, tmp_path: Path) -> None:
    """An array of a domain (of a domain) converts its elements as the base type: integers as numbers, jsonb
    as JSON, in the snapshot and the stream; a domain over an array too."""
    pg.sql("create domain posint as int check (value > 0)", db)
    pg.sql("create domain smallpos as posint check (value < 100)", db)
    pg.sql("create domain doc as jsonb", db)
    pg.sql("create domain ints as int[]", db)
    pg.sql("create table da (id int primary key, a posint[], s smallpos[], j doc[], i ints, one smallpos)", db)
    pg.sql("""insert into da values (1, '{1,2}', '{3,NULL}', array['{"k": [1]}', '2']::doc[], '{4,5}', 6)""", db)
    log = str(tmp_path / "da")
    cap(pg, db, log, "--table", "da")
    pg.sql("insert into da select id + 10, a, s, j, i, one from da", db)
    cap(pg, db, log, "--table", "da")
    got = _values(log)
    want = {"id": 1, "a": [1, 2], "s": [3, None], "j": [{"k": [1]}, 2], "i": [4, 5], "one": 6}
    assert got["1"] == want and got["11"] == {**want, "id": 11}


def test_bc_dates_and_times_number_years_as_iso_8601(pg, db, tmp_path: Path) -> None:
    """A BC timestamptz, timestamp or date is ISO 8601 with its year numbering (1 BC is 0000, 44 BC -0043),
    not PostgreSQL's `0044-03-15 ... BC`, the same in both snapshot lanes and the stream, arrays too."""
    for t, extra in (("bf", ""), ("bconv", ", p point")):
        pg.sql(f"create table {t} (id int primary key, ts timestamptz, t timestamp, d date, ta timestamp[], "
               f"da date[]{extra})", db)
        pg.sql(f"""insert into {t} (id, ts, t, d, ta, da) values
            (1, '0044-03-15 12:00:00.5+00 BC', '0044-03-15 12:00:00 BC', '0044-03-15 BC',
             array['0044-03-15 12:00:00.25 BC'::timestamp, '2026-01-01'], array['0001-01-01 BC'::date]),
            (2, '0001-12-31 23:59:59.999999+00 BC', '4713-11-24 00:00:00.000001 BC', '0001-01-01 BC', null, null),
            (3, '2026-11-21 10:00:00.123+00', '2026-11-21 10:00:00', '2026-11-21', null, null),
            (4, '-infinity', 'infinity', '-infinity', null, null)""", db)
    want = {
        "1": {"ts": "-0043-03-15T12:00:00.500000Z", "t": "-0043-03-15T12:00:00", "d": "-0043-03-15",
              "ta": ["-0043-03-15T12:00:00.25", "2026-01-01T00:00:00"], "da": ["0000-01-01"]},
        "2": {"ts": "0000-12-31T23:59:59.999999Z", "t": "-4712-11-24T00:00:00.000001", "d": "0000-01-01",
              "ta": None, "da": None},
        "3": {"ts": "2026-11-21T10:00:00.123000Z", "t": "2026-11-21T10:00:00", "d": "2026-11-21", "ta": None,
              "da": None},
        "4": {"ts": "-infinity", "t": "infinity", "d": "-infinity", "ta": None, "da": None},
    }
    for t in ("bf", "bconv"):
        log = str(tmp_path / t)
        cap(pg, db, log, "--table", t)
        pg.sql(f"insert into {t} (id, ts, t, d, ta, da) select id + 10, ts, t, d, ta, da from {t}", db)
        cap(pg, db, log, "--table", t)
        got = _values(log)
        for k, v in want.items():
            for key in (k, str(int(k) + 10)):
                assert {c: x for c, x in got[key].items() if c not in ("id", "p")} == v, (t, key)
