"""Durations (`1h30m`, `PT5M`), points in time (ISO, `@ms`, `-1h`) and event times.

Every function here returns integers in milliseconds, or raises UsageError /
ValueError with a message meant for a person.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

from streamctl.errors import UsageError

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_ISO_DURATION_RE = re.compile(
    r"P(?:(?P<d>\d+(?:\.\d+)?)D)?(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?"
)


def parse_duration(text: str) -> int:
    """`500ms`, `30s`, `5m`, `1h30m`, `7d`, `PT5M`, `P1DT2H` -> milliseconds (>= 0)."""
    s = text.strip()
    if not s:
        raise UsageError("empty duration")
    if s[0] in "Pp":
        m = _ISO_DURATION_RE.fullmatch(s.upper())
        if not m or s.upper() in ("P", "PT") or s.upper().endswith("T"):
            raise UsageError(f"invalid ISO-8601 duration {text!r} (try PT5M or P1DT2H)")
        total = 0.0
        for unit, scale in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
            if m.group(unit):
                total += float(m.group(unit)) * scale
        return int(round(total))
    pos = 0
    total = 0.0
    for m in _DURATION_RE.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_MS[m.group(2)]
        pos = m.end()
    if pos != len(s) or pos == 0:
        raise UsageError(f"invalid duration {text!r} (use 500ms, 30s, 5m, 1h30m, 7d or PT5M)")
    return int(round(total))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def parse_iso(text: str) -> int:
    """ISO-8601 date-time -> epoch ms. A naive time (no offset) is UTC."""
    s = text.strip()
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise ValueError(f"not an ISO-8601 time: {text!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_time(text: str, now: int | None = None) -> int:
    """A point in time: ISO-8601, `@EPOCHMS`, or relative `-1h` (now minus). -> epoch ms."""
    s = text.strip()
    if s.startswith("@"):
        try:
            return int(s[1:])
        except ValueError:
            raise UsageError(f"invalid time {text!r}: @ takes epoch milliseconds, e.g. @1763719200123") from None
    if s.startswith("-") and len(s) > 1 and not s[1:].isdecimal():
        return (now_ms() if now is None else now) - parse_duration(s[1:])
    try:
        return parse_iso(s)
    except ValueError:
        raise UsageError(
            f"invalid time {text!r} (use ISO-8601 like 2026-11-21T10:00:00Z, @EPOCHMS or -1h)"
        ) from None


def format_iso(ms: int) -> str:
    """Epoch ms -> `2026-11-21T10:00:00.123Z` (always UTC, millisecond precision)."""
    secs, rem = divmod(ms, 1000)
    dt = datetime.fromtimestamp(secs, tz=UTC) if secs >= 0 else _EPOCH + _td(secs)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{rem:03d}Z"


def _td(secs: int):
    from datetime import timedelta

    return timedelta(seconds=secs)


def event_time_ms(value: object) -> int | None:
    """An event-time field value -> epoch ms, or None when it is not a time.

    Numbers are read by magnitude: below 1e11 seconds, below 1e14 milliseconds,
    otherwise microseconds (so 1763719200, 1763719200123 and 1763719200123456
    are the same instant). Strings are ISO-8601 (naive = UTC) or digits.
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        if value != value or value in (float("inf"), float("-inf")):
            return None
        a = abs(value)
        if a < 1e11:
            return int(round(value * 1000))
        if a < 1e14:
            return int(value)
        return int(value // 1000)
    if isinstance(value, str):
        s = value.strip()
        if s.lstrip("-").isdecimal():
            return event_time_ms(int(s))
        try:
            return parse_iso(s)
        except (ValueError, OverflowError):
            return None
    return None
