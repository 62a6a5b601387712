"""Where a group's files live in `LOG/groups/`, and how they are opened there.

    GROUP.json            committed offsets (the spec's name; 249 + 5 bytes fits)
    .STEM.lock            the offset file's lock
    .STEM.p<N>.claim      partition N's claim (membership)
    .STEM.m<N>.member     a live member's slot (membership)
    .STEM.window.json     window --follow --group's checkpoint, and its .STEM.window.lock

STEM is the group name itself up to STEM_MAX characters (every name of a short
group is as it always was); a longer name, up to the 249 that group names may
have, would not fit in a 255-byte file name with these prefixes and suffixes, so
its STEM is its first characters, `~` and 16 hex digits of its SHA-256. `~` is
not allowed in group names, so such a stem never meets another group's files.

Every write goes through an fd on the groups folder opened without following a
symlink (fsutil.open_dir): a `groups` that is a symlink, or not a folder, is refused
before anything is created, naming it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager

from streamctl.errors import StorageError
from streamctl.storage import fsutil
from streamctl.storage.log import Log

# 220 + the longest suffix (".m<N>.member" with a 10-digit N, or ".window.json" and its temp
# file's ".<pid>.tmp") + the leading dot stays within 255 bytes.
STEM_MAX = 220


def stem(group: str) -> str:
    """The part of the group's internal file names that names the group (see the module doc)."""
    if len(group) <= STEM_MAX:
        return group
    return f"{group[:160]}~{hashlib.sha256(group.encode()).hexdigest()[:16]}"


def internal_name(group: str, suffix: str) -> str:
    """`.STEM.SUFFIX`: a file of the group's that is not its offset file."""
    return f".{stem(group)}.{suffix}"


def path(log: Log, group: str, suffix: str) -> str:
    return os.path.join(log.groups_dir(), internal_name(group, suffix))


def open_dir(log: Log, create: bool = True) -> int:
    """An fd on LOG/groups (made when missing), never through a symlink."""
    return fsutil.open_dir(log.groups_dir(), create)


@contextmanager
def folder(log: Log, create: bool = True) -> Iterator[int]:
    fd = open_dir(log, create)
    try:
        yield fd
    finally:
        os.close(fd)


def open_lock(log: Log, group: str, suffix: str) -> int:
    """Open (creating) the group's lock file `.STEM.SUFFIX` in LOG/groups."""
    with folder(log) as dfd:
        return fsutil.open_lock(path(log, group, suffix), dir_fd=dfd)


def write(log: Log, target: str, data: bytes) -> None:
    """Replace the file `target` in LOG/groups with `data`, atomically (fsutil.atomic_write);
    a failure names the file and leaves the old one."""
    with folder(log) as dfd:
        try:
            fsutil.atomic_write(target, data, dir_fd=dfd)
        except OSError as e:
            raise StorageError(f"{target}: cannot write: {e.strerror}; the previous file is left as it was") from None
