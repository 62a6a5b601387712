"""produce --follow: keep appending the lines of growing files, exactly once across restarts.

The loop: read every open file to its current end (rotated-away files first, so a
file renamed away is finished before the new file of its name starts), append
each read batch (through produce's lanes when it can), look at the names and globs
again, commit the positions about once a second, and wait for a change (inotify
through watchfiles on the files' folders, polling where that is unavailable).

How the positions make a rerun exact is streamctl/ingest/positions.py; how a file
is known and read is streamctl/ingest/files.py.

Decisions (also in docs/reference/produce.md):
- Records of a line without a key go to one partition per file, picked by the name
  it was first found under (its rotated successors keep it): a file's records stay
  in order, and a rerun puts a line where the first run did.
- A file renamed away or deleted is read to its end and closed after ROTATED_GRACE
  without new data (a writer may still finish its last lines into it). Bytes after
  its last `\n` are never appended; stderr says how many.
- A line over --max-record-bytes, or one the input mode rejects, is handled by
  --on-error as in produce; with the default (fail) the lines before it are appended
  and their position committed, and produce exits 65 naming the file, the line's
  number and the byte offset where it starts (the registry keeps each file's line
  count with its position, so a rerun that starts in the middle still numbers lines
  from the file's start; a file truncated in place starts again at line 1).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import compress
from typing import Any

import orjson

from streamctl import stopflag
from streamctl.clients.inputlines import TooLong
from streamctl.clients.lanes import Spliced
from streamctl.clients.producer import RAW_KEEP, ProduceOptions, ProduceStats, _DeadLetters, _split_spliced, batch_lane
from streamctl.errors import DataError, UsageError
from streamctl.ingest.files import (
    FP_BYTES,
    Followed,
    Read,
    count_lines,
    expand,
    find_in_folder,
    fingerprint,
    known_head,
)
from streamctl.ingest.positions import MARK, FileEntry, Positions
from streamctl.storage import reader
from streamctl.storage.appender import Appender, AppendResult, Item, Stamped
from streamctl.storage.log import Log
from streamctl.storage.partitioner import Partitioner, partition_for_key

COMMIT_INTERVAL = 1.0  # seconds between registry writes while following (each is a rename and two fsyncs)
ROTATED_GRACE = 2.0  # a file renamed away is closed after this long without new data
GLOB_INTERVAL = 0.1  # how often names and globs are looked at again while data keeps coming
READ_BYTES = 1 << 20  # one read batch per file per turn


@dataclass
class FollowStats:
    produced: ProduceStats = field(default_factory=ProduceStats)
    files: int = 0  # files (generations) read in this run
    rotations: int = 0  # files seen renamed away or deleted
    truncations: int = 0  # files seen truncated in place
    already: int = 0  # lines found in the log already (appended by a run that was killed)
    idle: bool = False  # ended by --idle-timeout


class Follower:
    def __init__(self, log: Log, patterns: list[str], opts: ProduceOptions, appender: Appender,
                 positions: Positions, raw: bool, say: Callable[[str], None]) -> None:
        self.log = log
        self.patterns = patterns
        self.opts = opts
        self.app = appender
        self.pos = positions
        self.reg = positions.registry
        self.say = say
        self.stats = FollowStats()
        self.part = Partitioner(log.partitions)
        self.open: dict[str, Followed] = {}  # by file id
        self.lane = batch_lane(opts)
        # which lines a lane turns into records: the non-empty ones (--raw: the non-blank ones)
        self.record_lines: Callable[[list], Any] = (lambda ls: map(bytes.strip, ls)) if raw else (lambda ls: ls)
        self.dead = opts.dead if opts.dead is not None else _DeadLetters(opts.dead_letter) if opts.dead_letter else None
        self.dirty = False
        if not self.reg.scan_from:
            # a log never followed before: no marks can exist; scan from today's ends next time
            self.reg.scan_from = {p: reader.partition_info(log, p).next_offset for p in range(log.partitions)}
        self.next_offsets = dict(self.reg.scan_from)
        # while a batch is appended: each partition's next offset before the batch's first share went there
        self._undo: dict[int, int | None] | None = None

    # -- the files ---------------------------------------------------------------------------

    def _open(self, path: str) -> tuple[int, os.stat_result] | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None  # gone between the listing and the open: the next look finds its successor
        return fd, os.fstat(fd)

    def _new_generation(self, path: str, origin: str, fd: int, st: os.stat_result) -> Followed:
        entry = FileEntry(self.reg.new_id(), origin, path, st.st_dev, st.st_ino, 0, 0, "", lines=0)
        for old in [e.id for e in self.reg.files.values() if (e.dev, e.ino) == (st.st_dev, st.st_ino)]:
            del self.reg.files[old]
        self.reg.files[entry.id] = entry
        # not committed here: append() commits the entry, with the fingerprint of the bytes about to be
        # appended, before the first record that carries its ID
        return self._track(entry, fd, 0, b"")

    def _track(self, entry: FileEntry, fd: int, pos: int, head: bytes) -> Followed:
        """Follow entry's file from pos; head: its first bytes as known_head() checked them (b"" from 0)."""
        if entry.lines < 0:
            entry.lines = count_lines(fd, pos) if pos else 0  # a registry that did not keep it
        f = Followed(entry, fd, next=pos, next_line=entry.lines, head=head)
        marks = [m.get(entry.id, -1) for m in self.pos.marks.values()]
        f.recover_until = max(marks, default=-1)
        self.open[entry.id] = f
        self.stats.files += 1
        return f

    def scan(self, first: bool = False) -> None:
        """Look at the names and globs: new files, files renamed away or deleted."""
        now = time.monotonic()
        named: dict[tuple[int, int], str] = {}
        for pattern in self.patterns:
            for path in map(os.path.abspath, expand(pattern)):
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                ident = (st.st_dev, st.st_ino)
                if ident in named:
                    continue
                named[ident] = path
                f = next((f for f in self.open.values() if (f.entry.dev, f.entry.ino) == ident), None)
                if f is not None:
                    f.entry.path, f.entry.rotated, f.rotated_at = path, False, None
                    continue
                got = self._open(path)
                if got is None:
                    continue
                fd, fst = got
                ident = (fst.st_dev, fst.st_ino)
                named[ident] = path
                known = next((e for e in self.reg.files.values() if (e.dev, e.ino) == ident), None)
                head = known_head(known, fd) if known is not None else None
                if known is not None and head is not None:
                    known.path, known.rotated = path, False
                    self._track(known, fd, known.pos, head)
                else:
                    origin = path
                    if known is not None:
                        why = (f"it is shorter than the {known.pos} bytes read" if fst.st_size < known.pos
                               else "its first bytes changed")
                        self.say(f"{path}: read again from its start ({why}: truncated or replaced)")
                        origin = known.origin
                        self.stats.truncations += 1
                    self._new_generation(path, origin, fd, fst)
        for f in self.open.values():
            ident = (f.entry.dev, f.entry.ino)
            if ident not in named and f.rotated_at is None:
                f.rotated_at = now
                f.entry.rotated = True
                self.stats.rotations += 1
                self.dirty = True
        if first:
            # known files no name points at any more (rotated while we were away): finish them
            for e in list(self.reg.files.values()):
                if e.id in self.open:
                    continue
                where = find_in_folder(e)
                got = self._open(where) if where is not None else None
                if got is None or where is None:
                    self._gone(e, f"deleted, or moved out of {os.path.dirname(e.path) or '.'}")
                    continue
                fd, fst = got
                head = known_head(e, fd) if (fst.st_dev, fst.st_ino) == (e.dev, e.ino) else None
                if head is None:
                    os.close(fd)
                    self._gone(e, "its inode now holds other content: deleted and reused, or truncated")
                    continue
                # read to its end or not, it stays known and open for ROTATED_GRACE: a writer that still
                # holds it may add a last line, and a rerun must neither miss that line nor read it twice
                e.path, e.rotated = where, True
                f = self._track(e, fd, e.pos, head)
                f.rotated_at = now

    def _gone(self, e: FileEntry, how: str) -> None:
        """A known file is not where it was and nowhere in its folder: nothing of it can be read any more.
        How much was written to it after the position is unknown; say what was appended, once."""
        self.say(f"{e.path}: gone while no follower ran ({how}): read and appended up to byte {e.pos}; any line "
                 "written to it after that was never read and is not in the log")
        del self.reg.files[e.id]
        self.dirty = True

    def _close_finished(self) -> None:
        now = time.monotonic()
        for f in list(self.open.values()):
            if f.rotated_at is None or now - f.rotated_at < ROTATED_GRACE or now - f.last_data < ROTATED_GRACE:
                continue
            if f.carry or f.skipping:
                self.say(f"{f.entry.path}: renamed away or deleted; its last {len(f.carry) + f.skipping} byte(s) "
                         "have no newline and were not appended")
            f.close()
            del self.open[f.entry.id]

    # -- appending ---------------------------------------------------------------------------

    def _null_partition(self, f: Followed) -> int:
        return partition_for_key(f.entry.origin, self.log.partitions)

    def _fixed(self) -> int | None:
        return self.opts.partition if self.opts.partition is not None else 0 if self.log.partitions == 1 else None

    def _appended(self, res: AppendResult) -> None:
        if res.last_offset < res.first_offset:
            return
        self.stats.produced.add(res)
        if self._undo is not None:
            self._undo.setdefault(res.partition, self.next_offsets.get(res.partition))
        self.next_offsets[res.partition] = res.last_offset + 1
        if self.opts.echo is not None and res.lines:
            self.opts.echo(res.lines)

    def _headers(self, fid: str, starts: list[int], user: list[bytes | None] | None) -> list[bytes] | Stamped:
        if user is None or not any(user):
            # the marks alone: formatted inside the appender's own line format
            return Stamped(b'{"streamctl.file":"' + fid.encode().replace(b"%", b"%%") + b':%d"}', starts)
        return [_with_mark(h, fid, s) for h, s in zip(user, starts, strict=True)]

    def _append_spliced(self, f: Followed, s: Spliced, starts: list[int]) -> None:
        n = len(s.values)
        if not n:
            return
        headers: Any = self._headers(f.entry.id, starts, s.headers)
        fixed = self._fixed()
        shares: list[tuple[int, Any, list, Any]]
        if fixed is not None:
            shares = [(fixed, s.key_texts, s.values, headers)]
        elif s.keys is None and s.key is not None:
            shares = [(self.part(s.key), s.key_texts, s.values, headers)]
        elif s.keys is None and isinstance(s.key_texts, bytes):  # no keys: the file's partition
            shares = [(self._null_partition(f), s.key_texts, s.values, headers)]
        else:
            nullp = self._null_partition(f)
            if s.keys is not None:
                ps = [nullp if k is None else p for k, p in zip(s.keys, self.part.many(s.keys), strict=True)]
            else:
                texts = list(map(bytes, s.key_texts))
                ps = [nullp if t == b"null" else p for t, p in zip(texts, self.part.many_texts(texts), strict=True)]
            if isinstance(headers, Stamped):
                headers = headers.texts()
            shares = _split_spliced(ps, Spliced(s.values, s.key_texts, s.keys, headers, s.key), self.log.partitions)
        want = self.opts.echo is not None
        for p, kt, vs, hs in shares:
            self._appended(self.app.append_texts(p, kt, vs, hs, want_lines=want))

    def append(self, f: Followed, rd: Read) -> None:
        """Append a read batch's records; f.entry.pos moves past it (or, on a bad line with --on-error fail,
        to that line, before the error is raised)."""
        self._undo = {}
        try:
            self._append(f, rd)
        except BaseException:
            # A failure part way (a full disk or the file-size limit on one partition after another's share
            # was appended, a closed pipe under --echo after the append): the records appended are in the
            # log, but f.entry.pos has not moved past their lines. The commit that follows the failure must
            # not move scan_from past them either, or a rerun never sees their marks and appends them again:
            # back to where this batch started, so a rerun reads their marks and skips their lines.
            for p, before in self._undo.items():
                if before is None:
                    self.next_offsets.pop(p, None)
                else:
                    self.next_offsets[p] = before
            raise
        finally:
            self._undo = None

    def _append(self, f: Followed, rd: Read) -> None:
        batch = rd.batch
        if f.entry.fp_len < min(FP_BYTES, rd.end):
            # A rerun takes the records marked with this ID as read from the file it finds under the
            # registry's identity, so the committed fingerprint must cover every line appended under the
            # ID (up to FP_BYTES) before the first of them is: otherwise a file truncated (or deleted and
            # its inode reused) while no follower runs would pass for this one, and its new lines would
            # be skipped as if in the log. Committed here (the lines before are appended and their
            # positions set), this costs a commit per batch only while a file's first FP_BYTES grow.
            self.commit()
        recovering = rd.starts[0] <= f.recover_until
        if self.lane is not None and not recovering:
            spliced = self.lane(batch, self.opts.decoder)
            if spliced is not None:
                self.stats.produced.lane_batches += 1
                # a batch without blank lines (the usual case) has a record for every line start
                starts = rd.starts if len(spliced.values) == len(rd.starts) else \
                    list(compress(rd.starts, self.record_lines(batch.lines)))
                if len(starts) != len(spliced.values):  # a lane must give one record per record line
                    raise AssertionError("lane records do not match the batch's lines")
                self._append_spliced(f, spliced, starts)
                f.entry.pos, f.entry.lines = rd.end, rd.first_line - 1 + len(rd.starts)
                self.dirty = True
                return
        self.stats.produced.line_batches += 1
        self._append_lines(f, rd, recovering)
        f.entry.pos, f.entry.lines = rd.end, rd.first_line - 1 + len(rd.starts)
        self.dirty = True

    def _append_lines(self, f: Followed, rd: Read, recovering: bool) -> None:
        decode = self.opts.decoder
        pending: dict[int, list[Item]] = {}
        fid = f.entry.id
        fixed = self._fixed()
        marks = self.pos.marks
        want = self.opts.echo is not None

        def flush() -> None:
            for p, items in pending.items():
                if items:
                    self._appended(self.app.append(p, items, want_lines=want))
            pending.clear()

        for lineno, (line, start) in enumerate(zip(rd.batch.lines, rd.starts, strict=True), rd.first_line):
            if isinstance(line, TooLong):
                reason = f"record of {line.length} bytes is over --max-record-bytes {self.opts.max_record_bytes}"
                # the line is still in the file: its first bytes go to the dead letter, as produce's do
                raw = os.pread(f.fd, min(line.length, RAW_KEEP), start) if self.dead is not None else b""
            elif not line.strip():
                continue
            else:
                try:
                    key, value, headers, _ = decode(line)
                except ValueError as e:
                    reason, raw = str(e), line
                else:
                    p = fixed if fixed is not None else self._null_partition(f) if key is None else self.part(key)
                    if recovering and start <= marks.get(p, {}).get(fid, -1):
                        self.stats.already += 1
                        continue
                    pending.setdefault(p, []).append(
                        (b"null" if key is None else orjson.dumps(key), value, _with_mark(headers, fid, start)))
                    if self.opts.per_record:
                        flush()
                    continue
            if self.opts.on_error == "fail":
                flush()
                f.entry.pos, f.entry.lines = start, lineno - 1
                self.dirty = True
                self.commit()
                raise DataError(f"{f.entry.path}:{lineno}: the line at byte {start}: {reason}; "
                                f"{self.stats.produced.records} record(s) before it were appended and are durable, "
                                "nothing after it (use --on-error skip or dead-letter=FILE to go on)")
            self.stats.produced.rejected += 1
            if self.dead is not None:
                self.dead.write(f.entry.path, lineno, reason, raw, byte=start,
                                length=line.length if isinstance(line, TooLong) else None)
        flush()

    # -- the loop ----------------------------------------------------------------------------

    def commit(self) -> None:
        for f in self.open.values():
            if len(f.head) > f.entry.fp_len:
                f.entry.fp_len, f.entry.fp = len(f.head), fingerprint(f.head)
        self.reg.scan_from = dict(self.next_offsets)
        self.pos.commit()
        self.dirty = False

    def _drain(self, f: Followed) -> int:
        """Append what f holds now; the number of read batches."""
        n = 0
        while not stopflag.is_set():
            if f.truncated():
                f = self._restart(f)
            rd = f.read(READ_BYTES, self.opts.max_record_bytes)
            if rd is None:
                break
            self.append(f, rd)
            n += 1
        return n

    def _restart(self, f: Followed) -> Followed:
        """f was truncated in place: its rest is gone; read it again from its start as a new generation."""
        self.stats.truncations += 1
        lost = len(f.carry) + f.skipping
        self.say(f"{f.entry.path}: truncated; read again from its start" +
                 (f" ({lost} byte(s) after its last newline were never appended)" if lost else ""))
        del self.open[f.entry.id]
        fresh = self._new_generation(f.entry.path, f.entry.origin, f.fd, os.fstat(f.fd))
        fresh.rotated_at = f.rotated_at
        return fresh

    def run(self, idle: float | None) -> FollowStats:
        from streamctl.live.wait import Waiter

        self.scan(first=True)
        self.commit()
        folders = sorted({os.path.abspath(os.path.dirname(_fixed_part(p)) or ".") for p in self.patterns})
        waiter = Waiter([d for d in folders if os.path.isdir(d)] or ["."], max_wait=0.2, recursive=False)
        last_new = last_commit = last_scan = time.monotonic()
        try:
            while not stopflag.is_set():
                got = 0
                # renamed-away files first: a file is finished before the new file of its name starts
                for f in sorted(self.open.values(), key=lambda f: f.rotated_at is None):
                    got += self._drain(f)
                    if stopflag.is_set():
                        break
                now = time.monotonic()
                if not got or now - last_scan >= GLOB_INTERVAL:
                    self.scan()
                    self._close_finished()
                    last_scan = now
                if self.dirty and now - last_commit >= COMMIT_INTERVAL:
                    self.commit()
                    last_commit = now
                if got:
                    last_new = now
                    continue
                if idle is not None and now - last_new >= idle:
                    self.stats.idle = True
                    break
                waiter.wait(None if idle is None else max(idle - (now - last_new), 0))
        finally:
            waiter.close()
            try:
                self.commit()
            finally:
                for f in self.open.values():
                    f.close()
                if self.dead is not None:
                    self.dead.close()
        return self.stats


