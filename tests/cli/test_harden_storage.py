"""Storage hardening: stray compaction swaps, a damaged last line, torn tails after a real kill -9,
corrupt stored lines refused by every reader, and segments missing from the middle of a partition."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys

import pytest

from conftest import cli_env, run_cli
from streamctl.maintenance.check import check
from streamctl.storage import reader, record, replace, segment
from streamctl.storage.appender import Appender
from streamctl.storage.log import open_log, open_or_create


def make_log(path: str, n: int = 300, keys: int | None = None, segment_bytes: int = 4096) -> list[bytes]:
    """n records in one partition, small segments; key i (or i % keys), every 10th without a key."""
    lg = open_or_create(path, 1, segment_bytes, 0)
    items = []
    for i in range(n):
        key = None if i % 10 == 9 else f"k{i % keys if keys else i}"
        items.append((record.key_json(key), json.dumps({"i": i, "pad": "x" * 20}).encode(), None))
    lines: list[bytes] = []
    with Appender(lg, fsync="never") as app:
        for j in range(0, n, 10):
            lines.extend(app.append(0, items[j:j + 10], want_lines=True).lines or [])
    return lines


def stored(path: str) -> list[bytes]:
    lg = open_log(path)
    return list(reader.iter_lines(lg, 0, 0, None))


# --- a stray .swap is validated before it may replace segments -------------------------------

def _swap(path: str, lines: list[bytes], end: int, base: int = 0) -> str:
    pdir = os.path.join(path, "p0")
    name = os.path.join(pdir, replace.run_name(base, end, replace.SWAP))
    with open(name, "wb") as f:
        f.writelines(lines)
    return name


def test_stray_prefix_swap_is_rejected_by_produce_and_reported_by_check(tmp_path):
    """The reported case: a .swap over offsets 0..N holding only the first segment's records."""
    path = str(tmp_path / "log")
    appended = make_log(path)
    segs = open_log(path).segments(0)
    first = open(segs[0].path, "rb").readlines()
    swap = _swap(path, first, segs[-2].base + 1)
    proc = run_cli("check", path)
    assert proc.returncode == 1 and os.path.basename(swap).encode() in proc.stdout
    assert b"invalid compaction swap, never applied" in proc.stdout
    proc = run_cli("produce", path, input='{"new":1}\n')
    assert proc.returncode == 0, proc.stderr
    assert swap.encode() in proc.stderr and b"not a valid compaction swap" in proc.stderr
    assert stored(path)[:-1] == appended, "no record lost, none changed"
    assert not os.path.exists(swap) and os.path.exists(swap + replace.REJECTED)
    proc = run_cli("check", path)
    assert proc.returncode == 1 and (os.path.basename(swap) + replace.REJECTED).encode() in proc.stdout
    # compaction meets it too: rejected, never trusted
    swap2 = _swap(path, first, segs[-2].base + 1)
    proc = run_cli("compact", path)
    assert swap2.encode() in proc.stderr and not os.path.exists(swap2)
    assert {record.key_bytes(ln): ln for ln in stored(path)[:-1]}.items() >= {
        record.key_bytes(ln): ln for ln in appended if record.key_bytes(ln) != b"null"}.items()


@pytest.mark.parametrize("kind", ["prefix", "torn", "garbage", "outside", "decreasing", "no-nulls", "valid-merge",
                                  "valid-compacted", "valid-superseded-later"])
