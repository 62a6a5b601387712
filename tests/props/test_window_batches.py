"""The batch path (WindowRun.feed_batches, inputorder.log_batches, rows_jsonl) against the per-record
path it replaces: the same rows in the same order, the same counts, the same state, byte for byte."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import window_plain_run
from streamctl.errors import DataError, StorageError
from streamctl.processing import inputorder
from streamctl.processing.windows.config import WindowConfig
from streamctl.processing.windows.driver import WindowRun
from streamctl.processing.windows.output import iso_many, row_json, rows_jsonl
from streamctl.timeparse import MAX_MS, MIN_MS, format_iso

T0 = 1_763_719_200_000
M = 60_000

AGG_SETS = [
    ["count"],
    ["count", "avg:v"],
    ["n=count:v", "sum:v", "min:v", "max:v", "p50:v", "distinct:v", "first:v", "last:v"],
]

values = st.one_of(st.integers(-5, 5), st.floats(-10, 10, allow_nan=False), st.none(),
                   st.sampled_from(["x", True, float("nan"), float("inf"), [1], {"a": 1}]))
# on a 30 s grid mostly, so that events land exactly on window edges and session gaps
ms = st.one_of(st.integers(0, 80).map(lambda d: T0 + d * 30_000), st.integers(0, 40 * M).map(lambda d: T0 + d))
times = st.one_of(
    ms,  # epoch ms
    st.integers(0, 40 * M).map(lambda d: (T0 + d) // 1000),  # epoch s
    st.sampled_from([None, "bad", "2025-11-21T10:00:00Z", -1, True]),
)


def events_strategy(bad: bool):
    t = times if bad else ms
    ev = st.fixed_dictionaries({"ts": t, "k": st.sampled_from(["a", "b", "c", None, 7, 10, -1, 2.5, "x,y", [1, 2], {"o": 1}]),
                                "v": values})
    return st.lists(ev, max_size=60)


def records(evs: list[dict]) -> list[dict]:
    return [{"offset": i, "partition": 0, "key": None, "value": e} for i, e in enumerate(evs)]


def cut(recs: list[dict], sizes: list[int]) -> list[list[dict]]:
    out, i = [], 0
    for n in sizes:
        if i >= len(recs):
            break
        out.append(recs[i:i + n])
        i += n
    if i < len(recs):
        out.append(recs[i:])
    return out


def both(cfg: WindowConfig, recs: list[dict], sizes: list[int]):
    """(rows, stats, non-numeric counts, state) from the per-record path and the batch path."""
    results = []
    for batched in (False, True):
        late: list = []
        run = WindowRun(cfg, is_log=False, late_sink=late.append)
        rows: list = []
        err = None
        try:
            if batched:
                run.feed_batches(cut(recs, sizes), rows.extend)
            else:
                run.feed_records(iter(recs), rows.extend)
            run.finish(rows.extend)
        except DataError as e:
            err = str(e)
        results.append((rows, vars(run.stats), dict(run.plan.non_numeric), run.seq, late, err,
                        run.watermark.dump()))
    return results


def sorted_runs(evs: list[dict]) -> list[dict]:
    """Mostly in time order (so the in-order loops run), with a few stragglers kept in place."""
    head = sorted(evs[: len(evs) * 3 // 4], key=lambda e: e["ts"] if type(e["ts"]) is int else 0)
    return head + evs[len(evs) * 3 // 4:]


@pytest.mark.parametrize("kind,size,hop", [("tumbling", M, 0), ("session", 3 * M, 0), ("hopping", 4 * M, M),
                                           ("sliding", 2 * M, 0)])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evs=events_strategy(bad=False), sizes=st.lists(st.integers(1, 9), max_size=12),
       aggs=st.sampled_from(AGG_SETS), lateness=st.sampled_from([0, M, 10 * M]),
       emit=st.sampled_from(["final", "final", "update"]), late=st.sampled_from(["drop", "correct"]),
       order=st.sampled_from(["as is", "sorted", "mostly sorted"]))
def test_batches_equal_records(kind, size, hop, evs, sizes, aggs, lateness, emit, late, order):
    if order == "sorted":
        evs = sorted(evs, key=lambda e: e["ts"])
    elif order == "mostly sorted":
        evs = sorted_runs(evs)
    cfg = WindowConfig(kind=kind, size=size, hop=hop, by=["k"], aggs=aggs, lateness=lateness, emit=emit,
                       late=late)
    a, b = both(cfg, records(evs), sizes)
    assert a == b


# Realistic arrival: times mostly in order, with stragglers carrying an older time (a few ms to
# beyond the lateness), many groups, batches of any size: the session kernel's normal case.
arrivals = st.lists(st.tuples(st.integers(0, 90_000), st.sampled_from([0] * 6 + [1, 20_000, 4 * M, 12 * M, 40 * M]),
                              st.integers(0, 9), values), max_size=120)


def straggling(steps: list[tuple]) -> list[dict]:
    out, t = [], T0
    for step, back, k, v in steps:
        t += step
        out.append({"ts": t - back, "k": "abcdefghij"[k], "v": v})
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=arrivals, sizes=st.lists(st.integers(1, 40), max_size=12), aggs=st.sampled_from(AGG_SETS),
       gap=st.sampled_from([M, 3 * M, 30 * M]), lateness=st.sampled_from([0, M, 5 * M, 15 * M]))
def test_session_kernel_with_stragglers_equals_records(steps, sizes, aggs, gap, lateness):
    cfg = WindowConfig(kind="session", size=gap, by=["k"], aggs=aggs, lateness=lateness)
    a, b = both(cfg, records(straggling(steps)), sizes)
    assert a == b


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=arrivals, sizes=st.lists(st.integers(1, 40), max_size=12), gap=st.sampled_from([M, 3 * M, 30 * M]),
       lateness=st.sampled_from([0, M, 15 * M]), splits=st.sampled_from([0, 1, 16]),
       restore=st.lists(st.booleans(), max_size=12))
def test_session_kernel_cuts_and_restores_equal_records(steps, sizes, gap, lateness, splits, restore):
    """Batches cut where the kernel stops, the rest of a batch one event at a time after few cuts
    (MAX_SPLITS), and runs restored from their checkpoint between batches (the close heap made
    from the checkpoint): the rows of one event at a time."""
    from streamctl.processing.windows import session_kernel

    cfg = WindowConfig(kind="session", size=gap, by=["k"], aggs=["count", "avg:v"], lateness=lateness)
    recs = records(straggling(steps))
    one: list = []
    ref = WindowRun(cfg, is_log=False)
    ref.feed_records(iter(recs), one.extend)
    ref.finish(one.extend)
    rows: list = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(session_kernel, "MAX_SPLITS", splits)
        run = WindowRun(cfg, is_log=False)
        for i, part in enumerate(cut(recs, sizes)):
            if i < len(restore) and restore[i]:
                data = orjson.loads(orjson.dumps(run.dump()))
                run = WindowRun(cfg, is_log=False)
                run.load(data)
            run.feed_batches([part], rows.extend)
        run.finish(rows.extend)
    assert rows == one


def test_session_kernel_after_a_restore_cuts_then_goes_one_by_one():
    """Restored from a checkpoint (the close heap made from it), a batch whose first event bridges two
    sessions (alone through add()), then a cut, another event alone, and the rest one event at a time
    (MAX_SPLITS 1): the closes the watermark makes, rows and state, are those of one event at a time."""
    from streamctl.processing.windows import session_kernel

    first = [{"ts": T0 + d * M, "k": k, "v": 1} for d in (0, 40) for k in "abd"]
    # a, b and d each bridge their two sessions: a alone at once, b after a cut, d in the rest
    second = [{"ts": T0 + 20 * M, "k": "a", "v": 2}, {"ts": T0 + 41 * M, "k": "c", "v": 3},
              {"ts": T0 + 20 * M, "k": "b", "v": 4}, {"ts": T0 + 42 * M, "k": "c", "v": 3},
              {"ts": T0 + 20 * M, "k": "d", "v": 4}, {"ts": T0 + 200 * M, "k": "c", "v": 5},
              {"ts": T0 + 201 * M, "k": "a", "v": 6}]
    cfg = WindowConfig(kind="session", size=30 * M, by=["k"], aggs=["count", "avg:v"], lateness=30 * M)
    recs = records(first + second)
    one, ref = [], WindowRun(cfg, is_log=False)
    ref.feed_records(iter(recs[:6]), one.extend)
    data = orjson.loads(orjson.dumps(ref.dump()))
    ref.feed_records(iter(recs[6:]), one.extend)
    rows: list = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(session_kernel, "MAX_SPLITS", 1)
        run = WindowRun(cfg, is_log=False)
        run.load(data)
        run.feed_batches([recs[6:]], rows.extend)
        assert run.declined()[1] > 0
        assert rows == one
        assert orjson.dumps(run.dump()) == orjson.dumps(ref.dump())


def test_session_kernel_takes_batches_with_stragglers():
    """Stragglers within the lateness that join their group's session, start one, or are late: the
    kernel folds every batch (none goes to the one-event path) and the rows are add()'s."""
    evs = [{"ts": T0 + i * 20_000 - (2 * M if i % 9 == 4 else 0) - (40 * M if i % 31 == 7 else 0),
            "k": "z" if i % 50 == 25 else "abc"[i % 3], "v": i % 7 + 0.5} for i in range(600)]
    cfg = WindowConfig(kind="session", size=3 * M, by=["k"], aggs=["count", "avg:v"], lateness=10 * M)
    a, b = both(cfg, records(evs), [50] * 12)
    assert a == b
    assert a[1]["late"] > 0
    run = WindowRun(cfg, is_log=False)
    run.feed_batches(cut(records(evs), [50] * 12), lambda rows: None)
    assert run.declined() == (0, 0)


