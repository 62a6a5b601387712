"""Shared fixtures: run the CLI as a user would, and one SparkSession for every Spark test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TIERS = ("unit", "props", "cli", "spark", "capture")

# Test modules of one tier import helpers from another by module name (`from test_replay import
# make_log`); pytest puts a test's own folder on sys.path only when it collects it, so put all now.
for _tier in TIERS:
    if str(Path(__file__).parent / _tier) not in sys.path:
        sys.path.insert(0, str(Path(__file__).parent / _tier))
CLI = [sys.executable, "-m", "streamctl"]
# the PostgreSQL server fixtures (`pg`, `db`) of the capture tests: one server per test session
pytest_plugins = ["pgserver"]


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    env.update(extra)
    return env


def run_cli(*args: str, input: bytes | str | None = None, check: bool = False, timeout: float = 120,
            env: dict[str, str] | None = None, cwd: str | None = None) -> subprocess.CompletedProcess:
    """Run `streamctl ARGS` in a subprocess; stdout/stderr as bytes."""
    if isinstance(input, str):
        input = input.encode()
    proc = subprocess.run([*CLI, *args], input=input if input is not None else b"", capture_output=True,
                          timeout=timeout, env=env or cli_env(), cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"streamctl {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}")
    return proc


def log_records(log: str) -> list[dict]:
    """Every record of a log as parsed JSON, partition by partition (for invariant checks)."""
    import json

    from streamctl.storage import log as logmod
    from streamctl.storage import reader

    lg = logmod.open_log(log)
    return [json.loads(line) for p in range(lg.partitions) for line in reader.iter_lines(lg, p, 0, None)]


def closed_rows(lines: list[bytes], watermark_ms: int) -> list[bytes]:
    """The window rows (JSON lines) of windows a watermark of `watermark_ms` has closed (end <= it):
    what `window --follow --group G` runs write by then, where a batch run also flushes the rest."""
    import json
    from datetime import datetime

    def end_ms(line: bytes) -> int:
        return round(datetime.fromisoformat(json.loads(line)["window"]["end"]).timestamp() * 1000)

    return [ln for ln in lines if ln.strip() and end_ms(ln) <= watermark_ms]


@pytest.fixture
def run():
    return run_cli


@pytest.fixture
def logdir(tmp_path: Path) -> str:
    return str(tmp_path / "log")


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole test run (start-up is ~6 s)."""
    # pyspark is installed by scripts/test: a missing one is a failure, never a skip
    import pyspark
    from pyspark.sql import SparkSession

    # the executors run this interpreter, as the real engine's do (streamctl.spark.runner sets
    # PYSPARK_PYTHON): python3 on PATH may lack what a job imports where used (datasketches)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("streamctl-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    assert pyspark
    yield session
    session.stop()


def window_plain_run(cfg, path: str, batched: bool) -> tuple:
    """A plain-file window run read in pieces (`batched`) or record by record: its rows, stats,
    non-numeric counts, sequence, late records and the data error, if any (for property tests that
    tie the batch kernels to the per-record path)."""
    from streamctl.errors import DataError
    from streamctl.processing import inputorder
    from streamctl.processing.windows.driver import WindowRun
    from streamctl.processing.windows.events import records_of

    late: list = []
    run = WindowRun(cfg, is_log=False, late_sink=late.append)
    rows: list = []
    err = None
    try:
        if batched:
            _is_log, recs = records_of(path, cfg)
            run.feed(recs, rows.extend)
        else:
            run.feed_records(inputorder.records(inputorder.InputSpec(path, False)), rows.extend)
        run.finish(rows.extend)
    except DataError as e:
        err = str(e)
    return rows, vars(run.stats), dict(run.plan.non_numeric), run.seq, late, err
