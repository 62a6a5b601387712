"""consume --exec --dead-letter under kill -9 at every fsync and every rename of a search.

The kills are injected with strace into consume alone (no -f: the command it runs is not
traced), at each durability point of a run that splits batches around three poison records:
the dead-letter log's creation and appends, and every offset commit. After each crash the
group's offsets never point past a record that is neither delivered nor in the dead-letter
log; a clean rerun then delivers every good record and leaves each poison record in the
dead-letter log exactly once (the crash between an append and its commit included).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from conftest import CLI, cli_env, log_records, run_cli

N = 16
POISON = {2, 5, 13}


def _make(base: str) -> str:
    log = os.path.join(base, "orders")
    lines = "".join(json.dumps({"key": f"k{i}", "value": {"i": i, "poison": i in POISON}}) + "\n"
                    for i in range(N))
    run_cli("produce", log, "--envelope", input=lines.replace('"poison": false', '"ok": true'), check=True)
    return log


def _args(log: str, dead: str, done: str) -> list[str]:
    cmd = (f"t=$(mktemp {done}/.tmp.XXXXXX); cat > $t; "
           f"if grep -q poison $t; then rm $t; echo poison >&2; exit 3; fi; mv $t $t.ok")
    return ["consume", log, "--group", "g", "--batch", "8", "--format", "%o %s\\n", "--dead-letter", dead,
            "--exec", cmd]


def _delivered(done: str) -> list[int]:
    out: list[int] = []
    for name in os.listdir(done):
        if name.endswith(".ok"):
            with open(os.path.join(done, name)) as f:
                out += [int(ln.split()[0]) for ln in f.read().splitlines()]
    return out


def _dead(dead: str) -> list[int]:
    if not os.path.exists(os.path.join(dead, "streamctl.json")):
        return []
    return [int(r["headers"]["streamctl.source"].rpartition("@")[2]) for r in log_records(dead)]


def _committed(log: str) -> int:
    try:
        with open(os.path.join(log, "groups", "g.json")) as f:
            return json.load(f)["offsets"].get("0", 0)
    except FileNotFoundError:
        return 0


def _calls(strace: str, syscall: str, args: list[str]) -> int:
    trace = args[1] + ".trace"
    subprocess.run([strace, "-qq", "-e", f"trace={syscall}", "-o", trace, *CLI, *args],
                   capture_output=True, env=cli_env(), timeout=120, check=True)
    with open(trace, "rb") as f:
        return sum(1 for ln in f if ln.startswith(f"{syscall}(".encode()))


@pytest.mark.parametrize("syscall", ["fsync", "renameat"])  # files are renamed within an opened folder (dir_fd)
def test_kill_at_every_durability_point_of_a_search(tmp_path, strace: str, syscall: str) -> None:
    clean = str(tmp_path / "clean")
    os.mkdir(clean)
    log = _make(clean)
    probe = str(tmp_path / "probe")
    shutil.copytree(clean, probe)
    os.mkdir(os.path.join(probe, "done"))
    calls = _calls(strace, syscall, _args(os.path.join(probe, "orders"), os.path.join(probe, "orders.dead"),
                                          os.path.join(probe, "done")))
    assert calls >= 8  # the dead-letter appends and the commits of the halves
    crashed = 0
    for k in range(1, calls + 1):
        base = str(tmp_path / f"k{k}")
        shutil.copytree(clean, base)
        log = os.path.join(base, "orders")
        dead, done = os.path.join(base, "orders.dead"), os.path.join(base, "done")
        os.mkdir(done)
        args = _args(log, dead, done)
        r = subprocess.run([strace, "-qq", "-o", "/dev/null", "-e", f"trace={syscall}",
                            "-e", f"inject={syscall}:signal=SIGKILL:when={k}", *CLI, *args],
                           capture_output=True, env=cli_env(), timeout=120)
        crashed += r.returncode != 0
        # after the crash: everything below the committed offset was delivered or set aside
        upto = _committed(log)
        got, aside = set(_delivered(done)), _dead(dead)
        assert len(aside) == len(set(aside)) and set(aside) <= POISON, (k, aside)
        assert not got & POISON
        for off in range(upto):
            assert off in got or off in aside, (k, off, upto)
        # a rerun finishes the job: nothing lost, no dead letter twice
        again = run_cli(*args)
        assert again.returncode == 0, again.stderr
        assert set(_delivered(done)) == set(range(N)) - POISON, k
        assert sorted(_dead(dead)) == sorted(POISON), (k, _dead(dead))
        assert _committed(log) == N
        assert run_cli("check", log).returncode == 0 and run_cli("check", dead).returncode == 0
        shutil.rmtree(base)
    assert crashed == calls  # every injected kill landed
