"""streamctl consume: write a log's records to stdout, optionally as a consumer group."""

from __future__ import annotations

import typer

from streamctl.commands import numbers, options
from streamctl.commands.common import example, info
from streamctl.commands.options import FORMAT_HELP, WHERE_HELP

EPILOG = example(
    "streamctl consume orders                               # every record, then exit",
    "streamctl consume orders --group billing --max 100     # next 100 for billing, committed",
    "streamctl consume orders --from -10 --partition 0      # last 10 of partition 0",
    "streamctl consume orders --from 2026-11-21T10:00:00Z --value | jq .amount",
    "streamctl consume orders --format '%t %p:%o %T %k %s\\n' # kcat's -f template, kcat's meanings",
    "streamctl consume orders --where 'value.amount > 100' --where 'value.country == JP'",
    "streamctl consume orders --key user-7 --key user-9 --from -1h   # either key, the last hour",
    "streamctl consume orders --header trace-id=4bf92f35 --max 1     # find a record by header",
    "streamctl consume orders -g audit --where 'value.status ~ ^fail' # skipped records are committed too",
    "streamctl consume orders --from 2026-11-21T00:00:00Z --until 2026-11-22T00:00:00Z   # one day",
    "streamctl consume events.jsonl --value                 # a plain file works too",
    "streamctl consume orders -g ops --follow --idle-timeout 10m -u | jq -c .value",
    "streamctl consume orders -g loader --exec './load.sh' --batch 500   # cron: commit after load.sh exits 0",
    "streamctl consume orders -g loader --follow --exec 'wc -l' --batch-timeout 2s",
    "streamctl consume orders -g loader --exec './load.sh' --retries 3 --dead-letter orders.dead  # poison aside",
    "streamctl consume orders.dead | streamctl produce orders --envelope   # re-drive the dead letters",
    "streamctl consume orders -g reporting --sqlite reporting.db          # cron: new orders, exactly once",
    "streamctl consume users -g view --sqlite users.db --mode upsert -f   # a live table of the latest per key",
)


def register(app: typer.Typer) -> None:
    app.command("consume", epilog=EPILOG)(consume)


