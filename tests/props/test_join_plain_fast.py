"""The block-at-a-time stream-stream join of two plain files against the record-at-a-time path.

`joining.run(spec, write_jsonl=...)` takes the fast path (joins/plain_inputs.py's merge +
joins/interval_kernel.py's IntervalJoin); `joining.run(spec, emit)` the generic one
(inputorder.merged + StreamStreamJoin). Both must give the same bytes: the rows emit makes, dumped with orjson.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamctl.errors import DataError
from streamctl.processing import inputorder
from streamctl.processing.joins import driver as joining

# Event times: mostly epoch ms near each other (so windows matter), some other forms a
# user's file may hold: ISO strings, epoch seconds, nothing usable.
BASE = 1_763_683_200_000
ms_times = st.integers(0, 40).map(lambda d: BASE + d)
odd_times = st.sampled_from([None, "2025-11-21T00:00:00.003Z", 1_763_683_200, True, "soon", 1.5e12])
times = st.one_of(ms_times, ms_times, ms_times, odd_times)
keys = st.sampled_from(["a", "b", "c", 1, 1.0, None, {"x": 1, "y": 2}, [1], "é"])


@st.composite
def line(draw: Any, key_field: str, time_field: str) -> bytes:
    value: dict[str, Any] = {}
    k = draw(keys)
    if k is not None or draw(st.booleans()):
        value[key_field] = k
    t = draw(times)
    if t is not None or draw(st.booleans()):
        value[time_field] = t
    value["n"] = draw(st.integers(0, 9))
    text = orjson.dumps(value)
    form = draw(st.sampled_from(["plain"] * 6 + ["spaced", "escaped", "crlf", "swapped", "blank", "scalar"]))
    if form == "spaced":  # not orjson's bytes: the value is dumped again
        text = text.replace(b",", b", ").replace(b":", b": ")
    elif form == "escaped":
        text = text.replace(b"{", b'{"e":"\\u00e9",', 1) if text != b"{}" else text
    elif form == "crlf":
        text += b"\r"
    elif form == "swapped":  # the same key written in another field order
        text = text.replace(b'{"x":1,"y":2}', b'{"y":2,"x":1}')
    elif form == "blank":
        text = b"  \n" + text
    elif form == "scalar":  # a line that is not an object: no key, no time
        text = b"7"
    return text


def write_file(path: Any, lines: list[bytes], final_newline: bool) -> str:
    path.write_bytes(b"\n".join(lines) + (b"\n" if final_newline or not lines else b""))
    return str(path)


def generic_bytes(spec: joining.JoinSpec) -> bytes:
    out: list[bytes] = []
    stats = joining.run(spec, lambda k, lv, rv: out.append(
        orjson.dumps({"key": k, "left": lv, "right": rv}, option=orjson.OPT_APPEND_NEWLINE)))
    return b"".join(out), stats


def fast_bytes(spec: joining.JoinSpec, block: int) -> bytes:
    out: list[bytes] = []
    stats = joining.run(spec, write_jsonl=out.append, block_bytes=block)
    return b"".join(out), stats


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data(), st.integers(0, 12), st.sampled_from(["inner", "left", "right", "outer"]),
       st.sampled_from([1, 7, 64, 1 << 20]), st.booleans(), st.booleans())
def test_fast_path_equals_generic(tmp_path, data, within, how, block, same_fields, final_newline):
    kf, tf = ("id", "at") if same_fields else ("sid", "clicked")
    left = data.draw(st.lists(line("id", "at"), max_size=25))
    right = data.draw(st.lists(line(kf, tf), max_size=25))
    lp = write_file(tmp_path / "l.jsonl", left, final_newline)
    rp = write_file(tmp_path / "r.jsonl", right, True)
    spec = joining.make_spec(lp, rp, within=f"{within}ms", how=how,
                             on="id" if same_fields else "id=sid", time_field="at" if same_fields else "at=clicked")
    want, want_stats = generic_bytes(spec)
    got, got_stats = fast_bytes(spec, block)
    assert got == want
    assert got_stats.records == want_stats.records
    assert got_stats.no_time == want_stats.no_time


@pytest.mark.parametrize("how", ["inner", "outer"])
def test_fast_path_deep_paths_and_many_per_key(tmp_path, how):
    # value paths two levels down, many events per key, times out of order and late
    ls = [{"u": {"id": i % 3}, "t": {"ms": BASE + (i * 7) % 50}} for i in range(60)]
    rs = [{"u": {"id": i % 4}, "t": {"ms": BASE + (i * 5) % 45}} for i in range(60)]
    lp = write_file(tmp_path / "l.jsonl", [orjson.dumps(v) for v in ls], True)
    rp = write_file(tmp_path / "r.jsonl", [orjson.dumps(v) for v in rs], True)
    spec = joining.make_spec(lp, rp, within="4ms", how=how, on="u.id", time_field="t.ms")
    want, _ = generic_bytes(spec)
    assert want
    for block in (1, 50, 1 << 20):
        assert fast_bytes(spec, block)[0] == want


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.none(), st.integers(0, 9)), max_size=30),
       st.lists(st.one_of(st.none(), st.integers(0, 9)), max_size=30), st.sampled_from([1, 5, 40, 1 << 20]))
def test_merged_chunks_equal_merged(tmp_path, ta, tb, block):
    """The plain files' merge on arrays (joins/plain_inputs.py over mergeorder.merge) takes
    the records in inputorder.merged's order, whatever the block size."""
    from streamctl.processing.joins.plain_inputs import file_blocks, merged_chunks

    paths = []
    for name, ts in (("a", ta), ("b", tb)):
        paths.append(write_file(tmp_path / f"{name}.jsonl",
                                [orjson.dumps({"n": i, "at": t}) for i, t in enumerate(ts)], True))
    specs = [inputorder.classify(p) for p in paths]
    want = [(i, rec["value"]) for i, rec in inputorder.merged(specs, lambda r: r["value"]["at"])]

    # (the times: epoch seconds 0-9 by the rule, ms 0-9000 in the merge: the same order)
    streams = [file_blocks(p, ("value", "at"), ("value", "at"), block) for p in paths]
    got = [(int(side), orjson.loads(pay)) for cols in merged_chunks(streams[0], streams[1], 7)
           for side, pay in zip(cols[0], cols[5], strict=True)]
    assert got == want


