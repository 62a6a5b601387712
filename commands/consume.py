"""streamctl consume: write a log's records to stdout, optionally as a consumer group."""

from __future__ import annotations

import typer

from streamctl.commands.common import example

EPILOG = example(
    "streamctl consume orders                               # every record, then exit",
    "streamctl consume orders --group billing --max 100     # next 100 for billing, committed",
    "streamctl consume orders --from -10 --partition 0      # last 10 of partition 0",
    "streamctl consume orders --from 2026-11-21T10:00:00Z --value | jq .amount",
    "streamctl consume orders --format '%p:%o %k %s\\n'      # kcat-style template",
    "streamctl consume events.jsonl --value                 # a plain file works too",
    "streamctl consume orders -g ops --follow --idle-timeout 10m -u | jq -c .value",
    "streamctl consume orders -g loader --exec './load.sh' --batch 500   # cron: commit after load.sh exits 0",
    "streamctl consume orders -g loader --follow --exec 'wc -l' --batch-timeout 2s",
)


def register(app: typer.Typer) -> None:
    app.command("consume", epilog=EPILOG)(consume)


def consume(
    log: str = typer.Argument(..., metavar="LOG", help="Log folder, a plain .jsonl file, or - for stdin."),
    group: str | None = typer.Option(None, "--group", "-g", metavar="G", help="Consumer group: start at its committed offsets and commit what was written."),
    from_: str | None = typer.Option(None, "--from", metavar="earliest|latest|OFFSET|TIME|-N", help="Where to start (default earliest; with --group its committed offsets). TIME: ISO-8601, @EPOCHMS or -1h. -N: the last N records of each partition."),
    partition: int | None = typer.Option(None, "--partition", "-p", metavar="P", help="Read only partition P."),
    max_: int | None = typer.Option(None, "--max", metavar="N", help="Stop after N records."),
    value: bool = typer.Option(False, "--value", help="Write only each record's value (JSON text)."),
    fmt: str | None = typer.Option(None, "--format", metavar="TEMPLATE", help="kcat-style template: %o offset, %p partition, %t ts (ms), %T ts (ISO), %k key, %s value, %h headers, %% and \\t \\n escapes."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Wait for new records instead of exiting at the end (inotify via watchfiles; polling where inotify is unavailable)."),
    idle_timeout: str | None = typer.Option(None, "--idle-timeout", metavar="DUR", help="With --follow: stop after DUR in which nothing new was delivered."),
    exec_: str | None = typer.Option(None, "--exec", metavar="CMD", help="Run CMD (by the shell) for each batch, the batch on its stdin; commit only if it exits 0."),
    batch: int = typer.Option(1000, "--batch", metavar="N", help="With --exec: records per batch."),
    batch_timeout: str | None = typer.Option(None, "--batch-timeout", metavar="DUR", help="With --exec: run a partial batch after DUR without a full one."),
    unbuffered: bool = typer.Option(False, "--unbuffered", "-u", help="Flush after every record (automatic on a terminal)."),
) -> None:
    """Write LOG's records to stdout and exit at the end of the log.

    Without --follow, "the end" is the end offsets when consume started, so a
    busy producer cannot keep it running. Several partitions are merged in
    (ts, partition, offset) order. Default output is each stored line, unchanged.
    With --group, offsets are committed only for records whose output was
    written and flushed; a closed pipe (| head) ends consume quietly (exit 141).
    """
    from streamctl.errors import UsageError

    if value and fmt is not None:
        raise UsageError("--value and --format cannot be combined")
    if max_ is not None and max_ < 0:
        raise UsageError("--max must not be negative")
    if (idle_timeout or exec_) and not follow and exec_ is None:
        raise UsageError("--idle-timeout needs --follow")
    if batch < 1:
        raise UsageError("--batch must be at least 1")
    if batch_timeout is not None and exec_ is None:
        raise UsageError("--batch-timeout needs --exec")
    if group is not None:
        from streamctl.names import check_group

        check_group(group)
    if from_ is not None:
        from streamctl.consumer import validate_from

        validate_from(from_)

    from streamctl import log as logmod

    if log == "-" or not logmod.is_log(log):
        import os

        if log != "-" and os.path.isdir(log):
            raise UsageError(f"{log}: not a streamctl log (no streamctl.json)")
        if log != "-" and not os.path.exists(log):
            raise UsageError(f"{log}: no such log or file")
        if group or follow or exec_ or partition not in (None, 0):
            raise UsageError("--group, --follow, --exec and --partition need a log, not a plain file")
        return _consume_plain(log, from_, max_, value, fmt, unbuffered)

    if follow or exec_ or group:
        # a group run claims its partitions so competing members split them
        from streamctl.commands import consume_live

        return consume_live.run(log, group, from_, partition, max_, value, fmt, follow, idle_timeout,
                                exec_, batch, batch_timeout, unbuffered)

    # no group: nothing to claim or commit; stream the stored lines straight through
    from streamctl import consumer, stopflag
    from streamctl.errors import Interrupted
    from streamctl.formats.records import renderer
    from streamctl.formats.writer import Output

    lg = logmod.open_log(log)
    parts = consumer.check_partition_arg(lg, partition)
    pl = consumer.plan(lg, parts, from_, None)
    render = renderer(value, fmt)
    out = Output(unbuffered=True if unbuffered else None)
    stopflag.install()  # Ctrl-C / SIGTERM: finish the record at hand, flush, then exit
    active = consumer.active_partitions(pl)
    if render is None and max_ is None and len(active) <= 1:
        # stored lines, unchanged, from one partition: the kernel copies them (sendfile)
        for p in active:
            pos = pl.positions[p]
            consumer.copy_stored(lg, p, pos.start, pos.end,
                                 lambda fd, lo, hi: out.copy_range(fd, lo, hi, stopflag.is_set))
    else:
        items = consumer.stream(lg, pl, merge=True)
        consumer.run(items, render, out.write, out.flush, consumer.Committer(lg, None), max_)
    if stopflag.is_set():
        import signal

        if stopflag.signum() == signal.SIGINT:
            raise Interrupted("interrupted")


def _consume_plain(path: str, from_: str | None, max_: int | None, value: bool, fmt: str | None,
                   unbuffered: bool) -> None:
    from streamctl import plainfile
    from streamctl.formats.template import compile_plain_template
    from streamctl.formats.writer import Output

    out = Output(unbuffered=True if unbuffered else None)
    tmpl = compile_plain_template(fmt) if fmt is not None else None
    n = 0
    for off, v in plainfile.select(plainfile.iter_values(path), from_):
        if max_ is not None and n >= max_:
            break
        if tmpl is not None:
            out.write(tmpl(off, v))
        elif value:
            out.write(v + b"\n")
        else:
            out.write(plainfile.envelope_line(off, v))
        n += 1
    out.flush()
