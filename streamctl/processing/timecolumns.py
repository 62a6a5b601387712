"""Event times of a column of values with numpy: the ISO-8601 shape services write, parsed as bytes
(window and join columns).

`timeparse.event_times` parses a column with caches of each distinct second and tail (about
1 us a value in CPython). A column of `YYYY-MM-DDTHH:MM:SS.fffZ` strings (or `...SSZ`) all of one
length is parsed here as a matrix of bytes: its digits checked and summed column by column, the
date turned into days with the civil-from-days inverse (Howard Hinnant's `days_from_civil`), so a
value costs some tens of nanoseconds. The result is exactly `event_times`'s: a value this
parse does not accept in full (another length, a `t` or space, an offset, a 31 April, a
non-digit) is handed to `event_times` itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from streamctl.processing.columns import newlines
from streamctl.timeparse import event_times

_WIDTHS = (20, 24)  # YYYY-MM-DDTHH:MM:SSZ, YYYY-MM-DDTHH:MM:SS.fffZ
# YYYY-MM-DDTHH:MM: separators, and two-digit numbers (the year's halves, month, day, hour, minute)
_SEP_COLS = [4, 7, 10, 13]
_SEP_BYTES = np.frombuffer(b"--T:", dtype=np.uint8)
_TENS = [0, 2, 5, 8, 11, 14]
_ONES = [1, 3, 6, 9, 12, 15]
# :SS.fffZ: separators; digits of the second and the fraction
_TAIL_SEP_COLS = [16, 19, 23]
_TAIL_SEP_BYTES = np.frombuffer(b":.Z", dtype=np.uint8)
_TAIL_DIGITS = [17, 18, 20, 21, 22]
_months: tuple[np.ndarray, np.ndarray] | None = None


def _month_tables() -> tuple[np.ndarray, np.ndarray]:
    """Per year * 12 + month - 1 (years 0..9999): the days from 1970-01-01 to the month's first
    day, and the month's length (0 for year 0, which ISO-8601 here does not have)."""
    global _months
    if _months is None:
        years = np.repeat(np.arange(10_000, dtype=np.int64), 12)
        months = np.tile(np.arange(1, 13, dtype=np.int64), 10_000)
        leap = ((years % 4 == 0) & (years % 100 != 0)) | (years % 400 == 0)
        length = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)[months - 1]
        length = length + ((months == 2) & leap)
        length[:12] = 0
        y = years - (months <= 2)  # days_from_civil (proleptic Gregorian), Howard Hinnant
        era = np.floor_divide(y, 400)
        yoe = y - era * 400
        doy = (153 * ((months + 9) % 12) + 2) // 5
        first = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
        _months = (first, length)
    return _months


def _in_range(times: list[int | None], lo: int | None, hi: int | None) -> list[int | None]:
    if lo is None or hi is None:
        return times
    return [t if t is not None and lo <= t <= hi else None for t in times]


def iso_column_ms(values: Sequence[Any], lo: int | None = None, hi: int | None = None) -> list[int | None]:
    """`event_times(values)`, fast when the values are ISO-8601 UTC strings of one of the two shapes;
    with `lo` and `hi`, a time outside [lo, hi] is None too."""
    parsed = _parsed(values)
    if parsed is None:
        return _in_range(event_times(values), lo, hi)
    ms, ok = parsed
    out: list[int | None] = ms.tolist()
    if not ok.all():
        bad = np.flatnonzero(~ok).tolist()
        for i, t in zip(bad, event_times([values[i] for i in bad]), strict=True):
            out[i] = t
        return _in_range(out, lo, hi)
    if lo is not None and hi is not None and not ((ms >= lo) & (ms <= hi)).all():
        return _in_range(out, lo, hi)
    return out


def iso_array_ms(values: Sequence[Any], lo: int, hi: int) -> np.ndarray | None:
    """iso_column_ms(values, lo, hi) as an int64 array when this parse takes every value and every
    time lies in [lo, hi] (the common case: no list of ints made); None otherwise."""
    parsed = _parsed(values)
    if parsed is None:
        return None
    ms, ok = parsed
    if not ok.all() or int(ms.min()) < lo or int(ms.max()) > hi:
        return None
    return ms


