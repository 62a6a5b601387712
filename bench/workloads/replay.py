"""replay and replay --compact at 1M and 5M on the local and Spark engines: where is the crossover?

Spark wall times include JVM start-up (that is what a user waits for). The
jobs' time after start-up is compared from each job's own record
(STREAMCTL_JOB_TIMES: the seconds from the SparkSession being up to the last
output byte, written by the generated job and by bench/refs_spark.py alike):
streamctl's generated job vs a hand-written PySpark job doing the same work
(target: within 1.2x). A bare session start+stop is still measured, for the
table and for the older estimate (wall minus start-up) when a job leaves no
record. The Spark job's scaling from 1
to 2 cores is measured at the smaller size.
"""

from __future__ import annotations

import shutil

from bench.datagen import segments, size
from bench.runner import Bench, Contestant

LOCAL = "streamctl replay (local)"
SPARK = "streamctl replay --engine spark local[2]"
HAND = "pyspark local[2] (hand-written)"


def run(b: Bench) -> None:
    if not b.has_command("replay"):
        b.skip("replay", "`streamctl replay` is not built yet")
        return
    sizes = [b.records] if b.quick else [b.records, b.records * b.big_factor]
    spark = b.tools.get("pyspark", False)
    out = b.work / "replay-ref.out"

    def clean() -> None:
        shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink(missing_ok=True)

    startup = None
    if spark:
        rows = b.compare("pyspark session start-up", [
            Contestant("pyspark local[2] session start+stop", b.spark_ref("startup",
                                                                "local[2]", str(out)), spark=True)], records=None, nbytes=None)
        startup = rows[0].wall if rows[0].walls else None

    fits: dict[str, list[tuple[int, float, float]]] = {"replay": [], "replay --compact": []}
    for n in sizes:
        log = b.data.cdc_log(n)
        segs = segments(log)
        nbytes = size(segs)
        for label, extra, ref_name, spark_ref in (
            ("replay", [], "cat (floor)", "replay"),
            ("replay --compact", ["--compact"], "python dict pass", "replay_compact"),
        ):
            group = f"{label} {n // 1000}k"
            cs = [Contestant(LOCAL, b.sc("replay", str(log), *extra, "--engine", "local"), subject=True)]
            if label == "replay":
                cs.append(Contestant(ref_name, ["cat", *segs]))
            else:
                cs.append(Contestant(ref_name, b.ref("compact_dict_snapshot", *segs)))
            if spark:
                cs.append(Contestant(SPARK, b.sc("replay", str(log), *extra, "--engine", "spark", "--master",
                                                 "local[2]"), subject=True, spark=True))
                cs.append(Contestant(HAND, b.spark_ref(spark_ref, "local[2]", str(out), *segs),
                                     teardown=clean, spark=True))
            b.compare(group, cs, records=n, nbytes=nbytes)
            lo, sp, hw = b.row(group, LOCAL), b.row(group, SPARK), b.row(group, HAND)
            if lo and sp:
                fits[label].append((n, lo.wall, sp.wall))
            if sp and hw:
                wall_r = sp.wall / hw.wall
                if sp.work and hw.work:
                    # each job's own clock from the session being up to its last output byte
                    r = sp.work / hw.work
                    how = (f"{r:.2f}x after start-up ({sp.work:.1f} s vs {hw.work:.1f} s of work, medians of each "
                           f"job's own record; whole wall {sp.wall:.1f} s vs {hw.wall:.1f} s)")
                elif startup and hw.wall - startup > 0.5:
                    r = (sp.wall - startup) / (hw.wall - startup)
                    how = f"{r:.2f}x after start-up ({sp.wall:.1f} s vs {hw.wall:.1f} s wall, start-up {startup:.1f} s)"
                else:  # start-up is not measurably below the job: compare whole walls
                    r = wall_r
                    how = f"{r:.2f}x wall ({sp.wall:.1f} s vs {hw.wall:.1f} s; start-up not separable)"
                b.target(f"{group}: generated Spark job within 1.2x of hand-written PySpark", how, r <= 1.2)
            if label == "replay --compact" and n == b.records:
                r = b.ratio(group, LOCAL, ref_name)
                if r is not None:
                    b.target(f"{group}: local engine within 1.2x of a plain-Python dict pass",
                             f"{1 / r:.2f}x its time", 1 / r <= 1.2)

    if spark:
        n = b.records
        log = b.data.cdc_log(n)
        segs = segments(log)
        group = f"replay --compact {n // 1000}k: Spark cores"
        b.compare(group, [
            Contestant("streamctl --engine spark local[1]", b.sc("replay", str(log), "--compact", "--engine", "spark",
                                                                 "--master", "local[1]"), subject=True, spark=True),
            Contestant("streamctl --engine spark local[2]", b.sc("replay", str(log), "--compact", "--engine", "spark",
                                                                 "--master", "local[2]"), subject=True, spark=True),
        ], records=n, nbytes=size(segs), note="1 vs 2 cores")

    for label, pts in fits.items():
        if len(pts) < 2:
            if pts:
                n, lo, sp = pts[0]
                b.notes.append(f"{label} at {n}: local {lo:.1f} s, spark {sp:.1f} s (one size only: no crossover fit)")
            continue
        (n1, l1, s1), (n2, l2, s2) = pts[0], pts[-1]
        bl, bs = (l2 - l1) / (n2 - n1), (s2 - s1) / (n2 - n1)  # seconds per record
        if bl <= bs:
            msg = (f"{label}: the local engine's cost per record ({bl * 1e6:.2f} us) is not above Spark's "
                   f"({bs * 1e6:.2f} us) on this machine: no crossover; Spark never wins here")
        else:
            cross = (s1 - l1) / (bl - bs) + n1
            msg = (f"{label}: linear fit local {l1:.1f}->{l2:.1f} s, spark {s1:.1f}->{s2:.1f} s for {n1}->{n2} "
                   f"records: crossover at ~{cross / 1e6:.1f}M records (~{cross * size(segments(b.data.cdc_log(n1))) / n1 / 2**30:.1f} GiB)")
        b.notes.append(msg)
        b.target(f"{label}: measured crossover local vs Spark (sets --spark-threshold)", msg.split(": ", 1)[1], None)
