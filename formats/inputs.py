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
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from itertools import accumulate, compress, repeat
from operator import attrgetter, itemgetter, not_
from typing import Any

import msgspec
import orjson

from streamctl.storage import fieldpaths

Decoded = tuple["str | None", bytes, "bytes | None", "tuple[str, int, int] | None"]
Decoder = Callable[[bytes], Decoded]

_DIGITS = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))
_BIG = b"0" * 20


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
    # orjson turns integers beyond 64 bits into floats; refuse rather than round.
    if _BIG in line.translate(_DIGITS) and _has_big_int(obj):
        raise BadLine("integer too large (more than 64 bits); quote it as a string")
    return obj


def _has_big_int(obj: Any) -> bool:
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, float) and o.is_integer() and abs(o) >= 2**63:
            return True
        if isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, list):
            stack.extend(o)
    return False


def coerce_key(k: Any) -> str | None:
    if k is None or isinstance(k, str):
        return k
    if isinstance(k, (bool, int, float)):
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


def raw_decoder(key_delimiter: str | None, const_key: str | None) -> Decoder:
    delim = key_delimiter.encode() if key_delimiter else None

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


# --- the --envelope batch lane -----------------------------------------------------------
# A read batch of envelope lines is decoded by msgspec against the schema below: the key
# and headers become Python strings, the value stays the bytes it was written as
# (msgspec.Raw), and no Python object is built for it. msgspec checks the whole structure
# of what it skips (every token, escape and surrogate pair) but not three things orjson
# refuses: invalid UTF-8 inside a string, a number that overflows a double (1e400) and an
# integer beyond 64 bits. The lane checks UTF-8 for the whole batch in one call, and gives
# the lines that may hold the other two (a run of 20 digits, an exponent of 3 digits) the
# per-line decoder's full parse. A batch that msgspec or those checks refuse, or that holds
# what the schema does not take (a key that is not a string or null, a source object),
# goes through the per-line decoder: it is the reference, names a bad line, and the lane
# matches it byte for byte (tests/test_produce.py compares them).


class _Envelope(msgspec.Struct, gc=False):
    value: msgspec.Raw
    key: str | None = None
    headers: dict[str, str] | None = None
    source: msgspec.Raw = msgspec.Raw()


class _EnvelopeAnyKey(msgspec.Struct, gc=False):
    """With --key the envelope's key is ignored, whatever it holds."""

    value: msgspec.Raw
    key: msgspec.Raw = msgspec.Raw()
    headers: dict[str, str] | None = None
    source: msgspec.Raw = msgspec.Raw()


# (key JSON texts, value texts, headers JSON texts or None, keys) of a batch's records
EnvelopeBatch = tuple[list[bytes], list[msgspec.Raw], list["bytes | None"], list["str | None"]]

_WS = b" \t\r"
# Digits and the decimal point as 0, e/E as e, signs as +, what a number can follow outside
# a string (`:`, `,`, `[`, whitespace) as `:`, everything else as x. A number token with an
# exponent of 3 or more digits reads `:0e000`, `:+0.0e+000`, ... (hex text like 3e129 reads
# `x0e000`); a run of 20 digits reads as twenty 0s.
_NUMBER_CLASSES = bytes(
    48 if 48 <= b <= 57 or b == 46 else 101 if b in b"eE" else 43 if b in b"+-" else 58 if b in b":,[ \t\r"
    else 120
    for b in range(256)
)
_RUN = b"0" * 20
_RUNS = re.compile(_RUN)
# Fixed-width look-behinds for digit runs up to 20 long; a longer run is a suspect anyway.
_BIG_EXPONENT = re.compile(
    (r"e(?=\+?000)(?:" + "|".join(f"(?<=[:+]{'0' * k}e)" for k in range(1, 21)) + ")").encode())


class EnvelopeLane:
    """Decodes a read batch of --envelope lines; None sends the batch to the per-line decoder."""

    def __init__(self, const_key: str | None) -> None:
        self.const_key = const_key
        self.decode: Callable[[bytes], _Envelope | _EnvelopeAnyKey]
        if const_key is None:
            self.decode = msgspec.json.Decoder(_Envelope).decode
        else:
            self.decode = msgspec.json.Decoder(_EnvelopeAnyKey).decode

    def __call__(self, batch: list) -> EnvelopeBatch | None:
        try:
            lines = list(map(bytes.strip, map(_second, batch), repeat(_WS)))
        except TypeError:  # an over-long line
            return None
        if not all(lines):
            lines = list(filter(None, lines))  # blank lines carry no record
        if not lines or not self._checked(lines):
            return None
        try:
            envs = list(map(self.decode, lines))
        except (msgspec.DecodeError, RecursionError):  # (ValidationError is a DecodeError)
            return None
        if any(map(len, map(_source, envs))) and any(bytes(e.source)[:1] == b"{" for e in envs):
            return None  # a source object: the per-line decoder checks it
        hs = list(map(_headers, envs))
        if any(hs):
            # byte for byte what orjson.dumps writes for an object of strings (tested for
            # every code point), at a tenth of its cost per call here
            encode = _encode
            headers: list[bytes | None] = [encode(h) if h else None for h in hs]
        else:  # none, null or {}: no headers field
            headers = [None] * len(hs)
        values = list(map(_value, envs))
        if self.const_key is not None:
            keys: list[str | None] = [self.const_key] * len(envs)
            key_texts = [orjson.dumps(self.const_key)] * len(envs)
        else:
            keys = list(map(_key, envs))
            # the same text as orjson.dumps (tested), and cheaper than a cache of texts per key
            key_texts = list(map(_encode, keys))
        return key_texts, values, headers, keys

    def _checked(self, lines: list[bytes]) -> bool:
        """True when the batch is valid UTF-8 and every line that may hold a number orjson
        refuses (a run of 20 digits, an exponent of 3 or more digits) passes the per-line
        decoder's full parse."""
        ascii = list(map(bytes.isascii, lines))
        if not all(ascii):
            try:
                deque(map(bytes.decode, compress(lines, map(not_, ascii))), maxlen=0)
            except UnicodeDecodeError:
                return False
        joined = b"\n".join(lines)
        classes = joined.translate(_NUMBER_CLASSES)
        at = [m.start() for m in _BIG_EXPONENT.finditer(classes)]
        if _RUN in classes:
            at += [m.start() for m in _RUNS.finditer(classes)]
        if at:
            ends = list(accumulate(len(ln) + 1 for ln in lines))
            try:
                for i in {bisect_right(ends, pos) for pos in at}:
                    _loads(lines[i])
            except BadLine:
                return False
        return True


_second = itemgetter(1)  # (line number, line) -> line
_value = attrgetter("value")
_key = attrgetter("key")
_headers = attrgetter("headers")
_source = attrgetter("source")
_encode = msgspec.json.Encoder().encode
