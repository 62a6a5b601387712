"""streamctl join: stream-stream window joins, stream-table enrichment, table-table changelogs."""

from __future__ import annotations

import typer

from streamctl.commands import numbers, options
from streamctl.commands.common import example, info, write_job

EPILOG = example(
    "# click-through: searches without a click within 1h (each comes out once the watermark is 1h past it)",
    "streamctl join searches clicks --within 1h --on query_id --how left --unbuffered | jq -c 'select(.right == null)'",
    "streamctl join searches.jsonl clicks.jsonl --within 30m --on id=search_id --time-field at=clicked_at --how outer",
    "# events up to 2m out of order still find their partners; later ones are counted and kept",
    "streamctl join searches clicks --within 1m --on key --time-field value.at --lateness 2m --late-out late.jsonl",
    "# profile enrichment: each event with the profile row current at its position (log keyed by user)",
    "streamctl join events profiles --table --how left --output table",
    "streamctl join events profiles --table --on user=key --as-of event-time --time-field at=ts --table-retention 30d",
    "# a follower timeline view: latest post per author x follower list, as an upsert/delete changelog",
    "streamctl join posts followers --tables --output csv",
    "streamctl join big-events profiles --table --engine spark --master local[4] --spark-threshold 1GiB",
    "streamctl join events profiles --table --emit-job enrich.py && spark-submit enrich.py",
)

HELP = """Join two inputs (logs, .jsonl files or - for stdin) into {"key", "left", "right"} rows.

\b
Three kinds (choose one):
  --within DUR   stream-stream: pairs with equal key and event times at most
                 DUR apart (inclusive). An event without a match comes out
                 with the other side null (--how left|right|outer) only once
                 the watermark passes its time + DUR: never an eager null
                 that a later match contradicts.
  --table        stream-table: RIGHT is a changelog (latest value per key, a
                 null value deletes the key). Each LEFT event gets the row as
                 it stands at the event's position in the input order, or with
                 --as-of event-time the version whose time is at or before the
                 event's (the event waits until the watermark passes its time).
  --tables       table-table: both are changelogs; the output is the changelog
                 of their inner join, rows with "op": "upsert" or "op": "delete"
                 (a delete carries the row as it was). Folding it by key gives
                 the join of the two final tables.

\b
Keys: --on omitted = the record key on both sides; --on PATH = the same field
on both sides; --on A=B = A on LEFT, B on RIGHT (a path not starting with
key/ts/offset/partition/value is under value: user.id = value.user.id).
A plain file has no record key: join it on a value field. A changelog's table
key is its join key; a tombstone (null value) deletes the key equal to its
record key. Keys match when their JSON is equal ("7" is not 7); null keys
never match. Event time: --time-field PATH or A=B (default ts, the append
time); ISO-8601 or epoch s/ms/us numbers. A stream event without a usable
time is skipped and counted on stderr.

\b
Watermark and lateness (--within, and --table --as-of event-time): the
watermark is the largest event time seen so far in the input order minus
--lateness DUR (default 0). A stream-stream event whose time + --within is
already behind the watermark when it arrives can no longer find its partners:
it is late -- not joined and not emitted, even as unmatched -- and counted on
stderr at exit; --late-out FILE keeps it (a log's record as stored JSON, a
plain file's value line). In an as-of join an event waits until the watermark
passes its time, and one that arrives behind it is answered at once, exactly;
a table change whose time is behind the watermark when it arrives is late:
rows already written may not have seen it; it still applies from then on,
and it is counted (and kept by --late-out). A --lateness as large as how far
event times run out of order means nothing is late.

\b
Input order (the same on every run and on both engines): every partition of
every input, and every plain file, keeps its own order, and they are merged
by event time (--time-field) the way Kafka Streams picks the partition whose
next record is oldest: by the largest event time in its partition so far,
then LEFT before RIGHT (with --table, the table first), partition, offset.
So two logs produced a day apart, or a partitioned log filled by one
produce, are read in event-time order. Stream-stream rows: pairs when the
later event arrives, then unmatched events as the watermark passes them, by
(time, position). State is bounded by the window (stream-stream) or the
table size (plus --table-retention history).
"""


def register(app: typer.Typer) -> None:
    app.command("join", epilog=EPILOG, help=HELP)(join)