def test_session_kernel_cuts_a_batch_at_an_event_it_cannot_take():
    """An event that bridges two open sessions of its group: the kernel takes the events around it,
    only it (and the event that found the gap) go alone through add(), counted; rows and state are add()'s."""
    evs = [{"ts": T0 + i * 10_000, "k": "bcd"[i % 3], "v": i} for i in range(300)]
    evs.insert(10, {"ts": T0, "k": "a", "v": 1})
    evs.insert(250, {"ts": T0 + 40 * M, "k": "a", "v": 2})
    evs.insert(280, {"ts": T0 + 20 * M, "k": "a", "v": 3})  # within 30m of both: the two merge
    cfg = WindowConfig(kind="session", size=30 * M, by=["k"], aggs=["count", "avg:v"], lateness=30 * M)
    a, b = both(cfg, records(evs), [len(evs)])
    assert a == b
    run = WindowRun(cfg, is_log=False)
    rows: list = []
    run.feed_batches([records(evs)], rows.extend)
    batches, alone = run.declined()
    assert batches == 1 and 1 <= alone <= 2
    run.finish(rows.extend)
    assert [r[3]["count"] for r in rows if r[2] == b'"a"'] == [3]


@pytest.mark.parametrize("on_bad_time", ["skip", "fail"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evs=events_strategy(bad=True), sizes=st.lists(st.integers(1, 9), max_size=12),
       kind=st.sampled_from(["tumbling", "session"]), aggs=st.sampled_from(AGG_SETS))
def test_bad_times_and_non_numbers_equal_records(on_bad_time, evs, sizes, kind, aggs):
    cfg = WindowConfig(kind=kind, size=M, by=["k"], aggs=aggs, on_bad_time=on_bad_time)
    a, b = both(cfg, records(evs), sizes)
    assert a == b


@settings(max_examples=40, deadline=None)
@given(evs=events_strategy(bad=False), sizes=st.lists(st.integers(1, 9), max_size=12),
       by=st.sampled_from([[], ["k"], ["k", "v"], ["value.k"], ["nested.deep"]]))
def test_keys_equal_records(evs, sizes, by):
    evs = [dict(e, nested={"deep": [e["k"]]}) for e in evs]
    recs = [{"offset": i, "partition": 0, "key": e["k"] if type(e["k"]) is str else None, "value": e}
            for i, e in enumerate(sorted(evs, key=lambda e: e["ts"]))]
    cfg = WindowConfig(kind="tumbling", size=M, by=by, aggs=["count", "sum:v"])
    a, b = both(cfg, recs, sizes)
    assert a == b


def test_state_after_batches_checkpoints_like_records():
    evs = [{"ts": T0 + i * 7_000, "k": "abc"[i % 3], "v": i} for i in range(50)]
    for kind in ("tumbling", "session"):
        cfg = WindowConfig(kind=kind, size=M, by=["k"], aggs=["count", "first:v", "last:v", "avg:v"])
        runs = []
        for batched in (False, True):
            run = WindowRun(cfg, is_log=False)
            if batched:
                run.feed_batches(cut(records(evs), [7] * 10), lambda rows: None)
            else:
                run.feed_records(iter(records(evs)), lambda rows: None)
            runs.append(orjson.dumps(run.dump()))
        assert runs[0] == runs[1]


@settings(max_examples=50, deadline=None)
@given(rows=st.lists(st.tuples(
    st.integers(-2 * M, 2 * M), st.integers(0, 3),
    st.sampled_from([b'"a"', b"null", b"[1,2]", b'{"x":1}']),
    st.dictionaries(st.sampled_from(["count", "avg_v", "first_v"]),
                    st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=True), st.text(max_size=3),
                              st.none(), st.sampled_from(["},{", "x}", [{"a": 1}, {"b": "},{"}], {"n": {}}]))),
    st.sampled_from([None, None, 1, 2]))))
