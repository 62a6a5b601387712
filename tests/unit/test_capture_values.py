"""capture's pure parts: the value converters, array literals, COPY escapes, DSN redaction, pgoutput messages."""

from __future__ import annotations

import struct

import orjson
import pytest

from streamctl.capture import dsn, pgoutput, values


def j(v: object) -> bytes:
    return orjson.dumps(v)


def test_scalars() -> None:
    assert j(values.converter(1700)("12345678901234567890.000000000001")) == b"12345678901234567890.000000000001"
    assert values.converter(1700)("NaN") == "NaN"
    assert values.converter(701)("-Infinity") == "-Infinity"
    assert j(values.converter(701)("1e+100")) == b"1e+100"
    assert values.converter(16)("t") is True and values.converter(16)("f") is False
    assert j(values.converter(3802)('{"a": [1, 2.50]}')) == b'{"a": [1, 2.50]}'
    assert j(values.converter(114)('{"a":\n 1}')) == b'{"a":  1}'  # a record stays one line
    assert values.converter(17)("\\x00ff") == "AP8="
    assert values.converter(1184)("2026-11-21 10:00:00+00") == "2026-11-21T10:00:00.000000Z"
    assert values.converter(1184)("2026-11-21 10:00:00.12+00") == "2026-11-21T10:00:00.120000Z"
    assert values.converter(1184)("infinity") == "infinity"
    assert values.converter(1114)("2026-11-21 10:00:00.5") == "2026-11-21T10:00:00.5"
    assert values.converter(2950)("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11") == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"


@pytest.mark.parametrize(("text", "elem", "want"), [
    ("{1,2,NULL}", 23, [1, 2, None]),
    ("{}", 23, []),
    ('{"a b","c,d",e,"q\\"x","back\\\\slash"}', 25, ["a b", "c,d", "e", 'q"x', "back\\slash"]),
    ("{{1,2},{3,4}}", 23, [[1, 2], [3, 4]]),
    ("[0:1]={7,8}", 23, [7, 8]),
    ('{"NULL",NULL}', 25, ["NULL", None]),
    ('{"2026-11-21 10:00:00+00"}', 1184, ["2026-11-21T10:00:00.000000Z"]),
])
def test_arrays(text: str, elem: int, want: list) -> None:
    assert orjson.loads(j(values.converter(1007, elem)(text))) == want


def test_copy_escapes_and_keys() -> None:
    assert values.unescape_copy("a\\tb\\\\c\\nd") == "a\tb\\c\nd"
    assert values.unescape_copy("plain") == "plain"
    assert values.key_text([orjson.Fragment("42")]) == "42"
    assert values.key_text(["u-7"]) == "u-7"
    assert values.key_text([orjson.Fragment("42"), "x"]) == '[42,"x"]'


def test_redact() -> None:
    for text in ("postgresql://app:s3cret@db:5432/shop", "host=db password=s3cret user=app",
                 "host=db password='s3 cret' user=app", "postgresql://app@db/shop?password=s3cret&x=1"):
        assert "s3cret" not in dsn.redact(text) and "s3 cret" not in dsn.redact(text)
    assert dsn.redact("postgresql://app@db/shop") == "postgresql://app@db/shop"
    # libpq's backslash escapes in an unquoted value: the whole value is the password
    for text in ("host=db password=TOP\\ SECRET user=app", "password=TOP\\ SECRET\\\\ user=app", "password=TOP\\"):
        red = dsn.redact(text)
        assert "TOP" not in red and "SECRET" not in red, red
    assert dsn.redact("password=TOP\\ SECRET\\\\ user=app") == "password=*** user=app"
    assert dsn.redact("host=db password=TOP\\ SECRET user=app") == "host=db password=*** user=app"


def _tuple(*cols: str | None) -> bytes:
    out = struct.pack("!h", len(cols))
    for c in cols:
        out += b"n" if c is None else b"t" + struct.pack("!i", len(c.encode())) + c.encode()
    return out


