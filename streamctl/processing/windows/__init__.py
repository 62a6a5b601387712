"""Window operators: tumbling, hopping, sliding and session windows over event time.

Every operator has the same small interface, driven by `streamctl.processing.windows.driver`
(and, unchanged, by the Spark engine's per-group replay):

    add(key, t, seq, vals, wm, out) -> bool   fold one event in; True if it was late
    close(wm, out)                            emit the windows the watermark closed
    flush(out)                                end of input: emit every open window
    dump() / load(data)                       state for follow-mode checkpoints

`key` is the group key's JSON text (bytes: hashable for any JSON value, and
its byte order is the documented tie-break), `t` the event time in ms, `seq`
the event's position in the input order (first/last use it), `vals` what
`aggregations.Plan.extract` pulled out of the event, `wm` the watermark
before this event. Rows appended to `out` are `(start, end, key, values, revision)`;
revision is None except for `--late correct` rows. A row with values None is a
delete: it withdraws the row written before for that window and key (a
session whose bounds changed, see session.py), and is written as
`{"window": ..., "key": K, "op": "delete"}`. Folding the rows by (window, key)
-- a row replaces the one before, a delete removes it -- gives with `--emit
update` the rows of `--emit final`, and with `--late correct` the rows of a run
whose lateness let nothing be late.

A batch of windows closed by one watermark move comes out sorted by
(start, key): with the watermark's monotony that gives the spec's
"window-close order, ties by window start, then group key".
"""

from __future__ import annotations

import heapq
from itertools import repeat

NO_WATERMARK = -(1 << 62)  # before the first event: nothing is late, nothing closes


def compile_fold(plan, head: list[str], fast: list[str], env: dict):
    """The general batch loop: `fold(ts, ks, cols, seq, maxt, wm, out) -> (seq, maxt, wm, lates)` does
    for each event what the driver's per-event loop does with fast_add and close, in the same order,
    and lists the late events (their seq) for the driver to count and write. `cols` holds one column
    per aggregation that reads a field (a bare count reads none: its value is `True`).

    `fast` is the operator's hot path, inlined with the aggregations' add(): it ends with
    fold_tail() when it took the event, or falls through to the generic `add`. `head` sets up names
    the loop uses, `env` binds the operator's objects, and env["close_due"] (an expression of `wm`)
    says whether close() has anything to do.
    """
    names = col_names(plan)
    vals = ", ".join(val_names(plan))
    src = ["def fold(ts, ks, cols, seq, maxt, wm, out):",
           f"    {', '.join(names)}, = cols" if names else "    pass",
           "    lates = []",
           *("    " + ln for ln in head),
           f"    for t, k{''.join(', ' + n for n in names)} in zip(ts, ks{''.join(', col_' + n for n in names)}):",
           *("        " + ln for ln in fast),
           f"        if add(k, t, seq, ({vals},), wm, out):",
           "            lates.append(seq)",
           *("        " + ln for ln in fold_tail()[:-1]),
           "    return seq, maxt, wm, lates"]
    return _exec(src, env, names)


def _exec(src: list[str], env: dict, names: list[str]):
    # the columns are unpacked as col_NAME, the loop variables are NAME
    if names:
        src[1] = f"    {', '.join('col_' + n for n in names)}, = cols"
    text = "\n".join(src).replace("close_due", env.pop("close_due", "True"))
    exec(text, env)
    return env[src[0][4:src[0].index("(")]]


def compile_inorder(plan, body: list[str], env: dict, loop: str = "per_event"):
    """The batch loop for a batch whose event times never go down and start at or above the largest
    time seen so far (the driver checks): no event in it can be late, each one moves the watermark
    to its own time (minus lateness), so the checks that depend on it collapse.
    `inorder(ts, ks, cols, seq, maxt, wm, out) -> (seq, maxt, wm)`; `body` is the operator's loop."""
    names = col_names(plan)
    src = ["def inorder(ts, ks, cols, seq, maxt, wm, out):",
           "    pass",
           *("    " + ln for ln in body),
           "    maxt = ts[-1]",
           "    return seq + len(ts), maxt, maxt - lateness"]
    return _exec(src, env, names)


def col_names(plan) -> list[str]:
    """The loop variables of the aggregations that read a field, in compiled batch loops."""
    return [f"c{i}" for i, s in enumerate(plan.specs) if s.path is not None]


