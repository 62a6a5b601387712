"""consume: plan start and end offsets, stream records in order, commit what was delivered."""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from streamctl import offsets, reader, record, stopflag
from streamctl.errors import StorageError, UsageError
from streamctl.log import Log
from streamctl.timeparse import parse_time


@dataclass
class Position:
    start: int
    end: int | None  # exclusive; None = follow


@dataclass
class Plan:
    positions: dict[int, Position]
    notices: list[str] = field(default_factory=list)


def resolve_start(log: Log, p: int, spec: str, info: reader.PartitionInfo) -> int:
    """`earliest|latest|OFFSET|TIME|-N` -> an offset in partition p."""
    s = spec.strip()
    if s == "earliest":
        return info.first_offset
    if s == "latest":
        return info.next_offset
    if s.isdigit():
        return min(max(int(s), info.first_offset), info.next_offset)
    if s.startswith("-") and s[1:].isdigit():
        return reader.offset_from_end(log, p, int(s[1:]))
    return reader.offset_for_time(log, p, parse_time(s))


def validate_from(spec: str) -> None:
    s = spec.strip()
    if s in ("earliest", "latest") or s.isdigit() or (s.startswith("-") and s[1:].isdigit()):
        return
    parse_time(s)  # raises UsageError with the accepted forms


def plan(log: Log, partitions: list[int], from_spec: str | None, group: str | None,
         follow: bool = False) -> Plan:
    """Where each partition starts and (without follow) where it ends, snapshotted now."""
    committed = offsets.load(log, group) if group else {}
    out = Plan({})
    for p in partitions:
        info = reader.partition_info(log, p)
        if from_spec is None and p in committed:
            start = committed[p]
            if start > info.next_offset:
                raise StorageError(
                    f"{log.group_path(group)}: committed offset {start} for partition {p} is past the end "
                    f"of the log ({info.next_offset}); the log was truncated or replaced. Reset with "
                    f"`streamctl replay {log.path} --group {group} --to-latest --execute`")
            if start < info.first_offset:
                out.notices.append(
                    f"group {group}: partition {p}: committed offset {start} is no longer in the log "
                    f"(retention or compaction removed it); resuming at {info.first_offset}, "
                    f"the next existing record")
                start = info.first_offset
        else:
            start = resolve_start(log, p, from_spec or "earliest", info)
        out.positions[p] = Position(start, None if follow else info.next_offset)
    return out


Item = tuple[int, int, bytes]  # (partition, next offset after it, data)


def stream(log: Log, pl: Plan, merge: bool, per_line: bool) -> Iterator[Item]:
    """Yield (partition, next offset, data) where data is one line or a block of lines.

    With several partitions and `merge`, lines come in (ts, partition, offset) order.
    Without merge (one partition) and not per_line, whole blocks pass through untouched.
    """
    parts = [p for p, pos in pl.positions.items() if pos.end is None or pos.start < pos.end]
    if len(parts) == 1 and not per_line:
        p = parts[0]
        pos = pl.positions[p]
        for block in reader.iter_blocks(log, p, pos.start, pos.end):
            last = block[block.rfind(b"\n", 0, len(block) - 1) + 1:]
            yield p, record.offset_of(last) + 1, block
        return
    if len(parts) == 1 or not merge:
        for p in parts:
            pos = pl.positions[p]
            for off, _ts, line in reader.iter_envelopes(log, p, pos.start, pos.end):
                yield p, off + 1, line
        return

    def keyed(p: int) -> Iterator[tuple[int, int, int, bytes]]:
        pos = pl.positions[p]
        for off, ts, line in reader.iter_envelopes(log, p, pos.start, pos.end):
            yield ts, p, off, line

    for _ts, p, off, line in heapq.merge(*(keyed(p) for p in parts)):
        yield p, off + 1, line


class Committer:
    """Tracks what was delivered (flushed) and commits it for a group, at most every `interval` s."""

    def __init__(self, log: Log, group: str | None, interval: float = 1.0) -> None:
        self.log = log
        self.group = group
        self.interval = interval
        self.pending: dict[int, int] = {}
        self.delivered: dict[int, int] = {}
        self.committed: dict[int, int] = {}
        self._last = time.monotonic()

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
            offsets.commit(self.log, self.group, todo)
            self.committed.update(todo)
        self._last = time.monotonic()


@dataclass
class ConsumeStats:
    records: int = 0


def run(items: Iterator[Item], render: Callable[[bytes], bytes] | None, write: Callable[[bytes], bool],
        flush: Callable[[], None], committer: Committer, max_records: int | None) -> ConsumeStats:
    """Drive one consume: render, write, and commit only what a flush delivered."""
    stats = ConsumeStats()
    limit = max_records if max_records is not None else -1
    for p, next_off, data in items:
        if stopflag.is_set():
            break
        if render is None:
            n = data.count(b"\n")
            if 0 <= limit < stats.records + n:
                lines = data.splitlines(keepends=True)[: limit - stats.records]
                data = b"".join(lines)
                n = len(lines)
                next_off = record.offset_of(lines[-1]) + 1 if lines else next_off
            out = data
        else:
            out = render(data)
            n = 1
        stats.records += n
        committer.queued(p, next_off)
        if write(out):
            committer.flushed()
        if stats.records == limit:
            break
    flush()
    committer.flushed()
    committer.commit()
    return stats


def check_partition_arg(log: Log, partition: int | None) -> list[int]:
    if partition is None:
        return list(range(log.partitions))
    if not 0 <= partition < log.partitions:
        raise UsageError(f"partition {partition} does not exist in {log.path} (0..{log.partitions - 1})")
    return [partition]