@pytest.mark.parametrize("block", [3, 1 << 20])
def test_plain_blocks_read_like_lines(tmp_path, block):
    p = tmp_path / "f.jsonl"
    p.write_bytes(b'{"a":1}\n\n  \r\n{"a": 2}\r\n[1,2]\n"s"\n{"b":{"c":[{"d":1},{"e":2}]}}\n{"z":0}')
    values = [v for vs, _xs, _base in inputorder.plain_blocks(str(p), block) for v in vs]
    assert values == [{"a": 1}, {"a": 2}, [1, 2], "s", {"b": {"c": [{"d": 1}, {"e": 2}]}}, {"z": 0}]
    raw = [(v, x) for vs, xs, _base in inputorder.plain_blocks(str(p), block, raw=True) for v, x in zip(vs, xs, strict=True)]
    for v, x in raw:  # a payload is the line itself only when it is orjson's bytes for the value
        assert x == v or x == orjson.dumps(v)
    assert ({"z": 0}, b'{"z":0}') in raw


def test_plain_blocks_two_objects_on_a_line(tmp_path):
    # parsed as one array, these lines would shift values between records: read line by line
    p = tmp_path / "f.jsonl"
    p.write_bytes(b'{"a":1} , {"b":2}\n')
    with pytest.raises(DataError, match="f.jsonl:1: invalid JSON"):
        list(inputorder.plain_blocks(str(p)))
    p.write_bytes(b'{"x":[{"y":1}\n{"z":2}]}\n{"a":1},{"b":2}\n')
    with pytest.raises(DataError, match="f.jsonl:1: invalid JSON"):
        list(inputorder.plain_blocks(str(p)))


def test_plain_blocks_error_names_the_line_after_good_values(tmp_path):
    p = tmp_path / "f.jsonl"
    p.write_bytes(b'{"a":1}\n\n{"a":2}\nnot json\n{"a":3}\n')
    got: list[Any] = []
    with pytest.raises(DataError) as e:
        for vs, _xs, _base in inputorder.plain_blocks(str(p)):
            got += vs
    assert got == [{"a": 1}, {"a": 2}]
    with pytest.raises(DataError) as e2:
        list(inputorder.records(inputorder.InputSpec(str(p), False)))
    assert str(e.value) == str(e2.value) and f"{p}:4: invalid JSON" in str(e.value)


