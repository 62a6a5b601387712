"""What a window or join run writes beside its rows: the --late-out file, and the flushes a
follower makes durable before each checkpoint."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO

from streamctl.errors import UsageError


@contextmanager
def late_file(late_out: str | None, append: bool = False) -> Iterator[IO[bytes] | None]:
    """The --late-out file (None without it) for a run, closed after it; emptied first unless
    `append` (a follower's earlier runs' late records stay)."""
    if late_out is None:
        yield None
        return
    from streamctl.storage.fsutil import NOFOLLOW

    mode = os.O_APPEND if append else os.O_TRUNC
    try:
        fd = os.open(late_out, os.O_WRONLY | os.O_CREAT | mode | NOFOLLOW, 0o644)
    except OSError as e:
        raise UsageError(f"--late-out {late_out}: cannot open: {e.strerror}") from None
    with os.fdopen(fd, "ab" if append else "wb") as f:
        yield f


def follow_flushes(group: str | None, flush_rows: Callable[[], None], late: IO[bytes] | None,
                   late_out: str | None) -> tuple[Callable[[], None], Callable[[], None] | None]:
    """What a follower runs before a checkpoint: flush the rows (and the --late-out file).

    With a group, a checkpoint says its rows were delivered: rows in a regular file (and late
    records in --late-out) are fsynced before it, as consume --group syncs its output file; a
    pipe's reader owns their durability."""
    flush_late = late.flush if late is not None else None
    if group is None:
        return flush_rows, flush_late
    from streamctl.clients.consumer import file_syncer, then_sync

    flush_rows = then_sync(flush_rows, file_syncer(1))
    if late is not None and flush_late is not None:
        flush_late = then_sync(flush_late, file_syncer(late.fileno(), late_out or "--late-out"))
    return flush_rows, flush_late
