"""The Spark engine for replay: parity with the local engine, the generated job, and its safety.

Parity tests exec the generated job's text and call its main() with the shared
`spark` fixture (one SparkSession for the run); slow tests run
`streamctl replay --engine spark` for real (test_emitted_jobs.py runs emitted
jobs with `python job.py` and `spark-submit job.py`).
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import subprocess
import sys

import pytest

from conftest import CLI, cli_env
from streamctl.clients import replay as core
from streamctl.spark import engine, jobgen
from streamctl.storage.log import open_log

from test_replay import make_log, model, run_local

T0 = 1_763_719_200_000


def render(params: dict) -> str:
    return jobgen.render_job("test job", params, "replay_job")


def job_namespace(params: dict) -> dict:
    ns: dict = {"__name__": "streamctl_test_job"}
    exec(compile(render(params), "job.py", "exec"), ns)
    return ns


def spark_lines(spark, path: str, spec: core.ReplaySpec, end_snapshot: bool = True, via: str = "output",
                **extra) -> list[bytes]:
    """The job's result lines. via: "output" (the job's own Output, as when the job runs: sorted
    part files copied by the kernel on a local master), "driver" (a plain callable: streamed
    through the driver with toLocalIterator, as on a cluster without a scratch folder)."""
    import tempfile

    from streamctl.spark.jobentry import Output

    params = {"log": path, "from": spec.start.job_param(False) if spec.start else None,
              "until": spec.until.job_param(False) if spec.until else None,
              "key": spec.key, "compact": spec.compact, **extra}
    if end_snapshot and "end_offsets" not in params:
        lg = open_log(path)
        params["end_offsets"] = {str(p): r.end for p, r in core.plan(lg, spec).items()}
    ns = job_namespace(params)
    if via == "output":
        with tempfile.TemporaryDirectory() as folder:
            target = os.path.join(folder, "out.jsonl")
            sink = Output(spark, target, 1)
            ns["main"](spark, ns["PARAMS"], sink)
            sink.close()
            with open(target, "rb") as f:
                return f.read().splitlines(keepends=True)
    out: list[str] = []
    ns["main"](spark, ns["PARAMS"], out.append)
    return [ln.encode() + b"\n" for ln in out]


SPECS = [
    core.ReplaySpec(),
    core.ReplaySpec(start=core.Bound("offset", 5), until=core.Bound("offset", 20)),
    core.ReplaySpec(start=core.Bound("ts", T0 + 300), until=core.Bound("ts", T0 + 1500)),
    core.ReplaySpec(key="user-1"),
    core.ReplaySpec(key='q"uote'),
    core.ReplaySpec(key="é"),
    core.ReplaySpec(key="line\nbreak", start=core.Bound("offset", 2)),
    core.ReplaySpec(compact=True),
    core.ReplaySpec(compact=True, until=core.Bound("ts", T0 + 1000)),
    core.ReplaySpec(compact=True, start=core.Bound("offset", 8), until=core.Bound("offset", 35)),
    core.ReplaySpec(compact=True, key="back\\slash"),
]


@pytest.fixture(scope="module")
def parity_log(tmp_path_factory) -> tuple[str, list[bytes]]:
    path = str(tmp_path_factory.mktemp("parity") / "log")
    lines = make_log(path, partitions=4, per_partition=60, seed=11, segment_records=9, gap_every=4, t0=T0)
    return path, lines


@pytest.mark.spark
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: repr(s)[11:60])
def test_parity_with_local(spark, parity_log, spec):
    path, lines = parity_log
    local = run_local(path, spec)
    assert local == model(lines, spec)
    assert spark_lines(spark, path, spec) == local


FILTERS = [
    (["user-1", "é"], [], []),
    ([], [], ["nested.k.1 == 2.5", "n >= 20"]),
    ([], ["h=7"], []),
    (["user-1"], [], ["p != 2"]),
    ([], [], ["value == null"]),
    ([], [], ["s ~ null"]),
]


@pytest.mark.spark
@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("options", FILTERS, ids=str)
def test_parity_with_local_filters(spark, parity_log, options, compact):
    """Several --key, --header and --where select the same lines on both engines (with --compact,
    rows of the table), the job building streamctl's own Filter from the options as typed."""
    from streamctl.clients.filters import Filter

    path, _ = parity_log
    flt = Filter.from_options(*options)
    assert flt is not None
    spec = core.ReplaySpec(compact=compact, filter=flt, start=None if compact else core.Bound("offset", 3))
    local = run_local(path, spec)
    # (a table has no tombstones, and its latest records rarely carry the header)
    assert local or (compact and options in (FILTERS[2], FILTERS[4])), "a filter that selects nothing proves little"
    assert spark_lines(spark, path, spec, filter=flt.options()) == local


