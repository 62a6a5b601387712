"""Retention: delete whole old closed segments by age or partition size (Kafka's delete policy).

Like Kafka, only a prefix of the closed segments is ever deleted (never a hole
in the middle, never the active segment):
- `retention_time_ms`: a segment goes when its newest record (its last ts) is
  at least that old (Kafka's retention.ms, which also uses the largest timestamp);
- `retention_bytes`: the oldest segments go while the partition, active
  segment included, stays at least that big without them (Kafka's
  retention.bytes is a per-partition budget: the log may exceed it by up to
  one segment, never fall below it).

Unlike Kafka, a segment is only deleted once every consumer group has read
past it (its last offset is below the group's committed next offset), so a
slow consumer never silently loses records; `force` overrides. A group that
never committed an offset for the partition has not read past anything, and
an unreadable group file stops retention (it cannot be known what that group
read) unless forced.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from streamctl.errors import StorageError
from streamctl.groups import offsets
from streamctl.storage import record, segment
from streamctl.storage.fsutil import NOFOLLOW, fsync_dir
from streamctl.storage.log import Log
from streamctl.storage.segment import Segment


@dataclass(frozen=True)
class RetentionOptions:
    retention_time_ms: int | None = None
    retention_bytes: int | None = None
    force: bool = False

    @property
    def active(self) -> bool:
        return self.retention_time_ms is not None or self.retention_bytes is not None


@dataclass
class SegmentFacts:
    seg: Segment
    bytes: int
    records: int
    first_offset: int | None
    last_offset: int | None
    last_ts: int | None


@dataclass
class RetentionPlan:
    partition: int
    delete: list[SegmentFacts] = field(default_factory=list)
    # segments retention would delete but a group has not read past: (facts, groups)
    blocked: list[tuple[SegmentFacts, list[str]]] = field(default_factory=list)

    @property
    def records(self) -> int:
        return sum(f.records for f in self.delete)

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.delete)

    def blocked_notice(self) -> str | None:
        if not self.blocked:
            return None
        groups = sorted({g for _, gs in self.blocked for g in gs})
        first = next((f.first_offset for f, _ in self.blocked if f.first_offset is not None), None)
        last = next((f.last_offset for f, _ in reversed(self.blocked) if f.last_offset is not None), None)
        span = f" (offsets {first}-{last})" if first is not None and last is not None else ""
        return (f"partition {self.partition}: retention kept {len(self.blocked)} old segment(s){span} that "
                f"group(s) {', '.join(groups)} have not read past; --force deletes them anyway")


def facts(seg: Segment) -> SegmentFacts:
    fd = os.open(seg.path, os.O_RDONLY | NOFOLLOW)
    try:
        size = os.fstat(fd).st_size
        end = segment.visible_end(fd, size)
        last = segment.last_line(fd, end)
        first = segment.line_at_or_after(fd, 0, end, end)
        n = sum(b.count(b"\n") for b in segment.iter_blocks(fd, 0, end))
    finally:
        os.close(fd)
    if last is None or first is None:
        return SegmentFacts(seg, size, 0, None, None, None)
    off, _, ts = record.envelope(last)
    return SegmentFacts(seg, size, n, record.offset_of(first[1]), off, ts)


def group_positions(log: Log, force: bool) -> dict[str, dict[int, int]]:
    """Committed offsets of every group; an unreadable group file is an error unless forced."""
    out: dict[str, dict[int, int]] = {}
    for g in log.list_groups():
        try:
            out[g] = offsets.load(log, g)
        except StorageError as e:
            if force:
                continue
            raise StorageError(f"{e}; retention will not guess what group {g} has read (use --force to "
                               "delete old segments anyway)") from None
    return out


def plan(log: Log, p: int, closed: list[Segment], all_bytes: int, opts: RetentionOptions, now: int,
         groups: dict[str, dict[int, int]]) -> RetentionPlan:
    """Which closed segments (oldest first) retention deletes now, and which groups protect."""
    out = RetentionPlan(p)
    if not opts.active or not closed:
        return out
    cand: list[SegmentFacts] = []
    remaining = all_bytes
    for seg in closed:
        f = facts(seg)
        by_time = (opts.retention_time_ms is not None
                   and (f.last_ts is None or now - f.last_ts >= opts.retention_time_ms))
        by_bytes = opts.retention_bytes is not None and remaining - f.bytes >= opts.retention_bytes
        if not (by_time or by_bytes):
            break
        remaining -= f.bytes
        cand.append(f)
    for i, f in enumerate(cand):
        readers = [] if opts.force or f.last_offset is None else sorted(
            g for g, offs in groups.items() if offs.get(p, 0) <= f.last_offset)
        if readers:
            # a prefix only: everything from here on stays
            out.blocked = [(x, [g for g, offs in groups.items()
                                if x.last_offset is not None and offs.get(p, 0) <= x.last_offset])
                           for x in cand[i:]]
            break
        out.delete.append(f)
    return out


def apply(pdir: str, rp: RetentionPlan) -> None:
    """Delete the planned segments, oldest first. Caller holds the partition lock.

    Readers holding a deleted segment open keep reading it; one that lists the
    folder again moves to the next existing offset (reader.iter_blocks).
    """
    for f in rp.delete:
        try:
            os.unlink(f.seg.path)
        except FileNotFoundError:
            pass
    if rp.delete:
        fsync_dir(pdir)
        segment.write_manifest(pdir)
