"""produce --follow names a bad line by its line number, as produce does (SPEC: "stderr names the
input, line number and reason"; a dead-letter entry holds "input name, line number, reason, the raw
line"), also when a rerun starts reading the file in its middle."""

from __future__ import annotations

import json
import os

from conftest import log_records, run_cli


def follow(log: str, app: str, *extra: str):
    return run_cli("produce", log, app, "--follow", "--idle-timeout", "200ms", *extra)


def test_bad_lines_are_named_by_line_number_across_reruns(tmp_path):
    app, log, dead = str(tmp_path / "app.log"), str(tmp_path / "log"), str(tmp_path / "dead.jsonl")
    with open(app, "w") as f:
        f.write('{"i": 0}\n\nnot json\n{"i": 1}\n')
    r = follow(log, app)
    assert r.returncode == 65
    assert f"{app}:3: ".encode() in r.stderr and b"invalid JSON" in r.stderr, r.stderr
    # the rerun starts at the bad line (byte 10), and still knows it is line 3
    r = follow(log, app, "--on-error", f"dead-letter={dead}")
    assert r.returncode == 0, r.stderr
    with open(app, "a") as f:
        f.write('bad two\n{"i": 2}\n')
    r = follow(log, app, "--on-error", f"dead-letter={dead}")
    assert r.returncode == 0, r.stderr
    rejected = [json.loads(x) for x in open(dead)]
    assert [(d["input"], d["line"], d["byte"], d["raw"]) for d in rejected] == [
        (app, 3, 10, "not json"), (app, 5, 28, "bad two")]
    assert [rec["value"] for rec in log_records(log)] == [{"i": 0}, {"i": 1}, {"i": 2}]


def test_a_registry_without_line_counts_counts_them(tmp_path):
    app, log = str(tmp_path / "app.log"), str(tmp_path / "log")
    with open(app, "w") as f:
        f.write('{"i": 0}\n{"i": 1}\n')
    assert follow(log, app).returncode == 0
    reg_path = os.path.join(log, ".follow", "registry.json")
    reg = json.load(open(reg_path))
    for entry in reg["files"]:
        del entry["lines"]
    with open(reg_path, "w") as f:
        json.dump(reg, f)
    with open(app, "a") as f:
        f.write("oops\n")
    r = follow(log, app)
    assert r.returncode == 65 and f"{app}:3: ".encode() in r.stderr, r.stderr


def test_a_line_over_the_limit_goes_to_the_dead_letter_whole(tmp_path):
    """SPEC: dead-letter=FILE gets "the raw line" of each rejected line, an over-long one included."""
    app, log, dead = str(tmp_path / "app.log"), str(tmp_path / "log"), str(tmp_path / "dead.jsonl")
    long_line = '{"long": "' + "x" * 3000 + '"}'
    with open(app, "w") as f:
        f.write('{"i": 0}\n' + long_line + '\r\n{"i": 1}\n')
    r = follow(log, app, "--max-record-bytes", "1KiB", "--on-error", f"dead-letter={dead}")
    assert r.returncode == 0, r.stderr
    (entry,) = [json.loads(x) for x in open(dead)]
    assert (entry["line"], entry["raw"]) == (2, long_line) and "raw_truncated" not in entry
