"""%t prints the log's name, the base name of the folder LOG really is: `.` inside the log's
folder, `orders/` and `../orders` all print `orders`, as --sqlite's default table name is taken."""

from __future__ import annotations

import os
import sqlite3

import pytest

from conftest import run_cli


@pytest.mark.parametrize("given", [".", "./", "../orders/", "../orders/."])
def test_percent_t_names_the_real_folder(tmp_path, given) -> None:
    log = tmp_path / "orders"
    run_cli("produce", str(log), input="1\n", check=True)
    for cmd in (["consume"], ["tail"], ["consume", "-g", "g"]):
        p = run_cli(*cmd, given, "--format", "%t %o\\n", cwd=str(log), check=True)
        assert p.stdout == b"orders 0\n", (cmd, p.stdout)


def test_a_symlink_and_sqlite_default_table_use_the_same_name(tmp_path) -> None:
    log = tmp_path / "orders"
    run_cli("produce", str(log), input="1\n", check=True)
    os.symlink("orders", tmp_path / "current")
    assert run_cli("consume", "current", "--format", "%t\\n", cwd=str(tmp_path), check=True).stdout == b"orders\n"
    run_cli("consume", ".", "-g", "s", "--sqlite", str(tmp_path / "t.db"), cwd=str(log), check=True)
    tables = sqlite3.connect(tmp_path / "t.db").execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name != 'streamctl_offsets'").fetchall()
    assert tables == [("orders",)]
