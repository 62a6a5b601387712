"""Decoding produce's input lines: JSON values, envelopes and raw text.

Each decoder takes one input line (bytes, newline stripped) and returns
(key, value JSON text, headers JSON text or None, source or None), or raises
BadLine with a reason for the user. Values are validated with orjson and then
stored exactly as written: splicing the validated bytes is what makes produce
fast (no re-serialization), and it keeps numbers as the producer wrote them.
That holds for an envelope's value too: its text is sliced out of the line as
written (surrounding whitespace aside), so `consume A | produce B --envelope`
copies values byte for byte. Keys and headers are decoded (the key decides the
partition) and stored as orjson writes them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec
import orjson

from streamctl.errors import UsageError
from streamctl.processing import exactjson
from streamctl.storage import fieldpaths

Decoded = tuple["str | None", bytes, "bytes | None", "tuple[str, int, int] | None"]
Decoder = Callable[[bytes], Decoded]



class BadLine(ValueError):
    """An input line that cannot become a record; str(e) is the reason."""


def _loads(line: bytes) -> Any:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        msg = str(e)
        if "UTF-8" in msg or "surrogate" in msg:
            raise BadLine(f"invalid UTF-8 or lone surrogate: {msg}") from None
        raise BadLine(f"invalid JSON: {msg}") from None
    # orjson reads an integer beyond 64 bits as a float: such a line is read again by the standard
    # library (exactjson), which keeps integers exact (a key taken from one is its exact decimal
    # text); the value itself is stored as written either way
    return exactjson.exact(line, obj)


def coerce_key(k: Any) -> str | None:
    if k is None or isinstance(k, str):
        return k
    if type(k) is int:
        return str(k)  # its JSON text, exact at any size
    if isinstance(k, (bool, float)):
        return orjson.dumps(k).decode()
    raise BadLine("key must be a string, a number or null, not an object or array")


def value_decoder(key_field: str | None, const_key: str | None) -> Decoder:
    kpath = fieldpaths.value_path(key_field) if key_field else None

    def decode(line: bytes) -> Decoded:
        text = line.strip(b" \t\r")
        if not text:
            raise BadLine("empty line (no JSON value)")
        obj = _loads(text)
        key = const_key
        if kpath is not None:
            key = coerce_key(fieldpaths.get(obj, kpath))
        return key, text, None, None

    return decode


def _headers_json(h: Any) -> bytes | None:
    if h is None:
        return None
    if not isinstance(h, dict) or not all(isinstance(v, str) for v in h.values()):
        raise BadLine("headers must be an object of string values")
    return orjson.dumps(h) if h else None


def envelope_decoder(const_key: str | None, source_name: str | None = None) -> Decoder:
    def decode(line: bytes) -> Decoded:
        text = line.strip(b" \t\r")
        if not text:
            raise BadLine("empty line (no envelope)")
        obj = _loads(text)
        if not isinstance(obj, dict):
            raise BadLine("an --envelope line must be a JSON object with key and value")
        if "value" not in obj:
            raise BadLine("envelope has no \"value\" field")
        key = coerce_key(obj.get("key")) if const_key is None else const_key
        source = None
        src = obj.get("source")
        if isinstance(src, dict):
            source = _source_tuple(src.get("log"), src.get("partition"), src.get("offset"))
        elif source_name is not None and "offset" in obj:
            source = _source_tuple(source_name, obj.get("partition", 0), obj.get("offset"))
        return key, value_text(text), _headers_json(obj.get("headers")), source

    return decode


class _ValueOnly(msgspec.Struct, gc=False):
    value: msgspec.Raw


_value_only = msgspec.json.Decoder(_ValueOnly).decode
# A JSON string token, or one of the structural characters outside strings.
_TOKEN = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"|[{}\[\],:]')
_JSON_WS = b" \t\r\n"


def value_text(text: bytes) -> bytes:
    """The text of the "value" field of an envelope line that orjson has accepted, as written.

    Like orjson, the last "value" wins when the key repeats. msgspec slices it out
    (msgspec.Raw); msgspec gives up at Python's recursion limit, below orjson's nesting
    limit of 1024, so a deeper line is scanned token by token instead.
    """
    try:
        return bytes(_value_only(text).value)
    except RecursionError:
        return scan_value_text(text)


def scan_value_text(text: bytes) -> bytes:
    """value_text by a scan of string tokens and structural characters (no recursion)."""
    depth = 0
    key = b""
    start = -1  # where the current top-level member's value starts; -1 while reading a key
    span = (0, 0)
    for m in _TOKEN.finditer(text):
        c = text[m.start()]
        if c == 0x22:  # '"'
            if depth == 1 and start < 0:
                key = m.group()
        elif c == 0x3A:  # ':'
            if depth == 1:
                start = m.end()
        elif c == 0x7B or c == 0x5B:  # '{' '['
            depth += 1
        else:  # ',' '}' ']'
            if depth == 1:  # the end of a top-level member
                if key == b'"value"' or (b"\\" in key and orjson.loads(key) == "value"):
                    span = (start, m.start())
                start = -1
            if c != 0x2C:
                depth -= 1
    return text[span[0]:span[1]].strip(_JSON_WS)


def _source_tuple(log: Any, partition: Any, offset: Any) -> tuple[str, int, int]:
    if not isinstance(log, str) or not log:
        raise BadLine("source.log must be a non-empty string")
    for name, v in (("partition", partition), ("offset", offset)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise BadLine(f"source {name} must be a non-negative integer")
    return log, partition, offset


_DELIM_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}
_HEX = "0123456789abcdefABCDEF"


def parse_delimiter(text: str) -> str:
    """--key-delimiter's escapes, kcat -K's (its -D format): \\t \\n \\r, \\xNN a byte in hex (one or two
    digits), and \\\\ a backslash; a backslash before anything else is itself. Bytes above 127 come back as
    the surrogates "surrogateescape" encodes into them (as bytes of argv that are not UTF-8 do)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        nxt = text[i + 1:i + 2]
        if c != "\\" or not nxt:
            out.append(c)
            i += 1
        elif nxt in _DELIM_ESCAPES:
            out.append(_DELIM_ESCAPES[nxt])
            i += 2
        elif nxt == "x":
            j = i + 2
            while j < len(text) and j < i + 4 and text[j] in _HEX:
                j += 1
            if j == i + 2:
                raise UsageError(f"--key-delimiter '{text}': \\x needs a byte in hex after it (\\x1f)")
            n = int(text[i + 2:j], 16)
            out.append(chr(n) if n < 128 else chr(0xDC00 + n))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def raw_decoder(key_delimiter: str | None, const_key: str | None) -> Decoder:
    # a delimiter given as an escape of a byte above 127 (\\xff) holds it as a surrogate
    delim = key_delimiter.encode("utf-8", "surrogateescape") if key_delimiter else None

    def decode(line: bytes) -> Decoded:
        if line.endswith(b"\r"):
            line = line[:-1]
        key = const_key
        if delim is not None:
            k, sep, v = line.partition(delim)
            if sep:
                key, line = _utf8(k), v
        return key, orjson.dumps(_utf8(line)), None, None

    return decode


def _utf8(b: bytes) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadLine(f"invalid UTF-8 at byte {e.start}") from None
