"""consume FILE --follow: a plain file followed as it grows, with --from, --max, --until, filters and --idle-timeout."""

from __future__ import annotations

import subprocess
import time

from conftest import CLI, cli_env, run_cli


def test_follow_reads_the_lines_appended_while_it_runs(tmp_path):
    f = tmp_path / "f.jsonl"
    f.write_text('{"a":1}\n{"a":2}\n')
    proc = subprocess.Popen([*CLI, "consume", str(f), "--follow", "--idle-timeout", "2s", "--format", "%o %s\n"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
    time.sleep(0.8)
    with open(f, "a") as fh:
        fh.write('{"a":3}\n{"a":')  # a line still being written is not read
        fh.flush()
        time.sleep(0.5)
        fh.write('4}\n')
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == b'0 {"a":1}\n1 {"a":2}\n2 {"a":3}\n3 {"a":4}\n'


def test_from_max_until_and_filters_apply_while_following(tmp_path):
    f = tmp_path / "f.jsonl"
    f.write_text("".join(f'{{"a":{i}}}\n' for i in range(6)))
    follow = ("consume", str(f), "--follow", "--idle-timeout", "300ms", "--value")
    assert run_cli(*follow, "--from", "-2", check=True).stdout == b'{"a":4}\n{"a":5}\n'
    assert run_cli(*follow, "--from", "latest", check=True).stdout == b""
    # --max and --until end the follow themselves (no idle timeout needed)
    assert run_cli("consume", str(f), "-f", "--from", "1", "--max", "2", "--value", check=True,
                   timeout=30).stdout == b'{"a":1}\n{"a":2}\n'
    assert run_cli("consume", str(f), "-f", "--until", "4", "--where", "a >= 2", "--value", check=True,
                   timeout=30).stdout == b'{"a":2}\n{"a":3}\n'
    p = run_cli(*follow, "--from", "@1763719200000")
    assert p.returncode == 2 and b"a plain file has no timestamps" in p.stderr
    p = run_cli("consume", str(f), "-f", "--group", "g")
    assert p.returncode == 2 and b"need a log, not a plain file" in p.stderr
