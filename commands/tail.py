"""streamctl tail: the last N records of a log, then (with -f) every new one as it is appended."""

from __future__ import annotations

import typer

from streamctl.commands import numbers
from streamctl.commands.common import example, info
from streamctl.commands.options import FORMAT_HELP, WHERE_HELP

EPILOG = example(
    "streamctl tail orders                                # last 10 records, all partitions",
    "streamctl tail orders -n 50 --partition 2            # last 50 of partition 2",
    "streamctl tail -f orders | jq -c 'select(.value.amount > 100)'",
    "streamctl tail -f -n 0 orders --value                # only new values, as they arrive",
    "streamctl tail --follow orders --format '%d p%p@%o %k %s\\n'",
    "streamctl tail -n 5 orders --key user-7                # the last 5 records of user-7",
    "streamctl tail -f orders --where 'value.status == failed' --where 'value.amount >= 100'",
    "streamctl tail -n 5 -f events.jsonl                  # a plain file works too",
)


def register(app: typer.Typer) -> None:
    app.command("tail", epilog=EPILOG)(tail)


def tail(
    log: str = typer.Argument(..., metavar="LOG", help="Log folder (or a plain .jsonl file)."),
    lines: int = typer.Option(10, "--lines", "-n", callback=numbers.count(), metavar="N", help="How many of the last records to print first (merged across partitions)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Then print every new record as it is appended, until Ctrl-C (inotify via watchfiles; polling every 10 ms where inotify is unavailable or STREAMCTL_FORCE_POLLING=1)."),
    partition: int | None = typer.Option(None, "--partition", "-p", callback=numbers.count(0, 9_999), metavar="P", help="Only partition P."),
    key: list[str] | None = typer.Option(None, "--key", metavar="K", help="Only records whose key is K (repeatable: any of them)."),
    header: list[str] | None = typer.Option(None, "--header", metavar="NAME=VALUE", help="Only records with header NAME equal to VALUE (repeatable: all must hold)."),
    where: list[str] | None = typer.Option(None, "--where", metavar="'PATH OP VALUE'", help=WHERE_HELP),
    value: bool = typer.Option(False, "--value", help="Print only each record's value (JSON text)."),
    fmt: str | None = typer.Option(None, "--format", metavar="TEMPLATE", help=FORMAT_HELP),
) -> None:
    """Print the last N records of LOG (default 10), then with -f every new record.

    The last N are taken across all partitions and printed in (ts, partition,
    offset) order; new records are printed as they arrive (merged by ts within
    what one wake-up finds). tail never commits offsets. It keeps following
    across segment rolls and while compaction or retention rewrites or deletes
    segments beside it. Ctrl-C ends it with exit 130, SIGTERM with exit 0.

    Filters (--key, --header, --where, as in consume) combine with AND; -n N
    then counts matching records, and -f prints only matching new ones.

    A plain .jsonl file works too (offsets are line numbers); with -f it is
    followed like `tail -F`: by name across rotation, from the start after a
    truncation.
    """
    from streamctl.errors import UsageError
    from streamctl.storage import log as logmod

    if value and fmt is not None:
        raise UsageError("--value and --format cannot be combined")
    if lines < 0:
        raise UsageError("-n must not be negative")
    flt = None
    if key or header or where:
        from streamctl.clients.filters import Filter

        flt = Filter.from_options(key, header, where)
    if not logmod.is_log_input(log):
        if partition not in (None, 0):
            raise UsageError("--partition needs a log; a plain file has only partition 0")
        if log == "-":
            if follow:
                raise UsageError("-f needs a log or a file, not stdin")
            from streamctl.clients.consume_once import consume_plain

            if flt is not None:
                return _tail_plain(log, lines, False, value, fmt, flt)
            return consume_plain(log, f"-{lines}" if lines else "latest", None, value, fmt, False)
        return _tail_plain(log, lines, follow, value, fmt, flt)

    from streamctl import stopflag
    from streamctl.clients import consumer
    from streamctl.formats.records import renderer
    from streamctl.formats.template import log_name
    from streamctl.formats.writer import Output
    from streamctl.live.cursor import tail_log

    lg = logmod.open_log(log)
    parts = consumer.check_partition_arg(lg, partition)
    out = Output()
    render = renderer(value, fmt, log_name(log))
    if follow:
        stopflag.install()
    sig = tail_log(lg, parts, lines, follow, render, out.write, out.flush, info,
                   flt.select if flt is not None else None)
    if sig is not None:
        stopflag.end()


def _tail_plain(path: str, lines: int, follow: bool, value: bool, fmt: str | None, flt=None) -> None:
    from streamctl import stopflag
    from streamctl.formats.records import plain_renderer
    from streamctl.formats.template import log_name
    from streamctl.formats.writer import Output
    from streamctl.live.cursor import tail_plain
    from streamctl.storage import plainfile

    out = Output()
    render = plain_renderer(value, fmt, log_name(path))

    def emit(off: int, v: bytes) -> None:
        out.write(render(off, v))

    keep = None
    if flt is not None:
        def keep(off: int, v: bytes) -> bool:
            return bool(flt.select(plainfile.envelope_line(off, v)))

    if path == "-":
        from collections import deque

        values = plainfile.iter_values(path)
        for off, v in deque((ov for ov in values if keep is None or keep(*ov)), maxlen=lines) if lines else ():
            emit(off, v)
        out.flush()
        return None
    if follow:
        stopflag.install()
    sig = tail_plain(path, lines, follow, emit, out.flush, info, keep)
    if sig is not None:
        stopflag.end()
