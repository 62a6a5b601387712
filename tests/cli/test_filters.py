"""Filters (--key, --header, --where) in the core and through consume, tail and replay; consume --until."""

from __future__ import annotations

import json
import time

import pytest

from conftest import run_cli
from streamctl.clients.filters import Filter, json_equal, parse_where
from streamctl.errors import UsageError
from streamctl.storage import record


def line(off: int, value: object, key: str | None = "k", headers: dict | None = None, ts: int = 1000) -> bytes:
    return record.encode(off, 0, ts + off, record.key_json(key), json.dumps(value).encode(),
                         json.dumps(headers).encode() if headers else None)


VALUES = [
    {"n": 1}, {"n": 1.0}, {"n": 2}, {"n": True}, {"n": "1"}, {"n": None}, {}, {"n": [1, 2]},
    {"n": {"a": 1}}, {"n": "abc"}, {"n": "b"}, {"n": False}, 5, None, "text", {"n": -3.5},
]
BLOCK = b"".join(line(i, v) for i, v in enumerate(VALUES))


def picked(*wheres: str, keys=(), headers=(), block: bytes = BLOCK) -> list[int]:
    f = Filter.from_options(list(keys), list(headers), list(wheres))
    assert f is not None
    out = [record.offset_of(ln) for ln in f.select(block).splitlines(keepends=True)]
    # the line-at-a-time answer is the same as the block's
    assert out == [record.offset_of(ln) for ln in block.splitlines(keepends=True) if f.select(ln)]
    return out


def test_equality_is_typed_and_missing_is_null():
    assert picked("value.n == 1") == [0, 1]  # 1 and 1.0 are both numbers; true and "1" are not
    assert picked('n == "1"') == [4]
    assert picked("n == true") == [3]
    assert picked("n == false") == [11]
    assert picked("n == null") == [5, 6, 12, 13, 14]  # null, missing, and no object to look into
    assert picked("n == [1,2]") == [7]
    assert picked('n == {"a":1}') == [8]
    assert picked("n == abc") == [9]  # a bare word is a string
    assert picked("value == 5") == [12]
    assert picked("value == null") == [13]
    assert picked("value == text") == [14]


def test_not_equal_is_the_negation_of_equal():
    every = list(range(len(VALUES)))
    for expr in ("n == 1", "n == null", "n == abc", "n == true", "n == [1,2]"):
        left, right = expr.split(" == ")
        eq = picked(expr)
        assert picked(f"{left} != {right}") == [i for i in every if i not in eq]


def test_order_comparisons_only_within_a_type():
    assert picked("n > 1") == [2]  # not true, not "1", not the array
    assert picked("n >= 1") == [0, 1, 2]
    assert picked("n < 1") == [15]
    assert picked("n <= 1") == [0, 1, 15]
    assert picked("n < 0") == [15]
    assert picked('n > "abc"') == [10]  # strings by code point: "b" > "abc"
    assert picked('n >= "abc"') == [9, 10]
    assert picked("n < a") == [4]  # "1" < "a"
    assert picked("n > false") == [3]  # booleans: false < true
    assert picked("n < null") == [] and picked("n >= null") == []  # null has no order
    assert picked("n > [1]") == [] and picked('n < {"a":2}') == []


def test_regex_search_in_strings_only():
    assert picked("n ~ b") == [9, 10]
    assert picked("n ~ ^a") == [9]
    assert picked('n ~ "c$"') == [9]  # a JSON string is unquoted first
    assert picked("n ~ 1") == [4]  # numbers are not searched
    assert picked("value ~ ^te") == [14]
    assert picked("n ~ [ab]") == [9, 10]  # JSON-looking text is still the pattern
    assert picked(r"n ~ ^\w{3}$") == [9]


def test_envelope_paths():
    assert picked("offset >= 14") == [14, 15]
    assert picked("ts < 1002") == [0, 1]
    assert picked("partition == 0") == list(range(len(VALUES)))
    assert picked("key == k") == list(range(len(VALUES)))
    assert picked("key != k") == []


