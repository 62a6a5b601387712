"""Invariant checks shared by the torture tests."""

from __future__ import annotations

import os
import subprocess

from conftest import CLI, cli_env, log_records, run_cli

records = log_records


def assert_log_sound(log: str, gaps_ok: bool = False) -> list[dict]:
    """check clean after check --repair; offsets contiguous per partition; no duplicate ids."""
    rep = run_cli("check", log, "--repair")
    assert rep.returncode == 0, rep.stdout.decode() + rep.stderr.decode()
    assert run_cli("check", log).returncode == 0
    recs = records(log)
    parts: dict[int, list[int]] = {}
    for r in recs:
        parts.setdefault(r["partition"], []).append(r["offset"])
    for p, offs in parts.items():
        if gaps_ok:
            assert offs == sorted(set(offs)), f"p{p} offsets not increasing"
        else:
            assert offs == list(range(offs[0], offs[0] + len(offs))), f"p{p} offsets not contiguous"
    return recs


def strace_run(strace: str, syscall: str, action: str, when: int, args: list[str], input: bytes = b"",
               env: dict | None = None, cwd: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run streamctl under strace with one injected fault at the when-th call of `syscall`."""
    cmd = [strace, "-f", "-qq", "-o", "/dev/null", "-e", f"trace={syscall}",
           "-e", f"inject={syscall}:{action}:when={when}", *CLI, *args]
    return subprocess.run(cmd, input=input, capture_output=True, env=env or cli_env(), cwd=cwd, timeout=timeout)


def count_calls(strace: str, syscall: str, args: list[str], input: bytes = b"", cwd: str | None = None) -> int:
    """How many times a clean run makes `syscall` (all threads)."""
    import tempfile

    with tempfile.NamedTemporaryFile() as trace:
        subprocess.run([strace, "-f", "-qq", "-e", f"trace={syscall}", "-o", trace.name, "-s", "0", *CLI, *args],
                       input=input, capture_output=True, env=cli_env(), cwd=cwd, timeout=120)
        return sum(1 for ln in open(trace.name, "rb") if f"{syscall}(".encode() in ln)


def copy_log(src: str, dst: str) -> None:
    import shutil

    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)
