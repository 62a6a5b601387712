"""produce's batch lanes (streamctl/clients/lanes.py) against the per-line decoders, the reference.

Each case produces the same random input twice in-process, once with the mode's lane and once
with every batch going line by line, with a fixed clock and small segments, and compares the
segment files byte for byte, the counts, and the records echoed. Clean input must really take
the lane (no batch handed to the per-line path); input the rule in lanes.py sends down the
per-line path must still store the same bytes.
"""

from __future__ import annotations

import json
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamctl.clients.lanes import EnvelopeLane, RawLane
from streamctl.clients.producer import Input, ProduceOptions, produce, validate_values
from streamctl.formats import inputs
from streamctl.storage import fieldpaths
from streamctl.storage import log as logmod
from streamctl.storage.appender import Appender

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _run(tmp: str, name: str, data: bytes, mode: str, lane: bool, *, partitions: int, const_key: str | None = None,
         key_field: str = "user", delim: str | None = None, batch_bytes: int = 512) -> tuple:
    src = os.path.join(tmp, name + ".in")
    with open(src, "wb") as f:
        f.write(data)
    lg = logmod.open_or_create(os.path.join(tmp, name), partitions, 1024, 1)
    if mode == "raw":
        decoder = inputs.raw_decoder(delim, const_key)
    elif mode == "envelope":
        decoder = inputs.envelope_decoder(const_key)
    else:
        decoder = inputs.value_decoder(key_field if mode == "keyed" else None, const_key)
    echoed: list[bytes] = []
    opts = ProduceOptions(decoder=decoder, on_error="skip", batch_bytes=batch_bytes, echo=echoed.extend)
    if lane:  # as clients/produce_run.py sets them
        if mode == "raw":
            opts.raw_batch = RawLane(delim, const_key)
        elif mode == "envelope":
            opts.envelope_batch = EnvelopeLane(const_key)
        elif mode == "keyed":
            opts.key_path = fieldpaths.value_path(key_field)
        else:
            opts.validate_batch, opts.const_key = validate_values, const_key
    fd = os.open(src, os.O_RDONLY)
    try:
        with Appender(lg, fsync="never", clock=lambda: 1763683200000) as app:
            stats = produce(lg, [Input(name, fd)], opts, app)
    finally:
        os.close(fd)
    segs = {}
    for p in range(partitions):
        pdir = lg.partition_dir(p)
        segs[p] = [(s, open(os.path.join(pdir, s), "rb").read()) for s in sorted(os.listdir(pdir)) if s.endswith(".jsonl")]
    return (stats.records, stats.rejected, segs, sorted(echoed)), stats


def _same(tmp: str, data: bytes, mode: str, **kw) -> tuple:
    fast, fstats = _run(tmp, "lane", data, mode, True, **kw)
    slow, sstats = _run(tmp, "lines", data, mode, False, **kw)
    assert fast == slow
    assert sstats.lane_batches == 0 and fstats.lane_batches + fstats.line_batches == sstats.line_batches
    return fstats


# --- random lines: ordinary values with the spellings that decide a path, and bad lines ----------

_keys = st.one_of(
    st.none(), st.text(max_size=5), st.sampled_from(["u1", "u2", "é", "😀", 'q"t', "b\\s", "\u2028", "\x7f", "null"]),
    st.integers(-5, 5), st.sampled_from([2**63 - 1, 2**64 - 1, -(2**63), -(2**63) - 1, 2**64]), st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False), st.lists(st.integers(), max_size=1),
)
# numbers orjson refuses or turns into floats, hex ids that look like exponents, spellings json.dumps never writes
_odd = st.sampled_from([
    b"1e400", b"-1E+400", b"1e0400", b"1.5e308", b"1.7976931348623157e308", b"1e-400", b"2.5E-3", b"1e99",
    b"123456789012345678901234567890", b"-9223372036854775809", b"18446744073709551615", b"-0", b"1E+2",
    b'"3e129f"', b'"07e7d3e129"', b'"a:1e400"', b'"\\u00e9\\ud83d\\ude00"', b'"\\/"', b' [ 1 , 2 ] ',
    b'"\\ud800"', b'"\xff"', b'"\xed\xa0\x80"', b"[1,]", b"NaN", b"tru", b"[" * 1020 + b"]" * 1020,
])


