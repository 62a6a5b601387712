"""Golden cases for window and join output, Miller-style: tests/cli/cases/CMD/NNNN/{cmd,expout}.

`cmd` is one shell line run in tests/cli/cases (so `input/...` names the shared inputs) with
this Python's `streamctl` first on PATH; its stdout must equal `expout` byte for byte and it
must exit 0. A new case: write its cmd, check its output by reading it, then
    STREAMCTL_GOLDEN_UPDATE=1 scripts/test tests/cli/test_golden.py
writes every expout from the current output (review the diff before committing it).
"""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import cli_env

CASES = Path(__file__).resolve().parent / "cases"
CASE_DIRS = sorted(p.parent for p in CASES.glob("*/[0-9][0-9][0-9][0-9]/cmd"))


@pytest.mark.parametrize("case", CASE_DIRS, ids=[f"{p.parent.name}/{p.name}" for p in CASE_DIRS])
def test_golden_case(case: Path) -> None:
    cmd = (case / "cmd").read_text().strip()
    env = cli_env(PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    p = subprocess.run(["bash", "-c", cmd], cwd=CASES, env=env, capture_output=True, timeout=120)
    assert p.returncode == 0, f"{cmd}\nexited {p.returncode}: {p.stderr.decode(errors='replace')}"
    expected = case / "expout"
    if os.environ.get("STREAMCTL_GOLDEN_UPDATE") == "1":
        expected.write_bytes(p.stdout)
    want = expected.read_bytes()
    if p.stdout != want:
        diff = difflib.unified_diff(want.decode().splitlines(), p.stdout.decode().splitlines(),
                                    "expout", "got", lineterm="")
        pytest.fail(f"{cmd}\n" + "\n".join(diff))


def test_there_are_cases_for_window_and_join() -> None:
    assert {p.parent.name for p in CASE_DIRS} >= {"window", "join"}
