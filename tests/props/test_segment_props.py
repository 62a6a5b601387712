"""Property tests for the segment reader, check's torn-tail rule and the offset-file parser."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from streamctl.errors import StorageError
from streamctl.groups import offsets
from streamctl.maintenance import check
from streamctl.storage import log as logmod
from streamctl.storage import reader, record, segment

settings.register_profile("ci", deadline=None, max_examples=60)
settings.load_profile("ci")

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
    max_leaves=8,
)


def make_segment_bytes(vals: list, keys: list) -> list[bytes]:
    import orjson

    return [record.encode(i, 0, 1000 + i, record.key_json(k), orjson.dumps(v)) for i, (v, k) in enumerate(zip(vals, keys, strict=False))]


def new_log(tmp: str) -> logmod.Log:
    return logmod.open_or_create(tmp, 1, None, 0)


@given(vals=st.lists(values, min_size=1, max_size=20), data=st.data())
def test_any_cut_point_yields_exactly_the_complete_lines_before_it(tmp_path_factory, vals, data):
    tmp = str(tmp_path_factory.mktemp("cut"))
    keys = data.draw(st.lists(st.none() | st.text(max_size=5), min_size=len(vals), max_size=len(vals)))
    lines = make_segment_bytes(vals, keys)
    blob = b"".join(lines)
    cut = data.draw(st.integers(0, len(blob)))
    lg = new_log(tmp)
    with open(os.path.join(lg.partition_dir(0), segment.segment_name(0)), "wb") as f:
        f.write(blob[:cut])
    got = list(reader.iter_lines(lg, 0, 0, None))
    expect, pos = [], 0
    for ln in lines:
        if pos + len(ln) <= cut:
            expect.append(ln)
        pos += len(ln)
    assert got == expect
    rep = check.check(lg)
    torn = cut not in {sum(len(x) for x in lines[:i]) for i in range(len(lines) + 1)}
    assert rep.ok == (not torn)
    if torn:
        assert "torn tail" in rep.problems[0].reason
        assert check.check(lg, repair=True).ok
        assert check.check(lg).ok
        assert list(reader.iter_lines(lg, 0, 0, None)) == expect


@given(n=st.integers(1, 10), garbage=st.binary(min_size=1, max_size=40).filter(lambda b: b"\n" not in b))
def test_garbage_after_valid_records_is_a_torn_tail(tmp_path_factory, n, garbage):
    tmp = str(tmp_path_factory.mktemp("torn"))
    lg = new_log(tmp)
    lines = make_segment_bytes(list(range(n)), [None] * n)
    with open(os.path.join(lg.partition_dir(0), segment.segment_name(0)), "wb") as f:
        f.write(b"".join(lines) + garbage)
    rep = check.check(lg)
    assert not rep.ok and rep.problems[0].repairable and "torn tail" in rep.problems[0].reason
    assert rep.problems[0].byte == len(b"".join(lines))


@given(n=st.integers(1, 10), garbage=st.binary(min_size=1, max_size=40).filter(lambda b: b"\n" not in b), at=st.data())
def test_garbage_followed_by_valid_records_is_corruption(tmp_path_factory, n, garbage, at):
    tmp = str(tmp_path_factory.mktemp("corrupt"))
    lg = new_log(tmp)
    lines = make_segment_bytes(list(range(n + 1)), [None] * (n + 1))
    i = at.draw(st.integers(0, n - 1))
    bad = lines[:i] + [garbage + b"\n"] + lines[i:]
    with open(os.path.join(lg.partition_dir(0), segment.segment_name(0)), "wb") as f:
        f.write(b"".join(bad))
    rep = check.check(lg, repair=True)
    assert not rep.ok
    p = rep.problems[0]
    assert "corrupt record" in p.reason and not p.repairable and not p.repaired
    assert p.byte == len(b"".join(lines[:i]))


@given(raw=st.binary(max_size=200))
def test_offset_parser_gives_offsets_or_a_clear_error(raw):
    try:
        got = offsets.parse_offsets(raw, 4, "g.json")
    except offsets.OffsetFileError as e:
        assert str(e).startswith("g.json: ")
    else:
        assert all(0 <= p < 4 and isinstance(o, int) and o >= 0 for p, o in got.items())


@given(offs=st.dictionaries(st.integers(0, 3), st.integers(0, 2**62), max_size=4))
def test_offset_file_round_trip(offs):
    assert offsets.parse_offsets(offsets.encode("g", offs), 4) == offs


def test_bisect_finds_offsets_and_times(tmp_path):
    lg = new_log(str(tmp_path / "b"))
    import orjson

    lines = [record.encode(o, 0, 1000 + o // 3, b"null", orjson.dumps("x" * (o % 50))) for o in range(0, 3000, 2)]
    path = os.path.join(lg.partition_dir(0), segment.segment_name(0))
    with open(path, "wb") as f:
        f.write(b"".join(lines))
    fd = os.open(path, os.O_RDONLY)
    end = os.fstat(fd).st_size
    starts = {}
    pos = 0
    for ln in lines:
        starts[record.offset_of(ln)] = pos
        pos += len(ln)
    for target in [0, 1, 2, 777, 778, 2998, 2999, 5000]:
        expect = next((starts[o] for o in sorted(starts) if o >= target), end)
        assert segment.bisect(fd, end, segment.offset_key, target) == expect
    os.close(fd)
    assert reader.offset_for_time(lg, 0, 1000 + 500) == 1500
    assert reader.offset_from_end(lg, 0, 3) == 2994


def test_meta_validation(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "streamctl.json").write_text('{"format": 2, "partitions": 1}')
    try:
        logmod.open_log(str(d))
    except StorageError as e:
        assert "unsupported format" in str(e)
    else:
        raise AssertionError("format 2 accepted")


@given(batches=st.lists(st.lists(st.integers(0, 700), min_size=1, max_size=12), min_size=1, max_size=5),
       seg=st.integers(1024, 2200), lane=st.sampled_from(["items", "values", "keyed"]))
def test_segments_roll_before_the_first_line_past_segment_bytes(tmp_path_factory, batches, seg, lane):
    """Every append lane cuts segments where a record-at-a-time writer would: a segment is rolled
    before the first line that would start at or past segment_bytes, never while it is empty,
    and each segment is named by its first offset."""
    import orjson

    from streamctl.storage.appender import Appender

    tmp = str(tmp_path_factory.mktemp("roll"))
    lg = logmod.open_or_create(tmp, 1, seg, 0)
    want: list[list[bytes]] = [[]]
    off = 0
    with Appender(lg, fsync="never", clock=lambda: 7) as app:
        for sizes in batches:
            values = [b'"%s"' % (b"x" * n) for n in sizes]
            keys = [b'"k%d"' % i for i in range(len(values))]
            if lane == "items":
                res = app.append(0, [(k, v, None) for k, v in zip(keys, values, strict=True)], want_lines=True)
            elif lane == "values":
                res = app.append_texts(0, b"null", values, None, want_lines=True)
            else:
                res = app.append_texts(0, keys, values, None, want_lines=True)
            assert (res.first_offset, res.last_offset) == (off, off + len(values) - 1)
            for line in res.lines:
                if want[-1] and sum(map(len, want[-1])) >= seg:
                    want.append([])
                want[-1].append(line)
            off += len(values)
    names = sorted(n for n in os.listdir(lg.partition_dir(0)) if n.endswith(".jsonl"))
    got = [open(os.path.join(lg.partition_dir(0), n), "rb").read() for n in names]
    assert got == [b"".join(s) for s in want]
    assert [int(n[:20]) for n in names] == [orjson.loads(s[0])["offset"] for s in want]


@given(sizes=st.lists(st.integers(0, 6), min_size=1, max_size=5), gaps=st.lists(st.integers(1, 3), min_size=30, max_size=30),
       data=st.data())
def test_byte_ranges_hold_exactly_the_lines_in_the_offset_range(tmp_path_factory, sizes, gaps, data):
    """consume's zero-copy path: segments with compaction gaps and empty segments, any [start, end)."""
    import orjson

    lg = new_log(str(tmp_path_factory.mktemp("ranges")))
    everything, off, gi = [], 0, 0
    for n in sizes:
        base = off
        seg_lines = []
        for _ in range(n):
            seg_lines.append(record.encode(off, 0, 1000 + off, b"null", orjson.dumps("v" * (off % 7))))
            off += gaps[gi]
            gi += 1
        with open(os.path.join(lg.partition_dir(0), segment.segment_name(base)), "wb") as f:
            f.write(b"".join(seg_lines))
        everything += seg_lines
        off += 1  # the next segment's base is past the last offset
    start = data.draw(st.integers(0, off + 2))
    end = data.draw(st.none() | st.integers(0, off + 2))
    expect = b"".join(ln for ln in everything if record.offset_of(ln) >= start and (end is None or record.offset_of(ln) < end))
    got = b"".join(os.pread(fd, hi - lo, lo) for _path, fd, lo, hi in reader.iter_ranges(lg, 0, start, end))
    assert got == expect
    assert b"".join(reader.iter_lines(lg, 0, start, end)) == expect
