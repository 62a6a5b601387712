"""The Spark engine against a real standalone cluster: a master and a worker started with pyspark's own
`spark-class`, the job handed `--master spark://...`, its output compared with the local engine's.

The worker runs on this machine, so the executors read the logs by their local paths (a cluster
elsewhere would need the logs on a shared file system or hdfs://). Everything binds to 127.0.0.1
on free ports; master and worker (and the executors the worker starts) are stopped at the end.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import cli_env, run_cli

from test_window_spark import late_notes, same_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]

T0 = 1_763_719_200_000
REGISTER_TIMEOUT = 180.0  # seconds for the JVMs to start and the worker to register (a busy 2-core machine)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """Stop a daemon started in its own session, and whatever it started (the worker's executors)."""
    for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _wait_for(path: Path, text: str, procs: list[subprocess.Popen], deadline: float) -> None:
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return
        for p in procs:
            if p.poll() is not None:
                pytest.fail(f"a Spark daemon exited with {p.returncode}; its log:\n{path.read_text(errors='replace')[-3000:]}")
        time.sleep(0.5)
    pytest.fail(f"no {text!r} in {path} after {REGISTER_TIMEOUT:.0f} s:\n{path.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """spark://127.0.0.1:PORT of a running standalone master with one registered 1-core worker, and the
    environment the CLI must run with (SPARK_LOCAL_IP, so the driver is reachable on the same address)."""
    import pyspark  # installed by scripts/test: a missing one is a failure, never a skip

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    folder = tmp_path_factory.mktemp("cluster")
    env = cli_env(SPARK_LOCAL_IP="127.0.0.1", SPARK_HOME=str(spark_class.parent.parent))
    # no REST submission server: it would take the fixed port 6066 another test run may hold
    props = folder / "spark-defaults.conf"
    props.write_text("spark.master.rest.enabled false\n")
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    master_log, worker_log = folder / "master.log", folder / "worker.log"
    procs: list[subprocess.Popen] = []
    try:
        with open(master_log, "wb") as out:
            procs.append(subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                 "--webui-port", "0", "--properties-file", str(props)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=folder,
                start_new_session=True))
        deadline = time.monotonic() + REGISTER_TIMEOUT
        _wait_for(master_log, "I have been elected leader", procs, deadline)
        (folder / "work").mkdir()
        with open(worker_log, "wb") as out:
            procs.append(subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                 "--cores", "1", "--memory", "1g", "--webui-port", "0", "--work-dir", str(folder / "work")],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=folder,
                start_new_session=True))
        _wait_for(worker_log, "Successfully registered with master", procs, deadline)
        yield url, env, master_log
    finally:
        for p in reversed(procs):
            _stop(p)


def _produce(path: str, events: list[dict]) -> str:
    run_cli("produce", path, "--partitions", "3", "--key-field", "u",
            input="".join(json.dumps(e) + "\n" for e in events), check=True)
    return path


def _events(n: int, seed: int, step: int, jitter: int, **extra) -> list[dict]:
    """Events in event-time order with jitter, `at` in epoch ms, keyed by one of 8 users."""
    rnd = random.Random(seed)
    return [{"at": T0 + i * step + rnd.randint(0, jitter), "u": f"u{rnd.randrange(8)}", "n": i, **extra}
            for i in range(n)]


def _apps_run(master_log: Path) -> int:
    return master_log.read_text(errors="replace").count("Launching executor")


def test_window_on_a_cluster_equals_local(cluster, tmp_path):
    url, env, master_log = cluster
    log = _produce(str(tmp_path / "clicks"), _events(400, 1, 500, 3000))
    args = ["window", log, "--hopping", "6s/2s", "--time-field", "at", "--agg", "count", "--agg", "avg:n",
            "--agg", "last:n"]
    want = run_cli(*args, "--engine", "local", check=True, env=env)
    before = _apps_run(master_log)
    got = run_cli(*args, "--engine", "spark", "--master", url, timeout=600, check=True, env=env)
    assert _apps_run(master_log) > before  # it ran on the cluster's worker, not in a local[*] driver
    assert want.stdout and got.stdout.count(b"\n") == want.stdout.count(b"\n")
    same_rows(got.stdout.splitlines(), want.stdout.splitlines())
    notes = late_notes(want.stderr)
    assert notes and notes == late_notes(got.stderr)  # lateness 0 with jitter: some late, the same count


def test_stream_stream_join_on_a_cluster_equals_local(cluster, tmp_path):
    url, env, master_log = cluster
    searches = _produce(str(tmp_path / "searches"), _events(300, 2, 1000, 5000))
    clicks = _produce(str(tmp_path / "clicks"), _events(120, 3, 2500, 5000))
    args = ["join", searches, clicks, "--within", "1m", "--on", "key", "--time-field", "value.at"]
    want = run_cli(*args, "--engine", "local", check=True, env=env)
    before = _apps_run(master_log)
    got = run_cli(*args, "--engine", "spark", "--master", url, timeout=600, check=True, env=env)
    assert _apps_run(master_log) > before
    assert want.stdout and got.stdout.splitlines() == want.stdout.splitlines()
    assert [ln for ln in got.stderr.splitlines() if b"late" in ln] == \
        [ln for ln in want.stderr.splitlines() if b"late" in ln]
