"""stat: what a log holds and how far behind each group is."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from streamctl import offsets, reader
from streamctl.log import Log


@dataclass
class GroupLag:
    group: str
    partition: int
    committed: int | None
    lag: int


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

    def to_dict(self) -> dict:
        return {"log": self.log, "partitions": [asdict(p) for p in self.partitions],
                "groups": [asdict(g) for g in self.groups]}

    def max_lag(self) -> int:
        return max((g.lag for g in self.groups), default=0)


def stat(log: Log) -> LogStat:
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
            lag = ps.next_offset - (c if c is not None else ps.first_offset)
            groups.append(GroupLag(g, ps.partition, c, max(lag, 0)))
    return LogStat(log.path, parts, groups)
