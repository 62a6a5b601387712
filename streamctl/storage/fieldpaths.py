"""Field paths: the one rule that reads a dotted path out of a record or a value.

`value.user.id`, `key`, `ts`, `headers.trace-id`, `items.0.sku`, `a\\.b`. The rule (SPEC
section 2), for every flag that takes a path (`--key-field`, `--by`, `--agg`, `--time-field`,
`--on`, `--where`) and both engines:

- `key`, `ts`, `offset`, `partition`, `headers`, `value` as the first segment name the envelope;
  a path that starts with anything else is under `value` (`user.id` = `value.user.id`);
- a segment that is a decimal integer indexes an array (from 0; a negative one counts from the
  end); any other segment names an object key, and an object key `"0"` is found by the segment
  `0` too;
- `\\.` is a literal dot inside a name (`value.a\\.b` reads the key `a.b`);
- a path that does not resolve (a missing key, an index out of range, a step into a string or
  a number) is null.

`get` is the definition. `getter` (one value at a time, the common depths unrolled) and
`column` (a list of values at once, C-level passes where every value is an object) are its
faster forms; tests/props/test_field_path_kernels.py ties both to `get` on random JSON.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from operator import itemgetter
from typing import Any

from streamctl.errors import UsageError

ENVELOPE_FIELDS = ("offset", "partition", "ts", "key", "value", "headers")
Path = tuple[str, ...]

_INDEX = re.compile(r"-?[0-9]+\Z")
_MISSING = object()


def split_path(path: str) -> Path:
    """`a.b\\.c.0` -> ("a", "b.c", "0"); an empty segment is a usage error."""
    if "\\" in path:
        parts = [p.replace("\0", ".") for p in path.replace("\\.", "\0").split(".")]
    else:
        parts = path.split(".")
    if not path or not all(parts):
        raise UsageError(f"invalid field path {path!r} (write it like value.user.id; \\. is a dot inside a name)")
    return tuple(parts)


def record_path(path: str) -> Path:
    """A path into a record; a path that does not start with an envelope field is under value."""
    parts = split_path(path)
    if parts[0] not in ENVELOPE_FIELDS:
        parts = ("value", *parts)
    return parts


def value_path(path: str) -> Path:
    """A path into a value (`user.id`); a leading `value.` is accepted and dropped."""
    parts = split_path(path)
    if parts[0] == "value":
        parts = parts[1:]
    return parts


def is_index(segment: str) -> bool:
    """Whether a segment indexes an array (a decimal integer, maybe negative)."""
    return _INDEX.match(segment) is not None


def step(obj: Any, segment: str, default: Any = None) -> Any:
    """One segment of a path: an object's key, or an array's element when the segment is an index."""
    if type(obj) is dict:
        return obj.get(segment, default)
    if type(obj) is list and _INDEX.match(segment):
        i = int(segment)
        return obj[i] if -len(obj) <= i < len(obj) else default
    return default


def get(obj: Any, parts: Path, default: Any = None) -> Any:
    """The value at `parts` in `obj` (a record or a value), or `default` when the path does not resolve."""
    for p in parts:
        obj = step(obj, p, _MISSING)
        if obj is _MISSING:
            return default
    return obj


def getter(parts: Path) -> Callable[[Any], Any]:
    """`lambda obj: get(obj, parts)`, with the one- and two-object-level cases unrolled."""
    if len(parts) == 1:
        (a,) = parts
        if is_index(a):
            return lambda r: step(r, a)
        return lambda r: r.get(a) if r.__class__ is dict else None
    if len(parts) == 2 and not is_index(parts[0]) and not is_index(parts[1]):
        a, b = parts

        def get2(r: Any) -> Any:
            v = r.get(a) if r.__class__ is dict else None
            return v.get(b) if v.__class__ is dict else None

        return get2
    return lambda r: get(r, parts)


def column(values: list[Any], parts: Path) -> list[Any]:
    """`[get(v, parts) for v in values]`: a C-level pass per level while every value on the way is
    an object that has the key (a string key of an array, a string or a number raises, as does a
    missing key); any other shape is read value by value."""
    col = values
    try:
        for name in parts:
            col = list(map(itemgetter(name), col))
    except (KeyError, TypeError, IndexError):
        return list(map(getter(parts), values))
    return col if parts else list(values)
