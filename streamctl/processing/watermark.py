"""The watermark: the largest event time seen so far in input order, minus the allowed lateness.

It only moves forward. Because "seen so far" is defined by the deterministic
input order (streamctl.processing.inputorder), not by wall-clock arrival, two runs over
the same input agree on which events were late; the Spark engine replays it
as a running max over that same order.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamctl.processing.windows import NO_WATERMARK


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
