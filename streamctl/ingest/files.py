"""Followed files: found by name or glob, known by identity, read line by line as they grow.

A file is known by its device, inode and fingerprint (a hash of its first bytes, up to
FP_BYTES; Filebeat's way), not by its name: after a rotation by rename the old file is
still the same file under a new name (read to its end), and the new file of that name
is another one (read from its start). A file whose first bytes changed, or that became
shorter than where it was read to, was truncated in place (copytruncate) or its inode
was reused: it is read again from its start, as a new generation with a new ID.

Only whole lines are handed out: bytes after the last `\n` wait in `carry` (and are
read again from `pos` after a restart).
"""

from __future__ import annotations

import glob
import hashlib
import os
import time
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from operator import add

from streamctl.clients.inputlines import BOM, Batch, TooLong
from streamctl.ingest import positions
from streamctl.ingest.positions import FileEntry
from streamctl.storage.log import Log

FP_BYTES = 1024


def fingerprint(data: bytes) -> str:
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()


@dataclass
class Read:
    """Whole lines read from a file: their batch, and the byte offset where each line starts."""

    batch: Batch
    starts: list[int]
    end: int  # the position after the last line's `\n`
    first_line: int = 1  # the line number (from 1) of the batch's first line in the file


@dataclass
class Followed:
    """An open followed file."""

    entry: FileEntry  # entry.pos: appended up to here
    fd: int
    next: int = 0  # read up to here: the end of the last whole line handed out
    next_line: int = 0  # the lines before `next` (a line over the limit counts as one)
    head: bytes = b""  # its first bytes (up to FP_BYTES), for the fingerprint
    carry: bytes = b""  # read after `next`: the start of a line whose `\n` is not written yet
    skipping: int = 0  # > 0: inside a line longer than the limit, this many bytes of it seen
    skip_start: int = 0
    recover_until: int = -1  # lines starting at or before this may be in the log already (a killed run's)
    rotated_at: float | None = None  # monotonic time its name was seen pointing elsewhere (or nowhere)
    last_data: float = field(default_factory=time.monotonic)

    @property
    def read_to(self) -> int:
        return self.next + len(self.carry) + self.skipping

    def truncated(self) -> bool:
        """Did the file shrink below what was read, or its first bytes change (copytruncate)?"""
        try:
            size = os.fstat(self.fd).st_size
        except OSError:
            return False
        if size < self.read_to:
            return True
        if self.head:
            try:
                return os.pread(self.fd, len(self.head), 0) != self.head
            except OSError:
                return False
        return False

    def read(self, max_bytes: int, max_line: int) -> Read | None:
        """The whole lines written since the last read (up to about max_bytes), or None when there are none.

        A line longer than max_line is handed out as a TooLong once its `\n` is written (its bytes are not kept).
        """
        at = self.read_to
        first_line = self.next_line + 1
        try:
            data = os.pread(self.fd, max_bytes, at)
        except OSError:
            return None
        if not data:
            return None
        # The first bytes again, after the data: a file truncated in place (copytruncate) and written past
        # `at` again before this read would otherwise hand out the new content's bytes from `at` on as the
        # old content's next lines (and its fingerprint would become the new content's). Changed: nothing
        # of `data` is used, and the caller's truncated() starts the new content from its start.
        try:
            head = os.pread(self.fd, max(len(self.head), min(FP_BYTES, at + len(data))), 0)
        except OSError:
            return None
        if not head.startswith(self.head):
            return None
        self.head = head
        self.last_data = time.monotonic()
        out_lines: list[bytes | TooLong] = []
        starts: list[int] = []
        text: bytes | None = None
        start = 0
        if self.skipping:
            i = data.find(b"\n")
            if i < 0:
                self.skipping += len(data)
                return None
            out_lines.append(TooLong(self.skipping + i))
            starts.append(self.skip_start)
            self.next = self.skip_start + self.skipping + i + 1
            self.skipping = 0
            start = i + 1
        buf = self.carry + data[start:] if self.carry else data[start:]
        base = self.next
        last = buf.rfind(b"\n")
        if last < 0:
            self.carry = buf
        else:
            whole = buf[:last]
            self.carry = buf[last + 1:]
            lines = whole.split(b"\n")
            starts += accumulate(map(add, map(len, lines[:-1]), repeat(1)), initial=base)
            self.next = base + last + 1
            if base == 0 and whole.startswith(BOM):
                # a UTF-8 byte order mark before the file's first line is no part of it (as for produce's
                # inputs); the line's start (its mark) stays where the line starts in the file
                lines[0] = lines[0][len(BOM):]
                whole = whole[len(BOM):]
            if b"\r" in whole:  # CRLF line endings: the \r is not part of the record
                lines = [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]
            if max(map(len, lines)) > max_line:
                out_lines += [ln if len(ln) <= max_line else TooLong(len(ln)) for ln in lines]
            else:
                text = whole if not out_lines else None
                out_lines += lines
        if len(self.carry) > max_line:
            # a line over the limit: stop keeping it, skip to its end
            self.skip_start, self.skipping, self.carry = self.next, len(self.carry), b""
        if not out_lines:
            return None
        self.next_line += len(out_lines)
        return Read(Batch(1, out_lines, text), starts, self.next, first_line)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def expand(pattern: str) -> list[str]:
    """The files a FILE argument names now: a glob's matches (sorted), or the name itself if it exists."""
    if glob.has_magic(pattern):
        return sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
    return [pattern] if os.path.isfile(pattern) else []


