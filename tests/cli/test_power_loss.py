"""What survives a power cut: the order of the syscalls that make data durable, recorded with
strace (a cut keeps what was fsynced and may drop anything else), and kills injected between
them. Each test states the invariant a power cut relies on and checks it on the real trace.

- produce into missing parent folders: each folder made is durable (its parent fsynced) before
  produce acknowledges a record.
- consume --group with stdout on a regular file: the file is fsynced before every group-file
  rename that commits the records in it; a pipe is not (its reader owns durability).
- consume --sqlite: every group-file rename comes after an fsync of the database's WAL (and
  folder) that covers the offsets the group file names; a power cut simulated at each rename
  (the WAL cut back to what was synced) loses nothing and doubles nothing on the rerun; a kill
  between the fsync and the rename loses nothing either.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import time
from dataclasses import dataclass

import pytest

from conftest import CLI, cli_env, log_records, run_cli


@pytest.fixture(scope="module")
def strace() -> str:
    path = shutil.which("strace")
    if path is None:
        pytest.fail("strace is not installed (scripts/test installs it with apt-get)")
    probe = subprocess.run([path, "-f", "-qq", "-o", "/dev/null", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.fail(f"strace cannot trace here (ptrace not permitted): {probe.stderr.decode()[:200]}")
    return path


def traced(strace: str, out: str, calls: str, args: list[str], input: bytes = b"", stdout=None,
           extra: list[str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run streamctl under strace -f -y (fds shown with their paths), the trace in `out`."""
    cmd = [strace, "-f", "-qq", "-y", "-s", "512", "-o", out, "-e", f"trace={calls}", *(extra or []), *CLI, *args]
    return subprocess.run(cmd, input=input, stdout=stdout if stdout is not None else subprocess.PIPE,
                          stderr=subprocess.PIPE, env=cli_env(), timeout=timeout)


# One call per entry, in the order they started: unfinished/resumed pairs (threads) are joined,
# and each call knows the trace line where it ended (a write that ended before an fsync started
# is covered by it).
_CALL = re.compile(r"^(\d+)\s+(\w+)\((.*)$")
_RESUMED = re.compile(r"^(\d+)\s+<\.\.\. (\w+) resumed>(.*)$")


@dataclass
class Call:
    name: str
    text: str  # arguments and result
    start: int  # trace line of the entry
    end: int  # trace line of the result


def calls(trace: str) -> list[Call]:
    out: list[Call] = []
    open_by_pid: dict[str, Call] = {}
    for n, line in enumerate(open(trace, errors="replace")):
        line = line.rstrip("\n")
        m = _RESUMED.match(line)
        if m:
            c = open_by_pid.pop(m.group(1), None)
            if c is not None:
                c.text += m.group(3)
                c.end = n
            continue
        m = _CALL.match(line)
        if not m:
            continue
        if line.endswith("<unfinished ...>"):
            c = Call(m.group(2), m.group(3)[: -len("<unfinished ...>")], n, 1 << 60)
            open_by_pid[m.group(1)] = c
        else:
            c = Call(m.group(2), m.group(3), n, n)
        out.append(c)
    return out


def result(c: Call) -> int:
    return int(c.text.rsplit("=", 1)[1].split()[0])


def strace_string(text: str) -> bytes:
    """The first quoted string argument of a call as bytes (strace's C escapes undone)."""
    m = re.search(r'"((?:[^"\\]|\\.)*)"', text)
    assert m is not None, text
    return m.group(1).encode("latin-1").decode("unicode_escape").encode("latin-1")


def fd_path(text: str) -> str:
    """The path strace -y shows for the first fd argument: `5</a/b>` -> /a/b."""
    m = re.match(r"\s*-?\d+<([^>]*)>", text)
    return m.group(1) if m else ""


# --- produce into new parent folders ------------------------------------------------------------

