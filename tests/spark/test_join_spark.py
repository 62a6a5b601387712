"""The Spark engine for join: parity with the local engine for each kind, and the generated job.

Parity tests exec the generated job's text and call its main() with the shared
`spark` fixture (one SparkSession for the run); one slow test runs the job for
real through `streamctl join --engine spark`.
"""

from __future__ import annotations

import ast
import random

import orjson
import pytest

from conftest import run_cli
from streamctl.processing.joins import driver as joining
from streamctl.spark import join_run

from test_join import write_log

T0 = 1_763_719_200_000


def local_run(spec: joining.JoinSpec) -> tuple[list[bytes], dict]:
    out: list[bytes] = []
    stats = joining.run(spec, lambda k, lv, rv: out.append(orjson.dumps({"key": k, "left": lv, "right": rv})),
                        lambda op, k, lv, rv: out.append(orjson.dumps({"key": k, "left": lv, "right": rv, "op": op})))
    return out, {"late": stats.late, "no_time": stats.no_time}


def local_lines(spec: joining.JoinSpec) -> list[bytes]:
    return local_run(spec)[0]


def follow_run(spec: joining.JoinSpec, round_size: int = 7) -> tuple[list[bytes], dict]:
    """The follow path over the whole input: rounds of `round_size` records (each round merges the
    partitions anew from the positions and merge keys the last one left), the tables on disk,
    then the end of input."""
    from streamctl.processing.joins.follow import JoinFollower

    out: list[bytes] = []
    f = JoinFollower(spec, None, lambda k, lv, rv: out.append(orjson.dumps({"key": k, "left": lv, "right": rv})),
                     lambda op, k, lv, rv: out.append(orjson.dumps({"key": k, "left": lv, "right": rv, "op": op})),
                     None, None)
    try:
        while f.round(round_size):
            pass
        f.feeder.finish()
    finally:
        f.close()
    return out, {"late": f.stats.late, "no_time": f.stats.no_time}


def spark_run(spark, spec: joining.JoinSpec, **extra) -> tuple[list[bytes], dict]:
    """The job's rows and its counts (the stats line streamctl join reads back)."""
    text = join_run.spark_job(spec, joining.check_inputs(spec)).text(None, stats_line=True, **extra)
    ns: dict = {"__name__": "streamctl_test_job"}
    exec(compile(text, "job.py", "exec"), ns)
    out: list[str] = []
    ns["main"](spark, ns["PARAMS"], out.append)
    assert out and out[-1].startswith("#streamctl-stats ")
    stats = orjson.loads(out.pop()[len("#streamctl-stats "):])
    return [ln.encode() for ln in out], stats


def spark_lines(spark, spec: joining.JoinSpec, **extra) -> list[bytes]:
    return spark_run(spark, spec, **extra)[0]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    """Logs and plain files with ties, out-of-order event times, tombstones and null keys."""
    d = tmp_path_factory.mktemp("joinspark")
    rnd = random.Random(7)
    keys = ["a", "b", "c", "7", None]
    searches, clicks, changes, left_changes = [], [], [], []
    ts = T0
    for i in range(60):
        ts += rnd.choice([0, 0, 300, 1000])
        k = rnd.choice(keys)
        searches.append((k, {"id": i, "k": k, "at": ts + rnd.randint(-2000, 2000)}, ts))
    ts = T0
    for i in range(50):
        ts += rnd.choice([0, 500, 1200])
        k = rnd.choice(keys)
        clicks.append((k, {"c": i, "k": k, "at": ts + rnd.randint(-2000, 2000)}, ts))
    ts = T0 - 5000
    for i in range(40):
        ts += rnd.choice([0, 700, 2500])
        k = rnd.choice(keys[:4])
        v = None if rnd.random() < 0.25 else {"v": i, "k": (7 if k == "7" else k), "at": ts + rnd.randint(-3000, 0)}
        changes.append((k, v, ts))
    ts = T0 - 3000
    for i in range(40):
        ts += rnd.choice([0, 900, 2000])
        k = rnd.choice(keys[:4])
        left_changes.append((k, None if rnd.random() < 0.3 else {"l": i}, ts))
    paths = {}
    for name, rows, n in (("s", searches, 3), ("c", clicks, 2), ("t", changes, 2), ("lt", left_changes, 3)):
        paths[name] = str(d / name)
        write_log(paths[name], n, rows)
        with open(d / f"{name}.jsonl", "wb") as f:
            for _k, v, _ts in rows:
                if v is not None:
                    f.write(orjson.dumps(v) + b"\n\n")
                else:
                    f.write(b"null\n")
        paths[name + ".jsonl"] = str(d / f"{name}.jsonl")
    return paths


