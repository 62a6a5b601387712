"""A damaged group offset file is repaired the way its own message says: `streamctl replay LOG
--group G --to-earliest --execute` (an offset reset of every partition) replaces it; the reset
itself used to stop on the same damaged file. The message names the real log and group, so its
command can be pasted as it is. A reset of some partitions is refused (the others' offsets are
lost with the file), and nothing else ever resets a damaged file silently."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from conftest import cli_env, run_cli


def test_reset_replaces_a_damaged_offset_file(tmp_path) -> None:
    log = str(tmp_path / "orders")
    run_cli("produce", log, "--partitions", "2", input="".join(f"{i}\n" for i in range(6)), check=True)
    gfile = os.path.join(log, "groups", "billing.json")
    os.makedirs(os.path.dirname(gfile), exist_ok=True)
    with open(gfile, "wb") as f:
        f.write(b'{"format":1,"group":"billing","offs')  # torn
    p = run_cli("consume", log, "--group", "billing")
    # the message names this log and group in the command it suggests, ready to paste
    assert p.returncode == 1 and p.stdout == b""
    assert f"`streamctl replay {log} --group billing --to-earliest --execute`".encode() in p.stderr, p.stderr
    # a dry run shows the plan and changes nothing
    p = run_cli("replay", log, "--group", "billing", "--to-earliest")
    assert p.returncode == 0, p.stderr
    assert b"billing.json" in p.stderr and b"--execute replaces it" in p.stderr
    assert open(gfile, "rb").read().endswith(b'"offs')
    # some partitions only: refused, file untouched
    p = run_cli("replay", log, "--group", "billing", "--to-earliest", "--partition", "1", "--execute")
    assert p.returncode == 1 and b"without --partition" in p.stderr and b"Traceback" not in p.stderr
    assert open(gfile, "rb").read().endswith(b'"offs')
    p = run_cli("replay", log, "--group", "billing", "--to-earliest", "--execute")
    assert p.returncode == 0, p.stderr
    assert json.loads(open(gfile, "rb").read())["offsets"] == {"0": 0, "1": 0}
    p = run_cli("consume", log, "--group", "billing", "--value", check=True)
    assert sorted(p.stdout.split()) == [str(i).encode() for i in range(6)]
    assert run_cli("check", log).returncode == 0


def test_the_suggested_command_runs_as_pasted(tmp_path) -> None:
    log = str(tmp_path / "my orders")  # a path the shell must see quoted
    run_cli("produce", log, input="1\n2\n", check=True)
    gfile = os.path.join(log, "groups", "b.1.json")
    with open(gfile, "wb") as f:
        f.write(b"\x00" * 16)  # NUL-filled by a power cut
    p = run_cli("consume", log, "--group", "b.1")
    assert p.returncode == 1 and b"NUL" in p.stderr
    command = re.search(rb"`(streamctl replay [^`]*)`", p.stderr)
    assert command is not None and b" LOG " not in command.group(1) and b" G " not in command.group(1), p.stderr
    env = cli_env(PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    subprocess.run(command.group(1).decode(), shell=True, check=True, env=env, capture_output=True, timeout=60)
    assert json.loads(open(gfile, "rb").read())["offsets"] == {"0": 0}
    assert run_cli("consume", log, "--group", "b.1", "--value", check=True).stdout == b"1\n2\n"
