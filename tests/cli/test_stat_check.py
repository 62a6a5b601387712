"""stat and check through the CLI."""

from __future__ import annotations

import json
import os
import time

import pytest

from conftest import log_records, run_cli
from streamctl.groups import offsets, stats
from streamctl.storage import reader
from streamctl.storage.log import open_log
from streamctl.timeparse import now_ms

from test_replay import make_log

T0 = 1_763_719_200_000


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


# ---- lag age ------------------------------------------------------------------------------------------

def _json(*args: str):
    return json.loads(run_cli("stat", *args, "--json", check=True).stdout)


def _ts_at(logdir: str, p: int, offset: int) -> int:
    return next(r["ts"] for r in log_records(logdir) if r["partition"] == p and r["offset"] >= offset)


def test_lag_age_of_a_consumer_that_read_some_then_stopped(logdir):
    for i in range(8):  # eight appends, so the records' ts differ
        run_cli("produce", logdir, input=json.dumps({"n": i}) + "\n", check=True)
    run_cli("consume", logdir, "--group", "g", "--max", "3", check=True)
    waiting = _ts_at(logdir, 0, 3)  # the record at the committed offset: the oldest unread one
    ages = []
    for _ in range(2):
        before = now_ms()
        g = _json(logdir)["groups"][0]
        after = now_ms()
        assert (g["committed"], g["lag"]) == (3, 5)
        assert before - waiting <= g["lag_age_ms"] <= after - waiting
        ages.append(g["lag_age_ms"])
        time.sleep(0.3)
    assert ages[1] >= ages[0] + 300  # it keeps growing while nobody reads
    # once the group catches up, nothing waits
    run_cli("consume", logdir, "--group", "g", check=True)
    g = _json(logdir)["groups"][0]
    assert (g["lag"], g["lag_age_ms"]) == (0, 0)
    assert run_cli("stat", logdir, "--fail-lag-age", "0ms").returncode == 0


def test_lag_age_reads_the_first_record_after_a_gap(tmp_path):
    """Compaction and retention leave gaps: the oldest unread record is the first one at or after the
    committed offset, in the same segment or a later one."""
    path = str(tmp_path / "log")
    lines = make_log(path, partitions=2, per_partition=30, seed=5, segment_records=4, gap_every=3)
    lg = open_log(path)
    recs = [json.loads(ln) for ln in lines]
    for p in range(2):
        mine = [r for r in recs if r["partition"] == p]
        for off in range(mine[-1]["offset"] + 3):
            want = next((r["ts"] for r in mine if r["offset"] >= off), None)
            assert stats.ts_at_or_after(lg, p, off) == want, (p, off)
    # through stat: a group committed inside a gap waits since the record after the gap
    gap = next(r["offset"] - 1 for a, r in zip(recs, recs[1:], strict=False) if r["partition"] == a["partition"] == 0
               and r["offset"] > a["offset"] + 1)
    offsets.commit(lg, "g", {0: gap})
    now = T0 + 10_000_000
    g = next(x for x in stats.stat(lg, now).groups if x.partition == 0)
    assert g.committed == gap and g.lag_age_ms == now - _ts_at(path, 0, gap)


def test_uncommitted_partition_counts_from_the_earliest_record(tmp_path):
    path = str(tmp_path / "log")
    make_log(path, partitions=2, per_partition=12, seed=2)
    lg = open_log(path)
    offsets.commit(lg, "g", {1: 4})  # partition 0 never committed
    now = T0 + 60_000
    st = stats.stat(lg, now)
    g0 = next(g for g in st.groups if g.partition == 0)
    p0 = st.partitions[0]
    assert g0.committed is None and g0.lag == p0.next_offset - p0.first_offset
    assert g0.lag_age_ms == now - p0.first_ts


