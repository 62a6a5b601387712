"""Run a generated PySpark job in a child process and stream its result lines back, or write
the job out for spark-submit (--emit-job).

The job runs as `<this python> job.py` in its own session (process group), so
Spark's JVM can be stopped with it; its stderr (JVM start-up, log4j, Python
tracebacks) goes to a temp log file, never to the user's terminal. A failure
becomes one StreamctlError naming the likely cause (no Java, bad master, a job
error) with the few relevant lines from that log, which is kept for reading.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING

from streamctl import stopflag
from streamctl.errors import BrokenPipe, ExitCode, Interrupted, StreamctlError
from streamctl.spark import jobentry
from streamctl.spark.engine import Say

if TYPE_CHECKING:
    from streamctl.formats.rows import Rows
    from streamctl.spark.jobgen import Job

CHUNK = 1 << 20
LOCAL = "local[*]"  # the master of a job streamctl runs without --master

_RELEVANT = re.compile(
    r"(Error|Exception|ERROR|FATAL|Caused by|JAVA_GATEWAY|No such file|not found|Cannot|cannot|Could not)")


class SparkJobError(StreamctlError):
    """A Spark job that could not start or failed; the message is for a person."""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # Executors (Python workers) must use the same interpreter as the driver.
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.setdefault("PYTHONUNBUFFERED", "0")
    return env


def _relevant_lines(log_text: str, limit: int = 6) -> list[str]:
    lines = [ln.rstrip() for ln in log_text.splitlines() if ln.strip()]
    # stack frames and quoted source lines say where, not what
    picked = [ln for ln in lines if _RELEVANT.search(ln)
              and not ln.lstrip().startswith(("at ", "raise ", "File ", "^", "~"))]
    if not picked:
        picked = lines
    # de-duplicate, keep the last ones (the cause is usually near the end)
    seen: set[str] = set()
    out: list[str] = []
    for ln in reversed(picked):
        if ln not in seen:
            seen.add(ln)
            out.append(ln[:300])
        if len(out) >= limit:
            break
    out.reverse()
    return out


def explain_failure(log_text: str, returncode: int, master: str) -> str:
    """One sentence for the likely cause of a failed job on `master`, from its log."""
    if "JAVA_GATEWAY_EXITED" in log_text or "Java gateway process exited" in log_text:
        if re.search(r"(java: (command )?not found|JAVA_HOME is not set|java: No such file or directory|No such file or directory.*java)", log_text):
            return "Spark could not start: no Java runtime found (install Java 17+ or set JAVA_HOME)"
        if "Master must" in log_text or "Could not parse Master URL" in log_text:
            return f"Spark could not start: invalid master URL {master!r}"
        return "Spark could not start its Java gateway (is Java 17+ installed and JAVA_HOME right?)"
    if "Could not parse Master URL" in log_text or "Master must either be yarn or start with" in log_text:
        return f"invalid --master URL {master!r}"
    if "UnsupportedClassVersionError" in log_text:
        return "Spark needs a newer Java (17 or later)"
    matches = list(re.finditer(r"^(?:\S+\.)?(\w+(?:Error|Exception)): (.+)$", log_text, re.M))
    if matches:
        m = matches[-1]
        return f"{m.group(1)}: {m.group(2)[:300]}"
    if returncode < 0:
        return f"the job was killed by signal {-returncode}"
    return f"the job exited with status {returncode}"


def stream_job(job: Job, say: Say, master: str | None = None, into: int | None = None,
               **more: object) -> Iterator[bytes]:
    """Run the job on `master` (LOCAL without one), `more` added to its PARAMS; yield blocks of
    whole result lines (each ends with b"\\n") as they arrive.

    With `into` (a file descriptor: streamctl's own stdout, when the lines go out
    unchanged) the job writes its result there itself and nothing is yielded: the
    bytes do not pass through this process (1.4 GB of a 5M-record replay cost
    ~2 s there), and a reader that closes the pipe gives BrokenPipe (exit 141).

    Closing the generator early (a closed pipe downstream, Ctrl-C) stops the job
    and its JVM. Raises SparkJobError when the job fails, Interrupted when the
    stop flag was set (SIGINT/SIGTERM) while it ran.
    """
    master = master or LOCAL
    what = f"Spark {job.name} job"
    if sys.stderr.isatty():  # why nothing happens for a while
        say(f"starting the Spark job on {master} (the JVM takes a few seconds to start)")
    folder = tempfile.mkdtemp(prefix="streamctl-spark-")
    job_path, log_path = os.path.join(folder, "job.py"), os.path.join(folder, "spark.log")
    keep = False  # the folder stays when the job failed: its log and script are named in the error
    with open(job_path, "w", encoding="utf-8") as f:
        # a job streamctl starts and stops: nobody browses its UI, which costs start-up
        f.write(job.text(master, **more, spark_conf={"spark.ui.enabled": "false"}))
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        proc = subprocess.Popen(
            [sys.executable, job_path], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if into is None else into, stderr=log_fd,
            env=_env(), cwd=folder, start_new_session=True, preexec_fn=_pdeathsig_setter())
    except OSError as e:
        shutil.rmtree(folder, ignore_errors=True)
        raise SparkJobError(f"cannot start the {what}: {e.strerror}") from None
    finally:
        os.close(log_fd)
    finished = False
    old_term = _on_sigterm()
    try:
        carry = b""
        if into is not None:
            rc = _wait(proc)
        else:
            assert proc.stdout is not None
            fd = proc.stdout.fileno()
            while True:
                if stopflag.is_set():
                    raise Interrupted("interrupted; the Spark job was stopped")
                chunk = os.read(fd, CHUNK)
                if not chunk:
                    break
                i = chunk.rfind(b"\n")
                if i < 0:
                    carry += chunk
                    continue
                block = carry + chunk[: i + 1] if carry else chunk[: i + 1]
                carry = chunk[i + 1:]
                yield block
            rc = proc.wait()
        finished = True
        if rc != 0:
            if rc == ExitCode.PIPE:
                if into is not None:
                    raise BrokenPipe("stdout: the reader closed the pipe")
                raise SparkJobError(f"the {what} could not write its output (closed pipe)")
            keep = True
            with open(log_path, encoding="utf-8", errors="replace") as f:
                log_text = f.read()
            cause = explain_failure(log_text, rc, master)
            detail = "\n".join(f"  | {ln}" for ln in _relevant_lines(log_text))
            raise SparkJobError(
                f"the {what} failed: {cause}\n{detail}\n  (full Spark log: {log_path}; job: {job_path})")
        if carry:
            raise SparkJobError(f"the {what} ended with a partial line (no newline at the end of its output)")
    finally:
        _restore_sigterm(old_term)
        if not finished:
            _stop(proc)
        if proc.stdout is not None:
            proc.stdout.close()
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def _wait(proc: subprocess.Popen) -> int:
    """The job's exit status, watching the stop flag (SIGINT/SIGTERM) while it runs."""
    while True:
        if stopflag.is_set():
            raise Interrupted("interrupted; the Spark job was stopped")
        try:
            return proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            continue


