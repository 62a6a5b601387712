"""The batched enrichment (streamctl/processing/joins/stream_table.py's enrich) against the
record-at-a-time stream-table join it stands in for: the same rows, bytes and order, the same counts."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_cli
from streamctl.processing import decoder, inputorder
from streamctl.processing.joins import driver as joining
from streamctl.processing.joins import table_inputs

from test_join import write_log

T0 = 1_763_719_200_000

keys = st.sampled_from(["a", "b", "7", "x,y", None])
values = st.one_of(st.none(), st.integers(0, 9), st.fixed_dictionaries(
    {"id": st.sampled_from(["a", "b", 7, 7.0, None, [1]]), "n": st.integers(0, 99)}))


def reference(spec: joining.JoinSpec) -> tuple[bytes, joining.JoinStats]:
    out: list[bytes] = []
    stats = joining.run(spec, lambda k, lv, rv: out.append(orjson.dumps({"key": k, "left": lv, "right": rv}) + b"\n"))
    return b"".join(out), stats


def batched(spec: joining.JoinSpec) -> tuple[bytes, joining.JoinStats]:
    out: list[bytes] = []
    stats = joining.run(spec, lambda *a: pytest.fail("the batched path must not emit row by row"),
                        write_jsonl=out.append)
    return b"".join(out), stats


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(ev=st.lists(st.tuples(keys, values, st.integers(0, 30)), max_size=40),
       tb=st.lists(st.tuples(keys, values, st.integers(0, 30)), max_size=25),
       parts=st.sampled_from([(1, 1), (1, 3), (2, 1)]), sort=st.booleans(),
       on=st.sampled_from([None, "id", "key=id", "id=key"]), how=st.sampled_from(["inner", "left"]),
       piece=st.sampled_from([60, 200, 1 << 16]))
def test_enrich_equals_record_path(tmp_path_factory, monkeypatch, ev, tb, parts, sort, on, how, piece):
    """Equal times between the sides (the table wins ties), unsorted times within a partition,
    several partitions, tombstones by record key and by value path, numeric and list keys."""
    d = tmp_path_factory.mktemp("enrich")
    if sort:
        ev, tb = sorted(ev, key=lambda r: r[2]), sorted(tb, key=lambda r: r[2])
    left, right = str(d / "ev"), str(d / "tb")
    write_log(left, parts[0], [(k, v, T0 + t) for k, v, t in ev])
    write_log(right, parts[1], [(k, v, T0 + t) for k, v, t in tb])
    monkeypatch.setattr(inputorder, "PIECE", piece)
    spec = joining.make_spec(left, right, table=True, how=how, on=on)
    want, wstats = reference(spec)
    got, gstats = batched(spec)
    assert got == want
    assert gstats == wstats


def test_cli_enrichment_of_logs(tmp_path):
    left, right = str(tmp_path / "ev"), str(tmp_path / "tb")
    profiles = [(f"u{i}", {"id": f"u{i}", "tier": "gold" if i % 2 else "free"}, T0 + i) for i in range(5)]
    profiles.append(("u3", None, T0 + 10))  # deleted before the events after it
    write_log(right, 1, profiles)
    write_log(left, 2, [(f"u{i % 6}", {"user": f"u{i % 6}", "n": i}, T0 + 5 + i) for i in range(12)])
    p = run_cli("join", left, right, "--table", "--how", "left", "--engine", "local")
    assert p.returncode == 0, p.stderr
    rows = [orjson.loads(x) for x in p.stdout.splitlines()]
    assert [(r["key"], r["left"]["n"], (r["right"] or {}).get("tier")) for r in rows][:8] == [
        ("u0", 0, "free"), ("u1", 1, "gold"), ("u2", 2, "free"), ("u3", 3, "gold"), ("u4", 4, "free"),
        ("u5", 5, None), ("u0", 6, "free"), ("u1", 7, "gold")]
    assert [r["right"] for r in rows if r["key"] == "u3"] == [{"id": "u3", "tier": "gold"}, None]
    inner = run_cli("join", left, right, "--table", "--engine", "local")
    assert {orjson.loads(x)["key"] for x in inner.stdout.splitlines()} == {"u0", "u1", "u2", "u3", "u4"}


def test_cli_enrichment_on_an_event_time_field_follows_that_order(tmp_path):
    """--time-field other than ts: the table change that comes first by event time applies first,
    whatever the append times say (the logs here were appended a day apart, table last)."""
    left, right = str(tmp_path / "ev"), str(tmp_path / "tb")
    day = 86_400_000
    write_log(right, 1, [("u1", {"id": "u1", "tier": "gold", "at": T0 + 5}, T0 + day)])
    write_log(left, 2, [("u1", {"n": i, "at": T0 + i}, T0 + i) for i in range(10)])
    p = run_cli("join", left, right, "--table", "--how", "left", "--time-field", "value.at", "--engine", "local")
    assert p.returncode == 0, p.stderr
    rows = [orjson.loads(x) for x in p.stdout.splitlines()]
    assert [(r["left"]["n"], (r["right"] or {}).get("tier")) for r in rows] == [
        (i, "gold" if i >= 5 else None) for i in range(10)]
    spec = joining.make_spec(left, right, table=True, how="left", time_field="value.at")
    assert p.stdout == reference(spec)[0]


# -- two plain files (joins/stream_table.py's enrich) -------------------------------------

plain_keys = st.sampled_from(["a", "b", "7", 7, 7.0, None, [1], {"x": 1}])
plain_times = st.one_of(st.integers(0, 30).map(lambda d: T0 + d), st.integers(0, 30).map(
    lambda d: f"2025-11-21T10:00:{d:02d}.5Z"), st.sampled_from([None, "soon", True, 1.5e12]))


@st.composite
def plain_line(draw, nested: bool) -> bytes:
    form = draw(st.sampled_from(["object"] * 8 + ["null", "scalar", "blank", "spaced"]))
    if form == "null":
        return b"null"
    if form == "scalar":
        return b"[1]"
    value: dict = {"n": draw(st.integers(0, 9)), "f": 6.10}  # 6.10: not orjson's bytes, dumped again
    k = draw(plain_keys)
    if k is not None or draw(st.booleans()):
        value["u"] = {"id": k} if nested else k
    t = draw(plain_times)
    if t is not None or draw(st.booleans()):
        value["at"] = t
    text = orjson.dumps(value)
    if form == "spaced":
        text = text.replace(b":", b": ")
    return b"  \n" + text if form == "blank" else text


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), nested=st.booleans(), sort=st.booleans(), timed=st.sampled_from(["at", "at=at", None]),
       how=st.sampled_from(["inner", "left"]), piece=st.sampled_from([1, 60, 1 << 16]))
def test_plain_enrich_equals_record_path(tmp_path_factory, data, nested, sort, timed, how, piece):
    """Table changes between events by time (ties to the table), times out of order, ISO and epoch
    times and unusable ones, null and non-object lines, keys of every JSON type, a key two levels
    down, no time field (the table file first): the batched plain path's bytes and counts are the
    record path's."""
    d = tmp_path_factory.mktemp("plain")
    ev = data.draw(st.lists(plain_line(nested), max_size=40))
    tb = data.draw(st.lists(plain_line(False), max_size=25))
    if sort:
        ev, tb = sorted(ev), sorted(tb)
    left, right = d / "ev.jsonl", d / "tb.jsonl"
    left.write_bytes(b"\n".join(ev) + b"\n")
    right.write_bytes(b"\n".join(tb))
    spec = joining.make_spec(str(left), str(right), table=True, how=how, on="u.id=u" if nested else "u",
                             time_field=timed)
    want, wstats = reference(spec)
    out: list[bytes] = []
    gstats = joining.run(spec, lambda *a: pytest.fail("the batched path must not emit row by row"),
                         write_jsonl=out.append, block_bytes=piece)
    assert b"".join(out) == want
    assert gstats == wstats


