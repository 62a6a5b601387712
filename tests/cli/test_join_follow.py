"""join --follow [--group G]: the batch run's rows, live; checkpoints that survive kill -9; usage errors."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import threading
import time

import pytest

from tests.conftest import CLI, cli_env, run_cli

T0 = 1_763_719_200_000
IDLE = ["--idle-timeout", "1s"]

KINDS = {
    "stream-inner": ["--within", "2s", "--on", "u", "--time-field", "at", "--lateness", "30s"],
    "stream-outer": ["--within", "2s", "--on", "u", "--time-field", "at", "--how", "outer"],
    "table": ["--table", "--on", "u", "--how", "left"],
    "table-as-of": ["--table", "--on", "u", "--as-of", "event-time", "--time-field", "at", "--how", "left"],
    "tables": ["--tables", "--on", "u"],
}


def events(n: int, start: int, seed: int, keys: int = 6, side: str = "e", step: int = 250) -> list[str]:
    """Lines in event-time order (each partition of a log they go to stays in order), unique ids,
    `step` ms apart."""
    rnd = random.Random(seed)
    return [json.dumps({"id": f"{side}{start + i}", "u": f"u{rnd.randrange(keys)}", "at": T0 + (start + i) * step,
                        "v": rnd.randint(1, 9)}) for i in range(n)]


def produce(log: str, lines: list[str], partitions: int = 2) -> None:
    create = [] if os.path.exists(log) else ["--partitions", str(partitions)]
    run_cli("produce", log, *create, "--key-field", "u", input="\n".join(lines) + "\n", check=True)


def rows(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def canon(rs: list[dict]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in rs)


def join(*args: str) -> subprocess.CompletedProcess:
    return run_cli("join", *args, timeout=120)


def make_inputs(tmp_path, seed: int = 1, n: int = 60) -> tuple[str, str]:
    left, right = str(tmp_path / "left"), str(tmp_path / "right")
    produce(left, events(n, 0, seed, side="l"))
    produce(right, events(n // 2, 0, seed + 100, side="r", step=500), partitions=3)
    return left, right


@pytest.mark.parametrize("kind", ["stream-inner", "table", "tables"])
def test_follower_to_idle_writes_the_batch_rows(tmp_path, kind):
    left, right = make_inputs(tmp_path)
    batch = join(left, right, *KINDS[kind])
    assert batch.returncode == 0, batch.stderr
    live = join(left, right, *KINDS[kind], "--follow", "--group", "g", *IDLE)
    assert live.returncode == 0, live.stderr
    assert rows(live.stdout) == rows(batch.stdout)  # same rows, same order
    assert rows(batch.stdout)


@pytest.mark.parametrize("kind", ["stream-outer", "table-as-of"])
def test_idle_leaves_what_only_the_end_writes_pending(tmp_path, kind):
    """An unmatched event that could still match, or an as-of event the watermark has not passed, is not
    written at idle; the next run writes it once the watermark passes it."""
    left, right = make_inputs(tmp_path)
    first = join(left, right, *KINDS[kind], "--follow", "--group", "g", *IDLE)
    assert first.returncode == 0, first.stderr
    batch_before = rows(join(left, right, *KINDS[kind]).stdout)
    assert len(rows(first.stdout)) < len(batch_before)
    # much later events on both sides: the watermark passes every earlier event
    late_l = [json.dumps({"id": "l-end", "u": "zz", "at": T0 + 10**7, "v": 1})]
    produce(left, late_l)
    produce(str(tmp_path / "right"), [json.dumps({"id": "r-end", "u": "zz", "at": T0 + 10**7, "v": 1})])
    second = join(left, right, *KINDS[kind], "--follow", "--group", "g", *IDLE)
    assert second.returncode == 0, second.stderr
    batch = rows(join(left, right, *KINDS[kind]).stdout)

    def about_end(r: dict) -> bool:
        return any(isinstance(s, dict) and s.get("u") == "zz" for s in (r["left"], r["right"]))

    live = rows(first.stdout) + rows(second.stdout)
    assert canon([r for r in live if not about_end(r)]) == canon([r for r in batch if not about_end(r)])


def test_a_buffered_event_finds_its_partner_after_a_restart(tmp_path):
    left, right = str(tmp_path / "left"), str(tmp_path / "right")
    produce(left, [json.dumps({"id": "l0", "u": "a", "at": T0})])
    produce(right, [json.dumps({"id": "r-other", "u": "b", "at": T0})])
    args = [left, right, *KINDS["stream-inner"], "--follow", "--group", "g", *IDLE]
    assert rows(join(*args).stdout) == []
    produce(right, [json.dumps({"id": "r0", "u": "a", "at": T0 + 1500})])
    out = rows(join(*args).stdout)
    assert [(r["left"]["id"], r["right"]["id"]) for r in out] == [("l0", "r0")]


def test_a_table_row_known_before_a_restart_enriches_later_events(tmp_path):
    left, right = str(tmp_path / "events"), str(tmp_path / "profiles")
    produce(right, [json.dumps({"u": "a", "plan": "pro"}), json.dumps({"u": "b", "plan": "free"})])
    produce(left, [json.dumps({"id": "e0", "u": "a"})])
    args = [left, right, "--table", "--on", "u", "--follow", "--group", "g", *IDLE]
    assert [r["right"]["plan"] for r in rows(join(*args).stdout)] == ["pro"]
    produce(left, [json.dumps({"id": "e1", "u": "b"}), json.dumps({"id": "e2", "u": "a"})])
    produce(right, [json.dumps({"u": "a", "plan": "gold"})])
    produce(left, [json.dumps({"id": "e3", "u": "a"})])
    out = rows(join(*args).stdout)
    assert [(r["left"]["id"], r["right"]["plan"]) for r in out] == [("e1", "free"), ("e2", "pro"), ("e3", "gold")]


def test_a_tombstone_deletes_the_row_on_disk(tmp_path):
    left, right = str(tmp_path / "events"), str(tmp_path / "profiles")
    produce(right, [json.dumps({"u": "a", "plan": "pro"})], partitions=1)
    args = [left, right, "--table", "--how", "left", "--follow", "--group", "g", *IDLE]
    produce(left, [json.dumps({"id": "e0", "u": "a"})], partitions=1)
    assert [r["right"] for r in rows(join(*args).stdout)] == [{"u": "a", "plan": "pro"}]
    run_cli("produce", right, "--key", "a", input="null\n", check=True)
    produce(left, [json.dumps({"id": "e1", "u": "a"})], partitions=1)
    assert [r["right"] for r in rows(join(*args).stdout)] == [None]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["stream-inner", "table", "tables"])
def test_kill_9_loop_with_appends_leaves_the_batch_rows(tmp_path, kind):
    """kill -9 at random moments while both inputs grow: the rows, once the rerun tail's duplicates
    are folded (each row names its two events, so a repeat is an identical row), are the batch rows."""
    left, right = str(tmp_path / "left"), str(tmp_path / "right")
    produce(left, events(40, 0, 3, side="l"))
    produce(right, events(20, 0, 4, side="r", step=500), partitions=3)
    out_path = str(tmp_path / "rows.jsonl")

    def appender() -> None:
        for r in range(1, 10):
            produce(left, events(40, r * 40, 3 + r, side="l"))
            produce(right, events(20, r * 20, 40 + r, side="r", step=500), partitions=3)
            time.sleep(0.2)

    t = threading.Thread(target=appender)
    t.start()
    rnd = random.Random(5)
    args = [*CLI, "join", left, right, *KINDS[kind], "--follow", "--group", "g"]
    kills = 0
    while t.is_alive() or kills < 4:
        with open(out_path, "ab") as out:
            p = subprocess.Popen(args, stdout=out, stderr=subprocess.DEVNULL, env=cli_env())
        time.sleep(rnd.uniform(0.4, 1.6))
        p.send_signal(signal.SIGKILL)
        p.wait()
        kills += 1
    t.join()
    final = join(left, right, *KINDS[kind], "--follow", "--group", "g", *IDLE)
    assert final.returncode == 0, final.stderr
    with open(out_path, "ab") as out:
        out.write(final.stdout)
    with open(out_path, "rb") as f:
        live = rows(f.read())
    batch = rows(join(left, right, *KINDS[kind]).stdout)
    assert len(canon(batch)) == len(set(canon(batch)))  # the batch rows are all distinct
    assert set(canon(live)) == set(canon(batch))


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_a_stop_signal_checkpoints_and_exits(tmp_path, sig, code):
    left, right = make_inputs(tmp_path)
    p = subprocess.Popen([*CLI, "join", left, right, *KINDS["table"], "--follow", "--group", "g"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
    db = os.path.join(left, "groups", ".g.join.db")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _has_checkpoint(db):
        time.sleep(0.1)
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == code, err
    assert len(rows(out)) == 60
    again = join(left, right, *KINDS["table"], "--follow", "--group", "g", *IDLE)
    assert again.returncode == 0 and rows(again.stdout) == []


def _has_checkpoint(db: str) -> bool:
    if not os.path.exists(db):
        return False
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return con.execute("SELECT count(*) FROM meta").fetchone()[0] > 0
        finally:
            con.close()
    except sqlite3.Error:
        return False


def test_stat_shows_the_lag_on_both_inputs(tmp_path):
    left, right = make_inputs(tmp_path)
    assert join(left, right, *KINDS["table"], "--follow", "--group", "g", *IDLE).returncode == 0
    produce(left, events(5, 100, 9, side="l"))
    produce(right, events(3, 100, 8, side="r"), partitions=3)
    for log, lag in ((left, 5), (right, 3)):
        st = json.loads(run_cli("stat", log, "--json", check=True).stdout)
        assert sum(g["lag"] for g in st["groups"] if g["group"] == "g") == lag


def test_usage_errors(tmp_path):
    left, right = make_inputs(tmp_path)
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"u": "a", "at": 1}\n')
    cases = [
        ([str(plain), right, "--table", "--on", "u", "--follow"], b"plain file"),
        (["-", right, "--table", "--on", "u", "--follow"], b"stdin"),
        ([left, right, "--table", "--on", "u", "--follow", "--engine", "spark"], b"--engine spark"),
        ([left, right, "--table", "--on", "u", "--group", "g"], b"need --follow"),
        ([left, right, "--table", "--on", "u", "--idle-timeout", "1s"], b"need --follow"),
        ([left, right, "--table", "--on", "u", "--follow", "--group", "bad/name"], b"group"),
    ]
    for args, words in cases:
        p = join(*args)
        assert p.returncode == 2, (args, p.stderr)
        assert words in p.stderr and b"Traceback" not in p.stderr, (args, p.stderr)


def test_a_checkpoint_of_other_options_is_refused_naming_the_file(tmp_path):
    left, right = make_inputs(tmp_path)
    assert join(left, right, *KINDS["table"], "--follow", "--group", "g", *IDLE).returncode == 0
    p = join(left, right, "--table", "--on", "u", "--how", "inner", "--follow", "--group", "g", *IDLE)
    assert p.returncode == 2
    assert b".g.join.db" in p.stderr and b"different join options" in p.stderr


def test_a_damaged_checkpoint_is_named(tmp_path):
    left, right = make_inputs(tmp_path)
    db = os.path.join(left, "groups", ".g.join.db")
    os.makedirs(os.path.dirname(db), exist_ok=True)
    with open(db, "wb") as f:
        f.write(b"this is not a database" * 100)
    p = join(left, right, *KINDS["table"], "--follow", "--group", "g", *IDLE)
    assert p.returncode == 1 and b".g.join.db" in p.stderr and b"Traceback" not in p.stderr


def test_without_a_group_it_follows_from_the_start_and_keeps_nothing(tmp_path):
    left, right = make_inputs(tmp_path)
    batch = join(left, right, *KINDS["stream-inner"])
    live = join(left, right, *KINDS["stream-inner"], "--follow", *IDLE)
    assert live.returncode == 0 and rows(live.stdout) == rows(batch.stdout)
    for log in (left, right):  # no checkpoint, no offsets
        assert not [n for n in os.listdir(os.path.join(log, "groups")) if n != ".gitkeep"]


def test_late_events_are_counted_and_kept_across_runs(tmp_path):
    left, right = str(tmp_path / "left"), str(tmp_path / "right")
    produce(left, [json.dumps({"id": "l0", "u": "a", "at": T0 + 60_000})], partitions=1)
    produce(right, [json.dumps({"id": "r0", "u": "a", "at": T0 + 60_000})], partitions=1)
    late_out = str(tmp_path / "late.jsonl")
    args = [left, right, *KINDS["stream-inner"], "--follow", "--group", "g", "--late-out", late_out, *IDLE]
    assert join(*args).returncode == 0
    produce(left, [json.dumps({"id": "l-late", "u": "a", "at": T0})], partitions=1)
    p = join(*args)
    assert p.returncode == 0 and b"1 late event" in p.stderr
    with open(late_out, "rb") as f:
        assert [r["value"]["id"] for r in rows(f.read())] == ["l-late"]


def test_a_table_output_is_written_before_each_checkpoint(tmp_path):
    """-o table holds its rows until it is written: a checkpoint comes after that, so kill -9 once a
    checkpoint is there loses no row (the rows are in the output already, the rerun writes none again)."""
    left, right = make_inputs(tmp_path)
    out_path = tmp_path / "run1.out"
    with open(out_path, "wb") as out:
        p = subprocess.Popen([*CLI, "join", left, right, *KINDS["table"], "--follow", "--group", "g", "-o", "table"],
                             stdout=out, stderr=subprocess.PIPE, env=cli_env())
        db = os.path.join(left, "groups", ".g.join.db")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _has_checkpoint(db):
            time.sleep(0.1)
        p.kill()
        p.communicate(timeout=60)
    again = join(left, right, *KINDS["table"], "--follow", "--group", "g", "-o", "table", *IDLE)
    assert again.returncode == 0, again.stderr
    text = out_path.read_text() + again.stdout.decode()
    ids = {r["left"]["id"] for r in rows(join(left, right, *KINDS["table"]).stdout)}
    assert len(ids) == 60
    cells = text.split()
    assert all(i in cells for i in ids), sorted(ids - set(cells))


def test_a_rerun_reports_its_own_counts(tmp_path):
    """stderr's late and untimed counts are the run's own: a rerun that reads one new, timely record
    reports none of the earlier runs' (the checkpoint keeps the totals)."""
    left, right = str(tmp_path / "left"), str(tmp_path / "right")
    lines = [json.dumps({"u": "a", "at": T0 + 60_000})] + [json.dumps({"u": "a", "at": T0 + i}) for i in range(3)]
    produce(left, [*lines, json.dumps({"u": "a", "at": "soon"})], partitions=1)
    produce(right, [json.dumps({"u": "a", "at": T0 + 60_000})], partitions=1)
    args = [left, right, *KINDS["stream-outer"], "--follow", "--group", "g", *IDLE]
    first = join(*args)
    assert first.returncode == 0, first.stderr
    assert b"3 late event(s)" in first.stderr and b"1 event(s) without a usable time" in first.stderr
    produce(left, [json.dumps({"u": "a", "at": T0 + 61_000})], partitions=1)
    again = join(*args)
    assert again.returncode == 0, again.stderr
    assert rows(again.stdout) and b"late" not in again.stderr and b"usable time" not in again.stderr, again.stderr
    db = os.path.join(left, "groups", ".g.join.db")
    con = sqlite3.connect(db)
    try:
        stats = json.loads(con.execute("SELECT value FROM meta WHERE name = 'checkpoint'").fetchone()[0])["stats"]
    finally:
        con.close()
    assert stats["late"] == [3, 0] and stats["no_time"] == [1, 0] and stats["records"][0] == 6


@pytest.mark.parametrize("kind", [["--within", "1m", "--time-field", "t"], ["--table"], ["--tables"]])
def test_integers_beyond_64_bits_survive_a_follower_and_its_checkpoint(tmp_path, kind):
    """join --follow --group writes an integer beyond 64 bits exactly, and keeps it so through its
    checkpoint and table state (orjson refuses to write one, and reads one as a float)."""
    log = str(tmp_path / "log")
    line = '{"t":%d,"v":100000000000000000000,"o":{"n":100000000000000000001}}\n'
    follow = ("join", log, log, "--on", "v", *kind, "--follow", "--group", "g", "--idle-timeout", "300ms")
    rows = []
    for t in (0, 1000):
        run_cli("produce", log, input=line % t, check=True)
        p = run_cli(*follow)
        assert p.returncode == 0, p.stderr
        rows += [json.loads(x) for x in p.stdout.splitlines()]
    assert rows and all(r["key"] == 100000000000000000000 for r in rows)
    assert {json.dumps(r["right"]) for r in rows} >= {json.dumps(json.loads(line % 1000))}, rows
