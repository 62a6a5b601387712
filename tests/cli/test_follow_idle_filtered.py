"""consume --follow --idle-timeout ends after DUR in which it delivered nothing new, even while
records keep arriving that a filter rejects: only delivered records reset the idle clock (for
stdout, --exec and --sqlite alike)."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from conftest import CLI, cli_env, run_cli
from streamctl.storage import log as logmod
from streamctl.storage.appender import Appender


@pytest.mark.parametrize("sink", [[], ["--exec", "cat >/dev/null"], ["--sqlite", "out.db"]],
                         ids=["stdout", "exec", "sqlite"])
def test_records_a_filter_rejects_do_not_keep_a_follow_alive(tmp_path, sink) -> None:
    log = str(tmp_path / "LT")
    run_cli("produce", log, input="999\n1\n", check=True)
    args = [*CLI, "consume", log, "-g", "g", "-f", "--idle-timeout", "1s", "--where", "value == 999", *sink]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(),
                            cwd=str(tmp_path))
    try:
        lg = logmod.open_log(log)
        with Appender(lg, fsync="never") as app:
            deadline = time.monotonic() + 60
            # a record the filter rejects every 50 ms, far more often than the idle timeout
            while proc.poll() is None and time.monotonic() < deadline:
                app.append(0, [(b"null", b"1", None)])
                time.sleep(0.05)
        ended = proc.poll() is not None
    finally:
        if proc.poll() is None:
            proc.kill()
        out, err = proc.communicate(timeout=30)
    assert ended, "the follow never ended while rejected records kept arriving"
    assert proc.returncode == 0, err
    if not sink:
        assert [json.loads(line)["value"] for line in out.splitlines()] == [999]
    if "--sqlite" in sink:
        import sqlite3

        rows = sqlite3.connect(os.path.join(str(tmp_path), "out.db")).execute('SELECT value FROM "LT"').fetchall()
        assert rows == [("999",)]
