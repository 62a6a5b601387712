"""consume: plan start and end offsets, stream records in order, commit what was delivered."""

from __future__ import annotations

import bisect
import heapq
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from streamctl import stopflag
from streamctl.errors import StorageError, UsageError
from streamctl.groups import offsets
from streamctl.storage import reader, record
from streamctl.storage.log import Log
from streamctl.timeparse import parse_time

if TYPE_CHECKING:
    from streamctl.clients.replay import Bound


@dataclass
class Position:
    start: int
    end: int | None  # exclusive; None = follow
    # end was set by --until: the partition holds a record at or past the bound, so a follow stops here
    reached: bool = False


@dataclass
class Plan:
    positions: dict[int, Position]
    notices: list[str] = field(default_factory=list)
    # A group run's starts that are not its committed offsets (given by --from, or moved past
    # records retention removed): the records before them are passed over on purpose, so they
    # count as consumed and are committed even if the run delivers nothing (Kafka commits a
    # group's position after a seek the same way). Without it, `--from latest` that found
    # nothing new would leave the next run to read the whole history it skipped.
    passed: dict[int, int] = field(default_factory=dict)


def resolve_start(log: Log, p: int, spec: str, info: reader.PartitionInfo) -> int:
    """`earliest|latest|OFFSET|TIME|-N` -> an offset in partition p."""
    s = spec.strip()
    if s == "earliest":
        return info.first_offset
    if s == "latest":
        return info.next_offset
    if s.isdecimal():
        return min(max(int(s), info.first_offset), info.next_offset)
    if s.startswith("-") and s[1:].isdecimal():
        return reader.offset_from_end(log, p, int(s[1:]))
    return reader.offset_for_time(log, p, parse_time(s))


def validate_from(spec: str) -> None:
    s = spec.strip()
    if s in ("earliest", "latest") or s.isdecimal() or (s.startswith("-") and s[1:].isdecimal()):
        return
    parse_time(s)  # raises UsageError with the accepted forms


def parse_until(spec: str, now: int | None = None) -> Bound:
    """`--until OFFSET|TIME`: a bare integer is an offset (in every partition), anything else a time."""
    from streamctl.clients.replay import parse_bound

    return parse_bound(spec, "--until", now)


def until_offset(log: Log, p: int, until: Bound, info: reader.PartitionInfo) -> tuple[int, bool]:
    """(offset of the first record at or past `until` in partition p, whether that record exists yet).

    For a time, the first record with ts >= it (ts never decreases in a partition); while no
    such record exists, the bound is the partition's end and more records may still come
    before it."""
    if until.kind == "offset":
        return until.value, until.value <= info.next_offset
    off = reader.offset_for_time(log, p, until.value)
    return off, off < info.next_offset


def plan(log: Log, partitions: list[int], from_spec: str | None, group: str | None,
         follow: bool = False, until: Bound | None = None, starts: dict[int, int] | None = None) -> Plan:
    """Where each partition starts and (without follow) where it ends, snapshotted now; `until`
    caps the ends (and, with follow, gives ends where the bound is already known). `starts`, when
    given, stands in for the group file's committed offsets (consume --sqlite: the database's)."""
    committed = starts if starts is not None else offsets.load(log, group) if group else {}
    out = Plan({})
    for p in partitions:
        info = reader.partition_info(log, p)
        if from_spec is None and p in committed:
            start = committed[p]
            if start > info.next_offset:
                raise StorageError(
                    f"{log.group_path(group or '')}: committed offset {start} for partition {p} is past the end "
                    f"of the log ({info.next_offset}); the log was truncated or replaced. Reset with "
                    f"`{offsets.reset_command(log.path, group or '', '--to-latest')}`")
            if start < info.first_offset:
                # Only retention's deleted range is told: records compaction removed are gaps a
                # reader passes over anywhere in the log (Kafka does not report them either).
                if start < info.first_base:
                    out.notices.append(
                        f"group {group}: partition {p}: committed offset {start} is no longer in the log "
                        f"(retention deleted its segment); resuming at {info.first_offset}, "
                        f"the next existing record")
                start = info.first_offset
        else:
            start = resolve_start(log, p, from_spec or "earliest", info)
        if group and (from_spec is not None or p in committed) and committed.get(p) != start:
            out.passed[p] = start
        pos = Position(start, None if follow else info.next_offset)
        if until is not None:
            bound, known = until_offset(log, p, until, info)
            if known or not follow:
                pos.end = max(start, bound if pos.end is None else min(pos.end, bound))
                pos.reached = known
        out.positions[p] = pos
    return out


Item = tuple[int, int, bytes]  # (partition, next offset after it, data)


