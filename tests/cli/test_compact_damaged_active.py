"""compact on a log whose active segment ends in a whole line that is not a record: every form of
compact refuses it naming the segment file and the byte of the line (exit 1), and changes nothing."""

from __future__ import annotations

import json
import os

import pytest

from conftest import run_cli

BAD_LINES = [
    b"garbage\n",  # not JSON
    b'{"a": 1}\n',  # JSON, not a record
    b'{"offset":300,"partition":0,"ts":1,"key":"k","value":\n',  # the framing of a record, cut short
    b'{"offset":300,"partition":0,"ts":1,"key":"k","value":1\x00\x00}\n',  # zeroed bytes inside
]


def tree(root: str) -> dict[str, bytes]:
    out = {}
    for d, _dirs, files in os.walk(root):
        for f in files:
            path = os.path.join(d, f)
            out[os.path.relpath(path, root)] = open(path, "rb").read()
    return out


def make_log(log: str) -> str:
    """Two partitions, several segments each, keys repeated (so there is something to compact);
    a group that has read it all (so retention could delete). Returns partition 1's active segment."""
    lines = [json.dumps({"key": f"k{i % 7}", "value": None if i % 50 == 49 else {"i": i}}) for i in range(600)]
    run_cli("produce", log, "--partitions", "2", "--envelope", "--segment-bytes", "4096",
            input="\n".join(lines) + "\n", check=True)
    run_cli("consume", log, "--group", "all", check=True)
    pdir = os.path.join(log, "p1")
    segs = sorted(f for f in os.listdir(pdir) if f.endswith(".jsonl"))
    assert len(segs) > 3
    return os.path.join(pdir, segs[-1])


@pytest.mark.parametrize("bad", BAD_LINES, ids=["garbage", "json-not-record", "cut-short", "nul-bytes"])
def test_compact_names_the_segment_and_byte_and_changes_nothing(tmp_path, bad):
    log = str(tmp_path / "orders")
    active = make_log(log)
    at = os.path.getsize(active)
    with open(active, "ab") as f:
        f.write(bad)
    before = tree(log)
    for args in ([], ["--roll"], ["--dry-run"], ["--dry-run", "--roll"], ["--tombstone-retention", "0"],
                 ["--retention-bytes", "1", "--force"], ["--retention-time", "1ms"]):
        p = run_cli("compact", log, *args)
        err = p.stderr.decode()
        assert p.returncode == 1, (args, err)
        assert "Traceback" not in err
        assert err.startswith("streamctl: ") and err.count("\n") == 1, err
        line = open(active, "rb").read()[:at].count(b"\n") + 1
        assert f"{active}:{line}: byte {at}: " in err, (args, err)
        assert "not a record" in err
        assert p.stdout == b""
        assert tree(log) == before, args


def test_a_bad_line_in_a_closed_segment_is_still_named_by_the_scan(tmp_path):
    """The check of the active segment does not hide the scan's own: damage in a closed segment
    is named by its segment and byte too (and compaction of a healthy log still works)."""
    log = str(tmp_path / "orders")
    make_log(log)
    pdir = os.path.join(log, "p0")
    closed = os.path.join(pdir, sorted(f for f in os.listdir(pdir) if f.endswith(".jsonl"))[1])
    data = open(closed, "rb").read()
    cut = data.index(b"\n") + 1
    open(closed, "wb").write(data[:cut] + b"garbage\n" + data[cut:])
    p = run_cli("compact", log)
    assert p.returncode == 1 and f"{closed}:2: byte {cut}: " in p.stderr.decode(), p.stderr.decode()
    open(closed, "wb").write(data)
    p = run_cli("compact", log, "--roll")
    assert p.returncode == 0, p.stderr.decode()
