"""streamctl.maintenance.keyindex: compaction's backward key scan against a model (each key's last line, every null line)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamctl.errors import StorageError
from streamctl.maintenance import keyindex
from streamctl.storage import record

KEYS = [None, "a", "b", 'q"uote', "back\\slash", "é", "k-1"]


def _segment_file(tmp_path, name: str, lines: list[bytes]) -> str:
    path = str(tmp_path / name)
    with open(path, "wb") as f:
        f.write(b"".join(lines))
    return path


def _model(segments: list[list[bytes]]) -> tuple[dict[bytes, int], list[list[int]]]:
    latest: dict[bytes, int] = {}
    nulls: list[list[int]] = []
    for ordinal, lines in enumerate(segments):
        pos = 0
        mine = []
        for line in lines:
            k = record.key_bytes(line)
            if k == b"null":
                mine.append(pos)
            else:
                latest[k] = (ordinal << keyindex.PLACE_BITS) + pos
            pos += len(line)
        nulls.append(mine)
    return latest, nulls


def _jobs(tmp_path, segments: list[list[bytes]], spans: bool = True) -> list[keyindex.ScanJob]:
    jobs = []
    for i, lines in enumerate(segments):
        path = _segment_file(tmp_path, f"{i:04d}.jsonl", lines)
        span = record.offset_of(lines[-1]) - record.offset_of(lines[0]) + 1 if spans else None
        jobs.append(keyindex.ScanJob(i, path, sum(map(len, lines)), span))
    return jobs


def _hand_written(line: bytes) -> bytes:
    """The same record as another tool might write it: spaces, other field order."""
    obj = record.parse(line)
    return (b'{"key": %s, "partition": %d, "offset": %d, "ts": %d, "value": %s}\n'
            % (record.key_json(obj["key"]), obj["partition"], obj["offset"], obj["ts"],
               record.key_json(str(obj["value"]))))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(KEYS), st.booleans(), st.booleans()), min_size=1, max_size=80),
       st.integers(1, 12), st.sampled_from([1, 37, 400, 1 << 20]))
def test_scan_equals_model(tmp_path_factory, recs, per_segment, chunk):
    """Random keys (null, escaped), gaps in offsets, hand-written lines, any block size."""
    tmp_path = tmp_path_factory.mktemp("ks")
    segments: list[list[bytes]] = []
    offset = 0
    for i, (key, gap, odd) in enumerate(recs):
        offset += 2 if gap else 1
        line = record.encode(offset, 0, 1000 + i, record.key_json(key), b"%d" % i)
        if odd:
            line = _hand_written(line)
        if i % per_segment == 0:
            segments.append([])
        segments[-1].append(line)
    old = keyindex.CHUNK
    keyindex.CHUNK = chunk
    try:
        jobs = _jobs(tmp_path, segments)
        for split in range(0, len(jobs) + 1, max(1, len(jobs) // 3)):
            # two chunks scanned apart and merged as compaction does: the later one wins
            older, facts_a = keyindex.scan_chunk(jobs[:split], None)
            newer, facts_b = keyindex.scan_chunk(jobs[split:], None)
            older.update(newer)
            latest, nulls = _model(segments)
            assert older == latest
            facts = facts_a + facts_b
            assert [f.nulls for f in facts] == nulls
            assert [f.lines for f in facts] == [len(s) for s in segments]
    finally:
        keyindex.CHUNK = old


def test_a_damaged_line_is_named_even_in_a_gapless_segment(tmp_path) -> None:
    lines = [record.encode(i, 0, 1000, b'"k"', b"%d" % i) for i in range(10)]
    lines[4] = b'{"offset":4,"partition":0,"ts":1000,"key":"k","value":\n'  # truncated: not a record
    lines[5] = b"X" + lines[5][1:]
    jobs = _jobs(tmp_path, [lines])
    with pytest.raises(StorageError, match=r"0000\.jsonl:\d+: byte \d+: corrupt record"):
        keyindex.scan_chunk(jobs, None)


def test_without_a_span_every_block_is_counted(tmp_path) -> None:
    lines = [record.encode(i, 0, 1000, b'"k%d"' % (i % 3), b"1") for i in range(9)]
    lines.insert(3, _hand_written(record.encode(100, 0, 1000, b'"z"', b"1")))
    latest, facts = keyindex.scan_chunk(_jobs(tmp_path, [lines], spans=False), None)
    assert set(latest) == {b'"k0"', b'"k1"', b'"k2"', b'"z"'}
    assert facts[0].lines == 10
