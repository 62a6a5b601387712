"""The window driver: input order, event time, watermark, the window operator, and rows out.

For each record in the one deterministic input order (streamctl.processing.inputorder):
its event time is read (`--time-field`, or the wall clock with
`--processing-time`), its group key (`--by`, default the record key) and the
aggregation inputs are pulled out, the operator folds it in against the
watermark *before* it (so an event can never make itself late), then the
watermark moves and closes windows. End of input flushes every open window.

Memory is the operator's open windows and groups; the input is streamed.
"""

from __future__ import annotations

import gc
import itertools
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain, groupby, repeat
from operator import itemgetter
from typing import Any

import orjson

from streamctl.errors import DataError, UsageError
from streamctl.processing import aggregations, inputorder
from streamctl.processing import columns as fieldcolumns
from streamctl.processing.watermark import Watermark
from streamctl.processing.windows import NO_WATERMARK, Batch, kinds
from streamctl.storage import fieldpaths
from streamctl.timeparse import bad_time_reason, event_time_ms, event_times, format_iso, now_ms, usable_range

LATE_POLICIES = ("drop", "correct")
EMIT_MODES = ("final", "update")
BAD_TIME_POLICIES = ("skip", "fail")


@dataclass
class WindowConfig:
    kind: str  # tumbling | hopping | sliding | session
    size: int  # ms; the GAP for sessions
    hop: int = 0  # hopping only
    by: list[str] = field(default_factory=list)  # default: the record key
    time_field: str = "ts"
    processing_time: bool = False
    on_bad_time: str = "skip"
    aggs: list[str] = field(default_factory=lambda: ["count"])
    lateness: int = 0
    late: str = "drop"
    emit: str = "final"

    def describe(self) -> dict:
        """What a checkpoint must match to be resumed (changing any of it changes the answers)."""
        return {"kind": self.kind, "size": self.size, "hop": self.hop, "by": self.by,
                "time_field": self.time_field, "processing_time": self.processing_time,
                "aggs": self.aggs, "lateness": self.lateness, "late": self.late, "emit": self.emit}


@dataclass
class WindowStats:
    events: int = 0
    late: int = 0
    bad_time: int = 0
    bad_time_example: str | None = None


def parse_hopping(text: str, parse_duration: Callable[[str], int]) -> tuple[int, int]:
    size, sep, hop = text.partition("/")
    if not sep:
        raise UsageError(f"--hopping {text!r}: write SIZE/HOP, e.g. 10m/1m")
    s, h = parse_duration(size), parse_duration(hop)
    if s <= 0 or h <= 0:
        raise UsageError(f"--hopping {text!r}: SIZE and HOP must be positive")
    if h > s:
        raise UsageError(f"--hopping {text!r}: HOP must not exceed SIZE (gaps would drop events)")
    return s, h


def make_plan(cfg: WindowConfig) -> aggregations.Plan:
    try:
        return aggregations.Plan([aggregations.parse_agg(a, fieldpaths.record_path) for a in cfg.aggs])
    except aggregations.AggSpecError as e:
        raise UsageError(str(e)) from None


def make_operator(cfg: WindowConfig, plan: aggregations.Plan):
    if cfg.size <= 0:
        raise UsageError("the window size must be positive")
    try:
        return kinds.make_operator(cfg.kind, cfg.size, cfg.hop, plan, cfg.emit == "update", cfg.late == "correct")
    except ValueError as e:
        raise UsageError(str(e)) from None


def _path_getter(parts: tuple[str, ...]) -> Callable[[dict], Any]:
    return aggregations.getter(parts)


def key_json_cached(cache: dict[str, bytes] | None = None) -> Callable[[Any], bytes]:
    """JSON text of a key value, memoized for strings (keys repeat; orjson.dumps costs ~1-2 us a call)."""
    dumps = orjson.dumps
    if cache is None:
        cache = {}

    def key_json(k: Any) -> bytes:
        if type(k) is str:
            j = cache.get(k)
            if j is None:
                if len(cache) >= 200_000:
                    cache.clear()  # bounded: memory must not grow with the number of distinct keys
                j = cache[k] = dumps(k)
            return j
        return b"null" if k is None else dumps(k)
    return key_json


def key_getter(by: list[str]) -> Callable[[dict], bytes]:
    """The group key as JSON text: one --by -> its value; several -> a list; none -> the record key."""
    key_json = key_json_cached()
    if not by:
        return lambda r: key_json(r.get("key"))
    getters = [_path_getter(fieldpaths.record_path(p)) for p in by]
    if len(getters) == 1:
        g = getters[0]
        return lambda r: key_json(g(r))
    dumps = orjson.dumps
    return lambda r: dumps([g(r) for g in getters])


def time_range(cfg: WindowConfig) -> tuple[int, int]:
    """The event times this run can use (timeparse.usable_range): outside it, a time is a bad time."""
    lo, hi = usable_range(cfg.kind, cfg.size, cfg.hop)
    if lo > hi:
        raise UsageError(f"--{cfg.kind} windows of {cfg.size} ms are too long: no event time has windows "
                         f"that fit in years 1..9999, where ISO-8601 can write their bounds")
    return lo, hi


