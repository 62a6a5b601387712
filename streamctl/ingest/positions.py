"""Where each followed file has been read to, kept with the log so a rerun appends every line once.

Two things together make it exact (docs/design/guarantees.md, "produce --follow"):

- The marks. Every record `produce --follow` appends carries the header
  `"streamctl.file": "ID:START"`: ID names the file (one generation of it: a file
  truncated in place gets a new ID), START the byte offset where the record's line
  starts in it. Mark and record are one line, so they are durable together; a
  `kill -9` can never separate them.
- The registry, `LOG/.follow/registry.json`, written like a group's offsets (temp
  file, fsync, rename, folder fsync): per file its identity (device, inode, and a
  hash of its first bytes, the fingerprint), how far it was read, and per partition
  the log's next offset when the registry was written (`scan_from`). It is written
  about once a second while following, at the end, and before appending a line that
  ends past the bytes the file's committed fingerprint covers (while under FP_BYTES):
  so every ID in the log is in a registry that a rerun reads, with a fingerprint of
  every line appended under it, and a file truncated (or deleted and its inode reused)
  while no follower runs is never taken for the content whose marks are in the log.

A rerun loads the registry and reads what each partition got from `scan_from` on
(about a second of appends): the largest START of each ID there is that partition's
mark. It reads each file again from the registry's position; a line whose START is at
or before the mark of the partition it goes to is in the log already and is skipped,
every other line is appended. A line goes to the same partition on every run (its
key; without a key, the file's first name picks one), so the check is exact: no line
twice, none skipped, whatever moment the previous run was killed at.

One follower feeds a log at a time: `LOG/.follow/lock` is held while following.
"""

from __future__ import annotations

import errno
import os
from dataclasses import asdict, dataclass, field

import orjson

from streamctl.errors import StorageError
from streamctl.storage import reader, record
from streamctl.storage.fsutil import NOFOLLOW, atomic_write, flock, open_dir, open_lock
from streamctl.storage.log import Log

HEADER = "streamctl.file"
MARK = b'"streamctl.file"'
STATE_DIR = ".follow"
REGISTRY = "registry.json"
FORMAT = 1


@dataclass
class FileEntry:
    """One followed file (one generation of it), as the registry keeps it."""

    id: str
    origin: str  # the name it was first found under: its null-key records go to one partition by it
    path: str  # the name it was last seen under
    dev: int
    ino: int
    pos: int  # bytes read and appended: the end of the last whole line
    fp_len: int  # the fingerprint covers this many first bytes (up to files.FP_BYTES)
    fp: str  # sha1 (hex) of those bytes
    rotated: bool = False  # its name no longer points at it (renamed away or deleted)
    lines: int = -1  # lines before pos (bad input is named by its line number); -1: not kept yet, counted


@dataclass
class Registry:
    files: dict[str, FileEntry] = field(default_factory=dict)  # by id
    scan_from: dict[int, int] = field(default_factory=dict)  # partition -> next offset when written
    next_id: int = 1

    def new_id(self) -> str:
        fid = f"f{self.next_id}"
        self.next_id += 1
        return fid

    def to_json(self) -> bytes:
        return orjson.dumps({"format": FORMAT, "next_id": self.next_id,
                             "scan_from": {str(p): n for p, n in sorted(self.scan_from.items())},
                             "files": [asdict(e) for e in self.files.values()]}, option=orjson.OPT_INDENT_2) + b"\n"


def registry_path(log: Log) -> str:
    return os.path.join(log.path, STATE_DIR, REGISTRY)


def _damaged(path: str, why: str) -> StorageError:
    return StorageError(f"{path}: {why}; the positions of the followed files are unknown, so nothing was read "
                        "(move the file away to follow every file from its start again)")


def _int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def load(log: Log) -> Registry:
    """The registry, or an empty one if the log was never fed by produce --follow. A damaged registry is
    an error, never silently reset (that would append every file again)."""
    path = registry_path(log)
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    except FileNotFoundError:
        return Registry()
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise StorageError(f"{path} is a symlink; refusing to read it") from None
        raise StorageError(f"{path}: cannot open: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        raw = f.read()
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise _damaged(path, f"not valid JSON ({e})") from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise _damaged(path, f"not a format-{FORMAT} registry")
    reg = Registry(next_id=obj.get("next_id", 1) if _int(obj.get("next_id")) else 1)
    scan = obj.get("scan_from")
    if not isinstance(scan, dict) or not all(k.isdecimal() and _int(v) for k, v in scan.items()):
        raise _damaged(path, "field 'scan_from' must map partitions to offsets")
    reg.scan_from = {int(k): v for k, v in scan.items()}
    files = obj.get("files")
    if not isinstance(files, list):
        raise _damaged(path, "field 'files' must be a list")
    for i, item in enumerate(files):
        try:
            entry = FileEntry(**item)
        except TypeError:
            raise _damaged(path, f"entry {i} of 'files' is not a file entry") from None
        if not (isinstance(entry.id, str) and isinstance(entry.path, str) and isinstance(entry.origin, str)
                and isinstance(entry.fp, str) and all(map(_int, (entry.dev, entry.ino, entry.pos, entry.fp_len)))
                and isinstance(entry.lines, int) and not isinstance(entry.lines, bool) and entry.lines >= -1):
            raise _damaged(path, f"entry {i} of 'files' has a field of the wrong type")
        reg.files[entry.id] = entry
    return reg


def parse_mark(headers: object) -> tuple[str, int] | None:
    """(ID, START) of a record's headers, or None when it carries no mark."""
    v = headers.get(HEADER) if isinstance(headers, dict) else None
    if not isinstance(v, str):
        return None
    fid, _, start = v.rpartition(":")
    return (fid, int(start)) if fid and start.isdecimal() else None


def scan_marks(log: Log, scan_from: dict[int, int]) -> dict[int, dict[str, int]]:
    """Per partition, the largest START of each file ID in its records from scan_from on."""
    marks: dict[int, dict[str, int]] = {}
    for p in range(log.partitions):
        got: dict[str, int] = {}
        for line in reader.iter_lines(log, p, scan_from.get(p, 0), None):
            if MARK not in line:
                continue
            m = parse_mark(record.parse(line).get("headers"))
            if m is not None and m[1] > got.get(m[0], -1):
                got[m[0]] = m[1]
        if got:
            marks[p] = got
    return marks


class Positions:
    """The registry of a log being followed: its lock held, loaded, and the marks since it was written."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.dfd = open_dir(os.path.join(log.path, STATE_DIR), create=True)
        self.lock = open_lock(os.path.join(log.path, STATE_DIR, "lock"), dir_fd=self.dfd)
        if not flock(self.lock, timeout=0):
            os.close(self.lock)
            os.close(self.dfd)
            raise StorageError(f"{log.path}: another `streamctl produce --follow` is feeding this log (it holds "
                               f"{log.path}/{STATE_DIR}/lock); follow every file from one process")
        self.registry = load(log)
        self.marks = scan_marks(log, self.registry.scan_from)

    def commit(self) -> None:
        try:
            atomic_write(registry_path(self.log), self.registry.to_json(), dir_fd=self.dfd)
        except OSError as e:
            reason = "disk full" if e.errno in (errno.ENOSPC, errno.EDQUOT) else e.strerror
            raise StorageError(f"{registry_path(self.log)}: writing the file positions failed: {reason}; "
                               "the records appended so far are in the log and a rerun skips them") from None

    def close(self) -> None:
        os.close(self.lock)
        os.close(self.dfd)