def test_rows_jsonl_equals_row_json(rows):
    rows = [(s, s + d * M, k, v, r) for s, d, k, v, r in rows]
    assert rows_jsonl(rows) == b"".join(map(row_json, rows))
    same_window = [(0, M, k, v, None) for _s, _e, k, v, _r in rows]
    assert rows_jsonl(same_window) == b"".join(map(row_json, same_window))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.integers(MIN_MS, MAX_MS), st.integers(-10**6, 10**6),
                          st.sampled_from([MIN_MS, MAX_MS, 0, -1, 999, -1000, 951_782_400_000])), max_size=30))
def test_iso_many_is_format_iso(ms):
    """The batch writer of window bounds (numpy) against the one rule, timeparse.format_iso."""
    assert iso_many(ms) == [format_iso(t).encode() for t in ms]


def test_iso_many_raises_outside_years_1_to_9999():
    for bad in (MIN_MS - 1, MAX_MS + 1):
        with pytest.raises(ValueError):
            format_iso(bad)
        with pytest.raises(ValueError):
            iso_many([0, bad])


def test_rows_jsonl_raises_where_orjson_cannot_write_and_row_json_writes_it():
    """A sum past 64 bits: the batch's one orjson call refuses it (the caller then goes row by row),
    row_json writes the exact integer."""
    rows = [(0, M, b'"a"', {"sum": 1}, None), (0, M, b'"b"', {"sum": 2**70, "n": 1.5}, None)]
    with pytest.raises(TypeError):
        rows_jsonl(rows)
    assert row_json(rows[1]).endswith(b'"key":"b","sum":%d,"n":1.5}\n' % 2**70)
    assert row_json(rows[0]) == rows_jsonl(rows[:1])


