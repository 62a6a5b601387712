"""reader.iter_blocks_reverse (the backward scan behind `replay --compact`) and record.block_keys."""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamctl.errors import StorageError
from streamctl.storage import reader, record
from streamctl.storage.log import open_log
from streamctl.storage.segment import segment_name

from test_replay import make_log


def _lines_of(blocks) -> list[bytes]:
    out: list[bytes] = []
    for b in blocks:
        out.extend(b.splitlines(keepends=True))
    return out


@pytest.mark.parametrize("chunk", [1, 40, 300, 1 << 20])
def test_reverse_equals_forward(tmp_path, chunk):
    path = str(tmp_path / "log")
    make_log(path, partitions=2, per_partition=60, segment_records=7, gap_every=4)
    lg = open_log(path)
    rng = random.Random(chunk)
    for p in range(2):
        for _ in range(30):
            lo, hi = sorted(rng.randint(0, 120) for _ in range(2))
            forward = list(reader.iter_lines(lg, p, lo, hi))
            blocks = list(reader.iter_blocks_reverse(lg, p, lo, hi, chunk=chunk))
            assert all(b.endswith(b"\n") for b in blocks)
            # newest block first, lines in offset order inside each block
            assert _lines_of(reversed(blocks)) == forward


def test_reverse_survives_a_merge_underneath(tmp_path):
    """Segments merged (as compaction does) while the backward scan is between blocks."""
    path = str(tmp_path / "log")
    make_log(path, partitions=1, per_partition=50, segment_records=6, gap_every=0)
    lg = open_log(path)
    expected = list(reader.iter_lines(lg, 0, 0, 10**9))
    it = reader.iter_blocks_reverse(lg, 0, 0, 10**9, chunk=100)
    got = [next(it)]
    segs = lg.segments(0)
    # merge every closed segment but the newest two into the first one
    victims = segs[:-2]
    data = b"".join(open(s.path, "rb").read() for s in victims)
    tmp = victims[0].path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, victims[0].path)
    for s in victims[1:]:
        os.unlink(s.path)
    got.extend(it)
    assert _lines_of(reversed(got)) == expected


def test_reverse_long_line_and_corrupt(tmp_path):
    path = str(tmp_path / "log")
    make_log(path, partitions=1, per_partition=10, segment_records=100, gap_every=0)
    lg = open_log(path)
    seg = lg.segments(0)[0].path
    long = record.encode(10, 0, 1_763_719_300_000, b'"k"', b'"' + b"x" * 5000 + b'"')
    with open(seg, "ab") as f:
        f.write(long)
    assert _lines_of(reversed(list(reader.iter_blocks_reverse(lg, 0, 0, 11, chunk=64)))) == \
        list(reader.iter_lines(lg, 0, 0, 11))
    with open(seg, "ab") as f:
        f.write(b"not a record\n")
    with pytest.raises(StorageError, match=segment_name(0) + r":\d+: byte"):
        list(reader.iter_blocks_reverse(lg, 0, 0, 10**9, chunk=64))


_key = st.one_of(st.none(), st.text(max_size=6))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_key, st.sampled_from([b"1", b"null", b'{"key":"x","value":2}', b'"a\\nb"'])),
                min_size=1, max_size=20),
       st.booleans())
def test_block_keys_matches_key_bytes(recs, escaped):
    import orjson

    lines = []
    for i, (k, v) in enumerate(recs):
        kj = b"null" if k is None else orjson.dumps(k)
        if escaped and k:
            kj = b'"' + b"".join(b"\\u%04x" % ord(c) if ord(c) < 0x10000 else c.encode() for c in k) + b'"'
        lines.append(record.encode(i, 0, 1000 + i, kj, v))
    block = b"".join(lines)
    keys = record.block_keys(block + b"partial", len(block))
    assert keys == [record.key_bytes(ln) for ln in lines]
    # one line out of the canonical layout: the fast path declines
    odd = lines[:]
    odd[len(odd) // 2] = odd[len(odd) // 2].replace(b'{"offset":', b'{ "offset":', 1)
    assert record.block_keys(b"".join(odd), len(b"".join(odd))) is None