class Terminated(StreamctlError):
    """SIGTERM while a job ran: the job was stopped and the output is incomplete."""

    exit_code = 128 + signal.SIGTERM


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated("terminated; the Spark job was stopped and its output is incomplete")


def _on_sigterm():
    """While a job runs, SIGTERM unwinds through stream_job so the job's process group is stopped.

    (The job runs in its own session so the terminal's Ctrl-C reaches only us;
    Python's KeyboardInterrupt unwinds the same way.)
    """
    try:
        return signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread: leave signals alone
        return None


def _restore_sigterm(old) -> None:
    if old is not None:
        try:
            signal.signal(signal.SIGTERM, old)
        except ValueError:
            pass


def _pdeathsig_setter():
    """A preexec_fn that makes the child get SIGTERM when streamctl dies, even by SIGKILL
    (Linux prctl PR_SET_PDEATHSIG); None where that is not available.

    The JVM then exits too: pyspark's gateway ends when its Python parent's pipe
    closes. libc is resolved here, in the parent: nothing is imported after fork.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def setter() -> None:
        prctl(1, int(signal.SIGTERM), 0, 0, 0)

    return setter


def _stop(proc: subprocess.Popen) -> None:
    """Stop the job's whole process group (the Python driver and its JVM)."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


STATS_PREFIX = jobentry.STATS_PREFIX.encode()  # a window or join job's last line: its counts


def run_job(job: Job, rows: Rows, say: Say, master: str | None) -> dict:
    """Run a job that ends with a stats line (asked for by PARAMS["stats_line"]: jobentry.report);
    its result lines are `rows` (written, then finished: Rows.json_lines), and the counts of its
    stats line are returned."""
    counts: dict = {}
    gen = stream_job(job, say, master, stats_line=True)
    assert isinstance(gen, Generator)  # closed below: stops the job now, not at garbage collection
    try:
        for block in gen:
            # the job's last line carries its counts, after every row
            cut = block.rfind(b"\n", 0, len(block) - 1) + 1
            if block.startswith(STATS_PREFIX, cut):
                import orjson

                counts.update(orjson.loads(block[cut + len(STATS_PREFIX):]))
                block = block[:cut]
            if block:
                rows.json_lines(block)
    finally:
        gen.close()
    rows.finish()
    return counts


def write_job(job: Job, master: str | None, target: str, say: Say) -> None:
    """--emit-job: the generated PySpark job to stdout (`-`) or to an executable file, replaced atomically."""
    text = job.text(master)
    if target == "-":
        from streamctl.formats.writer import Output

        w = Output()
        w.write(text.encode())
        w.flush()
        return
    from streamctl.storage.fsutil import atomic_write

    atomic_write(target, text.encode(), 0o755)
    say(f"wrote the Spark job to {target}; run it with: spark-submit {target}  (or: python {target})")