def test_produce_makes_every_new_parent_folder_durable(tmp_path, strace):
    base = tmp_path / "a"
    base.mkdir()
    log = str(base / "new1" / "new2" / "log")
    trace = str(tmp_path / "trace")
    p = traced(strace, trace, "mkdir,mkdirat,fsync,fdatasync", ["produce", log, "--fsync", "always"],
               input=b"1\n2\n")
    assert p.returncode == 0, p.stderr.decode()
    seq = calls(trace)

    def made(c: Call) -> str:
        m = re.match(r'\s*(?:AT_FDCWD, )?"([^"]+)"', c.text)
        assert m is not None
        return os.path.abspath(m.group(1))

    first_record_sync = next(i for i, c in enumerate(seq)
                             if c.name in ("fsync", "fdatasync") and fd_path(c.text).endswith(".jsonl"))
    for folder in (str(base / "new1"), str(base / "new1" / "new2"), log):
        i = next(i for i, c in enumerate(seq) if c.name in ("mkdir", "mkdirat") and made(c) == folder)
        parent = os.path.dirname(folder)
        # the folder's entry is synced after its mkdir and before the first record's fsync
        assert any(c.name == "fsync" and fd_path(c.text) == parent for c in seq[i + 1:first_record_sync]), \
            f"{parent} is not fsynced after {folder} is made"
    assert run_cli("consume", log, "--value").stdout == b"1\n2\n"


# --- helpers for the consume tests ----------------------------------------------------------------

def produce(log: str, n: int, start: int = 0, partitions: int = 2) -> None:
    lines = "".join(json.dumps({"key": f"k{i % 13}", "value": {"i": i}}) + "\n" for i in range(start, start + n))
    run_cli("produce", log, "--partitions", str(partitions), "--envelope", input=lines, check=True)


def ends(log: str) -> dict[int, int]:
    out: dict[int, int] = {}
    for r in log_records(log):
        out[r["partition"]] = r["offset"] + 1
    return out


def group_offsets(log: str, group: str) -> dict[int, int]:
    try:
        data = json.loads(open(os.path.join(log, "groups", f"{group}.json")).read())
    except (FileNotFoundError, ValueError):
        return {}
    return {int(p): o for p, o in data["offsets"].items()}


def traced_child(strace_pid: int) -> int:
    """The pid of the process strace started (its only child)."""
    with open(f"/proc/{strace_pid}/task/{strace_pid}/children") as f:
        kids = f.read().split()
    assert len(kids) == 1, kids
    return int(kids[0])


def follow_under_strace(strace: str, trace: str, log: str, args: list[str], stdout, rounds: int) -> None:
    """`consume LOG ARGS --follow` under strace while `rounds` more batches are produced a bit more
    than a second apart (so several commits happen), until the group has committed everything;
    then the consumer is killed with SIGKILL (its files stay as they were at the cut)."""
    calls_ = "fsync,fdatasync,rename,renameat,renameat2,pwrite64,write"
    proc = subprocess.Popen([strace, "-f", "-qq", "-y", "-s", "512", "-o", trace, "-e", f"trace={calls_}",
                             *CLI, "consume", log, *args, "--follow"],
                            stdout=stdout, stderr=subprocess.PIPE, env=cli_env())
    child = None
    caught_up = False
    try:
        for r in range(rounds):
            time.sleep(1.2)
            produce(log, 150, start=10_000 * (r + 1))
        child = traced_child(proc.pid)
        end = time.monotonic() + 120
        while not caught_up and time.monotonic() < end and proc.poll() is None:
            caught_up = group_offsets(log, "g") == ends(log)
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        if child is not None and proc.poll() is None:
            os.kill(child, 9)
        proc.wait(timeout=120)
        err = proc.stderr.read().decode() if proc.stderr else ""
    assert caught_up, f"the group never committed the end {ends(log)}: {group_offsets(log, 'g')}; stderr: {err}"
    assert "Traceback" not in err, err


def group_writes(seq: list[Call], group: str = "g") -> list[tuple[int, dict[int, int], bytes]]:
    """(index of the rename, offsets it names, the file's bytes) of every rename of groups/G.json."""
    out = []
    for i, c in enumerate(seq):
        if c.name.startswith("rename") and f'"{group}.json"' in c.text and result(c) == 0:
            w = next(x for x in reversed(seq[:i]) if x.name == "write"
                     and f"/groups/.{group}.json." in fd_path(x.text))
            data = strace_string(w.text)
            out.append((i, {int(p): o for p, o in json.loads(data)["offsets"].items()}, data))
    return out


