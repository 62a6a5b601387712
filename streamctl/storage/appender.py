"""Appending records to a partition: the only code that writes to segments (besides compaction).

Each append takes the partition's exclusive flock (on the partition folder
itself), finds the true end of the active segment, truncates a torn tail left
by a crashed writer, writes whole lines in one buffered batch, checks every
write's byte count, truncates back on a failed or short write, and fsyncs per
policy. An fsync error is final: it is reported, never retried (fsyncgate).
"""

from __future__ import annotations

import errno
import os
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import accumulate, compress, count, repeat
from typing import Any

from streamctl.errors import StorageError
from streamctl.storage import record
from streamctl.storage.fsutil import NOFOLLOW, flock, fsync_dir, open_dir, unlock, write_all
from streamctl.storage.log import Log
from streamctl.storage.replace import recover as _finish_interrupted_swaps
from streamctl.storage.segment import (
    cut_torn_tail,
    last_line,
    list_segments,
    place,
    segment_name,
    visible_end,
    write_manifest,
)
from streamctl.timeparse import now_ms

FSYNC_POLICIES = ("always", "batch", "never")

# (key JSON text, value JSON text, headers JSON text or None)
Item = tuple[bytes, bytes, "bytes | None"]


@dataclass
class AppendResult:
    partition: int
    first_offset: int
    last_offset: int
    lines: list[bytes] | None = None


@dataclass(frozen=True)
class Stamped:
    """Headers that differ per record by one number (produce --follow's position marks): record i's
    headers JSON text is `template % numbers[i]`. append_texts puts the template into its line
    format, so a record costs one format call, not two and a list of headers in between."""

    template: bytes  # a headers JSON object text with one %d (any other % doubled)
    numbers: Sequence[int]

    def texts(self) -> list[bytes]:
        return list(map(self.template.__mod__, self.numbers))


@dataclass
class _Tail:
    """What this process last knew of a partition's active segment."""

    path: str = ""
    fd: int = -1
    ino: int = -1
    size: int = -1
    next_offset: int = 0
    last_ts: int = 0


def _os_error(e: OSError, path: str, what: str) -> StorageError:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        reason = "disk full"
    elif e.errno == errno.EFBIG:
        reason = "file size limit reached (ulimit -f)"
    else:
        reason = e.strerror or str(e)
    return StorageError(f"{path}: {what} failed: {reason}")


def _last_envelope(path: str, line: bytes, end: int, fd: int = -1) -> tuple[int, int, int]:
    """(offset, partition, ts) of a segment's last line, which gives the next offset; a line that
    is not a record is named by segment and byte (it is the log that is damaged, not the input)."""
    try:
        return record.envelope(line)
    except record.BadRecord as e:
        if fd >= 0:
            os.close(fd)
        raise StorageError(f"{place(path, end - len(line))}: the last line of the segment is not a record ({e}), "
                           "so the next offset is unknown and nothing was appended; run `streamctl check` on the "
                           "log, then move the damaged line out of the segment") from None


