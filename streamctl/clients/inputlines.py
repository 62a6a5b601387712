"""Reading input lines in batches of what is available now.

produce reads its input through this: a batch is every whole line that can be
read without blocking (up to about `batch_bytes`), so a file is appended in
large batches (one fsync each) and a slow pipe is appended as lines arrive.
Lines split on `\n` bytes only (U+2028 inside a string is not a line break).
"""

from __future__ import annotations

import os
import select
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TooLong:
    length: int


Line = "bytes | TooLong"


def _readable_now(fd: int) -> bool:
    try:
        r, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(r)


def read_batches(fd: int, max_line: int, batch_bytes: int = 1 << 20) -> Iterator[list[tuple[int, bytes | TooLong]]]:
    """Yield lists of (line number from 1, line without `\n` | TooLong)."""
    carry = b""
    skipping = 0  # > 0: inside an over-long line, this many bytes seen so far
    lineno = 0
    eof = False
    while not eof:
        chunks = []
        got = 0
        while True:
            data = os.read(fd, batch_bytes)
            if not data:
                eof = True
                break
            chunks.append(data)
            got += len(data)
            if got >= batch_bytes or not _readable_now(fd):
                break
        data = b"".join(chunks)
        out: list[tuple[int, bytes | TooLong]] = []
        start = 0
        if skipping:
            i = data.find(b"\n")
            if i < 0:
                skipping += len(data)
                start = len(data)
            else:
                lineno += 1
                out.append((lineno, TooLong(skipping + i)))
                skipping = 0
                start = i + 1
        if start < len(data):
            buf = carry + data[start:] if carry else data[start:]
            carry = b""
            lines = buf.split(b"\n")
            tail = lines.pop()
            if b"\r" in buf:  # CRLF line endings: the \r is not part of the record
                lines = [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]
            for ln in lines:
                lineno += 1
                out.append((lineno, ln if len(ln) <= max_line else TooLong(len(ln))))
            if len(tail) > max_line:
                skipping = len(tail)
            else:
                carry = tail
        if eof:
            if skipping:
                lineno += 1
                out.append((lineno, TooLong(skipping)))
            elif carry:
                lineno += 1
                out.append((lineno, carry[:-1] if carry.endswith(b"\r") else carry))
        if out:
            yield out
