"""compact: latest value per key (against a replayed reference model), byte-identical records,
offsets kept, tombstone retention, --min-lag, merges, dry run, and compaction beside live
producers and a follower."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

import orjson
import pytest

from conftest import CLI, cli_env, run_cli
from streamctl.errors import StorageError
from streamctl.maintenance.compaction import CompactOptions, compact
from streamctl.storage import record, replace
from streamctl.storage.appender import Appender
from streamctl.storage.log import open_log, open_or_create

KEYS = ["k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "ké", 'a"b', "x\\y", "k11"]


def gen_records(n: int, seed: int, keys: list[str] = KEYS, tombstones: float = 0.08,
                null_keys: float = 0.05) -> list[dict]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        r = rnd.random()
        key = None if r < null_keys else rnd.choice(keys)
        if key is not None and rnd.random() < tombstones:
            value = None
        else:
            # values that look like envelopes inside must not confuse the byte scan
            value = rnd.choice([{"n": i}, {"key": "k0", "value": i}, [i, "\"key\":"], f"s{i}\n", i * 1.5])
        out.append({"key": key, "value": value})
    return out


def produce(log: str, recs: list[dict], *extra: str) -> list[bytes]:
    """Append records with `produce --envelope --echo`; returns the stored lines."""
    data = b"".join(orjson.dumps(r) + b"\n" for r in recs)
    proc = run_cli("produce", log, "--envelope", "--echo", "--segment-bytes", "1KiB", *extra, input=data,
                   check=True)
    return proc.stdout.splitlines(keepends=True)


def segment_lines(log: str, p: int = 0) -> list[bytes]:
    """Every stored line of partition p, reading the segment files directly."""
    lg = open_log(log)
    out: list[bytes] = []
    for seg in lg.segments(p):
        with open(seg.path, "rb") as f:
            out.extend(f.read().splitlines(keepends=True))
    return out


def latest_lines(lines: list[bytes]) -> dict[bytes, bytes]:
    """The reference model: a dict replayed from the changelog (key -> its latest line)."""
    model: dict[bytes, bytes] = {}
    for line in sorted(lines, key=record.offset_of):
        k = record.key_bytes(line)
        if k != b"null":
            model[k] = line
    return model


def table(lines: list[bytes]) -> dict[bytes, bytes]:
    """key -> latest value text, deletes applied (what a CDC consumer materializes)."""
    out: dict[bytes, bytes] = {}
    for k, line in latest_lines(lines).items():
        if not record.is_tombstone(line):
            out[k] = record.value_bytes(line)
    return out


def by_partition(lines: list[bytes]) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for line in lines:
        out.setdefault(record.envelope(line)[1], []).append(line)
    return out


def assert_compacted(log: str, p: int, appended: list[bytes], *, tombstones_kept: bool = True) -> None:
    after = segment_lines(log, p)
    offs = [record.offset_of(ln) for ln in after]
    assert offs == sorted(set(offs)), "offsets must stay strictly increasing"
    original = {record.offset_of(ln): ln for ln in appended}
    for ln in after:
        assert original[record.offset_of(ln)] == ln, "kept records are byte-identical"
    model = latest_lines(appended)
    if tombstones_kept:
        assert latest_lines(after) == model
    assert table(after) == table(appended)
    # null-key records are kept as they are
    nulls = [ln for ln in appended if record.key_bytes(ln) == b"null"]
    assert [ln for ln in after if record.key_bytes(ln) == b"null"] == nulls


def build(path: str, batches: list[tuple[int, list[tuple[str | None, object]]]], segment_bytes: int = 1024,
          partitions: int = 1) -> list[bytes]:
    """A log written through the core Appender with a controlled clock: [(ts, [(key, value)])]."""
    lg = open_or_create(path, partitions, segment_bytes, 0)
    lines: list[bytes] = []
    clock = {"t": 0}
    with Appender(lg, fsync="never", clock=lambda: clock["t"]) as app:
        for ts, items in batches:
            clock["t"] = ts
            enc = [(record.key_json(k), orjson.dumps(v), None) for k, v in items]
            lines.extend(app.append(0, enc, want_lines=True).lines or [])
    return lines


def snapshot(log: str) -> dict[str, tuple[int, int, bytes]]:
    out = {}
    for root, _, files in os.walk(log):
        for f in files:
            path = os.path.join(root, f)
            st = os.stat(path)
            with open(path, "rb") as fh:
                out[path] = (st.st_ino, st.st_mtime_ns, fh.read())
    return out


# --- the reference model -----------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_latest_value_per_key_equals_reference_model(logdir: str, seed: int) -> None:
    appended = produce(logdir, gen_records(400, seed), "--partitions", "2")
    parts = by_partition(appended)
    proc = run_cli("compact", logdir, "--roll", check=True)
    assert b"->" in proc.stdout
    for p in (0, 1):
        assert_compacted(logdir, p, parts[p])
        # every key's latest record (tombstones included, 24h default retention) and nothing older
        keyed = [ln for ln in segment_lines(logdir, p) if record.key_bytes(ln) != b"null"]
        assert len(keyed) == len(latest_lines(parts[p]))
    assert run_cli("check", logdir).returncode == 0
    # consume sees the same table
    out = run_cli("consume", logdir, check=True).stdout.splitlines(keepends=True)
    assert table(out) == table(appended)


def test_without_roll_active_segment_untouched(logdir: str) -> None:
    appended = produce(logdir, gen_records(300, 7))
    lg = open_log(logdir)
    active = lg.segments(0)[-1]
    st = os.stat(active.path)
    with open(active.path, "rb") as f:
        active_bytes = f.read()
    run_cli("compact", logdir, check=True)
    st2 = os.stat(active.path)
    with open(active.path, "rb") as f:
        assert f.read() == active_bytes
    assert (st.st_ino, st.st_mtime_ns) == (st2.st_ino, st2.st_mtime_ns)
    assert_compacted(logdir, 0, appended)
    # closed segments hold one record per key at most (superseded only by the active one is allowed)
    closed_lines = [ln for s in open_log(logdir).segments(0)[:-1] for ln in open(s.path, "rb")]
    keys = [record.key_bytes(ln) for ln in closed_lines if record.key_bytes(ln) != b"null"]
    assert len(keys) == len(set(keys))


def test_nothing_to_do_rewrites_nothing(logdir: str) -> None:
    produce(logdir, gen_records(300, 8))
    run_cli("compact", logdir, "--roll", check=True)
    before = snapshot(logdir)
    proc = run_cli("compact", logdir, "--json", check=True)
    after = snapshot(logdir)
    assert {k: v for k, v in after.items() if not k.endswith(replace.COMPACT_LOCK)} == \
        {k: v for k, v in before.items() if not k.endswith(replace.COMPACT_LOCK)}
    summary = orjson.loads(proc.stdout)
    assert summary["total"]["segments_rewritten"] == 0


def test_small_neighbouring_segments_are_merged(logdir: str) -> None:
    # one hot key: every closed 1 KiB segment shrinks to (almost) nothing
    recs = [{"key": "hot" if i % 10 else f"k{i}", "value": {"i": i}} for i in range(300)]
    appended = produce(logdir, recs)
    n_before = len(open_log(logdir).segments(0))
    summary = orjson.loads(run_cli("compact", logdir, "--json", check=True).stdout)
    segs = open_log(logdir).segments(0)
    assert len(segs) < n_before / 3
    row = summary["partitions"][0]
    assert (row["segments_before"], row["segments_after"]) == (n_before, len(segs))
    assert row["records_after"] == len(segment_lines(logdir))
    for s in segs[:-1]:
        assert s.size() <= 1024 or len(open(s.path, "rb").read().splitlines()) == 1
    assert_compacted(logdir, 0, appended)
    assert run_cli("check", logdir).returncode == 0


def test_dry_run_changes_nothing(logdir: str) -> None:
    produce(logdir, gen_records(300, 9))
    before = snapshot(logdir)
    dry = orjson.loads(run_cli("compact", logdir, "--roll", "--dry-run", "--json", check=True).stdout)
    assert snapshot(logdir) == before
    assert dry["dry_run"] is True
    real = orjson.loads(run_cli("compact", logdir, "--roll", "--json", check=True).stdout)
    for f in ("records_before", "records_after", "bytes_before", "bytes_after"):
        assert dry["total"][f] == real["total"][f], f


def test_summary_table_and_json(logdir: str) -> None:
    produce(logdir, gen_records(200, 10), "--partitions", "3")
    proc = run_cli("compact", logdir, "--dry-run", check=True)
    text = proc.stdout.decode()
    assert "partition" in text and "records" in text and "total" in text and "dry run" in text
    js = orjson.loads(run_cli("compact", logdir, "--json", check=True).stdout)
    assert [r["partition"] for r in js["partitions"]] == [0, 1, 2]
    for key in ("segments_before", "segments_after", "records_before", "records_after", "bytes_before",
                "bytes_after"):
        assert key in js["partitions"][0] and key in js["total"]
    assert proc.stderr == b""  # no progress bar when stderr is not a terminal


def test_bad_flags_exit_2(logdir: str) -> None:
    produce(logdir, gen_records(10, 1))
    assert run_cli("compact", logdir, "--min-lag", "soon").returncode == 2
    assert run_cli("compact", logdir, "--retention-bytes", "lots").returncode == 2
    assert run_cli("compact", logdir + "-missing").returncode == 1


# --- tombstones, min-lag, null keys: the core with a controlled clock ---------------------------

H = 3_600_000


def test_tombstones_kept_for_retention_then_removed(tmp_path) -> None:
    path = str(tmp_path / "log")
    appended = build(path, [
        (1 * H, [("a", 1), ("b", 1), ("c", 1)] * 10),
        (2 * H, [("a", None), ("b", 2)] * 10),
        (3 * H, [("x", i) for i in range(30)]),      # pushes the tombstones into closed segments
        (4 * H, [("c", None)]),
        (5 * H, [("y", 0)] * 30),
    ])
    lg = open_log(path)
    # 10 h after the deletes, with a 24 h retention: the tombstones stay, older values of a go
    compact(lg, CompactOptions(roll=True), now=12 * H)
    after = segment_lines(path)
    assert latest_lines(after) == latest_lines(appended)
    assert [record.key_bytes(ln) for ln in after].count(b'"a"') == 1
    # 30 h later: a's tombstone (ts 2 h) and c's (ts 4 h) have aged past 24 h
    res = compact(lg, CompactOptions(roll=True), now=2 * H + 24 * H)
    after = segment_lines(path)
    keys = [record.key_bytes(ln) for ln in after]
    assert b'"a"' not in keys          # delete and deleted value both gone
    assert keys.count(b'"c"') == 1      # c's tombstone (ts 4 h) is younger than 24 h: kept
    assert res[0].tombstones_removed == 1
    assert table(after) == table(appended)
    res = compact(lg, CompactOptions(roll=True, tombstone_retention_ms=0), now=30 * H)
    assert b'"c"' not in [record.key_bytes(ln) for ln in segment_lines(path)]
    assert table(segment_lines(path)) == table(appended)


def test_min_lag_leaves_recent_records_alone(tmp_path) -> None:
    path = str(tmp_path / "log")
    appended = build(path, [(t * H, [("a", t), ("b", t)] * 8) for t in range(1, 9)] + [(20 * H, [("z", 0)])])
    lg = open_log(path)
    now = 10 * H
    compact(lg, CompactOptions(min_lag_ms=5 * H), now=now)
    after = segment_lines(path)
    cutoff = now - 5 * H
    recent = [ln for ln in appended if record.envelope(ln)[2] > cutoff]
    old = [ln for ln in after if record.envelope(ln)[2] <= cutoff]
    assert [ln for ln in after if record.envelope(ln)[2] > cutoff] == recent  # untouched
    # among the old records, only the latest per key (as of the cutoff) survives
    assert sorted(record.key_bytes(ln) for ln in old) == [b'"a"', b'"b"']
    assert table(after) == table(appended)
    compact(lg, CompactOptions(), now=now)
    assert latest_lines(segment_lines(path)) == latest_lines(appended)


def test_null_key_records_kept_as_they_are(tmp_path) -> None:
    path = str(tmp_path / "log")
    appended = build(path, [(H, [(None, i) if i % 3 else ("k", i) for i in range(120)]),
                            (H, [(None, None), ("k", None)]), (2 * H, [("z", 1)] * 40)])
    compact(open_log(path), CompactOptions(tombstone_retention_ms=0), now=10 * H)
    after = segment_lines(path)
    assert [ln for ln in after if record.key_bytes(ln) == b"null"] == \
        [ln for ln in appended if record.key_bytes(ln) == b"null"]
    assert b'"k"' not in [record.key_bytes(ln) for ln in after]


def test_hand_written_lines_are_compacted_by_full_parse(tmp_path) -> None:
    path = str(tmp_path / "log")
    build(path, [(H, [("a", 1)])])
    seg = open_log(path).segments(0)[0].path
    # lines another tool wrote: spaces, other key order; compaction must still see their keys
    lines = [b'{"offset": 1, "partition": 0, "ts": 3600000, "key": "a", "value": 2}\n',
             b'{"partition":0,"offset":2,"ts":3600000,"value":3,"key":"b"}\n',
             b'{"offset":3,"partition":0,"ts":3600000,"key":"a","value":4}\n']
    with open(seg, "ab") as f:
        f.writelines(lines)
    with open(os.path.join(path, "p0", "00000000000000000004.jsonl"), "wb") as f:
        f.write(b'{"offset":4,"partition":0,"ts":3600000,"key":"c","value":5}\n')
    compact(open_log(path), CompactOptions(), now=2 * H)
    assert segment_lines(path) == [lines[1], lines[2],
                                   b'{"offset":4,"partition":0,"ts":3600000,"key":"c","value":5}\n']


@pytest.mark.parametrize("workers", [2, 3, 5])
def test_parallel_key_scan_gives_the_same_segments(tmp_path, workers: int) -> None:
    """The key scan forked over several processes (as for big logs) leaves byte-identical segments."""
    import shutil

    path = str(tmp_path / "log")
    build(path, [(t * H, [(f"k{(t * 7 + i) % 23}", None if i % 11 == 0 else i) for i in range(60)] + [(None, t)])
                 for t in range(1, 12)])
    shutil.copytree(path, path + "-seq")
    compact(open_log(path + "-seq"), CompactOptions(roll=True, workers=1), now=30 * H)
    res = compact(open_log(path), CompactOptions(roll=True, workers=workers), now=30 * H)
    assert res[0].records_after < res[0].records_before
    for name in sorted(os.listdir(os.path.join(path, "p0"))):
        with open(os.path.join(path, "p0", name), "rb") as a, open(os.path.join(path + "-seq", "p0", name), "rb") as b:
            assert a.read() == b.read(), name
    assert sorted(os.listdir(os.path.join(path, "p0"))) == sorted(os.listdir(os.path.join(path + "-seq", "p0")))


def test_parallel_key_scan_reports_a_corrupt_segment(tmp_path) -> None:
    path = str(tmp_path / "log")
    build(path, [(t * H, [("a", i) for i in range(40)]) for t in range(1, 8)])
    segs = open_log(path).segments(0)
    victim = segs[-2].path  # scanned by a forked worker
    data = open(victim, "rb").read()
    with open(victim, "r+b") as f:
        f.seek(data.index(b"\n") + 1)  # the second line: found by the worker's scan
        f.write(b"X")
    with pytest.raises(StorageError, match=os.path.basename(victim) + r":\d+: byte .*corrupt record"):
        compact(open_log(path), CompactOptions(roll=True, workers=3), now=30 * H)
    with open(victim, "r+b") as f:
        f.write(b"X")  # the first line: found while planning the scan
    with pytest.raises(StorageError, match=os.path.basename(victim) + ":1: byte 0: corrupt record"):
        compact(open_log(path), CompactOptions(roll=True, workers=3), now=30 * H)


def test_one_compaction_at_a_time(tmp_path) -> None:
    path = str(tmp_path / "log")
    build(path, [(H, [("a", i) for i in range(100)])])
    with replace.compaction_lock(path):
        with pytest.raises(StorageError, match="another compaction is running"):
            compact(open_log(path), CompactOptions())
    assert len(segment_lines(path)) == 100


# --- beside live producers and a follower -------------------------------------------------------


class _Reader:
    """A follower process whose stdout is collected by a thread."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.data = bytearray()
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        while chunk := self.proc.stdout.read1(1 << 16):
            self.data += chunk

    def stop_after(self, offset: int, timeout: float = 30) -> bytes:
        """Wait until the follower printed `offset` (or timeout), then SIGTERM it."""
        deadline = time.monotonic() + timeout
        needle = b'{"offset":%d,' % offset
        while needle not in self.data and time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.05)
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        self.thread.join(timeout=10)
        return bytes(self.data)


