"""The Spark engine of `streamctl replay`: the job's parameters, and running or emitting the job.

The job module is streamctl/spark/replay_job.py (rendered by jobgen). Run here,
the job reads each active segment from a copy taken up to the replay's end
snapshot (clients.replay.copy_active_segments), made in a temp folder and
removed when the job ends. Diagnostics go to the `say` callback.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from streamctl.clients.replay import Range, ReplaySpec
from streamctl.spark.engine import job_input
from streamctl.storage.log import Log

Say = Callable[[str], None]

RUN_HOW = "  (run by streamctl replay --engine spark)"
EMIT_HOW = ("  spark-submit job.py > out.jsonl                  # the master from spark-submit (default local[*])\n"
            "  spark-submit --master yarn job.py > out.jsonl    # on a cluster\n"
            "  python job.py > out.jsonl                        # plain Python with pyspark, local[*]\n"
            "Relative times (from/until \"ago_ms\") are resolved when the job starts.")


def title(spec: ReplaySpec) -> str:
    what = "Snapshot (latest record per key, tombstones applied)" if spec.compact else "Replay"
    return f"streamctl replay: {what} of a streamctl log, lines unchanged, in (ts, partition, offset) order."


def job_params(log_uri: str, spec: ReplaySpec, relative: bool) -> dict:
    return {
        "log": log_uri,
        "from": spec.start.job_param(relative) if spec.start else None,
        "until": spec.until.job_param(relative) if spec.until else None,
        "key": spec.key,
        "compact": spec.compact,
        "output": None,
        # a folder (file://, hdfs://, s3a://) the driver and every executor can reach: the sorted
        # result is written there by Spark's parallel writer and copied out in order; None = the
        # driver's temp folder on a local master, else the lines stream through the driver
        "scratch": None,
        "master": None,
        "app_name": "streamctl-replay",
        "log_level": "WARN",
    }


def _job(spec: ReplaySpec, how: str, params: dict) -> str:
    from streamctl.spark import jobgen

    return jobgen.render_job(title(spec), how, params, "replay_job")


def emit(log: str, spec: ReplaySpec, master: str | None, target: str, say: Say) -> None:
    """--emit-job: the standalone job, relative times kept relative (resolved when it runs)."""
    from streamctl.spark.runner import write_job

    params = job_params(job_input(log), spec, relative=True)
    params["master"] = master
    write_job(_job(spec, EMIT_HOW, params), target, say)


def run_log(lg: Log, spec: ReplaySpec, ranges: dict[int, Range], master: str | None, now: int, say: Say,
            into: int | None = None) -> Iterator[bytes]:
    """Run the generated job on this machine; yields blocks of result lines (none with `into`)."""
    import shutil
    import tempfile

    from streamctl.clients import replay as core
    from streamctl.spark import runner

    params = job_params(os.path.abspath(lg.path), spec, relative=False)
    params["end_offsets"] = {str(p): r.end for p, r in sorted(ranges.items())}
    params["now_ms"] = now
    params["master"] = master or "local[*]"
    params["spark_conf"] = {"spark.ui.enabled": "false"}
    copies = None
    if params["master"].startswith("local"):
        # executors on this machine can read a temp folder: the job reads the active segments
        # as of now from copies, in one scan with no end filter
        copies = tempfile.mkdtemp(prefix="streamctl-snapshot-")
        params["segment_copies"] = core.copy_active_segments(lg, {p: r.end for p, r in ranges.items()}, copies)
    try:
        job = _job(spec, RUN_HOW, params)
        runner.starting(params["master"], say)
        yield from runner.stream_job(job, master=params["master"], what="Spark replay job", into=into)
    finally:
        if copies is not None:
            shutil.rmtree(copies, ignore_errors=True)


def run_uri(log: str, spec: ReplaySpec, master: str | None, into: int | None = None) -> Iterator[bytes]:
    """A log at a Spark URI (hdfs://, s3a://): the job run here against it; blocks of result lines."""
    from streamctl.spark import runner

    params = job_params(log, spec, relative=False)
    params["master"] = master or "local[*]"
    params["spark_conf"] = {"spark.ui.enabled": "false"}
    return runner.stream_job(_job(spec, RUN_HOW, params), master=params["master"], what="Spark replay job",
                             into=into)
