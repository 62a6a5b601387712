"""streamctl replay: reset a group's offsets, or re-emit a range / a snapshot of a log (locally or on Spark)."""

from __future__ import annotations

import typer

from streamctl.commands import numbers, options
from streamctl.commands.common import example, info, write_job
from streamctl.commands.consume import WHERE_HELP

EPILOG = example(
    "# 1. offset reset (dry run: a table of current/new offsets and lag; --execute applies it)",
    "streamctl replay orders --group billing --to-earliest",
    "streamctl replay orders --group billing --to-datetime 2026-11-21T00:00:00Z --execute",
    "streamctl replay orders --group billing --by-duration 1h --partition 0 --execute",
    "streamctl replay orders --group billing --shift-by -100          # re-read 100 records per partition",
    "streamctl replay orders --group billing --to-latest --execute    # skip the backlog",
    "streamctl replay orders --group billing --to-offset 42 --partition 1",
    "",
    "# reset plans as files (CSV lines partition,offset): review, keep, roll back",
    "streamctl replay orders --group billing --shift-by 0 --export billing-before.csv   # the offsets now",
    "streamctl replay orders --group billing --to-datetime -2h --export billing-plan.csv",
    "streamctl replay orders --group billing --from-file billing-plan.csv --execute",
    "streamctl replay orders --group billing --from-file billing-before.csv --execute   # roll back",
    "",
    "# 2. range replay and snapshots (ranges are [from, until); a bare integer is an offset)",
    "streamctl replay orders --from -1d > last-24h.jsonl               # relative times: now minus",
    "streamctl replay orders --from 2026-11-21T00:00:00Z --until @1763769600000 --key user-7",
    "streamctl replay orders --compact --until 2026-11-21T00:00:00Z --out orders-snapshot",
    "streamctl replay orders --from 1000 --until 2000 | jq .value",
    "streamctl replay orders --key user-7 --unbuffered | grep -m1 refund",
    "streamctl replay orders --from -1d --where 'value.status == failed' --header region=eu",
    "streamctl replay orders --compact --where 'value.tier == gold'   # the gold rows of the table",
    "",
    "# 3. the Spark engine (auto picks it above --spark-threshold when pyspark and Java exist)",
    "streamctl replay orders --compact --engine spark --master 'local[2]'",
    "streamctl replay orders --compact --engine auto --spark-threshold 2GiB",
    "streamctl replay hdfs://nn/logs/orders --compact --emit-job snapshot.py",
    "spark-submit --master yarn snapshot.py > snapshot.jsonl",
)


def register(app: typer.Typer) -> None:
    app.command("replay", epilog=EPILOG)(replay)


