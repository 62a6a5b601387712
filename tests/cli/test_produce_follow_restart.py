"""produce --follow across reruns: a file rotated away while no follower ran stays known; a run that
fails part way through an append commits nothing that makes the rerun append a line twice.

Each run ends by --idle-timeout, so the tests need no timing of their own.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess

from conftest import CLI, cli_env, log_records, run_cli


def follow_once(log: str, *args: str) -> None:
    proc = run_cli("produce", log, *args, "--follow", "--idle-timeout", "300ms", timeout=60)
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


def test_a_closed_echo_pipe_after_an_append_then_a_rerun_appends_each_line_once(tmp_path):
    """The records of a batch are appended, then --echo finds the pipe closed: the commit on the way out
    must not claim them in the log without their lines' position, or the rerun appends them twice."""
    log, app = str(tmp_path / "L"), str(tmp_path / "app.jsonl")
    append(app, *range(1, 6))
    proc = subprocess.Popen([*CLI, "produce", log, app, "--follow", "--echo"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=cli_env())
    assert proc.stdout is not None
    assert json.loads(proc.stdout.readline())["value"] == 1  # 1..5 appended and echoed
    proc.stdout.close()  # the reader goes away (`| head -1`)
    append(app, *range(6, 11))
    assert proc.wait(timeout=60) == 141, proc.stderr.read() if proc.stderr else ""
    assert values(log) == list(range(1, 11))
    follow_once(log, app)
    assert values(log) == list(range(1, 11))


def test_the_file_size_limit_on_one_partition_after_another_took_its_share(tmp_path):
    """A batch split over two partitions: the first share is appended, the second fails (EFBIG, the
    file-size limit); the rerun appends the second and not the first again."""
    log, app = str(tmp_path / "L"), str(tmp_path / "app.jsonl")
    keyed = run_cli("produce", log, "--partitions", "2", "--key-field", "k", "--echo",
                    input="".join(json.dumps({"k": f"k{i}"}) + "\n" for i in range(20)), check=True)
    part = {r["key"]: r["partition"] for r in map(json.loads, keyed.stdout.splitlines())}
    k0, k1 = next(k for k, p in part.items() if p == 0), next(k for k, p in part.items() if p == 1)
    limit = 200_000
    run_cli("produce", log, "--partition", "1", input=json.dumps("x" * limit) + "\n", check=True)  # p1 at the limit
    append(app, {"k": k0, "n": 1}, {"k": k1, "n": 2})

    def fsize_limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run([*CLI, "produce", log, app, "--follow", "--key-field", "k", "--idle-timeout", "300ms"],
                          capture_output=True, env=cli_env(), preexec_fn=fsize_limit, timeout=60)
    assert proc.returncode != 0 and b"file size limit" in proc.stderr, proc.stderr.decode()
    follow_once(log, app, "--key-field", "k")
    got = [v["n"] for v in values(log) if isinstance(v, dict) and "n" in v]
    assert sorted(got) == [1, 2]


def test_a_bom_before_a_followed_files_first_line_is_skipped(tmp_path):
    log, app = str(tmp_path / "L"), str(tmp_path / "app.jsonl")
    with open(app, "wb") as f:
        f.write(b'\xef\xbb\xbf{"a":1}\n')
    follow_once(log, app)
    append(app, {"a": 2})
    follow_once(log, app)
    assert values(log) == [{"a": 1}, {"a": 2}]
    assert [r["headers"]["streamctl.file"] for r in log_records(log)] == ["f1:0", "f1:11"]  # where lines start


def test_a_known_file_gone_while_no_follower_ran_is_told_once(tmp_path):
    """Moved to another folder or deleted with lines not read yet: those lines cannot be appended any more;
    the rerun says so (the file, and where it was read to) instead of dropping it from the registry quietly."""
    log, app, other = str(tmp_path / "L"), str(tmp_path / "app.jsonl"), tmp_path / "elsewhere"
    other.mkdir()
    append(app, 1, 2)
    follow_once(log, app)
    append(app, 3)
    os.rename(app, other / "app.jsonl")
    r = run_cli("produce", log, app, "--follow", "--idle-timeout", "300ms", check=True)
    assert f"{app}: gone while no follower ran (deleted, or moved out of {tmp_path}): read and appended up to " \
           "byte 4; any line written to it after that was never read and is not in the log".encode() in r.stderr
    r = run_cli("produce", log, app, "--follow", "--idle-timeout", "300ms", check=True)
    assert b"while no follower ran" not in r.stderr  # told once: the registry no longer knows it
    assert json.loads(run_cli("stat", log, "--json", check=True).stdout).get("files", []) == []
    assert values(log) == [1, 2]
