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
from typing import BinaryIO

from streamctl.errors import BrokenPipe, StorageError

DEFAULT_BUFFER = 1 << 16


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
        self.bytes_written = 0

    def write(self, data: bytes) -> bool:
        """Queue data; returns True when everything queued so far has been flushed."""
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
        try:
            if self.fd is not None:
                view = memoryview(data)
                while view:
                    n = os.write(self.fd, view)
                    view = view[n:]
            else:
                self.stream.write(data)
                self.stream.flush()
        except BrokenPipeError:
            self._silence()
            raise BrokenPipe(f"{self.name}: the reader closed the pipe") from None
        except OSError as e:
            if e.errno == errno.EPIPE:
                self._silence()
                raise BrokenPipe(f"{self.name}: the reader closed the pipe") from None
            raise StorageError(f"{self.name}: write failed: {e.strerror}") from None
        self.bytes_written += len(data)

    def pending(self) -> int:
        return len(self._buf)

    def _silence(self) -> None:
        if self.fd is None:
            return
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.fd)
            os.close(devnull)
        except OSError:
            pass