@pytest.mark.spark
@pytest.mark.parametrize("spec", [SPECS[0], SPECS[2], SPECS[7], SPECS[9]], ids=lambda s: repr(s)[11:60])
def test_parity_through_the_driver(spark, parity_log, spec):
    """The driver stream used on a cluster without a scratch folder (and for a plain callable)."""
    path, _ = parity_log
    assert spark_lines(spark, path, spec, via="driver") == run_local(path, spec)


@pytest.mark.spark
@pytest.mark.parametrize("compact", [False, True])
def test_end_snapshot_caps_sealed_segments_too(spark, parity_log, compact):
    """A snapshot older than a segment roll: whole segments past the end are skipped, the one
    holding the end is capped (the same records as --until at that offset)."""
    path, _ = parity_log
    for end in (0, 9, 23, 41):
        ends = {str(p): end for p in range(4)}
        want = run_local(path, core.ReplaySpec(until=core.Bound("offset", end), compact=compact))
        got = spark_lines(spark, path, core.ReplaySpec(compact=compact), end_offsets=ends)
        assert got == want, end


@pytest.mark.spark
def test_result_split_into_many_part_files_keeps_order(spark, parity_log, tmp_path):
    """Several files per task (spark.sql.files.maxRecordsPerFile) and a given scratch folder,
    which is left without the job's files afterwards."""
    path, _ = parity_log
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    spark.conf.set("spark.sql.files.maxRecordsPerFile", "7")
    try:
        got = spark_lines(spark, path, core.ReplaySpec(), scratch=str(scratch))
    finally:
        spark.conf.unset("spark.sql.files.maxRecordsPerFile")
    assert got == run_local(path, core.ReplaySpec())
    assert list(scratch.iterdir()) == []


@pytest.mark.spark
def test_parity_torn_tail_without_snapshot(spark, tmp_path):
    """An emitted job has no end snapshot: it must hide a torn last line by itself."""
    path = str(tmp_path / "log")
    make_log(path, 2, 15, seed=5, segment_records=4)
    lg = open_log(path)
    with open(lg.segments(1)[-1].path, "ab") as f:
        f.write(b'{"offset":500,"partition":1,"ts":1763719299999,"key":"x","value":{"a":')
    with open(lg.segments(0)[-1].path, "ab") as f:
        f.write(b'{"offset":500,"partition":0,"ts":1763719299999,"key":"x","value":{"a":{}}')  # ends in }
    for spec in (core.ReplaySpec(), core.ReplaySpec(compact=True)):
        assert spark_lines(spark, path, spec, end_snapshot=False) == run_local(path, spec)


@pytest.mark.spark
def test_empty_and_file_uri(spark, tmp_path):
    path = str(tmp_path / "log")
    make_log(path, 2, 0)
    assert spark_lines(spark, path, core.ReplaySpec()) == []
    path2 = str(tmp_path / "log2")
    make_log(path2, 2, 10)
    ns = job_namespace({"log": "file://" + path2, "compact": True})
    out: list[str] = []
    ns["main"](spark, ns["PARAMS"], out.append)
    assert [ln.encode() + b"\n" for ln in out] == run_local(path2, core.ReplaySpec(compact=True))


