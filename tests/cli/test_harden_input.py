"""Hostile numbers on every command, damaged metadata and checkpoints, a corrupt log under window and join.

In-process (commands.main.main with the output captured) where only the CLI's parsing and loading are
the point: one process per case would cost ~0.3 s each. Every stderr written here is kept, and the last
test greps all of it for a traceback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import run_cli
from streamctl.commands import numbers
from streamctl.commands.main import main

STDERR: list[str] = []  # everything the commands below wrote to stderr (the last test greps it)
BIG = "99999999999999999999"  # 2**66-ish: past every int64
HUGE = "9" * 400  # float() makes it inf
MAXD = numbers.format_duration(numbers.MAX_DURATION_MS)


@pytest.fixture(scope="module", autouse=True)
def one_app():
    """main() builds the typer app and its click command on every call (~20 ms): build them once."""
    import typer.main

    from streamctl.commands import main as mainmod

    app = mainmod.build_app()
    original = typer.main.get_command
    cmd = original(app)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mainmod, "build_app", lambda: app)
        mp.setattr(typer.main, "get_command", lambda a: cmd if a is app else original(a))
        yield


def cli(capfd, *args: str) -> tuple[int, str, str]:
    """streamctl ARGS in this process: (exit code, stdout, stderr)."""
    code = main([*args])
    out, err = capfd.readouterr()
    STDERR.append(err)
    return code, out, err


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.fixture(scope="module")
def one_record(tmp_path_factory) -> Path:
    """A log of one record (value 1), copied by the tests that damage it."""
    log = tmp_path_factory.mktemp("one") / "log"
    run_cli("produce", str(log), input="1\n", check=True)
    return log


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A log of 3 records in 2 partitions and a plain file, made once for the module."""
    d = tmp_path_factory.mktemp("harden")
    lines = "".join(json.dumps({"k": f"u{i % 2}", "x": i}) + "\n" for i in range(3))
    run_cli("produce", str(d / "L"), "--partitions", "2", "--key-field", "k", input=lines, check=True)
    (d / "plain.jsonl").write_text(lines)
    return d


# -- every number on every command ------------------------------------------------------------

