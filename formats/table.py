"""Rows (lists of dicts) as a table for people, CSV, or JSON lines for scripts."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from streamctl.processing import exactjson

OUTPUTS = ("jsonl", "csv", "table")


def csv_cell(v: Any) -> Any:
    """A JSON value as a CSV cell: null empty, true/false and objects and arrays as their JSON text."""
    if v is None:
        return ""
    if isinstance(v, (dict, list, bool)):
        return exactjson.dumps(v).decode()  # an int beyond 64 bits exact, as in JSON lines
    return v


def flatten(row: dict, prefix: str = "") -> dict:
    """{"window": {"start": a}} -> {"window.start": a}; lists stay JSON."""
    out: dict = {}
    for k, v in row.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, name + "."))
        else:
            out[name] = v
    return out


def table(rows: Sequence[dict], columns: Sequence[str] | None = None) -> str:
    from tabulate import tabulate  # only people-facing output pays for this import

    flat = [flatten(r) for r in rows]
    cols = list(columns) if columns else _columns(flat)
    return tabulate([[csv_cell(r.get(c)) for c in cols] for r in flat], headers=cols, tablefmt="simple",
                    disable_numparse=True)


def _columns(rows: Iterable[dict]) -> list[str]:
    cols: dict[str, None] = {}
    for r in rows:
        for k in r:
            cols.setdefault(k, None)
    return list(cols)


def csv_rows(rows: Iterable[dict], cells: Callable[[dict], list]) -> bytes:
    """CSV lines of rows, `cells(row)` giving each row's cells in the columns' order (csv_cell each)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for r in rows:
        w.writerow([csv_cell(c) for c in cells(r)])
    return buf.getvalue().encode()
