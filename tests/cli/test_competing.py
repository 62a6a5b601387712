"""Competing consumers: members of one group split partitions; a dead member's partitions move on."""

from __future__ import annotations

import collections
import json
import os
import select
import subprocess
import threading
import time

from conftest import CLI, cli_env, run_cli


class Member:
    """A `consume --group G --follow` process whose stdout is collected by a thread."""

    def __init__(self, log: str, group: str, *extra: str) -> None:
        self.proc = subprocess.Popen([*CLI, "consume", log, "--group", group, "--follow", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
        self.raw = bytearray()
        self._t = threading.Thread(target=self._pump, daemon=True)
        self._t.start()

    def _pump(self) -> None:
        fd = self.proc.stdout.fileno()
        while True:
            r, _, _ = select.select([fd], [], [], 0.5)
            if r:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return
                self.raw += chunk

    def records(self) -> list[tuple[int, int]]:
        text = bytes(self.raw)
        text = text[: text.rfind(b"\n") + 1]
        return [(r["partition"], r["offset"]) for r in map(json.loads, text.splitlines())]

    def wait_records(self, n: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.records()) < n:
            assert time.monotonic() < deadline, f"member got {len(self.records())} of {n} records"
            time.sleep(0.05)

    def finish(self, timeout: float = 20.0) -> bytes:
        self.proc.wait(timeout=timeout)
        self._t.join(timeout=5)
        return self.proc.stderr.read()


def produce(log: str, start: int, n: int, extra: tuple[str, ...] = ()) -> None:
    data = "".join(json.dumps({"k": f"user-{i % 23}", "i": i}) + "\n" for i in range(start, start + n))
    run_cli("produce", log, "--key-field", "k", *extra, input=data, check=True)


def all_records(log: str) -> set[tuple[int, int]]:
    out = run_cli("consume", log, check=True).stdout
    return {(r["partition"], r["offset"]) for r in map(json.loads, out.splitlines())}


def test_two_members_four_partitions_each_record_to_exactly_one(logdir: str) -> None:
    produce(logdir, 0, 200, ("--partitions", "4"))
    first = Member(logdir, "g", "--idle-timeout", "2500ms")
    first.wait_records(200)  # alone, it holds all four partitions
    second = Member(logdir, "g", "--idle-timeout", "2500ms")
    time.sleep(1.5)  # the first releases two partitions, the second claims them
    for b in range(3):
        produce(logdir, 200 + b * 30, 30)
        time.sleep(0.1)
    err1, err2 = first.finish(), second.finish()
    assert first.proc.returncode == 0, err1
    assert second.proc.returncode == 0, err2
    got = first.records() + second.records()
    counts = collections.Counter(got)
    assert [r for r, c in counts.items() if c > 1] == []
    assert set(got) == all_records(logdir)
    late_first = {p for p, o in first.records()[200:]}
    late_second = {p for p, o in second.records()}
    assert late_second, "the member that started second never got a partition"
    assert not late_first & late_second, "a partition was read by both members at once"


def test_kill9_member_survivor_takes_over_from_committed_offset(logdir: str) -> None:
    produce(logdir, 0, 40, ("--partitions", "4"))
    a = Member(logdir, "g", "--idle-timeout", "2500ms")
    b = Member(logdir, "g")
    n = 40
    deadline = time.monotonic() + 15
    # feed until both members have live records (the split has happened)
    while not (a.records() and b.records() and len(a.records()) + len(b.records()) >= n):
        assert time.monotonic() < deadline, "the members never split the partitions"
        produce(logdir, n, 10)
        n += 10
        time.sleep(0.2)
    b.proc.kill()  # kill -9: its claims go with it, its uncommitted output is repeated
    b.proc.wait()
    b._t.join(timeout=5)
    killed_at = n
    for _ in range(3):
        produce(logdir, n, 10)
        n += 10
        time.sleep(0.1)
    err = a.finish()
    assert a.proc.returncode == 0, err
    everything = all_records(logdir)
    got_a, got_b = a.records(), b.records()
    assert len(everything) == n
    assert set(got_a) | set(got_b) == everything, "a record was lost"
    dups = set(got_a) & set(got_b)
    # only what b wrote after its last commit is repeated: at most one batch (one produce call here)
    assert len(dups) <= 10, f"{len(dups)} duplicates"
    for p, o in dups:  # and those are the end of what b had of that partition
        assert o >= max(off for q, off in got_b if q == p) - 10
    assert killed_at < n


def test_different_groups_each_get_everything(logdir: str) -> None:
    produce(logdir, 0, 50, ("--partitions", "3"))
    g1 = Member(logdir, "g1", "--idle-timeout", "1500ms")
    g2 = Member(logdir, "g2", "--idle-timeout", "1500ms")
    g1.finish()
    g2.finish()
    every = all_records(logdir)
    assert sorted(g1.records()) == sorted(every)
    assert sorted(g2.records()) == sorted(every)


def test_exec_run_without_follow_reads_only_free_partitions(logdir: str, tmp_path) -> None:
    produce(logdir, 0, 40, ("--partitions", "2"))
    holder = Member(logdir, "g", "--partition", "0", "--idle-timeout", "5s")
    holder.wait_records(1)
    out = tmp_path / "out.jsonl"
    r = run_cli("consume", logdir, "--group", "g", "--exec", f"cat >> {out}")
    assert r.returncode == 0, r.stderr
    assert b"read by other members" in r.stderr
    parts = {json.loads(x)["partition"] for x in out.read_bytes().splitlines()}
    assert parts == {1}
    holder.proc.terminate()
    holder.finish()
    assert holder.proc.returncode == 0


def test_assignment_balances_and_dead_members_free_their_partitions(logdir: str) -> None:
    """The claim logic in-process: flocks on separate open files behave as separate members."""
    from streamctl.groups.membership import Membership
    from streamctl.storage import log as logmod

    lg = logmod.open_or_create(logdir, 4, None, 0)
    a = Membership(lg, "g", [0, 1, 2, 3])
    assert sorted(a.rebalance().claimed) == [0, 1, 2, 3]  # alone: everything
    only0 = Membership(lg, "g", [0])
    b = Membership(lg, "g", [0, 1, 2, 3])
    assign = a.assignment()
    assert assign == b.assignment() == only0.assignment()
    assert assign[0] == only0.slot  # the member limited to partition 0 gets it
    assert sorted(assign.values()).count(a.slot) == 2 and sorted(assign.values()).count(b.slot) == 1
    change = a.rebalance()
    assert sorted(change.to_release) == sorted(p for p, s in assign.items() if s != a.slot)
    a.release(change.to_release)
    assert only0.rebalance().claimed == [0]
    assert b.rebalance().claimed == [p for p, s in sorted(assign.items()) if s == b.slot]
    # b dies: a takes its partition back on a rebalance
    b.close()
    assert a.rebalance().claimed == [p for p, s in sorted(assign.items()) if s == b.slot]
    # a run that does not follow takes only free partitions and is not a member
    transient = Membership(lg, "g", [0, 1, 2, 3], register=False)
    assert transient.claim_free() == []
    only0.close()
    assert transient.claim_free() == [0]
    assert a.assignment().get(0) == a.slot
    for m in (a, transient):
        m.close()
