"""Group files under attack and at the edges: a symlinked groups/ or partition folder, group names of
1 to 249 characters, a full disk at commit time, and stray files in groups/ -- through the CLI."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import run_cli
from torture.util import strace_run

PARTITIONS = 12
RECORDS = 24


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    """A 12-partition log of 24 records (two a partition), copied by each test."""
    log = str(tmp_path_factory.mktemp("template") / "log")
    run_cli("produce", log, "--partitions", str(PARTITIONS),
            input="".join(f"{i}\n" for i in range(RECORDS)), check=True)
    return log


@pytest.fixture
def log(template, tmp_path) -> str:
    dst = str(tmp_path / "log")
    shutil.copytree(template, dst, symlinks=True)
    return dst


def lines(out: bytes) -> list[bytes]:
    return out.splitlines()


# -- a symlinked groups/ folder: every writer refuses before writing anything, outside LOG or in it

WRITERS = {
    "consume": ["consume", "{log}", "--group", "g"],
    "follow": ["consume", "{log}", "--group", "g", "--follow", "--idle-timeout", "200ms"],
    "exec": ["consume", "{log}", "--group", "g", "--exec", "cat"],
    "replay-execute": ["replay", "{log}", "--group", "g", "--to-earliest", "--execute"],
    "window-follow": ["window", "{log}", "--tumbling", "1m", "--follow", "--group", "g", "--idle-timeout", "200ms"],
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_symlinked_groups_folder_is_refused_by_every_writer(log, tmp_path, writer):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.rmtree(os.path.join(log, "groups"))
    os.symlink(outside, os.path.join(log, "groups"))
    p = run_cli(*[a.format(log=log) for a in WRITERS[writer]])
    assert p.returncode == 1, p.stderr
    assert f"{log}/groups is a symlink; refusing to write through it".encode() in p.stderr
    assert b"Traceback" not in p.stderr
    assert p.stdout == b""  # refused before a record was delivered
    assert os.listdir(outside) == []


def test_dangling_groups_symlink_is_refused_and_not_created(log, tmp_path):
    outside = tmp_path / "elsewhere"
    shutil.rmtree(os.path.join(log, "groups"))
    os.symlink(outside, os.path.join(log, "groups"))
    p = run_cli("consume", log, "--group", "g", "--follow", "--idle-timeout", "200ms")
    assert p.returncode == 1 and b"groups is a symlink" in p.stderr and p.stdout == b""
    assert not os.path.lexists(outside)


def test_groups_that_is_a_file_is_refused_naming_it(log):
    shutil.rmtree(os.path.join(log, "groups"))
    open(os.path.join(log, "groups"), "w").close()
    p = run_cli("consume", log, "--group", "g")
    assert p.returncode == 1 and f"{log}/groups is not a folder".encode() in p.stderr and p.stdout == b""


def test_symlinked_partition_folder_is_refused_by_writers_and_reported_by_check(log, tmp_path):
    outside = tmp_path / "elsewhere"
    os.rename(os.path.join(log, "p0"), outside)
    os.symlink(outside, os.path.join(log, "p0"))
    before = {n: (outside / n).read_bytes() for n in os.listdir(outside)}
    for args in (["produce", log, "--partition", "0"], ["compact", log, "--roll"]):
        p = run_cli(*args, input="1\n")
        assert p.returncode == 1 and f"{log}/p0 is a symlink".encode() in p.stderr, (args, p.stderr)
    assert {n: (outside / n).read_bytes() for n in os.listdir(outside)} == before
    p = run_cli("check", log)
    assert p.returncode == 1 and f"{log}/p0: is a symlink".encode() in p.stdout


# -- group names of 1, 200 and 249 characters: commits land, nothing is delivered twice

def committed(log: str, group: str) -> dict[str, int]:
    with open(os.path.join(log, "groups", f"{group}.json")) as f:  # the spec's name, as it is
        return json.load(f)["offsets"]


@pytest.mark.parametrize("size", [1, 200, 249])
def test_group_names_up_to_249_characters_commit(log, size):
    group = "g" * (size - 1) + "z"
    half = RECORDS // 2
    first = run_cli("consume", log, "--group", group, "--max", str(half), "--value", check=True)
    seen = [int(x) for x in lines(first.stdout)]
    assert len(seen) == half and sum(committed(log, group).values()) == half
    if size == 249:
        # a live member (slot, claims) and a window checkpoint, both named for 249-character groups
        rest = run_cli("consume", log, "--group", group, "--follow", "--idle-timeout", "300ms", "--value", check=True)
        w = run_cli("window", log, "--tumbling", "1h", "--follow", "--group", "w" * 249, "--idle-timeout", "300ms",
                    check=True)
        assert w.stdout == b""  # one hour's window, still open: kept in the checkpoint
        from streamctl.processing.windows.follow import checkpoint_path
        from streamctl.storage import log as logmod

        ck = json.load(open(checkpoint_path(logmod.open_log(log), "w" * 249)))
        assert ck["run"]["stats"]["events"] == RECORDS
        assert sum(committed(log, "w" * 249).values()) == RECORDS
    else:
        rest = run_cli("consume", log, "--group", group, "--exec", "cat", "--batch", "5", "--value", check=True)
    assert sorted(seen + [int(x) for x in lines(rest.stdout)]) == list(range(RECORDS))
    assert committed(log, group) == {str(p): RECORDS // PARTITIONS for p in range(PARTITIONS)}
    names = os.listdir(os.path.join(log, "groups"))
    assert all(len(n.encode()) <= 255 for n in names) and not [n for n in names if n.endswith(".tmp")]


# -- messages name the group file

def test_full_disk_at_commit_names_the_group_file_and_what_was_not_committed(strace, log):
    # the first fsync of a one-shot `consume --group` is the group file's temp file
    p = strace_run(strace, "fsync", "error=ENOSPC", 1, ["consume", log, "--group", "g", "--value"])
    assert p.returncode == 1 and b"Traceback" not in p.stderr
    msg = p.stderr.decode()
    assert f"{log}/groups/g.json" in msg and "No space left on device" in msg and "were not committed" in msg
    assert len(lines(p.stdout)) == RECORDS  # printed, and so delivered again:
    assert not os.path.exists(os.path.join(log, "groups", "g.json"))
    assert len(lines(run_cli("consume", log, "--group", "g", check=True).stdout)) == RECORDS
    p = strace_run(strace, "fsync", "error=ENOSPC", 1, ["replay", log, "--group", "g", "--to-earliest", "--execute"])
    assert p.returncode == 1 and f"{log}/groups/g.json".encode() in p.stderr and b"offsets are unchanged" in p.stderr


def test_folder_named_like_a_group_file_is_named(log):
    os.mkdir(os.path.join(log, "groups", "x.json"))
    where = f"{log}/groups/x.json: is a folder".encode()
    for args in (["consume", log, "--group", "x"], ["stat", log]):
        p = run_cli(*args)
        assert p.returncode == 1 and where in p.stderr and b"Is a directory" not in p.stderr, (args, p.stderr)
    p = run_cli("check", log)
    assert p.returncode == 1 and where in p.stdout


def test_stray_group_file_is_reported_by_check_and_skipped_by_stat_and_compact(log):
    stray = os.path.join(log, "groups", "bad name.json")
    with open(stray, "w") as f:
        f.write('{"format":1,"group":"bad name","offsets":{"0":0}}\n')
    named = f"{stray}: not a group offset file".encode()
    p = run_cli("check", log)
    assert p.returncode == 1 and named in p.stdout
    p = run_cli("stat", log, "--json")
    assert p.returncode == 0 and named in p.stderr and json.loads(p.stdout)["groups"] == []
    p = run_cli("compact", log, "--retention-bytes", "1")
    assert p.returncode == 0 and named in p.stderr
