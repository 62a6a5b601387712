"""Tumbling windows: fixed SIZE, no overlap, aligned to the epoch; every event is in exactly one."""

from __future__ import annotations

from streamctl.windows import GridWindows


class Tumbling(GridWindows):
    def __init__(self, size: int, plan, update: bool = False, correct: bool = False) -> None:
        super().__init__(size, size, plan, update, correct)

    def add(self, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool:
        return self._add_one(t - t % self.size + self.size, key, seq, vals, wm, out)

    def fast_add(self):
        """`add` as a closure over this operator's fields: the per-event hot path, no attribute lookups."""
        size, opened, plan_add, slow = self.size, self.open, self.plan.add, self._add_one
        if self.update:
            return self.add

        def add(key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool:
            # Python's % floors, so negative (pre-1970) times land in the right window too.
            end = t - t % size + size
            if end > wm:
                d = opened.get(end)
                if d is not None:
                    st = d.get(key)
                    if st is not None:
                        plan_add(st, vals, seq)
                        return False
            return slow(end, key, seq, vals, wm, out)
        return add
