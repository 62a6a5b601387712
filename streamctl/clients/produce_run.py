"""`streamctl produce` as it runs: the input decoder, the log (created on first use), the inputs
opened, --echo, --exactly-once, and the one-line summary. The append loop is clients.producer.

Diagnostics (the summary) go to the `say` callback.
"""

from __future__ import annotations

from collections.abc import Callable

from streamctl.clients.producer import ProduceStats

SHOWN_PARTITIONS = 8  # the summary names this many partitions' offset ranges, then counts the rest


def run(log: str, files: list[str] | None, *, key_field: str | None, key: str | None, envelope: bool, raw: bool,
        key_delimiter: str | None, source: str | None, partitions: int | None, partition: int | None,
        segment_bytes: int | None, fsync: str, echo: bool, max_record_bytes: int, on_error: str,
        dead_letter: str | None, lock_timeout: float | None, exactly_once: bool,
        say: Callable[[str], None], follow: bool = False, idle_timeout: float | None = None) -> None:
    """Append the records of `files` (none or - : stdin) to `log`; the options are checked already.

    With `follow`, `files` are names or globs followed as they grow (streamctl.ingest.follow) until a
    stop signal or `idle_timeout` seconds without new lines."""
    import os
    import stat
    import sys

    from streamctl.clients.producer import (
        EnvelopeLane,
        Input,
        ProduceOptions,
        RawLane,
        open_dead_letters,
        validate_values,
    )
    from streamctl.clients.producer import produce as run_produce
    from streamctl.errors import UsageError
    from streamctl.formats import inputs
    from streamctl.storage import log as logmod
    from streamctl.storage.appender import Appender
    from streamctl.storage.fieldpaths import value_path
    from streamctl.storage.names import check_partition
    from streamctl.timeparse import now_ms

    if raw:
        decoder = inputs.raw_decoder(key_delimiter, key)
    elif envelope:
        decoder = inputs.envelope_decoder(key, source)
    else:
        decoder = inputs.value_decoder(key_field, key)

    if not log:
        raise UsageError("LOG is an empty name: name the log's folder (e.g. ./orders)")
    if partition is not None and not logmod.is_log(log):
        # a usage error creates nothing: --partition is checked against the log this run would make
        check_partition(partition, partitions or 1)
    # the input files are opened first: one that cannot be read is a usage error, and creates no log
    names = [] if follow else files or ["-"]
    fds: list[int | None] = []  # (stdin's is taken once the log is open)
    for name in names:
        if name == "-":
            if not _readable(0):  # fd 0, not sys.stdin: tests may swap that for an object without a descriptor
                raise UsageError("<stdin>: cannot read: it is closed; pipe the input in or name a FILE")
            fds.append(None)
            continue
        try:
            fd = os.open(name, os.O_RDONLY)
        except OSError as e:
            raise UsageError(f"{name or repr(name)}: cannot open: {e.strerror}") from None
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise UsageError(f"{name}: cannot open: Is a directory")
        fds.append(fd)
    dead = open_dead_letters(dead_letter, log) if dead_letter is not None else None
    lg = logmod.open_or_create(log, partitions, segment_bytes, now_ms())
    if partition is not None:
        check_partition(partition, lg.partitions)
    opened = [Input("<stdin>", sys.stdin.fileno()) if fd is None else Input(name, fd)
              for name, fd in zip(names, fds, strict=True)]

    out = None
    echo_fn = None
    if echo:
        from streamctl.formats.writer import Output

        out = Output()

        def echo_fn(lines: list[bytes]) -> None:
            for ln in lines:
                out.write(ln)
            out.flush()

    opts = ProduceOptions(
        decoder=decoder, partition=partition, max_record_bytes=max_record_bytes, on_error=on_error,
        dead_letter=dead_letter, dead=dead, per_record=fsync == "always", echo=echo_fn,
    )
    if raw:
        opts.raw_batch = RawLane(key_delimiter, key)
    elif envelope:
        opts.envelope_batch = EnvelopeLane(key)
    elif key_field is None:
        opts.validate_batch, opts.const_key = validate_values, key
    else:
        opts.key_path = value_path(key_field)
    if follow:
        from streamctl import stopflag
        from streamctl.ingest.follow import follow as follow_files

        stopflag.install()
        with Appender(lg, fsync=fsync, lock_timeout=lock_timeout) as app_:
            fstats = follow_files(lg, files or [], opts, app_, raw=raw, idle=idle_timeout, say=say)
        if out is not None:
            out.flush()
        msg = summary(log, fstats.produced, dead_letter)
        msg += f"; followed {fstats.files} file(s)"
        if fstats.rotations:
            msg += f", {fstats.rotations} rotated away"
        if fstats.truncations:
            msg += f", {fstats.truncations} truncated and read again"
        if fstats.already:
            msg += f"; {fstats.already} line(s) already in the log (appended before a crash) skipped"
        say(msg)
        stopflag.end("interrupted; the positions of the lines appended were committed")
        return
    with Appender(lg, fsync=fsync, lock_timeout=lock_timeout) as app_:
        if exactly_once:
            from streamctl.clients.dedup import Deduper

            deduper = Deduper(lg, app_)
            opts.dedupe = deduper
        stats = run_produce(lg, opened, opts, app_)
        if exactly_once:
            stats.unsourced = deduper.unsourced
    if out is not None:
        out.flush()
    say(summary(log, stats, dead_letter))


def _readable(fd: int) -> bool:
    """Can fd be read? A stdin the caller closed (`<&-`) is /dev/null opened for writing only (the CLI
    fills closed standard descriptors so no file takes their numbers)."""
    import fcntl
    import os

    try:
        return fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_WRONLY
    except OSError:
        return False


def summary(log: str, stats: ProduceStats, dead_letter: str | None) -> str:
    parts = sorted(stats.ranges)
    if parts:
        shown = ", ".join(f"p{p} {stats.ranges[p][0]}..{stats.ranges[p][1]}" for p in parts[:SHOWN_PARTITIONS])
        if len(parts) > SHOWN_PARTITIONS:
            shown += f", ... ({len(parts)} partitions)"
    else:
        shown = "nothing appended"
    msg = f"produced {stats.records} record(s) to {log}: {shown}"
    if stats.skipped_duplicates:
        msg += f"; {stats.skipped_duplicates} duplicate(s) skipped (--exactly-once)"
    if stats.unsourced:
        msg += (f"; {stats.unsourced} record(s) without a source appended as they are, not deduplicated "
                "(--exactly-once goes by an envelope's \"source\", or its partition and offset with --source NAME)")
    if stats.rejected:
        where = f" (written to {dead_letter})" if dead_letter else ""
        msg += f"; {stats.rejected} bad line(s) rejected{where}"
    return msg
