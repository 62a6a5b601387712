"""The input order and the watermark as DataFrame operations: the one Spark kernel of
streamctl.processing.mergeorder (the merge keys and the tie order) and
streamctl.processing.watermark (the running max of event times over that order), for the
window and join jobs alike.

The records are a DataFrame with their lane columns (what breaks a tie of merge keys, in tie
order: the join's input rank and partition, the window's partition), `off` (their place in
their lane's stored order) and `t` (their event time, null when they have none):

1. The merge key, `merge_keys` as a window function: the running max of `t` over the record's
   lane by `off` (a record without a usable time keeps its place: max ignores nulls), NO_TIME
   before the lane's first timed record. One window per lane. A caller whose lanes' stored
   order is already the input order gives the key instead (in_input_order's `merge_key`).
2. `pos`: a number that grows with the input order (merge key, lanes, off), equal for the rows
   of one record (`sub` 0, 1: a join's tombstone in two key forms). Only compared, never
   counted, so it need not be dense: a range-partitioned sort numbers the rows in every
   partition in parallel (monotonically_increasing_id follows the partitions' order), where a
   rank over one global window would send every record through a single task.
3. The watermark's running max (with_high): `prior`, the largest time before the row in the
   input order, and `high`, up to and including it (Watermark.max_time before and after the
   row's observe; null while no time has been seen). Each sorted Spark partition's running max
   continues from the largest time of the partitions before it (one number a partition,
   collected on the driver), so this step goes through no single task either.

tests/spark/test_window_spark.py::test_input_order_and_watermark_across_spark_partitions holds
them to the rule's definitions on many Spark partitions.
"""

from pyspark.sql import Window
from pyspark.sql import functions as F

from streamctl.processing.mergeorder import NO_TIME

ID_BITS = 33  # monotonically_increasing_id: the partition's index above the lower 33 bits


def sort_partitions(spark, df, params):
    """How many ranges the input order's sort makes: as many as the records were read in (at
    least the default parallelism), or PARAMS["order_partitions"] when set."""
    return int(params.get("order_partitions")
               or max(df.rdd.getNumPartitions(), spark.sparkContext.defaultParallelism))


def in_input_order(df, lanes, partitions, merge_key=None, sub=False):
    """`df` with `pos` (steps 1 and 2 of the module's docstring), range-sorted into `partitions`
    ranges. `merge_key`: a column that is the merge key already (the lanes' stored order is the
    input order); `sub`: rows of one record are numbered by a `sub` column (0, 1, ...)."""
    # the windows' and the groupBy's shuffles below make as many partitions as the sort's ranges,
    # not spark.sql.shuffle.partitions (200 by default: on a small input most of the job's time)
    df.sparkSession.conf.set("spark.sql.shuffle.partitions", str(partitions))
    if merge_key is None:
        own = Window.partitionBy(*lanes).orderBy("off").rowsBetween(Window.unboundedPreceding, 0)
        merge_key = F.coalesce(F.max("t").over(own), F.lit(NO_TIME))
    order = ("_merge_t", *lanes, "off")
    df = df.withColumn("_merge_t", merge_key).repartitionByRange(partitions, *order)
    df = df.sortWithinPartitions(*order, *(["sub"] if sub else []))
    pos = F.monotonically_increasing_id()
    return df.withColumn("pos", pos - F.col("sub") if sub else pos).drop("_merge_t")


def with_high(df, sub=False):
    """`df` (in_input_order's, persisted: `pos` is read twice) with `prior` and `high` (step 3 of
    the module's docstring). With `sub`, `prior` of a record's later rows includes its own time."""
    df = df.withColumn("_part", F.shiftright(F.col("pos"), ID_BITS))
    maxima = sorted((row[0], row[1]) for row in df.groupBy("_part").agg(F.max("t")).collect())
    carried, run = [], None  # per Spark partition: the largest time in the partitions before it
    for part, high in maxima:
        if run is not None:
            carried += [F.lit(part).cast("long"), F.lit(run).cast("long")]
        if high is not None and (run is None or high > run):
            run = high
    before = F.create_map(*carried)[F.col("_part")] if carried else F.lit(None).cast("long")
    here = Window.partitionBy("_part").orderBy("pos", *(["sub"] if sub else []))
    local = F.max("t").over(here.rowsBetween(Window.unboundedPreceding, -1))
    df = df.withColumn("prior", F.greatest(local, before))
    return df.withColumn("high", F.greatest(F.col("prior"), F.col("t"))).drop("_part")