def time_field_getter(cfg: WindowConfig, is_log: bool) -> tuple[Callable[[dict], Any], bool]:
    """The raw value of the event-time field, and whether it is epoch ms as it is (a log's append
    time) rather than a value event_time_ms reads. A plain file has no envelope ts, so there the
    default `ts` means the value's own `ts` field (`{"ts": "2026-11-21T10:00:00Z", ...}` lines work as is).
    """
    parts = fieldpaths.record_path(cfg.time_field)
    if parts == ("ts",):
        if is_log:
            return (lambda r: r.get("ts")), True
        parts = ("value", "ts")
    return _path_getter(parts), False


def time_getter(cfg: WindowConfig, is_log: bool) -> Callable[[dict], int | None]:
    """Event time in ms, or None when missing, unparseable or outside time_range(cfg)."""
    if cfg.processing_time:
        return lambda r: now_ms()
    lo, hi = time_range(cfg)
    get, epoch_ms = time_field_getter(cfg, is_log)
    if epoch_ms:
        def append_time(r: dict) -> int | None:
            t = get(r)
            return t if type(t) is int and lo <= t <= hi else None
        return append_time

    def event_time(r: dict) -> int | None:
        v = get(r)
        if type(v) is not int or not 100_000_000_000 <= v < 100_000_000_000_000:
            v = event_time_ms(v)  # (epoch ms, the common case, skips the general parse)
            if v is None:
                return None
        return v if lo <= v <= hi else None

    parts = fieldpaths.record_path(cfg.time_field)
    first, rest = ("value", ("ts",)) if parts == ("ts",) else (parts[0], parts[1:])

    def event_time_column(recs: list[dict]) -> list[int | None]:
        """event_time of each record (the input-order merge reads a block's times at once)."""
        # the field a level at a time (what `get` reads); a log's batch has its values already
        if first == "value" and type(recs) is inputorder.RecordBatch:
            col = recs.values
        else:
            col = list(map(dict.get, recs, repeat(first)))
        col = fieldpaths.column(col, rest)
        return [t if t is not None and lo <= t <= hi else None for t in event_times(col)]

    event_time.column = event_time_column  # type: ignore[attr-defined]
    return event_time


def make_prepare(cfg: WindowConfig, is_log: bool, plan: aggregations.Plan) -> Callable[[dict], tuple]:
    """record -> (event time ms, key JSON, aggregation inputs), or (None, None, None) when the record
    has no usable time: the per-record read (follow mode with --processing-time, and the reference
    the column read agrees with)."""
    event_time = time_getter(cfg, is_log)
    key = key_getter(cfg.by)
    extract = plan.extract

    def prepare(r: dict) -> tuple:
        t = event_time(r)
        if t is None:
            return None, None, None
        return t, key(r), extract(r)
    return prepare


_INT_NONE = {int, type(None)}
_NUMBERS = {int, float, type(None)}
_FAST_EPOCH_MS = (100_000_000_000, 100_000_000_000_000 - 1)  # epoch ms the general parse would read as ms


def _numeric_column(col: list) -> tuple[list, int]:
    """A numeric aggregation's column with the values that are not numbers (nor null) replaced by None,
    and how many there were: Plan.extract's per-value check, for a whole column at once."""
    types = {*map(type, col)}
    if types <= _INT_NONE:
        return col, 0
    if types <= _NUMBERS:
        try:
            # a NaN or an infinity makes the sum non-finite (falsy values cannot, so filter(None) may drop them)
            if math.isfinite(sum(filter(None, col))):
                return col, 0
        except OverflowError:
            pass
    inf = (math.inf, -math.inf)
    clean = [x if x is None or type(x) is int or (type(x) is float and x == x and x not in inf) else None
             for x in col]
    return clean, clean.count(None) - col.count(None)


def window_fields(cfg: WindowConfig, is_log: bool, plan: aggregations.Plan) -> list[tuple[str, ...]] | None:
    """The record fields a run reads (time, group key, aggregation inputs), when a log can give them
    as columns (streamctl.processing.columns); None when it cannot (then whole records are read)."""
    if cfg.processing_time or not is_log:
        return None
    fields = [fieldpaths.record_path(cfg.time_field)]
    fields += [fieldpaths.record_path(p) for p in cfg.by] if cfg.by else [("key",)]
    fields += [s.path for s in plan.specs if s.path is not None]
    return fields if fieldcolumns.readable(fields) else None


def column(recs: Any, parts: tuple[str, ...]) -> list:
    """The values of a record path over a list of records, as aggregations.getter reads each one."""
    if isinstance(recs, fieldcolumns.FieldBatch):
        assert recs.cols is not None
        return recs.cols[parts]
    batch = type(recs) is inputorder.RecordBatch  # its keys and values are columns already
    if parts == ("key",) and batch:
        return recs.keys
    if parts[0] == "value" and batch:
        col = recs.values
    else:
        col = list(map(dict.get, recs, repeat(parts[0])))
    return fieldpaths.column(col, parts[1:])


