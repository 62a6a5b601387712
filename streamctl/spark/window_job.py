"""`streamctl window` with PySpark: the job module of `streamctl window --engine spark`.

A generated job file (streamctl.spark.jobgen) carries this module whole with the
streamctl modules it imports (group key and event time, window operators,
aggregations, merge keys, watermark, row lines), so executors run exactly the
code the local engine runs and the rows agree.

How the stream is replayed without Spark's streaming watermark:

1. Records with their place in their own input: (partition, offset) in a log,
   the line number (blank lines not counted) in a plain file.
2. Per record: event time, group key (as JSON text) and the aggregation inputs.
   Records without a usable time are counted (and left out of the windows).
3. The input order (the local engine's): records in (merge key, partition,
   offset) order, the merge keys by streamctl.processing.mergeorder.merge_keys
   itself over each log partition by offset. That running max is computed by a
   range-partitioned sort by (partition, offset): each sorted Spark partition's
   largest time per log partition is collected (a few numbers per Spark
   partition), the driver forms what each Spark partition continues from, and
   each Spark partition then runs merge_keys on from there, so one big log
   partition spread over many Spark partitions needs no single task. With the
   append time `ts` as event time (non-decreasing within a partition) the merge
   key is the ts itself and this step is skipped. A plain file is one partition
   whose running max never falls: its order is line order.
4. Global sort by (merge key, partition, offset), then a sequence number per
   event (zipWithIndex).
5. The watermark before each event = running max of event time over that order
   minus the lateness (the merge key of a log record is its partition's max,
   not the max over all partitions, so the times themselves are maxed again):
   the max of each sorted Spark partition is collected, prefix maxima are formed
   on the driver, and each Spark partition continues from its prefix.
6. Per group (groupByKey): the window operator replays the group's events in
   order against those watermarks, which gives the same windows, contents and
   late events as the local pass.
7. Output order: a window closes at the first event whose watermark reaches its
   end; that event's sequence number, then window start, then the key's JSON
   text, sort the rows; windows that never close come last (end of input).
"""

import bisect as _bisect
from itertools import groupby as _groupby
from itertools import islice as _islice

from streamctl.processing import eventfields
from streamctl.processing.mergeorder import NO_TIME, merge_keys
from streamctl.processing.watermark import Watermark
from streamctl.processing.windows.config import WindowConfig, make_plan, time_range
from streamctl.processing.windows.kinds import make_operator
from streamctl.processing.windows.output import row_json
from streamctl.spark.jobentry import report
from streamctl.spark.replay_job import input_records


def _config(params):
    """The window's options (PARAMS["window"]: the WindowConfig fields the job applies)."""
    return WindowConfig(**params["window"])


def _is_log(params):
    return params["inputs"][0]["is_log"]


def _records(spark, params):
    """RDD of (place, record dict) in no particular order: place = (partition, offset) in a log,
    (line number,) in a plain file."""
    recs = input_records(spark, params["inputs"][0])
    if _is_log(params):
        return recs.map(lambda r: ((r[0], r[1]), r[2]))
    return recs.map(lambda r: ((r[1],), r[2]))


def _prepare(params):
    """("ev", place, (time, key JSON, aggregation inputs)) per timed record, ("bad", place, None) per
    record without a usable time, and one ("nn", None, counts of non-numbers) per Spark partition."""
    def prepare(records):
        cfg = _config(params)
        plan = make_plan(cfg)
        time_of = eventfields.time_getter(cfg.time_field, _is_log(params), *time_range(cfg))
        key_of = eventfields.key_getter(cfg.by)
        for place, rec in records:
            t = time_of(rec)
            if type(t) is not int:
                yield ("bad", place, None)
                continue
            yield ("ev", place, (t, key_of(rec), plan.extract(rec)))
        yield ("nn", None, plan.non_numeric)
    return prepare


def _partition_maxima(items):
    """[[log partition, its largest time here or None], ...] of one Spark partition of records
    sorted by (partition, offset), in that order."""
    out = []
    for (p, _offset), (t, _event) in items:
        if not out or out[-1][0] != p:
            out.append([p, None])
        if t is not None and (out[-1][1] is None or t > out[-1][1]):
            out[-1][1] = t
    return [out]


def _carried_maxima(summaries):
    """Per sorted Spark partition: the running max its first log partition continues from (None:
    nothing timed before it in that log partition)."""
    run, carried = {}, []
    for summary in summaries:
        carried.append(run.get(summary[0][0]) if summary else None)
        for p, m in summary:
            if m is not None and (run.get(p) is None or m > run[p]):
                run[p] = m
    return carried


