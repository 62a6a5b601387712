"""What a `join --follow` round reads: both logs past the follower's positions, merged in the input
order, for the record path as merged batches of records and for the enrichment kernel as Runs.

A read starts from a plan: each partition of both logs with records past its position (the
table's partitions first with --table: it wins ties), as far as each one reaches when the plan is
made. Its lanes are merged by mergeorder.merge (merge_lanes for the record path), each lane's
merge key carried on from the follower's last read (Inputs.highs).

The kernel (feeders.TableRowsFeed) reads a plan as Messages of about `run` records: the merged
records cut into Runs (TableRowsFeed.run: table changes as keys and value texts, events as
normalized keys and the text of each row up to its right side), with where each lane's last
record in them leaves its position and merge key. Nothing in a Message is a record, so with two
cores a forked process (decoder.items) reads the plan, decodes and merges it and writes the JSON,
while the follower looks up and writes the rows: the same Messages as reading in the follower,
since the plan, the positions and the merge keys it starts from were fixed before the fork. A
plan's reader outlasts the follower's rounds and checkpoints; the follower moves its positions
only past the Runs it has joined, so a checkpoint covers exactly those, and what a stopped
reader had read beyond them is read again by the next run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator
from itertools import repeat
from typing import TYPE_CHECKING, Any

from streamctl.processing import following, inputorder
from streamctl.processing.mergeorder import NO_TIME, Lane, merge, record_lane
from streamctl.storage import log as logmod

if TYPE_CHECKING:
    from streamctl.processing.joins.feeders import Run, TableRowsFeed
    from streamctl.processing.joins.keys import RememberedTime

Record = dict[str, Any]
# (side, partition, first offset, end offset or None: as far as the partition reaches when read)
Plan = list[tuple[int, int, int, int | None]]
# (runs, records in them, (side, partition, next offset) and (side, partition, merge key) of each
# lane with a record in them)
Message = tuple[list["Run"], int, list[tuple[int, int, int]], list[tuple[int, int, int]]]


def plan(paths: tuple[str, str], logs: tuple[logmod.Log, logmod.Log], positions: tuple[dict[int, int], dict[int, int]],
         table_first: bool, notice: Callable[[str], None] | None) -> Plan:
    """Each partition of both logs with records past `positions` (those retention removed moved past
    first, said through `notice`), in the lanes' tie order."""
    out: Plan = []
    for side in (1, 0) if table_first else (0, 1):
        following.skip_deleted(logs[side], positions[side], notice)
        _lg, ranges = inputorder.read_plan(paths[side], None, dict(positions[side]))
        out += [(side, p, start, end) for p, start, end in ranges]
    return out


def lanes(paths: tuple[str, str], the_plan: Plan, highs: tuple[dict[int, int], dict[int, int]],
          time_of: tuple[Callable[[Record], int | None], Callable[[Record], int | None]]) -> list[Lane]:
    """The plan's lanes of records, each named (side, partition), its merge key carried on from `highs`."""
    out: list[Lane] = []
    opened: dict[int, logmod.Log] = {}
    for side, p, start, end in the_plan:
        lg = opened.get(side) or opened.setdefault(side, logmod.open_log(paths[side]))
        blocks = inputorder.partition_blocks(paths[side], lg, p, start, end)
        out.append(record_lane((side, p), blocks, time_of[side], highs[side].get(p, NO_TIME)))
    return out


_NO_RECORDS: list[Record] = []  # a segment's records where the feeder reads only the columns
# A lane block's columns: values, record keys, offsets and the records (a _block_records batch has
# the first three already)
Columns = tuple[list[Any], list[Any], list[int], list[Record]]


def _column_lane(path: str, lg: logmod.Log, p: int, start: int, end: int | None,
                 time_of: Callable[[Record], int | None], by_ts: bool) -> Iterator[tuple[list[Any], Columns]]:
    """A partition's blocks as (times, Columns): the record lane of `lanes`, its columns read once."""
    for block in inputorder.partition_blocks(path, lg, p, start, end):
        if not block:
            continue
        values = getattr(block, "values", None)
        rkeys = getattr(block, "keys", None)
        offs = getattr(block, "offs", None)
        tss = getattr(block, "tss", None)
        cols = (values if values is not None else [rec["value"] for rec in block],
                rkeys if rkeys is not None else [rec.get("key") for rec in block],
                offs if offs is not None else [rec["offset"] for rec in block], block)
        yield (tss if by_ts and tss is not None else list(map(time_of, block))), cols


