"""Consumer-group offset files: `groups/GROUP.json`, the next offset to read per partition.

    {"format": 1, "group": "billing", "offsets": {"0": 42, "1": 17}}

Written atomically (temp file, fsync, rename, fsync folder) under an flock on
`groups/.GROUP.lock` (groups/files.py names it) so competing members committing
different partitions do not lose each other's commits, through an fd on the
groups folder that never follows a symlink. Validated on load: a corrupt file is
an error that names the file, never a silent reset to 0 (Filebeat's NUL-filled
registry). A failed write names the file and says that the offsets were not saved.
"""

from __future__ import annotations

import errno
import os
import stat

import orjson

from streamctl.errors import StorageError, UsageError
from streamctl.groups import files
from streamctl.storage.fsutil import NOFOLLOW, atomic_write, flock, open_lock, unlock
from streamctl.storage.log import Log
from streamctl.storage.names import check_group

MAX_FILE = 16 << 20


class OffsetFileError(StorageError):
    pass


def reset_command(log_path: str, group: str, to: str) -> str:
    """The offset reset that repairs a group's offsets, ready to paste into a shell."""
    import shlex

    return f"streamctl replay {shlex.quote(log_path)} --group {group} {to} --execute"


def parse_offsets(raw: bytes, partitions: int, where: str = "offset file", log_path: str | None = None,
                  group: str | None = None) -> dict[int, int]:
    """Bytes of a group file -> {partition: next offset}. Raises OffsetFileError, nothing else.
    `log_path` and `group` fill in the reset command the messages suggest."""
    reset = (reset_command(log_path, group, "--to-earliest") if log_path is not None and group is not None
             else "streamctl replay LOG --group G --to-earliest --execute")
    hint = f"fix or delete it, or reset it with `{reset}`"
    if not raw.strip(b" \t\r\n"):
        raise OffsetFileError(f"{where}: empty offset file; {hint}")
    if b"\x00" in raw:
        raise OffsetFileError(f"{where}: offset file contains NUL bytes (torn by a crash or power loss); {hint}")
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise OffsetFileError(f"{where}: offset file is not valid JSON ({e}); {hint}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("offsets"), dict):
        raise OffsetFileError(f"{where}: offset file must be an object with an \"offsets\" object; {hint}")
    out: dict[int, int] = {}
    for k, v in obj["offsets"].items():
        if not (isinstance(k, str) and k.isdecimal() and k.isascii()):
            raise OffsetFileError(f"{where}: partition {k!r} is not a partition number; {hint}")
        p = int(k)
        if p >= partitions:
            raise OffsetFileError(f"{where}: partition {p} does not exist in this log ({partitions} partitions); {hint}")
        if not isinstance(v, int) or isinstance(v, bool) or v < 0 or v >= 1 << 63:
            raise OffsetFileError(f"{where}: offset {v!r} for partition {p} is not a non-negative integer; {hint}")
        out[p] = v
    return out


def load(log: Log, group: str) -> dict[int, int]:
    """Committed offsets of `group` ({} when it never committed)."""
    path = log.group_path(check_group(group))
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    except FileNotFoundError:
        return {}
    except OSError as e:
        why = "is a symlink; refusing to follow it" if e.errno == errno.ELOOP else f"cannot open offset file: {e.strerror}"
        raise OffsetFileError(f"{path}: {why}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OffsetFileError(f"{path}: is a folder, not a group offset file; move it away")
    with os.fdopen(fd, "rb") as f:
        try:
            raw = f.read(MAX_FILE + 1)
        except OSError as e:
            raise OffsetFileError(f"{path}: cannot read offset file: {e.strerror}") from None
    if len(raw) > MAX_FILE:
        raise OffsetFileError(f"{path}: offset file is implausibly large")
    return parse_offsets(raw, log.partitions, path, log.path, group)


def encode(group: str, offsets: dict[int, int]) -> bytes:
    body = {"format": 1, "group": group, "offsets": {str(p): offsets[p] for p in sorted(offsets)}}
    return orjson.dumps(body) + b"\n"


class GroupLock:
    """The group file's flock, held around read-modify-write of the offsets; `dir_fd` is the
    groups folder (opened without following a symlink) that the write goes through."""

    def __init__(self, log: Log, group: str) -> None:
        self.dir_fd = files.open_dir(log)
        try:
            self.fd = open_lock(files.path(log, group, "lock"), dir_fd=self.dir_fd)
        except BaseException:
            os.close(self.dir_fd)
            raise

    def __enter__(self) -> GroupLock:
        flock(self.fd)
        return self

    def __exit__(self, *exc: object) -> None:
        unlock(self.fd)
        os.close(self.fd)
        os.close(self.dir_fd)


NOT_COMMITTED = ("the records delivered since the group's last commit were not committed: "
                 "the next run delivers them again")


class CommitError(StorageError):
    """The offset file could not be written: the offsets it was to hold are not saved."""


def _write(log: Log, group: str, lock: GroupLock, data: bytes, what: str) -> None:
    path = log.group_path(group)
    try:
        atomic_write(path, data, dir_fd=lock.dir_fd)
    except OSError as e:
        raise CommitError(f"{path}: cannot write group {group}'s offset file: {e.strerror}; {what}") from None


def commit(log: Log, group: str, updates: dict[int, int], failed: str = NOT_COMMITTED) -> dict[int, int]:
    """Merge `updates` into the group's committed offsets, atomically. Returns the result.

    A write that fails raises CommitError naming the file, then `failed` (what it means)."""
    check_group(group)
    if not updates:
        return load(log, group)
    with GroupLock(log, group) as lock:
        current = load(log, group)
        merged = {**current, **updates}
        if merged != current:
            _write(log, group, lock, encode(group, merged), failed)
        return merged


def replace(log: Log, group: str, offsets: dict[int, int]) -> None:
    """Set the group's offsets to exactly `offsets` (offset reset)."""
    check_group(group)
    with GroupLock(log, group) as lock:
        _write(log, group, lock, encode(group, offsets), "its offsets are unchanged")


STRAY = "not a group offset file (a group name is 1 to 249 of A-Z a-z 0-9 . _ -)"


def stray_files(log: Log) -> list[str]:
    """Each `*.json` in LOG/groups whose name is no group's (a file copied in by hand,
    `bad name.json`): Log.list_groups leaves those out; `check` reports them (STRAY), and
    `stat` and `compact` skip them with a warning."""
    try:
        names = os.listdir(log.groups_dir())
    except OSError:
        return []
    return [os.path.join(log.groups_dir(), n) for n in sorted(names)
            if n.endswith(".json") and not n.startswith(".") and not _is_group(n[:-5])]


def _is_group(name: str) -> bool:
    try:
        check_group(name)
        return True
    except UsageError:
        return False
