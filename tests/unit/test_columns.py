"""streamctl.processing.columns (a log's fields read as columns with msgspec) against the full read it stands in
for (inputorder._block_records, orjson): it must never accept a piece the full read rejects, and what
it gives must be what the full read gives, value for value and bit for bit."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamctl.processing import columns, inputorder
from streamctl.processing.windows.config import WindowConfig
from streamctl.processing.windows.driver import WindowRun
from streamctl.processing.windows.output import row_json

ODD = "odd name/é"
PATHS = [("ts",), ("key",), ("value", "time"), ("value", "amount"), ("value", ODD)]

scalars = st.one_of(
    st.none(), st.booleans(), st.text(max_size=5), st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-(2**63), 2**63), st.sampled_from([2**64 - 1, 2**64, -(2**63) - 1, 10**30, -0.0, 1e308]))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                              st.dictionaries(st.text(max_size=3), inner, max_size=3)),
                           max_leaves=6)


@st.composite
def lines(draw) -> bytes:
    value = draw(st.one_of(
        st.fixed_dictionaries({}, optional={"time": json_values, "amount": json_values, ODD: scalars,
                                            "note": json_values}),
        json_values))
    rec = {"offset": draw(st.sampled_from([0, 7, -1, 2**63, 2**64 - 1])),
           "partition": draw(st.sampled_from([0, 3, -2, 2**63])),
           "ts": draw(st.one_of(st.integers(0, 2**40), st.sampled_from([-1, 1.5, True, None, "5", 2**63, 2**64 - 1]))),
           "value": value}
    if draw(st.booleans()):
        rec["key"] = draw(st.one_of(st.none(), st.text(max_size=4), st.integers(0, 3)))
    if draw(st.integers(0, 9)) == 0:
        del rec["value"]
    # the stdlib writes integers of any size (orjson refuses those beyond 64 bits)
    text = json.dumps(rec, separators=(",", ":"), ensure_ascii=draw(st.booleans())).encode()
    damage = draw(st.integers(0, 12))
    if damage == 0:
        text = text[:-1]  # truncated
    elif damage == 1:
        text = text.replace(b'"', b'"\xff', 1) if b'"note":"' not in text else text.replace(b'"note":"', b'"note":"\xff')
    elif damage == 2:
        text = text.replace(b"}", b",}", 1)  # trailing comma
    elif damage == 3:
        text = b" " + text + b" "
    return text


def full_columns(recs: list[dict]) -> dict:
    def get(r: dict, p: tuple):
        if p[0] == "value":
            v = r.get("value")
            return v.get(p[1]) if type(v) is dict else None
        return r.get(p[0])
    return {p: [get(r, p) for r in recs] for p in PATHS}


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def must_decline(piece: bytes, full: list[dict] | None, paths: list[tuple[str, ...]]) -> bool:
    """Whether the fast read must hand a piece to the full read: the full read rejects it, or a line
    holds what the fast read's schema refuses (an envelope int beyond int64, a value that is not
    an object, an object on a path that is not an object or null, a read field holding an array,
    an object or an int beyond int64). The lines are read again with the standard library, which
    keeps integers of any size (orjson reads those beyond 64 bits as floats)."""
    if full is None:
        return True
    exact = [json.loads(line) for line in piece.splitlines()]
    tree: dict = {}
    for p in paths:
        node = tree
        for name in p[1:] if p[0] == "value" else ():
            node = node.setdefault(name, {})
    for r in exact:
        if r["ts"] > _I64_MAX or r["offset"] > _I64_MAX or not _I64_MIN <= r["partition"] <= _I64_MAX:
            return True
        if type(r["value"]) is not dict or _refused(r["value"], tree):
            return True
    return False


def _refused(x: object, tree: dict) -> bool:
    if not tree:  # a leaf: a scalar as orjson reads it
        return type(x) in (list, dict) or (type(x) is int and not _I64_MIN <= x <= _I64_MAX)
    if x is None:
        return False
    return type(x) is not dict or any(_refused(x.get(k), sub) for k, sub in tree.items())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ls=st.lists(lines(), min_size=1, max_size=6))
def test_fast_read_accepts_only_what_the_full_read_reads_the_same(ls):
    piece = b"\n".join(ls) + b"\n"
    fast = columns.FieldReader(PATHS).read_piece(piece)
    full = inputorder._block_records(piece)
    # the fast read declines exactly the pieces its module docstring names, and reads every other one
    assert (fast is None) == must_decline(piece, full, PATHS)
    if fast is None:
        return
    assert full is not None, "the fast read accepted a piece the full read rejects"
    assert list(fast) == list(full) and len(fast) == len(full)
    assert [fast[i] for i in range(len(fast))] == list(full)
    want = full_columns(full)
    for p in PATHS:
        # dumps: compares floats bit for bit (-0.0) and types (1 vs 1.0 vs True)
        assert orjson.dumps(fast.cols[p]) == orjson.dumps(want[p]), p


NESTED = [("ts",), ("value", "time"), ("value", "n", "a"), ("value", "n", "b", "c")]


@st.composite
def nested_lines(draw) -> bytes:
    n = draw(st.one_of(json_values, st.fixed_dictionaries({}, optional={
        "a": json_values, "b": st.one_of(json_values, st.fixed_dictionaries({}, optional={"c": json_values}))})))
    rec = {"offset": draw(st.integers(0, 9)), "partition": 0, "ts": draw(st.integers(0, 2**40)), "key": "k",
           "value": {"time": draw(scalars), "n": n}}
    if draw(st.integers(0, 5)) == 0:
        del rec["value"]["n"]
    return json.dumps(rec, separators=(",", ":")).encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ls=st.lists(nested_lines(), min_size=1, max_size=6))
def test_nested_paths_read_as_the_full_read_reads_them(ls):
    from streamctl.storage import fieldpaths

    piece = b"\n".join(ls) + b"\n"
    fast = columns.FieldReader(NESTED).read_piece(piece)
    full = inputorder._block_records(piece)
    assert (fast is None) == must_decline(piece, full, NESTED)
    if fast is None:
        return
    assert full is not None
    for p in NESTED:
        want = [fieldpaths.get(r, p) for r in full]
        assert orjson.dumps(fast.cols[p]) == orjson.dumps(want), p


def test_nested_paths_take_ordinary_records():
    ls = [orjson.dumps({"offset": i, "partition": 0, "ts": 1000 + i, "key": "k",
                        "value": {"time": 5, "n": {"a": i, "b": {"c": "x"}} if i % 4 else None}}) for i in range(8)]
    fast = columns.FieldReader(NESTED).read_piece(b"\n".join(ls) + b"\n")
    assert fast is not None
    assert fast.cols[("value", "n", "a")] == [None, 1, 2, 3, None, 5, 6, 7]
    assert fast.cols[("value", "n", "b", "c")] == [None, "x", "x", "x", None, "x", "x", "x"]


def test_a_carriage_return_inside_a_line_goes_to_the_full_read():
    line = b'{"offset":0,"partition":0,"ts":1,\r"key":"a","value":{"time":5}}\n'
    assert columns.FieldReader(PATHS).read_piece(line) is None


def test_fast_read_takes_ordinary_records():
    ls = [orjson.dumps({"offset": i, "partition": 0, "ts": 1000 + i, "key": f"u{i}" if i % 3 else None,
                        "value": {"time": 1_763_683_200_000 + i, "amount": i / 4, "note": "é x", "n": {"a": [1]}}})
          for i in range(20)]
    piece = b"\n".join(ls) + b"\n"
    fast = columns.FieldReader(PATHS).read_piece(piece)
    assert fast is not None and len(fast) == 20
    assert fast.cols[("value", "amount")][4] == 1.0 and fast.cols[("key",)][3] is None
    assert fast.cols[("value", ODD)] == [None] * 20


@pytest.mark.parametrize("line", [
    b'{"offset":0,"partition":0,"ts":1,"key":"a","value":{"time":5,"note":"\xff"}}',  # invalid UTF-8, skipped
    b'{"offset":0,"partition":0,"ts":1,"key":"a","value":{"time":5,"amount":123456789012345678901234567890}}',
    b'{"offset":0,"partition":0,"ts":18446744073709551616,"key":"a","value":{"time":5}}',
    b'{"offset":0,"partition":0,"ts":1.0,"key":"a","value":{"time":5}}',
    b'{"offset":0,"partition":0,"ts":1,"key":"a","value":[1]}',
    b'{"offset":0,"partition":0,"ts":1,"key":"a","value":{"time":{"deep":1}}}',
    b'{"offset":0,"partition":0,"ts":1,"key":"a","value":{"time":5,"junk":[1,]}}',
    b'{"offset":0,"partition":0,"ts":1,"key":"a","value":{"time":1e400}}',  # orjson refuses an infinite number
    b'{"offset":0,"partition":0,"ts":1,"key":"a","value":{"time":9223372036854775808}}',  # beyond int64
])
def test_what_the_fast_read_leaves_to_the_full_read(line):
    good = b'{"offset":1,"partition":0,"ts":1,"key":"a","value":{"time":5}}'
    assert columns.FieldReader(PATHS).read_piece(good + b"\n" + line + b"\n") is None


@pytest.mark.parametrize("line", [b'{"time":1e400}', b'{"time":[1]}', b'{"time":{"a":1}}', b'{"time":-9223372036854775809}',
                                  b'{"n":{"a":1e999}}'])
def test_what_the_plain_read_leaves_to_the_full_read(line):
    """A leaf holding what orjson reads otherwise (or refuses) fails the piece's decoding."""
    good = b'{"time":5,"n":{"a":1}}'
    reader = columns.FieldReader([("value", "time"), ("value", "n", "a")], plain=True)
    assert reader.read_piece(good + b"\n" + good + b"\n", 0) is not None
    assert reader.read_piece(good + b"\n" + line + b"\n", 0) is None


