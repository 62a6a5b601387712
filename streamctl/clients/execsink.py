"""consume --exec: hand records to a shell command in batches; commit a batch only when it exits 0.

At-least-once for side effects: a batch is committed after its command
succeeded, so a crash (ours or the command's) between the two repeats that
batch on the next run, never skips it. A failing command stops consume with
exit 1 and the batch stays uncommitted. An empty batch never runs the command.

--retries runs a failed batch again (same records, same order) after a
backoff that doubles, capped at MAX_BACKOFF. --dead-letter LOG2 turns a batch
that still fails into a search: it is split in halves, each half run (with its
retries) and committed on its own, in order, down to single records; a single
record that still fails is appended to LOG2 and then committed. So the side
effects keep the log's order: the records before a poison record are committed
before it goes to LOG2, the records after it only afterwards.

Crash safety of the search: a half is committed only after its command exited
0, and a dead letter is appended (and fsynced) to LOG2 before its offset is
committed, so after a kill -9 every record is delivered and committed, in LOG2
and committed, or uncommitted (delivered again on the next run). A crash
between the LOG2 append and the commit would append the record again on the
rerun; to avoid that, the append is skipped when LOG2 already holds a record
with the same streamctl.source and streamctl.group headers (checked under
LOG2's partition lock, after reading what was appended since the last look, so
competing members of a group cannot both append it either). The price: the
first dead letter of a run reads the LOG2 partition it goes to once.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import orjson

from streamctl import stopflag
from streamctl.clients.consumer import Committer
from streamctl.errors import StreamctlError, UsageError
from streamctl.storage import record

MAX_BACKOFF = 60.0  # seconds: the longest wait between two tries of a batch
ERROR_TAIL = 1024  # bytes of the command's stderr kept in streamctl.error
ERROR_HEADER = "streamctl.error"
SOURCE_HEADER = "streamctl.source"
GROUP_HEADER = "streamctl.group"


class ExecFailed(StreamctlError):
    """The command failed; the batch was not committed (exit 1)."""


class _Stopped(Exception):
    """SIGINT/SIGTERM during a batch's tries: leave the rest of the batch uncommitted."""


def retry_delay(retry: int, backoff: float) -> float:
    """Seconds to wait before retry number `retry` (1 for the first): `backoff`, doubled after
    each try, at most MAX_BACKOFF."""
    if backoff <= 0:
        return 0.0
    return min(backoff * 2.0 ** min(retry - 1, 64), MAX_BACKOFF)


@dataclass
class ExecPolicy:
    """What to do with a batch whose command fails."""

    retries: int = 0
    backoff: float = 1.0  # seconds before the first retry
    dead_letter: str | None = None  # LOG2
    source: str = ""  # the consumed log's name in streamctl.source (the path as given)


def exec_policy(log: str, retries: int, retry_backoff: str | None, dead_letter: str | None) -> ExecPolicy:
    """Check --retries, --retry-backoff and --dead-letter (UsageError) and gather them."""
    from streamctl.timeparse import parse_duration

    if retries < 0:
        raise UsageError(f"--retries must not be negative (got {retries})")
    backoff = 1.0
    if retry_backoff is not None:
        if not retries:
            raise UsageError("--retry-backoff needs --retries N (the number of retries)")
        backoff = parse_duration(retry_backoff) / 1000
    if dead_letter is not None:
        check_dead_letter(log, dead_letter)
    return ExecPolicy(retries, backoff, dead_letter, os.path.normpath(log))


def check_dead_letter(log: str, target: str) -> None:
    """Refuse a dead-letter log that is the consumed log, lies inside it or holds it, or is not a log."""
    from streamctl.storage.log import is_log, own_leftover

    if not target.strip():
        raise UsageError("--dead-letter needs a log path")
    src, dst = os.path.realpath(log), os.path.realpath(target)
    if dst == src or dst.startswith(src + os.sep) or src.startswith(dst + os.sep):
        raise UsageError(f"--dead-letter {target}: that is inside {log}, the log being consumed (or holds it); "
                         "dead letters need a log of their own, e.g. --dead-letter "
                         f"{os.path.normpath(log)}.dead")
    if os.path.lexists(target) and not os.path.isdir(target):
        raise UsageError(f"--dead-letter {target}: exists and is not a streamctl log (a folder)")
    # a creation cut short by a crash leaves only a log's own names: the log's creation finishes it
    if os.path.isdir(target) and not is_log(target) and not all(map(own_leftover, os.listdir(target))):
        raise UsageError(f"--dead-letter {target}: exists, is not empty and is not a streamctl log")


