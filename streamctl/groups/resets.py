"""Offset reset for a consumer group (Kafka's `kafka-consumer-groups --reset-offsets`).

A plan says, per partition, the committed offset now, the new one, and the lag
after the reset; nothing changes until `execute`. New offsets are clamped into
[first offset, next offset] of the partition, as Kafka does, so a reset never
points into a hole left by retention or past the end.

A reset is refused while a member of the group is consuming: live consumers
(`consume --group G --follow` / `--exec`) hold an flock on their slot
`groups/.G.m<N>.member` and on `groups/.G.p<N>.claim` (G: groups/files.py's stem) for each partition they
own. We try a non-blocking flock on each of those files and keep it during the
write, so no member can join or claim a partition half-way through. A one-shot `consume --group G` without
--follow holds no claim; resetting under it races with its final commit
(last writer wins), exactly like Kafka's tool with an inactive group.

A plan can be kept as a file: CSV lines `partition,offset` (Kafka's
`--export` shape without its topic column, and like Kafka without a header),
the new offset per partition. `--from-file` reads one back; unlike the other
modes its offsets are checked, not clamped: an offset outside the partition's
[first offset, next offset] means the file belongs to another log or is too
old, and is reported by line. Every line is checked (the range too, for every
partition the file names, whatever --partition picks) and every bad line is
named in one message.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from streamctl.errors import DataError, StreamctlError, UsageError
from streamctl.groups import files, offsets
from streamctl.storage import reader
from streamctl.storage.fsutil import NOFOLLOW, atomic_write
from streamctl.storage.log import Log
from streamctl.timeparse import now_ms

MODES = ("to-earliest", "to-latest", "to-offset", "to-datetime", "shift-by", "by-duration", "from-file")
PLAN_HEADER = "partition,offset"
MAX_PLAN_BYTES = 16 << 20
MAX_REPORTED = 20  # bad lines named in one message; the rest are counted


class GroupActive(StreamctlError):
    """A member of the group holds partitions: resetting now would be overwritten or lost."""


@dataclass(frozen=True)
class ResetSpec:
    mode: str  # one of MODES
    offset: int | None = None  # to-offset
    shift: int | None = None  # shift-by (may be negative)
    ts: int | None = None  # to-datetime, by-duration (resolved: now - duration)
    plan: dict[int, PlanLine] = field(default_factory=dict)  # from-file: partition -> its line
    source: str = ""  # from-file: the file's name, for messages


@dataclass(frozen=True)
class PlanLine:
    line: int  # 1-based line number in the plan file
    offset: int


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


def _report(where: str, problems: list[tuple[int, str]]) -> str:
    """One problem: `FILE:LINE: reason`; several: a count, then one indented `FILE:LINE: reason` each."""
    if len(problems) == 1:
        n, why = problems[0]
        return f"{where}:{n}: {why}"
    shown = [f"{where}: {len(problems)} bad line(s) in the plan:"]
    shown += [f"  {where}:{n}: {why}" for n, why in problems[:MAX_REPORTED]]
    if len(problems) > MAX_REPORTED:
        shown.append(f"  ... and {len(problems) - MAX_REPORTED} more")
    return "\n".join(shown)


def parse_plan(raw: bytes, where: str, partitions: int, log: Log | None = None) -> dict[int, PlanLine]:
    """`partition,offset` lines -> {partition: PlanLine}.

    A first line `partition,offset` is taken as a header; blank lines and lines
    starting with `#` are skipped. With `log`, every good line's offset must be
    within its partition's offsets now. Every bad line is named (file:line:
    reason) in one DataError, so a hand-edited plan is fixed in one go.
    """
    out, problems = _parse_plan_lines(raw, where, partitions)
    if log is not None:
        # checked even when other lines do not parse: one message names every bad line
        problems += [bad for p, planned in out.items() if (bad := _out_of_range(log, p, planned)) is not None]
    if problems:
        raise DataError(_report(where, sorted(problems)))
    if not out:
        raise DataError(f"{where}: no offsets in the plan (expected lines partition,offset)")
    return out


def _parse_plan_lines(raw: bytes, where: str, partitions: int) -> tuple[dict[int, PlanLine], list[tuple[int, str]]]:
    """The plan's good lines ({partition: its first good line}) and the bad ones (line, reason)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{where}: not UTF-8 text (byte {e.start}); a plan is CSV lines partition,offset") from None
    out: dict[int, PlanLine] = {}
    problems: list[tuple[int, str]] = []
    seen_data = False
    for n, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r").strip()
        if not line or line.startswith("#"):
            continue
        if not seen_data and line.replace(" ", "").lower() == PLAN_HEADER:
            seen_data = True
            continue
        seen_data = True
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 2:
            problems.append((n, f"expected 2 fields partition,offset, got {len(fields)}: {line[:80]!r}"))
            continue
        ptext, otext = fields
        if not (ptext.isdecimal() and ptext.isascii()):
            problems.append((n, f"partition {ptext!r} is not a partition number"))
            continue
        p = int(ptext)
        if p >= partitions:
            problems.append((n, f"partition {p} does not exist in this log ({partitions} partition(s): "
                                f"0..{partitions - 1})"))
            continue
        digits = otext.removeprefix("-")
        if not (digits.isdecimal() and digits.isascii()):
            problems.append((n, f"offset {otext!r} for partition {p} is not an integer"))
            continue
        offset = int(otext)
        if offset < 0:
            problems.append((n, f"offset {offset} for partition {p} is negative"))
            continue
        if p in out:
            problems.append((n, f"partition {p} again (first on line {out[p].line})"))
            continue
        out[p] = PlanLine(n, offset)
    return out, problems


