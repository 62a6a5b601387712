"""Reference implementations: what a user would write instead of using streamctl.

Run as `python -m bench.refs NAME ARGS...`; each writes its result as JSON lines to
stdout (the runner sends it to /dev/null) or to the file named in its args.
They are written the way a competent user would write them, not strawmen:
orjson, byte scans where parsing is not needed, one dict pass, vectorised
DuckDB/Polars queries with explicit schemas.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

HOUR = 3_600_000
MINUTE = 60_000
SESSION_GAP = 30 * MINUTE


def _lines(files: list[str]) -> Iterator[bytes]:
    for path in files:
        with open(path, "rb") as f:
            tail = b""
            while chunk := f.read(1 << 20):
                parts = (tail + chunk).split(b"\n")
                tail = parts.pop()
                yield from parts
            if tail:
                yield tail


def _out():
    return open(sys.stdout.fileno(), "wb", buffering=1 << 16, closefd=False)


# --- produce / consume floors --------------------------------------------------------

def orjson_loop(mode: str, *files: str) -> None:
    """Parse and re-serialize each line: the floor any JSON-aware tool pays."""
    import orjson

    loads, dumps = orjson.loads, orjson.dumps
    with _out() as out:
        w = out.write
        if mode == "line":
            for line in _lines(list(files)):
                w(dumps(loads(line)) + b"\n")
        elif mode == "value":
            for line in _lines(list(files)):
                w(dumps(loads(line)["value"]) + b"\n")
        elif mode == "format":  # the `%k %s\n` template
            for line in _lines(list(files)):
                r = loads(line)
                w(b"%s %s\n" % ((r["key"] or "").encode(), dumps(r["value"])))
        else:
            raise SystemExit(f"unknown mode {mode}")


# --- compaction -----------------------------------------------------------------------

def compact_dict(*files: str) -> None:
    """Latest line per key with one dict pass and a byte scan for the key (no JSON parse).

    Re-inserting a key moves it to the end, so the dict ends in offset order of each
    key's last record: the output is the compacted log, tombstones kept.
    """
    latest: dict[bytes, bytes] = {}
    pop = latest.pop
    for line in _lines(list(files)):
        i = line.find(b',"key":')
        j = line.find(b',"value":', i)
        k = line[i + 7:j]
        pop(k, None)
        latest[k] = line
    with _out() as out:
        for line in latest.values():
            out.write(line + b"\n")


def compact_dict_snapshot(*files: str) -> None:
    """replay --compact's reference: as compact_dict, deleted keys left out."""
    latest: dict[bytes, bytes] = {}
    pop = latest.pop
    for line in _lines(list(files)):
        i = line.find(b',"key":')
        j = line.find(b',"value":', i)
        k = line[i + 7:j]
        pop(k, None)
        if not line.endswith(b',"value":null}'):
            latest[k] = line
    with _out() as out:
        for line in latest.values():
            out.write(line + b"\n")


def _duck():
    import duckdb

    con = duckdb.connect()
    return con


def _seg_list(files: tuple[str, ...]) -> str:
    return "[" + ", ".join("'" + f.replace("'", "''") + "'" for f in files) + "]"


def compact_duckdb(out: str, *files: str) -> None:
    con = _duck()
    con.execute(f"""
        COPY (
          SELECT "offset", "partition", ts, "key", "value"
          FROM read_json({_seg_list(files)}, format='newline_delimited',
               columns={{"offset": 'BIGINT', "partition": 'INTEGER', ts: 'BIGINT', "key": 'VARCHAR', "value": 'JSON'}})
          QUALIFY row_number() OVER (PARTITION BY "key" ORDER BY "offset" DESC) = 1
          ORDER BY "offset"
        ) TO '{out}' (FORMAT json)
    """)


# --- windows --------------------------------------------------------------------------

def _events_sql(files: tuple[str, ...]) -> str:
    return (f"read_json({_seg_list(files)}, format='newline_delimited', "
            "columns={\"key\": 'VARCHAR', \"value\": 'STRUCT(\"time\" BIGINT, amount DOUBLE)'})")


def window_duckdb(kind: str, out: str, *files: str) -> None:
    con = _duck()
    src = _events_sql(files)
    if kind == "tumbling":
        q = f"""
          SELECT time_bucket(INTERVAL 1 minute, make_timestamp(value.time * 1000)) AS window_start,
                 "key", count(*) AS count, avg(value.amount) AS avg_amount
          FROM {src} GROUP BY ALL ORDER BY window_start, "key" """
    else:
        q = f"""
          WITH e AS (SELECT "key", value.time AS t FROM {src}),
          s AS (SELECT "key", t, CASE WHEN t - lag(t) OVER (PARTITION BY "key" ORDER BY t) <= {SESSION_GAP}
                                      THEN 0 ELSE 1 END AS new_session FROM e),
          g AS (SELECT "key", t, sum(new_session) OVER (PARTITION BY "key" ORDER BY t
                                                        ROWS UNBOUNDED PRECEDING) AS sid FROM s)
          SELECT "key", min(t) AS start_ms, max(t) + {SESSION_GAP} AS end_ms, count(*) AS count
          FROM g GROUP BY "key", sid ORDER BY end_ms, "key" """
    con.execute(f"COPY ({q}) TO '{out}' (FORMAT json)")


