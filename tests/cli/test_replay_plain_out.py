"""replay of a plain file (or -) with --out LOG2: its values are appended as records (key null,
ts the append time, as produce gives them), in order to partition 0, exit 0. A run that fails
before it has a record to append leaves no LOG2 behind; a bad line after good ones keeps the
records before it appended (as produce does) and exits 65."""

from __future__ import annotations

import json
import os
import time

from conftest import log_records, run_cli


def test_a_plain_file_is_appended_to_a_new_log(tmp_path) -> None:
    src = tmp_path / "plain.jsonl"
    src.write_text('1\n{"a": 2}\n\n"x"\n{"headers": {"h": "v"}}\n')
    out = str(tmp_path / "po")
    before = int(time.time() * 1000)
    p = run_cli("replay", str(src), "--out", out)
    after = int(time.time() * 1000)
    assert p.returncode == 0, p.stderr
    assert p.stdout == b"" and b"appended 4 record(s) to" in p.stderr
    recs = log_records(out)
    assert [r["value"] for r in recs] == [1, {"a": 2}, "x", {"headers": {"h": "v"}}]
    assert [(r["offset"], r["partition"], r["key"]) for r in recs] == [(i, 0, None) for i in range(4)]
    assert all(before <= r["ts"] <= after and "headers" not in r for r in recs)
    assert run_cli("check", out).returncode == 0


def test_stdin_and_an_existing_log_with_several_partitions(tmp_path) -> None:
    out = str(tmp_path / "po2")
    p = run_cli("replay", "-", "--out", out, input="1\n")
    assert p.returncode == 0, p.stderr
    assert [(r["key"], r["value"]) for r in log_records(out)] == [(None, 1)]
    many = str(tmp_path / "many")
    run_cli("produce", many, "--partitions", "3", "--partition", "0", input="0\n", check=True)
    p = run_cli("replay", "-", "--out", many, "--from", "1", input="".join(f"{i}\n" for i in range(6)))
    assert p.returncode == 0, p.stderr
    # a plain file is one partition: its records keep their order, in partition 0
    assert [r["value"] for r in log_records(many) if r["partition"] == 0] == [0, 1, 2, 3, 4, 5]


def test_a_failure_before_any_record_leaves_no_log(tmp_path) -> None:
    out = str(tmp_path / "po")
    p = run_cli("replay", "-", "--out", out, input="not json\n2\n")
    assert p.returncode == 65 and b"<stdin>:1" in p.stderr
    p = run_cli("replay", str(tmp_path / "missing.jsonl"), "--out", out)
    assert p.returncode == 2
    p = run_cli("replay", "-", "--out", out, "--compact", input="1\n")
    assert p.returncode == 2
    assert not os.path.exists(out)


def test_a_bad_line_after_good_ones_keeps_them(tmp_path) -> None:
    out = str(tmp_path / "po3")
    p = run_cli("replay", "-", "--out", out, input="1\n2\n{bad\n4\n")
    assert p.returncode == 65 and b"<stdin>:3: invalid JSON" in p.stderr
    assert b"appended 2 record(s)" in p.stderr
    assert [r["value"] for r in log_records(out)] == [1, 2]
    assert json.loads(open(os.path.join(out, "streamctl.json")).read())["partitions"] == 1
