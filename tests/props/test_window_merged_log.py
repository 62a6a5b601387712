"""A log of several partitions read, made into columns and merged by the reading process, or by
the same steps in this one (decoder: FieldReader, the window's column step, mergeorder.merge)
against the reference:
the records merged one block at a time in this process (inputorder.log_batches, merge_lanes) and
folded one by one. The same rows in the same order, the same counts, late records and errors."""

from __future__ import annotations

import os

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamctl.errors import DataError
from streamctl.processing import columns, decoder, inputorder
from streamctl.processing.windows.config import WindowConfig
from streamctl.processing.windows.driver import WindowRun
from streamctl.processing.windows.events import records_of, time_getter


def _log_records(path, time_of=None):
    """A log's records in the input order, one by one."""
    return [r for b in inputorder.log_batches(path, time_of=time_of) for r in b]


T0 = 1_763_719_200_000
M = 60_000

times = st.one_of(
    st.integers(0, 40 * M).map(lambda d: T0 + d),
    st.integers(0, 2400).map(lambda s: f"2025-11-21T10:{s // 60 % 60:02d}:{s % 60:02d}.{s % 1000:03d}Z"),
    st.sampled_from([None, "bad", -1, True]),
)
values = st.one_of(st.integers(-5, 5), st.floats(-10, 10, allow_nan=False), st.none(), st.sampled_from(["x", [1]]))
event = st.fixed_dictionaries({"at": times, "g": st.one_of(st.fixed_dictionaries({"k": st.sampled_from(["a", "b", 7])}),
                                                           st.just(None)),
                               "v": st.fixed_dictionaries({"amount": values})})


def write_log(path: str, parts: list[list], ts_step: int) -> None:
    """A log of len(parts) partitions, one segment each, with these values (a value may be a
    scalar: such a piece is read in full)."""
    os.makedirs(path)
    with open(os.path.join(path, "streamctl.json"), "w") as f:
        f.write(orjson.dumps({"format": 1, "partitions": len(parts), "segment_bytes": 1 << 20}).decode())
    for p, values in enumerate(parts):
        os.makedirs(os.path.join(path, f"p{p}"))
        with open(os.path.join(path, f"p{p}", "0" * 20 + ".jsonl"), "wb") as f:
            for i, v in enumerate(values):
                f.write(orjson.dumps({"offset": i, "partition": p, "ts": T0 + i * ts_step, "key": f"u{i % 3}",
                                      "value": v}) + b"\n")


def _run(cfg: WindowConfig, path: str, merged: bool, late_out: bool):
    late: list = []
    run = WindowRun(cfg, is_log=True, late_sink=late.append if late_out else None)
    rows: list = []
    err = None
    try:
        if merged:
            _is_log, recs = records_of(path, cfg)
            run.feed(recs, rows.extend)
        else:
            run.feed_records(_log_records(path, time_of=time_getter(cfg, True)), rows.extend)
        run.finish(rows.extend)
    except DataError as e:
        err = str(e)
    return rows, vars(run.stats), dict(run.plan.non_numeric), run.seq, late, err


@pytest.fixture(params=["forked", "here"])
def forking(monkeypatch, request):
    # the reading process forked, or the same steps in this process (decoder.ahead: one core)
    monkeypatch.setattr(decoder, "can_fork", lambda: request.param == "forked" and hasattr(os, "fork"))
    monkeypatch.setattr(inputorder, "COLUMN_PIECE", 300)  # pieces of a few records: many merge rounds


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.lists(st.one_of(event, event, event, st.just(5)), max_size=25), min_size=2, max_size=4),
       kind=st.sampled_from(["tumbling", "session", "sliding"]), late_out=st.booleans(),
       on_bad_time=st.sampled_from(["skip", "skip", "fail"]), lateness=st.sampled_from([0, M]))
def test_merged_columns_equal_merged_records(tmp_path_factory, forking, parts, kind, late_out, on_bad_time, lateness):
    path = str(tmp_path_factory.mktemp("merged") / "log")
    write_log(path, parts, 1000)
    cfg = WindowConfig(kind=kind, size=M, by=["value.g.k"], time_field="value.at", on_bad_time=on_bad_time,
                       aggs=["count", "avg:value.v.amount", "last:value.v.amount"], lateness=lateness)
    assert _run(cfg, path, True, late_out) == _run(cfg, path, False, late_out)


def test_ordinary_partitions_travel_as_columns(tmp_path, forking, monkeypatch):
    """On ordinary data every merged batch is the column step's output (no record read), and the
    partitions' records interleave in event-time order."""
    parts = [[{"at": f"2025-11-21T10:{(3 * i + p) // 60 % 60:02d}:{(3 * i + p) % 60:02d}.000Z", "g": {"k": "ab"[i % 2]},
               "v": {"amount": i}} for i in range(200)] for p in range(3)]
    path = str(tmp_path / "log")
    write_log(path, parts, 1)
    # sliding windows with `last`: one row per event, so the order within a batch shows
    cfg = WindowConfig(kind="sliding", size=M, by=["value.g.k"], time_field="value.at",
                       aggs=["count", "avg:value.v.amount", "last:value.v.amount"])
    seen: list = []
    real = WindowRun.feed_batches

    def spy(self, batches, emit, source="input", done=None):
        def watch():
            for b in batches:
                seen.append(b)
                yield b
        return real(self, watch(), emit, source, done)

    monkeypatch.setattr(WindowRun, "feed_batches", spy)
    got = _run(cfg, path, True, False)
    assert got == _run(cfg, path, False, False)
    assert len(seen) > 3 and all(type(b) is columns.FieldBatch and b.pre is not None for b in seen)
    assert sum(len(b) for b in seen) == 600 and got[1]["events"] == 600
