"""A join as `streamctl join LEFT RIGHT` runs it: which engine, and where the rows go.

The local engine is streamctl.processing.joins.driver.run, the Spark one join_job
(spark_job). Rows go to stdout through the one writer (formats.writer)
as JSON lines, CSV or a table; late records to --late-out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

import orjson

from streamctl.errors import UsageError
from streamctl.formats.rows import Rows
from streamctl.processing import exactjson, inputorder
from streamctl.processing.joins import driver as joining
from streamctl.spark.engine import LATE_OUT, Say, follow_options, job_inputs, pick_engine
from streamctl.spark.jobgen import Job

if TYPE_CHECKING:
    from streamctl.formats.writer import Output

def run(spec: joining.JoinSpec, output: str, late_out: str | None, engine: str, threshold: int | None,
        master: str | None, emit_job: str | None, unbuffered: bool, say: Say, follow: bool = False,
        group: str | None = None, idle_timeout: str | None = None) -> None:
    """The whole command once its flags are parsed into `spec` (make_spec)."""
    if late_out is not None and not spec.has_watermark:
        raise UsageError("--late-out needs a watermark: --within DUR, or --table --as-of event-time")
    idle = follow_options(follow, group, idle_timeout, engine, emit_job)
    stdin = "-" in (spec.left, spec.right)
    if follow:
        if stdin:
            raise UsageError("--follow needs two logs, not stdin (-)")
        specs = joining.check_inputs(spec)
        for side, s in zip(("LEFT", "RIGHT"), specs, strict=True):
            if not s.is_log:
                raise UsageError(f"--follow needs two logs: {side} {s.path} is a plain file")
        return run_follow(spec, output, group, idle, late_out, unbuffered, say)
    specs = joining.check_inputs(spec)
    blocker = LATE_OUT if late_out is not None else None
    chosen = pick_engine(engine, [s.path for s in specs], threshold, say, blocker, emit_job is not None)
    if emit_job is not None:
        from streamctl.spark import runner

        return runner.write_job(spark_job(spec, specs, snapshot=False), master, emit_job, say)
    from streamctl.formats.writer import Output

    out = Output(unbuffered=True if unbuffered else None)
    if chosen == "spark":
        report(spec, run_spark(spec, specs, master, output, out, say), None, say)
        return
    report(spec, run_local(spec, output, late_out, out), late_out, say)


class JoinRows(Rows):
    """Where the local engine's rows go: emit(key, left, right), emit_op(op, key, left, right) and,
    for JSON lines, write_jsonl(batch of rows as bytes); `finish` writes a table (buffered) and flushes."""

    def __init__(self, spec: joining.JoinSpec, output: str, out: Output) -> None:
        # CSV streams, so its columns are fixed: key, left, right (and op), objects as JSON text
        with_op = spec.kind == "tables"
        cols = ["key", "left", "right", *(["op"] if with_op else [])]
        super().__init__(output, out, cols, lambda row: [row.get(c) for c in cols], side_table)
        self.write_jsonl: Callable[[bytes], None] | None = None
        self.emit: joining.Emit
        self.emit_op: joining.EmitOp
        if output == "jsonl":
            write = out.write
            dumps = orjson.dumps
            nl = orjson.OPT_APPEND_NEWLINE

            def emit(key: object, lv: object, rv: object) -> None:
                try:
                    write(dumps({"key": key, "left": lv, "right": rv}, option=nl))
                except TypeError:  # an int beyond 64 bits: written exactly
                    write(exactjson.dumps({"key": key, "left": lv, "right": rv}, option=nl))

            def emit_op(op: str, key: object, lv: object, rv: object) -> None:
                try:
                    write(dumps({"key": key, "left": lv, "right": rv, "op": op}, option=nl))
                except TypeError:
                    write(exactjson.dumps({"key": key, "left": lv, "right": rv, "op": op}, option=nl))

            self.emit, self.emit_op, self.write_jsonl = emit, emit_op, self.json_lines
            return
        sink = self.dicts

        def emit_row(key: object, lv: object, rv: object) -> None:
            sink(({"key": key, "left": lv, "right": rv},))

        def emit_op_row(op: str, key: object, lv: object, rv: object) -> None:
            sink(({"key": key, "left": lv, "right": rv, "op": op},))

        self.emit, self.emit_op = emit_row, emit_op_row


def run_local(spec: joining.JoinSpec, output: str, late_out: str | None, out: Output) -> joining.JoinStats:
    """The local engine: rows to `out` as they come (a table at the end), late records to --late-out."""
    from streamctl.formats.sinks import late_file

    rows = JoinRows(spec, output, out)
    with late_file(late_out) as f:
        stats = joining.run(spec, rows.emit, rows.emit_op, write_jsonl=rows.write_jsonl, late=late_sink(f))
    rows.finish()
    return stats


def run_follow(spec: joining.JoinSpec, output: str, group: str | None, idle: float | None,
               late_out: str | None, unbuffered: bool, say: Say) -> None:
    """`join --follow`: rows as records arrive; with a group, checkpoints after the rows are written."""
    from streamctl import stopflag
    from streamctl.formats.sinks import follow_flushes, late_file
    from streamctl.formats.writer import Output
    from streamctl.processing.joins.follow import follow

    out = Output(unbuffered=True if unbuffered else None)
    rows = JoinRows(spec, output, out)
    with late_file(late_out, append=True) as f:
        # rows.finish, not only a flush: a table (-o table) holds its rows until it is written, and a
        # checkpoint must come after them, so each checkpoint writes the table of the rows since the last
        flush_rows, flush_late = follow_flushes(group, rows.finish, f, late_out)
        stopflag.install()
        stats = follow(spec, group, rows.emit, rows.emit_op, flush_rows, idle, late_sink(f), flush_late, say,
                       rows.write_jsonl)
    rows.finish()
    report(spec, stats, late_out, say)
    stopflag.end("interrupted; join state and offsets were checkpointed" if group else "interrupted")


def late_sink(f: IO[bytes] | None) -> Any:
    """Writes a late record's line (either side's) to the --late-out file `f` (None without one)."""
    return None if f is None else (lambda _side, line: f.write(line))


def report(spec: joining.JoinSpec, stats: joining.JoinStats, late_out: str | None, say: Say) -> None:
    """The run's counts on stderr: events without a usable time, late events or table changes."""
    untimed = stats.no_time[1] if spec.kind == "table" else 0  # --as-of event-time's table changes
    skipped = sum(stats.no_time) - untimed
    if skipped:
        say(f"{skipped} event(s) without a usable time in {'.'.join(spec.time_field[0])} were skipped "
            f"(LEFT {stats.no_time[0]}, RIGHT {stats.no_time[1] - untimed})")
    if untimed:
        say(f"{untimed} table change(s) without a usable time in {'.'.join(spec.time_field[1])}: each was taken "
            "as valid from the beginning (--as-of event-time places a change at its time)")
    late = sum(stats.late)
    if not late:
        return
    extra = f"; written to {late_out}" if late_out else ""
    if spec.kind == "stream":
        hint = " (wait longer with --lateness DUR" + (")" if late_out else ", or keep them with --late-out FILE)")
        say(f"warning: {late} late event(s) DROPPED (LEFT {stats.late[0]}, RIGHT {stats.late[1]}): when they "
            f"arrived, the watermark had passed their time + --within, or the time + --within of an event of "
            f"the other side with their key within --within of them (it had left the join), so they were not "
            f"joined{extra}{hint}")
    else:
        say(f"warning: {late} late table change(s): their time was already behind the watermark when they "
            f"arrived, so rows written before them may lack them (applied from then on){extra} "
            f"(wait longer with --lateness DUR)")


