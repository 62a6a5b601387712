"""The window kinds by name: the one factory of window operators (windows.Windower), for the local
driver (windows/driver.py, which checks the flags first) and the Spark window job's per-group replay."""

from __future__ import annotations

from typing import Any


def make_operator(kind: str, size: int, hop: int, plan: Any, update: bool = False, correct: bool = False) -> Any:
    """The operator of one window kind: SIZE (the GAP of sessions) and HOP in ms; `update` for
    --emit update, `correct` for --late correct. ValueError for a kind that does not exist, or a
    SIZE that is not positive."""
    if size <= 0:
        raise ValueError("the window size must be positive")
    if kind in ("tumbling", "hopping"):
        from streamctl.processing.windows import GridWindows

        return GridWindows(size, size if kind == "tumbling" else hop, plan, update, correct)
    if kind == "sliding":
        from streamctl.processing.windows.sliding import Sliding

        return Sliding(size, plan, update, correct)
    if kind == "session":
        from streamctl.processing.windows.session import Session

        return Session(size, plan, update, correct)
    raise ValueError(f"unknown window type {kind!r}")
