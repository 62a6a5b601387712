"""Hopping windows: SIZE long, starting every HOP (SIZE/HOP overlapping windows per event), epoch-aligned.

An event at t is in every window [s, s + SIZE) with s a multiple of HOP and
s <= t < s + SIZE, including windows that start before the first event.
It is late for each of those windows that has already closed; with
`--late drop` it still counts in the ones that are open.
"""

from __future__ import annotations

from streamctl.processing.windows import GridWindows


class Hopping(GridWindows):
    def __init__(self, size: int, hop: int, plan, update: bool = False, correct: bool = False) -> None:
        if hop <= 0 or hop > size:
            raise ValueError("HOP must be positive and at most SIZE")
        super().__init__(size, hop, plan, update, correct)

    def add(self, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool:
        late = False
        for end in self.ends_of(t):  # oldest window first
            late |= self._add_one(end, key, seq, vals, wm, out)
        return late
