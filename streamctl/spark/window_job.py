"""`streamctl window` with PySpark: the body of the generated job.

Pasted into the standalone script after (1) the log reader of the replay job
(`replay_frame`) and (2) the source of streamctl's window operators and
aggregations (`Plan`, `Tumbling`, `Hopping`, `Sliding`, `Session`), so
executors run exactly the code the local engine runs and the rows agree. It
imports only pyspark and the standard library (orjson when present).

How the stream is replayed without Spark's streaming watermark:

1. Records, in the one deterministic input order: a log's partitions merged by
   (ts, partition, offset); a plain file by line number.
2. Per record: event time, group key (as JSON text) and the aggregation inputs.
   Records without a usable time are counted (and left out).
3. Global sort by that order, then a sequence number per event (zipWithIndex).
4. The watermark before each event = running max of event time over that order
   minus the lateness: the max of each sorted partition is collected, prefix
   maxima are formed on the driver, and each partition continues from its prefix.
5. Per group (groupByKey): the window operator replays the group's events in
   order against those watermarks, which gives the same windows, contents and
   late events as the local pass.
6. Output order: a window closes at the first event whose watermark reaches its
   end; that event's sequence number, then window start, then the key's JSON
   text, sort the rows; windows that never close come last (end of input).
"""

# ruff: noqa: F821  (Plan, Tumbling, replay_frame, ... are pasted in above this body)

import bisect as _bisect
import json as _json

try:
    import orjson  # noqa: F811 - same JSON text as the local engine
except ImportError:  # a cluster without orjson: the standard library, same text for common values

    class orjson:  # noqa: N801
        OPT_SORT_KEYS = 1

        @staticmethod
        def dumps(v, option=None):
            return _json.dumps(v, ensure_ascii=False, separators=(",", ":"), sort_keys=bool(option)).encode()

        loads = staticmethod(_json.loads)


def _wj_plan(params):
    return Plan([AggSpec(name, func, tuple(path) if path else None) for name, func, path in params["aggs"]])


def _wj_operator(params, plan):
    kind, size = params["kind"], params["size"]
    if kind == "tumbling":
        return Tumbling(size, plan)
    if kind == "hopping":
        return Hopping(size, params["hop"], plan)
    if kind == "sliding":
        return Sliding(size, plan)
    return Session(size, plan)


def _wj_time_getter(params):
    """The local engine's windowing.time_getter: event time in ms, or None when there is none or it
    lies outside the run's time_range (where a window bound could not be written as ISO-8601)."""
    path = params["time_path"]
    lo, hi = params["time_range"]
    if path is None:
        def append_time(r):
            t = r.get("ts")
            return t if type(t) is int and lo <= t <= hi else None
        return append_time
    get = _getter(tuple(path))

    def event_time(r):
        v = get(r)
        if type(v) is not int or not 100_000_000_000 <= v < 100_000_000_000_000:
            v = event_time_ms(v)
            if v is None:
                return None
        return v if lo <= v <= hi else None
    return event_time


def _wj_key_getter(params):
    by = params["by"]
    dumps = orjson.dumps
    if not by:
        return lambda r: b"null" if r.get("key") is None else dumps(r.get("key"))
    getters = [_getter(tuple(p)) for p in by]
    if len(getters) == 1:
        g = getters[0]
        return lambda r: dumps(g(r))
    return lambda r: dumps([g(r) for g in getters])


def _wj_records(spark, params):
    """RDD of (order key, record dict) in no particular order."""
    if params["is_log"]:
        frame = replay_frame(spark, {"log": params["input"], "end_offsets": params.get("end_offsets")})
        return frame.rdd.map(lambda row: ((row.ts, row.partition, row.offset), _json.loads(row.line)))
    lines = spark.sparkContext.textFile(params["input"]).map(lambda s: s.strip(" \t\r\n")).filter(bool)
    return lines.zipWithIndex().map(
        lambda li: ((li[1],), {"offset": li[1], "partition": 0, "key": None, "value": _json.loads(li[0])}))


def _wj_prepare(params):
    def prepare(records):
        plan = _wj_plan(params)
        time_of, key_of = _wj_time_getter(params), _wj_key_getter(params)
        for order, rec in records:
            t = time_of(rec)
            if type(t) is not int:
                yield ("bad", order, None)
                continue
            yield ("ev", order, (t, key_of(rec), plan.extract(rec)))
        yield ("nn", None, plan.non_numeric)
    return prepare


