"""streamctl replay: reset a group's offsets, or re-emit a range / a snapshot of a log (locally or on Spark)."""

from __future__ import annotations

import typer

from streamctl.commands import numbers, options
from streamctl.commands.common import example, info
from streamctl.commands.options import WHERE_HELP

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
    from_file: str | None = typer.Option(None, "--from-file", metavar="FILE", help="Reset to the offsets in FILE (lines partition,offset, as --export writes them, or the output of `stat --output json`: the group's committed offsets then; - for stdin) instead of a --to-* option; only the partitions it names change. Checked, not clamped: every bad line is reported."),
    from_: str | None = typer.Option(None, "--from", callback=numbers.position(), metavar="OFFSET|TIME", help="Start of the range (inclusive): an offset (a bare integer, in every partition) or a time: ISO-8601, @EPOCHMS or relative -1h."),
    until: str | None = typer.Option(None, "--until", callback=numbers.position(), metavar="OFFSET|TIME", help="End of the range (exclusive), same forms as --from. Default: the end of the log when replay starts."),
    key: list[str] | None = typer.Option(None, "--key", metavar="K", help="Only records whose key is K (repeatable: any of them)."),
    header: list[str] | None = typer.Option(None, "--header", metavar="NAME=VALUE", help="Only records with header NAME equal to VALUE (repeatable: all must hold)."),
    where: list[str] | None = typer.Option(None, "--where", metavar="'PATH OP VALUE'", help=WHERE_HELP),
    compact: bool = typer.Option(False, "--compact", help="The table as of --until: the latest record per key, deleted keys (tombstones) and records without a key left out."),
    out: str | None = typer.Option(None, "--out", metavar="LOG2", help="Append the records to LOG2 (new offsets; created with LOG's partition count if missing, once there is a record to append) instead of stdout. A plain file's values are appended with a null key to partition 0."),
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
    would start); `--from-file before.csv --execute` rolls back. The output of
    `stat --output json` (saved yesterday, say) is taken as a plan too: the
    group's committed offsets in it, for the partitions it had committed (with
    several logs, the entry whose "log" is this one).

    Form 2: re-emits the stored lines of [--from, --until) unchanged, in
    (ts, partition, offset) order, to stdout or appended to --out LOG2. A bare
    integer is an offset (in every partition); times select by append time ts.
    --compact gives the table as of --until (the initial snapshot of change data
    capture): per key the last record in that order; tombstones delete; records
    without a key are left out. Relative times in an emitted job are resolved
    when the job runs, so one job file serves a nightly cron.

    Filters (--key, --header, --where, as in consume) combine with AND. With
    --compact they select rows of the table: a key is shown when its latest
    record matches. The Spark engine applies them too, with the same rule: one
    --key alone in Spark itself, any other filter by streamctl's own filter on
    each line (an emitted job then needs msgspec on the executors, as streamctl
    itself does).

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
        from streamctl.clients import reset_run

        return reset_run.run(log, group, chosen[0], to_offset, to_datetime, shift_by, by_duration, partition,
                             execute, export, from_file, info)
    if chosen:
        raise UsageError(f"{chosen[0]} resets a consumer group's offsets and needs --group G")
    if execute or export is not None:
        raise UsageError("--execute applies an offset reset and needs --group G" if execute else
                         "--export writes an offset-reset plan and needs --group G")
    if partition is not None:
        raise UsageError("--partition applies to an offset reset (with --group)")
    from streamctl.commands.common import parse_size
    from streamctl.spark import replay_run

    spec, now = replay_run.range_spec(engine, from_, until, key, header, where, compact)
    threshold = parse_size(spark_threshold) if spark_threshold is not None else None
    return replay_run.run(log, spec, out, engine, threshold, master, emit_job, unbuffered, now, info)