def known_head(entry: FileEntry, fd: int) -> bytes | None:
    """The first bytes of the open file `fd` (same device and inode as entry) if it is still the file the
    entry knew: not shorter than the position, and the bytes the fingerprint covers unchanged; else None.

    One read gives both the check and the head a Followed keeps to notice a later truncation: read apart,
    a copytruncate between them would leave an empty head that any new content passes."""
    want = min(FP_BYTES, max(entry.pos, entry.fp_len))
    try:
        head = os.pread(fd, want, 0)
        if len(head) < want or os.fstat(fd).st_size < entry.pos:
            return None
    except OSError:
        return None
    if entry.fp_len and fingerprint(head[:entry.fp_len]) != entry.fp:
        return None
    return head


def count_lines(fd: int, end: int) -> int:
    """The lines in the first `end` bytes of a file (each ends with a newline)."""
    n = at = 0
    while at < end:
        data = os.pread(fd, min(1 << 20, end - at), at)
        if not data:
            break
        n += data.count(b"\n")
        at += len(data)
    return n


def find_in_folder(entry: FileEntry) -> str | None:
    """Where a known file is now, looked for in the folder it was last seen in (a rotation renames it there)."""
    folder = os.path.dirname(entry.path) or "."
    try:
        st = os.stat(entry.path)
        if (st.st_dev, st.st_ino) == (entry.dev, entry.ino):
            return entry.path
    except OSError:
        pass
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    for name in sorted(names):
        path = os.path.join(folder, name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (entry.dev, entry.ino):
            return path
    return None


@dataclass
class FileStat:
    """A followed file as `stat` shows it."""

    file: str  # the name it was last seen under
    id: str
    position: int  # bytes read and appended
    size: int | None  # its size now (None: it is gone)
    unread: int | None  # size - position (None: it is gone)
    state: str  # active (under its name) | rotated (renamed away) | truncated | gone


def file_stats(log: Log) -> list[FileStat]:
    """Each followed file's position and how many of its bytes are not in the log yet."""
    out = []
    for e in positions.load(log).files.values():
        where = find_in_folder(e)
        size = None
        if where is not None:
            try:
                size = os.stat(where).st_size
            except OSError:
                where = None
        if size is None:
            out.append(FileStat(e.path, e.id, e.pos, None, None, "gone"))
        elif size < e.pos:
            out.append(FileStat(where or e.path, e.id, e.pos, size, 0, "truncated"))
        else:
            state = "rotated" if e.rotated or where != e.path else "active"
            out.append(FileStat(where or e.path, e.id, e.pos, size, size - e.pos, state))
    return out
