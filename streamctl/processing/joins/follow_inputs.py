"""What a `join --follow` round reads: both logs past the follower's positions, merged in the input
order, for the record path as merged batches of records and for the enrichment kernel as Messages.

A read starts from a plan: each partition of both logs with records past its position (the
table's partitions first with --table: it wins ties), as far as each one reaches when the plan is
made (inputorder.log_plan of each log). Its lanes are merged by mergeorder.merge (for the record
path inputorder.record_lanes and merge_lanes), each lane's merge key carried on from the
follower's last read (Inputs.highs).

The enrichment kernel (stream_table.py's, the batch run's) reads a plan as Messages of about
`run` records: the merged records as one Block of each side (table_inputs.py: values as their
texts or row heads, join keys, the table's record keys, merge keys), with where each lane's last record
in them leaves its position and merge key. Nothing in a Message is a record, so with two cores
a forked process (decoder.ahead) reads the plan, decodes and merges it and writes the JSON,
while the follower looks up and writes the rows: the same Messages as reading in the follower,
since the plan, the positions and the merge keys it starts from were fixed before the fork. A
plan's reader outlasts the follower's rounds and checkpoints; the follower moves its positions
only past the Messages it has joined, so a checkpoint covers exactly those, and what a stopped
reader had read beyond them is read again by the next run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator
from typing import Any

import orjson

from streamctl.processing import exactjson, following, inputorder
from streamctl.processing.joins.table_inputs import Block, Path, log_lane, side_reader
from streamctl.processing.mergeorder import NO_TIME, Lane, merge, round_columns
from streamctl.storage import log as logmod

Record = dict[str, Any]
Plan = inputorder.Plan  # the lanes of both logs: (side, partition, first offset, end offset or None)
# (the events' Block, the table's Block, records in them, (side, partition, next offset) and (side,
# partition, merge key) of each lane with a record in them)
Message = tuple[Block, Block, int, list[tuple[int, int, int]], list[tuple[int, int, int]]]


def plan(paths: tuple[str, str], logs: tuple[logmod.Log, logmod.Log], positions: tuple[dict[int, int], dict[int, int]],
         table_first: bool, notice: Callable[[str], None] | None) -> Plan:
    """Each partition of both logs with records past `positions` (those retention removed moved past
    first, said through `notice`), in the lanes' tie order."""
    out: Plan = []
    for side in (1, 0) if table_first else (0, 1):
        following.skip_deleted(logs[side], positions[side], notice)
        out += inputorder.log_plan(paths[side], side, dict(positions[side]))
    return out


def messages(paths: tuple[str, str], the_plan: Plan, highs: tuple[dict[int, int], dict[int, int]],
             on: tuple[Path, Path], time_field: tuple[Path, Path], run: int) -> Generator[Message, None, None]:
    """The plan's lanes (the table's first) merged in the input order (mergeorder.merge, as the
    record path's inputorder.record_lanes and merge_lanes merge them), as Messages of about `run`
    records (a merge round more at most): each side's records of the Message as one
    table_inputs Block, its source their merge keys: the table's values as their JSON texts
    (None for a tombstone), the events' as the heads of their rows (stream_table.enrich_sides,
    a Side with `heads`)."""
    readers = [side_reader(on[side], time_field[side], side == 1) for side in (0, 1)]
    the_lanes = [Lane(log_lane(blocks, *readers[side]), highs[side].get(p, NO_TIME), (side, p))
                 for side, p, blocks in inputorder.plan_blocks(paths, the_plan)]
    n_table = sum(side == 1 for side, _p, _s, _e in the_plan)  # the table's lanes come first
    dumps = orjson.dumps
    n = 0
    cols: list[list[list[Any]]] = [[[], [], [], []], [[], [], [], []]]  # each side's texts, keys, record keys, marks
    ends: dict[int, int] = {}  # lane index: the offset after its last record so far
    lane_highs: dict[int, int] = {}

    def message() -> Message:
        blocks = tuple((texts, keys, rkeys if side else None, marks) for side, (texts, keys, rkeys, marks)
                       in enumerate(cols))
        return (blocks[0], blocks[1], n, [(*the_lanes[k].name, off) for k, off in ends.items()],
                [(*the_lanes[k].name, h) for k, h in lane_highs.items()])

    for parts, order in merge(the_lanes):
        sides = [[x for x in parts if x[0] >= n_table], [x for x in parts if x[0] < n_table]]
        cut = sum(e - s for _k, s, e in sides[1])  # the table's records come first in `order`
        for side, side_parts in enumerate(sides):
            if not side_parts:
                continue
            side_order = order if len(side_parts) == len(parts) else None
            if side_order is None and len(side_parts) > 1:  # `order` kept to this side's records: their stable sort too
                side_order = [i for i in order if i < cut] if side else [i - cut for i in order if i >= cut]
            values, keys, rkeys, marks = round_columns(the_lanes, side_parts, side_order, 3, marks=True)
            texts, all_keys, all_rkeys, all_marks = cols[side]
            if side:
                # a copy of each text: orjson's result keeps its whole write buffer (4 KiB) alive with it
                try:
                    texts.extend([None if v is None else b"%b" % dumps(v) for v in values])
                except TypeError:  # an int beyond 64 bits: its exact text
                    texts.extend([None if v is None else exactjson.dumps(v) for v in values])
                assert rkeys is not None  # (a table side keeps its record keys: tombstones)
                all_rkeys.extend(rkeys)
            else:
                # what orjson.dumps writes for the row {"key": k, "left": v, "right": ...} before the
                # right side (it writes a value inside an object as it writes it alone)
                try:
                    texts.extend([b'{"key":%b,"left":%b,"right":' % (dumps(k), dumps(v))
                                  for k, v in zip(keys, values, strict=True)])
                except TypeError:  # an int beyond 64 bits: its exact text
                    exact = exactjson.dumps
                    texts.extend([b'{"key":%b,"left":%b,"right":' % (exact(k), exact(v))
                                  for k, v in zip(keys, values, strict=True)])
            all_keys.extend(keys)
            all_marks.extend(marks)
        for k, s, e in parts:
            lane = the_lanes[k]
            batch = lane.payload[3]  # (a Block's source: its records)
            offs = getattr(batch, "offs", None)
            ends[k] = (offs[e - 1] if offs is not None else batch[e - 1]["offset"]) + 1
            lane_highs[k] = int(lane.keys[e - 1])
            n += e - s
        if n >= run:
            yield message()
            cols = [[[], [], [], []], [[], [], [], []]]
            n = 0
            ends.clear()
            lane_highs.clear()
    if n:
        yield message()


def kernel_reader(paths: tuple[str, str], the_plan: Plan, highs: tuple[dict[int, int], dict[int, int]],
                  on: tuple[Path, Path], time_field: tuple[Path, Path], run: int, ahead: bool,
                  keep_out: int | None = None) -> Generator[Message, None, None]:
    """A plan's Messages for the kernel, read by a forked process when `ahead` (two cores and fork),
    else here (decoder.ahead); closing the generator stops it (and the process) where it is."""
    from streamctl.processing import decoder

    highs = ({**highs[0]}, {**highs[1]})  # as they are now: the follower moves its own as it joins

    def make() -> Iterator[Message]:
        if ahead and keep_out is not None:
            # in the reading process, the follower's group lock: the lock stays the follower's alone,
            # so a rerun right after a kill -9 of the follower is not refused while this process winds down
            os.close(keep_out)
        return messages(paths, the_plan, highs, on, time_field, run)

    return decoder.ahead(make, paths[0] if paths[0] == paths[1] else f"{paths[0]}, {paths[1]}", ahead)