def _producer(log: str, pid: int, rounds: int, out: list[bytes], errors: list[str]) -> None:
    rnd = random.Random(pid)
    for r in range(rounds):
        recs = [{"key": f"k{rnd.randrange(15)}", "value": {"p": pid, "r": r, "i": i}} for i in range(rnd.randint(5, 30))]
        proc = run_cli("produce", log, "--envelope", "--echo", input=b"".join(orjson.dumps(x) + b"\n" for x in recs))
        if proc.returncode != 0:
            errors.append(proc.stderr.decode())
            return
        lines = proc.stdout.splitlines(keepends=True)
        if len(lines) != len(recs):
            errors.append(f"echoed {len(lines)} of {len(recs)}")
        out.extend(lines)


@pytest.mark.slow
def test_compaction_beside_two_producers_and_followers(logdir: str) -> None:
    base = produce(logdir, [{"key": f"k{i % 15}", "value": i} for i in range(200)])
    env = cli_env(STREAMCTL_FORCE_POLLING="1")
    followers = {name: _Reader([*CLI, *args, logdir], env) for name, args in
                 (("consume --follow", ["consume", "--follow"]), ("tail -f", ["tail", "-f", "-n", "1000000"]))}
    appended: list[list[bytes]] = [[], []]
    errors: list[str] = []
    threads = [threading.Thread(target=_producer, args=(logdir, i, 8, appended[i], errors)) for i in range(2)]
    for t in threads:
        t.start()
    compactions = 0
    while any(t.is_alive() for t in threads):
        proc = run_cli("compact", logdir, *(["--roll"] if compactions % 2 else []))
        assert proc.returncode == 0, proc.stderr
        compactions += 1
    for t in threads:
        t.join()
    assert not errors, errors
    run_cli("compact", logdir, "--roll", check=True)
    last = record.offset_of(segment_lines(logdir)[-1])
    outputs = {name: r.stop_after(last) for name, r in followers.items()}
    assert compactions >= 2

    everything = sorted([*base, *appended[0], *appended[1]], key=record.offset_of)
    offs = [record.offset_of(ln) for ln in everything]
    assert offs == list(range(len(offs))), "every append got its own offset"
    # no append lost: the fully compacted log is exactly the latest record of every key ever appended
    final = segment_lines(logdir)
    assert_compacted(logdir, 0, everything)
    assert latest_lines(final) == latest_lines(everything)
    assert len(final) == len(latest_lines(everything))
    # the followers saw every surviving offset, in order, each once
    for name, out in outputs.items():
        got = [record.offset_of(ln) for ln in out.splitlines()]
        assert got == sorted(set(got)), f"{name}: offsets out of order or repeated"
        missing = {record.offset_of(ln) for ln in final} - set(got)
        assert not missing, f"{name} missed surviving offsets {sorted(missing)[:10]} (saw {len(got)}, last {got[-1:]})"
    assert run_cli("check", logdir).returncode == 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


