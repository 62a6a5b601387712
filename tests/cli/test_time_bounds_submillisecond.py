"""A time bound with digits below the millisecond (`--from`, `--until`, `--to-datetime`): ts are
whole milliseconds, so `ts >= T` and `ts < T` hold exactly when they hold for T rounded up."""

from __future__ import annotations

import json

from conftest import run_cli


def one_record_log(logdir: str) -> str:
    """A log of one record; its append time as ISO-8601 with milliseconds."""
    run_cli("produce", logdir, input='{"a":1}\n', check=True)
    return run_cli("consume", logdir, "--format", "%d", "--max", "1", check=True).stdout.decode()


def test_consume_and_replay_bounds_round_up(logdir):
    t = one_record_log(logdir)
    assert t.endswith("Z") and len(t) == 24  # 2026-11-21T10:00:00.123Z
    later = t[:-1] + "5Z"  # half a millisecond after the record
    same = t[:-1] + "000Z"  # the record's own time, written with microseconds
    for cmd in ("consume", "replay"):
        assert run_cli(cmd, logdir, "--from", later, check=True).stdout == b""
        assert len(run_cli(cmd, logdir, "--until", later, check=True).stdout.splitlines()) == 1
        for exact in (t, same):
            assert len(run_cli(cmd, logdir, "--from", exact, check=True).stdout.splitlines()) == 1
            assert run_cli(cmd, logdir, "--until", exact, check=True).stdout == b""


def test_to_datetime_rounds_up(logdir):
    t = one_record_log(logdir)
    plan = run_cli("replay", logdir, "--group", "g", "--to-datetime", t[:-1] + "5Z", "--export", "-", check=True)
    assert plan.stdout == b"0,1\n"  # past the record: it is before the time
    plan = run_cli("replay", logdir, "--group", "g", "--to-datetime", t, "--export", "-", check=True)
    assert plan.stdout == b"0,0\n"


def test_event_times_keep_their_millisecond(tmp_path):
    """An event time is no bound: its digits below the millisecond are dropped, which puts it in
    the window its own instant lies in (window bounds are whole milliseconds)."""
    events = tmp_path / "events.jsonl"
    events.write_text('{"ts": "2026-11-21T10:00:59.9999Z", "k": "a"}\n')
    out = run_cli("window", str(events), "--tumbling", "1m", "--by", "k", check=True).stdout
    row = json.loads(out.splitlines()[0])
    assert row["window"] == {"start": "2026-11-21T10:00:00.000Z", "end": "2026-11-21T10:01:00.000Z"}