# (args, the flag the message must name); LOG is the module's log, NEW a path that must stay absent
HOSTILE = [
    (["produce", "NEW", "--max-record-bytes", "inf"], "--max-record-bytes"),
    (["produce", "NEW", "--max-record-bytes", "nan"], "--max-record-bytes"),
    (["produce", "NEW", "--max-record-bytes", "0"], "--max-record-bytes"),
    (["produce", "NEW", "--segment-bytes", "1e400"], "--segment-bytes"),
    (["produce", "NEW", "--segment-bytes", "99999999999999999999999"], "--segment-bytes"),
    (["produce", "NEW", "--segment-bytes", "9223372036854775808"], "--segment-bytes"),
    (["produce", "NEW", "--segment-bytes", "1e999999999KiB"], "--segment-bytes"),
    (["produce", "NEW", "--segment-bytes", "1023"], "--segment-bytes"),
    (["produce", "NEW", "--segment-bytes", "-1"], "--segment-bytes"),
    (["produce", "NEW", "--partitions", BIG], "--partitions"),
    (["produce", "NEW", "--partitions", "0"], "--partitions"),
    (["produce", "NEW", "--partitions", "10001"], "--partitions"),
    (["produce", "NEW", "--partition", BIG], "--partition"),
    (["produce", "NEW", "--partition", "-1"], "--partition"),
    (["produce", "NEW", "--lock-timeout", BIG + "d"], "--lock-timeout"),
    (["produce", "NEW", "--lock-timeout", HUGE + "ms"], "--lock-timeout"),
    (["consume", "LOG", "--max", BIG], "--max"),
    (["consume", "LOG", "--max", "-1"], "--max"),
    (["consume", "LOG", "--partition", BIG], "--partition"),
    (["consume", "LOG", "--partition", "10000"], "--partition"),
    (["consume", "LOG", "--follow", "--idle-timeout", BIG + "d"], "--idle-timeout"),
    (["consume", "LOG", "-g", "g", "--exec", "cat", "--batch", BIG], "--batch"),
    (["consume", "LOG", "-g", "g", "--exec", "cat", "--batch", "0"], "--batch"),
    (["consume", "LOG", "-g", "g", "--exec", "cat", "--batch-timeout", "P99999999999D"], "--batch-timeout"),
    (["consume", "LOG", "-g", "g", "--exec", "cat", "--retries", BIG], "--retries"),
    (["consume", "LOG", "-g", "g", "--exec", "cat", "--retries", "1", "--retry-backoff", HUGE + "h"], "--retry-backoff"),
    (["consume", "LOG", "--from", BIG], "--from"),
    (["consume", "LOG", "--from", "-" + BIG], "--from"),
    (["consume", "LOG", "--from", "@" + BIG + "000"], "--from"),
    (["consume", "LOG", "--from", "-" + BIG + "d"], "--from"),
    (["consume", "LOG", "--from", "-" + MAXD], "--from"),  # a duration in range, but now - it is before year 1
    (["consume", "LOG", "--until", BIG], "--until"),
    (["consume", "LOG", "--until", "@-" + BIG], "--until"),
    (["tail", "LOG", "-n", BIG], "-n"),
    (["tail", "LOG", "-n", "-1"], "-n"),
    (["tail", "LOG", "--partition", BIG], "--partition"),
    (["stat", "LOG", "--fail-lag", BIG], "--fail-lag"),
    (["stat", "LOG", "--fail-lag-age", BIG + "d"], "--fail-lag-age"),
    (["check", "LOG"], None),  # no number: exit 0 (keeps the list honest about which commands take one)
    (["compact", "LOG", "--retention-bytes", "inf"], "--retention-bytes"),
    (["compact", "LOG", "--retention-bytes", "1e400"], "--retention-bytes"),
    (["compact", "LOG", "--retention-time", BIG + "d"], "--retention-time"),
    (["compact", "LOG", "--tombstone-retention", HUGE + "s"], "--tombstone-retention"),
    (["compact", "LOG", "--min-lag", "P99999999999D"], "--min-lag"),
    (["replay", "LOG", "-g", "g", "--to-offset", BIG], "--to-offset"),
    (["replay", "LOG", "-g", "g", "--to-offset", "-1"], "--to-offset"),
    (["replay", "LOG", "-g", "g", "--shift-by", BIG], "--shift-by"),
    (["replay", "LOG", "-g", "g", "--shift-by", "-" + BIG], "--shift-by"),
    (["replay", "LOG", "-g", "g", "--by-duration", BIG + "d"], "--by-duration"),
    (["replay", "LOG", "-g", "g", "--to-datetime", "@" + BIG + "000"], "--to-datetime"),
    (["replay", "LOG", "-g", "g", "--to-earliest", "--partition", BIG], "--partition"),
    (["replay", "LOG", "--from", BIG], "--from"),
    (["replay", "LOG", "--until", "@" + BIG + "000"], "--until"),
    (["replay", "LOG", "--spark-threshold", "inf"], "--spark-threshold"),
    (["window", "LOG", "--tumbling", "99999999999999999999999d"], "--tumbling"),
    (["window", "LOG", "--tumbling", HUGE + "d"], "--tumbling"),
    (["window", "LOG", "--tumbling", "3000000d"], "--tumbling"),  # a valid duration, windows past year 9999
    (["window", "LOG", "--tumbling", "0s"], "--tumbling"),
    (["window", "LOG", "--session", "P99999999999D"], "--session"),
    (["window", "LOG", "--sliding", "9999999999999999h"], "--sliding"),
    (["window", "LOG", "--hopping", HUGE + "d/1m"], "--hopping"),
    (["window", "LOG", "--hopping", "3000000d/1d"], "--hopping"),
    (["window", "LOG", "--hopping", "1h/" + BIG + "d"], "--hopping"),
    (["window", "LOG", "--tumbling", "1m", "--lateness", BIG + "d"], "--lateness"),
    (["window", "LOG", "--tumbling", "1m", "--follow", "--idle-timeout", BIG + "d"], "--idle-timeout"),
    (["window", "LOG", "--tumbling", "1m", "--spark-threshold", "1e400"], "--spark-threshold"),
    (["window", "PLAIN", "--tumbling", BIG + "d"], "--tumbling"),
    (["join", "LOG", "LOG", "--within", BIG + "d"], "--within"),
    (["join", "LOG", "LOG", "--within", "1m", "--lateness", HUGE + "m"], "--lateness"),
    (["join", "LOG", "LOG", "--table", "--as-of", "event-time", "--table-retention", BIG + "d"], "--table-retention"),
    (["join", "LOG", "LOG", "--within", "1m", "--spark-threshold", "inf"], "--spark-threshold"),
]


