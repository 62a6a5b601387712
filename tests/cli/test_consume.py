"""consume through the CLI: outputs, --from forms, groups, the end snapshot, pipes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import CLI, cli_env, run_cli


def make_log(log: str, n: int = 20, partitions: int = 1, extra: tuple[str, ...] = ()) -> None:
    lines = "".join(json.dumps({"k": f"k{i % 5}", "i": i}) + "\n" for i in range(n))
    run_cli("produce", log, "--partitions", str(partitions), "--key-field", "k", *extra, input=lines, check=True)


def lines_of(p: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(x) for x in p.stdout.splitlines()]


def test_stored_lines_pass_through_byte_identical(logdir):
    make_log(logdir, 50)
    seg = open(os.path.join(logdir, "p0", "00000000000000000000.jsonl"), "rb").read()
    assert run_cli("consume", logdir, check=True).stdout == seg


def test_value_and_format(logdir):
    make_log(logdir, 3)
    assert run_cli("consume", logdir, "--value", check=True).stdout.splitlines()[0] == b'{"k": "k0", "i": 0}'
    out = run_cli("consume", logdir, "--format", r"%o %k\t%s\n", check=True).stdout
    assert out.splitlines()[1] == b'1 k1\t{"k": "k1", "i": 1}'
    assert run_cli("consume", logdir, "--value", "--format", "%s").returncode == 2
    assert run_cli("consume", logdir, "--format", "%q").returncode == 2


def test_partitions_merged_by_ts_partition_offset(logdir):
    for batch in range(3):
        lines = "".join(json.dumps({"k": f"k{i}", "b": batch}) + "\n" for i in range(6))
        run_cli("produce", logdir, "--partitions", "3", "--key-field", "k", input=lines, check=True)
        time.sleep(0.01)
    recs = lines_of(run_cli("consume", logdir, check=True))
    assert len(recs) == 18
    keys = [(r["ts"], r["partition"], r["offset"]) for r in recs]
    assert keys == sorted(keys)
    only = lines_of(run_cli("consume", logdir, "--partition", "1", check=True))
    assert only and {r["partition"] for r in only} == {1}
    assert run_cli("consume", logdir, "--partition", "3").returncode == 2


def test_from_forms(logdir):
    make_log(logdir, 10)
    offs = lambda *a: [r["offset"] for r in lines_of(run_cli("consume", logdir, *a, check=True))]  # noqa: E731
    assert offs("--from", "earliest") == list(range(10))
    assert offs("--from", "latest") == []
    assert offs("--from", "7") == [7, 8, 9]
    assert offs("--from", "-3") == [7, 8, 9]
    assert offs("--from", "-30") == list(range(10))
    assert offs("--from", "99") == []
    assert offs("--max", "4", "--from", "2") == [2, 3, 4, 5]
    assert offs("--from", "@0") == list(range(10))
    assert offs("--from", "-1h") == list(range(10))
    assert offs("--from", "2999-01-01T00:00:00Z") == []
    assert run_cli("consume", logdir, "--from", "tomorrow").returncode == 2


def test_from_time_finds_first_record_at_or_after(logdir):
    run_cli("produce", logdir, input="1\n2\n", check=True)
    time.sleep(0.05)
    run_cli("produce", logdir, input="3\n", check=True)
    recs = lines_of(run_cli("consume", logdir, check=True))
    t3 = recs[2]["ts"]
    assert [r["value"] for r in lines_of(run_cli("consume", logdir, "--from", f"@{t3}", check=True))] == [3]


def test_from_time_and_offset_across_many_segments(logdir):
    make_log(logdir, 400, extra=("--segment-bytes", "1KiB"))
    assert len(os.listdir(os.path.join(logdir, "p0"))) > 10
    got = [r["offset"] for r in lines_of(run_cli("consume", logdir, "--from", "333", check=True))]
    assert got == list(range(333, 400))
    got = [r["offset"] for r in lines_of(run_cli("consume", logdir, "--from", "-17", check=True))]
    assert got == list(range(383, 400))


def test_max_zero_writes_and_commits_nothing(logdir):
    """--max 0 stops before the first record: with a group or --follow too, nothing is written
    and no offset is committed."""
    make_log(logdir, 6, partitions=3)
    assert run_cli("consume", logdir, "--max", "0", check=True).stdout == b""
    assert run_cli("consume", logdir, "--group", "m0", "--max", "0", check=True).stdout == b""
    assert not os.path.exists(os.path.join(logdir, "groups", "m0.json"))
    assert run_cli("consume", logdir, "--max", "0", "--follow", "--idle-timeout", "1s", check=True).stdout == b""
    assert len(lines_of(run_cli("consume", logdir, "--group", "m0", check=True))) == 6


def test_group_commits_and_resumes(logdir):
    make_log(logdir, 10, partitions=2)
    first = lines_of(run_cli("consume", logdir, "--group", "g1", "--max", "4", check=True))
    assert len(first) == 4
    rest = lines_of(run_cli("consume", logdir, "--group", "g1", check=True))
    assert len(rest) == 6
    seen = {(r["partition"], r["offset"]) for r in first + rest}
    assert len(seen) == 10
    assert run_cli("consume", logdir, "--group", "g1", check=True).stdout == b""
    committed = json.load(open(os.path.join(logdir, "groups", "g1.json")))
    assert committed["group"] == "g1"
    # other groups fan out: they get everything
    assert len(lines_of(run_cli("consume", logdir, "--group", "g2", check=True))) == 10
    # --from wins over the committed offsets
    assert len(lines_of(run_cli("consume", logdir, "--group", "g1", "--from", "earliest", check=True))) == 10


def test_group_renders_the_same_as_without_group(logdir):
    """--group with --value/--format renders whole blocks; output equals the group-less run, and a
    damaged line is reported with its segment and byte, nothing committed past it."""
    make_log(logdir, 300, partitions=3, extra=("--segment-bytes", "2KiB"))
    for flags in (["--value"], ["--format", r"%p:%o %k %s\n"]):
        plain = run_cli("consume", logdir, *flags, check=True).stdout
        grouped = run_cli("consume", logdir, "--group", "r" + flags[0][2:], *flags, check=True).stdout
        assert grouped == plain and plain.count(b"\n") == 300
    seg = os.path.join(logdir, "p1", "00000000000000000000.jsonl")
    data = open(seg, "rb").read()
    with open(seg, "r+b") as f:
        f.seek(data.index(b"\n", data.index(b"\n") + 1) - 1)  # the second line's closing brace
        f.write(b"]")
    r = run_cli("consume", logdir, "--group", "broken", "--value")
    assert r.returncode == 1
    assert re.search(rb"00000000000000000000\.jsonl:\d+: byte \d+: corrupt record", r.stderr) and b"Traceback" not in r.stderr
    committed = json.load(open(os.path.join(logdir, "groups", "broken.json")))["offsets"] if \
        os.path.exists(os.path.join(logdir, "groups", "broken.json")) else {}
    assert committed.get("1", 0) <= 1


@pytest.mark.parametrize("bad", ["", "..", ".", "a/b", "a b", "x" * 250, "../etc", "a\nb"])
def test_bad_group_names_refused_before_any_file_access(logdir, bad):
    make_log(logdir, 1)
    p = run_cli("consume", logdir, f"--group={bad}")
    assert p.returncode == 2 and b"invalid group name" in p.stderr
    assert os.listdir(os.path.join(logdir, "groups")) == []


def test_group_name_with_nul_refused():
    from streamctl.errors import UsageError
    from streamctl.storage.names import check_group

    with pytest.raises(UsageError):
        check_group("a\x00b")


def test_corrupt_offset_file_is_an_error_not_a_reset(logdir):
    make_log(logdir, 3)
    gpath = os.path.join(logdir, "groups", "g.json")
    for content in [b"", b"\x00" * 40, b'{"offsets": {"0": -1}}', b'{"offsets": {"0": "x"}}', b"[]",
                    b'{"offsets": {"7": 1}}']:
        open(gpath, "wb").write(content)
        p = run_cli("consume", logdir, "--group", "g")
        assert p.returncode == 1 and b"g.json" in p.stderr and p.stdout == b"", content
        assert b"Traceback" not in p.stderr
    open(gpath, "wb").write(b'{"format":1,"group":"g","offsets":{"0":99}}')
    p = run_cli("consume", logdir, "--group", "g")
    assert p.returncode == 1 and b"past the end" in p.stderr


def test_end_is_snapshotted_at_start(logdir):
    """A producer running beside consume does not keep it alive (kcat's -e pitfall)."""
    make_log(logdir, 2000)
    prod = subprocess.Popen(
        [sys.executable, "-c", "import sys,time\nfor i in range(100000):\n print(i, flush=i%50==0)\n"],
        stdout=subprocess.PIPE)
    writer = subprocess.Popen([*CLI, "produce", logdir], stdin=prod.stdout, stderr=subprocess.DEVNULL, env=cli_env())
    try:
        time.sleep(0.3)
        t0 = time.monotonic()
        p = run_cli("consume", logdir, timeout=60)
        assert p.returncode == 0
        assert time.monotonic() - t0 < 30
        offs = [json.loads(x)["offset"] for x in p.stdout.splitlines()]
        assert offs == list(range(len(offs))) and len(offs) >= 2000
    finally:
        prod.kill()
        writer.kill()
        prod.wait()
        writer.wait()


def test_head_closes_pipe_quietly_and_commit_not_past_written(logdir):
    lines = "".join(json.dumps({"i": i, "pad": "z" * 200}) + "\n" for i in range(60000))
    run_cli("produce", logdir, input=lines, check=True)
    p = subprocess.run(f"{' '.join(CLI)} consume {logdir} --group h | head -1", shell=True, capture_output=True,
                       env=cli_env(), executable="/bin/bash", timeout=60)
    assert p.stdout.count(b"\n") == 1
    assert b"Traceback" not in p.stderr and b"Error" not in p.stderr
    st = subprocess.run(f"{' '.join(CLI)} consume {logdir} --group h2 | head -1; echo ${{PIPESTATUS[0]}}",
                        shell=True, capture_output=True, env=cli_env(), executable="/bin/bash", timeout=60)
    assert st.stdout.splitlines()[-1] == b"141"
    gfile = os.path.join(logdir, "groups", "h.json")
    committed = json.load(open(gfile))["offsets"].get("0", 0) if os.path.exists(gfile) else 0
    # head read one line; consume may have flushed a block before the pipe closed, never more than it wrote
    assert committed < 60000


def test_consume_to_dev_full_fails_and_does_not_commit(logdir):
    make_log(logdir, 100)
    with open("/dev/full", "wb") as full:
        p = subprocess.run([*CLI, "consume", logdir, "--group", "df"], stdout=full, stderr=subprocess.PIPE,
                           env=cli_env(), timeout=60)
    assert p.returncode == 1 and b"No space left" in p.stderr
    assert not os.path.exists(os.path.join(logdir, "groups", "df.json"))


def test_plain_file_and_stdin_inputs(tmp_path):
    f = tmp_path / "events.jsonl"
    f.write_text('{"a":1}\n{"a":2}\n\n{"a":3}\n')
    recs = lines_of(run_cli("consume", str(f), check=True))
    assert [(r["offset"], r["partition"], r["value"]) for r in recs] == [(0, 0, {"a": 1}), (1, 0, {"a": 2}), (3, 0, {"a": 3})]  # line numbers: the blank line 2 holds no record
    assert all("ts" not in r for r in recs)
    assert run_cli("consume", str(f), "--value", "--from", "-1", check=True).stdout == b'{"a":3}\n'
    assert run_cli("consume", "-", "--format", "%o=%s\n", input='"x"\n"y"\n', check=True).stdout == b"0=x\n1=y\n"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('1\n{oops\n')
    p = run_cli("consume", str(bad))
    assert p.returncode == 65 and b"bad.jsonl:2" in p.stderr
    assert run_cli("consume", str(f), "--group", "g").returncode == 2
    assert run_cli("consume", str(tmp_path / "missing")).returncode == 2


def test_sigint_commits_what_was_written_and_exits_130(logdir, tmp_path):
    rc, err, out = interrupt_mid_run(logdir, tmp_path, " --group slow")
    assert rc == "130"
    assert b"Traceback" not in err
    committed = json.load(open(os.path.join(logdir, "groups", "slow.json")))["offsets"]["0"]
    written = out.count(b"\n")
    assert 0 < committed <= written < 200000


def interrupt_mid_run(logdir: str, tmp_path, args: str) -> tuple[str, bytes, bytes]:
    """SIGINT to `consume LOG{args}` while its reader stalls: (exit code, stderr, what the reader got)."""
    import signal

    lines = "".join(json.dumps({"i": i, "pad": "q" * 100}) + "\n" for i in range(200000))
    run_cli("produce", logdir, input=lines, check=True)
    rc, out, err = tmp_path / "rc", tmp_path / "out", tmp_path / "err"
    # the reader stalls for a while, so consume is mid-run (blocked writing) when interrupted
    script = (f"{' '.join(CLI)} consume {logdir}{args} 2>{err} | "
              f"(head -c 100001 >{out}; sleep 3; cat >>{out}); echo ${{PIPESTATUS[0]}} > {rc}")
    proc = subprocess.Popen(["bash", "-c", script], env=cli_env())
    # once head has its 100001 bytes the reader sleeps, and consume is blocked writing into the pipe
    deadline = time.monotonic() + 60
    while not (out.exists() and out.stat().st_size >= 100001):
        assert time.monotonic() < deadline and proc.poll() is None, "consume never filled the pipe"
        time.sleep(0.02)
    pids = subprocess.run(["pgrep", "-f", f"streamctl consume {logdir}{args}$"], capture_output=True).stdout.split()
    assert pids
    for pid in pids:
        os.kill(int(pid), signal.SIGINT)
    proc.wait(timeout=60)
    return rc.read_text().strip(), err.read_bytes(), out.read_bytes()


def test_zero_copy_path_matches_the_stored_lines(logdir, tmp_path):
    """One partition, stored lines unchanged: consume copies byte ranges (sendfile); same bytes as
    the lines themselves, from any start, into a pipe, a file, or a file opened for append."""
    make_log(logdir, 400, partitions=2, extra=("--segment-bytes", "1KiB"))
    for p in (0, 1):
        segs = sorted(n for n in os.listdir(os.path.join(logdir, f"p{p}")) if n.endswith(".jsonl"))
        assert len(segs) > 5
        stored = b"".join(open(os.path.join(logdir, f"p{p}", s), "rb").read() for s in segs).splitlines(keepends=True)
        assert run_cli("consume", logdir, "--partition", str(p), check=True).stdout == b"".join(stored)
        mid = json.loads(stored[len(stored) // 2])["offset"]
        got = run_cli("consume", logdir, "--partition", str(p), "--from", str(mid), check=True).stdout
        assert got == b"".join(stored[len(stored) // 2:])
    target = tmp_path / "appended.jsonl"
    target.write_bytes(b"first\n")
    subprocess.run(f"{' '.join(CLI)} consume {logdir} --partition 1 >> {target}", shell=True, check=True,
                   env=cli_env(), timeout=60)
    assert target.read_bytes() == b"first\n" + run_cli("consume", logdir, "--partition", "1", check=True).stdout


def test_sigint_during_zero_copy_ends_on_a_whole_line_and_exits_130(logdir, tmp_path):
    rc, err, got = interrupt_mid_run(logdir, tmp_path, "")
    assert rc == "130"
    assert b"Traceback" not in err
    assert got.endswith(b"\n") and 0 < got.count(b"\n") < 200000
    assert [json.loads(x)["offset"] for x in got.splitlines()] == list(range(got.count(b"\n")))


def test_a_plain_files_offsets_are_line_numbers_in_every_command(tmp_path):
    """A blank line holds no record, and its number is skipped: consume, tail, --where, --until,
    and window's offset path all read the same offsets (the line numbers an error names, less one)."""
    f = tmp_path / "b.jsonl"
    f.write_text('{"a":1}\n\n{"a":2}\n   \n{"a":3}\n')
    assert run_cli("consume", str(f), "--format", "%o ", check=True).stdout == b"0 2 4 "
    assert run_cli("tail", "-n", "2", str(f), "--format", "%o ", check=True).stdout == b"2 4 "
    assert run_cli("consume", str(f), "--where", "offset == 2", "--value", check=True).stdout == b'{"a":2}\n'
    assert run_cli("consume", str(f), "--until", "3", "--format", "%o ", check=True).stdout == b"0 2 "
    assert run_cli("consume", str(f), "--from", "3", "--format", "%o ", check=True).stdout == b"4 "
    p = run_cli("window", str(f), "--tumbling", "1h", "--time-field", "a", "--by", "offset", check=True)
    assert [json.loads(x)["key"] for x in p.stdout.splitlines()] == [0, 2, 4]
    f.write_text('{"a":1}\n\n{"a":2}\nbad\n')
    p = run_cli("consume", str(f), "--format", "%o ")
    assert p.returncode == 65 and p.stdout == b"0 2 " and b"b.jsonl:4: invalid JSON" in p.stderr