def window_polars(kind: str, out: str, *files: str) -> None:
    import polars as pl

    schema = {"key": pl.String, "value": pl.Struct({"time": pl.Int64, "amount": pl.Float64})}
    lf = pl.scan_ndjson(list(files), schema=schema).select(
        pl.col("key"), pl.col("value").struct.field("time").alias("t"),
        pl.col("value").struct.field("amount").alias("amount"))
    if kind == "tumbling":
        res = (lf.with_columns((pl.col("t") // MINUTE * MINUTE).alias("start_ms"))
               .group_by("start_ms", "key").agg(pl.len().alias("count"), pl.col("amount").mean().alias("avg_amount"))
               .sort("start_ms", "key"))
    else:
        res = (lf.sort("key", "t")
               .with_columns(((pl.col("t") - pl.col("t").shift(1).over("key")) > SESSION_GAP)
                             .fill_null(True).cum_sum().over("key").alias("sid"))
               .group_by("key", "sid")
               .agg(pl.col("t").min().alias("start_ms"), (pl.col("t").max() + SESSION_GAP).alias("end_ms"),
                    pl.len().alias("count"))
               .drop("sid").sort("end_ms", "key"))
    res.collect().write_ndjson(out)


def window_python(kind: str, *files: str) -> None:
    """A plain dict pass keeping every window (what a quick script does)."""
    import orjson

    loads, dumps = orjson.loads, orjson.dumps
    if kind == "tumbling":
        acc: dict[tuple, list] = {}
        for line in _lines(list(files)):
            r = loads(line)
            v = r["value"]
            k = (v["time"] // MINUTE, r["key"])
            a = acc.get(k)
            if a is None:
                acc[k] = [1, v["amount"]]
            else:
                a[0] += 1
                a[1] += v["amount"]
        with _out() as out:
            for (w, key), (n, s) in sorted(acc.items()):
                out.write(dumps({"window": {"start": w * MINUTE, "end": (w + 1) * MINUTE}, "key": key,
                                 "count": n, "avg_amount": s / n}) + b"\n")
    else:
        open_: dict[str, list] = {}  # key -> [start, last, count]
        done = []
        for line in _lines(list(files)):
            r = loads(line)
            t = r["value"]["time"]
            s = open_.get(r["key"])
            if s is None:
                open_[r["key"]] = [t, t, 1]
            elif t - s[1] <= SESSION_GAP:
                s[1] = t
                s[2] += 1
            else:
                done.append((s[1] + SESSION_GAP, r["key"], s[0], s[2]))
                open_[r["key"]] = [t, t, 1]
        done.extend((s[1] + SESSION_GAP, k, s[0], s[2]) for k, s in open_.items())
        done.sort()
        with _out() as out:
            for end, key, start, n in done:
                out.write(dumps({"window": {"start": start, "end": end}, "key": key, "count": n}) + b"\n")


# --- joins ----------------------------------------------------------------------------

def join_python(kind: str, left: str, right: str) -> None:
    import orjson

    loads, dumps = orjson.loads, orjson.dumps
    with _out() as out:
        if kind == "enrich":
            # left: events log segments dir glob joined by ':', right: profiles segments
            table = {}
            for line in _lines(right.split(":")):
                r = loads(line)
                if r["value"] is None:
                    table.pop(r["key"], None)
                else:
                    table[r["key"]] = r["value"]
            for line in _lines(left.split(":")):
                r = loads(line)
                k = r["key"]
                out.write(dumps({"key": k, "left": r["value"], "right": table.get(k)}) + b"\n")
        else:
            # searches x clicks on sid, |dt| <= 1h, inner: hash the searches, probe with clicks
            by_sid: dict[str, list] = {}
            for line in _lines([left]):
                s = loads(line)
                by_sid.setdefault(s["sid"], []).append(s)
            for line in _lines([right]):
                c = loads(line)
                for s in by_sid.get(c["sid"], ()):
                    if abs(c["time"] - s["time"]) <= HOUR:
                        out.write(dumps({"key": c["sid"], "left": s, "right": c}) + b"\n")


def join_duckdb(kind: str, out: str, left: str, right: str) -> None:
    con = _duck()
    if kind == "enrich":
        cols = "columns={\"offset\": 'BIGINT', \"key\": 'VARCHAR', \"value\": 'JSON'}"
        q = f"""
          WITH p AS (SELECT "key", "value" FROM read_json({_seg_list(tuple(right.split(':')))},
                         format='newline_delimited', {cols})
                     QUALIFY row_number() OVER (PARTITION BY "key" ORDER BY "offset" DESC) = 1),
               e AS (SELECT "offset", "key", "value" FROM read_json({_seg_list(tuple(left.split(':')))},
                         format='newline_delimited', {cols}))
          SELECT e."key" AS "key", e."value" AS "left", p."value" AS "right"
          FROM e LEFT JOIN p ON e."key" = p."key" ORDER BY e."offset" """
    else:
        q = f"""
          SELECT s.sid AS "key", s AS "left", c AS "right"
          FROM read_json('{left}', format='newline_delimited') s
          JOIN read_json('{right}', format='newline_delimited') c
            ON s.sid = c.sid AND c.time BETWEEN s.time - {HOUR} AND s.time + {HOUR}"""
    con.execute(f"COPY ({q}) TO '{out}' (FORMAT json)")


# --- the realistic shape: ISO-8601 times, nested values, plain files or a log's segments --------

def _iso_duck():
    con = _duck()
    con.execute("SET TimeZone = 'UTC'")  # time_bucket over TIMESTAMPTZ buckets in the session's zone
    return con


def _json(files, columns: str) -> str:
    return f"read_json({_seg_list(tuple(files))}, format='newline_delimited', columns={{{columns}}})"


EVENT_COLS = "ts: 'TIMESTAMPTZ', \"key\": 'VARCHAR', \"value\": 'STRUCT(amount DOUBLE)'"
LOG_EVENT_COLS = "\"value\": 'STRUCT(ts TIMESTAMPTZ, \"key\" VARCHAR, \"value\" STRUCT(amount DOUBLE))'"


def window_iso_duckdb(kind: str, shape: str, out: str, *files: str) -> None:
    """window --tumbling 1m / --session 30m --by value.key --agg count --agg avg:value.value.amount on
    ISO-time events: `plain` files (a line is the event) or a `log`'s segments (the event is `value`)."""
    con = _iso_duck()
    if shape == "plain":
        src = f"(SELECT ts, \"key\", \"value\".amount AS amount FROM {_json(files, EVENT_COLS)})"
    else:
        src = (f"(SELECT v.ts AS ts, v.\"key\" AS \"key\", v.\"value\".amount AS amount "
               f"FROM (SELECT \"value\" AS v FROM {_json(files, LOG_EVENT_COLS)}))")
    if kind == "tumbling":
        q = f"""
          SELECT time_bucket(INTERVAL 1 minute, ts) AS window_start, "key", count(*) AS count,
                 avg(amount) AS avg_amount
          FROM {src} GROUP BY ALL ORDER BY window_start, "key" """
    else:
        q = f"""
          WITH e AS (SELECT "key", epoch_ms(ts) AS t, amount FROM {src}),
          s AS (SELECT *, CASE WHEN t - lag(t) OVER (PARTITION BY "key" ORDER BY t) <= {SESSION_GAP}
                               THEN 0 ELSE 1 END AS new_session FROM e),
          g AS (SELECT *, sum(new_session) OVER (PARTITION BY "key" ORDER BY t ROWS UNBOUNDED PRECEDING) AS sid
                FROM s)
          SELECT "key", min(t) AS start_ms, max(t) + {SESSION_GAP} AS end_ms, count(*) AS count,
                 avg(amount) AS avg_amount
          FROM g GROUP BY "key", sid ORDER BY end_ms, "key" """
    con.execute(f"COPY ({q}) TO '{out}' (FORMAT json)")


def join_iso_duckdb(kind: str, out: str, left: str, right: str) -> None:
    """join on ISO-time plain files: `window` = searches x clicks --within 1h --on value.value.session
    (inner, |dt| <= 1h inclusive); `enrich` = events x profiles --table --how left --on value.key (each
    event with its key's latest profile, in event-time order)."""
    con = _iso_duck()
    if kind == "window":
        s = _json([left], "ts: 'TIMESTAMPTZ', \"user\": 'VARCHAR', "
                          "\"value\": 'STRUCT(\"session\" VARCHAR, query VARCHAR, results BIGINT)'")
        c = _json([right], "ts: 'TIMESTAMPTZ', \"value\": 'STRUCT(\"session\" VARCHAR, pos BIGINT)'")
        q = f"""
          SELECT s."value"."session" AS "key", s AS "left", c AS "right"
          FROM {s} s JOIN {c} c
            ON s."value"."session" = c."value"."session"
           AND c.ts BETWEEN s.ts - INTERVAL 1 hour AND s.ts + INTERVAL 1 hour"""
    else:
        e = _json([left], "ts: 'TIMESTAMPTZ', \"key\": 'VARCHAR', \"type\": 'VARCHAR', \"value\": 'JSON', "
                          "device: 'VARCHAR'")
        p = _json([right], "ts: 'TIMESTAMPTZ', \"key\": 'VARCHAR', tier: 'VARCHAR', country: 'VARCHAR', "
                           "score: 'DOUBLE'")
        q = f"""
          WITH p AS (SELECT * FROM {p} QUALIFY row_number() OVER (PARTITION BY "key" ORDER BY ts DESC) = 1)
          SELECT e."key" AS "key", e AS "left", p AS "right"
          FROM {e} e LEFT JOIN p ON e."key" = p."key" ORDER BY e.ts"""
    con.execute(f"COPY ({q}) TO '{out}' (FORMAT json)")


# --- the realistic shape: stragglers, skewed keys, a changelog with tombstones ------------------

REAL_EVENT = "ts: 'TIMESTAMPTZ', \"key\": 'VARCHAR', \"type\": 'VARCHAR', \"value\": 'JSON', device: 'VARCHAR'"
REAL_PROFILE = ("\"offset\": 'BIGINT', \"key\": 'VARCHAR', \"value\": 'STRUCT(ts TIMESTAMPTZ, \"key\" VARCHAR, "
                "tier VARCHAR, country VARCHAR, score DOUBLE)'")


def join_real_duckdb(shape: str, out: str, profiles: str, *events: str) -> None:
    """join EVENTS PROFILES --table --how left --on value.key --time-field value.ts, events as a `plain`
    file or a `log`'s segments, PROFILES a one-partition changelog log's segments (':'-joined; a null
    value deletes the record key). Each event gets its key's latest profile as of its position in the
    input order: every lane (the file, each partition) runs by its running maximum time (a tombstone,
    without a time, keeps its lane's maximum), and the input order is (that maximum, lane, stored
    order) with the table's lane first. So the profile an event sees is the last change of its key
    before it in that order: a window over each key's changes and events (as the Spark engine
    computes it), not an ASOF join, which leaves ties between equal running maxima undecided and
    took minutes on this data."""
    con = _iso_duck()
    if shape == "plain":
        # one lane: the file's order is DuckDB's scan order (insertion order is preserved)
        e0 = f"(SELECT 0 AS lane, row_number() OVER () AS rn, * FROM {_json(events, REAL_EVENT)})"
    else:
        cols = ("\"partition\": 'INTEGER', \"offset\": 'BIGINT', \"value\": 'STRUCT(ts TIMESTAMPTZ, \"key\" VARCHAR, "
                "\"type\" VARCHAR, \"value\" JSON, device VARCHAR)'")
        e0 = (f"(SELECT \"partition\" AS lane, \"offset\" AS rn, \"value\".ts AS ts, \"value\".\"key\" AS \"key\", "
              f"\"value\".\"type\" AS \"type\", \"value\".\"value\" AS \"value\", \"value\".device AS device "
              f"FROM {_json(events, cols)})")
    q = f"""
      WITH e AS (SELECT *, max(epoch_ms(ts)) OVER (PARTITION BY lane ORDER BY rn ROWS UNBOUNDED PRECEDING) AS mk
                 FROM {e0}),
           p AS (SELECT "offset", "key" AS pkey, "value" AS v,
                        max(epoch_ms("value".ts)) OVER (ORDER BY "offset" ROWS UNBOUNDED PRECEDING) AS mk
                 FROM {_json(profiles.split(':'), REAL_PROFILE)}),
           u AS (SELECT pkey AS k, mk, 0 AS lane, "offset" AS rn FROM p
                 UNION ALL
                 SELECT "key", mk, 1 + lane, rn FROM e),
           -- the offset of the key's last change before each event in the input order
           r AS (SELECT lane, rn, last_value(CASE WHEN lane = 0 THEN rn END IGNORE NULLS)
                   OVER (PARTITION BY k ORDER BY mk, lane, rn ROWS UNBOUNDED PRECEDING) AS at FROM u)
      SELECT e."key" AS "key",
             {{'ts': e.ts, 'key': e."key", 'type': e."type", 'value': e."value", 'device': e.device}} AS "left",
             p.v AS "right"
      FROM e JOIN r ON r.lane = 1 + e.lane AND r.rn = e.rn LEFT JOIN p ON p."offset" = r.at
      ORDER BY e.mk, e.lane, e.rn"""
    con.execute(f"COPY ({q}) TO '{out}' (FORMAT json)")


def startup_only() -> None:
    pass


def main(argv: list[str]) -> None:
    name, args = argv[0], argv[1:]
    fn = globals()[name.replace("-", "_")]
    fn(*args)


if __name__ == "__main__":
    main(sys.argv[1:])
