"""orjson's `dumps`, `loads` and `OPT_SORT_KEYS` from the standard library, for a generated Spark job
on a cluster without orjson: the modules a job carries import `orjson` and fall back to this.

streamctl itself always has orjson (a dependency). The text is orjson's for the values records
hold in practice (objects, arrays, strings, integers, booleans, null, most floats: compact, UTF-8,
not ASCII-escaped); a float may be written another way (`1e+16` where orjson writes `1e16`).
"""

from __future__ import annotations

import json
from typing import Any

OPT_SORT_KEYS = 32  # orjson's value
JSONDecodeError = json.JSONDecodeError  # orjson's is a subclass of it too


def dumps(obj: Any, option: int | None = None) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"),
                      sort_keys=bool((option or 0) & OPT_SORT_KEYS)).encode()


def loads(data: bytes | str) -> Any:
    return json.loads(data)
