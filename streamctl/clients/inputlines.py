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

BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class TooLong:
    length: int
    raw: bytes = b""  # its first bytes, up to read_batches' keep_raw (for a dead-letter entry)


@dataclass(slots=True)
class Batch:
    """A read batch: its lines (without `\n`; a CR before it removed) and where they came from.

    `text` is the bytes the lines were split from, `\n` between them and any CR still
    in place (so a byte offset in it maps to a line by counting `\n`s before it), or
    None when the batch holds an over-long line (only the per-line path takes those).
    """

    first: int  # line number of lines[0], from 1
    lines: list[bytes | TooLong]
    text: bytes | None

    def numbered(self) -> Iterator[tuple[int, bytes | TooLong]]:
        """(line number, line) pairs."""
        return zip(range(self.first, self.first + len(self.lines)), self.lines, strict=True)


def _readable_now(fd: int) -> bool:
    try:
        r, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(r)


def read_batches(fd: int, max_line: int, batch_bytes: int = 1 << 20, keep_raw: int = 0) -> Iterator[Batch]:
    """Yield the input as batches of lines; a line over max_line bytes is a TooLong, holding its first
    keep_raw bytes (memory stays bounded by keep_raw, however long the line)."""
    carry = b""
    skipping = 0  # > 0: inside an over-long line, this many bytes seen so far
    kept: list[bytes] = []  # the over-long line's first bytes, up to keep_raw
    kept_n = 0

    def keep(piece: bytes) -> None:
        nonlocal kept_n
        if kept_n < keep_raw:
            kept.append(piece[:keep_raw - kept_n])
            kept_n += len(kept[-1])

    def too_long(length: int) -> TooLong:
        nonlocal kept_n
        raw = b"".join(kept)
        kept.clear()
        kept_n = 0
        if len(raw) == length and raw.endswith(b"\r"):
            raw = raw[:-1]  # the whole line, kept with the CR of a CRLF ending: not part of it
        return TooLong(length, raw)
    lineno = 0
    eof = False
    head = b""  # the input's first bytes while they may still be the start of a BOM
    at_start = True
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
        if at_start:
            # a UTF-8 byte order mark (Windows editors write one) before the first line is no part of it:
            # skipped, as jq does; one anywhere else is data
            data = head + data
            if len(data) < len(BOM) and not eof and BOM.startswith(data):
                head = data  # a pipe that gave only part of it so far
                continue
            at_start = False
            if data.startswith(BOM):
                data = data[len(BOM):]
        out: list[bytes | TooLong] = []
        text: bytes | None = b""
        start = 0
        if skipping:
            i = data.find(b"\n")
            if i < 0:
                skipping += len(data)
                keep(data)
                start = len(data)
            else:
                keep(data[:i])
                out.append(too_long(skipping + i))
                text = None
                skipping = 0
                start = i + 1
        if start < len(data) or (eof and carry):
            buf = carry + data[start:] if carry else data[start:]
            carry = b""
            lines = buf.split(b"\n")
            tail = lines.pop()
            end = len(buf) - len(tail) - 1  # the text of the whole lines, without the last \n
            if len(tail) > max_line:
                skipping = len(tail)
                keep(tail)
            elif eof and tail:
                lines.append(tail)  # the last line, without a \n
                end = len(buf)
            else:
                carry = tail
            if lines:
                if b"\r" in buf:  # CRLF line endings: the \r is not part of the record
                    lines = [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]
                if max(map(len, lines)) > max_line:
                    out += [ln if len(ln) <= max_line else TooLong(len(ln), ln[:keep_raw]) for ln in lines]
                    text = None
                else:
                    out += lines
                    if text is not None:
                        text = buf[:end] if end < len(buf) else buf
        if eof and skipping:
            out.append(too_long(skipping))
            text = None
        if out:
            yield Batch(lineno + 1, out, text)
            lineno += len(out)
