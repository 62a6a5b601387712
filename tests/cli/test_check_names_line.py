"""check names the line of each problem in a segment (SPEC section 3: messages name the file, line
and reason), in the text report and in --json, beside the byte offset."""

from __future__ import annotations

import json
import os

from conftest import run_cli

SEG = os.path.join("p0", "00000000000000000000.jsonl")


def _log(tmp_path) -> str:
    log = str(tmp_path / "orders")
    run_cli("produce", log, input="1\n2\n3\n4\n", check=True)
    return log


def test_corrupt_record_is_named_by_line(tmp_path) -> None:
    log = _log(tmp_path)
    seg = os.path.join(log, SEG)
    lines = open(seg, "rb").read().split(b"\n")
    lines[2] = b"{garbage"
    open(seg, "wb").write(b"\n".join(lines))
    p = run_cli("check", log)
    assert p.returncode == 1 and b"Traceback" not in p.stderr
    byte = len(lines[0]) + len(lines[1]) + 2
    assert f"{seg}: byte {byte}: corrupt record: invalid JSON".encode() in p.stdout, p.stdout
    assert b" (line 3)\n" in p.stdout, p.stdout
    rep = json.loads(run_cli("check", log, "--json").stdout)
    assert [(q["byte"], q["line"]) for q in rep["problems"]] == [(byte, 3)]


def test_offsets_and_torn_tail_are_named_by_line(tmp_path) -> None:
    log = _log(tmp_path)
    seg = os.path.join(log, SEG)
    lines = open(seg, "rb").read().split(b"\n")
    lines[1] = lines[1].replace(b'"offset":1', b'"offset":0')
    open(seg, "wb").write(b"\n".join(lines) + b'{"offset":4,"part')
    out = run_cli("check", log).stdout
    assert b": offset 0 does not increase (previous 0) (line 2)\n" in out, out
    assert b": torn tail" in out and b"after the last complete line) (line 5)\n" in out, out
    rep = json.loads(run_cli("check", log, "--json").stdout)
    assert [q["line"] for q in rep["problems"]] == [2, 5]
