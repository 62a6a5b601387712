"""The follower's pieces against the batch run's: a DiskTable behaves as a dict for the join operators,
and feeding a join in rounds with a checkpoint (dump, flush, a fresh process's load) between any two
of them writes exactly the rows of one uninterrupted feed."""

from __future__ import annotations

import sqlite3

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streamctl.processing.joins import store
from streamctl.processing.joins.driver import JoinSpec, JoinStats
from streamctl.processing.joins.feeders import StreamFeed, TableFeed, TablesFeed
from streamctl.processing.joins.stream_table import _History

keys = st.one_of(st.sampled_from(["a", "b", "\x00s", "\x01j1", "x\x00y", ""]), st.integers(-3, 3), st.sampled_from([None, [1], {"x": 1}]))
values = st.one_of(st.none(), st.integers(0, 5), st.sampled_from(["p", {"plan": "pro"}, [1, 2]]))


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["set", "pop", "get", "flush"]), keys, values), max_size=60),
       cache=st.integers(1, 4))
def test_disk_table_is_a_dict(ops, cache):
    from streamctl.processing.joins.keys import norm_key

    db = store.open_db(":memory:")
    old = store.CACHE_ENTRIES
    store.CACHE_ENTRIES = cache  # evictions on every few reads
    try:
        t = store.DiskTable(db, "t")
        ref: dict = {}
        for op, k, v in ops:
            nk = norm_key(k)
            if nk is None:
                continue
            if op == "set":
                t[nk] = v
                ref[nk] = v
            elif op == "pop":
                assert t.pop(nk, "missing") == ref.pop(nk, "missing")
            elif op == "get":
                assert t.get(nk, "missing") == ref.get(nk, "missing")
            else:
                db.execute("BEGIN")
                t.flush()
                db.execute("COMMIT")
                t.prefetch(list(ref))
                assert all(nk in t.cache for nk in ref)  # what a prefetch read (or kept) is cached
        assert len(t) == len(ref)
        for nk, v in ref.items():
            assert t[nk] == v
    finally:
        store.CACHE_ENTRIES = old


def test_a_prefetch_that_clears_the_cache_keeps_the_keys_it_was_asked_for():
    db = store.open_db(":memory:")
    old = store.CACHE_ENTRIES
    store.CACHE_ENTRIES = 4
    try:
        t = store.DiskTable(db, "t", raw=True)
        t.apply({"a": b"1", "b": b"2", "c": b"3"})
        db.execute("BEGIN")
        t.flush()
        db.execute("COMMIT")
        assert set(t.cache) == {"a", "b", "c"}
        t.prefetch(["a", "x", "y"])  # 2 to read + 3 cached > 4: the cache is cleared, but for "a"
        assert set(t.cache) == {"a", "x", "y"}
        assert t.rows(["a", "x", None, "c"]) == [b"1", None, None, b"3"]
    finally:
        store.CACHE_ENTRIES = old


T0 = 1_700_000_000_000
record = st.tuples(st.integers(0, 1), st.sampled_from(["a", "b", "c", None]), st.integers(0, 40),
                   st.one_of(st.none(), st.integers(0, 9)))

SPECS = [
    JoinSpec("l", "r", "stream", (("value", "k"), ("value", "k")), (("value", "t"), ("value", "t")), within=5_000,
             how="outer", lateness=3_000),
    JoinSpec("l", "r", "table", (("value", "k"), ("key",)), how="left"),
    JoinSpec("l", "r", "table", (("value", "k"), ("key",)), (("value", "t"), ("value", "t")), how="left",
             as_of="event-time", retention=20_000, lateness=2_000),
    JoinSpec("l", "r", "tables", (("key",), ("key",))),
]


def _records(raw: list) -> list[tuple[int, dict]]:
    out = []
    for i, (side, k, dt, v) in enumerate(raw):
        value = None if (v is None and side == 1) else {"k": k, "t": T0 + dt * 1000 + i, "v": v}
        out.append((side, {"offset": i, "partition": 0, "ts": T0 + i, "key": k, "value": value}))
    return out


def _feeder(spec: JoinSpec, rows: list, stats: JoinStats, db: sqlite3.Connection | None):
    def emit(k, lv, rv):
        rows.append(orjson.dumps([k, lv, rv]))

    def emit_op(op, k, lv, rv):
        rows.append(orjson.dumps([op, k, lv, rv]))

    if spec.kind == "stream":
        return StreamFeed(spec, emit, stats), []
    if spec.kind == "table":
        if db is None:
            return TableFeed(spec, emit, stats), []
        if spec.as_of == "event-time":
            t = store.DiskTable(db, "v", lambda h: orjson.dumps(h.dump()), lambda b: _History.load(orjson.loads(b)),
                                mutable=True)
        else:
            t = store.DiskTable(db, "t")
        return TableFeed(spec, emit, stats, table=t), [t]
    if db is None:
        return TablesFeed(spec, emit_op, stats), []
    tables = (store.DiskTable(db, "a"), store.DiskTable(db, "b"))
    return TablesFeed(spec, emit_op, stats, tables), list(tables)