@pytest.mark.parametrize("args,flag", HOSTILE, ids=[" ".join(a) for a, _f in HOSTILE])
def test_hostile_numbers_exit_2_naming_the_flag_and_create_nothing(made, tmp_path, capfd, args, flag):
    new = tmp_path / "new-log"
    subst = {"LOG": str(made / "L"), "NEW": str(new), "PLAIN": str(made / "plain.jsonl")}
    before = tree(made)
    code, out, err = cli(capfd, *(subst.get(a, a) for a in args))
    if flag is None:
        assert code == 0, err
        return
    assert code == 2, err
    assert flag in err and "Traceback" not in err, err
    # the allowed range (or, for a malformed value, the accepted forms) is in the message
    assert re.search(r"from \S+ to \S+|1ms to \S+|at most \d+|use bytes|must be positive", err), err
    assert out == ""
    assert not new.exists() and tree(made) == before, "a refused number left something behind"


@pytest.mark.parametrize("args", [
    ["tail", "LOG", "-n", str(numbers.MAX_INT)],
    ["consume", "LOG", "--max", str(numbers.MAX_INT), "--from", f"-{numbers.MAX_INT}"],
    ["consume", "LOG", "--until", "@253402300799999"],
    ["stat", "LOG", "--fail-lag-age", MAXD],
    ["compact", "LOG", "--dry-run", "--retention-bytes", str(numbers.MAX_SIZE), "--min-lag", MAXD],
    ["window", "LOG", "--tumbling", numbers.format_duration(253_402_300_799_999)],  # the longest that fits
    ["window", "LOG", "--session", "1m", "--lateness", MAXD],
])
def test_the_largest_values_in_range_are_taken(made, capfd, args):
    code, _out, err = cli(capfd, *(str(made / "L") if a == "LOG" else a for a in args))
    assert code == 0, err


def test_a_log_made_with_the_largest_segment_size_opens(tmp_path, capfd):
    log = str(tmp_path / "big")
    assert run_cli("produce", log, "--segment-bytes", str(numbers.MAX_SIZE), input="1\n").returncode == 0
    code, out, err = cli(capfd, "consume", log)
    assert code == 0 and '"value":1' in out, err


def test_number_parsers_only_raise_usage_errors():
    from streamctl.errors import UsageError

    for text in ["inf", "-inf", "nan", "1e400", HUGE, "1e999999999KiB", "", " ", "KiB", "1.5.2", "0x10", "--1"]:
        with pytest.raises(UsageError):
            numbers.parse_size(text, "--s", 1)
    for text in [HUGE + "d", "P" + HUGE + "D", "PT" + HUGE + "S", BIG + "w", "1e400s"]:
        with pytest.raises(UsageError):
            numbers.parse_duration(text, "--d")
    assert numbers.parse_size("1.5KiB", "--s") == 1536 and numbers.parse_duration("0", "--d") == 0
    for ms in (0, 1, 999, 61_000, 90_061_001, numbers.MAX_DURATION_MS):
        assert numbers.parse_duration(numbers.format_duration(ms), "--d") == ms


def test_bounds_agree_with_timeparse():
    from streamctl import timeparse
    from streamctl.processing import checkpoint
    from streamctl.storage import log

    assert numbers.MAX_DURATION_MS == timeparse.MAX_DURATION_MS == timeparse.MAX_MS - timeparse.MIN_MS
    assert (numbers.MIN_MS, numbers.MAX_MS) == (timeparse.MIN_MS, timeparse.MAX_MS)
    assert (checkpoint.MIN_MS, checkpoint.MAX_MS) == (timeparse.MIN_MS, timeparse.MAX_MS)
    assert log.META_SCHEMA["created"][2:4] == (timeparse.MIN_MS, timeparse.MAX_MS)
    assert log.MAX_SEGMENT_BYTES == numbers.MAX_SIZE