def _out_of_range(log: Log, p: int, planned: PlanLine) -> tuple[int, str] | None:
    """A plan line whose offset is outside partition p's offsets now: (line, reason), else None."""
    info = reader.partition_info(log, p)
    if info.first_offset <= planned.offset <= info.next_offset:
        return None
    return (planned.line, f"offset {planned.offset} for partition {p} is outside the partition's "
                          f"offsets now [{info.first_offset}, {info.next_offset}]")


def read_plan(path: str) -> bytes:
    """The bytes of a plan file (`-`: standard input); a missing or unreadable file is a usage error."""
    if path == "-":
        raw = sys.stdin.buffer.read(MAX_PLAN_BYTES + 1)
    else:
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_PLAN_BYTES + 1)
        except OSError as e:
            raise UsageError(f"{path}: cannot read the plan file: {e.strerror}") from None
    if len(raw) > MAX_PLAN_BYTES:
        raise DataError(f"{path}: implausibly large for a plan file (over {MAX_PLAN_BYTES >> 20} MiB)")
    return raw


def from_file(path: str, log: Log, group: str | None = None) -> ResetSpec:
    where = "<stdin>" if path == "-" else path
    raw = read_plan(path)
    if group is not None and raw.lstrip()[:1] in (b"{", b"["):
        return ResetSpec("from-file", plan=parse_stat_json(raw, where, log, group), source=where)
    return ResetSpec("from-file", plan=parse_plan(raw, where, log.partitions, log), source=where)


def parse_stat_json(raw: bytes, where: str, log: Log, group: str) -> dict[int, PlanLine]:
    """The committed offsets of `group` in a `stat --output json` file (one log's object, or the list
    of several, where the entry of this log is the one whose "log" names it): the plan that rolls
    the group back to where it was when stat ran. Partitions it had never committed are left alone."""
    import json

    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise DataError(f"{where}: neither a plan (CSV lines partition,offset) nor `stat --output json` "
                        f"output: {e}") from None
    entries = doc if isinstance(doc, list) else [doc]
    if not all(isinstance(e, dict) and isinstance(e.get("groups"), list) for e in entries):
        raise DataError(f"{where}: JSON but not `stat --output json` output (each log's object has \"groups\")")
    if len(entries) > 1:
        mine = os.path.realpath(log.path)
        entries = [e for e in entries if isinstance(e.get("log"), str) and os.path.realpath(e["log"]) == mine]
        if len(entries) != 1:
            raise DataError(f"{where}: holds the stat of several logs and {'none' if not entries else 'more than one'} "
                            f"of them is {log.path}")
    out: dict[int, PlanLine] = {}
    for i, g in enumerate(entries[0]["groups"], 1):
        if not isinstance(g, dict) or g.get("group") != group:
            continue
        p, committed = g.get("partition"), g.get("committed")
        if committed is None:
            continue  # never committed then: nothing to roll back to
        if not (type(p) is int and type(committed) is int and 0 <= p < log.partitions and committed >= 0):
            raise DataError(f"{where}: group {group}'s entry {i} is not a partition of this log with an offset: {g}")
        out[p] = PlanLine(i, committed)
    if not out:
        raise DataError(f"{where}: no committed offsets of group {group} in this `stat --output json` output")
    return out