# --- property: any appends, any options, any number of compactions ------------------------------

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    given = None

if given is not None:
    _item = st.tuples(st.sampled_from(["a", "b", "c", "d", 'e"', None]), st.one_of(st.none(), st.integers(0, 9)))
    _batch = st.tuples(st.integers(0, 3 * H), st.lists(_item, min_size=1, max_size=40))
    _opts = st.tuples(st.booleans(), st.sampled_from([0, H, 24 * H]), st.sampled_from([0, H, 5 * H]),
                      st.integers(0, 30 * H), st.sampled_from([None, 1, 2, 3]))

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.tuples(st.lists(_batch, min_size=1, max_size=6), _opts), min_size=1, max_size=4))
    def test_property_compaction_keeps_the_table(steps) -> None:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "log")
            open_or_create(path, 1, 1024, 0)
            appended: list[bytes] = []
            clock = {"t": H}
            now = 0
            for batches, (roll, tomb_ret, min_lag, wait, workers) in steps:
                lg = open_log(path)
                with Appender(lg, fsync="never", clock=lambda: clock["t"]) as app:
                    for dt, items in batches:
                        clock["t"] += dt
                        enc = [(record.key_json(k), orjson.dumps(v), None) for k, v in items]
                        appended.extend(app.append(0, enc, want_lines=True).lines or [])
                now = max(now, clock["t"]) + wait
                active_before = segment_lines_of(lg.segments(0)[-1].path)
                before = segment_lines(path)
                compact(lg, CompactOptions(roll=roll, tombstone_retention_ms=tomb_ret, min_lag_ms=min_lag,
                                           workers=workers), now=now)
                after = segment_lines(path)
                offs = [record.offset_of(ln) for ln in after]
                assert offs == sorted(set(offs))
                original = {record.offset_of(ln): ln for ln in appended}
                assert all(original[record.offset_of(ln)] == ln for ln in after)
                assert table(after) == table(appended)
                # latest values (not deletes) are never removed; nor is anything younger than min-lag
                model = latest_lines(appended)
                for ln in model.values():
                    if not record.is_tombstone(ln):
                        assert ln in after
                if min_lag:
                    young = [ln for ln in before if record.envelope(ln)[2] > now - min_lag]
                    assert [ln for ln in after if record.envelope(ln)[2] > now - min_lag] == young
                if not roll:
                    assert after[len(after) - len(active_before):] == active_before
                # null-key records are all still there
                assert [ln for ln in after if record.key_bytes(ln) == b"null"] == \
                    [ln for ln in appended if record.key_bytes(ln) == b"null"]
                from streamctl.maintenance.check import check

                assert check(open_log(path)).ok