# -- damaged streamctl.json --------------------------------------------------------------------

META_DAMAGE = [
    ({"created": "yesterday"}, "created"),
    ({"created": [1]}, "created"),
    ({"created": None}, "created"),
    ({"partitions": "3"}, "partitions"),
    ({"partitions": 0}, "partitions"),
    ({"partitions": True}, "partitions"),
    ({"segment_bytes": 1.5e6}, "segment_bytes"),
    ({"segment_bytes": {"a": 1}}, "segment_bytes"),
    ({"partitions": None, "drop": "partitions"}, "partitions"),
]
META_COMMANDS = [["consume", "LOG"], ["tail", "LOG"], ["stat", "LOG"], ["check", "LOG"], ["compact", "LOG"],
                 ["produce", "LOG"], ["replay", "LOG"], ["replay", "LOG", "-g", "g", "--to-earliest"],
                 ["window", "LOG", "--tumbling", "1m"], ["join", "LOG", "LOG", "--within", "1m"]]


@pytest.mark.parametrize("change,field", META_DAMAGE, ids=[f"{f}={c.get(f)!r}" for c, f in META_DAMAGE])
def test_damaged_metadata_names_the_file_and_the_field(one_record, tmp_path, capfd, change, field):
    log = tmp_path / "log"
    shutil.copytree(one_record, log)
    meta = log / "streamctl.json"
    obj = json.loads(meta.read_text())
    if "drop" in change:
        del obj[change["drop"]]
    else:
        obj.update(change)
    meta.write_text(json.dumps(obj))
    for args in META_COMMANDS:
        code, _out, err = cli(capfd, *(str(log) if a == "LOG" else a for a in args))
        assert code == 1, (args, err)
        assert str(meta) in err and f"'{field}'" in err and "Traceback" not in err, (args, err)


@pytest.mark.parametrize("text", ["[1]", "null", '"x"', "{", ""])
def test_metadata_that_is_no_object(one_record, tmp_path, capfd, text):
    log = tmp_path / "log"
    shutil.copytree(one_record, log)
    (log / "streamctl.json").write_text(text)
    code, _out, err = cli(capfd, "stat", str(log))
    assert code == 1 and str(log / "streamctl.json") in err, err


# -- damaged window checkpoints ------------------------------------------------------------------

AGGS = ["--agg", "count", "--agg", "avg:value.x", "--agg", "distinct:value.x", "--agg", "first:value.x",
        "--agg", "p50:value.x", "--agg", "max:value.x"]
KINDS = {"tumbling": ["--tumbling", "1m"], "hopping": ["--hopping", "2m/1m"], "sliding": ["--sliding", "1m"],
         "session": ["--session", "1m"]}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, one_app) -> dict[str, tuple[str, list[str], bytes]]:
    """kind -> (log, the window args, a genuine checkpoint's bytes): one follow run per kind, with open and
    closed windows (events minutes apart, --late correct keeps the closed ones)."""
    d = tmp_path_factory.mktemp("ckpt")
    log = str(d / "L")
    t0 = 1_763_719_200_000
    evs = [{"k": k, "x": i, "t": t0 + i * 150_000} for i, k in enumerate(["a", "b"] * 3)]
    run_cli("produce", log, "--key-field", "k", input="".join(json.dumps(e) + "\n" for e in evs), check=True)
    out = {}
    for kind, args in KINDS.items():
        full = [*args, "--time-field", "value.t", *AGGS, "--late", "correct", "--emit", "update"]
        assert main(["window", log, *full, "--follow", "--group", kind, "--idle-timeout", "50ms"]) == 0
        out[kind] = (log, full, Path(log, "groups", f".{kind}.window.json").read_bytes())
    return out


