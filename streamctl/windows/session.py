"""Session windows: a group's events at most GAP apart form one session [first, last + GAP).

An event merges every open session of its group that it is within GAP of (so
one event can bridge two sessions). A session closes when the watermark
passes last + GAP (an event exactly GAP after the last still joins it); an event is late when t + GAP <= watermark, because no
open session could take it any more (Kafka Streams' rule). A late event with
`--late correct` joins the closed sessions it touches (or starts its own) and
that session is emitted again with a revision number.

Each open session has one entry in the close heap, pushed when it is created
with the end it had then; an entry popped for a session that has grown since
is pushed again with the new end, so extending a session costs nothing and
the heap holds one entry per open session (plus merged-away ones until popped).
"""

from __future__ import annotations

import heapq
import itertools

from streamctl.windows import NO_WATERMARK, col_names, compile_fold, compile_inorder, fold_tail, val_names

# an open session: [start, last, state, revision, id]
START, LAST, STATE, REV, SID = range(5)


class Session:
    def __init__(self, gap: int, plan, update: bool = False, correct: bool = False) -> None:
        if gap <= 0:
            raise ValueError("GAP must be positive")
        self.gap = gap
        self.plan = plan
        self.update = update
        self.correct = correct
        self.open: dict[bytes, list[list]] = {}  # key -> its open sessions
        self.heap: list[tuple[int, int, bytes]] = []  # (end when pushed, session id, key)
        self.closed: dict[bytes, list[list]] = {}  # --late correct only
        self._ids = itertools.count()

    def _touching(self, sessions: list[list], t: int) -> list[list]:
        gap = self.gap
        return [s for s in sessions if s[START] - gap <= t <= s[LAST] + gap]

    def add(self, key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool:
        plan, gap = self.plan, self.gap
        if t + gap <= wm:
            if self.correct:
                closed = self.closed.setdefault(key, [])
                self._join(closed, self._touching(closed, t), t, seq, vals, key, out, revise=True)
            return True
        sessions = self.open.get(key)
        if sessions is not None and len(sessions) == 1:
            s = sessions[0]
            if s[START] - gap <= t <= s[LAST] + gap:
                # the hot path: the event extends (or falls inside) the group's only session
                plan.add(s[STATE], vals, seq)
                if t > s[LAST]:
                    s[LAST] = t
                elif t < s[START]:
                    s[START] = t
                if self.update:
                    out.append((s[START], s[LAST] + gap, key, plan.result(s[STATE]), None))
                return False
        if sessions is None:
            sessions = self.open[key] = []
        self._join(sessions, self._touching(sessions, t), t, seq, vals, key, out, revise=False)
        return False

    def _join(self, sessions: list[list], touched: list[list], t: int, seq: int, vals: tuple,
              key: bytes, out: list, revise: bool) -> None:
        plan = self.plan
        if touched:
            s = touched[0]
            for other in touched[1:]:
                plan.merge(s[STATE], other[STATE])
                s[START] = min(s[START], other[START])
                s[LAST] = max(s[LAST], other[LAST])
                s[REV] = max(s[REV], other[REV])
                sessions.remove(other)  # its heap entry goes stale
        else:
            s = [t, t, plan.new(), 0, next(self._ids)]
            sessions.append(s)
            if not revise:
                heapq.heappush(self.heap, (t + self.gap, s[SID], key))
        plan.add(s[STATE], vals, seq)
        s[START] = min(s[START], t)
        s[LAST] = max(s[LAST], t)
        if revise:
            s[REV] += 1
            out.append((s[START], s[LAST] + self.gap, key, plan.result(s[STATE]), s[REV]))
        elif self.update:
            out.append((s[START], s[LAST] + self.gap, key, plan.result(s[STATE]), None))

    def close(self, wm: int, out: list) -> None:
        # Strictly after the end: an event at exactly last + GAP is "at most GAP apart"
        # and still joins the session, so the session cannot close while wm == end.
        heap = self.heap
        if not heap or heap[0][0] >= wm:
            return
        batch = []
        gap = self.gap
        while heap and heap[0][0] < wm:
            end, sid, key = heapq.heappop(heap)
            sessions = self.open.get(key)
            if not sessions:
                continue
            for s in sessions:
                if s[SID] == sid:
                    now_end = s[LAST] + gap
                    if now_end > end:
                        heapq.heappush(heap, (now_end, sid, key))  # it grew: check again then
                    else:
                        sessions.remove(s)
                        batch.append((s[START], now_end, key, s))
                    break
            if not sessions:
                del self.open[key]
        self._emit(batch, out)

    def flush(self, out: list) -> None:
        batch = [(s[START], s[LAST] + self.gap, key, s) for key, sessions in self.open.items() for s in sessions]
        self.open.clear()
        self.heap.clear()
        self._emit(batch, out)

    def _emit(self, batch: list, out: list) -> None:
        batch.sort(key=lambda r: (r[0], r[2]))
        if not self.update:
            out += [(start, end, key, res, None)
                    for (start, end, key, _s), res in zip(batch, self.plan.results([b[3][STATE] for b in batch]), strict=True)]
        if self.correct:
            for _start, _end, key, s in batch:
                self.closed.setdefault(key, []).append(s)

    def fast_add(self):
        """`add` as a closure for the hot path (an event extending its group's only open session)."""
        if self.update or self.correct:
            return self.add
        gap, opened, plan_add, slow = self.gap, self.open, self.plan.add, self.add

        def add(key: bytes, t: int, seq: int, vals: tuple, wm: int, out: list) -> bool:
            if t + gap > wm:
                sessions = opened.get(key)
                if sessions is not None and len(sessions) == 1:
                    s = sessions[0]
                    if s[0] - gap <= t <= s[1] + gap:
                        plan_add(s[2], vals, seq)
                        if t > s[1]:
                            s[1] = t
                        elif t < s[0]:
                            s[0] = t
                        return False
            return slow(key, t, seq, vals, wm, out)
        return add

    def batch_folds(self, lateness: int) -> tuple:
        """The driver's batch loops (windows.compile_fold, compile_inorder) with fast_add's hot path
        inlined. In order, an event cannot be late and is at or after its group's last one, so the
        hot path is one bound check; the closing check compares the event time with the smallest
        end in the heap plus lateness (`due`), kept up to date when add() or close() change it."""
        head: list[str] = []
        fast: list[str] = []
        env = {"gap": self.gap, "opened": self.open, "heap": self.heap, "add": self.fast_add(),
               "close": self.close, "lateness": lateness, "NO_WATERMARK": NO_WATERMARK,
               "INF": float("inf"), **self.plan.add_env()}
        if self.update or self.correct:
            return compile_fold(self.plan, head, fast, dict(env, close_due="heap and heap[0][0] < wm")), None
        add = self.plan.add_lines("st", val_names(self.plan), "seq")
        fast = ["if t + gap > wm:",
                "    sessions = opened.get(k)",
                "    if sessions is not None and len(sessions) == 1:",
                "        s = sessions[0]",
                "        if s[0] - gap <= t <= s[1] + gap:",
                "            st = s[2]",
                *("            " + ln for ln in add),
                "            if t > s[1]:",
                "                s[1] = t",
                "            elif t < s[0]:",
                "                s[0] = t",
                *("            " + ln for ln in fold_tail())]
        general = compile_fold(self.plan, head, fast, dict(env, close_due="heap and heap[0][0] < wm"))
        names = col_names(self.plan)
        vals = ", ".join(val_names(self.plan))
        body = ["base = seq",
                "due = heap[0][0] + lateness if heap else INF",
                f"for seq, t, k{''.join(', ' + n for n in names)} in zip(range(base, base + len(ts)), ts, ks"
                + "".join(f", col_{n}" for n in names) + "):",
                "    try:",
                "        s, = opened[k]  # the group's only open session",
                "    except (KeyError, ValueError):  # none, or several",
                "        s = None",
                "    if s is not None and t <= s[1] + gap:",
                "        st = s[2]",
                *("        " + ln for ln in add),
                "        s[1] = t",
                "    else:",
                "        # the watermark before this event: from the previous event's time (or the batch's start)",
                "        p = ts[seq - base - 1] if seq > base else maxt",
                f"        add(k, t, seq, ({vals},), p - lateness if p != NO_WATERMARK else NO_WATERMARK, out)",
                "        due = heap[0][0] + lateness if heap else INF",
                "    if t > due:",
                "        close(t - lateness, out)",
                "        due = heap[0][0] + lateness if heap else INF",
                "seq = base"]
        return general, compile_inorder(self.plan, body, env)

    def open_windows(self) -> int:
        return sum(len(v) for v in self.open.values())

    def dump(self) -> dict:
        dump = self.plan.dump

        def sessions(d: dict) -> list:
            return [[k.decode(), [[s[START], s[LAST], dump(s[STATE]), s[REV]] for s in v]] for k, v in d.items()]
        return {"open": sessions(self.open), "closed": sessions(self.closed)}

    def load(self, data: dict) -> None:
        load = self.plan.load
        for name in ("open", "closed"):
            target = getattr(self, name)
            for k, v in data[name]:
                target[k.encode()] = [[a, b, load(st), r, next(self._ids)] for a, b, st, r in v]
        self.heap = [(s[LAST] + self.gap, s[SID], k) for k, v in self.open.items() for s in v]
        heapq.heapify(self.heap)
