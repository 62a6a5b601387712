"""SIGINT and SIGTERM while streamctl starts (and after): it ends quietly, never a traceback.

Two ways to aim the signal:
- by the clock: `python -m streamctl compact|produce` signalled at increasing delays from 0 ms.
  A signal can land before any streamctl code runs: before the interpreter installs its own
  SIGINT handler the process dies of the signal (-2 or -15, quiet; a shell reports 130 or 143);
  while the interpreter itself still starts (site, runpy, before streamctl's first line) Python
  prints its own KeyboardInterrupt traceback, with no streamctl frame in it, and nothing of ours
  can run earlier than that. Every other outcome must be 0 (finished), 130 or 143 with no traceback.
- by the syscall: strace delivers the signal at the Nth file opened, for N over every open from
  the first after the start-up handler is in place to the end of the run: always 0, 130 or 143,
  never a traceback.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import CLI, ROOT, cli_env, run_cli

DELAYS_MS = [0, 1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750, 1000]
QUIET = {0, 130, 143}
KILLED = {-signal.SIGINT, -signal.SIGTERM}


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("sig") / "orders")
    lines = "".join(json.dumps({"key": f"k{i % 50}", "value": {"i": i}}) + "\n" for i in range(20000))
    run_cli("produce", path, "--envelope", "--partitions", "2", input=lines, check=True)
    return path


def commands(log: str) -> dict[str, tuple[list[str], bytes]]:
    return {"compact": (["compact", log, "--roll", "--tombstone-retention", "0"], b""),
            "produce": (["produce", log], b"".join(b'{"n":%d}\n' % i for i in range(2000)))}


def interpreter_traceback(err: str) -> bool:
    """A KeyboardInterrupt traceback from the interpreter's own start-up (site, the install's
    path hooks, runpy): no frame in streamctl's own files."""
    frames = re.findall(r'File "([^"]+)"', err)
    ours = [f for f in frames if f.startswith(str(ROOT)) and "/.venv/" not in f]
    return "KeyboardInterrupt" in err and not ours


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("name", ["compact", "produce"])
def test_signal_at_increasing_delays(log, name, sig):
    args, stdin = commands(log)[name]
    outcomes = []
    for ms in DELAYS_MS:
        p = subprocess.Popen([*CLI, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=cli_env())
        time.sleep(ms / 1000)
        p.send_signal(sig)
        _out, err_b = p.communicate(stdin, timeout=120)
        err = err_b.decode(errors="replace")
        outcomes.append((ms, p.returncode))
        if p.returncode in KILLED and not err:
            continue  # died of the signal before Python had any handler: what a shell reports as 130/143
        if interpreter_traceback(err) and sig == signal.SIGINT and p.returncode in (1, -signal.SIGINT):
            continue  # the interpreter's own start-up, before streamctl's first line
        assert "Traceback" not in err, (ms, err)
        assert p.returncode in QUIET, (ms, p.returncode, err)
        if p.returncode == 143:
            assert err == "", err  # a SIGTERM is ended without a word
    # the sweep reached streamctl's own code: some runs ended by our handling, not by the interpreter
    assert any(rc in (130, 143) for _ms, rc in outcomes), outcomes


@pytest.fixture(scope="module")
def strace() -> str:
    path = shutil.which("strace")
    if path is None:
        pytest.fail("strace is not installed (scripts/test installs it with apt-get)")
    return path


def opens(strace: str, args: list[str], stdin: bytes, trace: str) -> list[str]:
    """The files a run opens, in order (after a first run: a stale .pyc rewritten changes the count)."""
    run_cli(*args, input=stdin)
    subprocess.run([strace, "-f", "-qq", "-o", trace, "-e", "trace=openat", *CLI, *args], input=stdin,
                   capture_output=True, env=cli_env(), timeout=120)
    return [ln for ln in open(trace) if "openat(" in ln]


@pytest.mark.parametrize("name", ["compact", "produce"])
def test_signal_at_every_file_opened_after_the_handler_is_installed(log, tmp_path, strace, name):
    args, stdin = commands(log)[name]
    seen = opens(strace, args, stdin, str(tmp_path / "trace"))
    # strace counts from 1: the open after the one of startsignals (whose code then installs the handler)
    first = max(i for i, ln in enumerate(seen) if re.search(r"streamctl/(__pycache__/)?startsignals", ln)) + 2
    points = sorted(set(range(first, len(seen) + 1, max(1, (len(seen) - first) // 12))) | {first, len(seen)})
    for n in points:
        for sig in ("SIGINT", "SIGTERM"):
            p = subprocess.run([strace, "-f", "-qq", "-o", "/dev/null", "-e", "trace=openat",
                                "-e", f"inject=openat:signal={sig}:when={n}", *CLI, *args],
                               input=stdin, capture_output=True, env=cli_env(), timeout=120)
            err = p.stderr.decode(errors="replace")
            assert "Traceback" not in err, (n, sig, err)
            assert p.returncode in QUIET, (n, sig, p.returncode, err)


SIGINT_IN_CODE = """
import signal, sys
from streamctl import startsignals
startsignals.install()
startsignals.running()
ns = {}
exec(compile("def cb():\\n    signal.raise_signal(signal.SIGINT)\\n", %r, "exec"), {"signal": signal}, ns)
try:
    ns["cb"]()
except KeyboardInterrupt:
    sys.exit(7)
sys.exit(0)
"""


@pytest.mark.parametrize(("filename", "code"), [("<frozen importlib._bootstrap>", 130), ("<string>", 7)],
                         ids=["importlib", "command"])
def test_sigint_in_importlibs_own_code_ends_the_run_like_an_import(filename, code):
    """A SIGINT that lands in importlib's code with no module body above it (a module lock's weakref
    callback) ends the run with 130: a KeyboardInterrupt there is only printed as "Exception ignored"
    and the command carries on. Anywhere else in the command it is a KeyboardInterrupt."""
    p = subprocess.run([sys.executable, "-c", SIGINT_IN_CODE % filename], capture_output=True,
                       env=cli_env(), cwd=ROOT, timeout=60)
    assert (p.returncode, p.stderr) == (code, b"")
