"""What every follower of a log shares (`window --follow`, `join --follow`): one follower a group
(its lock), the rounds and their checkpoint cadence, where a group resumes, and what to do when retention deleted the records a
follower was about to read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from streamctl.storage.log import Log

FOLLOW_BATCH = 50_000  # records per round between checkpoints on a large backlog
CHECKPOINT_INTERVAL = 1.0  # seconds; at most this much output is repeated after a kill -9


def lock_group(lg: Log, group: str, command: str) -> int:
    """The group's lock for `command --follow` on this log (a file in groups/, never reached through
    a symlink), held until the descriptor is closed: a second follower of the group is refused."""
    import os

    from streamctl.errors import StorageError
    from streamctl.groups import files
    from streamctl.storage import fsutil

    fd = files.open_lock(lg, group, f"{command}.lock")
    if not fsutil.flock(fd, True, 0):
        os.close(fd)
        raise StorageError(f"another `{command} --follow --group {group}` is running on {lg.path}")
    return fd


class Waits(Protocol):
    def wait(self, timeout: float | None = None) -> None: ...


def run_rounds(round_: Callable[[], int], checkpoint: Callable[[], None], waiter: Waits,
               idle_timeout: float | None) -> None:
    """Rounds of at most about FOLLOW_BATCH records until a stop signal or `idle_timeout` seconds
    without new records. `round_` reads and feeds what is there and returns how many records it
    read; `checkpoint` flushes the rows and saves the state. A checkpoint follows new records at
    most once a CHECKPOINT_INTERVAL (and after every full round of a backlog), and once at the end."""
    import time

    from streamctl import stopflag

    last_new = time.monotonic()
    last_save = 0.0
    dirty = False
    while not stopflag.is_set():
        got = round_()
        now = time.monotonic()
        if got:
            dirty = True
            last_new = now
        if dirty and (now - last_save >= CHECKPOINT_INTERVAL or got >= FOLLOW_BATCH):
            checkpoint()
            last_save, dirty = now, False
        if got >= FOLLOW_BATCH:
            continue
        if idle_timeout is not None and now - last_new >= idle_timeout:
            break
        waiter.wait(0.2)
    checkpoint()


def resume_positions(lg: Log, group: str, positions: dict[int, int], ckpt: str | None,
                     notice: Callable[[str], None] | None, command: str) -> dict[int, int]:
    """The offsets a group resumes from, through consume's checks (consumer.plan) on them.

    consumer.plan checks the group file; it mirrors the checkpoint's offsets (follow's save
    writes both), so a mirror that a crash between the two writes left behind is brought
    up to the checkpoint first.
    """
    from streamctl.clients import consumer
    from streamctl.errors import StorageError
    from streamctl.groups import offsets

    if ckpt is not None and positions:
        committed = offsets.load(lg, group)
        if any(committed.get(p) != o for p, o in positions.items()):
            offsets.commit(lg, group, dict(positions))
    try:
        pl = consumer.plan(lg, list(range(lg.partitions)), None, group, follow=True)
    except StorageError as e:
        if ckpt is None:
            raise
        raise StorageError(f"{e}; `{command} --follow --group {group}` resumes from the offsets in {ckpt}: "
                           f"move that checkpoint away too (its state is of the records before)") from None
    for note in pl.notices:
        if notice is not None:
            notice(note)
    return {p: pl.positions[p].start if p in pl.positions else o for p, o in positions.items()}


def skip_deleted(lg: Log, positions: dict[int, int], notice: Callable[[str], None] | None) -> None:
    """Partitions whose next offset retention deleted while this follower ran (whole segments below
    it are gone): said, and moved to the first segment that is left, as a restart would."""
    for p, off in positions.items():
        segs = lg.segments(p)
        if segs and off < segs[0].base:
            if notice is not None:
                notice(f"{lg.path}: partition {p}: offset {off} is no longer in the log (retention removed it "
                       f"before it was read); resuming at {segs[0].base}, the next existing record")
            positions[p] = segs[0].base