def test_pgoutput_messages() -> None:
    assert pgoutput.begin(b"B" + struct.pack("!QQI", 0x1_0000_0010, 0, 77)) == (0x1_0000_0010, 77)
    assert pgoutput.commit(b"C\0" + struct.pack("!QQQ", 5, 9, 0)) == (5, 9)
    rel = (b"R" + struct.pack("!I", 16384) + b"public\0orders\0d" + struct.pack("!h", 2)
           + b"\x01id\0" + struct.pack("!Ii", 23, -1) + b"\x00note\0" + struct.pack("!Ii", 25, -1))
    r = pgoutput.decode(rel)
    assert isinstance(r, pgoutput.Relation) and (r.schema, r.name) == ("public", "orders")
    assert [(c.name, c.type_oid, c.key) for c in r.columns] == [("id", 23, True), ("note", 25, False)]
    ins = pgoutput.decode(b"I" + struct.pack("!I", 16384) + b"N" + _tuple("1", None))
    assert ins == pgoutput.Change("c", 16384, ["1", None], None)
    upd = pgoutput.decode(b"U" + struct.pack("!I", 16384) + b"K" + _tuple("1", None) + b"N" + _tuple("2", "x"))
    assert upd == pgoutput.Change("u", 16384, ["2", "x"], ["1", None])
    toast = pgoutput.decode(b"U" + struct.pack("!I", 1) + b"N" + struct.pack("!h", 1) + b"u")
    assert isinstance(toast, pgoutput.Change) and toast.new == [pgoutput.UNCHANGED]
    assert pgoutput.decode(b"T" + struct.pack("!iB", 2, 0) + struct.pack("!II", 1, 2)) == pgoutput.Truncate([1, 2])
    assert pgoutput.lsn_text(0x1_0000_0010) == "1/10" and pgoutput.parse_lsn("1/10") == 0x1_0000_0010


def test_numeric_beyond_the_double_range_is_a_string() -> None:
    """A numeric whose JSON number streamctl's readers (orjson) would refuse is written as its digits in
    a string; every numeric they read back finitely stays an exact number, up to the boundary."""
    conv = values.converter(1700)
    huge = "1" + "0" * 400 + ".5"
    assert conv(huge) == huge and conv("-" + huge) == "-" + huge
    limit = values.DOUBLE_OVERFLOW
    assert conv(str(limit)) == str(limit) and conv(f"-{limit}.000") == f"-{limit}.000"
    for text in (str(limit - 1), f"{limit - 1}.999999", "0." + "0" * 400 + "1", "9" * 308, "1" + "0" * 30):
        assert j(conv(text)) == text.encode()
        assert orjson.loads(j([conv(text)])) == [orjson.loads(text)]
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(str(limit))
    assert values.is_json_number("12.5") and not values.is_json_number("NaN")
    assert not values.is_json_number(huge)
    assert j(values.parse_array("{1.5," + huge + "}", conv)) == b'[1.5,"%s"]' % huge.encode()


@pytest.mark.parametrize(("text", "want"), [
    ('{"a": 1.5e3, "b": "x"}', '{"a": 1.5e3, "b": "x"}'),  # readable: the server's text, as is
    ("[1e309, -1E+400, 1e-400, \"1e309\"]", '["1e309", "-1E+400", 1e-400, "1e309"]'),
    ("1" + "0" * 400, '"1' + "0" * 400 + '"'),
    ('["\\ud800", "\\ud83d\\ude00", "\\\\ud800", "\\udc00\\ud800x"]',
     '["\\ufffd", "\\ud83d\\ude00", "\\\\ud800", "\\ufffd\\ufffdx"]'),
    ("[" * 1100 + "]" * 1100, '"' + "[" * 1100 + "]" * 1100 + '"'),
])
def test_json_the_readers_refuse(text: str, want: str) -> None:
    assert j(values.converter(114)(text)) == want.encode()
    orjson.loads(b'{"value":{"j":%s}}' % j(values.converter(114)(text)))
    if "e" not in text and "\\u" not in text:  # a text jsonb can print
        assert j(values.converter(3802)(text)) == want.encode()


def test_fast_lane_rows_mended_as_the_converters() -> None:
    mend = values.row_mender({"a": 3802, "b": 114})
    assert mend is not None and values.row_mender({}) is None
    row = ('{"id":1,"a":{"x": [1' + "0" * 400 + ', 2]},"b":["\\ud800", 1e309],"t":"1e309 \\\\ud800"}').encode()
    assert mend(row) == ('{"id":1,"a":{"x": ["1' + "0" * 400 + '", 2]},"b":["\\ufffd", "1e309"],'
                         '"t":"1e309 \\\\ud800"}').encode()
    ok = b'{"id":2,"a":{"x": 1},"b":[1.5e3]}'
    assert mend(ok) is ok


def test_int_vectors() -> None:
    assert j(values.converter(22)("1 2")) == b"[1,2]" and j(values.converter(30)("")) == b"[]"
    assert j(values.converter(1006, 22)('{"1 2",7}')) == b"[[1,2],[7]]"


def test_bc_years() -> None:
    assert values.converter(1184)("0044-03-15 12:00:00.5+00 BC") == "-0043-03-15T12:00:00.500000Z"
    assert values.converter(1184)("0001-01-01 00:00:00+00 BC") == "0000-01-01T00:00:00.000000Z"
    assert values.converter(1114)("0044-03-15 12:00:00 BC") == "-0043-03-15T12:00:00"
    assert values.converter(1082)("4713-01-01 BC") == "-4712-01-01" and values.converter(1082)("2026-11-21") == "2026-11-21"