@pytest.mark.parametrize("piece", [
    b'{"time":1}\n\n{"time":2}\n',  # a blank line
    b'{"time":1} {"time":2}\n{"time":3}\n',  # two values on a line
    b'{"time":1}{"time":2}\n{"time":\n3}\n',  # two on a line, one over two lines: as many values as lines
    b'{"junk":"a}\n{b"}\n{"time":1}{"time":2}\n',  # a line end inside a (skipped) string
    b'{"time":1},\n{"time":2}\n',
])
def test_the_plain_read_keeps_one_value_a_line(piece):
    """Whichever way a piece is decoded (in place, when every line starts with { and ends with }, or
    as one array), a piece whose lines are not one JSON value each is left to the full read."""
    reader = columns.FieldReader([("value", "time")], plain=True)
    assert reader.read_piece(piece, 0) is None


@pytest.mark.parametrize("piece", [b'{"time":1}\n{"time":2}\n', b'{"time":1}\r\n {"time":2} \n{"time":3}'])
def test_the_plain_read_of_whole_lines(piece):
    reader = columns.FieldReader([("value", "time")], plain=True)
    got = reader.read_piece(piece, 0)
    assert got is not None and got.cols == {("value", "time"): [orjson.loads(x)["time"] for x in piece.split(b"\n") if x]}