SLOW = pytest.mark.slow  # each --how is covered by the fast cases too; these add layouts and fields

CASES = [
    ("s", "c", {"within": "1s"}),
    pytest.param("s", "c", {"within": "2s", "how": "left"}, marks=SLOW),
    ("s", "c", {"within": "1500ms", "how": "right", "on": "k", "time_field": "at"}),
    pytest.param("s", "c", {"within": "1s", "how": "outer", "time_field": "at"}, marks=SLOW),
    ("s.jsonl", "c.jsonl", {"within": "1s", "how": "outer", "on": "k", "time_field": "at"}),
    ("s", "t", {"table": True, "how": "left"}),
    ("s", "t", {"table": True, "on": "k"}),
    ("s", "t.jsonl", {"table": True, "how": "left", "on": "k"}),
    ("s", "t", {"table": True, "how": "left", "as_of": "event-time"}),
    ("s", "t", {"table": True, "as_of": "event-time", "time_field": "at", "on": "k"}),
    ("s", "t", {"table": True, "how": "left", "as_of": "event-time", "table_retention": "2s"}),
    ("lt", "t", {"tables": True}),
    ("lt", "t", {"tables": True, "on": "key=k"}),
    # a plain file's offset is its line number (blank lines counted), its partition 0
    ("s.jsonl", "c.jsonl", {"within": "1s", "how": "left", "on": "offset", "time_field": "at"}),
    ("s.jsonl", "c.jsonl", {"within": "4s", "how": "outer", "on": "partition", "time_field": "offset"}),
    ("s.jsonl", "t.jsonl", {"table": True, "how": "left", "on": "offset"}),
    ("s.jsonl", "t.jsonl", {"table": True, "how": "left", "as_of": "event-time", "time_field": "offset", "on": "k"}),
    ("lt", "t.jsonl", {"tables": True, "on": "partition"}),
]


def _case_id(case) -> str:
    a, b, kw = case.values if hasattr(case, "values") else case
    return f"{a}-{b}-" + ",".join(f"{k}={v}" for k, v in sorted(kw.items()))


@pytest.mark.spark
@pytest.mark.parametrize("left,right,kw", CASES, ids=[_case_id(c) for c in CASES])
def test_parity_with_local(spark, inputs, left, right, kw):
    """The local engine, the Spark engine and (for two logs) the follow path give the same rows and counts."""
    spec = joining.make_spec(inputs[left], inputs[right], **kw)
    local, local_stats = local_run(spec)
    assert local, "a case that emits nothing proves little"
    assert spark_run(spark, spec) == (local, local_stats)
    if not left.endswith(".jsonl") and not right.endswith(".jsonl"):
        assert follow_run(spec) == (local, local_stats)


@pytest.fixture(scope="module")
def event_time_inputs(tmp_path_factory) -> dict[str, str]:
    """Searches and clicks keyed into 3 partitions each, appended a day apart (ts), joined on the
    event-time field `at`: each partition mostly in event-time order, with a little disorder, a
    few stragglers minutes behind, and records without a usable time; table changes for as-of."""
    d = tmp_path_factory.mktemp("joinspark_at")
    rnd = random.Random(23)
    users = [f"u{i}" for i in range(6)]

    def stream(n: int, name: str, ts0: int) -> list[tuple]:
        out = []
        at = T0
        for i in range(n):
            at += rnd.choice([0, 400, 2_000, 9_000])
            when = at - rnd.randint(0, 3_000)  # up to 3 s of disorder
            if rnd.random() < 0.04:
                when = at - 300_000  # a straggler 5 minutes behind
            if rnd.random() < 0.03:
                value: dict = {name: i, "at": "soon"}
            else:
                value = {name: i, "at": when}
            out.append((rnd.choice(users), value, ts0 + i))
        return out

    paths = {}
    for name, rows in (("s", stream(150, "s", T0)), ("c", stream(150, "c", T0 + 86_400_000)),
                       ("t", stream(60, "v", T0 + 86_400_000))):
        for i, (k, _v, ts) in enumerate(rows):  # tombstones in the table
            if name == "t" and i % 7 == 3:
                rows[i] = (k, None, ts)
        paths[name] = str(d / name)
        write_log(paths[name], 3, rows, place=lambda i, key: int(key[1:]) % 3)
    return paths


