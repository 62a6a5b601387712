"""The three join kinds (DDIA ch. 11), each a small state machine fed in the input order.

Every kind is driven the same way: `streamctl.processing.joins.driver` reads both inputs through
`streamctl.processing.inputorder.merged`, extracts a normalized key and an event time per
record, and calls `left(...)` / `right(...)` on the join object in that order;
the join calls `emit(...)` with output rows. Nothing here reads a clock or
depends on how fast input arrives, so the same input order gives the same rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# emit(key, left_value, right_value) for stream joins; the table-table join adds op first.
Emit = Callable[[Any, Any, Any], None]
EmitOp = Callable[[str, Any, Any, Any], None]

HOWS_STREAM = ("inner", "left", "right", "outer")
HOWS_TABLE = ("inner", "left")

# A time no record can have: the "beginning of time" of a table row without a time.
MIN_TIME = -(1 << 62)