@pytest.mark.spark
def test_output_param_writes_a_file(spark, tmp_path):
    """PARAMS["output"]: the result lines go to that file (local path or file:// URI) instead of stdout."""
    path = str(tmp_path / "log")
    make_log(path, 2, 10)
    from streamctl.spark.jobentry import Output

    ns = job_namespace({"log": path})
    for target in (str(tmp_path / "a.jsonl"), "file://" + str(tmp_path / "b.jsonl")):
        out = Output(spark, target, 1)
        ns["main"](spark, ns["PARAMS"], out)
        out.close()
        name = target.rsplit("/", 1)[-1]
        assert (tmp_path / name).read_bytes() == b"".join(run_local(path, core.ReplaySpec()))


NASTY = ['"); import os; os.system("touch /tmp/pwned") #', "a'b\"c\n\r\\n\u2028\x00", "'''", '"""', "\\", "é😀"]


@pytest.mark.parametrize("value", NASTY)
def test_user_values_cannot_change_the_code(value):
    benign = render({"log": "/x", "key": "k", "from": None})
    hostile = render({"log": f"/x/{value}", "key": value, "from": {"ts": 1}})
    compile(hostile, "job.py", "exec")
    tree = ast.parse(hostile)
    assigns = [n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "PARAMS"]
    assert len(assigns) == 1
    call = assigns[0].value
    assert isinstance(call, ast.Call) and ast.unparse(call.func) == "json.loads"
    assert len(call.args) == 1 and isinstance(call.args[0], ast.Constant)
    assert json.loads(call.args[0].value) == {"log": f"/x/{value}", "key": value, "from": {"ts": 1}}

    # everything but the PARAMS literal is identical to the job made from benign values
    def code_only(text: str) -> str:
        t = ast.parse(text)
        t.body = [n for n in t.body if not (isinstance(n, ast.Assign) and n.targets[0].id == "PARAMS")]
        return ast.dump(t)

    assert code_only(hostile) == code_only(benign)


def test_emitted_job_compiles_and_reads_well(tmp_path, run):
    path = str(tmp_path / "lo'g\"); import os")
    make_log(path, 2, 5)
    job = tmp_path / "job.py"
    proc = run("replay", path, "--compact", "--key", '"); import os #', "--emit-job", str(job))
    assert proc.returncode == 0, proc.stderr
    text = job.read_text()
    compile(text, str(job), "exec")
    assert text.startswith("#!/usr/bin/env python3\n# streamctl replay")
    assert "spark-submit" in text and "PARAMS = json.loads(" in text
    assert "def main(spark, params, out)" in text
    assert "import os;" not in text.replace("\\", "")[: text.index("PARAMS")]  # header holds no user value
    # the streamctl code it runs is in the file (test_emitted_jobs.py runs such jobs without streamctl)
    assert "MODULES = {" in text and "'streamctl/spark/replay_job.py': r" in text


def test_engine_choice(monkeypatch):
    said: list[str] = []
    assert engine.choose_engine("local", 10**12, None, said.append) == "local" and said == []
    assert engine.choose_engine("auto", 1000, None, said.append) == "local"
    assert said == []  # below the threshold the local choice is silent
    monkeypatch.setattr(engine, "spark_available", lambda: (False, "pyspark is not installed (pip install 'streamctl[spark]')"))
    assert engine.choose_engine("auto", 10**12, 1, said.append) == "local"
    assert "pyspark is not installed" in said[-1]
    from streamctl.errors import StreamctlError

    with pytest.raises(StreamctlError, match=r"pip install 'streamctl\[spark\]'"):
        engine.choose_engine("spark", 1, None, said.append)
    monkeypatch.setattr(engine, "spark_available", lambda: (True, ""))
    assert engine.choose_engine("auto", 2000, 1000, said.append) == "spark"
    assert "engine: spark" in said[-1]
    assert engine.DEFAULT_SPARK_THRESHOLD >= 1 << 30  # small logs never go to Spark by default


