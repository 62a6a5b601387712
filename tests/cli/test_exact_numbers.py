"""Numbers stay as written from input to output: a value is stored as its JSON text, and every reader
prints it from that text, with or without headers (a float would print `1.10` as `1.1` and round
`12345678901234567890.123456789`); produce takes a decimal of any length (only an integer beyond 64
bits is refused, as orjson would read it as a float)."""

from __future__ import annotations

from conftest import log_records, run_cli

VALUE = '{"n":1.10,"e":1E+2,"big":12345678901234567890.123456789,"a":[2.000]}'


def test_readers_print_values_with_headers_as_stored(tmp_path):
    log = str(tmp_path / "log")
    line = '{"key":"k","value":' + VALUE + ',"headers":{"op":"c"}}\n'
    run_cli("produce", log, "--envelope", input=line, check=True)
    assert run_cli("consume", log, "--value", check=True).stdout == VALUE.encode() + b"\n"
    assert run_cli("consume", log, "--format", r"%s\n", check=True).stdout == VALUE.encode() + b"\n"
    assert run_cli("consume", log, "--value", "--where", "n > 1", check=True).stdout == VALUE.encode() + b"\n"
    assert run_cli("tail", log, "--value", check=True).stdout == VALUE.encode() + b"\n"
    out = str(tmp_path / "out")
    run_cli("replay", log, "--out", out, check=True)
    (stored,) = open(f"{out}/p0/00000000000000000000.jsonl").read().splitlines()
    assert stored.endswith(',"value":' + VALUE + ',"headers":{"op":"c"}}')


def test_long_decimals_are_values_and_round_trip_through_envelopes(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    r = run_cli("produce", a, input="12345678901234567890.5\n" + VALUE + "\n")
    assert r.returncode == 0, r.stderr
    piped = run_cli("consume", a, check=True).stdout
    r = run_cli("produce", b, "--envelope", input=piped)
    assert r.returncode == 0, r.stderr
    assert run_cli("consume", b, "--value", check=True).stdout == f"12345678901234567890.5\n{VALUE}\n".encode()
    # integers beyond 64 bits (a `numeric` capture wrote) are values too, stored and copied as written,
    # and a key taken from one is its exact decimal text
    big = '{"id":18446744073709551616,"n":-123456789012345678901234567890}'
    run_cli("produce", a, "--key-field", "id", input=f"123456789012345678901234567890\n{big}\n", check=True)
    assert [r["key"] for r in log_records(a)][2:] == [None, "18446744073709551616"]
    run_cli("produce", b, "--envelope", input=run_cli("consume", a, "--from", "2", check=True).stdout, check=True)
    assert run_cli("consume", b, "--value", "--from", "2", check=True).stdout == \
        f"123456789012345678901234567890\n{big}\n".encode()