def test_readable_paths():
    assert columns.readable([("ts",), ("key",), ("value", "x")])
    assert columns.readable([("value", "a", "b"), ("value", "a", "c", "d")])
    assert not columns.readable([("value",)])
    assert not columns.readable([("offset",)])
    assert not columns.readable([("value", 'a"b')]) and not columns.readable([("value", "a\\b")])
    assert not columns.readable([("value", "a\nb")])


def test_window_over_mixed_pieces_equals_the_record_path(run, logdir, monkeypatch, tmp_path):
    """A log whose pieces are partly unusual (non-object values, huge ints, nested time fields):
    the window's rows, counts and late events are those of the per-record reference."""
    T0 = 1_763_719_200_000
    evs = []
    for i in range(3000):
        v = {"user": f"u{i % 4}", "at": T0 + i * 1500 - (90_000 if i % 97 == 0 else 0), "amount": i % 9 or "n/a", "note": "é" * (i % 3)}
        if i % 501 == 0:
            v["amount"] = 2**64 - 1  # produce refuses more than 64 bits
        elif i % 733 == 0:
            v = [i]
        elif i % 877 == 0:
            v["at"] = {"nested": 1}
        evs.append(json.dumps(v) + "\n")
    run("produce", logdir, "--key-field", "user", "--segment-bytes", "64KiB", input="".join(evs), check=True)
    monkeypatch.setattr(inputorder, "PIECE", 2000)
    monkeypatch.setattr(inputorder, "COLUMN_PIECE", 2000)
    cfg = WindowConfig(kind="tumbling", size=60_000, time_field="value.at", aggs=["count", "avg:amount", "max:amount"])
    want_rows: list = []
    want_late: list = []
    ref = WindowRun(cfg, True, want_late.append)
    ref.feed_records(inputorder.records(inputorder.InputSpec(logdir, True)), want_rows.extend)
    ref.finish(want_rows.extend)

    from streamctl.processing import decoder

    monkeypatch.setattr(decoder, "can_fork", lambda: False)  # read in this process
    batches = list(decoder.log_batches(logdir, [("value", "at"), ("key",), ("value", "amount")]))
    assert any(type(b) is columns.FieldBatch for b in batches)
    assert any(type(b) is not columns.FieldBatch for b in batches)
    got_rows: list = []
    got_late: list = []
    wr = WindowRun(cfg, True, got_late.append)
    wr.feed_batches(batches, got_rows.extend)
    wr.finish(got_rows.extend)
    assert b"".join(map(row_json, got_rows)) == b"".join(map(row_json, want_rows))
    assert vars(wr.stats) == vars(ref.stats) and wr.plan.non_numeric == ref.plan.non_numeric
    assert got_late == want_late and want_late

    late = tmp_path / "late.jsonl"
    p = run("window", logdir, "--tumbling", "1m", "--time-field", "value.at", "--agg", "count",
            "--agg", "avg:amount", "--agg", "max:amount", "--late-out", str(late))
    assert p.returncode == 0, p.stderr
    assert p.stdout == b"".join(map(row_json, want_rows))
    assert late.read_bytes() == b"".join(orjson.dumps(r) + b"\n" for r in want_late)