def _wj_prefix_max(maxima):
    before, run = [], None
    for m in maxima:
        before.append(run)
        if m is not None and (run is None or m > run):
            run = m
    return before


def _wj_replay(params):
    """Per partition of groups: run the window operator over each group's events in input order."""
    # sliding rows and sessions close only once the watermark is strictly past their end
    strict = params["kind"] in ("sliding", "session")

    def replay(groups):
        plan = _wj_plan(params)
        for key, events in groups:
            op = _wj_operator(params, plan)
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


def _wj_row_line(start, end, key, values):
    window = f'{{"window":{{"start":"{format_iso(start)}","end":"{format_iso(end)}"}},"key":'
    return window + key.decode() + "," + orjson.dumps(values).decode()[1:]



def driver_memory(params):
    """The driver's heap (see the entry point): the windows come back through it (toLocalIterator)."""
    return "4g"

def main(spark, params, out):
    sc = spark.sparkContext
    lateness = params["lateness"]
    prepared = _wj_records(spark, params).mapPartitions(_wj_prepare(params)).persist()
    bad = prepared.filter(lambda x: x[0] == "bad").map(lambda x: x[1])
    bad_count = bad.count()
    bad_first = bad.min() if bad_count else None
    non_numeric = {}
    for counts in prepared.filter(lambda x: x[0] == "nn").map(lambda x: x[2]).collect():
        for name, n in counts.items():
            non_numeric[name] = non_numeric.get(name, 0) + n

    # the one input order, and each event's place in it
    events = prepared.filter(lambda x: x[0] == "ev").map(lambda x: (x[1], x[2]))
    n_parts = max(1, events.getNumPartitions())
    ordered = events.sortByKey(numPartitions=n_parts).values().zipWithIndex().persist()
    maxima = ordered.mapPartitions(lambda it: [max((e[0][0] for e in it), default=None)]).collect()
    before = sc.broadcast(_wj_prefix_max(maxima))

    def with_watermark(i, it):
        run = before.value[i]
        for (t, key, vals), seq in it:
            wm = run - lateness if run is not None else NO_WATERMARK
            step = run is None or t > run
            if step:
                run = t
            yield key, seq, t, vals, wm, step

    timed = ordered.mapPartitionsWithIndex(with_watermark).persist()
    replayed = (timed.map(lambda e: (e[0], (e[1], e[2], e[3], e[4])))
                .groupByKey(numPartitions=n_parts).mapPartitions(_wj_replay(params)).persist())
    late = replayed.filter(lambda x: x[0] == "late").map(lambda x: x[1]).sum()
    rows = replayed.filter(lambda x: x[0] == "row").map(lambda x: x[1])

    # close index: the first event whose watermark (after it) reaches the row's close value
    closes = sc.broadcast(sorted(rows.map(lambda r: r[0]).distinct().collect()))

    def closed_by(step):
        _key, seq, t, _vals, wm_before, _ = step
        c = closes.value
        lo = _bisect.bisect_right(c, wm_before)
        hi = _bisect.bisect_right(c, t - lateness)
        return [(value, seq) for value in c[lo:hi]]

    close_seq = sc.broadcast(timed.filter(lambda e: e[5]).flatMap(closed_by).collectAsMap())
    never = 1 << 62

    def order_key(r):
        return close_seq.value.get(r[0], never), r[1], r[3]

    for _close_at, start, end, key, values in rows.sortBy(order_key, numPartitions=n_parts).toLocalIterator():
        out(_wj_row_line(start, end, key, values))
    stats = {"events": ordered.count(), "late": int(late), "bad_time": bad_count, "non_numeric": non_numeric,
             "bad_time_example": None if bad_first is None else _wj_where(params, bad_first)}
    if params.get("stats_line"):
        out("#streamctl-stats " + _json.dumps(stats))
    else:
        import sys

        print(f"streamctl window job: {_json.dumps(stats)}", file=sys.stderr)
    for cached in (prepared, ordered, timed, replayed):
        cached.unpersist()


def _wj_where(params, order):
    if params["is_log"]:
        return f"{params['input']}: partition {order[1]} offset {order[2]}: no usable time in {params['time_field']!r}"
    return f"{params['input']}: record {order[0]}: no usable time in {params['time_field']!r}"
