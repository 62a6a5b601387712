"""Window operators: tumbling, hopping, sliding and session windows over event time.

Every operator has the same small interface, driven by `streamctl.windowing`
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
revision is None except for `--late correct` rows.

A batch of windows closed by one watermark move comes out sorted by
(start, key): with the watermark's monotony that gives the spec's
"window-close order, ties by window start, then group key".
"""

from __future__ import annotations

import heapq

NO_WATERMARK = -(1 << 62)  # before the first event: nothing is late, nothing closes


def _row_order(row: tuple) -> tuple:
    return row[0], row[2]


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
        batch = []
        while ends and ends[0] <= wm:
            end = heapq.heappop(ends)
            for key, st in self.open.pop(end).items():
                batch.append((end - self.size, end, key, st))
        self._emit(batch, out)

    def flush(self, out: list) -> None:
        batch = []
        for end in sorted(self.open):
            for key, st in self.open[end].items():
                batch.append((end - self.size, end, key, st))
        self.open.clear()
        self.ends.clear()
        self._emit(batch, out)

    def _emit(self, batch: list, out: list) -> None:
        batch.sort(key=_row_order)
        result = self.plan.result
        for start, end, key, st in batch:
            if not self.update:
                out.append((start, end, key, result(st), None))
            if self.correct:
                self.closed[(end, key)] = [st, 0]

    def open_windows(self) -> int:
        return sum(len(d) for d in self.open.values())

    def fast_add(self):
        """The per-event entry point the driver binds once (operators may return a specialised closure)."""
        return self.add

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