def test_fail_lag_age_exits_3_naming_log_group_and_partition(tmp_path):
    old = str(tmp_path / "old")
    make_log(old, partitions=2, per_partition=10, seed=4)  # records from 2025: they have waited long
    lg = open_log(old)
    offsets.commit(lg, "late", {0: reader.partition_info(lg, 0).next_offset, 1: 3})
    p = run_cli("stat", old, "--fail-lag-age", "1h", "--output", "json")
    assert p.returncode == 3, p.stderr
    assert json.loads(p.stdout)["groups"]  # the output is written before the threshold is judged
    err = p.stderr.decode()
    assert f"{old}: group late's oldest unread record on partition 1 has waited" in err
    assert "partition 0" not in err and "Traceback" not in err
    # a threshold above the wait passes
    assert run_cli("stat", old, "--fail-lag-age", "100000d").returncode == 0
    fresh = str(tmp_path / "fresh")
    run_cli("produce", fresh, input="1\n2\n", check=True)
    run_cli("consume", fresh, "--group", "g", "--max", "1", check=True)
    assert run_cli("stat", fresh, old, "--fail-lag-age", "1h").returncode == 3
    assert run_cli("stat", fresh, "--fail-lag-age", "1h").returncode == 0
    # both thresholds, several crossings: each one is named
    p = run_cli("stat", fresh, old, "--fail-lag-age", "1h", "--fail-lag", "0")
    err = p.stderr.decode()
    assert p.returncode == 3 and f"{fresh}: group g lags by 1 records on partition 0" in err
    assert f"{old}: group late lags by" in err and f"{old}: group late's oldest unread" in err


def test_table_shows_lag_age_in_human_units(tmp_path):
    path = str(tmp_path / "log")
    make_log(path, partitions=1, per_partition=5, seed=1)
    offsets.commit(open_log(path), "g", {0: 2})
    out = run_cli("stat", path, check=True).stdout.decode()
    header = next(ln for ln in out.splitlines() if ln.startswith("group"))
    row = out.splitlines()[out.splitlines().index(header) + 2].split()
    assert header.split() == ["group", "partition", "committed", "lag", "lag_age"]
    assert row[:3] == ["g", "0", "2"] and row[4].endswith(("d", "h")) and row[4][0].isdigit()


@pytest.mark.parametrize(("ms", "text"), [(0, "0s"), (-5, "0s"), (850, "850ms"), (42_000, "42s"),
                                          (192_500, "3m12s"), (3_600_000, "1h"), (7_500_000, "2h5m"),
                                          (273_600_000, "3d4h"), (86_400_000 + 59_000, "1d")])
def test_format_age(ms, text):
    assert stats.format_age(ms) == text


def test_several_logs_json_is_a_list_with_log(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    run_cli("produce", a, input="1\n2\n3\n", check=True)
    run_cli("produce", b, "--partitions", "2", input="1\n", check=True)
    run_cli("consume", b, "--group", "g", check=True)
    both = _json(a, b)
    assert [x["log"] for x in both] == [a, b]
    assert [len(x["partitions"]) for x in both] == [1, 2] and both[0]["groups"] == []
    assert {(g["group"], g["lag"], g["lag_age_ms"]) for g in both[1]["groups"]} == {("g", 0, 0)}
    assert _json(a)["log"] == a  # one LOG: one object, as before
    table = run_cli("stat", a, b, check=True).stdout.decode()
    assert f"==> {a} <==" in table and f"==> {b} <==" in table


def test_stat_usage_errors(logdir):
    run_cli("produce", logdir, input="1\n", check=True)
    for args, what in ((["--output", "yaml"], b"--output must be one of"),
                       (["--json", "--output", "prometheus"], b"--json means --output json"),
                       (["--fail-lag-age", "soon"], b"invalid duration"),
                       (["--fail-lag", "-1"], b"--fail-lag must not be negative")):
        p = run_cli("stat", logdir, *args)
        assert p.returncode == 2 and what in p.stderr and b"Traceback" not in p.stderr, args
    assert run_cli("stat", logdir, "--json", "--output", "json").returncode == 0
    p = run_cli("stat", logdir, logdir + "-missing")
    assert p.returncode == 1 and b"no such log" in p.stderr and p.stdout == b""


def test_log_commands_name_a_plain_file_as_one(tmp_path):
    """A plain file given where only a log will do is named as a plain file, not as missing (with
    the exit code a missing log gets, 1); produce refuses to make a log there."""
    plain = tmp_path / "v.jsonl"
    plain.write_text("1\n")
    said = f"streamctl: {plain}: a plain file, not a log (a log is the folder `streamctl produce` creates)\n"
    for args in (["compact"], ["stat"], ["check"], ["replay", "--group", "g", "--to-earliest"]):
        p = run_cli(args[0], str(plain), *args[1:])
        assert (p.returncode, p.stdout, p.stderr.decode()) == (1, b"", said), args
    p = run_cli("compact", str(tmp_path / "none"))
    assert (p.returncode, p.stderr) == (1, f"streamctl: {tmp_path / 'none'}: no such log\n".encode())
    p = run_cli("produce", str(plain), input="2\n")
    assert (p.returncode, p.stderr.decode()) == (1, said[:-1] + "; refusing to create a log there\n")
    assert plain.read_text() == "1\n"
