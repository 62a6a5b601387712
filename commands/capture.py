"""streamctl capture: PostgreSQL tables into logs, a consistent snapshot and then every change."""

from __future__ import annotations

import typer

from streamctl.commands import numbers
from streamctl.commands.common import example, info

EPILOG = example(
    "streamctl capture postgresql://app@db:5432/shop orders --table public.orders          # snapshot + changes, exit",
    "streamctl capture 'host=db dbname=shop user=app' cdc/{table} --table orders --table customers --follow",
    "*/5 * * * * PGPASSFILE=~/.pgpass streamctl capture postgresql://app@db/shop cdc/{table} --table orders   # cron",
    "streamctl replay cdc/public.orders --compact             # the table, from the log",
    "streamctl stat cdc/public.orders                         # the slot and the WAL it holds back",
    "streamctl capture postgresql://app@db/shop cdc/{table} --drop-slot                  # stop capturing for good",
)


def register(app: typer.Typer) -> None:
    app.command("capture", epilog=EPILOG)(capture)


def capture(
    dsn: str = typer.Argument(..., metavar="DSN", help="libpq URI or key=value string; the password comes from "
                                                        "PGPASSWORD or ~/.pgpass, never from a flag."),
    log: str = typer.Argument(..., metavar="LOG", help="Log folder; {table} is replaced by SCHEMA.TABLE (one log "
                                                        "per table, e.g. cdc/{table})."),
    tables: list[str] | None = typer.Option(None, "--table", "-t", metavar="[SCHEMA.]TABLE",
                                            help="A table to capture (repeatable; schema public by default; names as "
                                                 "in SQL: unquoted ones folded to lower case, a double-quoted one "
                                                 "as written, dots and \"\" included: '\"dot.ted\"')."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep streaming changes (a committed change is in "
                                                                "the log within a second), reconnecting after a "
                                                                "lost connection; SIGTERM/SIGINT end it after a "
                                                                "commit."),
    slot: str | None = typer.Option(None, "--slot", metavar="NAME", help="Replication slot (and publication) name "
                                                                         "(default derived from LOG)."),
    snapshot: str = typer.Option("initial", "--snapshot", metavar="initial|never",
                                 help="initial: the first run copies every row (op r) before the changes; "
                                      "never: only changes from the slot's creation on."),
    partitions: int | None = typer.Option(None, "--partitions", callback=numbers.count(1, 10_000), metavar="N",
                                          help="Partitions of each log when it is created (default 1; keys by "
                                               "Kafka's partitioner)."),
    drop_slot: bool = typer.Option(False, "--drop-slot", help="Remove the replication slot and its publication, "
                                                              "then exit (the logs stay)."),
) -> None:
    """Copy PostgreSQL tables into logs and keep them in sync (change data capture).

    The first run creates a logical replication slot (pgoutput; PostgreSQL 12+, wal_level
    = logical, a role with REPLICATION) and copies every row in the snapshot the slot's
    creation exported, then the changes after it, in commit order: no gap, no overlap.
    Each record's key is the primary key (its text as in the value, a char(n)'s padding
    kept, or a JSON array of the values for a composite key);
    its value is the row as a JSON object, null for a delete; headers op (r snapshot,
    c insert, u update, d delete), lsn (the commit's LSN; a snapshot row's is the slot's
    consistent point) and txid (a snapshot row's is that of the transaction that read the
    snapshot, never a change's; so is that of a tombstone a resync writes for a key
    the table lost while no slot was kept, with the snapshot's lsn). Exactly once: the slot
    is confirmed only up to changes durable in the log, and a rerun skips what the log
    already holds. Without --follow it reads what was committed before it started, then
    exits (for cron).

    Lost connections: with --follow, a connection lost to a server restart or a network
    cut is opened again by itself, as Debezium's connector does: after 0.5s, the wait
    doubled after each failed try up to 30s, each loss and reconnect one line on stderr.
    The stream starts again at the slot and the log skips what it already holds: no
    change lost, none twice. What reconnecting finds misconfigured (a refused login,
    the REPLICATION privilege or wal_level gone, the slot dropped) ends capture with its
    one line, exit 1. Without --follow a lost connection ends the run (exit 1) and the
    next run continues.

    Values: integers and floats are JSON numbers (NaN and the infinities the strings
    PostgreSQL prints), numeric its exact digits as a JSON number (as a JSON string
    of its exact digits beyond the range of a double, 1e400, which JSON readers
    cannot take as a number), boolean true/false,
    text types strings, json/jsonb the JSON itself (the JSON readers refuse a number
    beyond the range of a double in it, a lone UTF-16 surrogate escape or nesting deeper
    than 1022 levels: such a number is a string of its text, 1e309 -> "1e309", such
    an escape U+FFFD, such a value its text as a string), bytea base64, arrays JSON arrays
    (int2vector and oidvector, printed 1 2, too: [1,2]),
    timestamptz ISO-8601 UTC with microseconds (2026-11-21T10:00:00.123456Z),
    timestamp with a T (2026-11-21T10:00:00), date, time and interval ISO-8601 as
    PostgreSQL prints them (interval as P1DT2H), a BC timestamptz, timestamp or date
    with ISO 8601's year numbering (44 BC is -0043, 1 BC 0000: -0043-03-15T12:00:00Z,
    not 0044-03-15 12:00:00+00 BC), NULL null, any other type its text;
    a domain as its base type, in an array too.
    A TOASTed column an update left unchanged is written with its value from the log
    (or, for a row the log never held, the database). Columns added or dropped appear
    in or leave the rows from the next change on. Generated columns (GENERATED
    ALWAYS AS ... STORED) are not captured, in the snapshot or the changes, as
    PostgreSQL's logical replication does not send them. TRUNCATE is a tombstone for every key
    the log holds; an update of the primary key a tombstone, then the new row. A
    partitioned table is one log keyed by its own primary key, its partitions'
    changes published through it (PostgreSQL 13 or later; refused on 12).

    Slots: the slot (and a publication of the same name, which pgoutput reads) is
    named by --slot or derived from LOG, and streams a fixed set of tables: a run
    naming another set (a table left out or added), or another table for a log,
    is refused (exit 2): capture it through another --slot or LOG. A log holding
    records that capture did not write is refused too (exit 2). A run killed during the first snapshot, or
    one that finds its slot gone, makes a new slot and reads the tables again,
    writing only rows the log does not already hold as they are, and tombstones
    for keys the table lost meanwhile. A slot no one reads keeps the server's WAL:
    `streamctl stat LOG` shows the slot and the WAL it holds back, --drop-slot
    removes it. The role needs REPLICATION, ownership of the tables and CREATE on
    the database (for the publication). Each table needs a primary key, and a
    REPLICA IDENTITY that gives the old row's primary key (DEFAULT, FULL, or
    USING INDEX of the primary key; not another index, nor NOTHING). Every
    misconfiguration is one line naming it, exit 1 (2 for a bad DSN or flags),
    and no log is created.
    """
    from streamctl.errors import UsageError

    if snapshot not in ("initial", "never"):
        raise UsageError(f"--snapshot must be initial or never, not {snapshot!r}")
    from streamctl.capture.run import CaptureOptions, run

    stats = run(CaptureOptions(dsn=dsn, log=log, tables=list(tables or []), follow=follow, slot=slot,
                               snapshot=snapshot, partitions=partitions, drop_slot=drop_slot), say=info)
    if not drop_slot:
        logs = ", ".join(f"{path} +{n}" for path, n in stats.per_log.items())
        skipped = f", {stats.skipped} already in the log skipped" if stats.skipped else ""
        info(f"captured {stats.snapshot_rows} snapshot rows and {stats.changes} changes in {stats.commits} commits"
             f"{skipped}: {logs}")
