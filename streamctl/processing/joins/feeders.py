"""The record-at-a-time drivers of the three join kinds, shared by the batch run and `join --follow`.

Each feeder takes (side, record) pairs in the input order, reads the join key and the event
time through joins/keys.py, and feeds its operator (stream_stream.py, stream_table.py,
table_table.py). A batch run feeds the whole input once and then calls `finish` (the end of
input: unmatched events and waiting as-of events come out); a follow run feeds a round at a
time, checkpoints what `dump` returns between rounds, and never calls `finish` (an idle
follower has not seen the end of its input). The counts go to a JoinStats the caller owns.

The tables of the table kinds are whatever mapping the caller passes (a dict for a batch
run, joins/store.DiskTable for a follower): the operators only get, set and pop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, MutableMapping
from typing import Any

from streamctl.processing.eventfields import record_time
from streamctl.processing.joins import Emit, EmitOp, JoinSpec, JoinStats
from streamctl.processing.joins.keys import RememberedTime, change_keys, key_getter, key_of_norm, norm_key, value_field
from streamctl.processing.watermark import Watermark

Record = dict[str, Any]
Items = Iterable[tuple[int, Record]]
LateRecord = Callable[[int, Record], None]


class StreamFeed:
    """--within: StreamStreamJoin fed event by event (a stream event without a usable time is
    skipped and counted; a late one is counted and handed to `late`)."""

    def __init__(self, spec: JoinSpec, emit: Emit, stats: JoinStats, late: LateRecord | None = None,
                 times: tuple[RememberedTime, RememberedTime] | None = None) -> None:
        from streamctl.processing.joins.stream_stream import StreamStreamJoin

        assert spec.within is not None
        self.join = StreamStreamJoin(spec.within, spec.how, emit, spec.lateness)
        self.stats = stats
        self.late = late
        self.times = times or (RememberedTime(record_time(spec.time_field[0])),
                               RememberedTime(record_time(spec.time_field[1])))
        self.keys = (key_getter(spec.on[0]), key_getter(spec.on[1]))
        self.kfields = (value_field(spec.on[0]), value_field(spec.on[1]))
        self.pos = 0

    def feed(self, items: Items) -> None:
        late_counts, counts, no_time = self.stats.late, self.stats.records, self.stats.no_time
        keys, kfields, late = self.keys, self.kfields, self.late
        push = self.join.push
        pos = self.pos
        memos = (self.times[0].memo, self.times[1].memo)
        gets = (self.times[0].get, self.times[1].get)
        for side, rec in items:
            pos += 1
            counts[side] += 1
            memo = memos[side]
            t = memo[1] if memo[0] is rec else gets[side](rec)
            if t is None:
                no_time[side] += 1
                continue
            v = rec["value"]
            kf = kfields[side]
            if kf is not None:
                k = v.get(kf) if v.__class__ is dict else None
            else:
                k = keys[side](rec)
            if push(side, k if k.__class__ is str else norm_key(k), k, t, v, pos):
                late_counts[side] += 1
                if late is not None:
                    late(side, rec)
        self.pos = pos

    def finish(self) -> None:
        self.join.finish()

    def dump(self) -> dict:
        j = self.join
        events = sorted([*j.queue, *j.heap], key=lambda e: e[:2])
        return {"pos": self.pos, "watermark": j.clock.dump(),
                "events": [[end, pos, ev[0], ev[1], ev[2], ev[3], ev[5]] for end, pos, ev in events],
                # the times of the events that left, that still make an event late (StreamStreamJoin.push)
                "gone": [[side, key_of_norm(nkey), t] for side, nkey, t in j.gone_times()]}

    def load(self, data: dict) -> None:
        j = self.join
        self.pos = int(data["pos"])
        j.clock = Watermark.load(data["watermark"])
        j.restore([(int(end), int(pos), [int(t), value, bool(matched), int(side), norm_key(key), key])
                   for end, pos, t, value, matched, side, key in data["events"]],
                  [(int(side), norm_key(key), int(t)) for side, key, t in data.get("gone", ())])


class TableFeed:
    """--table: TableAtPosition, or TableAsOfTime with --as-of event-time, fed in the input order
    with the table side first on ties (the caller's lanes put it first). `right_index` is the
    input index the table's records carry."""

    def __init__(self, spec: JoinSpec, emit: Emit, stats: JoinStats, late: LateRecord | None = None,
                 right_index: int = 1, table: MutableMapping[Any, Any] | None = None) -> None:
        from streamctl.processing.joins.stream_table import TableAsOfTime, TableAtPosition

        self.stats = stats
        self.late = late
        self.right_index = right_index
        self.left_key, self.right_key = key_getter(spec.on[0]), key_getter(spec.on[1])
        self.by_value_path = spec.on[1] != ("key",)
        self.inner = spec.how == "inner"
        self.at_position = spec.as_of == "position"
        self.times = (record_time(spec.time_field[0]), record_time(spec.time_field[1]))
        self.pos = 0
        self.in_memory = table is None  # the state's size is counted only in memory (a table on disk is not scanned)
        self.join: TableAtPosition | TableAsOfTime
        if self.at_position:
            self.join = TableAtPosition(self.inner, emit, table)
        else:
            self.join = TableAsOfTime(self.inner, emit, spec.retention, spec.lateness, table)

    def table_keys(self, items: Items) -> list[Any]:
        """The normalized keys the records read from the table (a DiskTable reads them in one go): the
        events'; with --as-of event-time also the changes' (a change adds to its key's versions)."""
        out = []
        left_key, right_index = self.left_key, self.right_index
        for i, rec in items:
            if i != right_index:
                k = left_key(rec)
                if k is not None:
                    out.append(k if k.__class__ is str else norm_key(k))
            elif not self.at_position:
                out += [nk for nk, _k in change_keys(rec, self.right_key, self.by_value_path)]
        return out

    def feed(self, items: Items) -> None:
        if self.at_position:
            self._feed_position(items)
        else:
            self._feed_as_of(items)

    def _feed_position(self, items: Items) -> None:
        counts = self.stats.records
        j = self.join
        change, event = j.change, j.event
        right_index, right_key, left_key, by_value_path = self.right_index, self.right_key, self.left_key, \
            self.by_value_path
        n_left = n_right = 0
        for i, rec in items:
            if i == right_index:
                n_right += 1
                value = rec["value"]
                for nk, _k in change_keys(rec, right_key, by_value_path):
                    change(nk, value)  # type: ignore[call-arg]
            else:
                n_left += 1
                k = left_key(rec)
                event(k if k.__class__ is str else norm_key(k), k, rec["value"])  # type: ignore[call-arg]
        counts[0] += n_left
        counts[1] += n_right

    def _feed_as_of(self, items: Items) -> None:
        from streamctl.processing.joins.stream_table import TableAsOfTime

        ja = self.join
        assert isinstance(ja, TableAsOfTime)
        stats, late, times = self.stats, self.late, self.times
        counts, late_counts = stats.records, stats.late
        pos = self.pos
        for i, rec in items:
            side = 1 if i == self.right_index else 0
            pos += 1
            counts[side] += 1
            t = times[side](rec)
            if side:
                found = change_keys(rec, self.right_key, self.by_value_path)
                if not found:
                    if t is not None:
                        ja.advance(t)
                    continue
                if ja.is_late(t):
                    late_counts[1] += 1
                    if late is not None:
                        late(1, rec)
                value = rec["value"]
                if t is None and value is not None:
                    stats.no_time[1] += 1  # applied as valid from the beginning: counted and reported
                for nk, _k in found:
                    ja.change(nk, t, value, pos)
            else:
                if t is None:
                    stats.no_time[0] += 1
                    continue
                k = self.left_key(rec)
                ja.event(norm_key(k), k, t, rec["value"], pos)
        self.pos = pos

    def finish(self) -> None:
        self.join.finish()
        if self.in_memory:
            self.stats.max_state = self.join.state_size()

    def dump(self) -> dict:
        from streamctl.processing.joins.stream_table import TableAsOfTime

        if not isinstance(self.join, TableAsOfTime):
            return {"pos": self.pos}
        ja = self.join
        return {"pos": self.pos, "watermark": ja.clock.dump(),
                "waiting": [[t, pos, key, value] for t, pos, _nk, key, value in sorted(ja.waiting, key=lambda w: w[:2])]}

    def load(self, data: dict) -> None:
        from streamctl.processing.joins.stream_table import TableAsOfTime

        self.pos = int(data["pos"])
        if isinstance(self.join, TableAsOfTime):
            self.join.clock = Watermark.load(data["watermark"])
            self.join.waiting = [(int(t), int(pos), norm_key(key), key, value) for t, pos, key, value in data["waiting"]]


class TablesFeed:
    """--tables: TableTableJoin, both sides changelogs."""

    def __init__(self, spec: JoinSpec, emit_op: EmitOp, stats: JoinStats,
                 tables: tuple[MutableMapping[Any, Any], MutableMapping[Any, Any]] | None = None) -> None:
        from streamctl.processing.joins.table_table import TableTableJoin

        self.join = TableTableJoin(emit_op, tables)
        self.in_memory = tables is None
        self.stats = stats
        self.keys = (key_getter(spec.on[0]), key_getter(spec.on[1]))
        self.by_value_path = (spec.on[0] != ("key",), spec.on[1] != ("key",))

    def table_keys(self, items: Items) -> list[Any]:
        return [nk for side, rec in items for nk, _k in change_keys(rec, self.keys[side], self.by_value_path[side])]

    def feed(self, items: Items) -> None:
        counts = self.stats.records
        change = self.join.change
        keys, by_value_path = self.keys, self.by_value_path
        for side, rec in items:
            counts[side] += 1
            value = rec["value"]
            for nk, k in change_keys(rec, keys[side], by_value_path[side]):
                change(side, nk, k, value)

    def finish(self) -> None:
        if self.in_memory:
            self.stats.max_state = self.join.state_size()

    def dump(self) -> dict:
        return {}  # a table-table join's whole state is its two tables (on disk when following)

    def load(self, data: dict) -> None:
        """Nothing beyond the tables to restore (dump writes nothing else)."""


def make(spec: JoinSpec, stats: JoinStats, emit: Emit | None, emit_op: EmitOp | None, late: LateRecord | None,
         times: tuple[RememberedTime, RememberedTime] | None = None, right_index: int = 1,
         tables: list[Any] | None = None) -> StreamFeed | TableFeed | TablesFeed:
    """The feeder of the spec's kind, for a batch run (tables in dicts) or a follower (`tables`: its
    tables on disk, joins/store.py); `times` the getters the input merge remembers times with."""
    if spec.kind == "stream":
        assert emit is not None
        return StreamFeed(spec, emit, stats, late, times)
    if spec.kind == "table":
        assert emit is not None
        return TableFeed(spec, emit, stats, late, right_index, None if tables is None else tables[0])
    assert emit_op is not None
    return TablesFeed(spec, emit_op, stats, None if tables is None else (tables[0], tables[1]))