# -- log_batches against records ------------------------------------------------------------------


def test_log_batches_equal_log_records(run, logdir, monkeypatch):
    evs = "".join(orjson.dumps({"user": f"u{i % 5}", "at": T0 + i, "n": i, "pad": "x" * (i % 50)}).decode() + "\n"
                  for i in range(2000))
    run("produce", logdir, "--key-field", "user", "--segment-bytes", "64KiB", input=evs, check=True)
    # small pieces: many batches, a piece boundary inside most blocks
    monkeypatch.setattr(inputorder, "PIECE", 1000)
    want = list(inputorder.records(inputorder.InputSpec(logdir, True)))
    got = [r for b in inputorder.log_batches(logdir) for r in b]
    assert got == want and len(got) == 2000
    starts = {0: 777}
    assert [r for b in inputorder.log_batches(logdir, starts=starts) for r in b] == \
        [r for b in inputorder.log_batches(logdir, starts=starts, time_of=lambda r: r["ts"]) for r in b]


def test_log_batches_merge_several_partitions(run, logdir):
    evs = "".join(orjson.dumps({"user": f"u{i % 7}", "n": i}).decode() + "\n" for i in range(500))
    run("produce", logdir, "--partitions", "3", "--key-field", "user", input=evs, check=True)
    assert [r for b in inputorder.log_batches(logdir) for r in b] == list(inputorder.records(inputorder.InputSpec(logdir, True)))


@pytest.mark.parametrize("bad", [
    b"not json",
    b'{"offset":1,"partition":0,"ts":5,"key":3,"value":1}',  # a number as key
    b'{"offset":1,"partition":0,"ts":-5,"key":null,"value":1}',
    b'{"offset":1,"partition":0,"ts":5,"key":null}',  # no value
    b"[1, 2]",
])
def test_a_corrupt_line_is_the_same_error(tmp_path, bad):
    good = b'{"offset":0,"partition":0,"ts":5,"key":"a","value":{"x":1}}'
    block = good + b"\n" + bad + b"\n"
    with pytest.raises(StorageError) as a:
        inputorder.piece_records("LOG", 0, block)
    assert inputorder._block_records(block) is None
    assert "corrupt record" in str(a.value)


def test_block_records_reads_as_line_records():
    lines = [b'{"offset":0,"partition":0,"ts":5,"key":"a","value":{"x":1}}',
             b'{"offset":1,"partition":-1,"ts":5,"key":null,"value":null,"headers":{"h":"v"}}',
             b' {"ts":6,"offset":2,"partition":0,"value":[1]} ']
    block = b"\n".join(lines) + b"\n"
    assert inputorder._block_records(block) == [inputorder._line_record("L", 0, line) for line in block.splitlines()]


def test_cli_window_on_a_log_is_the_same_through_batches(run, logdir):
    evs = "".join(orjson.dumps({"user": f"u{i % 4}", "at": T0 + i * 1500, "amount": i % 9 or "n/a"}).decode() + "\n"
                  for i in range(3000))
    run("produce", logdir, "--key-field", "user", input=evs, check=True)
    for flags in (["--tumbling", "1m", "--agg", "count", "--agg", "avg:amount"], ["--session", "30s"]):
        p = run("window", logdir, *flags, "--time-field", "at", check=True)
        cfg = WindowConfig(kind=flags[0][2:], size=M if flags[1] == "1m" else 30_000, time_field="at",
                           aggs=["count", "avg:amount"] if "--agg" in flags else ["count"])
        wr = WindowRun(cfg, True)
        rows: list = []
        wr.feed_records(inputorder.records(inputorder.InputSpec(logdir, True)), rows.extend)
        wr.finish(rows.extend)
        assert p.stdout == b"".join(map(row_json, rows))
        assert (b"not numbers" in p.stderr) == ("--agg" in flags)


@pytest.mark.parametrize("sizes", [[4], [1, 1, 1, 1], [2, 2], [3, 1]])
def test_session_closing_inside_a_batch_at_its_end_makes_an_event_exactly_gap_after_late(sizes):
    """x@1+GAP moves the watermark to the end of a's [1, 1 + GAP): it closes (with b's), so a@1+GAP,
    exactly GAP after a's last event, is within GAP of a closed session: late, in a batch (a tie
    with the largest time before it, in time order) as one event at a time."""
    g = 3 * M
    evs = [{"ts": T0, "k": "b"}, {"ts": T0 + 1, "k": "a"}, {"ts": T0 + 1 + g, "k": "x"}, {"ts": T0 + 1 + g, "k": "a"}]
    cfg = WindowConfig(kind="session", size=g, by=["k"], aggs=["count"])
    a, b = both(cfg, records(evs), sizes)
    assert a == b
    assert [(orjson.loads(r[2]), r[0] - T0, r[3]["count"]) for r in a[0]] == [("b", 0, 1), ("a", 1, 1), ("x", 1 + g, 1)]
    assert a[1]["late"] == 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(evs=events_strategy(bad=True), seps=st.lists(st.sampled_from([b"\n", b"\n", b"\n", b"\r\n", b"\n\n", b" \n"]),
                                                    min_size=60, max_size=60),
       kind=st.sampled_from(["tumbling", "session", "sliding"]), aggs=st.sampled_from(AGG_SETS),
       broken=st.booleans())
