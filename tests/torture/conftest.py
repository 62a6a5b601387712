"""Torture tests: crash points, fault injection, hostile input. `-m 'not torture'` skips them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STRACE = shutil.which("strace")


def pytest_collection_modifyitems(items):
    for item in items:
        if "/torture/" in str(item.fspath):
            item.add_marker(pytest.mark.torture)


@pytest.fixture(scope="session")
def strace() -> str:
    if STRACE is None:
        # scripts/test installs strace; a missing one is a failure, not a silent skip
        pytest.fail("strace is not installed (scripts/test installs it with apt-get)")
    probe = subprocess.run([STRACE, "-f", "-qq", "-o", "/dev/null", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.fail(f"strace cannot trace here (ptrace not permitted): {probe.stderr.decode()[:200]}")
    return STRACE