@pytest.mark.parametrize("cores", [1, 2])
def test_read_ahead_gives_the_same_rows_and_error(tmp_path, monkeypatch, cores):
    """With two cores the files are read in a child process (streamctl/processing/decoder.py): the rows
    before a bad line and the error naming it are those of the one-process read."""
    from streamctl.processing import decoder

    a = [orjson.dumps({"sid": f"s{i}", "time": BASE + i}) for i in range(3000)]
    b = [orjson.dumps({"sid": f"s{i}", "time": BASE + i + 5}) for i in range(0, 3000, 3)]
    b.insert(700, b'{"sid": broken')
    spec = joining.make_spec(write_file(tmp_path / "a.jsonl", a, True), write_file(tmp_path / "b.jsonl", b, True),
                             within="1s", on="sid", time_field="time")
    monkeypatch.setattr(decoder.parallel, "cores", lambda: cores)
    out: list[bytes] = []
    with pytest.raises(DataError) as e:
        joining.run(spec, write_jsonl=out.append, block_bytes=4096)
    assert "b.jsonl:701: invalid JSON" in str(e.value)
    monkeypatch.setattr(decoder.parallel, "cores", lambda: 1)
    ref: list[bytes] = []
    with pytest.raises(DataError) as e1:
        joining.run(spec, write_jsonl=ref.append, block_bytes=4096)
    assert str(e1.value) == str(e.value)
    assert b"".join(out) == b"".join(ref) and len(b"".join(ref).splitlines()) > 100


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data(), st.integers(0, 12), st.sampled_from(["inner", "left", "right", "outer"]), st.integers(0, 6),
       st.integers(1, 9), st.booleans())
def test_chunked_numpy_join_equals_generic(tmp_path, data, within, how, lateness, chunk, collide):
    """joins/interval_kernel.py's IntervalJoin matched a few records at a time (the state carried
    across many chunks, events leaving it mid-chunk), with every key hashed alike when `collide`
    (codes collide, keys decide): the rows, their order and the counts of the record-at-a-time join; and the fast path ran
    (the emit of the record path is never called)."""
    from streamctl.processing.joins import interval_kernel, plain_inputs

    left = data.draw(st.lists(line("id", "at"), max_size=30))
    right = data.draw(st.lists(line("id", "at"), max_size=30))
    spec = joining.make_spec(write_file(tmp_path / "l.jsonl", left, True), write_file(tmp_path / "r.jsonl", right, True),
                             within=f"{within}ms", how=how, on="id", time_field="at", lateness=f"{lateness}ms")
    want, want_stats = generic_bytes(spec)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(interval_kernel, "CHUNK", chunk)
        if collide:
            mp.setattr(plain_inputs, "_hash", lambda k: 42)
        out: list[bytes] = []
        got_stats = joining.run(spec, lambda *a: pytest.fail("the batched path must not emit row by row"),
                                write_jsonl=out.append, block_bytes=64)
    assert b"".join(out) == want
    assert (got_stats.records, got_stats.no_time, got_stats.late) == (want_stats.records, want_stats.no_time,
                                                                      want_stats.late)


iso_parts = st.tuples(st.sampled_from([0, 1, 4, 100, 400, 1900, 1970, 2000, 2024, 9999]), st.integers(0, 13),
                      st.integers(0, 32), st.integers(0, 25), st.integers(0, 61), st.integers(0, 61),
                      st.integers(0, 999))


@st.composite
def iso_text(draw: Any) -> str:
    y, mo, d, h, mi, s, f = draw(iso_parts)
    text = f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}" + draw(st.sampled_from([f".{f:03d}Z", "Z", f".{f:03d}z"]))
    if draw(st.integers(0, 9)) == 0:  # a byte changed: a digit, a separator, a letter, a non-ASCII digit
        i = draw(st.integers(0, len(text) - 1))
        text = text[:i] + draw(st.sampled_from("09-T:.Z t+\u0663")) + text[i + 1:]
    return text


