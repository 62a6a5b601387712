"""Reading a partition: its bounds, finding an offset or a time, and streaming its lines.

Readers take no locks. They see only whole lines, hold each segment's file
descriptor while reading it (so a compaction swap underneath does not change
what they read), and move to the next segment by offset, not by file name, so a
merge of segments during compaction neither skips nor repeats a record.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from streamctl.errors import StorageError
from streamctl.storage import record, segment
from streamctl.storage.log import Log
from streamctl.storage.segment import Segment


@dataclass
class PartitionInfo:
    partition: int
    first_offset: int
    next_offset: int
    segments: int
    bytes: int
    first_ts: int | None
    last_ts: int | None
    # The base offset of the first segment: the offsets below it were in segments retention
    # deleted. Offsets from it to first_offset were only removed by compaction (which keeps
    # each segment's name, so its base, even when it keeps none of its records).
    first_base: int = 0


def corrupt(path: str, pos: int | None, e: Exception, hint: str = "") -> StorageError:
    """A stored line that is not a record: its file, line and byte, and the reason."""
    where = path if pos is None else segment.place(path, pos)
    return StorageError(f"{where}: corrupt record ({e}); run `streamctl check` on the log{hint}")


def check_block(path: str, pos: int, block: bytes | bytearray, start: int = 0, end: int | None = None) -> None:
    """Refuse a block of whole stored lines (read at byte `pos` of `path`) holding a line that is not
    a record: every reader calls this before handing lines on (segment.first_bad_line says what
    is checked)."""
    bad = segment.first_bad_line(block, start, len(block) if end is None else end)
    if bad is not None:
        raise corrupt(path, pos + bad[0] - start, bad[1])


def check_offsets(path: str, pos: int, block: bytes | bytearray, end: int, prev: int) -> int:
    """The last offset of a checked block of whole lines block[:end] read at byte `pos`, after making
    sure its first offset is above `prev` (the last offset of the block before it) and not above
    its last: offsets are only compared at block edges, which costs nothing per line."""
    first = record.offset_of(bytes(block[: block.find(b"\n", 0, end) + 1]))
    j = block.rfind(b"\n", 0, end - 1) + 1
    last = record.offset_of(bytes(block[j:end]))
    if first <= prev:
        raise corrupt(path, pos, ValueError(f"offset {first} does not increase (previous {prev})"))
    if last < first:
        raise corrupt(path, pos + j, ValueError(f"offset {last} does not increase (first of its block {first})"))
    return last


def _first_line(fd: int, end: int) -> bytes | None:
    found = segment.line_at_or_after(fd, 0, end, end)
    return found[1] if found else None


def _open(seg: Segment) -> tuple[int, int] | None:
    """(fd, visible end) of a segment, or None if it vanished (retention, compaction)."""
    try:
        fd = segment.open_read(seg.path)
    except FileNotFoundError:
        return None
    return fd, segment.visible_end(fd, os.fstat(fd).st_size)


def partition_info(log: Log, p: int) -> PartitionInfo:
    segs = log.segments(p)
    total = 0
    first_off = first_ts = last_ts = first_base = None
    next_off = segs[-1].base if segs else 0
    for seg in segs:
        opened = _open(seg)
        if opened is None:
            continue
        fd, end = opened
        if first_base is None:
            first_base = seg.base
        try:
            total += os.fstat(fd).st_size
            if first_off is None:
                line = _first_line(fd, end)
                if line is not None:
                    try:
                        first_off, _, first_ts = record.envelope(line)
                    except record.BadRecord as e:
                        raise corrupt(seg.path, 0, e) from None
        finally:
            os.close(fd)
    for seg in reversed(segs):
        opened = _open(seg)
        if opened is None:
            continue
        fd, end = opened
        try:
            line = segment.last_line(fd, end)
        finally:
            os.close(fd)
        if line is not None:
            try:
                off, _, last_ts = record.envelope(line)
            except record.BadRecord as e:
                raise corrupt(seg.path, end - len(line), e) from None
            next_off = max(next_off, off + 1)
            break
    if first_off is None:
        first_off = next_off
    return PartitionInfo(p, first_off, next_off, len(segs), total, first_ts, last_ts,
                         next_off if first_base is None else first_base)


def count_records(log: Log, p: int) -> int:
    n = 0
    for seg in log.segments(p):
        opened = _open(seg)
        if opened is None:
            continue
        fd, end = opened
        try:
            for block in segment.iter_blocks(fd, 0, end):
                n += block.count(b"\n")
        finally:
            os.close(fd)
    return n


def offset_for_time(log: Log, p: int, ts: int) -> int:
    """Offset of the first record of partition p with ts >= `ts` (or the next offset)."""
    for seg in log.segments(p):
        opened = _open(seg)
        if opened is None:
            continue
        fd, end = opened
        try:
            last = segment.last_line(fd, end)
            if last is None or record.envelope(last)[2] < ts:
                continue
            pos = segment.bisect(fd, end, segment.ts_key, ts)
            found = segment.line_at_or_after(fd, pos, end, end)
            if found is not None:
                return record.offset_of(found[1])
        finally:
            os.close(fd)
    return partition_info(log, p).next_offset


def offset_from_end(log: Log, p: int, n: int) -> int:
    """Offset of the n-th record from the end of partition p (its first offset if fewer)."""
    remaining = n
    for seg in reversed(log.segments(p)):
        if remaining <= 0:
            break
        opened = _open(seg)
        if opened is None:
            continue
        fd, end = opened
        try:
            count = sum(b.count(b"\n") for b in segment.iter_blocks(fd, 0, end))
            if count >= remaining:
                for idx, (_, line) in enumerate(segment.iter_lines(fd, 0, end)):
                    if idx == count - remaining:
                        return record.offset_of(line)
            remaining -= count
        finally:
            os.close(fd)
    info = partition_info(log, p)
    return info.next_offset if n <= 0 else info.first_offset


def segment_for(segs: list[Segment], offset: int) -> int:
    """Index of the last segment whose base <= offset (0 if none)."""
    idx = 0
    for i, s in enumerate(segs):
        if s.base <= offset:
            idx = i
        else:
            break
    return idx


def iter_blocks(log: Log, p: int, start: int, end: int | None) -> Iterator[bytes]:
    """Blocks of whole stored lines of partition p with offsets in [start, end).

    `end=None` reads to the visible end of the partition as it is when reached.
    """
    for _path, _pos, block in iter_located_blocks(log, p, start, end):
        yield block


def iter_envelopes(log: Log, p: int, start: int, end: int | None) -> Iterator[tuple[int, int, bytes]]:
    """(offset, ts, line) per record; a corrupt line is an error naming its segment and byte."""
    env = record.envelope
    for path, pos, block in iter_located_blocks(log, p, start, end):
        for line in block.splitlines(keepends=True):
            try:
                off, _, ts = env(line)
            except record.BadRecord as e:
                raise corrupt(path, pos, e) from None
            yield off, ts, line
            pos += len(line)


def iter_located_blocks(log: Log, p: int, start: int, end: int | None) -> Iterator[tuple[str, int, bytes]]:
    """(segment path, byte position, block) — iter_blocks with where each block came from."""
    for path, fd, lo, hi in iter_ranges(log, p, start, end):
        pos = lo
        prev = -1
        try:
            for block in segment.iter_blocks(fd, lo, hi):
                check_block(path, pos, block)
                prev = check_offsets(path, pos, block, len(block), prev)
                yield path, pos, block
                pos += len(block)
        except record.BadRecord as e:
            raise corrupt(path, _bad_line_pos(fd, pos, hi), e) from None


CHECK_CHUNK = 1 << 20  # bytes read per framing check on the zero-copy path
CHECKED_SPAN = 8 << 20  # checked bytes handed out per range (one sendfile call's worth)


def iter_checked_ranges(log: Log, p: int, start: int, end: int | None) -> Iterator[tuple[str, int, int, int]]:
    """iter_ranges for readers that copy the bytes unread (consume and replay to stdout, by
    sendfile): each range is read once into a reused buffer and its lines checked
    (check_block) before it is handed out, in ranges of about CHECKED_SPAN bytes, so
    a corrupt line stops the copy before it, named by segment and byte."""
    buf = bytearray(CHECK_CHUNK)
    for path, fd, lo, hi in iter_ranges(log, p, start, end):
        pos = out = lo
        prev = -1
        while pos < hi:
            n = min(len(buf), hi - pos)
            got = os.preadv(fd, [memoryview(buf)[:n]], pos)
            if got < n:
                raise StorageError(f"{path}: segment shrank while reading it")
            cut = buf.rfind(b"\n", 0, got) + 1
            if cut == 0:  # a line longer than the buffer
                buf = bytearray(len(buf) * 2)
                continue
            check_block(path, pos, buf, 0, cut)
            prev = check_offsets(path, pos, buf, cut, prev)
            pos += cut
            if pos - out >= CHECKED_SPAN or pos >= hi:
                yield path, fd, out, pos
                out = pos


def iter_ranges(log: Log, p: int, start: int, end: int | None) -> Iterator[tuple[str, int, int, int]]:
    """(segment path, fd, first byte, end byte): the stored lines of partition p with offsets in
    [start, end), one byte range per segment, for callers that copy bytes without looking at them.

    The fd stays open until the next range is asked for, so a compaction swap
    underneath does not change what is read. `end=None` reads to the visible end
    of the partition as it is when reached.
    """
    next_off = start
    while True:
        segs = log.segments(p)
        if not segs:
            return
        vanished = False
        for seg in segs[segment_for(segs, next_off):]:
            opened = _open(seg)
            if opened is None:
                vanished = True  # deleted or swapped under us: list the folder again
                break
            fd, vend = opened
            try:
                try:
                    lo, hi, last_off = _range_in(fd, vend, seg.base, next_off, end)
                except record.BadRecord as e:
                    raise corrupt(seg.path, _bad_line_pos(fd, 0, vend), e) from None
                if hi > lo:
                    yield seg.path, fd, lo, hi
                    next_off = last_off + 1
                if hi < vend:
                    return  # `end` falls inside this segment
            finally:
                os.close(fd)
        if vanished:
            continue
        if [s.base for s in log.segments(p)] == [s.base for s in segs]:
            return


def _range_in(fd: int, vend: int, base: int, start: int, end: int | None) -> tuple[int, int, int]:
    """(first byte, end byte, last offset in range) of the lines of one segment with offsets in [start, end)."""
    lo = segment.bisect(fd, vend, segment.offset_key, start) if start > base else 0
    last = segment.last_line(fd, vend)
    if last is None or lo >= vend:
        return vend, vend, start - 1
    last_off = record.offset_of(last)
    if end is None or last_off < end:
        return lo, vend, last_off
    hi = segment.bisect(fd, vend, segment.offset_key, end, start=lo)
    if hi <= lo:
        return lo, lo, start - 1
    return lo, hi, record.offset_of(segment.last_line(fd, hi) or b"")


def iter_blocks_reverse(log: Log, p: int, start: int, end: int,
                        chunk: int = segment.CHUNK) -> Iterator[bytes]:
    """Blocks of whole stored lines of partition p with offsets in [start, end), newest block first
    (lines inside a block stay in offset order). For scans that want each key's latest record:
    read backwards, the first sighting of a key is its latest.

    Like iter_located_blocks it holds a segment's fd while reading it and moves on by
    offset: the next segment is the last one whose base is below the lowest offset
    delivered so far, found in a fresh listing, so a compaction swap or merge
    underneath neither skips nor repeats a record.
    """
    upper = end  # every line with offset in [upper, end) has been delivered
    while upper > start:
        segs = [s for s in log.segments(p) if s.base < upper]
        if not segs:
            return
        seg = segs[-1]
        opened = _open(seg)
        if opened is None:
            continue  # swapped or deleted under us: list the folder again
        fd, vend = opened
        pos = 0
        try:
            hi = segment.bisect(fd, vend, segment.offset_key, upper)
            lo = segment.bisect(fd, hi, segment.offset_key, start) if start > seg.base else 0
            pos = hi
            want = chunk
            while pos > lo:
                n = min(want, pos - lo)
                buf = os.pread(fd, n, pos - n)
                if len(buf) < n:
                    raise StorageError(f"{seg.path}: segment shrank while reading it")
                cut = 0 if pos - n == lo else buf.find(b"\n") + 1
                if pos - n != lo and (cut == 0 or cut == n):
                    want *= 2  # no whole line in the chunk: a line longer than it
                    continue
                want = chunk
                block = buf[cut:] if cut else buf
                check_block(seg.path, pos - n + cut, block)
                pos -= n - cut
                upper = record.offset_of(block[: block.find(b"\n") + 1])
                yield block
            upper = min(upper, seg.base)
        except record.BadRecord as e:
            raise corrupt(seg.path, _bad_line_pos(fd, pos, vend), e) from None
        finally:
            os.close(fd)


def _bad_line_pos(fd: int, start: int, end: int) -> int | None:
    """Byte position of the first line from `start` that is not a record (for the error message)."""
    for pos, line in segment.iter_lines(fd, start, end):
        try:
            record.parse(line)
        except record.BadRecord:
            return pos
    return None


def iter_lines(log: Log, p: int, start: int, end: int | None) -> Iterator[bytes]:
    for block in iter_blocks(log, p, start, end):
        yield from block.splitlines(keepends=True)


def merge_by_ts(parts: Iterable[tuple[int, Iterable[bytes]]]) -> Iterator[tuple[int, int, bytes]]:
    """(partition, offset, line) of stored lines of several partitions, each in offset order, in
    (ts, partition, offset) order: the order of consume, tail and replay over partitions (the
    input order of window and join with the append time, streamctl.processing.mergeorder).
    consume's merge of runs of equal ts (clients/consumer.py) is the same order a run at a time."""
    env = record.envelope

    def keyed(p: int, lines: Iterable[bytes]) -> Iterator[tuple[int, int, int, bytes]]:
        for line in lines:
            off, _, ts = env(line)
            yield ts, p, off, line

    for _ts, p, off, line in heapq.merge(*(keyed(p, lines) for p, lines in parts)):
        yield p, off, line


def locate_corrupt(log: Log, p: int, start: int, e: Exception) -> StorageError:
    """Re-read partition p from `start`, parsing every line in full, so the error names the segment and byte."""
    try:
        for path, pos, block in iter_located_blocks(log, p, start, None):
            for line in block.splitlines(keepends=True):
                try:
                    record.parse(line)
                except record.BadRecord as bad:
                    return corrupt(path, pos, bad)
                pos += len(line)
    except StorageError as located:
        return located
    return StorageError(f"{log.path}: partition {p}: corrupt record ({e}); run `streamctl check`")
