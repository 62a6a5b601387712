"""window: tumbling 1m and session 30m per key vs DuckDB (and Polars, Python, PySpark local[2]), in three shapes.

- the main data, the realistic shape (bench/datagen.py events-real): ~50 ms apart (1M events are
  ~14 hours of event time, so sessions open and close all along), 10k keys with Zipf-like skew, 2%
  stragglers up to 10 minutes older, ISO times, nested values, as a plain .jsonl file and as a
  3-partition log; the ISO shape's command with `--lateness 15m` (no straggler is late, so DuckDB's
  windows over all events are the same windows). Targets: within 2x of DuckDB's time.
- the in-order ISO shape: one event object a line with an ISO-8601 time in `ts` and the amount nested
  in `value`, as a plain .jsonl file and as a 3-partition log keyed by user; the command is
  `window INPUT --tumbling 1m|--session 30m --time-field value.ts --by value.key --agg count
  --agg avg:value.value.amount`, against DuckDB with TIMESTAMPTZ columns (bench/refs.py
  window_iso_duckdb). Targets: within 2x of DuckDB's time.
- the fast shape: a 1-partition log keyed by user with an epoch-ms time (`time`), the record key
  as the group; every contestant.
"""

from __future__ import annotations

from bench.datagen import segments, size
from bench.runner import Bench, Contestant

KINDS = {
    "tumbling": (["--tumbling", "1m", "--agg", "count", "--agg", "avg:amount"], "tumbling 1m count+avg"),
    "session": (["--session", "30m", "--agg", "count"], "session 30m count"),
}
ISO_KINDS = {"tumbling": ["--tumbling", "1m"], "session": ["--session", "30m"]}
ISO_FLAGS = ["--time-field", "value.ts", "--by", "value.key", "--agg", "count", "--agg", "avg:value.value.amount"]
SUB = "streamctl window (local)"


def run(b: Bench) -> None:
    if not b.has_command("window"):
        b.skip("window", "`streamctl window` is not built yet")
        return
    out = b.work / "window-ref.out"

    def clean() -> None:
        import shutil

        shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink(missing_ok=True)

    _iso(b, out, clean, real=True)
    _iso(b, out, clean)
    _fast(b, out, clean)


def _iso(b: Bench, out, clean, real: bool = False) -> None:
    """ISO times, nested values; a plain file and a 3-partition log. `real`: the main data (stragglers,
    skewed keys, hours of event time, `--lateness 15m`), else the in-order ISO events 2 ms apart."""
    n = b.records
    plain = b.data.events_real(n) if real else b.data.events_iso(n)
    log = b.data.events_real_log(n) if real else b.data.events_iso_log(n)
    segs = segments(log)
    shape = "stragglers, skewed keys, ISO times" if real else "in order, ISO times"
    extra = ["--lateness", "15m"] if real else []
    for form, src, ref_args, nbytes in (("plain file", str(plain), ["plain", str(plain)], size(plain)),
                                        ("3-partition log", str(log), ["log", *segs], size(segs))):
        for kind, flags in ISO_KINDS.items():
            label = f"{flags[0][2:]} {flags[1]} count+avg"
            group = f"window {label} ({n // 1000}k, {shape}, {form})"
            cs = [Contestant(SUB, b.sc("window", src, *flags, *ISO_FLAGS, *extra, "--engine", "local"),
                             subject=True, tree=True)]
            if b.tools.get("duckdb"):
                cs.append(Contestant("duckdb", b.ref("window_iso_duckdb", kind, ref_args[0], str(out), *ref_args[1:]),
                                     teardown=clean))
            b.compare(group, cs, records=n, nbytes=nbytes)
            _target(b, group, f"window {label}, {shape}, {form}", 2)


def _target(b: Bench, group: str, label: str, limit: float) -> None:
    """Judged on wall time (what a user waits for); the CPU-time ratio is shown beside it."""
    r = b.ratio(group, SUB, "duckdb")
    if r is None:
        return
    c = b.ratio(group, SUB, "duckdb", cpu=True)
    cpu = f"; CPU time {1 / c:.2f}x" if c else ""
    b.target(f"{label}: within {limit:g}x of DuckDB's time", f"{1 / r:.2f}x DuckDB's wall time{cpu}",
             1 / r <= limit)


def _fast(b: Bench, out, clean) -> None:
    """The fast shape: epoch-ms times, flat values, a 1-partition log keyed by user."""
    n = b.records
    log = b.data.events_log(n)
    segs = segments(log)
    for kind, (flags, label) in KINDS.items():
        group = f"window {label} ({n // 1000}k, epoch-ms log)"
        cs = [Contestant(SUB, b.sc("window", str(log), *flags, "--time-field", "time", "--engine", "local"),
                         subject=True, tree=True),
              Contestant("python dict pass", b.ref("window_python", kind, *segs))]
        if b.tools.get("duckdb"):
            cs.append(Contestant("duckdb", b.ref("window_duckdb", kind, str(out), *segs), teardown=clean))
        if b.tools.get("polars"):
            cs.append(Contestant("polars", b.ref("window_polars", kind, str(out), *segs), teardown=clean))
        if b.tools.get("pyspark"):
            cs.append(Contestant("streamctl window --engine spark local[2]",
                                 b.sc("window", str(log), *flags, "--time-field", "time", "--engine", "spark",
                                      "--master", "local[2]"), subject=True, spark=True))
            cs.append(Contestant("pyspark local[2] (hand-written)",
                                 b.spark_ref("window", "local[2]", str(out), kind, *segs),
                                 teardown=clean, spark=True))
        b.compare(group, cs, records=n, nbytes=size(segs))
        _target(b, group, f"window {label}, epoch-ms log", 3)
        r = b.ratio(group, SUB, "pyspark local[2] (hand-written)")
        if r is not None:
            b.target(f"window {label}, epoch-ms log: >= 4x faster than PySpark local[2]", f"{r:.2f}x", r >= 4)
