"""Following partitions as they grow: the reader behind `tail -f` and `consume --follow`.

A `PartitionCursor` keeps the active segment's file descriptor and the byte
position of the next record, so a wake-up costs one fstat and one pread of
the new bytes: no listing, no bisecting. Only when its segment stops growing
does it list the partition folder, and it moves to the next segment by offset
(like `reader.iter_blocks`), so a roll, a compaction swap or merge, or
retention deleting old segments neither skips nor repeats a record. A
segment that shrinks under the cursor (a repair, a rewrite) is detected and
the position is found again by offset.

`Follower` polls several cursors and merges what each poll found in
(ts, partition, offset) order. Across polls the order is arrival order: a
live merge cannot wait for a quiet partition.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import orjson

from streamctl import stopflag
from streamctl.clients.consumer import Committer, plan, render_block, stream
from streamctl.errors import BrokenPipe, StorageError
from streamctl.groups import offsets
from streamctl.groups.membership import Membership
from streamctl.live.wait import Waiter
from streamctl.storage import reader, record, segment
from streamctl.storage.log import Log
from streamctl.storage.reader import check_block, segment_for
from streamctl.timeparse import now_ms

if TYPE_CHECKING:
    from streamctl.clients.replay import Bound
    from streamctl.formats.writer import Output

# Bytes read per partition per poll: bounds memory when a follower is far behind.
POLL_BYTES = 1 << 20

Item = tuple[int, int, bytes]  # (partition, next offset after it, one line or a block of lines)


def _last_offset(block: bytes) -> int:
    return record.offset_of(block[block.rfind(b"\n", 0, len(block) - 1) + 1:])


class PartitionCursor:
    """Reads partition p from `next_offset` on, as far as it is visible now."""

    def __init__(self, log: Log, p: int, next_offset: int) -> None:
        self.log = log
        self.p = p
        self.next_offset = next_offset
        self.fd = -1
        self.ino = -1
        self.base = -1
        self.pos = 0  # byte position in fd where the record at next_offset starts
        self.notices: list[str] = []

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.fd = -1

    def poll(self, limit: int = POLL_BYTES) -> list[bytes]:
        """Blocks of whole lines newly visible (about `limit` bytes at most)."""
        out: list[bytes] = []
        got = 0
        if self.fd >= 0:
            got = self._read_open(out, limit)
            if got:
                return out
            if not self._moved_on():
                return out
            got = self._read_open(out, limit)  # what was written just before the roll
            self.close()
            if got >= limit:
                return out
        self._read_listed(out, limit - got)
        return out

    def _read_open(self, out: list[bytes], limit: int) -> int:
        size = os.fstat(self.fd).st_size
        if size < self.pos:
            # Our position is always at a line end, so no streamctl repair (which only cuts a
            # torn tail) moves the end below it: the segment was truncated or rewritten from
            # outside, or an append failed and was rolled back. If records we already
            # delivered are gone, offsets will be reused: stop rather than skip silently.
            path = segment.segment_name(self.base)
            end = segment.visible_end(self.fd, size)
            last = segment.last_line(self.fd, end)
            now_next = record.offset_of(last) + 1 if last is not None else self.base
            self.close()
            if now_next < self.next_offset:
                raise StorageError(
                    f"{self.log.partition_dir(self.p)}/{path}: shrank from {self.pos} to {size} bytes under "
                    f"this follower; offsets {now_next}..{self.next_offset - 1}, already delivered, are gone "
                    "(truncated or replaced outside streamctl?). Stopping rather than skip or repeat; "
                    "run `streamctl check` on the log")
            return 0
        got = 0
        while self.pos < size and got < limit:
            buf = os.pread(self.fd, min(segment.CHUNK, size - self.pos), self.pos)
            if not buf:
                break
            i = buf.rfind(b"\n")
            if i < 0:
                if len(buf) >= size - self.pos:
                    break  # a line still being written; it becomes visible with its \n
                # one line longer than a chunk: read it whole
                end = segment.visible_end(self.fd, size)
                if end <= self.pos:
                    break
                buf = os.pread(self.fd, end - self.pos, self.pos)
                i = len(buf) - 1
            block = buf[: i + 1]
            check_block(os.path.join(self.log.partition_dir(self.p), segment.segment_name(self.base)),
                        self.pos, block)
            self.pos += len(block)
            got += len(block)
            # Records below next_offset can appear only after a rewrite; drop them.
            if record.offset_of(block) < self.next_offset:
                block = b"".join(ln for ln in block.splitlines(keepends=True)
                                 if record.offset_of(ln) >= self.next_offset)
                if not block:
                    continue
            out.append(block)
            self.next_offset = _last_offset(block) + 1
        return got

    def _moved_on(self) -> bool:
        """True when appends no longer go to our file: a newer segment, or ours was replaced."""
        segs = self.log.segments(self.p)
        if not segs:
            return True
        last = segs[-1]
        if last.base != self.base:
            return True
        try:
            st = os.stat(last.path, follow_symlinks=False)
        except FileNotFoundError:
            return True
        return st.st_ino != self.ino

    def _read_listed(self, out: list[bytes], limit: int) -> None:
        """Find next_offset by listing the folder; read on, keeping the last segment open."""
        got = 0
        for _attempt in range(100):
            segs = self.log.segments(self.p)
            if not segs:
                return
            vanished = False
            if segs[0].base > self.next_offset:
                # Retention deleted records before they were read: say so, never silently.
                self.notices.append(
                    f"partition {self.p}: offsets {self.next_offset}..{segs[0].base - 1} were deleted "
                    f"(retention) before they were read; resuming at {segs[0].base}")
                self.next_offset = segs[0].base
            for i in range(segment_for(segs, self.next_offset), len(segs)):
                seg = segs[i]
                try:
                    fd = segment.open_read(seg.path)
                except FileNotFoundError:
                    vanished = True  # deleted or swapped under us: list again
                    break
                self.close()
                vend = segment.visible_end(fd, os.fstat(fd).st_size)
                pos = 0
                if self.next_offset > seg.base:
                    pos = segment.bisect(fd, vend, segment.offset_key, self.next_offset)
                self.fd, self.ino, self.base, self.pos = fd, os.fstat(fd).st_ino, seg.base, pos
                got += self._read_open(out, limit - got)
                if got >= limit:
                    return  # stay on this segment; the next poll goes on from here
                if i < len(segs) - 1:
                    self.close()
            if vanished or self.fd < 0:
                continue
            if not self._moved_on():
                return  # we are on the active segment, at its visible end
            # A roll or swap happened while we read: take what was written before it, list again.
            got += self._read_open(out, limit - got)
            self.close()
            if got >= limit:
                return


class Follower:
    """Cursors over several partitions; each poll returns what is new, merged by (ts, p, offset)."""

    def __init__(self, log: Log, positions: dict[int, int] | None = None) -> None:
        self.log = log
        self.cursors: dict[int, PartitionCursor] = {}
        for p, off in (positions or {}).items():
            self.add(p, off)

    def add(self, p: int, next_offset: int) -> None:
        self.remove(p)
        self.cursors[p] = PartitionCursor(self.log, p, next_offset)

    def remove(self, p: int) -> None:
        cur = self.cursors.pop(p, None)
        if cur is not None:
            cur.close()

    def notices(self) -> list[str]:
        out = []
        for c in self.cursors.values():
            out += c.notices
            c.notices.clear()
        return out

    def positions(self) -> dict[int, int]:
        return {p: c.next_offset for p, c in self.cursors.items()}

    def close(self) -> None:
        for c in self.cursors.values():
            c.close()
        self.cursors.clear()

    def poll(self, per_line: bool, limit: int = POLL_BYTES) -> list[Item]:
        found = [(p, blocks) for p in sorted(self.cursors) if (blocks := self.cursors[p].poll(limit))]
        if not found:
            return []
        if len(found) == 1 and not per_line:
            p, blocks = found[0]
            return [(p, _last_offset(b) + 1, b) for b in blocks]
        if len(found) == 1:
            p, blocks = found[0]
            return [(p, record.offset_of(ln) + 1, ln) for b in blocks for ln in b.splitlines(keepends=True)]
        return list(merge_lines((p, blocks) for p, blocks in found))


def merge_lines(parts: Iterator[tuple[int, list[bytes]]]) -> Iterator[Item]:
    """Lines of several partitions (each in offset order) merged by (ts, partition, offset)."""
    lines = ((p, (ln for b in blocks for ln in b.splitlines(keepends=True))) for p, blocks in parts)
    for p, off, ln in reader.merge_by_ts(lines):
        yield p, off + 1, ln


# ---------------------------------------------------------------------------
# The consume --follow / --exec driver: history first (merged exactly), then live.


class Sink(Protocol):
    """Where consumed records go: stdout (PrintSink) or batches for a command (clients.execsink)."""

    per_line: bool

    def put(self, p: int, next_offset: int, data: bytes) -> int:
        """Take one item; returns how many records it held."""
        ...

    def sync(self) -> None:
        """Deliver what was put (flush), and commit what is delivered."""
        ...

    def tick(self) -> None:
        """Called on every wake-up (batch timeouts)."""
        ...

    def idle(self) -> bool:
        """True when nothing taken is held back undelivered (partitions may be released)."""
        ...

    def finish(self, normal: bool) -> None:
        """The end: deliver what is pending if `normal` (not stopped by a signal), commit."""
        ...


class PrintSink:
    """Records to stdout through the one Output.

    Commits after each live poll's flush (sync), and while reading history after
    a flush at most every Committer.interval, so a kill -9 repeats one poll's
    records, or that interval's worth of history, at most.
    """

    def __init__(self, out: Output, render: Callable[[bytes], bytes] | None, committer: Committer,
                 per_line: bool) -> None:
        self.out = out
        self.render = render
        self.committer = committer
        self.per_line = per_line

    def put(self, p: int, next_offset: int, data: bytes) -> int:
        committer = self.committer
        if self.render is None:
            n = 1 if self.per_line else data.count(b"\n")
        else:
            # whole blocks, rendered line by line: no per-record trip through the reader and the merge
            data, n = render_block(self.render, data, committer.log, p, committer.pending.get(p, 0))
        committer.queued(p, next_offset)
        if self.out.write(data):
            committer.flushed()
        return n

    def sync(self) -> None:
        self.out.flush()
        self.committer.flushed()
        self.committer.commit()

    def tick(self) -> None:
        """Nothing is time-driven here: stdout is flushed on each poll's sync (ExecBatcher's batch timeout uses it)."""

    def idle(self) -> bool:
        return self.out.pending() == 0

    def finish(self, normal: bool) -> None:
        self.sync()


class FilterSink:
    """A Sink in front of another that passes on only the lines a filter selects.

    Records the filter skips count as consumed. Their offsets go to the committer
    only while the inner sink holds nothing undelivered (an --exec batch not yet
    run must not be committed by a skipped record after it); otherwise they wait
    for the next sync, and a matching record of the same partition carries them
    (its next offset is past them).
    """

    def __init__(self, inner: Sink, select: Callable[[bytes], bytes], committer: Committer) -> None:
        self.inner = inner
        self.select = select
        self.committer = committer
        self.per_line = inner.per_line
        self.skipped: dict[int, int] = {}

    def put(self, p: int, next_offset: int, data: bytes) -> int:
        try:
            kept = self.select(data)
        except record.BadRecord as e:
            raise reader.locate_corrupt(self.committer.log, p, self.committer.pending.get(p, 0), e) from None
        if kept:
            self.skipped.pop(p, None)
            if (not isinstance(self.inner, PrintSink) and self.inner.idle()
                    and self.committer.delivered != self.committer.committed):
                # a new --exec batch starts: what was skipped before it is consumed whatever becomes
                # of the batch (stdout needs no such commit: its flushes commit as they go)
                self.committer.commit()
            return self.inner.put(p, next_offset, kept)
        if self.inner.idle():
            self.committer.queued(p, next_offset)
            self.committer.flushed()
        else:
            self.skipped[p] = next_offset
        return 0

    def _release(self) -> None:
        if self.skipped and self.inner.idle():
            for p, o in self.skipped.items():
                self.committer.queued(p, o)
            self.skipped.clear()
            self.committer.flushed()
            self.committer.commit()

    def sync(self) -> None:
        self.inner.sync()
        self._release()

    def tick(self) -> None:
        self.inner.tick()

    def idle(self) -> bool:
        return self.inner.idle()

    def finish(self, normal: bool) -> None:
        self.inner.finish(normal)
        if normal:
            self._release()
        self.committer.finish()


@dataclass
class LiveOptions:
    partitions: list[int]
    group: str | None
    from_spec: str | None
    follow: bool
    max_records: int | None = None
    idle_timeout: float | None = None  # seconds
    wake_every: float = 0.2  # the longest sleep between checks (batch and idle timeouts)
    rebalance_every: float = 0.5
    until: Bound | None = None  # --until: each partition stops before its first record at or past it
    # Where the partitions resume, read when they are claimed, instead of the group file (consume
    # --sqlite: the offsets stored in the database with the rows; the group file only mirrors them)
    starts: Callable[[], dict[int, int]] | None = None


# With --follow and a time --until, a partition with nothing new is done once the clock is this far
# past the bound: a record appended later gets a later ts (the append time).
UNTIL_CLOCK_GRACE_MS = 1000


def cut_at(until: Bound, data: bytes, next_offset: int) -> tuple[bytes, int, bool]:
    """(the lines of data before the bound, the next offset to commit, whether the bound was reached)."""
    env = record.envelope
    last = data[data.rfind(b"\n", 0, len(data) - 1) + 1:]
    if until.kind == "offset":
        if next_offset <= until.value:
            return data, next_offset, next_offset == until.value
        lines = data.splitlines(keepends=True)
        kept = [ln for ln in lines if record.offset_of(ln) < until.value]
        return b"".join(kept), until.value, True
    if env(last)[2] < until.value:
        return data, next_offset, False
    kept = []
    cut = next_offset
    for ln in data.splitlines(keepends=True):
        off, _, ts = env(ln)
        if ts >= until.value:
            cut = off
            break
        kept.append(ln)
    return b"".join(kept), cut, True


@dataclass
class LiveResult:
    records: int = 0
    stopped_by: int | None = None  # the signal that stopped it
    finished: set[int] = field(default_factory=set)  # partitions that reached --until


def _start_for(log: Log, p: int, group: str | None, from_spec: str | None, notices: list[str],
               until: Bound | None = None, starts: Callable[[], dict[int, int]] | None = None,
               committer: Committer | None = None) -> tuple[int, bool]:
    """Where a partition claimed while following starts (the group's committed offset wins), and
    whether it is already at or past --until (nothing to read). A start that is not the group's
    committed offset is committed through `committer` (Plan.passed)."""
    committed = starts() if starts is not None else offsets.load(log, group) if group else {}
    pl = plan(log, [p], None if p in committed else from_spec, group, follow=True, until=until, starts=committed)
    notices.extend(pl.notices)
    if committer is not None:
        committer.passed_over(pl.passed)
    pos = pl.positions[p]
    return pos.start, pos.reached and pos.end is not None and pos.start >= pos.end


def consume_live(log: Log, opts: LiveOptions, sink: Sink, committer: Committer,
                 say: Callable[[str], None]) -> LiveResult:
    """Run a consume with --follow and/or through a sink that batches; honours the stop flag."""
    res = LiveResult()
    members = Membership(log, opts.group, opts.partitions, register=opts.follow) if opts.group else None
    follower = Follower(log)
    waiter: Waiter | None = None
    try:
        if members is None:
            held = list(opts.partitions)
        elif opts.follow:
            held = sorted(members.rebalance().claimed)
        else:
            held = members.claim_free()
        if members is not None and len(held) < len(opts.partitions):
            busy = sorted(set(opts.partitions) - set(held))
            say(f"group {opts.group}: partition(s) {_ranges(busy)} read by other members"
                + ("; taking them over when they are free" if opts.follow else "; not read by this run"))
        if opts.follow:
            # What is appended while history is read is found by the first poll, before any wait.
            waiter = Waiter(log.path, max_wait=opts.wake_every)
        pl = plan(log, held, opts.from_spec, opts.group, until=opts.until,
                  starts=opts.starts() if opts.starts is not None else None)
        for note in pl.notices:
            say(note)
        limit = opts.max_records
        done = limit is not None and limit <= 0  # --max 0: nothing is written, nothing committed
        if not done:
            committer.passed_over(pl.passed)  # --from: the records before the start count as consumed
        for p, nxt, data in stream(log, pl, merge=True, per_line=sink.per_line or limit is not None):
            if stopflag.is_set() or done:
                break
            res.records += sink.put(p, nxt, data)
            if limit is not None and res.records >= limit:
                done = True
                break
        finished = {p for p, pos in pl.positions.items() if pos.reached}
        if not opts.follow or done or stopflag.is_set() or (opts.until is not None and held and finished >= set(held)):
            sink.finish(normal=not stopflag.is_set())
            res.stopped_by = stopflag.signum()
            return res
        sink.sync()
        for p, pos in pl.positions.items():
            if p not in finished:
                follower.add(p, pos.end if pos.end is not None and pos.end > pos.start else pos.start)
        res.finished = finished
        assert waiter is not None  # made above whenever opts.follow
        _follow(log, opts, sink, committer, members, follower, waiter, res, say)
        res.stopped_by = stopflag.signum()
        return res
    except BrokenPipe:
        committer.commit()
        raise
    finally:
        follower.close()
        if waiter is not None:
            waiter.close()
        if members is not None:
            members.close()


def _follow(log: Log, opts: LiveOptions, sink: Sink, committer: Committer, members: Membership | None,
            follower: Follower, waiter: Waiter, res: LiveResult, say: Callable[[str], None]) -> None:
    per_line = sink.per_line or opts.max_records is not None
    last_delivery = time.monotonic()
    next_rebalance = last_delivery + opts.rebalance_every
    releasing: list[int] = []
    while not stopflag.is_set():
        items = follower.poll(per_line)
        for note in follower.notices():
            say(note)
        now = time.monotonic()
        until = opts.until
        delivered = res.records
        for p, nxt, data in items:
            if until is not None:
                if p in res.finished:
                    continue
                data, nxt, reached = cut_at(until, data, nxt)
                if reached:
                    res.finished.add(p)
                    follower.remove(p)
                if not data:
                    continue
            res.records += sink.put(p, nxt, data)
            if opts.max_records is not None and res.records >= opts.max_records:
                sink.finish(normal=True)
                return
        if until is not None:
            held = set(follower.cursors) | res.finished
            if (not items and until.kind == "ts" and now_ms() >= until.value + UNTIL_CLOCK_GRACE_MS):
                res.finished |= held
            if held and held <= res.finished:
                sink.finish(normal=True)
                return
        if items:
            sink.sync()
        if res.records > delivered:
            # only records handed to the output count: a filter that skips everything arriving
            # must not keep --idle-timeout from ending the follow
            last_delivery = now
        sink.tick()
        if members is not None and now >= next_rebalance:
            next_rebalance = now + opts.rebalance_every
            change = members.rebalance()
            releasing = sorted(set(releasing) | set(change.to_release))
            for p in change.claimed:
                notes: list[str] = []
                start, reached = _start_for(log, p, opts.group, opts.from_spec, notes, opts.until, opts.starts,
                                            committer)
                if reached:
                    res.finished.add(p)
                else:
                    res.finished.discard(p)
                    follower.add(p, start)
                for n in notes:
                    say(n)
        if releasing and sink.idle():
            sink.sync()  # commit every delivered record before another member may start there
            for p in releasing:
                follower.remove(p)
                _forget(committer, p)
            assert members is not None  # only members release partitions
            members.release(releasing)
            releasing = []
        if opts.idle_timeout is not None and now - last_delivery >= opts.idle_timeout:
            sink.finish(normal=True)
            return
        if items:
            continue  # maybe more is already there
        waiter.wait(opts.wake_every)
    sink.finish(normal=False)


def _forget(committer: Committer, p: int) -> None:
    """A released partition is another member's now: never commit it from here again."""
    for d in (committer.pending, committer.delivered, committer.committed):
        d.pop(p, None)


def _ranges(ps: list[int]) -> str:
    return ", ".join(str(p) for p in ps)


def _last_matching(log: Log, parts: list[int], n: int, select: Callable[[bytes], bytes]) -> tuple[list[bytes], dict[int, int]]:
    """The last n records across `parts` that `select` keeps, in (ts, partition, offset) order, and
    each partition's end offset (where a follow goes on). Each partition is read backwards only
    until it has n matches: the last n overall are among them."""
    found: dict[int, list[bytes]] = {}
    ends: dict[int, int] = {}
    for p in parts:
        info = reader.partition_info(log, p)
        ends[p] = info.next_offset
        chunks: list[list[bytes]] = []
        count = 0
        if info.first_offset < info.next_offset:
            for block in reader.iter_blocks_reverse(log, p, info.first_offset, info.next_offset):
                kept = select(block)
                if kept:
                    lines = kept.splitlines(keepends=True)
                    chunks.append(lines)
                    count += len(lines)
                    if count >= n:
                        break
        found[p] = [ln for chunk in reversed(chunks) for ln in chunk][-n:]
    merged = [ln for _p, _off, ln in reader.merge_by_ts((p, found[p]) for p in sorted(found))]
    return merged[-n:], ends


def tail_log(log: Log, parts: list[int], n: int, follow: bool, render: Callable[[bytes], bytes] | None,
             write: Callable[[bytes], bool], flush: Callable[[], None],
             say: Callable[[str], None] | None = None,
             select: Callable[[bytes], bytes] | None = None) -> int | None:
    """`tail`: the last n records across `parts` in (ts, partition, offset) order, then follow.

    With `select` (a filter), n counts the records it keeps, and a follow prints only those.
    Returns the signal that stopped the follow, if any. Never commits.
    """
    from collections import deque

    waiter = Waiter(log.path) if follow else None
    follower = Follower(log)
    try:
        if select is not None:
            lines, ends = _last_matching(log, parts, n, select) if n else ([], None)
            pl = plan(log, parts, "latest", None) if ends is None else None
            for line in lines:
                write(line if render is None else render(line))
            if ends is not None:
                starts = ends
            else:
                assert pl is not None  # planned above when no record matched
                starts = {p: pos.start for p, pos in pl.positions.items()}
        else:
            pl = plan(log, parts, f"-{n}" if n else "latest", None)
            last: deque[bytes] = deque(maxlen=n or 1)
            if n:
                for _p, _nxt, line in stream(log, pl, merge=True, per_line=True):
                    last.append(line)
                for line in last:
                    write(line if render is None else render(line))
            starts = {p: pos.end if pos.end is not None and pos.end > pos.start else pos.start
                      for p, pos in pl.positions.items()}
        flush()
        if waiter is None:
            return None
        for p, start in starts.items():
            follower.add(p, start)
        while not stopflag.is_set():
            items = follower.poll(per_line=render is not None)
            for note in follower.notices():
                if say is not None:
                    say(note)
            for _p, _nxt, data in items:
                if select is not None:
                    data = select(data)
                    if not data:
                        continue
                write(data if render is None else render(data))
            if items:
                flush()
                continue
            waiter.wait()
        flush()
        return stopflag.signum()
    finally:
        follower.close()
        if waiter is not None:
            waiter.close()


def tail_plain(path: str, n: int | None, follow: bool, emit: Callable[[int, bytes], None], flush: Callable[[], None],
               say: Callable[[str], None] | None = None,
               keep: Callable[[int, bytes], bool] | None = None,
               idle_timeout: float | None = None) -> int | None:
    """`tail` of a plain .jsonl file: its last n values (offsets are line numbers; None: all of
    them, streamed, as `consume FILE --follow` reads it), then follow it until a stop signal, or
    `idle_timeout` seconds in which nothing new was emitted. `emit` may end it early by raising.

    Like `tail -F`, a file that shrinks was truncated or replaced: it is read
    again from its start (offsets restart at 0), and said so on stderr.
    """
    import time
    from collections import deque

    from streamctl.errors import DataError, UsageError

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise UsageError(f"{path}: cannot open: {e.strerror}") from None
    state = {"pos": 0, "lineno": 0, "fd": fd}

    def read_new() -> Iterator[tuple[int, bytes]]:
        fd = state["fd"]
        try:
            replaced = os.stat(path).st_ino != os.fstat(fd).st_ino
        except FileNotFoundError:
            replaced = False  # gone for now (rotation): keep the old file until a new one appears
        if replaced:
            # rotated or replaced by rename: follow the name, like tail -F
            try:
                new = os.open(path, os.O_RDONLY)
            except OSError:
                new = -1
            if new >= 0:
                # first drain what the old file still has
                yield from _drain(fd)
                os.close(fd)
                fd = state["fd"] = new
                if say is not None:
                    say(f"{path}: file replaced; following the new file from its start")
                state.update(pos=0, lineno=0)
        yield from _drain(fd)

    def _drain(fd: int) -> Iterator[tuple[int, bytes]]:
        size = os.fstat(fd).st_size
        if size < state["pos"]:
            if say is not None:
                say(f"{path}: file truncated; reading it from the start")
            state.update(pos=0, lineno=0)
        while state["pos"] < size:
            buf = os.pread(fd, min(segment.CHUNK, size - state["pos"]), state["pos"])
            i = buf.rfind(b"\n")
            if i < 0:
                if len(buf) >= size - state["pos"]:
                    return  # a line still being written
                end = segment.visible_end(fd, size)
                if end <= state["pos"]:
                    return
                buf = os.pread(fd, end - state["pos"], state["pos"])
                i = len(buf) - 1
            state["pos"] += i + 1
            for line in buf[: i + 1].split(b"\n")[:-1]:
                state["lineno"] += 1
                text = line.strip(b" \t\r")
                if not text:
                    continue
                try:
                    orjson.loads(text)
                except orjson.JSONDecodeError as e:
                    raise DataError(f"{path}:{state['lineno']}: invalid JSON: {e}") from None
                yield state["lineno"] - 1, text  # the offset: the line number from 0, as everywhere

    waiter = Waiter(path) if follow else None
    try:
        new = read_new() if keep is None else ((o, v) for o, v in read_new() if keep(o, v))
        for off, v in new if n is None else deque(new, maxlen=n):
            emit(off, v)
        flush()
        if waiter is None:
            return None
        last = time.monotonic()
        while not stopflag.is_set():
            got = False
            for off, v in read_new():
                if keep is not None and not keep(off, v):
                    continue
                emit(off, v)
                got = True
            if got:
                flush()
                last = time.monotonic()
                continue
            if idle_timeout is not None:
                left = idle_timeout - (time.monotonic() - last)
                if left <= 0:
                    break
                waiter.wait(min(left, 0.2))
                continue
            waiter.wait()
        flush()
        return stopflag.signum()
    finally:
        os.close(state["fd"])
        if waiter is not None:
            waiter.close()
