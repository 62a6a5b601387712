"""A window as `streamctl window INPUT` runs it: which engine, follow mode, and where the rows go.

The local engine is streamctl.processing.windows.driver, the Spark one window_job
(spark_job). Rows go to stdout through the one writer (formats.writer) as JSON
lines, CSV or a table; late events to --late-out.
"""

from __future__ import annotations

from typing import Any

from streamctl.errors import UsageError
from streamctl.formats.rows import Rows, flat_table
from streamctl.processing.windows.config import WindowConfig, make_plan
from streamctl.processing.windows.driver import WindowRun
from streamctl.processing.windows.events import records_of
from streamctl.processing.windows.follow import follow
from streamctl.spark.engine import LATE_OUT, Say, follow_options, job_inputs, pick_engine
from streamctl.spark.jobgen import Job


def run(path: str, cfg: WindowConfig, output: str, follow: bool, group: str | None, idle_timeout: str | None,
        late_out: str | None, engine: str, threshold: int | None, master: str | None, emit_job: str | None,
        say: Say) -> None:
    """The whole command once its flags are parsed into `cfg` (--idle-timeout as given, a duration)."""
    WindowRun(cfg, True)  # validates every option before any input is read
    idle = follow_options(follow, group, idle_timeout, engine, emit_job)
    if follow:
        return run_follow(path, cfg, group, idle, late_out, output, say)
    chosen = pick_engine(engine, [path], threshold, say, spark_blocker(cfg, path, late_out), emit_job is not None)
    if emit_job is not None:  # the job reads to the end of the log as it is when it runs
        from streamctl.spark import runner

        return runner.write_job(spark_job(path, cfg, snapshot=False), master, emit_job, say)
    if chosen == "spark":
        return run_spark(path, cfg, master, output, say)
    run_local(path, cfg, late_out, output, say)


class WindowRows(Rows):
    """A window's rows (operator rows, see windows.output) in the chosen format."""

    def __init__(self, output: str, cfg: WindowConfig, unbuffered: bool | None = None, live: bool = False) -> None:
        """`live`: the input is a pipe that may stay open, so each batch of rows (the windows one
        watermark move closed) is flushed as it is written, not when the output buffer fills or
        the input ends (rows in a file or a pipe are still written in large writes otherwise)."""
        from streamctl.formats.writer import Output

        self.live = live
        cols = ["window.start", "window.end", "key", *(s.name for s in make_plan(cfg).specs)]
        if cfg.late == "correct":
            cols.append("revision")
        if cfg.kind == "session" and (cfg.late == "correct" or cfg.emit == "update"):
            cols.append("op")  # "delete" on a row withdrawing a session's old window, else empty

        def cells(row: dict) -> list:
            # only the window is spread into columns: a key or an aggregate that is an object is
            # one cell, its JSON text (csv_cell), as an array is
            window = row["window"]
            return [window["start"], window["end"], *(row.get(c) for c in cols[2:])]

        super().__init__(output, Output(unbuffered=unbuffered), cols, cells, flat_table)

    def __call__(self, rows: list) -> None:
        from streamctl.processing.windows.output import row_dict, row_json, rows_jsonl

        if self.output == "jsonl":
            write = self.out.write
            try:
                write(rows_jsonl(rows))
            except (TypeError, ValueError):
                for r in rows:  # exact ints past 64 bits; raises at a row it cannot write, after the rows before it
                    write(row_json(r))
        else:
            self.dicts(map(row_dict, rows))
        if self.live and self.output != "table":  # (a table is written at the end)
            self.out.flush()


def late_sink(f: Any, is_log: bool) -> Any:
    """Writes a late record's line to the --late-out file `f` (None without one)."""
    if f is None:
        return None
    from streamctl.processing.inputorder import late_line

    return lambda rec: f.write(late_line(rec, is_log))


def report(cfg: WindowConfig, run: WindowRun, late_out: str | None, say: Say) -> None:
    """The run's counts on stderr: records without a usable time, values that are not numbers, late
    events (a follower's own: not the earlier runs' its checkpoint carries)."""
    st, non_numeric = run.this_run()
    if st.bad_time:
        verb = "skipped" if cfg.on_bad_time == "skip" else "found"
        first = f" (first: {st.bad_time_example})" if st.bad_time_example else ""
        say(f"{st.bad_time} record(s) without a usable time in {cfg.time_field!r} {verb}{first}")
    for name, n in sorted(non_numeric.items()):
        say(f"{name}: {n} value(s) that are not numbers were ignored")
    if st.late:
        what = "corrected (rows with a revision)" if cfg.late == "correct" else "DROPPED"
        extra = f"; written to {late_out}" if late_out else ""
        hint = "" if cfg.late == "correct" else " (wait longer with --lateness DUR, or --late correct / --late-out FILE)"
        say(f"warning: {st.late} late event(s) {what}{extra}{hint}")
    batches, events = run.declined()
    if batches:
        # not an error: the rows are the same; said so that a slow run on such data is explained
        say(f"{events} event(s) in {batches} batch(es) folded one event at a time: the batch kernel "
            f"declined them ({run.op.DECLINE_REASON})")