class EventColumns:
    """A batch of records (or a log piece read as columns) -> (times, keys, aggregation columns, counts).

    Times are ms (or None where a record has no usable time: missing, unparseable, or outside
    time_range); keys are the group keys' JSON texts; one column per aggregation (None for a bare
    count), numeric ones with values that are not numbers set to None; counts = [(aggregation
    index, values that were not numbers)], for the plan's counter (the caller adds them: this may
    run in the read-ahead process, decoder.py). The same reads as make_prepare, a column at a time.
    """

    def __init__(self, cfg: WindowConfig, is_log: bool, plan: aggregations.Plan) -> None:
        parts = fieldpaths.record_path(cfg.time_field)
        if parts == ("ts",) and not is_log:
            parts = ("value", "ts")  # a plain file has no append time: its own ts field
        self.time_path = parts
        self.append_time = parts == ("ts",)
        self.lo, self.hi = time_range(cfg)
        self.key_paths = [fieldpaths.record_path(p) for p in cfg.by] if cfg.by else [("key",)]
        self.specs = plan.specs
        self.numeric = plan.numeric
        self.key_cache: dict[str, bytes] = {}
        self.key_json = key_json_cached(self.key_cache)

    def __call__(self, recs: Any) -> tuple[list, Any, Any, Any]:
        """(times, keys, columns, counts); (times, None, None, ()) when some time is not usable (the
        caller reads the records that have one again, so only their values are counted)."""
        ts = self.times(column(recs, self.time_path))
        if None in ts:
            return ts, None, None, ()
        ks = self.keys(recs)
        cols: list[list | None] = []
        counts = []
        for i, (spec, numeric) in enumerate(zip(self.specs, self.numeric, strict=True)):
            if spec.path is None:
                cols.append(None)
                continue
            col = column(recs, spec.path)
            if numeric:
                col, n = _numeric_column(col)
                if n:
                    counts.append((i, n))
            cols.append(col)
        return ts, ks, cols, counts

    def times(self, x: list) -> list:
        lo, hi = self.lo, self.hi
        if {*map(type, x)} == _INT_TYPE:
            a, b = min(x), max(x)
            if a >= lo and b <= hi and (self.append_time or (a >= _FAST_EPOCH_MS[0] and b <= _FAST_EPOCH_MS[1])):
                return x  # all epoch ms, the common case: no parse
        if self.append_time:
            return [t if type(t) is int and lo <= t <= hi else None for t in x]
        from streamctl.processing.timecolumns import iso_column_ms  # numpy: imported when used

        return iso_column_ms(x, lo, hi)

    def keys(self, recs: Any) -> list[bytes]:
        if len(self.key_paths) > 1:
            return [orjson.dumps(list(t)) for t in zip(*(column(recs, p) for p in self.key_paths), strict=True)]
        kv = column(recs, self.key_paths[0])
        # The keys' JSON texts from one orjson call for the column, cut at its commas: each element
        # is written as dumps() writes it alone, and when no key holds a comma there is one piece
        # per key (the cut is kept only then).
        try:
            ks = orjson.dumps(kv)[1:-1].split(b",")
        except TypeError:
            ks = []
        if len(ks) == len(kv) and kv:
            return ks
        return list(map(self.key_json, kv))


_INT_TYPE = {int}


def _subset(recs: Any, keep: list[int]) -> Any:
    """The records at positions `keep`, in the same form (a FieldBatch's columns, a RecordBatch's)."""
    if isinstance(recs, fieldcolumns.FieldBatch):
        assert recs.cols is not None
        return fieldcolumns.FieldBatch(None, {p: [c[i] for i in keep] for p, c in recs.cols.items()}, len(keep))
    sub = [recs[i] for i in keep]
    if type(recs) is inputorder.RecordBatch:
        batch = inputorder.RecordBatch(sub)
        batch.keys = [recs.keys[i] for i in keep]
        batch.values = [recs.values[i] for i in keep]
        return batch
    return sub


class RecordBlocks:
    """Records that come in lists (a log read a block at a time). Iterating gives them one by one;
    WindowRun.feed takes the lists as they are. `hooks` (see decoder.log_batches) lets feed hand
    the reading process the function that makes a batch's columns."""

    def __init__(self, batches: Iterable[inputorder.Block], hooks: dict | None = None) -> None:
        self.batches = batches
        self.hooks = hooks if hooks is not None else {}

    def __iter__(self) -> Iterator[dict]:
        return itertools.chain.from_iterable(self.batches)


