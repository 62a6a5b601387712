"""produce --on-error dead-letter=FILE writes "the raw line" (SPEC) of every rejected line, a line over
--max-record-bytes included (its first 16 MiB, with "raw_truncated" and "length" beyond that)."""

from __future__ import annotations

import json
import os
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


def test_a_dead_letter_file_inside_the_log_is_refused_at_start(tmp_path):
    """A rejected line written into a segment would corrupt the log: FILE inside LOG is a usage error,
    however it is spelled (relative, through a symlink, with ..), and nothing is appended."""
    log = str(tmp_path / "log")
    run_cli("produce", log, input="1\n", check=True)
    seg = os.path.join(log, "p0", "00000000000000000000.jsonl")
    before = open(seg, "rb").read()
    os.symlink(log, tmp_path / "alias")
    for target in (seg, "log/p0/00000000000000000000.jsonl", str(tmp_path / "alias" / "p0" / ".." / "x.jsonl"),
                   log):
        for follow in ((), ("--follow",)):
            args = (str(tmp_path / "in.jsonl"),) if follow else ()
            open(tmp_path / "in.jsonl", "w").write("2\nbad\n")
            r = run_cli("produce", log, *args, *follow, "--on-error", f"dead-letter={target}", input="2\nbad\n",
                        cwd=str(tmp_path))
            assert r.returncode == 2 and b"inside the log" in r.stderr, (target, r.stderr)
    assert open(seg, "rb").read() == before
    assert [rec["value"] for rec in log_records(log)] == [1]
    assert not os.path.exists(os.path.join(log, "x.jsonl"))


def test_a_dead_letter_file_that_cannot_be_opened_is_a_usage_error_before_any_append(tmp_path):
    log, dead = str(tmp_path / "log"), str(tmp_path / "missing" / "dead.jsonl")
    r = run_cli("produce", log, "--on-error", f"dead-letter={dead}", input="1\n2\nbad\n3\n")
    assert r.returncode == 2, r.stderr
    assert f"dead-letter={dead}: cannot open: its folder {tmp_path / 'missing'} does not exist".encode() in r.stderr
    assert not os.path.exists(log)  # a usage error creates nothing
    # opened (created) at start, so it is there even when no line is rejected
    ok = str(tmp_path / "dead.jsonl")
    run_cli("produce", log, "--on-error", f"dead-letter={ok}", input="1\n", check=True)
    assert os.path.getsize(ok) == 0
