"""Durations (`1h30m`, `PT5M`), points in time (ISO, `@ms`, `-1h`) and event times.

Every function here returns integers in milliseconds, or raises UsageError /
ValueError with a message meant for a person.

Event times are instants ISO-8601 can print: years 1 to 9999, so epoch ms in
[MIN_MS, MAX_MS] (0001-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z).
`event_time_ms` reads anything outside that (`1e19`, `-1e19`, a 25-digit
number) as no time at all. A window run narrows the range further so that
every window bound an event can produce is printable too (`usable_range`):

    tumbling SIZE       the event's window [start, start + SIZE) lies in the range
    hopping SIZE/HOP    every one of its SIZE/HOP windows lies in the range
    sliding SIZE        t - SIZE >= MIN_MS (its row is [t - SIZE, t])
    session GAP         t + GAP <= MAX_MS (a session ends at its last event + GAP)

An event time outside its run's range is a bad time, like a missing or
unparseable one: counted and skipped, or the run fails (`--on-bad-time`).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from streamctl.errors import UsageError

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_ISO_DURATION_RE = re.compile(
    r"P(?:(?P<w>\d+(?:\.\d+)?)W)?(?:(?P<d>\d+(?:\.\d+)?)D)?(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?"
)


# The longest duration: the span of years 1..9999 (MAX_MS - MIN_MS below), so that now - it and an
# instant plus it stay integers a datetime, a sleep and orjson can take. commands/numbers.py checks
# each flag's own range on top of this (window sizes, for one, are shorter).
MAX_DURATION_MS = 315_537_897_599_999


def parse_duration(text: str) -> int:
    """`500ms`, `30s`, `5m`, `1h30m`, `7d`, `PT5M`, `P1DT2H`, `P1W`, `0` -> milliseconds, 0 .. MAX_DURATION_MS.
    ISO-8601 durations of weeks, days and time (no years or months: their length varies)."""
    s = text.strip()
    if not s:
        raise UsageError("empty duration")
    if s == "0":  # nothing needs no unit
        return 0
    if s[0] in "Pp":
        m = _ISO_DURATION_RE.fullmatch(s.upper())
        if not m or s.upper() in ("P", "PT") or s.upper().endswith("T"):
            raise UsageError(f"invalid ISO-8601 duration {text!r} (try PT5M or P1DT2H)")
        total = 0.0
        for unit, scale in (("w", 604_800_000), ("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
            if m.group(unit):
                total += float(m.group(unit)) * scale
        return _bounded(total, text)
    pos = 0
    total = 0.0
    for m in _DURATION_RE.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_MS[m.group(2)]
        pos = m.end()
    if pos != len(s) or pos == 0:
        raise UsageError(f"invalid duration {text!r} (use 500ms, 30s, 5m, 1h30m, 7d or PT5M)")
    return _bounded(total, text)


def _bounded(total: float, text: str) -> int:
    """A parsed duration (a float: 1e400 digits make inf) -> int ms, or a UsageError past MAX_DURATION_MS."""
    if not total <= MAX_DURATION_MS:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise UsageError(f"duration {shown!r} is too long: at most {MAX_DURATION_MS} ms "
                         "(3652058d23h59m59.999s, the span of years 1..9999)")
    return int(round(total))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def parse_iso(text: str, round_up: bool = False) -> int:
    """ISO-8601 date-time -> epoch ms. A naive time (no offset) is UTC.

    Digits below the millisecond are dropped (floor): an event at 10:00:00.0009 lies in every
    window [s, e) of whole milliseconds that 10:00:00.000 lies in. `round_up` rounds them up
    instead (ceiling), for a bound: a ts of whole ms is >= 10:00:00.0009 exactly when it is
    >= 10:00:00.001, and < it exactly when it is < 10:00:00.001."""
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
    ms = delta.microseconds // 1000 if not round_up else -(-delta.microseconds // 1000)
    return (delta.days * 86_400 + delta.seconds) * 1000 + ms


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MIN_MS = -62_135_596_800_000  # 0001-01-01T00:00:00.000Z, the first instant ISO-8601 prints
MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last


def parse_time(text: str, now: int | None = None) -> int:
    """A point in time: ISO-8601, `@EPOCHMS`, or relative `-1h` (now minus). -> epoch ms.

    Every such time is a bound compared with a record's ts (`ts >= T` starts a range, `ts < T`
    ends one), so an ISO-8601 time with digits below the millisecond rounds up (parse_iso's
    `round_up`): rounding down would take in, or leave out, the records of that millisecond."""
    s = text.strip()
    if s.startswith("@"):
        try:
            return int(s[1:])
        except ValueError:
            raise UsageError(f"invalid time {text!r}: @ takes epoch milliseconds, e.g. @1763719200123") from None
    if s.startswith("-") and len(s) > 1 and not s[1:].isdecimal():
        return (now_ms() if now is None else now) - parse_duration(s[1:])
    try:
        return parse_iso(s, round_up=True)
    except ValueError:
        raise UsageError(
            f"invalid time {text!r} (use ISO-8601 like 2026-11-21T10:00:00Z, @EPOCHMS or -1h)"
        ) from None


def format_iso(ms: int) -> str:
    """Epoch ms -> `2026-11-21T10:00:00.123Z` (always UTC, millisecond precision, a 4-digit year).

    ValueError for an instant outside years 1..9999 (MIN_MS..MAX_MS), which ISO-8601 cannot write.
    """
    secs, rem = divmod(ms, 1000)
    try:
        dt = datetime.fromtimestamp(secs, tz=UTC) if secs >= 0 else _EPOCH + _td(secs)
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"{ms} ms is outside years 1..9999, which ISO-8601 can write") from None
    # %Y does not pad years below 1000 on every platform
    return f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}.{rem:03d}Z"


def _td(secs: int):
    from datetime import timedelta

    return timedelta(seconds=secs)


# The epoch-number rule, by magnitude: |n| below EPOCH_S_BELOW is epoch seconds, below
# EPOCH_MS_BELOW epoch milliseconds, anything larger microseconds. event_time_ms is its one
# definition; event_times (a column), timecolumns.iso_column_ms (numpy) and the shortcut
# `is_epoch_ms` / `epoch_ms_column` that hot loops take for the common case (epoch ms, read as it
# is: windows/events.py, joins/keys.py, which the Spark window job reads times with) follow it.
EPOCH_S_BELOW = 100_000_000_000  # 1e11: 5138-11-16 in seconds, 1973-03-03 in milliseconds
EPOCH_MS_BELOW = 100_000_000_000_000  # 1e14: 5138 in milliseconds, 1973 in microseconds


def event_time_ms(value: object) -> int | None:
    """An event-time field value -> epoch ms, or None when it is not a time.

    Numbers are read by magnitude: below 1e11 seconds, below 1e14 milliseconds (EPOCH_S_BELOW, EPOCH_MS_BELOW),
    otherwise microseconds (so 1763719200, 1763719200123 and 1763719200123456
    are the same instant). Strings are ISO-8601 (naive = UTC) or digits.
    An instant outside years 1..9999 (MIN_MS..MAX_MS) is not a time.
    Whatever the form, digits below the millisecond are dropped (floor, as parse_iso does):
    1763719200.9999 is 1763719200999, like 2025-11-21T10:00:00.9999Z.
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        if value != value or value in (float("inf"), float("-inf")):
            return None
        a = abs(value)
        if a < EPOCH_S_BELOW:
            # rounded to the microsecond first: 1763719200.123 * 1000 is 1763719200122.9998
            return math.floor(round(value * 1000, 3))
        if a < EPOCH_MS_BELOW:
            return math.floor(value)
        ms = int(value // 1000)
        return ms if MIN_MS <= ms <= MAX_MS else None
    if isinstance(value, str):
        s = value.strip()
        if s.lstrip("-").isdecimal():
            return event_time_ms(int(s))
        try:
            ms = parse_iso(s)
        except (ValueError, OverflowError):
            return None
        # an offset can move year 1 or 9999 out of range (`0001-01-01T00:00:00+01:00`)
        return ms if MIN_MS <= ms <= MAX_MS else None
    return None


def is_epoch_ms(v: Any) -> bool:
    """Whether event_time_ms(v) is v itself for the common reason: an int in the milliseconds range.
    (Hot per-record loops write this test inline, with the two constants.)"""
    return v.__class__ is int and EPOCH_S_BELOW <= v < EPOCH_MS_BELOW


def epoch_ms_column(col: list[Any]) -> bool:
    """Whether every value of a non-empty column passes is_epoch_ms: the column is its own event
    times (checked in C: one pass for the types, one for min and max)."""
    return bool(col) and {*map(type, col)} == _INT_ONLY and EPOCH_S_BELOW <= min(col) and max(col) < EPOCH_MS_BELOW


_INT_ONLY = {int}


def usable_range(kind: str, size: int, hop: int = 0) -> tuple[int, int]:
    """The event times [lo, hi] (epoch ms) a window run of this kind can use: those whose every
    window bound is printable (see the module's docstring). lo > hi when none is (a SIZE of
    thousands of years).

    Grid windows (tumbling = hopping with HOP = SIZE) put an event at t in every window
    [s, s + SIZE) with s a multiple of HOP and t - SIZE < s <= t: the last one ends at
    floor(t / HOP) * HOP + SIZE, which must be <= MAX_MS; the first starts at the least
    multiple of HOP above t - SIZE, which must be >= MIN_MS.
    """
    if kind in ("tumbling", "hopping"):
        step = size if kind == "tumbling" else hop
        return (-(-MIN_MS // step) - 1) * step + size, ((MAX_MS - size) // step + 1) * step - 1
    if kind == "sliding":
        return MIN_MS + size, MAX_MS
    if kind == "session":
        return MIN_MS, MAX_MS - size
    raise ValueError(f"unknown window type {kind!r}")


def bad_time_reason(value: object, lo: int = MIN_MS, hi: int = MAX_MS, *, epoch_ms: bool = False) -> str:
    """Why `value`, an event-time field's value, is no usable time in [lo, hi] (for a message).
    `epoch_ms`: the value is taken as epoch ms as it is (a log's append time), not by magnitude."""
    if value is None:
        return "the field is missing or null"
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    if epoch_ms:
        t = value if type(value) is int and MIN_MS <= value <= MAX_MS else None
    else:
        t = event_time_ms(value)
    if t is None:
        number = (type(value) is int or (type(value) is float and value - value == 0)
                  or (isinstance(value, str) and value.strip().lstrip("-").isdecimal()))
        if number:
            return f"{shown} is outside years 1..9999 (what ISO-8601 can write)"
        return f"{shown} is not a time (ISO-8601 or epoch s/ms/us expected)"
    if lo > hi:
        return f"{shown}: these windows are too long for any of their bounds to lie within years 1..9999"
    return f"{shown} is outside {format_iso(lo)} .. {format_iso(hi)}, where every window bound stays in years 1..9999"


# -- event times a column at a time ---------------------------------------------------
#
# The general parse (datetime.fromisoformat) costs about 2 us a string. A column of event times
# mostly repeats its `YYYY-MM-DDTHH:MM:SS` head (same second, or at least the same minute) and
# has few distinct tails (`Z`, `.123Z`, `+01:00`): each part's epoch ms is parsed once and kept in
# a bounded cache, so a value costs two slices and two dict lookups. Slicing out the seconds,
# fraction and offset of every value and int()-ing them measured about 3x that.

_SECOND_RE = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:[0-5]\d", re.ASCII)
_TAIL_RE = re.compile(r"(?:\.(\d+))?(?:[Zz]|([+-])([01]\d|2[0-3]):([0-5]\d))?", re.ASCII)
_seconds: dict[str, int] = {}  # `YYYY-MM-DDTHH:MM:SS` -> its epoch ms (UTC)
_minutes: dict[str, int] = {}  # `YYYY-MM-DDTHH:MM` -> its epoch ms (UTC)
_tails: dict[str, int] = {}  # what follows the seconds (`.123Z`, `+01:00`, ``) -> ms to add
_KEPT = 8192  # entries per cache (~2 hours of distinct seconds); a full cache starts over


def _second_of(head: str) -> int | None:
    """Epoch ms of `YYYY-MM-DD[Tt ]HH:MM:SS` (UTC), cached; None when it is no valid second."""
    if _SECOND_RE.fullmatch(head) is None:
        return None
    minute = _minutes.get(head[:16])
    if minute is None:
        try:
            d = datetime(int(head[:4]), int(head[5:7]), int(head[8:10]), int(head[11:13]),
                         int(head[14:16]), tzinfo=UTC) - _EPOCH
        except ValueError:  # a month 13, a February 30, an hour 24, a year 0
            return None
        if len(_minutes) >= _KEPT:
            _minutes.clear()
        minute = _minutes[head[:16]] = (d.days * 86_400 + d.seconds) * 1000
    if len(_seconds) >= _KEPT:
        _seconds.clear()
    ms = _seconds[head] = minute + int(head[17:19]) * 1000
    return ms


def _tail_of(tail: str) -> int | None:
    """The ms that `[.F+][Z | z | ±HH:MM]` after the seconds adds (its fraction, minus its offset),
    cached; None when it is not of that form."""
    m = _TAIL_RE.fullmatch(tail)
    if m is None:
        return None
    frac, sign, hh, mm = m.groups()
    # fromisoformat keeps the first 6 fraction digits (the microseconds), parse_iso their ms
    ms = int((frac + "00")[:3]) if frac else 0
    if sign:
        off = (int(hh) * 60 + int(mm)) * 60_000
        ms = ms - off if sign == "+" else ms + off
    if len(_tails) >= _KEPT:
        _tails.clear()
    _tails[tail] = ms
    return ms


def event_times(values: Iterable[Any]) -> list[int | None]:  # Any: the hot loop tests types by __class__
    """`[event_time_ms(v) for v in values]`, fast for the common shapes of an event-time column.

    event_time_ms is the reference: this returns exactly what it returns for every value (the
    property test in tests/test_event_times_column.py holds the two together). Without calling it,
    this reads ints in the seconds and milliseconds ranges, and ISO-8601 strings
    `YYYY-MM-DD[Tt ]HH:MM:SS[.F+][Z | z | ±HH:MM]` with ASCII digits (any number of fraction
    digits; no offset is UTC), from the cached epoch ms of their head and their tail. Every other
    value (floats, microseconds, digit strings, other ISO-8601 forms, whitespace around, junk)
    goes to event_time_ms.
    """
    second, tail = _seconds.get, _tails.get
    slow = event_time_ms
    lo, hi, s_below, ms_below = MIN_MS, MAX_MS, EPOCH_S_BELOW, EPOCH_MS_BELOW  # locals: read per value
    out: list[int | None] = []
    append = out.append
    for v in values:
        cls = v.__class__
        if cls is str:
            a = second(v[:19])
            if a is None:
                a = _second_of(v[:19])
            b = tail(v[19:])
            if b is None:
                b = _tail_of(v[19:])
            if a is None or b is None:
                append(slow(v))
            elif lo <= a + b <= hi:
                append(a + b)
            else:  # an offset moved year 1 or 9999 out of the range
                append(None)
        elif cls is int and -ms_below < v < ms_below:
            # seconds, else milliseconds (event_time_ms reads numbers by magnitude)
            append(v * 1000 if -s_below < v < s_below else v)
        else:
            append(slow(v))
    return out
