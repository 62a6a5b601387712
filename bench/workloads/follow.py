"""produce --follow of a file growing at full speed, against `tail -F FILE | streamctl produce LOG`.

Both followers are started on an empty file and shown to be up (one warm-up line is in their
log). Then the clock starts, an in-process writer appends the N lines of the main events data
set to the file as fast as write() takes them (1 MiB writes), and the clock stops when the
N-th line is in the log (its partitions' end offsets, read every 2 ms). Same data, same
writer, same produce defaults (--fsync batch); the difference is reading the file itself,
with its position committed beside the records, against reading tail's pipe.
Target: produce --follow within 1.2x of the pipe's time.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import time
from pathlib import Path

from bench.runner import Bench, Row, say

CHUNK = 1 << 20
WARMUP = b'{"warm":true}\n'


def _in_log(log: Path) -> int:
    """Records in the log now (0 before it exists)."""
    from streamctl.storage import reader
    from streamctl.storage.log import is_log, open_log

    if not is_log(str(log)):
        return 0
    lg = open_log(str(log))
    return sum(reader.partition_info(lg, p).next_offset for p in range(lg.partitions))


def _wait_for(log: Path, n: int, proc: subprocess.Popen, timeout: float) -> float | None:
    """perf_counter when the log holds n records; None on a timeout or a follower that died."""
    end = time.perf_counter() + timeout
    while time.perf_counter() < end:
        if _in_log(log) >= n:
            return time.perf_counter()
        if proc.poll() is not None:
            return None
        time.sleep(0.002)
    return None


def _start(pipeline: list[list[str]], env: dict[str, str]) -> list[subprocess.Popen]:
    """The follower's processes, each one's stdout into the next one's stdin, in one process group."""
    procs: list[subprocess.Popen] = []
    for i, argv in enumerate(pipeline):
        last = i == len(pipeline) - 1
        procs.append(subprocess.Popen(argv, env=env, stdin=procs[-1].stdout if procs else subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL if last else subprocess.PIPE,
                                      stderr=subprocess.PIPE if last else subprocess.DEVNULL,
                                      process_group=0 if not procs else procs[0].pid))
        if len(procs) > 1:
            procs[-2].stdout.close()  # the next process holds it now
    return procs


def _one(pipeline: list[list[str]], env: dict[str, str], src: Path, file: Path, log: Path,
         n: int) -> tuple[float, float, int]:
    """One timed run: (seconds from the writer's first write to the n-th line in the log, the follower's
    CPU seconds and peak RSS KiB, every process of it counted)."""
    shutil.rmtree(log, ignore_errors=True)
    file.write_bytes(b"")
    procs = _start(pipeline, env)
    proc = procs[-1]
    try:
        fd = os.open(file, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, WARMUP)
            if _wait_for(log, 1, proc, 60) is None:
                raise RuntimeError(f"follower not up: {proc.stderr.read().decode()[-300:] if proc.poll() else ''}")
            with open(src, "rb") as f:
                t0 = time.perf_counter()
                while chunk := f.read(CHUNK):
                    os.write(fd, chunk)
        finally:
            os.close(fd)
        t1 = _wait_for(log, n + 1, proc, 600)
        if t1 is None:
            raise RuntimeError(f"{n} lines not in the log (has {_in_log(log) - 1})")
    finally:
        rus = _end(procs)
    if _in_log(log) != n + 1:  # nothing more than the lines either (no line twice)
        raise RuntimeError(f"the log holds {_in_log(log)} records, not {n + 1}")
    return t1 - t0, sum(ru.ru_utime + ru.ru_stime for ru in rus), sum(ru.ru_maxrss for ru in rus)


def _end(procs: list[subprocess.Popen]) -> list[resource.struct_rusage]:
    """SIGTERM the follower's process group; each process's rusage."""
    os.killpg(procs[0].pid, signal.SIGTERM)
    end = time.monotonic() + 30
    out = []
    for proc in procs:
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                out.append(ru)
                break
            if time.monotonic() > end:
                os.killpg(procs[0].pid, signal.SIGKILL)
            time.sleep(0.01)
    return out


def run(b: Bench) -> None:
    n = b.records
    src = b.data.events_jsonl(n)
    nbytes = src.stat().st_size
    env = b.env()
    file = b.work / "follow-app.jsonl"
    log = b.work / "follow.log"
    ours = [b.sc("produce", str(log), str(file), "--follow")]
    ref = [["tail", "-F", "-n", "+1", str(file)], b.sc("produce", str(log))]
    group = f"produce --follow, a file growing at full speed ({n // 1000}k lines)"
    rows = [Row(group, "streamctl produce LOG FILE --follow", n, nbytes, True,
                note="writer start -> last line in the log"),
            Row(group, "tail -F FILE | streamctl produce LOG", n, nbytes, False)]
    for r in range(b.runs):
        for argv, row in zip((ours, ref), rows, strict=True):
            if row.error:
                continue
            try:
                wall, cpu, rss = _one(argv, env, src, file, log, n)
            except RuntimeError as e:
                row.error = str(e)
                say(f"  {group} / {row.tool}: FAILED {e}")
                continue
            row.walls.append(wall)
            row.cpus.append(cpu)
            row.rss_kb.append(rss)
            say(f"  {group} / {row.tool} run {r + 1}/{b.runs}: {wall:.3f} s, {cpu:.2f} CPU s")
    shutil.rmtree(log, ignore_errors=True)
    file.unlink(missing_ok=True)
    b.rows.extend(rows)
    ratio = b.ratio(group, rows[0].tool, rows[1].tool)
    if ratio is not None:
        b.target("produce --follow of a growing file within 1.2x of `tail -F | produce`",
                 f"takes {1 / ratio:.2f}x its time", 1 / ratio <= 1.2)
