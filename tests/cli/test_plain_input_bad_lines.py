"""A plain .jsonl input with a bad line: readers write every record before it, stop at it with exit 65
naming the file and line, and never fail on a line past where --max or --until stopped them."""

from __future__ import annotations

from conftest import run_cli

GOOD = "".join(f'{{"i": {i}}}\n' for i in range(3))


def test_records_before_a_bad_line_are_written(tmp_path):
    f = tmp_path / "in.jsonl"
    f.write_text(GOOD + "not json\n" + '{"i": 9}\n')
    r = run_cli("consume", str(f), "--value")
    assert r.returncode == 65
    assert r.stdout == GOOD.encode()
    assert f"{f}:4: invalid JSON".encode() in r.stderr


def test_a_bad_line_past_max_or_until_is_never_read(tmp_path):
    f = tmp_path / "in.jsonl"
    f.write_text(GOOD + "not json\n")
    assert run_cli("consume", str(f), "--value", "--max", "3", check=True).stdout == GOOD.encode()
    assert run_cli("consume", str(f), "--value", "--until", "3", check=True).stdout == GOOD.encode()
    assert run_cli("consume", "-", "--value", "--max", "3", input=f.read_bytes(), check=True).stdout == GOOD.encode()
    r = run_cli("replay", str(f), "--until", "3", check=True)
    assert [line.count(b'"i"') for line in r.stdout.splitlines()] == [1, 1, 1]