def segment_lines_of(path: str) -> list[bytes]:
    with open(path, "rb") as f:
        return f.read().splitlines(keepends=True)


@pytest.mark.parametrize("committed", [1, 3])
def test_committed_offset_compaction_removed_is_passed_over_quietly(tmp_path, committed: int) -> None:
    """A group whose committed offset compaction removed resumes at the next record without a
    word, at the head of the log (offset 1) as in its middle (offset 3): only a range retention
    deleted is told (tests/cli/test_retention.py)."""
    log = str(tmp_path / "log")
    pad = "x" * 300
    lines = [{"key": k, "value": f"{v}{pad}"} for k, v in (("a", 1), ("b", 1), ("a", 2), ("b", 2), ("c", 3))]
    lines.insert(3, {"key": "d", "value": 0})  # offsets: 0 a, 1 b, 2 a, 3 d, 4 b, 5 c
    lines.insert(4, {"key": "d", "value": 1})  # 4 d (so 3 goes), 5 b, 6 c
    run_cli("produce", log, "--envelope", "--segment-bytes", "1024", check=True,
            input="".join(orjson.dumps(x).decode() + "\n" for x in lines))
    run_cli("replay", log, "--group", "g", "--to-offset", str(committed), "--execute", check=True)
    run_cli("compact", log, "--roll", check=True)
    kept = [orjson.loads(x)["offset"] for x in run_cli("consume", log, check=True).stdout.splitlines()]
    assert committed not in kept and kept[0] > 0  # compaction removed offsets 0 and `committed`
    r = run_cli("consume", log, "--group", "g", "--format", "%o\n")
    assert (r.returncode, r.stderr) == (0, b"")
    assert [int(x) for x in r.stdout.split()] == [o for o in kept if o > committed]