@settings(max_examples=150, deadline=None)
@given(st.lists(iso_text(), min_size=0, max_size=60), st.sampled_from(["as drawn", "one shape", "minute runs"]))
def test_iso_time_column_is_event_time_ms(values, shape):
    """processing/timecolumns.py's numpy parse of a column gives event_time_ms's answer for every value (invalid
    dates, hours, a year 0, another separator or case, a stray byte: handed to the reference), on columns
    long enough for the numpy parse, of one shape, and with runs of values that share their minute."""
    from streamctl.processing.timecolumns import _matrix, iso_column_ms
    from streamctl.timeparse import event_time_ms

    if shape != "as drawn" and values:
        values = [v for v in values if len(v) == len(values[0])]
        values = (values * (32 // len(values) + 1))[:max(32, len(values))]
        if shape == "minute runs":  # sorted: equal values and the same minute side by side
            values.sort()
            values = [v[:17] + f"{i % 60:02d}" + v[19:] if i % 3 and v[16:17] == ":" else v
                      for i, v in enumerate(values)]
    if shape == "one shape" and values and len(values[0]) in (20, 24) and all(v.isascii() for v in values):
        assert _matrix(values) is not None  # the numpy parse ran
    assert iso_column_ms(values) == [event_time_ms(v) for v in values]


@pytest.mark.parametrize("last", ["0", "z", " ", ".", "+"])
@pytest.mark.parametrize("good", ["2025-11-21T10:00:00Z", "2025-11-21T10:00:00.004Z"])
def test_iso_time_column_checks_the_last_byte(good, last):
    """A value of the column's shape whose last byte is not the Z is the reference's answer too."""
    from streamctl.processing.timecolumns import iso_column_ms
    from streamctl.timeparse import event_time_ms

    values = [good] * 40 + [good[:-1] + last]
    assert iso_column_ms(values) == [event_time_ms(v) for v in values]


def test_iso_time_column_checks_each_length():
    """Values of other lengths whose text joined looks like a column of one shape are each read on their own."""
    from streamctl.processing.timecolumns import iso_column_ms
    from streamctl.timeparse import event_time_ms

    good = "2025-11-21T10:00:00.004Z"
    values = [good] * 32 + [good + "2", good[1:]] + [good] * 30  # 25 + 23 bytes: two good rows if cut at 24
    assert iso_column_ms(values) == [event_time_ms(v) for v in values]
    assert iso_column_ms(values)[32:34] == [None, None]
    values = [good] * 40 + [good[:10] + "\n" + good[11:]] + [good] * 40  # a newline where the T is
    assert iso_column_ms(values) == [event_time_ms(v) for v in values]


@pytest.mark.parametrize("seed", range(8))
def test_kernel_equals_reference_on_out_of_order_data(tmp_path, monkeypatch, seed):
    """Out-of-order files, with many events behind the watermark whose partner has left (late as well
    as those behind the window): IntervalJoin over small chunks and blocks, codes colliding on odd
    seeds, gives StreamStreamJoin's rows, late counts and --late-out lines."""
    import random

    from streamctl.processing.joins import interval_kernel, plain_inputs

    rnd = random.Random(seed)
    within, lateness = rnd.choice([20, 60, 100]), rnd.choice([0, 0, 10])
    how = ["inner", "left", "right", "outer"][seed % 4]

    def lines(n: int) -> list[bytes]:
        return [orjson.dumps({"id": rnd.choice("abcdefgh"), "at": BASE + 4 * i + rnd.randint(-60, 60), "n": i})
                for i in range(n)]

    spec = joining.make_spec(write_file(tmp_path / "l.jsonl", lines(300), True),
                             write_file(tmp_path / "r.jsonl", lines(300), True),
                             within=f"{within}ms", how=how, on="id", time_field="at", lateness=f"{lateness}ms")
    want_late: list[bytes] = []
    want: list[bytes] = []
    want_stats = joining.run(spec, lambda k, lv, rv: want.append(
        orjson.dumps({"key": k, "left": lv, "right": rv}, option=orjson.OPT_APPEND_NEWLINE)),
        late=lambda side, line: want_late.append(line))
    assert sum(want_stats.late)
    monkeypatch.setattr(interval_kernel, "CHUNK", rnd.choice([3, 17, 64]))
    if seed % 2:
        monkeypatch.setattr(plain_inputs, "_hash", lambda k: 42)
    got_late: list[bytes] = []
    got: list[bytes] = []
    got_stats = joining.run(spec, lambda *a: pytest.fail("the batched path must not emit row by row"),
                            write_jsonl=got.append, block_bytes=256, late=lambda side, line: got_late.append(line))
    assert b"".join(got) == b"".join(want)
    assert (got_stats.late, got_late) == (want_stats.late, want_late)
