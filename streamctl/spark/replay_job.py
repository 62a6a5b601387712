"""Replay (and --compact) a streamctl log with PySpark: the job module of `streamctl replay --engine spark`.

A generated job file (streamctl.spark.jobgen) carries this module whole and
runs its main(spark, params, out); the window and join jobs read their inputs
with its input_records(). It imports only pyspark, the standard library
(orjson when present, for the records those jobs parse), streamctl's record
layout (storage.record: the offset of a stored line) and jobentry (the files a
URI names). It gives the same lines in the same order as `streamctl replay --engine local`:

1. List the log's segment files (LOG/pN/<20-digit base>.jsonl) through Hadoop's
   FileSystem API, so LOG may be a local folder or any Spark URI (hdfs://,
   s3a://). A partition's active segment may end in a torn line (a writer
   crashed mid-append); it is never visible, as in streamctl itself.
2. Read the segments as text: one row per stored line, kept as is.
3. Extract only the envelope (offset, partition, ts, key) from the line's fixed
   prefix, cut at its commas (JSON parsing only for lines written by hand in
   another layout); the value is never parsed.
4. Filter: each partition's end (a snapshot taken when streamctl started the
   job, or the visible end), --from/--until (offsets per partition, or times;
   half-open [from, until)), --key. Segment files wholly past a partition's end
   or outside --from/--until offsets are not read, and the end filter applies
   only to the files that can reach past it (usually the active segment). When
   streamctl runs the job on this machine it copies each active segment up to
   the end first (PARAMS["segment_copies"]), and the job reads the copy instead:
   one scan of unchanging files, no end filter.
5. --compact: per key, the last record in (ts, partition, offset) order
   (max of a struct in a hash-partitioned aggregate); a tombstone (value null)
   deletes the key; records without a key are left out. Then the filters of
   consume (PARAMS["filter"]: several --key, --header, --where), by streamctl's
   own Filter on each line (streamctl.clients.filters, shipped with the job), so
   they select the same records as the local engine: with --compact, rows of
   the table.
6. Sort by (ts, partition, offset) (a range-partitioned sort) and hand the
   original lines out in order. With a local master (and whenever
   PARAMS["scratch"] names a folder every executor and the driver can reach) the
   sorted result is written as text part files by Spark's parallel writer,
   whose part numbers follow the sort's ranges; the driver then copies the part
   files, in part order, byte for byte to the output (the job's own Output,
   streamctl.spark.jobentry: sendfile for local files) and deletes them.
   Otherwise (a cluster without a scratch folder, PARAMS["scratch"] = false, or
   main() called with a plain callable as `out`) the lines stream through the
   driver partition by partition (toLocalIterator).
"""

import os
import re
import shutil
import tempfile
import time
import uuid

from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

try:
    import orjson  # records parsed as streamctl parses them
except ImportError:  # a cluster without orjson: the standard library, the same values
    from streamctl import orjson_fallback as orjson  # type: ignore[no-redef]

from streamctl.spark.jobentry import hadoop_file
from streamctl.storage.record import offset_of

SEGMENT_FILE = re.compile(r"^(\d{20})\.jsonl$")
PARTITION_DIR = re.compile(r"^p(\d+)$")


def list_segments(spark, log):
    """{partition: [(base offset, path string, length)]}, oldest segment first."""
    fs, root = hadoop_file(spark, log)
    found = {}
    for status in fs.globStatus(spark.sparkContext._jvm.org.apache.hadoop.fs.Path(root, "p*/*.jsonl")) or []:
        path = status.getPath()
        seg = SEGMENT_FILE.match(path.getName())
        part = PARTITION_DIR.match(path.getParent().getName())
        if seg and part and status.isFile():
            found.setdefault(int(part.group(1)), []).append((int(seg.group(1)), path.toString(), status.getLen()))
    return {p: sorted(segs) for p, segs in found.items()}, fs


def _read_range(spark, fs, path, start, length):
    """`length` bytes at `start` of the file at `path` (a string)."""
    stream = fs.open(spark.sparkContext._jvm.org.apache.hadoop.fs.Path(path))
    try:
        stream.seek(start)
        return bytes(spark.sparkContext._jvm.org.apache.commons.io.IOUtils.toByteArray(stream, length))
    finally:
        stream.close()


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
                    ends[p] = offset_of(data[prev + 1:cut]) + 1
                    break
            want *= 4
    return ends


