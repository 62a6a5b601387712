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
from collections.abc import Callable, Iterable

from streamctl.errors import DataError, UsageError
from streamctl.processing import columns as fieldcolumns
from streamctl.processing import eventfields, inputorder
from streamctl.processing.watermark import Watermark
from streamctl.processing.windows import NO_WATERMARK, Batch
from streamctl.processing.windows.config import (
    BAD_TIME_POLICIES,
    EMIT_MODES,
    LATE_POLICIES,
    WindowConfig,
    WindowStats,
    make_plan,
    time_range,
)
from streamctl.processing.windows.events import (
    EventColumns,
    KeyNames,
    RecordBlocks,
    make_prepare,
    subset,
    unpacked_times,
)
from streamctl.processing.windows.kinds import make_operator
from streamctl.timeparse import bad_time_reason, now_ms


class WindowRun:
    """One window computation: feed it records in input order, take rows out."""

    def __init__(self, cfg: WindowConfig, is_log: bool, late_sink: Callable[[dict], None] | None = None,
                 text_rows: bool = False) -> None:
        """`text_rows`: the rows go to JSON lines (rows_jsonl), so an operator may hand a closed window's
        rows as their text (output.RowsText) instead of row tuples."""
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
        try:
            self.op = make_operator(cfg.kind, cfg.size, cfg.hop, self.plan, cfg.emit == "update",
                                    cfg.late == "correct")
        except ValueError as e:
            raise UsageError(str(e)) from None
        self.op.text_rows = text_rows
        self.prepare = make_prepare(cfg, is_log, self.plan)
        self.columns = None if cfg.processing_time else EventColumns(cfg, is_log, self.plan)
        self.is_log = is_log
        self.key_names = KeyNames()
        self.watermark = Watermark(cfg.lateness)
        self.stats = WindowStats()
        self.seq = 0
        self.late_sink = late_sink
        # a follower resumed from a checkpoint: the earlier runs' counts (this_run leaves them out)
        self.earlier: tuple[WindowStats, dict[str, int]] | None = None
        self.bad_time_here: str | None = None  # the first record of this run without a usable time

    def feed(self, records: Iterable[dict], emit: Callable[[list], None], source: str = "input") -> None:
        """Process records; `emit(rows)` gets each non-empty batch of rows as they are ready.
        RecordBlocks go through feed_batches."""
        if isinstance(records, RecordBlocks):
            if self.columns is not None:
                # numpy (the column step's time parse, the open windows' cells) loaded once, here,
                # before the reading process is forked: not again in the child (~70 ms each)
                import streamctl.processing.timecolumns  # noqa: F401

                # A plain file's times travel as int64 bytes (the kernels take them as an array).
                # Sessions: the group keys numbered in the reading process (events.KeyIds) while
                # the folding process is the slower one, so the session index finds those events'
                # groups by id, with array work. Grid windows keep the texts: their cells are per
                # window, where most keys are new (a dict insert either way).
                cfg = self.cfg
                use_ids = cfg.kind == "session" and cfg.emit == "final" and cfg.late == "drop"
                records.hooks["transform"] = (self.columns if self.is_log else self.columns.packed_balanced
                                              if use_ids else self.columns.packed)
                # a piece the reading process hands over is read here: its keys are not numbered
                records.hooks["consumer transform"] = None if self.is_log else self.columns.packed
                # without a late sink, a batch whose columns were made needs no records (nor its bytes)
                records.hooks["records"] = self.late_sink is not None
            try:
                self.feed_batches(records.batches, emit, source)
            finally:
                close = getattr(records.batches, "close", None)
                if close is not None:
                    close()  # a read-ahead process is stopped and reaped now, not when collected
            return
        self.feed_records(records, emit, source)

    def feed_records(self, records: Iterable[dict], emit: Callable[[list], None], source: str = "input") -> None:
        """feed() one record at a time (--processing-time reads the clock per record; the reference
        the batches agree with): the operator's add() and close() per event."""
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
                ids = None
                if type(ks) is tuple:  # KeyIds's (space, ids, new texts)
                    ks, ids = self.key_names(*ks)
                ts, tarr = unpacked_times(ts)
                times = ts
                keep = None  # positions of the events with a usable time, when some have none
                if ks is None:
                    keep = [i for i, t in enumerate(ts) if t is not None]
                    if fail:
                        keep = list(range(ts.index(None)))
                    ts, ks, cols, counts = columns(subset(batch, keep)) if keep else ([], [], [], ())
                for i, n in counts:
                    plan.count_non_numeric(plan.specs[i].name, n)
                if ts:
                    maxt = wmark.max_time if wmark.max_time is not None else NO_WATERMARK
                    maxt, lates = self.op.fold(Batch(ts, ks, cols, self.seq, maxt, wmark.lateness,
                                                       None if ids is None else (self.key_names.space, ids), tarr), out)
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

    def this_run(self) -> tuple[WindowStats, dict[str, int]]:
        """The counts of this run alone, and its values that were not numbers by aggregation. A
        follower resumed from a checkpoint carries the earlier runs' totals there (stats and
        non_numeric), which it keeps; what it reports is what it read itself."""
        if self.earlier is None:
            return self.stats, self.plan.non_numeric
        st, (before, nn) = self.stats, self.earlier
        return (WindowStats(st.events - before.events, st.late - before.late, st.bad_time - before.bad_time,
                            self.bad_time_here),
                {k: n - nn.get(k, 0) for k, n in self.plan.non_numeric.items() if n > nn.get(k, 0)})

    def declined(self) -> tuple[int, int]:
        """(batches, events) the operator's batch kernel handed to the one-event path (see session.py)."""
        return self.op.declined, self.op.declined_events

    def _bad_time(self, rec: dict, source: str, fail: bool) -> None:
        st = self.stats
        st.bad_time += 1
        if st.bad_time_example is None or self.bad_time_here is None or fail:
            # a log's records carry their append time; a plain file's do not
            where = eventfields.bad_time_place(source, rec.get("partition"), rec.get("offset"),
                                               rec.get("ts") is not None, self.cfg.time_field)
            this = f"{where}: {self._bad_reason(rec)}"
            if self.bad_time_here is None:
                self.bad_time_here = this
            if fail:  # this record's (the example may be an earlier run's, from a follower's checkpoint)
                raise DataError(f"{this} (--on-bad-time skip counts and skips such records)")
            if st.bad_time_example is None:
                st.bad_time_example = this

    def _bad_reason(self, rec: dict) -> str:
        """Why rec's time is not usable (the time getters only say that it is not)."""
        if self.cfg.processing_time:
            return bad_time_reason(now_ms(), *time_range(self.cfg), epoch_ms=True)
        # a log's records carry their append time; a plain file's do not
        get, epoch_ms = eventfields.field_getter(self.cfg.time_field, rec.get("ts") is not None)
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
                "stats": {"events": st.events, "late": st.late, "bad_time": st.bad_time,
                          "bad_time_example": st.bad_time_example},
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
        self.stats = WindowStats(s["events"], s["late"], s["bad_time"], s.get("bad_time_example"))
        self.plan.non_numeric = dict(data["non_numeric"])
        self.earlier = (WindowStats(s["events"], s["late"], s["bad_time"]), dict(self.plan.non_numeric))
        self.op.load(data["state"])
