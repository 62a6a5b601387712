"""Segment files: naming, listing, and reading complete lines out of them.

A segment is `pN/<first offset, 20 digits>.jsonl`. Only bytes up to the last
`\n` are visible; anything after it is a torn tail from a crashed writer.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from streamctl.storage import record
from streamctl.storage.fsutil import NOFOLLOW

SUFFIX = ".jsonl"
NAME_DIGITS = 20
CHUNK = 1 << 20


# Framing of stored lines, checked by every reader before it hands a line on: a line starts with
# `{"offset":` and ends with `}`. One regex pass finds a `\n` that does not sit between such lines
# (no line is held in Python unless it fails); see first_bad_line.
LINE_START = b'{"offset":'
_FRAME_BREAK = re.compile(rb'\n(?:(?<!\}\n)|(?!\{"offset":))')


def _not_a_record(line: bytes | bytearray) -> record.BadRecord | None:
    try:
        record.parse(bytes(line))
    except record.BadRecord as e:
        return e
    return None


def first_bad_line(buf: bytes | bytearray, start: int, end: int) -> tuple[int, record.BadRecord] | None:
    """(byte position, why) of the first line of buf[start:end] (whole lines) that is not a record.

    The fast path is the framing check: every line starts with `{"offset":` and ends
    with `}`, and no line holds a NUL byte (JSON text never does; zeroed disk blocks
    do). A line that fails is parsed in full (orjson), and passes if it is a record
    after all (a hand-written line in another layout); so other damage inside a line,
    between its first and last byte, is not caught here, only by the readers that
    parse the value.
    """
    nul = buf.find(b"\x00", start, end)
    if nul >= 0:
        i = buf.rfind(b"\n", start, nul)
        line_start = i + 1 if i >= 0 else start
        found = _first_unframed(buf, start, line_start)
        if found is not None:
            return found
        return line_start, _not_a_record(buf[line_start:buf.find(b"\n", nul, end) + 1]) or record.BadRecord("NUL byte")
    return _first_unframed(buf, start, end)


def _first_unframed(buf: bytes | bytearray, start: int, end: int) -> tuple[int, record.BadRecord] | None:
    pos = start
    while pos < end:
        if buf.startswith(LINE_START, pos, end):
            m = _FRAME_BREAK.search(buf, pos, end - 1)
            if m is None:
                if buf[end - 2] == 0x7D:  # `}` before the last \n
                    return None
                nl = end - 1
            else:
                nl = m.start()
                if buf[nl - 1] == 0x7D:  # this line is framed, the next one is not
                    pos = nl + 1
                    bad = buf.find(b"\n", pos, end)
                    why = _not_a_record(buf[pos:bad + 1])
                    if why is not None:
                        return pos, why
                    pos = bad + 1
                    continue
            i = buf.rfind(b"\n", pos, nl)
            line_start = i + 1 if i >= 0 else pos
            why = _not_a_record(buf[line_start:nl + 1])
            if why is not None:
                return line_start, why
            pos = nl + 1
        else:
            nl = buf.find(b"\n", pos, end)
            why = _not_a_record(buf[pos:nl + 1])
            if why is not None:
                return pos, why
            pos = nl + 1
    return None


def segment_name(base_offset: int) -> str:
    return f"{base_offset:0{NAME_DIGITS}d}{SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    if len(name) == NAME_DIGITS + len(SUFFIX) and name.endswith(SUFFIX) and name[:NAME_DIGITS].isdecimal():
        return int(name[:NAME_DIGITS])
    return None


@dataclass(frozen=True, slots=True)
class Segment:
    base: int
    path: str

    def size(self) -> int:
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            return 0


def list_segments(pdir: str) -> list[Segment]:
    """Segments of a partition folder, oldest first."""
    out = []
    try:
        names = os.listdir(pdir)
    except FileNotFoundError:
        return []
    for name in names:
        base = parse_segment_name(name)
        if base is not None:
            out.append(Segment(base, os.path.join(pdir, name)))
    out.sort(key=lambda s: s.base)
    return out


MANIFEST = ".segments"  # per partition folder: the segment bases as last recorded (see write_manifest)


def write_manifest(pdir: str) -> None:
    """Record the partition's segment list, `{"segments": [base, ...]}`, atomically.

    Written under the partition lock after every change of the list by streamctl:
    a roll (after the new segment exists), a compaction swap (after the replaced
    segments are gone, before its .swap is removed) and retention (after the
    deletion). So `check` can tell a segment deleted from the middle of a partition
    from compaction's gaps: a base listed here whose file is gone, not before the
    first segment (retention deletes a prefix) and not in the run of a .swap that
    is still there (recovery rewrites the list), was removed outside streamctl.
    A crash before the rewrite leaves at most a new last segment unlisted.
    """
    import orjson

    from streamctl.storage.fsutil import atomic_write, folder

    bases = [s.base for s in list_segments(pdir)]
    with folder(pdir) as dfd:  # never through a symlinked partition folder
        atomic_write(os.path.join(pdir, MANIFEST), orjson.dumps({"segments": bases}) + b"\n", dir_fd=dfd)


def read_manifest(pdir: str) -> list[int] | None:
    """The recorded segment bases, or None when there is no usable list (a log from before it)."""
    import orjson

    try:
        fd = os.open(os.path.join(pdir, MANIFEST), os.O_RDONLY | NOFOLLOW)
    except OSError:
        return None
    try:
        data = os.read(fd, 1 << 26)
    finally:
        os.close(fd)
    try:
        bases = orjson.loads(data)["segments"]
    except (orjson.JSONDecodeError, TypeError, KeyError):
        return None
    if not isinstance(bases, list) or not all(type(b) is int and b >= 0 for b in bases):
        return None
    return bases


def open_read(path: str) -> int:
    return os.open(path, os.O_RDONLY | NOFOLLOW)


def visible_end(fd: int, size: int) -> int:
    """Byte position just past the last `\n` at or before `size`."""
    pos = size
    while pos > 0:
        step = min(CHUNK, pos)
        buf = os.pread(fd, step, pos - step)
        i = buf.rfind(b"\n")
        if i >= 0:
            return pos - step + i + 1
        pos -= step
    return 0


def cut_torn_tail(fd: int) -> int:
    """Truncate bytes after the last `\n` (a crashed writer's partial line) and fsync.

    Only the holder of the partition lock may call this: a live writer's
    unfinished batch looks exactly like a torn tail. Returns the new size.
    """
    size = os.fstat(fd).st_size
    end = visible_end(fd, size)
    if end < size:
        os.ftruncate(fd, end)
        os.fsync(fd)
    return end


def last_line(fd: int, end: int) -> bytes | None:
    """The complete line that ends at `end` (which must follow a `\n`)."""
    if end <= 0:
        return None
    pos = end - 1  # the '\n'
    chunks = []
    while pos > 0:
        step = min(65536, pos)
        buf = os.pread(fd, step, pos - step)
        i = buf.rfind(b"\n")
        if i >= 0:
            chunks.append(buf[i + 1:])
            break
        chunks.append(buf)
        pos -= step
    chunks.reverse()
    return b"".join(chunks) + os.pread(fd, 1, end - 1)


def iter_blocks(fd: int, start: int, end: int, chunk: int = CHUNK) -> Iterator[bytes]:
    """Blocks of whole lines between byte positions start and end (end after a `\n`)."""
    pos = start
    carry = b""
    while pos < end:
        buf = os.pread(fd, min(chunk, end - pos), pos)
        if not buf:
            break  # the file shrank under us; the caller re-checks
        pos += len(buf)
        i = buf.rfind(b"\n")
        if i < 0:
            carry += buf
            continue
        yield carry + buf[: i + 1] if carry else buf[: i + 1]
        carry = buf[i + 1:]
    if carry:
        # only possible when the file shrank below `end`
        return


def iter_lines(fd: int, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """(byte position, line) for each whole line in [start, end)."""
    pos = start
    for block in iter_blocks(fd, start, end):
        for line in block.splitlines(keepends=True):
            yield pos, line
            pos += len(line)


def line_at_or_after(fd: int, pos: int, limit: int, end: int) -> tuple[int, bytes] | None:
    """The first whole line starting in [pos, limit) (pos may be mid-line); lines end by `end`."""
    if pos > 0 and os.pread(fd, 1, pos - 1) != b"\n":
        while pos < limit:
            buf = os.pread(fd, min(65536, end - pos), pos)
            if not buf:
                return None
            i = buf.find(b"\n")
            if i >= 0:
                pos += i + 1
                break
            pos += len(buf)
    if pos >= limit or pos >= end:
        return None
    chunks = []
    p = pos
    while p < end:
        buf = os.pread(fd, min(65536, end - p), p)
        if not buf:
            break
        i = buf.find(b"\n")
        if i >= 0:
            chunks.append(buf[: i + 1])
            break
        chunks.append(buf)
        p += len(buf)
    return pos, b"".join(chunks)


def bisect(fd: int, end: int, key: Callable[[bytes], int], target: int, start: int = 0) -> int:
    """Byte position of the first line (from `start`) whose key(line) >= target, or `end`.

    Keys (offset, or ts) are non-decreasing through a segment, so a binary search
    over byte positions finds the line in O(log size) reads. Invariant: every line
    starting before `lo` has key < target; the first line at or after `hi` has
    key >= target or `hi` is `end`.
    """
    lo, hi = start, end
    while hi - lo > 65536:
        mid = (lo + hi) // 2
        found = line_at_or_after(fd, mid, hi, end)
        if found is None:
            hi = mid
        elif key(found[1]) >= target:
            hi = found[0]
        else:
            lo = found[0] + len(found[1])
    for pos, line in iter_lines(fd, lo, end):
        if key(line) >= target:
            return pos
    return end


def offset_key(line: bytes) -> int:
    return record.offset_of(line)


def ts_key(line: bytes) -> int:
    return record.envelope(line)[2]


def place(path: str, pos: int) -> str:
    """Where the line at byte `pos` of a segment is, for a message: `PATH:LINE: byte POS` (the line
    counted from 1 on this error path; `PATH: byte POS` when the file cannot be read)."""
    try:
        with open(path, "rb") as f:
            line, left = 1, pos
            while left > 0:
                block = f.read(min(left, 1 << 20))
                if not block:
                    return f"{path}: byte {pos}"
                line += block.count(b"\n")
                left -= len(block)
    except OSError:
        return f"{path}: byte {pos}"
    return f"{path}:{line}: byte {pos}"