def replay(
    log: str = typer.Argument(..., metavar="LOG", help="Log folder; a Spark URI (hdfs://, s3a://, file://: read only by the Spark engine, or --emit-job); a plain .jsonl file, or -."),
    group: str | None = typer.Option(None, "--group", "-g", metavar="G", help="Reset the committed offsets of consumer group G (form 1)."),
    to_earliest: bool = typer.Option(False, "--to-earliest", help="Reset to the first offset still in the log."),
    to_latest: bool = typer.Option(False, "--to-latest", help="Reset to the end (skip everything not yet read)."),
    to_offset: int | None = typer.Option(None, "--to-offset", callback=numbers.count(), metavar="N", help="Reset to offset N in each partition (clamped into the log's range)."),
    to_datetime: str | None = typer.Option(None, "--to-datetime", callback=numbers.point(), metavar="T", help="Reset to the first record with ts >= T (ISO-8601, @EPOCHMS or -1h)."),
    shift_by: int | None = typer.Option(None, "--shift-by", callback=numbers.count(-numbers.MAX_INT), metavar="N", help="Move the committed offsets by N (negative: re-read N records); from the earliest offset where nothing was committed."),
    by_duration: str | None = typer.Option(None, "--by-duration", callback=numbers.duration(), metavar="D", help="Reset to the first record appended at most D ago (now - D; 1h, 30m, PT5M)."),
    partition: int | None = typer.Option(None, "--partition", "-p", callback=numbers.count(0, 9_999), metavar="P", help="Reset only partition P (others keep their offsets)."),
    execute: bool = typer.Option(False, "--execute", help="Apply the reset; without it nothing changes (a dry run)."),
    export: str | None = typer.Option(None, "--export", metavar="FILE", help="Also write the plan's new offsets to FILE as CSV lines partition,offset (no header; - for stdout, the table then goes to stderr); with --execute, written before the offsets change."),
    from_file: str | None = typer.Option(None, "--from-file", metavar="FILE", help="Reset to the offsets in FILE (lines partition,offset, as --export writes them; - for stdin) instead of a --to-* option; only the partitions it names change. Checked, not clamped: every bad line is reported."),
    from_: str | None = typer.Option(None, "--from", callback=numbers.position(), metavar="OFFSET|TIME", help="Start of the range (inclusive): an offset (a bare integer, in every partition) or a time: ISO-8601, @EPOCHMS or relative -1h."),
    until: str | None = typer.Option(None, "--until", callback=numbers.position(), metavar="OFFSET|TIME", help="End of the range (exclusive), same forms as --from. Default: the end of the log when replay starts."),
    key: list[str] | None = typer.Option(None, "--key", metavar="K", help="Only records whose key is K (repeatable: any of them)."),
    header: list[str] | None = typer.Option(None, "--header", metavar="NAME=VALUE", help="Only records with header NAME equal to VALUE (repeatable: all must hold). Local engine only."),
    where: list[str] | None = typer.Option(None, "--where", metavar="'PATH OP VALUE'", help=WHERE_HELP + " Local engine only."),
    compact: bool = typer.Option(False, "--compact", help="The table as of --until: the latest record per key, deleted keys (tombstones) and records without a key left out."),
    out: str | None = typer.Option(None, "--out", metavar="LOG2", help="Append the records to LOG2 (new offsets; created with LOG's partition count if missing) instead of stdout."),
    engine: str = options.engine(),
    spark_threshold: str | None = options.spark_threshold(),
    master: str | None = options.master(),
    emit_job: str | None = options.emit_job(),
    unbuffered: bool = options.unbuffered(),
) -> None:
    """Reset a consumer group's offsets, or replay a range or a snapshot of LOG.

    Form 1 (with --group and one --to-*/--shift-by/--by-duration/--from-file): prints a table
    of partition, current, new and lag-after; changes nothing without --execute.
    New offsets are clamped into each partition's range, like Kafka. A reset is
    refused while a member of the group is consuming (a live `consume --group G
    --follow` holds its partitions' claims); a one-shot consume holds none.

    Plans as files: --export FILE writes the plan's new offsets as CSV lines
    `partition,offset` (Kafka's reset-plan shape without the topic; no header),
    with or without --execute. --from-file FILE takes them back (a first line
    `partition,offset`, blank lines and # comments are allowed): it exits 65
    naming FILE:LINE for a line that is not two integers, a partition the log
    does not have, a partition twice, or an offset outside the partition's
    [first, next] offsets now. To keep a way back, save the offsets as they are
    before executing: `--shift-by 0 --export before.csv` writes the current ones
    (the first offset where the group never committed, which is where consume
    would start); `--from-file before.csv --execute` rolls back. `stat --help`
    shows how to derive the same file from `stat --json` with jq.

    Form 2: re-emits the stored lines of [--from, --until) unchanged, in
    (ts, partition, offset) order, to stdout or appended to --out LOG2. A bare
    integer is an offset (in every partition); times select by append time ts.
    --compact gives the table as of --until (the initial snapshot of change data
    capture): per key the last record in that order; tombstones delete; records
    without a key are left out. Relative times in an emitted job are resolved
    when the job runs, so one job file serves a nightly cron.

    Filters (--key, --header, --where, as in consume) combine with AND. With
    --compact they select rows of the table: a key is shown when its latest
    record matches. The Spark engine applies one --key; --header, --where and
    several --key run on the local engine (auto stays local; --engine spark and
    --emit-job refuse them).

    The Spark engine gives the same lines in the same order. To stdout, the job
    writes them there itself (they do not pass through streamctl); with --out
    they are appended by streamctl. Its log goes to a temp file; on failure the
    relevant lines and the log's path are shown. With STREAMCTL_JOB_TIMES=FILE
    set, the job appends {"startup_s", "work_s"} to FILE: the seconds Spark took
    to start and the seconds of the job's own work after that.
    """
    from streamctl.errors import UsageError

    resets = {"--to-earliest": to_earliest, "--to-latest": to_latest, "--to-offset": to_offset is not None,
              "--to-datetime": to_datetime is not None, "--shift-by": shift_by is not None,
              "--by-duration": by_duration is not None, "--from-file": from_file is not None}
    chosen = [name for name, on in resets.items() if on]
    range_flags = {"--from": from_, "--until": until, "--key": key or None, "--header": header or None,
                   "--where": where or None, "--compact": compact or None, "--out": out,
                   "--emit-job": emit_job, "--master": master, "--spark-threshold": spark_threshold}
    if group is not None:
        used = [n for n, v in range_flags.items() if v is not None]
        if used:
            raise UsageError(f"{', '.join(used)} cannot be combined with --group (an offset reset)")
        if engine != "auto":
            raise UsageError("--engine applies to range replays, not to an offset reset")
        if len(chosen) != 1:
            raise UsageError("an offset reset needs exactly one of " + ", ".join(resets) +
                             (f" (got {', '.join(chosen)})" if chosen else ""))
        return _reset(log, group, chosen[0], to_offset, to_datetime, shift_by, by_duration, partition, execute,
                      export, from_file)
    if chosen:
        raise UsageError(f"{chosen[0]} resets a consumer group's offsets and needs --group G")
    if execute or export is not None:
        raise UsageError("--execute applies an offset reset and needs --group G" if execute else
                         "--export writes an offset-reset plan and needs --group G")
    if partition is not None:
        raise UsageError("--partition applies to an offset reset (with --group)")
    flt = None
    if key or header or where:
        from streamctl.clients.filters import Filter

        flt = Filter.from_options(key, header, where)
    return _range(log, from_, until, flt, compact, out, engine, spark_threshold, master, emit_job, unbuffered)


