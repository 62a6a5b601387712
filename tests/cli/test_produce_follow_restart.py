"""produce --follow across reruns: a file rotated away while no follower ran stays known.

Each run ends by --idle-timeout, so the tests need no timing of their own.
"""

from __future__ import annotations

import json
import os

from conftest import log_records, run_cli


def follow_once(log: str, *files: str) -> None:
    proc = run_cli("produce", log, *files, "--follow", "--idle-timeout", "300ms", timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()


def append(path: str, *vals: object) -> None:
    with open(path, "a") as f:
        f.write("".join(json.dumps(v) + "\n" for v in vals))


def values(log: str) -> list:
    return [r["value"] for r in log_records(log)]


def test_a_rotated_file_read_to_its_end_stays_known_across_a_rerun(tmp_path):
    log, app = str(tmp_path / "L"), str(tmp_path / "app.log")
    append(app, {"a": 1})
    follow_once(log, app)
    os.rename(app, app + ".1")  # rotated while no follower runs, already read to its end
    append(app, {"b": 1})
    follow_once(log, app)  # reads the new app.log; the old one must stay in the registry
    files = json.loads(run_cli("stat", log, "--json", check=True).stdout)["files"]
    assert [(f["file"], f["state"], f["unread"]) for f in files] == [(app + ".1", "rotated", 0), (app, "active", 0)]
    append(app + ".1", {"a": 2})  # a writer that still held the rotated file adds a last line
    follow_once(log, app)
    # and a glob that now also matches the rotated name must not read it again from its start
    follow_once(log, str(tmp_path / "app.log*"))
    assert values(log) == [{"a": 1}, {"b": 1}, {"a": 2}]
