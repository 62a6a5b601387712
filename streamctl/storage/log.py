"""A log folder: its metadata file, partitions and where things live inside it."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field

import orjson

from streamctl.errors import StorageError, UsageError
from streamctl.storage.fsutil import NOFOLLOW, atomic_write, flock, fsync_dir, makedirs_durable, open_lock, unlock
from streamctl.storage.names import check_group
from streamctl.storage.segment import Segment, list_segments

FORMAT = 1
META = "streamctl.json"
# 16 MiB: big enough that a million ~275-byte records make ~17 files (cheap to
# list and open), small enough that compaction and retention, which work on
# whole closed segments, can act on logs of a few hundred MB.
DEFAULT_SEGMENT_BYTES = 16 << 20
MIN_SEGMENT_BYTES = 1 << 10


@dataclass(frozen=True)
class LogMeta:
    partitions: int
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    created: int = 0
    extra: dict = field(default_factory=dict)

    def to_json(self) -> bytes:
        return orjson.dumps(
            {"format": FORMAT, "partitions": self.partitions, "segment_bytes": self.segment_bytes,
             "created": self.created, **self.extra},
            option=orjson.OPT_INDENT_2,
        ) + b"\n"


class Log:
    """An existing log folder. Cheap to construct; holds no file descriptors."""

    def __init__(self, path: str, meta: LogMeta) -> None:
        self.path = path
        self.meta = meta

    @property
    def partitions(self) -> int:
        return self.meta.partitions

    def partition_dir(self, p: int) -> str:
        return os.path.join(self.path, f"p{p}")

    def segments(self, p: int) -> list[Segment]:
        return list_segments(self.partition_dir(p))

    def groups_dir(self) -> str:
        return os.path.join(self.path, "groups")

    def group_path(self, group: str) -> str:
        return os.path.join(self.groups_dir(), f"{group}.json")

    def list_groups(self) -> list[str]:
        """Groups with an offset file; a `*.json` named like no group is left out
        (groups.offsets.stray_files names those)."""
        try:
            names = os.listdir(self.groups_dir())
        except FileNotFoundError:
            return []
        return sorted(n[:-5] for n in names if n.endswith(".json") and not n.startswith(".") and _is_group(n[:-5]))

    def total_bytes(self) -> int:
        return sum(s.size() for p in range(self.partitions) for s in self.segments(p))


def _is_group(name: str) -> bool:
    try:
        check_group(name)
        return True
    except UsageError:
        return False


def is_log(path: str) -> bool:
    return os.path.isfile(os.path.join(path, META))


def is_log_input(path: str) -> bool:
    """Whether an input argument names a log (True) or a plain .jsonl file or `-` (False).

    A folder that is no log, or a path that does not exist, is a UsageError: the one
    check (and message) of every command that reads either.
    """
    if path != "-" and is_log(path):
        return True
    if path != "-" and os.path.isdir(path):
        raise UsageError(f"{path}: not a streamctl log (no {META})")
    if path != "-" and not os.path.exists(path):
        raise UsageError(f"{path}: no such log or file")
    return False


def _read_meta(path: str) -> LogMeta:
    meta_path = os.path.join(path, META)
    try:
        fd = os.open(meta_path, os.O_RDONLY | NOFOLLOW)
    except FileNotFoundError:
        raise StorageError(f"{path}: not a streamctl log (no {META})") from None
    except OSError as e:
        raise StorageError(f"{meta_path}: cannot open: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        raw = f.read(1 << 20)
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise StorageError(f"{meta_path}: invalid JSON: {e}; {DAMAGED}") from None
    return meta_of(obj, meta_path)


DAMAGED = "the log's metadata is damaged (restore it from a backup or rewrite the field)"
MAX_SEGMENT_BYTES = (1 << 63) - 1
# The schema of streamctl.json: each field the loader uses -> (required, default, lo, hi, what it is).
# Written out rather than as a msgspec struct: every command opens a log, and importing msgspec costs
# 10-37 ms (measured on the loaded test machine) that consume, tail and stat would otherwise not pay.
META_SCHEMA: dict[str, tuple[bool, int, int, int, str]] = {
    "format": (True, FORMAT, FORMAT, FORMAT, "the format version"),
    "partitions": (True, 1, 1, 10_000, "the partition count"),
    "segment_bytes": (False, DEFAULT_SEGMENT_BYTES, MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES, "the segment size in bytes"),
    # epoch ms within years 1..9999 (timeparse.MIN_MS..MAX_MS)
    "created": (False, 0, -62_135_596_800_000, 253_402_300_799_999, "the creation time in epoch ms"),
}


def meta_of(obj: object, meta_path: str = META) -> LogMeta:
    """A parsed streamctl.json -> LogMeta, every field checked against META_SCHEMA: a StorageError
    names the file and the field (never a TypeError later)."""
    if not isinstance(obj, dict):
        raise StorageError(f"{meta_path}: not a JSON object but {type(obj).__name__}; {DAMAGED}")
    if "format" in obj and obj["format"] != FORMAT:
        raise StorageError(f"{meta_path}: unsupported format {obj['format']!r} (this streamctl reads format {FORMAT})")
    vals: dict[str, int] = {}
    for name, (required, default, lo, hi, what) in META_SCHEMA.items():
        if name not in obj:
            if required:
                raise StorageError(f"{meta_path}: field {name!r} ({what}) is missing; {DAMAGED}")
            vals[name] = default
            continue
        v = obj[name]
        if type(v) is not int or not lo <= v <= hi:
            shown = orjson.dumps(v).decode(errors="replace")
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            raise StorageError(f"{meta_path}: field {name!r} ({what}) must be an integer from {lo} to {hi}, "
                               f"not {shown}; {DAMAGED}")
        vals[name] = v
    extra = {k: v for k, v in obj.items() if k not in META_SCHEMA}
    return LogMeta(vals["partitions"], vals["segment_bytes"], vals["created"], extra)


def log_name(path: str) -> str:
    """A log's name (kcat's topic; `consume --format %t`, `--sqlite`'s default table): the base name
    of the folder (or plain file) `path` really is, so `.` in the log's folder, `orders/`,
    `../orders` and a symlink to it all name it `orders`. `-` (stdin) is `-`."""
    if path == "-":
        return "-"
    return os.path.basename(os.path.realpath(path)) or "/"


def open_log(path: str) -> Log:
    if not os.path.isdir(path):
        raise StorageError(f"{path}: {_not_a_folder(path) or 'no such log'}")
    return Log(path, _read_meta(path))


def _not_a_folder(path: str) -> str | None:
    """Why `path`, which exists but is no folder, is no log (for a message); None when it does not exist."""
    if os.path.isfile(path):
        return "a plain file, not a log (a log is the folder `streamctl produce` creates)"
    if os.path.islink(path) and not os.path.exists(path):
        return "no such log (a symlink to nothing)"
    if os.path.lexists(path):
        return "not a log (not a folder)"
    return None


def own_leftover(name: str) -> bool:
    return (name in ("groups", ".create.lock") or (name[:1] == "p" and name[1:].isdecimal())
            or (name.startswith(f".{META}.") and name.endswith(".tmp")))


def open_or_create(path: str, partitions: int | None, segment_bytes: int | None, created_ms: int) -> Log:
    """Open LOG, creating it (under a lock on its parent folder's entry) if missing."""
    if not path:
        raise UsageError("LOG is an empty name: name the log's folder (e.g. ./orders)")
    if partitions is not None and not 1 <= partitions <= 10_000:
        raise UsageError("--partitions must be from 1 to 10000")
    if segment_bytes is not None and not MIN_SEGMENT_BYTES <= segment_bytes <= MAX_SEGMENT_BYTES:
        raise UsageError(f"--segment-bytes must be from {MIN_SEGMENT_BYTES} to {MAX_SEGMENT_BYTES}")
    if is_log(path):
        log = open_log(path)
        if partitions is not None and partitions != log.partitions:
            raise UsageError(f"{path} already has {log.partitions} partitions; --partitions {partitions} only applies when creating a log")
        return log
    if os.path.islink(path):
        raise StorageError(f"{path} is a symlink; refusing to create a log through it")
    try:
        makedirs_durable(path)
    except OSError as e:
        reason = _not_a_folder(path) if isinstance(e, FileExistsError) else None
        if reason is not None:
            raise StorageError(f"{path}: {reason}; refusing to create a log there") from None
        raise StorageError(f"{path}: cannot create log folder: {e.strerror}") from None
    # a creation that crashed half-way leaves only our own names behind: finish it
    foreign = [n for n in os.listdir(path) if not own_leftover(n)]
    if foreign and not is_log(path):
        raise StorageError(f"{path} exists, is not empty and is not a streamctl log")
    lock = open_lock(os.path.join(path, ".create.lock"))
    try:
        flock(lock)
        if not is_log(path):
            meta = LogMeta(partitions or 1, segment_bytes or DEFAULT_SEGMENT_BYTES, created_ms)
            for p in range(meta.partitions):
                try:
                    os.mkdir(os.path.join(path, f"p{p}"))
                except FileExistsError:
                    pass
            os.makedirs(os.path.join(path, "groups"), exist_ok=True)
            atomic_write(os.path.join(path, META), meta.to_json())
            fsync_dir(os.path.dirname(os.path.abspath(path)))
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StorageError(f"{path}: disk full while creating the log") from None
        raise
    finally:
        unlock(lock)
        os.close(lock)
    return open_log(path)
