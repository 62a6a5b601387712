"""`streamctl window` with PySpark: the job module of `streamctl window --engine spark`.

A generated job file (streamctl.spark.jobgen) carries this module whole with the
streamctl modules it imports (group key and event time, window operators,
aggregations, merge keys, watermark, row lines), so executors run exactly the
code the local engine runs and the rows agree.

How the stream is replayed without Spark's streaming watermark:

1. Records with their place in their own input: (partition, offset) in a log,
   the line number from 0 in a plain file.
2. Per record: event time, group key (as JSON text) and the aggregation inputs.
   Records without a usable time are counted (and left out of the windows).
3. The input order and the watermark by streamctl.spark.order, the one Spark
   kernel of both (the join job's too): each record's `pos` in the input order
   and the largest event time before it (`prior`). The records go through the
   DataFrame as (partition, offset, time, the pickled group key and aggregation
   inputs). With the append time `ts` as event time the merge key is the ts
   itself, and a plain file's order is its line order (_in_input_order).
4. The events back in Python, each with the watermark before it (`prior` minus
   the lateness, NO_WATERMARK before any time) and after it where it moved (its
   own time minus the lateness, when above `prior`), as Watermark.observe
   gives them; `pos` is the event's sequence number (only compared).
5. Per group (groupByKey): the window operator replays the group's events in
   order against those watermarks, which gives the same windows, contents and
   late events as the local pass.
6. Output order: a window closes at the first event whose watermark reaches its
   end; that event's sequence number, then window start, then the key's JSON
   text, sort the rows; windows that never close come last (end of input).
"""

import bisect as _bisect
import pickle as _pickle

from pyspark import StorageLevel
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from streamctl.processing import eventfields
from streamctl.processing.watermark import NO_WATERMARK
from streamctl.processing.windows.config import WindowConfig, make_plan, time_range
from streamctl.processing.windows.kinds import make_operator
from streamctl.processing.windows.output import row_json
from streamctl.spark.jobentry import report
from streamctl.spark.order import in_input_order, sort_partitions, with_high
from streamctl.spark.replay_job import input_records

# a record: its place in its own input, its event time (null: none usable) and, when it has one,
# its group key and aggregation inputs (pickled: Python values the window operators take)
EVENT_SCHEMA = StructType([StructField(n, t) for n, t in (
    ("part", LongType()), ("off", LongType()), ("t", LongType()), ("event", BinaryType()))])


def _config(params):
    """The window's options (PARAMS["window"]: the WindowConfig fields the job applies)."""
    return WindowConfig(**params["window"])


def _is_log(params):
    return params["inputs"][0]["is_log"]


def _prepare(params):
    """(partition, offset, time or None, pickled (key JSON, aggregation inputs) or None) per record
    (a plain file's records are partition 0, offset = line number), and one ("nn", counts of
    non-numbers) per Spark partition."""
    def prepare(records):
        cfg = _config(params)
        plan = make_plan(cfg)
        time_of = eventfields.time_getter(cfg.time_field, _is_log(params), *time_range(cfg))
        key_of = eventfields.key_getter(cfg.by)
        dumps = _pickle.dumps
        for part, off, rec in records:
            t = time_of(rec)
            if type(t) is not int:
                yield (part, off, None, None)
                continue
            yield (part, off, t, dumps((key_of(rec), plan.extract(rec))))
        yield ("nn", plan.non_numeric)
    return prepare


def _in_input_order(params, records, parts, bad_count):
    """The records (a DataFrame of EVENT_SCHEMA) with `pos`, `prior` and `high` (streamctl.spark.order:
    the input order, and the largest time before and up to each record in it), persisted, and the
    cached sort they were made from, to unpersist once they are read."""
    if not _is_log(params):
        merge_key = F.lit(0)  # one partition whose running max never falls: line order
    elif eventfields.time_path(params["window"]["time_field"], True) == ("ts",) and not bad_count:
        # the append time is non-decreasing within a partition: it is its own running max (an
        # append time outside the windows' range is a bad time, whose key the general way finds)
        merge_key = F.col("t")
    else:
        merge_key = None
    ordered = in_input_order(records, ("part",), parts, merge_key)
    ordered = ordered.persist(StorageLevel.DISK_ONLY)
    return with_high(ordered).persist(StorageLevel.DISK_ONLY), ordered


