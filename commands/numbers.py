"""Every number given on the command line, parsed and range-checked in one place.

Sizes, counts, durations and points in time go through the functions here,
each as a typer callback on its flag, so a value out of range is a usage
error (exit 2) naming the flag and the allowed range before the command does
anything (no log is created, no file written). The bounds:

    counts      0 .. 2**63-1 (offsets, -n, --max, --batch, --retries, lags), unless the flag says less
    sizes       0 .. 2**63-1 bytes (8EiB - 1); --segment-bytes from 1KiB
    durations   0 .. the span of years 1..9999 (3652058d23h59m59.999s); window sizes so that
                some window's bounds still lie within years 1..9999 (timeparse.usable_range)
    times       years 1..9999 (@-62135596800000 .. @253402300799999)

Only the standard library is imported at module level: this is loaded for `--help` too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamctl.errors import UsageError

MAX_INT = (1 << 63) - 1  # the largest count or size: what an int64 (a file offset, orjson, SQLite) holds
MAX_SIZE = MAX_INT
# timeparse.MAX_MS - timeparse.MIN_MS: from 0001-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z
MAX_DURATION_MS = 315_537_897_599_999
MIN_MS, MAX_MS = -62_135_596_800_000, 253_402_300_799_999  # timeparse.MIN_MS, MAX_MS (no import at --help)

_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1))
_SIZE_UNITS = (("KI", 1 << 10), ("MI", 1 << 20), ("GI", 1 << 30), ("TI", 1 << 40),
               ("K", 1000), ("M", 10**6), ("G", 10**9), ("T", 10**12))


def format_duration(ms: int) -> str:
    """Milliseconds -> the exact duration in the syntax parse_duration reads (`1d2h`, `500ms`, `0s`)."""
    if ms == 0:
        return "0s"
    out = []
    for unit, scale in _UNITS:
        n, ms = divmod(ms, scale)
        if n:
            out.append(f"{n}{unit}")
    return "".join(out)


def _shown(text: object) -> str:
    s = str(text)
    return s if len(s) <= 40 else s[:37] + "..."


def _range_error(flag: str, shown: object, lo: str, hi: str, what: str = "") -> UsageError:
    return UsageError(f"{flag} {_shown(shown)} is out of range: {what}must be from {lo} to {hi}")


# -- the parsers ------------------------------------------------------------------------

def parse_count(value: int, flag: str, lo: int = 0, hi: int = MAX_INT) -> int:
    """An integer flag (click already made it an int): lo <= value <= hi."""
    if lo <= value <= hi:
        return value
    if lo == 0 and value < 0:
        raise UsageError(f"{flag} must not be negative (from 0 to {hi}), not {_shown(value)}")
    raise _range_error(flag, value, str(lo), str(hi))


def parse_size(text: str, flag: str = "size", lo: int = 0, hi: int = MAX_SIZE) -> int:
    """`1048576`, `64KiB`, `1MiB`, `2GB`, `1.5M` -> bytes, lo <= n <= hi (a fraction of a byte is dropped)."""
    from decimal import Decimal, InvalidOperation

    s = text.strip().upper().removesuffix("B")
    mult = 1
    for suffix, m in _SIZE_UNITS:
        if s.endswith(suffix):
            s, mult = s[: -len(suffix)], m
            break
    try:
        d = Decimal(s.strip())
    except InvalidOperation:
        d = None
    if d is None or not d.is_finite():
        raise UsageError(f"{flag}: invalid size {_shown(text)!r} (use bytes, or 64KiB, 1MiB, 2GB; "
                         f"from {lo} to {hi} bytes)")
    if d < 0:
        raise UsageError(f"{flag} {_shown(text)}: invalid size: must not be negative (from {lo} to {hi} bytes)")
    # compared exactly before int(): 1e400 stays a Decimal (and is not multiplied, which could overflow)
    if d > hi or not lo <= d * mult <= hi:
        raise _range_error(flag, text, str(lo), f"{hi} bytes")
    return int(d * mult)


def parse_duration(text: str, flag: str = "duration", lo: int = 0, hi: int = MAX_DURATION_MS) -> int:
    """`500ms`, `30s`, `1h30m`, `PT5M` -> ms, lo <= ms <= hi (timeparse.parse_duration's forms)."""
    from streamctl.timeparse import parse_duration as parse

    try:
        ms = parse(text)
    except UsageError as e:
        raise UsageError(f"{flag}: {e}") from None
    if not lo <= ms <= hi:
        raise _range_error(flag, text, format_duration(lo), format_duration(hi))
    return ms


def parse_point(text: str, flag: str, now: int | None = None) -> int | None:
    """A point in time (ISO-8601, @EPOCHMS, -DURATION) within years 1..9999 -> epoch ms; None when
    it is no time at all (the command's own parser then says what it accepts)."""
    from streamctl.timeparse import now_ms, parse_time

    s = text.strip()
    if s.startswith("-") and len(s) > 1 and not s[1:].isdecimal():
        t = (now_ms() if now is None else now) - parse_duration(s[1:], flag)
    else:
        try:
            t = parse_time(s, now)
        except UsageError:
            return None
    if not MIN_MS <= t <= MAX_MS:
        raise _range_error(flag, text, f"@{MIN_MS}", f"@{MAX_MS}", "a time ")
    return t


def parse_position(text: str, flag: str) -> None:
    """`--from`/`--until`: an offset (a bare integer) or `-N` below 2**63, or a time within years
    1..9999. Other text is left to the command's own parser (it names the accepted forms)."""
    s = text.strip()
    digits = s[1:] if s.startswith("-") else s
    if digits.isdecimal():
        if int(digits) > MAX_INT:
            raise _range_error(flag, text, "0", str(MAX_INT), "an offset " if s == digits else "N in -N ")
        return
    if s not in ("earliest", "latest"):
        parse_point(s, flag)


def window_size(kind: str, text: str, flag: str) -> tuple[int, int]:
    """`--tumbling/--sliding/--session SIZE`, `--hopping SIZE/HOP` -> (size, hop) in ms (hop = size
    but for hopping): positive, short enough that some window's bounds lie within years 1..9999
    (timeparse.usable_range), and a HOP not above its SIZE."""
    from streamctl.timeparse import usable_range

    if kind == "hopping":
        size_text, sep, hop_text = text.partition("/")
        if not sep:
            raise UsageError(f"{flag} {_shown(text)!r}: write SIZE/HOP, e.g. 10m/1m")
        size, hop = parse_duration(size_text, flag), parse_duration(hop_text, flag)
        if hop <= 0 or size <= 0:
            raise UsageError(f"{flag} {_shown(text)!r}: SIZE and HOP must be positive")
    else:
        size = hop = parse_duration(text, flag)
        if size <= 0:
            raise UsageError(f"{flag} {_shown(text)!r}: the window size must be positive")

    def fits(s: int) -> bool:
        lo, hi = usable_range(kind, s, min(hop, s))
        return lo <= hi

    if not fits(size):
        # the longest that fits (fits() is monotonic in the size): a binary search of ~50 steps
        a, b = 1, size
        while a + 1 < b:
            mid = (a + b) // 2
            a, b = (mid, b) if fits(mid) else (a, mid)
        raise UsageError(f"{flag} {_shown(text)!r} is too long: windows of 1ms to {format_duration(a)}"
                         f"{' (for this HOP)' if kind == 'hopping' else ''} keep their bounds within "
                         "years 1..9999, where ISO-8601 can write them")
    if hop > size:
        raise UsageError(f"{flag} {_shown(text)!r}: HOP must not exceed SIZE (gaps would drop events)")
    return size, hop


# -- typer callbacks: `typer.Option(..., callback=numbers.size(lo=1024))` -------------------

def _flag(param: Any) -> str:
    opts = getattr(param, "opts", None) or [f"--{param.name}"]
    return "/".join(opts)


def _callback(check: Callable[[Any, str], object]) -> Callable[[Any, Any, Any], Any]:
    """A click callback that checks each given value (lists: each item) and passes it on unchanged."""
    def callback(ctx: Any, param: Any, value: Any) -> Any:
        if value is None or getattr(ctx, "resilient_parsing", False):
            return value
        for v in value if isinstance(value, (list, tuple)) else [value]:
            check(v, _flag(param))
        return value
    return callback


def count(lo: int = 0, hi: int = MAX_INT) -> Callable[[Any, Any, Any], Any]:
    return _callback(lambda v, flag: parse_count(v, flag, lo, hi))


def size(lo: int = 0, hi: int = MAX_SIZE) -> Callable[[Any, Any, Any], Any]:
    return _callback(lambda v, flag: parse_size(v, flag, lo, hi))


def duration(lo: int = 0, hi: int = MAX_DURATION_MS) -> Callable[[Any, Any, Any], Any]:
    return _callback(lambda v, flag: parse_duration(v, flag, lo, hi))


def point() -> Callable[[Any, Any, Any], Any]:
    return _callback(lambda v, flag: parse_point(v, flag))


def position() -> Callable[[Any, Any, Any], Any]:
    return _callback(lambda v, flag: parse_position(v, flag))


def window(kind: str) -> Callable[[Any, Any, Any], Any]:
    return _callback(lambda v, flag: window_size(kind, v, flag))
