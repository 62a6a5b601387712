"""The join driver: reads LEFT and RIGHT in the one input order and feeds a join kind.

Decisions (also in `streamctl join --help` and docs/guide/joins.md):
- `--on` omitted means the record key on both sides. `--on PATH` uses the same
  path on both sides, `--on A=B` path A on LEFT and B on RIGHT; a path not
  starting with an envelope field is under `value` (`user.id` = `value.user.id`).
  A plain file has no record key (nor headers or append time), so it needs a
  value path, or its `offset` (the line number from 0) or `partition` (0), read
  as consume --where and window --by read them.
- The key of a changelog (a table side) is its join key: the record key by
  default. A null value is a tombstone for that key; when the key comes from
  a value path, a tombstone (which has no value to read it from) deletes the
  row whose key, written the way `produce --key-field PATH` writes record keys
  (a string as is, a number as its JSON text), equals the tombstone's record
  key. A plain-file line `null` is skipped (it has no key).
- Keys are equal when their JSON is equal: "7" and 7 do not join, 1 and 1.0
  do not either; objects compare with sorted fields. A null or missing key
  never joins (the event can still come out unmatched in an outer join).
- Input order: `streamctl.processing.inputorder.merged` (ties to LEFT), except that for
  --table the table side is passed first, so it wins ties (see read_inputs).
- Event time: `--time-field PATH[=PATH]`, default `ts` (append time). Times are
  ISO-8601 strings or epoch s/ms/us numbers. A stream event without a usable
  time is skipped and counted (stream-stream and as-of joins need one).
- Lateness (`--lateness DUR`, stream-stream and --as-of event-time): the
  watermark is the largest event time seen so far in the input order minus
  DUR. A stream-stream event whose time + --within is behind it when it
  arrives, or whose partner within --within has already left the window, is
  late: not joined, not emitted as unmatched, counted per side and handed to
  `late` (StreamStreamJoin.push states the rule, joins/stream_stream.py says why). In an as-of join the
  late records are table changes whose time is behind the watermark: still
  applied, counted (joins/stream_table.py).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import Any

import orjson

from streamctl.errors import UsageError
from streamctl.processing import inputorder
from streamctl.processing.eventfields import input_time_path, record_time
from streamctl.processing.joins import Emit, EmitOp, JoinSpec, JoinStats, feeders, gc_frozen, keep_heap
from streamctl.processing.joins.keys import RememberedTime
from streamctl.storage import fieldpaths

HOWS_STREAM = ("inner", "left", "right", "outer")
HOWS_TABLE = ("inner", "left")
AS_OF = ("position", "event-time")
Record = dict[str, Any]


def split_pair(text: str | None, default: str, what: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`PATH` or `LEFTPATH=RIGHTPATH` -> (left parts, right parts), as record paths."""
    text = default if text is None or text == "" else text
    if text.count("=") > 1:
        raise UsageError(f"{what} {text!r}: write PATH or LEFTPATH=RIGHTPATH")
    a, eq, b = text.partition("=")
    if eq and not (a.strip() and b.strip()):
        raise UsageError(f"{what} {text!r}: a path on each side of = (LEFTPATH=RIGHTPATH), or one PATH for both")
    if not eq:
        b = a
    return fieldpaths.record_path(a.strip()), fieldpaths.record_path(b.strip())


def make_spec(left: str, right: str, *, within: str | None = None, table: bool = False, tables: bool = False,
              on: str | None = None, time_field: str | None = None, how: str | None = None,
              as_of: str | None = None, table_retention: str | None = None,
              lateness: str | None = None) -> JoinSpec:
    """Check the flag combination of `streamctl join` and build a JoinSpec (UsageError on misuse)."""
    from streamctl.timeparse import parse_duration

    chosen = [name for name, on_ in (("--within", within is not None), ("--table", table), ("--tables", tables)) if on_]
    if len(chosen) != 1:
        raise UsageError("choose one join kind: --within DUR (stream-stream), --table (stream-table) "
                         "or --tables (table-table)" + (f"; got {' and '.join(chosen)}" if chosen else ""))
    kind = "stream" if within is not None else "table" if table else "tables"
    if left == "-" and right == "-":
        raise UsageError("only one input can be stdin (-)")
    hows = {"stream": HOWS_STREAM, "table": HOWS_TABLE, "tables": ("inner",)}[kind]
    how_ = how or "inner"
    if how_ not in hows:
        kinds = {"stream": "a stream-stream join", "table": "a stream-table join", "tables": "a table-table join"}
        raise UsageError(f"--how {how_!r}: {kinds[kind]} takes {'|'.join(hows)}")
    if as_of is not None and kind != "table":
        raise UsageError("--as-of needs --table")
    as_of_ = as_of or "position"
    if as_of_ not in AS_OF:
        raise UsageError(f"--as-of {as_of_!r}: use position or event-time")
    if table_retention is not None and as_of_ != "event-time":
        raise UsageError("--table-retention needs --as-of event-time")
    if lateness is not None and not (kind == "stream" or as_of_ == "event-time"):
        raise UsageError("--lateness needs a watermark: --within DUR, or --table --as-of event-time")
    within_ms = parse_duration(within) if within is not None else None
    retention = parse_duration(table_retention) if table_retention is not None else None
    lateness_ms = parse_duration(lateness) if lateness is not None else 0
    times = split_pair(time_field, "ts", "--time-field")
    # the event time's one rule: in a plain file (no append times) `ts` is the value's own ts field
    times = (input_time_path(times[0], not _plain_file(left)), input_time_path(times[1], not _plain_file(right)))
    return JoinSpec(left, right, kind, split_pair(on, "key", "--on"), times, within_ms, how_, as_of_, retention,
                    lateness_ms)