def test_validate_swap_cases(tmp_path, kind):
    path = str(tmp_path / "log")
    make_log(path, 200, keys=7)
    pdir = os.path.join(path, "p0")
    segs = open_log(path).segments(0)
    run = [ln for s in segs[:3] for ln in open(s.path, "rb")]
    end = segs[2].base + 1
    latest = {record.key_bytes(ln): ln for ln in run}
    later = {record.key_bytes(ln) for s in segs[3:-1] for ln in open(s.path, "rb")}
    compacted = [ln for ln in run if record.key_bytes(ln) == b"null" or latest[record.key_bytes(ln)] is ln]
    lines = {
        "prefix": run[:5],
        "torn": run[:-1] + [run[-1][:-8]],
        "garbage": run[:3] + [b"hello}\n"] + run[3:],
        "outside": run + [record.encode(segs[3].base, 0, 1, b'"x"', b"1")],
        "decreasing": [run[1], run[0], *run[2:]],
        "no-nulls": [ln for ln in compacted if record.key_bytes(ln) != b"null"],
        "valid-merge": run,
        "valid-compacted": compacted,
        "valid-superseded-later": [ln for ln in compacted if record.key_bytes(ln) not in later
                                   or record.key_bytes(ln) == b"null"],
    }[kind]
    swap = _swap(path, lines, end)
    reason = replace.validate_swap(pdir, 0, end, swap)
    if kind.startswith("valid"):
        assert reason is None
        replace.recover(pdir)
        assert not os.path.exists(swap) and [s.base for s in open_log(path).segments(0)][:2] == [0, segs[3].base]
    else:
        assert reason is not None
        warned: list[str] = []
        old, replace.warn = replace.warn, warned.append
        try:
            replace.recover(pdir)
        finally:
            replace.warn = old
        assert warned and swap in warned[0]
        assert [s.base for s in open_log(path).segments(0)] == [s.base for s in segs], "the originals stay"
        assert any(swap in str(p) and not p.benign for p in check(open_log(path)).problems)


# --- a damaged last line of the active segment -------------------------------------------------

def test_garbage_last_line_names_segment_and_byte(tmp_path):
    path = str(tmp_path / "log")
    run_cli("produce", path, input='{"a":1}\n', check=True)
    seg = open_log(path).segments(0)[-1].path
    size = os.path.getsize(seg)
    with open(seg, "ab") as f:
        f.write(b"not a record\n")
    proc = run_cli("produce", path, input='{"a":2}\n')
    assert proc.returncode == 1
    assert f"{seg}:2: byte {size}: the last line of the segment is not a record".encode() in proc.stderr
    assert b"Traceback" not in proc.stderr
    assert os.path.getsize(seg) == size + 13, "nothing appended"


# --- a torn tail after a real kill -9 in the middle of a write ---------------------------------

def test_torn_tail_after_kill_mid_write(tmp_path):
    """A short write (the file size limit cuts it mid-line) and a SIGKILL before the rest is written:
    what a kill -9 or a power cut in the middle of an append leaves."""
    strace = shutil.which("strace")
    assert strace is not None, "strace is not installed (scripts/test installs it)"
    assert subprocess.run([strace, "-o", "/dev/null", "true"], capture_output=True).returncode == 0, "strace cannot trace here"
    path = str(tmp_path / "log")
    run_cli("produce", path, input="".join(f'{{"i":{i}}}\n' for i in range(20)), check=True)
    seg = open_log(path).segments(0)[-1].path
    limit = os.path.getsize(seg) + 150

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    payload = "".join(json.dumps({"j": i, "pad": "x" * 50}) + "\n" for i in range(50)).encode()
    proc = subprocess.run([strace, "-f", "-qq", "-o", "/dev/null", "-e", "trace=write",
                           "-e", "inject=write:signal=SIGKILL:when=2", sys.executable, "-m", "streamctl",
                           "produce", path], input=payload, capture_output=True, env=cli_env(), preexec_fn=cap)
    assert proc.returncode == -9
    assert os.path.getsize(seg) == limit and not open(seg, "rb").read().endswith(b"\n"), "a torn tail"
    seen = stored(path)
    proc = run_cli("check", path)
    assert proc.returncode == 1
    assert b"torn tail from an interrupted write: safe, truncated by the next append or --repair" in proc.stdout
    assert len(run_cli("consume", path).stdout.splitlines()) == len(seen), "readers never see it"
    before = open(seg, "rb").read()
    run_cli("produce", path, input='{"after":1}\n', check=True)  # the next append truncates it
    assert run_cli("check", path).returncode == 0
    assert open(seg, "rb").read().startswith(before[:before.rfind(b"\n") + 1])