def test_pick_engine_uris_blockers_and_emit_job(monkeypatch, tmp_path):
    """The one engine choice of window, join and replay runs."""
    from streamctl.errors import UsageError

    monkeypatch.setattr(engine, "spark_available", lambda: (True, ""))
    said: list[str] = []
    f = tmp_path / "f.jsonl"
    f.write_text('{"a":1}\n')
    uri = "hdfs://nn/events"
    assert engine.pick_engine("auto", [str(f)], None, said.append) == "local" and said == []
    assert engine.pick_engine("spark", [str(f)], None, said.append) == "spark"
    assert engine.pick_engine("auto", [uri], None, said.append) == "spark" and uri in said[-1]
    with pytest.raises(UsageError, match="is a URI: only the Spark engine reads it"):
        engine.pick_engine("local", [uri], None, said.append)
    with pytest.raises(UsageError, match="Spark engine cannot run this: --late-out"):
        engine.pick_engine("auto", [uri], None, said.append, engine.LATE_OUT)  # the option named, not the URI
    for requested in ("spark", "auto"):  # --emit-job is Spark's whatever --engine says
        with pytest.raises(UsageError, match="Spark engine cannot run this: .*not stdin"):
            engine.pick_engine(requested, ["-"], None, said.append, engine.STDIN, emit_job=True)
    assert engine.pick_engine("local", [uri], None, said.append, emit_job=True) == "spark"
    with pytest.raises(UsageError, match="Spark engine cannot run this: --late-out"):
        engine.pick_engine("spark", [str(f)], None, said.append, engine.LATE_OUT)
    said.clear()
    assert engine.pick_engine("auto", [str(f)], 1, said.append, engine.LATE_OUT) == "local"
    assert "--late-out writes a local file" in said[-1]  # above the threshold auto says why it stays local
    with pytest.raises(UsageError, match="--engine must be one of"):
        engine.pick_engine("fast", [str(f)], None, said.append)


def test_spark_engine_without_pyspark_is_a_clear_error(tmp_path, run):
    path = str(tmp_path / "log")
    make_log(path, 1, 3)
    shim = tmp_path / "shim"
    shim.mkdir()
    # a None entry in sys.modules makes importlib.util.find_spec("pyspark") answer "not installed"
    (shim / "sitecustomize.py").write_text("import sys\nsys.modules['pyspark'] = None\n")
    env = dict(os.environ, PYTHONPATH=str(shim))
    proc = run("replay", path, "--engine", "spark", env=env)
    assert proc.returncode == 1, proc.stderr
    assert b"pip install 'streamctl[spark]'" in proc.stderr
    assert b"Traceback" not in proc.stderr


