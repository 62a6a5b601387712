"""streamctl stat: partitions, offsets, sizes and group lag."""

from __future__ import annotations

import typer

from streamctl.commands.common import example

EPILOG = example(
    "streamctl stat orders                       # a table for people",
    "streamctl stat orders --json | jq '.groups[] | select(.lag > 0)'",
    "streamctl stat orders --fail-lag 10000 || alert 'billing is behind'   # exit 3 when lagging",
)


def register(app: typer.Typer) -> None:
    app.command("stat", epilog=EPILOG)(stat)


def stat(
    log: str = typer.Argument(..., metavar="LOG", help="Log folder."),
    json_: bool = typer.Option(False, "--json", help="One JSON object for scripts instead of tables."),
    fail_lag: int | None = typer.Option(None, "--fail-lag", metavar="N", help="Exit 3 when any group lags by more than N records."),
) -> None:
    """Show partitions (first/next offset, records, segments, bytes, first/last ts) and group lag."""
    from streamctl.errors import ThresholdError
    from streamctl.formats.writer import Output
    from streamctl.log import open_log
    from streamctl.stats import stat as compute
    from streamctl.timeparse import format_iso

    st = compute(open_log(log))
    out = Output()
    if json_:
        import orjson

        out.write(orjson.dumps(st.to_dict()) + b"\n")
    else:
        from streamctl.formats.table import table

        prow = [{"partition": p.partition, "first_offset": p.first_offset, "next_offset": p.next_offset,
                 "records": p.records, "segments": p.segments, "bytes": p.bytes,
                 "first_ts": format_iso(p.first_ts) if p.first_ts is not None else "",
                 "last_ts": format_iso(p.last_ts) if p.last_ts is not None else ""} for p in st.partitions]
        out.write((table(prow) + "\n").encode())
        if st.groups:
            grow = [{"group": g.group, "partition": g.partition,
                     "committed": "-" if g.committed is None else g.committed, "lag": g.lag} for g in st.groups]
            out.write(("\n" + table(grow) + "\n").encode())
        else:
            out.write(b"\n(no consumer groups)\n")
    out.flush()
    if fail_lag is not None and st.max_lag() > fail_lag:
        worst = max(st.groups, key=lambda g: g.lag)
        raise ThresholdError(f"group {worst.group} lags by {worst.lag} records on partition {worst.partition} "
                             f"(more than --fail-lag {fail_lag})")