def last_sync_before(seq: list[Call], i: int, path: str) -> Call | None:
    syncs = [c for c in seq[:i] if c.name in ("fsync", "fdatasync") and fd_path(c.text) == path]
    return syncs[-1] if syncs else None


def durable_offsets(data: bytes) -> dict[int, int]:
    """The next offset of each partition after the whole stored lines in `data` (a prefix of a file)."""
    out: dict[int, int] = {}
    for line in data.splitlines(keepends=True):
        if line.endswith(b"\n"):
            r = json.loads(line)
            out[r["partition"]] = r["offset"] + 1
    return out


# --- consume --group into a file, and into a pipe --------------------------------------------------

def test_consume_into_a_file_syncs_it_before_each_commit_and_a_pipe_is_not_synced(tmp_path, strace):
    log = str(tmp_path / "orders")
    produce(log, 400)
    out = os.path.realpath(str(tmp_path / "out.jsonl"))
    trace = str(tmp_path / "trace")
    with open(out, "wb") as f:
        follow_under_strace(strace, trace, log, ["--group", "g", "--idle-timeout", "30s"], f, rounds=3)
    seq = calls(trace)
    writes = group_writes(seq)
    assert len(writes) >= 3, len(writes)
    data = open(out, "rb").read()
    for i, named, _ in writes:
        sync = last_sync_before(seq, i, out)
        assert sync is not None, "a commit before any fsync of the output file"
        # what that fsync covered: the bytes of every write to the file that had ended before it
        synced = sum(result(c) for c in seq if c.name == "write" and fd_path(c.text) == out and c.end < sync.start)
        durable = durable_offsets(data[:synced])
        for p, o in named.items():
            assert o == 0 or durable.get(p, 0) >= o, f"partition {p}: offset {o} committed, {durable} on disk"
    # every record once, in the file
    assert sorted((json.loads(x)["partition"], json.loads(x)["offset"]) for x in data.splitlines()) == \
        sorted((r["partition"], r["offset"]) for r in log_records(log))

    # a pipe: its reader owns durability, consume never fsyncs it
    trace2 = str(tmp_path / "trace2")
    p = traced(strace, trace2, "fsync,fdatasync", ["consume", log, "--group", "piped"])
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.count(b"\n") == len(log_records(log))
    synced = [fd_path(c.text) for c in calls(trace2)]
    assert not [s for s in synced if s.startswith("pipe:")], synced
    assert any("/groups/" in s for s in synced)  # the commit itself was traced


# --- consume --sqlite ----------------------------------------------------------------------------

def table_keys(db: str, table: str) -> list[tuple[int, int]]:
    con = sqlite3.connect(db)
    try:
        return sorted(con.execute(f'SELECT "partition", "offset" FROM "{table}"').fetchall())
    finally:
        con.close()


def db_offsets(db: str, group: str) -> dict[int, int]:
    con = sqlite3.connect(db)
    try:
        if not con.execute("SELECT 1 FROM sqlite_schema WHERE name='streamctl_offsets'").fetchone():
            return {}
        return dict(con.execute('SELECT "partition", next_offset FROM streamctl_offsets WHERE "group"=?', (group,)))
    finally:
        con.close()


def set_group_file(log: str, group: str, data: bytes) -> None:
    path = os.path.join(log, "groups", f"{group}.json")
    with open(path + ".t", "wb") as f:
        f.write(data)
    os.replace(path + ".t", path)


