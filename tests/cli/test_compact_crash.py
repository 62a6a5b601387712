"""kill -9 during compaction: at random moments (a forked compactor killed in a loop) and exactly
at each rename/link/unlink (strace fault injection). After every crash the latest value of every
key equals the reference model, readers see increasing offsets, `check` passes, and the next
writer, compaction or `check --repair` finishes or removes the leftovers."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time

import orjson
import pytest

from conftest import CLI, cli_env, run_cli
from streamctl.maintenance.check import check
from streamctl.maintenance.compaction import CompactOptions, compact
from streamctl.storage import reader, record, replace
from streamctl.storage.appender import Appender
from streamctl.storage.log import open_log, open_or_create

STRACE = shutil.which("strace") or ("/usr/bin/strace" if os.path.exists("/usr/bin/strace") else None)


def table(lines: list[bytes]) -> dict[bytes, bytes]:
    """The reference model: replay the changelog into a dict (tombstones delete; null keys ignored)."""
    out: dict[bytes, bytes] = {}
    for line in sorted(lines, key=record.offset_of):
        k = record.key_bytes(line)
        if k == b"null":
            continue
        if record.is_tombstone(line):
            out.pop(k, None)
        else:
            out[k] = record.value_bytes(line)
    return out


def append_batch(path: str, rnd: random.Random, n: int) -> list[bytes]:
    lg = open_log(path)
    items = []
    for i in range(n):
        key = None if rnd.random() < 0.05 else f"k{rnd.randrange(25)}"
        value = b"null" if key is not None and rnd.random() < 0.12 else orjson.dumps({"i": i, "r": rnd.random()})
        items.append((record.key_json(key), value, None))
    lines: list[bytes] = []
    with Appender(lg, fsync="never") as app:
        for j in range(0, n, 7):  # small batches: many segments rolls
            lines.extend(app.append(0, items[j:j + 7], want_lines=True).lines or [])
    return lines


def make_log(path: str, seed: int, n: int = 600) -> list[bytes]:
    open_or_create(path, 1, 1024, 0)
    return append_batch(path, random.Random(seed), n)


def leftovers(path: str) -> list[str]:
    return [n for n in os.listdir(os.path.join(path, "p0")) if n.endswith((replace.CLEANED, replace.SWAP, replace.INSTALL))]


def verify(path: str, appended: list[bytes]) -> None:
    """The guarantees after a crash, before anything repairs the log."""
    lg = open_log(path)
    seen = list(reader.iter_lines(lg, 0, 0, None))
    offs = [record.offset_of(ln) for ln in seen]
    assert offs == sorted(set(offs)), "a reader sees increasing offsets, each once"
    assert table(seen) == table(appended), "the latest value of every key is still there"
    original = {record.offset_of(ln): ln for ln in appended}
    assert all(original[record.offset_of(ln)] == ln for ln in seen), "records are byte-identical"
    report = check(lg)
    assert report.ok, [str(p) for p in report.problems]


def verify_repaired(path: str, appended: list[bytes]) -> None:
    lg = open_log(path)
    assert check(lg, repair=True).ok
    report = check(lg)
    assert report.ok and not report.problems, [str(p) for p in report.problems]
    assert not leftovers(path)
    direct = [ln for s in lg.segments(0) for ln in open(s.path, "rb")]
    assert table(direct) == table(appended)


def _compact_in_child(path: str, opts: CompactOptions) -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            compact(open_log(path), opts)
            code = 0
        finally:
            os._exit(code)
    return pid


def test_kill_9_at_random_moments(tmp_path) -> None:
    path = str(tmp_path / "log")
    rnd = random.Random(42)
    appended = make_log(path, 1)
    est = 0.0
    outcomes: dict[str, int] = {}
    for rnd_no in range(36):
        # fresh records every round, so every compaction has work to do
        appended += append_batch(path, rnd, rnd.randint(40, 140))
        assert not leftovers(path), "the writer finishes or removes what the last crash left"
        opts = CompactOptions(roll=rnd.random() < 0.7, tombstone_retention_ms=rnd.choice([0, 86_400_000]))
        if rnd_no % 6 == 0:
            # measure (and keep measuring) how long one takes here, so kills land anywhere inside it
            t0 = time.perf_counter()
            pid = _compact_in_child(path, opts)
            _, status = os.waitpid(pid, 0)
            est = max(time.perf_counter() - t0, 0.002)
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            outcomes["finished"] = outcomes.get("finished", 0) + 1
        else:
            pid = _compact_in_child(path, opts)
            time.sleep(rnd.uniform(0, est))
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            left = ",".join(sorted({n.rsplit(".", 1)[1] for n in leftovers(path)})) or "-"
            what = f"killed({left})" if os.WIFSIGNALED(status) else "finished"
            outcomes[what] = outcomes.get(what, 0) + 1
        verify(path, appended)
        if rnd_no % 2:
            verify_repaired(path, appended)
    killed = sum(n for k, n in outcomes.items() if k.startswith("killed"))
    assert killed >= 10, outcomes
    # a last, uninterrupted compaction leaves exactly the latest record of every key
    compact(open_log(path), CompactOptions(roll=True, tombstone_retention_ms=0))
    verify_repaired(path, appended)
    direct = [ln for s in open_log(path).segments(0) for ln in open(s.path, "rb")]
    keyed = [ln for ln in direct if record.key_bytes(ln) != b"null"]
    assert len(keyed) == len(table(appended))


def _strace(path: str, expr: str, out: str = "/dev/null") -> subprocess.CompletedProcess:
    assert STRACE is not None
    return subprocess.run([STRACE, "-f", "-qq", "-o", out, "-e", expr,
                           *CLI, "compact", path, "--roll", "--tombstone-retention", "0s"],
                          capture_output=True, env=cli_env(), timeout=60)


@pytest.mark.slow
@pytest.mark.parametrize("syscall", ["rename", "link", "unlink"])
def test_sigkill_injected_at_each_swap_step(tmp_path, syscall: str) -> None:
    base = str(tmp_path / "base")
    appended = make_log(base, 7, n=160)
    # count the calls an uninterrupted compaction of this log makes
    probe = str(tmp_path / "probe")
    shutil.copytree(base, probe)
    trace = str(tmp_path / "trace")
    assert _strace(probe, f"trace={syscall}", trace).returncode == 0
    calls = sum(1 for ln in open(trace) if f"{syscall}(" in ln)
    assert calls >= 2, f"expected several {syscall} calls in a compaction, got {calls}"
    ks = list(range(1, calls + 1))
    if len(ks) > 6:  # unlink: every deleted segment is one; sample first, last and some between
        ks = sorted({1, 2, calls // 2, calls - 1, calls})
    for k in ks:
        path = str(tmp_path / f"k{k}")
        shutil.copytree(base, path)
        proc = _strace(path, f"inject={syscall}:signal=SIGKILL:when={k}")
        assert proc.returncode in (-9, 137), (k, proc.returncode, proc.stderr)
        verify(path, appended)
        # the next compaction finishes the interrupted one and compacts the rest
        assert run_cli("compact", path, "--roll", "--tombstone-retention", "0s").returncode == 0
        assert not leftovers(path)
        verify_repaired(path, appended)
        shutil.rmtree(path)


def test_leftovers_reported_by_check_and_repaired(tmp_path) -> None:
    path = str(tmp_path / "log")
    appended = make_log(path, 3)
    pdir = os.path.join(path, "p0")
    # a dead compactor's half-written file, and a swap stopped right after its commit point
    with open(replace.cleaned_path(pdir, 0, 1), "wb") as f:
        f.write(b'{"offset":0')
    segs = open_log(path).segments(0)
    keep = [ln for ln in open(segs[0].path, "rb")]  # a merge that removed nothing: a valid swap
    run_path = os.path.join(pdir, replace.run_name(0, segs[1].base + 1, replace.SWAP))
    with open(run_path, "wb") as f:
        f.writelines(keep + [ln for ln in open(segs[1].path, "rb")])
    proc = run_cli("check", path)
    assert proc.returncode == 0, proc.stdout  # harmless: reported, not a failure
    assert b".cleaned: left by an interrupted compaction" in proc.stdout
    assert b".swap: left by an interrupted compaction" in proc.stdout
    proc = run_cli("check", path, "--repair")
    assert proc.returncode == 0 and b"(repaired)" in proc.stdout
    assert not leftovers(path)
    assert [s.base for s in open_log(path).segments(0)][:2] == [0, segs[2].base]
    proc = run_cli("check", path)
    assert proc.returncode == 0 and b"left by" not in proc.stdout
    assert table([ln for s in open_log(path).segments(0) for ln in open(s.path, "rb")]) == table(appended)


def test_half_installed_swap_reads_and_checks_clean(tmp_path) -> None:
    """Step 3 done (the new segment is in place), step 4 not (old segments still there)."""
    path = str(tmp_path / "log")
    appended = make_log(path, 5)
    pdir = os.path.join(path, "p0")
    segs = open_log(path).segments(0)
    merged = [ln for s in segs[:3] for ln in open(s.path, "rb")]
    latest = {}
    for ln in merged:
        latest[record.key_bytes(ln)] = ln
    # what compaction keeps: records without a key, and each key's latest unless a later closed segment has it
    later_keys = {record.key_bytes(ln) for s in segs[3:-1] for ln in open(s.path, "rb")}
    kept = [ln for ln in merged if record.key_bytes(ln) == b"null"
            or (latest[record.key_bytes(ln)] is ln and record.key_bytes(ln) not in later_keys)]
    end = segs[2].base + 1
    cleaned = replace.cleaned_path(pdir, 0, end)
    with open(cleaned, "wb") as f:
        f.writelines(kept)
    swap_path = os.path.join(pdir, replace.run_name(0, end, replace.SWAP))
    os.rename(cleaned, swap_path)
    os.link(swap_path, os.path.join(pdir, "00000000000000000000.jsonl.install"))
    os.rename(os.path.join(pdir, "00000000000000000000.jsonl.install"), segs[0].path)
    verify(path, appended)
    assert replace.superseded(pdir) == {segs[1].path, segs[2].path}
    # the next append finishes it
    appended += append_batch(path, random.Random(9), 5)
    assert not leftovers(path)
    assert [s.base for s in open_log(path).segments(0)][:2] == [0, segs[3].base]
    verify_repaired(path, appended)
