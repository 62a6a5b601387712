"""Hand-written PySpark references: what a Spark user would write for the same work.

Run as `python -m bench.refs_spark NAME MASTER OUT ARGS...`. Each builds its own
session (so wall time includes JVM start-up, as streamctl's Spark engine does),
runs the DataFrame job and writes the result with Spark's parallel writer to OUT.
`spark.sql.shuffle.partitions` is set to 4 (a tuned local job; the default 200
costs ~1-2 s more per shuffle on 2 cores).
"""

from __future__ import annotations

import json
import os
import sys
import time

HOUR = 3_600_000
_STARTED = time.monotonic()
_READY: list[float] = []


def session(master: str):
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName("bench-ref")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    _READY.append(time.monotonic())
    return spark


def _finish(spark) -> None:
    """Stop the session; first, with STREAMCTL_JOB_TIMES=FILE set, append start-up and work
    seconds to FILE, measured as streamctl's generated jobs measure theirs (jobgen)."""
    path = os.environ.get("STREAMCTL_JOB_TIMES")
    if path and _READY:
        with open(path, "a") as f:
            f.write(json.dumps({"startup_s": round(_READY[0] - _STARTED, 3),
                                "work_s": round(time.monotonic() - _READY[0], 3)}) + "\n")
    spark.stop()


def startup(master: str, out: str) -> None:
    spark = session(master)
    spark.range(1).count()
    _finish(spark)


def _lines_df(spark, files):
    from pyspark.sql import functions as F

    df = spark.read.text(files)
    # The envelope prefix is fixed: {"offset":N,"partition":P,"ts":T,"key":...
    return df.select(
        F.col("value").alias("line"),
        F.regexp_extract("value", r'^\{"offset":(\d+)', 1).cast("long").alias("offset"),
        F.regexp_extract("value", r',"partition":(\d+)', 1).cast("int").alias("partition"),
        F.regexp_extract("value", r',"ts":(\d+)', 1).cast("long").alias("ts"),
        F.regexp_extract("value", r',"key":(null|"(?:[^"\\]|\\.)*")', 1).alias("key"),
    )


def replay(master: str, out: str, *files: str) -> None:
    spark = session(master)
    df = _lines_df(spark, list(files))
    df.orderBy("ts", "partition", "offset").select("line").write.mode("overwrite").text(out)
    _finish(spark)


def replay_compact(master: str, out: str, *files: str) -> None:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spark = session(master)
    df = _lines_df(spark, list(files))
    w = Window.partitionBy("key").orderBy(F.col("partition").desc(), F.col("offset").desc())
    latest = (df.withColumn("rn", F.row_number().over(w)).where("rn = 1")
              .where(~F.col("line").endswith(',"value":null}')))
    latest.orderBy("ts", "partition", "offset").select("line").write.mode("overwrite").text(out)
    _finish(spark)


def _events(spark, files):
    from pyspark.sql import types as T

    schema = T.StructType([
        T.StructField("key", T.StringType()),
        T.StructField("value", T.StructType([T.StructField("time", T.LongType()),
                                             T.StructField("amount", T.DoubleType())])),
    ])
    return spark.read.schema(schema).json(files)


def window(master: str, out: str, kind: str, *files: str) -> None:
    from pyspark.sql import functions as F

    spark = session(master)
    df = _events(spark, list(files)).select("key", F.timestamp_millis("value.time").alias("t"),
                                            F.col("value.amount").alias("amount"))
    if kind == "tumbling":
        res = df.groupBy("key", F.window("t", "1 minute")).agg(F.count("*").alias("count"),
                                                                F.avg("amount").alias("avg_amount"))
    else:
        res = df.groupBy("key", F.session_window("t", "30 minutes")).agg(F.count("*").alias("count"))
    res.write.mode("overwrite").json(out)
    _finish(spark)


def join(master: str, out: str, kind: str, left: str, right: str) -> None:
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    spark = session(master)
    if kind == "enrich":
        schema = T.StructType([T.StructField("offset", T.LongType()), T.StructField("key", T.StringType()),
                               T.StructField("value", T.StringType())])
        ev = spark.read.schema(schema).json(left.split(":"))
        pr = spark.read.schema(schema).json(right.split(":"))
        w = Window.partitionBy("key").orderBy(F.col("offset").desc())
        table = pr.withColumn("rn", F.row_number().over(w)).where("rn = 1").select(
            "key", F.col("value").alias("right"))
        res = ev.select("key", F.col("value").alias("left")).join(table, "key", "left")
    else:
        ss = "sid STRING, user STRING, time BIGINT, query STRING, results BIGINT"
        cs = "sid STRING, time BIGINT, pos BIGINT, dwell_ms BIGINT"
        s = spark.read.schema(ss).json(left).alias("s")
        c = spark.read.schema(cs).json(right).alias("c")
        res = s.join(c, (F.col("s.sid") == F.col("c.sid")) &
                     (F.col("c.time").between(F.col("s.time") - HOUR, F.col("s.time") + HOUR))).select(
            F.col("s.sid").alias("key"), F.struct("s.*").alias("left"), F.struct("c.*").alias("right"))
    res.write.mode("overwrite").json(out)
    _finish(spark)


def main(argv: list[str]) -> None:
    name, args = argv[0], argv[1:]
    globals()[name.replace("-", "_")](*args)


if __name__ == "__main__":
    main(sys.argv[1:])