def stream(log: Log, pl: Plan, merge: bool, per_line: bool = False) -> Iterator[Item]:
    """Yield (partition, next offset, data): data is one or more whole stored lines.

    With several partitions and `merge`, records come in (ts, partition, offset)
    order. Within a partition ts never decreases, so all of a partition's records
    with one ts are contiguous: the merge works on such runs (usually a whole
    produce batch) instead of on single lines. `per_line` splits data into lines.
    """
    parts = active_partitions(pl)
    if len(parts) == 1 or not merge:
        for p in parts:
            pos = pl.positions[p]
            if per_line:
                for off, _ts, line in reader.iter_envelopes(log, p, pos.start, pos.end):
                    yield p, off + 1, line
            else:
                for block in reader.iter_blocks(log, p, pos.start, pos.end):
                    last = block[block.rfind(b"\n", 0, len(block) - 1) + 1:]
                    yield p, record.offset_of(last) + 1, block
        return
    for _ts, p, _off, nxt, data in heapq.merge(*(_runs(log, p, pl.positions[p], per_line) for p in parts)):
        yield p, nxt, data


def active_partitions(pl: Plan) -> list[int]:
    """The partitions that may have records in range."""
    return [p for p, pos in pl.positions.items() if pos.end is None or pos.start < pos.end]


def copy_stored(log: Log, p: int, start: int, end: int | None, copy: Callable[[int, int, int], bool]) -> None:
    """Hand partition p's stored lines with offsets in [start, end) to `copy(fd, first byte,
    end byte)` as byte ranges: the zero-copy path of consume and replay. Each range is read once
    and its lines checked (reader.iter_checked_ranges) before it is handed on; a corrupt line
    stops the copy before it. Stops when copy returns False."""
    for _path, fd, lo, hi in reader.iter_checked_ranges(log, p, start, end):
        if not copy(fd, lo, hi):
            return


def _ts_of(line: bytes) -> int:
    return record.envelope(line)[2]


def _runs(log: Log, p: int, pos: Position, per_line: bool) -> Iterator[tuple[int, int, int, int, bytes]]:
    """(ts, partition, first offset, next offset, lines) for runs of equal ts in partition p."""
    env = record.envelope
    for path, at, block in reader.iter_located_blocks(log, p, pos.start, pos.end):
        try:
            first_off, _, first_ts = env(block)
            last = block[block.rfind(b"\n", 0, len(block) - 1) + 1:]
            last_off, _, last_ts = env(last)
            if first_ts == last_ts and not per_line:
                yield first_ts, p, first_off, last_off + 1, block
                continue
            lines = block.splitlines(keepends=True)
            if per_line:
                for line in lines:
                    off, _, ts = env(line)
                    yield ts, p, off, off + 1, line
                continue
            # ts never decreases: find each run's end by binary search, parsing O(log n) lines
            i = 0
            while i < len(lines):
                off, _, ts = env(lines[i])
                j = bisect.bisect_right(lines, ts, lo=i + 1, key=_ts_of)
                nxt = env(lines[j])[0] if j < len(lines) else last_off + 1
                yield ts, p, off, nxt, b"".join(lines[i:j])
                at += sum(map(len, lines[i:j]))
                i = j
        except record.BadRecord as e:
            raise reader.corrupt(path, at, e) from None


def then_sync(flush: Callable[[], None], sync: Callable[[], None] | None) -> Callable[[], None]:
    """`flush`, then `sync` (a file_syncer) when there is one: what a follower runs before a checkpoint."""
    if sync is None:
        return flush

    def both() -> None:
        flush()
        sync()
    return both