def test_plain_file_columns_equal_records(tmp_path_factory, evs, seps, kind, aggs, broken):
    """A plain file read as columns (a plain FieldReader, a piece at a time, read ahead) gives what its
    records read one by one give: rows, counts, late records with their record numbers, errors."""
    lines = [orjson.dumps({"ts": e["ts"], "g": {"k": e["k"]}, "v": e["v"]}) for e in evs]
    lines = [line.replace(b"{", b"{\r", 1) if i % 7 == 3 else line for i, line in enumerate(lines)]  # JSON whitespace
    if broken and lines:
        lines[len(lines) // 2] = b'{"ts": 1, "g": '  # invalid JSON: the error names its record number
    path = tmp_path_factory.mktemp("plain") / "in.jsonl"
    path.write_bytes(b"".join(line + sep for line, sep in zip(lines, seps, strict=False)))
    cfg = WindowConfig(kind=kind, size=M, by=["g.k"], aggs=aggs, lateness=M)
    assert window_plain_run(cfg, str(path), True) == window_plain_run(cfg, str(path), False)


KEYS = ["a", "b", "c", "d", None, 7, 1, 1.0, True, "x,y", 'q"r', "é"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(evs=st.lists(st.fixed_dictionaries({"ts": ms, "k": st.sampled_from(KEYS), "v": values}), max_size=80),
       bound=st.integers(1, 5), piece=st.sampled_from([64, 200, 1 << 20]), lateness=st.sampled_from([0, M, 5 * M]),
       aggs=st.sampled_from(AGG_SETS), behind=st.lists(st.booleans(), min_size=1, max_size=6))
def test_sessions_by_key_ids_equal_records(tmp_path_factory, monkeypatch, evs, bound, piece, lateness, aggs, behind):
    """Sessions over a plain file, the group keys numbered where they are read (events.KeyIds) in id
    spaces of at most `bound` keys, so that batches cross id-space resets, and only for the batches
    read while the folder is `behind` (the others carry their keys' texts): the rows, counts and
    late records of the per-record reference. Keys Python calls equal (1, 1.0, True) stay apart."""
    from itertools import cycle

    from streamctl.processing import decoder
    from streamctl.processing.windows import events

    monkeypatch.setattr(events, "KEY_IDS", bound)
    monkeypatch.setattr(decoder, "PLAIN_PIECE", piece)
    pattern = cycle([events.BEHIND if b else 0 for b in behind])
    monkeypatch.setattr(decoder, "backlog", lambda: next(pattern))
    path = tmp_path_factory.mktemp("plain") / "in.jsonl"
    path.write_bytes(b"".join(orjson.dumps({"ts": e["ts"], "g": {"k": e["k"]}, "v": e["v"]}) + b"\n" for e in evs))
    cfg = WindowConfig(kind="session", size=M, by=["g.k"], aggs=aggs, lateness=lateness)
    assert window_plain_run(cfg, str(path), True) == window_plain_run(cfg, str(path), False)


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.lists(st.sampled_from(KEYS), min_size=1, max_size=12), max_size=8),
       bound=st.integers(1, 6))
def test_key_ids_give_each_key_its_text(batches, bound):
    """KeyIds (the reading side) and KeyNames (the folding side) give each event its key's text as
    EventColumns.keys writes it; within a space an id is one key; a space passes `bound` keys only
    in the batch that starts it (one batch alone may hold more)."""
    from streamctl.processing.windows.events import KeyIds, KeyNames, key_json_cached

    key_json = key_json_cached()
    ids, names = KeyIds(key_json, bound), KeyNames()
    seen: dict = {}
    for kv in batches:
        before = (names.space, 0 if names.names is None else len(names.names))
        space, raw, new = ids(kv)
        ks, a = names(space, raw, new)
        assert ks == [key_json(k) for k in kv]
        assert len(names.names) in (before[1], *range(bound + 1)) or space != before[0] or before[1] == 0
        for i, text in zip(a.tolist(), ks, strict=True):
            assert seen.setdefault((space, i), text) == text