class DeadLetters:
    """LOG2: records the command still failed on, each appended (and fsynced) before its commit.

    A dead letter keeps the record's key, value and headers and adds streamctl.error
    (the command's exit status and the last ERROR_TAIL bytes of its stderr),
    streamctl.source (`LOG/PARTITION@OFFSET`) and, with a group, streamctl.group. It
    goes to the partition of its key in LOG2 (Kafka's partitioner), a null key to
    the source partition modulo LOG2's partitions: the same partition on a rerun,
    which the duplicate check relies on. `consume LOG2 | produce LOG --envelope`
    re-drives them: the envelope fits produce, and the headers survive.
    """

    def __init__(self, path: str, source: str, group: str | None) -> None:
        from streamctl.storage import log as logmod
        from streamctl.storage.appender import Appender
        from streamctl.timeparse import now_ms

        self.path = path
        self.log = logmod.open_or_create(path, None, None, now_ms())
        self.appender = Appender(self.log, fsync="batch")
        self.appender.filter = self._filter
        self.source = source
        self.group = group
        self.appended = 0
        self.already = 0  # found in LOG2 already (appended by a run that crashed before its commit)
        # JSON text that opens a tag of ours: lines without it need no parse
        self._mark = orjson.dumps(f"{source}/")[:-1]
        self._scanned: dict[int, int] = {}  # LOG2 partition -> next offset not yet read
        self._seen: dict[int, set[str]] = {}  # LOG2 partition -> our tags (same group) found there
        self._tag = ""

    def close(self) -> None:
        self.appender.close()

    def add(self, line: bytes, p: int, error: str) -> bool:
        """Append the stored `line` (of source partition p) with its error; False if LOG2 had it."""
        from streamctl.storage.partitioner import partition_for_key

        obj = record.parse(line)
        key = obj.get("key")
        headers = obj.get("headers")
        headers = dict(headers) if isinstance(headers, dict) else {}
        self._tag = f"{self.source}/{p}@{obj['offset']}"
        headers[ERROR_HEADER] = error
        headers[SOURCE_HEADER] = self._tag
        if self.group is not None:
            headers[GROUP_HEADER] = self.group
        n = self.log.partitions
        target = partition_for_key(key, n) if key is not None else p % n
        item = (record.key_json(key), _value_text(line, obj.get("headers")), orjson.dumps(headers))
        res = self.appender.append(target, [item])
        if res.last_offset < res.first_offset:
            self.already += 1
            return False
        self._scanned[target] = res.last_offset + 1
        self._seen[target].add(self._tag)
        self.appended += 1
        return True

    def _filter(self, p: int, items: Sequence, next_offset: int) -> Sequence:
        """Under LOG2's partition lock: read what is new there, drop our item if its tag is in."""
        from streamctl.storage import reader

        seen = self._seen.setdefault(p, set())
        start = self._scanned.get(p, 0)
        if start > next_offset:  # LOG2 shorter than we saw it: replaced; read it again
            start = 0
            seen.clear()
        mark = self._mark
        for block in reader.iter_blocks(self.log, p, start, next_offset):
            if mark not in block:
                continue
            for line in block.splitlines():
                if mark not in line:
                    continue
                h = record.parse(line).get("headers")
                if isinstance(h, dict) and h.get(GROUP_HEADER) == self.group:
                    tag = h.get(SOURCE_HEADER)
                    if isinstance(tag, str):
                        seen.add(tag)
        self._scanned[p] = next_offset
        return [] if self._tag in seen else items


def _value_text(line: bytes, headers: object) -> bytes:
    """The value's JSON text as stored (so a re-drive copies it byte for byte), re-encoded only
    when the line is not in the layout streamctl writes."""
    if headers is None:
        return record.value_bytes(line)
    i = line.find(b',"value":')
    tail = b',"headers":' + orjson.dumps(headers) + b"}"
    end = len(line) - 1 if line.endswith(b"\n") else len(line)
    # the key is the only string before the value, and the headers close the line
    if i > 0 and line.startswith(tail, end - len(tail)) and i + 9 < end - len(tail):
        return line[i + 9:end - len(tail)]
    return orjson.dumps(record.parse(line)["value"])


def _failure_text(rc: int) -> str:
    if rc < 0:
        try:
            return f"was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"was killed by signal {-rc}"
    return f"exited with status {rc}"


