"""The follower's enrichment kernel reading its logs (joins/follow_inputs.py), in a forked reading
process or in its own, against the batch run's record path: followed in rounds of any size, with
a checkpoint and a restart between rounds, and Messages of any size, it writes the batch rows byte
for byte and counts the same records."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamctl.processing import decoder, inputorder
from streamctl.processing.joins import driver as joining
from streamctl.processing.joins import follow

from test_join import write_log

T0 = 1_763_719_200_000

keys = st.sampled_from(["a", "b", "7", "x,y", "\x01j", None])
values = st.one_of(st.none(), st.integers(0, 9), st.fixed_dictionaries(
    {"id": st.sampled_from(["a", "b", 7, 7.0, None, [1], "é\n\""]), "n": st.floats(allow_nan=False)}))


def reference(spec: joining.JoinSpec) -> tuple[bytes, joining.JoinStats]:
    out: list[bytes] = []
    stats = joining.run(spec, lambda k, lv, rv: out.append(orjson.dumps({"key": k, "left": lv, "right": rv}) + b"\n"))
    return b"".join(out), stats


def _no_emit(*_args: object) -> None:
    raise AssertionError("the kernel writes JSON lines")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(ev=st.lists(st.tuples(keys, values, st.integers(0, 30)), max_size=40),
       tb=st.lists(st.tuples(keys, values, st.integers(0, 30)), max_size=25),
       parts=st.sampled_from([(1, 1), (3, 1), (2, 3)]),
       on=st.sampled_from([None, "id", "key=id", "id=key", "n.0=key"]), how=st.sampled_from(["inner", "left"]),
       limits=st.lists(st.integers(1, 40), max_size=4), run=st.sampled_from([1, 2, 7, 32_768]),
       ahead=st.booleans(), piece=st.sampled_from([60, 200, 1 << 16]))
def test_followed_rounds_write_the_batch_rows(tmp_path_factory, monkeypatch, ev, tb, parts, on, how, limits, run,
                                              ahead, piece):
    """Partitions appended in event-time order (the table wins ties), tombstones by record key and by
    value path, numeric, list and escaped keys; blocks of a few records (`piece`) cut the merge
    rounds anywhere; each round stops after `limit` records or more, checkpoints, and a new follower
    resumes from the checkpoint, with what the last one's reader had read beyond read again."""
    d = tmp_path_factory.mktemp("follow")
    ev, tb = sorted(ev, key=lambda r: r[2]), sorted(tb, key=lambda r: r[2])
    left, right = str(d / "ev"), str(d / "tb")
    write_log(left, parts[0], [(k, v, T0 + t) for k, v, t in ev])
    write_log(right, parts[1], [(k, v, T0 + t) for k, v, t in tb])
    monkeypatch.setattr(inputorder, "PIECE", piece)
    spec = joining.make_spec(left, right, table=True, how=how, on=on)
    want, wstats = reference(spec)

    monkeypatch.setattr(decoder, "can_fork", lambda: ahead)
    monkeypatch.setattr(follow, "RUN", run)
    out: list[bytes] = []
    records = [0, 0]  # each follower counts its own run's records; together, the batch run's
    for limit in [*limits, 10**9]:
        f = follow.JoinFollower(spec, "g", _no_emit, _no_emit, None, None, out.append)
        try:
            assert f.kernel
            f.resume()
            while True:
                got = f.round(limit)
                if got == 0 or limit < 10**9:
                    break
            f.save()
            records = [a + b for a, b in zip(records, f.stats.records, strict=True)]
        finally:
            f.close()
    assert b"".join(out) == want
    assert records == wstats.records
