"""check: verify every segment and group file of a log; repair torn tails."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import orjson

from streamctl.errors import StorageError
from streamctl.groups import offsets
from streamctl.storage import reader, record, segment
from streamctl.storage.fsutil import NOFOLLOW, folder_lock
from streamctl.storage.log import Log


@dataclass
class Problem:
    path: str
    byte: int | None
    reason: str
    repairable: bool = False
    repaired: bool = False
    # Reported but not a failure: the log reads correctly as it is (an interrupted
    # compaction's leftovers, which the next append, compact or --repair finishes).
    benign: bool = False
    # The segment's line (from 1) the problem is on, so a message names file, line and reason
    # (SPEC section 3); None for a problem of a whole file. A torn tail's line is the partial one.
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.path}: byte {self.byte}" if self.byte is not None else self.path
        line = f" (line {self.line})" if self.line is not None else ""
        tail = " (repaired)" if self.repaired else ""
        return f"{where}: {self.reason}{line}{tail}"


@dataclass
class CheckReport:
    log: str
    segments: int = 0
    records: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(p.repaired or p.benign for p in self.problems)

    def to_dict(self) -> dict:
        return {"log": self.log, "ok": self.ok, "segments": self.segments, "records": self.records,
                "problems": [{"path": p.path, "byte": p.byte, "line": p.line, "reason": p.reason,
                              "repaired": p.repaired}
                             for p in self.problems]}


def _check_segment(seg: segment.Segment, p: int, prev_offset: int, prev_ts: int, is_last: bool,
                   report: CheckReport) -> tuple[int, int, int | None]:
    """Returns (last offset, last ts, torn-tail start or None)."""
    fd = os.open(seg.path, os.O_RDONLY | NOFOLLOW)
    try:
        size = os.fstat(fd).st_size
        end = segment.visible_end(fd, size)
        torn = end if end < size else None
        first = True
        n = 0
        for n, (pos, line) in enumerate(segment.iter_lines(fd, 0, end), 1):
            report.records += 1
            try:
                obj = record.parse(line)
            except record.BadRecord as e:
                report.problems.append(Problem(seg.path, pos, f"corrupt record: {e}", line=n))
                return prev_offset, prev_ts, torn
            off, part, ts = obj["offset"], obj["partition"], obj["ts"]
            if part != p:
                report.problems.append(Problem(seg.path, pos, f"record of partition {part} in p{p}", line=n))
            if off <= prev_offset:
                report.problems.append(Problem(seg.path, pos, f"offset {off} does not increase (previous {prev_offset})",
                                               line=n))
            if first and off < seg.base:
                report.problems.append(Problem(seg.path, pos, f"first offset {off} is below the segment's name {seg.base}",
                                               line=n))
            if ts < prev_ts:
                report.problems.append(Problem(seg.path, pos, f"ts {ts} goes back in time (previous {prev_ts})", line=n))
            first = False
            prev_offset, prev_ts = off, ts
        if torn is not None:
            tail = os.pread(fd, min(size - end, 200), end)
            if is_last:
                # what a kill -9 or power loss in the middle of an append leaves: never visible to readers
                reason = (f"torn tail from an interrupted write: safe, truncated by the next append or --repair "
                          f"({size - end} byte(s) after the last complete line)")
            else:
                reason = f"torn tail: {size - end} byte(s) after the last complete line in a closed segment"
            if b"\x00" in tail:
                reason += " (NUL bytes)"
            report.problems.append(Problem(seg.path, end, reason, repairable=is_last, line=n + 1))
        return prev_offset, prev_ts, torn
    finally:
        os.close(fd)


def check(log: Log, repair: bool = False) -> CheckReport:
    report = CheckReport(log.path)
    ends: dict[int, int] = {}
    for p in range(log.partitions):
        pdir = log.partition_dir(p)
        if not os.path.isdir(pdir):
            report.problems.append(Problem(pdir, None, "partition folder is missing"))
            continue
        if os.path.islink(pdir):
            report.problems.append(Problem(pdir, None, "is a symlink (writers refuse to write through it)"))
        for name in sorted(os.listdir(pdir)):
            full = os.path.join(pdir, name)
            if name.endswith(segment.SUFFIX) and segment.parse_segment_name(name) is None:
                report.problems.append(Problem(full, None, "segment name is not 20 digits + .jsonl"))
            if os.path.islink(full):
                report.problems.append(Problem(full, None, "is a symlink"))
        stale = _check_swaps(pdir, repair, report)
        _check_manifest(pdir, report)
        segs = [s for s in log.segments(p) if s.path not in stale]
        report.segments += len(segs)
        prev_off, prev_ts = -1, 0
        for i, seg in enumerate(segs):
            prev_off, prev_ts, torn = _check_segment(seg, p, prev_off, prev_ts, i == len(segs) - 1, report)
            if torn is not None and repair and i == len(segs) - 1:
                _repair_tail(log, p, seg, report.problems[-1])
        try:
            ends[p] = reader.partition_info(log, p).next_offset
        except StorageError:
            ends[p] = 1 << 62  # already reported above, segment by segment
    if os.path.islink(log.groups_dir()):
        report.problems.append(Problem(log.groups_dir(), None, "is a symlink (writers refuse to write through it)"))
    for stray in offsets.stray_files(log):
        report.problems.append(Problem(stray, None, f"{offsets.STRAY}; move it away"))
    for g in log.list_groups():
        try:
            committed = offsets.load(log, g)
        except offsets.OffsetFileError as e:
            report.problems.append(Problem(log.group_path(g), None, str(e).split(": ", 1)[-1]))
            continue
        for p, off in committed.items():
            if off > ends.get(p, 0):
                report.problems.append(Problem(log.group_path(g), None,
                                               f"partition {p}: committed offset {off} is past the end ({ends.get(p, 0)})"))
    return report


def _check_swaps(pdir: str, repair: bool, report: CheckReport) -> set[str]:
    """Leftovers of an interrupted compaction (.cleaned/.swap); --repair finishes or removes them.

    Returns the segments a half-installed swap already replaced (their records
    are in the new segment), which are checked as if the swap had finished.
    """
    from streamctl.storage import replace

    names = replace.leftovers(pdir)  # none while a compaction runs: its files are live
    invalid: dict[str, str] = {}
    for name in names:
        run = replace.parse_run_name(name, replace.SWAP)
        if run is not None:
            try:
                reason = replace.validate_swap(pdir, run[0], run[1], os.path.join(pdir, name))
            except OSError:
                reason = None  # finished by a writer meanwhile
            if reason is not None:
                invalid[name] = reason
    if repair and names:
        replace.recover_partition(pdir)  # moves an invalid swap aside, never applies it
    stale = replace.superseded(pdir)
    for name in names:
        if name in invalid:
            aside = f" (moved to {name}{replace.REJECTED})" if repair else ""
            report.problems.append(Problem(
                os.path.join(pdir, name), None,
                f"invalid compaction swap, never applied: {invalid[name]}; the segments it names are kept{aside}; "
                "inspect it, then delete it"))
            continue
        fix = "finishes" if name.endswith(replace.SWAP) else "removes"
        report.problems.append(Problem(
            os.path.join(pdir, name), None,
            f"left by an interrupted compaction (harmless: the next append, compact or check --repair {fix} it)",
            repairable=True, repaired=repair, benign=True))
    for name in sorted(os.listdir(pdir)):
        if name.endswith(replace.SWAP + replace.REJECTED) and name[: -len(replace.REJECTED)] not in invalid:
            report.problems.append(Problem(
                os.path.join(pdir, name), None,
                "a compaction swap rejected as invalid (never applied; the segments it named were kept); "
                "inspect it, then delete it"))
    return stale


def _check_manifest(pdir: str, report: CheckReport) -> None:
    """A segment the partition's segment list (segment.write_manifest) has, whose file is gone,
    that neither retention (a prefix) nor an unfinished compaction swap (its run) explains."""
    from streamctl.storage import replace

    for _attempt in range(5):
        listed = segment.read_manifest(pdir)
        if listed is None:
            return  # no list yet (a log from before it): nothing to compare
        names = os.listdir(pdir)
        if segment.read_manifest(pdir) == listed:
            break  # no roll, swap or retention rewrote the list while the folder was listed
    else:
        return
    have = sorted(b for b in map(segment.parse_segment_name, names) if b is not None)
    runs = [r for r in (replace.parse_run_name(n, replace.SWAP) for n in names) if r is not None]
    present = set(have)
    for base in listed:
        if base in present or (have and base < have[0]) or any(b <= base < e for b, e in runs):
            continue
        report.problems.append(Problem(
            os.path.join(pdir, segment.segment_name(base)), None,
            f"segment is missing: the partition's segment list ({segment.MANIFEST}) has it, and neither "
            "compaction nor retention removed it; its records are gone (restore the file from a backup)"))


def _repair_tail(log: Log, p: int, seg: segment.Segment, problem: Problem) -> None:
    """Truncate a torn tail under the partition lock (so no producer is mid-append)."""
    with folder_lock(log.partition_dir(p)):
        fd = os.open(seg.path, os.O_RDWR | NOFOLLOW)
        try:
            segment.cut_torn_tail(fd)
            problem.repaired = True
        finally:
            os.close(fd)


def dumps(report: CheckReport) -> bytes:
    return orjson.dumps(report.to_dict())
