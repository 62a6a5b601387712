"""Unit tests for the core: partitioner, durations and times, record lines, templates."""

from __future__ import annotations

import os

import pytest

from streamctl.errors import UsageError
from streamctl.formats.template import compile_template, parse_template
from streamctl.storage import record
from streamctl.storage.partitioner import Partitioner, murmur2, partition_for_key
from streamctl.timeparse import event_time_ms, format_iso, parse_duration, parse_iso, parse_time


def test_murmur2_matches_kafka_test_vectors():
    # From Kafka's UtilsTest.testMurmur2
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107


def test_partition_for_key_is_positive_mod():
    for k in ["", "a", "user-7", "ü", "21"]:
        p = partition_for_key(k, 7)
        assert 0 <= p < 7
        assert p == (murmur2(k.encode()) & 0x7FFFFFFF) % 7


def test_null_keys_round_robin():
    part = Partitioner(3, start=0)
    assert [part(None) for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    assert part("x") == partition_for_key("x", 3)


@pytest.mark.parametrize("text,ms", [
    ("500ms", 500), ("30s", 30_000), ("5m", 300_000), ("1h", 3_600_000), ("7d", 604_800_000),
    ("1h30m", 5_400_000), ("PT5M", 300_000), ("P1DT2H", 93_600_000), ("1.5s", 1500), ("0s", 0),
])
def test_parse_duration(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize("bad", ["", "5", "5x", "m5", "1h 30m", "P", "PT", "-5s", "1h30"])
def test_parse_duration_rejects(bad):
    with pytest.raises(UsageError):
        parse_duration(bad)


def test_parse_time_forms():
    assert parse_time("2026-11-21T10:00:00Z") == 1795255200000
    assert parse_time("2026-11-21T10:00:00") == 1795255200000  # naive = UTC
    assert parse_time("2026-11-21T11:00:00+01:00") == 1795255200000
    assert parse_time("@1763719200123") == 1763719200123
    assert parse_time("-1h", now=10_000_000) == 10_000_000 - 3_600_000
    with pytest.raises(UsageError):
        parse_time("yesterday")


def test_iso_round_trip():
    for ms in [0, 1, 1763719200123, -1500, 253402300799999]:
        assert parse_iso(format_iso(ms)) == ms


def test_event_time_magnitudes():
    assert event_time_ms(1763719200) == 1763719200000
    assert event_time_ms(1763719200123) == 1763719200123
    assert event_time_ms(1763719200123456) == 1763719200123
    assert event_time_ms("2025-11-21T10:00:00Z") == 1763719200000
    assert event_time_ms(None) is None
    assert event_time_ms("soon") is None
    assert event_time_ms(True) is None
    assert event_time_ms(float("nan")) is None


def test_sub_millisecond_digits():
    """Event times drop them (floor, whatever the form); a time given as a bound rounds them up."""
    assert event_time_ms("2025-11-21T10:00:00.9999Z") == 1763719200999
    assert event_time_ms(1763719200.9999) == 1763719200999
    assert event_time_ms(1763719200.123) == 1763719200123  # 1763719200.123 * 1000 is just below
    assert event_time_ms(1763719200999.9) == 1763719200999
    assert event_time_ms(1763719200999999) == 1763719200999
    assert event_time_ms("1969-12-31T23:59:59.9995Z") == event_time_ms(-0.0005) == -1
    assert parse_time("2025-11-21T10:00:00.9991Z") == 1763719201000
    assert parse_time("2025-11-21T10:00:00.999Z") == parse_time("2025-11-21T10:00:00.999000Z") == 1763719200999
    assert parse_time("1969-12-31T23:59:59.9995Z") == 0


def test_record_encode_and_fast_paths():
    line = record.encode(42, 3, 1763719200123, b'"user-7"', b'{"a":[1,2],"value":"x"}')
    assert line == b'{"offset":42,"partition":3,"ts":1763719200123,"key":"user-7","value":{"a":[1,2],"value":"x"}}\n'
    assert record.envelope(line) == (42, 3, 1763719200123)
    assert record.offset_of(line) == 42
    assert record.value_bytes(line) == b'{"a":[1,2],"value":"x"}'
    assert record.key_bytes(line) == b'"user-7"'
    assert not record.is_tombstone(line)
    tomb = record.encode(1, 0, 5, b'"k"', b"null")
    assert record.is_tombstone(tomb)
    with_headers = record.encode(1, 0, 5, b'"k"', b'{"headers":1}', b'{"h":"v"}')
    assert record.value_bytes(with_headers) == b'{"headers":1}'
    # a key containing the field names cannot fool the fast path
    tricky = record.encode(1, 0, 5, b'"a\\",\\"value\\":1"', b"2")
    assert record.value_bytes(tricky) == b"2"


def test_record_parse_validates():
    with pytest.raises(record.BadRecord):
        record.parse(b'{"offset":-1,"partition":0,"ts":1,"key":null,"value":1}')
    with pytest.raises(record.BadRecord):
        record.parse(b'{"offset":1,"partition":0,"ts":1,"key":5,"value":1}')
    with pytest.raises(record.BadRecord):
        record.parse(b"[1]")
    # a hand-written line with spaces still reads, through the slow path
    assert record.envelope(b'{"offset": 7, "partition": 0, "ts": 9, "key": null, "value": 1}') == (7, 0, 9)


def test_template_tokens():
    line = record.encode(5, 1, 1763719200123, b'"k1"', b'"hello"', b'{"h":"v"}')
    r = compile_template(r"%t %p:%o %T %d %k=%s [%h] 100%%\n", "orders")
    assert r(line) == b"orders 1:5 1763719200123 2025-11-21T10:00:00.123Z k1=hello [h=v] 100%\n"
    r2 = compile_template("%s|%k")
    assert r2(record.encode(0, 0, 0, b"null", b'{"a":1}')) == b'{"a":1}|'
    with pytest.raises(UsageError):
        parse_template("%x")
    with pytest.raises(UsageError):
        parse_template("50%")


def test_template_kcat_tokens_each():
    """Every kcat token with kcat's meaning, and %d (streamctl's ISO time)."""
    line = record.encode(42, 3, 1763719200123, b'"user-\\u00e9"', b'{"a":"\xc3\xa9"}', b'{"x":"1","y":"b"}')
    one = lambda t, ln=line: compile_template(t, "orders")(ln)  # noqa: E731
    assert one("%o") == b"42"
    assert one("%p") == b"3"
    assert one("%t") == b"orders"
    assert one("%T") == b"1763719200123"
    assert one("%d") == b"2025-11-21T10:00:00.123Z"
    assert one("%k") == "user-é".encode()
    assert one("%K") == b"7"  # bytes, not characters: é is 2 bytes in UTF-8
    assert one("%s") == '{"a":"é"}'.encode()
    assert one("%S") == b"10"
    assert one("%R") == b"\x00\x00\x00\x0a"  # kcat's binary %S: big-endian signed 32-bit
    assert one("%h") == b"x=1,y=b"
    assert one("%%") == b"%"
    assert one(r"a\tb\nc") == b"a\tb\nc"
    tomb = record.encode(1, 0, 5, b"null", b"null")
    assert one("[%k][%K][%s][%S][%h]", tomb) == b"[][-1][][-1][]"
    assert one("%R", tomb) == b"\xff\xff\xff\xff"
    assert one("%s %S", record.encode(1, 0, 5, b'"k"', b'"plain text"')) == b"plain text 10"
    assert one("%d", record.encode(1, 0, 0, b'"k"', b"1")) == b"1970-01-01T00:00:00.000Z"


def test_template_log_name_and_plain_files():
    from streamctl.formats.template import compile_plain_template, log_name

    assert log_name("data/orders") == "orders"
    assert log_name("data/orders/") == "orders"
    assert log_name("./orders") == "orders"
    assert log_name("events.jsonl") == "events.jsonl"
    assert log_name("-") == "-"
    r = compile_plain_template("%t|%p|%o|%T|%d|%k|%K|%s|%S|%h", "events.jsonl")
    assert r(7, b'"hi"') == b"events.jsonl|0|7|-1|||-1|hi|2|"


def test_copy_range_stops_only_at_a_line_boundary(tmp_path, monkeypatch):
    """A stop request (Ctrl-C) during consume's sendfile copy finishes the line at hand."""
    from streamctl.formats import writer

    src = tmp_path / "seg"
    lines = [b'{"n":%d,"pad":"%s"}\n' % (i, b"x" * (i % 13)) for i in range(200)]
    src.write_bytes(b"".join(lines))
    monkeypatch.setattr(writer, "COPY_CHUNK", 37)  # chunk ends fall mid-line
    for after_calls in (1, 2, 5):
        dst = tmp_path / f"out{after_calls}"
        calls: list[int] = []

        def stop(calls: list[int] = calls, after: int = after_calls) -> bool:
            calls.append(1)
            return len(calls) > after

        with open(dst, "wb") as f:
            out = writer.Output(stream=f)
            fd = os.open(src, os.O_RDONLY)
            done = out.copy_range(fd, 0, src.stat().st_size, stop=stop)
            os.close(fd)
        got = dst.read_bytes()
        assert not done and got.endswith(b"\n") and b"".join(lines).startswith(got)
        assert 37 * after_calls <= len(got) < 37 * after_calls + 40


def test_copy_range_falls_back_where_sendfile_cannot_write(tmp_path):
    """sendfile refuses O_APPEND files (EINVAL); the copy then goes through pread/write."""
    from streamctl.formats import writer

    src = tmp_path / "seg"
    src.write_bytes(b"a\nbb\nccc\n")
    dst = tmp_path / "out"
    dst.write_bytes(b"old\n")
    with open(dst, "ab") as f:
        out = writer.Output(stream=f)
        fd = os.open(src, os.O_RDONLY)
        assert out.copy_range(fd, 2, 9)
        os.close(fd)
    assert dst.read_bytes() == b"old\nbb\nccc\n"


def test_csv_cells_are_json_scalars_for_every_writer():
    from streamctl.formats.table import csv_rows, flatten

    def flat(r: dict) -> list:
        return list(flatten(r).values())

    assert csv_rows([{"a": True, "b": None, "c": {"x": 1}, "d": 1.5}], flat) == b'true,,1,1.5\n'
    assert csv_rows([[False, None, [1, 2]]], list) == b'false,,"[1,2]"\n'
    assert csv_rows([{"key": "k", "left": True, "right": None}], lambda r: list(r.values())) == b"k,true,\n"
