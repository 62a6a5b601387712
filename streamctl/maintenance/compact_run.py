"""`streamctl compact` as it runs: options from the flags' text, notices, the progress bar, the summary.

The work is streamctl.maintenance.compaction (and retention); diagnostics go
to the `say` callback; `summary` renders the result for stdout.
"""

from __future__ import annotations

from collections.abc import Callable

from streamctl.maintenance.compaction import PartitionResult

SUMMED = ("segments_before", "segments_after", "records_before", "records_after", "bytes_before", "bytes_after",
          "tombstones_removed", "segments_rewritten", "retention_deleted_segments", "retention_deleted_records")
COLUMNS = ["partition", "segments", "records", "bytes", "tombstones_removed", "retention_deleted"]


def run(log: str, roll: bool, tombstone_retention: str, min_lag: str, retention_time: str | None,
        retention_bytes: int | None, force: bool, dry_run: bool, say: Callable[[str], None]) -> list[PartitionResult]:
    from streamctl import stopflag
    from streamctl.formats.progress import Progress, bar
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
            retention_bytes=retention_bytes,
            force=force,
        ),
    )
    lg = open_log(log)
    if opts.retention.active:
        from streamctl.groups.offsets import STRAY, stray_files

        for stray in stray_files(lg):  # retention protects what groups have not read: say what it ignores
            say(f"{stray}: {STRAY}; skipped")
    stopflag.install()
    progress = Progress.on_terminal(bar("compacting"))
    comp = Compactor(lg, opts, progress=progress.add if progress else None)
    if progress:
        progress.total = comp.work_bytes()
    try:
        results = comp.run()
    finally:
        if progress:
            progress.done()
    for r in results:
        for note in r.notices:
            say(note)
    return results


def _row(partition: object, r: dict) -> dict:
    return {"partition": partition,
            "segments": f"{r['segments_before']} -> {r['segments_after']}",
            "records": f"{r['records_before']} -> {r['records_after']}",
            "bytes": f"{r['bytes_before']} -> {r['bytes_after']}",
            "tombstones_removed": r["tombstones_removed"],
            "retention_deleted": f"{r['retention_deleted_segments']} segment(s)"}


def summary(log: str, results: list[PartitionResult], dry_run: bool, json_: bool) -> bytes:
    """The per-partition summary (and the total of several): a table, or one JSON object with --json."""
    rows = [r.to_dict() for r in results]
    total = {f: sum(r[f] for r in rows) for f in SUMMED}
    if json_:
        import orjson

        return orjson.dumps({"log": log, "dry_run": dry_run, "partitions": rows, "total": total}) + b"\n"
    from streamctl.formats.table import table

    trows = [_row(r["partition"], r) for r in rows]
    if len(rows) > 1:
        trows.append(_row("total", total))
    text = table(trows, COLUMNS) + "\n"
    if dry_run:
        text += "(dry run: nothing was changed)\n"
    return text.encode()