def test_nested_paths_and_list_indexes():
    block = b"".join([line(0, {"u": {"id": 7, "tags": ["x", "y"]}}), line(1, {"u": {"id": "7"}}),
                      line(2, {"u": 7}), line(3, {"u": {"id": 8, "tags": []}}), line(4, None)])
    assert picked("value.u.id == 7", block=block) == [0]
    assert picked("u.id >= 7", block=block) == [0, 3]
    assert picked("u.tags.1 == y", block=block) == [0]
    assert picked("u.id == null", block=block) == [2, 4]
    assert picked("u == 7", block=block) == [2]


def test_keys_any_headers_all_and_everything_combined_with_and():
    block = b"".join([
        line(0, {"a": 1}, "alice", {"trace": "t1", "env": "prod"}),
        line(1, {"a": 2}, "bob", {"trace": "t2"}),
        line(2, {"a": 3}, "alice", {"trace": "t2", "env": "prod"}),
        line(3, {"a": 4}, None),
        line(4, {"a": 5}, "caf\u00e9"),
        b'{"offset":5,"partition":0,"ts":1,"key":"caf\\u00e9","value":{"a":6}}\n',  # another spelling
    ])
    assert picked(keys=["alice"], block=block) == [0, 2]
    assert picked(keys=["alice", "bob"], block=block) == [0, 1, 2]
    assert picked(keys=["café"], block=block) == [4, 5]
    assert picked(keys=["nobody"], block=block) == []
    assert picked(headers=["trace=t2"], block=block) == [1, 2]
    assert picked(headers=["trace=t2", "env=prod"], block=block) == [2]
    assert picked(headers=["env=dev"], block=block) == []
    assert picked("a > 1", keys=["alice"], headers=["env=prod"], block=block) == [2]
    assert picked("headers.trace == t1", block=block) == [0]
    assert picked("a >= 5", keys=["café"], block=block) == [4, 5]


def test_byte_tests_never_skip_an_escaped_spelling():
    block = b"".join([
        b'{"offset":0,"partition":0,"ts":1,"key":"k","value":{"c":"J\\u0050"}}\n',
        b'{"offset":1,"partition":0,"ts":1,"key":"k","value":{"c":"JP"}}\n',
        b'{"offset":2,"partition":0,"ts":1,"key":"k","value":{"c":"US","note":"JP"}}\n',
        b'{"offset":3,"partition":0,"ts":1,"key":"k","value":{"ok":tru\\u0065}}\n'[:0],  # (not JSON; unused)
    ])
    assert picked("c == JP", block=block) == [0, 1]
    assert picked("c ~ JP", block=block) == [0, 1]
    assert picked("note == JP", block=block) == [2]


def test_hand_written_lines_in_another_layout():
    block = b'{"offset": 7, "partition": 0, "ts": 9, "key": "a", "value": {"n": 3}}\n' + line(8, {"n": 4}, "a")
    assert picked("n >= 3", block=block) == [7, 8]
    assert picked("n == 4", block=block) == [8]
    assert picked(keys=["a"], block=block) == [7, 8]


def test_json_equal():
    assert json_equal(1, 1.0) and not json_equal(1, True) and not json_equal(0, False)
    assert json_equal([1, {"a": [True]}], [1.0, {"a": [True]}]) and not json_equal([1], [True])
    assert not json_equal({"a": 1}, {"a": 1, "b": 2}) and not json_equal(None, 0)


@pytest.mark.parametrize("bad", ["value.n", "value.n >", "== 3", "value..n == 3", "n ~ (", "n = 3", ""])
def test_bad_expressions_are_usage_errors_naming_them(bad):
    with pytest.raises(UsageError) as e:
        parse_where(bad)
    assert repr(bad) in str(e.value)


def test_bad_header_option():
    with pytest.raises(UsageError, match="NAME=VALUE"):
        Filter.from_options(None, ["novalue"], None)
    assert Filter.from_options(None, ["a=b=c"], None).headers == [("a", "b=c")]


