"""streamctl stat: partitions, offsets, sizes, group lag and lag age, for people, scripts and Prometheus."""

from __future__ import annotations

import typer

from streamctl.commands import numbers
from streamctl.commands.common import example

OUTPUTS = ("table", "json", "prometheus")

EPILOG = example(
    "streamctl stat orders                       # tables for people",
    "streamctl stat orders payments --json | jq '.[].groups[] | select(.lag > 0)'",
    "streamctl stat orders --fail-lag 10000 || alert 'billing is behind'   # exit 3 when lagging",
    "streamctl stat orders --fail-lag-age 5m || alert 'a record waits for more than 5 minutes'",
    "",
    "# cron, for node_exporter's textfile collector (write a temp file, then rename: never a torn scrape)",
    "*/1 * * * * streamctl stat /data/orders --output prometheus > /var/lib/node_exporter/textfile/streamctl.prom.$$"
    " && mv /var/lib/node_exporter/textfile/streamctl.prom.$$ /var/lib/node_exporter/textfile/streamctl.prom",
    "",
    "# a rollback file for a group's offsets as they are now (see replay --from-file)",
    "streamctl stat orders --json | jq -r '.groups[] | select(.group == \"billing\" and .committed != null)"
    " | \"\\(.partition),\\(.committed)\"' > billing-before.csv",
)


def register(app: typer.Typer) -> None:
    app.command("stat", epilog=EPILOG)(stat)


def stat(
    logs: list[str] = typer.Argument(..., metavar="LOG...", help="Log folders."),
    output: str | None = typer.Option(None, "--output", "-o", metavar="table|json|prometheus",
                                      help="table for people (default); json for scripts (a list with one object "
                                           "per LOG when several are given); prometheus: the text exposition format "
                                           "for node_exporter's textfile collector."),
    json_: bool = typer.Option(False, "--json", help="Same as --output json."),
    fail_lag: int | None = typer.Option(None, "--fail-lag", callback=numbers.count(), metavar="N",
                                        help="Exit 3 when any group lags by more than N records."),
    fail_lag_age: str | None = typer.Option(None, "--fail-lag-age", callback=numbers.duration(), metavar="DUR",
                                            help="Exit 3 when any group's oldest unread record has waited longer "
                                                 "than DUR (30s, 5m, 1h30m, PT5M)."),
) -> None:
    """Show partitions (first/next offset, records, segments, bytes, first/last ts) and, per consumer group
    and partition, the committed offset, the lag and the lag age.

    Lag counts offsets from the committed offset to the partition's next offset
    (gaps left by compaction or retention included, as in Kafka). Lag age is how
    long the oldest unread record has waited: now minus the ts of the record at
    the committed offset (or of the first record after it, when compaction or
    retention removed that one); 0 when the lag is 0. A partition the group never
    committed is counted the way `consume --group` would read it, from the
    earliest record: lag from the first offset, age from the first record (its
    committed offset shows as "-" in the table, null in JSON, and no
    streamctl_group_committed_offset sample in Prometheus output).

    JSON: {"log", "partitions": [{"partition", "first_offset", "next_offset",
    "records", "segments", "bytes", "first_ts", "last_ts"}], "groups": [{"group",
    "partition", "committed", "lag", "lag_age_ms"}]}; with several LOGs a list of
    those. A log fed by produce --follow also has "files": [{"file", "id",
    "position", "size", "unread", "state"}]: each followed file's name, the ID
    its records' streamctl.file header names, the bytes read and appended, its
    size, the bytes not appended yet, and active, rotated, truncated or gone. Prometheus: the gauges streamctl_partition_first_offset,
    streamctl_partition_next_offset, streamctl_partition_records and
    streamctl_partition_bytes (labelled log and partition), and
    streamctl_group_committed_offset, streamctl_group_lag and
    streamctl_group_lag_age_seconds (labelled log, group and partition).

    --fail-lag and --fail-lag-age print the output first, then name every group
    and partition over the threshold on stderr and exit 3 (for cron and CI).
    """
    from streamctl.errors import ThresholdError, UsageError
    from streamctl.formats.writer import Output
    from streamctl.groups.stats import stat as compute
    from streamctl.storage.log import open_log
    from streamctl.timeparse import now_ms, parse_duration

    if output is None:
        output = "json" if json_ else "table"
    elif output not in OUTPUTS:
        raise UsageError(f"--output must be one of {', '.join(OUTPUTS)}, not {output!r}")
    elif json_ and output != "json":
        raise UsageError(f"--json means --output json; it cannot be combined with --output {output}")
    if fail_lag is not None and fail_lag < 0:
        raise UsageError("--fail-lag must not be negative")
    max_age = parse_duration(fail_lag_age) if fail_lag_age is not None else None

    from streamctl.commands.common import info
    from streamctl.groups.offsets import STRAY, stray_files

    now = now_ms()
    stats = []
    for path in logs:
        lg = open_log(path)
        for stray in stray_files(lg):
            info(f"{stray}: {STRAY}; skipped")
        stats.append(compute(lg, now))
    out = Output()
    if output == "json":
        import orjson

        body = stats[0].to_dict() if len(stats) == 1 else [st.to_dict() for st in stats]
        out.write(orjson.dumps(body) + b"\n")
    elif output == "prometheus":
        from streamctl.groups.stats import prometheus

        out.write(prometheus(stats).encode())
    else:
        for i, st in enumerate(stats):
            out.write(_tables(st, heading=len(stats) > 1, first=i == 0).encode())
    out.flush()

    crossed = []
    for st in stats:
        for g in st.groups:
            if fail_lag is not None and g.lag > fail_lag:
                crossed.append(f"{st.log}: group {g.group} lags by {g.lag} records on partition {g.partition} "
                               f"(more than --fail-lag {fail_lag})")
            if max_age is not None and g.lag_age_ms > max_age:
                from streamctl.groups.stats import format_age

                crossed.append(f"{st.log}: group {g.group}'s oldest unread record on partition {g.partition} has "
                               f"waited {format_age(g.lag_age_ms)} ({g.lag_age_ms} ms; more than --fail-lag-age {fail_lag_age})")
    if crossed:
        for line in crossed[:-1]:
            info(line)
        raise ThresholdError(crossed[-1])


