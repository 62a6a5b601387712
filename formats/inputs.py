"""Decoding produce's input lines: JSON values, envelopes and raw text.

Each decoder takes one input line (bytes, newline stripped) and returns
(key, value JSON text, headers JSON text or None, source or None), or raises
BadLine with a reason for the user. Values are validated with orjson and then
stored exactly as written: splicing the validated bytes is what makes produce
fast (no re-serialization), and it keeps numbers as the producer wrote them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import orjson

from streamctl import paths

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
    kpath = paths.value_path(key_field) if key_field else None

    def decode(line: bytes) -> Decoded:
        text = line.strip(b" \t\r")
        if not text:
            raise BadLine("empty line (no JSON value)")
        obj = _loads(text)
        key = const_key
        if kpath is not None:
            key = coerce_key(paths.get(obj, kpath))
        return key, text, None, None

    if kpath is not None:
        # produce's keyed fast lane (see keyed_values); the per-line `decode` stays the fallback.
        decode.batch = functools.partial(keyed_items, kpath)  # type: ignore[attr-defined]
    return decode


def keyed_items(kpath: tuple[str, ...], lines: list, key_texts: dict[str, bytes],
                want_keys: bool) -> tuple[list[tuple[bytes, bytes, None]], list[str | None] | None] | None:
    """produce's fast lane with --key-field: ((key JSON, value text, None) per line, keys), or None.

    Like validate_values, but keeps each parsed value just long enough to take its
    key; `key_texts` caches key JSON texts across batches (a log has far fewer keys
    than records). The keys themselves are returned only if `want_keys` (to choose
    partitions). None (a bad, blank or over-long line, a key that is an object)
    sends the batch through the per-line decoder, which names the line.
    """
    loads, dumps, get = orjson.loads, orjson.dumps, paths.get
    cached = key_texts.get
    items: list[tuple[bytes, bytes, None]] = []
    keys: list[str | None] | None = [] if want_keys else None
    add = items.append
    first = kpath[0] if len(kpath) == 1 else None
    try:
        for ln in lines:
            obj = loads(ln)
            key = obj.get(first) if first is not None and type(obj) is dict else get(obj, kpath)
            if key is None:
                add((b"null", ln, None))
            else:
                if type(key) is not str:
                    key = coerce_key(key)
                kj = cached(key)
                if kj is None:
                    kj = dumps(key)
                    if len(key_texts) < 100_000:
                        key_texts[key] = kj
                add((kj, ln, None))
            if keys is not None:
                keys.append(key)
    except (orjson.JSONDecodeError, TypeError, BadLine):
        return None
    if _BIG in b"\n".join(lines).translate(_DIGITS):
        return None
    return items, keys


def validate_values(lines: list) -> list[bytes] | None:
    """produce's fast lane: the batch's lines if every one is a JSON value as it stands, else None.

    None sends the batch through the per-line decoder, which names the bad line.
    """
    loads = orjson.loads
    try:
        for ln in lines:
            loads(ln)
    except (orjson.JSONDecodeError, TypeError):
        return None
    if _BIG in b"\n".join(lines).translate(_DIGITS):
        return None
    return lines


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
        return key, orjson.dumps(obj["value"]), _headers_json(obj.get("headers")), source

    return decode


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