def test_plain_enrich_reads_event_times_only_while_the_table_lasts(tmp_path, monkeypatch):
    """Once the table file is read to its end, the events go in file order: their times are not read
    (a later event with an unparsable time costs nothing), and the rows are the record path's."""

    right = tmp_path / "tb.jsonl"
    right.write_bytes(b"".join(orjson.dumps({"u": f"u{i}", "at": T0 + i}) + b"\n" for i in range(50)))
    left = tmp_path / "ev.jsonl"
    left.write_bytes(b"".join(orjson.dumps({"u": f"u{i % 60}", "at": T0 + 20 + i}) + b"\n" for i in range(3000)))
    spec = joining.make_spec(str(left), str(right), table=True, how="left", on="u", time_field="at")
    timed_blocks = []
    real = table_inputs.Side.next_block

    def spy(self, timed):
        got = real(self, timed)
        if got and timed and self.times_of is not None:
            timed_blocks.append(len(self.values))
        return got

    monkeypatch.setattr(table_inputs.Side, "next_block", spy)
    out: list[bytes] = []
    joining.run(spec, write_jsonl=out.append, block_bytes=4096)
    assert b"".join(out) == reference(spec)[0]
    assert sum(timed_blocks) < 1000  # the table's 50 lines and the first events' blocks only


# -- any mix of inputs and time fields (one kernel for every --table --as-of position run) --------

