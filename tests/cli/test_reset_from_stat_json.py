"""replay --from-file takes a plan (CSV lines partition,offset) or, as SPEC's "yesterday's `stat --output
json`" suggests, that JSON itself: the group's committed offsets then are the plan that rolls it back."""

from __future__ import annotations

import json

from conftest import run_cli


def test_rollback_to_a_stat_json_snapshot(tmp_path):
    log, other = str(tmp_path / "log"), str(tmp_path / "other")
    run_cli("produce", log, "--partitions", "2", "--key-field", "k",
            input="".join(json.dumps({"k": f"k{i}"}) + "\n" for i in range(20)), check=True)
    run_cli("produce", other, input="1\n", check=True)
    run_cli("consume", log, "--group", "g", "--max", "7", check=True)
    before = run_cli("stat", log, "--output", "json", check=True).stdout
    snapshot = {g["partition"]: g["committed"] for g in json.loads(before)["groups"] if g["group"] == "g"}
    both = run_cli("stat", other, log, "--output", "json", check=True).stdout  # a list of two logs
    run_cli("consume", log, "--group", "g", check=True)  # reads on, to the end
    (tmp_path / "yesterday.json").write_bytes(before)
    (tmp_path / "both.json").write_bytes(both)
    for plan in ("yesterday.json", "both.json"):
        r = run_cli("replay", log, "--group", "g", "--from-file", str(tmp_path / plan), "--execute")
        assert r.returncode == 0, r.stderr
        now = {g["partition"]: g["committed"]
               for g in json.loads(run_cli("stat", log, "--output", "json", check=True).stdout)["groups"]}
        assert {p: c for p, c in now.items() if snapshot.get(p) is not None} == \
            {p: c for p, c in snapshot.items() if c is not None}
        run_cli("consume", log, "--group", "g", check=True)
    r = run_cli("replay", log, "--group", "nobody", "--from-file", str(tmp_path / "yesterday.json"))
    assert r.returncode == 65 and b"no committed offsets of group nobody" in r.stderr