# --- through the CLI ---------------------------------------------------------------


def make_log(log: str, n: int = 40, partitions: int = 1) -> list[dict]:
    lines = "".join(json.dumps({"u": f"u{i % 4}", "i": i, "c": "JP" if i % 3 == 0 else "US"}) + "\n"
                    for i in range(n))
    run_cli("produce", log, "--partitions", str(partitions), "--key-field", "u", input=lines, check=True)
    return [json.loads(x) for x in run_cli("consume", log, check=True).stdout.splitlines()]


def values(p) -> list[int]:
    return [json.loads(x)["value"]["i"] for x in p.stdout.splitlines()]


def test_cli_consume_filters_one_and_several_partitions(logdir, tmp_path):
    for parts in (1, 3):
        log = str(tmp_path / f"log{parts}")
        recs = make_log(log, 40, parts)
        want = [r["value"]["i"] for r in recs if r["value"]["i"] > 30 and r["value"]["c"] == "JP"]
        p = run_cli("consume", log, "--where", "value.i > 30", "--where", "c == JP", check=True)
        assert values(p) == want
        p = run_cli("consume", log, "--key", "u1", "--key", "u2", check=True)
        assert values(p) == [r["value"]["i"] for r in recs if r["key"] in ("u1", "u2")]
        p = run_cli("consume", log, "--where", "i >= 10", "--max", "3", "--value", check=True)
        assert [json.loads(x)["i"] for x in p.stdout.splitlines()] == [r["value"]["i"] for r in recs
                                                                        if r["value"]["i"] >= 10][:3]


def test_cli_bad_filter_exits_2_naming_it(logdir):
    make_log(logdir, 3)
    for args, named in ((["--where", "value.i >"], "value.i >"), (["--where", "i ~ [a"], "i ~ [a"),
                        (["--header", "x"], "'x'"), (["--where", "i === 1"], "neither JSON nor a bare word"),
                        (["--where", "c == JP and i > 1"], "'JP and i > 1'"), (["--where", 'c == "JP'], "'\"JP'")):
        for cmd in ("consume", "tail", "replay"):
            p = run_cli(cmd, logdir, *args)
            assert p.returncode == 2, (cmd, args)
            assert p.stderr.startswith(b"streamctl: ") and named.encode() in p.stderr
            assert b"Traceback" not in p.stderr


def test_cli_group_commits_past_skipped_records(logdir):
    recs = make_log(logdir, 40)
    p = run_cli("consume", logdir, "-g", "g", "--where", "i < 5", check=True)
    assert values(p) == [0, 1, 2, 3, 4]
    stat = json.loads(run_cli("stat", logdir, "--json", check=True).stdout)
    assert [g["committed"] for g in stat["groups"] if g["group"] == "g"] == [40]  # past every skipped record
    run_cli("produce", logdir, "--key", "u9", input='{"i": 100}\n{"i": 2}\n', check=True)
    assert values(run_cli("consume", logdir, "-g", "g", "--where", "i < 5", check=True)) == [2]
    # --max counts records written; the offsets stop after the last one written
    p = run_cli("consume", logdir, "-g", "h", "--where", "c == JP", "--max", "2", check=True)
    assert values(p) == [0, 3]
    stat = json.loads(run_cli("stat", logdir, "--json", check=True).stdout)
    assert [g["committed"] for g in stat["groups"] if g["group"] == "h"] == [4]
    assert values(run_cli("consume", logdir, "-g", "h", "--max", "1", check=True)) == [4]
    assert len(recs) == 40


def test_cli_group_filter_nothing_matches_still_commits(logdir):
    make_log(logdir, 10, 2)
    p = run_cli("consume", logdir, "-g", "g", "--key", "nobody", check=True)
    assert p.stdout == b""
    stat = json.loads(run_cli("stat", logdir, "--json", check=True).stdout)
    lags = {g["partition"]: g["lag"] for g in stat["groups"] if g["group"] == "g"}
    assert set(lags.values()) == {0}


