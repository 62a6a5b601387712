"""Durations in ISO-8601 include weeks (`P1W`, `P2W3D`), as ISO-8601 writes them; years and months,
whose length varies, are refused."""

from __future__ import annotations

from conftest import run_cli


def test_iso_week_durations(tmp_path):
    log = str(tmp_path / "log")
    run_cli("produce", log, input="1\n2\n", check=True)
    run_cli("consume", log, "--group", "g", "--max", "1", check=True)
    assert run_cli("stat", log, "--fail-lag-age", "P1W").returncode == 0
    assert run_cli("stat", log, "--fail-lag-age", "P2W3DT1H").returncode == 0
    assert run_cli("stat", log, "--fail-lag-age", "P0W").returncode == 3  # the unread record has waited > 0
    r = run_cli("stat", log, "--fail-lag-age", "P1M")
    assert r.returncode == 2 and b"invalid ISO-8601 duration" in r.stderr