def _plain_file(path: str) -> bool:
    """A plain JSON-lines input (a log is a folder; a missing path is refused by check_inputs)."""
    import os

    return path == "-" or os.path.isfile(path)


def check_inputs(spec: JoinSpec) -> list[inputorder.InputSpec]:
    specs = [inputorder.classify(spec.left), inputorder.classify(spec.right)]
    # A table record without a time is valid from the beginning, so only events need one.
    needs_time = (spec.has_watermark, spec.kind == "stream")
    for i, s in enumerate(specs):
        side = ("LEFT", "RIGHT")[i]
        # A plain file's offset is its line number and its partition 0, as everywhere; it has no key,
        # append time or headers: a join on one would never match, an event time never be found
        if not s.is_log and spec.on[i][0] in ("key", "ts", "headers"):
            raise UsageError(f"{side} {s.path} is a plain file: it has no {'.'.join(spec.on[i])}; "
                             f"join it on a value field with --on PATH (e.g. --on user.id)")
        if not s.is_log and needs_time[i] and spec.time_field[i][0] in ("ts", "key", "headers"):
            # `ts` alone became value.ts (make_spec); ts.x, key and headers have nothing to read
            raise UsageError(f"{side} {s.path} is a plain file: it has no {'.'.join(spec.time_field[i])} to "
                             f"take event times from; give a value field with --time-field PATH")
    return specs


def read_inputs(spec: JoinSpec, specs: list[inputorder.InputSpec],
                times: list[Callable[[Record], int | None]] | None = None) -> Iterator[tuple[int, Record]]:
    """(input index, record) in the input order, ties to LEFT; for --table the table side is read
    first, so it wins ties (a table change at the same time as an event applies before it, as
    --as-of event-time's "at or before", and a table file without times is loaded before a
    stream file without times), and its records carry index 0, the events' 1."""
    if times is None:
        times = [record_time(spec.time_field[0]), record_time(spec.time_field[1])]
    if spec.kind == "table":
        return inputorder.merged([specs[1], specs[0]], [times[1], times[0]])
    return inputorder.merged(specs, times)


LateSink = Callable[[int, bytes], None]


def run(spec: JoinSpec, emit: Emit | None = None, emit_op: EmitOp | None = None,
        items: Iterator[tuple[int, Record]] | None = None,
        write_jsonl: Callable[[bytes], None] | None = None, block_bytes: int | None = None,
        late: LateSink | None = None) -> JoinStats:
    """Run the join; rows go to emit(key, left, right) (or emit_op(op, key, left, right) for --tables).

    `items` replaces reading the files (tests feed (input index, record) pairs in input order).
    `write_jsonl`, when given, takes the rows as JSON lines (a batch of rows per call; the bytes
    emit's rows make with orjson.dumps and a newline) instead of emit where a batch kernel
    computes the join (_kernel); other joins still go to emit. `block_bytes` sets how
    much of a plain file is read at a time (tests use small blocks). `late(side, line)`
    gets each late record as inputorder.late_line writes it (records fed through `items` count as
    log records).
    """
    keep_heap()
    right_index = 1
    remembered = (RememberedTime(record_time(spec.time_field[0])),
                  RememberedTime(record_time(spec.time_field[1])))
    logs = (True, True)
    if items is None:
        specs = check_inputs(spec)
        kernel = None if write_jsonl is None else _kernel(spec, specs)
        if kernel is not None:
            assert write_jsonl is not None
            return kernel(spec, write_jsonl, block_bytes, late)
        logs = (specs[0].is_log, specs[1].is_log)
        if spec.kind == "table":
            items, right_index = read_inputs(spec, specs), 0
        else:
            items = read_inputs(spec, specs, [remembered[0].remember, remembered[1].remember])
    sink = None if late is None else (lambda side, rec: late(side, inputorder.late_line(rec, logs[side])))
    stats = JoinStats()
    feeder = feeders.make(spec, stats, emit, emit_op, sink, remembered, right_index)
    with gc_frozen():
        feeder.feed(items)
        feeder.finish()
    return stats