def _parsed(values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """(each value's ms, whether this parse took it: False where event_times must read it), or None
    when the column is not all strs of one of the two shapes (or is short)."""
    n = len(values)
    m = _matrix(values) if n >= 32 else None
    if m is None:
        return None
    if m.shape[1] == 20:  # no fraction: read as .000, the last byte (a Z) checked where a fraction's Z is
        m = np.concatenate((m[:, :19], np.frombuffer(b".000" * n, dtype=np.uint8).reshape(n, 4), m[:, 19:]), axis=1)
    # Times of one column share their minute in runs (a log is written in time order): the
    # date, hour and minute are parsed once per run, the seconds and milliseconds per value.
    head = np.ascontiguousarray(m[:, :16]).view(np.uint64)  # two words a row: compared as such
    runs = np.empty(n, dtype=bool)
    runs[0] = True
    np.not_equal(head[1:, 0], head[:-1, 0], out=runs[1:])
    runs[1:] |= head[1:, 1] != head[:-1, 1]
    first = np.flatnonzero(runs)
    minute, minute_ok = _minutes(m[first])
    run = np.cumsum(runs) - 1
    zero = np.uint8(48)
    ok = minute_ok[run] & (m[:, _TAIL_SEP_COLS] == _TAIL_SEP_BYTES).all(axis=1)
    d = m[:, _TAIL_DIGITS] - zero  # a non-digit wraps above 9
    ok &= (d <= 9).all(axis=1)
    d = d.astype(np.int64)
    second = d[:, 0] * 10 + d[:, 1]
    ok &= second <= 59
    return minute[run] + second * 1000 + d[:, 2] * 100 + d[:, 3] * 10 + d[:, 4], ok


def _matrix(values: Sequence[Any]) -> np.ndarray | None:
    """The values as an (n, width) matrix of ASCII bytes when all are strs of one of _WIDTHS, else None.
    Joined with newlines: when the text holds exactly n - 1 of them and each row's byte `width` is
    one, the joins are where a row of `width` bytes ends, so every value has that length (no
    length of each value is taken in Python)."""
    try:
        text = "\n".join(values)
    except TypeError:  # not all strs
        return None
    n = len(values)
    width = len(values[0]) if n else 0
    if width not in _WIDTHS or len(text) != n * (width + 1) - 1 or not text.isascii():
        return None
    raw = text.encode("ascii")
    if newlines(raw) != n - 1:
        return None
    m = np.frombuffer(raw + b"\n", dtype=np.uint8).reshape(n, width + 1)
    if not (m[:, width] == 10).all():
        return None
    return m[:, :width]


def _minutes(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ms of each row's `YYYY-MM-DDTHH:MM` (its first 16 bytes) and whether it is valid."""
    ok = (m[:, _SEP_COLS] == _SEP_BYTES).all(axis=1)
    zero = np.uint8(48)
    tens, ones = m[:, _TENS] - zero, m[:, _ONES] - zero  # a non-digit wraps above 9
    ok &= (tens <= 9).all(axis=1) & (ones <= 9).all(axis=1)
    p = tens.astype(np.int64) * 10 + ones  # matrix products of integers are slow in numpy: columns
    month, day, hour, minute = p[:, 2], p[:, 3], p[:, 4], p[:, 5]
    ym = (p[:, 0] * 100 + p[:, 1]) * 12 + month - 1  # year * 12 + month - 1
    ok &= (month >= 1) & (month <= 12) & (hour <= 23) & (minute <= 59)
    ym = np.where(ok, ym, 0)
    first, length = _month_tables()
    ok &= (day >= 1) & (day <= length[ym])  # year 0 has length 0
    return (first[ym] + day - 1) * 86_400_000 + hour * 3_600_000 + minute * 60_000, ok