class WindowRun:
    """One window computation: feed it records in input order, take rows out."""

    def __init__(self, cfg: WindowConfig, is_log: bool, late_sink: Callable[[dict], None] | None = None) -> None:
        if cfg.on_bad_time not in BAD_TIME_POLICIES:
            raise UsageError(f"--on-bad-time must be skip or fail, not {cfg.on_bad_time!r}")
        if cfg.late not in LATE_POLICIES:
            raise UsageError(f"--late must be drop or correct, not {cfg.late!r}")
        if cfg.emit not in EMIT_MODES:
            raise UsageError(f"--emit must be final or update, not {cfg.emit!r}")
        if cfg.lateness < 0:
            raise UsageError("--lateness must not be negative")
        self.cfg = cfg
        self.plan = make_plan(cfg)
        self.op = make_operator(cfg, self.plan)
        self.prepare = make_prepare(cfg, is_log, self.plan)
        self.columns = None if cfg.processing_time else EventColumns(cfg, is_log, self.plan)
        self.watermark = Watermark(cfg.lateness)
        self.stats = WindowStats()
        self.seq = 0
        self.late_sink = late_sink

    def feed(self, records: Iterable[dict], emit: Callable[[list], None],
             source: str = "input", progress: Callable[[dict], None] | None = None) -> None:
        """Process records; `emit(rows)` gets each non-empty batch of rows as they are ready.

        `progress(rec)` is called after each record is fully processed (follow
        mode tracks input offsets with it). RecordBlocks go through feed_batches.
        """
        if isinstance(records, RecordBlocks) and progress is None:
            if self.columns is not None:
                # numpy (the column step's time parse, the open windows' cells) loaded once, here,
                # before the reading process is forked: not again in the child (~70 ms each)
                import streamctl.processing.timecolumns  # noqa: F401

                records.hooks["transform"] = self.columns
                # without a late sink, a batch whose columns were made needs no records (nor its bytes)
                records.hooks["records"] = self.late_sink is not None
            try:
                self.feed_batches(records.batches, emit, source)
            finally:
                close = getattr(records.batches, "close", None)
                if close is not None:
                    close()  # a read-ahead process is stopped and reaped now, not when collected
            return
        self.feed_records(records, emit, source, progress)

    def feed_records(self, records: Iterable[dict], emit: Callable[[list], None],
                     source: str = "input", progress: Callable[[dict], None] | None = None) -> None:
        """feed() one record at a time (--processing-time reads the clock per record; follow mode
        reports each record's progress): the operator's add() and close() per event."""
        op, stats, clock = self.op, self.stats, self.watermark
        add, close, prepare, observe = op.add, op.close, self.prepare, clock.observe
        late_sink = self.late_sink
        fail = self.cfg.on_bad_time == "fail"
        seq = self.seq
        out: list = []
        try:
            for rec in records:
                t, key, vals = prepare(rec)
                if t is None:
                    self._bad_time(rec, source, fail)
                    if progress is not None:
                        progress(rec)
                    continue
                if add(key, t, seq, vals, clock.value, out):
                    stats.late += 1
                    if late_sink is not None:
                        late_sink(rec)
                seq += 1
                if observe(t):
                    close(clock.value, out)
                if out:
                    emit(out)
                    out = []
                if progress is not None:
                    progress(rec)
        finally:
            stats.events += seq - self.seq
            self.seq = seq

    def feed_batches(self, batches: Iterable[inputorder.Block], emit: Callable[[list], None],
                     source: str = "input", done: Callable[[inputorder.Block], None] | None = None) -> None:
        """feed() for records that come in lists, with the same rows, order, counts and state as
        feed_records: each list is read as columns (EventColumns), its events without a usable
        time are counted and left out (with --on-bad-time fail, the events before the first one
        are folded, then it fails), and the operator folds the rest as one Batch. Rows are
        emitted after each list; `done(recs)` is called after each list is processed."""
        if self.columns is None:  # --processing-time reads the clock per record
            for recs in batches:
                self.feed_records(recs, emit, source)
                if done is not None:
                    done(recs)
            return
        stats, wmark, plan, columns = self.stats, self.watermark, self.plan, self.columns
        fail = self.cfg.on_bad_time == "fail"
        out: list = []
        gc_was_enabled = gc.isenabled()
        # Window state is many small containers and no cycles: the cyclic GC only rescans them.
        gc.disable()
        try:
            for batch in batches:
                if not batch:
                    continue
                pre = batch.pre if isinstance(batch, fieldcolumns.FieldBatch) else None
                ts, ks, cols, counts = pre or columns(batch)
                times = ts
                keep = None  # positions of the events with a usable time, when some have none
                if ks is None:
                    keep = [i for i, t in enumerate(ts) if t is not None]
                    if fail:
                        keep = list(range(ts.index(None)))
                    ts, ks, cols, counts = columns(_subset(batch, keep)) if keep else ([], [], [], ())
                for i, n in counts:
                    plan.count_non_numeric(plan.specs[i].name, n)
                if ts:
                    maxt = wmark.max_time if wmark.max_time is not None else NO_WATERMARK
                    maxt, lates = self.op.fold(Batch(ts, ks, cols, self.seq, maxt, wmark.lateness), out)
                    self.seq += len(ts)
                    stats.events += len(ts)
                    if maxt != NO_WATERMARK:
                        wmark.observe(maxt)
                    if lates:
                        stats.late += len(lates)
                        if self.late_sink is not None:
                            for i in lates:
                                self.late_sink(batch[keep[i] if keep is not None else i])
                if out:
                    emit(out)
                    out = []
                if keep is not None:
                    for i, t in enumerate(times):
                        if t is None:
                            self._bad_time(batch[i], source, fail)
                if done is not None:
                    done(batch)
        finally:
            if gc_was_enabled:
                gc.enable()

    def declined(self) -> tuple[int, int]:
        """(batches, events) the operator's batch kernel handed to the one-event path (see session.py)."""
        return getattr(self.op, "declined", 0), getattr(self.op, "declined_events", 0)

    def _bad_time(self, rec: dict, source: str, fail: bool) -> None:
        st = self.stats
        st.bad_time += 1
        if st.bad_time_example is None:
            where = f"{source}: partition {rec.get('partition')} offset {rec.get('offset')}"
            if rec.get("ts") is None:
                where = f"{source}: record {rec.get('offset')}"
            st.bad_time_example = f"{where}: no usable time in {self.cfg.time_field!r}: {self._bad_reason(rec)}"
        if fail:
            raise DataError(f"{st.bad_time_example} (--on-bad-time skip counts and skips such records)")

    def _bad_reason(self, rec: dict) -> str:
        """Why rec's time is not usable (the time getters only say that it is not)."""
        if self.cfg.processing_time:
            return bad_time_reason(now_ms(), *time_range(self.cfg), epoch_ms=True)
        # a log's records carry their append time; a plain file's do not
        get, epoch_ms = time_field_getter(self.cfg, rec.get("ts") is not None)
        return bad_time_reason(get(rec), *time_range(self.cfg), epoch_ms=epoch_ms)

    def tick(self, emit: Callable[[list], None]) -> None:
        """With --processing-time, the clock moves the watermark even when no record arrives
        (follow mode calls this on every wake-up, so windows close on time)."""
        if not self.cfg.processing_time:
            return
        if self.watermark.observe(now_ms()):
            out: list = []
            self.op.close(self.watermark.value, out)
            if out:
                emit(out)

    def finish(self, emit: Callable[[list], None]) -> None:
        out: list = []
        self.op.flush(out)
        if out:
            emit(out)

    # -- follow-mode checkpoints -----------------------------------------------

    def dump(self) -> dict:
        st = self.stats
        return {"config": self.cfg.describe(), "watermark": self.watermark.dump(), "seq": self.seq,
                "stats": {"events": st.events, "late": st.late, "bad_time": st.bad_time},
                "non_numeric": self.plan.non_numeric, "state": self.op.dump()}

    def load(self, data: dict) -> None:
        if "config" not in data:
            raise KeyError("config")
        if data["config"] != self.cfg.describe():
            raise UsageError("the checkpoint was made with different window options; use another --group "
                             "or delete the checkpoint file to start over")
        self.watermark = Watermark.load(data["watermark"])
        self.seq = data["seq"]
        s = data["stats"]
        self.stats = WindowStats(s["events"], s["late"], s["bad_time"])
        self.plan.non_numeric = dict(data["non_numeric"])
        self.op.load(data["state"])


