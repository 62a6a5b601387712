"""produce --on-error dead-letter=FILE writes "the raw line" (SPEC) of every rejected line, a line over
--max-record-bytes included (its first 16 MiB, with "raw_truncated" and "length" beyond that)."""

from __future__ import annotations

import json
import subprocess

from conftest import CLI, cli_env, log_records, run_cli


def test_an_over_long_line_is_written_whole(tmp_path):
    log, dead = str(tmp_path / "log"), str(tmp_path / "dead.jsonl")
    long1, long2 = '"' + "x" * 2000 + '"', '{"y": "' + "y" * 5000 + '"}'
    data = "1\n" + long1 + "\n2\n" + long2 + "\r\nnot json\n3\n"
    r = run_cli("produce", log, "--max-record-bytes", "1KiB", "--on-error", f"dead-letter={dead}", input=data)
    assert r.returncode == 0, r.stderr
    assert [rec["value"] for rec in log_records(log)] == [1, 2, 3]
    got = [json.loads(x) for x in open(dead)]
    assert [(d["line"], d["raw"]) for d in got] == [(2, long1), (4, long2), (5, "not json")]
    assert not any("raw_truncated" in d for d in got)


def test_an_over_long_line_written_in_pieces_is_kept_whole(tmp_path):
    """The line arrives over several reads (a slow writer): it is still kept whole."""
    log, dead = str(tmp_path / "log"), str(tmp_path / "dead.jsonl")
    proc = subprocess.Popen([*CLI, "produce", log, "--max-record-bytes", "1KiB", "--on-error", f"dead-letter={dead}"],
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
    assert proc.stdin is not None
    pieces = ['"' + "a" * 1500, "b" * 1500, "c" * 1500 + '"\n4\n']
    for piece in pieces:
        proc.stdin.write(piece.encode())
        proc.stdin.flush()
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else b""
    (entry,) = [json.loads(x) for x in open(dead)]
    assert entry["raw"] == "".join(pieces).split("\n")[0]
    assert [rec["value"] for rec in log_records(log)] == [4]