def val_names(plan) -> list[str]:
    """The value of each aggregation in compiled batch loops (`True` for a bare count)."""
    return [f"c{i}" if s.path is not None else "True" for i, s in enumerate(plan.specs)]


def uses_seq(plan) -> bool:
    return any(f in ("first", "last") for f in plan.funcs)


def fold_tail() -> list[str]:
    """What `fast` ends with after taking an event (the generic path's tail too, but for `continue`)."""
    return ["seq += 1",
            "if t > maxt:",
            "    maxt = t",
            "    wm = t - lateness",
            "    if close_due:",
            "        close(wm, out)",
            "continue"]


class GridWindows:
    """Windows on a fixed grid aligned to the epoch (tumbling, hopping): [start, start + size)."""

    def __init__(self, size: int, hop: int, plan, update: bool, correct: bool) -> None:
        self.size = size
        self.hop = hop
        self.plan = plan
        self.update = update
        self.correct = correct
        self.open: dict[int, dict[bytes, list]] = {}  # end -> {key: state}
        self.ends: list[int] = []  # heap of the ends in `open`
        # --late correct only: closed windows kept so a late event can revise them
        self.closed: dict[tuple[int, bytes], list] = {}  # (end, key) -> [state, revision]

    def _add_one(self, end: int, key: bytes, seq: int, vals: tuple, wm: int, out: list) -> bool:
        plan = self.plan
        if end <= wm:
            if self.correct:
                entry = self.closed.get((end, key))
                if entry is None:
                    entry = self.closed[(end, key)] = [plan.new(), 0]
                plan.add(entry[0], vals, seq)
                entry[1] += 1
                out.append((end - self.size, end, key, plan.result(entry[0]), entry[1]))
            return True
        d = self.open.get(end)
        if d is None:
            d = self.open[end] = {}
            heapq.heappush(self.ends, end)
        st = d.get(key)
        if st is None:
            st = d[key] = plan.new()
        plan.add(st, vals, seq)
        if self.update:
            out.append((end - self.size, end, key, plan.result(st), None))
        return False

    def close(self, wm: int, out: list) -> None:
        ends = self.ends
        if not ends or ends[0] > wm:
            return
        while ends and ends[0] <= wm:
            end = heapq.heappop(ends)
            self._emit(end, self.open.pop(end), out)

    def flush(self, out: list) -> None:
        for end in sorted(self.open):
            self._emit(end, self.open[end], out)
        self.open.clear()
        self.ends.clear()

    def _emit(self, end: int, d: dict, out: list) -> None:
        """One closed window's rows, by key. Windows close in end order and start = end - size, so
        rows come out by (start, key) within a close (the order the module docstring promises)."""
        start = end - self.size
        keys = sorted(d)
        if not self.update:
            out += zip(repeat(start), repeat(end), keys, self.plan.results(map(d.__getitem__, keys)), repeat(None))
        if self.correct:
            closed = self.closed
            for key in keys:
                closed[(end, key)] = [d[key], 0]

    def open_windows(self) -> int:
        return sum(len(d) for d in self.open.values())

    def fast_add(self):
        """The per-event entry point the driver binds once (operators may return a specialised closure)."""
        return self.add

    def batch_folds(self, lateness: int) -> tuple:
        """The driver's loops over a batch of events: (general, in-order or None); see compile_fold
        and compile_inorder. Operators with a hot path inline it."""
        return compile_fold(self.plan, [], [], {"add": self.fast_add(), "close": self.close,
                                                 "lateness": lateness}), None

    def dump(self) -> dict:
        dump = self.plan.dump
        return {
            "open": [[end, key.decode(), dump(st)] for end, d in self.open.items() for key, st in d.items()],
            "closed": [[end, key.decode(), dump(e[0]), e[1]] for (end, key), e in self.closed.items()],
        }

    def load(self, data: dict) -> None:
        load = self.plan.load
        for end, key, st in data["open"]:
            d = self.open.get(end)
            if d is None:
                d = self.open[end] = {}
                heapq.heappush(self.ends, end)
            d[key.encode()] = load(st)
        for end, key, st, rev in data["closed"]:
            self.closed[(end, key.encode())] = [load(st), rev]
