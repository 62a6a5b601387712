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
JSON_OIDS = {114, 3802}
BYTEA = 17
TIMESTAMPTZ = 1184
TIMESTAMP = 1114

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


def to_bool(text: str) -> bool:
    return text == "t"


def to_json(text: str) -> Any:
    # a json value keeps its text, whose line breaks can only be whitespace: a record is one line
    if "\n" in text or "\r" in text:
        text = text.replace("\n", " ").replace("\r", " ")
    return orjson.Fragment(text)


def to_bytea(text: str) -> str:
    if text.startswith("\\x"):
        return base64.b64encode(binascii.unhexlify(text[2:])).decode()
    return base64.b64encode(text.encode()).decode()  # escape format is never asked for (bytea_output=hex)


def to_timestamptz(text: str) -> str:
    """`2026-11-21 10:00:00.123+00` (TimeZone=UTC) -> `2026-11-21T10:00:00.123000Z`."""
    if text in ("infinity", "-infinity") or text.endswith(" BC"):
        return text
    if text.endswith("+00"):
        text = text[:-3]
    date, _, clock = text.partition(" ")
    whole, _, frac = clock.partition(".")
    return f"{date}T{whole}.{frac.ljust(6, '0')}Z"


def to_timestamp(text: str) -> str:
    # ISO-8601 as to_json prints it (the T instead of the space)
    return text if text in ("infinity", "-infinity") else text.replace(" ", "T", 1)


def to_text(text: str) -> str:
    return text


def _scalar(oid: int) -> Converter:
    if oid in INT_OIDS:
        return to_int
    if oid in FLOAT_OIDS or oid == NUMERIC:
        return to_float
    if oid == BOOL:
        return to_bool
    if oid in JSON_OIDS:
        return to_json
    if oid == BYTEA:
        return to_bytea
    if oid == TIMESTAMPTZ:
        return to_timestamptz
    if oid == TIMESTAMP:
        return to_timestamp
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
# as strings, timestamp/date/time/interval as printed, arrays of those as arrays); timestamptz,
# bytea, json and numeric (a string beyond the double range) get an expression giving the
# converter's form; numeric[] has none (an element may be such a string). A table with any other type
# takes the converters row by row. tests/capture/test_capture_changes.py::test_types holds the
# two ways to the same values, column for column.
SAME_AS_TO_JSON = {20, 21, 23, 26, 700, 701, 16, 25, 1043, 1042, 19, 2950, 3802, 1082, 1083, 1114, 1186}
SIMPLE_ARRAYS = {1005, 1007, 1016, 1021, 1022, 1000, 1009, 1015, 1014, 2951, 1182, 1183, 1115, 1187}
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
        return (f"case when isfinite({c}) and {c} >= '0001-01-01 00:00:00+00' then to_char({c} at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') else {c}::text end")
    if oid == BYTEA:
        return f"translate(encode({c}, 'base64'), E'\\n', '')"
    if oid == 114:
        return f"translate({c}::text, E'\\n\\r', '  ')::json"
    return None


def fast_key_kind(oid: int) -> str | None:
    """How a key column's text becomes its JSON: `n` as is (a number), `s` a string; None: no fast form."""
    return "n" if oid in KEY_NUMBERS else "s" if oid in KEY_STRINGS else None
