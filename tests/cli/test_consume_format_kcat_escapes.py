"""--format reads backslash escapes as kcat does (SPEC: "kcat's tokens and kcat's meanings ... A kcat
template works unchanged"): kcat's fmt_add turns \\t \\n \\r into their characters, \\xHH and a number
after a backslash (C's strtoul, base 0: decimal, 0-octal, 0x-hex) into that byte, and a backslash
before any other character into that character."""

from __future__ import annotations

import pytest

from conftest import run_cli


@pytest.fixture
def logdir(tmp_path):
    log = str(tmp_path / "orders")
    run_cli("produce", log, "--key", "k", input='"v"\n', check=True)
    return log


@pytest.mark.parametrize(("template", "expected"), [
    (r"%k\t%s\r\n", b"k\tv\r\n"),
    (r"%k\\%s\n", b"k\\v\n"),  # \\ is one backslash
    (r"%k\x41\x3d%s\n", b"kA=v\n"),  # \xHH: a byte in hex
    (r"%k\61\0101\0x42%s\n", b"k=ABv\n"),  # decimal, octal, hex after a backslash
    (r"%k\|\q%s\x9f\n", b"k|qv\x9f\n"),  # any other character is itself; bytes above 127 stay bytes
    (r"%k\xff%s\n", b"kffv\n"),  # kcat reads hex only after \x and a decimal digit
    (r"%k%%%s\n", b"k%v\n"),
])
def test_format_escapes_read_as_kcat_reads_them(logdir, template, expected):
    r = run_cli("consume", logdir, "--format", template, check=True)
    assert r.stdout == expected
    r = run_cli("tail", logdir, "--format", template, check=True)
    assert r.stdout == expected


def test_binary_value_length_frames_values_as_kcat_does(tmp_path):
    """kcat's %R: the value's length in bytes (-1 for null) as a big-endian signed 32-bit integer,
    so `%R%s` frames each value in a byte stream."""
    import struct

    log = str(tmp_path / "framed")
    run_cli("produce", log, "--envelope", check=True,
            input='{"key":"a","value":"héllo"}\n{"key":"b","value":null}\n{"key":"c","value":{"n":1}}\n')
    want = struct.pack(">i", 6) + "héllo".encode() + struct.pack(">i", -1) + struct.pack(">i", 7) + b'{"n":1}'
    for cmd in ("consume", "tail"):
        assert run_cli(cmd, log, "--format", "%R%s", check=True).stdout == want
    assert run_cli("consume", log, "--format", "%R%s", "--max", "1", check=True).stdout == want[:10]
    plain = tmp_path / "values.jsonl"
    plain.write_text('"abc"\n[1,2]\n')
    assert run_cli("consume", str(plain), "--format", "%R%s", check=True).stdout == \
        b"\x00\x00\x00\x03abc\x00\x00\x00\x05[1,2]"