def row_dict(row: tuple) -> dict:
    """An operator row -> the output object `{"window": {...}, "key": ..., aggregates, ["revision"]}`,
    or for a delete row (values None: a row written before is withdrawn) `{"window", "key", "op": "delete"}`."""
    start, end, key, values, revision = row
    out = {"window": {"start": format_iso(start), "end": format_iso(end)}, "key": orjson.loads(key)}
    if values is None:
        out["op"] = "delete"
        return out
    out.update(values)
    if revision is not None:
        out["revision"] = revision
    return out


_iso_cache: dict[int, str] = {}


def _iso(ms: int) -> str:
    s = _iso_cache.get(ms)
    if s is None:
        if len(_iso_cache) > 4096:
            _iso_cache.clear()
        s = _iso_cache[ms] = format_iso(ms)
    return s


def row_json(row: tuple) -> bytes:
    """The JSON line of a row (row_dict's object), with the key's JSON text spliced in as is."""
    start, end, key, values, revision = row
    out = {"window": {"start": _iso(start), "end": _iso(end)}, "key": orjson.Fragment(key)}
    if values is None:
        out["op"] = "delete"
        return orjson.dumps(out) + b"\n"
    out.update(values)
    if revision is not None:
        out["revision"] = revision
    return orjson.dumps(out) + b"\n"