def consume(
    log: str = typer.Argument(..., metavar="LOG", help="Log folder, a plain .jsonl file, or - for stdin."),
    group: str | None = typer.Option(None, "--group", "-g", metavar="G", help="Consumer group: start at its committed offsets and commit what was written."),
    from_: str | None = typer.Option(None, "--from", callback=numbers.position(), metavar="earliest|latest|OFFSET|TIME|-N", help="Where to start (default earliest; with --group its committed offsets). With --group the start counts as consumed: it is committed even if nothing is delivered. TIME: ISO-8601, @EPOCHMS or -1h. -N: the last N records of each partition."),
    partition: int | None = typer.Option(None, "--partition", "-p", callback=numbers.count(0, 9_999), metavar="P", help="Read only partition P."),
    until: str | None = typer.Option(None, "--until", callback=numbers.position(), metavar="OFFSET|TIME", help="Stop before the first record at or past this: a bare integer is an offset (in every partition; each partition stops there), a TIME (ISO-8601, @EPOCHMS, -1h) compares with ts. With --group, the committed offsets stop there too."),
    max_: int | None = typer.Option(None, "--max", callback=numbers.count(), metavar="N", help="Stop after N records written (records a filter skips do not count)."),
    key: list[str] | None = typer.Option(None, "--key", metavar="K", help="Only records whose key is K (repeatable: any of them)."),
    header: list[str] | None = typer.Option(None, "--header", metavar="NAME=VALUE", help="Only records with header NAME equal to VALUE (repeatable: all must hold)."),
    where: list[str] | None = typer.Option(None, "--where", metavar="'PATH OP VALUE'", help=WHERE_HELP),
    value: bool = typer.Option(False, "--value", help="Write only each record's value (JSON text)."),
    fmt: str | None = typer.Option(None, "--format", metavar="TEMPLATE", help=FORMAT_HELP),
    follow: bool = typer.Option(False, "--follow", "-f", help="Wait for new records instead of exiting at the end (inotify via watchfiles; polling where inotify is unavailable). A plain file is followed as it grows, like tail -F (read again from its start when rotated or truncated)."),
    idle_timeout: str | None = typer.Option(None, "--idle-timeout", callback=numbers.duration(), metavar="DUR", help="With --follow: stop after DUR in which nothing new was delivered (records a filter skips do not count)."),
    exec_: str | None = typer.Option(None, "--exec", metavar="CMD", help="Run CMD (by the shell) for each batch, the batch on its stdin; commit only if it exits 0."),
    batch: int = typer.Option(1000, "--batch", callback=numbers.count(lo=1), metavar="N", help="With --exec: records per batch. With --sqlite: records per transaction."),
    batch_timeout: str | None = typer.Option(None, "--batch-timeout", callback=numbers.duration(), metavar="DUR", help="With --exec: run a partial batch after DUR without a full one. With --sqlite --follow: a partial batch waits up to DUR for more (default: committed once caught up)."),
    retries: int = typer.Option(0, "--retries", callback=numbers.count(), metavar="N", help="With --exec: run a failed batch again, up to N more times, with the same records in the same order. Example: --retries 3."),
    retry_backoff: str | None = typer.Option(None, "--retry-backoff", callback=numbers.duration(), metavar="DUR", help="With --retries: the wait before the first retry (default 1s), doubled after each try, at most 1m. Example: --retries 5 --retry-backoff 200ms."),
    dead_letter: str | None = typer.Option(None, "--dead-letter", metavar="LOG2", help="With --exec: a batch that still fails is run in halves, each committed on its own, down to single records; a record that still fails alone is appended to the log LOG2 (created if missing) with headers streamctl.error (exit status, end of stderr), streamctl.source (LOG/PARTITION@OFFSET) and streamctl.group, committed, and consume goes on (exit 0; stderr counts them). Example: --dead-letter orders.dead; re-drive with: streamctl consume orders.dead | streamctl produce orders --envelope."),
    sqlite: str | None = typer.Option(None, "--sqlite", metavar="FILE", help="With --group: write the records into a table of the SQLite database FILE (created if missing) instead of stdout, exactly once: each batch's rows and the group's offsets are committed in one transaction, and consume resumes from the offsets in FILE (--from counts only for a first run)."),
    table: str | None = typer.Option(None, "--table", metavar="NAME", help="With --sqlite: the table (default: the log's folder name), created with columns key, value (JSON text), headers (JSON text or NULL), ts, partition, offset."),
    mode: str = typer.Option("append", "--mode", metavar="append|upsert", help="With --sqlite: append (a row per record, primary key partition, offset) or upsert (a row per key, the latest; a null value deletes it; null keys are skipped and counted)."),
    unbuffered: bool = options.unbuffered(),
) -> None:
    """Write LOG's records to stdout and exit at the end of the log.

    Without --follow, "the end" is the end offsets when consume started, so a
    busy producer cannot keep it running. Several partitions are merged in
    (ts, partition, offset) order. Default output is each stored line, unchanged.
    With --group, offsets are committed only for records whose output was
    written and flushed; a closed pipe (| head) ends consume quietly (exit 141).

    Filters (--key, --header, --where) combine with AND. With --group, records
    they skip count as consumed: the committed offsets move past them.
    --until stops each partition before the first record at or past the bound
    (kcat's -o e@): an offset bound applies in every partition; a time bound
    stops each partition at its first record with ts at or past it. With
    --follow, consume ends once every partition reached the bound (for a time:
    a record at or past it arrived, or the clock passed it by a second).

    --sqlite FILE loads the records into a SQLite table instead, exactly once: a
    kill -9 at any moment and a rerun leave every record applied once. FILE is in
    WAL mode, so `sqlite3 FILE` can query it while consume --follow runs; a lock
    another process holds is waited for. The group file mirrors the offsets in
    FILE (table streamctl_offsets) at most once a second and at the end, after
    the commits it names are synced to disk, so `stat` shows the table's lag.

    With --group and stdout on a regular file, the file is fsynced before each
    commit (a power cut never loses a committed record); a pipe is not synced.
    """
    from streamctl.errors import UsageError

    # an empty value is no command, file or table; checked before anything tests them for truth
    if exec_ is not None and not exec_.strip():
        raise UsageError("--exec needs a command")
    if sqlite is not None and not sqlite.strip():
        raise UsageError("--sqlite needs a database file")
    if value and fmt is not None:
        raise UsageError("--value and --format cannot be combined")
    if max_ is not None and max_ < 0:
        raise UsageError("--max must not be negative")
    if idle_timeout is not None and not follow and exec_ is None:
        raise UsageError("--idle-timeout needs --follow")
    if batch < 1:
        raise UsageError("--batch must be at least 1")
    if batch_timeout is not None and exec_ is None and sqlite is None:
        raise UsageError("--batch-timeout needs --exec or --sqlite")
    exec_policy = None
    if retries or retry_backoff is not None or dead_letter is not None:
        from streamctl.clients.execsink import exec_policy as check_exec_policy

        if exec_ is None:
            raise UsageError("--retries, --retry-backoff and --dead-letter need --exec CMD")
        exec_policy = check_exec_policy(log, retries, retry_backoff, dead_letter)
    sqlite_target = None
    if sqlite is not None:
        from streamctl.clients.sqlitesink import MODES, SqliteTarget, check_table_name

        if group is None:
            raise UsageError("--sqlite needs --group G (the offsets stored with the rows are the group's)")
        if exec_ is not None or value or fmt is not None:
            raise UsageError("--sqlite writes to a table: it cannot be combined with --exec, --value or --format")
        if mode not in MODES:
            raise UsageError(f"--mode {mode}: use append or upsert")
        if table is not None:
            check_table_name(table)
        sqlite_target = SqliteTarget(sqlite, table, mode)
    elif table is not None or mode != "append":
        raise UsageError("--table and --mode need --sqlite FILE")
    from streamctl.clients import consume_once
    from streamctl.storage import log as logmod
    from streamctl.timeparse import parse_duration

    flt, bound = consume_once.selection(group, from_, key, header, where, until)
    if not logmod.is_log_input(log):
        if group is not None or exec_ is not None or partition not in (None, 0):
            raise UsageError("--group, --exec and --partition need a log, not a plain file")
        if bound is not None and bound.kind != "offset":
            raise UsageError(f"{log}: a plain file has no timestamps; --until takes an offset (a line number)")
        return consume_once.consume_plain(log, from_, max_, value, fmt, unbuffered, flt,
                                          bound.value if bound is not None else None, follow,
                                          parse_duration(idle_timeout) / 1000 if idle_timeout else None, info)

    if follow or exec_ is not None or group is not None:
        # a group run claims its partitions so competing members split them
        from streamctl.live import consume as consume_live

        return consume_live.run(log, group, from_, partition, max_, value, fmt, follow, idle_timeout,
                                exec_, batch, batch_timeout, unbuffered, flt, bound, sqlite_target,
                                exec_policy, info=info)
    # no group: nothing to claim or commit; stream the stored lines straight through
    consume_once.consume_log(log, partition, from_, bound, max_, value, fmt, unbuffered, flt)
