"""`join --follow`: a join over two logs forever, its state checkpointed with both inputs' offsets.

A follower runs the batch run's feeders (joins/feeders.py) on small batches: each round
merges the records that are there, in the input order (processing/mergeorder.py; the
lanes are every partition of both logs, the table's first with --table), and feeds them
to the operator. A partition with nothing new does not hold the others back: a round
takes what is there, and each lane's merge key carries on to the next round.

With `--group G` the checkpoint is one SQLite file, LEFT/groups/.G.join.db, written in one
transaction: the tables (joins/store.py: only the rows that changed since the last
checkpoint), both inputs' offsets and merge keys, the operator's small state (the
stream-stream buffers, as-of events still waiting, the watermark, the input position)
and the counts of all the group's runs (a run reports its own). It is written after the rows the records produced were flushed (and
fsynced when stdout is a file), so after a kill -9 a rerun starts from a consistent
(offsets, state) pair: no row lost, no event joined twice, and the rows written after
the last checkpoint written again, identically. The group's offset file in each log
mirrors the offsets for `stat` (lag on both inputs); a restart trusts the checkpoint.

A stop signal or --idle-timeout ends the run after a checkpoint, without what only the
end of input writes: an unmatched event that could still match, or an as-of event whose
time the watermark has not passed, stays pending in the checkpoint.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from streamctl import stopflag
from streamctl.errors import Interrupted, StorageError, UsageError
from streamctl.processing import exactjson, following, inputorder
from streamctl.processing.eventfields import record_time
from streamctl.processing.joins import Emit, EmitOp, JoinSpec, JoinStats, feeders, follow_inputs, gc_frozen
from streamctl.processing.joins.keys import RememberedTime, norm_key
from streamctl.processing.joins.store import DiskTable, open_db
from streamctl.processing.joins.table_inputs import Block, Side
from streamctl.processing.mergeorder import merge_lanes
from streamctl.storage import log as logmod

CHECKPOINT_FORMAT = 1
# Records the enrichment kernel takes at a time, their events' keys read in one sorted prefetch (1M
# events over a 1M-key table, cold: 16k at a time 21-23 s of CPU and 84 MB, 32k 20.7 s and 99 MB,
# 48k 20.2-20.5 s and 118 MB)
RUN = 32_768
Record = dict[str, Any]
HINT = "move it away to start over"
Notice = Callable[[str], None]


def checkpoint_path(left: logmod.Log, group: str) -> str:
    from streamctl.groups import files

    return files.path(left, group, "join.db")


def options(spec: JoinSpec) -> dict[str, Any]:
    """What a checkpoint is a checkpoint of: a run with other options refuses it."""
    return {"kind": spec.kind, "left": os.path.realpath(spec.left), "right": os.path.realpath(spec.right),
            "on": [list(p) for p in spec.on], "time_field": [list(p) for p in spec.time_field],
            "within": spec.within, "how": spec.how, "as_of": spec.as_of, "retention": spec.retention,
            "lateness": spec.lateness}


@dataclass
class Inputs:
    """Where each input has been read to: offsets and merge keys (mergeorder.Lane.high) per partition."""

    logs: tuple[logmod.Log, logmod.Log]
    positions: tuple[dict[int, int], dict[int, int]] = field(default_factory=lambda: ({}, {}))
    highs: tuple[dict[int, int], dict[int, int]] = field(default_factory=lambda: ({}, {}))

    def mirrors(self) -> dict[str, tuple[logmod.Log, dict[int, int]]]:
        """The offsets each log's group file shows (a self-join's two sides: the one behind)."""
        out: dict[str, tuple[logmod.Log, dict[int, int]]] = {}
        for side in (0, 1):
            key = os.path.realpath(self.logs[side].path)
            if key not in out:
                out[key] = (self.logs[side], dict(self.positions[side]))
            else:
                mine = out[key][1]
                for p, o in self.positions[side].items():
                    mine[p] = min(mine.get(p, o), o)
        return out


def _tables(spec: JoinSpec, db: sqlite3.Connection, raw: bool) -> list[DiskTable]:
    from streamctl.processing.joins.stream_table import _History

    if raw:
        return [DiskTable(db, "table_rows", raw=True)]  # the same rows a table of values stores
    if spec.kind == "tables":
        return [DiskTable(db, "left_table"), DiskTable(db, "right_table")]
    if spec.kind == "table" and spec.as_of == "event-time":
        return [DiskTable(db, "table_versions", lambda h: exactjson.dumps(h.dump()),
                          lambda b: _History.load(exactjson.loads(b)), mutable=True)]
    if spec.kind == "table":
        return [DiskTable(db, "table_rows")]
    return []


def enrich_batch(disk: DiskTable, events: Block, changes: Block, spec: JoinSpec,
                 write_jsonl: Callable[[bytes], None]) -> tuple[int, int]:
    """A Message (follow_inputs.py: each side's records as one Block, values as texts) joined by the
    batch run's kernel (stream_table.enrich_sides) against the follower's raw table on disk:
    the kernel's table starts as the rows the events' keys have there, and what the changes set
    or delete goes back to it (_BatchTable). A Message without table changes (a live join's
    usual one) has every event see the table as it stands: its rows are pasted from the rows
    read, without the table the kernel would make of them. Returns (events, changes)."""
    from streamctl.processing.joins.stream_table import enrich_sides, paste_rows

    heads, keys = events[0], events[1]
    nks = keys if {*map(type, keys)} <= _STR else [k if k.__class__ is str or k is None else norm_key(k) for k in keys]
    rows = disk.rows(nks)
    if not changes[0]:
        paste_rows(heads, rows, spec.how == "inner", write_jsonl)
        return len(heads), 0
    table = _BatchTable(zip(nks, rows, strict=True))
    n_events, n_changes, _size = enrich_sides(Side(iter([events]), None, heads=True), Side(iter([changes]), None),
                                              spec.how == "inner", write_jsonl, spec.on[1] != ("key",), table)
    disk.apply(table.changed)
    return n_events, n_changes


_STR = {str}


class _BatchTable(dict[Any, Any]):
    """The table a follower's batch joins against (follow.py's _enrich_batch): the rows its events
    read, with every row its changes set (a Fragment) or delete (None) kept in `changed`, in order."""

    def __init__(self, rows: Any) -> None:
        super().__init__(rows)
        self.changed: dict[Any, Any] = {}

    def __setitem__(self, nkey: Any, row: Any) -> None:
        dict.__setitem__(self, nkey, row)
        self.changed[nkey] = row

    def pop(self, nkey: Any, default: Any = None) -> Any:
        self.changed[nkey] = None
        return dict.pop(self, nkey, default)


class JoinFollower:
    def __init__(self, spec: JoinSpec, group: str | None, emit: Emit, emit_op: EmitOp,
                 late: Callable[[int, bytes], None] | None, notice: Notice | None,
                 write_jsonl: Callable[[bytes], None] | None = None) -> None:
        self.spec = spec
        self.group = group
        self.notice = notice
        self.stats = JoinStats()  # this run's counts (what it reports); the checkpoint keeps the totals
        self.earlier = JoinStats()  # the counts of the group's runs before this one (from the checkpoint)
        self.inputs = Inputs((logmod.open_log(spec.left), logmod.open_log(spec.right)))
        self.lock_fd: int | None = None
        self.reader: Generator[follow_inputs.Message, None, None] | None = None  # the kernel's reader of the current plan
        self.tmpdir: str | None = None
        self.ckpt: str | None = None
        if group is not None:
            self.ckpt = checkpoint_path(self.inputs.logs[0], group)
            self.lock_fd = following.lock_group(self.inputs.logs[0], group, "join")
            path = self.ckpt
        else:
            import tempfile

            self.tmpdir = tempfile.mkdtemp(prefix="streamctl-join-")
            path = os.path.join(self.tmpdir, "tables.db")
        try:
            self.db = open_db(path)
            self.db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID")
            if group is None:
                self.db.execute("PRAGMA synchronous=OFF")  # a scratch file, removed at exit: nothing to make durable
            # --table --as-of position with JSON-lines rows: the batch run's kernel (stream_table.enrich_sides)
            self.kernel = write_jsonl is not None and spec.kind == "table" and spec.as_of == "position"
            self.tables = _tables(spec, self.db, self.kernel)
        except sqlite3.DatabaseError as e:
            self.close()
            raise StorageError(f"{path}: not a join checkpoint ({e}); {HINT}") from None
        sink = None if late is None else (lambda side, rec: late(side, inputorder.late_line(rec, True)))
        self.times = (RememberedTime(record_time(spec.time_field[0])), RememberedTime(record_time(spec.time_field[1])))
        self.write_jsonl = write_jsonl
        # the operator's state in the checkpoint (with the kernel, the feeder only dumps and loads it)
        self.feeder = feeders.make(spec, self.stats, emit, emit_op, sink, self.times, 1, self.tables)

    # -- the checkpoint --
    def resume(self) -> None:
        """Load the checkpoint (or the group's committed offsets when there is none) and check where to resume."""
        if self.group is None:
            return
        from streamctl.groups import offsets

        assert self.ckpt is not None
        try:
            row = self.db.execute("SELECT value FROM meta WHERE name = 'checkpoint'").fetchone()
        except sqlite3.DatabaseError as e:
            raise StorageError(f"{self.ckpt}: not a join checkpoint ({e}); {HINT}") from None
        inputs = self.inputs
        if row is None:
            for side in (0, 1):
                inputs.positions[side].update(offsets.load(inputs.logs[side], self.group))
        else:
            self._load(row[0])
        for log, mirror in inputs.mirrors().values():
            resumed = following.resume_positions(log, self.group, mirror, self.ckpt if row is not None else None,
                                                 self.notice, "join")
            for side in (0, 1):
                if inputs.logs[side] is log or os.path.realpath(inputs.logs[side].path) == os.path.realpath(log.path):
                    pos = inputs.positions[side]
                    for p, o in resumed.items():
                        pos[p] = max(pos.get(p, o), o)

    def _load(self, raw: bytes) -> None:
        ck = self.ckpt
        try:
            data = exactjson.loads(raw)
            if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
                raise StorageError(f"{ck}: not a join checkpoint of this version; {HINT}")
            if data["options"] != options(self.spec):
                raise UsageError(f"{ck}: the checkpoint was made with different join options or inputs; use "
                                 "another --group or delete the checkpoint file to start over")
            for side in (0, 1):
                self.inputs.positions[side].update({int(p): int(o) for p, o in data["offsets"][side].items()})
                self.inputs.highs[side].update({int(p): int(h) for p, h in data["merge_keys"][side].items()})
            s = data["stats"]
            st = self.earlier
            st.records, st.no_time, st.late = ([int(x) for x in s[k]] for k in ("records", "no_time", "late"))
            self.feeder.load(data["state"])
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            if isinstance(e, UsageError):
                raise
            raise StorageError(f"{ck}: damaged join checkpoint ({type(e).__name__}: {e}); {HINT}") from None

    def save(self) -> None:
        """One transaction: the changed table rows, both inputs' offsets, the operator state, the counts."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            for t in self.tables:
                t.flush()
            if self.group is not None:
                inputs, st = self.inputs, self.stats
                body = {"format": CHECKPOINT_FORMAT, "group": self.group, "options": options(self.spec),
                        "offsets": [{str(p): o for p, o in sorted(inputs.positions[s].items())} for s in (0, 1)],
                        "merge_keys": [{str(p): h for p, h in sorted(inputs.highs[s].items())} for s in (0, 1)],
                        "stats": {k: [a + b for a, b in zip(getattr(self.earlier, k), getattr(st, k), strict=True)]
                                  for k in ("records", "no_time", "late")},
                        "state": self.feeder.dump()}
                db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('checkpoint', ?)", (exactjson.dumps(body),))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        if self.group is not None:
            from streamctl.groups import offsets

            # each log's group file is for `stat` (lag); the checkpoint above is what a restart trusts
            for log, mirror in self.inputs.mirrors().values():
                if mirror:
                    offsets.commit(log, self.group, mirror)

    # -- reading --
    def round(self, limit: int) -> int:
        """Feed what the logs hold past the positions, up to about `limit` records; how many were read."""
        got = self._kernel_round(limit) if self.kernel else self._record_round(limit)
        if self.group is None:
            self.save()  # the tables' changes to disk: memory holds a round's, never the table
        return got

    def _plan(self) -> follow_inputs.Plan:
        spec, inputs = self.spec, self.inputs
        return follow_inputs.plan((spec.left, spec.right), inputs.logs, inputs.positions, spec.kind == "table",
                                  self.notice)

    def _record_round(self, limit: int) -> int:
        spec, inputs = self.spec, self.inputs
        times = self.times
        time_of = ((times[0].remember, times[1].remember) if spec.kind == "stream" else (times[0].get, times[1].get))
        lanes = inputorder.record_lanes((spec.left, spec.right), self._plan(), time_of, inputs.highs)
        if not lanes:
            return 0
        sides = [lane.name[0] for lane in lanes]
        got = 0
        batches = merge_lanes(lanes)
        feeder = self.feeder
        prefetch = self.tables and isinstance(feeder, (feeders.TableFeed, feeders.TablesFeed))
        try:
            for batch in batches:
                items = list(zip(map(sides.__getitem__, batch.lanes), batch, strict=True))
                if prefetch:
                    keys = feeder.table_keys(items)  # type: ignore[union-attr]
                    for t in self.tables:
                        t.prefetch(keys)
                feeder.feed(items)
                # each lane's next offset: that of its last record in the batch (a lane's records are in offset order)
                for k, rec in dict(zip(batch.lanes, batch, strict=True)).items():
                    inputs.positions[sides[k]][rec["partition"]] = rec["offset"] + 1
                for (side, p), h in batch.highs.items():
                    inputs.highs[side][p] = h
                got += len(batch)
                if got >= limit or stopflag.is_set():
                    break
        finally:
            batches.close()
        return got

    def _kernel_round(self, limit: int) -> int:
        """The kernel's round: Messages from the reader of the current plan (follow_inputs), a new plan
        once it is read to its end, each joined by `enrich_batch`. A plan outlasts rounds: the
        reader goes on where the last round stopped, its lanes' merge keys with it."""
        from streamctl.processing import decoder

        spec, inputs = self.spec, self.inputs
        if self.reader is None:
            the_plan = self._plan()
            if not the_plan:
                return 0
            self.reader = follow_inputs.kernel_reader((spec.left, spec.right), the_plan, inputs.highs, spec.on,
                                                      spec.time_field, RUN, decoder.can_fork(), self.lock_fd)
        got = 0
        positions, highs = inputs.positions, inputs.highs
        try:
            while got < limit and not stopflag.is_set():
                try:
                    msg = next(self.reader, None)
                except Interrupted:
                    if not stopflag.is_set():
                        raise
                    msg = None  # the stop signal reached the reading process too: a checkpoint, then the exit
                if msg is None:
                    self._close_reader()
                    break
                events, changes, n, ends, lane_highs = msg
                n_events, n_changes = enrich_batch(self.tables[0], events, changes, spec,
                                                   self.write_jsonl)  # type: ignore[arg-type]
                self.stats.records[0] += n_events
                self.stats.records[1] += n_changes
                # the positions move only past records joined: a checkpoint covers exactly those
                for side, p, off in ends:
                    positions[side][p] = off
                for side, p, h in lane_highs:
                    highs[side][p] = h
                got += n
        except BaseException:
            self._close_reader()
            raise
        return got

    def _close_reader(self) -> None:
        if self.reader is not None:
            reader, self.reader = self.reader, None
            reader.close()

    def close(self) -> None:
        self._close_reader()
        if getattr(self, "db", None) is not None:
            self.db.close()
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None
        if self.tmpdir is not None:
            import shutil

            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None


def follow(spec: JoinSpec, group: str | None, emit: Emit, emit_op: EmitOp, flush_out: Callable[[], None],
           idle_timeout: float | None, late: Callable[[int, bytes], None] | None = None,
           flush_late: Callable[[], None] | None = None, notice: Notice | None = None,
           write_jsonl: Callable[[bytes], None] | None = None) -> JoinStats:
    """Run the join on two logs until a stop signal or `idle_timeout` seconds without new records.
    With `write_jsonl` (rows as JSON lines), --table --as-of position runs the batch run's kernel."""
    from streamctl.live.wait import Waiter

    f = JoinFollower(spec, group, emit, emit_op, late, notice, write_jsonl)
    try:
        f.resume()
    except BaseException:
        f.close()
        raise

    def checkpoint() -> None:
        flush_out()
        if flush_late is not None:
            flush_late()
        if group is not None:
            f.save()

    waiter = Waiter(_watched(spec))
    try:
        with gc_frozen():
            following.run_rounds(lambda: f.round(following.FOLLOW_BATCH), checkpoint, waiter, idle_timeout)
    finally:
        waiter.close()
        f.close()
    return f.stats


def _watched(spec: JoinSpec) -> list[str]:
    """The partition folders of both logs (not groups/, where the checkpoint itself is written)."""
    out: list[str] = []
    for path in dict.fromkeys(os.path.realpath(p) for p in (spec.left, spec.right)):
        lg = logmod.open_log(path)
        out += [lg.partition_dir(p) for p in range(lg.partitions)]
    return out
