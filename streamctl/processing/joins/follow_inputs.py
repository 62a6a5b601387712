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
from typing import TYPE_CHECKING, Any

from streamctl.processing import following, inputorder
from streamctl.processing.joins.table_inputs import gather, log_columns
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
    return [record_lane((side, p), blocks, time_of[side], highs[side].get(p, NO_TIME))
            for side, p, blocks in _blocks(paths, the_plan)]


def _blocks(paths: tuple[str, str], the_plan: Plan) -> Iterator[tuple[int, int, Iterator[list[Record]]]]:
    """(side, partition, its blocks past its position) of each lane of the plan."""
    opened: dict[int, logmod.Log] = {}
    for side, p, start, end in the_plan:
        lg = opened.get(side) or opened.setdefault(side, logmod.open_log(paths[side]))
        yield side, p, inputorder.partition_blocks(paths[side], lg, p, start, end)


_NO_RECORDS: list[Record] = []  # a segment's records where the feeder reads only the columns
# A lane block's columns: values, record keys, offsets and the records
Columns = tuple[list[Any], list[Any], list[int], list[Record]]


def _column_lane(blocks: Iterator[list[Record]], time_of: Callable[[Record], int | None],
                 by_ts: bool) -> Iterator[tuple[list[Any], Columns]]:
    """A partition's blocks as (times, Columns): the record lane of `lanes`, its columns read once."""
    for block in blocks:
        if not block:
            continue
        offs = getattr(block, "offs", None)
        tss = getattr(block, "tss", None)
        cols = (*log_columns(block), offs if offs is not None else [rec["offset"] for rec in block], block)
        yield (tss if by_ts and tss is not None else list(map(time_of, block))), cols


def messages(feeder: TableRowsFeed, paths: tuple[str, str], the_plan: Plan, highs: tuple[dict[int, int], dict[int, int]],
             time_of: tuple[Callable[[Record], int | None], Callable[[Record], int | None]], by_ts: tuple[bool, bool],
             run: int) -> Generator[Message, None, None]:
    """The plan's lanes merged in the input order (mergeorder.merge, as `lanes` and merge_lanes merge
    them, over their blocks' columns), as Messages of about `run` records (a merge round more at
    most). `by_ts`: whether each side's time is the append time `ts` (read from the blocks' column
    where there is one)."""
    the_lanes = [Lane(_column_lane(blocks, time_of[side], by_ts[side]), highs[side].get(p, NO_TIME), (side, p))
                 for side, p, blocks in _blocks(paths, the_plan)]
    sides = [side for side, _p, _s, _e in the_plan]
    with_records = feeder.needs_records
    cols = (0, 1, 3) if with_records else (0, 1)
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
        got = gather(the_lanes, parts, order, cols)
        seg_vals, seg_rks, seg_recs = got if with_records else (*got, _NO_RECORDS)
        if order is None:
            ins = [sides[parts[0][0]]]
            cuts = [0, len(seg_vals)]
        else:
            # the input of each record in input order, cut where it changes
            ins = list(map([sides[k] for k, s, e in parts for _ in range(e - s)].__getitem__, order))
            cuts = [0, *[i for i in range(1, len(ins)) if ins[i] != ins[i - 1]], len(ins)]
        for a, b in zip(cuts, cuts[1:]):  # noqa: B905 (cuts[1:] is one shorter)
            if ins[a] != side:
                close_run()
                side = ins[a]
            whole = b - a == len(seg_vals)
            vals += seg_vals if whole else seg_vals[a:b]
            rks += seg_rks if whole else seg_rks[a:b]
            if with_records:
                recs += seg_recs if whole else seg_recs[a:b]
            n += b - a
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
