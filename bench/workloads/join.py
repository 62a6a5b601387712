"""join: enrichment (events x 10k profiles, --table) and searches x clicks (--within 1h)
vs DuckDB, a Python hash join and PySpark local[2]."""

from __future__ import annotations

from bench.datagen import lines, segments, size
from bench.runner import Bench, Contestant


def run(b: Bench) -> None:
    if not b.has_command("join"):
        b.skip("join", "`streamctl join` is not built yet")
        return
    n = b.records
    events = b.data.events_log(n)
    profiles = b.data.profiles_log(n)
    ev_segs, pr_segs = segments(events), segments(profiles)
    left, right = ":".join(ev_segs), ":".join(pr_segs)
    out = b.work / "join-ref.out"

    def clean() -> None:
        import shutil

        shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink(missing_ok=True)

    sub = "streamctl join (local)"
    group = f"join enrichment {n // 1000}k x 10k (--table --how left)"
    flags = ["--table", "--how", "left"]
    cs = [Contestant(sub, b.sc("join", str(events), str(profiles), *flags, "--engine", "local"), subject=True),
          Contestant("python hash join", b.ref("join_python", "enrich", left, right))]
    if b.tools.get("duckdb"):
        cs.append(Contestant("duckdb", b.ref("join_duckdb", "enrich", str(out), left, right), teardown=clean))
    if b.tools.get("pyspark"):
        cs.append(Contestant("streamctl join --engine spark local[2]",
                             b.sc("join", str(events), str(profiles), *flags, "--engine", "spark", "--master",
                                  "local[2]"), subject=True, spark=True))
        cs.append(Contestant("pyspark local[2] (hand-written)",
                             b.spark_ref("join", "local[2]", str(out), "enrich", left, right),
                             teardown=clean, spark=True))
    b.compare(group, cs, records=n, nbytes=size(ev_segs) + size(pr_segs))
    _targets(b, group, "join enrichment", sub)

    searches, clicks = b.data.searches_clicks(n)
    m = lines(searches) + lines(clicks)
    group = f"join searches x clicks {m // 2000}k x {m // 2000}k (--within 1h)"
    flags = ["--within", "1h", "--on", "sid", "--time-field", "time"]
    cs = [Contestant(sub, b.sc("join", str(searches), str(clicks), *flags, "--engine", "local"), subject=True,
                     tree=True),
          Contestant("python hash join", b.ref("join_python", "window", str(searches), str(clicks)))]
    if b.tools.get("duckdb"):
        cs.append(Contestant("duckdb", b.ref("join_duckdb", "window", str(out), str(searches), str(clicks)),
                             teardown=clean))
    if b.tools.get("pyspark"):
        cs.append(Contestant("streamctl join --engine spark local[2]",
                             b.sc("join", str(searches), str(clicks), *flags, "--engine", "spark", "--master",
                                  "local[2]"), subject=True, spark=True))
        cs.append(Contestant("pyspark local[2] (hand-written)",
                             b.spark_ref("join", "local[2]", str(out), "window", str(searches),
                              str(clicks)), teardown=clean, spark=True))
    b.compare(group, cs, records=m, nbytes=size(searches) + size(clicks))
    _targets(b, group, "join searches x clicks", sub)


def _targets(b: Bench, group: str, label: str, sub: str) -> None:
    r = b.ratio(group, sub, "duckdb")
    if r is not None:
        b.target(f"{label}: within 3x of DuckDB", f"{1 / r:.2f}x DuckDB's time", 1 / r <= 3)
    r = b.ratio(group, sub, "pyspark local[2] (hand-written)")
    if r is not None:
        b.target(f"{label}: >= 4x faster than PySpark local[2]", f"{r:.2f}x", r >= 4)