def _case_id_kw(kw: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(kw.items()))


EVENT_TIME_CASES = [
    {"within": "10s", "how": "inner"},
    {"within": "10s", "how": "left"},
    {"within": "10s", "how": "right", "lateness": "4s"},
    {"within": "10s", "how": "outer"},
    {"within": "10s", "how": "outer", "lateness": "6m"},
]


@pytest.mark.spark
@pytest.mark.parametrize("kw", EVENT_TIME_CASES, ids=lambda kw: _case_id_kw(kw))
def test_parity_on_event_time_with_late_events(spark, event_time_inputs, kw):
    spec = joining.make_spec(event_time_inputs["s"], event_time_inputs["c"], on="key", time_field="value.at", **kw)
    local, local_stats = local_run(spec)
    assert local and sum(local_stats["no_time"]) > 0
    if "lateness" not in kw:
        assert sum(local_stats["late"]) > 0, "the stragglers are late without --lateness"
    if kw.get("lateness") == "6m":
        assert local_stats["late"] == [0, 0]
    assert spark_run(spark, spec) == (local, local_stats)


@pytest.fixture(scope="module")
def partner_left_inputs(tmp_path_factory) -> dict[str, str]:
    """Two logs of 2 partitions and the same records as plain files, event times (`at`) out of order
    by up to 1.5 s: with --within 1s many events come behind the watermark after a partner left."""
    d = tmp_path_factory.mktemp("joinspark_left")
    rnd = random.Random(11)
    paths = {}
    for name in ("l", "r"):
        rows = [(k := rnd.choice("abcde"), {"k": k, name: i, "at": T0 + 250 * i + rnd.randint(-1500, 1500)}, T0 + i)
                for i in range(120)]
        paths[name] = str(d / name)
        write_log(paths[name], 2, rows)
        (d / f"{name}.jsonl").write_bytes(b"".join(orjson.dumps(v) + b"\n" for _k, v, _ts in rows))
        paths[name + ".jsonl"] = str(d / f"{name}.jsonl")
    return paths


@pytest.mark.spark
@pytest.mark.parametrize("files,how", [("", "outer"), ("", "inner"), (".jsonl", "left")])
def test_parity_when_partners_left_before_late_events(spark, partner_left_inputs, files, how):
    """An event behind the watermark whose partner has already left is late (StreamStreamJoin.push):
    the Spark job finds the same ones (and those whose only such partners were late themselves are
    not), so rows and counts agree, and with the follow path over logs."""
    from streamctl.processing.joins import stream_stream

    spec = joining.make_spec(partner_left_inputs["l" + files], partner_left_inputs["r" + files], on="k",
                             time_field="at", within="1s", how=how)
    local, local_stats = local_run(spec)
    assert local
    evict = stream_stream.StreamStreamJoin._evict

    def forgetting(self, wm) -> None:  # an operator that never knows that an event left
        evict(self, wm)
        self.gone, self.gone_old = ({}, {}), ({}, {})

    with pytest.MonkeyPatch.context() as mp:  # the late count by the first test alone: smaller
        mp.setattr(stream_stream.StreamStreamJoin, "_evict", forgetting)
        assert sum(local_run(spec)[1]["late"]) < sum(local_stats["late"])
    assert spark_run(spark, spec) == (local, local_stats)
    if not files:
        assert follow_run(spec) == (local, local_stats)


