"""A plain `.jsonl` file (or `-`) read as a log: lines are values, offsets are line numbers from 0."""

from __future__ import annotations

import os
import sys
from collections import deque
from collections.abc import Iterator

import orjson

from streamctl.errors import DataError, UsageError


def open_plain(path: str) -> tuple[str, int]:
    if path == "-":
        return "<stdin>", sys.stdin.fileno()
    try:
        return path, os.open(path, os.O_RDONLY)
    except OSError as e:
        raise UsageError(f"{path}: cannot open: {e.strerror}") from None


def invalid_json(path: str, lineno: int, reason: object) -> DataError:
    """An invalid line of a plain file: the file (`<stdin>` for `-`), its line number from 1 (blank
    lines counted) and why."""
    return DataError(f"{'<stdin>' if path == '-' else path}:{lineno}: invalid JSON: {reason}")


def iter_values(path: str, validate: bool = True, stop: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(offset, value JSON text) per non-blank line, up to offset `stop` (not included; that line is
    not read); invalid JSON is a DataError naming the line. The offset is the line number from 0:
    a blank line holds no record, and its number is skipped."""
    name, fd = open_plain(path)
    f = os.fdopen(fd, "rb", buffering=1 << 20, closefd=path != "-")
    with f:
        for offset, line in enumerate(f):
            if stop is not None and offset >= stop:
                return
            text = line.strip(b" \t\r\n")
            if not text:
                continue
            if validate:
                try:
                    orjson.loads(text)
                except orjson.JSONDecodeError as e:
                    raise invalid_json(path, offset + 1, e) from None
            yield offset, text


def select(values: Iterator[tuple[int, bytes]], from_spec: str | None) -> Iterator[tuple[int, bytes]]:
    """Apply consume's --from to a plain file (times do not apply: it has no ts)."""
    s = (from_spec or "earliest").strip()
    if s == "earliest":
        yield from values
    elif s == "latest":
        for _ in values:
            pass
    elif s.isdecimal():
        start = int(s)
        for off, v in values:
            if off >= start:
                yield off, v
    elif s.startswith("-") and s[1:].isdecimal():
        yield from deque(values, maxlen=int(s[1:]))
    else:
        raise UsageError(f"--from {from_spec!r}: a plain file has no timestamps; use earliest, latest, OFFSET or -N")


_PLAIN_REST = b',"partition":0,"key":null,"value":'


def envelope_line(offset: int, value: bytes) -> bytes:
    """A plain line as the record a filter reads: offset = line number, partition 0, no key and
    no `ts` (a plain file has no append time)."""
    return b'{"offset":%d,"partition":0,"key":null,"value":%s}\n' % (offset, value)


def is_envelope_line(line: bytes) -> bool:
    """Whether `line` was made by envelope_line (a stored record always has `ts` before `key`)."""
    i = line.find(_PLAIN_REST, 0, 64)
    return i > 10 and line.startswith(b'{"offset":') and line[10:i].isdigit()
