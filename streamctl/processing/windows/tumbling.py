"""Tumbling windows: fixed SIZE, no overlap, aligned to the epoch; every event is in exactly one."""

from __future__ import annotations

from streamctl.processing.windows import GridWindows


class Tumbling(GridWindows):
    def __init__(self, size: int, plan, update: bool = False, correct: bool = False) -> None:
        super().__init__(size, size, plan, update, correct)

    def add(self, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool:
        # Python's % floors, so negative (pre-1970) times land in the right window too.
        return self._add_one(t - t % self.size + self.size, key, seq, vals, wm, out)
