"""window: tumbling 1m count+avg and session 30m count per key vs DuckDB, Polars, Python, PySpark local[2]."""

from __future__ import annotations

from bench.datagen import segments, size
from bench.runner import Bench, Contestant

KINDS = {
    "tumbling": (["--tumbling", "1m", "--agg", "count", "--agg", "avg:amount"], "tumbling 1m count+avg"),
    "session": (["--session", "30m", "--agg", "count"], "session 30m count"),
}


def run(b: Bench) -> None:
    if not b.has_command("window"):
        b.skip("window", "`streamctl window` is not built yet")
        return
    n = b.records
    log = b.data.events_log(n)
    segs = segments(log)
    out = b.work / "window-ref.out"

    def clean() -> None:
        import shutil

        shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink(missing_ok=True)

    for kind, (flags, label) in KINDS.items():
        group = f"window {label} ({n // 1000}k)"
        sub = "streamctl window (local)"
        cs = [Contestant(sub, b.sc("window", str(log), *flags, "--time-field", "time", "--engine", "local"),
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
        r = b.ratio(group, sub, "duckdb")
        if r is not None:
            b.target(f"window {label}: within 3x of DuckDB", f"{1 / r:.2f}x DuckDB's time", 1 / r <= 3)
        r = b.ratio(group, sub, "pyspark local[2] (hand-written)")
        if r is not None:
            b.target(f"window {label}: >= 4x faster than PySpark local[2]", f"{r:.2f}x", r >= 4)
