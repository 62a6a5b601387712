"""File-system primitives that the rest of the core relies on for crash safety."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager

from streamctl.errors import StorageError

NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
NAME_MAX = 255  # bytes in one file name (ext4, xfs, btrfs, tmpfs)


def open_dir(path: str, create: bool = False) -> int:
    """An fd on the folder `path`, never through a symlink at its last component.

    For folders inside a log (groups/, pN/, state folders) that files are then
    written into with `dir_fd=`: a symlink planted there cannot send a write
    outside the log. `create` makes the folder first when it is missing. The
    path's earlier components (the log's own path as the user gave it) are followed.
    """
    if create:
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            pass  # a folder, or a symlink/file that the open below refuses
        except OSError as e:
            raise StorageError(f"{path}: cannot create folder: {e.strerror}") from None
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(path):
            raise StorageError(f"{path} is a symlink; refusing to write through it "
                               "(replace it with a real folder)") from None
        if e.errno == errno.ENOTDIR:
            raise StorageError(f"{path} is not a folder; move it away") from None
        raise StorageError(f"{path}: cannot open folder: {e.strerror}") from None


@contextmanager
def folder(path: str, create: bool = False) -> Iterator[int]:
    """`open_dir` as a context manager: the fd is closed on exit."""
    fd = open_dir(path, create)
    try:
        yield fd
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    """Make a rename or create in `path` durable (KAFKA-3968: fsync the folder too)."""
    fd = open_dir(path)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def makedirs_durable(path: str) -> list[str]:
    """`os.makedirs(path, exist_ok=True)`, each folder it creates made durable: the folder that
    holds it is fsynced right after the mkdir (a new entry lives in its parent, and a power cut
    can lose an entry whose folder was never synced: `a/new1/new2/log` needs `a`, `new1` and
    `new2` synced, not only the log's own parent). Returns the folders created, outermost first."""
    missing: list[str] = []
    cur = os.path.abspath(path)
    while not os.path.isdir(cur):
        missing.append(cur)
        parent = os.path.dirname(cur)
        if parent == cur:
            break
        cur = parent
    created: list[str] = []
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o777)  # the umask applies, as with os.makedirs
        except FileExistsError:
            if not os.path.isdir(d):
                raise
            continue  # made by another process meanwhile: its creator syncs it
        created.append(d)
        fsync_dir(os.path.dirname(d))
    return created


def short_name(name: str, room: int = 0) -> str:
    """`name`, or when it (plus `room` more bytes) would not fit in a file name, its first
    characters, `~` and a hash of it all: the same name every time, and no valid group or
    file name of ours contains `~`, so a shortened name never meets a real one."""
    if len(name.encode()) + room <= NAME_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    keep = max(0, NAME_MAX - room - 17)
    return f"{name.encode()[:keep].decode(errors='ignore')}~{digest}"


def tmp_name(name: str) -> str:
    """The temp file `atomic_write` writes before renaming it to `name` (fits in NAME_MAX)."""
    pid = str(os.getpid())
    return f".{short_name(name, len(pid) + 6)}.{pid}.tmp"
def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write every byte or raise; a short write is retried so the kernel names the error."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, "write returned 0")
        view = view[n:]


def atomic_write(path: str, data: bytes, mode: int = 0o644, dir_fd: int | None = None) -> None:
    """Replace `path` with `data`: temp file in the same folder, fsync, rename, fsync folder.

    A crash leaves either the old or the new content, never a mix; a failure leaves
    the old file untouched and removes the temp file. With `dir_fd` (an fd from
    `open_dir` on the folder of `path`) every step happens in that folder, never
    through a symlink; without it the folder is the user's path, opened as given.
    """
    name = os.path.basename(path)
    dfd = dir_fd if dir_fd is not None else os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _atomic_write_in(dfd, path, name, data, mode)
    finally:
        if dir_fd is None:
            os.close(dfd)


def _atomic_write_in(dfd: int, path: str, name: str, data: bytes, mode: int) -> None:
    tmp = tmp_name(name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW, mode, dir_fd=dfd)
    try:
        write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(tmp, dfd)
        raise
    os.close(fd)
    try:
        try:
            st = os.lstat(name, dir_fd=dfd)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISLNK(st.st_mode):
                raise StorageError(f"refusing to replace symlink {path}")
            if stat.S_ISDIR(st.st_mode):
                raise StorageError(f"{path} is a folder; move it away")
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        _unlink_quietly(tmp, dfd)
        raise
    os.fsync(dfd)


def _unlink_quietly(path: str, dir_fd: int | None = None) -> None:
    try:
        os.unlink(path, dir_fd=dir_fd)
    except OSError:
        pass


def open_lock(path: str, dir_fd: int | None = None) -> int:
    """Open (creating) a lock file without following a planted symlink (with `dir_fd`: the
    file `basename(path)` in that folder)."""
    try:
        if dir_fd is None:
            return os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o644)
        return os.open(os.path.basename(path), os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o644, dir_fd=dir_fd)
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
    fd = open_dir(path)
    try:
        flock(fd, timeout=timeout, what=path)
        try:
            yield
        finally:
            unlock(fd)
    finally:
        os.close(fd)