@settings(max_examples=80, deadline=None)
@given(raw=st.lists(record, max_size=50), cuts=st.lists(st.integers(0, 50), max_size=4),
       which=st.integers(0, len(SPECS) - 1))
# the third event is late after a restart too: its partner (the first) left before the checkpoint
@example(raw=[(0, "a", 0, 1), (1, "z", 9, 1), (1, "a", 2, 1)], cuts=[2], which=0)
@example(raw=[(0, {"x": [1]}, 0, 1), (1, "z", 9, 1), (1, {"x": [1]}, 2, 1)], cuts=[2], which=0)
def test_rounds_with_checkpoints_write_the_rows_of_one_feed(raw, cuts, which):
    spec = SPECS[which]
    items = _records(raw)
    whole: list = []
    f, _ = _feeder(spec, whole, JoinStats(), None)
    f.feed(items)
    f.finish()

    live: list = []
    db = store.open_db(":memory:")
    state = None
    bounds = sorted({0, len(items), *[c for c in cuts if c <= len(items)]})
    for a, b in zip(bounds, bounds[1:], strict=False):
        f, tables = _feeder(spec, live, JoinStats(), db)  # a restart: new operator objects, the same disk
        if state is not None:
            f.load(orjson.loads(state))
        if spec.kind != "stream":
            for t in tables:
                t.prefetch(f.table_keys(items[a:b]))
        f.feed(items[a:b])
        db.execute("BEGIN")
        for t in tables:
            t.flush()
        db.execute("COMMIT")
        state = orjson.dumps(f.dump())
    f, _ = _feeder(spec, live, JoinStats(), db)
    if state is not None:
        f.load(orjson.loads(state))
    f.finish()
    assert live == whole


KERNEL_SPECS = [
    JoinSpec("l", "r", "table", (("key",), ("key",)), how="left"),
    JoinSpec("l", "r", "table", (("value", "k"), ("key",)), how="inner"),
    JoinSpec("l", "r", "table", (("value", "k"), ("value", "k")), how="left"),
    JoinSpec("l", "r", "table", (("value", "n", "0"), ("value", "k")), how="inner"),
]
kernel_record = st.tuples(st.integers(0, 1), st.sampled_from(["a", "\x01j1", "7", "x\x00y", "é", None]),
                          st.sampled_from(["a", "\x01j1", 7, "7", "x\x00y", "é", None, [1]]),
                          st.one_of(st.sampled_from([None, 1, "é\n\"", "\x00", {"deep": [1.5, None, {"a": "b"}]}]),
                                    st.floats(allow_nan=False, allow_infinity=False)))


def _kernel_records(raw: list) -> list[tuple[int, dict]]:
    out = []
    for i, (side, rkey, k, v) in enumerate(raw):
        value = None if (v is None and side == 1) else {"k": k, "n": [k], "v": v}
        out.append((side, {"offset": i, "partition": 0, "ts": T0 + i, "key": rkey, "value": value}))
    return out


@settings(max_examples=200, deadline=None)
@example(raw=[(1, "7", 7, 1), (0, "7", "7", 1), (1, "7", 7, None), (0, "7", "7", 1)], cuts=[], runs=[1], which=1,
         cache=1, kernel_first=True, bulk=4096, per_json=4096)
@example(raw=[(1, "a", 7, 1), (0, "a", 7, 1), (1, "7", 7, None), (0, "a", 7, 1)], cuts=[], runs=[1], which=3,
         cache=1, kernel_first=True, bulk=4096, per_json=4096)
@given(raw=st.lists(kernel_record, max_size=40), cuts=st.lists(st.integers(0, 60), max_size=4),
       runs=st.lists(st.integers(1, 7), min_size=1, max_size=5), which=st.integers(0, len(KERNEL_SPECS) - 1),
       cache=st.integers(1, 5), kernel_first=st.booleans(), bulk=st.sampled_from([1, 2, 3, 4096]),
       per_json=st.integers(1, 4))
