"""Consumer-group offset files: `groups/GROUP.json`, the next offset to read per partition.

    {"format": 1, "group": "billing", "offsets": {"0": 42, "1": 17}}

Written atomically (temp file, fsync, rename, fsync folder) under an flock on
`groups/.GROUP.lock` so competing members committing different partitions do
not lose each other's commits. Validated on load: a corrupt file is an error
that names the file, never a silent reset to 0 (Filebeat's NUL-filled registry).
"""

from __future__ import annotations

import os

import orjson

from streamctl.errors import StorageError
from streamctl.storage.fsutil import NOFOLLOW, atomic_write, flock, open_lock, unlock
from streamctl.storage.log import Log
from streamctl.storage.names import check_group

MAX_FILE = 16 << 20


class OffsetFileError(StorageError):
    pass


def parse_offsets(raw: bytes, partitions: int, where: str = "offset file") -> dict[int, int]:
    """Bytes of a group file -> {partition: next offset}. Raises OffsetFileError, nothing else."""
    hint = "fix or delete it, or reset it with `streamctl replay LOG --group G --to-earliest --execute`"
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
        raise OffsetFileError(f"{path}: cannot open offset file: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        raw = f.read(MAX_FILE + 1)
    if len(raw) > MAX_FILE:
        raise OffsetFileError(f"{path}: offset file is implausibly large")
    return parse_offsets(raw, log.partitions, path)


def encode(group: str, offsets: dict[int, int]) -> bytes:
    body = {"format": 1, "group": group, "offsets": {str(p): offsets[p] for p in sorted(offsets)}}
    return orjson.dumps(body) + b"\n"


class GroupLock:
    """The group file's flock, held around read-modify-write of the offsets."""

    def __init__(self, log: Log, group: str) -> None:
        os.makedirs(log.groups_dir(), exist_ok=True)
        self.fd = open_lock(os.path.join(log.groups_dir(), f".{group}.lock"))

    def __enter__(self) -> GroupLock:
        flock(self.fd)
        return self

    def __exit__(self, *exc: object) -> None:
        unlock(self.fd)
        os.close(self.fd)


def commit(log: Log, group: str, updates: dict[int, int]) -> dict[int, int]:
    """Merge `updates` into the group's committed offsets, atomically. Returns the result."""
    check_group(group)
    if not updates:
        return load(log, group)
    with GroupLock(log, group):
        current = load(log, group)
        merged = {**current, **updates}
        if merged != current:
            atomic_write(log.group_path(group), encode(group, merged))
        return merged


def replace(log: Log, group: str, offsets: dict[int, int]) -> None:
    """Set the group's offsets to exactly `offsets` (offset reset)."""
    check_group(group)
    with GroupLock(log, group):
        atomic_write(log.group_path(group), encode(group, offsets))