# --- every reader refuses a corrupt stored line ------------------------------------------------

READERS = [
    ["consume"], ["consume", "--group", "g"], ["consume", "--value"], ["consume", "--format", "%o %s\\n"],
    ["consume", "--max", "5"], ["consume", "--follow", "--idle-timeout", "0.2s"], ["tail", "-n", "40"],
    ["replay"], ["replay", "--compact"], ["window", "--tumbling", "1m", "--agg", "count"],
]


@pytest.fixture(scope="module")
def corrupt_log(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("corrupt") / "log")
    make_log(path, 60, keys=5, segment_bytes=1 << 20)
    seg = open_log(path).segments(0)[0].path
    lines = open(seg, "rb").readlines()
    at = sum(map(len, lines[:30]))
    lines[30] = lines[30][:50] + b"\x00" * 12 + lines[30][62:]  # zeroed bytes inside a line that stays framed
    with open(seg, "wb") as f:
        f.writelines(lines)
    return path, seg, at


@pytest.mark.parametrize("args", READERS + [["join"]], ids=lambda a: " ".join(a))
def test_every_reader_refuses_a_corrupt_line(corrupt_log, args):
    path, seg, at = corrupt_log
    argv = [args[0], path, path, "--within", "1m", "--on", "k"] if args[0] == "join" else [args[0], path, *args[1:]]
    proc = run_cli(*argv)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    line = open(seg, "rb").read()[:at].count(b"\n") + 1
    assert f"{seg}:{line}: byte {at}: corrupt record".encode() in proc.stderr
    assert b"Traceback" not in proc.stderr
    assert b"\x00" not in proc.stdout, "the corrupt line is never passed on"


def test_the_check_is_framing_and_a_record_in_another_layout_passes(tmp_path):
    good = [record.encode(i, 0, 5, b'"k"', b'{"a":%d}' % i) for i in range(4)]
    other = b'{"partition":0,"offset":4,"ts":5,"key":null,"value":1}\n'  # hand-written, valid
    block = b"".join([*good, other])
    assert segment.first_bad_line(block, 0, len(block)) is None
    for bad in (b"garbage\n", b"x}\n", b'{"offset":9,"partition":0\n', b"\n", good[0][:20] + b"\x00" + good[0][21:]):
        block = b"".join([*good[:2], bad, *good[2:]])
        found = segment.first_bad_line(block, 0, len(block))
        assert found is not None and found[0] == len(good[0]) + len(good[1])


# --- a segment missing from the middle of a partition -----------------------------------------

def test_missing_segment_is_reported_and_compaction_gaps_are_not(tmp_path):
    path = str(tmp_path / "log")
    make_log(path, 300, keys=20)
    segs = open_log(path).segments(0)
    assert json.load(open(os.path.join(path, "p0", segment.MANIFEST)))["segments"] == [s.base for s in segs]
    keep = str(tmp_path / "keep")
    shutil.copytree(path, keep)
    assert run_cli("compact", path, "--roll").returncode == 0  # merges segments: gaps, no problem
    assert run_cli("check", path).returncode == 0
    assert run_cli("compact", path, "--retention-bytes", "1", "--force").returncode == 0  # retention: a prefix
    assert run_cli("check", path).returncode == 0
    os.unlink(segs[3].path.replace(path, keep))
    proc = run_cli("check", keep)
    assert proc.returncode == 1
    assert f"{segment.segment_name(segs[3].base)}: segment is missing".encode() in proc.stdout
    os.unlink(segs[0].path.replace(path, keep))  # a missing first segment reads as retention
    assert check(open_log(keep)).problems[0].path.endswith(segment.segment_name(segs[3].base))