def test_cli_start_up_does_not_import_pyspark():
    code = ("import sys; from streamctl.commands.main import build_app; build_app(); "
            "import streamctl.commands.replay, streamctl.spark.engine, streamctl.spark.jobgen, streamctl.spark.runner; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j', 'tabulate')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.spark
@pytest.mark.slow
def test_cli_engine_spark_end_to_end(tmp_path, run):
    """streamctl runs the job itself: same bytes as local, Spark's noise kept off stderr."""
    path = str(tmp_path / "log")
    make_log(path, 3, 40, seed=4)
    times = tmp_path / "times.jsonl"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = run("replay", path, "--from", "3", "--key", "user-2", "--engine", "spark", "--master", "local[1]",
               env=cli_env(STREAMCTL_JOB_TIMES=str(times), TMPDIR=str(scratch)))
    # the job's folder, the copies of the active segments and the sorted part files are all gone
    assert list(scratch.iterdir()) == []
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout == b"".join(run_local(path, core.ReplaySpec(start=core.Bound("offset", 3), key="user-2")))
    assert b"WARN" not in proc.stderr and b"log4j" not in proc.stderr.lower()
    # the job's own record of its start-up and work seconds (what scripts/bench compares)
    record = json.loads(times.read_text())
    assert set(record) == {"startup_s", "work_s"} and record["startup_s"] > 0 and record["work_s"] > 0


@pytest.mark.spark
@pytest.mark.slow
def test_cli_bad_master_is_one_clear_error(tmp_path, run):
    path = str(tmp_path / "log")
    make_log(path, 1, 3)
    proc = run("replay", path, "--engine", "spark", "--master", "nonsense://nowhere")
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert err.startswith("streamctl: the Spark replay job failed: ") and "nonsense://nowhere" in err.splitlines()[0]
    assert "Traceback" not in err and "full Spark log:" in err


@pytest.mark.spark
def test_parity_on_a_log_compacted_by_streamctl(spark, tmp_path, run):
    import random

    path = str(tmp_path / "log")
    rnd = random.Random(8)
    lines = [json.dumps({"key": f"k{rnd.randint(0, 30)}", "value": None if rnd.random() < 0.1 else {"i": i}})
             for i in range(400)]
    assert run("produce", path, "--envelope", "--partitions", "3", "--segment-bytes", "1KiB",
               input="\n".join(lines) + "\n").returncode == 0
    assert run("compact", path, "--roll").returncode == 0
    for spec in (core.ReplaySpec(), core.ReplaySpec(compact=True),
                 core.ReplaySpec(start=core.Bound("offset", 50), until=core.Bound("offset", 120), key="k3")):
        assert spark_lines(spark, path, spec) == run_local(path, spec)


def test_driver_memory_only_when_results_stream_through_the_driver():
    """The replay job asks for a 4 GiB driver heap when its result comes back through the driver
    (toLocalIterator) or for --compact's aggregate; a plain replay through part files keeps Spark's
    default (a larger heap was slower there)."""
    from streamctl.spark.replay_job import driver_memory as memory
    assert memory({"master": "local[2]"}) is None
    assert memory({"master": None}) is None  # python job.py: local[*]
    assert memory({"master": "local[2]", "scratch": False}) == "4g"
    assert memory({"master": "spark://h:7077"}) == "4g"
    assert memory({"master": "yarn", "scratch": "hdfs:///tmp/x"}) is None
    assert memory({"master": "local[2]", "compact": True}) == "4g"  # the aggregate wants the heap


@pytest.mark.spark
@pytest.mark.slow
def test_cli_engine_spark_into_a_closed_pipe(tmp_path, run):
    """The job's kernel copy (sendfile) into a reader that stops early: no traceback, no hang."""
    path = str(tmp_path / "log")
    make_log(path, 2, 400, seed=5)
    cli = " ".join(shlex.quote(a) for a in [*CLI, "replay", path, "--engine", "spark", "--master", "local[1]"])
    proc = subprocess.run(["bash", "-c", f"set -o pipefail; {cli} | head -c 200 >/dev/null"],
                          capture_output=True, timeout=300)
    assert proc.returncode in (0, 141), proc.stderr.decode()[-2000:]
    assert b"Traceback" not in proc.stderr


@pytest.mark.spark
@pytest.mark.slow
def test_cli_engine_spark_out_appends_like_local(tmp_path, run):
    """--out LOG2 takes the result through streamctl (not the job's own stdout): the same records
    as the local engine's --out."""
    path = str(tmp_path / "log")
    make_log(path, 2, 30, seed=6)
    for which in ("local", "spark"):
        proc = run("replay", path, "--compact", "--out", str(tmp_path / which), "--engine", which,
                   "--master", "local[1]")
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    got = {e: run("consume", str(tmp_path / e), "--value").stdout for e in ("local", "spark")}
    assert got["spark"] == got["local"] and got["local"].count(b"\n") > 5


@pytest.mark.spark
@pytest.mark.slow
def test_cli_engine_spark_interrupted_stops_the_job(tmp_path):
    """SIGINT while the job runs (it writes to streamctl's stdout itself): exit 130, and the job's
    process is gone."""
    import signal
    import time

    path = str(tmp_path / "log")
    make_log(path, 2, 50, seed=7)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp))
    proc = subprocess.Popen([*CLI, "replay", path, "--engine", "spark", "--master", "local[1]"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 60
    while not list(tmp.glob("streamctl-spark-*/job.py")) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()[-2000:]
    assert b"Traceback" not in err
    time.sleep(1)
    left = subprocess.run(["pgrep", "-f", str(tmp)], capture_output=True, text=True).stdout.split()
    assert left == []


@pytest.mark.spark
@pytest.mark.parametrize("spec", [SPECS[0], SPECS[1], SPECS[2], SPECS[7]], ids=lambda s: repr(s)[11:60])
def test_parity_with_lines_in_other_layouts(spark, tmp_path, spec):
    """Lines not in the canonical prefix layout (keys reordered, spaces, a prefix look-alike)
    are parsed as JSON by both engines: same result."""
    path = str(tmp_path / "log")
    make_log(path, partitions=2, per_partition=30, seed=5, segment_records=8, gap_every=4, t0=T0)
    pdir = os.path.join(path, "p1")
    for name in sorted(n for n in os.listdir(pdir) if n.endswith(".jsonl")):
        seg = os.path.join(pdir, name)
        out = []
        for i, line in enumerate(open(seg, "rb").read().splitlines()):
            obj = json.loads(line)
            if i % 3 == 0:
                line = json.dumps(dict(reversed(list(obj.items())))).encode()  # ts before offset, with spaces
            elif i % 3 == 1:
                line = json.dumps(obj).encode()  # the canonical order, with spaces
            out.append(line + b"\n")
        open(seg, "wb").write(b"".join(out))
    local = run_local(path, spec)
    assert len(local) > (4 if spec.compact else 20)
    assert spark_lines(spark, path, spec) == local


@pytest.mark.spark
@pytest.mark.parametrize("compact", [False, True])
def test_copies_of_active_segments_keep_the_snapshot(spark, tmp_path, compact):
    """What streamctl does for a job on this machine: each active segment copied up to the end
    snapshot (PARAMS segment_copies), read in place of the segment. Records appended to the real
    segments after the snapshot stay out, as with the end filter."""
    path = str(tmp_path / "log")
    make_log(path, partitions=3, per_partition=40, seed=3, segment_records=9, gap_every=4, t0=T0)
    lg = open_log(path)
    spec = core.ReplaySpec(compact=compact)
    ranges = core.plan(lg, spec)
    want = run_local(path, spec)
    folder = tmp_path / "copies"
    folder.mkdir()
    copies = core.copy_active_segments(lg, {p: r.end for p, r in ranges.items()}, str(folder))
    assert sorted(copies) == ["0", "1", "2"]
    stats = core.append_lines(lg, iter(want[:25]))  # after the snapshot, into the active segments
    assert stats.records == len(want[:25]) > 0
    ends = {str(p): r.end for p, r in ranges.items()}
    assert spark_lines(spark, path, spec, end_offsets=ends, segment_copies=copies) == want
    # some partitions copied, the others capped by the end filter (copies stop at their total)
    assert spark_lines(spark, path, spec, end_offsets=ends, segment_copies={"1": copies["1"]}) == want
    if compact:
        return
    # the copies are what was read: a copy without its last record shows
    p0 = copies["0"]["path"]
    kept = open(p0, "rb").read().splitlines(keepends=True)[:-1]
    open(p0, "wb").write(b"".join(kept))
    copies["0"]["bytes"] = sum(map(len, kept))
    assert spark_lines(spark, path, spec, end_offsets=ends, segment_copies=copies) != want