def _value(draw, key) -> bytes:
    shape = draw(st.sampled_from(["flat", "flat", "nested", "missing", "scalar", "odd"]))
    if shape == "odd":
        return b'{"user":' + json.dumps(key).encode() + b',"n":' + draw(_odd) + b"}"
    value = {"flat": {"user": key, "time": "2025-11-21T00:00:00.013Z", "session": f"{draw(st.integers(0, 2**48)):012x}"},
             "nested": {"u": {"id": key}, "user": {"id": key}}, "missing": {"other": key}, "scalar": key}[shape]
    return json.dumps(value, ensure_ascii=draw(st.booleans())).encode()


@st.composite
def _value_lines(draw) -> bytes:
    kind = draw(st.sampled_from(["ok"] * 6 + ["odd", "bad", "blank"]))
    if kind == "bad":
        return draw(st.sampled_from([b"{", b'{"user":1', b"nope", b"\x0c{}", b'"\xff"', b"1 2", b"  "]))
    if kind == "blank":
        return b""
    if kind == "odd":
        return draw(_odd)
    pad = draw(st.sampled_from([b"", b"", b" ", b"\t"]))
    return pad + _value(draw, draw(_keys)) + draw(st.sampled_from([b"", b"", b" \r"]))


@st.composite
def _envelope_lines(draw) -> bytes:
    kind = draw(st.sampled_from(["ok"] * 6 + ["bad", "blank"]))
    if kind == "bad":
        return draw(st.sampled_from([b"{", b'{"key":"a"}', b"[]", b'{"value":1,"headers":{"a":1}}', b'{"value":1} x',
                                     b'{"value":1,"source":{"log":"a","partition":0,"offset":1}}',
                                     b'{"value":1,"source":{"log":"","partition":0,"offset":1}}']))
    if kind == "blank":
        return b""
    key = draw(_keys)
    parts = [b'"offset":%d,"partition":0,"ts":1763683200000' % draw(st.integers(0, 10**6))] if draw(st.booleans()) else []
    if draw(st.integers(0, 9)):
        parts.append(b'"key":' + json.dumps(key, ensure_ascii=draw(st.booleans())).encode())
    parts.append(b'"value":' + _value(draw, key))
    headers = draw(st.one_of(st.none(), st.dictionaries(st.text(max_size=3), st.text(max_size=4), max_size=2)))
    if headers is not None:
        parts.append(b'"headers":' + json.dumps(headers, ensure_ascii=draw(st.booleans())).encode())
    if draw(st.integers(0, 12)) == 0:
        parts.append(b'"source":"x"')
    return b"{" + b",".join(parts) + b"}"


@st.composite
def _raw_lines(draw) -> bytes:
    text = draw(st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=12))
    line = text.encode()
    if draw(st.integers(0, 9)) == 0:
        line = draw(st.sampled_from([b"a\xffb", b"\xed\xa0\x80", b"  ", b"", b"k:\\n\"", b"x\x7fy", b"k\r"]))
    return line


def _joined(lines: list[bytes], crlf: bool) -> bytes:
    return (b"\r\n" if crlf else b"\n").join(lines) + b"\n"


@SETTINGS
@given(lines=st.lists(_value_lines(), max_size=30), partitions=st.sampled_from([1, 3]),
       const_key=st.sampled_from([None, None, "k"]), crlf=st.booleans())
def test_plain_lane_stores_what_the_decoder_stores(tmp_path_factory, lines, partitions, const_key, crlf):
    _same(str(tmp_path_factory.mktemp("plain")), _joined(lines, crlf), "plain", partitions=partitions,
          const_key=const_key)


@SETTINGS
@given(lines=st.lists(_value_lines(), max_size=30), partitions=st.sampled_from([1, 3]),
       key_field=st.sampled_from(["user", "user", "u.id", "value.user.id"]), crlf=st.booleans())
