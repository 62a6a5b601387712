"""Crash-safe replacement of closed segments by a cleaned one (Kafka's `.cleaned` -> `.swap`).

A compaction writes the cleaned copy of a run of neighbouring closed segments
(B = the first one's base; every segment of the run has a base in [B, E), E =
the last one's base + 1) and installs it in
five steps; a kill -9 at any point leaves a state that `recover` turns into
either the old or the new one:

  1. write `B-E.cleaned`, fsync it                      (outside the partition lock)
  2. rename it to `B-E.swap`, fsync the folder          -- commit point --
  3. hard-link the swap to `B.install`, rename that over the segment `B.jsonl`,
     fsync the folder (readers now find the cleaned records under B)
  4. delete the other segments of the run (B < base < E), fsync the folder
  5. delete `B-E.swap`, fsync the folder

Steps 2-5 run under the partition lock (the Appender's flock on the partition
folder), so producers wait for a swap, never for a recopy. The `.swap` name
stays until the end so recovery knows exactly which run it replaces; step 3
replaces B before anything is deleted, so a reader that lists the folder in
between finds every surviving record (in B) and at worst some superseded
ones after it, in offset order, never a hole.

Recovery (the Appender runs it before each append, compaction before its
work, `check --repair` on request): a `.swap` is finished (steps 3-5, each
idempotent), a `.install` without its `.swap` is removed, and a `.cleaned` is
removed unless a live compaction holds the log's compaction lock (it may be
writing it right now).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from streamctl.errors import StorageError
from streamctl.storage.fsutil import NOFOLLOW, flock, folder_lock, fsync_dir, open_lock, unlock
from streamctl.storage.segment import NAME_DIGITS, list_segments, segment_name

CLEANED = ".cleaned"
SWAP = ".swap"
INSTALL = ".install"
COMPACT_LOCK = ".compact.lock"


def run_name(base: int, end: int, suffix: str) -> str:
    return f"{base:0{NAME_DIGITS}d}-{end:0{NAME_DIGITS}d}{suffix}"


def parse_run_name(name: str, suffix: str) -> tuple[int, int] | None:
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    a, sep, b = stem.partition("-")
    if sep and len(a) == NAME_DIGITS and len(b) == NAME_DIGITS and a.isdecimal() and b.isdecimal():
        return int(a), int(b)
    return None


def cleaned_path(pdir: str, base: int, end: int) -> str:
    return os.path.join(pdir, run_name(base, end, CLEANED))


def _install_path(pdir: str, base: int) -> str:
    return os.path.join(pdir, segment_name(base) + INSTALL)


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def partition_lock(pdir: str, timeout: float | None = None) -> AbstractContextManager[None]:
    """The Appender's lock: an exclusive flock on the partition folder itself."""
    return folder_lock(pdir, timeout)


@contextmanager
def compaction_lock(log_path: str) -> Iterator[None]:
    """One compaction (or retention) run per log at a time; released by the kernel on kill -9."""
    path = os.path.join(log_path, COMPACT_LOCK)
    fd = open_lock(path)
    try:
        try:
            # A short wait: `check` and the Appender's recovery probe this lock (shared, briefly).
            flock(fd, timeout=0.5)
        except StorageError:
            raise StorageError(f"{log_path}: another compaction is running (it holds {path})") from None
        try:
            yield
        finally:
            unlock(fd)
    finally:
        os.close(fd)


def compaction_running(log_path: str) -> bool:
    """True when some process holds the log's compaction lock (its .cleaned files are live)."""
    try:
        fd = os.open(os.path.join(log_path, COMPACT_LOCK), os.O_RDONLY | NOFOLLOW)
    except OSError:
        return False  # no lock file: no compaction ever ran here
    try:
        if flock(fd, exclusive=False, timeout=0):
            unlock(fd)
            return False
        return True
    finally:
        os.close(fd)


def _log_of(pdir: str) -> str:
    return os.path.dirname(os.path.normpath(pdir)) or "."


