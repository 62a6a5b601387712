"""Log compaction: keep only the latest record of each key (Kafka's cleaner), plus retention.

Per partition, over the closed segments (the active one only after a roll):

1. Scan (streamctl.maintenance.keyindex): each segment is read newest block first, so the
   first sighting of a key is its latest line; a block whose keys were all
   seen costs one regex findall and one set test, no JSON parsing. State: one
   dict entry per distinct key (key text -> place of its latest line), so
   memory is bounded by the number of keys, not by the log size. For logs of
   PARALLEL_SCAN_BYTES or more the segments are split into consecutive runs
   scanned by forked processes, one per core (streamctl.parallel), merged in
   segment order.
2. Recopy: each segment keeps the lines that are the latest of their key,
   every null-key line (kept as is: there is nothing for them to supersede),
   and everything newer than --min-lag. Kept lines are the stored bytes,
   sliced out of the segment at their places, never re-serialized. A latest record that is a
   tombstone goes once its ts is --tombstone-retention old.
3. Runs of neighbouring segments whose cleaned size fits in one segment are
   merged into one (named by the first one's base offset); a segment that
   loses nothing and merges with nothing is not rewritten. Each run is
   swapped in with streamctl.storage.replace (crash-safe, under the partition lock only
   for the swap), oldest run first: a record removed from one run is always
   superseded by a record still present in the same or a later run, so a
   kill -9 between two swaps never loses a key's latest value, and an expired
   tombstone is only removed together with (or after) the older values it deleted.

Decisions (see docs/guide/compaction-and-retention.md):
- Keys compare as their stored JSON text, as Kafka compares key bytes.
- Tombstone age is measured from the tombstone's own ts (append time), not from
  when its segment was first cleaned: deterministic, needs no extra state, and
  a consumer that reads at least once per --tombstone-retention sees every delete.
- --min-lag DUR is Kafka's min.compaction.lag.ms, per record: records younger
  than DUR are neither removed nor used to supersede older ones.
- Only the closed segments are compacted (a record superseded only by one in
  the active segment stays until the next compaction after a roll).
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from streamctl import parallel, stopflag
from streamctl.errors import Interrupted, StorageError
from streamctl.maintenance import keyindex, retention
from streamctl.storage import record, replace, segment
from streamctl.storage.fsutil import NOFOLLOW, fsync_dir, write_all
from streamctl.storage.log import Log
from streamctl.storage.segment import Segment, list_segments, segment_name
from streamctl.timeparse import now_ms

DEFAULT_TOMBSTONE_RETENTION_MS = 24 * 3600 * 1000
# The key scan runs on every core (up to MAX_SCAN_WORKERS forked processes) once
# the segments to scan hold PARALLEL_SCAN_BYTES: below that a fork costs more than it saves.
PARALLEL_SCAN_BYTES = 64 << 20
MAX_SCAN_WORKERS = 4


Progress = Callable[[int], None]  # called with bytes just processed


@dataclass(frozen=True)
class CompactOptions:
    roll: bool = False
    tombstone_retention_ms: int = DEFAULT_TOMBSTONE_RETENTION_MS
    min_lag_ms: int = 0
    dry_run: bool = False
    lock_timeout: float | None = None
    retention: retention.RetentionOptions = field(default_factory=retention.RetentionOptions)
    workers: int | None = None  # processes for the key scan; None: one per core for big logs


@dataclass
class PartitionResult:
    partition: int
    segments_before: int = 0
    segments_after: int = 0
    records_before: int = 0
    records_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    tombstones_removed: int = 0
    segments_rewritten: int = 0
    retention_deleted_segments: int = 0
    retention_deleted_records: int = 0
    rolled: bool = False
    notices: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"partition": self.partition,
                "segments_before": self.segments_before, "segments_after": self.segments_after,
                "records_before": self.records_before, "records_after": self.records_after,
                "bytes_before": self.bytes_before, "bytes_after": self.bytes_after,
                "tombstones_removed": self.tombstones_removed,
                "segments_rewritten": self.segments_rewritten,
                "retention_deleted_segments": self.retention_deleted_segments,
                "retention_deleted_records": self.retention_deleted_records,
                "rolled": self.rolled}


@dataclass
class _Scanned:
    """A closed segment after the scan. Closed segments are immutable, so pass 2 re-reads the same lines."""

    seg: Segment
    size: int          # visible bytes
    clean_end: int     # bytes [0, clean_end) are old enough to compact (--min-lag)
    ordinal: int       # its place in the scan: its lines' places are (ordinal << PLACE_BITS) + byte
    lines: int         # lines in [0, clean_end)
    nulls: list[int]   # byte positions of the null-key lines among them
    tail_lines: int    # lines in [clean_end, size), kept as they are
    first_ts: int | None


@dataclass
class _Piece:
    """A segment's cleaned content; data None = the segment unchanged (read only if merged)."""

    scanned: _Scanned
    size: int
    records: int
    changed: bool
    data: bytes | None
    tombstones_removed: int = 0


