"""streamctl window: tumbling, hopping, sliding and session windows over event time."""

from __future__ import annotations

import typer

from streamctl.commands import numbers, options
from streamctl.commands.common import example, info, parse_size

EPILOG = example(
    "streamctl window requests --tumbling 1m                                # requests per minute per key",
    "streamctl window requests --tumbling 1m --by path --agg count --output table",
    "streamctl window requests --hopping 5m/1m --by path --agg p99_ms=p99:latency_ms --agg avg:latency_ms",
    "streamctl window requests --sliding 5m --by path --agg p99:latency_ms  # rolling p99 per request",
    "streamctl window clicks --session 30m --by user --agg count --agg first:page --agg last:page",
    "streamctl window events.jsonl --tumbling 1h --time-field at --on-bad-time fail --output csv",
    "cat events.jsonl | streamctl window - --tumbling 10s --processing-time --emit update",
    "streamctl consume clicks --follow --value | streamctl window - --tumbling 10s --time-field at  # rows as windows close",
    "streamctl window orders --tumbling 1m --lateness 30s --late correct --agg sum:amount --agg distinct:user",
    "streamctl window orders --tumbling 1m --late drop --late-out late.jsonl --agg max:amount --agg min:amount",
    "streamctl window requests --tumbling 1h --by path --agg approx_p99:latency_ms --agg users=approx_distinct:user",
    "streamctl window orders --tumbling 1m --follow --group dash --idle-timeout 10m  # kill -9 safe",
    "streamctl window big --tumbling 1h --engine spark --master local[4] --spark-threshold 1GiB",
    "streamctl window big --tumbling 1h --engine spark --emit-job job.py && spark-submit job.py",
)

HELP = """Aggregate over event-time windows; one JSON object per window and group.

Rows look like {"window": {"start": ISO, "end": ISO}, "key": K, "count": 12, ...}.
Windows are half-open [start, end), aligned to the Unix epoch in UTC. Choose one
of --tumbling SIZE, --hopping SIZE/HOP, --sliding SIZE (one row per event,
aggregating that group's events in [t - SIZE, t], both ends inclusive) or
--session GAP (events at most GAP apart merge; end = last event + GAP).

Time: --time-field (default ts, the append time; in a plain file, the value's
own ts field) holds ISO-8601 (naive = UTC) or epoch s/ms/us numbers (read by
magnitude). Records without a usable time are skipped and counted on stderr
(--on-bad-time skip, the default: logs often mix event types), or stop the
run with exit 65 (--on-bad-time fail).

Watermark = the largest event time seen so far in input order minus --lateness;
a window closes (and is written, with --emit final) when the watermark reaches
its end; end of input flushes all. INPUT - read from a pipe writes each row,
flushed, as its window closes, while the pipe stays open. An event for a window that already closed
(a session event also when it lies within GAP of a closed session of its
group) is late: dropped and counted on stderr (--late drop), or it produces an
updated row with "revision": n (--late correct, which keeps closed windows in
memory to revise them), and with --late-out FILE it is also written to FILE.
With --emit update or --late correct, a session whose bounds change withdraws
its old row with {"window": OLD, "key": K, "op": "delete"}.
Rows come out in window-close order, ties by window start, then group key
(null, false, true, numbers by value, strings by code point, arrays element by
element, objects).

Input order: each partition keeps its stored order, and partitions are merged
by event time (a record sorts by the largest event time in its partition up to
it, then partition, offset), so only an event out of order within its own
partition can be late, however the log was produced; runs agree on lateness.
--follow merges what is available the same way (a quiet partition does not
hold the others back), so it can differ from a batch run only in which events
are late.

Aggregations (--agg, repeatable, default count): count, sum, avg, min, max,
p50, p90, p99 (exact, linear interpolation like Spark's percentile), distinct
(exact), first, last (input order), stddev (sample standard deviation, Spark's
stddev: null under 2 values), approx_distinct (HyperLogLog, within 2%) and
approx_p50, approx_p90, approx_p99 (a KLL sketch: one of the values, rank within
1%); the approximate ones keep a few KiB a window and give the same result on
both engines and every run. Written FUNC:PATH or NAME=FUNC:PATH; the field is
named FUNC_LASTSEGMENT by default. distinct and approx_distinct tell values
apart by their JSON text (1, 1.0 and "1" are three). Values that are not
numbers, for a numeric aggregation, are ignored and counted on stderr; missing
ones are ignored like SQL NULLs.

--follow --group G checkpoints input offsets and window state together,
atomically, so a kill -9 and restart neither loses nor double-counts (rows
written after the last checkpoint are written again, identically).
--idle-timeout DUR then ends a run leaving the open windows in the checkpoint:
each window is written once, by the run whose watermark closes it; the counts
on stderr are the run's own. Without --group, the idle timeout flushes the
open windows like the end of input. The Spark
engine (finite input, --late drop, --emit final) gives the same rows, order
and late count: it replays the watermark as a running max over the input order.
Memory is bounded by open windows and groups, not by input length.
"""


