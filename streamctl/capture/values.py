"""PostgreSQL values -> JSON: the one definition of capture's type mapping.

Both the snapshot (COPY text format) and the change stream (pgoutput's text tuples) give
each column in its type's text output form, read on connections whose settings fix that
form (TimeZone=UTC, DateStyle=ISO, IntervalStyle=iso_8601, bytea_output=hex,
extra_float_digits=1: the shortest exact float). Each column's converter turns that text
into the JSON value; numbers and JSON are embedded as the server printed them
(orjson.Fragment), so `numeric` keeps every digit and no float rounding happens.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Callable
from typing import Any

import orjson

# server settings every capture connection uses (the text forms the converters expect)
SESSION_OPTIONS = ("-c TimeZone=UTC -c DateStyle=ISO -c IntervalStyle=iso_8601 -c bytea_output=hex "
                   "-c extra_float_digits=1 -c client_encoding=UTF8")

Converter = Callable[[str], Any]

INT_OIDS = {20, 21, 23, 26, 28, 29}  # int8, int2, int4, oid, xid, cid
FLOAT_OIDS = {700, 701}
NUMERIC = 1700
BOOL = 16
JSON = 114
JSONB = 3802
BYTEA = 17
TIMESTAMPTZ = 1184
TIMESTAMP = 1114
DATE = 1082
BPCHAR = 1042  # char(n)
INT_VECTORS = {22, 30}  # int2vector, oidvector: arrays in the catalog, `1 2` in text

_SPECIAL = {"NaN", "Infinity", "-Infinity"}


def to_int(text: str) -> Any:
    return orjson.Fragment(text)


# the least magnitude a JSON number reads as infinity (round to nearest: DBL_MAX plus half its last
# unit); streamctl's readers (orjson) refuse such a number, so capture never writes one
DOUBLE_OVERFLOW = 2**1024 - 2**970
_FINITE_CHARS = 308  # a number text this short is below 1e308 in magnitude: always finite


def beyond_double(text: str) -> bool:
    """Whether the number text (a numeric's digits) reads back as no finite double: |value| >= DOUBLE_OVERFLOW."""
    if len(text) <= _FINITE_CHARS:
        return False
    try:
        return not math.isfinite(orjson.loads(text))
    except orjson.JSONDecodeError:
        return True


def is_json_number(text: str) -> bool:
    """Whether a number column's text is written as a JSON number (to_float), not as a string."""
    return text not in _SPECIAL and not beyond_double(text)


def to_float(text: str) -> Any:
    # NaN and the infinities have no JSON number: the strings PostgreSQL prints; a numeric beyond
    # the double range (1e400) its exact digits as a string, as a JSON number the readers refuse it
    if text in _SPECIAL or (len(text) > _FINITE_CHARS and beyond_double(text)):
        return text
    return orjson.Fragment(text)


def to_int_vector(text: str) -> list:
    # int2vector and oidvector print their integers space-separated (`1 2`), not as an array literal
    return [orjson.Fragment(n) for n in text.split()]


def to_bool(text: str) -> bool:
    return text == "t"


def to_json(text: str) -> Any:
    # a json value keeps its text, whose line breaks can only be whitespace: a record is one line
    if "\n" in text or "\r" in text:
        text = text.replace("\n", " ").replace("\r", " ")
    return orjson.Fragment(readable_json(text))


def to_jsonb(text: str) -> Any:
    if len(text) > _FINITE_CHARS and json_suspect(text.encode()):
        text = readable_json(text)
    return orjson.Fragment(text)


# -- json the readers cannot take --------------------------------------------------------------
# The server accepts json that streamctl's readers (orjson) refuse: a number beyond the double
# range (jsonb's `1e400` printed as 401 digits, json's `1e309`), a lone UTF-16 surrogate escape
# (json's `"\ud800"`; jsonb refuses it) and nesting deeper than orjson's 1024 levels (less the
# record's two around a column). Such a value is written readable, the same way whichever path it
# takes (to_json, to_jsonb, the snapshot's fast lane: row_mender): a number beyond the double
# range as a JSON string of its text (as a numeric's digits are, to_float), a lone surrogate as
# U+FFFD (as jq and Go's encoding/json read one), and a value still too deep as a JSON string of
# its text. The check costs one orjson parse of a json value (any text may hold any of these); a
# jsonb text, which has no exponent and no surrogate escape, is parsed only when json_suspect finds
# a run of 309 digits or 1022 brackets, which no text of 308 characters has (json_suspect costs
# ~2 ns a byte, a parse ~5: python -m timeit on a 10 KiB document).

_DIGITS = bytes(0x30 if 0x30 <= i <= 0x39 else 0x78 for i in range(256))
_LONG_RUN = b"0" * (_FINITE_CHARS + 1)  # a number of 309 digits or more may be beyond the range
_DEPTH = 1022  # orjson reads 1024 levels in a line; a column's value is two levels inside its record


def json_suspect(data: bytes) -> bool:
    """Whether a jsonb text (or a row of the fast lane holding jsonb) may hold a number beyond the
    double range or nest too deep; False: it surely does not."""
    return data.count(b"[") + data.count(b"{") > _DEPTH or _LONG_RUN in data.translate(_DIGITS)


def _reads(text: str) -> bool:
    try:
        orjson.loads("[[" + text + "]]")  # at a column's depth in a record
    except orjson.JSONDecodeError:
        return False
    return True


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[^\s{}\[\],:"]+')
_ESCAPE = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[dD][89a-fA-F][0-9a-fA-F]{2}|\\.",
                     re.S)


def _mend_token(m: re.Match) -> str:
    tok = m.group()
    if tok[0] == '"':
        if "\\u" not in tok:
            return tok
        # a pair stays; a surrogate alone (six characters) is U+FFFD; other escapes stay
        return _ESCAPE.sub(lambda e: "\\ufffd" if len(e.group()) == 6 else e.group(), tok)
    if tok[0] in "-0123456789":
        try:
            if math.isinf(float(tok)):
                return '"' + tok + '"'
        except ValueError:
            pass
    return tok


def readable_json(text: str) -> str:
    """The json text as capture writes it: as is when the readers read it, else mended (see above)."""
    if _reads(text):
        return text
    mended = _TOKEN.sub(_mend_token, text)
    if _reads(mended):
        return mended
    return orjson.dumps(text).decode()  # nested too deep: its text


_ROW_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[^\s{}\[\],:"]+|[{}\[\],:]')


def row_mender(json_columns: dict[str, int]) -> Callable[[bytes], bytes] | None:
    """For the snapshot's fast lane: a function giving a row's JSON (row_to_json) with its json and
    jsonb columns (name -> type) as to_json and to_jsonb write them; None for a table without any."""
    if not json_columns:
        return None
    every = JSON in json_columns.values()  # a json column may be unreadable at any length

    def mend(row: bytes) -> bytes:
        if not every and (len(row) <= _FINITE_CHARS or not json_suspect(row)):
            return row
        try:
            orjson.loads(b"[" + row + b"]")  # its columns at their depth in a record
            return row
        except orjson.JSONDecodeError:
            pass
        return _mend_columns(row.decode(), json_columns).encode()

    return mend


def _mend_columns(row: str, json_columns: dict[str, int]) -> str:
    """The row's JSON object with each json column's value through readable_json."""
    out: list[str] = []
    depth = 0
    last = 0
    name: str | None = None
    start: int | None = None  # where the current column's value starts
    for m in _ROW_TOKEN.finditer(row):
        t = m.group()
        c = t[0]
        if c in "{[":
            depth += 1
            continue
        if depth == 1 and start is None:
            if c == '"':
                name = orjson.loads(t)
            elif c == ":":
                start = m.end()
            continue
        if (depth == 1 and c == ",") or (depth == 1 and c == "}"):
            if name in json_columns and start is not None:
                out.append(row[last:start])
                out.append(readable_json(row[start:m.start()].strip()))
                last = m.start()
            name = start = None
        if c in "}]":
            depth -= 1
    out.append(row[last:])
    return "".join(out)


def to_bytea(text: str) -> str:
    if text.startswith("\\x"):
        return base64.b64encode(binascii.unhexlify(text[2:])).decode()
    return base64.b64encode(text.encode()).decode()  # escape format is never asked for (bytea_output=hex)


def _astronomical(iso: str) -> str:
    """A BC value's ISO text with PostgreSQL's year (`0044-03-15...`, always four digits) -> ISO 8601's
    year numbering, where 1 BC is year 0000 and 44 BC -0043 (as Java's and Python's ISO formats have it)."""
    year = 1 - int(iso[:4])
    return (f"{year:05d}" if year < 0 else f"{year:04d}") + iso[4:]


def to_timestamptz(text: str) -> str:
    """`2026-11-21 10:00:00.123+00` (TimeZone=UTC) -> `2026-11-21T10:00:00.123000Z`; a BC one's year as
    ISO 8601 numbers it (`0044-03-15 12:00:00+00 BC` -> `-0043-03-15T12:00:00.000000Z`)."""
    if text in ("infinity", "-infinity"):
        return text
    bc = text.endswith(" BC")
    if bc:
        text = text[:-3]
    if text.endswith("+00"):
        text = text[:-3]
    date, _, clock = text.partition(" ")
    whole, _, frac = clock.partition(".")
    iso = f"{date}T{whole}.{frac.ljust(6, '0')}Z"
    return _astronomical(iso) if bc else iso


def to_timestamp(text: str) -> str:
    # ISO-8601 as to_json prints it (the T instead of the space); BC as to_timestamptz
    if text in ("infinity", "-infinity"):
        return text
    if text.endswith(" BC"):
        return _astronomical(text[:-3].replace(" ", "T", 1))
    return text.replace(" ", "T", 1)


def to_date(text: str) -> str:
    return _astronomical(text[:-3]) if text.endswith(" BC") else text


def to_text(text: str) -> str:
    return text


def _scalar(oid: int) -> Converter:
    if oid in INT_OIDS:
        return to_int
    if oid in FLOAT_OIDS or oid == NUMERIC:
        return to_float
    if oid in INT_VECTORS:
        return to_int_vector
    if oid == BOOL:
        return to_bool
    if oid == JSON:
        return to_json
    if oid == JSONB:
        return to_jsonb
    if oid == BYTEA:
        return to_bytea
    if oid == TIMESTAMPTZ:
        return to_timestamptz
    if oid == TIMESTAMP:
        return to_timestamp
    if oid == DATE:
        return to_date
    return to_text


def parse_array(text: str, elem: Converter, delim: str = ",") -> Any:
    """A PostgreSQL array literal (`{1,2,NULL}`, `{{"a b","c"},{d,e}}`) -> nested lists of converted elements.

    A literal may start with dimension bounds (`[0:1]={1,2}`): they are skipped, the values kept in order.
    """
    if text.startswith("["):
        text = text[text.index("=") + 1:]
    pos = 0
    n = len(text)

    def value() -> Any:
        nonlocal pos
        if text[pos] == "{":
            pos += 1
            out: list = []
            if text[pos] == "}":
                pos += 1
                return out
            while True:
                out.append(value())
                c = text[pos]
                pos += 1
                if c == "}":
                    return out
        if text[pos] == '"':
            pos += 1
            buf = []
            while text[pos] != '"':
                if text[pos] == "\\":
                    pos += 1
                buf.append(text[pos])
                pos += 1
            pos += 1
            return elem("".join(buf))
        start = pos
        while pos < n and text[pos] != delim and text[pos] != "}":
            pos += 1
        raw = text[start:pos].strip()
        return None if raw == "NULL" else elem(raw)

    return value()


def converter(oid: int, elem_oid: int | None = None, delim: str = ",") -> Converter:
    """The converter of a column of type `oid` (an array type when elem_oid is given)."""
    if elem_oid:
        el = _scalar(elem_oid)
        return lambda text: parse_array(text, el, delim)
    return _scalar(oid)


def key_text(values: list[Any]) -> str:
    """The record key of a primary key: one column's value as text, or the JSON array of several."""
    if len(values) == 1:
        v = values[0]
        if isinstance(v, str):
            return v
        return orjson.dumps(v).decode()
    return orjson.dumps(values).decode()


def unescape_copy(field: str) -> str:
    """COPY text format's backslash escapes -> the value's text."""
    if "\\" not in field:
        return field
    out = []
    i = 0
    n = len(field)
    simple = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
    while i < n:
        c = field[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        d = field[i + 1]
        if d in simple:
            out.append(simple[d])
            i += 2
        elif d in "01234567":
            j = i + 1
            while j < n and j < i + 4 and field[j] in "01234567":
                j += 1
            out.append(chr(int(field[i + 1:j], 8)))
            i = j
        elif d == "x" and i + 2 < n and field[i + 2] in "0123456789abcdefABCDEF":
            j = i + 2
            while j < n and j < i + 4 and field[j] in "0123456789abcdefABCDEF":
                j += 1
            out.append(chr(int(field[i + 2:j], 16)))
            i = j
        else:
            out.append(d)
            i += 2
    return "".join(out)


# -- the snapshot's fast lane -------------------------------------------------------------------
# The server builds each row's JSON (row_to_json) for the types whose to_json form is the
# converters' form above under SESSION_OPTIONS (the numbers' and booleans' own text, text types
# as strings, time/interval as printed, arrays of those as arrays); timestamptz, timestamp and date
# (a BC year), bytea, json and numeric (a string beyond the double range) get an expression giving
# the converter's form; numeric[], timestamp[] and date[] have none (an element may be such a
# string, or BC). A row holding json or
# jsonb goes through row_mender (their texts as to_json/to_jsonb write them). A table with any other
# type takes the converters row by row. tests/capture/test_capture_changes.py::test_types holds the
# two ways to the same values, column for column.
SAME_AS_TO_JSON = {20, 21, 23, 26, 700, 701, 16, 25, 1043, 1042, 19, 2950, 3802, 1083, 1186}
SIMPLE_ARRAYS = {1005, 1007, 1016, 1021, 1022, 1000, 1009, 1015, 1014, 2951, 1183, 1187}
KEY_NUMBERS = {20, 21, 23, 26, 1700}
KEY_STRINGS = {25, 1043, 1042, 19, 2950}


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def fast_expr(oid: int, column: str) -> str | None:
    """The SQL giving the column's JSON-ready value inside row_to_json, or None: no fast form."""
    c = _ident(column)
    if oid == NUMERIC:
        # to_json's number, or (as to_float) the digits as a string beyond the double range; NaN and the
        # infinities compare above every number, and to_json quotes them alike
        return f"case when abs({c}) >= {DOUBLE_OVERFLOW} then to_json({c}::text) else to_json({c}) end"
    if oid in SAME_AS_TO_JSON or oid in SIMPLE_ARRAYS:
        return c
    if oid == TIMESTAMPTZ:
        utc = f"({c} at time zone 'UTC')"
        return (f"case when {c} >= '0001-01-01 00:00:00+00' and isfinite({c}) then to_char({utc}, "
                f"'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') when isfinite({c}) then {_bc_year(utc)} || to_char({utc}, "
                f"'-MM-DD\"T\"HH24:MI:SS.US\"Z\"') else {c}::text end")
    if oid in (TIMESTAMP, DATE):
        # to_json's text, but a BC value's as to_timestamp/to_date make it: its text less the year (four
        # digits) and ` BC`, the space before the time a T
        return (f"case when {c} < '0001-01-01' and isfinite({c}) then to_json({_bc_year(c)} || "
                f"replace(substr({c}::text, 5, length({c}::text) - 7), ' ', 'T')) else to_json({c}) end")
    if oid == BYTEA:
        return f"translate(encode({c}, 'base64'), E'\\n', '')"
    if oid == 114:
        return f"translate({c}::text, E'\\n\\r', '  ')::json"
    return None


def _bc_year(value: str) -> str:
    """The SQL of a BC value's year as ISO 8601 numbers it (_astronomical); PostgreSQL's year of it is
    negative, 1 BC -1."""
    return (f"(case when extract(year from {value}) = -1 then '0000' else "
            f"'-' || lpad((-1 - extract(year from {value}))::int::text, 4, '0') end)")


def fast_key_kind(oid: int) -> str | None:
    """How a key column's text becomes its JSON: `n` as is (a number), `s` a string; None: no fast form."""
    return "n" if oid in KEY_NUMBERS else "s" if oid in KEY_STRINGS else None