def leftovers(pdir: str) -> list[str]:
    """Names of interrupted-compaction files in a partition folder (none while a compaction runs)."""
    try:
        names = os.listdir(pdir)
    except FileNotFoundError:
        return []
    found = sorted(n for n in names if n.endswith((CLEANED, SWAP, INSTALL)))
    if found and compaction_running(_log_of(pdir)):
        return []
    return found


def superseded(pdir: str) -> set[str]:
    """Segments that a half-finished swap has already replaced (step 3 done, step 4 not).

    Their records are (as far as they survive) in the new segment B; readers
    skip them by offset, and `check` checks the partition as if they were gone.
    """
    out: set[str] = set()
    try:
        names = os.listdir(pdir)
    except FileNotFoundError:
        return out
    for name in names:
        run = parse_run_name(name, SWAP)
        if run is None:
            continue
        base, end = run
        try:
            done = (os.stat(os.path.join(pdir, segment_name(base)), follow_symlinks=False).st_ino
                    == os.stat(os.path.join(pdir, name)).st_ino)
        except FileNotFoundError:
            continue
        if done:
            out.update(s.path for s in list_segments(pdir) if base < s.base < end)
    return out


def install(pdir: str, cleaned: str, base: int, end: int) -> None:
    """Steps 2-5 for a fully written and fsynced `cleaned` file. Caller holds the partition lock."""
    swap = os.path.join(pdir, run_name(base, end, SWAP))
    os.rename(cleaned, swap)
    fsync_dir(pdir)
    _finish(pdir, base, end, swap)


def _finish(pdir: str, base: int, end: int, swap: str) -> None:
    """Steps 3-5; each is idempotent, so recovery can repeat them after a crash anywhere."""
    target = os.path.join(pdir, segment_name(base))
    try:
        done = os.stat(target, follow_symlinks=False).st_ino == os.stat(swap).st_ino
    except FileNotFoundError:
        done = False
    if not done:
        tmp = _install_path(pdir, base)
        _unlink(tmp)
        os.link(swap, tmp)
        os.rename(tmp, target)
        fsync_dir(pdir)
    removed = False
    for seg in list_segments(pdir):
        if base < seg.base < end:
            removed |= _unlink(seg.path)
    if removed:
        fsync_dir(pdir)
    os.unlink(swap)
    fsync_dir(pdir)


def recover(pdir: str, owner: bool = False) -> None:
    """Finish or remove what an interrupted compaction left in `pdir`. Caller holds the partition lock.

    `owner`: the caller holds the compaction lock itself, so every `.cleaned` is dead.
    Cheap when there is nothing to do (one listdir): the Appender calls it before each append.
    """
    try:
        names = os.listdir(pdir)
    except FileNotFoundError:
        return
    if not any(n.endswith((CLEANED, SWAP, INSTALL)) for n in names):
        return
    changed = False
    for name in sorted(names):
        run = parse_run_name(name, SWAP)
        if run is not None:
            try:
                _finish(pdir, run[0], run[1], os.path.join(pdir, name))
            except OSError as e:
                raise StorageError(f"{os.path.join(pdir, name)}: finishing an interrupted compaction failed: "
                                   f"{e.strerror}") from None
    names = os.listdir(pdir)
    live = None
    for name in names:
        path = os.path.join(pdir, name)
        if name.endswith(INSTALL):
            # Only ever left behind next to its .swap, which was finished above.
            changed |= _unlink(path)
        elif name.endswith(CLEANED):
            if live is None:
                live = not owner and compaction_running(_log_of(pdir))
            if not live:
                changed |= _unlink(path)
    if changed:
        fsync_dir(pdir)


def recover_partition(pdir: str, timeout: float | None = None) -> None:
    """`recover` under the partition lock (for `check --repair`)."""
    with partition_lock(pdir, timeout):
        recover(pdir)


def is_enospc(e: OSError) -> bool:
    return e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
