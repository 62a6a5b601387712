"""streamctl compact: keep the latest record per key (log compaction) and apply retention."""

from __future__ import annotations

import typer

from streamctl.commands import numbers
from streamctl.commands.common import example, info

EPILOG = example(
    "streamctl compact users                          # latest value per key in closed segments",
    "streamctl compact users --roll --dry-run         # what compacting everything would do",
    "streamctl compact users --tombstone-retention 7d --min-lag 1h",
    "streamctl compact users --json | jq '.partitions[] | .records_after'",
    "streamctl compact clicks --retention-time 7d --retention-bytes 10GiB   # delete old segments",
    "streamctl compact clicks --retention-time 1d --force    # even those a group has not read",
    "0 3 * * * streamctl compact /var/lib/logs/users --retention-time 30d   # from cron",
)


def register(app: typer.Typer) -> None:
    app.command("compact", epilog=EPILOG)(compact)


def compact(
    log: str = typer.Argument(..., metavar="LOG", help="Log folder."),
    roll: bool = typer.Option(False, "--roll", help="Close the active segment first, so it is compacted too (producers then append to a new one)."),
    tombstone_retention: str = typer.Option("24h", "--tombstone-retention", callback=numbers.duration(), metavar="DUR", help="Keep a delete (null value) this long after its ts so consumers see it; then remove it (Kafka's delete.retention.ms)."),
    min_lag: str = typer.Option("0", "--min-lag", callback=numbers.duration(), metavar="DUR", help="Leave records younger than DUR alone: they are neither removed nor supersede older ones (Kafka's min.compaction.lag.ms)."),
    retention_time: str | None = typer.Option(None, "--retention-time", callback=numbers.duration(), metavar="DUR", help="Delete closed segments whose newest record is older than DUR (Kafka's retention.ms)."),
    retention_bytes: str | None = typer.Option(None, "--retention-bytes", callback=numbers.size(), metavar="SIZE", help="Delete the oldest closed segments while the partition stays at least SIZE big (per partition, like Kafka's retention.bytes)."),
    force: bool = typer.Option(False, "--force", help="Let retention delete segments that a consumer group has not read past."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Report what would change; write nothing."),
    json_: bool = typer.Option(False, "--json", help="The summary as one JSON object for scripts."),
) -> None:
    """Keep only the latest record of each key in the closed segments, and apply retention.

    Offsets and order are preserved (removed records leave gaps) and kept
    records are byte-identical. Records with a null key are kept as they are.
    A tombstone (null value) is kept for --tombstone-retention after its own ts
    (append time), then removed. Small neighbouring segments are merged; a log
    with nothing to remove is not rewritten. Retention (--retention-time,
    --retention-bytes) runs first and deletes whole old segments, oldest first,
    but never one a consumer group has not read past unless --force; a consumer
    whose offset was deleted is told so and resumes at the next record.

    Safe beside running producers and consumers: segments are recopied without
    locks, and each cleaned segment is swapped in crash-safely (.cleaned, then
    .swap) under the partition lock, so appends wait only for a rename. A kill
    at any moment leaves the old or the new segments; the next append, compact
    or `check --repair` finishes or removes the leftovers.

    Prints a summary per partition (segments, records and bytes before and
    after) on stdout; a progress bar on stderr when it is a terminal.
    """
    from streamctl.commands.common import parse_size
    from streamctl.formats.writer import Output
    from streamctl.maintenance import compact_run

    results = compact_run.run(log, roll, tombstone_retention, min_lag, retention_time,
                              parse_size(retention_bytes) if retention_bytes is not None else None, force, dry_run,
                              info)
    out = Output()
    out.write(compact_run.summary(log, results, dry_run, json_))
    out.flush()