def test_session_key_ids_are_used_and_their_spaces_reset(tmp_path, monkeypatch):
    """The id path really runs for sessions over a plain file, across id-space resets."""
    from streamctl.processing import decoder
    from streamctl.processing.windows import events, session_index

    monkeypatch.setattr(events, "KEY_IDS", 50)
    monkeypatch.setattr(decoder, "PLAIN_PIECE", 4096)
    monkeypatch.setattr(decoder, "can_fork", lambda: False)  # the reading side in this process, to look at
    monkeypatch.setattr(decoder, "backlog", lambda: events.BEHIND)  # as when the folder is the slower
    spaces: list = []
    by_id = session_index.SessionStore._group_ids_by_id

    def spy(self, ks, space, a):
        spaces.append(space)
        return by_id(self, ks, space, a)

    monkeypatch.setattr(session_index.SessionStore, "_group_ids_by_id", spy)
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(b'{"ts":%d,"g":{"k":"u%d"},"v":%d}\n' % (T0 + i * 1000, i % 400, i)
                              for i in range(20000)))
    cfg = WindowConfig(kind="session", size=M, by=["g.k"], aggs=["count", "avg:v"])
    assert window_plain_run(cfg, str(path), True) == window_plain_run(cfg, str(path), False)
    assert len(spaces) >= 10 and spaces[-1] >= 5 and spaces == sorted(spaces)


def test_plain_file_pieces_are_read_as_columns(tmp_path):
    """The column read really runs on an ordinary file (and not on a piece with a blank line)."""
    from streamctl.processing import columns, decoder

    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(b'{"ts":"2025-11-21T10:00:%02d.000Z","g":{"k":"a"},"v":%d}\n' % (i % 60, i)
                              for i in range(60000)) + b"\n" + b'{"ts":1,"g":{"k":"b"},"v":1}\n')
    fields = [("value", "ts"), ("value", "g", "k"), ("value", "v")]
    batches = list(decoder.plain_batches(str(path), fields))
    kinds = [type(b) for b in batches]
    assert kinds.count(columns.FieldBatch) == len(kinds) - 1 >= 2 and kinds[-1] is list
    assert all(b.base is not None for b in batches[:-1])
    assert sum(len(b) for b in decoder.plain_batches(str(path), fields)) == 60001


big_values = st.one_of(st.integers(-5, 5), st.floats(-10, 10, allow_nan=False), st.none(),
                       st.sampled_from([2**31, -(2**31), 2**31 + 1, 2**53 + 1, -(2**60), 0.5, -0.0, "x", True]))


@pytest.mark.parametrize("kind,hop", [("tumbling", 0), ("hopping", 20_000), ("session", 0)])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evs=st.lists(st.fixed_dictionaries({"ts": ms, "k": st.sampled_from(["a", "b", "c"]), "v": big_values}),
                    max_size=60),
       sizes=st.lists(st.integers(1, 9), max_size=12), cut_at=st.integers(0, 60), order=st.booleans())
def test_columnar_windows_equal_records(kind, hop, evs, sizes, cut_at, order):
    """Windows kept as columns (cells.py: count/sum/avg in arrays, the others as Python states) give
    Plan's rows and checkpoints exactly,
    ints past 2**31 included (they move that aggregation of their windows to Python states), across a
    checkpoint."""
    if order:
        evs = sorted(evs, key=lambda e: e["ts"])
    cfg = WindowConfig(kind=kind, size=M, hop=hop, by=["k"],
                       aggs=["count", "n=count:v", "sum:v", "avg:v", "first:v", "distinct:v", "max:v"])
    a, b = both(cfg, records(evs), sizes)
    assert a == b
    first = WindowRun(cfg, is_log=False)
    rows: list = []
    first.feed_batches(cut(records(evs)[:cut_at], sizes), rows.extend)
    saved = orjson.loads(orjson.dumps(first.dump()))
    second = WindowRun(cfg, is_log=False)
    second.load(saved)
    second.feed_batches(cut(records(evs)[cut_at:], sizes), rows.extend)
    second.finish(rows.extend)
    assert rows == a[0]


def test_columnar_windows_really_run():
    from streamctl.processing.windows import cells

    evs = [{"ts": T0 + i * 7_000, "k": "abc"[i % 3], "v": i} for i in range(50)]
    cfg = WindowConfig(kind="tumbling", size=10 * M, by=["k"], aggs=["count", "avg:v"])
    run = WindowRun(cfg, is_log=False)
    run.feed_batches(cut(records(evs), [7] * 10), lambda rows: None)
    assert run.op.columnar and all(isinstance(t, cells.Cells) for t in run.op.open.values()) and run.op.open
    run = WindowRun(cfg, is_log=False)
    run.feed_batches(cut(records(evs + [{"ts": T0, "k": "a", "v": 2**40}]), [7] * 10), lambda rows: None)
    # an int past 2**31: avg of the window holding it as exact Python states, that window only
    (held,) = [t for end, t in run.op.open.items() if end - 10 * M <= T0 < end]
    assert run.op.columnar and held.py == {1} and held.states()[b'"a"'][1][0] >= 2**40
    assert all(t.py == set() for t in run.op.open.values() if t is not held)
    run.feed_batches(cut(records([{"ts": T0 + 60 * M, "k": "a", "v": 1}]), [1]), lambda rows: None)
    assert all(isinstance(t, cells.Cells) and t.py == set() for t in run.op.open.values()) and run.op.open
    other = WindowRun(WindowConfig(kind="tumbling", size=10 * M, by=["k"], aggs=["p90:v", "count", "distinct:v"]),
                      is_log=False)
    other.feed_batches(cut(records(evs), [7] * 10), lambda rows: None)
    assert all(isinstance(t, cells.Cells) and t.py == {0, 2} for t in other.op.open.values()) and other.op.open
    session = WindowRun(WindowConfig(kind="session", size=M, by=["k"], aggs=["count", "avg:v"]), is_log=False)
    session.feed_batches(cut(records(evs), [7] * 10), lambda rows: None)
    store = session.op.store
    assert session.op.columnar and store.open_handles() and all(store.state[h] is None for h in store.open_handles())