def _tables(st, heading: bool, first: bool) -> str:
    from streamctl.formats.table import table
    from streamctl.groups.stats import format_age
    from streamctl.timeparse import format_iso

    def iso(ms: int | None) -> str:
        if ms is None:
            return ""
        try:
            return format_iso(ms)
        except ValueError:
            return str(ms)

    text = ("" if first else "\n") + (f"==> {st.log} <==\n" if heading else "")
    prow = [{"partition": p.partition, "first_offset": p.first_offset, "next_offset": p.next_offset,
             "records": p.records, "segments": p.segments, "bytes": p.bytes,
             "first_ts": iso(p.first_ts), "last_ts": iso(p.last_ts)} for p in st.partitions]
    text += table(prow) + "\n"
    if st.groups:
        grow = [{"group": g.group, "partition": g.partition, "committed": "-" if g.committed is None else g.committed,
                 "lag": g.lag, "lag_age": format_age(g.lag_age_ms)} for g in st.groups]
        text += "\n" + table(grow) + "\n"
    else:
        text += "\n(no consumer groups)\n"
    if st.capture is not None:
        from streamctl.capture.status import describe

        text += "\n" + describe(st.capture) + "\n"
    if st.files:
        frow = [{"file": f.file, "id": f.id, "position": f.position, "size": "-" if f.size is None else f.size,
                 "unread": "-" if f.unread is None else f.unread, "state": f.state} for f in st.files]
        text += "\n" + table(frow) + "\n"
    return text