def _in_input_order(sc, params, places, bad_count):
    """(order key, (time or None, event)) per record, from (place, (time or None, event)) pairs, and
    the cached sort it was made from (None if none), to unpersist once the result is cached.

    The order key sorts records into the input order: (merge key, partition, offset) in a log,
    (line number,) in a plain file. See step 3 of the module's docstring.
    """
    if not _is_log(params):
        return places, None  # one partition whose running max never falls: line order
    if eventfields.time_path(params["window"]["time_field"], True) == ("ts",) and not bad_count:
        # the append time is non-decreasing within a partition: it is its own running max (an
        # append time outside the windows' range is a bad time, whose key the general way finds)
        return places.map(lambda x: ((x[1][0], *x[0]), x[1])), None
    # read twice (maxima, then merge keys): cached, so each Spark partition is sorted once
    by_place = places.sortByKey(numPartitions=max(1, places.getNumPartitions())).persist()
    carried = sc.broadcast(_carried_maxima(by_place.mapPartitions(_partition_maxima).collect()))

    def with_merge_keys(i, items):
        first = True
        for p, group in _groupby(items, lambda x: x[0][0]):
            records = iter(group)
            # only the first log partition here can have begun in an earlier Spark partition
            high = carried.value[i] if first else None
            high = NO_TIME if high is None else high
            first = False
            while True:  # mergeorder.merge_keys a slice at a time: memory stays a slice
                chunk = list(_islice(records, 4096))
                if not chunk:
                    break
                keys = merge_keys([t for _place, (t, _event) in chunk], high)
                high = keys[-1]
                for key, ((_p, offset), pair) in zip(keys, chunk, strict=True):
                    yield (key, p, offset), pair

    return by_place.mapPartitionsWithIndex(with_merge_keys), by_place


def _replay(params):
    """Per partition of groups: run the window operator over each group's events in input order."""
    cfg = _config(params)
    # sliding rows and sessions close only once the watermark is strictly past their end
    strict = cfg.kind in ("sliding", "session")

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
                # inclusive; session: an event exactly GAP after the last still joins)
                yield ("row", (end + 1 if strict else end, start, end, k, values))
            if late:
                yield ("late", late)
    return replay


def main(spark, params, out):
    sc = spark.sparkContext
    lateness = params["window"]["lateness"]
    prepared = _records(spark, params).mapPartitions(_prepare(params)).persist()
    non_numeric = {}
    for counts in prepared.filter(lambda x: x[0] == "nn").map(lambda x: x[2]).collect():
        for name, n in counts.items():
            non_numeric[name] = non_numeric.get(name, 0) + n

    # the one input order, and each event's place in it
    records = prepared.filter(lambda x: x[0] != "nn").map(lambda x: (x[1], (x[2][0] if x[2] else None, x[2])))
    bad_count = prepared.filter(lambda x: x[0] == "bad").count()
    keyed, by_place = _in_input_order(sc, params, records, bad_count)
    keyed = keyed.persist()
    bad_first = keyed.filter(lambda x: x[1][0] is None).map(lambda x: x[0]).min() if bad_count else None
    events = keyed.filter(lambda x: x[1][0] is not None).map(lambda x: (x[0], x[1][1]))
    n_parts = max(1, events.getNumPartitions())
    ordered = events.sortByKey(numPartitions=n_parts).values().zipWithIndex().persist()
    maxima = ordered.mapPartitions(lambda it: [max((e[0][0] for e in it), default=None)]).collect()
    if by_place is not None:
        by_place.unpersist()  # read to the end for ordered, which is cached
    before = sc.broadcast(_carried_maxima([[[0, m]] for m in maxima]))  # one lane: prefix maxima

    def with_watermark(i, it):
        clock = Watermark(lateness)  # the local engine's watermark, continued from the partitions before
        if before.value[i] is not None:
            clock.observe(before.value[i])
        for (t, key, vals), seq in it:
            wm = clock.value
            # the watermark before the event, and after it where it moved (windows may close there)
            yield key, seq, t, vals, wm, clock.value if clock.observe(t) else None

    timed = ordered.mapPartitionsWithIndex(with_watermark).persist()
    replayed = (timed.map(lambda e: (e[0], (e[1], e[2], e[3], e[4])))
                .groupByKey(numPartitions=n_parts).mapPartitions(_replay(params)).persist())
    late = replayed.filter(lambda x: x[0] == "late").map(lambda x: x[1]).sum()
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
    stats = {"events": ordered.count(), "late": int(late), "bad_time": bad_count, "non_numeric": non_numeric,
             "bad_time_example": None if bad_first is None else _where(params, bad_first)}
    report(params, "window", stats, out)
    for cached in (prepared, keyed, ordered, timed, replayed):
        cached.unpersist()


def _where(params, order):
    """Where the first record without a usable time is, from its order key."""
    place = order[1:] if _is_log(params) else (None, order[0])
    return eventfields.bad_time_place(params["inputs"][0]["path"], *place, _is_log(params),
                                      params["window"]["time_field"])