def join(
    left: str = typer.Argument(..., metavar="LEFT", help="Left input: a log folder, a .jsonl file, or -."),
    right: str = typer.Argument(..., metavar="RIGHT", help="Right input: a log folder, a .jsonl file, or -."),
    within: str | None = typer.Option(None, "--within", callback=numbers.duration(), metavar="DUR", help="Stream-stream join: event times at most DUR apart (500ms, 5m, 1h, PT1H)."),
    table: bool = typer.Option(False, "--table", help="Stream-table join: RIGHT is a changelog table."),
    tables: bool = typer.Option(False, "--tables", help="Table-table join: both inputs are changelogs; output is an upsert/delete changelog."),
    on: str | None = typer.Option(None, "--on", metavar="PATH[=PATH]", help="Join key: one path for both sides or LEFT=RIGHT (default: the record key)."),
    time_field: str | None = typer.Option(None, "--time-field", metavar="PATH[=PATH]", help="Event time field(s) (default ts, the append time)."),
    how: str | None = typer.Option(None, "--how", metavar="inner|left|right|outer", help="Which unmatched events to keep (default inner). --table takes inner|left; --tables is inner."),
    as_of: str | None = typer.Option(None, "--as-of", metavar="position|event-time", help="With --table: the row at the event's position in the input (default) or the version current at its event time."),
    table_retention: str | None = typer.Option(None, "--table-retention", callback=numbers.duration(), metavar="DUR", help="With --as-of event-time: keep table versions only back to watermark - DUR."),
    lateness: str | None = typer.Option(None, "--lateness", callback=numbers.duration(), metavar="DUR", help="How far the watermark trails the largest event time seen (default 0); with --within or --as-of event-time."),
    late_out: str | None = typer.Option(None, "--late-out", metavar="FILE", help="Write late records to FILE (a log's records as stored JSON, a plain file's values)."),
    output: str = typer.Option("jsonl", "--output", "-o", metavar="jsonl|csv|table", help="jsonl for scripts (default), csv, or an aligned table for people (buffers all rows)."),
    engine: str = options.engine(),
    spark_threshold: str | None = options.spark_threshold(),
    master: str | None = options.master(),
    emit_job: str | None = options.emit_job(),
    unbuffered: bool = options.unbuffered("row"),
) -> None:
    from streamctl.errors import UsageError
    from streamctl.formats.table import OUTPUTS
    from streamctl.processing.joins import driver as joining

    if output not in OUTPUTS:
        raise UsageError(f"--output must be one of {', '.join(OUTPUTS)}, not {output!r}")
    spec = joining.make_spec(left, right, within=within, table=table, tables=tables, on=on, time_field=time_field,
                             how=how, as_of=as_of, table_retention=table_retention, lateness=lateness)
    if late_out is not None and not spec.has_watermark:
        raise UsageError("--late-out needs a watermark: --within DUR, or --table --as-of event-time")
    specs = joining.check_inputs(spec)
    threshold = None
    if spark_threshold is not None:
        from streamctl.commands.common import parse_size

        threshold = parse_size(spark_threshold)

    if emit_job is not None:
        if late_out is not None:
            raise UsageError("--late-out writes a local file; the Spark job reports the late count only")
        if "-" in (left, right):
            raise UsageError("--emit-job needs files or logs, not stdin (-)")
        write_job(joining.job_text(joining.job_params(spec, specs, master, snapshot=False)), emit_job)
        return

    chosen = "local"
    if engine != "local" or master is not None:
        from streamctl.spark.engine import choose_engine

        if "-" in (left, right) and engine == "spark":
            raise UsageError("--engine spark needs files or logs, not stdin (-)")
        if late_out is not None and engine == "spark":
            raise UsageError("--late-out writes a local file: use --engine local (the Spark engine reports "
                             "the late count)")
        size = 0 if "-" in (left, right) else _input_bytes([s.path for s in specs])
        requested = engine
        if late_out is not None and engine == "auto":
            from streamctl.spark.engine import DEFAULT_SPARK_THRESHOLD

            requested = "local"
            if size >= (threshold if threshold is not None else DEFAULT_SPARK_THRESHOLD):
                info("engine: local (input is above the Spark threshold, but --late-out writes a local file)")
        chosen = choose_engine(requested, size, threshold, info) if "-" not in (left, right) else "local"

    from streamctl.formats.writer import Output

    out = Output(unbuffered=True if unbuffered else None)
    if chosen == "spark":
        _report(spec, _run_spark(spec, specs, master, output, out), None)
        return
    rows_buffer: list[dict] | None = [] if output == "table" else None
    write_jsonl = None
    write = out.write
    if output == "jsonl":
        import orjson

        dumps = orjson.dumps
        nl = orjson.OPT_APPEND_NEWLINE

        def emit(key: object, lv: object, rv: object) -> None:
            write(dumps({"key": key, "left": lv, "right": rv}, option=nl))

        def emit_op(op: str, key: object, lv: object, rv: object) -> None:
            write(dumps({"key": key, "left": lv, "right": rv, "op": op}, option=nl))

        def write_jsonl(data: bytes) -> None:
            # a batch of rows; a terminal still gets them row by row
            if out.limit:
                write(data)
            else:
                for line in data[:-1].split(b"\n"):
                    write(line + b"\n")
    else:
        with_op = spec.kind == "tables"
        if rows_buffer is None:
            write(_csv_header(with_op))

        def sink(row: dict) -> None:
            if rows_buffer is not None:
                rows_buffer.append(row)
            else:
                write(_csv_row(row, with_op))

        def emit(key: object, lv: object, rv: object) -> None:
            sink({"key": key, "left": lv, "right": rv})

        def emit_op(op: str, key: object, lv: object, rv: object) -> None:
            sink({"key": key, "left": lv, "right": rv, "op": op})

    late_file, late_sink = _late_writer(late_out)
    try:
        stats = joining.run(spec, emit, emit_op, write_jsonl=write_jsonl, late=late_sink)
    finally:
        if late_file is not None:
            late_file.close()
    if rows_buffer:
        write(_table_text(rows_buffer))
    out.flush()
    _report(spec, stats, late_out)


