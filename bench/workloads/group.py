"""consume --group: throughput with offset commits vs the same consume without a group."""

from __future__ import annotations

import itertools

from bench.datagen import segments, size
from bench.runner import Bench, Contestant


def run(b: Bench) -> None:
    n = b.records
    log = b.data.events_log(n)
    nbytes = size(segments(log))
    counter = itertools.count()
    group = "consume --group (commits)"

    # A fresh group name per run, so each run reads the whole log and commits as it goes.
    class Fresh(Contestant):
        @property
        def argv(self) -> list[str]:  # type: ignore[override]
            return b.sc("consume", str(log), "--group", f"bench-{next(counter)}")

        @argv.setter
        def argv(self, _: list[str]) -> None:
            pass

    out = str(b.work / "group-out.jsonl")  # opened anew (truncated) for each run
    rows = b.compare(group, [
        Fresh("streamctl consume --group G (new group)", [], subject=True),
        # stdout on a regular file: consume fsyncs it before each commit (a pipe it never syncs)
        Fresh("streamctl consume --group G > file (fsync before each commit)", [], subject=True, stdout=out),
        Contestant("streamctl consume > file (no group: no commit, no fsync)", b.sc("consume", str(log)), stdout=out),
        Contestant("streamctl consume (no group)", b.sc("consume", str(log))),
        Contestant("streamctl consume --group G --value", b.sc("consume", str(log), "--value", "--group", "bench-v"),
                   subject=True, setup=lambda: _drop_group(log, "bench-v")),
    ], records=n, nbytes=nbytes, note="commits at least every second and at exit")
    del rows
    for p in log.glob("groups/bench-*"):
        p.unlink()


def _drop_group(log, g: str) -> None:
    for p in log.glob(f"groups/{g}.json"):
        p.unlink()