SCHEMA = StructType([StructField(n, t) for n, t in (
    ("line", StringType()), ("offset", LongType()), ("partition", LongType()), ("ts", LongType()))])


def _to_long(col):
    # try_cast: "" (no match) gives NULL, not an error, under ANSI mode (Spark 4's default).
    return col.try_cast("long") if hasattr(col, "try_cast") else col.cast("long")


def _envelope(df):
    """Add offset, partition, ts from the line's fixed prefix (JSON parsing only for other layouts).

    Like streamctl.storage.record.envelope, the prefix {"offset":N,"partition":P,"ts":T, is
    cut at its commas, not matched with regular expressions: the text up to the third
    comma is computed once, its pieces from it, and a line is canonical when the pieces
    rebuild that text exactly. Each step is a projection of its own (Spark does not merge
    a projection into the next when that would compute an expression twice). On a
    5M-record scan this took 6.5 CPU-s where three anchored regular expressions took
    7.4-8.1 (docs/design/performance.md). Each field falls back to JSON only when not canonical.
    """
    line = F.col("line")
    df = df.select(line, F.substring_index(line, ",", 3).alias("_head"))
    head = F.col("_head")
    df = df.select(line, head,
                   F.substring(F.substring_index(head, ",", 1), len('{"offset":') + 1, 1 << 30).alias("_offset"),
                   F.substring_index(F.substring_index(head, ",", 2), ":", -1).alias("_partition"),
                   F.substring_index(head, ":", -1).alias("_ts"))
    canonical = head == F.concat(F.lit('{"offset":'), F.col("_offset"), F.lit(',"partition":'), F.col("_partition"),
                                 F.lit(',"ts":'), F.col("_ts"))
    return df.select(line, *[
        F.coalesce(F.when(canonical, _to_long(F.col("_" + name))), F.get_json_object(line, "$." + name).cast("long"))
        .alias(name) for name in ("offset", "partition", "ts")])


def _with_key(df):
    """Add `key`: the key as a string (JSON-decoded), NULL for a null key.

    Like streamctl.storage.record.key_bytes: the JSON text between the first ,"key":
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
    # Same rule as streamctl.storage.record.is_tombstone: fast suffix test unless headers follow the value.
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


RESULT_PARTITION_BYTES = 8 << 20  # streamed through the driver: small partitions
FILE_PARTITION_BYTES = 64 << 20  # written as part files: Spark's usual split size


def size_result_partitions(spark, input_bytes, params, via_files=False):
    """Size the sort's partitions from the input (and the join job's result partitions). Streamed
    through the driver (toLocalIterator), they are kept small: the driver holds one at a time in
    its heap. Written as part files, they are ~64 MiB each (at least two per core), so a small
    log does not pay for Spark's default 200 shuffle partitions."""
    default = FILE_PARTITION_BYTES if via_files else RESULT_PARTITION_BYTES
    target = int(params.get("result_partition_bytes") or default)
    spark.conf.set("spark.sql.adaptive.enabled", "true")
    spark.conf.set("spark.sql.adaptive.advisoryPartitionSizeInBytes", str(target))
    wanted = input_bytes // target + 1
    if via_files:
        wanted = max(wanted, 2 * spark.sparkContext.defaultParallelism)
        spark.conf.set("spark.sql.adaptive.coalescePartitions.initialPartitionNum", str(wanted))
    elif wanted > int(spark.conf.get("spark.sql.shuffle.partitions")):
        spark.conf.set("spark.sql.adaptive.coalescePartitions.initialPartitionNum", str(wanted))


def _offset_bound(spec):
    return int(spec["offset"]) if spec and "offset" in spec else None


def _use_copies(segments, copies):
    """Put the copies of active segments that streamctl made for this run (PARAMS
    "segment_copies": partition -> {"base", "path", "bytes"}, each the segment's records
    below the end snapshot) in place of the segments; returns the copies' paths. A copy
    whose segment is no longer listed (compacted away since) is not used."""
    exact = set()
    for p, copy in copies.items():
        segs = segments.get(int(p), [])
        for i, (base, _path, _size) in enumerate(segs):
            if base == int(copy["base"]):
                segs[i] = (base, copy["path"], int(copy["bytes"]))
                exact.add(copy["path"])
    return exact


