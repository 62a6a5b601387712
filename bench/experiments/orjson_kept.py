"""Experiment: the cost of holding many orjson.dumps results until a batch is written.

    python -m bench.experiments.orjson_kept [N]

Dumps N small rows (capture's shape: an int key, a text, an int, as orjson.Fragment numbers)
three ways, each in a fresh list kept until the end, as capture's pending records are kept until
a flush: the results as orjson returns them, the same copied with `b"%b" % ...` (a bytes object
of Python's small-object allocator; orjson's own result is a large buffer shrunk in place), and
the results dropped at once (the floor). Seconds per N, best of 5, and the peak RSS.
"""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = r"""
import sys, time, orjson
from orjson import Fragment
n, mode = int(sys.argv[1]), sys.argv[2]
rows = [{"id": Fragment(str(i)), "v": "v%d" % i, "n": Fragment(str(i // 2))} for i in range(n)]
best = 1e9
for _ in range(5):
    t = time.perf_counter()
    if mode == "kept":
        out = [orjson.dumps(r) for r in rows]
    elif mode == "copied":
        out = [b"%b" % orjson.dumps(r) for r in rows]
    else:
        for r in rows:
            orjson.dumps(r)
        out = []
    best = min(best, time.perf_counter() - t)
    del out
print(best)
"""


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    for mode in ("kept", "copied", "dropped"):
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(n), mode], stdout=subprocess.PIPE, text=True)
        out = proc.stdout.read() if proc.stdout else ""
        _, _, ru = os.wait4(proc.pid, 0)
        secs = float(out)
        print(f"{mode:8} {secs:.3f} s per {n} ({secs / n * 1e6:.2f} us each), peak RSS {ru.ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
