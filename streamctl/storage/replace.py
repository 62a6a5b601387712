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

A `.swap` is only finished once `validate_swap` accepts it: a file of that
name that is not what a compaction of its run could have written (copied in by
hand, restored from a backup, damaged) would otherwise delete the segments it
names. An invalid one is renamed `B-E.swap.rejected`, the segments it names
are left as they are, and the recovery says so on stderr; `check` reports both.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from streamctl.errors import StorageError
from streamctl.storage import record, segment
from streamctl.storage.fsutil import NOFOLLOW, flock, folder_lock, fsync_dir, open_lock, unlock
from streamctl.storage.segment import NAME_DIGITS, Segment, list_segments, segment_name

CLEANED = ".cleaned"
SWAP = ".swap"
INSTALL = ".install"
REJECTED = ".rejected"  # appended to the name of a .swap that failed validate_swap
COMPACT_LOCK = ".compact.lock"


def _stderr_warning(msg: str) -> None:
    try:
        sys.stderr.write(f"streamctl: warning: {msg}\n")
        sys.stderr.flush()
    except OSError:
        pass


# Where recovery reports a rejected swap (the CLI's stderr; tests may replace it).
warn: Callable[[str], None] = _stderr_warning


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
    segment.write_manifest(pdir)  # before the .swap goes: until then the swap's run explains the gaps
    os.unlink(swap)
    fsync_dir(pdir)


def validate_swap(pdir: str, base: int, end: int, swap: str) -> str | None:
    """Why `swap` cannot be what a compaction of the run [base, end) wrote, or None when it can.

    Read in full (only ever after a crash, so the cost is rare): the swap must end
    with a whole line, every line must be a record, offsets must increase and lie
    within the run's offsets (from `base` to just before the first segment after
    the run). And it must keep what compaction keeps of the segments it replaces
    that still exist: every record without a key, and each key's latest record
    there, unless that record is a tombstone (an expired one may go) or the key
    has a record in a later closed segment (compaction keeps only the latest).
    """
    segs = list_segments(pdir)
    swap_ino = os.stat(swap, follow_symlinks=False).st_ino

    def installed(s: Segment) -> bool:  # step 3 done: B already is the swap
        try:
            return s.base == base and os.stat(s.path, follow_symlinks=False).st_ino == swap_ino
        except FileNotFoundError:
            return False

    replaced = [s for s in segs if base <= s.base < end and not installed(s)]
    later = [s for s in segs if s.base >= end]
    limit = later[0].base if later else None
    span = f"{base}..{limit - 1}" if limit is not None else f"{base}.."
    have: dict[int, bytes] = {}  # offset -> key JSON text
    fd = segment.open_read(swap)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            return f"it does not end with a whole line ({size - segment.visible_end(fd, size)} byte(s) after the last one)"
        prev = -1
        for pos, line in segment.iter_lines(fd, 0, size):
            try:
                off = record.envelope(line)[0]
                key = record.key_bytes(line)
            except record.BadRecord as e:
                return f"byte {pos}: not a record ({e})"
            if off <= prev:
                return f"byte {pos}: offset {off} does not increase (previous {prev})"
            if off < base or (limit is not None and off >= limit):
                return f"byte {pos}: offset {off} is outside the offsets of the segments it replaces ({span})"
            have[off] = key
            prev = off
    finally:
        os.close(fd)
    latest: dict[bytes, tuple[int, bool]] = {}
    nulls: list[int] = []
    for s in replaced:
        try:
            fd = segment.open_read(s.path)
        except FileNotFoundError:
            continue
        try:
            for pos, line in segment.iter_lines(fd, 0, segment.visible_end(fd, os.fstat(fd).st_size)):
                try:
                    off = record.offset_of(line)
                    key = record.key_bytes(line)
                except record.BadRecord as e:
                    return f"{segment.place(s.path, pos)}: a segment it would replace is corrupt ({e}), so it cannot be checked"
                if key == b"null":
                    nulls.append(off)
                else:
                    latest[key] = (off, record.is_tombstone(line))
        finally:
            os.close(fd)
    for off in nulls:
        if off not in have:
            return f"it lacks offset {off}, a record without a key, which compaction always keeps"
    missing = {k: off for k, (off, tomb) in latest.items() if not tomb and have.get(off) != k}
    for s in later[:-1]:  # the closed segments after the run (the last one is the active segment)
        if not missing:
            break
        try:
            fd = segment.open_read(s.path)
        except FileNotFoundError:
            continue
        try:
            for block in segment.iter_blocks(fd, 0, segment.visible_end(fd, os.fstat(fd).st_size)):
                keys = record.block_keys(block, len(block))
                if keys is None:
                    keys = [record.key_bytes(ln) for ln in block.splitlines(keepends=True)]
                for k in set(keys).intersection(missing):
                    del missing[k]
        except record.BadRecord:
            pass  # then that key counts as missing: the swap is not trusted
        finally:
            os.close(fd)
    if missing:
        k, off = min(missing.items(), key=lambda kv: kv[1])
        more = f" (and {len(missing) - 1} more key(s))" if len(missing) > 1 else ""
        return (f"it lacks offset {off}, the latest record of key {k.decode(errors='replace')} in the segments "
                f"it replaces, and no later segment has that key{more}")
    return None


def reject(pdir: str, name: str, reason: str) -> str:
    """Move an invalid swap aside (never trusted again) and say so; returns its new path."""
    path = os.path.join(pdir, name)
    aside = path + REJECTED
    os.rename(path, aside)
    fsync_dir(pdir)
    warn(f"{path}: not a valid compaction swap: {reason}. It was not applied (the segments it names are "
         f"kept) and was moved to {aside}; inspect it, then delete it")
    return aside


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
                reason = validate_swap(pdir, run[0], run[1], os.path.join(pdir, name))
                if reason is not None:
                    reject(pdir, name, reason)
                    continue
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
