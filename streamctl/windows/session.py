"""Session windows: a group's events at most GAP apart form one session [first, last + GAP).

An event merges every open session of its group that it is within GAP of (so
one event can bridge two sessions). A session closes when the watermark
reaches last + GAP; an event is late when t + GAP <= watermark, because no
open session could take it any more (Kafka Streams' rule). A late event with
`--late correct` joins the closed sessions it touches (or starts its own) and
that session is emitted again with a revision number.
"""

from __future__ import annotations

import heapq


class Session:
    def __init__(self, gap: int, plan, update: bool = False, correct: bool = False) -> None:
        if gap <= 0:
            raise ValueError("GAP must be positive")
        self.gap = gap
        self.plan = plan
        self.update = update
        self.correct = correct
        # key -> open sessions, each [start, last, state, revision]
        self.open: dict[bytes, list[list]] = {}
        self.heap: list[tuple[int, int, bytes]] = []  # (end, start, key); stale entries skipped on pop
        self.closed: dict[bytes, list[list]] = {}  # --late correct only

    def _touching(self, sessions: list[list], t: int) -> list[list]:
        gap = self.gap
        return [s for s in sessions if s[0] - gap <= t <= s[1] + gap]

    def add(self, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool:
        plan, gap = self.plan, self.gap
        if t + gap <= wm:
            if self.correct:
                closed = self.closed.setdefault(key, [])
                self._join(closed, self._touching(closed, t), t, seq, vals, revise=True, key=key, out=out)
            return True
        sessions = self.open.get(key)
        if sessions is None:
            sessions = self.open[key] = []
        if len(sessions) == 1:
            s = sessions[0]
            if s[0] - gap <= t <= s[1] + gap:
                # the hot path: the event extends the group's only session
                plan.add(s[2], vals, seq)
                if t > s[1]:
                    s[1] = t
                    heapq.heappush(self.heap, (t + gap, s[0], key))
                elif t < s[0]:
                    s[0] = t
                    heapq.heappush(self.heap, (s[1] + gap, t, key))
                if self.update:
                    out.append((s[0], s[1] + gap, key, plan.result(s[2]), None))
                return False
        s = self._join(sessions, self._touching(sessions, t), t, seq, vals, revise=False, key=key, out=out)
        heapq.heappush(self.heap, (s[1] + gap, s[0], key))
        return False

    def _join(self, sessions: list[list], touched: list[list], t: int, seq: int, vals: tuple,
              revise: bool, key: bytes, out: list) -> list:
        plan = self.plan
        if touched:
            s = touched[0]
            for other in touched[1:]:
                plan.merge(s[2], other[2])
                s[0] = min(s[0], other[0])
                s[1] = max(s[1], other[1])
                s[3] = max(s[3], other[3])
                sessions.remove(other)
        else:
            s = [t, t, plan.new(), 0]
            sessions.append(s)
        plan.add(s[2], vals, seq)
        s[0] = min(s[0], t)
        s[1] = max(s[1], t)
        if revise:
            s[3] += 1
            out.append((s[0], s[1] + self.gap, key, plan.result(s[2]), s[3]))
        elif self.update:
            out.append((s[0], s[1] + self.gap, key, plan.result(s[2]), None))
        return s

    def close(self, wm: int, out: list) -> None:
        heap = self.heap
        if not heap or heap[0][0] > wm:
            return
        batch = []
        gap = self.gap
        while heap and heap[0][0] <= wm:
            end, start, key = heapq.heappop(heap)
            sessions = self.open.get(key)
            if not sessions:
                continue
            for s in sessions:
                if s[0] == start and s[1] + gap == end:
                    sessions.remove(s)
                    batch.append((start, end, key, s))
                    break
            if not sessions:
                del self.open[key]
        self._emit(batch, out)

    def flush(self, out: list) -> None:
        batch = [(s[0], s[1] + self.gap, key, s) for key, sessions in self.open.items() for s in sessions]
        self.open.clear()
        self.heap.clear()
        self._emit(batch, out)

    def _emit(self, batch: list, out: list) -> None:
        batch.sort(key=lambda r: (r[0], r[2]))
        for start, end, key, s in batch:
            if not self.update:
                out.append((start, end, key, self.plan.result(s[2]), None))
            if self.correct:
                self.closed.setdefault(key, []).append(s)

    def open_windows(self) -> int:
        return sum(len(v) for v in self.open.values())

    def dump(self) -> dict:
        dump = self.plan.dump

        def sessions(d: dict) -> list:
            return [[k.decode(), [[s[0], s[1], dump(s[2]), s[3]] for s in v]] for k, v in d.items()]
        return {"open": sessions(self.open), "closed": sessions(self.closed)}

    def load(self, data: dict) -> None:
        load = self.plan.load
        for name in ("open", "closed"):
            target = getattr(self, name)
            for k, v in data[name]:
                target[k.encode()] = [[a, b, load(st), r] for a, b, st, r in v]
        self.heap = [(s[1] + self.gap, s[0], k) for k, v in self.open.items() for s in v]
        heapq.heapify(self.heap)
