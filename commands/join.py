"""streamctl join: stream-stream window joins, stream-table enrichment, table-table changelogs."""

from __future__ import annotations

import typer

from streamctl.commands import numbers, options
from streamctl.commands.common import example, info, parse_size

EPILOG = example(
    "# click-through: searches without a click within 1h (each comes out once the watermark is 1h past it)",
    "streamctl join searches clicks --within 1h --on query_id --how left --unbuffered | jq -c 'select(.right == null)'",
    "streamctl join searches.jsonl clicks.jsonl --within 30m --on id=search_id --time-field at=clicked_at --how outer",
    "# events up to 2m out of order still find their partners; later ones are counted and kept",
    "streamctl join searches clicks --within 1m --on key --time-field value.at --lateness 2m --late-out late.jsonl",
    "# profile enrichment: each event with the profile row current at its position (log keyed by user)",
    "streamctl join events profiles --table --how left --output table",
    "streamctl join events profiles --table --on user=key --as-of event-time --time-field at=ts --table-retention 30d",
    "# live: each view enriched as it arrives; offsets, the on-disk table and pending state checkpointed together",
    "streamctl join views cdc/public.profiles --table --on user_id=id --how left --follow --group enrich >> enriched.jsonl",
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
key/ts/offset/partition/headers/value is under value: user.id = value.user.id;
headers.NAME is a header of the envelope).
A plain file's offset is its line number (from 0) and its partition 0; it has
no record key, headers or append time: join it on a value field (or offset).
A changelog's table key is its join key; a tombstone (null value) deletes the
key equal to its record key. Keys match when their JSON is equal ("7" is not 7); null keys
never match. Event time: --time-field PATH or A=B (default ts, the append
time; in a plain file, the value's own ts field, as in window); ISO-8601 or
epoch s/ms/us numbers. A stream event without a usable time is skipped and
counted on stderr where the join needs its time: stream-stream (--within) and
--as-of event-time. An enrichment as of position (--table) needs none: such an
event keeps its place in its partition's order and is joined, uncounted, and
--tables takes every change.

\b
Watermark and lateness (--within, and --table --as-of event-time): the
watermark is the largest event time seen so far in the input order minus
--lateness DUR (default 0). A stream-stream event whose time + --within is
already behind the watermark when it arrives can no longer find its partners;
nor can one that arrives after a partner (the other side, the same key, a time
at most --within away) has left the window, its time + --within passed by the
watermark (and with --how keeping it, already written unmatched). Either is
late -- not joined at all and not emitted, even as unmatched -- and counted on
stderr at exit; --late-out FILE keeps it (a log's record as stored JSON, a
plain file's value line). So every pair of events that are not late comes
out, and no unmatched row is ever contradicted. In an as-of join an event
waits until the watermark passes its time, and one that arrives behind it is
answered at once, exactly; a table change whose time is behind the watermark
when it arrives is late: rows already written may not have seen it; it still
applies from then on, and it is counted (and kept by --late-out). A
--lateness as large as how far event times run out of order means nothing is
late.

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

\b
Follow mode (--follow, two logs): keeps running and writes rows as records
arrive, merged in the input order among the records there (a partition with
nothing new does not hold the others back). With --group G, both inputs'
offsets and the join state (stream-stream buffers, the table and its
versions, waiting as-of events, the watermark) are checkpointed together in
one SQLite transaction in LEFT/groups/.G.join.db, after the rows they produced
were written: after kill -9 a rerun loses no row and joins no event twice;
rows written after the last checkpoint are written again, identical. The
tables live on disk there (a bounded cache in memory), and a checkpoint
writes only what changed. stat shows the group's lag on both inputs. The
counts on stderr (late events, events without a time) are this run's.
--idle-timeout DUR exits after DUR without new records, without writing what
only the end of input would (unmatched events that could still match stay
pending in the checkpoint). SIGTERM/Ctrl-C checkpoint and exit (0/130).
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
    time_field: str | None = typer.Option(None, "--time-field", metavar="PATH[=PATH]", help="Event time field(s) (default ts, the append time; a plain file's value.ts)."),
    how: str | None = typer.Option(None, "--how", metavar="inner|left|right|outer", help="Which unmatched events to keep (default inner). --table takes inner|left; --tables is inner."),
    as_of: str | None = typer.Option(None, "--as-of", metavar="position|event-time", help="With --table: the row at the event's position in the input (default) or the version current at its event time."),
    table_retention: str | None = typer.Option(None, "--table-retention", callback=numbers.duration(), metavar="DUR", help="With --as-of event-time: keep table versions only back to watermark - DUR."),
    lateness: str | None = typer.Option(None, "--lateness", callback=numbers.duration(), metavar="DUR", help="How far the watermark trails the largest event time seen (default 0); with --within or --as-of event-time."),
    late_out: str | None = typer.Option(None, "--late-out", metavar="FILE", help="Write late records to FILE (a log's records as stored JSON, a plain file's values)."),
    output: str = typer.Option("jsonl", "--output", "-o", metavar="jsonl|csv|table", help="jsonl for scripts (default), csv, or an aligned table for people (buffers the rows; with --follow, written before each checkpoint)."),
    engine: str = options.engine(),
    spark_threshold: str | None = options.spark_threshold(),
    master: str | None = options.master(),
    emit_job: str | None = options.emit_job(),
    unbuffered: bool = options.unbuffered("row"),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep running on two logs, writing rows as records arrive."),
    group: str | None = typer.Option(None, "--group", "-g", metavar="G", help="With --follow: checkpoint both inputs' offsets and the join state together in LEFT/groups/.G.join.db."),
    idle_timeout: str | None = typer.Option(None, "--idle-timeout", callback=numbers.duration(), metavar="DUR", help="With --follow: exit after DUR without new records (what could still match stays pending in the checkpoint)."),
) -> None:
    from streamctl.errors import UsageError
    from streamctl.formats.table import OUTPUTS
    from streamctl.processing.joins import driver as joining
    from streamctl.spark import join_run

    if output not in OUTPUTS:
        raise UsageError(f"--output must be one of {', '.join(OUTPUTS)}, not {output!r}")
    spec = joining.make_spec(left, right, within=within, table=table, tables=tables, on=on, time_field=time_field,
                             how=how, as_of=as_of, table_retention=table_retention, lateness=lateness)
    threshold = parse_size(spark_threshold) if spark_threshold is not None else None
    join_run.run(spec, output, late_out, engine, threshold, master, emit_job, unbuffered, info, follow, group,
                 idle_timeout)