# -- read-ahead in a child process (streamctl/processing/decoder.py) ---------------------------------------------

def _mixed_log(run, logdir: str) -> None:
    evs = []
    for i in range(3000):
        v: object = {"user": f"u{i % 4}", "at": 1_763_719_200_000 + i * 1500, "amount": i % 9 or "n/a"}
        if i % 733 == 0:
            v = [i]
        elif i % 611 == 0:
            v["at"] = "soon"  # a bad time: that piece's batch keeps its records for the slow path
        evs.append(json.dumps(v) + "\n")
    run("produce", logdir, "--key-field", "user", "--segment-bytes", "64KiB", input="".join(evs), check=True)


def _flat(batches) -> list:
    out = []
    for b in batches:
        if type(b) is columns.FieldBatch:
            out.append(("cols", orjson.dumps({".".join(k): v for k, v in b.cols.items()}), len(b), list(b)))
        else:
            out.append(("recs", list(b)))
    return out


FIELDS = [("value", "at"), ("key",), ("value", "amount")]


def test_read_ahead_gives_what_the_in_process_read_gives(run, logdir, monkeypatch):
    from streamctl.processing import decoder

    _mixed_log(run, logdir)
    monkeypatch.setattr(inputorder, "PIECE", 3000)
    monkeypatch.setattr(inputorder, "COLUMN_PIECE", 3000)
    monkeypatch.setattr(decoder.parallel, "cores", lambda: 2)
    monkeypatch.setattr(decoder, "can_fork", lambda: False)
    want = _flat(decoder.log_batches(logdir, FIELDS))
    assert {k for k, *_ in want} == {"cols", "recs"}
    monkeypatch.setattr(decoder, "can_fork", lambda: True)
    assert _flat(decoder.log_batches(logdir, FIELDS)) == want


