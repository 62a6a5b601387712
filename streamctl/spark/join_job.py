"""Join two inputs with PySpark: the job module of `streamctl join --engine spark`.

A generated job file (streamctl.spark.jobgen) carries this module whole with the
streamctl modules it imports. It computes the same rows in the same order as the
local engine, by the rules written in streamctl/processing/joins/*.py, as
DataFrame operations:

1. Each input's records (replay_job.input_records). Every record's key, event
   time and value are read in Python by the local engine's rules
   (streamctl.processing.joins.keys).
2. The input order and the watermark, as the window job computes them
   (streamctl.spark.order): position = (merge key, input rank, partition,
   offset), the merge key the running max of event times in the record's own
   partition (or file) by offset; ties go to LEFT, or to the table for a
   stream-table join. The watermark W(p) is the running max of event times
   over positions, minus the lateness.
3. The kind's rule (stream-stream pairs and evictions, the table row at a
   position or as of an event time, the table-table changelog), each row with
   the sort key of the moment the local engine emits it; then one global sort.
   Late records (stream-stream events with t + within < W, or whose partner left
   before they came, as-of table changes with t < W) are counted and, for
   stream-stream, left out, as locally.
"""

from pyspark import StorageLevel
from pyspark.sql import Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from streamctl.processing.eventfields import record_time
from streamctl.processing.joins import MIN_TIME
from streamctl.processing.joins.keys import change_keys, key_getter, norm_text
from streamctl.spark.jobentry import report
from streamctl.spark.order import in_input_order, sort_partitions, with_high
from streamctl.spark.replay_job import input_records, size_result_partitions

try:  # the same encoder as streamctl itself: byte-identical rows
    import orjson
except ImportError:  # a cluster without orjson: the standard library, the same text for common values
    from streamctl import orjson_fallback as orjson  # type: ignore[no-redef]


def _dumps(obj):
    return orjson.dumps(obj).decode()


END = 1 << 62  # "the end of the input" as a position

ROW_SCHEMA = StructType([StructField(n, t) for n, t in (
    ("side", LongType()), ("rank", LongType()), ("part", LongType()), ("off", LongType()),
    ("sub", LongType()), ("nkey", StringType()), ("key_j", StringType()),
    ("t", LongType()), ("value_j", StringType()))])


# ---- reading one record: streamctl.processing.joins.keys, the local engine's rules ----

def _extractor(params, side):
    """A function (record dict, order fields) -> rows of ROW_SCHEMA for one input."""
    kind = params["kind"]
    on = tuple(params["on"][side])
    tf = tuple(params["time_field"][side])
    is_table = kind == "tables" or (kind == "table" and side == 1)
    by_value_path = is_table and on != ("key",)
    rank = (1 - side) if kind == "table" else side  # the table side wins ties in a stream-table join

    time_of, key_of = record_time(tf), key_getter(on)

    def rows(rec, part, off):
        # the rows a table record changes (a tombstone's may be two, or none), else the record's key;
        # a record without one still takes its place in the input order, with a null key
        found = change_keys(rec, key_of, by_value_path) or [(None, None)]
        value = rec["value"]
        t, value_j = time_of(rec), None if value is None else _dumps(value)
        return [(side, rank, part, off, i, norm_text(k), _dumps(k), t, value_j) for i, (_nk, k) in enumerate(found)]

    return rows


def _read_side(spark, params, side):
    extract = _extractor(params, side)
    return input_records(spark, params["inputs"][side]).flatMap(lambda r: extract(r[2], r[0], r[1]))


def records(spark, params):
    """Both inputs as one DataFrame with `pos` (input order) and, where the kind needs it,
    `W` (the watermark after pos)."""
    df = spark.createDataFrame(_read_side(spark, params, 0).union(_read_side(spark, params, 1)), ROW_SCHEMA)
    # The records are read (in Python) once: the range-partitioned sort below samples them first.
    df = df.persist(StorageLevel.DISK_ONLY)
    # pos: the input order (streamctl.spark.order), the rank before the partition: the table side
    # wins ties in a stream-table join; the rows of one record (sub 0, 1: a tombstone's two key
    # forms) share it
    df = in_input_order(df, ("rank", "part"), sort_partitions(spark, df, params), sub=True)
    df = df.drop("rank", "part", "off")
    if params["kind"] == "stream" or (params["kind"] == "table" and params.get("as_of") == "event-time"):
        # W: the watermark after pos (Watermark.value after observing its time)
        df = with_high(df.persist(StorageLevel.DISK_ONLY), sub=True)
        df = df.withColumn("W", F.col("high") - F.lit(int(params.get("lateness") or 0))).drop("prior", "high")
    # Used two or three times per kind: kept on disk, not in the heap the driver shares in local mode.
    return df.persist(StorageLevel.DISK_ONLY)


