"""Replay (and --compact) a streamctl log with PySpark: the body of the generated job.

This module is read as text by streamctl.spark.jobgen and pasted into the
standalone script; it imports only pyspark and the standard library. It gives
the same lines in the same order as `streamctl replay --engine local`:

1. List the log's segment files (LOG/pN/<20-digit base>.jsonl) through Hadoop's
   FileSystem API, so LOG may be a local folder or any Spark URI (hdfs://,
   s3a://). A partition's active segment may end in a torn line (a writer
   crashed mid-append); it is never visible, as in streamctl itself.
2. Read the segments as text: one row per stored line, kept as is.
3. Extract only the envelope (offset, partition, ts, key) from the line's fixed
   prefix with a regular expression (JSON parsing only for lines written by
   hand in another layout); the value is never parsed.
4. Filter: each partition's end (a snapshot taken when streamctl started the
   job, or the visible end), --from/--until (offsets per partition, or times;
   half-open [from, until)), --key.
5. --compact: per key, the last record in (ts, partition, offset) order
   (max of a struct in a hash-partitioned aggregate); a tombstone (value null)
   deletes the key; records without a key are left out.
6. Sort by (ts, partition, offset) and stream the original lines to the driver
   partition by partition (toLocalIterator), in order.
"""

import json
import re
import time

from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

SEGMENT_FILE = re.compile(r"^(\d{20})\.jsonl$")
PARTITION_DIR = re.compile(r"^p(\d+)$")
# The canonical prefix of a stored line; streamctl writes every line this way.
PY_PREFIX = re.compile(rb'^\{"offset":(\d+),"partition":(\d+),"ts":(\d+),')


def list_segments(spark, log):
    """{partition: [(base offset, path string, length)]}, oldest segment first."""
    sc = spark.sparkContext
    hadoop_path = sc._jvm.org.apache.hadoop.fs.Path
    root = hadoop_path(log)
    fs = root.getFileSystem(sc._jsc.hadoopConfiguration())
    found = {}
    for status in fs.globStatus(hadoop_path(root, "p*/*.jsonl")) or []:
        path = status.getPath()
        seg = SEGMENT_FILE.match(path.getName())
        part = PARTITION_DIR.match(path.getParent().getName())
        if seg and part and status.isFile():
            found.setdefault(int(part.group(1)), []).append((int(seg.group(1)), path.toString(), status.getLen()))
    return {p: sorted(segs) for p, segs in found.items()}, fs


def _read_range(spark, fs, path, start, length):
    hadoop_path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path
    stream = fs.open(hadoop_path(path))
    try:
        stream.seek(start)
        return bytes(spark.sparkContext._jvm.org.apache.commons.io.IOUtils.toByteArray(stream, length))
    finally:
        stream.close()


def _offset_of(line):
    m = PY_PREFIX.match(line)
    if m:
        return int(m.group(1))
    return int(json.loads(line)["offset"])


def visible_ends(spark, fs, segments):
    """{partition: end offset (exclusive)} for partitions whose active segment has a torn tail."""
    ends = {}
    for p, segs in segments.items():
        base, path, size = segs[-1]
        if size == 0 or _read_range(spark, fs, path, size - 1, 1) == b"\n":
            continue
        # A torn tail: the visible end is just after the last complete line.
        want = 1 << 16
        while True:
            start = max(0, size - want)
            data = _read_range(spark, fs, path, start, size - start)
            cut = data.rfind(b"\n")
            if cut < 0 and start == 0:
                ends[p] = base  # not one complete line in the active segment
                break
            if cut >= 0:
                prev = data.rfind(b"\n", 0, cut)
                if prev >= 0 or start == 0:
                    ends[p] = _offset_of(data[prev + 1:cut]) + 1
                    break
            want *= 4
    return ends


SCHEMA = StructType([StructField(n, t) for n, t in (
    ("line", StringType()), ("offset", LongType()), ("partition", LongType()), ("ts", LongType()))])
PREFIX = r'^\{"offset":(\d+),"partition":(\d+),"ts":(\d+),'


def _envelope(df):
    """Add offset, partition, ts from the line's fixed prefix (JSON parsing only for other layouts).

    Two projections, so each regular expression runs once per line (Spark keeps
    a column that is used twice instead of inlining its expression twice).
    """
    line = F.col("line")
    df = df.select(line, *[F.regexp_extract(line, PREFIX, i).alias(f"_{name}")
                           for i, name in enumerate(("offset", "partition", "ts"), 1)])
    return df.select(line, *[
        F.when(F.col(f"_{name}") != "", F.col(f"_{name}").cast("long"))
        .otherwise(F.get_json_object(line, "$." + name).cast("long")).alias(name)
        for name in ("offset", "partition", "ts")])