def test_sqlite_group_file_never_leads_the_synced_wal_and_a_power_cut_at_each_commit_loses_nothing(tmp_path, strace):
    """The database's WAL as a power cut leaves it (cut back to what the last fsync before the
    cut covered) holds offsets at or past those the group file names, at every rename of the
    group file; and a rerun from each such state (the cut WAL, that group file) applies every
    record exactly once."""
    log = str(tmp_path / "orders")
    produce(log, 400)
    db = os.path.realpath(str(tmp_path / "r.db"))
    trace = str(tmp_path / "trace")
    follow_under_strace(strace, trace, log, ["--group", "g", "--sqlite", db, "--batch", "20"],
                        subprocess.DEVNULL, rounds=3)
    seq = calls(trace)
    wal = db + "-wal"
    wal_writes = [c for c in seq if c.name == "pwrite64" and fd_path(c.text) == wal]
    first = wal_writes[0].start
    # the simulation below keeps the database file as it is: true while no checkpoint wrote it
    assert not [c for c in seq if c.name == "pwrite64" and fd_path(c.text) == db and c.start > first]
    writes = group_writes(seq)
    assert len(writes) >= 3, len(writes)
    wal_now = open(wal, "rb").read()
    records = sorted((r["partition"], r["offset"]) for r in log_records(log))
    for k, (i, named, gbytes) in enumerate(writes):
        sync = last_sync_before(seq, i, wal)
        assert sync is not None, f"group file rename {k} comes before any fsync of the WAL"
        assert last_sync_before(seq, i, os.path.dirname(db)) is not None
        synced = max(int(m.group(2)) + int(m.group(1)) for c in wal_writes if c.end < sync.start
                     for m in [re.search(r", (\d+), (\d+)\) = \d+$", c.text)] if m)
        cut = tmp_path / f"cut{k}"
        cut.mkdir()
        shutil.copyfile(db, cut / "r.db")
        (cut / "r.db-wal").write_bytes(wal_now[:synced])
        have = db_offsets(str(cut / "r.db"), "g")
        for p, o in named.items():
            assert have.get(p, -1) >= o, f"rename {k}: the group file names {named}, the synced WAL {have}"
        set_group_file(log, "g", gbytes)
        p = run_cli("consume", log, "--group", "g", "--sqlite", str(cut / "r.db"), "--batch", "20")
        assert p.returncode == 0, p.stderr.decode()
        assert table_keys(str(cut / "r.db"), "orders") == records, f"after a cut at rename {k}"


@pytest.mark.parametrize("when", [1, 2])
def test_sqlite_kill_between_the_wal_sync_and_the_group_rename(tmp_path, strace, when):
    """SIGKILL at the group file's rename (1: the start offsets after establishing; 2: the mirror
    after the load, its WAL fsync done): the database leads the group file, and the rerun loads
    nothing twice and nothing is lost."""
    log = str(tmp_path / "orders")
    produce(log, 3000, partitions=3)
    db = str(tmp_path / "r.db")
    args = ["consume", log, "--group", "g", "--sqlite", db, "--batch", "100"]
    p = subprocess.run([strace, "-f", "-qq", "-o", "/dev/null", "-e", "trace=rename,renameat,renameat2",
                        "-e", f"inject=rename,renameat,renameat2:signal=SIGKILL:when={when}", *CLI, *args],
                       capture_output=True, env=cli_env(), timeout=300)
    assert p.returncode in (-9, 137), (p.returncode, p.stderr.decode())
    have = db_offsets(db, "g")
    gfile = group_offsets(log, "g")
    assert have, "the offsets stored by the run were lost"
    for part, o in gfile.items():
        assert o <= have[part]
    if when == 2:
        assert have == ends(log) and gfile != have  # loaded and synced, the mirror not yet written
    q = run_cli(*args)
    assert q.returncode == 0, q.stderr.decode()
    assert table_keys(db, "orders") == sorted((r["partition"], r["offset"]) for r in log_records(log))
    assert group_offsets(log, "g") == db_offsets(db, "g") == ends(log)


def test_exec_output_on_a_file_is_synced_before_each_commit(tmp_path, strace):
    """--exec CMD writes to consume's stdout: on a regular file it is fsynced before each commit,
    after CMD exited 0 (the batch's output is in the file, on disk, before its offsets are)."""
    log = str(tmp_path / "orders")
    produce(log, 500)
    out = os.path.realpath(str(tmp_path / "out.jsonl"))
    trace = str(tmp_path / "trace")
    with open(out, "wb") as f:
        p = traced(strace, trace, "fsync,fdatasync,rename,renameat,renameat2,write",
                   ["consume", log, "--group", "g", "--exec", "cat", "--batch", "100"], stdout=f)
    assert p.returncode == 0, p.stderr.decode()
    seq = calls(trace)
    writes = group_writes(seq)
    assert len(writes) >= 5, len(writes)  # a commit per batch
    data = open(out, "rb").read()
    assert data.count(b"\n") == 500
    for n, (i, named, _) in enumerate(writes):
        sync = last_sync_before(seq, i, out)
        assert sync is not None, f"commit {n} before any fsync of the output file"
        # cat (its own process, the same file) wrote each batch before that fsync began
        synced = sum(result(c) for c in seq if c.name == "write" and fd_path(c.text) == out and c.end < sync.start)
        durable = durable_offsets(data[:synced])
        for part, o in named.items():
            assert o == 0 or durable.get(part, 0) >= o, f"commit {n}: partition {part} at {o}, {durable} on disk"


