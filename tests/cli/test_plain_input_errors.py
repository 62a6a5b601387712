"""An invalid line in a plain input file: window and join name it as consume does (`FILE:LINE: invalid
JSON: reason`, blank lines counted, exit 65), whichever reader meets it: the column read of a window
(read ahead or not), the record read, a join's plain-file merge and its table side, and stdin."""

from __future__ import annotations

import orjson
import pytest

from conftest import run_cli

T0 = 1_763_719_200_000
BAD = b'{"ts": 1, "k": '


def write(path, n_before: int, blanks: int = 2) -> int:
    """A file of good lines, `blanks` blank lines among the first ones, the bad line, then more good
    lines; its line number."""
    lines = [orjson.dumps({"ts": T0 + i * 1000, "k": f"u{i % 7}", "v": i}) for i in range(n_before)]
    lines[1:1] = [b""] * (blanks - 1) + [b"  \r"]
    lines.append(BAD)
    lines += [orjson.dumps({"ts": T0, "k": "z", "v": 0})] * 50
    path.write_bytes(b"\n".join(lines) + b"\n")
    return n_before + blanks + 1


def consume_error(path) -> bytes:
    p = run_cli("consume", str(path))
    assert p.returncode == 65
    return p.stderr.strip().splitlines()[-1]


# 30 lines: one piece; 60k lines: several 1 MiB pieces before the bad line
@pytest.mark.parametrize("n_before", [30, 60_000])
def test_window_names_the_file_and_line_like_consume(tmp_path, n_before):
    path = tmp_path / "in.jsonl"
    lineno = write(path, n_before)
    want = consume_error(path)
    assert want.startswith(f"streamctl: {path}:{lineno}: invalid JSON: ".encode())
    for args in (["--by", "k", "--agg", "sum:v"],  # read as columns
                 ["--agg", "count"],  # no --by: read as records
                 ["--by", "k", "--processing-time"]):
        p = run_cli("window", str(path), "--tumbling", "1m", *args)
        assert p.returncode == 65, p.stderr
        assert p.stderr.strip().splitlines()[-1] == want, args
        assert b"Traceback" not in p.stderr


def test_window_on_stdin_names_stdin_and_line(tmp_path):
    path = tmp_path / "in.jsonl"
    lineno = write(path, 30)
    for args in (["--by", "k"], []):
        p = run_cli("window", "-", "--tumbling", "1m", *args, input=path.read_bytes())
        assert p.returncode == 65
        assert p.stderr.strip().splitlines()[-1].startswith(f"streamctl: <stdin>:{lineno}: invalid JSON: ".encode())


@pytest.mark.parametrize("n_before", [30, 60_000])
def test_join_names_the_file_and_line_like_consume(tmp_path, n_before):
    bad = tmp_path / "bad.jsonl"
    lineno = write(bad, n_before)
    want = consume_error(bad)
    assert f":{lineno}: ".encode() in want
    good = tmp_path / "good.jsonl"
    good.write_bytes(b"".join(orjson.dumps({"ts": T0 + i, "k": f"u{i % 7}"}) + b"\n" for i in range(100)))
    for args in ([str(good), str(bad), "--within", "1m", "--time-field", "value.ts"],
                 [str(bad), str(good), "--within", "1m", "--time-field", "value.ts"],
                 [str(good), str(bad), "--table", "--time-field", "value.ts"],
                 [str(bad), str(good), "--table", "--time-field", "value.ts"]):
        p = run_cli("join", *args, "--on", "value.k")
        assert p.returncode == 65, (args, p.stderr)
        assert p.stderr.strip().splitlines()[-1] == want, args