def test_table_rows_kernel_writes_the_record_paths_bytes(raw, cuts, runs, which, cache, kernel_first, bulk, per_json):
    """The follower's batches of the enrichment kernel (follow.enrich_batch: stream_table.enrich_sides over
    a raw table on disk), fed Messages of any length with a checkpoint between rounds, write byte
    for byte the rows of TableFeed fed record by record; and a checkpoint of either one resumes in
    the other (a run with --output table, which takes the record path, after one with JSON
    lines). `bulk` (store._BULK) sends runs of that many keys past the cache
    (DiskTable._bulk_rows), and `per_json` (store._ROWS_PER_JSON) cuts a flush into that many rows
    a json_each statement, a batch with a NUL going the bound way."""
    from streamctl.processing.joins.follow import enrich_batch

    spec = KERNEL_SPECS[which]
    items = _kernel_records(raw)
    nl = orjson.OPT_APPEND_NEWLINE
    whole: list[bytes] = []
    ref = TableFeed(spec, lambda k, lv, rv: whole.append(orjson.dumps({"key": k, "left": lv, "right": rv}, option=nl)),
                    JoinStats())
    ref.feed(items)
    ref.finish()

    live: list[bytes] = []
    db = store.open_db(":memory:")
    old = store.CACHE_ENTRIES, store._BULK, store._ROWS_PER_JSON
    store.CACHE_ENTRIES, store._BULK, store._ROWS_PER_JSON = cache, bulk, per_json
    try:
        bounds = sorted({0, len(items), *[c for c in cuts if c <= len(items)]})
        for n, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
            stats = JoinStats()
            if (n % 2 == 0) == kernel_first:
                t = store.DiskTable(db, "table_rows", raw=True)
                f = TableFeed(spec, _no_rows, stats, table=t)  # the follower's state: dumped and loaded only
                i = a
                while i < b:  # Messages of any length, as rounds of merged batches give them
                    step = runs[i % len(runs)]
                    got = enrich_batch(t, *_message(spec, items, i, min(b, i + step)), spec, live.append)
                    stats.records[0] += got[0]
                    stats.records[1] += got[1]
                    i += step
            else:
                t = store.DiskTable(db, "table_rows")
                f = TableFeed(spec, lambda k, lv, rv: live.append(
                    orjson.dumps({"key": k, "left": lv, "right": rv}, option=nl)), stats, table=t)
                t.prefetch(f.table_keys(items[a:b]))
                f.feed(items[a:b])
            assert stats.records == [sum(1 for s, _r in items[a:b] if s == 0), sum(1 for s, _r in items[a:b] if s == 1)]
            db.execute("BEGIN")
            t.flush()
            db.execute("COMMIT")
            f.load(orjson.loads(orjson.dumps(f.dump())))
    finally:
        store.CACHE_ENTRIES, store._BULK, store._ROWS_PER_JSON = old
    assert b"".join(live) == b"".join(whole)


def _no_rows(*_args: object) -> None:
    raise AssertionError("the kernel writes JSON lines")


def _message(spec: JoinSpec, items: list[tuple[int, dict]], a: int, b: int) -> tuple[tuple, tuple]:
    """Items a..b as a Message's two Blocks (follow_inputs.messages'): join keys (and the table's
    record keys) as table_inputs.side_reader reads them, the table's values as their texts, the
    events' as their rows' heads, and each record's place in the input order as its merge key."""
    from streamctl.processing.joins.table_inputs import side_reader

    blocks = []
    for side in (0, 1):
        recs = [rec for s, rec in items[a:b] if s == side]
        values, keys, rkeys, _source = side_reader(spec.on[side], spec.time_field[side], side == 1)[0](recs)
        if side:
            texts = [None if v is None else orjson.dumps(v) for v in values]
        else:
            texts = [b'{"key":%b,"left":%b,"right":' % (orjson.dumps(k), orjson.dumps(v)) for k, v in zip(keys, values, strict=True)]
        blocks.append((texts, keys, rkeys, [i for i in range(a, b) if items[i][0] == side]))
    return blocks[0], blocks[1]


text_key = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)


@settings(max_examples=100, deadline=None)
@given(rows=st.dictionaries(text_key, st.one_of(text_key, st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False),
                                                st.lists(text_key, max_size=2)), max_size=30),
       per_json=st.integers(1, 8))
def test_a_raw_tables_flush_stores_each_value_as_bound(rows, per_json):
    """A raw table's flush through json_each (DiskTable._insert_json) stores each key and each value's
    text exactly as binding them does (a table of values whose encoding is the identity: a TEXT key, a
    BLOB value), whatever the characters: a batch with a NUL goes the bound way."""
    texts = {k: orjson.dumps(v) for k, v in rows.items()}
    stored = []
    old = store._ROWS_PER_JSON
    store._ROWS_PER_JSON = per_json
    try:
        for t in (store.DiskTable(store.open_db(":memory:"), "t", bytes, bytes),
                  store.DiskTable(store.open_db(":memory:"), "t", raw=True)):
            t.apply(texts)
            t.db.execute("BEGIN")
            t.flush()
            t.db.execute("COMMIT")
            stored.append(t.db.execute("SELECT k, typeof(k), v, typeof(v) FROM t ORDER BY k").fetchall())
            t.cache.clear()
            assert t.rows(list(texts)) == list(texts.values())
    finally:
        store._ROWS_PER_JSON = old
    assert stored[0] == stored[1]
    assert sorted((k, v) for k, _tk, v, _tv in stored[1]) == sorted((store.sql_key(k), v) for k, v in texts.items())
    assert {tk for _k, tk, _v, _tv in stored[1]} <= {"text"} and {tv for *_x, tv in stored[1]} <= {"blob"}