def _reset(log: str, group: str, mode: str, to_offset: int | None, to_datetime: str | None, shift_by: int | None,
           by_duration: str | None, partition: int | None, execute: bool, export: str | None = None,
           from_file: str | None = None) -> None:
    from streamctl.clients.consumer import check_partition_arg
    from streamctl.errors import UsageError
    from streamctl.formats.table import table
    from streamctl.formats.writer import Output
    from streamctl.groups import resets
    from streamctl.storage.log import open_log
    from streamctl.storage.names import check_group
    from streamctl.timeparse import parse_duration, parse_time

    check_group(group)
    if to_offset is not None and to_offset < 0:
        raise UsageError("--to-offset must not be negative")
    mode = mode.removeprefix("--")
    if mode == "to-offset":
        spec = resets.ResetSpec(mode, offset=to_offset)
    elif mode == "to-datetime":
        spec = resets.ResetSpec(mode, ts=parse_time(to_datetime or ""))
    elif mode == "shift-by":
        spec = resets.ResetSpec(mode, shift=shift_by)
    elif mode == "by-duration":
        spec = resets.by_duration(parse_duration(by_duration or ""))
    elif mode != "from-file":
        spec = resets.ResetSpec(mode)
    lg = open_log(log)
    if mode == "from-file":
        spec = resets.from_file(from_file or "", lg)
    parts = resets.planned_partitions(spec, check_partition_arg(lg, partition), partition)
    if not execute:
        busy = resets.active_partitions(lg, group)
        members = resets.live_members(lg, group)
        if busy or members:
            held = f"partitions {', '.join(map(str, busy))} held" if busy else f"{members} live member(s)"
            info(f"note: group {group} is consuming now ({held}); --execute would be refused until its consumers stop")
    out = Output()

    def save(rows) -> None:
        if export == "-":
            out.write(resets.encode_plan(rows))
        elif export is not None:
            resets.export_plan(export, rows)

    rows = resets.reset(lg, group, spec, parts, execute, before_commit=save if export is not None else None)
    shown = (table([r.as_row() for r in rows], ["partition", "current", "new", "lag-after"]) + "\n").encode()
    if export == "-":
        out.flush()
        info("plan:\n" + shown.decode().rstrip("\n"))
    else:
        out.write(shown)
        out.flush()
    if export not in (None, "-"):
        info(f"wrote the plan ({len(rows)} partition(s)) to {export}")
    if execute:
        info(f"group {group}: offsets of {len(rows)} partition(s) reset ({mode})")
    else:
        info("dry run: nothing changed; add --execute to apply")


