"""The rows of window and join as the output writes them, through the one stdout writer
(formats.writer.Output): JSON lines, CSV, or an aligned table for people.

CSV streams, so its columns are fixed when the run starts (the header is written then); the
table is written when the rows end (`finish`). Each command writes its own JSON lines (they
are its hot path) and gives its CSV cells and its table; a Spark job's rows come back as JSON
lines (`json_lines`) and go out the same way as the local engine's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    from streamctl.formats.writer import Output


class Rows:
    """`output` is jsonl, csv or table; `columns` the CSV header, `cells(row)` a row's CSV cells in
    their order, `table_text(rows)` the table of all rows."""

    def __init__(self, output: str, out: Output, columns: list[str], cells: Callable[[dict], list],
                 table_text: Callable[[list[dict]], bytes]) -> None:
        self.output = output
        self.out = out
        self.cells = cells
        self.table_text = table_text
        self.table_rows: list[dict] = []
        if output == "csv":
            out.write(",".join(columns).encode() + b"\n")

    def dicts(self, rows: Iterable[dict]) -> None:
        """Rows as objects, for CSV or the table (JSON lines are written by the command)."""
        if self.output == "csv":
            from streamctl.formats.table import csv_rows

            self.out.write(csv_rows(rows, self.cells))
        else:
            self.table_rows.extend(rows)

    def json_lines(self, block: bytes) -> None:
        """Rows that are JSON lines already, each ending in a newline (a batch of them, a Spark
        job's output); a terminal still gets them row by row."""
        if self.output == "jsonl":
            if self.out.limit:
                self.out.write(block)
            else:
                for line in block[:-1].split(b"\n"):
                    self.out.write(line + b"\n")
        else:
            self.dicts(orjson.loads(line) for line in block.splitlines() if line.strip())

    def finish(self) -> None:
        """The table, when there are rows for one, then a flush."""
        if self.table_rows:
            self.out.write(self.table_text(self.table_rows))
            self.table_rows = []
        self.out.flush()


def flat_table(rows: list[dict]) -> bytes:
    """The table of rows with every nested field a column of its own (window.start), in the order
    the fields first appear."""
    from streamctl.formats.table import table

    return table(rows).encode() + b"\n"