@pytest.mark.spark
@pytest.mark.parametrize("kw", [{"as_of": "event-time", "how": "left"},
                                {"as_of": "event-time", "lateness": "5s", "table_retention": "1m"},
                                {"as_of": "position", "how": "left"}], ids=_case_id_kw)
def test_parity_stream_table_on_event_time(spark, event_time_inputs, kw):
    spec = joining.make_spec(event_time_inputs["s"], event_time_inputs["t"], table=True, on="key",
                             time_field="value.at", **kw)
    local, local_stats = local_run(spec)
    assert local
    if kw["as_of"] == "event-time" and "lateness" not in kw:
        assert local_stats["late"][1] > 0
    if kw["as_of"] == "event-time":
        assert local_stats["no_time"][1] > 0, "table changes without a usable time are counted"
    assert spark_run(spark, spec) == (local, local_stats)


@pytest.mark.spark
def test_parity_tables_on_event_time(spark, event_time_inputs):
    spec = joining.make_spec(event_time_inputs["c"], event_time_inputs["t"], tables=True, time_field="value.at")
    local, local_stats = local_run(spec)
    assert local
    assert spark_run(spark, spec) == (local, local_stats)


@pytest.mark.spark
@pytest.mark.parametrize("left,right,kw", [CASES[0], CASES[4], CASES[5], CASES[8], CASES[11]],
                         ids=lambda c: c if isinstance(c, str) else ",".join(f"{k}={v}" for k, v in sorted(c.items())))
def test_parity_with_many_order_partitions(spark, inputs, left, right, kw):
    """Input positions numbered in many range partitions (more than there are records per
    partition): order and ties (a tombstone's two key rows share one position) must hold."""
    spec = joining.make_spec(inputs[left], inputs[right], **kw)
    assert spark_lines(spark, spec, order_partitions=13) == local_lines(spec)


def test_job_is_standalone_and_params_are_data(inputs):
    spec = joining.make_spec(inputs["s"], inputs["t"], table=True, on='we"ird=k')
    text = join_run.spark_job(spec, joining.check_inputs(spec), snapshot=False).text(None)
    tree = ast.parse(text)
    imports = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imports |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert "streamctl" not in imports
    assert "PARAMS = json.loads(" in text and "def main(spark, params, out)" in text
    assign = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "PARAMS")
    ns: dict = {}
    exec("import json\nPARAMS = " + ast.get_source_segment(text, assign.value), ns)  # data only: json.loads
    assert ns["PARAMS"]["on"][0] == ["value", 'we"ird']
    assert text.count('we\\\\"ird') == 1  # only inside the JSON literal


@pytest.mark.spark
@pytest.mark.slow
def test_cli_spark_reports_the_same_late_count(event_time_inputs):
    args = ["join", event_time_inputs["s"], event_time_inputs["c"], "--within", "10s", "--on", "key",
            "--time-field", "value.at", "--how", "outer"]
    local = run_cli(*args, "--engine", "local")
    sp = run_cli(*args, "--engine", "spark", "--master", "local[1]", timeout=300)
    assert sp.returncode == 0, sp.stderr.decode()[-2000:]
    assert sp.stdout == local.stdout and b"#streamctl" not in sp.stdout
    line = next(ln for ln in local.stderr.splitlines() if b"late event(s)" in ln)
    assert line in sp.stderr.splitlines()
    no_time = next(ln for ln in local.stderr.splitlines() if b"without a usable time" in ln)
    assert no_time in sp.stderr.splitlines()


@pytest.mark.spark
@pytest.mark.slow
def test_cli_engine_spark_and_emit_job(inputs, tmp_path):
    args = ["join", inputs["s"], inputs["c"], "--within", "1s", "--how", "outer"]
    local = run_cli(*args, "--engine", "local")
    sp = run_cli(*args, "--engine", "spark", "--master", "local[1]", timeout=300)
    assert sp.returncode == 0, sp.stderr.decode()[-2000:]
    assert sp.stdout == local.stdout
    job = tmp_path / "job.py"
    p = run_cli(*args, "--emit-job", str(job))
    assert p.returncode == 0 and job.exists() and b"spark-submit" in p.stderr