mixed_times = st.one_of(st.integers(0, 30).map(lambda d: T0 + d), st.integers(0, 30).map(
    lambda d: f"2025-11-21T10:00:{d:02d}.5Z"), st.sampled_from([None, "soon", True, 1.5e12, -1e19]),
    st.integers(0, 30).map(lambda d: (T0 + d) // 1000))
# mostly two keys, so that table changes and events meet often; the other kinds of key now and then
mixed_ids = st.sampled_from(["a"] * 6 + ["b"] * 3 + ["7", 7, 7.0, None, [1]])
mixed_keys = st.sampled_from(["a"] * 4 + ["b"] * 2 + ["7", None])


@st.composite
def mixed_record(draw) -> tuple[Any, Any, int]:
    """(record key, value, append time): the value an object with a join key `id` and an event time
    `at` (epoch ms, ISO, unusable, missing), a tombstone, or a scalar; append times out of order."""
    form = draw(st.sampled_from(["object"] * 10 + ["null", "scalar"]))
    value: Any
    if form == "null":
        value = None
    elif form == "scalar":
        value = draw(st.integers(0, 9))
    else:
        value = {"n": draw(st.integers(0, 99))}
        if draw(st.integers(0, 5)):
            value["id"] = draw(mixed_ids)
        if draw(st.integers(0, 5)):
            value["at"] = draw(mixed_times)
    return draw(mixed_keys), value, T0 + draw(st.integers(0, 30))


def write_input(path: Any, form: str, records: list[tuple[Any, Any, int]], sort: bool) -> str:
    """A log of 1 or 3 partitions (ts sorted in each, or not) or a plain file of the values (a tombstone
    is the line `null`, which a plain file's reader skips as having no key)."""
    if sort:
        records = sorted(records, key=lambda r: r[2])
    if form == "plain":
        path.write_bytes(b"".join(orjson.dumps(v) + b"\n" for _k, v, _t in records))
    else:
        write_log(str(path), int(form[-1]), records)
    return str(path)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), forms=st.tuples(*[st.sampled_from(["log1", "log3", "plain"])] * 2),
       sort=st.booleans(), how=st.sampled_from(["inner", "left"]), piece=st.sampled_from([60, 300, 1 << 16]),
       readers=st.sampled_from(["here", "one", "per partition"]))
def test_mixed_enrich_equals_record_path(tmp_path_factory, monkeypatch, data, forms, sort, how, piece, readers):
    """Each side a plain file or a log of one or three partitions; each side's time the append time,
    a value field (stragglers, ISO and epoch times, missing and unusable ones) or another record
    path (`offset`); joined on the record key or a value field; tombstones by record key and by
    value path; a log of events read in this process, by one reading process, or by one per
    partition: the kernel's bytes and counts are the record path's on every example."""
    d = tmp_path_factory.mktemp("mixed")
    ev = data.draw(st.lists(mixed_record(), min_size=1, max_size=50), label="events")
    tb = data.draw(st.lists(mixed_record(), min_size=1, max_size=30), label="table")
    left = write_input(d / ("ev.jsonl" if forms[0] == "plain" else "ev"), forms[0], ev, sort)
    right = write_input(d / ("tb.jsonl" if forms[1] == "plain" else "tb"), forms[1], tb, sort)
    on = [data.draw(st.sampled_from(["id"] if form == "plain" else ["id", "key"])) for form in forms]
    times = [data.draw(st.sampled_from(["ts", "at", "offset"])) for _form in forms]
    monkeypatch.setattr(inputorder, "PIECE", piece)
    monkeypatch.setattr(decoder, "can_fork", lambda: readers != "here")
    monkeypatch.setattr(table_inputs, "MAX_READERS", 8 if readers == "per partition" else 0)
    spec = joining.make_spec(left, right, table=True, how=how, on="=".join(on), time_field="=".join(times))
    assert joining._kernel(spec, joining.check_inputs(spec)) is not None  # every such run takes the kernel
    want, wstats = reference(spec)
    out: list[bytes] = []
    gstats = joining.run(spec, lambda *a: pytest.fail("the batched path must not emit row by row"),
                         write_jsonl=out.append, block_bytes=piece)
    assert b"".join(out) == want
    assert gstats == wstats


@pytest.mark.parametrize("table_form", ["log1", "plain"])
def test_offset_times_of_a_plain_file_count_records_across_blocks(tmp_path, table_form):
    """`--time-field offset` on a plain file is its line number, read block after block (a blank line
    holds no record): the kernel's rows are the record path's, with changes between events."""
    ev = tmp_path / "ev.jsonl"
    ev.write_bytes(b"".join(orjson.dumps({"id": "a", "n": i}) + (b"\n\n" if i % 4 == 0 else b"\n") for i in range(30)))
    tb = write_input(tmp_path / ("tb.jsonl" if table_form == "plain" else "tb"), table_form,
                     [("a", {"id": "a", "v": i}, T0) for i in range(20)], False)
    spec = joining.make_spec(str(ev), tb, table=True, how="left", on="id", time_field="offset")
    want, _stats = reference(spec)
    out: list[bytes] = []
    joining.run(spec, write_jsonl=out.append, block_bytes=60)
    assert b"".join(out) == want
    lines = [i + i // 4 + (i % 4 != 0) for i in range(30)]  # event i's line: a blank line after 0, 4, 8, ...
    assert lines[:6] == [0, 2, 3, 4, 5, 7]
    assert [orjson.loads(x)["right"]["v"] for x in want.splitlines()] == [min(n, 19) for n in lines]