def test_read_ahead_items_cross_the_pipe_unchanged():
    """Items marshal can hold and items only pickle can (a Fraction), mixed, arrive equal and in order."""
    from fractions import Fraction

    from streamctl.processing import decoder

    made = [[b"x" * 70_000, "k\u00e9y", None, 2**70, -0.0, True], (Fraction(1, 3), {"a": [1]}),
            {("value", "at"): [1, 2]}, [], Fraction(-2, 7)]
    got = list(decoder.items(lambda: iter(made), "test"))
    assert got == made
    assert [type(x) for x in got] == [type(x) for x in made]


def test_read_ahead_stopped_early_leaves_no_child(run, logdir, monkeypatch):
    import os

    from streamctl.processing import decoder

    _mixed_log(run, logdir)
    monkeypatch.setattr(inputorder, "PIECE", 3000)
    monkeypatch.setattr(inputorder, "COLUMN_PIECE", 3000)
    monkeypatch.setattr(decoder.parallel, "cores", lambda: 2)
    def children() -> set[int]:
        with open(f"/proc/self/task/{os.getpid()}/children") as f:
            return {int(x) for x in f.read().split()}

    before = children()
    gen = decoder.log_batches(logdir, FIELDS)
    next(gen)
    reader = children() - before
    assert len(reader) == 1
    gen.close()
    assert not reader & children()  # killed and reaped
    with pytest.raises(ChildProcessError):
        os.waitpid(reader.pop(), os.WNOHANG)


@pytest.mark.parametrize("how,msg", [("raise", "RuntimeError: disk on fire"), ("exit", "stopped early")])
def test_read_ahead_child_failure_is_one_clear_error(run, logdir, monkeypatch, how, msg):
    import os

    from streamctl.errors import StorageError
    from streamctl.processing import decoder

    _mixed_log(run, logdir)
    monkeypatch.setattr(decoder.parallel, "cores", lambda: 2)

    def broken(self, piece):
        if how == "exit":
            os._exit(3)
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(columns.FieldReader, "read_piece", broken)
    with pytest.raises(StorageError, match=msg):
        list(decoder.log_batches(logdir, FIELDS))


