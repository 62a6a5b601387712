"""The three join kinds (DDIA ch. 11), each a small state machine fed in the input order.

Every kind is driven the same way: `streamctl.processing.joins.driver` reads both inputs through
`streamctl.processing.inputorder.merged`, extracts a normalized key and an event time per
record, and calls `left(...)` / `right(...)` on the join object in that order;
the join calls `emit(...)` with output rows. Nothing here reads a clock or
depends on how fast input arrives, so the same input order gives the same rows.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

# emit(key, left_value, right_value) for stream joins; the table-table join adds op first.
Emit = Callable[[Any, Any, Any], None]
EmitOp = Callable[[str, Any, Any, Any], None]


@dataclass(frozen=True)
class JoinSpec:
    """A join's flags (joins/driver.py:make_spec checks them)."""

    left: str
    right: str
    kind: str  # stream | table | tables
    on: tuple[tuple[str, ...], tuple[str, ...]] = (("key",), ("key",))
    time_field: tuple[tuple[str, ...], tuple[str, ...]] = (("ts",), ("ts",))
    within: int | None = None  # ms, stream-stream
    how: str = "inner"
    as_of: str = "position"  # stream-table
    retention: int | None = None  # ms, stream-table --as-of event-time
    lateness: int = 0  # ms the watermark trails the largest event time (stream-stream, --as-of event-time)

    @property
    def has_watermark(self) -> bool:
        return self.kind == "stream" or (self.kind == "table" and self.as_of == "event-time")


@dataclass
class JoinStats:
    """A run's counts, kept by whichever operator or kernel runs it."""

    records: list[int] = field(default_factory=lambda: [0, 0])
    # stream events skipped for want of a usable time; with --as-of event-time, RIGHT counts the
    # table changes without one (applied as valid from the beginning)
    no_time: list[int] = field(default_factory=lambda: [0, 0])
    late: list[int] = field(default_factory=lambda: [0, 0])  # late records per side (joins/driver.py says which)
    rows: int = 0
    max_state: int = 0


# A time no record can have: the "beginning of time" of a table row without a time.
MIN_TIME = -(1 << 62)


def keep_heap(size: int = 64 << 20) -> None:
    """Let glibc keep up to `size` bytes of freed memory at the top of its heap instead of giving it
    back at once, and serve blocks up to 32 MiB from that heap. A join makes and frees a block's
    objects and arrays (dict tables, numpy columns, pipe messages of a few MiB) a block at a
    time; with the default 128 KiB trim threshold the heap shrinks after each block and grows
    again for the next, a page fault per 4 KiB: enriching 1M events took 0.9M faults, 2.7 s of
    system time and 4.3 s of user time, and with this 11k faults, 0.07 s and 2.9 s. Setting
    the trim threshold turns off glibc's own raising of the mmap threshold, so that one is
    set too: else every array above 128 KiB is a fresh mapping (the stream-stream join: 660k
    faults, 2.4 s of system time; with it 47k, 0.3 s). Peak memory is unchanged (the memory
    is reused, not added). A no-op where the C library has no mallopt."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.mallopt(-1, size)  # M_TRIM_THRESHOLD
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD, glibc's largest
    except (OSError, AttributeError):
        pass


@contextmanager
def gc_frozen() -> Iterator[None]:
    # Many small long-lived objects (state): the cyclic GC only costs time here.
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
