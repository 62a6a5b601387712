"""The record line: the one place that knows how a record is laid out on disk.

    {"offset":42,"partition":0,"ts":1763719200123,"key":"user-7","value":{...}}
    ... optionally ,"headers":{"k":"v"} before the closing brace.

Writers build lines by splicing already-encoded JSON (the value bytes exactly
as validated), readers pull the envelope fields out of the fixed prefix
without parsing the value. A line that does not have the canonical prefix
(written by hand, say) is still read, through orjson.
"""

from __future__ import annotations

import re
from typing import Any

try:
    import orjson
except ImportError:  # the Spark replay job on a cluster without orjson reads a line's offset here too
    from streamctl import orjson_fallback as orjson  # type: ignore[no-redef]

from streamctl.errors import StorageError

_OFFSET = b'{"offset":'
_PART = b'"partition":'
_TS = b'"ts":'
_KEY_MARK = b',"key":'
_VALUE_MARK = b',"value":'
_HEADERS_MARK = b'"headers"'

# The canonical prefix up to the key, which is a JSON string (unrolled loop: fast
# in `re`) or null. Possessive quantifiers (Python 3.11+) never backtrack: ~10%
# faster over a block, and no pattern here needs to give characters back. NEXT_KEY anchors on the `\n` before a line: a record line
# never holds a raw newline, so it only matches at line starts.
_PREFIX = rb'\{"offset":\d++,"partition":\d++,"ts":\d++,"key":(null|"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"),"value":'
FIRST_KEY = re.compile(_PREFIX)
NEXT_KEY = re.compile(rb"\n" + _PREFIX)


def encode(offset: int, partition: int, ts: int, key_json: bytes, value_json: bytes,
           headers_json: bytes | None = None) -> bytes:
    """One stored line, newline included. key_json/value_json are JSON texts."""
    if headers_json is None:
        return b'{"offset":%d,"partition":%d,"ts":%d,"key":%s,"value":%s}\n' % (
            offset, partition, ts, key_json, value_json)
    return b'{"offset":%d,"partition":%d,"ts":%d,"key":%s,"value":%s,"headers":%s}\n' % (
        offset, partition, ts, key_json, value_json, headers_json)


class BadRecord(StorageError, ValueError):
    """A stored line that is not a record; the message says why (readers add file and byte)."""


def envelope(line: bytes) -> tuple[int, int, int]:
    """(offset, partition, ts) of a stored line, reading only its prefix."""
    parts = line.split(b",", 3)
    if (len(parts) == 4 and parts[0].startswith(_OFFSET) and parts[1].startswith(_PART)
            and parts[2].startswith(_TS)):
        try:
            return int(parts[0][10:]), int(parts[1][12:]), int(parts[2][5:])
        except ValueError:
            pass
    obj = parse(line)
    return obj["offset"], obj["partition"], obj["ts"]


def offset_of(line: bytes) -> int:
    if line.startswith(_OFFSET):
        end = line.find(b",", 10)
        if end > 10:
            try:
                return int(line[10:end])
            except ValueError:
                pass
    return parse(line)["offset"]


def parse(line: bytes) -> dict[str, Any]:
    """Full parse with validation of the envelope; raises BadRecord."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise BadRecord(f"invalid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise BadRecord("not a JSON object")
    off, part, ts = obj.get("offset"), obj.get("partition"), obj.get("ts")
    for name, v in (("offset", off), ("partition", part), ("ts", ts)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise BadRecord(f"field {name!r} missing or not a non-negative integer")
    if "value" not in obj:
        raise BadRecord("field 'value' missing")
    key = obj.get("key")
    if key is not None and not isinstance(key, str):
        raise BadRecord("field 'key' is neither a string nor null")
    return obj


def value_bytes(line: bytes) -> bytes:
    """The value's JSON text as stored, sliced out of the line (never re-encoded, which would turn
    `1.10` into `1.1` and round a long number through a float) when that is unambiguous."""
    if _HEADERS_MARK not in line:
        i = line.find(_VALUE_MARK)
        # A JSON string cannot contain `,"value":` (its quotes are escaped), and
        # the key is the only string before the value, so the first hit is it.
        if i > 0:
            end = len(line) - 1 if line.endswith(b"\n") else len(line)
            if line[end - 1:end] == b"}":
                return line[i + 9:end - 1]
        return orjson.dumps(parse(line)["value"])
    split = value_and_headers(line)
    return split[0] if split is not None else orjson.dumps(parse(line)["value"])


def value_and_headers(line: bytes) -> tuple[bytes, bytes] | None:
    """(value JSON text, headers JSON text) of a line in streamctl's layout whose headers member
    closes it, both as stored; None for any other line (the caller parses it).

    The headers come last and the value just before them, so the envelope's `,"headers":` is the
    line's last: inside a string its quotes are escaped, and one in an object of the value leaves
    that object's closing brace after the headers' text, which then is not one JSON object."""
    m = FIRST_KEY.match(line)
    h = line.rfind(b',"headers":')
    if m is None or h <= m.end():
        return None
    end = len(line) - 1 if line.endswith(b"\n") else len(line)
    if line[end - 1:end] != b"}":
        return None
    headers = line[h + 11:end - 1]
    try:
        if type(orjson.loads(headers)) is not dict:
            return None
    except orjson.JSONDecodeError:
        return None
    return line[m.end():h], headers


def key_bytes(line: bytes) -> bytes:
    """The key's JSON text (`"user-7"` or `null`)."""
    i = line.find(_KEY_MARK)
    if i > 0:
        j = line.find(_VALUE_MARK, i)
        if j > 0:
            return line[i + 7:j]
    return orjson.dumps(parse(line).get("key"))


def block_keys(buf: bytes, end: int) -> list[bytes] | None:
    """The key JSON text of every line in buf[:end] (whole lines, end just after a `\n`), read
    from the canonical prefix with two regex calls and no per-line Python; None when some line
    is not in the canonical layout (the caller then takes the slow path, line by line)."""
    first = FIRST_KEY.match(buf, 0, end)
    if first is None:
        return None
    keys = NEXT_KEY.findall(buf, first.end(), end)
    if len(keys) + 1 != buf.count(b"\n", 0, end):
        return None
    keys.insert(0, first.group(1))
    return keys


def key_json(key: str | None) -> bytes:
    return b"null" if key is None else orjson.dumps(key)


def is_tombstone(line: bytes) -> bool:
    if _HEADERS_MARK not in line:
        return line.endswith(b',"value":null}\n') or line.endswith(b',"value":null}')
    return parse(line)["value"] is None
