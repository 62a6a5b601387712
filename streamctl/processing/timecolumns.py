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

from streamctl.timeparse import event_times

_WIDTHS = (20, 24)  # YYYY-MM-DDTHH:MM:SSZ, YYYY-MM-DDTHH:MM:SS.fffZ
_SEP_COLS = [4, 7, 10, 13, 16, 19, 23]
_SEP_BYTES = np.frombuffer(b"--T::.Z", dtype=np.uint8)
# two-digit numbers: the year's halves, month, day, hour, minute, second
_TENS = [0, 2, 5, 8, 11, 14, 17]
_ONES = [1, 3, 6, 9, 12, 15, 18]
_FRACTION = [20, 21, 22]
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
    n = len(values)
    if n < 32 or {*map(type, values)} != {str}:
        return _in_range(event_times(values), lo, hi)
    lengths = {*map(len, values)}
    width = lengths.pop()
    if lengths or width not in _WIDTHS:
        return _in_range(event_times(values), lo, hi)
    text = "".join(values)
    if not text.isascii():
        return _in_range(event_times(values), lo, hi)
    m = np.frombuffer(text.encode("ascii"), dtype=np.uint8).reshape(n, width)
    if width == 20:  # no fraction: read as .000
        m = np.concatenate((m[:, :19], np.frombuffer(b".000Z" * n, dtype=np.uint8).reshape(n, 5)), axis=1)
    ok = (m[:, _SEP_COLS] == _SEP_BYTES).all(axis=1)
    zero = np.uint8(48)
    tens, ones, frac = m[:, _TENS] - zero, m[:, _ONES] - zero, m[:, _FRACTION] - zero  # a non-digit wraps above 9
    ok &= (tens <= 9).all(axis=1) & (ones <= 9).all(axis=1) & (frac <= 9).all(axis=1)
    p = tens.astype(np.int64) * 10 + ones  # matrix products of integers are slow in numpy: columns
    f = frac.astype(np.int64)
    month, day, hour, minute, second = p[:, 2], p[:, 3], p[:, 4], p[:, 5], p[:, 6]
    ym = (p[:, 0] * 100 + p[:, 1]) * 12 + month - 1  # year * 12 + month - 1
    ok &= (month >= 1) & (month <= 12) & (hour <= 23) & (minute <= 59) & (second <= 59)
    ym = np.where(ok, ym, 0)
    first, length = _month_tables()
    ok &= (day >= 1) & (day <= length[ym])  # year 0 has length 0
    ms = ((first[ym] + day - 1) * 86_400_000 + hour * 3_600_000 + minute * 60_000 + second * 1000
          + f[:, 0] * 100 + f[:, 1] * 10 + f[:, 2])
    out: list[int | None] = ms.tolist()
    if not ok.all():
        bad = np.flatnonzero(~ok).tolist()
        for i, t in zip(bad, event_times([values[i] for i in bad]), strict=True):
            out[i] = t
        return _in_range(out, lo, hi)
    if lo is not None and hi is not None and not ((ms >= lo) & (ms <= hi)).all():
        return _in_range(out, lo, hi)
    return out
