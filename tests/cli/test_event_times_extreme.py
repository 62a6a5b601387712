"""Event times at and beyond the ends of what ISO-8601 can write (years 1..9999).

An event time is usable only when it and every window bound it gives can be
written (timeparse.usable_range); any other is a bad time, counted and skipped
or failing the run with --on-bad-time, on every path that reads times: the
per-record path, the column path (plain files and logs), --follow and Spark.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import orjson
import pytest

from streamctl import timeparse
from streamctl.processing.windows import NO_WATERMARK
from streamctl.processing.windows.config import WindowConfig
from streamctl.processing.windows.driver import WindowRun
from streamctl.processing.windows.events import records_of, time_getter
from streamctl.processing.windows.output import row_json
from streamctl.timeparse import MAX_MS, MIN_MS, event_time_ms, format_iso, parse_iso, usable_range
from tests.conftest import run_cli

T0 = 1_763_719_200_000
DAY = 86_400_000

KINDS = {
    "tumbling": (["--tumbling", "1h"], WindowConfig("tumbling", 3_600_000)),
    "hopping": (["--hopping", "1d/7h"], WindowConfig("hopping", DAY, hop=7 * 3_600_000)),
    "sliding": (["--sliding", "10m"], WindowConfig("sliding", 600_000)),
    "session": (["--session", "30m"], WindowConfig("session", 1_800_000)),
}

# values of a time field that no window can use, whatever its kind (a log's records are JSON:
# orjson refuses NaN and infinities before any time is read)
NEVER = [1e19, -1e19, 1e300, 99999999999999999999, -99999999999999999999, "99999999999999999999",
         "10000-01-01T00:00:00Z", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "later", None]
# usable or not depending on the window: the first and the last instants that can be written
EDGES = ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999Z"]
# what a log can hold (produce refuses integers beyond 64 bits)
LOG_NEVER = [v for v in NEVER if not (type(v) is int and abs(v) >= 1 << 63)] + [9_000_000_000_000_000_000]
GOOD = [T0, T0 + 1000, "2025-11-21T10:00:05Z", T0 // 1000 + 7]


def lines(values: list) -> str:
    return "".join(json.dumps({"at": v, "u": f"u{i % 2}"}) + "\n" for i, v in enumerate(values))


def usable(cfg: WindowConfig, value) -> bool:
    t = event_time_ms(value)
    lo, hi = usable_range(cfg.kind, cfg.size, cfg.hop)
    return t is not None and lo <= t <= hi


# -- the rule ---------------------------------------------------------------------

def test_printable_range_and_padded_years():
    assert format_iso(MIN_MS) == "0001-01-01T00:00:00.000Z"
    assert format_iso(MAX_MS) == "9999-12-31T23:59:59.999Z"
    year_37 = (datetime(37, 1, 19, 8, 53, 20, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
    assert format_iso(year_37) == "0037-01-19T08:53:20.000Z"  # 4 digits, as ISO-8601 writes a year
    for ms in (MIN_MS, MAX_MS, year_37):
        assert parse_iso(format_iso(ms)) == ms
    for ms in (MIN_MS - 1, MAX_MS + 1, 10**30, -(10**30)):
        with pytest.raises(ValueError, match="outside years 1..9999"):
            format_iso(ms)


@pytest.mark.parametrize("value", [1e19, -1e19, 1e300, 10**20, -(10**20), "99999999999999999999",
                                   "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_event_time_outside_years_1_to_9999_is_no_time(value):
    assert event_time_ms(value) is None


def test_event_time_at_the_ends_is_a_time():
    assert event_time_ms("0001-01-01T00:00:00Z") == MIN_MS
    assert event_time_ms("9999-12-31T23:59:59.999Z") == MAX_MS
    assert event_time_ms(MAX_MS * 1000) == MAX_MS  # epoch us, read by magnitude
    assert event_time_ms(MIN_MS * 1000) == MIN_MS


def single_event_rows(cfg: WindowConfig, t: int) -> tuple[list, int]:
    """The rows of a run over one event at t (given as epoch us, which reads any t exactly)."""
    run = WindowRun(cfg, False)
    rows: list = []
    run.feed_records([{"offset": 0, "partition": 0, "key": "k", "value": {"at": t * 1000}}], rows.extend)
    run.finish(rows.extend)
    return rows, run.stats.bad_time


def window_bounds(cfg: WindowConfig, t: int) -> tuple[int, int]:
    """The earliest start and the latest end of the windows the operator gives one event at t."""
    run = WindowRun(cfg, False)
    out: list = []
    run.op.add(b'"k"', t, 0, run.plan.extract({"value": {}}), NO_WATERMARK, out)
    run.op.flush(out)
    return min(r[0] for r in out), max(r[1] for r in out)


@pytest.mark.parametrize("cfg", [
    WindowConfig("tumbling", 60_000), WindowConfig("tumbling", 7 * DAY), WindowConfig("tumbling", 1),
    WindowConfig("hopping", 600_000, hop=60_000), WindowConfig("hopping", DAY, hop=7 * 3_600_000),
    WindowConfig("hopping", 1000, hop=1000), WindowConfig("sliding", 3_600_000), WindowConfig("session", 1_800_000),
], ids=lambda c: f"{c.kind}-{c.size}-{c.hop}")
def test_usable_range_is_exactly_the_times_whose_windows_can_be_written(cfg):
    lo, hi = usable_range(cfg.kind, cfg.size, cfg.hop)
    cfg.time_field = "value.at"
    for t in (lo, lo + 1, hi - 1, hi):
        rows, bad = single_event_rows(cfg, t)
        assert bad == 0 and rows, t
        for start, end, *_ in rows:
            assert MIN_MS <= start < end <= MAX_MS
            format_iso(start), format_iso(end)
    # the rule is tight: one ms outside it, the operator would give a window starting before year 1
    # or ending after 9999
    assert window_bounds(cfg, lo - 1)[0] < MIN_MS
    assert window_bounds(cfg, hi + 1)[1] > MAX_MS
    assert MIN_MS <= window_bounds(cfg, lo)[0] and window_bounds(cfg, hi)[1] <= MAX_MS
    for t in (lo - 1, hi + 1):
        rows, bad = single_event_rows(cfg, t)
        assert bad == 1 and rows == [], t


def test_windows_longer_than_the_calendar_are_refused():
    lo, hi = usable_range("tumbling", 10_000 * 366 * DAY)
    assert lo > hi
    for args in (["--tumbling", f"{10_000 * 366}d"], ["--hopping", f"{10_000 * 366}d/1d"],
                 ["--sliding", f"{10_000 * 366}d"], ["--session", f"{10_000 * 366}d"]):
        p = run_cli("window", "-", *args, "--time-field", "at", input=lines([T0]))
        assert p.returncode == 2 and b"too long" in p.stderr and b"Traceback" not in p.stderr
        assert p.stdout == b""


# -- the CLI, every kind ------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_plain_file_skip_counts_every_bad_time(tmp_path, kind):
    args, cfg = KINDS[kind]
    cfg.time_field = "at"
    values = [EDGES[0], *GOOD[:2], *NEVER, *GOOD[2:], EDGES[1]]  # in time order: nothing is late
    f = tmp_path / "e.jsonl"
    f.write_text(lines(values))
    p = run_cli("window", str(f), *args, "--time-field", "at")
    assert p.returncode == 0, p.stderr
    assert b"Traceback" not in p.stderr
    bad = sum(not usable(cfg, v) for v in values)
    assert bad >= len(NEVER)
    assert f"{bad} record(s) without a usable time in 'at' skipped".encode() in p.stderr
    rows = [orjson.loads(x) for x in p.stdout.splitlines()]
    for r in rows:
        assert parse_iso(r["window"]["start"]) < parse_iso(r["window"]["end"])
    counted = {"sliding": len(rows)}.get(kind, sum(r["count"] for r in rows))
    per_event = {"hopping": 24 // 7 + 1}.get(kind, 1)  # 1d/7h: 3 or 4 windows per event
    if kind == "hopping":
        assert len(values) - bad <= counted <= (len(values) - bad) * per_event
    else:
        assert counted == len(values) - bad


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", [1e19, "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", -1e19])
def test_fail_exits_65_naming_record_and_reason(tmp_path, kind, value):
    args, cfg = KINDS[kind]
    cfg.time_field = "at"
    f = tmp_path / "e.jsonl"
    f.write_text(lines([T0, value, T0 + 5]))
    p = run_cli("window", str(f), *args, "--time-field", "at", "--on-bad-time", "fail")
    if usable(cfg, value):  # year 1 or 9999 fits some windows (sliding at the end, session at the start)
        assert p.returncode == 0, p.stderr
        return
    assert p.returncode == 65, p.stderr
    err = p.stderr.decode()
    assert err.startswith("streamctl: ") and "Traceback" not in err
    assert f"{f}:2: no usable time in 'at'" in err  # FILE:LINE, from 1, as other messages name a line
    assert "outside" in err  # the reason: the years, or the range the windows need


def test_a_bad_time_is_named_by_file_and_line_or_by_partition_and_offset(tmp_path):
    """A plain file's record is named FILE:LINE (lines from 1, blank ones counted, as a JSON error
    names them); stdin's <stdin>:LINE; a log's record by partition and offset."""
    f = tmp_path / "b.jsonl"
    f.write_text('{"t":1}\n\n{"t":"bad"}\n')
    args = ("--tumbling", "1m", "--time-field", "t")
    p = run_cli("window", str(f), *args, "--on-bad-time", "fail")
    assert p.returncode == 65 and f"streamctl: {f}:3: no usable time in 't': 'bad'".encode() in p.stderr, p.stderr
    p = run_cli("window", "-", *args, input=f.read_bytes())
    assert p.returncode == 0 and b"(first: <stdin>:3: no usable time in 't'" in p.stderr, p.stderr
    log = str(tmp_path / "log")
    run_cli("produce", log, input='{"t":1}\n{"t":"bad"}\n', check=True)
    p = run_cli("window", log, *args, "--on-bad-time", "fail")
    assert p.returncode == 65 and f"streamctl: {log}: partition 0 offset 1: no usable time".encode() in p.stderr


def test_reasons_name_what_is_wrong():
    cfg = WindowConfig("tumbling", 60_000, time_field="at")
    lo, hi = usable_range("tumbling", 60_000)
    assert "outside years 1..9999" in timeparse.bad_time_reason(1e19, lo, hi)
    assert "not a time" in timeparse.bad_time_reason("soon", lo, hi)
    assert "missing" in timeparse.bad_time_reason(None, lo, hi)
    assert "9999-12-31T23:58:59.999Z" in timeparse.bad_time_reason("9999-12-31T23:59:59Z", lo, hi)
    assert "outside years" in timeparse.bad_time_reason(MAX_MS + 1, epoch_ms=True)
    assert time_getter(cfg, False)({"value": {"at": "9999-12-31T23:59:59Z"}}) is None
    assert time_getter(cfg, False)({"value": {"at": "9999-12-31T23:58:59Z"}}) == MAX_MS - 60_999


# -- logs: the column paths, and the same counts record by record ----------------------

@pytest.fixture(scope="module")
def extreme_log(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("extreme") / "log")
    values = [*GOOD, *LOG_NEVER, *EDGES] * 3
    run_cli("produce", path, "--partitions", "2", "--key-field", "u", input=lines(values), check=True)
    return path


def counts(path: str, cfg: WindowConfig, batches: bool) -> tuple[list[bytes], int, int]:
    is_log, recs = records_of(path, cfg)
    run = WindowRun(cfg, is_log)
    rows: list = []
    if batches:
        run.feed(recs, rows.extend)
    else:
        run.feed_records(iter(recs), rows.extend)
    run.finish(rows.extend)
    return [row_json(r) for r in rows], run.stats.events, run.stats.bad_time


@pytest.mark.parametrize("kind", KINDS)
def test_log_batches_and_records_agree(extreme_log, kind, tmp_path):
    _, cfg = KINDS[kind]
    cfg.time_field = "value.at"
    by_batch = counts(extreme_log, cfg, True)
    by_record = counts(extreme_log, cfg, False)
    assert by_batch == by_record
    values = [*GOOD, *LOG_NEVER, *EDGES] * 3
    assert by_batch[2] == sum(not usable(cfg, v) for v in values)
    assert by_batch[1] + by_batch[2] == len(values)
    # and a plain file of the same values gives the same counts
    f = tmp_path / "same.jsonl"
    f.write_text(lines(values))
    plain = counts(str(f), WindowConfig(cfg.kind, cfg.size, cfg.hop, time_field="at"), True)
    assert plain[1:] == by_batch[1:]


def test_append_time_out_of_range_is_a_bad_time(tmp_path):
    """A log whose stored ts lies past year 9999 (written by hand, or by a broken clock)."""
    log = str(tmp_path / "log")
    run_cli("produce", log, input=lines([1, 2, 3]), check=True)
    seg = tmp_path / "log" / "p0" / "00000000000000000000.jsonl"
    recs = [json.loads(x) for x in seg.read_text().splitlines()]
    recs[1]["ts"] = MAX_MS + 1
    recs[2]["ts"] = MAX_MS + 2
    seg.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in recs))
    p = run_cli("window", log, "--tumbling", "1m")
    assert p.returncode == 0 and b"2 record(s) without a usable time in 'ts' skipped" in p.stderr, p.stderr
    assert sum(orjson.loads(x)["count"] for x in p.stdout.splitlines()) == 1
    p = run_cli("window", log, "--tumbling", "1m", "--on-bad-time", "fail")
    assert p.returncode == 65 and b"partition 0 offset 1" in p.stderr and b"Traceback" not in p.stderr


# -- follow: a group gets past an extreme time, and a restart does not meet it again -----

@pytest.mark.parametrize("kind", KINDS)
def test_follow_group_gets_past_extreme_times(tmp_path, kind):
    args, _ = KINDS[kind]
    log = str(tmp_path / "log")
    run_cli("produce", log, "--partitions", "2", "--key-field", "u",
            input=lines([T0, 1e19, T0 + 1000, "9999-12-31T23:59:59.999Z", -1e19, T0 + 2000]), check=True)
    follow = ["window", log, *args, "--time-field", "at", "--follow", "--group", "g", "--idle-timeout", "1s"]
    # fail: stops at the first bad time with 65, naming where it is; again on every rerun
    for _ in range(2):
        p = run_cli(*follow, "--on-bad-time", "fail")
        assert p.returncode == 65, p.stderr
        assert b"partition " in p.stderr and b" offset " in p.stderr and b"Traceback" not in p.stderr
    # skip: counted and passed; the checkpoint is past them, so a restart reads nothing again
    p = run_cli(*follow)
    assert p.returncode == 0, p.stderr
    bad = 3 if kind != "sliding" else 2  # year 9999's last instant is a sliding row's end, no other window's
    assert f"{bad} record(s) without a usable time in 'at' skipped".encode() in p.stderr
    ck = os.path.join(log, "groups", ".g.window.json")
    assert orjson.loads(open(ck, "rb").read())["run"]["stats"]["events"] == 6 - bad
    run_cli("produce", log, "--key-field", "u", input=lines([T0 + 3000, 1e300]), check=True)
    p = run_cli(*follow, "--on-bad-time", "fail")
    assert p.returncode == 65 and b"1e+300" in p.stderr  # the new one; the old ones are behind the checkpoint
    p = run_cli(*follow)  # a run reports what it read itself; the checkpoint keeps the total
    assert p.returncode == 0, p.stderr
    assert b"1 record(s) without a usable time in 'at' skipped" in p.stderr and b"1e+300" in p.stderr
    assert orjson.loads(open(ck, "rb").read())["run"]["stats"]["bad_time"] == bad + 1
    p = run_cli(*follow)  # nothing new: nothing to report, nothing fails
    assert p.returncode == 0, p.stderr
    assert b"without a usable time" not in p.stderr


# -- Spark: the same counts -----------------------------------------------------------

@pytest.mark.spark
def test_spark_counts_the_same_bad_times(spark, extreme_log, tmp_path):
    from streamctl.spark.window_run import spark_job

    values = [*GOOD, *LOG_NEVER, *EDGES] * 3
    f = tmp_path / "e.jsonl"
    f.write_text(lines(values))
    for kind, (_, cfg) in KINDS.items():
        for path, field in ((extreme_log, "value.at"), (str(f), "at")):
            cfg.time_field = field
            rows, events, bad = counts(path, cfg, True)
            ns: dict = {"__name__": "streamctl_window_test_job"}
            exec(compile(spark_job(path, cfg).text(None, stats_line=True), "job.py", "exec"), ns)
            out: list[str] = []
            ns["main"](spark, ns["PARAMS"], out.append)
            stats = json.loads(out.pop().removeprefix("#streamctl-stats "))
            assert (stats["events"], stats["bad_time"]) == (events, bad), (kind, path)
            assert len(out) == len(rows), (kind, path)


def test_int_times_column_with_out_of_range_ones(tmp_path):
    """All-integer time columns take the fast column path; the range still holds there."""
    log = str(tmp_path / "log")
    values = [T0 + i * 1000 for i in range(50)]
    values[10], values[30] = 9_000_000_000_000_000_000, -9_000_000_000_000_000_000
    values[40] = MAX_MS * 1000  # year 9999's last ms, as epoch us: no 1h window ends by then
    run_cli("produce", log, input=lines(values), check=True)
    for field in ("value.at", "at"):
        cfg = WindowConfig("tumbling", 3_600_000, time_field=field)
        assert counts(log, cfg, True) == counts(log, cfg, False)
        assert counts(log, cfg, True)[1:] == (47, 3)
