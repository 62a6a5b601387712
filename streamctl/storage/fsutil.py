"""File-system primitives that the rest of the core relies on for crash safety."""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from streamctl.errors import StorageError

NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def fsync_dir(path: str) -> None:
    """Make a rename or create in `path` durable (KAFKA-3968: fsync the folder too)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write every byte or raise; a short write is retried so the kernel names the error."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, "write returned 0")
        view = view[n:]


def atomic_write(path: str, data: bytes, mode: int = 0o644) -> None:
    """Replace `path` with `data`: temp file in the same folder, fsync, rename, fsync folder.

    A crash leaves either the old or the new content, never a mix; a failure leaves
    the old file untouched and removes the temp file.
    """
    folder = os.path.dirname(path) or "."
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW, mode)
    try:
        write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(tmp)
        raise
    os.close(fd)
    try:
        if os.path.islink(path):
            raise StorageError(f"refusing to replace symlink {path}")
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    fsync_dir(folder)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def open_lock(path: str) -> int:
    """Open (creating) a lock file without following a planted symlink."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise StorageError(f"{path} is a symlink; refusing to use it as a lock") from None
        raise


def flock(fd: int, exclusive: bool = True, timeout: float | None = None, what: str = "") -> bool:
    """Take an flock, waiting up to `timeout` seconds (None = forever, 0 = try once).

    Returns False only when timeout == 0 and the lock is held elsewhere; raises
    StorageError when a positive timeout runs out.
    """
    op = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    if timeout is None:
        fcntl.flock(fd, op)
        return True
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if timeout == 0:
                return False
            if time.monotonic() >= deadline:
                raise StorageError(
                    f"timed out after {timeout:g}s waiting for the lock on {what or 'the log'} "
                    "(another streamctl process holds it; see --lock-timeout)"
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def unlock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)


@contextmanager
def folder_lock(path: str, timeout: float | None = None) -> Iterator[None]:
    """An exclusive flock on a folder itself: the partition lock every segment writer takes."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW)
    try:
        flock(fd, timeout=timeout, what=path)
        try:
            yield
        finally:
            unlock(fd)
    finally:
        os.close(fd)