def _error_header(rc: int, tail: bytes) -> str:
    """streamctl.error: the exit status, then the last ERROR_TAIL bytes of stderr."""
    status = f"exit status {rc}" if rc >= 0 else _failure_text(rc).replace("was ", "")
    text = bytes(tail)
    i = 0
    while i < len(text) and i < 4 and (text[i] & 0xC0) == 0x80:
        i += 1  # the cut fell inside a UTF-8 character
    msg = text[i:].decode("utf-8", "replace").rstrip()
    return f"{status}; stderr: {msg}" if msg else status


def _seconds(s: float) -> str:
    return f"{s * 1000:.0f}ms" if s < 1 else f"{s:g}s"


def _pass_to_stderr(chunk: bytes) -> None:
    try:
        view = memoryview(chunk)
        while view:
            view = view[os.write(2, view):]
    except OSError:
        pass  # our stderr is gone: keep capturing, the command must not fail because of us


def run_capturing(command: str, data: bytes, env: dict[str, str]) -> tuple[int, bytes]:
    """Run `command` by the shell with `data` on stdin; its stderr goes on to ours as it comes and
    its last ERROR_TAIL bytes are returned with the exit status.

    Reading stops once the command has exited and nothing more arrives: a background
    child that keeps the pipes open must not hold the batch.
    """
    proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdin is not None and proc.stderr is not None
    infd, errfd = proc.stdin.fileno(), proc.stderr.fileno()
    tail = bytearray()
    view = memoryview(data)
    sel = selectors.DefaultSelector()
    try:
        if view:
            os.set_blocking(infd, False)
            sel.register(infd, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        sel.register(errfd, selectors.EVENT_READ)
        while sel.get_map():
            events = sel.select(timeout=0.05)
            for key, _ in events:
                if key.fd == infd:
                    try:
                        view = view[os.write(infd, view[:1 << 16]):]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        view = view[:0]  # the command stopped reading: its exit status tells
                    if not view:
                        sel.unregister(infd)
                        proc.stdin.close()
                else:
                    chunk = os.read(errfd, 1 << 16)
                    if not chunk:
                        sel.unregister(errfd)
                        continue
                    _pass_to_stderr(chunk)
                    tail += chunk
                    if len(tail) > ERROR_TAIL:
                        del tail[:-ERROR_TAIL]
            if not events and proc.poll() is not None:
                break
    finally:
        sel.close()
        view.release()
        for f in (proc.stdin, proc.stderr):
            try:
                f.close()
            except OSError:
                pass
    return proc.wait(), bytes(tail)


class ExecBatcher:
    """A Sink (see live.Sink) that gathers rendered records and runs CMD on each batch."""

    per_line = True

    def __init__(self, command: str, batch: int, timeout: float | None, committer: Committer,
                 render: Callable[[bytes], bytes] | None, group: str | None = None,
                 policy: ExecPolicy | None = None, say: Callable[[str], None] | None = None) -> None:
        self.command = command
        self.batch = batch
        self.timeout = timeout
        self.committer = committer
        self.render = render
        self.group = group
        self.policy = policy or ExecPolicy()
        self.say = say or (lambda msg: None)
        self.dead = (DeadLetters(self.policy.dead_letter, self.policy.source, group)
                     if self.policy.dead_letter is not None else None)
        self.buf = bytearray()
        self.count = 0
        # per record of the batch: (partition, next offset after it, stored line), and where its
        # rendered text ends in buf, so a failed batch can be split
        self.records: list[tuple[int, int, bytes]] = []
        self.ends: list[int] = []
        self.started = 0.0
        self.batches = 0

    def put(self, p: int, next_offset: int, data: bytes) -> int:
        # per_line: data is one stored line
        if self.count == 0:
            self.started = time.monotonic()
        self.buf += data if self.render is None else self.render(data)
        self.records.append((p, next_offset, data))
        self.ends.append(len(self.buf))
        self.count += 1
        if self.count >= self.batch:
            self.run()
        return 1

    def sync(self) -> None:
        pass  # a batch is delivered when its command exits 0, not before

    def tick(self) -> None:
        if self.count and self.timeout is not None and time.monotonic() - self.started >= self.timeout:
            self.run()

    def idle(self) -> bool:
        return self.count == 0

    def finish(self, normal: bool) -> None:
        try:
            if normal and self.count:
                self.run()
            self.committer.commit()
        finally:
            if self.dead is not None:
                self.dead.close()
                self._report()

    def _report(self) -> None:
        dead = self.dead
        if dead is None or not (dead.appended or dead.already):
            return
        msg = f"{dead.appended} record(s) went to {dead.path} (--dead-letter): --exec failed on them alone"
        if dead.already:
            msg += (f"; {dead.already} more were there already (from a run stopped before committing them) "
                    "and were not appended again")
        self.say(msg)

    def describe(self, lo: int = 0, hi: int | None = None) -> str:
        hi = self.count if hi is None else hi
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for p, nxt, _ in self.records[lo:hi]:
            first.setdefault(p, nxt - 1)
            last[p] = nxt - 1
        parts = ", ".join(f"p{p} {first[p]}..{last[p]}" for p in sorted(first))
        return f"batch of {hi - lo} record(s) ({parts})"

    def left_undone(self, lo: int = 0, hi: int | None = None) -> str:
        """What becomes of records [lo, hi) the command failed on, for the message that stops consume."""
        if self.group is None:
            # no group: no offsets are kept at all, so there is no "next run" that resumes
            return (f"consume stops at this {self.describe(lo, hi)}; without --group nothing is committed, "
                    "so a rerun starts again where --from says (the first record by default)")
        return f"{self.describe(lo, hi)} was not committed and will be delivered again on the next run"

    def run(self) -> None:
        if not self.count:
            return
        try:
            self._deliver(0, self.count, top=True)
            self.batches += 1
        except _Stopped:
            pass  # what was not committed is delivered again on the next run
        finally:
            self._drop()

    def _deliver(self, lo: int, hi: int, top: bool = False) -> None:
        """Run records [lo, hi) with their retries and commit them; split them on failure."""
        rc, tail = self._tries(lo, hi)
        if rc == 0:
            self._commit(lo, hi)
            return
        why = _failure_text(rc)
        tried = f" (tried {self.policy.retries + 1} times)" if self.policy.retries else ""
        if self.dead is None:
            raise ExecFailed(f"--exec {self.command!r} {why}{tried}; {self.left_undone(lo, hi)}")
        if hi - lo == 1:
            p, nxt, line = self.records[lo]
            error = _error_header(rc, tail)
            added = self.dead.add(line, p, error)
            self.say(f"{self.policy.source}/{p}@{nxt - 1}: --exec failed on it alone ({error.partition(';')[0]}); "
                     + (f"appended to {self.dead.path}" if added else f"already in {self.dead.path}"))
            self._commit(lo, hi)
            return
        if top:
            self.say(f"--exec {self.command!r} {why}{tried} on a {self.describe(lo, hi)}; "
                     f"running it in halves to set the failing record(s) aside in {self.dead.path}")
        mid = (lo + hi) // 2
        self._deliver(lo, mid)
        self._deliver(mid, hi)

    def _tries(self, lo: int, hi: int) -> tuple[int, bytes]:
        """Run records [lo, hi) until the command exits 0 or the retries are spent: (status, stderr tail)."""
        start = self.ends[lo - 1] if lo else 0
        data = bytes(self.buf[start:self.ends[hi - 1]])
        retries = self.policy.retries
        tried = 0
        while True:
            if stopflag.is_set():
                raise _Stopped
            rc, tail = self._run_once(data, hi - lo)
            if rc == 0:
                return rc, tail
            if stopflag.is_set():
                # Ctrl-C reached the command too; the stop, not the command, is the story.
                raise _Stopped
            if tried >= retries:
                return rc, tail
            tried += 1
            delay = retry_delay(tried, self.policy.backoff)
            self.say(f"--exec {_failure_text(rc)} on a {self.describe(lo, hi)}; "
                     f"retry {tried} of {retries} in {_seconds(delay)}")
            if stopflag.wait(delay):
                raise _Stopped

    def _run_once(self, data: bytes, n: int) -> tuple[int, bytes]:
        env = dict(os.environ)
        env["STREAMCTL_BATCH_RECORDS"] = str(n)
        if self.group:
            env["STREAMCTL_GROUP"] = self.group
        try:
            if self.dead is not None:
                # streamctl.error needs the end of its stderr
                return run_capturing(self.command, data, env)
            return subprocess.run(self.command, shell=True, input=data, env=env).returncode, b""
        except OSError as e:
            raise ExecFailed(f"--exec {self.command!r}: cannot run: {e.strerror}; {self.left_undone()}") from None

    def _commit(self, lo: int, hi: int) -> None:
        """Records [lo, hi) were delivered; the ones before lo are committed already."""
        last: dict[int, int] = {}
        for p, nxt, _ in self.records[lo:hi]:
            last[p] = nxt
        for p, nxt in last.items():
            self.committer.queued(p, nxt)
        self.committer.flushed()
        self.committer.commit()

    def _drop(self) -> None:
        self.buf.clear()
        self.count = 0
        self.records.clear()
        self.ends.clear()