def _pick_files(segments, ends, lo, hi, exact=frozenset()):
    """Split the segment files into (whole, capped, bytes): files read as they are, files
    whose records may reach past their partition's end (the cap filter applies to those
    only: usually just the active segment, unless streamctl copied it up to the end:
    `exact`), and the bytes to read.

    A segment holds offsets from its base up to the next segment's base, so files
    entirely past the end or outside --from/--until offsets are not read at all.
    """
    whole, capped, nbytes = [], [], 0
    for p, segs in segments.items():
        end = ends.get(p)
        for i, (base, path, size) in enumerate(segs):
            upto = segs[i + 1][0] if i + 1 < len(segs) else None  # None: the active segment
            if size == 0 or (end is not None and base >= end) or (hi is not None and base >= hi) or (
                    lo is not None and upto is not None and upto <= lo):
                continue
            reaches_past = end is not None and (upto is None or upto > end) and path not in exact
            (capped if reaches_past else whole).append(path)
            nbytes += size
    return whole, capped, nbytes


def _scan(spark, files):
    return _envelope(spark.read.option("lineSep", "\n").text(files).withColumnRenamed("value", "line"))


def replay_frame(spark, params, via_files=False):
    """The selected records as (line, offset, partition, ts), unordered."""
    segments, fs = list_segments(spark, params["log"])
    if not segments:
        return spark.createDataFrame([], SCHEMA)
    exact = _use_copies(segments, params.get("segment_copies") or {})
    ends = visible_ends(spark, fs, segments)
    for p, end in (params.get("end_offsets") or {}).items():
        ends[int(p)] = min(int(end), ends.get(int(p), int(end)))
    whole, capped, input_bytes = _pick_files(
        segments, ends, _offset_bound(params.get("from")), _offset_bound(params.get("until")), exact)
    if not whole and not capped:
        return spark.createDataFrame([], SCHEMA)
    size_result_partitions(spark, input_bytes, params, via_files)
    frames = [_scan(spark, whole)] if whole else []
    if capped:
        cap = F.create_map(*[x for p, e in sorted(ends.items()) for x in (F.lit(p), F.lit(e))])
        frames.append(_scan(spark, capped).where(F.coalesce(F.col("offset") < cap[F.col("partition")], F.lit(True))))
    df = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
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
        # Records without a key form one group whose members are marked `nokey`
        # (a filter on the key would be pushed into the scan by the optimizer and
        # compute the key twice per line). The tombstone test runs on each key's
        # last record only, after the aggregate.
        df = df.withColumn("nokey", F.col("key").isNull())
        latest = F.max(F.struct("ts", "partition", "offset", "nokey", "line")).alias("r")
        df = df.groupBy("key").agg(latest).select("r.*")
        df = df.where(~F.col("nokey") & ~_tombstone(F.col("line")))
    options = params.get("filter")
    if options:
        df = df.where(_filter_udf(options)(F.col("line")))
    return df.select("line", "offset", "partition", "ts")


def _filter_udf(options):
    """A boolean UDF of a stored line: whether streamctl's Filter of these options (PARAMS["filter"]:
    lists "key", "header" and "where", as typed) selects it. Each executor builds the Filter
    once (its decoders are not sent over the wire)."""
    from pyspark.sql.types import BooleanType

    made = []

    def keep(line):
        if not made:
            from streamctl.clients.filters import Filter

            made.append(Filter.from_options(options.get("key"), options.get("header"), options.get("where")))
        return made[0].matches(line.encode())

    return F.udf(keep, BooleanType())


def input_records(spark, inp):
    """An input of window or join (PARAMS["inputs"]: streamctl.spark.engine.job_inputs) as an RDD of
    (partition, offset, record dict), unordered: a log's records up to its "end_offsets", or a plain
    file's values as records the way streamctl reads them (partition 0, offset = the line number
    from 0, a blank line holding no record, no key)."""
    loads = orjson.loads
    if inp["is_log"]:
        frame = replay_frame(spark, {"log": inp["path"], "end_offsets": inp.get("end_offsets")})
        return frame.rdd.map(lambda row: (row.partition, row.offset, loads(row.line)))
    lines = spark.sparkContext.textFile(inp["path"]).zipWithIndex()
    lines = lines.map(lambda li: (li[0].strip(" \t\r\n"), li[1])).filter(lambda li: bool(li[0]))
    return lines.map(
        lambda li: (0, li[1], {"offset": li[1], "partition": 0, "key": None, "value": loads(li[0])}))