def test_sessions_in_order_extend_the_latest_session_not_the_last_made():
    """A batch out of order can make a group's sessions in another order than their times; a later
    batch in time order must extend the session whose last event is latest."""
    evs = [{"ts": T0 + 1000, "k": "a", "v": 1}, {"ts": T0 + 100, "k": "a", "v": 2},  # out of order: two sessions
           {"ts": T0 + 1150, "k": "a", "v": 3}, {"ts": T0 + 1200, "k": "a", "v": 4}]  # in order: extend [1000..]
    cfg = WindowConfig(kind="session", size=300, by=["k"], aggs=["count", "min:v"], lateness=10 * M)
    a, b = both(cfg, records(evs), [2, 2])
    assert a == b
    assert [r[3]["count"] for r in a[0]] == [1, 3]


@pytest.mark.parametrize("kind,hop", [("tumbling", 0), ("hopping", 30_000), ("session", 0), ("sliding", 0)])
@pytest.mark.parametrize("sizes", [[3], [1, 2], [2, 1]])
@pytest.mark.parametrize("lateness", [0, 30_000])
def test_an_event_whose_window_ends_at_the_watermark_is_late(kind, hop, sizes, lateness):
    """The window [start, end) is closed once the watermark reaches end: an event for it then is
    late, in a batch as one by one (the edge the columns' comparisons must get right)."""
    evs = [{"ts": T0 + M + lateness, "k": "a", "v": 1}, {"ts": T0 + M // 2, "k": "a", "v": 2},
           {"ts": T0 + M + M // 2 + lateness, "k": "a", "v": 3}]
    cfg = WindowConfig(kind=kind, size=M, hop=hop, by=["k"], aggs=["count", "sum:v", "avg:v"], lateness=lateness)
    a, b = both(cfg, records(evs), sizes)
    assert a == b
    if kind in ("tumbling", "hopping"):
        assert a[1]["late"] == 1


@pytest.mark.parametrize("sizes", [[7], [2, 5], [3, 4], [1] * 7])
@pytest.mark.parametrize("lateness", [0, M, 5 * M])
def test_sessions_in_order_an_event_exactly_gap_after_the_last_extends(sizes, lateness):
    """In time order, an event exactly GAP after its group's last event joins the session; one
    GAP + 1 ms after starts a new one (the columnar in-order fold's comparison, at its edge: with
    a lateness, the session is still open when that event comes)."""
    g = M
    evs = [{"ts": T0, "k": "a", "v": 1}, {"ts": T0 + g, "k": "a", "v": 2}, {"ts": T0 + g, "k": "b", "v": 3},
           {"ts": T0 + 2 * g, "k": "a", "v": 4}, {"ts": T0 + 2 * g + 1, "k": "b", "v": 5},
           {"ts": T0 + 2 * g + 1, "k": "b", "v": 6}, {"ts": T0 + 10 * g, "k": "c", "v": 7}]
    cfg = WindowConfig(kind="session", size=g, by=["k"], aggs=["count", "sum:v"], lateness=lateness)
    a, b = both(cfg, records(evs), sizes)
    assert a == b
    got = sorted((orjson.loads(r[2]), r[0] - T0, r[3]["count"]) for r in a[0])
    assert got == [("a", 0, 3), ("b", g, 1), ("b", 2 * g + 1, 2), ("c", 10 * g, 1)]


@pytest.mark.parametrize("aggs", [["count", "avg:v"], ["count", "first:v", "max:v"]])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evs=events_strategy(bad=False), sizes=st.lists(st.integers(1, 9), max_size=12),
       lateness=st.sampled_from([0, M, 10 * M]), gap=st.sampled_from([30_000, 3 * M]),
       order=st.sampled_from(["sorted", "mostly sorted"]))
def test_sessions_in_order_batches_keep_the_rows_and_state_of_one_by_one(aggs, evs, sizes, lateness, gap, order):
    """Sessions folded a batch in time order at a time (arrays, with slot or Plan states), mixed with
    batches out of order: the rows and the checkpoint of one event at a time, after every batch; with
    the store compacted after every batch too."""
    from streamctl.processing.windows import session_index

    evs = sorted(evs, key=lambda e: e["ts"]) if order == "sorted" else sorted_runs(evs)
    for slack in (session_index.INDEX_SLACK, -(1 << 62)):  # the second: compacted at every watermark move
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(session_index, "INDEX_SLACK", slack)
            _sessions_batch_by_batch(evs, sizes, WindowConfig(kind="session", size=gap, by=["k"], aggs=aggs,
                                                                lateness=lateness))


def _sessions_batch_by_batch(evs: list[dict], sizes: list[int], cfg: WindowConfig) -> None:
    one, batched = WindowRun(cfg, is_log=False), WindowRun(cfg, is_log=False)
    rows_one: list = []
    rows_batched: list = []
    done = 0
    for part in cut(records(evs), sizes):
        one.feed_records(iter(part), rows_one.extend)
        batched.feed_batches([part], rows_batched.extend)
        done += len(part)
        assert rows_batched == rows_one
        assert orjson.dumps(batched.dump()) == orjson.dumps(one.dump()), done
    one.finish(rows_one.extend)
    batched.finish(rows_batched.extend)
    assert rows_batched == rows_one


@pytest.mark.parametrize("aggs", [["count", "avg:v"], ["count", "first:v", "max:v"]])
def test_sessions_in_order_batches_really_use_arrays(monkeypatch, aggs):
    """A batch in time order is assigned by the batch kernel (session_index.cluster), never one event at a time."""
    from streamctl.processing.windows import session_kernel

    def one_by_one(*_args):
        raise AssertionError("a batch in time order went one event at a time")

    monkeypatch.setattr(session_kernel, "fold_events", one_by_one)
    evs = [{"ts": T0 + i * 7_000, "k": "abcd"[i % 4], "v": i} for i in range(200)]
    evs += [{"ts": T0 + 200 * 7_000 + 5 * M + i * 61_000, "k": "a", "v": i} for i in range(20)]
    cfg = WindowConfig(kind="session", size=M, by=["k"], aggs=aggs)
    run = WindowRun(cfg, is_log=False)
    rows: list = []
    run.feed_batches(cut(records(evs), [9] * 30), rows.extend)
    assert len(run.op.store.gid) == 4
    assert run.op.declined_events == 0  # no event went alone through add() either
    run.finish(rows.extend)
    assert [r[3]["count"] for r in rows] == [50, 50, 50, 50] + [1] * 20


def test_a_late_correction_bridging_a_closed_and_an_open_session():
    """--late correct: a late event within GAP of a closed session and of an open one merges the two."""
    evs = [{"ts": T0, "k": "a", "v": 1}, {"ts": T0 + 19_000, "k": "a", "v": 2}, {"ts": T0 + 9_500, "k": "a", "v": 3}]
    cfg = WindowConfig(kind="session", size=10_000, by=["k"], aggs=["count", "sum:v"], late="correct")
    a, b = both(cfg, records(evs), [1, 1, 1])
    assert a == b and a[5] is None
    assert [(r[0], r[1], r[3], r[4]) for r in a[0]] == [
        (T0, T0 + 10_000, {"count": 1, "sum_v": 1}, None),
        (T0, T0 + 10_000, None, None),  # the closed session's row withdrawn
        (T0, T0 + 29_000, {"count": 3, "sum_v": 6}, 1)]


def test_sessions_go_back_to_slots_once_the_states_fit(monkeypatch):
    """An int past 2**31 moves the sum's states to exact Python states (cells.Slots.to_python); once
    the session holding it has closed, they go back to arrays (not for good), with the rows of the
    per-record path."""
    from streamctl.processing.windows import session

    monkeypatch.setattr(session, "RETRY_SLOTS", 2)
    evs = [{"ts": T0 + i * 7_000, "k": "abc"[i % 3], "v": 2**60 if i == 13 else i} for i in range(200)]
    cfg = WindowConfig(kind="session", size=30_000, by=["k"], aggs=["count", "sum:v"], lateness=10_000)
    evs[100:100] = [{"ts": T0 + 99 * 7_000 + 200_000, "k": "abc"[i % 3], "v": 1} for i in range(3)]  # a gap: all close
    run = WindowRun(cfg, is_log=False)
    seen = []
    for part in cut(records(evs), [5] * 41):
        run.feed_batches([part], lambda rows: None)
        seen.append(run.op.columnar and run.op.states.py == set())
    assert seen[0] and not any(seen[3:20]) and seen[-1]  # exact while the session holding 2**60 is open
    a, b = both(cfg, records(evs), [5] * 41)
    assert a == b


json_keys = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-20, 20), st.floats(-5, 5),
                                   st.text(alphabet='ab!" \\é\x01', max_size=4)),
                         lambda inner: st.lists(inner, max_size=3), max_leaves=4)


@settings(max_examples=300, deadline=None)
@given(st.lists(json_keys, max_size=12), st.booleans())
def test_key_order_is_the_group_key_rank(keys, strings_only):
    """key_order (strings without escapes sorted by their bytes, no key parsed) is sorted() by
    key_rank, the group-key order's definition; and key_rank orders strings by code point."""
    from streamctl.processing.eventfields import key_order, key_rank

    if strings_only:
        keys = [k for k in keys if isinstance(k, str)]
    texts = list(dict.fromkeys(orjson.dumps(k) for k in keys))
    assert key_order(texts) == sorted(texts, key=key_rank)
    strs = sorted({k for k in keys if isinstance(k, str)})
    assert key_order([orjson.dumps(s) for s in strs]) == [orjson.dumps(s) for s in strs]