def _late_writer(late_out: str | None):
    """The --late-out file and a sink writing late records' lines to it (None, None without it)."""
    if late_out is None:
        return None, None
    import os

    from streamctl.errors import UsageError
    from streamctl.storage.fsutil import NOFOLLOW

    try:
        fd = os.open(late_out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW, 0o644)
    except OSError as e:
        raise UsageError(f"--late-out {late_out}: cannot open: {e.strerror}") from None
    f = os.fdopen(fd, "wb")
    return f, (lambda _side, line: f.write(line))


def _report(spec, stats, late_out: str | None) -> None:
    skipped = sum(stats.no_time)
    if skipped:
        info(f"{skipped} event(s) without a usable time in {'.'.join(spec.time_field[0])} were skipped "
             f"(LEFT {stats.no_time[0]}, RIGHT {stats.no_time[1]})")
    late = sum(stats.late)
    if not late:
        return
    extra = f"; written to {late_out}" if late_out else ""
    if spec.kind == "stream":
        hint = " (wait longer with --lateness DUR" + (")" if late_out else ", or keep them with --late-out FILE)")
        info(f"warning: {late} late event(s) DROPPED (LEFT {stats.late[0]}, RIGHT {stats.late[1]}): their time "
             f"+ --within was already behind the watermark when they arrived, so they were not joined{extra}{hint}")
    else:
        info(f"warning: {late} late table change(s): their time was already behind the watermark when they "
             f"arrived, so rows written before them may lack them (applied from then on){extra} "
             f"(wait longer with --lateness DUR)")


def _input_bytes(paths: list[str]) -> int:
    import os

    total = 0
    for p in paths:
        if os.path.isdir(p):
            for root, _dirs, files in os.walk(p):
                total += sum(os.path.getsize(os.path.join(root, f)) for f in files if f.endswith(".jsonl"))
        else:
            total += os.path.getsize(p)
    return total


def _run_spark(spec, specs, master, output, out):
    """Run the join as a Spark job; rows to `out`, and the job's counts back as JoinStats."""
    import sys

    import orjson

    from streamctl.processing.joins import driver as joining
    from streamctl.spark.runner import run_job

    params = joining.job_params(spec, specs, master or "local[*]")
    params["stats_line"] = True
    text = joining.job_text(params)
    if sys.stderr.isatty():
        info(f"starting the Spark job on {params['master']} (the JVM takes a few seconds to start)")
    counts: dict = {}
    blocks: list[bytes] = []

    def take(block: bytes) -> None:
        # the job's last line carries its counts, after every row
        cut = block.rfind(b"\n", 0, len(block) - 1) + 1
        if block.startswith(STATS_PREFIX, cut):
            counts.update(orjson.loads(block[cut + len(STATS_PREFIX):]))
            block = block[:cut]
        if not block:
            return
        if output == "jsonl":
            out.write(block)
        else:
            blocks.append(block)

    run_job(text, take, master=master, what="Spark join job")
    if output != "jsonl":
        rows = [orjson.loads(ln) for block in blocks for ln in block.splitlines() if ln]
        if output == "csv":
            with_op = spec.kind == "tables"
            out.write(_csv_header(with_op) + b"".join(_csv_row(r, with_op) for r in rows))
        elif rows:
            out.write(_table_text(rows))
    out.flush()
    stats = joining.JoinStats()
    stats.no_time = list(counts.get("no_time", [0, 0]))
    stats.late = list(counts.get("late", [0, 0]))
    return stats


STATS_PREFIX = b"#streamctl-stats "


# CSV streams, so its columns are fixed: key, left, right (and op), objects as JSON text.
def _csv_header(with_op: bool) -> bytes:
    return b"key,left,right,op\n" if with_op else b"key,left,right\n"


def _csv_row(row: dict, with_op: bool) -> bytes:
    import csv
    import io

    import orjson

    def cell(v: object) -> object:
        if v is None:
            return ""
        if isinstance(v, (dict, list, bool)):
            return orjson.dumps(v).decode()
        return v

    buf = io.StringIO()
    cells = [cell(row["key"]), cell(row["left"]), cell(row["right"])]
    if with_op:
        cells.append(row["op"])
    csv.writer(buf, lineterminator="\n").writerow(cells)
    return buf.getvalue().encode()


def _table_text(rows: list[dict]) -> bytes:
    """An aligned table for people: left and right flattened (left.user, right.plan), columns from all rows."""
    from streamctl.formats.table import flatten, table

    flat = [flatten(r) for r in rows]
    cols: dict[str, None] = {}
    for r in flat:
        for k in r:
            cols.setdefault(k, None)
    # a side that is null in one row and an object in another shows as empty cells, not a "left" column
    for side in ("left", "right"):
        if side in cols and any(c.startswith(side + ".") for c in cols) and all(r.get(side) is None for r in flat):
            del cols[side]
    return table(flat, list(cols)).encode() + b"\n"