def _range(log: str, from_: str | None, until: str | None, flt, compact: bool, out: str | None,
           engine: str, spark_threshold: str | None, master: str | None, emit_job: str | None,
           unbuffered: bool) -> None:

    from streamctl.clients import replay as core
    from streamctl.commands.common import parse_size
    from streamctl.errors import UsageError
    from streamctl.spark.engine import ENGINES
    from streamctl.timeparse import now_ms

    if engine not in ENGINES:
        raise UsageError(f"--engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    now = now_ms()
    # a Spark job applies one key; any other filter is applied by this process
    spark_key = flt.keys[0] if flt is not None and len(flt.keys) == 1 and not flt.decodes else None
    local_only = flt is not None and spark_key is None
    spec = core.ReplaySpec(
        start=core.parse_bound(from_, "--from", now) if from_ is not None else None,
        until=core.parse_bound(until, "--until", now) if until is not None else None,
        key=spark_key, compact=compact, filter=flt)
    threshold = parse_size(spark_threshold) if spark_threshold is not None else None
    if local_only and (engine == "spark" or emit_job is not None or "://" in log):
        what = "--emit-job" if emit_job is not None else ("a Spark URI" if "://" in log else "--engine spark")
        raise UsageError(f"{what}: the Spark engine applies one --key only; {flt.describe()} runs on the "
                         "local engine (--engine local or auto)")
    if emit_job is not None:
        if out is not None:
            raise UsageError("--out appends to a streamctl log and cannot be done by an emitted job; pipe the job's "
                             "output instead: python job.py | streamctl produce LOG2 --envelope")
        return _emit(log, spec, master, emit_job)

    from streamctl.storage import log as logmod

    if "://" in log:
        if engine == "local":
            raise UsageError(f"{log} is a URI: only the Spark engine reads it (--engine spark, or --emit-job)")
        return _spark_uri(log, spec, out, master, engine, unbuffered)
    if not logmod.is_log_input(log):
        if engine == "spark":
            raise UsageError("--engine spark needs a log; plain files are replayed locally")
        return _write(core.replay_plain(log, spec), out, unbuffered, None)

    from streamctl.spark.engine import DEFAULT_SPARK_THRESHOLD, choose_engine

    lg = logmod.open_log(log)
    if out is not None:
        _check_out(lg, out)
    ranges = core.plan(lg, spec)
    total = core.input_bytes(lg)
    if local_only:
        chosen = choose_engine("local", total, threshold, info)
        if engine == "auto" and total >= (threshold if threshold is not None else DEFAULT_SPARK_THRESHOLD):
            info("engine: local (input is above the Spark threshold, but the Spark engine does not apply "
                 "--header, --where or several --key)")
    else:
        chosen = choose_engine(engine, total, threshold, info)
    if chosen == "spark":
        lines = _spark_lines(lg, spec, ranges, master, now, into=_stdout_fd(out))
        return _write(lines, out, unbuffered, lg)
    active = [p for p, r in ranges.items() if r.start < r.end]
    selected = sum(_range_bytes_hint(lg, p) for p in active)
    progress = _Progress.maybe(selected)
    try:
        if out is None and flt is None and not spec.compact and len(active) <= 1:
            # one partition's stored lines, unchanged: the kernel copies them (sendfile)
            _copy_stored(lg, {p: ranges[p] for p in active}, unbuffered, progress)
        else:
            _write(core.replay(lg, spec, ranges, progress), out, unbuffered, lg)
    finally:
        if progress is not None:
            progress.done()


def _copy_stored(lg, ranges, unbuffered: bool, progress) -> None:
    from streamctl.clients.consumer import copy_stored
    from streamctl.formats.writer import Output

    w = Output(unbuffered=True if unbuffered else None)

    def copy(fd: int, lo: int, hi: int) -> bool:
        if progress is not None:
            progress(hi - lo)
        return w.copy_range(fd, lo, hi)

    for p, r in ranges.items():
        copy_stored(lg, p, r.start, r.end, copy)


def _range_bytes_hint(lg, p: int) -> int:
    return sum(s.size() for s in lg.segments(p))


def _check_out(lg, out: str) -> None:
    import os

    from streamctl.errors import UsageError

    if os.path.exists(out) and os.path.realpath(out) == os.path.realpath(lg.path):
        raise UsageError("--out must be another log than the one replayed")


def _write(lines, out: str | None, unbuffered: bool, source) -> None:
    """Stored lines to stdout (blocks pass through), or appended to the log --out."""
    try:
        _write_to(lines, out, unbuffered, source)
    finally:
        close = getattr(lines, "close", None)
        if close is not None:
            close()  # a Spark job still running (closed pipe, error) is stopped here


def _write_to(lines, out: str | None, unbuffered: bool, source) -> None:
    if out is None:
        from streamctl.formats.writer import Output

        w = Output(unbuffered=True if unbuffered else None)
        for data in lines:
            w.write(data)
        w.flush()
        return
    from streamctl.clients import replay as core
    from streamctl.storage import log as logmod
    from streamctl.timeparse import now_ms

    dest = logmod.open_or_create(out, None if logmod.is_log(out) else (source.partitions if source else 1),
                                 None, now_ms())

    def split(blocks):
        for data in blocks:
            yield from data.splitlines(keepends=True)

    stats = core.append_lines(dest, split(lines))
    where = ", ".join(f"p{p} {a}..{b}" for p, (a, b) in sorted((stats.ranges or {}).items()))
    info(f"appended {stats.records} record(s) to {out}" + (f": {where}" if where else ""))


def _stdout_fd(out: str | None) -> int | None:
    """Where a Spark job writes the result itself: our stdout, when the lines go there unchanged
    (runner.stream_job `into`: they then never pass through this process); None for --out."""
    import sys

    if out is not None:
        return None
    sys.stdout.flush()
    return sys.stdout.fileno()


def _spark_lines(lg, spec, ranges, master: str | None, now: int, into: int | None = None):
    """Run the generated job on this machine; yields blocks of result lines (none with `into`)."""
    import os
    import shutil
    import sys
    import tempfile

    from streamctl.clients import replay as core
    from streamctl.spark import jobgen, runner

    params = _job_params(os.path.abspath(lg.path), spec, relative=False)
    params["end_offsets"] = {str(p): r.end for p, r in sorted(ranges.items())}
    params["now_ms"] = now
    params["master"] = master or "local[*]"
    params["spark_conf"] = {"spark.ui.enabled": "false"}
    copies = None
    if params["master"].startswith("local"):
        # executors on this machine can read a temp folder: the job reads the active segments
        # as of now from copies, in one scan with no end filter
        copies = tempfile.mkdtemp(prefix="streamctl-snapshot-")
        params["segment_copies"] = core.copy_active_segments(lg, {p: r.end for p, r in ranges.items()}, copies)
    try:
        job = jobgen.render_job(_title(spec), "  (run by streamctl replay --engine spark)", params,
                                jobgen.body_source("replay_job"))
        if sys.stderr.isatty():
            info(f"starting the Spark job on {params['master']} (the JVM takes a few seconds to start)")
        yield from runner.stream_job(job, master=params["master"], what="Spark replay job", into=into)
    finally:
        if copies is not None:
            shutil.rmtree(copies, ignore_errors=True)


def _spark_uri(log: str, spec, out: str | None, master: str | None, engine: str, unbuffered: bool) -> None:
    """A log at a Spark URI (hdfs://, s3a://) can only be read by Spark: run the job here against it."""
    from streamctl.spark import jobgen, runner
    from streamctl.spark.engine import choose_engine

    choose_engine("spark", 0, None, info)  # raises with the install hint when Spark is missing
    if engine == "auto":
        info(f"engine: spark ({log} is a Spark URI; only Spark can read it)")
    params = _job_params(log, spec, relative=False)
    params["master"] = master or "local[*]"
    params["spark_conf"] = {"spark.ui.enabled": "false"}
    job = jobgen.render_job(_title(spec), "  (run by streamctl replay --engine spark)", params,
                            jobgen.body_source("replay_job"))
    _write(runner.stream_job(job, master=params["master"], what="Spark replay job", into=_stdout_fd(out)), out,
           unbuffered, None)


def _title(spec) -> str:
    what = "Snapshot (latest record per key, tombstones applied)" if spec.compact else "Replay"
    return f"streamctl replay: {what} of a streamctl log, lines unchanged, in (ts, partition, offset) order."


def _job_params(log_uri: str, spec, relative: bool) -> dict:
    return {
        "log": log_uri,
        "from": spec.start.job_param(relative) if spec.start else None,
        "until": spec.until.job_param(relative) if spec.until else None,
        "key": spec.key,
        "compact": spec.compact,
        "output": None,
        # a folder (file://, hdfs://, s3a://) the driver and every executor can reach: the sorted
        # result is written there by Spark's parallel writer and copied out in order; None = the
        # driver's temp folder on a local master, else the lines stream through the driver
        "scratch": None,
        "master": None,
        "app_name": "streamctl-replay",
        "log_level": "WARN",
    }


def _emit(log: str, spec, master: str | None, path: str) -> None:
    import os

    from streamctl.spark import jobgen

    uri = log if "://" in log else os.path.abspath(log)
    params = _job_params(uri, spec, relative=True)
    params["master"] = master
    how = ("  spark-submit job.py > out.jsonl                  # the master from spark-submit (default local[*])\n"
           "  spark-submit --master yarn job.py > out.jsonl    # on a cluster\n"
           "  python job.py > out.jsonl                        # plain Python with pyspark, local[*]\n"
           "Relative times (from/until \"ago_ms\") are resolved when the job starts.")
    write_job(jobgen.render_job(_title(spec), how, params, jobgen.body_source("replay_job")), path)


class _Progress:
    """Bytes read / total on stderr, only on a terminal and only once a replay takes a while."""

    def __init__(self, total: int) -> None:
        import time

        self.total = max(total, 1)
        self.done_bytes = 0
        self.start = time.monotonic()
        self.last = self.start
        self.shown = False

    @classmethod
    def maybe(cls, total: int):
        import sys

        return cls(total) if sys.stderr.isatty() and total > (64 << 20) else None

    def __call__(self, n: int) -> None:
        import time

        self.done_bytes += n
        now = time.monotonic()
        if now - self.last < 0.5 or now - self.start < 2.0:
            return
        self.last = now
        self.shown = True
        pct = min(100.0, 100.0 * self.done_bytes / self.total)
        rate = self.done_bytes / (now - self.start) / (1 << 20)
        self._emit(f"\rstreamctl: replay {pct:5.1f}%  {self.done_bytes >> 20} MiB  {rate:.0f} MiB/s ")

    def done(self) -> None:
        if self.shown:
            self._emit("\r\033[K")

    @staticmethod
    def _emit(text: str) -> None:
        import sys

        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except OSError:
            pass
