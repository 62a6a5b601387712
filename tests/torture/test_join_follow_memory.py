"""join --follow keeps its table on disk: a follower over a table ten times larger peaks at far
less than ten times the memory (the spec's bound: below 3x for 30k against 300k keys)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import CLI, cli_env, run_cli


def _table_and_events(tmp_path, keys: int, events: int) -> tuple[str, str]:
    table_src = tmp_path / f"profiles-{keys}.jsonl"
    with open(table_src, "w") as f:
        for i in range(keys):
            f.write(json.dumps({"user": f"user-{i:07d}", "plan": ("free", "pro", "team")[i % 3],
                                "region": ("eu", "us", "ap")[i % 3], "since": 1_700_000_000_000 + i}) + "\n")
    ev_src = tmp_path / f"events-{keys}.jsonl"
    with open(ev_src, "w") as f:
        for i in range(events):
            f.write(json.dumps({"user": f"user-{(i * 7919) % keys:07d}", "page": f"/p/{i % 100}"}) + "\n")
    table, ev = str(tmp_path / f"profiles-{keys}"), str(tmp_path / f"events-{keys}")
    run_cli("produce", table, str(table_src), "--key-field", "user", check=True, timeout=300)
    run_cli("produce", ev, str(ev_src), "--key-field", "user", "--partitions", "2", check=True, timeout=300)
    return ev, table


def _peak_rss_kib(args: list[str]) -> int:
    """The child's peak RSS: run it from a fresh Python whose own RUSAGE_CHILDREN sees only it."""
    code = ("import resource, subprocess, sys; "
            "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE); "
            "assert p.returncode == 0, p.stderr; "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, env=cli_env(), timeout=600,
                         check=True)
    return int(out.stdout)


@pytest.mark.slow
def test_a_ten_times_larger_table_does_not_take_three_times_the_memory(tmp_path):
    rss = {}
    for keys in (20_000, 200_000):
        ev, table = _table_and_events(tmp_path, keys, 20_000)
        rss[keys] = _peak_rss_kib([*CLI, "join", ev, table, "--table", "--how", "left", "--follow", "--group", "m",
                                   "--idle-timeout", "200ms"])
        assert os.path.exists(os.path.join(ev, "groups", ".m.join.db"))
    print(f"peak RSS: {rss}")
    assert rss[200_000] < 3 * rss[20_000], rss
