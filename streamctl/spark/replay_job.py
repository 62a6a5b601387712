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
5. --compact: per key, the last record in (ts, partition, offset) order;
   a tombstone (value null) deletes the key; records without a key are left out.
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
ENVELOPE = r'^\{"offset":(\d+),"partition":(\d+),"ts":(\d+),"key":(null|"(?:[^"\\]|\\.)*"),"value":'
PY_ENVELOPE = re.compile(ENVELOPE.encode())


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
    m = PY_ENVELOPE.match(line)
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


def _envelope_field(line, group, name):
    fast = F.regexp_extract(line, ENVELOPE, group)
    return F.when(fast != "", fast.cast("long")).otherwise(F.get_json_object(line, "$." + name).cast("long"))


def _key(line):
    """The key as a string (JSON-decoded), NULL for a null key."""
    text = F.regexp_extract(line, ENVELOPE, 4)
    decoded = F.get_json_object(line, "$.key")
    # the caller puts `text` in column k_text first; without a backslash the
    # JSON string's content is the key itself
    plain = F.expr("substring(k_text, 2, length(k_text) - 2)")
    k_text = F.col("k_text")
    return text, F.when(k_text == "", decoded).when(k_text == "null", F.lit(None)).when(
        k_text.contains("\\"), decoded).otherwise(plain)


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
    df = spark.read.option("lineSep", "\n").text(files)
    line = F.col("value")
    df = df.select(
        line.alias("line"),
        _envelope_field(line, 1, "offset").alias("offset"),
        _envelope_field(line, 2, "partition").alias("partition"),
        _envelope_field(line, 3, "ts").alias("ts"),
    )
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
        text, key = _key(F.col("line"))
        df = df.withColumn("k_text", text).withColumn("key", key).drop("k_text")
        if params.get("key") is not None:
            df = df.where(F.col("key") == F.lit(params["key"]))
    if params.get("compact"):
        df = df.where(F.col("key").isNotNull()).withColumn("tombstone", _tombstone(F.col("line")))
        latest = F.max(F.struct("ts", "partition", "offset", "tombstone", "line")).alias("r")
        df = df.groupBy("key").agg(latest).select("r.*").where(~F.col("tombstone"))
    return df.select("line", "offset", "partition", "ts")


def main(spark, params, out):
    ordered = replay_frame(spark, params).orderBy("ts", "partition", "offset").select("line")
    for row in ordered.toLocalIterator(prefetchPartitions=True):
        out(row[0])