def _with_key(df):
    """Add `key`: the key as a string (JSON-decoded), NULL for a null key.

    Like streamctl.record.key_bytes: the JSON text between the first ,"key":
    and the next ,"value": (a JSON string cannot hold either unescaped); it is
    decoded only when it has escapes, and lines in another layout are parsed.
    """
    line = F.col("line")
    df = df.withColumn("_key", F.substring_index(F.substring_index(line, ',"value":', 1), ',"key":', -1))
    text = F.col("_key")
    canonical = line.contains(',"key":') & line.contains(',"value":')
    plain = text.substr(F.lit(2), F.length(text) - 2)  # the string without its quotes
    decoded = F.get_json_object(line, "$.key")
    key = (F.when(~canonical, decoded).when(text == "null", F.lit(None))
           .when(text.contains("\\"), decoded).otherwise(plain))
    return df.withColumn("key", key).drop("_key")


def _tombstone(line):
    # Same rule as streamctl.record.is_tombstone: fast suffix test unless headers follow the value.
    return F.when(line.contains('"headers"'), F.get_json_object(line, "$.value").isNull()).otherwise(
        line.endswith(',"value":null}'))


def _bound(spec, now_ms, bound):
    """(column name, value) for a from/until spec: {"offset": n} | {"ts": ms} | {"ago_ms": d}."""
    if not spec:
        return None
    if "offset" in spec:
        return "offset", int(spec["offset"])
    if "ts" in spec:
        return "ts", int(spec["ts"])
    if "ago_ms" in spec:
        return "ts", now_ms - int(spec["ago_ms"])
    raise ValueError(f"bad {bound} bound in PARAMS: {spec!r}")


RESULT_PARTITION_BYTES = 8 << 20


def _size_result_partitions(spark, input_bytes, params):
    """Keep the sorted result's partitions small: the driver receives them one at a
    time (toLocalIterator) and must hold one in its heap (1 GiB by default)."""
    target = int(params.get("result_partition_bytes") or RESULT_PARTITION_BYTES)
    spark.conf.set("spark.sql.adaptive.enabled", "true")
    spark.conf.set("spark.sql.adaptive.advisoryPartitionSizeInBytes", str(target))
    wanted = input_bytes // target + 1
    if wanted > int(spark.conf.get("spark.sql.shuffle.partitions")):
        spark.conf.set("spark.sql.adaptive.coalescePartitions.initialPartitionNum", str(wanted))


def replay_frame(spark, params):
    """The selected records as (line, offset, partition, ts), unordered."""
    segments, fs = list_segments(spark, params["log"])
    if not segments:
        return spark.createDataFrame([], SCHEMA)
    ends = visible_ends(spark, fs, segments)
    for p, end in (params.get("end_offsets") or {}).items():
        ends[int(p)] = min(int(end), ends.get(int(p), int(end)))
    files = [path for segs in segments.values() for _, path, size in segs if size > 0]
    if not files:
        return spark.createDataFrame([], SCHEMA)
    _size_result_partitions(spark, sum(size for segs in segments.values() for _, _, size in segs), params)
    df = _envelope(spark.read.option("lineSep", "\n").text(files).withColumnRenamed("value", "line"))
    if ends:
        cap = F.create_map(*[x for p, e in sorted(ends.items()) for x in (F.lit(p), F.lit(e))])
        df = df.where(F.coalesce(F.col("offset") < cap[F.col("partition")], F.lit(True)))
    now_ms = params.get("now_ms") or int(time.time() * 1000)
    lo = _bound(params.get("from"), now_ms, "from")
    hi = _bound(params.get("until"), now_ms, "until")
    if lo:
        df = df.where(F.col(lo[0]) >= lo[1])
    if hi:
        df = df.where(F.col(hi[0]) < hi[1])
    if params.get("key") is not None or params.get("compact"):
        df = _with_key(df)
        if params.get("key") is not None:
            df = df.where(F.col("key") == F.lit(params["key"]))
    if params.get("compact"):
        # Records without a key form one group whose every member is marked
        # `drop`, like tombstones (a filter on the key would be pushed into the
        # scan by the optimizer and compute the key twice per line).
        df = df.withColumn("drop", F.col("key").isNull() | _tombstone(F.col("line")))
        latest = F.max(F.struct("ts", "partition", "offset", "drop", "line")).alias("r")
        df = df.groupBy("key").agg(latest).select("r.*").where(~F.col("drop"))
    return df.select("line", "offset", "partition", "ts")


def main(spark, params, out):
    ordered = replay_frame(spark, params).orderBy("ts", "partition", "offset").select("line")
    for row in ordered.toLocalIterator(prefetchPartitions=True):
        out(row[0])