def register(app: typer.Typer) -> None:
    app.command("window", epilog=EPILOG, help=HELP)(window)


def window(
    input_: str = typer.Argument(..., metavar="INPUT", help="A log, a plain .jsonl file, or - for stdin."),
    tumbling: str | None = typer.Option(None, "--tumbling", callback=numbers.window("tumbling"), metavar="SIZE", help="Fixed, non-overlapping windows of SIZE (e.g. 1m)."),
    hopping: str | None = typer.Option(None, "--hopping", callback=numbers.window("hopping"), metavar="SIZE/HOP", help="Windows of SIZE starting every HOP (e.g. 10m/1m)."),
    sliding: str | None = typer.Option(None, "--sliding", callback=numbers.window("sliding"), metavar="SIZE", help="One row per event over its group's last SIZE, both ends inclusive."),
    session: str | None = typer.Option(None, "--session", callback=numbers.window("session"), metavar="GAP", help="Sessions of events at most GAP apart."),
    by: list[str] | None = typer.Option(None, "--by", metavar="PATH", help="Group by this field (repeatable: the key becomes a list). Default: the record key."),
    time_field: str = typer.Option("ts", "--time-field", metavar="PATH", help="Event-time field: ISO-8601 or epoch s/ms/us (default ts)."),
    processing_time: bool = typer.Option(False, "--processing-time", help="Use the wall clock when each record is processed instead of an event time."),
    on_bad_time: str = typer.Option("skip", "--on-bad-time", metavar="skip|fail", help="A record without a usable time: skip and count it (default) or stop with exit 65."),
    agg: list[str] | None = typer.Option(None, "--agg", metavar="SPEC", help="FUNC[:PATH] or NAME=FUNC:PATH (repeatable; default count)."),
    lateness: str = typer.Option("0s", "--lateness", callback=numbers.duration(), metavar="DUR", help="How far the watermark trails the largest event time seen (default 0)."),
    late: str = typer.Option("drop", "--late", metavar="drop|correct", help="Events for a closed window (a session: also within GAP of a closed one): drop and count them (default), or emit a corrected row with a revision."),
    late_out: str | None = typer.Option(None, "--late-out", metavar="FILE", help="Also write late events to FILE (a log's records as stored JSON, a plain file's values)."),
    emit: str = typer.Option("final", "--emit", metavar="final|update", help="final: each window once, when it closes; update: a row at every change. A session whose bounds change withdraws its old row with {\"window\": OLD, \"key\": K, \"op\": \"delete\"}."),
    output: str = typer.Option("jsonl", "--output", "-o", metavar="jsonl|csv|table", help="Output format (table is for people: it buffers the rows and is written at the end; with --follow, before each checkpoint)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep running on a LOG, emitting windows as the watermark moves."),
    group: str | None = typer.Option(None, "--group", "-g", metavar="G", help="With --follow: checkpoint input offsets and window state together in LOG/groups/.G.window.json."),
    idle_timeout: str | None = typer.Option(None, "--idle-timeout", callback=numbers.duration(), metavar="DUR", help="With --follow: exit after DUR without new records. With --group the open windows stay in the checkpoint, written once a later run closes them; without, they are flushed like at end of input."),
    engine: str = options.engine(),
    spark_threshold: str | None = options.spark_threshold(),
    master: str | None = options.master(),
    emit_job: str | None = options.emit_job("INPUT may then be any Spark URI (hdfs://, s3a://)."),
) -> None:
    from streamctl.errors import UsageError
    from streamctl.processing.windows.config import WindowConfig
    from streamctl.spark import window_run
    from streamctl.timeparse import parse_duration

    chosen = [n for n, v in (("--tumbling", tumbling), ("--hopping", hopping), ("--sliding", sliding),
                             ("--session", session)) if v is not None]
    if len(chosen) != 1:
        raise UsageError("choose exactly one of --tumbling SIZE, --hopping SIZE/HOP, --sliding SIZE, --session GAP"
                         + (f" (got {' and '.join(chosen)})" if chosen else ""))
    # (each flag's callback checked its value already: numbers.window_size)
    kind, text = next((k, v) for k, v in (("tumbling", tumbling), ("hopping", hopping), ("sliding", sliding),
                                          ("session", session)) if v is not None)
    size, hop = numbers.window_size(kind, text, chosen[0])
    hop = hop if kind == "hopping" else 0
    if output not in ("jsonl", "csv", "table"):
        raise UsageError(f"--output must be jsonl, csv or table, not {output!r}")
    cfg = WindowConfig(kind=kind, size=size, hop=hop, by=list(by or []), time_field=time_field,
                       processing_time=processing_time, on_bad_time=on_bad_time, aggs=list(agg or ["count"]),
                       lateness=parse_duration(lateness), late=late, emit=emit)
    threshold = parse_size(spark_threshold) if spark_threshold is not None else None
    window_run.run(input_, cfg, output, follow, group, idle_timeout, late_out, engine, threshold, master, emit_job,
                   info)