def passed_at(df, value_col, recs):
    """Adds `at`: the position where the watermark passes the row's value_col, the first one whose
    watermark is above it, but not before the row's own `pos` (END: never). `qid` names a row."""
    steps = recs.where(F.col("W").isNotNull()).groupBy("W").agg(F.min("pos").alias("p"))
    q = df.select("qid", F.col(value_col).alias("val"), F.lit(1).alias("kind"), F.lit(None).cast("long").alias("p"))
    s = steps.select(F.lit(None).cast("long").alias("qid"), F.col("W").alias("val"), F.lit(0).alias("kind"), "p")
    # Descending, so the steps above a value are the rows before it: a growing frame, which Spark
    # computes incrementally (a frame to unboundedFollowing is recomputed per row). Steps at the
    # value itself sort after it (kind 0 < 1), so only watermarks strictly above count; the
    # positions of steps grow with W, so the nearest one is the smallest.
    w = Window.orderBy(F.desc("val"), F.desc("kind"), F.desc("qid")).rowsBetween(Window.unboundedPreceding, -1)
    u = q.unionByName(s).withColumn("first_p", F.min("p").over(w))
    df = df.join(u.where(F.col("kind") == 1).select("qid", "first_p"), "qid")
    return df.withColumn("at", F.greatest(F.col("pos"), F.coalesce(F.col("first_p"), F.lit(END))))


def before(side):
    """The value of the last change of `side` (0 LEFT, 1 RIGHT) to the row's key before the row:
    that side's table row as it stood then (null: none yet, or deleted)."""
    change = F.when(F.col("side") == side, F.struct(F.col("value_j").alias("v")))
    by_key = Window.partitionBy("nkey").orderBy("pos", "sub").rowsBetween(Window.unboundedPreceding, -1)
    return F.last(change, ignorenulls=True).over(by_key).getField("v")


def late_flag(params):
    """The column that marks a late record (None: the kind has no watermark)."""
    if params["kind"] == "stream":
        # behind the window on arrival: not joined at all
        return F.col("t").isNotNull() & (F.col("t") + F.lit(int(params["within"])) < F.col("W"))
    if params["kind"] == "table" and params.get("as_of") == "event-time":
        # a table change (with a usable key: one that is applied) behind the watermark
        return ((F.col("side") == 1) & (F.col("sub") == 0) & F.col("nkey").isNotNull() & F.col("t").isNotNull()
                & (F.col("t") < F.col("W")))
    return None


def _late_in_order(edges):
    """The positions of one key's events that are late because a partner left before they came: b is
    when an edge (a, b) has an a that is not late itself (a < b: decided before b)."""
    late = set()
    by_b = {}
    for pa, pb in edges:
        by_b.setdefault(pb, []).append(pa)
    for pb in sorted(by_b):
        if any(pa not in late for pa in by_b[pb]):
            late.add(pb)
    return sorted(late)


def partner_left(recs, params):
    """Stream-stream: the positions (a DataFrame of `pos`) of the events that are late because an event
    of the other side with their key, at most `within` before them, left the window before they came
    (StreamStreamJoin.push's second test), or None: none are. Only an event behind the watermark
    (t < W) can be; the partner must not be late itself, decided per key in input order."""
    within = int(params["within"])
    ev = recs.where(F.col("t").isNotNull() & F.col("nkey").isNotNull()
                    & (F.col("t") + F.lit(within) >= F.col("W"))).select("side", "pos", "nkey", "t", "W")
    behind = ev.where(F.col("t") < F.col("W"))
    if not behind.take(1):
        return None
    a, b = ev.alias("a"), behind.alias("b")
    edges = a.join(b, (F.col("a.nkey") == F.col("b.nkey")) & (F.col("a.side") != F.col("b.side"))
                   & (F.col("a.pos") < F.col("b.pos")) & (F.col("a.t") >= F.col("b.t") - within)
                   & (F.col("a.t") + within < F.col("b.W")))
    edges = edges.select(F.col("b.nkey"), F.col("a.pos"), F.col("b.pos"))
    late = edges.rdd.map(lambda r: (r[0], (r[1], r[2]))).groupByKey().flatMap(lambda kv: _late_in_order(kv[1]))
    out = recs.sparkSession.createDataFrame(late.map(lambda p: (p,)), StructType([StructField("pos", LongType())]))
    return out.persist(StorageLevel.DISK_ONLY)


