"""consume --sqlite: the table against a model of the log (append and upsert), resuming from the
database's offsets, --from, filters, follow, a writer holding the lock, competing consumers, bad cases."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import threading
import time

import pytest

from conftest import CLI, cli_env, log_records, run_cli


def make_log(log: str, n: int, seed: int = 7, partitions: int = 3, keys: int = 40) -> None:
    """n records with string keys (some null), tombstones, headers on some, and unicode."""
    rnd = random.Random(seed)
    lines = []
    for i in range(n):
        key = None if rnd.random() < 0.05 else f"k{rnd.randrange(keys)}" + ("\"q\\é" if i % 17 == 0 else "")
        value = None if key is not None and rnd.random() < 0.1 else {"i": i, "s": "ü" * (i % 3), "x": [i, None]}
        env = {"key": key, "value": value}
        if i % 11 == 0:
            env["headers"] = {"trace": str(i), "ü": "ß"}
        lines.append(json.dumps(env, ensure_ascii=False))
    run_cli("produce", log, "--partitions", str(partitions), "--envelope", input="\n".join(lines) + "\n", check=True)


def table_rows(db: str, table: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(f'SELECT key, value, headers, ts, "partition", "offset" FROM "{table}" '
                           'ORDER BY "partition", "offset"').fetchall()
    finally:
        con.close()


def db_offsets(db: str, group: str) -> dict[int, int]:
    con = sqlite3.connect(db)
    try:
        return dict(con.execute('SELECT "partition", next_offset FROM streamctl_offsets WHERE "group"=?', (group,)))
    finally:
        con.close()


def as_row(r: dict) -> tuple:
    h = r.get("headers")
    return (r["key"], r["value"], h, r["ts"], r["partition"], r["offset"])


def decoded(rows: list[tuple]) -> list[tuple]:
    return [(k, json.loads(v), None if h is None else json.loads(h), ts, p, o) for k, v, h, ts, p, o in rows]


def compacted(recs: list[dict]) -> dict[str, tuple]:
    """The model of upsert mode: the latest record per key in (ts, partition, offset) order; a null
    value deletes the key; null keys do not count."""
    out: dict[str, tuple] = {}
    for r in sorted(recs, key=lambda r: (r["ts"], r["partition"], r["offset"])):
        if r["key"] is None:
            continue
        if r["value"] is None:
            out.pop(r["key"], None)
        else:
            out[r["key"]] = as_row(r)
    return out


def test_parse_rows_matches_a_full_parse(tmp_path):
    from streamctl.clients.sqlitesink import parse_rows
    from streamctl.storage import log as logmod
    from streamctl.storage import reader

    log = str(tmp_path / "log")
    make_log(log, 400)
    lg = logmod.open_log(log)
    for p in range(lg.partitions):
        for block in reader.iter_blocks(lg, p, 0, None):
            got = decoded(parse_rows(block))
            want = []
            for line in block.splitlines():
                r = json.loads(line)
                want.append(as_row(r))
            assert got == want
    # a block without headers takes the one-regex path; escaped keys and unicode survive it
    block = (b'{"offset":0,"partition":0,"ts":5,"key":"a\\"b\\\\","value":{"t":"\xc3\xbc"}}\n'
             b'{"offset":1,"partition":0,"ts":5,"key":null,"value":null}\n')
    assert parse_rows(block) == [('a"b\\', '{"t":"ü"}', None, 5, 0, 0), (None, "null", None, 5, 0, 1)]


def test_parse_rows_slices_values_next_to_headers_as_stored():
    from streamctl.clients.sqlitesink import parse_rows

    def line(o: int, rest: bytes) -> bytes:
        return b'{"offset":%d,"partition":0,"ts":5,"key":"k","value":%s}\n' % (o, rest)

    block = (line(0, b'{"a":1.50,"headers":{"x":"1"}}')                        # "headers" inside the value
             + line(1, b'{"a":1.50},"headers":{"h":"v"}')                      # a record's headers
             + line(2, b'{"headers":{"h":"v"}},"headers":{"h":"v"}')           # both
             + line(3, b'"s,\\"headers\\":{}","headers":{"h":"v"}')           # in a string, then headers
             + line(4, b'[1, 2],"headers":null'))                              # not streamctl's layout
    rows = parse_rows(block)
    assert [(r[1], r[2]) for r in rows] == [
        ('{"a":1.50,"headers":{"x":"1"}}', None),
        ('{"a":1.50}', '{"h":"v"}'),  # the value's text as stored (1.50, not re-encoded to 1.5)
        ('{"headers":{"h":"v"}}', '{"h":"v"}'),
        ('"s,\\"headers\\":{}"', '{"h":"v"}'),
        ('[1,2]', None),
    ]
    assert [r[5] for r in rows] == [0, 1, 2, 3, 4]


def test_append_equals_the_log_and_reruns_add_only_new_records(tmp_path):
    log, db = str(tmp_path / "orders"), str(tmp_path / "r.db")
    make_log(log, 1500)
    p = run_cli("consume", log, "-g", "rep", "--sqlite", db, "--batch", "100")
    assert p.returncode == 0, p.stderr
    assert p.stdout == b""
    assert decoded(table_rows(db, "orders")) == sorted(map(as_row, log_records(log)), key=lambda r: (r[4], r[5]))
    assert run_cli("consume", log, "-g", "rep", "--sqlite", db).returncode == 0
    assert len(table_rows(db, "orders")) == 1500
    run_cli("produce", log, input="".join(json.dumps({"n": i}) + "\n" for i in range(30)), check=True)
    assert run_cli("consume", log, "-g", "rep", "--sqlite", db).returncode == 0
    recs = log_records(log)
    assert decoded(table_rows(db, "orders")) == sorted(map(as_row, recs), key=lambda r: (r[4], r[5]))
    ends = {}
    for r in recs:
        ends[r["partition"]] = r["offset"] + 1
    assert db_offsets(db, "rep") == ends
    # the group file mirrors the database, so stat sees the sink's lag
    stat = json.loads(run_cli("stat", log, "--json", check=True).stdout)
    assert {g["partition"]: g["lag"] for g in stat["groups"] if g["group"] == "rep"} == {0: 0, 1: 0, 2: 0}
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # value and headers are JSON text that SQLite's JSON functions read
    n = sum(1 for r in recs if isinstance(r["value"], dict) and "i" in r["value"])
    assert con.execute("SELECT count(*) FROM orders WHERE json_extract(value, '$.i') IS NOT NULL").fetchone()[0] == n
    h = sum(1 for r in recs if "headers" in r)
    assert con.execute("SELECT count(*) FROM orders WHERE headers->>'trace' IS NOT NULL").fetchone()[0] == h


def test_upsert_equals_the_compacted_log(tmp_path):
    log, db = str(tmp_path / "users"), str(tmp_path / "u.db")
    make_log(log, 2000, seed=3)
    p = run_cli("consume", log, "-g", "view", "--sqlite", db, "--mode", "upsert", "--table", "latest", "--batch", "64")
    assert p.returncode == 0, p.stderr
    recs = log_records(log)
    nulls = sum(1 for r in recs if r["key"] is None)
    assert f"{nulls} record(s) with a null key skipped".encode() in p.stderr
    model = compacted(recs)
    got = {r[0]: r for r in decoded(table_rows(db, "latest"))}
    assert got == model
    # more changes, tombstones among them, in a second run
    more = [json.dumps({"key": f"k{i}", "value": None if i % 2 else {"v": i}}) for i in range(10)]
    run_cli("produce", log, "--envelope", input="\n".join(more) + "\n", check=True)
    assert run_cli("consume", log, "-g", "view", "--sqlite", db, "--mode", "upsert", "--table", "latest").returncode == 0
    assert {r[0]: r for r in decoded(table_rows(db, "latest"))} == compacted(log_records(log))


def test_the_database_offsets_win_over_the_group_file(tmp_path):
    log, db = str(tmp_path / "orders"), str(tmp_path / "r.db")
    make_log(log, 600)
    assert run_cli("consume", log, "-g", "g", "--sqlite", db, "--max", "200").returncode == 0
    first = db_offsets(db, "g")
    assert sum(first.values()) == 200
    # the group file moved back to the start: nothing is loaded twice
    run_cli("replay", log, "--group", "g", "--to-earliest", "--execute", check=True)
    assert run_cli("consume", log, "-g", "g", "--sqlite", db, "--max", "100").returncode == 0
    rows = table_rows(db, "orders")
    assert len(rows) == 300 and len({(r[4], r[5]) for r in rows}) == 300
    # the group file moved to the end: nothing is skipped either
    run_cli("replay", log, "--group", "g", "--to-latest", "--execute", check=True)
    assert run_cli("consume", log, "-g", "g", "--sqlite", db).returncode == 0
    assert decoded(table_rows(db, "orders")) == sorted(map(as_row, log_records(log)), key=lambda r: (r[4], r[5]))
    group = json.loads(open(os.path.join(log, "groups", "g.json")).read())["offsets"]
    assert {int(p): o for p, o in group.items()} == db_offsets(db, "g")


def test_from_counts_on_a_first_run_only(tmp_path):
    log, db = str(tmp_path / "orders"), str(tmp_path / "r.db")
    make_log(log, 90, partitions=1)
    assert run_cli("consume", log, "-g", "g", "--sqlite", db, "--from", "-10").returncode == 0
    assert [r[5] for r in table_rows(db, "orders")] == list(range(80, 90))
    run_cli("produce", log, input="1\n2\n", check=True)
    # cron runs the same command line again: the database's offsets win over --from
    assert run_cli("consume", log, "-g", "g", "--sqlite", db, "--from", "-10").returncode == 0
    assert [r[5] for r in table_rows(db, "orders")] == list(range(80, 92))
    # a first run from the end loads nothing, and later runs only what came after it
    assert run_cli("consume", log, "-g", "late", "--sqlite", db, "--table", "t2", "--from", "latest").returncode == 0
    assert table_rows(db, "t2") == []
    run_cli("produce", log, input="3\n", check=True)
    assert run_cli("consume", log, "-g", "late", "--sqlite", db, "--table", "t2").returncode == 0
    assert [r[5] for r in table_rows(db, "t2")] == [92]


def test_filters_move_offsets_past_skipped_records(tmp_path):
    log, db = str(tmp_path / "orders"), str(tmp_path / "r.db")
    lines = [json.dumps({"n": i, "big": i % 7 == 0}) for i in range(500)] + [json.dumps({"n": 999, "big": False})]
    run_cli("produce", log, "--partitions", "2", input="\n".join(lines) + "\n", check=True)
    p = run_cli("consume", log, "-g", "g", "--sqlite", db, "--where", "value.big == true", "--batch", "10")
    assert p.returncode == 0, p.stderr
    got = sorted(json.loads(r[1])["n"] for r in table_rows(db, "orders"))
    assert got == [i for i in range(500) if i % 7 == 0]
    ends = {0: 0, 1: 0}
    for r in log_records(log):
        ends[r["partition"]] = r["offset"] + 1
    # the last records were all skipped, and still the offsets are past them, in both places
    assert db_offsets(db, "g") == ends
    group = json.loads(open(os.path.join(log, "groups", "g.json")).read())["offsets"]
    assert {int(p): o for p, o in group.items()} == ends


def test_a_writer_holding_the_database_is_waited_for(tmp_path):
    log, db = str(tmp_path / "orders"), str(tmp_path / "r.db")
    make_log(log, 300)
    assert run_cli("consume", log, "-g", "g", "--sqlite", db, "--max", "1").returncode == 0
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO orders (key, value, ts, \"partition\", \"offset\") VALUES ('x', '1', 0, 99, 0)")
    proc = subprocess.Popen([*CLI, "consume", log, "-g", "g", "--sqlite", db], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=cli_env())
    time.sleep(2.0)
    assert proc.poll() is None, proc.communicate()
    holder.execute("COMMIT")
    holder.close()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert b"locked by another process; waiting" in err
    rows = table_rows(db, "orders")
    assert len(rows) == 301 and len({(r[4], r[5]) for r in rows}) == 301
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def wait_for(cond, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def count(db: str, table: str) -> int:
    try:
        con = sqlite3.connect(db, timeout=5)
        try:
            return con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
        finally:
            con.close()
    except sqlite3.OperationalError:
        return -1  # not created yet


def test_follow_is_a_live_view_and_ctrl_c_commits_and_exits_130(tmp_path):
    log, db = str(tmp_path / "users"), str(tmp_path / "v.db")
    make_log(log, 50, partitions=2)
    proc = subprocess.Popen([*CLI, "consume", log, "-g", "view", "--sqlite", db, "--mode", "upsert", "--follow"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
    try:
        # the batch (1000) is never full: each partial batch is committed once consume caught up
        wait_for(lambda: count(db, "users") == len(compacted(log_records(log))))
        more = [json.dumps({"key": f"new{i}", "value": {"i": i}}) for i in range(7)]
        run_cli("produce", log, "--envelope", input="\n".join(more) + "\n", check=True)
        wait_for(lambda: count(db, "users") == len(compacted(log_records(log))))
        run_cli("produce", log, "--envelope", input=json.dumps({"key": "new3", "value": None}) + "\n", check=True)
        wait_for(lambda: count(db, "users") == len(compacted(log_records(log))))
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert b"Traceback" not in err
    assert {r[0]: r for r in decoded(table_rows(db, "users"))} == compacted(log_records(log))


def test_batch_timeout_lets_a_partial_batch_wait_while_following(tmp_path):
    log, db = str(tmp_path / "orders"), str(tmp_path / "r.db")
    run_cli("produce", log, input="1\n", check=True)
    proc = subprocess.Popen([*CLI, "consume", log, "-g", "g", "--sqlite", db, "--follow", "--batch-timeout", "1500ms",
                             "--idle-timeout", "6s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
    try:
        wait_for(lambda: count(db, "orders") == 1)
        run_cli("produce", log, input="2\n", check=True)
        t0 = time.monotonic()
        wait_for(lambda: count(db, "orders") == 2)
        # the commit waited for the timeout; only an upper bound would depend on the machine's speed
        assert time.monotonic() - t0 >= 0.5
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_competing_consumers_split_partitions_and_load_each_record_once(tmp_path):
    log, db = str(tmp_path / "orders"), str(tmp_path / "r.db")
    make_log(log, 3000, partitions=4)
    procs = [subprocess.Popen([*CLI, "consume", log, "-g", "g", "--sqlite", db, "--follow", "--idle-timeout", "3s",
                               "--batch", "50"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
             for _ in range(2)]
    stop = threading.Event()

    def produce_more() -> None:
        i = 0
        while not stop.is_set() and i < 20:
            run_cli("produce", log, input="".join(json.dumps({"late": i * 10 + j}) + "\n" for j in range(10)))
            i += 1
            time.sleep(0.05)

    t = threading.Thread(target=produce_more)
    t.start()
    t.join()
    for pr in procs:
        out, err = pr.communicate(timeout=60)
        assert pr.returncode == 0, err
    rows = table_rows(db, "orders")
    assert decoded(rows) == sorted(map(as_row, log_records(log)), key=lambda r: (r[4], r[5]))


def test_bad_databases_and_tables_are_clear_errors(tmp_path):
    log = str(tmp_path / "orders")
    make_log(log, 50)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite\n" * 100)
    p = run_cli("consume", log, "-g", "g", "--sqlite", str(junk))
    assert p.returncode == 1
    assert p.stderr.decode().startswith(f"streamctl: {junk}: ") and b"not a SQLite database" in p.stderr
    assert junk.read_bytes() == b"this is not sqlite\n" * 100

    db = str(tmp_path / "other.db")
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE orders (id INTEGER, amount REAL)")
    con.commit()
    con.close()
    p = run_cli("consume", log, "-g", "g", "--sqlite", db)
    assert p.returncode == 1
    assert b"table orders has columns (id, amount)" in p.stderr and db.encode() in p.stderr
    con = sqlite3.connect(db)
    assert con.execute("SELECT name FROM sqlite_schema WHERE name='streamctl_offsets'").fetchone() is None
    con.close()
    assert not os.path.exists(os.path.join(log, "groups", "g.json"))

    db2 = str(tmp_path / "a.db")
    assert run_cli("consume", log, "-g", "g", "--sqlite", db2).returncode == 0
    p = run_cli("consume", log, "-g", "h", "--sqlite", db2, "--mode", "upsert")
    assert p.returncode == 1 and b"was made for --mode append" in p.stderr

    p = run_cli("consume", log, "-g", "g", "--sqlite", str(tmp_path / "nowhere" / "x.db"))
    assert p.returncode == 1 and b"no such folder" in p.stderr
    p = run_cli("consume", log, "-g", "g", "--sqlite", str(tmp_path))
    assert p.returncode == 1 and b"is a folder" in p.stderr
    assert b"Traceback" not in p.stderr


def _make_read_only(path: str) -> None:
    if os.geteuid() != 0:
        os.chmod(path, 0o444)
        return
    # root writes through file modes; an immutable file is read-only even for root
    if shutil.which("chattr") is None:
        pytest.fail("root needs chattr (e2fsprogs; scripts/test installs it with apt-get) to make a file read-only")
    p = subprocess.run(["chattr", "+i", path], capture_output=True)
    assert p.returncode == 0, f"chattr +i {path}: {p.stderr.decode()}"


def test_a_read_only_database_is_a_clear_error_and_changes_nothing(tmp_path):
    log, db = str(tmp_path / "orders"), str(tmp_path / "r.db")
    make_log(log, 80)
    assert run_cli("consume", log, "-g", "g", "--sqlite", db, "--max", "10").returncode == 0
    run_cli("produce", log, input="1\n", check=True)
    before = open(db, "rb").read()
    _make_read_only(db)
    try:
        p = run_cli("consume", log, "-g", "g", "--sqlite", db)
        assert p.returncode == 1
        assert p.stderr.decode().startswith(f"streamctl: {db}: ") and b"read-only" in p.stderr, p.stderr
        assert b"Traceback" not in p.stderr
        assert open(db, "rb").read() == before
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", db])
        os.chmod(db, 0o644)
    assert len(table_rows(db, "orders")) == 10
    assert run_cli("consume", log, "-g", "g", "--sqlite", db).returncode == 0
    assert len(table_rows(db, "orders")) == 81


def test_a_full_disk_commits_nothing_unwritten_and_a_rerun_completes(tmp_path):
    import resource

    log, db = str(tmp_path / "orders"), str(tmp_path / "r.db")
    make_log(log, 3000)
    assert run_cli("consume", log, "-g", "g", "--sqlite", db, "--max", "5").returncode == 0

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))

    p = subprocess.run([*CLI, "consume", log, "-g", "g", "--sqlite", db, "--batch", "100"], capture_output=True,
                       env=cli_env(), preexec_fn=limit, timeout=120)
    assert p.returncode == 1, p.stderr
    err = p.stderr.decode()
    assert err.startswith(f"streamctl: {db}: cannot write a batch") and "was not committed" in err, err
    assert "Traceback" not in err
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    # what the table holds is exactly what the offsets say was read
    offs = db_offsets(db, "g")
    keys = {(r[4], r[5]) for r in table_rows(db, "orders")}
    assert keys == {(r["partition"], r["offset"]) for r in log_records(log) if r["offset"] < offs[r["partition"]]}
    assert len(keys) < 3000
    assert run_cli("consume", log, "-g", "g", "--sqlite", db).returncode == 0
    assert decoded(table_rows(db, "orders")) == sorted(map(as_row, log_records(log)), key=lambda r: (r[4], r[5]))


@pytest.mark.parametrize("args,msg", [
    (["--sqlite", "x.db"], b"--sqlite needs --group"),
    (["-g", "g", "--table", "t"], b"--table and --mode need --sqlite"),
    (["-g", "g", "--sqlite", "x.db", "--mode", "merge"], b"--mode merge: use append or upsert"),
    (["-g", "g", "--sqlite", "x.db", "--value"], b"cannot be combined"),
    (["-g", "g", "--sqlite", "x.db", "--table", "sqlite_master"], b"reserved"),
    (["-g", "g", "--sqlite", "x.db", "--table", ""], b"not a table name"),
])
def test_usage_errors(tmp_path, args, msg):
    log = str(tmp_path / "orders")
    run_cli("produce", log, input="1\n", check=True)
    p = run_cli("consume", log, *args, cwd=str(tmp_path))
    assert p.returncode == 2, p.stderr
    assert msg in p.stderr
    assert not os.path.exists(tmp_path / "x.db")


def test_help_documents_sqlite():
    out = run_cli("consume", "--help", check=True).stdout.decode()
    for word in ("--sqlite", "--table", "--mode", "exactly once", "--sqlite reporting.db"):
        assert word in out


def test_ctrl_c_while_waiting_for_a_lock_exits_130_and_commits_nothing(tmp_path):
    log, db = str(tmp_path / "orders"), str(tmp_path / "r.db")
    make_log(log, 100)
    assert run_cli("consume", log, "-g", "g", "--sqlite", db, "--max", "1").returncode == 0
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    proc = subprocess.Popen([*CLI, "consume", log, "-g", "g", "--sqlite", db], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=cli_env())
    try:
        time.sleep(1.5)  # long enough to be waiting; the exit code does not depend on it
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert proc.returncode == 130, err
    assert b"interrupted while waiting for a lock" in err and b"Traceback" not in err
    assert len(table_rows(db, "orders")) == 1


def test_the_group_file_never_falls_behind_a_sync_commit_after_async_ones(tmp_path):
    """A batch the writer thread finished (its offsets not yet taken) is older than a commit made
    in this thread after it: the group file gets the newer offsets, as the database does."""
    from streamctl.clients.sqlitesink import open_sink
    from streamctl.groups import offsets
    from streamctl.storage.log import open_log

    log, db = str(tmp_path / "orders"), str(tmp_path / "r.db")
    run_cli("produce", log, input="".join(f'{{"n": {i}}}\n' for i in range(20)), check=True)
    lg = open_log(log)
    sink = open_sink(lg, "g", [0], "earliest", db, None, "append", 5, None, lambda _m: None)
    c = sink.committer
    rows = [(None, json.dumps(r["value"]), None, r["ts"], 0, r["offset"]) for r in log_records(log)]
    c.rows = rows[:10]
    c.queued(0, 10)
    c.commit(mirror=False)  # a full batch while catching up: the writer thread's
    c.table.wait()  # done, its offsets not yet taken: nothing is in flight
    assert not c.table.in_flight()
    c.rows = rows[10:]
    c.queued(0, 20)
    c.commit(final=True)  # this thread's transaction, newer than the thread's
    c.table.close()
    assert db_offsets(db, "g") == {0: 20}
    assert offsets.load(lg, "g") == {0: 20}
