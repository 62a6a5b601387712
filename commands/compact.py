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
    import sys

    from streamctl import stopflag
    from streamctl.commands.common import parse_size
    from streamctl.maintenance.compaction import CompactOptions, Compactor
    from streamctl.maintenance.retention import RetentionOptions
    from streamctl.storage.log import open_log
    from streamctl.timeparse import parse_duration

    def duration(text: str) -> int:
        return 0 if text.strip() == "0" else parse_duration(text)  # a bare 0 needs no unit

    opts = CompactOptions(
        roll=roll,
        tombstone_retention_ms=duration(tombstone_retention),
        min_lag_ms=duration(min_lag),
        dry_run=dry_run,
        retention=RetentionOptions(
            retention_time_ms=duration(retention_time) if retention_time is not None else None,
            retention_bytes=parse_size(retention_bytes) if retention_bytes is not None else None,
            force=force,
        ),
    )
    lg = open_log(log)
    if opts.retention.active:
        from streamctl.groups.offsets import STRAY, stray_files

        for stray in stray_files(lg):  # retention protects what groups have not read: say what it ignores
            info(f"{stray}: {STRAY}; skipped")
    stopflag.install()
    bar = _Progress() if sys.stderr.isatty() else None
    comp = Compactor(lg, opts, progress=bar.add if bar else None)
    if bar:
        bar.total = comp.work_bytes()
    try:
        results = comp.run()
    finally:
        if bar:
            bar.done()
    for r in results:
        for note in r.notices:
            info(note)
    _print(log, results, dry_run, json_)


def _print(log: str, results: list, dry_run: bool, json_: bool) -> None:
    from streamctl.formats.writer import Output

    fields = ("segments_before", "segments_after", "records_before", "records_after", "bytes_before", "bytes_after",
              "tombstones_removed", "segments_rewritten", "retention_deleted_segments", "retention_deleted_records")
    rows = [r.to_dict() for r in results]
    total = {f: sum(r[f] for r in rows) for f in fields}
    out = Output()
    if json_:
        import orjson

        out.write(orjson.dumps({"log": log, "dry_run": dry_run, "partitions": rows, "total": total}) + b"\n")
    else:
        from streamctl.formats.table import table

        cols = ["partition", "segments", "records", "bytes", "tombstones_removed", "retention_deleted"]
        trows = [{"partition": r["partition"],
                  "segments": f"{r['segments_before']} -> {r['segments_after']}",
                  "records": f"{r['records_before']} -> {r['records_after']}",
                  "bytes": f"{r['bytes_before']} -> {r['bytes_after']}",
                  "tombstones_removed": r["tombstones_removed"],
                  "retention_deleted": f"{r['retention_deleted_segments']} segment(s)"} for r in rows]
        if len(rows) > 1:
            trows.append({"partition": "total",
                          "segments": f"{total['segments_before']} -> {total['segments_after']}",
                          "records": f"{total['records_before']} -> {total['records_after']}",
                          "bytes": f"{total['bytes_before']} -> {total['bytes_after']}",
                          "tombstones_removed": total["tombstones_removed"],
                          "retention_deleted": f"{total['retention_deleted_segments']} segment(s)"})
        text = table(trows, cols) + "\n"
        if dry_run:
            text += "(dry run: nothing was changed)\n"
        out.write(text.encode())
    out.flush()


class _Progress:
    """A one-line bar on stderr (only used when stderr is a terminal), shown after the first second."""

    def __init__(self) -> None:
        import time

        self.total = 0
        self.seen = 0
        self.start = time.monotonic()
        self.last = 0.0
        self.shown = False

    def add(self, n: int) -> None:
        import sys
        import time

        self.seen += n
        now = time.monotonic()
        if now - self.start < 1.0 or now - self.last < 0.1 or self.total <= 0:
            return
        self.last = now
        frac = min(1.0, self.seen / self.total)
        filled = int(frac * 30)
        try:
            sys.stderr.write(f"\rstreamctl: compacting [{'#' * filled}{'.' * (30 - filled)}] {frac * 100:3.0f}%")
            sys.stderr.flush()
            self.shown = True
        except OSError:
            pass

    def done(self) -> None:
        import sys

        if self.shown:
            try:
                sys.stderr.write("\r\x1b[K")
                sys.stderr.flush()
            except OSError:
                pass
