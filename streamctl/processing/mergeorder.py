"""The input order's merge rule, written once (SPEC: join, "Input order").

Every partition of every input, and every plain file (or `-`), keeps its own
stored order: these are the merge's lanes, listed in tie order (input, then
partition; with `join --table` the table's lanes first). Each record's merge
key is the largest event time in its own lane up to and including it (a
running maximum; a record without a time keeps the maximum so far and does not
move it), and records are taken in (merge key, lane, stored order) order: the
partition whose next record is the oldest goes first, the way Kafka Streams
picks one (PartitionGroup). With the append time `ts` (non-decreasing in a
partition) this is the (ts, partition, offset) order.

- `merge_keys` is the definition of the keys; `merge_key_array` computes the
  same keys with numpy (tests/props/test_input_order.py ties the two).
- `merge` is the one merge: rounds over lanes, each round the parts of the
  lanes that can go out and the permutation that puts them in order. Lanes
  keep their keys as lists (the record path) or as arrays (the column paths);
  the rule is the same code either way. `gather` is the one way a round's
  records are taken out of its lanes, a column at a time (records, values,
  keys, merge keys); `merge_lanes` wraps both for lanes of records (window's
  and join's record paths, the follow rounds), `round_columns` for lanes of
  columns (the column paths).

Window (streamctl.processing.inputorder, decoder), every join kind
(joins/driver.py, joins/stream_table.py, joins/plain_inputs.py) and the follow path
read through these; the Spark window and join jobs write the same running
maximum as a window function over each lane ordered by offset, then sort by
the rule (spark/order.py). This module imports only the standard library
(numpy inside the array functions), so the Spark jobs can ship it.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from itertools import accumulate, islice, repeat
from operator import le
from typing import Any, cast

NO_TIME = -(1 << 62)  # a lane's merge key before its first timed record


def merge_keys(times: Sequence[int | None], high: int) -> list[int]:
    """The merge keys of a lane's next records: the running maximum of their times, starting
    from `high` (the key of the lane's record before them, NO_TIME before any); a record without
    a time (None) keeps the maximum so far."""
    if None not in times:
        known = cast("Sequence[int]", times)
        if known and known[0] >= high and all(map(le, known, islice(known, 1, None))):
            return list(known)  # in order already (the usual case): the keys are the times
        return list(accumulate(known, max, initial=high))[1:]
    out = []
    for t in times:
        if t is not None and t > high:
            high = t
        out.append(high)
    return out


def merge_key_array(times: Any, high: int) -> Any:
    """merge_keys with numpy: `times` an int64 array (NO_TIME where a record has no time) or a
    list (None where it has none); the keys as an int64 array."""
    import numpy as np

    if not isinstance(times, np.ndarray):
        n = len(times)
        if None in times:
            times = np.fromiter((NO_TIME if x is None else x for x in times), dtype=np.int64, count=n)
        else:
            times = np.fromiter(times, dtype=np.int64, count=n)
    return np.maximum.accumulate(np.concatenate((np.array([high], dtype=np.int64), times)))[1:]


class Lane:
    """One lane: its blocks in stored order, each (times, payload) -- or with `keyed`, (merge keys
    as an int64 array, payload) for a reader that made the keys already. The times are a list
    (None: no usable time); the payload is whatever the caller slices (records, columns).

    `name` identifies the lane to the caller (the partition for a log's lanes); `high` is the
    merge key of the last record read, so a follow round carries it on (the key before the
    first block). With `array`, the keys are kept as an int64 array (merge_key_array), else
    as a list (merge_keys)."""

    __slots__ = ("name", "blocks", "high", "keys", "payload", "start", "n", "done", "array", "keyed")

    def __init__(self, blocks: Iterator[tuple[Any, Any]], high: int = NO_TIME, name: Any = None,
                 array: bool = False, keyed: bool = False) -> None:
        self.name = name
        self.blocks = blocks
        self.high = high
        self.keys: Any = []
        self.payload: Any = None
        self.start = self.n = 0
        self.done = False
        self.array = array or keyed
        self.keyed = keyed

    def fill(self) -> None:
        """Read blocks until something is buffered or the lane is exhausted."""
        while self.start == self.n and not self.done:
            block = next(self.blocks, None)
            if block is None:
                self.done = True
                return
            times, payload = block
            n = len(times)
            if not n:
                continue
            if self.keyed:
                keys = times
            elif self.array:
                keys = merge_key_array(times, self.high)
            else:
                keys = merge_keys(times, self.high)
            self.keys, self.payload = keys, payload
            self.high = int(keys[-1])
            self.start, self.n = 0, n


Part = tuple[int, int, int]  # (lane index, start, end) of a lane's current block


def merge(lanes: Sequence[Lane]) -> Iterator[tuple[list[Part], Any]]:
    """The lanes' records in (merge key, lane, stored order), a round at a time: the parts that go
    out, in lane order, and the permutation of their concatenation that puts it in input order
    (None when it is in order already; a list, or an int64 array for array lanes).

    A lane's buffered records may go out once no other lane can still bring one that sorts
    before them: lane j's future keys are at least its last key read, Lj (running maxima
    never go down), so a record of lane k with key x is safe when (x, k) < (Lj, j) for every
    other lane j that is not exhausted. The lane with the smallest (Lj, j) can always send
    everything it holds, so each round makes progress, and memory is one block per lane.
    """
    n = len(lanes)
    while True:
        for lane in lanes:
            lane.fill()
        live = [i for i in range(n) if lanes[i].start < lanes[i].n]
        if not live:
            return
        bounds = sorted((int(lanes[j].keys[-1]), j) for j in live)
        parts: list[Part] = []
        for k in live:
            lane = lanes[k]
            if len(bounds) == 1:
                parts.append((k, lane.start, lane.n))
                break
            other = bounds[1] if bounds[0][1] == k else bounds[0]
            end = _cut(lane, other[0], k < other[1])
            if end > lane.start:
                parts.append((k, lane.start, end))
        order = _order(lanes, parts) if len(parts) > 1 else None
        for k, _s, e in parts:
            lanes[k].start = e
        yield parts, order


def _cut(lane: Lane, bound: int, inclusive: bool) -> int:
    """Where the lane's safe records end: its keys below the other lanes' bound (at it, inclusive)."""
    keys, start = lane.keys, lane.start
    if not lane.array:
        return (bisect_right if inclusive else bisect_left)(keys, bound, start)
    return start + int(keys[start:].searchsorted(bound, "right" if inclusive else "left"))


def _order(lanes: Sequence[Lane], parts: list[Part]) -> Any:
    """A stable sort of the parts' keys, concatenated in lane order (ties stay in lane order)."""
    if not lanes[parts[0][0]].array:
        keys: list[int] = []
        for k, s, e in parts:
            keys += lanes[k].keys[s:e]
        return sorted(range(len(keys)), key=keys.__getitem__)
    import numpy as np

    a = np.concatenate([lanes[k].keys[s:e] for k, s, e in parts])
    return None if (a[1:] >= a[:-1]).all() else np.argsort(a, kind="stable")


class MergedBatch(list):
    """Items in input order, with `lanes` (the lane index of each item) and `highs` (each lane's
    merge key after its last item here, by lane name, for lanes that have one in this batch)."""

    __slots__ = ("lanes", "highs")
    lanes: list[int]
    highs: dict[Any, int]


def record_lane(name: Any, blocks: Iterable[list[Any]], time_of: Callable[[Any], int | None],
                high: int = NO_TIME) -> Lane:
    """A lane of records that come in lists; `time_of` reads a record's event time (with a
    `column` attribute, the times of a list of records at once)."""
    times_of: Callable[[list[Any]], Sequence[int | None]] | None = getattr(time_of, "column", None)
    if times_of is None:
        def times_of(block: list[Any]) -> list[int | None]:
            return list(map(time_of, block))

    return Lane(((times_of(b), b) for b in blocks if b), high, name)


def gather(lanes: Sequence[Lane], parts: list[Part], order: Any,
           column: Callable[[Lane], Any] | int | None = None) -> Any:
    """One column over a round of merge(): `column` of each part's lane (by default its payload;
    an int i, column i of a payload that is its block's columns: a list, a numpy array, or None
    for a column the lanes do not have), the parts' slices one after the other, put in input
    order by `order` (None: in order already; positions as a list for a list column, as an int
    array for an array column). One part passes its lane's column on as it is when it takes the
    whole of it."""
    if len(parts) == 1:
        k, s, e = parts[0]
        col = _column(lanes[k], column)
        return col if col is None or (not s and e == len(col)) else col[s:e]
    cols = [_column(lanes[k], column) for k, _s, _e in parts]
    if cols[0] is None:
        return None
    if not isinstance(cols[0], list):  # numpy arrays
        import numpy as np

        a = np.concatenate([col[s:e] for col, (_k, s, e) in zip(cols, parts, strict=True)])
        return a if order is None else a[order]
    out: list[Any] = []
    for col, (_k, s, e) in zip(cols, parts, strict=True):
        out += col[s:e]
    return out if order is None else list(map(out.__getitem__, order))


def _column(lane: Lane, column: Callable[[Lane], Any] | int | None) -> Any:
    if column is None:
        return lane.payload
    return lane.payload[column] if column.__class__ is int else column(lane)  # type: ignore[operator]


def _marks(lane: Lane) -> Any:
    return lane.keys


def round_columns(lanes: Sequence[Lane], parts: list[Part], order: Any, width: int, marks: bool = False) -> list[Any]:
    """A round of merge() over lanes whose payloads are their blocks' columns: the first `width`
    columns of its records in input order (gather), and with `marks` their merge keys after
    them (a list, or an int64 array for array lanes). The one way a column reader (window's
    merged log, the joins' kernels, the join follower) takes a round out of its lanes."""
    cols = [gather(lanes, parts, order, i) for i in range(width)]
    if marks:
        cols.append(gather(lanes, parts, order, _marks))
    return cols


def merge_lanes(lanes: Sequence[Lane]) -> Generator[MergedBatch, None, None]:
    """merge() of lanes of records (record_lane), as MergedBatch lists in input order."""
    for parts, order in merge(lanes):
        batch = MergedBatch(gather(lanes, parts, order))
        names: list[int] = []
        for k, s, e in parts:
            names += repeat(k, e - s)
        batch.lanes = names if order is None else list(map(names.__getitem__, order))
        batch.highs = {lanes[k].name: lanes[k].keys[e - 1] for k, _s, e in parts}
        yield batch