def rows_jsonl(rows: list[tuple]) -> bytes:
    """row_json() of each row, joined: the same bytes, made a window at a time.

    Rows of one window (consecutive, same start and end, no revision) share the
    `{"window":...,"key":` prefix, and their aggregates are encoded in one call
    as a list of objects, cut apart at `},{` (kept only when that gives one piece
    per row: a string holding `},{` would make more). A row is then the prefix,
    the key's JSON text, `,`, its piece and `}`. Windows with a revised or a
    delete row (values None) go through row_json. Raises where row_json would (a
    value orjson cannot write); the caller then writes row by row, so the rows
    before it still come out.
    """
    dumps = orjson.dumps
    parts: list[bytes] = []
    for (start, end), group in groupby(rows, _row_window):
        grp = list(group)
        values = list(map(_row_values, grp))
        if {*map(_row_revision, grp)} == _NONE and all(values):
            pieces = dumps(values)[2:-2].split(b"},{")
            if len(pieces) == len(grp):
                prefix = b'{"window":{"start":' + dumps(_iso(start)) + b',"end":' + dumps(_iso(end)) + b'},"key":'
                parts += chain.from_iterable(zip(repeat(prefix), map(_row_key, grp), repeat(b","), pieces,
                                                 repeat(b"}\n")))
                continue
        parts += map(row_json, grp)
    return b"".join(parts)


_row_window = itemgetter(0, 1)
_row_key, _row_values, _row_revision = itemgetter(2), itemgetter(3), itemgetter(4)
_NONE = {None}


def late_line(rec: dict, is_log: bool) -> bytes:
    """A late event as written to --late-out: the record (log) or the value line (plain file)."""
    return orjson.dumps(rec if is_log else rec.get("value")) + b"\n"


def records_of(path: str, cfg: WindowConfig | None = None) -> tuple[bool, Iterable[dict]]:
    """The input's records; a log's come in blocks, as columns of the fields `cfg` reads where it can."""
    from operator import itemgetter

    from streamctl.processing import inputorder

    spec = inputorder.classify(path)
    if spec.is_log:
        # a block of lines at a time (feed takes the lists as they are); several partitions are
        # merged by the event time the window reads
        time_of = time_getter(cfg, True) if cfg is not None and not cfg.processing_time else None
        fields = window_fields(cfg, True, make_plan(cfg)) if cfg is not None else None
        if fields is not None:
            from streamctl.processing import decoder

            hooks: dict = {}
            return True, RecordBlocks(decoder.log_batches(path, fields, hooks, time_of), hooks)
        return True, RecordBlocks(inputorder.log_batches(path, time_of=time_of))
    fields = plain_fields(cfg, make_plan(cfg)) if cfg is not None else None
    if fields is not None:
        from streamctl.processing import decoder

        hooks = {}
        return False, RecordBlocks(decoder.plain_batches(path, fields, hooks), hooks)
    # map/itemgetter rather than a generator expression: one less Python frame per record
    return False, map(itemgetter(1), inputorder.merged([spec], lambda r: None))


def plain_fields(cfg: WindowConfig, plan: aggregations.Plan) -> list[tuple[str, ...]] | None:
    """The fields a run reads from a plain file's lines, when they can be read as columns
    (columns.PlainFieldReader); None when whole records are read."""
    if cfg.processing_time:
        return None
    parts = fieldpaths.record_path(cfg.time_field)
    fields = [("value", "ts") if parts == ("ts",) else parts]
    if not cfg.by:
        return None  # the record key: a plain file's is null, read in full (rare: nothing to group by)
    fields += [fieldpaths.record_path(p) for p in cfg.by]
    fields += [s.path for s in plan.specs if s.path is not None]
    return fields if fieldcolumns.plain_readable(fields) else None


def input_bytes(path: str) -> int:
    """Bytes of input, for the engine choice (stdin counts as small: it cannot be handed to Spark)."""
    import os

    from streamctl.storage import log as logmod

    if path == "-" or is_uri(path):
        return 0
    if logmod.is_log(path):
        lg = logmod.open_log(path)
        total = 0
        for p in range(lg.partitions):
            for seg in lg.segments(p):
                try:
                    total += os.path.getsize(seg.path)
                except OSError:
                    pass
        return total
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def spark_blocker(cfg: WindowConfig, path: str, late_out: str | None) -> str | None:
    """Why the Spark engine cannot run this window (None when it can)."""
    if path == "-":
        return "stdin cannot be handed to a Spark job"
    if is_uri(path):
        return None
    if cfg.processing_time:
        return "--processing-time depends on when the local process reads each record"
    if cfg.late == "correct":
        return "--late correct revisions follow the local stream"
    if cfg.emit == "update":
        return "--emit update rows follow the local stream"
    if late_out is not None:
        return "--late-out writes a local file"
    return None


# -- follow mode ------------------------------------------------------------------

CHECKPOINT_FORMAT = 1
_partition_offset = itemgetter("partition", "offset")
FOLLOW_BATCH = 50_000  # records per round between checkpoints on a large backlog
CHECKPOINT_INTERVAL = 1.0  # seconds; at most this much output is repeated after a kill -9


