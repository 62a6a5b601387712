"""The Spark engine for window: the same rows in the same order, and the same late counts, as the local engine.

Parity tests exec the generated job's text and call its main() with the shared
`spark` fixture (in this process, where streamctl is imported, that runs the
package's own streamctl.spark.window_job: the very files the job carries, see
test_emitted_jobs.py); slow tests run `streamctl window --engine spark` for real.
The logs include partitioned ones filled by one produce, whose append times say
nothing about the event-time order: both engines must read them in the input
order (per partition, a running max of event time; then by that max).
"""

from __future__ import annotations

import ast
import json
import math
import random

import orjson
import pytest

from streamctl.processing.mergeorder import NO_TIME
from streamctl.processing.windows.config import WindowConfig
from streamctl.processing.windows.driver import WindowRun
from streamctl.processing.windows.events import records_of
from streamctl.processing.windows.output import row_json
from streamctl.spark.window_run import spark_job
from streamctl.storage import log as logmod
from streamctl.storage import reader
from tests.conftest import run_cli

T0 = 1_763_719_200_000


def make_events(n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        ev = {"at": T0 + i * 700 + rnd.randint(-4000, 4000), "u": f"user-{rnd.randrange(5)}",
              "ms": rnd.choice([rnd.randint(1, 500), rnd.random() * 100, "slow", None]),
              "page": rnd.choice(["/a", "/b", "/c", 1, None])}
        if rnd.random() < 0.03:
            ev["at"] = "not a time"
        out.append(json.dumps(ev))
    return out


@pytest.fixture(scope="module")
def parity_log(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("wparity") / "log")
    evs = make_events(240, seed=5)
    for i in range(0, len(evs), 60):  # several appends: the append ts interleave partitions
        run_cli("produce", path, "--partitions", "3", "--key-field", "u", input="\n".join(evs[i:i + 60]) + "\n",
                check=True)
    return path


@pytest.fixture(scope="module")
def parity_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("wparity_plain") / "events.jsonl"
    path.write_text("\n".join(json.dumps({**json.loads(e), "ts": json.loads(e)["at"]}) for e in make_events(150, 9))
                    + "\n\n")
    return str(path)


def local(path: str, cfg: WindowConfig) -> tuple[list[bytes], dict]:
    is_log, recs = records_of(path, cfg)
    run = WindowRun(cfg, is_log)
    rows: list = []
    run.feed(recs, rows.extend)
    run.finish(rows.extend)
    st = run.stats
    return [row_json(r) for r in rows], {"events": st.events, "late": st.late, "bad_time": st.bad_time,
                                         "non_numeric": run.plan.non_numeric}


def job_namespace(path: str, cfg: WindowConfig) -> dict:
    ns: dict = {"__name__": "streamctl_window_test_job"}
    exec(compile(spark_job(path, cfg).text(None, stats_line=True), "job.py", "exec"), ns)
    return ns


def on_spark(spark, path: str, cfg: WindowConfig) -> tuple[list[bytes], dict]:
    ns = job_namespace(path, cfg)
    out: list[str] = []
    ns["main"](spark, ns["PARAMS"], out.append)
    stats = json.loads(out.pop().removeprefix("#streamctl-stats "))
    stats.pop("bad_time_example")
    return [line.encode() + b"\n" for line in out], stats


def same_rows(a: list[bytes], b: list[bytes]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        rx, ry = orjson.loads(x), orjson.loads(y)
        assert rx.keys() == ry.keys(), (x, y)
        for k in rx:
            u, v = rx[k], ry[k]
            if isinstance(u, float) or isinstance(v, float):
                assert math.isclose(u, v, rel_tol=1e-9), (k, x, y)
            else:
                assert u == v, (k, x, y)


AGGS = ["count", "sum:ms", "avg:ms", "min:ms", "max:ms", "p50:ms", "p99:ms", "distinct:page", "first:page",
        "last:page"]
CASES = [
    WindowConfig(kind="tumbling", size=10_000, time_field="at", aggs=AGGS, lateness=3000),
    WindowConfig(kind="tumbling", size=60_000, time_field="at", by=["page"], aggs=["count", "avg:ms"]),
    WindowConfig(kind="hopping", size=20_000, hop=5000, time_field="at", aggs=AGGS, lateness=2000),
    WindowConfig(kind="sliding", size=8000, time_field="at", aggs=AGGS, lateness=1000),
    WindowConfig(kind="session", size=3000, time_field="at", aggs=AGGS, lateness=500),
    WindowConfig(kind="session", size=6000, time_field="at", by=["u", "page"], aggs=["count", "p90:ms"]),
    WindowConfig(kind="tumbling", size=5, aggs=["count", "last:u"]),  # the append time, keyed by record key
]


@pytest.mark.spark
@pytest.mark.parametrize("cfg", CASES, ids=lambda c: f"{c.kind}-{c.size}-{len(c.aggs)}")
def test_parity_log(spark, parity_log, cfg):
    want_rows, want_stats = local(parity_log, cfg)
    got_rows, got_stats = on_spark(spark, parity_log, cfg)
    assert want_stats["late"] > 0 or cfg.kind == "tumbling" and cfg.time_field == "ts" or cfg.size == 60_000
    assert got_stats == want_stats
    same_rows(got_rows, want_rows)


@pytest.mark.spark
@pytest.mark.parametrize("kind,size", [("tumbling", 5000), ("sliding", 4000), ("session", 2000)])
def test_parity_plain_file(spark, parity_file, kind, size):
    cfg = WindowConfig(kind=kind, size=size, by=["u"], aggs=AGGS)
    want_rows, want_stats = local(parity_file, cfg)
    got_rows, got_stats = on_spark(spark, parity_file, cfg)
    assert got_stats == want_stats and want_stats["bad_time"] > 0
    same_rows(got_rows, want_rows)



SKETCH_AGGS = ["count", "stddev:ms", "approx_distinct:page", "approx_distinct:ms", "approx_p50:ms", "approx_p90:ms",
               "approx_p99:ms", "sd=stddev:at"]
SKETCH_CASES = [("tumbling", {"size": 600_000}), ("hopping", {"size": 600_000, "hop": 200_000}),
                ("sliding", {"size": 8000}), ("session", {"size": 3000})]


@pytest.fixture(scope="module")
def sketch_log(tmp_path_factory) -> str:
    """Windows of hundreds of numbers per key (the sketches compact) and jitter that makes sessions
    merge, over 3 partitions."""
    rnd = random.Random(21)
    evs = []
    for i in range(3000):
        evs.append({"at": T0 + i * 300 + rnd.randint(-2500, 2500), "u": f"user-{rnd.randrange(3)}",
                    "ms": rnd.choice([rnd.lognormvariate(3, 1.5), rnd.randint(1, 10_000)]),
                    "page": rnd.choice([f"/p{rnd.randrange(400)}", rnd.randrange(50), None])})
    path = str(tmp_path_factory.mktemp("sketches") / "log")
    for i in range(0, len(evs), 500):
        run_cli("produce", path, "--partitions", "3", "--key-field", "u",
                input="".join(json.dumps(e) + "\n" for e in evs[i:i + 500]), check=True)
    return path


@pytest.mark.spark
@pytest.mark.parametrize("kind,opts", SKETCH_CASES, ids=[k for k, _ in SKETCH_CASES])
def test_parity_new_aggregations_identical(spark, sketch_log, kind, opts):
    """stddev and the sketches: the same rows, byte for byte, on both engines (the same states, fed
    the same values in the same order, merged the same way)."""
    cfg = WindowConfig(kind=kind, time_field="at", aggs=SKETCH_AGGS, lateness=2000, **opts)
    want_rows, want_stats = local(sketch_log, cfg)
    got_rows, got_stats = on_spark(spark, sketch_log, cfg)
    assert got_stats == want_stats
    assert got_rows == want_rows
    if kind == "tumbling":  # the sketches had hundreds of values a window, so they compacted
        assert max(orjson.loads(r)["count"] for r in want_rows) > 500

JITTER = 3000  # ms an event may trail the one produced before it


def ordered_events(n: int, seed: int, jitter: int) -> list[dict]:
    """Events in event-time order, each up to `jitter` ms off its slot, a few without a usable time."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        ev = {"at": T0 + i * 400 + (rnd.randint(0, jitter) if jitter else 0), "u": f"user-{rnd.randrange(12)}",
              "ms": rnd.randint(1, 500), "page": rnd.choice(["/a", "/b", "/c"])}
        if rnd.random() < 0.02:
            ev["at"] = rnd.choice(["not a time", None, "2026-13-45T99:00:00Z"])
        out.append(ev)
    return out


def one_batch_log(folder, name: str, events: list[dict]) -> str:
    """A 3-partition log filled by one produce: the append times are (nearly) equal, so their order says
    nothing about event time."""
    path = str(folder / name)
    run_cli("produce", path, "--partitions", "3", "--key-field", "u",
            input="".join(json.dumps(e) + "\n" for e in events), check=True)
    lg = logmod.open_log(path)
    assert all(reader.partition_info(lg, p).next_offset > 0 for p in range(3))
    return path


@pytest.fixture(scope="module")
def jittered_log(tmp_path_factory) -> str:
    return one_batch_log(tmp_path_factory.mktemp("jittered"), "log", ordered_events(600, 11, JITTER))


@pytest.fixture(scope="module")
def sorted_log(tmp_path_factory) -> str:
    evs = ordered_events(600, 12, 0)
    for ev in evs:  # in order, with repeats: equal times in different partitions
        if isinstance(ev["at"], int):
            ev["at"] -= ev["at"] % 1200
    return one_batch_log(tmp_path_factory.mktemp("sorted"), "log", evs)


@pytest.fixture(scope="module")
def apart_log(tmp_path_factory) -> str:
    """Each partition produced on its own, one after the other (its append times all after the partition
    before), holding events of the same hour, each partition in event-time order: the append-time order
    would read them partition by partition and find most events late."""
    path = str(tmp_path_factory.mktemp("apart") / "log")
    evs = ordered_events(450, 13, 1000)  # every third event is 1200 ms after the one before: in order
    for p in range(3):
        run_cli("produce", path, "--partitions", "3", "--partition", str(p),
                input="".join(json.dumps(e) + "\n" for e in evs[p::3]), check=True)
    return path


KINDS = [("tumbling", {"size": 5000}), ("hopping", {"size": 6000, "hop": 2000}), ("sliding", {"size": 4000}),
         ("session", {"size": 700})]
ORDER_AGGS = ["count", "sum:ms", "avg:ms", "p90:ms", "distinct:page", "first:page", "last:page"]


def window_cfg(kind: str, opts: dict, **more) -> WindowConfig:
    return WindowConfig(kind=kind, time_field="at", aggs=ORDER_AGGS, **opts, **more)


@pytest.mark.spark
@pytest.mark.parametrize("kind,opts", KINDS, ids=[k for k, _ in KINDS])
@pytest.mark.parametrize("lateness", [0, JITTER])
def test_parity_one_produce_jittered(spark, jittered_log, kind, opts, lateness):
    cfg = window_cfg(kind, opts, lateness=lateness)
    want_rows, want_stats = local(jittered_log, cfg)
    got_rows, got_stats = on_spark(spark, jittered_log, cfg)
    assert got_stats == want_stats
    same_rows(got_rows, want_rows)
    assert want_stats["bad_time"] > 0
    # the jitter as lateness lets nothing be late; without it, some events are
    assert (want_stats["late"] == 0) == (lateness >= JITTER)


@pytest.mark.spark
@pytest.mark.parametrize("kind,opts", KINDS, ids=[k for k, _ in KINDS])
def test_parity_one_produce_in_order_nothing_late(spark, sorted_log, kind, opts):
    cfg = window_cfg(kind, opts)
    want_rows, want_stats = local(sorted_log, cfg)
    got_rows, got_stats = on_spark(spark, sorted_log, cfg)
    assert got_stats == want_stats and want_stats["late"] == 0
    same_rows(got_rows, want_rows)


@pytest.mark.spark
@pytest.mark.parametrize("kind,opts", KINDS, ids=[k for k, _ in KINDS])
def test_parity_partitions_produced_apart(spark, apart_log, kind, opts):
    cfg = window_cfg(kind, opts)
    want_rows, want_stats = local(apart_log, cfg)
    got_rows, got_stats = on_spark(spark, apart_log, cfg)
    assert got_stats == want_stats and want_stats["late"] == 0
    same_rows(got_rows, want_rows)


@pytest.mark.spark
def test_bad_time_example_is_the_first_in_input_order(spark, jittered_log):
    cfg = window_cfg("tumbling", {"size": 5000})
    is_log, recs = records_of(jittered_log, cfg)
    run = WindowRun(cfg, is_log)
    run.feed(recs, lambda rows: None, source=jittered_log)
    ns = job_namespace(jittered_log, cfg)
    out: list[str] = []
    ns["main"](spark, ns["PARAMS"], out.append)
    got = json.loads(out[-1].removeprefix("#streamctl-stats "))["bad_time_example"]
    assert run.stats.bad_time_example.startswith(got)


@pytest.mark.spark
@pytest.mark.parametrize("slices", [1, 4, 13])
def test_input_order_and_watermark_across_spark_partitions(spark, slices):
    """The input order of streamctl.spark.order (the window and join jobs' one Spark kernel of it)
    sorts like the input order by mergeorder.merge_keys, and its running max before and up to each
    record, carried across the sorted Spark partitions, is Watermark.observe folded over that order."""
    from pyspark.sql.types import LongType, StructField, StructType

    from streamctl.processing.mergeorder import merge_keys
    from streamctl.processing.watermark import Watermark
    from streamctl.spark.order import in_input_order, with_high

    rnd = random.Random(slices)
    places = []
    for p in range(4):
        times = [None if rnd.random() < 0.15 else T0 + off * 10 + rnd.randint(-50, 50)
                 for off in range(rnd.randrange(0, 60))]
        # stored order: by partition, then offset; a tie of merge keys goes by partition
        places += [((key, p, off), t) for off, (t, key) in enumerate(zip(times, merge_keys(times, NO_TIME),
                                                                         strict=True))]
    clock, want = Watermark(), []
    for place, t in sorted(places):
        prior = clock.max_time
        if t is not None:
            clock.observe(t)
        want.append((place[1], place[2], t, prior, clock.max_time))
    shuffled = [(p, off, t) for (_key, p, off), t in places]
    rnd.shuffle(shuffled)
    schema = StructType([StructField(n, LongType()) for n in ("part", "off", "t")])
    df = spark.createDataFrame(spark.sparkContext.parallelize(shuffled, slices), schema)
    got = with_high(in_input_order(df, ("part",), slices).persist())
    rows = got.select("pos", "part", "off", "t", "prior", "high").collect()
    assert [tuple(r)[1:] for r in sorted(rows)] == want


def test_job_is_readable_and_params_are_data(tmp_path):
    f = tmp_path / "e.jsonl"
    f.write_text('{"ts": 1763719200000}\n')
    evil = "x'); import os; os.system('echo pwned'); ('"
    cfg = WindowConfig(kind="tumbling", size=1000, by=[evil], aggs=["n=count", f"s=sum:{evil}"])
    text = spark_job(str(f), cfg).text("local[2]")
    tree = ast.parse(text)
    assert "os.system" not in "".join(ast.unparse(n) for n in tree.body if not isinstance(n, ast.Assign))
    assert "def main(spark, params, out)" in text and "spark-submit" in text


def test_emit_job_and_spark_refusals(tmp_path):
    f = tmp_path / "e.jsonl"
    f.write_text('{"ts": 1763719200000}\n')
    job = tmp_path / "job.py"
    p = run_cli("window", str(f), "--tumbling", "1m", "--emit-job", str(job), "--master", "local[1]")
    assert p.returncode == 0 and job.exists()
    assert '"master": "local[1]"' in job.read_text()
    for extra in (["--late", "correct"], ["--emit", "update"], ["--processing-time"], ["--late-out", "x.jsonl"]):
        p = run_cli("window", str(f), "--tumbling", "1m", "--engine", "spark", *extra)
        assert p.returncode == 2 and b"Spark engine cannot run this" in p.stderr, extra
    p = run_cli("window", str(f), "--tumbling", "1m", "--engine", "spark", "--follow")
    assert p.returncode == 2


@pytest.mark.spark
@pytest.mark.slow
def test_cli_engine_spark_for_real(parity_log):
    args = ["window", parity_log, "--session", "3s", "--time-field", "at", "--agg", "count", "--agg", "avg:ms",
            "--lateness", "500ms"]
    want = run_cli(*args, "--engine", "local", check=True)
    got = run_cli(*args, "--engine", "spark", "--master", "local[2]", "--output", "jsonl", timeout=300, check=True)
    same_rows(got.stdout.splitlines(), want.stdout.splitlines())
    late_line = [ln for ln in want.stderr.splitlines() if b"late" in ln]
    assert late_line and late_line == [ln for ln in got.stderr.splitlines() if b"late" in ln]


@pytest.mark.spark
@pytest.mark.slow
# the CLI end to end for a fixed-window and a session kind (each kind's rows are compared in-process
# above; a CLI run costs a JVM start)
@pytest.mark.parametrize("kind,flag", [("tumbling", "5s"), ("session", "700ms")])
def test_cli_one_produce_log_line_for_line(jittered_log, kind, flag):
    args = ["window", jittered_log, f"--{kind}", flag, "--time-field", "at", "--agg", "count", "--agg", "avg:ms",
            "--agg", "last:page"]
    want = run_cli(*args, "--engine", "local", check=True)
    got = run_cli(*args, "--engine", "spark", "--master", "local[2]", timeout=300, check=True)
    same_rows(got.stdout.splitlines(), want.stdout.splitlines())
    assert late_notes(got.stderr) == late_notes(want.stderr) and len(late_notes(want.stderr)) == 2


def late_notes(stderr: bytes) -> list[bytes]:
    """The late-event and bad-time lines, the latter cut after the first bad record's place (the local
    engine goes on to say why its value is no time)."""
    mark = b"no usable time in 'at'"
    return [ln[:ln.index(mark) + len(mark)] if mark in ln else ln
            for ln in stderr.splitlines() if b"late" in ln or mark in ln]


@pytest.mark.spark
@pytest.mark.parametrize("lateness", [0, 1000])
def test_parity_sessions_close_when_the_watermark_reaches_their_end(spark, tmp_path, lateness):
    """Times on a grid of a second, GAP 3 s: events exactly GAP after a session's last, before and
    after the event that moves the watermark to its end (which closes it: end <= watermark), on
    both engines alike: the rows, their order and the late count."""
    rnd = random.Random(11)
    evs = [{"at": 0, "k": "a"}, {"at": 3000, "k": "b"}, {"at": 3000, "k": "a"},  # a@3 late: [0, 3) closed
           {"at": 10_000, "k": "a"}, {"at": 13_000, "k": "a"}, {"at": 13_000, "k": "b"}]  # a@13 joins
    t = 20
    for _ in range(300):
        t += rnd.choice([0, 1, 1, 2, 3])
        evs.append({"at": (t - rnd.choice([0, 0, 0, 0, 1, 2, 3, 4])) * 1000, "k": rnd.choice("abcd"),
                    "v": rnd.randint(0, 9)})
    path = tmp_path / "ties.jsonl"
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in evs))
    cfg = WindowConfig(kind="session", size=3000, time_field="at", by=["k"], aggs=["count", "sum:v"],
                       lateness=lateness)
    want_rows, want_stats = local(str(path), cfg)
    assert want_stats["late"] > 0
    if not lateness:
        assert [orjson.loads(r)["count"] for r in want_rows[:2]] == [1, 1]  # a's [0, 3), then b's [3, 6)
    got_rows, got_stats = on_spark(spark, str(path), cfg)
    assert got_stats == want_stats
    assert got_rows == want_rows


@pytest.mark.spark
@pytest.mark.parametrize("kind", ["tumbling", "session"])
def test_parity_rows_closing_together_by_group_key(spark, tmp_path, kind):
    """Rows that close together come by group key on both engines: numbers by value, then strings."""
    path = tmp_path / "keys.jsonl"
    keys = [10, "ab!", 9, None, -1, "ab", [1, 10], 2.5, [1, 9], True]
    path.write_bytes(b"".join(orjson.dumps({"at": 1_000, "k": k}) + b"\n" for k in keys))
    cfg = WindowConfig(kind=kind, size=60_000, time_field="at", by=["k"], aggs=["count"])
    want_rows, want_stats = local(str(path), cfg)
    assert [orjson.loads(r)["key"] for r in want_rows] == [None, True, -1, 2.5, 9, 10, "ab", "ab!", [1, 9], [1, 10]]
    got_rows, got_stats = on_spark(spark, str(path), cfg)
    assert got_rows == want_rows and got_stats == want_stats
