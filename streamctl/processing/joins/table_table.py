"""Table-table join: the changelog of the materialized inner join of two changelogs.

Both inputs fold into latest-value-per-key tables (null value = delete). Each
change joins the other side as it currently stands (DDIA's product rule):

- an upsert on one side while the other side has the key: `upsert` of the
  joined row (key, left, right) — also when the value did not change, so a
  downstream upsert is idempotent;
- a delete on one side of a key that was joined: `delete` carrying the row
  as it was before (its "before image", as Debezium does), so a consumer can
  see what went away;
- anything else (a change to a key the other side lacks, a delete of a
  missing key) emits nothing.

Folding the output (upsert sets the row of its key, delete removes it) gives
exactly the inner join of the two tables at the end of the input.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from streamctl.processing.joins import EmitOp


class TableTableJoin:
    def __init__(self, emit: EmitOp,
                 tables: tuple[MutableMapping[Any, Any], MutableMapping[Any, Any]] | None = None) -> None:
        self.emit = emit
        # LEFT's and RIGHT's latest row per normalized key: dicts, or a follower's tables on disk
        self.tables: tuple[MutableMapping[Any, Any], MutableMapping[Any, Any]] = tables or ({}, {})

    def change(self, side: int, nkey: Any, key: Any, value: Any) -> None:
        mine = self.tables[side]
        theirs = self.tables[1 - side].get(nkey)
        if value is None:
            before = mine.pop(nkey, None)
            if before is not None and theirs is not None:
                if side:
                    self.emit("delete", key, theirs, before)
                else:
                    self.emit("delete", key, before, theirs)
            return
        mine[nkey] = value
        if theirs is not None:
            if side:
                self.emit("upsert", key, theirs, value)
            else:
                self.emit("upsert", key, value, theirs)

    def finish(self) -> None:
        pass

    def state_size(self) -> int:
        return len(self.tables[0]) + len(self.tables[1])
