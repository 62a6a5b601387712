"""A range replay or snapshot as `streamctl replay LOG` runs it: which engine, and where the lines go.

The local engine is streamctl.clients.replay, the Spark one replay_job
(spark_job). Run here, the job reads each active segment from a copy taken up to
the replay's end snapshot (clients.replay.copy_active_segments), made in a temp
folder and removed when the job ends. One partition's stored lines, unchanged, to
stdout are copied by the kernel (sendfile); with --out the lines are appended to
another log.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from streamctl.clients import replay as core
from streamctl.errors import DataError, UsageError
from streamctl.spark import runner
from streamctl.spark.engine import Say, check_engine, is_uri, job_input, pick_engine
from streamctl.spark.jobgen import Job
from streamctl.storage.log import Log

if TYPE_CHECKING:
    from streamctl.formats.progress import Progress

PROGRESS_ABOVE = 64 << 20  # a replay of less is over before a progress line would help


def range_spec(engine: str, from_: str | None, until: str | None, key: list[str] | None,
               header: list[str] | None, where: list[str] | None, compact: bool) -> tuple[core.ReplaySpec, int]:
    """The filters, --from/--until and --compact as a spec, and the time `now` the bounds were read at.
    A Spark job applies one --key alone natively (spec.key); any other filter by streamctl's own
    Filter on each line (spec.filter, spark_job's "filter")."""
    from streamctl.timeparse import now_ms

    flt = None
    if key or header or where:
        from streamctl.clients.filters import Filter

        flt = Filter.from_options(key, header, where)
    check_engine(engine)
    now = now_ms()
    spark_key = flt.keys[0] if flt is not None and len(flt.keys) == 1 and not flt.decodes else None
    return core.ReplaySpec(
        start=core.parse_bound(from_, "--from", now) if from_ is not None else None,
        until=core.parse_bound(until, "--until", now) if until is not None else None,
        key=spark_key, compact=compact, filter=flt), now


def run(log: str, spec: core.ReplaySpec, out: str | None, engine: str, threshold: int | None, master: str | None,
        emit_job: str | None, unbuffered: bool, now: int, say: Say) -> None:
    flt = spec.filter
    if emit_job is not None:
        if out is not None:
            raise UsageError("--out appends to a streamctl log and cannot be done by an emitted job; pipe the job's "
                             "output instead: python job.py | streamctl produce LOG2 --envelope")
        return runner.write_job(spark_job(log, spec, relative=True), master, emit_job, say)

    from streamctl.storage import log as logmod

    lg, ranges = None, None
    if not is_uri(log):
        if not logmod.is_log_input(log):
            if engine == "spark":
                raise UsageError("--engine spark needs a log; plain files are replayed locally")
            return write(core.replay_plain(log, spec), out, unbuffered, None, say, plain=True)
        lg = logmod.open_log(log)
        if out is not None and os.path.exists(out) and os.path.realpath(out) == os.path.realpath(lg.path):
            raise UsageError("--out must be another log than the one replayed")
        ranges = core.plan(lg, spec)
    # a URI is Spark's (or why not: the install hint when Spark is missing)
    if pick_engine(engine, [log], threshold, say) == "spark":
        return write(run_spark(log, spec, master, say, lg, ranges, now, into=stdout_fd(out)), out, unbuffered, lg, say)
    assert lg is not None and ranges is not None
    from streamctl.formats.progress import Progress, bytes_rate

    active = [p for p, r in ranges.items() if r.start < r.end]
    selected = sum(sum(s.size() for s in lg.segments(p)) for p in active)
    progress = Progress.on_terminal(bytes_rate("replay"), max(selected, 1), after=2.0, every=0.5,
                                    above=PROGRESS_ABOVE)
    try:
        if out is None and flt is None and not spec.compact and len(active) <= 1:
            # one partition's stored lines, unchanged: the kernel copies them (sendfile)
            _copy_stored(lg, {p: ranges[p] for p in active}, unbuffered, progress)
        else:
            write(core.replay(lg, spec, ranges, progress), out, unbuffered, lg, say)
    finally:
        if progress is not None:
            progress.done()


def _copy_stored(lg: Log, ranges: dict[int, core.Range], unbuffered: bool, progress: Progress | None) -> None:
    from streamctl.clients.consumer import copy_stored
    from streamctl.formats.writer import Output

    w = Output(unbuffered=True if unbuffered else None)

    def copy(fd: int, lo: int, hi: int) -> bool:
        if progress is not None:
            progress(hi - lo)
        return w.copy_range(fd, lo, hi)

    for p, r in ranges.items():
        copy_stored(lg, p, r.start, r.end, copy)


def write(lines: Iterable[bytes], out: str | None, unbuffered: bool, source: Log | None, say: Say,
          plain: bool = False) -> None:
    """Stored lines to stdout (blocks pass through), or appended to the log --out. `plain`: the
    lines are a plain file's (plainfile.envelope_line: values with no key and no ts)."""
    try:
        _write_to(lines, out, unbuffered, source, say, plain)
    finally:
        close = getattr(lines, "close", None)
        if close is not None:
            close()  # a Spark job still running (closed pipe, error) is stopped here


def _write_to(lines: Iterable[bytes], out: str | None, unbuffered: bool, source: Log | None, say: Say,
              plain: bool = False) -> None:
    if out is None:
        from streamctl.formats.writer import Output

        w = Output(unbuffered=True if unbuffered else None)
        try:
            for data in lines:
                w.write(data)
        except DataError:
            w.flush()  # the lines before a bad one are written, then the error names it (exit 65)
            raise
        w.flush()
        return
    from itertools import chain

    from streamctl.errors import StreamctlError
    from streamctl.storage import log as logmod
    from streamctl.timeparse import now_ms

    def split(blocks: Iterable[bytes]) -> Iterator[bytes]:
        for data in blocks:
            yield from data.splitlines(keepends=True)

    todo = split(lines)
    # The first line is read before LOG2 is made: a replay that fails before it has a record to
    # append (a bad first line, a refused option, a Spark job that fails) leaves no LOG2 behind.
    first = next(todo, None)
    dest = logmod.open_or_create(out, None if logmod.is_log(out) else (source.partitions if source else 1),
                                 None, now_ms())
    stats = core.AppendStats(0, {})

    def summary() -> str:
        where = ", ".join(f"p{p} {a}..{b}" for p, (a, b) in sorted((stats.ranges or {}).items()))
        return f"appended {stats.records} record(s) to {out}" + (f": {where}" if where else "")

    try:
        core.append_lines(dest, chain([first], todo) if first is not None else iter(()), plain=plain, stats=stats)
    except StreamctlError:
        say(summary() + "; the records before the error stay appended")
        raise
    say(summary())


def stdout_fd(out: str | None) -> int | None:
    """Where a Spark job writes the result itself: our stdout, when the lines go there unchanged
    (runner.stream_job `into`: they then never pass through this process); None for --out."""
    if out is not None:
        return None
    sys.stdout.flush()
    return sys.stdout.fileno()


# -- the Spark job of a replay ------------------------------------------------------

def spark_job(log: str, spec: core.ReplaySpec, relative: bool) -> Job:
    """The Spark job of this replay (streamctl.spark.replay_job) of the log at `log` (a path or a
    Spark URI); `relative` keeps relative times relative (--emit-job: resolved when it runs)."""
    params = {
        "log": job_input(log),
        "from": spec.start.job_param(relative) if spec.start else None,
        "until": spec.until.job_param(relative) if spec.until else None,
        "key": spec.key,
        # the filters of consume other than one --key alone, as typed (replay_job applies them with
        # streamctl's Filter: the same selection as the local engine)
        "filter": None if spec.key is not None or spec.filter is None else spec.filter.options(),
        "compact": spec.compact,
        # a folder (file://, hdfs://, s3a://) the driver and every executor can reach: the sorted
        # result is written there by Spark's parallel writer and copied out in order; None = the
        # driver's temp folder on a local master, else the lines stream through the driver
        "scratch": None,
    }
    what = "Snapshot (latest record per key, tombstones applied)" if spec.compact else "Replay"
    return Job("replay", f"streamctl replay: {what} of a streamctl log, lines unchanged, in (ts, partition, "
               "offset) order.", params, note='Relative times (from/until "ago_ms") are resolved when the job starts.')


def run_spark(log: str, spec: core.ReplaySpec, master: str | None, say: Say, lg: Log | None = None,
              ranges: dict[int, core.Range] | None = None, now: int | None = None,
              into: int | None = None) -> Iterator[bytes]:
    """Run the job on this machine over the log `lg` at `log` (its `ranges` planned as of `now`) or
    a log at a Spark URI (hdfs://, s3a://); yields blocks of result lines (none with `into`)."""
    import shutil
    import tempfile

    pinned: dict = {}  # the end snapshot and the time `now` of this run
    copies = None
    if lg is not None:
        assert ranges is not None
        pinned = {"end_offsets": {str(p): r.end for p, r in sorted(ranges.items())}, "now_ms": now}
        if (master or runner.LOCAL).startswith("local"):
            # executors on this machine can read a temp folder: the job reads the active segments
            # as of now from copies, in one scan with no end filter
            copies = tempfile.mkdtemp(prefix="streamctl-snapshot-")
            pinned["segment_copies"] = core.copy_active_segments(lg, {p: r.end for p, r in ranges.items()}, copies)
    try:
        yield from runner.stream_job(spark_job(log, spec, relative=False), say, master, into, **pinned)
    finally:
        if copies is not None:
            shutil.rmtree(copies, ignore_errors=True)
