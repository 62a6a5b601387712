"""A group run commits where --from put it even when it delivers nothing: the records before
that start were passed over on purpose (like records a filter skips), so the next run without
--from resumes there instead of replaying the history the first run skipped (Kafka commits a
group's position after a seek the same way)."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from conftest import run_cli


def produce(log: str, *values: int, partitions: int = 1) -> None:
    run_cli("produce", log, "--partitions", str(partitions), input="".join(f"{v}\n" for v in values), check=True)


def values(log: str, *args: str) -> list[int]:
    return [int(x) for x in run_cli("consume", log, *args, "--value", check=True).stdout.split()]


def committed(log: str, group: str) -> dict[str, int]:
    with open(os.path.join(log, "groups", f"{group}.json"), "rb") as f:
        return json.load(f)["offsets"]


@pytest.mark.parametrize("start", [["--from", "latest"], ["--from", "@99999999999999"], ["--from", "99"],
                                   ["--follow", "--from", "latest", "--idle-timeout", "300ms"]],
                         ids=["latest", "future-time", "past-the-end", "follow-idle"])
def test_a_start_that_delivers_nothing_is_committed(tmp_path, start) -> None:
    log = str(tmp_path / "LT")
    produce(log, 1, 2, 3)
    assert run_cli("consume", log, "-g", "new", *start, check=True).stdout == b""
    assert committed(log, "new") == {"0": 3}
    produce(log, 4)
    assert values(log, "-g", "new") == [4]


def test_every_partition_owned_is_committed_and_a_later_from_moves_the_group(tmp_path) -> None:
    log = str(tmp_path / "orders")
    produce(log, *range(10), partitions=3)
    ends = {str(p): len(lines) for p, lines in
            enumerate(run_cli("consume", log, "--partition", str(p), check=True).stdout.splitlines()
                      for p in range(3))}
    run_cli("consume", log, "-g", "g", "--from", "latest", check=True)
    assert committed(log, "g") == ends
    # --exec with nothing to run: the command never runs, the start is committed all the same
    run_cli("consume", log, "-g", "x", "--from", "latest", "--exec", "exit 1", check=True)
    assert committed(log, "x") == ends
    # --from earliest given to a group that had read everything: it reads again from the start
    # (the committed offsets win only when --from is not given)
    assert sorted(values(log, "-g", "g", "--from", "earliest", "--max", "0")) == []
    assert committed(log, "g") == ends  # --max 0 writes and commits nothing
    assert sorted(values(log, "-g", "g", "--from", "earliest")) == list(range(10))


def test_a_start_past_until_is_committed_and_never_past_what_was_delivered(tmp_path) -> None:
    log = str(tmp_path / "LT")
    produce(log, *range(10))
    # --from 2 --until 5: records 2..4 delivered, the group stops at the bound
    assert values(log, "-g", "u", "--from", "2", "--until", "5") == [2, 3, 4]
    assert committed(log, "u") == {"0": 5}
    # a filter that keeps nothing after --from 7: 7..9 are passed over, committed
    assert values(log, "-g", "f", "--from", "7", "--where", "value == 999") == []
    assert committed(log, "f") == {"0": 10}


def test_sqlite_keeps_the_start_in_the_database(tmp_path) -> None:
    """--sqlite: the same rule, and its offsets live in the database (stored with the start in
    one transaction); the group file mirrors them."""
    log, db = str(tmp_path / "LT"), str(tmp_path / "t.db")
    produce(log, 1, 2, 3)
    run_cli("consume", log, "-g", "s", "--sqlite", db, "--from", "latest", check=True)
    assert committed(log, "s") == {"0": 3}
    produce(log, 4)
    run_cli("consume", log, "-g", "s", "--sqlite", db, check=True)
    con = sqlite3.connect(db)
    assert [v for (v,) in con.execute('SELECT value FROM "LT" ORDER BY "offset"')] == ["4"]
    assert con.execute("SELECT next_offset FROM streamctl_offsets").fetchall() == [(4,)]