def _damage(kind: str, data: dict) -> list[tuple[str, str]]:
    """(what was changed, the field the message must name) after changing one field of `data` each."""
    st = data["run"]["state"]
    changes = [("seq", "run.seq"), ("watermark", "run.watermark.max_time"), ("offsets", "offsets"),
               ("stats", "run.stats.events"), ("non_numeric", "run.non_numeric")]
    if kind in ("tumbling", "hopping"):
        changes += [("start", "run.state.open[0][0]"), ("agg", "run.state.open[0][2][1]"),
                    ("closed", "run.state.closed[0][3]")]
    elif kind == "session":
        changes += [("start", "run.state.open[0][1][0][0]"), ("agg", "run.state.open[0][1][0][2][1]")]
    else:
        changes += [("start", "run.state.events[0][1][0][0]"), ("agg", "run.state.pending[0][2]")]
    assert st  # a real state to damage
    return changes


def _apply(kind: str, what: str, data: dict) -> None:
    run, st = data["run"], data["run"]["state"]
    if what == "seq":
        run["seq"] = "many"
    elif what == "watermark":
        run["watermark"]["max_time"] = [1]
    elif what == "offsets":
        data["offsets"] = {"0": "x"}
    elif what == "stats":
        run["stats"]["events"] = -1
    elif what == "non_numeric":
        run["non_numeric"] = {"avg_x": "lots"}
    elif what == "start":
        if kind in ("tumbling", "hopping"):
            st["open"][0][0] = "2026-11-21T10:00:00Z"
        elif kind == "session":
            st["open"][0][1][0][0] = "2026-11-21T10:00:00Z"
        else:
            st["events"][0][1][0][0] = "2026-11-21T10:00:00Z"
    elif what == "agg":
        if kind in ("tumbling", "hopping"):
            st["open"][0][2][1] = "x"  # avg: [total, count]
        elif kind == "session":
            st["open"][0][1][0][2][1] = 7
        else:
            st["pending"][0][2] = "x"
    elif what == "closed":
        st["closed"][0][3] = "x"


@pytest.mark.parametrize("kind", list(KINDS))
def test_damaged_checkpoints_name_the_file_and_the_field(checkpoints, capfd, kind):
    from streamctl.processing.checkpoint import validate

    log, args, raw = checkpoints[kind]
    assert validate(raw, "ckpt")["run"]["config"]["kind"] == kind  # the genuine one passes
    for what, field in _damage(kind, json.loads(raw)):
        data = json.loads(raw)
        _apply(kind, what, data)
        # a group per case: in this process the refused run's group lock stays held until exit
        group = f"{kind}-{what}"
        path = os.path.join(log, "groups", f".{group}.window.json")
        Path(path).write_text(json.dumps(data))
        code, _out, err = cli(capfd, "window", log, *args, "--follow", "--group", group, "--idle-timeout", "10ms")
        assert code == 1, (what, err)
        assert path in err and f"field {field}" in err and "Traceback" not in err, (what, err)


def test_checkpoint_format_is_the_drivers():
    from streamctl.processing import checkpoint
    from streamctl.processing.windows import follow

    assert checkpoint.FORMAT == follow.CHECKPOINT_FORMAT


# -- window and join on a corrupt log ------------------------------------------------------------

@pytest.mark.parametrize("line", [b"garbage", b"[1]", b'{"offset":"two"}', b"\x00" * 8])
def test_window_and_join_on_a_corrupt_log_exit_1_naming_the_segment(made, tmp_path, capfd, line):
    log = tmp_path / "C"
    shutil.copytree(made / "L", log)
    seg = next(p for p in sorted(log.glob("p*/*.jsonl")) if p.read_bytes().count(b"\n") >= 2)
    lines = seg.read_bytes().splitlines(keepends=True)
    at = len(lines[0])
    lines[1] = line + b"\n"
    seg.write_bytes(b"".join(lines))
    for args in (["window", str(log), "--tumbling", "1m"], ["window", str(log), "--sliding", "1m", "--by", "value"],
                 ["join", str(log), str(log), "--within", "1m"], ["join", str(log), str(log), "--table"]):
        code, _out, err = cli(capfd, *args)
        assert code == 1, (args, err)
        assert f"{seg}:2: byte {at}: corrupt record" in err and "Traceback" not in err, (args, err)


# -- last: nothing above printed a traceback -----------------------------------------------------

def test_no_traceback_in_any_stderr_of_this_suite():
    assert len(STDERR) > 100  # the tests above ran in this process, before this one
    assert not [e for e in STDERR if "Traceback" in e]
