"""A plain file's reading shared by the two processes (decoder.plain_batches): whichever process
reads a piece, a window run gives the rows, counts, late records and errors (with their line
numbers) of the per-record reference; and the consumer really reads the pieces handed to it."""

from __future__ import annotations

import os
from itertools import cycle

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import window_plain_run
from streamctl.processing import inputorder
from streamctl.processing.windows.config import WindowConfig

T0 = 1_763_719_200_000
M = 60_000
AGG_SETS = [["count"], ["count", "avg:v"], ["n=count:v", "sum:v", "min:v", "max:v", "first:v", "last:v"]]
values = st.one_of(st.integers(-5, 5), st.floats(-10, 10, allow_nan=False), st.none(), st.sampled_from(["x", [1]]))
times = st.one_of(st.integers(0, 40).map(lambda d: T0 + d * 30_000), st.integers(0, 20 * M).map(lambda d: T0 + d),
                  st.sampled_from([None, "bad", "2025-11-21T10:00:00.000Z"]))
KINDS = {"tumbling": (M, 0), "hopping": (3 * M, M), "session": (M, 0), "sliding": (M, 0)}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(evs=st.lists(st.fixed_dictionaries({"ts": times, "k": st.sampled_from(["a", "b", "c", 7, None]), "v": values}),
                    max_size=70),
       seps=st.lists(st.sampled_from([b"\n", b"\n", b"\n", b"\n\n", b" \n"]), min_size=70, max_size=70),
       kind=st.sampled_from(sorted(KINDS)), aggs=st.sampled_from(AGG_SETS), broken=st.booleans(),
       idle=st.lists(st.booleans(), min_size=1, max_size=5), piece=st.sampled_from([64, 200, 1 << 20]),
       lateness=st.sampled_from([0, M]))
def test_pieces_read_by_either_process_equal_records(tmp_path_factory, monkeypatch, evs, seps, kind, aggs, broken,
                                                     idle, piece, lateness):
    from streamctl.processing import decoder

    pattern = cycle(idle)
    monkeypatch.setattr(decoder, "consumer_idle", lambda: next(pattern))  # the reading process inherits it
    monkeypatch.setattr(decoder, "PLAIN_PIECE", piece)
    lines = [orjson.dumps({"ts": e["ts"], "g": {"k": e["k"]}, "v": e["v"]}) for e in evs]
    if broken and lines:
        lines[len(lines) // 2] = b'{"ts": 1, "g": '  # invalid JSON: the error names its line
    path = tmp_path_factory.mktemp("plain") / "in.jsonl"
    path.write_bytes(b"".join(line + sep for line, sep in zip(lines, seps, strict=False)))
    size, hop = KINDS[kind]
    cfg = WindowConfig(kind=kind, size=size, hop=hop, by=["g.k"], aggs=aggs, lateness=lateness)
    assert window_plain_run(cfg, str(path), True) == window_plain_run(cfg, str(path), False)


def test_the_consumer_reads_the_pieces_handed_to_it(tmp_path, monkeypatch):
    """With the consumer always found waiting, every other piece is read by the consumer (this
    process), the sessions' key ids (numbered in the reading process only) included."""
    from streamctl.processing import columns, decoder
    from streamctl.processing.windows import events

    assert decoder.can_fork()  # two cores: the reading process is a real second process
    monkeypatch.setattr(decoder, "consumer_idle", lambda: True)
    monkeypatch.setattr(decoder, "PLAIN_PIECE", 4096)
    monkeypatch.setattr(decoder, "backlog", lambda: events.BEHIND)  # sessions: keys numbered where read
    here: list = []
    me = os.getpid()
    read_piece = columns.FieldReader.read_piece

    def spy(self, piece, base=0):
        if os.getpid() == me:
            here.append(len(piece))
        return read_piece(self, piece, base)

    monkeypatch.setattr(columns.FieldReader, "read_piece", spy)
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(b'{"ts":"2025-11-21T10:%02d:%02d.000Z","g":{"k":"u%d"},"v":%d}\n'
                              % (i // 600, i // 10 % 60, i % 300, i) for i in range(20000)))
    for kind in ("tumbling", "session"):
        here.clear()
        cfg = WindowConfig(kind=kind, size=M, by=["g.k"], aggs=["count", "avg:v"], lateness=M)
        assert window_plain_run(cfg, str(path), True) == window_plain_run(cfg, str(path), False)
        pieces = sum(1 for _ in inputorder.line_blocks(str(path), 4096))
        assert pieces // 2 - 1 <= len(here) <= pieces // 2 + 1
