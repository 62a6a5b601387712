"""consume without --group, --follow or --exec: a log's stored lines straight through, or a plain file
(followed too: `follow_plain`; and the selection every consume reads: `selection`).

Nothing is claimed or committed. One partition's stored lines, unchanged, are
copied by the kernel (sendfile); otherwise partitions are merged in (ts,
partition, offset) order. The live half (groups, --follow, --exec, --sqlite) is
streamctl.live.consume.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from streamctl.clients.filters import Filter
    from streamctl.clients.replay import Bound


def selection(group: str | None, from_: str | None, key: list[str] | None, header: list[str] | None,
              where: list[str] | None, until: str | None) -> tuple[Filter | None, Bound | None]:
    """What every consume reads, checked: the group's name, --from, and the filters and --until parsed."""
    if group is not None:
        from streamctl.storage.names import check_group

        check_group(group)
    if from_ is not None:
        from streamctl.clients.consumer import validate_from

        validate_from(from_)
    flt = None
    if key or header or where:
        from streamctl.clients.filters import Filter

        flt = Filter.from_options(key, header, where)
    bound = None
    if until is not None:
        from streamctl.clients.consumer import parse_until

        bound = parse_until(until)
    return flt, bound


def consume_log(log: str, partition: int | None, from_: str | None, until: Bound | None, max_: int | None,
                value: bool, fmt: str | None, unbuffered: bool, flt: Filter | None = None) -> None:
    from streamctl import stopflag
    from streamctl.clients import consumer
    from streamctl.formats.records import renderer
    from streamctl.formats.template import log_name
    from streamctl.formats.writer import Output
    from streamctl.storage import log as logmod

    lg = logmod.open_log(log)
    parts = consumer.check_partition_arg(lg, partition)
    pl = consumer.plan(lg, parts, from_, None, until=until)
    render = renderer(value, fmt, log_name(log))
    out = Output(unbuffered=True if unbuffered else None)
    stopflag.install()  # Ctrl-C / SIGTERM: finish the record at hand, flush, then exit
    active = consumer.active_partitions(pl)
    if render is None and max_ is None and flt is None and len(active) <= 1:
        # stored lines, unchanged, from one partition: the kernel copies them (sendfile)
        for p in active:
            pos = pl.positions[p]
            consumer.copy_stored(lg, p, pos.start, pos.end,
                                 lambda fd, lo, hi: out.copy_range(fd, lo, hi, stopflag.is_set))
    else:
        items = consumer.stream(lg, pl, merge=True)
        consumer.run(items, render, out.write, out.flush, consumer.Committer(lg, None), max_,
                     flt.select if flt is not None else None)
    stopflag.end()


def consume_plain(path: str, from_: str | None, max_: int | None, value: bool, fmt: str | None,
                  unbuffered: bool, flt: Filter | None = None, until: int | None = None,
                  follow: bool = False, idle_timeout: float | None = None,
                  say: Callable[[str], None] | None = None) -> None:
    """A plain .jsonl file (or -): its values with line numbers as offsets; filters see them as
    records with a null key, no ts and no headers. With `follow`, a file is followed as it grows
    (follow_plain); stdin is read to its end."""
    if follow and path != "-":
        return follow_plain(path, from_, max_, value, fmt, flt, until, idle_timeout, say)
    from streamctl.errors import DataError
    from streamctl.formats.records import plain_renderer
    from streamctl.formats.template import log_name
    from streamctl.formats.writer import Output
    from streamctl.storage import plainfile

    out = Output(unbuffered=True if unbuffered else None)
    render = plain_renderer(value, fmt, log_name(path))
    n = 0
    # A line is read (and checked) only when it is needed: --max and --until stop before the next
    # one, so a bad line after them is never an error, and one before them stops the run with the
    # lines before it written.
    values = plainfile.select(plainfile.iter_values(path, stop=until), from_)
    try:
        while max_ is None or n < max_:
            got = next(values, None)
            if got is None:
                break
            off, v = got
            if flt is not None and not flt.select(plainfile.envelope_line(off, v)):
                continue
            out.write(render(off, v))
            n += 1
    except DataError:
        out.flush()
        raise
    out.flush()


class _Enough(Exception):
    """--max or --until reached: the follow ends."""


def follow_plain(path: str, from_: str | None, max_: int | None, value: bool, fmt: str | None,
                 flt: Filter | None, until: int | None, idle_timeout: float | None,
                 say: Callable[[str], None] | None) -> None:
    """`consume FILE --follow`: the values from --from on, then each new line as the file grows, like
    `tail -F` (a file rotated or truncated is read again from its start), until --max, --until, a
    stop signal or --idle-timeout. --from: earliest (default), latest, OFFSET or -N (the last N)."""
    from streamctl import stopflag
    from streamctl.errors import UsageError
    from streamctl.formats.records import plain_renderer
    from streamctl.formats.template import log_name
    from streamctl.formats.writer import Output
    from streamctl.live.cursor import tail_plain
    from streamctl.storage import plainfile

    s = (from_ or "earliest").strip()
    first = 0
    if s == "earliest" or s.isdecimal():
        last, first = None, int(s) if s.isdecimal() else 0
    elif s == "latest":
        last = 0
    elif s.startswith("-") and s[1:].isdecimal():
        last = int(s[1:])
    else:
        raise UsageError(f"--from {from_!r}: a plain file has no timestamps; use earliest, latest, OFFSET or -N")
    if max_ == 0:
        return
    out = Output(unbuffered=True)
    render = plain_renderer(value, fmt, log_name(path))
    written = [0]

    def keep(off: int, v: bytes) -> bool:
        return off >= first and (flt is None or bool(flt.select(plainfile.envelope_line(off, v))))

    def emit(off: int, v: bytes) -> None:
        if until is not None and off >= until:
            raise _Enough
        out.write(render(off, v))
        written[0] += 1
        if max_ is not None and written[0] >= max_:
            raise _Enough

    stopflag.install()
    try:
        sig = tail_plain(path, last, True, emit, out.flush, say, keep, idle_timeout)
    except _Enough:
        sig = None
    out.flush()
    if sig is not None:
        stopflag.end()
