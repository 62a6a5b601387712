"""The one progress display: a line on stderr, shown only on a terminal once a job takes a while.

A caller counts bytes with `add(n)`; the line is redrawn at most every `every`
seconds, from `after` seconds on, by the caller's `render(progress, now)`, and
erased by `done()`. A stderr that fails is ignored: progress never fails a command.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable


class Progress:
    def __init__(self, render: Callable[[Progress, float], str], total: int = 0, after: float = 1.0,
                 every: float = 0.1) -> None:
        self.render = render
        self.total = total
        self.after = after
        self.every = every
        self.seen = 0
        self.start = time.monotonic()
        self.last = 0.0
        self.shown = False

    @classmethod
    def on_terminal(cls, render: Callable[[Progress, float], str], total: int = 0, after: float = 1.0,
                    every: float = 0.1, above: int = -1) -> Progress | None:
        """A display when stderr is a terminal and the total is above `above` bytes; else None."""
        return cls(render, total, after, every) if sys.stderr.isatty() and total > above else None

    def add(self, n: int) -> None:
        self.seen += n
        now = time.monotonic()
        if now - self.start < self.after or now - self.last < self.every or self.total <= 0:
            return
        self.last = now
        self.shown = True
        self._emit(self.render(self, now))

    __call__ = add

    def done(self) -> None:
        if self.shown:
            self._emit("\r\x1b[K")

    @staticmethod
    def _emit(text: str) -> None:
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except OSError:
            pass


def bytes_rate(label: str) -> Callable[[Progress, float], str]:
    """`streamctl: LABEL  12.5%  300 MiB  150 MiB/s`."""

    def render(p: Progress, now: float) -> str:
        pct = min(100.0, 100.0 * p.seen / p.total)
        rate = p.seen / (now - p.start) / (1 << 20)
        return f"\rstreamctl: {label} {pct:5.1f}%  {p.seen >> 20} MiB  {rate:.0f} MiB/s "

    return render


def bar(label: str, width: int = 30) -> Callable[[Progress, float], str]:
    """`streamctl: LABEL [#####.....]  42%`."""

    def render(p: Progress, now: float) -> str:
        frac = min(1.0, p.seen / p.total)
        filled = int(frac * width)
        return f"\rstreamctl: {label} [{'#' * filled}{'.' * (width - filled)}] {frac * 100:3.0f}%"

    return render
