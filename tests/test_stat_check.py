"""stat and check through the CLI."""

from __future__ import annotations

import json
import os

from conftest import run_cli


def test_stat_json_shape_and_lag(logdir):
    lines = "".join(json.dumps({"k": f"k{i}"}) + "\n" for i in range(30))
    run_cli("produce", logdir, "--partitions", "3", "--key-field", "k", input=lines, check=True)
    run_cli("consume", logdir, "--group", "g", "--max", "10", check=True)
    st = json.loads(run_cli("stat", logdir, "--json", check=True).stdout)
    assert [p["partition"] for p in st["partitions"]] == [0, 1, 2]
    for p in st["partitions"]:
        assert set(p) >= {"partition", "first_offset", "next_offset", "records", "segments", "bytes"}
        assert p["records"] == p["next_offset"] - p["first_offset"] and p["segments"] == 1 and p["bytes"] > 0
    assert sum(p["records"] for p in st["partitions"]) == 30
    groups = st["groups"]
    assert {g["group"] for g in groups} == {"g"} and len(groups) == 3
    assert sum(g["lag"] for g in groups) == 20
    for g in groups:
        assert set(g) >= {"group", "partition", "committed", "lag"}
    assert run_cli("stat", logdir, "--fail-lag", "100").returncode == 0
    p = run_cli("stat", logdir, "--fail-lag", "1")
    assert p.returncode == 3 and b"group g lags by" in p.stderr
    table = run_cli("stat", logdir, check=True).stdout.decode()
    assert "next_offset" in table and "lag" in table


def test_stat_missing_log(tmp_path):
    p = run_cli("stat", str(tmp_path / "none"))
    assert p.returncode == 1 and b"no such log" in p.stderr


def test_check_clean_torn_and_corrupt(logdir):
    run_cli("produce", logdir, input="1\n2\n3\n", check=True)
    assert run_cli("check", logdir).returncode == 0
    seg = os.path.join(logdir, "p0", "00000000000000000000.jsonl")
    with open(seg, "ab") as f:
        f.write(b'{"offset":3,"partition":0,"ts":')
    p = run_cli("check", logdir)
    assert p.returncode == 1 and b"torn tail" in p.stdout
    # readers never see the partial line
    assert run_cli("consume", logdir, "--value", check=True).stdout == b"1\n2\n3\n"
    # the next writer truncates it under the lock and continues contiguously
    run_cli("produce", logdir, input="4\n", check=True)
    assert run_cli("check", logdir).returncode == 0
    assert run_cli("consume", logdir, "--value", check=True).stdout == b"1\n2\n3\n4\n"
    with open(seg, "ab") as f:
        f.write(b"\x00\x00\x00")
    rep = json.loads(run_cli("check", logdir, "--repair", "--json").stdout)
    assert rep["ok"] and rep["problems"][0]["repaired"]
    assert run_cli("check", logdir).returncode == 0


def test_mid_file_corruption_named_with_segment_and_byte(logdir):
    run_cli("produce", logdir, input="1\n2\n3\n", check=True)
    seg = os.path.join(logdir, "p0", "00000000000000000000.jsonl")
    data = open(seg, "rb").read().split(b"\n")
    pos = len(data[0]) + 1
    data[1] = b"garbage"
    open(seg, "wb").write(b"\n".join(data))
    p = run_cli("check", logdir, "--repair")
    assert p.returncode == 1
    assert f"00000000000000000000.jsonl: byte {pos}: corrupt record".encode() in p.stdout
    c = run_cli("consume", logdir, "--value")
    assert c.returncode == 1 and b"corrupt record" in c.stderr and b".jsonl" in c.stderr
    assert b"Traceback" not in c.stderr


def test_check_reports_group_offsets_past_the_end(logdir):
    run_cli("produce", logdir, input="1\n", check=True)
    os.makedirs(os.path.join(logdir, "groups"), exist_ok=True)
    open(os.path.join(logdir, "groups", "g.json"), "w").write('{"format":1,"group":"g","offsets":{"0":5}}')
    p = run_cli("check", logdir)
    assert p.returncode == 1 and b"past the end" in p.stdout
