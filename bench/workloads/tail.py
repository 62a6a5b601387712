"""tail -f latency: time from a writer's exit to the line on the follower's stdout.

`streamctl tail -f -n 0 LOG` reads from a pipe (as in `tail -f LOG | jq`); each
sample runs `streamctl produce LOG` with one line and waits for it to exit,
then waits for that line on tail's stdout. The reference is `tail -F` on a plain
file, fed by a `sh -c 'echo ... >> FILE'` writer, measured the same way; the two
are sampled alternately. A line that arrived before the writer's exit was
reaped counts as 0 ms.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time

from bench.runner import Bench, LatencyRow, say


class Follower:
    """Runs a follower and timestamps each line it prints, by its text."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, bufsize=0)
        self.seen: dict[str, float] = {}
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        buf = b""
        fd = self.proc.stdout.fileno()
        while True:
            chunk = os.read(fd, 65536)
            now = time.perf_counter()
            if not chunk:
                break
            buf += chunk
            *done, buf = buf.split(b"\n")
            with self.cond:
                for line in done:
                    i = line.find(b"bench-mark-")
                    if i >= 0:
                        tag = line[i:i + 24].split(b'"')[0].decode()
                        self.seen[tag] = now
                self.cond.notify_all()

    def wait_for(self, tag: str, timeout: float = 5.0) -> float | None:
        end = time.perf_counter() + timeout
        with self.cond:
            while tag not in self.seen:
                left = end - time.perf_counter()
                if left <= 0:
                    return None
                self.cond.wait(left)
            return self.seen.pop(tag)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def run(b: Bench) -> None:
    if not b.has_command("tail"):
        b.skip("tail latency", "`streamctl tail` is not built yet")
        return
    samples = 30 if b.quick else 200
    env = b.env()
    log = b.scratch("tail.log")
    plain = b.work / "tail-plain.jsonl"
    plain.write_bytes(b"")
    subprocess.run(b.sc("produce", str(log)), input=b'{"warm":true}\n', check=True, capture_output=True, env=env)
    ours = Follower(b.sc("tail", "-f", "-n", "0", str(log)), env)
    ref = Follower(["tail", "-F", "-n", "0", str(plain)], env)
    time.sleep(1.5)  # both followers are up and watching
    lat_ours: list[float] = []
    lat_ref: list[float] = []
    app_ours: list[float] = []
    app_ref: list[float] = []
    missed = [0, 0]

    def sample(follower: Follower, tag: str, write, into: list[float], miss: int) -> None:
        write()
        t0 = time.perf_counter()
        t1 = follower.wait_for(tag)
        if t1 is None:
            missed[miss] += 1
        else:
            into.append(max(0.0, t1 - t0) * 1000)

    # In-process writers time the follower alone: from the end of the append's
    # write() (streamctl's Appender, fsync never) or of a plain write to the file.
    from streamctl.storage.appender import Appender
    from streamctl.storage.log import open_log

    appender = Appender(open_log(str(log)), fsync="never")
    pfd = os.open(plain, os.O_WRONLY | os.O_APPEND)
    for i in range(samples):
        tag = f"bench-mark-{i:06d}"
        line = f'{{"tag":"{tag}"}}\n'.encode()
        sample(ours, tag, lambda line=line: subprocess.run(b.sc("produce", str(log), "--fsync", "never"), input=line,
                                                 check=True, capture_output=True, env=env), lat_ours, 0)
        sample(ref, tag, lambda line=line: subprocess.run(["sh", "-c", f"printf '%s\\n' '{line.decode().strip()}' >> '{plain}'"],
                                                check=True), lat_ref, 1)
        tag2 = f"bench-mark-{i:06d}b"
        line2 = f'{{"tag":"{tag2}"}}'.encode()
        sample(ours, tag2, lambda line2=line2: appender.append(0, [(b"null", line2, None)]), app_ours, 0)
        sample(ref, tag2, lambda line2=line2: os.write(pfd, line2 + b"\n"), app_ref, 1)
        time.sleep(0.005)
    appender.close()
    os.close(pfd)
    ours.stop()
    ref.stop()
    say(f"  tail: {len(lat_ours)} samples, missed {missed[0]}; tail -F: {len(lat_ref)}, missed {missed[1]}")
    group = "tail -f latency (writer exit -> line)"
    row = LatencyRow(group, "streamctl tail -f -n 0 (pipe)", lat_ours,
                     note=(f"{missed[0]} missed (>5 s); " if missed[0] else "") + "writer: streamctl produce, 1 line")
    refrow = LatencyRow(group, "tail -F (plain file)", lat_ref, note="writer: sh -c 'printf >> file'")
    g2 = "tail -f latency (write() -> line)"
    row2 = LatencyRow(g2, "streamctl tail -f -n 0 (pipe)", app_ours, note="writer: in-process Appender.append")
    refrow2 = LatencyRow(g2, "tail -F (plain file)", app_ref, note="writer: in-process os.write")
    b.latency.extend([row, refrow, row2, refrow2])
    if lat_ours:
        p99 = max(row.pct(0.99), row2.pct(0.99))
        b.target("tail -f p99 < 10 ms", f"p99 {row.pct(0.99):.2f} ms from produce's exit, {row2.pct(0.99):.2f} ms "
                 f"from the append's write() (tail -F: {refrow.pct(0.99):.2f} / {refrow2.pct(0.99):.2f} ms), "
                 f"{len(lat_ours)} + {len(app_ours)} samples", p99 < 10 and not missed[0])