def counts(recs, params, late_pos=None):
    """{"late": [LEFT, RIGHT], "no_time": [LEFT, RIGHT]} as the local engine counts them; `late_pos`:
    the positions of the records late for another reason (partner_left)."""
    flag = late_flag(params)
    if flag is None:
        return {"late": [0, 0], "no_time": [0, 0]}
    if late_pos is not None:
        recs = recs.join(late_pos.withColumn("late_too", F.lit(True)), "pos", "left")
        flag = flag | F.col("late_too").isNotNull()
    timed_sides = [0, 1] if params["kind"] == "stream" else [0]  # as-of: only events need a time
    no_time = F.col("t").isNull() & F.col("side").isin(timed_sides) & (F.col("sub") == 0)
    if params["kind"] == "table":
        # and the table changes (applied, not tombstones) without one: valid from the beginning
        no_time = no_time | (F.col("t").isNull() & (F.col("side") == 1) & (F.col("sub") == 0)
                             & F.col("nkey").isNotNull() & F.col("value_j").isNotNull())
    got = recs.groupBy("side").agg(F.sum(F.when(flag, 1).otherwise(0)).alias("late"),
                                   F.sum(F.when(no_time, 1).otherwise(0)).alias("no_time")).collect()
    out = {"late": [0, 0], "no_time": [0, 0]}
    for row in got:
        out["late"][row["side"]] = int(row["late"] or 0)
        out["no_time"][row["side"]] = int(row["no_time"] or 0)
    return out


def stream_stream(recs, params, late_pos=None):
    within = int(params["within"])
    how = params["how"]
    ev = recs.where(F.col("t").isNotNull() & ~late_flag(params)).select(
        "side", "pos", "nkey", "key_j", "t", "value_j", "W")
    if late_pos is not None:
        ev = ev.join(late_pos, "pos", "left_anti")
    a = ev.alias("a")
    b = ev.alias("b")
    pairs = a.join(b, (F.col("a.nkey") == F.col("b.nkey")) & (F.col("a.side") != F.col("b.side"))
                   & (F.col("a.pos") < F.col("b.pos")) & (F.abs(F.col("a.t") - F.col("b.t")) <= within)
                   & (F.col("a.t") + within >= F.col("b.W")))
    left_v = F.when(F.col("a.side") == 0, F.col("a.value_j")).otherwise(F.col("b.value_j"))
    right_v = F.when(F.col("a.side") == 1, F.col("a.value_j")).otherwise(F.col("b.value_j"))
    pairs = pairs.select(F.col("b.pos").alias("s1"), F.lit(0).cast("long").alias("s2"), F.col("a.pos").alias("s3"),
                         F.col("b.key_j").alias("key_j"), left_v.alias("left_j"), right_v.alias("right_j"),
                         F.col("a.pos").alias("pa"), F.col("b.pos").alias("pb")).cache()
    keep = [s for s, on in ((0, how in ("left", "outer")), (1, how in ("right", "outer"))) if on]
    out = pairs.select("s1", "s2", "s3", "key_j", "left_j", "right_j")
    if keep:
        matched = pairs.select(F.col("pa").alias("pos")).union(pairs.select(F.col("pb").alias("pos"))).distinct()
        lone = ev.where(F.col("side").isin(keep)).join(matched, "pos", "left_anti")
        lone = passed_at(lone.withColumn("qid", F.col("pos")).withColumn("v", F.col("t") + within), "v", recs)
        # (eviction position, 1, time, position): s3 packs (time, position) as a pair of columns
        lone = lone.select(F.col("at").alias("s1"), F.lit(1).cast("long").alias("s2"), F.col("t").alias("s3"),
                           F.col("pos").alias("s4"), "key_j",
                           F.when(F.col("side") == 0, F.col("value_j")).alias("left_j"),
                           F.when(F.col("side") == 1, F.col("value_j")).alias("right_j"))
        out = out.withColumn("s4", F.lit(0).cast("long")).unionByName(lone)
    else:
        out = out.withColumn("s4", F.lit(0).cast("long"))
    return out.orderBy("s1", "s2", "s3", "s4")


def stream_table_position(recs, params):
    df = recs.where(F.col("nkey").isNotNull()).withColumn("right_j", before(1))
    ev = df.where(F.col("side") == 0).select("pos", "key_j", F.col("value_j").alias("left_j"), "right_j")
    nokey = recs.where((F.col("side") == 0) & F.col("nkey").isNull()).select(
        "pos", "key_j", F.col("value_j").alias("left_j"), F.lit(None).cast("string").alias("right_j"))
    return ev.unionByName(nokey).orderBy("pos")


