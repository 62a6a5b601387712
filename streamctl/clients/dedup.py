"""produce --exactly-once: skip records whose source (log, partition, offset) is already in the target.

The target log itself is the state. Each record appended with a source gets a
header `"streamctl.source": "LOG/PARTITION/OFFSET"`, written in the same line,
so it is durable exactly when the record is (a kill -9 can never separate
them). Per target partition, the deduper keeps the high-water mark (the
largest source offset appended) of every source partition, rebuilt by
scanning the partition's records; a record is a duplicate when its source
offset is at or below the mark. The check runs under the partition's append
lock (Appender.filter), after reading whatever other producers appended, so
two producers of the same source cannot both append a record.

`LOG/.exactly-once/pN.json` caches the marks and how far they were scanned,
so a long log is not rescanned on every run. It is only a hint: it is used
when the record it stops at is still the same line, else ignored, and it
never claims more than the log holds (it is written only after a scan).

Assumptions (documented in --help and docs/guide/live.md): each source partition's
records arrive in offset order (what consume writes), one output record per
source record, and a record's target partition does not change between runs
(keys, --partition, or, for null keys, the source partition modulo the
target's partition count, which the producer does under --exactly-once).
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Sequence

import orjson

from streamctl.errors import StorageError
from streamctl.storage import reader, record
from streamctl.storage.appender import Appender, Item
from streamctl.storage.fsutil import NOFOLLOW, open_dir, write_all
from streamctl.storage.log import Log

HEADER = "streamctl.source"
_MARK = b'"streamctl.source"'
STATE_DIR = ".exactly-once"
CACHE_EVERY = 1.0  # seconds between cache writes

Source = tuple[str, int, int]


class _PartitionState:
    __slots__ = ("scanned", "marks", "loaded", "since_cache", "ours", "tagged")

    def __init__(self) -> None:
        self.scanned = -1  # the next offset not yet scanned; -1 before the first look
        self.marks: dict[str, int] = {}  # "LOG/PARTITION" -> largest source offset appended
        self.loaded = False
        self.since_cache = 0
        # (first offset, end offset, marks, last line's tag) of what our last filter let through:
        # if the log then holds it, those records need no scan.
        self.ours: tuple[int, int, dict[str, int], str] | None = None
        # the list __call__ returned and each item's (source partition, offset): spares a parse
        self.tagged: tuple[list[Item], list[tuple[str, int] | None]] | None = None


def _source_of(headers: bytes | None) -> tuple[str, int] | None:
    """(source "LOG/PARTITION", offset) from an item's or a line's headers JSON."""
    if headers is None or _MARK not in headers:
        return None
    try:
        h = orjson.loads(headers)
    except orjson.JSONDecodeError:
        return None
    v = h.get(HEADER) if isinstance(h, dict) else None
    if not isinstance(v, str):
        return None
    src, _, off = v.rpartition("/")
    if not src or not off.isdecimal():
        return None
    return src, int(off)


def _line_source(line: bytes) -> tuple[str, int] | None:
    """The source of a stored line (only lines holding the marker are parsed)."""
    if _MARK not in line:
        return None
    h = record.parse(line).get("headers")
    v = h.get(HEADER) if isinstance(h, dict) else None
    if not isinstance(v, str):
        return None
    src, _, off = v.rpartition("/")
    return (src, int(off)) if src and off.isdecimal() else None


def _with_header(headers: bytes | None, source: Source) -> bytes:
    tag = f"{source[0]}/{source[1]}/{source[2]}"
    if headers is None:
        return b'{"streamctl.source":' + orjson.dumps(tag) + b"}"
    h = orjson.loads(headers)
    h[HEADER] = tag
    return orjson.dumps(h)


class Deduper:
    """The `dedupe(partition, items, sources)` hook of produce, plus the appender's filter."""

    def __init__(self, log: Log, appender: Appender) -> None:
        self.log = log
        self.state: dict[int, _PartitionState] = {}
        self._last_cache = 0.0
        # records with no source to go by (no "source", no header, partition/offset without --source):
        # appended as they are, and counted so that the summary says so
        self.unsourced = 0
        appender.filter = self.filter

    def _st(self, p: int) -> _PartitionState:
        st = self.state.get(p)
        if st is None:
            st = self.state[p] = _PartitionState()
        return st

    def __call__(self, p: int, items: list[Item], sources: list) -> list[Item]:
        """Tag items with their source; drop the ones already known to be in the log.

        The marks used here may be behind (not yet scanned), never ahead: what
        they drop is surely a duplicate. The filter under the lock decides the rest.
        """
        st = self._st(p)
        marks = st.marks
        out: list[Item] = []
        srcs: list[tuple[str, int] | None] = []
        for item, src in zip(items, sources, strict=False):
            if src is None:
                out.append(item)
                got = _source_of(item[2])
                self.unsourced += got is None
                srcs.append(got)
                continue
            sp = f"{src[0]}/{src[1]}"
            if src[2] <= marks.get(sp, -1):
                continue
            out.append((item[0], item[1], _with_header(item[2], src)))
            srcs.append((sp, src[2]))
        st.tagged = (out, srcs)
        return out

    def filter(self, p: int, items: Sequence[Item], next_offset: int) -> Sequence[Item]:
        """Under the partition lock: bring the marks up to `next_offset`, drop duplicates."""
        st = self._st(p)
        self._catch_up(p, st, next_offset)
        tagged, st.tagged = st.tagged, None
        srcs = tagged[1] if tagged is not None and tagged[0] is items else [_source_of(it[2]) for it in items]
        seen: dict[str, int] = {}
        out: list[Item] = []
        last_tag = ""
        for item, src in zip(items, srcs, strict=True):
            if src is None:
                out.append(item)
                continue
            sp, off = src
            mark = seen.get(sp)
            if mark is None:
                mark = st.marks.get(sp, -1)
            if off <= mark:
                continue
            seen[sp] = off
            out.append(item)
            last_tag = f"{sp}/{off}"
        st.ours = (next_offset, next_offset + len(out), seen, last_tag) if out else None
        return out

    # -- the marks: rebuilt from the log, cached under LOG/.exactly-once/

    def _catch_up(self, p: int, st: _PartitionState, next_offset: int) -> None:
        if not st.loaded:
            st.loaded = True
            self._load_cache(p, st, next_offset)
        if st.scanned < 0 or st.scanned > next_offset:
            # Nothing cached, or the log is shorter than we knew (replaced): scan it all.
            st.scanned = 0
            st.marks.clear()
        ours, st.ours = st.ours, None
        if ours is not None and ours[0] == st.scanned and ours[1] <= next_offset and self._holds(p, ours):
            # Our own last append (written under the lock right after our filter): no scan needed.
            for sp, off in ours[2].items():
                if off > st.marks.get(sp, -1):
                    st.marks[sp] = off
            st.since_cache += ours[1] - ours[0]
            st.scanned = ours[1]
        if st.scanned < next_offset:
            n = 0
            for line in reader.iter_lines(self.log, p, st.scanned, next_offset):
                n += 1
                src = _line_source(line)
                if src is not None and src[1] > st.marks.get(src[0], -1):
                    st.marks[src[0]] = src[1]
            st.scanned = next_offset
            st.since_cache += n
        now = time.monotonic()
        if st.since_cache and (st.since_cache >= 10000 or now - self._last_cache >= CACHE_EVERY):
            self._save_cache(p, st)
            self._last_cache = now
            st.since_cache = 0

    def _holds(self, p: int, ours: tuple[int, int, dict[str, int], str]) -> bool:
        """Does the record where our last append ended carry its tag (the append happened)?"""
        if not ours[3]:
            return False
        for line in reader.iter_lines(self.log, p, ours[1] - 1, ours[1]):
            src = _line_source(line)
            return src is not None and f"{src[0]}/{src[1]}" == ours[3]
        return False

    def _cache_path(self, p: int) -> str:
        return os.path.join(self.log.path, STATE_DIR, f"p{p}.json")

    def _check_line(self, p: int, offset: int) -> int | None:
        """crc32 of the record at `offset` (None if there is none)."""
        if offset < 0:
            return None
        for line in reader.iter_lines(self.log, p, offset, offset + 1):
            return zlib.crc32(line)
        return None

    def _load_cache(self, p: int, st: _PartitionState, next_offset: int) -> None:
        try:
            fd = os.open(self._cache_path(p), os.O_RDONLY | NOFOLLOW)
        except OSError:
            return
        try:
            with os.fdopen(fd, "rb") as f:
                obj = orjson.loads(f.read(64 << 20))
            scanned, check, marks = obj["scanned"], obj["check"], obj["marks"]
            if not (isinstance(scanned, int) and isinstance(marks, dict)):
                return
            if scanned > next_offset or (scanned > 0 and self._check_line(p, scanned - 1) != check):
                return  # not this log's history any more
            st.scanned = scanned
            st.marks = {k: v for k, v in marks.items() if isinstance(k, str) and isinstance(v, int)}
        except (OSError, ValueError, KeyError, TypeError):
            return  # a damaged cache is only a slower start

    def _save_cache(self, p: int, st: _PartitionState) -> None:
        """Best effort, no fsync: the cache is checked against the log when loaded. Written through an
        fd on LOG/.exactly-once that never follows a symlink (a planted one: no cache, no write)."""
        name = os.path.basename(self._cache_path(p))
        tmp = f".{name}.{os.getpid()}.tmp"
        data = orjson.dumps({"format": 1, "scanned": st.scanned, "check": self._check_line(p, st.scanned - 1),
                             "marks": st.marks})
        try:
            dfd = open_dir(os.path.join(self.log.path, STATE_DIR), create=True)
        except StorageError:
            return
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW, 0o644, dir_fd=dfd)
            try:
                write_all(fd, data)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except OSError:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
        finally:
            os.close(dfd)