def run_spark(spec: joining.JoinSpec, specs: list[inputorder.InputSpec], master: str | None, output: str,
              out: Output, say: Say) -> joining.JoinStats:
    """Run the join as a Spark job; rows to `out`, and the job's counts back as JoinStats."""
    from streamctl.spark.runner import run_job

    counts = run_job(spark_job(spec, specs), JoinRows(spec, output, out), say, master)
    return joining.JoinStats(**counts)  # its fields (join_job.counts)


def side_table(rows: list[dict]) -> bytes:
    """An aligned table for people: left and right flattened (left.user, right.plan), columns from all rows."""
    from streamctl.formats.table import flatten, table

    flat = [flatten(r) for r in rows]
    cols: dict[str, None] = {}
    for r in flat:
        for k in r:
            cols.setdefault(k, None)
    # a side that is null in one row and an object in another shows as empty cells, not a "left" column
    for side in ("left", "right"):
        if side in cols and any(c.startswith(side + ".") for c in cols) and all(r.get(side) is None for r in flat):
            del cols[side]
    return table(flat, list(cols)).encode() + b"\n"


def spark_job(spec: joining.JoinSpec, specs: list[inputorder.InputSpec], snapshot: bool = True) -> Job:
    """The Spark job of this join (streamctl.spark.join_job). `snapshot` pins each log's end offsets
    as of now, as the local engine reads them (left out for --emit-job: the job reads what is there
    when it runs)."""
    params = {
        "kind": spec.kind,
        "inputs": job_inputs([s.path for s in specs], snapshot),
        "on": [list(spec.on[0]), list(spec.on[1])],
        "time_field": [list(spec.time_field[0]), list(spec.time_field[1])],
        "within": spec.within,
        "how": spec.how,
        "as_of": spec.as_of,
        "retention": spec.retention,
        "lateness": spec.lateness,
    }
    kinds = {"stream": f"stream-stream window join (within {spec.within} ms, how {spec.how})",
             "table": f"stream-table join (as of {spec.as_of}, how {spec.how})",
             "tables": "table-table join (the changelog of the inner join)"}
    return Job("join", f"streamctl join: {kinds[spec.kind]} of two inputs, rows in the same order as "
               "streamctl join --engine local.", params)