def stream_table_as_of(recs, params):
    retention = params.get("retention")
    ev = recs.where((F.col("side") == 0) & F.col("t").isNotNull()).select(
        F.col("pos").alias("qid"), "pos", "nkey", "key_j", "t", F.col("value_j").alias("left_j"))
    ev = passed_at(ev, "t", recs).withColumnRenamed("at", "r")
    last_w = recs.agg(F.max("W")).first()[0]
    w_at = recs.groupBy("pos").agg(F.max("W").alias("W_r"))
    ev = ev.join(w_at.withColumnRenamed("pos", "r"), "r", "left").withColumn(
        "W_r", F.coalesce(F.col("W_r"), F.lit(last_w).cast("long")))
    versions = recs.where((F.col("side") == 1) & F.col("nkey").isNotNull()).select(
        F.col("nkey").alias("vkey"), F.col("pos").alias("vpos"), F.col("sub").alias("vsub"),
        # a version without a time is valid from the beginning; a tombstone without one deletes from the
        # largest time before it (W + lateness: the running max, which its own null time leaves as it was)
        F.coalesce(F.col("t"), F.when(F.col("value_j").isNull(), F.col("W") + F.lit(int(params.get("lateness") or 0))),
                   F.lit(MIN_TIME)).alias("vt"), F.col("value_j").alias("vval"))
    cand = ev.join(versions, (F.col("nkey") == F.col("vkey")) & (F.col("vpos") <= F.col("r")), "left")
    best = F.max(F.when(F.col("vt") <= F.col("t"), F.struct("vt", "vpos", "vsub", "vval")))
    aggs = [best.alias("best")]
    if retention is not None:
        dropped = (F.col("vt") > F.col("t")) & (F.col("vt") <= F.col("W_r") - F.lit(int(retention)))
        aggs.append(F.max(F.when(dropped, 1).otherwise(0)).alias("dropped"))
    res = cand.groupBy("pos", "r", "t", "key_j", "left_j").agg(*aggs)
    right = F.col("best.vval")
    if retention is not None:
        right = F.when(F.col("dropped") == 1, F.lit(None)).otherwise(right)
    return res.select("r", "t", "pos", "key_j", "left_j", right.alias("right_j")).orderBy("r", "t", "pos")


def table_table(recs, params):
    # each side's row as it stood before this change
    df = recs.where(F.col("nkey").isNotNull()).withColumn("l_before", before(0)).withColumn("r_before", before(1))
    mine = F.when(F.col("side") == 0, F.col("l_before")).otherwise(F.col("r_before"))
    theirs = F.when(F.col("side") == 0, F.col("r_before")).otherwise(F.col("l_before"))
    upsert = F.col("value_j").isNotNull() & theirs.isNotNull()
    delete = F.col("value_j").isNull() & mine.isNotNull() & theirs.isNotNull()
    row_mine = F.when(F.col("value_j").isNotNull(), F.col("value_j")).otherwise(mine)
    df = df.where(upsert | delete).select(
        "pos", "sub", "key_j", F.when(upsert, F.lit("upsert")).otherwise(F.lit("delete")).alias("op"),
        F.when(F.col("side") == 0, row_mine).otherwise(theirs).alias("left_j"),
        F.when(F.col("side") == 1, row_mine).otherwise(theirs).alias("right_j"))
    return df.orderBy("pos", "sub")


def driver_memory(params):
    """The driver's heap (streamctl.spark.jobentry): local mode runs the executors inside the
    driver's JVM, and the global-order windows need room; 2g held a 1M-event enrichment."""
    return "2g"


def main(spark, params, out):
    recs = records(spark, params)
    kind = params["kind"]
    late_pos = partner_left(recs, params) if kind == "stream" else None
    if kind == "stream":
        rows = stream_stream(recs, params, late_pos)
    elif kind == "tables":
        rows = table_table(recs, params)
    elif params.get("as_of") == "event-time":
        rows = stream_table_as_of(recs, params)
    else:
        rows = stream_table_position(recs, params)
    if kind == "table" and params["how"] == "inner":  # an event without a table row has no row
        rows = rows.where(F.col("right_j").isNotNull())
    with_op = kind == "tables"
    stats = counts(recs, params, late_pos)
    size_result_partitions(spark, 0, params)  # they come to the driver one at a time: small ones
    for row in rows.select("key_j", "left_j", "right_j", *(["op"] if with_op else [])).toLocalIterator():
        line = '{"key":' + row[0] + ',"left":' + (row[1] or "null") + ',"right":' + (row[2] or "null")
        out(line + (',"op":"' + row[3] + '"}' if with_op else "}"))
    report(params, "join", stats, out)