def checkpoint_path(log, group: str) -> str:
    from streamctl.groups import files

    return files.path(log, group, "window.json")


def _resume_positions(lg, group: str, positions: dict[int, int], ckpt: str | None,
                      notice: Callable[[str], None] | None) -> dict[int, int]:
    """The offsets a group resumes from, through consume's checks (consumer.plan) on them.

    consumer.plan checks the group file; it mirrors the checkpoint's offsets (follow's save
    writes both), so a mirror that a crash between the two writes left behind is brought
    up to the checkpoint first.
    """
    from streamctl.clients import consumer
    from streamctl.errors import StorageError
    from streamctl.groups import offsets

    if ckpt is not None and positions:
        committed = offsets.load(lg, group)
        if any(committed.get(p) != o for p, o in positions.items()):
            offsets.commit(lg, group, dict(positions))
    try:
        pl = consumer.plan(lg, list(range(lg.partitions)), None, group, follow=True)
    except StorageError as e:
        if ckpt is None:
            raise
        raise StorageError(f"{e}; `window --follow --group {group}` resumes from the offsets in {ckpt}: "
                           f"move that checkpoint away too (its window state is of the records before)") from None
    for note in pl.notices:
        if notice is not None:
            notice(note)
    return {p: pl.positions[p].start if p in pl.positions else o for p, o in positions.items()}


def _skip_deleted(lg, positions: dict[int, int], notice: Callable[[str], None] | None) -> None:
    """Partitions whose next offset retention deleted while this follower ran (whole segments below
    it are gone): said, and moved to the first segment that is left, as a restart would."""
    for p, off in positions.items():
        segs = lg.segments(p)
        if segs and off < segs[0].base:
            if notice is not None:
                notice(f"{lg.path}: partition {p}: offset {off} is no longer in the log (retention removed it "
                       f"before it was read); resuming at {segs[0].base}, the next existing record")
            positions[p] = segs[0].base


def follow(path: str, group: str | None, cfg: WindowConfig, emit: Callable[[list], None],
           flush_out: Callable[[], None], idle_timeout: float | None,
           late_sink: Callable[[dict], None] | None = None,
           flush_late: Callable[[], None] | None = None,
           notice: Callable[[str], None] | None = None) -> WindowRun:
    """Run a window on a log forever (until a stop signal or idle timeout), emitting as the watermark moves.

    With a group, input offsets and window state are written together, atomically,
    to LOG/groups/.G.window.json after the rows they produced were flushed: a
    kill -9 at any point restarts from a consistent (offsets, state) pair, so no
    event is lost or counted twice; rows emitted after the last checkpoint are
    written again (identically) after a restart.

    The group resumes as `consume --group` does: an offset that retention or
    compaction deleted resumes at the next record, said through `notice`; an
    offset past the end of its partition is refused (StorageError).
    """
    import os
    import time

    from streamctl import stopflag
    from streamctl.errors import StorageError
    from streamctl.groups import files, offsets
    from streamctl.live.wait import Waiter
    from streamctl.processing import inputorder, mergeorder
    from streamctl.storage import fsutil
    from streamctl.storage import log as logmod

    lg = logmod.open_log(path)
    run = WindowRun(cfg, True, late_sink)
    positions: dict[int, int] = {}
    # each partition's merge key (mergeorder.Lane.high) after its last record read, so a round
    # merges its partitions in the input order where the round before stopped
    highs: dict[int, int] = {}
    time_of = None if cfg.processing_time else time_getter(cfg, True)
    ckpt = None
    lock_fd = None
    if group is not None:
        ckpt = checkpoint_path(lg, group)
        lock_fd = files.open_lock(lg, group, "window.lock")  # in groups/, never through a symlink
        if not fsutil.flock(lock_fd, True, 0):
            os.close(lock_fd)
            raise StorageError(f"another `window --follow --group {group}` is running on {path}")
        try:
            from streamctl.processing.checkpoint import load_checkpoint

            data = load_checkpoint(ckpt)  # None when there is none; every field checked (a StorageError names it)
            if data is not None:
                if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT or "run" not in data:
                    raise StorageError(f"{ckpt}: not a window checkpoint (overwritten by hand or by a group reset?); "
                                       "move it away to start over")
                try:
                    run.load(data["run"])
                    positions = {int(p): int(o) for p, o in data["offsets"].items()}
                    highs = {int(p): int(h) for p, h in data.get("merge_keys", {}).items()}
                except (KeyError, TypeError, ValueError, AttributeError) as e:
                    raise StorageError(f"{ckpt}: damaged window checkpoint ({type(e).__name__}: {e}); "
                                       "move it away to start over") from None
            else:
                positions = dict(offsets.load(lg, group))
            positions = _resume_positions(lg, group, positions, ckpt if data is not None else None, notice)
        except BaseException:
            os.close(lock_fd)  # a refused checkpoint or resume position: the group is free again
            raise

    def save() -> None:
        if ckpt is None:
            return
        if flush_late is not None:
            flush_late()
        body = {"format": CHECKPOINT_FORMAT, "group": group, "offsets": {str(p): o for p, o in sorted(positions.items())},
                "merge_keys": {str(p): h for p, h in sorted(highs.items())}, "run": run.dump()}
        files.write(lg, ckpt, orjson.dumps(body))
        if positions:
            # the group file is for `stat` (lag); the checkpoint above is what a restart trusts
            assert group is not None  # a checkpoint is kept only with --group
            offsets.commit(lg, group, dict(positions))

    def done(batch: inputorder.Block) -> None:
        assert isinstance(batch, mergeorder.MergedBatch)  # log_batches merges when given highs
        # the last record of each partition in the batch (later pairs overwrite earlier ones)
        for p, off in dict(map(_partition_offset, batch)).items():
            positions[p] = off + 1
        highs.update(batch.highs)

    def round_of(batches: Iterator[inputorder.Block]) -> Iterator[inputorder.Block]:
        """About FOLLOW_BATCH records, a batch at a time, until a stop signal."""
        n = 0
        for batch in batches:
            if stopflag.is_set():
                return
            yield batch
            n += len(batch)
            if n >= FOLLOW_BATCH:
                return

    waiter = Waiter(path)
    last_new = time.monotonic()
    last_save = 0.0
    dirty = False
    try:
        while not stopflag.is_set():
            before = run.seq + run.stats.bad_time
            _skip_deleted(lg, positions, notice)
            batches = inputorder.log_batches(path, starts=dict(positions), time_of=time_of, highs=highs)
            run.feed_batches(round_of(batches), emit, source=path, done=done)
            batches.close()
            got = run.seq + run.stats.bad_time - before
            run.tick(emit)
            now = time.monotonic()
            if got:
                dirty = True
                last_new = now
            if dirty and (now - last_save >= CHECKPOINT_INTERVAL or got >= FOLLOW_BATCH):
                flush_out()
                save()
                last_save, dirty = now, False
            if got >= FOLLOW_BATCH:
                continue
            if idle_timeout is not None and now - last_new >= idle_timeout:
                break
            waiter.wait(0.2)
        flush_out()
        save()
        if not stopflag.is_set():
            # idle timeout: like the end of a file, flush what is open; the checkpoint
            # (saved just before) keeps those windows open, so a later run completes them
            run.finish(emit)
    finally:
        waiter.close()
        if lock_fd is not None:
            os.close(lock_fd)
    return run