def planned_partitions(spec: ResetSpec, partitions: list[int], only: int | None) -> list[int]:
    """The partitions a reset touches: all of `partitions`, or for a plan file those it names."""
    if spec.mode != "from-file":
        return partitions
    if only is not None and only not in spec.plan:
        raise UsageError(f"--partition {only}: {spec.source} has no line for partition {only}")
    return [p for p in partitions if p in spec.plan]


def encode_plan(rows: list[ResetRow]) -> bytes:
    """The plan as `partition,offset` lines (no header, like Kafka's --export)."""
    return "".join(f"{r.partition},{r.new}\n" for r in rows).encode()


def export_plan(path: str, rows: list[ResetRow]) -> None:
    """Write the plan to `path` atomically (a crash leaves the old file or the whole new one)."""
    try:
        atomic_write(path, encode_plan(rows))
    except OSError as e:
        raise UsageError(f"{path}: cannot write the plan file: {e.strerror}") from None


def by_duration(ms: int, now: int | None = None) -> ResetSpec:
    return ResetSpec("by-duration", ts=(now_ms() if now is None else now) - ms)


def damaged(log: Log, group: str) -> str | None:
    """Why the group's offset file cannot be read (damaged, torn by a crash), or None when it can."""
    try:
        offsets.load(log, group)
    except offsets.OffsetFileError as e:
        return str(e)
    return None


def _committed(log: Log, group: str, partitions: list[int]) -> dict[int, int]:
    """The group's committed offsets. A damaged offset file is what a reset repairs (the file's own
    message says so): a reset of every partition plans from no committed offsets and replaces the
    file; a reset of some partitions cannot, since the others' offsets are lost with the file."""
    try:
        return offsets.load(log, group)
    except offsets.OffsetFileError as e:
        if sorted(partitions) != list(range(log.partitions)):
            raise offsets.OffsetFileError(f"{e}; a reset of every partition (without --partition) "
                                          "replaces it") from None
        return {}


def plan(log: Log, group: str, spec: ResetSpec, partitions: list[int]) -> list[ResetRow]:
    committed = _committed(log, group, partitions)
    rows = []
    problems: list[tuple[int, str]] = []
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
        elif spec.mode == "from-file":
            planned = spec.plan[p]
            new = planned.offset
            # checked when the file was read (from_file); again here, under the claims of --execute
            bad = _out_of_range(log, p, planned)
            if bad is not None:
                problems.append(bad)
                continue
        else:
            raise UsageError(f"unknown reset mode {spec.mode!r}")
        new = min(max(new, info.first_offset), info.next_offset)
        rows.append(ResetRow(p, cur, new, info.first_offset, info.next_offset))
    if problems:
        problems.sort()
        raise DataError(_report(spec.source, problems))
    return rows


def claim_path(log: Log, group: str, p: int) -> str:
    return files.path(log, group, f"p{p}.claim")


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
            got = _try_hold(path)
            if got is None:
                continue
            if got < 0:
                members += 1
            else:
                self.fds.append(got)
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
    prefix, suffix = f".{files.stem(group)}.m", ".member"
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


def reset(log: Log, group: str, spec: ResetSpec, partitions: list[int], execute: bool,
          before_commit: Callable[[list[ResetRow]], None] | None = None) -> list[ResetRow]:
    """Plan the reset; with `execute`, plan and write it while holding the group's claims.

    Only the planned partitions change. Refused (GroupActive) while a member is consuming.
    `before_commit` sees the plan first (an export): if it raises, nothing changes.
    """
    if not execute:
        rows = plan(log, group, spec, partitions)
        if before_commit is not None:
            before_commit(rows)
        return rows
    with ClaimGuard(log, group, partitions):
        rows = plan(log, group, spec, partitions)
        if before_commit is not None:
            before_commit(rows)
        new = {r.partition: r.new for r in rows}
        if damaged(log, group) is not None:
            offsets.replace(log, group, new)  # every partition was planned (_committed)
        else:
            offsets.commit(log, group, new, "its offsets are unchanged")
        return rows