def test_cli_follow_with_filter_and_group(logdir):
    import subprocess
    import sys

    from conftest import CLI, cli_env

    make_log(logdir, 6)
    proc = subprocess.Popen([*CLI, "consume", logdir, "-g", "f", "--follow", "--where", "i >= 100",
                             "--idle-timeout", "1500ms", "--value"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=cli_env())
    time.sleep(0.8)
    run_cli("produce", logdir, "--key", "u0", input='{"i": 7}\n{"i": 100}\n{"i": 8}\n', check=True)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert [json.loads(x)["i"] for x in out.splitlines()] == [100]
    stat = json.loads(run_cli("stat", logdir, "--json", check=True).stdout)
    assert [g["committed"] for g in stat["groups"] if g["group"] == "f"] == [9]
    assert sys.executable


def test_cli_until_offset_and_time(logdir):
    make_log(logdir, 10, 1)
    time.sleep(0.05)
    run_cli("produce", logdir, "--key", "late", input='{"i": 10}\n{"i": 11}\n', check=True)
    recs = [json.loads(x) for x in run_cli("consume", logdir, check=True).stdout.splitlines()]
    t10 = recs[10]["ts"]
    assert values(run_cli("consume", logdir, "--until", "4", check=True)) == [0, 1, 2, 3]
    assert values(run_cli("consume", logdir, "--from", "2", "--until", "4", check=True)) == [2, 3]
    assert values(run_cli("consume", logdir, "--from", "5", "--until", "4", check=True)) == []
    assert values(run_cli("consume", logdir, "--until", f"@{t10}", check=True)) == list(range(10))
    assert values(run_cli("consume", logdir, "--until", f"@{t10 + 1}", check=True)) == list(range(12))
    assert values(run_cli("consume", logdir, "--until", "2999-01-01T00:00:00Z", check=True)) == list(range(12))
    assert values(run_cli("consume", logdir, "--until", "2000-01-01T00:00:00Z", check=True)) == []
    assert values(run_cli("consume", logdir, "--until", "6", "--where", "c == JP", check=True)) == [0, 3]
    # with a group the committed offsets stop at the bound
    assert values(run_cli("consume", logdir, "-g", "g", "--until", f"@{t10}", check=True)) == list(range(10))
    stat = json.loads(run_cli("stat", logdir, "--json", check=True).stdout)
    assert [g["committed"] for g in stat["groups"] if g["group"] == "g"] == [10]
    assert values(run_cli("consume", logdir, "-g", "g2", "--until", "7", "--where", "i == 0", check=True)) == [0]
    stat = json.loads(run_cli("stat", logdir, "--json", check=True).stdout)
    assert [g["committed"] for g in stat["groups"] if g["group"] == "g2"] == [7]
    assert values(run_cli("consume", logdir, "-g", "g2", check=True)) == [7, 8, 9, 10, 11]
    for bad in ("-5", "yesterday"):
        p = run_cli("consume", logdir, "--until", bad)
        assert p.returncode == 2 and b"--until" in p.stderr


def test_cli_until_per_partition(tmp_path):
    log = str(tmp_path / "log")
    recs = make_log(log, 30, 3)
    got = [json.loads(x) for x in run_cli("consume", log, "--until", "3", check=True).stdout.splitlines()]
    want = [r for r in recs if r["offset"] < 3]
    assert got == want and {r["partition"] for r in got} == {0, 1, 2}


def test_cli_until_with_follow_stops_at_the_bound(logdir):
    import subprocess

    from conftest import CLI, cli_env

    make_log(logdir, 3)
    proc = subprocess.Popen([*CLI, "consume", logdir, "-g", "g", "--follow", "--until", "5", "--value"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
    time.sleep(0.8)
    run_cli("produce", logdir, "--key", "u0", input="".join(json.dumps({"i": i}) + "\n" for i in range(3, 9)),
            check=True)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert [json.loads(x)["i"] for x in out.splitlines()] == [0, 1, 2, 3, 4]
    stat = json.loads(run_cli("stat", logdir, "--json", check=True).stdout)
    assert [g["committed"] for g in stat["groups"] if g["group"] == "g"] == [5]
    # a time bound already in the past: follow ends once the clock is past it and nothing is left
    t0 = time.time()
    p = run_cli("consume", logdir, "--follow", "--until", "-1s", "--value", check=True, timeout=30)
    assert p.stdout.count(b"\n") <= 9 and time.time() - t0 < 20


def test_cli_tail_counts_matching_records(tmp_path):
    for parts in (1, 3):
        log = str(tmp_path / f"log{parts}")
        recs = make_log(log, 40, parts)
        jp = [r for r in recs if r["value"]["c"] == "JP"]
        p = run_cli("tail", log, "-n", "3", "--where", "c == JP", check=True)
        assert [json.loads(x) for x in p.stdout.splitlines()] == jp[-3:]
        p = run_cli("tail", log, "-n", "50", "--key", "u1", "--value", check=True)
        assert [json.loads(x) for x in p.stdout.splitlines()] == [r["value"] for r in recs if r["key"] == "u1"]
        assert run_cli("tail", log, "-n", "0", "--key", "u1", check=True).stdout == b""


def test_cli_tail_follow_prints_only_matches(logdir):
    import subprocess

    from conftest import CLI, cli_env

    make_log(logdir, 5)
    proc = subprocess.Popen([*CLI, "tail", "-f", "-n", "1", logdir, "--where", "i >= 100", "--value"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
    time.sleep(0.8)
    run_cli("produce", logdir, "--key", "u0", input='{"i": 1}\n{"i": 100}\n{"i": 2}\n{"i": 101}\n', check=True)
    deadline = time.time() + 15
    got = b""
    import os
    import select

    while got.count(b"\n") < 2 and time.time() < deadline:
        r, _, _ = select.select([proc.stdout], [], [], 0.5)
        if r:
            got += os.read(proc.stdout.fileno(), 65536)
    proc.terminate()
    proc.communicate(timeout=10)
    assert [json.loads(x)["i"] for x in got.splitlines()] == [100, 101]


def test_cli_plain_file_filters(tmp_path):
    f = tmp_path / "events.jsonl"
    f.write_text("".join(json.dumps({"i": i}) + "\n" for i in range(10)))
    p = run_cli("consume", str(f), "--where", "i >= 7", "--value", check=True)
    assert p.stdout == b'{"i": 7}\n{"i": 8}\n{"i": 9}\n'
    p = run_cli("tail", str(f), "-n", "2", "--where", "i < 5", "--value", check=True)
    assert p.stdout == b'{"i": 3}\n{"i": 4}\n'
    p = run_cli("consume", str(f), "--until", "2", "--format", "%t %o %s\\n", check=True)
    assert p.stdout == b'events.jsonl 0 {"i": 0}\nevents.jsonl 1 {"i": 1}\n'
    assert run_cli("consume", str(f), "--until", "@5").returncode == 2


def test_cli_replay_filters_and_compact_rows(tmp_path):
    log = str(tmp_path / "log")
    rows = [("a", {"tier": "gold", "n": 1}), ("b", {"tier": "gold", "n": 2}), ("a", {"tier": "free", "n": 3}),
            ("c", {"tier": "gold", "n": 4}), ("c", None), ("d", {"tier": "gold", "n": 5})]
    text = "".join(json.dumps({"key": k, "value": v}) + "\n" for k, v in rows)
    run_cli("produce", log, "--envelope", "--partitions", "2", input=text, check=True)
    p = run_cli("replay", log, "--where", "value.tier == gold", "--engine", "local", check=True)
    assert sorted(json.loads(x)["value"]["n"] for x in p.stdout.splitlines()) == [1, 2, 4, 5]
    # --compact: rows of the table whose latest record matches; a is free now, c deleted
    p = run_cli("replay", log, "--compact", "--where", "tier == gold", check=True)
    assert sorted(json.loads(x)["key"] for x in p.stdout.splitlines()) == ["b", "d"]
    p = run_cli("replay", log, "--compact", "--key", "a", "--key", "b", check=True)
    assert sorted((json.loads(x)["key"], json.loads(x)["value"]["n"]) for x in p.stdout.splitlines()) == \
        [("a", 3), ("b", 2)]
    p = run_cli("replay", log, "--compact", "--key", "a", "--where", "tier == gold", check=True)
    assert p.stdout == b""  # a's latest record is not gold: never its older value
    p = run_cli("replay", log, "--key", "a", "--key", "c", "--where", "n <= 3", check=True)
    assert sorted(json.loads(x)["value"]["n"] for x in p.stdout.splitlines()) == [1, 3]
    # the Spark engine applies the same filters (streamctl's own, in the job): the same lines
    p = run_cli("replay", log, "--compact", "--key", "a", "--key", "b", "--where", "n > 1", "--engine", "spark",
                check=True, timeout=300)
    assert p.stdout == run_cli("replay", log, "--compact", "--key", "a", "--key", "b", "--where", "n > 1",
                               check=True).stdout != b""
    p = run_cli("replay", log, "--where", "n > 1", "--header", "h=x", "--emit-job", "-", check=True)
    assert all(text in p.stdout for text in (b'"filter": {', b'"h=x"', b'"n > 1"')), p.stdout
    # auto stays local, quietly, on small input
    p = run_cli("replay", log, "--where", "n > 4", check=True)
    assert p.stderr == b"" and [json.loads(x)["value"]["n"] for x in p.stdout.splitlines()] == [5]


def test_cli_replay_filter_single_partition_and_out(tmp_path):
    log, out = str(tmp_path / "log"), str(tmp_path / "out")
    make_log(log, 30, 1)
    p = run_cli("replay", log, "--where", "i >= 25", check=True)
    assert values(p) == [25, 26, 27, 28, 29]
    run_cli("replay", log, "--header", "nope=1", "--out", out, check=True)
    run_cli("replay", log, "--key", "u3", "--out", out, check=True)
    assert values(run_cli("consume", out, check=True)) == [i for i in range(30) if i % 4 == 3]


def test_cli_exec_batches_hold_only_matches_and_commit_past_skips(logdir, tmp_path):
    make_log(logdir, 20)
    got = tmp_path / "got.jsonl"
    p = run_cli("consume", logdir, "-g", "x", "--where", "c == JP", "--exec", f"cat >> {got}", "--batch", "3")
    assert p.returncode == 0, p.stderr
    assert [json.loads(x)["value"]["i"] for x in got.read_bytes().splitlines()] == [i for i in range(20) if i % 3 == 0]
    stat = json.loads(run_cli("stat", logdir, "--json", check=True).stdout)
    assert [g["committed"] for g in stat["groups"] if g["group"] == "x"] == [20]
    # a failing command: its batch and the skipped records after it stay uncommitted
    p = run_cli("consume", logdir, "-g", "y", "--where", "i == 4", "--exec", "exit 1")
    assert p.returncode != 0
    stat = json.loads(run_cli("stat", logdir, "--json", check=True).stdout)
    assert [g["committed"] for g in stat["groups"] if g["group"] == "y"] == [4]  # up to the failed batch


def test_integers_past_64_bits_compare_exactly():
    """VALUE is read as the records are: 10**29 + 1 and 10**29 + 2 are two numbers, not one float."""
    big = 10**29 + 1  # no float is equal to it
    block = b"".join(line(i, {"id": v}) for i, v in enumerate([big, big + 1, float(big)]))
    assert picked(f"id == {big}", block=block) == [0]
    assert picked(f"id > {big}", block=block) == [1]
    assert picked(f"id >= {big + 1}", block=block) == [1]
    assert picked(f"id != {big}", block=block) == [1, 2]
    assert parse_where(f"id == {big}").value == big
