"""Validation of names that become file names: groups and sources."""

from __future__ import annotations

import re

from streamctl.errors import UsageError

_GROUP_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")


def check_group(name: str) -> str:
    """Kafka's topic/group rule: [A-Za-z0-9._-]{1,249}, not only dots. Exit 2 otherwise."""
    if not _GROUP_RE.fullmatch(name) or set(name) == {"."}:
        raise UsageError(
            f"invalid group name {name!r}: use 1 to 249 of A-Z a-z 0-9 . _ - "
            "(not only dots)"
        )
    return name


def check_partition(p: int, partitions: int) -> int:
    if p < 0 or p >= partitions:
        raise UsageError(f"partition {p} does not exist (the log has {partitions}: 0..{partitions - 1})")
    return p
