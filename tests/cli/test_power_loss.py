"""What survives a power cut: the order of the syscalls that make data durable, recorded with
strace (a cut keeps what was fsynced and may drop anything else), and kills injected between
them. Each test states the invariant a power cut relies on and checks it on the real trace.

- produce into missing parent folders: each folder made is durable (its parent fsynced) before
  produce acknowledges a record.
- consume --group with stdout on a regular file: the file is fsynced before every group-file
  rename that commits the records in it; a pipe is not (its reader owns durability).
- consume --sqlite: every group-file rename comes after an fsync of the database's WAL (and
  folder) that covers the offsets the group file names; a power cut simulated at each rename
  (the WAL cut back to what was synced) loses nothing and doubles nothing on the rerun; a kill
  between the fsync and the rename loses nothing either.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from conftest import CLI, cli_env, run_cli


@pytest.fixture(scope="module")
def strace() -> str:
    path = shutil.which("strace")
    if path is None:
        pytest.fail("strace is not installed (scripts/test installs it with apt-get)")
    probe = subprocess.run([path, "-f", "-qq", "-o", "/dev/null", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.fail(f"strace cannot trace here (ptrace not permitted): {probe.stderr.decode()[:200]}")
    return path


def traced(strace: str, out: str, calls: str, args: list[str], input: bytes = b"", stdout=None,
           extra: list[str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run streamctl under strace -f -y (fds shown with their paths), the trace in `out`."""
    cmd = [strace, "-f", "-qq", "-y", "-s", "512", "-o", out, "-e", f"trace={calls}", *(extra or []), *CLI, *args]
    return subprocess.run(cmd, input=input, stdout=stdout if stdout is not None else subprocess.PIPE,
                          stderr=subprocess.PIPE, env=cli_env(), timeout=timeout)


# One call per entry, in the order they started: unfinished/resumed pairs (threads) are joined.
_CALL = re.compile(r"^(\d+)\s+(\w+)\((.*)$")
_RESUMED = re.compile(r"^(\d+)\s+<\.\.\. (\w+) resumed>(.*)$")


def calls(trace: str) -> list[tuple[str, str]]:
    """(syscall, its text: arguments and result) of each call, in the order they started."""
    out: list[list[str]] = []
    open_by_pid: dict[str, int] = {}
    for line in open(trace, errors="replace"):
        line = line.rstrip("\n")
        m = _RESUMED.match(line)
        if m:
            i = open_by_pid.pop(m.group(1), None)
            if i is not None:
                out[i][1] += m.group(3)
            continue
        m = _CALL.match(line)
        if not m:
            continue
        if line.endswith("<unfinished ...>"):
            open_by_pid[m.group(1)] = len(out)
            out.append([m.group(2), m.group(3)[: -len("<unfinished ...>")]])
        else:
            out.append([m.group(2), m.group(3)])
    return [(a, b) for a, b in out]


def fd_path(text: str) -> str:
    """The path strace -y shows for the first fd argument: `5</a/b>` -> /a/b."""
    m = re.match(r"\s*-?\d+<([^>]*)>", text)
    return m.group(1) if m else ""


# --- produce into new parent folders ------------------------------------------------------------

def test_produce_makes_every_new_parent_folder_durable(tmp_path, strace):
    base = tmp_path / "a"
    base.mkdir()
    log = str(base / "new1" / "new2" / "log")
    trace = str(tmp_path / "trace")
    p = traced(strace, trace, "mkdir,mkdirat,fsync,fdatasync", ["produce", log, "--fsync", "always"],
               input=b"1\n2\n")
    assert p.returncode == 0, p.stderr.decode()
    seq = calls(trace)
    made = [re.match(r'\s*(?:AT_FDCWD, )?"([^"]+)"', text).group(1) for name, text in seq
            if name in ("mkdir", "mkdirat")]
    made = [os.path.abspath(m) if os.path.isabs(m) else os.path.abspath(os.path.join(os.getcwd(), m)) for m in made]
    for folder in (str(base / "new1"), str(base / "new1" / "new2"), log):
        assert folder in made, (folder, made)
        i = next(i for i, (name, text) in enumerate(seq) if name in ("mkdir", "mkdirat") and folder in
                 os.path.abspath(re.match(r'\s*(?:AT_FDCWD, )?"([^"]+)"', text).group(1)))
        parent = os.path.dirname(folder)
        # the folder's entry is synced after its mkdir and before the first record's fsync
        first_record_sync = next(j for j, (name, text) in enumerate(seq)
                                 if name in ("fsync", "fdatasync") and fd_path(text).endswith(".jsonl"))
        assert any(name == "fsync" and fd_path(text) == parent for name, text in seq[i + 1:first_record_sync]), \
            f"{parent} is not fsynced after {folder} is made"
    assert run_cli("consume", log, "--value").stdout == b"1\n2\n"
