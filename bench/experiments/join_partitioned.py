"""Experiment: an inner stream-stream join of two plain files split by key over two processes.

    python -m bench.experiments.join_partitioned LEFT RIGHT OUT [--within-ms MS] [--on FIELD] [--time-field FIELD]

Not a streamctl code path: it holds each process's events in memory and
handles no bad input; it measures how far the design can go (docs/benchmarks.md,
"Summary"). Its output must equal `streamctl join LEFT RIGHT --within ...
--on FIELD --time-field FIELD` byte for byte (the run prints the md5 to compare).

Why it can be split: in the merged input order each record's merge key is the
running maximum of its own input's times, and the watermark at a record, W,
equals its merge key (every record before it has a time at most that key, and
the key is reached by a record of its input at or before it). So the rule
"a pairs with b when |t_a - t_b| <= within and t_a + within >= W(b)" needs no
global state, and each process can join the keys of its hash half alone:

1. The parent reads, parses and partitions LEFT, the child RIGHT (hash of the
   key & 1); each sends the other half to its peer.
2. Each merges its own half with its peer's by (merge key, side, line number),
   the global input order, and joins it; a row is tagged with its later
   event's position.
3. The parent sorts both processes' rows by that tag (two sorted runs: one
   linear merge in C) and writes them.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import marshal
import os
import sys
import threading
import time
from itertools import compress
from typing import Any

import orjson

from streamctl.processing import inputorder, mergeorder
from streamctl.processing.joins.keys import block_column, block_times

IDX_BITS = 40  # line numbers below 2**40


def read_side(path: str, side: int, key_field: str, time_field: str) -> tuple[list[list[Any]], list[list[Any]]]:
    """(partition 0 columns, partition 1 columns) of one file: positions, times, keys, payloads."""
    times_of = block_times(("value", time_field))
    keys_of = block_column(("value", key_field))
    high = mergeorder.NO_TIME
    parts: tuple[list[list[Any]], list[list[Any]]] = ([[], [], [], []], [[], [], [], []])
    idx = 0
    for values, payloads in inputorder.plain_blocks(path, raw=True):
        ts = times_of(values)
        ks = keys_of(values)
        marks = mergeorder.merge_keys(ts, high)
        high = marks[-1] if marks else high
        n = len(ts)
        pos = [((m << 1 | side) << IDX_BITS) | i for m, i in zip(marks, range(idx, idx + n), strict=True)]
        idx += n
        half = [hash(k) & 1 for k in ks]
        for want, dst in enumerate(parts):
            sel = [h == want for h in half]
            for col, src in zip(dst, (pos, ts, ks, payloads), strict=True):
                col.extend(compress(src, sel))
    return parts


def join(a: list[list[Any]], b: list[list[Any]], within: int) -> tuple[list[int], list[bytes]]:
    """Inner join of one key half: (row tags, rows) in output order. The state and the pair test
    are those of the record-at-a-time inner join's (without its eviction), with the watermark
    taken from each record's merge key instead of a running maximum."""
    pos = a[0] + b[0]
    order = sorted(range(len(pos)), key=pos.__getitem__)
    n_a = len(a[0])
    cols = [list(map((a[c] + b[c]).__getitem__, order)) for c in range(4)]
    sides = [i >= n_a for i in order]
    dumps = orjson.dumps
    jn = b"".join
    buf: dict[Any, list[Any]] = {}
    rows: list[bytes] = []
    tags: list[int] = []
    shift = IDX_BITS + 1
    for p, side, t, k, v in zip(cols[0], sides, cols[1], cols[2], cols[3], strict=True):
        floor = (p >> shift) - within
        e = buf.get(k)
        if e is None:
            if t >= floor:
                buf[k] = [None, (t, v)] if side else [(t, v), None]
            continue
        o = e[0] if side else e[1]
        if o is not None:
            for x in ((o,) if o.__class__ is tuple else o):
                ot = x[0]
                if ot >= floor and -within <= ot - t <= within:
                    ov = x[1]
                    vb = v if v.__class__ is bytes else dumps(v)
                    ob = ov if ov.__class__ is bytes else dumps(ov)
                    tags.append(p)
                    lv, rv = (ob, vb) if side else (vb, ob)
                    rows.append(jn((b'{"key":', dumps(k), b',"left":', lv, b',"right":', rv, b"}\n")))
        if t >= floor:
            cur = e[side]
            if cur is None:
                e[side] = (t, v)
            elif cur.__class__ is tuple:
                e[side] = [cur, (t, v)]
            else:
                cur.append((t, v))
    return tags, rows


def send(fd: int, obj: Any) -> None:
    data = marshal.dumps(obj)
    view = memoryview(len(data).to_bytes(8, "little") + data)
    while view:
        view = view[os.write(fd, view[: 1 << 20]):]


def recv(fd: int) -> Any:
    def exact(n: int) -> bytes:
        parts = []
        while n:
            chunk = os.read(fd, min(n, 1 << 20))
            if not chunk:
                raise EOFError
            n -= len(chunk)
            parts.append(chunk)
        return b"".join(parts)

    return marshal.loads(exact(int.from_bytes(exact(8), "little")))


def _half(args: argparse.Namespace, path: str, side: int, send_fd: int,
          recv_fd: int) -> tuple[list[int], list[bytes], float, float]:
    """Read this process's file, swap halves with the peer, join this process's key half (the parent
    keeps hash half 0, the child half 1): (tags, rows, time read, time joined)."""
    halves = read_side(path, side, args.on, args.time_field)
    sender = threading.Thread(target=send, args=(send_fd, halves[1 - side]))
    sender.start()
    peer = recv(recv_fd)
    sender.join()
    t1 = time.perf_counter()
    own = halves[side]
    tags, rows = join(own, peer, args.within_ms) if side == 0 else join(peer, own, args.within_ms)
    return tags, rows, t1, time.perf_counter()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("left")
    ap.add_argument("right")
    ap.add_argument("out")
    ap.add_argument("--within-ms", type=int, default=3_600_000)
    ap.add_argument("--on", default="sid")
    ap.add_argument("--time-field", default="time")
    args = ap.parse_args()
    t0 = time.perf_counter()
    gc.disable()
    from_child, to_parent = os.pipe()
    from_parent_r, to_child = os.pipe()
    rows_r, rows_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        tags, rows, t1, t2 = _half(args, args.right, 1, to_parent, from_parent_r)
        send(rows_w, (tags, rows))
        sys.stderr.write(f"child: read+exchange {t1 - t0:.2f} s, join {t2 - t1:.2f} s\n")
        os._exit(0)
    tags, rows, t1, t2 = _half(args, args.left, 0, to_child, from_child)
    child_tags, child_rows = recv(rows_r)
    t3 = time.perf_counter()
    tags += child_tags
    rows += child_rows
    order = sorted(range(len(tags)), key=tags.__getitem__)
    data = b"".join(map(rows.__getitem__, order))
    with open(args.out, "wb") as f:
        f.write(data)
    os.waitpid(pid, 0)
    sys.stderr.write(f"parent: read+exchange {t1 - t0:.2f} s, join {t2 - t1:.2f} s, waited {t3 - t2:.2f} s; "
                     f"total {time.perf_counter() - t0:.2f} s; {len(rows)} rows, md5 {hashlib.md5(data).hexdigest()}\n")


if __name__ == "__main__":
    main()
