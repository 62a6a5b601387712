"""streamctl check: verify a log; --repair truncates a torn tail."""

from __future__ import annotations

import typer

from streamctl.commands.common import example, info

EPILOG = example(
    "streamctl check orders                 # exit 0 clean, 1 problems found",
    "streamctl check orders --repair        # truncate a torn tail left by a crash",
    "streamctl check orders --json | jq .problems",
)


def register(app: typer.Typer) -> None:
    app.command("check", epilog=EPILOG)(check)


def check(
    log: str = typer.Argument(..., metavar="LOG", help="Log folder."),
    repair: bool = typer.Option(False, "--repair", help="Truncate a torn tail of the active segment (only that: corruption inside a file is reported, not guessed at)."),
    json_: bool = typer.Option(False, "--json", help="The report as one JSON object."),
) -> None:
    """Verify every segment (valid JSON, increasing offsets, names, torn tails) and group offsets.

    Also reported: a compaction .swap that is not valid (never applied) and a
    segment missing from the middle of a partition. A torn tail after a crash
    is expected and safe: the next append, or --repair, truncates it.

    Exit 0 when clean (or everything found was repaired), 1 when problems remain.
    Problems name the file, the byte offset and, in parentheses, the line of the segment (from 1).
    """
    from streamctl.errors import ExitCode
    from streamctl.formats.writer import Output
    from streamctl.maintenance.check import check as run_check
    from streamctl.maintenance.check import dumps
    from streamctl.storage.log import open_log

    report = run_check(open_log(log), repair=repair)
    out = Output()
    if json_:
        out.write(dumps(report) + b"\n")
    else:
        for p in report.problems:
            out.write(f"{p}\n".encode())
        state = "ok" if report.ok else f"{sum(not p.repaired for p in report.problems)} problem(s)"
        out.write(f"{log}: {report.segments} segment(s), {report.records} record(s): {state}\n".encode())
    out.flush()
    if not report.ok:
        info(f"{log}: check found problems")
        raise typer.Exit(ExitCode.FAILURE)