def messages(feeder: TableRowsFeed, paths: tuple[str, str], the_plan: Plan, highs: tuple[dict[int, int], dict[int, int]],
             time_of: tuple[Callable[[Record], int | None], Callable[[Record], int | None]], by_ts: tuple[bool, bool],
             run: int) -> Generator[Message, None, None]:
    """The plan's lanes merged in the input order (mergeorder.merge, as `lanes` and merge_lanes merge
    them, over their blocks' columns), as Messages of about `run` records (a merge round more at
    most). `by_ts`: whether each side's time is the append time `ts` (read from the blocks' column
    where there is one)."""
    the_lanes: list[Lane] = []
    opened: dict[int, logmod.Log] = {}
    for side, p, start, end in the_plan:
        lg = opened.get(side) or opened.setdefault(side, logmod.open_log(paths[side]))
        blocks = _column_lane(paths[side], lg, p, start, end, time_of[side], by_ts[side])
        the_lanes.append(Lane(blocks, highs[side].get(p, NO_TIME), (side, p)))
    sides = [side for side, _p, _s, _e in the_plan]
    with_records = feeder.needs_records
    right = feeder.right_index
    runs: list[Run] = []
    n = 0
    # the run being gathered: its input, values, record keys and records
    side = -1
    vals: list[Any] = []
    rks: list[Any] = []
    recs: list[Record] = []
    ends: dict[int, int] = {}  # lane index: the offset after its last record so far
    lane_highs: dict[int, int] = {}

    def close_run() -> None:
        nonlocal vals, rks, recs
        if vals:
            runs.append(feeder.run(side == right, recs, vals, rks))
            vals, rks, recs = [], [], []

    def message() -> Message:
        return (runs, n, [(*the_lanes[k].name, off) for k, off in ends.items()],
                [(*the_lanes[k].name, h) for k, h in lane_highs.items()])

    for parts, order in merge(the_lanes):
        if order is None:
            k, s, e = parts[0]
            values, rkeys, _offs, block = the_lanes[k].payload
            whole = not s and e == len(values)
            segments = [(sides[k], values if whole else values[s:e], rkeys if whole else rkeys[s:e],
                         (block if whole else block[s:e]) if with_records else _NO_RECORDS)]
        else:
            segments = _merged_segments(the_lanes, sides, parts, order, with_records)
        for seg_side, seg_vals, seg_rks, seg_recs in segments:
            if seg_side != side:
                close_run()
                side = seg_side
            vals += seg_vals
            rks += seg_rks
            if with_records:
                recs += seg_recs
            n += len(seg_vals)
        for k, _s, e in parts:
            lane = the_lanes[k]
            ends[k] = lane.payload[2][e - 1] + 1
            lane_highs[k] = int(lane.keys[e - 1])
        if n >= run:
            close_run()
            yield message()
            runs, n = [], 0
            ends.clear()
            lane_highs.clear()
    close_run()
    if n:
        yield message()


def _merged_segments(lanes: list[Lane], sides: list[int], parts: list[tuple[int, int, int]], order: Any,
                     with_records: bool) -> list[tuple[int, list[Any], list[Any], list[Record]]]:
    """A merge round of several lanes' parts, put in input order by `order`, cut where the input changes."""
    vals: list[Any] = []
    rks: list[Any] = []
    recs: list[Record] = []
    ins: list[int] = []
    for k, s, e in parts:
        values, rkeys, _offs, block = lanes[k].payload
        vals += values[s:e]
        rks += rkeys[s:e]
        if with_records:
            recs += block[s:e]
        ins += repeat(sides[k], e - s)
    vals = list(map(vals.__getitem__, order))
    rks = list(map(rks.__getitem__, order))
    if with_records:
        recs = list(map(recs.__getitem__, order))
    ins = list(map(ins.__getitem__, order))
    if ins.count(ins[0]) == len(ins):
        return [(ins[0], vals, rks, recs)]
    cuts = [0, *[i for i in range(1, len(ins)) if ins[i] != ins[i - 1]], len(ins)]
    return [(ins[a], vals[a:b], rks[a:b], recs[a:b] if with_records else _NO_RECORDS)
            for a, b in zip(cuts, cuts[1:])]  # noqa: B905 (cuts[1:] is one shorter)


class KernelReader:
    """A plan's Messages for the kernel, read by a forked process when `ahead` (two cores and fork),
    else here; `close` stops it (and the process) where it is."""

    def __init__(self, feeder: TableRowsFeed, paths: tuple[str, str], the_plan: Plan,
                 highs: tuple[dict[int, int], dict[int, int]], times: tuple[RememberedTime, RememberedTime],
                 by_ts: tuple[bool, bool], run: int, ahead: bool, keep_out: int | None = None) -> None:
        time_of = (times[0].get, times[1].get)
        highs = ({**highs[0]}, {**highs[1]})  # as they are now: the follower moves its own as it joins
        self.items: Generator[Message, None, None]
        if not ahead:
            self.items = messages(feeder, paths, the_plan, highs, time_of, by_ts, run)
            return
        from streamctl.processing import decoder

        def make() -> Iterator[Message]:  # in the reading process
            if keep_out is not None:
                # the follower's group lock: the lock stays the follower's alone, so a rerun right
                # after a kill -9 of the follower is not refused while this process winds down
                os.close(keep_out)
            return messages(feeder, paths, the_plan, highs, time_of, by_ts, run)

        self.items = decoder.items(make, paths[0] if paths[0] == paths[1] else f"{paths[0]}, {paths[1]}")

    def next(self) -> Message | None:
        """The next Message; None at the end of the plan."""
        return next(self.items, None)

    def close(self) -> None:
        self.items.close()