# -- the Spark engine -------------------------------------------------------------

def is_uri(path: str) -> bool:
    """hdfs://, s3a://, file://...: only a Spark job reads those."""
    return "://" in path


def spark_job(path: str, cfg: WindowConfig, master: str | None, stats_line: bool = False,
              snapshot: bool = True) -> str:
    """The standalone PySpark script for this window (see streamctl/spark/window_job.py).

    `snapshot` fixes each partition's end at its current end (a run now, like the
    local engine); an emitted job (run later by cron or spark-submit) reads to the
    end as it is then. A URI input is a log unless it names a .jsonl file.
    """
    from streamctl.spark import jobgen
    from streamctl.storage import log as logmod
    from streamctl.storage import reader

    plan = make_plan(cfg)
    if is_uri(path):
        is_log = not path.rstrip("/").endswith(".jsonl")
    else:
        is_log = path != "-" and logmod.is_log(path)
    params: dict[str, Any] = {
        "input": path, "is_log": is_log, "kind": cfg.kind, "size": cfg.size, "hop": cfg.hop,
        "lateness": cfg.lateness, "time_field": cfg.time_field,
        "by": [list(fieldpaths.record_path(p)) for p in cfg.by],
        "aggs": [[s.name, s.func, list(s.path) if s.path else None] for s in plan.specs],
        "stats_line": stats_line,
    }
    tparts = fieldpaths.record_path(cfg.time_field)
    params["time_path"] = None if tparts == ("ts",) and is_log else (
        ["value", "ts"] if tparts == ("ts",) else list(tparts))
    params["time_range"] = list(time_range(cfg))  # the job's time getter applies the same rule
    if is_log and snapshot and not is_uri(path):
        lg = logmod.open_log(path)
        # the end of the input is the end as of now, like the local engine's snapshot
        params["end_offsets"] = {str(p): reader.partition_info(lg, p).next_offset for p in range(lg.partitions)}
    if master:
        params["master"] = master
    what = {"tumbling": f"tumbling windows of {cfg.size} ms", "hopping": f"hopping windows {cfg.size}/{cfg.hop} ms",
            "sliding": f"sliding windows of {cfg.size} ms", "session": f"session windows, gap {cfg.size} ms"}[cfg.kind]
    return jobgen.render_job(
        f"streamctl window: {what} over event time, with the local engine's watermark and late rules.",
        "  spark-submit job.py            (on a cluster: spark-submit --master URL job.py)\n"
        "  python job.py                  (local[*] unless PARAMS has a master)",
        params, "window_job")
