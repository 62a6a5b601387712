"""stat: what a log holds, how far behind each group is, and for how long.

Lag is counted in offsets (next offset minus committed), as Kafka counts it;
gaps left by compaction or retention are included. Lag age is how long the
oldest unread record has waited: now minus the ts of the record at the
committed offset, or of the first record after it when compaction or retention
removed that one. Only that one record is read (a binary search by offset in
its segment), so stat stays cheap on big logs.

A group that never committed a partition would start there at the earliest
record (what `consume --group` does), so its lag is counted from the first
offset and its lag age from the first record.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from streamctl.groups import offsets
from streamctl.storage import reader, record, segment
from streamctl.storage.log import Log
from streamctl.timeparse import now_ms


@dataclass
class GroupLag:
    group: str
    partition: int
    committed: int | None  # None: the group never committed this partition
    lag: int
    lag_age_ms: int


@dataclass
class PartitionStat:
    partition: int
    first_offset: int
    next_offset: int
    records: int
    segments: int
    bytes: int
    first_ts: int | None
    last_ts: int | None


@dataclass
class LogStat:
    log: str
    partitions: list[PartitionStat]
    groups: list[GroupLag]
    capture: dict | None = None  # a captured log: its slot and the WAL the slot holds back (capture.status)
    files: list[Any] = field(default_factory=list)  # ingest.files.FileStat: files fed by produce --follow

    def to_dict(self) -> dict:
        d: dict = {"log": self.log, "partitions": [asdict(p) for p in self.partitions],
                   "groups": [asdict(g) for g in self.groups]}
        if self.capture is not None:
            d["capture"] = self.capture
        if self.files:
            d["files"] = [asdict(f) for f in self.files]
        return d


def ts_at_or_after(log: Log, p: int, offset: int) -> int | None:
    """The ts of the first record of partition p with an offset >= `offset` (None: there is none).

    Reads one record: the segment that holds `offset` is found by name, the line
    by a binary search on offsets; only when that segment has nothing at or after
    `offset` (its tail compacted away) does the next segment's first line answer.
    """
    segs = log.segments(p)
    start = 0
    for i, s in enumerate(segs):
        if s.base <= offset:
            start = i
    for seg in segs[start:]:
        try:
            fd = segment.open_read(seg.path)
        except FileNotFoundError:
            continue  # removed by retention or a compaction swap since the listing: the next one holds later offsets
        try:
            end = segment.visible_end(fd, os.fstat(fd).st_size)
            pos = segment.bisect(fd, end, segment.offset_key, offset) if offset > seg.base else 0
            found = segment.line_at_or_after(fd, pos, end, end)
            if found is not None:
                return record.envelope(found[1])[2]
        except record.BadRecord as e:
            raise reader.corrupt(seg.path, None, e) from None
        finally:
            os.close(fd)
    return None


def stat(log: Log, now: int | None = None) -> LogStat:
    now = now_ms() if now is None else now
    parts = []
    for p in range(log.partitions):
        info = reader.partition_info(log, p)
        parts.append(PartitionStat(p, info.first_offset, info.next_offset, reader.count_records(log, p),
                                   info.segments, info.bytes, info.first_ts, info.last_ts))
    groups = []
    for g in log.list_groups():
        committed = offsets.load(log, g)
        for ps in parts:
            c = committed.get(ps.partition)
            start = c if c is not None else ps.first_offset
            lag = max(ps.next_offset - start, 0)
            age = 0
            if lag > 0:
                ts = ts_at_or_after(log, ps.partition, start)
                # a clock that stepped back makes a record look newer than now: it has not waited
                age = max(now - ts, 0) if ts is not None else 0
            groups.append(GroupLag(g, ps.partition, c, lag, age))
    capture = None
    if "capture" in log.meta.extra:
        from streamctl.capture.status import capture_status

        capture = capture_status(log)
    from streamctl.ingest.files import file_stats

    return LogStat(log.path, parts, groups, capture, file_stats(log))


def format_age(ms: int) -> str:
    """Milliseconds for people: `0s`, `850ms`, `42s`, `3m12s`, `2h5m`, `3d4h` (two units at most)."""
    if ms <= 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    secs = ms // 1000
    units = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))
    parts: list[str] = []
    for name, size in units:
        if secs >= size or parts:
            n, secs = divmod(secs, size)
            parts.append(f"{n}{name}")
        if len(parts) == 2:
            break
    while len(parts) > 1 and parts[-1][0] == "0":
        parts.pop()
    return "".join(parts)


# The text exposition format (version 0.0.4), as node_exporter's textfile collector reads it.
PROM_PARTITION = (
    ("streamctl_partition_first_offset", "First offset still stored in the partition.", "first_offset"),
    ("streamctl_partition_next_offset", "Offset the next appended record will get.", "next_offset"),
    ("streamctl_partition_records", "Records stored in the partition.", "records"),
    ("streamctl_partition_bytes", "Bytes of the partition's segment files.", "bytes"),
)
PROM_GROUP = (
    ("streamctl_group_committed_offset", "Next offset the consumer group will read (absent: never committed).",
     "committed"),
    ("streamctl_group_lag", "Offsets between the group's committed offset and the partition's next offset.", "lag"),
    ("streamctl_group_lag_age_seconds", "How long the oldest record the group has not read has waited (0: no lag).",
     "lag_age_ms"),
)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def prometheus(stats: list[LogStat]) -> str:
    """Gauges for every log in `stats`, each metric's samples together under one HELP and TYPE."""
    lines: list[str] = []
    for name, help_, attr in PROM_PARTITION:
        lines += [f"# HELP {name} {_help(help_)}", f"# TYPE {name} gauge"]
        for st in stats:
            for ps in st.partitions:
                lines.append(f'{name}{{log="{_label(st.log)}",partition="{ps.partition}"}} {getattr(ps, attr)}')
    for name, help_, attr in PROM_GROUP:
        lines += [f"# HELP {name} {_help(help_)}", f"# TYPE {name} gauge"]
        for st in stats:
            for g in st.groups:
                v = getattr(g, attr)
                if v is None:
                    continue
                text = f"{v / 1000:.3f}" if attr == "lag_age_ms" else str(v)
                lines.append(f'{name}{{log="{_label(st.log)}",group="{_label(g.group)}",'
                             f'partition="{g.partition}"}} {text}')
    return "\n".join(lines) + "\n"