class Appender:
    def __init__(self, log: Log, fsync: str = "batch", lock_timeout: float | None = None,
                 clock: Callable[[], int] = now_ms) -> None:
        self.log = log
        self.fsync = fsync
        self.lock_timeout = lock_timeout
        self.clock = clock
        self._locks: dict[int, int] = {}
        self._tails: dict[int, _Tail] = {}
        # Called with (partition dir) under the lock before each append; the
        # compaction module installs its recovery of interrupted swaps here.
        self.recover: Callable[[str], None] | None = _finish_interrupted_swaps
        # Called with (partition, items, next offset) under the lock, once the
        # partition's end is known; returns the items to write, possibly none.
        # Exactly-once producers drop records whose source was already appended
        # here, so two producers of the same source cannot both append it.
        self.filter: Callable[[int, Sequence[Item], int], Sequence[Item]] | None = None

    def close(self) -> None:
        for t in self._tails.values():
            if t.fd >= 0:
                os.close(t.fd)
        for fd in self._locks.values():
            os.close(fd)
        self._tails.clear()
        self._locks.clear()

    def __enter__(self) -> Appender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _lock_fd(self, p: int) -> int:
        fd = self._locks.get(p)
        if fd is None:
            fd = open_dir(self.log.partition_dir(p))  # never through a symlink: refused, naming it
            self._locks[p] = fd
        return fd

    def append(self, p: int, items: Sequence[Item], want_lines: bool = False) -> AppendResult:
        """Append items to partition p as one batch; returns the offsets they got."""
        if not items:
            raise ValueError("empty batch")
        with self._locked(p) as tail:
            if self.filter is not None:
                items = self.filter(p, items, tail.next_offset)
                if not items:
                    return AppendResult(p, tail.next_offset, tail.next_offset - 1, [] if want_lines else None)
            return self._write(p, tail, items, want_lines)

    @contextmanager
    def _locked(self, p: int) -> Iterator[_Tail]:
        """Partition p's lock held, leftovers of a crashed compaction swap recovered, its tail found."""
        lock = self._lock_fd(p)
        flock(lock, timeout=self.lock_timeout, what=f"{self.log.path}/p{p}")
        try:
            if self.recover is not None:
                self.recover(self.log.partition_dir(p))
            yield self._refresh(p)
        finally:
            unlock(lock)

    def append_texts(self, p: int, keys: bytes | Sequence[bytes], values: Sequence[Any],
                     headers: Sequence[bytes | None] | Stamped | None = None,
                     want_lines: bool = False) -> AppendResult:
        """Append records given as JSON texts, each line built by one C-level format call: produce's fast lanes.

        keys: one key JSON text for every record, or one per record; values: value JSON texts
        (bytes, or buffers such as msgspec.Raw); headers: None, or per record a headers JSON
        text or None, or Stamped. The lines are record.encode's, byte for byte, as append() writes them.
        """
        if self.filter is not None:
            ks = repeat(keys) if isinstance(keys, bytes) else keys
            hs: Any = repeat(None) if headers is None else headers.texts() if isinstance(headers, Stamped) else headers
            return self.append(p, [(k, bytes(v), h) for k, v, h in zip(ks, values, hs, strict=False)], want_lines)
        with self._locked(p) as tail:
            ts = max(self.clock(), tail.last_ts)
            # record.encode's layout, everything but the offset, key, value and headers fixed for the batch
            fmt = b'{"offset":%%d,"partition":%d,"ts":%d,"key":' % (p, ts)
            cols: list = [count(tail.next_offset)]
            if isinstance(keys, bytes):
                fmt += keys.replace(b"%", b"%%") + b',"value":%b'
            else:
                fmt += b'%b,"value":%b'
                cols.append(keys)
            cols.append(values)
            if isinstance(headers, Stamped):
                fmt += b',"headers":' + headers.template
                cols.append(headers.numbers)
            elif headers is not None and any(headers):
                members = [b""] * len(values)
                deque(map(members.__setitem__, compress(count(), headers),
                          map(b',"headers":'.__add__, filter(None, headers))), maxlen=0)
                fmt += b"%b"
                cols.append(members)
            lines = list(map((fmt + b"}\n").__mod__, zip(*cols, strict=False)))
            return self._write_list(p, tail, ts, lines, want_lines)

    def _refresh(self, p: int) -> _Tail:
        """Find the active segment's end under the lock; reuse what we knew if unchanged."""
        pdir = self.log.partition_dir(p)
        segs = list_segments(pdir)
        tail = self._tails.get(p) or _Tail()
        if not segs:
            path = os.path.join(pdir, segment_name(0))
            fd = os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o644)
            fsync_dir(pdir)
            write_manifest(pdir)
            segs = list_segments(pdir)
            os.close(fd)
        active = segs[-1]
        st = os.stat(active.path, follow_symlinks=False)
        if tail.path == active.path and tail.ino == st.st_ino and tail.size == st.st_size:
            return tail
        if tail.fd >= 0:
            os.close(tail.fd)
            self._tails.pop(p, None)  # closed: an error below must not leave it to be closed twice
        fd = os.open(active.path, os.O_RDWR | NOFOLLOW)
        try:
            # A crashed writer may have left a partial line: never visible, now removed.
            end = cut_torn_tail(fd)
        except OSError as e:
            os.close(fd)
            raise _os_error(e, active.path, "truncating a torn tail") from None
        last = last_line(fd, end)
        if last is not None:
            off, _, ts = _last_envelope(active.path, last, end, fd)
            next_offset, last_ts = off + 1, ts
        else:
            next_offset, last_ts = active.base, 0
            for seg in reversed(segs[:-1]):
                sfd = os.open(seg.path, os.O_RDONLY | NOFOLLOW)
                try:
                    send = visible_end(sfd, os.fstat(sfd).st_size)
                    prev = last_line(sfd, send)
                finally:
                    os.close(sfd)
                if prev is not None:
                    off, _, last_ts = _last_envelope(seg.path, prev, send)
                    next_offset = max(next_offset, off + 1)
                    break
        tail = _Tail(active.path, fd, os.fstat(fd).st_ino, end, next_offset, last_ts)
        self._tails[p] = tail
        return tail

    def _roll(self, p: int, tail: _Tail) -> None:
        pdir = self.log.partition_dir(p)
        path = os.path.join(pdir, segment_name(tail.next_offset))
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644)
            fsync_dir(pdir)
            write_manifest(pdir)
        except FileExistsError:
            fd = os.open(path, os.O_RDWR | NOFOLLOW)
        except OSError as e:
            raise _os_error(e, path, "creating a segment") from None
        os.close(tail.fd)
        tail.path, tail.fd, tail.ino, tail.size = path, fd, os.fstat(fd).st_ino, os.fstat(fd).st_size

    def _flush(self, tail: _Tail, buf: bytes) -> None:
        if not buf:
            return
        before = tail.size
        try:
            os.lseek(tail.fd, before, os.SEEK_SET)
            write_all(tail.fd, buf)
        except OSError as e:
            err = _os_error(e, tail.path, "write")
            try:
                os.ftruncate(tail.fd, before)
            except OSError:
                pass
            raise err from None
        if self.fsync != "never":
            try:
                os.fsync(tail.fd)
            except OSError as e:
                err = _os_error(e, tail.path, "fsync")
                try:
                    os.ftruncate(tail.fd, before)
                except OSError:
                    pass
                # fsyncgate: after a failed fsync the page cache may lie; never retry.
                tail.size = -1
                raise StorageError(f"{err}; the batch was not acknowledged and is not retried") from None
        tail.size = before + len(buf)

    def _write(self, p: int, tail: _Tail, items: Sequence[Item], want_lines: bool) -> AppendResult:
        ts = max(self.clock(), tail.last_ts)
        middle = b',"partition":%d,"ts":%d,"key":' % (p, ts)
        # record.encode's layout, inlined (hot loop: one format call per record, no function call)
        lines = [b'{"offset":%d%s%s,"value":%s}\n' % (off, middle, key, value) if headers is None
                 else b'{"offset":%d%s%s,"value":%s,"headers":%s}\n' % (off, middle, key, value, headers)
                 for off, (key, value, headers) in zip(count(tail.next_offset), items)]
        return self._write_list(p, tail, ts, lines, want_lines)

    def _write_list(self, p: int, tail: _Tail, ts: int, lines: list[bytes], want_lines: bool) -> AppendResult:
        """Write encoded lines (offsets tail.next_offset, +1, ...) in one batch, rolling segments.

        A line goes into the active segment while the segment is smaller than segment_bytes
        before it (the first line of an empty segment always does); each segment's share is
        written with one write and, per policy, one fsync.
        """
        seg_bytes = self.log.meta.segment_bytes
        first = tail.next_offset
        n = len(lines)
        ends = list(accumulate(map(len, lines)))  # ends[k]: bytes of lines[0..k]
        try:
            if n and tail.size >= seg_bytes and tail.size > 0:
                self._roll(p, tail)
            i = 0
            while i < n:
                # lines i.. up to the first that would start at or past segment_bytes (line i always)
                j = min(bisect_left(ends, seg_bytes - tail.size + (ends[i - 1] if i else 0), i) + 1, n)
                self._flush(tail, b"".join(lines[i:j]))
                i = j
                if i < n:
                    tail.next_offset = first + i
                    self._roll(p, tail)
        except StorageError:
            # Offsets of this batch were not written; forget our cached view.
            self._forget(p)
            raise
        tail.next_offset = first + n
        tail.last_ts = ts
        return AppendResult(p, first, first + n - 1, lines if want_lines else None)

    def _forget(self, p: int) -> None:
        tail = self._tails.pop(p, None)
        if tail is not None and tail.fd >= 0:
            os.close(tail.fd)
