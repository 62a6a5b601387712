"""An offset reset as `streamctl replay LOG --group G` runs it (the reset itself: groups.resets).

The spec from the one mode chosen, a note when the group is consuming now, the
plan as a table on stdout (on stderr when --export - takes stdout), the plan
file, and what changed. Diagnostics go to the `say` callback.
"""

from __future__ import annotations

from collections.abc import Callable

from streamctl.groups import resets


def run(log: str, group: str, mode: str, to_offset: int | None, to_datetime: str | None, shift_by: int | None,
        by_duration: str | None, partition: int | None, execute: bool, export: str | None,
        from_file: str | None, say: Callable[[str], None]) -> None:
    """`mode` is the reset flag given (--to-earliest ... --from-file) with its value in its parameter."""
    from streamctl.clients.consumer import check_partition_arg
    from streamctl.errors import UsageError
    from streamctl.formats.table import table
    from streamctl.formats.writer import Output
    from streamctl.storage.log import open_log
    from streamctl.storage.names import check_group
    from streamctl.timeparse import parse_duration, parse_time

    check_group(group)
    if to_offset is not None and to_offset < 0:
        raise UsageError("--to-offset must not be negative")
    mode = mode.removeprefix("--")
    if mode == "to-offset":
        spec = resets.ResetSpec(mode, offset=to_offset)
    elif mode == "to-datetime":
        spec = resets.ResetSpec(mode, ts=parse_time(to_datetime or ""))
    elif mode == "shift-by":
        spec = resets.ResetSpec(mode, shift=shift_by)
    elif mode == "by-duration":
        spec = resets.by_duration(parse_duration(by_duration or ""))
    elif mode != "from-file":
        spec = resets.ResetSpec(mode)
    lg = open_log(log)
    if mode == "from-file":
        spec = resets.from_file(from_file or "", lg, group)
    parts = resets.planned_partitions(spec, check_partition_arg(lg, partition), partition)
    if not execute:
        busy = resets.active_partitions(lg, group)
        members = resets.live_members(lg, group)
        if busy or members:
            held = f"partitions {', '.join(map(str, busy))} held" if busy else f"{members} live member(s)"
            say(f"note: group {group} is consuming now ({held}); --execute would be refused until its consumers stop")
    broken = resets.damaged(lg, group)
    if broken is not None and partition is None:  # with --partition, the plan refuses it
        say(f"{broken.split('; ')[0]}; --execute replaces it with the new offsets" if not execute
            else f"{broken.split('; ')[0]}; replaced with the new offsets")
    out = Output()

    def save(rows: list[resets.ResetRow]) -> None:
        if export == "-":
            out.write(resets.encode_plan(rows))
        elif export is not None:
            resets.export_plan(export, rows)

    rows = resets.reset(lg, group, spec, parts, execute, before_commit=save if export is not None else None)
    shown = (table([r.as_row() for r in rows], ["partition", "current", "new", "lag-after"]) + "\n").encode()
    if export == "-":
        out.flush()
        say("plan:\n" + shown.decode().rstrip("\n"))
    else:
        out.write(shown)
        out.flush()
    if export not in (None, "-"):
        say(f"wrote the plan ({len(rows)} partition(s)) to {export}")
    if execute:
        say(f"group {group}: offsets of {len(rows)} partition(s) reset ({mode})")
    else:
        say("dry run: nothing changed; add --execute to apply")