def test_cli_window_reads_ahead_and_reports_a_corrupt_line(run, logdir):
    """Through the CLI (read-ahead on a one-partition log): the same rows as the per-record path,
    and a corrupt line in the middle is the same error as before, after the rows before it."""
    _mixed_log(run, logdir)
    p = run("window", logdir, "--tumbling", "1m", "--time-field", "at", "--agg", "count", "--agg", "sum:amount")
    assert p.returncode == 0, p.stderr
    cfg = WindowConfig(kind="tumbling", size=60_000, time_field="at", aggs=["count", "sum:amount"])
    ref = WindowRun(cfg, True)
    rows: list = []
    ref.feed_records(inputorder.records(inputorder.InputSpec(logdir, True)), rows.extend)
    ref.finish(rows.extend)
    assert p.stdout == b"".join(map(row_json, rows))
    # the counts of the reference, bad times and non-numbers both (read ahead, then counted here)
    assert ref.stats.bad_time == 9
    assert f"{ref.stats.bad_time} record(s) without a usable time".encode() in p.stderr
    assert f"sum_amount: {ref.plan.non_numeric['sum_amount']} value(s)".encode() in p.stderr

    import glob

    seg = sorted(glob.glob(f"{logdir}/p0/*.jsonl"))[1]
    data = open(seg, "rb").read()
    cut = data.index(b"\n", len(data) // 2) + 1
    with open(seg, "wb") as f:
        f.write(data[:cut] + b'{"offset": broken\n' + data[cut:])
    p = run("window", logdir, "--tumbling", "1m", "--time-field", "at")
    assert p.returncode != 0
    assert b"corrupt record" in p.stderr and b"Traceback" not in p.stderr


@pytest.mark.parametrize("stop", ["closed pipe", "SIGINT"])
def test_cli_window_stopped_early_leaves_no_reading_process(run, logdir, stop):
    import os
    import signal
    import subprocess
    import time

    from conftest import CLI, cli_env

    evs = "".join(json.dumps({"user": f"u{i % 500}", "at": 1_763_719_200_000 + i * 50}) + "\n" for i in range(60_000))
    run("produce", logdir, "--key-field", "user", input=evs, check=True)
    p = subprocess.Popen([*CLI, "window", logdir, "--tumbling", "1s", "--time-field", "at"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=cli_env(),
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert p.stdout is not None and p.stdout.readline()  # rows are coming: the child is reading
    with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
        children = [int(x) for x in f.read().split()]
    assert len(children) == 1
    if stop == "closed pipe":
        p.stdout.close()
    else:
        p.send_signal(signal.SIGINT)
    rc = p.wait(timeout=60)
    err = p.stderr.read() if p.stderr else b""
    assert rc in ((141, 0) if stop == "closed pipe" else (130,)), err
    assert b"Traceback" not in err
    time.sleep(0.2)
    for pid in children:
        gone = not os.path.exists(f"/proc/{pid}")
        if not gone:
            with open(f"/proc/{pid}/stat") as f:
                gone = f.read().split(") ")[1].startswith("Z")  # exited (reaped by init soon)
        assert gone, f"reading process {pid} left running"


@pytest.mark.parametrize("by", [[], ["user"], ["user", "kind"], ["key"], ["kind", "n"]])
@pytest.mark.parametrize("aggs", [["count"], ["p50:n", "distinct:kind", "first:kind", "last:n", "min:n", "max:n"]])
def test_cli_window_by_and_aggs_through_columns_equal_records(run, logdir, by, aggs):
    """Group keys from one or several value fields (JSON lists as keys), the record key, numbers and
    strings as keys, every aggregation kind: the column read gives the per-record path's rows."""
    evs = "".join(json.dumps({"user": f"u{i % 7}", "kind": ["a", "b", 3, None][i % 4], "n": (i * 37) % 11,
                              "at": 1_763_719_200_000 + i * 900}) + "\n" for i in range(2500))
    run("produce", logdir, "--key-field", "user", input=evs, check=True)
    flags = [x for b in by for x in ("--by", b)] + [x for a in aggs for x in ("--agg", a)]
    p = run("window", logdir, "--session", "20s", "--time-field", "at", *flags)
    assert p.returncode == 0, p.stderr
    cfg = WindowConfig(kind="session", size=20_000, time_field="at", by=by, aggs=aggs)
    ref = WindowRun(cfg, True)
    rows: list = []
    ref.feed_records(inputorder.records(inputorder.InputSpec(logdir, True)), rows.extend)
    ref.finish(rows.extend)
    assert p.stdout == b"".join(map(row_json, rows)) and rows


def test_the_reading_process_sees_how_far_behind_its_consumer_is(tmp_path):
    """decoder.backlog(): 0 outside a reading process; in one, the items sent that the consumer has
    not finished. Each item goes into the pipe as it is sent (not kept in the reader's write
    buffer): while the consumer holds the first, item k sees k items behind."""
    import time

    from streamctl.processing import decoder

    assert decoder.backlog() == 0
    held, sent = tmp_path / "held", tmp_path / "sent"

    def make():
        yield decoder.backlog()
        deadline = time.monotonic() + 30
        while not held.exists():  # the consumer has the first item and keeps it
            if time.monotonic() > deadline:
                yield "the first item never reached the consumer"
                return
            time.sleep(0.01)
        for _ in range(5):
            yield decoder.backlog()
        sent.touch()

    got = []
    for i, x in enumerate(decoder.items(make, "test")):
        got.append(x)
        if i == 0:
            held.touch()
            deadline = time.monotonic() + 60
            while not sent.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
    assert got == [0, 1, 2, 3, 4, 5]