def file_syncer(fd: int, name: str = "stdout") -> Callable[[], None] | None:
    """An fsync of `fd` when it is a regular file, else None. A pipe or a terminal hands the
    records to a reader that owns their durability (kcat and kafka-console-consumer commit the
    same way); a file on disk is ours: its records must be on disk before the offsets that say
    they were delivered, or a power cut loses records the group has already passed."""
    import os
    import stat

    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
    except OSError:
        return None

    # The shell may have just created the file (`> out.jsonl`): its entry in its folder must be on
    # disk too, once. Its path is known on Linux (/proc); elsewhere only the file is synced.
    folder: list[str] = []
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
        if target.startswith("/"):
            folder.append(os.path.dirname(target))
    except OSError:
        pass

    def sync() -> None:
        try:
            os.fsync(fd)
            while folder:
                dfd = os.open(folder.pop(), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
        except OSError as e:
            raise StorageError(f"{name}: fsync failed: {e.strerror}; the records written since the last "
                               "commit were not committed (the next run delivers them again)") from None

    return sync


class Committer:
    """Tracks what was delivered (flushed) and commits it for a group, at most every `interval` s.

    `make_durable`, when set, runs before each commit that writes the group file: consume with
    stdout on a regular file fsyncs it there, so a committed offset never names a record that a
    power cut can still take out of the file."""

    def __init__(self, log: Log, group: str | None, interval: float = 1.0,
                 make_durable: Callable[[], None] | None = None) -> None:
        self.log = log
        self.group = group
        self.interval = interval
        self.make_durable = make_durable
        self.pending: dict[int, int] = {}
        self.delivered: dict[int, int] = {}
        self.committed: dict[int, int] = {}
        self._last = time.monotonic()

    def passed_over(self, positions: dict[int, int]) -> None:
        """Where a group run starts, where that is not its committed offset (Plan.passed): the
        records before it are consumed without being delivered; committed now, so a run that
        delivers nothing (or is killed before it does) still leaves the group there."""
        if not self.group or not positions:
            return
        self.delivered.update(positions)
        self.commit()

    def queued(self, p: int, next_offset: int) -> None:
        self.pending[p] = next_offset

    def flushed(self) -> None:
        self.delivered.update(self.pending)
        if self.group and time.monotonic() - self._last >= self.interval:
            self.commit()

    def commit(self) -> None:
        if not self.group:
            return
        todo = {p: o for p, o in self.delivered.items() if self.committed.get(p) != o}
        if todo:
            if self.make_durable is not None:
                self.make_durable()
            offsets.commit(self.log, self.group, todo)
            self.committed.update(todo)
        self._last = time.monotonic()

    def finish(self) -> None:
        """The last commit of a run."""
        self.commit()


@dataclass
class ConsumeStats:
    records: int = 0  # exact with a limit or a renderer; else blocks passed through uncounted
    blocks: int = 0


def run(items: Iterator[Item], render: Callable[[bytes], bytes] | None, write: Callable[[bytes], bool],
        flush: Callable[[], None], committer: Committer, max_records: int | None,
        select: Callable[[bytes], bytes] | None = None) -> ConsumeStats:
    """Drive one consume: filter (`select` keeps the matching lines of a block), render, write,
    and commit only what a flush delivered. Records the filter skips count as consumed: their
    offsets are committed with the next flush (or at the end)."""
    stats = ConsumeStats()
    limit = max_records if max_records is not None else -1
    # Counting the lines of every passed-through block costs as much as reading
    # it (scripts/bench: 0.3 s of a 0.5 s consume of 1M records); only a limit
    # or a renderer needs the count.
    counting = limit >= 0 or render is not None
    for p, next_off, data in items:
        if stopflag.is_set():
            break
        stats.blocks += 1
        if select is not None:
            try:
                data = select(data)
            except record.BadRecord as e:
                raise reader.locate_corrupt(committer.log, p, committer.pending.get(p, 0), e) from None
            if not data:
                committer.queued(p, next_off)
                continue
        if render is not None and data.find(b"\n") < len(data) - 1:
            # A block to render: split it once (its length is the count).
            lines = data.splitlines(keepends=True)
            if 0 <= limit < stats.records + len(lines):
                lines = lines[: limit - stats.records]
                if lines:
                    next_off = record.offset_of(lines[-1]) + 1
            n = len(lines)
            try:
                data = b"".join(map(render, lines))
            except record.BadRecord as e:
                raise reader.locate_corrupt(committer.log, p, committer.pending.get(p, 0), e) from None
        else:
            n = data.count(b"\n") if counting else 1
            if 0 <= limit < stats.records + n:
                lines = data.splitlines(keepends=True)[: limit - stats.records]
                data = b"".join(lines)
                n = len(lines)
                if lines:
                    next_off = record.offset_of(lines[-1]) + 1
            if render is not None and n:
                try:
                    data = render(data)
                except record.BadRecord as e:
                    raise reader.locate_corrupt(committer.log, p, committer.pending.get(p, 0), e) from None
        if counting:
            stats.records += n
        if n:
            committer.queued(p, next_off)
        if write(data):
            committer.flushed()
        if stats.records == limit:
            break
    flush()
    committer.flushed()
    committer.commit()
    return stats


def render_block(render: Callable[[bytes], bytes], data: bytes, log: Log, p: int, start: int) -> tuple[bytes, int]:
    """(rendered bytes, lines) of a block of whole stored lines of partition p read from offset `start`."""
    try:
        if data.find(b"\n") < len(data) - 1:
            lines = data.splitlines(keepends=True)
            return b"".join(map(render, lines)), len(lines)
        return render(data), 1
    except record.BadRecord as e:
        raise reader.locate_corrupt(log, p, start, e) from None


def check_partition_arg(log: Log, partition: int | None) -> list[int]:
    if partition is None:
        return list(range(log.partitions))
    if not 0 <= partition < log.partitions:
        raise UsageError(f"partition {partition} does not exist in {log.path} (0..{log.partitions - 1})")
    return [partition]