def _scratch_folder(spark, params):
    """(folder URI for the sorted part files, its local path or None), or None to stream
    the result through the driver. The folder does not exist yet; the job deletes it."""
    scratch = params.get("scratch")
    if scratch is False:
        return None
    if scratch:
        if scratch.startswith("file://") or "://" not in scratch:
            local = os.path.join(scratch.removeprefix("file://"), "streamctl-replay-" + uuid.uuid4().hex)
            return "file://" + local, local
        return scratch.rstrip("/") + "/streamctl-replay-" + uuid.uuid4().hex, None
    if spark.sparkContext.master.startswith("local"):
        # The executors run in this process: the driver's temp folder is theirs too.
        local = os.path.join(tempfile.mkdtemp(prefix="streamctl-replay-"), "result")
        return "file://" + local, local
    return None


PART_FILE = re.compile(r"^part-(\d+)-.*?(?:-c(\d+))?(?:\.txt)?$")
BLOCK = 4 << 20


def _part_order(name):
    """Sort key of a part file written by Spark, or None: by task (= sort range) number,
    then by file number within a task (spark.sql.files.maxRecordsPerFile)."""
    m = PART_FILE.match(name)
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None


def _copy_parts(spark, fs, folder, local, out):
    """Hand the sorted part files in `folder` (a Hadoop Path), in part order, to the job's own Output (jobentry.Output): local
    ones are copied by the kernel (copy_file: sendfile), others read through Hadoop's FileSystem."""
    parts = []
    for status in fs.listStatus(folder):
        key = _part_order(status.getPath().getName())
        if key is not None and status.isFile():
            parts.append((key, status.getPath(), status.getLen()))
    for _, path, size in sorted(parts, key=lambda part: part[0]):
        if local:
            out.copy_file(os.path.join(local, path.getName()))
            continue
        done = 0
        while done < size:  # a block at a time: the driver holds one
            data = _read_range(spark, fs, path.toString(), done, min(BLOCK, size - done))
            done += len(data)
            out.write_bytes(data)


def driver_memory(params):
    """The driver's heap (streamctl.spark.jobentry). Results streamed through the driver
    (toLocalIterator: no scratch folder on a cluster) need more than Spark's 1 GiB
    default, which lost task results on a 5M-record replay, and so does --compact's
    aggregate (with 1 GiB it ran 1.2-1.35x the hand-written job's time after start-up,
    with 4 GiB 0.8-0.9x). A plain replay written as part files (a local master, or a
    scratch folder) does not: there a 4 GiB heap made the 1M-record sort and write
    about 1 s slower (docs/design/performance.md)."""
    master = params.get("master") or "local[*]"  # none: python job.py runs local[*]
    if params.get("compact") or params.get("scratch") is False or (
            not params.get("scratch") and not master.startswith("local")):
        return "4g"
    return None


def main(spark, params, out):
    # part files need the job's own Output; a plain callable (a notebook, a test) takes the lines
    # from the driver
    scratch = _scratch_folder(spark, params) if hasattr(out, "copy_file") else None
    ordered = replay_frame(spark, params, via_files=scratch is not None)
    ordered = ordered.orderBy("ts", "partition", "offset").select("line")
    if scratch is None:
        for row in ordered.toLocalIterator(prefetchPartitions=True):
            out(row[0])
        return
    folder, local = scratch
    fs, path = hadoop_file(spark, folder)
    try:
        ordered.write.mode("errorifexists").option("compression", "none").option("lineSep", "\n").text(folder)
        _copy_parts(spark, fs, path, local, out)
    finally:
        if local and params.get("scratch") is None:
            shutil.rmtree(os.path.dirname(local), ignore_errors=True)  # the mkdtemp folder
        else:
            fs.delete(path, True)
