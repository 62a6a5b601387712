"""Tumbling windows: fixed SIZE, no overlap, aligned to the epoch; every event is in exactly one."""

from __future__ import annotations

import bisect
import heapq

from streamctl.processing.windows import (
    GridWindows,
    col_names,
    compile_fold,
    compile_inorder,
    fold_tail,
    uses_seq,
    val_names,
)


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

    def batch_folds(self, lateness: int) -> tuple:
        """The driver's batch loops with fast_add's hot path inlined (a window found or made, the
        aggregations folded in). In order, the events of one window are a run of the batch (found by
        bisection), and closing can wait for the end of the batch: windows that the watermark
        passes inside it get no more events, and later windows start later, so the close order is
        the same."""
        if self.update:
            return super().batch_folds(lateness)
        names = col_names(self.plan)
        add = [ln for ln in self.plan.add_lines("st", val_names(self.plan), "seq")]
        fast = ["end = t - t % size + size",
                "if end > wm:",
                "    if end != cur:",
                "        d = opened.get(end)",
                "        if d is None:",
                "            d = opened[end] = {}",
                "            heappush(ends, end)",
                "        cur = end",
                "    st = d.get(k)",
                "    if st is None:",
                "        st = d[k] = new()",
                *("    " + ln for ln in add),
                *("    " + ln for ln in fold_tail())]
        targets = ["k", *names]
        sources = ["ks[lo:hi]", *(f"col_{n}[lo:hi]" for n in names)]
        if uses_seq(self.plan):
            targets.insert(0, "seq")
            sources.insert(0, "range(base + lo, base + hi)")
        run = (f"for {targets[0]} in {sources[0]}:" if len(targets) == 1
               else f"for {', '.join(targets)} in zip({', '.join(sources)}):")
        body = ["base = seq",
                "n = len(ts)",
                "lo = 0",
                "while lo < n:",
                "    t = ts[lo]",
                "    end = t - t % size + size",
                "    hi = bisect_left(ts, end, lo)",
                "    d = opened.get(end)",
                "    if d is None:",
                "        d = opened[end] = {}",
                "        heappush(ends, end)",
                "    " + run,
                "        st = d.get(k)",
                "        if st is None:",
                "            st = d[k] = new()",
                *("        " + ln for ln in add),
                "    lo = hi",
                "seq = base",
                "wm = ts[-1] - lateness",
                "if ends and ends[0] <= wm:",
                "    close(wm, out)"]
        # `d` stays valid while end > wm: close() only removes windows with end <= wm
        env = {"size": self.size, "opened": self.open, "ends": self.ends, "heappush": heapq.heappush,
               "new": self.plan.new, "add": self.fast_add(), "close": self.close, "lateness": lateness,
               "bisect_left": bisect.bisect_left, **self.plan.add_env()}
        general = compile_fold(self.plan, ["cur = None", "d = None"], fast,
                               dict(env, close_due="ends and ends[0] <= wm"))
        return general, compile_inorder(self.plan, body, env)
