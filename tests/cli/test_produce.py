"""produce through the CLI: every input mode, errors, exit codes and the summary."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import CLI, cli_env, run_cli


def read_log(log: str) -> list[dict]:
    out = run_cli("consume", log, check=True).stdout
    return [json.loads(x) for x in out.splitlines()]


def test_values_round_trip_and_layout(logdir):
    p = run_cli("produce", logdir, input='{"a":1}\n"two"\n3\n\n[4]\n', check=True)
    assert p.stdout == b""
    assert b"produced 4 record(s)" in p.stderr and b"p0 0..3" in p.stderr
    meta = json.load(open(os.path.join(logdir, "streamctl.json")))
    assert meta["format"] == 1 and meta["partitions"] == 1 and meta["segment_bytes"] >= 1 << 20
    assert sorted(os.listdir(os.path.join(logdir, "p0"))) == [".segments", "00000000000000000000.jsonl"]
    recs = read_log(logdir)
    assert [r["value"] for r in recs] == [{"a": 1}, "two", 3, [4]]
    assert [r["offset"] for r in recs] == [0, 1, 2, 3]
    raw = open(os.path.join(logdir, "p0", "00000000000000000000.jsonl"), "rb").read().splitlines()
    assert list(json.loads(raw[0])) == ["offset", "partition", "ts", "key", "value"]
    ts = [r["ts"] for r in recs]
    assert ts == sorted(ts)


def test_value_bytes_kept_as_written(logdir):
    run_cli("produce", logdir, input='{"b": 1,  "a": 2.50}\n', check=True)
    line = run_cli("consume", logdir, check=True).stdout
    assert line.endswith(b'"value":{"b": 1,  "a": 2.50}}\n')


def test_key_field_partitions_like_kafka(logdir):
    from streamctl.storage.partitioner import partition_for_key

    lines = "".join(json.dumps({"user": {"id": f"u{i}"}, "n": i}) + "\n" for i in range(40))
    run_cli("produce", logdir, "--partitions", "4", "--key-field", "user.id", input=lines, check=True)
    for r in read_log(logdir):
        assert r["key"] == r["value"]["user"]["id"]
        assert r["partition"] == partition_for_key(r["key"], 4)
    # value.-prefixed path works too; numeric keys become their JSON text
    run_cli("produce", logdir + "2", "--key-field", "value.n", input='{"n": 7}\n', check=True)
    assert read_log(logdir + "2")[0]["key"] == "7"


def test_constant_key_and_forced_partition(logdir):
    run_cli("produce", logdir, "--partitions", "3", "--partition", "2", "--key", "k", input="1\n2\n", check=True)
    recs = read_log(logdir)
    assert {(r["partition"], r["key"]) for r in recs} == {(2, "k")}
    p = run_cli("produce", logdir, "--partition", "9", input="1\n")
    assert p.returncode == 2 and b"partition 9 does not exist" in p.stderr


def test_envelope_input_from_consume_output(logdir):
    src = logdir + "-src"
    run_cli("produce", src, "--key-field", "id", input='{"id":"a","v":1}\n{"id":"b","v":2}\n', check=True)
    consumed = run_cli("consume", src, check=True).stdout
    run_cli("produce", logdir, "--envelope", input=consumed, check=True)
    a, b = read_log(src), read_log(logdir)
    assert [(r["key"], r["value"]) for r in a] == [(r["key"], r["value"]) for r in b]
    run_cli("produce", logdir, "--envelope", input='{"key":"h","value":null,"headers":{"x":"y"}}\n', check=True)
    last = read_log(logdir)[-1]
    assert last["value"] is None and last["headers"] == {"x": "y"}
    bad = run_cli("produce", logdir, "--envelope", input='{"key":"h"}\n')
    assert bad.returncode == 65 and b"<stdin>:1" in bad.stderr and b"value" in bad.stderr


def test_raw_and_key_delimiter(logdir):
    run_cli("produce", logdir, "--raw", "--key-delimiter", ":", input="u1:hello world\nno-delim\r\n", check=True)
    recs = read_log(logdir)
    assert [(r["key"], r["value"]) for r in recs] == [("u1", "hello world"), (None, "no-delim")]
    assert run_cli("produce", logdir, "--key-delimiter", ":", input="a:b\n").returncode == 2
    p = run_cli("produce", logdir, "--raw", "--key-delimiter", ":", "--key", "q", input="a:b\n")
    assert p.returncode == 2 and b"--key and --key-delimiter cannot be combined" in p.stderr


@pytest.mark.parametrize("fsync", ["batch", "always"])  # the raw lane, and the per-line decoder
def test_key_delimiter_takes_kcat_escapes(tmp_path, fsync):
    cases = [("\\t", b"a\tb\n"), ("\\x1f", b"a\x1fb\n"), ("\\\\", b"a\\b\n"), ("\\xc3\\xa9", b"a\xc3\xa9b\n"),
             ("\\q", b"a\\qb\n"), ("::", b"a::b\n")]
    for i, (sep, line) in enumerate(cases):
        p = run_cli("produce", str(tmp_path / f"L{i}"), "--raw", "--key-delimiter", sep,
                    "--fsync", fsync, "--echo", input=line, check=True)
        assert [(r["key"], r["value"]) for r in map(json.loads, p.stdout.splitlines())] == [("a", "b")], sep
    p = run_cli("produce", str(tmp_path / "N"), "--raw", "--key-delimiter", "\\n", input="a\n")
    assert p.returncode == 2 and b"--key-delimiter cannot hold a newline" in p.stderr
    assert not os.path.exists(tmp_path / "N")
    p = run_cli("produce", str(tmp_path / "N"), "--raw", "--key-delimiter", "\\xg", input="a\n")
    assert p.returncode == 2 and b"\\x needs a byte in hex" in p.stderr


@pytest.mark.parametrize("mode,line,value", [((), b'{"a":1}', {"a": 1}), (("--fsync", "always"), b'{"a":1}', {"a": 1}),
                                              (("--raw",), b"text", "text"), (("--envelope",), b'{"value":1}', 1)])
def test_a_bom_before_the_first_line_is_skipped(tmp_path, mode, line, value):
    f = tmp_path / "in.jsonl"
    f.write_bytes(b"\xef\xbb\xbf" + line + b"\n" + line + b"\n")
    for i, (args, data) in enumerate([((), f.read_bytes()), ((str(f),), b"")]):  # stdin, then a file
        p = run_cli("produce", str(tmp_path / f"L{i}"), *args, *mode, "--echo", input=data)
        assert p.returncode == 0, p.stderr
        assert [r["value"] for r in map(json.loads, p.stdout.splitlines())] == [value, value]
    if "--raw" not in mode:  # on any other line it is data: JSON that does not start with a BOM
        p = run_cli("produce", str(tmp_path / "M"), *mode, input=line + b"\n\xef\xbb\xbf" + line + b"\n")
        assert p.returncode == 65 and b"<stdin>:2" in p.stderr


def test_empty_names_and_unreadable_inputs_are_named(tmp_path):
    log = str(tmp_path / "L")
    p = run_cli("produce", "", input="1\n", cwd=str(tmp_path))
    assert p.returncode == 2 and b"LOG is an empty name" in p.stderr
    p = run_cli("produce", log, "", input="1\n")
    assert p.returncode == 2 and p.stderr.startswith(b"streamctl: '': cannot open: ")
    p = run_cli("produce", log, "--follow", "", "--idle-timeout", "100ms")
    assert p.returncode == 2 and b"a FILE is an empty name" in p.stderr
    closed = subprocess.run([*CLI, "produce", log], capture_output=True, env=cli_env(), preexec_fn=lambda: os.close(0))
    assert closed.returncode == 2 and b"<stdin>: cannot read: it is closed" in closed.stderr
    assert not os.path.exists(log)  # usage errors create nothing
    p = run_cli("produce", log, "/proc/self/mem")  # opens, but every read fails (EIO)
    assert p.returncode == 1 and b"/proc/self/mem: cannot read: Input/output error" in p.stderr, p.stderr


def test_several_files_and_stdin_dash(logdir, tmp_path):
    f1, f2 = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    f1.write_text("1\n2\n")
    f2.write_text("3")  # no trailing newline: still a record
    run_cli("produce", logdir, str(f1), "-", str(f2), input="99\n", check=True)
    assert [r["value"] for r in read_log(logdir)] == [1, 2, 99, 3]
    missing = run_cli("produce", logdir, str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2 and b"nope.jsonl: cannot open" in missing.stderr


def test_bad_input_stops_with_65_and_keeps_earlier_records(logdir, tmp_path):
    f = tmp_path / "in.jsonl"
    f.write_text('1\n2\n{"broken"\n4\n')
    p = run_cli("produce", logdir, str(f))
    assert p.returncode == 65
    err = p.stderr.decode()
    assert err.startswith("streamctl: ") and "in.jsonl:3" in err and "invalid JSON" in err
    assert "2 record(s) before it were appended" in err
    assert "Traceback" not in err
    assert [r["value"] for r in read_log(logdir)] == [1, 2]
    assert run_cli("check", logdir).returncode == 0


def test_on_error_skip_and_dead_letter(logdir, tmp_path):
    data = b'1\nnot json\n3\n\xff\xfe\n5\n'
    p = run_cli("produce", logdir, "--on-error", "skip", input=data)
    assert p.returncode == 0 and b"2 bad line(s) rejected" in p.stderr
    assert [r["value"] for r in read_log(logdir)] == [1, 3, 5]
    dl = tmp_path / "dead.jsonl"
    p = run_cli("produce", logdir, "--on-error", f"dead-letter={dl}", input=data)
    assert p.returncode == 0
    dead = [json.loads(x) for x in dl.read_text().splitlines()]
    assert [(d["input"], d["line"]) for d in dead] == [("<stdin>", 2), ("<stdin>", 4)]
    assert dead[0]["raw"] == "not json" and "invalid JSON" in dead[0]["reason"]
    assert "raw_base64" in dead[1]
    assert run_cli("produce", logdir, "--on-error", "explode", input="1\n").returncode == 2


def test_hostile_input_rejected_without_traceback(logdir):
    cases = {
        "deep nesting": b"[" * 5000 + b"]" * 5000,
        "number beyond a double": b'{"n": 1' + b"0" * 400 + b'}',
        "NaN": b'{"n": NaN}',
        "invalid UTF-8": b'"\xff"',
        "lone surrogate": b'"\\ud800"',
        "over the limit": b'"' + b"x" * 2000 + b'"',
    }
    for name, line in cases.items():
        p = run_cli("produce", logdir, "--max-record-bytes", "1KiB", input=line + b"\n")
        assert p.returncode == 65, name
        assert b"Traceback" not in p.stderr and p.stderr.startswith(b"streamctl: <stdin>:1: "), (name, p.stderr)
    # U+2028 inside a string is not a line break; 64-bit integers are fine
    ok = run_cli("produce", logdir, input='"a\u2028b"\n{"n": 9223372036854775807}\n'.encode())
    assert ok.returncode == 0, ok.stderr
    assert [r["value"] for r in read_log(logdir)] == ["a\u2028b", {"n": 9223372036854775807}]


def test_over_limit_line_is_skipped_whole(logdir):
    data = b"1\n" + b'"' + b"y" * 5000 + b'"\n' + b"3\n"
    p = run_cli("produce", logdir, "--max-record-bytes", "1KiB", "--on-error", "skip", input=data)
    assert p.returncode == 0
    assert [r["value"] for r in read_log(logdir)] == [1, 3]


def test_echo_and_fsync_modes(logdir):
    for mode in ("always", "batch", "never"):
        p = run_cli("produce", logdir, "--fsync", mode, "--echo", input="1\n2\n", check=True)
        echoed = [json.loads(x) for x in p.stdout.splitlines()]
        assert [r["value"] for r in echoed] == [1, 2]
    assert [r["offset"] for r in read_log(logdir)] == list(range(6))
    assert run_cli("produce", logdir, "--fsync", "sometimes", input="1\n").returncode == 2


def test_segments_roll_at_segment_bytes(logdir):
    lines = "".join(json.dumps({"i": i, "pad": "x" * 100}) + "\n" for i in range(100))
    run_cli("produce", logdir, "--segment-bytes", "2KiB", input=lines, check=True)
    names = sorted(n for n in os.listdir(os.path.join(logdir, "p0")) if n.endswith(".jsonl"))
    assert len(names) > 3
    bases = [int(n[:20]) for n in names]
    recs = read_log(logdir)
    assert [r["value"]["i"] for r in recs] == list(range(100))
    # every segment is named by its first offset, and all but the last reached the size
    for n, b in zip(names, bases, strict=True):
        first = json.loads(open(os.path.join(logdir, "p0", n), "rb").readline())
        assert first["offset"] == b
    for n in names[:-1]:
        assert os.path.getsize(os.path.join(logdir, "p0", n)) >= 2048
    # a later produce continues in the active segment with contiguous offsets
    run_cli("produce", logdir, input="1\n", check=True)
    assert read_log(logdir)[-1]["offset"] == 100


def test_partitions_only_when_creating(logdir):
    run_cli("produce", logdir, "--partitions", "2", input="1\n", check=True)
    p = run_cli("produce", logdir, "--partitions", "3", input="1\n")
    assert p.returncode == 2 and b"already has 2 partitions" in p.stderr


def test_not_a_log_folder(tmp_path):
    d = tmp_path / "other"
    d.mkdir()
    (d / "file.txt").write_text("hi")
    p = run_cli("produce", str(d), input="1\n")
    assert p.returncode == 1 and b"not a streamctl log" in p.stderr


# --- the fast lanes against the per-line decoder ----------------------------------------
# produce validates whole batches in C-level loops (producer.validate_values, KeyedLane) and
# falls back to the per-line decoder for a batch it cannot take. Both must store the same
# bytes, reject the same lines, and choose the same partitions; these run both in-process
# with a fixed clock and compare the segment files byte for byte.

import json as _json  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _produce_bytes(tmp: str, name: str, data: bytes, *, key_field: str | None, partitions: int,
                   fast: bool, const_key: str | None = None, batch_bytes: int = 300,
                   envelope: bool = False, lane_calls: list | None = None) -> tuple:
    from streamctl.clients.inputlines import Batch
    from streamctl.clients.lanes import EnvelopeLane
    from streamctl.clients.producer import Input, ProduceOptions, produce, validate_values
    from streamctl.errors import DataError
    from streamctl.formats import inputs
    from streamctl.storage import fieldpaths
    from streamctl.storage import log as logmod
    from streamctl.storage.appender import Appender

    src = os.path.join(tmp, name + ".in")
    with open(src, "wb") as f:
        f.write(data)
    lg = logmod.open_or_create(os.path.join(tmp, name), partitions, None, 1)
    decoder = inputs.envelope_decoder(const_key) if envelope else inputs.value_decoder(key_field, const_key)
    opts = ProduceOptions(decoder=decoder, on_error="skip", batch_bytes=batch_bytes)
    if fast and envelope:
        lane = EnvelopeLane(const_key)

        def counted(batch: Batch, exact) -> tuple | None:
            got = lane(batch, exact)
            if lane_calls is not None:
                lane_calls.append(got is not None)
            return got

        opts.envelope_batch = counted
    elif fast:
        if key_field is None:
            opts.validate_batch, opts.const_key = validate_values, const_key
        else:
            opts.key_path = fieldpaths.value_path(key_field)
    fd = os.open(src, os.O_RDONLY)
    try:
        with Appender(lg, fsync="never", clock=lambda: 1763683200000) as app:
            stats = produce(lg, [Input(name, fd)], opts, app)
    except DataError as e:  # pragma: no cover - on_error=skip never raises
        return ("error", str(e))
    finally:
        os.close(fd)
    out = {}
    for p in range(partitions):
        pdir = lg.partition_dir(p)
        out[p] = b"".join(open(os.path.join(pdir, s), "rb").read() for s in sorted(os.listdir(pdir)))
    return stats.records, stats.rejected, out


_scalar_keys = st.one_of(
    st.text(max_size=6), st.sampled_from(["u1", "u2", "é", "😀", 'q"t', "b\\s", "\u2028", "1", "true"]),
    st.integers(min_value=-(2**65), max_value=2**65), st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(), st.none(),
)
_keys = st.one_of(_scalar_keys, st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))


@st.composite
def _value_lines(draw) -> bytes:
    kind = draw(st.sampled_from(["flat", "flat", "flat", "nested", "missing", "scalar", "list", "bad", "blank"]))
    if kind == "bad":
        return draw(st.sampled_from([b"{", b'{"user":1', b"nope", b"\x0c{}", b'"\xff"', b"[1,]"]))
    if kind == "blank":
        return draw(st.sampled_from([b"", b"  ", b"\t"]))
    key = draw(_keys)
    if kind == "flat":
        value = {"user": key, "n": draw(st.integers(min_value=-(2**70), max_value=2**70))}
    elif kind == "nested":
        value = {"u": {"id": key}, "l": [key]}
    elif kind == "missing":
        value = {"other": key}
    elif kind == "scalar":
        value = key
    else:
        value = [key, {"user": key}]
    text = _json.dumps(value, ensure_ascii=draw(st.booleans()),
                       separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])))
    pad = draw(st.sampled_from(["", "", "", " ", "\t", " \r"]))
    return (draw(st.sampled_from(["", "", " ", "\t"])) + text + pad).encode()


_settings = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_settings
@given(lines=st.lists(_value_lines(), max_size=25), key_field=st.sampled_from(["user", "u.id", "value.user", "l.0", "value"]),
       partitions=st.sampled_from([1, 3]), crlf=st.booleans())
def test_keyed_lane_writes_what_the_decoder_writes(tmp_path_factory, lines, key_field, partitions, crlf):
    tmp = str(tmp_path_factory.mktemp("lane"))
    data = (b"\r\n" if crlf else b"\n").join(lines) + b"\n"
    fast = _produce_bytes(tmp, "fast", data, key_field=key_field, partitions=partitions, fast=True)
    slow = _produce_bytes(tmp, "slow", data, key_field=key_field, partitions=partitions, fast=False)
    assert fast == slow


@_settings
@given(lines=st.lists(_value_lines(), max_size=25), partitions=st.sampled_from([1, 3]),
       const_key=st.sampled_from([None, "k", "é"]))
def test_plain_lane_writes_what_the_decoder_writes(tmp_path_factory, lines, partitions, const_key):
    tmp = str(tmp_path_factory.mktemp("plain"))
    data = b"\n".join(lines) + b"\n"
    fast = _produce_bytes(tmp, "fast", data, key_field=None, partitions=partitions, fast=True, const_key=const_key)
    slow = _produce_bytes(tmp, "slow", data, key_field=None, partitions=partitions, fast=False, const_key=const_key)
    assert fast == slow


def test_keyed_lane_on_many_repeating_keys(tmp_path):
    """Large batches through the lane itself (cache hits, new keys, several partitions)."""
    rows = [{"user": f"user-{i % 37}", "i": i} for i in range(3000)]
    rows[1500]["user"] = 15  # a number among strings: that batch takes the coercing branch
    rows[2100]["user"] = None  # a null key: round-robin among keyed records
    data = b"".join(_json.dumps(r).encode() + b"\n" for r in rows)
    for parts in (1, 4):
        fast = _produce_bytes(str(tmp_path), f"f{parts}", data, key_field="user", partitions=parts, fast=True,
                              batch_bytes=16 << 10)
        slow = _produce_bytes(str(tmp_path), f"s{parts}", data, key_field="user", partitions=parts, fast=False,
                              batch_bytes=16 << 10)
        assert fast == slow and fast[0] == 3000


def test_partitioner_many_matches_one_by_one():
    from streamctl.storage import partitioner

    keys = [f"k{i % 50}" for i in range(500)] + [None, "k1", None] + [f"n{i}" for i in range(300)]
    a = partitioner.Partitioner(5, start=3)
    b = partitioner.Partitioner(5, start=3)
    got = a.many(keys[:200]) + a.many(keys[200:])
    assert got == [b(k) for k in keys]


def test_append_keyed_writes_what_append_writes(tmp_path):
    from streamctl.storage import log as logmod
    from streamctl.storage.appender import Appender

    keys = [b'"a"', b"null", b'"\\u00e9"'] * 40
    values = [b'{"i":%d}' % i for i in range(120)]
    out = []
    for name, keyed in (("a", True), ("b", False)):
        lg = logmod.open_or_create(str(tmp_path / name), 1, 1024, 1)
        with Appender(lg, fsync="never", clock=lambda: 5) as app:
            for lo in (0, 50):  # two appends, rolling 1 KiB segments on the way
                ks, vs = keys[lo:lo + 70], values[lo:lo + 70]
                res = (app.append_texts(0, ks, vs, None, want_lines=True) if keyed
                       else app.append(0, list(zip(ks, vs, [None] * len(vs), strict=True)), want_lines=True))
                assert res.lines is not None and len(res.lines) == len(vs)
        pdir = lg.partition_dir(0)
        out.append([(s, open(os.path.join(pdir, s), "rb").read()) for s in sorted(os.listdir(pdir))])
    assert out[0] == out[1] and len(out[0]) > 3



# --- the --envelope lane against the per-line decoder ------------------------------------
# clients.lanes.EnvelopeLane decodes a batch with msgspec (values kept as msgspec.Raw) and
# hands a batch it cannot vouch for to envelope_decoder, the reference. Both store the value
# as written and must agree byte for byte on everything else.

_json_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
    st.sampled_from(["é", "😀", "\u2028", "\x7f", "\x00\x1f", 'q"t\\', "/", "ü" * 3]),
)
_json_values = st.recursive(
    _json_leaves,
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=4), kids, max_size=3)),
    max_leaves=8,
)
# numbers orjson refuses or turns into floats, and spellings json.dumps never writes
_odd_values = st.sampled_from([
    b"1e400", b"-1E+400", b"1e0400", b"1.5e308", b"1.7976931348623157e308", b"1e-400", b"2.5E-3",
    b"123456789012345678901234567890", b"-9223372036854775809", b"18446744073709551615", b"-0",
    b"1.0", b"1e5", b'"\\u00e9\\ud83d\\ude00"', b'"\\ud800"', b'"\\udc00x"', b'"\\/"', b'"\xff"',
    b'"\xed\xa0\x80"', b'{"a" : [ 1 ,2 ] }', b"[1,]", b"NaN", b"tru", b'"3e129f"', b'{"id":"07e7d3e1294"}',
    b'[{"a":1e400}]', b'{"n":1.0e-300}',
])


@st.composite
def _envelope_lines(draw) -> bytes:
    kind = draw(st.sampled_from(["ok", "ok", "ok", "ok", "odd", "odd", "bad", "blank"]))
    if kind == "bad":
        return draw(st.sampled_from([
            b"{", b'{"key":"a"}', b"[]", b"5", b'{"value":1} x', b'\x0c{"value":1}', b'{"value":1,"key":"\xff"}',
            b'{"value":1,"headers":{"a":1}}', b'{"value":1,"headers":[]}', b'{"value":1,"key":{"a":1}}',
            b'{"value":1,"key":[1]}', b'{"value":1,"ts":1e400}', b'{"value":1,"x":"\xc0\xaf"}',
            b'{"value":1,"source":{"log":"","partition":0,"offset":1}}', b'{"valu\\u0065":1,"value":[2,]}',
        ]))
    if kind == "blank":
        return draw(st.sampled_from([b"", b"  ", b"\t"]))
    parts: list[tuple[bytes, bytes]] = []
    if draw(st.booleans()):  # consume's output: offset, partition, ts first
        parts += [(b'"offset"', b"%d" % draw(st.integers(0, 10**12))), (b'"partition"', b"0"),
                  (b'"ts"', b"1763683200000")]
    key = draw(st.one_of(st.none(), st.text(max_size=6), st.sampled_from(["u1", "é", 'q"t', "\u2028"]),
                         st.integers(-5, 5), st.floats(allow_nan=False, allow_infinity=False), st.booleans()))
    if draw(st.integers(0, 9)) > 0:
        parts.append((b'"key"', _json.dumps(key, ensure_ascii=draw(st.booleans())).encode()))
    ensure_ascii = draw(st.booleans())
    sep = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,", " : ")]))
    if kind == "odd":
        value = draw(_odd_values)
    else:
        value = _json.dumps(draw(_json_values), ensure_ascii=ensure_ascii, separators=sep).encode()
    parts.append((draw(st.sampled_from([b'"value"', b'"value"', b'"valu\\u0065"'])), value))
    headers = draw(st.one_of(st.none(), st.dictionaries(st.text(max_size=4), st.text(max_size=6), max_size=3)))
    if headers is not None or draw(st.booleans()):
        parts.append((b'"headers"', _json.dumps(headers, ensure_ascii=ensure_ascii).encode()))
    if draw(st.integers(0, 9)) == 0:  # a repeated field: the last one counts
        parts.append((b'"value"', b'"again"'))
    if draw(st.integers(0, 14)) == 0:
        parts.append((b'"source"', draw(st.sampled_from([b'"x"', b'{"log":"a","partition":0,"offset":3}']))))
    order = draw(st.permutations(range(len(parts)))) if draw(st.integers(0, 4)) == 0 else range(len(parts))
    colon, comma = (b" : ", b" , ") if sep[1] == " : " else (b":", b",")
    body = comma.join(parts[i][0] + colon + parts[i][1] for i in order)
    return draw(st.sampled_from([b"", b" ", b"\t"])) + b"{" + body + b"}" + draw(st.sampled_from([b"", b" \r"]))


@_settings
@given(lines=st.lists(_envelope_lines(), max_size=20), partitions=st.sampled_from([1, 3]),
       const_key=st.sampled_from([None, None, "k"]), batch_bytes=st.sampled_from([300, 1 << 16]))
def test_envelope_lane_writes_what_the_decoder_writes(tmp_path_factory, lines, partitions, const_key, batch_bytes):
    tmp = str(tmp_path_factory.mktemp("env"))
    data = b"\n".join(lines) + b"\n"
    fast = _produce_bytes(tmp, "fast", data, key_field=None, partitions=partitions, fast=True,
                          const_key=const_key, envelope=True, batch_bytes=batch_bytes)
    slow = _produce_bytes(tmp, "slow", data, key_field=None, partitions=partitions, fast=False,
                          const_key=const_key, envelope=True, batch_bytes=batch_bytes)
    assert fast == slow


def _consumed_like(n: int) -> bytes:
    rows = []
    for i in range(n):
        env = {"offset": i, "partition": 0, "ts": 1763683200000 + i, "key": None if i % 50 == 0 else f"user-{i % 97}",
               "value": None if i % 100 == 7 else {"time": f"2025-11-21T00:00:{i % 60:02d}.{i % 1000:03d}Z",
                                                  "session": f"{i * 2654435761:012x}", "city": "São Paulo",
                                                  "items": [{"sku": f"sku-{i}", "qty": i % 3}], "amount": i / 7}}
        if i % 5 == 0:
            env["headers"] = {"trace": f"{i * 11400714819323198485 % 2**64:016x}", "ü": "ß"}
        rows.append(_json.dumps(env, ensure_ascii=False, separators=(",", ":")).encode())
    return b"\n".join(rows) + b"\n"


def test_envelope_lane_takes_ordinary_batches(tmp_path):
    """Consume-shaped input with headers, null keys, tombstones and hex ids goes through the lane
    itself (no batch handed to the per-line decoder), and stores what the decoder stores."""
    data = _consumed_like(3000)
    for parts in (1, 4):
        calls: list = []
        fast = _produce_bytes(str(tmp_path), f"f{parts}", data, key_field=None, partitions=parts, fast=True,
                              envelope=True, batch_bytes=16 << 10, lane_calls=calls)
        slow = _produce_bytes(str(tmp_path), f"s{parts}", data, key_field=None, partitions=parts, fast=False,
                              envelope=True, batch_bytes=16 << 10)
        assert fast == slow and fast[0] == 3000
        assert len(calls) > 10 and all(calls)


def test_envelope_lane_hands_a_batch_it_cannot_vouch_for_to_the_decoder(tmp_path):
    from streamctl.clients.inputlines import Batch
    from streamctl.clients.lanes import EnvelopeLane
    from streamctl.formats.inputs import envelope_decoder

    lane, exact = EnvelopeLane(None), envelope_decoder(None)

    def batch(*lines: bytes) -> Batch:
        return Batch(1, list(lines), b"\n".join(lines))

    ok = [b'{"key":"a","value":{"n":1e30}}', b'{"key":null,"value":[1,"x"],"headers":{"h":"v"}}']
    got = lane(batch(*ok), exact)
    assert got is not None
    assert [bytes(k) for k in got.key_texts] == [b'"a"', b"null"]
    assert [bytes(v) for v in got.values] == [b'{"n":1e30}', b'[1,"x"]'] and got.headers == [None, b'{"h":"v"}']
    for bad in (b'{"value":1e400}', b'{"value":"\xff"}',
                b'{"value":1,"key":7.5}', b'{"value":1,"source":{"log":"a","partition":0,"offset":1}}'):
        assert lane(batch(*ok, bad), exact) is None, bad
    # a number that only looks suspect is checked and let through, an integer beyond 64 bits as written
    assert lane(batch(b'{"value":{"x":1e-300,"big":12345678901234567890}}'), exact) is not None
    got = lane(batch(b'{"value":123456789012345678901234567890}'), exact)
    assert got is not None and [bytes(v) for v in got.values] == [b"123456789012345678901234567890"]


def test_envelope_value_is_stored_as_written(logdir):
    line = b'{"offset":3,"key":"a","value": {"b": 1,  "a": 2.50, "e": 1E5} ,"headers":{"h":"v"}}\n'
    p = run_cli("produce", logdir, "--envelope", "--echo", input=line + line.replace(b'"a"', b"null", 1), check=True)
    stored = p.stdout.splitlines()
    assert stored[0].endswith(b',"key":"a","value":{"b": 1,  "a": 2.50, "e": 1E5},"headers":{"h":"v"}}')
    assert b',"key":null,"value":{"b": 1,  "a": 2.50, "e": 1E5},' in stored[1]
    # the same through the per-line decoder (--fsync always appends record by record)
    q = run_cli("produce", logdir + "2", "--envelope", "--echo", "--fsync", "always", input=line, check=True)
    assert q.stdout.splitlines()[0].split(b'"ts":')[1].split(b",", 1)[1] == stored[0].split(b'"ts":')[1].split(b",", 1)[1]


def test_envelope_round_trip_copies_a_log_byte_for_byte(logdir):
    src = logdir + "-src"
    run_cli("produce", src, input='{"b": 1,  "a": 2.50}\n[1, 2]\n"x"\n', check=True)
    run_cli("produce", src, "--envelope", input=_consumed_like(200), check=True)
    consumed = run_cli("consume", src, check=True).stdout
    run_cli("produce", logdir, "--envelope", input=consumed, check=True)
    strip_ts = [x.split(b',"key":', 1)[1] for x in consumed.splitlines()]
    assert [x.split(b',"key":', 1)[1] for x in run_cli("consume", logdir, check=True).stdout.splitlines()] == strip_ts


def test_envelope_nested_deeper_than_msgspec_goes_through_the_decoder(logdir):
    value = b"[" * 1020 + b"]" * 1020
    p = run_cli("produce", logdir, "--envelope", "--echo", input=b'{"key":"d","value":' + value + b"}\n", check=True)
    assert p.stdout.endswith(b',"value":' + value + b"}\n")
    bad = run_cli("produce", logdir, "--envelope", input=b'{"value":' + b"[" * 1100 + b"]" * 1100 + b"}\n")
    assert bad.returncode == 65 and b"<stdin>:1: invalid JSON" in bad.stderr


@settings(max_examples=200, deadline=None)
@given(value=_json_values, sep=st.sampled_from([(",", ":"), (", ", ": ")]), dup=st.booleans())
def test_scanned_value_text_matches_msgspec(value, sep, dup):
    from streamctl.formats.inputs import scan_value_text, value_text

    text = _json.dumps(value, separators=sep).encode()
    line = b'{"k":{"value":0},"value": ' + text + b' ,"x":[{"value":1}]' + (b',"valu\\u0065":[7]' if dup else b"") + b"}"
    want = b"[7]" if dup else text
    assert value_text(line) == want and scan_value_text(line) == want


def test_headers_and_keys_encode_as_orjson_does():
    import msgspec
    import orjson

    enc = msgspec.json.Encoder().encode
    for cp in list(range(0x800)) + list(range(0x800, 0x110000, 97)) + [0x2028, 0x2029, 0xFEFF, 0x10FFFF]:
        if 0xD800 <= cp < 0xE000:
            continue
        s = chr(cp) + "a" + chr(cp)
        assert enc({s: s}) == orjson.dumps({s: s}) and enc(s) == orjson.dumps(s), hex(cp)
    assert enc(None) == b"null"


def test_envelope_bad_line_after_many_good_ones(logdir, tmp_path):
    good = _consumed_like(1500)
    f = tmp_path / "in.jsonl"
    f.write_bytes(good + b'{"key":"x","value":{"n":1e400}}\n' + good)
    p = run_cli("produce", logdir, "--envelope", str(f))
    assert p.returncode == 65
    err = p.stderr.decode()
    assert "in.jsonl:1501: invalid JSON: number is infinity" in err and "1500 record(s) before it" in err
    assert len(read_log(logdir)) == 1500 and run_cli("check", logdir).returncode == 0
    dl = tmp_path / "dead.jsonl"
    p = run_cli("produce", logdir + "2", "--envelope", "--on-error", f"dead-letter={dl}", str(f))
    assert p.returncode == 0 and b"1 bad line(s) rejected" in p.stderr
    assert [_json.loads(x)["line"] for x in dl.read_text().splitlines()] == [1501]
    assert len(read_log(logdir + "2")) == 3000


def test_an_input_that_cannot_be_read_is_named_and_creates_no_log(tmp_path):
    """A missing FILE or a directory is a usage error naming it (exit 2), before the log is made."""
    log = str(tmp_path / "new")
    for bad, reason in ((str(tmp_path), b"Is a directory"), (str(tmp_path / "missing.jsonl"), b"No such file")):
        p = run_cli("produce", log, bad)
        assert p.returncode == 2 and p.stderr.startswith(f"streamctl: {bad}: cannot open: ".encode()), p.stderr
        assert reason in p.stderr and not os.path.exists(log)


@pytest.mark.parametrize("lines", [1, 3000])
def test_key_field_keeps_a_19_digit_integer_below_the_64_bit_range_exact(tmp_path, lines):
    """-9223372036854775809 and below have 19 digits: orjson reads them as floats, so the key is taken
    from the exact parse, on the line-by-line path (one line) and the lanes' (many lines) alike."""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"k": -9300000000000000000 - i, "v": i}) + "\n" for i in range(lines)))
    log = str(tmp_path / "log")
    run_cli("produce", log, str(src), "--key-field", "k", check=True)
    first = json.loads(run_cli("consume", log, "--max", "1", check=True).stdout)
    assert first["key"] == "-9300000000000000000"
