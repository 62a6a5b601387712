"""The watermark, written once: the largest event time seen so far in input order, minus the lateness.

It only moves forward. Because "seen so far" is defined by the deterministic input order
(streamctl.processing.mergeorder), not by wall-clock arrival, two runs over the same input
agree on which events were late.

Two forms of the one definition, side by side:

- the value form, `Watermark`: fold in one event time at a time (`observe`); what window's
  record path, the per-event fold of the window operators and the stream-stream and as-of
  joins use, and what a follow checkpoint keeps;
- the array form, for a batch in input order: the watermark before each event
  (`before_array`; an event is judged against the watermark before it, so it can never make
  itself late) or after each event (`after_array`, the joins' W(p)).

tests/props/test_watermark.py holds the array forms to folding `Watermark.observe` over
the same times. The Spark window and join jobs compute the same running maximum over the
input order as DataFrame operations (spark/order.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NO_WATERMARK = -(1 << 62)  # before the first event time: nothing is late, nothing closes


@dataclass
class Watermark:
    lateness: int = 0
    max_time: int | None = None
    value: int = NO_WATERMARK

    def observe(self, t: int) -> bool:
        """Fold in one event time; True when the watermark moved (windows may close)."""
        if self.max_time is None or t > self.max_time:
            self.max_time = t
            self.value = t - self.lateness
            return True
        return False

    def dump(self) -> dict:
        return {"lateness": self.lateness, "max_time": self.max_time}

    @classmethod
    def load(cls, data: dict) -> Watermark:
        w = cls(data["lateness"])
        if data["max_time"] is not None:
            w.observe(data["max_time"])
        return w


def before_array(t: Any, max_time: int, lateness: int) -> Any:
    """The watermark before each event of a batch in input order (`t`, a non-empty int64 array):
    the largest time before it (or `max_time`, the largest before the batch; NO_WATERMARK for
    none) minus the lateness, and NO_WATERMARK while no time has been seen; an int64 array."""
    import numpy as np

    prior = np.empty(len(t), dtype=np.int64)  # the largest time before each event
    prior[0] = max_time
    np.maximum(np.maximum.accumulate(t)[:-1], max_time, out=prior[1:])
    if max_time == NO_WATERMARK:
        return np.where(prior == NO_WATERMARK, NO_WATERMARK, prior - lateness)
    return prior - lateness


def after_array(t: Any, max_time: int | None, lateness: int) -> tuple[Any, int]:
    """The watermark after each event (its own time included) of a non-empty int64 array of times,
    given the largest time before them (None: none), and the largest time after them."""
    import numpy as np

    high = np.maximum.accumulate(t)
    if max_time is not None:
        np.maximum(high, max_time, out=high)
    return high - lateness, int(high[-1])
