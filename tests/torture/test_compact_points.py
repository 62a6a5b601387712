"""compact killed at its K-th write or fsync (strace): the latest value of every key survives,
and the next compaction or check --repair leaves a clean log. (Rename/link/unlink crash points
are in tests/cli/test_compact_crash.py.)"""

from __future__ import annotations

import shutil

import pytest

from conftest import run_cli

from .util import count_calls, strace_run
from test_compact_crash import leftovers, make_log, verify, verify_repaired

ARGS = ["--roll", "--tombstone-retention", "0s"]


@pytest.mark.parametrize("syscall", ["write", "fsync"])
def test_compact_crash_points(strace, tmp_path, syscall):
    base = str(tmp_path / "base")
    appended = make_log(base, 3, n=200)
    probe = str(tmp_path / "probe")
    shutil.copytree(base, probe)
    n = count_calls(strace, syscall, ["compact", probe, *ARGS])
    assert n >= 1
    ks = list(range(1, n + 1)) if n <= 40 else sorted({1, n, *range(1, n + 1, max(1, n // 40))})
    for k in ks:
        path = str(tmp_path / f"k{k}")
        shutil.copytree(base, path)
        strace_run(strace, syscall, "signal=SIGKILL", k, ["compact", path, *ARGS])
        verify(path, appended)
        assert run_cli("compact", path, *ARGS).returncode == 0
        assert not leftovers(path)
        verify_repaired(path, appended)
        shutil.rmtree(path)
