"""JSON integers beyond 64 bits, kept exact through window and join as `jq` and `consume` keep them.

orjson, the parser of every hot path, reads an integer outside [-2**63, 2**64) as a float
(`100000000000000000001` becomes `1e+20`) and refuses to write one. Such an integer has at
least 19 digits in a row, which ordinary data (epoch-ms times, ISO strings, amounts) does
not: `may_hold_big_int` looks for that digit run, in a piece of a file with a few numpy
passes over every other byte (about 1 ms a MiB, against 20 or so for the parse), in a short
text (a line, a stored table row) with one translate. Only the lines that do hold one are
checked value by value and, when orjson did turn an integer into a float, parsed again by
the standard library, which keeps integers exact. Writing falls back the same way:
`dumps` is orjson's, and only where orjson refuses an int is it written as its exact
decimal text. Sums and averages over such integers are floats (numpy and orjson's numbers).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

# orjson reads [-2**63, 2**64) as int: the shortest integer beyond that is -9223372036854775809,
# 19 digits; a run of 19 digits holds at least 9 consecutive even positions
_RUN = 19
_DIGITS = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))  # a digit -> "0", any other byte -> " "
_ZEROS = b"0" * _RUN
_SHORT = 1 << 14  # below this, one translate costs less than numpy's calls


def may_hold_big_int(text: bytes) -> bool:
    """Whether `text` holds 19 or more ASCII digits in a row (never False when it does; rarely True
    when it does not). Every other byte is looked at: a run of 19 digits holds 9 of them in a row."""
    if len(text) < _RUN:
        return False
    if len(text) < _SHORT:  # a line, a table row: exact, and cheaper than numpy's calls
        return _ZEROS in text.translate(_DIGITS)
    import numpy as np

    a = np.frombuffer(text, np.uint8)[::2]
    m = (a - np.uint8(48)) < np.uint8(10)
    m = m[:-1] & m[1:]  # 2 in a row
    m = m[:-2] & m[2:]  # 4
    m = m[:-4] & m[4:]  # 8
    return bool((m[:-1] & m[1:]).any())  # 9


def _any_leaf(obj: Any, test: Callable[[Any], bool]) -> bool:
    """Whether any value nested in a parsed JSON value (itself included) passes `test`."""
    stack = [obj]
    while stack:
        o = stack.pop()
        if test(o):
            return True
        if isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, list):
            stack.extend(o)
    return False


def _big_float(o: Any) -> bool:
    return type(o) is float and o.is_integer() and abs(o) >= 2**63


def has_big_float(obj: Any) -> bool:
    """Whether a parsed value holds a float that may stand for an integer beyond 64 bits."""
    return _any_leaf(obj, _big_float)


def exact(line: bytes, obj: Any) -> Any:
    """`obj`, orjson's parse of `line`, or the standard library's where orjson turned an integer
    beyond 64 bits into a float (also when the line's digit run is elsewhere: one check)."""
    if not may_hold_big_int(line) or not has_big_float(obj):
        return obj
    import json

    try:
        return json.loads(line)
    except (ValueError, RecursionError):  # past int()'s digit limit or the stdlib's nesting: as orjson read it
        return obj


def loads(line: bytes) -> Any:
    """orjson.loads, with integers beyond 64 bits exact."""
    return exact(line, orjson.loads(line))


def _run_lines(text: bytes) -> list[int] | None:
    """The lines (from 0, cut at \\n) of `text` that hold 19 or more digits in a row, found exactly
    with numpy over every byte (may_hold_big_int only says that some may)."""
    import numpy as np

    a = np.frombuffer(text, np.uint8)
    m = (a - np.uint8(48)) < np.uint8(10)
    m2 = m[:-1] & m[1:]
    m4 = m2[:-2] & m2[2:]
    m8 = m4[:-4] & m4[4:]
    m16 = m8[:-8] & m8[8:]
    starts = np.flatnonzero(m16[:-3] & m16[3:])  # 19 in a row from each
    if not len(starts):
        return None
    return np.unique(np.searchsorted(np.flatnonzero(a == 10), starts)).tolist()


def exact_all(values: list[Any], lines: list[bytes] | None, text: bytes) -> list[Any]:
    """`values`, orjson's parse of the lines of `text` (one value a line; `lines` its lines when
    already split), with the values of lines that hold an integer beyond 64 bits parsed exactly.
    The whole text is looked at once; its lines only when it may hold one."""
    if not may_hold_big_int(text):
        return values
    if lines is None:
        lines = text.split(b"\n")
    at = _run_lines(text)
    if at is None:
        return values
    cut = text.count(b"\n") + (not text.endswith(b"\n"))
    if len(lines) != len(values) or len(lines) != cut:  # lines cut elsewhere too (splitlines): one by one
        return [exact(line, v) for line, v in zip(lines, values, strict=True)]
    values = list(values)
    for i in at:
        values[i] = exact(lines[i], values[i])
    return values


def _fragments(obj: Any) -> Any:
    """`obj` with every int orjson cannot write (beyond 64 bits) as its exact decimal text."""
    t = type(obj)
    if t is int:
        return obj if -(1 << 63) <= obj < 1 << 64 else orjson.Fragment(b"%d" % obj)
    if t is dict:
        return {k: _fragments(v) for k, v in obj.items()}
    if t is list or t is tuple:
        return [_fragments(v) for v in obj]
    return obj


def dumps(obj: Any, option: int | None = None) -> bytes:
    """orjson.dumps, with integers beyond 64 bits written exactly (orjson refuses them)."""
    try:
        return orjson.dumps(obj, option=option)
    except TypeError:
        return orjson.dumps(_fragments(obj), option=option)
