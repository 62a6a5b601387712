"""produce --partition P beyond the partitions a new log would get is a usage error that creates nothing."""

from __future__ import annotations

import json
import subprocess
import sys


def produce(*args: str, data: bytes = b"1\n") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streamctl", "produce", *args], input=data,
                          capture_output=True, timeout=60)


def test_partition_out_of_range_on_a_new_log_creates_no_log(tmp_path):
    log = tmp_path / "new"
    p = produce(str(log), "--partition", "2")
    assert p.returncode == 2, p.stderr
    assert b"partition 2 does not exist" in p.stderr and b"Traceback" not in p.stderr
    assert not log.exists()
    p = produce(str(log), "--partition", "3", "--partitions", "3")
    assert p.returncode == 2 and not log.exists(), p.stderr


def test_partition_in_range_of_the_new_log_is_taken(tmp_path):
    log = tmp_path / "new"
    p = produce(str(log), "--partition", "2", "--partitions", "3")
    assert p.returncode == 0, p.stderr
    assert json.loads((log / "streamctl.json").read_text())["partitions"] == 3
    line = json.loads((log / "p2" / f"{0:020d}.jsonl").read_text())
    assert (line["partition"], line["offset"], line["value"]) == (2, 0, 1)