def test_keyed_lane_stores_what_the_decoder_stores(tmp_path_factory, lines, partitions, key_field, crlf):
    _same(str(tmp_path_factory.mktemp("keyed")), _joined(lines, crlf), "keyed", partitions=partitions,
          key_field=key_field)


@SETTINGS
@given(lines=st.lists(_envelope_lines(), max_size=25), partitions=st.sampled_from([1, 3]),
       const_key=st.sampled_from([None, None, "k"]))
def test_envelope_lane_stores_what_the_decoder_stores(tmp_path_factory, lines, partitions, const_key):
    _same(str(tmp_path_factory.mktemp("env")), _joined(lines, False), "envelope", partitions=partitions,
          const_key=const_key)


@SETTINGS
@given(lines=st.lists(_raw_lines(), max_size=30), partitions=st.sampled_from([1, 3]),
       const_key=st.sampled_from([None, "k"]), delim=st.sampled_from([None, None, ":", "é", "::"]), crlf=st.booleans())
def test_raw_lane_stores_what_the_decoder_stores(tmp_path_factory, lines, partitions, const_key, delim, crlf):
    _same(str(tmp_path_factory.mktemp("raw")), _joined(lines, crlf), "raw", partitions=partitions,
          const_key=const_key, delim=delim)


def _clean(n: int) -> tuple[bytes, bytes]:
    """n ordinary values (nested, ISO times, hex ids, non-ASCII) and the same as envelopes."""
    values, envelopes = [], []
    for i in range(n):
        v = {"user": f"user-{i % 37}", "time": f"2025-11-21T00:00:{i % 60:02d}.{i % 1000:03d}Z",
             "session": f"{i * 2654435761 % 2**48:012x}", "city": "São Paulo" if i % 7 == 0 else "Berlin",
             "items": [{"sku": f"sku-{i}", "qty": i % 3}], "amount": i / 7, "n": i * 10**12}
        values.append(json.dumps(v, ensure_ascii=False).encode())
        env = {"offset": i, "partition": 0, "ts": 1763683200000 + i, "key": None if i % 50 == 0 else v["user"],
               "value": None if i % 100 == 7 else v}
        if i % 5 == 0:
            env["headers"] = {"trace": f"{i * 11400714819323198485 % 2**64:016x}", "ü": "ß"}
        envelopes.append(json.dumps(env, ensure_ascii=False, separators=(",", ":")).encode())
    return b"\n".join(values) + b"\n", b"\n".join(envelopes) + b"\n"


def test_ordinary_input_takes_the_lane_in_every_mode(tmp_path):
    values, envelopes = _clean(600)
    for parts in (1, 4):
        for mode, data, kw in (("plain", values, {}), ("plain", values, {"const_key": "k"}), ("keyed", values, {}),
                               ("raw", values, {}), ("raw", values, {"delim": ","}), ("envelope", envelopes, {}),
                               ("envelope", envelopes, {"const_key": "k"})):
            tmp = tmp_path / f"{mode}-{parts}-{len(kw)}"
            tmp.mkdir()
            stats = _same(str(tmp), data, mode, partitions=parts, batch_bytes=16 << 10, **kw)
            assert stats.records == 600 and stats.line_batches == 0 and stats.lane_batches > 5, (mode, kw)


def test_a_batch_the_rule_sends_line_by_line_goes_so_and_only_that_batch(tmp_path):
    values, _ = _clean(400)
    lines = values.splitlines()
    lines[200] = b'{"user":"u","n":1e400}'  # orjson refuses it: that batch goes line by line and rejects it
    stats = _same(str(tmp_path), b"\n".join(lines) + b"\n", "keyed", partitions=2, batch_bytes=8 << 10)
    assert stats.line_batches == 1 and stats.lane_batches > 5 and stats.records == 399 and stats.rejected == 1


def test_a_number_at_the_start_of_a_batch_is_suspect():
    from streamctl.clients.lanes import suspect_lines

    assert suspect_lines(b"1e400") == [0]
    assert suspect_lines(b'{"a":1}\n1e400\n"07e7d3e129"') == [1]
    assert suspect_lines(b"12345678901234567890123") == [0]
