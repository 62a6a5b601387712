"""Tumbling windows: fixed SIZE, no overlap, aligned to the epoch; every event is in exactly one."""

from __future__ import annotations

from streamctl.windows import GridWindows


class Tumbling(GridWindows):
    def __init__(self, size: int, plan, update: bool = False, correct: bool = False) -> None:
        super().__init__(size, size, plan, update, correct)

    def add(self, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool:
        # Python's % floors, so negative (pre-1970) times land in the right window too.
        end = t - t % self.size + self.size
        if end > wm and not self.update:
            # the hot path: an open window, nothing to emit yet
            d = self.open.get(end)
            if d is not None:
                st = d.get(key)
                if st is not None:
                    self.plan.add(st, vals, seq)
                    return False
        return self._add_one(end, key, seq, vals, wm, out)
