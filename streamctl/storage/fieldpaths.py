"""Dotted field paths into records: `value.user.id`, `key`, `ts`."""

from __future__ import annotations

from typing import Any

from streamctl.errors import UsageError

_MISSING = object()
ENVELOPE_FIELDS = ("offset", "partition", "ts", "key", "value", "headers")


def split_path(path: str) -> tuple[str, ...]:
    if not path or path.startswith(".") or path.endswith(".") or ".." in path:
        raise UsageError(f"invalid field path {path!r} (write it like value.user.id)")
    return tuple(path.split("."))


def record_path(path: str) -> tuple[str, ...]:
    """A path into a record; a path that does not start with an envelope field is under value."""
    parts = split_path(path)
    if parts[0] not in ENVELOPE_FIELDS:
        parts = ("value", *parts)
    return parts


def value_path(path: str) -> tuple[str, ...]:
    """A path into a value (`user.id`); a leading `value.` is accepted and dropped."""
    parts = split_path(path)
    if parts[0] == "value":
        parts = parts[1:]
    return parts


def get(obj: Any, parts: tuple[str, ...], default: Any = None) -> Any:
    for p in parts:
        if isinstance(obj, dict):
            obj = obj.get(p, _MISSING)
            if obj is _MISSING:
                return default
        elif isinstance(obj, list) and p.lstrip("-").isdecimal():
            i = int(p)
            if -len(obj) <= i < len(obj):
                obj = obj[i]
            else:
                return default
        else:
            return default
    return obj
