"""streamctl produce: append records read from files or stdin."""

from __future__ import annotations

import typer

from streamctl.commands import numbers
from streamctl.commands.common import example, info

EPILOG = example(
    "seq 3 | streamctl produce numbers                       # values 1, 2, 3",
    "streamctl produce orders orders.jsonl --key-field user.id --partitions 4",
    "printf 'u1:hello\\n' | streamctl produce chat --raw --key-delimiter :",
    "streamctl consume a | jq -c '.value |= .+1' | streamctl produce b --envelope",
    "streamctl produce orders in.jsonl --on-error dead-letter=rejected.jsonl --fsync always --echo",
    "streamctl consume a | jq -c '.value.n += 1' | streamctl produce b --envelope --exactly-once --source a   # killed? rerun it",
    "streamctl produce app /var/log/app.jsonl --follow --key-field user     # like tail -F, exactly once across restarts",
    "streamctl produce web '/var/log/nginx/*.log' --raw --follow --idle-timeout 1h",
)


def register(app: typer.Typer) -> None:
    app.command("produce", epilog=EPILOG)(produce)


def produce(
    log: str = typer.Argument(..., metavar="LOG", help="Log folder (created on first use)."),
    files: list[str] | None = typer.Argument(None, metavar="FILE", help="Input files; none or - reads stdin. With --follow: files or quoted globs to follow."),
    key_field: str | None = typer.Option(None, "--key-field", metavar="PATH", help="Take the key from this field of the value (dotted path, e.g. user.id)."),
    key: str | None = typer.Option(None, "--key", metavar="K", help="Use K as the key of every record."),
    envelope: bool = typer.Option(False, "--envelope", help="Input lines are {\"key\", \"value\", \"headers\"} objects (consume's output fits)."),
    raw: bool = typer.Option(False, "--raw", help="Input lines are plain text; each becomes a JSON string value."),
    key_delimiter: str | None = typer.Option(None, "--key-delimiter", metavar="SEP", help="With --raw: split 'key SEP value' at the first SEP (kcat -K; escapes: \\t, \\r, \\xNN a byte in hex, \\\\ a backslash)."),
    partitions: int | None = typer.Option(None, "--partitions", callback=numbers.count(1, 10_000), metavar="N", help="Partitions when the log is created (default 1)."),
    partition: int | None = typer.Option(None, "--partition", callback=numbers.count(0, 9_999), metavar="P", help="Append every record to partition P."),
    segment_bytes: str | None = typer.Option(None, "--segment-bytes", callback=numbers.size(lo=1 << 10), metavar="SIZE", help="Segment size when the log is created (default 16MiB)."),
    fsync: str = typer.Option("batch", "--fsync", metavar="always|batch|never", help="always: each record is written and fsynced alone; batch: one fsync per write batch and at exit; never: leave it to the OS (still safe against kill -9, not power loss)."),
    echo: bool = typer.Option(False, "--echo", help="Write the stored records to stdout, once durable."),
    max_record_bytes: str = typer.Option("1MiB", "--max-record-bytes", callback=numbers.size(lo=1), metavar="SIZE", help="Reject input lines longer than this."),
    on_error: str = typer.Option("fail", "--on-error", metavar="fail|skip|dead-letter=FILE", help="Bad input: stop with exit 65 (default), skip and count, or append to FILE (opened, created if missing, when produce starts; never inside LOG)."),
    lock_timeout: str | None = typer.Option(None, "--lock-timeout", callback=numbers.duration(), metavar="DUR", help="Fail if a partition lock is not free within DUR (default: wait)."),
    exactly_once: bool = typer.Option(False, "--exactly-once", help="Skip records whose source (log, partition, offset) was already appended (needs --envelope)."),
    source: str | None = typer.Option(None, "--source", metavar="NAME", help="With --exactly-once: the source log name for envelope lines that carry offset/partition."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep reading each FILE as it grows, like tail -F (rotation, truncation and quoted globs included); where each file was read to is kept with LOG, so a rerun after a crash appends every line once."),
    idle_timeout: str | None = typer.Option(None, "--idle-timeout", callback=numbers.duration(), metavar="DUR", help="With --follow: stop after DUR without new lines."),
) -> None:
    """Append records read from FILEs or stdin to LOG.

    Each input line is a JSON value and becomes a record's value (stored exactly
    as written, after validation). Blank lines, and a UTF-8 byte order mark before
    an input's first line, are skipped. On success a one-line
    summary goes to stderr; stdout stays empty unless --echo.

    --follow (Filebeat's job): FILEs are names or quoted globs, looked at again
    for new files. A file renamed away (rotation) is read to its end, then the
    new file of that name from its start; a file truncated in place
    (copytruncate) is read again from its start; a line is appended once its
    newline is written. Files are known by device, inode and first bytes. Where
    each was read to is kept in LOG/.follow, and every record carries the header
    "streamctl.file": "ID:BYTE" (the file, as `stat` lists it, and where its
    line starts), so a rerun after kill -9 appends each line exactly once.
    Records without a key go to one partition per file. SIGTERM or
    --idle-timeout: commit and exit 0; SIGINT: commit and exit 130.
    """
    from streamctl.commands.common import parse_size
    from streamctl.errors import UsageError
    from streamctl.storage.appender import FSYNC_POLICIES
    from streamctl.timeparse import parse_duration

    if fsync not in FSYNC_POLICIES:
        raise UsageError(f"--fsync must be one of {', '.join(FSYNC_POLICIES)}, not {fsync!r}")
    if raw and envelope:
        raise UsageError("--raw and --envelope cannot be combined")
    if key_delimiter is not None and not raw:
        raise UsageError("--key-delimiter needs --raw")
    if key_delimiter is not None:
        from streamctl.formats.inputs import parse_delimiter

        key_delimiter = parse_delimiter(key_delimiter)  # kcat -K's escapes: '\t' is a tab
        if key_delimiter == "":
            raise UsageError("--key-delimiter must not be empty")
        if "\n" in key_delimiter:
            raise UsageError("--key-delimiter cannot hold a newline: the input is split into lines at newlines")
    if key is not None and key_field is not None:
        raise UsageError("--key and --key-field cannot be combined")
    if key is not None and key_delimiter is not None:
        raise UsageError("--key and --key-delimiter cannot be combined (the delimiter takes each line's key)")
    if key_field is not None and (raw or envelope):
        raise UsageError("--key-field applies to JSON value input (not --raw or --envelope)")
    if (exactly_once or source) and not envelope:
        raise UsageError("--exactly-once and --source need --envelope input (records that carry their source)")
    if source is not None and not exactly_once:
        raise UsageError("--source needs --exactly-once")
    if follow and "-" in (files or []):
        raise UsageError("--follow reads files, not stdin (-)")
    if follow and "" in (files or []):
        raise UsageError("--follow: a FILE is an empty name; name a file or a quoted glob to follow")
    if follow and not [f for f in files or [] if f != "-"]:
        raise UsageError("--follow needs FILEs to follow (names or quoted globs); it does not follow stdin "
                         "(for a pipe, run produce without --follow)")
    if follow and exactly_once:
        raise UsageError("--follow is exactly once by itself (positions kept with the log); --exactly-once "
                         "is for --envelope input that carries its source")
    if idle_timeout is not None and not follow:
        raise UsageError("--idle-timeout needs --follow")
    dead_letter = None
    if on_error.startswith("dead-letter="):
        dead_letter = on_error.split("=", 1)[1]
        if not dead_letter:
            raise UsageError("--on-error dead-letter=FILE needs a file name")
        mode = "dead-letter"
    elif on_error in ("fail", "skip"):
        mode = on_error
    else:
        raise UsageError(f"--on-error must be fail, skip or dead-letter=FILE, not {on_error!r}")
    max_bytes = parse_size(max_record_bytes)
    if max_bytes < 1:
        raise UsageError("--max-record-bytes must be at least 1")
    seg_bytes = parse_size(segment_bytes) if segment_bytes else None
    timeout = parse_duration(lock_timeout) / 1000 if lock_timeout else None
    idle = parse_duration(idle_timeout) / 1000 if idle_timeout else None

    from streamctl.clients import produce_run

    produce_run.run(log, files, key_field=key_field, key=key, envelope=envelope, raw=raw, key_delimiter=key_delimiter,
                    source=source, partitions=partitions, partition=partition, segment_bytes=seg_bytes, fsync=fsync,
                    echo=echo, max_record_bytes=max_bytes, on_error=mode, dead_letter=dead_letter,
                    lock_timeout=timeout, exactly_once=exactly_once, say=info,
                    follow=follow, idle_timeout=idle)