Kernel = Callable[[JoinSpec, Callable[[bytes], None], int | None, "LateSink | None"], JoinStats]


def _kernel(spec: JoinSpec, specs: list[inputorder.InputSpec]) -> Kernel | None:
    """The batch kernel that computes this join's rows, when there is one for its inputs and paths:
    a stream-stream join of two plain files (every path under value), or any enrichment as of
    position -- each side a log of any number of partitions or a plain file (or stdin), joined
    on any path and timed by any time field the record path takes."""
    if spec.kind == "stream":
        under_value = all(parts[0] == "value" for parts in (*spec.on, *spec.time_field))
        return _run_stream_plain if under_value and not any(s.is_log for s in specs) else None
    if spec.kind == "table" and spec.as_of == "position":
        return _run_enrich
    return None


def _run_enrich(spec: JoinSpec, write_jsonl: Callable[[bytes], None], block_bytes: int | None,
                _late: LateSink | None = None) -> JoinStats:
    """--table --as-of position: stream_table.py's enrich (no record is late without a watermark)."""
    from streamctl.processing.joins.stream_table import enrich

    stats = JoinStats()
    with gc_frozen():
        n_left, n_right, size = enrich(spec.left, spec.right, spec.on, spec.time_field, spec.how == "inner",
                                       write_jsonl, (inputorder.classify(spec.left).is_log,
                                                     inputorder.classify(spec.right).is_log),
                                       block_bytes or inputorder.PIECE)
    stats.records = [n_left, n_right]
    stats.max_state = size
    return stats


def _run_stream_plain(spec: JoinSpec, write_jsonl: Callable[[bytes], None], block_bytes: int | None,
                      late: LateSink | None = None) -> JoinStats:
    """A stream-stream join of two plain files: each read as columns (joins/plain_inputs.py), merged
    in input order and joined a chunk at a time with numpy (interval_kernel.py's IntervalJoin),
    values that are already in orjson's form pasted into the rows as the file has them."""
    from streamctl.processing import decoder
    from streamctl.processing.joins.interval_kernel import CHUNK, IntervalJoin
    from streamctl.processing.joins.plain_inputs import file_blocks, merged_chunks

    assert spec.within is not None
    size = block_bytes or PLAIN_JOIN_BLOCK

    def reader(i: int) -> Callable[[], Generator[Any, None, None]]:
        return lambda: file_blocks((spec.left, spec.right)[i], spec.on[i], spec.time_field[i], size)

    # each file read in a process of its own while this one merges and joins (not for stdin: a
    # terminal on stdin would be read by a process Ctrl-C does not stop)
    ahead = decoder.can_fork() and "-" not in (spec.left, spec.right)
    streams = [decoder.ahead(reader(i), path, ahead) for i, path in enumerate((spec.left, spec.right))]
    stats = JoinStats()
    j = IntervalJoin(spec.within, spec.how, write_jsonl, spec.lateness, None if late is None else _payload_sink(late),
                     stats)
    try:
        with gc_frozen():
            for cols in merged_chunks(streams[0], streams[1], CHUNK):
                j.chunk(*cols)
            j.finish()
    finally:
        for s in streams:
            s.close()  # stops and reaps the reading processes now, whatever a traceback keeps alive
    return stats


# Bytes of a plain file parsed at a time by the join's readers: a block is one message to the
# joining process and one numpy step there (64 KiB blocks cost more in per-call overheads)
PLAIN_JOIN_BLOCK = 1 << 18


def _payload_sink(late: LateSink) -> Callable[[int, Any], None]:
    """late(side, line) for a plain file's payloads: the line itself when the payload is its bytes."""
    dumps = orjson.dumps

    def sink(side: int, payload: Any) -> None:
        late(side, (payload if payload.__class__ is bytes else dumps(payload)) + b"\n")

    return sink
