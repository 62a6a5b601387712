"""replay, range form: semantics against a reference model, and the CLI.

Logs are written segment by segment (as streamctl would leave them after
compaction: offset gaps, several segments, tombstones, equal timestamps across
partitions, headers, keys with escapes and null keys) so the model is exact.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CLI, cli_env
from streamctl.clients import replay as core
from streamctl.storage import record
from streamctl.storage.log import open_log, open_or_create
from streamctl.storage.segment import segment_name

KEYS = ["user-1", "user-2", 'q"uote', "back\\slash", "é", "line\nbreak", "\"); import os", None]


def make_log(path: str, partitions: int = 3, per_partition: int = 40, seed: int = 1,
             segment_records: int = 7, gap_every: int = 5, t0: int = 1_763_719_200_000) -> list[bytes]:
    """Write a log directly as segment files; returns every stored line."""
    rng = random.Random(seed)
    lg = open_or_create(path, partitions, None, 0)
    lines: list[bytes] = []
    for p in range(partitions):
        pdir = lg.partition_dir(p)
        off, ts = 0, t0
        seg_lines: list[bytes] = []
        base = 0
        for i in range(per_partition):
            if gap_every and i and i % gap_every == 0:
                off += rng.randint(1, 3)  # a compaction gap
            ts += rng.choice([0, 0, 1, 5, 100])
            key = rng.choice(KEYS)
            r = rng.random()
            if r < 0.15 and key is not None:
                value = b"null"  # tombstone
            elif r < 0.25:
                value = orjson.dumps({"n": i, "s": ",\"value\":null}"})
            else:
                value = orjson.dumps({"n": i, "p": p, "nested": {"k": [1, 2.5, None]}})
            headers = orjson.dumps({"h": str(i)}) if rng.random() < 0.1 else None
            kj = b"null" if key is None else orjson.dumps(key)
            if key == "é" and rng.random() < 0.5:
                kj = b'"\\u00e9"'  # the same key spelled with an escape
            line = record.encode(off, p, ts, kj, value, headers)
            if len(seg_lines) == segment_records:
                Path(pdir, segment_name(base)).write_bytes(b"".join(seg_lines))
                seg_lines, base = [], off
            seg_lines.append(line)
            lines.append(line)
            off += 1
        Path(pdir, segment_name(base)).write_bytes(b"".join(seg_lines))
    return lines


# ---- the reference model -------------------------------------------------------------------------------

def _bound_ok(b: core.Bound | None, off: int, ts: int, lower: bool) -> bool:
    if b is None:
        return True
    v = off if b.kind == "offset" else ts
    return v >= b.value if lower else v < b.value


def model(lines: list[bytes], spec: core.ReplaySpec) -> list[bytes]:
    recs = []
    for ln in lines:
        obj = orjson.loads(ln)
        if not (_bound_ok(spec.start, obj["offset"], obj["ts"], True)
                and _bound_ok(spec.until, obj["offset"], obj["ts"], False)):
            continue
        if spec.key is not None and obj["key"] != spec.key:
            continue
        recs.append(((obj["ts"], obj["partition"], obj["offset"]), obj, ln))
    recs.sort(key=lambda r: r[0])
    if not spec.compact:
        return [ln for _, _, ln in recs]
    table: dict[str, tuple] = {}
    for order, obj, ln in recs:
        if obj["key"] is None:
            continue
        if obj["value"] is None:
            table.pop(obj["key"], None)
        else:
            table[obj["key"]] = (order, ln)
    return [ln for _, ln in sorted(table.values())]


def run_local(path: str, spec: core.ReplaySpec) -> list[bytes]:
    lg = open_log(path)
    data = b"".join(core.replay(lg, spec, core.plan(lg, spec)))
    return data.splitlines(keepends=True)


SPECS = [
    core.ReplaySpec(),
    core.ReplaySpec(start=core.Bound("offset", 5), until=core.Bound("offset", 20)),
    core.ReplaySpec(start=core.Bound("ts", 1_763_719_200_300)),
    core.ReplaySpec(until=core.Bound("ts", 1_763_719_201_000)),
    core.ReplaySpec(key="user-1"),
    core.ReplaySpec(key='q"uote', start=core.Bound("offset", 3)),
    core.ReplaySpec(key="é"),
    core.ReplaySpec(compact=True),
    core.ReplaySpec(compact=True, until=core.Bound("ts", 1_763_719_201_000)),
    core.ReplaySpec(compact=True, start=core.Bound("offset", 10), until=core.Bound("offset", 30)),
    core.ReplaySpec(compact=True, key="é"),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: repr(s)[11:60])
def test_matches_model(tmp_path, spec):
    lines = make_log(str(tmp_path / "log"))
    assert run_local(str(tmp_path / "log"), spec) == model(lines, spec)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), partitions=st.integers(1, 4), n=st.integers(0, 30),
       lo=st.one_of(st.none(), st.integers(0, 40)), hi=st.one_of(st.none(), st.integers(0, 40)),
       by_time=st.booleans(), compact=st.booleans(), key=st.sampled_from([None, "user-1", "é", "line\nbreak"]))
def test_property_against_model(tmp_path_factory, seed, partitions, n, lo, hi, by_time, compact, key):
    path = str(tmp_path_factory.mktemp("prop") / "log")
    lines = make_log(path, partitions, n, seed, segment_records=4, gap_every=3)
    t0 = 1_763_719_200_000
    kind = "ts" if by_time else "offset"
    scale = 20 if by_time else 1
    spec = core.ReplaySpec(start=None if lo is None else core.Bound(kind, (t0 if by_time else 0) + lo * scale),
                           until=None if hi is None else core.Bound(kind, (t0 if by_time else 0) + hi * scale),
                           key=key, compact=compact)
    assert run_local(path, spec) == model(lines, spec)


def test_parse_bound():
    assert core.parse_bound("42", "--from") == core.Bound("offset", 42)
    assert core.parse_bound("@1763719200123", "--from") == core.Bound("ts", 1763719200123)
    assert core.parse_bound("2026-11-21T10:00:00Z", "--from").kind == "ts"
    b = core.parse_bound("-1h", "--from", now=10_000_000)
    assert (b.kind, b.value, b.ago_ms) == ("ts", 10_000_000 - 3_600_000, 3_600_000)
    assert b.job_param(relative=True) == {"ago_ms": 3_600_000}
    assert b.job_param(relative=False) == {"ts": 10_000_000 - 3_600_000}
    from streamctl.errors import UsageError

    with pytest.raises(UsageError):
        core.parse_bound("-5", "--from")
    with pytest.raises(UsageError):
        core.parse_bound("yesterday", "--until")


def test_torn_tail_and_end_snapshot(tmp_path):
    path = str(tmp_path / "log")
    lines = make_log(path, 2, 10)
    lg = open_log(path)
    spec = core.ReplaySpec()
    ranges = core.plan(lg, spec)
    active = lg.segments(0)[-1].path
    with open(active, "ab") as f:  # appended after the plan (not in the snapshot), then a torn line
        f.write(record.encode(999, 0, 1_763_719_300_000, b'"late"', b"1"))
        f.write(b'{"offset":1000,"partition":0,"ts":1')
    got = b"".join(core.replay(lg, spec, ranges)).splitlines(keepends=True)
    assert got == model(lines, spec)


# ---- the CLI ---------------------------------------------------------------------------------------------

def test_cli_stdout_byte_identical(tmp_path, run):
    path = str(tmp_path / "log")
    lines = make_log(path)
    proc = run("replay", path, "--from", "4", "--until", "@1763719201000", "--engine", "local")
    assert proc.returncode == 0, proc.stderr
    spec = core.ReplaySpec(core.Bound("offset", 4), core.Bound("ts", 1763719201000))
    assert proc.stdout == b"".join(model(lines, spec))
    assert proc.stderr == b""  # --engine local says nothing


def test_cli_auto_is_quiet_below_the_threshold(tmp_path, run):
    path = str(tmp_path / "log")
    make_log(path, 1, 5)
    proc = run("replay", path, "--compact")
    assert proc.returncode == 0 and proc.stdout
    assert proc.stderr == b""  # the local choice is silent
    proc = run("replay", path, "--from", "2", "--spark-threshold", "1GiB")
    assert proc.returncode == 0 and proc.stderr == b""


def test_cli_compact_key_with_quotes(tmp_path, run):
    path = str(tmp_path / "log")
    lines = make_log(path)
    proc = run("replay", path, "--compact", "--key", 'q"uote', "--engine", "local")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"".join(model(lines, core.ReplaySpec(key='q"uote', compact=True)))


def test_cli_out_appends_to_another_log(tmp_path, run):
    path, dest = str(tmp_path / "log"), str(tmp_path / "copy")
    lines = make_log(path, 3, 20)
    proc = run("replay", path, "--compact", "--out", dest, "--engine", "local")
    assert proc.returncode == 0, proc.stderr
    assert b"appended" in proc.stderr
    expected = model(lines, core.ReplaySpec(compact=True))
    copied = run("consume", dest).stdout.splitlines()
    assert len(copied) == len(expected)

    def kv(ln):
        o = orjson.loads(ln)
        return o["key"], o["value"], o.get("headers")

    assert sorted(map(kv, copied), key=repr) == sorted(map(kv, expected), key=repr)
    assert open_log(dest).partitions == 3
    # keyed records are where Kafka's partitioner puts them in the new log, with fresh offsets
    from streamctl.storage.partitioner import partition_for_key

    for ln in copied:
        o = orjson.loads(ln)
        assert o["partition"] == partition_for_key(o["key"], 3)
    # appending again gives new offsets, not duplicates of the old ones
    assert run("replay", path, "--compact", "--out", dest, "--engine", "local").returncode == 0
    assert len(run("consume", dest).stdout.splitlines()) == 2 * len(expected)


def test_cli_out_same_log_refused(tmp_path, run):
    path = str(tmp_path / "log")
    make_log(path, 1, 3)
    proc = run("replay", path, "--out", path)
    assert proc.returncode == 2 and b"another log" in proc.stderr


def test_cli_usage_errors(tmp_path, run):
    path = str(tmp_path / "log")
    make_log(path, 1, 3)
    cases = [
        (["--from", "-5"], b"neither an offset nor a time"),
        (["--until", "soon"], b"invalid time"),
        (["--engine", "turbo"], b"--engine"),
        (["--to-earliest"], b"needs --group"),
        (["--execute"], b"needs --group"),
        (["--group", "g", "--from", "1", "--to-earliest"], b"cannot be combined"),
        (["--group", "g"], b"exactly one"),
        (["--group", "g", "--to-earliest", "--to-latest"], b"exactly one"),
        (["--emit-job", str(tmp_path / "j.py"), "--out", str(tmp_path / "x")], b"pipe the job"),
    ]
    for args, msg in cases:
        proc = run("replay", path, *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert msg in proc.stderr, (args, proc.stderr)
        assert b"Traceback" not in proc.stderr


def test_cli_missing_log(tmp_path, run):
    proc = run("replay", str(tmp_path / "nope"))
    assert proc.returncode == 2 and b"no such log" in proc.stderr


def test_cli_plain_file(tmp_path, run):
    f = tmp_path / "v.jsonl"
    f.write_text('{"a":1}\n2\n"x"\n[3]\n')
    proc = run("replay", str(f), "--from", "1", "--until", "3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b'{"offset":1,"partition":0,"key":null,"value":2}\n{"offset":2,"partition":0,"key":null,"value":"x"}\n'
    assert run("replay", str(f), "--compact").returncode == 2


def test_cli_plain_file_bad_line_after_good_ones(tmp_path, run):
    """The records before a bad line are written (to a pipe: buffered output is flushed), then the
    error names file:line, exit 65."""
    f = tmp_path / "v.jsonl"
    f.write_text('{"a":1}\n2\nnot json\n{"a":4}\n')
    proc = run("replay", str(f))
    assert proc.returncode == 65
    assert proc.stdout == b'{"offset":0,"partition":0,"key":null,"value":{"a":1}}\n{"offset":1,"partition":0,"key":null,"value":2}\n'
    assert f"{f}:3:".encode() in proc.stderr and b"Traceback" not in proc.stderr


@pytest.mark.parametrize("args, spec", [
    ((), core.ReplaySpec()),
    (("--from", "7", "--until", "45"), core.ReplaySpec(core.Bound("offset", 7), core.Bound("offset", 45))),
    (("--from", "@1763719200300", "--until", "@1763719201000"),
     core.ReplaySpec(core.Bound("ts", 1763719200300), core.Bound("ts", 1763719201000))),
    (("--from", "999999"), core.ReplaySpec(core.Bound("offset", 999999))),
])
def test_cli_one_partition_copied_by_the_kernel(tmp_path, run, args, spec):
    """One partition, no --key/--compact, to stdout: the zero-copy path (sendfile), across
    segments with compaction gaps; the same bytes as the model, also into a `>>` file."""
    import subprocess

    path = str(tmp_path / "log")
    lines = make_log(path, partitions=1, per_partition=80, segment_records=9, gap_every=4)
    proc = run("replay", path, *args, "--engine", "local")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"".join(model(lines, spec))
    target = tmp_path / "appended.jsonl"
    target.write_bytes(b"x\n")
    sh = f"{' '.join(CLI)} replay {path} {' '.join(args)} --engine local >> {target}"
    subprocess.run(["bash", "-c", sh], check=True, env=cli_env(), timeout=60)
    assert target.read_bytes() == b"x\n" + proc.stdout


def test_cli_broken_pipe(tmp_path):
    import subprocess
    import sys

    path = str(tmp_path / "log")
    make_log(path, 2, 2000, segment_records=500)
    cmd = f"{sys.executable} -m streamctl replay {path} --engine local | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}"
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, timeout=30)
    assert proc.stdout.strip() in (b"0", b"141")
    assert b"Traceback" not in proc.stderr


def test_emit_job_relative_times_stay_relative(tmp_path, run):
    path = str(tmp_path / "log")
    make_log(path, 1, 3)
    job = tmp_path / "job.py"
    proc = run("replay", path, "--from", "-1d", "--until", "@1763719201000", "--compact", "--emit-job", str(job))
    assert proc.returncode == 0, proc.stderr
    text = job.read_text()
    assert os.access(job, os.X_OK)
    ns: dict = {}
    start = text.index("PARAMS = ")
    exec(compile(text[start:text.index("\n)\n", start) + 3], "job", "exec"), {"json": __import__("json")}, ns)
    params = ns["PARAMS"]
    assert params["from"] == {"ago_ms": 86_400_000}
    assert params["until"] == {"ts": 1763719201000}
    assert params["log"] == os.path.abspath(path) and params["compact"] is True and params["master"] is None


def test_snapshot_unchanged_by_streamctl_compact(tmp_path, run):
    """`compact` keeps the latest record of every key (and tombstones within retention) at the same
    offsets, so the snapshot before and after it is the same lines; a plain replay has gaps after."""
    path = str(tmp_path / "log")
    rnd = random.Random(3)
    lines = []
    for i in range(600):
        key = f"k{rnd.randint(0, 40)}"
        value = "null" if rnd.random() < 0.1 else orjson.dumps({"i": i, "pad": "x" * 40}).decode()
        lines.append(f'{{"key":"{key}","value":{value}}}')
    lines.append('{"key":null,"value":"no key"}')
    proc = run("produce", path, "--envelope", "--partitions", "3", "--segment-bytes", "2KiB",
               input="\n".join(lines) + "\n")
    assert proc.returncode == 0, proc.stderr
    before = run("replay", path, "--compact", "--engine", "local").stdout
    full_before = run("replay", path, "--engine", "local").stdout
    proc = run("compact", path, "--roll")
    assert proc.returncode == 0, proc.stderr
    after = run("replay", path, "--compact", "--engine", "local").stdout
    full_after = run("replay", path, "--engine", "local").stdout
    assert after == before and before
    assert len(full_after.splitlines()) < len(full_before.splitlines())  # compaction left gaps
    stored = [ln + b"\n" for ln in full_after.splitlines()]
    assert after.splitlines(keepends=True) == model(stored, core.ReplaySpec(compact=True))
    # ranges over a compacted log: offsets inside gaps start at the next existing record
    got = run("replay", path, "--from", "100", "--until", "400", "--engine", "local").stdout
    assert got.splitlines(keepends=True) == model(stored, core.ReplaySpec(core.Bound("offset", 100),
                                                                          core.Bound("offset", 400)))


# ---- copies of the active segments for a Spark job (copy_active_segments) ---------------------------------

def test_copy_active_segments_holds_exactly_the_records_below_the_end(tmp_path):
    path = str(tmp_path / "log")
    make_log(path, partitions=3, per_partition=30, seed=5, segment_records=7, gap_every=4)
    lg = open_log(path)
    folder = tmp_path / "copies"
    folder.mkdir()
    active = {p: lg.segments(p)[-1] for p in range(3)}
    last = {p: record.offset_of(Path(active[p].path).read_bytes().splitlines()[-1]) for p in range(3)}
    ends = {0: last[0] + 1,  # the whole active segment
            1: active[1].base + 2,  # inside it: a record appended later must not be in the copy
            2: active[2].base}  # the end at its base: nothing of it is in the snapshot
    copies = core.copy_active_segments(lg, ends, str(folder))
    assert set(copies) == {"0", "1"}
    for p in (0, 1):
        stored = Path(active[p].path).read_bytes().splitlines(keepends=True)
        want = b"".join(ln for ln in stored if record.offset_of(ln) < ends[p])
        assert Path(copies[str(p)]["path"]).read_bytes() == want
        assert copies[str(p)]["base"] == active[p].base and copies[str(p)]["bytes"] == len(want)
    # an end in a sealed segment (the log rolled since the snapshot) or a segment over the limit: no copy
    sealed_end = lg.segments(0)[-2].base + 1
    assert core.copy_active_segments(lg, {0: sealed_end}, str(tmp_path)) == {}
    assert core.copy_active_segments(lg, {0: last[0] + 1}, str(tmp_path), limit=10) == {}
    # the total: partitions copied in order until the next copy would pass it
    first = copies["0"]["bytes"]
    capped = tmp_path / "capped"
    capped.mkdir()
    assert set(core.copy_active_segments(lg, ends, str(capped), total=first)) == {"0"}