def _chunks(jobs: list[keyindex.ScanJob], workers: int) -> list[list[keyindex.ScanJob]]:
    """Consecutive runs of segments with about equal bytes, one per worker (at least one run)."""
    total = sum(job.end for job in jobs)
    if workers <= 1 or len(jobs) <= 1 or total == 0:
        return [jobs]
    chunks: list[list[keyindex.ScanJob]] = [[]]
    done = 0
    for job in jobs:
        if chunks[-1] and done >= total * len(chunks) / workers and len(chunks) < workers:
            chunks.append([])
        chunks[-1].append(job)
        done += job.end
    return chunks


def _read(path: str, size: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    try:
        data = os.pread(fd, size, 0)
        while len(data) < size:
            more = os.pread(fd, size - len(data), len(data))
            if not more:
                raise StorageError(f"{path}: segment shrank while compacting it")
            data += more
        return data
    finally:
        os.close(fd)


def _clean(sc: _Scanned, kept: list[int], tomb_cutoff: int) -> _Piece:
    """Pass 2 for one segment: its kept lines, as stored bytes sliced at their places."""
    base = sc.ordinal << keyindex.PLACE_BITS
    mine = kept[bisect_left(kept, base):bisect_left(kept, base + (1 << keyindex.PLACE_BITS))]
    may_expire = sc.first_ts is not None and sc.first_ts <= tomb_cutoff
    records = sc.lines + sc.tail_lines
    if len(mine) + len(sc.nulls) == sc.lines and not may_expire:
        return _Piece(sc, sc.size, records, False, None)
    if not mine and not sc.nulls and sc.clean_end == sc.size:
        return _Piece(sc, 0, 0, sc.lines > 0, b"")
    data = _read(sc.seg.path, sc.size)
    nulls = set(sc.nulls)
    at = [i - base for i in mine]
    order = sorted(nulls.union(at)) if nulls else at
    out: list[bytes] = []
    removed = 0
    for pos in order:
        end = data.find(b"\n", pos, sc.clean_end) + 1
        if end == 0 or (pos and data[pos - 1] != 0x0A):
            raise StorageError(f"{sc.seg.path}: changed while compacting it (closed segments must not change)")
        line = data[pos:end]
        if may_expire and pos not in nulls and record.is_tombstone(line):
            try:
                ts = record.envelope(line)[2]
            except record.BadRecord as e:
                raise keyindex.corrupt(sc.seg.path, pos, e) from None
            if ts <= tomb_cutoff:
                removed += 1
                continue
        out.append(line)
    if len(out) == sc.lines:
        return _Piece(sc, sc.size, records, False, None)
    body = b"".join(out)
    if sc.clean_end < sc.size:
        body += data[sc.clean_end:]
    return _Piece(sc, len(body), len(out) + sc.tail_lines, True, body, removed)


def _count_lines(path: str) -> tuple[int, int]:
    """(visible bytes, lines) of a segment; (0, 0) if it is gone."""
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    except FileNotFoundError:
        return 0, 0
    try:
        end = segment.visible_end(fd, os.fstat(fd).st_size)
        return end, sum(b.count(b"\n") for b in segment.iter_blocks(fd, 0, end))
    finally:
        os.close(fd)


def _has_record(path: str) -> bool:
    """Whether a segment holds a whole line (what _roll needs to close it)."""
    fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    try:
        return segment.visible_end(fd, os.fstat(fd).st_size) > 0
    finally:
        os.close(fd)


def _roll(pdir: str) -> bool:
    """Close the active segment (if it has records) by creating an empty one after it.

    Caller holds the partition lock. A torn tail is truncated first, as the
    Appender would, so the segment that becomes closed holds only whole lines.
    """
    segs = list_segments(pdir)
    if not segs:
        return False
    active = segs[-1]
    fd = os.open(active.path, os.O_RDWR | NOFOLLOW)
    try:
        last = segment.last_line(fd, segment.cut_torn_tail(fd))
    finally:
        os.close(fd)
    if last is None:
        return False
    try:
        following = record.offset_of(last) + 1
    except record.BadRecord as e:  # written after check_active_segments looked
        raise StorageError(f"{active.path}: the last line of the active segment is not a record ({e}); "
                           "it was not rolled. Run `streamctl check` on the log") from None
    path = os.path.join(pdir, segment_name(following))
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644))
    except FileExistsError:
        return False
    fsync_dir(pdir)
    segment.write_manifest(pdir)
    return True