def run_local(path: str, cfg: WindowConfig, late_out: str | None, output: str, say: Say) -> None:
    from streamctl.errors import DataError, StreamctlError
    from streamctl.formats.sinks import late_file

    is_log, recs = records_of(path, cfg)
    with late_file(late_out) as f:
        rows = WindowRows(output, cfg, live=path == "-" and stdin_is_live())
        run = WindowRun(cfg, is_log, late_sink(f, is_log), text_rows=output == "jsonl")
        try:
            run.feed(recs, rows, source=path if path != "-" else "<stdin>")
            run.finish(rows)
            rows.finish()
        except DataError:
            # bad input stops the run (exit 65); the windows closed before it are still written, as jq would
            try:
                rows.finish()
            except StreamctlError:
                pass
            report(cfg, run, late_out, say)
            raise
    report(cfg, run, late_out, say)


def stdin_is_live() -> bool:
    """Whether stdin is a pipe, a socket or a terminal (`consume LOG --follow | streamctl window -`),
    where input may pause for long, rather than a regular file (`< events.jsonl`), read at full speed."""
    import os
    import stat

    try:
        return not stat.S_ISREG(os.fstat(0).st_mode)
    except OSError:
        return False


def run_follow(path: str, cfg: WindowConfig, group: str | None, idle: float | None, late_out: str | None,
               output: str, say: Say) -> None:
    from streamctl import stopflag
    from streamctl.formats.sinks import follow_flushes, late_file
    from streamctl.processing import inputorder

    spec = inputorder.classify(path)
    if not spec.is_log:
        raise UsageError("--follow needs a log, not a plain file")
    with late_file(late_out, append=True) as f:
        rows = WindowRows(output, cfg, unbuffered=None)
        flush_rows, flush_late = follow_flushes(group, rows.finish, f, late_out)
        stopflag.install()
        run = follow(path, group, cfg, rows, flush_rows, idle, late_sink(f, True), flush_late=flush_late,
                     notice=say)
    rows.finish()
    report(cfg, run, late_out, say)
    stopflag.end("interrupted; window state and offsets were checkpointed")


def run_spark(path: str, cfg: WindowConfig, master: str | None, output: str, say: Say) -> None:
    """Run the window as a Spark job: rows to stdout, the counts of its stats line reported like a local run's."""
    from streamctl.processing.windows.config import WindowStats
    from streamctl.spark.runner import run_job

    counts = run_job(spark_job(path, cfg), WindowRows(output, cfg), say, master)
    run = WindowRun(cfg, True)
    run.plan.non_numeric = counts.pop("non_numeric", {})
    run.stats = WindowStats(**counts)  # the rest are its fields (window_job.main)
    report(cfg, run, None, say)


# -- the Spark job of a window ------------------------------------------------------

def spark_blocker(cfg: WindowConfig, path: str, late_out: str | None) -> str | None:
    """Why the Spark engine cannot run this window (None when it can), whatever the input (a URI too:
    only Spark reads it, so these options are refused there rather than ignored)."""
    if cfg.processing_time:
        return "--processing-time depends on when the local process reads each record"
    if cfg.late == "correct":
        return "--late correct revisions follow the local stream"
    if cfg.emit == "update":
        return "--emit update rows follow the local stream"
    if late_out is not None:
        return LATE_OUT
    return None


def spark_job(path: str, cfg: WindowConfig, snapshot: bool = True) -> Job:
    """The Spark job of this window (see streamctl/spark/window_job.py); its input as
    engine.job_inputs gives it (`snapshot`: read up to the ends as of now, as the local engine
    does; an emitted job, run later by cron or spark-submit, reads to the end as it is then)."""
    params: dict[str, Any] = {
        "inputs": job_inputs([path], snapshot),
        # the WindowConfig the job runs: the options its rows depend on (spark_blocker refuses the rest)
        "window": {"kind": cfg.kind, "size": cfg.size, "hop": cfg.hop, "by": cfg.by, "time_field": cfg.time_field,
                   "aggs": cfg.aggs, "lateness": cfg.lateness},
    }
    what = {"tumbling": f"tumbling windows of {cfg.size} ms", "hopping": f"hopping windows {cfg.size}/{cfg.hop} ms",
            "sliding": f"sliding windows of {cfg.size} ms", "session": f"session windows, gap {cfg.size} ms"}[cfg.kind]
    return Job("window", f"streamctl window: {what} over event time, with the local engine's watermark and "
               "late rules.", params)
