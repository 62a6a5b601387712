"""Offset reset for a consumer group (Kafka's `kafka-consumer-groups --reset-offsets`).

A plan says, per partition, the committed offset now, the new one, and the lag
after the reset; nothing changes until `execute`. New offsets are clamped into
[first offset, next offset] of the partition, as Kafka does, so a reset never
points into a hole left by retention or past the end.

A reset is refused while a member of the group is consuming: live consumers
(`consume --group G --follow` / `--exec`) hold an flock on their slot
`groups/.G.m<N>.member` and on `groups/.G.p<N>.claim` for each partition they
own. We try a non-blocking flock on each of those files and keep it during the
write, so no member can join or claim a partition half-way through. A one-shot `consume --group G` without
--follow holds no claim; resetting under it races with its final commit
(last writer wins), exactly like Kafka's tool with an inactive group.
"""

from __future__ import annotations

import errno
import fcntl
import os
from dataclasses import dataclass

from streamctl import offsets, reader
from streamctl.errors import StreamctlError, UsageError
from streamctl.fsutil import NOFOLLOW
from streamctl.log import Log
from streamctl.timeparse import now_ms

MODES = ("to-earliest", "to-latest", "to-offset", "to-datetime", "shift-by", "by-duration")


class GroupActive(StreamctlError):
    """A member of the group holds partitions: resetting now would be overwritten or lost."""


@dataclass(frozen=True)
class ResetSpec:
    mode: str  # one of MODES
    offset: int | None = None  # to-offset
    shift: int | None = None  # shift-by (may be negative)
    ts: int | None = None  # to-datetime, by-duration (resolved: now - duration)


@dataclass
class ResetRow:
    partition: int
    current: int | None  # committed, None when the group never committed this partition
    new: int
    first_offset: int
    next_offset: int

    @property
    def lag_after(self) -> int:
        return self.next_offset - self.new

    def as_row(self) -> dict:
        return {"partition": self.partition, "current": "-" if self.current is None else self.current,
                "new": self.new, "lag-after": self.lag_after}

    def as_json(self) -> dict:
        return {"partition": self.partition, "current": self.current, "new": self.new, "lag_after": self.lag_after}


def by_duration(ms: int, now: int | None = None) -> ResetSpec:
    return ResetSpec("by-duration", ts=(now_ms() if now is None else now) - ms)


def plan(log: Log, group: str, spec: ResetSpec, partitions: list[int]) -> list[ResetRow]:
    committed = offsets.load(log, group)
    rows = []
    for p in partitions:
        info = reader.partition_info(log, p)
        cur = committed.get(p)
        if spec.mode == "to-earliest":
            new = info.first_offset
        elif spec.mode == "to-latest":
            new = info.next_offset
        elif spec.mode == "to-offset":
            assert spec.offset is not None
            new = spec.offset
        elif spec.mode in ("to-datetime", "by-duration"):
            assert spec.ts is not None
            new = reader.offset_for_time(log, p, spec.ts)
        elif spec.mode == "shift-by":
            assert spec.shift is not None
            # No committed offset: consume would start at the earliest record; shift from there.
            new = (info.first_offset if cur is None else cur) + spec.shift
        else:
            raise UsageError(f"unknown reset mode {spec.mode!r}")
        new = min(max(new, info.first_offset), info.next_offset)
        rows.append(ResetRow(p, cur, new, info.first_offset, info.next_offset))
    return rows


def claim_path(log: Log, group: str, p: int) -> str:
    return os.path.join(log.groups_dir(), f".{group}.p{p}.claim")


class ClaimGuard:
    """Holds the group's partition claims (where claim files exist) for the duration of a reset."""

    def __init__(self, log: Log, group: str, partitions: list[int]) -> None:
        self.log, self.group, self.partitions = log, group, partitions
        self.fds: list[int] = []

    def __enter__(self) -> ClaimGuard:
        busy = []
        for p in range(self.log.partitions):
            try:
                fd = os.open(claim_path(self.log, self.group, p), os.O_RDONLY | NOFOLLOW)
            except FileNotFoundError:
                continue
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise StreamctlError(f"{claim_path(self.log, self.group, p)} is a symlink; refusing it") from None
                raise
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                busy.append(p)
                continue
            self.fds.append(fd)
        members = 0
        for path in member_paths(self.log, self.group):
            fd = _try_hold(path)
            if fd is None:
                continue
            if fd < 0:
                members += 1
            else:
                self.fds.append(fd)
        if busy or members:
            self._release()
            held = f"a member holds partition(s) {', '.join(str(p) for p in busy)}" if busy else \
                f"{members} live member(s), holding no partition yet"
            raise GroupActive(
                f"group {self.group} is consuming {self.log.path} right now ({held}); "
                "stop its consumers, then reset (Kafka refuses a reset of an active group too)")
        return self

    def _release(self) -> None:
        for fd in self.fds:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        self.fds.clear()

    def __exit__(self, *exc: object) -> None:
        self._release()


def member_paths(log: Log, group: str) -> list[str]:
    """The group's member slot files (`groups/.G.m<N>.member`, locked by each live member)."""
    prefix, suffix = f".{group}.m", ".member"
    try:
        names = os.listdir(log.groups_dir())
    except FileNotFoundError:
        return []
    return [os.path.join(log.groups_dir(), n) for n in sorted(names)
            if n.startswith(prefix) and n.endswith(suffix) and n[len(prefix):-len(suffix)].isdecimal()]


def _try_hold(path: str) -> int | None:
    """An fd holding path's flock; -1 when a live process holds it; None when the file is gone."""
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return -1
    return fd


def active_partitions(log: Log, group: str) -> list[int]:
    """Partitions a live member of the group holds now (for messages and dry runs)."""
    out = []
    for p in range(log.partitions):
        try:
            fd = os.open(claim_path(log, group, p), os.O_RDONLY | NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            out.append(p)
        finally:
            os.close(fd)
    return out


def live_members(log: Log, group: str) -> int:
    n = 0
    for path in member_paths(log, group):
        fd = _try_hold(path)
        if fd == -1:
            n += 1
        elif fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
    return n


def reset(log: Log, group: str, spec: ResetSpec, partitions: list[int], execute: bool) -> list[ResetRow]:
    """Plan the reset; with `execute`, plan and write it while holding the group's claims.

    Only the planned partitions change. Refused (GroupActive) while a member is consuming.
    """
    if not execute:
        return plan(log, group, spec, partitions)
    with ClaimGuard(log, group, partitions):
        rows = plan(log, group, spec, partitions)
        offsets.commit(log, group, {r.partition: r.new for r in rows})
        return rows