def test_sqlite_through_a_symlink_syncs_the_wal_sqlite_writes(tmp_path, strace):
    """SQLite names the WAL after the file a symlinked FILE points to: that WAL is the one synced."""
    log = str(tmp_path / "orders")
    produce(log, 300)
    (tmp_path / "real").mkdir()
    link = tmp_path / "link.db"
    link.symlink_to(tmp_path / "real" / "r.db")
    trace = str(tmp_path / "trace")
    p = traced(strace, trace, "fsync,fdatasync,rename,renameat,renameat2,write,pwrite64",
               ["consume", log, "--group", "g", "--sqlite", str(link), "--batch", "50"])
    assert p.returncode == 0, p.stderr.decode()
    seq = calls(trace)
    wal = os.path.realpath(str(tmp_path / "real" / "r.db")) + "-wal"
    writes = group_writes(seq)
    assert writes
    for k, (i, _named, _) in enumerate(writes):
        sync = last_sync_before(seq, i, wal)
        assert sync is not None
        assert last_sync_before(seq, i, os.path.dirname(wal)) is not None
        if k in (0, len(writes) - 1):
            # the start offsets and the end of the run (no batch in flight then): every commit
            # before the rename was written to the WAL before that sync began
            assert all(c.end < sync.start for c in seq[:i] if c.name == "pwrite64" and fd_path(c.text) == wal)
    assert table_keys(str(link), "orders") == sorted((r["partition"], r["offset"]) for r in log_records(log))


# --- window --follow --group into a file ---------------------------------------------------------

def test_window_follow_syncs_its_output_file_and_late_out_before_each_checkpoint(tmp_path, strace):
    log = str(tmp_path / "clicks")
    t0 = 1_763_719_200_000
    events = [{"t": t0 + i * 1000, "k": "a"} for i in range(60)] + [{"t": t0, "k": "a"}]  # the last one is late
    run_cli("produce", log, "--key-field", "k", input="".join(json.dumps(e) + "\n" for e in events), check=True)
    out, late = os.path.realpath(str(tmp_path / "rows.jsonl")), os.path.realpath(str(tmp_path / "late.jsonl"))
    trace = str(tmp_path / "trace")
    with open(out, "wb") as f:
        p = traced(strace, trace, "fsync,fdatasync,rename,renameat,renameat2",
                   ["window", log, "--tumbling", "10s", "--time-field", "t", "--follow", "--group", "g",
                    "--idle-timeout", "1s", "--late-out", late], stdout=f)
    assert p.returncode == 0, p.stderr.decode()
    # 6 windows; the last one is still open at the idle timeout, kept in the checkpoint
    assert open(out, "rb").read().count(b"\n") == 5 and open(late, "rb").read().count(b"\n") == 1
    seq = calls(trace)
    checkpoints = [i for i, c in enumerate(seq) if c.name.startswith("rename") and ".g.window.json\"" in c.text]
    assert checkpoints
    for i in checkpoints:
        synced = {fd_path(c.text) for c in seq[:i] if c.name in ("fsync", "fdatasync")}
        assert out in synced and late in synced, (out, late, synced)
    # a pipe is not synced
    trace2 = str(tmp_path / "trace2")
    p = traced(strace, trace2, "fsync,fdatasync", ["window", log, "--tumbling", "10s", "--time-field", "t",
                                                   "--follow", "--group", "g2", "--idle-timeout", "1s"])
    assert p.returncode == 0 and p.stdout.count(b"\n") == 5
    assert not [c for c in calls(trace2) if fd_path(c.text).startswith("pipe:")]
