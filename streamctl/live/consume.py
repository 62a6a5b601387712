"""consume --follow / --exec / --group / --sqlite: the live half of `streamctl consume` (dispatched from
commands/consume.py). Diagnostics go to the `info` callback the command passes in.

Decisions (also in docs/guide/live.md):
- Following commits after every wake-up's records are flushed, so a kill -9
  repeats at most one poll's records (history: at most 1 s of output).
- A run with --group (following or not) reads only partitions no other
  member holds; consume.py routes every --group run here.
- With --group, members split the partitions (flock claims in LOG/groups/);
  a member that starts or dies makes the others rebalance within ~0.5 s.
- --exec with --follow and no --batch-timeout waits at most 1s for a full batch.
- SIGINT: stop, flush, commit what was written, exit 130. SIGTERM: same, exit 0.
- With --group and stdout on a regular file, the file is fsynced before each commit; a pipe or
  a terminal is not (its reader owns durability). --exec: CMD's stdout is consume's, so its
  output to a file is synced the same way; CMD's other side effects are its own to sync.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from streamctl.clients.execsink import ExecPolicy
    from streamctl.clients.filters import Filter
    from streamctl.clients.replay import Bound
    from streamctl.clients.sqlitesink import SqliteTarget
    from streamctl.live.cursor import Sink

FOLLOW_BATCH_TIMEOUT = 1.0
# While catching up on history, commit at most this often (a commit is a rename and two fsyncs).
COMMIT_INTERVAL = 1.0


def run(log: str, group: str | None, from_: str | None, partition: int | None, max_: int | None,
        value: bool, fmt: str | None, follow: bool, idle_timeout: str | None, exec_: str | None,
        batch: int, batch_timeout: str | None, unbuffered: bool, flt: Filter | None = None,
        until: Bound | None = None, sqlite: SqliteTarget | None = None,
        exec_policy: ExecPolicy | None = None, info: Callable[[str], None] = lambda msg: None) -> None:
    from streamctl import stopflag
    from streamctl.clients import consumer
    from streamctl.formats.records import renderer
    from streamctl.formats.template import log_name
    from streamctl.formats.writer import Output
    from streamctl.live.cursor import FilterSink, LiveOptions, PrintSink, consume_live
    from streamctl.storage import log as logmod
    from streamctl.timeparse import parse_duration

    idle = parse_duration(idle_timeout) / 1000 if idle_timeout else None
    btimeout = parse_duration(batch_timeout) / 1000 if batch_timeout else None
    if btimeout is None and exec_ is not None and follow:
        btimeout = FOLLOW_BATCH_TIMEOUT
    lg = logmod.open_log(log)
    parts = consumer.check_partition_arg(lg, partition)
    render = renderer(value, fmt, log_name(log))
    committer = consumer.Committer(lg, group, interval=COMMIT_INTERVAL)
    table_sink = None
    sink: Sink
    if sqlite is not None and group is not None:
        from streamctl.clients.sqlitesink import open_sink

        # rows and offsets go into the database together; it says where each partition resumes
        stopflag.install()  # Ctrl-C while waiting for a lock on FILE: stop there, exit 130
        sink = table_sink = open_sink(lg, group, parts, from_, sqlite.path, sqlite.table, sqlite.mode, batch,
                                      btimeout if follow else None, info, interval=COMMIT_INTERVAL)
        committer = table_sink.committer
        from_ = None
    elif exec_ is not None:
        from streamctl.clients.execsink import ExecBatcher

        sink = ExecBatcher(exec_, batch, btimeout, committer, render, group, exec_policy, info)
    else:
        out = Output(unbuffered=True if unbuffered else None)
        sink = PrintSink(out, render, committer, per_line=max_ is not None and len(parts) > 1)
    if group is not None and sqlite is None:
        # stdout on a regular file: fsynced before each commit (with --exec too: CMD inherits it)
        committer.make_durable = consumer.file_syncer(sys.stdout.fileno())
    if flt is not None:
        # skipped records are committed only where the sink holds nothing undelivered before them
        sink = FilterSink(sink, flt.select, committer)
    wake = 0.2
    for t in (idle, btimeout):
        if t is not None:
            wake = max(0.001, min(wake, t / 4))
    opts = LiveOptions(parts, group, from_, follow, max_, idle, wake_every=wake, until=until,
                       starts=table_sink.committer.resume_offsets if table_sink is not None else None)
    stopflag.install()
    try:
        res = consume_live(lg, opts, sink, committer, info)
    finally:
        if table_sink is not None:
            table_sink.committer.table.close()
    if table_sink is not None:
        from streamctl.clients.sqlitesink import report

        for note in report(table_sink):
            info(note)
    if res.stopped_by is not None:
        stopflag.end("interrupted; offsets of the records written were committed" if group else "interrupted")