def _fixed_part(pattern: str) -> str:
    """The part of a glob before its first wildcard component (its folder is what is watched)."""
    import glob

    parts = pattern.split(os.sep)
    for i, part in enumerate(parts):
        if glob.has_magic(part):
            return os.sep.join(parts[:i]) + os.sep
    return pattern


def _with_mark(headers: bytes | None, fid: str, start: int) -> bytes:
    """A record's headers JSON text with the mark added."""
    mark = b'"streamctl.file":"%s:%d"' % (fid.encode(), start)
    if not headers or headers == b"{}":
        return b"{" + mark + b"}"
    if MARK in headers:
        h = orjson.loads(headers)
        h["streamctl.file"] = f"{fid}:{start}"
        return orjson.dumps(h)
    return headers[:-1] + b"," + mark + b"}"


def follow(log: Log, patterns: list[str], opts: ProduceOptions, appender: Appender, *, raw: bool,
           idle: float | None, say: Callable[[str], None]) -> FollowStats:
    """Follow `patterns` (names or globs) into `log` until a stop signal or `idle` seconds without new lines."""
    if not patterns:
        raise UsageError("--follow needs at least one FILE (a name or a quoted glob) to follow; "
                         "it cannot follow stdin (pipe `tail -F FILE` into produce instead)")
    if "-" in patterns:
        raise UsageError("--follow reads files, not stdin (-): name the file to follow")
    if "" in patterns:
        raise UsageError("--follow: a FILE is an empty name; name a file or a quoted glob to follow")
    positions = Positions(log)
    try:
        return Follower(log, patterns, opts, appender, positions, raw, say).run(idle)
    finally:
        positions.close()


