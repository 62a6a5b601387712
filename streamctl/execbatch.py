"""consume --exec: hand records to a shell command in batches; commit a batch only when it exits 0.

At-least-once for side effects: a batch is committed after its command
succeeded, so a crash (ours or the command's) between the two repeats that
batch on the next run, never skips it. A failing command stops consume with
exit 1 and the batch stays uncommitted. An empty batch never runs the command.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable

from streamctl import stopflag
from streamctl.consumer import Committer
from streamctl.errors import StreamctlError


class ExecFailed(StreamctlError):
    """The command failed; the batch was not committed (exit 1)."""


class ExecBatcher:
    """A Sink (see live.Sink) that gathers rendered records and runs CMD on each batch."""

    per_line = True

    def __init__(self, command: str, batch: int, timeout: float | None, committer: Committer,
                 render: Callable[[bytes], bytes] | None, group: str | None = None) -> None:
        self.command = command
        self.batch = batch
        self.timeout = timeout
        self.committer = committer
        self.render = render
        self.group = group
        self.buf = bytearray()
        self.count = 0
        self.progress: dict[int, int] = {}  # partition -> next offset after the batch
        self.first: dict[int, int] = {}  # partition -> first offset in the batch (for messages)
        self.started = 0.0
        self.batches = 0

    def put(self, p: int, next_offset: int, data: bytes) -> int:
        if self.count == 0:
            self.started = time.monotonic()
        self.buf += data if self.render is None else self.render(data)
        self.first.setdefault(p, next_offset - 1)
        self.progress[p] = next_offset
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
        if normal and self.count:
            self.run()
        self.committer.commit()

    def describe(self) -> str:
        parts = ", ".join(f"p{p} {self.first[p]}..{self.progress[p] - 1}" for p in sorted(self.progress))
        return f"batch of {self.count} record(s) ({parts})"

    def run(self) -> None:
        if not self.count:
            return
        env = dict(os.environ)
        env["STREAMCTL_BATCH_RECORDS"] = str(self.count)
        if self.group:
            env["STREAMCTL_GROUP"] = self.group
        try:
            proc = subprocess.run(self.command, shell=True, input=bytes(self.buf), env=env)
        except OSError as e:
            raise ExecFailed(f"--exec {self.command!r}: cannot run: {e.strerror}; {self.describe()} "
                             "was not committed") from None
        rc = proc.returncode
        if rc != 0:
            if stopflag.is_set():
                # Ctrl-C reached the command too; the stop, not the command, is the story.
                self._drop()
                return
            why = f"was killed by {signal.Signals(-rc).name}" if rc < 0 else f"exited with status {rc}"
            raise ExecFailed(f"--exec {self.command!r} {why}; {self.describe()} was not committed "
                             "and will be delivered again on the next run")
        for p, nxt in self.progress.items():
            self.committer.queued(p, nxt)
        self.committer.flushed()
        self.committer.commit()
        self.batches += 1
        self._drop()

    def _drop(self) -> None:
        self.buf.clear()
        self.count = 0
        self.progress.clear()
        self.first.clear()
