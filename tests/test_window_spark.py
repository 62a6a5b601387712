"""The Spark engine for window: the same rows in the same order, and the same late counts, as the local engine.

Parity tests exec the generated job's text and call its main() with the shared
`spark` fixture; one slow test runs `streamctl window --engine spark` for real.
"""

from __future__ import annotations

import ast
import json
import math
import random

import orjson
import pytest

from streamctl.windowing import WindowConfig, WindowRun, records_of, row_json, spark_job
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
    is_log, recs = records_of(path)
    run = WindowRun(cfg, is_log)
    rows: list = []
    run.feed(recs, rows.extend)
    run.finish(rows.extend)
    st = run.stats
    return [row_json(r) for r in rows], {"events": st.events, "late": st.late, "bad_time": st.bad_time,
                                         "non_numeric": run.plan.non_numeric}


def on_spark(spark, path: str, cfg: WindowConfig) -> tuple[list[bytes], dict]:
    ns: dict = {"__name__": "streamctl_window_test_job"}
    exec(compile(spark_job(path, cfg, None, stats_line=True), "job.py", "exec"), ns)
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


def test_job_is_readable_and_params_are_data(tmp_path):
    f = tmp_path / "e.jsonl"
    f.write_text('{"ts": 1763719200000}\n')
    evil = "x'); import os; os.system('echo pwned'); ('"
    cfg = WindowConfig(kind="tumbling", size=1000, by=[evil], aggs=["n=count", f"s=sum:{evil}"])
    text = spark_job(str(f), cfg, "local[2]")
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