def _replay(params):
    """Per partition of groups: run the window operator over each group's events in input order."""
    cfg = _config(params)
    # sliding rows close only once the watermark is strictly past their end (both ends inclusive);
    # every other window, sessions too, when the watermark reaches its end
    strict = cfg.kind == "sliding"

    def replay(groups):
        plan = make_plan(cfg)
        for key, events in groups:
            op = make_operator(cfg.kind, cfg.size, cfg.hop, plan)
            out = []
            late = 0
            for seq, t, vals, wm in sorted(events, key=lambda e: e[0]):
                op.close(wm, out)
                late += op.add(key, t, seq, vals, wm, out)
            op.flush(out)
            for start, end, k, values, _revision in out:
                # the watermark value that closes it: end, or just past it (sliding: both ends
                # inclusive)
                yield ("row", (end + 1 if strict else end, start, end, k, values))
            if late:
                yield ("late", late)
    return replay


def main(spark, params, out):
    sc = spark.sparkContext
    lateness = params["window"]["lateness"]
    prepared = input_records(spark, params["inputs"][0]).mapPartitions(_prepare(params)).persist()
    non_numeric = {}
    for counts in prepared.filter(lambda x: x[0] == "nn").map(lambda x: x[1]).collect():
        for name, n in counts.items():
            non_numeric[name] = non_numeric.get(name, 0) + n

    # the one input order, and the watermark before and after each event in it
    records = prepared.filter(lambda x: x[0] != "nn")
    bad_count = records.filter(lambda x: x[2] is None).count()
    records = spark.createDataFrame(records, EVENT_SCHEMA)
    # the sort's ranges, and as many partitions of groups and of rows (not the DataFrame's own,
    # spark.sql.shuffle.partitions after its windows' shuffles: a Python task each)
    n_parts = sort_partitions(spark, records, params)
    records, ordered = _in_input_order(params, records, n_parts, bad_count)
    prepared.unpersist()  # read to the end for the order's sort, which is cached
    bad_first = records.where(F.col("t").isNull()).orderBy("pos").first() if bad_count else None

    def with_watermark(row):
        # as Watermark.observe(t) gives them: the value before the event, and after it where it
        # moved (windows may close there)
        key, vals = _pickle.loads(row.event)
        before = NO_WATERMARK if row.prior is None else row.prior - lateness
        return key, row.pos, row.t, vals, before, row.t - lateness if row.prior is None or row.t > row.prior else None

    timed = records.where(F.col("t").isNotNull()).select("pos", "t", "event", "prior").rdd.map(with_watermark)
    timed = timed.persist()
    replayed = (timed.map(lambda e: (e[0], (e[1], e[2], e[3], e[4])))
                .groupByKey(numPartitions=n_parts).mapPartitions(_replay(params)).persist())
    late = replayed.filter(lambda x: x[0] == "late").map(lambda x: x[1]).sum()
    ordered.unpersist()  # read to the end for timed, which is cached
    rows = replayed.filter(lambda x: x[0] == "row").map(lambda x: x[1])

    # close index: the first event whose watermark (after it) reaches the row's close value
    closes = sc.broadcast(sorted(rows.map(lambda r: r[0]).distinct().collect()))

    def closed_by(step):
        _key, seq, _t, _vals, wm_before, wm_after = step
        c = closes.value
        lo = _bisect.bisect_right(c, wm_before)
        hi = _bisect.bisect_right(c, wm_after)
        return [(value, seq) for value in c[lo:hi]]

    close_seq = sc.broadcast(timed.filter(lambda e: e[5] is not None).flatMap(closed_by).collectAsMap())
    never = 1 << 62

    def order_key(r):
        return close_seq.value.get(r[0], never), r[1], eventfields.key_rank(r[3])

    for _close_at, start, end, key, values in rows.sortBy(order_key, numPartitions=n_parts).toLocalIterator():
        out(row_json((start, end, key, values, None))[:-1].decode())  # the local engine's line
    stats = {"events": timed.count(), "late": int(late), "bad_time": bad_count, "non_numeric": non_numeric,
             "bad_time_example": None if bad_first is None else _where(params, bad_first)}
    report(params, "window", stats, out)
    for cached in (records, timed, replayed):
        cached.unpersist()


def _where(params, row):
    """Where the first record without a usable time is (its row in the input order)."""
    place = (row.part, row.off) if _is_log(params) else (None, row.off)
    return eventfields.bad_time_place(params["inputs"][0]["path"], *place, _is_log(params),
                                      params["window"]["time_field"])