def check_active_segments(log: Log) -> None:
    """Refuse a log whose active segment ends in a whole line that is not a record, naming the
    segment and the byte, before anything is changed in any partition. That line gives the next
    offset: every producer refuses to append after it, a roll cannot name the next segment, and
    compacting around it would only hide the damage (the Appender names it the same way)."""
    for p in range(log.partitions):
        segs = log.segments(p)
        if not segs:
            continue
        active = segs[-1]
        try:
            fd = os.open(active.path, os.O_RDONLY | NOFOLLOW)
        except FileNotFoundError:
            continue  # rolled or merged away meanwhile: the scan finds the partition as it is now
        try:
            end = segment.visible_end(fd, os.fstat(fd).st_size)
            last = segment.last_line(fd, end)
        finally:
            os.close(fd)
        if last is None:
            continue
        bad = segment.first_bad_line(last, 0, len(last))
        try:
            if bad is not None:
                raise bad[1]
            record.envelope(last)
        except record.BadRecord as e:
            raise StorageError(f"{segment.place(active.path, end - len(last))}: the last line of the active segment is "
                               f"not a record ({e}); nothing was compacted. Run `streamctl check` on the log, "
                               "then move the damaged line out of the segment") from None


class Compactor:
    """Runs retention then compaction over every partition of a log."""

    def __init__(self, log: Log, opts: CompactOptions, now: int | None = None,
                 progress: Progress | None = None) -> None:
        self.log = log
        self.opts = opts
        self.now = now_ms() if now is None else now
        # the active segment a dry run with --roll plans as closed (its torn tail, if any, is allowed:
        # the roll would cut it first)
        self._dry_rolled: str | None = None
        self.progress = progress
        self.tomb_cutoff = self.now - opts.tombstone_retention_ms
        self.lag_cutoff = self.now - opts.min_lag_ms if opts.min_lag_ms > 0 else None

    def work_bytes(self) -> int:
        """Bytes the progress callback will count in total (2 passes over closed segments)."""
        total = 0
        for p in range(self.log.partitions):
            segs = self.log.segments(p)
            closed = segs if self.opts.roll else segs[:-1]
            total += 2 * sum(s.size() for s in closed)
        return total

    def run(self) -> list[PartitionResult]:
        check_active_segments(self.log)
        try:
            if self.opts.dry_run:
                # no lock (a dry run writes nothing, not even the lock file)
                return [self.partition(p) for p in range(self.log.partitions)]
            with replace.compaction_lock(self.log.path):
                return [self.partition(p) for p in range(self.log.partitions)]
        except FileNotFoundError as e:
            raise StorageError(f"{e.filename}: vanished while compacting (another compaction, or a tool "
                               "deleting segments?)") from None

    def _locked(self, pdir: str) -> AbstractContextManager[None]:
        return replace.partition_lock(pdir, self.opts.lock_timeout)

    def partition(self, p: int) -> PartitionResult:
        pdir = self.log.partition_dir(p)
        res = PartitionResult(p)
        dry = self.opts.dry_run
        if not dry:
            with self._locked(pdir):
                replace.recover(pdir, owner=True)
                if self.opts.roll:
                    res.rolled = _roll(pdir)
        segs = list_segments(pdir)
        res.segments_before = len(segs) - (1 if res.rolled else 0)  # "before" = the log as it was
        res.bytes_before = sum(s.size() for s in segs)
        # a dry run plans on the log as the roll would leave it: the active segment closed, when it
        # holds a record (an empty one is not rolled, so it stays the active one)
        dry_roll = dry and self.opts.roll and bool(segs) and _has_record(segs[-1].path)
        closed = segs if dry_roll else segs[:-1]
        self._dry_rolled = segs[-1].path if dry_roll else None

        deleted: list[retention.SegmentFacts] = []
        if self.opts.retention.active:
            groups = retention.group_positions(self.log, self.opts.retention.force)
            rp = retention.plan(self.log, p, closed, res.bytes_before, self.opts.retention, self.now, groups)
            note = rp.blocked_notice()
            if note:
                res.notices.append(note)
            if rp.delete and not dry:
                with self._locked(pdir):
                    retention.apply(pdir, rp)
            deleted = rp.delete
            res.retention_deleted_segments = len(deleted)
            res.retention_deleted_records = rp.records
            closed = closed[len(deleted):]

        scanned, latest = self._scan_partition(closed)
        seen = {sc.seg.base for sc in scanned} | {f.seg.base for f in deleted}
        res.records_before = (res.retention_deleted_records + sum(sc.lines + sc.tail_lines for sc in scanned)
                              + sum(_count_lines(s.path)[1] for s in segs if s.base not in seen))
        removed, saved, merged_away, rewritten, tombs = self._compact(pdir, scanned, latest)
        res.segments_after = len(segs) - len(deleted) - merged_away
        if dry_roll:
            res.segments_after += 1  # the empty active segment the roll would create, as a real run reports
        res.records_after = res.records_before - res.retention_deleted_records - removed
        res.bytes_after = res.bytes_before - sum(f.bytes for f in deleted) - saved
        res.segments_rewritten = rewritten
        res.tombstones_removed = tombs
        return res

    def _scan_partition(self, closed: list[Segment]) -> tuple[list[_Scanned], dict[bytes, int]]:
        """Pass 1: which segments (and how much of each) to compact, then the key scan (streamctl.maintenance.keyindex).

        The segments are split into consecutive runs of about equal bytes, one
        per worker; each run is scanned newest block first, and the runs'
        results merge in segment order, so a later run's sighting wins.
        """
        plans = self._plan_scan(closed)
        jobs = [keyindex.ScanJob(i, pl[0].path, pl[2], pl[5]) for i, pl in enumerate(plans)]
        chunks = _chunks(jobs, self._workers(sum(job.end for job in jobs)))
        progress = self.progress

        def stop() -> None:
            if stopflag.is_set():
                raise Interrupted("compaction interrupted before anything was swapped in; the log is unchanged")

        def scan(chunk: list[keyindex.ScanJob]) -> tuple[dict[bytes, int], list[keyindex.SegmentKeys]]:
            report = progress if chunk is chunks[0] else None  # children have no terminal of their own
            return keyindex.scan_chunk(chunk, report, stop)

        latest: dict[bytes, int] = {}
        out: list[_Scanned] = []
        for chunk, (part, facts) in zip(chunks, parallel.fork_map(scan, chunks), strict=True):
            latest.update(part)  # chunks in segment order: a later segment's line wins
            if chunk is not chunks[0] and progress is not None:
                progress(sum(job.end for job in chunk))
            for job, got in zip(chunk, facts, strict=True):
                seg, vend, clean_end, tail_lines, first_ts, _ = plans[job.ordinal]
                out.append(_Scanned(seg, vend, clean_end, job.ordinal, got.lines, got.nulls, tail_lines,
                                    first_ts))
        return out, latest

    def _workers(self, nbytes: int) -> int:
        if self.opts.workers is not None:
            return max(1, self.opts.workers)
        return min(parallel.cores(), MAX_SCAN_WORKERS) if nbytes >= PARALLEL_SCAN_BYTES else 1

    def _plan_scan(self, closed: list[Segment]) -> list[tuple[Segment, int, int, int, int | None, int | None]]:
        """(segment, visible end, clean end, lines after the clean end, first ts, offsets spanned by
        [0, clean end)) of each segment to scan."""
        plans = []
        past_cutoff = False
        for seg in closed:
            if stopflag.is_set():
                raise Interrupted("compaction interrupted; segments swapped so far are compacted, the rest untouched")
            try:
                fd = os.open(seg.path, os.O_RDONLY | NOFOLLOW)
            except FileNotFoundError:
                raise StorageError(f"{seg.path}: vanished while compacting (is another tool deleting segments?)") from None
            try:
                size = os.fstat(fd).st_size
                vend = segment.visible_end(fd, size)
                if vend < size and seg.path != self._dry_rolled:
                    raise StorageError(f"{seg.path}: torn tail in a closed segment; run `streamctl check` "
                                       "(compaction does not guess)")
                clean_end = vend
                if self.lag_cutoff is not None:
                    last = segment.last_line(fd, vend)
                    if past_cutoff:
                        clean_end = 0
                    elif last is not None and record.envelope(last)[2] > self.lag_cutoff:
                        clean_end = segment.bisect(fd, vend, segment.ts_key, self.lag_cutoff + 1)
                        past_cutoff = True
                if clean_end == 0 and vend > 0:
                    break  # this segment and all after it are younger than --min-lag
                first = segment.line_at_or_after(fd, 0, vend, vend)
                try:
                    env = record.envelope(first[1]) if first else None
                except record.BadRecord as e:
                    raise keyindex.corrupt(seg.path, 0, e) from None
                first_ts = env[2] if env else None
                span = self._span(fd, seg.path, env[0], clean_end) if env and clean_end else None
                tail_lines = sum(b.count(b"\n") for b in segment.iter_blocks(fd, clean_end, vend))
            finally:
                os.close(fd)
            plans.append((seg, vend, clean_end, tail_lines, first_ts, span))
            if past_cutoff:
                break
        return plans

    @staticmethod
    def _span(fd: int, path: str, first_offset: int, end: int) -> int | None:
        """last - first + 1 over the offsets of the lines in [0, end): the most lines there can be."""
        last = segment.last_line(fd, end)
        try:
            return record.offset_of(last) - first_offset + 1 if last else None
        except record.BadRecord:
            return None  # the scan finds and names the damaged line

    def _compact(self, pdir: str, scanned: list[_Scanned], latest: dict[bytes, int]
                 ) -> tuple[int, int, int, int, int]:
        """Returns (records removed, bytes saved, segments merged away, runs rewritten, tombstones removed)."""
        kept = sorted(latest.values())
        latest.clear()
        limit = self.log.meta.segment_bytes
        removed = saved = merged_away = rewritten = tombs = 0
        run: list[_Piece] = []

        def flush() -> None:
            nonlocal removed, saved, merged_away, rewritten, tombs
            if not run or (len(run) == 1 and not run[0].changed):
                run.clear()
                return
            first, last = run[0].scanned, run[-1].scanned
            end = last.seg.base + 1  # the run is every segment with a base in [first, end)
            removed += sum(pc.scanned.lines + pc.scanned.tail_lines - pc.records for pc in run)
            saved += sum(pc.scanned.size for pc in run) - sum(pc.size for pc in run)
            merged_away += len(run) - 1
            rewritten += 1
            tombs += sum(pc.tombstones_removed for pc in run)
            if not self.opts.dry_run:
                self._swap_in(pdir, first.seg.base, end, run)
            run.clear()
            if stopflag.is_set():
                raise Interrupted("compaction interrupted; the segments swapped so far are compacted, "
                                  "the rest are untouched")

        size = 0
        for sc in scanned:
            piece = _clean(sc, kept, self.tomb_cutoff)
            if self.progress is not None:
                self.progress(sc.size)
            if run and size + piece.size > limit:
                flush()
                size = 0
            run.append(piece)
            size += piece.size
        flush()
        return removed, saved, merged_away, rewritten, tombs

    def _swap_in(self, pdir: str, base: int, end: int, run: list[_Piece]) -> None:
        path = replace.cleaned_path(pdir, base, end)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644)
        except FileExistsError:
            os.unlink(path)  # a dead run's; we hold the compaction lock
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644)
        try:
            for pc in run:
                write_all(fd, pc.data if pc.data is not None else _read(pc.scanned.seg.path, pc.scanned.size))
            os.fsync(fd)
        except BaseException as e:
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:
                pass
            if isinstance(e, OSError):
                reason = "disk full" if replace.is_enospc(e) else (e.strerror or str(e))
                raise StorageError(f"{path}: writing the compacted segment failed: {reason}; "
                                   "the log is unchanged") from None
            raise
        os.close(fd)
        with self._locked(pdir):
            try:
                replace.install(pdir, path, base, end)
            except OSError as e:
                reason = "disk full" if replace.is_enospc(e) else (e.strerror or str(e))
                if os.path.exists(path):  # before the commit point: the old segments stand
                    os.unlink(path)
                    raise StorageError(f"{path}: swapping in the compacted segment failed: {reason}; "
                                       "the log is unchanged") from None
                raise StorageError(f"{pdir}: finishing the swap of a compacted segment failed: {reason}; "
                                   "the next append, compact or `check --repair` finishes it") from None


def compact(log: Log, opts: CompactOptions, now: int | None = None,
            progress: Progress | None = None) -> list[PartitionResult]:
    return Compactor(log, opts, now, progress).run()
