"""window --follow --group killed at its K-th write/fsync/rename (strace), then restarted to a
clean finish: the rows equal one uninterrupted run, no window is counted twice."""

from __future__ import annotations

import json
import os
import shutil

import orjson
import pytest

from conftest import CLI, cli_env, closed_rows, run_cli

from .util import count_calls, strace_run

T0 = 1_763_719_200_000
WINDOW = ["--tumbling", "2s", "--time-field", "at", "--agg", "count", "--agg", "sum:v"]


def make_events(log: str) -> int:
    lines = [json.dumps({"at": T0 + i * 150, "u": f"u{i % 3}", "v": i % 7}) for i in range(240)]
    for chunk in range(4):  # several produce batches: several follow polls, several checkpoints
        run_cli("produce", log, "--partitions", "2", "--key-field", "u",
                input="\n".join(lines[chunk * 60:(chunk + 1) * 60]) + "\n", check=True)
    return len(lines)


@pytest.mark.parametrize("syscall", ["write", "fsync", "rename"])
def test_window_follow_crash_points(strace, tmp_path, syscall):
    import subprocess

    base = str(tmp_path / "base")
    total = make_events(base)
    # the windows the last event's watermark closed: a follower keeps the others open in its checkpoint
    once = set(closed_rows(run_cli("window", base, *WINDOW, check=True).stdout.splitlines(), T0 + (total - 1) * 150))
    follow = ["window", "LOG", *WINDOW, "--follow", "--group", "g", "--idle-timeout", "500ms"]
    probe = str(tmp_path / "probe")
    shutil.copytree(base, probe)
    n = count_calls(strace, syscall, [probe if a == "LOG" else a for a in follow])
    ks = list(range(1, n + 1)) if n <= 25 else sorted({1, n, *range(1, n + 1, max(1, n // 25))})
    for k in ks:
        log = str(tmp_path / f"k{k}")
        shutil.copytree(base, log)
        args = [log if a == "LOG" else a for a in follow]
        first = strace_run(strace, syscall, "signal=SIGKILL", k, args)
        rest = subprocess.run([*CLI, *args], capture_output=True, env=cli_env(), timeout=60)
        assert rest.returncode == 0, rest.stderr
        complete = first.stdout.split(b"\n")[:-1]  # a line cut by the kill has no newline
        rows = [ln for ln in complete + rest.stdout.splitlines() if ln.strip()]
        assert set(rows) == once, f"K={k}: rows differ from one uninterrupted run"
        seen: dict = {}
        for ln in rows:
            r = orjson.loads(ln)
            seen.setdefault((r["window"]["start"], json.dumps(r["key"])), set()).add(ln)
        assert all(len(v) == 1 for v in seen.values()), f"K={k}: a window was counted twice"
        ck = orjson.loads(open(os.path.join(log, "groups", ".g.window.json"), "rb").read())
        assert sum(ck["offsets"].values()) == total
        shutil.rmtree(log)
