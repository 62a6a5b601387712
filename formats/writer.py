"""The one writer that owns stdout.

Batches writes on a pipe or file, flushes per record on a terminal (or with
`unbuffered`), and turns a closed pipe into BrokenPipe (exit 141) after
pointing fd 1 at /dev/null, so the interpreter's own flush at exit cannot
print a second error. SIGPIPE is left alone (the Spark engine has sockets).
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from typing import BinaryIO

from streamctl.errors import BrokenPipe, StorageError

DEFAULT_BUFFER = 1 << 16
COPY_CHUNK = 1 << 23  # bytes per sendfile call; a stop request is honoured between calls
CHUNK_FALLBACK = 1 << 20  # bytes per pread where sendfile cannot write (O_APPEND files)
_NO_SENDFILE = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP}


class Output:
    def __init__(self, stream: BinaryIO | None = None, unbuffered: bool | None = None,
                 buffer_size: int = DEFAULT_BUFFER, name: str = "stdout") -> None:
        self.stream = stream if stream is not None else sys.stdout.buffer
        try:
            self.fd: int | None = self.stream.fileno()
        except (AttributeError, OSError, ValueError):
            self.fd = None
        if unbuffered is None:
            unbuffered = self.fd is not None and os.isatty(self.fd)
        self.limit = 0 if unbuffered else buffer_size
        self.name = name
        self._buf = bytearray()

    def write(self, data: bytes) -> bool:
        """Queue data; returns True when everything queued so far has been flushed."""
        if len(data) > self.limit and self.limit:
            # a large piece (a join's chunk of rows) goes out as it is, not copied into the buffer
            self.flush()
            self._put(data)
            return True
        self._buf += data
        if len(self._buf) > self.limit:
            self.flush()
            return True
        return False

    def flush(self) -> None:
        if not self._buf:
            return
        data = bytes(self._buf)
        self._buf.clear()
        self._put(data)

    def _put(self, data: bytes) -> None:
        try:
            if self.fd is not None:
                view = memoryview(data)
                while view:
                    n = os.write(self.fd, view)
                    view = view[n:]
            else:
                self.stream.write(data)
                self.stream.flush()
        except OSError as e:
            raise self._failed(e) from None

    def copy_range(self, src: int, lo: int, hi: int, stop: Callable[[], bool] | None = None) -> bool:
        """Write bytes [lo, hi) of file descriptor `src`, whole lines, without copying them
        through Python (sendfile). Returns False if `stop()` turned true, after
        finishing the line at hand so the reader never sees half a record."""
        self.flush()
        pos = lo
        while pos < hi:
            if stop is not None and stop():
                end = _line_end(src, pos, hi) if pos > lo else pos
                while pos < end:
                    pos += self._send(src, pos, end - pos)
                return False
            pos += self._send(src, pos, min(COPY_CHUNK, hi - pos))
        return True

    def _send(self, src: int, pos: int, n: int) -> int:
        try:
            try:
                if self.fd is None:
                    raise OSError(errno.ENOSYS, "no file descriptor")
                sent = os.sendfile(self.fd, src, pos, n)
            except OSError as e:
                if e.errno not in _NO_SENDFILE:
                    raise
                # O_APPEND files and the like: the ordinary way, one chunk at a time
                data = os.pread(src, min(n, CHUNK_FALLBACK), pos)
                self.write(data)
                self.flush()
                sent = len(data)
        except OSError as e:
            raise self._failed(e) from None
        if sent == 0:
            raise StorageError(f"{self.name}: the file being copied shrank while it was read")
        return sent

    def pending(self) -> int:
        return len(self._buf)

    def _failed(self, e: OSError) -> Exception:
        """The error to raise for a failed write: a closed pipe is BrokenPipe (exit 141)."""
        if e.errno == errno.EPIPE:
            self._silence()
            return BrokenPipe(f"{self.name}: the reader closed the pipe")
        return StorageError(f"{self.name}: write failed: {e.strerror}")

    def _silence(self) -> None:
        if self.fd is None:
            return
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.fd)
            os.close(devnull)
        except OSError:
            pass


def _line_end(fd: int, pos: int, hi: int) -> int:
    """Byte position just past the line that `pos` is inside of (pos must not be a line start)."""
    if os.pread(fd, 1, pos - 1) == b"\n":
        return pos
    while pos < hi:
        buf = os.pread(fd, min(65536, hi - pos), pos)
        i = buf.find(b"\n")
        if i >= 0:
            return pos + i + 1
        if not buf:
            break
        pos += len(buf)
    return hi
